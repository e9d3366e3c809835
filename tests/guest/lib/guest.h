/* Freestanding C guest library: the one header a C test guest includes (types, I/O, console, asserts, exceptions, SMP, PCI, virtio, CPL3, time). */
#ifndef GUEST_LIB_H
#define GUEST_LIB_H

/*
 * Runtime model (see entry.S): the PVH entry switches to 64-bit long mode with every byte of
 * the first 4 GiB identity-mapped by user-accessible 2 MiB pages, so code and data are the
 * same at CPL0 and CPL3 and physical addresses are pointers. guest_main() is called at CPL0
 * with interrupts off; guest_run_user() drops to CPL3 with IOPL=3 for the rest of the run
 * (port I/O keeps working there, see guest_run_user). Built as NAME.bzImage (guests.mk), the
 * same guest boots through the Linux boot protocol's 64-bit entry instead and joins the same
 * path; guest_boot_params() then gives the zero page.
 * One vCPU runs unless the guest starts the others (smp_start_aps). Nothing here uses SYSCALL or
 * INT n (they do not work on PVM hosts).
 *
 * A test guest checks its own results (the KVM selftests' way): the guest's C code asserts
 * what it expects, with GUEST_ASSERT, GUEST_ASSERT_EQ or GUEST_FAIL, and reports one status
 * through lkvm's exit port (lkvm-exit, port 0x508: include/lkvm/initcfg.h), which every VM has.
 * What the guest must know to judge (the CPU count, whether the host has SMAP, a PVM host) the
 * host script passes on the command line (cmdline_get, cmdline_u64); what only the host can
 * see (lkvm's messages, --stats counters, a tap's counters) the script checks after the run.
 * The script then checks one status: 0 (run_guest's pass, tests/integration/lib.sh) or 4.
 *
 * Ways out (they work at CPL0 and CPL3 alike, and on any CPU):
 *   guest_done()      prints "GUEST DONE" and reports status 0 through the exit port (lkvm
 *                     prints "guest exited with 0 (lkvm-exit)" and exits 0);
 *   guest_fail(...)   prints "GUEST FAIL file:line: message" on the console and reports
 *                     "assertion failed" (LKVM_EXIT_GUEST_ASSERT, with the line) through the
 *                     exit port: lkvm exits 4, EXIT_GUEST_ASSERT, and says "guest assertion
 *                     failed at line N"; GUEST_ASSERT(cond) ("GUEST FAIL file:line: cond")
 *                     uses it, GUEST_ASSERT_EQ(a, b) its twin guest_fail_eq ("GUEST FAIL
 *                     file:line: a == b: a=0x.. b=0x..", the values also sent to lkvm, whose
 *                     line shows them). The text stays on the console: only numbers reach lkvm;
 *   guest_panic()     writes the ISA pvpanic port 0x505 (lkvm exits 2), printing nothing.
 * An exception prints "GUEST EXCEPTION vector=.. rip=.. err=.." and panics (lkvm exits 2).
 */

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef signed char s8;
typedef short s16;
typedef int s32;
typedef long long s64;
typedef unsigned long size_t;
typedef unsigned long uintptr_t;
typedef _Bool bool;
#define true 1
#define false 0
#define NULL ((void *)0)

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define ALIGN_UP(x, a) (((x) + (a)-1) & ~((__typeof__(x))(a)-1))
#define barrier() __asm__ __volatile__("" ::: "memory")
#define mb() __asm__ __volatile__("mfence" ::: "memory")
#define READ_ONCE(x) (*(const volatile __typeof__(x) *)&(x))
#define WRITE_ONCE(x, v) (*(volatile __typeof__(x) *)&(x) = (v))
#define __noreturn __attribute__((noreturn))
#define __printf(a, b) __attribute__((format(printf, a, b)))

/* ---- entry points ---- */

/* Provided by the guest; called at CPL0, interrupts off. Returning ends the run with guest_done(). */
void guest_main(void);

/* ---- port and memory-mapped I/O ---- */

static inline void outb(u16 port, u8 v)
{
	__asm__ __volatile__("outb %0, %1" ::"a"(v), "Nd"(port));
}
static inline void outw(u16 port, u16 v)
{
	__asm__ __volatile__("outw %0, %1" ::"a"(v), "Nd"(port));
}
static inline void outl(u16 port, u32 v)
{
	__asm__ __volatile__("outl %0, %1" ::"a"(v), "Nd"(port));
}
static inline u8 inb(u16 port)
{
	u8 v;
	__asm__ __volatile__("inb %1, %0" : "=a"(v) : "Nd"(port));
	return v;
}
static inline u16 inw(u16 port)
{
	u16 v;
	__asm__ __volatile__("inw %1, %0" : "=a"(v) : "Nd"(port));
	return v;
}
static inline u32 inl(u16 port)
{
	u32 v;
	__asm__ __volatile__("inl %1, %0" : "=a"(v) : "Nd"(port));
	return v;
}

/* One access of exactly that width (volatile, so the compiler neither splits nor merges it). */
static inline u8 mmio_read8(u64 a)
{
	return *(volatile u8 *)a;
}
static inline u16 mmio_read16(u64 a)
{
	return *(volatile u16 *)a;
}
static inline u32 mmio_read32(u64 a)
{
	return *(volatile u32 *)a;
}
static inline void mmio_write8(u64 a, u8 v)
{
	*(volatile u8 *)a = v;
}
static inline void mmio_write16(u64 a, u16 v)
{
	*(volatile u16 *)a = v;
}
static inline void mmio_write32(u64 a, u32 v)
{
	*(volatile u32 *)a = v;
}
/* 64-bit registers as two 32-bit halves, low first (what virtio-pci allows for queue addresses). */
static inline void mmio_write64(u64 a, u64 v)
{
	mmio_write32(a, (u32)v);
	mmio_write32(a + 4, (u32)(v >> 32));
}

static inline u64 rdtsc(void)
{
	u32 lo, hi;
	__asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
	return ((u64)hi << 32) | lo;
}

static inline void cpuid(u32 leaf, u32 sub, u32 *a, u32 *b, u32 *c, u32 *d)
{
	__asm__ __volatile__("cpuid"
			     : "=a"(*a), "=b"(*b), "=c"(*c), "=d"(*d)
			     : "a"(leaf), "c"(sub));
}

static inline void cpu_relax(void)
{
	__asm__ __volatile__("pause" ::: "memory");
}

/* CPL0 only. */
static inline void wrmsr(u32 msr, u64 v)
{
	__asm__ __volatile__("wrmsr" ::"c"(msr), "a"((u32)v), "d"((u32)(v >> 32)));
}

static inline unsigned cpl(void)
{
	u16 cs;
	__asm__ __volatile__("mov %%cs, %0" : "=r"(cs));
	return cs & 3;
}

static inline unsigned iopl(void)
{
	u64 f;
	__asm__ __volatile__("pushfq; popq %0" : "=r"(f));
	return (f >> 12) & 3;
}

/* ---- string helpers (also what the compiler may call) ---- */

void *memset(void *d, int c, size_t n);
void *memcpy(void *d, const void *s, size_t n);
void *memmove(void *d, const void *s, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
int strcmp(const char *a, const char *b);
int strncmp(const char *a, const char *b, size_t n);

/* ---- console (8250 COM1 at 0x3f8) ---- */

typedef __builtin_va_list va_list;
#define va_start(ap, last) __builtin_va_start(ap, last)
#define va_arg(ap, type) __builtin_va_arg(ap, type)
#define va_end(ap) __builtin_va_end(ap)

void serial_init(void); /* called before guest_main: FIFO on when the UART has one */
void serial_putc(char c);
void serial_puts(const char *s); /* whole, under a lock shared by the CPUs */
/* For a report on the way to a panic: an exception taken inside serial_puts must not wait for
 * the lock its own CPU holds. */
void serial_break_lock(void);
/* Input from the host's terminal (lkvm's stdin), polled: LSR.DR says a byte waits in the FIFO. */
bool serial_can_read(void);
u8 serial_getc(void); /* waits for the next byte */
/* %d %i %u %x %X %p %s %c %% with the l / ll length modifiers, width, '0' and '-' flags. */
int gvsnprintf(char *buf, size_t size, const char *fmt, va_list ap);
int gsnprintf(char *buf, size_t size, const char *fmt, ...) __printf(3, 4);
int gprintf(const char *fmt, ...) __printf(1, 2);

/* hvc0: virtio-console's port over virtio-pci (lkvm --console virtio), receive side, polled.
 * hvc_init: false when there is no such device. hvc_poll: the next typed byte, -1 when none. */
bool hvc_init(void);
int hvc_poll(void);

/* ---- results ("ucall" channel) ---- */

/* Status 0 through the exit port (lkvm exits 0). */
void guest_done(void) __noreturn;
/* Writes "panicked" to the ISA pvpanic port (lkvm exits 2), printing nothing. */
void guest_panic(void) __noreturn;
/* "GUEST FAIL file:line: message", then "assertion failed" through the exit port (lkvm exits 4). */
void guest_fail(const char *file, int line, const char *fmt, ...) __printf(3, 4) __noreturn;
#define GUEST_FAIL(...) guest_fail(__FILE__, __LINE__, __VA_ARGS__)
#define GUEST_ASSERT(cond)                                           \
	do {                                                         \
		if (!(cond))                                         \
			guest_fail(__FILE__, __LINE__, "%s", #cond); \
	} while (0)
/* GUEST_FAIL's line with both values, which also reach lkvm's line (LKVM_EXIT_ASSERT_VALUE). */
void guest_fail_eq(const char *file, int line, const char *a_expr, const char *b_expr, u64 a,
		   u64 b) __noreturn;
#define GUEST_ASSERT_EQ(a, b)                                              \
	do {                                                               \
		u64 a_ = (u64)(a), b_ = (u64)(b);                          \
		if (a_ != b_)                                              \
			guest_fail_eq(__FILE__, __LINE__, #a, #b, a_, b_); \
	} while (0)

/* ---- boot information ---- */

/* The zero page (struct boot_params) when booted as a bzImage (NAME.bzImage), else NULL. */
const u8 *guest_boot_params(void);
#define BP_EXT_CMD_LINE_PTR 0x0c8
#define BP_E820_ENTRIES 0x1e8
#define BP_VERSION 0x206
#define BP_CMD_LINE_PTR 0x228
#define BP_SETUP_DATA 0x250
#define BP_E820_TABLE 0x2d0
#define BP_E820_MAX 128

/* The kernel command line lkvm passed (PVH start info or zero page), "" when none. */
const char *guest_cmdline(void);
/* The memory map lkvm passed (PVH start info or the zero page's e820 table): up to max
 * entries into out; returns how many. */
#define E820_RAM 1
struct mem_range {
	u64 addr, size;
	u32 type;
};
int guest_memmap(struct mem_range *out, int max);
/* Value of the last "key=value" word on the command line into buf (NUL-terminated); false if absent. */
bool cmdline_get(const char *key, char *buf, size_t len);
/* Decimal (or 0x hex) value of key, or def when absent or malformed. */
u64 cmdline_u64(const char *key, u64 def);
/* The decimal (or 0x hex) number at *s; *s moves past its digits. */
u64 parse_u64(const char **s);
/* Bytes of RAM below 4 GiB from the memory map (usable type 1 entries, highest end). */
u64 guest_ram_top(void);

/* Zeroed guest memory after the image, align a power of two; fails the run when RAM is short. */
void *galloc(size_t size, size_t align);

/* ---- privilege ---- */

/* Runs fn(arg) at CPL3 with IOPL=3 and interrupts off, on its own stack; never returns.
 * If fn returns, the run ends with guest_done(). CPL0 only.
 * A PVM host runs CPL3 with the hardware IOPL forced to 0 (iopl() reads 0 there), so IN/OUT
 * at CPL3 fault; the #GP handler completes them at CPL0 and resumes, counting them in
 * lib_io_emulated. Port I/O therefore works at CPL3 everywhere, but costs a round trip
 * through the (emulated) kernel on PVM: keep it out of hot loops (MMIO is direct). */
void guest_run_user(void (*fn)(void *), void *arg) __noreturn;
extern u64 lib_io_emulated;

/* ---- exceptions and interrupts ---- */

/* What the exception stubs save (entry.S): 15 registers, the vector and error code (0 where the
 * CPU pushes none), then the CPU's frame. A handler may change it: IRETQ resumes from it. */
struct exc_frame {
	u64 r15, r14, r13, r12, r11, r10, r9, r8, rbp, rdi, rsi, rdx, rcx, rbx, rax;
	u64 vector, error;
	u64 rip, cs, rflags, rsp, ss;
};
typedef void (*exc_handler_t)(struct exc_frame *f);
/* Routes vector (0-255) to fn, at CPL0 with interrupts off, on every CPU; NULL restores the
 * default (a #GP from CPL3 port I/O is completed, anything else prints GUEST EXCEPTION and
 * fails). When fn returns, IRETQ resumes the interrupted code at f->rip. CPL0 only. */
void guest_set_handler(unsigned vector, exc_handler_t fn);
static inline void irq_enable(void)
{
	__asm__ __volatile__("sti" ::: "memory");
}
static inline void irq_disable(void)
{
	__asm__ __volatile__("cli" ::: "memory");
}

/* ---- local APIC (xAPIC MMIO) and other CPUs ---- */

#define LAPIC_BASE 0xfee00000ull
#define LAPIC_ID 0x20
#define LAPIC_EOI 0xb0
#define LAPIC_SVR 0xf0
#define LAPIC_ICR_LO 0x300
#define LAPIC_ICR_HI 0x310
#define LAPIC_LVT_TIMER 0x320
#define LAPIC_LVT_LINT0 0x350
#define LAPIC_TIMER_INIT 0x380
#define LAPIC_TIMER_CUR 0x390
#define LAPIC_TIMER_DIV 0x3e0
#define LAPIC_LVT_MASKED (1u << 16)
static inline u32 lapic_read(u32 reg)
{
	return mmio_read32(LAPIC_BASE + reg);
}
static inline void lapic_write(u32 reg, u32 v)
{
	mmio_write32(LAPIC_BASE + reg, v);
}
static inline u32 lapic_id(void)
{
	return lapic_read(LAPIC_ID) >> 24;
}

/* Enabled processors in the MP table lkvm wrote below 1 MiB; 0 when there is none. */
int mp_count_cpus(void);
/* Sends INIT, SIPI, SIPI to every other CPU (the start-up code goes to 0x30000). Each AP enters
 * 64-bit mode on this CPU's GDT, IDT and page tables (no TSS: it stays at CPL0), on a stack of
 * its own (up to max_aps of them), and calls fn(its LAPIC id) with interrupts off; when fn
 * returns it halts. Needs clock_init() (it waits between the IPIs). CPL0 only. */
void smp_start_aps(void (*fn)(u32 apic_id), unsigned max_aps);

/* ---- time ---- */

/* Finds the TSC rate once (CPL0: may program MSRs). Returns the source's name. */
const char *clock_init(void);
extern u64 tsc_hz;
const char *clock_source(void);
/* Busy-waits us microseconds on the TSC (after clock_init). */
void udelay(u64 us);
/* kvm-clock kept running (CPL0: registers the pvclock page with KVM); false without kvm-clock. */
bool kvmclock_start(void);
/* kvm-clock in ns as the guest sees it (what Linux keeps time with), and the TSC value it was
 * computed from when tsc is not NULL. Any CPL, after kvmclock_start(). */
u64 kvmclock_read(u64 *tsc);
#define PVCLOCK_TSC_STABLE 0x1
#define PVCLOCK_GUEST_STOPPED 0x2 /* set by KVM after the VMM's KVM_KVMCLOCK_CTRL (a pause) */
u8 kvmclock_flags(void);
void kvmclock_clear_flags(u8 bits);
/* Split so no 128-bit division (a libgcc call) is needed; exact for rates below 18 GHz. */
static inline u64 tsc_to_ns(u64 t)
{
	return t / tsc_hz * 1000000000ull + t % tsc_hz * 1000000000ull / tsc_hz;
}
static inline u64 ns_to_tsc(u64 ns)
{
	return ns / 1000000000ull * tsc_hz + ns % 1000000000ull * tsc_hz / 1000000000ull;
}

/* ---- PCI (configuration mechanism #1, bus 0) ---- */

struct pci_dev {
	u8 bus, dev, fn;
	u16 vendor, device;
};

#define PCI_COMMAND 0x04
#define PCI_CMD_IO 0x1
#define PCI_CMD_MEM 0x2
#define PCI_CMD_MASTER 0x4
#define PCI_STATUS 0x06
#define PCI_STATUS_CAPS 0x10
#define PCI_CLASS_REV 0x08
#define PCI_HEADER_TYPE 0x0e
#define PCI_BAR0 0x10
#define PCI_CAP_PTR 0x34
#define PCI_CAP_VNDR 0x09

u32 pci_read32(const struct pci_dev *d, u16 off);
u16 pci_read16(const struct pci_dev *d, u16 off);
u8 pci_read8(const struct pci_dev *d, u16 off);
void pci_write32(const struct pci_dev *d, u16 off, u32 v);
void pci_write16(const struct pci_dev *d, u16 off, u16 v);
void pci_write8(const struct pci_dev *d, u16 off, u8 v);
/* Calls fn for every function present on bus 0 (fn returns true to stop); returns how many were seen. */
int pci_scan(bool (*fn)(const struct pci_dev *d, void *arg), void *arg);
/* The first function with that id on bus 0; false when there is none. */
bool pci_find(u16 vendor, u16 device, struct pci_dev *out);
/* BAR i's address (memory: 64-bit aware; I/O: the port). is_io may be NULL. 0 when unset. */
u64 pci_bar(const struct pci_dev *d, int i, bool *is_io);
void pci_enable(const struct pci_dev *d, u16 cmd_bits);
/* Offset of the next capability with that id after `after` (0: from the start); 0 when none. */
u8 pci_find_cap(const struct pci_dev *d, u8 id, u8 after);

/* ---- virtio (modern virtio-pci, split virtqueues) ---- */

#define VIRTIO_F_VERSION_1 32
#define VIRTIO_F_RING_EVENT_IDX 29
#define VIRTIO_F_INDIRECT_DESC 28
#define VIRTIO_NET_F_MAC 5

#define VIRTQ_DESC_F_NEXT 1
#define VIRTQ_DESC_F_WRITE 2
#define VIRTQ_DESC_F_INDIRECT 4
#define VIRTQ_AVAIL_F_NO_INTERRUPT 1
#define VIRTQ_USED_F_NO_NOTIFY 1

struct virtq_desc {
	u64 addr;
	u32 len;
	u16 flags;
	u16 next;
};
struct virtq_avail {
	u16 flags;
	u16 idx;
	u16 ring[]; /* then used_event */
};
struct virtq_used_elem {
	u32 id;
	u32 len;
};
struct virtq_used {
	u16 flags;
	u16 idx;
	struct virtq_used_elem ring[]; /* then avail_event */
};

struct virtio_pci {
	struct pci_dev pci;
	u64 common, notify, isr, device; /* addresses of the four structures */
	u32 notify_mult;
	u64 offered;  /* what the device offered */
	u64 features; /* negotiated */
};

struct virtq {
	struct virtio_pci *vp;
	u16 index, size;
	struct virtq_desc *desc;
	struct virtq_avail *avail;
	struct virtq_used *used;
	volatile u16 *used_event, *avail_event;
	u64 notify_addr;
	bool notify32; /* virtio-mmio: QueueNotify takes 32-bit writes (virtio-pci: 16) */
	bool event_idx;
	u16 free_head, num_free;
	u16 avail_idx;	/* our shadow of avail->idx */
	u16 kicked_idx; /* avail idx at the last kick decision */
	u16 last_used;
	void **token; /* per head */
	u64 kicks;    /* notifies written */
};

struct vq_buf {
	u64 addr;
	u32 len;
};

/* Finds the capabilities, enables memory decode and bus mastering; false if the common, notify or
 * ISR one is missing (device stays 0 for a device without a device-specific configuration). */
bool virtio_pci_init(struct virtio_pci *vp, const struct pci_dev *d);
/* The first virtio device 1af4:device_id (what: its name in the reason) made ready with
 * virtio_pci_init: NULL, or why not in one line for the caller's GUEST_FAIL (which names the
 * caller's line). */
const char *virtio_pci_find(struct virtio_pci *vp, u16 device_id, const char *what);
void virtio_reset(struct virtio_pci *vp);
/* ACKNOWLEDGE, DRIVER, features = offered & want (VERSION_1 required), FEATURES_OK checked. */
bool virtio_negotiate(struct virtio_pci *vp, u64 want);
/* Queue idx with up to max_size entries (0: the device's maximum); interrupts off (no MSI-X
 * vector, NO_INTERRUPT / used_event). Returns false when the device has no such queue. */
bool virtq_setup(struct virtio_pci *vp, struct virtq *vq, u16 idx, u16 max_size);
/* After a device reset and a new negotiation: the same queue on the same memory, empty
 * again (no allocation, so a guest can reset as often as it likes). */
void virtq_resetup(struct virtq *vq);
void virtio_driver_ok(struct virtio_pci *vp);
u8 virtio_status(struct virtio_pci *vp);
u16 virtio_num_queues(struct virtio_pci *vp);
u8 virtio_cfg_read8(struct virtio_pci *vp, u32 off);

/* Adds a chain of nout device-readable then nin device-writable buffers; publishes it in
 * the avail ring (no kick). Returns false when the ring lacks descriptors. */
bool virtq_add(struct virtq *vq, const struct vq_buf *bufs, int nout, int nin, void *token);
/* The same chain through an indirect table (VIRTIO_F_INDIRECT_DESC): written into table
 * (nout + nin entries of guest memory the caller keeps until the chain is used), one ring
 * descriptor. */
bool virtq_add_indirect(struct virtq *vq, struct virtq_desc *table, const struct vq_buf *bufs,
			int nout, int nin, void *token);
/* Notifies the device if it asked for it (EVENT_IDX avail_event or used->flags); true if it did. */
bool virtq_kick(struct virtq *vq);
/* Next completed chain's token (its descriptors are free again) and written length; NULL if none. */
void *virtq_get(struct virtq *vq, u32 *len);
static inline bool virtq_has_used(const struct virtq *vq)
{
	return READ_ONCE(vq->used->idx) != vq->last_used;
}

#endif

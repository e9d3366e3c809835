/* The virtual machine: KVM file descriptors, guest memory, buses, vCPUs, configuration and exit state. */
#ifndef LKVM_KVM_H
#define LKVM_KVM_H

#include <pthread.h>
#include <stdatomic.h>
#include <linux/kvm.h>

#include "lkvm/io.h"
#include "lkvm/kvm-config.h"
#include "lkvm/mem.h"
#include "lkvm/util.h"

#define LKVM_MAX_CPUS 64

/* Exit statuses of `lkvm run`. */
enum {
	EXIT_GUEST_OK = 0,    /* guest powered off or rebooted, or --exit-on text was seen */
	EXIT_LKVM_ERROR = 1,  /* bad input, host problem, or an exit lkvm cannot handle */
	EXIT_GUEST_PANIC = 2, /* pvpanic reported a guest panic */
	EXIT_STOPPED = 3,     /* `lkvm stop` asked for it (an orderly shutdown) */
	EXIT_GUEST_ASSERT =
		4, /* a test guest's assertion failed (lkvm-exit, LKVM_EXIT_GUEST_ASSERT) */
	/* the console printed a --fail-on line (a kernel bug) */
	EXIT_FAIL_ON = 5,
	EXIT_TIMEOUT = 124, /* --timeout expired (the timeout(1) convention) */
	EXIT_GUEST_NO_STATUS =
		125, /* lkvm's guest init could not run the command (git bisect's "skip") */
};

/* Who ended the run (--status-file's ended=, builtin/run-status.c): kvm_request_end says it;
 * kvm_request_exit takes it from a status that tells it alone (1, 2, 3, 4, 124). */
enum kvm_end {
	KVM_END_OTHER,	  /* a status that does not tell, given without its kind */
	KVM_END_COMMAND,  /* CMD (or a test guest) reported its status through the exit port */
	KVM_END_INIT,	  /* lkvm's init could not run CMD (125) */
	KVM_END_ASSERT,	  /* a test guest's assertion failed (4) */
	KVM_END_PANIC,	  /* the guest panicked (2) */
	KVM_END_TIMEOUT,  /* --timeout (124) */
	KVM_END_ERROR,	  /* lkvm's own error (1) */
	KVM_END_STOP,	  /* lkvm stop, a snapshot's stop, gdb's kill (3) */
	KVM_END_SIGNAL,	  /* a signal to lkvm (128+N) */
	KVM_END_REBOOT,	  /* the guest reset itself (i8042, port 0x92 or 0xcf9, triple fault) */
	KVM_END_POWEROFF, /* the guest powered off */
	KVM_END_EXIT_ON,  /* --exit-on's text was printed */
	KVM_END_QUIT,	  /* Ctrl-a x */
	KVM_END_CLOSED,	  /* CMD's stdout or stderr was closed on the host (141) */
	KVM_END_SANDBOX,  /* the sandbox stopped a forbidden system call (159; no request) */
	KVM_END_FAIL_ON,  /* the console printed a --fail-on line (5) */
	KVM_END_NR
};

struct kvm_cpu;
struct gdb_vm;

/* GSI routing (x86/irq.c). KVM's routing table is per VM and KVM_SET_GSI_ROUTING
 * replaces all of it, so lkvm keeps the whole table: KVM's default routes for GSIs 0-23
 * (IOAPIC pins, PICs for 0-15) plus one MSI route per allocated GSI from 24 up. */
#define KVM_IRQ_MSI_GSI_BASE 24
#define KVM_IRQ_MSI_ROUTES 1024 /* GSIs 24..1047; KVM allows 4096 routes */

struct kvm_msi_route {
	u64 addr;
	u32 data;
	bool used;  /* GSI allocated */
	bool valid; /* addr/data programmed: part of the table sent to KVM */
};
struct term;
struct pci_bus;
struct kvm_dev;

/* Counters of the host-instruction completions (x86/emulate.c); see `--stats`. */
enum emu_insn { EMU_INT3, EMU_CLAC, EMU_STAC, EMU_FWAIT, EMU_NR };

/* lkvm run's set-up, step by step (`--debug` prints it): each step's name and when it ended. */
#define KVM_STARTUP_MAX 20
struct kvm_startup {
	int n;
	const char *step[KVM_STARTUP_MAX]; /* static strings */
	u64 ns[KVM_STARTUP_MAX];
};

struct kvm {
	int sys_fd;
	int vm_fd;
	int vcpu_mmap_size;
	struct kvm_config cfg;
	struct guest_mem mem;

	struct io_bus pio;
	struct io_bus mmio;

	int nr_cpus;
	struct kvm_cpu *cpus[LKVM_MAX_CPUS];

	bool pvm_quirks; /* host needs instruction completions */
	/* A digest of the CPUID table lkvm gave vCPU 0 (x86_setup_cpuid), which a snapshot records
	 * and a restore compares: KVM's own copy (KVM_GET_CPUID2) changes as the guest runs
	 * (OSXSAVE, XSAVE sizes), so it is taken from what lkvm set. */
	u8 cpuid_digest[32];
	/* The guest's TSC as the host's threads see it: guest TSC = host TSC + offset, exact
	 * (err_ns 0) where KVM reports the offset, else estimated within err_ns; khz 0: unknown.
	 * Read from vCPU 0 before the guest runs, only when a NIC traces (-n trace=on:
	 * kvm_run_setup); a pause shifts the real offset later (pause.c), this stays. */
	struct kvm_guest_tsc {
		u64 khz, offset, err_ns;
	} guest_tsc;
	atomic_ullong emu_hits[EMU_NR];

	struct term *term;
	struct pci_bus *pci;
	struct kvm_dev *devs; /* the device list (dev.h), exited by kvm_destroy */
	/* Where terminal input goes (term_set_input): set by the console device at its init
	 * (the UART; virtio-console, added later, when it is the console), before the
	 * terminal's thread starts; cleared by its exit, after that thread ended. */
	struct console_input {
		size_t (*fn)(void *dev, const u8 *buf, size_t n); /* takes what it can */
		void *dev;
	} console_in;

	/* What a guest's own reset or power-off ends the run with: EXIT_GUEST_OK, or
	 * EXIT_GUEST_NO_STATUS where the status must come from the exit port (run -- CMD). */
	int guest_end_status;

	/* Ending the run: the first kvm_request_exit wins; stop_fd wakes the main thread. */
	atomic_bool stopping;
	atomic_int exit_status;
	int exit_by; /* enum kvm_end: set with exit_reason, by the request that won */
	char exit_reason[256];
	/* The first --fail-on line the console printed, escaped (failon.h); "": none. Written
	 * once, under the terminal's output lock; read after the vCPUs stopped. */
	char fail_on_line[FAILON_TEXT_MAX];
	int stop_fd; /* eventfd */
	/* /proc/self/statm, opened by the run before the sandbox (which lets threads read only
	 * the fds they know and open nothing); -1: lkvm's memory is not reported. */
	int statm_fd;

	/* GSI allocator and MSI routes; irq_lock is usable zero-initialised (glibc's
	 * PTHREAD_MUTEX_INITIALIZER is all zeroes, and kvm_create starts from memset 0). */
	pthread_mutex_t irq_lock;
	struct kvm_msi_route msi_routes[KVM_IRQ_MSI_ROUTES];

	/* Threads install their seccomp filter when they start (sandbox_enter); set by the
	 * run once privileges are dropped, before any thread starts. */
	bool sandbox;

	u64 start_ns; /* process start, for timing reports */
	atomic_ullong first_insn_ns;
	struct kvm_startup startup; /* lkvm run's set-up steps (kvm_mark) */
	/* Guest RAM's memslots are given to KVM by a thread of their own while the machine is
	 * built (KVM_SET_USER_MEMORY_REGION waits out an SRCU grace period: 4-9 ms on a PVM host,
	 * whatever the size); kvm_ram_ready waits for it. */
	pthread_t memslot_thread;
	bool memslot_pending;
	int memslot_ret;
	char memslot_err[96];

	/* Parking vCPUs (pause, debug): park_req asks every started vCPU to wait in user space
	 * on unpark_cond; each one counts itself in `parked` and signals park_cond. Usable
	 * zero-initialised, like irq_lock (timed waits use pthread_cond_clockwait). */
	pthread_mutex_t park_lock;
	pthread_cond_t park_cond, unpark_cond;
	atomic_bool park_req;
	int parked;	       /* under park_lock */
	atomic_int nr_started; /* vCPU threads started (they end only when stopping) */

	/* Pause state: under pause_lock (zero-initialised is usable), for its two callers, the
	 * control thread (lkvm pause/resume) and the gdb server (a gdb stop is a pause);
	 * pause_owner says whose pause it is (enum kvm_pauser). */
	pthread_mutex_t pause_lock;
	int pause_owner;
	atomic_bool paused;
	u64 paused_since_ns, paused_total_ns;
	u64 clock_at_pause; /* KVM_GET_CLOCK at pause (kvm-clock ns) */
	bool clock_saved;
	u64 host_tsc_at_pause;

	/* The gdb target (x86/gdb-target.c) when --gdb is on, else NULL: set before the vCPUs
	 * start, cleared after they ended; the vCPUs' debug exits go to it. */
	struct gdb_vm *gdb;
};

/* Open /dev/kvm, check the API, create the VM with in-kernel irqchip and PIT, map RAM.
 * Returns 0 or -errno with a one-line reason in err. */
/* lkvm's memory in KiB: its resident set, of it the guest RAM pages that are resident and the
 * pages of files (its binary and the shared libraries, shared with every other process that
 * maps them). 0, or -errno (no statm_fd, unreadable). Any thread. */
struct kvm_mem_usage {
	u64 rss_kib, guest_kib, files_kib;
};
int kvm_mem_usage(struct kvm *kvm, struct kvm_mem_usage *u) __must_check;

/* The start-up profile: a step of the set-up ended now. Main thread, before the vCPUs run;
 * steps beyond KVM_STARTUP_MAX are dropped; kvm_create keeps those marked before it. kvm_startup_format writes the steps,
 * each with its own time, and the first guest instruction's, in ms after start_ns. */
void kvm_mark(struct kvm *kvm, const char *step);
void kvm_startup_format(const struct kvm *kvm, char *buf, size_t len);

/* Guest RAM is KVM's: waits for the memslots' thread (kvm_create started it). Before any vCPU
 * runs. 0, or its -errno with the reason in err. kvm_destroy waits too, if nobody did. */
int kvm_ram_ready(struct kvm *kvm, char *err, size_t errlen) __must_check;

int kvm_create(struct kvm *kvm, const struct kvm_config *cfg, char *err,
	       size_t errlen) __must_check;
/* Exits every registered device (kvm_devs_exit) in reverse order, then frees the vCPUs, guest
 * memory, buses and file descriptors: everything the VM made. The vCPU threads are stopped
 * before, by the run that started them (kvm_run_teardown: kvm_cpu_stop_all). */
void kvm_destroy(struct kvm *kvm);

/* Raise/lower a GSI on the in-kernel irqchip. */
int kvm_irq_line(struct kvm *kvm, u32 gsi, int level);

/* The only callers of KVM_IOEVENTFD and KVM_IRQFD. kvm_has_ioeventfd: there is a VM and KVM
 * offers KVM_CAP_IOEVENTFD. kvm_ioeventfd: the guest's write ev signals fd instead of exiting
 * (assign), or no more (the same ev and fd, !assign). kvm_irqfd: a signal on fd injects GSI
 * gsi (assign), or no more. Both 0 or -errno; -ENODEV without a VM. */
bool kvm_has_ioeventfd(struct kvm *kvm);
int kvm_ioeventfd(struct kvm *kvm, const struct kvm_ioevent *ev, int fd, bool assign);
int kvm_irqfd(struct kvm *kvm, int fd, u32 gsi, bool assign);

/* Allocate a GSI >= KVM_IRQ_MSI_GSI_BASE for an MSI route (not yet routed). Returns
 * the GSI or -ENOSPC. Thread-safe; works without a VM (vm_fd < 0: no ioctl). */
int kvm_gsi_alloc(struct kvm *kvm) __must_check;
/* Drop the GSI's route (re-sending the table if it had one) and free it. */
void kvm_gsi_free(struct kvm *kvm, int gsi);
/* Point an allocated GSI at an MSI message and send the whole table (default
 * IOAPIC/PIC routes included) with KVM_SET_GSI_ROUTING. Returns 0 or -errno (the
 * GSI is left unrouted then). */
int kvm_gsi_route_msi(struct kvm *kvm, int gsi, u64 addr, u32 data) __must_check;

/* Pause: park the vCPUs (timeout_ms at most), quiesce the device threads, and freeze the guest's
 * clocks (kvm-clock through KVM_GET_CLOCK/KVM_SET_CLOCK, the TSC through each vCPU's TSC offset
 * where KVM offers KVM_VCPU_TSC_OFFSET, KVM_KVMCLOCK_CTRL so the guest's watchdogs know). Resume
 * undoes it in reverse. Both return 0, -EALREADY (already in that state), -ESHUTDOWN (the VM is
 * stopping), -EBUSY (the other owner's pause), or -errno with err. kvm_pause and kvm_resume are
 * the control thread's (PAUSE_CTL). A pause has one owner: only it resumes. gdb's stop of a VM
 * lkvm pause paused takes that pause over (gdb's continue ends it); lkvm pause and resume while
 * gdb holds the VM are refused, so no vCPU runs under gdb's feet. */
enum kvm_pauser { PAUSE_CTL = 1, PAUSE_GDB };
int kvm_pause_by(struct kvm *kvm, enum kvm_pauser who, int timeout_ms, char *err,
		 size_t errlen) __must_check;
int kvm_resume_by(struct kvm *kvm, enum kvm_pauser who, char *err, size_t errlen) __must_check;
int kvm_pause(struct kvm *kvm, int timeout_ms, char *err, size_t errlen) __must_check;
int kvm_resume(struct kvm *kvm, char *err, size_t errlen) __must_check;
/* Nanoseconds spent paused so far, the current pause included (read under pause_lock: any thread). */
u64 kvm_paused_ns(struct kvm *kvm);
/* Every vCPU's registers and last exit as text (vCPUs parked briefly unless paused). Returns a
 * malloc'd string, or NULL with err. */
char *kvm_debug_dump(struct kvm *kvm, int timeout_ms, char *err, size_t errlen);

/* Ask the run to end with `status`; only the first request counts. Thread-safe. */
void kvm_request_exit(struct kvm *kvm, int status, const char *fmt, ...) __printf(3, 4);
/* The same, saying who ended it where the status alone does not (enum kvm_end). */
void kvm_request_end(struct kvm *kvm, enum kvm_end by, int status, const char *fmt, ...)
	__printf(4, 5);

#endif

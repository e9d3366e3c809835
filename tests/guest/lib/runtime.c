/* C guest runtime: start-up after entry.S, the result channel (done/fail), exceptions, command line, memory, the CPL3 switch. */
#include "guest.h"
#include "lkvm/initcfg.h" /* the exit port's word */

#define COM1 0x3f8
#define I8042_CMD 0x64
#define I8042_RESET 0xfe
#define PVPANIC_PORT 0x505
#define PVPANIC_PANICKED 0x1
#define PVH_MAGIC 0x336ec578

struct pvh_start_info {
	u32 magic, version, flags, nr_modules;
	u64 modlist_paddr, cmdline_paddr, rsdp_paddr, memmap_paddr;
	u32 memmap_entries, reserved;
};

struct pvh_memmap_entry {
	u64 addr, size;
	u32 type, reserved;
};

extern u32 pvh_start_info;
extern u64 lib_boot_params;
extern char __image_end[];
void lib_start(void) __noreturn;
void lib_exception(struct exc_frame *f);
void lib_enter_user(void *rip, u64 rsp, void *arg) __noreturn;

static u64 heap_next;

/*
 * ---- string helpers (also what the compiler calls for struct copies) ----
 * memset and memcpy are one REP STOSB / MOVSB: native at CPL3, and at CPL0, where the PVM
 * host emulates every instruction, one emulated instruction instead of a loop of them.
 */

void *memset(void *d, int c, size_t n)
{
	void *p = d;

	__asm__ __volatile__("rep stosb" : "+D"(p), "+c"(n) : "a"(c) : "memory");
	return d;
}

void *memcpy(void *d, const void *s, size_t n)
{
	void *p = d;

	__asm__ __volatile__("rep movsb" : "+D"(p), "+S"(s), "+c"(n) : : "memory");
	return d;
}

void *memmove(void *d, const void *s, size_t n)
{
	u8 *p = d;
	const u8 *q = s;

	if (p < q)
		return memcpy(d, s, n);
	while (n--)
		p[n] = q[n];
	return d;
}

int memcmp(const void *a, const void *b, size_t n)
{
	const u8 *p = a, *q = b;

	for (; n; n--, p++, q++)
		if (*p != *q)
			return *p - *q;
	return 0;
}

size_t strlen(const char *s)
{
	size_t n = 0;

	while (s[n])
		n++;
	return n;
}

int strncmp(const char *a, const char *b, size_t n)
{
	for (; n; n--, a++, b++) {
		if (*a != *b)
			return (u8)*a - (u8)*b;
		if (!*a)
			return 0;
	}
	return 0;
}

int strcmp(const char *a, const char *b)
{
	return strncmp(a, b, (size_t)-1);
}

/* ---- ways out ---- */

/* One report through lkvm-exit (include/lkvm/initcfg.h's word); the first ends the run. */
static void exit_report(u32 kind, u32 detail)
{
	outl(LKVM_EXIT_PORT, LKVM_EXIT_WORD(kind, 0, detail));
}

/* Where no exit port answers (QEMU runs net-bench for lkvm bench --qemu) the i8042 reset ends
 * the run; under lkvm the report already has, and lkvm's line says it came through the port
 * (what lib.sh's run_guest checks, so a reset alone never passes for guest_done). */
void guest_done(void)
{
	serial_puts("GUEST DONE\n");
	exit_report(LKVM_EXIT_EXITED, 0);
	for (;;) {
		outb(I8042_CMD, I8042_RESET);
		cpu_relax();
	}
}

void guest_panic(void)
{
	for (;;) {
		outb(PVPANIC_PORT, PVPANIC_PANICKED);
		cpu_relax();
	}
}

void guest_fail(const char *file, int line, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	gvsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	gprintf("GUEST FAIL %s:%d: %s\n", file, line, msg);
	exit_report(LKVM_EXIT_GUEST_ASSERT, line > 0 && line <= 0xffff ? (u32)line : 0);
	guest_panic(); /* without an exit port (QEMU): still a failure */
}

void guest_fail_eq(const char *file, int line, const char *a_expr, const char *b_expr, u64 a, u64 b)
{
	const u64 vals[2] = { a, b };

	gprintf("GUEST FAIL %s:%d: %s == %s: a=0x%llx b=0x%llx\n", file, line, a_expr, b_expr, a,
		b);
	/* The values first, in pieces the exit port's word can carry; lkvm's line shows them. */
	for (u32 i = 0; i < LKVM_EXIT_ASSERT_PIECES; i++)
		outl(LKVM_EXIT_PORT, LKVM_EXIT_WORD(LKVM_EXIT_ASSERT_VALUE, i,
						    (vals[i / 4] >> (i % 4) * 16) & 0xffff));
	exit_report(LKVM_EXIT_GUEST_ASSERT, line > 0 && line <= 0xffff ? (u32)line : 0);
	guest_panic(); /* without an exit port (QEMU): still a failure */
}

u64 lib_io_emulated;
static exc_handler_t handlers[256];

/*
 * Port I/O at CPL3. On a PVM host user mode always runs with the hardware IOPL at 0, whatever
 * IRETQ loaded, so IN and OUT at CPL3 raise #GP(0) there; this completes them at CPL0 and
 * resumes after the instruction (one round trip through the emulated kernel, tens of us).
 * On hosts that honour IOPL=3 they never fault. Handles IN/OUT with an immediate port or DX,
 * 8/16/32 bits (0x66, REX prefixes); string I/O is not completed.
 */
static bool complete_user_io(struct exc_frame *f)
{
	const u8 *ip = (const u8 *)(uintptr_t)f->rip;
	unsigned len = 0, size = 4;
	u16 port;
	u8 op;

	if ((f->cs & 3) != 3 || f->error != 0)
		return false;
	for (;; len++) {
		if (ip[len] == 0x66)
			size = 2;
		else if ((ip[len] & 0xf0) != 0x40) /* REX: no effect on I/O */
			break;
		if (len > 4)
			return false;
	}
	op = ip[len++];
	if (op >= 0xe4 && op <= 0xe7)
		port = ip[len++];
	else if (op >= 0xec && op <= 0xef)
		port = (u16)f->rdx;
	else
		return false;
	if (!(op & 1))
		size = 1;
	if (op & 2) { /* OUT */
		if (size == 1)
			outb(port, (u8)f->rax);
		else if (size == 2)
			outw(port, (u16)f->rax);
		else
			outl(port, (u32)f->rax);
	} else if (size == 1) {
		f->rax = (f->rax & ~0xffull) | inb(port);
	} else if (size == 2) {
		f->rax = (f->rax & ~0xffffull) | inw(port);
	} else {
		f->rax = inl(port); /* a 32-bit destination zero-extends */
	}
	f->rip += len;
	lib_io_emulated++;
	return true;
}

void guest_set_handler(unsigned vector, exc_handler_t fn)
{
	GUEST_ASSERT(vector < ARRAY_SIZE(handlers));
	WRITE_ONCE(handlers[vector], fn);
}

/* Returns only when the event was completed (entry.S then resumes the interrupted code). */
void lib_exception(struct exc_frame *f)
{
	static const char *const names[32] = {
		"#DE", "#DB", "NMI", "#BP", "#OF", "#BR", "#UD", "#NM", "#DF", "",    "#TS",
		"#NP", "#SS", "#GP", "#PF", "",	   "#MF", "#AC", "#MC", "#XM", "#VE", "#CP",
	};
	u64 vec = f->vector, cr2;
	exc_handler_t fn = READ_ONCE(handlers[vec & 0xff]);

	if (fn) {
		fn(f);
		return;
	}
	if (vec == 13 && complete_user_io(f))
		return;
	__asm__ __volatile__("mov %%cr2, %0" : "=r"(cr2));
	serial_break_lock();
	gprintf("GUEST EXCEPTION vector=%llu %s rip=0x%llx err=0x%llx cs=0x%llx rflags=0x%llx rsp=0x%llx cr2=0x%llx\n",
		vec, vec < 32 ? names[vec] : "irq", f->rip, f->error, f->cs, f->rflags, f->rsp,
		cr2);
	guest_panic();
}

/* ---- boot information ---- */

static const struct pvh_start_info *start_info(void)
{
	const struct pvh_start_info *si = (const void *)(uintptr_t)pvh_start_info;

	return si && si->magic == PVH_MAGIC ? si : NULL;
}

const u8 *guest_boot_params(void)
{
	return (const u8 *)(uintptr_t)lib_boot_params;
}

const char *guest_cmdline(void)
{
	const struct pvh_start_info *si = start_info();
	const u8 *bp = guest_boot_params();
	u64 p = 0;

	if (si)
		p = si->cmdline_paddr;
	else if (bp)
		p = *(const u32 *)(bp + BP_CMD_LINE_PTR) |
		    (u64) * (const u32 *)(bp + BP_EXT_CMD_LINE_PTR) << 32;
	return p ? (const char *)(uintptr_t)p : "";
}

int guest_memmap(struct mem_range *out, int max)
{
	const struct pvh_start_info *si = start_info();
	const u8 *bp = guest_boot_params();
	int n = 0;

	if (si) {
		const struct pvh_memmap_entry *m = (const void *)(uintptr_t)si->memmap_paddr;

		for (u32 i = 0; i < si->memmap_entries && n < max; i++)
			out[n++] = (struct mem_range){ m[i].addr, m[i].size, m[i].type };
	} else if (bp) {
		/* struct boot_e820_entry: packed u64 addr, u64 size, u32 type. */
		for (u8 i = 0; i < bp[BP_E820_ENTRIES] && i < BP_E820_MAX && n < max; i++) {
			const u8 *e = bp + BP_E820_TABLE + 20 * i;

			out[n++] = (struct mem_range){ *(const u64 *)e, *(const u64 *)(e + 8),
						       *(const u32 *)(e + 16) };
		}
	}
	return n;
}

bool cmdline_get(const char *key, char *buf, size_t len)
{
	const char *s = guest_cmdline(), *val = NULL;
	size_t klen = strlen(key), vlen = 0;

	while (*s) {
		const char *w;

		while (*s == ' ')
			s++;
		w = s;
		while (*s && *s != ' ')
			s++;
		if ((size_t)(s - w) > klen && !strncmp(w, key, klen) && w[klen] == '=') {
			val = w + klen + 1;
			vlen = (size_t)(s - val);
		}
	}
	if (!val)
		return false;
	if (len) {
		if (vlen >= len)
			vlen = len - 1;
		memcpy(buf, val, vlen);
		buf[vlen] = '\0';
	}
	return true;
}

u64 parse_u64(const char **s)
{
	const char *p = *s;
	u64 v = 0, base = 10;

	if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
		base = 16;
		p += 2;
	}
	for (;; p++) {
		unsigned d;

		if (*p >= '0' && *p <= '9')
			d = (unsigned)(*p - '0');
		else if (base == 16 && *p >= 'a' && *p <= 'f')
			d = (unsigned)(*p - 'a' + 10);
		else if (base == 16 && *p >= 'A' && *p <= 'F')
			d = (unsigned)(*p - 'A' + 10);
		else
			break;
		v = v * base + d;
	}
	*s = p;
	return v;
}

u64 cmdline_u64(const char *key, u64 def)
{
	char b[24];
	const char *p = b;
	u64 v;

	if (!cmdline_get(key, b, sizeof(b)) || !*b)
		return def;
	v = parse_u64(&p);
	return *p ? def : v;
}

u64 guest_ram_top(void)
{
	struct mem_range m[BP_E820_MAX];
	int n = guest_memmap(m, BP_E820_MAX);
	u64 top = 0;

	for (int i = 0; i < n; i++) {
		u64 end = m[i].addr + m[i].size;

		if (m[i].type == E820_RAM && m[i].addr < (1ull << 32) && end > top)
			top = end < (1ull << 32) ? end : (1ull << 32);
	}
	return top;
}

void *galloc(size_t size, size_t align)
{
	u64 top = guest_ram_top(), p;

	if (!heap_next)
		heap_next = ALIGN_UP((u64)(uintptr_t)__image_end, 4096);
	p = ALIGN_UP(heap_next, (u64)align);
	if (p + size < p || (top && p + size > top))
		GUEST_FAIL("galloc: %lu bytes do not fit below 0x%llx", size, top);
	heap_next = p + size;
	memset((void *)(uintptr_t)p, 0, size);
	return (void *)(uintptr_t)p;
}

/* ---- CPL3 ---- */

#define USER_STACK_SIZE 65536

struct user_call {
	void (*fn)(void *);
	void *arg;
};

static void __noreturn user_entry(void *p)
{
	struct user_call *c = p;

	c->fn(c->arg);
	guest_done();
}

static void __noreturn user_trampoline(void (*fn)(void *), void *arg)
{
	u8 *stack = galloc(USER_STACK_SIZE, 16);
	struct user_call *c = (void *)(stack + USER_STACK_SIZE - 64);
	u64 rsp = (u64)(uintptr_t)c - 8; /* as after a call: (rsp + 8) % 16 == 0 */

	c->fn = fn;
	c->arg = arg;
	*(u64 *)(uintptr_t)rsp = 0; /* user_entry never returns: no return address */
	lib_enter_user((void *)user_entry, rsp, c);
}

void guest_run_user(void (*fn)(void *), void *arg)
{
	user_trampoline(fn, arg);
}

void lib_start(void)
{
	serial_init();
	guest_main();
	guest_done();
}

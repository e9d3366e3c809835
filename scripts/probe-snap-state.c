/* Probe (not built by default): which saved state this host's KVM gets and sets, and whether a vCPU set from another VM's state runs on. */
/*
 * Build and run (root, /dev/kvm):
 *   gcc -O2 -Wall -Wextra -o build/probe-snap-state scripts/probe-snap-state.c
 *   build/probe-snap-state                                   # this host
 *   scripts/kvm-host.sh --emulated -- build/probe-snap-state # the emulated host
 * VM A: irqchip, PIT, one vCPU in 64-bit mode running "inc rax; mov [0x5000], rax; jmp" at
 * CPL0. It runs ~200 ms, is stopped by a signal, and every piece of state issue 31 lists is
 * read from it. VM B gets A's memory and all of that state set, runs ~200 ms, and the
 * counter (RAX and the memory word) must have gone on from where A stopped. One line per
 * item: get, set, then whether B ran on.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <unistd.h>

#define RAM (2u << 20)
#define CODE 0x4000
#define COUNTER 0x5000
#define MAX_MSRS 512

struct vm {
	int vm, cpu;
	unsigned char *ram;
	struct kvm_run *run;
};

/* Everything read from VM A. */
struct state {
	struct kvm_regs regs;
	struct kvm_sregs sregs;
	struct kvm_sregs2 sregs2;
	struct kvm_fpu fpu;
	struct kvm_xsave *xsave; /* XSAVE2's size when the host has it */
	struct kvm_xcrs xcrs;
	struct {
		struct kvm_msrs h;
		struct kvm_msr_entry e[MAX_MSRS];
	} msrs;
	struct kvm_lapic_state lapic;
	struct kvm_vcpu_events events;
	struct kvm_mp_state mp;
	struct kvm_debugregs dregs;
	uint64_t tsc_offset;
	struct kvm_irqchip chip[3];
	struct kvm_pit_state2 pit;
	struct kvm_clock_data clock;
	int ok[32]; /* per item: got it */
};

static int kvm_fd, xsave_size;
/* "user": the loop runs at CPL3, which a PVM host runs natively rather than emulated. */
static int user_mode;

enum item {
	I_REGS,
	I_SREGS,
	I_SREGS2,
	I_FPU,
	I_XSAVE,
	I_XCRS,
	I_MSRS,
	I_LAPIC,
	I_EVENTS,
	I_MP,
	I_DREGS,
	I_TSC,
	I_PIC0,
	I_PIC1,
	I_IOAPIC,
	I_PIT2,
	I_CLOCK,
	I_NR
};
static const char *const names[I_NR] = {
	"REGS",
	"SREGS",
	"SREGS2",
	"FPU",
	"XSAVE(2)",
	"XCRS",
	"MSRS",
	"LAPIC",
	"VCPU_EVENTS",
	"MP_STATE",
	"DEBUGREGS",
	"TSC_OFFSET attr",
	"IRQCHIP PIC master",
	"IRQCHIP PIC slave",
	"IRQCHIP IOAPIC",
	"PIT2",
	"CLOCK",
};
static char get_res[I_NR][96], set_res[I_NR][96];

static void result(char *buf, int r, const char *extra)
{
	if (r < 0)
		snprintf(buf, 96, "errno %d (%s)%s", errno, strerror(errno), extra);
	else
		snprintf(buf, 96, "ok%s", extra);
}

static void on_alarm(int sig)
{
	(void)sig;
}

/* Identity-mapped 2 MiB page, long mode, CPL0 (or CPL3), RIP at the loop. */
static void long_mode(struct vm *v)
{
	struct kvm_sregs s;
	struct kvm_regs r = { .rip = CODE, .rflags = 2, .rsp = 0x8000 };
	struct kvm_segment cs = { .base = 0,
				  .limit = 0xffffffff,
				  .selector = 8,
				  .type = 11,
				  .present = 1,
				  .dpl = 0,
				  .s = 1,
				  .l = 1,
				  .g = 1 };
	struct kvm_segment ds = cs;
	uint64_t *pml4 = (uint64_t *)(v->ram + 0x1000), *pdpt = (uint64_t *)(v->ram + 0x2000);
	uint64_t *pd = (uint64_t *)(v->ram + 0x3000);
	static const unsigned char code[] = { 0x48, 0xff, 0xc0, 0x48, 0x89, 0x04, 0x25,
					      0x00, 0x50, 0x00, 0x00, 0xeb, 0xf3 };

	unsigned u = user_mode ? 4 : 0; /* U/S: pages the loop may touch at CPL3 */

	pml4[0] = 0x2000 | 3 | u;
	pdpt[0] = 0x3000 | 3 | u;
	pd[0] = 0x80 | 3 | u; /* 2 MiB page */
	memcpy(v->ram + CODE, code, sizeof(code));
	ioctl(v->cpu, KVM_GET_SREGS, &s);
	ds.type = 3;
	ds.selector = 16;
	ds.l = 0;
	if (user_mode) {
		cs.dpl = ds.dpl = 3;
		cs.selector = 0x33;
		ds.selector = 0x2b;
	}
	s.cs = cs;
	s.ds = s.es = s.fs = s.gs = s.ss = ds;
	s.cr3 = 0x1000;
	s.cr4 = 1 << 5 | 1 << 9 | 1 << 10;			  /* PAE, OSFXSR, OSXMMEXCPT */
	s.cr0 = 1u << 0 | 1u << 1 | 1u << 4 | 1u << 5 | 1u << 31; /* PE MP ET NE PG */
	s.efer = 1 << 8 | 1 << 10;				  /* LME LMA */
	if (ioctl(v->cpu, KVM_SET_SREGS, &s) || ioctl(v->cpu, KVM_SET_REGS, &r))
		perror("probe: set long mode"), exit(1);
}

/* A VM with irqchip and PIT, its RAM, one vCPU with the host's supported CPUID. */
static void vm_create(struct vm *v)
{
	struct kvm_pit_config pit = { .flags = KVM_PIT_SPEAKER_DUMMY };
	struct kvm_userspace_memory_region mr = { 0 };
	struct {
		struct kvm_cpuid2 h;
		struct kvm_cpuid_entry2 e[256];
	} cpuid = { .h.nent = 256 };
	int sz;

	v->vm = ioctl(kvm_fd, KVM_CREATE_VM, 0);
	v->ram = mmap(NULL, RAM, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	mr.memory_size = RAM;
	mr.userspace_addr = (uintptr_t)v->ram;
	if (v->vm < 0 || v->ram == MAP_FAILED || ioctl(v->vm, KVM_SET_TSS_ADDR, 0xfffbd000) ||
	    ioctl(v->vm, KVM_SET_USER_MEMORY_REGION, &mr) || ioctl(v->vm, KVM_CREATE_IRQCHIP, 0) ||
	    ioctl(v->vm, KVM_CREATE_PIT2, &pit))
		perror("probe: create VM"), exit(1);
	v->cpu = ioctl(v->vm, KVM_CREATE_VCPU, 0);
	sz = ioctl(kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (v->cpu < 0 || ioctl(kvm_fd, KVM_GET_SUPPORTED_CPUID, &cpuid) ||
	    ioctl(v->cpu, KVM_SET_CPUID2, &cpuid))
		perror("probe: create vCPU"), exit(1);
	v->run = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, v->cpu, 0);
}

/* Runs until the timer's signal (or any exit); returns the exit reason, -1 for EINTR. */
static int run_for(struct vm *v, int ms)
{
	struct itimerval it = { .it_value = { .tv_sec = 0, .tv_usec = ms * 1000 } };
	int r;

	setitimer(ITIMER_REAL, &it, NULL);
	r = ioctl(v->cpu, KVM_RUN, 0);
	if (r < 0 && errno == EINTR)
		return -1;
	if (r < 0)
		perror("probe: KVM_RUN"), exit(1);
	return (int)v->run->exit_reason;
}

static int msr_list(uint32_t *idx)
{
	struct {
		struct kvm_msr_list h;
		uint32_t i[MAX_MSRS];
	} l = { .h.nmsrs = MAX_MSRS };

	if (ioctl(kvm_fd, KVM_GET_MSR_INDEX_LIST, &l))
		return -1;
	memcpy(idx, l.i, l.h.nmsrs * sizeof(*idx));
	return (int)l.h.nmsrs;
}

/* All listed MSRs; the ones KVM_GET_MSRS stops at are skipped and named. */
static void get_msrs(int cpu, struct state *s)
{
	uint32_t idx[MAX_MSRS];
	int n = msr_list(idx), got = 0, r;
	char skipped[64] = "";

	s->msrs.h.nmsrs = 0;
	for (int i = 0; i < n; i++) {
		struct {
			struct kvm_msrs h;
			struct kvm_msr_entry e;
		} one = { .h.nmsrs = 1, .e.index = idx[i] };

		r = ioctl(cpu, KVM_GET_MSRS, &one);
		if (r == 1) {
			s->msrs.e[got++] = one.e;
		} else if (strlen(skipped) < 40) {
			snprintf(skipped + strlen(skipped), sizeof(skipped) - strlen(skipped),
				 " %#x", idx[i]);
		}
	}
	s->msrs.h.nmsrs = (uint32_t)got;
	snprintf(get_res[I_MSRS], 96, "%s: %d of %d%s%s", n < 0 ? "list failed" : "ok", got, n,
		 got < n ? ", not read:" : "", skipped);
	s->ok[I_MSRS] = n > 0;
}

/* All at once, then one by one to name the ones refused. */
static void set_msrs(int cpu, struct state *s)
{
	int r = ioctl(cpu, KVM_SET_MSRS, &s->msrs), bad = 0;
	char refused[64] = "";

	if (r == (int)s->msrs.h.nmsrs) {
		snprintf(set_res[I_MSRS], 96, "ok: %d of %u", r, s->msrs.h.nmsrs);
		return;
	}
	for (uint32_t i = 0; i < s->msrs.h.nmsrs; i++) {
		struct {
			struct kvm_msrs h;
			struct kvm_msr_entry e;
		} one = { .h.nmsrs = 1, .e = s->msrs.e[i] };

		if (ioctl(cpu, KVM_SET_MSRS, &one) != 1) {
			bad++;
			if (strlen(refused) < 40)
				snprintf(refused + strlen(refused),
					 sizeof(refused) - strlen(refused), " %#x", one.e.index);
		}
	}
	snprintf(set_res[I_MSRS], 96, "%d of %u refused:%s", bad, s->msrs.h.nmsrs, refused);
}

static int tsc_attr(int cpu, uint64_t *val, unsigned long op)
{
	struct kvm_device_attr a = { .group = KVM_VCPU_TSC_CTRL,
				     .attr = KVM_VCPU_TSC_OFFSET,
				     .addr = (uintptr_t)val };

	return ioctl(cpu, op, &a);
}

#define GET(item, fd, req, arg)                \
	do {                                   \
		int r_ = ioctl(fd, req, arg);  \
		result(get_res[item], r_, ""); \
		s->ok[item] = r_ >= 0;         \
	} while (0)

static void get_all(struct vm *v, struct state *s)
{
	GET(I_REGS, v->cpu, KVM_GET_REGS, &s->regs);
	GET(I_SREGS, v->cpu, KVM_GET_SREGS, &s->sregs);
	GET(I_SREGS2, v->cpu, KVM_GET_SREGS2, &s->sregs2);
	GET(I_FPU, v->cpu, KVM_GET_FPU, &s->fpu);
	if (xsave_size > (int)sizeof(struct kvm_xsave))
		GET(I_XSAVE, v->cpu, KVM_GET_XSAVE2, s->xsave);
	else
		GET(I_XSAVE, v->cpu, KVM_GET_XSAVE, s->xsave);
	GET(I_XCRS, v->cpu, KVM_GET_XCRS, &s->xcrs);
	get_msrs(v->cpu, s);
	GET(I_LAPIC, v->cpu, KVM_GET_LAPIC, &s->lapic);
	GET(I_EVENTS, v->cpu, KVM_GET_VCPU_EVENTS, &s->events);
	GET(I_MP, v->cpu, KVM_GET_MP_STATE, &s->mp);
	GET(I_DREGS, v->cpu, KVM_GET_DEBUGREGS, &s->dregs);
	result(get_res[I_TSC], tsc_attr(v->cpu, &s->tsc_offset, KVM_GET_DEVICE_ATTR), "");
	s->ok[I_TSC] = !strncmp(get_res[I_TSC], "ok", 2);
	for (int c = 0; c < 3; c++) {
		s->chip[c].chip_id = (uint32_t)c;
		GET(I_PIC0 + c, v->vm, KVM_GET_IRQCHIP, &s->chip[c]);
	}
	GET(I_PIT2, v->vm, KVM_GET_PIT2, &s->pit);
	GET(I_CLOCK, v->vm, KVM_GET_CLOCK, &s->clock);
}

#define SET(item, fd, req, arg)                                                \
	do {                                                                   \
		if (!s->ok[item]) {                                            \
			snprintf(set_res[item], 96, "not tried (get failed)"); \
			break;                                                 \
		}                                                              \
		result(set_res[item], ioctl(fd, req, arg), "");                \
	} while (0)

/* In the order a restore would: CPUID (at creation), special registers before the rest,
 * MSRs after XSAVE, the VM's irqchip, PIT and clock last. */
static void set_all(struct vm *v, struct state *s)
{
	SET(I_SREGS, v->cpu, KVM_SET_SREGS, &s->sregs);
	/* SREGS2 again over SREGS: the same registers plus the PDPTRs a PAE guest needs. */
	SET(I_SREGS2, v->cpu, KVM_SET_SREGS2, &s->sregs2);
	SET(I_REGS, v->cpu, KVM_SET_REGS, &s->regs);
	SET(I_FPU, v->cpu, KVM_SET_FPU, &s->fpu);
	SET(I_XSAVE, v->cpu, KVM_SET_XSAVE, s->xsave);
	SET(I_XCRS, v->cpu, KVM_SET_XCRS, &s->xcrs);
	if (s->ok[I_MSRS])
		set_msrs(v->cpu, s);
	SET(I_LAPIC, v->cpu, KVM_SET_LAPIC, &s->lapic);
	SET(I_EVENTS, v->cpu, KVM_SET_VCPU_EVENTS, &s->events);
	SET(I_MP, v->cpu, KVM_SET_MP_STATE, &s->mp);
	SET(I_DREGS, v->cpu, KVM_SET_DEBUGREGS, &s->dregs);
	if (s->ok[I_TSC])
		result(set_res[I_TSC], tsc_attr(v->cpu, &s->tsc_offset, KVM_SET_DEVICE_ATTR), "");
	else
		snprintf(set_res[I_TSC], 96, "not tried (get failed)");
	for (int c = 0; c < 3; c++)
		SET(I_PIC0 + c, v->vm, KVM_SET_IRQCHIP, &s->chip[c]);
	SET(I_PIT2, v->vm, KVM_SET_PIT2, &s->pit);
	s->clock.flags = 0; /* KVM_SET_CLOCK takes only KVM_CLOCK_REALTIME of the get's flags */
	SET(I_CLOCK, v->vm, KVM_SET_CLOCK, &s->clock);
}

static uint64_t guest_tsc(int cpu)
{
	struct {
		struct kvm_msrs h;
		struct kvm_msr_entry e;
	} one = { .h.nmsrs = 1, .e.index = 0x10 };

	return ioctl(cpu, KVM_GET_MSRS, &one) == 1 ? one.e.data : 0;
}

static uint64_t counter(struct vm *v)
{
	uint64_t c;

	memcpy(&c, v->ram + COUNTER, 8);
	return c;
}

/* B after the set and after its run: did it go on from A's state? */
static int ran_on(struct vm *b, struct state *s, uint64_t tsc_a)
{
	struct kvm_regs r;
	uint64_t tsc_b = guest_tsc(b->cpu), mem0 = counter(b);
	int why = run_for(b, 200), ok;

	ioctl(b->cpu, KVM_GET_REGS, &r);
	printf("A stopped at rax=%llu mem=%llu tsc=%llu\n", (unsigned long long)s->regs.rax,
	       (unsigned long long)mem0, (unsigned long long)tsc_a);
	printf("B set: tsc=%llu (%s A's); B ran: %s, rax=%llu mem=%llu rip=%#llx\n",
	       (unsigned long long)tsc_b, tsc_b >= tsc_a ? ">=" : "BELOW",
	       why == -1 ? "stopped by the timer" : "exited", (unsigned long long)r.rax,
	       (unsigned long long)counter(b), (unsigned long long)r.rip);
	if (why >= 0)
		printf("B exit reason %d (internal error suberror %u)\n", why,
		       b->run->internal.suberror);
	ok = why == -1 && r.rax > s->regs.rax && counter(b) > mem0 && counter(b) + 1 >= r.rax;
	printf("restored vCPU ran on: %s\n", ok ? "yes" : "NO");
	return ok;
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_alarm }; /* no SA_RESTART: KVM_RUN returns */
	struct state *s = calloc(1, sizeof(*s));
	struct vm a, b;
	uint64_t tsc_a;
	int why, ok;

	user_mode = argc > 1 && !strcmp(argv[1], "user");
	sigaction(SIGALRM, &sa, NULL);
	kvm_fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm_fd < 0)
		perror("probe: /dev/kvm"), exit(2);
	xsave_size = ioctl(kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_XSAVE2);
	s->xsave = calloc(1, xsave_size > (int)sizeof(struct kvm_xsave) ? (size_t)xsave_size
									: sizeof(struct kvm_xsave));
	printf("guest loop at CPL%d\n", user_mode ? 3 : 0);
	printf("KVM_CAP_XSAVE2 %d, SREGS2 %d, VCPU_ATTRIBUTES %d, ADJUST_CLOCK %d\n", xsave_size,
	       ioctl(kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_SREGS2),
	       ioctl(kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_VCPU_ATTRIBUTES),
	       ioctl(kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_ADJUST_CLOCK));
	vm_create(&a);
	long_mode(&a);
	why = run_for(&a, 200);
	if (why != -1) {
		printf("A: exit reason %d before the timer (suberror %u): no state to save\n", why,
		       a.run->internal.suberror);
		return 1;
	}
	get_all(&a, s);
	tsc_a = guest_tsc(a.cpu);
	vm_create(&b);
	memcpy(b.ram, a.ram, RAM);
	set_all(&b, s);
	printf("%-20s %-40s %s\n", "item", "get", "set");
	for (int i = 0; i < I_NR; i++)
		printf("%-20s %-40s %s\n", names[i], get_res[i], set_res[i]);
	ok = ran_on(&b, s, tsc_a);
	return ok ? 0 : 1;
}

/* vCPU threads: creation, boot register state, the KVM_RUN loop and its exit dispatch table. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "lkvm/boot.h"
#include "lkvm/kvm-cpu.h"
#include "lkvm/layout.h"
#include "lkvm/kvm.h"
#include "lkvm/sandbox.h"
#include "lkvm/x86.h"

/* Signal used only to kick a vCPU thread out of KVM_RUN; its handler does nothing. */
#define SIG_VCPU_KICK SIGUSR1

enum exit_action { EXIT_CONTINUE, EXIT_STOP };
typedef enum exit_action (*exit_handler_fn)(struct kvm_cpu *vcpu);

int kvm_cpu_create(struct kvm *kvm, int id, char *err, size_t errlen)
{
	struct kvm_cpu *vcpu;
	int ret;

	vcpu = calloc(1, sizeof(*vcpu));
	if (!vcpu) {
		errfmt(err, errlen, "out of memory");
		return -ENOMEM;
	}
	vcpu->kvm = kvm;
	vcpu->id = id;
	vcpu->run = MAP_FAILED;
	vcpu->fd = -1;
	vcpu->fd = ioctl(kvm->vm_fd, KVM_CREATE_VCPU, id);
	if (vcpu->fd < 0) {
		ret = -errno;
		errfmt(err, errlen, "KVM_CREATE_VCPU %d: %s", id, strerror(errno));
		goto fail;
	}
	vcpu->run = mmap(NULL, (size_t)kvm->vcpu_mmap_size, PROT_READ | PROT_WRITE, MAP_SHARED,
			 vcpu->fd, 0);
	if (vcpu->run == MAP_FAILED) {
		ret = -errno;
		errfmt(err, errlen, "mmap of vCPU %d: %s", id, strerror(errno));
		goto fail;
	}
	ret = x86_setup_cpuid(vcpu, err, errlen);
	if (ret < 0)
		goto fail;
	kvm->cpus[id] = vcpu;
	if (id >= kvm->nr_cpus)
		kvm->nr_cpus = id + 1;
	return 0;
fail:
	kvm_cpu_destroy(vcpu);
	return ret;
}

void kvm_cpu_destroy(struct kvm_cpu *vcpu)
{
	if (!vcpu)
		return;
	if (vcpu->run != MAP_FAILED)
		munmap(vcpu->run, (size_t)vcpu->kvm->vcpu_mmap_size);
	if (vcpu->fd >= 0)
		close(vcpu->fd);
	free(vcpu);
}

static struct kvm_segment flat_segment(u16 sel, u8 type, bool code64, bool db)
{
	return (struct kvm_segment){
		.base = 0,
		.limit = 0xffffffff,
		.selector = sel,
		.type = type,
		.present = 1,
		.dpl = 0,
		.db = db,
		.s = 1,
		.l = code64,
		.g = 1,
	};
}

int kvm_cpu_setup_boot(struct kvm_cpu *vcpu, const struct boot_entry *e, char *err, size_t errlen)
{
	struct kvm_sregs sregs;
	struct kvm_regs regs = { .rflags = 0x2, .rip = e->rip, .rsp = e->rsp, .rsi = e->rsi, .rbx = e->rbx };
	struct kvm_fpu fpu = { .fcw = 0x37f, .mxcsr = 0x1f80 };
	struct kvm_segment data = flat_segment(GDT_SEL_DATA, 3, false, true);

	if (ioctl(vcpu->fd, KVM_GET_SREGS, &sregs) < 0)
		goto fail;
	sregs.ds = sregs.es = sregs.fs = sregs.gs = sregs.ss = data;
	sregs.gdt.base = BOOT_GDT_ADDR;
	sregs.gdt.limit = GDT_ENTRIES * 8 - 1;
	sregs.idt.base = 0;
	sregs.idt.limit = 0;
	/* A busy 32/64-bit TSS and an LDT descriptor: entry checks want both usable. */
	sregs.tr = (struct kvm_segment){ .limit = 0x67, .type = 11, .present = 1 };
	sregs.ldt = (struct kvm_segment){ .limit = 0xffff, .type = 2, .present = 1 };
	if (e->kind == BOOT_KIND_BZIMAGE) {
		/* Linux 64-bit boot protocol: long mode, paging on with an identity map,
		 * __BOOT_CS/__BOOT_DS loaded, interrupts off, RSI = boot_params. */
		sregs.cs = flat_segment(GDT_SEL_CODE64, 11, true, false);
		sregs.cr0 = 0x80000033; /* PG | NE | ET | MP | PE */
		sregs.cr3 = e->cr3;
		sregs.cr4 = 0x20;      /* PAE */
		sregs.efer = 0x500;    /* LMA | LME */
	} else {
		/* PVH: 32-bit protected mode, paging off, EBX = start info. */
		sregs.cs = flat_segment(GDT_SEL_CODE32, 11, false, true);
		sregs.cr0 = 0x33; /* NE | ET | MP | PE */
		sregs.cr3 = 0;
		sregs.cr4 = 0;
		sregs.efer = 0;
	}
	if (ioctl(vcpu->fd, KVM_SET_SREGS, &sregs) < 0)
		goto fail;
	if (ioctl(vcpu->fd, KVM_SET_REGS, &regs) < 0)
		goto fail;
	if (ioctl(vcpu->fd, KVM_SET_FPU, &fpu) < 0)
		goto fail;
	return 0;
fail:
	errfmt(err, errlen, "setting boot registers of vCPU %d: %s", vcpu->id, strerror(errno));
	return -errno;
}

static enum exit_action handle_io(struct kvm_cpu *vcpu)
{
	struct kvm_run *run = vcpu->run;
	u32 size = run->io.size, count = run->io.count;
	u64 off = run->io.data_offset;
	u8 *data = (u8 *)run;

	/* KVM fills these fields, but keep the data window inside the shared page anyway. */
	if (size == 0 || size > 4 || count == 0 ||
	    !range_ok(off, (u64)size * count, (u64)vcpu->kvm->vcpu_mmap_size)) {
		kvm_request_exit(vcpu->kvm, EXIT_LKVM_ERROR, "vCPU %d: malformed port I/O exit", vcpu->id);
		return EXIT_STOP;
	}
	kvm_cpu_count(&vcpu->pio_exits);
	for (u32 i = 0; i < count; i++) {
		u8 *p = data + off + (u64)i * size;

		if (run->io.direction == KVM_EXIT_IO_IN)
			memset(p, 0, size);
		io_bus_dispatch(&vcpu->kvm->pio, vcpu, run->io.port, p, size,
				run->io.direction == KVM_EXIT_IO_OUT);
	}
	return EXIT_CONTINUE;
}

static enum exit_action handle_mmio(struct kvm_cpu *vcpu)
{
	struct kvm_run *run = vcpu->run;
	u32 len = run->mmio.len;

	if (len == 0 || len > sizeof(run->mmio.data)) {
		kvm_request_exit(vcpu->kvm, EXIT_LKVM_ERROR, "vCPU %d: malformed MMIO exit", vcpu->id);
		return EXIT_STOP;
	}
	kvm_cpu_count(&vcpu->mmio_exits);
	if (!run->mmio.is_write)
		memset(run->mmio.data, 0, sizeof(run->mmio.data));
	io_bus_dispatch(&vcpu->kvm->mmio, vcpu, run->mmio.phys_addr, run->mmio.data, len,
			run->mmio.is_write);
	return EXIT_CONTINUE;
}

static enum exit_action handle_shutdown(struct kvm_cpu *vcpu)
{
	/* A triple fault: what Linux falls back to for reboot. */
	kvm_request_exit(vcpu->kvm, vcpu->kvm->guest_end_status, "guest reset (triple fault on vCPU %d)", vcpu->id);
	return EXIT_STOP;
}

static enum exit_action handle_system_event(struct kvm_cpu *vcpu)
{
	switch (vcpu->run->system_event.type) {
	case KVM_SYSTEM_EVENT_SHUTDOWN:
		kvm_request_exit(vcpu->kvm, vcpu->kvm->guest_end_status, "guest powered off");
		break;
	case KVM_SYSTEM_EVENT_RESET:
		kvm_request_exit(vcpu->kvm, vcpu->kvm->guest_end_status, "guest reset");
		break;
	case KVM_SYSTEM_EVENT_CRASH:
		kvm_request_exit(vcpu->kvm, EXIT_GUEST_PANIC, "guest crashed");
		break;
	default:
		kvm_request_exit(vcpu->kvm, EXIT_LKVM_ERROR, "unknown system event %u",
				 vcpu->run->system_event.type);
	}
	return EXIT_STOP;
}

static enum exit_action handle_internal_error(struct kvm_cpu *vcpu)
{
	return x86_handle_internal_error(vcpu) == 0 ? EXIT_CONTINUE : EXIT_STOP;
}

static enum exit_action handle_fail_entry(struct kvm_cpu *vcpu)
{
	pr_err("vCPU %d: KVM_EXIT_FAIL_ENTRY, hardware reason 0x%llx", vcpu->id,
	       (unsigned long long)vcpu->run->fail_entry.hardware_entry_failure_reason);
	kvm_cpu_dump(vcpu);
	kvm_request_exit(vcpu->kvm, EXIT_LKVM_ERROR, "vCPU %d could not enter the guest", vcpu->id);
	return EXIT_STOP;
}

static enum exit_action handle_nothing(struct kvm_cpu *vcpu)
{
	return EXIT_CONTINUE;
}

/* Exit reasons lkvm handles; anything else ends the run with the reason named. */
static const exit_handler_fn exit_handlers[] = {
	[KVM_EXIT_IO] = handle_io,
	[KVM_EXIT_MMIO] = handle_mmio,
	[KVM_EXIT_HLT] = handle_nothing, /* only without an in-kernel LAPIC */
	[KVM_EXIT_INTR] = handle_nothing,
	[KVM_EXIT_IRQ_WINDOW_OPEN] = handle_nothing,
	[KVM_EXIT_SHUTDOWN] = handle_shutdown,
	[KVM_EXIT_SYSTEM_EVENT] = handle_system_event,
	[KVM_EXIT_INTERNAL_ERROR] = handle_internal_error,
	[KVM_EXIT_FAIL_ENTRY] = handle_fail_entry,
};
_Static_assert(ARRAY_SIZE(exit_handlers) <= ARRAY_SIZE(((struct kvm_cpu *)0)->exits),
	       "exit counters must cover every handled reason");

static const char *const exit_names[] = {
	[KVM_EXIT_UNKNOWN] = "unknown",
	[KVM_EXIT_EXCEPTION] = "exception",
	[KVM_EXIT_IO] = "io",
	[KVM_EXIT_HYPERCALL] = "hypercall",
	[KVM_EXIT_DEBUG] = "debug",
	[KVM_EXIT_HLT] = "hlt",
	[KVM_EXIT_MMIO] = "mmio",
	[KVM_EXIT_IRQ_WINDOW_OPEN] = "irq_window_open",
	[KVM_EXIT_SHUTDOWN] = "shutdown",
	[KVM_EXIT_FAIL_ENTRY] = "fail_entry",
	[KVM_EXIT_INTR] = "intr",
	[KVM_EXIT_SET_TPR] = "set_tpr",
	[KVM_EXIT_TPR_ACCESS] = "tpr_access",
	[KVM_EXIT_NMI] = "nmi",
	[KVM_EXIT_INTERNAL_ERROR] = "internal_error",
	[KVM_EXIT_SYSTEM_EVENT] = "system_event",
};

const char *kvm_exit_name(u32 reason)
{
	return reason < ARRAY_SIZE(exit_names) ? exit_names[reason] : NULL;
}

/* What a vCPU's last exit was, kept for lkvm debug (only this thread writes it). */
static void note_exit(struct kvm_cpu *vcpu, u32 reason)
{
	struct kvm_run *run = vcpu->run;

	vcpu->last_exit = reason;
	vcpu->last_exit_ns = now_ns();
	vcpu->last_exit_addr = 0;
	vcpu->last_exit_len = 0;
	vcpu->last_exit_write = false;
	if (reason == KVM_EXIT_IO) {
		vcpu->last_exit_addr = run->io.port;
		vcpu->last_exit_len = run->io.size;
		vcpu->last_exit_write = run->io.direction == KVM_EXIT_IO_OUT;
	} else if (reason == KVM_EXIT_MMIO) {
		vcpu->last_exit_addr = run->mmio.phys_addr;
		vcpu->last_exit_len = run->mmio.len;
		vcpu->last_exit_write = run->mmio.is_write;
	}
}

/* Wait in user space while a park is requested (pause, debug). KVM_RUN was left with any
 * pending I/O completed, so the registers are whole. */
static void vcpu_park(struct kvm_cpu *vcpu)
{
	struct kvm *kvm = vcpu->kvm;

	pthread_mutex_lock(&kvm->park_lock);
	kvm->parked++;
	pthread_cond_broadcast(&kvm->park_cond);
	while (atomic_load(&kvm->park_req) && !atomic_load(&kvm->stopping))
		pthread_cond_wait(&kvm->unpark_cond, &kvm->park_lock);
	kvm->parked--;
	/* Cleared before the loop re-checks `stopping`: kvm_cpu_stop_all sets stopping before
	 * immediate_exit, so a stop racing with this is never lost. */
	if (!atomic_load(&kvm->stopping))
		vcpu->run->immediate_exit = 0;
	pthread_mutex_unlock(&kvm->park_lock);
}

static void *vcpu_thread(void *arg)
{
	struct kvm_cpu *vcpu = arg;
	struct kvm *kvm = vcpu->kvm;
	char name[16];
	sigset_t set;

	snprintf(name, sizeof(name), "lkvm-vcpu%d", vcpu->id);
	pthread_setname_np(pthread_self(), name);
	sigemptyset(&set);
	sigaddset(&set, SIG_VCPU_KICK);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	if (sandbox_enter(kvm, SB_VCPU) < 0) {
		kvm_request_exit(kvm, EXIT_LKVM_ERROR, "vCPU %d: cannot enter the sandbox", vcpu->id);
		return NULL;
	}

	while (!atomic_load(&kvm->stopping)) {
		u32 reason;

		if (atomic_load(&kvm->park_req)) {
			vcpu_park(vcpu);
			continue;
		}
		if (vcpu->id == 0 && !atomic_load(&kvm->first_insn_ns))
			atomic_store(&kvm->first_insn_ns, now_ns());
		if (ioctl(vcpu->fd, KVM_RUN, 0) < 0) {
			/* EINTR: kicked (stop check above). EAGAIN: an AP got INIT/SIPI and
			 * must simply be run again. */
			if (errno == EINTR || errno == EAGAIN)
				continue;
			kvm_request_exit(kvm, EXIT_LKVM_ERROR, "vCPU %d: KVM_RUN: %s", vcpu->id, strerror(errno));
			break;
		}
		reason = vcpu->run->exit_reason;
		if (reason < ARRAY_SIZE(vcpu->exits))
			kvm_cpu_count(&vcpu->exits[reason]);
		note_exit(vcpu, reason);
		if (reason >= ARRAY_SIZE(exit_handlers) || !exit_handlers[reason]) {
			pr_err("vCPU %d: unhandled KVM exit reason %u", vcpu->id, reason);
			kvm_cpu_dump(vcpu);
			kvm_request_exit(kvm, EXIT_LKVM_ERROR, "vCPU %d: unhandled KVM exit reason %u",
					 vcpu->id, reason);
			break;
		}
		if (exit_handlers[reason](vcpu) == EXIT_STOP)
			break;
	}
	return NULL;
}

static void kick_handler(int sig)
{
	(void)sig;
}

int kvm_cpu_start(struct kvm_cpu *vcpu)
{
	struct sigaction sa = { .sa_handler = kick_handler };
	sigset_t set, old;
	int ret;

	/* No SA_RESTART: the kick must make KVM_RUN fail with EINTR. */
	sigemptyset(&sa.sa_mask);
	sigaction(SIG_VCPU_KICK, &sa, NULL);
	/* Threads start with the kick blocked and unblock it themselves, so only vCPU
	 * threads ever take it. */
	sigemptyset(&set);
	sigaddset(&set, SIG_VCPU_KICK);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	ret = pthread_create(&vcpu->thread, NULL, vcpu_thread, vcpu);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret)
		return -ret;
	vcpu->started = true;
	atomic_fetch_add(&vcpu->kvm->nr_started, 1);
	return 0;
}

/* Kick every started vCPU out of KVM_RUN; park_lock held (so no join runs meanwhile). */
static void kick_all_locked(struct kvm *kvm)
{
	for (int i = 0; i < kvm->nr_cpus; i++) {
		struct kvm_cpu *vcpu = kvm->cpus[i];

		if (!vcpu || !vcpu->started)
			continue;
		vcpu->run->immediate_exit = 1;
		pthread_kill(vcpu->thread, SIG_VCPU_KICK);
	}
}

int kvm_cpu_park_all(struct kvm *kvm, int timeout_ms)
{
	struct timespec dl;
	int ret = 0, want;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&kvm->park_lock);
	if (atomic_load(&kvm->park_req)) {
		pthread_mutex_unlock(&kvm->park_lock);
		return -EBUSY;
	}
	if (atomic_load(&kvm->stopping)) {
		pthread_mutex_unlock(&kvm->park_lock);
		return -ESHUTDOWN;
	}
	atomic_store(&kvm->park_req, true);
	/* immediate_exit covers a vCPU between its park check and KVM_RUN; the kick one inside. */
	kick_all_locked(kvm);
	want = atomic_load(&kvm->nr_started);
	while (kvm->parked < want && !atomic_load(&kvm->stopping) && ret == 0)
		ret = pthread_cond_clockwait(&kvm->park_cond, &kvm->park_lock, CLOCK_MONOTONIC, &dl);
	if (atomic_load(&kvm->stopping))
		ret = -ESHUTDOWN;
	else if (kvm->parked < want)
		ret = -ETIMEDOUT;
	else
		ret = 0;
	pthread_mutex_unlock(&kvm->park_lock);
	if (ret)
		kvm_cpu_unpark_all(kvm);
	return ret;
}

void kvm_cpu_unpark_all(struct kvm *kvm)
{
	pthread_mutex_lock(&kvm->park_lock);
	atomic_store(&kvm->park_req, false);
	pthread_cond_broadcast(&kvm->unpark_cond);
	pthread_mutex_unlock(&kvm->park_lock);
}

void kvm_cpu_stop_all(struct kvm *kvm)
{
	atomic_store(&kvm->stopping, true);
	/* Parked vCPUs wake and leave; a park in progress gives up. */
	pthread_mutex_lock(&kvm->park_lock);
	pthread_cond_broadcast(&kvm->unpark_cond);
	pthread_cond_broadcast(&kvm->park_cond);
	pthread_mutex_unlock(&kvm->park_lock);
	for (int i = 0; i < kvm->nr_cpus; i++) {
		struct kvm_cpu *vcpu = kvm->cpus[i];

		if (!vcpu || !vcpu->started)
			continue;
		/* immediate_exit covers a kick that lands between the loop's stop check and
		 * KVM_RUN; the signal covers a vCPU already inside KVM_RUN. */
		vcpu->run->immediate_exit = 1;
		pthread_kill(vcpu->thread, SIG_VCPU_KICK);
	}
	for (int i = 0; i < kvm->nr_cpus; i++) {
		struct kvm_cpu *vcpu = kvm->cpus[i];

		if (!vcpu || !vcpu->started)
			continue;
		pthread_join(vcpu->thread, NULL);
		vcpu->started = false;
	}
}

int kvm_cpu_describe(struct kvm_cpu *vcpu, char *buf, size_t len)
{
	const char *ename = kvm_exit_name(vcpu->last_exit);
	struct kvm_regs r;
	struct kvm_sregs s;
	size_t n = 0;

#define OUT(...)                                                                      \
	do {                                                                          \
		int w_ = snprintf(buf + n, len - n, __VA_ARGS__);                     \
		if (w_ < 0 || (size_t)w_ >= len - n)                                  \
			return -ENOSPC;                                               \
		n += (size_t)w_;                                                      \
	} while (0)
	OUT("vCPU %d:\n", vcpu->id);
	if (ioctl(vcpu->fd, KVM_GET_REGS, &r) < 0 || ioctl(vcpu->fd, KVM_GET_SREGS, &s) < 0) {
		OUT(" cannot read registers: %s\n", strerror(errno));
		return (int)n;
	}
	OUT(" rip %016llx rsp %016llx rflags %016llx\n", r.rip, r.rsp, r.rflags);
	OUT(" rax %016llx rbx %016llx rcx %016llx rdx %016llx\n", r.rax, r.rbx, r.rcx, r.rdx);
	OUT(" rsi %016llx rdi %016llx rbp %016llx\n", r.rsi, r.rdi, r.rbp);
	OUT(" r8  %016llx r9  %016llx r10 %016llx r11 %016llx\n", r.r8, r.r9, r.r10, r.r11);
	OUT(" r12 %016llx r13 %016llx r14 %016llx r15 %016llx\n", r.r12, r.r13, r.r14, r.r15);
	OUT(" cr0 %016llx cr2 %016llx cr3 %016llx cr4 %016llx efer %llx\n", s.cr0, s.cr2, s.cr3, s.cr4,
	    s.efer);
	OUT(" cs %04x (base %llx, l %u, db %u, dpl %u) ss %04x ds %04x es %04x fs %04x gs %04x\n",
	    s.cs.selector, s.cs.base, s.cs.l, s.cs.db, s.cs.dpl, s.ss.selector, s.ds.selector,
	    s.es.selector, s.fs.selector, s.gs.selector);
	OUT(" gdt %llx/%x idt %llx/%x apic_base %llx\n", s.gdt.base, s.gdt.limit, s.idt.base, s.idt.limit,
	    s.apic_base);
	if (!vcpu->last_exit_ns)
		OUT(" last exit: none yet\n");
	else if (vcpu->last_exit == KVM_EXIT_IO || vcpu->last_exit == KVM_EXIT_MMIO)
		OUT(" last exit: %s %s 0x%llx len %u, %.3f s ago\n", ename, vcpu->last_exit_write ? "write" : "read",
		    (unsigned long long)vcpu->last_exit_addr, vcpu->last_exit_len,
		    (double)(now_ns() - vcpu->last_exit_ns) / 1e9);
	else
		OUT(" last exit: %s (%u), %.3f s ago\n", ename ? ename : "?", vcpu->last_exit,
		    (double)(now_ns() - vcpu->last_exit_ns) / 1e9);
#undef OUT
	return (int)n;
}

void kvm_cpu_dump(struct kvm_cpu *vcpu)
{
	struct kvm_regs r;
	struct kvm_sregs s;

	if (ioctl(vcpu->fd, KVM_GET_REGS, &r) < 0 || ioctl(vcpu->fd, KVM_GET_SREGS, &s) < 0) {
		pr_err("vCPU %d: cannot read registers: %s", vcpu->id, strerror(errno));
		return;
	}
	pr_err("vCPU %d registers:", vcpu->id);
	pr_err(" rip %016llx rsp %016llx rflags %016llx", r.rip, r.rsp, r.rflags);
	pr_err(" rax %016llx rbx %016llx rcx %016llx rdx %016llx", r.rax, r.rbx, r.rcx, r.rdx);
	pr_err(" rsi %016llx rdi %016llx rbp %016llx", r.rsi, r.rdi, r.rbp);
	pr_err(" r8  %016llx r9  %016llx r10 %016llx r11 %016llx", r.r8, r.r9, r.r10, r.r11);
	pr_err(" r12 %016llx r13 %016llx r14 %016llx r15 %016llx", r.r12, r.r13, r.r14, r.r15);
	pr_err(" cr0 %016llx cr2 %016llx cr3 %016llx cr4 %016llx efer %llx", s.cr0, s.cr2, s.cr3,
	       s.cr4, s.efer);
	pr_err(" cs %04x (base %llx, l %u, db %u, dpl %u) ss %04x", s.cs.selector, s.cs.base, s.cs.l,
	       s.cs.db, s.cs.dpl, s.ss.selector);
}

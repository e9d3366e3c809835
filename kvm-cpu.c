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

#include "lkvm/kvm-cpu.h"
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

int kvm_cpu_tsc_offset(struct kvm_cpu *vcpu, unsigned long req, u64 *val)
{
	struct kvm_device_attr a = {
		.group = KVM_VCPU_TSC_CTRL,
		.attr = KVM_VCPU_TSC_OFFSET,
		.addr = (u64)(uintptr_t)val,
	};

	return ioctl(vcpu->fd, req, &a) < 0 ? -errno : 0;
}

bool kvm_cpu_tsc_stops_over_pause(struct kvm_cpu *vcpu)
{
	u64 unused;

	return kvm_cpu_tsc_offset(vcpu, KVM_HAS_DEVICE_ATTR, &unused) == 0;
}

#define MSR_IA32_TSC 0x10

int kvm_cpu_guest_tsc(struct kvm_cpu *vcpu, struct kvm_guest_tsc *out)
{
	union { /* kvm_msrs ends in a flexible array: room for one entry */
		struct kvm_msrs h;
		u8 room[sizeof(struct kvm_msrs) + sizeof(struct kvm_msr_entry)];
	} m = { .h.nmsrs = 1 };
	int khz = ioctl(vcpu->fd, KVM_GET_TSC_KHZ);
	u64 t0, t1;

	if (khz <= 0)
		return khz < 0 ? -errno : -ENODEV;
	*out = (struct kvm_guest_tsc){ .khz = (u64)khz };
	if (!kvm_cpu_tsc_offset(vcpu, KVM_GET_DEVICE_ATTR, &out->offset))
		return 0;
	m.h.entries[0].index = MSR_IA32_TSC;
	t0 = x86_host_tsc();
	if (ioctl(vcpu->fd, KVM_GET_MSRS, &m) != 1)
		return -EIO;
	t1 = x86_host_tsc();
	out->offset = m.h.entries[0].data - (t0 + (t1 - t0) / 2);
	out->err_ns = (t1 - t0) / 2 * 1000000 / out->khz;
	return 0;
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
		kvm_request_exit(vcpu->kvm, EXIT_LKVM_ERROR, "vCPU %d: malformed port I/O exit",
				 vcpu->id);
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
		kvm_request_exit(vcpu->kvm, EXIT_LKVM_ERROR, "vCPU %d: malformed MMIO exit",
				 vcpu->id);
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
	kvm_request_end(vcpu->kvm, KVM_END_REBOOT, vcpu->kvm->guest_end_status,
			"guest reset (triple fault on vCPU %d)", vcpu->id);
	return EXIT_STOP;
}

static enum exit_action handle_system_event(struct kvm_cpu *vcpu)
{
	switch (vcpu->run->system_event.type) {
	case KVM_SYSTEM_EVENT_SHUTDOWN:
		kvm_request_end(vcpu->kvm, KVM_END_POWEROFF, vcpu->kvm->guest_end_status,
				"guest powered off");
		break;
	case KVM_SYSTEM_EVENT_RESET:
		kvm_request_end(vcpu->kvm, KVM_END_REBOOT, vcpu->kvm->guest_end_status,
				"guest reset");
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

/* The debugger's (kvm_cpu_set_debug_hooks): set by the layer above, read by every vCPU thread;
 * an atomic pointer, as a debugger may be attached to a VM that runs already. */
static const struct kvm_cpu_debug_hooks *debug_hooks;

void kvm_cpu_set_debug_hooks(const struct kvm_cpu_debug_hooks *hooks)
{
	__atomic_store_n(&debug_hooks, hooks, __ATOMIC_RELEASE);
}

static const struct kvm_cpu_debug_hooks *hooks_now(void)
{
	return __atomic_load_n(&debug_hooks, __ATOMIC_ACQUIRE);
}

/* The arch completes what it can (x86/emulate.c); what it cannot ends the run here. */
static enum exit_action handle_internal_error(struct kvm_cpu *vcpu)
{
	const struct kvm_cpu_debug_hooks *h = hooks_now();
	char why[256]; /* as long as kvm->exit_reason */

	/* Before the completions: an int3 of gdb's is a stop, not the guest's #BP. */
	if (h && h->internal_error && h->internal_error(vcpu))
		return EXIT_CONTINUE;
	if (x86_handle_internal_error(vcpu, why, sizeof(why)) == 0)
		return EXIT_CONTINUE;
	kvm_cpu_dump(vcpu);
	kvm_request_exit(vcpu->kvm, EXIT_LKVM_ERROR, "%s", why);
	return EXIT_STOP;
}

static enum exit_action handle_fail_entry(struct kvm_cpu *vcpu)
{
	pr_err("vCPU %d: KVM_EXIT_FAIL_ENTRY, hardware reason 0x%llx", vcpu->id,
	       (unsigned long long)vcpu->run->fail_entry.hardware_entry_failure_reason);
	kvm_cpu_dump(vcpu);
	kvm_request_exit(vcpu->kvm, EXIT_LKVM_ERROR, "vCPU %d could not enter the guest", vcpu->id);
	return EXIT_STOP;
}

/* Only with gdb's guest debugging on: the vCPU holds itself, the stop goes to the server. */
static enum exit_action handle_debug(struct kvm_cpu *vcpu)
{
	const struct kvm_cpu_debug_hooks *h = hooks_now();

	if (h && h->debug_exit && h->debug_exit(vcpu))
		return EXIT_CONTINUE;
	kvm_request_exit(vcpu->kvm, EXIT_LKVM_ERROR, "vCPU %d: debug exit without gdb", vcpu->id);
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
	[KVM_EXIT_DEBUG] = handle_debug,
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

/* immediate_exit is one byte of the kvm_run page that a kicker (a pause, gdb, a stop: any thread)
 * and the vCPU itself both write, and KVM reads at KVM_RUN's entry: relaxed atomic stores, the
 * order coming from park_lock and the kick's signal as the comments at each store say. */
static void set_immediate_exit(struct kvm_cpu *vcpu, u8 v)
{
	__atomic_store_n(&vcpu->run->immediate_exit, v, __ATOMIC_RELAXED);
}

/* Wait in user space while a park is requested (pause, debug). KVM_RUN was left with any
 * pending I/O completed, so the registers are whole. */
/*
 * KVM finishes an I/O or MMIO instruction (a read's value in place, RIP past it) only in the
 * next KVM_RUN. A vCPU about to park right after handling such an exit makes that KVM_RUN with
 * immediate_exit set, which completes it and returns at once without entering the guest: the
 * state a parked vCPU shows (lkvm debug, gdb, a snapshot) is then past the instruction, and a
 * restored guest does not run it again (a UART byte printed twice was how it showed).
 */
static void complete_pending_io(struct kvm_cpu *vcpu)
{
	if (!vcpu->io_pending)
		return;
	vcpu->io_pending = false;
	set_immediate_exit(vcpu, 1);
	if (ioctl(vcpu->fd, KVM_RUN, 0) == 0 || (errno != EINTR && errno != EAGAIN))
		pr_debug("vCPU %d: completing its I/O before parking: KVM_RUN returned %s",
			 vcpu->id, errno ? strerror(errno) : "0");
}

static void vcpu_park(struct kvm_cpu *vcpu)
{
	struct kvm *kvm = vcpu->kvm;

	pthread_mutex_lock(&kvm->park_lock);
	kvm->parked++;
	pthread_cond_broadcast(&kvm->park_cond);
	/* held: cleared under park_lock by kvm_cpu_set_held, whose broadcast wakes this wait. */
	while ((atomic_load(&kvm->park_req) || atomic_load(&vcpu->held)) &&
	       !atomic_load(&kvm->stopping))
		pthread_cond_wait(&kvm->unpark_cond, &kvm->park_lock);
	kvm->parked--;
	/* Cleared before the loop re-checks `stopping`: kvm_cpu_stop_all sets stopping before
	 * immediate_exit, so a stop racing with this is never lost. */
	if (!atomic_load(&kvm->stopping))
		set_immediate_exit(vcpu, 0);
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
		kvm_request_exit(kvm, EXIT_LKVM_ERROR, "vCPU %d: cannot enter the sandbox",
				 vcpu->id);
		return NULL;
	}

	while (!atomic_load(&kvm->stopping)) {
		u32 reason;

		/* held: set by this thread (kvm_cpu_hold) or before it started. */
		if (atomic_load(&kvm->park_req) || atomic_load(&vcpu->held)) {
			complete_pending_io(vcpu);
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
			kvm_request_exit(kvm, EXIT_LKVM_ERROR, "vCPU %d: KVM_RUN: %s", vcpu->id,
					 strerror(errno));
			break;
		}
		reason = vcpu->run->exit_reason;
		if (reason < ARRAY_SIZE(vcpu->exits))
			kvm_cpu_count(&vcpu->exits[reason]);
		note_exit(vcpu, reason);
		if (reason >= ARRAY_SIZE(exit_handlers) || !exit_handlers[reason]) {
			pr_err("vCPU %d: unhandled KVM exit reason %u", vcpu->id, reason);
			kvm_cpu_dump(vcpu);
			kvm_request_exit(kvm, EXIT_LKVM_ERROR,
					 "vCPU %d: unhandled KVM exit reason %u", vcpu->id, reason);
			break;
		}
		if (exit_handlers[reason](vcpu) == EXIT_STOP)
			break;
		vcpu->io_pending = reason == KVM_EXIT_IO || reason == KVM_EXIT_MMIO;
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
	atomic_store(&vcpu->started, true);
	atomic_fetch_add(&vcpu->kvm->nr_started, 1);
	return 0;
}

/* Kick every started vCPU out of KVM_RUN; park_lock held (so no join runs meanwhile). */
static void kick_all_locked(struct kvm *kvm)
{
	for (int i = 0; i < kvm->nr_cpus; i++) {
		struct kvm_cpu *vcpu = kvm->cpus[i];

		if (!vcpu || !atomic_load(&vcpu->started))
			continue;
		/* immediate_exit covers a kick that lands between the loop's stop check and
		 * KVM_RUN; the signal covers a vCPU already inside KVM_RUN. */
		set_immediate_exit(vcpu, 1);
		pthread_kill(vcpu->thread, SIG_VCPU_KICK);
	}
}

int kvm_cpu_park_all(struct kvm *kvm, int timeout_ms)
{
	struct timespec dl;
	int ret = 0, want;

	deadline_after_ms(&dl, timeout_ms);
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
		ret = pthread_cond_clockwait(&kvm->park_cond, &kvm->park_lock, CLOCK_MONOTONIC,
					     &dl);
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

void kvm_cpu_hold(struct kvm_cpu *vcpu)
{
	atomic_store(&vcpu->held, true);
}

void kvm_cpu_set_held(struct kvm_cpu *vcpu, bool held)
{
	struct kvm *kvm = vcpu->kvm;

	/* Under park_lock, paired with vcpu_park's check of held before its wait: the vCPU
	 * either sees the new value or is already waiting for this broadcast. */
	pthread_mutex_lock(&kvm->park_lock);
	atomic_store(&vcpu->held, held);
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
	kick_all_locked(kvm);
	pthread_mutex_unlock(&kvm->park_lock);
	for (int i = 0; i < kvm->nr_cpus; i++) {
		struct kvm_cpu *vcpu = kvm->cpus[i];

		if (!vcpu || !atomic_load(&vcpu->started))
			continue;
		pthread_join(vcpu->thread, NULL);
		atomic_store(&vcpu->started, false);
	}
}

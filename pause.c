/* Pausing a running VM: vCPUs parked, device threads quiesced, the guest's clocks frozen; and lkvm debug's register dump. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "lkvm/dev.h"
#include "lkvm/kvm-cpu.h"
#include "lkvm/kvm.h"
#include "lkvm/x86.h"

/*
 * The guest's time must not jump over a pause. kvm-clock (what Linux keeps time with) is
 * saved with KVM_GET_CLOCK and put back with KVM_SET_CLOCK, so it resumes where it stopped.
 * The TSC keeps counting in hardware; where KVM has the per-vCPU TSC offset attribute we
 * move every vCPU's offset back by the same number of host cycles the pause lasted, so guest
 * code timing itself with RDTSC sees no gap either (and the vCPUs stay in step). Without the
 * attribute the guest TSC does advance over the pause; kvm-clock still does not.
 */
static void freeze_clock(struct kvm *kvm)
{
	struct kvm_clock_data c = { 0 };

	kvm->clock_saved = ioctl(kvm->vm_fd, KVM_GET_CLOCK, &c) == 0;
	kvm->clock_at_pause = c.clock;
	if (!kvm->clock_saved)
		pr_debug("pause: KVM_GET_CLOCK: %s (kvm-clock will advance over the pause)",
			 strerror(errno));
	kvm->host_tsc_at_pause = x86_host_tsc();
	for (int i = 0; i < kvm->nr_cpus; i++) {
		struct kvm_cpu *v = kvm->cpus[i];

		v->tsc_offset_saved = kvm_cpu_tsc_offset(v, KVM_GET_DEVICE_ATTR, &v->tsc_offset) ==
				      0;
		if (!v->tsc_offset_saved && i == 0)
			pr_debug(
				"pause: no KVM_VCPU_TSC_OFFSET (%s): the guest TSC advances over the pause",
				strerror(errno));
		/* Tells a guest that enabled kvm-clock it was stopped (no soft-lockup reports);
		 * EINVAL when it did not enable kvm-clock, which is fine. */
		if (ioctl(v->fd, KVM_KVMCLOCK_CTRL, 0) < 0 && errno != EINVAL)
			pr_debug("pause: KVM_KVMCLOCK_CTRL on vCPU %d: %s", i, strerror(errno));
	}
}

static void thaw_clock(struct kvm *kvm)
{
	u64 gap = x86_host_tsc() - kvm->host_tsc_at_pause;

	for (int i = 0; i < kvm->nr_cpus; i++) {
		struct kvm_cpu *v = kvm->cpus[i];
		u64 off = v->tsc_offset - gap;

		if (v->tsc_offset_saved && kvm_cpu_tsc_offset(v, KVM_SET_DEVICE_ATTR, &off) < 0)
			pr_debug("resume: setting vCPU %d's TSC offset: %s", i, strerror(errno));
		v->tsc_offset_saved = false;
	}
	if (kvm->clock_saved) {
		struct kvm_clock_data c = { .clock = kvm->clock_at_pause };

		if (ioctl(kvm->vm_fd, KVM_SET_CLOCK, &c) < 0)
			pr_debug("resume: KVM_SET_CLOCK: %s", strerror(errno));
	}
	kvm->clock_saved = false;
}

static int pause_locked(struct kvm *kvm, int timeout_ms, char *err, size_t errlen)
{
	int ret = kvm_cpu_park_all(kvm, timeout_ms);

	if (ret == -ESHUTDOWN)
		errfmt(err, errlen, "the VM is stopping");
	else if (ret == -ETIMEDOUT)
		errfmt(err, errlen, "a vCPU did not stop within %d ms; the VM keeps running",
		       timeout_ms);
	else if (ret < 0)
		errfmt(err, errlen, "cannot park the vCPUs: %s", strerror(-ret));
	if (ret < 0)
		return ret;
	kvm_devs_quiesce(kvm);
	freeze_clock(kvm);
	kvm->paused_since_ns = now_ns();
	atomic_store(&kvm->paused, true);
	return 0;
}

int kvm_pause_by(struct kvm *kvm, enum kvm_pauser who, int timeout_ms, char *err, size_t errlen)
{
	int ret = 0;

	pthread_mutex_lock(&kvm->pause_lock);
	if (!atomic_load(&kvm->paused)) {
		ret = pause_locked(kvm, timeout_ms, err, errlen);
	} else if (kvm->pause_owner == PAUSE_CTL && who == PAUSE_GDB) {
		/* gdb stops a VM lkvm pause stopped: its pause now, ended by gdb's continue. */
	} else if (kvm->pause_owner == (int)who) {
		errfmt(err, errlen, "already paused");
		ret = -EALREADY;
	} else {
		errfmt(err, errlen, "gdb holds the VM stopped: continue or detach in gdb first");
		ret = -EBUSY;
	}
	if (ret == 0)
		kvm->pause_owner = who;
	pthread_mutex_unlock(&kvm->pause_lock);
	return ret;
}

int kvm_resume_by(struct kvm *kvm, enum kvm_pauser who, char *err, size_t errlen)
{
	int ret = 0;

	pthread_mutex_lock(&kvm->pause_lock);
	if (!atomic_load(&kvm->paused)) {
		errfmt(err, errlen, "not paused");
		ret = -EALREADY;
	} else if (kvm->pause_owner != (int)who) {
		errfmt(err, errlen, "gdb holds the VM stopped: continue or detach in gdb first");
		ret = -EBUSY;
	} else {
		thaw_clock(kvm);
		kvm_devs_resume(kvm);
		kvm->paused_total_ns += now_ns() - kvm->paused_since_ns;
		kvm->pause_owner = 0;
		atomic_store(&kvm->paused, false);
		kvm_cpu_unpark_all(kvm);
	}
	pthread_mutex_unlock(&kvm->pause_lock);
	return ret;
}

u64 kvm_paused_ns(struct kvm *kvm)
{
	u64 ns;

	pthread_mutex_lock(&kvm->pause_lock);
	ns = kvm->paused_total_ns;
	if (atomic_load(&kvm->paused))
		ns += now_ns() - kvm->paused_since_ns;
	pthread_mutex_unlock(&kvm->pause_lock);
	return ns;
}

int kvm_pause(struct kvm *kvm, int timeout_ms, char *err, size_t errlen)
{
	return kvm_pause_by(kvm, PAUSE_CTL, timeout_ms, err, errlen);
}

int kvm_resume(struct kvm *kvm, char *err, size_t errlen)
{
	return kvm_resume_by(kvm, PAUSE_CTL, err, errlen);
}

char *kvm_debug_dump(struct kvm *kvm, int timeout_ms, char *err, size_t errlen)
{
	bool was_paused = atomic_load(&kvm->paused);
	size_t cap = 2048 * (size_t)(kvm->nr_cpus + 1), n = 0;
	char *buf = malloc(cap);
	int ret = 0;

	if (!buf) {
		errfmt(err, errlen, "out of memory");
		return NULL;
	}
	/* Registers can be read only while the vCPU is out of KVM_RUN. */
	if (!was_paused && (ret = kvm_cpu_park_all(kvm, timeout_ms)) < 0) {
		errfmt(err, errlen,
		       ret == -ESHUTDOWN ? "the VM is stopping" : "the vCPUs did not stop: %s",
		       strerror(-ret));
		free(buf);
		return NULL;
	}
	buf[0] = '\0';
	for (int i = 0; i < kvm->nr_cpus; i++) {
		int w = kvm_cpu_describe(kvm->cpus[i], buf + n, cap - n);

		if (w < 0)
			break;
		n += (size_t)w;
	}
	if (!was_paused)
		kvm_cpu_unpark_all(kvm);
	return buf;
}

/* The guest's CPUID table: what KVM supports, plus topology, hypervisor leaves and host quirks. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "lkvm/kvm-cpu.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"
#include "lkvm/x86.h"

#define CPUID_1_ECX_TSC_DEADLINE (1U << 24)
#define CPUID_1_ECX_HYPERVISOR (1U << 31)
#define CPUID_1_EDX_HTT (1U << 28)
#define CPUID_80000007_EDX_INVARIANT_TSC (1U << 8)
#define KVM_CPUID_SIGNATURE 0x40000000U
#define KVM_CPUID_FEATURES 0x40000001U

static struct kvm_cpuid2 *get_supported(int sys_fd)
{
	for (u32 n = 128; n <= 4096; n *= 2) {
		struct kvm_cpuid2 *c = calloc(1, sizeof(*c) + n * sizeof(c->entries[0]));

		if (!c)
			return NULL;
		c->nent = n;
		if (ioctl(sys_fd, KVM_GET_SUPPORTED_CPUID, c) == 0)
			return c;
		free(c);
		if (errno != E2BIG)
			return NULL;
	}
	errno = E2BIG;
	return NULL;
}

/* adjust_entry: one leaf of KVM's supported CPUID as this vCPU's guest sees it (ncpu vCPUs;
 * tsc_deadline and tsc_stops: see x86_setup_cpuid). */
static void adjust_entry(const struct kvm_cpu *vcpu, struct kvm_cpuid_entry2 *e, u32 ncpu,
			 bool tsc_deadline, bool tsc_stops)
{
	switch (e->function) {
	case 1:
		/* Initial APIC id and logical processor count, as the MP table says. */
		e->ebx = (e->ebx & 0x0000ffffU) | ((u32)vcpu->id << 24) | ((ncpu & 0xff) << 16);
		e->ecx |= CPUID_1_ECX_HYPERVISOR;
		if (tsc_deadline)
			e->ecx |= CPUID_1_ECX_TSC_DEADLINE;
		if (ncpu > 1)
			e->edx |= CPUID_1_EDX_HTT;
		break;
	case 0xb:
	case 0x1f:
		/* x2APIC topology: EDX is this CPU's x2APIC id. */
		e->edx = (u32)vcpu->id;
		break;
	case 0x80000007:
		if (!tsc_stops)
			e->edx &= ~CPUID_80000007_EDX_INVARIANT_TSC;
		break;
	case KVM_CPUID_FEATURES:
		/* On a PVM host the paravirtual send-IPI hypercall never returns on the
		 * target (HOST-KVM.md): hide it and Linux uses the APIC's ICR instead. */
		if (vcpu->kvm->pvm_quirks)
			e->eax &= ~(1U << KVM_FEATURE_PV_SEND_IPI_BIT);
		break;
	default:
		break;
	}
}

void x86_cpuid_digest(const struct kvm_cpuid_entry2 *e, u32 n, u8 *out)
{
	/* 8 CRC32Cs of different seeds: it says only "the same table or not". */
	for (u32 i = 0; i < 8; i++) {
		u32 crc = snap_crc32c(i * 0x9e3779b9u, e, n * sizeof(*e));

		memcpy(out + 4 * i, &crc, 4);
	}
}

int x86_setup_cpuid(struct kvm_cpu *vcpu, char *err, size_t errlen)
{
	struct kvm *kvm = vcpu->kvm;
	struct kvm_cpuid2 *c = get_supported(kvm->sys_fd);
	u32 ncpu = (u32)(kvm->cfg.nr_cpus > 0 ? kvm->cfg.nr_cpus : 1);
	bool have_sig = false;
	/* KVM emulates the TSC-deadline timer but leaves its CPUID bit to the VMM. Without it
	 * Linux calibrates the LAPIC timer against the PIT; where guest time is distorted (an
	 * emulated host) that calibration fails, the LAPIC timer is disabled and the guest's
	 * clock stops. */
	bool tsc_deadline = ioctl(kvm->sys_fd, KVM_CHECK_EXTENSION, KVM_CAP_TSC_DEADLINE_TIMER) > 0;
	/* A pause keeps kvm-clock still (KVM_SET_CLOCK), but the TSC only where KVM can move the
	 * vCPU's TSC offset (pause.c). Where it cannot, or where the guest reads the host's TSC
	 * natively whatever the offset (a PVM host runs guest code in host user mode), the TSC
	 * runs on over a pause: do not call it invariant, so Linux keeps kvm-clock as its
	 * clocksource instead of switching to the TSC, and its time does not jump by the pause. */
	bool tsc_stops = !kvm->pvm_quirks && kvm_cpu_tsc_stops_over_pause(vcpu);
	int ret = 0;

	if (!c) {
		errfmt(err, errlen, "KVM_GET_SUPPORTED_CPUID: %s", strerror(errno));
		return -errno;
	}
	for (u32 i = 0; i < c->nent; i++) {
		have_sig |= c->entries[i].function == KVM_CPUID_SIGNATURE;
		adjust_entry(vcpu, &c->entries[i], ncpu, tsc_deadline, tsc_stops);
	}
	if (!have_sig)
		pr_debug(
			"host reports no KVM signature leaf; the guest will not see KVM PV features");
	if (vcpu->id == 0)
		x86_cpuid_digest(c->entries, c->nent, kvm->cpuid_digest);
	if (ioctl(vcpu->fd, KVM_SET_CPUID2, c) < 0) {
		ret = -errno;
		errfmt(err, errlen, "KVM_SET_CPUID2: %s", strerror(errno));
	}
	free(c);
	return ret;
}

/* x86 specifics: the VM's x86 parts, the host TSC, CPUID for the guest, host detection, and completion of instructions the host cannot emulate. */
#ifndef LKVM_X86_H
#define LKVM_X86_H

#include <x86intrin.h>

#include "lkvm/util.h"

struct kvm;
struct kvm_cpu;

/* KVM PV feature bit in CPUID 0x40000001 EAX that hangs SMP guests on PVM hosts. */
#define KVM_FEATURE_PV_SEND_IPI_BIT 11

/* The x86 parts of a new VM (x86/vm.c): KVM's real-mode TSS and identity map placed, the
 * in-kernel IOAPIC/PIC and PIT made. 0 or -errno with err. */
int x86_vm_init(struct kvm *kvm, char *err, size_t errlen) __must_check;

/* The host's time stamp counter (the guest's TSC offsets are counted in it). */
static inline u64 x86_host_tsc(void)
{
	return __rdtsc();
}

/* True when the host KVM is the PVM flavour that emulates guest kernel code. */
bool x86_host_is_pvm(void);

/* Guest kernel parameters that keep a guest off what a PVM host cannot run. */
extern const char x86_pvm_kernel_params[];

/* The digest of a CPUID table that a snapshot records (32 bytes; kvm->cpuid_digest). */
struct kvm_cpuid_entry2;
void x86_cpuid_digest(const struct kvm_cpuid_entry2 *e, u32 n, u8 *out);

/* Give the vCPU its CPUID table (supported leaves, topology, hypervisor leaves). */
int x86_setup_cpuid(struct kvm_cpu *vcpu, char *err, size_t errlen) __must_check;

/* Handle KVM_EXIT_INTERNAL_ERROR. Returns 0 when the instruction was completed and the
 * vCPU may go on, or -errno (-EIO: nothing lkvm completes) after logging what it found, with
 * the reason the run must end in why (the exit dispatch, kvm-cpu.c, ends it). */
int x86_handle_internal_error(struct kvm_cpu *vcpu, char *why, size_t whylen) __must_check;

/* The guest's own int3 that a debugger's #BP exit (KVM_EXIT_DEBUG) took, RIP still on it: #BP
 * injected, which KVM delivers past the int3, as the guest would have had it. 0 or -errno. */
int x86_reinject_int3(struct kvm_cpu *vcpu) __must_check;

/*
 * Snapshot (x86/snap.c): a parked vCPU's whole state as records of its section, and the VM's
 * irqchip, PIT and kvm-clock (as the pause froze it) as records of the VM section; loads in
 * KVM's order on a fresh VM. 0, or -errno with a one-line reason (-EINVAL: the snapshot's
 * record is missing or malformed).
 */
struct snap_rec_buf;
int x86_snap_save_vcpu(struct kvm_cpu *v, struct snap_rec_buf *b, char *err,
		       size_t errlen) __must_check;
/* host_tsc: one reading for every vCPU of the VM, their TSCs' common origin. */
int x86_snap_load_vcpu(struct kvm_cpu *v, const void *sec, size_t len, u64 host_tsc, char *err,
		       size_t errlen) __must_check;
int x86_snap_save_vm(struct kvm *kvm, struct snap_rec_buf *b, char *err,
		     size_t errlen) __must_check;
int x86_snap_load_vm(struct kvm *kvm, const void *sec, size_t len, char *err,
		     size_t errlen) __must_check;

/* Pure decoder for tests: which completion (enum emu_insn) matches these bytes, or -1;
 * *len gets the instruction length. */
int x86_emu_classify(const u8 *insn, size_t n, int *len);
const char *x86_emu_name(int which);

#endif

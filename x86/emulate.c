/* Completion of instructions the host's emulator gives up on (KVM_EXIT_INTERNAL_ERROR, emulation). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>

#include "lkvm/kvm-cpu.h"
#include "lkvm/kvm.h"
#include "lkvm/x86.h"

#define RFLAGS_AC (1ULL << 18)
#define BP_VECTOR 3

/* Unsized, so the assertion below fails when a completion is added without a name. */
static const char *const emu_names[] = {
	[EMU_INT3] = "int3",
	[EMU_CLAC] = "clac",
	[EMU_STAC] = "stac",
	[EMU_FWAIT] = "fwait",
};
_Static_assert(ARRAY_SIZE(emu_names) == EMU_NR, "every completion has a name");

int x86_emu_classify(const u8 *insn, size_t n, int *len)
{
	if (n >= 1 && insn[0] == 0xcc) {
		*len = 1;
		return EMU_INT3;
	}
	if (n >= 1 && insn[0] == 0x9b) {
		*len = 1;
		return EMU_FWAIT;
	}
	if (n >= 3 && insn[0] == 0x0f && insn[1] == 0x01 && (insn[2] == 0xca || insn[2] == 0xcb)) {
		*len = 3;
		return insn[2] == 0xca ? EMU_CLAC : EMU_STAC;
	}
	return -1;
}

const char *x86_emu_name(int which)
{
	return which >= 0 && which < EMU_NR ? emu_names[which] : "?";
}

static int inject_bp(struct kvm_cpu *vcpu)
{
	struct kvm_vcpu_events ev;

	if (ioctl(vcpu->fd, KVM_GET_VCPU_EVENTS, &ev) < 0)
		return -errno;
	/* RIP already points past the int3, as a trap-type exception expects. */
	ev.exception.injected = 1;
	ev.exception.nr = BP_VECTOR;
	ev.exception.has_error_code = 0;
	ev.exception.error_code = 0;
	ev.flags = 0;
	if (ioctl(vcpu->fd, KVM_SET_VCPU_EVENTS, &ev) < 0)
		return -errno;
	return 0;
}

static int complete(struct kvm_cpu *vcpu, int which, int len)
{
	struct kvm_regs regs;

	if (ioctl(vcpu->fd, KVM_GET_REGS, &regs) < 0)
		return -errno;
	regs.rip += (u64)len;
	if (which == EMU_CLAC)
		regs.rflags &= ~RFLAGS_AC;
	else if (which == EMU_STAC)
		regs.rflags |= RFLAGS_AC;
	if (ioctl(vcpu->fd, KVM_SET_REGS, &regs) < 0)
		return -errno;
	if (which == EMU_INT3)
		return inject_bp(vcpu);
	return 0;
}

int x86_reinject_int3(struct kvm_cpu *vcpu)
{
	/* RIP stays on the int3: KVM delivers #BP as a software exception, past the instruction
	 * by the length its exit recorded (as QEMU re-injects it), where complete() above moves
	 * RIP itself because the emulator gave up before any exit had a length. */
	return inject_bp(vcpu);
}

int x86_handle_internal_error(struct kvm_cpu *vcpu, char *why, size_t whylen)
{
	struct kvm *kvm = vcpu->kvm;
	struct kvm_run *run = vcpu->run;
	char hex[3 * 16 + 1] = "";
	const u8 *insn = NULL;
	size_t n = 0;
	int which = -1, len = 0, ret;

	if (run->internal.suberror == KVM_INTERNAL_ERROR_EMULATION &&
	    (run->emulation_failure.flags & KVM_INTERNAL_ERROR_EMULATION_FLAG_INSTRUCTION_BYTES)) {
		insn = run->emulation_failure.insn_bytes;
		n = MIN((size_t)run->emulation_failure.insn_size,
			sizeof(run->emulation_failure.insn_bytes));
		for (size_t i = 0; i < n; i++)
			snprintf(hex + 3 * i, sizeof(hex) - 3 * i, "%02x ", insn[i]);
		which = x86_emu_classify(insn, n, &len);
	}
	if (which >= 0 && kvm->pvm_quirks) {
		ret = complete(vcpu, which, len);
		if (ret == 0) {
			atomic_fetch_add(&kvm->emu_hits[which], 1);
			return 0;
		}
		pr_err("vCPU %d: completing %s failed: %s", vcpu->id, emu_names[which],
		       strerror(-ret));
	}
	if (run->internal.suberror == KVM_INTERNAL_ERROR_EMULATION)
		pr_err("vCPU %d: the host could not emulate an instruction%s%s%s", vcpu->id,
		       n ? " (bytes: " : "", hex, n ? ")" : "");
	else
		pr_err("vCPU %d: KVM internal error, suberror %u", vcpu->id,
		       run->internal.suberror);
	if (which >= 0 && !kvm->pvm_quirks)
		pr_err("it is %s, which lkvm completes with --quirks pvm (or auto on a PVM host)",
		       emu_names[which]);
	errfmt(why, whylen, "vCPU %d: emulation failure the host cannot handle%s%s", vcpu->id,
	       n ? ", instruction bytes " : "", hex);
	return -EIO;
}

/* The x86 parts of a new VM: where KVM keeps its real-mode TSS and identity map, the in-kernel interrupt controllers and PIT. */
#include <errno.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/kvm.h>

#include "lkvm/kvm.h"
#include "lkvm/x86.h"

/* Where KVM may put its real-mode TSS and identity page table (needed on VMX without
 * unrestricted guest); just below the BIOS ROM area, inside the PCI hole, so never RAM. */
#define KVM_TSS_ADDR 0xfffbd000ULL
#define KVM_IDENTITY_MAP_ADDR 0xfffbc000ULL

int x86_vm_init(struct kvm *kvm, char *err, size_t errlen)
{
	struct kvm_pit_config pit = { .flags = 0 };
	u64 idmap = KVM_IDENTITY_MAP_ADDR;

	/* Only needed on VMX hosts without unrestricted guest; harmless elsewhere. */
	if (ioctl(kvm->vm_fd, KVM_SET_TSS_ADDR, (unsigned long)KVM_TSS_ADDR) < 0)
		pr_debug("KVM_SET_TSS_ADDR: %s (ignored)", strerror(errno));
	if (ioctl(kvm->vm_fd, KVM_SET_IDENTITY_MAP_ADDR, &idmap) < 0)
		pr_debug("KVM_SET_IDENTITY_MAP_ADDR: %s (ignored)", strerror(errno));
	if (ioctl(kvm->vm_fd, KVM_CREATE_IRQCHIP, 0) < 0) {
		errfmt(err, errlen, "KVM_CREATE_IRQCHIP: %s", strerror(errno));
		return -errno;
	}
	kvm_mark(kvm, "KVM_CREATE_IRQCHIP");
	if (ioctl(kvm->vm_fd, KVM_CREATE_PIT2, &pit) < 0) {
		errfmt(err, errlen, "KVM_CREATE_PIT2: %s", strerror(errno));
		return -errno;
	}
	kvm_mark(kvm, "KVM_CREATE_PIT2");
	return 0;
}

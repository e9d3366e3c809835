/* Unit tests: one fake VM, a struct kvm with its buses and guest memory on plain pages, no /dev/kvm. */
#ifndef LKVM_TEST_FAKE_VM_H
#define LKVM_TEST_FAKE_VM_H

#include <stdlib.h>
#include <string.h>
#include <check.h>

#include "lkvm/io.h"
#include "lkvm/kvm.h"
#include "lkvm/mem.h"

/* kvm as a device sees a VM that KVM never made: no descriptors (-1, so a stray ioctl fails
 * rather than hit fd 0), empty port and MMIO buses, and ram_size bytes of zeroed guest memory
 * (none when 0). The rest of kvm is the caller's, zero or as it was. */
static inline void fake_vm_init(struct kvm *kvm, u64 ram_size)
{
	kvm->vm_fd = kvm->sys_fd = kvm->stop_fd = -1;
	io_bus_init(&kvm->pio);
	io_bus_init(&kvm->mmio);
	if (ram_size) {
		u8 *ram = aligned_alloc(4096, ram_size);

		ck_assert_ptr_nonnull(ram);
		memset(ram, 0, ram_size);
		ck_assert_int_eq(gmem_init(&kvm->mem, ram, ram_size), 0);
	}
}

/* Undo fake_vm_init: the buses (their devices are the test's to remove first) and the RAM at
 * kvm->mem.base (a test that pointed kvm->mem at memory of its own clears it first). */
static inline void fake_vm_exit(struct kvm *kvm)
{
	io_bus_destroy(&kvm->pio);
	io_bus_destroy(&kvm->mmio);
	free(kvm->mem.base);
	kvm->mem.base = NULL;
}

/* A zeroed struct kvm of its own, set up by fake_vm_init; fake_vm_free ends it. */
static inline struct kvm *fake_vm_new(u64 ram_size)
{
	struct kvm *kvm = calloc(1, sizeof(*kvm));

	ck_assert_ptr_nonnull(kvm);
	fake_vm_init(kvm, ram_size);
	return kvm;
}

static inline void fake_vm_free(struct kvm *kvm)
{
	fake_vm_exit(kvm);
	free(kvm);
}

#endif

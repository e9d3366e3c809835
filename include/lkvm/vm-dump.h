/* lkvm dump: a running VM's RAM and registers as an ELF core, written while it is paused. */
#ifndef LKVM_VM_DUMP_H
#define LKVM_VM_DUMP_H

#include <stddef.h>

#include "lkvm/util.h"

struct kvm;

struct kvm_dump_result {
	u64 pause_ns, write_ns, bytes;
};

/* Pause the VM (as lkvm pause does), write its core to fd (elfcore.h), resume it; a VM lkvm
 * pause paused stays paused. 0 or -errno with a one-line reason. */
int kvm_dump(struct kvm *kvm, int fd, struct kvm_dump_result *res, char *err,
	     size_t errlen) __must_check;

#endif

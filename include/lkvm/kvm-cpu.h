/* Virtual CPUs: creation, the run loop on one named thread each, exit dispatch, counters. */
#ifndef LKVM_KVM_CPU_H
#define LKVM_KVM_CPU_H

#include <pthread.h>
#include <linux/kvm.h>

#include "lkvm/util.h"

struct kvm;
struct boot_entry;

struct kvm_cpu {
	struct kvm *kvm;
	int id;
	int fd;
	struct kvm_run *run;
	pthread_t thread;
	bool started;
	/* Per-vCPU exit counters, by KVM exit reason (only read after the thread joined
	 * or as a racy snapshot for statistics). */
	u64 exits[64];
	u64 pio_exits, mmio_exits;
};

int kvm_cpu_create(struct kvm *kvm, int id, char *err, size_t errlen) __must_check;
void kvm_cpu_destroy(struct kvm_cpu *vcpu);
/* Put the boot CPU in the state the boot protocol asks for. */
int kvm_cpu_setup_boot(struct kvm_cpu *vcpu, const struct boot_entry *e, char *err,
		       size_t errlen) __must_check;
int kvm_cpu_start(struct kvm_cpu *vcpu) __must_check;
/* Make every started vCPU leave KVM_RUN and its loop, then join them. */
void kvm_cpu_stop_all(struct kvm *kvm);
/* Print general and control registers at error level (for fatal exits). */
void kvm_cpu_dump(struct kvm_cpu *vcpu);

#endif

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
	/* Per-vCPU exit counters, by KVM exit reason. Written only by the vCPU thread, read
	 * by --stats on SIGUSR2 while it runs: both sides use relaxed atomics
	 * (kvm_cpu_count), a plain load + store on x86, no locked instruction. */
	u64 exits[64];
	u64 pio_exits, mmio_exits;
};

static inline void kvm_cpu_count(u64 *c)
{
	__atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

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

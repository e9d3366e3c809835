/* Virtual CPUs: creation, the run loop on one named thread each, exit dispatch, counters. */
#ifndef LKVM_KVM_CPU_H
#define LKVM_KVM_CPU_H

#include <pthread.h>
#include <stdatomic.h>
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
	/* Written by the thread that starts and joins the vCPUs, read by whoever kicks them
	 * (a pause, gdb) under park_lock, which the writer does not hold: atomic. */
	atomic_bool started;
	/* Per-vCPU exit counters, by KVM exit reason. Written only by the vCPU thread, read
	 * by --stats on SIGUSR2 while it runs: both sides use relaxed atomics
	 * (kvm_cpu_count), a plain load + store on x86, no locked instruction. */
	u64 exits[64];
	u64 pio_exits, mmio_exits;
	/* The last exit handled (for lkvm debug; read only while the vCPU is parked). */
	u32 last_exit;
	u64 last_exit_addr; /* port or guest-physical address of the last I/O or MMIO */
	u32 last_exit_len;
	bool last_exit_write;
	u64 last_exit_ns;
	/* The last exit was an I/O or MMIO one that the next KVM_RUN completes (kvm-cpu.c's
	 * complete_pending_io); the vCPU thread's own. */
	bool io_pending;
	/* TSC offset saved at pause (KVM_VCPU_TSC_OFFSET), when KVM has the attribute. */
	bool tsc_offset_saved;
	u64 tsc_offset;
	/* Parked by itself until kvm_cpu_set_held clears it (a gdb stop, --gdb-wait): set by its
	 * own thread (kvm_cpu_hold) or before it starts, cleared under park_lock. */
	atomic_bool held;
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
/* Park every started vCPU in user space (KVM_RUN left through immediate_exit and a kick; a
 * pending I/O is completed first). Returns 0 when all are parked within timeout_ms,
 * -ESHUTDOWN when the VM is stopping, -EBUSY when already parked, -ETIMEDOUT (then none stays
 * parked). kvm_cpu_unpark_all releases them. */
int kvm_cpu_park_all(struct kvm *kvm, int timeout_ms) __must_check;
void kvm_cpu_unpark_all(struct kvm *kvm);
/* Hold this vCPU: from its own thread (it parks at its loop's next check and stays parked,
 * counted by kvm_cpu_park_all) or before kvm_cpu_start. kvm_cpu_set_held, from any thread,
 * sets or clears it and wakes the vCPU to look again (it still waits for a park to end). */
void kvm_cpu_hold(struct kvm_cpu *vcpu);
void kvm_cpu_set_held(struct kvm_cpu *vcpu, bool held);
/* The vCPU's TSC offset attribute (KVM_VCPU_TSC_OFFSET): req is KVM_HAS_DEVICE_ATTR,
 * KVM_GET_DEVICE_ATTR or KVM_SET_DEVICE_ATTR, val what is read or written. 0 or -errno. */
int kvm_cpu_tsc_offset(struct kvm_cpu *vcpu, unsigned long req, u64 *val);
/* Whether a pause can keep this vCPU's TSC still (KVM offers KVM_VCPU_TSC_OFFSET on it). */
bool kvm_cpu_tsc_stops_over_pause(struct kvm_cpu *vcpu);
/* The guest's TSC against the host's, read from vcpu (kvm.h's struct kvm_guest_tsc): KVM_GET_TSC_KHZ
 * and the offset attribute, or where KVM lacks it the guest's IA32_TSC (KVM_GET_MSRS) between
 * two host TSC reads, the offset then within half that window. 0 or -errno. */
struct kvm_guest_tsc;
int kvm_cpu_guest_tsc(struct kvm_cpu *vcpu, struct kvm_guest_tsc *out) __must_check;
/* Exits a debugger takes before the vCPU loop's own handling, registered by the layer above
 * (x86/gdb-target.c) so the loop names nothing of it. Each returns true when it took the exit
 * (the vCPU continues), false to leave it to the loop. */
struct kvm_cpu_debug_hooks {
	bool (*debug_exit)(struct kvm_cpu *vcpu);     /* KVM_EXIT_DEBUG */
	bool (*internal_error)(struct kvm_cpu *vcpu); /* before the arch's completions */
};
/* Process-wide, set once before a vCPU can see such an exit; NULL takes none. */
void kvm_cpu_set_debug_hooks(const struct kvm_cpu_debug_hooks *hooks);
/* The KVM exit reason's name ("io", "mmio", "hlt", ...) or NULL. */
const char *kvm_exit_name(u32 reason);
/* Append the vCPU's registers and last exit to a text buffer (lkvm debug). */
int kvm_cpu_describe(struct kvm_cpu *vcpu, char *buf, size_t len);
/* Print general and control registers at error level (for fatal exits). */
void kvm_cpu_dump(struct kvm_cpu *vcpu);

#endif

/* lkvm's vCPUs as a gdb target (x86/gdb-target.c): the ops table, the VM's hooks, and the pure parts (register mapping, breakpoint tables, page walk) the unit tests check. */
#ifndef LKVM_GDB_TARGET_H
#define LKVM_GDB_TARGET_H

#include <linux/kvm.h>

#include "lkvm/gdb.h"
#include "lkvm/mem.h"
#include "lkvm/stats.h"

struct kvm;
struct kvm_cpu;

/* ---- the pure parts (x86/gdb-bp.c): no KVM, no threads ---- */

/* The four debug registers as gdb's hardware breakpoints and watchpoints fill them. */
struct gdb_dr {
	bool used[4];
	enum gdb_bp_kind kind[4];
	u64 addr[4], len[4];
};

/* Take a debug register for kind at addr (len 1, 2, 4 or 8, addr aligned to it; an execution
 * breakpoint's len is ignored, gdb sends 1). 0, -ENOSPC (all four used), -EINVAL (length or
 * alignment), -EOPNOTSUPP (GDB_WP_READ: x86 cannot watch reads alone; GDB_BP_SW). */
int gdb_dr_set(struct gdb_dr *d, enum gdb_bp_kind kind, u64 addr, u64 len);
/* Free the register that holds exactly this; -ENOENT when none does. */
int gdb_dr_clear(struct gdb_dr *d, enum gdb_bp_kind kind, u64 addr, u64 len);
/* DR7 for the registers in use (local enables, R/W and LEN fields, GE as KVM's users set). */
u64 gdb_dr7(const struct gdb_dr *d);
/* Which register DR6's B0-B3 names, or -1. */
int gdb_dr_hit(u64 dr6);

#define GDB_MAX_SW_BPS 64

/* Software breakpoints: the guest-physical byte under each int3 and what was there. */
struct gdb_sw_bp {
	u64 gva, gpa;
	u8 orig;
	bool used;
};
struct gdb_sw_table {
	struct gdb_sw_bp bp[GDB_MAX_SW_BPS];
};
/* The entry at gva, or NULL. */
struct gdb_sw_bp *gdb_sw_find(struct gdb_sw_table *t, u64 gva);
/* Put the guest's own bytes back over [gpa, gpa + len) of a copy read from guest memory, so a
 * read never shows lkvm's int3. */
void gdb_sw_unpatch(const struct gdb_sw_table *t, u64 gpa, u8 *buf, size_t len);

/* The control registers a page walk needs. */
struct gdb_paging {
	u64 cr0, cr3, cr4, efer;
};
/* gva to gpa through the guest's page tables in m (no paging, 32-bit, PAE, 4- and 5-level;
 * large pages). 0, or -EFAULT where not mapped or a table lies outside guest RAM. */
int gdb_walk(const struct guest_mem *m, const struct gdb_paging *p, u64 gva, u64 *gpa);

/* kvm_regs, kvm_sregs, kvm_fpu and MSR_KERNEL_GS_BASE to gdb's register file, and back
 * (to_kvm changes only what gdb's file holds; the rest of each struct is left as read). */
void gdb_regs_from_kvm(const struct kvm_regs *r, const struct kvm_sregs *s, const struct kvm_fpu *f,
		       u64 kernel_gs_base, struct gdb_x86_regs *g);
void gdb_regs_to_kvm(const struct gdb_x86_regs *g, struct kvm_regs *r, struct kvm_sregs *s,
		     struct kvm_fpu *f, u64 *kernel_gs_base);

/* ---- the VM side (x86/gdb-target.c) ---- */

struct gdb_vm;

/* What the server calls; ctx is the struct gdb_vm. */
extern const struct gdb_target_ops gdb_vm_ops;

/* Whether this host's KVM can debug guests (KVM_CAP_SET_GUEST_DEBUG), and if not why, in err. */
int gdb_vm_supported(struct kvm *kvm, char *err, size_t errlen);
/* The target for kvm (kvm->gdb points at it). wait: every vCPU is held before its first
 * instruction (--gdb-wait) with a TRAP stop of thread 1 pending. 0 or -errno. */
int gdb_vm_create(struct kvm *kvm, bool wait, struct gdb_vm **out) __must_check;
/* The server the stops go to (NULL: none; stops are only kept for gdb_vm_wait_stop). */
void gdb_vm_set_server(struct gdb_vm *g, struct gdb_server *s);
/* Start the server's thread (kvm->gdb's, if any): once privileges are dropped, before the vCPUs
 * start. It enters the sandbox's gdb kind. 0, or -errno with err. */
int gdb_vm_serve(struct kvm *kvm, char *err, size_t errlen) __must_check;
/* `lkvm debug NAME --gdb` (CTL_GDB, on the control thread): a gdb server for the client on fd
 * (a copy of it; fd stays the caller's), in the running VM, the target made if there is none;
 * wake_fd: the caller's eventfd for the server's wake-ups (gdb_server_attach_fd).
 * -EOPNOTSUPP (the host cannot debug guests), -EBUSY (a gdb is served already: one at a time),
 * or another -errno, each with err. */
int gdb_vm_attach(struct kvm *kvm, int fd, int wake_fd, char *err, size_t errlen) __must_check;
/* gdb's counters (gdb.stops, gdb.breakpoints_hit, gdb.steps, gdb.packets, gdb.bad_packets,
 * gdb.clients) of every server this VM had, once it had one; nothing before. Any thread. */
void gdb_vm_stats(struct kvm *kvm, stats_put_fn put, void *arg);
/* The run ended (the vCPUs and the control thread are stopped): a gdb still connected hears
 * the exit status, the server goes, then the target (kvm->gdb, if any). */
void gdb_vm_end(struct kvm *kvm, int status);
/* kvm->gdb cleared, g freed; the vCPUs are stopped before and the VM goes after (its int3s
 * and debug registers with it). */
void gdb_vm_destroy(struct gdb_vm *g);
/* The last stop a vCPU reported, waited for up to timeout_ms (tests; the server has its own
 * notification). 0, or -ETIMEDOUT. */
int gdb_vm_wait_stop(struct gdb_vm *g, struct gdb_stop *st, int timeout_ms);

/* kvm-cpu.c's exits, on the vCPU's thread: KVM_EXIT_DEBUG, and an int3 the host could not
 * emulate (a PVM host at CPL0). true when it was gdb's (the vCPU then holds itself). */
bool gdb_vm_debug_exit(struct kvm_cpu *vcpu);
bool gdb_vm_emulated_int3(struct kvm_cpu *vcpu);

#endif

/* lkvm's vCPUs as a gdb target: registers, memory at guest virtual addresses, breakpoints in guest memory and debug registers, steps, and the stop handoff from a vCPU to the server. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

#include "lkvm/gdb-target.h"
#include "lkvm/kvm-cpu.h"
#include "lkvm/kvm.h"
#include "lkvm/sandbox.h"
#include "lkvm/x86.h"

#define DB_VECTOR 1
#define BP_VECTOR 3
#define INT3 0xcc
#define MSR_KERNEL_GS_BASE 0xc0000102
#define PAGE_SIZE 4096ull
#define STOP_TIMEOUT_MS 2000
#define NO_ADDR (~0ull)

/*
 * The stop handoff. A vCPU that takes a debug exit records the stop under `lock` (the first
 * since the last resume wins; a later one is dropped: a breakpoint's int3 or an execution
 * breakpoint fires again when its vCPU runs on), holds itself (kvm_cpu_hold: it parks at its
 * loop's next check, counted as parked, and never re-enters the guest) and tells the server,
 * which cannot wait for all vCPUs from there. The server's stop_all then parks the others
 * (kvm_pause_by: the same park and clock freeze as `lkvm pause`, owned by gdb). Everything else the ops do
 * happens while every vCPU is parked, so the tables below need no lock: the vCPUs read them
 * only while running, the server writes them only while none runs (the park's mutex orders
 * the two).
 */
struct gdb_vm {
	struct kvm *kvm;
	/* Under lock: the server stops go to; attached: it serves `lkvm debug NAME --gdb` (one
	 * client, then its thread ends), else it is run's --gdb. past: the counters of attached
	 * servers gone (gdb_vm_stats adds the live one's). */
	struct gdb_server *server;
	bool attached;
	struct gdb_server_stats past;
	pthread_mutex_t lock; /* the stop record, and the server above */
	pthread_cond_t cond;  /* a stop was recorded (gdb_vm_wait_stop) */
	bool have_stop;
	struct gdb_stop stop;
	bool stopped; /* the server's side: the VM is paused for gdb (server thread only) */
	struct kvm_cpu *stepping_over; /* under lock: the vCPU stepping off a breakpoint */
	struct gdb_dr dr;
	struct gdb_sw_table sw;
};

int gdb_vm_supported(struct kvm *kvm, char *err, size_t errlen)
{
	if (ioctl(kvm->sys_fd, KVM_CHECK_EXTENSION, KVM_CAP_SET_GUEST_DEBUG) <= 0) {
		errfmt(err, errlen,
		       "this host's KVM cannot debug guests (no KVM_CAP_SET_GUEST_DEBUG)");
		return -EOPNOTSUPP;
	}
	return 0;
}

/* The vCPU loop's way to the stops below (kvm-cpu.c names nothing of gdb's). */
static const struct kvm_cpu_debug_hooks gdb_vm_hooks = {
	.debug_exit = gdb_vm_debug_exit,
	.internal_error = gdb_vm_emulated_int3,
};

int gdb_vm_create(struct kvm *kvm, bool wait, struct gdb_vm **out)
{
	struct gdb_vm *g = calloc(1, sizeof(*g));

	if (!g)
		return -ENOMEM;
	/* Before kvm->gdb is published: a vCPU that sees it also reaches the hooks. */
	kvm_cpu_set_debug_hooks(&gdb_vm_hooks);
	g->kvm = kvm;
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->cond, NULL);
	if (wait) {
		/* Held before they start, so none runs a guest instruction until gdb resumes. */
		for (int i = 0; i < kvm->nr_cpus; i++)
			kvm_cpu_hold(kvm->cpus[i]);
		g->have_stop = true;
		g->stop = (struct gdb_stop){ .reason = GDB_STOP_TRAP, .thread = 1 };
	}
	/* Published to the vCPUs (their debug exits read it), which may run already: a gdb
	 * attached to a running VM (gdb_vm_attach). */
	__atomic_store_n(&kvm->gdb, g, __ATOMIC_RELEASE);
	*out = g;
	return 0;
}

void gdb_vm_set_server(struct gdb_vm *g, struct gdb_server *s)
{
	pthread_mutex_lock(&g->lock);
	g->server = s;
	pthread_mutex_unlock(&g->lock);
}

int gdb_vm_serve(struct kvm *kvm, char *err, size_t errlen)
{
	struct gdb_vm *g = kvm->gdb;

	if (!g || !g->server)
		return 0;
	return gdb_server_run(g->server, err, errlen);
}

void gdb_vm_destroy(struct gdb_vm *g)
{
	if (!g)
		return;
	g->kvm->gdb = NULL;
	pthread_cond_destroy(&g->cond);
	pthread_mutex_destroy(&g->lock);
	free(g);
}

int gdb_vm_wait_stop(struct gdb_vm *g, struct gdb_stop *st, int timeout_ms)
{
	struct timespec dl;
	int ret = 0;

	deadline_after_ms(&dl, timeout_ms);
	pthread_mutex_lock(&g->lock);
	while (!g->have_stop && ret == 0)
		ret = pthread_cond_clockwait(&g->cond, &g->lock, CLOCK_MONOTONIC, &dl);
	if (g->have_stop)
		*st = g->stop;
	ret = g->have_stop ? 0 : -ETIMEDOUT;
	pthread_mutex_unlock(&g->lock);
	return ret;
}

/* On the vCPU's thread: record the stop, hold this vCPU, tell the server (see the top). */
static void stop_here(struct gdb_vm *g, struct kvm_cpu *vcpu, const struct gdb_stop *st)
{
	struct gdb_server *server;
	bool first;

	pthread_mutex_lock(&g->lock);
	/* Only a session's breakpoints and steps stop a vCPU, and its server goes only after the
	 * session ended with every vCPU parked: server stays valid past the unlock. */
	server = g->server;
	first = !g->have_stop;
	if (first) {
		g->have_stop = true;
		g->stop = *st;
		pthread_cond_broadcast(&g->cond);
	}
	pthread_mutex_unlock(&g->lock);
	kvm_cpu_hold(vcpu);
	if (first && server)
		gdb_server_notify_stop(server, st);
}

static struct kvm_cpu *thread_vcpu(struct gdb_vm *g, int thread)
{
	if (thread < 1 || thread > g->kvm->nr_cpus)
		return NULL;
	return g->kvm->cpus[thread - 1];
}

/* kvm_msrs ends in a flexible array: room for the one entry. */
union one_msr {
	struct kvm_msrs h;
	u8 room[sizeof(struct kvm_msrs) + sizeof(struct kvm_msr_entry)];
};

static int vcpu_state(struct kvm_cpu *v, struct kvm_regs *r, struct kvm_sregs *s, struct kvm_fpu *f,
		      u64 *kgs)
{
	union one_msr m = { .h.nmsrs = 1 };

	m.h.entries[0].index = MSR_KERNEL_GS_BASE;
	if (ioctl(v->fd, KVM_GET_REGS, r) < 0 || ioctl(v->fd, KVM_GET_SREGS, s) < 0 ||
	    ioctl(v->fd, KVM_GET_FPU, f) < 0)
		return -errno;
	if (ioctl(v->fd, KVM_GET_MSRS, &m) != 1)
		return -EIO;
	*kgs = m.h.entries[0].data;
	return 0;
}

static int op_get_regs(void *ctx, int thread, struct gdb_x86_regs *g)
{
	struct kvm_cpu *v = thread_vcpu(ctx, thread);
	struct kvm_regs r;
	struct kvm_sregs s;
	struct kvm_fpu f;
	u64 kgs;
	int ret;

	if (!v)
		return -ESRCH;
	ret = vcpu_state(v, &r, &s, &f, &kgs);
	if (ret == 0)
		gdb_regs_from_kvm(&r, &s, &f, kgs, g);
	return ret;
}

static int op_set_regs(void *ctx, int thread, const struct gdb_x86_regs *g)
{
	struct kvm_cpu *v = thread_vcpu(ctx, thread);
	union one_msr m = { .h.nmsrs = 1 };
	struct kvm_regs r;
	struct kvm_sregs s;
	struct kvm_fpu f;
	u64 kgs;
	int ret;

	if (!v)
		return -ESRCH;
	ret = vcpu_state(v, &r, &s, &f, &kgs);
	if (ret < 0)
		return ret;
	gdb_regs_to_kvm(g, &r, &s, &f, &kgs);
	m.h.entries[0].index = MSR_KERNEL_GS_BASE;
	m.h.entries[0].data = kgs;
	if (ioctl(v->fd, KVM_SET_REGS, &r) < 0 || ioctl(v->fd, KVM_SET_SREGS, &s) < 0 ||
	    ioctl(v->fd, KVM_SET_FPU, &f) < 0)
		return -errno;
	return ioctl(v->fd, KVM_SET_MSRS, &m) == 1 ? 0 : -EIO;
}

/* gva's guest-physical address through v's page tables: KVM_TRANSLATE where it works, lkvm's
 * own walk where it does not (a PVM host answers valid=0 for every address). */
static int translate(struct gdb_vm *g, struct kvm_cpu *v, u64 gva, u64 *gpa)
{
	struct kvm_translation t = { .linear_address = gva };
	struct kvm_sregs s;
	struct gdb_paging p;

	if (ioctl(v->fd, KVM_TRANSLATE, &t) == 0 && t.valid) {
		*gpa = t.physical_address;
		return 0;
	}
	if (ioctl(v->fd, KVM_GET_SREGS, &s) < 0)
		return -errno;
	p = (struct gdb_paging){ .cr0 = s.cr0, .cr3 = s.cr3, .cr4 = s.cr4, .efer = s.efer };
	return gdb_walk(&g->kvm->mem, &p, gva, gpa);
}

/* One page's part of a memory access: its gpa and how many bytes stay on the page. */
static int page_part(struct gdb_vm *g, struct kvm_cpu *v, u64 gva, size_t left, u64 *gpa, size_t *n)
{
	*n = (size_t)MIN((u64)left, PAGE_SIZE - (gva & (PAGE_SIZE - 1)));
	return translate(g, v, gva, gpa);
}

static int op_read_mem(void *ctx, int thread, u64 gva, void *buf, size_t len)
{
	struct gdb_vm *g = ctx;
	struct kvm_cpu *v = thread_vcpu(g, thread);
	u8 *out = buf;

	if (!v)
		return -ESRCH;
	while (len) {
		u64 gpa;
		size_t n;

		if (page_part(g, v, gva, len, &gpa, &n) < 0 || gmem_read(&g->kvm->mem, gpa, out, n))
			return -EFAULT;
		gdb_sw_unpatch(&g->sw, gpa, out, n); /* the guest's bytes, not lkvm's int3 */
		gva += n;
		out += n;
		len -= n;
	}
	return 0;
}

static int op_write_mem(void *ctx, int thread, u64 gva, const void *buf, size_t len)
{
	struct gdb_vm *g = ctx;
	struct kvm_cpu *v = thread_vcpu(g, thread);
	const u8 *in = buf;
	static const u8 int3 = INT3;

	if (!v)
		return -ESRCH;
	while (len) {
		u64 gpa;
		size_t n;

		if (page_part(g, v, gva, len, &gpa, &n) < 0 || gmem_write(&g->kvm->mem, gpa, in, n))
			return -EFAULT;
		/* A write over a breakpoint changes the byte it puts back; the int3 stays. */
		for (int i = 0; i < GDB_MAX_SW_BPS; i++) {
			struct gdb_sw_bp *b = &g->sw.bp[i];

			if (b->used && b->gpa >= gpa && b->gpa - gpa < n) {
				b->orig = in[b->gpa - gpa];
				(void)!gmem_write(&g->kvm->mem, b->gpa, &int3, 1);
			}
		}
		gva += n;
		in += n;
		len -= n;
	}
	return 0;
}

static int sw_set(struct gdb_vm *g, u64 gva)
{
	static const u8 int3 = INT3;
	struct gdb_sw_bp *b = gdb_sw_find(&g->sw, gva);
	u64 gpa;

	if (b)
		return 0;
	for (int i = 0; i < GDB_MAX_SW_BPS && !b; i++)
		if (!g->sw.bp[i].used)
			b = &g->sw.bp[i];
	if (!b)
		return -ENOSPC;
	/* Through vCPU 0's page tables: a kernel's text is mapped alike on every vCPU. */
	if (translate(g, g->kvm->cpus[0], gva, &gpa) < 0 ||
	    gmem_read(&g->kvm->mem, gpa, &b->orig, 1) || gmem_write(&g->kvm->mem, gpa, &int3, 1))
		return -EFAULT;
	b->gva = gva;
	b->gpa = gpa;
	b->used = true;
	return 0;
}

static int sw_clear(struct gdb_vm *g, u64 gva)
{
	struct gdb_sw_bp *b = gdb_sw_find(&g->sw, gva);

	if (!b)
		return -ENOENT;
	b->used = false;
	return gmem_write(&g->kvm->mem, b->gpa, &b->orig, 1) ? -EFAULT : 0;
}

static int op_set_bp(void *ctx, enum gdb_bp_kind kind, u64 addr, u64 len)
{
	return kind == GDB_BP_SW ? sw_set(ctx, addr)
				 : gdb_dr_set(&((struct gdb_vm *)ctx)->dr, kind, addr, len);
}

static int op_clear_bp(void *ctx, enum gdb_bp_kind kind, u64 addr, u64 len)
{
	return kind == GDB_BP_SW ? sw_clear(ctx, addr)
				 : gdb_dr_clear(&((struct gdb_vm *)ctx)->dr, kind, addr, len);
}

static int op_nthreads(void *ctx)
{
	return ((struct gdb_vm *)ctx)->kvm->nr_cpus;
}

/* Every vCPU parked and the clocks frozen, as `lkvm pause` does (a gdb stop is a pause). */
static int op_stop_all(void *ctx)
{
	struct gdb_vm *g = ctx;
	char err[128];
	int ret;

	if (g->stopped)
		return 0;
	ret = kvm_pause_by(g->kvm, PAUSE_GDB, STOP_TIMEOUT_MS, err, sizeof(err));
	if (ret < 0)
		return ret;
	g->stopped = true;
	return 0;
}

/* The guest-debug flags for vCPU v, applied on every resume (they are per vCPU in KVM); an
 * execution breakpoint at skip (NO_ADDR: none) is left out, so v can step off it. */
static int apply_debug(struct gdb_vm *g, struct kvm_cpu *v, bool step, u64 skip)
{
	struct kvm_guest_debug d = { 0 };
	struct gdb_dr dr = g->dr;
	bool any_sw = false;

	for (int i = 0; i < GDB_MAX_SW_BPS; i++)
		any_sw |= g->sw.bp[i].used;
	for (int i = 0; i < 4; i++)
		dr.used[i] &= !(dr.kind[i] == GDB_BP_HW && dr.addr[i] == skip);
	d.arch.debugreg[7] = gdb_dr7(&dr);
	for (int i = 0; i < 4; i++)
		d.arch.debugreg[i] = dr.used[i] ? dr.addr[i] : 0;
	if (any_sw)
		d.control |= KVM_GUESTDBG_USE_SW_BP;
	if (d.arch.debugreg[7])
		d.control |= KVM_GUESTDBG_USE_HW_BP;
	if (step)
		d.control |= KVM_GUESTDBG_SINGLESTEP;
	if (d.control)
		d.control |= KVM_GUESTDBG_ENABLE;
	return ioctl(v->fd, KVM_SET_GUEST_DEBUG, &d) < 0 ? -errno : 0;
}

/* v's RIP when one of gdb's execution breakpoints is there (it would fire again at once when
 * v runs on: a debug-register breakpoint is a fault, before the instruction), else NO_ADDR. */
static u64 on_hw_bp(struct gdb_vm *g, struct kvm_cpu *v)
{
	struct kvm_regs r;

	if (ioctl(v->fd, KVM_GET_REGS, &r) < 0)
		return NO_ADDR;
	for (int i = 0; i < 4; i++)
		if (g->dr.used[i] && g->dr.kind[i] == GDB_BP_HW && g->dr.addr[i] == r.rip)
			return r.rip;
	return NO_ADDR;
}

/* Step held vCPU v off the execution breakpoint at addr, as gdb stubs do (RF would do it too,
 * but a PVM host ignores it): v alone runs one instruction with that breakpoint out, its step's
 * debug exit holds it again without a stop (gdb_vm_debug_exit), and its flags are re-applied
 * by the caller. The other vCPUs stay held. */
static int step_over(struct gdb_vm *g, struct kvm_cpu *v, u64 addr)
{
	struct timespec dl;
	int ret = apply_debug(g, v, true, addr);

	if (ret < 0)
		return ret;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += STOP_TIMEOUT_MS / 1000;
	pthread_mutex_lock(&g->lock);
	g->stepping_over = v;
	pthread_mutex_unlock(&g->lock);
	kvm_cpu_set_held(v, false);
	pthread_mutex_lock(&g->lock);
	while (g->stepping_over && ret == 0)
		ret = -pthread_cond_clockwait(&g->cond, &g->lock, CLOCK_MONOTONIC, &dl);
	ret = g->stepping_over ? -ETIMEDOUT : 0;
	g->stepping_over = NULL;
	pthread_mutex_unlock(&g->lock);
	if (ret < 0)
		kvm_cpu_set_held(v, true); /* parks at its next exit */
	return ret;
}

/* The VM out of its pause, every vCPU still held (they park on held alone). */
static int unpause_held(struct gdb_vm *g)
{
	char err[128];
	int ret;

	for (int i = 0; i < g->kvm->nr_cpus; i++)
		kvm_cpu_set_held(g->kvm->cpus[i], true);
	if (!g->stopped) /* --gdb-wait's first stop, before any stop_all */
		return 0;
	g->stopped = false;
	ret = kvm_resume_by(g->kvm, PAUSE_GDB, err, sizeof(err));
	return ret == -EALREADY ? 0 : ret;
}

static int op_resume(void *ctx, int step_thread)
{
	struct gdb_vm *g = ctx;
	struct kvm *kvm = g->kvm;
	int ret;

	if (step_thread && !thread_vcpu(g, step_thread))
		return -ESRCH;
	ret = unpause_held(g);
	for (int i = 0; i < kvm->nr_cpus && ret == 0; i++) {
		struct kvm_cpu *v = kvm->cpus[i];
		u64 bp = on_hw_bp(g, v);

		/* A stepped vCPU steps with its breakpoint out; a continued one steps off it. */
		if (i + 1 == step_thread)
			ret = apply_debug(g, v, true, bp);
		else if (!step_thread && bp != NO_ADDR)
			ret = step_over(g, v, bp);
		if (ret == 0 && i + 1 != step_thread)
			ret = apply_debug(g, v, false, NO_ADDR);
	}
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&g->lock);
	g->have_stop = false; /* the next vCPU's stop is the one to report */
	pthread_mutex_unlock(&g->lock);
	/* A step runs one vCPU: the others stay held. */
	for (int i = 0; i < kvm->nr_cpus; i++)
		if (!step_thread || i + 1 == step_thread)
			kvm_cpu_set_held(kvm->cpus[i], false);
	return 0;
}

static void op_detach(void *ctx)
{
	struct gdb_vm *g = ctx;

	for (int i = 0; i < GDB_MAX_SW_BPS; i++)
		if (g->sw.bp[i].used)
			(void)!sw_clear(g, g->sw.bp[i].gva);
	memset(&g->dr, 0, sizeof(g->dr));
	(void)!op_resume(g, 0); /* with no breakpoint left: guest debugging off */
}

static void op_kill(void *ctx)
{
	struct gdb_vm *g = ctx;

	kvm_request_exit(g->kvm, EXIT_STOPPED, "gdb killed the VM");
	/* Held or parked vCPUs wake on stopping once the run joins them (kvm_cpu_stop_all). */
}

/* The server's thread confines itself before it reads a byte from gdb. */
static int op_thread_start(void *ctx)
{
	struct gdb_vm *g = ctx;
	int ret = sandbox_enter(g->kvm, SB_GDB);

	if (ret < 0)
		kvm_request_exit(g->kvm, EXIT_LKVM_ERROR, "gdb: cannot enter the sandbox");
	return ret;
}

const struct gdb_target_ops gdb_vm_ops = {
	.nthreads = op_nthreads,
	.stop_all = op_stop_all,
	.resume = op_resume,
	.get_regs = op_get_regs,
	.set_regs = op_set_regs,
	.read_mem = op_read_mem,
	.write_mem = op_write_mem,
	.set_bp = op_set_bp,
	.clear_bp = op_clear_bp,
	.detach = op_detach,
	.kill = op_kill,
	.thread_start = op_thread_start,
};

bool gdb_vm_debug_exit(struct kvm_cpu *vcpu)
{
	struct gdb_vm *g = __atomic_load_n(&vcpu->kvm->gdb, __ATOMIC_ACQUIRE);
	const struct kvm_debug_exit_arch *a = &vcpu->run->debug.arch;
	struct gdb_stop st = { .reason = GDB_STOP_TRAP, .thread = vcpu->id + 1 };
	int n;

	if (!g)
		return false;
	pthread_mutex_lock(&g->lock);
	if (g->stepping_over == vcpu) { /* its step off a breakpoint: no stop (step_over) */
		g->stepping_over = NULL;
		pthread_cond_broadcast(&g->cond);
		kvm_cpu_hold(vcpu);
		pthread_mutex_unlock(&g->lock);
		return true;
	}
	pthread_mutex_unlock(&g->lock);
	if (a->exception == BP_VECTOR && !gdb_sw_find(&g->sw, a->pc)) {
		/* The guest's own int3 (a kernel's self-test, its kprobes): give it back. */
		return x86_reinject_int3(vcpu) == 0;
	}
	n = a->exception == DB_VECTOR ? gdb_dr_hit(a->dr6) : -1;
	if (n >= 0 && g->dr.used[n] && g->dr.kind[n] != GDB_BP_HW) {
		st.reason = GDB_STOP_WATCH;
		st.watch = g->dr.kind[n];
		st.watch_addr = g->dr.addr[n];
	}
	stop_here(g, vcpu, &st);
	return true;
}

bool gdb_vm_emulated_int3(struct kvm_cpu *vcpu)
{
	struct gdb_vm *g = __atomic_load_n(&vcpu->kvm->gdb, __ATOMIC_ACQUIRE);
	const struct kvm_run *run = vcpu->run;
	struct gdb_stop st = { .reason = GDB_STOP_TRAP, .thread = vcpu->id + 1 };
	struct kvm_regs r;

	/* A PVM host's emulator gives up on int3 at CPL0 before it raises #BP: RIP is still on
	 * it, as a KVM_EXIT_DEBUG would leave it. Only one of lkvm's own is gdb's. */
	if (!g || run->internal.suberror != KVM_INTERNAL_ERROR_EMULATION ||
	    !(run->emulation_failure.flags & KVM_INTERNAL_ERROR_EMULATION_FLAG_INSTRUCTION_BYTES) ||
	    run->emulation_failure.insn_size < 1 || run->emulation_failure.insn_bytes[0] != INT3)
		return false;
	if (ioctl(vcpu->fd, KVM_GET_REGS, &r) < 0 || !gdb_sw_find(&g->sw, r.rip))
		return false;
	stop_here(g, vcpu, &st);
	return true;
}

/* ---- attached to a running VM (`lkvm debug NAME --gdb`) ---- */

static void stats_add(struct gdb_server_stats *to, const struct gdb_server_stats *a)
{
	to->stops += a->stops;
	to->breakpoints_hit += a->breakpoints_hit;
	to->steps += a->steps;
	to->packets += a->packets;
	to->bad_packets += a->bad_packets;
	to->clients += a->clients;
}

/* The server of an attach whose client has gone: its counters kept, its thread joined (it has
 * ended). -EBUSY with err while a gdb is served. Control thread. */
static int reap(struct gdb_vm *g, char *err, size_t errlen)
{
	struct gdb_server_stats st;
	struct gdb_server *s;

	pthread_mutex_lock(&g->lock);
	s = g->server;
	if (s && (!g->attached || !gdb_server_ended(s))) {
		pthread_mutex_unlock(&g->lock);
		errfmt(err, errlen, "gdb: %s: one gdb at a time",
		       g->attached ? "another gdb is attached (lkvm debug --gdb)"
				   : "this VM serves gdb on its own address (lkvm run --gdb)");
		return -EBUSY;
	}
	if (s) {
		gdb_server_get_stats(s, &st);
		stats_add(&g->past, &st);
	}
	g->server = NULL;
	pthread_mutex_unlock(&g->lock);
	gdb_server_stop(s);
	return 0;
}

/*
 * The control thread's, and why there: the VM's threads are sandboxed by now, and the only one
 * that takes a request is the control thread, whose filter (sandbox.c) may create threads of
 * the gdb kind for this. The server serves a copy of the client's connection (fd stays the
 * caller's, to answer on and close); its thread exists only while that client is connected,
 * and the VM stops only at gdb's first byte (lkvm debug relays gdb's connection onto it). The
 * target stays for the VM's life once made (it is small; the vCPUs may hold a pointer to it).
 */
int gdb_vm_attach(struct kvm *kvm, int fd, int wake_fd, char *err, size_t errlen)
{
	struct gdb_vm *g = __atomic_load_n(&kvm->gdb, __ATOMIC_ACQUIRE);
	struct gdb_server *s;
	int ret = gdb_vm_supported(kvm, err, errlen);

	if (ret == 0 && g)
		ret = reap(g, err, errlen);
	if (ret == 0 && !g && (ret = gdb_vm_create(kvm, false, &g)) < 0)
		errfmt(err, errlen, "gdb: %s", strerror(-ret));
	if (ret < 0)
		return ret;
	fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		errfmt(err, errlen, "gdb: %s", strerror(-ret));
		return ret;
	}
	ret = gdb_server_attach_fd(fd, wake_fd, &gdb_vm_ops, g, &s, err, errlen);
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&g->lock);
	g->server = s;
	g->attached = true;
	pthread_mutex_unlock(&g->lock);
	return 0;
}

void gdb_vm_stats(struct kvm *kvm, stats_put_fn put, void *arg)
{
	struct gdb_vm *g = __atomic_load_n(&kvm->gdb, __ATOMIC_ACQUIRE);
	struct gdb_server_stats st = { 0 };

	if (!g)
		return;
	pthread_mutex_lock(&g->lock);
	if (g->server)
		gdb_server_get_stats(g->server, &st);
	stats_add(&st, &g->past);
	pthread_mutex_unlock(&g->lock);
	put(arg, "gdb.stops", st.stops);
	put(arg, "gdb.breakpoints_hit", st.breakpoints_hit);
	put(arg, "gdb.steps", st.steps);
	put(arg, "gdb.packets", st.packets);
	put(arg, "gdb.bad_packets", st.bad_packets);
	put(arg, "gdb.clients", st.clients);
}

void gdb_vm_end(struct kvm *kvm, int status)
{
	struct gdb_stop st = { .reason = GDB_STOP_EXITED, .exit_status = status };
	struct gdb_vm *g = kvm->gdb;

	if (!g)
		return;
	if (g->server) {
		gdb_server_notify_stop(g->server, &st);
		gdb_server_stop(g->server);
	}
	gdb_vm_destroy(g);
}

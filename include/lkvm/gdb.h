/* The gdb remote serial protocol server (gdb/): what it needs from a VM (struct gdb_target_ops), and how a VM starts it and tells it of a stop. */
#ifndef LKVM_GDB_H
#define LKVM_GDB_H

#include <stdbool.h>
#include <stddef.h>

#include "lkvm/util.h"

/*
 * The x86-64 register file as gdb sees it, filled and read by the target and serialised by the
 * server in target.xml's order (gdb/target-xml.c owns that order; the target knows nothing of
 * it). Nothing here is KVM's: the target maps kvm_regs, kvm_sregs, kvm_fpu and MSRs onto it.
 */
struct gdb_x86_regs {
	u64 gpr[16]; /* rax rbx rcx rdx rsi rdi rbp rsp r8 .. r15 (gdb's order) */
	u64 rip;
	u32 eflags;
	u32 seg[6]; /* selectors: cs ss ds es fs gs */
	u64 fs_base, gs_base, k_gs_base;
	u64 cr0, cr2, cr3, cr4, cr8, efer;
	u8 st[8][10]; /* x87 st0..st7, 80-bit */
	u32 fctrl, fstat, ftag, fiseg, fioff, foseg, fooff, fop;
	u8 xmm[16][16];
	u32 mxcsr;
};

/* Z/z packets' kinds, numbered as gdb numbers them (Z0 .. Z4). */
enum gdb_bp_kind {
	GDB_BP_SW = 0,	   /* software breakpoint (int3) */
	GDB_BP_HW = 1,	   /* hardware execution breakpoint (debug register) */
	GDB_WP_WRITE = 2,  /* watchpoints: debug registers */
	GDB_WP_READ = 3,   /* x86 has no read-only watch: a target may refuse it (-EOPNOTSUPP) */
	GDB_WP_ACCESS = 4, /* read or write */
};

enum gdb_stop_reason {
	GDB_STOP_INTERRUPT, /* SIGINT: gdb's Ctrl-C, or the stop on attach */
	GDB_STOP_TRAP,	    /* SIGTRAP: a breakpoint, a single step, --gdb-wait's first stop */
	GDB_STOP_WATCH,	    /* SIGTRAP with watch/rwatch/awatch:ADDR */
	GDB_STOP_EXITED,    /* the VM ended: W status */
};

struct gdb_stop {
	enum gdb_stop_reason reason;
	int thread;		/* gdb thread id: vCPU index + 1 */
	enum gdb_bp_kind watch; /* GDB_STOP_WATCH: which kind fired */
	u64 watch_addr;		/* GDB_STOP_WATCH: the watched address */
	int exit_status;	/* GDB_STOP_EXITED */
};

/*
 * What the server asks of the VM. Every call but stop_all and resume is made only while the
 * VM is stopped (all-stop: when one vCPU stops, all do). Threads are gdb's ids, 1..nthreads.
 * Each returns 0 or -errno; none prints (the server answers gdb with an E packet).
 */
struct gdb_target_ops {
	int (*nthreads)(void *ctx);
	/* Stop every vCPU (gdb's Ctrl-C, attach); returns once all are stopped. */
	int (*stop_all)(void *ctx);
	/* Let the VM run: step_thread 0 continues every vCPU; N > 0 single-steps vCPU N-1 (the
	 * others stay stopped). The stop that ends it comes through gdb_server_notify_stop. */
	int (*resume)(void *ctx, int step_thread);
	int (*get_regs)(void *ctx, int thread, struct gdb_x86_regs *r);
	int (*set_regs)(void *ctx, int thread, const struct gdb_x86_regs *r);
	/* Guest virtual addresses, through the thread's page tables; -EFAULT where unmapped. A
	 * read shows the guest's own bytes under software breakpoints. */
	int (*read_mem)(void *ctx, int thread, u64 gva, void *buf, size_t len);
	int (*write_mem)(void *ctx, int thread, u64 gva, const void *buf, size_t len);
	/* len: gdb's kind/length field. -ENOSPC: no debug register left; -EOPNOTSUPP. */
	int (*set_bp)(void *ctx, enum gdb_bp_kind kind, u64 addr, u64 len);
	int (*clear_bp)(void *ctx, enum gdb_bp_kind kind, u64 addr, u64 len);
	/* gdb detached or vanished: remove every breakpoint and watchpoint, run on. */
	void (*detach)(void *ctx);
	/* gdb's k: end the VM. */
	void (*kill)(void *ctx);
	/* On the server's thread, first (NULL: nothing): the VM confines the thread (its sandbox
	 * kind). Non-zero: the thread ends without serving (the VM has been told why). */
	int (*thread_start)(void *ctx);
};

struct gdb_server;

/*
 * Listen on addr: "PORT" (127.0.0.1), "HOST:PORT", or "unix:PATH" (created 0600, refused if
 * PATH exists and is not a stale socket). One client at a time, served by the server's own
 * thread. 0, or -errno with a one-line reason in err (port in use, bad address).
 */
int gdb_server_start(const char *addr, const struct gdb_target_ops *ops, void *ctx,
		     struct gdb_server **out, char *err, size_t errlen) __must_check;

/* gdb_server_start in two steps, for a VM that binds its address early (its errors before the
 * VM starts, the wake-up eventfd open before the sandbox scans the fds) and starts the thread
 * once its privileges are dropped (a thread keeps the capabilities it was created with). */
int gdb_server_listen(const char *addr, const struct gdb_target_ops *ops, void *ctx,
		      struct gdb_server **out, char *err, size_t errlen) __must_check;
int gdb_server_run(struct gdb_server *s, char *err, size_t errlen) __must_check;
/* A server for one client already connected (fd, which it owns from now on): no listener. The
 * VM is stopped at the client's first byte, not before (`lkvm debug NAME --gdb`: the connection
 * is made before gdb is), and the thread ends once the client is gone (gdb_server_ended), the VM
 * running on. wake_fd: a nonblocking eventfd for its wake-ups, the caller's (kept open, and
 * reused by the next such server: a sandboxed VM opens none once running). 0, or -errno with
 * err (fd is closed then too). */
int gdb_server_attach_fd(int fd, int wake_fd, const struct gdb_target_ops *ops, void *ctx,
			 struct gdb_server **out, char *err, size_t errlen) __must_check;
/* The thread has ended (an attach_fd server's client went): gdb_server_stop only frees. */
bool gdb_server_ended(struct gdb_server *s);

/* Listen on addr as gdb_server_listen does (the same forms, a unix socket created 0600): *fd,
 * and in path (at least 108 bytes) a unix socket's path ("" for TCP), which the caller removes.
 * For a listener of lkvm's own that is not a server (`lkvm debug --gdb`). 0 or -errno with err. */
int gdb_listen_addr(const char *addr, int *fd, char *path, char *err, size_t errlen) __must_check;

/* The VM stopped by itself (a breakpoint, a step's end, the VM exited). Any thread (a vCPU's):
 * it does not block; the server calls ops->stop_all before it answers gdb. */
void gdb_server_notify_stop(struct gdb_server *s, const struct gdb_stop *st);

/* What gdb did, for `lkvm stat`: counted by the server's thread, read from any thread. */
struct gdb_server_stats {
	u64 stops;	     /* stop replies sent (attach, Ctrl-C, breakpoints, steps, exit) */
	u64 breakpoints_hit; /* of those, SIGTRAP ones: breakpoints, watchpoints, steps */
	u64 steps;	     /* single steps asked for (s, S, vCont;s) */
	u64 packets;	     /* packets with a good checksum */
	u64 bad_packets;     /* bad checksums, oversize packets: answered '-' */
	u64 clients;	     /* clients served (sessions) */
};
void gdb_server_get_stats(struct gdb_server *s, struct gdb_server_stats *out);

/* Close the client and the listener, end the thread, free s. A unix socket's path goes too: at
 * once, or through the child that gdb_server_listen forked for it (it outlives a sandbox with no
 * unlink, a --user switch and a SIGKILL of lkvm). */
void gdb_server_stop(struct gdb_server *s);

#endif

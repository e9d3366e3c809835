/* Least privilege after set-up: drop capabilities (and change user), and a seccomp allow-list per thread kind. */
#ifndef LKVM_SANDBOX_H
#define LKVM_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "lkvm/util.h"

struct kvm;

/* The kinds of threads lkvm runs; each has its own allow-list (sandbox.c, one table). */
enum sandbox_kind {
	SB_MAIN,     /* waits for the end, then stops the others and tears down */
	SB_VCPU,     /* KVM_RUN and the exit handlers (devices' register accesses) */
	SB_CONSOLE,  /* host terminal input to the UART */
	SB_NET_RX,   /* virtio-net: backend to guest */
	SB_NET_TX,   /* virtio-net: guest to backend */
	SB_NET_CTL,  /* virtio-net control queue */
	SB_NET_IRQ,  /* virtio-net with vhost: vhost's call eventfds to queues without an irqfd */
	SB_BLK,	     /* virtio-blk: requests to the image (libaio or pread/pwrite) */
	SB_VCONSOLE, /* virtio-console: terminal to guest and back */
	SB_RNG,	     /* virtio-rng: getrandom into the guest's buffers */
	SB_P9,	     /* virtio-9p: the file server's requests against its share */
	SB_CTL,	     /* the control socket: lkvm stat/pause/resume/debug/stop requests */
	SB_GDB,	     /* the gdb server: its client's packets, the stopped vCPUs' state */
	SB_FS,	     /* virtio-fs: the FUSE server's requests against its share */
	SB_NR
};

const char *sandbox_kind_name(enum sandbox_kind kind);

/* Who lkvm becomes once set up: --user's USER, or in `run -- CMD` the user lkvm serves the
 * host's files as (builtin/run-cmd.c). */
struct sandbox_user {
	char name[72]; /* for messages; with groups, the passwd name whose groups to take */
	uid_t uid;
	gid_t gid;
	bool groups; /* name's supplementary groups (initgroups); else none */
};

/* --user USER (a name, or a numeric uid with or without a passwd entry: then its gid is the
 * uid) into u, without supplementary groups. 0 or -ENOENT with err. */
int sandbox_user_resolve(const char *user, struct sandbox_user *u, char *err,
			 size_t errlen) __must_check;

/* Process-wide, once, after everything is opened and before any thread that handles guest
 * input starts: with `user` set the supplementary groups (its own, or none), then its gid and
 * uid; then drop every capability (effective, permitted, inheritable, ambient, and the
 * bounding set when allowed). Also installs the SIGSYS handler that reports a forbidden
 * system call. Returns 0 or -errno with a reason in err. */
int sandbox_drop_privileges(const struct sandbox_user *user, char *err, size_t errlen) __must_check;

/* A function the SIGSYS handler calls before it ends lkvm, to put back what must not stay
 * changed (term.c registers the terminal's restore). It runs in a signal handler, on the
 * thread that broke its filter and under that filter: async-signal-safe, and only with
 * system calls every allow-list has. The last one set wins; NULL clears it. */
void sandbox_set_restore_hook(void (*fn)(void));
/* A function the SIGSYS handler calls after the restore hook, just before _exit, under the
 * same rules (lkvm run's --status-file record, builtin/run-status.c). NULL clears it. */
void sandbox_set_exit_hook(void (*fn)(void));

/* Install the calling thread's seccomp filter for `kind` when kvm->sandbox is on (no-op
 * otherwise, and with kvm NULL). Filters stack: a thread created later inherits this
 * one, so a kind's filter also allows what the kinds it creates need (the vCPU starts the
 * net threads on DRIVER_OK). A call outside the list raises SIGSYS; the handler prints
 * the thread kind and system call number and ends lkvm with 128 + SIGSYS. Returns 0 or
 * -errno. */
int sandbox_enter(struct kvm *kvm, enum sandbox_kind kind) __must_check;

/* Also allow read(2) and write(2) on fd to every thread kind, for filters installed from now on.
 * Threads may read and write fds 0-2 and the eventfds (and main its signalfd) open when
 * sandbox_drop_privileges runs, nothing else: this is for an fd outside those that a thread
 * must use (the console log of --console-log and run -- CMD; a test harness's own report
 * file). Returns 0 or -errno. */
int sandbox_allow_fd(int fd) __must_check;

/* Also allow readv(2) and writev(2) on fd to the net threads (and the vCPU, which starts them),
 * for filters installed from now on: a network backend's socket (passt's stream), which the
 * scan of /proc/self/fd cannot tell from lkvm's other sockets. Returns 0 or -errno. */
int sandbox_allow_net_fd(int fd) __must_check;

/* How many system calls, and ioctl requests, a kind's filter allows (its own list, the
 * common one and those of the kinds it creates). For reports and tests. */
void sandbox_list_size(enum sandbox_kind kind, int *syscalls, int *ioctls);

/* Test builds only (make build/testhooks/lkvm; a no-op in the release lkvm): with
 * LKVM_TEST_PAUSE_AT=NAME and LKVM_TEST_PAUSE_GO=FIFO, point NAME prints "lkvm-test: paused at
 * NAME: DETAIL" to stderr and waits until the test opens FIFO for writing and closes it, so a
 * test can act in a window a real race would hit by chance (lkvm snapshot's rename). */
void lkvm_test_pause(const char *name, const char *detail);

#endif

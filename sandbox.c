/* Least privilege: capabilities and user dropped after set-up, and one seccomp allow-list per thread kind. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <linux/if_tun.h>
#include <linux/kvm.h>
#include <linux/vhost.h>
#include <cap-ng.h>
#include <seccomp.h>

#include "lkvm/kvm.h"
#include "lkvm/sandbox.h"

/*
 * Threat model: the guest is hostile and lkvm may run as root. Once set-up is done
 * (/dev/kvm, guest RAM, taps, files all open), a guest that found a bug in a device
 * model should gain no more than the thread it compromised can already do: no
 * capabilities, no other user's files (--user), and only the system calls that thread
 * kind makes, found by reading the code and by strace -f of real runs. Kinds that create
 * threads also allow what those need before they install their own (tighter) filter.
 *
 * Adding a thread kind is one entry in `kinds` below (and a sandbox_enter call at the
 * top of its thread function).
 */

#define MAX_CALLS 48
#define MAX_IOCTLS 32

struct sb_kind {
	const char *name;
	int calls[MAX_CALLS]; /* allowed unconditionally (0-terminated; read, 0, is in conds) */
	unsigned long ioctls[MAX_IOCTLS]; /* ioctl requests allowed (0-terminated) */
	unsigned spawns;		  /* bit mask of kinds whose threads this kind creates */
};

/*
 * Every thread: memory management and locks inside glibc (mmap, mprotect, madvise, brk,
 * mremap, futex), waiting and time (poll, ppoll, nanosleep, clock_*, sched_yield,
 * restart_syscall), its own signal mask and handler return, ending (exit, exit_group),
 * naming itself (prctl, argument-checked below), getrandom (glibc's malloc), and restoring
 * the terminal from the SIGSYS handler (ioctl TCSETS/TCSETSW: the only tty lkvm holds is
 * the user's own terminal on fds 0-2). sigaltstack and sched_getaffinity
 * (pthread_getattr_np) are what the sanitizer runtimes add to a thread's start and end.
 * close acts only on this process's own fds. Three calls of every thread are
 * argument-checked (`conds` below): read, write and tgkill. Never allowed anywhere: kill,
 * tkill, rt_sigqueueinfo and rt_tgsigqueueinfo, which can all reach another process, and
 * pidfd_send_signal but in main on the pidfd of the passt lkvm started (conds); no thread
 * opens a file, creates or removes one,
 * except the file servers', beneath their shares (SB_P9, SB_FS).
 */
static const struct sb_kind common = {
	.name = "common",
	.calls = { SCMP_SYS(close),
		   SCMP_SYS(futex),
		   SCMP_SYS(exit),
		   SCMP_SYS(exit_group),
		   SCMP_SYS(rt_sigreturn),
		   SCMP_SYS(rt_sigprocmask),
		   SCMP_SYS(madvise),
		   SCMP_SYS(mmap),
		   SCMP_SYS(munmap),
		   SCMP_SYS(mprotect),
		   SCMP_SYS(brk),
		   SCMP_SYS(mremap),
		   SCMP_SYS(restart_syscall),
		   SCMP_SYS(sched_yield),
		   SCMP_SYS(clock_gettime),
		   SCMP_SYS(gettimeofday),
		   SCMP_SYS(clock_nanosleep),
		   SCMP_SYS(nanosleep),
		   SCMP_SYS(getpid),
		   SCMP_SYS(gettid),
		   SCMP_SYS(poll),
		   SCMP_SYS(ppoll),
		   SCMP_SYS(getrandom),
		   SCMP_SYS(sigaltstack),
		   SCMP_SYS(sched_getaffinity) },
	.ioctls = { TCSETS, TCSETSW },
};

#define SPAWNS(k) (1u << (k))

static const struct sb_kind kinds[SB_NR] = {
	[SB_MAIN] = {
		.name = "main",
		/* --debug's memory line: mincore, and lseek to re-read /proc/self/statm (opened
		 * before the filter, sandbox_allow_fd). Teardown: the disks' aio contexts; wait4 reaps the
		 * control socket's cleanup helper (ctl/server.c), which removes the socket and lock
		 * so that main needs no unlink (and can only wait for its own children); waitid
		 * reaps -n mode=user's passt through its pidfd (net/passt.c), likewise only a
		 * child of lkvm's. */
		.calls = { SCMP_SYS(fstat), SCMP_SYS(newfstatat), SCMP_SYS(lseek), SCMP_SYS(mincore),
			   SCMP_SYS(io_destroy), SCMP_SYS(io_getevents), SCMP_SYS(wait4),
			   SCMP_SYS(waitid) },
		/* Teardown: ioeventfds and irqfds deassigned, MSI routes dropped. */
		.ioctls = { KVM_IRQFD, KVM_IOEVENTFD, KVM_SET_GSI_ROUTING, KVM_IRQ_LINE, TCGETS },
	},
	[SB_VCPU] = {
		.name = "vcpu",
		/* Starting the device threads on DRIVER_OK (the new thread's own set-up included);
		 * the ioctls are KVM_RUN, the exit handlers' register accesses and interrupt
		 * routing, on KVM's own fds. On the tap: a NIC's offloads at DRIVER_OK, and the
		 * queues of its inactive pairs detached there and at a reset (TUNSETQUEUE, which
		 * net-ctl, a thread this kind starts, needs as well). -n vhost=on: the rings handed
		 * to vhost-net at DRIVER_OK (features, ring size, base, addresses, kick and call
		 * eventfds, the tap as backend) and the backend detached at a reset
		 * (virtio/net-vhost.c). These requests (type 0xAF) mean something only to a vhost
		 * fd, and the only ones are lkvm's (no filter allows open). The ring addresses
		 * are lkvm's own memory, which this thread can write anyway; what the guest's
		 * descriptors reach through vhost is bounded by the memory table, set before the
		 * sandbox (VHOST_SET_MEM_TABLE and VHOST_SET_OWNER are in no list). */
		.calls = { SCMP_SYS(set_robust_list), SCMP_SYS(rseq) },
		.ioctls = { KVM_RUN, KVM_GET_REGS, KVM_SET_REGS, KVM_GET_SREGS, KVM_SET_SREGS,
			    KVM_GET_VCPU_EVENTS, KVM_SET_VCPU_EVENTS, KVM_IRQ_LINE, KVM_IRQFD,
			    KVM_IOEVENTFD, KVM_SET_GSI_ROUTING, TUNSETOFFLOAD, TUNSETQUEUE,
			    VHOST_SET_FEATURES, VHOST_SET_VRING_NUM, VHOST_SET_VRING_BASE,
			    VHOST_SET_VRING_ADDR, VHOST_SET_VRING_KICK, VHOST_SET_VRING_CALL,
			    VHOST_NET_SET_BACKEND },
		.spawns = SPAWNS(SB_NET_RX) | SPAWNS(SB_NET_TX) | SPAWNS(SB_NET_CTL) | SPAWNS(SB_BLK) |
			  SPAWNS(SB_VCONSOLE) | SPAWNS(SB_RNG) | SPAWNS(SB_NET_IRQ),
	},
	[SB_CONSOLE] = {
		.name = "console",
		.ioctls = { KVM_IRQ_LINE },
	},
	[SB_NET_RX] = {
		.name = "net-rx",
		/* readv: frames from the tap or passt's stream, only on those fds; batch=on:
		 * io_uring_enter, only on io_uring fds (conds). */
		.ioctls = { KVM_IRQ_LINE },
	},
	[SB_NET_TX] = {
		.name = "net-tx",
		/* writev: frames to the tap or passt's stream, only on those fds; batch=on:
		 * io_uring_enter, only on io_uring fds (conds). */
		.ioctls = { KVM_IRQ_LINE },
	},
	[SB_NET_CTL] = {
		.name = "net-ctl",
		/* VQ_PAIRS_SET: the tap queues of the pairs the driver enables attached, of the
		 * others detached (virtio/net.c set_active_pairs). TUNSETQUEUE can only move this
		 * process's own tap queues in or out of their tap's steering: ioctl on a tun fd,
		 * which only lkvm's taps are (no filter allows open), and no other TUN request
		 * (no TUNSETIFF: no new tap or interface, no flags, owner or filter changed). */
		.ioctls = { KVM_IRQ_LINE, TUNSETQUEUE },
	},
	[SB_NET_IRQ] = {
		.name = "net-irq",
		/* Reads vhost's call eventfds (conds: eventfds) and raises the queue's interrupt as
		 * a device thread does: an eventfd write, or the INTx line. */
		.ioctls = { KVM_IRQ_LINE },
	},
	[SB_BLK] = {
		.name = "blk",
		/* The image through libaio or plain positioned I/O, and its flushes. io_submit
		 * carries its fds inside iocbs, which no filter can read, so checking the fd of
		 * pwrite64 would narrow nothing: a blk thread (and the vCPU, whose filter allows
		 * what the blk threads it starts need) can write to any fd of this process. */
		.calls = { SCMP_SYS(io_submit), SCMP_SYS(io_getevents), SCMP_SYS(preadv), SCMP_SYS(pwritev),
			   SCMP_SYS(pread64), SCMP_SYS(pwrite64), SCMP_SYS(fdatasync), SCMP_SYS(fsync) },
		.ioctls = { KVM_IRQ_LINE },
	},
	[SB_VCONSOLE] = {
		.name = "virtio-console",
		.ioctls = { KVM_IRQ_LINE },
	},
	[SB_RNG] = {
		.name = "rng",
		.ioctls = { KVM_IRQ_LINE },
	},
	[SB_P9] = {
		.name = "9p",
		/* The 9P2000.L server (virtio/9p-server.c): walks and creates beneath its share
		 * (openat2; openat for "..", "." and the /proc/self/fd reopen of an O_PATH fid),
		 * attributes, directory reads, file I/O, and a read-write share's namespace
		 * changes; name_to_handle_at, a node's file handle (only compared, never opened:
		 * an inode number the host reused for another file is told apart by it, hostfs.c);
		 * fstat of an open file: glibc makes it newfstatat, but ThreadSanitizer's runtime
		 * calls the fstat system call itself (make check's tsan stage stopped here).
		 * Which files these reach is the server's and the credentials' business:
		 * a filter cannot read the paths. Its threads are started by main before main
		 * confines itself (virtio/9p.c), so no other kind's filter carries these calls. */
		.calls = { SCMP_SYS(openat2), SCMP_SYS(openat), SCMP_SYS(newfstatat),
			   SCMP_SYS(fstatfs), SCMP_SYS(fcntl), SCMP_SYS(getdents64), SCMP_SYS(lseek),
			   SCMP_SYS(preadv), SCMP_SYS(pwritev), SCMP_SYS(mkdirat), SCMP_SYS(mknodat),
			   SCMP_SYS(symlinkat), SCMP_SYS(readlinkat), SCMP_SYS(linkat),
			   SCMP_SYS(unlinkat), SCMP_SYS(renameat), SCMP_SYS(fchmodat),
			   SCMP_SYS(fchownat), SCMP_SYS(utimensat), SCMP_SYS(ftruncate),
			   SCMP_SYS(fsync), SCMP_SYS(fdatasync), SCMP_SYS(name_to_handle_at),
			   SCMP_SYS(fstat) },
		.ioctls = { KVM_IRQ_LINE },
	},
	[SB_FS] = {
		.name = "fs",
		/* The FUSE server (virtio/fuse-*.c on the node table virtio/hostfs*.c): 9p's calls
		 * for the same walks (openat2 beneath the share; openat for the /proc/self/fd reopen
		 * of an O_PATH node), attributes, directory reads, file I/O and namespace changes,
		 * and what FUSE asks beyond 9P: RENAME2 (renameat2; glibc makes one without flags
		 * a renameat), FALLOCATE, COPY_FILE_RANGE, LSEEK (SEEK_DATA/HOLE), ACCESS
		 * (faccessat2 on the node's descriptor, AT_EMPTY_PATH). No xattr call: the server
		 * refuses xattrs as 9P does. sysinfo: glibc's qsort asks the RAM size
		 * (sysconf(_SC_PHYS_PAGES)) before it sorts a large array, as the list of node ids
		 * the guest holds becomes with many files (fuse-server.c's compaction).
		 * name_to_handle_at and fstat: as 9p's (a node's identity beyond its inode number; the
		 * sanitizer runtimes' own fstat). Which files
		 * these reach is the server's and the credentials' business. Started by main before
		 * main confines itself (virtio/fs.c). */
		.calls = { SCMP_SYS(openat2), SCMP_SYS(openat), SCMP_SYS(newfstatat),
			   SCMP_SYS(fstatfs), SCMP_SYS(fcntl), SCMP_SYS(getdents64), SCMP_SYS(lseek),
			   SCMP_SYS(preadv), SCMP_SYS(pwritev), SCMP_SYS(mkdirat), SCMP_SYS(mknodat),
			   SCMP_SYS(symlinkat), SCMP_SYS(readlinkat), SCMP_SYS(linkat),
			   SCMP_SYS(unlinkat), SCMP_SYS(renameat), SCMP_SYS(renameat2),
			   SCMP_SYS(fchmodat), SCMP_SYS(fchownat), SCMP_SYS(utimensat), SCMP_SYS(ftruncate),
			   SCMP_SYS(fallocate), SCMP_SYS(copy_file_range), SCMP_SYS(faccessat2),
			   SCMP_SYS(fsync), SCMP_SYS(fdatasync), SCMP_SYS(sysinfo),
			   SCMP_SYS(name_to_handle_at), SCMP_SYS(fstat) },
		.ioctls = { KVM_IRQ_LINE },
	},
	[SB_CTL] = {
		.name = "ctl",
		/* Clients: accept, their uid, framed replies (sendto/sendmsg reach only sockets:
		 * the connected clients; a tap or file is not one). fcntl, setsockopt: a client
		 * socket made blocking with a send timeout, and the spare descriptor taken again
		 * (F_DUPFD_CLOEXEC of the wake eventfd). Pause and resume: kvm-clock and the
		 * vCPUs' TSC offsets, the vCPUs signalled to park (tgkill, own threads only), the
		 * device threads parked and let go (eventfds, futexes: no thread is created); a
		 * NIC's vhost rings detached with their indices saved, then restored and attached
		 * again (virtio/net-vhost.c: only on lkvm's vhost fds, as for the vCPU).
		 * debug: the parked vCPUs' registers. stat: lkvm's memory, /proc/self/statm read
		 * again from its start (lseek; the fd was opened before the filters and read is
		 * limited to known fds) and guest RAM's resident pages (mincore). snapshot: the
		 * file comes with the request (recvmsg's SCM_RIGHTS: lkvm opens nothing), is
		 * written with pwrite and its size read with lseek; the paused VM's state read
		 * with the KVM_GET_* of each vCPU and of the VM (and KVM_CHECK_EXTENSION and the
		 * MSR list, on /dev/kvm's fd, to know what to read); a share's nodes (9p fids,
		 * virtio-fs node ids) fstat'ed (newfstatat with AT_EMPTY_PATH: a file removed from
		 * the share refuses), a node evicted from its share's descriptor cache first opened
		 * again by its names beneath the share (hostfs_fd: openat2, O_PATH, each component
		 * RESOLVE_BENEATH, its file handle compared: name_to_handle_at; a snapshot of a guest
		 * holding more nodes than the cache stopped lkvm with 159 without it).
		 * `lkvm debug NAME --gdb` (CTL_GDB): whether KVM can debug guests
		 * (KVM_CHECK_EXTENSION, a question), and the gdb server's thread for that client,
		 * which only this thread can start once the VM runs (main confines itself with no
		 * clone, and a thread made for every VM in advance would cost the VMs nobody
		 * debugs): so this kind spawns gdb's, and its filter also holds gdb's list (the
		 * stopped vCPUs' state and guest-debug flags). The thread exists while its client
		 * is connected; the control thread joins it at the next attach or the run's end. */
		.calls = { SCMP_SYS(accept4), SCMP_SYS(recvfrom), SCMP_SYS(recvmsg), SCMP_SYS(sendto),
			   SCMP_SYS(sendmsg), SCMP_SYS(fcntl), SCMP_SYS(geteuid), SCMP_SYS(getuid),
			   SCMP_SYS(setsockopt), SCMP_SYS(getsockopt), SCMP_SYS(shutdown),
			   SCMP_SYS(lseek), SCMP_SYS(mincore), SCMP_SYS(pwrite64),
			   SCMP_SYS(newfstatat), SCMP_SYS(fstat), SCMP_SYS(openat2),
			   SCMP_SYS(name_to_handle_at) },
		.ioctls = { KVM_GET_CLOCK, KVM_SET_CLOCK, KVM_KVMCLOCK_CTRL, KVM_GET_REGS, KVM_GET_SREGS,
			    KVM_GET_VCPU_EVENTS, KVM_GET_DEVICE_ATTR, KVM_SET_DEVICE_ATTR, KVM_IRQ_LINE,
			    VHOST_NET_SET_BACKEND, VHOST_GET_VRING_BASE, VHOST_SET_VRING_BASE,
			    KVM_GET_SREGS2, KVM_GET_FPU, KVM_GET_XSAVE, KVM_GET_XSAVE2, KVM_GET_XCRS,
			    KVM_GET_MSRS, KVM_GET_LAPIC, KVM_GET_MP_STATE, KVM_GET_DEBUGREGS,
			    KVM_GET_IRQCHIP, KVM_GET_PIT2, KVM_CHECK_EXTENSION,
			    KVM_GET_MSR_INDEX_LIST },
		.spawns = SPAWNS(SB_GDB),
	},
	[SB_GDB] = {
		.name = "gdb",
		/* The gdb server (gdb/server.c): one client at a time, accepted on the listener
		 * bound before the sandbox, its packets read and answered (recvfrom/sendto reach
		 * only sockets: the listener's clients); its wake-up is an eventfd the vCPUs write.
		 * All-stop is a pause, as the control socket's (x86/gdb-target.c: kvm_pause and
		 * kvm_resume: kvm-clock, the vCPUs' TSC offsets, the vCPUs signalled to park, vhost
		 * rings detached and attached again). While every vCPU is parked: their registers,
		 * FPU and KERNEL_GS_BASE read and written, guest addresses translated, and the
		 * guest-debug flags (breakpoints, steps) set; gdb's memory reads and writes are
		 * lkvm's own mapping of guest RAM. No file, no new socket, no thread.
		 * set_robust_list and rseq: the thread's own start in glibc, under the control
		 * thread's filter when that thread starts it (lkvm debug --gdb). */
		.calls = { SCMP_SYS(accept4), SCMP_SYS(recvfrom), SCMP_SYS(sendto),
			   SCMP_SYS(set_robust_list), SCMP_SYS(rseq) },
		.ioctls = { KVM_GET_CLOCK, KVM_SET_CLOCK, KVM_KVMCLOCK_CTRL, KVM_GET_DEVICE_ATTR,
			    KVM_SET_DEVICE_ATTR, KVM_IRQ_LINE, VHOST_NET_SET_BACKEND,
			    VHOST_GET_VRING_BASE, VHOST_SET_VRING_BASE, KVM_GET_REGS, KVM_SET_REGS,
			    KVM_GET_SREGS, KVM_SET_SREGS, KVM_GET_FPU, KVM_SET_FPU, KVM_GET_MSRS,
			    KVM_SET_MSRS, KVM_TRANSLATE, KVM_SET_GUEST_DEBUG },
	},
};

/*
 * Calls allowed only with some arguments. A kind gets the entries whose mask holds it or a
 * kind it creates (filters stack, as for the lists above).
 *   tgkill: abort() signals its own thread and pthread_kill kicks a vCPU, both in this
 *     process; another thread group is another process, which a compromised thread must not
 *     signal (lkvm often keeps uid 0 and so could signal nearly every process).
 *   read, write: eventfds (kicks, interrupts, wake-ups of worker threads), the terminal's
 *     input (fd 0) and output and the logs (fds 1, 2), main's signalfd. Not the disk images,
 *     the lock file, or an fd lkvm inherited from whoever started it: what a thread reads
 *     into memory the guest can see, what it writes changes a file.
 *   readv, writev: net-rx's and net-tx's frames, only on the tap fds and the stream socket to
 *     passt (sandbox_allow_net_fd): a tap takes whole frames; the stream, records its
 *     length fields frame. Not the control socket or a client's, nor any other socket.
 *   pidfd_send_signal: main, at teardown, kills a passt that did not leave once its socket
 *     closed (net/passt.c); only through the pidfds lkvm holds, and lkvm opens pidfds only
 *     for the passt processes it started: no other process can be reached.
 *   io_uring_enter: net-rx's and net-tx's batches (-n batch=on), only on io_uring fds. What a
 *     ring's SQEs do, seccomp cannot see: every ring lkvm makes is restricted before it is
 *     enabled (net/tap-uring.c: READV or WRITEV, and ASYNC_CANCEL of its own requests, only;
 *     on the tap as its one fixed file; of the register operations only
 *     IORING_UNREGISTER_FILES), so entering one reaches that tap and nothing else.
 *     io_uring_setup is in no list: the rings are made and locked down at set-up, before
 *     any filter, so no thread can make a ring without restrictions.
 *   io_uring_register: main's teardown lets go of the tap (IORING_UNREGISTER_FILES, so the
 *     tap is gone when close returns, not when a kernel worker gets to it), only on io_uring
 *     fds, where the rings' restrictions refuse every other register operation.
 * The fd sets are what /proc/self/fd shows when sandbox_drop_privileges runs: every fd is
 * open by then (no filter allows eventfd2, open or socket; accept4's client sockets are
 * read and written with recvfrom/sendto).
 */
enum sb_fdset { FS_READ, FS_WRITE, FS_NET, FS_CHILD, FS_URING, FS_NR };

enum sb_test {
	T_OWN_PID, /* the argument is this process's pid */
	T_FDSET,   /* the argument is an fd of fdsets[set] */
};

#define ALL_KINDS ((1u << SB_NR) - 1)

static const struct sb_cond {
	int nr;
	unsigned kinds;
	unsigned arg;
	enum sb_test test;
	enum sb_fdset set;
} conds[] = {
	{ .nr = SCMP_SYS(tgkill), .kinds = ALL_KINDS, .arg = 0, .test = T_OWN_PID },
	{ SCMP_SYS(read), ALL_KINDS, 0, T_FDSET, FS_READ },
	{ SCMP_SYS(write), ALL_KINDS, 0, T_FDSET, FS_WRITE },
	{ SCMP_SYS(readv), SPAWNS(SB_NET_RX), 0, T_FDSET, FS_NET },
	{ SCMP_SYS(writev), SPAWNS(SB_NET_TX), 0, T_FDSET, FS_NET },
	{ SCMP_SYS(pidfd_send_signal), SPAWNS(SB_MAIN), 0, T_FDSET, FS_CHILD },
	{ SCMP_SYS(io_uring_enter), SPAWNS(SB_NET_RX) | SPAWNS(SB_NET_TX), 0, T_FDSET, FS_URING },
	{ SCMP_SYS(io_uring_register), SPAWNS(SB_MAIN), 0, T_FDSET, FS_URING },
};

/* Which fds join which set: by their /proc/self/fd link, and fds 0-2 by number. */
static const struct {
	const char *link;
	unsigned sets;
} fd_kinds[] = {
	{ "anon_inode:[eventfd]", 1u << FS_READ | 1u << FS_WRITE },
	{ "anon_inode:[signalfd]", 1u << FS_READ },
	{ "/dev/net/tun", 1u << FS_NET },
	{ "anon_inode:[pidfd]", 1u << FS_CHILD },
	{ "anon_inode:[io_uring]", 1u << FS_URING },
};

/* Each fd costs a comparison in every filter that allows the call: beyond this many, a set
 * is left unchecked (and said so) rather than risk the kernel's filter size limit. */
#define MAX_SET_FDS 256

/* Until sandbox_drop_privileges filled them: the terminal and logs only, so a missing scan
 * fails closed. n < 0: unchecked. */
static struct fdset {
	int fd[MAX_SET_FDS];
	int n;
} fdsets[FS_NR] = {
	[FS_READ] = { { STDIN_FILENO }, 1 },
	[FS_WRITE] = { { STDOUT_FILENO, STDERR_FILENO }, 2 },
};

/* Added to the read and write sets by sandbox_allow_fd, and to the net set by
 * sandbox_allow_net_fd, whatever the scan finds. */
static struct fdset allowed_rw, allowed_net;

/* prctl options any thread may use: its own name, tx=timer/poll's timer slack, and
 * no-new-privileges (libseccomp sets it again before each filter it loads). */
static const int prctl_ok[] = { PR_SET_NAME, PR_SET_TIMERSLACK, PR_SET_NO_NEW_PRIVS };

/* The kind of the calling thread, for the SIGSYS report (-1: not sandboxed). */
static __thread int my_kind = -1;

const char *sandbox_kind_name(enum sandbox_kind kind)
{
	return (unsigned)kind < SB_NR ? kinds[kind].name : "?";
}

/* ---- what a kind's filter allows ---- */

#define NR_MAX 512 /* x86-64 syscall numbers are below this */

struct allow {
	bool call[NR_MAX];
	unsigned long ioctl[SB_NR * MAX_IOCTLS + MAX_IOCTLS];
	int ncalls, nioctls;
	bool clone;
	bool cond[ARRAY_SIZE(conds)];
	int nconds;
};

static void add_kind(struct allow *a, const struct sb_kind *k)
{
	/* read is syscall 0, which also ends the list: it is in conds. */
	for (int i = 0; i < MAX_CALLS && k->calls[i]; i++) {
		if (k->calls[i] > 0 && k->calls[i] < NR_MAX && !a->call[k->calls[i]]) {
			a->call[k->calls[i]] = true;
			a->ncalls++;
		}
	}
	for (int i = 0; i < MAX_IOCTLS && k->ioctls[i]; i++) {
		bool dup = false;

		for (int j = 0; j < a->nioctls; j++)
			dup |= a->ioctl[j] == k->ioctls[i];
		if (!dup)
			a->ioctl[a->nioctls++] = k->ioctls[i];
	}
}

static void collect(struct allow *a, enum sandbox_kind kind)
{
	unsigned todo = SPAWNS(kind), done = 0;

	memset(a, 0, sizeof(*a));
	add_kind(a, &common);
	while (todo & ~done) {
		int k = __builtin_ctz(todo & ~done);

		done |= SPAWNS(k);
		add_kind(a, &kinds[k]);
		todo |= kinds[k].spawns;
		if (kinds[k].spawns)
			a->clone = true;
	}
	for (size_t i = 0; i < ARRAY_SIZE(conds); i++) {
		a->cond[i] = (conds[i].kinds & done) != 0;
		/* Counted once per system call (unless it is also allowed outright). */
		if (a->cond[i] && !a->call[conds[i].nr]) {
			bool seen = false;

			for (size_t j = 0; j < i; j++)
				seen |= a->cond[j] && conds[j].nr == conds[i].nr;
			a->nconds += !seen;
		}
	}
}

void sandbox_list_size(enum sandbox_kind kind, int *syscalls, int *ioctls)
{
	struct allow a;

	collect(&a, kind);
	/* ioctl, prctl and each call of conds (argument-checked) count once; clone (threads
	 * only) and seccomp too. */
	*syscalls = a.ncalls + (a.nioctls > 0) + 1 + a.nconds + 2 * a.clone;
	*ioctls = a.nioctls;
}

/* ---- the SIGSYS report ---- */

static size_t put_str(char *buf, size_t at, size_t cap, const char *s)
{
	while (*s && at < cap)
		buf[at++] = *s++;
	return at;
}

static size_t put_uint(char *buf, size_t at, size_t cap, unsigned long v)
{
	char tmp[24];
	int n = 0;

	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10) && n < (int)sizeof(tmp));
	while (n && at < cap)
		buf[at++] = tmp[--n];
	return at;
}

/* What the SIGSYS handler puts back before lkvm ends (sandbox_set_restore_hook): set by a
 * layer above (term.c, the terminal), read in the handler; an atomic pointer, so reading it
 * is async-signal-safe. */
static void (*restore_hook)(void);
static void (*exit_hook)(void); /* sandbox_set_exit_hook's, the same way */

void sandbox_set_restore_hook(void (*fn)(void))
{
	__atomic_store_n(&restore_hook, fn, __ATOMIC_RELEASE);
}

void sandbox_set_exit_hook(void (*fn)(void))
{
	__atomic_store_n(&exit_hook, fn, __ATOMIC_RELEASE);
}

/* Async-signal-safe: write(2), the restore hook (term.c puts the terminal back with an ioctl
 * every filter allows), then _exit. */
static void sigsys_handler(int sig, siginfo_t *si, void *uc)
{
	void (*restore)(void) = __atomic_load_n(&restore_hook, __ATOMIC_ACQUIRE);
	char msg[256];
	size_t n = 0;

	n = put_str(msg, n, sizeof(msg), "\r\nlkvm: error: sandbox: the ");
	n = put_str(msg, n, sizeof(msg), my_kind >= 0 ? kinds[my_kind].name : "unsandboxed");
	n = put_str(msg, n, sizeof(msg), " thread made system call ");
	n = put_uint(msg, n, sizeof(msg), (unsigned long)si->si_syscall);
	n = put_str(msg, n, sizeof(msg), ", which its allow-list forbids; stopping lkvm (exit ");
	n = put_uint(msg, n, sizeof(msg), 128 + SIGSYS);
	n = put_str(msg, n, sizeof(msg), "; --sandbox=off runs without the filter)\r\n");
	if (write(STDERR_FILENO, msg, n) < 0) {
		/* nowhere left to report */
	}
	if (restore)
		restore();
	restore = __atomic_load_n(&exit_hook, __ATOMIC_ACQUIRE);
	if (restore)
		restore();
	_exit(128 + SIGSYS);
}

/* ---- privileges ---- */

int sandbox_user_resolve(const char *user, struct sandbox_user *u, char *err, size_t errlen)
{
	struct passwd *pw;
	char *end;
	unsigned long v;

	*u = (struct sandbox_user){ 0 };
	snprintf(u->name, sizeof(u->name), "%s", user);
	errno = 0;
	pw = getpwnam(user);
	if (!pw && *user >= '0' && *user <= '9') {
		v = strtoul(user, &end, 10);
		if (!*end && v <= 0xfffffffeUL)
			pw = getpwuid((uid_t)v);
		if (!pw && !*end && v <= 0xfffffffeUL) {
			/* A bare uid without a passwd entry: its own gid, as `setpriv` does. */
			u->uid = (uid_t)v;
			u->gid = (gid_t)v;
			return 0;
		}
	}
	if (!pw) {
		errfmt(err, errlen, "--user '%s': no such user", user);
		return -ENOENT;
	}
	u->uid = pw->pw_uid;
	u->gid = pw->pw_gid;
	return 0;
}

/* Groups, gid, then uid (each step needs the privilege the next one drops); then no way back. */
static int switch_user(const struct sandbox_user *u, char *err, size_t errlen)
{
	int ret = u->groups ? initgroups(u->name, u->gid) : setgroups(0, NULL);

	if (ret < 0 || setgid(u->gid) < 0 || setuid(u->uid) < 0) {
		int e = errno;

		errfmt(err, errlen, "user %s (uid %u, gid %u): %s", u->name, (unsigned)u->uid,
		       (unsigned)u->gid, strerror(e));
		return -e;
	}
	/* setuid to a non-root uid cleared the capabilities: there is no way back. */
	if (u->uid != 0 && (setuid(0) != -1 || geteuid() == 0)) {
		errfmt(err, errlen, "user %s: could still become root again", u->name);
		return -EPERM;
	}
	return 0;
}

static void fdset_add(struct fdset *f, int fd)
{
	for (int i = 0; i < f->n; i++)
		if (f->fd[i] == fd)
			return; /* fds 0-2, which start in the sets (an eventfd lands there when they were closed) */
	if (f->n == MAX_SET_FDS) {
		pr_warn("sandbox: more than %d fds to check for one call: left unchecked",
			MAX_SET_FDS);
		f->n = -1;
	} else if (f->n >= 0) {
		f->fd[f->n++] = fd;
	}
}

/* Fill fdsets from /proc/self/fd (see conds). Without /proc the sets keep fds 0-2 only. */
static void scan_fds(void)
{
	struct fdset found[FS_NR] = { [FS_READ] = { { STDIN_FILENO }, 1 },
				      [FS_WRITE] = { { STDOUT_FILENO, STDERR_FILENO }, 2 } };
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (!d) {
		pr_debug(
			"sandbox: cannot list /proc/self/fd (%s): read and write allowed on fds 0-2 only",
			strerror(errno));
		return;
	}
	while ((e = readdir(d))) {
		char link[64];
		ssize_t n = readlinkat(dirfd(d), e->d_name, link, sizeof(link) - 1);
		int fd = atoi(e->d_name);

		if (n <= 0 || fd == dirfd(d))
			continue;
		link[n] = '\0';
		for (size_t k = 0; k < ARRAY_SIZE(fd_kinds); k++)
			for (int set = 0; set < FS_NR && !strcmp(link, fd_kinds[k].link); set++)
				if (fd_kinds[k].sets & 1u << set)
					fdset_add(&found[set], fd);
	}
	closedir(d);
	for (int i = 0; i < allowed_rw.n; i++) {
		fdset_add(&found[FS_READ], allowed_rw.fd[i]);
		fdset_add(&found[FS_WRITE], allowed_rw.fd[i]);
	}
	for (int i = 0; i < allowed_net.n; i++)
		fdset_add(&found[FS_NET], allowed_net.fd[i]);
	memcpy(fdsets, found, sizeof(fdsets));
}

int sandbox_allow_fd(int fd)
{
	if (fd < 0)
		return -EBADF;
	if (allowed_rw.n == MAX_SET_FDS)
		return -ENOSPC;
	fdset_add(&allowed_rw, fd);
	fdset_add(&fdsets[FS_READ], fd);
	fdset_add(&fdsets[FS_WRITE], fd);
	return 0;
}

int sandbox_allow_net_fd(int fd)
{
	if (fd < 0)
		return -EBADF;
	if (allowed_net.n == MAX_SET_FDS)
		return -ENOSPC;
	fdset_add(&allowed_net, fd);
	fdset_add(&fdsets[FS_NET], fd);
	return 0;
}

int sandbox_drop_privileges(const struct sandbox_user *user, char *err, size_t errlen)
{
	struct sigaction sa = { .sa_sigaction = sigsys_handler, .sa_flags = SA_SIGINFO };
	bool bounding = false;
	int ret;

	/* What glibc loads on first use must be loaded now: the RTC's first gmtime_r reads
	 * the time zone (/etc/localtime), which no filter allows later. */
	tzset();
	/* And malloc: every thread allocates from the main arena (its per-thread cache keeps
	 * small allocations lock-free). A thread arena makes glibc read files lazily, inside
	 * whatever filter the thread then runs under: /sys/devices/system/cpu/online for the
	 * arena limit when a thread first needs one (the rng thread, with net, blk, console and
	 * rng up), /proc/sys/vm/overcommit_memory the first time a thread arena's heap shrinks
	 * (main freeing the blk thread's buffers at exit). The main arena grows and shrinks with
	 * brk and reads nothing. */
	mallopt(M_ARENA_MAX, 1);
	/* Everything is open: the fds each filter lets threads read and write. */
	scan_fds();
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSYS, &sa, NULL) < 0) {
		errfmt(err, errlen, "sandbox: SIGSYS handler: %s", strerror(errno));
		return -errno;
	}
	/* The bounding set can only shrink while CAP_SETPCAP is still ours: before setuid. */
	if (capng_get_caps_process() == 0 && capng_have_capability(CAPNG_EFFECTIVE, CAP_SETPCAP)) {
		capng_clear(CAPNG_SELECT_BOTH);
		bounding = capng_apply(CAPNG_SELECT_BOUNDS) == 0;
	}
	if (user && (ret = switch_user(user, err, errlen)) < 0)
		return ret;
	capng_clear(CAPNG_SELECT_CAPS);
	if (capng_apply(CAPNG_SELECT_CAPS) < 0 || capng_get_caps_process() < 0 ||
	    capng_have_capabilities(CAPNG_SELECT_CAPS) != CAPNG_NONE) {
		errfmt(err, errlen, "sandbox: cannot drop capabilities");
		return -EPERM;
	}
	pr_debug("sandbox: no capabilities left%s%s%s", bounding ? ", bounding set empty" : "",
		 user ? ", running as " : "", user ? user->name : "");
	return 0;
}

/* ---- seccomp ---- */

/* The rules of one entry of conds. Arguments that are ints (fds, pids) are compared on their
 * low 32 bits, as the kernel reads them. */
static int add_cond(scmp_filter_ctx ctx, const struct sb_cond *c)
{
	const struct fdset *f = &fdsets[c->set];
	struct scmp_arg_cmp cmp = { .arg = c->arg,
				    .op = SCMP_CMP_MASKED_EQ,
				    .datum_a = 0xffffffffUL };
	int ret = 0;

	switch (c->test) {
	case T_OWN_PID:
		cmp.datum_b = (scmp_datum_t)getpid();
		return seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, c->nr, 1, &cmp);
	case T_FDSET:
		if (f->n < 0)
			return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, c->nr, 0);
		for (int i = 0; i < f->n && !ret; i++) {
			cmp.datum_b = (scmp_datum_t)f->fd[i];
			ret = seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, c->nr, 1, &cmp);
		}
		return ret;
	}
	return -EINVAL;
}

static int build_and_load(enum sandbox_kind kind)
{
	struct allow a;
	scmp_filter_ctx ctx;
	int ret = 0;

	collect(&a, kind);
	ctx = seccomp_init(SCMP_ACT_TRAP);
	if (!ctx)
		return -ENOMEM;
	for (int nr = 0; nr < NR_MAX && !ret; nr++)
		if (a.call[nr])
			ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
	for (int i = 0; i < a.nioctls && !ret; i++)
		/* ioctl's request and prctl's option are ints: the register's upper half is
		 * whatever the caller left there, so compare the low 32 bits only. */
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
				       SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, a.ioctl[i]));
	for (size_t i = 0; i < ARRAY_SIZE(prctl_ok) && !ret; i++)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1,
				       SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffUL,
					       (scmp_datum_t)prctl_ok[i]));
	for (size_t i = 0; i < ARRAY_SIZE(conds) && !ret; i++)
		if (a.cond[i] && !a.call[conds[i].nr])
			ret = add_cond(ctx, &conds[i]);
	if (a.clone && !ret) {
		/* Threads only, never a new process: clone must carry CLONE_THREAD. clone3
		 * passes its flags in memory a filter cannot read, so it reports ENOSYS and
		 * glibc falls back to clone. */
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
				       SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
		if (!ret)
			ret = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
		/* The new threads install their own filter (which can only narrow this one). */
		if (!ret)
			ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(seccomp), 0);
	}
	if (!ret)
		ret = seccomp_load(ctx);
	seccomp_release(ctx);
	return ret;
}

#ifdef LKVM_TEST_HOOKS
/*
 * Test builds only (make build/testhooks/lkvm; the release lkvm has none of
 * this): LKVM_TEST_SANDBOX_VIOLATE=KIND makes the first thread of that kind make its probe
 * right after entering its filter, so a test can see the filter stop it.
 *
 * Filters stack: a thread keeps the filters of the thread that created it and adds its own,
 * and a call passes only if every one allows it. A probe every ancestor refuses would be
 * stopped even if the thread's own list allowed everything, and prove nothing about that
 * list. So each kind's probe is a call its own list forbids and the filter it inherits allows:
 * the vCPU's for the threads the vCPU starts on DRIVER_OK (the kinds in its `spawns`); none
 * for main and the threads main starts before it confines itself (vcpu, console, 9p, fs, ctl),
 * whose probe main's list allows all the same (a call lkvm makes, not only an absurd one).
 * probe_proves checks this against the lists at run time. Each probe passes fd -1 (or an
 * invalid address or context) so that, unfiltered (--sandbox=off), it fails harmlessly.
 * KIND:signal=PID makes the thread send SIGKILL to process PID instead (tgkill, as abort()
 * would), which no kind may do to another process.
 */
static const struct sb_probe {
	int nr;		    /* the system call */
	unsigned long arg1; /* ioctl's request (fd -1 is the first argument of every probe) */
	const char *what;
	const char *why;
} probes[SB_NR] = {
	[SB_MAIN] = { SCMP_SYS(ioctl), KVM_RUN, "ioctl KVM_RUN",
		      "the vCPU's, which main never makes (main inherits no filter)" },
	[SB_VCPU] = { SCMP_SYS(lseek), 0, "lseek",
		      "main's (--debug's statm): main starts vCPUs before its filter" },
	[SB_CONSOLE] = { SCMP_SYS(ioctl), TCGETS, "ioctl TCGETS",
			 "main's (the terminal at teardown): the console may only restore it" },
	[SB_NET_RX] = { SCMP_SYS(io_submit), 0, "io_submit",
			"blk's, in the filter of the vCPU that starts the net threads" },
	[SB_NET_TX] = { SCMP_SYS(pwrite64), 0, "pwrite64",
			"blk's (any fd), in the filter of the vCPU that starts net-tx" },
	[SB_NET_CTL] = { SCMP_SYS(ioctl), TUNSETOFFLOAD, "ioctl TUNSETOFFLOAD",
			 "the vCPU's (offloads at DRIVER_OK): net-ctl may only move tap queues" },
	[SB_NET_IRQ] = { SCMP_SYS(ioctl), KVM_IRQFD, "ioctl KVM_IRQFD",
			 "the vCPU's (interrupt wiring at DRIVER_OK), which starts the relay" },
	[SB_BLK] = { SCMP_SYS(ioctl), KVM_RUN, "ioctl KVM_RUN",
		     "the vCPU's own, in the filter the blk thread inherits from it" },
	[SB_VCONSOLE] = { SCMP_SYS(ioctl), TUNSETQUEUE, "ioctl TUNSETQUEUE",
			  "the vCPU's (a NIC's queues), which starts virtio-console" },
	[SB_RNG] = { SCMP_SYS(pread64), 0, "pread64",
		     "blk's (any fd), in the filter of the vCPU that starts rng" },
	[SB_P9] = { SCMP_SYS(mincore), 0, "mincore",
		    "main's (lkvm stat's resident RAM): main starts 9p before its filter" },
	[SB_FS] = { SCMP_SYS(mincore), 0, "mincore",
		    "main's (lkvm stat's resident RAM): main starts fs before its filter" },
	[SB_CTL] = { SCMP_SYS(ioctl), KVM_SET_GSI_ROUTING, "ioctl KVM_SET_GSI_ROUTING",
		     "main's (teardown): main starts ctl before its filter" },
	[SB_GDB] = { SCMP_SYS(ioctl), KVM_GET_VCPU_EVENTS, "ioctl KVM_GET_VCPU_EVENTS",
		     "ctl's (lkvm debug's registers): ctl starts lkvm debug --gdb's server, main "
		     "--gdb's before its filter" },
};

static bool allows(const struct allow *a, const struct sb_probe *p)
{
	if (p->nr != SCMP_SYS(ioctl))
		return a->call[p->nr];
	for (int i = 0; i < a->nioctls; i++)
		if (a->ioctl[i] == p->arg1)
			return true;
	return false;
}

/* The probe's call is refused by the kind's list and allowed by the one it inherits (a kind
 * in whose `spawns` it is), or for main's threads by main's list. */
static bool probe_proves(enum sandbox_kind kind)
{
	struct allow a;
	int parent = kind == SB_MAIN ? -1 : SB_MAIN;

	for (int k = 0; k < SB_NR; k++)
		if (kinds[k].spawns & SPAWNS(kind))
			parent = k;
	collect(&a, kind);
	if (allows(&a, &probes[kind]))
		return false;
	if (parent < 0)
		return true;
	collect(&a, parent);
	return allows(&a, &probes[kind]);
}

static void test_violation(struct kvm *kvm, enum sandbox_kind kind)
{
	const char *want = getenv("LKVM_TEST_SANDBOX_VIOLATE"), *name = kinds[kind].name;
	const struct sb_probe *p = &probes[kind];
	size_t len = strlen(name);
	long r;

	if (!want || strncmp(want, name, len) != 0)
		return;
	if (!strncmp(want + len, ":signal=", 8)) {
		long pid = strtol(want + len + 8, NULL, 10);

		r = syscall(SYS_tgkill, pid, pid, SIGKILL);
		pr_warn("sandbox test: the %s thread sent SIGKILL to pid %ld (%s): no filter stopped it",
			name, pid, r < 0 ? strerror(errno) : "delivered");
		return;
	}
	if (want[len])
		return;
	if (!probe_proves(kind)) {
		kvm_request_exit(kvm, EXIT_LKVM_ERROR,
				 "sandbox test: the %s thread's probe (%s) proves nothing: its own "
				 "list allows it, or the filter it inherits refuses it too",
				 name, p->what);
		return;
	}
	pr_warn("sandbox test: the %s thread makes system call %d (%s: %s)", name, p->nr, p->what,
		p->why);
	r = syscall(p->nr, -1L, p->arg1, 0L, 0L);
	pr_warn("sandbox test: the %s thread's %s returned (%s): no filter stopped it", name,
		p->what, r < 0 ? strerror(errno) : "done");
}
#else
static void test_violation(struct kvm *kvm, enum sandbox_kind kind)
{
}
#endif

int sandbox_enter(struct kvm *kvm, enum sandbox_kind kind)
{
	int ret = 0;

	if ((unsigned)kind >= SB_NR)
		return -EINVAL;
#ifdef __SANITIZE_ADDRESS__
	/* LeakSanitizer's check at exit runs on the main thread and needs what no filter
	 * should allow (a ptrace-ing child process): sanitizer builds, which are for tests,
	 * leave main unfiltered; every other thread is filtered as in the normal build. */
	if (kind == SB_MAIN && kvm && kvm->sandbox) {
		pr_debug("sandbox: sanitizer build: the main thread stays unfiltered");
		return 0;
	}
#endif
	if (kvm && kvm->sandbox) {
		sigset_t sys;

		/* A thread started with every signal blocked (the control socket's) would take its
		 * filter's SIGSYS blocked: the kernel then kills lkvm with no word of why. */
		sigemptyset(&sys);
		sigaddset(&sys, SIGSYS);
		pthread_sigmask(SIG_UNBLOCK, &sys, NULL);
		ret = build_and_load(kind);
		if (ret < 0)
			pr_err("sandbox: cannot install the %s thread's seccomp filter: %s",
			       kinds[kind].name, strerror(-ret));
		else
			my_kind = kind;
	}
	if (!ret && kvm)
		test_violation(kvm, kind);
	return ret;
}

#ifdef LKVM_TEST_HOOKS
void lkvm_test_pause(const char *name, const char *detail)
{
	const char *at = getenv("LKVM_TEST_PAUSE_AT"), *go = getenv("LKVM_TEST_PAUSE_GO");
	char buf[64];
	int fd;

	if (!at || !go || strcmp(at, name))
		return;
	fprintf(stderr, "lkvm-test: paused at %s: %s\n", name, detail);
	/* The open blocks until the test opens the FIFO to write; its close ends the reads. */
	fd = open(go, O_RDONLY | O_CLOEXEC);
	while (fd >= 0 && read(fd, buf, sizeof(buf)) > 0)
		;
	if (fd >= 0)
		close(fd);
}
#else
void lkvm_test_pause(const char *name, const char *detail)
{
}
#endif

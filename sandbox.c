/* Least privilege: capabilities and user dropped after set-up, and one seccomp allow-list per thread kind. */
#include <errno.h>
#include <grp.h>
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
#include <sys/socket.h>
#include <linux/if_tun.h>
#include <linux/kvm.h>
#include <cap-ng.h>
#include <seccomp.h>

#include "lkvm/kvm.h"
#include "lkvm/sandbox.h"
#include "lkvm/term.h"

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
#define MAX_IOCTLS 16

struct sb_kind {
	const char *name;
	int calls[MAX_CALLS];          /* allowed unconditionally (0-terminated, read is 0 and in common) */
	unsigned long ioctls[MAX_IOCTLS]; /* ioctl requests allowed (0-terminated) */
	unsigned spawns;               /* bit mask of kinds whose threads this kind creates */
};

/* Every thread: memory management and locks inside glibc, logging (write), eventfds
 * (read/write), waiting, time, naming itself (prctl), ending (exit, or abort via tgkill),
 * and restoring the terminal from the SIGSYS handler (ioctl TCSETS). sigaltstack and
 * sched_getaffinity (pthread_getattr_np) are what the sanitizer runtimes add to a thread's
 * start and end. */
static const struct sb_kind common = {
	.name = "common",
	.calls = { SCMP_SYS(write), SCMP_SYS(close), SCMP_SYS(futex), SCMP_SYS(exit), SCMP_SYS(exit_group),
		   SCMP_SYS(rt_sigreturn), SCMP_SYS(rt_sigprocmask), SCMP_SYS(madvise), SCMP_SYS(mmap),
		   SCMP_SYS(munmap), SCMP_SYS(mprotect), SCMP_SYS(brk), SCMP_SYS(mremap),
		   SCMP_SYS(restart_syscall), SCMP_SYS(sched_yield), SCMP_SYS(clock_gettime),
		   SCMP_SYS(gettimeofday), SCMP_SYS(clock_nanosleep), SCMP_SYS(nanosleep), SCMP_SYS(getpid),
		   SCMP_SYS(gettid), SCMP_SYS(tgkill), SCMP_SYS(poll), SCMP_SYS(ppoll), SCMP_SYS(getrandom),
		   SCMP_SYS(sigaltstack), SCMP_SYS(sched_getaffinity) },
	.ioctls = { TCSETS, TCSETSW },
};

#define SPAWNS(k) (1u << (k))

static const struct sb_kind kinds[SB_NR] = {
	[SB_MAIN] = {
		.name = "main",
		/* fopen of /proc/self/status for --debug's memory line; mincore for the same. */
		/* Teardown: the control socket and its lock file removed, the disks' aio contexts. */
		.calls = { SCMP_SYS(openat), SCMP_SYS(fstat), SCMP_SYS(newfstatat), SCMP_SYS(lseek),
			   SCMP_SYS(mincore), SCMP_SYS(unlink), SCMP_SYS(unlinkat), SCMP_SYS(io_destroy),
			   SCMP_SYS(io_getevents) },
		/* Teardown: ioeventfds and irqfds deassigned, MSI routes dropped. */
		.ioctls = { KVM_IRQFD, KVM_IOEVENTFD, KVM_SET_GSI_ROUTING, KVM_IRQ_LINE, TCGETS },
	},
	[SB_VCPU] = {
		.name = "vcpu",
		/* Starting the net threads on DRIVER_OK (the new thread's own set-up included). */
		.calls = { SCMP_SYS(set_robust_list), SCMP_SYS(rseq) },
		.ioctls = { KVM_RUN, KVM_GET_REGS, KVM_SET_REGS, KVM_GET_SREGS, KVM_SET_SREGS,
			    KVM_GET_VCPU_EVENTS, KVM_SET_VCPU_EVENTS, KVM_IRQ_LINE, KVM_IRQFD,
			    KVM_IOEVENTFD, KVM_SET_GSI_ROUTING, TUNSETOFFLOAD },
		.spawns = SPAWNS(SB_NET_RX) | SPAWNS(SB_NET_TX) | SPAWNS(SB_NET_CTL) | SPAWNS(SB_BLK) |
			  SPAWNS(SB_VCONSOLE) | SPAWNS(SB_RNG),
	},
	[SB_CONSOLE] = {
		.name = "console",
		.ioctls = { KVM_IRQ_LINE },
	},
	[SB_NET_RX] = {
		.name = "net-rx",
		.calls = { SCMP_SYS(readv) },
		.ioctls = { KVM_IRQ_LINE },
	},
	[SB_NET_TX] = {
		.name = "net-tx",
		.calls = { SCMP_SYS(writev) },
		.ioctls = { KVM_IRQ_LINE },
	},
	[SB_NET_CTL] = {
		.name = "net-ctl",
		.ioctls = { KVM_IRQ_LINE },
	},
	[SB_BLK] = {
		.name = "blk",
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
		 * changes. Which files these reach is the server's and the credentials' business:
		 * a filter cannot read the paths. Its threads are started by main before main
		 * confines itself (virtio/9p.c), so no other kind's filter carries these calls. */
		.calls = { SCMP_SYS(openat2), SCMP_SYS(openat), SCMP_SYS(newfstatat),
			   SCMP_SYS(fstatfs), SCMP_SYS(fcntl), SCMP_SYS(getdents64), SCMP_SYS(lseek),
			   SCMP_SYS(preadv), SCMP_SYS(pwritev), SCMP_SYS(mkdirat), SCMP_SYS(mknodat),
			   SCMP_SYS(symlinkat), SCMP_SYS(readlinkat), SCMP_SYS(linkat),
			   SCMP_SYS(unlinkat), SCMP_SYS(renameat), SCMP_SYS(fchmodat),
			   SCMP_SYS(fchownat), SCMP_SYS(utimensat), SCMP_SYS(ftruncate),
			   SCMP_SYS(fsync), SCMP_SYS(fdatasync) },
		.ioctls = { KVM_IRQ_LINE },
	},
	[SB_CTL] = {
		.name = "ctl",
		/* Clients: accept, their uid, framed replies. Pause and resume: kvm-clock and the
		 * vCPUs' TSC offsets, the vCPUs signalled to park, the device threads parked and
		 * let go (eventfds, futexes: no thread is created). debug: the parked vCPUs'
		 * registers. */
		.calls = { SCMP_SYS(accept4), SCMP_SYS(recvfrom), SCMP_SYS(recvmsg), SCMP_SYS(sendto),
			   SCMP_SYS(sendmsg), SCMP_SYS(fcntl), SCMP_SYS(geteuid), SCMP_SYS(getuid),
			   SCMP_SYS(setsockopt), SCMP_SYS(getsockopt), SCMP_SYS(shutdown) },
		.ioctls = { KVM_GET_CLOCK, KVM_SET_CLOCK, KVM_KVMCLOCK_CTRL, KVM_GET_REGS, KVM_GET_SREGS,
			    KVM_GET_VCPU_EVENTS, KVM_GET_DEVICE_ATTR, KVM_SET_DEVICE_ATTR, KVM_IRQ_LINE },
	},
};

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
};

static void add_kind(struct allow *a, const struct sb_kind *k)
{
	/* read is syscall 0, which also ends the list: always allowed, added below. */
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
	a->call[SCMP_SYS(read)] = true;
	a->ncalls = 1;
	add_kind(a, &common);
	while (todo & ~done) {
		int k = __builtin_ctz(todo & ~done);

		done |= SPAWNS(k);
		add_kind(a, &kinds[k]);
		todo |= kinds[k].spawns;
		if (kinds[k].spawns)
			a->clone = true;
	}
}

void sandbox_list_size(enum sandbox_kind kind, int *syscalls, int *ioctls)
{
	struct allow a;

	collect(&a, kind);
	/* ioctl and prctl (argument-checked) count once each; clone (threads only) and
	 * seccomp too. */
	*syscalls = a.ncalls + (a.nioctls > 0) + 1 + 2 * a.clone;
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

/* Async-signal-safe: write(2), the terminal restored with tcsetattr (an ioctl every
 * filter allows), then _exit. */
static void sigsys_handler(int sig, siginfo_t *si, void *uc)
{
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
	term_restore_on_signal();
	_exit(128 + SIGSYS);
}

/* ---- privileges ---- */

static int resolve_user(const char *user, uid_t *uid, gid_t *gid, char *err, size_t errlen)
{
	struct passwd *pw;
	char *end;
	unsigned long v;

	errno = 0;
	pw = getpwnam(user);
	if (!pw && *user >= '0' && *user <= '9') {
		v = strtoul(user, &end, 10);
		if (!*end && v <= 0xfffffffeUL)
			pw = getpwuid((uid_t)v);
		if (!pw && !*end && v <= 0xfffffffeUL) {
			/* A bare uid without a passwd entry: its own gid, as `setpriv` does. */
			*uid = (uid_t)v;
			*gid = (gid_t)v;
			return 0;
		}
	}
	if (!pw) {
		errfmt(err, errlen, "--user '%s': no such user", user);
		return -ENOENT;
	}
	*uid = pw->pw_uid;
	*gid = pw->pw_gid;
	return 0;
}

int sandbox_drop_privileges(const char *user, char *err, size_t errlen)
{
	struct sigaction sa = { .sa_sigaction = sigsys_handler, .sa_flags = SA_SIGINFO };
	bool bounding = false;
	uid_t uid = 0;
	gid_t gid = 0;
	int ret;

	if (user && (ret = resolve_user(user, &uid, &gid, err, errlen)) < 0)
		return ret;
	/* What glibc loads on first use must be loaded now: the RTC's first gmtime_r reads
	 * the time zone (/etc/localtime), which no filter allows later. */
	tzset();
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
	if (user) {
		if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0) {
			int e = errno;

			errfmt(err, errlen, "--user %s (uid %u, gid %u): %s", user, (unsigned)uid,
			       (unsigned)gid, strerror(e));
			return -e;
		}
		/* setuid to a non-root uid cleared the capabilities: there is no way back. */
		if (uid != 0 && (setuid(0) != -1 || geteuid() == 0)) {
			errfmt(err, errlen, "--user %s: could still become root again", user);
			return -EPERM;
		}
	}
	capng_clear(CAPNG_SELECT_CAPS);
	if (capng_apply(CAPNG_SELECT_CAPS) < 0 || capng_get_caps_process() < 0 ||
	    capng_have_capabilities(CAPNG_SELECT_CAPS) != CAPNG_NONE) {
		errfmt(err, errlen, "sandbox: cannot drop capabilities");
		return -EPERM;
	}
	pr_debug("sandbox: no capabilities left%s%s%s", bounding ? ", bounding set empty" : "",
		 user ? ", running as " : "", user ? user : "");
	return 0;
}

/* ---- seccomp ---- */

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
				       SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffUL, (scmp_datum_t)prctl_ok[i]));
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

/* Tests only (README, "Sandbox"): LKVM_TEST_SANDBOX_VIOLATE=KIND makes the first thread of
 * that kind open a TCP socket right after entering its sandbox, the archetype of what a
 * compromised device thread would try, so a test can see the filter stop it. */
static void test_violation(enum sandbox_kind kind)
{
	const char *want = getenv("LKVM_TEST_SANDBOX_VIOLATE");
	int fd;

	if (!want || strcmp(want, kinds[kind].name) != 0)
		return;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	pr_warn("sandbox test: the %s thread opened a socket (fd %d): no filter stopped it",
		kinds[kind].name, fd);
	if (fd >= 0)
		close(fd);
}

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
		ret = build_and_load(kind);
		if (ret < 0)
			pr_err("sandbox: cannot install the %s thread's seccomp filter: %s",
			       kinds[kind].name, strerror(-ret));
		else
			my_kind = kind;
	}
	if (!ret && kvm)
		test_violation(kind);
	return ret;
}

/* The per-VM control socket: name lock, listening socket, and a thread that answers list/stop/pause/resume/stat/debug (and hands a gdb client to the VM's gdb server). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/capability.h>

#include "lkvm/ctl.h"
#include "lkvm/gdb-target.h"
#include "lkvm/kvm-cpu.h"
#include "lkvm/kvm.h"
#include "lkvm/sandbox.h"
#include "lkvm/stats.h"
#include "lkvm/version.h"
#include "lkvm/vm-dump.h"
#include "lkvm/vm-snap.h"

#define MAX_CONNS 8    /* clients served at once; more wait in the listen backlog */
#define MAX_WAITERS 16 /* `lkvm stop` clients waiting for the process to end */
#define CTL_BACKLOG 16 /* connections queued before accept: connect blocks past it */
#define SEND_TIMEOUT_S 1
#define PARK_TIMEOUT_MS 5000
#define LOG_BUDGET 5 /* malformed requests logged before going quiet */
/* Out of descriptors with no spare left to give up: the listening socket is left out of poll
 * for this long before accept is tried again (it stays readable: polling it would spin). */
#define ACCEPT_BACKOFF_MS 100
#define STARVED_LOG_S 60 /* "out of descriptors" logged at most once per this */
_Static_assert(CTL_SERVER_RUN_FDS >= MAX_CONNS + MAX_WAITERS + 1 + 1,
	       "the descriptors the server opens while it runs (clients, waiters, one turned away, "
	       "gdb's copy of its client)");

struct conn {
	int fd;	       /* -1: free */
	int passed_fd; /* a descriptor the request came with (SCM_RIGHTS), or -1 */
	u8 buf[CTL_HDR_LEN + CTL_MAX_REQUEST];
	size_t got;
	u64 deadline;
};

struct ctl_server {
	struct kvm *kvm;
	char name[65];
	char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char lock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	uid_t owner;	/* who started the VM (and owns the runtime directory) */
	pid_t cleaner;	/* the cleanup helper, or -1 */
	int cleaner_fd; /* our end of its pipe: closing it tells it to clean up */
	int listen_fd, lock_fd, wake_fd;
	/* An eventfd for an attached gdb server's wake-ups (serve_gdb), opened with the others:
	 * once the VM runs, no thread may make one, and the sandbox lets threads read and write
	 * only the eventfds open when it started. */
	int gdb_wake_fd;
	/*
	 * A descriptor held in reserve (a copy of wake_fd, never polled) for when lkvm is out of
	 * them (a guest's 9p fids can fill the table): given up to accept one client, so that
	 * `lkvm stop` and `lkvm stat` are still answered, and taken again once one is free.
	 * -1 while given up.
	 */
	int spare_fd;
	u64 accept_after; /* ns: no accept before this (out of descriptors, see ACCEPT_BACKOFF_MS) */
	u64 starved_logged; /* ns of the last "out of descriptors" line (0: none yet) */
	pthread_t thread;
	bool started;
	struct conn conn[MAX_CONNS];
	int waiters[MAX_WAITERS];
	int nwaiters;
	int log_budget;
	u64 start_realtime;
};

/* ---- set-up: directory, lock, socket ---- */

/* A directory that is not ours (another user made /tmp/lkvm-UID first) is refused with
 * -EPERM: a VM there would be reachable and spoofable by that user. */
static int make_dir(const char *dir, char *err, size_t errlen)
{
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		int e = errno;

		errfmt(err, errlen, "cannot create the runtime directory %s: %s", dir, strerror(e));
		return -e;
	}
	return ctl_dir_check(dir, err, errlen);
}

/* Hold NAME.lock for the VM's life: the lock, not the socket, says a VM of that name runs
 * (the kernel drops it when the process dies, SIGKILL included). */
static int take_lock(struct ctl_server *s, char *err, size_t errlen)
{
	/* A client removing a stale socket holds the lock for a moment (ctl_remove_stale): a held
	 * lock means a running VM only if it stays held. */
	for (int tries = 0, busy = 0; tries < 10;) {
		int fd = open(s->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);

		if (fd < 0) {
			int e = errno;

			errfmt(err, errlen, "cannot open %s: %s", s->lock_path, strerror(e));
			return -e;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int e = errno;

			close(fd);
			if (e == EWOULDBLOCK && ++busy < 20) {
				struct timespec ts = { .tv_nsec = 10 * 1000000L };

				nanosleep(&ts, NULL);
				continue;
			}
			if (e == EWOULDBLOCK) {
				errfmt(err, errlen,
				       "a VM named '%s' is already running (lkvm list shows it; pick another --name)",
				       s->name);
				return -EADDRINUSE;
			}
			errfmt(err, errlen, "cannot lock %s: %s", s->lock_path, strerror(e));
			return -e;
		}
		/* The previous holder may have unlinked it just before we locked: retry on the new file. */
		if (ctl_lock_is_current(fd, s->lock_path)) {
			s->lock_fd = fd;
			return 0;
		}
		close(fd);
		tries++;
	}
	errfmt(err, errlen, "cannot lock %s: it keeps being replaced", s->lock_path);
	return -EAGAIN;
}

static int listen_on(struct ctl_server *s, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	mode_t old;
	int ret;

	memcpy(sa.sun_path, s->sock_path, sizeof(sa.sun_path));
	s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s->listen_fd < 0) {
		ret = -errno;
		errfmt(err, errlen, "socket: %s", strerror(errno));
		return ret;
	}
	/* We hold the name's lock, so a socket already there is stale (its VM was killed). */
	if (unlink(s->sock_path) == 0)
		pr_info("removed a stale control socket %s (its VM is gone)", s->sock_path);
	old = umask(0177); /* the socket is born 0600 */
	ret = bind(s->listen_fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (ret < 0 || chmod(s->sock_path, 0600) < 0 || listen(s->listen_fd, CTL_BACKLOG) < 0) {
		ret = -errno;
		errfmt(err, errlen, "cannot listen on %s: %s", s->sock_path, strerror(errno));
		return ret;
	}
	return 0;
}

/*
 * The cleanup helper. The socket and lock live in the runtime directory of the user who
 * started lkvm; after --user, or with no capability left, lkvm may no longer remove them
 * (root's 0700 directory is closed to nobody), and main's seccomp filter allows no unlink
 * anyway. So a child forked now, with the starting user's uid, removes them when lkvm is
 * gone: it waits for EOF on a pipe whose only write end lkvm holds, which comes from
 * ctl_server_destroy or from the kernel when lkvm dies (SIGKILL included), then unlinks the
 * socket and the lock and exits. It keeps a copy of the lock fd, so the name stays locked
 * until both are unlinked: a VM of the same name that starts meanwhile waits (take_lock)
 * instead of having its new files removed. It keeps nothing else: no other fd (a listening
 * socket held here would queue connections nobody accepts), no capability (the directory's
 * owner needs none to unlink in it), no signal but SIGKILL. Nothing lkvm sends can make it
 * do anything but this; the paths are its own copy from before the fork.
 */
static void __attribute__((noreturn)) cleaner_main(const struct ctl_server *s, int fd)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = { 0 };
	int keep[2] = { MIN(fd, s->lock_fd), MAX(fd, s->lock_fd) };
	sigset_t all;
	char b[16];

	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, NULL);
	prctl(PR_SET_NAME, "lkvm-cleanup");
	/* Only system calls from here on: this may be a fork of a threaded process (tests).
	 * Inherited fds of whoever started lkvm go too. */
	if (keep[0] > 0)
		syscall(SYS_close_range, 0u, (unsigned)keep[0] - 1, 0u);
	if (keep[1] > keep[0] + 1)
		syscall(SYS_close_range, (unsigned)keep[0] + 1, (unsigned)keep[1] - 1, 0u);
	syscall(SYS_close_range, (unsigned)keep[1] + 1, ~0u, 0u);
	syscall(SYS_capset, &hdr, none);
	while (read(fd, b, sizeof(b)) != 0)
		; /* blocked signals cannot interrupt it; any byte is ignored */
	unlink(s->sock_path);
	/* Unlinked while still held: a VM starting now locks a new file (see take_lock). */
	unlink(s->lock_path);
	_exit(0);
}

static int spawn_cleaner(struct ctl_server *s, char *err, size_t errlen)
{
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0) {
		errfmt(err, errlen, "pipe: %s", strerror(errno));
		return -errno;
	}
	pid = fork();
	if (pid < 0) {
		int e = errno;

		close(p[0]);
		close(p[1]);
		errfmt(err, errlen, "cannot start the control socket's cleanup helper: %s",
		       strerror(e));
		return -e;
	}
	if (pid == 0) {
		/* These by name: without them the helper would never see EOF, or would keep the
		 * socket open; the rest goes in cleaner_main (close_range, Linux 5.9 on). */
		close(p[1]);
		close(s->listen_fd);
		close(s->wake_fd);
		close(s->spare_fd);
		cleaner_main(s, p[0]);
	}
	close(p[0]);
	s->cleaner = pid;
	s->cleaner_fd = p[1];
	return 0;
}

/* open_wake_fds: the eventfd that wakes the server's thread, the spare descriptor (its copy), and gdb's. */
static int open_wake_fds(struct ctl_server *s, char *err, size_t errlen)
{
	int ret;

	s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->wake_fd < 0) {
		ret = -errno;
		errfmt(err, errlen, "eventfd: %s", strerror(errno));
		return ret;
	}
	s->spare_fd = fcntl(s->wake_fd, F_DUPFD_CLOEXEC, 0);
	if (s->spare_fd < 0) {
		ret = -errno;
		errfmt(err, errlen, "cannot keep a spare descriptor: %s", strerror(errno));
		return ret;
	}
	s->gdb_wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->gdb_wake_fd < 0) {
		ret = -errno;
		errfmt(err, errlen, "eventfd: %s", strerror(errno));
		return ret;
	}
	return 0;
}

int ctl_server_create(struct kvm *kvm, const char *name, uid_t owner, struct ctl_server **out,
		      char *err, size_t errlen)
{
	char dir[PATH_MAX];
	struct ctl_server *s;
	int ret;

	*out = NULL;
	if (ctl_runtime_dir(dir, sizeof(dir)) < 0) {
		errfmt(err, errlen, "the runtime directory's path is too long");
		return -ENAMETOOLONG;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		errfmt(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->kvm = kvm;
	s->owner = owner;
	s->cleaner = -1;
	s->listen_fd = s->lock_fd = s->wake_fd = s->cleaner_fd = s->spare_fd = s->gdb_wake_fd = -1;
	for (int i = 0; i < MAX_CONNS; i++)
		s->conn[i].fd = s->conn[i].passed_fd = -1;
	s->log_budget = LOG_BUDGET;
	s->start_realtime = (u64)time(NULL);
	snprintf(s->name, sizeof(s->name), "%s", name);
	if (ctl_path(s->sock_path, sizeof(s->sock_path), dir, name, ".sock") < 0 ||
	    ctl_path(s->lock_path, sizeof(s->lock_path), dir, name, ".lock") < 0) {
		errfmt(err, errlen,
		       "the control socket's path %s/%s.sock is too long (108 bytes at most)", dir,
		       name);
		ret = -ENAMETOOLONG;
		goto fail;
	}
	ret = make_dir(dir, err, errlen);
	if (ret < 0)
		goto fail;
	ret = take_lock(s, err, errlen);
	if (ret < 0)
		goto fail;
	ret = listen_on(s, err, errlen);
	if (ret < 0)
		goto fail;
	ret = open_wake_fds(s, err, errlen);
	if (ret < 0)
		goto fail;
	ret = spawn_cleaner(s, err, errlen);
	if (ret < 0)
		goto fail;
	*out = s;
	return 0;
fail:
	ctl_server_destroy(s);
	return ret;
}

const char *ctl_server_path(const struct ctl_server *s)
{
	return s->sock_path;
}

/* ---- requests ---- */

static const char *state_name(struct kvm *kvm)
{
	if (atomic_load(&kvm->stopping))
		return "stopping";
	return atomic_load(&kvm->paused) ? "paused" : "running";
}

static void reply_error(struct ctl_msg *r, u32 status, const char *fmt, ...) __printf(3, 4);
static void reply_error(struct ctl_msg *r, u32 status, const char *fmt, ...)
{
	char text[512];
	va_list ap;
	u16 type = r->hdr.type;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	ctl_msg_free(r);
	ctl_msg_init(r, type, status);
	ctl_add_str(r, "error", text);
	ctl_add_u64(r, "version", CTL_VERSION);
}

static void add_info(struct ctl_server *s, struct ctl_msg *r)
{
	struct kvm *kvm = s->kvm;
	u64 paused = kvm_paused_ns(kvm);

	ctl_add_str(r, "name", s->name);
	ctl_add_u64(r, "pid", (u64)getpid());
	ctl_add_str(r, "state", state_name(kvm));
	ctl_add_u64(r, "vcpus", (u64)kvm->nr_cpus);
	ctl_add_u64(r, "ram_mib", kvm->cfg.ram_mib);
	ctl_add_u64(r, "uptime_ns", now_ns() - kvm->start_ns);
	ctl_add_u64(r, "paused_ns", paused);
	ctl_add_u64(r, "started", s->start_realtime);
	ctl_add_u64(r, "uid", (u64)geteuid());
	ctl_add_str(r, "kernel", kvm->cfg.kernel_path ? kvm->cfg.kernel_path : "");
	ctl_add_str(r, "lkvm_version", LKVM_VERSION);
}

/* The collector's flat names are the reply's field names. */
_Static_assert(STATS_NAME_MAX <= CTL_NAME_MAX, "every counter's name fits a field");

static void put_reply(void *arg, const char *name, u64 value)
{
	ctl_add_u64(arg, name, value);
}

/* The counters of --stats, flat (stats.h), after who and when: name, state, uptime_ns and
 * guest_clock_ns. */
static void add_stats(struct ctl_server *s, struct ctl_msg *r)
{
	struct kvm *kvm = s->kvm;
	struct kvm_clock_data c = { 0 };

	ctl_add_str(r, "name", s->name);
	ctl_add_str(r, "state", state_name(kvm));
	ctl_add_u64(r, "uptime_ns", now_ns() - kvm->start_ns);
	/* kvm-clock as the guest reads it: while paused, where resume will put it back (KVM's
	 * own count runs on until then). A VM ioctl: no vCPU waits for it. */
	if (atomic_load(&kvm->paused) && kvm->clock_saved)
		ctl_add_u64(r, "guest_clock_ns", kvm->clock_at_pause);
	else if (ioctl(kvm->vm_fd, KVM_GET_CLOCK, &c) == 0)
		ctl_add_u64(r, "guest_clock_ns", c.clock);
	kvm_stats_collect(kvm, put_reply, r);
}

/* Fill r (already initialised as the reply) for request type. Returns true when the
 * connection should be kept until the process exits (a stop). */
static void drop_passed(struct conn *c)
{
	if (c->passed_fd >= 0)
		close(c->passed_fd);
	c->passed_fd = -1;
}

/* lkvm snapshot: the file came with the request; "stop" (u64, optional) ends the VM after. */
static void snapshot_request(struct ctl_server *s, struct conn *c, struct ctl_msg *r)
{
	struct kvm_snap_result res;
	struct ctl_field stop = { .u = 0 };
	char err[384] = "";
	u32 len = (u32)(c->got - CTL_HDR_LEN);
	int ret;

	if (c->passed_fd < 0) {
		reply_error(r, CTL_ERR_PROTO,
			    "%s: a snapshot request comes with its file's descriptor", s->name);
		return;
	}
	(void)ctl_find(c->buf + CTL_HDR_LEN, len, "stop", CTL_F_U64, &stop);
	ret = kvm_snapshot(s->kvm, c->passed_fd, stop.u != 0, &res, err, sizeof(err));
	drop_passed(c);
	if (ret < 0) {
		reply_error(r,
			    ret == -EOPNOTSUPP || ret == -EBUSY || atomic_load(&s->kvm->stopping)
				    ? CTL_ERR_STATE
				    : CTL_ERR_FAILED,
			    "%s: %s", s->name, err);
		return;
	}
	add_info(s, r);
	ctl_add_u64(r, "pause_ns", res.pause_ns);
	ctl_add_u64(r, "save_ns", res.save_ns);
	ctl_add_u64(r, "bytes", res.bytes);
}

/* lkvm dump: the file came with the request; the reply says its size and the pause's times. */
static void dump_request(struct ctl_server *s, struct conn *c, struct ctl_msg *r)
{
	struct kvm_dump_result res;
	char err[384] = "";
	int ret;

	if (c->passed_fd < 0) {
		reply_error(r, CTL_ERR_PROTO, "%s: a dump request comes with its file's descriptor",
			    s->name);
		return;
	}
	ret = kvm_dump(s->kvm, c->passed_fd, &res, err, sizeof(err));
	drop_passed(c);
	if (ret < 0) {
		reply_error(r,
			    ret == -EBUSY || atomic_load(&s->kvm->stopping) ? CTL_ERR_STATE
									    : CTL_ERR_FAILED,
			    "%s: %s", s->name, err);
		return;
	}
	add_info(s, r);
	ctl_add_u64(r, "pause_ns", res.pause_ns);
	ctl_add_u64(r, "write_ns", res.write_ns);
	ctl_add_u64(r, "bytes", res.bytes);
}

/* lkvm debug: every vCPU's registers and last exit, as text. */
static void debug_request(struct ctl_server *s, struct ctl_msg *r)
{
	char err[256] = "";
	char *text = kvm_debug_dump(s->kvm, PARK_TIMEOUT_MS, err, sizeof(err));

	if (!text) {
		reply_error(r, CTL_ERR_STATE, "%s: %s", s->name, err);
		return;
	}
	ctl_add_str(r, "name", s->name);
	ctl_add_str(r, "state", state_name(s->kvm));
	ctl_add_strn(r, "text", text, MIN(strlen(text), (size_t)CTL_STR_MAX));
	free(text);
}

static bool handle(struct ctl_server *s, struct conn *c, u16 type, struct ctl_msg *r)
{
	struct kvm *kvm = s->kvm;
	char err[256] = "";
	int ret;

	switch (type) {
	case CTL_INFO:
		add_info(s, r);
		return false;
	case CTL_STAT:
		add_stats(s, r);
		return false;
	case CTL_STOP:
		kvm_request_exit(kvm, EXIT_STOPPED, "stopped by lkvm stop");
		add_info(s, r);
		return true;
	case CTL_PAUSE:
		if (kvm_pause(kvm, PARK_TIMEOUT_MS, err, sizeof(err)) < 0)
			reply_error(r,
				    atomic_load(&kvm->stopping) || atomic_load(&kvm->paused)
					    ? CTL_ERR_STATE
					    : CTL_ERR_FAILED,
				    "%s: %s", s->name, err);
		else
			add_info(s, r);
		return false;
	case CTL_RESUME:
		/* -EBUSY: gdb holds the VM (pause.c), a state as "not paused" is. */
		if ((ret = kvm_resume(kvm, err, sizeof(err))) < 0)
			reply_error(r,
				    atomic_load(&kvm->paused) && ret != -EBUSY ? CTL_ERR_FAILED
									       : CTL_ERR_STATE,
				    "%s: %s", s->name, err);
		else
			add_info(s, r);
		return false;
	case CTL_DEBUG:
		debug_request(s, r);
		return false;
	case CTL_SNAPSHOT:
		snapshot_request(s, c, r);
		return false;
	case CTL_DUMP:
		dump_request(s, c, r);
		return false;
	default:
		reply_error(r, CTL_ERR_TYPE, "unknown request type %u (this lkvm knows 1 to %d)",
			    type, CTL_TYPE_MAX);
		return false;
	}
}

static void note_bad(struct ctl_server *s, const char *why)
{
	if (s->log_budget > 0) {
		s->log_budget--;
		pr_warn("control socket: %s%s", why,
			s->log_budget ? "" : " (further ones not logged)");
	}
}

static void close_conn(struct conn *c)
{
	u8 junk[4096];

	drop_passed(c);
	/* Closing a UNIX socket with unread bytes resets the connection, and the client would
	 * lose our reply: read off what a misbehaving client sent beyond its request first. */
	for (int i = 0; c->fd >= 0 && i < 16 && recv(c->fd, junk, sizeof(junk), MSG_DONTWAIT) > 0;
	     i++)
		;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->got = 0;
}

/* Send r on c (blocking, bounded by SO_SNDTIMEO) and close it, or keep it as a stop waiter. */
static void finish(struct ctl_server *s, struct conn *c, struct ctl_msg *r, bool keep)
{
	struct timeval tv = { .tv_sec = SEND_TIMEOUT_S };
	int fl = fcntl(c->fd, F_GETFL);

	drop_passed(c);
	if (fl >= 0)
		fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (ctl_send(c->fd, r) < 0)
		keep = false;
	ctl_msg_free(r);
	if (keep && s->nwaiters < MAX_WAITERS) {
		shutdown(c->fd, SHUT_RD);
		s->waiters[s->nwaiters++] = c->fd;
		c->fd = -1;
		c->got = 0;
		return;
	}
	close_conn(c);
}

/* header_refused: true, with the error reply in r, when the header h is one not served (ret:
 * what ctl_hdr_decode said of it). */
static bool header_refused(struct ctl_server *s, const struct ctl_hdr *h, int ret,
			   struct ctl_msg *r)
{
	if (ret == -EPROTO) {
		note_bad(s, "a request without the protocol's magic (not an lkvm client?)");
		reply_error(r, CTL_ERR_PROTO, "bad magic 0x%08x: not an lkvm control message",
			    h->magic);
		return true;
	}
	if (ret == -EPROTONOSUPPORT) {
		reply_error(r, CTL_ERR_VERSION,
			    "protocol version %u not supported (this lkvm speaks %d)", h->version,
			    CTL_VERSION);
		return true;
	}
	if (ret == -EMSGSIZE || h->status != 0) {
		note_bad(s, "a malformed request header");
		reply_error(r, CTL_ERR_PROTO,
			    h->status ? "a request must have status 0"
				      : "request payload of %u bytes: at most %d",
			    h->len, CTL_MAX_REQUEST);
		return true;
	}
	return false;
}

/* recv of what the request still lacks, keeping the first descriptor that comes with it
 * (lkvm snapshot's file); any other is closed at once, so a client cannot make the server
 * hold descriptors. */
static ssize_t recv_passing(struct conn *c, size_t want)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} ctrl;
	struct iovec iov = { c->buf + c->got, want - c->got };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = ctrl.buf,
			     .msg_controllen = sizeof(ctrl.buf) };
	ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	for (struct cmsghdr *cm = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm;
	     cm = CMSG_NXTHDR(&mh, cm)) {
		size_t nfd = cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS
				     ? (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int)
				     : 0;

		for (size_t i = 0; i < nfd; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (c->passed_fd < 0)
				c->passed_fd = fd;
			else
				close(fd);
		}
	}
	return n;
}

/*
 * CTL_GDB (`lkvm debug NAME --gdb`): the connection becomes a gdb client of the VM. The gdb
 * server serves a copy of it (gdb_vm_attach, which says why on this thread); the reply goes
 * first, then this thread's copy is closed without reading (close_conn would eat gdb's bytes,
 * and the socket stays open in the server's copy). A refusal is answered as any error.
 */
static void serve_gdb(struct ctl_server *s, struct conn *c, struct ctl_msg *r)
{
	char err[256] = "";
	int ret = gdb_vm_attach(s->kvm, c->fd, s->gdb_wake_fd, err, sizeof(err));

	if (ret < 0) {
		reply_error(r, ret == -EBUSY ? CTL_ERR_STATE : CTL_ERR_FAILED, "%s: %s", s->name,
			    err);
		finish(s, c, r, false);
		return;
	}
	ctl_add_str(r, "name", s->name);
	/* Nonblocking, as accepted: a reply this small fits the empty socket's buffer. */
	if (ctl_send(c->fd, r) < 0)
		note_bad(s, "a gdb client left before its reply (its session ends with it)");
	ctl_msg_free(r);
	close(c->fd);
	c->fd = -1;
	c->got = 0;
}

/* Read what is there; answer once a whole request arrived, or an error as soon as the header is bad. */
static void serve(struct ctl_server *s, struct conn *c)
{
	size_t want = CTL_HDR_LEN;
	struct ctl_hdr h;
	struct ctl_msg r;
	ssize_t n;
	int ret;

	/* A header in the buffer was checked when it completed (a bad one closed the connection),
	 * so its length is at most CTL_MAX_REQUEST and the request fits in buf. */
	if (c->got >= CTL_HDR_LEN && ctl_hdr_decode(c->buf, CTL_MAX_REQUEST, &h) == 0)
		want += h.len;

	n = recv_passing(c, want);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		if (c->got)
			note_bad(s, "a client disconnected in the middle of a request");
		close_conn(c);
		return;
	}
	c->got += (size_t)n;
	if (c->got < CTL_HDR_LEN)
		return;
	ret = ctl_hdr_decode(c->buf, CTL_MAX_REQUEST, &h);
	ctl_msg_init(&r, (u16)(h.type | CTL_REPLY), 0);
	if (header_refused(s, &h, ret, &r)) {
		finish(s, c, &r, false);
		return;
	}
	if (c->got < CTL_HDR_LEN + h.len)
		return; /* more to come (want grew with the header's length) */
	if (ctl_payload_check(c->buf + CTL_HDR_LEN, h.len) < 0) {
		note_bad(s, "a request with a malformed payload");
		reply_error(&r, CTL_ERR_PROTO,
			    "malformed payload (fields truncated or of unknown kind)");
		finish(s, c, &r, false);
		return;
	}
	if (h.type == CTL_GDB) {
		serve_gdb(s, c, &r);
		return;
	}
	finish(s, c, &r, handle(s, c, h.type, &r));
}

/* The user who started the VM, also after --user switched lkvm to another uid: the socket
 * is in that user's runtime directory, so USER could not reach it anyway. */
static bool peer_allowed(struct ctl_server *s, int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || len != sizeof(cr))
		return false;
	return cr.uid == s->owner;
}

/*
 * Out of descriptors (EMFILE: lkvm's table is full, a guest's 9p fids can do that; ENFILE:
 * the system's). The spare is given up for this one client, which is then served as any
 * other (a stop too, which keeps it until lkvm exits); without a spare, or if the accept
 * still fails, clients wait in the backlog and accept is tried again ACCEPT_BACKOFF_MS later.
 * Returns the client's descriptor or -1.
 */
static int accept_starved(struct ctl_server *s, int e)
{
	u64 now = now_ns();
	int fd = -1;

	if (e == EMFILE && s->spare_fd >= 0) {
		close(s->spare_fd);
		s->spare_fd = -1;
		fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd >= 0)
			return fd;
		e = errno;
		if (e != EMFILE && e != ENFILE)
			return -1;
	}
	s->accept_after = now + ACCEPT_BACKOFF_MS * 1000000ull;
	if (!s->starved_logged || now - s->starved_logged >= STARVED_LOG_S * 1000000000ull) {
		s->starved_logged = now;
		pr_warn("control socket: cannot accept a client: %s (lkvm is out of descriptors; raise ulimit -n); trying again every %d ms",
			strerror(e), ACCEPT_BACKOFF_MS);
	}
	return -1;
}

static void accept_one(struct ctl_server *s)
{
	int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	struct ctl_msg r;
	struct conn tmp;
	int slot = -1;

	if (fd < 0 && (errno == EMFILE || errno == ENFILE))
		fd = accept_starved(s, errno);
	if (fd < 0)
		return;
	tmp = (struct conn){ .fd = fd, .passed_fd = -1 };
	/* The socket is 0600 in a 0700 directory; this also turns away root and anyone who was
	 * handed an open connection. */
	if (!peer_allowed(s, fd)) {
		note_bad(s, "refused a client of another user");
		ctl_msg_init(&r, CTL_REPLY, CTL_ERR_PROTO);
		reply_error(&r, CTL_ERR_PROTO, "permission denied: only uid %u may control this VM",
			    (unsigned)s->owner);
		finish(s, &tmp, &r, false);
		return;
	}
	for (int i = 0; i < MAX_CONNS; i++)
		if (s->conn[i].fd < 0) {
			slot = i;
			break;
		}
	if (slot < 0) {
		ctl_msg_init(&r, CTL_REPLY, CTL_ERR_STATE);
		reply_error(&r, CTL_ERR_STATE, "busy: %d clients connected, try again", MAX_CONNS);
		finish(s, &tmp, &r, false);
		return;
	}
	s->conn[slot] = (struct conn){ .fd = fd,
				       .passed_fd = -1,
				       .deadline = now_ns() + CTL_REQUEST_TIMEOUT_MS * 1000000ull };
}

/* A client past its deadline: answered if a whole request came meanwhile, else closed. */
static void overdue(struct ctl_server *s, struct conn *c)
{
	size_t had;

	/* The deadline may have passed while this thread was busy (a pause or debug waits up to
	 * PARK_TIMEOUT_MS): what the client sent meanwhile is read first, and a whole request is
	 * answered, however late. */
	do {
		had = c->got;
		serve(s, c);
	} while (c->fd >= 0 && c->got != had);
	if (c->fd >= 0) {
		note_bad(s, "a client sent no whole request in time");
		close_conn(c);
	}
}

/* What the next poll waits for: p[0] the wake eventfd, p[1] the listening socket (or -1,
 * which poll ignores, while accept backs off), then the clients (map: their slots). Returns
 * the entries' count; *ms the timeout. */
static int poll_set(struct ctl_server *s, struct pollfd *p, int *map, int *ms)
{
	u64 now = now_ns();
	int np = 0;

	*ms = -1;
	p[np++] = (struct pollfd){ .fd = s->wake_fd, .events = POLLIN };
	p[np++] = (struct pollfd){ .fd = now >= s->accept_after ? s->listen_fd : -1,
				   .events = POLLIN };
	if (now < s->accept_after)
		*ms = (int)((s->accept_after - now) / 1000000 + 1);
	for (int i = 0; i < MAX_CONNS; i++) {
		struct conn *c = &s->conn[i];

		if (c->fd < 0)
			continue;
		if (now >= c->deadline) {
			overdue(s, c);
			continue;
		}
		map[np] = i;
		p[np++] = (struct pollfd){ .fd = c->fd, .events = POLLIN };
		*ms = (int)MIN((u64)(*ms < 0 ? INT_MAX : *ms), (c->deadline - now) / 1000000 + 1);
	}
	return np;
}

/*
 * lkvm is ending (ctl_server_stop woke this thread): the clients already queued on the socket
 * (a burst of `lkvm stop`s that came while lkvm was busy) are answered before it closes, not
 * reset. Each queued one is accepted and the whole request it sent is answered: a stop as a
 * waiter, or closed after its reply (its client then watches the process through a pidfd). A
 * client that has sent nothing yet is closed with the others at the end. Bounded by the
 * backlog: DRAIN_MAX rounds at most, never a wait.
 */
#define DRAIN_MAX (CTL_BACKLOG + 1 + MAX_CONNS)
static void drain(struct ctl_server *s)
{
	for (int n = 0; n < DRAIN_MAX; n++) {
		struct pollfd p = { .fd = s->listen_fd, .events = POLLIN };

		for (int i = 0; i < MAX_CONNS; i++)
			if (s->conn[i].fd >= 0)
				serve(s, &s->conn[i]);
		if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN))
			return;
		accept_one(s);
	}
}

static void *server_thread(void *arg)
{
	struct ctl_server *s = arg;

	pthread_setname_np(pthread_self(), "lkvm-ctl");
	if (sandbox_enter(s->kvm, SB_CTL) < 0) {
		kvm_request_exit(s->kvm, EXIT_LKVM_ERROR,
				 "control socket: cannot enter the sandbox");
		return NULL;
	}
	for (;;) {
		struct pollfd p[2 + MAX_CONNS];
		int map[2 + MAX_CONNS], np, ms;

		/* The spare back as soon as a descriptor is free (a client closed). */
		if (s->spare_fd < 0)
			s->spare_fd = fcntl(s->wake_fd, F_DUPFD_CLOEXEC, 0);
		np = poll_set(s, p, map, &ms);
		if (poll(p, (nfds_t)np, ms) < 0 && errno != EINTR)
			break;
		if (p[0].revents) {
			drain(s);
			break;
		}
		for (int i = 2; i < np; i++)
			if (p[i].revents)
				serve(s, &s->conn[map[i]]);
		if (p[1].revents & POLLIN)
			accept_one(s);
	}
	/* Clients still in the middle of a request are closed here, where reading off their
	 * bytes first (close_conn) is allowed: ctl_server_destroy runs on main, whose filter has
	 * no recvfrom. */
	for (int i = 0; i < MAX_CONNS; i++)
		close_conn(&s->conn[i]);
	return NULL;
}

int ctl_server_start(struct ctl_server *s)
{
	int ret = thread_start_nosig(&s->thread, server_thread, s);

	if (ret < 0)
		return ret;
	s->started = true;
	return 0;
}

void ctl_server_stop(struct ctl_server *s)
{
	if (!s || !s->started)
		return;
	if (eventfd_write(s->wake_fd, 1) < 0)
		pr_err("control socket: cannot wake its thread"); /* cannot happen */
	pthread_join(s->thread, NULL);
	s->started = false;
}

void ctl_server_destroy(struct ctl_server *s)
{
	if (!s)
		return;
	ctl_server_stop(s); /* its thread closed the clients in the middle of a request */
	if (s->cleaner_fd >= 0) {
		/* The helper removes the socket and lock (see cleaner_main) and exits. */
		close(s->cleaner_fd);
		while (waitpid(s->cleaner, NULL, 0) < 0 && errno == EINTR)
			;
	} else if (s->lock_fd >= 0) {
		/* Set-up failed before the helper started: still ours to remove, unfiltered. */
		if (s->listen_fd >= 0)
			unlink(s->sock_path);
		/* Unlinked while still held: a VM starting now locks a new file (see take_lock). */
		unlink(s->lock_path);
	}
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	if (s->spare_fd >= 0)
		close(s->spare_fd);
	if (s->gdb_wake_fd >= 0)
		close(s->gdb_wake_fd);
	/* Last: `lkvm stop` clients see EOF only once everything above is done. */
	for (int i = 0; i < s->nwaiters; i++)
		close(s->waiters[i]);
	free(s);
}

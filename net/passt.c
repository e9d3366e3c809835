/* The user-mode backend: frames to and from passt over QEMU's stream protocol; passt started by lkvm or found at socket=PATH. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/virtio_net.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lkvm/iov.h"
#include "lkvm/net-stream.h"
#include "lkvm/net.h"
#include "lkvm/sandbox.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

extern char **environ;

/* How long a frame the socket took only part of may hold the TX thread, and how long
 * teardown waits for passt to leave once its socket is closed, before SIGKILL. */
#define TX_REST_WAIT_MS 100
#define EXIT_WAIT_MS 2000
/* Room for a burst of whole frames on lkvm's side of the socket (best effort: the kernel
 * caps it at net.core.wmem_max): a frame that fits whole is never cut. */
#define SOCK_SNDBUF (1 << 20)
/* How long passt may take to say it is ready (its pid file written) before lkvm goes on
 * without knowing; what passt writes to its stderr is kept up to STDERR_KEEP bytes. */
#define READY_WAIT_MS 10000
#define STDERR_KEEP (64 << 10)

struct passt {
	int fd;
	pid_t pid; /* passt's pid, -1 when lkvm did not start it (socket=PATH, tests) */
	int pidfd; /* its pidfd, -1 likewise */
	struct net_stream_rx rx;   /* the RX thread's */
	struct net_stream_tx tx;   /* the TX thread's */
	struct iovec txv[IOV_MAX]; /* the TX thread's: a chain's frame without the header */
};

static struct passt *to_passt(struct net_backend *be)
{
	return be->priv;
}

/* The stream ended with r: what virtio-net reads as the backend gone (link down). The causes
 * net/stream.c names are kept for the message; a socket's own error becomes a reset. */
static ssize_t ended(ssize_t r)
{
	if (r == -EAGAIN || r == -EPIPE || r == -EPROTO || r == -EMSGSIZE || r == -ECONNRESET)
		return r;
	return -ECONNRESET;
}

/* The frame of a chain whose first NET_VNET_HDR_LEN bytes are the header: the iovecs
 * after it, in p->txv. Returns their count. */
static int skip_header(struct passt *p, const struct iovec *iov, int cnt)
{
	size_t skip = NET_VNET_HDR_LEN;
	int n = 0;

	for (int i = 0; i < cnt && n < IOV_MAX; i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		p->txv[n].iov_base = (u8 *)iov[i].iov_base + skip;
		p->txv[n].iov_len = iov[i].iov_len - skip;
		skip = 0;
		n++;
	}
	return n;
}

static ssize_t passt_send(struct net_backend *be, const struct iovec *iov, int iovcnt)
{
	struct passt *p = to_passt(be);
	struct virtio_net_hdr_v1 h;
	size_t total = iov_length(iov, iovcnt), len;
	ssize_t r;
	int n;

	/* No offload was offered (plain_frames): a header asking for one is a guest's bug,
	 * and passt would get a frame with a wrong checksum or a giant segment. */
	if (total <= sizeof(h) || iov_from(iov, iovcnt, 0, &h, sizeof(h)) != sizeof(h) || h.flags ||
	    h.gso_type != VIRTIO_NET_HDR_GSO_NONE)
		return -EINVAL;
	len = total - sizeof(h);
	n = skip_header(p, iov, iovcnt);
	r = net_stream_tx_send(&p->tx, p->fd, p->txv, n, len);
	if (r == -EMSGSIZE && !p->tx.err)
		return -EINVAL; /* too long for the stream: this frame is dropped, the link stays */
	if (r < 0)
		return ended(r);
	/* The socket took part of the frame: finish it now if passt reads soon, so the last
	 * frame of a burst does not wait for the next one. Bounded: a passt that stops reading
	 * cannot hold the TX thread (the rest then goes first on the next send). */
	if (net_stream_tx_pending(&p->tx)) {
		u64 end = now_ns() + TX_REST_WAIT_MS * 1000000ull;
		struct pollfd pf = { .fd = p->fd, .events = POLLOUT };
		int f;

		while ((f = net_stream_tx_flush(&p->tx, p->fd)) == -EAGAIN) {
			u64 t = now_ns();

			if (t >= end || poll(&pf, 1, (int)((end - t) / 1000000ull) + 1) < 0)
				break;
		}
		if (f < 0 && f != -EAGAIN)
			return ended(f);
	}
	return (ssize_t)total;
}

static ssize_t passt_recv(struct net_backend *be, const struct iovec *iov, int iovcnt)
{
	struct passt *p = to_passt(be);
	struct virtio_net_hdr_v1 h = { .gso_type = VIRTIO_NET_HDR_GSO_NONE };
	ssize_t r = net_stream_rx_read(&p->rx, p->fd);
	size_t got;

	if (r == 0)
		return -EAGAIN;
	if (r < 0)
		return ended(r);
	/* A plain frame: no checksum to complete, no segments; num_buffers is the device's. */
	got = iov_to(iov, iovcnt, 0, &h, sizeof(h));
	if (got == sizeof(h))
		got += iov_to(iov, iovcnt, sizeof(h), net_stream_rx_frame(&p->rx), (size_t)r);
	net_stream_rx_next(&p->rx);
	return (ssize_t)got;
}

static ssize_t passt_peek_len(struct net_backend *be)
{
	struct passt *p = to_passt(be);
	ssize_t r = net_stream_rx_read(&p->rx, p->fd);

	return r > 0 ? r + NET_VNET_HDR_LEN : r == 0 ? 0 : ended(r);
}

/* Reap passt: it leaves by itself once its socket is closed (--fd implies one-off); one that
 * does not within EXIT_WAIT_MS is killed where lkvm may signal it, else left running (never
 * waited for without end). Only ever through its pidfd: never a pid that may have been reused. */
static void stop_passt(struct passt *p)
{
	struct pollfd pf = { .fd = p->pidfd, .events = POLLIN };
	siginfo_t si;
	int r;

	do
		r = poll(&pf, 1, EXIT_WAIT_MS);
	while (r < 0 && errno == EINTR);
	if (r == 0) {
		pr_warn("passt (pid %d) still runs %d ms after its socket closed: killing it",
			(int)p->pid, EXIT_WAIT_MS);
		/* A root lkvm's passt runs as nobody, and lkvm has dropped CAP_KILL: the kill is
		 * refused. Waiting for it would let a passt that never leaves hold lkvm's exit
		 * forever; it is left to the kernel (reparented when lkvm exits) instead. */
		if (syscall(SYS_pidfd_send_signal, p->pidfd, SIGKILL, NULL, 0) < 0) {
			pr_warn("passt (pid %d) cannot be killed by lkvm (%s): left running",
				(int)p->pid, strerror(errno));
			close(p->pidfd);
			return;
		}
	}
	memset(&si, 0, sizeof(si));
	do
		r = waitid(P_PIDFD, (id_t)p->pidfd, &si, WEXITED);
	while (r < 0 && errno == EINTR);
	/* One line either way: a test (and a user with --debug) can tell passt was reaped. */
	if (r < 0)
		pr_warn("passt (pid %d): waitid: %s", (int)p->pid, strerror(errno));
	else
		pr_debug("passt (pid %d) reaped: %s %d", (int)p->pid,
			 si.si_code == CLD_EXITED ? "exited with status" : "killed by signal",
			 si.si_status);
	close(p->pidfd);
}

static void passt_close(struct net_backend *be)
{
	struct passt *p;

	if (!be)
		return;
	p = to_passt(be);
	if (p) {
		if (p->fd >= 0)
			close(p->fd);
		if (p->pidfd >= 0)
			stop_passt(p);
		net_stream_rx_free(&p->rx);
		net_stream_tx_free(&p->tx);
		free(p);
	}
	free(be);
}

static const struct net_backend_ops passt_ops = {
	.name = "passt",
	.send = passt_send,
	.recv = passt_recv,
	.peek_len = passt_peek_len,
	.close = passt_close,
};

/* The backend over fd (a connected stream socket; owned from here, closed on failure too),
 * for passt's pid/pidfd when lkvm started it. */
static int stream_backend(int fd, pid_t pid, int pidfd, const char *name, struct net_backend **out)
{
	struct net_backend *be = calloc(1, sizeof(*be));
	struct passt *p = calloc(1, sizeof(*p));
	int fl = fcntl(fd, F_GETFL), sndbuf = SOCK_SNDBUF;

	*out = NULL;
	if (!be || !p || net_stream_rx_init(&p->rx) < 0 || net_stream_tx_init(&p->tx) < 0) {
		if (p) {
			net_stream_rx_free(&p->rx);
			net_stream_tx_free(&p->tx);
		}
		free(p);
		free(be);
		close(fd);
		return -ENOMEM;
	}
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		int e = errno;

		net_stream_rx_free(&p->rx);
		net_stream_tx_free(&p->tx);
		free(p);
		free(be);
		close(fd);
		return -e;
	}
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)); /* best effort */
	p->fd = fd;
	p->pid = pid;
	p->pidfd = pidfd;
	be->ops = &passt_ops;
	be->rx_fd = be->tx_fd = fd;
	be->plain_frames = true;
	be->priv = p;
	snprintf(be->ifname, sizeof(be->ifname), "%s", name);
	*out = be;
	return 0;
}

int net_stream_backend(int fd, struct net_backend **out)
{
	return stream_backend(fd, -1, -1, "stream", out);
}

/* passt's path from $PATH, so a missing one is said before anything starts. */
static int find_passt(char *path, size_t len)
{
	const char *env = getenv("PATH");
	const char *dirs = env && *env ? env : "/usr/local/bin:/usr/bin:/bin";

	while (*dirs) {
		const char *end = strchr(dirs, ':');
		size_t dl = end ? (size_t)(end - dirs) : strlen(dirs);

		if (dl && (size_t)snprintf(path, len, "%.*s/passt", (int)dl, dirs) < len &&
		    access(path, X_OK) == 0)
			return 0;
		dirs += dl + (end ? 1 : 0);
	}
	return -ENOENT;
}

/* passt's start-up: its stderr in a memfd sealed at STDERR_KEEP bytes (passt's writes beyond
 * fail, never block: nobody reads it once passt runs), and a FIFO as its --pid file, which
 * passt writes once it is set up. */
struct passt_start {
	char dir[64], fifo[80];
	int fifo_fd, err_fd;
	const struct net_opts *o; /* its fwd= become passt's -t and -u */
};

static void start_end(struct passt_start *st)
{
	if (st->fifo_fd >= 0)
		close(st->fifo_fd);
	if (st->err_fd >= 0)
		close(st->err_fd);
	if (st->fifo[0])
		unlink(st->fifo);
	if (st->dir[0])
		rmdir(st->dir);
}

static int start_prepare(struct passt_start *st)
{
	const char *tmp = getenv("TMPDIR");

	*st = (struct passt_start){ .fifo_fd = -1, .err_fd = -1 };
	st->err_fd = memfd_create("passt-stderr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (st->err_fd < 0 || ftruncate(st->err_fd, STDERR_KEEP) < 0 ||
	    fcntl(st->err_fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK) < 0)
		return -errno;
	snprintf(st->dir, sizeof(st->dir), "%s/lkvm-passt-XXXXXX",
		 tmp && *tmp == '/' && strlen(tmp) < 40 ? tmp : "/tmp");
	if (!mkdtemp(st->dir)) {
		st->dir[0] = '\0';
		return -errno;
	}
	snprintf(st->fifo, sizeof(st->fifo), "%s/ready", st->dir);
	/* A root lkvm's passt writes it as nobody. */
	if (chmod(st->dir, 0711) < 0 || mkfifo(st->fifo, 0600) < 0 || chmod(st->fifo, 0622) < 0)
		return -errno;
	st->fifo_fd = open(st->fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	return st->fifo_fd < 0 ? -errno : 0;
}

/* passt's stderr as one line: its messages joined by "; ", without the noise of a passt
 * that cannot reach syslog. */
static void stderr_line(int fd, char *out, size_t len)
{
	static char buf[STDERR_KEEP + 1];
	ssize_t n = pread(fd, buf, STDERR_KEEP, 0);
	size_t o = 0;

	out[0] = '\0';
	buf[n > 0 ? n : 0] = '\0';
	for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l && o + 3 < len;
	     l = strtok_r(NULL, "\n", &save)) {
		if (!*l || (!strncmp(l, "Failed to send ", 15) && strstr(l, "syslog")))
			continue;
		o += (size_t)snprintf(out + o, len - o, "%s%s", o ? "; " : "", l);
	}
	if (!out[0])
		snprintf(out, len, "no message");
}

/* Waits until passt is set up (its pid in the FIFO) or gone: gone is the error, with passt's
 * own words (e.g. "No external routable interface for IPv4" on a host without a route). */
static int start_wait(struct passt_start *st, pid_t pid, int pidfd, char *err, size_t errlen)
{
	struct pollfd pf[2] = { { .fd = pidfd, .events = POLLIN },
				{ .fd = st->fifo_fd, .events = POLLIN } };
	char why[512], c;
	siginfo_t si = { 0 };
	int r;

	do
		r = poll(pf, 2, READY_WAIT_MS);
	while (r < 0 && errno == EINTR);
	/* Its pid there: set up, even if it is gone already (that is the link's end, later). The
	 * FIFO closed empty: passt is leaving; its exit is waited for below. */
	if (r > 0 && (pf[1].revents & (POLLIN | POLLHUP))) {
		if (read(st->fifo_fd, &c, 1) == 1)
			return 0;
		do
			r = poll(pf, 1, READY_WAIT_MS);
		while (r < 0 && errno == EINTR);
	}
	if (r == 0)
		pr_warn("passt (pid %d) not ready after %d ms: going on", (int)pid, READY_WAIT_MS);
	if (r <= 0 || !(pf[0].revents & POLLIN))
		return 0;
	waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED);
	stderr_line(st->err_fd, why, sizeof(why));
	if (si.si_code == CLD_EXITED)
		errfmt(err, errlen, "-n mode=user: passt could not start (status %d): %s",
		       si.si_status, why);
	else
		errfmt(err, errlen, "-n mode=user: passt could not start (signal %d): %s",
		       si.si_status, why);
	return -ECHILD;
}

/* passt's options, --runas for root, two words per forward (-t|-u SPEC), the NULL. */
#define PASST_ARGV_MAX (7 + 2 + 2 * NET_MAX_FWDS + 1)
static void passt_argv(const struct passt_start *st, char *argv[PASST_ARGV_MAX])
{
	static const char *const base[] = {
		"passt", "--foreground", "--quiet", "--fd", "3", "--pid"
	};
	int argc = 0;

	for (size_t i = 0; i < ARRAY_SIZE(base); i++)
		argv[argc++] = (char *)base[i];
	argv[argc++] = (char *)st->fifo;
	if (geteuid() == 0) {
		/* passt refuses to keep root; say which user it becomes. */
		argv[argc++] = "--runas";
		argv[argc++] = "nobody";
	}
	for (int i = 0; i < st->o->nr_fwds; i++) {
		argv[argc++] = st->o->fwd[i].udp ? "-u" : "-t";
		argv[argc++] = (char *)st->o->fwd[i].spec;
	}
	argv[argc] = NULL;
}

/*
 * Start `passt --foreground --quiet --fd 3` on the other end of a socket pair. passt leaves
 * when that socket closes (--fd implies one-off): lkvm's end is closed at teardown, or by the
 * kernel when lkvm dies however it dies. PR_SET_PDEATHSIG is a second line for an unprivileged
 * passt (a root lkvm's passt changes to nobody, which clears it). The child makes only
 * async-signal-safe calls before execve: lkvm may already have threads.
 */
static int spawn_passt(int child_fd, const struct passt_start *st, pid_t *pidp, int *pidfdp,
		       char *err, size_t errlen)
{
	char path[PATH_MAX];
	char *argv[PASST_ARGV_MAX];
	pid_t parent = getpid(), pid;
	sigset_t none;
	int pidfd, e;

	if (find_passt(path, sizeof(path)) < 0) {
		errfmt(err, errlen,
		       "-n mode=user: passt is not in PATH (Debian: apt install passt)");
		return -ENOENT;
	}
	passt_argv(st, argv);
	sigemptyset(&none);
	pid = fork();
	if (pid < 0) {
		e = errno;
		errfmt(err, errlen, "-n mode=user: fork: %s", strerror(e));
		return -e;
	}
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127); /* lkvm died before the line above */
		if (child_fd == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(child_fd, 3) < 0)
			_exit(127);
		if (dup2(st->err_fd, 2) < 0)
			_exit(127);
		syscall(SYS_close_range, 4, ~0U, 0);
		/* lkvm's blocked signals (its signalfd's) and ignored SIGPIPE are not passt's. */
		signal(SIGPIPE, SIG_DFL);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execve(path, argv, environ);
		_exit(127);
	}
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0) {
		e = errno;
		kill(pid, SIGKILL); /* our unreaped child: the pid cannot have been reused */
		waitpid(pid, NULL, 0);
		errfmt(err, errlen, "-n mode=user: pidfd_open: %s", strerror(e));
		return -e;
	}
	*pidp = pid;
	*pidfdp = pidfd;
	return 0;
}

/* passt started on child_fd and set up, or an error naming why it could not start. */
static int passt_start(const struct net_opts *o, int child_fd, pid_t *pid, int *pidfd, char *err,
		       size_t errlen)
{
	struct passt_start st;
	int ret = start_prepare(&st);

	st.o = o;
	if (ret < 0) {
		errfmt(err, errlen, "-n mode=user: passt's start-up files: %s", strerror(-ret));
		start_end(&st);
		return ret;
	}
	ret = spawn_passt(child_fd, &st, pid, pidfd, err, errlen);
	if (!ret) {
		ret = start_wait(&st, *pid, *pidfd, err, errlen);
		if (ret < 0)
			close(*pidfd); /* reaped by start_wait */
	}
	start_end(&st);
	return ret;
}

static int connect_passt(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, e;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		errfmt(err, errlen, "-n socket: path longer than %zu bytes",
		       sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		e = errno;
		errfmt(err, errlen, "-n socket=%s: socket: %s", path, strerror(e));
		return -e;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		e = errno;
		close(fd);
		errfmt(err, errlen,
		       "-n socket=%s: cannot connect: %s (is passt --socket %s running?)", path,
		       strerror(e), path);
		return -e;
	}
	return fd;
}

int net_passt_open(const struct net_opts *o, struct net_backend **be, int n, char *err,
		   size_t errlen)
{
	char name[sizeof(be[0]->ifname)];
	pid_t pid = -1;
	int fd, pidfd = -1, ret;

	if (err && errlen)
		err[0] = '\0';
	if (o->mode != NET_MODE_USER || n != 1) {
		errfmt(err, errlen, "passt: bad request (mode %d, %d queue pairs)", o->mode, n);
		return -EINVAL;
	}
	be[0] = NULL;
	if (o->socket[0]) {
		fd = connect_passt(o->socket, err, errlen);
		if (fd < 0)
			return fd;
		snprintf(name, sizeof(name), "socket");
	} else {
		int sv[2];

		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
			ret = -errno;
			errfmt(err, errlen, "-n mode=user: socketpair: %s", strerror(-ret));
			return ret;
		}
		ret = passt_start(o, sv[1], &pid, &pidfd, err, errlen);
		close(sv[1]);
		if (ret < 0) {
			close(sv[0]);
			return ret;
		}
		fd = sv[0];
		snprintf(name, sizeof(name), "pid %d", (int)pid);
		pr_debug("passt started (pid %d)", (int)pid);
	}
	ret = stream_backend(fd, pid, pidfd, name, &be[0]);
	if (ret < 0) {
		errfmt(err, errlen, "-n mode=user: %s", strerror(-ret));
		if (pidfd >= 0) {
			struct passt p = { .pid = pid, .pidfd = pidfd };

			stop_passt(&p); /* its socket is closed: it leaves */
		}
		return ret;
	}
	/* The net threads' filters allow readv/writev on this socket (sandbox.c). */
	ret = sandbox_allow_net_fd(fd);
	if (ret < 0) {
		errfmt(err, errlen, "-n mode=user: sandbox: %s", strerror(-ret));
		passt_close(be[0]);
		be[0] = NULL;
	}
	return ret;
}

/* The gdb server: its listening socket, the thread that serves one client at a time, and the VM's stops (all-stop). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>

#include "server-priv.h"

/* A reply gdb does not take within this long: the client is stuck or hostile; drop it. */
#define SEND_TIMEOUT_MS 5000

/* ---- sending ---- */

static void send_bytes(struct gdb_server *s, const char *buf, size_t len)
{
	while (len && !s->broken) {
		struct pollfd p = { .fd = s->client_fd, .events = POLLOUT };
		ssize_t n = send(s->client_fd, buf, len, MSG_NOSIGNAL);

		if (n > 0) {
			buf += n;
			len -= (size_t)n;
		} else if (n < 0 && errno == EINTR) {
			continue;
		} else if (n < 0 && errno == EAGAIN) {
			if (poll(&p, 1, SEND_TIMEOUT_MS) <= 0)
				s->broken = true;
		} else {
			s->broken = true;
		}
	}
}

/* s->reply, framed; kept for a resend when gdb answers '-'. */
static void send_reply(struct gdb_server *s)
{
	s->frame_len = gdb_frame(s->reply, s->reply_len, s->frame, sizeof(s->frame));
	send_bytes(s, s->frame, s->frame_len);
}

/* ---- stops ---- */

bool gdb_take_pending(struct gdb_server *s, struct gdb_stop *st)
{
	bool had;

	pthread_mutex_lock(&s->lock);
	had = s->has_pending;
	if (had)
		*st = s->pending;
	s->has_pending = false;
	pthread_mutex_unlock(&s->lock);
	return had;
}

static void stop_all(struct gdb_server *s)
{
	int ret = s->ops->stop_all(s->ctx);

	if (ret < 0)
		pr_warn_rl(&s->rl, "gdb: cannot stop the VM: %s", strerror(-ret));
}

/* The VM stopped (every vCPU is stopped by now), gdb is told, and the stopped thread is the
 * one later commands act on. */
static void report_stop(struct gdb_server *s, const struct gdb_stop *st)
{
	s->running = false;
	s->last = *st;
	s->g_thread = s->c_thread = st->thread;
	gdb_count_stop(s, st);
	gdb_stop_reply(s, st);
	send_reply(s);
}

/* Wake-up: a stop to report, if gdb is waiting for one; else it waits, pending, for the
 * attach (which reports it) or the next resume (which drops it, or reports the VM's end). */
static void on_wake(struct gdb_server *s)
{
	struct gdb_stop st;

	eventfd_drain(s->wake_fd);
	if (s->client_fd >= 0 && s->running && gdb_take_pending(s, &st)) {
		/* One vCPU stopped by itself: all-stop stops the rest (an ended VM has none left
		 * to stop: its vCPU threads are gone and a pause is refused). */
		if (st.reason != GDB_STOP_EXITED)
			stop_all(s);
		report_stop(s, &st);
	}
}

/* gdb's Ctrl-C while the VM runs. A stop the VM reported meanwhile is the better answer. */
static void on_interrupt(struct gdb_server *s)
{
	struct gdb_stop st = { .reason = GDB_STOP_INTERRUPT, .thread = s->last.thread };

	if (!s->running)
		return;
	stop_all(s);
	gdb_take_pending(s, &st);
	report_stop(s, &st);
}

void gdb_server_notify_stop(struct gdb_server *s, const struct gdb_stop *st)
{
	pthread_mutex_lock(&s->lock);
	/* All-stop reports one stop: the first, unless the VM has ended since. */
	if (!s->has_pending || st->reason == GDB_STOP_EXITED) {
		s->pending = *st;
		s->has_pending = true;
	}
	pthread_mutex_unlock(&s->lock);
	if (eventfd_write(s->wake_fd, 1) < 0)
		pr_err("gdb: cannot wake the server's thread"); /* cannot happen */
}

void gdb_server_get_stats(struct gdb_server *s, struct gdb_server_stats *out)
{
	out->stops = atomic_load(&s->stops);
	out->breakpoints_hit = atomic_load(&s->breakpoints_hit);
	out->steps = atomic_load(&s->steps);
	out->packets = atomic_load(&s->packets);
	out->bad_packets = atomic_load(&s->bad_packets);
	out->clients = atomic_load(&s->clients);
}

/* ---- the client ---- */

/* The client is gone (D, k, or it vanished: then it is a detach, so the VM runs on). A client
 * that vanished while the VM ran is detached from a stopped VM, as the ops want. An attach_fd
 * server has served its one client: its thread ends. */
static void drop_client(struct gdb_server *s, bool detach)
{
	if (detach && s->session) {
		if (s->running)
			stop_all(s);
		s->ops->detach(s->ctx);
	}
	close(s->client_fd);
	s->client_fd = -1;
	s->running = false;
	s->broken = false;
	s->session = false;
	if (s->one_shot) {
		pthread_mutex_lock(&s->lock);
		s->quit = true;
		pthread_mutex_unlock(&s->lock);
	}
}

/* A client connected: nothing of its session yet. */
static void client_init(struct gdb_server *s, int fd)
{
	s->client_fd = fd;
	gdb_rx_init(&s->rx);
	s->no_ack = false;
	s->frame_len = 0;
	s->next_info = 0;
	s->session = false;
}

/* The client's session begins: the VM stops, and what stopped it is what '?' will answer. */
static void session_begin(struct gdb_server *s)
{
	struct gdb_stop st = { .reason = GDB_STOP_INTERRUPT, .thread = 1 };

	s->session = true;
	atomic_fetch_add(&s->clients, 1);
	stop_all(s);
	gdb_take_pending(s, &st);
	s->last = st;
	s->g_thread = s->c_thread = st.thread;
	/* Counted now: gdb hears of it through '?'. */
	gdb_count_stop(s, &st);
}

static void accept_client(struct gdb_server *s)
{
	int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return;
	if (s->client_fd >= 0) {
		/* One gdb at a time: the second is closed at once. */
		pr_info_rl(&s->rl, "gdb: refused a second client (one is attached)");
		close(fd);
		return;
	}
	client_init(s, fd);
	session_begin(s);
}

/* One good packet: acked, parsed, answered. Returns false when the client is to go. */
static bool on_packet(struct gdb_server *s)
{
	struct gdb_cmd cmd;
	enum gdb_after after;

	atomic_fetch_add(&s->packets, 1);
	if (!s->no_ack)
		send_bytes(s, "+", 1);
	if (s->running) {
		/* All-stop: gdb waits for the stop and sends only its Ctrl-C meanwhile. */
		pr_info_rl(&s->rl, "gdb: a packet while the VM runs: ignored");
		return true;
	}
	gdb_parse(s->rx.buf, s->rx.len, &cmd);
	after = gdb_command(s, &cmd);
	if (after == GDB_REPLY || after == GDB_REPLY_CLOSE)
		send_reply(s);
	if (after == GDB_CLOSE || after == GDB_REPLY_CLOSE) {
		drop_client(s, false);
		return false;
	}
	return true;
}

static bool on_event(struct gdb_server *s, enum gdb_rx_event ev)
{
	switch (ev) {
	case GDB_RX_PACKET:
		return on_packet(s);
	case GDB_RX_BAD:
		atomic_fetch_add(&s->bad_packets, 1);
		pr_info_rl(&s->rl, "gdb: a bad packet (checksum, or over %d bytes)",
			   GDB_PACKET_MAX);
		if (!s->no_ack)
			send_bytes(s, "-", 1);
		return true;
	case GDB_RX_NAK:
		if (!s->no_ack && s->frame_len)
			send_bytes(s, s->frame, s->frame_len);
		return true;
	case GDB_RX_INTERRUPT:
		on_interrupt(s);
		return true;
	default:
		return true;
	}
}

/* What the client sent, in one bounded read; its end (or an error) is a detach. */
static void on_client(struct gdb_server *s)
{
	u8 in[4096];
	ssize_t n = recv(s->client_fd, in, sizeof(in), 0);
	size_t off = 0;

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		drop_client(s, true);
		return;
	}
	if (!s->session)
		session_begin(s); /* attach_fd: gdb's first byte */
	while (off < (size_t)n) {
		enum gdb_rx_event ev;

		off += gdb_rx_feed(&s->rx, in + off, (size_t)n - off, &ev);
		if (!on_event(s, ev))
			return;
		if (s->broken) {
			drop_client(s, true);
			return;
		}
	}
}

static bool quitting(struct gdb_server *s)
{
	bool q;

	pthread_mutex_lock(&s->lock);
	q = s->quit;
	pthread_mutex_unlock(&s->lock);
	return q;
}

static void *server_thread(void *arg)
{
	struct gdb_server *s = arg;

	pthread_setname_np(pthread_self(), "lkvm-gdb");
	if (s->ops->thread_start && s->ops->thread_start(s->ctx) != 0)
		return NULL;
	while (!quitting(s)) {
		struct pollfd p[3] = {
			{ .fd = s->wake_fd, .events = POLLIN },
			{ .fd = s->listen_fd, .events = POLLIN },
			{ .fd = s->client_fd, .events = POLLIN },
		};

		if (poll(p, s->client_fd >= 0 ? 3 : 2, -1) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			on_wake(s);
		if (s->client_fd >= 0 && p[2].revents)
			on_client(s);
		if (p[1].revents)
			accept_client(s);
		if (s->client_fd >= 0 && s->broken)
			drop_client(s, true);
	}
	/* The VM's end, notified just before gdb_server_stop, still reaches a waiting gdb even
	 * when the quit was seen first. */
	on_wake(s);
	atomic_store(&s->ended, true);
	return NULL;
}

/* ---- the address ---- */

/*
 * A unix socket's mode can be set only through its path (fchmod on the socket does not reach
 * the file it binds, and Linux has no fchmodat(AT_SYMLINK_NOFOLLOW) for it), a chmod of PATH
 * follows whatever another user who can write PATH's directory put there after the bind, and
 * a umask taken around bind is the whole process's: right only while no other thread makes a
 * file, which this library cannot know of its callers (lkvm run, lkvm debug). So the
 * socket is bound in a fresh directory of ours beside PATH (mkdtemp: mode 0700, the same file
 * system), reached only through its descriptor (/proc/self/fd/N, never its name again), where
 * nobody else can put anything: its mode is set there, then it is linked to PATH, which neither
 * follows nor replaces anything at PATH (a symlink there: EEXIST), and its first name removed.
 */
static int private_dir(const char *path, char *tmp, size_t len)
{
	const char *slash = strrchr(path, '/');
	struct stat st;
	int dfd, n;

	if (!slash)
		n = snprintf(tmp, len, ".lkvm-gdb-XXXXXX");
	else
		n = snprintf(tmp, len, "%.*s/.lkvm-gdb-XXXXXX", (int)(slash - path), path);
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	if (!mkdtemp(tmp))
		return -errno;
	dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	/* Still the directory mkdtemp made, not one put in its place: ours, 0700. */
	if (dfd >= 0 &&
	    (fstat(dfd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 07777) != 0700)) {
		close(dfd);
		dfd = -EPERM;
	} else if (dfd < 0) {
		dfd = -errno;
	}
	if (dfd < 0)
		rmdir(tmp);
	return dfd;
}

/* Bind *fd in the private directory dfd as "s", mode 0600, and link it to path. */
static int bind_private(int fd, int dfd, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int ret = 0;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/s", dfd);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	if (fchmodat(dfd, "s", 0600, 0) < 0 || linkat(dfd, "s", AT_FDCWD, path, 0) < 0)
		ret = -errno;
	unlinkat(dfd, "s", 0);
	return ret;
}

/* A socket already at path: a live one or anything else refused, a stale one removed. */
static int clear_stale(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, live;

	if (lstat(path, &st) < 0)
		return 0;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	live = fd >= 0 && S_ISSOCK(st.st_mode) &&
	       (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno != ECONNREFUSED);
	if (fd >= 0)
		close(fd);
	if (!S_ISSOCK(st.st_mode) || live) {
		errfmt(err, errlen, "gdb: %s exists%s", path,
		       S_ISSOCK(st.st_mode) ? " and is in use" : " and is not a socket");
		return -EADDRINUSE;
	}
	unlink(path); /* a stale socket: nobody listens */
	return 0;
}

static int listen_unix(int *fd_out, char *path_out, const char *path, char *err, size_t errlen)
{
	char tmp[sizeof(((struct sockaddr_un *)0)->sun_path) + 32];
	int dfd, ret;

	if (!*path || strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		errfmt(err, errlen, "gdb: bad unix socket path '%s'", path);
		return -EINVAL;
	}
	ret = clear_stale(path, err, errlen);
	if (ret < 0)
		return ret;
	*fd_out = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (*fd_out < 0)
		return -errno;
	dfd = private_dir(path, tmp, sizeof(tmp));
	ret = dfd < 0 ? dfd : bind_private(*fd_out, dfd, path);
	if (dfd >= 0) {
		close(dfd);
		rmdir(tmp); /* empty now; by name, which at worst removes another empty one */
	}
	if (ret < 0) {
		errfmt(err, errlen, "gdb: cannot listen on %s: %s%s", path, strerror(-ret),
		       ret == -EEXIST ? " (something was put there meanwhile)" : "");
		return ret;
	}
	strcpy(path_out, path);
	return 0;
}

/* "PORT" (loopback) or "HOST:PORT" ("[v6]:PORT" too) into host and port. */
static int split_host_port(const char *addr, char *host, size_t hostlen, char *port, size_t portlen)
{
	const char *colon = strrchr(addr, ':'), *p = colon ? colon + 1 : addr;
	size_t hl = colon ? (size_t)(colon - addr) : 0;
	char *end;
	unsigned long v;

	if (!colon) {
		snprintf(host, hostlen, "127.0.0.1");
	} else {
		if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') {
			addr++;
			hl -= 2;
		}
		if (!hl || hl >= hostlen)
			return -EINVAL;
		memcpy(host, addr, hl);
		host[hl] = '\0';
	}
	errno = 0;
	v = strtoul(p, &end, 10);
	if (!*p || *p == '-' || *p == '+' || *end || errno || v == 0 || v > 65535 ||
	    strlen(p) >= portlen)
		return -EINVAL;
	snprintf(port, portlen, "%lu", v);
	return 0;
}

static int listen_tcp(int *fd, const char *addr, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai;
	char host[256], port[8];
	int one = 1, ret;

	if (split_host_port(addr, host, sizeof(host), port, sizeof(port)) < 0 ||
	    getaddrinfo(host, port, &hints, &ai) != 0) {
		errfmt(err, errlen, "gdb: bad address '%s' (PORT, HOST:PORT or unix:PATH)", addr);
		return -EINVAL;
	}
	*fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	ret = *fd < 0 ? -errno : 0;
	/* A gdb port left in TIME_WAIT by the last session is free to take again. */
	if (!ret && setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		ret = -errno;
	if (!ret && bind(*fd, ai->ai_addr, ai->ai_addrlen) < 0)
		ret = -errno;
	freeaddrinfo(ai);
	if (ret < 0)
		errfmt(err, errlen, "gdb: cannot listen on %s:%s: %s", host, port, strerror(-ret));
	return ret;
}

/* wake_fd < 0: an eventfd of its own. */
static struct gdb_server *server_alloc(const struct gdb_target_ops *ops, void *ctx, int wake_fd)
{
	struct gdb_server *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->ops = ops;
	s->ctx = ctx;
	s->listen_fd = s->client_fd = s->remover_fd = -1;
	s->remover = -1;
	pthread_mutex_init(&s->lock, NULL);
	s->own_wake = wake_fd < 0;
	s->wake_fd = s->own_wake ? eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) : wake_fd;
	s->xml_len = gdb_target_xml(NULL, 0);
	s->xml = malloc(s->xml_len + 1);
	if (s->wake_fd < 0 || !s->xml) {
		if (s->wake_fd >= 0 && s->own_wake)
			close(s->wake_fd);
		free(s->xml);
		pthread_mutex_destroy(&s->lock);
		free(s);
		return NULL;
	}
	gdb_target_xml(s->xml, s->xml_len + 1);
	return s;
}

/*
 * A unix socket's path outlives the chance of lkvm's main thread to remove it: its sandbox
 * allows no unlink, and after --user the directory may not be lkvm's to write any more. So, as
 * the control socket's cleanup helper does (ctl/server.c), a child forked at listen time, while
 * lkvm is still whoever started it, removes the path once lkvm lets go of it: EOF on a pipe
 * whose only write end lkvm holds (closed by server_free, or by the kernel when lkvm dies,
 * SIGKILL included). It removes the path only while it is still the socket bound here (its
 * device and inode): a server that took the path over since keeps it. It keeps no other fd, no
 * capability, no signal but SIGKILL, and makes only system calls (a fork of a threaded process).
 */
static void __attribute__((noreturn)) remover_main(const char *path, dev_t dev, ino_t ino, int fd)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = { 0 };
	struct stat st;
	sigset_t all;
	char b[16];

	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, NULL);
	prctl(PR_SET_NAME, "lkvm-gdb-rm");
	if (fd > 0)
		syscall(SYS_close_range, 0u, (unsigned)fd - 1, 0u);
	syscall(SYS_close_range, (unsigned)fd + 1, ~0u, 0u);
	syscall(SYS_capset, &hdr, none);
	while (read(fd, b, sizeof(b)) > 0)
		; /* blocked signals cannot interrupt it; any byte is ignored */
	if (lstat(path, &st) == 0 && st.st_dev == dev && st.st_ino == ino)
		unlink(path);
	_exit(0);
}

static int spawn_remover(struct gdb_server *s, char *err, size_t errlen)
{
	struct stat st;
	int p[2];

	if (lstat(s->unix_path, &st) < 0 || pipe2(p, O_CLOEXEC) < 0) {
		errfmt(err, errlen, "gdb: %s: %s", s->unix_path, strerror(errno));
		return -errno;
	}
	s->remover = fork();
	if (s->remover < 0) {
		int e = errno;

		close(p[0]);
		close(p[1]);
		errfmt(err, errlen, "gdb: cannot start the remover of %s: %s", s->unix_path,
		       strerror(e));
		return -e;
	}
	if (s->remover == 0)
		remover_main(s->unix_path, st.st_dev, st.st_ino, p[0]);
	close(p[0]);
	s->remover_fd = p[1];
	return 0;
}

static void server_free(struct gdb_server *s)
{
	if (s->client_fd >= 0)
		close(s->client_fd);
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	if (s->remover_fd >= 0) {
		/* Its child removes the path and exits (remover_main). */
		close(s->remover_fd);
		while (waitpid(s->remover, NULL, 0) < 0 && errno == EINTR)
			;
	} else if (s->unix_path[0]) {
		unlink(s->unix_path); /* the remover did not start: not yet sandboxed */
	}
	if (s->own_wake)
		close(s->wake_fd);
	free(s->xml);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static int start_thread(struct gdb_server *s)
{
	return thread_start_nosig(&s->thread, server_thread, s);
}

int gdb_listen_addr(const char *addr, int *fd, char *path, char *err, size_t errlen)
{
	int ret;

	*fd = -1;
	path[0] = '\0';
	if (!strncmp(addr, "unix:", 5))
		ret = listen_unix(fd, path, addr + 5, err, errlen);
	else
		ret = listen_tcp(fd, addr, err, errlen);
	if (!ret && listen(*fd, 1) < 0) {
		ret = -errno;
		errfmt(err, errlen, "gdb: cannot listen on %s: %s", addr, strerror(-ret));
	}
	if (ret < 0) {
		if (*fd >= 0)
			close(*fd);
		if (path[0])
			unlink(path);
		*fd = -1;
		path[0] = '\0';
	}
	return ret;
}

int gdb_server_listen(const char *addr, const struct gdb_target_ops *ops, void *ctx,
		      struct gdb_server **out, char *err, size_t errlen)
{
	struct gdb_server *s = server_alloc(ops, ctx, -1);
	int ret;

	if (!s) {
		errfmt(err, errlen, "gdb: out of memory or descriptors");
		return -ENOMEM;
	}
	ret = gdb_listen_addr(addr, &s->listen_fd, s->unix_path, err, errlen);
	if (ret == 0 && s->unix_path[0])
		ret = spawn_remover(s, err, errlen);
	if (ret < 0) {
		server_free(s);
		return ret;
	}
	*out = s;
	return 0;
}

int gdb_server_run(struct gdb_server *s, char *err, size_t errlen)
{
	int ret = start_thread(s);

	if (ret < 0)
		errfmt(err, errlen, "gdb: cannot start its thread: %s", strerror(-ret));
	s->thread_up = ret == 0;
	return ret;
}

int gdb_server_start(const char *addr, const struct gdb_target_ops *ops, void *ctx,
		     struct gdb_server **out, char *err, size_t errlen)
{
	int ret = gdb_server_listen(addr, ops, ctx, out, err, errlen);

	if (ret == 0 && (ret = gdb_server_run(*out, err, errlen)) < 0)
		server_free(*out);
	return ret;
}

int gdb_server_attach_fd(int fd, int wake_fd, const struct gdb_target_ops *ops, void *ctx,
			 struct gdb_server **out, char *err, size_t errlen)
{
	struct gdb_server *s = server_alloc(ops, ctx, wake_fd);
	int fl = fcntl(fd, F_GETFL), ret;

	if (!s) {
		close(fd);
		errfmt(err, errlen, "gdb: out of memory or descriptors");
		return -ENOMEM;
	}
	/* The server's sends poll for room; its reads follow poll. */
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	s->one_shot = true;
	eventfd_drain(s->wake_fd); /* the last session's wake-ups */
	client_init(s, fd);
	ret = gdb_server_run(s, err, errlen);
	if (ret < 0) {
		server_free(s); /* fd with it */
		return ret;
	}
	*out = s;
	return 0;
}

bool gdb_server_ended(struct gdb_server *s)
{
	return atomic_load(&s->ended);
}

void gdb_server_stop(struct gdb_server *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->quit = true;
	pthread_mutex_unlock(&s->lock);
	if (eventfd_write(s->wake_fd, 1) < 0)
		pr_err("gdb: cannot wake the server's thread"); /* cannot happen */
	if (s->thread_up)
		pthread_join(s->thread, NULL);
	server_free(s);
}

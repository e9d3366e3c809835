/* The control plane's client side and shared paths: the runtime directory, socket and lock names, connect, one call. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "lkvm/ctl.h"

int ctl_runtime_dir(char *buf, size_t len)
{
	const char *env = getenv("LKVM_RUNTIME_DIR"), *xdg = getenv("XDG_RUNTIME_DIR");
	int n;

	if (env && *env)
		n = snprintf(buf, len, "%s", env);
	else if (geteuid() == 0)
		n = snprintf(buf, len, "/run/lkvm");
	else if (xdg && *xdg)
		n = snprintf(buf, len, "%s/lkvm", xdg);
	else
		n = snprintf(buf, len, "/tmp/lkvm-%u", (unsigned)geteuid());
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int ctl_dir_check(const char *dir, char *err, size_t errlen)
{
	uid_t me = geteuid();
	struct stat st;

	if (lstat(dir, &st) < 0) {
		int e = errno;

		errfmt(err, errlen, "runtime directory %s: %s", dir, strerror(e));
		return -e;
	}
	if (!S_ISDIR(st.st_mode) || st.st_uid != me || (st.st_mode & 077)) {
		const char *what = S_ISLNK(st.st_mode) ? "a symlink" : "a file";

		if (S_ISDIR(st.st_mode))
			what = "a directory";

		errfmt(err, errlen,
		       "runtime directory %s is not this user's: it must be a directory of uid %u with mode 0700, "
		       "it is %s of uid %u with mode %04o (remove it, or set LKVM_RUNTIME_DIR)",
		       dir, (unsigned)me, what, (unsigned)st.st_uid,
		       (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

int ctl_path(char *buf, size_t len, const char *dir, const char *name, const char *suffix)
{
	int n = snprintf(buf, len, "%s/%s%s", dir, name, suffix);

	/* sun_path's limit applies to every path we make, so the lock and socket always pair. */
	if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return -ENAMETOOLONG;
	return 0;
}

/* Whether the process listening on fd's other end is of our uid. */
static int check_peer(int fd, const char *path, char *err, size_t errlen)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || len != sizeof(cr)) {
		errfmt(err, errlen, "cannot tell who serves %s: %s", path, strerror(errno));
		return -EPERM;
	}
	if (cr.uid != geteuid()) {
		errfmt(err, errlen,
		       "%s is served by a process of uid %u, not of this user (uid %u): not believed",
		       path, (unsigned)cr.uid, (unsigned)geteuid());
		return -EPERM;
	}
	return 0;
}

int ctl_peer_pid(int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || len != sizeof(cr))
		return 0;
	return cr.pid;
}

int ctl_connect(const char *dir, const char *name, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, e;

	if (!ctl_name_valid(name)) {
		errfmt(err, errlen, "'%s' is not a VM name (1 to 64 of A-Z a-z 0-9 . _ -)", name);
		return -EINVAL;
	}
	e = ctl_dir_check(dir, err, errlen);
	if (e == -ENOENT)
		errfmt(err, errlen, "no VM named '%s' (no runtime directory %s)", name, dir);
	if (e < 0)
		return e;
	if (ctl_path(sa.sun_path, sizeof(sa.sun_path), dir, name, ".sock") < 0) {
		errfmt(err, errlen, "socket path for '%s' in %s is too long", name, dir);
		return -ENAMETOOLONG;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		e = errno;
		errfmt(err, errlen, "socket: %s", strerror(e));
		return -e;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		e = check_peer(fd, sa.sun_path, err, errlen);
		if (e == 0)
			return fd;
		close(fd);
		return e;
	}
	e = errno;
	close(fd);
	if (e == ENOENT)
		errfmt(err, errlen, "no VM named '%s' (no socket in %s)", name, dir);
	else if (e == ECONNREFUSED)
		errfmt(err, errlen, "no VM named '%s' (its socket %s is stale: nobody listens)",
		       name, sa.sun_path);
	else
		errfmt(err, errlen, "cannot connect to %s: %s", sa.sun_path, strerror(e));
	return -e;
}

int ctl_call(int fd, u16 type, struct ctl_msg *reply, int timeout_ms, char *err, size_t errlen)
{
	struct ctl_msg req;
	int ret;

	memset(reply, 0, sizeof(*reply));
	ctl_msg_init(&req, type, 0);
	ret = ctl_send(fd, &req);
	ctl_msg_free(&req);
	/* A server that refuses us (another user, too many clients) answers and closes before
	 * reading: the send then fails, but its reply is there to read. */
	if (ret < 0 && ret != -EPIPE && ret != -ECONNRESET) {
		errfmt(err, errlen, "sending the request: %s", strerror(-ret));
		return ret;
	}
	ret = ctl_recv(fd, reply, CTL_MAX_REPLY, timeout_ms);
	if (ret == -ECONNRESET || ret == -EPIPE)
		errfmt(err, errlen,
		       "the VM closed the connection without a reply (it is shutting down)");
	else if (ret == -ETIMEDOUT)
		errfmt(err, errlen, "no reply within %d ms", timeout_ms);
	else if (ret == -EPROTONOSUPPORT)
		errfmt(err, errlen, "the VM speaks control protocol version %u, this lkvm %d",
		       reply->hdr.version, CTL_VERSION);
	else if (ret < 0)
		errfmt(err, errlen, "malformed reply: %s", strerror(-ret));
	else if (reply->hdr.type != (type | CTL_REPLY) && reply->hdr.type != CTL_REPLY) {
		errfmt(err, errlen, "reply of type 0x%x to a request of type %u", reply->hdr.type,
		       type);
		ctl_msg_free(reply);
		ret = -EBADMSG;
	}
	return ret;
}

bool ctl_lock_is_current(int fd, const char *path)
{
	struct stat a, b;

	return fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

int ctl_remove_stale(const char *dir, const char *name)
{
	char lock[256], sock[256];
	int fd, ret = 0;

	if (ctl_path(lock, sizeof(lock), dir, name, ".lock") < 0 ||
	    ctl_path(sock, sizeof(sock), dir, name, ".sock") < 0)
		return -ENAMETOOLONG;
	fd = open(lock, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno != ENOENT)
		return -errno;
	/* No lock file, or a lock nobody holds: whoever made the socket is gone. */
	if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0) {
		ret = errno == EWOULDBLOCK ? 0 : -errno;
		close(fd);
		return ret;
	}
	/* The lock we hold must still be the one at that path: a VM that just exited unlinks
	 * its lock, and a new VM of the same name then locks a new file. */
	if (fd >= 0 && !ctl_lock_is_current(fd, lock)) {
		close(fd);
		return 0;
	}
	if (unlink(sock) == 0)
		ret = 1;
	else if (errno != ENOENT)
		ret = -errno;
	if (fd >= 0)
		close(fd); /* the lock file stays: removing it would race with a VM starting */
	return ret;
}

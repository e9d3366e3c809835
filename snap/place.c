/* A new file put at PATH exactly as written, or not at all, even in a directory other users can write: made in a private directory beside PATH and renamed from it by descriptor. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "lkvm/snap.h"

/*
 * Why a private directory (issue 40): a temporary file beside PATH (PATH.tmp-XXXXXX), in a
 * directory without the sticky bit that others can write, can be replaced by another user's
 * file between the write and the rename (rename(2) needs only write permission on the
 * directory), and the rename then puts that user's bytes at PATH. Checking the name's identity
 * before renaming leaves a window; after renaming it is too late. O_TMPFILE with linkat cannot
 * replace an existing PATH. So the file is made in a directory of its own (mode 0700, checked
 * to be this user's once opened), whose entries no other user can change, and renamed from it
 * through that directory's descriptor: another user can rename the directory's name away or
 * put their own in its place, but the descriptor still names ours. What remains, someone with
 * this user's rights (or root) replacing the file inside it, is caught by comparing the
 * entry's identity with the written file's before the rename (PATH untouched) and PATH's
 * after it.
 */

#define FILE_NAME "snapshot" /* the file's name inside the private directory */

static void split(const char *path, char *dir, size_t dlen, const char **base)
{
	const char *slash = strrchr(path, '/');

	*base = slash ? slash + 1 : path;
	if (!slash)
		snprintf(dir, dlen, ".");
	else if (slash == path)
		snprintf(dir, dlen, "/");
	else
		snprintf(dir, dlen, "%.*s", (int)(slash - path), path);
}

/* A new 0700 directory ".BASE.lkvm-XXXXXXXX" in p->dirfd, opened and checked to be ours. */
static int make_private_dir(struct snap_place *p, const char *base)
{
	struct stat st;

	for (int tries = 0; tries < 100; tries++) {
		unsigned int r;

		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			return -EIO;
		snprintf(p->sub, sizeof(p->sub), ".%.200s.lkvm-%08x", base, r);
		if (mkdirat(p->dirfd, p->sub, 0700) == 0)
			break;
		if (errno != EEXIST)
			return -errno;
		p->sub[0] = '\0';
	}
	if (!p->sub[0])
		return -EEXIST;
	p->subfd = openat(p->dirfd, p->sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (p->subfd < 0)
		return -errno;
	/* Another user may have put their own directory under the name since mkdirat. */
	if (fstat(p->subfd, &st) < 0)
		return -errno;
	return st.st_uid == geteuid() && !(st.st_mode & 077) ? 0 : -EPERM;
}

int snap_place_open(struct snap_place *p, const char *path, char *err, size_t errlen)
{
	char dir[PATH_MAX];
	const char *base;
	int ret;

	*p = (struct snap_place){ .dirfd = -1, .subfd = -1, .fd = -1 };
	split(path, dir, sizeof(dir), &base);
	if (!*base || !strcmp(base, ".") || !strcmp(base, "..") ||
	    strlen(base) >= sizeof(p->base)) {
		errfmt(err, errlen, "snapshot %s: give a file name", path);
		return -EINVAL;
	}
	snprintf(p->base, sizeof(p->base), "%s", base);
	snprintf(p->path, sizeof(p->path), "%s", path);
	p->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ret = p->dirfd < 0 ? -errno : make_private_dir(p, base);
	if (ret == 0) {
		p->fd = openat(p->subfd, FILE_NAME,
			       O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		ret = p->fd < 0 ? -errno : 0;
	}
	if (ret < 0) {
		errfmt(err, errlen, "snapshot %s: cannot create a file beside it: %s", path,
		       ret == -EPERM ? "its private directory was replaced (by another user?)"
				     : strerror(-ret));
		snap_place_close(p);
	}
	return ret;
}

static bool same_file(int fd, int dirfd, const char *name)
{
	struct stat a, b;

	return fstat(fd, &a) == 0 && fstatat(dirfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
	       a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int snap_place_commit(struct snap_place *p, void (*before_rename)(void *arg), void *arg, char *err,
		      size_t errlen)
{
	if (fsync(p->fd) < 0) {
		errfmt(err, errlen, "snapshot %s: fsync: %s", p->path, strerror(errno));
		return -errno;
	}
	if (before_rename)
		before_rename(arg); /* tests: what another process may do in this window */
	if (!same_file(p->fd, p->subfd, FILE_NAME)) {
		errfmt(err, errlen,
		       "snapshot %s: not saved: the file written was replaced before it was put in place",
		       p->path);
		return -ESTALE;
	}
	if (renameat(p->subfd, FILE_NAME, p->dirfd, p->base) < 0) {
		errfmt(err, errlen, "snapshot %s: rename into place: %s", p->path, strerror(errno));
		return -errno;
	}
	p->placed = true;
	if (!same_file(p->fd, p->dirfd, p->base)) {
		errfmt(err, errlen,
		       "snapshot %s: not saved: another file took its place as it was renamed there",
		       p->path);
		return -ESTALE;
	}
	/* The rename is durable once the directory is on disk too. */
	if (fsync(p->dirfd) < 0) {
		errfmt(err, errlen, "snapshot %s: fsync its directory: %s", p->path,
		       strerror(errno));
		return -errno;
	}
	return 0;
}

void snap_place_close(struct snap_place *p)
{
	if (p->subfd >= 0) {
		if (!p->placed)
			unlinkat(p->subfd, FILE_NAME, 0);
		/* By name, only while the name is still our directory's (an empty one). */
		if (same_file(p->subfd, p->dirfd, p->sub))
			unlinkat(p->dirfd, p->sub, AT_REMOVEDIR);
		close(p->subfd);
	}
	if (p->fd >= 0)
		close(p->fd);
	if (p->dirfd >= 0)
		close(p->dirfd);
	*p = (struct snap_place){ .dirfd = -1, .subfd = -1, .fd = -1 };
}

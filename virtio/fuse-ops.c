/* The FUSE server's operations on names and attributes: getattr, setattr, links, directories, renames, statfs, access, xattrs. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include "fuse-priv.h"

/* ---- attributes ---- */

int fsrv_op_getattr(struct fuse_call *c)
{
	const struct fuse_getattr_in *in = fsrv_take(c, sizeof(*in));
	struct fuse_attr_out o = { .attr_valid = c->s->timeout_s };
	struct stat st;
	int ret;

	if (in->getattr_flags & FUSE_GETATTR_FH) {
		/* fstat of an open file: it answers after an unlink too. */
		struct fuse_handle *h = fsrv_handle(c->s, in->fh, false);

		if (!h)
			return -EBADF;
		ret = fstat(h->fd, &st) < 0 ? neg_errno() : 0;
	} else {
		ret = hostfs_stat(c->s->fs, c->node, &st);
	}
	if (ret)
		return ret;
	fsrv_fill_attr(&o.attr, &st);
	fsrv_put(c, &o, sizeof(o));
	return 0;
}

/* A SETATTR time: a value, now, or left as it is. */
static int set_time(struct timespec *ts, bool set, bool now, u64 sec, u32 nsec)
{
	ts->tv_sec = 0;
	ts->tv_nsec = now ? UTIME_NOW : set ? (long)nsec : UTIME_OMIT;
	if (set && !now) {
		if (nsec >= 1000000000 || sec > (u64)INT64_MAX)
			return -EINVAL;
		ts->tv_sec = (time_t)sec;
	}
	return 0;
}

/* Truncate: through the guest's open file when it names one with write access, else
 * through a descriptor opened for the purpose. */
static int truncate_node(struct fuse_call *c, const struct fuse_setattr_in *in)
{
	struct fuse_server *s = c->s;
	struct fuse_handle *h = in->valid & FATTR_FH ? fsrv_handle(s, in->fh, false) : NULL;
	int fd, ret = 0;

	if (in->size > (u64)INT64_MAX)
		return -EINVAL;
	if (!S_ISREG(c->node->mode))
		return S_ISDIR(c->node->mode) ? -EISDIR : -EINVAL;
	if (h && h->n == c->node && (h->flags & O_ACCMODE) != O_RDONLY)
		return ftruncate(h->fd, (off_t)in->size) < 0 ? neg_errno() : 0;
	fd = hostfs_open_io(s->fs, c->node, O_WRONLY);
	if (fd < 0)
		return fd;
	if (ftruncate(fd, (off_t)in->size) < 0)
		ret = neg_errno();
	hostfs_release_io(s->fs, c->node, fd);
	return ret;
}

static int chmod_node(struct fuse_call *c, int fd, u32 mode)
{
	struct fuse_server *s = c->s;
	char name[16];

	/* Through the magic link: the node's own inode; symlinks have no mode to set. */
	if (S_ISLNK(c->node->mode))
		return -EOPNOTSUPP;
	hostfs_proc_name(name, fd);
	if (fchmodat(hostfs_proc_fd(s->fs), name, hostfs_guest_mode(mode, S_ISDIR(c->node->mode)),
		     0) < 0)
		return neg_errno();
	return 0;
}

/* Owner first (it clears set-id bits), then mode, size, and times last (truncating moves
 * mtime). CTIME alone needs nothing: any change moves it. */
static int setattr_apply(struct fuse_call *c, const struct fuse_setattr_in *in, int fd)
{
	struct timespec ts[2];
	int ret = set_time(&ts[0], in->valid & FATTR_ATIME, in->valid & FATTR_ATIME_NOW, in->atime,
			   in->atimensec);

	if (!ret)
		ret = set_time(&ts[1], in->valid & FATTR_MTIME, in->valid & FATTR_MTIME_NOW,
			       in->mtime, in->mtimensec);
	if (ret)
		return ret;
	if ((in->valid & (FATTR_UID | FATTR_GID)) &&
	    fchownat(fd, "", in->valid & FATTR_UID ? (uid_t)in->uid : (uid_t)-1,
		     in->valid & FATTR_GID ? (gid_t)in->gid : (gid_t)-1,
		     AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return neg_errno();
	if (in->valid & FATTR_MODE) {
		ret = chmod_node(c, fd, in->mode);
		if (ret)
			return ret;
	}
	if (in->valid & FATTR_SIZE) {
		ret = truncate_node(c, in);
		if (ret)
			return ret;
	}
	if ((in->valid & (FATTR_ATIME | FATTR_MTIME | FATTR_ATIME_NOW | FATTR_MTIME_NOW)) &&
	    utimensat(fd, "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return neg_errno();
	return 0;
}

int fsrv_op_setattr(struct fuse_call *c)
{
	struct fuse_setattr_in in;
	struct fuse_attr_out o = { .attr_valid = c->s->timeout_s };
	struct stat st;
	int fd, ret;

	memcpy(&in, fsrv_take(c, sizeof(in)), sizeof(in));
	if (c->node->opaque)
		return -EACCES;
	if ((in.valid & FATTR_FH) && !fsrv_handle(c->s, in.fh, false))
		return -EBADF;
	fd = hostfs_fd(c->s->fs, c->node);
	if (fd < 0)
		return fd;
	ret = setattr_apply(c, &in, fd);
	if (!ret)
		ret = hostfs_stat(c->s->fs, c->node, &st);
	if (ret)
		return ret;
	fsrv_fill_attr(&o.attr, &st);
	fsrv_put(c, &o, sizeof(o));
	return 0;
}

int fsrv_op_readlink(struct fuse_call *c)
{
	char target[PATH_MAX];
	struct stat st;
	ssize_t n;
	int fd, ret;

	if (!S_ISLNK(c->node->mode))
		return -EINVAL;
	fd = hostfs_fd(c->s->fs, c->node);
	if (fd < 0)
		return fd;
	/* A link's size is its target's length: the room is known before reading it. */
	ret = hostfs_stat(c->s->fs, c->node, &st);
	if (ret)
		return ret;
	if (st.st_size >= PATH_MAX)
		return -ENAMETOOLONG;
	if (fsrv_room(c, (size_t)st.st_size))
		return -EOVERFLOW;
	n = readlinkat(fd, "", target, sizeof(target));
	if (n < 0)
		return neg_errno();
	if ((size_t)n >= sizeof(target) || fsrv_room(c, (size_t)n))
		return -ENAMETOOLONG; /* grew since its stat */
	fsrv_put(c, target, (size_t)n);
	return 0;
}

/* ---- making names ---- */

/* After `name` was made in the request's directory: its node, looked up, as the reply; with
 * mode >= 0 its permission bits set exactly (our umask does not apply). */
static int made(struct fuse_call *c, const char *name, s64 mode)
{
	struct fuse_server *s = c->s;
	struct hostfs_node *n;
	struct stat st;
	int ret = hostfs_made(s->fs, c->node, name, -1, &n, &st);
	int fd;

	if (ret)
		return ret;
	if (mode >= 0) {
		fd = hostfs_fd(s->fs, n);
		ret = fd < 0 ? fd : hostfs_fix_mode(s->fs, fd, &st, (u32)mode);
		if (!ret)
			ret = hostfs_stat(s->fs, n, &st);
		if (ret) {
			hostfs_put(s->fs, n);
			return ret;
		}
	}
	fsrv_entry(c, n, &st);
	return 0;
}

int fsrv_op_mkdir(struct fuse_call *c)
{
	const struct fuse_mkdir_in *in = fsrv_take(c, sizeof(*in));
	u32 mode = hostfs_guest_mode(in->mode & 07777, true);
	int dfd, ret;
	const char *name = fsrv_name(c, &ret);

	if (!name)
		return ret;
	dfd = fsrv_dir_fd(c->s, c->node);
	if (dfd < 0)
		return dfd;
	if (mkdirat(dfd, name, mode) < 0)
		return neg_errno();
	return made(c, name, mode);
}

/* A FIFO, socket or empty file; never a device node (one in a share would hand whoever
 * reaches it on the host the device). */
int fsrv_op_mknod(struct fuse_call *c)
{
	const struct fuse_mknod_in *in = fsrv_take(c, sizeof(*in));
	u32 type = in->mode & S_IFMT, mode = hostfs_guest_mode(in->mode & 07777, false);
	int dfd, ret;
	const char *name = fsrv_name(c, &ret);

	if (!name)
		return ret;
	if (type == S_IFCHR || type == S_IFBLK)
		return -EPERM;
	if (type && type != S_IFIFO && type != S_IFSOCK && type != S_IFREG)
		return -EINVAL;
	dfd = fsrv_dir_fd(c->s, c->node);
	if (dfd < 0)
		return dfd;
	if (mknodat(dfd, name, (type ? type : S_IFREG) | mode, 0) < 0)
		return neg_errno();
	return made(c, name, mode);
}

int fsrv_op_symlink(struct fuse_call *c)
{
	int dfd, ret;
	const char *name = fsrv_name(c, &ret);
	/* only text to us: never followed */
	const char *target = name ? fsrv_str(c, PATH_MAX - 1, &ret) : NULL;

	if (!target)
		return ret;
	dfd = fsrv_dir_fd(c->s, c->node);
	if (dfd < 0)
		return dfd;
	if (symlinkat(target, dfd, name) < 0)
		return neg_errno();
	return made(c, name, -1);
}

int fsrv_op_link(struct fuse_call *c)
{
	struct fuse_server *s = c->s;
	const struct fuse_link_in *in = fsrv_take(c, sizeof(*in));
	struct hostfs_node *old = fsrv_node(s, in->oldnodeid);
	char src[16];
	int dfd, fd, ret;
	const char *name = fsrv_name(c, &ret);

	if (!name)
		return ret;
	if (!old)
		return -ESTALE;
	if (old->opaque)
		return -EACCES;
	dfd = fsrv_dir_fd(s, c->node);
	fd = dfd < 0 ? dfd : hostfs_fd(s->fs, old);
	if (fd < 0)
		return fd;
	/* Through the magic link: exactly the node's inode, without CAP_DAC_READ_SEARCH. */
	hostfs_proc_name(src, fd);
	if (linkat(hostfs_proc_fd(s->fs), src, dfd, name, AT_SYMLINK_FOLLOW) < 0)
		return neg_errno();
	return made(c, name, -1);
}

/* ---- removing and renaming ---- */

static int remove_name(struct fuse_call *c, int flags)
{
	int dfd, ret;
	const char *name = fsrv_name(c, &ret);

	if (!name)
		return ret;
	dfd = fsrv_dir_fd(c->s, c->node);
	if (dfd < 0)
		return dfd;
	if (unlinkat(dfd, name, flags) < 0)
		return neg_errno();
	hostfs_unlinked(c->s->fs, c->node, name);
	return 0;
}

int fsrv_op_unlink(struct fuse_call *c)
{
	return remove_name(c, 0);
}

int fsrv_op_rmdir(struct fuse_call *c)
{
	return remove_name(c, AT_REMOVEDIR);
}

/*
 * RENAME and RENAME2: NOREPLACE and EXCHANGE passed on; WHITEOUT refused (it makes a
 * character device). The nodes follow their names: the moved one takes its new name; in an
 * exchange the other one is walked to by its new name, which it takes.
 */
static int rename_common(struct fuse_call *c, u64 newdir, u32 flags)
{
	struct fuse_server *s = c->s;
	struct hostfs_node *nd = fsrv_node(s, newdir), *other;
	struct stat st;
	int ofd, nfd, ret;
	const char *oname = fsrv_name(c, &ret);
	const char *nname = oname ? fsrv_name(c, &ret) : NULL;

	if (!nname)
		return ret;
	if (flags & ~(u32)(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	if (!nd)
		return -ESTALE;
	ofd = fsrv_dir_fd(s, c->node);
	nfd = ofd < 0 ? ofd : fsrv_dir_fd(s, nd);
	if (nfd < 0)
		return nfd;
	if (renameat2(ofd, oname, nfd, nname, flags) < 0)
		return neg_errno();
	hostfs_renamed(s->fs, c->node, oname, nd, nname);
	if ((flags & RENAME_EXCHANGE) && !hostfs_walk(s->fs, c->node, oname, &other, &st))
		hostfs_put(s->fs, other);
	return 0;
}

int fsrv_op_rename(struct fuse_call *c)
{
	const struct fuse_rename_in *in = fsrv_take(c, sizeof(*in));

	return rename_common(c, in->newdir, 0);
}

int fsrv_op_rename2(struct fuse_call *c)
{
	const struct fuse_rename2_in *in = fsrv_take(c, sizeof(*in));

	return rename_common(c, in->newdir, in->flags);
}

/* ---- the file system ---- */

int fsrv_op_statfs(struct fuse_call *c)
{
	struct fuse_statfs_out o = { 0 };
	struct statfs sfs;
	int fd = hostfs_fd(c->s->fs, c->node);

	if (fd < 0)
		return fd;
	if (fstatfs(fd, &sfs) < 0)
		return neg_errno();
	o.st.blocks = sfs.f_blocks;
	o.st.bfree = sfs.f_bfree;
	o.st.bavail = sfs.f_bavail;
	o.st.files = sfs.f_files;
	o.st.ffree = sfs.f_ffree;
	o.st.bsize = (u32)sfs.f_bsize;
	o.st.namelen = (u32)sfs.f_namelen;
	o.st.frsize = (u32)sfs.f_frsize;
	fsrv_put(c, &o, sizeof(o));
	return 0;
}

/* ACCESS: the host's check with lkvm's credentials (faccessat on the node's descriptor); a
 * symlink is never checked (the guest resolves it); EROFS for writing on a read-only share. */
int fsrv_op_access(struct fuse_call *c)
{
	const struct fuse_access_in *in = fsrv_take(c, sizeof(*in));
	u32 mask = in->mask;
	int fd;

	if (mask & ~(u32)(R_OK | W_OK | X_OK))
		return -EINVAL;
	if (S_ISLNK(c->node->mode))
		return 0;
	if ((mask & W_OK) && c->s->readonly)
		return -EROFS;
	fd = hostfs_fd(c->s->fs, c->node);
	if (fd < 0)
		return fd;
	return faccessat(fd, "", (int)mask, AT_EMPTY_PATH | AT_EACCESS) < 0 ? neg_errno() : 0;
}

/*
 * Extended attributes are not passed through, as the 9P server does: a named one is
 * ENODATA ("no such attribute": security.capability, ACLs), the list is empty, and setting
 * or removing one is EOPNOTSUPP (no file capabilities written into a host file).
 */
int fsrv_op_getxattr(struct fuse_call *c)
{
	int ret;

	fsrv_take(c, sizeof(struct fuse_getxattr_in));
	if (!fsrv_str(c, XATTR_NAME_MAX, &ret))
		return ret == -ENAMETOOLONG ? -ERANGE : ret;
	return -ENODATA;
}

int fsrv_op_listxattr(struct fuse_call *c)
{
	const struct fuse_getxattr_in *in = fsrv_take(c, sizeof(*in));
	struct fuse_getxattr_out o = { .size = 0 };

	if (!in->size)
		fsrv_put(c, &o, sizeof(o)); /* the list's size, asked for first */
	return 0;
}

int fsrv_op_setxattr(struct fuse_call *c)
{
	return -EOPNOTSUPP;
}

int fsrv_op_removexattr(struct fuse_call *c)
{
	return -EOPNOTSUPP;
}

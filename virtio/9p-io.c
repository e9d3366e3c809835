/* The 9P operations on what a fid names: attributes (getattr, setattr, readlink, statfs), data (read, write, fsync), directories (readdir), and the xattr and lock stubs. */
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

#include "9p-priv.h"

static u64 linux_dev(dev_t d)
{
	u64 ma = major(d), mi = minor(d);

	return (mi & 0xff) | (ma << 8) | ((mi & ~0xffull) << 12);
}

int p9_op_getattr(struct p9_call *c)
{
	u32 fid = p9_get32(c);
	struct p9_fid *f;
	struct p9_qid q;
	struct stat st;
	int ret;

	p9_get64(c); /* request_mask: the basic set is always there */
	f = p9_fid_req(c, fid, FID_NAMING, &ret);
	if (!f)
		return ret;
	ret = hostfs_stat(c->s->fs, f->node, &st);
	if (ret)
		return ret;
	p9_qid_of(c->s, &st, &q);
	p9_put64(c, P9_STATS_BASIC);
	p9_put_qid(c, &q);
	p9_put32(c, st.st_mode);
	p9_put32(c, st.st_uid);
	p9_put32(c, st.st_gid);
	p9_put64(c, st.st_nlink);
	p9_put64(c, linux_dev(st.st_rdev));
	p9_put64(c, (u64)st.st_size);
	p9_put64(c, (u64)st.st_blksize);
	p9_put64(c, (u64)st.st_blocks);
	p9_put64(c, (u64)st.st_atim.tv_sec);
	p9_put64(c, (u64)st.st_atim.tv_nsec);
	p9_put64(c, (u64)st.st_mtim.tv_sec);
	p9_put64(c, (u64)st.st_mtim.tv_nsec);
	p9_put64(c, (u64)st.st_ctim.tv_sec);
	p9_put64(c, (u64)st.st_ctim.tv_nsec);
	for (int i = 0; i < 4; i++)
		p9_put64(c, 0); /* btime (sec, nsec), gen, data_version: not in the basic set */
	return 0;
}

/* A Tsetattr time: set to (sec, nsec) with `set`, to now with `now` alone, else left. */
static int set_time(struct timespec *ts, bool now, bool set, u64 sec, u64 nsec)
{
	ts->tv_sec = 0;
	ts->tv_nsec = set ? (long)nsec : now ? UTIME_NOW : UTIME_OMIT;
	if (set) {
		if (nsec >= 1000000000 || sec > (u64)INT64_MAX)
			return -EINVAL;
		ts->tv_sec = (time_t)sec;
	}
	return 0;
}

static int truncate_node(struct p9_server *s, struct p9_fid *f, u64 size)
{
	int fd, ret = 0;

	if (size > (u64)INT64_MAX)
		return -EINVAL;
	if (!S_ISREG(f->node->mode))
		return S_ISDIR(f->node->mode) ? -EISDIR : -EINVAL;
	/* An open descriptor with write access does it; otherwise open one for the purpose. */
	if (f->ofd >= 0 && (fcntl(f->ofd, F_GETFL) & O_ACCMODE) != O_RDONLY)
		return ftruncate(f->ofd, (off_t)size) < 0 ? neg_errno() : 0;
	fd = hostfs_open_io(s->fs, f->node, O_WRONLY);
	if (fd < 0)
		return fd;
	if (ftruncate(fd, (off_t)size) < 0)
		ret = neg_errno();
	hostfs_release_io(s->fs, f->node, fd);
	return ret;
}

/* Owner and mode of what f names (descriptor pfd), as Tsetattr's valid bits ask: the owner
 * first (it clears set-id bits), then the mode, through the magic link (exactly the fid's
 * inode; symlinks have no mode to set). */
static int set_owner_mode(struct p9_server *s, struct p9_fid *f, int pfd, u32 valid, u32 mode,
			  u32 uid, u32 gid)
{
	char name[16];

	if ((valid & (P9_SETATTR_UID | P9_SETATTR_GID)) &&
	    fchownat(pfd, "", valid & P9_SETATTR_UID ? (uid_t)uid : (uid_t)-1,
		     valid & P9_SETATTR_GID ? (gid_t)gid : (gid_t)-1,
		     AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return neg_errno();
	if (!(valid & P9_SETATTR_MODE))
		return 0;
	if (S_ISLNK(f->node->mode))
		return -EOPNOTSUPP;
	hostfs_proc_name(name, pfd);
	if (fchmodat(hostfs_proc_fd(s->fs), name, hostfs_guest_mode(mode, S_ISDIR(f->node->mode)),
		     0) < 0)
		return neg_errno();
	return 0;
}

int p9_op_setattr(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 fid = p9_get32(c), valid = p9_get32(c), mode = p9_get32(c), uid = p9_get32(c),
	    gid = p9_get32(c);
	u64 size = p9_get64(c), asec = p9_get64(c), ansec = p9_get64(c), msec = p9_get64(c),
	    mnsec = p9_get64(c);
	struct timespec ts[2];
	struct p9_fid *f;
	int pfd, ret;

	f = p9_fid_req(c, fid, FID_INSIDE, &ret);
	if (!f)
		return ret;
	ret = set_time(&ts[0], valid & P9_SETATTR_ATIME, valid & P9_SETATTR_ATIME_SET, asec, ansec);
	if (!ret)
		ret = set_time(&ts[1], valid & P9_SETATTR_MTIME, valid & P9_SETATTR_MTIME_SET, msec,
			       mnsec);
	pfd = ret ? ret : hostfs_fd(s->fs, f->node);
	if (pfd < 0)
		return pfd;
	/* Owner and mode, then size, and times last (truncating moves mtime). CTIME alone
	 * needs nothing: any change moves it. */
	ret = set_owner_mode(s, f, pfd, valid, mode, uid, gid);
	if (!ret && (valid & P9_SETATTR_SIZE))
		ret = truncate_node(s, f, size);
	if (ret)
		return ret;
	if ((valid & (P9_SETATTR_ATIME | P9_SETATTR_MTIME)) &&
	    utimensat(pfd, "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return neg_errno();
	return 0;
}

int p9_op_readlink(struct p9_call *c)
{
	u32 fid = p9_get32(c);
	char target[PATH_MAX];
	struct p9_fid *f;
	struct stat st;
	ssize_t n;
	int ret;

	f = p9_fid_req(c, fid, FID_NAMING, &ret);
	if (!f)
		return ret;
	if (!S_ISLNK(f->node->mode))
		return -EINVAL;
	/* A link's size is its target's length: the room is known before reading it (which
	 * moves the link's atime). One changed meanwhile is caught by p9_put_str all the same. */
	ret = hostfs_stat(c->s->fs, f->node, &st);
	if (ret)
		return ret;
	if (st.st_size >= PATH_MAX)
		return -ENAMETOOLONG;
	ret = p9_room(c, 2 + (size_t)st.st_size);
	if (ret)
		return ret;
	/* hostfs_stat just made the descriptor good (borrowed until the request ends) */
	n = readlinkat(hostfs_fd(c->s->fs, f->node), "", target, sizeof(target));
	if (n < 0)
		return neg_errno();
	if ((size_t)n >= sizeof(target))
		return -ENAMETOOLONG;
	p9_put_str(c, target, (size_t)n);
	return 0;
}

int p9_op_statfs(struct p9_call *c)
{
	u32 fid = p9_get32(c);
	struct p9_fid *f;
	struct statfs sfs;
	int pfd, ret;

	f = p9_fid_req(c, fid, FID_NAMING, &ret);
	if (!f)
		return ret;
	pfd = hostfs_fd(c->s->fs, f->node);
	if (pfd < 0)
		return pfd;
	if (fstatfs(pfd, &sfs) < 0)
		return neg_errno();
	p9_put32(c, (u32)sfs.f_type);
	p9_put32(c, (u32)sfs.f_bsize);
	p9_put64(c, sfs.f_blocks);
	p9_put64(c, sfs.f_bfree);
	p9_put64(c, sfs.f_bavail);
	p9_put64(c, sfs.f_files);
	p9_put64(c, sfs.f_ffree);
	p9_put64(c, (u64)(u32)sfs.f_fsid.__val[0] | (u64)(u32)sfs.f_fsid.__val[1] << 32);
	p9_put32(c, (u32)sfs.f_namelen);
	return 0;
}

/* The part [off, off + len) of an iovec array, as s->iov; returns its entry count. */
static int iov_slice(struct p9_server *s, const struct iovec *iov, int cnt, size_t off, size_t len)
{
	int n = 0;

	for (int i = 0; i < cnt && len; i++) {
		size_t k;

		if (off >= iov[i].iov_len) {
			off -= iov[i].iov_len;
			continue;
		}
		k = MIN(iov[i].iov_len - off, len);
		s->iov[n].iov_base = (u8 *)iov[i].iov_base + off;
		s->iov[n++].iov_len = k;
		len -= k;
		off = 0;
	}
	return n;
}

/* Tread, Twrite and Treaddir begin alike: fid[4] offset[8] count[4]. */
struct p9_io {
	struct p9_fid *f;
	off_t off;
	u32 count;
};

/* Parse that part: an open fid (or an xattr fid, with FID_ANY) and an offset within off_t. */
static int get_io(struct p9_call *c, enum fid_want want, struct p9_io *io)
{
	u32 fid = p9_get32(c);
	u64 off = p9_get64(c);
	int ret;

	io->count = p9_get32(c);
	io->f = p9_fid_req(c, fid, want, &ret);
	if (!io->f)
		return ret;
	if (io->f->kind == FID_XATTR)
		return 0;
	if (io->f->ofd < 0)
		return -EBADF;
	if (off > (u64)INT64_MAX)
		return -EINVAL;
	io->off = (off_t)off;
	return 0;
}

/* Move io->count bytes between the file and the transport's buffers, from byte `at` of
 * them, with no copy in between. Returns the bytes moved or -errno. */
static ssize_t io_iov(struct p9_server *s, const struct p9_io *io, const struct iovec *iov, int cnt,
		      size_t at, bool write)
{
	int n = iov_slice(s, iov, cnt, at, io->count);
	ssize_t done = write ? pwritev(io->f->ofd, s->iov, n, io->off)
			     : preadv(io->f->ofd, s->iov, n, io->off);

	return done < 0 ? neg_errno() : done;
}

int p9_op_read(struct p9_call *c)
{
	struct p9_io io;
	ssize_t n = 0;
	int ret = get_io(c, FID_ANY, &io);

	if (ret)
		return ret;
	/* An xattr fid is an attribute list we said was empty. The data goes straight after
	 * count[4], within msize and the buffers given. */
	io.count = io.f->kind == FID_XATTR ? 0 : (u32)MIN((size_t)io.count, c->out_cap - 4);
	if (io.count)
		n = io_iov(c->s, &io, c->resp, c->resp_cnt, P9_IOHDR, false);
	if (n < 0)
		return (int)n;
	p9_put32(c, (u32)n);
	c->data_len = (size_t)n;
	c->s->st.reads++;
	c->s->st.read_bytes += (u64)n;
	return 0;
}

int p9_op_write(struct p9_call *c)
{
	struct p9_io io;
	ssize_t n = 0;
	int ret = get_io(c, FID_NAMING, &io);

	if (ret)
		return ret;
	if (io.count > c->body - P9_TWRITE_FIXED)
		return -EPROTO; /* more data claimed than the message carries */
	if (io.count)
		n = io_iov(c->s, &io, c->req, c->req_cnt, P9_HDR_SIZE + P9_TWRITE_FIXED, true);
	if (n < 0)
		return (int)n;
	p9_put32(c, (u32)n);
	c->s->st.write_bytes += (u64)n;
	return 0;
}

static u8 dirent_qid_type(u8 d_type)
{
	return d_type == DT_DIR ? P9_QTDIR : d_type == DT_LNK ? P9_QTSYMLINK : P9_QTFILE;
}

int p9_op_readdir(struct p9_call *c)
{
	struct p9_server *s = c->s;
	size_t used = 0, start;
	struct p9_fid *f;
	struct p9_io io;
	ssize_t got;
	u32 count;
	int ret = get_io(c, FID_NAMING, &io);

	if (ret)
		return ret;
	f = io.f;
	count = (u32)MIN((size_t)io.count, c->out_cap - 4);
	/* The offset is a cookie from an earlier entry (d_off); entries that do not fit are
	 * read again next time, from the last one sent. */
	if (lseek(f->ofd, io.off, SEEK_SET) < 0)
		return neg_errno();
	got = getdents64(f->ofd, s->dbuf, count);
	if (got < 0)
		return neg_errno();
	p9_put32(c, 0); /* count, filled in below */
	start = c->out_len;
	for (size_t pos = 0; pos < (size_t)got;) {
		const struct dirent64 *d = (const struct dirent64 *)(s->dbuf + pos);
		const size_t name_at = offsetof(struct dirent64, d_name);
		size_t len, need;
		struct p9_qid q;
		u64 ino = d->d_ino;

		if (d->d_reclen <= name_at || d->d_reclen > (size_t)got - pos)
			return -EIO;
		len = strnlen(d->d_name, d->d_reclen - name_at);
		if (len > NAME_MAX)
			return -EIO;
		need = P9_QID_SIZE + 8 + 1 + 2 + len;
		if (used + need > count)
			break;
		/* The root's ".." would name a host directory outside: it names the root. */
		if (len == 2 && !memcmp(d->d_name, "..", 2) && f->node == hostfs_root(s->fs))
			ino = f->node->ino;
		q.type = dirent_qid_type(d->d_type);
		q.version = 0;
		q.path = p9_qid_path(s, f->node->dev, ino);
		p9_put_qid(c, &q);
		p9_put64(c, (u64)d->d_off);
		p9_put8(c, d->d_type);
		p9_put_str(c, d->d_name, len);
		used += need;
		pos += d->d_reclen;
	}
	if (!used && got > 0)
		return -EINVAL; /* count too small for the next entry (getdents64's answer too) */
	for (int i = 0; i < 4; i++)
		c->out[start - 4 + i] = (u8)(used >> (8 * i));
	return 0;
}

int p9_op_fsync(struct p9_call *c)
{
	u32 fid = p9_get32(c), datasync = p9_get32(c);
	struct p9_fid *f;
	int ret;

	f = p9_fid_req(c, fid, FID_NAMING, &ret);
	if (!f)
		return ret;
	if (f->ofd < 0)
		return -EBADF;
	return (datasync ? fdatasync(f->ofd) : fsync(f->ofd)) < 0 ? neg_errno() : 0;
}

/*
 * Extended attributes are not passed through. Listing answers an empty list (an xattr
 * fid with nothing to read), a named attribute ENODATA: the client's getxattr sees "no
 * such attribute" (security.capability, ACLs) and carries on. Setting one: EOPNOTSUPP.
 */
int p9_op_xattrwalk(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 fid = p9_get32(c), newfid = p9_get32(c);
	u16 len;
	int ret;

	if (!p9_get_str(c, &len))
		return -EPROTO;
	if (!p9_fid_req(c, fid, FID_NAMING, &ret))
		return ret;
	if (len > NAME_MAX)
		return -ERANGE;
	if (len)
		return -ENODATA;
	ret = p9_newfid_ok(s, newfid);
	if (!ret)
		ret = p9_fid_add(s, newfid, FID_XATTR, NULL);
	if (ret)
		return ret;
	p9_put64(c, 0);
	return 0;
}

int p9_op_xattrcreate(struct p9_call *c)
{
	return -EOPNOTSUPP;
}

/* Locks: the guest's kernel already arbitrates between its own processes; the host's
 * other users of a share are not coordinated with (as kvmtool). */
int p9_op_lock(struct p9_call *c)
{
	u32 fid = p9_get32(c);
	u8 type = p9_get8(c);
	u16 len;
	int ret;

	p9_get32(c); /* flags, start, length, proc_id */
	p9_get64(c);
	p9_get64(c);
	p9_get32(c);
	if (!p9_get_str(c, &len)) /* client_id */
		return -EPROTO;
	if (type > P9_LOCK_TYPE_UNLCK)
		return -EINVAL;
	if (!p9_fid_req(c, fid, FID_NAMING, &ret))
		return ret;
	p9_put8(c, P9_LOCK_SUCCESS);
	return 0;
}

int p9_op_getlock(struct p9_call *c)
{
	u32 fid = p9_get32(c), proc_id;
	u8 type = p9_get8(c);
	u64 start = p9_get64(c), length = p9_get64(c);
	const char *client;
	u16 len;
	int ret;

	proc_id = p9_get32(c);
	client = p9_get_str(c, &len);
	if (!client)
		return -EPROTO;
	if (type > P9_LOCK_TYPE_UNLCK)
		return -EINVAL;
	if (!p9_fid_req(c, fid, FID_NAMING, &ret))
		return ret;
	ret = p9_room(c, P9_RGETLOCK_FIXED + (size_t)len);
	if (ret)
		return ret;
	p9_put8(c, P9_LOCK_TYPE_UNLCK); /* nobody else holds it */
	p9_put64(c, start);
	p9_put64(c, length);
	p9_put32(c, proc_id);
	p9_put_str(c, client, len);
	return 0;
}

/* Requests are answered one at a time, in order: the one to flush is answered already. */
int p9_op_flush(struct p9_call *c)
{
	p9_get16(c); /* oldtag */
	return c->in_short ? -EPROTO : 0;
}

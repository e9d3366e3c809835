/* The FUSE server's operations on open files and directories: open, create, read, write, readdir(plus), release, fsync, fallocate, lseek, copy_file_range. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "fuse-priv.h"

#define FSRV_COPY_MAX MiB(8) /* one COPY_FILE_RANGE's most: the guest's caller loops */
#define FSRV_FALLOC_MODES                                                    \
	(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE | \
	 FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE | FALLOC_FL_UNSHARE_RANGE)

/* Open flags passed on (what is not listed is dropped: creating is CREATE's alone, the
 * descriptor is ours (CLOEXEC, NOCTTY), symlinks are never followed, O_DIRECT's alignment and
 * O_ASYNC's signals are the guest's business, O_NOATIME needs ownership). */
static const int open_pass[] = { O_TRUNC, O_APPEND, O_DSYNC, O_SYNC };

int fsrv_open_flags(struct fuse_server *s, u32 flags)
{
	int host = (int)(flags & O_ACCMODE);

	if (host == O_ACCMODE)
		return -EINVAL;
	for (size_t i = 0; i < ARRAY_SIZE(open_pass); i++)
		host |= (int)flags & open_pass[i];
	if (s->readonly && ((host & O_ACCMODE) != O_RDONLY || (host & O_TRUNC)))
		return -EROFS;
	return host;
}

/* What the guest may keep of a file's pages across opens (fuse-server.h's cache modes). */
static u32 fopen_flags(const struct fuse_server *s, bool dir)
{
	if (s->cache == FUSE_CACHE_ALWAYS)
		return FOPEN_KEEP_CACHE | (dir ? FOPEN_CACHE_DIR : 0);
	return s->cache == FUSE_CACHE_NONE && !dir ? FOPEN_DIRECT_IO : 0;
}

static void put_open(struct fuse_call *c, u64 fh, bool dir)
{
	struct fuse_open_out o = { .fh = fh, .open_flags = fopen_flags(c->s, dir) };

	fsrv_put(c, &o, sizeof(o));
}

static int open_node(struct fuse_call *c, int host, bool dir)
{
	struct fuse_server *s = c->s;
	int fd, ret = fsrv_handle_room(s);

	if (ret)
		return ret;
	if (!dir && S_ISDIR(c->node->mode))
		return -EISDIR;
	if (dir && !S_ISDIR(c->node->mode))
		return -ENOTDIR;
	fd = hostfs_open_io(s->fs, c->node, host);
	if (fd < 0)
		return fd;
	put_open(c, fsrv_handle_add(s, c->node, fd, (u32)host, dir), dir);
	return 0;
}

int fsrv_op_open(struct fuse_call *c)
{
	const struct fuse_open_in *in = fsrv_take(c, sizeof(*in));
	int host = fsrv_open_flags(c->s, in->flags);

	return host < 0 ? host : open_node(c, host, false);
}

int fsrv_op_opendir(struct fuse_call *c)
{
	return open_node(c, O_RDONLY | O_DIRECTORY, true);
}

/* CREATE of a name that exists and O_EXCL not asked: open what is there, if it is a file. */
static int create_existing(struct fuse_call *c, const char *name, int host, struct hostfs_node **n,
			   struct stat *st)
{
	int fd, ret = hostfs_walk(c->s->fs, c->node, name, n, st);

	if (ret)
		return ret;
	fd = S_ISDIR((*n)->mode) ? -EISDIR : hostfs_open_io(c->s->fs, *n, host);
	if (fd < 0) {
		hostfs_put(c->s->fs, *n);
		return fd;
	}
	put_open(c, fsrv_handle_add(c->s, *n, fd, (u32)host, false), false);
	return 0;
}

/*
 * The file made keeps the descriptor O_CREAT gave (a file created 0444 for writing, as git
 * and tar make them, could not be opened for writing again); its node takes that
 * descriptor's identity (hostfs_made), so it is the file created whatever the name holds now,
 * and counts it as one of its opens (hostfs_take_io), as hostfs_open_io's are.
 */
static int create_new(struct fuse_call *c, const char *name, int fd, u32 mode,
		      struct hostfs_node **n, struct stat *st)
{
	int ret = hostfs_made(c->s->fs, c->node, name, fd, n, st);

	if (ret)
		return ret;
	ret = hostfs_fix_mode(c->s->fs, fd, st, mode);
	if (!ret)
		ret = fstat(fd, st) < 0 ? neg_errno() : 0;
	/* Counted as an open of the node (pinned: an unlink leaves it answering by its id). */
	if (!ret)
		ret = hostfs_take_io(c->s->fs, *n, fd);
	if (ret)
		hostfs_put(c->s->fs, *n);
	return ret;
}

int fsrv_op_create(struct fuse_call *c)
{
	const struct fuse_create_in *in = fsrv_take(c, sizeof(*in));
	struct fuse_server *s = c->s;
	u32 mode = hostfs_guest_mode(in->mode & 07777, false), flags = in->flags;
	struct fuse_entry_out e;
	struct hostfs_node *n;
	struct stat st;
	int host, dfd, fd, ret;
	const char *name = fsrv_name(c, &ret);

	if (!name)
		return ret;
	host = fsrv_open_flags(s, flags);
	ret = host < 0 ? host : fsrv_handle_room(s);
	if (!ret)
		ret = hostfs_open_room(s->fs); /* a file made is one we can keep open */
	dfd = ret ? ret : fsrv_dir_fd(s, c->node);
	if (dfd < 0)
		return dfd;
	/* The entry goes first in the reply: written after the handle is made. */
	c->out_len = sizeof(e);
	fd = hostfs_open_beneath(dfd, name, (u64)host | O_CREAT | O_EXCL, mode);
	if (fd == -EEXIST && !(flags & O_EXCL))
		ret = create_existing(c, name, host, &n, &st);
	else if (fd < 0)
		ret = fd;
	else if (!(ret = create_new(c, name, fd, mode, &n, &st)))
		put_open(c, fsrv_handle_add(s, n, fd, (u32)host, false), false);
	if (ret) {
		if (fd >= 0)
			close(fd);
		return ret;
	}
	fsrv_count_lookup(s, n);
	fsrv_fill_entry(s, &e, n->id, &st);
	memcpy(c->out, &e, sizeof(e));
	return 0;
}

/* ---- data ---- */

/* The part [off, off + len) of an iovec array, as s->iov; its entry count. */
static int iov_slice(struct fuse_server *s, const struct iovec *iov, int cnt, size_t off,
		     size_t len)
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

int fsrv_op_read(struct fuse_call *c)
{
	const struct fuse_read_in *in = fsrv_take(c, sizeof(*in));
	struct fuse_handle *h = fsrv_handle(c->s, in->fh, false);
	size_t size = MIN((size_t)in->size, MIN(c->out_cap, (size_t)FUSE_SRV_MAX_WRITE));
	ssize_t n = 0;
	int cnt;

	if (!h)
		return -EBADF;
	if (in->offset > (u64)INT64_MAX)
		return -EINVAL;
	/* Straight into the guest's buffers, after the reply's header. */
	cnt = iov_slice(c->s, c->resp, c->resp_cnt, sizeof(struct fuse_out_header), size);
	if (size)
		n = preadv(h->fd, c->s->iov, cnt, (off_t)in->offset);
	if (n < 0)
		return neg_errno();
	c->data_len = (size_t)n;
	c->s->st.reads++;
	c->s->st.read_bytes += (u64)n;
	return 0;
}

int fsrv_op_write(struct fuse_call *c)
{
	const struct fuse_write_in *in = fsrv_take(c, sizeof(*in));
	struct fuse_handle *h = fsrv_handle(c->s, in->fh, false);
	struct fuse_write_out o = { 0 };
	ssize_t n = 0;
	int cnt;

	if (!h)
		return -EBADF;
	if (in->size > c->args_len - sizeof(*in) || in->size > FUSE_SRV_MAX_WRITE ||
	    in->offset > (u64)INT64_MAX)
		return -EINVAL; /* more data claimed than the request carries */
	cnt = iov_slice(c->s, c->req, c->req_cnt, sizeof(struct fuse_in_header) + sizeof(*in),
			in->size);
	if (in->size)
		n = pwritev(h->fd, c->s->iov, cnt, (off_t)in->offset);
	if (n < 0)
		return neg_errno();
	o.size = (u32)n;
	c->s->st.write_bytes += (u64)n;
	fsrv_put(c, &o, sizeof(o));
	return 0;
}

/* ---- directories ---- */

/* One directory entry as getdents64 gave it, checked. */
struct dent {
	u64 ino, off;
	u8 type;
	const char *name;
	size_t len;
};

static int next_dent(const u8 *buf, size_t got, size_t *pos, struct dent *d)
{
	const struct dirent64 *e = (const struct dirent64 *)(buf + *pos);
	const size_t name_at = offsetof(struct dirent64, d_name);

	if (e->d_reclen <= name_at || e->d_reclen > got - *pos)
		return -EIO;
	d->len = strnlen(e->d_name, e->d_reclen - name_at);
	if (!d->len || d->len > NAME_MAX)
		return -EIO;
	d->ino = e->d_ino;
	d->off = (u64)e->d_off;
	d->type = e->d_type;
	d->name = e->d_name;
	*pos += e->d_reclen;
	return 0;
}

static bool dot_or_dotdot(const struct dent *d)
{
	return d->name[0] == '.' && (d->len == 1 || (d->len == 2 && d->name[1] == '.'));
}

/*
 * One READDIRPLUS entry's node: looked up (and counted) unless it is "." or "..", which the
 * guest never counts (nodeid 0: "no attributes for this one"), or the walk failed (the
 * entry went meanwhile, or a cap): then nodeid 0 too, and the guest looks it up itself.
 */
static void plus_entry(struct fuse_server *s, struct hostfs_node *dir, const struct dent *d,
		       struct fuse_entry_out *e)
{
	char name[NAME_MAX + 1];
	struct hostfs_node *n;
	struct stat st;

	memcpy(name, d->name, d->len);
	name[d->len] = '\0';
	if (!dot_or_dotdot(d) && !hostfs_walk(s->fs, dir, name, &n, &st)) {
		fsrv_count_lookup(s, n);
		fsrv_fill_entry(s, e, n->id, &st);
		return;
	}
	*e = (struct fuse_entry_out){ .attr.ino = d->ino, .attr.mode = (u32)d->type << 12 };
}

/* Emit one entry if it fits in size bytes; false when it does not. */
static bool emit(struct fuse_call *c, struct fuse_handle *h, const struct dent *dent, size_t size,
		 bool plus)
{
	size_t head = plus ? sizeof(struct fuse_entry_out) : 0;
	size_t rec = head + FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + dent->len);
	struct dent d = *dent;
	struct fuse_dirent de;
	struct fuse_entry_out e;
	static const u8 zero[8];

	if (c->out_len + rec > size)
		return false;
	/* The root's ".." would name a host directory outside: it names the root. */
	if (h->n == hostfs_root(c->s->fs) && d.len == 2 && !memcmp(d.name, "..", 2))
		d.ino = h->n->ino;
	de = (struct fuse_dirent){
		.ino = d.ino, .off = d.off, .namelen = (u32)d.len, .type = d.type
	};
	if (plus) {
		plus_entry(c->s, h->n, &d, &e);
		fsrv_put(c, &e, sizeof(e));
	}
	fsrv_put(c, &de, FUSE_NAME_OFFSET);
	fsrv_put(c, d.name, d.len);
	fsrv_put(c, zero, rec - head - FUSE_NAME_OFFSET - d.len);
	return true;
}

static int readdir_common(struct fuse_call *c, bool plus)
{
	const struct fuse_read_in *in = fsrv_take(c, sizeof(*in));
	struct fuse_server *s = c->s;
	struct fuse_handle *h = fsrv_handle(s, in->fh, true);
	size_t size = MIN((size_t)in->size, c->out_cap), pos = 0;
	ssize_t got;
	struct dent d;

	if (!h)
		return -EBADF;
	if (in->offset > (u64)INT64_MAX)
		return -EINVAL;
	/* The offset is a cookie from an earlier entry (d_off); entries that do not fit are read
	 * again next time, from the last one sent. A getdents64 record is never longer than the
	 * FUSE record of the same name, so `size` bytes of them are enough. */
	if (lseek(h->fd, (off_t)in->offset, SEEK_SET) < 0)
		return neg_errno();
	got = getdents64(h->fd, s->dbuf, MIN(size, (size_t)65536));
	if (got < 0)
		return neg_errno();
	while (pos < (size_t)got) {
		size_t at = pos;

		if (next_dent(s->dbuf, (size_t)got, &pos, &d))
			return -EIO;
		if (!emit(c, h, &d, size, plus)) {
			pos = at;
			break;
		}
	}
	if (!c->out_len && got > 0)
		return -EINVAL; /* too small for the next entry (getdents64's answer too) */
	return 0;
}

int fsrv_op_readdir(struct fuse_call *c)
{
	return readdir_common(c, false);
}

int fsrv_op_readdirplus(struct fuse_call *c)
{
	return readdir_common(c, true);
}

/* ---- handles ---- */

static int release_common(struct fuse_call *c, bool dir)
{
	const struct fuse_release_in *in = fsrv_take(c, sizeof(*in));
	struct fuse_handle *h = fsrv_handle(c->s, in->fh, dir);

	if (!h)
		return -EBADF;
	fsrv_handle_del(c->s, h);
	return 0;
}

int fsrv_op_release(struct fuse_call *c)
{
	return release_common(c, false);
}

int fsrv_op_releasedir(struct fuse_call *c)
{
	return release_common(c, true);
}

/* Locks are the guest's own (FUSE_POSIX_LOCKS is not offered): nothing to drop at close. */
int fsrv_op_flush(struct fuse_call *c)
{
	const struct fuse_flush_in *in = fsrv_take(c, sizeof(*in));

	return fsrv_handle(c->s, in->fh, false) ? 0 : -EBADF;
}

int fsrv_op_fsync(struct fuse_call *c)
{
	const struct fuse_fsync_in *in = fsrv_take(c, sizeof(*in));
	struct fuse_handle *h = fsrv_handle(c->s, in->fh, c->ih.opcode == FUSE_FSYNCDIR);
	int ret;

	if (!h)
		return -EBADF;
	ret = in->fsync_flags & FUSE_FSYNC_FDATASYNC ? fdatasync(h->fd) : fsync(h->fd);
	return ret < 0 ? neg_errno() : 0;
}

int fsrv_op_fallocate(struct fuse_call *c)
{
	const struct fuse_fallocate_in *in = fsrv_take(c, sizeof(*in));
	struct fuse_handle *h = fsrv_handle(c->s, in->fh, false);

	if (!h)
		return -EBADF;
	if (in->offset > (u64)INT64_MAX || in->length > (u64)INT64_MAX ||
	    (in->mode & ~(u32)FSRV_FALLOC_MODES))
		return -EINVAL;
	if (fallocate(h->fd, (int)in->mode, (off_t)in->offset, (off_t)in->length) < 0)
		return neg_errno();
	return 0;
}

int fsrv_op_lseek(struct fuse_call *c)
{
	const struct fuse_lseek_in *in = fsrv_take(c, sizeof(*in));
	struct fuse_handle *h = fsrv_handle(c->s, in->fh, false);
	struct fuse_lseek_out o;
	off_t off;

	if (!h)
		return -EBADF;
	if (in->offset > (u64)INT64_MAX || (in->whence != SEEK_DATA && in->whence != SEEK_HOLE))
		return -EINVAL;
	/* The descriptor's own offset is used by nothing else (reads and writes are pread and
	 * pwrite). */
	off = lseek(h->fd, (off_t)in->offset, (int)in->whence);
	if (off < 0)
		return neg_errno();
	o.offset = (u64)off;
	fsrv_put(c, &o, sizeof(o));
	return 0;
}

int fsrv_op_copy_file_range(struct fuse_call *c)
{
	const struct fuse_copy_file_range_in *in = fsrv_take(c, sizeof(*in));
	struct fuse_handle *hi = fsrv_handle(c->s, in->fh_in, false);
	struct fuse_handle *ho = fsrv_handle(c->s, in->fh_out, false);
	struct fuse_write_out o = { 0 };
	loff_t off_in = (loff_t)in->off_in, off_out = (loff_t)in->off_out;
	ssize_t n;

	if (!hi || !ho)
		return -EBADF;
	if (in->off_in > (u64)INT64_MAX || in->off_out > (u64)INT64_MAX || in->flags)
		return -EINVAL;
	n = copy_file_range(hi->fd, &off_in, ho->fd, &off_out,
			    (size_t)MIN(in->len, (u64)FSRV_COPY_MAX), 0);
	if (n < 0)
		return neg_errno();
	o.size = (u32)n;
	c->s->st.write_bytes += (u64)n;
	fsrv_put(c, &o, sizeof(o));
	return 0;
}

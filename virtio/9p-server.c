/* The 9P2000.L server behind virtio-9p: decodes T-messages against one shared directory, every host path resolved beneath it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <linux/magic.h>
#include <linux/openat2.h>

#include "lkvm/iov.h"
#include "lkvm/p9.h"
#include "9p-priv.h"

/*
 * How the share is kept closed (the guest is hostile):
 * - A fid holds an O_PATH descriptor of what it names, and is never reached by a path: a
 *   rename elsewhere cannot make it name something else, and nothing is ever looked up from
 *   the host's "/" (the path kept beside it is a snapshot's record, 9p-priv.h).
 * - Every name a guest sends is one component: 1..NAME_MAX bytes, no '/', no NUL, never
 *   "." and ".." only where a walk allows it. Each is looked up relative to its directory's
 *   descriptor by openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) or
 *   by an *at() call that does not follow a final symlink (mkdirat, unlinkat, renameat,
 *   symlinkat, linkat, mknodat): one component cannot leave its directory.
 * - The server never follows a symlink: walking onto one gives a fid for the link itself
 *   (the client reads it with Treadlink and resolves it in its own namespace); opening it,
 *   or walking through it, fails (ELOOP, ENOTDIR).
 * - ".." at the share's root stays there; elsewhere its result is checked to lie beneath
 *   the root (walking up to it), which also catches a directory moved out of the share.
 * - Only directories and regular files are opened. A FIFO would block the server and a
 *   device node would hand the guest a host device, so Tlopen refuses them (and Tmknod
 *   creates none), whatever capabilities lkvm still holds.
 * - Mounts of kernel interfaces inside the share (the host's /proc, /sys, debugfs... when
 *   the share is "/") are opaque: their root can be looked up and stat'ed, so the guest can
 *   mount its own over it, but not opened, listed or walked into.
 * - No set-user-ID or set-group-ID file is made or chmod'ed into being (guest_mode()), no
 *   xattr written (file capabilities), no device node created.
 * - A read-only share refuses with EROFS every request that would change the host, before
 *   looking at the fid (table flag `writes`), and Tlopen with write access or O_TRUNC.
 * - Every count is clamped to msize and to the buffers the transport gave, every offset
 *   checked against off_t, and the fid table is bounded (ENFILE past it).
 * Errors are the host's errno values: 9P2000.L's Rlerror carries Linux errno numbers, and
 * host and guest are both Linux on x86-64, so they pass through unchanged.
 */

#define RESOLVE_FLAGS (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
#define P9_TBUF_SIZE 8192 /* largest body we parse: Tsymlink with a PATH_MAX target is ~4.4 KiB */
#define P9_IOHDR (P9_HDR_SIZE + 4) /* Rread/Rreaddir: header + count[4] */
#define P9_TWRITE_FIXED 16	   /* Twrite: fid[4] offset[8] count[4], then the data */
#define P9_QID_SIZE 13
#define P9_QID_INO_BITS 48
#define P9_UP_MAX 4096 /* directory levels a ".." check climbs before refusing */

/* Reply bodies (after the header) of a fixed largest size, the room checked before acting:
 * Rversion (msize, "9P2000.L" or the shorter "unknown"), Rlopen and Rlcreate (qid, iounit),
 * Rgetattr, Rstatfs, and Rgetlock up to its client id's bytes. */
#define P9_RVERSION_MAX (4 + 2 + sizeof(P9_VERSION_L) - 1)
#define P9_ROPEN_SIZE (P9_QID_SIZE + 4)
#define P9_RGETATTR_SIZE (8 + P9_QID_SIZE + 3 * 4 + 15 * 8)
#define P9_RSTATFS_SIZE (2 * 4 + 6 * 8 + 4)
#define P9_RGETLOCK_FIXED (1 + 8 + 8 + 4 + 2)

/* One request being answered. */
struct p9_call {
	struct p9_server *s;
	u8 type;
	const u8 *in; /* the body copy, consumed from the front */
	size_t in_left;
	bool in_short; /* a field ran past the end of the message */
	int bad;       /* the first string refused (too long, empty, a NUL or '/' inside...) */
	u8 *out;       /* the reply body (after its header) */
	size_t out_len, out_cap;
	bool out_over;
	const struct iovec *req, *resp;
	int req_cnt, resp_cnt;
	size_t body;	 /* the request body's length as its size field says */
	size_t data_len; /* reply bytes written straight into resp after out (Rread data) */
};

struct p9_qid {
	u8 type;
	u32 version;
	u64 path;
};

/* ---- message decoding and encoding ---- */

static u64 get(struct p9_call *c, unsigned bytes)
{
	u64 v = 0;

	if (c->in_left < bytes) {
		c->in_short = true;
		c->in_left = 0;
		return 0;
	}
	for (unsigned i = 0; i < bytes; i++)
		v |= (u64)c->in[i] << (8 * i);
	c->in += bytes;
	c->in_left -= bytes;
	return v;
}

static u8 get8(struct p9_call *c)
{
	return (u8)get(c, 1);
}

static u16 get16(struct p9_call *c)
{
	return (u16)get(c, 2);
}

static u32 get32(struct p9_call *c)
{
	return (u32)get(c, 4);
}

static u64 get64(struct p9_call *c)
{
	return get(c, 8);
}

/* A string's bytes inside the body copy (not NUL-terminated); NULL when it runs past the end. */
static const char *get_str(struct p9_call *c, u16 *len)
{
	const char *p;

	*len = get16(c);
	if (c->in_short || *len > c->in_left) {
		c->in_short = true;
		c->in_left = 0;
		*len = 0;
		return NULL;
	}
	p = (const char *)c->in;
	c->in += *len;
	c->in_left -= *len;
	return p;
}

/* Whatever was wrong with the request's fields, or 0: the message ended early (-EPROTO),
 * else the first string refused. Handlers parse every field, then look here (fid_req does). */
static int parse_error(const struct p9_call *c)
{
	return c->in_short ? -EPROTO : c->bad;
}

static void refuse(struct p9_call *c, char *buf, int err)
{
	buf[0] = '\0';
	if (!c->bad)
		c->bad = err;
}

/*
 * A string into buf (NUL-terminated), refused (parse_error()) beyond max bytes
 * (-ENAMETOOLONG), with a NUL inside (C would cut it short) or empty when !may_be_empty
 * (-EINVAL).
 */
static void get_cstr(struct p9_call *c, char *buf, size_t max, bool may_be_empty)
{
	u16 len;
	const char *p = get_str(c, &len);

	if (!p)
		buf[0] = '\0'; /* in_short says so */
	else if (len > max)
		refuse(c, buf, -ENAMETOOLONG);
	else if ((!len && !may_be_empty) || memchr(p, '\0', len))
		refuse(c, buf, -EINVAL);
	else {
		memcpy(buf, p, len);
		buf[len] = '\0';
	}
}

/* One path component: not empty, no '/', not "." nor ".." (unless dotdot_ok, for Twalk). */
static void get_name(struct p9_call *c, char name[NAME_MAX + 1], bool dotdot_ok)
{
	get_cstr(c, name, NAME_MAX, false);
	if (strchr(name, '/') || !strcmp(name, ".") || (!dotdot_ok && !strcmp(name, "..")))
		refuse(c, name, -EINVAL);
}

static void put(struct p9_call *c, u64 v, unsigned bytes)
{
	if (c->out_cap - c->out_len < bytes) {
		c->out_over = true;
		return;
	}
	for (unsigned i = 0; i < bytes; i++)
		c->out[c->out_len++] = (u8)(v >> (8 * i));
}

static void put8(struct p9_call *c, u8 v)
{
	put(c, v, 1);
}

static void put16(struct p9_call *c, u16 v)
{
	put(c, v, 2);
}

static void put32(struct p9_call *c, u32 v)
{
	put(c, v, 4);
}

static void put64(struct p9_call *c, u64 v)
{
	put(c, v, 8);
}

static void put_str(struct p9_call *c, const char *p, size_t len)
{
	if (len > 0xffff || c->out_cap - c->out_len < 2 + len) {
		c->out_over = true;
		return;
	}
	put16(c, (u16)len);
	memcpy(c->out + c->out_len, p, len);
	c->out_len += len;
}

static void put_qid(struct p9_call *c, const struct p9_qid *q)
{
	put8(c, q->type);
	put32(c, q->version);
	put64(c, q->path);
}

/* ---- qids ---- */

/*
 * qid.path must be unique across the share, but a share spans mounts whose inode numbers
 * overlap: each host device met gets an index, put above the inode's 48 bits (the share's
 * own device is index 0, so its qid paths are its inode numbers). Past P9_QID_DEVS devices,
 * or for an inode number of 48 bits or more, the path is folded into prefix 0xffff:
 * unique in practice, not guaranteed.
 */
static u64 qid_path(struct p9_server *s, dev_t dev, u64 ino)
{
	const u64 mask = (1ull << P9_QID_INO_BITS) - 1;
	u32 i;

	for (i = 0; i < s->ndevs && s->devs[i] != dev; i++)
		;
	if (i == s->ndevs && i < P9_QID_DEVS)
		s->devs[s->ndevs++] = dev;
	if (i < s->ndevs && ino <= mask)
		return (u64)i << P9_QID_INO_BITS | ino;
	return 0xffffull << P9_QID_INO_BITS | ((ino ^ (u64)dev * 0x9e3779b97f4a7c15ull) & mask);
}

static u8 qid_type(u32 mode)
{
	return S_ISDIR(mode) ? P9_QTDIR : S_ISLNK(mode) ? P9_QTSYMLINK : P9_QTFILE;
}

/* version: the modification time, as kvmtool and QEMU do (cached clients notice changes). */
static void qid_of(struct p9_server *s, const struct stat *st, struct p9_qid *q)
{
	q->type = qid_type(st->st_mode);
	q->version = (u32)st->st_mtim.tv_sec;
	q->path = qid_path(s, st->st_dev, st->st_ino);
}

/* ---- host descriptors ---- */

int p9_fd_stat(int fd, struct stat *st)
{
	return fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ? neg_errno() : 0;
}

/* One validated component beneath dfd; never follows a symlink (p9.h: exposed for tests). */
int p9_open_beneath(int dfd, const char *name, u64 flags, u64 mode)
{
	struct open_how how = {
		.flags = flags | O_NOFOLLOW | O_CLOEXEC,
		.mode = mode,
		.resolve = RESOLVE_FLAGS,
	};
	long fd = syscall(SYS_openat2, dfd, name, &how, sizeof(how));

	return fd < 0 ? neg_errno() : (int)fd;
}

/* The magic link naming fd in /proc/self/fd (relative to s->proc_fd). */
static void proc_name(char buf[16], int fd)
{
	snprintf(buf, 16, "%d", fd);
}

/* File systems that are kernel interfaces, not files: opaque when met inside a share. */
static const long kernel_fs_types[] = {
	PROC_SUPER_MAGIC,	  SYSFS_MAGIC,	      DEBUGFS_MAGIC,	  TRACEFS_MAGIC,
	SECURITYFS_MAGIC,	  BPF_FS_MAGIC,	      CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC,
	EFIVARFS_MAGIC,		  PSTOREFS_MAGIC,     SELINUX_MAGIC,	  SMACK_MAGIC,
	BINFMTFS_MAGIC,		  DEVPTS_SUPER_MAGIC, NSFS_MAGIC,	  0x62656570 /* configfs */,
	0x65735543 /* fusectl */,
};

static bool kernel_fs(int fd)
{
	struct statfs sfs;

	if (fstatfs(fd, &sfs) < 0)
		return true; /* cannot tell: do not expose it */
	for (size_t i = 0; i < ARRAY_SIZE(kernel_fs_types); i++)
		if (sfs.f_type == kernel_fs_types[i])
			return true;
	return false;
}

/* Fill n for fd (owned by n from now on) reached from `from`. */
static void node_set(struct p9_server *s, struct p9_node *n, int fd, const struct stat *st,
		     const struct p9_node *from)
{
	n->fd = fd;
	n->mode = st->st_mode;
	n->dev = st->st_dev;
	n->ino = st->st_ino;
	/* Only a device change can enter another file system: statfs then, not on every step. */
	n->opaque = st->st_dev != s->root.dev &&
		    (st->st_dev == from->dev ? from->opaque : kernel_fs(fd));
}

static bool is_root(const struct p9_server *s, dev_t dev, ino_t ino)
{
	return dev == s->root.dev && ino == s->root.ino;
}

/*
 * Is the directory fd (stat st) the share's root or beneath it? Climbs by ".." until it
 * meets the root (yes) or the top of the host's tree, or gives up after P9_UP_MAX levels
 * (no). Only ".." walks pay for this; Linux's client never sends them.
 */
static bool beneath_root(const struct p9_server *s, int fd, const struct stat *st)
{
	struct stat cur = *st, up;
	int dfd = fd;
	bool ok = false;

	for (int level = 0; level < P9_UP_MAX; level++) {
		int ufd;

		if (is_root(s, cur.st_dev, cur.st_ino)) {
			ok = true;
			break;
		}
		ufd = openat(dfd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (dfd != fd)
			close(dfd);
		dfd = ufd;
		if (ufd < 0 || p9_fd_stat(ufd, &up) < 0)
			break;
		if (up.st_dev == cur.st_dev && up.st_ino == cur.st_ino)
			break; /* the host's top, and the share's root was not on the way */
		cur = up;
	}
	if (dfd >= 0 && dfd != fd)
		close(dfd);
	return ok;
}

/* One walk step from `from` by `name` (a validated component, or ".."). */
int p9_walk_one(struct p9_server *s, const struct p9_node *from, const char *name,
		struct p9_node *to, struct stat *st)
{
	bool up = !strcmp(name, "..");
	int fd, ret;

	if (up && is_root(s, from->dev, from->ino))
		fd = fcntl(s->root_fd, F_DUPFD_CLOEXEC, 0); /* ".." at the root is the root */
	else if (up)
		fd = openat(from->fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
	else if (from->opaque)
		return -EACCES;
	else
		fd = p9_open_beneath(from->fd, name, O_PATH, 0);
	if (fd < 0)
		return up ? neg_errno() : fd;
	ret = p9_fd_stat(fd, st);
	if (!ret && up && !beneath_root(s, fd, st))
		ret = -EACCES;
	if (ret) {
		close(fd);
		return ret;
	}
	node_set(s, to, fd, st, from);
	return 0;
}

/*
 * openat for I/O; on a read-only share with O_NOATIME, so that the guest's reads leave the
 * host's access times as they were (a share is often the host's root, read-only, and every
 * file a guest boot reads would look used). O_NOATIME is refused with EPERM unless we own
 * the file or hold CAP_FOWNER (lkvm drops its capabilities once set up, and may run as
 * anyone): then one more try without it, so someone else's file is still read, its atime
 * moving as for any reader. Another EPERM is the same answer again.
 */
static int open_io(struct p9_server *s, int dfd, const char *name, int flags)
{
	int fd = -1;

	if (s->readonly)
		fd = openat(dfd, name, flags | O_NOATIME);
	if (!s->readonly || (fd < 0 && errno == EPERM))
		fd = openat(dfd, name, flags);
	return fd < 0 ? neg_errno() : fd;
}

/*
 * Open what n names for I/O: a directory through "." beneath it, a regular file through
 * its /proc/self/fd magic link (the only way to reopen an O_PATH descriptor; it names the
 * same inode, whatever happened to its path). Nothing else is opened.
 */
int p9_node_open(struct p9_server *s, const struct p9_node *n, int flags)
{
	char name[16];

	if (n->opaque)
		return -EACCES;
	if (S_ISDIR(n->mode)) {
		if ((flags & O_ACCMODE) != O_RDONLY)
			return -EISDIR;
		return open_io(s, n->fd, ".", (flags & ~O_TRUNC) | O_DIRECTORY | O_CLOEXEC);
	}
	if (!S_ISREG(n->mode))
		return S_ISLNK(n->mode) ? -ELOOP : -EPERM;
	if (flags & O_DIRECTORY)
		return -ENOTDIR;
	proc_name(name, n->fd);
	return open_io(s, s->proc_fd, name, flags | O_CLOEXEC | O_NOCTTY);
}

/* ---- the fid table ---- */

static u32 fid_slot(const struct p9_server *s, u32 id)
{
	/* murmur3's finaliser over a per-server random seed: a guest cannot aim at one chain */
	u32 h = id ^ s->seed;

	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h & (s->nslots - 1);
}

struct p9_fid *p9_fid_find(struct p9_server *s, u32 id)
{
	if (!s->nslots)
		return NULL;
	/* Terminates: the table is never more than half full. */
	for (u32 i = fid_slot(s, id);; i = (i + 1) & (s->nslots - 1)) {
		if (s->fids[i].kind == FID_FREE)
			return NULL;
		if (s->fids[i].id == id)
			return &s->fids[i];
	}
}

static struct p9_fid *fid_place(struct p9_server *s, u32 id)
{
	u32 i = fid_slot(s, id);

	while (s->fids[i].kind != FID_FREE)
		i = (i + 1) & (s->nslots - 1);
	return &s->fids[i];
}

static int fid_grow(struct p9_server *s)
{
	struct p9_fid *old = s->fids;
	u32 n = s->nslots;

	s->fids = calloc(n ? 2 * (size_t)n : 16, sizeof(*s->fids));
	if (!s->fids) {
		s->fids = old;
		return -ENOMEM;
	}
	s->nslots = n ? 2 * n : 16;
	for (u32 i = 0; i < n; i++)
		if (old[i].kind != FID_FREE)
			*fid_place(s, old[i].id) = old[i];
	free(old);
	return 0;
}

/* Room for one more fid? (Checked before work that would be wasted.) */
static int fid_room(const struct p9_server *s)
{
	return s->nfids < s->max_fids ? 0 : -ENFILE;
}

/* 9p-priv.h. */
int p9_fid_add(struct p9_server *s, u32 id, enum fid_kind kind, const struct p9_node *n, char *path)
{
	struct p9_fid *f;
	int ret = fid_room(s);

	if (!ret && 2 * ((u64)s->nfids + 1) > s->nslots)
		ret = fid_grow(s);
	if (ret) {
		free(path);
		return ret;
	}
	f = fid_place(s, id);
	*f = (struct p9_fid){ .id = id, .kind = kind, .ofd = -1, .node = *n, .path = path };
	s->nfids++;
	return 0;
}

static void fid_close(struct p9_fid *f)
{
	if (f->node.fd >= 0)
		close(f->node.fd);
	if (f->ofd >= 0)
		close(f->ofd);
	f->node.fd = f->ofd = -1;
	free(f->path);
	f->path = NULL;
}

/* Clunk f. Pointers into the table are stale afterwards. */
static void fid_del(struct p9_server *s, struct p9_fid *f)
{
	u32 mask = s->nslots - 1, i = (u32)(f - s->fids), j = i;

	fid_close(f);
	/* Backward-shift deletion: pull later members of the probe run into the hole. */
	for (;;) {
		u32 k;

		j = (j + 1) & mask;
		if (s->fids[j].kind == FID_FREE)
			break;
		k = fid_slot(s, s->fids[j].id);
		/* Leave j where it is when its home slot k lies cyclically in (i, j]. */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		s->fids[i] = s->fids[j];
		i = j;
	}
	s->fids[i].kind = FID_FREE;
	s->nfids--;
}

void p9_fid_clear(struct p9_server *s)
{
	for (u32 i = 0; i < s->nslots; i++)
		if (s->fids[i].kind != FID_FREE)
			fid_close(&s->fids[i]);
	free(s->fids);
	s->fids = NULL;
	s->nslots = s->nfids = 0;
}

enum fid_want {
	FID_ANY,    /* any kind (clunk, read) */
	FID_NAMING, /* a file, not an xattr fid */
	FID_INSIDE, /* and one whose contents may be touched (opened, walked into, created in,
		     * changed): not an opaque kernel-interface mount */
};

/* Once a request is parsed: the fid it names, or NULL with *err (parse_error(), -EBADF for
 * no such fid, -EACCES for an opaque one). */
static struct p9_fid *fid_req(struct p9_call *c, u32 id, enum fid_want want, int *err)
{
	struct p9_fid *f = parse_error(c) ? NULL : p9_fid_find(c->s, id);

	*err = parse_error(c) ? parse_error(c) : -EBADF;
	if (!f || (want != FID_ANY && f->kind != FID_FILE))
		return NULL;
	if (want == FID_INSIDE && f->node.opaque) {
		*err = -EACCES;
		return NULL;
	}
	return f;
}

/* A new fid number must be free (the fid being walked from excepted). */
static int newfid_ok(struct p9_server *s, u32 id)
{
	if (id == P9_NOFID || p9_fid_find(s, id))
		return -EINVAL;
	return fid_room(s);
}

/*
 * Room for a reply body of n bytes? Looked at before an operation acts: a request carried
 * out, then answered with an error because the answer did not fit, would leave the guest
 * believing nothing happened (a file it did not make, a fid it does not know of). The
 * ops table gives each operation's largest reply; Twalk, Treadlink and Tgetlock, whose
 * reply size the request (or the link) decides, ask here themselves.
 */
static int room(const struct p9_call *c, size_t n)
{
	return n <= c->out_cap ? 0 : -EMSGSIZE;
}

/* ---- operations: each parses its body, returns 0 with the reply body in c->out or -errno ---- */

static int op_version(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 msize = get32(c);
	u16 len;
	const char *v = get_str(c, &len);

	if (!v)
		return -EPROTO;
	if (msize < P9_MSIZE_MIN)
		return -EINVAL;
	/* A new session: whatever the old one held goes. */
	p9_fid_clear(s);
	msize = MIN(msize, s->max_msize);
	if (len == strlen(P9_VERSION_L) && !memcmp(v, P9_VERSION_L, len)) {
		s->msize = msize;
		put32(c, msize);
		put_str(c, P9_VERSION_L, strlen(P9_VERSION_L));
	} else {
		s->msize = 0;
		put32(c, msize);
		put_str(c, "unknown", 7);
	}
	return 0;
}

static int op_attach(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 fid = get32(c);
	struct p9_node n;
	struct p9_qid q;
	struct stat st;
	u16 len;
	int ret;

	get32(c);	  /* afid: no authentication */
	get_str(c, &len); /* uname, aname, n_uname: the host's credentials apply (p9.h) */
	get_str(c, &len);
	get32(c);
	if (c->in_short)
		return -EPROTO;
	ret = newfid_ok(s, fid);
	if (ret)
		return ret;
	n = s->root;
	n.fd = fcntl(s->root_fd, F_DUPFD_CLOEXEC, 0);
	if (n.fd < 0)
		return neg_errno();
	ret = p9_fd_stat(n.fd, &st);
	if (!ret)
		ret = p9_fid_add(s, fid, FID_FILE, &n, strdup(""));
	if (ret) {
		close(n.fd);
		return ret;
	}
	qid_of(s, &st, &q);
	put_qid(c, &q);
	return 0;
}

/* walk_bind: newfid (fid itself when they are equal) names cur, the node a whole walk from f
 * by n names reached (a copy of f's own when no name was walked). */
static int walk_bind(struct p9_server *s, struct p9_fid *f, u32 fid, u32 newfid,
		     struct p9_node *cur, const char (*names)[NAME_MAX + 1], int n)
{
	char *path;
	int ret;

	if (!n)
		cur->fd = fcntl(f->node.fd, F_DUPFD_CLOEXEC, 0);
	if (cur->fd < 0)
		return neg_errno();
	path = p9_path_walk(f->path, names, n);
	if (newfid == fid) {
		fid_close(f);
		f->node = *cur;
		f->path = path;
	} else {
		ret = p9_fid_add(s, newfid, FID_FILE, cur, path);
		if (ret) {
			close(cur->fd);
			return ret;
		}
	}
	return 0;
}

static int op_walk(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 fid = get32(c), newfid = get32(c);
	u16 nwname = get16(c);
	char names[P9_MAXWELEM][NAME_MAX + 1];
	struct p9_qid qids[P9_MAXWELEM];
	struct p9_node cur, next;
	struct p9_fid *f;
	struct stat st;
	int i, ret = 0;

	if (nwname > P9_MAXWELEM)
		return c->in_short ? -EPROTO : -EINVAL;
	for (i = 0; i < nwname; i++)
		get_name(c, names[i], true);
	f = fid_req(c, fid, FID_NAMING, &ret);
	if (!f)
		return ret;
	/* Room for every qid asked for: a walk that stops early answers fewer. */
	ret = room(c, 2 + (size_t)nwname * P9_QID_SIZE);
	if (!ret && newfid != fid)
		ret = newfid_ok(s, newfid);
	if (ret)
		return ret;
	cur = f->node;
	for (i = 0; i < nwname; i++) {
		ret = p9_walk_one(s, &cur, names[i], &next, &st);
		if (ret)
			break;
		if (cur.fd != f->node.fd)
			close(cur.fd);
		cur = next;
		qid_of(s, &st, &qids[i]);
	}
	if (i == 0 && nwname)
		return ret; /* the first name failed: an error, not an empty Rwalk */
	if (i < nwname) {
		/* Partly walked: say how far, newfid is not made. */
		close(cur.fd);
	} else {
		ret = walk_bind(s, f, fid, newfid, &cur, names, nwname);
		if (ret)
			return ret;
	}
	put16(c, (u16)i);
	for (int k = 0; k < i; k++)
		put_qid(c, &qids[k]);
	return 0;
}

/* Tlopen/Tlcreate flags to host open flags (what is not listed is dropped: creating is
 * Tlcreate's alone, the descriptor is ours (CLOEXEC, NOCTTY), symlinks are never followed,
 * O_DIRECT's alignment and O_ASYNC's signals are the guest's business, not the host's,
 * O_NOATIME needs ownership (a read-only share asks for it itself: open_io()), O_NONBLOCK
 * is moot for the files we open). */
static const struct {
	u32 p9;
	int host;
} open_flags[] = {
	{ P9_DOTL_TRUNC, O_TRUNC }, { P9_DOTL_APPEND, O_APPEND },	{ P9_DOTL_DSYNC, O_DSYNC },
	{ P9_DOTL_SYNC, O_SYNC },   { P9_DOTL_DIRECTORY, O_DIRECTORY },
};

/* Host flags for p9 open flags, or -errno (EROFS on a read-only share for anything that
 * writes). */
int p9_host_open_flags(struct p9_server *s, u32 p9)
{
	static const int acc[] = { O_RDONLY, O_WRONLY, O_RDWR };
	int host;

	if ((p9 & P9_DOTL_ACCMODE) == P9_DOTL_NOACCESS)
		return -EINVAL;
	host = acc[p9 & P9_DOTL_ACCMODE];
	for (size_t i = 0; i < ARRAY_SIZE(open_flags); i++)
		if (p9 & open_flags[i].p9)
			host |= open_flags[i].host;
	if (s->readonly && ((host & O_ACCMODE) != O_RDONLY || (host & O_TRUNC)))
		return -EROFS;
	return host;
}

static int op_lopen(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 fid = get32(c), flags = get32(c);
	struct p9_fid *f;
	struct p9_qid q;
	struct stat st;
	int host, ret;

	f = fid_req(c, fid, FID_NAMING, &ret);
	if (!f)
		return ret;
	if (f->ofd >= 0)
		return -EINVAL; /* already open */
	host = p9_host_open_flags(s, flags);
	if (host < 0)
		return host;
	ret = p9_node_open(s, &f->node, host);
	if (ret < 0)
		return ret;
	f->ofd = ret;
	f->oflags = flags & P9_FID_REOPEN_FLAGS;
	ret = p9_fd_stat(f->ofd, &st);
	if (ret)
		return ret;
	qid_of(s, &st, &q);
	put_qid(c, &q);
	put32(c, 0); /* iounit: msize decides */
	return 0;
}

/*
 * The permission bits a guest may give a host file: never set-user-ID or set-group-ID on a
 * file (lkvm may run as root, and such a file in a share would run with lkvm's credentials
 * for whoever on the host executes it); a directory keeps set-group-ID (group inheritance).
 */
static u32 guest_mode(u32 mode, bool dir)
{
	return mode & (dir ? 03777u : 01777u);
}

/*
 * A new file gets exactly the mode the guest asked for (guest_mode() applied): our umask
 * does not take bits away (the guest applied its own), nor does mkdir drop set-group-ID;
 * a directory keeps the set-group-ID it inherited. fd: the new file, never a symlink.
 */
static int fix_mode(struct p9_server *s, int fd, const struct stat *st, u32 mode)
{
	u32 want = mode | (S_ISDIR(st->st_mode) ? st->st_mode & S_ISGID : 0);
	char name[16];

	if ((st->st_mode & 07777) == want)
		return 0;
	proc_name(name, fd);
	return fchmodat(s->proc_fd, name, want, 0) < 0 ? neg_errno() : 0;
}

/* Tlcreate done: directory fid f now names the new file `name` (its O_PATH descriptor pfd,
 * open as fd with Tlcreate's flags). */
static void created_open(struct p9_server *s, struct p9_fid *f, int pfd, int fd,
			 const struct stat *st, u32 flags, const char (*name)[NAME_MAX + 1])
{
	struct p9_node dir = f->node;
	char *path = p9_path_walk(f->path, name, 1);

	close(dir.fd);
	node_set(s, &f->node, pfd, st, &dir);
	f->ofd = fd;
	f->oflags = flags & P9_FID_REOPEN_FLAGS & ~P9_DOTL_DIRECTORY;
	free(f->path);
	f->path = path;
}

static int op_lcreate(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 dfid = get32(c), flags, mode;
	char name[NAME_MAX + 1];
	struct p9_node n;
	struct p9_fid *f;
	struct p9_qid q;
	struct stat st;
	int host, fd, pfd, ret;

	get_name(c, name, false);
	flags = get32(c);
	mode = get32(c);
	get32(c); /* gid: the host's credentials apply */
	f = fid_req(c, dfid, FID_INSIDE, &ret);
	if (!f)
		return ret;
	if (f->ofd >= 0)
		return -EINVAL;
	host = p9_host_open_flags(s, flags);
	if (host < 0)
		return host;
	host &= ~O_DIRECTORY;
	mode = guest_mode(mode, false);
	fd = p9_open_beneath(f->node.fd, name, (u64)host | O_CREAT | O_EXCL, mode);
	if (fd == -EEXIST && !(flags & P9_DOTL_EXCL)) {
		/* open(O_CREAT) of a file that appeared meanwhile: open it, if it is a file. */
		ret = p9_walk_one(s, &f->node, name, &n, &st);
		if (ret)
			return ret;
		fd = S_ISDIR(n.mode) ? -EISDIR : p9_node_open(s, &n, host);
		close(n.fd);
		if (fd < 0)
			return fd;
		ret = p9_fd_stat(fd, &st);
	} else {
		if (fd < 0)
			return fd;
		ret = p9_fd_stat(fd, &st);
		if (!ret)
			ret = fix_mode(s, fd, &st, mode);
	}
	pfd = ret ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (!ret && pfd < 0)
		ret = neg_errno();
	if (ret) {
		close(fd);
		return ret;
	}
	created_open(s, f, pfd, fd, &st, flags, &name);
	qid_of(s, &st, &q);
	put_qid(c, &q);
	put32(c, 0);
	return 0;
}

/* After creating `name` in dfd: its qid, and (mode != -1) the permission bits fixed. */
static int created(struct p9_call *c, int dfd, const char *name, s64 mode)
{
	struct p9_qid q;
	struct stat st;
	int fd = p9_open_beneath(dfd, name, O_PATH, 0), ret;

	if (fd < 0)
		return fd;
	ret = p9_fd_stat(fd, &st);
	if (!ret && mode >= 0)
		ret = fix_mode(c->s, fd, &st, (u32)mode);
	close(fd);
	if (ret)
		return ret;
	qid_of(c->s, &st, &q);
	put_qid(c, &q);
	return 0;
}

/*
 * Tmkdir (dir) and Tmknod: `name` in dfid, a directory, or a FIFO, socket or empty file;
 * never a device node (one in a share would give whoever reaches it on the host the device).
 */
static int make_node(struct p9_call *c, u32 dfid, const char *name, u32 mode, bool dir)
{
	u32 type = mode & S_IFMT;
	struct p9_fid *f;
	int ret;

	f = fid_req(c, dfid, FID_INSIDE, &ret);
	if (!f)
		return ret;
	if (type == S_IFCHR || type == S_IFBLK)
		return -EPERM;
	mode = guest_mode(mode, dir);
	if (dir)
		ret = mkdirat(f->node.fd, name, mode);
	else if (type == S_IFIFO || type == S_IFSOCK || type == S_IFREG || type == 0)
		ret = mknodat(f->node.fd, name, (type ? type : S_IFREG) | mode, 0);
	else
		return -EINVAL;
	if (ret < 0)
		return neg_errno();
	return created(c, f->node.fd, name, mode);
}

static int op_mkdir(struct p9_call *c)
{
	u32 dfid = get32(c), mode;
	char name[NAME_MAX + 1];

	get_name(c, name, false);
	mode = get32(c);
	get32(c); /* gid */
	return make_node(c, dfid, name, mode & 07777, true);
}

static int op_mknod(struct p9_call *c)
{
	u32 dfid = get32(c), mode;
	char name[NAME_MAX + 1];

	get_name(c, name, false);
	mode = get32(c);
	get32(c); /* major, minor: no device nodes */
	get32(c);
	get32(c); /* gid */
	return make_node(c, dfid, name, mode, false);
}

static int op_symlink(struct p9_call *c)
{
	u32 dfid = get32(c);
	char name[NAME_MAX + 1], target[PATH_MAX];
	struct p9_fid *f;
	int ret;

	get_name(c, name, false);
	get_cstr(c, target, PATH_MAX - 1, false); /* only text to us: we never follow it */
	get32(c);				  /* gid */
	f = fid_req(c, dfid, FID_INSIDE, &ret);
	if (!f)
		return ret;
	if (symlinkat(target, f->node.fd, name) < 0)
		return neg_errno();
	return created(c, f->node.fd, name, -1);
}

static int op_link(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 dfid = get32(c), fid = get32(c);
	char name[NAME_MAX + 1], src[16];
	struct p9_fid *d, *f;
	int ret;

	get_name(c, name, false);
	d = fid_req(c, dfid, FID_INSIDE, &ret);
	f = d ? fid_req(c, fid, FID_INSIDE, &ret) : NULL;
	if (!f)
		return ret;
	/* Through the magic link: exactly the fid's inode, without CAP_DAC_READ_SEARCH. */
	proc_name(src, f->node.fd);
	return linkat(s->proc_fd, src, d->node.fd, name, AT_SYMLINK_FOLLOW) < 0 ? neg_errno() : 0;
}

static int op_unlinkat(struct p9_call *c)
{
	u32 dfid = get32(c), flags;
	char name[NAME_MAX + 1];
	struct p9_fid *f;
	int ret;

	get_name(c, name, false);
	flags = get32(c);
	f = fid_req(c, dfid, FID_INSIDE, &ret);
	if (!f)
		return ret;
	if (flags & ~P9_DOTL_AT_REMOVEDIR)
		return -EINVAL;
	return unlinkat(f->node.fd, name, flags ? AT_REMOVEDIR : 0) < 0 ? neg_errno() : 0;
}

static int op_renameat(struct p9_call *c)
{
	u32 ofid = get32(c), nfid;
	char oname[NAME_MAX + 1], nname[NAME_MAX + 1], *from, *to;
	struct p9_fid *o, *n;
	int ret;

	get_name(c, oname, false);
	nfid = get32(c);
	get_name(c, nname, false);
	o = fid_req(c, ofid, FID_INSIDE, &ret);
	n = o ? fid_req(c, nfid, FID_INSIDE, &ret) : NULL;
	if (!n)
		return ret;
	if (renameat(o->node.fd, oname, n->node.fd, nname) < 0)
		return neg_errno();
	from = p9_path_walk(o->path, &oname, 1);
	to = p9_path_walk(n->path, &nname, 1);
	p9_paths_renamed(c->s, from, to);
	free(from);
	free(to);
	return 0;
}

/*
 * Trename and Tremove name a file by its fid, and a fid goes by no path: both answer
 * EOPNOTSUPP, on which Linux's client uses Trenameat and Tunlinkat (it tries those first
 * anyway). Tremove still clunks the fid, as 9P requires even when the removal fails.
 */
static int op_rename(struct p9_call *c)
{
	return -EOPNOTSUPP;
}

static int op_clunk(struct p9_call *c)
{
	u32 fid = get32(c);
	struct p9_fid *f;
	int ret;

	f = fid_req(c, fid, FID_ANY, &ret);
	if (!f)
		return ret;
	fid_del(c->s, f);
	return 0;
}

static int op_remove(struct p9_call *c)
{
	int ret = op_clunk(c);

	return ret ? ret : c->s->readonly ? -EROFS : -EOPNOTSUPP;
}

/* new_encode_dev(): the encoding Linux's client decodes st_rdev with. */
static u64 linux_dev(dev_t d)
{
	u64 ma = major(d), mi = minor(d);

	return (mi & 0xff) | (ma << 8) | ((mi & ~0xffull) << 12);
}

static int op_getattr(struct p9_call *c)
{
	u32 fid = get32(c);
	struct p9_fid *f;
	struct p9_qid q;
	struct stat st;
	int ret;

	get64(c); /* request_mask: the basic set is always there */
	f = fid_req(c, fid, FID_NAMING, &ret);
	if (!f)
		return ret;
	ret = p9_fd_stat(f->node.fd, &st);
	if (ret)
		return ret;
	qid_of(c->s, &st, &q);
	put64(c, P9_STATS_BASIC);
	put_qid(c, &q);
	put32(c, st.st_mode);
	put32(c, st.st_uid);
	put32(c, st.st_gid);
	put64(c, st.st_nlink);
	put64(c, linux_dev(st.st_rdev));
	put64(c, (u64)st.st_size);
	put64(c, (u64)st.st_blksize);
	put64(c, (u64)st.st_blocks);
	put64(c, (u64)st.st_atim.tv_sec);
	put64(c, (u64)st.st_atim.tv_nsec);
	put64(c, (u64)st.st_mtim.tv_sec);
	put64(c, (u64)st.st_mtim.tv_nsec);
	put64(c, (u64)st.st_ctim.tv_sec);
	put64(c, (u64)st.st_ctim.tv_nsec);
	for (int i = 0; i < 4; i++)
		put64(c, 0); /* btime (sec, nsec), gen, data_version: not in the basic set */
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
	if (!S_ISREG(f->node.mode))
		return S_ISDIR(f->node.mode) ? -EISDIR : -EINVAL;
	/* An open descriptor with write access does it; otherwise open one for the purpose. */
	if (f->ofd >= 0 && (fcntl(f->ofd, F_GETFL) & O_ACCMODE) != O_RDONLY)
		return ftruncate(f->ofd, (off_t)size) < 0 ? neg_errno() : 0;
	fd = p9_node_open(s, &f->node, O_WRONLY);
	if (fd < 0)
		return fd;
	if (ftruncate(fd, (off_t)size) < 0)
		ret = neg_errno();
	close(fd);
	return ret;
}

static int op_setattr(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 fid = get32(c), valid = get32(c), mode = get32(c), uid = get32(c), gid = get32(c);
	u64 size = get64(c), asec = get64(c), ansec = get64(c), msec = get64(c), mnsec = get64(c);
	struct timespec ts[2];
	struct p9_fid *f;
	char name[16];
	int ret;

	f = fid_req(c, fid, FID_INSIDE, &ret);
	if (!f)
		return ret;
	ret = set_time(&ts[0], valid & P9_SETATTR_ATIME, valid & P9_SETATTR_ATIME_SET, asec, ansec);
	if (!ret)
		ret = set_time(&ts[1], valid & P9_SETATTR_MTIME, valid & P9_SETATTR_MTIME_SET, msec,
			       mnsec);
	if (ret)
		return ret;
	/* Owner first (it clears set-id bits), then mode, size, and times last (truncating
	 * moves mtime). CTIME alone needs nothing: any change moves it. */
	if ((valid & (P9_SETATTR_UID | P9_SETATTR_GID)) &&
	    fchownat(f->node.fd, "", valid & P9_SETATTR_UID ? (uid_t)uid : (uid_t)-1,
		     valid & P9_SETATTR_GID ? (gid_t)gid : (gid_t)-1,
		     AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return neg_errno();
	if (valid & P9_SETATTR_MODE) {
		/* Through the magic link: the fid's own inode; symlinks have no mode to set. */
		if (S_ISLNK(f->node.mode))
			return -EOPNOTSUPP;
		proc_name(name, f->node.fd);
		if (fchmodat(s->proc_fd, name, guest_mode(mode, S_ISDIR(f->node.mode)), 0) < 0)
			return neg_errno();
	}
	if (valid & P9_SETATTR_SIZE) {
		ret = truncate_node(s, f, size);
		if (ret)
			return ret;
	}
	if ((valid & (P9_SETATTR_ATIME | P9_SETATTR_MTIME)) &&
	    utimensat(f->node.fd, "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return neg_errno();
	return 0;
}

static int op_readlink(struct p9_call *c)
{
	u32 fid = get32(c);
	char target[PATH_MAX];
	struct p9_fid *f;
	struct stat st;
	ssize_t n;
	int ret;

	f = fid_req(c, fid, FID_NAMING, &ret);
	if (!f)
		return ret;
	if (!S_ISLNK(f->node.mode))
		return -EINVAL;
	/* A link's size is its target's length: the room is known before reading it (which
	 * moves the link's atime). One changed meanwhile is caught by put_str all the same. */
	ret = p9_fd_stat(f->node.fd, &st);
	if (ret)
		return ret;
	if (st.st_size >= PATH_MAX)
		return -ENAMETOOLONG;
	ret = room(c, 2 + (size_t)st.st_size);
	if (ret)
		return ret;
	n = readlinkat(f->node.fd, "", target, sizeof(target));
	if (n < 0)
		return neg_errno();
	if ((size_t)n >= sizeof(target))
		return -ENAMETOOLONG;
	put_str(c, target, (size_t)n);
	return 0;
}

static int op_statfs(struct p9_call *c)
{
	u32 fid = get32(c);
	struct p9_fid *f;
	struct statfs sfs;
	int ret;

	f = fid_req(c, fid, FID_NAMING, &ret);
	if (!f)
		return ret;
	if (fstatfs(f->node.fd, &sfs) < 0)
		return neg_errno();
	put32(c, (u32)sfs.f_type);
	put32(c, (u32)sfs.f_bsize);
	put64(c, sfs.f_blocks);
	put64(c, sfs.f_bfree);
	put64(c, sfs.f_bavail);
	put64(c, sfs.f_files);
	put64(c, sfs.f_ffree);
	put64(c, (u64)(u32)sfs.f_fsid.__val[0] | (u64)(u32)sfs.f_fsid.__val[1] << 32);
	put32(c, (u32)sfs.f_namelen);
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
	u32 fid = get32(c);
	u64 off = get64(c);
	int ret;

	io->count = get32(c);
	io->f = fid_req(c, fid, want, &ret);
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

static int op_read(struct p9_call *c)
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
	put32(c, (u32)n);
	c->data_len = (size_t)n;
	c->s->st.reads++;
	c->s->st.read_bytes += (u64)n;
	return 0;
}

static int op_write(struct p9_call *c)
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
	put32(c, (u32)n);
	c->s->st.write_bytes += (u64)n;
	return 0;
}

static u8 dirent_qid_type(u8 d_type)
{
	return d_type == DT_DIR ? P9_QTDIR : d_type == DT_LNK ? P9_QTSYMLINK : P9_QTFILE;
}

static int op_readdir(struct p9_call *c)
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
	put32(c, 0); /* count, filled in below */
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
		if (len == 2 && !memcmp(d->d_name, "..", 2) && is_root(s, f->node.dev, f->node.ino))
			ino = s->root.ino;
		q.type = dirent_qid_type(d->d_type);
		q.version = 0;
		q.path = qid_path(s, f->node.dev, ino);
		put_qid(c, &q);
		put64(c, (u64)d->d_off);
		put8(c, d->d_type);
		put_str(c, d->d_name, len);
		used += need;
		pos += d->d_reclen;
	}
	if (!used && got > 0)
		return -EINVAL; /* count too small for the next entry (getdents64's answer too) */
	for (int i = 0; i < 4; i++)
		c->out[start - 4 + i] = (u8)(used >> (8 * i));
	return 0;
}

static int op_fsync(struct p9_call *c)
{
	u32 fid = get32(c), datasync = get32(c);
	struct p9_fid *f;
	int ret;

	f = fid_req(c, fid, FID_NAMING, &ret);
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
static int op_xattrwalk(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 fid = get32(c), newfid = get32(c);
	struct p9_node n = { .fd = -1 };
	u16 len;
	int ret;

	if (!get_str(c, &len))
		return -EPROTO;
	if (!fid_req(c, fid, FID_NAMING, &ret))
		return ret;
	if (len > NAME_MAX)
		return -ERANGE;
	if (len)
		return -ENODATA;
	ret = newfid_ok(s, newfid);
	if (!ret)
		ret = p9_fid_add(s, newfid, FID_XATTR, &n, NULL);
	if (ret)
		return ret;
	put64(c, 0);
	return 0;
}

static int op_xattrcreate(struct p9_call *c)
{
	return -EOPNOTSUPP;
}

/* Locks: the guest's kernel already arbitrates between its own processes; the host's
 * other users of a share are not coordinated with (as kvmtool). */
static int op_lock(struct p9_call *c)
{
	u32 fid = get32(c);
	u8 type = get8(c);
	u16 len;
	int ret;

	get32(c); /* flags, start, length, proc_id */
	get64(c);
	get64(c);
	get32(c);
	if (!get_str(c, &len)) /* client_id */
		return -EPROTO;
	if (type > P9_LOCK_TYPE_UNLCK)
		return -EINVAL;
	if (!fid_req(c, fid, FID_NAMING, &ret))
		return ret;
	put8(c, P9_LOCK_SUCCESS);
	return 0;
}

static int op_getlock(struct p9_call *c)
{
	u32 fid = get32(c), proc_id;
	u8 type = get8(c);
	u64 start = get64(c), length = get64(c);
	const char *client;
	u16 len;
	int ret;

	proc_id = get32(c);
	client = get_str(c, &len);
	if (!client)
		return -EPROTO;
	if (type > P9_LOCK_TYPE_UNLCK)
		return -EINVAL;
	if (!fid_req(c, fid, FID_NAMING, &ret))
		return ret;
	ret = room(c, P9_RGETLOCK_FIXED + (size_t)len);
	if (ret)
		return ret;
	put8(c, P9_LOCK_TYPE_UNLCK); /* nobody else holds it */
	put64(c, start);
	put64(c, length);
	put32(c, proc_id);
	put_str(c, client, len);
	return 0;
}

/* Requests are answered one at a time, in order: the one to flush is answered already. */
static int op_flush(struct p9_call *c)
{
	get16(c); /* oldtag */
	return c->in_short ? -EPROTO : 0;
}

/* Every message we serve; the rest (Tauth, and 9P2000's Topen, Tcreate, Tstat, Twstat)
 * answer EOPNOTSUPP. `writes`: changes the host, so a read-only share refuses it. `room`:
 * the largest reply body it can make (room()), its least where the request decides: Rwalk's
 * qids, Rreadlink's target, Rgetlock's client id; Rread and Rreaddir fill what is there. */
static const struct p9_op {
	int (*fn)(struct p9_call *c);
	bool writes;
	u16 room;
} ops[256] = {
	[P9_TVERSION] = { .fn = op_version, .room = P9_RVERSION_MAX },
	[P9_TATTACH] = { .fn = op_attach, .room = P9_QID_SIZE },
	[P9_TWALK] = { .fn = op_walk, .room = 2 },
	[P9_TGETATTR] = { .fn = op_getattr, .room = P9_RGETATTR_SIZE },
	[P9_TSETATTR] = { .fn = op_setattr, .writes = true },
	[P9_TLOPEN] = { .fn = op_lopen, .room = P9_ROPEN_SIZE },
	[P9_TLCREATE] = { .fn = op_lcreate, .writes = true, .room = P9_ROPEN_SIZE },
	[P9_TREAD] = { .fn = op_read, .room = 4 },
	[P9_TWRITE] = { .fn = op_write, .writes = true, .room = 4 },
	[P9_TCLUNK] = { .fn = op_clunk },
	[P9_TREMOVE] = { .fn = op_remove },
	[P9_TREADDIR] = { .fn = op_readdir, .room = 4 },
	[P9_TSTATFS] = { .fn = op_statfs, .room = P9_RSTATFS_SIZE },
	[P9_TMKDIR] = { .fn = op_mkdir, .writes = true, .room = P9_QID_SIZE },
	[P9_TSYMLINK] = { .fn = op_symlink, .writes = true, .room = P9_QID_SIZE },
	[P9_TREADLINK] = { .fn = op_readlink, .room = 2 },
	[P9_TUNLINKAT] = { .fn = op_unlinkat, .writes = true },
	[P9_TRENAMEAT] = { .fn = op_renameat, .writes = true },
	[P9_TRENAME] = { .fn = op_rename, .writes = true },
	[P9_TMKNOD] = { .fn = op_mknod, .writes = true, .room = P9_QID_SIZE },
	[P9_TLINK] = { .fn = op_link, .writes = true },
	[P9_TFSYNC] = { .fn = op_fsync },
	[P9_TXATTRWALK] = { .fn = op_xattrwalk, .room = 8 },
	[P9_TXATTRCREATE] = { .fn = op_xattrcreate, .writes = true },
	[P9_TLOCK] = { .fn = op_lock, .room = 1 },
	[P9_TGETLOCK] = { .fn = op_getlock, .room = P9_RGETLOCK_FIXED },
	[P9_TFLUSH] = { .fn = op_flush },
};

static int dispatch(struct p9_call *c)
{
	const struct p9_op *op = &ops[c->type];
	int ret;

	if (!op->fn)
		return -EOPNOTSUPP;
	if (!c->s->msize && c->type != P9_TVERSION)
		return -EPROTO; /* no session yet */
	if (op->writes && c->s->readonly)
		return -EROFS;
	ret = room(c, op->room);
	if (!ret)
		ret = op->fn(c);
	/* Only a reply no room check could foresee gets here: a link's target that grew
	 * between its lstat and its readlink. */
	if (!ret && c->out_over)
		ret = -EMSGSIZE;
	return ret;
}

static void le_put(u8 *p, u64 v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (u8)(v >> (8 * i));
}

ssize_t p9_server_handle(struct p9_server *s, const struct iovec *req, int req_cnt,
			 const struct iovec *resp, int resp_cnt)
{
	u32 limit = s->msize ? s->msize : s->max_msize;
	struct p9_call c = {
		.s = s, .req = req, .req_cnt = req_cnt, .resp = resp, .resp_cnt = resp_cnt
	};
	size_t in_len, out_len, copy;
	u8 hdr[P9_HDR_SIZE];
	u32 size;
	u16 tag;
	int ret;

	if (req_cnt < 0 || resp_cnt < 0 || req_cnt > P9_MAX_IOV || resp_cnt > P9_MAX_IOV)
		return -EINVAL;
	in_len = iov_length(req, req_cnt);
	out_len = iov_length(resp, resp_cnt);
	if (iov_from(req, req_cnt, 0, hdr, sizeof(hdr)) != sizeof(hdr))
		return -EBADMSG;
	size = (u32)hdr[0] | (u32)hdr[1] << 8 | (u32)hdr[2] << 16 | (u32)hdr[3] << 24;
	if (size < P9_HDR_SIZE || size > in_len)
		return -EBADMSG;
	if (out_len < P9_HDR_SIZE + 4)
		return -ENOBUFS; /* not even room for an Rlerror */
	c.type = hdr[4];
	tag = (u16)(hdr[5] | hdr[6] << 8);
	c.out = s->rbuf + P9_HDR_SIZE;
	c.out_cap = MIN(out_len, limit) - P9_HDR_SIZE;
	c.body = size - P9_HDR_SIZE;
	/* Twrite's data stays in the guest's buffers (pwritev reads it from there). */
	copy = c.type == P9_TWRITE ? MIN(c.body, P9_TWRITE_FIXED) : c.body;
	if (size > limit || copy > P9_TBUF_SIZE) {
		ret = -EMSGSIZE;
	} else {
		iov_from(req, req_cnt, P9_HDR_SIZE, s->tbuf, copy);
		c.in = s->tbuf;
		c.in_left = copy;
		ret = dispatch(&c);
	}
	s->st.requests++;
	if (ret < 0) {
		s->st.errors++;
		c.out_len = 0;
		c.data_len = 0;
		c.out_over = false;
		put32(&c, (u32)-ret);
		c.type = P9_RLERROR - 1;
	}
	le_put(s->rbuf, P9_HDR_SIZE + c.out_len + c.data_len, 4);
	s->rbuf[4] = (u8)(c.type + 1);
	le_put(s->rbuf + 5, tag, 2);
	iov_to(resp, resp_cnt, 0, s->rbuf, P9_HDR_SIZE + c.out_len);
	return (ssize_t)(P9_HDR_SIZE + c.out_len + c.data_len);
}

void p9_server_reset(struct p9_server *s)
{
	p9_fid_clear(s);
	s->msize = 0;
}

void p9_server_set_max_fids(struct p9_server *s, u32 max_fids)
{
	s->max_fids = max_fids ? MIN(max_fids, P9_FIDS_MAX) : P9_FIDS_DEFAULT;
}

void p9_server_stats(const struct p9_server *s, struct p9_stats *st)
{
	*st = s->st;
	st->fids = s->nfids;
	st->max_fids = s->max_fids;
	st->msize = s->msize;
}

void p9_server_close(struct p9_server *s)
{
	if (!s)
		return;
	p9_fid_clear(s);
	if (s->root_fd >= 0)
		close(s->root_fd);
	if (s->proc_fd >= 0)
		close(s->proc_fd);
	free(s->tbuf);
	free(s->rbuf);
	free(s->dbuf);
	free(s);
}

/* The host facilities the server relies on, checked once with a clear message. */
static int open_facilities(struct p9_server *s, const char *root, char *err, size_t errlen)
{
	struct statfs sfs;
	struct stat st;
	int fd;

	s->root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (s->root_fd < 0 || p9_fd_stat(s->root_fd, &st) < 0) {
		errfmt(err, errlen, "9p share %s: %s", root, strerror(errno));
		return neg_errno();
	}
	fd = p9_open_beneath(s->root_fd, ".", O_PATH, 0);
	if (fd < 0) {
		errfmt(err, errlen, "9p share %s: openat2: %s%s", root, strerror(-fd),
		       fd == -ENOSYS ? " (Linux 5.6 or later is needed)" : "");
		return fd;
	}
	close(fd);
	s->proc_fd = open("/proc/self/fd", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (s->proc_fd < 0 || fstatfs(s->proc_fd, &sfs) < 0 || sfs.f_type != PROC_SUPER_MAGIC) {
		errfmt(err, errlen, "9p share %s: needs /proc/self/fd (is /proc mounted?)", root);
		return -ENOENT;
	}
	s->root = (struct p9_node){
		.fd = -1, .mode = st.st_mode, .dev = st.st_dev, .ino = st.st_ino
	};
	s->devs[0] = st.st_dev;
	s->ndevs = 1;
	return 0;
}

int p9_server_open(struct p9_server **out, const char *root, const struct p9_server_opts *opts,
		   char *err, size_t errlen)
{
	struct p9_server *s = calloc(1, sizeof(*s));
	int ret;

	*out = NULL;
	if (!s) {
		errfmt(err, errlen, "9p share %s: out of memory", root);
		return -ENOMEM;
	}
	s->root_fd = s->proc_fd = -1;
	s->readonly = opts->readonly;
	s->max_msize = opts->max_msize ? opts->max_msize : (u32)P9_MSIZE_MAX;
	s->max_msize = MAX(MIN(s->max_msize, (u32)P9_MSIZE_MAX), P9_MSIZE_MIN);
	p9_server_set_max_fids(s, opts->max_fids);
	ret = open_facilities(s, root, err, errlen);
	if (ret)
		goto fail;
	s->tbuf = malloc(P9_TBUF_SIZE);
	s->rbuf = malloc(s->max_msize);
	s->dbuf = malloc(s->max_msize);
	if (!s->tbuf || !s->rbuf || !s->dbuf) {
		errfmt(err, errlen, "9p share %s: out of memory", root);
		ret = -ENOMEM;
		goto fail;
	}
	if (getrandom(&s->seed, sizeof(s->seed), GRND_NONBLOCK) != sizeof(s->seed))
		s->seed = (u32)now_ns();
	*out = s;
	return 0;
fail:
	p9_server_close(s);
	return ret;
}

/* The FUSE server behind lkvm's virtio-fs: frames requests, dispatches them through an ops table, keeps the session, the guest's lookup counts and the table of open files. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/sysmacros.h>

#include "lkvm/iov.h"
#include "fuse-priv.h"

/*
 * How the share is kept closed (the guest is hostile), on top of the node table's own rules
 * (hostfs.h: every node reached beneath the root by validated names, no symlink followed,
 * opaque kernel-interface mounts):
 * - A node id is used only when hostfs knows it and the guest holds a lookup of it (or it is
 *   the root): an unknown or forgotten id is ESTALE, never a crash or another file.
 * - A file handle is an index into our table with a generation above it: a released or
 *   never-made fh is EBADF, a directory's fh is not a file's.
 * - Every length is checked against ih.len and ih.len against the buffers; what is parsed is
 *   copied first; every name is one component of 1..NAME_MAX bytes, NUL-terminated inside
 *   the request, no '/', never "." or "..".
 * - A read-only share refuses with EROFS every request that would change the host, before
 *   looking at its node, and OPEN/CREATE with write access or O_TRUNC.
 * - The reply's room is checked before an operation acts (fsrv_room()).
 * Errors are the host's errno values: FUSE carries Linux's, and host and guest are both Linux
 * on x86-64. No logging: a guest's mistake is its error reply; the caps hostfs reaches warn
 * once through its own callback.
 */

#define FSRV_PAGE 4096u
#define FSRV_DBUF_SIZE 65536u /* getdents64's buffer: a directory read is one page in practice */

/* ---- parsing and replying ---- */

const void *fsrv_take(struct fuse_call *c, size_t n)
{
	const void *p = c->in;

	if (c->in_left < n)
		return NULL;
	c->in += n;
	c->in_left -= n;
	return p;
}

const char *fsrv_str(struct fuse_call *c, size_t max, int *err)
{
	const char *p = (const char *)c->in;
	const char *nul = memchr(p, '\0', c->in_left);
	size_t len;

	if (!nul) {
		*err = -EINVAL; /* not terminated inside the request */
		return NULL;
	}
	len = (size_t)(nul - p);
	*err = !len ? -EINVAL : len > max ? -ENAMETOOLONG : 0;
	if (*err)
		return NULL;
	c->in += len + 1;
	c->in_left -= len + 1;
	return p;
}

const char *fsrv_name(struct fuse_call *c, int *err)
{
	const char *p = fsrv_str(c, NAME_MAX, err);

	if (p && (strchr(p, '/') || !strcmp(p, ".") || !strcmp(p, ".."))) {
		*err = -EINVAL;
		return NULL;
	}
	return p;
}

void fsrv_put(struct fuse_call *c, const void *p, size_t n)
{
	/* Every caller checked the room; this only keeps a mistake from writing past it. */
	if (n > c->out_cap - c->out_len)
		return;
	memcpy(c->out + c->out_len, p, n);
	c->out_len += n;
}

/* ---- nodes and lookups ---- */

struct hostfs_node *fsrv_node(struct fuse_server *s, u64 id)
{
	struct hostfs_node *n = id ? hostfs_find(s->fs, id) : NULL;

	if (!n || (id != HOSTFS_ROOT_ID && !n->nlookup))
		return NULL;
	return n;
}

int fsrv_dir_fd(struct fuse_server *s, struct hostfs_node *n)
{
	if (n->opaque)
		return -EACCES;
	if (!S_ISDIR(n->mode))
		return -ENOTDIR;
	return hostfs_fd(s->fs, n);
}

/*
 * The guest's lookups of a node are counted in nlookup and hold one reference between them:
 * the first keeps the reference its walk made, later ones drop theirs, and the forget that
 * takes the count to 0 drops the one kept. The root's reference is the table's own.
 */
static int cmp_u64(const void *a, const void *b)
{
	u64 x = *(const u64 *)a, y = *(const u64 *)b;

	return x < y ? -1 : x > y;
}

void fsrv_held_compact(struct fuse_server *s)
{
	u32 k = 0;

	if (!s->nheld)
		return;
	qsort(s->held, s->nheld, sizeof(*s->held), cmp_u64);
	for (u32 i = 0; i < s->nheld; i++) {
		struct hostfs_node *n = hostfs_find(s->fs, s->held[i]);

		if (n && n->nlookup && (!k || s->held[k - 1] != s->held[i]))
			s->held[k++] = s->held[i];
	}
	s->nheld = k;
}

/* Remember an id that the guest now holds (for fuse_server_save). The list is compacted when
 * full and grown when that leaves it more than half full: amortised O(1) a lookup. */
static void held_add(struct fuse_server *s, u64 id)
{
	if (s->nheld == s->held_cap) {
		fsrv_held_compact(s);
		if (s->nheld >= s->held_cap / 2) {
			u32 cap = s->held_cap ? 2 * s->held_cap : 64;
			u64 *h = realloc(s->held, (size_t)cap * sizeof(*h));

			if (h) {
				s->held = h;
				s->held_cap = cap;
			}
		}
	}
	if (s->nheld < s->held_cap)
		s->held[s->nheld++] = id;
	else
		s->held_lost = true;
}

void fsrv_count_lookup(struct fuse_server *s, struct hostfs_node *n)
{
	if (n->nlookup++)
		hostfs_put(s->fs, n);
	else
		held_add(s, n->id);
}

void fsrv_restore_lookups(struct fuse_server *s, struct hostfs_node *n, u64 k)
{
	if (!k || n->nlookup)
		return;
	n->nlookup = k;
	hostfs_get(n);
	held_add(s, n->id);
}

void fsrv_forget(struct fuse_server *s, struct hostfs_node *n, u64 k)
{
	k = MIN(k, n->nlookup);
	n->nlookup -= k;
	if (k && !n->nlookup)
		hostfs_put(s->fs, n);
}

void fsrv_fill_attr(struct fuse_attr *a, const struct stat *st)
{
	u64 ma = major(st->st_rdev), mi = minor(st->st_rdev);

	*a = (struct fuse_attr){
		.ino = st->st_ino,
		.size = (u64)st->st_size,
		.blocks = (u64)st->st_blocks,
		.atime = (u64)st->st_atim.tv_sec,
		.mtime = (u64)st->st_mtim.tv_sec,
		.ctime = (u64)st->st_ctim.tv_sec,
		.atimensec = (u32)st->st_atim.tv_nsec,
		.mtimensec = (u32)st->st_mtim.tv_nsec,
		.ctimensec = (u32)st->st_ctim.tv_nsec,
		.mode = st->st_mode,
		.nlink = (u32)MIN(st->st_nlink, (nlink_t)UINT32_MAX),
		.uid = st->st_uid,
		.gid = st->st_gid,
		/* new_encode_dev(): what the guest decodes rdev with */
		.rdev = (u32)((mi & 0xff) | (ma << 8) | ((mi & ~0xffull) << 12)),
		.blksize = (u32)st->st_blksize,
	};
}

void fsrv_fill_entry(struct fuse_server *s, struct fuse_entry_out *e, u64 id, const struct stat *st)
{
	*e = (struct fuse_entry_out){
		.nodeid = id,
		.entry_valid = s->timeout_s,
		.attr_valid = s->timeout_s,
	};
	fsrv_fill_attr(&e->attr, st);
}

void fsrv_entry(struct fuse_call *c, struct hostfs_node *n, const struct stat *st)
{
	struct fuse_entry_out e;

	fsrv_count_lookup(c->s, n);
	fsrv_fill_entry(c->s, &e, n->id, st);
	fsrv_put(c, &e, sizeof(e));
}

/* ---- the handle table ---- */

#define FSRV_NO_SLOT UINT32_MAX

struct fuse_handle *fsrv_handle(struct fuse_server *s, u64 fh, bool dir)
{
	u32 i = (u32)fh, gen = (u32)(fh >> 32);
	struct fuse_handle *h = i < s->nhandles ? &s->h[i] : NULL;

	if (!h || !h->used || h->gen != gen || h->dir != dir)
		return NULL;
	return h;
}

int fsrv_handle_room(struct fuse_server *s)
{
	struct fuse_handle *nh;
	u32 cap;

	if (s->nused >= s->max_handles)
		return -ENFILE;
	if (s->free_head != FSRV_NO_SLOT || s->nhandles < s->cap)
		return 0;
	cap = s->cap ? MIN(2 * s->cap, s->max_handles) : MIN(64u, s->max_handles);
	nh = realloc(s->h, (size_t)cap * sizeof(*nh));
	if (!nh)
		return -ENOMEM;
	s->h = nh;
	s->cap = cap;
	return 0;
}

u64 fsrv_handle_add(struct fuse_server *s, struct hostfs_node *n, int fd, u32 flags, bool dir)
{
	struct fuse_handle *h;
	u32 i;

	if (s->free_head != FSRV_NO_SLOT) {
		i = s->free_head;
		s->free_head = s->h[i].next_free;
	} else {
		i = s->nhandles++;
		s->h[i] = (struct fuse_handle){ .gen = 1 };
	}
	h = &s->h[i];
	hostfs_get(n);
	h->n = n;
	h->fd = fd;
	h->flags = flags & FUSE_FH_REOPEN_FLAGS;
	h->dir = dir;
	h->used = true;
	s->nused++;
	return (u64)h->gen << 32 | i;
}

void fsrv_handle_del(struct fuse_server *s, struct fuse_handle *h)
{
	hostfs_release_io(s->fs, h->n, h->fd);
	hostfs_put(s->fs, h->n);
	h->used = false;
	h->n = NULL;
	h->fd = -1;
	/* A new generation: an fh kept from this open names nothing (0 is never one). */
	h->gen = h->gen + 1 ? h->gen + 1 : 1;
	h->next_free = s->free_head;
	s->free_head = (u32)(h - s->h);
	s->nused--;
}

int fsrv_handle_place(struct fuse_server *s, u64 fh, struct hostfs_node *n, int fd, u32 flags,
		      bool dir)
{
	u32 i = (u32)fh, gen = (u32)(fh >> 32);

	if (!gen || i >= s->max_handles)
		return -EINVAL;
	if (i >= s->cap) {
		u32 cap = MIN(MAX(i + 1, 2 * s->cap), s->max_handles);
		struct fuse_handle *nh = realloc(s->h, (size_t)cap * sizeof(*nh));

		if (!nh)
			return -ENOMEM;
		s->h = nh;
		s->cap = cap;
	}
	while (s->nhandles <= i)
		s->h[s->nhandles++] = (struct fuse_handle){ .gen = 1, .fd = -1 };
	if (s->h[i].used)
		return -EEXIST;
	hostfs_get(n);
	s->h[i] = (struct fuse_handle){ .n = n,
					.fd = fd,
					.gen = gen,
					.used = true,
					.dir = dir,
					.flags = flags & FUSE_FH_REOPEN_FLAGS };
	s->nused++;
	return 0;
}

void fsrv_handles_relink(struct fuse_server *s)
{
	s->free_head = FSRV_NO_SLOT;
	for (u32 i = s->nhandles; i-- > 0;) {
		if (s->h[i].used)
			continue;
		s->h[i].next_free = s->free_head;
		s->free_head = i;
	}
}

void fsrv_handles_clear(struct fuse_server *s)
{
	for (u32 i = 0; i < s->nhandles; i++)
		if (s->h[i].used)
			fsrv_handle_del(s, &s->h[i]);
	free(s->h);
	s->h = NULL;
	s->nhandles = s->cap = s->nused = 0;
	s->free_head = FSRV_NO_SLOT;
}

/* ---- the session ---- */

/* Every handle released and every node forgotten: the state before INIT. */
static void session_end(struct fuse_server *s)
{
	fsrv_handles_clear(s);
	hostfs_reset(s->fs);
	hostfs_root(s->fs)->nlookup = 0;
	s->nheld = 0;
	s->held_lost = false;
	s->minor = 0;
	s->flags = 0;
}

static void init_reply(struct fuse_call *c, const struct fuse_init_in *in)
{
	struct fuse_server *s = c->s;
	u32 ours = FSRV_INIT_FLAGS | (s->cache == FUSE_CACHE_ALWAYS ? FUSE_CACHE_SYMLINKS : 0);
	struct fuse_init_out o = {
		.major = FUSE_KERNEL_VERSION,
		.minor = s->minor,
		.max_readahead = MIN(in->max_readahead, (u32)FUSE_SRV_MAX_WRITE),
		.flags = s->flags = in->flags & ours,
		.max_background = 64,
		.congestion_threshold = 48,
		.max_write = (u32)FUSE_SRV_MAX_WRITE,
		.time_gran = 1,
		.max_pages = (u16)(FUSE_SRV_MAX_WRITE / FSRV_PAGE),
	};

	fsrv_put(c, &o, sizeof(o));
}

/*
 * INIT: a new session (whatever the old one held goes). A major above ours gets our version
 * alone, on which the guest asks again; below ours, or a minor older than virtio-fs's first
 * (whose argument sizes differ), is refused.
 */
static int op_init(struct fuse_call *c)
{
	const struct fuse_init_in *in = fsrv_take(c, 16); /* 7.36 added flags2 and the rest */
	struct fuse_init_in a = { 0 };
	struct fuse_init_out o = { .major = FUSE_KERNEL_VERSION, .minor = FUSE_SRV_MINOR };

	memcpy(&a, in, 16);
	if (a.major > FUSE_KERNEL_VERSION) {
		fsrv_put(c, &o, FUSE_COMPAT_INIT_OUT_SIZE);
		return 0;
	}
	if (a.major < FUSE_KERNEL_VERSION || a.minor < FUSE_SRV_MINOR_MIN)
		return -EPROTO;
	session_end(c->s);
	c->s->minor = MIN(a.minor, (u32)FUSE_SRV_MINOR);
	init_reply(c, &a);
	return 0;
}

static int op_destroy(struct fuse_call *c)
{
	session_end(c->s);
	return 0;
}

static int op_lookup(struct fuse_call *c)
{
	struct fuse_server *s = c->s;
	struct hostfs_node *n;
	struct stat st;
	int ret;
	const char *name = fsrv_name(c, &ret);

	if (!name)
		return ret;
	if (c->node->opaque)
		return -EACCES;
	ret = hostfs_walk(s->fs, c->node, name, &n, &st);
	if (ret == -ENOENT && s->cache == FUSE_CACHE_ALWAYS) {
		/* A negative entry the guest may keep as long as the positive ones. */
		struct fuse_entry_out e = { .entry_valid = s->timeout_s };

		fsrv_put(c, &e, sizeof(e));
		return 0;
	}
	if (ret)
		return ret;
	fsrv_entry(c, n, &st);
	return 0;
}

static int op_forget(struct fuse_call *c)
{
	const struct fuse_forget_in *in = fsrv_take(c, sizeof(*in));
	struct hostfs_node *n = fsrv_node(c->s, c->ih.nodeid);

	if (n)
		fsrv_forget(c->s, n, in->nlookup);
	return 0;
}

/* The entries are read from the guest's buffers one by one, not copied with the arguments:
 * a batch of any size is carried out (a forget dropped would hold its node for ever). */
static int op_batch_forget(struct fuse_call *c)
{
	const struct fuse_batch_forget_in *in = fsrv_take(c, sizeof(*in));
	size_t at = sizeof(struct fuse_in_header) + sizeof(*in);
	u32 count = in->count;

	/* As many as the request carries, however many it claims. */
	for (u32 i = 0; i < count && c->args_len - sizeof(*in) >= (i + 1ull) * 16; i++) {
		struct fuse_forget_one one;
		struct hostfs_node *n;

		iov_from(c->req, c->req_cnt, at + (size_t)i * sizeof(one), &one, sizeof(one));
		n = fsrv_node(c->s, one.nodeid);
		if (n)
			fsrv_forget(c->s, n, one.nlookup);
	}
	return 0;
}

/* Requests are answered one at a time, in order: the one to interrupt is answered already. */
static int op_interrupt(struct fuse_call *c)
{
	return 0;
}

/* ---- dispatch ---- */

enum {
	NODE = 1 << 0,	  /* ih.nodeid must name a node the guest holds (c->node) */
	WRITES = 1 << 1,  /* changes the host: a read-only share answers EROFS */
	NOREPLY = 1 << 2, /* the guest waits for no reply */
	ANYTIME = 1 << 3, /* answered before INIT too */
};

/* Every opcode we answer; the rest answer ENOSYS (which the guest remembers). `in`: the
 * arguments' least size (a fixed struct, before any name); `room`: the largest reply body
 * (READ, READDIR(PLUS), READLINK and LISTXATTR fill what is there and check themselves). */
static const struct fuse_op {
	int (*fn)(struct fuse_call *c);
	u16 in, room;
	u8 flags;
} ops[FUSE_SRV_OPCODES] = {
	[FUSE_INIT] = { op_init, 16, sizeof(struct fuse_init_out), ANYTIME },
	[FUSE_DESTROY] = { op_destroy, 0, 0, 0 },
	[FUSE_LOOKUP] = { op_lookup, 0, sizeof(struct fuse_entry_out), NODE },
	[FUSE_FORGET] = { op_forget, sizeof(struct fuse_forget_in), 0, NOREPLY | ANYTIME },
	[FUSE_BATCH_FORGET] = { op_batch_forget, sizeof(struct fuse_batch_forget_in), 0,
				NOREPLY | ANYTIME },
	[FUSE_INTERRUPT] = { op_interrupt, 0, 0, NOREPLY | ANYTIME },
	[FUSE_NOTIFY_REPLY] = { op_interrupt, 0, 0, NOREPLY | ANYTIME }, /* we ask for none */
	[FUSE_GETATTR] = { fsrv_op_getattr, sizeof(struct fuse_getattr_in),
			   sizeof(struct fuse_attr_out), NODE },
	[FUSE_SETATTR] = { fsrv_op_setattr, sizeof(struct fuse_setattr_in),
			   sizeof(struct fuse_attr_out), NODE | WRITES },
	[FUSE_READLINK] = { fsrv_op_readlink, 0, 0, NODE },
	[FUSE_SYMLINK] = { fsrv_op_symlink, 0, sizeof(struct fuse_entry_out), NODE | WRITES },
	[FUSE_MKNOD] = { fsrv_op_mknod, sizeof(struct fuse_mknod_in), sizeof(struct fuse_entry_out),
			 NODE | WRITES },
	[FUSE_MKDIR] = { fsrv_op_mkdir, sizeof(struct fuse_mkdir_in), sizeof(struct fuse_entry_out),
			 NODE | WRITES },
	[FUSE_UNLINK] = { fsrv_op_unlink, 0, 0, NODE | WRITES },
	[FUSE_RMDIR] = { fsrv_op_rmdir, 0, 0, NODE | WRITES },
	[FUSE_RENAME] = { fsrv_op_rename, sizeof(struct fuse_rename_in), 0, NODE | WRITES },
	[FUSE_RENAME2] = { fsrv_op_rename2, sizeof(struct fuse_rename2_in), 0, NODE | WRITES },
	[FUSE_LINK] = { fsrv_op_link, sizeof(struct fuse_link_in), sizeof(struct fuse_entry_out),
			NODE | WRITES },
	[FUSE_STATFS] = { fsrv_op_statfs, 0, sizeof(struct fuse_statfs_out), NODE },
	[FUSE_ACCESS] = { fsrv_op_access, sizeof(struct fuse_access_in), 0, NODE },
	[FUSE_GETXATTR] = { fsrv_op_getxattr, sizeof(struct fuse_getxattr_in),
			    sizeof(struct fuse_getxattr_out), NODE },
	[FUSE_LISTXATTR] = { fsrv_op_listxattr, sizeof(struct fuse_getxattr_in),
			     sizeof(struct fuse_getxattr_out), NODE },
	[FUSE_SETXATTR] = { fsrv_op_setxattr, 8, 0, NODE | WRITES },
	[FUSE_REMOVEXATTR] = { fsrv_op_removexattr, 0, 0, NODE | WRITES },
	[FUSE_OPEN] = { fsrv_op_open, sizeof(struct fuse_open_in), sizeof(struct fuse_open_out),
			NODE },
	[FUSE_CREATE] = { fsrv_op_create, sizeof(struct fuse_create_in),
			  sizeof(struct fuse_entry_out) + sizeof(struct fuse_open_out),
			  NODE | WRITES },
	[FUSE_READ] = { fsrv_op_read, sizeof(struct fuse_read_in), 0, 0 },
	[FUSE_WRITE] = { fsrv_op_write, sizeof(struct fuse_write_in), sizeof(struct fuse_write_out),
			 WRITES },
	[FUSE_RELEASE] = { fsrv_op_release, sizeof(struct fuse_release_in), 0, 0 },
	[FUSE_RELEASEDIR] = { fsrv_op_releasedir, sizeof(struct fuse_release_in), 0, 0 },
	[FUSE_FLUSH] = { fsrv_op_flush, sizeof(struct fuse_flush_in), 0, 0 },
	[FUSE_FSYNC] = { fsrv_op_fsync, sizeof(struct fuse_fsync_in), 0, 0 },
	[FUSE_FSYNCDIR] = { fsrv_op_fsync, sizeof(struct fuse_fsync_in), 0, 0 },
	[FUSE_OPENDIR] = { fsrv_op_opendir, sizeof(struct fuse_open_in),
			   sizeof(struct fuse_open_out), NODE },
	[FUSE_READDIR] = { fsrv_op_readdir, sizeof(struct fuse_read_in), 0, 0 },
	[FUSE_READDIRPLUS] = { fsrv_op_readdirplus, sizeof(struct fuse_read_in), 0, 0 },
	[FUSE_FALLOCATE] = { fsrv_op_fallocate, sizeof(struct fuse_fallocate_in), 0, WRITES },
	[FUSE_LSEEK] = { fsrv_op_lseek, sizeof(struct fuse_lseek_in), sizeof(struct fuse_lseek_out),
			 0 },
	[FUSE_COPY_FILE_RANGE] = { fsrv_op_copy_file_range, sizeof(struct fuse_copy_file_range_in),
				   sizeof(struct fuse_write_out), WRITES },
};

static bool noreply(u32 opcode)
{
	return opcode < FUSE_SRV_OPCODES && (ops[opcode].flags & NOREPLY);
}

static int dispatch(struct fuse_call *c)
{
	const struct fuse_op *op = c->ih.opcode < FUSE_SRV_OPCODES ? &ops[c->ih.opcode] : NULL;

	if (!op || !op->fn)
		return -ENOSYS;
	if (!c->s->minor && !(op->flags & ANYTIME))
		return -EIO; /* no session yet */
	if (c->in_left < op->in)
		return -EINVAL;
	if ((op->flags & WRITES) && c->s->readonly)
		return -EROFS;
	if (op->flags & NODE) {
		c->node = fsrv_node(c->s, c->ih.nodeid);
		if (!c->node)
			return -ESTALE;
	}
	if (fsrv_room(c, op->room))
		return -EOVERFLOW;
	return op->fn(c);
}

/* The arguments copied: all of them, but WRITE's data, which stays in the guest's buffers
 * (pwritev reads it from there), and BATCH_FORGET's entries (read one at a time). */
static int copy_args(struct fuse_call *c)
{
	size_t n = c->args_len;

	if (c->ih.opcode == FUSE_WRITE)
		n = MIN(n, sizeof(struct fuse_write_in));
	if (c->ih.opcode == FUSE_BATCH_FORGET)
		n = MIN(n, sizeof(struct fuse_batch_forget_in));
	if (n > FUSE_SRV_ARGS_MAX)
		return -E2BIG;
	iov_from(c->req, c->req_cnt, sizeof(c->ih), c->s->args, n);
	c->in = c->s->args;
	c->in_left = n;
	return 0;
}

/* The reply's header before its body in rbuf, both into resp; its length. */
static ssize_t reply(struct fuse_call *c, int ret)
{
	struct fuse_server *s = c->s;
	struct fuse_out_header oh = { .unique = c->ih.unique };

	if (ret < 0) {
		s->st.errors++;
		c->out_len = c->data_len = 0;
		oh.error = ret;
	}
	oh.len = (u32)(sizeof(oh) + c->out_len + c->data_len);
	memcpy(s->rbuf, &oh, sizeof(oh));
	iov_to(c->resp, c->resp_cnt, 0, s->rbuf, sizeof(oh) + c->out_len);
	return (ssize_t)oh.len;
}

ssize_t fuse_server_handle(struct fuse_server *s, const struct iovec *req, int req_cnt,
			   const struct iovec *resp, int resp_cnt)
{
	struct fuse_call c = {
		.s = s, .req = req, .req_cnt = req_cnt, .resp = resp, .resp_cnt = resp_cnt
	};
	size_t in_len, out_len;
	int ret;

	if (req_cnt < 0 || resp_cnt < 0 || req_cnt > FUSE_SRV_MAX_IOV ||
	    resp_cnt > FUSE_SRV_MAX_IOV)
		return -EINVAL;
	in_len = iov_length(req, req_cnt);
	out_len = iov_length(resp, resp_cnt);
	if (iov_from(req, req_cnt, 0, &c.ih, sizeof(c.ih)) != sizeof(c.ih) ||
	    c.ih.len < sizeof(c.ih) || c.ih.len > in_len)
		return -EBADMSG;
	if (!noreply(c.ih.opcode) && out_len < sizeof(struct fuse_out_header))
		return -ENOBUFS;
	c.args_len = c.ih.len - sizeof(c.ih);
	c.out = s->rbuf + sizeof(struct fuse_out_header);
	c.out_cap = out_len < sizeof(struct fuse_out_header)
			    ? 0
			    : MIN(out_len, FUSE_SRV_MAX_WRITE + FSRV_PAGE) -
				      sizeof(struct fuse_out_header);
	ret = copy_args(&c);
	if (!ret)
		ret = dispatch(&c);
	hostfs_trim(s->fs);
	s->st.requests++;
	if (noreply(c.ih.opcode))
		return 0;
	return reply(&c, ret);
}

/* ---- the server ---- */

void fuse_server_reset(struct fuse_server *s)
{
	session_end(s);
	hostfs_trim(s->fs);
}

void fuse_server_stats(const struct fuse_server *s, struct fuse_srv_stats *st)
{
	*st = s->st;
	st->handles = s->nused;
	st->max_handles = s->max_handles;
	hostfs_stats(s->fs, &st->fs);
}

struct hostfs *fuse_server_fs(struct fuse_server *s)
{
	return s->fs;
}

void fuse_server_close(struct fuse_server *s)
{
	if (!s)
		return;
	if (s->fs)
		fsrv_handles_clear(s);
	hostfs_close(s->fs);
	free(s->held);
	free(s->args);
	free(s->rbuf);
	free(s->dbuf);
	free(s);
}

int fuse_server_open(struct fuse_server **out, const char *root,
		     const struct fuse_server_opts *opts, char *err, size_t errlen)
{
	struct fuse_server *s = calloc(1, sizeof(*s));
	struct hostfs_opts fo;
	int ret;

	*out = NULL;
	if (!s) {
		errfmt(err, errlen, "virtio-fs share %s: out of memory", root);
		return -ENOMEM;
	}
	fo = opts->fs;
	fo.readonly = opts->readonly;
	s->readonly = opts->readonly;
	s->cache = opts->cache;
	s->timeout_s = opts->cache != FUSE_CACHE_ALWAYS ? 0
		       : opts->timeout_s		? opts->timeout_s
							: FUSE_SRV_ALWAYS_TIMEOUT;
	s->max_handles = opts->max_handles ? opts->max_handles : FUSE_SRV_HANDLES_DEFAULT;
	s->free_head = FSRV_NO_SLOT;
	ret = hostfs_open(&s->fs, root, &fo, err, errlen);
	if (ret)
		goto fail;
	s->args = malloc(FUSE_SRV_ARGS_MAX);
	s->rbuf = malloc(sizeof(struct fuse_out_header) + FUSE_SRV_MAX_WRITE + FSRV_PAGE);
	s->dbuf = malloc(FSRV_DBUF_SIZE);
	if (!s->args || !s->rbuf || !s->dbuf) {
		errfmt(err, errlen, "virtio-fs share %s: out of memory", root);
		ret = -ENOMEM;
		goto fail;
	}
	*out = s;
	return 0;
fail:
	fuse_server_close(s);
	return ret;
}

/* The 9P2000.L server behind virtio-9p: the fid table, one T-message in and one R-message out, against one shared directory served by hostfs. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>

#include "lkvm/iov.h"
#include "lkvm/p9.h"
#include "9p-priv.h"

/*
 * How the share is kept closed (the guest is hostile):
 * - A fid names a hostfs node: one host file by (dev, ino), shared, reached again only by
 *   its names beneath the root with every walk check and its identity compared (hostfs.h).
 *   Nothing is ever looked up from the host's "/".
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
 * - No set-user-ID or set-group-ID file is made or chmod'ed into being (hostfs_guest_mode),
 *   no xattr written (file capabilities), no device node created.
 * - A read-only share refuses with EROFS every request that would change the host, before
 *   looking at the fid (table flag `writes`), and Tlopen with write access or O_TRUNC.
 * - Every count is clamped to msize and to the buffers the transport gave, every offset
 *   checked against off_t. What a guest can make lkvm hold is bounded by memory: fids
 *   (max_fids, each a p9_fid slot), nodes, cached and open descriptors (hostfs's caps);
 *   past a bound the request answers ENFILE and the first time says so once.
 * Errors are the host's errno values: 9P2000.L's Rlerror carries Linux errno numbers, and
 * host and guest are both Linux on x86-64, so they pass through unchanged.
 */

#define P9_TBUF_SIZE 8192 /* largest body we parse: Tsymlink with a PATH_MAX target is ~4.4 KiB */

/* Reply bodies (after the header) of a fixed largest size, the room checked before acting:
 * Rversion (msize, "9P2000.L" or the shorter "unknown"), Rlopen and Rlcreate (qid, iounit),
 * Rgetattr, Rstatfs, and Rgetlock up to its client id's bytes. */
#define P9_RVERSION_MAX (4 + 2 + sizeof(P9_VERSION_L) - 1)
#define P9_ROPEN_SIZE (P9_QID_SIZE + 4)
#define P9_RGETATTR_SIZE (8 + P9_QID_SIZE + 3 * 4 + 15 * 8)
#define P9_RSTATFS_SIZE (2 * 4 + 6 * 8 + 4)

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

/* Room for one more fid? (Checked before work that would be wasted.) The bound reached says
 * so once, as hostfs's caps do. */
static int fid_room(struct p9_server *s)
{
	char msg[256];

	if (s->nfids < s->max_fids)
		return 0;
	s->st.fid_cap_hits++;
	if (!s->fids_warned && s->warn) {
		snprintf(
			msg, sizeof(msg),
			"share %s: %u fids (the most): the guest's next ones fail with ENFILE; --share's fids=N raises it",
			s->label, s->max_fids);
		s->warn(s->warn_opaque, msg);
	}
	s->fids_warned = true;
	return -ENFILE;
}

/* 9p-priv.h. */
int p9_fid_add(struct p9_server *s, u32 id, enum fid_kind kind, struct hostfs_node *n)
{
	struct p9_fid *f;
	int ret = fid_room(s);

	if (!ret && 2 * ((u64)s->nfids + 1) > s->nslots)
		ret = fid_grow(s);
	if (ret) {
		if (n)
			hostfs_put(s->fs, n);
		return ret;
	}
	f = fid_place(s, id);
	*f = (struct p9_fid){ .id = id, .kind = kind, .ofd = -1, .node = n };
	s->nfids++;
	return 0;
}

void p9_fid_release(struct p9_server *s, struct p9_fid *f)
{
	if (f->ofd >= 0)
		hostfs_release_io(s->fs, f->node, f->ofd);
	if (f->node)
		hostfs_put(s->fs, f->node);
	f->ofd = -1;
	f->node = NULL;
}

void p9_fid_del(struct p9_server *s, struct p9_fid *f)
{
	u32 mask = s->nslots - 1, i = (u32)(f - s->fids), j = i;

	p9_fid_release(s, f);
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
			p9_fid_release(s, &s->fids[i]);
	free(s->fids);
	s->fids = NULL;
	s->nslots = s->nfids = 0;
}

struct p9_fid *p9_fid_req(struct p9_call *c, u32 id, enum fid_want want, int *err)
{
	struct p9_fid *f = p9_parse_error(c) ? NULL : p9_fid_find(c->s, id);

	*err = p9_parse_error(c) ? p9_parse_error(c) : -EBADF;
	if (!f || (want != FID_ANY && f->kind != FID_FILE))
		return NULL;
	if (want == FID_INSIDE && f->node->opaque) {
		*err = -EACCES;
		return NULL;
	}
	return f;
}

int p9_newfid_ok(struct p9_server *s, u32 id)
{
	if (id == P9_NOFID || p9_fid_find(s, id))
		return -EINVAL;
	return fid_room(s);
}

/* ---- one request ---- */

/* Every message we serve; the rest (Tauth, and 9P2000's Topen, Tcreate, Tstat, Twstat)
 * answer EOPNOTSUPP. `writes`: changes the host, so a read-only share refuses it. `room`:
 * the largest reply body it can make (p9_room()), its least where the request decides:
 * Rwalk's qids, Rreadlink's target, Rgetlock's client id; Rread and Rreaddir fill what is
 * there. */
static const struct p9_op {
	int (*fn)(struct p9_call *c);
	bool writes;
	u16 room;
} ops[256] = {
	[P9_TVERSION] = { .fn = p9_op_version, .room = P9_RVERSION_MAX },
	[P9_TATTACH] = { .fn = p9_op_attach, .room = P9_QID_SIZE },
	[P9_TWALK] = { .fn = p9_op_walk, .room = 2 },
	[P9_TGETATTR] = { .fn = p9_op_getattr, .room = P9_RGETATTR_SIZE },
	[P9_TSETATTR] = { .fn = p9_op_setattr, .writes = true },
	[P9_TLOPEN] = { .fn = p9_op_lopen, .room = P9_ROPEN_SIZE },
	[P9_TLCREATE] = { .fn = p9_op_lcreate, .writes = true, .room = P9_ROPEN_SIZE },
	[P9_TREAD] = { .fn = p9_op_read, .room = 4 },
	[P9_TWRITE] = { .fn = p9_op_write, .writes = true, .room = 4 },
	[P9_TCLUNK] = { .fn = p9_op_clunk },
	[P9_TREMOVE] = { .fn = p9_op_remove },
	[P9_TREADDIR] = { .fn = p9_op_readdir, .room = 4 },
	[P9_TSTATFS] = { .fn = p9_op_statfs, .room = P9_RSTATFS_SIZE },
	[P9_TMKDIR] = { .fn = p9_op_mkdir, .writes = true, .room = P9_QID_SIZE },
	[P9_TSYMLINK] = { .fn = p9_op_symlink, .writes = true, .room = P9_QID_SIZE },
	[P9_TREADLINK] = { .fn = p9_op_readlink, .room = 2 },
	[P9_TUNLINKAT] = { .fn = p9_op_unlinkat, .writes = true },
	[P9_TRENAMEAT] = { .fn = p9_op_renameat, .writes = true },
	[P9_TRENAME] = { .fn = p9_op_rename, .writes = true },
	[P9_TMKNOD] = { .fn = p9_op_mknod, .writes = true, .room = P9_QID_SIZE },
	[P9_TLINK] = { .fn = p9_op_link, .writes = true },
	[P9_TFSYNC] = { .fn = p9_op_fsync },
	[P9_TXATTRWALK] = { .fn = p9_op_xattrwalk, .room = 8 },
	[P9_TXATTRCREATE] = { .fn = p9_op_xattrcreate, .writes = true },
	[P9_TLOCK] = { .fn = p9_op_lock, .room = 1 },
	[P9_TGETLOCK] = { .fn = p9_op_getlock, .room = P9_RGETLOCK_FIXED },
	[P9_TFLUSH] = { .fn = p9_op_flush },
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
	ret = p9_room(c, op->room);
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
		p9_put32(&c, (u32)-ret);
		c.type = P9_RLERROR - 1;
	}
	le_put(s->rbuf, P9_HDR_SIZE + c.out_len + c.data_len, 4);
	s->rbuf[4] = (u8)(c.type + 1);
	le_put(s->rbuf + 5, tag, 2);
	iov_to(resp, resp_cnt, 0, s->rbuf, P9_HDR_SIZE + c.out_len);
	/* Between two requests: the descriptors this one borrowed from hostfs go back, the
	 * cache down to its bound (hostfs.h). */
	hostfs_trim(s->fs);
	return (ssize_t)(P9_HDR_SIZE + c.out_len + c.data_len);
}

void p9_server_reset(struct p9_server *s)
{
	p9_fid_clear(s);
	hostfs_reset(s->fs);
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
	hostfs_stats(s->fs, &st->fs);
}

struct hostfs *p9_server_fs(struct p9_server *s)
{
	return s->fs;
}

void p9_server_close(struct p9_server *s)
{
	if (!s)
		return;
	p9_fid_clear(s);
	hostfs_close(s->fs);
	free(s->tbuf);
	free(s->rbuf);
	free(s->dbuf);
	free(s);
}

/* The share through hostfs (its caps, label and warning as the caller gave them), the qid
 * device table started with the root's device. */
static int open_share(struct p9_server *s, const char *root, const struct p9_server_opts *opts,
		      char *err, size_t errlen)
{
	struct hostfs_opts fo = opts->fs;
	struct stat st;
	int ret;

	fo.readonly = opts->readonly;
	fo.label = fo.label ? fo.label : root;
	ret = hostfs_open(&s->fs, root, &fo, err, errlen);
	if (ret)
		return ret;
	snprintf(s->label, sizeof(s->label), "%s", fo.label);
	s->warn = fo.warn;
	s->warn_opaque = fo.warn_opaque;
	ret = hostfs_stat(s->fs, hostfs_root(s->fs), &st);
	if (ret) {
		errfmt(err, errlen, "9p share %s: %s", root, strerror(-ret));
		return ret;
	}
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
	s->readonly = opts->readonly;
	s->max_msize = opts->max_msize ? opts->max_msize : (u32)P9_MSIZE_MAX;
	s->max_msize = MAX(MIN(s->max_msize, (u32)P9_MSIZE_MAX), P9_MSIZE_MIN);
	p9_server_set_max_fids(s, opts->max_fids);
	ret = open_share(s, root, opts, err, errlen);
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

/* p9.h: kept for the tests that try escapes against the one lookup (now hostfs's). */
int p9_open_beneath(int dfd, const char *name, u64 flags, u64 mode)
{
	return hostfs_open_beneath(dfd, name, flags, mode);
}

/* The 9P server's insides, shared by its files: the request being answered, the codec, the fid table and the operations. */
#ifndef LKVM_VIRTIO_9P_PRIV_H
#define LKVM_VIRTIO_9P_PRIV_H

#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "lkvm/hostfs.h"
#include "lkvm/p9.h"

/*
 * The server in four rooms (issue 44):
 * virtio/9p-codec.c:  the message codec (fields, strings, names, qids)
 * virtio/9p-server.c: the fid table, the ops table, one request in and one reply out
 * virtio/9p-ops.c:    the operations on names (session, walk, open, create, the namespace)
 * virtio/9p-io.c:     the operations on what a fid names (attributes, data, directories)
 * virtio/9p-snap.c:   the session and every fid in a snapshot (by path), walked to at restore
 * The host-path resolution, the security boundary, is hostfs (virtio/hostfs.c, shared with
 * virtio-fs): a fid names a hostfs node, never a path or a descriptor of its own.
 */

#define P9_QID_DEVS 255 /* host devices given their own qid.path prefix */
/* Longest path a snapshot keeps for a fid beneath the share (bytes, without the NUL). */
#define P9_PATH_MAX (PATH_MAX - 1)
/* Tlopen/Tlcreate flags an open fid keeps for a reopen: truncating, creating or refusing an
 * existing file was done once, by the request, and is not done again. */
#define P9_FID_REOPEN_FLAGS \
	(P9_DOTL_ACCMODE | P9_DOTL_APPEND | P9_DOTL_DSYNC | P9_DOTL_SYNC | P9_DOTL_DIRECTORY)
#define P9_QID_SIZE 13
#define P9_IOHDR (P9_HDR_SIZE + 4)	      /* Rread/Rreaddir: header + count[4] */
#define P9_TWRITE_FIXED 16		      /* Twrite: fid[4] offset[8] count[4], then the data */
#define P9_RGETLOCK_FIXED (1 + 8 + 8 + 4 + 2) /* Rgetlock up to its client id's bytes */

enum fid_kind { FID_FREE, FID_FILE, FID_XATTR };

/* A fid: what it names is a hostfs node (referenced; NULL for an xattr fid), shared with
 * every other fid and child naming the same host file. No path, no descriptor beside an
 * open file's. */
struct p9_fid {
	u32 id;
	u8 kind;
	int ofd;    /* opened by Tlopen/Tlcreate (hostfs_open_io), -1 when not */
	u32 oflags; /* the Tlopen/Tlcreate flags it was opened with (P9_FID_REOPEN_FLAGS of them) */
	struct hostfs_node *node;
};

struct p9_server {
	struct hostfs *fs;
	bool readonly;
	u32 max_msize, msize; /* msize 0: no Tversion yet */
	u32 max_fids;
	/* fids: open addressing, linear probing, nslots a power of two, at most half full */
	struct p9_fid *fids;
	u32 nslots, nfids, seed;
	bool fids_warned; /* the fid bound's one warning said */
	char label[128];
	void (*warn)(void *opaque, const char *msg);
	void *warn_opaque;
	dev_t devs[P9_QID_DEVS];
	u32 ndevs;
	u8 *tbuf;		      /* the request body, copied once */
	u8 *rbuf;		      /* the reply, built here (max_msize bytes) */
	u8 *dbuf;		      /* getdents64 output (max_msize bytes) */
	struct iovec iov[P9_MAX_IOV]; /* Tread/Twrite data, as a slice of the transport's buffers */
	struct p9_stats st;
};

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

static inline int neg_errno(void)
{
	return errno > 0 && errno < 4096 ? -errno : -EIO;
}

/* ---- the codec (9p-codec.c): a field past the end reads 0 and sets in_short ---- */
u8 p9_get8(struct p9_call *c);
u16 p9_get16(struct p9_call *c);
u32 p9_get32(struct p9_call *c);
u64 p9_get64(struct p9_call *c);
/* A string's bytes inside the body copy (not NUL-terminated); NULL when it runs past the end. */
const char *p9_get_str(struct p9_call *c, u16 *len);
/* A string into buf (NUL-terminated), refused (p9_parse_error()) beyond max bytes
 * (-ENAMETOOLONG), with a NUL inside or empty when !may_be_empty (-EINVAL). */
void p9_get_cstr(struct p9_call *c, char *buf, size_t max, bool may_be_empty);
/* One path component: not empty, no '/', not "." nor ".." (unless dotdot_ok, for Twalk). */
void p9_get_name(struct p9_call *c, char name[NAME_MAX + 1], bool dotdot_ok);
/* Whatever was wrong with the request's fields, or 0: the message ended early (-EPROTO),
 * else the first string refused. Handlers parse every field, then look here (p9_fid_req does). */
int p9_parse_error(const struct p9_call *c);
void p9_put8(struct p9_call *c, u8 v);
void p9_put16(struct p9_call *c, u16 v);
void p9_put32(struct p9_call *c, u32 v);
void p9_put64(struct p9_call *c, u64 v);
void p9_put_str(struct p9_call *c, const char *p, size_t len);
void p9_put_qid(struct p9_call *c, const struct p9_qid *q);
/* qid.path of a host file: unique across the share's devices (9p-codec.c says how). */
u64 p9_qid_path(struct p9_server *s, dev_t dev, u64 ino);
void p9_qid_of(struct p9_server *s, const struct stat *st, struct p9_qid *q);
/* Room for a reply body of n bytes? Looked at before an operation acts. 0 or -EMSGSIZE. */
int p9_room(const struct p9_call *c, size_t n);

/* ---- the fid table (9p-server.c) ---- */
enum fid_want {
	FID_ANY,    /* any kind (clunk, read) */
	FID_NAMING, /* a file, not an xattr fid */
	FID_INSIDE, /* and one whose contents may be touched (opened, walked into, created in,
		     * changed): not an opaque kernel-interface mount */
};
struct p9_fid *p9_fid_find(struct p9_server *s, u32 id);
/* Once a request is parsed: the fid it names, or NULL with *err (p9_parse_error(), -EBADF
 * for no such fid, -EACCES for an opaque one). */
struct p9_fid *p9_fid_req(struct p9_call *c, u32 id, enum fid_want want, int *err);
/* A new fid number must be free and the table have room (-EINVAL, -ENFILE). */
int p9_newfid_ok(struct p9_server *s, u32 id);
/* Fid `id` (not in the table) naming n (its reference taken over; NULL for an xattr fid:
 * put on failure). Pointers into the table are stale afterwards. 0 or -errno. */
int p9_fid_add(struct p9_server *s, u32 id, enum fid_kind kind, struct hostfs_node *n);
/* What f holds let go (its open file, its node), f left naming nothing. */
void p9_fid_release(struct p9_server *s, struct p9_fid *f);
/* Clunk f. Pointers into the table are stale afterwards. */
void p9_fid_del(struct p9_server *s, struct p9_fid *f);
/* Every fid closed, the table freed. */
void p9_fid_clear(struct p9_server *s);
/* Host open flags of Tlopen flags, or -errno (EROFS on a read-only share for writes). */
int p9_host_open_flags(struct p9_server *s, u32 p9);

/* ---- the operations: each parses its body, returns 0 with the reply body in c->out or
 * -errno (9p-ops.c, 9p-io.c) ---- */
int p9_op_version(struct p9_call *c);
int p9_op_attach(struct p9_call *c);
int p9_op_walk(struct p9_call *c);
int p9_op_lopen(struct p9_call *c);
int p9_op_lcreate(struct p9_call *c);
int p9_op_mkdir(struct p9_call *c);
int p9_op_mknod(struct p9_call *c);
int p9_op_symlink(struct p9_call *c);
int p9_op_link(struct p9_call *c);
int p9_op_unlinkat(struct p9_call *c);
int p9_op_renameat(struct p9_call *c);
int p9_op_rename(struct p9_call *c);
int p9_op_clunk(struct p9_call *c);
int p9_op_remove(struct p9_call *c);
int p9_op_getattr(struct p9_call *c);
int p9_op_setattr(struct p9_call *c);
int p9_op_readlink(struct p9_call *c);
int p9_op_statfs(struct p9_call *c);
int p9_op_read(struct p9_call *c);
int p9_op_write(struct p9_call *c);
int p9_op_readdir(struct p9_call *c);
int p9_op_fsync(struct p9_call *c);
int p9_op_xattrwalk(struct p9_call *c);
int p9_op_xattrcreate(struct p9_call *c);
int p9_op_lock(struct p9_call *c);
int p9_op_getlock(struct p9_call *c);
int p9_op_flush(struct p9_call *c);

#endif

/* FUSE file server for one shared host directory (virtio-fs's protocol), independent of any transport: one request in, one reply out. */
#ifndef LKVM_FUSE_SERVER_H
#define LKVM_FUSE_SERVER_H

#include <sys/types.h>
#include <sys/uio.h>

#include "lkvm/hostfs.h"
#include "lkvm/util.h"

/*
 * Requests are FUSE 7.x as Linux's virtio-fs sends them (linux/fuse.h's structs; the server
 * answers INIT with minor 31 or the guest's, whichever is lower): each one a fuse_in_header
 * and its arguments in the readable buffers, the reply (fuse_out_header and its body) into
 * the writable ones. Node ids are hostfs node ids (hostfs.h: 1 the root); file handles index
 * the server's own table of open files. Every length, node id, file handle and name is
 * checked: a bad one is an error reply, never a host access.
 */
#define FUSE_SRV_MAX_WRITE MiB(1)	/* max_write and max_readahead offered at INIT */
#define FUSE_SRV_MAX_IOV 1024		/* buffers on either side of one request */
#define FUSE_SRV_HANDLES_DEFAULT 65536u /* open files and directories per share */

/* What the guest may cache (docs/run.md): names and attributes for `timeout` seconds, and
 * file contents across opens (KEEP_CACHE) only in ALWAYS. */
enum fuse_cache {
	FUSE_CACHE_AUTO,   /* timeouts 0, page cache dropped at each open: host writes seen */
	FUSE_CACHE_ALWAYS, /* long timeouts, contents kept: a read-only snapshot of the host */
	FUSE_CACHE_NONE,   /* timeouts 0 and direct I/O: every read goes to the host */
};

struct fuse_server;

struct fuse_server_opts {
	bool readonly; /* every request that would change the host answers EROFS */
	enum fuse_cache cache;
	u32 timeout_s;	       /* entry and attribute timeout in FUSE_CACHE_ALWAYS (0: 86400) */
	u32 max_handles;       /* 0: FUSE_SRV_HANDLES_DEFAULT */
	struct hostfs_opts fs; /* the node table's caps, label and warning (readonly copied in) */
};

/* Counters for --stats and `lkvm stat` (read by the thread that calls fuse_server_handle). */
struct fuse_srv_stats {
	u64 requests;	 /* requests answered, FORGETs included */
	u64 errors;	 /* answered with an error */
	u64 reads;	 /* READ requests answered */
	u64 read_bytes;	 /* file data returned by READ */
	u64 write_bytes; /* file data written by WRITE */
	u32 handles, max_handles;
	struct hostfs_stats fs;
};

/* Serve root. 0 with *out, or -errno with a one-line reason in err. */
int fuse_server_open(struct fuse_server **out, const char *root,
		     const struct fuse_server_opts *opts, char *err, size_t errlen) __must_check;
void fuse_server_close(struct fuse_server *s);

/*
 * Answer one request. req: the readable buffers (fuse_in_header first, then the arguments,
 * WRITE's data last); resp: the writable buffers. What is parsed is copied first (a guest
 * changing the buffers meanwhile changes nothing); READ data goes straight into resp and
 * WRITE data straight from req. Returns the reply's length (an error reply, fuse_out_header
 * with -errno, for anything wrong inside the request), 0 for a request that takes no reply
 * (FORGET, BATCH_FORGET, INTERRUPT), or -errno when no reply can be made: fewer readable
 * bytes than a fuse_in_header or than its len says (-EBADMSG), fewer writable bytes than a
 * fuse_out_header for a request that needs a reply (-ENOBUFS), more than FUSE_SRV_MAX_IOV
 * buffers (-EINVAL). The device then sets NEEDS_RESET. Calls on one server must not overlap.
 */
ssize_t fuse_server_handle(struct fuse_server *s, const struct iovec *req, int req_cnt,
			   const struct iovec *resp, int resp_cnt) __must_check;

/* Device reset: every handle released, every node forgotten, the session before INIT. */
void fuse_server_reset(struct fuse_server *s);
void fuse_server_stats(const struct fuse_server *s, struct fuse_srv_stats *st);
/* The node table (caps settled by the device once every share is open). */
struct hostfs *fuse_server_fs(struct fuse_server *s);

/*
 * Snapshot: the session (INIT's minor and flags), every node the guest holds (id, lookup
 * count, path beneath the share, type and inode) and every open handle (number, node,
 * flags), as records of tags tag .. tag + FUSE_SNAP_TAGS - 1. Save refuses (-EOPNOTSUPP, why
 * in err) a node whose name is gone (an unlinked file still open). Load, on a server that has
 * answered nothing: every node walked to from the root and given its id back, every handle
 * reopened (never truncating); a path gone, another type or (same share) another inode: -EINVAL
 * with one line, the server left empty. Every field checked as a request's would be.
 */
#define FUSE_SNAP_TAGS 3
struct snap_rec_buf;
int fuse_server_save(struct fuse_server *s, u16 tag, struct snap_rec_buf *b, char *err,
		     size_t errlen) __must_check;
int fuse_server_load(struct fuse_server *s, u16 tag, const void *sec, size_t len, char *err,
		     size_t errlen) __must_check;

#endif

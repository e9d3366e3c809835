/* The FUSE server's insides, shared by its files: one request being answered, the table of open files, and the helpers the operations parse and reply with. */
#ifndef LKVM_VIRTIO_FUSE_PRIV_H
#define LKVM_VIRTIO_FUSE_PRIV_H

#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <linux/fuse.h>

#include "lkvm/fuse-server.h"

/*
 * virtio/fuse-server.c: framing, the ops table, INIT and DESTROY, lookups and forgets, the
 *                       handle table
 * virtio/fuse-ops.c:    operations on names and attributes (mkdir, rename, setattr...)
 * virtio/fuse-io.c:     operations on open files and directories (read, write, readdir...)
 * virtio/fuse-snap.c:   the session, nodes and handles in a snapshot
 */

#define FUSE_SRV_MINOR 31      /* the protocol spoken: Linux 5.4's, virtio-fs's first */
#define FUSE_SRV_MINOR_MIN 31  /* every guest with virtio-fs speaks at least this */
#define FUSE_SRV_ARGS_MAX 8192 /* arguments copied: SYMLINK's name and PATH_MAX target fit */
#define FUSE_SRV_OPCODES 64    /* the ops table's size: every opcode Linux sends is below */
#define FUSE_SRV_ALWAYS_TIMEOUT 86400u
/* INIT flags the server may agree to (FUSE_CACHE_SYMLINKS only in FUSE_CACHE_ALWAYS). */
#define FSRV_INIT_FLAGS                                                                  \
	(FUSE_ASYNC_READ | FUSE_ATOMIC_O_TRUNC | FUSE_BIG_WRITES | FUSE_DO_READDIRPLUS | \
	 FUSE_READDIRPLUS_AUTO | FUSE_PARALLEL_DIROPS | FUSE_MAX_PAGES)

/* Open flags a handle keeps for a reopen at snapshot restore: truncating, creating or
 * refusing an existing file was done once, by the request. */
#define FUSE_FH_REOPEN_FLAGS (O_ACCMODE | O_APPEND | O_DSYNC | O_SYNC | O_DIRECTORY)

/* An open file or directory: what the guest's fh names. */
struct fuse_handle {
	struct hostfs_node *n; /* referenced while open */
	int fd;	   /* open for I/O: hostfs_open_io's, or CREATE's given to hostfs_take_io */
	u32 gen;   /* the fh's upper half; bumped when the slot is freed */
	u32 flags; /* host open flags (FUSE_FH_REOPEN_FLAGS of them) */
	bool used, dir;
	u32 next_free;
};

struct fuse_server {
	struct hostfs *fs;
	bool readonly;
	enum fuse_cache cache;
	u32 timeout_s; /* entry and attribute timeouts given (0 but in ALWAYS) */
	u32 minor;     /* INIT's answer; 0: no session */
	u32 flags;     /* INIT flags agreed */
	/* handles: slots 0..nhandles-1, a free list through next_free (UINT32_MAX ends it) */
	struct fuse_handle *h;
	u32 nhandles, cap, nused, free_head, max_handles;
	/* Node ids whose lookup count went from 0 to 1, for a snapshot (hostfs has no walk of
	 * its nodes): may hold forgotten ones and repeats, compacted as it grows. */
	u64 *held;
	u32 nheld, held_cap;
	bool held_lost; /* an id could not be kept (no memory): a snapshot is refused */
	u8 *args;	/* the request's arguments, copied once */
	u8 *rbuf;	/* the reply, built here (header and body) */
	u8 *dbuf;	/* getdents64 output */
	struct iovec iov[FUSE_SRV_MAX_IOV]; /* READ/WRITE data, a slice of the transport's */
	struct fuse_srv_stats st;
};

/* One request being answered. */
struct fuse_call {
	struct fuse_server *s;
	struct fuse_in_header ih;
	const u8 *in; /* the arguments' copy, consumed from the front */
	size_t in_left;
	size_t args_len;	  /* the arguments' length as ih.len says */
	struct hostfs_node *node; /* ih.nodeid, for ops that name one */
	u8 *out;		  /* the reply body (after fuse_out_header) */
	size_t out_len, out_cap;
	const struct iovec *req, *resp;
	int req_cnt, resp_cnt;
	size_t data_len; /* reply bytes written straight into resp after out (READ's data) */
};

static inline int neg_errno(void)
{
	return errno > 0 && errno < 4096 ? -errno : -EIO;
}

/* Room for a reply body of n bytes? Asked before an operation acts: a request carried out,
 * then refused because its answer did not fit, would leave the guest believing nothing
 * happened. */
static inline int fsrv_room(const struct fuse_call *c, size_t n)
{
	return n <= c->out_cap ? 0 : -EOVERFLOW;
}

/* The next n bytes of the arguments (a fixed struct), or NULL when they run short. */
const void *fsrv_take(struct fuse_call *c, size_t n);
/* A NUL-terminated name among the arguments: 1..NAME_MAX bytes, no '/', not "." or "..";
 * NULL with *err (-EINVAL, -ENAMETOOLONG) otherwise. */
const char *fsrv_name(struct fuse_call *c, int *err);
/* A NUL-terminated string of 1..max bytes (a symlink's target): NULL with *err. */
const char *fsrv_str(struct fuse_call *c, size_t max, int *err);
/* Append n bytes to the reply body (the room was checked). */
void fsrv_put(struct fuse_call *c, const void *p, size_t n);

/* The node a guest's node id names: known, and the root or one the guest looked up and did
 * not forget. NULL otherwise. */
struct hostfs_node *fsrv_node(struct fuse_server *s, u64 id);
/* The node's O_PATH descriptor for a change inside it (not an opaque mount): fd or -errno. */
int fsrv_dir_fd(struct fuse_server *s, struct hostfs_node *n);
/* n reached by a lookup (its reference from hostfs_walk/made taken over): counted once more
 * and answered as an entry (fuse_entry_out) with st. */
void fsrv_entry(struct fuse_call *c, struct hostfs_node *n, const struct stat *st);
void fsrv_fill_entry(struct fuse_server *s, struct fuse_entry_out *e, u64 id,
		     const struct stat *st);
void fsrv_fill_attr(struct fuse_attr *a, const struct stat *st);
/* One more lookup of n, whose reference (from a walk) the count takes over or drops. */
void fsrv_count_lookup(struct fuse_server *s, struct hostfs_node *n);
/* The held list compacted: forgotten ids and repeats gone, sorted. */
void fsrv_held_compact(struct fuse_server *s);
/* A restored node's k lookups (a snapshot's), with their reference. */
void fsrv_restore_lookups(struct fuse_server *s, struct hostfs_node *n, u64 k);
/* Drop k lookups of n (no more than it has); the reference goes with the last. */
void fsrv_forget(struct fuse_server *s, struct hostfs_node *n, u64 k);

/* Handles. fh -> the handle, or NULL (unknown, stale, or a directory's where a file's is
 * wanted and the other way round). */
struct fuse_handle *fsrv_handle(struct fuse_server *s, u64 fh, bool dir);
/* Is there room for one more handle? 0 or -ENFILE. */
int fsrv_handle_room(struct fuse_server *s);
/* A new handle for node n (a reference taken) and fd; its fh. fsrv_handle_room first. */
u64 fsrv_handle_add(struct fuse_server *s, struct hostfs_node *n, int fd, u32 flags, bool dir);
void fsrv_handle_del(struct fuse_server *s, struct fuse_handle *h);
/* A restored handle at exactly fh's slot and generation (a reference on n taken): 0, -EINVAL
 * (a slot past max_handles, generation 0), -EEXIST (in use), -ENOMEM. Then the free list is
 * rebuilt once every handle is placed (fsrv_handles_relink). */
int fsrv_handle_place(struct fuse_server *s, u64 fh, struct hostfs_node *n, int fd, u32 flags,
		      bool dir);
void fsrv_handles_relink(struct fuse_server *s);
void fsrv_handles_clear(struct fuse_server *s);
/* Host open flags for FUSE's open flags (EROFS on a read-only share for what writes). */
int fsrv_open_flags(struct fuse_server *s, u32 flags);

/* The operations (fuse-ops.c, fuse-io.c): each parses its arguments and returns 0 with the
 * reply body in c->out, or -errno. */
int fsrv_op_getattr(struct fuse_call *c);
int fsrv_op_setattr(struct fuse_call *c);
int fsrv_op_readlink(struct fuse_call *c);
int fsrv_op_symlink(struct fuse_call *c);
int fsrv_op_mknod(struct fuse_call *c);
int fsrv_op_mkdir(struct fuse_call *c);
int fsrv_op_unlink(struct fuse_call *c);
int fsrv_op_rmdir(struct fuse_call *c);
int fsrv_op_rename(struct fuse_call *c);
int fsrv_op_rename2(struct fuse_call *c);
int fsrv_op_link(struct fuse_call *c);
int fsrv_op_statfs(struct fuse_call *c);
int fsrv_op_access(struct fuse_call *c);
int fsrv_op_getxattr(struct fuse_call *c);
int fsrv_op_listxattr(struct fuse_call *c);
int fsrv_op_setxattr(struct fuse_call *c);
int fsrv_op_removexattr(struct fuse_call *c);
int fsrv_op_open(struct fuse_call *c);
int fsrv_op_create(struct fuse_call *c);
int fsrv_op_read(struct fuse_call *c);
int fsrv_op_write(struct fuse_call *c);
int fsrv_op_release(struct fuse_call *c);
int fsrv_op_releasedir(struct fuse_call *c);
int fsrv_op_flush(struct fuse_call *c);
int fsrv_op_fsync(struct fuse_call *c);
int fsrv_op_opendir(struct fuse_call *c);
int fsrv_op_readdir(struct fuse_call *c);
int fsrv_op_readdirplus(struct fuse_call *c);
int fsrv_op_fallocate(struct fuse_call *c);
int fsrv_op_lseek(struct fuse_call *c);
int fsrv_op_copy_file_range(struct fuse_call *c);

#endif

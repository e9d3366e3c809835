/* The 9P server's insides, shared by its files: the fid table and the host lookups that 9p-server.c serves requests with and 9p-snap.c saves and restores fids by. */
#ifndef LKVM_VIRTIO_9P_PRIV_H
#define LKVM_VIRTIO_9P_PRIV_H

#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "lkvm/p9.h"

/*
 * virtio/9p-server.c: the T-messages, the host-path resolution, the fid table
 * virtio/9p-snap.c: the fids' paths kept as the server goes, the session and the fids in a
 *                   snapshot (by path), reopened at restore
 */

#define P9_QID_DEVS 255 /* host devices given their own qid.path prefix */
/* Longest path a fid keeps beneath the share (bytes, without the NUL). */
#define P9_PATH_MAX (PATH_MAX - 1)
/* Tlopen/Tlcreate flags an open fid keeps for a reopen: truncating, creating or refusing an
 * existing file was done once, by the request, and is not done again. */
#define P9_FID_REOPEN_FLAGS \
	(P9_DOTL_ACCMODE | P9_DOTL_APPEND | P9_DOTL_DSYNC | P9_DOTL_SYNC | P9_DOTL_DIRECTORY)

enum fid_kind { FID_FREE, FID_FILE, FID_XATTR };

/* What a fid names: an O_PATH descriptor and what fstat said of it when the fid was made. */
struct p9_node {
	int fd;
	u32 mode; /* the file type bits never change for one inode */
	dev_t dev;
	ino_t ino;
	bool opaque; /* root of a kernel-interface mount: stat only */
};

struct p9_fid {
	u32 id;
	u8 kind;
	int ofd;    /* opened by Tlopen/Tlcreate, -1 when not */
	u32 oflags; /* the Tlopen/Tlcreate flags it was opened with (P9_FID_REOPEN_FLAGS of them) */
	struct p9_node node;
	/*
	 * What the fid names as a path beneath the share ("" the root, "a/b"), for snapshots
	 * only (9p-snap.c): kept beside the descriptor from attach, walk, create and rename.
	 * NULL when it is not known (longer than P9_PATH_MAX, an allocation failed, or a rename
	 * it could not follow): such a fid cannot be saved. Never used to reach a file while
	 * the server runs: the descriptor is what the fid names.
	 */
	char *path;
};

struct p9_server {
	int root_fd;
	int proc_fd; /* /proc/self/fd: reopens an O_PATH descriptor for I/O */
	struct p9_node root;
	bool readonly;
	u32 max_msize, msize; /* msize 0: no Tversion yet */
	u32 max_fids;
	/* fids: open addressing, linear probing, nslots a power of two, at most half full */
	struct p9_fid *fids;
	u32 nslots, nfids, seed;
	dev_t devs[P9_QID_DEVS];
	u32 ndevs;
	u8 *tbuf;		      /* the request body, copied once */
	u8 *rbuf;		      /* the reply, built here (max_msize bytes) */
	u8 *dbuf;		      /* getdents64 output (max_msize bytes) */
	struct iovec iov[P9_MAX_IOV]; /* Tread/Twrite data, as a slice of the transport's buffers */
	struct p9_stats st;
};

static inline int neg_errno(void)
{
	return errno > 0 && errno < 4096 ? -errno : -EIO;
}

/* fstat of any descriptor, an O_PATH one included (a symlink's own). */
int p9_fd_stat(int fd, struct stat *st);
/* One walk step from `from` by `name` (a validated component, or ".."): to gets a new O_PATH
 * descriptor, st its stat. The live server's checks (beneath the root, no symlink followed,
 * nothing inside an opaque mount). 0 or -errno. */
int p9_walk_one(struct p9_server *s, const struct p9_node *from, const char *name,
		struct p9_node *to, struct stat *st);
/* What n names, opened for I/O with host flags (directories and regular files only). An fd or
 * -errno. */
int p9_node_open(struct p9_server *s, const struct p9_node *n, int flags);
/* Host open flags of Tlopen flags, or -errno (EROFS on a read-only share for writes). */
int p9_host_open_flags(struct p9_server *s, u32 p9);
struct p9_fid *p9_fid_find(struct p9_server *s, u32 id);
/* Fid `id` (not in the table) naming n (its descriptor taken over) and path (taken over, NULL
 * for none; freed on failure). Pointers into the table are stale afterwards. 0 or -errno. */
int p9_fid_add(struct p9_server *s, u32 id, enum fid_kind kind, const struct p9_node *n,
	       char *path);
/* Every fid closed, the table freed. */
void p9_fid_clear(struct p9_server *s);

/* Fid paths (9p-snap.c), kept by the live server. The path reached from `from` (NULL:
 * unknown) by a walk of n validated names, allocated; NULL when not known. */
char *p9_path_walk(const char *from, const char (*names)[NAME_MAX + 1], int n);
/* After a rename of from to to (either NULL: not known), every fid's path that moved. */
void p9_paths_renamed(struct p9_server *s, const char *from, const char *to);

#endif

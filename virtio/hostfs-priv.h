/* The host-file table's insides, shared by hostfs.c (nodes, cache, reopen) and hostfs-ops.c (the rules both servers apply to host files). */
#ifndef LKVM_VIRTIO_HOSTFS_PRIV_H
#define LKVM_VIRTIO_HOSTFS_PRIV_H

#include <errno.h>

#include "lkvm/hostfs.h"

/* One hash table of nodes, chained through one of the node's *_next pointers. */
struct hostfs_htab {
	struct hostfs_node **b;
	u32 nb; /* buckets, a power of two; grown when count passes it */
	u32 count;
};

struct hostfs {
	int root_fd; /* the share's root (never evicted: the root node's fd) */
	int proc_fd; /* /proc/self/fd: an O_PATH descriptor reopened for I/O */
	struct hostfs_node *root;
	bool readonly;
	u32 max_nodes, max_cached, max_open;
	u32 nnodes, ncached, nopen;
	u64 next_id;
	u64 seed; /* hash seed (getrandom): a guest cannot aim its names at one chain */
	struct hostfs_htab by_ino, by_id, by_name;
	/* the LRU of cached, unpinned descriptors: head most recent, tail evicted first */
	struct hostfs_node *lru_head, *lru_tail;
	bool warned[HOSTFS_CAP_NR];
	char label[128];
	void (*warn)(void *opaque, const char *msg);
	void *warn_opaque;
	struct hostfs_stats st;
};

static inline int hostfs_errno(void)
{
	return errno > 0 && errno < 4096 ? -errno : -EIO;
}

/* fstat of any descriptor, an O_PATH one included (a symlink's own). */
int hostfs_fd_stat(int fd, struct stat *st);
/* Is fd on a kernel-interface file system (proc, sysfs...), opaque inside a share? */
bool hostfs_kernel_fs(int fd);
/* openat for I/O, with O_NOATIME on a read-only share where the host lets us. */
int hostfs_open_at(const struct hostfs *fs, int dfd, const char *name, int flags);
/* The cap reached: counted, and the first time said once through the warn callback. */
void hostfs_cap_hit(struct hostfs *fs, enum hostfs_cap cap);
/* An open node leaves the LRU (its descriptor pinned) and comes back at its last release. */
void hostfs_pin(struct hostfs *fs, struct hostfs_node *n);
void hostfs_unpin(struct hostfs *fs, struct hostfs_node *n);

#endif

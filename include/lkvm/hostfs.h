/* Host files for a guest's file servers (9P and virtio-fs): nodes named by host identity, a bounded descriptor cache, every node found again beneath its share by its names. */
#ifndef LKVM_HOSTFS_H
#define LKVM_HOSTFS_H

#include <limits.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "lkvm/util.h"

/*
 * The model (docs/design.md, rule 10): a protocol's handle (a 9P fid, a FUSE node id) names a
 * node; a node is one host file (dev, ino), shared by every handle that names it, and knows
 * the name it was last reached by under its parent node, so a node costs a few tens of bytes
 * and its name, never a path and never a descriptor of its own:
 * - A node holds an O_PATH descriptor only while it is in the share's descriptor cache
 *   (bounded: max_cached). An evicted node is reopened from its nearest cached ancestor (the
 *   root at worst), one component at a time, with every check a walk makes (beneath the
 *   root, no symlink followed, nothing inside an opaque mount), and its (dev, ino) compared:
 *   another file at that path is -ESTALE, never that other file.
 * - A node whose file the guest opened (hostfs_open_io) keeps its O_PATH descriptor and the
 *   open one until every open is released, within max_open: open-unlink-fstat and rename
 *   over an open file work, since both descriptors name the inode, not the path.
 * - A node reached again by another name (a walk, a lookup) takes that name, so a host-side
 *   rename heals on the guest's next lookup; a rename or unlink the guest makes through the
 *   server moves or drops the name at once (hostfs_renamed, hostfs_unlinked).
 * - Memory is bounded by max_nodes (each node: HOSTFS_NODE_BYTES and its name). Past any cap
 *   the call answers -ENFILE, and the first time a share reaches each cap, the warn callback
 *   is called once with a one-line message naming the share, the cap and how to raise it.
 * Descriptors returned by hostfs_fd() are borrowed: valid until the next hostfs_trim(),
 * which the server calls between two requests (so one request may use several nodes'
 * descriptors at once; the cache overshoots its bound by at most what one request touched).
 * Calls on one table must not overlap (one server thread).
 */

#define HOSTFS_NODES_DEFAULT (1u << 20) /* per share: about 110 MiB at the worst names */
#define HOSTFS_NODES_MAX (1u << 24)
#define HOSTFS_CACHED_DEFAULT 4096u /* O_PATH descriptors kept per share */
#define HOSTFS_OPEN_DEFAULT 4096u   /* files open at once per share */
#define HOSTFS_ROOT_ID 1ull	    /* the root node's id (FUSE_ROOT_ID) */

enum hostfs_cap { HOSTFS_CAP_NODES, HOSTFS_CAP_OPEN, HOSTFS_CAP_NR };

struct hostfs;

/* One host file a guest's handle names. Fields are hostfs.c's; the servers read them. */
struct hostfs_node {
	u64 id; /* unique within the table, never reused while it lives: FUSE's nodeid */
	dev_t dev;
	ino_t ino;
	u32 mode;     /* S_IFMT bits: the type never changes for one inode */
	bool opaque;  /* root of a kernel-interface mount (or inside one): stat only */
	bool retired; /* out of the identity table: its inode number names another file now */
	u64 nlookup;  /* the FUSE server's lookup count (hostfs only stores it) */
	/* A hash of the host's file handle (name_to_handle_at: inode and generation), 0 where
	 * the file system gives none: an inode number the host reused for another file, once
	 * no descriptor of ours held the old one, is told apart by it. */
	u64 gen;
	/* the rest is hostfs.c's own */
	struct hostfs_node *parent;		 /* NULL: the root, or a node whose name is gone */
	char *name;				 /* its name under parent (NULL with parent) */
	u32 refs;				 /* handles, children and lookups holding it */
	u32 nopen;				 /* open I/O descriptors (hostfs_open_io) */
	int fd;					 /* O_PATH, -1 when not cached */
	struct hostfs_node *lru_prev, *lru_next; /* in the cache's LRU (not while open) */
	/* chains of the three hash tables: by (dev, ino), by id, by (parent, name) */
	struct hostfs_node *ino_next, *id_next, *name_next;
};

/* Bytes of a node beside its name, for the bound docs/ states. */
#define HOSTFS_NODE_BYTES sizeof(struct hostfs_node)

struct hostfs_opts {
	bool readonly;	   /* reads O_NOATIME (hostfs_open_io); the servers refuse changes */
	u32 max_nodes;	   /* 0: HOSTFS_NODES_DEFAULT; at most HOSTFS_NODES_MAX */
	u32 max_cached;	   /* 0: HOSTFS_CACHED_DEFAULT; at least 8 */
	u32 max_open;	   /* 0: HOSTFS_OPEN_DEFAULT */
	const char *label; /* the share, for the warning (its host directory, tag...) */
	/* Called once per cap the first time it is reached (NULL: silent); msg is one line
	 * without "lkvm: warning: ", e.g. "share /x: 4096 files open at once (the most): ...". */
	void (*warn)(void *opaque, const char *msg);
	void *warn_opaque;
};

struct hostfs_stats {
	u32 nodes, max_nodes;
	u32 cached, max_cached;
	u32 open, max_open;
	u64 reopens;		     /* evicted nodes opened again by their names */
	u64 stale;		     /* of those, answered -ESTALE (gone, or another file there) */
	u64 cap_hits[HOSTFS_CAP_NR]; /* requests refused at each cap */
};

/*
 * Serve the directory root (opened once, here; everything later is relative to it). Needs
 * openat2 (Linux 5.6+) and /proc (an O_PATH descriptor is reopened for I/O through
 * /proc/self/fd). 0 with *out, or -errno with a one-line reason in err.
 */
int hostfs_open(struct hostfs **out, const char *root, const struct hostfs_opts *o, char *err,
		size_t errlen) __must_check;
/* Every node and descriptor closed, whatever still references them. NULL is fine. */
void hostfs_close(struct hostfs *fs);
/* A new session (a 9P Tversion, FUSE INIT, a device reset): every node but the root gone.
 * The server releases its handles first (hostfs_release_io, hostfs_put): a node is not
 * touched after this. */
void hostfs_reset(struct hostfs *fs);

/* The root node (never freed while the table lives; hostfs_get it for a handle). */
struct hostfs_node *hostfs_root(struct hostfs *fs);
/* The node with this id (FUSE's nodeid), or NULL. */
struct hostfs_node *hostfs_find(struct hostfs *fs, u64 id);
/* One more reference (a handle made, a lookup counted). */
void hostfs_get(struct hostfs_node *n);
/* One reference less; the node (and its name, and its ancestors' references) goes with the
 * last. */
void hostfs_put(struct hostfs *fs, struct hostfs_node *n);

/*
 * One step from directory node `from` by `name`: a validated component (1..NAME_MAX bytes,
 * no '/', not "."), or "..": at the root the root itself; elsewhere checked to lie beneath the
 * root. Never follows a symlink (a final one is the link itself); never enters an opaque
 * mount (-EACCES). *to gets a referenced node (an existing one for the same host file, which
 * then takes this name), st its stat. 0 or -errno (-ENFILE at max_nodes).
 */
int hostfs_walk(struct hostfs *fs, struct hostfs_node *from, const char *name,
		struct hostfs_node **to, struct stat *st) __must_check;
/* The node's O_PATH descriptor (borrowed until hostfs_trim), reopened by its names if it was
 * evicted: an fd or -errno (-ESTALE: its name is gone or names another file now). */
int hostfs_fd(struct hostfs *fs, struct hostfs_node *n) __must_check;
/* fstat of the node (through its open descriptor when it has one, so an unlinked open file
 * still answers). 0 or -errno. */
int hostfs_stat(struct hostfs *fs, struct hostfs_node *n, struct stat *st) __must_check;
/* Close cached descriptors, least recently used first, down to max_cached (nodes with open
 * files are kept). Between two requests. */
void hostfs_trim(struct hostfs *fs);

/*
 * Open what n names for I/O with host open flags (directories and regular files only:
 * ELOOP for a symlink, EPERM for anything else; a directory read-only; on a read-only share
 * O_NOATIME where the host lets us). An fd the caller keeps and gives back with
 * hostfs_release_io, or -errno (-ENFILE at max_open).
 */
int hostfs_open_io(struct hostfs *fs, struct hostfs_node *n, int flags) __must_check;
void hostfs_release_io(struct hostfs *fs, struct hostfs_node *n, int fd);
/* fd, an open descriptor of n that the caller made itself (O_CREAT's, n from hostfs_made),
 * counted as one of n's opens as hostfs_open_io's are (given back by hostfs_release_io): 0,
 * or -ENFILE at max_open (fd left to the caller). hostfs_open_room() first says whether
 * there is room, before a file is made that could not be kept open. */
int hostfs_take_io(struct hostfs *fs, struct hostfs_node *n, int fd) __must_check;
int hostfs_open_room(struct hostfs *fs) __must_check;
/*
 * The node for a file just made as `name` in directory node dir (created, mkdir'ed,
 * symlinked, linked): walked to as hostfs_walk does. fd >= 0: an open descriptor of it
 * (O_CREAT's), whose identity is taken instead of a second lookup. Same returns.
 */
int hostfs_made(struct hostfs *fs, struct hostfs_node *dir, const char *name, int fd,
		struct hostfs_node **to, struct stat *st) __must_check;

/* After the guest renamed dir/name to ndir/nname (through the server): the node named so
 * (if any) takes its new name, and one that was named nname there loses its name. */
void hostfs_renamed(struct hostfs *fs, struct hostfs_node *dir, const char *name,
		    struct hostfs_node *ndir, const char *nname);
/* After the guest removed dir/name: the node named so (if any) loses its name. */
void hostfs_unlinked(struct hostfs *fs, struct hostfs_node *dir, const char *name);

/*
 * The node's path beneath the share ("" for the root, "a/b"), for snapshots and messages:
 * written into buf (NUL-terminated); its length, or -ENAMETOOLONG (longer than len - 1),
 * -ESTALE (a name on the way is gone).
 */
int hostfs_path(const struct hostfs *fs, const struct hostfs_node *n, char *buf, size_t len);

/*
 * Shared rules for both servers (hostfs-ops.c):
 * hostfs_guest_mode: the permission bits a guest may give a host file (never set-user-ID or
 * set-group-ID on a file; a directory keeps set-group-ID).
 * hostfs_fix_mode: a new file (fd, stat st) gets exactly mode (our umask does not apply).
 * hostfs_is_device_type: mknod of a character or block device is refused (EPERM).
 */
u32 hostfs_guest_mode(u32 mode, bool dir);
bool hostfs_is_device_type(u32 mode);
int hostfs_fix_mode(struct hostfs *fs, int fd, const struct stat *st, u32 mode) __must_check;

bool hostfs_readonly(const struct hostfs *fs);
/* /proc/self/fd, for the *at() calls that must name exactly a descriptor's inode (linkat,
 * fchmodat on an O_PATH descriptor). */
int hostfs_proc_fd(const struct hostfs *fs);
/* The root directory's descriptor (never evicted). */
int hostfs_root_fd(const struct hostfs *fs);
/* The magic link name of fd under hostfs_proc_fd (buf of 16 bytes). */
void hostfs_proc_name(char buf[16], int fd);
/* One validated component beneath dfd through openat2 (RESOLVE_BENEATH, no symlinks,
 * flags | O_NOFOLLOW | O_CLOEXEC): an fd or -errno. */
int hostfs_open_beneath(int dfd, const char *name, u64 flags, u64 mode) __must_check;

/* Snapshot restore: n (just walked to from the root) takes id, the one it had when saved, so
 * the guest's node ids stay valid; later new nodes get ids above every id given. 0, or
 * -EEXIST (another node has it), -EINVAL (0 or the root's id for a node that is not the root). */
int hostfs_set_id(struct hostfs *fs, struct hostfs_node *n, u64 id) __must_check;

/* New caps (0: the default) for a table that answers nothing meanwhile; what is held beyond
 * them stays until released. */
void hostfs_set_caps(struct hostfs *fs, u32 max_nodes, u32 max_cached, u32 max_open);
void hostfs_stats(const struct hostfs *fs, struct hostfs_stats *st);

#endif

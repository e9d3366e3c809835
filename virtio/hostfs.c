/* The host-file node table both file servers share: nodes by host identity, names as a tree, a bounded O_PATH cache, evicted nodes reopened beneath the root by their names. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>

#include "hostfs-priv.h"

/*
 * Why the table is safe against a hostile guest (and a host that changes under it):
 * - A node is found again only by its names, one component at a time from a descriptor the
 *   table holds, through hostfs_open_beneath (openat2 RESOLVE_BENEATH, no symlink followed,
 *   no magic link): a symlink swapped into a parent's place fails (ELOOP, ENOTDIR) and
 *   every step's (dev, ino) is compared with the node's, so another file at a known path
 *   is -ESTALE, never that file. Intermediate descriptors are closed as the walk goes.
 * - ".." is resolved by the host from a directory's descriptor, then checked to lie beneath
 *   the root (hostfs_beneath_root), which also refuses a directory moved out of the share.
 * - Names and ids are checked before use; the hash tables are seeded from getrandom, so a
 *   guest cannot choose names or inodes that all land in one chain.
 * - Nodes, cached descriptors and open files are each bounded (the caps): past one the call
 *   answers -ENFILE, and the first time the warn callback says so once.
 */

#define HOSTFS_UP_MAX 4096 /* directory levels a ".." check climbs before refusing */
#define HOSTFS_HTAB_MIN 64u

/* ---- hashing ---- */

static u64 mix64(u64 h)
{
	/* murmur3's 64-bit finaliser */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h;
}

static u64 hash_ino(const struct hostfs *fs, dev_t dev, ino_t ino)
{
	return mix64(mix64((u64)ino ^ fs->seed) ^ (u64)dev);
}

static u64 hash_id(const struct hostfs *fs, u64 id)
{
	return mix64(id ^ fs->seed);
}

/* FNV-1a from a secret basis, finished by a mix: names the guest picks spread over chains. */
static u64 hash_name(const struct hostfs *fs, const struct hostfs_node *parent, const char *name)
{
	u64 h = fs->seed ^ mix64((u64)(uintptr_t)parent);

	for (const char *p = name; *p; p++)
		h = (h ^ (u8)*p) * 0x100000001b3ull;
	return mix64(h);
}

static struct hostfs_node **chain(struct hostfs_node *n, size_t off)
{
	return (struct hostfs_node **)((char *)n + off);
}

static u64 node_hash(const struct hostfs *fs, const struct hostfs_node *n, size_t off)
{
	if (off == offsetof(struct hostfs_node, ino_next))
		return hash_ino(fs, n->dev, n->ino);
	if (off == offsetof(struct hostfs_node, id_next))
		return hash_id(fs, n->id);
	return hash_name(fs, n->parent, n->name);
}

static struct hostfs_node **bucket(const struct hostfs_htab *t, u64 h)
{
	return &t->b[h & (t->nb - 1)];
}

/* The first node of h's chain (NULL for a table that has none yet). */
static struct hostfs_node *first(const struct hostfs_htab *t, u64 h)
{
	return t->nb ? *bucket(t, h) : NULL;
}

/* Twice the buckets when the table is fuller than one node a bucket (a failed allocation
 * leaves it as it was: longer chains, still correct). */
static void htab_grow(struct hostfs *fs, struct hostfs_htab *t, size_t off)
{
	struct hostfs_htab nt = { .nb = t->nb ? 2 * t->nb : HOSTFS_HTAB_MIN, .count = t->count };

	if (t->count < t->nb)
		return;
	nt.b = calloc(nt.nb, sizeof(*nt.b));
	if (!nt.b)
		return;
	for (u32 i = 0; i < t->nb; i++) {
		struct hostfs_node *n = t->b[i], *next;

		for (; n; n = next) {
			struct hostfs_node **b = bucket(&nt, node_hash(fs, n, off));

			next = *chain(n, off);
			*chain(n, off) = *b;
			*b = n;
		}
	}
	free(t->b);
	*t = nt;
}

static void htab_add(struct hostfs *fs, struct hostfs_htab *t, struct hostfs_node *n, size_t off)
{
	struct hostfs_node **b;

	htab_grow(fs, t, off);
	if (!t->nb)
		return; /* hostfs_open checks its first two tables; by_name: nameless then */
	b = bucket(t, node_hash(fs, n, off));
	*chain(n, off) = *b;
	*b = n;
	t->count++;
}

static void htab_del(struct hostfs *fs, struct hostfs_htab *t, struct hostfs_node *n, size_t off)
{
	struct hostfs_node **p;

	if (!t->nb)
		return;
	for (p = bucket(t, node_hash(fs, n, off)); *p; p = chain(*p, off))
		if (*p == n) {
			*p = *chain(n, off);
			t->count--;
			return;
		}
}

#define OFF_INO offsetof(struct hostfs_node, ino_next)
#define OFF_ID offsetof(struct hostfs_node, id_next)
#define OFF_NAME offsetof(struct hostfs_node, name_next)

static struct hostfs_node *find_ino(const struct hostfs *fs, dev_t dev, ino_t ino)
{
	struct hostfs_node *n = first(&fs->by_ino, hash_ino(fs, dev, ino));

	while (n && !(n->dev == dev && n->ino == ino))
		n = n->ino_next;
	return n;
}

static struct hostfs_node *find_name(const struct hostfs *fs, const struct hostfs_node *parent,
				     const char *name)
{
	struct hostfs_node *n = first(&fs->by_name, hash_name(fs, parent, name));

	while (n && !(n->parent == parent && !strcmp(n->name, name)))
		n = n->name_next;
	return n;
}

struct hostfs_node *hostfs_find(struct hostfs *fs, u64 id)
{
	struct hostfs_node *n = first(&fs->by_id, hash_id(fs, id));

	while (n && n->id != id)
		n = n->id_next;
	return n;
}

/* ---- the descriptor cache ---- */

static void lru_unlink(struct hostfs *fs, struct hostfs_node *n)
{
	if (n->lru_prev)
		n->lru_prev->lru_next = n->lru_next;
	else
		fs->lru_head = n->lru_next;
	if (n->lru_next)
		n->lru_next->lru_prev = n->lru_prev;
	else
		fs->lru_tail = n->lru_prev;
	n->lru_prev = n->lru_next = NULL;
	fs->ncached--;
}

static void lru_push(struct hostfs *fs, struct hostfs_node *n)
{
	n->lru_prev = NULL;
	n->lru_next = fs->lru_head;
	if (fs->lru_head)
		fs->lru_head->lru_prev = n;
	else
		fs->lru_tail = n;
	fs->lru_head = n;
	fs->ncached++;
}

/* n's descriptor fd (n not the root, not open) joins the cache as the most recent. */
static void cache_take(struct hostfs *fs, struct hostfs_node *n, int fd)
{
	n->fd = fd;
	if (!n->nopen)
		lru_push(fs, n);
}

static void touch(struct hostfs *fs, struct hostfs_node *n)
{
	if (n == fs->root || n->nopen || fs->lru_head == n)
		return;
	lru_unlink(fs, n);
	lru_push(fs, n);
}

void hostfs_pin(struct hostfs *fs, struct hostfs_node *n)
{
	if (n->nopen++ == 0 && n != fs->root)
		lru_unlink(fs, n);
}

void hostfs_unpin(struct hostfs *fs, struct hostfs_node *n)
{
	if (--n->nopen == 0 && n != fs->root)
		lru_push(fs, n);
}

void hostfs_trim(struct hostfs *fs)
{
	while (fs->ncached > fs->max_cached && fs->lru_tail) {
		struct hostfs_node *n = fs->lru_tail;

		lru_unlink(fs, n);
		close(n->fd);
		n->fd = -1;
	}
}

/* ---- nodes and their names ---- */

static void name_drop(struct hostfs *fs, struct hostfs_node *n);

static void node_free(struct hostfs *fs, struct hostfs_node *n)
{
	if (!n->retired)
		htab_del(fs, &fs->by_ino, n, OFF_INO);
	htab_del(fs, &fs->by_id, n, OFF_ID);
	if (n->fd >= 0) {
		if (!n->nopen)
			lru_unlink(fs, n);
		close(n->fd);
	}
	fs->nopen -= n->nopen; /* released by a reset: their descriptors are the server's */
	fs->nnodes--;
	free(n);
}

void hostfs_get(struct hostfs_node *n)
{
	n->refs++;
}

/* Iterative: the last reference of a deep chain's leaf frees its ancestors without recursion. */
void hostfs_put(struct hostfs *fs, struct hostfs_node *n)
{
	while (n && --n->refs == 0 && n != fs->root) {
		struct hostfs_node *parent = n->parent;

		if (parent) {
			htab_del(fs, &fs->by_name, n, OFF_NAME);
			free(n->name);
		}
		node_free(fs, n);
		n = parent;
	}
}

/* n loses its name (and its reference on its parent). */
static void name_drop(struct hostfs *fs, struct hostfs_node *n)
{
	struct hostfs_node *parent = n->parent;

	if (!parent)
		return;
	htab_del(fs, &fs->by_name, n, OFF_NAME);
	FREE_AND_NULL(n->name);
	n->parent = NULL;
	hostfs_put(fs, parent);
}

/* Would dir be n itself or beneath it? (A bind mount of a directory inside itself.) */
static bool would_cycle(const struct hostfs_node *n, const struct hostfs_node *dir)
{
	for (; dir; dir = dir->parent)
		if (dir == n)
			return true;
	return false;
}

/*
 * n takes the name dir/name (whoever held it loses it: that name names n's file now). Kept as
 * it was when the new name would put n beneath itself, or the name cannot be allocated.
 */
static void name_set(struct hostfs *fs, struct hostfs_node *n, struct hostfs_node *dir,
		     const char *name)
{
	struct hostfs_node *old = find_name(fs, dir, name);
	char *copy;

	if (old == n || n == fs->root)
		return;
	if (old)
		name_drop(fs, old);
	if (would_cycle(n, dir) || !(copy = strdup(name)))
		return;
	hostfs_get(dir); /* before the old parent is put: dir may hang beneath it */
	name_drop(fs, n);
	n->parent = dir;
	n->name = copy;
	htab_add(fs, &fs->by_name, n, OFF_NAME);
}

static u64 new_id(struct hostfs *fs)
{
	while (hostfs_find(fs, fs->next_id))
		fs->next_id++; /* only after hostfs_set_id: ids are otherwise handed out in order */
	return fs->next_id++;
}

/*
 * The identity beyond (dev, ino) of the file fd names: a hash of its file handle, whose
 * generation number a reused inode number does not keep (0: the file system has no handles,
 * e.g. proc, or the call is refused). name_to_handle_at needs no privilege; the handle is
 * only compared, never opened.
 */
static u64 file_gen(int fd)
{
	union {
		struct file_handle fh;
		unsigned char b[sizeof(struct file_handle) + MAX_HANDLE_SZ];
	} h = { .fh.handle_bytes = MAX_HANDLE_SZ };
	const unsigned char *p = h.b + offsetof(struct file_handle, f_handle);
	u64 v = 0xcbf29ce484222325ull; /* FNV-1a */
	int mount_id;

	if (name_to_handle_at(fd, "", &h.fh, &mount_id, AT_EMPTY_PATH) < 0)
		return 0;
	for (unsigned i = 0; i < h.fh.handle_bytes && i < MAX_HANDLE_SZ; i++)
		v = (v ^ p[i]) * 0x100000001b3ull;
	return (v ^ (u64)h.fh.handle_type) | 1; /* never 0: 0 means "none" */
}

/* A new node for host file fd (stat st), named dir/name (name NULL: no name). */
static int node_new(struct hostfs *fs, struct hostfs_node *dir, const char *name, int fd,
		    const struct stat *st, struct hostfs_node **out)
{
	struct hostfs_node *n;

	if (fs->nnodes >= fs->max_nodes) {
		hostfs_cap_hit(fs, HOSTFS_CAP_NODES);
		return -ENFILE;
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->id = new_id(fs);
	n->dev = st->st_dev;
	n->ino = st->st_ino;
	n->mode = st->st_mode & S_IFMT;
	n->gen = file_gen(fd);
	/* Only a device change can enter another file system: statfs then, not on every step. */
	n->opaque = st->st_dev != fs->root->dev &&
		    (st->st_dev == dir->dev ? dir->opaque : hostfs_kernel_fs(fd));
	n->refs = 1;
	n->fd = -1;
	fs->nnodes++;
	htab_add(fs, &fs->by_ino, n, OFF_INO);
	htab_add(fs, &fs->by_id, n, OFF_ID);
	if (name)
		name_set(fs, n, dir, name);
	*out = n;
	return 0;
}

/*
 * Is host file fd (same dev and ino as n) n's file? Certainly while n holds a descriptor (the
 * inode cannot be freed and its number reused under it) or an open file. Otherwise the host
 * may have freed n's inode and given its number to a new file: the file handles must agree
 * where the file system has them, and a node whose name is gone (removed) is not taken for a
 * file found by a name where it has none.
 */
static bool same_file(const struct hostfs *fs, const struct hostfs_node *n, int fd)
{
	u64 gen;

	if (n->fd >= 0 || n->nopen || n == fs->root)
		return true;
	gen = n->gen ? file_gen(fd) : 0;
	if (gen && gen != n->gen)
		return false;
	return gen || n->parent;
}

/*
 * n is not the file its (dev, ino) names now: it leaves the identity table (its id stays, for
 * the guest's handles, which find it stale: its name is dropped, and a reopen compares the
 * file handle). NULL: the caller makes a new node.
 */
static struct hostfs_node *retire(struct hostfs *fs, struct hostfs_node *n)
{
	htab_del(fs, &fs->by_ino, n, OFF_INO);
	n->retired = true;
	name_drop(fs, n);
	fs->st.stale++;
	return NULL;
}

/*
 * The node for host file fd (taken over: closed or cached), stat st, just reached as dir/name
 * (name NULL: by ".."): an existing one for the same file, which takes the name, or a new one.
 * *to referenced.
 */
static int node_for(struct hostfs *fs, struct hostfs_node *dir, const char *name, int fd,
		    const struct stat *st, struct hostfs_node **to)
{
	struct hostfs_node *n = find_ino(fs, st->st_dev, st->st_ino);
	int ret = 0;

	if (n && !same_file(fs, n, fd))
		n = retire(fs, n);
	if (n) {
		hostfs_get(n);
		if (name)
			name_set(fs, n, dir, name);
	} else {
		ret = node_new(fs, dir, name, fd, st, &n);
	}
	if (ret || n->fd >= 0 || n == fs->root)
		close(fd);
	else
		cache_take(fs, n, fd);
	if (!ret)
		*to = n;
	return ret;
}

/* ---- reopening by names ---- */

static int stale_of(int err)
{
	/* The name gone, or something else there that a walk refuses (a symlink, a file where
	 * a directory was, a name escaping): the node is not reachable by its name any more. */
	return err == -ENOENT || err == -ENOTDIR || err == -ELOOP || err == -EXDEV ? -ESTALE : err;
}

/* One step of a reopen: child c from directory dfd, its identity compared. */
static int reopen_step(int dfd, const struct hostfs_node *c)
{
	struct stat st;
	int fd = hostfs_open_beneath(dfd, c->name, O_PATH, 0), ret;

	if (fd < 0)
		return stale_of(fd);
	ret = hostfs_fd_stat(fd, &st);
	if (!ret && (c->retired || st.st_dev != c->dev || st.st_ino != c->ino ||
		     (c->gen && file_gen(fd) != c->gen)))
		ret = -ESTALE; /* another file at that name, or an inode number reused */
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

/* Evicted n opened again from its nearest cached ancestor, one name at a time. */
static int reopen(struct hostfs *fs, struct hostfs_node *n)
{
	struct hostfs_node *a, **path;
	u32 depth = 0;
	int dfd, fd = -ESTALE;

	for (a = n; a->fd < 0; a = a->parent, depth++)
		if (!a->parent)
			return -ESTALE; /* a name on the way is gone */
	path = malloc(depth * sizeof(*path));
	if (!path)
		return -ENOMEM;
	a = n;
	for (u32 i = depth; i > 0; a = a->parent)
		path[--i] = a;
	dfd = a->fd; /* a: the cached ancestor, where the loop above stopped */
	for (u32 i = 0; i < depth; i++) {
		fd = reopen_step(dfd, path[i]);
		if (dfd != a->fd)
			close(dfd); /* an intermediate: not cached, the walk's alone */
		if (fd < 0)
			break;
		dfd = fd;
	}
	free(path);
	return fd;
}

int hostfs_fd(struct hostfs *fs, struct hostfs_node *n)
{
	int fd;

	if (n->fd >= 0) {
		touch(fs, n);
		return n->fd;
	}
	fs->st.reopens++;
	fd = reopen(fs, n);
	if (fd < 0) {
		if (fd == -ESTALE)
			fs->st.stale++;
		return fd;
	}
	cache_take(fs, n, fd);
	return fd;
}

int hostfs_stat(struct hostfs *fs, struct hostfs_node *n, struct stat *st)
{
	int fd = hostfs_fd(fs, n);

	return fd < 0 ? fd : hostfs_fd_stat(fd, st);
}

/* ---- walks ---- */

static bool name_ok(const char *name)
{
	size_t len = strnlen(name, NAME_MAX + 1);

	return len && len <= NAME_MAX && !strchr(name, '/') && strcmp(name, ".");
}

static bool is_root_id(const struct hostfs *fs, dev_t dev, ino_t ino)
{
	return dev == fs->root->dev && ino == fs->root->ino;
}

/*
 * Is the directory fd (stat st) the share's root or beneath it? Climbs by ".." until it meets
 * the root (yes) or the top of the host's tree, or gives up after HOSTFS_UP_MAX levels (no).
 * Only ".." walks pay for this; Linux's clients never send them.
 */
static bool beneath_root(const struct hostfs *fs, int fd, const struct stat *st)
{
	struct stat cur = *st, up;
	int dfd = fd;
	bool ok = false;

	for (int level = 0; level < HOSTFS_UP_MAX; level++) {
		int ufd;

		if (is_root_id(fs, cur.st_dev, cur.st_ino)) {
			ok = true;
			break;
		}
		ufd = openat(dfd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (dfd != fd)
			close(dfd);
		dfd = ufd;
		if (ufd < 0 || hostfs_fd_stat(ufd, &up) < 0)
			break;
		if (up.st_dev == cur.st_dev && up.st_ino == cur.st_ino)
			break; /* the host's top, and the share's root was not on the way */
		cur = up;
	}
	if (dfd >= 0 && dfd != fd)
		close(dfd);
	return ok;
}

/* ".." from directory node from: the root at the root, else checked to be beneath it. */
static int walk_up(struct hostfs *fs, struct hostfs_node *from, int dfd, struct hostfs_node **to,
		   struct stat *st)
{
	int fd, ret;

	if (from == fs->root || is_root_id(fs, from->dev, from->ino)) {
		hostfs_get(fs->root);
		*to = fs->root;
		return hostfs_fd_stat(fs->root_fd, st);
	}
	fd = openat(dfd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return hostfs_errno();
	ret = hostfs_fd_stat(fd, st);
	if (!ret && !beneath_root(fs, fd, st))
		ret = -EACCES;
	if (ret) {
		close(fd);
		return ret;
	}
	/* Its name is from's parent's when that is the file reached; else not known. */
	return node_for(fs, from, NULL, fd, st, to);
}

int hostfs_walk(struct hostfs *fs, struct hostfs_node *from, const char *name,
		struct hostfs_node **to, struct stat *st)
{
	bool up = !strcmp(name, "..");
	int dfd, fd, ret;

	if (!up && !name_ok(name))
		return -EINVAL;
	if (!S_ISDIR(from->mode))
		return -ENOTDIR;
	if (from->opaque && !up)
		return -EACCES;
	dfd = hostfs_fd(fs, from);
	if (dfd < 0)
		return dfd;
	if (up)
		return walk_up(fs, from, dfd, to, st);
	fd = hostfs_open_beneath(dfd, name, O_PATH, 0);
	if (fd < 0)
		return fd;
	ret = hostfs_fd_stat(fd, st);
	if (ret) {
		close(fd);
		return ret;
	}
	return node_for(fs, from, name, fd, st, to);
}

int hostfs_made(struct hostfs *fs, struct hostfs_node *dir, const char *name, int fd,
		struct hostfs_node **to, struct stat *st)
{
	int pfd, ret;

	if (fd < 0)
		return hostfs_walk(fs, dir, name, to, st);
	if (!name_ok(name) || !strcmp(name, ".."))
		return -EINVAL;
	if (dir->opaque)
		return -EACCES; /* nothing is made inside a kernel interface's mount */
	ret = hostfs_fd_stat(fd, st);
	if (ret)
		return ret;
	/* A copy of the caller's descriptor serves as the node's (the caller keeps fd). */
	pfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (pfd < 0)
		return hostfs_errno();
	return node_for(fs, dir, name, pfd, st, to);
}

void hostfs_renamed(struct hostfs *fs, struct hostfs_node *dir, const char *name,
		    struct hostfs_node *ndir, const char *nname)
{
	struct hostfs_node *n = find_name(fs, dir, name);
	struct hostfs_node *over = find_name(fs, ndir, nname);

	if (over && over != n)
		name_drop(fs, over);
	if (n)
		name_set(fs, n, ndir, nname);
}

void hostfs_unlinked(struct hostfs *fs, struct hostfs_node *dir, const char *name)
{
	struct hostfs_node *n = find_name(fs, dir, name);

	if (n)
		name_drop(fs, n);
}

int hostfs_path(const struct hostfs *fs, const struct hostfs_node *n, char *buf, size_t len)
{
	size_t need = 0, at;

	if (!len)
		return -ENAMETOOLONG;
	for (const struct hostfs_node *a = n; a != fs->root; a = a->parent) {
		if (!a->parent)
			return -ESTALE;
		need += strlen(a->name) + (a->parent != fs->root);
	}
	if (need > len - 1)
		return -ENAMETOOLONG;
	buf[need] = '\0';
	at = need;
	for (const struct hostfs_node *a = n; a != fs->root; a = a->parent) {
		size_t l = strlen(a->name);

		at -= l;
		memcpy(buf + at, a->name, l);
		if (a->parent != fs->root)
			buf[--at] = '/';
	}
	return (int)need;
}

int hostfs_set_id(struct hostfs *fs, struct hostfs_node *n, u64 id)
{
	struct hostfs_node *o = hostfs_find(fs, id);

	if (n == fs->root)
		return id == HOSTFS_ROOT_ID ? 0 : -EINVAL;
	if (!id || id == HOSTFS_ROOT_ID)
		return -EINVAL;
	if (o == n)
		return 0;
	if (o)
		return -EEXIST;
	htab_del(fs, &fs->by_id, n, OFF_ID);
	n->id = id;
	htab_add(fs, &fs->by_id, n, OFF_ID);
	fs->next_id = MAX(fs->next_id, id + 1);
	return 0;
}

/* ---- the table ---- */

struct hostfs_node *hostfs_root(struct hostfs *fs)
{
	return fs->root;
}

bool hostfs_readonly(const struct hostfs *fs)
{
	return fs->readonly;
}

int hostfs_proc_fd(const struct hostfs *fs)
{
	return fs->proc_fd;
}

int hostfs_root_fd(const struct hostfs *fs)
{
	return fs->root_fd;
}

void hostfs_set_caps(struct hostfs *fs, u32 max_nodes, u32 max_cached, u32 max_open)
{
	fs->max_nodes = max_nodes ? MIN(max_nodes, HOSTFS_NODES_MAX) : HOSTFS_NODES_DEFAULT;
	fs->max_cached = max_cached ? MAX(max_cached, 8u) : HOSTFS_CACHED_DEFAULT;
	fs->max_open = max_open ? max_open : HOSTFS_OPEN_DEFAULT;
}

void hostfs_stats(const struct hostfs *fs, struct hostfs_stats *st)
{
	*st = fs->st;
	st->nodes = fs->nnodes;
	st->max_nodes = fs->max_nodes;
	st->cached = fs->ncached;
	st->max_cached = fs->max_cached;
	st->open = fs->nopen;
	st->max_open = fs->max_open;
}

/* Every node but the root freed, whatever references them (a reset, the close). */
static void free_all(struct hostfs *fs)
{
	for (u32 i = 0; i < fs->by_id.nb; i++) {
		struct hostfs_node *n = fs->by_id.b[i], *next;

		for (; n; n = next) {
			next = n->id_next;
			if (n == fs->root)
				continue;
			if (n->parent)
				free(n->name);
			node_free(fs, n);
		}
	}
	fs->by_name.count = 0;
	if (fs->by_name.b)
		memset(fs->by_name.b, 0, fs->by_name.nb * sizeof(*fs->by_name.b));
}

void hostfs_reset(struct hostfs *fs)
{
	free_all(fs);
	fs->root->refs = 1;
	fs->root->nopen = 0;
	fs->root->nlookup = 0;
	fs->nopen = 0;
	fs->next_id = HOSTFS_ROOT_ID + 1;
}

void hostfs_close(struct hostfs *fs)
{
	if (!fs)
		return;
	if (fs->root) {
		free_all(fs);
		free(fs->root);
	}
	free(fs->by_ino.b);
	free(fs->by_id.b);
	free(fs->by_name.b);
	if (fs->root_fd >= 0)
		close(fs->root_fd);
	if (fs->proc_fd >= 0)
		close(fs->proc_fd);
	free(fs);
}

/* The host facilities the table relies on, checked once with a clear message. */
static int open_facilities(struct hostfs *fs, const char *root, struct stat *st, char *err,
			   size_t errlen)
{
	struct statfs sfs;
	int fd;

	fs->root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fs->root_fd < 0 || hostfs_fd_stat(fs->root_fd, st) < 0) {
		errfmt(err, errlen, "share %s: %s", root, strerror(errno));
		return hostfs_errno();
	}
	fd = hostfs_open_beneath(fs->root_fd, ".", O_PATH, 0);
	if (fd < 0) {
		errfmt(err, errlen, "share %s: openat2: %s%s", root, strerror(-fd),
		       fd == -ENOSYS ? " (Linux 5.6 or later is needed)" : "");
		return fd;
	}
	close(fd);
	fs->proc_fd = open("/proc/self/fd", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fs->proc_fd < 0 || fstatfs(fs->proc_fd, &sfs) < 0 || sfs.f_type != PROC_SUPER_MAGIC) {
		errfmt(err, errlen, "share %s: needs /proc/self/fd (is /proc mounted?)", root);
		return -ENOENT;
	}
	return 0;
}

static int root_node(struct hostfs *fs, const struct stat *st)
{
	struct hostfs_node *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	*r = (struct hostfs_node){ .id = HOSTFS_ROOT_ID,
				   .dev = st->st_dev,
				   .ino = st->st_ino,
				   .mode = st->st_mode & S_IFMT,
				   .refs = 1,
				   .fd = fs->root_fd };
	fs->root = r;
	fs->nnodes = 1;
	fs->next_id = HOSTFS_ROOT_ID + 1;
	htab_add(fs, &fs->by_ino, r, OFF_INO);
	htab_add(fs, &fs->by_id, r, OFF_ID);
	return fs->by_ino.b && fs->by_id.b ? 0 : -ENOMEM;
}

int hostfs_open(struct hostfs **out, const char *root, const struct hostfs_opts *o, char *err,
		size_t errlen)
{
	struct hostfs *fs = calloc(1, sizeof(*fs));
	struct stat st;
	int ret;

	*out = NULL;
	if (!fs) {
		errfmt(err, errlen, "share %s: out of memory", root);
		return -ENOMEM;
	}
	fs->root_fd = fs->proc_fd = -1;
	fs->readonly = o->readonly;
	hostfs_set_caps(fs, o->max_nodes, o->max_cached, o->max_open);
	snprintf(fs->label, sizeof(fs->label), "%s", o->label ? o->label : root);
	fs->warn = o->warn;
	fs->warn_opaque = o->warn_opaque;
	if (getrandom(&fs->seed, sizeof(fs->seed), GRND_NONBLOCK) != sizeof(fs->seed))
		fs->seed = now_ns();
	ret = open_facilities(fs, root, &st, err, errlen);
	if (!ret && root_node(fs, &st)) {
		errfmt(err, errlen, "share %s: out of memory", root);
		ret = -ENOMEM;
	}
	if (ret) {
		hostfs_close(fs);
		return ret;
	}
	*out = fs;
	return 0;
}

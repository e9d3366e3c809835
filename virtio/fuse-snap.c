/* The FUSE server in a snapshot: the session, every node the guest holds (by its path beneath the share) and every open handle, walked to and reopened at restore as the live server would. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/snap.h"
#include "fuse-priv.h"

/*
 * Records, from the caller's tag on (fuse-server.h: FUSE_SNAP_TAGS of them):
 *   tag + 0  struct fuse_snap_session, once
 *   tag + 1  one per node: struct fuse_snap_node, then its path (no NUL; empty for the root)
 *   tag + 2  one per open handle: struct fuse_snap_handle
 * Nodes come before handles and parents before children (saved by depth), so a restore walks
 * each path once its parent holds its id. Not saved, because the server keeps none of it
 * between requests: a directory's read position (READDIR carries the guest's offset and every
 * read seeks to it), a file's offset (READ and WRITE carry theirs), requests in flight (the
 * device's quiesce parks its thread between two requests). Node ids and fh numbers come back
 * as they were, so the guest's stay valid.
 */
#define REC_SESSION 0
#define REC_NODE 1
#define REC_HANDLE 2
#define FSNAP_PATH_MAX (PATH_MAX - 1)

struct fuse_snap_session {
	u32 minor; /* 0: no INIT */
	u32 flags;
	u32 nnodes, nhandles;
	u64 root_dev, root_ino; /* the share's root, to tell the same share from a copy */
};
_Static_assert(sizeof(struct fuse_snap_session) == 32, "fuse_snap_session has a hole");

struct fuse_snap_node {
	u64 id, nlookup;
	u32 type; /* S_IFMT bits */
	u32 reserved;
	u64 dev, ino;
};
_Static_assert(sizeof(struct fuse_snap_node) == 40, "fuse_snap_node has a hole");

struct fuse_snap_handle {
	u64 fh, node;
	u32 flags; /* host open flags (FUSE_FH_REOPEN_FLAGS) */
	u8 dir;
	u8 reserved[3];
};
_Static_assert(sizeof(struct fuse_snap_handle) == 24, "fuse_snap_handle has a hole");

/* A guest's path for a one-line message: control bytes as '?', cut at 200 bytes. */
static const char *shown(char out[208], const char *p)
{
	size_t i;

	for (i = 0; p[i] && i < 200; i++)
		out[i] = (u8)p[i] < 0x20 || p[i] == 0x7f ? '?' : p[i];
	strcpy(out + i, p[i] ? "..." : "");
	return out;
}

/* ---- save ---- */

/* One node's record into b: its path must still name it. */
static int save_node(struct fuse_server *s, struct hostfs_node *n, u16 tag, struct snap_rec_buf *b,
		     char *err, size_t errlen)
{
	struct {
		struct fuse_snap_node h;
		char path[FSNAP_PATH_MAX + 1];
	} r;
	struct stat st;
	int len = hostfs_path(s->fs, n, r.path, sizeof(r.path));
	int ret = len < 0 ? len : hostfs_stat(s->fs, n, &st);

	if (!ret && !st.st_nlink)
		ret = -ESTALE;
	if (ret) {
		errfmt(err, errlen, "node %llu: %s", (unsigned long long)n->id,
		       ret == -ESTALE
			       ? "its name is gone from the share (an unlinked file still open?)"
			       : strerror(-ret));
		return -EOPNOTSUPP;
	}
	memset(&r.h, 0, sizeof(r.h));
	r.h.id = n->id;
	r.h.nlookup = n->nlookup;
	r.h.type = n->mode & S_IFMT;
	r.h.dev = n->dev;
	r.h.ino = n->ino;
	snap_rec_put(b, (u16)(tag + REC_NODE), &r, sizeof(r.h) + (size_t)len);
	return 0;
}

struct by_depth {
	struct hostfs_node *n;
	u32 depth;
};

static int cmp_depth(const void *a, const void *b)
{
	const struct by_depth *x = a, *y = b;

	return x->depth != y->depth ? (x->depth < y->depth ? -1 : 1)
				    : (x->n->id < y->n->id ? -1 : x->n->id > y->n->id);
}

static u32 node_depth(const struct hostfs *fs, const struct hostfs_node *n)
{
	u32 d = 0;

	for (const struct hostfs_node *a = n; a && a != hostfs_root((struct hostfs *)fs);
	     a = a->parent)
		d++;
	return d;
}

/* Every held node and every handle's node the guest forgot (each once), parents first. */
static int save_nodes(struct fuse_server *s, u16 tag, struct snap_rec_buf *b, u32 *count, char *err,
		      size_t errlen)
{
	struct by_depth *v = calloc((size_t)s->nheld + s->nhandles + 1, sizeof(*v));
	u32 n = 0;
	int ret = 0;

	*count = 0;
	if (!v) {
		errfmt(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (u32 i = 0; i < s->nheld; i++)
		v[n++].n = hostfs_find(s->fs, s->held[i]);
	for (u32 i = 0; i < s->nhandles; i++)
		if (s->h[i].used && !s->h[i].n->nlookup && s->h[i].n->id != HOSTFS_ROOT_ID)
			v[n++].n = s->h[i].n;
	for (u32 i = 0; i < n; i++)
		v[i].depth = node_depth(s->fs, v[i].n);
	/* Sorted by (depth, id): two handles of one node come next to each other, saved once. */
	qsort(v, n, sizeof(*v), cmp_depth);
	for (u32 i = 0, saved = 0; i < n && !ret; i++) {
		if (i && v[i].n == v[i - 1].n)
			continue;
		ret = save_node(s, v[i].n, tag, b, err, errlen);
		*count = ++saved;
	}
	free(v);
	return ret;
}

int fuse_server_save(struct fuse_server *s, u16 tag, struct snap_rec_buf *b, char *err,
		     size_t errlen)
{
	struct hostfs_node *root = hostfs_root(s->fs);
	struct fuse_snap_session ss = { .minor = s->minor,
					.flags = s->flags,
					.nhandles = s->nused,
					.root_dev = root->dev,
					.root_ino = root->ino };
	int ret;

	if (s->held_lost) {
		errfmt(err, errlen, "the nodes the guest holds are not all known (out of memory)");
		return -EOPNOTSUPP;
	}
	fsrv_held_compact(s);
	/* A handle's node the guest forgot is saved with no lookups; two handles of one such node
	 * would save it twice: refused below as the restore would. */
	ret = save_nodes(s, tag, b, &ss.nnodes, err, errlen);
	if (ret)
		return ret;
	snap_rec_put(b, (u16)(tag + REC_SESSION), &ss, sizeof(ss));
	for (u32 i = 0; i < s->nhandles; i++) {
		const struct fuse_handle *h = &s->h[i];
		struct fuse_snap_handle r = { .fh = (u64)h->gen << 32 | i, .node = 0 };

		if (!h->used)
			continue;
		r.node = h->n->id;
		r.flags = h->flags;
		r.dir = h->dir;
		snap_rec_put(b, (u16)(tag + REC_HANDLE), &r, sizeof(r));
	}
	return 0;
}

/* ---- load ---- */

/* A path as the live server keeps them: components of 1..NAME_MAX bytes, none "." or "..", no
 * NUL, not absolute, no empty component; "" is the root. */
static bool path_ok(const char *p, size_t len)
{
	size_t start = 0;

	if (!len)
		return true;
	if (len > FSNAP_PATH_MAX || memchr(p, '\0', len))
		return false;
	for (size_t i = 0; i <= len; i++) {
		size_t n = i - start;

		if (i < len && p[i] != '/')
			continue;
		if (!n || n > NAME_MAX || (n == 1 && p[start] == '.') ||
		    (n == 2 && p[start] == '.' && p[start + 1] == '.'))
			return false;
		start = i + 1;
	}
	return true;
}

/* The root, then each component of path (path_ok) walked as LOOKUP walks: *out gets the last
 * node with a reference (the root without one), st its stat. 0 or -errno. */
static int walk_path(struct fuse_server *s, const char *path, struct hostfs_node **out,
		     struct stat *st)
{
	struct hostfs_node *n = hostfs_root(s->fs), *next;
	char name[NAME_MAX + 1];
	int ret = hostfs_stat(s->fs, n, st);

	while (!ret && *path) {
		size_t len = strcspn(path, "/");

		memcpy(name, path, len);
		name[len] = '\0';
		path += len + (path[len] == '/');
		ret = hostfs_walk(s->fs, n, name, &next, st);
		if (n != hostfs_root(s->fs))
			hostfs_put(s->fs, n);
		if (!ret)
			n = next;
	}
	*out = ret ? NULL : n;
	return ret;
}

static const char *kind_name(u32 type)
{
	return type == S_IFDIR	 ? "directory"
	       : type == S_IFREG ? "file"
	       : type == S_IFLNK ? "symlink"
				 : "special file";
}

/* The walked node n (path p, stat st) against the saved h: kind, identity, id. */
static int node_matches(struct fuse_server *s, const struct fuse_snap_node *h, const char *p,
			struct hostfs_node *n, const struct stat *st, bool same, char *err,
			size_t errlen)
{
	char sh[208];
	int ret;

	if ((st->st_mode & S_IFMT) != h->type) {
		errfmt(err, errlen, "node %llu's path '%s' is a %s now, was a %s",
		       (unsigned long long)h->id, shown(sh, p), kind_name(st->st_mode & S_IFMT),
		       kind_name(h->type));
		return -EINVAL;
	}
	if (same && (st->st_dev != h->dev || st->st_ino != h->ino)) {
		errfmt(err, errlen,
		       "node %llu's path '%s' names another file now (inode %llu, was %llu)",
		       (unsigned long long)h->id, shown(sh, p), (unsigned long long)st->st_ino,
		       (unsigned long long)h->ino);
		return -EINVAL;
	}
	ret = n->nlookup ? -EEXIST : hostfs_set_id(s->fs, n, h->id);
	if (ret) {
		errfmt(err, errlen, "node %llu ('%s'): its id is taken or saved twice (%s)",
		       (unsigned long long)h->id, shown(sh, p), strerror(-ret));
		return -EINVAL;
	}
	return 0;
}

/* One node record: checked, walked to, given its id and lookups back. */
static int load_node(struct fuse_server *s, const void *data, u32 len, bool same,
		     struct hostfs_node **pin, char *err, size_t errlen)
{
	char path[FSNAP_PATH_MAX + 1], sh[208];
	struct fuse_snap_node h;
	size_t plen = len - sizeof(h);
	struct hostfs_node *n;
	struct stat st;
	int ret;

	if (len < sizeof(h) || plen > FSNAP_PATH_MAX) {
		errfmt(err, errlen, "a node record of %u bytes", len);
		return -EINVAL;
	}
	memcpy(&h, data, sizeof(h));
	memcpy(path, (const u8 *)data + sizeof(h), plen);
	path[plen] = '\0';
	if (!path_ok(path, plen) || h.reserved || (!plen) != (h.id == HOSTFS_ROOT_ID)) {
		errfmt(err, errlen, "node %llu: a bad path or field", (unsigned long long)h.id);
		return -EINVAL;
	}
	ret = walk_path(s, path, &n, &st);
	if (ret) {
		errfmt(err, errlen, "node %llu's path '%s' is gone from the share (%s)",
		       (unsigned long long)h.id, shown(sh, path), strerror(-ret));
		return -EINVAL;
	}
	ret = node_matches(s, &h, path, n, &st, same, err, errlen);
	if (ret) {
		if (n != hostfs_root(s->fs))
			hostfs_put(s->fs, n);
		return ret;
	}
	fsrv_restore_lookups(s, n, h.nlookup);
	/* The walk's reference stays until every handle is back (a handle may name a node the
	 * guest forgot, held by nothing else): pins[] keeps it. */
	*pin = n;
	return 0;
}

/* One handle record: checked against its node and the share, reopened at its own fh. */
static int load_handle(struct fuse_server *s, const void *data, u32 len, char *err, size_t errlen)
{
	struct fuse_snap_handle h;
	struct hostfs_node *n;
	u32 acc;
	int fd, ret;

	if (len != sizeof(h)) {
		errfmt(err, errlen, "a handle record of %u bytes", len);
		return -EINVAL;
	}
	memcpy(&h, data, sizeof(h));
	n = h.node ? hostfs_find(s->fs, h.node) : NULL;
	acc = h.flags & ~(u32)O_DIRECTORY;
	if (!n || h.dir > 1 || h.reserved[0] || h.reserved[1] || h.reserved[2] ||
	    (h.flags & ~(u32)FUSE_FH_REOPEN_FLAGS) || fsrv_open_flags(s, acc) < 0 ||
	    (h.dir ? h.flags != (O_RDONLY | O_DIRECTORY) || !S_ISDIR(n->mode)
		   : (h.flags & O_DIRECTORY) || !S_ISREG(n->mode))) {
		errfmt(err, errlen, "fh %#llx: a bad node, kind or open flags (0x%x)",
		       (unsigned long long)h.fh, h.flags);
		return -EINVAL;
	}
	fd = hostfs_open_io(s->fs, n, (int)h.flags);
	ret = fd < 0 ? fd : fsrv_handle_place(s, h.fh, n, fd, h.flags, h.dir);
	if (ret) {
		if (fd >= 0)
			hostfs_release_io(s->fs, n, fd);
		errfmt(err, errlen, "fh %#llx cannot be opened again (%s)",
		       (unsigned long long)h.fh, strerror(-ret));
		return -EINVAL;
	}
	return 0;
}

/* The session record, checked against this server's bounds. */
static int load_session(struct fuse_server *s, const void *sec, size_t len, u16 tag,
			struct fuse_snap_session *ss, char *err, size_t errlen)
{
	struct hostfs_stats hs;

	hostfs_stats(s->fs, &hs);
	if (snap_rec_get(sec, len, (u16)(tag + REC_SESSION), ss, sizeof(*ss)) < 0) {
		errfmt(err, errlen, "no FUSE session record of %zu bytes", sizeof(*ss));
		return -EINVAL;
	}
	if (ss->minor && (ss->minor < FUSE_SRV_MINOR_MIN || ss->minor > FUSE_SRV_MINOR))
		errfmt(err, errlen, "FUSE minor %u outside %u..%u", ss->minor, FUSE_SRV_MINOR_MIN,
		       FUSE_SRV_MINOR);
	else if (ss->flags & ~(u32)(FSRV_INIT_FLAGS | FUSE_CACHE_SYMLINKS))
		errfmt(err, errlen, "INIT flags 0x%x this server does not offer", ss->flags);
	else if (ss->nnodes > hs.max_nodes || ss->nhandles > s->max_handles ||
		 (!ss->minor && (ss->nnodes || ss->nhandles)))
		errfmt(err, errlen, "%u nodes and %u handles, more than this share's %u and %u",
		       ss->nnodes, ss->nhandles, hs.max_nodes, s->max_handles);
	else
		return 0;
	return -EINVAL;
}

/* The node and handle records, in order; pins[] (ss->nnodes of them) holds each node walked. */
static int load_records(struct fuse_server *s, const void *sec, size_t len, u16 tag,
			const struct fuse_snap_session *ss, struct hostfs_node **pins, u32 *npins,
			char *err, size_t errlen)
{
	struct hostfs_node *root = hostfs_root(s->fs);
	bool same = ss->root_dev == root->dev && ss->root_ino == root->ino;
	struct snap_rec_iter it = { sec, len };
	u32 rlen, nhandles = 0;
	const void *data;
	u16 t;
	int ret;

	while ((ret = snap_rec_next(&it, &t, &data, &rlen)) == 1) {
		if (t == tag + REC_NODE && *npins < ss->nnodes && !nhandles)
			ret = load_node(s, data, rlen, same, &pins[*npins], err, errlen);
		else if (t == tag + REC_HANDLE && ++nhandles <= ss->nhandles)
			ret = load_handle(s, data, rlen, err, errlen);
		else if (t == tag + REC_NODE)
			ret = -E2BIG;
		if (ret < 0)
			break;
		*npins += t == tag + REC_NODE && pins[*npins];
	}
	if (ret == -EINVAL)
		return ret;
	if (ret < 0 || *npins != ss->nnodes || nhandles != ss->nhandles) {
		errfmt(err, errlen, "%u node and %u handle records for %u and %u", *npins, nhandles,
		       ss->nnodes, ss->nhandles);
		return -EINVAL;
	}
	return 0;
}

int fuse_server_load(struct fuse_server *s, u16 tag, const void *sec, size_t len, char *err,
		     size_t errlen)
{
	struct fuse_snap_session ss;
	struct hostfs_node **pins = NULL;
	u32 npins = 0;
	int ret;

	fuse_server_reset(s);
	ret = load_session(s, sec, len, tag, &ss, err, errlen);
	if (!ret) {
		pins = calloc(ss.nnodes + 1, sizeof(*pins));
		ret = pins ? load_records(s, sec, len, tag, &ss, pins, &npins, err, errlen)
			   : -ENOMEM;
	}
	for (u32 i = 0; pins && i < npins; i++)
		if (pins[i] != hostfs_root(s->fs))
			hostfs_put(s->fs, pins[i]);
	free(pins);
	if (ret) {
		if (ret == -ENOMEM)
			errfmt(err, errlen, "out of memory");
		fuse_server_reset(s); /* back to a server that has answered nothing */
		return ret == -ENOMEM ? ret : -EINVAL;
	}
	fsrv_handles_relink(s);
	s->minor = ss.minor;
	s->flags = ss.flags;
	return 0;
}

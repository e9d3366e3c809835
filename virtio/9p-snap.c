/* The 9P server in a snapshot: the session and every fid saved by its node's path beneath the share (hostfs_path), walked and reopened at restore as the live server would. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>

#include "lkvm/snap.h"
#include "9p-priv.h"

/*
 * Records, from the caller's tag on (p9.h: P9_SNAP_TAGS of them):
 *   tag + 0  struct p9_snap_session, once
 *   tag + 1  the qid device table: ndevs u64 host device numbers, in index order
 *   tag + 2  one per fid: struct p9_snap_fid, then its path (no NUL; empty for the root)
 * What is not saved, because the server holds none of it between requests: a directory
 * read's position (Treaddir carries the guest's offset cookie, and every read seeks to it
 * first), a file's offset (Tread and Twrite carry theirs), the iounit (always 0: msize
 * decides) and requests in flight (the device's quiesce parks its thread between two
 * requests). The qid a guest was given is the inode's: on the same share (its root the same
 * device and inode) every fid is checked to name the inode it named, and the device table
 * comes back as saved, so every qid.path stays; a restore on a copy of the share (another
 * root) takes the paths as they are there.
 */
#define REC_SESSION 0
#define REC_DEVS 1
#define REC_FID 2

struct p9_snap_session {
	u32 msize; /* 0: no Tversion */
	u32 nfids;
	u32 ndevs;
	u32 reserved;
	u64 root_dev, root_ino; /* the share's root, to tell the same share from a copy */
};
_Static_assert(sizeof(struct p9_snap_session) == 32, "p9_snap_session has a hole");

struct p9_snap_fid {
	u32 id;
	u32 type;   /* S_IFMT bits of what it names */
	u32 oflags; /* Tlopen flags of an open fid (P9_FID_REOPEN_FLAGS), else 0 */
	u8 open;
	u8 reserved[3];
	u64 dev, ino;
};
_Static_assert(sizeof(struct p9_snap_fid) == 32, "p9_snap_fid has a hole");

/* A guest's path for a one-line message: control bytes as '?', cut at 200 bytes. */
static const char *shown(char out[208], const char *p)
{
	size_t i;

	for (i = 0; p[i] && i < 200; i++)
		out[i] = (u8)p[i] < 0x20 || p[i] == 0x7f ? '?' : p[i];
	strcpy(out + i, p[i] ? "..." : "");
	return out;
}

static const char *err_name(int err)
{
	const char *n = strerrorname_np(err);

	return n ? n : "an error";
}

/* Why fid f (its path, NULL when its name is gone) cannot be saved, into err. */
static int refuse_removed(const struct p9_fid *f, const char *path, int err_no, char *err,
			  size_t errlen)
{
	const char *why = err_no != -ENOENT && err_no != -ESTALE ? strerror(-err_no)
			  : f->ofd >= 0 ? "an open file was removed from the share"
					: "a file the guest holds was removed from the share";
	char sh[208];

	if (path)
		errfmt(err, errlen, "fid %u ('%s'): %s", f->id, shown(sh, path), why);
	else
		errfmt(err, errlen, "fid %u: %s", f->id, why);
	return -EOPNOTSUPP;
}

/* The fid's path beneath the share into path (its length), or -EOPNOTSUPP with why in err. */
static int fid_path(struct p9_server *s, const struct p9_fid *f, char *path, char *err,
		    size_t errlen)
{
	struct stat st;
	int ret, sr;

	if (f->kind == FID_XATTR) {
		errfmt(err, errlen, "fid %u: an xattr fid cannot be saved", f->id);
		return -EOPNOTSUPP;
	}
	ret = hostfs_path(s->fs, f->node, path, P9_PATH_MAX + 1);
	if (ret == -ENAMETOOLONG) {
		errfmt(err, errlen,
		       "fid %u: its path beneath the share is not known (longer than %d bytes)",
		       f->id, P9_PATH_MAX);
		return -EOPNOTSUPP;
	}
	if (ret < 0) /* its name gone: unlinked, or renamed over, through the server */
		return refuse_removed(f, NULL, ret, err, errlen);
	/* A name that names nothing or another file now (hostfs_stat's -ESTALE), or an open
	 * file unlinked on the host: the file was removed from the share. */
	sr = hostfs_stat(s->fs, f->node, &st);
	if (sr < 0 || !st.st_nlink)
		return refuse_removed(f, path, sr < 0 ? sr : -ENOENT, err, errlen);
	return ret;
}

static int save_fid(struct p9_server *s, const struct p9_fid *f, u16 tag, struct snap_rec_buf *b,
		    char *err, size_t errlen)
{
	struct {
		struct p9_snap_fid h;
		char path[P9_PATH_MAX + 1];
	} r;
	int plen;

	memset(&r, 0, sizeof(r));
	plen = fid_path(s, f, r.path, err, errlen);
	if (plen < 0)
		return plen;
	r.h.id = f->id;
	r.h.type = f->node->mode & S_IFMT;
	r.h.open = f->ofd >= 0;
	r.h.oflags = r.h.open ? f->oflags : 0;
	r.h.dev = f->node->dev;
	r.h.ino = f->node->ino;
	snap_rec_put(b, (u16)(tag + REC_FID), &r, sizeof(r.h) + (size_t)plen);
	return 0;
}

int p9_server_save(struct p9_server *s, u16 tag, struct snap_rec_buf *b, char *err, size_t errlen)
{
	struct p9_snap_session ss = {
		.msize = s->msize,
		.nfids = s->nfids,
		.ndevs = s->ndevs,
		.root_dev = hostfs_root(s->fs)->dev,
		.root_ino = hostfs_root(s->fs)->ino,
	};
	u64 devs[P9_QID_DEVS];

	for (u32 i = 0; i < s->nslots; i++) {
		int ret = s->fids[i].kind == FID_FREE
				  ? 0
				  : save_fid(s, &s->fids[i], tag, b, err, errlen);

		if (ret)
			return ret;
	}
	for (u32 i = 0; i < s->ndevs; i++)
		devs[i] = s->devs[i];
	snap_rec_put(b, (u16)(tag + REC_SESSION), &ss, sizeof(ss));
	snap_rec_put(b, (u16)(tag + REC_DEVS), devs, s->ndevs * sizeof(devs[0]));
	return 0;
}

/* A path as the live server would have kept it: components of 1..NAME_MAX bytes, none "." or
 * "..", no NUL, not absolute, no empty component; "" is the root. */
static bool path_ok(const char *p, size_t len)
{
	size_t start = 0;

	if (!len)
		return true;
	if (len > P9_PATH_MAX || memchr(p, '\0', len))
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

/* The root, then each component of path (path_ok), walked as Twalk walks: *n gets the last
 * node (referenced), st its stat. 0 or -errno. */
static int walk_path(struct p9_server *s, const char *path, struct hostfs_node **n, struct stat *st)
{
	char name[NAME_MAX + 1];
	struct hostfs_node *next;
	int ret;

	*n = hostfs_root(s->fs);
	hostfs_get(*n);
	ret = hostfs_stat(s->fs, *n, st);
	while (!ret && *path) {
		size_t len = strcspn(path, "/");

		memcpy(name, path, len);
		name[len] = '\0';
		path += len + (path[len] == '/');
		ret = hostfs_walk(s->fs, *n, name, &next, st);
		if (!ret) {
			hostfs_put(s->fs, *n);
			*n = next;
		}
	}
	if (ret)
		hostfs_put(s->fs, *n);
	return ret;
}

static const char *kind_name(u32 type)
{
	return type == S_IFDIR	 ? "directory"
	       : type == S_IFREG ? "file"
	       : type == S_IFLNK ? "symlink"
				 : "special file";
}

/* The saved fid h's fields, against the enums and this server's bounds (-EINVAL). */
static int check_fid(struct p9_server *s, const struct p9_snap_fid *h, char *err, size_t errlen)
{
	static const u32 types[] = {
		S_IFDIR, S_IFREG, S_IFLNK, S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK
	};
	bool type_ok = false;

	for (size_t i = 0; i < ARRAY_SIZE(types); i++)
		type_ok |= h->type == types[i];
	if (h->id == P9_NOFID || p9_fid_find(s, h->id))
		errfmt(err, errlen, "fid %u: not a fid number, or saved twice", h->id);
	else if (!type_ok || h->open > 1 || h->reserved[0] || h->reserved[1] || h->reserved[2])
		errfmt(err, errlen, "fid %u: a bad kind (0%o) or state", h->id, h->type);
	else if (h->oflags & ~P9_FID_REOPEN_FLAGS || (!h->open && h->oflags) ||
		 (h->open && h->type != S_IFDIR && h->type != S_IFREG) ||
		 (h->open && p9_host_open_flags(s, h->oflags) < 0))
		errfmt(err, errlen, "fid %u: open flags 0x%x that this share refuses for a %s",
		       h->id, h->oflags, kind_name(h->type));
	else
		return 0;
	return -EINVAL;
}

/* Saved fid h's node n (at path), on the same share or not: -EINVAL with why when it is not
 * the file it was; when it was open, opened again (*ofd). */
static int check_reopen(struct p9_server *s, const struct p9_snap_fid *h, const char *path,
			struct hostfs_node *n, bool same, int *ofd, char *err, size_t errlen)
{
	char sh[208];

	*ofd = -1;
	if (n->mode != h->type)
		errfmt(err, errlen, "fid %u's path '%s' is a %s now, was a %s", h->id,
		       shown(sh, path), kind_name(n->mode), kind_name(h->type));
	else if (same && (n->dev != h->dev || n->ino != h->ino))
		errfmt(err, errlen,
		       "fid %u's path '%s' names another file now (inode %llu, was %llu)", h->id,
		       shown(sh, path), (unsigned long long)n->ino, (unsigned long long)h->ino);
	else if (h->open && (*ofd = hostfs_open_io(s->fs, n, p9_host_open_flags(s, h->oflags))) < 0)
		errfmt(err, errlen, "fid %u's path '%s' cannot be opened again (%s)", h->id,
		       shown(sh, path), err_name(-*ofd));
	else
		return 0;
	return -EINVAL;
}

/* Fid h at path (path_ok) walked to and, when it was open, opened again: the same kind, and on
 * the same share the same inode. */
static int reopen(struct p9_server *s, const struct p9_snap_fid *h, const char *path, bool same,
		  char *err, size_t errlen)
{
	struct hostfs_node *n;
	struct p9_fid *f;
	struct stat st;
	int ofd, ret = walk_path(s, path, &n, &st);
	char sh[208];

	if (ret) {
		errfmt(err, errlen, "fid %u's path '%s' is gone from the share (%s)", h->id,
		       shown(sh, path), err_name(-ret));
		return -EINVAL;
	}
	ret = check_reopen(s, h, path, n, same, &ofd, err, errlen);
	if (ret) {
		hostfs_put(s->fs, n);
		return ret;
	}
	hostfs_get(n); /* kept past a failed add, for the release of its open file */
	ret = p9_fid_add(s, h->id, FID_FILE, n);
	if (ret) {
		errfmt(err, errlen, "fid %u: %s", h->id, strerror(-ret));
		if (ofd >= 0)
			hostfs_release_io(s->fs, n, ofd);
		hostfs_put(s->fs, n);
		return ret;
	}
	hostfs_put(s->fs, n);
	f = p9_fid_find(s, h->id);
	f->ofd = ofd;
	f->oflags = ofd >= 0 ? h->oflags : 0;
	return 0;
}

/* One fid record: its fields checked, its path walked and reopened. */
static int load_fid(struct p9_server *s, const void *data, u32 len, bool same, char *err,
		    size_t errlen)
{
	char path[P9_PATH_MAX + 1];
	struct p9_snap_fid h;
	size_t plen = len - sizeof(h);
	int ret;

	if (len < sizeof(h) || plen > P9_PATH_MAX) {
		errfmt(err, errlen, "a fid record of %u bytes", len);
		return -EINVAL;
	}
	memcpy(&h, data, sizeof(h));
	memcpy(path, (const u8 *)data + sizeof(h), plen);
	path[plen] = '\0';
	ret = check_fid(s, &h, err, errlen);
	if (ret)
		return ret;
	if (!path_ok(path, plen)) {
		errfmt(err, errlen, "fid %u: a path that does not stay beneath the share", h.id);
		return -EINVAL;
	}
	return reopen(s, &h, path, same, err, errlen);
}

/* The session record, checked against this server's bounds. */
static int load_session(struct p9_server *s, const void *sec, size_t len, u16 tag,
			struct p9_snap_session *ss, char *err, size_t errlen)
{
	if (snap_rec_get(sec, len, (u16)(tag + REC_SESSION), ss, sizeof(*ss)) < 0) {
		errfmt(err, errlen, "no 9P session record of %zu bytes", sizeof(*ss));
		return -EINVAL;
	}
	if (ss->msize && (ss->msize < P9_MSIZE_MIN || ss->msize > s->max_msize))
		errfmt(err, errlen, "msize %u outside %u..%u", ss->msize, P9_MSIZE_MIN,
		       s->max_msize);
	else if (ss->nfids > s->max_fids)
		errfmt(err, errlen, "%u fids, more than this share's %u", ss->nfids, s->max_fids);
	else if (!ss->ndevs || ss->ndevs > P9_QID_DEVS || ss->reserved)
		errfmt(err, errlen, "%u qid devices (1..%u)", ss->ndevs, P9_QID_DEVS);
	else
		return 0;
	return -EINVAL;
}

/* The records after the session: the device table (taken on the same share) and the fids. */
static int load_records(struct p9_server *s, const void *sec, size_t len, u16 tag,
			const struct p9_snap_session *ss, char *err, size_t errlen)
{
	const struct hostfs_node *root = hostfs_root(s->fs);
	bool same = ss->root_dev == root->dev && ss->root_ino == root->ino;
	struct snap_rec_iter it = { sec, len };
	u32 rlen, nfids = 0, ndevs = 0;
	const void *data;
	u16 t;
	int ret;

	while ((ret = snap_rec_next(&it, &t, &data, &rlen)) == 1) {
		if (t == tag + REC_DEVS && !ndevs++) {
			if (rlen != ss->ndevs * sizeof(u64) ||
			    (same && memcmp(data, &ss->root_dev, sizeof(u64)))) {
				errfmt(err, errlen, "a qid device table of %u bytes", rlen);
				return -EINVAL;
			}
			for (u32 i = 0; same && i < ss->ndevs; i++)
				memcpy(&s->devs[i], (const u8 *)data + i * sizeof(u64),
				       sizeof(u64));
			s->ndevs = same ? ss->ndevs : s->ndevs;
		} else if (t == tag + REC_FID && ++nfids <= ss->nfids) {
			ret = load_fid(s, data, rlen, same, err, errlen);
			if (ret)
				return ret;
		}
	}
	if (ret < 0 || ndevs != 1 || nfids != ss->nfids) {
		errfmt(err, errlen, "%u fid records and %u device tables for %u fids", nfids, ndevs,
		       ss->nfids);
		return -EINVAL;
	}
	return 0;
}

int p9_server_load(struct p9_server *s, u16 tag, const void *sec, size_t len, char *err,
		   size_t errlen)
{
	struct p9_snap_session ss;
	int ret;

	p9_server_reset(s);
	ret = load_session(s, sec, len, tag, &ss, err, errlen);
	if (!ret)
		ret = load_records(s, sec, len, tag, &ss, err, errlen);
	if (ret) {
		/* Back to a server that has answered nothing. */
		p9_server_reset(s);
		s->devs[0] = hostfs_root(s->fs)->dev;
		s->ndevs = 1;
		return ret;
	}
	s->msize = ss.msize;
	return 0;
}

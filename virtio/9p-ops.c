/* The 9P operations on names: the session, attach and walk, open and create, and the namespace (mkdir, mknod, symlink, link, unlink, rename, clunk), each over hostfs nodes. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "9p-priv.h"

int p9_op_version(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 msize = p9_get32(c);
	u16 len;
	const char *v = p9_get_str(c, &len);

	if (!v)
		return -EPROTO;
	if (msize < P9_MSIZE_MIN)
		return -EINVAL;
	/* A new session: whatever the old one held goes, nodes included. */
	p9_fid_clear(s);
	hostfs_reset(s->fs);
	msize = MIN(msize, s->max_msize);
	if (len == strlen(P9_VERSION_L) && !memcmp(v, P9_VERSION_L, len)) {
		s->msize = msize;
		p9_put32(c, msize);
		p9_put_str(c, P9_VERSION_L, strlen(P9_VERSION_L));
	} else {
		s->msize = 0;
		p9_put32(c, msize);
		p9_put_str(c, "unknown", 7);
	}
	return 0;
}

int p9_op_attach(struct p9_call *c)
{
	struct p9_server *s = c->s;
	struct hostfs_node *root = hostfs_root(s->fs);
	u32 fid = p9_get32(c);
	struct p9_qid q;
	struct stat st;
	u16 len;
	int ret;

	p9_get32(c);	     /* afid: no authentication */
	p9_get_str(c, &len); /* uname, aname, n_uname: the host's credentials apply (p9.h) */
	p9_get_str(c, &len);
	p9_get32(c);
	if (c->in_short)
		return -EPROTO;
	ret = p9_newfid_ok(s, fid);
	if (!ret)
		ret = hostfs_stat(s->fs, root, &st);
	if (ret)
		return ret;
	hostfs_get(root);
	ret = p9_fid_add(s, fid, FID_FILE, root);
	if (ret)
		return ret;
	p9_qid_of(s, &st, &q);
	p9_put_qid(c, &q);
	return 0;
}

/* newfid (fid itself when they are equal) names cur (referenced, taken over), the node a
 * whole walk from f reached. */
static int walk_bind(struct p9_server *s, struct p9_fid *f, u32 newfid, struct hostfs_node *cur)
{
	if (newfid != f->id)
		return p9_fid_add(s, newfid, FID_FILE, cur);
	p9_fid_release(s, f);
	f->node = cur;
	return 0;
}

/* Walk from node `from` by n names: *to the last node reached (referenced), qids filled;
 * returns how many names were walked, ret the first failure's error. */
static int walk_names(struct p9_server *s, struct hostfs_node *from,
		      const char (*names)[NAME_MAX + 1], int n, struct p9_qid *qids,
		      struct hostfs_node **to, int *ret)
{
	struct hostfs_node *cur = from, *next;
	struct stat st;
	int i;

	hostfs_get(cur);
	for (i = 0; i < n; i++) {
		*ret = hostfs_walk(s->fs, cur, names[i], &next, &st);
		if (*ret)
			break;
		hostfs_put(s->fs, cur);
		cur = next;
		p9_qid_of(s, &st, &qids[i]);
	}
	*to = cur;
	return i;
}

int p9_op_walk(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 fid = p9_get32(c), newfid = p9_get32(c);
	u16 nwname = p9_get16(c);
	char names[P9_MAXWELEM][NAME_MAX + 1];
	struct p9_qid qids[P9_MAXWELEM];
	struct hostfs_node *cur;
	struct p9_fid *f;
	int i, ret = 0;

	if (nwname > P9_MAXWELEM)
		return c->in_short ? -EPROTO : -EINVAL;
	for (i = 0; i < nwname; i++)
		p9_get_name(c, names[i], true);
	f = p9_fid_req(c, fid, FID_NAMING, &ret);
	if (!f)
		return ret;
	/* Room for every qid asked for: a walk that stops early answers fewer. */
	ret = p9_room(c, 2 + (size_t)nwname * P9_QID_SIZE);
	if (!ret && newfid != fid)
		ret = p9_newfid_ok(s, newfid);
	if (ret)
		return ret;
	i = walk_names(s, f->node, names, nwname, qids, &cur, &ret);
	if (i < nwname)
		hostfs_put(s->fs, cur); /* partly walked: say how far, newfid is not made */
	if (i == 0 && nwname)
		return ret; /* the first name failed: an error, not an empty Rwalk */
	if (i == nwname) {
		ret = walk_bind(s, f, newfid, cur);
		if (ret)
			return ret;
	}
	p9_put16(c, (u16)i);
	for (int k = 0; k < i; k++)
		p9_put_qid(c, &qids[k]);
	return 0;
}

/* Tlopen/Tlcreate flags to host open flags (what is not listed is dropped: creating is
 * Tlcreate's alone, the descriptor is ours (CLOEXEC, NOCTTY), symlinks are never followed,
 * O_DIRECT's alignment and O_ASYNC's signals are the guest's business, not the host's,
 * O_NOATIME needs ownership (a read-only share asks for it itself: hostfs_open_at()), O_NONBLOCK
 * is moot for the files we open). */
static const struct {
	u32 p9;
	int host;
} open_flags[] = {
	{ P9_DOTL_TRUNC, O_TRUNC }, { P9_DOTL_APPEND, O_APPEND },	{ P9_DOTL_DSYNC, O_DSYNC },
	{ P9_DOTL_SYNC, O_SYNC },   { P9_DOTL_DIRECTORY, O_DIRECTORY },
};

/* Host flags for p9 open flags, or -errno (EROFS on a read-only share for anything that
 * writes). */
int p9_host_open_flags(struct p9_server *s, u32 p9)
{
	static const int acc[] = { O_RDONLY, O_WRONLY, O_RDWR };
	int host;

	if ((p9 & P9_DOTL_ACCMODE) == P9_DOTL_NOACCESS)
		return -EINVAL;
	host = acc[p9 & P9_DOTL_ACCMODE];
	for (size_t i = 0; i < ARRAY_SIZE(open_flags); i++)
		if (p9 & open_flags[i].p9)
			host |= open_flags[i].host;
	if (s->readonly && ((host & O_ACCMODE) != O_RDONLY || (host & O_TRUNC)))
		return -EROFS;
	return host;
}

int p9_op_lopen(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 fid = p9_get32(c), flags = p9_get32(c);
	struct p9_fid *f;
	struct p9_qid q;
	struct stat st;
	int host, ret;

	f = p9_fid_req(c, fid, FID_NAMING, &ret);
	if (!f)
		return ret;
	if (f->ofd >= 0)
		return -EINVAL; /* already open */
	host = p9_host_open_flags(s, flags);
	if (host < 0)
		return host;
	ret = hostfs_open_io(s->fs, f->node, host);
	if (ret < 0)
		return ret;
	f->ofd = ret;
	f->oflags = flags & P9_FID_REOPEN_FLAGS;
	if (fstat(f->ofd, &st) < 0)
		return neg_errno();
	p9_qid_of(s, &st, &q);
	p9_put_qid(c, &q);
	p9_put32(c, 0); /* iounit: msize decides */
	return 0;
}

/* open(O_CREAT) of a file that appeared meanwhile: it is opened, if it is a file. *n gets its
 * node (referenced). The open descriptor or -errno. */
static int open_existing(struct p9_server *s, struct hostfs_node *dir, const char *name, int host,
			 struct hostfs_node **n)
{
	struct stat st;
	int fd, ret = hostfs_walk(s->fs, dir, name, n, &st);

	if (ret)
		return ret;
	fd = S_ISDIR(st.st_mode) ? -EISDIR : hostfs_open_io(s->fs, *n, host);
	if (fd < 0)
		hostfs_put(s->fs, *n);
	return fd;
}

/* A file made as `name` in dir with host flags and mode, its node (referenced) in *n, open:
 * the descriptor (counted among the share's open files) or -errno. */
static int create_file(struct p9_server *s, struct hostfs_node *dir, const char *name, int host,
		       u32 mode, bool excl, struct hostfs_node **n)
{
	struct stat st;
	int dfd = hostfs_fd(s->fs, dir), fd, ret;

	ret = dfd < 0 ? dfd : hostfs_open_room(s->fs);
	if (ret)
		return ret;
	fd = hostfs_open_beneath(dfd, name, (u64)host | O_CREAT | O_EXCL, mode);
	if (fd == -EEXIST && !excl)
		return open_existing(s, dir, name, host, n);
	if (fd < 0)
		return fd;
	ret = fstat(fd, &st) < 0 ? neg_errno() : hostfs_fix_mode(s->fs, fd, &st, mode);
	if (!ret)
		ret = hostfs_made(s->fs, dir, name, fd, n, &st);
	if (!ret) {
		ret = hostfs_take_io(s->fs, *n, fd);
		if (ret)
			hostfs_put(s->fs, *n);
	}
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

int p9_op_lcreate(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 dfid = p9_get32(c), flags, mode;
	char name[NAME_MAX + 1];
	struct hostfs_node *n;
	struct p9_fid *f;
	struct p9_qid q;
	struct stat st;
	int host, fd;

	p9_get_name(c, name, false);
	flags = p9_get32(c);
	mode = p9_get32(c);
	p9_get32(c); /* gid: the host's credentials apply */
	f = p9_fid_req(c, dfid, FID_INSIDE, &fd);
	if (!f)
		return fd;
	if (f->ofd >= 0)
		return -EINVAL;
	host = p9_host_open_flags(s, flags);
	if (host < 0)
		return host;
	fd = create_file(s, f->node, name, host & ~O_DIRECTORY, hostfs_guest_mode(mode, false),
			 flags & P9_DOTL_EXCL, &n);
	if (fd < 0)
		return fd;
	/* The directory fid names the new file now, open. */
	p9_fid_release(s, f);
	f->node = n;
	f->ofd = fd;
	f->oflags = flags & P9_FID_REOPEN_FLAGS & ~P9_DOTL_DIRECTORY;
	if (fstat(fd, &st) < 0)
		return neg_errno();
	p9_qid_of(s, &st, &q);
	p9_put_qid(c, &q);
	p9_put32(c, 0);
	return 0;
}

/* After creating `name` in dir: its qid, and (mode != -1) the permission bits fixed. */
static int created(struct p9_call *c, struct hostfs_node *dir, const char *name, s64 mode)
{
	struct p9_qid q;
	struct stat st;
	int dfd = hostfs_fd(c->s->fs, dir), fd, ret;

	fd = dfd < 0 ? dfd : hostfs_open_beneath(dfd, name, O_PATH, 0);
	if (fd < 0)
		return fd;
	ret = fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ? neg_errno() : 0;
	if (!ret && mode >= 0)
		ret = hostfs_fix_mode(c->s->fs, fd, &st, (u32)mode);
	close(fd);
	if (ret)
		return ret;
	p9_qid_of(c->s, &st, &q);
	p9_put_qid(c, &q);
	return 0;
}

/*
 * Tmkdir (dir) and Tmknod: `name` in dfid, a directory, or a FIFO, socket or empty file;
 * never a device node (one in a share would give whoever reaches it on the host the device).
 */
static int make_node(struct p9_call *c, u32 dfid, const char *name, u32 mode, bool dir)
{
	u32 type = mode & S_IFMT;
	struct p9_fid *f;
	int dfd, ret;

	f = p9_fid_req(c, dfid, FID_INSIDE, &ret);
	if (!f)
		return ret;
	if (hostfs_is_device_type(type))
		return -EPERM;
	if (!dir && type != S_IFIFO && type != S_IFSOCK && type != S_IFREG && type != 0)
		return -EINVAL;
	dfd = hostfs_fd(c->s->fs, f->node);
	if (dfd < 0)
		return dfd;
	mode = hostfs_guest_mode(mode, dir);
	if (dir)
		ret = mkdirat(dfd, name, mode);
	else
		ret = mknodat(dfd, name, (type ? type : S_IFREG) | mode, 0);
	if (ret < 0)
		return neg_errno();
	return created(c, f->node, name, mode);
}

int p9_op_mkdir(struct p9_call *c)
{
	u32 dfid = p9_get32(c), mode;
	char name[NAME_MAX + 1];

	p9_get_name(c, name, false);
	mode = p9_get32(c);
	p9_get32(c); /* gid */
	return make_node(c, dfid, name, mode & 07777, true);
}

int p9_op_mknod(struct p9_call *c)
{
	u32 dfid = p9_get32(c), mode;
	char name[NAME_MAX + 1];

	p9_get_name(c, name, false);
	mode = p9_get32(c);
	p9_get32(c); /* major, minor: no device nodes */
	p9_get32(c);
	p9_get32(c); /* gid */
	return make_node(c, dfid, name, mode, false);
}

int p9_op_symlink(struct p9_call *c)
{
	u32 dfid = p9_get32(c);
	char name[NAME_MAX + 1], target[PATH_MAX];
	struct p9_fid *f;
	int dfd, ret;

	p9_get_name(c, name, false);
	p9_get_cstr(c, target, PATH_MAX - 1, false); /* only text to us: we never follow it */
	p9_get32(c);				     /* gid */
	f = p9_fid_req(c, dfid, FID_INSIDE, &ret);
	if (!f)
		return ret;
	dfd = hostfs_fd(c->s->fs, f->node);
	if (dfd < 0)
		return dfd;
	if (symlinkat(target, dfd, name) < 0)
		return neg_errno();
	return created(c, f->node, name, -1);
}

int p9_op_link(struct p9_call *c)
{
	struct p9_server *s = c->s;
	u32 dfid = p9_get32(c), fid = p9_get32(c);
	char name[NAME_MAX + 1], src[16];
	struct p9_fid *d, *f;
	int dfd, sfd, ret;

	p9_get_name(c, name, false);
	d = p9_fid_req(c, dfid, FID_INSIDE, &ret);
	f = d ? p9_fid_req(c, fid, FID_INSIDE, &ret) : NULL;
	if (!f)
		return ret;
	/* Both borrowed until the request ends (hostfs_trim runs between requests). */
	dfd = hostfs_fd(s->fs, d->node);
	sfd = dfd < 0 ? dfd : hostfs_fd(s->fs, f->node);
	if (sfd < 0)
		return sfd;
	/* Through the magic link: exactly the fid's inode, without CAP_DAC_READ_SEARCH. */
	hostfs_proc_name(src, sfd);
	if (linkat(hostfs_proc_fd(s->fs), src, dfd, name, AT_SYMLINK_FOLLOW) < 0)
		return neg_errno();
	return 0;
}

int p9_op_unlinkat(struct p9_call *c)
{
	u32 dfid = p9_get32(c), flags;
	char name[NAME_MAX + 1];
	struct p9_fid *f;
	int dfd, ret;

	p9_get_name(c, name, false);
	flags = p9_get32(c);
	f = p9_fid_req(c, dfid, FID_INSIDE, &ret);
	if (!f)
		return ret;
	if (flags & ~P9_DOTL_AT_REMOVEDIR)
		return -EINVAL;
	dfd = hostfs_fd(c->s->fs, f->node);
	if (dfd < 0)
		return dfd;
	if (unlinkat(dfd, name, flags ? AT_REMOVEDIR : 0) < 0)
		return neg_errno();
	hostfs_unlinked(c->s->fs, f->node, name);
	return 0;
}

int p9_op_renameat(struct p9_call *c)
{
	struct hostfs *fs = c->s->fs;
	u32 ofid = p9_get32(c), nfid;
	char oname[NAME_MAX + 1], nname[NAME_MAX + 1];
	struct p9_fid *o, *n;
	int ofd, nfd, ret;

	p9_get_name(c, oname, false);
	nfid = p9_get32(c);
	p9_get_name(c, nname, false);
	o = p9_fid_req(c, ofid, FID_INSIDE, &ret);
	n = o ? p9_fid_req(c, nfid, FID_INSIDE, &ret) : NULL;
	if (!n)
		return ret;
	ofd = hostfs_fd(fs, o->node);
	nfd = ofd < 0 ? ofd : hostfs_fd(fs, n->node);
	if (nfd < 0)
		return nfd;
	if (renameat(ofd, oname, nfd, nname) < 0)
		return neg_errno();
	hostfs_renamed(fs, o->node, oname, n->node, nname);
	return 0;
}

/*
 * Trename and Tremove name a file by its fid, and Linux's client uses Trenameat and
 * Tunlinkat (it tries those first anyway): both answer EOPNOTSUPP. Tremove still clunks the
 * fid, as 9P requires even when the removal fails.
 */
int p9_op_rename(struct p9_call *c)
{
	return -EOPNOTSUPP;
}

int p9_op_clunk(struct p9_call *c)
{
	u32 fid = p9_get32(c);
	struct p9_fid *f;
	int ret;

	f = p9_fid_req(c, fid, FID_ANY, &ret);
	if (!f)
		return ret;
	p9_fid_del(c->s, f);
	return 0;
}

int p9_op_remove(struct p9_call *c)
{
	int ret = p9_op_clunk(c);

	return ret ? ret : c->s->readonly ? -EROFS : -EOPNOTSUPP;
}

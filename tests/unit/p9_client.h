/* Unit tests: a small 9P2000.L client (build a T-message, send it, read the R-message; one wrapper per operation) over a transport the test provides: the server called directly (test_p9) or the virtio-9p device's queue (test_virtio_9p). */
#ifndef LKVM_TEST_P9_CLIENT_H
#define LKVM_TEST_P9_CLIENT_H

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/p9.h"

#define MSIZE 65536u
#define ROOT 1u /* the fid every test attaches as */

/* The request being built and the reply being read. */
static u8 tm[P9_MSIZE_MAX + 64];
static size_t tm_len;
static u8 rm[P9_MSIZE_MAX + 64];
static size_t rm_len, rm_pos;
static u16 p9c_tag;

/* The transport, set by the test: hand exactly `len` bytes of tm as a request with `room`
 * bytes of rm for the reply; the reply's length, or -errno when the server could make none. */
static ssize_t (*p9c_handle)(size_t len, size_t room);

static inline void w(u64 v, int bytes)
{
	ck_assert_uint_le(tm_len + (size_t)bytes, sizeof(tm));
	for (int i = 0; i < bytes; i++)
		tm[tm_len++] = (u8)(v >> (8 * i));
}

static inline void wstrn(const void *p, size_t n)
{
	w(n, 2);
	ck_assert_uint_le(tm_len + n, sizeof(tm));
	memcpy(tm + tm_len, p, n);
	tm_len += n;
}

static inline void wstr(const char *s)
{
	wstrn(s, strlen(s));
}

static inline void begin(u8 type)
{
	tm_len = 0;
	w(0, 4);
	w(type, 1);
	w(++p9c_tag, 2);
}

static inline u64 r(int bytes)
{
	u64 v = 0;

	ck_assert_msg(rm_pos + (size_t)bytes <= rm_len, "reply too short: %zu + %d > %zu", rm_pos,
		      bytes, rm_len);
	for (int i = 0; i < bytes; i++)
		v |= (u64)rm[rm_pos++] << (8 * i);
	return v;
}

/* A string of the reply into buf. */
static inline char *rstr(char *buf, size_t len)
{
	size_t n = r(2);

	ck_assert_uint_lt(n, len);
	ck_assert_uint_le(rm_pos + n, rm_len);
	memcpy(buf, rm + rm_pos, n);
	buf[n] = '\0';
	rm_pos += n;
	return buf;
}

/* Send the message built (its size field filled in); returns the reply's type. */
static inline int send_room(size_t room)
{
	ssize_t n;

	for (int i = 0; i < 4; i++)
		tm[i] = (u8)(tm_len >> (8 * i));
	n = p9c_handle(tm_len, room);
	ck_assert_int_ge(n, P9_HDR_SIZE);
	rm_len = (size_t)n;
	rm_pos = 0;
	ck_assert_uint_eq(r(4), (u64)n);
	rm_pos = 5;
	ck_assert_uint_eq(r(2), p9c_tag);
	return rm[4];
}

/* Send; 0 when the reply is the request's R-message (read it with r()), -ecode for Rlerror. */
static inline int call_room(size_t room)
{
	u8 type = tm[4];
	int rtype = send_room(room);

	rm_pos = P9_HDR_SIZE;
	if (rtype == P9_RLERROR) {
		int e = (int)r(4);

		ck_assert_int_gt(e, 0);
		ck_assert_uint_eq(rm_len, P9_HDR_SIZE + 4);
		return -e;
	}
	ck_assert_int_eq(rtype, type + 1);
	return 0;
}

/* The reply room every wrapper gives (0: all of rm); a test sets it for a few calls. */
static size_t p9c_room;

static inline int call(void)
{
	return call_room(p9c_room ? p9c_room : sizeof(rm));
}

struct qid {
	u8 type;
	u32 version;
	u64 path;
};

static inline void rqid(struct qid *q)
{
	q->type = (u8)r(1);
	q->version = (u32)r(4);
	q->path = r(8);
}

/* ---- one wrapper per operation: 0 or -errno ---- */

static inline int t_version(u32 msize, const char *version, u32 *got, char *vbuf)
{
	char v[32];
	int ret;

	begin(P9_TVERSION);
	w(msize, 4);
	wstr(version);
	ret = call();
	if (ret)
		return ret;
	*got = (u32)r(4);
	rstr(vbuf ? vbuf : v, sizeof(v));
	return 0;
}

static inline int t_attach(u32 fid, struct qid *q)
{
	int ret;

	begin(P9_TATTACH);
	w(fid, 4);
	w(P9_NOFID, 4);
	wstr("root");
	wstr("");
	w(0, 4);
	ret = call();
	if (!ret && q)
		rqid(q);
	return ret;
}

/* Start a session with msize MSIZE and ROOT attached. */
static inline void session(void)
{
	u32 msize;

	ck_assert_int_eq(t_version(MSIZE, P9_VERSION_L, &msize, NULL), 0);
	ck_assert_uint_eq(msize, MSIZE);
	ck_assert_int_eq(t_attach(ROOT, NULL), 0);
}

/* Twalk fid -> newfid through n names (a NULL-terminated list); returns the number of qids
 * (into qids, when given) or -errno. */
static inline int t_walkv(u32 fid, u32 newfid, struct qid *qids, const char *const *names)
{
	int n = 0, ret;

	while (names[n])
		n++;
	begin(P9_TWALK);
	w(fid, 4);
	w(newfid, 4);
	w((u64)n, 2);
	for (int i = 0; i < n; i++)
		wstr(names[i]);
	ret = call();
	if (ret)
		return ret;
	n = (int)r(2);
	for (int i = 0; i < n; i++) {
		struct qid q;

		rqid(qids ? &qids[i] : &q);
	}
	return n;
}

#define t_walk(fid, newfid, qids, ...) \
	t_walkv(fid, newfid, qids, (const char *const[]){ __VA_ARGS__, NULL })

/* Walk from ROOT to one name, all of it: 0 or -errno. */
static inline int walk_to(u32 newfid, const char *name)
{
	int ret = t_walk(ROOT, newfid, NULL, name);

	return ret < 0 ? ret : ret == 1 ? 0 : -ENOENT;
}

static inline int t_lopen(u32 fid, u32 flags, struct qid *q)
{
	struct qid tmp;
	int ret;

	begin(P9_TLOPEN);
	w(fid, 4);
	w(flags, 4);
	ret = call();
	if (!ret) {
		rqid(q ? q : &tmp);
		r(4);
	}
	return ret;
}

static inline int t_lcreate(u32 dfid, const char *name, u32 flags, u32 mode, struct qid *q)
{
	struct qid tmp;
	int ret;

	begin(P9_TLCREATE);
	w(dfid, 4);
	wstr(name);
	w(flags, 4);
	w(mode, 4);
	w(0, 4);
	ret = call();
	if (!ret) {
		rqid(q ? q : &tmp);
		r(4);
	}
	return ret;
}

/* Start a Tread, Twrite or Treaddir: fid[4] offset[8] count[4]. */
static inline void begin_io(u8 type, u32 fid, u64 off, u32 count)
{
	begin(type);
	w(fid, 4);
	w(off, 8);
	w(count, 4);
}

/* Tread or Treaddir: the reply's count (its data follows at rm_pos) or -errno. */
static inline int t_io(u8 type, u32 fid, u64 off, u32 count)
{
	int ret;
	u32 n;

	begin_io(type, fid, off, count);
	ret = call();
	if (ret)
		return ret;
	n = (u32)r(4);
	ck_assert_uint_le(n, count);
	ck_assert_uint_eq(rm_len, rm_pos + (size_t)n);
	return (int)n;
}

/* Tread into buf (at most len); returns the count or -errno. */
static inline int t_read(u32 fid, u64 off, u32 count, void *buf, size_t len)
{
	int n = t_io(P9_TREAD, fid, off, count);

	if (n > 0 && buf)
		memcpy(buf, rm + rm_pos, MIN((size_t)n, len));
	return n;
}

static inline int t_write(u32 fid, u64 off, const void *data, u32 count)
{
	int ret;

	begin_io(P9_TWRITE, fid, off, count);
	ck_assert_uint_le(tm_len + count, sizeof(tm));
	memcpy(tm + tm_len, data, count);
	tm_len += count;
	ret = call();
	return ret ? ret : (int)r(4);
}

static inline int t_fid_op(u8 type, u32 fid)
{
	begin(type);
	w(fid, 4);
	return call();
}

static inline int t_clunk(u32 fid)
{
	return t_fid_op(P9_TCLUNK, fid);
}

struct attr {
	struct qid qid;
	u32 mode, uid, gid;
	u64 nlink, rdev, size, atime, atime_ns, mtime, mtime_ns;
};

static inline int t_getattr(u32 fid, struct attr *a)
{
	int ret;

	begin(P9_TGETATTR);
	w(fid, 4);
	w(0x3fff, 8);
	ret = call();
	if (ret)
		return ret;
	ck_assert_uint_eq(r(8), 0x7ff);
	rqid(&a->qid);
	a->mode = (u32)r(4);
	a->uid = (u32)r(4);
	a->gid = (u32)r(4);
	a->nlink = r(8);
	a->rdev = r(8);
	a->size = r(8);
	r(8);
	r(8);
	a->atime = r(8);
	a->atime_ns = r(8);
	a->mtime = r(8);
	a->mtime_ns = r(8);
	for (int i = 0; i < 6; i++)
		r(8);
	ck_assert_uint_eq(rm_pos, rm_len);
	return 0;
}

static inline int t_setattr(u32 fid, u32 valid, u32 mode, u64 size, u64 mtime)
{
	begin(P9_TSETATTR);
	w(fid, 4);
	w(valid, 4);
	w(mode, 4);
	w((u32)-1, 4);
	w((u32)-1, 4);
	w(size, 8);
	w(mtime, 8); /* atime */
	w(0, 8);
	w(mtime, 8);
	w(0, 8);
	return call();
}

static inline int t_mkdir(u32 dfid, const char *name, u32 mode, struct qid *q)
{
	int ret;

	begin(P9_TMKDIR);
	w(dfid, 4);
	wstr(name);
	w(mode, 4);
	w(0, 4);
	ret = call();
	if (!ret && q)
		rqid(q);
	return ret;
}

static inline int t_symlink(u32 dfid, const char *name, const char *target)
{
	begin(P9_TSYMLINK);
	w(dfid, 4);
	wstr(name);
	wstr(target);
	w(0, 4);
	return call();
}

static inline int t_readlink(u32 fid, char *buf, size_t len)
{
	int ret = t_fid_op(P9_TREADLINK, fid);

	if (!ret)
		rstr(buf, len);
	return ret;
}

static inline int t_mknod(u32 dfid, const char *name, u32 mode, struct qid *q)
{
	int ret;

	begin(P9_TMKNOD);
	w(dfid, 4);
	wstr(name);
	w(mode, 4);
	w(8, 4); /* major, minor: 8:0 would be a disk */
	w(0, 4);
	w(0, 4);
	ret = call();
	if (!ret && q)
		rqid(q);
	return ret;
}

/* Tlink (dfid, fid, name) and Trename (fid, dfid, name). */
static inline int t_two_fids_name(u8 type, u32 a, u32 b, const char *name)
{
	begin(type);
	w(a, 4);
	w(b, 4);
	wstr(name);
	return call();
}

static inline int t_link(u32 dfid, u32 fid, const char *name)
{
	return t_two_fids_name(P9_TLINK, dfid, fid, name);
}

static inline int t_unlinkat(u32 dfid, const char *name, u32 flags)
{
	begin(P9_TUNLINKAT);
	w(dfid, 4);
	wstr(name);
	w(flags, 4);
	return call();
}

static inline int t_renameat(u32 ofid, const char *oname, u32 nfid, const char *nname)
{
	begin(P9_TRENAMEAT);
	w(ofid, 4);
	wstr(oname);
	w(nfid, 4);
	wstr(nname);
	return call();
}

static inline int t_rename(u32 fid, u32 dfid, const char *name)
{
	return t_two_fids_name(P9_TRENAME, fid, dfid, name);
}

static inline int t_xattrwalk(u32 fid, u32 newfid, const char *name, u64 *size)
{
	int ret;

	begin(P9_TXATTRWALK);
	w(fid, 4);
	w(newfid, 4);
	wstr(name);
	ret = call();
	if (!ret)
		*size = r(8);
	return ret;
}

static inline int t_xattrcreate(u32 fid, const char *name)
{
	begin(P9_TXATTRCREATE);
	w(fid, 4);
	wstr(name);
	w(4, 8);
	w(0, 4);
	return call();
}

/* Directory entries read from an open directory fid, `count` bytes per Treaddir. */
struct dent {
	struct qid qid;
	u64 off;
	u8 type;
	char name[NAME_MAX + 1];
};

static inline int t_readdir_all(u32 fid, u32 count, struct dent *out, int max)
{
	u64 off = 0;
	int n = 0;

	for (;;) {
		int got = t_io(P9_TREADDIR, fid, off, count);
		size_t end = rm_pos + (size_t)got;

		if (got <= 0)
			return got < 0 ? got : n;
		while (rm_pos < end) {
			ck_assert_int_lt(n, max);
			rqid(&out[n].qid);
			out[n].off = r(8);
			out[n].type = (u8)r(1);
			rstr(out[n].name, sizeof(out[n].name));
			off = out[n++].off;
		}
	}
}

static inline struct dent *find_dent(struct dent *d, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(d[i].name, name))
			return &d[i];
	return NULL;
}

/* ---- the host's side ---- */

static inline void host_write(const char *path, const char *data)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	close(fd);
}

/* The whole content of a host file ("" when it is missing) into buf. */
static inline char *host_read(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	ssize_t n = fd < 0 ? 0 : read(fd, buf, len - 1);

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

#endif

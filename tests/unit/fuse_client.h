/* Unit tests: a small FUSE client (build a request, send it, read the reply; one wrapper per operation) over a transport the test provides, the FUSE server called directly (test_fuse). */
#ifndef LKVM_TEST_FUSE_CLIENT_H
#define LKVM_TEST_FUSE_CLIENT_H

#include <errno.h>
#include <string.h>
#include <linux/fuse.h>

#include "lkvm/fuse-server.h"

#define FC_ROOT 1ull

/* The request being built and the reply being read. */
static u8 fc_tm[FUSE_SRV_MAX_WRITE + 4096];
static size_t fc_tm_len;
static u8 fc_rm[FUSE_SRV_MAX_WRITE + 4096];
static size_t fc_rm_len;
static u64 fc_unique;

/* The transport, set by the test: hand exactly `len` bytes of fc_tm as a request with `room`
 * bytes of fc_rm for the reply; the server's return. */
static ssize_t (*fc_handle)(size_t len, size_t room);
/* The reply room every wrapper gives (0: all of fc_rm); a test sets it for a few calls. */
static size_t fc_room;

static inline void fc_begin(u32 opcode, u64 nodeid)
{
	struct fuse_in_header ih = { .opcode = opcode, .unique = ++fc_unique, .nodeid = nodeid };

	memcpy(fc_tm, &ih, sizeof(ih));
	fc_tm_len = sizeof(ih);
}

static inline void fc_put(const void *p, size_t n)
{
	ck_assert_uint_le(fc_tm_len + n, sizeof(fc_tm));
	memcpy(fc_tm + fc_tm_len, p, n);
	fc_tm_len += n;
}

/* A name with its NUL. */
static inline void fc_name(const char *s)
{
	fc_put(s, strlen(s) + 1);
}

/* Send what was built with ih.len = the bytes built + `lie`; the raw return. */
static inline ssize_t fc_send_raw(size_t room, s64 lie)
{
	u32 len = (u32)((s64)fc_tm_len + lie);

	memcpy(fc_tm, &len, sizeof(len));
	return fc_handle(fc_tm_len, room);
}

/* Send; 0 with the reply body at fc_rm + 16 (fc_rm_len bytes of it), or the -errno the reply
 * carries. The reply's header is checked against the request. */
static inline int fc_call_room(size_t room)
{
	struct fuse_out_header oh;
	ssize_t n = fc_send_raw(room, 0);

	ck_assert_int_ge(n, (ssize_t)sizeof(oh));
	ck_assert_uint_le((size_t)n, room);
	memcpy(&oh, fc_rm, sizeof(oh));
	ck_assert_uint_eq(oh.len, (u64)n);
	ck_assert_uint_eq(oh.unique, fc_unique);
	ck_assert_int_le(oh.error, 0);
	if (oh.error) {
		ck_assert_uint_eq(oh.len, sizeof(oh));
		return oh.error;
	}
	fc_rm_len = (size_t)n - sizeof(oh);
	return 0;
}

static inline int fc_call(void)
{
	return fc_call_room(fc_room ? fc_room : sizeof(fc_rm));
}

/* A request that takes no reply: the server answers 0. */
static inline void fc_call_noreply(void)
{
	ck_assert_int_eq(fc_send_raw(fc_room ? fc_room : sizeof(fc_rm), 0), 0);
}

static inline void fc_body(void *out, size_t n)
{
	ck_assert_uint_ge(fc_rm_len, n);
	memcpy(out, fc_rm + sizeof(struct fuse_out_header), n);
}

/* ---- one wrapper per operation: 0 or -errno ---- */

static inline int f_init_minor(u32 major, u32 minor, u32 flags, struct fuse_init_out *out)
{
	struct fuse_init_in in = {
		.major = major, .minor = minor, .max_readahead = 1 << 17, .flags = flags
	};
	int ret;

	fc_begin(FUSE_INIT, 0);
	fc_put(&in, sizeof(in));
	ret = fc_call();
	if (!ret && out) {
		memset(out, 0, sizeof(*out));
		fc_body(out, MIN(fc_rm_len, sizeof(*out)));
	}
	return ret;
}

static inline void f_init(void)
{
	ck_assert_int_eq(f_init_minor(7, 36, 0xffffffffu, NULL), 0);
}

static inline int f_entry_call(struct fuse_entry_out *e)
{
	int ret = fc_call();

	if (!ret && e)
		fc_body(e, sizeof(*e));
	return ret;
}

static inline int f_lookup(u64 dir, const char *name, struct fuse_entry_out *e)
{
	fc_begin(FUSE_LOOKUP, dir);
	fc_name(name);
	return f_entry_call(e);
}

/* The node id of a name looked up (asserted to succeed). */
static inline u64 f_id(u64 dir, const char *name)
{
	struct fuse_entry_out e;

	ck_assert_int_eq(f_lookup(dir, name, &e), 0);
	ck_assert_uint_gt(e.nodeid, FC_ROOT);
	return e.nodeid;
}

static inline void f_forget(u64 node, u64 n)
{
	struct fuse_forget_in in = { .nlookup = n };

	fc_begin(FUSE_FORGET, node);
	fc_put(&in, sizeof(in));
	fc_call_noreply();
}

static inline int f_getattr(u64 node, const u64 *fh, struct fuse_attr *a)
{
	struct fuse_getattr_in in = { .getattr_flags = fh ? FUSE_GETATTR_FH : 0,
				      .fh = fh ? *fh : 0 };
	struct fuse_attr_out o;
	int ret;

	fc_begin(FUSE_GETATTR, node);
	fc_put(&in, sizeof(in));
	ret = fc_call();
	if (!ret && a) {
		fc_body(&o, sizeof(o));
		*a = o.attr;
	}
	return ret;
}

static inline int f_setattr(u64 node, const struct fuse_setattr_in *in, struct fuse_attr *a)
{
	struct fuse_attr_out o;
	int ret;

	fc_begin(FUSE_SETATTR, node);
	fc_put(in, sizeof(*in));
	ret = fc_call();
	if (!ret && a) {
		fc_body(&o, sizeof(o));
		*a = o.attr;
	}
	return ret;
}

static inline int f_open_op(u32 op, u64 node, u32 flags, u64 *fh, u32 *open_flags)
{
	struct fuse_open_in in = { .flags = flags };
	struct fuse_open_out o;
	int ret;

	fc_begin(op, node);
	fc_put(&in, sizeof(in));
	ret = fc_call();
	if (!ret) {
		fc_body(&o, sizeof(o));
		*fh = o.fh;
		if (open_flags)
			*open_flags = o.open_flags;
	}
	return ret;
}

static inline int f_open(u64 node, u32 flags, u64 *fh)
{
	return f_open_op(FUSE_OPEN, node, flags, fh, NULL);
}

static inline int f_opendir(u64 node, u64 *fh)
{
	return f_open_op(FUSE_OPENDIR, node, O_RDONLY | O_DIRECTORY, fh, NULL);
}

static inline int f_create(u64 dir, const char *name, u32 flags, u32 mode, struct fuse_entry_out *e,
			   u64 *fh)
{
	struct fuse_create_in in = { .flags = flags, .mode = S_IFREG | mode, .umask = 022 };
	struct fuse_open_out o;
	int ret;

	fc_begin(FUSE_CREATE, dir);
	fc_put(&in, sizeof(in));
	fc_name(name);
	ret = fc_call();
	if (!ret) {
		ck_assert_uint_eq(fc_rm_len, sizeof(*e) + sizeof(o));
		if (e)
			fc_body(e, sizeof(*e));
		memcpy(&o, fc_rm + sizeof(struct fuse_out_header) + sizeof(*e), sizeof(o));
		*fh = o.fh;
	}
	return ret;
}

/* READ: the bytes read into buf, or -errno. */
static inline ssize_t f_read(u64 fh, u64 off, u32 size, void *buf)
{
	struct fuse_read_in in = { .fh = fh, .offset = off, .size = size };
	int ret;

	fc_begin(FUSE_READ, 2);
	fc_put(&in, sizeof(in));
	ret = fc_call();
	if (ret)
		return ret;
	ck_assert_uint_le(fc_rm_len, size);
	if (buf)
		fc_body(buf, fc_rm_len);
	return (ssize_t)fc_rm_len;
}

static inline ssize_t f_write(u64 fh, u64 off, const void *data, u32 size)
{
	struct fuse_write_in in = { .fh = fh, .offset = off, .size = size };
	struct fuse_write_out o;
	int ret;

	fc_begin(FUSE_WRITE, 2);
	fc_put(&in, sizeof(in));
	fc_put(data, size);
	ret = fc_call();
	if (ret)
		return ret;
	fc_body(&o, sizeof(o));
	return o.size;
}

static inline int f_release_op(u32 op, u64 fh)
{
	struct fuse_release_in in = { .fh = fh };

	fc_begin(op, 2);
	fc_put(&in, sizeof(in));
	return fc_call();
}

static inline int f_release(u64 fh)
{
	return f_release_op(FUSE_RELEASE, fh);
}

static inline int f_releasedir(u64 fh)
{
	return f_release_op(FUSE_RELEASEDIR, fh);
}

/* READDIR(PLUS): the reply's bytes at fc_rm + 16, their count or -errno. */
static inline ssize_t f_readdir(u64 fh, u64 off, u32 size, bool plus)
{
	struct fuse_read_in in = { .fh = fh, .offset = off, .size = size };
	int ret;

	fc_begin(plus ? FUSE_READDIRPLUS : FUSE_READDIR, 1);
	fc_put(&in, sizeof(in));
	ret = fc_call();
	return ret ? ret : (ssize_t)fc_rm_len;
}

static inline int f_mkdir(u64 dir, const char *name, u32 mode, struct fuse_entry_out *e)
{
	struct fuse_mkdir_in in = { .mode = mode, .umask = 022 };

	fc_begin(FUSE_MKDIR, dir);
	fc_put(&in, sizeof(in));
	fc_name(name);
	return f_entry_call(e);
}

static inline int f_mknod(u64 dir, const char *name, u32 mode, u32 rdev, struct fuse_entry_out *e)
{
	struct fuse_mknod_in in = { .mode = mode, .rdev = rdev, .umask = 022 };

	fc_begin(FUSE_MKNOD, dir);
	fc_put(&in, sizeof(in));
	fc_name(name);
	return f_entry_call(e);
}

static inline int f_symlink(u64 dir, const char *name, const char *target, struct fuse_entry_out *e)
{
	fc_begin(FUSE_SYMLINK, dir);
	fc_name(name);
	fc_name(target);
	return f_entry_call(e);
}

static inline int f_link(u64 node, u64 dir, const char *name, struct fuse_entry_out *e)
{
	struct fuse_link_in in = { .oldnodeid = node };

	fc_begin(FUSE_LINK, dir);
	fc_put(&in, sizeof(in));
	fc_name(name);
	return f_entry_call(e);
}

/* READLINK into buf (NUL-terminated). */
static inline int f_readlink(u64 node, char *buf, size_t len)
{
	int ret;

	fc_begin(FUSE_READLINK, node);
	ret = fc_call();
	if (!ret) {
		ck_assert_uint_lt(fc_rm_len, len);
		fc_body(buf, fc_rm_len);
		buf[fc_rm_len] = '\0';
	}
	return ret;
}

static inline int f_unlink_op(u32 op, u64 dir, const char *name)
{
	fc_begin(op, dir);
	fc_name(name);
	return fc_call();
}

static inline int f_unlink(u64 dir, const char *name)
{
	return f_unlink_op(FUSE_UNLINK, dir, name);
}

static inline int f_rmdir(u64 dir, const char *name)
{
	return f_unlink_op(FUSE_RMDIR, dir, name);
}

static inline int f_rename(u64 dir, const char *name, u64 ndir, const char *nname, u32 flags)
{
	struct fuse_rename2_in in = { .newdir = ndir, .flags = flags };

	fc_begin(FUSE_RENAME2, dir);
	fc_put(&in, sizeof(in));
	fc_name(name);
	fc_name(nname);
	return fc_call();
}

/* A request of a fixed struct and no reply body expected but the header. */
static inline int f_simple(u32 op, u64 node, const void *in, size_t len)
{
	fc_begin(op, node);
	fc_put(in, len);
	return fc_call();
}

#endif

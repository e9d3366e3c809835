/* Unit tests of the 9P server in a snapshot (virtio/9p-snap.c): fids saved by path on server A, reopened by server B on the same directory, paths gone, refusals at save, hostile sections. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "check_main.h"
#include "p9_client.h"
#include "lkvm/p9.h"
#include "lkvm/snap.h"

#define TAG 48 /* the server's first record tag, as virtio-9p gives it */
#define INNER "inner file\n"
#define PATH_KEPT (PATH_MAX - 1) /* the longest path a fid keeps (9p-priv.h) */

static struct {
	char top[64];
	struct p9_server *a, *b, *cur; /* cur: the server requests go to */
	struct snap_rec_buf sec;
	char err[384];
} t;

static void path_of(char *buf, size_t len, const char *rel)
{
	snprintf(buf, len, "%s/%s", t.top, rel);
}

static struct p9_server *server(bool ro)
{
	struct p9_server_opts o = { .readonly = ro };
	struct p9_server *s;
	char err[256];

	ck_assert_msg(p9_server_open(&s, t.top, &o, err, sizeof(err)) == 0, "%s", err);
	return s;
}

static ssize_t handle(size_t len, size_t room)
{
	struct iovec in = { tm, len }, out = { rm, room };

	return p9_server_handle(t.cur, &in, 1, &out, 1);
}

static void setup(void)
{
	char p[256];

	memset(&t, 0, sizeof(t));
	p9c_tag = 0;
	p9c_room = 0;
	p9c_handle = handle;
	strcpy(t.top, "/tmp/lkvm-p9snap-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(t.top));
	path_of(p, sizeof(p), "dir");
	ck_assert_int_eq(mkdir(p, 0755), 0);
	path_of(p, sizeof(p), "dir/inner");
	host_write(p, INNER);
	path_of(p, sizeof(p), "file");
	host_write(p, "0123456789");
	path_of(p, sizeof(p), "d1");
	ck_assert_int_eq(mkdir(p, 0755), 0);
	t.a = t.cur = server(false);
}

static void teardown(void)
{
	char cmd[128];

	p9_server_close(t.a);
	p9_server_close(t.b);
	snap_rec_free(&t.sec);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", t.top);
	ck_assert_int_eq(system(cmd), 0);
}

/* A's state into t.sec: 0 or the save's -errno (its reason in t.err). */
static int save_a(void)
{
	snap_rec_free(&t.sec);
	t.sec = (struct snap_rec_buf){ 0 };
	t.err[0] = '\0';
	return p9_server_save(t.a, TAG, &t.sec, t.err, sizeof(t.err));
}

/* A new server B on the same directory loads sec: its -errno (reason in t.err). */
static int load_b(const void *sec, size_t len, bool ro)
{
	p9_server_close(t.b);
	t.b = server(ro);
	t.err[0] = '\0';
	return p9_server_load(t.b, TAG, sec, len, t.err, sizeof(t.err));
}

static u32 fids_of(struct p9_server *s)
{
	struct p9_stats st;

	p9_server_stats(s, &st);
	return st.fids;
}

/* ---- a session saved on A goes on on B ---- */

/* A's fids: 2 dir/inner open for reading, 3 dir open for listing, 4 file (not open), 5
 * d1/new created read-write and truncating, 6 d2/x (created in d1, then d1 renamed), 7 file
 * again by way of "dir/..", 8 file open for writing, appending. */
static void a_session(void)
{
	session();
	ck_assert_int_eq(t_walk(ROOT, 2, NULL, "dir", "inner"), 2);
	ck_assert_int_eq(t_lopen(2, 0 /* O_RDONLY */, NULL), 0);
	ck_assert_int_eq(t_walk(ROOT, 3, NULL, "dir"), 1);
	ck_assert_int_eq(t_lopen(3, P9_DOTL_DIRECTORY, NULL), 0);
	ck_assert_int_eq(walk_to(4, "file"), 0);
	ck_assert_int_eq(walk_to(5, "d1"), 0);
	ck_assert_int_eq(t_lcreate(5, "new", 2 | P9_DOTL_TRUNC, 0644, NULL), 0);
	ck_assert_int_eq(t_write(5, 0, "abc", 3), 3);
	ck_assert_int_eq(walk_to(6, "d1"), 0);
	ck_assert_int_eq(t_lcreate(6, "x", 2, 0644, NULL), 0);
	ck_assert_int_eq(t_write(6, 0, "x-data", 6), 6);
	ck_assert_int_eq(t_renameat(ROOT, "d1", ROOT, "d2"), 0);
	ck_assert_int_eq(t_walk(ROOT, 7, NULL, "dir", "..", "file"), 3);
	ck_assert_int_eq(walk_to(8, "file"), 0);
	ck_assert_int_eq(t_lopen(8, 1 | P9_DOTL_APPEND, NULL), 0);
}

START_TEST(fids_go_on)
{
	struct dent d[8];
	struct attr at;
	char buf[64], p[256];
	struct qid qa, qb;

	a_session();
	ck_assert_int_eq(t_getattr(5, &at), 0);
	qa = at.qid;
	ck_assert_int_eq(save_a(), 0);
	ck_assert_msg(load_b(t.sec.buf, t.sec.len, false) == 0, "%s", t.err);
	ck_assert_uint_eq(fids_of(t.b), 8);
	t.cur = t.b;
	/* The same fids read on from the offsets the guest gives. */
	ck_assert_int_eq(t_read(2, 6, 64, buf, sizeof(buf)), 5);
	ck_assert_int_eq(memcmp(buf, "file\n", 5), 0);
	ck_assert_int_eq(t_readdir_all(3, 4096, d, 8), 3); /* ., .., inner */
	ck_assert_ptr_nonnull(find_dent(d, 3, "inner"));
	ck_assert_int_eq(t_getattr(4, &at), 0);
	ck_assert_uint_eq(at.size, 10);
	/* Created with O_TRUNC, reopened without it: what was written is still there. */
	ck_assert_int_eq(t_read(5, 0, 64, buf, sizeof(buf)), 3);
	ck_assert_int_eq(memcmp(buf, "abc", 3), 0);
	ck_assert_int_eq(t_write(5, 3, "d", 1), 1);
	ck_assert_int_eq(t_getattr(5, &at), 0);
	qb = at.qid;
	ck_assert_uint_eq(qa.path, qb.path); /* the same share: the same qid */
	/* The rename was followed. */
	ck_assert_int_eq(t_read(6, 0, 64, buf, sizeof(buf)), 6);
	ck_assert_int_eq(memcmp(buf, "x-data", 6), 0);
	ck_assert_int_eq(t_getattr(7, &at), 0);
	ck_assert_uint_eq(at.size, 10);
	/* Write-only, appending: reads refused, writes land at the end. */
	ck_assert_int_eq(t_read(8, 0, 4, buf, sizeof(buf)), -EBADF);
	ck_assert_int_eq(t_write(8, 0, "AB", 2), 2);
	path_of(p, sizeof(p), "file");
	ck_assert_str_eq(host_read(p, buf, sizeof(buf)), "0123456789AB");
	path_of(p, sizeof(p), "d2/new");
	ck_assert_str_eq(host_read(p, buf, sizeof(buf)), "abcd");
	/* The session's msize and table: a fid number in use is refused, a new one made. */
	ck_assert_int_eq(walk_to(4, "dir"), -EINVAL);
	ck_assert_int_eq(walk_to(9, "dir"), 0);
	ck_assert_int_eq(t_clunk(2), 0);
	ck_assert_int_eq(t_clunk(2), -EBADF);
}
END_TEST

/* No session yet: nothing to reopen, B has answered nothing too. */
START_TEST(empty_session)
{
	struct p9_stats st;

	ck_assert_int_eq(save_a(), 0);
	ck_assert_msg(load_b(t.sec.buf, t.sec.len, false) == 0, "%s", t.err);
	p9_server_stats(t.b, &st);
	ck_assert_uint_eq(st.fids, 0);
	ck_assert_uint_eq(st.msize, 0);
}
END_TEST

/* ---- a path gone or changed between save and load ---- */

START_TEST(path_gone_refuses)
{
	char p[256];

	session();
	ck_assert_int_eq(t_walk(ROOT, 2, NULL, "dir", "inner"), 2);
	ck_assert_int_eq(t_lopen(2, 0, NULL), 0);
	ck_assert_int_eq(save_a(), 0);
	path_of(p, sizeof(p), "dir/inner");
	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(load_b(t.sec.buf, t.sec.len, false), -EINVAL);
	ck_assert_str_eq(t.err, "fid 2's path 'dir/inner' is gone from the share (ENOENT)");
	ck_assert_uint_eq(fids_of(t.b), 0);
}
END_TEST

START_TEST(path_changed_refuses)
{
	char p[256], q[256];

	session();
	ck_assert_int_eq(walk_to(2, "file"), 0);
	ck_assert_int_eq(save_a(), 0);
	/* Another file under the name: on the same share, another inode. */
	path_of(q, sizeof(q), "file.new");
	host_write(q, "other");
	path_of(p, sizeof(p), "file");
	ck_assert_int_eq(rename(q, p), 0);
	ck_assert_int_eq(load_b(t.sec.buf, t.sec.len, false), -EINVAL);
	ck_assert_msg(strstr(t.err, "fid 2's path 'file' names another file now") == t.err, "%s",
		      t.err);
	/* A directory under the name: another kind. */
	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(mkdir(p, 0755), 0);
	ck_assert_int_eq(load_b(t.sec.buf, t.sec.len, false), -EINVAL);
	ck_assert_str_eq(t.err, "fid 2's path 'file' is a directory now, was a file");
	ck_assert_uint_eq(fids_of(t.b), 0);
}
END_TEST

/* ---- what a save refuses ---- */

START_TEST(save_refuses)
{
	char p[256];
	u64 size;

	session();
	ck_assert_int_eq(t_walk(ROOT, 2, NULL, "dir", "inner"), 2);
	ck_assert_int_eq(t_lopen(2, 0, NULL), 0);
	path_of(p, sizeof(p), "dir/inner");
	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(save_a(), -EOPNOTSUPP);
	ck_assert_str_eq(t.err, "fid 2 ('dir/inner'): an open file was removed from the share");
	ck_assert_int_eq(t_lopen(2, 0, NULL), -EINVAL); /* A goes on as it was */
	ck_assert_int_eq(t_clunk(2), 0);
	ck_assert_int_eq(walk_to(3, "file"), 0);
	path_of(p, sizeof(p), "file");
	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(save_a(), -EOPNOTSUPP);
	ck_assert_str_eq(t.err,
			 "fid 3 ('file'): a file the guest holds was removed from the share");
	ck_assert_int_eq(t_clunk(3), 0);
	ck_assert_int_eq(t_xattrwalk(ROOT, 4, "", &size), 0);
	ck_assert_int_eq(save_a(), -EOPNOTSUPP);
	ck_assert_str_eq(t.err, "fid 4: an xattr fid cannot be saved");
	ck_assert_int_eq(t_clunk(4), 0);
	ck_assert_int_eq(save_a(), 0);
}
END_TEST

/* A path longer than a snapshot keeps: the fid works, the save says why it cannot. */
START_TEST(save_refuses_long_path)
{
	char name[NAME_MAX + 1];
	int depth = PATH_KEPT / (NAME_MAX + 1) + 2; /* 17 names: 4351 bytes */

	memset(name, 'n', NAME_MAX);
	name[NAME_MAX] = '\0';
	ck_assert_int_eq(chdir(t.top), 0);
	for (int i = 0; i < depth; i++) {
		/* One level at a time, relative: the host's PATH_MAX bounds a whole path. */
		ck_assert_msg(mkdir(name, 0755) == 0 && chdir(name) == 0, "level %d: %s", i,
			      strerror(errno));
	}
	session();
	ck_assert_int_eq(walk_to(2, name), 0);
	for (int i = 1; i < depth; i++)
		ck_assert_int_eq(t_walk(2, 2, NULL, name), 1);
	ck_assert_int_eq(save_a(), -EOPNOTSUPP);
	ck_assert_msg(strstr(t.err, "fid 2: its path beneath the share is not known"), "%s", t.err);
	/* Below the bound again: a fid's path is its node's names (hostfs), known again. */
	ck_assert_int_eq(t_walk(2, 2, NULL, ".."), 1);
	ck_assert_int_eq(save_a(), 0);
	ck_assert_int_eq(chdir("/"), 0);
}
END_TEST

/* ---- hostile sections ---- */

struct rec_fid {
	u32 id, type, oflags;
	u8 open, reserved[3];
	u64 dev, ino;
};

struct rec_session {
	u32 msize, nfids, ndevs, reserved;
	u64 root_dev, root_ino;
};

static struct stat root_st;

/* A section of one fid (id, type, open flags, path) with session ss (nfids 1). */
static void one_fid(struct snap_rec_buf *b, const struct rec_session *ss, const struct rec_fid *f,
		    const char *path, size_t plen)
{
	u8 rec[sizeof(*f) + PATH_MAX + 16];
	u64 dev = root_st.st_dev;

	ck_assert_uint_le(plen, PATH_MAX + 16);
	memcpy(rec, f, sizeof(*f));
	memcpy(rec + sizeof(*f), path, plen);
	snap_rec_put(b, TAG, ss, sizeof(*ss));
	snap_rec_put(b, TAG + 1, &dev, sizeof(dev));
	snap_rec_put(b, TAG + 2, rec, sizeof(*f) + plen);
}

#define SS(m, n, d)                                      \
	{                                                \
		.msize = (m), .nfids = (n), .ndevs = (d) \
	}
#define F(i, ty, fl, op)                                              \
	{                                                             \
		.id = (i), .type = (ty), .oflags = (fl), .open = (op) \
	}

static const struct {
	const char *what;
	struct rec_session ss;
	struct rec_fid f;
	const char *path;
	int plen; /* -1: strlen */
	const char *err;
} bad[] = {
	{ "dotdot", SS(65536, 1, 1), F(2, S_IFREG, 0, 0), "../x", -1, "does not stay beneath" },
	{ "dotdot inside", SS(65536, 1, 1), F(2, S_IFREG, 0, 0), "dir/../file", -1,
	  "does not stay" },
	{ "dot", SS(65536, 1, 1), F(2, S_IFDIR, 0, 0), "./dir", -1, "does not stay beneath" },
	{ "absolute", SS(65536, 1, 1), F(2, S_IFREG, 0, 0), "/etc/passwd", -1, "does not stay" },
	{ "empty component", SS(65536, 1, 1), F(2, S_IFREG, 0, 0), "dir//inner", -1,
	  "does not stay" },
	{ "trailing slash", SS(65536, 1, 1), F(2, S_IFDIR, 0, 0), "dir/", -1, "does not stay" },
	{ "nul", SS(65536, 1, 1), F(2, S_IFREG, 0, 0), "file\0x", 6, "does not stay beneath" },
	{ "too long", SS(65536, 1, 1), F(2, S_IFREG, 0, 0), NULL, PATH_MAX, "fid record of" },
	{ "NOFID", SS(65536, 1, 1), F(P9_NOFID, S_IFREG, 0, 0), "file", -1, "not a fid number" },
	{ "type", SS(65536, 1, 1), F(2, 0170000, 0, 0), "file", -1, "a bad kind" },
	{ "type bits", SS(65536, 1, 1), F(2, S_IFREG | 0644, 0, 0), "file", -1, "a bad kind" },
	{ "open 2", SS(65536, 1, 1), F(2, S_IFREG, 0, 2), "file", -1, "a bad kind" },
	{ "reserved",
	  SS(65536, 1, 1),
	  { .id = 2, .type = S_IFREG, .reserved = { 1 } },
	  "file",
	  -1,
	  "a bad kind" },
	{ "flags closed", SS(65536, 1, 1), F(2, S_IFREG, 1, 0), "file", -1, "open flags" },
	{ "flags unknown", SS(65536, 1, 1), F(2, S_IFREG, P9_DOTL_TRUNC, 1), "file", -1,
	  "open flags" },
	{ "noaccess", SS(65536, 1, 1), F(2, S_IFREG, 3, 1), "file", -1, "open flags" },
	{ "open link", SS(65536, 1, 1), F(2, S_IFLNK, 0, 1), "file", -1, "open flags" },
	{ "kind", SS(65536, 1, 1), F(2, S_IFDIR, 0, 0), "file", -1,
	  "is a file now, was a directory" },
	{ "gone", SS(65536, 1, 1), F(2, S_IFREG, 0, 0), "nothing", -1, "is gone from the share" },
	{ "dir as file", SS(65536, 1, 1), F(2, S_IFREG, 0, 1), "dir", -1, "is a directory now" },
	{ "msize low", SS(4095, 1, 1), F(2, S_IFREG, 0, 0), "file", -1, "msize 4095" },
	{ "msize high", SS(P9_MSIZE_MAX + 1, 1, 1), F(2, S_IFREG, 0, 0), "file", -1, "msize" },
	{ "fids", SS(65536, P9_FIDS_DEFAULT + 1, 1), F(2, S_IFREG, 0, 0), "file", -1, "more than" },
	{ "fid count", SS(65536, 0, 1), F(2, S_IFREG, 0, 0), "file", -1, "1 fid records" },
	{ "no devs", SS(65536, 1, 0), F(2, S_IFREG, 0, 0), "file", -1, "qid devices" },
	{ "many devs", SS(65536, 1, 256), F(2, S_IFREG, 0, 0), "file", -1, "qid devices" },
	{ "devs length", SS(65536, 1, 2), F(2, S_IFREG, 0, 0), "file", -1, "device table of 8" },
};

START_TEST(hostile_fid)
{
	static char longp[PATH_MAX];
	struct snap_rec_buf b = { 0 };
	struct rec_session ss = bad[_i].ss;
	struct rec_fid f = bad[_i].f;
	const char *path = bad[_i].path ? bad[_i].path : longp;
	size_t plen = bad[_i].plen < 0 ? strlen(path) : (size_t)bad[_i].plen;

	memset(longp, 'a', sizeof(longp));
	ck_assert_int_eq(stat(t.top, &root_st), 0);
	ss.root_dev = root_st.st_dev;
	ss.root_ino = root_st.st_ino;
	one_fid(&b, &ss, &f, path, plen);
	ck_assert_int_eq(load_b(b.buf, b.len, false), -EINVAL);
	ck_assert_msg(strstr(t.err, bad[_i].err), "%s: '%s'", bad[_i].what, t.err);
	ck_assert_uint_eq(fids_of(t.b), 0);
	snap_rec_free(&b);
}
END_TEST

/* A read-only share reopens nothing for writing; a fid twice is refused. */
START_TEST(hostile_ro_and_twice)
{
	struct rec_session ss = SS(65536, 1, 1);
	struct rec_fid f = F(2, S_IFREG, 2 /* O_RDWR */, 1);
	struct snap_rec_buf b = { 0 };
	u8 rec[sizeof(f) + 4];

	ck_assert_int_eq(stat(t.top, &root_st), 0);
	ss.root_dev = root_st.st_dev;
	ss.root_ino = root_st.st_ino;
	one_fid(&b, &ss, &f, "file", 4);
	ck_assert_int_eq(load_b(b.buf, b.len, true), -EINVAL);
	ck_assert_str_eq(t.err, "fid 2: open flags 0x2 that this share refuses for a file");
	snap_rec_free(&b);
	b = (struct snap_rec_buf){ 0 };
	/* fid 2 twice: the second is refused (a root of another inode: a copy of the share,
	 * whose inodes are not compared). */
	f.oflags = f.open = 0;
	ss.root_ino++;
	ss.nfids = 2;
	one_fid(&b, &ss, &f, "file", 4);
	memcpy(rec, &f, sizeof(f));
	memcpy(rec + sizeof(f), "file", 4);
	snap_rec_put(&b, TAG + 2, rec, sizeof(rec));
	ck_assert_int_eq(load_b(b.buf, b.len, false), -EINVAL);
	ck_assert_msg(strstr(t.err, "fid 2: not a fid number, or saved twice"), "%s", t.err);
	ck_assert_uint_eq(fids_of(t.b), 0);
	snap_rec_free(&b);
}
END_TEST

/* A real section cut at every length, and each byte of it flipped: refused or loaded, never a
 * crash (ASan), and B's table consistent either way. */
START_TEST(hostile_cut_and_flipped)
{
	a_session();
	ck_assert_int_eq(save_a(), 0);
	for (size_t len = 0; len < t.sec.len; len++) {
		ck_assert_int_eq(load_b(t.sec.buf, len, false), -EINVAL);
		ck_assert_uint_eq(fids_of(t.b), 0);
	}
	for (size_t i = 0; i < t.sec.len; i++) {
		u8 *copy = malloc(t.sec.len);

		memcpy(copy, t.sec.buf, t.sec.len);
		copy[i] ^= 0x41;
		if (load_b(copy, t.sec.len, false) < 0)
			ck_assert_uint_eq(fids_of(t.b), 0);
		free(copy);
	}
	ck_assert_msg(load_b(t.sec.buf, t.sec.len, false) == 0, "%s", t.err);
}
END_TEST

static Suite *p9_snap_suite(void)
{
	Suite *s = suite_create("p9_snap");
	TCase *tc = tcase_create("snap"), *hostile = tcase_create("hostile");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_checked_fixture(hostile, setup, teardown);
	tcase_set_timeout(hostile, 60);
	tcase_add_test(tc, fids_go_on);
	tcase_add_test(tc, empty_session);
	tcase_add_test(tc, path_gone_refuses);
	tcase_add_test(tc, path_changed_refuses);
	tcase_add_test(tc, save_refuses);
	tcase_add_test(tc, save_refuses_long_path);
	tcase_add_loop_test(hostile, hostile_fid, 0, (int)ARRAY_SIZE(bad));
	tcase_add_test(hostile, hostile_ro_and_twice);
	tcase_add_test(hostile, hostile_cut_and_flipped);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, hostile);
	return s;
}

LKVM_CHECK_MAIN(p9_snap_suite)

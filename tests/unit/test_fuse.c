/* Unit tests of the FUSE server (virtio/fuse-server.c and its files) through a small in-test client against a temporary tree: every operation, POSIX cases, escapes, read-only shares, hostile requests, snapshots. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <grp.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "check_main.h"
#include "fuse_client.h"
#include "lkvm/fuse-server.h"
#include "lkvm/snap.h"

#define SECRET "outside: never to be read through the share\n"
#define HELLO "hello, world\n"

static struct {
	char top[64]; /* the temporary tree: share/, outside/ */
	char share[96], outside[96], secret[128];
	struct stat secret_st;
	int ino; /* inotify: outside/, outside/secret, and the tree's top */
	struct fuse_server *s;
	size_t req_chunk, resp_chunk; /* split the messages into iovecs of this size (0: one) */
} t;

/* ---- the fixture ---- */

static void path_of(char *buf, size_t len, const char *rel)
{
	snprintf(buf, len, "%s/%s", t.share, rel);
}

static void host_write(const char *path, const char *data)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	close(fd);
}

/* The whole content of a host file ("" when it is missing) into buf. */
static char *host_read(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	ssize_t n = fd < 0 ? 0 : read(fd, buf, len - 1);

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

static u32 t_max_cached; /* hostfs's cache of O_PATH descriptors (0: its default) */

static void server_up(bool ro, enum fuse_cache cache, u32 max_handles)
{
	struct fuse_server_opts o = { .readonly = ro,
				      .cache = cache,
				      .max_handles = max_handles,
				      .fs = { .max_cached = t_max_cached } };
	char err[256];

	if (t.s)
		fuse_server_close(t.s);
	t.s = NULL;
	ck_assert_msg(fuse_server_open(&t.s, t.share, &o, err, sizeof(err)) == 0, "%s", err);
}

static ssize_t handle_raw(size_t len, size_t room);

static void setup(void)
{
	char p[256];

	memset(&t, 0, sizeof(t));
	t_max_cached = 0;
	fc_unique = 0;
	fc_room = 0;
	fc_handle = handle_raw;
	strcpy(t.top, "/tmp/lkvm-fuse-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(t.top));
	snprintf(t.share, sizeof(t.share), "%s/share", t.top);
	snprintf(t.outside, sizeof(t.outside), "%s/outside", t.top);
	snprintf(t.secret, sizeof(t.secret), "%s/secret", t.outside);
	ck_assert_int_eq(mkdir(t.share, 0755), 0);
	ck_assert_int_eq(mkdir(t.outside, 0755), 0);
	host_write(t.secret, SECRET);
	ck_assert_int_eq(stat(t.secret, &t.secret_st), 0);
	path_of(p, sizeof(p), "file");
	host_write(p, HELLO);
	path_of(p, sizeof(p), "dir");
	ck_assert_int_eq(mkdir(p, 0755), 0);
	path_of(p, sizeof(p), "dir/inner");
	host_write(p, "inner\n");
	path_of(p, sizeof(p), "link-out-abs");
	ck_assert_int_eq(symlink(t.secret, p), 0);
	path_of(p, sizeof(p), "link-out-rel");
	ck_assert_int_eq(symlink("../outside/secret", p), 0);
	path_of(p, sizeof(p), "link-dir-out");
	ck_assert_int_eq(symlink("../outside", p), 0);
	path_of(p, sizeof(p), "link-in");
	ck_assert_int_eq(symlink("file", p), 0);
	path_of(p, sizeof(p), "fifo");
	ck_assert_int_eq(mkfifo(p, 0644), 0);
	/* Watches go on last: from here on, nothing may touch what is outside the share. */
	t.ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	ck_assert_int_ge(t.ino, 0);
	ck_assert_int_ge(inotify_add_watch(t.ino, t.outside, IN_ALL_EVENTS), 0);
	ck_assert_int_ge(inotify_add_watch(t.ino, t.secret, IN_ALL_EVENTS), 0);
	ck_assert_int_ge(inotify_add_watch(t.ino, t.top, IN_CREATE | IN_DELETE | IN_MOVE), 0);
	server_up(false, FUSE_CACHE_AUTO, 0);
}

/* Nothing outside the share was opened, read, changed, created or removed. */
static void assert_outside_untouched(void)
{
	char buf[4096], data[256];
	struct stat st;
	ssize_t n = read(t.ino, buf, sizeof(buf));

	if (n > 0) {
		const struct inotify_event *e = (const void *)buf;

		ck_abort_msg("a host file outside the share was touched: inotify mask %#x on %s",
			     e->mask, e->len ? e->name : "(watched file)");
	}
	ck_assert_int_eq(stat(t.secret, &st), 0);
	ck_assert_int_eq(st.st_mtim.tv_sec, t.secret_st.st_mtim.tv_sec);
	ck_assert_int_eq(st.st_mtim.tv_nsec, t.secret_st.st_mtim.tv_nsec);
	ck_assert_int_eq(st.st_mode, t.secret_st.st_mode);
	ck_assert_int_eq(st.st_nlink, 1);
	ck_assert_str_eq(host_read(t.secret, data, sizeof(data)), SECRET);
}

static void teardown(void)
{
	char cmd[256];

	assert_outside_untouched();
	fuse_server_close(t.s);
	close(t.ino);
	snprintf(cmd, sizeof(cmd), "chmod -R u+rwx %s; rm -rf %s", t.top, t.top);
	ck_assert_int_eq(system(cmd), 0);
}

/* ---- the transport: the server itself ---- */

/* Cut [buf, buf + len) into iovecs of `chunk` bytes (0: one), at most FUSE_SRV_MAX_IOV. */
static int split(struct iovec *iov, u8 *buf, size_t len, size_t chunk)
{
	int n = 0;

	if (chunk && len / chunk >= FUSE_SRV_MAX_IOV)
		chunk = len / (FUSE_SRV_MAX_IOV - 1) + 1;
	for (size_t off = 0; off < len || !n; n++) {
		size_t k = chunk ? MIN(chunk, len - off) : len;

		iov[n] = (struct iovec){ buf + off, k };
		off += k;
	}
	return n;
}

static ssize_t handle_raw(size_t len, size_t room)
{
	static struct iovec in[FUSE_SRV_MAX_IOV], out[FUSE_SRV_MAX_IOV];
	int nin = split(in, fc_tm, len, t.req_chunk), nout = split(out, fc_rm, room, t.resp_chunk);

	return fuse_server_handle(t.s, in, nin, out, nout);
}

static u64 host_ino(const char *rel)
{
	char p[512];
	struct stat st;

	path_of(p, sizeof(p), rel);
	ck_assert_int_eq(lstat(p, &st), 0);
	return st.st_ino;
}

static bool host_exists(const char *rel)
{
	char p[512];
	struct stat st;

	path_of(p, sizeof(p), rel);
	return lstat(p, &st) == 0;
}

static u64 open_file(const char *name, u32 flags)
{
	u64 fh;

	ck_assert_int_eq(f_open(f_id(FC_ROOT, name), flags, &fh), 0);
	return fh;
}

/* ---- the session ---- */

START_TEST(init_session)
{
	struct fuse_init_out o;
	struct fuse_entry_out e;

	/* Nothing before INIT but FORGETs (which answer nothing). */
	ck_assert_int_eq(f_lookup(FC_ROOT, "file", &e), -EIO);
	f_forget(FC_ROOT, 1);
	/* Too old a guest, another major. */
	ck_assert_int_eq(f_init_minor(7, 30, 0, &o), -EPROTO);
	ck_assert_int_eq(f_init_minor(6, 40, 0, &o), -EPROTO);
	ck_assert_int_eq(f_init_minor(8, 0, 0, &o), 0);
	ck_assert_uint_eq(fc_rm_len, FUSE_COMPAT_INIT_OUT_SIZE);
	ck_assert_uint_eq(o.major, 7);
	ck_assert_int_eq(f_lookup(FC_ROOT, "file", &e), -EIO); /* still no session */
	/* min(guest, ours), and only flags both know. */
	ck_assert_int_eq(f_init_minor(7, 38, 0xffffffffu, &o), 0);
	ck_assert_uint_eq(fc_rm_len, sizeof(o));
	ck_assert_uint_eq(o.minor, 31);
	ck_assert(o.flags & FUSE_DO_READDIRPLUS);
	ck_assert(o.flags & FUSE_MAX_PAGES);
	ck_assert(!(o.flags & (FUSE_POSIX_LOCKS | FUSE_EXPORT_SUPPORT | FUSE_WRITEBACK_CACHE |
			       FUSE_CACHE_SYMLINKS | FUSE_DONT_MASK | FUSE_INIT_EXT)));
	ck_assert_uint_eq(o.max_write, FUSE_SRV_MAX_WRITE);
	ck_assert_uint_eq(o.max_pages, FUSE_SRV_MAX_WRITE / 4096);
	ck_assert_int_eq(f_init_minor(7, 31, FUSE_ASYNC_READ, &o), 0);
	ck_assert_uint_eq(o.flags, FUSE_ASYNC_READ);
	/* A new INIT forgets every node of the old session. */
	{
		u64 id = f_id(FC_ROOT, "file");
		struct fuse_attr a;

		ck_assert_int_eq(f_getattr(id, NULL, &a), 0);
		f_init();
		ck_assert_int_eq(f_getattr(id, NULL, &a), -ESTALE);
		ck_assert_int_eq(f_getattr(FC_ROOT, NULL, &a), 0);
	}
	/* DESTROY ends it. */
	fc_begin(FUSE_DESTROY, 0);
	ck_assert_int_eq(fc_call(), 0);
	ck_assert_int_eq(f_lookup(FC_ROOT, "file", &e), -EIO);
}
END_TEST

START_TEST(lookup_and_getattr)
{
	struct fuse_entry_out e;
	struct fuse_attr a;

	f_init();
	ck_assert_int_eq(f_lookup(FC_ROOT, "file", &e), 0);
	ck_assert_uint_eq(e.attr.ino, host_ino("file"));
	ck_assert(S_ISREG(e.attr.mode));
	ck_assert_uint_eq(e.attr.size, strlen(HELLO));
	ck_assert_uint_eq(e.entry_valid, 0); /* AUTO: the host's changes seen */
	ck_assert_int_eq(f_getattr(e.nodeid, NULL, &a), 0);
	ck_assert_uint_eq(a.ino, e.attr.ino);
	ck_assert_int_eq(f_getattr(FC_ROOT, NULL, &a), 0);
	ck_assert(S_ISDIR(a.mode));
	ck_assert_uint_eq(a.ino, host_ino("."));
	/* The same file is the same node, whatever the name. */
	ck_assert_uint_eq(f_id(FC_ROOT, "file"), e.nodeid);
	ck_assert_int_eq(f_lookup(FC_ROOT, "missing", &e), -ENOENT);
	ck_assert_int_eq(f_lookup(f_id(FC_ROOT, "file"), "x", &e), -ENOTDIR);
	{
		u64 dir = f_id(FC_ROOT, "dir");

		ck_assert_int_eq(f_lookup(dir, "inner", &e), 0);
		ck_assert_uint_eq(e.attr.ino, host_ino("dir/inner"));
	}
}
END_TEST

START_TEST(forget_counts)
{
	struct fuse_attr a;
	u64 id;

	f_init();
	id = f_id(FC_ROOT, "file");
	ck_assert_uint_eq(f_id(FC_ROOT, "file"), id);
	f_forget(id, 1);
	ck_assert_int_eq(f_getattr(id, NULL, &a), 0); /* one lookup still held */
	f_forget(id, 1);
	ck_assert_int_eq(f_getattr(id, NULL, &a), -ESTALE);
	/* More than held, twice, and of ids never given: nothing breaks. */
	id = f_id(FC_ROOT, "file");
	f_forget(id, 1000);
	f_forget(id, 1000);
	ck_assert_int_eq(f_getattr(id, NULL, &a), -ESTALE);
	f_forget(0, 1);
	f_forget(~0ull, 1);
	f_forget(FC_ROOT, 5); /* the root stays */
	ck_assert_int_eq(f_getattr(FC_ROOT, NULL, &a), 0);
	/* BATCH_FORGET: as many as carried, whatever the count says. */
	id = f_id(FC_ROOT, "dir");
	{
		struct fuse_batch_forget_in in = { .count = 1000 };
		struct fuse_forget_one one = { .nodeid = id, .nlookup = 1 };

		fc_begin(FUSE_BATCH_FORGET, 0);
		fc_put(&in, sizeof(in));
		fc_put(&one, sizeof(one));
		fc_put(&one, 8); /* half of another */
		fc_call_noreply();
	}
	ck_assert_int_eq(f_getattr(id, NULL, &a), -ESTALE);
	/* A node forgotten while something else holds it (an open file, a child) is not the
	 * guest's to name any more. */
	id = f_id(FC_ROOT, "dir");
	ck_assert_uint_gt(f_id(id, "inner"), FC_ROOT);
	f_forget(id, 1);
	ck_assert_int_eq(f_getattr(id, NULL, &a), -ESTALE);
	ck_assert_int_eq(f_lookup(id, "inner", NULL), -ESTALE);
	/* A batch larger than the arguments' copy: every entry carried out. */
	{
		struct fuse_batch_forget_in in = { .count = 1000 };
		struct fuse_forget_one junk = { .nodeid = 99999, .nlookup = 1 };
		u64 ids[2] = { f_id(FC_ROOT, "file"), f_id(FC_ROOT, "fifo") };

		fc_begin(FUSE_BATCH_FORGET, 0);
		fc_put(&in, sizeof(in));
		for (int i = 0; i < 998; i++)
			fc_put(&junk, sizeof(junk));
		for (int i = 0; i < 2; i++) {
			struct fuse_forget_one one = { .nodeid = ids[i], .nlookup = 1 };

			fc_put(&one, sizeof(one));
		}
		fc_call_noreply();
		ck_assert_int_eq(f_getattr(ids[0], NULL, &a), -ESTALE);
		ck_assert_int_eq(f_getattr(ids[1], NULL, &a), -ESTALE);
	}
	/* A forgotten node looked up again works. */
	ck_assert_int_eq(f_getattr(f_id(FC_ROOT, "dir"), NULL, &a), 0);
}
END_TEST

START_TEST(read_write_release)
{
	char buf[64];
	u64 fh, wfh;

	f_init();
	fh = open_file("file", O_RDONLY);
	ck_assert_int_eq(f_read(fh, 0, sizeof(buf), buf), (ssize_t)strlen(HELLO));
	ck_assert_int_eq(memcmp(buf, HELLO, strlen(HELLO)), 0);
	ck_assert_int_eq(f_read(fh, 7, 5, buf), 5);
	ck_assert_int_eq(memcmp(buf, "world", 5), 0);
	ck_assert_int_eq(f_read(fh, 1000, 5, buf), 0);
	ck_assert_int_eq(f_write(fh, 0, "x", 1), -EBADF); /* read-only open */
	/* WRITE then READ through another handle: the same bytes (one host file). */
	wfh = open_file("file", O_RDWR);
	ck_assert_int_eq(f_write(wfh, 0, "HELLO", 5), 5);
	ck_assert_int_eq(f_read(fh, 0, 5, buf), 5);
	ck_assert_int_eq(memcmp(buf, "HELLO", 5), 0);
	ck_assert_int_eq(f_release(wfh), 0);
	ck_assert_int_eq(f_release(wfh), -EBADF); /* stale now */
	ck_assert_int_eq(f_read(wfh, 0, 5, buf), -EBADF);
	ck_assert_int_eq(f_release(fh), 0);
	/* O_TRUNC and O_APPEND. */
	fh = open_file("file", O_WRONLY | O_TRUNC);
	ck_assert_int_eq(f_write(fh, 0, "ab", 2), 2);
	ck_assert_int_eq(f_release(fh), 0);
	fh = open_file("file", O_WRONLY | O_APPEND);
	ck_assert_int_eq(f_write(fh, 0, "cd", 2), 2);
	ck_assert_int_eq(f_release(fh), 0);
	{
		char p[256], data[64];

		path_of(p, sizeof(p), "file");
		ck_assert_str_eq(host_read(p, data, sizeof(data)), "abcd");
	}
}
END_TEST

START_TEST(create_files)
{
	struct fuse_entry_out e, e2;
	char p[256], data[64];
	struct stat st;
	u64 fh, fh2;

	f_init();
	ck_assert_int_eq(f_create(FC_ROOT, "new", O_WRONLY | O_CREAT | O_EXCL, 0640, &e, &fh), 0);
	ck_assert_uint_eq(e.attr.ino, host_ino("new"));
	ck_assert_uint_eq(e.attr.mode & 07777, 0640);
	ck_assert_int_eq(f_write(fh, 0, "data", 4), 4);
	path_of(p, sizeof(p), "new");
	ck_assert_str_eq(host_read(p, data, sizeof(data)), "data");
	/* Exactly the mode asked (our umask does not apply), never set-id. */
	ck_assert_int_eq(f_create(FC_ROOT, "suid", O_RDWR | O_CREAT, 06777, &e2, &fh2), 0);
	path_of(p, sizeof(p), "suid");
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0777);
	/* Created read-only, written through the same open (git's object files). */
	ck_assert_int_eq(f_create(FC_ROOT, "ro", O_WRONLY | O_CREAT | O_EXCL, 0444, &e2, &fh2), 0);
	ck_assert_int_eq(f_write(fh2, 0, "obj", 3), 3);
	ck_assert_int_eq(f_release(fh2), 0);
	/* O_EXCL on a name that exists; without it, the file is opened. */
	ck_assert_int_eq(f_create(FC_ROOT, "new", O_WRONLY | O_CREAT | O_EXCL, 0640, &e2, &fh2),
			 -EEXIST);
	ck_assert_int_eq(f_create(FC_ROOT, "new", O_RDONLY | O_CREAT, 0640, &e2, &fh2), 0);
	ck_assert_uint_eq(e2.nodeid, e.nodeid);
	ck_assert_int_eq(f_read(fh2, 0, 10, data), 4);
	ck_assert_int_eq(f_create(FC_ROOT, "dir", O_RDONLY | O_CREAT, 0640, &e2, &fh2), -EISDIR);
	ck_assert_int_eq(f_create(f_id(FC_ROOT, "file"), "x", O_RDWR | O_CREAT, 0640, &e2, &fh2),
			 -ENOTDIR);
	ck_assert_int_eq(f_release(fh), 0);
}
END_TEST

/* A file CREATE made, unlinked while open, its node's descriptor cache churned: the node
 * still answers by its id (the open pins it), as one opened by OPEN does. */
START_TEST(created_unlinked_pinned)
{
	struct fuse_entry_out e;
	struct fuse_attr a;
	char p[256];
	u64 fh;

	for (int i = 0; i < 24; i++) {
		snprintf(p, sizeof(p), "%s/d%02d", t.share, i);
		ck_assert_int_eq(mkdir(p, 0755), 0);
	}
	t_max_cached = 8;
	server_up(false, FUSE_CACHE_AUTO, 0);
	f_init();
	ck_assert_int_eq(f_create(FC_ROOT, "tmp", O_RDWR | O_CREAT | O_EXCL, 0600, &e, &fh), 0);
	ck_assert_int_eq(f_write(fh, 0, "kept", 4), 4);
	ck_assert_int_eq(f_unlink(FC_ROOT, "tmp"), 0);
	for (int i = 0; i < 24; i++) {
		snprintf(p, sizeof(p), "d%02d", i);
		ck_assert_int_eq(f_getattr(f_id(FC_ROOT, p), NULL, &a), 0);
	}
	ck_assert_int_eq(f_getattr(e.nodeid, NULL, &a), 0);
	ck_assert_uint_eq(a.nlink, 0);
	ck_assert_uint_eq(a.size, 4);
	{
		struct fuse_srv_stats st;

		fuse_server_stats(t.s, &st);
		ck_assert_uint_eq(st.fs.open, 1); /* counted as an open file */
	}
	ck_assert_int_eq(f_release(fh), 0);
	{
		struct fuse_srv_stats st;

		fuse_server_stats(t.s, &st);
		ck_assert_uint_eq(st.fs.open, 0);
	}
}
END_TEST

/* Renames move the nodes' names (hostfs_renamed): after a rename, an exchange and an unlink
 * the nodes found again by name after their descriptors were evicted are the right files. */
START_TEST(renames_follow_nodes)
{
	struct fuse_entry_out e;
	struct fuse_attr a;
	char p[256];
	u64 dir, d2, file;

	for (int i = 0; i < 24; i++) {
		snprintf(p, sizeof(p), "%s/d%02d", t.share, i);
		ck_assert_int_eq(mkdir(p, 0755), 0);
	}
	t_max_cached = 8;
	server_up(false, FUSE_CACHE_AUTO, 0);
	f_init();
	dir = f_id(FC_ROOT, "dir");
	ck_assert_int_eq(f_mkdir(FC_ROOT, "other", 0755, &e), 0);
	d2 = e.nodeid;
	file = f_id(FC_ROOT, "file");
	ck_assert_int_eq(f_rename(FC_ROOT, "file", dir, "moved", 0), 0);
	ck_assert_int_eq(f_rename(FC_ROOT, "dir", FC_ROOT, "other", RENAME_EXCHANGE), 0);
	for (int i = 0; i < 24; i++) {
		snprintf(p, sizeof(p), "d%02d", i);
		ck_assert_int_eq(f_getattr(f_id(FC_ROOT, p), NULL, &a), 0);
	}
	ck_assert_int_eq(f_getattr(dir, NULL, &a), 0);
	ck_assert_uint_eq(a.ino, host_ino("other"));
	ck_assert_int_eq(f_getattr(d2, NULL, &a), 0);
	ck_assert_uint_eq(a.ino, host_ino("dir"));
	ck_assert_int_eq(f_getattr(file, NULL, &a), 0);
	ck_assert_uint_eq(a.ino, host_ino("other/moved"));
}
END_TEST

/* As a user who is not root (lkvm drops its capabilities): a file created 0444 for writing is
 * written through CREATE's own descriptor (git's objects, tar's read-only files); reopening
 * it by its magic link would be refused. */
START_TEST(create_readonly_mode_as_user)
{
	char p[256], data[16];
	int status;
	pid_t pid;

	ck_assert_int_eq(chmod(t.top, 0711), 0); /* mkdtemp's 0700: let the user reach the share */
	ck_assert_int_eq(chown(t.share, 65534, 65534), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		struct fuse_entry_out e;
		u64 fh, fh2;

		if (setgroups(0, NULL) || setresgid(65534, 65534, 65534) ||
		    setresuid(65534, 65534, 65534))
			_exit(10);
		t.s = NULL;
		server_up(false, FUSE_CACHE_AUTO, 0);
		f_init();
		if (f_create(FC_ROOT, "obj", O_WRONLY | O_CREAT | O_EXCL, 0444, &e, &fh))
			_exit(11);
		if (f_write(fh, 0, "obj", 3) != 3)
			_exit(12);
		if (f_open(e.nodeid, O_WRONLY, &fh2) != -EACCES) /* the host's check, as lkvm */
			_exit(13);
		_exit(f_release(fh) ? 14 : 0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
	path_of(p, sizeof(p), "obj");
	ck_assert_str_eq(host_read(p, data, sizeof(data)), "obj");
}
END_TEST

/* open, unlink, fstat and read on the open file; rename over an open file. */
START_TEST(posix_open_unlinked)
{
	struct fuse_attr a;
	char buf[64];
	u64 id, fh, fh2;

	f_init();
	id = f_id(FC_ROOT, "file");
	fh = open_file("file", O_RDWR);
	ck_assert_int_eq(f_unlink(FC_ROOT, "file"), 0);
	ck_assert(!host_exists("file"));
	ck_assert_int_eq(f_getattr(id, &fh, &a), 0);
	ck_assert_uint_eq(a.nlink, 0);
	ck_assert_int_eq(f_read(fh, 0, sizeof(buf), buf), (ssize_t)strlen(HELLO));
	ck_assert_int_eq(f_write(fh, 0, "J", 1), 1);
	ck_assert_int_eq(f_read(fh, 0, 1, buf), 1);
	ck_assert_int_eq(buf[0], 'J');
	ck_assert_int_eq(f_release(fh), 0);
	/* A bad fh with GETATTR_FH is an error, not the node's stat. */
	ck_assert_int_eq(f_getattr(id, &fh, &a), -EBADF);
	/* Rename over an open file: the open file stays the old one. */
	fh2 = 0;
	ck_assert_int_eq(f_open(f_id(f_id(FC_ROOT, "dir"), "inner"), O_RDONLY, &fh2), 0);
	ck_assert_int_eq(f_rename(FC_ROOT, "link-in", f_id(FC_ROOT, "dir"), "inner", 0), 0);
	ck_assert_int_eq(f_read(fh2, 0, sizeof(buf), buf), 6);
	ck_assert_int_eq(memcmp(buf, "inner\n", 6), 0);
	ck_assert_int_eq(f_release(fh2), 0);
}
END_TEST

START_TEST(names_and_links)
{
	struct fuse_entry_out e;
	struct fuse_attr a;
	char buf[PATH_MAX];
	u64 dir, id;

	f_init();
	/* mkdir, symlink, readlink, mknod of a FIFO, a socket, a file; devices refused. */
	ck_assert_int_eq(f_mkdir(FC_ROOT, "d", 02755, &e), 0);
	dir = e.nodeid;
	ck_assert(S_ISDIR(e.attr.mode));
	ck_assert_uint_eq(e.attr.mode & 07777, 02755);
	ck_assert_int_eq(f_mkdir(FC_ROOT, "d", 0755, &e), -EEXIST);
	ck_assert_int_eq(f_symlink(dir, "sl", "../../outside/secret", &e), 0);
	ck_assert(S_ISLNK(e.attr.mode));
	ck_assert_int_eq(f_readlink(e.nodeid, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "../../outside/secret");
	ck_assert_int_eq(f_readlink(dir, buf, sizeof(buf)), -EINVAL);
	ck_assert_int_eq(f_mknod(dir, "fifo", S_IFIFO | 0600, 0, &e), 0);
	ck_assert(S_ISFIFO(e.attr.mode));
	ck_assert_int_eq(f_mknod(dir, "sock", S_IFSOCK | 0600, 0, &e), 0);
	ck_assert_int_eq(f_mknod(dir, "reg", S_IFREG | 04755, 0, &e), 0);
	ck_assert_uint_eq(e.attr.mode, S_IFREG | 0755);
	ck_assert_int_eq(f_mknod(dir, "chr", S_IFCHR | 0600, 0x0103, &e), -EPERM);
	ck_assert_int_eq(f_mknod(dir, "blk", S_IFBLK | 0600, 0x0801, &e), -EPERM);
	ck_assert(!host_exists("d/chr") && !host_exists("d/blk"));
	/* Hard links through the node; the new name is the same node. */
	id = f_id(FC_ROOT, "file");
	ck_assert_int_eq(f_link(id, dir, "hard", &e), 0);
	ck_assert_uint_eq(e.nodeid, id);
	ck_assert_uint_eq(e.attr.nlink, 2);
	ck_assert_uint_eq(host_ino("d/hard"), host_ino("file"));
	ck_assert_int_eq(f_link(dir, FC_ROOT, "dirlink", &e), -EPERM);
	ck_assert_int_eq(f_link(12345, FC_ROOT, "x", &e), -ESTALE);
	/* rename, rename2's flags; whiteout refused. */
	ck_assert_int_eq(f_rename(dir, "hard", FC_ROOT, "moved", 0), 0);
	ck_assert(host_exists("moved") && !host_exists("d/hard"));
	ck_assert_int_eq(f_rename(FC_ROOT, "moved", FC_ROOT, "file", RENAME_NOREPLACE), -EEXIST);
	ck_assert_int_eq(f_rename(FC_ROOT, "dir", FC_ROOT, "d", RENAME_EXCHANGE), 0);
	ck_assert(host_exists("d/inner") && host_exists("dir/fifo"));
	ck_assert_int_eq(f_rename(FC_ROOT, "file", FC_ROOT, "w", RENAME_WHITEOUT), -EINVAL);
	/* unlink and rmdir. */
	ck_assert_int_eq(f_rmdir(FC_ROOT, "d"), -ENOTEMPTY);
	ck_assert_int_eq(f_unlink(FC_ROOT, "moved"), 0);
	ck_assert_int_eq(f_getattr(id, NULL, &a), 0);
	ck_assert_uint_eq(a.nlink, 1);
	ck_assert_int_eq(f_mkdir(FC_ROOT, "empty", 0755, &e), 0);
	ck_assert_int_eq(f_rmdir(FC_ROOT, "empty"), 0);
	ck_assert_int_eq(f_unlink(FC_ROOT, "dir"), -EISDIR);
	ck_assert(!host_exists("empty"));
}
END_TEST

START_TEST(setattr_ops)
{
	struct fuse_setattr_in in = { 0 };
	struct fuse_attr a;
	char p[256];
	struct stat st;
	u64 id, fh;

	f_init();
	id = f_id(FC_ROOT, "file");
	in.valid = FATTR_MODE;
	in.mode = S_IFREG | 06700;
	ck_assert_int_eq(f_setattr(id, &in, &a), 0);
	ck_assert_uint_eq(a.mode & 07777, 0700); /* never set-id */
	in.valid = FATTR_SIZE;
	in.size = 3;
	ck_assert_int_eq(f_setattr(id, &in, &a), 0);
	ck_assert_uint_eq(a.size, 3);
	fh = open_file("file", O_RDWR);
	in.valid = FATTR_SIZE | FATTR_FH;
	in.fh = fh;
	in.size = 100;
	ck_assert_int_eq(f_setattr(id, &in, &a), 0);
	ck_assert_uint_eq(a.size, 100);
	in.fh = fh + (1ull << 32); /* another generation */
	ck_assert_int_eq(f_setattr(id, &in, &a), -EBADF);
	in.valid = FATTR_ATIME | FATTR_MTIME;
	in.atime = 1000;
	in.mtime = 2000;
	in.mtimensec = 5;
	ck_assert_int_eq(f_setattr(id, &in, &a), 0);
	path_of(p, sizeof(p), "file");
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert_int_eq(st.st_atim.tv_sec, 1000);
	ck_assert_int_eq(st.st_mtim.tv_sec, 2000);
	ck_assert_int_eq(st.st_mtim.tv_nsec, 5);
	in.mtimensec = 1000000000;
	ck_assert_int_eq(f_setattr(id, &in, &a), -EINVAL);
	in.valid = FATTR_MTIME_NOW;
	ck_assert_int_eq(f_setattr(id, &in, &a), 0);
	ck_assert_int_gt(a.mtime, 2000);
	/* uid/gid passed through as they are (ours: allowed). */
	in.valid = FATTR_UID | FATTR_GID;
	in.uid = getuid();
	in.gid = getgid();
	ck_assert_int_eq(f_setattr(id, &in, &a), 0);
	/* A directory's size; a symlink's mode. */
	in.valid = FATTR_SIZE;
	ck_assert_int_eq(f_setattr(f_id(FC_ROOT, "dir"), &in, &a), -EISDIR);
	in.valid = FATTR_MODE;
	ck_assert_int_eq(f_setattr(f_id(FC_ROOT, "link-in"), &in, &a), -EOPNOTSUPP);
	ck_assert_int_eq(f_release(fh), 0);
}
END_TEST

/* Walk a READDIR(PLUS) reply: the names into names[], the node ids into ids[]. */
static int parse_dir(const u8 *p, size_t len, bool plus, char names[][NAME_MAX + 1], u64 *ids,
		     u64 *last_off, int max)
{
	int n = 0;

	for (size_t at = 0; at < len; n++) {
		struct fuse_entry_out e = { 0 };
		struct fuse_dirent d;

		ck_assert_int_lt(n, max);
		if (plus) {
			ck_assert_uint_le(at + sizeof(e), len);
			memcpy(&e, p + at, sizeof(e));
			at += sizeof(e);
		}
		ck_assert_uint_le(at + FUSE_NAME_OFFSET, len);
		memcpy(&d, p + at, FUSE_NAME_OFFSET);
		ck_assert_uint_le(d.namelen, NAME_MAX);
		ck_assert_uint_le(at + FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + d.namelen), len);
		memcpy(names[n], p + at + FUSE_NAME_OFFSET, d.namelen);
		names[n][d.namelen] = '\0';
		ids[n] = e.nodeid;
		*last_off = d.off;
		at += FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + d.namelen);
	}
	return n;
}

START_TEST(readdir_and_plus)
{
	char names[64][NAME_MAX + 1];
	u64 ids[64], off = 0, fh;
	struct fuse_attr a;
	ssize_t n;
	int cnt, total = 0, found = 0;

	f_init();
	ck_assert_int_eq(f_opendir(FC_ROOT, &fh), 0);
	n = f_readdir(fh, 0, 4096, false);
	ck_assert_int_gt(n, 0);
	cnt = parse_dir(fc_rm + 16, (size_t)n, false, names, ids, &off, 64);
	ck_assert_int_eq(cnt, 9); /* . .. file dir 4 links fifo */
	/* READDIRPLUS: a node for every entry that fitted but . and .., each counted once. */
	off = 0;
	for (;;) {
		n = f_readdir(fh, off, 400, true);
		ck_assert_int_ge(n, 0);
		if (!n)
			break;
		cnt = parse_dir(fc_rm + 16, (size_t)n, true, names, ids, &off, 64);
		for (int i = 0; i < cnt; i++) {
			bool dot = !strcmp(names[i], ".") || !strcmp(names[i], "..");

			ck_assert(dot ? ids[i] == 0 : ids[i] > FC_ROOT);
			if (!strcmp(names[i], "file")) {
				found++;
				ck_assert_int_eq(f_getattr(ids[i], NULL, &a), 0);
				f_forget(ids[i], 1);
				ck_assert_int_eq(f_getattr(ids[i], NULL, &a), -ESTALE);
			}
		}
		total += cnt;
	}
	ck_assert_int_eq(total, 9);
	ck_assert_int_eq(found, 1);
	/* A buffer too small for one entry: an error, and no node counted. */
	ck_assert_int_eq(f_readdir(fh, 0, 40, true), -EINVAL);
	ck_assert_int_eq(f_readdir(fh, 0, 0, false), -EINVAL);
	/* Bad handles: a file's fh, a stale one. */
	ck_assert_int_eq(f_release(fh), -EBADF); /* a directory's fh */
	ck_assert_int_eq(f_releasedir(fh), 0);
	ck_assert_int_eq(f_readdir(fh, 0, 4096, false), -EBADF);
	ck_assert_int_eq(f_opendir(f_id(FC_ROOT, "file"), &fh), -ENOTDIR);
	ck_assert_int_eq(f_open(f_id(FC_ROOT, "dir"), O_RDONLY, &fh), -EISDIR);
}
END_TEST

START_TEST(readdir_root_dotdot)
{
	char names[64][NAME_MAX + 1];
	u64 ids[64], off = 0, fh;
	ssize_t n;
	int cnt;

	f_init();
	ck_assert_int_eq(f_opendir(FC_ROOT, &fh), 0);
	n = f_readdir(fh, 0, 4096, false);
	cnt = parse_dir(fc_rm + 16, (size_t)n, false, names, ids, &off, 64);
	for (size_t at = 0, i = 0; i < (size_t)cnt; i++) {
		struct fuse_dirent d;

		memcpy(&d, fc_rm + 16 + at, FUSE_NAME_OFFSET);
		if (!strcmp(names[i], ".."))
			ck_assert_uint_eq(d.ino, host_ino("."));
		at += FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + d.namelen);
	}
	/* READDIRPLUS's entry for it too (the fuzzer found it there). */
	n = f_readdir(fh, 0, 4096, true);
	cnt = parse_dir(fc_rm + 16, (size_t)n, true, names, ids, &off, 64);
	for (size_t at = 0, i = 0; i < (size_t)cnt; i++) {
		struct fuse_entry_out e;
		struct fuse_dirent d;

		memcpy(&e, fc_rm + 16 + at, sizeof(e));
		memcpy(&d, fc_rm + 16 + at + sizeof(e), FUSE_NAME_OFFSET);
		if (!strcmp(names[i], "..")) {
			ck_assert_uint_eq(d.ino, host_ino("."));
			ck_assert_uint_eq(e.attr.ino, host_ino("."));
		}
		at += sizeof(e) + FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + d.namelen);
	}
	ck_assert_int_eq(f_releasedir(fh), 0);
}
END_TEST

START_TEST(misc_ops)
{
	struct fuse_statfs_out so;
	struct fuse_getxattr_out xo;
	u64 id, fh, fh2;
	char buf[64];

	f_init();
	/* STATFS */
	fc_begin(FUSE_STATFS, FC_ROOT);
	ck_assert_int_eq(fc_call(), 0);
	fc_body(&so, sizeof(so));
	ck_assert_uint_gt(so.st.bsize, 0);
	ck_assert_uint_eq(so.st.namelen, 255);
	/* ACCESS */
	id = f_id(FC_ROOT, "file");
	ck_assert_int_eq(f_simple(FUSE_ACCESS, id, &(struct fuse_access_in){ .mask = R_OK }, 8), 0);
	ck_assert_int_eq(f_simple(FUSE_ACCESS, id, &(struct fuse_access_in){ .mask = X_OK }, 8),
			 -EACCES);
	ck_assert_int_eq(f_simple(FUSE_ACCESS, id, &(struct fuse_access_in){ .mask = 64 }, 8),
			 -EINVAL);
	/* xattrs: none read, none written. */
	fc_begin(FUSE_GETXATTR, id);
	fc_put(&(struct fuse_getxattr_in){ .size = 100 }, 8);
	fc_name("security.capability");
	ck_assert_int_eq(fc_call(), -ENODATA);
	fc_begin(FUSE_LISTXATTR, id);
	fc_put(&(struct fuse_getxattr_in){ .size = 0 }, 8);
	ck_assert_int_eq(fc_call(), 0);
	fc_body(&xo, sizeof(xo));
	ck_assert_uint_eq(xo.size, 0);
	fc_begin(FUSE_SETXATTR, id);
	fc_put(&(struct fuse_setxattr_in){ .size = 1 }, 8);
	fc_name("user.x");
	fc_put("v", 1);
	ck_assert_int_eq(fc_call(), -EOPNOTSUPP);
	fc_begin(FUSE_REMOVEXATTR, id);
	fc_name("user.x");
	ck_assert_int_eq(fc_call(), -EOPNOTSUPP);
	/* FLUSH, FSYNC, FALLOCATE, LSEEK, COPY_FILE_RANGE */
	fh = open_file("file", O_RDWR);
	ck_assert_int_eq(f_simple(FUSE_FLUSH, id, &(struct fuse_flush_in){ .fh = fh }, 24), 0);
	ck_assert_int_eq(f_simple(FUSE_FSYNC, id, &(struct fuse_fsync_in){ .fh = fh }, 16), 0);
	ck_assert_int_eq(f_simple(FUSE_FSYNC, id,
				  &(struct fuse_fsync_in){ .fh = fh, .fsync_flags = 1 }, 16),
			 0);
	ck_assert_int_eq(f_simple(FUSE_FSYNCDIR, id, &(struct fuse_fsync_in){ .fh = fh }, 16),
			 -EBADF);
	ck_assert_int_eq(
		f_simple(FUSE_FALLOCATE, id,
			 &(struct fuse_fallocate_in){ .fh = fh, .offset = 0, .length = 1 << 20 },
			 sizeof(struct fuse_fallocate_in)),
		0);
	{
		struct fuse_lseek_out lo;

		ck_assert_int_eq(f_simple(FUSE_LSEEK, id,
					  &(struct fuse_lseek_in){ .fh = fh, .whence = SEEK_DATA },
					  sizeof(struct fuse_lseek_in)),
				 0);
		fc_body(&lo, sizeof(lo));
		ck_assert_uint_eq(lo.offset, 0);
		ck_assert_int_eq(f_simple(FUSE_LSEEK, id,
					  &(struct fuse_lseek_in){ .fh = fh, .whence = SEEK_END },
					  sizeof(struct fuse_lseek_in)),
				 -EINVAL);
	}
	{
		struct fuse_entry_out e;
		struct fuse_copy_file_range_in ci = { .fh_in = fh, .len = 5 };
		struct fuse_write_out wo;

		ck_assert_int_eq(f_create(FC_ROOT, "copy", O_RDWR | O_CREAT, 0644, &e, &fh2), 0);
		ci.fh_out = fh2;
		ci.nodeid_out = e.nodeid;
		ck_assert_int_eq(f_simple(FUSE_COPY_FILE_RANGE, id, &ci, sizeof(ci)), 0);
		fc_body(&wo, sizeof(wo));
		ck_assert_uint_eq(wo.size, 5);
		ck_assert_int_eq(f_read(fh2, 0, sizeof(buf), buf), 5);
		ck_assert_int_eq(memcmp(buf, "hello", 5), 0);
		ci.fh_out = 77;
		ck_assert_int_eq(f_simple(FUSE_COPY_FILE_RANGE, id, &ci, sizeof(ci)), -EBADF);
	}
	/* INTERRUPT answers nothing; unknown opcodes ENOSYS. */
	fc_begin(FUSE_INTERRUPT, 0);
	fc_put(&(struct fuse_interrupt_in){ .unique = 1 }, 8);
	fc_call_noreply();
	fc_begin(FUSE_GETLK, id);
	fc_put(&(struct fuse_lk_in){ .fh = fh }, sizeof(struct fuse_lk_in));
	ck_assert_int_eq(fc_call(), -ENOSYS);
	fc_begin(FUSE_IOCTL, id);
	ck_assert_int_eq(fc_call(), -ENOSYS);
	fc_begin(CUSE_INIT, id);
	ck_assert_int_eq(fc_call(), -ENOSYS);
	fc_begin(0xffffffffu, id);
	ck_assert_int_eq(fc_call(), -ENOSYS);
}
END_TEST

START_TEST(cache_modes)
{
	struct fuse_entry_out e;
	u32 of;
	u64 fh;

	server_up(false, FUSE_CACHE_ALWAYS, 0);
	f_init();
	ck_assert_int_eq(f_lookup(FC_ROOT, "file", &e), 0);
	ck_assert_uint_eq(e.entry_valid, 86400);
	ck_assert_uint_eq(e.attr_valid, 86400);
	ck_assert_int_eq(f_open_op(FUSE_OPEN, e.nodeid, O_RDONLY, &fh, &of), 0);
	ck_assert_uint_eq(of, FOPEN_KEEP_CACHE);
	ck_assert_int_eq(f_open_op(FUSE_OPENDIR, FC_ROOT, O_RDONLY, &fh, &of), 0);
	ck_assert(of & FOPEN_CACHE_DIR);
	/* A negative entry, cached as long. */
	ck_assert_int_eq(f_lookup(FC_ROOT, "missing", &e), 0);
	ck_assert_uint_eq(e.nodeid, 0);
	ck_assert_uint_eq(e.entry_valid, 86400);
	server_up(false, FUSE_CACHE_NONE, 0);
	f_init();
	ck_assert_int_eq(f_lookup(FC_ROOT, "file", &e), 0);
	ck_assert_uint_eq(e.entry_valid, 0);
	ck_assert_int_eq(f_open_op(FUSE_OPEN, e.nodeid, O_RDONLY, &fh, &of), 0);
	ck_assert_uint_eq(of, FOPEN_DIRECT_IO);
	ck_assert_int_eq(f_lookup(FC_ROOT, "missing", &e), -ENOENT);
}
END_TEST

/* ---- escapes ---- */

START_TEST(symlinks_not_followed)
{
	struct fuse_entry_out e;
	char buf[PATH_MAX];
	u64 fh;

	f_init();
	static const char *const links[] = { "link-out-abs", "link-out-rel", "link-dir-out",
					     "link-in" };
	for (size_t i = 0; i < ARRAY_SIZE(links); i++) {
		ck_assert_int_eq(f_lookup(FC_ROOT, links[i], &e), 0);
		ck_assert(S_ISLNK(e.attr.mode));
		ck_assert_uint_eq(e.attr.ino, host_ino(links[i]));
		ck_assert_int_eq(f_open(e.nodeid, O_RDONLY, &fh), -ELOOP);
		ck_assert_int_eq(f_opendir(e.nodeid, &fh), -ENOTDIR);
		ck_assert_int_eq(f_lookup(e.nodeid, "secret", &e), -ENOTDIR);
		ck_assert_int_eq(f_readlink(f_id(FC_ROOT, links[i]), buf, sizeof(buf)), 0);
	}
	/* Names cannot climb: "..", ".", '/' refused, at the root and below it. */
	ck_assert_int_eq(f_lookup(FC_ROOT, "..", &e), -EINVAL);
	ck_assert_int_eq(f_lookup(f_id(FC_ROOT, "dir"), "..", &e), -EINVAL);
	ck_assert_int_eq(f_lookup(FC_ROOT, ".", &e), -EINVAL);
	ck_assert_int_eq(f_lookup(FC_ROOT, "../outside", &e), -EINVAL);
	ck_assert_int_eq(f_lookup(FC_ROOT, "dir/inner", &e), -EINVAL);
	/* FIFO: looked up, never opened (it would block the server). */
	ck_assert_int_eq(f_lookup(FC_ROOT, "fifo", &e), 0);
	ck_assert_int_eq(f_open(e.nodeid, O_RDONLY, &fh), -EPERM);
}
END_TEST

/* A name in every operation that takes one: refused the same way everywhere. */
static int name_op(u32 op, const void *name, size_t len)
{
	static const u8 zero[64];
	static const u16 fixed[] = {
		[FUSE_LOOKUP] = 0,
		[FUSE_MKDIR] = sizeof(struct fuse_mkdir_in),
		[FUSE_MKNOD] = sizeof(struct fuse_mknod_in),
		[FUSE_UNLINK] = 0,
		[FUSE_RMDIR] = 0,
		[FUSE_SYMLINK] = 0,
		[FUSE_CREATE] = sizeof(struct fuse_create_in),
		[FUSE_LINK] = sizeof(struct fuse_link_in),
		[FUSE_RENAME] = sizeof(struct fuse_rename_in),
	};

	fc_begin(op, FC_ROOT);
	if (op == FUSE_LINK)
		fc_put(&(struct fuse_link_in){ .oldnodeid = FC_ROOT }, 8);
	else if (op == FUSE_RENAME)
		fc_put(&(struct fuse_rename_in){ .newdir = FC_ROOT }, 8);
	else if (op == FUSE_MKNOD)
		fc_put(&(struct fuse_mknod_in){ .mode = S_IFREG | 0644 }, 16);
	else if (op == FUSE_CREATE)
		fc_put(&(struct fuse_create_in){ .flags = O_RDWR, .mode = 0644 }, 16);
	else
		fc_put(zero, fixed[op]);
	fc_put(name, len);
	if (op == FUSE_SYMLINK || op == FUSE_RENAME)
		fc_name("target"); /* the second name, valid */
	return fc_call();
}

START_TEST(bad_names)
{
	static const u32 ops[] = { FUSE_LOOKUP,	 FUSE_MKDIR,  FUSE_MKNOD, FUSE_UNLINK, FUSE_RMDIR,
				   FUSE_SYMLINK, FUSE_CREATE, FUSE_LINK,  FUSE_RENAME };
	char long_name[NAME_MAX + 2];

	memset(long_name, 'a', sizeof(long_name));
	long_name[NAME_MAX + 1] = '\0';
	f_init();
	for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
		u32 op = ops[i];

		ck_assert_int_eq(name_op(op, "", 1), -EINVAL);
		ck_assert_int_eq(name_op(op, ".", 2), -EINVAL);
		ck_assert_int_eq(name_op(op, "..", 3), -EINVAL);
		ck_assert_int_eq(name_op(op, "a/b", 4), -EINVAL);
		ck_assert_int_eq(name_op(op, "/etc", 5), -EINVAL);
		ck_assert_int_eq(name_op(op, long_name, sizeof(long_name)), -ENAMETOOLONG);
		/* Not terminated inside the request. */
		if (op != FUSE_SYMLINK && op != FUSE_RENAME)
			ck_assert_int_eq(name_op(op, "abc", 3), -EINVAL);
	}
	/* 255 bytes is a name. */
	long_name[NAME_MAX] = '\0';
	ck_assert_int_eq(name_op(FUSE_MKDIR, long_name, NAME_MAX + 1), 0);
	ck_assert(host_exists(long_name));
	/* A NUL inside: the name ends there, the rest is not a second name. */
	ck_assert_int_eq(name_op(FUSE_LOOKUP, "file\0/../x", 11), 0);
	ck_assert_int_eq(name_op(FUSE_MKDIR, "ok\0../../outside/x", 19), 0);
	ck_assert(host_exists("ok"));
}
END_TEST

START_TEST(bad_nodeids_and_handles)
{
	static const u64 ids[] = { 0, 2, 12345, ~0ull, 1ull << 63 };
	struct fuse_entry_out e;
	struct fuse_attr a;
	char buf[16];
	u64 fh, id;

	f_init();
	for (size_t i = 0; i < ARRAY_SIZE(ids); i++) {
		ck_assert_int_eq(f_lookup(ids[i], "file", &e), -ESTALE);
		ck_assert_int_eq(f_getattr(ids[i], NULL, &a), -ESTALE);
		ck_assert_int_eq(f_open(ids[i], O_RDONLY, &fh), -ESTALE);
		ck_assert_int_eq(f_mkdir(ids[i], "x", 0755, &e), -ESTALE);
		ck_assert_int_eq(f_rename(FC_ROOT, "file", ids[i], "x", 0), -ESTALE);
		ck_assert_int_eq(f_read(ids[i], 0, 4, buf), -EBADF);
		ck_assert_int_eq(f_release(ids[i]), -EBADF);
		ck_assert_int_eq(f_releasedir(ids[i]), -EBADF);
		ck_assert_int_eq(f_write(ids[i], 0, "x", 1), -EBADF);
	}
	/* A forgotten node. */
	id = f_id(FC_ROOT, "file");
	f_forget(id, 1);
	ck_assert_int_eq(f_open(id, O_RDONLY, &fh), -ESTALE);
	/* A handle's old generation, after its slot was used again. */
	fh = open_file("file", O_RDONLY);
	ck_assert_int_eq(f_release(fh), 0);
	{
		u64 fh2 = open_file("file", O_RDONLY);

		ck_assert_uint_eq((u32)fh2, (u32)fh);
		ck_assert_int_eq(f_read(fh, 0, 4, buf), -EBADF);
		ck_assert_int_eq(f_read(fh2, 0, 4, buf), 4);
	}
	/* Bad open flags. */
	ck_assert_int_eq(f_open(f_id(FC_ROOT, "file"), O_ACCMODE, &fh), -EINVAL);
}
END_TEST

START_TEST(handle_cap)
{
	u64 fh[4], x;

	server_up(false, FUSE_CACHE_AUTO, 4);
	f_init();
	for (int i = 0; i < 4; i++)
		fh[i] = open_file("file", O_RDONLY);
	ck_assert_int_eq(f_open(f_id(FC_ROOT, "file"), O_RDONLY, &x), -ENFILE);
	ck_assert_int_eq(f_opendir(FC_ROOT, &x), -ENFILE);
	/* CREATE at the cap makes nothing. */
	ck_assert_int_eq(f_create(FC_ROOT, "new", O_RDWR | O_CREAT, 0644, NULL, &x), -ENFILE);
	ck_assert(!host_exists("new"));
	ck_assert_int_eq(f_release(fh[2]), 0);
	ck_assert_int_eq(f_opendir(FC_ROOT, &x), 0);
	{
		struct fuse_srv_stats st;

		fuse_server_stats(t.s, &st);
		ck_assert_uint_eq(st.handles, 4);
		ck_assert_uint_eq(st.max_handles, 4);
	}
}
END_TEST

/* Every request that changes the host, on a read-only share. */
START_TEST(readonly_refuses_writes)
{
	struct fuse_setattr_in sa = { .valid = FATTR_MODE, .mode = 0777 };
	struct fuse_entry_out e;
	struct fuse_attr a;
	char buf[64];
	u64 id, fh;

	server_up(true, FUSE_CACHE_AUTO, 0);
	f_init();
	id = f_id(FC_ROOT, "file");
	ck_assert_int_eq(f_setattr(id, &sa, &a), -EROFS);
	ck_assert_int_eq(f_mkdir(FC_ROOT, "d", 0755, &e), -EROFS);
	ck_assert_int_eq(f_mknod(FC_ROOT, "n", S_IFIFO | 0644, 0, &e), -EROFS);
	ck_assert_int_eq(f_symlink(FC_ROOT, "s", "file", &e), -EROFS);
	ck_assert_int_eq(f_link(id, FC_ROOT, "l", &e), -EROFS);
	ck_assert_int_eq(f_unlink(FC_ROOT, "file"), -EROFS);
	ck_assert_int_eq(f_rmdir(FC_ROOT, "dir"), -EROFS);
	ck_assert_int_eq(f_rename(FC_ROOT, "file", FC_ROOT, "x", 0), -EROFS);
	ck_assert_int_eq(f_create(FC_ROOT, "c", O_RDWR | O_CREAT, 0644, &e, &fh), -EROFS);
	ck_assert_int_eq(f_open(id, O_WRONLY, &fh), -EROFS);
	ck_assert_int_eq(f_open(id, O_RDWR, &fh), -EROFS);
	ck_assert_int_eq(f_open(id, O_RDONLY | O_TRUNC, &fh), -EROFS);
	ck_assert_int_eq(f_simple(FUSE_ACCESS, id, &(struct fuse_access_in){ .mask = W_OK }, 8),
			 -EROFS);
	fc_begin(FUSE_SETXATTR, id);
	fc_put(&(struct fuse_setxattr_in){ .size = 1 }, 8);
	fc_name("user.x");
	fc_put("v", 1);
	ck_assert_int_eq(fc_call(), -EROFS);
	/* Reads work, writes through a read-only handle do not. */
	fh = open_file("file", O_RDONLY);
	ck_assert_int_eq(f_read(fh, 0, sizeof(buf), buf), (ssize_t)strlen(HELLO));
	ck_assert_int_eq(f_write(fh, 0, "x", 1), -EROFS);
	ck_assert_int_eq(f_simple(FUSE_FALLOCATE, id,
				  &(struct fuse_fallocate_in){ .fh = fh, .length = 10 },
				  sizeof(struct fuse_fallocate_in)),
			 -EROFS);
	{
		struct fuse_copy_file_range_in ci = { .fh_in = fh, .fh_out = fh, .len = 1 };

		ck_assert_int_eq(f_simple(FUSE_COPY_FILE_RANGE, id, &ci, sizeof(ci)), -EROFS);
	}
	{
		char p[256], data[64];

		path_of(p, sizeof(p), "file");
		ck_assert_str_eq(host_read(p, data, sizeof(data)), HELLO);
	}
	ck_assert(host_exists("dir") && !host_exists("d") && !host_exists("c"));
}
END_TEST

/* ---- hostile framing and lengths ---- */

START_TEST(malformed_framing)
{
	struct fuse_in_header ih = { .len = sizeof(ih), .opcode = FUSE_GETATTR, .nodeid = 1 };
	struct iovec in = { &ih, sizeof(ih) }, out;
	u8 small[8];

	f_init();
	/* Fewer bytes than a header, or than its len says; len below a header. */
	ck_assert_int_eq(fuse_server_handle(t.s, &in, 0, &in, 1), -EBADMSG);
	in.iov_len = sizeof(ih) - 1;
	out = (struct iovec){ fc_rm, sizeof(fc_rm) };
	ck_assert_int_eq(fuse_server_handle(t.s, &in, 1, &out, 1), -EBADMSG);
	in.iov_len = sizeof(ih);
	ih.len = sizeof(ih) + 1;
	ck_assert_int_eq(fuse_server_handle(t.s, &in, 1, &out, 1), -EBADMSG);
	ih.len = sizeof(ih) - 1;
	ck_assert_int_eq(fuse_server_handle(t.s, &in, 1, &out, 1), -EBADMSG);
	ih.len = 0xffffffffu;
	ck_assert_int_eq(fuse_server_handle(t.s, &in, 1, &out, 1), -EBADMSG);
	/* No room for a reply header; none needed for FORGET. */
	ih.len = sizeof(ih);
	out = (struct iovec){ small, sizeof(small) };
	ck_assert_int_eq(fuse_server_handle(t.s, &in, 1, &out, 1), -ENOBUFS);
	ck_assert_int_eq(fuse_server_handle(t.s, &in, 1, &out, 0), -ENOBUFS);
	ih.opcode = FUSE_FORGET;
	ck_assert_int_eq(fuse_server_handle(t.s, &in, 1, &out, 0), 0);
	/* Too many buffers. */
	ck_assert_int_eq(fuse_server_handle(t.s, &in, FUSE_SRV_MAX_IOV + 1, &out, 1), -EINVAL);
	ck_assert_int_eq(fuse_server_handle(t.s, &in, -1, &out, 1), -EINVAL);
	ck_assert_int_eq(fuse_server_handle(t.s, &in, 1, &out, -1), -EINVAL);
	/* Bytes after ih.len are not part of the request: GETATTR then lacks its argument. */
	{
		struct fuse_getattr_in ga = { 0 };

		fc_begin(FUSE_GETATTR, FC_ROOT);
		fc_put(&ga, sizeof(ga));
		ck_assert_int_eq(fc_send_raw(sizeof(fc_rm), -(s64)sizeof(ga)), 16);
		ck_assert_int_eq(((struct fuse_out_header *)fc_rm)->error, -EINVAL);
	}
}
END_TEST

/* Every opcode we answer, sent with its arguments cut short: an error, nothing done. */
START_TEST(every_op_short)
{
	f_init();
	for (u32 op = 1; op < 64; op++) {
		ssize_t n;

		if (op == FUSE_INIT || op == FUSE_DESTROY || op == FUSE_FORGET ||
		    op == FUSE_STATFS || op == FUSE_BATCH_FORGET || op == FUSE_INTERRUPT ||
		    op == FUSE_NOTIFY_REPLY)
			continue;
		fc_begin(op, FC_ROOT);
		fc_put("\0\0\0", 3);
		n = fc_send_raw(sizeof(fc_rm), 0);
		ck_assert_int_eq(n, 16);
		ck_assert_msg(((struct fuse_out_header *)fc_rm)->error < 0, "opcode %u answered",
			      op);
		/* And with no arguments at all. */
		fc_begin(op, FC_ROOT);
		n = fc_send_raw(sizeof(fc_rm), 0);
		ck_assert_int_eq(n, 16);
		ck_assert_msg(((struct fuse_out_header *)fc_rm)->error < 0, "opcode %u answered",
			      op);
	}
	/* Short FORGETs change nothing. */
	{
		u64 id = f_id(FC_ROOT, "file");
		struct fuse_attr a;

		fc_begin(FUSE_FORGET, id);
		fc_put("\1\0\0", 3);
		fc_call_noreply();
		fc_begin(FUSE_BATCH_FORGET, 0);
		fc_put("\1\0\0", 3);
		fc_call_noreply();
		ck_assert_int_eq(f_getattr(id, NULL, &a), 0);
	}
	/* An INIT cut short. */
	fc_begin(FUSE_INIT, 0);
	fc_put("\7\0\0\0", 4);
	ck_assert_int_eq(fc_call(), -EINVAL);
	ck_assert(host_exists("file") && host_exists("dir"));
}
END_TEST

/* Every opcode with 4 KiB of 0xff after its header (no name terminated, every id and fh
 * unknown, every count huge): a well-formed reply, or none for the four that take none, and
 * nothing changed; with ih.len one byte past the buffers, no reply at all. */
START_TEST(every_op_long_and_lying)
{
	static u8 junk[4096];

	memset(junk, 0xff, sizeof(junk));
	for (u32 op = 1; op < 64; op++) {
		bool none = op == FUSE_FORGET || op == FUSE_BATCH_FORGET || op == FUSE_INTERRUPT ||
			    op == FUSE_NOTIFY_REPLY;
		ssize_t n;

		f_init();
		fc_begin(op, FC_ROOT);
		fc_put(junk, sizeof(junk));
		n = fc_send_raw(sizeof(fc_rm), 0);
		if (none) {
			ck_assert_int_eq(n, 0);
		} else {
			struct fuse_out_header oh;

			ck_assert_int_ge(n, (ssize_t)sizeof(oh));
			memcpy(&oh, fc_rm, sizeof(oh));
			ck_assert_uint_eq(oh.len, (u32)n);
			ck_assert_uint_eq(oh.unique, fc_unique);
			ck_assert_msg(oh.error < 0 || op == FUSE_INIT || op == FUSE_DESTROY ||
					      op == FUSE_STATFS || op == FUSE_LISTXATTR ||
					      op == FUSE_OPENDIR,
				      "opcode %u with junk answered %d", op, oh.error);
		}
		ck_assert_int_eq(fc_send_raw(sizeof(fc_rm), 1), -EBADMSG);
	}
	ck_assert(host_exists("file") && host_exists("dir/inner") && host_exists("fifo"));
	{
		char p[256], data[64];

		path_of(p, sizeof(p), "file");
		ck_assert_str_eq(host_read(p, data, sizeof(data)), HELLO);
	}
}
END_TEST

/* Requests longer than their arguments: the extra bytes are ignored; over the copy bound the
 * request is refused. */
START_TEST(long_and_lying)
{
	static u8 junk[16384];
	struct fuse_write_in wi;
	char buf[16];
	u64 fh;

	f_init();
	memset(junk, 'j', sizeof(junk));
	fc_begin(FUSE_GETATTR, FC_ROOT);
	fc_put(&(struct fuse_getattr_in){ 0 }, sizeof(struct fuse_getattr_in));
	fc_put(junk, 100);
	ck_assert_int_eq(fc_call(), 0);
	fc_begin(FUSE_LOOKUP, FC_ROOT);
	fc_put(junk, sizeof(junk));
	ck_assert_int_eq(fc_call(), -E2BIG);
	/* WRITE claiming more data than it carries, or more than max_write. */
	fh = open_file("file", O_RDWR);
	wi = (struct fuse_write_in){ .fh = fh, .size = 10 };
	fc_begin(FUSE_WRITE, 2);
	fc_put(&wi, sizeof(wi));
	fc_put("abc", 3);
	ck_assert_int_eq(fc_call(), -EINVAL);
	wi.size = (u32)FUSE_SRV_MAX_WRITE + 1;
	fc_begin(FUSE_WRITE, 2);
	fc_put(&wi, sizeof(wi));
	ck_assert_int_eq(fc_call(), -EINVAL);
	wi = (struct fuse_write_in){ .fh = fh, .size = 3, .offset = 1ull << 63 };
	fc_begin(FUSE_WRITE, 2);
	fc_put(&wi, sizeof(wi));
	fc_put("abc", 3);
	ck_assert_int_eq(fc_call(), -EINVAL);
	/* READ asking more than the buffers hold: what fits. */
	fc_room = 16 + 5;
	ck_assert_int_eq(f_read(fh, 0, 1000, buf), 5);
	fc_room = 0;
	ck_assert_int_eq(f_read(fh, 1ull << 63, 10, buf), -EINVAL);
	{
		char p[256], data[64];

		path_of(p, sizeof(p), "file");
		ck_assert_str_eq(host_read(p, data, sizeof(data)), HELLO);
	}
}
END_TEST

/* No room for a reply: refused before anything is done. */
START_TEST(small_room_changes_nothing)
{
	struct fuse_entry_out e;
	u64 fh;

	f_init();
	fc_room = 16 + sizeof(e) - 1;
	ck_assert_int_eq(f_mkdir(FC_ROOT, "d", 0755, &e), -EOVERFLOW);
	ck_assert_int_eq(f_create(FC_ROOT, "c", O_RDWR | O_CREAT, 0644, &e, &fh), -EOVERFLOW);
	ck_assert_int_eq(f_symlink(FC_ROOT, "s", "x", &e), -EOVERFLOW);
	ck_assert_int_eq(f_lookup(FC_ROOT, "file", &e), -EOVERFLOW);
	fc_room = 16 + sizeof(e) + 8; /* CREATE's open_out does not fit */
	ck_assert_int_eq(f_create(FC_ROOT, "c", O_RDWR | O_CREAT, 0644, &e, &fh), -EOVERFLOW);
	{
		u64 link;
		char buf[8];

		fc_room = 0;
		link = f_id(FC_ROOT, "link-in");
		fc_room = 17;
		ck_assert_int_eq(f_readlink(link, buf, sizeof(buf)), -EOVERFLOW);
	}
	fc_room = 0;
	ck_assert(!host_exists("d") && !host_exists("c") && !host_exists("s"));
	{
		/* The lookups refused counted nothing: one forget ends the one that worked. */
		u64 id = f_id(FC_ROOT, "file");
		struct fuse_attr a;

		f_forget(id, 1);
		ck_assert_int_eq(f_getattr(id, NULL, &a), -ESTALE);
	}
}
END_TEST

START_TEST(split_iovecs)
{
	char buf[64];
	u64 fh;

	t.req_chunk = 1;
	t.resp_chunk = 3;
	f_init();
	fh = open_file("file", O_RDWR);
	ck_assert_int_eq(f_write(fh, 0, "split", 5), 5);
	ck_assert_int_eq(f_read(fh, 0, sizeof(buf), buf), (ssize_t)strlen(HELLO));
	ck_assert_int_eq(memcmp(buf, "split, world", 12), 0);
	ck_assert_int_eq(f_release(fh), 0);
}
END_TEST

/* ---- snapshots ---- */

#define TAG 0x40

/* Save the server's state into b (asserted to work). */
static void save_to(struct snap_rec_buf *b)
{
	char err[256];

	*b = (struct snap_rec_buf){ 0 };
	ck_assert_msg(fuse_server_save(t.s, TAG, b, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(b->err, 0);
}

/* A new server on the share, loaded from b: 0 or the load's error (err in msg). */
static int load_from(const struct snap_rec_buf *b, bool ro, char *msg, size_t len)
{
	server_up(ro, FUSE_CACHE_AUTO, 0);
	return fuse_server_load(t.s, TAG, b->buf, b->len, msg, len);
}

START_TEST(snap_round_trip)
{
	struct snap_rec_buf b;
	struct fuse_attr a;
	struct fuse_entry_out e;
	u64 file, dir, inner, fh, dfh, gone, fh2;
	char buf[64], err[256];

	f_init();
	file = f_id(FC_ROOT, "file");
	ck_assert_uint_eq(f_id(FC_ROOT, "file"), file); /* two lookups */
	dir = f_id(FC_ROOT, "dir");
	inner = f_id(dir, "inner");
	fh = open_file("file", O_RDWR | O_APPEND);
	ck_assert_int_eq(f_opendir(dir, &dfh), 0);
	gone = f_id(FC_ROOT, "link-in");
	f_forget(gone, 1);
	ck_assert_int_eq(f_release(open_file("file", O_RDONLY)), 0); /* a stale fh's slot */
	save_to(&b);
	ck_assert_msg(load_from(&b, false, err, sizeof(err)) == 0, "%s", err);
	/* The same ids, lookup counts and handles. */
	ck_assert_int_eq(f_getattr(file, NULL, &a), 0);
	ck_assert_uint_eq(a.ino, host_ino("file"));
	ck_assert_int_eq(f_getattr(inner, NULL, &a), 0);
	ck_assert_uint_eq(a.ino, host_ino("dir/inner"));
	ck_assert_int_eq(f_getattr(gone, NULL, &a), -ESTALE);
	ck_assert_int_eq(f_write(fh, 0, "!", 1), 1); /* O_APPEND kept */
	ck_assert_int_eq(f_read(fh, 0, sizeof(buf), buf), (ssize_t)strlen(HELLO) + 1);
	ck_assert_int_eq(buf[strlen(HELLO)], '!');
	ck_assert_int_gt(f_readdir(dfh, 0, 4096, false), 0);
	ck_assert_int_eq(f_release(fh + (1ull << 32)), -EBADF);
	/* New handles and nodes do not collide with the restored ones. */
	fh2 = open_file("file", O_RDONLY);
	ck_assert_uint_ne(fh2, fh);
	ck_assert_uint_ne(fh2, dfh);
	ck_assert_int_eq(f_lookup(FC_ROOT, "fifo", &e), 0);
	ck_assert(e.nodeid != file && e.nodeid != dir && e.nodeid != inner);
	/* 4 lookups saved (2, and one per open_file) and 1 since. */
	f_forget(file, 4);
	ck_assert_int_eq(f_getattr(file, NULL, &a), 0);
	f_forget(file, 1);
	ck_assert_int_eq(f_getattr(file, NULL, &a), -ESTALE);
	ck_assert_int_eq(f_release(fh), 0);
	ck_assert_int_eq(f_releasedir(dfh), 0);
	snap_rec_free(&b);
	/* Before INIT: an empty session comes back empty. */
	server_up(false, FUSE_CACHE_AUTO, 0);
	save_to(&b);
	ck_assert_int_eq(load_from(&b, false, err, sizeof(err)), 0);
	ck_assert_int_eq(f_lookup(FC_ROOT, "file", &e), -EIO);
	snap_rec_free(&b);
}
END_TEST

START_TEST(snap_refusals)
{
	struct snap_rec_buf b = { 0 };
	char err[256], p[256];
	u64 fh, id;

	f_init();
	ck_assert_uint_gt(f_id(FC_ROOT, "dir"), 1);
	id = f_id(FC_ROOT, "file");
	fh = open_file("file", O_RDWR);
	/* An unlinked open file cannot be found again by its name. */
	ck_assert_int_eq(f_unlink(FC_ROOT, "file"), 0);
	ck_assert_int_eq(fuse_server_save(t.s, TAG, &b, err, sizeof(err)), -EOPNOTSUPP);
	ck_assert_ptr_nonnull(strstr(err, "gone"));
	snap_rec_free(&b);
	ck_assert_int_eq(f_release(fh), 0);
	f_forget(id, 2); /* the guest lets go of it: then it saves */
	/* A path gone, or another kind now, at restore. */
	save_to(&b);
	path_of(p, sizeof(p), "dir/inner");
	ck_assert_int_eq(unlink(p), 0);
	path_of(p, sizeof(p), "dir");
	ck_assert_int_eq(rmdir(p), 0);
	host_write(p, "now a file\n");
	ck_assert_int_eq(load_from(&b, false, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "is a file now"));
	/* The server is left empty. */
	ck_assert_int_eq(f_lookup(FC_ROOT, "file", NULL), -EIO);
	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(load_from(&b, false, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "gone"));
	snap_rec_free(&b);
}
END_TEST

/* Hand-made records: every field checked. */
struct h_session {
	u32 minor, flags, nnodes, nhandles;
	u64 root_dev, root_ino;
};
struct h_node {
	u64 id, nlookup;
	u32 type, reserved;
	u64 dev, ino;
};
struct h_handle {
	u64 fh, node;
	u32 flags;
	u8 dir, reserved[3];
};

static int load_built(const struct h_session *ss, const struct h_node *n, const char *path,
		      const struct h_handle *h, bool ro, char *err)
{
	struct snap_rec_buf b = { 0 };
	int ret;

	if (n) {
		u8 rec[sizeof(*n) + PATH_MAX];

		memcpy(rec, n, sizeof(*n));
		memcpy(rec + sizeof(*n), path, strlen(path));
		snap_rec_put(&b, TAG + 1, rec, sizeof(*n) + strlen(path));
	}
	snap_rec_put(&b, TAG, ss, sizeof(*ss));
	if (h)
		snap_rec_put(&b, TAG + 2, h, sizeof(*h));
	server_up(ro, FUSE_CACHE_AUTO, 0);
	ret = fuse_server_load(t.s, TAG, b.buf, b.len, err, 256);
	snap_rec_free(&b);
	return ret;
}

START_TEST(snap_hostile_records)
{
	struct stat st;
	struct h_session ss = { .minor = 31, .nnodes = 1, .nhandles = 1 };
	struct h_node n = { .id = 7, .nlookup = 1, .type = S_IFREG };
	struct h_handle h = { .fh = 1ull << 32 | 3, .node = 7, .flags = O_RDWR };
	char err[256];

	ck_assert_int_eq(stat(t.share, &st), 0);
	ss.root_dev = st.st_dev;
	ss.root_ino = st.st_ino;
	n.dev = st.st_dev;
	n.ino = host_ino("file");
	ck_assert_msg(load_built(&ss, &n, "file", &h, false, err) == 0, "%s", err);
	{
		char buf[16];

		ck_assert_int_eq(f_read(h.fh, 0, 5, buf), 5);
		ck_assert_int_eq(f_getattr(7, NULL, NULL), 0);
	}
	/* Each field broken once. */
#define BAD(expr)                                                                             \
	do {                                                                                  \
		struct h_session s2 = ss;                                                     \
		struct h_node n2 = n;                                                         \
		struct h_handle h2 = h;                                                       \
		const char *p2 = "file";                                                      \
		bool ro = false;                                                              \
		expr;                                                                         \
		ck_assert_msg(load_built(&s2, &n2, p2, &h2, ro, err) == -EINVAL, "%s loaded", \
			      #expr);                                                         \
		ck_assert_int_eq(f_getattr(FC_ROOT, NULL, NULL), -EIO);                       \
	} while (0)
	BAD(s2.minor = 30);
	BAD(s2.minor = 99);
	BAD(s2.flags = FUSE_POSIX_LOCKS);
	BAD(s2.nnodes = 2);
	BAD(s2.nnodes = 0);
	BAD(s2.nhandles = 0);
	BAD(s2.nhandles = 100000);
	BAD(s2.minor = 0);
	BAD(n2.id = 0);
	BAD(n2.id = 1);
	BAD(n2.reserved = 1);
	BAD(n2.type = S_IFDIR);
	BAD(n2.ino++);
	BAD(p2 = "../outside/secret");
	BAD(p2 = "dir/../file");
	BAD(p2 = "/file");
	BAD(p2 = "file/");
	BAD(p2 = "link-in");
	BAD(p2 = "missing");
	BAD(p2 = "");
	BAD(h2.node = 8);
	BAD(h2.fh = 3);
	BAD(h2.fh = 1ull << 32 | 70000);
	BAD(h2.flags = O_RDWR | O_TRUNC);
	BAD(h2.flags = O_ACCMODE);
	BAD(h2.dir = 1);
	BAD(h2.dir = 2);
	BAD(h2.reserved[1] = 1);
	BAD(ro = true);
	/* Cut short, or no session at all. */
	{
		struct snap_rec_buf b = { 0 };

		snap_rec_put(&b, TAG, &ss, sizeof(ss) - 1);
		server_up(false, FUSE_CACHE_AUTO, 0);
		ck_assert_int_eq(fuse_server_load(t.s, TAG, b.buf, b.len, err, sizeof(err)),
				 -EINVAL);
		ck_assert_int_eq(fuse_server_load(t.s, TAG, b.buf, 3, err, sizeof(err)), -EINVAL);
		ck_assert_int_eq(fuse_server_load(t.s, TAG, NULL, 0, err, sizeof(err)), -EINVAL);
		snap_rec_free(&b);
	}
}
END_TEST

static Suite *fuse_suite(void)
{
	Suite *s = suite_create("fuse");
	TCase *ops = tcase_create("ops"), *esc = tcase_create("escapes");
	TCase *bnd = tcase_create("bounds"), *snp = tcase_create("snapshot");

	tcase_add_checked_fixture(ops, setup, teardown);
	tcase_add_checked_fixture(esc, setup, teardown);
	tcase_add_checked_fixture(bnd, setup, teardown);
	tcase_add_test(ops, init_session);
	tcase_add_test(ops, lookup_and_getattr);
	tcase_add_test(ops, forget_counts);
	tcase_add_test(ops, read_write_release);
	tcase_add_test(ops, create_files);
	tcase_add_test(ops, posix_open_unlinked);
	tcase_add_test(ops, created_unlinked_pinned);
	tcase_add_test(ops, renames_follow_nodes);
	if (geteuid() == 0)
		tcase_add_test(ops, create_readonly_mode_as_user);
	else
		lkvm_skip("test_fuse", 1, "create_readonly_mode_as_user",
			  "needs root to become another user");
	tcase_add_test(ops, names_and_links);
	tcase_add_test(ops, setattr_ops);
	tcase_add_test(ops, readdir_and_plus);
	tcase_add_test(ops, readdir_root_dotdot);
	tcase_add_test(ops, misc_ops);
	tcase_add_test(ops, cache_modes);
	tcase_add_test(ops, split_iovecs);
	tcase_add_test(esc, symlinks_not_followed);
	tcase_add_test(esc, bad_names);
	tcase_add_test(esc, bad_nodeids_and_handles);
	tcase_add_test(esc, readonly_refuses_writes);
	tcase_add_test(bnd, handle_cap);
	tcase_add_test(bnd, malformed_framing);
	tcase_add_test(bnd, every_op_short);
	tcase_add_test(bnd, long_and_lying);
	tcase_add_test(bnd, every_op_long_and_lying);
	tcase_add_test(bnd, small_room_changes_nothing);
	suite_add_tcase(s, ops);
	suite_add_tcase(s, esc);
	tcase_add_checked_fixture(snp, setup, teardown);
	tcase_add_test(snp, snap_round_trip);
	tcase_add_test(snp, snap_refusals);
	tcase_add_test(snp, snap_hostile_records);
	suite_add_tcase(s, bnd);
	suite_add_tcase(s, snp);
	return s;
}

LKVM_CHECK_MAIN(fuse_suite)

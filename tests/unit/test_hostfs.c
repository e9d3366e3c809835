/* Unit tests of the host-file node table (virtio/hostfs.c): eviction and reopen by names, identity checks, swapped symlinks, moves out of the share, rename/unlink tracking, caps and their one warning, node memory. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdbool.h>

#include "check_main.h"
#include "lkvm/hostfs.h"

#define TREE_FILES 200
#define SMALL_CACHE 8

static struct {
	char top[64]; /* share/ and outside/ */
	char share[96], outside[96];
	struct hostfs *fs;
	int warns;
	char warn_msg[256];
} t;

static void on_warn(void *opaque, const char *msg)
{
	t.warns++;
	snprintf(t.warn_msg, sizeof(t.warn_msg), "%s", msg);
	(void)opaque;
}

static void at(char *buf, size_t len, const char *rel)
{
	snprintf(buf, len, "%s/%s", t.share, rel);
}

static void host_write(const char *rel, const char *text)
{
	char p[256];
	FILE *f;

	at(p, sizeof(p), rel);
	f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

static void host_mkdir(const char *rel)
{
	char p[256];

	at(p, sizeof(p), rel);
	ck_assert_int_eq(mkdir(p, 0755), 0);
}

static void fs_up(u32 max_nodes, u32 max_cached, u32 max_open)
{
	struct hostfs_opts o = { .max_nodes = max_nodes,
				 .max_cached = max_cached,
				 .max_open = max_open,
				 .label = "test-share",
				 .warn = on_warn };
	char err[256];

	hostfs_close(t.fs);
	t.fs = NULL;
	ck_assert_msg(hostfs_open(&t.fs, t.share, &o, err, sizeof(err)) == 0, "%s", err);
}

static void setup(void)
{
	memset(&t, 0, sizeof(t));
	strcpy(t.top, "/tmp/lkvm-hostfs-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(t.top));
	snprintf(t.share, sizeof(t.share), "%s/share", t.top);
	snprintf(t.outside, sizeof(t.outside), "%s/outside", t.top);
	ck_assert_int_eq(mkdir(t.share, 0755), 0);
	ck_assert_int_eq(mkdir(t.outside, 0755), 0);
	fs_up(0, SMALL_CACHE, 0);
}

static void teardown(void)
{
	char cmd[128];

	hostfs_close(t.fs);
	t.fs = NULL;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t.top);
	ck_assert_int_eq(system(cmd), 0);
}

/* The node at a relative path ("a/b"), walked from the root one name at a time. */
static int walk_path(const char *rel, struct hostfs_node **out, struct stat *st)
{
	struct hostfs_node *cur = hostfs_root(t.fs), *next;
	char buf[PATH_MAX], *save = NULL, *name;
	int ret = 0;

	hostfs_get(cur);
	snprintf(buf, sizeof(buf), "%s", rel);
	for (name = strtok_r(buf, "/", &save); name; name = strtok_r(NULL, "/", &save)) {
		ret = hostfs_walk(t.fs, cur, name, &next, st);
		hostfs_put(t.fs, cur);
		if (ret)
			return ret;
		cur = next;
	}
	*out = cur;
	return 0;
}

static ino_t host_ino(const char *rel)
{
	char p[256];
	struct stat st;

	at(p, sizeof(p), rel);
	ck_assert_int_eq(lstat(p, &st), 0);
	return st.st_ino;
}

/* The node's file read through an open of it (its first bytes). */
static void read_node(struct hostfs_node *n, char *buf, size_t len)
{
	int fd = hostfs_open_io(t.fs, n, O_RDONLY);
	ssize_t got;

	ck_assert_int_ge(fd, 0);
	got = read(fd, buf, len - 1);
	ck_assert_int_ge(got, 0);
	buf[got] = '\0';
	hostfs_release_io(t.fs, n, fd);
}

/* 200 files in 10 directories, all walked to, the cache at 8: after eviction every one is
 * reopened by its names and is the same file. */
START_TEST(eviction_keeps_every_node_reachable)
{
	struct hostfs_node *n[TREE_FILES];
	struct hostfs_stats st;
	struct stat s;
	char rel[64], buf[64];

	for (int d = 0; d < 10; d++) {
		snprintf(rel, sizeof(rel), "d%d", d);
		host_mkdir(rel);
	}
	for (int i = 0; i < TREE_FILES; i++) {
		snprintf(rel, sizeof(rel), "d%d/f%d", i % 10, i);
		snprintf(buf, sizeof(buf), "file %d\n", i);
		host_write(rel, buf);
		ck_assert_int_eq(walk_path(rel, &n[i], &s), 0);
		ck_assert_uint_eq(s.st_ino, host_ino(rel));
		hostfs_trim(t.fs);
	}
	hostfs_stats(t.fs, &st);
	ck_assert_uint_le(st.cached, SMALL_CACHE);
	ck_assert_uint_eq(st.nodes, 1 + 10 + TREE_FILES);
	for (int i = 0; i < TREE_FILES; i++) {
		char want[64];

		snprintf(rel, sizeof(rel), "d%d/f%d", i % 10, i);
		ck_assert_int_eq(hostfs_stat(t.fs, n[i], &s), 0);
		ck_assert_uint_eq(s.st_ino, host_ino(rel));
		read_node(n[i], buf, sizeof(buf));
		snprintf(want, sizeof(want), "file %d\n", i);
		ck_assert_str_eq(buf, want);
		hostfs_trim(t.fs);
	}
	hostfs_stats(t.fs, &st);
	ck_assert_uint_le(st.cached, SMALL_CACHE);
	ck_assert_uint_ge(st.reopens, TREE_FILES - SMALL_CACHE);
	ck_assert_uint_eq(st.stale, 0);
	for (int i = 0; i < TREE_FILES; i++)
		hostfs_put(t.fs, n[i]);
	hostfs_stats(t.fs, &st);
	ck_assert_uint_eq(st.nodes, 1); /* the root alone: every name freed with its node */
}
END_TEST

/* Push every unpinned node out of the cache: hold enough other files, trim, let them go. */
static void evict(void)
{
	struct hostfs_node *o[2 * SMALL_CACHE];
	char rel[32], p[256];

	for (int i = 0; i < 2 * SMALL_CACHE; i++) {
		struct stat s;
		FILE *f;

		snprintf(rel, sizeof(rel), "filler%d", i);
		at(p, sizeof(p), rel);
		f = fopen(p, "a");
		ck_assert_ptr_nonnull(f);
		fclose(f);
		ck_assert_int_eq(walk_path(rel, &o[i], &s), 0);
	}
	hostfs_trim(t.fs);
	for (int i = 0; i < 2 * SMALL_CACHE; i++)
		hostfs_put(t.fs, o[i]);
}

START_TEST(replaced_file_is_stale)
{
	struct hostfs_node *n;
	struct hostfs_stats st;
	struct stat s;
	char p[256], q[256];

	host_mkdir("dir");
	host_write("dir/victim", "the file walked to\n");
	ck_assert_int_eq(walk_path("dir/victim", &n, &s), 0);
	evict();
	/* Another file at the same path (a new inode: the old one still exists elsewhere, so
	 * its number cannot be reused). */
	at(p, sizeof(p), "dir/victim");
	snprintf(q, sizeof(q), "%s/kept", t.outside);
	ck_assert_int_eq(rename(p, q), 0);
	host_write("dir/victim", "ANOTHER FILE\n");
	ck_assert_int_eq(hostfs_stat(t.fs, n, &s), -ESTALE);
	ck_assert_int_eq(hostfs_open_io(t.fs, n, O_RDONLY), -ESTALE);
	hostfs_stats(t.fs, &st);
	ck_assert_uint_ge(st.stale, 1);
	hostfs_put(t.fs, n);
}
END_TEST

/*
 * A file a handle names is removed and its node evicted; the host may then give the freed inode
 * number to a new file at the same name (ext4 does so at once): a walk to that name must make a
 * new node, and the old one answer -ESTALE, never with the new file. Removed on the host (the
 * node keeps its name), then by the guest (hostfs_unlinked: the name dropped). The file handle
 * (name_to_handle_at's generation) tells the two apart.
 */
START_TEST(reused_inode_number_is_another_file)
{
	for (int by_guest = 0; by_guest < 2; by_guest++) {
		struct hostfs_node *n, *m;
		struct stat s;
		char p[256], buf[16];
		ino_t ino;
		int tries;

		host_write("victim", "old\n");
		ck_assert_int_eq(walk_path("victim", &n, &s), 0);
		ino = s.st_ino;
		evict();
		at(p, sizeof(p), "victim");
		ck_assert_int_eq(unlink(p), 0);
		if (by_guest)
			hostfs_unlinked(t.fs, hostfs_root(t.fs), "victim");
		for (tries = 0; tries < 64; tries++) {
			host_write("victim", "NEW\n");
			if (host_ino("victim") == ino)
				break;
			ck_assert_int_eq(unlink(p), 0);
		}
		ck_assert_msg(tries < 64, "the host did not reuse inode %lu", (unsigned long)ino);
		ck_assert_int_eq(walk_path("victim", &m, &s), 0);
		ck_assert_ptr_ne(m, n);
		ck_assert_uint_ne(m->id, n->id);
		ck_assert_int_eq(hostfs_stat(t.fs, n, &s), -ESTALE);
		read_node(m, buf, sizeof(buf));
		ck_assert_str_eq(buf, "NEW\n");
		hostfs_put(t.fs, m);
		hostfs_put(t.fs, n);
		ck_assert_int_eq(unlink(p), 0);
	}
}
END_TEST

/* Does this file system give a freed inode number to the next file made (and have handles)? */
static bool inode_numbers_reused(void)
{
	char dir[] = "/tmp/lkvm-hostfs-reuse-XXXXXX", p[64];
	struct stat a, b;
	bool yes = false;
	int fd;

	if (!mkdtemp(dir))
		return false;
	snprintf(p, sizeof(p), "%s/f", dir);
	if ((fd = open(p, O_CREAT | O_WRONLY, 0600)) >= 0 && !fstat(fd, &a) && !close(fd) &&
	    !unlink(p) && (fd = open(p, O_CREAT | O_WRONLY, 0600)) >= 0 && !fstat(fd, &b)) {
		struct {
			struct file_handle fh;
			unsigned char h[MAX_HANDLE_SZ];
		} h = { .fh.handle_bytes = MAX_HANDLE_SZ };
		int mid;

		yes = a.st_ino == b.st_ino &&
		      !name_to_handle_at(fd, "", &h.fh, &mid, AT_EMPTY_PATH);
		close(fd);
	}
	unlink(p);
	rmdir(dir);
	return yes;
}

START_TEST(swapped_symlink_parent_not_followed)
{
	struct hostfs_node *n;
	struct stat s;
	char p[256], q[256], secret[256];

	host_mkdir("dir");
	host_write("dir/file", "inside\n");
	ck_assert_int_eq(walk_path("dir/file", &n, &s), 0);
	evict();
	/* dir becomes a symlink to outside/, which holds a "file" of its own */
	snprintf(secret, sizeof(secret), "%s/file", t.outside);
	{
		FILE *f = fopen(secret, "w");

		ck_assert_ptr_nonnull(f);
		fputs("SECRET\n", f);
		fclose(f);
	}
	at(p, sizeof(p), "dir");
	snprintf(q, sizeof(q), "%s/olddir", t.top);
	ck_assert_int_eq(rename(p, q), 0);
	ck_assert_int_eq(symlink(t.outside, p), 0);
	ck_assert_int_eq(hostfs_stat(t.fs, n, &s), -ESTALE);
	ck_assert_int_lt(hostfs_open_io(t.fs, n, O_RDONLY), 0);
	hostfs_put(t.fs, n);
}
END_TEST

START_TEST(moved_out_of_share_not_reached)
{
	struct hostfs_node *d, *up;
	struct stat s;
	char p[256], q[256];

	host_mkdir("dir");
	host_mkdir("dir/sub");
	ck_assert_int_eq(walk_path("dir/sub", &d, &s), 0);
	evict();
	at(p, sizeof(p), "dir");
	snprintf(q, sizeof(q), "%s/dir", t.outside);
	ck_assert_int_eq(rename(p, q), 0);
	ck_assert_int_eq(hostfs_stat(t.fs, d, &s), -ESTALE);
	ck_assert_int_eq(hostfs_walk(t.fs, d, "..", &up, &s), -ESTALE);
	hostfs_put(t.fs, d);
	/* Cached, moved out: ".." from it is refused (not beneath the root any more). */
	ck_assert_int_eq(rename(q, p), 0);
	ck_assert_int_eq(walk_path("dir/sub", &d, &s), 0);
	ck_assert_int_eq(rename(p, q), 0);
	ck_assert_int_eq(hostfs_walk(t.fs, d, "..", &up, &s), -EACCES);
	hostfs_put(t.fs, d);
}
END_TEST

START_TEST(rename_and_unlink_tracked)
{
	struct hostfs_node *a, *b, *dir, *root = hostfs_root(t.fs), *over;
	struct stat s;
	char p[256], q[256], path[PATH_MAX];

	host_mkdir("dir");
	host_write("a", "A\n");
	host_write("dir/b", "B\n");
	ck_assert_int_eq(walk_path("a", &a, &s), 0);
	ck_assert_int_eq(walk_path("dir", &dir, &s), 0);
	ck_assert_int_eq(walk_path("dir/b", &b, &s), 0);
	/* the guest renames a over dir/b: a's node is dir/b now, b's has no name */
	at(p, sizeof(p), "a");
	at(q, sizeof(q), "dir/b");
	ck_assert_int_eq(rename(p, q), 0);
	hostfs_renamed(t.fs, root, "a", dir, "b");
	ck_assert_int_eq(hostfs_path(t.fs, a, path, sizeof(path)), 5);
	ck_assert_str_eq(path, "dir/b");
	ck_assert_int_eq(hostfs_path(t.fs, b, path, sizeof(path)), -ESTALE);
	evict();
	ck_assert_int_eq(hostfs_stat(t.fs, a, &s), 0);
	ck_assert_uint_eq(s.st_ino, host_ino("dir/b"));
	ck_assert_int_eq(hostfs_stat(t.fs, b, &s), -ESTALE);
	/* a walk reaching a known node by another name gives it that name (host-side rename) */
	at(p, sizeof(p), "dir");
	at(q, sizeof(q), "moved");
	ck_assert_int_eq(rename(p, q), 0);
	ck_assert_int_eq(walk_path("moved", &over, &s), 0);
	ck_assert_ptr_eq(over, dir);
	ck_assert_int_eq(hostfs_path(t.fs, a, path, sizeof(path)), 7);
	ck_assert_str_eq(path, "moved/b");
	ck_assert_int_eq(hostfs_path(t.fs, a, path, 7), -ENAMETOOLONG);
	/* unlink: the name goes at once */
	at(p, sizeof(p), "moved/b");
	ck_assert_int_eq(unlink(p), 0);
	hostfs_unlinked(t.fs, dir, "b");
	ck_assert_int_eq(hostfs_path(t.fs, a, path, sizeof(path)), -ESTALE);
	hostfs_put(t.fs, over);
	hostfs_put(t.fs, a);
	hostfs_put(t.fs, b);
	hostfs_put(t.fs, dir);
}
END_TEST

START_TEST(open_unlink_fstat)
{
	struct hostfs_node *n;
	struct stat s;
	char p[256];
	int fd;

	host_write("f", "data\n");
	ck_assert_int_eq(walk_path("f", &n, &s), 0);
	fd = hostfs_open_io(t.fs, n, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	at(p, sizeof(p), "f");
	ck_assert_int_eq(unlink(p), 0);
	hostfs_unlinked(t.fs, hostfs_root(t.fs), "f");
	evict(); /* an open node is pinned: not evicted */
	ck_assert_int_eq(hostfs_stat(t.fs, n, &s), 0);
	ck_assert_uint_eq(s.st_nlink, 0);
	ck_assert_int_eq(s.st_size, 5);
	hostfs_release_io(t.fs, n, fd);
	evict();
	ck_assert_int_eq(hostfs_stat(t.fs, n, &s), -ESTALE);
	hostfs_put(t.fs, n);
}
END_TEST

START_TEST(node_cap_warns_once)
{
	struct hostfs_node *n[8], *x;
	struct hostfs_stats st;
	struct stat s;
	char rel[32];
	int got = 0;

	fs_up(6, SMALL_CACHE, 2);
	for (int i = 0; i < 8; i++) {
		snprintf(rel, sizeof(rel), "f%d", i);
		host_write(rel, "x");
	}
	for (int i = 0; i < 8; i++) {
		snprintf(rel, sizeof(rel), "f%d", i);
		int ret = walk_path(rel, &n[got], &s);

		if (ret) {
			ck_assert_int_eq(ret, -ENFILE);
			continue;
		}
		got++;
	}
	ck_assert_int_eq(got, 5); /* the root is the sixth */
	ck_assert_int_eq(t.warns, 1);
	ck_assert_msg(strstr(t.warn_msg, "test-share") && strstr(t.warn_msg, "6"), "%s",
		      t.warn_msg);
	hostfs_stats(t.fs, &st);
	ck_assert_uint_eq(st.cap_hits[HOSTFS_CAP_NODES], 3);
	/* a known file is still reached at the cap: no new node */
	ck_assert_int_eq(walk_path("f0", &x, &s), 0);
	ck_assert_ptr_eq(x, n[0]);
	hostfs_put(t.fs, x);
	/* the open cap: its own warning, once */
	int fd0 = hostfs_open_io(t.fs, n[0], O_RDONLY), fd1 = hostfs_open_io(t.fs, n[1], O_RDONLY);

	ck_assert_int_ge(fd0, 0);
	ck_assert_int_ge(fd1, 0);
	ck_assert_int_eq(hostfs_open_io(t.fs, n[2], O_RDONLY), -ENFILE);
	ck_assert_int_eq(hostfs_open_io(t.fs, n[2], O_RDONLY), -ENFILE);
	ck_assert_int_eq(t.warns, 2);
	hostfs_stats(t.fs, &st);
	ck_assert_uint_eq(st.cap_hits[HOSTFS_CAP_OPEN], 2);
	ck_assert_uint_eq(st.open, 2);
	hostfs_release_io(t.fs, n[0], fd0);
	hostfs_release_io(t.fs, n[1], fd1);
	for (int i = 0; i < got; i++)
		hostfs_put(t.fs, n[i]);
	hostfs_stats(t.fs, &st);
	ck_assert_uint_eq(st.nodes, 1);
	ck_assert_uint_eq(st.open, 0);
}
END_TEST

/* A node costs HOSTFS_NODE_BYTES and its name: a path 4000 bytes deep costs its names, not
 * a path per node. */
START_TEST(node_memory)
{
	enum { DEPTH = 2000 }; /* "a/" 2000 times: a 4000-byte path */
	struct hostfs_node *cur = hostfs_root(t.fs), *next;
	struct mallinfo2 before, after;
	char path[PATH_MAX];
	struct stat s;
	size_t used;
	int dfd;

	ck_assert_uint_le(HOSTFS_NODE_BYTES, 128);
	at(path, sizeof(path), "");
	dfd = open(path, O_PATH | O_DIRECTORY);
	for (int i = 0; i < DEPTH; i++) {
		int nfd;

		ck_assert_int_eq(mkdirat(dfd, "a", 0755), 0);
		nfd = openat(dfd, "a", O_PATH | O_DIRECTORY);
		ck_assert_int_ge(nfd, 0);
		close(dfd);
		dfd = nfd;
	}
	close(dfd);
	hostfs_get(cur);
	before = mallinfo2();
	for (int i = 0; i < DEPTH; i++) {
		ck_assert_int_eq(hostfs_walk(t.fs, cur, "a", &next, &s), 0);
		hostfs_put(t.fs, cur);
		cur = next;
		hostfs_trim(t.fs);
	}
	after = mallinfo2();
	used = after.uordblks - before.uordblks;
	/* 2000 nodes, each its struct, a 2-byte name with malloc's overhead and its share of
	 * three hash tables' buckets: far from 2000 paths of up to 4 KiB (8 MB). */
	if (before.uordblks) /* 0 under ASan, whose allocator mallinfo does not see */
		ck_assert_msg(used <= (size_t)DEPTH * (HOSTFS_NODE_BYTES + 32 + 3 * 2 * 8),
			      "%zu bytes for %d nodes", used, DEPTH);
	ck_assert_int_eq(hostfs_path(t.fs, cur, path, sizeof(path)), 2 * DEPTH - 1);
	/* the deepest, evicted, reopened from the root by 2000 names */
	ck_assert_int_eq(hostfs_stat(t.fs, cur, &s), 0);
	hostfs_put(t.fs, cur);
}
END_TEST

/* A walk that reaches a known directory by a name beneath itself (a bind mount of a directory
 * inside itself) must not make the names a cycle. Making that mount needs privileges, so the
 * check is driven through hostfs_renamed, which renames through the same code as a walk. */
START_TEST(reparent_cycle_refused)
{
	struct hostfs_node *a, *b;
	struct stat s;
	char path[PATH_MAX];

	host_mkdir("a");
	host_mkdir("a/b");
	ck_assert_int_eq(walk_path("a", &a, &s), 0);
	ck_assert_int_eq(walk_path("a/b", &b, &s), 0);
	/* a named as a child of b (what a walk a/b/x reaching a's inode would ask) */
	hostfs_renamed(t.fs, hostfs_root(t.fs), "a", b, "x");
	ck_assert_int_eq(hostfs_path(t.fs, a, path, sizeof(path)), 1);
	ck_assert_str_eq(path, "a");
	ck_assert_int_eq(hostfs_path(t.fs, b, path, sizeof(path)), 3);
	hostfs_put(t.fs, b);
	hostfs_put(t.fs, a);
}
END_TEST

/* A mount namespace of this process's own (as root, or in a user namespace): 0 or -errno. */
static int own_mount_ns(void)
{
	if (unshare(CLONE_NEWNS) < 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
		return -errno;
	return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ? -errno : 0;
}

/* Can this host give a test a mount namespace? (In a child: this process stays as it is.) */
static bool can_bind_mount(void)
{
	int status;
	pid_t pid = fork();

	if (pid == 0)
		_exit(own_mount_ns() ? 1 : 0);
	return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	       !WEXITSTATUS(status);
}

/* The cycle check of bind_mount_cycle, in a child with its own mount namespace: a/b/c is a bind
 * mount of a, so walking a, b, c reaches a's own inode again. Exit status: 0 passed, else the
 * number of the check that failed, in order. */
static int cycle_child(void)
{
	struct hostfs_node *a, *c, *c2;
	char p[256], q[256], path[PATH_MAX];
	struct stat s;

	at(p, sizeof(p), "a");
	at(q, sizeof(q), "a/b/c");
	if (own_mount_ns() || mount(p, q, NULL, MS_BIND, NULL))
		return 1;
	fs_up(0, SMALL_CACHE, 0); /* its root in this namespace, where the bind mount is */
	if (walk_path("a", &a, &s) || walk_path("a/b/c", &c, &s))
		return 2;
	if (c != a) /* the same host file: the same node */
		return 3;
	/* a keeps its name: named c beneath b, it would be its own ancestor */
	if (hostfs_path(t.fs, a, path, sizeof(path)) != 1 || strcmp(path, "a"))
		return 4;
	if (walk_path("a/b/c/b/c/b/c", &c2, &s) || c2 != a)
		return 5;
	evict();
	if (hostfs_stat(t.fs, a, &s) || hostfs_path(t.fs, a, path, sizeof(path)) != 1)
		return 6;
	hostfs_put(t.fs, c2);
	hostfs_put(t.fs, c);
	hostfs_put(t.fs, a);
	return 0;
}

/* A bind mount of a directory inside itself: a walk through it reaches a known node by a name
 * beneath that node, which must not take it (names would be a cycle: paths, reopens and frees
 * would never end). */
START_TEST(bind_mount_cycle)
{
	int status;
	pid_t pid;

	host_mkdir("a");
	host_mkdir("a/b");
	host_mkdir("a/b/c");
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		alarm(30); /* a cycle would loop for ever: the child ends all the same */
		_exit(cycle_child());
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && !WEXITSTATUS(status),
		      "check %d of cycle_child failed (status 0x%x)", WEXITSTATUS(status), status);
}
END_TEST

START_TEST(set_id_and_find)
{
	struct hostfs_node *a, *b;
	struct stat s;

	host_write("a", "");
	host_write("b", "");
	ck_assert_int_eq(walk_path("a", &a, &s), 0);
	ck_assert_int_eq(walk_path("b", &b, &s), 0);
	ck_assert_ptr_eq(hostfs_find(t.fs, HOSTFS_ROOT_ID), hostfs_root(t.fs));
	ck_assert_int_eq(hostfs_set_id(t.fs, a, 1000), 0);
	ck_assert_ptr_eq(hostfs_find(t.fs, 1000), a);
	ck_assert_int_eq(hostfs_set_id(t.fs, b, 1000), -EEXIST);
	ck_assert_int_eq(hostfs_set_id(t.fs, b, HOSTFS_ROOT_ID), -EINVAL);
	ck_assert_int_eq(hostfs_set_id(t.fs, b, 0), -EINVAL);
	ck_assert_ptr_null(hostfs_find(t.fs, 999999));
	hostfs_put(t.fs, b);
	host_write("c", "");
	ck_assert_int_eq(walk_path("c", &b, &s), 0);
	ck_assert_uint_gt(b->id, 1000); /* later ids above every id given */
	ck_assert_int_eq(hostfs_walk(t.fs, a, "x", &b, &s), -ENOTDIR);
	ck_assert_int_eq(hostfs_walk(t.fs, hostfs_root(t.fs), "a/b", &b, &s), -EINVAL);
	ck_assert_int_eq(hostfs_walk(t.fs, hostfs_root(t.fs), ".", &b, &s), -EINVAL);
	hostfs_reset(t.fs);
	ck_assert_ptr_null(hostfs_find(t.fs, 1000));
}
END_TEST

static Suite *hostfs_suite(void)
{
	Suite *s = suite_create("hostfs");
	TCase *tc = tcase_create("table");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, eviction_keeps_every_node_reachable);
	tcase_add_test(tc, replaced_file_is_stale);
	tcase_add_test(tc, swapped_symlink_parent_not_followed);
	tcase_add_test(tc, moved_out_of_share_not_reached);
	tcase_add_test(tc, rename_and_unlink_tracked);
	tcase_add_test(tc, open_unlink_fstat);
	tcase_add_test(tc, node_cap_warns_once);
	tcase_add_test(tc, node_memory);
	tcase_add_test(tc, reparent_cycle_refused);
	tcase_add_test(tc, set_id_and_find);
	if (inode_numbers_reused())
		tcase_add_test(tc, reused_inode_number_is_another_file);
	else
		lkvm_skip("test_hostfs", 1, "reused_inode_number_is_another_file",
			  "/tmp's file system does not reuse a freed inode number at once");
	if (can_bind_mount())
		tcase_add_test(tc, bind_mount_cycle);
	else
		lkvm_skip("test_hostfs", 1, "bind_mount_cycle", "no mount namespace here");
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(hostfs_suite)

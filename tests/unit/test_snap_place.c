/* Unit tests for snap/place.c (lkvm snapshot's FILE): exactly the bytes written at PATH, or an error and PATH as it was, whatever another process does to the names in the directory between the write and the rename. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/snap.h"

static char dir[] = "/tmp/test_snap_place-XXXXXX";
static char path[300], err[512];

static void setup(void)
{
	strcpy(dir, "/tmp/test_snap_place-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	/* As the finding's directory: anyone may write, no sticky bit. */
	ck_assert_int_eq(chmod(dir, 0777), 0);
	snprintf(path, sizeof(path), "%s/vm.snap", dir);
}

static void teardown(void)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static void put(const char *file, const char *text)
{
	FILE *f = fopen(file, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

/* The file's whole content (up to 63 bytes). */
static const char *content(const char *file)
{
	static char buf[64];
	int fd = open(file, O_RDONLY);
	ssize_t n;

	ck_assert_int_ge(fd, 0);
	n = read(fd, buf, sizeof(buf) - 1);
	ck_assert_int_ge(n, 0);
	buf[n] = '\0';
	close(fd);
	return buf;
}

/* The names in dir but . and .. (joined by spaces, sorted). */
static const char *names(void)
{
	static char out[1024];
	struct dirent **list;
	int n = scandir(dir, &list, NULL, alphasort);

	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		if (strcmp(list[i]->d_name, ".") && strcmp(list[i]->d_name, ".."))
			snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s",
				 *out ? " " : "", list[i]->d_name);
		free(list[i]);
	}
	free(list);
	return out;
}

static void write_ours(struct snap_place *p)
{
	ck_assert_int_eq(snap_place_open(p, path, err, sizeof(err)), 0);
	ck_assert_int_eq(write(p->fd, "ours", 4), 4);
}

START_TEST(placed_whole)
{
	struct snap_place p;
	struct stat st;

	put(path, "old");
	write_ours(&p);
	ck_assert_str_eq(content(path), "old"); /* PATH untouched until the commit */
	ck_assert_int_eq(snap_place_commit(&p, NULL, NULL, err, sizeof(err)), 0);
	snap_place_close(&p);
	ck_assert_str_eq(content(path), "ours");
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
	ck_assert_str_eq(names(), "vm.snap"); /* nothing left beside it */
	/* Dropped without a commit: PATH as it was, nothing left. */
	write_ours(&p);
	snap_place_close(&p);
	ck_assert_str_eq(content(path), "ours");
	ck_assert_str_eq(names(), "vm.snap");
	ck_assert_int_eq(snap_place_open(&p, "/nonexistent/dir/x.snap", err, sizeof(err)), -ENOENT);
	ck_assert_str_eq(err,
			 "snapshot /nonexistent/dir/x.snap: cannot create a file beside it: No "
			 "such file or directory");
	ck_assert_int_eq(snap_place_open(&p, "x/", err, sizeof(err)), -EINVAL);
}
END_TEST

/* What another user can do in a directory it may write without the sticky bit: rename the name
 * of the directory the file is in away and put a directory of its own, holding its own file
 * under the file's name, in its place. */
static void swap_directory(void *arg)
{
	struct snap_place *p = arg;
	char from[600], to[700];

	snprintf(from, sizeof(from), "%s/%s", dir, p->sub);
	snprintf(to, sizeof(to), "%s/moved-away", dir);
	ck_assert_int_eq(rename(from, to), 0);
	ck_assert_int_eq(mkdir(from, 0777), 0);
	snprintf(to, sizeof(to), "%s/snapshot", from);
	put(to, "theirs");
}

START_TEST(directory_swapped)
{
	struct snap_place p;

	put(path, "old");
	write_ours(&p);
	ck_assert_int_eq(snap_place_commit(&p, swap_directory, &p, err, sizeof(err)), 0);
	snap_place_close(&p);
	/* The rename went through the descriptor of our directory: our bytes at PATH. */
	ck_assert_str_eq(content(path), "ours");
}
END_TEST

/* What only this user (or root) can do: replace the file inside the private directory. */
static void swap_file(void *arg)
{
	struct snap_place *p = arg;
	char theirs[300], to[600];

	snprintf(theirs, sizeof(theirs), "%s/theirs", dir);
	put(theirs, "theirs");
	snprintf(to, sizeof(to), "%s/%s/snapshot", dir, p->sub);
	ck_assert_int_eq(rename(theirs, to), 0);
}

START_TEST(file_swapped)
{
	struct snap_place p;

	put(path, "old");
	write_ours(&p);
	ck_assert_int_eq(snap_place_commit(&p, swap_file, &p, err, sizeof(err)), -ESTALE);
	ck_assert_str_eq(err + strlen("snapshot ") + strlen(path),
			 ": not saved: the file written was replaced before it was put in place");
	snap_place_close(&p);
	ck_assert_str_eq(content(path), "old");
	ck_assert_str_eq(names(), "vm.snap");
}
END_TEST

static Suite *place_suite(void)
{
	Suite *s = suite_create("snap-place");
	TCase *tc = tcase_create("place");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, placed_whole);
	tcase_add_test(tc, directory_swapped);
	tcase_add_test(tc, file_swapped);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(place_suite)

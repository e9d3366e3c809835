/* Unit tests of the disk backends (disk.h): raw reads and writes, snapshot=on's overlay (copy-up, reads that mix the overlay and the image, the image never written, bounds, read-only). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/disk.h"

#define IMG_BYTES (1ULL << 20)

static char path[64];

static u8 pattern(u64 off)
{
	return (u8)(off * 7 + off / 512 * 13 + 1);
}

static void make_image(void)
{
	u8 *buf = malloc(IMG_BYTES);
	int fd;

	ck_assert_ptr_nonnull(buf);
	for (u64 i = 0; i < IMG_BYTES; i++)
		buf[i] = pattern(i);
	strcpy(path, "/var/tmp/lkvm-disk-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, buf, IMG_BYTES, 0), (ssize_t)IMG_BYTES);
	close(fd);
	free(buf);
}

static void setup(void)
{
	make_image();
}

static void teardown(void)
{
	unlink(path);
}

static struct disk *open_disk(bool ro, bool snapshot)
{
	struct disk_opts o = { .path = path, .ro = ro, .snapshot = snapshot };
	struct disk *d = NULL;
	char err[256] = "";
	int ret = disk_open(&o, &d, err, sizeof(err));

	ck_assert_msg(ret == 0, "disk_open: %d %s", ret, err);
	return d;
}

static int rd(struct disk *d, u64 off, void *buf, u64 len)
{
	struct iovec v = { buf, len };

	return disk_read(d, &v, 1, off, len);
}

/* Written in two iovecs, to cross the slicing of a request at cluster boundaries. */
static int wr(struct disk *d, u64 off, const void *buf, u64 len)
{
	struct iovec v[2] = { { (void *)buf, len / 2 }, { (u8 *)buf + len / 2, len - len / 2 } };

	return disk_write(d, v, 2, off, len);
}

static void check_pattern(struct disk *d, u64 off, u64 len)
{
	u8 *buf = malloc(len);

	ck_assert_int_eq(rd(d, off, buf, len), 0);
	for (u64 i = 0; i < len; i++)
		ck_assert_msg(buf[i] == pattern(off + i), "byte %llu",
			      (unsigned long long)(off + i));
	free(buf);
}

static u64 file_sum(void)
{
	u8 buf[4096];
	u64 sum = 0;
	int fd = open(path, O_RDONLY);
	ssize_t n;

	ck_assert_int_ge(fd, 0);
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < n; i++)
			sum = sum * 31 + buf[i];
	close(fd);
	return sum;
}

START_TEST(test_raw_rw)
{
	struct disk *d = open_disk(false, false);
	u8 w[1000], r[1000];

	ck_assert_str_eq(disk_format(d), "raw");
	ck_assert_uint_eq(d->size, IMG_BYTES);
	check_pattern(d, 0, 70000);
	memset(w, 0xab, sizeof(w));
	ck_assert_int_eq(wr(d, 5000, w, sizeof(w)), 0);
	ck_assert_int_eq(disk_flush(d), 0);
	ck_assert_int_eq(rd(d, 5000, r, sizeof(r)), 0);
	ck_assert_mem_eq(r, w, sizeof(w));
	ck_assert_int_eq(rd(d, IMG_BYTES - 10, r, 11), -EINVAL);
	ck_assert_int_eq(rd(d, ~0ULL - 5, r, 10), -EINVAL);
	disk_close(d);
}
END_TEST

/* Writes land in the overlay only: read back through the disk, around them the image's bytes,
 * and the image file is what it was; a second disk on it sees none of them. */
START_TEST(test_overlay_private)
{
	u64 before = file_sum();
	struct disk *d = open_disk(false, true), *d2 = open_disk(false, true);
	u64 offs[] = { 0, 65536 - 700, 3 * 65536 + 100, IMG_BYTES - 1400 };
	u8 w[1400], r[1400];

	ck_assert_str_eq(disk_format(d), "overlay");
	for (unsigned k = 0; k < ARRAY_SIZE(offs); k++) {
		memset(w, 0x10 + k, sizeof(w));
		ck_assert_int_eq(wr(d, offs[k], w, sizeof(w)), 0);
	}
	/* A second write into a cluster already copied up. */
	memset(w, 0x77, 100);
	ck_assert_int_eq(wr(d, 3 * 65536 + 2000, w, 100), 0);
	ck_assert_int_eq(disk_flush(d), 0);
	for (unsigned k = 0; k < ARRAY_SIZE(offs); k++) {
		memset(w, 0x10 + k, sizeof(w));
		ck_assert_int_eq(rd(d, offs[k], r, sizeof(r)), 0);
		ck_assert_mem_eq(r, w, sizeof(w));
	}
	ck_assert_int_eq(rd(d, 3 * 65536 + 2000, r, 100), 0);
	memset(w, 0x77, 100);
	ck_assert_mem_eq(r, w, 100);
	/* The copied-up clusters keep the image's bytes around what was written. */
	check_pattern(d, 1400, 65536 - 700 - 1400);
	check_pattern(d, 2 * 65536, 65536 + 100);
	check_pattern(d, 3 * 65536 + 1500, 500);
	check_pattern(d, 3 * 65536 + 2100, 65536);
	check_pattern(d2, 0, IMG_BYTES);
	disk_close(d);
	disk_close(d2);
	ck_assert_uint_eq(file_sum(), before);
}
END_TEST

START_TEST(test_overlay_ro_and_bounds)
{
	struct disk *d = open_disk(true, true);
	u8 w[512] = { 0 };

	ck_assert_int_eq(wr(d, 0, w, sizeof(w)), -EROFS);
	disk_close(d);
	d = open_disk(false, true);
	ck_assert_int_eq(wr(d, IMG_BYTES - 256, w, sizeof(w)), -EINVAL);
	disk_close(d);
}
END_TEST

/* The overlay file is made in $TMPDIR: one that cannot hold it is a one-line error. */
START_TEST(test_overlay_tmpdir)
{
	struct disk_opts o = { .path = path, .snapshot = true };
	struct disk *d = NULL;
	char err[256] = "";

	setenv("TMPDIR", "/nonexistent-lkvm", 1);
	ck_assert_int_lt(disk_open(&o, &d, err, sizeof(err)), 0);
	unsetenv("TMPDIR");
	ck_assert_ptr_null(d);
	ck_assert_msg(strstr(err, "/nonexistent-lkvm"), "%s", err);
}
END_TEST

static Suite *disk_suite(void)
{
	Suite *s = suite_create("disk");
	TCase *tc = tcase_create("disk");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_raw_rw);
	tcase_add_test(tc, test_overlay_private);
	tcase_add_test(tc, test_overlay_ro_and_bounds);
	tcase_add_test(tc, test_overlay_tmpdir);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(disk_suite)

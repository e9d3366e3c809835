/* Unit tests of the qcow2 backend against images qemu-img makes (reads equal to the raw source, writes that qemu-img check finds clean and convert reads back, backing files and where they may be) and hostile images patched by hand (lying sizes, offsets past the end, overlapping tables, bad refcounts, backing loops, refused features). */
#include <endian.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/disk.h"

#define IMG_BYTES (1ULL << 20)

static char dir[64];

static u8 pattern(u64 off)
{
	return (u8)(off * 7 + off / 512 * 13 + 1);
}

/* A command that must succeed (qemu-img: make check installs it; its absence is a failure). */
static void sh(const char *fmt, ...) __printf(1, 2);
static void sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	rc = system(cmd);
	ck_assert_msg(rc == 0,
		      "'%s' failed (%d): qemu-img comes with qemu-utils (scripts/deps.sh test)",
		      cmd, rc);
}

static void setup(void)
{
	u8 *buf = malloc(IMG_BYTES);
	char p[128];
	int fd;

	ck_assert_msg(system("qemu-img --version >/dev/null 2>&1") == 0,
		      "qemu-img missing: install qemu-utils (scripts/deps.sh test)");
	strcpy(dir, "/var/tmp/lkvm-qcow2-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	for (u64 i = 0; i < IMG_BYTES; i++)
		buf[i] = pattern(i);
	snprintf(p, sizeof(p), "%s/raw.img", dir);
	fd = open(p, O_CREAT | O_WRONLY, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, buf, IMG_BYTES, 0), (ssize_t)IMG_BYTES);
	close(fd);
	free(buf);
}

static void teardown(void)
{
	sh("rm -rf %s", dir);
}

static int try_open(const char *name, bool ro, bool snapshot, const char *backing, struct disk **d,
		    char *err, size_t errlen)
{
	char p[128];
	struct disk_opts o = { .path = p, .ro = ro, .snapshot = snapshot, .backing = backing };

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	*d = NULL;
	err[0] = '\0';
	return disk_open(&o, d, err, errlen);
}

static struct disk *open_ok(const char *name, bool ro)
{
	char err[512];
	struct disk *d;
	int ret = try_open(name, ro, false, NULL, &d, err, sizeof(err));

	ck_assert_msg(ret == 0, "open %s: %d %s", name, ret, err);
	return d;
}

/* Refused, with a one-line reason containing want. */
static void open_refused(const char *name, const char *want)
{
	char err[512];
	struct disk *d;
	int ret = try_open(name, true, false, NULL, &d, err, sizeof(err));

	ck_assert_msg(ret < 0, "%s opened (wanted: %s)", name, want);
	ck_assert_ptr_null(d);
	ck_assert_msg(strstr(err, want) && !strchr(err, '\n'), "%s: '%s' lacks '%s'", name, err,
		      want);
}

static void check_pattern(struct disk *d, u64 off, u64 len)
{
	u8 *buf = malloc(len);
	struct iovec v = { buf, len };

	ck_assert_int_eq(disk_read(d, &v, 1, off, len), 0);
	for (u64 i = 0; i < len; i++)
		ck_assert_msg(buf[i] == pattern(off + i), "byte %llu: %u",
			      (unsigned long long)(off + i), buf[i]);
	free(buf);
}

static const char *const variants[] = {
	"-o compat=0.10",
	"-o compat=1.1",
	"-o cluster_size=512",
	"-o cluster_size=4096,refcount_bits=8",
	"-o cluster_size=2M,refcount_bits=64",
};

/* qemu-img convert of the raw image reads back the same, for each variant. */
START_TEST(test_read_converted)
{
	struct disk *d;

	sh("cd %s && qemu-img convert -f raw -O qcow2 %s raw.img c.qcow2", dir, variants[_i]);
	d = open_ok("c.qcow2", true);
	ck_assert_str_eq(disk_format(d), "qcow2");
	ck_assert_uint_eq(d->size, IMG_BYTES);
	check_pattern(d, 0, IMG_BYTES);
	disk_close(d);
}
END_TEST

static u8 wbyte(u64 k, u64 i)
{
	return (u8)(k * 31 + i * 5 + 3);
}

/* Writes at offsets that cross clusters and refcount blocks into an empty image and one with
 * data, then qemu-img check is clean and qemu-img convert reads what was written. */
START_TEST(test_write_check)
{
	static const u64 offs[] = { 0, 4096 - 100, 65536 - 512, 300000, IMG_BYTES - 70000 };
	u8 *want = malloc(IMG_BYTES), *buf = malloc(70000);
	char p[128];
	struct disk *d;
	int fd;

	if (_i % 2)
		sh("cd %s && qemu-img convert -f raw -O qcow2 %s raw.img c.qcow2", dir,
		   variants[_i / 2]);
	else
		sh("cd %s && qemu-img create -q -f qcow2 %s c.qcow2 1M", dir, variants[_i / 2]);
	for (u64 i = 0; i < IMG_BYTES; i++)
		want[i] = _i % 2 ? pattern(i) : 0;
	d = open_ok("c.qcow2", false);
	for (u64 k = 0; k < ARRAY_SIZE(offs); k++) {
		struct iovec v[2] = { { buf, 1000 }, { buf + 1000, 70000 - 1000 } };

		for (u64 i = 0; i < 70000; i++)
			buf[i] = want[offs[k] + i] = wbyte(k, i);
		ck_assert_int_eq(disk_write(d, v, 2, offs[k], 70000), 0);
	}
	ck_assert_int_eq(disk_flush(d), 0);
	/* Read back through the same disk (its cached L2 table follows the writes). */
	for (u64 off = 0; off < IMG_BYTES; off += 70000) {
		u64 n = MIN(70000, IMG_BYTES - off);
		struct iovec v = { buf, n };

		ck_assert_int_eq(disk_read(d, &v, 1, off, n), 0);
		ck_assert_msg(!memcmp(buf, want + off, n), "bytes at %llu read back differ",
			      (unsigned long long)off);
	}
	disk_close(d);
	sh("cd %s && qemu-img check -q c.qcow2 && qemu-img convert -O raw c.qcow2 out.raw", dir);
	snprintf(p, sizeof(p), "%s/out.raw", dir);
	fd = open(p, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, buf, 70000, 0), 70000);
	for (u64 off = 0; off < IMG_BYTES; off += 70000) {
		u64 n = MIN(70000, IMG_BYTES - off);

		ck_assert_int_eq(pread(fd, buf, n, (off_t)off), (ssize_t)n);
		ck_assert_msg(!memcmp(buf, want + off, n), "converted bytes at %llu differ",
			      (unsigned long long)off);
	}
	close(fd);
	free(want);
	free(buf);
}
END_TEST

/* A qcow2 overlay on the raw image (named beside it): reads the base, writes land in the
 * overlay, the base is unchanged, and qemu-img check is clean; on a qcow2 base too. */
START_TEST(test_backing)
{
	u8 w[3000];
	struct iovec v = { w, sizeof(w) };
	struct disk *d;

	sh("cd %s && cp raw.img base.img && qemu-img convert -O qcow2 raw.img b.qcow2 && "
	   "qemu-img create -q -f qcow2 -b base.img -F raw o1.qcow2 && "
	   "qemu-img create -q -f qcow2 -b b.qcow2 -F qcow2 o2.qcow2 && "
	   "qemu-img create -q -f qcow2 -b o2.qcow2 -F qcow2 o3.qcow2",
	   dir);
	for (int k = 3; k >= 1; k--) { /* the top first: o3 writes nothing into o2 */
		char name[16];

		snprintf(name, sizeof(name), "o%d.qcow2", k);
		d = open_ok(name, false);
		check_pattern(d, 0, IMG_BYTES);
		memset(w, 0x5a + k, sizeof(w));
		ck_assert_int_eq(disk_write(d, &v, 1, 65536 - 1000, sizeof(w)), 0);
		check_pattern(d, 0, 65536 - 1000);
		check_pattern(d, 65536 + 2000, IMG_BYTES - 65536 - 2000);
		disk_close(d);
		sh("cd %s && qemu-img check -q %s", dir, name);
	}
	sh("cd %s && cmp -s raw.img base.img && qemu-img compare -q raw.img b.qcow2", dir);
}
END_TEST

/* A backing file anywhere but beside the image is opened only when named with backing=. */
START_TEST(test_backing_where)
{
	char err[512], p[128];
	struct disk *d;

	sh("cd %s && mkdir sub && cp raw.img sub/base.img && ln -s sub/base.img link.img && "
	   "qemu-img create -q -f qcow2 -b %s/sub/base.img -F raw abs.qcow2 && "
	   "qemu-img create -q -f qcow2 -b sub/base.img -F raw rel.qcow2 && "
	   "qemu-img create -q -f qcow2 -b link.img -F raw sym.qcow2 && "
	   "qemu-img create -q -f qcow2 -b ../raw.img -F raw sub/up.qcow2",
	   dir, dir);
	open_refused("abs.qcow2", "backing=PATH");
	open_refused("rel.qcow2", "is not beside the image");
	open_refused("sub/up.qcow2", "is not beside the image");
	open_refused("sym.qcow2", "link.img"); /* a symlink is not followed */
	snprintf(p, sizeof(p), "%s/sub/base.img", dir);
	ck_assert_int_eq(try_open("abs.qcow2", true, false, p, &d, err, sizeof(err)), 0);
	check_pattern(d, 0, IMG_BYTES);
	disk_close(d);
}
END_TEST

/* a -> b -> a: refused at the depth bound, not a stack overflow. */
START_TEST(test_backing_loop)
{
	sh("cd %s && qemu-img create -q -f qcow2 a.qcow2 1M && "
	   "qemu-img create -q -f qcow2 -b a.qcow2 -F qcow2 b.qcow2 && "
	   "qemu-img rebase -u -b b.qcow2 -F qcow2 a.qcow2",
	   dir);
	open_refused("b.qcow2", "deeper than 8");
}
END_TEST

/* snapshot=on over a qcow2 image: writes visible, the image file unchanged. */
START_TEST(test_snapshot_qcow2)
{
	u8 w[5000], r[5000];
	struct iovec wv = { w, sizeof(w) }, rv = { r, sizeof(r) };
	char err[512];
	struct disk *d;

	sh("cd %s && qemu-img convert -O qcow2 raw.img c.qcow2 && sha256sum c.qcow2 > sum", dir);
	ck_assert_int_eq(try_open("c.qcow2", false, true, NULL, &d, err, sizeof(err)), 0);
	ck_assert_str_eq(disk_format(d), "overlay");
	memset(w, 0x99, sizeof(w));
	ck_assert_int_eq(disk_write(d, &wv, 1, 100000, sizeof(w)), 0);
	ck_assert_int_eq(disk_read(d, &rv, 1, 100000, sizeof(r)), 0);
	ck_assert_mem_eq(r, w, sizeof(w));
	check_pattern(d, 0, 100000);
	disk_close(d);
	sh("cd %s && sha256sum -c --quiet sum", dir);
}
END_TEST

/* ---- hostile images: a qemu-img image with fields patched ---- */

static u64 get_be64(const char *name, u64 off)
{
	char p[128];
	u64 v = 0;
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &v, 8, (off_t)off), 8);
	close(fd);
	return be64toh(v);
}

static void patch(const char *name, u64 off, u64 val, int bytes)
{
	u64 be64 = htobe64(val);
	u32 be32 = htobe32((u32)val);
	char p[128];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_WRONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, bytes == 8 ? (void *)&be64 : (void *)&be32, (size_t)bytes,
				(off_t)off),
			 bytes);
	close(fd);
}

/* c.qcow2: the raw image converted (64 KiB clusters, 16-bit refcounts). */
static void fresh(void)
{
	sh("cd %s && rm -f c.qcow2 && qemu-img convert -O qcow2 raw.img c.qcow2", dir);
}

START_TEST(test_hostile_header)
{
	fresh();
	patch("c.qcow2", 24, 1ULL << 50, 8); /* a size the L1 table cannot map */
	open_refused("c.qcow2", "L1 size");
	fresh();
	patch("c.qcow2", 36, 0x7fffffff, 4); /* an L1 table of 16 GiB */
	open_refused("c.qcow2", "L1 size");
	fresh();
	patch("c.qcow2", 20, 40, 4);
	open_refused("c.qcow2", "cluster size");
	fresh();
	patch("c.qcow2", 56, 0xffffffff, 4); /* refcount table clusters */
	open_refused("c.qcow2", "refcount table size");
	fresh();
	patch("c.qcow2", 40, 1ULL << 40, 8); /* L1 table past the end */
	open_refused("c.qcow2", "L1 table");
	fresh();
	patch("c.qcow2", 48, 65536 + 8, 8); /* refcount table not cluster-aligned */
	open_refused("c.qcow2", "refcount table");
	fresh();
	patch("c.qcow2", 16, 4000, 4); /* a backing name longer than its bound */
	open_refused("c.qcow2", "backing file name");
	fresh();
	patch("c.qcow2", 4, 4, 4);
	open_refused("c.qcow2", "version");
}
END_TEST

START_TEST(test_hostile_features)
{
	fresh();
	patch("c.qcow2", 72, 1ULL << 20, 8);
	open_refused("c.qcow2", "unknown incompatible feature bits: not supported");
	fresh();
	patch("c.qcow2", 72, 1, 8);
	open_refused("c.qcow2", "dirty");
	fresh();
	patch("c.qcow2", 72, 4, 8);
	open_refused("c.qcow2", "external data file");
	fresh();
	patch("c.qcow2", 88, 1, 8);
	open_refused("c.qcow2", "bitmaps");
	fresh();
	patch("c.qcow2", 32, 1, 4);
	open_refused("c.qcow2", "encryption");
	sh("cd %s && qemu-img convert -c -O qcow2 raw.img z.qcow2", dir);
	open_refused("z.qcow2", "compressed clusters");
	sh("cd %s && qemu-img convert -O qcow2 raw.img s.qcow2 && qemu-img snapshot -c s1 s.qcow2",
	   dir);
	open_refused("s.qcow2", "internal snapshots");
}
END_TEST

START_TEST(test_hostile_tables)
{
	u64 l1, l2, rt, rb;

	fresh();
	l1 = get_be64("c.qcow2", 40);
	rt = get_be64("c.qcow2", 48);
	l2 = get_be64("c.qcow2", l1) & 0x00fffffffffffe00ULL;
	rb = get_be64("c.qcow2", rt);
	patch("c.qcow2", l2, (1ULL << 40) | (1ULL << 63), 8); /* data past the end */
	open_refused("c.qcow2", "L2 entry");
	fresh();
	patch("c.qcow2", l2 + 8, (l2 + 100) | (1ULL << 63), 8); /* not cluster-aligned */
	open_refused("c.qcow2", "L2 entry");
	fresh();
	patch("c.qcow2", l2 + 8, rt | (1ULL << 63), 8); /* data over the refcount table */
	open_refused("c.qcow2", "a data cluster");
	fresh();
	patch("c.qcow2", l1, rb | (1ULL << 63), 8); /* an L2 table over a refcount block */
	open_refused("c.qcow2", "L2 table");
	fresh();
	patch("c.qcow2", l2 + 8, get_be64("c.qcow2", l2), 8); /* one data cluster twice */
	open_refused("c.qcow2", "a data cluster");
	fresh();
	patch("c.qcow2", l1, 0x10000ULL << 40, 8); /* reserved bits */
	open_refused("c.qcow2", "L1 entry");
	fresh();
	patch("c.qcow2", rt, rt + 4096, 8); /* a refcount block inside the table */
	open_refused("c.qcow2", "refcount table entry");
}
END_TEST

/* Refcounts that disagree with the tables: 0 for a used cluster (a write would hand it out
 * again), 2 (shared, with no snapshot to share it), the largest a 16-bit refcount holds. */
START_TEST(test_hostile_refcounts)
{
	static const u64 bad[] = { 0, 2, 0xffff };
	u64 rb;

	fresh();
	rb = get_be64("c.qcow2", get_be64("c.qcow2", 48));
	for (unsigned k = 0; k < ARRAY_SIZE(bad); k++) {
		fresh();
		patch("c.qcow2", rb + 2 * 5, bad[k] << 16,
		      4); /* cluster 5's refcount (a data one) */
		open_refused("c.qcow2", "refcounts");
	}
}
END_TEST

static Suite *qcow2_suite(void)
{
	Suite *s = suite_create("qcow2");
	TCase *tc = tcase_create("qcow2");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_read_converted, 0, ARRAY_SIZE(variants));
	tcase_add_loop_test(tc, test_write_check, 0, 2 * ARRAY_SIZE(variants));
	tcase_add_test(tc, test_backing);
	tcase_add_test(tc, test_backing_where);
	tcase_add_test(tc, test_backing_loop);
	tcase_add_test(tc, test_snapshot_qcow2);
	tcase_add_test(tc, test_hostile_header);
	tcase_add_test(tc, test_hostile_features);
	tcase_add_test(tc, test_hostile_tables);
	tcase_add_test(tc, test_hostile_refcounts);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(qcow2_suite)

/* Unit tests of virtio-blk against a temporary image, without KVM: the test is the driver (reads, writes, flush, get-id, read-only, bounds, I/O errors, malformed chains, bounce memory, stop), with libaio and with pread/pwrite. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libaio.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_ring.h>

#include "check_main.h"
#include "stats_fmt.h"
#include "irq_hook.h"
#include "vdriver.h"
#include "wait.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"
#include "lkvm/virtio-blk.h"

#define RAM_SIZE MiB(8)
#define QSIZE 256
#define QBASE 0x10000ULL /* desc; avail +0x1000; used +0x2000 */
#define BUF_BASE 0x100000ULL
#define SECTORS 64
#define WAIT_MS 10000
#define BOUNCE_LIMIT (64ULL << 20) /* the device's bounce budget, as its --stats reports it */

/* The test binary is linked with --wrap=io_submit (Makefile): the device's io_submit comes
 * here, and refuses the next `refuse_submits` calls as a file system without aio support
 * for a request would (the first iocb refused: -EINVAL). */
int __real_io_submit(io_context_t ctx, long nr, struct iocb **iocbs);
int __wrap_io_submit(io_context_t ctx, long nr, struct iocb **iocbs);
static atomic_int refuse_submits;

int __wrap_io_submit(io_context_t ctx, long nr, struct iocb **iocbs)
{
	int left = atomic_load(&refuse_submits);

	while (left > 0 && !atomic_compare_exchange_weak(&refuse_submits, &left, left - 1))
		;
	return left > 0 ? -EINVAL : __real_io_submit(ctx, nr, iocbs);
}

static struct {
	struct virtio_blk *b;
	struct virtio_device *vdev;
	char path[64];
	struct vd_queue q;
} t;

/* odd: 1 makes the buffer start 8 bytes past a 4 KiB boundary (forces the bounce path under O_DIRECT). */
static u64 galloc(u64 len, bool odd)
{
	return vd_galloc(len + (odd ? 8 : 0), 4096) + (odd ? 8 : 0);
}

static u8 pattern(u64 sector, u64 i)
{
	return (u8)(sector * 13 + i * 7 + 1);
}

static void make_image(u64 sectors)
{
	u8 buf[512];
	int fd;

	strcpy(t.path, "/var/tmp/lkvm-blk-XXXXXX");
	fd = mkstemp(t.path);
	ck_assert_int_ge(fd, 0);
	for (u64 s = 0; s < sectors; s++) {
		for (int i = 0; i < 512; i++)
			buf[i] = pattern(s, (u64)i);
		ck_assert_int_eq(pwrite(fd, buf, sizeof(buf), (off_t)(s * 512)), 512);
	}
	close(fd);
}

/* An image of `sectors` pattern sectors, the device on it (-d options extra_opts), started. */
static void dev_up_image(const char *extra_opts, u64 sectors)
{
	struct virtio_device *vdev;
	struct blk_opts o;
	char arg[128], err[256];

	memset(&t, 0, sizeof(t));
	make_image(sectors);
	vd_vm_new(RAM_SIZE, BUF_BASE);
	snprintf(arg, sizeof(arg), "%s%s", t.path, extra_opts);
	ck_assert_msg(blk_parse_opts(arg, &o, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(virtio_blk_create_bare(vd.kvm, &o, &t.b, err, sizeof(err)) == 0, "%s", err);
	t.vdev = vdev = virtio_blk_vdev(t.b);
	vdev->features = 1ULL << VIRTIO_F_VERSION_1;
	vd_queue_up(vdev, 0, &t.q, QBASE, QSIZE, false);
	vd_driver_ok(vdev);
}

static void dev_up(const char *extra_opts)
{
	dev_up_image(extra_opts, SECTORS);
}

static void dev_down(void)
{
	struct vd_fds fds;

	vd_fds_save(&fds, t.vdev, 1);
	virtio_blk_destroy(t.b);
	vd_fds_close(&fds);
	unlink(t.path);
	vd_vm_free();
}

static u16 post(const struct vd_buf *b, int nb)
{
	return vd_post(&t.q, b, nb);
}

/* The same chain through one ring descriptor and an indirect table in guest memory. */
static u16 post_indirect(const struct vd_buf *b, int nb)
{
	u64 table = galloc(sizeof(struct vring_desc) * (u64)nb, false);

	vd_fill_descs(gp(table), 0, (u16)nb, b, nb);
	return vd_post_desc(&t.q, table, (u32)(sizeof(struct vring_desc) * (u64)nb),
			    VRING_DESC_F_INDIRECT);
}

static bool wait_used(u16 want)
{
	return vd_wait_used(&t.q, want, WAIT_MS);
}

/* A request chain on the data at dg: header, data buffers (split in two when split), status;
 * through an indirect table when indirect. Returns the status byte's address. */
static u64 request_at(u32 type, u64 sector, u32 len, bool split, u64 dg, bool indirect)
{
	struct virtio_blk_outhdr h = { .type = type, .sector = sector };
	u64 hg = galloc(sizeof(h), false), sg = galloc(1, false);
	bool dev_writes = type != VIRTIO_BLK_T_OUT;
	struct vd_buf b[4];
	int n = 0;

	memcpy(gp(hg), &h, sizeof(h));
	*(u8 *)gp(sg) = 0xee;
	b[n++] = (struct vd_buf){ hg, sizeof(h), false };
	if (len && split) {
		b[n++] = (struct vd_buf){ dg, len / 2, dev_writes };
		b[n++] = (struct vd_buf){ dg + len / 2, len - len / 2, dev_writes };
	} else if (len) {
		b[n++] = (struct vd_buf){ dg, len, dev_writes };
	}
	b[n++] = (struct vd_buf){ sg, 1, true };
	if (indirect)
		post_indirect(b, n);
	else
		post(b, n);
	return sg;
}

/* A request chain on new data buffers (odd: not 4 KiB aligned). Returns the status byte's
 * address; *data the data's. */
static u64 request(u32 type, u64 sector, u32 len, bool split, bool odd, u64 *data)
{
	*data = galloc(len ? len : 1, odd);
	return request_at(type, sector, len, split, *data, false);
}

/* One request, kicked and completed: its status. */
static u8 run1(u32 type, u64 sector, u32 len, bool split, bool odd, u64 *data)
{
	u64 sg = request(type, sector, len, split, odd, data);
	u16 want = (u16)(t.q.aidx);

	vd_kick(t.vdev, 0);
	ck_assert_msg(wait_used(want), "request not completed");
	return *(u8 *)gp(sg);
}

/* n sectors at gpa hold the image's pattern from sector on (one assertion: each passing
 * one costs a message to Check's parent process). */
static void check_sectors(u64 gpa, u64 sector, u64 n)
{
	const u8 *p = gp(gpa);

	for (u64 s = 0; s < n; s++)
		for (u64 i = 0; i < 512; i++)
			if (p[s * 512 + i] != pattern(sector + s, i))
				ck_abort_msg("sector %" PRIu64 " byte %" PRIu64 ": 0x%x, want 0x%x",
					     sector + s, i, p[s * 512 + i], pattern(sector + s, i));
}

static void file_read(u64 off, void *buf, size_t len)
{
	int fd = open(t.path, O_RDONLY);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, buf, len, (off_t)off), (ssize_t)len);
	close(fd);
}

static void read_write_flush(const char *opts)
{
	u64 data;
	u8 buf[1024];
	struct virtio_blk_config cfg;

	dev_up(opts);
	t.vdev->ops->config_read(t.vdev, 0, (u8 *)&cfg, sizeof(cfg));
	ck_assert_uint_eq(cfg.capacity, SECTORS);
	/* Known sectors, in one buffer and split over two; aligned and not. */
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, 3, 1024, false, false, &data), VIRTIO_BLK_S_OK);
	check_sectors(data, 3, 2);
	ck_assert_uint_eq(t.q.used->ring[0].len, 1025);
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, 10, 2048, true, true, &data), VIRTIO_BLK_S_OK);
	check_sectors(data, 10, 4);
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, SECTORS - 1, 512, false, true, &data),
			  VIRTIO_BLK_S_OK);
	check_sectors(data, SECTORS - 1, 1);
	/* Writes land in the file (aligned and unaligned buffers). */
	request(VIRTIO_BLK_T_OUT, 20, 1024, true, true, &data);
	memset(gp(data), 0x5a, 1024);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(t.q.aidx));
	file_read(20 * 512, buf, 1024);
	for (int i = 0; i < 1024; i++)
		ck_assert_uint_eq(buf[i], 0x5a);
	file_read(19 * 512, buf, 512); /* its neighbours untouched */
	ck_assert_uint_eq(buf[0], pattern(19, 0));
	file_read(22 * 512, buf, 512);
	ck_assert_uint_eq(buf[511], pattern(22, 511));
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_FLUSH, 0, 0, false, false, &data), VIRTIO_BLK_S_OK);
	/* GET_ID: "lkvm-" and the file name, 20 bytes at most. */
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_GET_ID, 0, 20, false, false, &data), VIRTIO_BLK_S_OK);
	ck_assert_mem_eq(gp(data), "lkvm-lkvm-blk-", 14);
	/* Several in flight: 32 reads posted, one kick. */
	{
		u64 d[32], s[32];
		u16 want = (u16)(t.q.aidx + 32);

		for (int i = 0; i < 32; i++)
			s[i] = request(VIRTIO_BLK_T_IN, 30 + (u64)(i % 8) * 2, 1024, i % 2,
				       i % 3 == 0, &d[i]);
		vd_kick(t.vdev, 0);
		ck_assert(wait_used(want));
		for (int i = 0; i < 32; i++) {
			ck_assert_uint_eq(*(u8 *)gp(s[i]), VIRTIO_BLK_S_OK);
			check_sectors(d[i], 30 + (u64)(i % 8) * 2, 2);
		}
	}
	ck_assert_uint_ge(t.vdev->q[0].stats.packets, 38);
	ck_assert_uint_eq(t.vdev->q[0].stats.drops, 0);
	dev_down();
}

START_TEST(test_rw_libaio)
{
	read_write_flush("");
}
END_TEST

START_TEST(test_rw_libaio_buffered)
{
	read_write_flush(",direct=off");
}
END_TEST

START_TEST(test_rw_sync)
{
	read_write_flush(",aio=sync");
}
END_TEST

/* snapshot=on: the device reads the image and its own writes (in the overlay); the file is
 * untouched, and a snapshot of the VM is refused in one line. */
START_TEST(test_snapshot_on)
{
	struct snap_rec_buf rb = { 0 };
	u64 data;
	u8 buf[512];
	char err[256];

	dev_up(",snapshot=on");
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, 3, 1024, false, false, &data), VIRTIO_BLK_S_OK);
	check_sectors(data, 3, 2);
	request(VIRTIO_BLK_T_OUT, 20, 1024, true, true, &data);
	memset(gp(data), 0x5a, 1024);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(t.q.aidx));
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_FLUSH, 0, 0, false, false, &data), VIRTIO_BLK_S_OK);
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, 20, 1024, true, false, &data), VIRTIO_BLK_S_OK);
	for (int i = 0; i < 1024; i++)
		ck_assert_uint_eq(((u8 *)gp(data))[i], 0x5a);
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, 19, 512, false, false, &data), VIRTIO_BLK_S_OK);
	check_sectors(data, 19, 1);
	file_read(20 * 512, buf, 512);
	ck_assert_uint_eq(buf[0], pattern(20, 0));
	ck_assert_int_eq(virtio_blk_save(t.b, &rb, err, sizeof(err)), -ENOTSUP);
	ck_assert_msg(strstr(err, "(overlay): a snapshot of this disk is not supported"), "%s",
		      err);
	snap_rec_free(&rb);
	dev_down();
}
END_TEST

/* Out of the image, overflowing, not whole sectors, unknown types: that request fails, the device goes on. */
START_TEST(test_bounds)
{
	u64 data;

	dev_up("");
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, SECTORS, 512, false, false, &data),
			  VIRTIO_BLK_S_IOERR);
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, SECTORS - 1, 1024, false, false, &data),
			  VIRTIO_BLK_S_IOERR);
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_OUT, SECTORS - 1, 1024, false, false, &data),
			  VIRTIO_BLK_S_IOERR);
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, ~0ULL >> 9, 512, false, false, &data),
			  VIRTIO_BLK_S_IOERR);
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, ~0ULL, 512, false, false, &data),
			  VIRTIO_BLK_S_IOERR);
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, 0, 100, false, false, &data), VIRTIO_BLK_S_IOERR);
	ck_assert_uint_eq(run1(99, 0, 512, false, false, &data), VIRTIO_BLK_S_UNSUPP);
	ck_assert_uint_eq(t.q.used->ring[(t.q.aidx - 1) % QSIZE].len,
			  1); /* only the status written */
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, 0, 512, false, false, &data), VIRTIO_BLK_S_OK);
	check_sectors(data, 0, 1);
	ck_assert_uint_eq(t.vdev->q[0].stats.drops, 7);
	ck_assert_uint_eq(atomic_load(&t.vdev->status) & VIRTIO_CONFIG_S_NEEDS_RESET, 0);
	dev_down();
}
END_TEST

START_TEST(test_read_only)
{
	u64 data, sg;
	u8 buf[512];

	dev_up(",ro");
	ck_assert(t.vdev->host_features & (1ULL << VIRTIO_BLK_F_RO));
	sg = request(VIRTIO_BLK_T_OUT, 5, 512, false, false, &data);
	memset(gp(data), 0x77, 512);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(t.q.aidx));
	ck_assert_uint_eq(*(u8 *)gp(sg), VIRTIO_BLK_S_IOERR);
	file_read(5 * 512, buf, 512);
	for (int i = 0; i < 512; i++)
		ck_assert_uint_eq(buf[i], pattern(5, (u64)i));
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, 5, 512, false, false, &data), VIRTIO_BLK_S_OK);
	check_sectors(data, 5, 1);
	dev_down();
}
END_TEST

/* A file that fails under the device: shrunk after it was opened, reads past the new end
 * come back short, which is an I/O error for that request only. */
static void io_error(const char *opts)
{
	u64 data;

	dev_up(opts);
	ck_assert_int_eq(truncate(t.path, 8 * 512), 0);
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, 20, 512, false, false, &data), VIRTIO_BLK_S_IOERR);
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, 2, 512, false, false, &data), VIRTIO_BLK_S_OK);
	check_sectors(data, 2, 1);
	dev_down();
}

START_TEST(test_io_error_libaio)
{
	io_error("");
}
END_TEST

START_TEST(test_io_error_sync)
{
	io_error(",aio=sync");
}
END_TEST

static bool wait_needs_reset(void)
{
	return WAIT_UNTIL(WAIT_MS, atomic_load(&t.vdev->status) & VIRTIO_CONFIG_S_NEEDS_RESET);
}

START_TEST(test_malformed_header)
{
	u64 hg;

	dev_up("");
	hg = galloc(8, false);
	post((struct vd_buf[]){ { hg, 8, false }, { galloc(1, false), 1, true } },
	     2); /* 8-byte header */
	vd_kick(t.vdev, 0);
	ck_assert(wait_needs_reset());
	dev_down();
}
END_TEST

START_TEST(test_malformed_no_status)
{
	struct virtio_blk_outhdr h = { .type = VIRTIO_BLK_T_FLUSH };
	u64 hg;

	dev_up("");
	hg = galloc(sizeof(h), false);
	memcpy(gp(hg), &h, sizeof(h));
	post((struct vd_buf[]){ { hg, sizeof(h), false } }, 1); /* nowhere to put the status */
	vd_kick(t.vdev, 0);
	ck_assert(wait_needs_reset());
	dev_down();
}
END_TEST

START_TEST(test_options)
{
	struct blk_opts o;
	char err[256];

	ck_assert_int_eq(blk_parse_opts("a.img", &o, err, sizeof(err)), 0);
	ck_assert_str_eq(o.path, "a.img");
	ck_assert(!o.ro && !o.trans_set && o.io == BLK_IO_LIBAIO && !o.no_direct);
	ck_assert_int_eq(blk_parse_opts("/x/b.img,ro,trans=mmio,aio=sync,direct=off", &o, err,
					sizeof(err)),
			 0);
	ck_assert(o.ro && o.trans_set && o.trans == VIRTIO_TRANS_MMIO && o.io == BLK_IO_SYNC &&
		  o.no_direct);
	ck_assert(!o.snapshot && !o.backing[0]);
	ck_assert_int_eq(
		blk_parse_opts("q.qcow2,snapshot=on,backing=/b/base.img", &o, err, sizeof(err)), 0);
	ck_assert(o.snapshot);
	ck_assert_str_eq(o.backing, "/b/base.img");
	ck_assert_int_eq(blk_parse_opts("q.qcow2,snapshot=maybe", &o, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(blk_parse_opts("", &o, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(blk_parse_opts(",ro", &o, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(blk_parse_opts("a.img,rw", &o, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "unknown option 'rw'"));
	ck_assert_int_eq(blk_parse_opts("a.img,trans=usb", &o, err, sizeof(err)), -EINVAL);
	/* A missing image: a clear error. */
	{
		struct kvm kvm = { 0 };
		struct virtio_blk *b;

		ck_assert_int_eq(blk_parse_opts("/nonexistent/disk.img", &o, err, sizeof(err)), 0);
		ck_assert_int_eq(virtio_blk_create_bare(&kvm, &o, &b, err, sizeof(err)), -ENOENT);
		ck_assert_ptr_nonnull(strstr(err, "/nonexistent/disk.img"));
	}
}
END_TEST

/* open(-d path[,ro]) as a device does: 0 or -errno with err. */
static int open_disk(const char *spec, struct virtio_blk **b, char *err, size_t errlen)
{
	static struct kvm kvm;
	struct blk_opts o;

	ck_assert_int_eq(blk_parse_opts(spec, &o, err, errlen), 0);
	return virtio_blk_create_bare(&kvm, &o, b, err, errlen);
}

/*
 * Two VMs never write one image: a second writer, a reader beside a writer and a writer beside
 * a reader are refused in one line naming the image; two readers share it; a closed image is
 * free again. OFD locks conflict between two opens in one process, which is what lets one
 * process test it (POSIX locks would not).
 */
START_TEST(test_image_lock)
{
	char path[] = "/tmp/lkvm-blk-lock-XXXXXX", ro[64], err[512];
	struct virtio_blk *a, *b;
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 65536), 0);
	close(fd);
	snprintf(ro, sizeof(ro), "%s,ro", path);
	ck_assert_int_eq(open_disk(path, &a, err, sizeof(err)), 0);
	ck_assert_int_eq(open_disk(path, &b, err, sizeof(err)), -EBUSY);
	ck_assert_str_eq(err + strlen(err) -
				 strlen("is in use by another process (locked for writing)"),
			 "is in use by another process (locked for writing)");
	ck_assert_ptr_nonnull(strstr(err, path));
	ck_assert_int_eq(open_disk(ro, &b, err, sizeof(err)), -EBUSY);
	ck_assert_ptr_nonnull(strstr(err, "(locked for writing)"));
	virtio_blk_destroy(a);
	ck_assert_int_eq(open_disk(ro, &a, err, sizeof(err)), 0);
	ck_assert_int_eq(open_disk(ro, &b, err, sizeof(err)), 0);
	virtio_blk_destroy(b);
	ck_assert_int_eq(open_disk(path, &b, err, sizeof(err)), -EBUSY);
	ck_assert_ptr_nonnull(strstr(err, "(open read-only)"));
	virtio_blk_destroy(a);
	ck_assert_int_eq(open_disk(path, &a, err, sizeof(err)), 0);
	virtio_blk_destroy(a);
	unlink(path);
}
END_TEST

static void blk_visit(void *dev, struct stats_visitor *v)
{
	virtio_blk_stats(dev, v);
}

/* The bounce-buffer part of the device's --stats=json. */
struct bounce {
	u64 bytes, peak, limit, waits;
};

static struct bounce bounce_stats(void)
{
	struct bounce b = { 0 };
	char *buf = stats_fmt("disk", t.b, blk_visit, true);
	const char *p;

	p = strstr(buf, "\"bounce\":{");
	ck_assert_msg(p && sscanf(p,
				  "\"bounce\":{\"bytes\":%" SCNu64 ",\"peak\":%" SCNu64
				  ",\"limit\":%" SCNu64 ",\"waits\":%" SCNu64 "}}",
				  &b.bytes, &b.peak, &b.limit, &b.waits) == 4,
		      "no bounce counters in %s", buf);
	free(buf);
	return b;
}

/*
 * 80 unaligned 2 MiB reads, each through an indirect table, all into the same guest buffer:
 * unbounded, the device would hold 160 MiB of bounce buffers at once for 2 MiB of guest RAM.
 * It holds at most its limit; the requests beyond it wait (none fails) and all complete with
 * the right data.
 */
START_TEST(test_bounce_bounded)
{
	const u32 len = 2u << 20;
	enum { N = 80 };
	u64 data, st[N];
	struct bounce b;

	dev_up_image("", len / 512);
	ck_assert(virtio_blk_direct(t.b));
	data = galloc(len, true);
	for (int i = 0; i < N; i++)
		st[i] = request_at(VIRTIO_BLK_T_IN, 0, len, false, data, true);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(N));
	for (int i = 0; i < N; i++)
		ck_assert_uint_eq(*(u8 *)gp(st[i]), VIRTIO_BLK_S_OK);
	check_sectors(data, 0, len / 512);
	ck_assert_uint_eq(t.vdev->q[0].stats.packets, N);
	ck_assert_uint_eq(t.vdev->q[0].stats.drops, 0);
	b = bounce_stats();
	ck_assert_uint_eq(b.limit, BOUNCE_LIMIT);
	ck_assert_uint_le(b.peak, BOUNCE_LIMIT);
	ck_assert_uint_ge(b.peak, len);
	ck_assert_uint_gt(b.waits, 0);
	ck_assert_uint_eq(b.bytes, 0);
	dev_down();
}
END_TEST

/* io_submit refuses the request (as a file system without aio for it does): it runs
 * synchronously on the bounce buffer prep_aio made, which is freed once: the data is
 * right both ways, and nothing is held (or leaked) afterwards. */
START_TEST(test_bounce_refused_submit)
{
	u64 data;
	u8 buf[2048];
	struct bounce b;

	dev_up("");
	ck_assert(virtio_blk_direct(t.b));
	atomic_store(&refuse_submits, 1);
	ck_assert_uint_eq(run1(VIRTIO_BLK_T_IN, 10, 2048, false, true, &data), VIRTIO_BLK_S_OK);
	check_sectors(data, 10, 4);
	request(VIRTIO_BLK_T_OUT, 20, 2048, true, true, &data);
	memset(gp(data), 0x3c, 2048);
	atomic_store(&refuse_submits, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(t.q.aidx));
	ck_assert_int_eq(atomic_load(&refuse_submits), 0);
	file_read(20 * 512, buf, sizeof(buf));
	for (size_t i = 0; i < sizeof(buf); i++)
		if (buf[i] != 0x3c)
			ck_abort_msg("image byte %zu: 0x%x", 20 * 512 + i, buf[i]);
	b = bounce_stats();
	ck_assert_uint_eq(b.bytes, 0);
	ck_assert_uint_eq(b.peak, 2048);
	ck_assert_uint_eq(t.vdev->q[0].stats.drops, 0);
	dev_down();
}
END_TEST

/* A driver whose interrupt handler makes the same request available again at once
 * (endless_set): stop (a reset, teardown) still ends the queue thread, between two requests. */
START_TEST(test_stop_endless_ring)
{
	static const char *const opts[] = { ",aio=sync", "" };
	u64 data;

	dev_up(opts[_i]);
	t.vdev->ops->stop(t.vdev);
	endless_set(t.vdev, 0, &t.q, t.q.next_desc);
	ck_assert_int_eq(t.vdev->ops->start(t.vdev), 0);
	request(VIRTIO_BLK_T_IN, 3, 1024, false, false, &data);
	vd_kick(t.vdev, 0);
	ck_assert(WAIT_UNTIL(WAIT_MS, endless_served() >= 100));
	t.vdev->ops->stop(t.vdev); /* returns: the thread looked at stop while the ring was full */
	ck_assert_uint_eq(t.vdev->q[0].stats.drops, 0);
	check_sectors(data, 3, 2);
	dev_down();
}
END_TEST

/* Whether the device opens an image here with O_DIRECT (what the bounce tests need). */
static bool device_uses_direct_io(void)
{
	char path[] = "/var/tmp/lkvm-blk-dio-XXXXXX", err[256];
	struct kvm kvm = { 0 };
	struct virtio_blk *b;
	struct blk_opts o;
	bool direct = false;
	int fd = mkstemp(path);

	if (fd < 0)
		return false;
	if (ftruncate(fd, 4096) == 0 && blk_parse_opts(path, &o, err, sizeof(err)) == 0 &&
	    virtio_blk_create_bare(&kvm, &o, &b, err, sizeof(err)) == 0) {
		direct = virtio_blk_direct(b);
		virtio_blk_destroy(b);
	}
	close(fd);
	unlink(path);
	return direct;
}

/* Guest RAM is what it was at snap. */
static bool ram_is(const u8 *snap)
{
	return !memcmp(snap, vd.ram, RAM_SIZE);
}

/*
 * A pause holds the disk still. Requests kicked just before it: those taken complete before
 * virtio_blk_quiesce returns (the kernel writes into guest buffers as aio completes); from
 * then on, and with more posted and kicked while paused, no request completes, no byte of
 * guest memory changes and no interrupt is raised. After resume every request completes,
 * with the right data. Over libaio and pread/pwrite.
 */
START_TEST(test_quiesce_holds_requests)
{
	enum { N = 16 };
	u64 data[2 * N], st[2 * N];
	u8 *snap = malloc(RAM_SIZE);
	u64 irqs;

	ck_assert_ptr_nonnull(snap);
	dev_up(_i ? ",aio=sync" : "");
	for (int i = 0; i < N; i++)
		st[i] = request(VIRTIO_BLK_T_IN, (u64)i * 2, 1024, i % 2, i % 3 == 0, &data[i]);
	vd_kick(t.vdev, 0);
	virtio_blk_quiesce(t.b);
	irqs = atomic_load(&t.vdev->q[0].stats.irqs);
	/* More requests, then the memory as it stands, then the kick that would wake the thread. */
	for (int i = N; i < 2 * N; i++)
		st[i] = request(VIRTIO_BLK_T_IN, (u64)i * 2, 1024, i % 2, i % 3 == 0, &data[i]);
	memcpy(snap, vd.ram, RAM_SIZE);
	vd_kick(t.vdev, 0);
	ck_assert_msg(HOLDS_FOR(100, ram_is(snap)),
		      "guest memory changed while paused (used idx %u)", vd_used_idx(&t.q));
	ck_assert_uint_eq(atomic_load(&t.vdev->q[0].stats.irqs), irqs);
	virtio_blk_resume(t.b);
	ck_assert(wait_used(2 * N));
	for (int i = 0; i < 2 * N; i++) {
		ck_assert_uint_eq(*(u8 *)gp(st[i]), VIRTIO_BLK_S_OK);
		check_sectors(data[i], (u64)i * 2, 2);
	}
	free(snap);
	dev_down();
}
END_TEST

static Suite *blk_suite(void)
{
	Suite *s = suite_create("virtio-blk");
	TCase *tc = tcase_create("blk");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_rw_libaio);
	tcase_add_test(tc, test_rw_libaio_buffered);
	tcase_add_test(tc, test_rw_sync);
	tcase_add_test(tc, test_snapshot_on);
	tcase_add_test(tc, test_bounds);
	tcase_add_test(tc, test_read_only);
	tcase_add_test(tc, test_io_error_libaio);
	tcase_add_test(tc, test_io_error_sync);
	tcase_add_test(tc, test_malformed_header);
	tcase_add_test(tc, test_malformed_no_status);
	tcase_add_test(tc, test_options);
	tcase_add_test(tc, test_image_lock);
	tcase_add_loop_test(tc, test_stop_endless_ring, 0, 2);
	tcase_add_loop_test(tc, test_quiesce_holds_requests, 0, 2);
	if (device_uses_direct_io()) {
		tcase_add_test(tc, test_bounce_bounded);
		tcase_add_test(tc, test_bounce_refused_submit);
	} else {
		lkvm_skip("test_virtio_blk", 2, "bounce-buffer tests",
			  "/var/tmp takes no O_DIRECT with 512-byte alignment");
	}
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(blk_suite)

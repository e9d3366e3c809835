/* snapshot=on: a private copy-on-write overlay over a read-only disk, in an unlinked sparse temporary file, with a bitmap of the clusters written; discarded at exit. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/disk.h"
#include "lkvm/iov.h"
#include "lkvm/stats.h"

/*
 * A cluster is the unit copied up: the first write into one reads the base's bytes around
 * the written range, so a cluster in the file is always whole and a read never mixes the two.
 * 64 KiB, qcow2's default: a 4 KiB write costs one 64 KiB copy at most once per cluster.
 */
#define OV_CLUSTER (64ULL << 10)

struct overlay {
	struct disk d;
	struct disk *base;
	int fd;		      /* the overlay file: guest offsets as they are, holes elsewhere */
	u64 *bits;	      /* bit c: cluster c is in the overlay file */
	u8 *buf;	      /* one cluster, for copy-up */
	atomic_ullong nr_set; /* clusters in the overlay (read by lkvm stat's thread) */
};

static bool is_set(const struct overlay *ov, u64 c)
{
	return ov->bits[c / 64] >> (c % 64) & 1;
}

/* The cluster's bytes within the disk (the last one may be shorter). */
static u64 cluster_len(const struct overlay *ov, u64 c)
{
	return MIN(OV_CLUSTER, ov->d.size - c * OV_CLUSTER);
}

/* Each piece of the request that lies in one cluster, from the overlay or the base. */
static int ov_read(struct disk *d, const struct iovec *iov, int n, u64 off, u64 len)
{
	struct overlay *ov = (struct overlay *)d;
	struct iovec part[DISK_MAX_IOV];

	for (u64 done = 0; done < len;) {
		u64 pos = off + done, c = pos / OV_CLUSTER;
		u64 l = MIN(len - done, (c + 1) * OV_CLUSTER - pos);
		int k = disk_iov_slice(iov, n, done, l, part, DISK_MAX_IOV), ret;

		if (k < 0)
			return k;
		ret = is_set(ov, c) ? disk_pread_all(ov->fd, part, k, pos, l)
				    : disk_read(ov->base, part, k, pos, l);
		if (ret < 0)
			return ret;
		done += l;
	}
	return 0;
}

/* The first write into cluster c: the base's cluster with the written bytes over it, written
 * whole. The bit is set only once the write succeeded. */
static int copy_up(struct overlay *ov, u64 c, const struct iovec *part, int k, u64 pos, u64 l)
{
	u64 start = c * OV_CLUSTER, clen = cluster_len(ov, c);
	struct iovec whole = { ov->buf, clen };
	int ret;

	if (pos != start || l != clen) {
		ret = disk_read(ov->base, &whole, 1, start, clen);
		if (ret < 0)
			return ret;
	}
	iov_from(part, k, 0, ov->buf + (pos - start), l);
	ret = disk_pwrite_all(ov->fd, &whole, 1, start, clen);
	if (ret < 0)
		return ret;
	ov->bits[c / 64] |= 1ULL << (c % 64);
	atomic_fetch_add_explicit(&ov->nr_set, 1, memory_order_relaxed);
	return 0;
}

static int ov_write(struct disk *d, const struct iovec *iov, int n, u64 off, u64 len)
{
	struct overlay *ov = (struct overlay *)d;
	struct iovec part[DISK_MAX_IOV];

	for (u64 done = 0; done < len;) {
		u64 pos = off + done, c = pos / OV_CLUSTER;
		u64 l = MIN(len - done, (c + 1) * OV_CLUSTER - pos);
		int k = disk_iov_slice(iov, n, done, l, part, DISK_MAX_IOV), ret;

		if (k < 0)
			return k;
		ret = is_set(ov, c) ? disk_pwrite_all(ov->fd, part, k, pos, l)
				    : copy_up(ov, c, part, k, pos, l);
		if (ret < 0)
			return ret;
		done += l;
	}
	return 0;
}

/* Nothing of the overlay outlives the process: a flush has nothing to make durable. */
static int ov_flush(struct disk *d)
{
	(void)d;
	return 0;
}

static void ov_stats(struct disk *d, struct stats_visitor *v)
{
	struct overlay *ov = (struct overlay *)d;

	disk_stats(ov->base, v);
	v->group(v, "overlay");
	u64 n = atomic_load_explicit(&ov->nr_set, memory_order_relaxed);

	v->counter(v, "bytes", n * OV_CLUSTER);
	v->counter(v, "clusters", n);
}

static void ov_close(struct disk *d)
{
	struct overlay *ov = (struct overlay *)d;

	disk_close(ov->base);
	if (ov->fd >= 0)
		close(ov->fd);
	free(ov->bits);
	free(ov->buf);
	free(ov);
}

static const struct disk_ops overlay_ops = {
	.format = "overlay",
	.read = ov_read,
	.write = ov_write,
	.flush = ov_flush,
	.stats = ov_stats,
	.close = ov_close,
};

/* O_TMPFILE: never linked, so nothing is left behind however lkvm ends. */
static int tmpfile_open(void)
{
	const char *dir = getenv("TMPDIR");
	int fd = open(dir && *dir ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	return fd < 0 ? -errno : fd;
}

int disk_overlay_new(struct disk *base, struct disk **out, char *err, size_t errlen)
{
	struct overlay *ov = calloc(1, sizeof(*ov));
	u64 nr = base->size / OV_CLUSTER + 1;
	int ret = -ENOMEM;

	if (!ov || !(ov->bits = calloc(nr / 64 + 1, 8)) || !(ov->buf = malloc(OV_CLUSTER))) {
		errfmt(err, errlen, "snapshot=on: out of memory");
		goto fail;
	}
	ov->fd = tmpfile_open();
	if (ov->fd < 0) {
		ret = ov->fd;
		errfmt(err, errlen, "snapshot=on: no overlay file in %s (TMPDIR): %s",
		       getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", strerror(-ret));
		goto fail;
	}
	ov->base = base;
	ov->d.ops = &overlay_ops;
	ov->d.size = base->size;
	*out = &ov->d;
	return 0;
fail:
	if (ov) {
		free(ov->bits);
		free(ov->buf);
	}
	free(ov);
	disk_close(base);
	return ret;
}

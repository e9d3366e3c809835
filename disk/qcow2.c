/* The qcow2 backend (versions 2 and 3): the header's fields and its refusals, reads through the L1 and L2 tables (every entry checked as it is used) and the backing file. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lkvm/stats.h"
#include "qcow2.h"

u32 qcow2_be32(const u8 *p)
{
	u32 v;

	memcpy(&v, p, 4);
	return be32toh(v);
}

u64 qcow2_be64(const u8 *p)
{
	u64 v;

	memcpy(&v, p, 8);
	return be64toh(v);
}

void qcow2_hdr_parse(const u8 *h, struct qc_hdr *x)
{
	*x = (struct qc_hdr){
		.version = qcow2_be32(h + 4),
		.backing_off = qcow2_be64(h + 8),
		.backing_len = qcow2_be32(h + 16),
		.cbits = qcow2_be32(h + 20),
		.size = qcow2_be64(h + 24),
		.crypt = qcow2_be32(h + 32),
		.l1_size = qcow2_be32(h + 36),
		.l1_off = qcow2_be64(h + 40),
		.rt_off = qcow2_be64(h + 48),
		.rt_clusters = qcow2_be32(h + 56),
		.nb_snapshots = qcow2_be32(h + 60),
		.rorder = 4,
		.hdr_len = 72,
	};
	if (x->version >= 3) {
		x->incompat = qcow2_be64(h + 72);
		x->compat = qcow2_be64(h + 80);
		x->autoclear = qcow2_be64(h + 88);
		x->rorder = qcow2_be32(h + 96);
		x->hdr_len = qcow2_be32(h + 100);
	}
}

/* What lkvm does not do, by name: refused rather than misread. */
const char *qcow2_hdr_refused(const struct qc_hdr *x)
{
	if (x->crypt)
		return "encryption";
	if (x->incompat & 1)
		return "the dirty bit (lazy refcounts not replayed: qemu-img check -r all first)";
	if (x->incompat & 2)
		return "the corrupt bit (qemu-img check)";
	if (x->incompat & 4)
		return "an external data file";
	if (x->incompat & 8)
		return "a compression type other than zlib";
	if (x->incompat & 16)
		return "extended L2 entries (subclusters)";
	if (x->incompat)
		return "unknown incompatible feature bits";
	if (x->autoclear & 1)
		return "persistent bitmaps";
	if (x->autoclear)
		return "unknown autoclear feature bits";
	if (x->nb_snapshots)
		return "internal snapshots (qemu-img snapshot -l)";
	return NULL;
}

/* The geometry, every product bounded so nothing below overflows. */
const char *qcow2_hdr_bad(const struct qc_hdr *x, u64 fsize)
{
	u64 cs = 1ULL << (x->cbits & 63), l2e = cs / 8;

	if (x->version != 2 && x->version != 3)
		return "version (only 2 and 3)";
	if (x->cbits < 9 || x->cbits > 21)
		return "cluster size (512 bytes to 2 MiB)";
	if (x->rorder < 3 || x->rorder > 6)
		return "refcount width (8 to 64 bits)";
	if (x->hdr_len < 72 || x->hdr_len > cs || (x->version >= 3 && x->hdr_len < 104))
		return "header length";
	if (x->size > (1ULL << 55) || (u64)x->l1_size * 8 > MAX_L1_BYTES ||
	    (u64)x->l1_size * l2e * cs < x->size)
		return "L1 size for the disk size";
	if ((u64)x->rt_clusters * cs > MAX_RT_BYTES || !x->rt_clusters)
		return "refcount table size";
	if (fsize / cs > MAX_FILE_CLUSTERS)
		return "file size";
	if (x->backing_len > MAX_BACKING_NAME ||
	    (x->backing_len && (x->backing_off > cs || x->backing_len > cs - x->backing_off)))
		return "backing file name (not in the first cluster)";
	return NULL;
}

bool qcow2_host_ok(const struct qcow2 *q, u64 off)
{
	return off >= q->cs && !(off & (q->cs - 1)) && off < q->file_end;
}

/* A table of n big-endian u64 at off (inside the file), into host order. */
int qcow2_table_read(struct qcow2 *q, u64 off, u64 n, u64 **out)
{
	u64 *t;
	struct iovec v;
	int ret;

	/* Inside the file before any memory is taken for it. */
	if (!qcow2_host_ok(q, off) || n * 8 > q->file_end - off)
		return -EINVAL;
	t = calloc(n ? n : 1, 8);
	if (!t)
		return -ENOMEM;
	v = (struct iovec){ t, n * 8 };
	ret = disk_pread_zeros(q->fd, &v, 1, off, n * 8);
	for (u64 i = 0; ret == 0 && i < n; i++)
		t[i] = be64toh(t[i]);
	if (ret < 0)
		free(t);
	else
		*out = t;
	return ret;
}

/*
 * One L2 table is kept (the last one used): at 64 KiB clusters it maps 512 MiB, so a guest's
 * sequential I/O reads it once rather than an entry per request. It stays right because the
 * one queue thread changes entries only through qcow2_l2_put, and no data cluster can be a
 * table (open refuses an image where one is).
 */
int qcow2_l2_get(struct qcow2 *q, u64 gc, u64 *entry)
{
	u64 l2off = q->l1[gc / q->l2_entries] & QC_OFFSET_MASK;
	struct iovec io = { q->l2c, q->cs };
	int ret;

	*entry = 0;
	if (!l2off)
		return 0;
	if (l2off != q->l2c_off) {
		q->l2c_off = 0;
		ret = disk_pread_zeros(q->fd, &io, 1, l2off, q->cs);
		if (ret < 0)
			return ret;
		q->l2c_off = l2off;
	}
	*entry = be64toh(q->l2c[gc % q->l2_entries]);
	return 0;
}

int qcow2_l2_put(struct qcow2 *q, u64 l2off, u64 i, u64 entry)
{
	u64 be = htobe64(entry);
	struct iovec v = { &be, 8 };
	int ret = disk_pwrite_all(q->fd, &v, 1, l2off + i * 8, 8);

	/* A failed write may have been half done: the table is read again then. */
	if (l2off == q->l2c_off && ret == 0)
		q->l2c[i] = be;
	else if (l2off == q->l2c_off)
		q->l2c_off = 0;
	return ret;
}

/* The data cluster an L2 entry names, checked on every use (the guest writes into data
 * clusters, never into tables, but an entry is trusted only as far as it is checked):
 * 0 for none (zero or unallocated), the offset, or -EIO. */
static s64 l2_host(const struct qcow2 *q, u64 e)
{
	u64 off = e & QC_OFFSET_MASK;

	if (e & (QC_L2_RESERVED | QC_COMPRESSED))
		return -EIO;
	if (e & QC_ZERO || !off)
		return 0;
	return qcow2_host_ok(q, off) ? (s64)off : -EIO;
}

int qcow2_lower_read(struct qcow2 *q, u64 gc)
{
	u64 start = gc * q->cs, len = MIN(q->cs, q->d.size - start), in = 0;
	struct iovec v = { q->buf, q->cs };

	memset(q->buf, 0, q->cs);
	if (q->backing && start < q->backing->size)
		in = MIN(len, q->backing->size - start);
	v.iov_len = in;
	return in ? disk_read(q->backing, &v, 1, start, in) : 0;
}

/* One piece inside guest cluster gc: from the cluster, the backing file, or zeros. */
static int read_piece(struct qcow2 *q, const struct iovec *part, int k, u64 pos, u64 l)
{
	u64 gc = pos >> q->cbits, e, bl;
	s64 host;
	int ret = qcow2_l2_get(q, gc, &e);

	if (ret < 0)
		return ret;
	host = l2_host(q, e);
	if (host < 0)
		return (int)host;
	if (host)
		return disk_pread_zeros(q->fd, part, k, (u64)host + (pos & (q->cs - 1)), l);
	disk_iov_zero(part, k);
	if (e & QC_ZERO || !q->backing || pos >= q->backing->size)
		return 0;
	bl = MIN(l, q->backing->size - pos);
	{
		struct iovec sub[DISK_MAX_IOV];
		int m = disk_iov_slice(part, k, 0, bl, sub, DISK_MAX_IOV);

		return m < 0 ? m : disk_read(q->backing, sub, m, pos, bl);
	}
}

static int qcow2_read(struct disk *d, const struct iovec *iov, int n, u64 off, u64 len)
{
	struct qcow2 *q = (struct qcow2 *)d;
	struct iovec part[DISK_MAX_IOV];

	for (u64 done = 0; done < len;) {
		u64 pos = off + done, l = MIN(len - done, q->cs - (pos & (q->cs - 1)));
		int k = disk_iov_slice(iov, n, done, l, part, DISK_MAX_IOV), ret;

		if (k < 0)
			return k;
		ret = read_piece(q, part, k, pos, l);
		if (ret < 0)
			return ret;
		done += l;
	}
	return 0;
}

/* What the image's metadata promises reaches the disk with the data: one fdatasync. */
static int qcow2_flush(struct disk *d)
{
	struct qcow2 *q = (struct qcow2 *)d;
	int ret = fdatasync(q->fd) < 0 ? -errno : 0;

	return ret;
}

static void qcow2_stats(struct disk *d, struct stats_visitor *v)
{
	struct qcow2 *q = (struct qcow2 *)d;

	v->group(v, "qcow2");
	v->counter(v, "clusters", atomic_load_explicit(&q->nr_data, memory_order_relaxed));
	v->counter(v, "allocated", atomic_load_explicit(&q->nr_alloc, memory_order_relaxed));
}

static void qcow2_close(struct disk *d)
{
	struct qcow2 *q = (struct qcow2 *)d;

	disk_close(q->backing);
	close(q->fd);
	free(q->l1);
	free(q->rt);
	free(q->buf);
	free(q->l2c);
	free(q);
}

const struct disk_ops qcow2_ops = {
	.format = "qcow2",
	.read = qcow2_read,
	.write = qcow2_write,
	.flush = qcow2_flush,
	.stats = qcow2_stats,
	.close = qcow2_close,
};

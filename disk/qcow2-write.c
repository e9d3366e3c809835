/* qcow2 writes: in place into a cluster the image has, else a new cluster appended at the file's end, its refcount set before anything points at it. */
#include <endian.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/iov.h"
#include "qcow2.h"

/*
 * Write ordering. A new cluster goes through, in this order: its refcount (1) in its refcount
 * block (the block itself first, when the cluster is the first it covers, then the refcount
 * table's entry for it), the cluster's contents, and last the L1 or L2 entry that points at
 * it. Each step is a pwrite issued after the one before returned, by the one queue thread,
 * so whenever lkvm stops (a crash, a kill) the file holds at worst a cluster with a refcount
 * that nothing points at (a leak `qemu-img check -r leaks` reclaims), never an entry to a
 * cluster whose refcount is 0, which a later allocation would hand out twice. Durability is
 * the guest's FLUSH (fdatasync): the page cache may write these back in any order, so until a
 * FLUSH returns a power cut can lose the writes since the last one, as it can on a raw image;
 * no fdatasync between the steps keeps an allocating write one pwrite sequence.
 */

static int put_be64(struct qcow2 *q, u64 off, u64 val)
{
	u64 be = htobe64(val);
	struct iovec v = { &be, 8 };

	return disk_pwrite_all(q->fd, &v, 1, off, 8);
}

/* Refcount entry i of the block at rbo, rbits wide, big-endian. */
static int ref_put(struct qcow2 *q, u64 rbo, u64 i, u64 val)
{
	u64 w = q->rbits / 8;
	u8 b[8];
	struct iovec v = { b, w };

	for (u64 k = 0; k < w; k++)
		b[k] = (u8)(val >> (8 * (w - 1 - k)));
	return disk_pwrite_all(q->fd, &v, 1, rbo + i * w, w);
}

int qcow2_refcount(struct qcow2 *q, u64 off, u64 *ref)
{
	u64 c = off >> q->cbits, ti = c / q->rb_entries, w = q->rbits / 8, rbo;
	u8 b[8] = { 0 };
	struct iovec v = { b, w };
	int ret;

	*ref = 0;
	if (ti >= q->rt_entries || !(rbo = q->rt[ti] & QC_OFFSET_MASK))
		return 0;
	ret = disk_pread_zeros(q->fd, &v, 1, rbo + c % q->rb_entries * w, w);
	for (u64 k = 0; ret == 0 && k < w; k++)
		*ref = *ref << 8 | b[k];
	return ret;
}

/* The refcount block for table entry ti, made at the file's end: it covers itself (the
 * cluster there has index ti * rb_entries or more, and below (ti + 1) * rb_entries, since
 * the block was missing for the cluster that comes next), so its own refcount is its first
 * write; then the table's entry. */
static int new_refblock(struct qcow2 *q, u64 ti)
{
	u64 rbo = q->file_end, c = rbo >> q->cbits;
	struct iovec v = { q->buf, q->cs };
	int ret;

	if (c / q->rb_entries != ti)
		return -EIO; /* cannot be: the caller looked ti up from this very offset */
	memset(q->buf, 0, q->cs);
	ret = disk_pwrite_all(q->fd, &v, 1, rbo, q->cs);
	if (ret == 0)
		ret = ref_put(q, rbo, c % q->rb_entries, 1);
	if (ret == 0)
		ret = put_be64(q, q->rt_off + ti * 8, rbo);
	if (ret < 0)
		return ret;
	q->rt[ti] = rbo;
	q->file_end += q->cs;
	return 0;
}

/* A new cluster at the file's end, with refcount 1. -ENOSPC when the refcount table is full
 * (it is never moved or grown: QEMU's one cluster of it covers 16 TiB at 64 KiB clusters). */
static int alloc_cluster(struct qcow2 *q, u64 *out)
{
	for (;;) {
		u64 off = q->file_end, c = off >> q->cbits, ti = c / q->rb_entries;
		int ret;

		if (ti >= q->rt_entries || off > QC_OFFSET_MASK - q->cs)
			return -ENOSPC;
		if (!q->rt[ti]) {
			ret = new_refblock(q, ti);
			if (ret < 0)
				return ret;
			continue; /* the block took that cluster: the next one */
		}
		ret = ref_put(q, q->rt[ti] & QC_OFFSET_MASK, c % q->rb_entries, 1);
		if (ret < 0)
			return ret;
		q->file_end += q->cs;
		*out = off;
		return 0;
	}
}

/* The L2 table of guest cluster gc, made (zeroed, then pointed at from L1) when missing. */
static int l2_table(struct qcow2 *q, u64 gc, u64 *l2off)
{
	u64 i = gc / q->l2_entries, off;
	struct iovec v = { q->buf, q->cs };
	int ret;

	*l2off = q->l1[i] & QC_OFFSET_MASK;
	if (*l2off)
		return qcow2_host_ok(q, *l2off) ? 0 : -EIO;
	ret = alloc_cluster(q, &off);
	if (ret < 0)
		return ret;
	memset(q->buf, 0, q->cs);
	ret = disk_pwrite_all(q->fd, &v, 1, off, q->cs);
	if (ret == 0)
		ret = put_be64(q, q->l1_off + i * 8, off | QC_COPIED);
	if (ret < 0)
		return ret;
	q->l1[i] = off | QC_COPIED;
	*l2off = off;
	return 0;
}

/* The first write into guest cluster gc: its whole contents (what it read as, with the piece
 * over it) into a cluster of its own, a preallocated zero cluster's or a new one; then its L2
 * entry. */
static int write_new(struct qcow2 *q, u64 e, const struct iovec *part, int k, u64 pos, u64 l)
{
	u64 gc = pos >> q->cbits, host = e & QC_OFFSET_MASK, l2off;
	struct iovec v = { q->buf, q->cs };
	int ret = l2_table(q, gc, &l2off);

	/* Allocations first: a new refcount block is made in q->buf. */
	if (ret == 0 && !host) {
		ret = alloc_cluster(q, &host);
		if (ret == 0) {
			atomic_fetch_add_explicit(&q->nr_alloc, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&q->nr_data, 1, memory_order_relaxed);
		}
	}
	if (ret == 0 && e & QC_ZERO)
		memset(q->buf, 0, q->cs);
	else if (ret == 0)
		ret = qcow2_lower_read(q, gc);
	if (ret < 0)
		return ret;
	iov_from(part, k, 0, q->buf + (pos & (q->cs - 1)), l);
	ret = disk_pwrite_all(q->fd, &v, 1, host, q->cs);
	if (ret == 0)
		ret = qcow2_l2_put(q, l2off, gc % q->l2_entries, host | QC_COPIED);
	return ret;
}

static int write_piece(struct qcow2 *q, const struct iovec *part, int k, u64 pos, u64 l)
{
	u64 e, host;
	int ret = qcow2_l2_get(q, pos >> q->cbits, &e);

	if (ret < 0)
		return ret;
	host = e & QC_OFFSET_MASK;
	if (e & (QC_L2_RESERVED | QC_COMPRESSED) || (host && !qcow2_host_ok(q, host)))
		return -EIO;
	if (host && !(e & QC_ZERO))
		return disk_pwrite_all(q->fd, part, k, host + (pos & (q->cs - 1)), l);
	return write_new(q, e, part, k, pos, l);
}

int qcow2_write(struct disk *d, const struct iovec *iov, int n, u64 off, u64 len)
{
	struct qcow2 *q = (struct qcow2 *)d;
	struct iovec part[DISK_MAX_IOV];

	for (u64 done = 0; done < len;) {
		u64 pos = off + done, l = MIN(len - done, q->cs - (pos & (q->cs - 1)));
		int k = disk_iov_slice(iov, n, done, l, part, DISK_MAX_IOV), ret;

		if (k < 0)
			return k;
		ret = write_piece(q, part, k, pos, l);
		if (ret < 0)
			return ret;
		done += l;
	}
	return 0;
}

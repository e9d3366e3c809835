/* Opening a qcow2 image: the header and its extensions, the tables checked against the file (offsets inside it, no cluster used twice, each used cluster's refcount 1), and the backing file where the user allows it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qcow2.h"

/* Header extensions (qcow2 spec) that change how the image reads: refused by name. */
#define EXT_END 0
#define EXT_BACKING_FMT 0xe2792acaU
#define EXT_CRYPTO 0x0537be77U
#define EXT_DATA_FILE 0x44415441U
#define EXT_BITMAPS 0x23852875U

/* The map of the file's clusters at open: which are used, a second use is an overlap. */
struct usage {
	u64 *bits, n;
};

static int use(struct usage *u, const struct qcow2 *q, u64 off)
{
	u64 c = off >> q->cbits;

	if (c >= u->n)
		return -EINVAL;
	if (u->bits[c / 64] >> (c % 64) & 1)
		return -EEXIST;
	u->bits[c / 64] |= 1ULL << (c % 64);
	return 0;
}

/* Every cluster of [off, off + bytes): a table. */
static int use_range(struct usage *u, const struct qcow2 *q, u64 off, u64 bytes)
{
	for (u64 o = off; o < off + bytes; o += q->cs) {
		int ret = use(u, q, o);

		if (ret < 0)
			return ret;
	}
	return 0;
}

/* The L2 tables and the data clusters they name. */
static int use_l2(struct usage *u, struct qcow2 *q, const char **why)
{
	for (u32 i = 0; i < q->l1_size; i++) {
		u64 l2off = q->l1[i] & QC_OFFSET_MASK, *l2;
		int ret;

		if (q->l1[i] & QC_L1_RESERVED || (l2off && !qcow2_host_ok(q, l2off)))
			return *why = "an L1 entry", -EINVAL;
		if (!l2off)
			continue;
		ret = use(u, q, l2off);
		if (ret < 0)
			return *why = "an L2 table", ret;
		ret = qcow2_table_read(q, l2off, q->l2_entries, &l2);
		if (ret < 0)
			return *why = "an L2 table", ret;
		for (u64 j = 0; j < q->l2_entries && ret == 0; j++) {
			u64 off = l2[j] & QC_OFFSET_MASK;

			if (l2[j] & QC_COMPRESSED)
				ret = -ENOTSUP, *why = "compressed clusters";
			else if (l2[j] & QC_L2_RESERVED || (off && !qcow2_host_ok(q, off)))
				ret = -EINVAL, *why = "an L2 entry";
			else if (off && (ret = use(u, q, off)) < 0)
				*why = "a data cluster";
			if (off && ret == 0)
				atomic_fetch_add_explicit(&q->nr_data, 1, memory_order_relaxed);
		}
		free(l2);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/* Refcount i of a refcount block (big-endian, rbits wide). */
static u64 ref_at(const u8 *b, u64 i, u32 rbits)
{
	switch (rbits) {
	case 8:
		return b[i];
	case 16:
		return (u64)b[2 * i] << 8 | b[2 * i + 1];
	case 32:
		return qcow2_be32(b + 4 * i);
	default:
		return qcow2_be64(b + 8 * i);
	}
}

/* Each used cluster has refcount 1 (no snapshots: nothing is shared); an unused one with a
 * refcount is a leak, harmless. */
static int check_refs(const struct usage *u, struct qcow2 *q, const char **why)
{
	for (u64 c = 0; c < u->n; c += q->rb_entries) {
		u64 rbo = q->rt[c / q->rb_entries] & QC_OFFSET_MASK;
		struct iovec v = { q->buf, q->cs };
		int ret = rbo ? disk_pread_zeros(q->fd, &v, 1, rbo, q->cs) : 0;

		if (ret < 0)
			return *why = "a refcount block", ret;
		if (!rbo)
			memset(q->buf, 0, q->cs);
		for (u64 i = 0; i < q->rb_entries && c + i < u->n; i++) {
			bool used = u->bits[(c + i) / 64] >> ((c + i) % 64) & 1;

			if (used && ref_at(q->buf, i, q->rbits) != 1)
				return *why = "refcounts (qemu-img check -r all)", -EINVAL;
		}
	}
	return 0;
}

/* The header, the tables, every refcount block: then check_refs. */
static int check_tables(struct qcow2 *q, const char **why)
{
	struct usage u = { .n = q->file_end >> q->cbits };
	int ret;

	u.bits = calloc(u.n / 64 + 1, 8);
	if (!u.bits)
		return -ENOMEM;
	ret = use(&u, q, 0);
	if (ret == 0 && (ret = use_range(&u, q, q->l1_off, (u64)q->l1_size * 8)) < 0)
		*why = "the L1 table";
	if (ret == 0 && (ret = use_range(&u, q, q->rt_off, q->rt_entries * 8)) < 0)
		*why = "the refcount table";
	for (u64 i = 0; ret == 0 && i < q->rt_entries; i++) {
		u64 rbo = q->rt[i] & QC_OFFSET_MASK;

		if (q->rt[i] & ~QC_OFFSET_MASK || (rbo && !qcow2_host_ok(q, rbo)))
			ret = -EINVAL, *why = "a refcount table entry";
		else if (rbo && (ret = use(&u, q, rbo)) < 0)
			*why = "a refcount block";
	}
	if (ret == 0)
		ret = use_l2(&u, q, why);
	if (ret == 0)
		ret = check_refs(&u, q, why);
	free(u.bits);
	return ret;
}

/* The extensions after the header: a backing format, or a refused feature. */
static const char *read_exts(const u8 *c0, u64 cs, u32 start, char *bfmt, size_t bfmtlen)
{
	for (u64 p = start; p + 8 <= cs;) {
		u32 type = qcow2_be32(c0 + p), len = qcow2_be32(c0 + p + 4);

		if (type == EXT_END)
			return NULL;
		if (len > cs - p - 8)
			return "a header extension past the first cluster";
		if (type == EXT_CRYPTO)
			return "encryption";
		if (type == EXT_DATA_FILE)
			return "an external data file";
		if (type == EXT_BITMAPS)
			return "persistent bitmaps";
		if (type == EXT_BACKING_FMT && len < bfmtlen) {
			memcpy(bfmt, c0 + p + 8, len);
			bfmt[len] = '\0';
		}
		p += 8 + (((u64)len + 7) & ~7ULL);
	}
	return NULL;
}

/* The backing file: the path the user named (backing=), else the image's name for it, only
 * when that is a plain name in the image's own directory, opened there without following a
 * symlink. Then its format, by the image's backing format extension or its magic. */
static int open_backing(struct qcow2 *q, const char *path, const char *name, const char *allowed,
			const char *bfmt, int depth, char *err, size_t errlen)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX], bpath[2 * PATH_MAX];
	enum disk_fmt fmt = DISK_RAW;
	int fd, ret;

	if (depth + 1 > QCOW2_MAX_CHAIN) {
		errfmt(err, errlen, "-d '%s': backing chain deeper than %d (a loop?)", path,
		       QCOW2_MAX_CHAIN);
		return -ELOOP;
	}
	if (allowed) {
		snprintf(bpath, sizeof(bpath), "%s", allowed);
		fd = open(allowed, O_RDONLY | O_CLOEXEC);
	} else if (strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") || !*name) {
		errfmt(err, errlen,
		       "-d '%s': backing file '%s' is not beside the image; allow it with -d %s,backing=PATH",
		       path, name, path);
		return -EPERM;
	} else {
		snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path + 1) : 2,
			 slash ? path : "./");
		snprintf(bpath, sizeof(bpath), "%s%s", dir, name);
		int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);

		fd = dfd < 0 ? -1 : openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd >= 0)
			close(dfd);
	}
	if (fd < 0 || disk_probe_fd(fd, &fmt) < 0) {
		ret = -errno;
		errfmt(err, errlen, "-d '%s': backing file '%s': %s", path, bpath, strerror(errno));
		if (fd >= 0)
			close(fd);
		return ret;
	}
	if (!strcmp(bfmt, "raw"))
		fmt = DISK_RAW;
	else if (!strcmp(bfmt, "qcow2"))
		fmt = DISK_QCOW2;
	if (fmt == DISK_QCOW2)
		return qcow2_open(fd, bpath, true, NULL, depth + 1, &q->backing, err, errlen);
	ret = disk_raw_new(fd, true, &q->backing);
	if (ret < 0)
		errfmt(err, errlen, "-d '%s': backing file '%s' is not a regular file", path, name);
	return ret;
}

/* The geometry from the header, the file's end, the scratch cluster. */
static int geometry(struct qcow2 *q, const struct qc_hdr *x, u64 fsize, bool ro)
{
	q->cbits = x->cbits;
	q->cs = 1ULL << x->cbits;
	q->l2_entries = q->cs / 8;
	q->rbits = 1U << x->rorder;
	q->rb_entries = q->cs * 8 / q->rbits;
	q->l1_off = x->l1_off;
	q->l1_size = x->l1_size;
	q->rt_off = x->rt_off;
	q->rt_entries = (u64)x->rt_clusters * q->cs / 8;
	q->file_end = (fsize + q->cs - 1) & ~(q->cs - 1);
	q->d.ops = &qcow2_ops;
	q->d.size = x->size;
	q->d.ro = ro;
	q->buf = malloc(q->cs);
	q->l2c = malloc(q->cs);
	return q->buf && q->l2c ? 0 : -ENOMEM;
}

/* Header, extensions and tables: 0, or -errno with what is wrong in why. */
static int load(struct qcow2 *q, u8 *c0, struct qc_hdr *x, u64 fsize, bool ro, char *bfmt,
		const char **why)
{
	struct iovec v = { c0, 104 };
	int ret = disk_pread_zeros(q->fd, &v, 1, 0, 104);

	if (ret < 0)
		return *why = "header", ret;
	qcow2_hdr_parse(c0, x);
	if ((*why = qcow2_hdr_bad(x, fsize)))
		return -EINVAL;
	if ((*why = qcow2_hdr_refused(x)))
		return -ENOTSUP;
	ret = geometry(q, x, fsize, ro);
	v = (struct iovec){ c0, q->cs };
	if (ret == 0)
		ret = disk_pread_zeros(q->fd, &v, 1, 0, q->cs);
	if (ret < 0)
		return *why = "header", ret;
	if ((*why = read_exts(c0, q->cs, x->hdr_len, bfmt, 16)))
		return -ENOTSUP;
	if ((ret = qcow2_table_read(q, q->l1_off, q->l1_size, &q->l1)) < 0)
		return *why = "the L1 table's place", ret;
	if ((ret = qcow2_table_read(q, q->rt_off, q->rt_entries, &q->rt)) < 0)
		return *why = "the refcount table's place", ret;
	return check_tables(q, why);
}

int qcow2_open(int fd, const char *path, bool ro, const char *backing, int depth, struct disk **out,
	       char *err, size_t errlen)
{
	struct qcow2 *q = calloc(1, sizeof(*q));
	u8 *c0 = malloc(1U << 21);
	char bfmt[17] = "", name[MAX_BACKING_NAME + 1];
	const char *why = "memory";
	struct qc_hdr x;
	struct stat st;
	int ret = -ENOMEM;

	*out = NULL;
	if (q)
		q->fd = fd;
	if (q && c0 && fstat(fd, &st) == 0)
		ret = load(q, c0, &x, (u64)st.st_size, ro, bfmt, &why);
	if (ret < 0) {
		errfmt(err, errlen, "-d '%s': qcow2 %s: %s", path, why,
		       ret == -ENOTSUP ? "not supported" : strerror(-ret));
		goto fail;
	}
	if (x.backing_len) {
		memcpy(name, c0 + x.backing_off, x.backing_len);
		name[x.backing_len] = '\0';
		ret = open_backing(q, path, name, backing, bfmt, depth, err, errlen);
		if (ret < 0)
			goto fail;
	}
	free(c0);
	*out = &q->d;
	return 0;
fail:
	free(c0);
	if (q)
		qcow2_ops.close(&q->d);
	else
		close(fd);
	return ret;
}

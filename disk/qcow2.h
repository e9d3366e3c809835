/* The qcow2 backend's private header: the image's geometry and tables as disk/qcow2*.c share them, and the entry point disk.c calls. */
#ifndef LKVM_DISK_QCOW2_H
#define LKVM_DISK_QCOW2_H

#include "lkvm/disk.h"

#define QCOW2_MAGIC "QFI\xfb"
#define QCOW2_MAX_CHAIN 8 /* backing files below an image: deeper is refused (a loop, say) */

/* L1 and L2 entries (qcow2 spec): the host offset, the flags, and the bits that must be 0. */
#define QC_OFFSET_MASK 0x00fffffffffffe00ULL
#define QC_COPIED (1ULL << 63)
#define QC_COMPRESSED (1ULL << 62)
#define QC_ZERO 1ULL
#define QC_L1_RESERVED (~(QC_OFFSET_MASK | QC_COPIED))
#define QC_L2_RESERVED (~(QC_OFFSET_MASK | QC_COPIED | QC_COMPRESSED | QC_ZERO))

struct qcow2 {
	struct disk d;
	int fd;
	u32 cbits;	      /* cluster size = 1 << cbits */
	u64 cs, l2_entries;   /* bytes per cluster, entries per L2 table */
	u32 rbits;	      /* bits per refcount (1 << refcount_order) */
	u64 rb_entries;	      /* refcounts per refcount block */
	u64 *l1, l1_off;      /* the L1 table (host byte order), where it is */
	u32 l1_size;	      /* its entries */
	u64 *rt, rt_off;      /* the refcount table (host byte order), where it is */
	u64 rt_entries;	      /* its entries */
	u64 file_end;	      /* the file's size rounded up to a cluster: new clusters go here */
	struct disk *backing; /* NULL: unallocated clusters read as zeros */
	u8 *buf;	      /* one cluster, for copies */
	u64 *l2c, l2c_off;    /* the L2 table read last (big-endian, as in the file), where */
	/* Data clusters in the image, clusters allocated by this run (lkvm stat reads them). */
	atomic_ullong nr_data, nr_alloc;
};

/* The qcow2 image open on fd (owned from now on, closed on failure too), path its name (for
 * messages and the backing file's directory); backing: a backing file the user allows; depth:
 * how many images are above this one. */
int qcow2_open(int fd, const char *path, bool ro, const char *backing, int depth, struct disk **out,
	       char *err, size_t errlen) __must_check;

#define MAX_L1_BYTES (32ULL << 20)     /* QEMU's bound too: 32 MiB of L1 maps 256 TiB at 64 KiB */
#define MAX_RT_BYTES (8ULL << 20)      /* QEMU's bound on the refcount table */
#define MAX_FILE_CLUSTERS (1ULL << 30) /* the open-time map of the file: at most 128 MiB of bits */
#define MAX_BACKING_NAME 1023

/* The header fields read (qcow2 spec, big-endian on disk). */
struct qc_hdr {
	u32 version, backing_len, cbits, crypt, l1_size, rt_clusters, nb_snapshots;
	u64 backing_off, size, l1_off, rt_off;
	u64 incompat, compat, autoclear;
	u32 rorder, hdr_len;
};

/* qcow2.c */
extern const struct disk_ops qcow2_ops;
u32 qcow2_be32(const u8 *p);
u64 qcow2_be64(const u8 *p);
void qcow2_hdr_parse(const u8 *h, struct qc_hdr *x);
/* A feature lkvm refuses, named (NULL: none). */
const char *qcow2_hdr_refused(const struct qc_hdr *x);
/* A field out of range, named (NULL: none); fsize the file's size. */
const char *qcow2_hdr_bad(const struct qc_hdr *x, u64 fsize);
/* A table of n big-endian u64 at off (inside the file), into host order. 0 or -errno. */
int qcow2_table_read(struct qcow2 *q, u64 off, u64 n, u64 **out) __must_check;
/* A host cluster offset from a table is one of the image's: aligned, past the header, inside
 * the file. */
bool qcow2_host_ok(const struct qcow2 *q, u64 off);
/* The L2 entry of guest cluster gc (0 when its L2 table is not there): 0 or -errno. */
int qcow2_l2_get(struct qcow2 *q, u64 gc, u64 *entry) __must_check;
/* Set entry i of the L2 table at l2off, in the file and in the cached copy. */
int qcow2_l2_put(struct qcow2 *q, u64 l2off, u64 i, u64 entry) __must_check;
/* Guest cluster gc as the image shows it before any cluster of its own is allocated: the
 * backing file's bytes (zeros past its end), or zeros, into q->buf. */
int qcow2_lower_read(struct qcow2 *q, u64 gc) __must_check;

/* qcow2-write.c */
int qcow2_write(struct disk *d, const struct iovec *iov, int n, u64 off, u64 len);
/* Refcount of host cluster at byte offset off: 0 or -errno. */
int qcow2_refcount(struct qcow2 *q, u64 off, u64 *ref) __must_check;

#endif

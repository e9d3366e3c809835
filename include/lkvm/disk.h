/* Disk image backends behind virtio-blk (raw files, qcow2 images, a private copy-on-write overlay), read and written by guest byte offset through iovecs. */
#ifndef LKVM_DISK_H
#define LKVM_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

#include "lkvm/util.h"

#define DISK_MAX_IOV 1024 /* iovecs in one transfer (a virtqueue chain's most) */

struct disk;
struct stats_visitor;

/* A backend. The caller (disk_read, disk_write) has checked off + len <= d->size and that
 * the disk is writable; every op returns 0 or -errno and is called by one thread at a time. */
struct disk_ops {
	const char *format; /* "raw", "qcow2", "overlay" */
	int (*read)(struct disk *d, const struct iovec *iov, int n, u64 off, u64 len);
	int (*write)(struct disk *d, const struct iovec *iov, int n, u64 off, u64 len);
	int (*flush)(struct disk *d);
	void (*stats)(struct disk *d, struct stats_visitor *v); /* may be NULL */
	void (*close)(struct disk *d);
};

struct disk {
	const struct disk_ops *ops;
	u64 size; /* guest-visible bytes */
	bool ro;
};

enum disk_fmt { DISK_RAW, DISK_QCOW2 };

/* How to open an image: read-only, behind a private overlay (snapshot=on: the image itself
 * is then opened read-only), and a backing file the user allows (NULL: only beside it). */
struct disk_opts {
	const char *path;
	bool ro, snapshot;
	const char *backing;
};

/* The format of the image at path, by its first bytes: 0 or -errno. */
int disk_probe(const char *path, enum disk_fmt *fmt) __must_check;
int disk_probe_fd(int fd, enum disk_fmt *fmt) __must_check;
/* Open the image at o->path in its format (and its backing chain), behind an overlay for
 * o->snapshot. 0 or -errno with a one-line reason in err. */
int disk_open(const struct disk_opts *o, struct disk **out, char *err, size_t errlen) __must_check;
/* Lock the image open as fd, for writing (a writer excludes every other opener) or, ro, for
 * reading (readers share it), as QEMU does (disk/lock.c). 0, or -EBUSY with "disk PATH is in use
 * by another process (...)" in err, or -errno. The lock lives as long as fd's open file. */
int disk_lock(int fd, bool ro, const char *path, char *err, size_t errlen) __must_check;
/* A raw backend on fd (owned from now on, closed by disk_close). */
int disk_raw_new(int fd, bool ro, struct disk **out) __must_check;
/* A private overlay over base (owned from now on): an unlinked sparse file in $TMPDIR (else
 * /tmp) holds the clusters written, a bitmap says which; both vanish with the disk. */
int disk_overlay_new(struct disk *base, struct disk **out, char *err, size_t errlen) __must_check;

/* Bounds- and read-only-checked entry points (-EINVAL past the end, -EROFS). */
int disk_read(struct disk *d, const struct iovec *iov, int n, u64 off, u64 len) __must_check;
int disk_write(struct disk *d, const struct iovec *iov, int n, u64 off, u64 len) __must_check;
int disk_flush(struct disk *d) __must_check;
void disk_stats(struct disk *d, struct stats_visitor *v);
const char *disk_format(const struct disk *d);
void disk_close(struct disk *d); /* NULL is fine */

/* The byte range [off, off + len) of src (n iovecs) as at most max iovecs in dst: their
 * count, or -EINVAL when it does not fit or src is shorter. */
int disk_iov_slice(const struct iovec *src, int n, u64 off, u64 len, struct iovec *dst, int max);
/* preadv/pwritev of the whole range, retried over short transfers; -EIO at end of file. */
int disk_pread_all(int fd, const struct iovec *iov, int n, u64 off, u64 len) __must_check;
/* The same read, where the end of the file reads as zeros (qcow2: a last cluster cut short). */
int disk_pread_zeros(int fd, const struct iovec *iov, int n, u64 off, u64 len) __must_check;
/* Zeros into the iovecs. */
void disk_iov_zero(const struct iovec *iov, int n);
int disk_pwrite_all(int fd, const struct iovec *iov, int n, u64 off, u64 len) __must_check;

#endif

/* The disk interface's common part: format probing, opening an image as its backend (and an overlay for snapshot=on), bounds checks, iovec slicing, and the raw backend. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lkvm/disk.h"
#include "qcow2.h"

#define SECTOR 512ULL

int disk_iov_slice(const struct iovec *src, int n, u64 off, u64 len, struct iovec *dst, int max)
{
	int k = 0;

	for (int i = 0; i < n && len; i++) {
		u64 l = src[i].iov_len;

		if (off >= l) {
			off -= l;
			continue;
		}
		if (k == max)
			return -EINVAL;
		l = MIN(l - off, len);
		dst[k++] = (struct iovec){ (u8 *)src[i].iov_base + off, l };
		len -= l;
		off = 0;
	}
	return len ? -EINVAL : k;
}

void disk_iov_zero(const struct iovec *iov, int n)
{
	for (int i = 0; i < n; i++)
		memset(iov[i].iov_base, 0, iov[i].iov_len);
}

/* Both directions: whole transfers, EINTR and short counts retried; a read that meets the end
 * of the file is -EIO, or with zeros the rest reads as zeros. */
static int rw_all(int fd, const struct iovec *iov, int n, u64 off, u64 len, bool wr, bool zeros)
{
	struct iovec rest[DISK_MAX_IOV];
	u64 done = 0;

	while (done < len) {
		int k = disk_iov_slice(iov, n, done, len - done, rest, DISK_MAX_IOV);
		ssize_t got;

		if (k < 0)
			return k;
		got = wr ? pwritev(fd, rest, k, (off_t)(off + done))
			 : preadv(fd, rest, k, (off_t)(off + done));
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (got == 0 && zeros && !wr) {
			disk_iov_zero(rest, k);
			return 0;
		}
		if (got == 0)
			return -EIO; /* end of file inside the range */
		done += (u64)got;
	}
	return 0;
}

int disk_pread_all(int fd, const struct iovec *iov, int n, u64 off, u64 len)
{
	return rw_all(fd, iov, n, off, len, false, false);
}

int disk_pread_zeros(int fd, const struct iovec *iov, int n, u64 off, u64 len)
{
	return rw_all(fd, iov, n, off, len, false, true);
}

int disk_pwrite_all(int fd, const struct iovec *iov, int n, u64 off, u64 len)
{
	return rw_all(fd, iov, n, off, len, true, false);
}

/* ---- raw ---- */

struct raw_disk {
	struct disk d;
	int fd;
};

static int raw_read(struct disk *d, const struct iovec *iov, int n, u64 off, u64 len)
{
	return disk_pread_all(((struct raw_disk *)d)->fd, iov, n, off, len);
}

static int raw_write(struct disk *d, const struct iovec *iov, int n, u64 off, u64 len)
{
	return disk_pwrite_all(((struct raw_disk *)d)->fd, iov, n, off, len);
}

static int raw_flush(struct disk *d)
{
	return fdatasync(((struct raw_disk *)d)->fd) < 0 ? -errno : 0;
}

static void raw_close(struct disk *d)
{
	close(((struct raw_disk *)d)->fd);
	free(d);
}

static const struct disk_ops raw_ops = {
	.format = "raw",
	.read = raw_read,
	.write = raw_write,
	.flush = raw_flush,
	.close = raw_close,
};

int disk_raw_new(int fd, bool ro, struct disk **out)
{
	struct raw_disk *r = calloc(1, sizeof(*r));
	struct stat st;

	if (!r || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		int ret = !r ? -ENOMEM : -EINVAL;

		free(r);
		close(fd);
		return ret;
	}
	r->fd = fd;
	r->d.ops = &raw_ops;
	r->d.size = (u64)st.st_size & ~(SECTOR - 1);
	r->d.ro = ro;
	*out = &r->d;
	return 0;
}

/* ---- opening ---- */

int disk_probe_fd(int fd, enum disk_fmt *fmt)
{
	u8 magic[4];
	ssize_t got = pread(fd, magic, sizeof(magic), 0);

	if (got < 0)
		return -errno;
	*fmt = got == 4 && !memcmp(magic, QCOW2_MAGIC, 4) ? DISK_QCOW2 : DISK_RAW;
	return 0;
}

int disk_probe(const char *path, enum disk_fmt *fmt)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret;

	if (fd < 0)
		return -errno;
	ret = disk_probe_fd(fd, fmt);
	close(fd);
	return ret;
}

int disk_open(const struct disk_opts *o, struct disk **out, char *err, size_t errlen)
{
	/* Under an overlay nothing writes the image: it is opened read-only. */
	bool ro = o->ro || o->snapshot;
	int fd = open(o->path, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC), ret;
	enum disk_fmt fmt;
	struct disk *d;

	*out = NULL;
	if (fd < 0 || (ret = disk_probe_fd(fd, &fmt)) < 0) {
		ret = -errno;
		errfmt(err, errlen, "-d '%s': %s", o->path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return ret;
	}
	if (fmt == DISK_QCOW2)
		ret = qcow2_open(fd, o->path, ro, o->backing, 0, &d, err, errlen);
	else if ((ret = disk_raw_new(fd, ro, &d)) < 0)
		errfmt(err, errlen, "-d '%s': not a regular file", o->path);
	if (ret < 0)
		return ret;
	if (o->snapshot) {
		ret = disk_overlay_new(d, &d, err, errlen);
		if (ret < 0)
			return ret;
		d->ro = o->ro;
	}
	*out = d;
	return 0;
}

/* ---- checked entry points ---- */

static bool in_range(const struct disk *d, u64 off, u64 len)
{
	return off <= d->size && len <= d->size - off;
}

int disk_read(struct disk *d, const struct iovec *iov, int n, u64 off, u64 len)
{
	return in_range(d, off, len) ? d->ops->read(d, iov, n, off, len) : -EINVAL;
}

int disk_write(struct disk *d, const struct iovec *iov, int n, u64 off, u64 len)
{
	if (d->ro)
		return -EROFS;
	return in_range(d, off, len) ? d->ops->write(d, iov, n, off, len) : -EINVAL;
}

int disk_flush(struct disk *d)
{
	return d->ops->flush(d);
}

void disk_stats(struct disk *d, struct stats_visitor *v)
{
	if (d->ops->stats)
		d->ops->stats(d, v);
}

const char *disk_format(const struct disk *d)
{
	return d->ops->format;
}

void disk_close(struct disk *d)
{
	if (d)
		d->ops->close(d);
}

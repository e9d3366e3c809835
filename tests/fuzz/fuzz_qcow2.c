/* Fuzz target: the qcow2 header and table parser (disk/qcow2-open.c) on an image of the input's bytes in a memfd, then reads and writes through it (disk/qcow2.c, qcow2-write.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "lkvm/disk.h"
#include "../../disk/qcow2.h"

/*
 * Input: 32 bytes of control, then the image file. Control: 4 operations of 8 bytes, each a
 * flag byte (bit 0: write, bit 7 of the first: open read-write), an offset (u32, taken modulo
 * the disk size) and a length (u16, clipped to the disk). The backing file, if the image names
 * one, is always a 64 KiB raw memfd of a pattern (backing=, so nothing of the host is opened).
 * Checked: open accepts or refuses with a one-line reason; on an accepted image every
 * operation completes or fails with -errno, and a write that completed reads back.
 */
#define CTL 32
#define MAX_LEN 65536

static int memfd_of(const void *data, size_t len)
{
	int fd = memfd_create("fuzz-qcow2", MFD_CLOEXEC);

	FUZZ_ASSERT(fd >= 0);
	FUZZ_ASSERT(len == 0 || write(fd, data, len) == (ssize_t)len);
	return fd;
}

static void one_op(struct disk *d, const uint8_t *c, u8 *buf, u8 *back)
{
	u64 off, len;
	struct iovec v = { buf, 0 };
	uint32_t o;
	uint16_t l;

	if (!d->size)
		return;
	memcpy(&o, c + 1, 4);
	memcpy(&l, c + 5, 2);
	off = o % d->size;
	len = MIN((u64)l + 1, d->size - off);
	v.iov_len = len;
	if (!(c[0] & 1) || d->ro) {
		int r = disk_read(d, &v, 1, off, len);

		FUZZ_ASSERT(r == 0 || r < 0);
		return;
	}
	for (u64 i = 0; i < len; i++)
		buf[i] = (u8)(i * 11 + c[0]);
	if (disk_write(d, &v, 1, off, len) != 0)
		return;
	v.iov_base = back;
	if (disk_read(d, &v, 1, off, len) == 0)
		FUZZ_ASSERT(!memcmp(buf, back, len));
}

int fuzz_qcow2(const uint8_t *data, size_t size)
{
	static u8 pattern[65536], buf[MAX_LEN], back[MAX_LEN];
	char err[512] = "", bpath[64];
	struct disk *d = NULL;
	int fd, bfd, r;

	if (size < CTL)
		return 0;
	for (size_t i = 0; i < sizeof(pattern); i++)
		pattern[i] = (u8)(i * 7 + 1);
	fd = memfd_of(data + CTL, size - CTL);
	bfd = memfd_of(pattern, sizeof(pattern));
	snprintf(bpath, sizeof(bpath), "/proc/self/fd/%d", bfd);
	r = qcow2_open(fd, "fuzz.qcow2", !(data[0] & 0x80), bpath, 0, &d, err, sizeof(err));
	if (r < 0) {
		FUZZ_ASSERT(!d && err[0] && !strchr(err, '\n'));
	} else {
		for (int i = 0; i < 4; i++)
			one_op(d, data + 8 * i, buf, back);
		disk_close(d);
	}
	close(bfd);
	return 0;
}

/* iovec copy helpers shared by the virtio devices and the network backends. */
#include <string.h>

#include "lkvm/iov.h"

size_t iov_length(const struct iovec *iov, int cnt)
{
	size_t t = 0;

	for (int i = 0; i < cnt; i++)
		t += iov[i].iov_len;
	return t;
}

/* Walks to byte `off`, then copies chunk by chunk in the direction asked. */
static size_t iov_copy(const struct iovec *iov, int cnt, u64 off, u8 *flat, size_t len, bool to_iov)
{
	size_t done = 0;

	for (int i = 0; i < cnt && done < len; i++) {
		size_t k;

		if (off >= iov[i].iov_len) {
			off -= iov[i].iov_len;
			continue;
		}
		k = MIN(iov[i].iov_len - off, len - done);
		if (to_iov)
			memcpy((u8 *)iov[i].iov_base + off, flat + done, k);
		else
			memcpy(flat + done, (const u8 *)iov[i].iov_base + off, k);
		done += k;
		off = 0;
	}
	return done;
}

size_t iov_from(const struct iovec *iov, int cnt, u64 off, void *dst, size_t len)
{
	return iov_copy(iov, cnt, off, dst, len, false);
}

size_t iov_to(const struct iovec *iov, int cnt, u64 off, const void *src, size_t len)
{
	/* iov_copy only reads from `flat` in this direction. */
	return iov_copy(iov, cnt, off, (u8 *)(uintptr_t)src, len, true);
}

/* Copies between flat buffers and iovec arrays, every copy bounded by the iovecs themselves. */
#ifndef LKVM_IOV_H
#define LKVM_IOV_H

#include <sys/uio.h>

#include "lkvm/util.h"

/* Total bytes described by the array. */
size_t iov_length(const struct iovec *iov, int cnt);
/* Copy up to len bytes starting at byte offset off of the iovec data into dst;
 * returns the bytes copied (less than len when the iovecs end first). */
size_t iov_from(const struct iovec *iov, int cnt, u64 off, void *dst, size_t len);
/* Copy up to len bytes of src into the iovec data starting at byte offset off. */
size_t iov_to(const struct iovec *iov, int cnt, u64 off, const void *src, size_t len);

#endif

/* QEMU's stream socket framing (4-byte big-endian length, then the frame): partial reads and writes kept across wake-ups. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "lkvm/iov.h"
#include "lkvm/net-stream.h"

int net_stream_rx_init(struct net_stream_rx *rx)
{
	memset(rx, 0, sizeof(*rx));
	rx->buf = malloc(NET_STREAM_MAX_FRAME);
	return rx->buf ? 0 : -ENOMEM;
}

void net_stream_rx_free(struct net_stream_rx *rx)
{
	free(rx->buf);
	rx->buf = NULL;
}

static bool rx_whole(const struct net_stream_rx *rx)
{
	return rx->have >= NET_STREAM_LEN_BYTES && rx->have == NET_STREAM_LEN_BYTES + rx->len;
}

void net_stream_rx_want(const struct net_stream_rx *rx, void **at, size_t *len)
{
	if (rx->err || rx_whole(rx)) {
		*at = NULL;
		*len = 0;
	} else if (rx->have < NET_STREAM_LEN_BYTES) {
		*at = (u8 *)rx->len_be + rx->have;
		*len = NET_STREAM_LEN_BYTES - rx->have;
	} else {
		*at = rx->buf + (rx->have - NET_STREAM_LEN_BYTES);
		*len = NET_STREAM_LEN_BYTES + rx->len - rx->have;
	}
}

ssize_t net_stream_rx_got(struct net_stream_rx *rx, size_t n)
{
	void *at;
	size_t want;

	if (rx->err)
		return rx->err;
	net_stream_rx_want(rx, &at, &want);
	if (n > want)
		n = want; /* a caller's bug: never let it move past the record */
	if (n == 0 && want) {
		rx->err = rx->have ? -EPROTO : -EPIPE;
		return rx->err;
	}
	rx->have += (u32)n;
	if (rx->have == NET_STREAM_LEN_BYTES) {
		rx->len = (u32)rx->len_be[0] << 24 | (u32)rx->len_be[1] << 16 |
			  (u32)rx->len_be[2] << 8 | rx->len_be[3];
		if (rx->len > NET_STREAM_MAX_FRAME) {
			rx->err = -EMSGSIZE;
			return rx->err;
		}
		if (rx->len == 0)
			rx->have = 0; /* an empty record: nothing to deliver, the next one starts */
		return 0;
	}
	return rx_whole(rx) ? (ssize_t)rx->len : 0;
}

ssize_t net_stream_rx_read(struct net_stream_rx *rx, int fd)
{
	for (;;) {
		struct iovec v;
		ssize_t n, r;

		if (rx->err)
			return rx->err;
		if (rx_whole(rx))
			return rx->len;
		net_stream_rx_want(rx, &v.iov_base, &v.iov_len);
		/* readv, not read: the net threads' filter allows readv on the backend's fds. */
		do
			n = readv(fd, &v, 1);
		while (n < 0 && errno == EINTR);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			rx->err = -errno;
			return rx->err;
		}
		r = net_stream_rx_got(rx, (size_t)n);
		if (r != 0)
			return r;
	}
}

void net_stream_rx_next(struct net_stream_rx *rx)
{
	if (rx_whole(rx)) {
		rx->have = 0;
		rx->len = 0;
	}
}

int net_stream_tx_init(struct net_stream_tx *tx)
{
	memset(tx, 0, sizeof(*tx));
	tx->rest = malloc(NET_STREAM_LEN_BYTES + NET_STREAM_MAX_FRAME);
	return tx->rest ? 0 : -ENOMEM;
}

void net_stream_tx_free(struct net_stream_tx *tx)
{
	free(tx->rest);
	tx->rest = NULL;
}

/* writev on a non-blocking socket: bytes taken, -EAGAIN, or -errno (the stream ended). */
static ssize_t tx_writev(struct net_stream_tx *tx, int fd, const struct iovec *iov, int cnt)
{
	ssize_t n;

	/* writev, not send(MSG_NOSIGNAL): the net threads' filter allows writev on the
	 * backend's fds; lkvm ignores SIGPIPE (builtin/run.c), so a closed peer is EPIPE. */
	do
		n = writev(fd, iov, cnt);
	while (n < 0 && errno == EINTR);
	if (n >= 0)
		return n;
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		return -EAGAIN;
	tx->err = -errno;
	return tx->err;
}

int net_stream_tx_flush(struct net_stream_tx *tx, int fd)
{
	while (!tx->err && net_stream_tx_pending(tx)) {
		struct iovec v = { tx->rest + tx->rest_off, tx->rest_len - tx->rest_off };
		ssize_t n = tx_writev(tx, fd, &v, 1);

		if (n < 0)
			return (int)n;
		tx->rest_off += (size_t)n;
	}
	return tx->err;
}

ssize_t net_stream_tx_send(struct net_stream_tx *tx, int fd, const struct iovec *iov, int cnt,
			   size_t len)
{
	struct iovec v[IOV_MAX];
	u8 len_be[NET_STREAM_LEN_BYTES] = { (u8)(len >> 24), (u8)(len >> 16), (u8)(len >> 8),
					    (u8)len };
	size_t total = NET_STREAM_LEN_BYTES + len;
	ssize_t n;
	int r;

	if (tx->err)
		return tx->err;
	if (len == 0 || len > NET_STREAM_MAX_FRAME || cnt < 0 || iov_length(iov, cnt) != len)
		return -EMSGSIZE;
	r = net_stream_tx_flush(tx, fd);
	if (r < 0)
		return r;
	if (cnt > IOV_MAX - 1) {
		/* No room for the length's iovec: the record goes through the rest buffer. */
		memcpy(tx->rest, len_be, sizeof(len_be));
		iov_from(iov, cnt, 0, tx->rest + sizeof(len_be), len);
		tx->rest_off = 0;
		tx->rest_len = total;
		r = net_stream_tx_flush(tx, fd);
		return r < 0 && r != -EAGAIN ? r : (ssize_t)len;
	}
	v[0] = (struct iovec){ len_be, sizeof(len_be) };
	memcpy(&v[1], iov, (size_t)cnt * sizeof(*iov));
	n = tx_writev(tx, fd, v, cnt + 1);
	if (n < 0)
		return n;
	if ((size_t)n < total) {
		/* The socket took part of the record: keep the rest, to go before anything else. */
		size_t off = (size_t)n;

		tx->rest_len = total - off;
		tx->rest_off = 0;
		if (off < sizeof(len_be)) {
			memcpy(tx->rest, len_be + off, sizeof(len_be) - off);
			iov_from(iov, cnt, 0, tx->rest + sizeof(len_be) - off, len);
		} else {
			iov_from(iov, cnt, off - sizeof(len_be), tx->rest, tx->rest_len);
		}
	}
	return (ssize_t)len;
}

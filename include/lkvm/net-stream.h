/* QEMU's stream socket framing (each frame preceded by its 4-byte big-endian length), as passt speaks it. */
#ifndef LKVM_NET_STREAM_H
#define LKVM_NET_STREAM_H

#include <sys/types.h>
#include <sys/uio.h>

#include "lkvm/util.h"

/* The largest frame either side carries: 64 KiB of GSO payload plus Ethernet and VLAN
 * headers, as virtio-net's MAX_FRAME. A longer length can only be garbage: the stream ends. */
#define NET_STREAM_MAX_FRAME 65550
#define NET_STREAM_LEN_BYTES 4

/* The receiving side: a record (length field, then frame) is gathered across as many reads
 * as the peer needs, so a non-blocking socket can be read whenever it is readable. Only the
 * bytes of the current record are ever read: a whole frame is never left hidden in this
 * buffer while the socket looks empty (the caller waits on the socket's readability). */
struct net_stream_rx {
	u8 len_be[NET_STREAM_LEN_BYTES];
	u32 have; /* bytes of the current record so far, its length field included */
	u32 len;  /* the frame's length, once the length field is whole */
	u8 *buf;  /* NET_STREAM_MAX_FRAME bytes */
	int err;  /* 0, or the -errno the stream ended with (every later call returns it) */
};

/* Allocates the frame buffer. 0 or -ENOMEM. */
int net_stream_rx_init(struct net_stream_rx *rx) __must_check;
void net_stream_rx_free(struct net_stream_rx *rx);
/* Where the next bytes of the current record go, and how many it still needs (never 0
 * unless a frame is whole or the stream ended). */
void net_stream_rx_want(const struct net_stream_rx *rx, void **at, size_t *len);
/* n bytes (at most what net_stream_rx_want asked for) were put there; n == 0 means the peer
 * closed. Returns the frame's length (> 0) once a frame is whole, 0 when more bytes are
 * needed, or -errno once the stream ended: -EPIPE (closed between records), -EPROTO
 * (closed inside one), -EMSGSIZE (a length over NET_STREAM_MAX_FRAME). Zero-length records
 * are skipped. */
ssize_t net_stream_rx_got(struct net_stream_rx *rx, size_t n);
/* Read towards the next whole frame from a non-blocking stream socket: the frame's length
 * once whole (again on every call until net_stream_rx_next), 0 when the socket has no more
 * bytes for now, or -errno once the stream ended (the above, or the socket's error). */
ssize_t net_stream_rx_read(struct net_stream_rx *rx, int fd);
/* The whole frame, valid after net_stream_rx_read or _got returned its length. */
static inline const u8 *net_stream_rx_frame(const struct net_stream_rx *rx)
{
	return rx->buf;
}
/* Done with the whole frame: the next record starts. */
void net_stream_rx_next(struct net_stream_rx *rx);

/* The sending side: a frame the socket took only part of is finished before any other
 * (the rest copied here), so the stream never carries a cut frame. */
struct net_stream_tx {
	u8 *rest; /* NET_STREAM_LEN_BYTES + NET_STREAM_MAX_FRAME bytes */
	size_t rest_off, rest_len;
	int err; /* 0, or the -errno the stream ended with */
};

int net_stream_tx_init(struct net_stream_tx *tx) __must_check;
void net_stream_tx_free(struct net_stream_tx *tx);
/* Send the frame in iov (cnt entries, len bytes in all) as one record on a non-blocking
 * stream socket. Returns len once the socket took it, whole or in part (the rest is then
 * sent first by the next call or net_stream_tx_flush); -EAGAIN when the rest of an earlier
 * frame is still waiting or the socket is full (nothing of this frame was sent: call again
 * when it is writable; a frame of more iovecs than writev takes is kept whole in the rest
 * buffer and counts as taken); -EMSGSIZE for a frame of 0 or more than NET_STREAM_MAX_FRAME bytes
 * (not sent, the stream goes on); or -errno once the stream ended (the socket's error). */
ssize_t net_stream_tx_send(struct net_stream_tx *tx, int fd, const struct iovec *iov, int cnt,
			   size_t len);
/* Send what is left of a cut frame: 0 when nothing is, -EAGAIN while some still is, or
 * -errno once the stream ended. */
int net_stream_tx_flush(struct net_stream_tx *tx, int fd);
/* True while part of a frame waits. */
static inline bool net_stream_tx_pending(const struct net_stream_tx *tx)
{
	return tx->rest_len > tx->rest_off;
}

#endif

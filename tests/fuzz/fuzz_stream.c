/* Fuzz target: passt's stream framing (net/stream.c) as lkvm reads it, in pieces of every size. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "lkvm/net-stream.h"

/* Input: u16 chunk seed, then the bytes the peer sends. The seed picks the size of each read
 * (xorshift): 1 byte to the whole rest of the record, so lengths and frames arrive cut
 * anywhere. Checked: every frame is what the input holds at that place, no longer than the
 * maximum; the end of input ends the stream as a closed socket does (-EPIPE between records,
 * -EPROTO inside one), as does a length over the maximum (-EMSGSIZE, right after it); an
 * ended stream stays ended. */
static u32 next(u32 *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

int fuzz_stream(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct net_stream_rx rx;
	u32 seed = (u32)fuzz_take(&in, 2) | 0x10000; /* never 0: xorshift would stay there */
	size_t off = 0, rec_start = 0;
	ssize_t r;

	if (net_stream_rx_init(&rx) < 0)
		return 0;
	for (;;) {
		void *at;
		size_t want, n;

		net_stream_rx_want(&rx, &at, &want);
		FUZZ_ASSERT(want > 0);
		if (off == in.left) {
			r = net_stream_rx_got(&rx, 0);
			FUZZ_ASSERT(r == (off == rec_start ? -EPIPE : -EPROTO));
			break;
		}
		n = next(&seed) & 1 ? want : 1 + next(&seed) % want;
		n = n < in.left - off ? n : in.left - off;
		memcpy(at, in.p + off, n);
		off += n;
		r = net_stream_rx_got(&rx, n);
		if (r < 0) {
			u32 len = (u32)in.p[rec_start] << 24 | (u32)in.p[rec_start + 1] << 16 |
				  (u32)in.p[rec_start + 2] << 8 | in.p[rec_start + 3];

			FUZZ_ASSERT(r == -EMSGSIZE && len > NET_STREAM_MAX_FRAME);
			FUZZ_ASSERT(off == rec_start + NET_STREAM_LEN_BYTES);
			break;
		}
		if (r == 0) {
			/* A zero-length record was skipped: the next one starts here. */
			if (rx.have == 0)
				rec_start = off;
			continue;
		}
		FUZZ_ASSERT(r <= NET_STREAM_MAX_FRAME);
		FUZZ_ASSERT(off == rec_start + NET_STREAM_LEN_BYTES + (size_t)r);
		FUZZ_ASSERT(!memcmp(net_stream_rx_frame(&rx), in.p + rec_start + 4, (size_t)r));
		net_stream_rx_next(&rx);
		rec_start = off;
	}
	/* Ended: every later call says so again, and asks for nothing. */
	FUZZ_ASSERT(net_stream_rx_got(&rx, 1) == r);
	net_stream_rx_free(&rx);
	return 0;
}

/* Unit tests for virtio-net's receive path, per frame and batched (-n batch=on): the test posts the guest's buffers, the fake backend plays the host network. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "check_main.h"
#include "vnet.h"

/* Bounded wait for the device to have received every injected frame (into a guest buffer,
 * or held aside, or dropped). */
static bool wait_frames_taken(int pair)
{
	return WAIT_UNTIL(WAIT_MS, net_fake_pending(t.be[pair]) == 0);
}

static u16 rx_num_buffers(u64 gpa)
{
	struct virtio_net_hdr_v1 h;

	memcpy(&h, gp(gpa), sizeof(h));
	return h.num_buffers;
}

/* ---- RX ---- */

START_TEST(rx_single_frame)
{
	u8 frame[60];
	u64 buf;
	u16 head;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	buf = galloc(2048);
	head = post(0, &(struct vd_buf){ buf, 2048, true }, 1);
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 1);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(t.q[0].used->ring[0].id, head);
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 72);
	ck_assert_uint_eq(rx_num_buffers(buf), 1);
	ck_assert_mem_eq(gp(buf + 12), frame, sizeof(frame));
	ck_assert(irq_fired(0, WAIT_MS));
	ck_assert_uint_eq(STAT(0, packets), 1);
	ck_assert_uint_eq(STAT(0, bytes), 60);
	ck_assert_uint_eq(STAT(0, irqs), 1);
	ck_assert_uint_eq(STAT(0, drops), 0);
	dev_destroy();
}
END_TEST

/* A frame that arrives before any buffer waits in the backend, then goes out on the kick. */
START_TEST(rx_waits_for_buffers)
{
	u8 frame[100];
	u64 buf;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_RING_F_EVENT_IDX), 256);
	fill_pattern(frame, sizeof(frame), 9);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	/* Ring empty: the device asks for a kick at the next chain (avail_event = 0). */
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert_uint_eq(used_idx(0), 0);
	ck_assert_uint_eq(t.be[0]->ops->peek_len(t.be[0]), 112);
	buf = galloc(4096);
	post(0, &(struct vd_buf){ buf, 4096, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 112);
	ck_assert_mem_eq(gp(buf + 12), frame, sizeof(frame));
	ck_assert(WAIT_STAT(0, kicks, 1));
	/* Many frames, one buffer each, posted in one go: delivered in batches. */
	for (int i = 0; i < 20; i++)
		post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	for (int i = 0; i < 20; i++)
		ck_assert_int_eq(net_fake_inject(t.be[0], frame, 60 + i), 0);
	ck_assert(wait_used(0, 21));
	ck_assert_uint_eq(STAT(0, packets), 21);
	ck_assert_uint_le(STAT(0, batches), 21);
	dev_destroy();
}
END_TEST

START_TEST(rx_mergeable_spans_buffers)
{
	static u8 frame[5000], got[5000];
	u64 buf[8];
	u16 head[8];
	size_t off = 0;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF), 256);
	for (int i = 0; i < 8; i++) {
		buf[i] = galloc(2048);
		head[i] = post(0, &(struct vd_buf){ buf[i], 2048, true }, 1);
	}
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 3);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 3));
	ck_assert_uint_eq(rx_num_buffers(buf[0]), 3);
	ck_assert_uint_eq(t.q[0].used->ring[0].id, head[0]);
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 2048);
	ck_assert_uint_eq(t.q[0].used->ring[1].id, head[1]);
	ck_assert_uint_eq(t.q[0].used->ring[1].len, 2048);
	ck_assert_uint_eq(t.q[0].used->ring[2].id, head[2]);
	ck_assert_uint_eq(t.q[0].used->ring[2].len, 5012 - 4096);
	memcpy(got, gp(buf[0] + 12), 2036);
	off = 2036;
	memcpy(got + off, gp(buf[1]), 2048);
	off += 2048;
	memcpy(got + off, gp(buf[2]), 5000 - off);
	ck_assert_mem_eq(got, frame, sizeof(frame));
	/* The five chains not needed were given back, in order. */
	ck_assert(wait_cond_u16(&t.vdev->q[0].vq.last_avail, 3));
	ck_assert_uint_eq(t.q[0].avail->idx, 8);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, 100), 0);
	ck_assert(wait_used(0, 4));
	ck_assert_uint_eq(t.q[0].used->ring[3].id, head[3]);
	ck_assert_uint_eq(t.q[0].used->ring[3].len, 112);
	ck_assert_uint_eq(rx_num_buffers(buf[3]), 1);
	ck_assert(wait_cond_u16(&t.vdev->q[0].vq.last_avail, 4));
	ck_assert_uint_eq(STAT(0, packets), 2);
	ck_assert_uint_eq(STAT(0, bytes), 5100);
	dev_destroy();
}
END_TEST

/* Not enough room for a known-size frame: wait for more buffers rather than truncate. */
START_TEST(rx_mergeable_waits_for_room)
{
	static u8 frame[5000];
	u64 b1 = 0;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF) | F(VIRTIO_RING_F_EVENT_IDX), 256);
	for (int i = 0; i < 2; i++) {
		u64 b = galloc(2048);

		if (!i)
			b1 = b;
		post(0, &(struct vd_buf){ b, 2048, true }, 1);
	}
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 5);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert_uint_eq(used_idx(0), 0);
	post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(0, 3));
	ck_assert_uint_eq(rx_num_buffers(b1), 3);
	ck_assert_uint_eq(STAT(0, bytes), 5000);
	dev_destroy();
}
END_TEST

/* A backend that cannot tell a frame's size before reading it (a tap): a frame longer
 * than the receive buffer is dropped and counted, never delivered cut. */
START_TEST(rx_no_peek_long_frame_dropped)
{
	static u8 big[500], small[60];
	u64 buf;
	u16 head;

	dev_create(1, NULL);
	net_fake_set_no_peek(t.be[0], true);
	dev_start(BASE_FEATURES, 256);
	buf = galloc(200);
	head = post(0, &(struct vd_buf){ buf, 200, true }, 1);
	vd_kick(t.vdev, 0);
	fill_pattern(big, sizeof(big), 21);
	fill_pattern(small, sizeof(small), 22);
	ck_assert_int_eq(net_fake_inject(t.be[0], big, sizeof(big)), 0);
	for (int ms = 0; ms < WAIT_MS && STAT(0, drops) == 0; ms++)
		poll(NULL, 0, 1);
	ck_assert_uint_eq(STAT(0, drops), 1);
	ck_assert_uint_eq(used_idx(0), 0);
	/* The buffer is still there for the next frame, which fits. */
	ck_assert_int_eq(net_fake_inject(t.be[0], small, sizeof(small)), 0);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(t.q[0].used->ring[0].id, head);
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 72);
	ck_assert_mem_eq(gp(buf + 12), small, sizeof(small));
	ck_assert_uint_eq(STAT(0, packets), 1);
	ck_assert_uint_eq(STAT(0, bytes), 60);
	ck_assert_uint_eq(STAT(0, drops), 1);
	dev_destroy();
}
END_TEST

/* The same with MRG_RXBUF: a frame longer than the buffers posted so far waits for more
 * (read already, kept aside), then arrives whole across them. */
START_TEST(rx_no_peek_mergeable_waits_whole)
{
	static u8 frame[3000], got[3000];
	u64 b[4];
	size_t off;

	dev_create(1, NULL);
	net_fake_set_no_peek(t.be[0], true);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF) | F(VIRTIO_RING_F_EVENT_IDX), 256);
	for (int i = 0; i < 4; i++)
		b[i] = galloc(1000);
	post(0, &(struct vd_buf){ b[0], 1000, true }, 1);
	post(0, &(struct vd_buf){ b[1], 1000, true }, 1);
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 31);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_frames_taken(0));
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert_uint_eq(used_idx(0), 0);
	ck_assert_uint_eq(STAT(0, drops), 0);
	post(0, &(struct vd_buf){ b[2], 1000, true }, 1);
	post(0, &(struct vd_buf){ b[3], 1000, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(0, 4));
	ck_assert_uint_eq(rx_num_buffers(b[0]), 4);
	ck_assert_uint_eq(t.q[0].used->ring[3].len, 12);
	memcpy(got, gp(b[0] + 12), 988);
	off = 988;
	for (int i = 1; i < 4; i++) {
		size_t n = MIN(sizeof(frame) - off, (size_t)1000);

		memcpy(got + off, gp(b[i]), n);
		off += n;
	}
	ck_assert_uint_eq(off, sizeof(frame));
	ck_assert_mem_eq(got, frame, sizeof(frame));
	ck_assert_uint_eq(STAT(0, packets), 1);
	ck_assert_uint_eq(STAT(0, drops), 0);
	/* A frame that waits while the device stops is counted as dropped. Stop only once the
	 * device has read it: a stop that comes first leaves it in the backend, not dropped. */
	post(0, &(struct vd_buf){ b[0], 1000, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_frames_taken(0));
	t.vdev->ops->stop(t.vdev);
	ck_assert_uint_eq(STAT(0, drops), 1);
	ck_assert_uint_eq(used_idx(0), 4);
	dev_destroy();
}
END_TEST

/* Which of the n buffers (posted with heads head[] at gpa[]) is `id`: its address. */
static u64 buf_of(u32 id, const u16 *head, const u64 *gpa, int n)
{
	for (int i = 0; i < n; i++)
		if (head[i] == id)
			return gpa[i];
	ck_abort_msg("used id %u was never posted", id);
	return 0;
}

/*
 * MRG_RXBUF, a long frame and a short one behind it, with buffers for neither whole: the long
 * one waits for buffers holding those it has, and the short one waits behind it (batch=on
 * read both already: it must not overtake). Once the guest posts more, both arrive, whole and
 * in order, nothing dropped. With and without peek_len (_i: 1 like a tap, without).
 */
START_TEST(rx_mergeable_wait_keeps_order)
{
	static u8 frame[3000], got[3000];
	u64 gpa[5];
	u16 head[5];
	const struct vring_used_elem *u;
	size_t off = 0;

	dev_create(1, NULL);
	net_fake_set_no_peek(t.be[0], _i);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF) | F(VIRTIO_RING_F_EVENT_IDX), 256);
	/* Both frames wait in the backend first, so that one call can take them both. */
	fill_pattern(frame, sizeof(frame), 41);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame + 7, 100), 0);
	for (int i = 0; i < 5; i++)
		gpa[i] = galloc(1000);
	for (int i = 0; i < 2; i++)
		head[i] = post(0, &(struct vd_buf){ gpa[i], 1000, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert_uint_eq(used_idx(0), 0);
	ck_assert_uint_eq(STAT(0, drops), 0);
	for (int i = 2; i < 5; i++)
		head[i] = post(0, &(struct vd_buf){ gpa[i], 1000, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(0, 5));
	/* The long one in the first four used buffers (1000 + 1000 + 1000 + 12 bytes). */
	u = t.q[0].used->ring;
	ck_assert_uint_eq(rx_num_buffers(buf_of(u[0].id, head, gpa, 5)), 4);
	for (int i = 0; i < 4; i++) {
		u64 b = buf_of(u[i].id, head, gpa, 5);
		u32 skip = i ? 0 : 12, n = u[i].len - skip;

		ck_assert_uint_eq(u[i].len, i < 3 ? 1000 : 12);
		ck_assert_uint_le(off + n, sizeof(got));
		memcpy(got + off, gp(b + skip), n);
		off += n;
	}
	ck_assert_uint_eq(off, sizeof(frame));
	ck_assert_mem_eq(got, frame, sizeof(frame));
	/* Then the short one, alone in the fifth. */
	ck_assert_uint_eq(u[4].len, 112);
	ck_assert_uint_eq(rx_num_buffers(buf_of(u[4].id, head, gpa, 5)), 1);
	ck_assert_mem_eq(gp(buf_of(u[4].id, head, gpa, 5) + 12), frame + 7, 100);
	ck_assert(WAIT_STAT(0, packets, 2));
	ck_assert_uint_eq(STAT(0, drops), 0);
	dev_destroy();
}
END_TEST

/* MRG_RXBUF, a frame longer than the whole ring's buffers (4 of 1000 bytes): the guest can post
 * no more, so waiting would never end: it is dropped (counted once) and the buffers take the
 * next frame. Without peek_len (the tap's way: the frame is read before its size is known). */
START_TEST(rx_mergeable_never_fits_dropped)
{
	static u8 frame[5000];
	u64 b0 = 0;
	u16 h0 = 0;

	dev_create(1, NULL);
	net_fake_set_no_peek(t.be[0], true);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF) | F(VIRTIO_RING_F_EVENT_IDX), 4);
	for (int i = 0; i < 4; i++) {
		u64 b = galloc(1000);
		u16 h = post(0, &(struct vd_buf){ b, 1000, true }, 1);

		if (!i) {
			b0 = b;
			h0 = h;
		}
	}
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 43);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(WAIT_STAT(0, drops, 1));
	ck_assert_uint_eq(used_idx(0), 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, 100), 0);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(t.q[0].used->ring[0].id, h0);
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 112);
	ck_assert_uint_eq(rx_num_buffers(b0), 1);
	ck_assert_mem_eq(gp(b0 + 12), frame, 100);
	ck_assert_uint_eq(STAT(0, drops), 1);
	dev_destroy();
}
END_TEST

/* A backend that tells a frame's size in advance (peek_len: passt, the fake): a frame that can
 * never fit is dropped and counted, never delivered cut; the buffers take the next frame.
 * _i: 0 MRG_RXBUF, longer than the whole ring (4 buffers of 1000 bytes); 1 without MRG_RXBUF,
 * longer than its one buffer (the ring has more); 2 MRG_RXBUF, longer than RX_MAX_CHAINS (64)
 * buffers of 100 bytes while the ring has 70. */
START_TEST(rx_peek_never_fits_dropped)
{
	static const struct {
		bool mrg;
		u16 size, nbufs;
		u32 buf_len, frame_len;
	} c[] = { { true, 4, 4, 1000, 5000 },
		  { false, 8, 8, 200, 500 },
		  { true, 128, 70, 100, 6800 } };
	static u8 frame[7000];
	u64 b0 = 0;
	u16 h0 = 0;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_RING_F_EVENT_IDX) |
			  (c[_i].mrg ? F(VIRTIO_NET_F_MRG_RXBUF) : 0),
		  c[_i].size);
	for (int i = 0; i < c[_i].nbufs; i++) {
		u64 b = galloc(c[_i].buf_len);
		u16 h = post(0, &(struct vd_buf){ b, c[_i].buf_len, true }, 1);

		if (!i) {
			b0 = b;
			h0 = h;
		}
	}
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 47);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, c[_i].frame_len), 0);
	ck_assert(WAIT_STAT(0, drops, 1));
	ck_assert_uint_eq(used_idx(0), 0);
	ck_assert_uint_eq(STAT(0, packets), 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame + 1, 60), 0);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(t.q[0].used->ring[0].id, h0);
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 72);
	ck_assert_uint_eq(rx_num_buffers(b0), 1);
	ck_assert_mem_eq(gp(b0 + 12), frame + 1, 60);
	ck_assert_uint_eq(STAT(0, packets), 1);
	ck_assert_uint_eq(STAT(0, drops), 1);
	dev_destroy();
}
END_TEST

/* The 12-byte header split over several buffers of the first chain. */
START_TEST(rx_header_split)
{
	u8 frame[64];
	u64 a, b, c;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF), 256);
	a = galloc(7);
	b = galloc(4);
	c = galloc(2000);
	memset(gp(a), 0xee, 7);
	memset(gp(b), 0xee, 4);
	post(0, (struct vd_buf[]){ { a, 7, true }, { b, 4, true }, { c, 2000, true } }, 3);
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 11);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 76);
	/* num_buffers is bytes 10-11: the last byte of b and the first byte of c. */
	ck_assert_uint_eq(*(u8 *)gp(b + 3), 1);
	ck_assert_uint_eq(*(u8 *)gp(c), 0);
	ck_assert_mem_eq(gp(c + 1), frame, sizeof(frame));
	dev_destroy();
}
END_TEST

START_TEST(rx_malformed_chain_needs_reset)
{
	u8 frame[60] = { 1 };

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	/* A receive chain with only a readable buffer. */
	post(0, &(struct vd_buf){ galloc(2048), 2048, false }, 1);
	vd_kick(t.vdev, 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_needs_reset());
	ck_assert_uint_eq(used_idx(0), 0);
	/* TX carries on. */
	u64 tx = galloc(72);
	post(1, &(struct vd_buf){ tx, 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 1));
	dev_destroy();
}
END_TEST

/* A backend whose fd stays readable while every receive fails: RX must pause, not spin. */
static ssize_t failing_recv(struct net_backend *be, const struct iovec *iov, int n)
{
	__atomic_add_fetch(&((struct stuck *)be->priv)->sends, 1, __ATOMIC_RELAXED);
	return -EIO;
}

static const struct net_backend_ops failing_ops = {
	.send = stuck_send,
	.recv = failing_recv,
	.close = stuck_close,
};

START_TEST(rx_backend_error_backs_off)
{
	struct stuck *s = calloc(1, sizeof(*s));
	u64 one = 1, t0, elapsed_ms;
	int tries;

	ck_assert_ptr_nonnull(s);
	s->be.ops = &failing_ops;
	s->be.priv = s;
	s->be.rx_fd = eventfd(0, EFD_NONBLOCK);
	s->be.tx_fd = eventfd(0, EFD_NONBLOCK);
	ck_assert_int_eq(write(s->be.rx_fd, &one, sizeof(one)), sizeof(one)); /* always readable */
	dev_create(1, &s->be);
	t0 = now_ns();
	dev_start(BASE_FEATURES, 256);
	post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	/* Wait for a count of tries, not for a time: at least 10 ms apart, so the 5th comes
	 * 40 ms or more after the first however loaded the machine is. */
	for (int ms = 0; ms < 10 * WAIT_MS && __atomic_load_n(&s->sends, __ATOMIC_RELAXED) < 5;
	     ms++)
		poll(NULL, 0, 1);
	t.vdev->ops->stop(t.vdev); /* threads joined: the counts below are final */
	elapsed_ms = (now_ns() - t0) / 1000000;
	tries = __atomic_load_n(&s->sends, __ATOMIC_RELAXED);
	ck_assert_int_ge(tries, 5);
	/* A pause between tries: a spinning thread would make thousands in this time. */
	ck_assert_msg((u64)(tries - 1) * 10 <= elapsed_ms, "%d tries in %llu ms", tries,
		      (unsigned long long)elapsed_ms);
	ck_assert_uint_eq(STAT(0, drops), (u64)tries);
	ck_assert_uint_eq(used_idx(0), 0); /* the buffer was given back, not consumed */
	dev_destroy();
}
END_TEST

/* ---- batch=on (the fake's batch ops) ---- */

/* Fewer frames than buffers offered (a partial batch), then more: each lands whole in the
 * next buffer, in order; the buffers that got none stay for the next frames. */
START_TEST(batch_rx_partial)
{
	u8 frame[100];
	u64 buf[8];
	u16 head[8];

	dev_create_opts(1, NULL, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	for (int i = 0; i < 8; i++) {
		buf[i] = galloc(2048);
		head[i] = post(0, &(struct vd_buf){ buf[i], 2048, true }, 1);
	}
	vd_kick(t.vdev, 0);
	for (int i = 0; i < 3; i++) {
		fill_pattern(frame, sizeof(frame), (u8)i);
		ck_assert_int_eq(net_fake_inject(t.be[0], frame, 60 + i), 0);
	}
	ck_assert(wait_used(0, 3));
	for (int i = 3; i < 5; i++) {
		fill_pattern(frame, sizeof(frame), (u8)i);
		ck_assert_int_eq(net_fake_inject(t.be[0], frame, 60 + i), 0);
	}
	ck_assert(wait_used(0, 5));
	for (int i = 0; i < 5; i++) {
		fill_pattern(frame, sizeof(frame), (u8)i);
		ck_assert_uint_eq(t.q[0].used->ring[i].id, head[i]);
		ck_assert_uint_eq(t.q[0].used->ring[i].len, 72 + i);
		ck_assert_uint_eq(rx_num_buffers(buf[i]), 1);
		ck_assert_mem_eq(gp(buf[i] + 12), frame, 60 + i);
	}
	ck_assert(WAIT_STAT(0, packets, 5));
	ck_assert_uint_eq(STAT(0, drops), 0);
	ck_assert_int_ge(fake_batches(false), 2);
	ck_assert_uint_eq(STAT(0, calls), fake_batches(false));
	dev_destroy();
}
END_TEST

/* More frames than buffers (the ring full of frames): the rest wait in the backend until
 * the guest posts more, then come in order. */
START_TEST(batch_rx_ring_full)
{
	u8 frame[100];
	u64 buf[10];

	dev_create_opts(1, NULL, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES | F(VIRTIO_RING_F_EVENT_IDX), 256);
	for (int i = 0; i < 4; i++)
		post(0, &(struct vd_buf){ buf[i] = galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	for (int i = 0; i < 10; i++) {
		fill_pattern(frame, sizeof(frame), (u8)i);
		ck_assert_int_eq(net_fake_inject(t.be[0], frame, 60 + i), 0);
	}
	ck_assert(wait_used(0, 4));
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert_uint_eq(used_idx(0), 4);
	ck_assert_int_eq(net_fake_pending(t.be[0]), 6);
	for (int i = 4; i < 10; i++)
		post(0, &(struct vd_buf){ buf[i] = galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(0, 10));
	for (int i = 0; i < 10; i++) {
		fill_pattern(frame, sizeof(frame), (u8)i);
		ck_assert_uint_eq(t.q[0].used->ring[i].len, 72 + i);
		ck_assert_mem_eq(gp(buf[i] + 12), frame, 60 + i);
	}
	ck_assert_uint_eq(STAT(0, drops), 0);
	dev_destroy();
}
END_TEST

/* A frame too long for its buffer in the middle of a batch (no MRG_RXBUF): only it is dropped
 * (drops moves by exactly 1); its buffer takes the next frame. */
START_TEST(batch_rx_long_frame_in_middle)
{
	static u8 big[500], small[60];
	u64 buf[3];
	u16 head[3];

	dev_create_opts(1, NULL, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	for (int i = 0; i < 3; i++) {
		buf[i] = galloc(200);
		head[i] = post(0, &(struct vd_buf){ buf[i], 200, true }, 1);
	}
	vd_kick(t.vdev, 0);
	fill_pattern(big, sizeof(big), 21);
	fill_pattern(small, sizeof(small), 22);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	/* Injected in one go, so that one call sees all three (the fake holds its lock per frame). */
	ck_assert_int_eq(net_fake_inject(t.be[0], small, sizeof(small)), 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], big, sizeof(big)), 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], small, 50), 0);
	ck_assert(WAIT_STAT(0, packets, 2));
	ck_assert_uint_eq(STAT(0, drops), 1);
	ck_assert(wait_used(0, 2));
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 72);
	ck_assert_uint_eq(t.q[0].used->ring[1].len, 62);
	/* Which buffers took them depends on how the frames met the calls; the one left over
	 * takes the next frame. */
	ck_assert_int_eq(net_fake_inject(t.be[0], small, 40), 0);
	ck_assert(wait_used(0, 3));
	ck_assert_uint_eq(t.q[0].used->ring[2].len, 52);
	ck_assert_uint_eq(STAT(0, drops), 1);
	{
		bool seen[3] = { false };

		for (int i = 0; i < 3; i++)
			for (int j = 0; j < 3; j++)
				seen[j] |= t.q[0].used->ring[i].id == head[j];
		ck_assert(seen[0] && seen[1] && seen[2]);
	}
	(void)buf;
	dev_destroy();
}
END_TEST

/* MRG_RXBUF: a frame longer than one buffer spans the next held ones, in order. */
START_TEST(batch_rx_mergeable_spans)
{
	static u8 frame[5000], got[5000];
	u64 buf[8];
	u16 head[8];
	size_t off;

	dev_create_opts(1, NULL, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF), 256);
	for (int i = 0; i < 8; i++) {
		buf[i] = galloc(2048);
		head[i] = post(0, &(struct vd_buf){ buf[i], 2048, true }, 1);
	}
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 3);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 3));
	ck_assert_uint_eq(rx_num_buffers(buf[0]), 3);
	for (int i = 0; i < 3; i++)
		ck_assert_uint_eq(t.q[0].used->ring[i].id, head[i]);
	ck_assert_uint_eq(t.q[0].used->ring[2].len, 5012 - 4096);
	memcpy(got, gp(buf[0] + 12), 2036);
	off = 2036;
	memcpy(got + off, gp(buf[1]), 2048);
	off += 2048;
	memcpy(got + off, gp(buf[2]), 5000 - off);
	ck_assert_mem_eq(got, frame, sizeof(frame));
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, 100), 0);
	ck_assert(wait_used(0, 4));
	ck_assert_uint_eq(t.q[0].used->ring[3].id, head[3]);
	ck_assert_uint_eq(rx_num_buffers(buf[3]), 1);
	ck_assert(WAIT_STAT(0, packets, 2));
	ck_assert_uint_eq(STAT(0, drops), 0);
	dev_destroy();
}
END_TEST

/* batch=on's recv_batch as when a frame arrives during the call: the first read of a call over
 * more than one slot finds none, the next ones find it, so the frame lands in a later slot
 * than an empty one. With late_fail, every call after the first fails as a whole (the ring
 * unusable: the per-frame path goes on). */
static const struct net_backend_ops *late_orig;
static struct net_backend_ops late_ops;
static int late_calls;
static bool late_fail;

static int late_recv_batch(struct net_backend *be, struct net_io *io, int n)
{
	if (__atomic_add_fetch(&late_calls, 1, __ATOMIC_RELAXED) > 1 && late_fail)
		return -EIO;
	for (int i = 0; i < n; i++)
		io[i].res = i == 0 && n > 1 ? -EAGAIN
					    : late_orig->recv(be, io[i].iov, io[i].iovcnt);
	return 0;
}

/*
 * batch=on: a held buffer popped before one that went to the guest (the frame landed in a
 * later slot) cannot be unpopped, yet it is given back all the same: at stop, then a start
 * without reset (_i = 0), or when batch calls fail and the per-frame path goes on (_i = 1).
 * Every posted buffer is then used or available again, the one given back as used says no
 * byte (length 0), and the next frames fill the others.
 */
START_TEST(batch_rx_release_out_of_order)
{
	struct net_backend *fb = net_fake_create();
	const struct vring_used_elem *u;
	u8 frame[60];
	u16 head[4];

	ck_assert_ptr_nonnull(fb);
	late_orig = fb->ops;
	late_ops = *fb->ops;
	late_ops.recv_batch = late_recv_batch;
	fb->ops = &late_ops;
	late_calls = 0;
	late_fail = _i;
	dev_create_opts(1, fb, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	u = t.q[0].used->ring;
	fill_pattern(frame, sizeof(frame), 51);
	/* The frame waits in the backend, so that the first call offers all four buffers. */
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	for (int i = 0; i < 4; i++)
		head[i] = post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(u[0].id, head[1]);
	ck_assert_uint_eq(u[0].len, 72);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	if (_i == 0) {
		t.vdev->ops->stop(t.vdev);
	} else {
		ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
		ck_assert(wait_used(0, 3));
		ck_assert_uint_eq(u[2].id, head[2]);
		ck_assert_uint_eq(u[2].len, 72);
	}
	/* head[0] as used, saying no byte; head[2] and head[3] available again (or used). */
	ck_assert_uint_ge(used_idx(0), 2);
	ck_assert_uint_eq(u[1].id, head[0]);
	ck_assert_uint_eq(u[1].len, 0);
	ck_assert_uint_eq(used_idx(0) + (u16)(t.q[0].avail->idx - t.vdev->q[0].vq.last_avail), 4);
	if (_i == 0) {
		ck_assert_int_eq(t.vdev->ops->start(t.vdev), 0);
		ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	}
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 4));
	ck_assert_uint_eq(u[3].len, 72);
	ck_assert((u[2].id == head[2] && u[3].id == head[3]) ||
		  (u[2].id == head[3] && u[3].id == head[2]));
	ck_assert_uint_eq(STAT(0, drops), 0);
	dev_destroy();
}
END_TEST

/* The receive tests that run on both data paths, batch=off and batch=on. */
static void add_both_paths(TCase *tc)
{
	tcase_add_test(tc, rx_single_frame);
	tcase_add_test(tc, rx_waits_for_buffers);
	tcase_add_test(tc, rx_header_split);
	tcase_add_test(tc, rx_no_peek_long_frame_dropped);
	tcase_add_test(tc, rx_mergeable_waits_for_room);
	tcase_add_test(tc, rx_no_peek_mergeable_waits_whole);
	tcase_add_loop_test(tc, rx_mergeable_wait_keeps_order, 0, 2);
	tcase_add_test(tc, rx_mergeable_never_fits_dropped);
	tcase_add_loop_test(tc, rx_peek_never_fits_dropped, 0, 3);
	tcase_add_test(tc, rx_malformed_chain_needs_reset);
	tcase_add_test(tc, rx_backend_error_backs_off);
}

/* batch=off's own: the buffers a frame did not need given back at once (batch=on holds them for
 * the next frames). */
static void device_own(TCase *tc)
{
	tcase_add_test(tc, rx_mergeable_spans_buffers);
}

/* Not here: rx_mergeable_spans_buffers (batch=off gives back at once the buffers a frame did not
 * need; batch=on holds them for the next frames: batch_rx_mergeable_spans). */
static void batch_own(TCase *tc)
{
	tcase_add_test(tc, batch_rx_partial);
	tcase_add_test(tc, batch_rx_ring_full);
	tcase_add_test(tc, batch_rx_long_frame_in_middle);
	tcase_add_test(tc, batch_rx_mergeable_spans);
	tcase_add_loop_test(tc, batch_rx_release_out_of_order, 0, 2);
}

static Suite *virtio_net_rx_suite(void)
{
	return vnet_suite("virtio_net_rx", add_both_paths, device_own, batch_own);
}

LKVM_CHECK_MAIN(virtio_net_rx_suite)

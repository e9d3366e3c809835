/* Unit tests for virtio-net's transmit path: its wake-up protocol in every strategy (kick, timer, poll), batching (-n batch=on), the chains it drops or refuses, stopping while the backend is full. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "irq_hook.h"
#include "vnet.h"

/* ---- TX ---- */

/* A driver whose interrupt handler makes the same TX chain available again at once
 * (endless_set): the ring never runs dry. Stop still ends the TX thread, which looks at it
 * every BATCH chains (each at most one frame): the rule the other devices' threads follow. */
START_TEST(tx_stop_endless_ring)
{
	u64 g;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 64);
	t.vdev->ops->stop(t.vdev);
	endless_set(t.vdev, 1, &t.q[1], t.q[1].next_desc);
	ck_assert_int_eq(t.vdev->ops->start(t.vdev), 0);
	g = galloc(72);
	memset(gp(g), 0, 72);
	post(1, &(struct vd_buf){ g, 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(WAIT_UNTIL(WAIT_MS, endless_served() >= 100));
	t.vdev->ops->stop(t.vdev); /* returns: the thread looked at stop while the ring was full */
	ck_assert_uint_ge(STAT(1, packets) + STAT(1, drops), 100);
	dev_destroy();
}
END_TEST

START_TEST(tx_split_chain)
{
	u8 pkt[112], out[200];
	u64 a, b, c;
	u16 head;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	fill_pattern(pkt, sizeof(pkt), 42);
	a = galloc(10);
	b = galloc(50);
	c = galloc(52);
	memcpy(gp(a), pkt, 10);
	memcpy(gp(b), pkt + 10, 50);
	memcpy(gp(c), pkt + 60, 52);
	head = post(1, (struct vd_buf[]){ { a, 10, false }, { b, 50, false }, { c, 52, false } },
		    3);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 1));
	ck_assert_uint_eq(t.q[1].used->ring[0].id, head);
	ck_assert_uint_eq(t.q[1].used->ring[0].len, 0);
	ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), sizeof(pkt));
	ck_assert_mem_eq(out, pkt, sizeof(pkt));
	ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 0);
	/* The thread's first drain may send the chain before it reads the kick. */
	ck_assert(WAIT_STAT(1, kicks, 1));
	ck_assert_uint_eq(STAT(1, packets), 1);
	ck_assert_uint_eq(STAT(1, bytes), 100);
	ck_assert_uint_eq(STAT(1, batches), 1);
	ck_assert(irq_fired(1, WAIT_MS));

	/* 30 chains, one kick: all sent, in order. */
	for (int i = 0; i < 30; i++) {
		u64 g = galloc(12 + 60);

		memset(gp(g), 0, 12);
		memset(gp(g + 12), i, 60);
		post(1, &(struct vd_buf){ g, 72, false }, 1);
	}
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 31));
	for (int i = 0; i < 30; i++) {
		ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 72);
		ck_assert_uint_eq(out[12], i);
	}
	ck_assert_uint_eq(STAT(1, kicks), 2);
	ck_assert_uint_eq(STAT(1, packets), 31);
	dev_destroy();
}
END_TEST

START_TEST(tx_bad_lengths_dropped)
{
	u8 out[64];

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	post(1, &(struct vd_buf){ galloc(8), 8, false }, 1);	     /* shorter than the header */
	post(1, &(struct vd_buf){ galloc(2048), 2048, true }, 1);    /* nothing readable */
	post(1, &(struct vd_buf){ galloc(70000), 70000, false }, 1); /* longer than any frame */
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 3));
	for (int i = 0; i < 3; i++)
		ck_assert_uint_eq(t.q[1].used->ring[i].len, 0);
	ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 0);
	ck_assert_uint_eq(STAT(1, drops), 3);
	ck_assert_uint_eq(STAT(1, packets), 0);
	ck_assert(!(atomic_load(&t.vdev->status) & VIRTIO_CONFIG_S_NEEDS_RESET));
	dev_destroy();
}
END_TEST

START_TEST(tx_malformed_chain_needs_reset)
{
	u8 frame[60] = { 7 };
	u64 rx, good;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	/* Descriptor 0 points at itself. */
	t.q[1].desc[0] = (struct vring_desc){
		.addr = galloc(64), .len = 64, .flags = VRING_DESC_F_NEXT, .next = 0
	};
	t.q[1].avail->ring[0] = 0;
	__atomic_store_n(&t.q[1].avail->idx, ++t.q[1].aidx, __ATOMIC_RELEASE);
	t.q[1].next_desc = 1;
	vd_kick(t.vdev, 1);
	ck_assert(wait_needs_reset());
	ck_assert_uint_eq(used_idx(1), 0);
	/* The queue is left alone from now on; kicks are still counted. */
	good = galloc(72);
	post(1, &(struct vd_buf){ good, 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_thread_idle("lkvm-net-tx0"));
	ck_assert_uint_eq(used_idx(1), 0);
	/* RX still works. */
	rx = galloc(2048);
	post(0, &(struct vd_buf){ rx, 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	ck_assert_mem_eq(gp(rx + 12), frame, sizeof(frame));
	dev_destroy();
}
END_TEST

START_TEST(tx_buffer_outside_ram_needs_reset)
{
	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	post(1, &(struct vd_buf){ RAM_SIZE - 16, 64, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_needs_reset());
	ck_assert_uint_eq(used_idx(1), 0);
	dev_destroy();
}
END_TEST

/* The stuck backend (vnet.h) without batch ops. */
static const struct net_backend_ops stuck_ops = {
	.send = stuck_send,
	.recv = stuck_recv,
	.close = stuck_close,
};

START_TEST(stop_while_backend_full)
{
	struct stuck *s = stuck_new(&stuck_ops);

	dev_create(1, &s->be);
	dev_start(BASE_FEATURES, 256);
	post(1, &(struct vd_buf){ galloc(72), 72, false }, 1);
	vd_kick(t.vdev, 1);
	for (int ms = 0; ms < WAIT_MS && !__atomic_load_n(&s->sends, __ATOMIC_RELAXED); ms++)
		poll(NULL, 0, 1);
	ck_assert(wait_thread_idle("lkvm-net-tx0"));
	ck_assert_int_eq(__atomic_load_n(&s->sends, __ATOMIC_RELAXED),
			 1); /* waiting, not spinning */
	/* RX without peek_len: a buffer but no frame, so nothing delivered. */
	post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	t.vdev->ops->stop(t.vdev);
	/* The chain was not consumed: given back for the next start. */
	ck_assert_uint_eq(t.vdev->q[1].vq.last_avail, 0);
	ck_assert_uint_eq(used_idx(1), 0);
	ck_assert_uint_eq(t.vdev->q[0].vq.last_avail, 0);
	ck_assert_int_eq(count_threads("lkvm-net-tx0"), 0);
	dev_destroy();
}
END_TEST

/* ---- the TX wake-up protocol in every strategy (kick, timer, poll) ---- */

/* The driver's side of notification suppression (virtio 1.2 §2.7.10): after publishing
 * avail->idx (old -> new), a full barrier, then the device's avail_event or NO_NOTIFY flag. */
static bool driver_wants_kick(int qi, u16 old, u16 new, bool event_idx)
{
	struct vd_queue *d = &t.q[qi];

	full_barrier();
	if (event_idx) {
		u16 ev = __atomic_load_n((u16 *)(void *)&d->used->ring[d->size], __ATOMIC_RELAXED);

		return (u16)(new - ev - 1) < (u16)(new - old);
	}
	return !(__atomic_load_n(&d->used->flags, __ATOMIC_RELAXED) & VRING_USED_F_NO_NOTIFY);
}

/* Post one 72-byte TX frame and kick only if the driver rule says so. */
static bool post_tx_frame(u64 gpa, bool event_idx)
{
	u16 old = t.q[1].aidx;

	post(1, &(struct vd_buf){ gpa, 72, false }, 1);
	if (!driver_wants_kick(1, old, t.q[1].aidx, event_idx))
		return false;
	vd_kick(t.vdev, 1);
	return true;
}

struct mode_case {
	enum net_tx_mode tx;
	bool event_idx;
	bool batch; /* -n batch=on: the fake's batch ops */
};

static const struct mode_case mode_cases[] = {
	{ NET_TX_KICK, false, false },	{ NET_TX_KICK, true, false },
	{ NET_TX_TIMER, false, false }, { NET_TX_TIMER, true, false },
	{ NET_TX_POLL, false, false },	{ NET_TX_POLL, true, false },
	{ NET_TX_KICK, false, true },	{ NET_TX_KICK, true, true },
	{ NET_TX_TIMER, false, true },	{ NET_TX_TIMER, true, true },
	{ NET_TX_POLL, false, true },	{ NET_TX_POLL, true, true },
};

static struct net_opts mode_opts(const struct mode_case *c)
{
	/* Short timer and poll windows keep the tests quick; the protocol is the same. */
	return (struct net_opts){
		.tx_mode = c->tx, .tx_timer_us = 20, .poll_us = 20, .batch = c->batch
	};
}

/* What the hook saw: it runs on the TX thread at "ring drained, notifications still off". */
static struct {
	atomic_int calls;
	atomic_int posted; /* chains it posted */
	atomic_int kicked; /* of which the driver rule would have kicked */
	int want;	   /* chains to post, one per call */
	u64 gpa;
	bool event_idx;
} hk;

static void post_in_window(void *arg, int qi)
{
	/* The thread's first drain runs before the driver ever saw notifications off (with
	 * EVENT_IDX a fresh ring asks for a kick): start at the second window. */
	if (qi != 1 || atomic_fetch_add(&hk.calls, 1) == 0 || atomic_load(&hk.posted) >= hk.want)
		return;
	u16 old = t.q[1].aidx;

	atomic_fetch_add(&hk.posted, 1);
	/* Never kicked, whatever the driver rule says: only the device's re-check after
	 * re-enabling can find this chain. (Without EVENT_IDX the rule agrees: NO_NOTIFY is
	 * set here. With it, avail_event may still invite a kick after a stale wake-up.) */
	post(1, &(struct vd_buf){ hk.gpa, 72, false }, 1);
	if (driver_wants_kick(1, old, t.q[1].aidx, hk.event_idx))
		atomic_fetch_add(&hk.kicked, 1);
}

/*
 * A chain posted exactly between "drained" and "re-enable" is still sent, in every
 * strategy, with and without EVENT_IDX: 5 times in a row, each time in the window the
 * previous re-check opened (without the re-check the device would sleep on a kick that
 * never comes).
 */
START_TEST(tx_chain_posted_before_reenable)
{
	const struct mode_case *c = &mode_cases[_i];
	u64 gpa;
	u64 f = BASE_FEATURES | (c->event_idx ? F(VIRTIO_RING_F_EVENT_IDX) : 0);

	dev_create_opts(1, NULL, mode_opts(c));
	memset(&hk, 0, sizeof(hk));
	gpa = galloc(72);
	hk.want = 5;
	hk.gpa = gpa;
	hk.event_idx = c->event_idx;
	virtio_net_set_tx_hook(t.n, post_in_window, NULL);
	dev_start(f, 256);
	/* The first chain comes with a kick; each drain then finds one posted in its window. */
	post(1, &(struct vd_buf){ gpa, 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 6));
	ck_assert_int_eq(atomic_load(&hk.posted), 5);
	if (!c->event_idx)
		ck_assert_int_eq(atomic_load(&hk.kicked), 0);
	ck_assert_uint_eq(STAT(1, packets), 6);
	virtio_net_set_tx_hook(t.n, NULL, NULL);
	dev_destroy();
}
END_TEST

/* Chains posted while notifications are off (timer hold, poll window) and never kicked
 * are still sent; in poll mode the counters show the windows. */
START_TEST(tx_unkicked_chains_while_off)
{
	const struct mode_case *c = &mode_cases[_i];
	u64 f = BASE_FEATURES | (c->event_idx ? F(VIRTIO_RING_F_EVENT_IDX) : 0);
	u64 gpa;
	int kicks = 0;

	dev_create_opts(1, NULL, mode_opts(c));
	dev_start(f, 256);
	gpa = galloc(72);
	for (u16 i = 1; i <= 50; i++) {
		kicks += post_tx_frame(gpa, c->event_idx);
		if (i % 10 == 0)
			ck_assert(wait_used(1, i));
	}
	ck_assert(wait_used(1, 50));
	ck_assert_uint_eq(STAT(1, packets), 50);
	/* Every kick the driver made reached the device's counter (threads counted at exit). */
	t.vdev->ops->stop(t.vdev);
	ck_assert_uint_eq(STAT(1, kicks), (u64)kicks);
	if (c->tx == NET_TX_POLL) {
		u64 polls = STAT(1, polls);
		u64 hits = STAT(1, poll_hits);

		ck_assert_uint_ge(polls, 1);
		ck_assert_uint_le(hits, polls);
		ck_assert_uint_gt(STAT(1, poll_ns), 0);
	} else {
		ck_assert_uint_eq(STAT(1, polls), 0);
	}
	dev_destroy();
}
END_TEST

/*
 * A driver thread racing the device: 20000 chains through a 64-entry ring, posted in
 * bursts of varying length, kicked exactly when the driver rule says so. Every chain must
 * come back used; a lost wake-up shows as the used index stuck below the avail index.
 */
START_TEST(tx_race_no_chain_unseen)
{
	const struct mode_case *c = &mode_cases[_i];
	u64 f = BASE_FEATURES | (c->event_idx ? F(VIRTIO_RING_F_EVENT_IDX) : 0);
	const u32 total = 20000;
	const u16 size = 64;
	u64 gpa, deadline;
	u32 posted = 0, burst = 1;
	u8 frame[128];

	dev_create_opts(1, NULL, mode_opts(c));
	dev_start(f, size);
	gpa = galloc(72);
	deadline = now_ns() + 20ull * 1000000000ull;
	while (posted < total) {
		u16 done = used_idx(1);
		u16 room = (u16)(size - (u16)(t.q[1].aidx - done));

		while (net_fake_take(t.be[0], frame, sizeof(frame)) > 0)
			;
		if (!room) {
			ck_assert_msg(now_ns() < deadline, "stuck at %u used of %u posted", done,
				      posted);
			sched_yield();
			continue;
		}
		for (u32 b = 0; b < MIN(burst, (u32)room) && posted < total; b++, posted++)
			post_tx_frame(gpa, c->event_idx);
		burst = burst % 37 + 1;
	}
	while (used_idx(1) != (u16)total) {
		ck_assert_msg(now_ns() < deadline, "lost wake-up: %u of %u chains used",
			      used_idx(1), total);
		while (net_fake_take(t.be[0], frame, sizeof(frame)) > 0)
			;
		sched_yield();
	}
	ck_assert_uint_eq(STAT(1, packets) + STAT(1, drops), total);
	dev_destroy();
}
END_TEST

/* tx=poll's backoff: a quick yield (a woken thread ran for a few us) changes nothing; one that
 * took a busy thread's slice stops polling for NET_POLL_BACKOFF_NS from its end; a quick one
 * during a backoff leaves it as it is. */
START_TEST(poll_backoff_on_slow_yield)
{
	const u64 t0 = 5000000000ull, slow = NET_POLL_YIELD_SLOW_NS;

	ck_assert_uint_eq(virtio_net_poll_yielded(0, t0, t0 + 8000), 0);
	ck_assert_uint_eq(virtio_net_poll_yielded(0, t0, t0 + slow - 1), 0);
	ck_assert_uint_eq(virtio_net_poll_yielded(0, t0, t0 + slow),
			  t0 + slow + NET_POLL_BACKOFF_NS);
	ck_assert_uint_eq(virtio_net_poll_yielded(t0 + 7, t0, t0 + 1000), t0 + 7);
	/* The next slow one, after the backoff ended, starts a new one from its own end. */
	ck_assert_uint_eq(virtio_net_poll_yielded(t0, t0 + 2 * slow, t0 + 4 * slow),
			  t0 + 4 * slow + NET_POLL_BACKOFF_NS);
}
END_TEST

/* tx=poll's budget rule: a hit doubles, a miss followed by a kick within the cap grows the
 * window to cover that gap (+1/4), a later kick halves it; always within [min(1 us, cap), cap]. */
START_TEST(poll_budget_adapts)
{
	const u64 cap = 50000;

	ck_assert_uint_eq(virtio_net_poll_budget(10000, cap, true, 0), 20000);
	ck_assert_uint_eq(virtio_net_poll_budget(40000, cap, true, 0), cap);
	/* rr: one chain per round trip, a bit longer than the shrunken window: grow to it. */
	ck_assert_uint_eq(virtio_net_poll_budget(1000, cap, false, 30000), 37500);
	ck_assert_uint_eq(virtio_net_poll_budget(1000, cap, false, 45000), cap);
	ck_assert_uint_eq(virtio_net_poll_budget(30000, cap, false, 2000),
			  60000 > cap ? cap : 60000);
	/* The guest went quiet (the kick came after the cap): halve, down to 1 us. */
	ck_assert_uint_eq(virtio_net_poll_budget(40000, cap, false, 60000), 20000);
	ck_assert_uint_eq(virtio_net_poll_budget(1000, cap, false, 1000000), 1000);
	ck_assert_uint_eq(virtio_net_poll_budget(1500, cap, false, ~0ull), 1000);
	/* A cap below 1 us is the floor too. */
	ck_assert_uint_eq(virtio_net_poll_budget(500, 500, false, ~0ull), 500);
	ck_assert_uint_eq(virtio_net_poll_budget(500, 500, true, 0), 500);
	/* Any sequence stays within bounds. */
	u64 b = cap, x = 88172645463325252ull;
	for (int i = 0; i < 100000; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		b = virtio_net_poll_budget(b, cap, x & 1, (x >> 1) % (3 * cap));
		ck_assert(b >= 1000 && b <= cap);
	}
}
END_TEST

/* ---- batch=on (the fake's batch ops) ---- */

/* Five chains in one batch, the third too short for a header: only it is dropped (drops
 * moves by exactly 1), the other four go out in order in one backend call. */
START_TEST(batch_tx_bad_chain_in_middle)
{
	static const u32 lens[] = { 72, 80, 8, 90, 100 };
	u8 out[256];

	dev_create_opts(1, NULL, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	ck_assert(wait_thread_idle("lkvm-net-tx0"));
	for (int i = 0; i < 5; i++)
		post_tx(1, lens[i]);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 5));
	ck_assert(WAIT_STAT(1, packets, 4));
	ck_assert_uint_eq(STAT(1, drops), 1);
	ck_assert_uint_eq(STAT(1, calls), 1);
	ck_assert_int_eq(fake_batches(true), 1);
	for (int i = 0; i < 5; i++) {
		if (i == 2)
			continue;
		ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), lens[i]);
	}
	ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 0);
	for (int i = 0; i < 5; i++)
		ck_assert_uint_eq(t.q[1].used->ring[i].len, 0);
	dev_destroy();
}
END_TEST

/* A full ring (256 chains) goes out in TX_BATCH (64) chains per backend call, one used-ring
 * update and at most one interrupt per call. */
START_TEST(batch_tx_ring_full)
{
	u8 out[128];
	int n = 0;

	dev_create_opts(1, NULL, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	ck_assert(wait_thread_idle("lkvm-net-tx0"));
	post_tx(256, 72);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 256));
	ck_assert(WAIT_STAT(1, packets, 256));
	ck_assert_int_eq(fake_batches(true), 4);
	ck_assert_uint_eq(STAT(1, calls), 4);
	ck_assert_uint_ge(STAT(1, irqs), 1);
	ck_assert_uint_le(STAT(1, irqs), 4);
	while (net_fake_take(t.be[0], out, sizeof(out)) == 72)
		n++;
	ck_assert_int_eq(n, 256);
	dev_destroy();
}
END_TEST

/* A backend that is always full, with batch ops: stop while a batch waits for room gives
 * every chain of it back, none completed. */
static int stuck_send_batch(struct net_backend *be, struct net_io *io, int n)
{
	__atomic_add_fetch(&((struct stuck *)be->priv)->sends, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < n; i++)
		io[i].res = -EAGAIN;
	return 0;
}

static int stuck_recv_batch(struct net_backend *be, struct net_io *io, int n)
{
	for (int i = 0; i < n; i++)
		io[i].res = -EAGAIN;
	return 0;
}

static const struct net_backend_ops stuck_batch_ops = {
	.send = stuck_send,
	.recv = stuck_recv,
	.send_batch = stuck_send_batch,
	.recv_batch = stuck_recv_batch,
	.close = stuck_close,
};

START_TEST(batch_stop_during_batch)
{
	struct stuck *s = stuck_new(&stuck_batch_ops);

	/* rx_fd readable: RX offers its slots. */
	dev_create_opts(1, &s->be, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	ck_assert(wait_thread_idle("lkvm-net-tx0"));
	post_tx(3, 72);
	vd_kick(t.vdev, 1);
	for (int ms = 0; ms < WAIT_MS && !__atomic_load_n(&s->sends, __ATOMIC_RELAXED); ms++)
		poll(NULL, 0, 1);
	ck_assert(wait_thread_idle("lkvm-net-tx0"));
	ck_assert_int_eq(__atomic_load_n(&s->sends, __ATOMIC_RELAXED), 1); /* one call, waiting */
	for (int i = 0; i < 3; i++)
		post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	t.vdev->ops->stop(t.vdev);
	/* Nothing consumed: TX's three chains and RX's held buffers are given back. */
	ck_assert_uint_eq(t.vdev->q[1].vq.last_avail, 0);
	ck_assert_uint_eq(used_idx(1), 0);
	ck_assert_uint_eq(STAT(1, drops), 0);
	ck_assert_uint_eq(t.vdev->q[0].vq.last_avail, 0);
	ck_assert_uint_eq(used_idx(0), 0);
	dev_destroy();
}
END_TEST

/* A batch call the backend refuses before attempting anything (-errno: an old kernel's tap
 * without RWF_NOWAIT, seen with Debian's 6.1): its frames go out one by one, none dropped,
 * and later frames too, without batches. */
static int refused_batch(struct net_backend *be, struct net_io *io, int n)
{
	(void)be;
	(void)io;
	(void)n;
	return -EOPNOTSUPP;
}

START_TEST(batch_tx_refused_sends_each)
{
	static struct net_backend_ops ops;
	struct net_backend *fb = net_fake_create();
	u8 out[128];
	int n = 0;

	ck_assert_ptr_nonnull(fb);
	ops = *fb->ops;
	ops.send_batch = refused_batch;
	fb->ops = &ops;
	dev_create_opts(1, fb, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	ck_assert(wait_thread_idle("lkvm-net-tx0"));
	post_tx(5, 72);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 5));
	ck_assert(WAIT_STAT(1, packets, 5));
	post_tx(3, 80);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 8));
	ck_assert(WAIT_STAT(1, packets, 8));
	ck_assert_uint_eq(STAT(1, drops), 0);
	while (net_fake_take(fb, out, sizeof(out)) > 0)
		n++;
	ck_assert_int_eq(n, 8);
	dev_destroy();
}
END_TEST

/* The transmit tests that run on both data paths, batch=off and batch=on. */
static void add_both_paths(TCase *tc)
{
	tcase_add_test(tc, tx_split_chain);
	tcase_add_test(tc, tx_bad_lengths_dropped);
	tcase_add_test(tc, tx_malformed_chain_needs_reset);
	tcase_add_test(tc, tx_buffer_outside_ram_needs_reset);
	tcase_add_test(tc, tx_stop_endless_ring);
	tcase_add_test(tc, stop_while_backend_full);
	tcase_add_loop_test(tc, tx_chain_posted_before_reenable, 0, (int)ARRAY_SIZE(mode_cases));
	tcase_add_loop_test(tc, tx_unkicked_chains_while_off, 0, (int)ARRAY_SIZE(mode_cases));
	tcase_add_loop_test(tc, tx_race_no_chain_unseen, 0, (int)ARRAY_SIZE(mode_cases));
	tcase_add_test(tc, poll_budget_adapts);
	tcase_add_test(tc, poll_backoff_on_slow_yield);
}

static void batch_own(TCase *tc)
{
	tcase_add_test(tc, batch_tx_bad_chain_in_middle);
	tcase_add_test(tc, batch_tx_ring_full);
	tcase_add_test(tc, batch_stop_during_batch);
	tcase_add_test(tc, batch_tx_refused_sends_each);
}

static Suite *virtio_net_tx_suite(void)
{
	return vnet_suite("virtio_net_tx", add_both_paths, NULL, batch_own);
}

LKVM_CHECK_MAIN(virtio_net_tx_suite)

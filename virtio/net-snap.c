/* virtio-net in a snapshot: its own records beside the virtio core's (MAC, rx mode, queue pairs in use, backend mode) and the RX threads' held buffers, given back exactly at load. */
#include <errno.h>
#include <string.h>

#include "lkvm/snap.h"
#include "net-priv.h"

/*
 * Records (after the core's, virtio/snap.c): NET_TAG_STATE once, NET_TAG_RX + p for each
 * queue pair p. Fixed layouts, little-endian, zeroed before filling.
 *
 * Held buffers. A paused RX thread may hold receive buffers it popped for a frame not yet
 * come (batch=off: held[], batch=on: slots). Nothing of them is visible to the guest, and
 * the new process's thread starts with none, so the record says how to hand them back to the
 * ring before it starts:
 * - those that are the last chains popped (batch=off: always all of them, rx_gather pops in
 *   order and rx_consume takes from the front; batch=on: the slots whose pop numbers end at
 *   pop_seq, and the buffers a waiting frame popped, the last ones) are unpopped (vq_unpop),
 *   so the restored thread pops them again: none lost, none twice;
 * - the others (batch=on only: a later chain went to the guest) cannot be unpopped without
 *   handing that one out twice; they are used with length 0, as rx_slots_release gives them
 *   back at a stop (no byte written, §2.7.8.2; the driver recycles them).
 * The save checks the count against the ring: held + nothing else == last_avail - used_idx on
 * every ready queue (TX and control hold nothing after a quiesce: their drains flush before
 * they park), else the snapshot is refused; so a chain in flight that this does not know of
 * can never be lost. A device with NEEDS_RESET is the exception: its driver resets it, and
 * the reset forgets whatever a broken queue held.
 * Frames read from the backend and not yet the guest's (batch=off: one waiting in spill for
 * more buffers; batch=on: the rest of a backend call behind such a frame) are not saved: the
 * restored NIC has lost them, as a wire loses a frame (counted in the queue's drops), and
 * their buffers are handed back as above.
 *
 * Not saved: the TX strategy and batching (-n tx=, batch= of the new process), the backend
 * (the new process's own, of the same mode: NET_TAG_STATE says which), trace=on's stamps, the
 * counters, vhost (refused: vhost-net's ring indices are not read back yet).
 */
#define NET_TAG_STATE VIRTIO_SNAP_TAG_DEV
#define NET_TAG_RX (VIRTIO_SNAP_TAG_DEV + 1) /* + the queue pair */

struct net_snap {
	u8 mac[6];	/* config space: MAC_ADDR_SET may have changed it */
	u16 pairs;	/* queue pairs the NIC has (-n queues=) */
	u16 curr_pairs; /* pairs receiving (VQ_PAIRS_SET) */
	u8 mode;	/* enum net_mode of its backend */
	u8 promisc, allmulti;
	u8 pad[3];
};
_Static_assert(sizeof(struct net_snap) == 16, "net_snap has a hole");

/* Room for the held slots in the record: fixed, so that RX_BATCH may change without a new
 * file format. */
#define SNAP_HELD_MAX 64
_Static_assert(RX_BATCH <= SNAP_HELD_MAX, "batch=on's slots fit the record");

struct net_snap_rx {
	u16 unpop; /* the last chains popped, held: vq_unpop at load */
	u16 nzero; /* held chains that are not the last popped: used with length 0 at load */
	u16 zero[SNAP_HELD_MAX]; /* their heads, in pop order */
	u32 lost;		 /* frames read, not yet the guest's (counted as drops at load) */
	u32 pad;
};
_Static_assert(sizeof(struct net_snap_rx) == 140, "net_snap_rx has a hole");

/* ---- save ---- */

/* batch=on, a call's results not all taken (a frame waits for buffers, rx_spill_out): has slot
 * k gone to the guest? Before bk, as bused says; bk is the waiting frame's; after it, a slot
 * that took no frame of the call (-EAGAIN or not offered) but is not free was taken by an
 * earlier frame's tail, unless the waiting frame holds it. */
static bool rxb_slot_used(const struct net_rx_batch *b, int k, const bool *waiting)
{
	if (k < b->bk)
		return b->bused[k];
	if (k == b->bk || waiting[k])
		return false;
	return !b->bfree[k] && (k >= b->bn || b->io[k].res == -EAGAIN);
}

/* batch=on: what rx_batch_abandon and rx_slots_release would give back, read only. */
static void rxb_held(const struct net_rx *rx, struct net_snap_rx *s)
{
	const struct net_rx_batch *b = &rx->b;
	bool waiting[RX_BATCH] = { false };
	u64 seq[RX_BATCH];
	u16 head[RX_BATCH];
	int popped = 0, nh = 0, tail = 0;

	for (int i = 0; i < b->nextra; i++) {
		if (b->extra[i].slot >= 0)
			waiting[b->extra[i].slot] = true;
		else
			popped++;
	}
	for (int k = 0; k < b->nslots; k++) {
		if (b->bn && rxb_slot_used(b, k, waiting))
			continue;
		seq[nh] = b->slots[k].seq; /* slots keep pop order */
		head[nh++] = b->slots[k].head;
	}
	for (int k = b->bk; k < b->bn; k++)
		s->lost += b->io[k].res >= 0;
	while (tail < nh && seq[nh - 1 - tail] == b->pop_seq - (u64)popped - (u64)tail)
		tail++;
	s->unpop = (u16)(popped + tail);
	s->nzero = (u16)(nh - tail);
	memcpy(s->zero, head, (size_t)s->nzero * sizeof(head[0]));
}

/* The RX worker of pair p (NULL: none running). */
static const struct net_rx *rx_worker(const struct virtio_net *n, int p)
{
	for (int i = 0; i < n->nworkers; i++)
		if (n->w[i].w.kind == W_RX && n->w[i].w.pair == p)
			return &n->w[i].rx;
	return NULL;
}

/* Pair p's held buffers into s; -EBUSY when the ring says more are in flight. */
static int save_rx(const struct virtio_net *n, int p, struct net_snap_rx *s, char *err,
		   size_t errlen)
{
	const struct net_rx *rx = rx_worker(n, p);

	memset(s, 0, sizeof(*s));
	if (!rx || rx->w.broken)
		return 0; /* NEEDS_RESET is set: nothing of it is touched again */
	if (rx->nheld && rx->b.nslots) {
		errfmt(err, errlen, "%s: buffers held by both receive paths", rx->w.qname);
		return -EBUSY;
	}
	s->unpop = (u16)rx->nheld;
	s->lost = rx->spill_len != 0;
	if (rx->b.nslots || rx->b.nextra)
		rxb_held(rx, s);
	return 0;
}

/* Every ready queue's chains in flight are the held ones (none on TX and control). */
static int check_in_flight(const struct virtio_net *n, const struct net_snap_rx *rx, char *err,
			   size_t errlen)
{
	const struct virtio_device *vdev = &n->vdev;

	if (atomic_load(&vdev->status) & VIRTIO_CONFIG_S_NEEDS_RESET)
		return 0;
	for (int qi = 0; qi < vdev->nr_queues; qi++) {
		const struct virtqueue *vq = &vdev->q[qi].vq;
		bool data_rx = qi < 2 * n->pairs && qi % 2 == 0;
		u16 held = data_rx ? (u16)(rx[qi / 2].unpop + rx[qi / 2].nzero) : 0;
		u16 in_flight = (u16)(vq->last_avail - vq->used_idx);

		if (vq->ready && in_flight != held) {
			errfmt(err, errlen, "queue %d: %u chains in flight, %u held by its thread",
			       qi, in_flight, held);
			return -EBUSY;
		}
	}
	return 0;
}

int virtio_net_save(struct virtio_net *n, struct snap_rec_buf *b, char *err, size_t errlen)
{
	struct net_snap_rx rx[NET_MAX_QUEUE_PAIRS];
	struct net_snap s;
	int ret = 0;

	if (n->vhost) {
		errfmt(err, errlen, "vhost rings cannot be saved yet");
		return -EOPNOTSUPP;
	}
	/* The threads are parked (quiesce): their state holds still under run_lock. */
	pthread_mutex_lock(&n->run_lock);
	for (int p = 0; p < n->pairs && !ret; p++)
		ret = save_rx(n, p, &rx[p], err, errlen);
	if (!ret)
		ret = check_in_flight(n, rx, err, errlen);
	pthread_mutex_unlock(&n->run_lock);
	if (ret < 0)
		return ret;
	memset(&s, 0, sizeof(s));
	pthread_mutex_lock(&n->cfg_lock);
	memcpy(s.mac, n->cfg.mac, sizeof(s.mac));
	pthread_mutex_unlock(&n->cfg_lock);
	s.pairs = (u16)n->pairs;
	s.curr_pairs = (u16)atomic_load(&n->curr_pairs);
	s.mode = (u8)n->mode;
	s.promisc = atomic_load(&n->promisc);
	s.allmulti = atomic_load(&n->allmulti);
	snap_rec_put(b, NET_TAG_STATE, &s, sizeof(s));
	for (int p = 0; p < n->pairs; p++)
		snap_rec_put(b, (u16)(NET_TAG_RX + p), &rx[p], sizeof(rx[p]));
	return virtio_snap_save(&n->vdev, b, err, errlen);
}

/* ---- load ---- */

/* The records, checked on their own (against this NIC, not yet its queues). */
static int get_records(struct virtio_net *n, const void *sec, size_t len, struct net_snap *s,
		       struct net_snap_rx *rx, char *err, size_t errlen)
{
	int ret = virtio_snap_get(sec, len, NET_TAG_STATE, s, sizeof(*s), "virtio-net state", err,
				  errlen);
	u8 none;

	if (ret < 0)
		return ret;
	if (s->mode != (u8)n->mode) {
		errfmt(err, errlen, "the snapshot's backend was %s, this one is %s",
		       net_mode_str(s->mode), net_mode_str(n->mode));
		return -EINVAL;
	}
	if (s->pairs != n->pairs || s->curr_pairs < 1 || s->curr_pairs > s->pairs ||
	    s->promisc > 1 || s->allmulti > 1) {
		errfmt(err, errlen,
		       "%u queue pairs (%u receiving), this NIC has %d; or rx mode out of range",
		       s->pairs, s->curr_pairs, n->pairs);
		return -EINVAL;
	}
	for (int p = 0; p < n->pairs; p++) {
		ret = virtio_snap_get(sec, len, (u16)(NET_TAG_RX + p), &rx[p], sizeof(rx[p]),
				      "virtio-net receive buffers", err, errlen);
		if (ret < 0)
			return ret;
	}
	if (snap_rec_get(sec, len, (u16)(NET_TAG_RX + n->pairs), &none, 0) != -ENOENT) {
		errfmt(err, errlen, "receive buffers of queue pair %d: not on this NIC", n->pairs);
		return -EINVAL;
	}
	return 0;
}

/* Pair p's record against its loaded RX queue: counts within what is in flight, heads within
 * the ring, each once. */
static int check_rx(const struct virtio_net *n, int p, const struct net_snap_rx *s, char *err,
		    size_t errlen)
{
	const struct virtqueue *vq = &n->vdev.q[2 * p].vq;
	u16 in_flight = vq->ready ? (u16)(vq->last_avail - vq->used_idx) : 0;

	if (s->nzero > RX_BATCH || s->lost > RX_BATCH || s->unpop + s->nzero > in_flight) {
		errfmt(err, errlen, "rx%d: %u + %u held buffers (%u lost frames), %u in flight", p,
		       s->unpop, s->nzero, s->lost, in_flight);
		return -EINVAL;
	}
	for (int i = 0; i < s->nzero; i++) {
		bool twice = false;

		for (int j = 0; j < i; j++)
			twice |= s->zero[j] == s->zero[i];
		if (s->zero[i] >= vq->size || twice) {
			errfmt(err, errlen, "rx%d: held buffer %u out of range or twice", p,
			       s->zero[i]);
			return -EINVAL;
		}
	}
	return 0;
}

/* After the core's load: the records against the queues, then the held buffers given back
 * (nothing changed unless every check passed). */
static int give_back(struct virtio_net *n, const struct net_snap *s, const struct net_snap_rx *rx,
		     char *err, size_t errlen)
{
	int ret = 0;

	if (s->curr_pairs > 1 && !(atomic_load(&n->vdev.features) & F(VIRTIO_NET_F_MQ))) {
		errfmt(err, errlen, "%u pairs receiving without VIRTIO_NET_F_MQ", s->curr_pairs);
		return -EINVAL;
	}
	for (int p = 0; p < n->pairs && !ret; p++) {
		/* Without MQ queue 2 is the control queue: no pair but 0 receives. */
		if (p && !(atomic_load(&n->vdev.features) & F(VIRTIO_NET_F_MQ)) &&
		    (rx[p].unpop || rx[p].nzero || rx[p].lost)) {
			errfmt(err, errlen, "rx%d: buffers held without VIRTIO_NET_F_MQ", p);
			return -EINVAL;
		}
		ret = check_rx(n, p, &rx[p], err, errlen);
	}
	/* The save's rule: what was in flight is exactly what the records hand back. */
	if (!ret && check_in_flight(n, rx, err, errlen) < 0)
		ret = -EINVAL;
	if (ret < 0)
		return ret;
	for (int p = 0; p < n->pairs; p++) {
		struct virtio_queue *q = &n->vdev.q[2 * p];

		if (!q->vq.ready || (p && !(atomic_load(&n->vdev.features) & F(VIRTIO_NET_F_MQ))))
			continue;
		vq_unpop(&q->vq, rx[p].unpop);
		for (int i = 0; i < rx[p].nzero; i++)
			vq_push(&q->vq, rx[p].zero[i], 0);
		stat_add(&q->stats.drops, rx[p].lost);
	}
	return 0;
}

int virtio_net_load(struct virtio_net *n, const void *sec, size_t len, char *err, size_t errlen)
{
	struct net_snap_rx rx[NET_MAX_QUEUE_PAIRS];
	struct net_snap s;
	int ret = get_records(n, sec, len, &s, rx, err, errlen);

	if (ret < 0)
		return ret;
	/* The saved NIC ran its rings in lkvm (a vhost one is refused at save); vhost=auto may
	 * have opened vhost-net here, which would start its rings from index 0. */
	if (n->vhost) {
		errfmt(err, errlen,
		       "its rings are on vhost-net here, the snapshot's were not (vhost=off)");
		return -EINVAL;
	}
	ret = virtio_snap_load(&n->vdev, sec, len, err, errlen);
	if (ret < 0)
		return ret;
	ret = give_back(n, &s, rx, err, errlen);
	if (ret < 0) {
		/* Back to power-on, as virtio_snap_load leaves a device it refuses. */
		virtio_device_reset(&n->vdev);
		n->vdev.snap_start = false;
		return ret;
	}
	pthread_mutex_lock(&n->cfg_lock);
	memcpy(n->cfg.mac, s.mac, sizeof(s.mac));
	pthread_mutex_unlock(&n->cfg_lock);
	atomic_store(&n->promisc, s.promisc != 0);
	atomic_store(&n->allmulti, s.allmulti != 0);
	/* net_start, from virtio_snap_start, attaches them (before its threads run). */
	n->restore_pairs = n->vdev.snap_start ? s.curr_pairs : 0;
	return 0;
}

void virtio_net_start(struct virtio_net *n)
{
	virtio_snap_start(&n->vdev);
}

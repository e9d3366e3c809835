/* virtio-net RX: backend to guest, the drain loop both RX paths share, batch=off's per-frame path, the RX thread. */
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/iov.h"
#include "lkvm/kvm.h"
#include "net-priv.h"

/* How long RX pauses after a backend error, so a backend whose fd stays readable while
 * every read fails cannot make the thread spin. */
#define RX_BACKOFF_MS 10

/* A frame waiting in spill for chains that will not come (stop, reset, no room):
 * counted as a drop. */
static void rx_drop_spill(struct net_rx *rx)
{
	if (!rx->spill_len)
		return;
	rx->spill_len = 0;
	stat_add(&rx->w.n->vdev.q[rx->w.qi].stats.drops, 1);
}

/* Give the last n chains popped back to the ring, unless the queue is broken (then nothing of
 * it is touched again). Both paths give back through here: batch=off its held chains
 * (rx_release), batch=on its slots and a waiting frame's buffers (rx_slots_release,
 * rx_extra_drop). */
void rx_give_back(struct net_rx *rx, u16 n)
{
	if (n && !rx->w.broken)
		vq_unpop(&rx->w.n->vdev.q[rx->w.qi].vq, n);
}

/* Give back every held chain (the last ones popped), batch=on's slots too. */
static void rx_release(struct net_rx *rx)
{
	rx_drop_spill(rx);
	rx_slots_release(rx);
	rx_give_back(rx, (u16)rx->nheld);
	rx->nheld = rx->nheld_iov = 0;
	rx->held_len = 0;
}

/* Forget the first k held chains (used by a frame), keeping the rest in order. */
static void rx_consume(struct net_rx *rx, int k)
{
	int iovs = 0;

	for (int i = 0; i < k; i++) {
		iovs += rx->held[i].niov;
		rx->held_len -= rx->held[i].len;
	}
	memmove(rx->held, rx->held + k, (size_t)(rx->nheld - k) * sizeof(rx->held[0]));
	memmove(rx->iov, rx->iov + iovs, (size_t)(rx->nheld_iov - iovs) * sizeof(rx->iov[0]));
	rx->nheld -= k;
	rx->nheld_iov -= iovs;
}

/* The next receive buffer of rx's queue into e: 1, 0 when the ring has none, -1 when the queue
 * broke (a malformed chain, or a buffer that cannot hold the header; said by queue_broken).
 * Both paths pop through here (batch=on: rxb_pop). */
int rx_pop(struct net_rx *rx, struct vq_elem *e)
{
	struct net_worker *w = &rx->w;
	int r = vq_pop(&w->n->vdev.q[w->qi].vq, e);

	if (r < 0) {
		queue_broken(w, "malformed descriptor chain");
		return -1;
	}
	/* Every receive buffer must hold at least the header (§5.1.6.3.1). */
	if (r > 0 && (e->in_num == 0 || e->in_len < HDR_LEN)) {
		queue_broken(w, "receive buffer smaller than the header");
		return -1;
	}
	return r;
}

/* Hold chains until their writable bytes cover want (one chain without MRG_RXBUF, at
 * most RX_MAX_CHAINS / RX_MAX_IOV). GATHER_DRY: the ring ran out first. */
static int rx_gather(struct net_rx *rx, u64 want)
{
	struct net_worker *w = &rx->w;
	struct virtqueue *vq = &w->n->vdev.q[w->qi].vq;
	struct vq_elem *e = w->elem;
	int max = w->n->mrg_rxbuf ? RX_MAX_CHAINS : 1;
	int max_iov = rx->spill ? RX_MAX_IOV - 1 : RX_MAX_IOV; /* readv's limit, spill included */

	while (rx->nheld < max && rx->held_len < want) {
		int r = rx_pop(rx, e);

		if (r == 0)
			return GATHER_DRY;
		if (r < 0)
			return GATHER_BROKEN;
		if (rx->nheld_iov + e->in_num > max_iov) {
			vq_unpop(vq, 1);
			break;
		}
		memcpy(&rx->iov[rx->nheld_iov], &e->iov[e->out_num],
		       e->in_num * sizeof(struct iovec));
		rx->held[rx->nheld++] =
			(struct rx_chain){ .head = e->head, .niov = e->in_num, .len = e->in_len };
		rx->nheld_iov += e->in_num;
		rx->held_len += e->in_len;
	}
	return GATHER_OK;
}

enum { RECV_NONE, RECV_DONE, RECV_SPILLED, RECV_ERROR, RECV_GONE };

/* The frame (got bytes, header included) is in the first held chains: fill their used
 * elements and num_buffers, count it, forget those chains. */
static void rx_complete(struct net_rx *rx, u64 got)
{
	struct net_worker *w = &rx->w;
	struct virtio_queue_stats *st = &w->n->vdev.q[w->qi].stats;
	u64 rem;
	int used = 0;
	u16 nb;

	if (w->trace) /* T5: the frame is in the held chains */
		trace_rx_copied(w, rx->iov, rx->nheld_iov);
	/* Buffers are filled in order: the frame spans as many chains as it needs. */
	rem = got;
	for (used = 0; used < rx->nheld && rem; used++)
		rem -= MIN(rem, rx->held[used].len);
	/* num_buffers lives inside the first chain (its writable part is >= 12 bytes),
	 * possibly split across that chain's iovecs. Always present with VERSION_1; 1 when
	 * MRG_RXBUF is off. Written before any used element that could be flushed. */
	nb = htole16((u16)used);
	iov_to(rx->iov, rx->held[0].niov, NUM_BUFFERS_OFF, &nb, sizeof(nb));
	rem = got;
	for (int i = 0; i < used; i++) {
		u64 l = MIN(rem, rx->held[i].len);

		rem -= l;
		fill_used(w, rx->held[i].head, (u32)l);
	}
	stat_add(&st->packets, 1);
	stat_add(&st->bytes, got - HDR_LEN);
	rx_consume(rx, used);
}

/* The frame waiting in spill, now with more chains held (or all there will be): complete it
 * over them, or drop it when it still does not fit. RECV_DONE. */
static int rx_spill_in(struct net_rx *rx)
{
	u64 got = rx->spill_len;

	if (rx->spill_len > rx->held_len) {
		rx_drop_spill(rx);
		return RECV_DONE;
	}
	iov_to(rx->iov, rx->nheld_iov, rx->spill_off, rx->spill, rx->spill_len - rx->spill_off);
	rx->spill_len = 0;
	rx_complete(rx, got);
	return RECV_DONE;
}

/* Receive one frame into the held chains; fill the used elements of those it took. A
 * frame longer than them is kept in spill (RECV_SPILLED: the caller gathers more
 * chains and calls again) or dropped and counted, never delivered cut. expect: the frame's
 * length from peek_len (0: unknown); the caller holds all the chains it ever can for it. */
static int rx_one(struct net_rx *rx, struct net_backend *be, u64 expect)
{
	struct net_worker *w = &rx->w;
	struct virtio_queue_stats *st = &w->n->vdev.q[w->qi].stats;
	int niov = rx->nheld_iov;
	u64 room = 0;
	ssize_t got;

	if (rx->spill_len)
		return rx_spill_in(rx);
	/* Without peek_len the frame's size is unknown until read: lend recv the spill
	 * buffer behind the chains (rx_gather keeps an iovec free for it). */
	if (rx->spill && rx->held_len < SPILL_CAP) {
		room = SPILL_CAP - rx->held_len;
		rx->iov[niov++] = (struct iovec){ .iov_base = rx->spill, .iov_len = room };
	}
	stat_add(&st->calls, 1);
	got = be->ops->recv(be, rx->iov, niov);
	if (got == -EAGAIN)
		return RECV_NONE;
	if (got < 0 && gone_error(got)) {
		backend_gone(w, got);
		return RECV_GONE;
	}
	if (got < 0) {
		/* Backend error: nothing was consumed that we know of; wait for readiness again. */
		stat_add(&st->drops, 1);
		pr_debug_rl(&w->n->log_rl, "virtio-net %s: receive: %s", w->qname,
			    strerror((int)-got));
		return RECV_ERROR;
	}
	if ((u64)got < HDR_LEN) {
		/* A backend that broke its contract: the frame is gone; keep the buffers. */
		stat_add(&st->drops, 1);
		return RECV_DONE;
	}
	if ((u64)got < expect) {
		/* Cut by recv (the result is the chains' total): longer than every chain it
		 * can ever have (one without MRG_RXBUF, RX_MAX_CHAINS, the whole ring). Lost:
		 * counted, the chains kept for the next frame. */
		stat_add(&st->drops, 1);
		return RECV_DONE;
	}
	if ((u64)got > rx->held_len || (room && (u64)got == rx->held_len + room)) {
		/* Longer than the chains. Whole in chains + spill (shorter than their total)
		 * and more chains may come (MRG_RXBUF): wait for them. Otherwise (cut by the
		 * backend, or one chain per frame) it is lost: counted, the chains kept. */
		if ((u64)got < rx->held_len + room && w->n->mrg_rxbuf) {
			rx->spill_off = rx->held_len;
			rx->spill_len = (u64)got;
			return RECV_SPILLED;
		}
		stat_add(&st->drops, 1);
		return RECV_DONE;
	}
	rx_complete(rx, (u64)got);
	return RECV_DONE;
}

/* batch=off: one frame (or what ends the drain: *next says what the thread waits for then). */
static enum rx_step rx_frame_step(struct net_rx *rx, int *frames, enum rx_wait *next)
{
	struct net_worker *w = &rx->w;
	struct virtqueue *vq = &w->n->vdev.q[w->qi].vq;
	struct net_backend *be = w->n->be[w->pair];
	/* A frame waiting in spill comes first; its size is known. */
	ssize_t peek = rx->spill_len	   ? (ssize_t)rx->spill_len
		       : be->ops->peek_len ? be->ops->peek_len(be)
					   : -ENOTSUP;
	u64 want = peek > 0 ? MIN((u64)peek, (u64)MAX_PKT) : MAX_PKT;
	int g, r;

	if (peek == 0)
		return RX_STEP_END; /* nothing pending: wait on the backend */
	if (peek < 0 && gone_error(peek)) {
		backend_gone(w, peek);
		rx_release(rx);
		*next = RX_WAIT_DEAD;
		return RX_STEP_END;
	}
	g = rx_gather(rx, want);
	if (g == GATHER_BROKEN) {
		*next = RX_WAIT_DEAD;
		return RX_STEP_END;
	}
	/* Short of buffers. With the frame size known (peek) wait for the guest to
	 * post more instead of truncating, unless we already hold every chain the
	 * ring can have (then it can never fit: rx_one drops it, as it does one that
	 * needs more chains than rx_gather takes); without it, receive into what we
	 * have plus spill (rx_one). */
	if (g == GATHER_DRY && (rx->nheld == 0 || (peek > 0 && rx->nheld < vq->size)))
		return RX_STEP_DRY;
	r = rx_one(rx, be, peek > 0 ? (u64)peek : 0);
	if (r == RECV_SPILLED)
		return RX_STEP_NEXT;
	if (r == RECV_GONE) {
		rx_release(rx);
		*next = RX_WAIT_DEAD;
		return RX_STEP_END;
	}
	if (r == RECV_ERROR)
		*next = RX_WAIT_BACKOFF;
	if (r != RECV_DONE)
		return RX_STEP_END;
	(*frames)++;
	return RX_STEP_NEXT;
}

static bool rx_frame_more(struct net_rx *rx, int frames)
{
	return frames < BATCH;
}

static enum rx_wait rx_frame_end(struct net_rx *rx, enum rx_wait next)
{
	/* Waiting on the backend: hand the held chains back (kept while waiting for more). */
	if (next == RX_WAIT_FRAME || next == RX_WAIT_BACKOFF)
		rx_release(rx);
	return next;
}

static const struct rx_path rx_frame_path = {
	.more = rx_frame_more,
	.step = rx_frame_step,
	.end = rx_frame_end,
};

/*
 * Deliver up to BATCH frames, one interrupt per batch. RX notification protocol: while
 * the ring has buffers we leave notifications disabled and wait on the backend; when it
 * runs dry we flush (so the guest can recycle), re-enable and re-check (full barrier in
 * vq_enable_notify, see tx_drain in net-tx.c), and only if still dry wait for the kick. We
 * never read a frame we have no room for: the backend's own queue holds it (backpressure).
 * The one drain loop of both RX paths: the path's step delivers a frame (batch=off,
 * rx_frame_path) or a backend call's frames (batch=on, rx_batch_path in net-rx-batch.c) and
 * says when the ring ran dry; this loop does the flush, re-enable and re-check.
 */
static enum rx_wait rx_drain(struct net_rx *rx)
{
	const struct rx_path *path = rx->w.batch ? &rx_batch_path : &rx_frame_path;
	struct net_worker *w = &rx->w;
	struct virtio_queue *q = &w->n->vdev.q[w->qi];
	struct virtqueue *vq = &q->vq;
	enum rx_wait next = RX_WAIT_FRAME;
	int frames = 0;

	trace_pass(w); /* T4 of the frames this pass reads */
	while (path->more(rx, frames) && !leaving(w)) {
		enum rx_step r = path->step(rx, &frames, &next);

		if (r == RX_STEP_NEXT) {
			trace_pass(
				w); /* the next frame's T4: when it is looked for (see tx_pass) */
			continue;
		}
		if (r == RX_STEP_DRY) {
			flush_pending(w);
			if (vq_enable_notify(vq)) {
				vq_disable_notify(vq);
				continue;
			}
			next = RX_WAIT_BUFFERS;
		}
		break;
	}
	flush_pending(w);
	next = path->end(rx, next);
	if (frames)
		stat_add(&q->stats.batches, 1);
	return next;
}

/* rx_drain for an active pair only: an inactive one reads nothing (its tap queue is
 * detached, so it has nothing to read; a backend that gives it frames anyway gets the
 * backoff, not a spin). rx_gate keeps set_active_pairs from acknowledging a change while
 * a frame read before it is still on its way to the guest. */
static enum rx_wait rx_drain_active(struct net_rx *rx)
{
	struct net_worker *w = &rx->w;
	struct virtio_net *n = w->n;
	enum rx_wait next = RX_WAIT_BACKOFF;

	pthread_mutex_lock(&n->rx_gate[w->pair]);
	if (n->attached[w->pair])
		next = rx_drain(rx);
	pthread_mutex_unlock(&n->rx_gate[w->pair]);
	return next;
}

void net_rx_thread(void *arg)
{
	struct net_rx *rx = arg;
	struct net_worker *w = &rx->w;
	struct virtio_net *n = w->n;
	struct virtio_queue *q = &n->vdev.q[w->qi];
	struct net_backend *be = n->be[w->pair];
	enum rx_wait next = RX_WAIT_FRAME;

	/* We learn about buffers by looking at the ring when a frame is pending; kicks
	 * are needed only once it ran dry (vq_enable_notify in rx_drain). */
	vq_disable_notify(&q->vq);
	if (is_gone(n))
		next = RX_WAIT_DEAD;
	for (;;) {
		int m;

		if (next == RX_WAIT_BACKOFF) {
			struct pollfd p = { .fd = worker_fd(w->wk), .events = POLLIN };

			if (poll(&p, 1, RX_BACKOFF_MS) > 0 && worker_park(w->wk))
				break;
			next = RX_WAIT_FRAME;
			continue;
		}
		if (next == RX_WAIT_DEAD)
			m = wait_for(w, false, -1, 0);
		else if (next == RX_WAIT_BUFFERS)
			m = wait_for(w, true, -1, 0);
		else /* kicks are not needed now, but counted as they come */
			m = wait_for(w, true, be->rx_fd, POLLIN);
		/* A pause keeps what the thread waits for (and any held chains): the kicks and
		 * frames that come meanwhile are there to see after it. Waiting for buffers, it
		 * looks at the ring again after a pause: a drain left for the pause may have
		 * found buffers there already, with notifications off (rxb_end). */
		if ((m & WAKE_STOP) && stop_or_park(w, m))
			break;
		if (next == RX_WAIT_BUFFERS && (m & (WAKE_KICK | WAKE_STOP))) {
			vq_disable_notify(&q->vq);
			next = rx_drain_active(rx);
		} else if (next == RX_WAIT_FRAME && (m & WAKE_IO)) {
			next = rx_drain_active(rx);
		}
	}
	rx_release(rx);
	drain_kicks(q);
}

/* virtio_net_serve_once on an RX queue: deliver what the backend holds, then hand back the
 * chains held. */
void net_rx_serve(struct net_worker *w)
{
	struct net_rx *rx = (struct net_rx *)w;

	vq_disable_notify(&w->n->vdev.q[w->qi].vq);
	rx_drain_active(rx);
	rx_release(rx);
}

/* RX gathers iovecs and, when the backend cannot tell a frame's length first, a spill
 * buffer; batch=on adds its own (rx_batch_alloc). */
int net_rx_alloc(struct net_worker *w)
{
	struct net_rx *rx = (struct net_rx *)w;
	struct net_backend *be = w->n->be[w->pair];
	bool spill = !be->ops->peek_len || be->ops->peek_len(be) == -ENOTSUP;

	rx->iov = calloc(RX_MAX_IOV, sizeof(*rx->iov));
	if (spill)
		rx->spill = malloc(SPILL_CAP);
	if (!rx->iov || (spill && !rx->spill) || (w->n->batch && rx_batch_alloc(rx) < 0))
		return -ENOMEM;
	return 0;
}

void net_rx_free(struct net_worker *w)
{
	struct net_rx *rx = (struct net_rx *)w;

	rx_batch_free(rx);
	FREE_AND_NULL(rx->iov);
	FREE_AND_NULL(rx->spill);
}

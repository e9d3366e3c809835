/* virtio-net RX with batch=on: buffers held in slots, many frames per backend call, frames spanning buffers. */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/iov.h"
#include "lkvm/kvm.h"
#include "net-priv.h"

/* rx_pop, each buffer numbered (pop_seq: which held ones are the last popped). */
static int rxb_pop(struct net_rx *rx, struct vq_elem *e)
{
	int r = rx_pop(rx, e);

	if (r > 0)
		rx->b.pop_seq++;
	return r;
}

/* rx_give_back of the last n buffers rxb_pop took. */
static void rxb_give_back(struct net_rx *rx, u16 n)
{
	rx_give_back(rx, n);
	rx->b.pop_seq -= n;
}

/* Pop buffers into slots until `offer` are held or the ring ran out; each offers its
 * writable iovecs and then, unless the chain alone holds SPILL_CAP bytes, its spill buffer,
 * so that a frame longer than the chain is seen whole (or, at SPILL_CAP, seen cut), as in
 * rx_one. GATHER_OK or GATHER_BROKEN. */
static int rx_slots_fill(struct net_rx *rx)
{
	struct net_worker *w = &rx->w;
	struct net_rx_batch *b = &rx->b;
	struct virtqueue *vq = &w->n->vdev.q[w->qi].vq;
	struct vq_elem *e = w->elem;
	int want = MIN(b->offer, MIN(RX_BATCH, (int)vq->size));

	while (b->nslots < want) {
		struct rx_slot *s = &b->slots[b->nslots];
		int r = rxb_pop(rx, e), niov;

		if (r == 0)
			break;
		if (r < 0)
			return GATHER_BROKEN;
		/* readv takes RX_MAX_IOV iovecs, spill included: a longer chain offers its first. */
		niov = MIN((int)e->in_num, RX_MAX_IOV - 1);
		memcpy(s->iov, &e->iov[e->out_num], (size_t)niov * sizeof(struct iovec));
		s->len = iov_length(s->iov, niov);
		s->head = e->head;
		s->seq = b->pop_seq;
		s->room = s->len < SPILL_CAP ? SPILL_CAP - s->len : 0;
		if (s->room)
			s->iov[niov++] = (struct iovec){ .iov_base = s->spill, .iov_len = s->room };
		s->niov = (u16)niov;
		b->nslots++;
	}
	return GATHER_OK;
}

/* Write num_buffers into the frame's first buffer (inside its 12-byte header, written
 * before any of its used elements can be flushed), then count the frame. */
static void rx_frame_done(struct net_rx *rx, const struct rx_slot *s, int nbufs, u64 got)
{
	struct net_worker *w = &rx->w;
	struct virtio_queue_stats *st = &w->n->vdev.q[w->qi].stats;
	u16 nb = htole16((u16)nbufs);

	iov_to(s->iov, s->niov, NUM_BUFFERS_OFF, &nb, sizeof(nb));
	if (w->trace) /* T5: the frame is in the slot (its tail maybe in more buffers too) */
		trace_rx_copied(w, s->iov, s->niov);
	stat_add(&st->packets, 1);
	stat_add(&st->bytes, got - HDR_LEN);
}

/* Chains of w's queue the device holds (popped, not yet used): once they are the whole ring
 * the guest can post no more. */
static u16 rx_in_flight(struct net_rx *rx)
{
	struct net_worker *w = &rx->w;
	struct virtqueue *vq = &w->n->vdev.q[w->qi].vq;

	return (u16)(vq->last_avail - vq->used_idx - w->pending);
}

/*
 * A frame of got bytes in slot k, its tail in k's spill (MRG_RXBUF): copy the tail into more
 * buffers and complete the frame over slot k and them (consecutive used elements, as
 * num_buffers says). The buffers are the held slots after k that took no frame in this call
 * (bfree, cleared as they are taken), in order, then newly popped ones; they are kept in
 * b->extra until the frame is whole. GATHER_DRY: the ring ran out first: the frame waits
 * with what it has (the popped buffers stay the last popped), and the next call goes on
 * where this one stopped, as batch=off's rx_gather waits for a frame it holds in spill.
 * GATHER_FULL: it can never fit (RX_MAX_CHAINS buffers, or the device holds every buffer of
 * the ring, batch=off's rule): the caller drops it (rx_extra_drop). GATHER_BROKEN.
 */
static int rx_spill_out(struct net_rx *rx, int k, u64 got)
{
	struct net_worker *w = &rx->w;
	struct net_rx_batch *b = &rx->b;
	const struct rx_slot *s = &b->slots[k];
	struct vq_elem *e = w->elem;
	u64 off = s->len;

	for (int i = 0; i < b->nextra; i++)
		off += b->extra[i].len;
	for (int j = k + 1; j < b->nslots && off < got && b->nextra + 1 < RX_MAX_CHAINS; j++) {
		const struct rx_slot *x = &b->slots[j];
		u64 l;

		if (!b->bfree[j])
			continue;
		l = MIN(got - off, x->len);
		iov_to(x->iov, x->niov, 0, s->spill + (off - s->len), l);
		b->bfree[j] = false;
		b->extra[b->nextra++] =
			(struct rx_extra){ .head = x->head, .slot = j, .len = (u32)l };
		off += l;
	}
	while (off < got) {
		u64 l;
		int r;

		if (b->nextra + 1 >= RX_MAX_CHAINS)
			return GATHER_FULL;
		r = rxb_pop(rx, e);
		if (r == 0)
			return rx_in_flight(rx) >= w->n->vdev.q[w->qi].vq.size ? GATHER_FULL
									       : GATHER_DRY;
		if (r < 0)
			return GATHER_BROKEN;
		l = MIN(got - off, e->in_len);
		iov_to(&e->iov[e->out_num], e->in_num, 0, s->spill + (off - s->len), l);
		b->extra[b->nextra++] =
			(struct rx_extra){ .head = e->head, .slot = -1, .len = (u32)l };
		off += l;
	}
	rx_frame_done(rx, s, 1 + b->nextra, got);
	fill_used(w, s->head, (u32)s->len);
	for (int i = 0; i < b->nextra; i++)
		fill_used(w, b->extra[i].head, b->extra[i].len);
	b->nextra = 0;
	return GATHER_OK;
}

/* The frame of slot bk will not be completed: its extra buffers go back, the popped ones to
 * the ring (they are the last popped: nothing pops while a frame waits), the slots to those
 * that hold no frame. */
static void rx_extra_drop(struct net_rx *rx)
{
	struct net_rx_batch *b = &rx->b;
	u16 popped = 0;

	for (int i = 0; i < b->nextra; i++) {
		if (b->extra[i].slot >= 0)
			b->bfree[b->extra[i].slot] = true;
		else
			popped++;
	}
	rxb_give_back(rx, popped);
	b->nextra = 0;
}

/* What one batch call came to, worst last; RXB_WAIT: a frame waits for buffers. */
enum { RXB_MORE, RXB_EMPTY, RXB_ERROR, RXB_GONE, RXB_BROKEN, RXB_WAIT };

/*
 * The call's results are all taken (or abandoned): keep the slots that got none (in order,
 * first; the others' storage after them, for new pops), and adapt offer: doubled when every
 * slot got a frame, else twice what came (at least 1), so a trickle costs few empty reads
 * and a flood grows to RX_BATCH per call.
 */
static void rx_batch_end(struct net_rx *rx)
{
	struct net_rx_batch *b = &rx->b;
	struct rx_slot tmp[RX_BATCH];
	int keep = 0, j, n = b->bn;

	for (int k = n; k < b->nslots; k++)
		b->bused[k] = !b->bfree[k]; /* not offered, but taken by a frame's tail */
	for (int k = 0; k < b->nslots; k++)
		if (!b->bused[k])
			tmp[keep++] = b->slots[k];
	j = keep;
	for (int k = 0; k < b->nslots; k++)
		if (b->bused[k])
			tmp[j++] = b->slots[k];
	memcpy(b->slots, tmp, (size_t)b->nslots * sizeof(tmp[0]));
	b->nslots = keep;
	b->offer = b->bgot == n ? MIN(2 * b->offer, RX_BATCH) : MAX(1, MIN(2 * b->bgot, RX_BATCH));
	b->bn = 0;
}

/* Stop or reset while a call's results are not all taken (a frame waits for buffers): that
 * frame and those after it, read already, are lost and counted, as batch=off counts the
 * frame it holds in spill; their slots are held again as empty ones. */
static void rx_batch_abandon(struct net_rx *rx)
{
	struct net_worker *w = &rx->w;
	struct net_rx_batch *b = &rx->b;

	if (!b->bn)
		return;
	rx_extra_drop(rx);
	for (int k = b->bk; k < b->bn; k++) {
		if (b->io[k].res >= 0)
			stat_add(&w->n->vdev.q[w->qi].stats.drops, 1);
		b->bfree[k] = true;
		b->bused[k] = false;
	}
	rx_batch_end(rx);
}

/*
 * batch=on: give back the held slots. Those that are the last chains popped, in order (the
 * usual case: all of them), are unpopped, as batch=off gives back its chains. The others
 * (a frame landed in a later slot than one that saw -EAGAIN, or took chains popped after
 * the slots: rx_spill_out) cannot be: a chain popped after them went to the guest, and
 * unpopping past it would hand it out twice. They go back as used with length 0 (no byte
 * written, §2.7.8.2; a driver counts a length error for each, Linux rx_length_errors, and
 * recycles the buffer); kept, they would be lost to the guest until a reset, and for good
 * after a restart without one or when batch calls fail and the per-frame path goes on.
 */
void rx_slots_release(struct net_rx *rx)
{
	struct net_worker *w = &rx->w;
	struct net_rx_batch *b = &rx->b;
	int tail = 0;

	rx_batch_abandon(rx);
	while (tail < b->nslots && b->slots[b->nslots - 1 - tail].seq == b->pop_seq - (u64)tail)
		tail++;
	if (b->nslots && !w->broken) {
		for (int i = 0; i < b->nslots - tail; i++)
			fill_used(w, b->slots[i].head, 0);
		flush_pending(w);
	}
	rxb_give_back(rx, (u16)tail);
	b->nslots = 0;
}

/* One backend call over the first `offer` held slots; rx_batch_take takes its results.
 * RXB_MORE, RXB_ERROR when the call failed (the batch path is then over), or RXB_BROKEN when it
 * was in doubt (batch_in_doubt). */
static int rx_batch_call(struct net_rx *rx, struct net_backend *be)
{
	struct net_worker *w = &rx->w;
	struct net_rx_batch *b = &rx->b;
	int n = MIN(b->nslots, b->offer), ret;

	for (int k = 0; k < n; k++)
		b->io[k] = (struct net_io){ .iov = b->slots[k].iov, .iovcnt = b->slots[k].niov };
	stat_add(&w->n->vdev.q[w->qi].stats.calls, 1);
	ret = be->ops->recv_batch(be, b->io, n);
	if (ret == NET_BATCH_IN_DOUBT) {
		batch_in_doubt(w); /* the slots stay held, never used nor given back */
		return RXB_BROKEN;
	}
	if (ret < 0) {
		batch_failed(w, ret);
		rx_slots_release(rx);
		return RXB_ERROR;
	}
	/* A slot is free when it took no frame: not offered, or -EAGAIN. */
	for (int k = 0; k < b->nslots; k++) {
		b->bfree[k] = k >= n || b->io[k].res == -EAGAIN;
		b->bused[k] = false;
	}
	b->bn = n;
	b->bk = 0;
	b->bgot = 0;
	b->bres = RXB_MORE;
	return RXB_MORE;
}

/* Slot k's result is no frame (-EAGAIN, an error): what that means for the call (bres). */
static void rx_batch_no_frame(struct net_rx *rx, int k, ssize_t r)
{
	struct net_worker *w = &rx->w;
	struct net_rx_batch *b = &rx->b;

	if (r == -EAGAIN && !b->bfree[k]) {
		b->bused[k] = true; /* taken by an earlier frame (rx_spill_out) */
		return;
	}
	if (r == -EAGAIN) {
		b->bres = MAX(b->bres, RXB_EMPTY);
		return;
	}
	if (gone_error(r)) {
		backend_gone(w, r);
		b->bres = MAX(b->bres, RXB_GONE);
		return;
	}
	stat_add(&w->n->vdev.q[w->qi].stats.drops, 1);
	pr_debug_rl(&w->n->log_rl, "virtio-net %s: receive: %s", w->qname, strerror((int)-r));
	b->bres = MAX(b->bres, RXB_ERROR);
}

/*
 * Take the results of the last call, from slot bk on, in slot order: complete the frames
 * (counted in *frames), then rx_batch_end. RXB_WAIT: slot bk's frame waits for buffers
 * (rx_spill_out); the call's results are taken again, from there, once the guest posted
 * more. Otherwise the worst of what the call came to (RXB_*).
 */
static int rx_batch_take(struct net_rx *rx, int *frames)
{
	struct net_worker *w = &rx->w;
	struct net_rx_batch *b = &rx->b;
	struct virtio_queue_stats *st = &w->n->vdev.q[w->qi].stats;

	for (; b->bk < b->bn; b->bk++) {
		int k = b->bk;
		const struct rx_slot *s = &b->slots[k];
		ssize_t r = b->io[k].res;

		if (r < 0) {
			rx_batch_no_frame(rx, k, r);
			continue;
		}
		if ((u64)r < HDR_LEN) { /* a backend that broke its contract: the frame is gone */
			stat_add(&st->drops, 1);
			continue;
		}
		if ((u64)r <= s->len) {
			rx_frame_done(rx, s, 1, (u64)r);
			fill_used(w, s->head, (u32)r);
			b->bused[k] = true;
			b->bgot++;
			(*frames)++;
			continue;
		}
		/* Longer than the chain: whole in chain + spill (shorter than their total) and
		 * MRG_RXBUF: on into more buffers, waiting for them if the ring has too few now.
		 * Otherwise (cut by the backend, one chain per frame, or more buffers than it can
		 * ever have) it is lost: counted, the slot kept. */
		if ((u64)r < s->len + s->room && w->n->mrg_rxbuf) {
			int g = rx_spill_out(rx, k, (u64)r);

			if (g == GATHER_BROKEN)
				return RXB_BROKEN;
			if (g == GATHER_DRY)
				return RXB_WAIT;
			if (g == GATHER_OK) {
				b->bused[k] = true;
				b->bgot++;
				(*frames)++;
				continue;
			}
			rx_extra_drop(rx); /* GATHER_FULL */
		}
		stat_add(&st->drops, 1);
	}
	rx_batch_end(rx);
	return b->bres;
}

/* A waiting frame's call is finished whatever frames says: its results are bounded. */
static bool rxb_more(struct net_rx *rx, int frames)
{
	return rx->w.batch && (frames < BATCH || rx->b.bn);
}

/*
 * batch=on: rx_drain with many frames per backend call. The held slots are offered to the
 * backend while the ring has buffers (notifications off); one used-ring update and at most
 * one interrupt follow each call (flush_pending). When the ring runs dry with no slot held,
 * or a frame waits for more buffers, we flush, re-enable and re-check (rx_drain: full barrier
 * in vq_enable_notify, see tx_drain in net-tx.c), and only if still dry wait for the kick; no
 * backend call is made while a frame waits (the frames after it would overtake it). Slots stay
 * held while the thread waits for frames (they are the guest's buffers either way), and are
 * given back when it ends (rx_release).
 */
static enum rx_step rxb_step(struct net_rx *rx, int *frames, enum rx_wait *next)
{
	struct net_worker *w = &rx->w;
	int r;

	if (!rx->b.bn) {
		if (rx_slots_fill(rx) == GATHER_BROKEN) {
			*next = RX_WAIT_DEAD;
			return RX_STEP_END;
		}
		if (!rx->b.nslots)
			return RX_STEP_DRY;
		r = rx_batch_call(rx, w->n->be[w->pair]);
		if (r == RXB_BROKEN || r == RXB_ERROR) {
			*next = r == RXB_BROKEN ? RX_WAIT_DEAD : RX_WAIT_BACKOFF;
			return RX_STEP_END;
		}
	}
	r = rx_batch_take(rx, frames);
	flush_pending(w);
	if (r == RXB_WAIT)
		return RX_STEP_DRY;
	if (r == RXB_BROKEN || r == RXB_GONE)
		*next = RX_WAIT_DEAD;
	else if (r == RXB_ERROR)
		*next = RX_WAIT_BACKOFF;
	return r == RXB_MORE ? RX_STEP_NEXT : RX_STEP_END;
}

static enum rx_wait rxb_end(struct net_rx *rx, enum rx_wait next)
{
	/* Left (stop or pause) while a frame waits: on resume net_rx_thread looks at the ring again
	 * (RX_WAIT_BUFFERS), whether or not the kick came. */
	if (rx->b.bn && next == RX_WAIT_FRAME)
		return RX_WAIT_BUFFERS;
	return next;
}

const struct rx_path rx_batch_path = {
	.more = rxb_more,
	.step = rxb_step,
	.end = rxb_end,
};

/* batch=on: RX_BATCH slots, each with RX_MAX_IOV iovecs and a SPILL_CAP spill buffer (2 MiB
 * in all, touched only by frames longer than their buffer). */
int rx_batch_alloc(struct net_rx *rx)
{
	struct net_rx_batch *b = &rx->b;

	rx->w.batch = true;
	b->io = calloc(RX_BATCH, sizeof(*b->io));
	if (!b->io)
		return -ENOMEM;
	b->offer = 4;
	b->slots = calloc(RX_BATCH, sizeof(*b->slots));
	if (!b->slots)
		return -ENOMEM;
	b->slot_iov = calloc((size_t)RX_BATCH * RX_MAX_IOV, sizeof(*b->slot_iov));
	b->slot_spill = malloc((size_t)RX_BATCH * SPILL_CAP);
	if (!b->slot_iov || !b->slot_spill)
		return -ENOMEM;
	for (int i = 0; i < RX_BATCH; i++) {
		b->slots[i].iov = b->slot_iov + (size_t)i * RX_MAX_IOV;
		b->slots[i].spill = b->slot_spill + (size_t)i * SPILL_CAP;
	}
	return 0;
}

void rx_batch_free(struct net_rx *rx)
{
	struct net_rx_batch *b = &rx->b;

	if (rx->w.in_doubt) {
		keep_in_doubt(&rx->w, b->slot_iov, b->slot_spill);
		b->slot_iov = NULL;
		b->slot_spill = NULL;
	}
	FREE_AND_NULL(b->io);
	FREE_AND_NULL(b->slot_iov);
	FREE_AND_NULL(b->slot_spill);
	FREE_AND_NULL(b->slots);
	b->nslots = 0;
}

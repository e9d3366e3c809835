/* virtio-net TX: guest to backend, one chain or a batch per call, the tx=kick/timer/poll strategies, the TX thread. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "net-priv.h"

/* ---- TX ---- */

/* A chain the backend can take: a header and at most the largest frame (else, or with the
 * tap gone, it is dropped and counted here). */
static bool tx_valid(struct net_worker *w, const struct vq_elem *e)
{
	if (e->out_num == 0 || e->out_len < HDR_LEN || e->out_len > MAX_PKT || is_gone(w->n)) {
		stat_add(&w->n->vdev.q[w->qi].stats.drops, 1);
		return false;
	}
	return true;
}

/* Send one chain as is (header + frame). Returns true when stop was requested while the
 * backend was full (the chain is then not consumed). */
static bool tx_one(struct net_worker *w, struct net_backend *be, const struct vq_elem *e)
{
	struct virtio_queue_stats *st = &w->n->vdev.q[w->qi].stats;

	if (!tx_valid(w, e))
		return false;
	for (;;) {
		ssize_t r;

		stat_add(&st->calls, 1);
		trace_send(w);
		r = be->ops->send(be, e->iov, e->out_num);

		if (r >= 0) {
			if (w->trace)
				trace_tx_sent(w, e->iov, e->out_num);
			stat_add(&st->packets, 1);
			stat_add(&st->bytes, e->out_len - HDR_LEN);
			return false;
		}
		if (r != -EAGAIN) {
			if (gone_error(r))
				backend_gone(w, r);
			stat_add(&st->drops, 1);
			return false;
		}
		if (wait_for(w, false, be->tx_fd, POLLOUT) & WAKE_STOP)
			return true;
	}
}

enum tx_pass { TX_EMPTY, TX_STOP, TX_BROKEN };
static enum tx_pass tx_pass(struct net_worker *w, bool *worked);

/* batch=on: count the results of one send of io[0..m): each chain is done but those the backend
 * was too full for (-EAGAIN). True when there was one. */
static bool tx_batch_results(struct net_tx *t, int m)
{
	struct net_worker *w = &t->w;
	struct virtio_queue_stats *st = &w->n->vdev.q[w->qi].stats;
	bool full = false;

	for (int k = 0; k < m; k++) {
		const struct vq_elem *e = &t->elems[t->io_idx[k]];
		ssize_t r = t->io[k].res;

		if (r == -EAGAIN) {
			full = true;
			continue;
		}
		t->txs[t->io_idx[k]] = TXS_DONE;
		if (r >= 0) {
			if (w->trace)
				trace_tx_sent(w, e->iov, e->out_num);
			stat_add(&st->packets, 1);
			stat_add(&st->bytes, e->out_len - HDR_LEN);
			continue;
		}
		if (gone_error(r))
			backend_gone(w, r);
		stat_add(&st->drops, 1);
	}
	return full;
}

/*
 * batch=on: send the chains of elems[0..n) still marked TXS_SEND in one backend call; those
 * the backend was too full for (-EAGAIN) again once it is writable. Counts packets and
 * drops. Returns n, or, when stop came while the backend was full, the number of chains at
 * the front that are done: the caller gives back the rest (all still TXS_SEND: a chain
 * after them that was sent was counted and is done, so those before it are dropped here).
 * -1: the call was in doubt (batch_in_doubt): no chain of elems is completed or given back.
 */
static int tx_send_batch(struct net_tx *t, struct net_backend *be, int n)
{
	struct net_worker *w = &t->w;
	struct virtio_queue_stats *st = &w->n->vdev.q[w->qi].stats;
	int tail;

	for (;;) {
		int m = 0, ret;

		for (int i = 0; i < n; i++) {
			if (t->txs[i] != TXS_SEND)
				continue;
			t->io[m] = (struct net_io){ .iov = t->elems[i].iov,
						    .iovcnt = t->elems[i].out_num };
			t->io_idx[m++] = i;
		}
		if (!m)
			return n;
		ret = 0;
		if (w->batch) {
			stat_add(&st->calls, 1);
			trace_send(w);
			ret = be->ops->send_batch(be, t->io, m);
			if (ret == NET_BATCH_IN_DOUBT) {
				batch_in_doubt(w);
				return -1;
			}
			/* Refused before anything was attempted (an old kernel's tap without
			 * RWF_NOWAIT): these frames go one by one below, as all later ones do. */
			if (ret < 0)
				batch_failed(w, ret);
		}
		for (int k = 0; !w->batch && k < m; k++) {
			stat_add(&st->calls, 1);
			t->io[k].res = be->ops->send(be, t->io[k].iov, t->io[k].iovcnt);
		}
		if (!tx_batch_results(t, m))
			return n;
		if (wait_for(w, false, be->tx_fd, POLLOUT) & WAKE_STOP)
			break;
	}
	for (tail = n; tail > 0 && t->txs[tail - 1] == TXS_SEND; tail--)
		;
	for (int i = 0; i < tail; i++) {
		if (t->txs[i] == TXS_SEND) {
			t->txs[i] = TXS_DONE;
			stat_add(&st->drops, 1);
		}
	}
	return tail;
}

/*
 * batch=on: tx_pass in batches. Up to TX_BATCH chains are popped (a chain that fails
 * tx_valid is dropped alone and completed like the others), sent in one backend call, then
 * completed with one used-ring update and at most one interrupt (flush_pending applies
 * EVENT_IDX), before the next batch is popped. Same results as tx_pass otherwise.
 */
static enum tx_pass tx_pass_batch(struct net_tx *t, bool *worked)
{
	struct net_worker *w = &t->w;
	struct virtio_net *n = w->n;
	struct virtqueue *vq = &n->vdev.q[w->qi].vq;
	struct net_backend *be = n->be[w->pair];
	int max = MIN(TX_BATCH, vq->size);

	for (;;) {
		int cnt = 0, r = 0, done;

		while (cnt < max && (r = vq_pop(vq, &t->elems[cnt])) > 0) {
			t->txs[cnt] = tx_valid(w, &t->elems[cnt]) ? TXS_SEND : TXS_DONE;
			cnt++;
		}
		if (cnt) {
			*worked = true;
			done = tx_send_batch(t, be, cnt);
			if (done < 0) {
				flush_pending(w); /* only tx_valid's drops, before the call */
				return TX_BROKEN;
			}
			/* The device writes nothing into a TX chain: used len 0. */
			for (int i = 0; i < done; i++)
				fill_used(w, t->elems[i].head, 0);
			if (done < cnt) {
				vq_unpop(vq, (u16)(cnt - done));
				flush_pending(w);
				return TX_STOP;
			}
			flush_pending(w);
		}
		if (r < 0) {
			queue_broken(w, "malformed descriptor chain");
			return TX_BROKEN;
		}
		if (!w->batch)
			return tx_pass(w, worked); /* a batch call failed: on one by one */
		if (leaving(w))
			return TX_STOP;
		if (cnt < max)
			break; /* the ring ran out */
		trace_pass(w); /* the next batch's T2: see tx_pass */
	}
	return TX_EMPTY;
}

/* Pop and send chains until the ring is empty (or stop, or a malformed chain); every
 * used element is flushed on return. Notifications stay as the caller set them. */
static enum tx_pass tx_pass(struct net_worker *w, bool *worked)
{
	struct virtio_net *n = w->n;
	struct virtqueue *vq = &n->vdev.q[w->qi].vq;
	struct net_backend *be = n->be[w->pair];
	struct vq_elem *e = w->elem;
	u16 batch = MIN(BATCH, vq->size);

	for (;;) {
		int r = net_pop(w, e);

		if (r == 0)
			break;
		if (r < 0)
			return TX_BROKEN;
		*worked = true;
		if (tx_one(w, be, e)) {
			vq_unpop(vq, 1);
			flush_pending(w);
			return TX_STOP;
		}
		/* The device writes nothing into a TX chain: used len 0. */
		fill_used(w, e->head, 0);
		if (w->pending >= batch) {
			flush_pending(w);
			if (leaving(w))
				return TX_STOP;
		}
		/* The next chain's T2 is when the thread looks for it, not the pass's start: the
		 * guest may post it while the send above returns (the peer and the RX thread,
		 * woken by the write, ran first), and it was not waiting before then. */
		trace_pass(w);
	}
	flush_pending(w);
	return leaving(w) ? TX_STOP : TX_EMPTY;
}

/* The one place a TX thread re-enables notifications: returns true when chains arrived
 * meanwhile (the caller drains again). The test hook runs at the racy point: ring seen
 * empty, notifications still off, so a chain posted there gets no kick. */
static bool tx_reenable(struct net_worker *w)
{
	struct virtio_net *n = w->n;

	/* Set and cleared by a test while the threads run: atomics (found by TSan). */
	virtio_net_tx_hook hook = __atomic_load_n(&n->tx_hook, __ATOMIC_ACQUIRE);

	if (hook)
		hook(__atomic_load_n(&n->tx_hook_arg, __ATOMIC_RELAXED), w->qi);
	return vq_enable_notify(&n->vdev.q[w->qi].vq);
}

/* Smallest poll window: below this a window costs more in clock reads than it can save. */
#define POLL_MIN_NS 1000ull
/*
 * Between two looks at the ring the thread yields its core. On an idle host the threads a
 * round trip needs next (net-peer woken by our write, the RX thread woken by the echo) are
 * woken onto the poller's core, and a yield hands it to them at once, where a spinning poller
 * would keep it until the scheduler's next preemption check and a sleep costs the host's
 * timer wake-up (13-22 us on the PVM hosts whatever the length asked, measured with
 * clock_nanosleep: rr poll 30 us with 2 us sleeps, 19 us with yields). But a yield to a
 * thread that is busy, not woken (a vCPU, any other process sharing the core), returns only
 * when that thread's slice ends, milliseconds later (64-byte tx on a loaded host: 81 Kpps
 * yielding where 2 us sleeps gave 341 Kpps), and on such a host sleeping pauses lose to kicks
 * too (rr with one busy process beside it: 53.6 us polling with sleeps, 43.0 us kicked). So a
 * yield that took NET_POLL_YIELD_SLOW_NS (no woken thread runs that long) says the core is
 * contended: the thread stops polling for NET_POLL_BACKOFF_NS, each drain ending as tx=kick's
 * does, then tries again; at most one slice is lost per backoff.
 */
u64 virtio_net_poll_yielded(u64 backoff_until, u64 start, u64 end)
{
	return end - start >= NET_POLL_YIELD_SLOW_NS ? end + NET_POLL_BACKOFF_NS : backoff_until;
}

u64 virtio_net_poll_budget(u64 budget, u64 max_ns, bool hit, u64 gap_ns)
{
	u64 lo = MIN(POLL_MIN_NS, max_ns);

	if (hit)
		return MAX(MIN(budget * 2, max_ns), lo);
	if (gap_ns <= max_ns) /* too short: cover the gap, with a quarter more for jitter */
		return MAX(MIN(MAX(budget * 2, gap_ns + gap_ns / 4), max_ns), lo);
	return MAX(budget / 2, lo);
}

/*
 * tx=poll: with notifications still off, watch the avail ring for at most the current
 * budget, a bound in time, never in retries. Between looks the thread yields (why: above
 * virtio_net_poll_yielded); none while it backs off from a contended core.
 * The budget adapts like KVM's halt-polling (virtio_net_poll_budget): a window that found
 * a chain doubles it; for one that ran out, the next kick decides (tx_poll_kicked): a
 * kick within poll_max_ns of the window's start would have been caught by a longer
 * window, so the budget grows to cover that gap; a later one means the guest went quiet,
 * so it halves. Shrinking at once on a miss would never recover when chains come a bit
 * more than the window apart (rr: one chain per round trip).
 * Returns true when a chain is waiting.
 */
static bool tx_poll(struct net_tx *tx)
{
	struct net_worker *w = &tx->w;
	struct virtio_net *n = w->n;
	struct virtio_queue *q = &n->vdev.q[w->qi];
	u64 t0 = now_ns(), t = t0, t0_yield, budget = tx->poll_budget_ns;
	bool found = false, contended = false;

	if (t0 < tx->poll_backoff_until)
		return false;
	stat_add(&q->stats.polls, 1);
	while (!leaving(w)) {
		if (vq_has_avail(&q->vq)) {
			found = true;
			break;
		}
		if (t - t0 >= budget)
			break;
		sched_yield();
		t0_yield = t;
		t = now_ns();
		tx->poll_backoff_until =
			virtio_net_poll_yielded(tx->poll_backoff_until, t0_yield, t);
		if (t < tx->poll_backoff_until) {
			contended = true;
			break;
		}
	}
	t = now_ns();
	stat_add(&q->stats.poll_ns, t - t0);
	if (found) {
		stat_add(&q->stats.poll_hits, 1);
		tx->poll_budget_ns = virtio_net_poll_budget(budget, n->poll_max_ns, true, 0);
		tx->poll_missed_at = 0;
	} else {
		/* A window cut short by a contended core says nothing of the guest's pace. */
		tx->poll_missed_at = contended ? 0 : t0;
	}
	return found;
}

/* tx=poll: a kick woke the thread; settle the budget of the window that ran out before it. */
static void tx_poll_kicked(struct net_tx *t)
{
	struct virtio_net *n = t->w.n;

	if (n->tx_mode != NET_TX_POLL || !t->poll_missed_at)
		return;
	t->poll_budget_ns = virtio_net_poll_budget(t->poll_budget_ns, n->poll_max_ns, false,
						   now_ns() - t->poll_missed_at);
	t->poll_missed_at = 0;
}

/*
 * Wake-up protocol (the same for TX and control queues): disable notifications, drain the
 * ring, re-enable, re-check. vq_enable_notify has a full barrier between publishing
 * "kick me" and re-reading avail->idx, and the driver has one between its avail->idx
 * store and reading our flag, so either it kicks or we see its chain and loop: no lost
 * kick. A full ring cannot stall us either: draining takes every chain, whatever the
 * kick count, and with the backend full we block on its writability, not on the guest.
 * tx=poll inserts poll windows between "drained" and "re-enable": notifications stay off
 * while the thread watches the ring itself, and the re-enable + re-check still ends every
 * round, so a chain posted after the last look is seen there or kicked.
 * Returns true when stop was requested.
 */
static bool tx_drain(struct net_tx *t)
{
	struct net_worker *w = &t->w;
	struct virtio_queue *q = &w->n->vdev.q[w->qi];
	bool worked = false, stop = false;
	enum tx_pass r;

	do {
		vq_disable_notify(&q->vq);
		do {
			trace_pass(w); /* T2 of the chains this pass pops */
			r = w->batch ? tx_pass_batch(t, &worked) : tx_pass(w, &worked);
		} while (r == TX_EMPTY && w->n->tx_mode == NET_TX_POLL && tx_poll(t));
		if (r != TX_EMPTY) {
			stop = r == TX_STOP;
			break;
		}
	} while (tx_reenable(w));
	if (worked)
		stat_add(&q->stats.batches, 1);
	return stop;
}

/* tx=timer: after a notify keep notifications off for tx_timer_ns so the guest can queue
 * more without exits, then drain them in one go. Returns true when stop was requested. */
static bool tx_hold(struct net_worker *w)
{
	struct timespec ts = { .tv_sec = (time_t)(w->n->tx_timer_ns / 1000000000ull),
			       .tv_nsec = (long)(w->n->tx_timer_ns % 1000000000ull) };
	struct pollfd p = { .fd = worker_fd(w->wk), .events = POLLIN };
	u64 end = now_ns() + w->n->tx_timer_ns;

	vq_disable_notify(&w->n->vdev.q[w->qi].vq);
	for (;;) {
		int r = ppoll(&p, 1, &ts, NULL);
		u64 t;

		if (r > 0)
			return true;
		if (r < 0 && errno != EINTR) {
			pr_err("virtio-net %s: ppoll: %s", w->qname, strerror(errno));
			return true;
		}
		t = now_ns();
		if (t >= end)
			return false;
		ts = (struct timespec){ .tv_sec = 0, .tv_nsec = (long)MIN(end - t, 999999999ull) };
	}
}

void net_tx_thread(void *arg)
{
	struct net_tx *t = arg;
	struct net_worker *w = &t->w;
	struct virtio_queue *q = &w->n->vdev.q[w->qi];
	int wake = 0;

	/* Short sleeps must stay short: the default 50 us timer slack would dwarf the pause
	 * between polls and the timer hold. This thread only. */
	if (w->n->tx_mode != NET_TX_KICK)
		prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	/* Chains may have been posted (and kicked) before the thread existed. */
	if (tx_drain(t))
		wake = WAKE_STOP;
	for (;;) {
		if (!wake)
			wake = wait_for(w, !w->broken, -1, 0);
		if (wake & WAKE_STOP) {
			/* A chain cut short by a full backend was given back (tx_one): after a
			 * pause it goes first, with what was posted meanwhile. */
			if (stop_or_park(w, wake))
				break;
			wake = !w->broken && tx_drain(t) ? WAKE_STOP : 0;
			continue;
		}
		wake = 0;
		if (w->broken)
			continue;
		tx_poll_kicked(t);
		if ((w->n->tx_mode == NET_TX_TIMER && tx_hold(w)) || tx_drain(t))
			wake = WAKE_STOP;
	}
	drain_kicks(q);
}

/* virtio_net_serve_once on a TX queue: one drain, as after a kick. */
void net_tx_serve(struct net_worker *w)
{
	if (tx_drain((struct net_tx *)w))
		pr_debug("virtio-net %s: stopped while serving once", w->qname);
}

/* batch=on: TX pops a batch of chains at a time (TX_BATCH vq_elems, 16 KiB each). */
int net_tx_alloc(struct net_worker *w)
{
	struct net_tx *t = (struct net_tx *)w;

	t->poll_budget_ns = w->n->poll_max_ns;
	if (!w->n->batch)
		return 0;
	w->batch = true;
	t->io = calloc(TX_BATCH, sizeof(*t->io));
	t->elems = malloc(TX_BATCH * sizeof(*t->elems));
	t->txs = calloc(TX_BATCH, sizeof(*t->txs));
	t->io_idx = calloc(TX_BATCH, sizeof(*t->io_idx));
	return t->io && t->elems && t->txs && t->io_idx ? 0 : -ENOMEM;
}

void net_tx_free(struct net_worker *w)
{
	struct net_tx *t = (struct net_tx *)w;

	if (w->in_doubt) {
		keep_in_doubt(w, t->elems, NULL);
		t->elems = NULL;
	}
	FREE_AND_NULL(t->elems);
	FREE_AND_NULL(t->txs);
	FREE_AND_NULL(t->io);
	FREE_AND_NULL(t->io_idx);
}

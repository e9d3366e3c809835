/* The virtio-net device (virtio 1.2 §5.1): features, config space, per-queue TX/RX threads, control queue, counters. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_net.h>
#include <linux/virtio_ring.h>

#include "lkvm/dev.h"
#include "lkvm/kvm.h"
#include "lkvm/iov.h"
#include "lkvm/net-vhost.h"
#include "lkvm/stats.h"
#include "lkvm/worker.h"
#include "lkvm/virtio-net.h"

#define HDR_LEN NET_VNET_HDR_LEN
#define MAX_FRAME 65550		      /* 64 KiB GSO payload + Ethernet and VLAN headers */
#define MAX_PKT (HDR_LEN + MAX_FRAME) /* header + largest frame, in either direction */
#define BATCH 64		      /* TX: chains per flush; RX: frames per wake-up */
#define TX_BATCH NET_TX_BATCH
#define RX_BATCH NET_RX_BATCH
#define RX_MAX_CHAINS 64 /* mergeable buffers one frame may span */
#define RX_MAX_IOV 1024	 /* IOV_MAX: iovecs one recv may take */
#define NUM_BUFFERS_OFF offsetof(struct virtio_net_hdr_v1, num_buffers)
/* RX without peek_len: chains + spill always offer one byte more than the largest
 * frame, so a result of SPILL_CAP bytes can only mean a frame that was cut. */
#define SPILL_CAP (MAX_PKT + 1)

_Static_assert(sizeof(struct virtio_net_hdr_v1) == HDR_LEN, "virtio_net_hdr_v1 is 12 bytes");
_Static_assert(2 * NET_MAX_QUEUE_PAIRS + 1 <= VIRTIO_MAX_QUEUES, "queue table too small");
_Static_assert(RX_MAX_IOV >= VQ_MAX_SG, "one chain's writable part always fits");

#define F(bit) (1ULL << (bit))

enum worker_kind { W_RX, W_TX, W_CTL };

/* What an RX thread waits for next. */
enum rx_wait {
	RX_WAIT_FRAME,	 /* the guest may have buffers: wait for the backend (and count kicks) */
	RX_WAIT_BUFFERS, /* ring empty, notifications on: wait for the guest's kick */
	RX_WAIT_DEAD,	 /* queue broken: wait for stop only */
	RX_WAIT_BACKOFF, /* the backend failed while readable: pause, then try again */
};

/* How long RX pauses after a backend error, so a backend whose fd stays readable while
 * every read fails cannot make the thread spin. */
#define RX_BACKOFF_MS 10

/* An RX chain popped and not yet used. */
struct rx_chain {
	u16 head;
	u16 niov; /* its writable iovecs in worker.iov */
	u64 len;  /* their total */
};

/* batch=on RX: a posted buffer held for the next backend call. Its iovecs (and spill, see
 * rx_slot_fill) are the slot's own storage, which moves with it. */
struct rx_slot {
	u16 head;
	u16 niov;	   /* iov entries offered: the chain's writable part, then spill if room */
	u64 len;	   /* the chain's bytes in iov (without spill) */
	u64 room;	   /* spill bytes offered after them (0: none) */
	u64 seq;	   /* its place in this worker's pops (rx_release: only a tail unpops) */
	struct iovec *iov; /* RX_MAX_IOV entries */
	u8 *spill;	   /* SPILL_CAP bytes */
};

/* batch=on RX: a buffer a frame spans after its first (MRG_RXBUF, rx_spill_out). */
struct rx_extra {
	u16 head;
	int slot; /* the held slot it is (one that took no frame), or -1: popped for the frame */
	u32 len;  /* frame bytes in it */
};

/* batch=on TX: what became of each chain of a batch. */
enum tx_state { TXS_SEND, TXS_DONE };

/* One device thread: serves one queue (RX, TX or control). */
struct net_worker {
	struct virtio_net *n;
	enum worker_kind kind;
	int qi;	  /* index in vdev->q */
	int pair; /* backend index */
	char qname[24];
	struct worker *wk; /* its thread: one of n->wk */
	bool broken;	   /* the guest broke the queue: touch it no more */
	struct vq_elem *elem;
	/* RX: chains taken from the ring but not yet used, in pop order, so that they are
	 * always the last ones popped and vq_unpop can give them back; their writable
	 * iovecs are gathered in iov so recv writes straight into guest memory. */
	struct rx_chain held[RX_MAX_CHAINS];
	int nheld, nheld_iov;
	u64 held_len;
	struct iovec *iov;
	/* RX without peek_len (tap): recv gets one more iovec, into spill, so chains +
	 * spill hold SPILL_CAP bytes and a frame longer than the held chains is never cut
	 * unseen. Its first spill_off bytes are then in the held chains, the rest in spill;
	 * it waits there for more chains (MRG_RXBUF) or is dropped and counted: delivered
	 * whole or not at all. */
	u8 *spill;
	u64 spill_len; /* the waiting frame's length with header; 0: none */
	u64 spill_off;
	u16 pending;	    /* used elements filled, not yet flushed */
	u64 poll_budget_ns; /* tx=poll: the next window's length (adapts, <= poll_max_ns) */
	u64 poll_missed_at; /* tx=poll: start of the last window that ran out (0: none since) */
	/* batch=on (the backend has send_batch/recv_batch; cleared for good when a batch
	 * call fails): TX pops up to TX_BATCH chains into elems; RX holds up to RX_BATCH
	 * buffers in slots[0..nslots), in pop order, across wake-ups, and offers `offer` of
	 * them per call (adapting to how many frames a call finds). */
	bool batch;
	bool in_doubt; /* a batch call returned NET_BATCH_IN_DOUBT: see batch_in_doubt */
	struct vq_elem *elems;
	u8 *txs; /* enum tx_state per elems[i] */
	struct net_io *io;
	int *io_idx;
	struct rx_slot *slots;
	struct iovec *slot_iov; /* the slots' storage (slots move, these do not) */
	u8 *slot_spill;
	int nslots, offer;
	u64 pop_seq;
	/* batch=on RX: the results of the last backend call (in io), taken in slot order by
	 * rx_batch_take. A frame that waits for more buffers (MRG_RXBUF, rx_spill_out) stops
	 * there and the frames after it wait with it, so the guest gets them in order. */
	int bn;		      /* slots the call was given; 0: no call's results left to take */
	int bk;		      /* the next of them to take */
	int bgot;	      /* frames the call delivered so far */
	int bres;	      /* RXB_* so far */
	bool bfree[RX_BATCH]; /* the slot holds no frame of this call (and no tail of one) */
	bool bused[RX_BATCH]; /* the slot went to the guest */
	/* The buffers after its first that slot bk's frame spans so far (rx_spill_out). */
	struct rx_extra extra[RX_MAX_CHAINS];
	int nextra;
} __attribute__((
	aligned(64))); /* TX and RX workers of a pair run on different CPUs: no line shared */

struct virtio_net {
	struct virtio_device vdev;
	struct kvm *kvm;
	int pairs;
	struct net_backend *be[NET_MAX_QUEUE_PAIRS];

	/* Config space: written by the control thread (MAC_ADDR_SET), read by vCPUs. */
	pthread_mutex_t cfg_lock;
	struct virtio_net_config cfg;

	/* Threads: start, stop, pause and resume serialised by run_lock (a reset on a vCPU
	 * against teardown or a pause). */
	pthread_mutex_t run_lock;
	int nworkers;
	struct net_worker w[VIRTIO_MAX_QUEUES];
	struct worker wk[VIRTIO_MAX_QUEUES]; /* made with the device: w[i] runs on wk[i] */

	/* Negotiated at start. */
	bool mrg_rxbuf;
	bool batch;	       /* -n batch=on and every backend has the batch ops */
	atomic_int curr_pairs; /* pairs that receive: 1 at start and reset, then VQ_PAIRS_SET */
	/* Pair p's backend queue is in the host's steering (set_active_pairs). Changed under
	 * rx_gate[p], which pair p's RX thread holds while it drains. */
	bool attached[NET_MAX_QUEUE_PAIRS];
	pthread_mutex_t rx_gate[NET_MAX_QUEUE_PAIRS];
	bool closing; /* teardown: the backends close next, nothing to detach */
	/* -n vhost=on (or auto, where it opened): the data rings are vhost-net's
	 * (virtio/net-vhost.c); lkvm serves only the control queue. */
	struct net_vhost *vhost;
	atomic_bool promisc, allmulti;
	/* The host side went away (the tap was deleted under us): link down, said once. */
	atomic_bool backend_gone;

	/* TX strategy (-n tx=...), fixed at creation. */
	enum net_tx_mode tx_mode;
	u64 tx_timer_ns;    /* tx=timer: how long notifications stay off after a notify */
	u64 poll_max_ns;    /* tx=poll: upper bound of a poll window */
	bool coarse_timers; /* the host's sleeps round up to its tick (no high-res timers) */
	virtio_net_tx_hook tx_hook; /* tests: called between drain and re-enable */
	void *tx_hook_arg;
	struct ratelimit log_rl; /* messages a guest (or the host network) can repeat */
};

static inline void stat_add(atomic_ullong *c, u64 v)
{
	atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static inline u64 stat_get(atomic_ullong *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* Asked to stop or park: leave the drain loop at the next safe point. */
static inline bool leaving(struct net_worker *w)
{
	return worker_leaving(w->wk);
}

/* ---- iovec helpers: every copy bounded by the iovecs themselves ---- */

/* ---- waiting ---- */

/* WAKE_STOP: asked to stop or park (worker.h); WAKE_FAIL with it: poll itself failed. */
enum { WAKE_STOP = 1, WAKE_KICK = 2, WAKE_IO = 4, WAKE_FAIL = 8 };

/* Add what the guest's notifies left in kick_fd to stats.kicks. Only this queue's
 * thread reads the eventfd, so POLLIN means the read will not block. */
static bool take_kicks(struct virtio_queue *q)
{
	u64 v;

	if (read(q->kick_fd, &v, sizeof(v)) != sizeof(v))
		return false;
	stat_add(&q->stats.kicks, v);
	return true;
}

/* Non-blocking: count kicks still pending (at thread exit, so the totals are complete). */
static void drain_kicks(struct virtio_queue *q)
{
	struct pollfd p = { .fd = q->kick_fd, .events = POLLIN };

	if (q->kick_fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLIN))
		take_kicks(q);
}

/* Block until stop or park, a kick (if want_kick) or io_fd ready for io_events (if
 * io_fd >= 0). Returns WAKE_* bits; kicks are read and counted here. */
static int wait_for(struct net_worker *w, bool want_kick, int io_fd, short io_events)
{
	struct virtio_queue *q = &w->n->vdev.q[w->qi];
	struct pollfd p[3];
	int np = 0, ki = -1, ii = -1, r, m = 0;

	p[np++] = (struct pollfd){ .fd = worker_fd(w->wk), .events = POLLIN };
	if (want_kick && q->kick_fd >= 0) {
		ki = np;
		p[np++] = (struct pollfd){ .fd = q->kick_fd, .events = POLLIN };
	}
	if (io_fd >= 0) {
		ii = np;
		p[np++] = (struct pollfd){ .fd = io_fd, .events = io_events };
	}
	do
		r = poll(p, np, -1);
	while (r < 0 && errno == EINTR);
	if (r < 0) {
		/* Only EFAULT/ENOMEM/EINVAL remain: nothing sensible to retry; end the thread. */
		pr_err("virtio-net %s: poll: %s", w->qname, strerror(errno));
		return WAKE_STOP | WAKE_FAIL;
	}
	if (p[0].revents)
		return WAKE_STOP;
	if (ki >= 0 && (p[ki].revents & POLLIN) && take_kicks(q))
		m |= WAKE_KICK;
	if (ii >= 0 && p[ii].revents)
		m |= WAKE_IO;
	return m;
}

/* wait_for said WAKE_STOP: the safe point. True when the thread must end; false once a
 * pause is over. */
static bool stop_or_park(struct net_worker *w, int wake)
{
	return (wake & WAKE_FAIL) || worker_park(w->wk);
}

static void queue_broken(struct net_worker *w, const char *why)
{
	const char *detail = w->n->vdev.q[w->qi].vq.malformed_why;
	char msg[128];

	snprintf(msg, sizeof(msg), "%s: %s%s%s%s", w->qname, why, detail ? " (" : "",
		 detail ? detail : "", detail ? ")" : "");
	w->broken = true;
	virtio_set_needs_reset(&w->n->vdev, msg);
}

/* Publish the filled used elements and interrupt the guest if it asked for it
 * (virtio_notify_queue applies EVENT_IDX / NO_INTERRUPT). */
static void flush_pending(struct net_worker *w)
{
	struct virtio_queue *q = &w->n->vdev.q[w->qi];

	if (!w->pending)
		return;
	vq_flush(&q->vq, w->pending);
	w->pending = 0;
	virtio_notify_queue(&w->n->vdev, w->qi);
}

/* Fill one used element; flush early if a hostile driver could make the unflushed
 * batch wrap onto itself (a well-behaved one cannot: it has only size chains). */
static void fill_used(struct net_worker *w, u16 head, u32 len)
{
	struct virtqueue *vq = &w->n->vdev.q[w->qi].vq;

	vq_fill(vq, head, len, w->pending++);
	if (w->pending >= vq->size)
		flush_pending(w);
}

/* ---- the backend going away ---- */

/* What a backend returns once its host side is gone: a tap's fd once its interface was
 * deleted (tun: EBADFD), passt's stream once it ended (net/passt.c: closed, cut mid-frame,
 * an impossible length, reset). */
static bool gone_error(ssize_t r)
{
	return r == -EBADFD || r == -ENODEV || r == -ENXIO || r == -EPIPE || r == -EPROTO ||
	       r == -EMSGSIZE || r == -ECONNRESET;
}

/* The tap or passt disappeared: tell the guest the link is down (VIRTIO_NET_F_STATUS,
 * config-change interrupt) and say so once. The device keeps running: TX drops what the guest sends,
 * RX waits for a reset or the end, lkvm and the guest carry on. */
static void backend_gone(struct net_worker *w, ssize_t err)
{
	struct virtio_net *n = w->n;
	bool was = false;

	if (!atomic_compare_exchange_strong(&n->backend_gone, &was, true))
		return;
	pthread_mutex_lock(&n->cfg_lock);
	n->cfg.status &= htole16((u16)~VIRTIO_NET_S_LINK_UP);
	pthread_mutex_unlock(&n->cfg_lock);
	pr_warn("virtio-net: %s %s is gone (%s): link down; the guest keeps running without it",
		n->be[w->pair]->ops->name ? n->be[w->pair]->ops->name : "backend",
		n->be[w->pair]->ifname, strerror((int)-err));
	virtio_config_changed(&n->vdev);
}

static bool is_gone(const struct virtio_net *n)
{
	return atomic_load_explicit(&n->backend_gone, memory_order_relaxed);
}

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
		r = be->ops->send(be, e->iov, e->out_num);

		if (r >= 0) {
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

/* A batch call failed as a whole (the ring is unusable): this queue goes on one frame per
 * call. Said once per device. */
static void batch_failed(struct net_worker *w, int err)
{
	w->batch = false;
	pr_warn_rl(&w->n->log_rl,
		   "virtio-net %s: batch call failed (%s): one frame per call from now on",
		   w->qname, strerror(-err));
}

/*
 * A batch call left requests in flight (NET_BATCH_IN_DOUBT: the kernel failed in the middle of
 * an io_uring call). The kernel may still write into that call's chains and RX spill areas, or
 * read the iovec arrays, at any time. Waiting until the ring has no request in flight is no
 * option: the wait is what may have failed, and io_uring finishes a closed ring's requests
 * asynchronously, so no point of lkvm's is provably after the last of them. What is simplest to
 * prove is that the memory is never used again: the queue is broken (NEEDS_RESET; its chains are
 * neither used nor given back, rx_release and rx_slots_release skip a broken queue), and at stop
 * worker_free keeps the worker's batch storage for the life of the process (keep_in_doubt). The
 * backend takes no more batches (the tap's ring is dead): after a reset the queue goes on one
 * frame per call, so this happens at most once per queue and ring (2 MiB per RX queue, 1 MiB per
 * TX queue, kept).
 */
static void batch_in_doubt(struct net_worker *w)
{
	w->batch = false;
	w->in_doubt = true;
	queue_broken(w,
		     "a batch call failed with requests in flight; their buffers are not reused");
}

/*
 * batch=on: send the chains of elems[0..n) still marked TXS_SEND in one backend call; those
 * the backend was too full for (-EAGAIN) again once it is writable. Counts packets and
 * drops. Returns n, or, when stop came while the backend was full, the number of chains at
 * the front that are done: the caller gives back the rest (all still TXS_SEND: a chain
 * after them that was sent was counted and is done, so those before it are dropped here).
 * -1: the call was in doubt (batch_in_doubt): no chain of elems is completed or given back.
 */
static int tx_send_batch(struct net_worker *w, struct net_backend *be, int n)
{
	struct virtio_queue_stats *st = &w->n->vdev.q[w->qi].stats;
	int tail;

	for (;;) {
		int m = 0, ret;
		bool full = false;

		for (int i = 0; i < n; i++) {
			if (w->txs[i] != TXS_SEND)
				continue;
			w->io[m] = (struct net_io){ .iov = w->elems[i].iov,
						    .iovcnt = w->elems[i].out_num };
			w->io_idx[m++] = i;
		}
		if (!m)
			return n;
		ret = 0;
		if (w->batch) {
			stat_add(&st->calls, 1);
			ret = be->ops->send_batch(be, w->io, m);
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
			w->io[k].res = be->ops->send(be, w->io[k].iov, w->io[k].iovcnt);
		}
		for (int k = 0; k < m; k++) {
			const struct vq_elem *e = &w->elems[w->io_idx[k]];
			ssize_t r = w->io[k].res;

			if (r == -EAGAIN) {
				full = true;
				continue;
			}
			w->txs[w->io_idx[k]] = TXS_DONE;
			if (r >= 0) {
				stat_add(&st->packets, 1);
				stat_add(&st->bytes, e->out_len - HDR_LEN);
				continue;
			}
			if (gone_error(r))
				backend_gone(w, r);
			stat_add(&st->drops, 1);
		}
		if (!full)
			return n;
		if (wait_for(w, false, be->tx_fd, POLLOUT) & WAKE_STOP)
			break;
	}
	for (tail = n; tail > 0 && w->txs[tail - 1] == TXS_SEND; tail--)
		;
	for (int i = 0; i < tail; i++) {
		if (w->txs[i] == TXS_SEND) {
			w->txs[i] = TXS_DONE;
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
static enum tx_pass tx_pass_batch(struct net_worker *w, bool *worked)
{
	struct virtio_net *n = w->n;
	struct virtqueue *vq = &n->vdev.q[w->qi].vq;
	struct net_backend *be = n->be[w->pair];
	int max = MIN(TX_BATCH, vq->size);

	for (;;) {
		int cnt = 0, r = 0, done;

		while (cnt < max && (r = vq_pop(vq, &w->elems[cnt])) > 0) {
			w->txs[cnt] = tx_valid(w, &w->elems[cnt]) ? TXS_SEND : TXS_DONE;
			cnt++;
		}
		if (cnt) {
			*worked = true;
			done = tx_send_batch(w, be, cnt);
			if (done < 0) {
				flush_pending(w); /* only tx_valid's drops, before the call */
				return TX_BROKEN;
			}
			/* The device writes nothing into a TX chain: used len 0. */
			for (int i = 0; i < done; i++)
				fill_used(w, w->elems[i].head, 0);
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
		int r = vq_pop(vq, e);

		if (r == 0)
			break;
		if (r < 0) {
			flush_pending(w);
			queue_broken(w, "malformed descriptor chain");
			return TX_BROKEN;
		}
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
/* The pause between two looks at the ring. A sleep, not sched_yield: a yielding thread
 * that shares a core with a busy vCPU gets the core back only at the vCPU's next tick
 * (milliseconds), while a timer wake-up preempts it. Except where the host has no
 * high-resolution timers (clock_getres coarser than POLL_COARSE_NS, e.g. highres=off, as
 * in the emulated host): there every sleep lasts a whole tick (4 ms at HZ=250), longer than
 * any window, and yielding is the lesser evil. */
#define POLL_PAUSE_NS 2000
#define POLL_COARSE_NS 10000

u64 virtio_net_poll_budget(u64 budget, u64 max_ns, bool hit, u64 gap_ns)
{
	u64 lo = MIN(POLL_MIN_NS, max_ns);

	if (hit)
		return MAX(MIN(budget * 2, max_ns), lo);
	if (gap_ns <= max_ns) /* too short: cover the gap, with a quarter more for jitter */
		return MAX(MIN(MAX(budget * 2, gap_ns + gap_ns / 4), max_ns), lo);
	return MAX(budget / 2, lo);
}

/* True when the host's sleeps cannot be shorter than POLL_COARSE_NS. */
static bool timers_coarse(void)
{
	struct timespec res;

	return !clock_getres(CLOCK_MONOTONIC, &res) && (res.tv_sec || res.tv_nsec > POLL_COARSE_NS);
}

/*
 * tx=poll: with notifications still off, watch the avail ring for at most the current
 * budget, a bound in time, never in retries. Between looks the thread sleeps
 * POLL_PAUSE_NS: on a 2-core host a spinning device thread would take the vCPU's core.
 * The budget adapts like KVM's halt-polling (virtio_net_poll_budget): a window that found
 * a chain doubles it; for one that ran out, the next kick decides (tx_poll_kicked): a
 * kick within poll_max_ns of the window's start would have been caught by a longer
 * window, so the budget grows to cover that gap; a later one means the guest went quiet,
 * so it halves. Shrinking at once on a miss would never recover when chains come a bit
 * more than the window apart (rr: one chain per round trip).
 * Returns true when a chain is waiting.
 */
static bool tx_poll(struct net_worker *w)
{
	struct virtio_net *n = w->n;
	struct virtio_queue *q = &n->vdev.q[w->qi];
	u64 t0 = now_ns(), t = t0, budget = w->poll_budget_ns;
	bool found = false;

	stat_add(&q->stats.polls, 1);
	while (!leaving(w)) {
		if (vq_has_avail(&q->vq)) {
			found = true;
			break;
		}
		if (t - t0 >= budget)
			break;
		if (n->coarse_timers)
			sched_yield();
		else
			clock_nanosleep(CLOCK_MONOTONIC, 0,
					&(struct timespec){ .tv_nsec = POLL_PAUSE_NS }, NULL);
		t = now_ns();
	}
	t = now_ns();
	stat_add(&q->stats.poll_ns, t - t0);
	if (found) {
		stat_add(&q->stats.poll_hits, 1);
		w->poll_budget_ns = virtio_net_poll_budget(budget, n->poll_max_ns, true, 0);
		w->poll_missed_at = 0;
	} else {
		w->poll_missed_at = t0;
	}
	return found;
}

/* tx=poll: a kick woke the thread; settle the budget of the window that ran out before it. */
static void tx_poll_kicked(struct net_worker *w)
{
	if (w->n->tx_mode != NET_TX_POLL || !w->poll_missed_at)
		return;
	w->poll_budget_ns = virtio_net_poll_budget(w->poll_budget_ns, w->n->poll_max_ns, false,
						   now_ns() - w->poll_missed_at);
	w->poll_missed_at = 0;
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
static bool tx_drain(struct net_worker *w)
{
	struct virtio_queue *q = &w->n->vdev.q[w->qi];
	bool worked = false, stop = false;
	enum tx_pass r;

	do {
		vq_disable_notify(&q->vq);
		do
			r = w->batch ? tx_pass_batch(w, &worked) : tx_pass(w, &worked);
		while (r == TX_EMPTY && w->n->tx_mode == NET_TX_POLL && tx_poll(w));
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

static void tx_thread(void *arg)
{
	struct net_worker *w = arg;
	struct virtio_queue *q = &w->n->vdev.q[w->qi];
	int wake = 0;

	/* Short sleeps must stay short: the default 50 us timer slack would dwarf the pause
	 * between polls and the timer hold. This thread only. */
	if (w->n->tx_mode != NET_TX_KICK)
		prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	/* Chains may have been posted (and kicked) before the thread existed. */
	if (tx_drain(w))
		wake = WAKE_STOP;
	for (;;) {
		if (!wake)
			wake = wait_for(w, !w->broken, -1, 0);
		if (wake & WAKE_STOP) {
			/* A chain cut short by a full backend was given back (tx_one): after a
			 * pause it goes first, with what was posted meanwhile. */
			if (stop_or_park(w, wake))
				break;
			wake = !w->broken && tx_drain(w) ? WAKE_STOP : 0;
			continue;
		}
		wake = 0;
		if (w->broken)
			continue;
		tx_poll_kicked(w);
		if ((w->n->tx_mode == NET_TX_TIMER && tx_hold(w)) || tx_drain(w))
			wake = WAKE_STOP;
	}
	drain_kicks(q);
}

/* ---- RX ---- */

/* A frame waiting in spill for chains that will not come (stop, reset, no room):
 * counted as a drop. */
static void rx_drop_spill(struct net_worker *w)
{
	if (!w->spill_len)
		return;
	w->spill_len = 0;
	stat_add(&w->n->vdev.q[w->qi].stats.drops, 1);
}

static void rx_slots_release(struct net_worker *w);

/* Give back every held chain (the last ones popped). */
static void rx_release(struct net_worker *w)
{
	rx_drop_spill(w);
	rx_slots_release(w);
	if (w->nheld && !w->broken)
		vq_unpop(&w->n->vdev.q[w->qi].vq, (u16)w->nheld);
	w->nheld = w->nheld_iov = 0;
	w->held_len = 0;
}

/* Forget the first k held chains (used by a frame), keeping the rest in order. */
static void rx_consume(struct net_worker *w, int k)
{
	int iovs = 0;

	for (int i = 0; i < k; i++) {
		iovs += w->held[i].niov;
		w->held_len -= w->held[i].len;
	}
	memmove(w->held, w->held + k, (size_t)(w->nheld - k) * sizeof(w->held[0]));
	memmove(w->iov, w->iov + iovs, (size_t)(w->nheld_iov - iovs) * sizeof(w->iov[0]));
	w->nheld -= k;
	w->nheld_iov -= iovs;
}

enum { GATHER_OK, GATHER_DRY, GATHER_BROKEN, GATHER_FULL };

/* The next receive buffer of w's queue into e: 1, 0 when the ring has none, -1 when the queue
 * broke (a malformed chain, or a buffer that cannot hold the header; said by queue_broken). */
static int rx_pop(struct net_worker *w, struct vq_elem *e)
{
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
static int rx_gather(struct net_worker *w, u64 want)
{
	struct virtqueue *vq = &w->n->vdev.q[w->qi].vq;
	struct vq_elem *e = w->elem;
	int max = w->n->mrg_rxbuf ? RX_MAX_CHAINS : 1;
	int max_iov = w->spill ? RX_MAX_IOV - 1 : RX_MAX_IOV; /* readv's limit, spill included */

	while (w->nheld < max && w->held_len < want) {
		int r = rx_pop(w, e);

		if (r == 0)
			return GATHER_DRY;
		if (r < 0)
			return GATHER_BROKEN;
		if (w->nheld_iov + e->in_num > max_iov) {
			vq_unpop(vq, 1);
			break;
		}
		memcpy(&w->iov[w->nheld_iov], &e->iov[e->out_num],
		       e->in_num * sizeof(struct iovec));
		w->held[w->nheld++] =
			(struct rx_chain){ .head = e->head, .niov = e->in_num, .len = e->in_len };
		w->nheld_iov += e->in_num;
		w->held_len += e->in_len;
	}
	return GATHER_OK;
}

enum { RECV_NONE, RECV_DONE, RECV_SPILLED, RECV_ERROR, RECV_GONE };

/* The frame (got bytes, header included) is in the first held chains: fill their used
 * elements and num_buffers, count it, forget those chains. */
static void rx_complete(struct net_worker *w, u64 got)
{
	struct virtio_queue_stats *st = &w->n->vdev.q[w->qi].stats;
	u64 rem;
	int used = 0;
	u16 nb;

	/* Buffers are filled in order: the frame spans as many chains as it needs. */
	rem = got;
	for (used = 0; used < w->nheld && rem; used++)
		rem -= MIN(rem, w->held[used].len);
	/* num_buffers lives inside the first chain (its writable part is >= 12 bytes),
	 * possibly split across that chain's iovecs. Always present with VERSION_1; 1 when
	 * MRG_RXBUF is off. Written before any used element that could be flushed. */
	nb = htole16((u16)used);
	iov_to(w->iov, w->held[0].niov, NUM_BUFFERS_OFF, &nb, sizeof(nb));
	rem = got;
	for (int i = 0; i < used; i++) {
		u64 l = MIN(rem, w->held[i].len);

		rem -= l;
		fill_used(w, w->held[i].head, (u32)l);
	}
	stat_add(&st->packets, 1);
	stat_add(&st->bytes, got - HDR_LEN);
	rx_consume(w, used);
}

/* Receive one frame into the held chains; fill the used elements of those it took. A
 * frame longer than them is kept in spill (RECV_SPILLED: the caller gathers more
 * chains and calls again) or dropped and counted, never delivered cut. expect: the frame's
 * length from peek_len (0: unknown); the caller holds all the chains it ever can for it. */
static int rx_one(struct net_worker *w, struct net_backend *be, u64 expect)
{
	struct virtio_queue_stats *st = &w->n->vdev.q[w->qi].stats;
	int niov = w->nheld_iov;
	u64 room = 0;
	ssize_t got;

	if (w->spill_len) {
		/* The waiting frame, now with more chains held (or all there will be). */
		if (w->spill_len > w->held_len) {
			rx_drop_spill(w);
			return RECV_DONE;
		}
		iov_to(w->iov, w->nheld_iov, w->spill_off, w->spill, w->spill_len - w->spill_off);
		got = (ssize_t)w->spill_len;
		w->spill_len = 0;
		rx_complete(w, (u64)got);
		return RECV_DONE;
	}
	/* Without peek_len the frame's size is unknown until read: lend recv the spill
	 * buffer behind the chains (rx_gather keeps an iovec free for it). */
	if (w->spill && w->held_len < SPILL_CAP) {
		room = SPILL_CAP - w->held_len;
		w->iov[niov++] = (struct iovec){ .iov_base = w->spill, .iov_len = room };
	}
	stat_add(&st->calls, 1);
	got = be->ops->recv(be, w->iov, niov);
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
	if ((u64)got > w->held_len || (room && (u64)got == w->held_len + room)) {
		/* Longer than the chains. Whole in chains + spill (shorter than their total)
		 * and more chains may come (MRG_RXBUF): wait for them. Otherwise (cut by the
		 * backend, or one chain per frame) it is lost: counted, the chains kept. */
		if ((u64)got < w->held_len + room && w->n->mrg_rxbuf) {
			w->spill_off = w->held_len;
			w->spill_len = (u64)got;
			return RECV_SPILLED;
		}
		stat_add(&st->drops, 1);
		return RECV_DONE;
	}
	rx_complete(w, (u64)got);
	return RECV_DONE;
}

/*
 * Deliver up to BATCH frames, one interrupt per batch. RX notification protocol: while
 * the ring has buffers we leave notifications disabled and wait on the backend; when it
 * runs dry we flush (so the guest can recycle), re-enable and re-check (full barrier in
 * vq_enable_notify, see tx_drain), and only if still dry wait for the kick. We never read
 * a frame we have no room for: the backend's own queue holds it (backpressure).
 */
static enum rx_wait rx_drain_batch(struct net_worker *w);

static enum rx_wait rx_drain(struct net_worker *w)
{
	struct virtio_net *n = w->n;
	struct virtio_queue *q = &n->vdev.q[w->qi];
	struct virtqueue *vq = &q->vq;
	struct net_backend *be = n->be[w->pair];
	enum rx_wait next = RX_WAIT_FRAME;
	int frames = 0;

	if (w->batch)
		return rx_drain_batch(w);

	while (frames < BATCH && !leaving(w)) {
		/* A frame waiting in spill comes first; its size is known. */
		ssize_t peek = w->spill_len	   ? (ssize_t)w->spill_len
			       : be->ops->peek_len ? be->ops->peek_len(be)
						   : -ENOTSUP;
		u64 want = peek > 0 ? MIN((u64)peek, (u64)MAX_PKT) : MAX_PKT;
		int g, r;

		if (peek == 0)
			break; /* nothing pending: wait on the backend */
		if (peek < 0 && gone_error(peek)) {
			backend_gone(w, peek);
			rx_release(w);
			next = RX_WAIT_DEAD;
			break;
		}
		g = rx_gather(w, want);
		if (g == GATHER_BROKEN) {
			next = RX_WAIT_DEAD;
			break;
		}
		/* Short of buffers. With the frame size known (peek) wait for the guest to
		 * post more instead of truncating, unless we already hold every chain the
		 * ring can have (then it can never fit: rx_one drops it, as it does one that
		 * needs more chains than rx_gather takes); without it, receive into what we
		 * have plus spill (rx_one). */
		if (g == GATHER_DRY && (w->nheld == 0 || (peek > 0 && w->nheld < vq->size))) {
			flush_pending(w);
			if (vq_enable_notify(vq)) {
				vq_disable_notify(vq);
				continue;
			}
			next = RX_WAIT_BUFFERS;
			break;
		}
		r = rx_one(w, be, peek > 0 ? (u64)peek : 0);
		if (r == RECV_SPILLED)
			continue;
		if (r == RECV_GONE) {
			rx_release(w);
			next = RX_WAIT_DEAD;
			break;
		}
		if (r == RECV_ERROR)
			next = RX_WAIT_BACKOFF;
		if (r != RECV_DONE)
			break;
		frames++;
	}
	flush_pending(w);
	/* Waiting on the backend: hand the held chains back (kept while waiting for more). */
	if (next == RX_WAIT_FRAME || next == RX_WAIT_BACKOFF)
		rx_release(w);
	if (frames)
		stat_add(&q->stats.batches, 1);
	return next;
}

/* rx_drain for an active pair only: an inactive one reads nothing (its tap queue is
 * detached, so it has nothing to read; a backend that gives it frames anyway gets the
 * backoff, not a spin). rx_gate keeps set_active_pairs from acknowledging a change while
 * a frame read before it is still on its way to the guest. */
static enum rx_wait rx_drain_active(struct net_worker *w)
{
	struct virtio_net *n = w->n;
	enum rx_wait next = RX_WAIT_BACKOFF;

	pthread_mutex_lock(&n->rx_gate[w->pair]);
	if (n->attached[w->pair])
		next = rx_drain(w);
	pthread_mutex_unlock(&n->rx_gate[w->pair]);
	return next;
}

/* ---- RX, batch=on ---- */

/* Pop buffers into slots until `offer` are held or the ring ran out; each offers its
 * writable iovecs and then, unless the chain alone holds SPILL_CAP bytes, its spill buffer,
 * so that a frame longer than the chain is seen whole (or, at SPILL_CAP, seen cut), as in
 * rx_one. GATHER_OK or GATHER_BROKEN. */
static int rx_slots_fill(struct net_worker *w)
{
	struct virtqueue *vq = &w->n->vdev.q[w->qi].vq;
	struct vq_elem *e = w->elem;
	int want = MIN(w->offer, MIN(RX_BATCH, (int)vq->size));

	while (w->nslots < want) {
		struct rx_slot *s = &w->slots[w->nslots];
		int r = rx_pop(w, e), niov;

		if (r == 0)
			break;
		if (r < 0)
			return GATHER_BROKEN;
		w->pop_seq++;
		/* readv takes RX_MAX_IOV iovecs, spill included: a longer chain offers its first. */
		niov = MIN((int)e->in_num, RX_MAX_IOV - 1);
		memcpy(s->iov, &e->iov[e->out_num], (size_t)niov * sizeof(struct iovec));
		s->len = iov_length(s->iov, niov);
		s->head = e->head;
		s->seq = w->pop_seq;
		s->room = s->len < SPILL_CAP ? SPILL_CAP - s->len : 0;
		if (s->room)
			s->iov[niov++] = (struct iovec){ .iov_base = s->spill, .iov_len = s->room };
		s->niov = (u16)niov;
		w->nslots++;
	}
	return GATHER_OK;
}

/* Write num_buffers into the frame's first buffer (inside its 12-byte header, written
 * before any of its used elements can be flushed), then count the frame. */
static void rx_frame_done(struct net_worker *w, const struct rx_slot *s, int nbufs, u64 got)
{
	struct virtio_queue_stats *st = &w->n->vdev.q[w->qi].stats;
	u16 nb = htole16((u16)nbufs);

	iov_to(s->iov, s->niov, NUM_BUFFERS_OFF, &nb, sizeof(nb));
	stat_add(&st->packets, 1);
	stat_add(&st->bytes, got - HDR_LEN);
}

/* Chains of w's queue the device holds (popped, not yet used): once they are the whole ring
 * the guest can post no more. */
static u16 rx_in_flight(struct net_worker *w)
{
	struct virtqueue *vq = &w->n->vdev.q[w->qi].vq;

	return (u16)(vq->last_avail - vq->used_idx - w->pending);
}

/*
 * A frame of got bytes in slot k, its tail in k's spill (MRG_RXBUF): copy the tail into more
 * buffers and complete the frame over slot k and them (consecutive used elements, as
 * num_buffers says). The buffers are the held slots after k that took no frame in this call
 * (bfree, cleared as they are taken), in order, then newly popped ones; they are kept in
 * w->extra until the frame is whole. GATHER_DRY: the ring ran out first: the frame waits
 * with what it has (the popped buffers stay the last popped), and the next call goes on
 * where this one stopped, as batch=off's rx_gather waits for a frame it holds in spill.
 * GATHER_FULL: it can never fit (RX_MAX_CHAINS buffers, or the device holds every buffer of
 * the ring, batch=off's rule): the caller drops it (rx_extra_drop). GATHER_BROKEN.
 */
static int rx_spill_out(struct net_worker *w, int k, u64 got)
{
	const struct rx_slot *s = &w->slots[k];
	struct vq_elem *e = w->elem;
	u64 off = s->len;

	for (int i = 0; i < w->nextra; i++)
		off += w->extra[i].len;
	for (int j = k + 1; j < w->nslots && off < got && w->nextra + 1 < RX_MAX_CHAINS; j++) {
		const struct rx_slot *x = &w->slots[j];
		u64 l;

		if (!w->bfree[j])
			continue;
		l = MIN(got - off, x->len);
		iov_to(x->iov, x->niov, 0, s->spill + (off - s->len), l);
		w->bfree[j] = false;
		w->extra[w->nextra++] =
			(struct rx_extra){ .head = x->head, .slot = j, .len = (u32)l };
		off += l;
	}
	while (off < got) {
		u64 l;
		int r;

		if (w->nextra + 1 >= RX_MAX_CHAINS)
			return GATHER_FULL;
		r = rx_pop(w, e);
		if (r == 0)
			return rx_in_flight(w) >= w->n->vdev.q[w->qi].vq.size ? GATHER_FULL
									      : GATHER_DRY;
		if (r < 0)
			return GATHER_BROKEN;
		w->pop_seq++;
		l = MIN(got - off, e->in_len);
		iov_to(&e->iov[e->out_num], e->in_num, 0, s->spill + (off - s->len), l);
		w->extra[w->nextra++] =
			(struct rx_extra){ .head = e->head, .slot = -1, .len = (u32)l };
		off += l;
	}
	rx_frame_done(w, s, 1 + w->nextra, got);
	fill_used(w, s->head, (u32)s->len);
	for (int i = 0; i < w->nextra; i++)
		fill_used(w, w->extra[i].head, w->extra[i].len);
	w->nextra = 0;
	return GATHER_OK;
}

/* The frame of slot bk will not be completed: its extra buffers go back, the popped ones to
 * the ring (they are the last popped: nothing pops while a frame waits), the slots to those
 * that hold no frame. */
static void rx_extra_drop(struct net_worker *w)
{
	u16 popped = 0;

	for (int i = 0; i < w->nextra; i++) {
		if (w->extra[i].slot >= 0)
			w->bfree[w->extra[i].slot] = true;
		else
			popped++;
	}
	if (popped && !w->broken)
		vq_unpop(&w->n->vdev.q[w->qi].vq, popped);
	w->pop_seq -= popped;
	w->nextra = 0;
}

/* What one batch call came to, worst last; RXB_WAIT: a frame waits for buffers. */
enum { RXB_MORE, RXB_EMPTY, RXB_ERROR, RXB_GONE, RXB_BROKEN, RXB_WAIT };

/*
 * The call's results are all taken (or abandoned): keep the slots that got none (in order,
 * first; the others' storage after them, for new pops), and adapt offer: doubled when every
 * slot got a frame, else twice what came (at least 1), so a trickle costs few empty reads
 * and a flood grows to RX_BATCH per call.
 */
static void rx_batch_end(struct net_worker *w)
{
	struct rx_slot tmp[RX_BATCH];
	int keep = 0, j, n = w->bn;

	for (int k = n; k < w->nslots; k++)
		w->bused[k] = !w->bfree[k]; /* not offered, but taken by a frame's tail */
	for (int k = 0; k < w->nslots; k++)
		if (!w->bused[k])
			tmp[keep++] = w->slots[k];
	j = keep;
	for (int k = 0; k < w->nslots; k++)
		if (w->bused[k])
			tmp[j++] = w->slots[k];
	memcpy(w->slots, tmp, (size_t)w->nslots * sizeof(tmp[0]));
	w->nslots = keep;
	w->offer = w->bgot == n ? MIN(2 * w->offer, RX_BATCH) : MAX(1, MIN(2 * w->bgot, RX_BATCH));
	w->bn = 0;
}

/* Stop or reset while a call's results are not all taken (a frame waits for buffers): that
 * frame and those after it, read already, are lost and counted, as batch=off counts the
 * frame it holds in spill; their slots are held again as empty ones. */
static void rx_batch_abandon(struct net_worker *w)
{
	if (!w->bn)
		return;
	rx_extra_drop(w);
	for (int k = w->bk; k < w->bn; k++) {
		if (w->io[k].res >= 0)
			stat_add(&w->n->vdev.q[w->qi].stats.drops, 1);
		w->bfree[k] = true;
		w->bused[k] = false;
	}
	rx_batch_end(w);
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
static void rx_slots_release(struct net_worker *w)
{
	int tail = 0;

	rx_batch_abandon(w);
	while (tail < w->nslots && w->slots[w->nslots - 1 - tail].seq == w->pop_seq - (u64)tail)
		tail++;
	if (w->nslots && !w->broken) {
		for (int i = 0; i < w->nslots - tail; i++)
			fill_used(w, w->slots[i].head, 0);
		flush_pending(w);
		vq_unpop(&w->n->vdev.q[w->qi].vq, (u16)tail);
	}
	w->pop_seq -= (u64)tail;
	w->nslots = 0;
}

/* One backend call over the first `offer` held slots; rx_batch_take takes its results.
 * RXB_MORE, RXB_ERROR when the call failed (the batch path is then over), or RXB_BROKEN when it
 * was in doubt (batch_in_doubt). */
static int rx_batch_call(struct net_worker *w, struct net_backend *be)
{
	int n = MIN(w->nslots, w->offer), ret;

	for (int k = 0; k < n; k++)
		w->io[k] = (struct net_io){ .iov = w->slots[k].iov, .iovcnt = w->slots[k].niov };
	stat_add(&w->n->vdev.q[w->qi].stats.calls, 1);
	ret = be->ops->recv_batch(be, w->io, n);
	if (ret == NET_BATCH_IN_DOUBT) {
		batch_in_doubt(w); /* the slots stay held, never used nor given back */
		return RXB_BROKEN;
	}
	if (ret < 0) {
		batch_failed(w, ret);
		rx_slots_release(w);
		return RXB_ERROR;
	}
	/* A slot is free when it took no frame: not offered, or -EAGAIN. */
	for (int k = 0; k < w->nslots; k++) {
		w->bfree[k] = k >= n || w->io[k].res == -EAGAIN;
		w->bused[k] = false;
	}
	w->bn = n;
	w->bk = 0;
	w->bgot = 0;
	w->bres = RXB_MORE;
	return RXB_MORE;
}

/*
 * Take the results of the last call, from slot bk on, in slot order: complete the frames
 * (counted in *frames), then rx_batch_end. RXB_WAIT: slot bk's frame waits for buffers
 * (rx_spill_out); the call's results are taken again, from there, once the guest posted
 * more. Otherwise the worst of what the call came to (RXB_*).
 */
static int rx_batch_take(struct net_worker *w, int *frames)
{
	struct virtio_queue_stats *st = &w->n->vdev.q[w->qi].stats;

	for (; w->bk < w->bn; w->bk++) {
		int k = w->bk;
		const struct rx_slot *s = &w->slots[k];
		ssize_t r = w->io[k].res;

		if (r == -EAGAIN && !w->bfree[k]) {
			w->bused[k] = true; /* taken by an earlier frame (rx_spill_out) */
			continue;
		}
		if (r == -EAGAIN) {
			w->bres = MAX(w->bres, RXB_EMPTY);
			continue;
		}
		if (r < 0 && gone_error(r)) {
			backend_gone(w, r);
			w->bres = MAX(w->bres, RXB_GONE);
			continue;
		}
		if (r < 0) {
			stat_add(&st->drops, 1);
			pr_debug_rl(&w->n->log_rl, "virtio-net %s: receive: %s", w->qname,
				    strerror((int)-r));
			w->bres = MAX(w->bres, RXB_ERROR);
			continue;
		}
		if ((u64)r < HDR_LEN) { /* a backend that broke its contract: the frame is gone */
			stat_add(&st->drops, 1);
			continue;
		}
		if ((u64)r <= s->len) {
			rx_frame_done(w, s, 1, (u64)r);
			fill_used(w, s->head, (u32)r);
			w->bused[k] = true;
			w->bgot++;
			(*frames)++;
			continue;
		}
		/* Longer than the chain: whole in chain + spill (shorter than their total) and
		 * MRG_RXBUF: on into more buffers, waiting for them if the ring has too few now.
		 * Otherwise (cut by the backend, one chain per frame, or more buffers than it can
		 * ever have) it is lost: counted, the slot kept. */
		if ((u64)r < s->len + s->room && w->n->mrg_rxbuf) {
			int g = rx_spill_out(w, k, (u64)r);

			if (g == GATHER_BROKEN)
				return RXB_BROKEN;
			if (g == GATHER_DRY)
				return RXB_WAIT;
			if (g == GATHER_OK) {
				w->bused[k] = true;
				w->bgot++;
				(*frames)++;
				continue;
			}
			rx_extra_drop(w); /* GATHER_FULL */
		}
		stat_add(&st->drops, 1);
	}
	rx_batch_end(w);
	return w->bres;
}

/*
 * batch=on: rx_drain with many frames per backend call. The held slots are offered to the
 * backend while the ring has buffers (notifications off); one used-ring update and at most
 * one interrupt follow each call (flush_pending). When the ring runs dry with no slot held,
 * or a frame waits for more buffers, we flush, re-enable and re-check (full barrier in
 * vq_enable_notify, see tx_drain), and only if still dry wait for the kick; no backend call
 * is made while a frame waits (the frames after it would overtake it). Slots stay held while
 * the thread waits for frames (they are the guest's buffers either way), and are given back
 * when it ends (rx_release).
 */
static enum rx_wait rx_drain_batch(struct net_worker *w)
{
	struct virtio_net *n = w->n;
	struct virtio_queue *q = &n->vdev.q[w->qi];
	struct virtqueue *vq = &q->vq;
	struct net_backend *be = n->be[w->pair];
	enum rx_wait next = RX_WAIT_FRAME;
	int frames = 0;

	/* A waiting frame's call is finished whatever frames says: its results are bounded. */
	while (w->batch && (frames < BATCH || w->bn) && !leaving(w)) {
		int r;

		if (!w->bn) {
			if (rx_slots_fill(w) == GATHER_BROKEN) {
				next = RX_WAIT_DEAD;
				break;
			}
			if (!w->nslots) {
				flush_pending(w);
				if (vq_enable_notify(vq)) {
					vq_disable_notify(vq);
					continue;
				}
				next = RX_WAIT_BUFFERS;
				break;
			}
			r = rx_batch_call(w, be);
			if (r == RXB_BROKEN) {
				next = RX_WAIT_DEAD;
				break;
			}
			if (r == RXB_ERROR) {
				next = RX_WAIT_BACKOFF;
				break;
			}
		}
		r = rx_batch_take(w, &frames);
		flush_pending(w);
		if (r == RXB_WAIT) {
			if (vq_enable_notify(vq)) {
				vq_disable_notify(vq);
				continue;
			}
			next = RX_WAIT_BUFFERS;
			break;
		}
		if (r == RXB_BROKEN || r == RXB_GONE) {
			next = RX_WAIT_DEAD;
			break;
		}
		if (r == RXB_ERROR) {
			next = RX_WAIT_BACKOFF;
			break;
		}
		if (r == RXB_EMPTY)
			break;
	}
	flush_pending(w);
	/* Left (stop or pause) while a frame waits: on resume rx_thread looks at the ring again
	 * (RX_WAIT_BUFFERS), whether or not the kick came. */
	if (w->bn && next == RX_WAIT_FRAME)
		next = RX_WAIT_BUFFERS;
	if (frames)
		stat_add(&q->stats.batches, 1);
	return next;
}

static void rx_thread(void *arg)
{
	struct net_worker *w = arg;
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
		 * found buffers there already, with notifications off (rx_drain_batch). */
		if ((m & WAKE_STOP) && stop_or_park(w, m))
			break;
		if (next == RX_WAIT_BUFFERS && (m & (WAKE_KICK | WAKE_STOP))) {
			vq_disable_notify(&q->vq);
			next = rx_drain_active(w);
		} else if (next == RX_WAIT_FRAME && (m & WAKE_IO)) {
			next = rx_drain_active(w);
		}
	}
	rx_release(w);
	drain_kicks(q);
}

/* ---- control queue ---- */

/* The command's payload: readable bytes after the 2-byte class/command header. */
struct ctl_cmd {
	const struct vq_elem *e;
	u64 len;
};

static bool ctl_read(const struct ctl_cmd *c, u64 off, void *dst, size_t len)
{
	if (!range_ok(off, len, c->len))
		return false;
	return iov_from(c->e->iov, c->e->out_num, sizeof(struct virtio_net_ctrl_hdr) + off, dst,
			len) == len;
}

static u8 ctl_rx(struct virtio_net *n, u8 cmd, const struct ctl_cmd *c)
{
	u8 on;

	if (cmd > VIRTIO_NET_CTRL_RX_NOBCAST || c->len != 1 || !ctl_read(c, 0, &on, 1))
		return VIRTIO_NET_ERR;
	/* A tap hands us everything; the guest's own stack filters. Recorded only. */
	if (cmd == VIRTIO_NET_CTRL_RX_PROMISC)
		atomic_store(&n->promisc, on != 0);
	else if (cmd == VIRTIO_NET_CTRL_RX_ALLMULTI)
		atomic_store(&n->allmulti, on != 0);
	return VIRTIO_NET_OK;
}

static u8 ctl_mac(struct virtio_net *n, u8 cmd, const struct ctl_cmd *c)
{
	if (cmd == VIRTIO_NET_CTRL_MAC_ADDR_SET) {
		u8 mac[6];

		if (c->len != sizeof(mac) || !ctl_read(c, 0, mac, sizeof(mac)))
			return VIRTIO_NET_ERR;
		pthread_mutex_lock(&n->cfg_lock);
		memcpy(n->cfg.mac, mac, sizeof(mac));
		pthread_mutex_unlock(&n->cfg_lock);
		return VIRTIO_NET_OK;
	}
	if (cmd == VIRTIO_NET_CTRL_MAC_TABLE_SET) {
		/* Two tables (unicast, multicast): le32 entries, then entries * 6 bytes each;
		 * together exactly the payload. */
		u64 off = 0;

		for (int t = 0; t < 2; t++) {
			u32 entries;

			if (!ctl_read(c, off, &entries, sizeof(entries)))
				return VIRTIO_NET_ERR;
			off += sizeof(entries);
			if (!range_ok(off, (u64)le32toh(entries) * 6, c->len))
				return VIRTIO_NET_ERR;
			off += (u64)le32toh(entries) * 6;
		}
		return off == c->len ? VIRTIO_NET_OK : VIRTIO_NET_ERR;
	}
	return VIRTIO_NET_ERR;
}

/* Attach the backend queues of pairs [0, pairs), detach the others (pair 0 always stays);
 * stops at the first failure. Returns 0 or -errno. */
static int attach_pairs(struct virtio_net *n, int pairs)
{
	int ret = 0;

	for (int p = 1; p < n->pairs && !ret; p++) {
		bool on = p < pairs;

		if (n->attached[p] == on)
			continue;
		pthread_mutex_lock(&n->rx_gate[p]);
		ret = n->be[p]->ops->set_enabled(n->be[p], on);
		if (!ret)
			n->attached[p] = on;
		pthread_mutex_unlock(&n->rx_gate[p]);
	}
	return ret;
}

/*
 * Only the pairs the driver enabled receive (virtio 1.2 5.1.6.5.5: no packet on a receive
 * queue beyond virtqueue_pairs once VQ_PAIRS_SET is acknowledged; pair 0 alone after a
 * reset until the driver sets more). Every pair's RX thread keeps running, but the tap
 * queues of inactive pairs are detached, so the kernel steers no flow there (QEMU's
 * virtio_net_set_queue_pairs does the same), and their RX threads read nothing
 * (rx_drain_active). TX of an inactive pair is served as before: a detached tap queue
 * still sends, and a driver that leaves chains there loses none. On failure the pairs are
 * put back as they were and -errno returned. Called by the control thread, or with the
 * threads stopped (start, reset, creation): one caller at a time.
 */
static int set_active_pairs(struct virtio_net *n, int pairs)
{
	int ret = attach_pairs(n, pairs);

	if (ret < 0) {
		pr_warn_rl(&n->log_rl, "virtio-net: %s: setting %d active queue pairs: %s",
			   n->be[0]->ifname, pairs, strerror(-ret));
		attach_pairs(n, atomic_load(&n->curr_pairs));
		return ret;
	}
	atomic_store(&n->curr_pairs, pairs);
	return 0;
}

static u8 ctl_mq(struct virtio_net *n, u8 cmd, const struct ctl_cmd *c)
{
	u16 pairs;

	if (cmd != VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET || !(n->vdev.features & F(VIRTIO_NET_F_MQ)) ||
	    c->len != sizeof(pairs) || !ctl_read(c, 0, &pairs, sizeof(pairs)))
		return VIRTIO_NET_ERR;
	pairs = le16toh(pairs);
	if (pairs < 1 || pairs > n->pairs || set_active_pairs(n, pairs) < 0)
		return VIRTIO_NET_ERR;
	return VIRTIO_NET_OK;
}

typedef u8 (*ctl_handler)(struct virtio_net *n, u8 cmd, const struct ctl_cmd *c);

static const ctl_handler ctl_handlers[] = {
	[VIRTIO_NET_CTRL_RX] = ctl_rx,
	[VIRTIO_NET_CTRL_MAC] = ctl_mac,
	[VIRTIO_NET_CTRL_MQ] = ctl_mq,
};

/* Handle one command chain and acknowledge it in its last writable byte. */
static void ctl_one(struct net_worker *w, const struct vq_elem *e)
{
	struct virtio_queue_stats *st = &w->n->vdev.q[w->qi].stats;
	struct virtio_net_ctrl_hdr h;
	struct ctl_cmd c = { .e = e };
	u8 ack = VIRTIO_NET_ERR;
	const struct iovec *last;

	if (e->out_len >= sizeof(h) &&
	    iov_from(e->iov, e->out_num, 0, &h, sizeof(h)) == sizeof(h)) {
		c.len = e->out_len - sizeof(h);
		if (h.class < ARRAY_SIZE(ctl_handlers) && ctl_handlers[h.class])
			ack = ctl_handlers[h.class](w->n, h.cmd, &c);
	}
	if (e->in_num == 0) {
		/* Nowhere to put the ack: hand the chain back untouched. */
		stat_add(&st->drops, 1);
		fill_used(w, e->head, 0);
		return;
	}
	last = &e->iov[e->out_num + e->in_num - 1];
	/* The walker drops empty buffers, so iov_len >= 1. The used length must not claim
	 * bytes we did not write (§2.7.8.2): 1 only when the ack is the whole writable part. */
	((u8 *)last->iov_base)[last->iov_len - 1] = ack;
	stat_add(&st->packets, 1);
	if (ack != VIRTIO_NET_OK)
		stat_add(&st->drops, 1);
	fill_used(w, e->head, e->in_len == 1 ? 1 : 0);
}

/* Same wake-up protocol as tx_drain. */
static void ctl_drain(struct net_worker *w)
{
	struct virtio_queue *q = &w->n->vdev.q[w->qi];
	struct virtqueue *vq = &q->vq;
	bool worked = false;

	do {
		vq_disable_notify(vq);
		for (;;) {
			int r = vq_pop(vq, w->elem);

			if (r == 0)
				break;
			if (r < 0) {
				flush_pending(w);
				queue_broken(w, "malformed descriptor chain");
				goto out;
			}
			worked = true;
			ctl_one(w, w->elem);
			if (w->pending >= MIN(BATCH, vq->size))
				flush_pending(w);
			if (leaving(w))
				goto out;
		}
		flush_pending(w);
	} while (!leaving(w) && vq_enable_notify(vq));
out:
	flush_pending(w);
	if (worked)
		stat_add(&q->stats.batches, 1);
}

static void ctl_thread(void *arg)
{
	struct net_worker *w = arg;
	struct virtio_queue *q = &w->n->vdev.q[w->qi];

	ctl_drain(w);
	for (;;) {
		int wake = wait_for(w, !w->broken, -1, 0);

		if ((wake & WAKE_STOP) && stop_or_park(w, wake))
			break;
		if (!w->broken && !leaving(w))
			ctl_drain(w);
	}
	drain_kicks(q);
}

/* ---- device ops ---- */

static struct virtio_net *to_net(struct virtio_device *vdev)
{
	return vdev->priv;
}

static u64 net_offered(const struct virtio_net *n)
{
	u64 f = F(VIRTIO_NET_F_MAC) | F(VIRTIO_NET_F_STATUS) | F(VIRTIO_NET_F_MRG_RXBUF) |
		F(VIRTIO_NET_F_CSUM) | F(VIRTIO_NET_F_GUEST_CSUM) | F(VIRTIO_NET_F_HOST_TSO4) |
		F(VIRTIO_NET_F_HOST_TSO6) | F(VIRTIO_NET_F_GUEST_TSO4) |
		F(VIRTIO_NET_F_GUEST_TSO6) | F(VIRTIO_NET_F_CTRL_VQ) | F(VIRTIO_NET_F_CTRL_RX) |
		F(VIRTIO_RING_F_EVENT_IDX) | F(VIRTIO_RING_F_INDIRECT_DESC);

	if (n->pairs > 1)
		f |= F(VIRTIO_NET_F_MQ);
	/* What serves the rings must be able to do what is offered. */
	if (n->vhost)
		f &= ~net_vhost_unsupported(n->vhost);
	/* passt takes and gives whole frames with their checksums: nothing to offload. */
	if (n->be[0]->plain_frames)
		f &= ~(F(VIRTIO_NET_F_CSUM) | F(VIRTIO_NET_F_GUEST_CSUM) |
		       F(VIRTIO_NET_F_HOST_TSO4) | F(VIRTIO_NET_F_HOST_TSO6) |
		       F(VIRTIO_NET_F_GUEST_TSO4) | F(VIRTIO_NET_F_GUEST_TSO6));
	return f;
}

static u64 net_get_features(struct virtio_device *vdev)
{
	return net_offered(to_net(vdev));
}

/* Feature dependencies of §5.1.3.1, and nothing device-specific we did not offer. */
static bool net_features_ok(struct virtio_device *vdev, u64 f)
{
	u64 transport = 0;

	for (unsigned b = VIRTIO_TRANSPORT_F_START; b < VIRTIO_TRANSPORT_F_END; b++)
		transport |= F(b);
	if (f & ~(net_offered(to_net(vdev)) | transport))
		return false;
	/* The 12-byte header and little-endian config assume a modern driver. */
	if (!(f & F(VIRTIO_F_VERSION_1)))
		return false;
	if ((f & (F(VIRTIO_NET_F_GUEST_TSO4) | F(VIRTIO_NET_F_GUEST_TSO6))) &&
	    !(f & F(VIRTIO_NET_F_GUEST_CSUM)))
		return false;
	if ((f & (F(VIRTIO_NET_F_HOST_TSO4) | F(VIRTIO_NET_F_HOST_TSO6))) &&
	    !(f & F(VIRTIO_NET_F_CSUM)))
		return false;
	if ((f & (F(VIRTIO_NET_F_CTRL_RX) | F(VIRTIO_NET_F_MQ))) && !(f & F(VIRTIO_NET_F_CTRL_VQ)))
		return false;
	return true;
}

static void net_config_read(struct virtio_device *vdev, u32 off, u8 *data, u32 len)
{
	struct virtio_net *n = to_net(vdev);
	u32 size = sizeof(n->cfg);

	memset(data, 0, len);
	if (off >= size)
		return;
	pthread_mutex_lock(&n->cfg_lock);
	memcpy(data, (const u8 *)&n->cfg + off, MIN(len, size - off));
	pthread_mutex_unlock(&n->cfg_lock);
}

static void net_config_write(struct virtio_device *vdev, u32 off, const u8 *data, u32 len)
{
	/* Every field is read-only for a VERSION_1 driver (the MAC changes through the
	 * control queue); ignore. */
}

static void net_stop(struct virtio_device *vdev);

/* Zeroed memory on cache-line boundaries (struct net_worker is line-aligned), for free(). */
static void *zalloc_lines(size_t size)
{
	void *p = NULL;

	if (posix_memalign(&p, 64, size))
		return NULL;
	return memset(p, 0, size);
}

/* Memory a batch call left in doubt (batch_in_doubt), kept for the life of the process: io_uring
 * may reach it until its ring's requests are all over, which nothing here can see. Reachable from
 * here, so leak checkers do not count it. Its own lock: devices of different VMs stop at once. */
static struct net_kept {
	struct net_kept *next;
	void *mem[3];
} * kept_in_doubt;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

/* Keep what the kernel may reach through w's batch requests: TX's elems (their iovecs), RX's
 * slot iovecs and spill areas. A node that cannot be allocated: the memory is leaked instead. */
static void keep_in_doubt(struct net_worker *w)
{
	struct net_kept *k = malloc(sizeof(*k));

	if (k) {
		*k = (struct net_kept){ .mem = { w->elems, w->slot_iov, w->slot_spill } };
		pthread_mutex_lock(&kept_lock);
		k->next = kept_in_doubt;
		kept_in_doubt = k;
		pthread_mutex_unlock(&kept_lock);
	}
	w->elems = NULL;
	w->slot_iov = NULL;
	w->slot_spill = NULL;
	w->in_doubt = false;
}

static void worker_free(struct net_worker *w)
{
	if (w->in_doubt)
		keep_in_doubt(w);
	free(w->elem);
	free(w->iov);
	free(w->spill);
	free(w->elems);
	free(w->txs);
	free(w->io);
	free(w->io_idx);
	free(w->slot_iov);
	free(w->slot_spill);
	free(w->slots);
	w->elem = NULL;
	w->iov = NULL;
	w->spill = NULL;
	w->elems = NULL;
	w->txs = NULL;
	w->io = NULL;
	w->io_idx = NULL;
	w->slots = NULL;
	w->slot_iov = NULL;
	w->slot_spill = NULL;
	w->nslots = 0;
}

/* batch=on: TX pops a batch of chains at a time (TX_BATCH vq_elems, 16 KiB each); RX holds
 * RX_BATCH slots, each with RX_MAX_IOV iovecs and a SPILL_CAP spill buffer (2 MiB in all,
 * touched only by frames longer than their buffer). */
static int worker_alloc_batch(struct net_worker *w)
{
	int n = w->kind == W_TX ? TX_BATCH : RX_BATCH;
	w->batch = true;
	w->io = calloc((size_t)n, sizeof(*w->io));
	if (!w->io)
		return -ENOMEM;
	if (w->kind == W_TX) {
		w->elems = malloc(TX_BATCH * sizeof(*w->elems));
		w->txs = calloc(TX_BATCH, sizeof(*w->txs));
		w->io_idx = calloc(TX_BATCH, sizeof(*w->io_idx));
		return w->elems && w->txs && w->io_idx ? 0 : -ENOMEM;
	}
	w->offer = 4;
	w->slots = calloc(RX_BATCH, sizeof(*w->slots));
	if (!w->slots)
		return -ENOMEM;
	w->slot_iov = calloc((size_t)RX_BATCH * RX_MAX_IOV, sizeof(*w->slot_iov));
	w->slot_spill = malloc((size_t)RX_BATCH * SPILL_CAP);
	if (!w->slot_iov || !w->slot_spill)
		return -ENOMEM;
	for (int i = 0; i < RX_BATCH; i++) {
		w->slots[i].iov = w->slot_iov + (size_t)i * RX_MAX_IOV;
		w->slots[i].spill = w->slot_spill + (size_t)i * SPILL_CAP;
	}
	return 0;
}

/* The worker's buffers: every kind pops chains; RX gathers iovecs and, when the backend
 * cannot tell a frame's length first, a spill buffer; batch=on adds its own. */
static int worker_alloc(struct net_worker *w)
{
	struct net_backend *be = w->n->be[w->pair];
	bool spill = false;

	w->elem = malloc(sizeof(*w->elem));
	if (w->kind == W_RX) {
		spill = !be->ops->peek_len || be->ops->peek_len(be) == -ENOTSUP;
		w->iov = calloc(RX_MAX_IOV, sizeof(*w->iov));
		if (spill)
			w->spill = malloc(SPILL_CAP);
	}
	if (!w->elem || (w->kind == W_RX && !w->iov) || (spill && !w->spill) ||
	    (w->n->batch && w->kind != W_CTL && worker_alloc_batch(w) < 0)) {
		worker_free(w);
		return -ENOMEM;
	}
	return 0;
}

static int net_worker_start(struct virtio_net *n, enum worker_kind kind, int qi, int pair)
{
	static const worker_fn fn[] = {
		[W_RX] = rx_thread, [W_TX] = tx_thread, [W_CTL] = ctl_thread
	};
	static const enum sandbox_kind sb[] = {
		[W_RX] = SB_NET_RX, [W_TX] = SB_NET_TX, [W_CTL] = SB_NET_CTL
	};
	static const char *const prefix[] = { [W_RX] = "rx", [W_TX] = "tx", [W_CTL] = "ctrl" };
	struct net_worker *w;
	char tname[32];
	int ret;

	if (!n->vdev.q[qi].vq.ready)
		return 0; /* the driver did not enable this queue */
	w = &n->w[n->nworkers];
	memset(w, 0, sizeof(*w));
	w->n = n;
	w->kind = kind;
	w->qi = qi;
	w->pair = pair;
	w->poll_budget_ns = n->poll_max_ns;
	if (kind == W_CTL)
		snprintf(w->qname, sizeof(w->qname), "ctrl");
	else
		snprintf(w->qname, sizeof(w->qname), "%s%d", prefix[kind], pair);
	ret = worker_alloc(w);
	if (ret < 0)
		return ret;
	/* The kernel keeps 15 characters of a name; "lkvm-net-tx7" fits. */
	snprintf(tname, sizeof(tname), kind == W_CTL ? "lkvm-net-ctl" : "lkvm-net-%s", w->qname);
	w->wk = &n->wk[n->nworkers];
	ret = worker_start(w->wk, tname, sb[kind], fn[kind], w);
	if (ret < 0) {
		worker_free(w);
		return ret;
	}
	n->nworkers++;
	return 0;
}

/* Start a worker per queue in use; run_lock held. */
static int start_workers_locked(struct virtio_net *n)
{
	u64 f = atomic_load_explicit(&n->vdev.features, memory_order_relaxed);
	int data_pairs = (f & F(VIRTIO_NET_F_MQ)) ? n->pairs : 1;
	int ret = 0;

	if (n->vhost)
		ret = net_vhost_start(n->vhost, data_pairs);
	for (int p = 0; p < data_pairs && !ret && !n->vhost; p++) {
		ret = net_worker_start(n, W_RX, 2 * p, p);
		if (!ret)
			ret = net_worker_start(n, W_TX, 2 * p + 1, p);
	}
	/* The control queue follows the data queues in use (§5.1.2). */
	if (!ret && (f & F(VIRTIO_NET_F_CTRL_VQ)))
		ret = net_worker_start(n, W_CTL, 2 * data_pairs, 0);
	return ret;
}

/* Stop and join every worker; run_lock held. Each one counts the kicks left in its eventfd
 * and gives back what it held (RX chains), so the queues can be served again later. */
static void stop_workers_locked(struct virtio_net *n)
{
	for (int i = 0; i < n->nworkers; i++) {
		worker_stop(n->w[i].wk);
		worker_free(&n->w[i]);
	}
	n->nworkers = 0;
}

static int net_start(struct virtio_device *vdev)
{
	struct virtio_net *n = to_net(vdev);
	u64 f = atomic_load_explicit(&vdev->features, memory_order_relaxed);
	struct net_offloads off;
	int ret = 0;

	net_stop(vdev); /* a second DRIVER_OK without reset: restart cleanly */
	pthread_mutex_lock(&n->run_lock);
	n->mrg_rxbuf = f & F(VIRTIO_NET_F_MRG_RXBUF);
	net_offloads_from_features(f, &off);
	for (int p = 0; p < n->pairs; p++) {
		if (n->be[p]->ops->set_offloads &&
		    (ret = n->be[p]->ops->set_offloads(n->be[p], &off)) < 0) {
			pr_warn_rl(&n->log_rl, "virtio-net: %s: setting offloads: %s",
				   n->be[p]->ifname, strerror(-ret));
			goto out;
		}
	}
	ret = set_active_pairs(n, 1);
	if (!ret)
		ret = start_workers_locked(n);
out:
	pthread_mutex_unlock(&n->run_lock);
	if (ret < 0) {
		pr_warn_rl(&n->log_rl, "virtio-net: cannot start: %s", strerror(-ret));
		net_stop(vdev);
	}
	return ret;
}

static void net_stop(struct virtio_device *vdev)
{
	struct virtio_net *n = to_net(vdev);

	pthread_mutex_lock(&n->run_lock);
	stop_workers_locked(n);
	/* Teardown: closing the vhost fds detaches everything (and main needs no vhost ioctl). */
	if (n->vhost && n->closing) {
		net_vhost_close(n->vhost);
		n->vhost = NULL;
	} else if (n->vhost) {
		net_vhost_stop(n->vhost);
	}
	/* A reset leaves pair 0 alone receiving until the driver sets more. */
	if (!n->closing)
		set_active_pairs(n, 1);
	pthread_mutex_unlock(&n->run_lock);
}

void virtio_net_quiesce(struct virtio_net *n)
{
	pthread_mutex_lock(&n->run_lock);
	for (int i = 0; i < n->nworkers; i++)
		worker_quiesce(n->w[i].wk);
	if (n->vhost)
		net_vhost_pause(n->vhost);
	pthread_mutex_unlock(&n->run_lock);
}

void virtio_net_resume(struct virtio_net *n)
{
	pthread_mutex_lock(&n->run_lock);
	if (n->vhost)
		net_vhost_resume(n->vhost);
	for (int i = 0; i < n->nworkers; i++)
		worker_resume(n->w[i].wk);
	pthread_mutex_unlock(&n->run_lock);
}

static const struct virtio_dev_ops virtio_net_ops = {
	.device_id = VIRTIO_ID_NET,
	.subsys_id = VIRTIO_ID_NET,
	.class_code = 0x020000,
	.get_features = net_get_features,
	.config_size = sizeof(struct virtio_net_config),
	.config_read = net_config_read,
	.config_write = net_config_write,
	.features_ok = net_features_ok,
	.start = net_start,
	.stop = net_stop,
};

/* ---- creation, teardown, counters ---- */

static void close_backends(struct net_backend **be, int n)
{
	for (int i = 0; i < n; i++) {
		if (be[i] && be[i]->ops && be[i]->ops->close)
			be[i]->ops->close(be[i]);
		be[i] = NULL;
	}
}

/* vhost=on: vhost-net for every pair, or an error; vhost=auto: the same, or lkvm's threads
 * (--debug says why). */
static int vhost_open(struct virtio_net *n, const struct net_opts *o, char *err, size_t errlen)
{
	int fds[NET_MAX_QUEUE_PAIRS];
	int ret;

	for (int p = 0; p < n->pairs; p++)
		fds[p] = n->be[p]->rx_fd; /* a tap queue: one fd both ways */
	ret = net_vhost_open(n->kvm, &n->vdev, fds, n->pairs, NULL, &n->vhost, err, errlen);
	if (ret < 0 && o->vhost == NET_VHOST_AUTO) {
		pr_debug("virtio-net: vhost=auto: the rings stay in lkvm (%s)", err);
		if (errlen)
			err[0] = '\0';
		return 0;
	}
	if (ret == 0)
		n->batch = false; /* no lkvm thread moves frames */
	return ret;
}

static int net_alloc(struct kvm *kvm, const struct net_opts *o, struct net_backend **be,
		     struct virtio_net **out, char *err, size_t errlen)
{
	static const u8 default_mac[6] = VIRTIO_NET_DEFAULT_MAC;
	int pairs = o->queue_pairs ? o->queue_pairs : 1;
	struct virtio_net *n;
	int ret;

	*out = NULL;
	if (pairs < 1 || pairs > NET_MAX_QUEUE_PAIRS) {
		errfmt(err, errlen, "virtio-net: %d queue pairs (1..%d)", pairs,
		       NET_MAX_QUEUE_PAIRS);
		close_backends(be, MAX(0, MIN(pairs, NET_MAX_QUEUE_PAIRS)));
		return -EINVAL;
	}
	for (int i = 0; i < pairs; i++) {
		if (!be[i] || !be[i]->ops || !be[i]->ops->send || !be[i]->ops->recv ||
		    (pairs > 1 && !be[i]->ops->set_enabled)) {
			errfmt(err, errlen, "virtio-net: no backend for queue pair %d", i);
			close_backends(be, pairs);
			return -EINVAL;
		}
	}
	n = zalloc_lines(sizeof(*n));
	if (!n) {
		errfmt(err, errlen, "virtio-net: out of memory");
		close_backends(be, pairs);
		return -ENOMEM;
	}
	n->kvm = kvm;
	n->pairs = pairs;
	n->tx_mode = o->tx_mode;
	n->tx_timer_ns = 1000ull * (o->tx_timer_us ? o->tx_timer_us : NET_TX_TIMER_US_DEFAULT);
	n->poll_max_ns = 1000ull * (o->poll_us ? o->poll_us : NET_POLL_US_DEFAULT);
	n->coarse_timers = timers_coarse();
	n->batch = o->batch;
	for (int i = 0; i < pairs; i++)
		n->batch &= be[i]->ops->send_batch && be[i]->ops->recv_batch;
	for (int i = 0; i < pairs; i++) {
		n->be[i] = be[i];
		be[i] = NULL;
	}
	pthread_mutex_init(&n->cfg_lock, NULL);
	pthread_mutex_init(&n->run_lock, NULL);
	for (int i = 0; i < NET_MAX_QUEUE_PAIRS; i++) {
		pthread_mutex_init(&n->rx_gate[i], NULL);
		n->attached[i] = i < pairs; /* as the backends come */
	}
	for (int i = 0; i < 2 * pairs + 1; i++) {
		ret = worker_init(&n->wk[i], kvm);
		if (ret < 0) {
			errfmt(err, errlen, "virtio-net: eventfd: %s", strerror(-ret));
			virtio_net_destroy(n);
			return ret;
		}
	}

	memcpy(n->cfg.mac, default_mac, sizeof(n->cfg.mac));
	if (o->mac_set)
		memcpy(n->cfg.mac, o->guest_mac, sizeof(n->cfg.mac));
	n->cfg.status = htole16(VIRTIO_NET_S_LINK_UP);
	n->cfg.max_virtqueue_pairs = htole16((u16)pairs);

	/* The device's part only; the transport (or virtio_device_init) does the rest. */
	n->vdev.ops = &virtio_net_ops;
	n->vdev.priv = n;
	n->vdev.use_ioeventfd = o->ioeventfd;
	/* Until a driver sets more, pair 0 alone receives: the host queues no frame where
	 * nobody will read it. */
	atomic_init(&n->curr_pairs, pairs);
	ret = set_active_pairs(n, 1);
	if (ret < 0) {
		errfmt(err, errlen, "virtio-net: %s: detaching its queues beyond the first: %s",
		       n->be[0]->ifname, strerror(-ret));
		virtio_net_destroy(n);
		return ret;
	}
	/* Before the transport asks for the features (what vhost can do limits them). */
	if (o->vhost != NET_VHOST_OFF && o->mode == NET_MODE_TAP) {
		ret = vhost_open(n, o, err, errlen);
		if (ret < 0) {
			virtio_net_destroy(n);
			return ret;
		}
	}
	*out = n;
	return 0;
}

int virtio_net_create_bare(struct kvm *kvm, const struct net_opts *o, struct net_backend **be,
			   struct virtio_net **out)
{
	char err[128];
	int ret = net_alloc(kvm, o, be, out, err, sizeof(err));

	if (ret < 0) {
		pr_debug("%s", err);
		return ret;
	}
	ret = virtio_device_init(&(*out)->vdev, kvm, 2 * (*out)->pairs + 1, VIRTIO_NET_QUEUE_SIZE);
	if (ret < 0) {
		virtio_net_destroy(*out);
		*out = NULL;
	}
	return ret;
}

int virtio_net_create(struct kvm *kvm, const struct net_opts *o, struct net_backend **be,
		      struct virtio_net **out, char *err, size_t errlen)
{
	struct virtio_net *n;
	int ret = net_alloc(kvm, o, be, &n, err, errlen);

	if (ret < 0)
		return ret;
	ret = virtio_device_attach(kvm, &n->vdev, o->trans, 2 * n->pairs + 1,
				   VIRTIO_NET_QUEUE_SIZE);
	if (ret < 0) {
		errfmt(err, errlen, "virtio-net: %s transport: %s", virtio_trans_name(o->trans),
		       strerror(-ret));
		virtio_net_destroy(n);
		return ret;
	}
	*out = n;
	return 0;
}

void virtio_net_destroy(struct virtio_net *n)
{
	if (!n)
		return;
	n->closing = true;
	net_stop(&n->vdev);
	virtio_device_exit(&n->vdev);
	close_backends(n->be, n->pairs);
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++)
		worker_destroy(&n->wk[i]);
	pthread_mutex_destroy(&n->cfg_lock);
	pthread_mutex_destroy(&n->run_lock);
	for (int i = 0; i < NET_MAX_QUEUE_PAIRS; i++)
		pthread_mutex_destroy(&n->rx_gate[i]);
	free(n);
}

bool virtio_net_has_vhost(const struct virtio_net *n)
{
	return n->vhost != NULL;
}

struct virtio_device *virtio_net_vdev(struct virtio_net *n)
{
	return &n->vdev;
}

int virtio_net_serve_once(struct virtio_net *n, int qi)
{
	struct virtio_device *vdev = &n->vdev;
	int ctl = (vdev->features & F(VIRTIO_NET_F_MQ)) ? 2 * n->pairs : 2;
	struct net_worker *w;
	struct worker wk; /* no thread: never asked to leave */

	if (qi < 0 || qi > ctl || !vdev->q[qi].vq.ready || n->nworkers)
		return -EINVAL;
	w = zalloc_lines(sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->n = n;
	w->qi = qi;
	w->wk = &wk;
	w->kind = qi == ctl ? W_CTL : qi % 2 ? W_TX : W_RX;
	w->pair = qi == ctl ? 0 : qi / 2;
	if (worker_alloc(w) < 0 || worker_init(&wk, n->kvm) < 0) {
		worker_free(w);
		free(w);
		return -ENOMEM;
	}
	w->poll_budget_ns = n->poll_max_ns;
	snprintf(w->qname, sizeof(w->qname),
		 qi == ctl ? "ctrl"
		 : qi % 2  ? "tx%d"
			   : "rx%d",
		 w->pair);
	n->mrg_rxbuf = vdev->features & F(VIRTIO_NET_F_MRG_RXBUF);
	if (w->kind == W_CTL) {
		ctl_drain(w);
	} else if (w->kind == W_RX) {
		vq_disable_notify(&vdev->q[qi].vq);
		rx_drain_active(w);
		rx_release(w);
	} else if (tx_drain(w)) {
		pr_debug("virtio-net %s: stopped while serving once", w->qname);
	}
	worker_destroy(&wk);
	worker_free(w);
	free(w);
	return 0;
}

void virtio_net_set_tx_hook(struct virtio_net *n, virtio_net_tx_hook fn, void *arg)
{
	__atomic_store_n(&n->tx_hook_arg, arg, __ATOMIC_RELAXED);
	__atomic_store_n(&n->tx_hook, fn, __ATOMIC_RELEASE);
}

/* Queue names in the layout the driver negotiated (all pairs if it never got that far). */
static int stats_rows(struct virtio_net *n, int qi[], const char *name[], char buf[][24])
{
	u64 f = atomic_load_explicit(&n->vdev.features, memory_order_relaxed);
	int pairs = (!f || (f & F(VIRTIO_NET_F_MQ))) ? n->pairs : 1, rows = 0;

	for (int p = 0; p < pairs; p++) {
		for (int d = 0; d < 2; d++) {
			snprintf(buf[rows], sizeof(buf[rows]), "%s%d", d ? "tx" : "rx", p);
			qi[rows] = 2 * p + d;
			name[rows] = buf[rows];
			rows++;
		}
	}
	qi[rows] = 2 * pairs;
	name[rows] = "ctrl";
	return rows + 1;
}

void virtio_net_stats(struct virtio_net *n, struct stats_visitor *v)
{
	int qi[VIRTIO_MAX_QUEUES];
	const char *name[VIRTIO_MAX_QUEUES];
	char buf[VIRTIO_MAX_QUEUES][24];
	int rows = stats_rows(n, qi, name, buf);

	for (int r = 0; r < rows; r++) {
		struct virtio_queue_stats *s = &n->vdev.q[qi[r]].stats;

		/* vhost's queues have no counters here: no row of zeros that would look measured. */
		if (n->vhost && r < rows - 1)
			continue;
		virtio_queue_stats(&n->vdev, qi[r], v, name[r], "packets");
		v->counter(v, "drops", stat_get(&s->drops));
		v->counter(v, "batches", stat_get(&s->batches));
		v->counter(v, "calls", stat_get(&s->calls));
		v->counter(v, "polls", stat_get(&s->polls));
		v->counter(v, "poll_hits", stat_get(&s->poll_hits));
		v->counter(v, "poll_us", stat_get(&s->poll_ns) / 1000);
	}
	if (n->vhost) {
		v->group(v, "vhost");
		v->counter(v, "pairs", (u64)n->pairs);
		/* Under run_lock: a reset on a vCPU stops the rings (net_vhost_stop) meanwhile. */
		pthread_mutex_lock(&n->run_lock);
		v->counter(v, "running", (u64)net_vhost_pairs(n->vhost));
		/* Each data ring's used index: proof of which pairs vhost moved frames on. */
		for (int r = 0; r < rows - 1; r++) {
			char c[32];

			snprintf(c, sizeof(c), "%s_used_idx", name[r]);
			v->counter(v, c, (u64)MAX(net_vhost_used_idx(n->vhost, qi[r]), 0));
		}
		pthread_mutex_unlock(&n->run_lock);
	}
}

/* ---- the NIC as an entry of the VM's device list ---- */

typedef int (*net_open_fn)(const struct net_opts *o, struct net_backend **be, int n, char *err,
			   size_t errlen);
/* How each -n mode opens its backends (the fake, for tests, is made below). */
static const net_open_fn net_open[] = {
	[NET_MODE_TAP] = net_tap_open,
	[NET_MODE_USER] = net_passt_open,
};
static const char *const net_mode_name[] = {
	[NET_MODE_TAP] = "tap",
	[NET_MODE_USER] = "passt",
	[NET_MODE_FAKE] = "fake",
};

/* Its backends (a tap, passt, or fake ones for tests), then the device. */
static int net_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	struct net_backend *be[NET_MAX_QUEUE_PAIRS] = { NULL };
	static const u8 default_mac[6] = VIRTIO_NET_DEFAULT_MAC;
	struct net_opts o = *(const struct net_opts *)d->arg;
	char ifname[sizeof(be[0]->ifname)] = "fake";
	int ret, pairs = o.queue_pairs ? o.queue_pairs : 1;

	if (kvm->cfg.no_ioeventfd)
		o.ioeventfd = false;
	if (!o.trans_set)
		o.trans = kvm->cfg.virtio_trans;
	if (!o.mac_set) {
		memcpy(o.guest_mac, default_mac, sizeof(o.guest_mac));
		o.guest_mac[5] = (u8)(o.guest_mac[5] + d->index);
		o.mac_set = true;
	}
	if (o.mode == NET_MODE_FAKE) {
		/* One that cannot be made is reported by virtio_net_create ("no backend"). */
		for (int i = 0; i < pairs && i < NET_MAX_QUEUE_PAIRS; i++)
			be[i] = net_fake_create();
	} else {
		if ((unsigned)o.mode >= ARRAY_SIZE(net_open) || !net_open[o.mode]) {
			errfmt(err, errlen, "virtio-net: no backend for mode %d", o.mode);
			return -EINVAL;
		}
		ret = net_open[o.mode](&o, be, pairs, err, errlen);
		if (ret < 0)
			return ret;
		memcpy(ifname, be[0]->ifname, sizeof(ifname));
	}
	/* From here the device owns the backends, on failure too. */
	ret = virtio_net_create(kvm, &o, be, (struct virtio_net **)&d->priv, err, errlen);
	if (ret < 0)
		return ret;
	pr_debug("virtio-net %d over %s on %s %s, %s, tx=%s%s", d->index,
		 virtio_trans_name(o.trans),
		 (unsigned)o.mode < ARRAY_SIZE(net_mode_name) && net_mode_name[o.mode]
			 ? net_mode_name[o.mode]
			 : "?",
		 ifname, o.ioeventfd ? "ioeventfd" : "trapped notifies",
		 net_tx_mode_name(o.tx_mode),
		 virtio_net_has_vhost(d->priv) ? ", data rings in vhost-net" : "");
	return 0;
}

static void net_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	virtio_net_destroy(d->priv);
}

static void net_dev_quiesce(struct kvm_dev *d)
{
	virtio_net_quiesce(d->priv);
}

static void net_dev_resume(struct kvm_dev *d)
{
	virtio_net_resume(d->priv);
}

static void net_dev_reset(struct kvm_dev *d)
{
	virtio_device_reset(virtio_net_vdev(d->priv));
}

static void net_dev_stats(struct kvm_dev *d, struct stats_visitor *v)
{
	virtio_net_stats(d->priv, v);
}

static const struct kvm_dev_ops net_dev_ops = {
	.name = "virtio-net",
	.prio = DEV_PRIO_VIRTIO,
	.init = net_dev_init,
	.quiesce = net_dev_quiesce,
	.resume = net_dev_resume,
	.reset = net_dev_reset,
	.stats = net_dev_stats,
	.stats_name = "net",
	.exit = net_dev_exit,
};

int virtio_net_add(struct kvm *kvm, const struct net_opts *o)
{
	return kvm_dev_add(kvm, &net_dev_ops, o, sizeof(*o));
}

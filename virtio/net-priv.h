/* virtio-net's insides, shared by its files: the device, each data path's worker state, the queue helpers. */
#ifndef LKVM_VIRTIO_NET_PRIV_H
#define LKVM_VIRTIO_NET_PRIV_H

/*
 * virtio/net.c: features, config space, lifecycle (start, stop, pause, alloc, free), the
 *               thread table, counters, the device-list entry
 * virtio/net-queue.c: what every queue thread shares (waiting, used ring, broken queue, the
 *               backend going away, batch calls failing)
 * virtio/net-tx.c: guest to backend; virtio/net-rx.c and net-rx-batch.c: backend to guest
 *               (batch=off and batch=on); virtio/net-ctrl.c: the control queue
 * virtio/net-snap.c: the device's records in a snapshot, its held RX buffers given back
 * A path calls no other path: what they share is here, in net-queue.c or in net.c.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <sys/uio.h>
#include <linux/virtio_net.h>

#include "lkvm/net.h"
#include "lkvm/net-trace.h"
#include "lkvm/virtio.h"
#include "lkvm/virtio-net.h"
#include "lkvm/worker.h"

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

#define F(bit) (1ULL << (bit))

enum worker_kind { W_RX, W_TX, W_CTL, W_KINDS };

/* What every device thread has: it serves one queue (RX, TX or control). The first member of
 * each path's own state (struct net_tx, net_rx, net_ctl). */
struct net_worker {
	struct virtio_net *n;
	enum worker_kind kind;
	int qi;	  /* index in vdev->q */
	int pair; /* backend index */
	char qname[24];
	struct worker *wk; /* its thread: one of n->wk */
	bool broken;	   /* the guest broke the queue: touch it no more */
	struct vq_elem *elem;
	u16 pending; /* used elements filled, not yet flushed */
	/* batch=on (the backend has send_batch/recv_batch; cleared for good when a batch
	 * call fails): TX pops up to TX_BATCH chains at a time, RX holds up to RX_BATCH
	 * buffers (struct net_tx, struct net_rx_batch). */
	bool batch;
	bool in_doubt; /* a batch call returned NET_BATCH_IN_DOUBT: see batch_in_doubt */
	/* -n trace=on, pair 0's TX and RX only (else NULL: one predictable branch per pass and
	 * frame): the stamps of the bench frame in hand (net-queue.c's trace_*). */
	struct net_trace *trace;
	u64 tr_pass;   /* host TSC when this drain pass began: T2 (TX), T4 (RX) */
	u64 tr_send;   /* TX: T3, when the send call that took the frame began */
	u64 tr_seq;    /* RX: the echo in the guest's buffers, not yet published */
	u64 tr_read;   /* RX: its T4 (tr_pass when it was copied; a later frame restamps tr_pass) */
	u64 tr_copied; /* RX: T5, when it was copied there */
	bool tr_held;  /* RX: tr_seq waits for flush_pending (T6) */
};

/* ---- TX (net-tx.c) ---- */

/* batch=on TX: what became of each chain of a batch. */
enum tx_state { TXS_SEND, TXS_DONE };

struct net_tx {
	struct net_worker w;
	u64 poll_budget_ns;	/* tx=poll: the next window's length (adapts, <= poll_max_ns) */
	u64 poll_missed_at;	/* tx=poll: start of the last window that ran out (0: none since) */
	u64 poll_backoff_until; /* tx=poll: no window before then (a yield was slow) */
	/* batch=on: the chains of a batch, popped into elems. */
	struct vq_elem *elems;
	u8 *txs; /* enum tx_state per elems[i] */
	struct net_io *io;
	int *io_idx;
};

/* ---- RX (net-rx.c; batch=on: net-rx-batch.c) ---- */

/* What an RX thread waits for next. */
enum rx_wait {
	RX_WAIT_FRAME,	 /* the guest may have buffers: wait for the backend (and count kicks) */
	RX_WAIT_BUFFERS, /* ring empty, notifications on: wait for the guest's kick */
	RX_WAIT_DEAD,	 /* queue broken: wait for stop only */
	RX_WAIT_BACKOFF, /* the backend failed while readable: pause, then try again */
};

/* An RX chain popped and not yet used. */
struct rx_chain {
	u16 head;
	u16 niov; /* its writable iovecs in net_rx.iov */
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

/* batch=on RX: up to RX_BATCH buffers held in slots[0..nslots), in pop order, across
 * wake-ups, `offer` of them offered per call (adapting to how many frames a call finds). */
struct net_rx_batch {
	struct net_io *io;
	struct rx_slot *slots;
	struct iovec *slot_iov; /* the slots' storage (slots move, these do not) */
	u8 *slot_spill;
	int nslots, offer;
	u64 pop_seq;
	/* The results of the last backend call (in io), taken in slot order by
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
};

struct net_rx {
	struct net_worker w;
	/* Chains taken from the ring but not yet used, in pop order, so that they are
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
	struct net_rx_batch b; /* batch=on */
};

/* ---- control queue (net-ctrl.c) ---- */

struct net_ctl {
	struct net_worker w; /* a command at a time: nothing more to keep */
};

/* One device thread's state, whichever its path. */
union net_thread {
	struct net_worker w;
	struct net_tx tx;
	struct net_rx rx;
	struct net_ctl ctl;
} __attribute__((
	aligned(64))); /* TX and RX workers of a pair run on different CPUs: no line shared */

struct virtio_net {
	struct virtio_device vdev;
	struct kvm *kvm;
	int pairs;
	enum net_mode mode; /* -n mode=: a snapshot's backend must be of the same */
	struct net_backend *be[NET_MAX_QUEUE_PAIRS];

	/* Config space: written by the control thread (MAC_ADDR_SET), read by vCPUs. */
	pthread_mutex_t cfg_lock;
	struct virtio_net_config cfg;

	/* Threads: start, stop, pause and resume serialised by run_lock (a reset on a vCPU
	 * against teardown or a pause). */
	pthread_mutex_t run_lock;
	int nworkers;
	union net_thread w[VIRTIO_MAX_QUEUES];
	struct worker wk[VIRTIO_MAX_QUEUES]; /* made with the device: w[i] runs on wk[i] */

	/* Negotiated at start. */
	bool mrg_rxbuf;
	bool batch;	       /* -n batch=on and every backend has the batch ops */
	atomic_int curr_pairs; /* pairs that receive: 1 at start and reset, then VQ_PAIRS_SET */
	int restore_pairs;     /* loaded from a snapshot: the next start's curr_pairs (0: 1) */
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
	u64 tx_timer_ns;	    /* tx=timer: how long notifications stay off after a notify */
	u64 poll_max_ns;	    /* tx=poll: upper bound of a poll window */
	virtio_net_tx_hook tx_hook; /* tests: called between drain and re-enable */
	void *tx_hook_arg;
	struct ratelimit log_rl; /* messages a guest (or the host network) can repeat */
	struct net_trace *trace; /* -n trace=on (else NULL): pair 0's round-trip stages */
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

/* ---- net-queue.c: what every queue thread shares ---- */

/* WAKE_STOP: asked to stop or park (worker.h); WAKE_FAIL with it: poll itself failed. */
enum { WAKE_STOP = 1, WAKE_KICK = 2, WAKE_IO = 4, WAKE_FAIL = 8 };

void drain_kicks(struct virtio_queue *q);
int wait_for(struct net_worker *w, bool want_kick, int io_fd, short io_events);
bool stop_or_park(struct net_worker *w, int wake);
void queue_broken(struct net_worker *w, const char *why);
void flush_pending(struct net_worker *w);
/* The next chain of w's queue into e: 1, 0 when the ring is empty, -1 when the chain is
 * malformed (what was pending is published first, then the queue is broken). */
int net_pop(struct net_worker *w, struct vq_elem *e);
void fill_used(struct net_worker *w, u16 head, u32 len);
bool gone_error(ssize_t r);
void backend_gone(struct net_worker *w, ssize_t err);
bool is_gone(const struct virtio_net *n);
void batch_failed(struct net_worker *w, int err);
void batch_in_doubt(struct net_worker *w);
void keep_in_doubt(struct net_worker *w, void *a, void *b);

/* -n trace=on: the stamps, taken only where w->trace is set (pair 0's TX and RX). A drain
 * pass begins (T2, T4); a frame of the chain iov[0..cnt) was sent (T3, TX) or copied into
 * the guest's buffers (T5, RX; T6 follows in flush_pending). Not bench frames: ignored. */
static inline void trace_pass(struct net_worker *w)
{
	if (w->trace)
		w->tr_pass = net_trace_now();
}
/* T3 is taken before the send call, not after it returns: the echo can reach the RX thread
 * while the write is still returning (a polling TX thread, a spinning peer), which made T4 < T3. */
static inline void trace_send(struct net_worker *w)
{
	if (w->trace)
		w->tr_send = net_trace_now();
}
void trace_tx_sent(struct net_worker *w, const struct iovec *iov, int cnt);
void trace_rx_copied(struct net_worker *w, const struct iovec *iov, int cnt);

/* ---- each path's entry points, named only in net.c's thread table ---- */

/* alloc: the worker's own buffers (w->elem is there already; batch=on adds its own); on
 * failure the caller calls free. free: gives them back (or keeps what a batch call left in
 * doubt). serve: one wake-up's work on the calling thread (virtio_net_serve_once). */
int net_tx_alloc(struct net_worker *w);
void net_tx_free(struct net_worker *w);
void net_tx_thread(void *arg);
void net_tx_serve(struct net_worker *w);

int net_rx_alloc(struct net_worker *w);
void net_rx_free(struct net_worker *w);
void net_rx_thread(void *arg);
void net_rx_serve(struct net_worker *w);

void net_ctl_thread(void *arg);
void net_ctl_serve(struct net_worker *w);

/* net.c, for the control queue's VQ_PAIRS_SET. */
int set_active_pairs(struct virtio_net *n, int pairs);
/* net.c: "tap", "passt", "fake" ("?" for another value). */
const char *net_mode_str(int mode);

/* ---- between net-rx.c and net-rx-batch.c ---- */

enum { GATHER_OK, GATHER_DRY, GATHER_BROKEN, GATHER_FULL };

/* What one step of an RX drain came to (rx_drain). */
enum rx_step {
	RX_STEP_NEXT, /* go on (a frame delivered, or more to do) */
	RX_STEP_DRY,  /* the ring has no buffer for what waits: flush, re-enable, re-check */
	RX_STEP_END,  /* done for this wake-up (what next: the step's *next) */
};

/* The per-frame and batched paths of the one drain loop (rx_drain). */
struct rx_path {
	bool (*more)(struct net_rx *rx, int frames);
	enum rx_step (*step)(struct net_rx *rx, int *frames, enum rx_wait *next);
	enum rx_wait (*end)(struct net_rx *rx, enum rx_wait next);
};

extern const struct rx_path rx_batch_path;
int rx_pop(struct net_rx *rx, struct vq_elem *e);
void rx_give_back(struct net_rx *rx, u16 n);
void rx_slots_release(struct net_rx *rx);
int rx_batch_alloc(struct net_rx *rx);
void rx_batch_free(struct net_rx *rx);

#endif

/* virtio-net: what every queue thread shares: waiting, the used ring, a broken queue, the backend going away. */
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net-priv.h"

/* ---- waiting ---- */

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
void drain_kicks(struct virtio_queue *q)
{
	struct pollfd p = { .fd = q->kick_fd, .events = POLLIN };

	if (q->kick_fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLIN))
		take_kicks(q);
}

/* Block until stop or park, a kick (if want_kick) or io_fd ready for io_events (if
 * io_fd >= 0). Returns WAKE_* bits; kicks are read and counted here. */
int wait_for(struct net_worker *w, bool want_kick, int io_fd, short io_events)
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
bool stop_or_park(struct net_worker *w, int wake)
{
	return (wake & WAKE_FAIL) || worker_park(w->wk);
}

void queue_broken(struct net_worker *w, const char *why)
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
void flush_pending(struct net_worker *w)
{
	struct virtio_queue *q = &w->n->vdev.q[w->qi];

	if (!w->pending)
		return;
	/* T6: the echo's used index is published now. Read before the store: read after it, a
	 * guest polling the ring could see the index before the stamp (notice < 0). */
	if (w->tr_held) {
		net_trace_rx(w->trace, w->tr_seq, w->tr_read, w->tr_copied, net_trace_now());
		w->tr_held = false;
	}
	vq_flush(&q->vq, w->pending);
	w->pending = 0;
	virtio_notify_queue(&w->n->vdev, w->qi);
}

void trace_tx_sent(struct net_worker *w, const struct iovec *iov, int cnt)
{
	struct net_trace_frame f;

	if (net_trace_frame(iov, cnt, HDR_LEN, &f))
		net_trace_tx(w->trace, &f, w->tr_pass, w->tr_send);
}

void trace_rx_copied(struct net_worker *w, const struct iovec *iov, int cnt)
{
	u64 t5 = net_trace_now();
	struct net_trace_frame f;

	if (!net_trace_frame(iov, cnt, HDR_LEN, &f))
		return;
	w->tr_seq = f.seq;
	w->tr_read = w->tr_pass;
	w->tr_copied = t5;
	w->tr_held = true;
}

int net_pop(struct net_worker *w, struct vq_elem *e)
{
	int r = vq_pop(&w->n->vdev.q[w->qi].vq, e);

	if (r < 0) {
		flush_pending(w);
		queue_broken(w, "malformed descriptor chain");
		return -1;
	}
	return r;
}

/* Fill one used element; flush early if a hostile driver could make the unflushed
 * batch wrap onto itself (a well-behaved one cannot: it has only size chains). */
void fill_used(struct net_worker *w, u16 head, u32 len)
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
bool gone_error(ssize_t r)
{
	return r == -EBADFD || r == -ENODEV || r == -ENXIO || r == -EPIPE || r == -EPROTO ||
	       r == -EMSGSIZE || r == -ECONNRESET;
}

/* The tap or passt disappeared: tell the guest the link is down (VIRTIO_NET_F_STATUS,
 * config-change interrupt) and say so once. The device keeps running: TX drops what the guest sends,
 * RX waits for a reset or the end, lkvm and the guest carry on. */
void backend_gone(struct net_worker *w, ssize_t err)
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

bool is_gone(const struct virtio_net *n)
{
	return atomic_load_explicit(&n->backend_gone, memory_order_relaxed);
}

/* A batch call failed as a whole (the ring is unusable): this queue goes on one frame per
 * call. Said once per device. */
void batch_failed(struct net_worker *w, int err)
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
 * the path's free (net_tx_free, rx_batch_free) keeps its batch storage for the life of the
 * process (keep_in_doubt). The backend takes no more batches (the tap's ring is dead): after a
 * reset the queue goes on one frame per call, so this happens at most once per queue and ring
 * (2 MiB per RX queue, 1 MiB per TX queue, kept).
 */
void batch_in_doubt(struct net_worker *w)
{
	w->batch = false;
	w->in_doubt = true;
	queue_broken(w,
		     "a batch call failed with requests in flight; their buffers are not reused");
}

/* Memory a batch call left in doubt (batch_in_doubt), kept for the life of the process: io_uring
 * may reach it until its ring's requests are all over, which nothing here can see. Reachable from
 * here, so leak checkers do not count it. Its own lock: devices of different VMs stop at once. */
static struct net_kept {
	struct net_kept *next;
	void *mem[2];
} * kept_in_doubt;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

/* Keep what the kernel may reach through w's batch requests, a and b: TX's elems (their
 * iovecs; net_tx_free), RX's slot iovecs and spill areas (rx_batch_free). A node that cannot
 * be allocated: the memory is leaked instead. The caller forgets them. */
void keep_in_doubt(struct net_worker *w, void *a, void *b)
{
	struct net_kept *k = malloc(sizeof(*k));

	if (k) {
		*k = (struct net_kept){ .mem = { a, b } };
		pthread_mutex_lock(&kept_lock);
		k->next = kept_in_doubt;
		kept_in_doubt = k;
		pthread_mutex_unlock(&kept_lock);
	}
	w->in_doubt = false;
}

/* The virtio-net device: features, config space, per-queue TX/RX threads, control queue, counters. */
#ifndef LKVM_VIRTIO_NET_H
#define LKVM_VIRTIO_NET_H

#include "lkvm/net.h"
#include "lkvm/virtio.h"

struct kvm;
struct snap_rec_buf;
struct stats_visitor;
struct virtio_net;

/* Largest queue the device offers (queue_size_max of every queue). */
#define VIRTIO_NET_QUEUE_SIZE 256
/* The MAC when net_opts has none (mac_set false): 52:54:00:12:34:56. The caller numbers
 * several NICs (lkvm run adds the NIC's index to the last byte). */
#define VIRTIO_NET_DEFAULT_MAC                     \
	{                                          \
		0x52, 0x54, 0x00, 0x12, 0x34, 0x56 \
	}

/* Queue layout (virtio 1.2 §5.1.2): rx0, tx0, rx1, tx1, ..., then the control queue,
 * nr_queues = 2 * queue_pairs + 1. Without VIRTIO_NET_F_MQ negotiated the control
 * queue is queue 2 whatever queue_pairs says, and only pair 0 is served. */

/* Create the device over `be` (one backend per queue pair, owned by the device from
 * now on: closed by virtio_net_destroy, or here when creation fails) and attach it to
 * the transport o->trans (virtio_device_attach). Returns 0 or -errno with a reason in err. */
int virtio_net_create(struct kvm *kvm, const struct net_opts *o, struct net_backend **be,
		      struct virtio_net **out, char *err, size_t errlen) __must_check;
/* The data rings are vhost-net's (-n vhost=on, or auto where it opened). */
bool virtio_net_has_vhost(const struct virtio_net *n);
/* Stops the threads, unregisters the transport, closes the backends, frees. NULL is fine. */
void virtio_net_destroy(struct virtio_net *n);

/* For tests without a transport: the device's virtio_device (ops, queues) and a
 * constructor that attaches none (the test initialises queues and calls start).
 * kvm needs only .mem; kick_fd/irq_fd start at -1. */
struct virtio_device *virtio_net_vdev(struct virtio_net *n);
int virtio_net_create_bare(struct kvm *kvm, const struct net_opts *o, struct net_backend **be,
			   struct virtio_net **out) __must_check;

/* Tests only: fn(arg, queue index) runs on a TX thread each time it found the ring empty
 * and is about to re-enable notifications (the window where a chain gets no kick). Set it
 * before start; NULL removes it. */
typedef void (*virtio_net_tx_hook)(void *arg, int qi);
void virtio_net_set_tx_hook(struct virtio_net *n, virtio_net_tx_hook fn, void *arg);

/* Tests and fuzzing only: serve queue qi once on the calling thread, as its thread does
 * when woken: TX (odd) and control drain the ring (drain, re-enable notifications,
 * re-check); RX (even) delivers what the backend holds into the ring's buffers, then hands
 * back the chains it held. The device's threads must not be running (no start, or after a
 * stop); the queue's vq must be initialised and the backend must not block. 0, -EINVAL
 * or -ENOMEM. */
int virtio_net_serve_once(struct virtio_net *n, int qi) __must_check;

/* Counters per queue in use (groups rx0, tx0, ..., ctrl): kicks, trapped exits,
 * interrupts, packets, bytes, drops, wake-ups with work (batches), and for tx=poll poll
 * windows, those that found work and the time spent polling (polls, poll_hits, poll_us). With
 * vhost the data queues are not reported (vhost-net counts nothing lkvm can read): the control
 * queue, then a group "vhost" (pairs, and pairs running now). */
void virtio_net_stats(struct virtio_net *n, struct stats_visitor *v);

/* tx=poll's next window (ns, within [min(1 us, max_ns), max_ns]) after one of `budget`:
 * hit (it found a chain): double; ran out, and the next kick came gap_ns after the
 * window's start: grow to cover the gap when gap_ns <= max_ns (a longer window would
 * have caught it), else halve. Pure, for the unit tests. */
u64 virtio_net_poll_budget(u64 budget, u64 max_ns, bool hit, u64 gap_ns);

/* tx=poll after a yield between two looks that began at `start` and returned at `end`: the
 * new end of its backoff (no polling before then; 0 or past: none). A yield that took
 * NET_POLL_YIELD_SLOW_NS or more gave the core to a busy thread for its whole slice: back off
 * for NET_POLL_BACKOFF_NS from its end; a quicker one leaves backoff_until as it is. Pure. */
u64 virtio_net_poll_yielded(u64 backoff_until, u64 start, u64 end);
#define NET_POLL_YIELD_SLOW_NS 250000ull
#define NET_POLL_BACKOFF_NS 100000000ull

/* Pause support: park the device's threads (each finishes the frame it is on and touches
 * nothing more; chains still in the rings stay there), and let them go on. No-op when the
 * device is not running. */
void virtio_net_quiesce(struct virtio_net *n);
void virtio_net_resume(struct virtio_net *n);

/*
 * Snapshot (issue 31, virtio/net-snap.c). save, the device quiesced: the MAC, rx mode, queue
 * pairs receiving, backend mode, each RX thread's held buffers, then the virtio core's
 * records; -EOPNOTSUPP for a NIC on vhost-net, -EBUSY when a queue has chains in flight its
 * threads do not account for. load, on a NIC just made from the same options (the new
 * process's backend, of the same mode): every field checked (-EINVAL and a reason, the NIC
 * left reset), the held buffers given back to their rings. start: virtio_snap_start (its
 * threads, on the pairs that received).
 */
int virtio_net_save(struct virtio_net *n, struct snap_rec_buf *b, char *err,
		    size_t errlen) __must_check;
int virtio_net_load(struct virtio_net *n, const void *sec, size_t len, char *err,
		    size_t errlen) __must_check;
void virtio_net_start(struct virtio_net *n);

/* Add a NIC to kvm's device list ("virtio-net", stats kind "net"): at init its backends
 * (a tap, or fake ones for NET_MODE_FAKE) and the device on o->trans (else
 * --virtio-transport); a NIC without a MAC gets the default MAC plus its index. 0 or
 * -ENOMEM. */
int virtio_net_add(struct kvm *kvm, const struct net_opts *o) __must_check;

#endif

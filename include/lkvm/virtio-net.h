/* The virtio-net device: features, config space, per-queue TX/RX threads, control queue, counters. */
#ifndef LKVM_VIRTIO_NET_H
#define LKVM_VIRTIO_NET_H

#include <stdio.h>

#include "lkvm/net.h"
#include "lkvm/virtio.h"

struct kvm;
struct virtio_net;

/* Largest queue the device offers (queue_size_max of every queue). */
#define VIRTIO_NET_QUEUE_SIZE 256
/* Default MAC when -n gives none: 52:54:00:12:34:56, the last byte plus the number of
 * NICs already in kvm->nets, so several NICs differ. */
#define VIRTIO_NET_DEFAULT_MAC { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 }

/* Queue layout (virtio 1.2 §5.1.2): rx0, tx0, rx1, tx1, ..., then the control queue,
 * nr_queues = 2 * queue_pairs + 1. Without VIRTIO_NET_F_MQ negotiated the control
 * queue is queue 2 whatever queue_pairs says, and only pair 0 is served. */

/* Create the device over `be` (one backend per queue pair, owned by the device from
 * now on: closed by virtio_net_destroy, or here when creation fails) and register it
 * on the PCI bus with virtio_pci_init. Returns 0 or -errno with a reason in err. */
int virtio_net_create(struct kvm *kvm, const struct net_opts *o, struct net_backend **be,
		      struct virtio_net **out, char *err, size_t errlen) __must_check;
/* Stops the threads, unregisters the transport, closes the backends, frees. NULL is fine. */
void virtio_net_destroy(struct virtio_net *n);

/* For tests without PCI: the device's virtio_device (ops, queues) and a constructor
 * that does not register a transport (the test initialises queues and calls start).
 * kvm needs only .mem (and .nets for the default MAC); kick_fd/irq_fd start at -1. */
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

/* Counters per queue: kicks, trapped exits, interrupts, packets, bytes, packets per
 * kick, packets per interrupt, drops, and for tx=poll poll windows, those that found
 * work and the time spent polling (us); as an aligned table (a header line, then one
 * line per queue in use: rx0, tx0, ..., ctrl), or as one JSON object
 * {"queues":[{"name":"rx0",...},...]} with no trailing newline, so callers can embed it. */
void virtio_net_print_stats(struct virtio_net *n, FILE *out, bool json);

#endif

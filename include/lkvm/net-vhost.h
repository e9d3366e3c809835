/* vhost-net for virtio-net: the data rings served by /dev/vhost-net, one per queue pair, behind a small interface to virtio/net.c. */
#ifndef LKVM_NET_VHOST_H
#define LKVM_NET_VHOST_H

#include <linux/vhost_types.h>

#include "lkvm/mem.h"
#include "lkvm/util.h"

struct kvm;
struct virtio_device;
struct net_vhost;

#define NET_VHOST_DEV "/dev/vhost-net"

/*
 * The lifecycle, as virtio/net.c drives it (its run_lock serialises every call):
 *   net_vhost_open    at creation, before the sandbox: per pair an fd of dev (NULL:
 *                     NET_VHOST_DEV), VHOST_SET_OWNER, VHOST_GET_FEATURES and the memory
 *                     table (every guest RAM region, both sides of the PCI hole).
 *   net_vhost_start   DRIVER_OK (a vCPU): features, then per ring of the pairs in use its
 *                     size, base 0, addresses, kick (the queue's kick eventfd, which the
 *                     ioeventfd or a trapped notify signals) and call (the queue's irqfd, or
 *                     an eventfd the relay thread turns into the transport's interrupt), then
 *                     the tap as backend.
 *   net_vhost_stop    reset (a vCPU): the backends detached; start rebuilds everything.
 *   net_vhost_pause   lkvm pause: backends detached, ring indices saved (VHOST_GET_VRING_BASE);
 *   net_vhost_resume  restores them (VHOST_SET_VRING_BASE) and the backends: no frame lost.
 *   net_vhost_close   teardown: the fds closed (which detaches everything).
 * tap_fd[p] stays owned by the caller and must outlive the vhost instance.
 */
int net_vhost_open(struct kvm *kvm, struct virtio_device *vdev, const int *tap_fd, int pairs,
		   const char *dev, struct net_vhost **out, char *err, size_t errlen) __must_check;
void net_vhost_close(struct net_vhost *v);
/* The feature bits vhost decides (ring layout, header, indirect descriptors) that this kernel's
 * vhost-net cannot do: the device must not offer them. */
u64 net_vhost_unsupported(const struct net_vhost *v);
/* pairs: the data pairs the driver uses (all rings must be ready). 0 or -errno (a reason logged). */
int net_vhost_start(struct net_vhost *v, int pairs) __must_check;
void net_vhost_stop(struct net_vhost *v);
void net_vhost_pause(struct net_vhost *v);
void net_vhost_resume(struct net_vhost *v);
/* Pairs served by vhost right now (0: stopped). */
int net_vhost_pairs(const struct net_vhost *v);
/* Queue qi's used index (2p: pair p's rx, 2p + 1: its tx): the chains vhost completed on it since
 * the rings last started, modulo 2^16, as the ring shows it now (or showed it when stopped);
 * -EINVAL for a queue out of range. lkvm counts nothing on rings vhost serves: this is the
 * device's own account of the work, read from the ring. */
int net_vhost_used_idx(const struct net_vhost *v, int qi);

/* The memory table of m: one vhost region per guest RAM region (guest address, size, lkvm's
 * address of it). Returns the regions written (at most max), -E2BIG when max is too small. */
int net_vhost_mem_regions(const struct guest_mem *m, struct vhost_memory_region *r, int max);

#endif

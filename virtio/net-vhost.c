/* vhost-net for virtio-net: the data rings handed to /dev/vhost-net (one fd per queue pair), started at DRIVER_OK, stopped at reset, paused with the VM. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/vhost.h>
#include <linux/virtio_config.h>
#include <linux/virtio_net.h>
#include <linux/virtio_ring.h>

#include "lkvm/kvm.h"
#include "lkvm/net-vhost.h"
#include "lkvm/net.h"
#include "lkvm/virtio.h"
#include "lkvm/worker.h"

/*
 * What vhost-net does and lkvm no longer does for a pair: walk its two rings, move frames
 * between them and the tap (whose vnet header size, 12, the tap backend already set), and
 * decide when the guest needs an interrupt (EVENT_IDX included). What stays in lkvm: feature
 * negotiation and config space (virtio/core.c, virtio/net.c), the tap's offloads and queue
 * steering, the control queue, and the interrupt itself where a queue has no irqfd.
 *
 * Ring numbering inside one vhost-net fd: 0 receive, 1 transmit, as the device's rx<p>, tx<p>
 * (queues 2p and 2p + 1).
 */

#define F(bit) (1ULL << (bit))
/* The bits vhost-net implements for the rings, which the device can offer only when the
 * kernel's vhost-net has them (VHOST_GET_FEATURES). Every other bit is lkvm's (config, control
 * queue) or the tap's (offloads). */
#define VHOST_OWNED                                                                            \
	(F(VIRTIO_F_VERSION_1) | F(VIRTIO_RING_F_EVENT_IDX) | F(VIRTIO_RING_F_INDIRECT_DESC) | \
	 F(VIRTIO_NET_F_MRG_RXBUF))
#define RINGS 2 /* per pair */

struct net_vhost {
	struct virtio_device *vdev;
	int npairs;
	int fd[NET_MAX_QUEUE_PAIRS];
	int tap_fd[NET_MAX_QUEUE_PAIRS];
	u64 features; /* VHOST_GET_FEATURES */
	int running;  /* pairs started (0: stopped) */
	bool paused;
	/* Per queue (2p + r): the eventfd vhost signals when the queue has no irqfd, made at open
	 * (no thread may create an eventfd after the sandbox); relayed by `relay`. */
	int call_fd[2 * NET_MAX_QUEUE_PAIRS];
	bool relayed[2 * NET_MAX_QUEUE_PAIRS];
	u16 base[2 * NET_MAX_QUEUE_PAIRS]; /* next avail index, saved by a pause */
	/* Per queue: its used ring while vhost may write it (NULL once stopped), and the ring's
	 * idx when it was stopped: what --stats reports for rings lkvm does not count itself. */
	struct vring_used *used[2 * NET_MAX_QUEUE_PAIRS];
	u16 used_at_stop[2 * NET_MAX_QUEUE_PAIRS];
	struct worker relay;
	bool relay_running;
	struct ratelimit rl;
};

int net_vhost_mem_regions(const struct guest_mem *m, struct vhost_memory_region *r, int max)
{
	if (m->nr > max)
		return -E2BIG;
	for (int i = 0; i < m->nr; i++)
		r[i] = (struct vhost_memory_region){
			.guest_phys_addr = m->r[i].gpa,
			.memory_size = m->r[i].size,
			.userspace_addr = (u64)(uintptr_t)m->r[i].hva,
		};
	return m->nr;
}

static int set_mem_table(int fd, const struct guest_mem *m)
{
	struct vhost_memory *mem;
	int n, ret = 0;

	mem = calloc(1, sizeof(*mem) + GMEM_MAX_REGIONS * sizeof(mem->regions[0]));
	if (!mem)
		return -ENOMEM;
	n = net_vhost_mem_regions(m, mem->regions, GMEM_MAX_REGIONS);
	if (n < 0)
		ret = n;
	mem->nregions = (u32)MAX(n, 0);
	if (!ret && ioctl(fd, VHOST_SET_MEM_TABLE, mem) < 0)
		ret = -errno;
	free(mem);
	return ret;
}

void net_vhost_close(struct net_vhost *v)
{
	if (!v)
		return;
	if (v->relay_running)
		worker_stop(&v->relay);
	worker_destroy(&v->relay);
	/* Closing the fd stops its rings and lets go of the tap and the eventfds. */
	for (int p = 0; p < v->npairs; p++)
		if (v->fd[p] >= 0)
			close(v->fd[p]);
	for (int i = 0; i < 2 * v->npairs; i++)
		if (v->call_fd[i] >= 0)
			close(v->call_fd[i]);
	free(v);
}

/* Pair p's vhost-net fd: opened, owned by this process, its features read, guest memory
 * mapped. 0 or -errno with a reason in err (the fd, if any, is closed by net_vhost_close). */
static int open_pair(struct net_vhost *v, int p, const struct guest_mem *mem, const char *dev,
		     char *err, size_t errlen)
{
	const char *what = "VHOST_SET_OWNER";
	int ret;

	v->fd[p] = open(dev, O_RDWR | O_CLOEXEC);
	if (v->fd[p] < 0) {
		ret = -errno;
		errfmt(err, errlen,
		       "vhost=on: cannot open %s: %s (is module vhost_net loaded?); -n vhost=off or auto runs without it",
		       dev, strerror(-ret));
		return ret;
	}
	if (ioctl(v->fd[p], VHOST_SET_OWNER) < 0 ||
	    (what = "VHOST_GET_FEATURES", ioctl(v->fd[p], VHOST_GET_FEATURES, &v->features) < 0)) {
		ret = -errno;
		errfmt(err, errlen, "vhost=on: %s: %s: %s", dev, what, strerror(-ret));
		return ret;
	}
	ret = set_mem_table(v->fd[p], mem);
	if (ret < 0)
		errfmt(err, errlen, "vhost=on: %s: VHOST_SET_MEM_TABLE: %s", dev, strerror(-ret));
	return ret;
}

int net_vhost_open(struct kvm *kvm, struct virtio_device *vdev, const int *tap_fd, int pairs,
		   const char *dev, struct net_vhost **out, char *err, size_t errlen)
{
	struct net_vhost *v;
	int ret;

	*out = NULL;
	if (!dev)
		dev = NET_VHOST_DEV;
	if (pairs < 1 || pairs > NET_MAX_QUEUE_PAIRS)
		return -EINVAL;
	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->vdev = vdev;
	for (int i = 0; i < NET_MAX_QUEUE_PAIRS; i++)
		v->fd[i] = -1;
	for (int i = 0; i < 2 * NET_MAX_QUEUE_PAIRS; i++)
		v->call_fd[i] = -1;
	v->npairs = pairs;
	ret = worker_init(&v->relay, kvm);
	if (ret < 0) {
		errfmt(err, errlen, "vhost: eventfd: %s", strerror(-ret));
		free(v);
		return ret;
	}
	for (int p = 0; p < pairs; p++) {
		v->tap_fd[p] = tap_fd[p];
		ret = open_pair(v, p, &kvm->mem, dev, err, errlen);
		if (ret < 0)
			goto fail;
	}
	/* The device is modern only: a vhost-net without VERSION_1 cannot serve it. */
	if (!(v->features & F(VIRTIO_F_VERSION_1))) {
		errfmt(err, errlen, "vhost=on: %s lacks VIRTIO_F_VERSION_1", dev);
		ret = -EOPNOTSUPP;
		goto fail;
	}
	for (int i = 0; i < 2 * pairs; i++) {
		v->call_fd[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (v->call_fd[i] < 0) {
			ret = -errno;
			errfmt(err, errlen, "vhost: eventfd: %s", strerror(-ret));
			goto fail;
		}
	}
	*out = v;
	return 0;
fail:
	net_vhost_close(v);
	return ret;
}

u64 net_vhost_unsupported(const struct net_vhost *v)
{
	return VHOST_OWNED & ~v->features;
}

int net_vhost_pairs(const struct net_vhost *v)
{
	return v ? v->running : 0;
}

int net_vhost_used_idx(const struct net_vhost *v, int qi)
{
	if (!v || qi < 0 || qi >= 2 * v->npairs)
		return -EINVAL;
	/* vhost's worker writes idx with a release store after the entries; a stale value read
	 * here only makes the snapshot older. */
	if (v->used[qi])
		return __atomic_load_n(&v->used[qi]->idx, __ATOMIC_RELAXED);
	return v->used_at_stop[qi];
}

/* ---- the relay: vhost's call eventfd turned into the transport's interrupt ---- */

/*
 * A queue without an irqfd (virtio-mmio, whose interrupt needs its InterruptStatus bit set
 * first; virtio-pci on INTx) cannot give vhost an eventfd that interrupts the guest by itself.
 * vhost signals call_fd instead, and this thread raises the interrupt through the same path a
 * device thread takes (virtio_raise_queue: ISR bit, then the transport's signal). One thread
 * per NIC, started only when some queue needs it; parked by a pause like every device thread
 * (nothing signals call_fd then: the rings are stopped).
 */
static void relay_thread(void *arg)
{
	struct net_vhost *v = arg;
	struct pollfd p[1 + 2 * NET_MAX_QUEUE_PAIRS];
	int qi[1 + 2 * NET_MAX_QUEUE_PAIRS];

	for (;;) {
		int n = 0, r;

		p[n++] = (struct pollfd){ .fd = worker_fd(&v->relay), .events = POLLIN };
		for (int i = 0; i < 2 * v->running; i++) {
			if (!v->relayed[i])
				continue;
			qi[n] = i;
			p[n++] = (struct pollfd){ .fd = v->call_fd[i], .events = POLLIN };
		}
		do
			r = poll(p, n, -1);
		while (r < 0 && errno == EINTR);
		if (r < 0) {
			pr_err("virtio-net: vhost relay: poll: %s", strerror(errno));
			return;
		}
		if (p[0].revents) {
			if (worker_park(&v->relay))
				return;
			continue;
		}
		for (int i = 1; i < n; i++) {
			u64 cnt;

			/* Many signals since the last read are one interrupt: the driver looks at
			 * every used entry when it runs. */
			if ((p[i].revents & POLLIN) &&
			    read(p[i].fd, &cnt, sizeof(cnt)) == sizeof(cnt))
				virtio_raise_queue(v->vdev, qi[i]);
		}
	}
}

/* ---- start, stop, pause, resume ---- */

static int ring_ioctl(struct net_vhost *v, int p, unsigned long req, void *arg, const char *what)
{
	if (ioctl(v->fd[p], req, arg) == 0)
		return 0;
	pr_warn_rl(&v->rl, "virtio-net: vhost pair %d: %s: %s", p, what, strerror(errno));
	return -errno;
}

static int set_backend(struct net_vhost *v, int p, int r, int fd)
{
	struct vhost_vring_file f = { .index = (unsigned)r, .fd = fd };

	return ring_ioctl(v, p, VHOST_NET_SET_BACKEND, &f, "VHOST_NET_SET_BACKEND");
}

/* One ring of pair p (r: 0 rx, 1 tx) from the queue's registers, up to its call eventfd. */
static int ring_setup(struct net_vhost *v, int p, int r)
{
	int qi = 2 * p + r;
	struct virtio_queue *q = &v->vdev->q[qi];
	const struct guest_mem *m = &v->vdev->kvm->mem;
	u64 n = q->size;
	/* Split ring sizes (virtio 1.2 §2.7): descriptors 16 bytes each; the driver area flags,
	 * idx, ring and used_event; the device area flags, idx, ring of 8-byte elements and
	 * avail_event. */
	void *desc = gmem_ptr(m, q->desc, 16 * n);
	void *avail = gmem_ptr(m, q->driver, 6 + 2 * n);
	void *used = gmem_ptr(m, q->device, 6 + 8 * n);
	struct vhost_vring_state num = { .index = (unsigned)r, .num = q->size };
	struct vhost_vring_state base = { .index = (unsigned)r, .num = 0 };
	struct vhost_vring_addr addr = {
		.index = (unsigned)r,
		.desc_user_addr = (u64)(uintptr_t)desc,
		.avail_user_addr = (u64)(uintptr_t)avail,
		.used_user_addr = (u64)(uintptr_t)used,
	};
	int irq_fd = __atomic_load_n(&q->irq_fd, __ATOMIC_ACQUIRE);
	struct vhost_vring_file kick = { .index = (unsigned)r, .fd = q->kick_fd };
	struct vhost_vring_file call = { .index = (unsigned)r };
	int ret;

	if (!q->vq.ready || !desc || !avail || !used)
		return -EINVAL; /* core.c checked the rings at DRIVER_OK: a queue not enabled */
	v->relayed[qi] = irq_fd < 0;
	call.fd = v->relayed[qi] ? v->call_fd[qi] : irq_fd;
	v->base[qi] = 0;
	v->used[qi] = used; /* core.c checked its 4-byte alignment at DRIVER_OK */
	v->used_at_stop[qi] = 0;
	if ((ret = ring_ioctl(v, p, VHOST_SET_VRING_NUM, &num, "VHOST_SET_VRING_NUM")) ||
	    (ret = ring_ioctl(v, p, VHOST_SET_VRING_BASE, &base, "VHOST_SET_VRING_BASE")) ||
	    (ret = ring_ioctl(v, p, VHOST_SET_VRING_ADDR, &addr, "VHOST_SET_VRING_ADDR")) ||
	    (ret = ring_ioctl(v, p, VHOST_SET_VRING_KICK, &kick, "VHOST_SET_VRING_KICK")) ||
	    (ret = ring_ioctl(v, p, VHOST_SET_VRING_CALL, &call, "VHOST_SET_VRING_CALL")))
		return ret;
	return 0;
}

int net_vhost_start(struct net_vhost *v, int pairs)
{
	u64 f = atomic_load_explicit(&v->vdev->features, memory_order_relaxed) & VHOST_OWNED &
		v->features;
	bool relay = false;
	int ret = 0;

	net_vhost_stop(v);
	if (pairs < 1 || pairs > v->npairs)
		return -EINVAL;
	for (int p = 0; p < pairs && !ret; p++) {
		ret = ring_ioctl(v, p, VHOST_SET_FEATURES, &f, "VHOST_SET_FEATURES");
		for (int r = 0; r < RINGS && !ret; r++)
			ret = ring_setup(v, p, r);
		/* Attached last: from here vhost may touch the rings. Counted at once so a
		 * failure below detaches what was attached. */
		for (int r = 0; r < RINGS && !ret; r++)
			ret = set_backend(v, p, r, v->tap_fd[p]);
		v->running = p + 1;
	}
	for (int i = 0; i < 2 * v->running; i++)
		relay |= v->relayed[i];
	if (!ret && relay) {
		ret = worker_start(&v->relay, "lkvm-net-irq", SB_NET_IRQ, relay_thread, v);
		v->relay_running = ret == 0;
	}
	if (ret < 0)
		net_vhost_stop(v);
	return ret;
}

void net_vhost_stop(struct net_vhost *v)
{
	/* Backends first: once detached, vhost signals no call eventfd the relay would miss. */
	for (int p = 0; p < v->running; p++)
		for (int r = 0; r < RINGS; r++)
			set_backend(v, p, r, -1);
	if (v->relay_running)
		worker_stop(&v->relay);
	v->relay_running = false;
	for (int i = 0; i < 2 * v->running; i++) {
		eventfd_drain(v->call_fd[i]);
		/* Detached: vhost writes this ring no more. Kept for --stats, as the ring itself may
		 * be reused by the driver from here. */
		if (v->used[i])
			v->used_at_stop[i] = __atomic_load_n(&v->used[i]->idx, __ATOMIC_RELAXED);
		v->used[i] = NULL;
	}
	v->running = 0;
	v->paused = false;
}

/*
 * A pause detaches the backends: VHOST_NET_SET_BACKEND -1 returns once vhost's worker has
 * finished the frame it was on (it flushes), and chains the guest posted since stay in the
 * rings, frames the host sent stay queued in the tap. The next avail index of each ring is
 * saved, then written back before the tap is attached again, so vhost goes on exactly where
 * it stopped. Attaching makes vhost poll the tap at once (writable: TX drains the ring;
 * readable: RX delivers), so what waited during the pause moves without a new kick.
 */
void net_vhost_pause(struct net_vhost *v)
{
	if (!v->running || v->paused)
		return;
	for (int p = 0; p < v->running; p++) {
		for (int r = 0; r < RINGS; r++) {
			struct vhost_vring_state s = { .index = (unsigned)r };

			set_backend(v, p, r, -1);
			if (!ring_ioctl(v, p, VHOST_GET_VRING_BASE, &s, "VHOST_GET_VRING_BASE"))
				v->base[2 * p + r] = (u16)s.num;
		}
	}
	if (v->relay_running)
		worker_quiesce(&v->relay);
	v->paused = true;
}

void net_vhost_resume(struct net_vhost *v)
{
	if (!v->running || !v->paused)
		return;
	if (v->relay_running)
		worker_resume(&v->relay);
	for (int p = 0; p < v->running; p++) {
		for (int r = 0; r < RINGS; r++) {
			struct vhost_vring_state s = { .index = (unsigned)r,
						       .num = v->base[2 * p + r] };

			if (!ring_ioctl(v, p, VHOST_SET_VRING_BASE, &s, "VHOST_SET_VRING_BASE"))
				set_backend(v, p, r, v->tap_fd[p]);
		}
	}
	v->paused = false;
}

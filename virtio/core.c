/* The virtio state machine every transport shares: status, feature negotiation, queue registers, reset, start, notifies and interrupts, ioeventfds. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lkvm/kvm.h"
#include "lkvm/stats.h"
#include "lkvm/virtio.h"

/*
 * Threads and atomics. A virtio device is touched by three kinds of thread: vCPUs (the
 * transport's register handlers, always under vdev->lock), the device's own threads (the
 * queues; they never take vdev->lock, so a reset may stop them while holding it), and
 * readers of counters (stats, control socket). The rules:
 *  - features, status, isr and config_generation are C11 atomics (their types make every
 *    access atomic, so no plain access can creep in). features is written only here, under
 *    the lock, at FEATURES_OK and reset; device threads read it after DRIVER_OK started
 *    them (thread creation orders it), so relaxed loads suffice; counter readers may see
 *    an old value, never a torn one. status and isr are read-modify-written by both sides
 *    (NEEDS_RESET, ISR bits from device threads): sequentially consistent. Devices bump
 *    config_generation with release (virtio_config_changed) after changing their config,
 *    the transport reads it with acquire.
 *  - q[].irq_fd and config_irq_fd are retargeted by the transport under the lock (MSI-X
 *    vector changes) and read by device threads without it: release stores, acquire loads.
 *  - Everything else (selectors, driver_features, queue sizes and addresses, ioeventfd
 *    records) belongs to the lock; device threads read the queue set-up only after DRIVER_OK
 *    started them, and it does not change until a reset has stopped them.
 *  - q[].stats are relaxed counters: each written by one thread, read by anyone.
 */

int virtio_device_init(struct virtio_device *vdev, struct kvm *kvm, int nr_queues,
		       u16 queue_max_size)
{
	const struct virtio_dev_ops *ops = vdev->ops;

	if (!ops || nr_queues < 1 || nr_queues > VIRTIO_MAX_QUEUES || !queue_max_size ||
	    queue_max_size > VQ_MAX_SIZE || (queue_max_size & (queue_max_size - 1)))
		return -EINVAL;
	vdev->kvm = kvm;
	vdev->nr_queues = nr_queues;
	atomic_store(&vdev->features, 0);
	atomic_store(&vdev->config_generation, 0);
	vdev->dfselect = vdev->gfselect = vdev->queue_select = 0;
	vdev->driver_features = 0;
	vdev->config_irq_fd = -1;
	vdev->tops = NULL;
	vdev->transport = NULL;
	atomic_store(&vdev->status, 0);
	atomic_store(&vdev->isr, 0);
	atomic_store(&vdev->needs_reset_logged, false);
	memset(&vdev->log_rl, 0, sizeof(vdev->log_rl));
	vdev->host_features |= (ops->get_features ? ops->get_features(vdev) : 0) |
			       1ULL << VIRTIO_F_VERSION_1;
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++) {
		memset(&vdev->q[i], 0, sizeof(vdev->q[i]));
		vdev->q[i].kick_fd = vdev->q[i].irq_fd = -1;
		if (i < nr_queues)
			vdev->q[i].max_size = vdev->q[i].size = queue_max_size;
	}
	pthread_mutex_init(&vdev->lock, NULL);
	vdev->initialised = true;
	return 0;
}

void virtio_device_uninit(struct virtio_device *vdev)
{
	if (!vdev->initialised)
		return;
	pthread_mutex_destroy(&vdev->lock);
	vdev->initialised = false;
}

void virtio_device_exit(struct virtio_device *vdev)
{
	if (vdev->tops)
		vdev->tops->destroy(vdev); /* uninitialises too */
	else
		virtio_device_uninit(vdev);
}

const struct opt_choice virtio_trans_choices[VIRTIO_TRANS_NR + 1] = {
	[VIRTIO_TRANS_PCI] = { "pci", VIRTIO_TRANS_PCI },
	[VIRTIO_TRANS_MMIO] = { "mmio", VIRTIO_TRANS_MMIO },
};

const char *virtio_trans_name(enum virtio_trans t)
{
	return (unsigned)t < VIRTIO_TRANS_NR ? virtio_trans_choices[t].name : "?";
}

/* ---- transports: set-up and teardown ---- */

static void close_kick_fds(struct virtio_device *vdev)
{
	for (int i = 0; i < vdev->nr_queues; i++) {
		if (vdev->q[i].kick_fd >= 0)
			close(vdev->q[i].kick_fd);
		vdev->q[i].kick_fd = vdev->q[i].irq_fd = -1;
	}
	vdev->config_irq_fd = -1;
}

int virtio_transport_init(struct virtio_device *vdev, struct kvm *kvm, int nr_queues,
			  u16 queue_max_size, const struct virtio_transport_ops *tops,
			  void *transport)
{
	int ret = virtio_device_init(vdev, kvm, nr_queues, queue_max_size);

	if (ret < 0)
		return ret;
	/* Trap mode when there is no VM or KVM cannot do it; decided once, before the
	 * device threads exist. */
	if (!kvm_has_ioeventfd(kvm))
		vdev->use_ioeventfd = false;
	for (int i = 0; i < nr_queues; i++) {
		vdev->q[i].kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (vdev->q[i].kick_fd < 0) {
			ret = -errno;
			close_kick_fds(vdev);
			virtio_device_uninit(vdev);
			return ret;
		}
	}
	vdev->tops = tops;
	vdev->transport = transport;
	return 0;
}

static void ioevents_drop(struct virtio_device *vdev);

void virtio_transport_exit(struct virtio_device *vdev)
{
	if (vdev->ops->stop)
		vdev->ops->stop(vdev);
	pthread_mutex_lock(&vdev->lock);
	ioevents_drop(vdev);
	for (int i = 0; i < vdev->nr_queues; i++)
		vq_reset(&vdev->q[i].vq);
	if (vdev->tops && vdev->tops->release)
		vdev->tops->release(vdev);
	close_kick_fds(vdev);
	pthread_mutex_unlock(&vdev->lock);
	vdev->tops = NULL;
	vdev->transport = NULL;
	virtio_device_uninit(vdev);
}

/* ---- notifies: ioeventfds ---- */

static void ioevents_drop(struct virtio_device *vdev)
{
	for (int qi = 0; qi < vdev->nr_queues; qi++) {
		struct virtio_queue *q = &vdev->q[qi];

		for (int i = 0; i < q->nioev; i++)
			kvm_ioeventfd(vdev->kvm, &q->ioev[i], q->kick_fd, false);
		q->nioev = 0;
	}
}

/* At DRIVER_OK, for the enabled queues, where the transport says their notifies land now.
 * A failure only costs speed: that notify then traps and virtio_notify_trapped writes
 * kick_fd. */
static void ioevents_assign(struct virtio_device *vdev)
{
	if (!vdev->use_ioeventfd || !vdev->tops || !vdev->tops->doorbells)
		return;
	for (int qi = 0; qi < vdev->nr_queues; qi++) {
		struct virtio_queue *q = &vdev->q[qi];
		struct kvm_ioevent ev[VIRTIO_MAX_DOORBELLS];
		int n;

		if (!q->enabled)
			continue;
		n = vdev->tops->doorbells(vdev, qi, ev);
		for (int i = 0; i < n && i < VIRTIO_MAX_DOORBELLS; i++) {
			int ret = kvm_ioeventfd(vdev->kvm, &ev[i], q->kick_fd, true);

			if (ret == 0)
				q->ioev[q->nioev++] = ev[i];
			else
				pr_debug_rl(
					&vdev->log_rl,
					"virtio %s: KVM_IOEVENTFD queue %d at 0x%llx len %u: %s",
					vdev->tops->name, qi, (unsigned long long)ev[i].addr,
					ev[i].len, strerror(-ret));
		}
	}
}

void virtio_doorbells_moved(struct virtio_device *vdev)
{
	ioevents_drop(vdev);
	if (virtio_driver_ok(vdev))
		ioevents_assign(vdev);
}

/* ---- status: reset, FEATURES_OK, DRIVER_OK ---- */

bool virtio_driver_ok(struct virtio_device *vdev)
{
	return atomic_load(&vdev->status) & VIRTIO_CONFIG_S_DRIVER_OK;
}

void virtio_reset(struct virtio_device *vdev)
{
	/* Device threads take no transport lock, so stopping them under vdev->lock is
	 * safe; it also keeps other vCPUs out until the reset is complete. The ioeventfds go
	 * before the kick eventfds are drained, so no notify lands after the drain. */
	if (vdev->ops->stop)
		vdev->ops->stop(vdev);
	ioevents_drop(vdev);
	if (vdev->tops && vdev->tops->reset)
		vdev->tops->reset(vdev);
	for (int i = 0; i < vdev->nr_queues; i++) {
		struct virtio_queue *q = &vdev->q[i];

		vq_reset(&q->vq);
		eventfd_drain(q->kick_fd);
		q->size = q->max_size;
		q->enabled = false;
		q->desc = q->driver = q->device = 0;
	}
	vdev->dfselect = vdev->gfselect = vdev->queue_select = 0;
	vdev->driver_features = 0;
	atomic_store_explicit(&vdev->features, 0, memory_order_relaxed);
	atomic_store(&vdev->isr, 0);
	atomic_store(&vdev->needs_reset_logged, false);
	atomic_fetch_add_explicit(&vdev->config_generation, 1, memory_order_release);
	atomic_store(&vdev->status, 0);
}

void virtio_device_reset(struct virtio_device *vdev)
{
	if (!vdev->initialised)
		return;
	pthread_mutex_lock(&vdev->lock);
	virtio_reset(vdev);
	pthread_mutex_unlock(&vdev->lock);
}

static bool features_acceptable(struct virtio_device *vdev)
{
	u64 f = vdev->driver_features;

	if (f & ~vdev->host_features)
		return false;
	if (!(f & (1ULL << VIRTIO_F_VERSION_1)))
		return false;
	return !vdev->ops->features_ok || vdev->ops->features_ok(vdev, f);
}

/* DRIVER_OK: every enabled queue's ring, the ioeventfds, then the device's threads. */
static void device_start(struct virtio_device *vdev)
{
	bool event_idx = atomic_load_explicit(&vdev->features, memory_order_relaxed) &
			 (1ULL << VIRTIO_RING_F_EVENT_IDX);

	for (int i = 0; i < vdev->nr_queues; i++) {
		struct virtio_queue *q = &vdev->q[i];

		if (!q->enabled)
			continue;
		if (vq_init(&q->vq, &vdev->kvm->mem, q->size, q->desc, q->driver, q->device,
			    event_idx) < 0) {
			virtio_set_needs_reset(vdev, "queue size or ring address rejected");
			return;
		}
	}
	ioevents_assign(vdev);
	if (vdev->ops->start && vdev->ops->start(vdev) < 0)
		virtio_set_needs_reset(vdev, "device failed to start");
}

/* Bits are only ever added, except by writing 0 (reset). FEATURES_OK sticks only if the
 * negotiation is acceptable (the driver reads it back, §3.1.1); DRIVER_OK only after
 * FEATURES_OK. NEEDS_RESET is the device's to set. */
static void status_write(struct virtio_device *vdev, u32 val)
{
	u32 old = atomic_load(&vdev->status);
	u32 add = (val & 0xff) & ~old & ~(u32)VIRTIO_CONFIG_S_NEEDS_RESET;

	if (!val) {
		virtio_reset(vdev);
		return;
	}
	if (add & VIRTIO_CONFIG_S_FEATURES_OK) {
		if (features_acceptable(vdev))
			atomic_store_explicit(&vdev->features, vdev->driver_features,
					      memory_order_relaxed);
		else
			add &= ~(u32)VIRTIO_CONFIG_S_FEATURES_OK;
	}
	if ((add & VIRTIO_CONFIG_S_DRIVER_OK) && !((old | add) & VIRTIO_CONFIG_S_FEATURES_OK))
		add &= ~(u32)VIRTIO_CONFIG_S_DRIVER_OK;
	atomic_fetch_or(&vdev->status, add);
	if (add & VIRTIO_CONFIG_S_DRIVER_OK)
		device_start(vdev);
}

/* ---- the common registers ---- */

struct virtio_queue *virtio_selected_queue(struct virtio_device *vdev)
{
	return vdev->queue_select < (u32)vdev->nr_queues ? &vdev->q[vdev->queue_select] : NULL;
}

/* Queue set-up registers may change only before the queue is enabled and the device runs. */
static struct virtio_queue *setup_queue(struct virtio_device *vdev)
{
	struct virtio_queue *q = virtio_selected_queue(vdev);

	return q && !q->enabled && !virtio_driver_ok(vdev) ? q : NULL;
}

/* A 64-bit value as two 32-bit registers. */
static u32 half(u64 v, bool hi)
{
	return (u32)(hi ? v >> 32 : v);
}

static void set_half(u64 *v, bool hi, u32 val)
{
	*v = hi ? (*v & 0xffffffffULL) | (u64)val << 32 : (*v & ~0xffffffffULL) | val;
}

/* The ring address a VREG_QUEUE_{DESC,DRIVER,DEVICE}_{LO,HI} register holds. */
static u64 *queue_addr(struct virtio_queue *q, enum virtio_reg r)
{
	u64 *areas[] = { &q->desc, &q->driver, &q->device };

	return areas[(r - VREG_QUEUE_DESC_LO) / 2];
}

static bool is_queue_addr(enum virtio_reg r)
{
	return r >= VREG_QUEUE_DESC_LO && r <= VREG_QUEUE_DEVICE_HI;
}

u32 virtio_reg_read(struct virtio_device *vdev, enum virtio_reg r)
{
	struct virtio_queue *q = virtio_selected_queue(vdev);

	if (is_queue_addr(r))
		return q ? half(*queue_addr(q, r), (r - VREG_QUEUE_DESC_LO) & 1) : 0;
	switch (r) {
	case VREG_DEVICE_FEATURES_SEL:
		return vdev->dfselect;
	case VREG_DEVICE_FEATURES:
		return vdev->dfselect < 2 ? half(vdev->host_features, vdev->dfselect) : 0;
	case VREG_DRIVER_FEATURES_SEL:
		return vdev->gfselect;
	case VREG_DRIVER_FEATURES:
		return vdev->gfselect < 2 ? half(vdev->driver_features, vdev->gfselect) : 0;
	case VREG_NUM_QUEUES:
		return (u32)vdev->nr_queues;
	case VREG_STATUS:
		return atomic_load(&vdev->status) & 0xff;
	case VREG_CONFIG_GENERATION:
		return atomic_load_explicit(&vdev->config_generation, memory_order_acquire);
	case VREG_QUEUE_SEL:
		return vdev->queue_select;
	case VREG_QUEUE_SIZE_MAX:
		return q ? q->max_size : 0;
	case VREG_QUEUE_SIZE:
		return q ? q->size : 0;
	case VREG_QUEUE_ENABLE:
		return q ? q->enabled : 0;
	default:
		return 0;
	}
}

static void queue_write(struct virtio_device *vdev, enum virtio_reg r, u32 v)
{
	struct virtio_queue *q = setup_queue(vdev);

	if (!q)
		return;
	if (is_queue_addr(r))
		set_half(queue_addr(q, r), (r - VREG_QUEUE_DESC_LO) & 1, v);
	else if (r == VREG_QUEUE_SIZE && v && !(v & (v - 1)) && v <= q->max_size)
		q->size = (u16)v; /* split rings need a power of two; else the old size stays */
	else if (r == VREG_QUEUE_ENABLE && v == 1)
		q->enabled = true; /* 0 would need VIRTIO_F_RING_RESET, which we do not offer */
}

void virtio_reg_write(struct virtio_device *vdev, enum virtio_reg r, u32 v)
{
	switch (r) {
	case VREG_DEVICE_FEATURES_SEL:
		vdev->dfselect = v;
		break;
	case VREG_DRIVER_FEATURES_SEL:
		vdev->gfselect = v;
		break;
	case VREG_DRIVER_FEATURES:
		if (!(atomic_load(&vdev->status) & VIRTIO_CONFIG_S_FEATURES_OK) &&
		    vdev->gfselect < 2)
			set_half(&vdev->driver_features, vdev->gfselect, v);
		break;
	case VREG_STATUS:
		status_write(vdev, v);
		break;
	case VREG_QUEUE_SEL:
		vdev->queue_select = v;
		break;
	case VREG_QUEUE_SIZE:
	case VREG_QUEUE_ENABLE:
		queue_write(vdev, r, v);
		break;
	default:
		if (is_queue_addr(r))
			queue_write(vdev, r, v);
		break; /* read-only: ignored */
	}
}

void virtio_config_access(struct virtio_device *vdev, u32 off, u8 *data, u32 len, bool is_write)
{
	const struct virtio_dev_ops *ops = vdev->ops;

	if (!range_ok(off, len, ops->config_size))
		return;
	pthread_mutex_lock(&vdev->lock);
	if (is_write && ops->config_write)
		ops->config_write(vdev, off, data, len);
	else if (!is_write && ops->config_read)
		ops->config_read(vdev, off, data, len);
	pthread_mutex_unlock(&vdev->lock);
}

void virtio_notify_trapped(struct virtio_device *vdev, u32 qi)
{
	u64 one = 1;

	if (qi >= (u32)vdev->nr_queues)
		return;
	atomic_fetch_add_explicit(&vdev->q[qi].stats.trapped, 1, memory_order_relaxed);
	if (write(vdev->q[qi].kick_fd, &one, sizeof(one)) < 0)
		pr_debug_rl(&vdev->log_rl, "virtio: kick_fd write failed");
}

/* ---- interrupts, and a broken device (device threads) ---- */

static void signal_fd_or_intx(struct virtio_device *vdev, int fd, unsigned isr_bit)
{
	if (fd >= 0) {
		u64 one = 1;

		/* An eventfd write fails only when the counter would overflow, which the
		 * guest's interrupt handling drains long before. */
		if (write(fd, &one, sizeof(one)) < 0)
			pr_debug_rl(&vdev->log_rl, "virtio: irqfd write failed");
		return;
	}
	atomic_fetch_or(&vdev->isr, isr_bit);
	if (vdev->tops && vdev->tops->signal_isr)
		vdev->tops->signal_isr(vdev);
}

void virtio_notify_queue(struct virtio_device *vdev, int qi)
{
	struct virtio_queue *q = &vdev->q[qi];

	if (!vq_should_notify(&q->vq))
		return;
	virtio_raise_queue(vdev, qi);
}

void virtio_raise_queue(struct virtio_device *vdev, int qi)
{
	struct virtio_queue *q = &vdev->q[qi];

	atomic_fetch_add_explicit(&q->stats.irqs, 1, memory_order_relaxed);
	/* The transport retargets irq_fd (MSI-X vector changes) while this thread runs. */
	signal_fd_or_intx(vdev, __atomic_load_n(&q->irq_fd, __ATOMIC_ACQUIRE), 0x1);
}

void virtio_notify_config(struct virtio_device *vdev)
{
	signal_fd_or_intx(vdev, __atomic_load_n(&vdev->config_irq_fd, __ATOMIC_ACQUIRE), 0x2);
}

void virtio_config_changed(struct virtio_device *vdev)
{
	atomic_fetch_add_explicit(&vdev->config_generation, 1, memory_order_release);
	virtio_notify_config(vdev);
}

void virtio_set_needs_reset(struct virtio_device *vdev, const char *why)
{
	bool was = false;

	atomic_fetch_or(&vdev->status, VIRTIO_CONFIG_S_NEEDS_RESET);
	if (atomic_compare_exchange_strong(&vdev->needs_reset_logged, &was, true))
		pr_warn_rl(&vdev->log_rl, "virtio device %u: %s; device needs reset",
			   vdev->ops->device_id, why);
	/* Only when the driver is running does it look at the status on a config interrupt. */
	if (atomic_load(&vdev->status) & VIRTIO_CONFIG_S_DRIVER_OK)
		virtio_notify_config(vdev);
}

void virtio_queue_stats(struct virtio_device *vdev, int qi, struct stats_visitor *v,
			const char *group, const char *unit)
{
	struct virtio_queue_stats *s = &vdev->q[qi].stats;

	v->group(v, group);
	v->counter(v, "kicks", atomic_load_explicit(&s->kicks, memory_order_relaxed));
	v->counter(v, "trapped", atomic_load_explicit(&s->trapped, memory_order_relaxed));
	v->counter(v, "irqs", atomic_load_explicit(&s->irqs, memory_order_relaxed));
	v->counter(v, unit, atomic_load_explicit(&s->packets, memory_order_relaxed));
	v->counter(v, "bytes", atomic_load_explicit(&s->bytes, memory_order_relaxed));
}

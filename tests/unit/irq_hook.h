/* Unit tests: a stand-in transport whose queue interrupts call the test on the device thread (a driver's interrupt handler), and with it a driver that never lets a ring run dry. */
#ifndef LKVM_TEST_IRQ_HOOK_H
#define LKVM_TEST_IRQ_HOOK_H

#include <unistd.h>

#include "lkvm/virtio.h"
#include "vdriver.h"

static struct {
	void (*fn)(void *arg);
	void *arg;
} irq_hook;

static void irq_hook_isr(struct virtio_device *vdev)
{
	irq_hook.fn(irq_hook.arg);
}

/* What a transport does at destroy: the device stopped, then uninitialised. */
static void irq_hook_destroy(struct virtio_device *vdev)
{
	vdev->ops->stop(vdev);
	virtio_device_uninit(vdev);
}

static const struct virtio_transport_ops irq_hook_tops = {
	.name = "irq-hook",
	.signal_isr = irq_hook_isr,
	.destroy = irq_hook_destroy,
};

/* From the next start on, queue qi's interrupts run fn(arg) on the thread that raised them,
 * synchronously (virtio_notify_queue without an irqfd falls back to tops->signal_isr). The
 * queue's irq eventfd is closed and set to -1. Call while the device is stopped. */
static inline void irq_hook_set(struct virtio_device *vdev, int qi, void (*fn)(void *), void *arg)
{
	irq_hook.fn = fn;
	irq_hook.arg = arg;
	if (vdev->q[qi].irq_fd >= 0)
		close(vdev->q[qi].irq_fd);
	vdev->q[qi].irq_fd = -1;
	vdev->tops = &irq_hook_tops;
}

/* The endless driver: each interrupt of queue qi makes the chain at head available again at
 * once (on d, the driver's side of that queue), so the device always finds one more. */
static struct {
	struct vd_queue *d;
	u16 head;
	int served; /* interrupts so far */
} endless;

static void endless_repost(void *arg)
{
	vd_publish(endless.d, endless.head);
	__atomic_add_fetch(&endless.served, 1, __ATOMIC_RELAXED);
}

/* Arm it for the chain the test posts next at head (with the device stopped: it starts with
 * the next ops->start). */
static inline void endless_set(struct virtio_device *vdev, int qi, struct vd_queue *d, u16 head)
{
	endless.d = d;
	endless.head = head;
	endless.served = 0;
	irq_hook_set(vdev, qi, endless_repost, NULL);
}

static inline int endless_served(void)
{
	return __atomic_load_n(&endless.served, __ATOMIC_RELAXED);
}

#endif

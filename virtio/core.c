/* Transport-independent virtio helpers: interrupting the guest and marking a device broken. */
#include <stdio.h>
#include <unistd.h>

#include "lkvm/virtio.h"

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
	if (vdev->intx_notify)
		vdev->intx_notify(vdev);
}

void virtio_notify_queue(struct virtio_device *vdev, int qi)
{
	struct virtio_queue *q = &vdev->q[qi];

	if (!vq_should_notify(&q->vq))
		return;
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
	__atomic_fetch_add(&vdev->config_generation, 1, __ATOMIC_RELEASE);
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

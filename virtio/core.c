/* Transport-independent virtio helpers: device state set-up, attaching a transport, interrupting the guest, marking a device broken. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/virtio-mmio.h"
#include "lkvm/virtio-pci.h"
#include "lkvm/virtio.h"

int virtio_device_init(struct virtio_device *vdev, struct kvm *kvm, int nr_queues,
		       u16 queue_max_size)
{
	const struct virtio_dev_ops *ops = vdev->ops;

	if (!ops || nr_queues < 1 || nr_queues > VIRTIO_MAX_QUEUES || !queue_max_size ||
	    queue_max_size > VQ_MAX_SIZE || (queue_max_size & (queue_max_size - 1)))
		return -EINVAL;
	vdev->kvm = kvm;
	vdev->nr_queues = nr_queues;
	vdev->features = 0;
	vdev->config_generation = 0;
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

int virtio_device_attach(struct kvm *kvm, struct virtio_device *vdev, enum virtio_trans t,
			 int nr_queues, u16 queue_max_size)
{
	switch (t) {
	case VIRTIO_TRANS_PCI:
		return virtio_pci_init(kvm, vdev, nr_queues, queue_max_size);
	case VIRTIO_TRANS_MMIO:
		return virtio_mmio_init(kvm, vdev, nr_queues, queue_max_size);
	default:
		return -EOPNOTSUPP;
	}
}

void virtio_device_exit(struct virtio_device *vdev)
{
	if (vdev->tops)
		vdev->tops->destroy(vdev); /* uninitialises too */
	else
		virtio_device_uninit(vdev);
}

static const char *const trans_names[VIRTIO_TRANS_NR] = {
	[VIRTIO_TRANS_PCI] = "pci",
	[VIRTIO_TRANS_MMIO] = "mmio",
};

const char *virtio_trans_name(enum virtio_trans t)
{
	return (unsigned)t < VIRTIO_TRANS_NR ? trans_names[t] : "?";
}

int virtio_trans_parse(const char *s, enum virtio_trans *t)
{
	for (int i = 0; i < VIRTIO_TRANS_NR; i++) {
		if (!strcmp(s, trans_names[i])) {
			*t = (enum virtio_trans)i;
			return 0;
		}
	}
	return -EINVAL;
}

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

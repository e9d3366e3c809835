/* Placing a virtio device on its transport: the one place that names both transports, above them, so that neither the devices nor the core (which the transports drive) do. */
#include <errno.h>

#include "lkvm/virtio-mmio.h"
#include "lkvm/virtio-pci.h"
#include "lkvm/virtio.h"

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

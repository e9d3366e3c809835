/* The modern virtio-pci transport: how a virtio_device is put on the PCI bus. */
#ifndef LKVM_VIRTIO_PCI_H
#define LKVM_VIRTIO_PCI_H

#include "lkvm/virtio.h"

/* Modern virtio-pci transport (device id 0x1040 + id, vendor 0x1af4): common, notify,
 * ISR, device and pci-cfg capabilities in one memory BAR, MSI-X table and PBA in
 * another; one KVM_IOEVENTFD per queue on its notify address (unless use_ioeventfd is
 * false: then the notify write traps and the handler writes kick_fd on the vCPU
 * thread); MSI-X vectors routed with KVM_SET_GSI_ROUTING, one KVM_IRQFD per vector;
 * INTx through the queue's PCI pin when MSI-X is off. Returns 0 or -errno.
 * Before calling: vdev->ops, vdev->priv, vdev->use_ioeventfd (and host_features, if
 * any beyond ops->get_features) are set. The call runs virtio_device_init (so the lock
 * is initialised on success and uninitialised on failure), creates every queue's
 * kick_fd, sets tops, transport and config_irq_fd, and clears use_ioeventfd when
 * there is no VM or KVM lacks KVM_CAP_IOEVENTFD. ops->config_size is at most 4096.
 * The device is on the bus, so reachable by the guest, when this returns.
 * Guest resets call ops->stop on a vCPU thread with vdev->lock held (device threads
 * must never take it); the transport then resets the queues. */
int virtio_pci_init(struct kvm *kvm, struct virtio_device *vdev, int nr_queues,
		    u16 queue_max_size) __must_check;
/* Unplugs the device, calls ops->stop, drops ioeventfds/irqfds/routes, closes kick_fd
 * and the vector eventfds, uninitialises vdev. No-op twice. */
void virtio_pci_destroy(struct virtio_device *vdev);
/* Whether the driver enabled MSI-X (for tests and stats). */
bool virtio_pci_msix_enabled(struct virtio_device *vdev);

#endif

/* Which transport a virtio device is attached to: the one enum the VM's configuration shares with the virtio layer. */
#ifndef LKVM_VIRTIO_TRANS_H
#define LKVM_VIRTIO_TRANS_H

/* Which transport a device is attached to (-n/-d trans=, --virtio-transport). */
enum virtio_trans { VIRTIO_TRANS_PCI, VIRTIO_TRANS_MMIO, VIRTIO_TRANS_NR };

#endif

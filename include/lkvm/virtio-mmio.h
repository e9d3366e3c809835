/* The virtio-mmio transport (version 2, virtio 1.2 §4.2): fixed register windows below the PCI hole, one edge IRQ each. */
#ifndef LKVM_VIRTIO_MMIO_H
#define LKVM_VIRTIO_MMIO_H

#include "lkvm/virtio.h"

struct kvm;

/* Where the windows go: slot i at VIRTIO_MMIO_BASE + i * VIRTIO_MMIO_SIZE, inside the
 * PCI hole (RAM ends at 3 GiB) and below the PCI BAR window; interrupt: the i-th free
 * ISA IRQ (edge, active high in the MP table), so Linux needs no extra routing. */
#define VIRTIO_MMIO_BASE 0xC0000000ULL
#define VIRTIO_MMIO_SIZE 0x200
#define VIRTIO_MMIO_MAX_DEVS 9
#define VIRTIO_MMIO_IRQS                       \
	{                                      \
		5, 6, 7, 9, 10, 11, 12, 14, 15 \
	}
#define VIRTIO_MMIO_CONFIG 0x100 /* device configuration space starts here */

/* Put vdev on the next free slot (as virtio_pci_init does for PCI: virtio_transport_init,
 * then the window on kvm->mmio, which is the slot table). Notifies: from DRIVER_OK one
 * KVM_IOEVENTFD per enabled queue on QueueNotify with the queue index as datamatch (unless
 * use_ioeventfd is false or KVM lacks it: then the write traps and the handler writes
 * kick_fd). Interrupts: InterruptStatus bits, then an eventfd bound with KVM_IRQFD to the
 * slot's IRQ (KVM_IRQ_LINE pulses without irqfd). The window's range on the bus carries the
 * slot's device tree node (io_bus_set_fdt_node). 0 or -errno (-ENOSPC: all slots taken). */
int virtio_mmio_init(struct kvm *kvm, struct virtio_device *vdev, int nr_queues,
		     u16 queue_max_size) __must_check;
/* Unregister (which frees the slot), stop the device, drop ioeventfds and the irqfd,
 * uninitialise vdev. No-op twice. */
void virtio_mmio_destroy(struct virtio_device *vdev);

/* A slot in use, for the command line (the device tree takes each slot's node from the MMIO
 * bus: io_bus_fdt_nodes). */
struct virtio_mmio_slot {
	int slot;
	u64 addr;
	u32 size, irq;
	u16 device_id;
};
/* The slots in use, in slot order, into out (VIRTIO_MMIO_MAX_DEVS entries); how many. */
int virtio_mmio_slots(struct kvm *kvm, struct virtio_mmio_slot *out);

/* Append " virtio_mmio.device=SIZE@ADDR:IRQ" for every slot in use to buf (length
 * len, NUL-terminated). 0 or -E2BIG. */
int virtio_mmio_cmdline(struct kvm *kvm, char *buf, size_t len) __must_check;

#endif

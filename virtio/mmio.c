/* virtio-mmio version 2 transport (virtio 1.2 §4.2.2): its register window mapped onto virtio/core.c, a slot with one edge IRQ through an irqfd. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <linux/virtio_mmio.h>
#include <libfdt.h>

#include "lkvm/fdt.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"
#include "lkvm/virtio-mmio.h"

#define VM_MAGIC 0x74726976 /* "virt" */
#define VM_VERSION 2
#define VM_VENDOR 0x4d564b4c /* "LKVM" */

_Static_assert(VIRTIO_MMIO_CONFIG + 4096 >= VIRTIO_MMIO_SIZE, "config fits the window");

struct virtio_mmio {
	struct virtio_device *vdev;
	struct kvm *kvm;
	int slot;
	u64 base;
	u32 irq;
	int irq_efd;	  /* signalled after InterruptStatus bits were set */
	bool irqfd_bound; /* irq_efd is a KVM_IRQFD on irq */
};

/* ---- Interrupts ---- */

/* Device threads (via core.c), after setting InterruptStatus bits. The IRQ is edge
 * triggered: each signal is one pulse, and the driver acknowledges the bits it saw, so
 * a bit set while its handler runs brings a new pulse. */
static void vm_signal(struct virtio_device *vdev)
{
	struct virtio_mmio *vm = vdev->transport;
	u64 one = 1;

	if (vm->irqfd_bound || vm->kvm->vm_fd < 0) {
		if (write(vm->irq_efd, &one, sizeof(one)) < 0)
			pr_debug("virtio-mmio: irq eventfd write failed");
		return;
	}
	if (kvm_irq_line(vm->kvm, vm->irq, 1) < 0 || kvm_irq_line(vm->kvm, vm->irq, 0) < 0)
		pr_debug("virtio-mmio: KVM_IRQ_LINE failed");
}

/* The window never moves: every queue's notify is a 4-byte write of its index to
 * QueueNotify. */
static int vm_doorbells(struct virtio_device *vdev, int qi, struct kvm_ioevent *out)
{
	struct virtio_mmio *vm = vdev->transport;

	out[0] = (struct kvm_ioevent){
		.addr = vm->base + VIRTIO_MMIO_QUEUE_NOTIFY,
		.len = 4,
		.match = true,
		.data = (u64)qi,
	};
	return 1;
}

/* ---- Registers (vdev->lock held) ---- */

enum { ID_MAGIC, ID_VERSION, ID_DEVICE, ID_VENDOR };

static u32 rd_ident(struct virtio_mmio *vm, u8 which)
{
	const u32 ids[] = { VM_MAGIC, VM_VERSION, vm->vdev->ops->device_id, VM_VENDOR };

	return ids[which];
}

static u32 rd_isr(struct virtio_mmio *vm, u8 a)
{
	return atomic_load(&vm->vdev->isr);
}

static void wr_ack(struct virtio_mmio *vm, u8 a, u32 v)
{
	atomic_fetch_and(&vm->vdev->isr, ~v);
}

/* A register: the accesses that go to core register arg, else read and write handlers
 * (NULL: reads 0, or writes ignored). */
struct vm_reg {
	u8 core; /* VREG_READ | VREG_WRITE */
	u8 arg;
	u32 (*read)(struct virtio_mmio *vm, u8 arg);
	void (*write)(struct virtio_mmio *vm, u8 arg, u32 v);
};

#define CORE_RO(r)                       \
	{                                \
		VREG_READ, r, NULL, NULL \
	}
#define CORE_WO(r)                        \
	{                                 \
		VREG_WRITE, r, NULL, NULL \
	}
#define CORE_RW(r)                                    \
	{                                             \
		VREG_READ | VREG_WRITE, r, NULL, NULL \
	}

/* Indexed by offset / 4; QueueNotify is handled before (without the lock). */
static const struct vm_reg regs[VIRTIO_MMIO_CONFIG / 4] = {
	[VIRTIO_MMIO_MAGIC_VALUE / 4] = { 0, ID_MAGIC, rd_ident, NULL },
	[VIRTIO_MMIO_VERSION / 4] = { 0, ID_VERSION, rd_ident, NULL },
	[VIRTIO_MMIO_DEVICE_ID / 4] = { 0, ID_DEVICE, rd_ident, NULL },
	[VIRTIO_MMIO_VENDOR_ID / 4] = { 0, ID_VENDOR, rd_ident, NULL },
	[VIRTIO_MMIO_DEVICE_FEATURES / 4] = CORE_RO(VREG_DEVICE_FEATURES),
	[VIRTIO_MMIO_DEVICE_FEATURES_SEL / 4] = CORE_WO(VREG_DEVICE_FEATURES_SEL),
	[VIRTIO_MMIO_DRIVER_FEATURES / 4] = CORE_WO(VREG_DRIVER_FEATURES),
	[VIRTIO_MMIO_DRIVER_FEATURES_SEL / 4] = CORE_WO(VREG_DRIVER_FEATURES_SEL),
	[VIRTIO_MMIO_QUEUE_SEL / 4] = CORE_WO(VREG_QUEUE_SEL),
	[VIRTIO_MMIO_QUEUE_NUM_MAX / 4] = CORE_RO(VREG_QUEUE_SIZE_MAX),
	[VIRTIO_MMIO_QUEUE_NUM / 4] = CORE_WO(VREG_QUEUE_SIZE),
	[VIRTIO_MMIO_QUEUE_READY / 4] = CORE_RW(VREG_QUEUE_ENABLE),
	[VIRTIO_MMIO_INTERRUPT_STATUS / 4] = { 0, 0, rd_isr, NULL },
	[VIRTIO_MMIO_INTERRUPT_ACK / 4] = { 0, 0, NULL, wr_ack },
	[VIRTIO_MMIO_STATUS / 4] = CORE_RW(VREG_STATUS),
	[VIRTIO_MMIO_QUEUE_DESC_LOW / 4] = CORE_RW(VREG_QUEUE_DESC_LO),
	[VIRTIO_MMIO_QUEUE_DESC_HIGH / 4] = CORE_RW(VREG_QUEUE_DESC_HI),
	[VIRTIO_MMIO_QUEUE_AVAIL_LOW / 4] = CORE_RW(VREG_QUEUE_DRIVER_LO),
	[VIRTIO_MMIO_QUEUE_AVAIL_HIGH / 4] = CORE_RW(VREG_QUEUE_DRIVER_HI),
	[VIRTIO_MMIO_QUEUE_USED_LOW / 4] = CORE_RW(VREG_QUEUE_DEVICE_LO),
	[VIRTIO_MMIO_QUEUE_USED_HIGH / 4] = CORE_RW(VREG_QUEUE_DEVICE_HI),
	[VIRTIO_MMIO_CONFIG_GENERATION / 4] = CORE_RO(VREG_CONFIG_GENERATION),
};

/* Registers take aligned 32-bit accesses only (§4.2.2.2); the config space any width.
 * Everything else reads 0 and is ignored on write. */
static void vm_io(struct kvm_cpu *vcpu, u64 addr, u8 *data, u32 len, bool is_write, void *opaque)
{
	struct virtio_mmio *vm = opaque;
	struct virtio_device *vdev = vm->vdev;
	u32 off = (u32)(addr - vm->base);
	const struct vm_reg *r;

	if (!is_write)
		memset(data, 0, len);
	if (off >= VIRTIO_MMIO_CONFIG) {
		virtio_config_access(vdev, off - VIRTIO_MMIO_CONFIG, data, len, is_write);
		return;
	}
	if (len != 4 || off % 4)
		return;
	if (is_write && off == VIRTIO_MMIO_QUEUE_NOTIFY) {
		virtio_notify_trapped(vdev, le_load(data, 4)); /* no lock: kick_fd and stats only */
		return;
	}
	r = &regs[off / 4];
	pthread_mutex_lock(&vdev->lock);
	if (is_write && (r->core & VREG_WRITE))
		virtio_reg_write(vdev, r->arg, le_load(data, 4));
	else if (is_write && r->write)
		r->write(vm, r->arg, le_load(data, 4));
	else if (!is_write && (r->core & VREG_READ))
		le_store(data, 4, virtio_reg_read(vdev, r->arg));
	else if (!is_write && r->read)
		le_store(data, 4, r->read(vm, r->arg));
	pthread_mutex_unlock(&vdev->lock);
}

/* ---- Setup ---- */

static void vm_release(struct virtio_device *vdev)
{
	struct virtio_mmio *vm = vdev->transport;

	if (vm->irqfd_bound)
		kvm_irqfd(vm->kvm, vm->irq_efd, vm->irq, false);
	vm->irqfd_bound = false;
	if (vm->irq_efd >= 0)
		close(vm->irq_efd);
	vm->irq_efd = -1;
}

static u64 slot_base(int slot)
{
	return VIRTIO_MMIO_BASE + (u64)slot * VIRTIO_MMIO_SIZE;
}

/* The transport in slot i, or NULL when the slot is free. */
static struct virtio_mmio *slot_of(struct kvm *kvm, int i)
{
	return io_bus_owner(&kvm->mmio, slot_base(i), vm_io);
}

int virtio_mmio_slots(struct kvm *kvm, struct virtio_mmio_slot *out)
{
	int n = 0;

	for (int i = 0; i < VIRTIO_MMIO_MAX_DEVS; i++) {
		struct virtio_mmio *vm = slot_of(kvm, i);

		if (vm)
			out[n++] =
				(struct virtio_mmio_slot){ .slot = i,
							   .addr = vm->base,
							   .size = VIRTIO_MMIO_SIZE,
							   .irq = vm->irq,
							   .device_id = vm->vdev->ops->device_id };
	}
	return n;
}

/* The slot's node in the device tree, which the tree's builder (x86/fdt.c) takes from the MMIO
 * bus: the window, its IRQ, and DMA that needs no cache maintenance. 0 or a libfdt error. */
static int vm_fdt_node(void *fdt, void *opaque)
{
	struct virtio_mmio *vm = opaque;
	char name[32];
	int r;

	snprintf(name, sizeof(name), "virtio_mmio@%llx", (unsigned long long)vm->base);
	if ((r = fdt_begin_node(fdt, name)) < 0 ||
	    (r = fdt_property_string(fdt, "compatible", "virtio,mmio")) < 0 ||
	    (r = fdt_prop_reg(fdt, vm->base, VIRTIO_MMIO_SIZE)) < 0 ||
	    (r = fdt_prop_irq(fdt, vm->irq)) < 0 ||
	    (r = fdt_property(fdt, "dma-coherent", NULL, 0)) < 0)
		return r;
	return fdt_end_node(fdt);
}

/* ---- Snapshot: the window's place (its registers are the core's, its ISR included) ---- */

struct vm_snap {
	u64 base;
	u32 irq, slot;
};
_Static_assert(sizeof(struct vm_snap) == 16, "vm_snap has a hole");

static void vm_save(struct virtio_device *vdev, struct snap_rec_buf *b)
{
	struct virtio_mmio *vm = vdev->transport;
	struct vm_snap s = { .base = vm->base, .irq = vm->irq, .slot = (u32)vm->slot };

	snap_rec_put(b, VIRTIO_SNAP_TAG_TRANSPORT, &s, sizeof(s));
}

/* The same slot, so the guest's device tree and command line still name this window. The
 * irqfd was bound at init and the IRQ is an edge: nothing else to re-arm. */
static int vm_load(struct virtio_device *vdev, const void *sec, size_t len, char *err,
		   size_t errlen)
{
	struct virtio_mmio *vm = vdev->transport;
	struct vm_snap s;
	int ret = virtio_snap_get(sec, len, VIRTIO_SNAP_TAG_TRANSPORT, &s, sizeof(s), "virtio-mmio",
				  err, errlen);

	if (ret == 0 && (s.base != vm->base || s.irq != vm->irq || s.slot != (u32)vm->slot)) {
		errfmt(err, errlen, "virtio-mmio slot %d at 0x%llx, the snapshot's %u at 0x%llx",
		       vm->slot, (unsigned long long)vm->base, s.slot, (unsigned long long)s.base);
		ret = -EINVAL;
	}
	return ret;
}

static const struct virtio_transport_ops vm_tops = {
	.name = "mmio",
	.signal_isr = vm_signal,
	.doorbells = vm_doorbells,
	.release = vm_release,
	.destroy = virtio_mmio_destroy,
	.save = vm_save,
	.load = vm_load,
};

/* The slot's interrupt: an eventfd, bound with KVM_IRQFD where there is a VM. */
static int irq_setup(struct virtio_mmio *vm)
{
	int ret;

	vm->irq_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (vm->irq_efd < 0)
		return -errno;
	if (vm->kvm->vm_fd < 0)
		return 0;
	ret = kvm_irqfd(vm->kvm, vm->irq_efd, vm->irq, true);
	if (ret == 0)
		vm->irqfd_bound = true;
	else
		pr_debug("virtio-mmio %d: KVM_IRQFD on IRQ %u: %s (using KVM_IRQ_LINE)", vm->slot,
			 vm->irq, strerror(-ret));
	return 0;
}

int virtio_mmio_init(struct kvm *kvm, struct virtio_device *vdev, int nr_queues, u16 queue_max_size)
{
	static const u8 irqs[VIRTIO_MMIO_MAX_DEVS] = VIRTIO_MMIO_IRQS;
	struct virtio_mmio *vm;
	int slot = -1, ret;

	if (!kvm || !vdev->ops || vdev->ops->config_size > VIRTIO_MMIO_SIZE - VIRTIO_MMIO_CONFIG)
		return -EINVAL;
	/* The MMIO bus is the slot table: a slot is taken while its window is registered. */
	for (int i = 0; i < VIRTIO_MMIO_MAX_DEVS && slot < 0; i++)
		if (!slot_of(kvm, i))
			slot = i;
	if (slot < 0)
		return -ENOSPC;
	vm = calloc(1, sizeof(*vm));
	if (!vm)
		return -ENOMEM;
	*vm = (struct virtio_mmio){
		.vdev = vdev,
		.kvm = kvm,
		.slot = slot,
		.irq = irqs[slot],
		.irq_efd = -1,
		.base = slot_base(slot),
	};
	ret = virtio_transport_init(vdev, kvm, nr_queues, queue_max_size, &vm_tops, vm);
	if (ret < 0) {
		free(vm);
		return ret;
	}
	ret = irq_setup(vm);
	if (!ret)
		ret = io_bus_register(&kvm->mmio, vm->base, VIRTIO_MMIO_SIZE, vm_io, vm,
				      "virtio-mmio");
	/* The slot describes itself in the device tree (x86/fdt.c walks the bus). */
	if (!ret && (ret = io_bus_set_fdt_node(&kvm->mmio, vm->base, vm_fdt_node)) < 0)
		io_bus_unregister(&kvm->mmio, vm->base);
	if (ret < 0) {
		virtio_transport_exit(vdev);
		free(vm);
	}
	return ret;
}

void virtio_mmio_destroy(struct virtio_device *vdev)
{
	struct virtio_mmio *vm = vdev->transport;

	if (!vm)
		return;
	io_bus_unregister(&vm->kvm->mmio, vm->base);
	virtio_transport_exit(vdev);
	free(vm);
}

int virtio_mmio_cmdline(struct kvm *kvm, char *buf, size_t len)
{
	struct virtio_mmio_slot slots[VIRTIO_MMIO_MAX_DEVS];
	size_t at = strnlen(buf, len);
	int nr = virtio_mmio_slots(kvm, slots);

	if (at >= len)
		return -E2BIG;
	for (int i = 0; i < nr; i++) {
		int n = snprintf(buf + at, len - at, " virtio_mmio.device=0x%x@0x%llx:%u",
				 slots[i].size, (unsigned long long)slots[i].addr, slots[i].irq);

		if (n < 0 || (size_t)n >= len - at)
			return -E2BIG;
		at += (size_t)n;
	}
	return 0;
}

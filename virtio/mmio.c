/* virtio-mmio version 2 transport (virtio 1.2 §4.2.2): registers, status, queues, ioeventfd notifies, irqfd interrupts. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <linux/virtio_mmio.h>

#include "lkvm/kvm.h"
#include "lkvm/virtio-mmio.h"

#define VM_MAGIC 0x74726976 /* "virt" */
#define VM_VERSION 2
#define VM_VENDOR 0x4d564b4c /* "LKVM" */

_Static_assert(VIRTIO_MMIO_MAX_DEVS == ARRAY_SIZE(((struct kvm *)0)->virtio_mmio),
	       "kvm->virtio_mmio holds every slot");
_Static_assert(VIRTIO_MMIO_CONFIG + 4096 >= VIRTIO_MMIO_SIZE, "config fits the window");

struct virtio_mmio {
	struct virtio_device *vdev;
	struct kvm *kvm;
	int slot;
	u64 base;
	u32 irq;
	int irq_efd;       /* signalled after InterruptStatus bits were set */
	bool irqfd_bound;  /* irq_efd is a KVM_IRQFD on irq */
	/* Guarded by vdev->lock. */
	u32 dfsel, gfsel, qsel;
	u64 guest_features;
	bool ioev[VIRTIO_MAX_QUEUES]; /* KVM_IOEVENTFD assigned for this queue */
};

static bool has_vm(const struct virtio_mmio *vm)
{
	return vm->kvm->vm_fd >= 0;
}

static bool driver_ok(const struct virtio_device *vdev)
{
	return atomic_load(&vdev->status) & VIRTIO_CONFIG_S_DRIVER_OK;
}

static void drain_fd(int fd)
{
	u64 v;

	if (fd >= 0 && read(fd, &v, sizeof(v)) < 0)
		return; /* EAGAIN: nothing pending */
}

/* ---- Interrupts ---- */

/* Device threads (via core.c), after setting InterruptStatus bits. The IRQ is edge
 * triggered: each signal is one pulse, and the driver acknowledges the bits it saw, so
 * a bit set while its handler runs brings a new pulse. */
static void vm_signal(struct virtio_device *vdev)
{
	struct virtio_mmio *vm = vdev->transport;
	u64 one = 1;

	if (vm->irqfd_bound || !has_vm(vm)) {
		if (write(vm->irq_efd, &one, sizeof(one)) < 0)
			pr_debug("virtio-mmio: irq eventfd write failed");
		return;
	}
	if (kvm_irq_line(vm->kvm, vm->irq, 1) < 0 || kvm_irq_line(vm->kvm, vm->irq, 0) < 0)
		pr_debug("virtio-mmio: KVM_IRQ_LINE failed");
}

/* ---- Notifications ---- */

static int ioeventfd(struct virtio_mmio *vm, int qi, bool assign)
{
	struct kvm_ioevent ev = {
		.addr = vm->base + VIRTIO_MMIO_QUEUE_NOTIFY, .len = 4, .match = true, .data = (u64)qi,
	};

	return kvm_ioeventfd(vm->kvm, &ev, vm->vdev->q[qi].kick_fd, assign);
}

/* The window never moves, so the ioeventfds are assigned once, for every queue. A
 * failure only costs speed: that queue's notify then traps. */
static void ioevents_assign(struct virtio_mmio *vm)
{
	struct virtio_device *vdev = vm->vdev;

	if (!vdev->use_ioeventfd)
		return;
	for (int qi = 0; qi < vdev->nr_queues; qi++) {
		int ret = ioeventfd(vm, qi, true);

		vm->ioev[qi] = ret == 0;
		if (ret < 0)
			pr_debug("virtio-mmio %d: KVM_IOEVENTFD queue %d: %s", vm->slot, qi, strerror(-ret));
	}
}

static void ioevents_drop(struct virtio_mmio *vm)
{
	for (int qi = 0; qi < vm->vdev->nr_queues; qi++) {
		if (vm->ioev[qi])
			ioeventfd(vm, qi, false);
		vm->ioev[qi] = false;
	}
}

/* A notify that reached us (trap mode, or a queue whose ioeventfd failed): counted in
 * `trapped`; the device thread counts `kicks` from kick_fd, which this write feeds. */
static void notify(struct virtio_mmio *vm, u32 qi)
{
	struct virtio_device *vdev = vm->vdev;
	u64 one = 1;

	if (qi >= (u32)vdev->nr_queues)
		return;
	atomic_fetch_add_explicit(&vdev->q[qi].stats.trapped, 1, memory_order_relaxed);
	if (write(vdev->q[qi].kick_fd, &one, sizeof(one)) < 0)
		pr_debug("virtio-mmio: kick_fd write failed");
}

/* ---- Status ---- */

static void vm_reset(struct virtio_mmio *vm)
{
	struct virtio_device *vdev = vm->vdev;

	/* Device threads take no transport lock: stopping them under vdev->lock is safe. */
	if (vdev->ops->stop)
		vdev->ops->stop(vdev);
	for (int i = 0; i < vdev->nr_queues; i++) {
		struct virtio_queue *q = &vdev->q[i];

		vq_reset(&q->vq);
		drain_fd(q->kick_fd);
		q->size = q->max_size;
		q->enabled = false;
		q->desc = q->driver = q->device = 0;
	}
	vm->dfsel = vm->gfsel = vm->qsel = 0;
	vm->guest_features = 0;
	vdev->features = 0;
	atomic_store(&vdev->isr, 0);
	atomic_store(&vdev->needs_reset_logged, false);
	vdev->config_generation++;
	atomic_store(&vdev->status, 0);
}

static bool features_acceptable(struct virtio_mmio *vm)
{
	struct virtio_device *vdev = vm->vdev;
	u64 f = vm->guest_features;

	if (f & ~vdev->host_features)
		return false;
	if (!(f & (1ULL << VIRTIO_F_VERSION_1)))
		return false;
	return !vdev->ops->features_ok || vdev->ops->features_ok(vdev, f);
}

static void vm_start(struct virtio_mmio *vm)
{
	struct virtio_device *vdev = vm->vdev;
	bool event_idx = vdev->features & (1ULL << VIRTIO_RING_F_EVENT_IDX);

	for (int i = 0; i < vdev->nr_queues; i++) {
		struct virtio_queue *q = &vdev->q[i];

		if (!q->enabled)
			continue;
		if (vq_init(&q->vq, &vm->kvm->mem, q->size, q->desc, q->driver, q->device,
			    event_idx) < 0) {
			virtio_set_needs_reset(vdev, "queue size or ring address rejected");
			return;
		}
	}
	if (vdev->ops->start && vdev->ops->start(vdev) < 0)
		virtio_set_needs_reset(vdev, "device failed to start");
}

/* As on PCI: bits only added except by 0 (reset); FEATURES_OK sticks only when the
 * negotiation is acceptable; DRIVER_OK only after FEATURES_OK. */
static void status_write(struct virtio_mmio *vm, u32 val)
{
	struct virtio_device *vdev = vm->vdev;
	u32 old = atomic_load(&vdev->status);
	u32 add = (val & 0xff) & ~old & ~(u32)VIRTIO_CONFIG_S_NEEDS_RESET;

	if (!val) {
		vm_reset(vm);
		return;
	}
	if (add & VIRTIO_CONFIG_S_FEATURES_OK) {
		if (features_acceptable(vm))
			vdev->features = vm->guest_features;
		else
			add &= ~(u32)VIRTIO_CONFIG_S_FEATURES_OK;
	}
	if ((add & VIRTIO_CONFIG_S_DRIVER_OK) && !((old | add) & VIRTIO_CONFIG_S_FEATURES_OK))
		add &= ~(u32)VIRTIO_CONFIG_S_DRIVER_OK;
	atomic_fetch_or(&vdev->status, add);
	if (add & VIRTIO_CONFIG_S_DRIVER_OK)
		vm_start(vm);
}

/* ---- Registers (vdev->lock held) ---- */

static struct virtio_queue *selq(struct virtio_mmio *vm)
{
	return vm->qsel < (u32)vm->vdev->nr_queues ? &vm->vdev->q[vm->qsel] : NULL;
}

/* Queue setup registers change only while the queue is not ready and the device not running. */
static struct virtio_queue *selq_setup(struct virtio_mmio *vm)
{
	struct virtio_queue *q = selq(vm);

	return q && !q->enabled && !driver_ok(vm->vdev) ? q : NULL;
}

static void set_half(u64 *v, bool hi, u32 val)
{
	*v = hi ? (*v & 0xffffffffULL) | (u64)val << 32 : (*v & ~0xffffffffULL) | val;
}

static u32 reg_read(struct virtio_mmio *vm, u32 off)
{
	struct virtio_device *vdev = vm->vdev;
	struct virtio_queue *q = selq(vm);

	switch (off) {
	case VIRTIO_MMIO_MAGIC_VALUE:
		return VM_MAGIC;
	case VIRTIO_MMIO_VERSION:
		return VM_VERSION;
	case VIRTIO_MMIO_DEVICE_ID:
		return vdev->ops->device_id;
	case VIRTIO_MMIO_VENDOR_ID:
		return VM_VENDOR;
	case VIRTIO_MMIO_DEVICE_FEATURES:
		return vm->dfsel < 2 ? (u32)(vdev->host_features >> (32 * vm->dfsel)) : 0;
	case VIRTIO_MMIO_QUEUE_NUM_MAX:
		return q ? q->max_size : 0;
	case VIRTIO_MMIO_QUEUE_READY:
		return q ? q->enabled : 0;
	case VIRTIO_MMIO_INTERRUPT_STATUS:
		return atomic_load(&vdev->isr);
	case VIRTIO_MMIO_STATUS:
		return atomic_load(&vdev->status) & 0xff;
	case VIRTIO_MMIO_QUEUE_DESC_LOW:
		return q ? (u32)q->desc : 0;
	case VIRTIO_MMIO_QUEUE_DESC_HIGH:
		return q ? (u32)(q->desc >> 32) : 0;
	case VIRTIO_MMIO_QUEUE_AVAIL_LOW:
		return q ? (u32)q->driver : 0;
	case VIRTIO_MMIO_QUEUE_AVAIL_HIGH:
		return q ? (u32)(q->driver >> 32) : 0;
	case VIRTIO_MMIO_QUEUE_USED_LOW:
		return q ? (u32)q->device : 0;
	case VIRTIO_MMIO_QUEUE_USED_HIGH:
		return q ? (u32)(q->device >> 32) : 0;
	case VIRTIO_MMIO_CONFIG_GENERATION:
		return vdev->config_generation;
	default:
		return 0; /* write-only or unknown registers read as 0 */
	}
}

static void reg_write(struct virtio_mmio *vm, u32 off, u32 v)
{
	struct virtio_device *vdev = vm->vdev;
	struct virtio_queue *q;

	switch (off) {
	case VIRTIO_MMIO_DEVICE_FEATURES_SEL:
		vm->dfsel = v;
		break;
	case VIRTIO_MMIO_DRIVER_FEATURES:
		if (!(atomic_load(&vdev->status) & VIRTIO_CONFIG_S_FEATURES_OK) && vm->gfsel < 2)
			set_half(&vm->guest_features, vm->gfsel, v);
		break;
	case VIRTIO_MMIO_DRIVER_FEATURES_SEL:
		vm->gfsel = v;
		break;
	case VIRTIO_MMIO_QUEUE_SEL:
		vm->qsel = v;
		break;
	case VIRTIO_MMIO_QUEUE_NUM:
		q = selq_setup(vm);
		/* Split rings need a power of two; anything else keeps the old size. */
		if (q && v && !(v & (v - 1)) && v <= q->max_size)
			q->size = (u16)v;
		break;
	case VIRTIO_MMIO_QUEUE_READY:
		/* 0 would need VIRTIO_F_RING_RESET, which we do not offer. */
		q = selq_setup(vm);
		if (q && v == 1)
			q->enabled = true;
		break;
	case VIRTIO_MMIO_INTERRUPT_ACK:
		atomic_fetch_and(&vdev->isr, ~v);
		break;
	case VIRTIO_MMIO_STATUS:
		status_write(vm, v);
		break;
	case VIRTIO_MMIO_QUEUE_DESC_LOW:
	case VIRTIO_MMIO_QUEUE_DESC_HIGH:
		if ((q = selq_setup(vm)))
			set_half(&q->desc, off == VIRTIO_MMIO_QUEUE_DESC_HIGH, v);
		break;
	case VIRTIO_MMIO_QUEUE_AVAIL_LOW:
	case VIRTIO_MMIO_QUEUE_AVAIL_HIGH:
		if ((q = selq_setup(vm)))
			set_half(&q->driver, off == VIRTIO_MMIO_QUEUE_AVAIL_HIGH, v);
		break;
	case VIRTIO_MMIO_QUEUE_USED_LOW:
	case VIRTIO_MMIO_QUEUE_USED_HIGH:
		if ((q = selq_setup(vm)))
			set_half(&q->device, off == VIRTIO_MMIO_QUEUE_USED_HIGH, v);
		break;
	default:
		break; /* read-only or unknown: ignored */
	}
}

static u32 le_get(const u8 *p, u32 len)
{
	u32 v = 0;

	for (u32 i = 0; i < len && i < 4; i++)
		v |= (u32)p[i] << (8 * i);
	return v;
}

static void le_put(u8 *p, u32 len, u32 v)
{
	for (u32 i = 0; i < len && i < 4; i++)
		p[i] = (u8)(v >> (8 * i));
}

/* Registers take aligned 32-bit accesses only (§4.2.2.2); the config space any width.
 * Everything else reads 0 and is ignored on write. */
static void vm_io(struct kvm_cpu *vcpu, u64 addr, u8 *data, u32 len, bool is_write, void *opaque)
{
	struct virtio_mmio *vm = opaque;
	struct virtio_device *vdev = vm->vdev;
	u32 off = (u32)(addr - vm->base);

	if (!is_write)
		memset(data, 0, len);
	if (off >= VIRTIO_MMIO_CONFIG) {
		u32 coff = off - VIRTIO_MMIO_CONFIG;

		if (!range_ok(coff, len, vdev->ops->config_size))
			return;
		pthread_mutex_lock(&vdev->lock);
		if (is_write && vdev->ops->config_write)
			vdev->ops->config_write(vdev, coff, data, len);
		else if (!is_write && vdev->ops->config_read)
			vdev->ops->config_read(vdev, coff, data, len);
		pthread_mutex_unlock(&vdev->lock);
		return;
	}
	if (len != 4 || off % 4)
		return;
	if (is_write && off == VIRTIO_MMIO_QUEUE_NOTIFY) {
		notify(vm, le_get(data, 4)); /* no lock: kick_fd and stats only */
		return;
	}
	pthread_mutex_lock(&vdev->lock);
	if (is_write)
		reg_write(vm, off, le_get(data, 4));
	else
		le_put(data, 4, reg_read(vm, off));
	pthread_mutex_unlock(&vdev->lock);
}

/* ---- Setup ---- */

static const struct virtio_transport_ops vm_tops = {
	.name = "mmio",
	.signal_isr = vm_signal,
	.destroy = virtio_mmio_destroy,
};

static int irqfd(struct virtio_mmio *vm, bool assign)
{
	return kvm_irqfd(vm->kvm, vm->irq_efd, vm->irq, assign);
}

static void release(struct virtio_mmio *vm)
{
	struct virtio_device *vdev = vm->vdev;

	ioevents_drop(vm);
	if (vm->irqfd_bound)
		irqfd(vm, false);
	vm->irqfd_bound = false;
	if (vm->irq_efd >= 0)
		close(vm->irq_efd);
	vm->irq_efd = -1;
	for (int i = 0; i < vdev->nr_queues; i++) {
		if (vdev->q[i].kick_fd >= 0)
			close(vdev->q[i].kick_fd);
		vdev->q[i].kick_fd = -1;
	}
	if (vm->slot >= 0)
		vm->kvm->virtio_mmio[vm->slot].used = false;
}

int virtio_mmio_init(struct kvm *kvm, struct virtio_device *vdev, int nr_queues, u16 queue_max_size)
{
	static const u8 irqs[VIRTIO_MMIO_MAX_DEVS] = VIRTIO_MMIO_IRQS;
	struct virtio_mmio *vm;
	int slot = -1, ret;

	if (!kvm || !vdev->ops || vdev->ops->config_size > VIRTIO_MMIO_SIZE - VIRTIO_MMIO_CONFIG)
		return -EINVAL;
	for (int i = 0; i < VIRTIO_MMIO_MAX_DEVS && slot < 0; i++)
		if (!kvm->virtio_mmio[i].used)
			slot = i;
	if (slot < 0)
		return -ENOSPC;
	ret = virtio_device_init(vdev, kvm, nr_queues, queue_max_size);
	if (ret < 0)
		return ret;
	vm = calloc(1, sizeof(*vm));
	if (!vm) {
		virtio_device_uninit(vdev);
		return -ENOMEM;
	}
	vm->vdev = vdev;
	vm->kvm = kvm;
	vm->slot = slot;
	vm->base = VIRTIO_MMIO_BASE + (u64)slot * VIRTIO_MMIO_SIZE;
	vm->irq = irqs[slot];
	vm->irq_efd = -1;
	vdev->transport = vm;
	vdev->tops = &vm_tops;
	kvm->virtio_mmio[slot] = (struct kvm_mmio_slot){
		.addr = vm->base, .size = VIRTIO_MMIO_SIZE, .irq = vm->irq,
		.device_id = vdev->ops->device_id, .used = true,
	};
	if (!kvm_has_ioeventfd(kvm))
		vdev->use_ioeventfd = false;

	for (int i = 0; i < nr_queues; i++) {
		vdev->q[i].kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (vdev->q[i].kick_fd < 0) {
			ret = -errno;
			goto fail;
		}
	}
	vm->irq_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (vm->irq_efd < 0) {
		ret = -errno;
		goto fail;
	}
	if (has_vm(vm)) {
		ret = irqfd(vm, true);
		if (ret == 0)
			vm->irqfd_bound = true;
		else
			pr_debug("virtio-mmio %d: KVM_IRQFD on IRQ %u: %s (using KVM_IRQ_LINE)", slot,
				 vm->irq, strerror(-ret));
	}
	ioevents_assign(vm);
	ret = io_bus_register(&kvm->mmio, vm->base, VIRTIO_MMIO_SIZE, vm_io, vm, "virtio-mmio");
	if (ret < 0)
		goto fail;
	return 0;

fail:
	release(vm);
	vdev->transport = NULL;
	vdev->tops = NULL;
	virtio_device_uninit(vdev);
	free(vm);
	return ret;
}

void virtio_mmio_destroy(struct virtio_device *vdev)
{
	struct virtio_mmio *vm = vdev->transport;

	if (!vm)
		return;
	io_bus_unregister(&vm->kvm->mmio, vm->base);
	if (vdev->ops->stop)
		vdev->ops->stop(vdev);
	pthread_mutex_lock(&vdev->lock);
	for (int i = 0; i < vdev->nr_queues; i++)
		vq_reset(&vdev->q[i].vq);
	release(vm);
	pthread_mutex_unlock(&vdev->lock);
	vdev->transport = NULL;
	vdev->tops = NULL;
	virtio_device_uninit(vdev);
	free(vm);
}

int virtio_mmio_cmdline(struct kvm *kvm, char *buf, size_t len)
{
	size_t at = strnlen(buf, len);

	if (at >= len)
		return -E2BIG;
	for (int i = 0; i < VIRTIO_MMIO_MAX_DEVS; i++) {
		const struct kvm_mmio_slot *s = &kvm->virtio_mmio[i];
		int n;

		if (!s->used)
			continue;
		n = snprintf(buf + at, len - at, " virtio_mmio.device=0x%x@0x%llx:%u", s->size,
			     (unsigned long long)s->addr, s->irq);
		if (n < 0 || (size_t)n >= len - at)
			return -E2BIG;
		at += (size_t)n;
	}
	return 0;
}

/* Modern virtio-pci transport (virtio 1.2 §4.1): capabilities, common config, notify, ISR, MSI-X with irqfd/ioeventfd. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <linux/virtio_pci.h>

#include "lkvm/boot.h"
#include "lkvm/kvm.h"
#include "lkvm/pci.h"
#include "lkvm/virtio-pci.h"

#define VP_VENDOR 0x1af4
#define VP_DEVICE_BASE 0x1040
#define VP_REVISION 1

/*
 * BAR 0: four 4 KiB regions, one per virtio structure. The notify region gives each
 * queue its own 4-byte address (multiplier 4, queue_notify_off = queue index), so one
 * KVM_IOEVENTFD per queue needs no datamatch.
 * BAR 2: MSI-X table at 0, PBA at 0x800.
 */
#define VP_BAR_REGS 0
#define VP_BAR_MSIX 2
#define VP_REGION_SHIFT 12
#define VP_REGION_SIZE (1u << VP_REGION_SHIFT)
enum vp_region { VP_COMMON, VP_ISR, VP_DEVICE, VP_NOTIFY, VP_NR_REGIONS };
#define VP_BAR0_SIZE (VP_NR_REGIONS * VP_REGION_SIZE)
#define VP_NOTIFY_MULT 4
/* The common config we implement: up to queue_device_hi (no NOTIFICATION_DATA or
 * RING_RESET, whose fields follow). */
#define VP_COMMON_LEN (VIRTIO_PCI_COMMON_Q_USEDHI + 4)

#define VP_MSIX_TABLE 0x000
#define VP_MSIX_PBA 0x800
#define VP_BAR2_SIZE 0x1000
#define VP_MAX_VECTORS (VIRTIO_MAX_QUEUES + 1)
#define MSIX_ENTRY_SIZE 16
#define MSIX_ENTRY_MASKED 0x1

/* Capabilities in configuration space, dword-aligned so the pci-cfg data field and
 * every 32-bit cap field can be reached with one access. */
#define CAP_ID_VNDR 0x09
#define CAP_ID_MSIX 0x11
#define CAP_COMMON 0x40
#define CAP_NOTIFY 0x50
#define CAP_ISR 0x64
#define CAP_DEVICE 0x74
#define CAP_PCICFG 0x84
#define CAP_MSIX 0x98
#define PCICFG_BAR (CAP_PCICFG + offsetof(struct virtio_pci_cap, bar))
#define PCICFG_OFFSET (CAP_PCICFG + offsetof(struct virtio_pci_cap, offset))
#define PCICFG_LENGTH (CAP_PCICFG + offsetof(struct virtio_pci_cap, length))
#define PCICFG_DATA (CAP_PCICFG + offsetof(struct virtio_pci_cfg_cap, pci_cfg_data))
#define MSIX_CTRL (CAP_MSIX + 2)
#define MSIX_CTRL_ENABLE 0x8000
#define MSIX_CTRL_MASKALL 0x4000

_Static_assert(CAP_NOTIFY - CAP_COMMON >= sizeof(struct virtio_pci_cap), "caps overlap");
_Static_assert(CAP_ISR - CAP_NOTIFY >= sizeof(struct virtio_pci_notify_cap), "caps overlap");
_Static_assert(CAP_PCICFG - CAP_DEVICE >= sizeof(struct virtio_pci_cap), "caps overlap");
_Static_assert(CAP_MSIX - CAP_PCICFG >= sizeof(struct virtio_pci_cfg_cap), "caps overlap");
_Static_assert(PCICFG_DATA % 4 == 0, "pci-cfg data must be one dword");
_Static_assert(VP_MSIX_PBA >= VP_MAX_VECTORS * MSIX_ENTRY_SIZE, "MSI-X table overlaps PBA");
_Static_assert(VP_MAX_VECTORS * VP_NOTIFY_MULT <= VP_REGION_SIZE, "notify region too small");

/* One MSI-X vector: the guest's table entry and what it is bound to in KVM. */
struct vp_vector {
	u32 addr_lo, addr_hi, data, ctrl;
	int efd;          /* the device signals this; KVM_IRQFD-bound while unmasked */
	int gsi;          /* -1 without a VM */
	bool irqfd_bound;
	bool routed;      /* r_addr/r_data are in the VM's routing table */
	u64 r_addr;
	u32 r_data;
};

struct virtio_pci {
	struct pci_device pci;
	struct virtio_device *vdev;
	struct kvm *kvm;
	/* Everything below is guarded by vdev->lock. */
	u32 dfselect, gfselect;
	u64 guest_features; /* driver_feature as written, checked at FEATURES_OK */
	u16 msix_config;
	u16 queue_select;
	u16 qvec[VIRTIO_MAX_QUEUES]; /* each queue's MSI-X vector */
	bool msix_enabled;          /* also read by device threads (atomic loads) */
	int nvec;
	bool func_mask;
	struct vp_vector vec[VP_MAX_VECTORS];
	u32 intx_gsi;
	/* KVM_IOEVENTFDs currently assigned: bit 0 len 2, bit 1 len 4, per queue; all at
	 * notify addresses inside BAR 0 at ioev_base. */
	u8 ioev_lens[VIRTIO_MAX_QUEUES];
	u64 ioev_base;      /* also read unlocked by the trapped-notify check */
	bool warned_route;
	struct ratelimit log_rl; /* guest-triggerable messages */
};

static const u32 ioev_len[] = { 2, 4 }; /* iowrite16 (Linux) and iowrite32 (others) */

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

static bool has_vm(const struct virtio_pci *vp)
{
	return vp->kvm->vm_fd >= 0;
}

static bool driver_ok(const struct virtio_device *vdev)
{
	return atomic_load(&vdev->status) & VIRTIO_CONFIG_S_DRIVER_OK;
}

static void drain_fd(int fd)
{
	u64 v;

	/* EAGAIN just means nothing was pending. */
	if (fd >= 0 && read(fd, &v, sizeof(v)) < 0)
		return;
}

/* ---- Interrupts: MSI-X vectors, INTx ---- */

static bool vec_active(const struct virtio_pci *vp, const struct vp_vector *e)
{
	return vp->msix_enabled && !vp->func_mask && !(e->ctrl & MSIX_ENTRY_MASKED);
}

static int irqfd(struct virtio_pci *vp, struct vp_vector *e, bool assign)
{
	return kvm_irqfd(vp->kvm, e->efd, (u32)e->gsi, assign);
}

/*
 * Bring vector v's KVM side in line with its table entry. Unmasked: route the GSI to
 * the entry's message and bind the eventfd to it. Masked: unbind, so the device's
 * signals stay counted in the eventfd (that count is the PBA pending bit); binding
 * again makes KVM poll the eventfd and deliver what was pending.
 */
static void vec_update(struct virtio_pci *vp, int v)
{
	struct vp_vector *e = &vp->vec[v];
	u64 addr = (u64)e->addr_hi << 32 | e->addr_lo;
	int ret;

	if (!has_vm(vp))
		return;
	if (!vec_active(vp, e)) {
		if (e->irqfd_bound && irqfd(vp, e, false) == 0)
			e->irqfd_bound = false;
		return;
	}
	if (!e->routed || e->r_addr != addr || e->r_data != e->data) {
		ret = kvm_gsi_route_msi(vp->kvm, e->gsi, addr, e->data);
		if (ret < 0) {
			if (!vp->warned_route)
				pr_warn("virtio-pci %02x: MSI route for vector %d: %s", vp->pci.slot,
					v, strerror(-ret));
			vp->warned_route = true;
			return;
		}
		e->routed = true;
		e->r_addr = addr;
		e->r_data = e->data;
	}
	if (!e->irqfd_bound) {
		/* KVM injects a count found at assignment but leaves it in the eventfd, where
		 * it would later read as pending again. Take it out and signal once more
		 * after binding: the wake-up path both injects and drains. */
		u64 pending = 0, one = 1;
		bool had = read(e->efd, &pending, sizeof(pending)) == sizeof(pending) && pending;

		ret = irqfd(vp, e, true);
		if (ret == 0)
			e->irqfd_bound = true;
		else
			pr_warn_rl(&vp->log_rl, "virtio-pci %02x: KVM_IRQFD for vector %d: %s",
				   vp->pci.slot, v, strerror(-ret));
		if (had && write(e->efd, &one, sizeof(one)) < 0)
			pr_debug_rl(&vp->log_rl, "virtio-pci: eventfd write failed");
	}
}

static int vector_fd(const struct virtio_pci *vp, u16 v)
{
	return vp->msix_enabled && v < vp->nvec ? vp->vec[v].efd : -1;
}

/* Which eventfd each queue and the config change signal. Device threads read irq_fd
 * without a lock, hence the atomic stores. -1 means core.c's ISR + signal_isr path,
 * which does nothing while MSI-X is on (a queue without a vector gets no interrupt). */
static void update_irq_fds(struct virtio_pci *vp)
{
	struct virtio_device *vdev = vp->vdev;

	for (int i = 0; i < vdev->nr_queues; i++)
		__atomic_store_n(&vdev->q[i].irq_fd, vector_fd(vp, vp->qvec[i]),
				 __ATOMIC_RELEASE);
	__atomic_store_n(&vdev->config_irq_fd, vector_fd(vp, vp->msix_config), __ATOMIC_RELEASE);
}

static void intx_set(struct virtio_pci *vp, int level)
{
	if (has_vm(vp) && kvm_irq_line(vp->kvm, vp->intx_gsi, level) < 0)
		pr_debug_rl(&vp->log_rl, "virtio-pci %02x: KVM_IRQ_LINE failed", vp->pci.slot);
}

/* Device thread, after core.c set an ISR bit: the pin is level-triggered, it stays up
 * until the driver reads the ISR. With MSI-X on, INTx is not used. */
static void vp_intx_notify(struct virtio_device *vdev)
{
	struct virtio_pci *vp = vdev->transport;

	if (__atomic_load_n(&vp->msix_enabled, __ATOMIC_ACQUIRE))
		return;
	intx_set(vp, 1);
}

/* Reading the ISR acknowledges it: clear the bits, lower the line. A device thread that
 * sets a bit between the exchange and the lowering would lose its interrupt, so look
 * again afterwards and raise the line if so. */
static u8 isr_read(struct virtio_pci *vp)
{
	struct virtio_device *vdev = vp->vdev;
	u8 v = (u8)atomic_exchange(&vdev->isr, 0);

	intx_set(vp, 0);
	if (atomic_load(&vdev->isr) && !__atomic_load_n(&vp->msix_enabled, __ATOMIC_ACQUIRE))
		intx_set(vp, 1);
	return v;
}

/* ---- Notifications: ioeventfd ---- */

static u64 bar0_base(const struct virtio_pci *vp)
{
	return pci_bar_base(&vp->pci, VP_BAR_REGS);
}

static int ioeventfd(struct virtio_pci *vp, int qi, u64 base, u32 len, bool assign)
{
	struct kvm_ioevent ev = {
		.addr = base + VP_NOTIFY * VP_REGION_SIZE + (u64)qi * VP_NOTIFY_MULT,
		.len = len,
	};

	return kvm_ioeventfd(vp->kvm, &ev, vp->vdev->q[qi].kick_fd, assign);
}

static void ioevents_drop(struct virtio_pci *vp)
{
	for (int qi = 0; qi < vp->vdev->nr_queues; qi++) {
		for (size_t l = 0; l < ARRAY_SIZE(ioev_len); l++)
			if (vp->ioev_lens[qi] & (1u << l))
				ioeventfd(vp, qi, vp->ioev_base, ioev_len[l], false);
		vp->ioev_lens[qi] = 0;
	}
	__atomic_store_n(&vp->ioev_base, 0, __ATOMIC_RELAXED);
}

/* At DRIVER_OK, on BAR 0's current address (Linux programs BARs before drivers
 * probe). A failure only costs speed: that notify then traps and the BAR handler
 * writes kick_fd. */
static void ioevents_assign(struct virtio_pci *vp)
{
	struct virtio_device *vdev = vp->vdev;
	u64 base = bar0_base(vp);
	int ret;

	if (!vdev->use_ioeventfd || !has_vm(vp) || !base)
		return;
	__atomic_store_n(&vp->ioev_base, base, __ATOMIC_RELAXED);
	for (int qi = 0; qi < vdev->nr_queues; qi++) {
		if (!vdev->q[qi].enabled)
			continue;
		for (size_t l = 0; l < ARRAY_SIZE(ioev_len); l++) {
			ret = ioeventfd(vp, qi, base, ioev_len[l], true);
			if (ret == 0)
				vp->ioev_lens[qi] |= (u8)(1u << l);
			else
				pr_debug_rl(&vp->log_rl, "virtio-pci %02x: KVM_IOEVENTFD queue %d len %u: %s",
					    vp->pci.slot, qi, ioev_len[l], strerror(-ret));
		}
	}
}

/* The bus (un)mapped BAR 0, its lock held: the ioeventfds follow at once, so none is
 * ever left on an address the BAR no longer occupies (where another device may now be)
 * nor placed where its mapping failed (pci_bar_base is then 0). */
static void vp_bar_moved(struct pci_device *dev, int bar)
{
	struct virtio_pci *vp = dev->priv;
	struct virtio_device *vdev = vp->vdev;

	if (bar != VP_BAR_REGS)
		return;
	pthread_mutex_lock(&vdev->lock);
	ioevents_drop(vp);
	if (driver_ok(vdev))
		ioevents_assign(vp);
	pthread_mutex_unlock(&vdev->lock);
}

/* ---- Device status: reset, FEATURES_OK, DRIVER_OK ---- */

static void vp_reset(struct virtio_pci *vp)
{
	struct virtio_device *vdev = vp->vdev;

	/* Device threads take no transport lock, so stopping them under vdev->lock is
	 * safe; it also keeps other vCPUs out until the reset is complete. */
	if (vdev->ops->stop)
		vdev->ops->stop(vdev);
	ioevents_drop(vp);
	for (int i = 0; i < vdev->nr_queues; i++) {
		struct virtio_queue *q = &vdev->q[i];

		vq_reset(&q->vq);
		drain_fd(q->kick_fd);
		q->size = q->max_size;
		q->enabled = false;
		q->desc = q->driver = q->device = 0;
		vp->qvec[i] = VIRTIO_MSI_NO_VECTOR;
	}
	vp->msix_config = VIRTIO_MSI_NO_VECTOR;
	update_irq_fds(vp);
	/* Interrupts signalled before the reset are no longer pending. */
	for (int v = 0; v < vp->nvec; v++)
		if (!vp->vec[v].irqfd_bound)
			drain_fd(vp->vec[v].efd);
	vp->dfselect = vp->gfselect = 0;
	vp->guest_features = 0;
	vp->queue_select = 0;
	__atomic_store_n(&vdev->features, 0, __ATOMIC_RELAXED);
	atomic_store(&vdev->isr, 0);
	intx_set(vp, 0);
	atomic_store(&vdev->needs_reset_logged, false);
	__atomic_fetch_add(&vdev->config_generation, 1, __ATOMIC_RELAXED);
	atomic_store(&vdev->status, 0);
}

static bool features_acceptable(struct virtio_pci *vp)
{
	struct virtio_device *vdev = vp->vdev;
	u64 f = vp->guest_features;

	if (f & ~vdev->host_features)
		return false;
	if (!(f & (1ULL << VIRTIO_F_VERSION_1)))
		return false;
	return !vdev->ops->features_ok || vdev->ops->features_ok(vdev, f);
}

static void vp_start(struct virtio_pci *vp)
{
	struct virtio_device *vdev = vp->vdev;
	bool event_idx = vdev->features & (1ULL << VIRTIO_RING_F_EVENT_IDX);
	int ret;

	for (int i = 0; i < vdev->nr_queues; i++) {
		struct virtio_queue *q = &vdev->q[i];

		if (!q->enabled)
			continue;
		ret = vq_init(&q->vq, &vp->kvm->mem, q->size, q->desc, q->driver, q->device,
			      event_idx);
		if (ret < 0) {
			virtio_set_needs_reset(vdev, "queue size or ring address rejected");
			return;
		}
	}
	ioevents_assign(vp);
	if (vdev->ops->start) {
		ret = vdev->ops->start(vdev);
		if (ret < 0)
			virtio_set_needs_reset(vdev, "device failed to start");
	}
}

/* Bits are only ever added, except by writing 0 (reset). FEATURES_OK sticks only if
 * the negotiation is acceptable (the driver reads it back, §3.1.1); DRIVER_OK only
 * after FEATURES_OK. NEEDS_RESET is the device's to set. */
static void status_write(struct virtio_pci *vp, u8 val)
{
	struct virtio_device *vdev = vp->vdev;
	u32 old = atomic_load(&vdev->status);
	u32 add = val & ~old & ~(u32)VIRTIO_CONFIG_S_NEEDS_RESET;

	if (!val) {
		vp_reset(vp);
		return;
	}
	if (add & VIRTIO_CONFIG_S_FEATURES_OK) {
		if (features_acceptable(vp))
			__atomic_store_n(&vdev->features, vp->guest_features, __ATOMIC_RELAXED);
		else
			add &= ~(u32)VIRTIO_CONFIG_S_FEATURES_OK;
	}
	if ((add & VIRTIO_CONFIG_S_DRIVER_OK) && !((old | add) & VIRTIO_CONFIG_S_FEATURES_OK))
		add &= ~(u32)VIRTIO_CONFIG_S_DRIVER_OK;
	atomic_fetch_or(&vdev->status, add);
	if (add & VIRTIO_CONFIG_S_DRIVER_OK)
		vp_start(vp);
}

/* ---- Common configuration (struct virtio_pci_common_cfg), vdev->lock held ---- */

static struct virtio_queue *selq(struct virtio_pci *vp)
{
	return vp->queue_select < vp->vdev->nr_queues ? &vp->vdev->q[vp->queue_select] : NULL;
}

/* Queue setup registers may change only before the queue is enabled and the device runs. */
static struct virtio_queue *selq_setup(struct virtio_pci *vp)
{
	struct virtio_queue *q = selq(vp);

	return q && !q->enabled && !driver_ok(vp->vdev) ? q : NULL;
}

static u32 half(u64 v, u8 hi)
{
	return (u32)(hi ? v >> 32 : v);
}

static void set_half(u64 *v, u8 hi, u32 val)
{
	*v = hi ? (*v & 0xffffffffULL) | (u64)val << 32 : (*v & ~0xffffffffULL) | val;
}

static u16 vector_or_none(struct virtio_pci *vp, u32 v)
{
	return v < (u32)vp->nvec ? (u16)v : VIRTIO_MSI_NO_VECTOR;
}

static u32 rd_dfselect(struct virtio_pci *vp, u8 a) { return vp->dfselect; }
static void wr_dfselect(struct virtio_pci *vp, u8 a, u32 v) { vp->dfselect = v; }
static u32 rd_gfselect(struct virtio_pci *vp, u8 a) { return vp->gfselect; }
static void wr_gfselect(struct virtio_pci *vp, u8 a, u32 v) { vp->gfselect = v; }

static u32 rd_df(struct virtio_pci *vp, u8 a)
{
	return vp->dfselect < 2 ? half(vp->vdev->host_features, (u8)vp->dfselect) : 0;
}

static u32 rd_gf(struct virtio_pci *vp, u8 a)
{
	return vp->gfselect < 2 ? half(vp->guest_features, (u8)vp->gfselect) : 0;
}

static void wr_gf(struct virtio_pci *vp, u8 a, u32 v)
{
	if (atomic_load(&vp->vdev->status) & VIRTIO_CONFIG_S_FEATURES_OK)
		return;
	if (vp->gfselect < 2)
		set_half(&vp->guest_features, (u8)vp->gfselect, v);
}

static u32 rd_msix(struct virtio_pci *vp, u8 a) { return vp->msix_config; }

static void wr_msix(struct virtio_pci *vp, u8 a, u32 v)
{
	vp->msix_config = vector_or_none(vp, v);
	update_irq_fds(vp);
}

static u32 rd_numq(struct virtio_pci *vp, u8 a) { return (u32)vp->vdev->nr_queues; }
static u32 rd_status(struct virtio_pci *vp, u8 a) { return atomic_load(&vp->vdev->status) & 0xff; }
static void wr_status(struct virtio_pci *vp, u8 a, u32 v) { status_write(vp, (u8)v); }
static u32 rd_cfggen(struct virtio_pci *vp, u8 a)
{
	return __atomic_load_n(&vp->vdev->config_generation, __ATOMIC_ACQUIRE);
}
static u32 rd_qselect(struct virtio_pci *vp, u8 a) { return vp->queue_select; }
static void wr_qselect(struct virtio_pci *vp, u8 a, u32 v) { vp->queue_select = (u16)v; }

static u32 rd_qsize(struct virtio_pci *vp, u8 a)
{
	struct virtio_queue *q = selq(vp);

	return q ? q->size : 0;
}

static void wr_qsize(struct virtio_pci *vp, u8 a, u32 v)
{
	struct virtio_queue *q = selq_setup(vp);

	/* Split rings need a power of two; anything else keeps the old size. */
	if (q && v && !(v & (v - 1)) && v <= q->max_size)
		q->size = (u16)v;
}

static u32 rd_qmsix(struct virtio_pci *vp, u8 a)
{
	struct virtio_queue *q = selq(vp);

	return q ? vp->qvec[vp->queue_select] : 0;
}

static void wr_qmsix(struct virtio_pci *vp, u8 a, u32 v)
{
	struct virtio_queue *q = selq(vp);

	if (!q)
		return;
	vp->qvec[vp->queue_select] = vector_or_none(vp, v);
	update_irq_fds(vp);
}

static u32 rd_qenable(struct virtio_pci *vp, u8 a)
{
	struct virtio_queue *q = selq(vp);

	return q ? q->enabled : 0;
}

/* Writing 0 is forbidden without VIRTIO_F_RING_RESET, which we do not offer. */
static void wr_qenable(struct virtio_pci *vp, u8 a, u32 v)
{
	struct virtio_queue *q = selq_setup(vp);

	if (q && v == 1)
		q->enabled = true;
}

static u32 rd_qnoff(struct virtio_pci *vp, u8 a)
{
	struct virtio_queue *q = selq(vp);

	return q ? vp->queue_select : 0; /* queue_notify_off = queue index */
}

/* a: bit 0 high half, bits 1-2 which area (0 desc, 1 driver, 2 device). */
static u64 *qaddr(struct virtio_queue *q, u8 a)
{
	u64 *areas[] = { &q->desc, &q->driver, &q->device };

	return areas[(a >> 1) % 3];
}

static u32 rd_qaddr(struct virtio_pci *vp, u8 a)
{
	struct virtio_queue *q = selq(vp);

	return q ? half(*qaddr(q, a), a & 1) : 0;
}

static void wr_qaddr(struct virtio_pci *vp, u8 a, u32 v)
{
	struct virtio_queue *q = selq_setup(vp);

	if (q)
		set_half(qaddr(q, a), a & 1, v);
}

struct cc_reg {
	u8 width;
	u8 arg;
	u32 (*read)(struct virtio_pci *vp, u8 arg);
	void (*write)(struct virtio_pci *vp, u8 arg, u32 val); /* NULL: read-only */
};

/* Indexed by offset; a register is reached only with its own width at its own offset. */
static const struct cc_reg cc_regs[VP_COMMON_LEN] = {
	[VIRTIO_PCI_COMMON_DFSELECT] = { 4, 0, rd_dfselect, wr_dfselect },
	[VIRTIO_PCI_COMMON_DF] = { 4, 0, rd_df, NULL },
	[VIRTIO_PCI_COMMON_GFSELECT] = { 4, 0, rd_gfselect, wr_gfselect },
	[VIRTIO_PCI_COMMON_GF] = { 4, 0, rd_gf, wr_gf },
	[VIRTIO_PCI_COMMON_MSIX] = { 2, 0, rd_msix, wr_msix },
	[VIRTIO_PCI_COMMON_NUMQ] = { 2, 0, rd_numq, NULL },
	[VIRTIO_PCI_COMMON_STATUS] = { 1, 0, rd_status, wr_status },
	[VIRTIO_PCI_COMMON_CFGGENERATION] = { 1, 0, rd_cfggen, NULL },
	[VIRTIO_PCI_COMMON_Q_SELECT] = { 2, 0, rd_qselect, wr_qselect },
	[VIRTIO_PCI_COMMON_Q_SIZE] = { 2, 0, rd_qsize, wr_qsize },
	[VIRTIO_PCI_COMMON_Q_MSIX] = { 2, 0, rd_qmsix, wr_qmsix },
	[VIRTIO_PCI_COMMON_Q_ENABLE] = { 2, 0, rd_qenable, wr_qenable },
	[VIRTIO_PCI_COMMON_Q_NOFF] = { 2, 0, rd_qnoff, NULL },
	[VIRTIO_PCI_COMMON_Q_DESCLO] = { 4, 0, rd_qaddr, wr_qaddr },
	[VIRTIO_PCI_COMMON_Q_DESCHI] = { 4, 1, rd_qaddr, wr_qaddr },
	[VIRTIO_PCI_COMMON_Q_AVAILLO] = { 4, 2, rd_qaddr, wr_qaddr },
	[VIRTIO_PCI_COMMON_Q_AVAILHI] = { 4, 3, rd_qaddr, wr_qaddr },
	[VIRTIO_PCI_COMMON_Q_USEDLO] = { 4, 4, rd_qaddr, wr_qaddr },
	[VIRTIO_PCI_COMMON_Q_USEDHI] = { 4, 5, rd_qaddr, wr_qaddr },
};

/* ---- BAR 0 regions ---- */

static void common_io(struct virtio_pci *vp, u32 off, u8 *data, u32 len, bool is_write)
{
	const struct cc_reg *r = off < VP_COMMON_LEN ? &cc_regs[off] : NULL;

	if (!r || r->width != len)
		return; /* unknown register or wrong width: reads 0, writes ignored */
	pthread_mutex_lock(&vp->vdev->lock);
	if (!is_write)
		le_put(data, len, r->read(vp, r->arg));
	else if (r->write)
		r->write(vp, r->arg, le_get(data, len));
	pthread_mutex_unlock(&vp->vdev->lock);
}

static void isr_io(struct virtio_pci *vp, u32 off, u8 *data, u32 len, bool is_write)
{
	if (!is_write && off == 0 && len == 1)
		data[0] = isr_read(vp);
}

static void device_io(struct virtio_pci *vp, u32 off, u8 *data, u32 len, bool is_write)
{
	struct virtio_device *vdev = vp->vdev;

	if (!range_ok(off, len, vdev->ops->config_size))
		return;
	pthread_mutex_lock(&vdev->lock);
	if (is_write && vdev->ops->config_write)
		vdev->ops->config_write(vdev, off, data, len);
	else if (!is_write && vdev->ops->config_read)
		vdev->ops->config_read(vdev, off, data, len);
	pthread_mutex_unlock(&vdev->lock);
}

/* A notify that reached us: trap mode, a width the ioeventfds do not cover, or BAR 0
 * moved since DRIVER_OK. We count it in `trapped` only: the device thread counts
 * `kicks` from the values it reads on kick_fd, which include this write, so each
 * notify is counted once as a kick whichever way it came. */
static void notify_io(struct virtio_pci *vp, u32 off, u8 *data, u32 len, bool is_write)
{
	struct virtio_device *vdev = vp->vdev;
	u32 qi = off / VP_NOTIFY_MULT;
	struct virtio_queue *q;
	u64 one = 1;

	if (!is_write || off % VP_NOTIFY_MULT || len > VP_NOTIFY_MULT ||
	    qi >= (u32)vdev->nr_queues)
		return;
	q = &vdev->q[qi];
	atomic_fetch_add_explicit(&q->stats.trapped, 1, memory_order_relaxed);
	if (vdev->use_ioeventfd && driver_ok(vdev) && has_vm(vp) &&
		   bar0_base(vp) != __atomic_load_n(&vp->ioev_base, __ATOMIC_RELAXED)) {
		/* The guest moved BAR 0 while running: follow it. */
		pthread_mutex_lock(&vdev->lock);
		if (driver_ok(vdev) && bar0_base(vp) != vp->ioev_base) {
			ioevents_drop(vp);
			ioevents_assign(vp);
		}
		pthread_mutex_unlock(&vdev->lock);
	}
	if (write(q->kick_fd, &one, sizeof(one)) < 0)
		pr_debug_rl(&vp->log_rl, "virtio-pci: kick_fd write failed");
}

typedef void (*region_fn)(struct virtio_pci *vp, u32 off, u8 *data, u32 len, bool is_write);

static const region_fn regions[] = {
	[VP_COMMON] = common_io,
	[VP_ISR] = isr_io,
	[VP_DEVICE] = device_io,
	[VP_NOTIFY] = notify_io,
};
/* Unsized, so a region added at the end of enum vp_region without a handler fails here
 * (one left out in the middle is a NULL entry, which vp_bar0_io also refuses). */
_Static_assert(ARRAY_SIZE(regions) == VP_NR_REGIONS, "a BAR 0 region without handler");

static void vp_bar0_io(struct kvm_cpu *vcpu, u64 addr, u8 *data, u32 len, bool is_write,
		       void *opaque)
{
	u32 region = (u32)(addr >> VP_REGION_SHIFT), off = (u32)(addr & (VP_REGION_SIZE - 1));

	if (!is_write)
		memset(data, 0, len);
	if (region >= VP_NR_REGIONS || !regions[region] || len == 0 || len > 8 ||
	    off + len > VP_REGION_SIZE)
		return;
	regions[region](opaque, off, data, len, is_write);
}

/* ---- BAR 2: MSI-X table and PBA ---- */

/* Pending = masked with a signal counted in its eventfd. Peeking an eventfd means
 * reading it, so the count is written back. */
static bool vec_pending(struct virtio_pci *vp, int v)
{
	struct vp_vector *e = &vp->vec[v];
	u64 c = 0;

	if (vec_active(vp, e))
		return false; /* delivered as it comes (or, without a VM, not tracked) */
	if (read(e->efd, &c, sizeof(c)) != sizeof(c) || !c)
		return false;
	if (write(e->efd, &c, sizeof(c)) < 0)
		pr_debug_rl(&vp->log_rl, "virtio-pci: eventfd write-back failed");
	return true;
}

static u32 *table_field(struct vp_vector *e, u32 field)
{
	u32 *f[] = { &e->addr_lo, &e->addr_hi, &e->data, &e->ctrl };

	return f[field & 3];
}

static void msix_table_io(struct virtio_pci *vp, u32 off, u8 *data, u32 len, bool is_write)
{
	for (u32 done = 0; done < len; done += 4, off += 4) {
		u32 v = off / MSIX_ENTRY_SIZE, field = (off % MSIX_ENTRY_SIZE) / 4;
		struct vp_vector *e;

		if (v >= (u32)vp->nvec)
			continue;
		e = &vp->vec[v];
		if (!is_write) {
			le_put(data + done, 4, *table_field(e, field));
			continue;
		}
		/* Only the mask bit of vector control is writable. */
		*table_field(e, field) = field == 3 ? le_get(data + done, 4) & MSIX_ENTRY_MASKED
						    : le_get(data + done, 4);
		vec_update(vp, (int)v);
	}
}

static void msix_pba_io(struct virtio_pci *vp, u32 off, u8 *data, u32 len, bool is_write)
{
	if (is_write)
		return; /* read-only */
	for (u32 bit = 0; bit < len * 8; bit++) {
		u32 v = off * 8 + bit;

		if (v < (u32)vp->nvec && vec_pending(vp, (int)v))
			data[bit / 8] |= (u8)(1u << (bit % 8));
	}
}

/* DWORD or aligned QWORD accesses only (PCI spec for the MSI-X structures). */
static void vp_msix_io(struct kvm_cpu *vcpu, u64 addr, u8 *data, u32 len, bool is_write,
		       void *opaque)
{
	struct virtio_pci *vp = opaque;
	u32 off = (u32)addr;

	if (!is_write)
		memset(data, 0, len);
	if ((len != 4 && len != 8) || addr % len || addr >= VP_BAR2_SIZE)
		return;
	pthread_mutex_lock(&vp->vdev->lock);
	if (off < VP_MSIX_PBA)
		msix_table_io(vp, off - VP_MSIX_TABLE, data, len, is_write);
	else
		msix_pba_io(vp, off - VP_MSIX_PBA, data, len, is_write);
	pthread_mutex_unlock(&vp->vdev->lock);
}

/* ---- Configuration space hooks (bus lock held; order: bus lock, then vdev->lock) ---- */

static bool overlaps(u16 off, int len, u16 start, u16 size)
{
	return off < start + size && start < off + len;
}

/* The pci-cfg capability's window: cap.length bytes at cap.offset of cap.bar, moved
 * through pci_cfg_data. Checked like the guest's own MMIO: a BAR of ours, length 1, 2
 * or 4, aligned, inside the BAR. */
static bool window_access(struct virtio_pci *vp, u8 *buf, bool is_write)
{
	const u8 *cfg = vp->pci.cfg;
	u8 bar = cfg[PCICFG_BAR];
	u32 off = le_get(&cfg[PCICFG_OFFSET], 4), len = le_get(&cfg[PCICFG_LENGTH], 4);

	if ((len != 1 && len != 2 && len != 4) || off % len || bar >= PCI_NUM_BARS ||
	    !vp->pci.bar[bar].fn || !range_ok(off, len, vp->pci.bar[bar].size))
		return false;
	vp->pci.bar[bar].fn(NULL, off, buf, len, is_write, vp->pci.bar[bar].opaque);
	return true;
}

static bool vp_cfg_read(struct pci_device *dev, u16 off, int len, u32 *val)
{
	struct virtio_pci *vp = dev->priv;
	u8 buf[4] = { 0 };

	if (!overlaps(off, len, PCICFG_DATA, 4))
		return false;
	/* Accesses never cross a dword and the data field is one: off is inside it. */
	window_access(vp, buf, false);
	*val = le_get(buf + (off - PCICFG_DATA), (u32)len);
	return true;
}

static void msix_control_changed(struct virtio_pci *vp)
{
	struct virtio_device *vdev = vp->vdev;
	u16 ctrl = (u16)le_get(&vp->pci.cfg[MSIX_CTRL], 2);
	bool on = ctrl & MSIX_CTRL_ENABLE;

	pthread_mutex_lock(&vdev->lock);
	__atomic_store_n(&vp->msix_enabled, on, __ATOMIC_RELEASE);
	vp->func_mask = ctrl & MSIX_CTRL_MASKALL;
	for (int v = 0; v < vp->nvec; v++)
		vec_update(vp, v);
	update_irq_fds(vp);
	if (on)
		intx_set(vp, 0);
	pthread_mutex_unlock(&vdev->lock);
}

static void vp_cfg_write(struct pci_device *dev, u16 off, int len, u32 val)
{
	struct virtio_pci *vp = dev->priv;

	if (overlaps(off, len, MSIX_CTRL, 2))
		msix_control_changed(vp);
	if (overlaps(off, len, PCICFG_DATA, 4)) {
		u8 buf[4];

		/* The bus already stored the guest's bytes through wmask. */
		memcpy(buf, &dev->cfg[PCICFG_DATA], 4);
		window_access(vp, buf, true);
	}
}

/* ---- Setup ---- */

static void put_cap(u8 *cfg, u16 at, u16 next, u8 type, u32 offset, u32 length, u8 caplen)
{
	cfg[at + offsetof(struct virtio_pci_cap, cap_vndr)] = CAP_ID_VNDR;
	cfg[at + offsetof(struct virtio_pci_cap, cap_next)] = (u8)next;
	cfg[at + offsetof(struct virtio_pci_cap, cap_len)] = caplen;
	cfg[at + offsetof(struct virtio_pci_cap, cfg_type)] = type;
	cfg[at + offsetof(struct virtio_pci_cap, bar)] = VP_BAR_REGS;
	le_put(&cfg[at + offsetof(struct virtio_pci_cap, offset)], 4, offset);
	le_put(&cfg[at + offsetof(struct virtio_pci_cap, length)], 4, length);
}

static void build_config_space(struct virtio_pci *vp)
{
	struct pci_device *d = &vp->pci;
	const struct virtio_dev_ops *ops = vp->vdev->ops;
	u8 *cfg = d->cfg;
	bool has_dev = ops->config_size > 0;

	le_put(&cfg[PCI_VENDOR_ID], 2, VP_VENDOR);
	le_put(&cfg[PCI_DEVICE_ID], 2, VP_DEVICE_BASE + ops->device_id);
	le_put(&cfg[PCI_REVISION_ID], 4, (ops->class_code & 0xffffff) << 8 | VP_REVISION);
	le_put(&cfg[PCI_SUBSYSTEM_VENDOR_ID], 2, VP_VENDOR);
	le_put(&cfg[PCI_SUBSYSTEM_ID], 2, ops->subsys_id ? ops->subsys_id : ops->device_id);
	cfg[PCI_HEADER_TYPE] = 0;
	cfg[PCI_CAPABILITY_LIST] = CAP_COMMON;

	put_cap(cfg, CAP_COMMON, CAP_NOTIFY, VIRTIO_PCI_CAP_COMMON_CFG,
		VP_COMMON * VP_REGION_SIZE, VP_COMMON_LEN, sizeof(struct virtio_pci_cap));
	put_cap(cfg, CAP_NOTIFY, CAP_ISR, VIRTIO_PCI_CAP_NOTIFY_CFG, VP_NOTIFY * VP_REGION_SIZE,
		(u32)vp->vdev->nr_queues * VP_NOTIFY_MULT, sizeof(struct virtio_pci_notify_cap));
	le_put(&cfg[CAP_NOTIFY + offsetof(struct virtio_pci_notify_cap, notify_off_multiplier)],
	       4, VP_NOTIFY_MULT);
	put_cap(cfg, CAP_ISR, has_dev ? CAP_DEVICE : CAP_PCICFG, VIRTIO_PCI_CAP_ISR_CFG,
		VP_ISR * VP_REGION_SIZE, 1, sizeof(struct virtio_pci_cap));
	if (has_dev)
		put_cap(cfg, CAP_DEVICE, CAP_PCICFG, VIRTIO_PCI_CAP_DEVICE_CFG,
			VP_DEVICE * VP_REGION_SIZE, ops->config_size, sizeof(struct virtio_pci_cap));
	put_cap(cfg, CAP_PCICFG, CAP_MSIX, VIRTIO_PCI_CAP_PCI_CFG, 0, 0,
		sizeof(struct virtio_pci_cfg_cap));
	/* The window's bar, offset, length and data are the driver's to write. */
	d->wmask[PCICFG_BAR] = 0xff;
	memset(&d->wmask[PCICFG_OFFSET], 0xff, 8);
	memset(&d->wmask[PCICFG_DATA], 0xff, 4);

	cfg[CAP_MSIX] = CAP_ID_MSIX;
	cfg[CAP_MSIX + 1] = 0;
	le_put(&cfg[MSIX_CTRL], 2, (u32)vp->nvec - 1);
	le_put(&cfg[CAP_MSIX + 4], 4, VP_MSIX_TABLE | VP_BAR_MSIX);
	le_put(&cfg[CAP_MSIX + 8], 4, VP_MSIX_PBA | VP_BAR_MSIX);
	d->wmask[MSIX_CTRL + 1] = (MSIX_CTRL_ENABLE | MSIX_CTRL_MASKALL) >> 8;

	d->bar[VP_BAR_REGS] = (struct pci_bar){
		.size = VP_BAR0_SIZE, .fn = vp_bar0_io, .opaque = vp, .name = "virtio-pci",
	};
	d->bar[VP_BAR_MSIX] = (struct pci_bar){
		.size = VP_BAR2_SIZE, .fn = vp_msix_io, .opaque = vp, .name = "virtio-pci-msix",
	};
	d->cfg_read = vp_cfg_read;
	d->cfg_write = vp_cfg_write;
	d->bar_moved = vp_bar_moved;
	d->priv = vp;
	d->name = "virtio-pci";
}

static void release_fds(struct virtio_pci *vp)
{
	struct virtio_device *vdev = vp->vdev;

	for (int v = 0; v < vp->nvec; v++) {
		struct vp_vector *e = &vp->vec[v];

		if (e->irqfd_bound)
			irqfd(vp, e, false);
		e->irqfd_bound = false;
		if (e->gsi >= 0)
			kvm_gsi_free(vp->kvm, e->gsi);
		e->gsi = -1;
		if (e->efd >= 0)
			close(e->efd);
		e->efd = -1;
	}
	for (int i = 0; i < vdev->nr_queues; i++) {
		if (vdev->q[i].kick_fd >= 0)
			close(vdev->q[i].kick_fd);
		vdev->q[i].kick_fd = -1;
		vdev->q[i].irq_fd = -1;
	}
	vdev->config_irq_fd = -1;
}

static const struct virtio_transport_ops vp_tops = {
	.name = "pci",
	.signal_isr = vp_intx_notify,
	.destroy = virtio_pci_destroy,
};

int virtio_pci_init(struct kvm *kvm, struct virtio_device *vdev, int nr_queues,
		    u16 queue_max_size)
{
	const struct virtio_dev_ops *ops = vdev->ops;
	struct virtio_pci *vp;
	int ret;

	if (!kvm || !ops || ops->config_size > VP_REGION_SIZE)
		return -EINVAL;
	ret = virtio_device_init(vdev, kvm, nr_queues, queue_max_size);
	if (ret < 0)
		return ret;
	vp = calloc(1, sizeof(*vp));
	if (!vp) {
		virtio_device_uninit(vdev);
		return -ENOMEM;
	}
	vp->vdev = vdev;
	vp->kvm = kvm;
	vp->nvec = nr_queues + 1;
	vp->msix_config = VIRTIO_MSI_NO_VECTOR;
	vdev->transport = vp;
	vdev->tops = &vp_tops;
	/* Trap mode when there is no VM or KVM cannot do it; decided once, before the
	 * device threads exist. */
	if (!kvm_has_ioeventfd(kvm))
		vdev->use_ioeventfd = false;

	for (int v = 0; v < VP_MAX_VECTORS; v++)
		vp->vec[v] = (struct vp_vector){ .ctrl = MSIX_ENTRY_MASKED, .efd = -1, .gsi = -1 };
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++)
		vp->qvec[i] = VIRTIO_MSI_NO_VECTOR;
	for (int i = 0; i < nr_queues; i++) {
		struct virtio_queue *q = &vdev->q[i];

		q->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (q->kick_fd < 0) {
			ret = -errno;
			goto fail;
		}
	}
	for (int v = 0; v < vp->nvec; v++) {
		struct vp_vector *e = &vp->vec[v];

		e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (e->efd < 0) {
			ret = -errno;
			goto fail;
		}
		if (kvm->vm_fd >= 0) {
			e->gsi = kvm_gsi_alloc(kvm);
			if (e->gsi < 0) {
				ret = e->gsi;
				e->gsi = -1;
				goto fail;
			}
		}
	}

	build_config_space(vp);
	ret = pci_device_register(kvm, &vp->pci);
	if (ret < 0)
		goto fail;
	vp->intx_gsi = MPTABLE_PCI_PIN(vp->pci.slot);
	return 0;

fail:
	release_fds(vp);
	vdev->transport = NULL;
	vdev->tops = NULL;
	virtio_device_uninit(vdev);
	free(vp);
	return ret;
}

void virtio_pci_destroy(struct virtio_device *vdev)
{
	struct virtio_pci *vp = vdev->transport;

	if (!vp)
		return;
	/* No more guest accesses (the vCPUs are stopped by now anyway). */
	pci_device_unregister(&vp->pci);
	if (vdev->ops->stop)
		vdev->ops->stop(vdev);
	pthread_mutex_lock(&vdev->lock);
	ioevents_drop(vp);
	for (int i = 0; i < vdev->nr_queues; i++)
		vq_reset(&vdev->q[i].vq);
	release_fds(vp);
	pthread_mutex_unlock(&vdev->lock);
	vdev->transport = NULL;
	vdev->tops = NULL;
	virtio_device_uninit(vdev);
	free(vp);
}

bool virtio_pci_msix_enabled(struct virtio_device *vdev)
{
	struct virtio_pci *vp = vdev->transport;

	return vp && __atomic_load_n(&vp->msix_enabled, __ATOMIC_ACQUIRE);
}

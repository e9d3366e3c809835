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
#include "lkvm/snap.h"
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
_Static_assert(VP_MAX_VECTORS *VP_NOTIFY_MULT <= VP_REGION_SIZE, "notify region too small");

/* One MSI-X vector: the guest's table entry and what it is bound to in KVM. */
struct vp_vector {
	u32 addr_lo, addr_hi, data, ctrl;
	int efd; /* the device signals this; KVM_IRQFD-bound while unmasked */
	int gsi; /* -1 without a VM */
	bool irqfd_bound;
	bool routed; /* r_addr/r_data are in the VM's routing table */
	u64 r_addr;
	u32 r_data;
};

struct virtio_pci {
	struct pci_device pci;
	struct virtio_device *vdev;
	struct kvm *kvm;
	/* Everything below is guarded by vdev->lock. */
	u16 msix_config;
	u16 qvec[VIRTIO_MAX_QUEUES]; /* each queue's MSI-X vector */
	bool msix_enabled;	     /* also read by device threads (atomic loads) */
	int nvec;
	bool func_mask;
	struct vp_vector vec[VP_MAX_VECTORS];
	u32 intx_gsi;
	u64 ioev_base; /* BAR 0 where the notify ioeventfds were last placed (also read
	                     * unlocked by the trapped-notify check) */
	bool warned_route;
	struct ratelimit log_rl; /* guest-triggerable messages */
};

static bool has_vm(const struct virtio_pci *vp)
{
	return vp->kvm->vm_fd >= 0;
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
				pr_warn("virtio-pci %02x: MSI route for vector %d: %s",
					vp->pci.slot, v, strerror(-ret));
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
		__atomic_store_n(&vdev->q[i].irq_fd, vector_fd(vp, vp->qvec[i]), __ATOMIC_RELEASE);
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

/* Each queue's notify address in BAR 0, as it is mapped now (Linux programs BARs before
 * drivers probe), for both widths drivers use. Nothing where BAR 0 is not mapped. */
static int vp_doorbells(struct virtio_device *vdev, int qi, struct kvm_ioevent *out)
{
	static const u32 lens[] = { 2, 4 }; /* iowrite16 (Linux) and iowrite32 (others) */
	struct virtio_pci *vp = vdev->transport;
	u64 base = bar0_base(vp);

	_Static_assert(ARRAY_SIZE(lens) <= VIRTIO_MAX_DOORBELLS, "doorbell table too small");
	__atomic_store_n(&vp->ioev_base, base, __ATOMIC_RELAXED);
	if (!base)
		return 0;
	for (size_t l = 0; l < ARRAY_SIZE(lens); l++)
		out[l] = (struct kvm_ioevent){
			.addr = base + VP_NOTIFY * VP_REGION_SIZE + (u64)qi * VP_NOTIFY_MULT,
			.len = lens[l],
		};
	return ARRAY_SIZE(lens);
}

/* The bus (un)mapped BAR 0, its lock held: the ioeventfds follow at once, so none is
 * ever left on an address the BAR no longer occupies (where another device may now be)
 * nor placed where its mapping failed (pci_bar_base is then 0). */
static void vp_bar_moved(struct pci_device *dev, int bar)
{
	struct virtio_pci *vp = dev->priv;

	if (bar != VP_BAR_REGS)
		return;
	pthread_mutex_lock(&vp->vdev->lock);
	virtio_doorbells_moved(vp->vdev);
	pthread_mutex_unlock(&vp->vdev->lock);
}

/* ---- Device reset: the vectors (core.c does the rest) ---- */

static void vp_reset(struct virtio_device *vdev)
{
	struct virtio_pci *vp = vdev->transport;

	for (int i = 0; i < vdev->nr_queues; i++)
		vp->qvec[i] = VIRTIO_MSI_NO_VECTOR;
	vp->msix_config = VIRTIO_MSI_NO_VECTOR;
	update_irq_fds(vp);
	/* Interrupts signalled before the reset are no longer pending. */
	for (int v = 0; v < vp->nvec; v++)
		if (!vp->vec[v].irqfd_bound)
			eventfd_drain(vp->vec[v].efd);
	intx_set(vp, 0);
}

/* ---- Common configuration (struct virtio_pci_common_cfg), vdev->lock held ---- */

static u16 vector_or_none(struct virtio_pci *vp, u32 v)
{
	return v < (u32)vp->nvec ? (u16)v : VIRTIO_MSI_NO_VECTOR;
}

static u32 rd_msix(struct virtio_pci *vp, u8 a)
{
	return vp->msix_config;
}

static void wr_msix(struct virtio_pci *vp, u8 a, u32 v)
{
	vp->msix_config = vector_or_none(vp, v);
	update_irq_fds(vp);
}

static u32 rd_qmsix(struct virtio_pci *vp, u8 a)
{
	return virtio_selected_queue(vp->vdev) ? vp->qvec[vp->vdev->queue_select] : 0;
}

static void wr_qmsix(struct virtio_pci *vp, u8 a, u32 v)
{
	if (!virtio_selected_queue(vp->vdev))
		return;
	vp->qvec[vp->vdev->queue_select] = vector_or_none(vp, v);
	update_irq_fds(vp);
}

/* queue_notify_off = queue index */
static u32 rd_qnoff(struct virtio_pci *vp, u8 a)
{
	return virtio_selected_queue(vp->vdev) ? vp->vdev->queue_select : 0;
}

struct cc_reg {
	u8 width;
	u8 core; /* VREG_READ | VREG_WRITE: these accesses go to core register arg */
	u8 arg;
	u32 (*read)(struct virtio_pci *vp, u8 arg);
	void (*write)(struct virtio_pci *vp, u8 arg, u32 val); /* NULL: read-only */
};

#define CORE_RO(w, r)                       \
	{                                   \
		w, VREG_READ, r, NULL, NULL \
	}
#define CORE_RW(w, r)                                    \
	{                                                \
		w, VREG_READ | VREG_WRITE, r, NULL, NULL \
	}

/* Indexed by offset; a register is reached only with its own width at its own offset. */
static const struct cc_reg cc_regs[VP_COMMON_LEN] = {
	[VIRTIO_PCI_COMMON_DFSELECT] = CORE_RW(4, VREG_DEVICE_FEATURES_SEL),
	[VIRTIO_PCI_COMMON_DF] = CORE_RO(4, VREG_DEVICE_FEATURES),
	[VIRTIO_PCI_COMMON_GFSELECT] = CORE_RW(4, VREG_DRIVER_FEATURES_SEL),
	[VIRTIO_PCI_COMMON_GF] = CORE_RW(4, VREG_DRIVER_FEATURES),
	[VIRTIO_PCI_COMMON_MSIX] = { 2, 0, 0, rd_msix, wr_msix },
	[VIRTIO_PCI_COMMON_NUMQ] = CORE_RO(2, VREG_NUM_QUEUES),
	[VIRTIO_PCI_COMMON_STATUS] = CORE_RW(1, VREG_STATUS),
	[VIRTIO_PCI_COMMON_CFGGENERATION] = CORE_RO(1, VREG_CONFIG_GENERATION),
	[VIRTIO_PCI_COMMON_Q_SELECT] = CORE_RW(2, VREG_QUEUE_SEL),
	[VIRTIO_PCI_COMMON_Q_SIZE] = CORE_RW(2, VREG_QUEUE_SIZE),
	[VIRTIO_PCI_COMMON_Q_MSIX] = { 2, 0, 0, rd_qmsix, wr_qmsix },
	[VIRTIO_PCI_COMMON_Q_ENABLE] = CORE_RW(2, VREG_QUEUE_ENABLE),
	[VIRTIO_PCI_COMMON_Q_NOFF] = { 2, 0, 0, rd_qnoff, NULL },
	[VIRTIO_PCI_COMMON_Q_DESCLO] = CORE_RW(4, VREG_QUEUE_DESC_LO),
	[VIRTIO_PCI_COMMON_Q_DESCHI] = CORE_RW(4, VREG_QUEUE_DESC_HI),
	[VIRTIO_PCI_COMMON_Q_AVAILLO] = CORE_RW(4, VREG_QUEUE_DRIVER_LO),
	[VIRTIO_PCI_COMMON_Q_AVAILHI] = CORE_RW(4, VREG_QUEUE_DRIVER_HI),
	[VIRTIO_PCI_COMMON_Q_USEDLO] = CORE_RW(4, VREG_QUEUE_DEVICE_LO),
	[VIRTIO_PCI_COMMON_Q_USEDHI] = CORE_RW(4, VREG_QUEUE_DEVICE_HI),
};

/* ---- BAR 0 regions ---- */

static void common_io(struct virtio_pci *vp, u32 off, u8 *data, u32 len, bool is_write)
{
	const struct cc_reg *r = off < VP_COMMON_LEN ? &cc_regs[off] : NULL;

	if (!r || r->width != len)
		return; /* unknown register or wrong width: reads 0, writes ignored */
	pthread_mutex_lock(&vp->vdev->lock);
	if (!is_write && (r->core & VREG_READ))
		le_store(data, len, virtio_reg_read(vp->vdev, r->arg));
	else if (!is_write)
		le_store(data, len, r->read(vp, r->arg));
	else if (r->core & VREG_WRITE)
		virtio_reg_write(vp->vdev, r->arg, le_load(data, len));
	else if (r->write)
		r->write(vp, r->arg, le_load(data, len));
	pthread_mutex_unlock(&vp->vdev->lock);
}

static void isr_io(struct virtio_pci *vp, u32 off, u8 *data, u32 len, bool is_write)
{
	if (!is_write && off == 0 && len == 1)
		data[0] = isr_read(vp);
}

static void device_io(struct virtio_pci *vp, u32 off, u8 *data, u32 len, bool is_write)
{
	virtio_config_access(vp->vdev, off, data, len, is_write);
}

/* A notify that reached us: trap mode, a width the ioeventfds do not cover, or BAR 0
 * moved since DRIVER_OK (then the ioeventfds follow it first). */
static void notify_io(struct virtio_pci *vp, u32 off, u8 *data, u32 len, bool is_write)
{
	struct virtio_device *vdev = vp->vdev;

	if (!is_write || off % VP_NOTIFY_MULT || len > VP_NOTIFY_MULT)
		return;
	if (vdev->use_ioeventfd && virtio_driver_ok(vdev) && has_vm(vp) &&
	    bar0_base(vp) != __atomic_load_n(&vp->ioev_base, __ATOMIC_RELAXED)) {
		pthread_mutex_lock(&vdev->lock);
		if (virtio_driver_ok(vdev) && bar0_base(vp) != vp->ioev_base)
			virtio_doorbells_moved(vdev);
		pthread_mutex_unlock(&vdev->lock);
	}
	virtio_notify_trapped(vdev, off / VP_NOTIFY_MULT);
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
			le_store(data + done, 4, *table_field(e, field));
			continue;
		}
		/* Only the mask bit of vector control is writable. */
		*table_field(e, field) = field == 3 ? le_load(data + done, 4) & MSIX_ENTRY_MASKED
						    : le_load(data + done, 4);
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
	u32 off = le_load(&cfg[PCICFG_OFFSET], 4), len = le_load(&cfg[PCICFG_LENGTH], 4);

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
	*val = le_load(buf + (off - PCICFG_DATA), (u32)len);
	return true;
}

static void msix_control_changed(struct virtio_pci *vp)
{
	struct virtio_device *vdev = vp->vdev;
	u16 ctrl = (u16)le_load(&vp->pci.cfg[MSIX_CTRL], 2);
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
	le_store(&cfg[at + offsetof(struct virtio_pci_cap, offset)], 4, offset);
	le_store(&cfg[at + offsetof(struct virtio_pci_cap, length)], 4, length);
}

static void build_config_space(struct virtio_pci *vp)
{
	struct pci_device *d = &vp->pci;
	const struct virtio_dev_ops *ops = vp->vdev->ops;
	u8 *cfg = d->cfg;
	bool has_dev = ops->config_size > 0;

	le_store(&cfg[PCI_VENDOR_ID], 2, VP_VENDOR);
	le_store(&cfg[PCI_DEVICE_ID], 2, VP_DEVICE_BASE + ops->device_id);
	le_store(&cfg[PCI_REVISION_ID], 4, (ops->class_code & 0xffffff) << 8 | VP_REVISION);
	le_store(&cfg[PCI_SUBSYSTEM_VENDOR_ID], 2, VP_VENDOR);
	le_store(&cfg[PCI_SUBSYSTEM_ID], 2, ops->subsys_id ? ops->subsys_id : ops->device_id);
	cfg[PCI_HEADER_TYPE] = 0;
	cfg[PCI_CAPABILITY_LIST] = CAP_COMMON;

	put_cap(cfg, CAP_COMMON, CAP_NOTIFY, VIRTIO_PCI_CAP_COMMON_CFG, VP_COMMON * VP_REGION_SIZE,
		VP_COMMON_LEN, sizeof(struct virtio_pci_cap));
	put_cap(cfg, CAP_NOTIFY, CAP_ISR, VIRTIO_PCI_CAP_NOTIFY_CFG, VP_NOTIFY * VP_REGION_SIZE,
		(u32)vp->vdev->nr_queues * VP_NOTIFY_MULT, sizeof(struct virtio_pci_notify_cap));
	le_store(&cfg[CAP_NOTIFY + offsetof(struct virtio_pci_notify_cap, notify_off_multiplier)],
		 4, VP_NOTIFY_MULT);
	put_cap(cfg, CAP_ISR, has_dev ? CAP_DEVICE : CAP_PCICFG, VIRTIO_PCI_CAP_ISR_CFG,
		VP_ISR * VP_REGION_SIZE, 1, sizeof(struct virtio_pci_cap));
	if (has_dev)
		put_cap(cfg, CAP_DEVICE, CAP_PCICFG, VIRTIO_PCI_CAP_DEVICE_CFG,
			VP_DEVICE * VP_REGION_SIZE, ops->config_size,
			sizeof(struct virtio_pci_cap));
	put_cap(cfg, CAP_PCICFG, CAP_MSIX, VIRTIO_PCI_CAP_PCI_CFG, 0, 0,
		sizeof(struct virtio_pci_cfg_cap));
	/* The window's bar, offset, length and data are the driver's to write. */
	d->wmask[PCICFG_BAR] = 0xff;
	memset(&d->wmask[PCICFG_OFFSET], 0xff, 8);
	memset(&d->wmask[PCICFG_DATA], 0xff, 4);

	cfg[CAP_MSIX] = CAP_ID_MSIX;
	cfg[CAP_MSIX + 1] = 0;
	le_store(&cfg[MSIX_CTRL], 2, (u32)vp->nvec - 1);
	le_store(&cfg[CAP_MSIX + 4], 4, VP_MSIX_TABLE | VP_BAR_MSIX);
	le_store(&cfg[CAP_MSIX + 8], 4, VP_MSIX_PBA | VP_BAR_MSIX);
	d->wmask[MSIX_CTRL + 1] = (MSIX_CTRL_ENABLE | MSIX_CTRL_MASKALL) >> 8;

	d->bar[VP_BAR_REGS] = (struct pci_bar){
		.size = VP_BAR0_SIZE,
		.fn = vp_bar0_io,
		.opaque = vp,
		.name = "virtio-pci",
	};
	d->bar[VP_BAR_MSIX] = (struct pci_bar){
		.size = VP_BAR2_SIZE,
		.fn = vp_msix_io,
		.opaque = vp,
		.name = "virtio-pci-msix",
	};
	d->cfg_read = vp_cfg_read;
	d->cfg_write = vp_cfg_write;
	d->bar_moved = vp_bar_moved;
	d->priv = vp;
	d->name = "virtio-pci";
}

static void vp_release(struct virtio_device *vdev)
{
	struct virtio_pci *vp = vdev->transport;

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
}

/* ---- Snapshot: the common config's vectors, MSI-X table, pending bits and enables ---- */

/* The PCI configuration space (BARs, the MSI-X capability's control word, the pci-cfg window)
 * is the bus's to save; this transport's copy of MSI-X enable and function mask is saved
 * here too, so the vectors can be re-armed whatever order the bus restores in. */
struct vp_snap_vec {
	u32 addr_lo, addr_hi, data, ctrl;
	u32 pending; /* masked with a signal counted (the PBA bit) */
};

struct vp_snap {
	u32 nvec;
	u16 msix_config;
	u8 slot, msix_enabled, func_mask;
	u8 pad[3];
	u16 qvec[VIRTIO_MAX_QUEUES];
	u8 pad2[(VIRTIO_MAX_QUEUES & 1) * 2];
	struct vp_snap_vec vec[VP_MAX_VECTORS];
};
_Static_assert(sizeof(struct vp_snap) == 12 + 2 * VIRTIO_MAX_QUEUES + (VIRTIO_MAX_QUEUES & 1) * 2 +
						 20 * VP_MAX_VECTORS,
	       "vp_snap has a hole");

static void vp_save(struct virtio_device *vdev, struct snap_rec_buf *b)
{
	struct virtio_pci *vp = vdev->transport;
	struct vp_snap s;

	memset(&s, 0, sizeof(s));
	s.nvec = (u32)vp->nvec;
	s.msix_config = vp->msix_config;
	s.slot = vp->pci.slot;
	s.msix_enabled = vp->msix_enabled;
	s.func_mask = vp->func_mask;
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++)
		s.qvec[i] = vp->qvec[i];
	for (int v = 0; v < vp->nvec; v++) {
		const struct vp_vector *e = &vp->vec[v];

		s.vec[v] = (struct vp_snap_vec){ e->addr_lo, e->addr_hi, e->data, e->ctrl,
						 vec_pending(vp, v) };
	}
	snap_rec_put(b, VIRTIO_SNAP_TAG_TRANSPORT, &s, sizeof(s));
}

static bool vector_ok(const struct virtio_pci *vp, u16 v)
{
	return v == VIRTIO_MSI_NO_VECTOR || v < vp->nvec;
}

static int vp_snap_check(struct virtio_pci *vp, const struct vp_snap *s, char *err, size_t errlen)
{
	bool ok = s->msix_enabled <= 1 && s->func_mask <= 1 && vector_ok(vp, s->msix_config);

	if (s->nvec != (u32)vp->nvec || s->slot != vp->pci.slot) {
		errfmt(err, errlen, "PCI slot %u with %d vectors, the snapshot's %u with %u",
		       vp->pci.slot, vp->nvec, s->slot, s->nvec);
		return -EINVAL;
	}
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++)
		ok &= i < vp->vdev->nr_queues ? vector_ok(vp, s->qvec[i])
					      : s->qvec[i] == VIRTIO_MSI_NO_VECTOR;
	for (int v = 0; v < vp->nvec; v++) {
		const struct vp_snap_vec *e = &s->vec[v];
		bool active = s->msix_enabled && !s->func_mask && !(e->ctrl & MSIX_ENTRY_MASKED);

		ok &= !(e->ctrl & ~(u32)MSIX_ENTRY_MASKED) && e->pending <= 1 &&
		      !(active && e->pending);
	}
	if (!ok)
		errfmt(err, errlen, "MSI-X vectors or their state out of range");
	return ok ? 0 : -EINVAL;
}

/* The registers back, then what their writes armed: each vector's route and irqfd (a pending
 * one signalled in its eventfd, for the PBA and for delivery at unmask), the queues' eventfds,
 * the INTx level the ISR implies. */
static int vp_load(struct virtio_device *vdev, const void *sec, size_t len, char *err,
		   size_t errlen)
{
	struct virtio_pci *vp = vdev->transport;
	struct vp_snap s;
	u64 one = 1;
	int ret = virtio_snap_get(sec, len, VIRTIO_SNAP_TAG_TRANSPORT, &s, sizeof(s), "virtio-pci",
				  err, errlen);

	if (ret == 0)
		ret = vp_snap_check(vp, &s, err, errlen);
	if (ret < 0)
		return ret;
	vp->msix_config = s.msix_config;
	memcpy(vp->qvec, s.qvec, sizeof(vp->qvec));
	__atomic_store_n(&vp->msix_enabled, s.msix_enabled != 0, __ATOMIC_RELEASE);
	vp->func_mask = s.func_mask;
	for (int v = 0; v < vp->nvec; v++) {
		struct vp_vector *e = &vp->vec[v];

		e->addr_lo = s.vec[v].addr_lo;
		e->addr_hi = s.vec[v].addr_hi;
		e->data = s.vec[v].data;
		e->ctrl = s.vec[v].ctrl;
		eventfd_drain(e->efd);
		if (s.vec[v].pending && write(e->efd, &one, sizeof(one)) < 0)
			return -errno;
		vec_update(vp, v);
	}
	update_irq_fds(vp);
	intx_set(vp, !vp->msix_enabled && atomic_load(&vdev->isr));
	return 0;
}

static const struct virtio_transport_ops vp_tops = {
	.name = "pci",
	.signal_isr = vp_intx_notify,
	.doorbells = vp_doorbells,
	.reset = vp_reset,
	.release = vp_release,
	.destroy = virtio_pci_destroy,
	.save = vp_save,
	.load = vp_load,
};

/* One eventfd per vector, and a GSI for its MSI route where there is a VM. */
static int vectors_create(struct virtio_pci *vp)
{
	for (int v = 0; v < vp->nvec; v++) {
		struct vp_vector *e = &vp->vec[v];

		e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (e->efd < 0)
			return -errno;
		if (has_vm(vp)) {
			e->gsi = kvm_gsi_alloc(vp->kvm);
			if (e->gsi < 0) {
				int ret = e->gsi;

				e->gsi = -1;
				return ret;
			}
		}
	}
	return 0;
}

int virtio_pci_init(struct kvm *kvm, struct virtio_device *vdev, int nr_queues, u16 queue_max_size)
{
	struct virtio_pci *vp;
	int ret;

	if (!kvm || !vdev->ops || vdev->ops->config_size > VP_REGION_SIZE)
		return -EINVAL;
	vp = calloc(1, sizeof(*vp));
	if (!vp)
		return -ENOMEM;
	vp->vdev = vdev;
	vp->kvm = kvm;
	vp->nvec = nr_queues + 1;
	vp->msix_config = VIRTIO_MSI_NO_VECTOR;
	for (int v = 0; v < VP_MAX_VECTORS; v++)
		vp->vec[v] = (struct vp_vector){ .ctrl = MSIX_ENTRY_MASKED, .efd = -1, .gsi = -1 };
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++)
		vp->qvec[i] = VIRTIO_MSI_NO_VECTOR;
	ret = virtio_transport_init(vdev, kvm, nr_queues, queue_max_size, &vp_tops, vp);
	if (ret < 0) {
		free(vp);
		return ret;
	}
	ret = vectors_create(vp);
	if (!ret) {
		build_config_space(vp);
		ret = pci_device_register(kvm, &vp->pci);
	}
	if (ret < 0) {
		virtio_transport_exit(vdev);
		free(vp);
		return ret;
	}
	vp->intx_gsi = MPTABLE_PCI_PIN(vp->pci.slot);
	return 0;
}

void virtio_pci_destroy(struct virtio_device *vdev)
{
	struct virtio_pci *vp = vdev->transport;

	if (!vp)
		return;
	/* No more guest accesses (the vCPUs are stopped by now anyway). */
	pci_device_unregister(&vp->pci);
	virtio_transport_exit(vdev);
	free(vp);
}

bool virtio_pci_msix_enabled(struct virtio_device *vdev)
{
	struct virtio_pci *vp = vdev->transport;

	return vp && __atomic_load_n(&vp->msix_enabled, __ATOMIC_ACQUIRE);
}

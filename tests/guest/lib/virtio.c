/* C guest virtio: a modern virtio-pci driver core (capabilities, status, features) and split virtqueues polled without interrupts. */
#include "guest.h"

/* struct virtio_pci_common_cfg (virtio 1.2 §4.1.4.3) */
#define CC_DFSELECT 0x00
#define CC_DF 0x04
#define CC_GFSELECT 0x08
#define CC_GF 0x0c
#define CC_MSIX_CONFIG 0x10
#define CC_NUM_QUEUES 0x12
#define CC_STATUS 0x14
#define CC_Q_SELECT 0x16
#define CC_Q_SIZE 0x18
#define CC_Q_MSIX 0x1a
#define CC_Q_ENABLE 0x1c
#define CC_Q_NOTIFY_OFF 0x1e
#define CC_Q_DESC 0x20
#define CC_Q_DRIVER 0x28
#define CC_Q_DEVICE 0x30

/* struct virtio_pci_cap */
#define CAP_CFG_TYPE 3
#define CAP_BAR 4
#define CAP_OFFSET 8
#define CAP_NOTIFY_MULT 16
#define CFG_COMMON 1
#define CFG_NOTIFY 2
#define CFG_ISR 3
#define CFG_DEVICE 4

#define S_ACKNOWLEDGE 1
#define S_DRIVER 2
#define S_DRIVER_OK 4
#define S_FEATURES_OK 8
#define S_NEEDS_RESET 0x40
#define S_FAILED 0x80
#define NO_VECTOR 0xffff
#define RESET_POLLS 100000

bool virtio_pci_init(struct virtio_pci *vp, const struct pci_dev *d)
{
	u64 *where[5] = { NULL, &vp->common, &vp->notify, &vp->isr, &vp->device };

	memset(vp, 0, sizeof(*vp));
	vp->pci = *d;
	for (u8 at = pci_find_cap(d, PCI_CAP_VNDR, 0); at; at = pci_find_cap(d, PCI_CAP_VNDR, at)) {
		u8 type = pci_read8(d, at + CAP_CFG_TYPE), bar = pci_read8(d, at + CAP_BAR);
		bool io;
		u64 base;

		if (type < CFG_COMMON || type > CFG_DEVICE || bar > 5 || *where[type])
			continue; /* unknown, PCI_CFG, or a second one of a kind: the first wins */
		base = pci_bar(d, bar, &io);
		if (io || !base)
			continue;
		*where[type] = base + pci_read32(d, at + CAP_OFFSET);
		if (type == CFG_NOTIFY)
			vp->notify_mult = pci_read32(d, at + CAP_NOTIFY_MULT);
	}
	/* A device-specific configuration is there only for device types that have one (the
	 * console without features has none): vp->device stays 0 then. */
	if (!vp->common || !vp->notify || !vp->isr)
		return false;
	pci_enable(d, PCI_CMD_MEM | PCI_CMD_MASTER);
	return true;
}

u8 virtio_status(struct virtio_pci *vp)
{
	return mmio_read8(vp->common + CC_STATUS);
}

u16 virtio_num_queues(struct virtio_pci *vp)
{
	return mmio_read16(vp->common + CC_NUM_QUEUES);
}

u8 virtio_cfg_read8(struct virtio_pci *vp, u32 off)
{
	if (!vp->device)
		GUEST_FAIL("virtio: the device has no device-specific configuration");
	return mmio_read8(vp->device + off);
}

const char *virtio_pci_find(struct virtio_pci *vp, u16 device_id, const char *what)
{
	static char why[96];
	struct pci_dev d;

	if (!pci_find(0x1af4, device_id, &d))
		gsnprintf(why, sizeof(why), "no %s device 1af4:%04x", what, device_id);
	else if (!virtio_pci_init(vp, &d))
		gsnprintf(why, sizeof(why), "%s: a virtio capability is missing", what);
	else
		return NULL;
	return why;
}

void virtio_reset(struct virtio_pci *vp)
{
	mmio_write8(vp->common + CC_STATUS, 0);
	for (int i = 0; virtio_status(vp); i++) {
		if (i == RESET_POLLS)
			GUEST_FAIL("virtio: status did not read back 0 after reset");
		cpu_relax();
	}
}

bool virtio_negotiate(struct virtio_pci *vp, u64 want)
{
	u64 offered;

	mmio_write8(vp->common + CC_STATUS, S_ACKNOWLEDGE);
	mmio_write8(vp->common + CC_STATUS, S_ACKNOWLEDGE | S_DRIVER);
	mmio_write32(vp->common + CC_DFSELECT, 0);
	offered = mmio_read32(vp->common + CC_DF);
	mmio_write32(vp->common + CC_DFSELECT, 1);
	offered |= (u64)mmio_read32(vp->common + CC_DF) << 32;
	vp->offered = offered;
	if (!(offered & (1ull << VIRTIO_F_VERSION_1)))
		return false;
	vp->features = offered & (want | 1ull << VIRTIO_F_VERSION_1);
	mmio_write32(vp->common + CC_GFSELECT, 0);
	mmio_write32(vp->common + CC_GF, (u32)vp->features);
	mmio_write32(vp->common + CC_GFSELECT, 1);
	mmio_write32(vp->common + CC_GF, (u32)(vp->features >> 32));
	mmio_write8(vp->common + CC_STATUS, S_ACKNOWLEDGE | S_DRIVER | S_FEATURES_OK);
	return virtio_status(vp) & S_FEATURES_OK;
}

void virtio_driver_ok(struct virtio_pci *vp)
{
	u8 s;

	mmio_write16(vp->common + CC_MSIX_CONFIG, NO_VECTOR);
	mmio_write8(vp->common + CC_STATUS, S_ACKNOWLEDGE | S_DRIVER | S_FEATURES_OK | S_DRIVER_OK);
	s = virtio_status(vp);
	if (s & (S_NEEDS_RESET | S_FAILED) || !(s & S_DRIVER_OK))
		GUEST_FAIL("virtio: device status 0x%x after DRIVER_OK", s);
}

/* Lay out vq's (allocated) rings afresh and hand them to the device: the queue is empty. */
static void virtq_program(struct virtq *vq)
{
	struct virtio_pci *vp = vq->vp;
	u16 size = vq->size;

	memset(vq->desc, 0, sizeof(struct virtq_desc) * size);
	memset((void *)vq->avail, 0, 6 + 2u * size);
	memset((void *)vq->used, 0, 6 + sizeof(struct virtq_used_elem) * size);
	memset(vq->token, 0, sizeof(void *) * size);
	vq->free_head = 0;
	vq->avail_idx = vq->kicked_idx = vq->last_used = 0;
	for (u16 i = 0; i < size; i++)
		vq->desc[i].next = (u16)(i + 1);
	vq->num_free = size;
	/* Polled queues: no interrupts, with or without EVENT_IDX (then used_event trails us). */
	vq->avail->flags = VIRTQ_AVAIL_F_NO_INTERRUPT;
	*vq->used_event = 0xffff;
	mmio_write16(vp->common + CC_Q_SELECT, vq->index);
	mmio_write16(vp->common + CC_Q_SIZE, size);
	mmio_write16(vp->common + CC_Q_MSIX, NO_VECTOR);
	mmio_write64(vp->common + CC_Q_DESC, (u64)(uintptr_t)vq->desc);
	mmio_write64(vp->common + CC_Q_DRIVER, (u64)(uintptr_t)vq->avail);
	mmio_write64(vp->common + CC_Q_DEVICE, (u64)(uintptr_t)vq->used);
	vq->notify_addr =
		vp->notify + (u64)mmio_read16(vp->common + CC_Q_NOTIFY_OFF) * vp->notify_mult;
	mmio_write16(vp->common + CC_Q_ENABLE, 1);
	GUEST_ASSERT_EQ(mmio_read16(vp->common + CC_Q_ENABLE), 1);
}

bool virtq_setup(struct virtio_pci *vp, struct virtq *vq, u16 idx, u16 max_size)
{
	u16 size;

	memset(vq, 0, sizeof(*vq));
	if (idx >= virtio_num_queues(vp))
		return false;
	mmio_write16(vp->common + CC_Q_SELECT, idx);
	size = mmio_read16(vp->common + CC_Q_SIZE);
	if (!size)
		return false;
	if (max_size && max_size < size)
		size = max_size;
	GUEST_ASSERT(!(size & (size - 1)));
	vq->vp = vp;
	vq->index = idx;
	vq->size = size;
	/* Each part on its own page: more than the alignment the spec asks (16, 2, 4). */
	vq->desc = galloc(sizeof(struct virtq_desc) * size, 4096);
	vq->avail = galloc(6 + 2u * size, 4096);
	vq->used = galloc(6 + sizeof(struct virtq_used_elem) * size, 4096);
	vq->token = galloc(sizeof(void *) * size, 8);
	vq->used_event = &vq->avail->ring[size];
	vq->avail_event = (volatile u16 *)&vq->used->ring[size];
	vq->event_idx = vp->features & (1ull << VIRTIO_F_RING_EVENT_IDX);
	virtq_program(vq);
	return true;
}

void virtq_resetup(struct virtq *vq)
{
	vq->event_idx = vq->vp->features & (1ull << VIRTIO_F_RING_EVENT_IDX);
	vq->kicks = 0;
	virtq_program(vq);
}

/* Descriptor k of n (nout readable first): address, length and flags; next is left alone. */
static void virtq_fill(struct virtq_desc *d, const struct vq_buf *bufs, int k, int nout, int n)
{
	d->addr = bufs[k].addr;
	d->len = bufs[k].len;
	d->flags =
		(u16)((k >= nout ? VIRTQ_DESC_F_WRITE : 0) | (k < n - 1 ? VIRTQ_DESC_F_NEXT : 0));
}

/* Take n descriptors off the free list for a chain at head, and make it available. */
static void virtq_publish(struct virtq *vq, u16 head, u16 last, int n, void *token)
{
	vq->free_head = vq->desc[last].next;
	vq->num_free = (u16)(vq->num_free - n);
	vq->token[head] = token;
	vq->avail->ring[vq->avail_idx & (vq->size - 1)] = head;
	/* x86 keeps stores in order: the entry and descriptors are visible before the index. */
	barrier();
	WRITE_ONCE(vq->avail->idx, ++vq->avail_idx);
}

bool virtq_add(struct virtq *vq, const struct vq_buf *bufs, int nout, int nin, void *token)
{
	int n = nout + nin;
	u16 head = vq->free_head, i = head, last = head;

	if (n < 1 || n > vq->num_free)
		return false;
	for (int k = 0; k < n; k++) {
		virtq_fill(&vq->desc[i], bufs, k, nout, n);
		last = i;
		i = vq->desc[i].next; /* the free list is linked through next already */
	}
	virtq_publish(vq, head, last, n, token);
	return true;
}

bool virtq_add_indirect(struct virtq *vq, struct virtq_desc *table, const struct vq_buf *bufs,
			int nout, int nin, void *token)
{
	int n = nout + nin;
	u16 head = vq->free_head;

	if (n < 1 || !vq->num_free)
		return false;
	for (int k = 0; k < n; k++) {
		virtq_fill(&table[k], bufs, k, nout, n);
		table[k].next = (u16)(k + 1);
	}
	vq->desc[head].addr = (u64)(uintptr_t)table;
	vq->desc[head].len = (u32)(sizeof(*table) * (u32)n);
	vq->desc[head].flags = VIRTQ_DESC_F_INDIRECT;
	virtq_publish(vq, head, head, 1, token);
	return true;
}

/* True when the device's event index lies in (old, new]: it asked to hear about new entries. */
static inline bool need_event(u16 event, u16 new, u16 old)
{
	return (u16)(new - event - 1) < (u16)(new - old);
}

bool virtq_kick(struct virtq *vq)
{
	u16 old = vq->kicked_idx, new = vq->avail_idx;
	bool need;

	/* Our avail->idx store must be visible before we read the device's suppression state,
	 * or it may have re-enabled notifications without seeing our entries (lost wake-up). */
	mb();
	if (vq->event_idx)
		need = need_event(READ_ONCE(*vq->avail_event), new, old);
	else
		need = !(READ_ONCE(vq->used->flags) & VIRTQ_USED_F_NO_NOTIFY);
	vq->kicked_idx = new;
	if (!need)
		return false;
	if (vq->notify32)
		mmio_write32(vq->notify_addr, vq->index);
	else
		mmio_write16(vq->notify_addr, vq->index);
	vq->kicks++;
	return true;
}

void *virtq_get(struct virtq *vq, u32 *len)
{
	struct virtq_used_elem e;
	u16 i, n = 1;
	void *token;

	if (READ_ONCE(vq->used->idx) == vq->last_used)
		return NULL;
	barrier(); /* x86 does not reorder loads: the element is read after the index */
	e = vq->used->ring[vq->last_used & (vq->size - 1)];
	if (e.id >= vq->size)
		GUEST_FAIL("virtq %u: used id %u out of range", vq->index, e.id);
	token = vq->token[e.id];
	vq->token[e.id] = NULL;
	for (i = (u16)e.id; vq->desc[i].flags & VIRTQ_DESC_F_NEXT; i = vq->desc[i].next)
		n++;
	vq->desc[i].next = vq->free_head;
	vq->free_head = (u16)e.id;
	vq->num_free = (u16)(vq->num_free + n);
	vq->last_used++;
	if (vq->event_idx) /* keep used_event just behind: no interrupt for ~65535 entries */
		WRITE_ONCE(*vq->used_event, (u16)(vq->last_used - 1));
	if (len)
		*len = e.len;
	return token;
}

/* PCI bus 0: configuration mechanism #1 ports, the host bridge, slot and BAR assignment, BAR (un)mapping on kvm->mmio. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/boot.h"
#include "lkvm/dev.h"
#include "lkvm/hw.h"
#include "lkvm/kvm.h"
#include "lkvm/pci.h"
#include "lkvm/snap.h"

#define CF8_ENABLE 0x80000000u
/* Bits of 0xCF8 that hold state: enable, bus, device, function, dword register. */
#define CF8_MASK (CF8_ENABLE | 0x00fffffcu)
#define BAR_END (PCI_BASE_ADDRESS_0 + 4 * PCI_NUM_BARS)

/* Host bridge identity: Intel 82441FX, which Linux's pci_sanity_check accepts and
 * which needs no driver. */
#define HB_VENDOR 0x8086
#define HB_DEVICE 0x1237
#define PCI_CLASS_BRIDGE_HOST 0x0600

static u32 cfg_get(const u8 *cfg, u16 off, int len)
{
	u32 v = 0;

	for (int i = 0; i < len; i++)
		v |= (u32)cfg[off + i] << (8 * i);
	return v;
}

static void cfg_put(u8 *cfg, u16 off, int len, u32 v)
{
	for (int i = 0; i < len; i++)
		cfg[off + i] = (u8)(v >> (8 * i));
}

/* 1, 2 or 4 bytes that stay inside one dword of the 256-byte space: what CF8/CFC can
 * express, and what lets the BAR/command logic look at a single register. */
static bool cfg_access_ok(u16 off, int len)
{
	if (len != 1 && len != 2 && len != 4)
		return false;
	return off < PCI_CFG_SPACE_SIZE && (off & 3) + len <= 4;
}

static u32 ones(int len)
{
	return len >= 4 ? 0xffffffffu : (1u << (8 * len)) - 1;
}

/* MMIO trampoline: hands the device an offset inside its BAR. The range is looked up
 * under the bus lock but the handler runs without it, so the BAR may have moved since:
 * such a stale access is dropped instead of reaching the device at a wrong offset. */
static void pci_bar_io(struct kvm_cpu *vcpu, u64 addr, u8 *data, u32 len, bool is_write,
		       void *opaque)
{
	struct pci_bar *bar = opaque;
	u64 base = __atomic_load_n(&bar->mapped_at, __ATOMIC_ACQUIRE);

	if (addr < base || !range_ok(addr - base, len, bar->size)) {
		if (!is_write)
			memset(data, 0xff, len);
		return;
	}
	bar->fn(vcpu, addr - base, data, len, is_write, bar->opaque);
}

static u32 bar_addr(const struct pci_device *dev, int i)
{
	return cfg_get(dev->cfg, (u16)(PCI_BASE_ADDRESS_0 + 4 * i), 4) & ~0xfu;
}

/* mapped_at while a BAR is not registered: pci_bar_io drops every access (addr < base)
 * and pci_bar_base reports 0, so nothing (an ioeventfd) is ever placed there. */
#define BAR_UNMAPPED UINT64_MAX

static void bar_unmap(struct pci_bus *bus, struct pci_device *dev, int i)
{
	struct pci_bar *bar = &dev->bar[i];

	if (!bar->mapped)
		return;
	io_bus_unregister(&bus->kvm->mmio, bar->mapped_at);
	__atomic_store_n(&bar->mapped_at, BAR_UNMAPPED, __ATOMIC_RELEASE);
	bar->mapped = false;
	if (dev->bar_moved)
		dev->bar_moved(dev, i);
}

/* Map BAR i where the guest (or we) programmed it. Address 0 means unassigned; a
 * collision with another range is the guest's mistake: log it (rate-limited, a guest
 * can retry forever) and leave the BAR unmapped, mapped_at included. */
static void bar_map(struct pci_bus *bus, struct pci_device *dev, int i)
{
	struct pci_bar *bar = &dev->bar[i];
	u32 addr = bar_addr(dev, i);
	int ret;

	if (!bar->size || bar->mapped || !addr)
		return;
	/* Published before the range exists, so the first access through it sees it. */
	__atomic_store_n(&bar->mapped_at, addr, __ATOMIC_RELEASE);
	ret = io_bus_register(&bus->kvm->mmio, addr, bar->size, pci_bar_io, bar,
			      bar->name ? bar->name : dev->name);
	if (ret) {
		__atomic_store_n(&bar->mapped_at, BAR_UNMAPPED, __ATOMIC_RELEASE);
		pr_warn_rl(&bus->log_rl, "pci %02x: BAR%d at %#x+%#x not mapped: %s", dev->slot, i,
			   addr, bar->size, strerror(-ret));
		return;
	}
	bar->mapped = true;
	if (dev->bar_moved)
		dev->bar_moved(dev, i);
}

u64 pci_bar_base(const struct pci_device *dev, int i)
{
	u64 a = __atomic_load_n(&dev->bar[i].mapped_at, __ATOMIC_ACQUIRE);

	return a == BAR_UNMAPPED ? 0 : a;
}

static bool mem_decode(const struct pci_device *dev)
{
	return cfg_get(dev->cfg, PCI_COMMAND, 2) & PCI_COMMAND_MEMORY;
}

static void bars_update(struct pci_bus *bus, struct pci_device *dev)
{
	bool on = mem_decode(dev);

	for (int i = 0; i < PCI_NUM_BARS; i++) {
		if (on)
			bar_map(bus, dev, i);
		else
			bar_unmap(bus, dev, i);
	}
}

static u32 cfg_read_locked(struct pci_bus *bus, u8 slot, u16 off, int len)
{
	struct pci_device *dev;
	u32 val;

	if (slot >= PCI_MAX_SLOTS || !cfg_access_ok(off, len))
		return ones(len);
	dev = bus->slots[slot];
	if (!dev)
		return ones(len);
	if (off >= PCI_CFG_DEVSPEC && dev->cfg_read && dev->cfg_read(dev, off, len, &val))
		return val & ones(len);
	return cfg_get(dev->cfg, off, len);
}

/* A BAR write: the size decides which address bits stick, so all-ones reads back
 * ~(size-1) | type, the sizing protocol. A moved BAR is remapped if decode is on. */
static void bar_write(struct pci_bus *bus, struct pci_device *dev, u16 off, int len, u32 val)
{
	int i = (off - PCI_BASE_ADDRESS_0) / 4;
	u16 reg = (u16)(PCI_BASE_ADDRESS_0 + 4 * i);
	u8 tmp[4];
	u32 v, size = dev->bar[i].size;

	memcpy(tmp, &dev->cfg[reg], 4);
	cfg_put(tmp + (off - reg), 0, len, val);
	v = cfg_get(tmp, 0, 4);
	v = size ? ((v & ~(size - 1)) | PCI_BAR_MEM_TYPE_32) : 0;
	if (v == cfg_get(dev->cfg, reg, 4))
		return;
	cfg_put(dev->cfg, reg, 4, v);
	/* With decode on, follow the new address, also when the old one could not be
	 * mapped (a guest moving a colliding BAR elsewhere). */
	if (mem_decode(dev)) {
		bar_unmap(bus, dev, i);
		bar_map(bus, dev, i);
	}
}

static void cfg_write_locked(struct pci_bus *bus, u8 slot, u16 off, int len, u32 val)
{
	struct pci_device *dev;
	bool decode;

	if (slot >= PCI_MAX_SLOTS || !cfg_access_ok(off, len))
		return;
	dev = bus->slots[slot];
	if (!dev)
		return;
	if (off >= PCI_BASE_ADDRESS_0 && off < BAR_END) {
		bar_write(bus, dev, off, len, val);
		return;
	}
	decode = mem_decode(dev);
	for (int i = 0; i < len; i++) {
		u8 m = dev->wmask[off + i];

		dev->cfg[off + i] = (u8)((dev->cfg[off + i] & ~m) | ((val >> (8 * i)) & m));
	}
	if (mem_decode(dev) != decode)
		bars_update(bus, dev);
	if (off >= PCI_CFG_DEVSPEC && dev->cfg_write)
		dev->cfg_write(dev, off, len, val & ones(len));
}

u32 pci_cfg_read(struct pci_bus *bus, u8 slot, u16 off, int len)
{
	u32 v;

	pthread_mutex_lock(&bus->lock);
	v = cfg_read_locked(bus, slot, off, len);
	pthread_mutex_unlock(&bus->lock);
	return v;
}

void pci_cfg_write(struct pci_bus *bus, u8 slot, u16 off, int len, u32 val)
{
	pthread_mutex_lock(&bus->lock);
	cfg_write_locked(bus, slot, off, len, val);
	pthread_mutex_unlock(&bus->lock);
}

static u32 data_get(const u8 *data, u32 len)
{
	return cfg_get(data, 0, (int)MIN(len, 4u));
}

/* 0xCF8-0xCFB: only a dword access at 0xCF8 is the address register; a byte at 0xCF9
 * is the chipset's reset control register, which shares the range. */
static void pci_addr_io(struct kvm_cpu *vcpu, u64 port, u8 *data, u32 len, bool is_write,
			void *opaque)
{
	struct pci_bus *bus = opaque;

	if (port == PCI_CONFIG_ADDR_PORT && len == 4) {
		pthread_mutex_lock(&bus->lock);
		if (is_write)
			bus->cf8 = data_get(data, len) & CF8_MASK;
		else
			cfg_put(data, 0, 4, bus->cf8);
		pthread_mutex_unlock(&bus->lock);
		return;
	}
	if (port == PCI_CONFIG_ADDR_PORT + 1 && len == 1) {
		if (is_write)
			hw_reset_control_write(bus->kvm, data[0]);
		return; /* reads 0: no reset pending */
	}
	if (!is_write)
		memset(data, 0xff, len);
}

static void pci_data_io(struct kvm_cpu *vcpu, u64 port, u8 *data, u32 len, bool is_write,
			void *opaque)
{
	struct pci_bus *bus = opaque;
	u32 cf8, byte = (u32)(port - PCI_CONFIG_DATA_PORT);

	pthread_mutex_lock(&bus->lock);
	cf8 = bus->cf8;
	/* Disabled, another bus or another function: nothing there. */
	if (!(cf8 & CF8_ENABLE) || ((cf8 >> 16) & 0xff) || ((cf8 >> 8) & 7) || len > 4) {
		if (!is_write)
			memset(data, 0xff, len);
	} else {
		u8 slot = (cf8 >> 11) & 0x1f;
		u16 off = (u16)((cf8 & 0xfc) + byte);

		if (is_write)
			cfg_write_locked(bus, slot, off, (int)len, data_get(data, len));
		else
			cfg_put(data, 0, (int)len, cfg_read_locked(bus, slot, off, (int)len));
	}
	pthread_mutex_unlock(&bus->lock);
}

/* The header bits a guest may change: command (memory decode, bus master, INTx
 * disable), cache line size, latency timer, interrupt line. BARs are handled apart. */
static void header_wmask(struct pci_device *dev)
{
	memset(dev->wmask, 0, PCI_CFG_DEVSPEC);
	cfg_put(dev->wmask, PCI_COMMAND, 2,
		PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER | PCI_COMMAND_INTX_DISABLE);
	dev->wmask[PCI_CACHE_LINE_SIZE] = 0xff;
	dev->wmask[PCI_LATENCY_TIMER] = 0xff;
	dev->wmask[PCI_INTERRUPT_LINE] = 0xff;
}

int pci_bus_create(struct kvm *kvm)
{
	struct pci_bus *bus = calloc(1, sizeof(*bus));
	struct pci_device *hb;
	int ret;

	if (!bus)
		return -ENOMEM;
	bus->kvm = kvm;
	bus->next_mmio = PCI_MMIO_WINDOW_START;
	pthread_mutex_init(&bus->lock, NULL);

	hb = &bus->host_bridge;
	hb->name = "pci-host-bridge";
	cfg_put(hb->cfg, PCI_VENDOR_ID, 2, HB_VENDOR);
	cfg_put(hb->cfg, PCI_DEVICE_ID, 2, HB_DEVICE);
	cfg_put(hb->cfg, PCI_CLASS_DEVICE, 2, PCI_CLASS_BRIDGE_HOST);
	cfg_put(hb->cfg, PCI_COMMAND, 2, PCI_COMMAND_MEMORY);
	header_wmask(hb);
	hb->bus = bus;
	hb->slot = 0;
	bus->slots[0] = hb;

	ret = io_bus_register(&kvm->pio, PCI_CONFIG_ADDR_PORT, 4, pci_addr_io, bus, "pci-addr");
	if (ret)
		goto err;
	ret = io_bus_register(&kvm->pio, PCI_CONFIG_DATA_PORT, 4, pci_data_io, bus, "pci-data");
	if (ret) {
		io_bus_unregister(&kvm->pio, PCI_CONFIG_ADDR_PORT);
		goto err;
	}
	kvm->pci = bus;
	return 0;
err:
	pthread_mutex_destroy(&bus->lock);
	free(bus);
	return ret;
}

static void detach_locked(struct pci_bus *bus, struct pci_device *dev)
{
	for (int i = 0; i < PCI_NUM_BARS; i++)
		bar_unmap(bus, dev, i);
	bus->slots[dev->slot] = NULL;
	dev->bus = NULL;
}

void pci_bus_destroy(struct kvm *kvm)
{
	struct pci_bus *bus = kvm->pci;

	if (!bus)
		return;
	io_bus_unregister(&kvm->pio, PCI_CONFIG_ADDR_PORT);
	io_bus_unregister(&kvm->pio, PCI_CONFIG_DATA_PORT);
	pthread_mutex_lock(&bus->lock);
	for (int s = 1; s < PCI_MAX_SLOTS; s++)
		if (bus->slots[s])
			detach_locked(bus, bus->slots[s]);
	pthread_mutex_unlock(&bus->lock);
	pthread_mutex_destroy(&bus->lock);
	kvm->pci = NULL;
	free(bus);
}

/* bars_fit: -ENOSPC unless dev's BARs, each at a size-aligned address, fit in the window's rest. */
static int bars_fit(const struct pci_bus *bus, const struct pci_device *dev)
{
	u64 next = bus->next_mmio;

	for (int i = 0; i < PCI_NUM_BARS; i++) {
		u32 size = dev->bar[i].size;

		if (!size)
			continue;
		next = ALIGN_UP(next, (u64)size);
		if (!range_ok(next, size, PCI_MMIO_WINDOW_END))
			return -ENOSPC;
		next += size;
	}
	return 0;
}

/* bars_assign_locked: dev's BARs at their addresses (bars_fit said they fit), not yet mapped. */
static void bars_assign_locked(struct pci_bus *bus, struct pci_device *dev)
{
	u64 next = bus->next_mmio;

	for (int i = 0; i < PCI_NUM_BARS; i++) {
		u32 size = dev->bar[i].size;
		u32 v = 0;

		if (size) {
			next = ALIGN_UP(next, (u64)size);
			v = (u32)next | PCI_BAR_MEM_TYPE_32;
			next += size;
		}
		cfg_put(dev->cfg, (u16)(PCI_BASE_ADDRESS_0 + 4 * i), 4, v);
		dev->bar[i].mapped = false;
		dev->bar[i].mapped_at = BAR_UNMAPPED;
	}
	bus->next_mmio = next;
}

/* header_init: the rest of dev's type 0 header for a device in slot. */
static void header_init(struct pci_device *dev, int slot)
{
	header_wmask(dev);
	dev->cfg[PCI_HEADER_TYPE] = 0;
	cfg_put(dev->cfg, PCI_ROM_ADDRESS, 4, 0);
	cfg_put(dev->cfg, PCI_STATUS, 2, dev->cfg[PCI_CAPABILITY_LIST] ? PCI_STATUS_CAP_LIST : 0);
	dev->cfg[PCI_INTERRUPT_PIN] = 1; /* INTA */
	dev->cfg[PCI_INTERRUPT_LINE] = (u8)MPTABLE_PCI_PIN(slot);
	/* We play firmware: addresses are assigned, so decode is on as Linux expects. */
	cfg_put(dev->cfg, PCI_COMMAND, 2, PCI_COMMAND_MEMORY);
}

int pci_device_register(struct kvm *kvm, struct pci_device *dev)
{
	struct pci_bus *bus = kvm->pci;
	int slot, ret = 0;

	if (!bus || dev->bus)
		return -EINVAL;
	for (int i = 0; i < PCI_NUM_BARS; i++) {
		u32 size = dev->bar[i].size;

		if (size && (size < 16 || (size & (size - 1)) || !dev->bar[i].fn))
			return -EINVAL;
	}

	pthread_mutex_lock(&bus->lock);
	for (slot = 1; slot < PCI_MAX_SLOTS && bus->slots[slot]; slot++)
		;
	if (slot == PCI_MAX_SLOTS) {
		ret = -ENOSPC;
		goto out;
	}
	/* Size-aligned addresses, checked all before any is committed. */
	ret = bars_fit(bus, dev);
	if (ret)
		goto out;
	bars_assign_locked(bus, dev);

	header_init(dev, slot);
	dev->bus = bus;
	dev->slot = (u8)slot;
	bus->slots[slot] = dev;
	bars_update(bus, dev);
	ret = slot;
out:
	pthread_mutex_unlock(&bus->lock);
	return ret;
}

void pci_device_unregister(struct pci_device *dev)
{
	struct pci_bus *bus = dev->bus;

	if (!bus)
		return;
	pthread_mutex_lock(&bus->lock);
	detach_locked(bus, dev);
	pthread_mutex_unlock(&bus->lock);
}

/*
 * ---- Snapshot (issue 31) ----
 * The bus's record: the address latch and which slots hold a function; then one record per
 * function: its whole configuration space as the guest left it (command, BARs as programmed,
 * interrupt line, the writable bytes of its capabilities). At load the bytes a guest cannot
 * write must be the device's own (the same device in the same slot) and each BAR must hold
 * what bar_write can leave there; then every BAR is unmapped, the bytes are put back and the
 * BARs mapped again through the path a guest write takes (bars_update, bar_moved hooks), all
 * before the devices' own loads, which see the saved layout.
 */
#define PCI_SNAP_TAG_BUS DEV_SNAP_TAG_MIN
#define PCI_SNAP_TAG_FN (DEV_SNAP_TAG_MIN + 1)

struct pci_bus_snap {
	u32 cf8;
	u32 slots; /* bit s: a function in slot s */
};

struct pci_fn_snap {
	u8 slot;
	u8 reserved[3];
	u8 cfg[PCI_CFG_SPACE_SIZE];
};
_Static_assert(sizeof(struct pci_fn_snap) == 4 + PCI_CFG_SPACE_SIZE, "pci_fn_snap has no holes");
_Static_assert(PCI_MAX_SLOTS <= 32, "the slot mask is a u32");

static u32 slot_mask_locked(const struct pci_bus *bus)
{
	u32 m = 0;

	for (int s = 0; s < PCI_MAX_SLOTS; s++)
		if (bus->slots[s])
			m |= 1u << s;
	return m;
}

void pci_bus_save(struct pci_bus *bus, struct snap_rec_buf *b)
{
	struct pci_bus_snap hdr = { 0 };
	struct pci_fn_snap f;

	pthread_mutex_lock(&bus->lock);
	hdr.cf8 = bus->cf8;
	hdr.slots = slot_mask_locked(bus);
	snap_rec_put(b, PCI_SNAP_TAG_BUS, &hdr, sizeof(hdr));
	for (int s = 0; s < PCI_MAX_SLOTS; s++) {
		if (!bus->slots[s])
			continue;
		memset(&f, 0, sizeof(f));
		f.slot = (u8)s;
		memcpy(f.cfg, bus->slots[s]->cfg, sizeof(f.cfg));
		snap_rec_put(b, PCI_SNAP_TAG_FN, &f, sizeof(f));
	}
	pthread_mutex_unlock(&bus->lock);
}

/* The next function record: 1, 0 at the end, -EINVAL for a malformed one (why says). */
static int fn_next(struct snap_rec_iter *it, struct pci_fn_snap *f, const char **why)
{
	const void *data;
	u32 len;
	u16 tag;
	int ret;

	while ((ret = snap_rec_next(it, &tag, &data, &len)) == 1) {
		if (tag != PCI_SNAP_TAG_FN)
			continue;
		if (len != sizeof(*f)) {
			*why = "a function record of the wrong size";
			return -EINVAL;
		}
		memcpy(f, data, sizeof(*f));
		return 1;
	}
	*why = "a record runs past the section's end";
	return ret < 0 ? -EINVAL : 0;
}

/* What a guest could not have changed is the device's own; each BAR as bar_write leaves it. */
static const char *fn_check(const struct pci_device *dev, const struct pci_fn_snap *f)
{
	if (f->reserved[0] | f->reserved[1] | f->reserved[2])
		return "reserved bytes are not zero";
	for (int off = 0; off < PCI_CFG_SPACE_SIZE; off++) {
		if (off >= PCI_BASE_ADDRESS_0 && off < BAR_END)
			continue;
		if ((f->cfg[off] ^ dev->cfg[off]) & ~dev->wmask[off])
			return "read-only configuration bytes differ (another device?)";
	}
	for (int i = 0; i < PCI_NUM_BARS; i++) {
		u32 v = cfg_get(f->cfg, (u16)(PCI_BASE_ADDRESS_0 + 4 * i), 4);
		u32 size = dev->bar[i].size;

		if (v != (size ? ((v & ~(size - 1)) | PCI_BAR_MEM_TYPE_32) : 0))
			return "a BAR holds bits its size or type does not allow";
	}
	return NULL;
}

/* Every function record checked, each occupied slot's once, before anything changes. */
static int fns_check_locked(struct pci_bus *bus, const void *sec, size_t len, char *err,
			    size_t errlen)
{
	struct snap_rec_iter it = { sec, len };
	struct pci_fn_snap f;
	const char *why = NULL;
	u32 seen = 0, want = slot_mask_locked(bus);
	int ret;

	while ((ret = fn_next(&it, &f, &why)) == 1) {
		if (f.slot >= PCI_MAX_SLOTS || !(want & (1u << f.slot)) || (seen & (1u << f.slot)))
			why = "a function record for a slot this machine has not, or twice";
		else
			why = fn_check(bus->slots[f.slot], &f);
		if (why) {
			errfmt(err, errlen, "slot %u: %s", f.slot, why);
			return -EINVAL;
		}
		seen |= 1u << f.slot;
	}
	if (ret < 0) {
		errfmt(err, errlen, "%s", why);
		return ret;
	}
	if (seen != want) {
		errfmt(err, errlen, "slot %d: not in the snapshot", __builtin_ctz(want & ~seen));
		return -EINVAL;
	}
	return 0;
}

/* The checked records put back: BARs off everywhere first, so that no BAR collides for a
 * moment with one not yet moved, then the bytes, then the BARs on as decode says. */
static void fns_apply_locked(struct pci_bus *bus, const void *sec, size_t len)
{
	struct snap_rec_iter it = { sec, len };
	struct pci_fn_snap f;
	const char *why;

	for (int s = 0; s < PCI_MAX_SLOTS; s++)
		for (int i = 0; bus->slots[s] && i < PCI_NUM_BARS; i++)
			bar_unmap(bus, bus->slots[s], i);
	/* The bytes a guest cannot write are equal already (fn_check): a copy is exact. */
	while (fn_next(&it, &f, &why) == 1)
		memcpy(bus->slots[f.slot]->cfg, f.cfg, sizeof(f.cfg));
	for (int s = 0; s < PCI_MAX_SLOTS; s++)
		if (bus->slots[s])
			bars_update(bus, bus->slots[s]);
}

int pci_bus_load(struct pci_bus *bus, const void *sec, size_t len, char *err, size_t errlen)
{
	struct pci_bus_snap hdr;
	int ret;

	if (snap_rec_get(sec, len, PCI_SNAP_TAG_BUS, &hdr, sizeof(hdr)) < 0) {
		errfmt(err, errlen,
		       "the bus record is missing, or a record runs past the section's end");
		return -EINVAL;
	}
	if (hdr.cf8 & ~CF8_MASK) {
		errfmt(err, errlen, "config address %#x has bits the latch does not keep", hdr.cf8);
		return -EINVAL;
	}
	pthread_mutex_lock(&bus->lock);
	ret = hdr.slots == slot_mask_locked(bus) ? 0 : -EINVAL;
	if (ret)
		errfmt(err, errlen,
		       "functions in slots %#x, this machine %#x (start it with the same devices)",
		       hdr.slots, slot_mask_locked(bus));
	if (!ret)
		ret = fns_check_locked(bus, sec, len, err, errlen);
	if (!ret) {
		bus->cf8 = hdr.cf8;
		fns_apply_locked(bus, sec, len);
	}
	pthread_mutex_unlock(&bus->lock);
	return ret;
}

/* ---- the bus as an entry of the VM's device list ---- */

static int pci_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	int ret = pci_bus_create(kvm);

	d->priv = kvm->pci; /* for the snapshot ops */
	return ret;
}

static void pci_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	pci_bus_destroy(kvm);
}

static int pci_dev_save(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen)
{
	pci_bus_save(d->priv, b);
	return 0;
}

static int pci_dev_load(struct kvm_dev *d, const void *sec, size_t len, char *err, size_t errlen)
{
	return pci_bus_load(d->priv, sec, len, err, errlen);
}

static const struct kvm_dev_ops pci_dev_ops = {
	.name = "pci",
	.prio = DEV_PRIO_BUS,
	.init = pci_dev_init,
	.save = pci_dev_save,
	.load = pci_dev_load,
	.exit = pci_dev_exit,
};

int pci_bus_add(struct kvm *kvm)
{
	return kvm_dev_add(kvm, &pci_dev_ops, NULL, 0);
}

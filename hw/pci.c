/* PCI bus 0: configuration mechanism #1 ports, the host bridge, slot and BAR assignment, BAR (un)mapping on kvm->mmio. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/boot.h"
#include "lkvm/dev.h"
#include "lkvm/hw.h"
#include "lkvm/kvm.h"
#include "lkvm/pci.h"

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

/* ---- the bus as an entry of the VM's device list ---- */

static int pci_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	return pci_bus_create(kvm);
}

static void pci_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	pci_bus_destroy(kvm);
}

static const struct kvm_dev_ops pci_dev_ops = {
	.name = "pci",
	.prio = DEV_PRIO_BUS,
	.init = pci_dev_init,
	.exit = pci_dev_exit,
};

int pci_bus_add(struct kvm *kvm)
{
	return kvm_dev_add(kvm, &pci_dev_ops, NULL, 0);
}

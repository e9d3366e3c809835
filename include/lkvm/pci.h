/* PCI bus 0 behind configuration mechanism #1 (0xCF8/0xCFC): host bridge, device slots, memory BARs. */
#ifndef LKVM_PCI_H
#define LKVM_PCI_H

#include <pthread.h>

#include "lkvm/io.h"
#include "lkvm/util.h"

struct kvm;
struct snap_rec_buf;

#define PCI_MAX_SLOTS 32
#define PCI_CFG_SPACE_SIZE 256
#define PCI_NUM_BARS 6

#define PCI_CONFIG_ADDR_PORT 0xCF8
#define PCI_CONFIG_DATA_PORT 0xCFC

/* Where BARs are placed: inside the PCI hole, below the IOAPIC. */
#define PCI_MMIO_WINDOW_START 0xD0000000ULL
#define PCI_MMIO_WINDOW_END 0xFE000000ULL

/* Standard type-0 header offsets (only those the bus code uses). */
#define PCI_VENDOR_ID 0x00
#define PCI_DEVICE_ID 0x02
#define PCI_COMMAND 0x04
#define PCI_STATUS 0x06
#define PCI_REVISION_ID 0x08
#define PCI_CLASS_PROG 0x09
#define PCI_CLASS_DEVICE 0x0a
#define PCI_CACHE_LINE_SIZE 0x0c
#define PCI_LATENCY_TIMER 0x0d
#define PCI_HEADER_TYPE 0x0e
#define PCI_BASE_ADDRESS_0 0x10
#define PCI_SUBSYSTEM_VENDOR_ID 0x2c
#define PCI_SUBSYSTEM_ID 0x2e
#define PCI_ROM_ADDRESS 0x30
#define PCI_CAPABILITY_LIST 0x34
#define PCI_INTERRUPT_LINE 0x3c
#define PCI_INTERRUPT_PIN 0x3d
#define PCI_CFG_DEVSPEC 0x40 /* first byte of the device-specific area (capabilities) */

#define PCI_COMMAND_IO 0x1
#define PCI_COMMAND_MEMORY 0x2
#define PCI_COMMAND_MASTER 0x4
#define PCI_COMMAND_INTX_DISABLE 0x400
#define PCI_STATUS_CAP_LIST 0x10
#define PCI_BAR_MEM_TYPE_32 0x0

/*
 * A device embeds this and fills, before pci_device_register:
 *  - cfg: ids, class, revision, subsystem ids, capabilities (with cfg[0x34] pointing
 *    at the first one); BARs, command, status, interrupt registers are set by the bus;
 *  - wmask: which bits of the device-specific area (0x40..0xff) the guest may write
 *    (zero = read-only, so capability ids and next pointers stay intact); the bus sets
 *    the header's writable bits itself;
 *  - bar[i].size (power of two >= 16, 0 = unused) with fn/opaque: BARs are 32-bit
 *    memory BARs only (virtio-pci needs nothing else), and a BAR handler gets `addr`
 *    as the offset inside the BAR;
 *  - optional hooks for device-specific registers.
 * Hooks run with the bus lock held: they may read and change dev->cfg but must not call
 * back into pci_* functions.
 */
struct pci_device;

/* Return true and set *val to supply a register's value (offset, 1/2/4 bytes, inside
 * the device-specific area); false reads the stored config bytes. */
typedef bool (*pci_cfg_read_fn)(struct pci_device *dev, u16 off, int len, u32 *val);
/* Called after a guest write to the device-specific area was stored through wmask. */
typedef void (*pci_cfg_write_fn)(struct pci_device *dev, u16 off, int len, u32 val);
/* BAR bar was mapped or unmapped (moved, decode toggled, a failed mapping); ask
 * pci_bar_base where it is now. */
typedef void (*pci_bar_moved_fn)(struct pci_device *dev, int bar);

struct pci_bar {
	u32 size;
	io_handler_fn fn;
	void *opaque;
	const char *name;
	/* Bus-private: where the range is registered on kvm->mmio (accessed atomically,
	 * the handler trampoline reads it without the bus lock; UINT64_MAX while not
	 * mapped). Others ask pci_bar_base. */
	u64 mapped_at;
	bool mapped;
};

struct pci_device {
	u8 cfg[PCI_CFG_SPACE_SIZE];
	u8 wmask[PCI_CFG_SPACE_SIZE];
	struct pci_bar bar[PCI_NUM_BARS];
	pci_cfg_read_fn cfg_read;
	pci_cfg_write_fn cfg_write;
	pci_bar_moved_fn bar_moved; /* optional */
	void *priv;		    /* device's own pointer, for the hooks */
	const char *name;
	/* Set by the bus. */
	struct pci_bus *bus;
	u8 slot;
};

struct pci_bus {
	struct kvm *kvm;
	pthread_mutex_t lock; /* config space of every device, slots, cf8, the MMIO allocator */
	u32 cf8;	      /* configuration address register */
	struct pci_device *slots[PCI_MAX_SLOTS];
	struct pci_device host_bridge;
	u64 next_mmio;		 /* allocator cursor inside the MMIO window */
	struct ratelimit log_rl; /* guest-triggered messages (BAR collisions) */
};

/* Create bus 0 with the host bridge in slot 0, register 0xCF8-0xCFB and 0xCFC-0xCFF on
 * kvm->pio, store it in kvm->pci. Returns 0 or -errno. */
int pci_bus_create(struct kvm *kvm) __must_check;
/* Unmaps every BAR, unregisters the ports and detaches still-registered devices (which
 * their owners free). Must run before kvm->pio/mmio are destroyed. */
void pci_bus_destroy(struct kvm *kvm);
/* Add the bus to kvm's device list ("pci", built before every other device). 0 or -ENOMEM. */
int pci_bus_add(struct kvm *kvm) __must_check;

/*
 * Snapshot (issue 31; the "pci" device's save/load ops call these). Save: the address latch
 * and every function's configuration space. Load (on a bus built with the same devices, in
 * the same slots): checks every record (-EINVAL and a one-line reason in err; nothing is
 * changed then), puts the bytes back and maps the BARs where they were, calling bar_moved
 * as a guest's write would. It does not call cfg_read/cfg_write: a device whose hooks give
 * meaning to its bytes (virtio-pci's MSI-X control) applies them in its own load op, which
 * runs after the bus's and finds its dev->cfg as the guest left it.
 */
void pci_bus_save(struct pci_bus *bus, struct snap_rec_buf *b);
int pci_bus_load(struct pci_bus *bus, const void *sec, size_t len, char *err,
		 size_t errlen) __must_check;

/* Place dev in the next free slot (1..31), assign BAR addresses (size-aligned, from the
 * MMIO window), write INTA and its interrupt line (MPTABLE_PCI_PIN(slot)), enable memory
 * decode and map the BARs. Returns the slot or -errno (-ENOSPC: no slot or address
 * space, -EINVAL: bad BAR size). */
int pci_device_register(struct kvm *kvm, struct pci_device *dev) __must_check;
/* Where BAR i is mapped now, 0 when it is not (decode off, unassigned, or its mapping
 * failed): what an ioeventfd inside the BAR must follow. Lock-free. */
u64 pci_bar_base(const struct pci_device *dev, int i);
/* Unmap its BARs and free its slot; no-op if dev is not on a bus. */
void pci_device_unregister(struct pci_device *dev);

/* Configuration space access of bus 0 function 0, slot `dev`. Reads of an empty slot, a
 * bad offset/length (len 1, 2 or 4; off + len <= 256; naturally aligned not required
 * but must not cross a dword) give all-ones; such writes are ignored. */
u32 pci_cfg_read(struct pci_bus *bus, u8 dev, u16 off, int len);
void pci_cfg_write(struct pci_bus *bus, u8 dev, u16 off, int len, u32 val);

#endif

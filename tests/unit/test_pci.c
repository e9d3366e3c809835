/* Unit tests of the PCI bus: config mechanism #1, host bridge, slots, BAR sizing and moving, hooks. */
#include <errno.h>
#include <string.h>

#include "capture.h"
#include "check_main.h"
#include "lkvm/boot.h"
#include "lkvm/kvm.h"
#include "lkvm/pci.h"
#include "lkvm/snap.h"

#include "fake_vm.h"

struct tdev {
	struct pci_device pci;
	u64 last_off;
	int accesses;
	int hook_writes;
	u32 hook_val;
};

static void tdev_io(struct kvm_cpu *vcpu, u64 off, u8 *data, u32 len, bool is_write, void *opaque)
{
	struct tdev *d = opaque;

	d->last_off = off;
	d->accesses++;
	if (!is_write)
		data[0] = 0x42;
}

static bool tdev_cfg_read(struct pci_device *dev, u16 off, int len, u32 *val)
{
	if (off != 0x48)
		return false;
	*val = 0x12345678;
	return true;
}

static void tdev_cfg_write(struct pci_device *dev, u16 off, int len, u32 val)
{
	struct tdev *d = dev->priv;

	d->hook_writes++;
	d->hook_val = val;
}

static void tdev_init(struct tdev *d, u32 bar0, u32 bar2)
{
	memset(d, 0, sizeof(*d));
	d->pci.name = "tdev";
	d->pci.priv = d;
	d->pci.cfg[PCI_VENDOR_ID] = 0xf4;
	d->pci.cfg[PCI_VENDOR_ID + 1] = 0x1a;
	d->pci.cfg[PCI_DEVICE_ID] = 0x41;
	d->pci.cfg[PCI_DEVICE_ID + 1] = 0x10;
	d->pci.cfg[PCI_CLASS_DEVICE + 1] = 0x02;
	d->pci.bar[0] = (struct pci_bar){ .size = bar0, .fn = tdev_io, .opaque = d };
	d->pci.bar[2] = (struct pci_bar){ .size = bar2, .fn = tdev_io, .opaque = d };
	/* A vendor capability at 0x40: id/next read-only, one writable byte at 0x44. */
	d->pci.cfg[PCI_CAPABILITY_LIST] = 0x40;
	d->pci.cfg[0x40] = 0x09;
	d->pci.cfg[0x41] = 0x00;
	d->pci.wmask[0x44] = 0xff;
	d->pci.cfg_read = tdev_cfg_read;
	d->pci.cfg_write = tdev_cfg_write;
}

static struct kvm *vm_new(void)
{
	struct kvm *kvm = fake_vm_new(0);

	ck_assert_int_eq(pci_bus_create(kvm), 0);
	ck_assert_ptr_nonnull(kvm->pci);
	return kvm;
}

static void vm_free(struct kvm *kvm)
{
	pci_bus_destroy(kvm);
	ck_assert_ptr_null(kvm->pci);
	ck_assert_int_eq(kvm->pio.nr, 0);
	ck_assert_int_eq(kvm->mmio.nr, 0);
	fake_vm_free(kvm);
}

static u32 port_io(struct kvm *kvm, u16 port, u32 len, bool is_write, u32 v)
{
	u8 d[4] = { 0 };

	memcpy(d, &v, len);
	io_bus_dispatch(&kvm->pio, NULL, port, d, len, is_write);
	v = 0;
	memcpy(&v, d, len);
	return v;
}

static u32 conf1_read(struct kvm *kvm, u8 slot, u16 off, u32 len)
{
	port_io(kvm, 0xcf8, 4, true, 0x80000000u | (u32)slot << 11 | (off & 0xfc));
	return port_io(kvm, (u16)(0xcfc + (off & 3)), len, false, 0);
}

static void conf1_write(struct kvm *kvm, u8 slot, u16 off, u32 len, u32 v)
{
	port_io(kvm, 0xcf8, 4, true, 0x80000000u | (u32)slot << 11 | (off & 0xfc));
	port_io(kvm, (u16)(0xcfc + (off & 3)), len, true, v);
}

static u8 mmio_read(struct kvm *kvm, u64 addr, bool *hit)
{
	u8 d[4] = { 0 };

	*hit = io_bus_dispatch(&kvm->mmio, NULL, addr, d, 4, false);
	return d[0];
}

START_TEST(test_host_bridge)
{
	struct kvm *kvm = vm_new();
	struct pci_bus *bus = kvm->pci;

	ck_assert_uint_eq(pci_cfg_read(bus, 0, PCI_VENDOR_ID, 4), 0x12378086);
	ck_assert_uint_eq(pci_cfg_read(bus, 0, 0x08, 4) >> 8, 0x060000);
	ck_assert_uint_eq(pci_cfg_read(bus, 0, PCI_HEADER_TYPE, 1), 0);
	/* Same through the ports, with byte and word accesses inside the dword. */
	ck_assert_uint_eq(conf1_read(kvm, 0, 0, 4), 0x12378086);
	ck_assert_uint_eq(conf1_read(kvm, 0, 2, 2), 0x1237);
	ck_assert_uint_eq(conf1_read(kvm, 0, 1, 1), 0x80);
	ck_assert_uint_eq(conf1_read(kvm, 0, 0x0b, 1), 0x06);
	ck_assert_uint_eq(port_io(kvm, 0xcf8, 4, false, 0), 0x80000008u);
	/* Empty slot, other bus, other function, decode disabled: all-ones. */
	ck_assert_uint_eq(conf1_read(kvm, 5, 0, 4), 0xffffffffu);
	ck_assert_uint_eq(conf1_read(kvm, 5, 0, 2), 0xffff);
	port_io(kvm, 0xcf8, 4, true, 0x80010000u);
	ck_assert_uint_eq(port_io(kvm, 0xcfc, 4, false, 0), 0xffffffffu);
	port_io(kvm, 0xcf8, 4, true, 0x80000100u);
	ck_assert_uint_eq(port_io(kvm, 0xcfc, 4, false, 0), 0xffffffffu);
	port_io(kvm, 0xcf8, 4, true, 0x00000000u);
	ck_assert_uint_eq(port_io(kvm, 0xcfc, 4, false, 0), 0xffffffffu);
	ck_assert_uint_eq(pci_cfg_read(bus, 31, 0, 4), 0xffffffffu);
	ck_assert_uint_eq(pci_cfg_read(bus, 32, 0, 4), 0xffffffffu);
	/* Read-only ids survive writes. */
	pci_cfg_write(bus, 0, PCI_VENDOR_ID, 4, 0);
	conf1_write(kvm, 0, 0x08, 4, 0);
	ck_assert_uint_eq(pci_cfg_read(bus, 0, PCI_VENDOR_ID, 4), 0x12378086);
	ck_assert_uint_eq(pci_cfg_read(bus, 0, 0x08, 4) >> 8, 0x060000);
	vm_free(kvm);
}
END_TEST

START_TEST(test_bad_offsets)
{
	struct kvm *kvm = vm_new();
	struct pci_bus *bus = kvm->pci;

	ck_assert_uint_eq(pci_cfg_read(bus, 0, 256, 1), 0xff);
	ck_assert_uint_eq(pci_cfg_read(bus, 0, 0xfe, 4), 0xffffffffu);
	ck_assert_uint_eq(pci_cfg_read(bus, 0, 0x03, 2), 0xffff); /* crosses a dword */
	ck_assert_uint_eq(pci_cfg_read(bus, 0, 0x00, 3), 0xffffff);
	ck_assert_uint_eq(pci_cfg_read(bus, 0, 0x00, 0), 0);
	ck_assert_uint_eq(pci_cfg_read(bus, 0, 0xffff, 1), 0xff);
	pci_cfg_write(bus, 0, 0xffff, 4, 0); /* ignored, no crash */
	pci_cfg_write(bus, 0, 0x3f, 2, 0);
	ck_assert_uint_eq(pci_cfg_read(bus, 0, 0xfc, 4), 0);
	vm_free(kvm);
}
END_TEST

START_TEST(test_register_slots_and_header)
{
	struct kvm *kvm = vm_new();
	struct pci_bus *bus = kvm->pci;
	struct tdev a, b;

	tdev_init(&a, 0x1000, 0x4000);
	tdev_init(&b, 0x100, 0);
	ck_assert_int_eq(pci_device_register(kvm, &a.pci), 1);
	ck_assert_int_eq(pci_device_register(kvm, &b.pci), 2);
	ck_assert_int_eq(pci_device_register(kvm, &b.pci), -EINVAL); /* twice */

	ck_assert_uint_eq(pci_cfg_read(bus, 1, 0, 4), 0x10411af4);
	ck_assert_uint_eq(conf1_read(kvm, 2, 0, 4), 0x10411af4);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, PCI_INTERRUPT_PIN, 1), 1);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, PCI_INTERRUPT_LINE, 1), MPTABLE_PCI_PIN(1));
	ck_assert_uint_eq(pci_cfg_read(bus, 2, PCI_INTERRUPT_LINE, 1), MPTABLE_PCI_PIN(2));
	ck_assert_uint_eq(pci_cfg_read(bus, 1, PCI_STATUS, 2), PCI_STATUS_CAP_LIST);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, PCI_COMMAND, 2) & PCI_COMMAND_MEMORY,
			  PCI_COMMAND_MEMORY);

	/* BARs: size-aligned from the window, in order, unused ones 0. */
	u32 a0 = pci_cfg_read(bus, 1, 0x10, 4), a2 = pci_cfg_read(bus, 1, 0x18, 4);
	u32 b0 = pci_cfg_read(bus, 2, 0x10, 4);

	ck_assert_uint_eq(a0, PCI_MMIO_WINDOW_START);
	ck_assert_uint_eq(a2, PCI_MMIO_WINDOW_START + 0x4000);
	ck_assert_uint_eq(b0, PCI_MMIO_WINDOW_START + 0x8000);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, 0x14, 4), 0);
	ck_assert_uint_eq(pci_cfg_read(bus, 2, 0x18, 4), 0);

	/* Status is read-only (no write-1-to-clear games), command keeps supported bits. */
	pci_cfg_write(bus, 1, PCI_STATUS, 2, 0xffff);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, PCI_STATUS, 2), PCI_STATUS_CAP_LIST);
	pci_cfg_write(bus, 1, PCI_COMMAND, 2, 0xffff);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, PCI_COMMAND, 2),
			  PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER | PCI_COMMAND_INTX_DISABLE);
	pci_cfg_write(bus, 1, PCI_INTERRUPT_LINE, 1, 0x0b);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, PCI_INTERRUPT_LINE, 1), 0x0b);
	pci_cfg_write(bus, 1, PCI_INTERRUPT_PIN, 1, 0x04);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, PCI_INTERRUPT_PIN, 1), 1);
	pci_cfg_write(bus, 1, PCI_ROM_ADDRESS, 4, 0xfffff800u); /* no ROM */
	ck_assert_uint_eq(pci_cfg_read(bus, 1, PCI_ROM_ADDRESS, 4), 0);

	/* Device-specific area: wmask and hooks. */
	pci_cfg_write(bus, 1, 0x40, 4, 0xffffffffu);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, 0x40, 2), 0x0009);
	ck_assert_uint_eq(a.hook_writes, 1);
	pci_cfg_write(bus, 1, 0x44, 1, 0x77);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, 0x44, 1), 0x77);
	ck_assert_uint_eq(a.hook_val, 0x77);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, 0x48, 4), 0x12345678);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, 0x48, 2), 0x5678);
	pci_cfg_write(bus, 1, 0x10, 4, a0); /* header writes do not call the hook */
	ck_assert_uint_eq(a.hook_writes, 2);

	pci_device_unregister(&b.pci);
	ck_assert_uint_eq(pci_cfg_read(bus, 2, 0, 4), 0xffffffffu);
	ck_assert_ptr_null(b.pci.bus);
	pci_device_unregister(&b.pci); /* no-op */
	vm_free(kvm);
	ck_assert_ptr_null(a.pci.bus);
}
END_TEST

START_TEST(test_register_rejects)
{
	struct kvm *kvm = vm_new();
	struct tdev d[32];

	tdev_init(&d[0], 12, 0); /* not a power of two */
	ck_assert_int_eq(pci_device_register(kvm, &d[0].pci), -EINVAL);
	tdev_init(&d[0], 8, 0); /* below the minimum */
	ck_assert_int_eq(pci_device_register(kvm, &d[0].pci), -EINVAL);
	tdev_init(&d[0], 0x80000000u, 0); /* larger than the window */
	ck_assert_int_eq(pci_device_register(kvm, &d[0].pci), -ENOSPC);
	for (int i = 0; i < 31; i++) {
		tdev_init(&d[i], 0, 0);
		ck_assert_int_eq(pci_device_register(kvm, &d[i].pci), i + 1);
	}
	tdev_init(&d[31], 0, 0);
	ck_assert_int_eq(pci_device_register(kvm, &d[31].pci), -ENOSPC);
	vm_free(kvm);
}
END_TEST

START_TEST(test_bar_sizing_and_move)
{
	struct kvm *kvm = vm_new();
	struct pci_bus *bus = kvm->pci;
	struct tdev a;
	bool hit;
	u32 old, moved = 0xe0000000u;

	tdev_init(&a, 0x1000, 0);
	ck_assert_int_eq(pci_device_register(kvm, &a.pci), 1);
	old = pci_cfg_read(bus, 1, 0x10, 4);

	ck_assert_uint_eq(mmio_read(kvm, old + 0x10, &hit), 0x42);
	ck_assert(hit);
	ck_assert_uint_eq(a.last_off, 0x10);

	/* Linux's sizing: decode off, all-ones, read, restore, decode on. */
	conf1_write(kvm, 1, PCI_COMMAND, 2, 0);
	mmio_read(kvm, old, &hit);
	ck_assert(!hit);
	conf1_write(kvm, 1, 0x10, 4, 0xffffffffu);
	ck_assert_uint_eq(conf1_read(kvm, 1, 0x10, 4), 0xfffff000u);
	conf1_write(kvm, 1, 0x10, 4, moved);
	ck_assert_uint_eq(conf1_read(kvm, 1, 0x10, 4), moved);
	mmio_read(kvm, moved, &hit);
	ck_assert(!hit); /* still not decoding */
	conf1_write(kvm, 1, PCI_COMMAND, 2, PCI_COMMAND_MEMORY);
	a.accesses = 0;
	ck_assert_uint_eq(mmio_read(kvm, moved + 0xffc, &hit), 0x42);
	ck_assert(hit);
	ck_assert_uint_eq(a.last_off, 0xffc);
	mmio_read(kvm, old, &hit);
	ck_assert(!hit);
	ck_assert_int_eq(a.accesses, 1);

	/* Moving while decoding, with a byte write to the top byte, moves the range too. */
	pci_cfg_write(bus, 1, 0x13, 1, 0xd8);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, 0x10, 4), 0xd8000000u);
	mmio_read(kvm, moved, &hit);
	ck_assert(!hit);
	mmio_read(kvm, 0xd8000000u, &hit);
	ck_assert(hit);
	/* Low bits never stick; the type stays memory/32-bit. */
	pci_cfg_write(bus, 1, 0x10, 4, 0xd8000abfu);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, 0x10, 4), 0xd8000000u);
	/* Sizing while decoding: the range follows, nothing breaks; restoring maps it back. */
	pci_cfg_write(bus, 1, 0x10, 4, 0xffffffffu);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, 0x10, 4), 0xfffff000u);
	pci_cfg_write(bus, 1, 0x10, 4, old);
	mmio_read(kvm, old, &hit);
	ck_assert(hit);
	ck_assert_int_eq(kvm->mmio.nr, 1);
	vm_free(kvm);
}
END_TEST

START_TEST(test_bar_collision)
{
	struct kvm *kvm = vm_new();
	struct pci_bus *bus = kvm->pci;
	struct tdev a, b;
	bool hit;

	tdev_init(&a, 0x1000, 0);
	tdev_init(&b, 0x1000, 0);
	ck_assert_int_eq(pci_device_register(kvm, &a.pci), 1);
	ck_assert_int_eq(pci_device_register(kvm, &b.pci), 2);
	/* The guest programs b on top of a: b stays unmapped, a keeps working. */
	pci_cfg_write(bus, 2, 0x10, 4, pci_cfg_read(bus, 1, 0x10, 4));
	a.accesses = b.accesses = 0;
	mmio_read(kvm, PCI_MMIO_WINDOW_START, &hit);
	ck_assert(hit);
	ck_assert_int_eq(a.accesses, 1);
	ck_assert_int_eq(b.accesses, 0);
	vm_free(kvm);
}
END_TEST

static int moved_calls;

static void count_moves(struct pci_device *dev, int bar)
{
	moved_calls++;
}

/* A BAR whose mapping failed is not "mapped" anywhere: pci_bar_base says 0 (what an
 * ioeventfd would follow), its mover hears of it, and moving it somewhere free maps it. */
START_TEST(test_bar_collision_leaves_no_address)
{
	struct kvm *kvm = vm_new();
	struct pci_bus *bus = kvm->pci;
	struct tdev a, b;
	u32 a0, b0;
	bool hit;

	tdev_init(&a, 0x1000, 0);
	tdev_init(&b, 0x1000, 0);
	b.pci.bar_moved = count_moves;
	ck_assert_int_eq(pci_device_register(kvm, &a.pci), 1);
	ck_assert_int_eq(pci_device_register(kvm, &b.pci), 2);
	a0 = pci_cfg_read(bus, 1, 0x10, 4);
	b0 = pci_cfg_read(bus, 2, 0x10, 4);
	ck_assert_uint_eq(pci_bar_base(&b.pci, 0), b0);
	ck_assert_uint_eq(pci_bar_base(&b.pci, 2), 0); /* no such BAR */
	moved_calls = 0;
	pci_cfg_write(bus, 2, 0x10, 4, a0);
	ck_assert_uint_eq(pci_bar_base(&b.pci, 0), 0);
	ck_assert_uint_eq(pci_bar_base(&a.pci, 0), a0);
	ck_assert_int_ge(moved_calls, 1);
	/* Moved to a free address while decoding: mapped there. */
	pci_cfg_write(bus, 2, 0x10, 4, 0xd8000000u);
	ck_assert_uint_eq(pci_bar_base(&b.pci, 0), 0xd8000000u);
	b.accesses = 0;
	mmio_read(kvm, 0xd8000000u, &hit);
	ck_assert(hit);
	ck_assert_int_eq(b.accesses, 1);
	/* Decode off: nowhere. */
	pci_cfg_write(bus, 2, PCI_COMMAND, 2, 0);
	ck_assert_uint_eq(pci_bar_base(&b.pci, 0), 0);
	vm_free(kvm);
}
END_TEST

/* A guest retrying a colliding BAR forever logs a bounded number of lines. */
START_TEST(test_bar_collision_log_bounded)
{
	struct kvm *kvm = vm_new();
	struct pci_bus *bus = kvm->pci;
	struct tdev a, b;
	struct capture c;
	u32 a0;
	int lines;

	tdev_init(&a, 0x1000, 0);
	tdev_init(&b, 0x1000, 0);
	ck_assert_int_eq(pci_device_register(kvm, &a.pci), 1);
	ck_assert_int_eq(pci_device_register(kvm, &b.pci), 2);
	a0 = pci_cfg_read(bus, 1, 0x10, 4);
	capture_start(&c);
	for (int i = 0; i < 1000; i++) {
		pci_cfg_write(bus, 2, PCI_COMMAND, 2, 0);
		pci_cfg_write(bus, 2, 0x10, 4, a0);
		pci_cfg_write(bus, 2, PCI_COMMAND, 2, PCI_COMMAND_MEMORY);
	}
	lines = capture_end(&c, NULL, 0);
	ck_assert_int_ge(lines, 1);
	ck_assert_int_le(lines, RATELIMIT_BURST);
	vm_free(kvm);
}
END_TEST

/* ---- Snapshot (issue 31) ---- */

struct snapvm {
	struct kvm *kvm;
	struct tdev d1, d2;
};

static void snapvm_new(struct snapvm *v)
{
	v->kvm = vm_new();
	tdev_init(&v->d1, 0x1000, 0x100);
	tdev_init(&v->d2, 0x1000, 0x100);
	ck_assert_int_eq(pci_device_register(v->kvm, &v->d1.pci), 1);
	ck_assert_int_eq(pci_device_register(v->kvm, &v->d2.pci), 2);
}

static void snapvm_free(struct snapvm *v)
{
	pci_device_unregister(&v->d1.pci);
	pci_device_unregister(&v->d2.pci);
	vm_free(v->kvm);
}

/* A: the two functions' BAR 0 swapped (through a third address, decode on: at no moment
 * may two overlap), slot 2's BAR 2 moved and its decode off, slot 1's interrupt line and
 * capability byte written, the host bridge's latency timer, and the latch left on slot 1. */
static u32 drive_bus(struct snapvm *v, u32 *bar0_1, u32 *bar0_2)
{
	struct kvm *kvm = v->kvm;

	*bar0_1 = conf1_read(kvm, 1, 0x10, 4);
	*bar0_2 = conf1_read(kvm, 2, 0x10, 4);
	conf1_write(kvm, 2, 0x10, 4, 0xe0000000u);
	conf1_write(kvm, 1, 0x10, 4, *bar0_2);
	conf1_write(kvm, 2, 0x10, 4, *bar0_1);
	conf1_write(kvm, 2, 0x18, 4, 0xe0001000u);
	conf1_write(kvm, 2, PCI_COMMAND, 2, PCI_COMMAND_MASTER);
	conf1_write(kvm, 1, PCI_INTERRUPT_LINE, 1, 0x0b);
	conf1_write(kvm, 1, 0x44, 1, 0x77);
	conf1_write(kvm, 0, PCI_LATENCY_TIMER, 1, 0x40);
	port_io(kvm, 0xcf8, 4, true, 0x80000800u | 0x3c);
	return 0x80000800u | 0x3c;
}

START_TEST(test_snap_round_trip)
{
	struct snapvm a, b;
	struct snap_rec_buf rb = { 0 };
	char err[128] = "";
	u32 latch, bar0_1, bar0_2;
	bool hit;

	snapvm_new(&a);
	snapvm_new(&b);
	latch = drive_bus(&a, &bar0_1, &bar0_2);
	pci_bus_save(a.kvm->pci, &rb);
	ck_assert_int_eq(rb.err, 0);
	ck_assert_msg(pci_bus_load(b.kvm->pci, rb.buf, rb.len, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(port_io(b.kvm, 0xcf8, 4, false, 0), latch);
	ck_assert_uint_eq(port_io(b.kvm, 0xcfc, 1, false, 0), 0x0b); /* the latch's register */
	for (u8 slot = 0; slot < 4; slot++)
		for (u16 off = 0; off < PCI_CFG_SPACE_SIZE; off += 4)
			ck_assert_uint_eq(pci_cfg_read(b.kvm->pci, slot, off, 4),
					  pci_cfg_read(a.kvm->pci, slot, off, 4));
	/* The BARs are where A's are: slot 1 answers at slot 2's old address, slot 2's BARs
	 * are off until the guest turns decode on, and then at their saved addresses. */
	b.d1.accesses = b.d2.accesses = 0;
	ck_assert_uint_eq(mmio_read(b.kvm, bar0_2 + 8, &hit), 0x42);
	ck_assert(hit);
	ck_assert_int_eq(b.d1.accesses, 1);
	ck_assert_uint_eq(b.d1.last_off, 8);
	mmio_read(b.kvm, bar0_1, &hit);
	ck_assert(!hit);
	ck_assert_int_eq(b.kvm->mmio.nr, a.kvm->mmio.nr);
	conf1_write(b.kvm, 2, PCI_COMMAND, 2, PCI_COMMAND_MEMORY);
	mmio_read(b.kvm, bar0_1 + 4, &hit);
	ck_assert(hit);
	mmio_read(b.kvm, 0xe0001000u + 0xf0, &hit);
	ck_assert(hit);
	ck_assert_int_eq(b.d2.accesses, 2);
	ck_assert_int_eq(b.d1.hook_writes, 0); /* bytes put back, no device hook called */
	snap_rec_free(&rb);
	snapvm_free(&a);
	snapvm_free(&b);
}
END_TEST

/* Offsets in the section (bus record, then one per slot: 6 + 8, then 6 + 260 each). */
#define BUS_AT 6
#define FN_AT(n) (6 + 8 + 6 + (n) * (6 + 260))

/* Each patch (offset in the section, byte) is refused with one line, and the bus is left
 * as it was: the functions' BARs where registration put them. */
static void expect_refused(const u8 *good, size_t len, size_t off, u8 v)
{
	struct snapvm b;
	u8 copy[2048];
	char err[128] = "";
	bool hit;
	u32 bar0 = 0;

	ck_assert_uint_le(len, sizeof(copy));
	memcpy(copy, good, len);
	if (off < len)
		copy[off] = v;
	else
		len = off - len; /* cut: off - len bytes kept */
	snapvm_new(&b);
	bar0 = pci_cfg_read(b.kvm->pci, 1, 0x10, 4);
	ck_assert_msg(pci_bus_load(b.kvm->pci, copy, len, err, sizeof(err)) == -EINVAL,
		      "patch at %zu loaded", off);
	ck_assert_msg(err[0] && !strchr(err, '\n'), "'%s'", err);
	ck_assert_uint_eq(pci_cfg_read(b.kvm->pci, 1, 0x10, 4), bar0);
	mmio_read(b.kvm, bar0, &hit);
	ck_assert(hit);
	ck_assert_uint_eq(port_io(b.kvm, 0xcf8, 4, false, 0), 0);
	snapvm_free(&b);
}

START_TEST(test_snap_hostile)
{
	static const struct {
		size_t off;
		u8 v;
	} bad[] = {
		{ BUS_AT + 0, 0x01 },		      /* latch bits it does not keep */
		{ BUS_AT + 4, 0x03 },		      /* slot mask: slot 2 missing */
		{ BUS_AT + 4, 0x0f },		      /* slot 3 that this machine has not */
		{ FN_AT(1) + 0, 2 },		      /* slot 1's record says slot 2: twice */
		{ FN_AT(1) + 0, 9 },		      /* an empty slot */
		{ FN_AT(1) + 0, 200 },		      /* no such slot */
		{ FN_AT(1) + 1, 1 },		      /* reserved */
		{ FN_AT(1) + 4 + PCI_VENDOR_ID, 0 },  /* another device */
		{ FN_AT(1) + 4 + PCI_COMMAND, 0x01 }, /* I/O decode: not writable */
		{ FN_AT(1) + 4 + 0x45, 1 },	      /* read-only capability byte */
		{ FN_AT(1) + 4 + 0x10, 0x01 },	      /* BAR 0: an I/O BAR's type bit */
		{ FN_AT(1) + 4 + 0x11, 0x01 },	      /* BAR 0: below its 4 KiB size */
		{ FN_AT(1) + 4 + 0x14, 0x10 },	      /* BAR 1: unused, must be 0 */
		{ FN_AT(2) + 4 + 0x18, 0x40 },	      /* BAR 2: below its 256-byte size */
		{ FN_AT(2) - 6, 0x00 },		      /* slot 2's record's tag: not a function */
		{ FN_AT(2) - 4, 0x00 },		      /* slot 2's record 4 bytes short */
	};
	struct snapvm a;
	struct snap_rec_buf rb = { 0 };
	u32 b1, b2;

	snapvm_new(&a);
	drive_bus(&a, &b1, &b2);
	pci_bus_save(a.kvm->pci, &rb);
	ck_assert_uint_eq(rb.len, FN_AT(3) - 6);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		expect_refused(rb.buf, rb.len, bad[i].off, bad[i].v);
	/* Cut: mid-record, before slot 2's record, before any function's, nothing. */
	expect_refused(rb.buf, rb.len, rb.len + rb.len - 1, 0);
	expect_refused(rb.buf, rb.len, rb.len + FN_AT(2) - 6, 0);
	expect_refused(rb.buf, rb.len, rb.len + FN_AT(0) - 6, 0);
	expect_refused(rb.buf, rb.len, rb.len, 0);
	snap_rec_free(&rb);
	snapvm_free(&a);
}
END_TEST

static Suite *pci_suite(void)
{
	Suite *s = suite_create("pci");
	TCase *tc = tcase_create("bus");

	tcase_add_test(tc, test_host_bridge);
	tcase_add_test(tc, test_bad_offsets);
	tcase_add_test(tc, test_register_slots_and_header);
	tcase_add_test(tc, test_register_rejects);
	tcase_add_test(tc, test_bar_sizing_and_move);
	tcase_add_test(tc, test_bar_collision);
	tcase_add_test(tc, test_bar_collision_leaves_no_address);
	tcase_add_test(tc, test_bar_collision_log_bounded);
	tcase_add_test(tc, test_snap_round_trip);
	tcase_add_test(tc, test_snap_hostile);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(pci_suite)

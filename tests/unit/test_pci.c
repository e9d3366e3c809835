/* Unit tests of the PCI bus: config mechanism #1, host bridge, slots, BAR sizing and moving, hooks. */
#include <errno.h>
#include <string.h>

#include "capture.h"
#include "check_main.h"
#include "lkvm/boot.h"
#include "lkvm/kvm.h"
#include "lkvm/pci.h"

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
	struct kvm *kvm = calloc(1, sizeof(*kvm));

	ck_assert_ptr_nonnull(kvm);
	kvm->stop_fd = -1;
	io_bus_init(&kvm->pio);
	io_bus_init(&kvm->mmio);
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
	io_bus_destroy(&kvm->pio);
	io_bus_destroy(&kvm->mmio);
	free(kvm);
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
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(pci_suite)

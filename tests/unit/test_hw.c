/* Unit tests of the small legacy devices: RTC/CMOS, i8042 and reset ports, pvpanic (ISA and PCI). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/dev.h"
#include "lkvm/exitport.h"
#include "lkvm/hw.h"
#include "lkvm/kvm.h"
#include "lkvm/layout.h"
#include "lkvm/pci.h"
#include "lkvm/snap.h"

#include "fake_vm.h"

static struct kvm *vm_new(bool with_pci)
{
	struct kvm *kvm = fake_vm_new(0);

	if (with_pci)
		ck_assert_int_eq(pci_bus_create(kvm), 0);
	return kvm;
}

/* Add one device to the list and build it, as the run does. */
static void up(struct kvm *kvm, int (*add)(struct kvm *kvm))
{
	char err[128];

	ck_assert_int_eq(add(kvm), 0);
	ck_assert_msg(kvm_devs_init(kvm, err, sizeof(err)) == 0, "%s", err);
}

static void vm_free(struct kvm *kvm)
{
	pci_bus_destroy(kvm);
	ck_assert_int_eq(kvm->pio.nr, 0);
	ck_assert_int_eq(kvm->mmio.nr, 0);
	fake_vm_free(kvm);
}

static void outb(struct kvm *kvm, u16 port, u8 v)
{
	ck_assert(io_bus_dispatch(&kvm->pio, NULL, port, &v, 1, true));
}

static u8 inb(struct kvm *kvm, u16 port)
{
	u8 v = 0;

	ck_assert(io_bus_dispatch(&kvm->pio, NULL, port, &v, 1, false));
	return v;
}

static u8 cmos(struct kvm *kvm, u8 idx)
{
	outb(kvm, 0x70, idx | 0x80); /* NMI mask bit must not matter */
	return inb(kvm, 0x71);
}

static int bcd(u8 v)
{
	ck_assert_uint_le(v & 0x0f, 9);
	ck_assert_uint_le(v >> 4, 9);
	return (v >> 4) * 10 + (v & 0x0f);
}

/* Read the clock twice around the host's time so a minute rollover cannot flake. */
START_TEST(test_rtc_time_bcd)
{
	struct kvm *kvm = vm_new(false);
	struct tm tm;
	time_t now;
	int tries = 0;

	up(kvm, rtc_add);
	ck_assert_ptr_nonnull(kvm_dev_find(kvm, "rtc", 0));
	ck_assert_uint_eq(cmos(kvm, 0x0b), 0x02);
	ck_assert_uint_eq(cmos(kvm, 0x0a), 0x26);
	ck_assert_uint_eq(cmos(kvm, 0x0c), 0);
	ck_assert_uint_eq(cmos(kvm, 0x0d), 0x80);
	for (;;) {
		int min = bcd(cmos(kvm, 0x02));
		int hour = bcd(cmos(kvm, 0x04)), mday = bcd(cmos(kvm, 0x07));
		int mon = bcd(cmos(kvm, 0x08)), year = bcd(cmos(kvm, 0x09));
		int cent = bcd(cmos(kvm, 0x32)), wday = bcd(cmos(kvm, 0x06));
		int sec = bcd(cmos(kvm, 0x00));

		now = time(NULL);
		gmtime_r(&now, &tm);
		if (tm.tm_min != min && ++tries < 3)
			continue;
		ck_assert_int_eq(min, tm.tm_min);
		ck_assert_int_eq(hour, tm.tm_hour);
		ck_assert_int_eq(mday, tm.tm_mday);
		ck_assert_int_eq(mon, tm.tm_mon + 1);
		ck_assert_int_eq(cent * 100 + year, tm.tm_year + 1900);
		ck_assert_int_eq(wday, tm.tm_wday + 1);
		ck_assert_int_le(sec, 59);
		break;
	}
	kvm_devs_exit(kvm);
	ck_assert_ptr_null(kvm->devs);
	vm_free(kvm);
}
END_TEST

START_TEST(test_rtc_binary_and_ram)
{
	struct kvm *kvm = vm_new(false);
	struct tm tm;
	time_t now;
	u8 h;

	up(kvm, rtc_add);
	outb(kvm, 0x70, 0x0b);
	outb(kvm, 0x71, 0x06); /* binary, 24h */
	ck_assert_uint_eq(cmos(kvm, 0x0b), 0x06);
	ck_assert_uint_eq(cmos(kvm, 0x32), 20);
	ck_assert_uint_le(cmos(kvm, 0x02), 59);
	now = time(NULL);
	gmtime_r(&now, &tm);
	ck_assert_uint_eq(cmos(kvm, 0x09), (unsigned)(tm.tm_year % 100));

	/* 12-hour binary mode: 1..12 with the PM flag. */
	outb(kvm, 0x70, 0x0b);
	outb(kvm, 0x71, 0x04);
	h = cmos(kvm, 0x04);
	ck_assert_uint_ge(h & 0x7f, 1);
	ck_assert_uint_le(h & 0x7f, 12);

	/* RAM bytes keep what the guest writes; the clock and C/D do not. */
	for (u8 i = 0x0e; i < 0x80; i++) {
		if (i == 0x32)
			continue;
		outb(kvm, 0x70, i);
		outb(kvm, 0x71, (u8)(i ^ 0xa5));
	}
	for (u8 i = 0x0e; i < 0x80; i++)
		if (i != 0x32)
			ck_assert_uint_eq(cmos(kvm, i), (u8)(i ^ 0xa5));
	outb(kvm, 0x70, 0x0d);
	outb(kvm, 0x71, 0x00);
	ck_assert_uint_eq(cmos(kvm, 0x0d), 0x80);
	outb(kvm, 0x70, 0x0a);
	outb(kvm, 0x71, 0xa6); /* UIP cannot be set */
	ck_assert_uint_eq(cmos(kvm, 0x0a), 0x26);
	outb(kvm, 0x70, 0x32);
	outb(kvm, 0x71, 0x99);
	ck_assert_uint_eq(cmos(kvm, 0x32), 20);
	kvm_devs_exit(kvm);
	vm_free(kvm);
}
END_TEST

START_TEST(test_i8042_probe_answers)
{
	struct kvm *kvm = vm_new(false);

	up(kvm, i8042_add);
	ck_assert_uint_eq(inb(kvm, 0x64) & 0x03, 0); /* nothing pending, input empty */
	outb(kvm, 0x64, 0xaa);
	ck_assert_uint_eq(inb(kvm, 0x64) & 0x01, 0x01);
	ck_assert_uint_eq(inb(kvm, 0x60), 0x55);
	ck_assert_uint_eq(inb(kvm, 0x64) & 0x01, 0);
	outb(kvm, 0x64, 0x60);
	outb(kvm, 0x60, 0x45);
	outb(kvm, 0x64, 0x20);
	ck_assert_uint_eq(inb(kvm, 0x60), 0x45);
	outb(kvm, 0x64, 0xd3); /* AUX loop does not echo: Linux then finds no mouse */
	outb(kvm, 0x60, 0x5a);
	ck_assert_uint_ne(inb(kvm, 0x60), 0x5a);
	outb(kvm, 0x64, 0xa9);
	ck_assert_uint_eq(inb(kvm, 0x60), 0x01);
	ck_assert(!atomic_load(&kvm->stopping));
	kvm_devs_exit(kvm);
	ck_assert_ptr_null(kvm->devs);
	vm_free(kvm);
}
END_TEST

START_TEST(test_i8042_reset)
{
	struct kvm *kvm = vm_new(false);

	up(kvm, i8042_add);
	atomic_store(&kvm->exit_status, -1);
	outb(kvm, 0x64, 0xfe);
	ck_assert(atomic_load(&kvm->stopping));
	ck_assert_int_eq(atomic_load(&kvm->exit_status), EXIT_GUEST_OK);
	ck_assert_str_eq(kvm->exit_reason, "guest reset (i8042)");
	kvm_devs_exit(kvm);
	vm_free(kvm);
}
END_TEST

START_TEST(test_reset_ports)
{
	struct kvm *kvm = vm_new(false);

	/* Without PCI, 0xCF9 is i8042.c's. */
	up(kvm, i8042_add);
	outb(kvm, 0xcf9, 0x02); /* selects the type only */
	outb(kvm, 0x92, 0x02);	/* A20 only */
	ck_assert_uint_eq(inb(kvm, 0x92), 0x02);
	ck_assert(!atomic_load(&kvm->stopping));
	outb(kvm, 0xcf9, 0x06);
	ck_assert(atomic_load(&kvm->stopping));
	ck_assert_str_eq(kvm->exit_reason, "guest reset (port 0xcf9)");
	kvm_devs_exit(kvm);
	vm_free(kvm);

	/* With PCI, the config address range forwards it; 0x92 fast reset. */
	kvm = vm_new(true);
	up(kvm, i8042_add);
	outb(kvm, 0xcf9, 0x0e);
	ck_assert(atomic_load(&kvm->stopping));
	ck_assert_int_eq(atomic_load(&kvm->exit_status), EXIT_GUEST_OK);
	kvm_devs_exit(kvm);
	vm_free(kvm);

	kvm = vm_new(true);
	up(kvm, i8042_add);
	outb(kvm, 0x92, 0x01);
	ck_assert(atomic_load(&kvm->stopping));
	ck_assert_str_eq(kvm->exit_reason, "guest reset (port 0x92)");
	kvm_devs_exit(kvm);
	vm_free(kvm);
}
END_TEST

START_TEST(test_pvpanic_port)
{
	struct kvm *kvm = vm_new(false);

	up(kvm, pvpanic_add);
	ck_assert_uint_eq(inb(kvm, PVPANIC_PORT), 0x03);
	outb(kvm, PVPANIC_PORT, 0x02); /* crash kernel loaded: keep going */
	ck_assert(!atomic_load(&kvm->stopping));
	outb(kvm, PVPANIC_PORT, 0x01);
	ck_assert(atomic_load(&kvm->stopping));
	ck_assert_int_eq(atomic_load(&kvm->exit_status), EXIT_GUEST_PANIC);
	ck_assert_str_eq(kvm->exit_reason, "guest panicked (pvpanic)");
	kvm_devs_exit(kvm);
	ck_assert_ptr_null(kvm->devs);
	vm_free(kvm);
}
END_TEST

START_TEST(test_pvpanic_pci)
{
	struct kvm *kvm = vm_new(true);
	struct pci_bus *bus;
	u8 d[4] = { 0 };
	u32 bar;

	up(kvm, pvpanic_add);
	bus = kvm->pci;
	ck_assert_uint_eq(pci_cfg_read(bus, 1, PCI_VENDOR_ID, 4), 0x00111b36);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, 0x08, 4), 0x08800001);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, PCI_SUBSYSTEM_VENDOR_ID, 4), 0x11001af4);
	bar = pci_cfg_read(bus, 1, 0x10, 4);
	ck_assert_uint_eq(bar & 0xf, 0);
	ck_assert_uint_ne(bar, 0);
	pci_cfg_write(bus, 1, 0x10, 4, 0xffffffffu);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, 0x10, 4), 0xfffff000u);
	pci_cfg_write(bus, 1, 0x10, 4, bar);

	ck_assert(io_bus_dispatch(&kvm->mmio, NULL, bar, d, 1, false));
	ck_assert_uint_eq(d[0], 0x03);
	d[0] = 0x01;
	ck_assert(io_bus_dispatch(&kvm->mmio, NULL, bar + 4, d, 1, true)); /* not byte 0 */
	ck_assert(!atomic_load(&kvm->stopping));
	ck_assert(io_bus_dispatch(&kvm->mmio, NULL, bar, d, 1, true));
	ck_assert(atomic_load(&kvm->stopping));
	ck_assert_int_eq(atomic_load(&kvm->exit_status), EXIT_GUEST_PANIC);
	kvm_devs_exit(kvm);
	ck_assert_uint_eq(pci_cfg_read(bus, 1, 0, 4), 0xffffffffu);
	vm_free(kvm);
}
END_TEST

/* Destroying the bus first must leave pvpanic's exit safe. */
START_TEST(test_destroy_order)
{
	struct kvm *kvm = vm_new(true);

	up(kvm, pvpanic_add);
	pci_bus_destroy(kvm);
	kvm_devs_exit(kvm);
	vm_free(kvm);
}
END_TEST

/* ---- Snapshot ops (issue 31) ---- */

/* The device's section as the walker builds it: its name and index, then its save op. */
static void dev_save(struct kvm *kvm, const char *name, struct snap_rec_buf *b)
{
	struct kvm_dev *d = kvm_dev_find(kvm, name, 0);
	char err[128] = "";
	u32 index = 0;

	ck_assert_ptr_nonnull(d);
	*b = (struct snap_rec_buf){ 0 };
	snap_rec_put(b, DEV_SNAP_TAG_NAME, name, strlen(name));
	snap_rec_put(b, DEV_SNAP_TAG_INDEX, &index, sizeof(index));
	ck_assert_msg(d->ops->save(d, b, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(b->err, 0);
}

static int dev_load(struct kvm *kvm, const char *name, const void *sec, size_t len, char *err,
		    size_t errlen)
{
	struct kvm_dev *d = kvm_dev_find(kvm, name, 0);

	ck_assert_ptr_nonnull(d);
	err[0] = '\0';
	return d->ops->load(d, sec, len, err, errlen);
}

/* Where the data of the first record of tag starts in b. */
static size_t rec_off(const struct snap_rec_buf *b, u16 tag)
{
	struct snap_rec_iter it = { b->buf, b->len };
	const void *data;
	u16 t;
	u32 len;

	while (snap_rec_next(&it, &t, &data, &len) == 1)
		if (t == tag)
			return (size_t)((const u8 *)data - b->buf);
	ck_abort_msg("no record %u", tag);
	return 0;
}

struct patch {
	unsigned off;
	u8 v;
};

/* Each patch of the device's record (and the record cut short, and gone) is refused
 * with one line, on a fresh device. */
static void expect_refusals(int (*add)(struct kvm *kvm), const char *name,
			    const struct snap_rec_buf *good, const struct patch *p, size_t n)
{
	size_t at = rec_off(good, DEV_SNAP_TAG_MIN);
	u8 copy[512];
	char err[128];

	ck_assert_uint_le(good->len, sizeof(copy));
	for (size_t i = 0; i <= n + 2; i++) {
		struct kvm *kvm = vm_new(false);
		size_t len = good->len;

		up(kvm, add);
		memcpy(copy, good->buf, good->len);
		if (i < n)
			copy[at + p[i].off] = p[i].v;
		else if (i == n)
			len--; /* the record runs past the section's end */
		else if (i == n + 1)
			len = at - 6; /* the device's record is missing */
		else
			len = 0;
		ck_assert_msg(dev_load(kvm, name, copy, len, err, sizeof(err)) == -EINVAL,
			      "case %zu loaded", i);
		ck_assert_msg(err[0] && !strchr(err, '\n'), "case %zu: '%s'", i, err);
		kvm_devs_exit(kvm);
		vm_free(kvm);
	}
}

/* RTC: B takes A's index, mode and RAM bytes; the clock still reads the host's time. */
START_TEST(test_rtc_snap)
{
	static const struct patch bad[] = {
		{ 0, 0x80 },	 { 3, 1 },	     { 8 + 0x0a, 0xa6 }, { 8 + 0x00, 0x12 },
		{ 8 + 0x0c, 1 }, { 8 + 0x0d, 0x80 }, { 8 + 0x32, 0x19 },
	};
	struct kvm *a = vm_new(false), *b = vm_new(false);
	struct snap_rec_buf rb;
	char err[128];

	up(a, rtc_add);
	up(b, rtc_add);
	outb(a, 0x70, 0x0b);
	outb(a, 0x71, 0x06); /* binary, 24h */
	for (u8 i = 0x0e; i < 0x80; i++) {
		outb(a, 0x70, i);
		outb(a, 0x71, (u8)(i * 7));
	}
	outb(a, 0x70, 0x3f);
	dev_save(a, "rtc", &rb);
	ck_assert_msg(dev_load(b, "rtc", rb.buf, rb.len, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(inb(b, 0x70), 0x3f);
	ck_assert_uint_eq(inb(b, 0x71), inb(a, 0x71));
	for (u8 i = 0x0a; i < 0x80; i++)
		if (i != 0x32)
			ck_assert_uint_eq(cmos(b, i), cmos(a, i));
	ck_assert_uint_eq(cmos(b, 0x32), 20); /* binary century, from the host's clock */
	expect_refusals(rtc_add, "rtc", &rb, bad, ARRAY_SIZE(bad));
	snap_rec_free(&rb);
	kvm_devs_exit(a);
	kvm_devs_exit(b);
	vm_free(a);
	vm_free(b);
}
END_TEST

/* i8042: a written CTR, a reply waiting in the output buffer, a command waiting for its
 * parameter: B answers and takes the parameter as A does. */
START_TEST(test_i8042_snap)
{
	static const struct patch bad[] = { { 1, 0x20 }, { 1, 0xaa }, { 3, 2 }, { 4, 1 }, { 7, 1 } };
	struct kvm *a = vm_new(false), *b = vm_new(false);
	struct snap_rec_buf rb;
	char err[128];

	up(a, i8042_add);
	up(b, i8042_add);
	outb(a, 0x64, 0x60);
	outb(a, 0x60, 0x47);
	outb(a, 0x64, 0xaa); /* 0x55 waits in the output buffer */
	outb(a, 0x64, 0x60); /* and a CTR write waits for its byte */
	dev_save(a, "i8042", &rb);
	ck_assert_msg(dev_load(b, "i8042", rb.buf, rb.len, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(inb(b, 0x64), inb(a, 0x64));
	ck_assert_uint_eq(inb(b, 0x64) & 0x01, 0x01);
	ck_assert_uint_eq(inb(b, 0x60), 0x55);
	ck_assert_uint_eq(inb(b, 0x64), inb(a, 0x64) & ~0x01);
	outb(b, 0x60, 0x61);
	outb(b, 0x64, 0x20);
	ck_assert_uint_eq(inb(b, 0x60), 0x61);
	ck_assert(!atomic_load(&b->stopping));
	expect_refusals(i8042_add, "i8042", &rb, bad, ARRAY_SIZE(bad));
	snap_rec_free(&rb);
	kvm_devs_exit(a);
	kvm_devs_exit(b);
	vm_free(a);
	vm_free(b);
}
END_TEST

/* pvpanic keeps nothing of the guest's: its section is the walker's records only, and
 * loading it leaves the port as it was. */
START_TEST(test_pvpanic_snap)
{
	struct kvm *kvm = vm_new(false);
	struct snap_rec_buf rb;
	char err[128];

	up(kvm, pvpanic_add);
	dev_save(kvm, "pvpanic", &rb);
	ck_assert_uint_eq(rb.len, 6 + strlen("pvpanic") + 6 + 4);
	ck_assert_int_eq(dev_load(kvm, "pvpanic", rb.buf, rb.len, err, sizeof(err)), 0);
	ck_assert_uint_eq(inb(kvm, PVPANIC_PORT), 0x03);
	snap_rec_free(&rb);
	kvm_devs_exit(kvm);
	vm_free(kvm);
}
END_TEST

static int no_irq(struct kvm *kvm, u32 irq, int level)
{
	return 0;
}

/* The legacy machine as the run builds it (the bus first, then the legacy devices), every
 * device on the list. */
static struct kvm *legacy_vm(void)
{
	struct kvm *kvm = vm_new(false);
	char err[128];

	ck_assert_int_eq(pci_bus_add(kvm), 0);
	ck_assert_int_eq(serial8250_add(kvm), 0);
	ck_assert_int_eq(rtc_add(kvm), 0);
	ck_assert_int_eq(i8042_add(kvm), 0);
	ck_assert_int_eq(pvpanic_add(kvm), 0);
	ck_assert_int_eq(exitport_add(kvm), 0);
	ck_assert_msg(kvm_devs_init(kvm, err, sizeof(err)) == 0, "%s", err);
	serial8250_set_hooks(kvm_dev_find(kvm, "uart", 0)->priv, no_irq, NULL);
	return kvm;
}

/* Through the device list's walkers and a snapshot file: every legacy device has a save op,
 * and B built with the same devices comes back as A was (pvpanic's BAR moved by the guest
 * included: the bus loads before the devices on it). */
START_TEST(test_legacy_machine_snap)
{
	struct snap_machine m = { .nr_vcpus = 1, .ram_bytes = 4096 };
	struct kvm *a = legacy_vm(), *b = legacy_vm();
	char path[] = "/tmp/lkvm-test-hw-XXXXXX", err[256] = "";
	struct snap_writer *w;
	struct snap_reader *r;
	u8 d = 0;
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	close(fd);
	pci_cfg_write(a->pci, 1, 0x10, 4, 0xe0000000u); /* pvpanic's BAR, moved */
	outb(a, 0x3f8 + 7, 0x5a);			/* UART scratch */
	outb(a, 0x70, 0x40);
	outb(a, 0x71, 0x99);
	outb(a, 0x64, 0xaa);
	ck_assert_int_eq(kvm_devs_can_save(a, err, sizeof(err)), 0);
	ck_assert_int_eq(snap_writer_open(&w, path, &m, err, sizeof(err)), 0);
	ck_assert_msg(kvm_devs_save(a, w, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(snap_writer_finish(w, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(snap_open(&r, path, 0, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(kvm_devs_load(b, r, err, sizeof(err)) == 0, "%s", err);
	snap_close(r);
	unlink(path);
	ck_assert_uint_eq(pci_cfg_read(b->pci, 1, 0x10, 4), 0xe0000000u);
	ck_assert(io_bus_dispatch(&b->mmio, NULL, 0xe0000000u, &d, 1, false));
	ck_assert_uint_eq(d, 0x03);
	ck_assert_uint_eq(inb(b, 0x3f8 + 7), 0x5a);
	ck_assert_uint_eq(cmos(b, 0x40), 0x99);
	ck_assert_uint_eq(inb(b, 0x60), 0x55);
	kvm_devs_exit(a);
	kvm_devs_exit(b);
	vm_free(a);
	vm_free(b);
}
END_TEST

static Suite *hw_suite(void)
{
	Suite *s = suite_create("hw");
	TCase *rtc = tcase_create("rtc");
	TCase *kbd = tcase_create("i8042");
	TCase *pv = tcase_create("pvpanic");

	tcase_add_test(rtc, test_rtc_time_bcd);
	tcase_add_test(rtc, test_rtc_binary_and_ram);
	tcase_add_test(rtc, test_rtc_snap);
	tcase_add_test(kbd, test_i8042_probe_answers);
	tcase_add_test(kbd, test_i8042_reset);
	tcase_add_test(kbd, test_reset_ports);
	tcase_add_test(kbd, test_i8042_snap);
	tcase_add_test(pv, test_pvpanic_port);
	tcase_add_test(pv, test_pvpanic_pci);
	tcase_add_test(pv, test_destroy_order);
	tcase_add_test(pv, test_pvpanic_snap);
	tcase_add_test(pv, test_legacy_machine_snap);
	suite_add_tcase(s, rtc);
	suite_add_tcase(s, kbd);
	suite_add_tcase(s, pv);
	return s;
}

LKVM_CHECK_MAIN(hw_suite)

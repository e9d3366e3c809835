/* Unit tests for the ACPI tables (read back by the spec's byte offsets) and the PM1 registers' power-off. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "check_main.h"
#include "lkvm/acpi.h"
#include "lkvm/dev.h"
#include "lkvm/io.h"
#include "lkvm/kvm.h"
#include "lkvm/layout.h"
#include "lkvm/snap.h"

#include "fake_vm.h"

#define BASE 0xE0000u

static u8 tab[ACPI_TABLES_MAX];

static u8 sum(const u8 *p, size_t len)
{
	u8 s = 0;

	while (len--)
		s += *p++;
	return s;
}

static u32 le32(const u8 *p)
{
	return (u32)p[0] | (u32)p[1] << 8 | (u32)p[2] << 16 | (u32)p[3] << 24;
}

static u64 le64(const u8 *p)
{
	return le32(p) | (u64)le32(p + 4) << 32;
}

/* The table at guest address a: its signature, a length inside the buffer, bytes summing to 0. */
static const u8 *table(u64 a, const char *sig, int len)
{
	const u8 *t;

	ck_assert_uint_ge(a, BASE);
	ck_assert_uint_lt(a - BASE + 36, (u64)len);
	t = tab + (a - BASE);
	ck_assert_mem_eq(t, sig, 4);
	ck_assert_uint_le(a - BASE + le32(t + 4), (u64)len);
	ck_assert_uint_eq(sum(t, le32(t + 4)), 0);
	return t;
}

/* PkgLength at p: the package's length (from p) and how many bytes encode it. */
static size_t pkglen(const u8 *p, size_t *nbytes)
{
	size_t n = (size_t)(p[0] >> 6), v = p[0] & (n ? 0x0f : 0x3f);

	for (size_t i = 0; i < n; i++)
		v |= (size_t)p[1 + i] << (4 + 8 * i);
	*nbytes = n + 1;
	return v;
}

/* The DSDT: Name(_S5_, Package(4) {5, 5, 0, 0}), then Scope(\_SB_) ending where the table
 * ends, holding Device(PCI0) with the PNP0A03 id, _CRS and a _PRT of 31 slots. */
static void check_dsdt(const u8 *d)
{
	u32 len = le32(d + 4);
	const u8 *p = d + 36, *prt;
	size_t n, nb;

	ck_assert_mem_eq(p, "\x08_S5_\x12", 6);
	n = pkglen(p + 6, &nb);
	ck_assert_mem_eq(p + 6 + nb, "\x04\x0a\x05\x0a\x05\x00\x00", 7);
	p += 6 + n;
	ck_assert_uint_eq(p[0], 0x10); /* Scope */
	n = pkglen(p + 1, &nb);
	ck_assert_ptr_eq(p + 1 + n, d + len);
	ck_assert_mem_eq(p + 1 + nb, "\\_SB_\x5b\x82", 7);
	p += 1 + nb + 7;
	n = pkglen(p, &nb);
	ck_assert_ptr_eq(p + n, d + len); /* the device is all of the scope */
	ck_assert_mem_eq(p + nb, "PCI0\x08_HID\x0c\x41\xd0\x0a\x03", 13);
	ck_assert_ptr_nonnull(memmem(d, len, "\x08_CRS\x11", 6));
	prt = memmem(d, len, "\x08_PRT\x12", 6);
	ck_assert_ptr_nonnull(prt);
	n = pkglen(prt + 6, &nb);
	ck_assert_uint_eq(prt[6 + nb], 31);
	/* Slot 5's entry: address 0x0005ffff, INTA, GSI MPTABLE_PCI_PIN(5). */
	ck_assert_ptr_nonnull(memmem(prt, n, "\x0c\xff\xff\x05\x00\x00\x00\x0a\x15", 9));
}

static void check_tables(int nr_cpus)
{
	int len = acpi_build(tab, sizeof(tab), BASE, nr_cpus);
	const u8 *xsdt, *rsdt, *fadt = NULL, *madt = NULL, *e;
	int lapics = 0;

	ck_assert_int_gt(len, 0);
	ck_assert_mem_eq(tab, "RSD PTR ", 8);
	ck_assert_uint_eq(sum(tab, 20), 0);
	ck_assert_uint_eq(sum(tab, 36), 0);
	ck_assert_uint_eq(tab[15], 2);
	xsdt = table(le64(tab + 24), "XSDT", len);
	rsdt = table(le32(tab + 16), "RSDT", len);
	ck_assert_uint_eq(le32(xsdt + 4), 36 + 2 * 8);
	ck_assert_uint_eq(le32(rsdt + 4), 36 + 2 * 4);
	for (int i = 0; i < 2; i++) {
		u64 a = le64(xsdt + 36 + 8 * i);

		ck_assert_uint_eq(a, le32(rsdt + 36 + 4 * i));
		if (!memcmp(tab + (a - BASE), "FACP", 4))
			fadt = table(a, "FACP", len);
		else
			madt = table(a, "APIC", len);
	}
	ck_assert_ptr_nonnull(fadt);
	ck_assert_ptr_nonnull(madt);
	ck_assert_uint_eq(le32(fadt + 4), 276);
	ck_assert_uint_eq(fadt[46], ACPI_SCI_IRQ);
	ck_assert_uint_eq(le32(fadt + 48), 0); /* no SMI_CMD: ACPI mode already */
	ck_assert_uint_eq(le32(fadt + 56), ACPI_PM1_EVT_PORT);
	ck_assert_uint_eq(le32(fadt + 64), ACPI_PM1_CNT_PORT);
	ck_assert_uint_eq(fadt[88], 4);
	ck_assert_uint_eq(fadt[89], 2);
	ck_assert_uint_eq(le64(fadt + 172 + 4), ACPI_PM1_CNT_PORT); /* X_PM1a_CNT_BLK */
	/* The FACS: no checksum, 64 bytes, 64-byte aligned. */
	ck_assert_mem_eq(tab + (le32(fadt + 36) - BASE), "FACS\x40\0\0\0", 8);
	ck_assert_uint_eq(le32(fadt + 36) % 64, 0);
	ck_assert_uint_eq(le64(fadt + 140), le32(fadt + 40));
	check_dsdt(table(le64(fadt + 140), "DSDT", len));

	ck_assert_uint_eq(le32(madt + 36), LAPIC_ADDR);
	for (e = madt + 44; e < madt + le32(madt + 4); e += e[1]) {
		ck_assert_uint_ge(e[1], 2);
		if (e[0] == 0) {
			ck_assert_uint_eq(e[3], lapics); /* APIC id */
			ck_assert_uint_eq(le32(e + 4), 1);
			lapics++;
		} else if (e[0] == 1) {
			ck_assert_uint_eq(e[2], nr_cpus);
			ck_assert_uint_eq(le32(e + 4), IOAPIC_ADDR);
		}
	}
	ck_assert_ptr_eq(e, madt + le32(madt + 4));
	ck_assert_int_eq(lapics, nr_cpus);
}

START_TEST(test_tables)
{
	check_tables(1);
	check_tables(2);
	check_tables(254);
}
END_TEST

START_TEST(test_refusals)
{
	static u8 small[256];

	ck_assert_int_eq(acpi_build(tab, sizeof(tab), BASE, 0), -EINVAL);
	ck_assert_int_eq(acpi_build(tab, sizeof(tab), BASE, 255), -EINVAL);
	ck_assert_int_eq(acpi_build(small, sizeof(small), BASE, 1), -ENOSPC);
	ck_assert_int_eq(acpi_build(tab, 1024, BASE, 254), -ENOSPC);
}
END_TEST

/* In guest memory at ACPI_TABLES_ADDR, below the MP table; too little RAM is an error. */
START_TEST(test_write)
{
	size_t size = MiB(2);
	u8 *ram = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct guest_mem m;
	char err[128] = "";

	ck_assert_ptr_ne(ram, MAP_FAILED);
	ck_assert_int_eq(gmem_init(&m, ram, size), 0);
	ck_assert_int_eq(acpi_write(&m, 4, err, sizeof(err)), 0);
	ck_assert_mem_eq(ram + ACPI_TABLES_ADDR, "RSD PTR ", 8);
	ck_assert_int_eq(acpi_write(&m, 300, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "ACPI tables: 300 CPUs is out of range (1..254)");
	ck_assert_int_eq(gmem_init(&m, ram, 0x80000), 0);
	ck_assert_int_eq(acpi_write(&m, 1, err, sizeof(err)), -EFAULT);
	munmap(ram, size);
}
END_TEST

/* ---- the PM1 registers ---- */

static struct kvm *pm_vm(void)
{
	struct kvm *kvm = fake_vm_new(0);
	char err[128];

	atomic_store(&kvm->exit_status, -1);
	ck_assert_int_eq(acpi_pm_add(kvm), 0);
	ck_assert_msg(kvm_devs_init(kvm, err, sizeof(err)) == 0, "%s", err);
	return kvm;
}

static void pm_free(struct kvm *kvm)
{
	kvm_devs_exit(kvm);
	ck_assert_int_eq(kvm->pio.nr, 0);
	fake_vm_free(kvm);
}

static void out(struct kvm *kvm, u16 port, u32 v, u32 len)
{
	ck_assert(io_bus_dispatch(&kvm->pio, NULL, port, (u8 *)&v, len, true));
}

static u32 in(struct kvm *kvm, u16 port, u32 len)
{
	u32 v = 0;

	ck_assert(io_bus_dispatch(&kvm->pio, NULL, port, (u8 *)&v, len, false));
	return v;
}

#define S5 (ACPI_SLP_TYP_S5 << ACPI_PM1_CNT_SLP_TYP_SHIFT)

/* ACPICA's sequence: SLP_TYP alone, then SLP_TYP|SLP_EN: the second write ends the run with
 * 0, by a power-off, also under `-- CMD` (_i 1), whose other guest ends (a reset) give 125:
 * `lkvm run -- poweroff -f` ends with 0. */
START_TEST(test_pm_poweroff)
{
	struct kvm *kvm = pm_vm();
	int status;

	if (_i == 1)
		kvm->guest_end_status = EXIT_GUEST_NO_STATUS; /* as host_root_add_devices sets it */
	ck_assert_uint_eq(in(kvm, ACPI_PM1_CNT_PORT, 2), ACPI_PM1_CNT_SCI_EN);
	ck_assert_uint_eq(in(kvm, ACPI_PM1_EVT_PORT, 2), 0);
	out(kvm, ACPI_PM1_EVT_PORT + 2, 0x0120, 2); /* enable: power button, RTC */
	ck_assert_uint_eq(in(kvm, ACPI_PM1_EVT_PORT + 2, 2), 0x0120);
	out(kvm, ACPI_PM1_EVT_PORT, 0xffff, 2); /* clear every status bit */
	out(kvm, ACPI_PM1_CNT_PORT, S5 | ACPI_PM1_CNT_SCI_EN, 2);
	ck_assert_uint_eq(in(kvm, ACPI_PM1_CNT_PORT, 2), S5 | ACPI_PM1_CNT_SCI_EN);
	ck_assert(!atomic_load(&kvm->stopping));
	out(kvm, ACPI_PM1_CNT_PORT, S5 | ACPI_PM1_CNT_SLP_EN | ACPI_PM1_CNT_SCI_EN, 2);
	ck_assert(atomic_load(&kvm->stopping));
	status = atomic_load(&kvm->exit_status);
	ck_assert_int_eq(status, EXIT_GUEST_OK);
	ck_assert_int_eq(kvm->exit_by, KVM_END_POWEROFF);
	ck_assert_str_eq(kvm->exit_reason, "guest powered off");
	pm_free(kvm);
}
END_TEST

/* A hostile guest: every value at every port and width. Only SLP_EN with SLP_TYP 5 in the
 * control word's high byte ends the run; nothing else does, and nothing crashes. */
START_TEST(test_pm_hostile)
{
	static const u32 widths[] = { 1, 2, 4 };

	for (u32 v = 0; v < 0x10000; v += 0x3f) {
		for (u16 port = ACPI_PM1_EVT_PORT; port < ACPI_PM1_CNT_PORT + 2; port++) {
			for (size_t w = 0; w < ARRAY_SIZE(widths); w++) {
				struct kvm *kvm = pm_vm();
				u32 at = ACPI_PM1_CNT_PORT + 1 - port, hi, len = widths[w];
				u32 d = v | v << 16;
				bool inside = port + len <= ACPI_PM1_CNT_PORT + 2, off;

				/* A straddling access is the bus's to refuse (unclaimed). */
				ck_assert(io_bus_dispatch(&kvm->pio, NULL, port, (u8 *)&d, len,
							  true) == inside);
				/* The byte that lands on the control word's high byte, if any. */
				hi = inside && at < len ? ((v | v << 16) >> (8 * at)) & 0xff : 0;
				off = (hi & 0x20) && ((hi >> 2) & 7) == ACPI_SLP_TYP_S5;
				ck_assert_msg(atomic_load(&kvm->stopping) == off,
					      "port %#x len %u value %#x", port, len, v);
				(void)io_bus_dispatch(&kvm->pio, NULL, port, (u8 *)&d, len, false);
				pm_free(kvm);
			}
		}
	}
}
END_TEST

static void pm_save(struct kvm *kvm, struct snap_rec_buf *b)
{
	struct kvm_dev *d = kvm_dev_find(kvm, "acpi-pm", 0);
	char err[128] = "";

	*b = (struct snap_rec_buf){ 0 };
	ck_assert_msg(d->ops->save(d, b, err, sizeof(err)) == 0, "%s", err);
}

static int pm_load(struct kvm *kvm, const void *sec, size_t len, char *err)
{
	struct kvm_dev *d = kvm_dev_find(kvm, "acpi-pm", 0);

	err[0] = 0;
	return d->ops->load(d, sec, len, err, 128);
}

/* B takes A's enable and control words; a record with bits no guest could have written,
 * cut short, or missing is refused with a one-line reason. */
START_TEST(test_pm_snap)
{
	struct kvm *a = pm_vm(), *b = pm_vm();
	struct snap_rec_buf rb;
	char err[128];
	u8 copy[64];
	static const struct {
		unsigned off;
		u8 v;
	} bad[] = { { 0, 0x02 }, { 1, 0x80 }, { 2, 0x01 }, { 3, 0x20 }, { 4, 1 }, { 7, 1 } };

	out(a, ACPI_PM1_EVT_PORT + 2, 0x0021, 2);
	out(a, ACPI_PM1_CNT_PORT, S5, 2);
	pm_save(a, &rb);
	ck_assert_int_eq(pm_load(b, rb.buf, rb.len, err), 0);
	ck_assert_uint_eq(in(b, ACPI_PM1_EVT_PORT + 2, 2), 0x0021);
	ck_assert_uint_eq(in(b, ACPI_PM1_CNT_PORT, 2), S5 | ACPI_PM1_CNT_SCI_EN);
	ck_assert_uint_le(rb.len, sizeof(copy));
	for (size_t i = 0; i < ARRAY_SIZE(bad) + 2; i++) {
		size_t len = rb.len;

		memcpy(copy, rb.buf, rb.len);
		if (i < ARRAY_SIZE(bad))
			copy[rb.len - 8 + bad[i].off] = bad[i].v;
		else
			len = i == ARRAY_SIZE(bad) ? rb.len - 1 : 0;
		ck_assert_msg(pm_load(b, copy, len, err) == -EINVAL, "case %zu loaded", i);
		ck_assert_str_eq(err, "the PM1 record is missing or malformed");
	}
	snap_rec_free(&rb);
	pm_free(a);
	pm_free(b);
}
END_TEST

static Suite *acpi_suite(void)
{
	Suite *s = suite_create("acpi");
	TCase *t = tcase_create("tables");
	TCase *pm = tcase_create("pm");

	tcase_add_test(t, test_tables);
	tcase_add_test(t, test_refusals);
	tcase_add_test(t, test_write);
	tcase_add_loop_test(pm, test_pm_poweroff, 0, 2);
	tcase_add_test(pm, test_pm_hostile);
	tcase_add_test(pm, test_pm_snap);
	tcase_set_timeout(pm, 60);
	suite_add_tcase(s, t);
	suite_add_tcase(s, pm);
	return s;
}

LKVM_CHECK_MAIN(acpi_suite)

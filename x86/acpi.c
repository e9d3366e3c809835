/* The ACPI tables: RSDP -> RSDT/XSDT -> FADT (PM1 ports, FACS, DSDT) and MADT, built once before boot. */
#include <errno.h>
#include <string.h>

#include "lkvm/acpi.h"
#include "lkvm/layout.h"

#define ACPI_OEM_ID "LKVM  "
#define ACPI_OEM_TABLE "LKVMVM  "
#define ACPI_CREATOR "LKVM"
#define ACPI_MAX_CPUS 254 /* as the MP table: 8-bit APIC ids, 0xff broadcast, IOAPIC nr_cpus */
#define TABLE_ALIGN 64	  /* the FACS must be 64-byte aligned; the others share it */

/* The 36-byte header every table but the RSDP and FACS starts with (ACPI 6.5 §5.2.6). */
struct acpi_header {
	char signature[4];
	u32 length;
	u8 revision;
	u8 checksum;
	char oem_id[6];
	char oem_table_id[8];
	u32 oem_revision;
	char creator_id[4];
	u32 creator_revision;
} __attribute__((packed));

struct acpi_rsdp {
	char signature[8];
	u8 checksum; /* of the first 20 bytes (the ACPI 1.0 part) */
	char oem_id[6];
	u8 revision;
	u32 rsdt;
	u32 length;
	u64 xsdt;
	u8 ext_checksum; /* of all 36 */
	u8 reserved[3];
} __attribute__((packed));

struct acpi_gas {
	u8 space; /* 1: system I/O */
	u8 bit_width;
	u8 bit_offset;
	u8 access_size; /* 1 byte, 2 word, 3 dword */
	u64 address;
} __attribute__((packed));

/* FADT revision 6 (ACPI 6.5 §5.2.9); the fields lkvm leaves zero are only padding here. */
struct acpi_fadt {
	struct acpi_header h;
	u32 facs;
	u32 dsdt;
	u8 reserved0;
	u8 pm_profile;
	u16 sci_int;
	u32 smi_cmd; /* 0: no SMI port, the machine is in ACPI mode already */
	u8 unused0[4];
	u32 pm1a_evt_blk;
	u32 pm1b_evt_blk;
	u32 pm1a_cnt_blk;
	u8 unused1[20];
	u8 pm1_evt_len;
	u8 pm1_cnt_len;
	u8 unused2[6];
	u16 p_lvl2_lat;
	u16 p_lvl3_lat;
	u8 unused3[9];
	u16 iapc_boot_arch;
	u8 reserved1;
	u32 flags;
	u8 unused4[15];
	u8 minor_revision;
	u64 x_facs;
	u64 x_dsdt;
	struct acpi_gas x_pm1a_evt_blk;
	struct acpi_gas x_pm1b_evt_blk;
	struct acpi_gas x_pm1a_cnt_blk;
	u8 unused5[5 * 12 + 2 * 12 + 8];
} __attribute__((packed));

struct acpi_facs {
	char signature[4];
	u32 length;
	u8 unused[56];
} __attribute__((packed));

struct madt_lapic {
	u8 type, length, processor_uid, apic_id;
	u32 flags; /* 1: enabled */
} __attribute__((packed));

struct madt_ioapic {
	u8 type, length, id, reserved;
	u32 address;
	u32 gsi_base;
} __attribute__((packed));

struct madt_iso {
	u8 type, length, bus, source;
	u32 gsi;
	u16 flags;
} __attribute__((packed));

struct madt_lapic_nmi {
	u8 type, length, processor_uid;
	u16 flags;
	u8 lint;
} __attribute__((packed));

_Static_assert(sizeof(struct acpi_header) == 36, "ACPI header is 36 bytes");
_Static_assert(sizeof(struct acpi_rsdp) == 36, "RSDP is 36 bytes");
_Static_assert(sizeof(struct acpi_fadt) == 276, "FADT revision 6 is 276 bytes");
_Static_assert(offsetof(struct acpi_fadt, iapc_boot_arch) == 109 &&
		       offsetof(struct acpi_fadt, flags) == 112 &&
		       offsetof(struct acpi_fadt, minor_revision) == 131 &&
		       offsetof(struct acpi_fadt, x_pm1a_cnt_blk) == 172,
	       "FADT field offsets as the spec gives them");
_Static_assert(sizeof(struct madt_lapic) == 8 && sizeof(struct madt_ioapic) == 12 &&
		       sizeof(struct madt_iso) == 10 && sizeof(struct madt_lapic_nmi) == 6,
	       "MADT entry sizes");

#define FADT_WBINVD (1u << 0)
#define FADT_PROC_C1 (1u << 2)
#define FADT_PWR_BUTTON (1u << 4) /* set: no fixed-feature power button */
#define FADT_SLP_BUTTON (1u << 5)
/* IAPC_BOOT_ARCH: legacy ISA devices and an 8042 exist (lkvm has both), so Linux keeps
 * probing the i8042 the reset path uses. */
#define BOOT_ARCH_LEGACY_DEVICES (1u << 0)
#define BOOT_ARCH_8042 (1u << 1)
#define MADT_PCAT_COMPAT 1u /* the 8259 pair exists too */

static u8 checksum(const u8 *p, size_t len)
{
	u8 sum = 0;

	while (len--)
		sum += *p++;
	return (u8)-sum;
}

/* Fill a header at t (its table len bytes long) and make the table's bytes sum to 0. */
static void seal(u8 *t, const char *sig, u32 len, u8 rev)
{
	struct acpi_header h = {
		.length = len, .revision = rev, .oem_revision = 1, .creator_revision = 1
	};

	memcpy(h.signature, sig, 4);
	memcpy(h.oem_id, ACPI_OEM_ID, 6);
	memcpy(h.oem_table_id, ACPI_OEM_TABLE, 8);
	memcpy(h.creator_id, ACPI_CREATOR, 4);
	memcpy(t, &h, sizeof(h));
	t[offsetof(struct acpi_header, checksum)] = checksum(t, len);
}

static struct acpi_gas io_gas(u16 port, u8 len)
{
	return (struct acpi_gas){ .space = 1,
				  .bit_width = (u8)(8 * len),
				  .access_size = len == 4 ? 3 : 2,
				  .address = port };
}

static size_t fadt(u8 *t, u64 facs, u64 dsdt)
{
	struct acpi_fadt f;

	memset(&f, 0, sizeof(f));
	f.facs = (u32)facs; /* X_FIRMWARE_CTRL stays 0: with both, Linux installs the FACS twice */
	f.dsdt = (u32)dsdt;
	f.x_dsdt = dsdt;
	f.sci_int = ACPI_SCI_IRQ;
	f.pm1a_evt_blk = ACPI_PM1_EVT_PORT;
	f.pm1a_cnt_blk = ACPI_PM1_CNT_PORT;
	f.pm1_evt_len = ACPI_PM1_EVT_LEN;
	f.pm1_cnt_len = ACPI_PM1_CNT_LEN;
	f.x_pm1a_evt_blk = io_gas(ACPI_PM1_EVT_PORT, ACPI_PM1_EVT_LEN);
	f.x_pm1a_cnt_blk = io_gas(ACPI_PM1_CNT_PORT, ACPI_PM1_CNT_LEN);
	/* Above 100 and 1000 microseconds: the C2 and C3 states are not supported. */
	f.p_lvl2_lat = 101;
	f.p_lvl3_lat = 1001;
	f.iapc_boot_arch = BOOT_ARCH_LEGACY_DEVICES | BOOT_ARCH_8042;
	f.flags = FADT_WBINVD | FADT_PROC_C1 | FADT_PWR_BUTTON | FADT_SLP_BUTTON;
	memcpy(t, &f, sizeof(f));
	seal(t, "FACP", sizeof(f), 6);
	return sizeof(f);
}

/* The MADT: a local APIC per CPU, the IOAPIC, the PIT's IRQ0 on pin 2 and LINT1 as NMI
 * everywhere: what the MP table says (mptable.c), which Linux ignores once it has this. */
static size_t madt(u8 *t, int nr_cpus)
{
	struct madt_ioapic io = {
		.type = 1, .length = sizeof(io), .id = (u8)nr_cpus, .address = (u32)IOAPIC_ADDR
	};
	struct madt_iso irq0 = { .type = 2, .length = sizeof(irq0), .source = 0, .gsi = 2 };
	struct madt_lapic_nmi nmi = {
		.type = 4, .length = sizeof(nmi), .processor_uid = 0xff, .lint = 1
	};
	size_t off = sizeof(struct acpi_header);
	u32 v = (u32)LAPIC_ADDR;

	memcpy(t + off, &v, 4);
	v = MADT_PCAT_COMPAT;
	memcpy(t + off + 4, &v, 4);
	off += 8;
	for (int i = 0; i < nr_cpus; i++) {
		struct madt_lapic c = { .type = 0,
					.length = sizeof(c),
					.processor_uid = (u8)i,
					.apic_id = (u8)i,
					.flags = 1 };

		memcpy(t + off, &c, sizeof(c));
		off += sizeof(c);
	}
	memcpy(t + off, &io, sizeof(io));
	off += sizeof(io);
	memcpy(t + off, &irq0, sizeof(irq0));
	off += sizeof(irq0);
	memcpy(t + off, &nmi, sizeof(nmi));
	off += sizeof(nmi);
	seal(t, "APIC", (u32)off, 5);
	return off;
}

/* The RSDT (32-bit entries) and XSDT (64-bit) both list the FADT and MADT: a kernel told
 * acpi=rsdt still finds them. */
static size_t sdt(u8 *t, const char *sig, size_t entry, const u64 *addr, int n)
{
	size_t off = sizeof(struct acpi_header);

	for (int i = 0; i < n; i++, off += entry)
		memcpy(t + off, &addr[i], entry); /* little-endian: the low bytes first */
	seal(t, sig, (u32)off, 1);
	return off;
}

static void rsdp(u8 *t, u64 rsdt, u64 xsdt)
{
	struct acpi_rsdp r = { .revision = 2, .rsdt = (u32)rsdt, .length = sizeof(r), .xsdt = xsdt };

	memcpy(r.signature, "RSD PTR ", 8);
	memcpy(r.oem_id, ACPI_OEM_ID, 6);
	r.checksum = checksum((const u8 *)&r, 20);
	r.ext_checksum = checksum((const u8 *)&r, sizeof(r));
	memcpy(t, &r, sizeof(r));
}

static size_t align_up(size_t v)
{
	return (v + TABLE_ALIGN - 1) & ~(size_t)(TABLE_ALIGN - 1);
}

/* Worst case (254 CPUs, the whole DSDT) stays well inside ACPI_TABLES_MAX; the size
 * checks are for callers with a smaller buffer. */
int acpi_build(u8 *buf, size_t size, u64 base, int nr_cpus)
{
	size_t facs = TABLE_ALIGN, dsdt = facs + sizeof(struct acpi_facs), fadt_at, madt_at;
	size_t rsdt_at, xsdt_at, end, dsdt_len;
	struct acpi_facs f = { .signature = "FACS", .length = sizeof(f) };
	u64 tables[2];

	if (nr_cpus < 1 || nr_cpus > ACPI_MAX_CPUS)
		return -EINVAL;
	if (size < dsdt + sizeof(struct acpi_header))
		return -ENOSPC;
	memset(buf, 0, size);
	dsdt_len = sizeof(struct acpi_header) +
		   acpi_dsdt_aml(buf + dsdt + sizeof(struct acpi_header),
				 size - dsdt - sizeof(struct acpi_header));
	fadt_at = align_up(dsdt + dsdt_len);
	madt_at = align_up(fadt_at + sizeof(struct acpi_fadt));
	rsdt_at =
		align_up(madt_at + sizeof(struct acpi_header) + 8 +
			 (size_t)nr_cpus * sizeof(struct madt_lapic) + sizeof(struct madt_ioapic) +
			 sizeof(struct madt_iso) + sizeof(struct madt_lapic_nmi));
	xsdt_at = align_up(rsdt_at + sizeof(struct acpi_header) + 2 * 4);
	end = xsdt_at + sizeof(struct acpi_header) + 2 * 8;
	if (end > size)
		return -ENOSPC;
	memcpy(buf + facs, &f, sizeof(f));
	seal(buf + dsdt, "DSDT", (u32)dsdt_len, 2);
	fadt(buf + fadt_at, base + facs, base + dsdt);
	madt(buf + madt_at, nr_cpus);
	tables[0] = base + fadt_at;
	tables[1] = base + madt_at;
	sdt(buf + rsdt_at, "RSDT", 4, tables, 2);
	sdt(buf + xsdt_at, "XSDT", 8, tables, 2);
	rsdp(buf, base + rsdt_at, base + xsdt_at);
	return (int)end;
}

int acpi_write(const struct guest_mem *m, int nr_cpus, char *err, size_t errlen)
{
	u8 buf[ACPI_TABLES_MAX];
	int n = acpi_build(buf, sizeof(buf), ACPI_TABLES_ADDR, nr_cpus);

	_Static_assert(ACPI_TABLES_ADDR + ACPI_TABLES_MAX <= MPTABLE_ADDR,
		       "ACPI tables overlap the MP table");
	if (n == -EINVAL)
		errfmt(err, errlen, "ACPI tables: %d CPUs is out of range (1..%d)", nr_cpus,
		       ACPI_MAX_CPUS);
	else if (n < 0)
		errfmt(err, errlen, "ACPI tables do not fit in %d bytes", ACPI_TABLES_MAX);
	if (n < 0)
		return n;
	if (gmem_write(m, ACPI_TABLES_ADDR, buf, (size_t)n)) {
		errfmt(err, errlen, "ACPI tables at 0x%llx do not fit in guest RAM",
		       ACPI_TABLES_ADDR);
		return -EFAULT;
	}
	return 0;
}

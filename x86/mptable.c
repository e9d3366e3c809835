/* Intel MultiProcessor 1.4 table: how a guest without ACPI finds its CPUs, IOAPIC and IRQ routing. */
#include <errno.h>
#include <string.h>

#include "lkvm/boot.h"
#include "lkvm/layout.h"

#define MP_SPEC_REV 4
#define MP_APIC_VERSION 0x14   /* integrated local APIC, as KVM emulates */
#define MP_IOAPIC_VERSION 0x11 /* 82093AA, 24 pins */
#define MP_AREA_SIZE (BIOS_END - MPTABLE_ADDR)
#define MP_BUS_PCI 0
#define MP_BUS_ISA 1
/* APIC ids are 8 bits and 0xff is the broadcast id; the IOAPIC takes id nr_cpus. */
#define MP_MAX_CPUS 254

enum { MP_PROCESSOR, MP_BUS, MP_IOAPIC, MP_INTSRC, MP_LINTSRC };
enum { MP_INT, MP_NMI, MP_SMI, MP_EXTINT };
#define CPU_ENABLED 0x01
#define CPU_BSP 0x02
/* Family 6 signature, FPU|TSC|MSR|PAE|CX8|APIC feature bits: only informational for Linux. */
#define MP_CPU_SIGNATURE 0x600
#define MP_CPU_FEATURES ((1u << 0) | (1u << 4) | (1u << 5) | (1u << 6) | (1u << 8) | (1u << 9))
#define IRQFLAG_CONFORMS 0x00
#define IRQFLAG_EDGE_HIGH 0x05
#define IRQFLAG_LEVEL_LOW 0x0f

struct mpf {
	char signature[4];
	u32 physptr;
	u8 length; /* in 16-byte units */
	u8 specification;
	u8 checksum;
	u8 feature[5];
} __attribute__((packed));

struct mpc_header {
	char signature[4];
	u16 length;
	u8 spec;
	u8 checksum;
	char oem[8];
	char productid[12];
	u32 oemptr;
	u16 oemsize;
	u16 oemcount;
	u32 lapic;
	u16 ext_length;
	u8 ext_checksum;
	u8 reserved;
} __attribute__((packed));

struct mpc_cpu {
	u8 type;
	u8 apicid;
	u8 apicver;
	u8 cpuflag;
	u32 cpufeature;
	u32 featureflag;
	u32 reserved[2];
} __attribute__((packed));

struct mpc_bus {
	u8 type;
	u8 busid;
	char bustype[6];
} __attribute__((packed));

struct mpc_ioapic {
	u8 type;
	u8 apicid;
	u8 apicver;
	u8 flags;
	u32 apicaddr;
} __attribute__((packed));

/* I/O and local interrupt assignment entries share one layout. */
struct mpc_intsrc {
	u8 type;
	u8 irqtype;
	u16 irqflag;
	u8 srcbus;
	u8 srcbusirq;
	u8 dstapic;
	u8 dstirq;
} __attribute__((packed));

_Static_assert(sizeof(struct mpf) == 16, "MP floating pointer is 16 bytes");
_Static_assert(sizeof(struct mpc_header) == 44, "MP config header is 44 bytes");
_Static_assert(sizeof(struct mpc_cpu) == 20, "MP processor entry is 20 bytes");
_Static_assert(sizeof(struct mpc_bus) == 8 && sizeof(struct mpc_ioapic) == 8 &&
		       sizeof(struct mpc_intsrc) == 8,
	       "MP 8-byte entries");

#define NR_ISA_IRQS 16
#define NR_ISA_ENTRIES (NR_ISA_IRQS - 1) /* IRQ2 is the cascade, never routed */
#define NR_PCI_SLOTS 31			 /* slots 1..31; slot 0 is the host bridge */
#define MP_FIXED_SIZE                                                                         \
	(sizeof(struct mpc_header) + 2 * sizeof(struct mpc_bus) + sizeof(struct mpc_ioapic) + \
	 (NR_ISA_ENTRIES + NR_PCI_SLOTS + 2) * sizeof(struct mpc_intsrc))
#define MP_BUF_SIZE (sizeof(struct mpf) + MP_FIXED_SIZE + MP_MAX_CPUS * sizeof(struct mpc_cpu))
_Static_assert(MP_BUF_SIZE <= MP_AREA_SIZE, "MP table must fit the BIOS area");

static u8 checksum(const u8 *p, size_t len)
{
	u8 sum = 0;

	while (len--)
		sum += *p++;
	return (u8)-sum;
}

static size_t put(u8 *buf, size_t off, const void *ent, size_t len)
{
	memcpy(buf + off, ent, len);
	return off + len;
}

static size_t put_int(u8 *buf, size_t off, u8 type, u8 irqtype, u16 irqflag, u8 bus, u8 busirq,
		      u8 dstapic, u8 dstirq)
{
	struct mpc_intsrc e = {
		.type = type,
		.irqtype = irqtype,
		.irqflag = irqflag,
		.srcbus = bus,
		.srcbusirq = busirq,
		.dstapic = dstapic,
		.dstirq = dstirq,
	};

	return put(buf, off, &e, sizeof(e));
}

/* One entry per CPU (the first the BSP), the PCI and ISA buses, the IOAPIC. */
static size_t put_cpus_buses(u8 *buf, size_t off, int nr_cpus, u8 ioapic_id, int *entries)
{
	struct mpc_bus pci = { .type = MP_BUS, .busid = MP_BUS_PCI, .bustype = "PCI   " };
	struct mpc_bus isa = { .type = MP_BUS, .busid = MP_BUS_ISA, .bustype = "ISA   " };
	struct mpc_ioapic io = {
		.type = MP_IOAPIC,
		.apicid = ioapic_id,
		.apicver = MP_IOAPIC_VERSION,
		.flags = 1, /* enabled */
		.apicaddr = (u32)IOAPIC_ADDR,
	};

	for (int i = 0; i < nr_cpus; i++, (*entries)++) {
		struct mpc_cpu c = {
			.type = MP_PROCESSOR,
			.apicid = (u8)i,
			.apicver = MP_APIC_VERSION,
			.cpuflag = CPU_ENABLED | (i == 0 ? CPU_BSP : 0),
			.cpufeature = MP_CPU_SIGNATURE,
			.featureflag = MP_CPU_FEATURES,
		};
		off = put(buf, off, &c, sizeof(c));
	}
	off = put(buf, off, &pci, sizeof(pci));
	off = put(buf, off, &isa, sizeof(isa));
	off = put(buf, off, &io, sizeof(io));
	*entries += 3;
	return off;
}

/* Where each ISA IRQ and PCI slot's pin meets the IOAPIC, and the local APICs' LINT0/1. */
static size_t put_irqs(u8 *buf, size_t off, u8 ioapic_id, int *entries)
{
	/* The PIT drives IRQ0 but sits on IOAPIC pin 2 on PC hardware (pin 0 is the 8259 output). */
	off = put_int(buf, off, MP_INTSRC, MP_INT, IRQFLAG_EDGE_HIGH, MP_BUS_ISA, 0, ioapic_id, 2);
	(*entries)++;
	for (u8 irq = 1; irq < NR_ISA_IRQS; irq++) {
		if (irq == 2)
			continue;
		off = put_int(buf, off, MP_INTSRC, MP_INT, IRQFLAG_CONFORMS, MP_BUS_ISA, irq,
			      ioapic_id, irq);
		(*entries)++;
	}
	for (u8 slot = 1; slot <= NR_PCI_SLOTS; slot++, (*entries)++)
		off = put_int(buf, off, MP_INTSRC, MP_INT, IRQFLAG_LEVEL_LOW, MP_BUS_PCI,
			      (u8)(slot << 2), ioapic_id, (u8)MPTABLE_PCI_PIN(slot));

	/* Virtual-wire mode: the 8259 reaches the BSP via LINT0, NMIs via LINT1 everywhere. */
	off = put_int(buf, off, MP_LINTSRC, MP_EXTINT, IRQFLAG_CONFORMS, MP_BUS_ISA, 0, 0xff, 0);
	off = put_int(buf, off, MP_LINTSRC, MP_NMI, IRQFLAG_CONFORMS, MP_BUS_ISA, 0, 0xff, 1);
	*entries += 2;
	return off;
}

/* The floating pointer at buf and the configuration table's header at cfg (its entries up to
 * end), each with its checksum. */
static void put_headers(u8 *buf, size_t cfg, size_t end, int entries)
{
	struct mpc_header h;
	struct mpf mpf;

	memset(&h, 0, sizeof(h));
	memcpy(h.signature, "PCMP", 4);
	h.length = (u16)(end - cfg);
	h.spec = MP_SPEC_REV;
	memcpy(h.oem, "LKVM    ", 8);
	memcpy(h.productid, "LKVM VM     ", 12);
	h.oemcount = (u16)entries;
	h.lapic = (u32)LAPIC_ADDR;
	memcpy(buf + cfg, &h, sizeof(h));
	buf[cfg + offsetof(struct mpc_header, checksum)] = checksum(buf + cfg, end - cfg);

	memset(&mpf, 0, sizeof(mpf));
	memcpy(mpf.signature, "_MP_", 4);
	mpf.physptr = (u32)(MPTABLE_ADDR + cfg);
	mpf.length = 1;
	mpf.specification = MP_SPEC_REV;
	memcpy(buf, &mpf, sizeof(mpf));
	buf[offsetof(struct mpf, checksum)] = checksum(buf, sizeof(mpf));
}

int mptable_write(const struct guest_mem *m, int nr_cpus, char *err, size_t errlen)
{
	u8 buf[MP_BUF_SIZE];
	size_t off, cfg = sizeof(struct mpf);
	u8 ioapic_id = (u8)nr_cpus;
	int entries = 0;

	if (nr_cpus < 1 || nr_cpus > MP_MAX_CPUS) {
		errfmt(err, errlen, "MP table: %d CPUs is out of range (1..%d)", nr_cpus,
		       MP_MAX_CPUS);
		return -EINVAL;
	}
	memset(buf, 0, sizeof(buf));
	off = put_cpus_buses(buf, cfg + sizeof(struct mpc_header), nr_cpus, ioapic_id, &entries);
	off = put_irqs(buf, off, ioapic_id, &entries);
	put_headers(buf, cfg, off, entries);
	if (gmem_write(m, MPTABLE_ADDR, buf, off)) {
		errfmt(err, errlen, "MP table at 0x%llx does not fit in guest RAM", MPTABLE_ADDR);
		return -EFAULT;
	}
	return 0;
}

/* The DSDT's AML, encoded by hand: the _S5 sleep package and the PCI root bridge Linux needs to find the bus once ACPI is on. */
#include <string.h>

#include "lkvm/acpi.h"
#include "lkvm/boot.h"
#include "lkvm/pci.h"

/* AML opcodes (ACPI 6.5 §20.3). */
#define AML_ZERO 0x00
#define AML_ONE 0x01
#define AML_NAME 0x08
#define AML_BYTE 0x0a
#define AML_WORD 0x0b
#define AML_DWORD 0x0c
#define AML_QWORD 0x0e
#define AML_SCOPE 0x10
#define AML_BUFFER 0x11
#define AML_PACKAGE 0x12
#define AML_EXT 0x5b
#define AML_DEVICE 0x82 /* after AML_EXT */
#define AML_ROOT 0x5c	/* '\' */

/* Resource descriptors (ACPI 6.5 §6.4). */
#define RES_IO 0x47
#define RES_END 0x79
#define RES_DWORD_ADDR 0x87
#define RES_WORD_ADDR 0x88
#define RES_TYPE_MEM 0
#define RES_TYPE_IO 1
#define RES_TYPE_BUS 2
#define RES_MIN_MAX_FIXED 0x0c /* a producer (a window) whose both ends are fixed */
#define RES_IO_ENTIRE_RANGE 3
#define RES_MEM_RW 1

#define PNP0A03 0x030ad041u /* EisaId("PNP0A03"), the PCI host bridge, compressed */
#define NR_PCI_SLOTS 31	    /* slots 1..31 as in the MP table; slot 0 is the host bridge */
#define AML_MAX 2048	    /* the largest part built on its own (the device) */

/* An output buffer that counts what does not fit instead of writing it. */
struct aml {
	u8 *p;
	size_t len, cap;
};

static void put(struct aml *a, const void *d, size_t n)
{
	if (a->len + n <= a->cap)
		memcpy(a->p + a->len, d, n);
	a->len += n;
}

static void put8(struct aml *a, u8 v)
{
	put(a, &v, 1);
}

static void put16(struct aml *a, u16 v)
{
	put8(a, (u8)v);
	put8(a, (u8)(v >> 8));
}

static void put32(struct aml *a, u32 v)
{
	put16(a, (u16)v);
	put16(a, (u16)(v >> 16));
}

/* PkgLength (§20.2.4) of a body of n bytes: the count includes its own 1-3 bytes. */
static void put_pkglen(struct aml *a, size_t n)
{
	if (n + 1 < 0x40) {
		put8(a, (u8)(n + 1));
	} else if (n + 2 < 0x1000) {
		n += 2;
		put8(a, (u8)(0x40 | (n & 0xf)));
		put8(a, (u8)(n >> 4));
	} else {
		n += 3;
		put8(a, (u8)(0x80 | (n & 0xf)));
		put8(a, (u8)(n >> 4));
		put8(a, (u8)(n >> 12));
	}
}

/* The smallest encoding of an integer. */
static void put_int(struct aml *a, u64 v)
{
	if (v == 0 || v == 1) {
		put8(a, v ? AML_ONE : AML_ZERO);
	} else if (v <= 0xff) {
		put8(a, AML_BYTE);
		put8(a, (u8)v);
	} else if (v <= 0xffff) {
		put8(a, AML_WORD);
		put16(a, (u16)v);
	} else if (v <= 0xffffffffu) {
		put8(a, AML_DWORD);
		put32(a, (u32)v);
	} else {
		put8(a, AML_QWORD);
		put32(a, (u32)v);
		put32(a, (u32)(v >> 32));
	}
}

/* Name(NAME, integer); names are 4 characters, '_'-padded. */
static void name_int(struct aml *a, const char *name, u64 v)
{
	put8(a, AML_NAME);
	put(a, name, 4);
	put_int(a, v);
}

/* An opcode with a PkgLength, then body (the body's length counts what did not fit). */
static void wrap(struct aml *a, const u8 *op, size_t oplen, const struct aml *body)
{
	put(a, op, oplen);
	put_pkglen(a, body->len);
	put(a, body->p, body->len <= body->cap ? body->len : 0);
	if (body->len > body->cap)
		a->len += body->len; /* keep the overflow visible */
}

/* A Word Address Space Descriptor for a window [min, max]. */
static void word_window(struct aml *a, u8 type, u8 type_flags, u16 min, u16 max)
{
	put8(a, RES_WORD_ADDR);
	put16(a, 13);
	put8(a, type);
	put8(a, RES_MIN_MAX_FIXED);
	put8(a, type_flags);
	put16(a, 0); /* granularity */
	put16(a, min);
	put16(a, max);
	put16(a, 0); /* translation */
	put16(a, (u16)(max - min + 1));
}

/* _CRS: bus 0 only, the config ports 0xCF8-0xCFF, every other I/O port, and the window
 * pci.c allocates BARs from (32-bit BARs only). */
static void pci_crs(struct aml *a)
{
	u8 b[128];
	struct aml r = { .p = b, .cap = sizeof(b) };
	struct aml size = { .p = (u8[8]){ 0 }, .cap = 8 };
	const u32 lo = (u32)PCI_MMIO_WINDOW_START, hi = (u32)(PCI_MMIO_WINDOW_END - 1);

	word_window(&r, RES_TYPE_BUS, 0, 0, 0);
	put8(&r, RES_IO);
	put8(&r, 1); /* 16-bit decode */
	put16(&r, 0xcf8);
	put16(&r, 0xcf8);
	put8(&r, 1);
	put8(&r, 8);
	word_window(&r, RES_TYPE_IO, RES_IO_ENTIRE_RANGE, 0, 0xcf7);
	word_window(&r, RES_TYPE_IO, RES_IO_ENTIRE_RANGE, 0xd00, 0xffff);
	put8(&r, RES_DWORD_ADDR);
	put16(&r, 23);
	put8(&r, RES_TYPE_MEM);
	put8(&r, RES_MIN_MAX_FIXED);
	put8(&r, RES_MEM_RW); /* non-cacheable */
	put32(&r, 0);
	put32(&r, lo);
	put32(&r, hi);
	put32(&r, 0);
	put32(&r, hi - lo + 1);
	put8(&r, RES_END);
	put8(&r, 0); /* checksum 0: "the template sums to zero", not checked */

	put_int(&size, r.len);
	put8(a, AML_NAME);
	put(a, "_CRS", 4);
	put8(a, AML_BUFFER);
	put_pkglen(a, size.len + r.len);
	put(a, size.p, size.len);
	put(a, r.p, r.len);
}

/* _PRT: Package { Package { 0xSSSSFFFF, pin 0 (INTA), 0, GSI } ... } per slot. */
static void pci_prt(struct aml *a)
{
	u8 b[1024];
	struct aml r = { .p = b, .cap = sizeof(b) };
	static const u8 pkg = AML_PACKAGE;

	put8(&r, NR_PCI_SLOTS);
	for (u32 slot = 1; slot <= NR_PCI_SLOTS; slot++) {
		u8 e[32];
		struct aml p = { .p = e, .cap = sizeof(e) };

		put8(&p, 4);
		put8(&p, AML_DWORD); /* always a DWord: the address is (slot << 16) | 0xffff */
		put32(&p, slot << 16 | 0xffff);
		put_int(&p, 0);
		put_int(&p, 0);
		put_int(&p, MPTABLE_PCI_PIN(slot));
		wrap(&r, &pkg, 1, &p);
	}
	put8(a, AML_NAME);
	put(a, "_PRT", 4);
	wrap(a, &pkg, 1, &r);
}

size_t acpi_dsdt_aml(u8 *buf, size_t size)
{
	struct aml a = { .p = buf, .cap = size };
	u8 dev_b[AML_MAX], sb_b[AML_MAX], s5_b[16];
	struct aml dev = { .p = dev_b, .cap = sizeof(dev_b) };
	struct aml sb = { .p = sb_b, .cap = sizeof(sb_b) };
	struct aml s5 = { .p = s5_b, .cap = sizeof(s5_b) };
	static const u8 pkg = AML_PACKAGE, device[] = { AML_EXT, AML_DEVICE }, scope = AML_SCOPE;

	/* Name(_S5, Package() { SLP_TYPa, SLP_TYPb, 0, 0 }): Linux writes SLP_TYPa. */
	put8(&s5, 4);
	put_int(&s5, ACPI_SLP_TYP_S5);
	put_int(&s5, ACPI_SLP_TYP_S5);
	put_int(&s5, 0);
	put_int(&s5, 0);
	put8(&a, AML_NAME);
	put(&a, "_S5_", 4);
	wrap(&a, &pkg, 1, &s5);

	put(&dev, "PCI0", 4);
	put8(&dev, AML_NAME);
	put(&dev, "_HID", 4);
	put8(&dev, AML_DWORD);
	put32(&dev, PNP0A03);
	name_int(&dev, "_ADR", 0);
	name_int(&dev, "_UID", 0);
	name_int(&dev, "_BBN", 0);
	pci_crs(&dev);
	pci_prt(&dev);

	put8(&sb, AML_ROOT);
	put(&sb, "_SB_", 4);
	wrap(&sb, device, sizeof(device), &dev);
	wrap(&a, &scope, 1, &sb);
	return a.len;
}

/* Minimal ACPI for x86 guests: the tables (RSDP, XSDT, FADT, MADT, DSDT) and the PM1 registers a power-off writes. */
#ifndef LKVM_ACPI_H
#define LKVM_ACPI_H

#include <stddef.h>

#include "lkvm/mem.h"
#include "lkvm/util.h"

struct kvm;

/* The PM1a event block (status word, then enable word) and control word, on I/O ports
 * no other lkvm device uses; the SCI on an ISA IRQ no device raises (virtio-mmio takes
 * 5-7, 9-12, 14, 15; the UART 4, the RTC 8). lkvm never raises the SCI: it has no
 * events to report, the FADT says there are no fixed power or sleep buttons. */
#define ACPI_PM1_EVT_PORT 0x600
#define ACPI_PM1_EVT_LEN 4
#define ACPI_PM1_CNT_PORT 0x604
#define ACPI_PM1_CNT_LEN 2
#define ACPI_SCI_IRQ 13

/* PM1 control bits (ACPI 6.5 §4.8.4.2.1): SCI_EN reads 1 (the machine is in ACPI mode
 * from power-on, the FADT has no SMI command port); SLP_EN with SLP_TYP = the DSDT's
 * _S5 value powers off. */
#define ACPI_PM1_CNT_SCI_EN 0x0001u
#define ACPI_PM1_CNT_SLP_TYP_SHIFT 10
#define ACPI_PM1_CNT_SLP_TYP_MASK (7u << ACPI_PM1_CNT_SLP_TYP_SHIFT)
#define ACPI_PM1_CNT_SLP_EN (1u << 13)
#define ACPI_SLP_TYP_S5 5

/* Where the tables go: the RSDP first (16-byte aligned, inside the BIOS area Linux scans,
 * 0xE0000-0xFFFFF), then the others, all below the MP table. */
#define ACPI_TABLES_MAX 0x4000

/* Build the tables for nr_cpus CPUs (APIC ids 0..nr_cpus-1; the IOAPIC id nr_cpus, as
 * in the MP table) into buf as they will sit at guest address base (16-byte aligned;
 * the RSDP at base). Returns the length used, or -EINVAL (nr_cpus out of 1..254) or
 * -ENOSPC (buf too small). */
int acpi_build(u8 *buf, size_t size, u64 base, int nr_cpus);

/* acpi_build at ACPI_TABLES_ADDR in guest memory. 0 or -errno with a reason in err. */
int acpi_write(const struct guest_mem *m, int nr_cpus, char *err, size_t errlen) __must_check;

/* The DSDT's AML body (after its 36-byte header) into buf: _S5 and the PCI root bridge
 * (_CRS: bus 0, the config ports, the I/O and the BAR windows; _PRT: INTA of slot s on
 * GSI MPTABLE_PCI_PIN(s), as the MP table says). Returns its length, which may exceed
 * size: then nothing past size was written and the caller must refuse it. */
size_t acpi_dsdt_aml(u8 *buf, size_t size);

/* Adds to kvm's device list ("acpi-pm"): the PM1a event and control ports. A write of
 * SLP_TYP(S5)|SLP_EN ends the run with EXIT_GUEST_OK, "guest powered off"; every other
 * write is stored (the bits that exist) and harmless. 0 or -ENOMEM. */
int acpi_pm_add(struct kvm *kvm) __must_check;

#endif

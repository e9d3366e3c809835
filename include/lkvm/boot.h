/* Kernel loading: bzImage (64-bit boot protocol) and ELF with a PVH note; zero page, e820, MP table. */
#ifndef LKVM_BOOT_H
#define LKVM_BOOT_H

#include <asm/bootparam.h>

#include "lkvm/mem.h"
#include "lkvm/util.h"

enum boot_kind {
	BOOT_KIND_BZIMAGE, /* enter 64-bit at load address + 0x200, RSI = zero page */
	BOOT_KIND_PVH,	   /* enter 32-bit protected mode, paging off, EBX = hvm_start_info */
};

/* Boot GDT (written at BOOT_GDT_ADDR by boot_load); selectors are index * 8. */
#define GDT_SEL_CODE32 0x08
#define GDT_SEL_CODE64 0x10 /* == BOOT_CS */
#define GDT_SEL_DATA 0x18   /* == BOOT_DS */
#define GDT_ENTRIES 4
#define GDT_CODE32 0x00cf9b000000ffffULL /* base 0, limit 4G, 32-bit, exec/read, accessed */
#define GDT_CODE64 0x00af9b000000ffffULL /* long-mode code */
#define GDT_DATA 0x00cf93000000ffffULL	 /* base 0, limit 4G, read/write, accessed */

/* PVH start info (the Xen "hvm_start_info" ABI, version 1). */
#define PVH_START_MAGIC 0x336ec578U
#define PVH_ELFNOTE_PHYS32_ENTRY 18 /* XEN_ELFNOTE_PHYS32_ENTRY, in a note named "Xen" */
struct pvh_start_info {
	u32 magic;
	u32 version;
	u32 flags;
	u32 nr_modules;
	u64 modlist_paddr;
	u64 cmdline_paddr;
	u64 rsdp_paddr;
	u64 memmap_paddr;
	u32 memmap_entries;
	u32 reserved;
};
struct pvh_modlist_entry {
	u64 paddr;
	u64 size;
	u64 cmdline_paddr;
	u64 reserved;
};
struct pvh_memmap_entry {
	u64 addr;
	u64 size;
	u32 type;
	u32 reserved;
};

struct boot_args {
	const u8 *kernel;
	size_t kernel_len;
	const u8 *initrd; /* NULL when there is none */
	size_t initrd_len;
	const char *cmdline; /* NULL or "" for none; must fit BOOT_CMDLINE_MAX incl. NUL */
	/* A flattened device tree for the guest, or NULL: a bzImage (boot protocol 2.09 or
	 * later) gets it as setup_data SETUP_DTB at BOOT_SETUP_DATA_ADDR; PVH has no field
	 * for it. */
	const void *dtb;
	size_t dtb_len;
	/* The guest address of the ACPI RSDP (acpi_write puts it there), or 0 for none: in
	 * the zero page's acpi_rsdp_addr or the PVH start info's rsdp_paddr, so the kernel
	 * need not scan the BIOS area for it. */
	u64 acpi_rsdp;
};

/* What the vCPU setup needs to start the boot CPU. */
struct boot_entry {
	enum boot_kind kind;
	u64 rip;
	u64 rsi; /* bzImage: BOOT_PARAMS_ADDR */
	u64 rbx; /* PVH: PVH_START_INFO_ADDR */
	u64 rsp;
	u64 cr3; /* bzImage: BOOT_PML4_ADDR (identity map of 0..4 GiB); PVH: 0 */
	u64 kernel_start, kernel_end;  /* guest range occupied by the loaded image */
	u64 initrd_start, initrd_size; /* 0/0 without initrd */
};

/* Which format an image is: BOOT_KIND_* or -ENOEXEC. Checks only magic numbers. */
int boot_detect(const u8 *img, size_t len);

/* Load kernel, initrd and command line into guest memory and write everything the
 * entry path needs (GDT; zero page with e820 or PVH start info with memmap; identity
 * page tables for the 64-bit entry). Validates everything: truncated images, bad magic,
 * unsupported protocol versions, ELF segments outside RAM, an initrd that does not fit
 * or would overlap the kernel, a command line too long. On failure returns -errno and
 * writes a one-line reason (no trailing newline) to err. */
int boot_load(const struct guest_mem *m, const struct boot_args *a, struct boot_entry *e, char *err,
	      size_t errlen) __must_check;

/* Fill an e820 table for m: RAM below EBDA_START, reserved EBDA..1 MiB, RAM from 1 MiB
 * to the low end, RAM above 4 GiB if any. Returns the number of entries or -ENOSPC. */
int e820_fill(const struct guest_mem *m, struct boot_e820_entry *tab, int max);

/* Write an MP (Intel MultiProcessor 1.4) table at MPTABLE_ADDR describing nr_cpus CPUs
 * (APIC ids 0..nr_cpus-1, CPU 0 the BSP), bus 0 = PCI, bus 1 = ISA, the IOAPIC at
 * IOAPIC_ADDR (id nr_cpus, 24 pins), ISA IRQs 0-15 routed to the same IOAPIC pins
 * (except IRQ0 -> pin 2, edge, active high), PCI INTA of slot s (1..31) routed to pin
 * MPTABLE_PCI_PIN(s) (level, active low), and the LINT0 ExtINT / LINT1 NMI entries.
 * Returns 0 or -errno with a reason in err. */
#define MPTABLE_PCI_PIN(slot) (16 + ((slot) % 8))
int mptable_write(const struct guest_mem *m, int nr_cpus, char *err, size_t errlen) __must_check;

#endif

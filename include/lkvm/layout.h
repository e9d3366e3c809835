/* Fixed guest-physical addresses of what lkvm places in low memory before boot. */
#ifndef LKVM_LAYOUT_H
#define LKVM_LAYOUT_H

#define BOOT_GDT_ADDR 0x1000ULL	      /* GDT for the 64-bit and 32-bit (PVH) entries */
#define BOOT_PARAMS_ADDR 0x7000ULL    /* Linux zero page (struct boot_params) */
#define PVH_START_INFO_ADDR 0x6000ULL /* struct hvm_start_info, memmap and modlist follow */
#define BOOT_PML4_ADDR 0x9000ULL      /* identity page tables for the 64-bit entry */
#define BOOT_PDPT_ADDR 0xA000ULL
#define BOOT_PD_ADDR 0xB000ULL /* 4 pages: 2 MiB pages covering 0..4 GiB */
#define BOOT_CMDLINE_ADDR 0x20000ULL
#define BOOT_CMDLINE_MAX 2048 /* x86 COMMAND_LINE_SIZE, NUL included */
#define BOOT_STACK_TOP 0x8ff0ULL
#define BOOT_SETUP_DATA_ADDR 0x30000ULL /* setup_data list (the DTB), up to 64 KiB */
#define BOOT_SETUP_DATA_MAX 0x10000ULL
#define EBDA_START 0x9FC00ULL	    /* RAM below this; reserved from here to 1 MiB */
#define ACPI_TABLES_ADDR 0xE0000ULL /* RSDP, then the ACPI tables (BIOS area) */
#define MPTABLE_ADDR 0xF0000ULL	    /* MP floating pointer + config table (BIOS area) */
#define BIOS_END 0x100000ULL
#define KERNEL_LOAD_ADDR 0x100000ULL /* bzImage protected-mode code */
#define BOOT_MIN_RAM (16ULL << 20)

/* Segment selectors of the boot GDT, as the Linux boot protocol expects. */
#define BOOT_CS 0x10
#define BOOT_DS 0x18

/* Host-side devices with fixed addresses. */
#define PVPANIC_PORT 0x505
#define IOAPIC_ADDR 0xFEC00000ULL
#define LAPIC_ADDR 0xFEE00000ULL

#endif

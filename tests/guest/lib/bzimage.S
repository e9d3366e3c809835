/* The Linux boot-protocol header that makes a C guest a bzImage (build/guests/NAME.bzImage), so it boots the way a kernel does and gets the zero page and setup_data. */

/*
 * guests.mk links this against the symbols of NAME.elf (ld -R) for the sizes guest.ld
 * computes, and puts the 1 KiB it makes (the "setup sectors", never run: lkvm enters at the
 * 64-bit entry) in front of NAME.elf's flat image, which the loader copies to 1 MiB and
 * enters at +0x200 (entry.S, _start_bzimage). Only the fields a 64-bit loader reads are
 * filled; offsets are the boot protocol's (Documentation/x86/boot.rst).
 */
#define SETUP_SECTS 1           /* + the boot sector: 1 KiB before the image */
#define BOOT_PROTOCOL 0x020f    /* 2.09 or later gets setup_data (the device tree) */
#define LOADED_HIGH 0x01
#define XLF_KERNEL_64 0x0001
#define CMDLINE_SIZE 2047

	.section .bzhdr, "a"
hdr:
	.org 0x1f1
	.byte SETUP_SECTS
	.word 0                         /* root_flags */
	.long __bz_syssize              /* protected-mode bytes / 16 (guest.ld) */
	.word 0, 0, 0                   /* ram_size, vid_mode, root_dev */
	.word 0xaa55                    /* boot_flag */
	.byte 0xeb, hdr_end - hdr - 0x202 /* jump; its offset says how long the header is */
	.ascii "HdrS"
	.word BOOT_PROTOCOL
	.long 0                         /* realmode_swtch */
	.word 0, 0                      /* start_sys_seg, kernel_version */
	.byte 0                         /* type_of_loader (the loader's) */
	.byte LOADED_HIGH               /* loadflags */
	.word 0                         /* setup_move_size */
	.long 0x100000                  /* code32_start */
	.long 0, 0                      /* ramdisk_image, ramdisk_size */
	.long 0                         /* bootsect_kludge */
	.word 0                         /* heap_end_ptr */
	.byte 0, 0                      /* ext_loader_ver, ext_loader_type */
	.long 0                         /* cmd_line_ptr (the loader's) */
	.long 0x7fffffff                /* initrd_addr_max */
	.long 0x200000                  /* kernel_alignment */
	.byte 0, 0                      /* relocatable_kernel, min_alignment */
	.org 0x236
	.word XLF_KERNEL_64             /* xloadflags */
	.long CMDLINE_SIZE
	.long 0                         /* hardware_subarch */
	.quad 0                         /* hardware_subarch_data */
	.long 0, 0                      /* payload_offset, payload_length */
	.quad 0                         /* setup_data (the loader's) */
	.quad 0x100000                  /* pref_address */
	.long __bz_init_size            /* bytes the image needs from 1 MiB, .bss included (guest.ld) */
	.long 0, 0                      /* handover_offset, kernel_info_offset */
hdr_end:
	.org (SETUP_SECTS + 1) * 512

/* Unit tests for the bzImage and PVH ELF loaders on synthetic images (and the real guest kernel if built). */
#include <elf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/boot.h"
#include "lkvm/layout.h"

#define RAM_SIZE MiB(64)
#define PAYLOAD_LEN 0x1000
#define SETUP_SECTS 4
#define FILL 0xcc

struct vm {
	struct guest_mem m;
	u8 *ram;
	u64 size;
	char err[256];
	struct boot_entry e;
};

static void vm_init(struct vm *v, u64 size)
{
	memset(v, 0, sizeof(*v));
	v->size = size;
	v->ram = mmap(NULL, size, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	ck_assert_ptr_ne(v->ram, MAP_FAILED);
	/* Only the low 2 MiB are pre-filled so that tests notice what the loader zeroes. */
	memset(v->ram, FILL, MIN(size, MiB(2)));
	ck_assert_int_eq(gmem_init(&v->m, v->ram, size), 0);
}

static void vm_free(struct vm *v)
{
	munmap(v->ram, v->size);
}

static u64 rd64(struct vm *v, u64 gpa)
{
	u64 x;

	ck_assert_int_eq(gmem_read(&v->m, gpa, &x, sizeof(x)), 0);
	return x;
}

/* The ACPI RSDP address load() passes (0: none, as most tests have it). */
static u64 load_rsdp;

static int load(struct vm *v, const u8 *k, size_t klen, const u8 *initrd, size_t ilen,
		const char *cmdline)
{
	struct boot_args a = {
		.kernel = k,
		.kernel_len = klen,
		.initrd = initrd,
		.initrd_len = ilen,
		.cmdline = cmdline,
		.acpi_rsdp = load_rsdp,
	};

	v->err[0] = 0;
	return boot_load(&v->m, &a, &v->e, v->err, sizeof(v->err));
}

#define ck_assert_err(v, ret, want_errno, substr)                                                \
	do {                                                                                     \
		ck_assert_int_eq((ret), -(want_errno));                                          \
		ck_assert_msg(strstr((v)->err, (substr)), "error \"%s\" lacks \"%s\"", (v)->err, \
			      (substr));                                                         \
		ck_assert_ptr_null(strchr((v)->err, '\n'));                                      \
	} while (0)

/* ---- synthetic bzImage ---- */

struct bz {
	u8 buf[(SETUP_SECTS + 1) * 512 + PAYLOAD_LEN];
	size_t len;
	struct setup_header h;
};

static void bz_default(struct bz *b)
{
	memset(b, 0, sizeof(*b));
	b->len = sizeof(b->buf);
	b->buf[0] = 'M';
	b->buf[1] = 'Z';
	b->h.setup_sects = SETUP_SECTS;
	b->h.syssize = PAYLOAD_LEN / 16;
	b->h.boot_flag = 0xAA55;
	b->h.jump = 0x66eb; /* jmp +0x66: header ends at 0x268 */
	b->h.header = 0x53726448;
	b->h.version = 0x020f;
	b->h.loadflags = LOADED_HIGH;
	b->h.initrd_addr_max = 0x7fffffff;
	b->h.kernel_alignment = 0x200000;
	b->h.relocatable_kernel = 1;
	b->h.xloadflags = XLF_KERNEL_64 | XLF_CAN_BE_LOADED_ABOVE_4G;
	b->h.cmdline_size = 2047;
	b->h.init_size = MiB(4);
	for (size_t i = 0; i < PAYLOAD_LEN; i++)
		b->buf[(SETUP_SECTS + 1) * 512 + i] = (u8)(i * 7 + 1);
}

/* Header goes in last, so tests can edit b->h after bz_default. */
static const u8 *bz_img(struct bz *b)
{
	memcpy(b->buf + 0x1f1, &b->h, sizeof(b->h));
	return b->buf;
}

START_TEST(bz_valid)
{
	struct vm v;
	struct bz b;
	struct boot_params bp;
	char cmd[64];

	vm_init(&v, RAM_SIZE);
	bz_default(&b);
	ck_assert_int_eq(boot_detect(bz_img(&b), b.len), BOOT_KIND_BZIMAGE);
	ck_assert_int_eq(load(&v, bz_img(&b), b.len, NULL, 0, "console=ttyS0 quiet"), 0);
	ck_assert_str_eq(v.err, "");

	ck_assert_int_eq(v.e.kind, BOOT_KIND_BZIMAGE);
	ck_assert_uint_eq(v.e.rip, 0x100200);
	ck_assert_uint_eq(v.e.rsi, BOOT_PARAMS_ADDR);
	ck_assert_uint_eq(v.e.rsp, BOOT_STACK_TOP);
	ck_assert_uint_eq(v.e.cr3, BOOT_PML4_ADDR);
	ck_assert_uint_eq(v.e.kernel_start, KERNEL_LOAD_ADDR);
	ck_assert_uint_eq(v.e.kernel_end, KERNEL_LOAD_ADDR + MiB(4));
	ck_assert_uint_eq(v.e.initrd_start, 0);
	ck_assert_uint_eq(v.e.initrd_size, 0);

	/* protected-mode code copied to 1 MiB */
	ck_assert_mem_eq(gmem_ptr(&v.m, KERNEL_LOAD_ADDR, PAYLOAD_LEN), b.buf + 5 * 512,
			 PAYLOAD_LEN);

	ck_assert_int_eq(gmem_read(&v.m, BOOT_PARAMS_ADDR, &bp, sizeof(bp)), 0);
	ck_assert_uint_eq(bp.hdr.boot_flag, 0xAA55);
	ck_assert_uint_eq(bp.hdr.header, 0x53726448);
	ck_assert_uint_eq(bp.hdr.version, 0x020f);
	ck_assert_uint_eq(bp.hdr.setup_sects, SETUP_SECTS);
	ck_assert_uint_eq(bp.hdr.init_size, MiB(4));
	ck_assert_uint_eq(bp.hdr.type_of_loader, 0xff);
	ck_assert_uint_eq(bp.hdr.loadflags, LOADED_HIGH | CAN_USE_HEAP);
	ck_assert_uint_ne(bp.hdr.heap_end_ptr, 0);
	ck_assert_uint_eq(bp.hdr.code32_start, KERNEL_LOAD_ADDR);
	ck_assert_uint_eq(bp.hdr.cmd_line_ptr, BOOT_CMDLINE_ADDR);
	ck_assert_uint_eq(bp.hdr.ramdisk_image, 0);
	ck_assert_uint_eq(bp.hdr.ramdisk_size, 0);
	/* zeroed outside the header (RAM was pre-filled) */
	ck_assert_uint_eq(bp.ext_cmd_line_ptr, 0);
	ck_assert_uint_eq(bp.screen_info.orig_x, 0);
	ck_assert_uint_eq(((u8 *)&bp)[0x1f0], 0);
	ck_assert_uint_eq(((u8 *)&bp)[sizeof(bp) - 1], 0);

	ck_assert_uint_eq(bp.e820_entries, 3);
	ck_assert_uint_eq(bp.e820_table[0].addr, 0);
	ck_assert_uint_eq(bp.e820_table[0].size, EBDA_START);
	ck_assert_uint_eq(bp.e820_table[0].type, 1);
	ck_assert_uint_eq(bp.e820_table[1].addr, EBDA_START);
	ck_assert_uint_eq(bp.e820_table[1].type, 2);
	ck_assert_uint_eq(bp.e820_table[2].addr, MiB(1));
	ck_assert_uint_eq(bp.e820_table[2].size, RAM_SIZE - MiB(1));
	ck_assert_uint_eq(bp.e820_table[2].type, 1);

	ck_assert_int_eq(gmem_read(&v.m, BOOT_CMDLINE_ADDR, cmd, 20), 0);
	ck_assert_str_eq(cmd, "console=ttyS0 quiet");

	/* identity map of 0..4 GiB with 2 MiB pages */
	ck_assert_uint_eq(rd64(&v, BOOT_PML4_ADDR), BOOT_PDPT_ADDR | 3);
	ck_assert_uint_eq(rd64(&v, BOOT_PML4_ADDR + 8), 0);
	for (int i = 0; i < 4; i++)
		ck_assert_uint_eq(rd64(&v, BOOT_PDPT_ADDR + 8 * i), (BOOT_PD_ADDR + 4096 * i) | 3);
	ck_assert_uint_eq(rd64(&v, BOOT_PDPT_ADDR + 32), 0);
	ck_assert_uint_eq(rd64(&v, BOOT_PD_ADDR), 0x83);
	ck_assert_uint_eq(rd64(&v, BOOT_PD_ADDR + 8), 0x200000 | 0x83);
	ck_assert_uint_eq(rd64(&v, BOOT_PD_ADDR + 4 * 4096 - 8), 0xffe00000 | 0x83);

	ck_assert_uint_eq(rd64(&v, BOOT_GDT_ADDR), 0);
	ck_assert_uint_eq(rd64(&v, BOOT_GDT_ADDR + GDT_SEL_CODE32), GDT_CODE32);
	ck_assert_uint_eq(rd64(&v, BOOT_GDT_ADDR + GDT_SEL_CODE64), GDT_CODE64);
	ck_assert_uint_eq(rd64(&v, BOOT_GDT_ADDR + GDT_SEL_DATA), GDT_DATA);
	vm_free(&v);
}
END_TEST

START_TEST(bz_no_cmdline_and_setup_sects_zero)
{
	struct vm v;
	struct bz b;
	char c;

	vm_init(&v, RAM_SIZE);
	bz_default(&b);
	/* setup_sects 0 means 4, which is what our image has */
	b.h.setup_sects = 0;
	ck_assert_int_eq(load(&v, bz_img(&b), b.len, NULL, 0, NULL), 0);
	ck_assert_mem_eq(gmem_ptr(&v.m, KERNEL_LOAD_ADDR, PAYLOAD_LEN), b.buf + 5 * 512,
			 PAYLOAD_LEN);
	ck_assert_int_eq(gmem_read(&v.m, BOOT_CMDLINE_ADDR, &c, 1), 0);
	ck_assert_int_eq(c, 0);
	vm_free(&v);
}
END_TEST

START_TEST(bz_header_length_byte)
{
	struct vm v;
	struct bz b;
	struct boot_params bp;

	vm_init(&v, RAM_SIZE);
	bz_default(&b);
	/* a 2.06 header ends at 0x23c (cmdline_size); later fields must not be copied */
	b.h.jump = 0x3aeb;
	b.h.pref_address = 0x1234567;
	ck_assert_int_eq(load(&v, bz_img(&b), b.len, NULL, 0, NULL), 0);
	ck_assert_int_eq(gmem_read(&v.m, BOOT_PARAMS_ADDR, &bp, sizeof(bp)), 0);
	ck_assert_uint_eq(bp.hdr.cmdline_size, 2047);
	ck_assert_uint_eq(bp.hdr.pref_address, 0);
	ck_assert_uint_eq(bp.hdr.init_size, 0);
	vm_free(&v);
}
END_TEST

START_TEST(bz_initrd)
{
	struct vm v;
	struct bz b;
	struct boot_params bp;
	size_t ilen = 12345;
	u8 *initrd = malloc(ilen);

	for (size_t i = 0; i < ilen; i++)
		initrd[i] = (u8)(i ^ 0x5a);
	vm_init(&v, RAM_SIZE);
	bz_default(&b);
	ck_assert_int_eq(load(&v, bz_img(&b), b.len, initrd, ilen, "x"), 0);
	ck_assert_uint_eq(v.e.initrd_size, ilen);
	ck_assert_uint_eq(v.e.initrd_start % 4096, 0);
	ck_assert_uint_ge(v.e.initrd_start, v.e.kernel_end);
	ck_assert_uint_le(v.e.initrd_start + ilen, RAM_SIZE);
	/* as high as possible: within the last page-aligned slot */
	ck_assert_uint_eq(v.e.initrd_start, (RAM_SIZE - ilen) & ~0xfffULL);
	ck_assert_mem_eq(gmem_ptr(&v.m, v.e.initrd_start, ilen), initrd, ilen);
	ck_assert_int_eq(gmem_read(&v.m, BOOT_PARAMS_ADDR, &bp, sizeof(bp)), 0);
	ck_assert_uint_eq(bp.hdr.ramdisk_image, v.e.initrd_start);
	ck_assert_uint_eq(bp.hdr.ramdisk_size, ilen);
	ck_assert_uint_eq(bp.ext_ramdisk_image, 0);
	ck_assert_uint_eq(bp.ext_ramdisk_size, 0);
	vm_free(&v);

	/* initrd_addr_max is respected: last byte at or below it */
	vm_init(&v, RAM_SIZE);
	bz_default(&b);
	b.h.initrd_addr_max = MiB(32) - 1;
	ck_assert_int_eq(load(&v, bz_img(&b), b.len, initrd, ilen, NULL), 0);
	ck_assert_uint_le(v.e.initrd_start + ilen, MiB(32));
	ck_assert_uint_eq(v.e.initrd_start, (MiB(32) - ilen) & ~0xfffULL);
	vm_free(&v);
	free(initrd);
}
END_TEST

START_TEST(bz_initrd_too_big)
{
	struct vm v;
	struct bz b;
	static const u8 one;

	vm_init(&v, RAM_SIZE);
	bz_default(&b);
	/* bigger than all of RAM; the data pointer is never read past the check */
	ck_assert_err(&v, load(&v, bz_img(&b), b.len, &one, RAM_SIZE + 1, NULL), ENOMEM,
		      "initrd (65 MiB) does not fit in RAM below");
	vm_free(&v);
}
END_TEST

START_TEST(bz_initrd_overlaps_kernel)
{
	struct vm v;
	struct bz b;
	static const u8 one;

	vm_init(&v, RAM_SIZE);
	bz_default(&b);
	/* kernel needs 1..61 MiB; 4 MiB of initrd no longer fits above it */
	b.h.init_size = MiB(60);
	ck_assert_err(&v, load(&v, bz_img(&b), b.len, &one, MiB(4), NULL), ENOMEM, "does not fit");
	/* initrd_addr_max below the kernel's end */
	bz_default(&b);
	b.h.initrd_addr_max = MiB(4);
	ck_assert_err(&v, load(&v, bz_img(&b), b.len, &one, 4096, NULL), ENOMEM,
		      "above the kernel end");
	vm_free(&v);
}
END_TEST

START_TEST(bz_truncated)
{
	struct vm v;
	struct bz b;

	vm_init(&v, RAM_SIZE);
	bz_default(&b);
	/* nothing after the setup sectors */
	ck_assert_err(&v, load(&v, bz_img(&b), 5 * 512, NULL, 0, NULL), ENOEXEC, "truncated");
	/* payload shorter than syssize says */
	ck_assert_err(&v, load(&v, bz_img(&b), b.len - 16, NULL, 0, NULL), ENOEXEC, "truncated");
	/* setup_sects pointing past the end of the file */
	b.h.setup_sects = 200;
	ck_assert_err(&v, load(&v, bz_img(&b), b.len, NULL, 0, NULL), ENOEXEC, "truncated");
	/* cut inside the setup header */
	bz_default(&b);
	ck_assert_err(&v, load(&v, bz_img(&b), 0x210, NULL, 0, NULL), ENOEXEC, "truncated");
	ck_assert_err(&v, load(&v, bz_img(&b), 2, NULL, 0, NULL), ENOEXEC, "truncated");
	vm_free(&v);
}
END_TEST

START_TEST(bz_bad_magic)
{
	struct vm v;
	struct bz b;
	u8 junk[4096];

	vm_init(&v, RAM_SIZE);
	memset(junk, 0x42, sizeof(junk));
	ck_assert_int_eq(boot_detect(junk, sizeof(junk)), -ENOEXEC);
	ck_assert_err(&v, load(&v, junk, sizeof(junk), NULL, 0, NULL), ENOEXEC,
		      "not a bzImage or ELF kernel (bad magic)");
	ck_assert_err(&v, load(&v, junk, 0, NULL, 0, NULL), ENOEXEC, "bad magic");

	bz_default(&b);
	b.h.header = 0x53726449;
	ck_assert_int_eq(boot_detect(bz_img(&b), b.len), -ENOEXEC);
	ck_assert_err(&v, load(&v, bz_img(&b), b.len, NULL, 0, NULL), ENOEXEC, "bad magic");
	bz_default(&b);
	b.h.boot_flag = 0x55AA;
	ck_assert_err(&v, load(&v, bz_img(&b), b.len, NULL, 0, NULL), ENOEXEC, "bad magic");
	vm_free(&v);
}
END_TEST

START_TEST(bz_old_protocol)
{
	struct vm v;
	struct bz b;

	vm_init(&v, RAM_SIZE);
	bz_default(&b);
	b.h.version = 0x0205;
	ck_assert_err(&v, load(&v, bz_img(&b), b.len, NULL, 0, NULL), ENOEXEC,
		      "2.05 is too old (need 2.06");
	b.h.version = 0x0206;
	ck_assert_int_eq(load(&v, bz_img(&b), b.len, NULL, 0, NULL), 0);
	vm_free(&v);
}
END_TEST

START_TEST(bz_no_64bit)
{
	struct vm v;
	struct bz b;

	vm_init(&v, RAM_SIZE);
	bz_default(&b);
	b.h.xloadflags = XLF_CAN_BE_LOADED_ABOVE_4G;
	ck_assert_err(&v, load(&v, bz_img(&b), b.len, NULL, 0, NULL), ENOEXEC,
		      "kernel has no 64-bit entry point");
	vm_free(&v);
}
END_TEST

START_TEST(bz_memory_too_small)
{
	struct vm v;
	struct bz b;

	vm_init(&v, MiB(32));
	bz_default(&b);
	b.h.init_size = MiB(40);
	ck_assert_err(&v, load(&v, bz_img(&b), b.len, NULL, 0, NULL), ENOMEM,
		      "memory too small for the kernel: needs 41 MiB");
	/* exactly fits */
	b.h.init_size = MiB(31);
	ck_assert_int_eq(load(&v, bz_img(&b), b.len, NULL, 0, NULL), 0);
	ck_assert_uint_eq(v.e.kernel_end, MiB(32));
	vm_free(&v);
}
END_TEST

START_TEST(bz_cmdline_too_long)
{
	struct vm v;
	struct bz b;
	char *s = malloc(BOOT_CMDLINE_MAX + 1);
	char back[16];

	vm_init(&v, RAM_SIZE);
	bz_default(&b);
	memset(s, 'a', BOOT_CMDLINE_MAX);
	s[BOOT_CMDLINE_MAX] = 0;
	ck_assert_err(&v, load(&v, bz_img(&b), b.len, NULL, 0, s), E2BIG, "command line too long");
	s[BOOT_CMDLINE_MAX - 1] = 0; /* 2047 chars + NUL: the limit */
	ck_assert_int_eq(load(&v, bz_img(&b), b.len, NULL, 0, s), 0);

	/* the kernel's own smaller cmdline_size wins */
	b.h.cmdline_size = 10;
	memcpy(s, "0123456789A", 12);
	ck_assert_err(&v, load(&v, bz_img(&b), b.len, NULL, 0, s), E2BIG, "at most 10");
	s[10] = 0;
	ck_assert_int_eq(load(&v, bz_img(&b), b.len, NULL, 0, s), 0);
	ck_assert_int_eq(gmem_read(&v.m, BOOT_CMDLINE_ADDR, back, 11), 0);
	ck_assert_str_eq(back, "0123456789");
	vm_free(&v);
	free(s);
}
END_TEST

START_TEST(detect)
{
	u8 img[0x300];

	memset(img, 0, sizeof(img));
	memcpy(img, ELFMAG, SELFMAG);
	ck_assert_int_eq(boot_detect(img, sizeof(img)), BOOT_KIND_PVH);
	ck_assert_int_eq(boot_detect(img, 3), -ENOEXEC);
	ck_assert_int_eq(boot_detect(NULL, 0), -ENOEXEC);
	img[0] = 'M';
	ck_assert_int_eq(boot_detect(img, sizeof(img)), -ENOEXEC);
}
END_TEST

/* ---- synthetic PVH ELF ---- */

#define SEG_PADDR 0x1000000ULL
#define SEG_OFF 0x200
#define SEG_FILESZ 0x100
#define SEG_MEMSZ 0x2000
#define NOTE_OFF 0x100
#define ENTRY (SEG_PADDR + 0x40)

struct elf_params {
	bool is64;
	u16 machine, type;
	u64 phoff;
	u64 paddr, filesz, memsz, seg_off;
	bool note;
	u32 namesz, descsz; /* of the Xen note */
	u64 note_filesz;    /* 0: exact */
	u64 entry;
	size_t len;
};

static struct elf_params elf_default(bool is64)
{
	return (struct elf_params){
		.is64 = is64,
		.machine = is64 ? EM_X86_64 : EM_386,
		.type = ET_EXEC,
		.phoff = is64 ? sizeof(Elf64_Ehdr) : sizeof(Elf32_Ehdr),
		.paddr = SEG_PADDR,
		.filesz = SEG_FILESZ,
		.memsz = SEG_MEMSZ,
		.seg_off = SEG_OFF,
		.note = true,
		.namesz = 4,
		.descsz = is64 ? 8 : 4,
		.entry = ENTRY,
		.len = 0x300,
	};
}

/* Two notes: an unrelated GNU one first, so the walker has to step over it. */
static size_t put_notes(u8 *buf, const struct elf_params *p)
{
	size_t o = NOTE_OFF;
	Elf64_Nhdr nh = { .n_namesz = 4, .n_descsz = 6, .n_type = 3 };

	memcpy(buf + o, &nh, sizeof(nh));
	memcpy(buf + o + 12, "GNU", 4);
	memcpy(buf + o + 16, "abcdef", 6);
	o += 24;
	nh = (Elf64_Nhdr){ .n_namesz = p->namesz,
			   .n_descsz = p->descsz,
			   .n_type = PVH_ELFNOTE_PHYS32_ENTRY };
	memcpy(buf + o, &nh, sizeof(nh));
	memcpy(buf + o + 12, "Xen", 4);
	memcpy(buf + o + 16, &p->entry, p->descsz == 4 ? 4 : 8);
	return o + 16 + 8 - NOTE_OFF;
}

static void build_elf(u8 *buf, const struct elf_params *p)
{
	size_t notesz;

	memset(buf, 0, 0x300);
	notesz = put_notes(buf, p);
	if (p->note_filesz)
		notesz = p->note_filesz;
	for (int i = 0; i < SEG_FILESZ; i++)
		buf[SEG_OFF + i] = (u8)(0x80 + i);
	if (p->is64) {
		Elf64_Ehdr eh = { .e_type = p->type,
				  .e_machine = p->machine,
				  .e_version = EV_CURRENT,
				  .e_entry = p->paddr,
				  .e_phoff = p->phoff,
				  .e_ehsize = sizeof(eh),
				  .e_phentsize = sizeof(Elf64_Phdr),
				  .e_phnum = 2 };
		Elf64_Phdr ph[2] = {
			{ .p_type = PT_LOAD,
			  .p_offset = p->seg_off,
			  .p_vaddr = 0xffffffff81000000ULL,
			  .p_paddr = p->paddr,
			  .p_filesz = p->filesz,
			  .p_memsz = p->memsz },
			{ .p_type = p->note ? PT_NOTE : PT_NULL,
			  .p_offset = NOTE_OFF,
			  .p_filesz = notesz },
		};

		memcpy(eh.e_ident, ELFMAG, SELFMAG);
		eh.e_ident[EI_CLASS] = ELFCLASS64;
		eh.e_ident[EI_DATA] = ELFDATA2LSB;
		memcpy(buf, &eh, sizeof(eh));
		if (p->phoff <= 0x300 - sizeof(ph))
			memcpy(buf + p->phoff, ph, sizeof(ph));
	} else {
		Elf32_Ehdr eh = { .e_type = p->type,
				  .e_machine = p->machine,
				  .e_version = EV_CURRENT,
				  .e_entry = (u32)p->paddr,
				  .e_phoff = (u32)p->phoff,
				  .e_ehsize = sizeof(eh),
				  .e_phentsize = sizeof(Elf32_Phdr),
				  .e_phnum = 2 };
		Elf32_Phdr ph[2] = {
			{ .p_type = PT_LOAD,
			  .p_offset = (u32)p->seg_off,
			  .p_vaddr = (u32)p->paddr,
			  .p_paddr = (u32)p->paddr,
			  .p_filesz = (u32)p->filesz,
			  .p_memsz = (u32)p->memsz },
			{ .p_type = p->note ? PT_NOTE : PT_NULL,
			  .p_offset = NOTE_OFF,
			  .p_filesz = (u32)notesz },
		};

		memcpy(eh.e_ident, ELFMAG, SELFMAG);
		eh.e_ident[EI_CLASS] = ELFCLASS32;
		eh.e_ident[EI_DATA] = ELFDATA2LSB;
		memcpy(buf, &eh, sizeof(eh));
		if (p->phoff <= 0x300 - sizeof(ph))
			memcpy(buf + p->phoff, ph, sizeof(ph));
	}
}

static int load_elf(struct vm *v, const struct elf_params *p, const u8 *initrd, size_t ilen,
		    const char *cmdline)
{
	/* exact-size heap copy so ASan catches any read past the image */
	u8 full[0x300];
	u8 *img = malloc(p->len ? p->len : 1);
	int ret;

	build_elf(full, p);
	memcpy(img, full, MIN(p->len, sizeof(full)));
	ret = load(v, img, p->len, initrd, ilen, cmdline);
	free(img);
	return ret;
}

static void check_pvh_loaded(struct vm *v, const struct elf_params *p)
{
	struct pvh_start_info si;
	struct pvh_memmap_entry mm[3];
	char cmd[8];
	u8 zero[SEG_MEMSZ - SEG_FILESZ];
	u8 data[SEG_FILESZ];

	ck_assert_str_eq(v->err, "");
	ck_assert_int_eq(v->e.kind, BOOT_KIND_PVH);
	ck_assert_uint_eq(v->e.rip, ENTRY);
	ck_assert_uint_eq(v->e.rbx, PVH_START_INFO_ADDR);
	ck_assert_uint_eq(v->e.rsp, BOOT_STACK_TOP);
	ck_assert_uint_eq(v->e.cr3, 0);
	ck_assert_uint_eq(v->e.kernel_start, SEG_PADDR);
	ck_assert_uint_eq(v->e.kernel_end, SEG_PADDR + SEG_MEMSZ);

	for (int i = 0; i < SEG_FILESZ; i++)
		data[i] = (u8)(0x80 + i);
	ck_assert_mem_eq(gmem_ptr(&v->m, SEG_PADDR, SEG_FILESZ), data, SEG_FILESZ);
	memset(zero, 0, sizeof(zero));
	ck_assert_mem_eq(gmem_ptr(&v->m, SEG_PADDR + SEG_FILESZ, sizeof(zero)), zero, sizeof(zero));

	ck_assert_int_eq(gmem_read(&v->m, PVH_START_INFO_ADDR, &si, sizeof(si)), 0);
	ck_assert_uint_eq(si.magic, PVH_START_MAGIC);
	ck_assert_uint_eq(si.version, 1);
	ck_assert_uint_eq(si.flags, 0);
	ck_assert_uint_eq(si.cmdline_paddr, BOOT_CMDLINE_ADDR);
	ck_assert_uint_eq(si.rsdp_paddr, 0);
	ck_assert_uint_eq(si.memmap_entries, 3);
	ck_assert_uint_ge(si.memmap_paddr, PVH_START_INFO_ADDR + sizeof(si));
	ck_assert_uint_eq(si.memmap_paddr % 8, 0);
	ck_assert_uint_le(si.memmap_paddr + sizeof(mm), BOOT_PARAMS_ADDR);
	ck_assert_int_eq(gmem_read(&v->m, si.memmap_paddr, mm, sizeof(mm)), 0);
	ck_assert_uint_eq(mm[0].addr, 0);
	ck_assert_uint_eq(mm[0].size, EBDA_START);
	ck_assert_uint_eq(mm[0].type, 1);
	ck_assert_uint_eq(mm[1].type, 2);
	ck_assert_uint_eq(mm[2].addr, MiB(1));
	ck_assert_uint_eq(mm[2].size, RAM_SIZE - MiB(1));
	ck_assert_uint_eq(mm[2].type, 1);
	ck_assert_uint_eq(mm[2].reserved, 0);

	ck_assert_int_eq(gmem_read(&v->m, BOOT_CMDLINE_ADDR, cmd, 5), 0);
	ck_assert_str_eq(cmd, "pvh=");
	ck_assert_uint_eq(rd64(v, BOOT_GDT_ADDR + GDT_SEL_CODE32), GDT_CODE32);
	ck_assert_uint_eq(rd64(v, BOOT_GDT_ADDR + GDT_SEL_DATA), GDT_DATA);
	(void)p;
}

START_TEST(pvh_elf64)
{
	struct vm v;
	struct elf_params p = elf_default(true);
	struct pvh_start_info si;

	vm_init(&v, RAM_SIZE);
	/* the bss must be zeroed even when RAM was dirty */
	memset(gmem_ptr(&v.m, SEG_PADDR, SEG_MEMSZ), FILL, SEG_MEMSZ);
	ck_assert_int_eq(load_elf(&v, &p, NULL, 0, "pvh="), 0);
	check_pvh_loaded(&v, &p);
	ck_assert_int_eq(gmem_read(&v.m, PVH_START_INFO_ADDR, &si, sizeof(si)), 0);
	ck_assert_uint_eq(si.nr_modules, 0);
	ck_assert_uint_eq(si.modlist_paddr, 0);
	vm_free(&v);
}
END_TEST

/* The RSDP's address reaches the kernel on both paths: the zero page's acpi_rsdp_addr, the
 * PVH start info's rsdp_paddr. */
START_TEST(acpi_rsdp)
{
	struct vm v;
	struct bz b;
	struct boot_params bp;
	struct elf_params p = elf_default(true);
	struct pvh_start_info si;

	load_rsdp = 0xe0000;
	vm_init(&v, RAM_SIZE);
	bz_default(&b);
	ck_assert_int_eq(load(&v, bz_img(&b), b.len, NULL, 0, ""), 0);
	ck_assert_int_eq(gmem_read(&v.m, BOOT_PARAMS_ADDR, &bp, sizeof(bp)), 0);
	ck_assert_uint_eq(bp.acpi_rsdp_addr, 0xe0000);
	ck_assert_int_eq(load_elf(&v, &p, NULL, 0, ""), 0);
	ck_assert_int_eq(gmem_read(&v.m, PVH_START_INFO_ADDR, &si, sizeof(si)), 0);
	ck_assert_uint_eq(si.rsdp_paddr, 0xe0000);
	load_rsdp = 0;
	vm_free(&v);
}
END_TEST

START_TEST(pvh_elf64_short_desc)
{
	struct vm v;
	struct elf_params p = elf_default(true);

	vm_init(&v, RAM_SIZE);
	p.descsz = 4;
	ck_assert_int_eq(load_elf(&v, &p, NULL, 0, "pvh="), 0);
	check_pvh_loaded(&v, &p);
	vm_free(&v);
}
END_TEST

START_TEST(pvh_elf32)
{
	struct vm v;
	struct elf_params p = elf_default(false);

	vm_init(&v, RAM_SIZE);
	memset(gmem_ptr(&v.m, SEG_PADDR, SEG_MEMSZ), FILL, SEG_MEMSZ);
	ck_assert_int_eq(load_elf(&v, &p, NULL, 0, "pvh="), 0);
	check_pvh_loaded(&v, &p);
	vm_free(&v);
}
END_TEST

START_TEST(pvh_initrd)
{
	struct vm v;
	struct elf_params p = elf_default(true);
	struct pvh_start_info si;
	struct pvh_modlist_entry mod;
	u8 initrd[5000];

	for (size_t i = 0; i < sizeof(initrd); i++)
		initrd[i] = (u8)(i * 3);
	vm_init(&v, RAM_SIZE);
	ck_assert_int_eq(load_elf(&v, &p, initrd, sizeof(initrd), "pvh="), 0);
	check_pvh_loaded(&v, &p);
	ck_assert_uint_eq(v.e.initrd_size, sizeof(initrd));
	ck_assert_uint_eq(v.e.initrd_start, (RAM_SIZE - sizeof(initrd)) & ~0xfffULL);
	ck_assert_uint_ge(v.e.initrd_start, v.e.kernel_end);
	ck_assert_mem_eq(gmem_ptr(&v.m, v.e.initrd_start, sizeof(initrd)), initrd, sizeof(initrd));

	ck_assert_int_eq(gmem_read(&v.m, PVH_START_INFO_ADDR, &si, sizeof(si)), 0);
	ck_assert_uint_eq(si.nr_modules, 1);
	ck_assert_uint_ge(si.modlist_paddr, si.memmap_paddr + 3 * sizeof(struct pvh_memmap_entry));
	ck_assert_uint_le(si.modlist_paddr + sizeof(mod), BOOT_PARAMS_ADDR);
	ck_assert_int_eq(gmem_read(&v.m, si.modlist_paddr, &mod, sizeof(mod)), 0);
	ck_assert_uint_eq(mod.paddr, v.e.initrd_start);
	ck_assert_uint_eq(mod.size, sizeof(initrd));
	ck_assert_uint_eq(mod.cmdline_paddr, 0);
	vm_free(&v);

	/* no room above the kernel: segment reaches up to the last 4 KiB of RAM */
	vm_init(&v, RAM_SIZE);
	p.memsz = RAM_SIZE - SEG_PADDR - 4096;
	ck_assert_err(&v, load_elf(&v, &p, initrd, sizeof(initrd), NULL), ENOMEM, "does not fit");
	vm_free(&v);
}
END_TEST

START_TEST(pvh_missing_note)
{
	struct vm v;
	struct elf_params p = elf_default(true);

	vm_init(&v, RAM_SIZE);
	p.note = false;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC,
		      "ELF kernel has no PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY)");
	/* a note segment that stops after the GNU note */
	p = elf_default(true);
	p.note_filesz = 24;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "no PVH entry note");
	/* wrong name length: "Xen" compared with 3 bytes is not the Xen note */
	p = elf_default(false);
	p.namesz = 3;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "no PVH entry note");
	vm_free(&v);
}
END_TEST

START_TEST(pvh_malformed_note)
{
	struct vm v;
	struct elf_params p = elf_default(true);

	vm_init(&v, RAM_SIZE);
	p.namesz = 0xffffffff;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "malformed ELF note");
	p = elf_default(true);
	p.descsz = 0xfffffffd;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "malformed ELF note");
	/* the segment ends inside the Xen note's descriptor */
	p = elf_default(true);
	p.note_filesz = 24 + 16 + 4;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "malformed ELF note");
	p = elf_default(true);
	p.descsz = 2;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "2-byte value");
	/* note segment past the end of the file */
	p = elf_default(true);
	p.note_filesz = 0x1000;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "past the end");
	vm_free(&v);
}
END_TEST

START_TEST(pvh_segment_outside_ram)
{
	struct vm v;
	struct elf_params p = elf_default(true);

	vm_init(&v, RAM_SIZE);
	p.paddr = RAM_SIZE - 0x1000; /* bss runs past the end */
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOMEM, "outside guest RAM");
	p.paddr = GiB(3); /* in the PCI hole */
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOMEM, "outside guest RAM");
	p = elf_default(false);
	p.paddr = 0x1000; /* below 1 MiB */
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "below 1 MiB");
	vm_free(&v);
}
END_TEST

START_TEST(pvh_segment_wraps)
{
	struct vm v;
	struct elf_params p = elf_default(true);

	vm_init(&v, RAM_SIZE);
	p.paddr = 0xfffffffffffff000ULL;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "wraps");
	p = elf_default(true);
	p.memsz = UINT64_MAX;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "wraps");
	vm_free(&v);
}
END_TEST

START_TEST(pvh_filesz_gt_memsz)
{
	struct vm v;
	struct elf_params p = elf_default(true);

	vm_init(&v, RAM_SIZE);
	p.memsz = p.filesz - 1;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC,
		      "file size 0x100 > memory size 0xff");
	vm_free(&v);
}
END_TEST

START_TEST(pvh_segment_past_file)
{
	struct vm v;
	struct elf_params p = elf_default(true);

	vm_init(&v, RAM_SIZE);
	p.filesz = 0x101; /* one byte past the 0x300-byte file */
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "past the end of the file");
	p = elf_default(true);
	p.seg_off = UINT64_MAX - 0x10; /* offset + filesz wraps */
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "past the end of the file");
	vm_free(&v);
}
END_TEST

START_TEST(pvh_phdrs_past_file)
{
	struct vm v;
	struct elf_params p = elf_default(true);

	vm_init(&v, RAM_SIZE);
	p.phoff = 0x300 - 10;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "program headers");
	p.phoff = UINT64_MAX - 8;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "program headers");
	p = elf_default(false);
	p.len = sizeof(Elf32_Ehdr) + sizeof(Elf32_Phdr); /* second phdr cut off */
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "program headers");
	vm_free(&v);
}
END_TEST

START_TEST(pvh_truncated_header)
{
	struct vm v;
	struct elf_params p = elf_default(true);

	vm_init(&v, RAM_SIZE);
	p.len = 8;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "truncated");
	p.len = sizeof(Elf64_Ehdr) - 1;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "truncated");
	p = elf_default(false);
	p.len = sizeof(Elf32_Ehdr) - 1;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "truncated");
	vm_free(&v);
}
END_TEST

START_TEST(pvh_bad_header_fields)
{
	struct vm v;
	struct elf_params p = elf_default(true);

	vm_init(&v, RAM_SIZE);
	p.machine = EM_AARCH64;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "not x86");
	p = elf_default(true);
	p.type = ET_DYN;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "not an executable");
	p = elf_default(true);
	p.entry = GiB(3) + 0x1000;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, NULL), ENOEXEC, "entry point");
	vm_free(&v);
}
END_TEST

START_TEST(pvh_cmdline_too_long)
{
	struct vm v;
	struct elf_params p = elf_default(true);
	char *s = malloc(BOOT_CMDLINE_MAX + 1);

	vm_init(&v, RAM_SIZE);
	memset(s, 'b', BOOT_CMDLINE_MAX);
	s[BOOT_CMDLINE_MAX] = 0;
	ck_assert_err(&v, load_elf(&v, &p, NULL, 0, s), E2BIG, "command line too long");
	s[BOOT_CMDLINE_MAX - 1] = 0;
	ck_assert_int_eq(load_elf(&v, &p, NULL, 0, s), 0);
	vm_free(&v);
	free(s);
}
END_TEST

/* The kernel the integration tests boot, if it has been built. */
static const char *const real_bzimage = "build/guest/bzImage";
static const char *const real_vmlinux = "build/guest/vmlinux";

START_TEST(real_kernels)
{
	struct vm v;
	u8 *img;
	size_t len;

	vm_init(&v, MiB(256));
	if (read_file(real_bzimage, &img, &len) == 0) {
		ck_assert_int_eq(load(&v, img, len, NULL, 0, "console=ttyS0"), 0);
		ck_assert_uint_eq(v.e.kind, BOOT_KIND_BZIMAGE);
		ck_assert_uint_gt(v.e.kernel_end, KERNEL_LOAD_ADDR + len / 2);
		free(img);
	}
	if (read_file(real_vmlinux, &img, &len) == 0) {
		ck_assert_int_eq(load(&v, img, len, NULL, 0, "console=ttyS0"), 0);
		ck_assert_uint_eq(v.e.kind, BOOT_KIND_PVH);
		ck_assert_uint_ge(v.e.rip, v.e.kernel_start);
		ck_assert_uint_lt(v.e.rip, v.e.kernel_end);
		free(img);
	}
	vm_free(&v);
}
END_TEST

static Suite *boot_suite(void)
{
	Suite *s = suite_create("boot");
	TCase *bz = tcase_create("bzimage");
	TCase *pvh = tcase_create("pvh");

	tcase_add_test(bz, detect);
	tcase_add_test(bz, bz_valid);
	tcase_add_test(bz, acpi_rsdp);
	tcase_add_test(bz, bz_no_cmdline_and_setup_sects_zero);
	tcase_add_test(bz, bz_header_length_byte);
	tcase_add_test(bz, bz_initrd);
	tcase_add_test(bz, bz_initrd_too_big);
	tcase_add_test(bz, bz_initrd_overlaps_kernel);
	tcase_add_test(bz, bz_truncated);
	tcase_add_test(bz, bz_bad_magic);
	tcase_add_test(bz, bz_old_protocol);
	tcase_add_test(bz, bz_no_64bit);
	tcase_add_test(bz, bz_memory_too_small);
	tcase_add_test(bz, bz_cmdline_too_long);
	suite_add_tcase(s, bz);

	tcase_add_test(pvh, pvh_elf64);
	tcase_add_test(pvh, pvh_elf64_short_desc);
	tcase_add_test(pvh, pvh_elf32);
	tcase_add_test(pvh, pvh_initrd);
	tcase_add_test(pvh, pvh_missing_note);
	tcase_add_test(pvh, pvh_malformed_note);
	tcase_add_test(pvh, pvh_segment_outside_ram);
	tcase_add_test(pvh, pvh_segment_wraps);
	tcase_add_test(pvh, pvh_filesz_gt_memsz);
	tcase_add_test(pvh, pvh_segment_past_file);
	tcase_add_test(pvh, pvh_phdrs_past_file);
	tcase_add_test(pvh, pvh_truncated_header);
	tcase_add_test(pvh, pvh_bad_header_fields);
	tcase_add_test(pvh, pvh_cmdline_too_long);
	suite_add_tcase(s, pvh);

	/* Only when the guest kernel exists: a missing file is not a pass. */
	if (!access(real_bzimage, R_OK) || !access(real_vmlinux, R_OK)) {
		TCase *real = tcase_create("real");

		tcase_set_timeout(real, 30);
		tcase_add_test(real, real_kernels);
		suite_add_tcase(s, real);
	} else {
		lkvm_skip("test_boot", 1, "real_kernels",
			  "no guest kernel built yet; scripts/build-guest.sh builds it");
	}
	return s;
}

LKVM_CHECK_MAIN(boot_suite)

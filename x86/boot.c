/* Kernel loaders (bzImage 64-bit boot protocol, ELF with a PVH entry note) and the boot GDT and page tables. */
#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "lkvm/boot.h"
#include "lkvm/layout.h"

#define PAGE_SIZE 4096ULL
#define SETUP_HDR_OFF 0x1f1
#define SETUP_HDR_END (SETUP_HDR_OFF + sizeof(struct setup_header))
#define HDRS_MAGIC 0x53726448U /* "HdrS" */
#define BOOT_FLAG_MAGIC 0xAA55
#define MIN_BOOT_PROTOCOL 0x0206 /* first with cmdline_size */
#define LOADER_TYPE_UNDEFINED 0xff
/* Real-mode setup code is never run (we enter at the 64-bit entry), but the kernel reads
 * heap_end_ptr when CAN_USE_HEAP is set; this is the value a loader at 0x90000 would use. */
#define SETUP_HEAP_END 0xfe00
#define PTE_PRESENT 0x1ULL
#define PTE_RW 0x2ULL
#define PTE_PS 0x80ULL
#define PVH_MEMMAP_MAX 8

static int gput(const struct guest_mem *m, u64 gpa, const void *src, u64 len, const char *what,
		char *err, size_t errlen)
{
	if (gmem_write(m, gpa, src, len)) {
		errfmt(err, errlen,
		       "cannot write %s at 0x%" PRIx64 " (+0x%" PRIx64 "): outside guest RAM", what,
		       gpa, len);
		return -EFAULT;
	}
	return 0;
}

static int gzero(const struct guest_mem *m, u64 gpa, u64 len, const char *what, char *err,
		 size_t errlen)
{
	void *p = gmem_ptr(m, gpa, len);

	if (!p) {
		errfmt(err, errlen,
		       "cannot clear %s at 0x%" PRIx64 " (+0x%" PRIx64 "): outside guest RAM", what,
		       gpa, len);
		return -EFAULT;
	}
	memset(p, 0, len);
	return 0;
}

int boot_detect(const u8 *img, size_t len)
{
	u16 flag;
	u32 magic;

	if (!img)
		return -ENOEXEC;
	if (len >= SELFMAG && !memcmp(img, ELFMAG, SELFMAG))
		return BOOT_KIND_PVH;
	if (len >= SETUP_HDR_END) {
		memcpy(&flag, img + SETUP_HDR_OFF + offsetof(struct setup_header, boot_flag),
		       sizeof(flag));
		memcpy(&magic, img + SETUP_HDR_OFF + offsetof(struct setup_header, header),
		       sizeof(magic));
		if (flag == BOOT_FLAG_MAGIC && magic == HDRS_MAGIC)
			return BOOT_KIND_BZIMAGE;
	}
	return -ENOEXEC;
}

static int write_gdt(const struct guest_mem *m, char *err, size_t errlen)
{
	const u64 gdt[GDT_ENTRIES] = { 0, GDT_CODE32, GDT_CODE64, GDT_DATA };

	return gput(m, BOOT_GDT_ADDR, gdt, sizeof(gdt), "GDT", err, errlen);
}

/* The 64-bit entry requires paging; an identity map of the low 4 GiB is what the boot
 * protocol promises the kernel (it covers the kernel, zero page, cmdline and initrd). */
static int write_page_tables(const struct guest_mem *m, char *err, size_t errlen)
{
	u64 tab[512];
	int ret;

	memset(tab, 0, sizeof(tab));
	tab[0] = BOOT_PDPT_ADDR | PTE_PRESENT | PTE_RW;
	ret = gput(m, BOOT_PML4_ADDR, tab, sizeof(tab), "PML4", err, errlen);
	if (ret)
		return ret;

	memset(tab, 0, sizeof(tab));
	for (u64 i = 0; i < 4; i++)
		tab[i] = (BOOT_PD_ADDR + i * PAGE_SIZE) | PTE_PRESENT | PTE_RW;
	ret = gput(m, BOOT_PDPT_ADDR, tab, sizeof(tab), "PDPT", err, errlen);
	if (ret)
		return ret;

	for (u64 pd = 0; pd < 4; pd++) {
		for (u64 i = 0; i < 512; i++)
			tab[i] = ((pd * 512 + i) << 21) | PTE_PRESENT | PTE_RW | PTE_PS;
		ret = gput(m, BOOT_PD_ADDR + pd * PAGE_SIZE, tab, sizeof(tab), "page directory",
			   err, errlen);
		if (ret)
			return ret;
	}
	return 0;
}

static int check_cmdline(const char *cmdline, u64 max_len, char *err, size_t errlen)
{
	size_t n = cmdline ? strlen(cmdline) : 0;

	if (n > max_len) {
		errfmt(err, errlen,
		       "command line too long (%zu bytes, the kernel accepts at most %" PRIu64 ")",
		       n, max_len);
		return -E2BIG;
	}
	return 0;
}

static int write_cmdline(const struct guest_mem *m, const char *cmdline, char *err, size_t errlen)
{
	const char *s = cmdline ? cmdline : "";

	return gput(m, BOOT_CMDLINE_ADDR, s, strlen(s) + 1, "command line", err, errlen);
}

/* The initrd goes as high as allowed, so the kernel's decompression and early
 * allocations below it never collide with it. */
static int place_initrd(const struct guest_mem *m, const struct boot_args *a, u64 lowest, u64 limit,
			u64 *addr, char *err, size_t errlen)
{
	u64 size = a->initrd_len;
	u64 top = MIN(limit, gmem_low_end(m));

	lowest = ALIGN_UP(lowest, PAGE_SIZE);
	if (size > top || ALIGN_DOWN(top - size, PAGE_SIZE) < lowest) {
		errfmt(err, errlen,
		       "initrd (%" PRIu64 " MiB) does not fit in RAM below 0x%" PRIx64
		       " above the kernel end 0x%" PRIx64,
		       (size + MiB(1) - 1) >> 20, top, lowest);
		return -ENOMEM;
	}
	*addr = ALIGN_DOWN(top - size, PAGE_SIZE);
	return 0;
}

/* The device tree as the one setup_data entry (protocol 2.09 added the list). */
static int put_setup_data(const struct guest_mem *m, const struct boot_args *a,
			  struct boot_params *bp, u16 version, char *err, size_t errlen)
{
	struct setup_data sd = { .next = 0, .type = SETUP_DTB };
	int ret;

	if (!a->dtb || !a->dtb_len || version < 0x0209)
		return 0;
	if (a->dtb_len > BOOT_SETUP_DATA_MAX - sizeof(sd)) {
		errfmt(err, errlen, "device tree of %zu bytes does not fit below 0x%llx",
		       a->dtb_len, BOOT_SETUP_DATA_ADDR + BOOT_SETUP_DATA_MAX);
		return -E2BIG;
	}
	sd.len = (u32)a->dtb_len;
	ret = gput(m, BOOT_SETUP_DATA_ADDR, &sd, sizeof(sd), "setup_data", err, errlen);
	if (!ret)
		ret = gput(m, BOOT_SETUP_DATA_ADDR + sizeof(sd), a->dtb, a->dtb_len, "device tree",
			   err, errlen);
	if (!ret)
		bp->hdr.setup_data = BOOT_SETUP_DATA_ADDR;
	return ret;
}

/* The setup header checked: a bzImage of boot protocol 2.06+ with a 64-bit entry, whose
 * protected-mode code (from *setup_size on) is all in the file. */
static int bz_header(const struct boot_args *a, struct setup_header *hdr, u64 *setup_size,
		     char *err, size_t errlen)
{
	if (a->kernel_len < SETUP_HDR_END) {
		errfmt(err, errlen, "bzImage truncated: %zu bytes, too short for the setup header",
		       a->kernel_len);
		return -ENOEXEC;
	}
	memcpy(hdr, a->kernel + SETUP_HDR_OFF, sizeof(*hdr));
	if (hdr->boot_flag != BOOT_FLAG_MAGIC || hdr->header != HDRS_MAGIC) {
		errfmt(err, errlen, "not a bzImage or ELF kernel (bad magic)");
		return -ENOEXEC;
	}
	if (hdr->version < MIN_BOOT_PROTOCOL) {
		errfmt(err, errlen, "bzImage boot protocol %u.%02u is too old (need 2.06 or later)",
		       hdr->version >> 8, hdr->version & 0xff);
		return -ENOEXEC;
	}
	if (!(hdr->xloadflags & XLF_KERNEL_64)) {
		errfmt(err, errlen, "kernel has no 64-bit entry point");
		return -ENOEXEC;
	}
	*setup_size = ((u64)(hdr->setup_sects ? hdr->setup_sects : 4) + 1) * 512;
	if (*setup_size >= a->kernel_len) {
		errfmt(err, errlen,
		       "bzImage truncated: protected-mode code at offset 0x%" PRIx64
		       " is past the end (%zu bytes)",
		       *setup_size, a->kernel_len);
		return -ENOEXEC;
	}
	if ((u64)hdr->syssize * 16 > a->kernel_len - *setup_size) {
		errfmt(err, errlen,
		       "bzImage truncated: header says %" PRIu64
		       " bytes of protected-mode code, file has %" PRIu64,
		       (u64)hdr->syssize * 16, (u64)(a->kernel_len - *setup_size));
		return -ENOEXEC;
	}
	return 0;
}

/* The zero page (boot_params): the image's setup header with what the loader fills in, the
 * initrd, the e820 map, and the device tree as setup_data. */
static int bz_zero_page(const struct guest_mem *m, const struct boot_args *a, u16 version,
			u64 initrd_addr, char *err, size_t errlen)
{
	const u8 *img = a->kernel;
	struct boot_params bp;
	u64 hdr_end;
	int ret, n;

	memset(&bp, 0, sizeof(bp));
	/* The header's own length byte (at 0x201, jump offset) says how much of it is defined. */
	hdr_end = MIN((u64)0x202 + img[0x201], (u64)SETUP_HDR_END);
	memcpy((u8 *)&bp + SETUP_HDR_OFF, img + SETUP_HDR_OFF, hdr_end - SETUP_HDR_OFF);
	bp.hdr.type_of_loader = LOADER_TYPE_UNDEFINED;
	bp.hdr.loadflags |= CAN_USE_HEAP;
	bp.hdr.heap_end_ptr = SETUP_HEAP_END;
	bp.hdr.code32_start = KERNEL_LOAD_ADDR;
	bp.hdr.cmd_line_ptr = BOOT_CMDLINE_ADDR;
	if (a->initrd) {
		bp.hdr.ramdisk_image = (u32)initrd_addr;
		bp.hdr.ramdisk_size = (u32)a->initrd_len;
		bp.ext_ramdisk_image = (u32)(initrd_addr >> 32);
		bp.ext_ramdisk_size = (u32)((u64)a->initrd_len >> 32);
	}
	n = e820_fill(m, bp.e820_table, E820_MAX_ENTRIES_ZEROPAGE);
	if (n < 0) {
		errfmt(err, errlen, "e820 table does not fit in the zero page");
		return n;
	}
	bp.e820_entries = (u8)n;
	bp.acpi_rsdp_addr = a->acpi_rsdp;
	ret = put_setup_data(m, a, &bp, version, err, errlen);
	if (!ret)
		ret = gput(m, BOOT_PARAMS_ADDR, &bp, sizeof(bp), "zero page", err, errlen);
	return ret;
}

static int load_bzimage(const struct guest_mem *m, const struct boot_args *a, struct boot_entry *e,
			char *err, size_t errlen)
{
	struct setup_header hdr;
	u64 setup_size, pm_size, need, kend, initrd_addr = 0;
	int ret = bz_header(a, &hdr, &setup_size, err, errlen);

	if (ret)
		return ret;
	pm_size = a->kernel_len - setup_size;
	/* The kernel decompresses in place and needs init_size bytes from its load address. */
	need = MAX((u64)hdr.init_size, pm_size);
	kend = KERNEL_LOAD_ADDR + need;
	if (!gmem_ptr(m, KERNEL_LOAD_ADDR, need)) {
		errfmt(err, errlen, "memory too small for the kernel: needs %" PRIu64 " MiB",
		       (kend + MiB(1) - 1) >> 20);
		return -ENOMEM;
	}

	ret = check_cmdline(a->cmdline, MIN((u64)BOOT_CMDLINE_MAX - 1, (u64)hdr.cmdline_size), err,
			    errlen);
	if (ret)
		return ret;

	if (a->initrd) {
		/* initrd_addr_max is the highest byte address the initrd may occupy. */
		u64 limit = MIN((u64)hdr.initrd_addr_max + 1, PCI_HOLE_END);

		ret = place_initrd(m, a, kend, limit, &initrd_addr, err, errlen);
		if (ret)
			return ret;
	}

	/* Everything is validated; now write. */
	ret = gput(m, KERNEL_LOAD_ADDR, a->kernel + setup_size, pm_size, "kernel", err, errlen);
	if (!ret && a->initrd)
		ret = gput(m, initrd_addr, a->initrd, a->initrd_len, "initrd", err, errlen);
	if (!ret)
		ret = write_cmdline(m, a->cmdline, err, errlen);
	if (!ret)
		ret = bz_zero_page(m, a, hdr.version, initrd_addr, err, errlen);
	if (!ret)
		ret = write_page_tables(m, err, errlen);
	if (!ret)
		ret = write_gdt(m, err, errlen);
	if (ret)
		return ret;

	e->kind = BOOT_KIND_BZIMAGE;
	e->rip = KERNEL_LOAD_ADDR + 0x200;
	e->rsi = BOOT_PARAMS_ADDR;
	e->rbx = 0;
	e->rsp = BOOT_STACK_TOP;
	e->cr3 = BOOT_PML4_ADDR;
	e->kernel_start = KERNEL_LOAD_ADDR;
	e->kernel_end = kend;
	e->initrd_start = a->initrd ? initrd_addr : 0;
	e->initrd_size = a->initrd ? a->initrd_len : 0;
	return 0;
}

/* ELF32 and ELF64 program headers, widened so one loader handles both. */
struct phdr {
	u32 type;
	u64 offset, paddr, filesz, memsz;
};

struct elf_img {
	const u8 *img;
	size_t len;
	bool is64;
	u64 phoff;
	u32 phnum;
};

static void elf_phdr(const struct elf_img *el, u32 i, struct phdr *p)
{
	if (el->is64) {
		Elf64_Phdr ph;

		memcpy(&ph, el->img + el->phoff + (u64)i * sizeof(ph), sizeof(ph));
		*p = (struct phdr){ ph.p_type, ph.p_offset, ph.p_paddr, ph.p_filesz, ph.p_memsz };
	} else {
		Elf32_Phdr ph;

		memcpy(&ph, el->img + el->phoff + (u64)i * sizeof(ph), sizeof(ph));
		*p = (struct phdr){ ph.p_type, ph.p_offset, ph.p_paddr, ph.p_filesz, ph.p_memsz };
	}
}

/* The ELF header's fields elf_parse_header checks, from either class. */
struct elf_ehdr {
	u16 type, machine, phentsize, phnum;
	size_t want_phent; /* the class's program header size */
};

/* elf_read_ehdr: el's ELF header (class el->is64) into *h and el->phoff; false when the image is
 * too short to hold it. */
#define ELF_EHDR_TAKE(h, el, eh, Phdr)                                                             \
	((h)->type = (eh).e_type, (h)->machine = (eh).e_machine,                                   \
	 (h)->phentsize = (eh).e_phentsize, (h)->phnum = (eh).e_phnum, (el)->phoff = (eh).e_phoff, \
	 (h)->want_phent = sizeof(Phdr))

static bool elf_read_ehdr(struct elf_img *el, struct elf_ehdr *h)
{
	Elf64_Ehdr e64;
	Elf32_Ehdr e32;

	if (el->len < (el->is64 ? sizeof(e64) : sizeof(e32)))
		return false;
	if (el->is64) {
		memcpy(&e64, el->img, sizeof(e64));
		ELF_EHDR_TAKE(h, el, e64, Elf64_Phdr);
	} else {
		memcpy(&e32, el->img, sizeof(e32));
		ELF_EHDR_TAKE(h, el, e32, Elf32_Phdr);
	}
	return true;
}

static int elf_parse_header(const u8 *img, size_t len, struct elf_img *el, char *err, size_t errlen)
{
	struct elf_ehdr h;

	if (len < EI_NIDENT) {
		errfmt(err, errlen, "ELF kernel truncated: %zu bytes", len);
		return -ENOEXEC;
	}
	if (img[EI_CLASS] != ELFCLASS64 && img[EI_CLASS] != ELFCLASS32) {
		errfmt(err, errlen, "ELF kernel has unknown class %u", img[EI_CLASS]);
		return -ENOEXEC;
	}
	if (img[EI_DATA] != ELFDATA2LSB) {
		errfmt(err, errlen, "ELF kernel is not little-endian");
		return -ENOEXEC;
	}
	el->img = img;
	el->len = len;
	el->is64 = img[EI_CLASS] == ELFCLASS64;
	if (!elf_read_ehdr(el, &h)) {
		errfmt(err, errlen, "ELF kernel truncated: %zu bytes, too short for the ELF header",
		       len);
		return -ENOEXEC;
	}
	if (h.machine != EM_X86_64 && h.machine != EM_386) {
		errfmt(err, errlen, "ELF kernel is for machine %u, not x86", h.machine);
		return -ENOEXEC;
	}
	if (h.type != ET_EXEC) {
		errfmt(err, errlen, "ELF kernel is not an executable (e_type %u)", h.type);
		return -ENOEXEC;
	}
	if (h.phnum == 0 || h.phnum == PN_XNUM || h.phentsize != h.want_phent) {
		errfmt(err, errlen, "ELF kernel has bad program headers (%u entries of %u bytes)",
		       h.phnum, h.phentsize);
		return -ENOEXEC;
	}
	if (!range_ok(el->phoff, (u64)h.phnum * h.phentsize, len)) {
		errfmt(err, errlen,
		       "ELF program headers at 0x%" PRIx64 " lie past the end of the file",
		       el->phoff);
		return -ENOEXEC;
	}
	el->phnum = h.phnum;
	return 0;
}

/* Looks for the Xen PHYS32_ENTRY note in [off, off+size); 1 if found, 0 if not, -errno if malformed. */
static int find_pvh_note(const u8 *img, u64 off, u64 size, u64 *entry, char *err, size_t errlen)
{
	u64 pos = off, end = off + size;

	while (end - pos >= sizeof(Elf64_Nhdr)) {
		Elf64_Nhdr nh;
		u64 name, desc, next;

		memcpy(&nh, img + pos, sizeof(nh));
		name = pos + sizeof(nh);
		desc = name + ALIGN_UP((u64)nh.n_namesz, 4);
		next = desc + ALIGN_UP((u64)nh.n_descsz, 4);
		/* Every term is below 2^34, so none of these sums can wrap. */
		if (desc > end || next > end) {
			errfmt(err, errlen,
			       "malformed ELF note at offset 0x%" PRIx64
			       " (name %u, desc %u bytes past the segment end)",
			       pos, nh.n_namesz, nh.n_descsz);
			return -ENOEXEC;
		}
		if (nh.n_namesz == 4 && !memcmp(img + name, "Xen", 4) &&
		    nh.n_type == PVH_ELFNOTE_PHYS32_ENTRY) {
			if (nh.n_descsz == 4) {
				u32 v;

				memcpy(&v, img + desc, 4);
				*entry = v;
			} else if (nh.n_descsz == 8) {
				memcpy(entry, img + desc, 8);
			} else {
				errfmt(err, errlen,
				       "PVH entry note has a %u-byte value (expected 4 or 8)",
				       nh.n_descsz);
				return -ENOEXEC;
			}
			return 1;
		}
		pos = next;
	}
	return 0;
}

/* One PT_LOAD segment checked: in the file, not wrapping, above the boot data, in guest RAM. */
static int pvh_check_load(const struct guest_mem *m, const struct elf_img *el, u32 i,
			  const struct phdr *p, char *err, size_t errlen)
{
	if (p->filesz > p->memsz) {
		errfmt(err, errlen,
		       "ELF segment %u has file size 0x%" PRIx64 " > memory size 0x%" PRIx64, i,
		       p->filesz, p->memsz);
		return -ENOEXEC;
	}
	if (!range_ok(p->offset, p->filesz, el->len)) {
		errfmt(err, errlen,
		       "ELF segment %u (offset 0x%" PRIx64 ", 0x%" PRIx64
		       " bytes) lies past the end of the file",
		       i, p->offset, p->filesz);
		return -ENOEXEC;
	}
	if (!range_ok(p->paddr, p->memsz, UINT64_MAX)) {
		errfmt(err, errlen,
		       "ELF segment %u at 0x%" PRIx64 " (+0x%" PRIx64 ") wraps the address space",
		       i, p->paddr, p->memsz);
		return -ENOEXEC;
	}
	if (p->memsz == 0)
		return 0;
	/* Below 1 MiB sit our boot structures (GDT, start info, cmdline, MP table). */
	if (p->paddr < BIOS_END) {
		errfmt(err, errlen,
		       "ELF segment %u at 0x%" PRIx64 " is below 1 MiB (reserved for boot data)", i,
		       p->paddr);
		return -ENOEXEC;
	}
	if (!gmem_ptr(m, p->paddr, p->memsz)) {
		errfmt(err, errlen,
		       "ELF segment %u at 0x%" PRIx64 " (+0x%" PRIx64 ") is outside guest RAM", i,
		       p->paddr, p->memsz);
		return -ENOMEM;
	}
	return 0;
}

/* Every segment validated and the entry found before anything is written: the loaded range
 * [*lo, *hi) and the PVH entry point. */
static int pvh_scan(const struct guest_mem *m, const struct elf_img *el, u64 *lo, u64 *hi,
		    u64 *entry, char *err, size_t errlen)
{
	bool have_note = false;
	struct phdr p;
	int ret;

	*lo = UINT64_MAX;
	*hi = 0;
	for (u32 i = 0; i < el->phnum; i++) {
		elf_phdr(el, i, &p);
		if (p.type == PT_NOTE && !have_note) {
			if (!range_ok(p.offset, p.filesz, el->len)) {
				errfmt(err, errlen,
				       "ELF note segment %u lies past the end of the file", i);
				return -ENOEXEC;
			}
			ret = find_pvh_note(el->img, p.offset, p.filesz, entry, err, errlen);
			if (ret < 0)
				return ret;
			have_note = ret;
		}
		if (p.type != PT_LOAD)
			continue;
		ret = pvh_check_load(m, el, i, &p, err, errlen);
		if (ret)
			return ret;
		if (p.memsz == 0)
			continue;
		*lo = MIN(*lo, p.paddr);
		*hi = MAX(*hi, p.paddr + p.memsz);
	}
	if (!have_note) {
		errfmt(err, errlen, "ELF kernel has no PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY)");
		return -ENOEXEC;
	}
	if (*hi == 0) {
		errfmt(err, errlen, "ELF kernel has no loadable segments");
		return -ENOEXEC;
	}
	/* The PVH entry runs in 32-bit protected mode without paging. */
	if (*entry >= PCI_HOLE_END || !gmem_ptr(m, *entry, 1)) {
		errfmt(err, errlen, "PVH entry point 0x%" PRIx64 " is not in guest RAM below 4 GiB",
		       *entry);
		return -ENOEXEC;
	}
	return 0;
}

static int pvh_write_segments(const struct guest_mem *m, const struct elf_img *el, char *err,
			      size_t errlen)
{
	struct phdr p;
	int ret;

	for (u32 i = 0; i < el->phnum; i++) {
		elf_phdr(el, i, &p);
		if (p.type != PT_LOAD || p.memsz == 0)
			continue;
		ret = gput(m, p.paddr, el->img + p.offset, p.filesz, "ELF segment", err, errlen);
		if (!ret && p.memsz > p.filesz)
			ret = gzero(m, p.paddr + p.filesz, p.memsz - p.filesz, "ELF bss", err,
				    errlen);
		if (ret)
			return ret;
	}
	return 0;
}

/* The PVH start info: the command line, the memory map, the initrd as the one module. */
static int pvh_start_info(const struct guest_mem *m, const struct boot_args *a, u64 initrd_addr,
			  char *err, size_t errlen)
{
	struct {
		struct pvh_start_info si;
		struct pvh_memmap_entry map[PVH_MEMMAP_MAX];
		struct pvh_modlist_entry mod;
	} pvh;
	struct boot_e820_entry e820[PVH_MEMMAP_MAX];
	int n;

	_Static_assert(PVH_START_INFO_ADDR + sizeof(pvh) <= BOOT_PARAMS_ADDR,
		       "PVH start info overlaps the zero page");
	memset(&pvh, 0, sizeof(pvh));
	n = e820_fill(m, e820, PVH_MEMMAP_MAX);
	if (n < 0) {
		errfmt(err, errlen, "memory map does not fit the PVH start info area");
		return n;
	}
	for (int i = 0; i < n; i++) {
		pvh.map[i].addr = e820[i].addr;
		pvh.map[i].size = e820[i].size;
		pvh.map[i].type = e820[i].type;
	}
	pvh.si.magic = PVH_START_MAGIC;
	pvh.si.version = 1;
	pvh.si.cmdline_paddr = BOOT_CMDLINE_ADDR;
	pvh.si.rsdp_paddr = a->acpi_rsdp;
	pvh.si.memmap_paddr = PVH_START_INFO_ADDR + offsetof(__typeof__(pvh), map);
	pvh.si.memmap_entries = (u32)n;
	if (a->initrd) {
		pvh.si.nr_modules = 1;
		pvh.si.modlist_paddr = PVH_START_INFO_ADDR + offsetof(__typeof__(pvh), mod);
		pvh.mod.paddr = initrd_addr;
		pvh.mod.size = a->initrd_len;
	}
	return gput(m, PVH_START_INFO_ADDR, &pvh, sizeof(pvh), "PVH start info", err, errlen);
}

static int load_pvh(const struct guest_mem *m, const struct boot_args *a, struct boot_entry *e,
		    char *err, size_t errlen)
{
	struct elf_img el;
	u64 lo, hi, entry = 0, initrd_addr = 0;
	int ret;

	ret = elf_parse_header(a->kernel, a->kernel_len, &el, err, errlen);
	if (!ret)
		ret = pvh_scan(m, &el, &lo, &hi, &entry, err, errlen);
	if (!ret)
		ret = check_cmdline(a->cmdline, BOOT_CMDLINE_MAX - 1, err, errlen);
	if (!ret && a->initrd)
		ret = place_initrd(m, a, hi, PCI_HOLE_END, &initrd_addr, err, errlen);
	/* Everything is validated; now write. */
	if (!ret)
		ret = pvh_write_segments(m, &el, err, errlen);
	if (!ret && a->initrd)
		ret = gput(m, initrd_addr, a->initrd, a->initrd_len, "initrd", err, errlen);
	if (!ret)
		ret = write_cmdline(m, a->cmdline, err, errlen);
	if (!ret)
		ret = pvh_start_info(m, a, initrd_addr, err, errlen);
	if (!ret)
		ret = write_gdt(m, err, errlen);
	if (ret)
		return ret;

	e->kind = BOOT_KIND_PVH;
	e->rip = entry;
	e->rsi = 0;
	e->rbx = PVH_START_INFO_ADDR;
	e->rsp = BOOT_STACK_TOP;
	e->cr3 = 0;
	e->kernel_start = lo;
	e->kernel_end = hi;
	e->initrd_start = a->initrd ? initrd_addr : 0;
	e->initrd_size = a->initrd ? a->initrd_len : 0;
	return 0;
}

int boot_load(const struct guest_mem *m, const struct boot_args *a, struct boot_entry *e, char *err,
	      size_t errlen)
{
	if (!a->kernel) {
		errfmt(err, errlen, "no kernel image");
		return -EINVAL;
	}
	memset(e, 0, sizeof(*e));
	switch (boot_detect(a->kernel, a->kernel_len)) {
	case BOOT_KIND_BZIMAGE:
		return load_bzimage(m, a, e, err, errlen);
	case BOOT_KIND_PVH:
		return load_pvh(m, a, e, err, errlen);
	default:
		/* Might still be a bzImage that is too short to show its magic. */
		if (a->kernel_len >= 2 && a->kernel_len < SETUP_HDR_END && a->kernel[0] == 'M' &&
		    a->kernel[1] == 'Z') {
			errfmt(err, errlen,
			       "bzImage truncated: %zu bytes, too short for the setup header",
			       a->kernel_len);
			return -ENOEXEC;
		}
		errfmt(err, errlen, "not a bzImage or ELF kernel (bad magic)");
		return -ENOEXEC;
	}
}

/* lkvm dump's file: an ELF64 core (ET_CORE, x86-64) of guest RAM and vCPU registers that gdb and crash open with the guest's vmlinux. */
#include <elf.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/elfcore.h"

/* elf_prstatus as the kernel writes it for x86-64 (336 bytes): what gdb's and crash's readers
 * expect; only the pid and the registers are filled. */
struct prstatus {
	u8 pad_info[12]; /* si_signo, si_code, si_errno */
	u16 cursig;
	u8 pad0[2];
	u64 sigpend, sighold;
	u32 pid, ppid, pgrp, sid;
	u64 times[8]; /* utime, stime, cutime, cstime: struct timeval each */
	struct elfcore_regs reg;
	u32 fpvalid;
	u8 pad1[4];
};
_Static_assert(sizeof(struct prstatus) == 336, "the kernel's x86-64 elf_prstatus");
_Static_assert(sizeof(struct elfcore_regs) == 27 * 8, "user_regs_struct");

#define NOTE_NAME "CORE"
#define NOTE_SIZE (sizeof(Elf64_Nhdr) + 8 + sizeof(struct prstatus)) /* "CORE\0" padded to 8 */
#define PAGE 4096ULL

static int put(int fd, const void *buf, size_t len, u64 off)
{
	const u8 *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
		off += (u64)n;
	}
	return 0;
}

/* The PT_LOADs: each RAM range at the direct map, and its part below 1 GiB again at the kernel
 * map; both point at the same bytes of the file. Returns how many were filled. */
static int loads(Elf64_Phdr *ph, const struct elfcore_ram *ram, int nr_ram, u64 data_off)
{
	int n = 0;

	for (int i = 0; i < nr_ram; i++) {
		u64 low = ram[i].gpa < ELFCORE_KERNEL_MAP_SIZE
				  ? MIN(ram[i].size, ELFCORE_KERNEL_MAP_SIZE - ram[i].gpa)
				  : 0;

		ph[n++] = (Elf64_Phdr){ .p_type = PT_LOAD,
					.p_flags = PF_R | PF_W | PF_X,
					.p_offset = data_off,
					.p_vaddr = ELFCORE_DIRECT_MAP + ram[i].gpa,
					.p_paddr = ram[i].gpa,
					.p_filesz = ram[i].size,
					.p_memsz = ram[i].size,
					.p_align = PAGE };
		if (low)
			ph[n++] = (Elf64_Phdr){ .p_type = PT_LOAD,
						.p_flags = PF_R | PF_W | PF_X,
						.p_offset = data_off,
						.p_vaddr = ELFCORE_KERNEL_MAP + ram[i].gpa,
						.p_paddr = ram[i].gpa,
						.p_filesz = low,
						.p_memsz = low,
						.p_align = PAGE };
		data_off += ram[i].size;
	}
	return n;
}

/* One NT_PRSTATUS per vCPU: header, "CORE" padded to 4 bytes, the status (4-byte aligned
 * only: written as bytes). */
static int write_notes(int fd, const struct elfcore_regs *cpus, int nr_cpus, u64 off)
{
	for (int i = 0; i < nr_cpus; i++) {
		Elf64_Nhdr h = { .n_namesz = sizeof(NOTE_NAME),
				 .n_descsz = sizeof(struct prstatus),
				 .n_type = NT_PRSTATUS };
		struct prstatus st = { .pid = (u32)i + 1, .reg = cpus[i] };
		u8 note[NOTE_SIZE] = { 0 };
		int ret;

		memcpy(note, &h, sizeof(h));
		memcpy(note + sizeof(h), NOTE_NAME, sizeof(NOTE_NAME));
		memcpy(note + sizeof(h) + 8, &st, sizeof(st));
		ret = put(fd, note, sizeof(note), off + (u64)i * NOTE_SIZE);
		if (ret < 0)
			return ret;
	}
	return 0;
}

long long elfcore_write(int fd, const struct elfcore_ram *ram, int nr_ram,
			const struct elfcore_regs *cpus, int nr_cpus)
{
	Elf64_Ehdr eh = { .e_ident = { ELFMAG0, ELFMAG1, ELFMAG2, ELFMAG3, ELFCLASS64, ELFDATA2LSB,
				       EV_CURRENT, ELFOSABI_NONE },
			  .e_type = ET_CORE,
			  .e_machine = EM_X86_64,
			  .e_version = EV_CURRENT,
			  .e_phoff = sizeof(Elf64_Ehdr),
			  .e_ehsize = sizeof(Elf64_Ehdr),
			  .e_phentsize = sizeof(Elf64_Phdr) };
	Elf64_Phdr ph[1 + 2 * ELFCORE_MAX_RAM];
	u64 notes_off, data_off, end;
	int ret;

	if (nr_ram < 1 || nr_ram > ELFCORE_MAX_RAM || nr_cpus < 1 || nr_cpus > ELFCORE_MAX_CPUS)
		return -EINVAL;
	eh.e_phnum = (Elf64_Half)(1 + loads(ph + 1, ram, nr_ram, 0));
	notes_off = sizeof(eh) + eh.e_phnum * sizeof(Elf64_Phdr);
	/* RAM page-aligned in the file, so that a reader may map it. */
	data_off = (notes_off + (u64)nr_cpus * NOTE_SIZE + PAGE - 1) & ~(PAGE - 1);
	loads(ph + 1, ram, nr_ram, data_off);
	ph[0] = (Elf64_Phdr){ .p_type = PT_NOTE,
			      .p_offset = notes_off,
			      .p_filesz = (u64)nr_cpus * NOTE_SIZE,
			      .p_align = 4 };
	ret = put(fd, &eh, sizeof(eh), 0);
	if (!ret)
		ret = put(fd, ph, eh.e_phnum * sizeof(Elf64_Phdr), sizeof(eh));
	if (!ret)
		ret = write_notes(fd, cpus, nr_cpus, notes_off);
	end = data_off;
	for (int i = 0; !ret && i < nr_ram; i++) {
		ret = put(fd, ram[i].hva, ram[i].size, end);
		end += ram[i].size;
	}
	return ret < 0 ? ret : (long long)end;
}

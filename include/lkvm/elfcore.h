/* An ELF64 core file of a guest (lkvm dump): PT_LOADs of its RAM at the addresses Linux maps it, and one NT_PRSTATUS per vCPU. */
#ifndef LKVM_ELFCORE_H
#define LKVM_ELFCORE_H

#include <stddef.h>

#include "lkvm/util.h"

/* x86-64 Linux without KASLR: all RAM at the direct map's base + its physical address
 * (page_offset_base), and physical 0 up to 1 GiB also at __START_KERNEL_map, where vmlinux's
 * symbols are (phys_base 0: the kernel at its link address). */
#define ELFCORE_DIRECT_MAP 0xffff888000000000ULL
#define ELFCORE_KERNEL_MAP 0xffffffff80000000ULL
#define ELFCORE_KERNEL_MAP_SIZE 0x40000000ULL
#define ELFCORE_MAX_RAM 2
#define ELFCORE_MAX_CPUS 64

struct elfcore_ram {
	u64 gpa, size;
	const void *hva;
};

/* A vCPU's registers, in user_regs_struct's order (the order of elf_prstatus's pr_reg). */
struct elfcore_regs {
	u64 r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8, rax, rcx, rdx, rsi, rdi, orig_rax;
	u64 rip, cs, eflags, rsp, ss, fs_base, gs_base, ds, es, fs, gs;
};

/* The core into fd from offset 0 with pwrite only (the control thread's sandbox allows it).
 * Returns the file's size, or -errno. */
long long elfcore_write(int fd, const struct elfcore_ram *ram, int nr_ram,
			const struct elfcore_regs *cpus, int nr_cpus) __must_check;

#endif

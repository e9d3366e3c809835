/* Guest physical memory: the layout (RAM below and above the PCI hole) and the one accessor. */
#ifndef LKVM_MEM_H
#define LKVM_MEM_H

#include "lkvm/util.h"

/* RAM below 4 GiB stops at the PCI hole; the rest is mapped from 4 GiB up. */
#define PCI_HOLE_START 0xC0000000ULL
#define PCI_HOLE_END 0x100000000ULL

#define GMEM_MAX_REGIONS 2

struct guest_region {
	u64 gpa;
	u64 size;
	u8 *hva; /* host address of gpa */
};

struct guest_mem {
	struct guest_region r[GMEM_MAX_REGIONS];
	int nr;
	u64 ram_size; /* total bytes of RAM, both regions */
	u8 *base;     /* one host mapping of ram_size bytes, region 0 first */
};

/* Split ram_size bytes into regions around the PCI hole and point them into
 * host buffer `base` (ram_size bytes). No allocation. Returns 0 or -EINVAL. */
int gmem_init(struct guest_mem *m, u8 *base, u64 ram_size) __must_check;

/* The only way to turn a guest physical range into a host pointer: returns NULL
 * unless [gpa, gpa+len) lies wholly inside one RAM region (overflow-checked).
 * len 0 is allowed and checks gpa only. */
void *gmem_ptr(const struct guest_mem *m, u64 gpa, u64 len);

/* End of RAM below 4 GiB (exclusive). */
u64 gmem_low_end(const struct guest_mem *m);

/* Copy helpers built on gmem_ptr; return 0 or -EFAULT. */
int gmem_write(const struct guest_mem *m, u64 gpa, const void *src, u64 len) __must_check;
int gmem_read(const struct guest_mem *m, u64 gpa, void *dst, u64 len) __must_check;

#endif

/* The e820 memory map shared by the bzImage zero page and the PVH start info. */
#include <errno.h>

#include "lkvm/boot.h"
#include "lkvm/layout.h"

/* Not taken from <asm/e820.h>: that header also defines BIOS_END, clashing with layout.h. */
#define E820_TYPE_RAM 1
#define E820_TYPE_RESERVED 2

static int add(struct boot_e820_entry *tab, int *n, int max, u64 addr, u64 size, u32 type)
{
	if (size == 0)
		return 0;
	if (*n >= max)
		return -ENOSPC;
	tab[*n] = (struct boot_e820_entry){ .addr = addr, .size = size, .type = type };
	(*n)++;
	return 0;
}

int e820_fill(const struct guest_mem *m, struct boot_e820_entry *tab, int max)
{
	u64 low_end = gmem_low_end(m);
	int n = 0, ret;

	/* The EBDA and the BIOS area are reserved even where no RAM backs them, so that the
	 * guest does not try to allocate there and finds the MP table where it scans. */
	ret = add(tab, &n, max, 0, MIN(low_end, EBDA_START), E820_TYPE_RAM);
	if (!ret)
		ret = add(tab, &n, max, EBDA_START, BIOS_END - EBDA_START, E820_TYPE_RESERVED);
	if (!ret && low_end > BIOS_END)
		ret = add(tab, &n, max, BIOS_END, low_end - BIOS_END, E820_TYPE_RAM);
	for (int i = 1; !ret && i < m->nr; i++)
		ret = add(tab, &n, max, m->r[i].gpa, m->r[i].size, E820_TYPE_RAM);
	return ret ? ret : n;
}

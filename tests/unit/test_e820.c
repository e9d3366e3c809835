/* Unit tests for the e820 map: small RAM without a hole, large RAM split around the PCI hole. */
#include <errno.h>
#include <sys/mman.h>

#include "check_main.h"
#include "lkvm/boot.h"
#include "lkvm/layout.h"

static u8 *map_ram(u64 size)
{
	/* Never touched, so even 5 GiB costs nothing. */
	u8 *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	ck_assert_ptr_ne(p, MAP_FAILED);
	return p;
}

static void check_entry(const struct boot_e820_entry *e, u64 addr, u64 size, u32 type)
{
	ck_assert_uint_eq(e->addr, addr);
	ck_assert_uint_eq(e->size, size);
	ck_assert_uint_eq(e->type, type);
}

START_TEST(e820_no_hole)
{
	struct guest_mem m;
	struct boot_e820_entry tab[8];
	u8 *ram = map_ram(MiB(256));

	ck_assert_int_eq(gmem_init(&m, ram, MiB(256)), 0);
	ck_assert_int_eq(e820_fill(&m, tab, 8), 3);
	check_entry(&tab[0], 0, EBDA_START, 1);
	check_entry(&tab[1], EBDA_START, BIOS_END - EBDA_START, 2);
	check_entry(&tab[2], BIOS_END, MiB(256) - BIOS_END, 1);
	/* exactly enough room, then too little */
	ck_assert_int_eq(e820_fill(&m, tab, 3), 3);
	ck_assert_int_eq(e820_fill(&m, tab, 2), -ENOSPC);
	ck_assert_int_eq(e820_fill(&m, tab, 0), -ENOSPC);
	munmap(ram, MiB(256));
}
END_TEST

START_TEST(e820_exactly_hole_start)
{
	struct guest_mem m;
	struct boot_e820_entry tab[8];
	u8 *ram = map_ram(PCI_HOLE_START);

	ck_assert_int_eq(gmem_init(&m, ram, PCI_HOLE_START), 0);
	ck_assert_int_eq(e820_fill(&m, tab, 8), 3);
	check_entry(&tab[2], BIOS_END, PCI_HOLE_START - BIOS_END, 1);
	munmap(ram, PCI_HOLE_START);
}
END_TEST

START_TEST(e820_hole)
{
	struct guest_mem m;
	struct boot_e820_entry tab[8];
	u64 size = GiB(5);
	u8 *ram = map_ram(size);

	ck_assert_int_eq(gmem_init(&m, ram, size), 0);
	ck_assert_int_eq(e820_fill(&m, tab, 8), 4);
	check_entry(&tab[0], 0, EBDA_START, 1);
	check_entry(&tab[1], EBDA_START, BIOS_END - EBDA_START, 2);
	check_entry(&tab[2], BIOS_END, PCI_HOLE_START - BIOS_END, 1);
	check_entry(&tab[3], GiB(4), size - PCI_HOLE_START, 1);
	/* all RAM accounted for, except what the reserved BIOS area hides */
	ck_assert_uint_eq(tab[0].size + tab[2].size + tab[3].size, size - (BIOS_END - EBDA_START));
	ck_assert_int_eq(e820_fill(&m, tab, 3), -ENOSPC);
	munmap(ram, size);
}
END_TEST

static Suite *e820_suite(void)
{
	Suite *s = suite_create("e820");
	TCase *tc = tcase_create("e820");

	tcase_add_test(tc, e820_no_hole);
	tcase_add_test(tc, e820_exactly_hole_start);
	tcase_add_test(tc, e820_hole);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(e820_suite)

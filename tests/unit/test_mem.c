/* Unit tests for the guest-memory accessor: region split around the PCI hole and every boundary. */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "check_main.h"
#include "lkvm/mem.h"

static u8 *map_ram(u64 size)
{
	/* Never touched, so even 5 GiB costs nothing. */
	u8 *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	ck_assert_ptr_ne(p, MAP_FAILED);
	return p;
}

START_TEST(mem_init_args)
{
	struct guest_mem m;
	u8 page[8192];

	ck_assert_int_eq(gmem_init(&m, NULL, 4096), -EINVAL);
	ck_assert_int_eq(gmem_init(&m, page, 0), -EINVAL);
	ck_assert_int_eq(gmem_init(&m, page, 4097), -EINVAL);
	ck_assert_int_eq(gmem_init(&m, page, 8192), 0);
	ck_assert_int_eq(m.nr, 1);
	ck_assert_uint_eq(m.ram_size, 8192);
	ck_assert_uint_eq(gmem_low_end(&m), 8192);
}
END_TEST

START_TEST(mem_small_bounds)
{
	struct guest_mem m;
	u64 size = 1 << 20;
	u8 *ram = malloc(size);
	u8 b = 0x5a, r = 0;

	ck_assert_int_eq(gmem_init(&m, ram, size), 0);
	ck_assert_ptr_eq(gmem_ptr(&m, 0, size), ram);
	ck_assert_ptr_eq(gmem_ptr(&m, 100, 10), ram + 100);
	ck_assert_ptr_eq(gmem_ptr(&m, size - 1, 1), ram + size - 1);
	ck_assert_ptr_null(gmem_ptr(&m, 0, size + 1));
	ck_assert_ptr_null(gmem_ptr(&m, size - 1, 2));
	ck_assert_ptr_null(gmem_ptr(&m, size, 1));
	/* len 0 checks gpa only: exactly-at-end is outside */
	ck_assert_ptr_eq(gmem_ptr(&m, size - 1, 0), ram + size - 1);
	ck_assert_ptr_null(gmem_ptr(&m, size, 0));
	/* overflow of gpa + len */
	ck_assert_ptr_null(gmem_ptr(&m, 1, UINT64_MAX));
	ck_assert_ptr_null(gmem_ptr(&m, UINT64_MAX, 2));
	ck_assert_ptr_null(gmem_ptr(&m, UINT64_MAX - 4095, 4096));

	ck_assert_int_eq(gmem_write(&m, size - 1, &b, 1), 0);
	ck_assert_int_eq(gmem_read(&m, size - 1, &r, 1), 0);
	ck_assert_uint_eq(r, 0x5a);
	ck_assert_int_eq(gmem_write(&m, size, &b, 1), -EFAULT);
	ck_assert_int_eq(gmem_read(&m, size - 1, &r, 2), -EFAULT);
	free(ram);
}
END_TEST

START_TEST(mem_hole)
{
	struct guest_mem m;
	u64 size = GiB(5);
	u8 *ram = map_ram(size);

	ck_assert_int_eq(gmem_init(&m, ram, size), 0);
	ck_assert_int_eq(m.nr, 2);
	ck_assert_uint_eq(gmem_low_end(&m), PCI_HOLE_START);
	ck_assert_uint_eq(m.r[1].gpa, PCI_HOLE_END);
	ck_assert_uint_eq(m.r[1].size, size - PCI_HOLE_START);

	ck_assert_ptr_eq(gmem_ptr(&m, PCI_HOLE_START - 8, 8), ram + PCI_HOLE_START - 8);
	/* crossing into the hole, inside it, crossing out of it */
	ck_assert_ptr_null(gmem_ptr(&m, PCI_HOLE_START - 8, 9));
	ck_assert_ptr_null(gmem_ptr(&m, PCI_HOLE_START, 1));
	ck_assert_ptr_null(gmem_ptr(&m, PCI_HOLE_START, 0));
	ck_assert_ptr_null(gmem_ptr(&m, PCI_HOLE_END - 1, 2));
	ck_assert_ptr_null(gmem_ptr(&m, PCI_HOLE_START - 4096, PCI_HOLE_END));
	/* high RAM maps to the host right after low RAM */
	ck_assert_ptr_eq(gmem_ptr(&m, PCI_HOLE_END, 1), ram + PCI_HOLE_START);
	ck_assert_ptr_eq(gmem_ptr(&m, PCI_HOLE_END + GiB(2) - 1, 1), ram + size - 1);
	ck_assert_ptr_null(gmem_ptr(&m, PCI_HOLE_END + GiB(2) - 1, 2));
	ck_assert_ptr_null(gmem_ptr(&m, PCI_HOLE_END + GiB(2), 0));
	ck_assert_ptr_null(gmem_ptr(&m, PCI_HOLE_END, UINT64_MAX));
	munmap(ram, size);
}
END_TEST

static Suite *mem_suite(void)
{
	Suite *s = suite_create("mem");
	TCase *tc = tcase_create("mem");

	tcase_add_test(tc, mem_init_args);
	tcase_add_test(tc, mem_small_bounds);
	tcase_add_test(tc, mem_hole);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(mem_suite)

/* Unit tests of lkvm dump's ELF core writer (elfcore.c): the headers, PT_LOADs and notes read back as gdb reads them. */
#include <elf.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/elfcore.h"

static u8 low[3 * 4096], high[4096];

/* Two RAM ranges (below 1 GiB and at 4 GiB) and two vCPUs: a PT_NOTE, a direct-map PT_LOAD for
 * each, a kernel-map one for the low range only, both over the same bytes; NT_PRSTATUS's
 * registers where elf_prstatus has them. */
START_TEST(test_layout)
{
	struct elfcore_ram ram[2] = { { 0, sizeof(low), low }, { 1ULL << 32, sizeof(high), high } };
	struct elfcore_regs regs[2] = { { .rip = 0xffffffff81000000ULL, .rsp = 1 },
					{ .rip = 0xffffffff81234567ULL, .gs_base = 7 } };
	int fd = memfd_create("core", MFD_CLOEXEC);
	long long size;
	Elf64_Ehdr eh;
	Elf64_Phdr ph[4];
	u8 got[sizeof(low)];

	ck_assert_int_ge(fd, 0);
	memset(low, 0xa5, sizeof(low));
	memset(high, 0x5a, sizeof(high));
	size = elfcore_write(fd, ram, 2, regs, 2);
	ck_assert_int_gt(size, 0);
	ck_assert_int_eq(lseek(fd, 0, SEEK_END), size);
	ck_assert_int_eq(pread(fd, &eh, sizeof(eh), 0), sizeof(eh));
	ck_assert(!memcmp(eh.e_ident, ELFMAG, SELFMAG));
	ck_assert_int_eq(eh.e_ident[EI_CLASS], ELFCLASS64);
	ck_assert_int_eq(eh.e_type, ET_CORE);
	ck_assert_int_eq(eh.e_machine, EM_X86_64);
	ck_assert_int_eq(eh.e_phnum, 4);
	ck_assert_int_eq(pread(fd, ph, sizeof(ph), (off_t)eh.e_phoff), sizeof(ph));
	ck_assert_int_eq(ph[0].p_type, PT_NOTE);
	ck_assert_int_eq(ph[1].p_type, PT_LOAD);
	ck_assert_uint_eq(ph[1].p_vaddr, ELFCORE_DIRECT_MAP);
	ck_assert_uint_eq(ph[1].p_paddr, 0);
	ck_assert_uint_eq(ph[1].p_filesz, sizeof(low));
	ck_assert_uint_eq(ph[1].p_offset % 4096, 0);
	ck_assert_uint_eq(ph[2].p_vaddr, ELFCORE_KERNEL_MAP);
	ck_assert_uint_eq(ph[2].p_offset, ph[1].p_offset);
	ck_assert_uint_eq(ph[3].p_vaddr, ELFCORE_DIRECT_MAP + (1ULL << 32));
	ck_assert_uint_eq(ph[3].p_paddr, 1ULL << 32);
	ck_assert_uint_eq(ph[3].p_offset, ph[1].p_offset + sizeof(low));
	ck_assert_uint_eq(ph[3].p_offset + ph[3].p_filesz, (u64)size);
	ck_assert_int_eq(pread(fd, got, sizeof(low), (off_t)ph[2].p_offset), sizeof(low));
	ck_assert(!memcmp(got, low, sizeof(low)));
	ck_assert_int_eq(pread(fd, got, sizeof(high), (off_t)ph[3].p_offset), sizeof(high));
	ck_assert(!memcmp(got, high, sizeof(high)));
	/* The notes: two NT_PRSTATUS named CORE, pr_reg at offset 112 of the status. */
	for (int i = 0; i < 2; i++) {
		u8 note[356];
		Elf64_Nhdr h;
		struct elfcore_regs r;

		ck_assert_uint_eq(ph[0].p_filesz, 2 * sizeof(note));
		ck_assert_int_eq(pread(fd, note, sizeof(note),
				       (off_t)(ph[0].p_offset + i * sizeof(note))),
				 sizeof(note));
		memcpy(&h, note, sizeof(h));
		ck_assert_int_eq(h.n_type, NT_PRSTATUS);
		ck_assert_int_eq(h.n_namesz, 5);
		ck_assert_int_eq(h.n_descsz, 336);
		ck_assert_str_eq((char *)note + sizeof(h), "CORE");
		memcpy(&r, note + sizeof(h) + 8 + 112, sizeof(r));
		ck_assert_uint_eq(r.rip, regs[i].rip);
		ck_assert_uint_eq(r.gs_base, regs[i].gs_base);
	}
	close(fd);
}
END_TEST

/* Out of range: no RAM, too many ranges or vCPUs; a file that cannot be written says why. */
START_TEST(test_errors)
{
	struct elfcore_ram ram[3] = { { 0, 4096, low }, { 0, 4096, low }, { 0, 4096, low } };
	struct elfcore_regs regs[1] = { { 0 } };
	int p[2];

	ck_assert_int_eq(elfcore_write(-1, ram, 0, regs, 1), -EINVAL);
	ck_assert_int_eq(elfcore_write(-1, ram, 3, regs, 1), -EINVAL);
	ck_assert_int_eq(elfcore_write(-1, ram, 1, regs, 0), -EINVAL);
	ck_assert_int_eq(elfcore_write(-1, ram, 1, regs, ELFCORE_MAX_CPUS + 1), -EINVAL);
	ck_assert_int_eq(elfcore_write(-1, ram, 1, regs, 1), -EBADF);
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(elfcore_write(p[1], ram, 1, regs, 1), -ESPIPE);
	close(p[0]);
	close(p[1]);
}
END_TEST

static Suite *elfcore_suite(void)
{
	Suite *s = suite_create("elfcore");
	TCase *tc = tcase_create("write");

	tcase_add_test(tc, test_layout);
	tcase_add_test(tc, test_errors);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(elfcore_suite)

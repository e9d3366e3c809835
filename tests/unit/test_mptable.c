/* Unit tests for the MP table: parse it back the way Linux's mpparse.c does and check every entry. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "check_main.h"
#include "lkvm/boot.h"
#include "lkvm/layout.h"

#define RAM_SIZE MiB(16)

struct vm {
	struct guest_mem m;
	u8 *ram;
	char err[256];
};

static void vm_init(struct vm *v)
{
	v->ram = mmap(NULL, RAM_SIZE, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	ck_assert_ptr_ne(v->ram, MAP_FAILED);
	memset(v->ram + MPTABLE_ADDR, 0xee, BIOS_END - MPTABLE_ADDR);
	ck_assert_int_eq(gmem_init(&v->m, v->ram, RAM_SIZE), 0);
	v->err[0] = 0;
}

static u8 sum(const u8 *p, size_t len)
{
	u8 s = 0;

	while (len--)
		s += *p++;
	return s;
}

static u16 le16(const u8 *p)
{
	return (u16)(p[0] | p[1] << 8);
}

static u32 le32(const u8 *p)
{
	return (u32)p[0] | (u32)p[1] << 8 | (u32)p[2] << 16 | (u32)p[3] << 24;
}

/* Byte offsets of the spec's fields; deliberately independent of mptable.c's structs. */
static void check_table(struct vm *v, int nr_cpus)
{
	const u8 *mpf = gmem_ptr(&v->m, MPTABLE_ADDR, 16);
	const u8 *c, *p, *end;
	u32 cfg;
	u16 len, count;
	int cpus = 0, buses = 0, ioapics = 0, ints = 0, lints = 0, n = 0;
	bool isa_seen[16] = { false }, slot_seen[32] = { false };

	ck_assert_ptr_nonnull(mpf);
	ck_assert_mem_eq(mpf, "_MP_", 4);
	ck_assert_uint_eq(mpf[8], 1); /* length in paragraphs */
	ck_assert_uint_eq(mpf[9], 4); /* spec 1.4 */
	ck_assert_uint_eq(sum(mpf, 16), 0);
	ck_assert_uint_eq(mpf[11], 0); /* config table present, no default configuration */
	cfg = le32(mpf + 4);
	ck_assert_uint_ge(cfg, MPTABLE_ADDR + 16);

	c = gmem_ptr(&v->m, cfg, 44);
	ck_assert_ptr_nonnull(c);
	ck_assert_mem_eq(c, "PCMP", 4);
	len = le16(c + 4);
	ck_assert_uint_eq(c[6], 4);
	ck_assert_uint_eq(le32(c + 36), LAPIC_ADDR);
	ck_assert_uint_eq(le16(c + 40), 0); /* no extended table */
	count = le16(c + 34);
	ck_assert_uint_eq(len, 44 + 20 * nr_cpus + 8 * (2 + 1 + 15 + 31 + 2));
	ck_assert_uint_le(cfg + len, BIOS_END);
	ck_assert_ptr_nonnull(gmem_ptr(&v->m, cfg, len));
	ck_assert_uint_eq(sum(c, len), 0);

	p = c + 44;
	end = c + len;
	while (p < end) {
		n++;
		switch (p[0]) {
		case 0: /* processor */
			ck_assert_uint_eq(p[1], cpus);
			ck_assert_uint_eq(p[2], 0x14);
			ck_assert_uint_eq(p[3], cpus == 0 ? 3 : 1);
			ck_assert_uint_eq(le32(p + 4) >> 8 & 0xf, 6);
			ck_assert_uint_ne(le32(p + 8) & (1u << 9), 0); /* APIC feature */
			cpus++;
			p += 20;
			break;
		case 1: /* bus */
			ck_assert_mem_eq(p + 2, buses == 0 ? "PCI   " : "ISA   ", 6);
			ck_assert_uint_eq(p[1], buses);
			buses++;
			p += 8;
			break;
		case 2: /* IOAPIC */
			ck_assert_uint_eq(p[1], nr_cpus);
			ck_assert_uint_eq(p[2], 0x11);
			ck_assert_uint_eq(p[3], 1);
			ck_assert_uint_eq(le32(p + 4), IOAPIC_ADDR);
			ioapics++;
			p += 8;
			break;
		case 3:				    /* I/O interrupt */
			ck_assert_uint_eq(p[1], 0); /* INT */
			ck_assert_uint_eq(p[6], nr_cpus);
			if (p[4] == 1) {
				u8 irq = p[5];

				ck_assert_uint_lt(irq, 16);
				ck_assert_uint_ne(irq, 2);
				ck_assert(!isa_seen[irq]);
				isa_seen[irq] = true;
				ck_assert_uint_eq(p[7], irq == 0 ? 2 : irq);
				ck_assert_uint_eq(le16(p + 2), irq == 0 ? 0x05 : 0);
			} else {
				u8 slot = p[5] >> 2;

				ck_assert_uint_eq(p[4], 0);
				ck_assert_uint_eq(p[5] & 3, 0); /* INTA */
				ck_assert(slot >= 1 && slot <= 31 && !slot_seen[slot]);
				slot_seen[slot] = true;
				ck_assert_uint_eq(p[7], MPTABLE_PCI_PIN(slot));
				ck_assert_uint_eq(le16(p + 2), 0x0f);
			}
			ints++;
			p += 8;
			break;
		case 4:						     /* local interrupt */
			ck_assert_uint_eq(p[1], lints == 0 ? 3 : 1); /* ExtINT, then NMI */
			ck_assert_uint_eq(p[6], 0xff);
			ck_assert_uint_eq(p[7], lints);
			lints++;
			p += 8;
			break;
		default:
			ck_abort_msg("unknown MP entry type %u", p[0]);
		}
	}
	ck_assert_ptr_eq(p, end);
	ck_assert_int_eq(n, count);
	ck_assert_int_eq(cpus, nr_cpus);
	ck_assert_int_eq(buses, 2);
	ck_assert_int_eq(ioapics, 1);
	ck_assert_int_eq(ints, 15 + 31);
	ck_assert_int_eq(lints, 2);
	ck_assert(isa_seen[0] && isa_seen[1] && isa_seen[4] && isa_seen[15] && !isa_seen[2]);
	ck_assert(slot_seen[1] && slot_seen[31] && !slot_seen[0]);
	ck_assert_uint_eq(MPTABLE_PCI_PIN(1), 17);
	ck_assert_uint_eq(MPTABLE_PCI_PIN(8), 16);
}

START_TEST(mp_one_cpu)
{
	struct vm v;

	vm_init(&v);
	ck_assert_int_eq(mptable_write(&v.m, 1, v.err, sizeof(v.err)), 0);
	check_table(&v, 1);
	munmap(v.ram, RAM_SIZE);
}
END_TEST

START_TEST(mp_four_cpus)
{
	struct vm v;

	vm_init(&v);
	ck_assert_int_eq(mptable_write(&v.m, 4, v.err, sizeof(v.err)), 0);
	check_table(&v, 4);
	munmap(v.ram, RAM_SIZE);
}
END_TEST

START_TEST(mp_max_cpus)
{
	struct vm v;

	vm_init(&v);
	ck_assert_int_eq(mptable_write(&v.m, 64, v.err, sizeof(v.err)), 0);
	check_table(&v, 64);
	ck_assert_int_eq(mptable_write(&v.m, 254, v.err, sizeof(v.err)), 0);
	check_table(&v, 254);
	munmap(v.ram, RAM_SIZE);
}
END_TEST

START_TEST(mp_bad_cpu_count)
{
	struct vm v;

	vm_init(&v);
	ck_assert_int_eq(mptable_write(&v.m, 0, v.err, sizeof(v.err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(v.err, "0 CPUs"));
	ck_assert_int_eq(mptable_write(&v.m, -1, v.err, sizeof(v.err)), -EINVAL);
	ck_assert_int_eq(mptable_write(&v.m, 1000, v.err, sizeof(v.err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(v.err, "1000 CPUs"));
	ck_assert_int_eq(mptable_write(&v.m, 255, v.err, sizeof(v.err)), -EINVAL);
	/* nothing was written */
	ck_assert_uint_eq(v.ram[MPTABLE_ADDR], 0xee);
	munmap(v.ram, RAM_SIZE);
}
END_TEST

static Suite *mptable_suite(void)
{
	Suite *s = suite_create("mptable");
	TCase *tc = tcase_create("mptable");

	tcase_add_test(tc, mp_one_cpu);
	tcase_add_test(tc, mp_four_cpus);
	tcase_add_test(tc, mp_max_cpus);
	tcase_add_test(tc, mp_bad_cpu_count);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(mptable_suite)

/* Guest insn: int3 (the #BP handler runs once and execution continues), stac/clac when SMAP exists, fwait; all at CPL0, each checked here. */
#include "guest.h"

#define RFLAGS_AC (1ull << 18)
#define CPUID_7_EBX_SMAP (1u << 20)
#define CR0_MP 0x2
#define CR0_EM 0x4
#define CR0_TS 0x8
#define CR0_NE 0x20

/*
 * insn.smap=1 on the command line: the host's CPU has SMAP, so the guest must see it (lkvm passes
 * the CPU's SMAP bit through) and stac/clac must run; insn.smap=0: it must not. Absent: either.
 */

static u32 bp_count;
static u64 bp_rip;

/* int3 is trap-like: the frame's RIP is the address after it. */
static void bp_handler(struct exc_frame *f)
{
	bp_count++;
	bp_rip = f->rip;
}

static u64 rflags(void)
{
	u64 f;

	__asm__ __volatile__("pushfq; popq %0" : "=r"(f));
	return f;
}

static bool has_smap(void)
{
	u32 a, b, c, d;

	cpuid(0, 0, &a, &b, &c, &d);
	if (a < 7)
		return false;
	cpuid(7, 0, &a, &b, &c, &d);
	return b & CPUID_7_EBX_SMAP;
}

void guest_main(void)
{
	u64 after, cr0, want_smap = cmdline_u64("insn.smap", ~0ull);
	bool smap = has_smap();

	guest_set_handler(3, bp_handler);
	__asm__ __volatile__("lea 1f(%%rip), %0\n\tint3\n1:" : "=r"(after) : : "memory");
	gprintf("GUEST insn int3: count=%u eip=0x%08llx\n", bp_count, bp_rip);
	GUEST_ASSERT_EQ(bp_count, 1);
	GUEST_ASSERT_EQ(bp_rip, after);

	if (want_smap != ~0ull)
		GUEST_ASSERT_EQ(smap, want_smap);
	if (smap) {
		__asm__ __volatile__("stac" ::: "memory");
		GUEST_ASSERT(rflags() & RFLAGS_AC);
		__asm__ __volatile__("clac" ::: "memory");
		GUEST_ASSERT(!(rflags() & RFLAGS_AC));
		gprintf("GUEST insn stac, clac: OK\n");
	} else {
		gprintf("GUEST insn smap absent, skipped\n");
	}

	__asm__ __volatile__("mov %%cr0, %0" : "=r"(cr0));
	cr0 = (cr0 & ~(u64)(CR0_EM | CR0_TS)) | CR0_MP | CR0_NE;
	__asm__ __volatile__("mov %0, %%cr0" : : "r"(cr0) : "memory");
	__asm__ __volatile__("fninit; fwait" ::: "memory");
	gprintf("GUEST insn fwait: OK\n");
}

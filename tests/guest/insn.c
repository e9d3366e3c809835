/* Guest insn: int3 (the #BP handler runs once and execution continues), stac/clac when SMAP exists, fwait; all at CPL0. */
#include "guest.h"

#define RFLAGS_AC (1ull << 18)
#define CPUID_7_EBX_SMAP (1u << 20)
#define CR0_MP 0x2
#define CR0_EM 0x4
#define CR0_TS 0x8
#define CR0_NE 0x20

static u32 bp_count, fails;
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

static void report(const char *what, u64 got, u64 want)
{
	bool ok = got == want;

	gprintf("GUEST insn %s%llu %s\n", what, got, ok ? "OK" : "FAIL");
	fails += !ok;
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
	u64 after, cr0;
	bool ok;

	guest_set_handler(3, bp_handler);
	__asm__ __volatile__("lea 1f(%%rip), %0\n\tint3\n1:" : "=r"(after) : : "memory");
	ok = bp_count == 1 && bp_rip == after;
	gprintf("GUEST insn int3: count=%u eip=0x%08llx %s\n", bp_count, bp_rip,
		ok ? "OK" : "FAIL");
	fails += !ok;

	if (has_smap()) {
		__asm__ __volatile__("stac" ::: "memory");
		report("stac: ac=", !!(rflags() & RFLAGS_AC), 1);
		__asm__ __volatile__("clac" ::: "memory");
		report("clac: ac=", !!(rflags() & RFLAGS_AC), 0);
	} else {
		gprintf("GUEST insn smap absent, skipped\n");
	}

	__asm__ __volatile__("mov %%cr0, %0" : "=r"(cr0));
	cr0 = (cr0 & ~(u64)(CR0_EM | CR0_TS)) | CR0_MP | CR0_NE;
	__asm__ __volatile__("mov %0, %%cr0" : : "r"(cr0) : "memory");
	__asm__ __volatile__("fninit; fwait" ::: "memory");
	gprintf("GUEST insn fwait: OK\n");

	if (fails) {
		gprintf("GUEST insn: FAIL\n");
		guest_panic();
	}
	gprintf("GUEST insn: ALL OK\n");
}

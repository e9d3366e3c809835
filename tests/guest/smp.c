/* Guest smp: counts the CPUs in the MP table, starts the APs with INIT/SIPI/SIPI and waits for each to check in. */
/* smp.cpus=N on the command line: the CPUs the host gave it (lkvm -c N); the MP table must say N. */
#include "guest.h"

#define MAX_CPUS 64
#define WAIT_NS 5000000000ull

static u32 ap_count;

static void ap_main(u32 apic_id)
{
	gprintf("GUEST smp: AP %u up\n", apic_id);
	__atomic_fetch_add(&ap_count, 1, __ATOMIC_RELEASE);
}

void guest_main(void)
{
	int n = mp_count_cpus();
	u64 end, want = cmdline_u64("smp.cpus", 0);

	gprintf("GUEST smp: MP table cpus=%d\n", n);
	GUEST_ASSERT(n > 0); /* 0: no MP table */
	GUEST_ASSERT(n <= MAX_CPUS);
	if (want)
		GUEST_ASSERT_EQ(n, want);
	clock_init();
	if (n > 1)
		smp_start_aps(ap_main, (unsigned)n - 1);
	/* Bounded: an AP that never starts fails the run instead of hanging it. */
	end = rdtsc() + ns_to_tsc(WAIT_NS);
	while (__atomic_load_n(&ap_count, __ATOMIC_ACQUIRE) < (u32)n - 1) {
		if ((s64)(rdtsc() - end) > 0)
			GUEST_FAIL("cpus=%d, %u APs up after 5 s", n,
				   __atomic_load_n(&ap_count, __ATOMIC_ACQUIRE));
		cpu_relax();
	}
	gprintf("GUEST smp: SMP OK cpus=%d\n", n);
}

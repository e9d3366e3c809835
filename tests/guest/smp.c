/* Guest smp: counts the CPUs in the MP table, starts the APs with INIT/SIPI/SIPI and waits for each to check in. */
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
	u64 end;

	if (!n) {
		gprintf("GUEST smp: SMP FAIL no MP table\n");
		guest_panic();
	}
	gprintf("GUEST smp: MP table cpus=%d\n", n);
	if (n > MAX_CPUS) {
		gprintf("GUEST smp: SMP FAIL too many CPUs\n");
		guest_panic();
	}
	clock_init();
	if (n > 1)
		smp_start_aps(ap_main, (unsigned)n - 1);
	/* Bounded: an AP that never starts fails the run instead of hanging it. */
	end = rdtsc() + ns_to_tsc(WAIT_NS);
	while (__atomic_load_n(&ap_count, __ATOMIC_ACQUIRE) < (u32)n - 1) {
		if ((s64)(rdtsc() - end) > 0) {
			gprintf("GUEST smp: SMP FAIL cpus=%d aps_up=%u\n", n, ap_count);
			guest_panic();
		}
		cpu_relax();
	}
	gprintf("GUEST smp: SMP OK cpus=%d\n", n);
}

/* Guest ticks: prints a numbered line with its own kvm-clock and TSC readings every tick_ms of kvm-clock time, so a host can see it stand still over a pause and its clocks go on after. */
#include "guest.h"

/*
 * Command line (lkvm -p): tick_ms=N (default 100). Prints "GUEST ticks: tsc_hz=.." once, then
 * forever "TICK n=N kvmclock_ns=NS tsc=TSC", n counting up from 0 with no gap, NS and TSC read
 * together (the TSC value kvm-clock was computed from) after the line's first bytes went out:
 * so a line that begins after a pause holds a reading from after it, and a line that ended
 * before a pause one from before it. Every reading is checked against the one before: a clock
 * that goes back ends the run with GUEST FAIL (lkvm exits 2).
 * Runs at CPL0: the guest's TSC there is the one KVM offsets (on a PVM host CPL3 reads the
 * host's TSC natively), and kvm-clock's page is in terms of that TSC.
 */

static u64 prev_ns, prev_tsc;

static u64 read_clocks(u64 *tsc)
{
	u64 ns = kvmclock_read(tsc);

	if (ns < prev_ns || *tsc < prev_tsc)
		GUEST_FAIL("a clock went back: kvmclock_ns %llu -> %llu, tsc %llu -> %llu", prev_ns,
			   ns, prev_tsc, *tsc);
	prev_ns = ns;
	prev_tsc = *tsc;
	return ns;
}

void guest_main(void)
{
	u64 tick_ns = cmdline_u64("tick_ms", 100) * 1000000ull, next = 0, tsc;

	clock_init();
	if (!kvmclock_start())
		GUEST_FAIL("no kvm-clock (CPUID 0x40000001 offers neither clock source)");
	gprintf("GUEST ticks: tsc_hz=%llu tick_ns=%llu\n", tsc_hz, tick_ns);
	for (u64 n = 0;; n++) {
		while (read_clocks(&tsc) < next)
			;
		gprintf("TICK n=%llu ", n);
		next = read_clocks(&tsc);
		gprintf("kvmclock_ns=%llu tsc=%llu\n", next, tsc);
		next += tick_ns;
	}
}

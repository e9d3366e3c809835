/* Guest gdb-target: a known function and a global for the gdb target's tests (breakpoints, watchpoints, steps), at CPL0 or CPL3. */
#include "guest.h"

/*
 * The host side (tests/unit/test_gdb_target.c, tests/integration/test-gdb.sh) finds these two
 * symbols with nm: a software or hardware breakpoint on gdb_target_fn stops with a and b in
 * rdi and rsi, and a write watchpoint on gdb_counter fires on the store in it. Command line:
 *   gdb.rounds=N  calls (default 100); every call's arguments are (round, round * 2);
 *   gdb.cpl3=1    the loop runs at CPL3 (native speed on a PVM host), else at CPL0;
 *   gdb.int3=1    the guest also runs an int3 of its own first and checks its #BP handler
 *                 saw it: a debugger must give the guest its own breakpoints back.
 * The run ends with status 0 when every call added what it should to gdb_counter.
 */

volatile u64 gdb_counter;
int gdb_target_fn(int a, int b);
static volatile u64 own_bps;

/* noinline and used: the call is what the tests break on, so it must stay a call. */
__attribute__((noinline, used)) int gdb_target_fn(int a, int b)
{
	gdb_counter += (u64)(a + b);
	return a + b;
}

static void own_bp(struct exc_frame *f)
{
	own_bps++;
}

static void rounds(void *arg)
{
	u64 n = (u64)(uintptr_t)arg, want = 0;
	int sum = 0;

	for (u64 i = 0; i < n; i++) {
		sum += gdb_target_fn((int)i, (int)(i * 2));
		want += i * 3;
	}
	GUEST_ASSERT_EQ(gdb_counter, want);
	GUEST_ASSERT_EQ((u64)sum, want);
	gprintf("GUEST gdb-target: %llu rounds at CPL%u\n", n, cpl());
	guest_done();
}

void guest_main(void)
{
	u64 n = cmdline_u64("gdb.rounds", 100);

	if (cmdline_u64("gdb.int3", 0)) {
		guest_set_handler(3, own_bp);
		__asm__ __volatile__("int3" ::: "memory");
		GUEST_ASSERT_EQ(own_bps, 1);
	}
	if (cmdline_u64("gdb.cpl3", 0))
		guest_run_user(rounds, (void *)(uintptr_t)n);
	rounds((void *)(uintptr_t)n);
}

/* Guest hlt: the LAPIC timer (one-shot) wakes the CPU from HLT a few times; each wake is counted and checked. */
#include "guest.h"

#define TIMER_VECTOR 0x40
#define SPURIOUS_VECTOR 0xff
#define WAKES 5
#define TIMER_COUNT 1000000 /* ~16 ms at divide by 16 */
#define MAX_OTHER_WAKES 20

static u32 ticks;

static void timer_isr(struct exc_frame *f)
{
	WRITE_ONCE(ticks, ticks + 1);
	lapic_write(LAPIC_EOI, 0);
}

static void spurious_isr(struct exc_frame *f)
{
}

void guest_main(void)
{
	u32 other = 0;

	/* Keep the 8259 quiet (KVM points the BSP's LINT0 at it as ExtINT). */
	outb(0x21, 0xff);
	outb(0xa1, 0xff);
	guest_set_handler(TIMER_VECTOR, timer_isr);
	guest_set_handler(SPURIOUS_VECTOR, spurious_isr);
	lapic_write(LAPIC_SVR, 0x100 | SPURIOUS_VECTOR);
	lapic_write(LAPIC_LVT_LINT0, LAPIC_LVT_MASKED);
	lapic_write(LAPIC_TIMER_DIV, 0x3); /* divide by 16 */
	for (u32 want = 1; want <= WAKES; want++) {
		lapic_write(LAPIC_LVT_TIMER, TIMER_VECTOR); /* one-shot, unmasked */
		lapic_write(LAPIC_TIMER_INIT, TIMER_COUNT);
		for (;;) {
			/* STI's one-instruction shadow: the tick cannot land between it and HLT. */
			__asm__ __volatile__("sti; hlt; cli" ::: "memory");
			if (READ_ONCE(ticks) >= want)
				break;
			gprintf("GUEST hlt: woke without a timer tick\n");
			if (++other >= MAX_OTHER_WAKES)
				GUEST_FAIL("%u wakes without a timer tick (ticks=%u, want %u)",
					   other, READ_ONCE(ticks), want);
		}
		/* One tick per one-shot: a second would mean the timer re-armed itself. */
		GUEST_ASSERT_EQ(READ_ONCE(ticks), want);
		gprintf("GUEST hlt: woke from HLT count=%u\n", READ_ONCE(ticks));
	}
	GUEST_ASSERT_EQ(READ_ONCE(ticks), WAKES);
	gprintf("GUEST hlt: done, timer wakes=%u\n", READ_ONCE(ticks));
}

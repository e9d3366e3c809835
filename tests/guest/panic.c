/* Guest panic: announces itself and writes 1 (panicked) to the pvpanic port 0x505 (lkvm exits 2). */
#include "guest.h"

void guest_main(void)
{
	gprintf("GUEST panic: writing pvpanic\n");
	guest_panic();
}

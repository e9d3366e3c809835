/* Guest badinsn: executes at CPL0 an instruction a PVM host's emulator cannot run and lkvm does not complete. */
#include "guest.h"

void guest_main(void)
{
	u32 crc = 0x12345678, data = 0x9abcdef0;

	gprintf("GUEST badinsn: executing crc32l (f2 0f 38 f1 c1)\n");
	/* f2 0f 38 f1 c1 (SSE4.2): eax and ecx need no REX prefix. */
	__asm__ __volatile__("crc32l %%ecx, %%eax" : "+a"(crc) : "c"(data));
	gprintf("GUEST badinsn: survived (instruction was emulated or completed)\n");
}

/* Guest spin: announces itself and spins forever at CPL0 (for --timeout, --exit-on and VMs the control tests drive). */
#include "guest.h"

void guest_main(void)
{
	gprintf("GUEST spin: spinning\n");
	for (;;)
		cpu_relax();
}

/* Guest cpl3: drops to CPL3 (IOPL=3) and does port I/O, a pvpanic BAR MMIO read and the end of the run from there, each checked here. */
#include "guest.h"

/*
 * cpl3.iopl=N on the command line: the IOPL the host script expects at CPL3 (0 on a PVM host,
 * which runs CPL3 with the hardware IOPL forced to 0, guest.h; 3 elsewhere). Absent: either.
 */

#define PVPANIC_PORT 0x505
#define PVPANIC_FEATURES 0x03

static u64 bar;

static void user(void *arg)
{
	u64 want = cmdline_u64("cpl3.iopl", ~0ull);

	GUEST_ASSERT_EQ(inb(PVPANIC_PORT), PVPANIC_FEATURES);
	gprintf("GUEST cpl3 cpl=%u iopl=%u io_completed=%llu\n", cpl(), iopl(), lib_io_emulated);
	GUEST_ASSERT_EQ(cpl(), 3);
	if (want != ~0ull)
		GUEST_ASSERT_EQ(iopl(), want);
	/* With IOPL 0 the port read above went through the #GP completion, which counts it; with
	 * IOPL 3 nothing faulted. */
	if (iopl() == 0)
		GUEST_ASSERT(lib_io_emulated > 0);
	else
		GUEST_ASSERT_EQ(lib_io_emulated, 0);
	GUEST_ASSERT_EQ(mmio_read8(bar), PVPANIC_FEATURES);
	gprintf("GUEST cpl3: done from CPL3\n");
	guest_done();
}

void guest_main(void)
{
	struct pci_dev d;

	GUEST_ASSERT(pci_find(0x1b36, 0x0011, &d));
	bar = pci_bar(&d, 0, NULL);
	GUEST_ASSERT(bar);
	pci_enable(&d, PCI_CMD_MEM);
	gprintf("GUEST cpl3 pvpanic-bar0=0x%08llx\n", bar);
	gprintf("GUEST cpl3: entering CPL3\n");
	guest_run_user(user, NULL);
}

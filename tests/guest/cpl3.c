/* Guest cpl3: drops to CPL3 (IOPL=3) and does port I/O, a pvpanic BAR MMIO read and the reset from there. */
#include "guest.h"

static u64 bar;

static void user(void *arg)
{
	gprintf("GUEST cpl3-pio: OK\n");
	/* A PVM host runs CPL3 with the hardware IOPL at 0 (guest.h): the port I/O above then
	 * went through the #GP completion, which io_completed counts. */
	gprintf("GUEST cpl3 cpl=%u iopl=%u io_completed=%llu\n", cpl(), iopl(), lib_io_emulated);
	gprintf("GUEST cpl3 pvpanic-mmio=0x%02x\n", mmio_read8(bar));
	gprintf("GUEST cpl3: resetting from CPL3\n");
	guest_done();
}

void guest_main(void)
{
	struct pci_dev d;

	if (!pci_find(0x1b36, 0x0011, &d) || !(bar = pci_bar(&d, 0, NULL)))
		GUEST_FAIL("cpl3: pvpanic PCI device/BAR not found");
	pci_enable(&d, PCI_CMD_MEM);
	gprintf("GUEST cpl3 pvpanic-bar0=0x%08llx\n", bar);
	gprintf("GUEST cpl3: entering CPL3\n");
	guest_run_user(user, NULL);
}

/* Guest cpl0: PIO, pvpanic port read, PCI scan, pvpanic BAR MMIO read and an unclaimed MMIO read, all at CPL0. */
#include "guest.h"

#define PVPANIC_PORT 0x505
#define PCI_CONFIG_ENABLE 0x80000000u

void guest_main(void)
{
	struct pci_dev d;
	u64 bar, hole = 0xe0000000ull;

	gprintf("GUEST cpl0-pio: OK\n");
	/* The pvpanic ISA port reads its capabilities: 3 (panicked | crash loaded). */
	gprintf("GUEST cpl0 pvpanic-port=0x%02x\n", inb(PVPANIC_PORT));
	if (!pci_find(0x1b36, 0x0011, &d))
		GUEST_FAIL("cpl0: pvpanic PCI device not found");
	/* Its configuration address, as configuration mechanism #1 spells it. */
	gprintf("GUEST cpl0 pvpanic-pci-dev=0x%08x\n",
		PCI_CONFIG_ENABLE | (u32)d.bus << 16 | (u32)d.dev << 11 | (u32)d.fn << 8);
	pci_enable(&d, PCI_CMD_MEM);
	bar = pci_bar(&d, 0, NULL);
	gprintf("GUEST cpl0 pvpanic-bar0=0x%08llx\n", bar);
	if (!bar)
		GUEST_FAIL("cpl0: pvpanic BAR0 is 0");
	gprintf("GUEST cpl0 pvpanic-mmio=0x%02x\n", mmio_read8(bar));
	/* An address in the PCI hole, away from the BAR's 256 MiB region. */
	if ((bar & 0xf0000000ull) == hole)
		hole = 0xd0000000ull;
	gprintf("GUEST cpl0 unclaimed-mmio 0x%08llx=0x%08x\n", hole, mmio_read32(hole));
	gprintf("GUEST cpl0: done, resetting\n");
}

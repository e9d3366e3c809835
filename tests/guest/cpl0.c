/* Guest cpl0: PIO, pvpanic port read, PCI scan, pvpanic BAR MMIO read and an unclaimed MMIO read, all at CPL0, each checked here. */
#include "guest.h"

#define PVPANIC_PORT 0x505
#define PVPANIC_FEATURES 0x03 /* PANICKED | CRASH_LOADED, what lkvm's device offers */
#define PCI_HOLE_START 0xc0000000ull
#define PCI_HOLE_END 0xff000000ull /* below the LAPIC, IOAPIC and firmware ranges */

void guest_main(void)
{
	struct pci_dev d;
	u64 bar, hole = 0xe0000000ull;
	u32 unclaimed;

	gprintf("GUEST cpl0-pio: OK\n");
	/* The pvpanic ISA port reads its capabilities: 3 (panicked | crash loaded). */
	GUEST_ASSERT_EQ(inb(PVPANIC_PORT), PVPANIC_FEATURES);
	GUEST_ASSERT(pci_find(0x1b36, 0x0011, &d));
	/* On bus 0, function 0 of its slot. */
	gprintf("GUEST cpl0 pvpanic-pci %02x:%02x.%u\n", d.bus, d.dev, d.fn);
	GUEST_ASSERT_EQ(d.bus, 0);
	GUEST_ASSERT_EQ(d.fn, 0);
	pci_enable(&d, PCI_CMD_MEM);
	bar = pci_bar(&d, 0, NULL);
	gprintf("GUEST cpl0 pvpanic-bar0=0x%08llx\n", bar);
	GUEST_ASSERT(bar >= PCI_HOLE_START && bar < PCI_HOLE_END);
	GUEST_ASSERT_EQ(mmio_read8(bar), PVPANIC_FEATURES);
	/* An address in the PCI hole, away from the BAR's 256 MiB region, reads all-ones. */
	if ((bar & 0xf0000000ull) == hole)
		hole = 0xd0000000ull;
	unclaimed = mmio_read32(hole);
	GUEST_ASSERT_EQ(unclaimed, 0xffffffffu);
	gprintf("GUEST cpl0: done\n");
}

/* C guest PCI: configuration mechanism #1 (ports 0xcf8/0xcfc) on bus 0, device lookup, BARs, capabilities. */
#include "guest.h"

#define PCI_ADDR 0xcf8
#define PCI_DATA 0xcfc

static u32 cfg_addr(const struct pci_dev *d, u16 off)
{
	return 0x80000000u | (u32)d->bus << 16 | (u32)d->dev << 11 | (u32)d->fn << 8 | (off & 0xfc);
}

u32 pci_read32(const struct pci_dev *d, u16 off)
{
	outl(PCI_ADDR, cfg_addr(d, off));
	return inl(PCI_DATA);
}

u16 pci_read16(const struct pci_dev *d, u16 off)
{
	outl(PCI_ADDR, cfg_addr(d, off));
	return inw((u16)(PCI_DATA + (off & 2)));
}

u8 pci_read8(const struct pci_dev *d, u16 off)
{
	outl(PCI_ADDR, cfg_addr(d, off));
	return inb((u16)(PCI_DATA + (off & 3)));
}

void pci_write32(const struct pci_dev *d, u16 off, u32 v)
{
	outl(PCI_ADDR, cfg_addr(d, off));
	outl(PCI_DATA, v);
}

void pci_write16(const struct pci_dev *d, u16 off, u16 v)
{
	outl(PCI_ADDR, cfg_addr(d, off));
	outw((u16)(PCI_DATA + (off & 2)), v);
}

void pci_write8(const struct pci_dev *d, u16 off, u8 v)
{
	outl(PCI_ADDR, cfg_addr(d, off));
	outb((u16)(PCI_DATA + (off & 3)), v);
}

int pci_scan(bool (*fn)(const struct pci_dev *d, void *arg), void *arg)
{
	int seen = 0;

	for (u8 dev = 0; dev < 32; dev++) {
		for (u8 f = 0; f < 8; f++) {
			struct pci_dev d = { .bus = 0, .dev = dev, .fn = f };
			u32 id = pci_read32(&d, 0);

			if ((id & 0xffff) == 0xffff) {
				if (f == 0)
					break;
				continue;
			}
			d.vendor = (u16)id;
			d.device = (u16)(id >> 16);
			seen++;
			if (fn && fn(&d, arg))
				return seen;
			/* Functions 1-7 exist only behind a multi-function header. */
			if (f == 0 && !(pci_read8(&d, PCI_HEADER_TYPE) & 0x80))
				break;
		}
	}
	return seen;
}

struct find {
	u16 vendor, device;
	struct pci_dev *out;
	bool found;
};

static bool match(const struct pci_dev *d, void *arg)
{
	struct find *f = arg;

	if (d->vendor != f->vendor || d->device != f->device)
		return false;
	*f->out = *d;
	f->found = true;
	return true;
}

bool pci_find(u16 vendor, u16 device, struct pci_dev *out)
{
	struct find f = { vendor, device, out, false };

	pci_scan(match, &f);
	return f.found;
}

u64 pci_bar(const struct pci_dev *d, int i, bool *is_io)
{
	u32 lo = pci_read32(d, (u16)(PCI_BAR0 + 4 * i));

	if (is_io)
		*is_io = lo & 1;
	if (lo & 1)
		return lo & ~3u;
	if ((lo & 6) == 4 && i < 5)
		return ((u64)pci_read32(d, (u16)(PCI_BAR0 + 4 * (i + 1))) << 32) | (lo & ~0xfu);
	return lo & ~0xfu;
}

void pci_enable(const struct pci_dev *d, u16 cmd_bits)
{
	pci_write16(d, PCI_COMMAND, pci_read16(d, PCI_COMMAND) | cmd_bits);
}

u8 pci_find_cap(const struct pci_dev *d, u8 id, u8 after)
{
	u8 at;
	int guard = 48; /* a looping list cannot hold us */

	if (!(pci_read16(d, PCI_STATUS) & PCI_STATUS_CAPS))
		return 0;
	at = after ? pci_read8(d, (u16)(after + 1)) : pci_read8(d, PCI_CAP_PTR);
	for (at &= 0xfc; at && guard--; at = pci_read8(d, (u16)(at + 1)) & 0xfc)
		if (pci_read8(d, at) == id)
			return at;
	return 0;
}

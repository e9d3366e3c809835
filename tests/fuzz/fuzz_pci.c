/* Fuzz target: sequences of PCI config and virtio-pci BAR accesses against a virtio-net device on the fake backend. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "lkvm/kvm.h"
#include "lkvm/pci.h"
#include "lkvm/virtio-net.h"

/* Input: u8 setup (bit 0: two queue pairs, bit 1: ioeventfd requested), then operations
 * until the input ends, each one opcode byte and its fields:
 *   0 config read  u8 slot, u8 off, u8 len          3 BAR2 access (MSI-X table, PBA): as 2
 *   1 config write u8 slot, u8 off, u8 len, u32 val  4 port access 0xCF8..0xCFF: u8 port, u8 len,
 *   2 BAR0 access (common, ISR, device, notify):         u8 write, u32 val
 *     u16 off, u8 len, u8 write, u64 val             5 RAM write: u16 gpa, u64 val
 * Lengths are 1, 2, 4 or 8 (from the low bits); BAR offsets reach a little past the end. The
 * BARs are found where the config space says they are now, so moving or disabling them
 * through config writes is part of the game. Device threads started by DRIVER_OK run
 * against the same RAM, as they would against a guest. */
#define PCF_RAM KiB(64)
#define PCF_MAX_OPS 512

static const u32 lens[] = { 1, 2, 4, 8 };

struct pcf {
	struct kvm kvm;
	u8 *ram;
	struct virtio_net *n;
};

static u64 bar_addr(struct pcf *f, int bar)
{
	return pci_cfg_read(f->kvm.pci, 1, (u16)(PCI_BASE_ADDRESS_0 + 4 * bar), 4) & ~0xfULL;
}

static void bar_access(struct pcf *f, struct fuzz_in *in, int bar, u32 span)
{
	u32 off = (u32)fuzz_take(in, 2) % (span + 16), len = lens[fuzz_take(in, 1) & 3];
	bool write = fuzz_take(in, 1) & 1;
	u64 val = fuzz_take(in, 8);
	u8 d[8] = { 0 };

	memcpy(d, &val, sizeof(d));
	io_bus_dispatch(&f->kvm.mmio, NULL, bar_addr(f, bar) + off, d, len, write);
}

static void op(struct pcf *f, struct fuzz_in *in)
{
	u8 code = (u8)fuzz_take(in, 1) % 6;

	switch (code) {
	case 0: {
		u8 slot = (u8)(fuzz_take(in, 1) % 4), off = (u8)fuzz_take(in, 1);
		int len = (int)lens[fuzz_take(in, 1) & 3];

		pci_cfg_read(f->kvm.pci, slot, off, len);
		break;
	}
	case 1: {
		u8 slot = (u8)(fuzz_take(in, 1) % 4), off = (u8)fuzz_take(in, 1);
		int len = (int)lens[fuzz_take(in, 1) & 3];

		pci_cfg_write(f->kvm.pci, slot, off, len, (u32)fuzz_take(in, 4));
		break;
	}
	case 2:
		bar_access(f, in, 0, 0x4000);
		break;
	case 3:
		bar_access(f, in, 2, 0x1000);
		break;
	case 4: {
		u64 port = PCI_CONFIG_ADDR_PORT + fuzz_take(in, 1) % 8;
		u32 len = lens[fuzz_take(in, 1) & 3] % 8; /* 8 becomes 0: an odd size too */
		bool write = fuzz_take(in, 1) & 1;
		u32 val = (u32)fuzz_take(in, 4);
		u8 d[8] = { 0 };

		memcpy(d, &val, sizeof(val));
		if (len)
			io_bus_dispatch(&f->kvm.pio, NULL, port, d, len, write);
		break;
	}
	default: {
		u64 gpa = fuzz_take(in, 2) % (PCF_RAM - 8), val = fuzz_take(in, 8);

		memcpy(f->ram + gpa, &val, sizeof(val));
		break;
	}
	}
}

int fuzz_pci(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct pcf *f = calloc(1, sizeof(*f));
	u8 setup = (u8)fuzz_take(&in, 1);
	struct net_opts o = { .mode = NET_MODE_FAKE,
			      .queue_pairs = (setup & 1) + 1,
			      .ioeventfd = setup & 2 };
	struct net_backend *be[NET_MAX_QUEUE_PAIRS] = { 0 };
	char err[128];

	FUZZ_ASSERT(f);
	f->kvm.vm_fd = f->kvm.sys_fd = f->kvm.stop_fd = -1;
	io_bus_init(&f->kvm.pio);
	io_bus_init(&f->kvm.mmio);
	f->ram = aligned_alloc(4096, PCF_RAM);
	FUZZ_ASSERT(f->ram);
	memset(f->ram, 0, PCF_RAM);
	FUZZ_ASSERT(gmem_init(&f->kvm.mem, f->ram, PCF_RAM) == 0);
	FUZZ_ASSERT(pci_bus_create(&f->kvm) == 0);
	for (int i = 0; i < o.queue_pairs; i++)
		FUZZ_ASSERT((be[i] = net_fake_create()) != NULL);
	FUZZ_ASSERT(virtio_net_create(&f->kvm, &o, be, &f->n, err, sizeof(err)) == 0);

	for (int i = 0; i < PCF_MAX_OPS && in.left; i++)
		op(f, &in);

	virtio_net_destroy(f->n);
	pci_bus_destroy(&f->kvm);
	FUZZ_ASSERT(f->kvm.mmio.nr == 0);
	io_bus_destroy(&f->kvm.pio);
	io_bus_destroy(&f->kvm.mmio);
	free(f->ram);
	free(f);
	return 0;
}

/* Guest devices: brings every virtio-pci net, blk, console and rng device to DRIVER_OK with all the queues lkvm serves, so each device thread lkvm has exists; then halts or ends. */
#include "guest.h"

/*
 * Command line (lkvm -p): devices.then=halt|done (default halt: HLT with interrupts off, until
 * lkvm is stopped; done: guest_done()). Prints one line per device brought up,
 * "GUEST devices: virtio-KIND 00:DD.F features=0x.. queues=N DRIVER_OK", then
 * "GUEST devices: up net=N blk=N console=N rng=N". Nothing is sent or received: what counts is
 * that lkvm started the threads that serve these queues.
 */

#define VIRTIO_NET_F_CTRL_VQ 17
#define QSIZE 16

struct kind {
	const char *name;
	u16 device; /* PCI device id (0x1040 + virtio id) */
	u16 queues; /* queues lkvm serves without further features */
	u64 want;   /* features asked for besides VERSION_1 */
	int found;
};

static struct kind kinds[] = {
	/* rx, tx and the control queue (CTRL_VQ: lkvm then starts its net-ctl thread). */
	{ "net", 0x1041, 3, 1ull << VIRTIO_NET_F_CTRL_VQ, 0 },
	{ "blk", 0x1042, 1, 0, 0 },
	{ "console", 0x1043, 2, 0, 0 },
	{ "rng", 0x1044, 1, 0, 0 },
};

static bool bring_up(const struct pci_dev *d, void *arg)
{
	struct virtio_pci *vp;
	struct kind *k = NULL;
	u16 n;

	if (d->vendor != 0x1af4)
		return false;
	for (size_t i = 0; i < ARRAY_SIZE(kinds); i++)
		if (kinds[i].device == d->device)
			k = &kinds[i];
	if (!k)
		return false;
	vp = galloc(sizeof(*vp), 8);
	if (!virtio_pci_init(vp, d))
		GUEST_FAIL("virtio-%s at %02x:%02x.%u: a virtio capability is missing", k->name,
			   d->bus, d->dev, d->fn);
	virtio_reset(vp);
	if (!virtio_negotiate(vp, k->want))
		GUEST_FAIL("virtio-%s: feature negotiation failed (offered 0x%llx)", k->name,
			   vp->offered);
	if ((vp->features & k->want) != k->want)
		GUEST_FAIL("virtio-%s: features 0x%llx lack 0x%llx", k->name, vp->offered, k->want);
	n = virtio_num_queues(vp);
	if (n < k->queues)
		GUEST_FAIL("virtio-%s: %u queues, expected at least %u", k->name, n, k->queues);
	for (u16 q = 0; q < k->queues; q++)
		if (!virtq_setup(vp, galloc(sizeof(struct virtq), 8), q, QSIZE))
			GUEST_FAIL("virtio-%s: queue %u cannot be set up", k->name, q);
	virtio_driver_ok(vp);
	k->found++;
	gprintf("GUEST devices: virtio-%s %02x:%02x.%u features=0x%llx queues=%u DRIVER_OK\n",
		k->name, d->bus, d->dev, d->fn, vp->features, k->queues);
	return false;
}

void guest_main(void)
{
	char then[8] = "halt";

	cmdline_get("devices.then", then, sizeof(then));
	pci_scan(bring_up, NULL);
	gprintf("GUEST devices: up net=%d blk=%d console=%d rng=%d\n", kinds[0].found,
		kinds[1].found, kinds[2].found, kinds[3].found);
	if (!strcmp(then, "done"))
		guest_done();
	for (;;)
		__asm__ __volatile__(
			"hlt"); /* interrupts are off: the vCPU sleeps until lkvm stops it */
}

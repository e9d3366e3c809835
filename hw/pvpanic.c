/* pvpanic: the guest reports a panic through ISA port 0x505 or the PCI device 1b36:0011, and the run ends. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/dev.h"
#include "lkvm/hw.h"
#include "lkvm/kvm.h"
#include "lkvm/layout.h"
#include "lkvm/pci.h"

#define PVPANIC_EVENTS (PVPANIC_PANICKED | PVPANIC_CRASH_LOADED)

#define PVPANIC_PCI_VENDOR 0x1b36 /* Red Hat, the id Linux's pvpanic-pci matches */
#define PVPANIC_PCI_DEVICE 0x0011
#define PVPANIC_PCI_CLASS 0x0880 /* system peripheral, other */
#define PVPANIC_PCI_SUBVENDOR 0x1af4
#define PVPANIC_PCI_SUBDEVICE 0x1100
#define PVPANIC_BAR_SIZE 0x1000 /* a page, so the BAR sits alone in the guest's mapping */

struct pvpanic {
	struct kvm *kvm;
	struct pci_device pci;
	bool crash_logged;
};

static void pvpanic_event(struct pvpanic *p, u8 v)
{
	if (v & PVPANIC_PANICKED) {
		kvm_request_exit(p->kvm, EXIT_GUEST_PANIC, "guest panicked (pvpanic)");
		return;
	}
	/* A crash kernel was loaded: the guest will go on by itself, keep running. */
	if ((v & PVPANIC_CRASH_LOADED) &&
	    !__atomic_exchange_n(&p->crash_logged, true, __ATOMIC_RELAXED))
		pr_info("pvpanic: guest crashed, crash kernel loaded");
}

static void pvpanic_port_io(struct kvm_cpu *vcpu, u64 port, u8 *data, u32 len, bool is_write,
			    void *opaque)
{
	if (is_write)
		pvpanic_event(opaque, data[0]);
	else
		data[0] = PVPANIC_EVENTS;
}

/* BAR 0: byte 0 is the port; the rest of the page reads 0. */
static void pvpanic_bar_io(struct kvm_cpu *vcpu, u64 off, u8 *data, u32 len, bool is_write,
			   void *opaque)
{
	if (off != 0)
		return;
	if (is_write)
		pvpanic_event(opaque, data[0]);
	else
		data[0] = PVPANIC_EVENTS;
}

static void pci_put16(u8 *cfg, u16 off, u16 v)
{
	cfg[off] = (u8)v;
	cfg[off + 1] = (u8)(v >> 8);
}

static int pvpanic_pci_init(struct kvm *kvm, struct pvpanic *p)
{
	struct pci_device *d = &p->pci;
	int ret;

	d->name = "pvpanic-pci";
	d->priv = p;
	pci_put16(d->cfg, PCI_VENDOR_ID, PVPANIC_PCI_VENDOR);
	pci_put16(d->cfg, PCI_DEVICE_ID, PVPANIC_PCI_DEVICE);
	d->cfg[PCI_REVISION_ID] = 1;
	pci_put16(d->cfg, PCI_CLASS_DEVICE, PVPANIC_PCI_CLASS);
	pci_put16(d->cfg, PCI_SUBSYSTEM_VENDOR_ID, PVPANIC_PCI_SUBVENDOR);
	pci_put16(d->cfg, PCI_SUBSYSTEM_ID, PVPANIC_PCI_SUBDEVICE);
	d->bar[0] = (struct pci_bar){
		.size = PVPANIC_BAR_SIZE, .fn = pvpanic_bar_io, .opaque = p, .name = "pvpanic-bar0"
	};
	ret = pci_device_register(kvm, d);
	return ret < 0 ? ret : 0;
}

static int pvpanic_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	struct pvpanic *p = calloc(1, sizeof(*p));
	int ret;

	if (!p)
		return -ENOMEM;
	p->kvm = kvm;
	ret = io_bus_register(&kvm->pio, PVPANIC_PORT, 1, pvpanic_port_io, p, "pvpanic");
	if (ret)
		goto err;
	/* Without ACPI the guest cannot discover the ISA port; the PCI one it can. */
	if (kvm->pci) {
		ret = pvpanic_pci_init(kvm, p);
		if (ret) {
			io_bus_unregister(&kvm->pio, PVPANIC_PORT);
			goto err;
		}
	}
	d->priv = p;
	return 0;
err:
	free(p);
	return ret;
}

static void pvpanic_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	struct pvpanic *p = d->priv;

	pci_device_unregister(&p->pci);
	io_bus_unregister(&kvm->pio, PVPANIC_PORT);
	free(p);
}

/* Snapshot (issue 31): nothing of the guest's to save. The port keeps no state (a write
 * is an event, a read the constant PVPANIC_EVENTS); crash_logged only keeps lkvm's own
 * message to one per process; the PCI function's configuration space is the bus's (pci.c
 * saves and restores it). So the section holds the walker's records only. */
static int pvpanic_dev_save(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen)
{
	return 0;
}

static int pvpanic_dev_load(struct kvm_dev *d, const void *sec, size_t len, char *err,
			    size_t errlen)
{
	return 0;
}

static const struct kvm_dev_ops pvpanic_dev_ops = {
	.name = "pvpanic",
	.prio = DEV_PRIO_LEGACY,
	.init = pvpanic_dev_init,
	.save = pvpanic_dev_save,
	.load = pvpanic_dev_load,
	.exit = pvpanic_dev_exit,
};

int pvpanic_add(struct kvm *kvm)
{
	return kvm_dev_add(kvm, &pvpanic_dev_ops, NULL, 0);
}

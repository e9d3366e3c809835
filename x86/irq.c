/* The VM's GSI routing table: KVM's default IOAPIC/PIC routes plus the MSI routes of MSI-X vectors, sent whole. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "lkvm/kvm.h"

#define IOAPIC_PINS 24
#define PIC_PINS 16
#define NR_DEFAULT_ROUTES (IOAPIC_PINS + PIC_PINS)

/* KVM_SET_GSI_ROUTING replaces the table KVM set up at KVM_CREATE_IRQCHIP, so the
 * defaults must be re-sent each time: GSI n goes to IOAPIC pin n (0-23) and, for 0-15,
 * to pin n%8 of the master (0-7) or slave (8-15) PIC. Without them the timer, the UART
 * and PCI INTx would go silent. */
static int fill_default_routes(struct kvm_irq_routing_entry *e)
{
	int n = 0;

	for (u32 gsi = 0; gsi < IOAPIC_PINS; gsi++) {
		e[n++] = (struct kvm_irq_routing_entry){
			.gsi = gsi,
			.type = KVM_IRQ_ROUTING_IRQCHIP,
			.u.irqchip = { .irqchip = KVM_IRQCHIP_IOAPIC, .pin = gsi },
		};
		if (gsi < PIC_PINS)
			e[n++] = (struct kvm_irq_routing_entry){
				.gsi = gsi,
				.type = KVM_IRQ_ROUTING_IRQCHIP,
				.u.irqchip = { .irqchip = gsi < 8 ? KVM_IRQCHIP_PIC_MASTER
								  : KVM_IRQCHIP_PIC_SLAVE,
					       .pin = gsi % 8 },
			};
	}
	return n;
}

/* Send the whole table; irq_lock held. */
static int commit_locked(struct kvm *kvm)
{
	struct kvm_irq_routing *t;
	int n, ret = 0;

	if (kvm->vm_fd < 0)
		return 0;
	t = calloc(1,
		   sizeof(*t) + (NR_DEFAULT_ROUTES + KVM_IRQ_MSI_ROUTES) * sizeof(t->entries[0]));
	if (!t)
		return -ENOMEM;
	n = fill_default_routes(t->entries);
	for (int i = 0; i < KVM_IRQ_MSI_ROUTES; i++) {
		const struct kvm_msi_route *r = &kvm->msi_routes[i];

		if (!r->used || !r->valid)
			continue;
		t->entries[n++] = (struct kvm_irq_routing_entry){
			.gsi = (u32)(KVM_IRQ_MSI_GSI_BASE + i),
			.type = KVM_IRQ_ROUTING_MSI,
			.u.msi = { .address_lo = (u32)r->addr,
				   .address_hi = (u32)(r->addr >> 32),
				   .data = r->data },
		};
	}
	t->nr = (u32)n;
	if (ioctl(kvm->vm_fd, KVM_SET_GSI_ROUTING, t) < 0)
		ret = -errno;
	free(t);
	return ret;
}

static struct kvm_msi_route *route_of(struct kvm *kvm, int gsi)
{
	if (gsi < KVM_IRQ_MSI_GSI_BASE || gsi >= KVM_IRQ_MSI_GSI_BASE + KVM_IRQ_MSI_ROUTES)
		return NULL;
	return &kvm->msi_routes[gsi - KVM_IRQ_MSI_GSI_BASE];
}

int kvm_gsi_alloc(struct kvm *kvm)
{
	int ret = -ENOSPC;

	pthread_mutex_lock(&kvm->irq_lock);
	for (int i = 0; i < KVM_IRQ_MSI_ROUTES; i++) {
		if (!kvm->msi_routes[i].used) {
			kvm->msi_routes[i] = (struct kvm_msi_route){ .used = true };
			ret = KVM_IRQ_MSI_GSI_BASE + i;
			break;
		}
	}
	pthread_mutex_unlock(&kvm->irq_lock);
	return ret;
}

void kvm_gsi_free(struct kvm *kvm, int gsi)
{
	struct kvm_msi_route *r = route_of(kvm, gsi);

	if (!r)
		return;
	pthread_mutex_lock(&kvm->irq_lock);
	if (r->used) {
		bool was_routed = r->valid;

		*r = (struct kvm_msi_route){ 0 };
		if (was_routed && commit_locked(kvm) < 0)
			pr_debug("irq: dropping the route of GSI %d failed", gsi);
	}
	pthread_mutex_unlock(&kvm->irq_lock);
}

int kvm_gsi_route_msi(struct kvm *kvm, int gsi, u64 addr, u32 data)
{
	struct kvm_msi_route *r = route_of(kvm, gsi);
	int ret;

	if (!r)
		return -EINVAL;
	pthread_mutex_lock(&kvm->irq_lock);
	if (!r->used) {
		ret = -EINVAL;
	} else {
		r->addr = addr;
		r->data = data;
		r->valid = true;
		ret = commit_locked(kvm);
		if (ret < 0)
			r->valid = false;
	}
	pthread_mutex_unlock(&kvm->irq_lock);
	return ret;
}

/* The machine as a flattened device tree (libfdt, sequential writes): for --dump-dtb and for guests that take one (setup_data SETUP_DTB); the MMIO bus's devices write their own nodes. */
#include <errno.h>
#include <stdio.h>
#include <libfdt.h>

#include "lkvm/fdt.h"
#include "lkvm/hw.h"
#include "lkvm/kvm.h"
#include "lkvm/layout.h"

#define PHANDLE_IOAPIC 1
#define IRQ_EDGE_RISING 0 /* the x86 IOAPIC binding's second cell: 0 edge/high */

/* Every libfdt call returns 0 or a negative FDT_ERR_*; stop at the first. */
#define TRY(x)                     \
	do {                       \
		int r_ = (x);      \
		if (r_ < 0)        \
			return r_; \
	} while (0)

int fdt_prop_reg(void *fdt, u64 addr, u64 size)
{
	fdt64_t reg[2] = { cpu_to_fdt64(addr), cpu_to_fdt64(size) };

	return fdt_property(fdt, "reg", reg, sizeof(reg));
}

int fdt_prop_irq(void *fdt, u32 irq)
{
	fdt32_t cells[2] = { cpu_to_fdt32(irq), cpu_to_fdt32(IRQ_EDGE_RISING) };

	TRY(fdt_property(fdt, "interrupts", cells, sizeof(cells)));
	return fdt_property_cell(fdt, "interrupt-parent", PHANDLE_IOAPIC);
}

static int memory_node(void *fdt, const struct kvm *kvm)
{
	fdt64_t reg[2 * GMEM_MAX_REGIONS];
	char name[32];

	for (int i = 0; i < kvm->mem.nr; i++) {
		reg[2 * i] = cpu_to_fdt64(kvm->mem.r[i].gpa);
		reg[2 * i + 1] = cpu_to_fdt64(kvm->mem.r[i].size);
	}
	snprintf(name, sizeof(name), "memory@%llx", (unsigned long long)kvm->mem.r[0].gpa);
	TRY(fdt_begin_node(fdt, name));
	TRY(fdt_property_string(fdt, "device_type", "memory"));
	TRY(fdt_property(fdt, "reg", reg, (int)(2 * (size_t)kvm->mem.nr * sizeof(reg[0]))));
	return fdt_end_node(fdt);
}

static int cpus_node(void *fdt, int nr_cpus)
{
	char name[16];

	TRY(fdt_begin_node(fdt, "cpus"));
	TRY(fdt_property_cell(fdt, "#address-cells", 1));
	TRY(fdt_property_cell(fdt, "#size-cells", 0));
	for (int i = 0; i < nr_cpus; i++) {
		snprintf(name, sizeof(name), "cpu@%x", i);
		TRY(fdt_begin_node(fdt, name));
		TRY(fdt_property_string(fdt, "device_type", "cpu"));
		TRY(fdt_property_cell(fdt, "reg", (u32)i)); /* the local APIC id */
		TRY(fdt_end_node(fdt));
	}
	return fdt_end_node(fdt);
}

static int ioapic_node(void *fdt)
{
	char name[32];

	snprintf(name, sizeof(name), "ioapic@%llx", IOAPIC_ADDR);
	TRY(fdt_begin_node(fdt, name));
	TRY(fdt_property_string(fdt, "compatible", "intel,ce4100-ioapic"));
	TRY(fdt_prop_reg(fdt, IOAPIC_ADDR, 0x1000));
	TRY(fdt_property(fdt, "interrupt-controller", NULL, 0));
	TRY(fdt_property_cell(fdt, "#interrupt-cells", 2));
	TRY(fdt_property_cell(fdt, "#address-cells", 0));
	TRY(fdt_property_cell(fdt, "phandle", PHANDLE_IOAPIC));
	return fdt_end_node(fdt);
}

/* The UART is on I/O ports, which the tree has no address space for: reg holds the
 * port, and reg-io-width/reg-shift say how it is accessed. */
static int uart_node(void *fdt)
{
	char name[32];

	snprintf(name, sizeof(name), "serial@%x", SERIAL_COM1_BASE);
	TRY(fdt_begin_node(fdt, name));
	TRY(fdt_property_string(fdt, "compatible", "ns16550a"));
	TRY(fdt_prop_reg(fdt, SERIAL_COM1_BASE, 8));
	TRY(fdt_property_cell(fdt, "clock-frequency", 1843200));
	TRY(fdt_property_cell(fdt, "reg-io-width", 1));
	TRY(fdt_prop_irq(fdt, SERIAL_COM1_IRQ));
	return fdt_end_node(fdt);
}

static int build(struct kvm *kvm, const char *cmdline, void *fdt, int len)
{
	char stdout_path[32];

	TRY(fdt_create(fdt, len));
	TRY(fdt_finish_reservemap(fdt));
	TRY(fdt_begin_node(fdt, ""));
	TRY(fdt_property_string(fdt, "compatible", "linux,lkvm"));
	TRY(fdt_property_string(fdt, "model", "lkvm x86-64"));
	TRY(fdt_property_cell(fdt, "#address-cells", 2));
	TRY(fdt_property_cell(fdt, "#size-cells", 2));
	TRY(fdt_property_cell(fdt, "interrupt-parent", PHANDLE_IOAPIC));

	TRY(fdt_begin_node(fdt, "chosen"));
	TRY(fdt_property_string(fdt, "bootargs", cmdline ? cmdline : ""));
	snprintf(stdout_path, sizeof(stdout_path), "/serial@%x", SERIAL_COM1_BASE);
	TRY(fdt_property_string(fdt, "stdout-path", stdout_path));
	TRY(fdt_end_node(fdt));

	TRY(memory_node(fdt, kvm));
	TRY(cpus_node(fdt, kvm->cfg.nr_cpus));
	TRY(ioapic_node(fdt));
	TRY(uart_node(fdt));
	TRY(io_bus_fdt_nodes(&kvm->mmio, fdt)); /* virtio-mmio's slots */
	TRY(fdt_end_node(fdt));
	TRY(fdt_finish(fdt));
	return fdt_pack(fdt);
}

int fdt_build(struct kvm *kvm, const char *cmdline, void *buf, size_t len)
{
	int r;

	if (len > FDT_MAX_SIZE)
		len = FDT_MAX_SIZE;
	r = build(kvm, cmdline, buf, (int)len);
	if (r == -FDT_ERR_NOSPACE)
		return -ENOSPC;
	if (r < 0)
		return -EINVAL;
	return (int)fdt_totalsize(buf);
}

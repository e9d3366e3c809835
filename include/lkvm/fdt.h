/* The flattened device tree lkvm describes the machine with (memory, CPUs, IOAPIC, UART, and the nodes the MMIO bus's devices write). */
#ifndef LKVM_FDT_H
#define LKVM_FDT_H

#include <stddef.h>

#include "lkvm/util.h"

struct kvm;

#define FDT_MAX_SIZE 0x10000 /* 64 KiB: far more than a machine of ours needs */

/* Build the tree for kvm (its RAM regions, cfg.nr_cpus CPUs, the IOAPIC, the COM1 UART, then
 * the node of every device on the MMIO bus that gave one, io_bus_set_fdt_node: virtio-mmio's
 * slots) with `cmdline` as /chosen/bootargs, into buf (len bytes, packed). Returns the blob's
 * size or -errno (-ENOSPC: too small). */
int fdt_build(struct kvm *kvm, const char *cmdline, void *buf, size_t len) __must_check;

/* For a device's node generator: its "reg" (one 64-bit address and size), and its interrupt
 * (an edge IRQ on the IOAPIC: "interrupts" and "interrupt-parent"), as properties of the node
 * being written. 0 or a negative libfdt error. */
int fdt_prop_reg(void *fdt, u64 addr, u64 size);
int fdt_prop_irq(void *fdt, u32 irq);

#endif

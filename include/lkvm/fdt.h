/* The flattened device tree lkvm describes the machine with (memory, CPUs, IOAPIC, UART, virtio-mmio devices). */
#ifndef LKVM_FDT_H
#define LKVM_FDT_H

#include <stddef.h>

#include "lkvm/util.h"

struct kvm;

#define FDT_MAX_SIZE 0x10000 /* 64 KiB: far more than a machine of ours needs */

/* Build the tree for kvm (its RAM regions, cfg.nr_cpus CPUs, the IOAPIC, the COM1 UART,
 * every virtio-mmio slot in use) with `cmdline` as /chosen/bootargs, into buf (len
 * bytes, packed). Returns the blob's size or -errno (-ENOSPC: too small). */
int fdt_build(struct kvm *kvm, const char *cmdline, void *buf, size_t len) __must_check;

#endif

/* Port-I/O and MMIO dispatch: devices register address ranges, vCPU exits are routed to them. */
#ifndef LKVM_IO_H
#define LKVM_IO_H

#include <pthread.h>

#include "lkvm/util.h"

struct kvm_cpu;

/* A guest write that KVM can turn into an eventfd signal instead of an exit (KVM_IOEVENTFD):
 * len bytes at MMIO address addr; with match, only writes of the value data. */
struct kvm_ioevent {
	u64 addr;
	u32 len;
	bool match;
	u64 data;
};

/* Called on the vCPU thread that took the exit. addr is the absolute port or guest
 * physical address; data holds len (1..8) bytes in guest byte order: the handler reads
 * it on a write and fills it on a read (it arrives zeroed). Handlers must treat
 * every value as hostile. vcpu may be NULL when called from tests. */
typedef void (*io_handler_fn)(struct kvm_cpu *vcpu, u64 addr, u8 *data, u32 len, bool is_write,
			      void *opaque);

/* Writes the device tree node of the device behind a range into fdt (libfdt's sequential
 * writes: begin, properties, end), opaque being the range's. 0 or a negative libfdt error. */
typedef int (*io_fdt_node_fn)(void *fdt, void *opaque);

struct io_range {
	u64 base;
	u64 len;
	io_handler_fn fn;
	void *opaque;
	const char *name;
	io_fdt_node_fn fdt_node; /* the device's node in the device tree, or NULL */
};

/* A sorted, non-overlapping set of ranges. A lookup holds the read lock only while it
 * finds the range; the handler runs unlocked, so a handler may itself (un)register ranges
 * (PCI BAR programming) on any bus. Devices are destroyed only after the vCPUs stopped. */
struct io_bus {
	pthread_rwlock_t lock;
	struct io_range *r;
	int nr, cap;
	u64 unhandled; /* accesses that hit no range: reads return all-ones */
};

void io_bus_init(struct io_bus *bus);
void io_bus_destroy(struct io_bus *bus);
/* -EEXIST on overlap, -EINVAL on an empty or wrapping range, -ENOMEM. */
int io_bus_register(struct io_bus *bus, u64 base, u64 len, io_handler_fn fn, void *opaque,
		    const char *name) __must_check;
/* Removes the range starting exactly at base; -ENOENT if none. */
int io_bus_unregister(struct io_bus *bus, u64 base);
/* The opaque of the range that starts at base, when its handler is fn; else NULL. */
void *io_bus_owner(struct io_bus *bus, u64 base, io_handler_fn fn);
/* A device on the bus describes itself in the device tree: fn(fdt, opaque) for the range that
 * starts at base (after io_bus_register). 0, or -ENOENT when no range starts there. */
int io_bus_set_fdt_node(struct io_bus *bus, u64 base, io_fdt_node_fn fn);
/* The device tree builder's walk: the node of every range that has one, in address order.
 * The generators run with the bus's read lock held (they must not (un)register ranges).
 * 0 or the first negative a generator returned. */
int io_bus_fdt_nodes(struct io_bus *bus, void *fdt);
/* Dispatch one access; returns true when a handler took it. Unclaimed reads give 0xff bytes. */
bool io_bus_dispatch(struct io_bus *bus, struct kvm_cpu *vcpu, u64 addr, u8 *data, u32 len,
		     bool is_write);

#endif

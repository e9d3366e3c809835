/* Counters: the visitor every device reports through, the flat names they travel under, and their collection from a VM (stats-fmt.h formats them). */
#ifndef LKVM_STATS_H
#define LKVM_STATS_H

#include "lkvm/util.h"

struct kvm;

/*
 * A device's stats op reports its counters as groups of named u64 values: first one group
 * per queue ("rx0", "req0"), a row of the table and an object of "queues" in JSON; then any
 * device-wide group the formatter knows for its kind (blk's "bounce"). Counter names are
 * the JSON field names. The device list walker (kvm_devs_stats) announces each device
 * with device() first.
 */
struct stats_visitor {
	void (*device)(struct stats_visitor *v, const char *kind, int index);
	void (*group)(struct stats_visitor *v, const char *name);
	void (*counter)(struct stats_visitor *v, const char *name, u64 value);
};

/*
 * The flat form, as the control socket carries it and the formatter reads it: one value
 * per name, "KINDn.GROUP.COUNTER" (net0.tx0.packets, disk0.bounce.peak) for devices,
 * vcpu.exits.{total,io,mmio} and vcpu.exit.REASON for the vCPUs, gdb.COUNTER once the VM has
 * had a gdb server (gdb-target.h: gdb_vm_stats), and for lkvm stat name,
 * state, uptime_ns and guest_clock_ns. put() is called once per value, in order.
 */
typedef void (*stats_put_fn)(void *arg, const char *name, u64 value);
/* The longest flat name (the control protocol's field names take it: ctl/server.c checks). */
#define STATS_NAME_MAX 63

/* A visitor that turns what it is given into flat names for put. */
struct stats_flat {
	struct stats_visitor v;
	stats_put_fn put;
	void *arg;
	char device[24], group[24];
};
void stats_flat_init(struct stats_flat *f, stats_put_fn put, void *arg);

/* The vCPUs' exit counters and every device's, flat. */
void kvm_stats_collect(struct kvm *kvm, stats_put_fn put, void *arg);

#endif

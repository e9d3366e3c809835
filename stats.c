/* Counters collected: the visitor devices report through, turned into flat names, and a VM's counters (its vCPUs' exits, gdb's and every device's); ctl/stats-fmt.c formats them. */
#include <stdio.h>
#include <string.h>

#include "lkvm/dev.h"
#include "lkvm/gdb-target.h"
#include "lkvm/kvm-cpu.h"
#include "lkvm/kvm.h"
#include "lkvm/stats.h"

static struct stats_flat *flat_of(struct stats_visitor *v)
{
	return (struct stats_flat *)v; /* v is the first member */
}

static void flat_device(struct stats_visitor *v, const char *kind, int index)
{
	snprintf(flat_of(v)->device, sizeof(flat_of(v)->device), "%s%d", kind, index);
}

static void flat_group(struct stats_visitor *v, const char *name)
{
	snprintf(flat_of(v)->group, sizeof(flat_of(v)->group), "%s", name);
}

static void flat_counter(struct stats_visitor *v, const char *name, u64 value)
{
	struct stats_flat *f = flat_of(v);
	char full[STATS_NAME_MAX + 1];

	snprintf(full, sizeof(full), "%s.%s.%s", f->device, f->group, name);
	f->put(f->arg, full, value);
}

void stats_flat_init(struct stats_flat *f, stats_put_fn put, void *arg)
{
	memset(f, 0, sizeof(*f));
	f->v = (struct stats_visitor){ flat_device, flat_group, flat_counter };
	f->put = put;
	f->arg = arg;
}

/* memory.*: lkvm's resident set, the guest RAM in it, and lkvm's own (the rest; private: less
 * its binary's and libraries' pages, which every lkvm shares). Levels, not counts. */
static void put_memory(struct kvm *kvm, stats_put_fn put, void *arg)
{
	struct kvm_mem_usage u;
	u64 own;

	if (kvm_mem_usage(kvm, &u) < 0)
		return;
	own = u.rss_kib > u.guest_kib ? u.rss_kib - u.guest_kib : 0;
	put(arg, "memory.rss_kib", u.rss_kib);
	put(arg, "memory.guest_kib", u.guest_kib);
	put(arg, "memory.lkvm_kib", own);
	put(arg, "memory.lkvm_private_kib", own > u.files_kib ? own - u.files_kib : 0);
}

void kvm_stats_collect(struct kvm *kvm, stats_put_fn put, void *arg)
{
	u64 io = 0, mmio = 0, total = 0, by[ARRAY_SIZE(((struct kvm_cpu *)0)->exits)] = { 0 };
	char name[STATS_NAME_MAX + 1];
	struct stats_flat f;

	for (int i = 0; i < kvm->nr_cpus; i++) {
		/* Racy snapshot while vCPUs run: each counter is one aligned word. */
		io += __atomic_load_n(&kvm->cpus[i]->pio_exits, __ATOMIC_RELAXED);
		mmio += __atomic_load_n(&kvm->cpus[i]->mmio_exits, __ATOMIC_RELAXED);
		for (size_t e = 0; e < ARRAY_SIZE(by); e++)
			by[e] += __atomic_load_n(&kvm->cpus[i]->exits[e], __ATOMIC_RELAXED);
	}
	for (size_t e = 0; e < ARRAY_SIZE(by); e++)
		total += by[e];
	put(arg, "vcpu.exits.total", total);
	put(arg, "vcpu.exits.io", io);
	put(arg, "vcpu.exits.mmio", mmio);
	for (size_t e = 0; e < ARRAY_SIZE(by); e++) {
		const char *en = kvm_exit_name((u32)e);

		if (!by[e])
			continue;
		if (en)
			snprintf(name, sizeof(name), "vcpu.exit.%s", en);
		else
			snprintf(name, sizeof(name), "vcpu.exit.reason%zu", e);
		put(arg, name, by[e]);
	}
	put_memory(kvm, put, arg);
	gdb_vm_stats(kvm, put, arg);
	stats_flat_init(&f, put, arg);
	kvm_devs_stats(kvm, &f.v);
}

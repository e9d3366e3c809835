/* Address-range dispatch for port I/O and MMIO exits (sorted array, binary search, rwlock). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/io.h"

void io_bus_init(struct io_bus *bus)
{
	memset(bus, 0, sizeof(*bus));
	pthread_rwlock_init(&bus->lock, NULL);
}

void io_bus_destroy(struct io_bus *bus)
{
	free(bus->r);
	bus->r = NULL;
	bus->nr = bus->cap = 0;
	pthread_rwlock_destroy(&bus->lock);
}

/* Index of the first range whose end is above addr (the only candidate to contain it). */
static int io_bus_find(const struct io_bus *bus, u64 addr)
{
	int lo = 0, hi = bus->nr;

	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		const struct io_range *r = &bus->r[mid];

		if (r->base + r->len <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int io_bus_register(struct io_bus *bus, u64 base, u64 len, io_handler_fn fn, void *opaque,
		    const char *name)
{
	int i, ret = 0;

	if (!len || !fn || base + len < base)
		return -EINVAL;
	pthread_rwlock_wrlock(&bus->lock);
	i = io_bus_find(bus, base);
	if (i < bus->nr && bus->r[i].base < base + len) {
		ret = -EEXIST;
		goto out;
	}
	if (bus->nr == bus->cap) {
		int cap = bus->cap ? bus->cap * 2 : 16;
		struct io_range *n = realloc(bus->r, (size_t)cap * sizeof(*n));

		if (!n) {
			ret = -ENOMEM;
			goto out;
		}
		bus->r = n;
		bus->cap = cap;
	}
	memmove(&bus->r[i + 1], &bus->r[i], (size_t)(bus->nr - i) * sizeof(bus->r[0]));
	bus->r[i] = (struct io_range){ base, len, fn, opaque, name, NULL };
	bus->nr++;
out:
	pthread_rwlock_unlock(&bus->lock);
	return ret;
}

int io_bus_unregister(struct io_bus *bus, u64 base)
{
	int i, ret = -ENOENT;

	pthread_rwlock_wrlock(&bus->lock);
	i = io_bus_find(bus, base);
	if (i < bus->nr && bus->r[i].base == base) {
		memmove(&bus->r[i], &bus->r[i + 1], (size_t)(bus->nr - i - 1) * sizeof(bus->r[0]));
		bus->nr--;
		ret = 0;
	}
	pthread_rwlock_unlock(&bus->lock);
	return ret;
}

void *io_bus_owner(struct io_bus *bus, u64 base, io_handler_fn fn)
{
	void *opaque = NULL;
	int i;

	pthread_rwlock_rdlock(&bus->lock);
	i = io_bus_find(bus, base);
	if (i < bus->nr && bus->r[i].base == base && bus->r[i].fn == fn)
		opaque = bus->r[i].opaque;
	pthread_rwlock_unlock(&bus->lock);
	return opaque;
}

int io_bus_set_fdt_node(struct io_bus *bus, u64 base, io_fdt_node_fn fn)
{
	int i, ret = -ENOENT;

	pthread_rwlock_wrlock(&bus->lock);
	i = io_bus_find(bus, base);
	if (i < bus->nr && bus->r[i].base == base) {
		bus->r[i].fdt_node = fn;
		ret = 0;
	}
	pthread_rwlock_unlock(&bus->lock);
	return ret;
}

int io_bus_fdt_nodes(struct io_bus *bus, void *fdt)
{
	int ret = 0;

	pthread_rwlock_rdlock(&bus->lock);
	for (int i = 0; i < bus->nr && ret >= 0; i++)
		if (bus->r[i].fdt_node)
			ret = bus->r[i].fdt_node(fdt, bus->r[i].opaque);
	pthread_rwlock_unlock(&bus->lock);
	return ret < 0 ? ret : 0;
}

bool io_bus_dispatch(struct io_bus *bus, struct kvm_cpu *vcpu, u64 addr, u8 *data, u32 len,
		     bool is_write)
{
	struct io_range r;
	bool found = false;
	int i;

	pthread_rwlock_rdlock(&bus->lock);
	i = io_bus_find(bus, addr);
	/* The whole access must fall inside one range: a straddling access is unclaimed. */
	if (i < bus->nr && bus->r[i].base <= addr &&
	    range_ok(addr - bus->r[i].base, len, bus->r[i].len)) {
		r = bus->r[i];
		found = true;
	}
	pthread_rwlock_unlock(&bus->lock);
	if (!found) {
		__atomic_fetch_add(&bus->unhandled, 1, __ATOMIC_RELAXED);
		if (!is_write)
			memset(data, 0xff, len);
		return false;
	}
	/* Called without the bus lock so a handler may (un)register ranges, e.g. on a PCI
	 * BAR write; devices keep their own locks for their state. */
	r.fn(vcpu, addr, data, len, is_write, r.opaque);
	return true;
}

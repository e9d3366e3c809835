/* Guest RAM layout around the PCI hole and the single checked guest-physical accessor. */
#include <errno.h>
#include <string.h>

#include "lkvm/mem.h"

int gmem_init(struct guest_mem *m, u8 *base, u64 ram_size)
{
	memset(m, 0, sizeof(*m));
	if (!base || ram_size == 0 || ram_size > GiB(1024) || (ram_size & 0xfff))
		return -EINVAL;
	m->base = base;
	m->ram_size = ram_size;
	m->r[0].gpa = 0;
	m->r[0].hva = base;
	if (ram_size <= PCI_HOLE_START) {
		m->r[0].size = ram_size;
		m->nr = 1;
		return 0;
	}
	m->r[0].size = PCI_HOLE_START;
	m->r[1].gpa = PCI_HOLE_END;
	m->r[1].size = ram_size - PCI_HOLE_START;
	m->r[1].hva = base + PCI_HOLE_START;
	m->nr = 2;
	return 0;
}

void *gmem_ptr(const struct guest_mem *m, u64 gpa, u64 len)
{
	for (int i = 0; i < m->nr; i++) {
		const struct guest_region *r = &m->r[i];

		if (gpa < r->gpa)
			continue;
		/* gpa - r->gpa cannot underflow here; range_ok rejects wrap-around. */
		if (!range_ok(gpa - r->gpa, len, r->size))
			continue;
		if (len == 0 && gpa - r->gpa >= r->size)
			continue;
		return r->hva + (gpa - r->gpa);
	}
	return NULL;
}

u64 gmem_low_end(const struct guest_mem *m)
{
	return m->nr ? m->r[0].gpa + m->r[0].size : 0;
}

int gmem_write(const struct guest_mem *m, u64 gpa, const void *src, u64 len)
{
	void *p = gmem_ptr(m, gpa, len);

	if (!p)
		return -EFAULT;
	memcpy(p, src, len);
	return 0;
}

int gmem_read(const struct guest_mem *m, u64 gpa, void *dst, u64 len)
{
	const void *p = gmem_ptr(m, gpa, len);

	if (!p)
		return -EFAULT;
	memcpy(dst, p, len);
	return 0;
}

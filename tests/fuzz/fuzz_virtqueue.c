/* Fuzz target: the split-virtqueue chain walker (virtio/virtqueue.c) over guest memory the input fills. */
#include <string.h>
#include <sys/mman.h>

#include "fuzz.h"
#include "lkvm/virtqueue.h"

/* Input: a 16-byte header, then the first bytes of guest RAM (the rest is zero).
 *   u16 queue size (vq_init checks it), u8 flags (bit 0 EVENT_IDX, bit 1 give back the
 *   last chain of each round unconsumed, bit 2 RAM on both sides of the PCI hole), u8
 *   rounds, u32 desc, avail, used gpa. Between rounds the driver side's avail->idx moves
 *   on by the round's byte of the header.
 * With bit 2 guest RAM is 3 GiB + 16 KiB (reserved, not touched): the input's first 16 KiB
 * go just below the hole (gpa 3 GiB - 16 KiB), the next 16 KiB at 4 GiB, and the ring
 * addresses count from 3 GiB - 16 KiB, so chains can reach across the hole. */
#define VQF_RAM KiB(32)
#define VQF_HDR 16
#define VQF_WIN KiB(16)
#define VQF_BIG (PCI_HOLE_START + VQF_WIN)

static u8 ram[VQF_RAM] __attribute__((aligned(4096)));
static u8 *big; /* VQF_BIG bytes of address space, dropped after each input */
static struct vq_elem elem;

static const u8 *ram_lo;
static u64 ram_len;

static bool in_ram(const void *p, size_t len)
{
	const u8 *b = p;

	return b >= ram_lo && b <= ram_lo + ram_len && len <= (size_t)(ram_lo + ram_len - b);
}

/* Lay out guest RAM for this input; returns the gpa the ring addresses count from. */
static u64 ram_setup(struct guest_mem *mem, bool two_regions, const u8 *img, size_t len)
{
	if (!two_regions) {
		memset(ram, 0, sizeof(ram));
		memcpy(ram, img, MIN(len, sizeof(ram)));
		ram_lo = ram;
		ram_len = VQF_RAM;
		FUZZ_ASSERT(gmem_init(mem, ram, VQF_RAM) == 0);
		return 0;
	}
	if (!big) {
		big = mmap(NULL, VQF_BIG, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		FUZZ_ASSERT(big != MAP_FAILED);
	}
	memcpy(big + PCI_HOLE_START - VQF_WIN, img, MIN(len, VQF_WIN));
	if (len > VQF_WIN)
		memcpy(big + PCI_HOLE_START, img + VQF_WIN, MIN(len - VQF_WIN, VQF_WIN));
	ram_lo = big;
	ram_len = VQF_BIG;
	FUZZ_ASSERT(gmem_init(mem, big, VQF_BIG) == 0 && mem->nr == 2);
	return PCI_HOLE_START - VQF_WIN;
}

/* Every buffer handed out must lie in RAM: touch its ends, write the writable ones. */
static void check_elem(const struct vq_elem *e, u16 size)
{
	u64 out = 0, in = 0;

	FUZZ_ASSERT(e->head < size);
	FUZZ_ASSERT((u32)e->out_num + e->in_num <= VQ_MAX_SG);
	for (int i = 0; i < e->out_num + e->in_num; i++) {
		const struct iovec *v = &e->iov[i];
		volatile u8 *b = v->iov_base;

		FUZZ_ASSERT(v->iov_len > 0 && in_ram(v->iov_base, v->iov_len));
		(void)b[0];
		(void)b[v->iov_len - 1];
		if (i >= e->out_num)
			b[v->iov_len - 1] = 0xa5;
		*(i < e->out_num ? &out : &in) += v->iov_len;
	}
	FUZZ_ASSERT(out == e->out_len && in == e->in_len);
}

int fuzz_virtqueue(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct guest_mem mem;
	struct virtqueue vq;
	u16 qsize = (u16)fuzz_take(&in, 2);
	u8 flags = (u8)fuzz_take(&in, 1), rounds = (u8)(fuzz_take(&in, 1) % 4 + 1);
	u64 desc = fuzz_take(&in, 4), avail = fuzz_take(&in, 4), used = fuzz_take(&in, 4);
	u8 bump[4];
	u64 base = ram_setup(&mem, flags & 4, in.p, in.left);

	/* The header's last bytes double as the per-round bumps (cheap for the fuzzer). */
	memcpy(bump, data + (size >= VQF_HDR ? VQF_HDR - 4 : 0), size >= VQF_HDR ? 4 : 0);
	if (size < VQF_HDR)
		memset(bump, 0, sizeof(bump));
	if (vq_init(&vq, &mem, qsize, base + desc, base + avail, base + used, flags & 1))
		goto out;
	for (int r = 0; r < rounds; r++) {
		int popped = 0, ret;

		while ((ret = vq_pop(&vq, &elem)) == 1) {
			check_elem(&elem, vq.size);
			FUZZ_ASSERT(++popped <= 2 * VQ_MAX_SIZE);
			if ((flags & 2) && !vq_has_avail(&vq))
				break; /* keep the last one for vq_unpop below */
			vq_push(&vq, elem.head, (u32)MIN(elem.in_len, 0xffffffffu));
			vq_should_notify(&vq);
		}
		if (ret == 1) {
			vq_unpop(&vq, 1);
			FUZZ_ASSERT(vq_has_avail(&vq));
		}
		if (ret < 0)
			FUZZ_ASSERT(vq.broken && vq_pop(&vq, &elem) < 0);
		vq_disable_notify(&vq);
		vq.avail->idx = (u16)(vq.avail->idx + bump[r]);
		vq_enable_notify(&vq);
	}
	vq_reset(&vq);
out:
	/* Whatever the input touched of the big mapping goes, so the next input starts from zero. */
	if (ram_lo == big)
		FUZZ_ASSERT(madvise(big, VQF_BIG, MADV_DONTNEED) == 0);
	return 0;
}

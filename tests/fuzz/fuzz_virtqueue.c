/* Fuzz target: the split-virtqueue chain walker (virtio/virtqueue.c) over guest memory the input fills. */
#include <string.h>

#include "fuzz.h"
#include "lkvm/virtqueue.h"

/* Input: a 16-byte header, then the first bytes of guest RAM (the rest is zero).
 *   u16 queue size (vq_init checks it), u8 flags (bit 0 EVENT_IDX, bit 1 give back the
 *   last chain of each round unconsumed), u8 rounds, u32 desc, avail, used gpa. Between
 *   rounds the driver side's avail->idx moves on by the round's byte of the header. */
#define VQF_RAM KiB(32)
#define VQF_HDR 16

static u8 ram[VQF_RAM] __attribute__((aligned(4096)));
static struct vq_elem elem;

static bool in_ram(const void *p, size_t len)
{
	const u8 *b = p;

	return b >= ram && b <= ram + VQF_RAM && len <= (size_t)(ram + VQF_RAM - b);
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

	memset(ram, 0, sizeof(ram));
	memcpy(ram, in.p, MIN(in.left, sizeof(ram)));
	/* The header's last bytes double as the per-round bumps (cheap for the fuzzer). */
	memcpy(bump, data + (size >= VQF_HDR ? VQF_HDR - 4 : 0), size >= VQF_HDR ? 4 : 0);
	if (size < VQF_HDR)
		memset(bump, 0, sizeof(bump));
	if (gmem_init(&mem, ram, VQF_RAM) || vq_init(&vq, &mem, qsize, desc, avail, used, flags & 1))
		return 0;
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
	return 0;
}

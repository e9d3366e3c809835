/* Unit tests for the split virtqueue: chain walking (direct/indirect), used ring, index wrap, notification suppression, every malformed ring. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check_main.h"
#include "lkvm/virtqueue.h"

/* Guest layout of the test machine (1 MiB of RAM). */
#define RAM_SIZE MiB(1)
#define DESC_GPA 0x1000ULL /* up to 256 descriptors */
#define AVAIL_GPA 0x2000ULL
#define USED_GPA 0x3000ULL
#define INDIR_GPA 0x8000ULL /* indirect tables, up to 0x10000 */
#define INDIR2_GPA 0x18000ULL
#define BUF_GPA 0x20000ULL
#define BUF(i) (BUF_GPA + (u64)(i)*0x1000)

/* The test plays the driver: it writes descriptors and the avail ring directly. */
struct tvq {
	u8 *ram;
	struct guest_mem m;
	struct virtqueue vq;
	struct vq_elem e;
	u16 size;
	u16 aidx; /* driver's avail idx */
};

static struct tvq *t;

static void setup(void)
{
	t = calloc(1, sizeof(*t));
	ck_assert_ptr_nonnull(t);
	t->ram = aligned_alloc(4096, RAM_SIZE);
	ck_assert_ptr_nonnull(t->ram);
	memset(t->ram, 0, RAM_SIZE);
	ck_assert_int_eq(gmem_init(&t->m, t->ram, RAM_SIZE), 0);
}

static void teardown(void)
{
	free(t->ram);
	free(t);
	t = NULL;
}

static struct vring_desc *table_at(u64 gpa)
{
	return gmem_ptr(&t->m, gpa, 16);
}

static struct vring_avail *avail(void)
{
	return (struct vring_avail *)(t->ram + AVAIL_GPA);
}

static struct vring_used *used(void)
{
	return (struct vring_used *)(t->ram + USED_GPA);
}

static u16 *used_event(void)
{
	return &avail()->ring[t->size];
}

static u16 *avail_event(void)
{
	return (u16 *)(void *)&used()->ring[t->size];
}

static void setd_in(u64 table, u16 i, u64 addr, u32 len, u16 flags, u16 next)
{
	struct vring_desc *d = table_at(table) + i;

	d->addr = addr;
	d->len = len;
	d->flags = flags;
	d->next = next;
}

static void setd(u16 i, u64 addr, u32 len, u16 flags, u16 next)
{
	setd_in(DESC_GPA, i, addr, len, flags, next);
}

static void post(u16 head)
{
	avail()->ring[t->aidx & (t->size - 1)] = head;
	t->aidx++;
	__atomic_store_n(&avail()->idx, t->aidx, __ATOMIC_RELEASE);
}

static void tinit(u16 size, bool event_idx)
{
	t->size = size;
	t->aidx = 0;
	ck_assert_int_eq(vq_init(&t->vq, &t->m, size, DESC_GPA, AVAIL_GPA, USED_GPA, event_idx), 0);
}

/* Start all indices at idx, as if idx chains had already gone round the ring. */
static void set_start(u16 idx)
{
	t->vq.last_avail = idx;
	t->vq.used_idx = idx;
	t->aidx = idx;
	avail()->idx = idx;
	used()->idx = idx;
}

static void *host(u64 gpa, u64 len)
{
	void *p = gmem_ptr(&t->m, gpa, len);

	ck_assert_ptr_nonnull(p);
	return p;
}

static void expect_iov(unsigned i, u64 gpa, u64 len)
{
	ck_assert_ptr_eq(t->e.iov[i].iov_base, host(gpa, len));
	ck_assert_uint_eq(t->e.iov[i].iov_len, len);
}

/* The next pop must fail, break the queue, leave the slot in place, and stay failed. */
static void expect_malformed(void)
{
	u16 last = t->vq.last_avail;

	ck_assert(!t->vq.broken);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), -EINVAL);
	ck_assert(t->vq.broken);
	ck_assert_uint_eq(t->vq.nr_malformed, 1);
	ck_assert_uint_eq(t->vq.last_avail, last);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), -EINVAL);
	ck_assert(!vq_has_avail(&t->vq));
	ck_assert(!vq_enable_notify(&t->vq));
	ck_assert_uint_eq(t->vq.nr_malformed, 1);
	ck_assert_uint_eq(t->vq.last_avail, last);
}

/* ---- vq_init / vq_reset ---- */

START_TEST(init_ok)
{
	tinit(256, true);
	ck_assert(t->vq.ready);
	ck_assert(!t->vq.broken);
	ck_assert(t->vq.event_idx);
	ck_assert_uint_eq(t->vq.size, 256);
	ck_assert_ptr_eq(t->vq.mem, &t->m);
	ck_assert_ptr_eq(t->vq.desc, t->ram + DESC_GPA);
	ck_assert_ptr_eq(t->vq.avail, t->ram + AVAIL_GPA);
	ck_assert_ptr_eq(t->vq.used, t->ram + USED_GPA);
	ck_assert_uint_eq(t->vq.desc_gpa, DESC_GPA);
	ck_assert_uint_eq(t->vq.last_avail, 0);
	ck_assert_uint_eq(t->vq.used_idx, 0);
	ck_assert(!t->vq.signalled_used_valid);

	/* Smallest and largest sizes. */
	ck_assert_int_eq(vq_init(&t->vq, &t->m, 1, DESC_GPA, AVAIL_GPA, USED_GPA, false), 0);
	ck_assert_uint_eq(t->vq.size, 1);
	ck_assert(!t->vq.event_idx);
	ck_assert_int_eq(vq_init(&t->vq, &t->m, 32768, 0, 0x80000, 0xA1000, true), 0);
	ck_assert_uint_eq(t->vq.size, 32768);
}
END_TEST

START_TEST(init_rejects_size)
{
	static const u16 bad[] = { 0, 3, 6, 100, 255, 257, 32767, 32769, 65535 };

	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		ck_assert_int_eq(vq_init(&t->vq, &t->m, bad[i], DESC_GPA, AVAIL_GPA, USED_GPA,
					 false),
				 -EINVAL);
		ck_assert(!t->vq.ready);
		ck_assert_ptr_eq(t->vq.mem, &t->m);
	}
}
END_TEST

START_TEST(init_rejects_alignment)
{
	ck_assert_int_eq(vq_init(&t->vq, &t->m, 16, DESC_GPA + 8, AVAIL_GPA, USED_GPA, false),
			 -EINVAL);
	ck_assert_int_eq(vq_init(&t->vq, &t->m, 16, DESC_GPA + 1, AVAIL_GPA, USED_GPA, false),
			 -EINVAL);
	ck_assert_int_eq(vq_init(&t->vq, &t->m, 16, DESC_GPA, AVAIL_GPA + 1, USED_GPA, false),
			 -EINVAL);
	ck_assert_int_eq(vq_init(&t->vq, &t->m, 16, DESC_GPA, AVAIL_GPA, USED_GPA + 2, false),
			 -EINVAL);
	ck_assert_int_eq(vq_init(&t->vq, &t->m, 16, DESC_GPA, AVAIL_GPA, USED_GPA + 1, false),
			 -EINVAL);
	ck_assert(!t->vq.ready);
	/* The minimum alignments themselves are fine. */
	ck_assert_int_eq(
		vq_init(&t->vq, &t->m, 16, DESC_GPA + 16, AVAIL_GPA + 2, USED_GPA + 4, false), 0);
	ck_assert(t->vq.ready);
}
END_TEST

START_TEST(init_rejects_outside_ram)
{
	const u16 n = 16;

	/* Each area ending exactly at the end of RAM fits; one element more does not. */
	ck_assert_int_eq(vq_init(&t->vq, &t->m, n, RAM_SIZE - 16 * n, AVAIL_GPA, USED_GPA, false),
			 0);
	ck_assert_int_eq(vq_init(&t->vq, &t->m, n, RAM_SIZE - 16 * n + 16, AVAIL_GPA, USED_GPA,
				 false),
			 -EINVAL);
	ck_assert_int_eq(
		vq_init(&t->vq, &t->m, n, DESC_GPA, RAM_SIZE - (6 + 2 * n), USED_GPA, false), 0);
	/* used_event is part of the avail area even without EVENT_IDX */
	ck_assert_int_eq(vq_init(&t->vq, &t->m, n, DESC_GPA, RAM_SIZE - (4 + 2 * n), USED_GPA,
				 false),
			 -EINVAL);
	ck_assert_int_eq(
		vq_init(&t->vq, &t->m, n, DESC_GPA, AVAIL_GPA, RAM_SIZE - 8 * n - 8, false), 0);
	/* avail_event likewise part of the used area */
	ck_assert_int_eq(vq_init(&t->vq, &t->m, n, DESC_GPA, AVAIL_GPA, RAM_SIZE - 8 * n - 4,
				 false),
			 -EINVAL);
	ck_assert_int_eq(vq_init(&t->vq, &t->m, n, RAM_SIZE, AVAIL_GPA, USED_GPA, false), -EINVAL);
	ck_assert_int_eq(vq_init(&t->vq, &t->m, n, UINT64_MAX - 15, AVAIL_GPA, USED_GPA, false),
			 -EINVAL);
	ck_assert_int_eq(vq_init(&t->vq, &t->m, n, DESC_GPA, UINT64_MAX - 1, USED_GPA, false),
			 -EINVAL);
	ck_assert_int_eq(vq_init(&t->vq, &t->m, n, DESC_GPA, AVAIL_GPA, UINT64_MAX - 3, false),
			 -EINVAL);
	ck_assert(!t->vq.ready);
	/* size 32768: a 512 KiB desc table fits at 0x80000 but not 16 bytes later */
	ck_assert_int_eq(vq_init(&t->vq, &t->m, 32768, 0x80000, 0, 0x20000, false), 0);
	ck_assert_int_eq(vq_init(&t->vq, &t->m, 32768, 0x80010, 0, 0x20000, false), -EINVAL);
}
END_TEST

START_TEST(reset_clears_state)
{
	tinit(16, true);
	set_start(1234);
	t->vq.signalled_used_valid = true;
	t->vq.broken = true;
	t->vq.nr_malformed = 7;
	vq_reset(&t->vq);
	ck_assert_ptr_eq(t->vq.mem, &t->m);
	ck_assert(!t->vq.ready);
	ck_assert(!t->vq.broken);
	ck_assert(!t->vq.event_idx);
	ck_assert_uint_eq(t->vq.size, 0);
	ck_assert_ptr_null(t->vq.desc);
	ck_assert_ptr_null(t->vq.avail);
	ck_assert_ptr_null(t->vq.used);
	ck_assert_uint_eq(t->vq.desc_gpa, 0);
	ck_assert_uint_eq(t->vq.last_avail, 0);
	ck_assert_uint_eq(t->vq.used_idx, 0);
	ck_assert_uint_eq(t->vq.signalled_used, 0);
	ck_assert(!t->vq.signalled_used_valid);
	ck_assert_uint_eq(t->vq.nr_malformed, 0);
	/* A queue that is not ready does nothing and is not "broken" by being used. */
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), -EINVAL);
	ck_assert(!t->vq.broken);
	ck_assert(!vq_has_avail(&t->vq));
	ck_assert(!vq_should_notify(&t->vq));
	ck_assert(!vq_enable_notify(&t->vq));
	vq_push(&t->vq, 1, 1);
	vq_disable_notify(&t->vq);
	ck_assert_uint_eq(t->vq.used_idx, 0);
}
END_TEST

/* ---- popping well-formed chains ---- */

START_TEST(pop_empty)
{
	tinit(16, false);
	ck_assert(!vq_has_avail(&t->vq));
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 0);
	ck_assert_uint_eq(t->vq.last_avail, 0);
	ck_assert(!t->vq.broken);
}
END_TEST

START_TEST(pop_single_readable)
{
	tinit(16, false);
	setd(5, BUF(0), 100, 0, 0);
	post(5);
	ck_assert(vq_has_avail(&t->vq));
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.head, 5);
	ck_assert_uint_eq(t->e.out_num, 1);
	ck_assert_uint_eq(t->e.in_num, 0);
	ck_assert_uint_eq(t->e.out_len, 100);
	ck_assert_uint_eq(t->e.in_len, 0);
	expect_iov(0, BUF(0), 100);
	ck_assert_uint_eq(t->vq.last_avail, 1);
	ck_assert(!vq_has_avail(&t->vq));
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 0);
}
END_TEST

START_TEST(pop_chain_out_in)
{
	tinit(16, false);
	/* Deliberately scattered indices: 3 -> 9 -> 0 -> 15 */
	setd(3, BUF(0), 12, VRING_DESC_F_NEXT, 9);
	setd(9, BUF(1), 1500, VRING_DESC_F_NEXT, 0);
	setd(0, BUF(2), 4096, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 15);
	setd(15, BUF(3) + 7, 1, VRING_DESC_F_WRITE, 0);
	post(3);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.head, 3);
	ck_assert_uint_eq(t->e.out_num, 2);
	ck_assert_uint_eq(t->e.in_num, 2);
	ck_assert_uint_eq(t->e.out_len, 1512);
	ck_assert_uint_eq(t->e.in_len, 4097);
	expect_iov(0, BUF(0), 12);
	expect_iov(1, BUF(1), 1500);
	expect_iov(2, BUF(2), 4096);
	expect_iov(3, BUF(3) + 7, 1);
}
END_TEST

START_TEST(pop_write_only)
{
	tinit(8, false);
	setd(0, BUF(0), 2048, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 1);
	setd(1, BUF(1), 2048, VRING_DESC_F_WRITE, 0);
	post(0);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.out_num, 0);
	ck_assert_uint_eq(t->e.in_num, 2);
	ck_assert_uint_eq(t->e.out_len, 0);
	ck_assert_uint_eq(t->e.in_len, 4096);
	expect_iov(0, BUF(0), 2048);
	expect_iov(1, BUF(1), 2048);
}
END_TEST

START_TEST(pop_several_in_order)
{
	tinit(8, false);
	for (u16 i = 0; i < 8; i++) {
		setd(i, BUF(i), 10 + i, i & 1 ? VRING_DESC_F_WRITE : 0, 0);
		post(7 - i);
	}
	for (u16 i = 0; i < 8; i++) {
		u16 h = 7 - i;

		ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
		ck_assert_uint_eq(t->e.head, h);
		ck_assert_uint_eq(t->e.out_num + t->e.in_num, 1);
		ck_assert_uint_eq(t->e.in_num, h & 1);
		expect_iov(0, BUF(h), 10 + h);
	}
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 0);
	ck_assert_uint_eq(t->vq.last_avail, 8);
}
END_TEST

START_TEST(pop_full_ring_is_fine)
{
	/* avail idx exactly size ahead is a full ring, not a malformed one. */
	tinit(4, false);
	for (u16 i = 0; i < 4; i++) {
		setd(i, BUF(i), 64, 0, 0);
		post(i);
	}
	for (u16 i = 0; i < 4; i++) {
		ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
		ck_assert_uint_eq(t->e.head, i);
	}
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 0);
	ck_assert(!t->vq.broken);
}
END_TEST

START_TEST(pop_chain_of_full_size)
{
	/* A chain using every descriptor once is the longest legal one. */
	tinit(16, false);
	for (u16 i = 0; i < 16; i++)
		setd(i, BUF(i), 100, i < 15 ? VRING_DESC_F_NEXT : 0, i + 1);
	post(0);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.out_num, 16);
	ck_assert_uint_eq(t->e.out_len, 1600);
	for (u16 i = 0; i < 16; i++)
		expect_iov(i, BUF(i), 100);
}
END_TEST

START_TEST(pop_zero_length_skipped)
{
	tinit(8, false);
	/* Zero-length descriptors give no iovec, their address is never checked and their
	 * WRITE flag does not count for ordering. */
	setd(0, BUF(0), 10, VRING_DESC_F_NEXT, 1);
	setd(1, 0xdead000000000000ULL, 0, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 2);
	setd(2, BUF(2), 30, VRING_DESC_F_NEXT, 3);
	setd(3, BUF(3), 20, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 4);
	setd(4, UINT64_MAX, 0, 0, 0);
	post(0);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.out_num, 2);
	ck_assert_uint_eq(t->e.in_num, 1);
	ck_assert_uint_eq(t->e.out_len, 40);
	ck_assert_uint_eq(t->e.in_len, 20);
	expect_iov(0, BUF(0), 10);
	expect_iov(1, BUF(2), 30);
	expect_iov(2, BUF(3), 20);

	/* A chain of only empty buffers pops as an empty element. */
	setd(5, 0, 0, 0, 0);
	post(5);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.head, 5);
	ck_assert_uint_eq(t->e.out_num, 0);
	ck_assert_uint_eq(t->e.in_num, 0);
	ck_assert_uint_eq(t->e.out_len, 0);
	ck_assert_uint_eq(t->e.in_len, 0);
}
END_TEST

START_TEST(pop_buffer_at_end_of_ram)
{
	tinit(8, false);
	setd(0, RAM_SIZE - 4096, 4096, VRING_DESC_F_WRITE, 0);
	post(0);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_ptr_eq(t->e.iov[0].iov_base, t->ram + RAM_SIZE - 4096);
	ck_assert_uint_eq(t->e.in_len, 4096);
}
END_TEST

START_TEST(pop_large_buffer)
{
	/* Lengths are u32; totals are u64 and add up exactly. */
	u64 ram = GiB(4) + MiB(1);
	u8 *p = mmap(NULL, ram, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		     -1, 0);
	struct guest_mem m;
	struct virtqueue vq;
	struct vring_desc *d = (struct vring_desc *)(p + DESC_GPA);
	struct vring_avail *a = (struct vring_avail *)(p + AVAIL_GPA);

	ck_assert_ptr_ne(p, MAP_FAILED);
	ck_assert_int_eq(gmem_init(&m, p, ram), 0);
	ck_assert_int_eq(m.nr, 2);
	ck_assert_int_eq(vq_init(&vq, &m, 8, DESC_GPA, AVAIL_GPA, USED_GPA, false), 0);
	/* Low RAM: 3 GiB minus the rings; high RAM: 1 GiB + 1 MiB from 4 GiB up. */
	d[0] = (struct vring_desc){
		.addr = 0x100000, .len = 0xBFF00000, .flags = VRING_DESC_F_NEXT, .next = 1
	};
	d[1] = (struct vring_desc){
		.addr = PCI_HOLE_END, .len = UINT32_MAX, .flags = VRING_DESC_F_WRITE, .next = 0
	};
	a->ring[0] = 0;
	a->idx = 1;
	/* UINT32_MAX past 4 GiB is beyond the 1 GiB + 1 MiB of high RAM: rejected. */
	ck_assert_int_eq(vq_pop(&vq, &t->e), -EINVAL);
	vq_reset(&vq);
	ck_assert_int_eq(vq_init(&vq, &m, 8, DESC_GPA, AVAIL_GPA, USED_GPA, false), 0);
	d[1].len = (u32)(GiB(1) + MiB(1));
	ck_assert_int_eq(vq_pop(&vq, &t->e), 1);
	ck_assert_uint_eq(t->e.out_len, 0xBFF00000ULL);
	ck_assert_uint_eq(t->e.in_len, GiB(1) + MiB(1));
	ck_assert_ptr_eq(t->e.iov[0].iov_base, p + 0x100000);
	ck_assert_ptr_eq(t->e.iov[1].iov_base, p + PCI_HOLE_START);

	/* Crossing into the PCI hole, or lying in it, is outside RAM. */
	vq_reset(&vq);
	ck_assert_int_eq(vq_init(&vq, &m, 8, DESC_GPA, AVAIL_GPA, USED_GPA, false), 0);
	d[0] = (struct vring_desc){ .addr = PCI_HOLE_START - 8, .len = 16 };
	ck_assert_int_eq(vq_pop(&vq, &t->e), -EINVAL);
	vq_reset(&vq);
	ck_assert_int_eq(vq_init(&vq, &m, 8, DESC_GPA, AVAIL_GPA, USED_GPA, false), 0);
	d[0] = (struct vring_desc){ .addr = 0xD0000000, .len = 16 };
	ck_assert_int_eq(vq_pop(&vq, &t->e), -EINVAL);
	vq_reset(&vq);
	ck_assert_int_eq(vq_init(&vq, &m, 8, DESC_GPA, AVAIL_GPA, USED_GPA, false), 0);
	d[0] = (struct vring_desc){ .addr = PCI_HOLE_START - 16, .len = 16 };
	ck_assert_int_eq(vq_pop(&vq, &t->e), 1);
	ck_assert_ptr_eq(t->e.iov[0].iov_base, p + PCI_HOLE_START - 16);
	munmap(p, ram);
}
END_TEST

/* ---- indirect descriptors ---- */

START_TEST(pop_indirect)
{
	tinit(16, false);
	setd_in(INDIR_GPA, 0, BUF(0), 10, VRING_DESC_F_NEXT, 2);
	setd_in(INDIR_GPA, 2, BUF(1), 20, VRING_DESC_F_NEXT, 1);
	setd_in(INDIR_GPA, 1, BUF(2), 30, VRING_DESC_F_WRITE, 0);
	/* The WRITE flag on the indirect descriptor itself is ignored. */
	setd(7, INDIR_GPA, 3 * 16, VRING_DESC_F_INDIRECT | VRING_DESC_F_WRITE, 0);
	post(7);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.head, 7);
	ck_assert_uint_eq(t->e.out_num, 2);
	ck_assert_uint_eq(t->e.in_num, 1);
	ck_assert_uint_eq(t->e.out_len, 30);
	ck_assert_uint_eq(t->e.in_len, 30);
	expect_iov(0, BUF(0), 10);
	expect_iov(1, BUF(1), 20);
	expect_iov(2, BUF(2), 30);
}
END_TEST

START_TEST(pop_indirect_after_direct)
{
	/* Direct readable header, then an indirect table with the writable part. */
	tinit(16, false);
	setd(0, BUF(0), 12, VRING_DESC_F_NEXT, 1);
	setd(1, INDIR_GPA, 2 * 16, VRING_DESC_F_INDIRECT, 0);
	setd_in(INDIR_GPA, 0, BUF(1), 100, VRING_DESC_F_NEXT, 1);
	setd_in(INDIR_GPA, 1, BUF(2), 200, VRING_DESC_F_WRITE, 0);
	post(0);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.head, 0);
	ck_assert_uint_eq(t->e.out_num, 2);
	ck_assert_uint_eq(t->e.in_num, 1);
	ck_assert_uint_eq(t->e.out_len, 112);
	ck_assert_uint_eq(t->e.in_len, 200);
	expect_iov(0, BUF(0), 12);
	expect_iov(1, BUF(1), 100);
	expect_iov(2, BUF(2), 200);
}
END_TEST

START_TEST(pop_indirect_unaligned_table)
{
	/* Nothing requires an indirect table to be aligned; ASan/UBSan watch the reads. */
	const u64 tbl = INDIR_GPA + 3;

	tinit(16, false);
	for (u16 i = 0; i < 2; i++) {
		struct vring_desc d = { .addr = BUF(i),
					.len = 64,
					.flags = i ? VRING_DESC_F_WRITE : VRING_DESC_F_NEXT,
					.next = 1 };

		memcpy(t->ram + tbl + 16 * i, &d, sizeof(d));
	}
	setd(0, tbl, 32, VRING_DESC_F_INDIRECT, 0);
	post(0);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.out_num, 1);
	ck_assert_uint_eq(t->e.in_num, 1);
	expect_iov(0, BUF(0), 64);
	expect_iov(1, BUF(1), 64);
}
END_TEST

START_TEST(pop_indirect_max_sg)
{
	tinit(16, false);
	for (u16 i = 0; i < VQ_MAX_SG; i++)
		setd_in(INDIR_GPA, i, BUF(0) + i, 1,
			(i < VQ_MAX_SG - 1 ? VRING_DESC_F_NEXT : 0) |
				(i >= 1000 ? VRING_DESC_F_WRITE : 0),
			i + 1);
	setd(0, INDIR_GPA, VQ_MAX_SG * 16, VRING_DESC_F_INDIRECT, 0);
	post(0);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.out_num, 1000);
	ck_assert_uint_eq(t->e.in_num, VQ_MAX_SG - 1000);
	ck_assert_uint_eq(t->e.out_len, 1000);
	ck_assert_uint_eq(t->e.in_len, VQ_MAX_SG - 1000);
	expect_iov(0, BUF(0), 1);
	expect_iov(999, BUF(0) + 999, 1);
	expect_iov(VQ_MAX_SG - 1, BUF(0) + VQ_MAX_SG - 1, 1);
}
END_TEST

/* ---- push / fill / flush / unpop ---- */

START_TEST(push_used)
{
	tinit(16, false);
	setd(3, BUF(0), 100, VRING_DESC_F_WRITE, 0);
	post(3);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	vq_push(&t->vq, t->e.head, 77);
	ck_assert_uint_eq(used()->ring[0].id, 3);
	ck_assert_uint_eq(used()->ring[0].len, 77);
	ck_assert_uint_eq(used()->idx, 1);
	ck_assert_uint_eq(t->vq.used_idx, 1);
	vq_push(&t->vq, 9, 0xffffffffu);
	ck_assert_uint_eq(used()->ring[1].id, 9);
	ck_assert_uint_eq(used()->ring[1].len, 0xffffffffu);
	ck_assert_uint_eq(used()->idx, 2);
}
END_TEST

START_TEST(fill_flush_batch)
{
	tinit(8, false);
	set_start(6);
	vq_fill(&t->vq, 11, 100, 0);
	vq_fill(&t->vq, 12, 200, 1);
	vq_fill(&t->vq, 13, 300, 2); /* slot (6 + 2) & 7 == 0 */
	/* Written but not yet published */
	ck_assert_uint_eq(used()->idx, 6);
	ck_assert_uint_eq(t->vq.used_idx, 6);
	ck_assert_uint_eq(used()->ring[6].id, 11);
	ck_assert_uint_eq(used()->ring[7].id, 12);
	ck_assert_uint_eq(used()->ring[0].id, 13);
	ck_assert_uint_eq(used()->ring[6].len, 100);
	ck_assert_uint_eq(used()->ring[7].len, 200);
	ck_assert_uint_eq(used()->ring[0].len, 300);
	vq_flush(&t->vq, 3);
	ck_assert_uint_eq(used()->idx, 9);
	ck_assert_uint_eq(t->vq.used_idx, 9);
}
END_TEST

START_TEST(unpop_gives_back)
{
	tinit(8, false);
	for (u16 i = 0; i < 3; i++) {
		setd(i, BUF(i), 100 * (i + 1), VRING_DESC_F_WRITE, 0);
		post(i);
	}
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.head, 2);
	vq_unpop(&t->vq, 2);
	ck_assert_uint_eq(t->vq.last_avail, 1);
	ck_assert(vq_has_avail(&t->vq));
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.head, 1);
	expect_iov(0, BUF(1), 200);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.head, 2);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 0);
	vq_unpop(&t->vq, 0);
	ck_assert_uint_eq(t->vq.last_avail, 3);
}
END_TEST

START_TEST(unpop_across_wrap)
{
	tinit(8, false);
	set_start(0);
	t->vq.last_avail = 1;
	vq_unpop(&t->vq, 3);
	ck_assert_uint_eq(t->vq.last_avail, 65534);
}
END_TEST

START_TEST(indices_wrap)
{
	/* Indices run freely modulo 2^16; the ring slot is idx & (size - 1). */
	tinit(8, false);
	set_start(65531);
	for (u16 i = 0; i < 8; i++)
		setd(i, BUF(i), 10 + i, VRING_DESC_F_WRITE, 0);
	for (u16 round = 0; round < 3; round++) {
		for (u16 i = 0; i < 6; i++)
			post((i + round) & 7);
		for (u16 i = 0; i < 6; i++) {
			u16 h = (i + round) & 7;

			ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
			ck_assert_uint_eq(t->e.head, h);
			expect_iov(0, BUF(h), 10 + h);
			vq_fill(&t->vq, h, 5 * h, i);
		}
		ck_assert_int_eq(vq_pop(&t->vq, &t->e), 0);
		vq_flush(&t->vq, 6);
	}
	/* 65531 + 18 == 13 (mod 2^16) */
	ck_assert_uint_eq(t->vq.last_avail, 13);
	ck_assert_uint_eq(t->vq.used_idx, 13);
	ck_assert_uint_eq(used()->idx, 13);
	/* The last element (round 2, i 5, head 7) went to slot 12 & 7 == 4. */
	ck_assert_uint_eq(used()->ring[4].id, 7);
	ck_assert_uint_eq(used()->ring[4].len, 35);
	ck_assert_uint_eq(avail()->idx, 13);
	/* First element of round 2 (head 2) went to used slot 7 & 7 == 7. */
	ck_assert_uint_eq(used()->ring[7].id, 2);
	ck_assert_uint_eq(used()->ring[7].len, 10);
}
END_TEST

START_TEST(avail_full_across_wrap)
{
	/* avail idx 65534 -> 2 is 4 ahead: legal; one more is a jump beyond size. */
	tinit(4, false);
	set_start(65534);
	for (u16 i = 0; i < 4; i++) {
		setd(i, BUF(i), 8, 0, 0);
		post(i);
	}
	ck_assert_uint_eq(avail()->idx, 2);
	for (u16 i = 0; i < 4; i++) {
		ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
		ck_assert_uint_eq(t->e.head, i);
	}
	ck_assert_uint_eq(t->vq.last_avail, 2);
	avail()->idx = 2 + 5;
	expect_malformed();
}
END_TEST

/* ---- notifications ---- */

START_TEST(notify_no_interrupt_flag)
{
	tinit(8, false);
	vq_push(&t->vq, 0, 1);
	avail()->flags = 0;
	ck_assert(vq_should_notify(&t->vq));
	avail()->flags = VRING_AVAIL_F_NO_INTERRUPT;
	ck_assert(!vq_should_notify(&t->vq));
	vq_push(&t->vq, 0, 1);
	ck_assert(!vq_should_notify(&t->vq));
	avail()->flags = 0;
	ck_assert(vq_should_notify(&t->vq));
	/* Without EVENT_IDX, used_event is meaningless. */
	*used_event() = 1000;
	ck_assert(vq_should_notify(&t->vq));
}
END_TEST

START_TEST(notify_event_idx_first_time)
{
	tinit(8, true);
	/* NO_INTERRUPT is not the mechanism with EVENT_IDX; the first time always notifies. */
	avail()->flags = VRING_AVAIL_F_NO_INTERRUPT;
	*used_event() = 30000;
	vq_push(&t->vq, 0, 1);
	ck_assert(!t->vq.signalled_used_valid);
	ck_assert(vq_should_notify(&t->vq));
	ck_assert(t->vq.signalled_used_valid);
	ck_assert_uint_eq(t->vq.signalled_used, 1);
	/* Nothing new since: no interrupt, whatever used_event says. */
	*used_event() = 0;
	ck_assert(!vq_should_notify(&t->vq));
	*used_event() = 1;
	ck_assert(!vq_should_notify(&t->vq));
}
END_TEST

struct ev_case {
	u16 old, new, event;
	bool want;
};

START_TEST(notify_event_idx_arith)
{
	static const struct ev_case cases[] = {
		/* range [10, 13) */
		{ 10, 13, 9, false },
		{ 10, 13, 10, true },
		{ 10, 13, 11, true },
		{ 10, 13, 12, true },
		{ 10, 13, 13, false },
		{ 10, 13, 14, false },
		{ 10, 13, 65535, false },
		{ 10, 13, 30000, false },
		/* range [65534, 2) across the wrap */
		{ 65534, 2, 65533, false },
		{ 65534, 2, 65534, true },
		{ 65534, 2, 65535, true },
		{ 65534, 2, 0, true },
		{ 65534, 2, 1, true },
		{ 65534, 2, 2, false },
		{ 65534, 2, 3, false },
		{ 65534, 2, 32000, false },
		/* range [65535, 0): exactly the last index before the wrap */
		{ 65535, 0, 65535, true },
		{ 65535, 0, 0, false },
		{ 65535, 0, 65534, false },
		/* nothing new */
		{ 5, 5, 5, false },
		{ 5, 5, 4, false },
	};

	tinit(8, true);
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		t->vq.signalled_used = cases[i].old;
		t->vq.signalled_used_valid = true;
		t->vq.used_idx = cases[i].new;
		*used_event() = cases[i].event;
		ck_assert_msg(vq_should_notify(&t->vq) == cases[i].want,
			      "case %u: old %u new %u event %u", i, cases[i].old, cases[i].new,
			      cases[i].event);
		ck_assert_uint_eq(t->vq.signalled_used, cases[i].new);
	}
}
END_TEST

START_TEST(notify_event_idx_pushes_across_wrap)
{
	tinit(8, true);
	set_start(65533);
	/* First check after init: always. */
	vq_push(&t->vq, 0, 1);
	ck_assert(vq_should_notify(&t->vq)); /* signalled = 65534 */
	/* Driver wants an interrupt after it has seen entry 0 (used idx moves past 0). */
	*used_event() = 0;
	vq_push(&t->vq, 1, 1); /* 65535 */
	ck_assert(!vq_should_notify(&t->vq));
	vq_push(&t->vq, 2, 1); /* 0 */
	ck_assert(!vq_should_notify(&t->vq));
	vq_push(&t->vq, 3, 1); /* 1: entry 0 now used */
	ck_assert_uint_eq(used()->idx, 1);
	ck_assert(vq_should_notify(&t->vq));
	vq_push(&t->vq, 4, 1);
	ck_assert(!vq_should_notify(&t->vq));
	/* A batch that jumps over used_event still notifies. */
	*used_event() = 3;
	vq_fill(&t->vq, 5, 1, 0);
	vq_fill(&t->vq, 6, 1, 1);
	vq_fill(&t->vq, 7, 1, 2);
	vq_flush(&t->vq, 3); /* 2 -> 5 */
	ck_assert(vq_should_notify(&t->vq));
	ck_assert_uint_eq(t->vq.signalled_used, 5);
}
END_TEST

START_TEST(notify_suppress_no_event_idx)
{
	tinit(8, false);
	ck_assert_uint_eq(used()->flags, 0);
	vq_disable_notify(&t->vq);
	ck_assert_uint_eq(used()->flags, VRING_USED_F_NO_NOTIFY);
	ck_assert(!vq_enable_notify(&t->vq));
	ck_assert_uint_eq(used()->flags, 0);

	/* A chain posted while kicks were off is caught by the re-check. */
	vq_disable_notify(&t->vq);
	setd(0, BUF(0), 1, 0, 0);
	post(0);
	ck_assert(vq_enable_notify(&t->vq));
	ck_assert_uint_eq(used()->flags, 0);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert(!vq_enable_notify(&t->vq));
	/* avail_event is untouched without EVENT_IDX */
	ck_assert_uint_eq(*avail_event(), 0);
}
END_TEST

START_TEST(notify_suppress_event_idx)
{
	tinit(8, true);
	set_start(65534);
	*avail_event() = 0xabcd;
	vq_disable_notify(&t->vq);
	ck_assert_uint_eq(used()->flags, 0);
	ck_assert_uint_eq(*avail_event(), 0xabcd);
	ck_assert(!vq_enable_notify(&t->vq));
	ck_assert_uint_eq(*avail_event(), 65534);

	vq_disable_notify(&t->vq);
	for (u16 i = 0; i < 3; i++) {
		setd(i, BUF(i), 1, 0, 0);
		post(i);
	}
	/* Disable leaves avail_event behind */
	ck_assert_uint_eq(*avail_event(), 65534);
	ck_assert(vq_enable_notify(&t->vq));
	ck_assert_uint_eq(*avail_event(), 65534);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert(vq_enable_notify(&t->vq));
	ck_assert_uint_eq(*avail_event(), 0);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert(!vq_enable_notify(&t->vq));
	ck_assert_uint_eq(*avail_event(), 1);
	ck_assert_uint_eq(used()->flags, 0);
	/* The driver's own check: kick when its idx crosses avail_event. */
	ck_assert(vring_need_event(*avail_event(), 2, 1));
	ck_assert(!vring_need_event(*avail_event(), 1, 0));
}
END_TEST

/* ---- malformed rings ---- */

START_TEST(bad_loop)
{
	tinit(16, false);
	setd(0, BUF(0), 10, VRING_DESC_F_NEXT, 1);
	setd(1, BUF(1), 10, VRING_DESC_F_NEXT, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_self_loop)
{
	tinit(16, false);
	setd(4, BUF(0), 10, VRING_DESC_F_NEXT, 4);
	post(4);
	expect_malformed();
}
END_TEST

START_TEST(bad_chain_longer_than_size)
{
	/* Every descriptor once, then back to the start: size + 1 steps. */
	tinit(8, false);
	for (u16 i = 0; i < 8; i++)
		setd(i, BUF(i), 10, VRING_DESC_F_NEXT, (i + 1) & 7);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_loop_zero_length)
{
	/* Empty buffers are skipped but still count towards the chain bound. */
	tinit(8, false);
	setd(0, 0, 0, VRING_DESC_F_NEXT, 1);
	setd(1, 0, 0, VRING_DESC_F_NEXT, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_head)
{
	tinit(16, false);
	setd(0, BUF(0), 10, 0, 0);
	post(16);
	expect_malformed();
}
END_TEST

START_TEST(bad_head_huge)
{
	tinit(16, false);
	post(0xffff);
	expect_malformed();
}
END_TEST

START_TEST(bad_next)
{
	tinit(16, false);
	setd(0, BUF(0), 10, VRING_DESC_F_NEXT, 16);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_buffer_outside_ram)
{
	tinit(16, false);
	setd(0, RAM_SIZE, 10, 0, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_buffer_straddles_end)
{
	tinit(16, false);
	setd(0, BUF(0), 10, VRING_DESC_F_NEXT, 1);
	setd(1, RAM_SIZE - 4096, 4097, VRING_DESC_F_WRITE, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_buffer_wraps_u64)
{
	tinit(16, false);
	setd(0, UINT64_MAX - 7, 16, 0, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_buffer_addr_len_overflow)
{
	/* addr + len wraps to a small address inside RAM. */
	tinit(16, false);
	setd(0, 0xfffffffffffff000ULL, 0x2000, 0, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_buffer_max_addr)
{
	tinit(16, false);
	setd(0, UINT64_MAX, 1, VRING_DESC_F_WRITE, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_indirect_len_not_multiple)
{
	tinit(16, false);
	setd_in(INDIR_GPA, 0, BUF(0), 10, 0, 0);
	setd(0, INDIR_GPA, 24, VRING_DESC_F_INDIRECT, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_indirect_len_zero)
{
	tinit(16, false);
	setd(0, INDIR_GPA, 0, VRING_DESC_F_INDIRECT, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_indirect_too_large)
{
	tinit(16, false);
	for (u16 i = 0; i <= VQ_MAX_SG; i++)
		setd_in(INDIR_GPA, i, BUF(0), 1, i < VQ_MAX_SG ? VRING_DESC_F_NEXT : 0, i + 1);
	setd(0, INDIR_GPA, (VQ_MAX_SG + 1) * 16, VRING_DESC_F_INDIRECT, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_indirect_table_outside_ram)
{
	tinit(16, false);
	setd(0, RAM_SIZE - 16, 32, VRING_DESC_F_INDIRECT, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_indirect_table_wraps)
{
	tinit(16, false);
	setd(0, UINT64_MAX - 15, 32, VRING_DESC_F_INDIRECT, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_nested_indirect)
{
	tinit(16, false);
	setd_in(INDIR2_GPA, 0, BUF(1), 10, 0, 0);
	setd_in(INDIR_GPA, 0, BUF(0), 10, VRING_DESC_F_NEXT, 1);
	setd_in(INDIR_GPA, 1, INDIR2_GPA, 16, VRING_DESC_F_INDIRECT, 0);
	setd(0, INDIR_GPA, 32, VRING_DESC_F_INDIRECT, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_indirect_with_next)
{
	tinit(16, false);
	setd_in(INDIR_GPA, 0, BUF(0), 10, 0, 0);
	setd(0, INDIR_GPA, 16, VRING_DESC_F_INDIRECT | VRING_DESC_F_NEXT, 1);
	setd(1, BUF(1), 10, VRING_DESC_F_WRITE, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_indirect_next_out_of_table)
{
	/* next 3 is < queue size but not < the 3 table entries */
	tinit(16, false);
	setd_in(INDIR_GPA, 0, BUF(0), 10, VRING_DESC_F_NEXT, 1);
	setd_in(INDIR_GPA, 1, BUF(1), 10, VRING_DESC_F_NEXT, 3);
	setd_in(INDIR_GPA, 2, BUF(2), 10, 0, 0);
	setd_in(INDIR_GPA, 3, BUF(3), 10, 0, 0);
	setd(0, INDIR_GPA, 48, VRING_DESC_F_INDIRECT, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_indirect_loop)
{
	tinit(16, false);
	setd_in(INDIR_GPA, 0, BUF(0), 10, VRING_DESC_F_NEXT, 1);
	setd_in(INDIR_GPA, 1, BUF(1), 10, VRING_DESC_F_NEXT, 0);
	setd(0, INDIR_GPA, 4 * 16, VRING_DESC_F_INDIRECT, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_indirect_buffer_outside_ram)
{
	tinit(16, false);
	setd_in(INDIR_GPA, 0, BUF(0), 10, VRING_DESC_F_NEXT, 1);
	setd_in(INDIR_GPA, 1, RAM_SIZE - 1, 2, VRING_DESC_F_WRITE, 0);
	setd(0, INDIR_GPA, 32, VRING_DESC_F_INDIRECT, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_readable_after_writable)
{
	tinit(16, false);
	setd(0, BUF(0), 10, VRING_DESC_F_NEXT, 1);
	setd(1, BUF(1), 10, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 2);
	setd(2, BUF(2), 10, 0, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_readable_after_writable_indirect)
{
	/* Ordering holds across the switch from the direct chain into the table. */
	tinit(16, false);
	setd(0, BUF(0), 10, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 1);
	setd(1, INDIR_GPA, 16, VRING_DESC_F_INDIRECT, 0);
	setd_in(INDIR_GPA, 0, BUF(1), 10, 0, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_too_many_buffers)
{
	/* One direct buffer plus a full VQ_MAX_SG indirect table is one too many. */
	tinit(16, false);
	for (u16 i = 0; i < VQ_MAX_SG; i++)
		setd_in(INDIR_GPA, i, BUF(0) + i, 1, i < VQ_MAX_SG - 1 ? VRING_DESC_F_NEXT : 0,
			i + 1);
	setd(0, BUF(1), 10, VRING_DESC_F_NEXT, 1);
	setd(1, INDIR_GPA, VQ_MAX_SG * 16, VRING_DESC_F_INDIRECT, 0);
	post(0);
	expect_malformed();
}
END_TEST

START_TEST(bad_avail_jump)
{
	tinit(16, false);
	for (u16 i = 0; i < 16; i++)
		setd(i, BUF(i), 10, 0, 0);
	avail()->idx = 17;
	expect_malformed();
}
END_TEST

START_TEST(bad_avail_backwards)
{
	/* The driver moving avail idx back looks like a jump of almost 2^16. */
	tinit(16, false);
	setd(0, BUF(0), 10, 0, 0);
	post(0);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	avail()->idx = 0;
	expect_malformed();
}
END_TEST

START_TEST(bad_after_good_chains)
{
	/* Good chains before the bad one are delivered; the bad one stops the queue. */
	tinit(16, false);
	setd(0, BUF(0), 10, 0, 0);
	setd(1, BUF(1), 10, VRING_DESC_F_NEXT, 1);
	setd(2, BUF(2), 10, 0, 0);
	post(0);
	post(1);
	post(2);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.head, 0);
	expect_malformed();
	ck_assert_uint_eq(t->vq.last_avail, 1);
	/* Completing the chain already taken is still allowed. */
	vq_push(&t->vq, 0, 0);
	ck_assert_uint_eq(used()->idx, 1);
}
END_TEST

START_TEST(broken_until_reset)
{
	tinit(16, true);
	setd(0, BUF(0), 10, VRING_DESC_F_NEXT, 0);
	post(0);
	expect_malformed();
	/* Fixing the ring does not help: the queue stays broken. */
	setd(0, BUF(0), 10, 0, 0);
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), -EINVAL);
	ck_assert(t->vq.broken);
	ck_assert_uint_eq(t->vq.nr_malformed, 1);

	vq_reset(&t->vq);
	ck_assert(!t->vq.broken);
	ck_assert(!t->vq.ready);
	ck_assert_uint_eq(t->vq.nr_malformed, 0);
	/* The driver re-initialises its rings after a reset. */
	memset(t->ram + AVAIL_GPA, 0, 0x2000);
	tinit(16, true);
	ck_assert(!vq_has_avail(&t->vq));
	setd(0, BUF(0), 10, 0, 0);
	post(0);
	ck_assert(vq_has_avail(&t->vq));
	ck_assert_int_eq(vq_pop(&t->vq, &t->e), 1);
	ck_assert_uint_eq(t->e.head, 0);
	expect_iov(0, BUF(0), 10);
	vq_push(&t->vq, 0, 10);
	ck_assert_uint_eq(used()->idx, 1);
	ck_assert(vq_should_notify(&t->vq));
}
END_TEST

static Suite *virtqueue_suite(void)
{
	Suite *s = suite_create("virtqueue");
	TCase *tc;

	tc = tcase_create("init");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, init_ok);
	tcase_add_test(tc, init_rejects_size);
	tcase_add_test(tc, init_rejects_alignment);
	tcase_add_test(tc, init_rejects_outside_ram);
	tcase_add_test(tc, reset_clears_state);
	suite_add_tcase(s, tc);

	tc = tcase_create("pop");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, pop_empty);
	tcase_add_test(tc, pop_single_readable);
	tcase_add_test(tc, pop_chain_out_in);
	tcase_add_test(tc, pop_write_only);
	tcase_add_test(tc, pop_several_in_order);
	tcase_add_test(tc, pop_full_ring_is_fine);
	tcase_add_test(tc, pop_chain_of_full_size);
	tcase_add_test(tc, pop_zero_length_skipped);
	tcase_add_test(tc, pop_buffer_at_end_of_ram);
	tcase_add_test(tc, pop_large_buffer);
	tcase_add_test(tc, pop_indirect);
	tcase_add_test(tc, pop_indirect_after_direct);
	tcase_add_test(tc, pop_indirect_unaligned_table);
	tcase_add_test(tc, pop_indirect_max_sg);
	suite_add_tcase(s, tc);

	tc = tcase_create("used");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, push_used);
	tcase_add_test(tc, fill_flush_batch);
	tcase_add_test(tc, unpop_gives_back);
	tcase_add_test(tc, unpop_across_wrap);
	tcase_add_test(tc, indices_wrap);
	tcase_add_test(tc, avail_full_across_wrap);
	suite_add_tcase(s, tc);

	tc = tcase_create("notify");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, notify_no_interrupt_flag);
	tcase_add_test(tc, notify_event_idx_first_time);
	tcase_add_test(tc, notify_event_idx_arith);
	tcase_add_test(tc, notify_event_idx_pushes_across_wrap);
	tcase_add_test(tc, notify_suppress_no_event_idx);
	tcase_add_test(tc, notify_suppress_event_idx);
	suite_add_tcase(s, tc);

	tc = tcase_create("malformed");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, bad_loop);
	tcase_add_test(tc, bad_self_loop);
	tcase_add_test(tc, bad_chain_longer_than_size);
	tcase_add_test(tc, bad_loop_zero_length);
	tcase_add_test(tc, bad_head);
	tcase_add_test(tc, bad_head_huge);
	tcase_add_test(tc, bad_next);
	tcase_add_test(tc, bad_buffer_outside_ram);
	tcase_add_test(tc, bad_buffer_straddles_end);
	tcase_add_test(tc, bad_buffer_wraps_u64);
	tcase_add_test(tc, bad_buffer_addr_len_overflow);
	tcase_add_test(tc, bad_buffer_max_addr);
	tcase_add_test(tc, bad_indirect_len_not_multiple);
	tcase_add_test(tc, bad_indirect_len_zero);
	tcase_add_test(tc, bad_indirect_too_large);
	tcase_add_test(tc, bad_indirect_table_outside_ram);
	tcase_add_test(tc, bad_indirect_table_wraps);
	tcase_add_test(tc, bad_nested_indirect);
	tcase_add_test(tc, bad_indirect_with_next);
	tcase_add_test(tc, bad_indirect_next_out_of_table);
	tcase_add_test(tc, bad_indirect_loop);
	tcase_add_test(tc, bad_indirect_buffer_outside_ram);
	tcase_add_test(tc, bad_readable_after_writable);
	tcase_add_test(tc, bad_readable_after_writable_indirect);
	tcase_add_test(tc, bad_too_many_buffers);
	tcase_add_test(tc, bad_avail_jump);
	tcase_add_test(tc, bad_avail_backwards);
	tcase_add_test(tc, bad_after_good_chains);
	tcase_add_test(tc, broken_until_reset);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(virtqueue_suite)

/* Split virtqueues (virtio 1.2 §2.7): the one descriptor-chain walker, used-ring updates and notification suppression. */
#include <errno.h>
#include <string.h>

#include "lkvm/virtqueue.h"

/*
 * Every ring area lives in guest memory that a hostile driver may rewrite at any moment,
 * from another vCPU. Rules kept throughout this file:
 *  - each guest-written field is loaded exactly once into a local, and only the local is
 *    validated and used (no double fetch);
 *  - avail->idx is loaded with acquire semantics, so ring entries and descriptors read
 *    afterwards are at least as new as the index that announced them;
 *  - used elements are written first, then used->idx with a release store;
 *  - between our store of used->idx / avail_event / used->flags and our load of the
 *    driver's used_event / avail->flags / avail->idx there is a full fence, see
 *    vq_should_notify and vq_enable_notify.
 * The areas were checked aligned in vq_init, so the casts to the uapi structs are sound.
 */

/* Totals cannot overflow: at most VQ_MAX_SG non-empty buffers of at most 4 GiB - 1 each. */
_Static_assert((u64)UINT32_MAX *VQ_MAX_SG < UINT64_MAX / 2, "iovec totals may overflow");
_Static_assert(sizeof(struct vring_desc) == 16, "vring_desc layout");
_Static_assert(sizeof(struct vring_used_elem) == 8, "vring_used_elem layout");
_Static_assert(VQ_MAX_SG <= UINT16_MAX, "out_num/in_num are u16");

static inline u16 load16(const void *p)
{
	return __atomic_load_n((const u16 *)p, __ATOMIC_RELAXED);
}

static inline void store16(void *p, u16 v)
{
	__atomic_store_n((u16 *)p, v, __ATOMIC_RELAXED);
}

/* used_event sits just after the avail ring, avail_event just after the used ring. */
static inline u16 *used_event_ptr(const struct virtqueue *vq)
{
	return &vq->avail->ring[vq->size];
}

static inline u16 *avail_event_ptr(const struct virtqueue *vq)
{
	return (u16 *)(void *)&vq->used->ring[vq->size];
}

/* One snapshot of a descriptor. Indirect tables need not be aligned, hence memcpy; the
 * empty asm makes the compiler treat the copy as opaque, so it can never re-read the
 * guest's copy in place of ours (the READ_ONCE guarantee for a whole struct). */
static inline void read_desc(struct vring_desc *d, const struct vring_desc *src)
{
	memcpy(d, src, sizeof(*d));
	__asm__ volatile("" : "+m"(*d));
}

int vq_init(struct virtqueue *vq, const struct guest_mem *mem, u16 size, u64 desc, u64 avail,
	    u64 used, bool event_idx)
{
	void *d, *a, *u;

	memset(vq, 0, sizeof(*vq));
	vq->mem = mem;
	/* u16 cannot hold more than VQ_MAX_SIZE as a power of two, but say it anyway. */
	if (size == 0 || (size & (size - 1)) || size > VQ_MAX_SIZE)
		return -EINVAL;
	if ((desc & 15) || (avail & 1) || (used & 3))
		return -EINVAL;
	d = gmem_ptr(mem, desc, 16ULL * size);
	/* Both event fields are included whether or not EVENT_IDX was negotiated. */
	a = gmem_ptr(mem, avail, 6 + 2ULL * size);
	u = gmem_ptr(mem, used, 6 + 8ULL * size);
	if (!d || !a || !u)
		return -EINVAL;
	vq->size = size;
	vq->event_idx = event_idx;
	vq->desc = d;
	vq->avail = a;
	vq->used = u;
	vq->desc_gpa = desc;
	vq->ready = true;
	return 0;
}

void vq_reset(struct virtqueue *vq)
{
	const struct guest_mem *mem = vq->mem;

	memset(vq, 0, sizeof(*vq));
	vq->mem = mem;
}

bool vq_has_avail(struct virtqueue *vq)
{
	if (!vq->ready || vq->broken)
		return false;
	return __atomic_load_n(&vq->avail->idx, __ATOMIC_ACQUIRE) != vq->last_avail;
}

static int vq_malformed(struct virtqueue *vq, const char *why)
{
	vq->broken = true;
	vq->nr_malformed++;
	/* No log line here: a guest could repeat this after every reset. The device reports
	 * it, rate-limited, through virtio_set_needs_reset. */
	vq->malformed_why = why;
	return -EINVAL;
}

/* Append one buffer to e. Zero-length buffers are dropped entirely: no iovec, no address
 * check, and their WRITE flag does not count for the readable-before-writable rule. */
static inline const char *add_buf(struct virtqueue *vq, struct vq_elem *e,
				  const struct vring_desc *d)
{
	unsigned n = (unsigned)e->out_num + e->in_num;
	void *p;

	if (d->len == 0)
		return NULL;
	if (n >= VQ_MAX_SG)
		return "more than VQ_MAX_SG buffers";
	p = gmem_ptr(vq->mem, d->addr, d->len);
	if (!p)
		return "buffer outside guest RAM";
	e->iov[n].iov_base = p;
	e->iov[n].iov_len = d->len;
	if (d->flags & VRING_DESC_F_WRITE) {
		e->in_num++;
		e->in_len += d->len;
	} else {
		if (e->in_num)
			return "readable buffer after a writable one";
		e->out_num++;
		e->out_len += d->len;
	}
	return NULL;
}

/* Walk the chain starting at head, into e. Returns NULL or the reason it is malformed. */
static const char *walk_chain(struct virtqueue *vq, struct vq_elem *e, u16 head)
{
	const struct vring_desc *table = vq->desc;
	u32 tsize = vq->size, seen = 0, idx = head;
	bool indirect = false;
	struct vring_desc d;
	const char *err;

	if (idx >= tsize)
		return "head index >= queue size";
	for (;;) {
		read_desc(&d, &table[idx]);
		/* A chain visiting more descriptors than its table holds must have looped;
		 * this bounds the walk to size + VQ_MAX_SG steps. */
		if (++seen > tsize)
			return indirect ? "indirect chain loops"
					: "chain loops or is longer than size";
		if (d.flags & VRING_DESC_F_INDIRECT) {
			if (indirect)
				return "nested indirect table";
			if (d.flags & VRING_DESC_F_NEXT)
				return "INDIRECT together with NEXT";
			if (d.len == 0 || d.len % sizeof(struct vring_desc) ||
			    d.len / sizeof(struct vring_desc) > VQ_MAX_SG)
				return "bad indirect table length";
			table = gmem_ptr(vq->mem, d.addr, d.len);
			if (!table)
				return "indirect table outside guest RAM";
			/* The WRITE flag of the indirect descriptor itself is ignored (§2.7.5.3.2). */
			tsize = d.len / sizeof(struct vring_desc);
			indirect = true;
			seen = 0;
			idx = 0;
			continue;
		}
		err = add_buf(vq, e, &d);
		if (err)
			return err;
		if (!(d.flags & VRING_DESC_F_NEXT))
			return NULL;
		idx = d.next;
		if (idx >= tsize)
			return "next index out of range";
	}
}

int vq_pop(struct virtqueue *vq, struct vq_elem *e)
{
	u16 avail_idx, head, pending;
	const char *err;

	if (!vq->ready || vq->broken)
		return -EINVAL;
	/* Acquire pairs with the driver's write barrier before it bumps avail->idx. */
	avail_idx = __atomic_load_n(&vq->avail->idx, __ATOMIC_ACQUIRE);
	pending = (u16)(avail_idx - vq->last_avail);
	if (pending == 0)
		return 0;
	if (pending > vq->size)
		return vq_malformed(vq, "avail idx moved by more than size");
	head = load16(&vq->avail->ring[vq->last_avail & (vq->size - 1)]);
	e->head = head;
	e->out_num = e->in_num = 0;
	e->out_len = e->in_len = 0;
	err = walk_chain(vq, e, head);
	if (err)
		return vq_malformed(vq, err);
	vq->last_avail++;
	return 1;
}

void vq_unpop(struct virtqueue *vq, u16 n)
{
	vq->last_avail -= n;
}

void vq_fill(struct virtqueue *vq, u16 head, u32 len, u16 off)
{
	struct vring_used_elem *u;

	if (!vq->ready)
		return;
	u = &vq->used->ring[(u16)(vq->used_idx + off) & (vq->size - 1)];
	__atomic_store_n(&u->id, (u32)head, __ATOMIC_RELAXED);
	__atomic_store_n(&u->len, len, __ATOMIC_RELAXED);
}

void vq_flush(struct virtqueue *vq, u16 n)
{
	if (!vq->ready)
		return;
	vq->used_idx += n;
	/* Release: the elements written by vq_fill are visible before the index that
	 * publishes them (pairs with the driver's read barrier after reading used->idx). */
	__atomic_store_n(&vq->used->idx, vq->used_idx, __ATOMIC_RELEASE);
}

void vq_push(struct virtqueue *vq, u16 head, u32 len)
{
	vq_fill(vq, head, len, 0);
	vq_flush(vq, 1);
}

bool vq_should_notify(struct virtqueue *vq)
{
	u16 old, new, event;
	bool valid;

	if (!vq->ready)
		return false;
	/*
	 * Full barrier between our store of used->idx (vq_flush) and the load of the
	 * driver's used_event / avail->flags. The driver re-enables interrupts by storing
	 * used_event (or clearing NO_INTERRUPT), then a full barrier, then re-reading
	 * used->idx. With fences on both sides, at least one of us sees the other's store:
	 * either we see the new used_event and interrupt, or it sees our used->idx and
	 * processes the element without waiting for an interrupt. Without this fence the
	 * x86 store buffer lets both loads see old values and the wake-up is lost.
	 */
	full_barrier();
	if (!vq->event_idx)
		return !(load16(&vq->avail->flags) & VRING_AVAIL_F_NO_INTERRUPT);

	old = vq->signalled_used;
	new = vq->used_idx;
	valid = vq->signalled_used_valid;
	vq->signalled_used = new;
	vq->signalled_used_valid = true;
	/* Nothing signalled yet since init: we cannot know where old stood, so interrupt. */
	if (!valid)
		return true;
	event = load16(used_event_ptr(vq));
	/* Interrupt iff used_event lies in [old, new) modulo 2^16. */
	return vring_need_event(event, new, old);
}

void vq_disable_notify(struct virtqueue *vq)
{
	if (!vq->ready)
		return;
	/*
	 * With EVENT_IDX, avail_event simply stays at the value of the last
	 * vq_enable_notify: the driver kicks only when its avail idx crosses it, which it
	 * already did (or we would be asleep), so no store is needed on the hot path.
	 * No barrier here: a stale kick is harmless, only a missed one is not, and that
	 * is what vq_enable_notify guards against.
	 */
	if (!vq->event_idx)
		store16(&vq->used->flags, VRING_USED_F_NO_NOTIFY);
}

bool vq_enable_notify(struct virtqueue *vq)
{
	if (!vq->ready || vq->broken)
		return false;
	/* Ask for a kick at the next chain after the ones we have taken. */
	if (vq->event_idx)
		store16(avail_event_ptr(vq), vq->last_avail);
	else
		store16(&vq->used->flags, 0);
	/*
	 * Wake-up protocol: disable notifications, drain, re-enable, re-check.
	 * Full barrier between the store above and the re-read of avail->idx. The driver
	 * stores avail->idx, then a full barrier, then reads avail_event / used->flags to
	 * decide whether to kick. With fences on both sides at least one of us sees the
	 * other's store: either the driver sees notifications enabled and kicks, or we see
	 * the new avail->idx here and the caller keeps draining. Without the fence the
	 * store could sit in the store buffer past our load: both miss, the queue stalls.
	 */
	full_barrier();
	return __atomic_load_n(&vq->avail->idx, __ATOMIC_ACQUIRE) != vq->last_avail;
}

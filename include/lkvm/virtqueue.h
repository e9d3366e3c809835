/* Split virtqueues (virtio 1.2 §2.7) on guest memory: the one chain walker, used-ring updates, notification suppression. */
#ifndef LKVM_VIRTQUEUE_H
#define LKVM_VIRTQUEUE_H

#include <sys/uio.h>
#include <linux/virtio_ring.h>

#include "lkvm/mem.h"
#include "lkvm/util.h"

#define VQ_MAX_SIZE 32768 /* largest queue size the spec allows */
#define VQ_MAX_SG 1024	  /* most buffers (direct + indirect) in one chain we accept */

/* One descriptor chain, mapped: readable (driver-to-device) buffers first, then the
 * writable ones, each already checked to lie wholly inside guest RAM. */
struct vq_elem {
	u16 head;	     /* head descriptor index, to give back in the used ring */
	u16 out_num, in_num; /* iov[0..out_num) readable, iov[out_num..out_num+in_num) writable */
	u64 out_len, in_len; /* byte totals of each part (no overflow: each <= 4 GiB * VQ_MAX_SG) */
	struct iovec iov[VQ_MAX_SG];
};

/* Device-side state of one split virtqueue. Only the thread that serves the queue
 * touches it, except vq_init/vq_reset, called while that thread is stopped. */
struct virtqueue {
	const struct guest_mem *mem;
	u16 size;
	bool event_idx;		 /* VIRTIO_RING_F_EVENT_IDX negotiated */
	bool ready;		 /* vq_init succeeded and no vq_reset since */
	bool broken;		 /* the driver put something malformed in the ring */
	struct vring_desc *desc; /* host views of the three areas (validated at init) */
	struct vring_avail *avail;
	struct vring_used *used;
	u64 desc_gpa;
	u16 last_avail;	    /* next avail ring slot to take */
	u16 used_idx;	    /* our copy of used->idx */
	u16 signalled_used; /* used_idx when we last interrupted (EVENT_IDX) */
	bool signalled_used_valid;
	u64 nr_malformed;	   /* chains rejected */
	const char *malformed_why; /* the last rejection's reason (a static string) */
};

/* Map a queue whose driver set size and the three guest addresses. Checks: size a power
 * of two in 1..VQ_MAX_SIZE; each area inside RAM (desc 16*size bytes, 16-byte aligned;
 * avail 6+2*size, 2-aligned; used 6+8*size, 4-aligned). Returns 0 or -EINVAL. */
int vq_init(struct virtqueue *vq, const struct guest_mem *mem, u16 size, u64 desc, u64 avail,
	    u64 used, bool event_idx) __must_check;
/* Back to the state before vq_init (device reset). */
void vq_reset(struct virtqueue *vq);

/* Is there an available chain we have not taken? (Acquire: chain contents are read after.) */
bool vq_has_avail(struct virtqueue *vq);

/* Take the next chain and map it into e. Returns 1 with e filled, 0 when the ring is
 * empty, or -EINVAL for a malformed ring or chain (avail idx jumped by more than size,
 * head or next index >= size, loop / chain longer than size, buffer outside RAM or
 * wrapping, total length overflow, indirect table not a multiple of 16 bytes, empty, or
 * larger than VQ_MAX_SG entries, nested indirect, INDIRECT together with NEXT, a readable
 * buffer after a writable one, more than VQ_MAX_SG buffers). On -EINVAL vq->broken is
 * set and every later call returns -EINVAL until vq_reset. */
int vq_pop(struct virtqueue *vq, struct vq_elem *e) __must_check;
/* Give back the last n popped chains unconsumed (mergeable RX that did not need them). */
void vq_unpop(struct virtqueue *vq, u16 n);

/* Write used element `off` places after the current used index (not yet visible). */
void vq_fill(struct virtqueue *vq, u16 head, u32 len, u16 off);
/* Publish n filled elements: release barrier, then used->idx += n. */
void vq_flush(struct virtqueue *vq, u16 n);
/* vq_fill(head, len, 0) + vq_flush(1). */
void vq_push(struct virtqueue *vq, u16 head, u32 len);

/* After a flush: does the driver want an interrupt now? Honours VRING_AVAIL_F_NO_INTERRUPT,
 * or with EVENT_IDX the used_event index (correct across the 16-bit wrap). Full barrier
 * inside, so a driver that just re-enabled interrupts is not missed. */
bool vq_should_notify(struct virtqueue *vq);

/* Ask the driver not to kick us (VRING_USED_F_NO_NOTIFY, or with EVENT_IDX leave
 * avail_event behind). */
void vq_disable_notify(struct virtqueue *vq);
/* Ask for kicks again and re-check: returns true when chains arrived meanwhile, in which
 * case the caller must keep draining (the kick for them may never come). Full barrier. */
bool vq_enable_notify(struct virtqueue *vq);

#endif

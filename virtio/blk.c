/* The virtio-blk device (virtio 1.2 §5.2) on a raw image: one request queue served by one thread, I/O through libaio (io_submit, completions on an eventfd) or synchronous pread/pwrite. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <libaio.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_ring.h>

#include "lkvm/dev.h"
#include "lkvm/disk.h"
#include "lkvm/iov.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"
#include "lkvm/stats.h"
#include "lkvm/virtio-blk.h"
#include "lkvm/worker.h"

#define SECTOR 512ULL
#define HDR_LEN sizeof(struct virtio_blk_outhdr)
#define NR_REQS VIRTIO_BLK_QUEUE_SIZE /* a well-behaved driver never has more in flight */
#define BOUNCE_ALIGN 4096
#define MAX_REQ_BYTES (64ULL << 20) /* far above seg_max pages; keeps used lengths in 32 bits */
/*
 * Bounce memory one device may hold at once. A request whose buffers O_DIRECT cannot take
 * gets an aligned copy of its whole length, held until it completes: unbounded, a guest
 * pins NR_REQS x MAX_REQ_BYTES (16 GiB) with 256 unaligned requests that all point at the
 * same 64 MiB of its RAM. 64 MiB is one request of the largest size accepted, so every
 * valid request can run (alone, at worst) and none ever fails for want of bounce memory;
 * it holds 51 requests of Linux's default size (max_sectors_kb 1280), and a Linux guest's
 * sector-aligned page-cache buffers bounce only where the host's O_DIRECT alignment is
 * larger than a sector. A request that does not fit waits, in ring order (no chain is
 * taken after it), until completions free enough; the thread is then woken by them.
 */
#define BOUNCE_MAX (64ULL << 20)
#define F(bit) (1ULL << (bit))

_Static_assert(sizeof(struct virtio_blk_outhdr) == 16, "virtio-blk header is 16 bytes");
_Static_assert(MAX_REQ_BYTES <= BOUNCE_MAX, "the largest request must fit in the bounce budget");

/* One request from pop to completion. */
struct blk_req {
	struct iocb iocb;
	u16 head;
	u32 type;
	u8 *status;	   /* the chain's last writable byte */
	u64 off, len;	   /* byte offset in the image, data bytes */
	struct iovec *iov; /* the guest's data buffers (malloc'd copy of the chain's) */
	int niov;
	void *bounce;	/* aligned copy for O_DIRECT when the guest's buffers are not */
	u64 bounce_len; /* its size, counted in bounce_held */
	struct iovec biov;
	int next_free;
};

struct virtio_blk {
	struct virtio_device vdev;
	struct kvm *kvm;
	int fd;
	struct disk *disk; /* qcow2 or snapshot=on: that backend, synchronously (fd is -1) */
	int lock_fd;	   /* with disk: the image's lock (disk_lock), else -1 */
	bool ro, direct;
	u32 dio_align; /* O_DIRECT buffer and length alignment */
	enum blk_io io;
	u64 size;	     /* image bytes exposed (whole sectors) */
	char path[PATH_MAX]; /* as -d gave it (a snapshot records it) */
	struct virtio_blk_config cfg;
	char id[VIRTIO_BLK_ID_BYTES];

	io_context_t ctx;
	int aio_efd;	      /* io_set_eventfd: one count per completion */
	struct worker worker; /* the queue thread */

	/* Owned by the queue thread while it runs. */
	struct blk_req reqs[NR_REQS];
	int free_head;
	int inflight;
	bool broken;
	u16 pending; /* used elements filled, not yet flushed */
	struct vq_elem *elem;
	struct iocb *batch[NR_REQS];
	int nbatch;
	struct blk_req *waiting; /* handled, waiting for bounce memory (the last chain taken) */
	u64 bounce_held;	 /* bytes of bounce buffers allocated now (<= BOUNCE_MAX) */

	/* For --stats (written by the queue thread, read by anyone). */
	atomic_ullong bounce_now, bounce_peak, bounce_waits;
};

static inline void stat_add(atomic_ullong *c, u64 v)
{
	atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static struct virtio_queue *rq(struct virtio_blk *b)
{
	return &b->vdev.q[0];
}

/* ---- requests ---- */

static struct blk_req *req_get(struct virtio_blk *b)
{
	struct blk_req *r;

	if (b->free_head < 0)
		return NULL;
	r = &b->reqs[b->free_head];
	b->free_head = r->next_free;
	return r;
}

static void bounce_account(struct virtio_blk *b, u64 held)
{
	b->bounce_held = held;
	atomic_store_explicit(&b->bounce_now, held, memory_order_relaxed);
	if (held > atomic_load_explicit(&b->bounce_peak, memory_order_relaxed))
		atomic_store_explicit(&b->bounce_peak, held, memory_order_relaxed);
}

static void req_put(struct virtio_blk *b, struct blk_req *r)
{
	free(r->iov);
	free(r->bounce);
	if (r->bounce)
		bounce_account(b, b->bounce_held - r->bounce_len);
	r->iov = NULL;
	r->bounce = NULL;
	r->bounce_len = 0;
	r->next_free = b->free_head;
	b->free_head = (int)(r - b->reqs);
}

static void flush_used(struct virtio_blk *b)
{
	if (!b->pending)
		return;
	vq_flush(&rq(b)->vq, b->pending);
	b->pending = 0;
	virtio_notify_queue(&b->vdev, 0);
}

/* Write the status, give the chain back; used_len counts the bytes written into it. */
static void complete(struct virtio_blk *b, struct blk_req *r, u8 status)
{
	struct virtio_queue *q = rq(b);
	u32 used = 1;

	if (status == VIRTIO_BLK_S_OK && r->type == VIRTIO_BLK_T_IN) {
		if (r->bounce)
			iov_to(r->iov, r->niov, 0, r->bounce, r->len);
		used += (u32)r->len;
	} else if (status == VIRTIO_BLK_S_OK && r->type == VIRTIO_BLK_T_GET_ID) {
		used += (u32)r->len;
	}
	*r->status = status;
	stat_add(&q->stats.packets, 1);
	if (status == VIRTIO_BLK_S_OK)
		stat_add(&q->stats.bytes,
			 r->type == VIRTIO_BLK_T_IN || r->type == VIRTIO_BLK_T_OUT ? r->len : 0);
	else
		stat_add(&q->stats.drops, 1);
	vq_fill(&q->vq, r->head, used, b->pending++);
	if (b->pending >= q->vq.size)
		flush_used(b);
	req_put(b, r);
}

/* Copy the byte range [off, off + len) of src (n iovecs) as a new iovec array. */
static struct iovec *sub_iov(const struct iovec *src, int n, u64 off, u64 len, int *out_n)
{
	struct iovec *v = calloc((size_t)n ? (size_t)n : 1, sizeof(*v));
	int k = 0;

	if (!v)
		return NULL;
	for (int i = 0; i < n && len; i++) {
		u64 l = src[i].iov_len;

		if (off >= l) {
			off -= l;
			continue;
		}
		l = MIN(l - off, len);
		v[k++] = (struct iovec){ (u8 *)src[i].iov_base + off, l };
		len -= l;
		off = 0;
	}
	*out_n = k;
	return v;
}

static bool aligned(const struct virtio_blk *b, const struct blk_req *r)
{
	for (int i = 0; i < r->niov; i++)
		if ((uintptr_t)r->iov[i].iov_base % b->dio_align ||
		    r->iov[i].iov_len % b->dio_align)
			return false;
	return true;
}

/* The data buffers the I/O goes through: the guest's own, or an aligned bounce buffer
 * (filled when made for writes, copied back at completion for reads). A request keeps its
 * bounce buffer until req_put, so the synchronous fallback of a refused submission reuses
 * the one prep_aio made. -EAGAIN: the device's bounce memory (BOUNCE_MAX) is taken, the
 * request must wait for completions; -ENOMEM. */
static int io_buffers(struct virtio_blk *b, struct blk_req *r, const struct iovec **iov, int *n)
{
	if (!b->direct || aligned(b, r)) {
		*iov = r->iov;
		*n = r->niov;
		return 0;
	}
	if (!r->bounce) {
		/* r->len > 0: empty transfers complete before any I/O. */
		if (b->bounce_held + r->len > BOUNCE_MAX)
			return -EAGAIN;
		if (posix_memalign(&r->bounce, BOUNCE_ALIGN, r->len)) {
			r->bounce = NULL;
			return -ENOMEM;
		}
		r->bounce_len = r->len;
		bounce_account(b, b->bounce_held + r->len);
		if (r->type == VIRTIO_BLK_T_OUT)
			iov_from(r->iov, r->niov, 0, r->bounce, r->len);
		r->biov = (struct iovec){ r->bounce, r->len };
	}
	*iov = &r->biov;
	*n = 1;
	return 0;
}

/* A disk backend (disk.h): the whole transfer now, on the queue thread. */
static u8 do_disk(struct virtio_blk *b, struct blk_req *r)
{
	int ret = r->type == VIRTIO_BLK_T_FLUSH ? disk_flush(b->disk)
		  : r->type == VIRTIO_BLK_T_IN
			  ? disk_read(b->disk, r->iov, r->niov, r->off, r->len)
			  : disk_write(b->disk, r->iov, r->niov, r->off, r->len);

	return ret == 0 ? VIRTIO_BLK_S_OK : VIRTIO_BLK_S_IOERR;
}

/* Synchronous backend: the whole transfer now, on the queue thread. */
static u8 do_sync(struct virtio_blk *b, struct blk_req *r)
{
	const struct iovec *iov;
	u64 done = 0;
	int n;

	if (b->disk)
		return do_disk(b, r);
	if (r->type == VIRTIO_BLK_T_FLUSH)
		return fdatasync(b->fd) == 0 ? VIRTIO_BLK_S_OK : VIRTIO_BLK_S_IOERR;
	if (io_buffers(b, r, &iov, &n) < 0)
		return VIRTIO_BLK_S_IOERR;
	while (done < r->len) {
		struct iovec rest[VQ_MAX_SG];
		int k = 0;
		u64 skip = done;
		ssize_t got;

		for (int i = 0; i < n; i++) {
			if (skip >= iov[i].iov_len) {
				skip -= iov[i].iov_len;
				continue;
			}
			rest[k++] = (struct iovec){ (u8 *)iov[i].iov_base + skip,
						    iov[i].iov_len - skip };
			skip = 0;
		}
		got = r->type == VIRTIO_BLK_T_IN ? preadv(b->fd, rest, k, (off_t)(r->off + done))
						 : pwritev(b->fd, rest, k, (off_t)(r->off + done));
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return VIRTIO_BLK_S_IOERR; /* error, or EOF inside the checked size */
		done += (u64)got;
	}
	return VIRTIO_BLK_S_OK;
}

/* libaio backend: prepare an iocb for the batch; completion comes through aio_efd.
 * -EAGAIN: no bounce memory now (the request waits); -ENOMEM. */
static int prep_aio(struct virtio_blk *b, struct blk_req *r)
{
	const struct iovec *iov;
	int n, ret;

	if (r->type == VIRTIO_BLK_T_FLUSH) {
		io_prep_fdsync(&r->iocb, b->fd);
	} else {
		ret = io_buffers(b, r, &iov, &n);
		if (ret < 0)
			return ret;
		if (r->type == VIRTIO_BLK_T_IN)
			io_prep_preadv(&r->iocb, b->fd, iov, n, (long long)r->off);
		else
			io_prep_pwritev(&r->iocb, b->fd, iov, n, (long long)r->off);
	}
	io_set_eventfd(&r->iocb, b->aio_efd);
	r->iocb.data = r;
	b->batch[b->nbatch++] = &r->iocb;
	return 0;
}

static void submit_batch(struct virtio_blk *b)
{
	int done = 0;

	while (done < b->nbatch) {
		int ret = io_submit(b->ctx, b->nbatch - done, b->batch + done);

		if (ret > 0) {
			b->inflight += ret;
			done += ret;
			continue;
		}
		if (ret == -EAGAIN || ret == -EINTR)
			continue;
		/* The first one was refused (e.g. a file system without aio fsync): run it
		 * synchronously, then go on with the rest. */
		struct blk_req *r = b->batch[done]->data;

		complete(b, r, do_sync(b, r));
		done++;
	}
	b->nbatch = 0;
}

/* A completion: the whole transfer, or an I/O error for this request only. */
static void finish_event(struct virtio_blk *b, const struct io_event *ev)
{
	struct blk_req *r = ev->data;
	long res = (long)ev->res;
	bool ok = r->type == VIRTIO_BLK_T_FLUSH ? res == 0 : res == (long)r->len;

	b->inflight--;
	complete(b, r, ok ? VIRTIO_BLK_S_OK : VIRTIO_BLK_S_IOERR);
}

static void reap(struct virtio_blk *b)
{
	struct io_event ev[64];
	struct timespec zero = { 0, 0 };
	u64 cnt;
	int n;

	if (read(b->aio_efd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN)
		pr_debug("virtio-blk: aio eventfd: %s", strerror(errno));
	while (b->inflight > 0 && (n = io_getevents(b->ctx, 0, ARRAY_SIZE(ev), ev, &zero)) > 0) {
		for (int i = 0; i < n; i++)
			finish_event(b, &ev[i]);
	}
	flush_used(b);
}

/* Start the I/O of a checked request: synchronously now, or prepared for the next
 * io_submit (the synchronous path when that cannot be done). False: there is no bounce
 * memory for it now; it waits in b->waiting and drain takes no chain after it. */
static bool start_io(struct virtio_blk *b, struct blk_req *r)
{
	int ret = b->io == BLK_IO_SYNC ? 0 : prep_aio(b, r);

	if (ret == -EAGAIN) {
		if (b->waiting != r)
			stat_add(&b->bounce_waits, 1);
		b->waiting = r;
		return false;
	}
	if (b->waiting == r)
		b->waiting = NULL;
	if (b->io == BLK_IO_SYNC || ret < 0)
		complete(b, r, do_sync(b, r));
	return true;
}

/* Guest-visible checks of one request, then its I/O (or its immediate answer). Returns
 * false when the chain is malformed (no room for header or status). */
static bool handle(struct virtio_blk *b, const struct vq_elem *e, struct blk_req *r)
{
	const struct iovec *last;
	struct virtio_blk_outhdr h;
	u64 sector, data_len;
	int nin = e->in_num;

	if (e->out_num == 0 || e->out_len < HDR_LEN || e->in_num == 0 ||
	    iov_from(e->iov, e->out_num, 0, &h, HDR_LEN) != HDR_LEN)
		return false;
	last = &e->iov[e->out_num + e->in_num - 1];
	if (last->iov_len == 0)
		return false;
	memset(r, 0, offsetof(struct blk_req, next_free));
	r->head = e->head;
	r->status = (u8 *)last->iov_base + last->iov_len - 1;
	r->type = le32toh(h.type);
	sector = le64toh(h.sector);

	switch (r->type) {
	case VIRTIO_BLK_T_IN:
		data_len = e->in_len - 1;
		r->iov = sub_iov(e->iov + e->out_num, nin, 0, data_len, &r->niov);
		break;
	case VIRTIO_BLK_T_OUT:
		data_len = e->out_len - HDR_LEN;
		r->iov = sub_iov(e->iov, e->out_num, HDR_LEN, data_len, &r->niov);
		break;
	case VIRTIO_BLK_T_GET_ID:
		data_len = MIN(e->in_len - 1, (u64)VIRTIO_BLK_ID_BYTES);
		r->iov = sub_iov(e->iov + e->out_num, nin, 0, data_len, &r->niov);
		if (r->iov)
			iov_to(r->iov, r->niov, 0, b->id, data_len);
		r->len = data_len;
		complete(b, r, r->iov ? VIRTIO_BLK_S_OK : VIRTIO_BLK_S_IOERR);
		return true;
	case VIRTIO_BLK_T_FLUSH:
		r->len = 0;
		start_io(b, r); /* no bounce buffer: never waits */
		return true;
	default:
		complete(b, r, VIRTIO_BLK_S_UNSUPP);
		return true;
	}
	r->len = data_len;
	/* Whole sectors, inside the image, no overflow; writes only when writable. */
	if (!r->iov || data_len % SECTOR || data_len > MAX_REQ_BYTES || sector > b->size / SECTOR ||
	    !range_ok(sector * SECTOR, data_len, b->size) ||
	    (r->type == VIRTIO_BLK_T_OUT && b->ro)) {
		complete(b, r, VIRTIO_BLK_S_IOERR);
		return true;
	}
	r->off = sector * SECTOR;
	if (data_len == 0) {
		complete(b, r, VIRTIO_BLK_S_OK);
		return true;
	}
	start_io(b, r);
	return true;
}

/*
 * Take every available chain (while request slots last), submit their I/O in one
 * io_submit. Wake-up protocol as virtio-net's TX: notifications off, drain, re-enable,
 * re-check (vq_enable_notify's barrier pairs with the driver's), so no kick is lost.
 * When every slot is in flight we stop taking chains; completions make room and reap()
 * is followed by another drain. Likewise while a request waits for bounce memory: it
 * goes first at the next drain, and the buffers it waits for belong to requests in flight
 * (the batch is submitted before we give up), whose completions call us again.
 * Stop is looked at between requests: each moves at most MAX_REQ_BYTES, and a guest that
 * keeps the ring full cannot keep the thread here.
 */
static void drain(struct virtio_blk *b)
{
	struct virtqueue *vq = &rq(b)->vq;
	bool worked = false;

	if (b->broken)
		return;
	if (b->waiting) {
		worked = start_io(b, b->waiting);
		if (!worked)
			goto out;
	}
	do {
		vq_disable_notify(vq);
		for (;;) {
			struct blk_req *r;
			int ret;

			if (worker_leaving(&b->worker))
				goto out;
			if (b->free_head < 0)
				goto out; /* all slots busy: completions will call us again */
			ret = vq_pop(vq, b->elem);
			if (ret == 0)
				break;
			if (ret < 0) {
				b->broken = true;
				virtio_set_needs_reset(&b->vdev,
						       "virtio-blk: malformed descriptor chain");
				goto out;
			}
			worked = true;
			r = req_get(b);
			if (!handle(b, b->elem, r)) {
				req_put(b, r);
				b->broken = true;
				virtio_set_needs_reset(
					&b->vdev,
					"virtio-blk: request without header or status byte");
				goto out;
			}
			if (b->waiting) {
				/* Out of bounce memory: submit what holds it (a refused submission
				 * completes at once and frees its buffer), then try once more. */
				submit_batch(b);
				if (!start_io(b, b->waiting))
					goto out;
			}
		}
		submit_batch(b);
		flush_used(b);
	} while (vq_enable_notify(vq));
out:
	submit_batch(b);
	flush_used(b);
	if (worked)
		stat_add(&rq(b)->stats.batches, 1);
}

/* Nothing may write guest memory or raise an interrupt once the thread parks or ends: wait
 * for the I/O in flight (the kernel writes into guest buffers as it completes) and complete
 * it, then publish. */
static void settle(struct virtio_blk *b)
{
	while (b->inflight > 0) {
		struct io_event ev[64];
		int n = io_getevents(b->ctx, 1, ARRAY_SIZE(ev), ev, NULL);

		if (n < 0 && n != -EINTR)
			break;
		for (int i = 0; i < n; i++)
			finish_event(b, &ev[i]);
	}
	flush_used(b);
}

static void blk_thread(void *arg)
{
	struct virtio_blk *b = arg;
	struct virtio_queue *q = rq(b);

	drain(b); /* chains may have been posted before the thread existed */
	for (;;) {
		struct pollfd p[3] = {
			{ .fd = worker_fd(&b->worker), .events = POLLIN },
			{ .fd = b->aio_efd, .events = POLLIN },
			{ .fd = b->broken ? -1 : q->kick_fd, .events = POLLIN },
		};
		u64 v;

		if (poll(p, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			pr_err("virtio-blk: poll: %s", strerror(errno));
			break;
		}
		if (p[0].revents) {
			/* Stop or pause. A request waiting for bounce memory stays where it is
			 * for a pause (none of it was done), and goes first after it. */
			settle(b);
			if (worker_park(&b->worker))
				break;
			drain(b);
			continue;
		}
		if (p[1].revents)
			reap(b);
		if (p[2].revents && read(q->kick_fd, &v, sizeof(v)) == sizeof(v))
			stat_add(&q->stats.kicks, v);
		drain(b);
	}
	settle(b);
	/* A request still waiting for bounce memory was the last chain taken: give it back
	 * for the next start (none of it was done). */
	if (b->waiting) {
		vq_unpop(&q->vq, 1);
		req_put(b, b->waiting);
		b->waiting = NULL;
	}
}

/* ---- device ops ---- */

static struct virtio_blk *to_blk(struct virtio_device *vdev)
{
	return vdev->priv;
}

static u64 blk_offered(const struct virtio_blk *b)
{
	return F(VIRTIO_BLK_F_SEG_MAX) | F(VIRTIO_BLK_F_BLK_SIZE) | F(VIRTIO_BLK_F_FLUSH) |
	       (b->ro ? F(VIRTIO_BLK_F_RO) : 0) | F(VIRTIO_RING_F_EVENT_IDX) |
	       F(VIRTIO_RING_F_INDIRECT_DESC);
}

static u64 blk_get_features(struct virtio_device *vdev)
{
	return blk_offered(to_blk(vdev));
}

static void blk_config_read(struct virtio_device *vdev, u32 off, u8 *data, u32 len)
{
	struct virtio_blk *b = to_blk(vdev);

	memset(data, 0, len);
	if (off < sizeof(b->cfg))
		memcpy(data, (const u8 *)&b->cfg + off, MIN(len, (u32)sizeof(b->cfg) - off));
}

static int blk_start(struct virtio_device *vdev)
{
	struct virtio_blk *b = to_blk(vdev);

	worker_stop(&b->worker); /* a second DRIVER_OK without reset: restart cleanly */
	if (!rq(b)->vq.ready)
		return 0; /* the driver did not enable the queue */
	b->broken = false;
	b->pending = 0;
	return worker_start(&b->worker, "lkvm-blk", SB_BLK, blk_thread, b);
}

static void blk_stop(struct virtio_device *vdev)
{
	worker_stop(&to_blk(vdev)->worker);
}

static const struct virtio_dev_ops virtio_blk_ops = {
	.device_id = VIRTIO_ID_BLOCK,
	.class_code = 0x018000, /* mass storage, other */
	.get_features = blk_get_features,
	.config_size = sizeof(struct virtio_blk_config),
	.config_read = blk_config_read,
	.start = blk_start,
	.stop = blk_stop,
};

/* ---- creation, teardown, counters ---- */

/* O_DIRECT where the file system takes it and guest sectors (512 bytes) satisfy it. */
static void open_image(struct virtio_blk *b, const struct blk_opts *o)
{
	int flags = (o->ro ? O_RDONLY : O_RDWR) | O_CLOEXEC;

	b->dio_align = SECTOR;
	b->fd = -1;
	if (!o->no_direct) {
#ifdef STATX_DIOALIGN
		struct statx sx;

		if (statx(AT_FDCWD, o->path, 0, STATX_DIOALIGN, &sx) == 0 &&
		    (sx.stx_mask & STATX_DIOALIGN)) {
			if (!sx.stx_dio_offset_align || sx.stx_dio_offset_align > SECTOR)
				goto buffered; /* the file system cannot do 512-byte direct I/O */
			b->dio_align = MAX(sx.stx_dio_mem_align, sx.stx_dio_offset_align);
		}
#endif
		b->fd = open(o->path, flags | O_DIRECT);
		b->direct = b->fd >= 0;
	}
#ifdef STATX_DIOALIGN
buffered:
#endif
	if (b->fd < 0)
		b->fd = open(o->path, flags);
}

/* A qcow2 image or snapshot=on goes through a disk backend (disk.h), served synchronously;
 * a raw image without an overlay keeps the fd paths (libaio, O_DIRECT). The image is locked as
 * a raw one is, through a descriptor of its own (lock_fd): snapshot=on only reads it, so any
 * number of such VMs share it, and no writer joins them. */
static int blk_open_disk(struct virtio_blk *b, const struct blk_opts *o, char *err, size_t errlen)
{
	struct disk_opts d = { .path = o->path,
			       .ro = o->ro,
			       .snapshot = o->snapshot,
			       .backing = o->backing[0] ? o->backing : NULL };
	enum disk_fmt fmt = DISK_RAW;
	int ret;

	/* An image that cannot be probed: open_image says why. */
	if (!o->snapshot && (disk_probe(o->path, &fmt) < 0 || fmt == DISK_RAW))
		return 0;
	ret = disk_open(&d, &b->disk, err, errlen);
	if (ret < 0)
		return ret;
	/* A write lock needs a descriptor open for writing (EBADF otherwise). */
	b->lock_fd = open(o->path, (o->ro || o->snapshot ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	if (b->lock_fd < 0) {
		errfmt(err, errlen, "-d '%s': %s", o->path, strerror(errno));
		return -errno;
	}
	ret = disk_lock(b->lock_fd, o->ro || o->snapshot, o->path, err, errlen);
	if (ret < 0)
		return ret;
	b->io = BLK_IO_SYNC;
	b->size = b->disk->size & ~(SECTOR - 1);
	return 0;
}

/* blk_init_state: the free request list, the config space and the serial of b (its size known). */
static void blk_init_state(struct virtio_blk *b, const struct blk_opts *o)
{
	const char *base = strrchr(o->path, '/');
	/* The serial: "lkvm-" and the file name, cut at 20 bytes (no NUL then, §5.2.6). */
	char id[sizeof(o->path) + 8];

	for (int i = 0; i < NR_REQS; i++)
		b->reqs[i].next_free = i + 1 < NR_REQS ? i + 1 : -1;
	b->free_head = 0;
	b->cfg.capacity = htole64(b->size / SECTOR);
	b->cfg.seg_max = htole32(VIRTIO_BLK_SEG_MAX);
	b->cfg.blk_size = htole32(SECTOR);
	snprintf(id, sizeof(id), "lkvm-%s", base ? base + 1 : o->path);
	memcpy(b->id, id, MIN(strlen(id), sizeof(b->id)));
}

/* A raw image without an overlay, on the fd paths: opened, checked to be a file, locked. */
static int blk_open_raw(struct virtio_blk *b, const struct blk_opts *o, char *err, size_t errlen)
{
	struct stat st;
	int ret;

	open_image(b, o);
	if (b->fd < 0) {
		ret = -errno;
		errfmt(err, errlen, "-d '%s': %s", o->path, strerror(-ret));
		return ret;
	}
	if (fstat(b->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		errfmt(err, errlen, "-d '%s': not a regular file (raw images only)", o->path);
		return -EINVAL;
	}
	ret = disk_lock(b->fd, b->ro, o->path, err, errlen);
	if (ret < 0)
		return ret;
	b->size = (u64)st.st_size & ~(SECTOR - 1);
	return 0;
}

static int blk_alloc(struct kvm *kvm, const struct blk_opts *o, struct virtio_blk **out, char *err,
		     size_t errlen)
{
	struct virtio_blk *b = calloc(1, sizeof(*b));
	int ret;

	*out = NULL;
	if (!b) {
		errfmt(err, errlen, "virtio-blk: out of memory");
		return -ENOMEM;
	}
	b->kvm = kvm;
	b->ro = o->ro;
	memcpy(b->path, o->path, sizeof(b->path));
	b->io = o->io;
	b->aio_efd = -1;
	b->fd = b->lock_fd = -1;
	ret = blk_open_disk(b, o, err, errlen);
	if (!ret && !b->disk)
		ret = blk_open_raw(b, o, err, errlen);
	if (ret < 0)
		goto fail;
	b->aio_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	b->elem = malloc(sizeof(*b->elem));
	if (b->aio_efd < 0 || !b->elem || worker_init(&b->worker, kvm) < 0) {
		ret = -ENOMEM;
		errfmt(err, errlen, "virtio-blk: out of memory or file descriptors");
		goto fail;
	}
	ret = io_setup(NR_REQS, &b->ctx);
	if (ret < 0) {
		errfmt(err, errlen, "virtio-blk: io_setup: %s", strerror(-ret));
		b->ctx = 0;
		goto fail;
	}
	blk_init_state(b, o);
	b->vdev.ops = &virtio_blk_ops;
	b->vdev.priv = b;
	b->vdev.use_ioeventfd = !kvm->cfg.no_ioeventfd;
	*out = b;
	return 0;
fail:
	virtio_blk_destroy(b);
	return ret;
}

int virtio_blk_create_bare(struct kvm *kvm, const struct blk_opts *o, struct virtio_blk **out,
			   char *err, size_t errlen)
{
	int ret = blk_alloc(kvm, o, out, err, errlen);

	if (ret < 0)
		return ret;
	ret = virtio_device_init(&(*out)->vdev, kvm, 1, VIRTIO_BLK_QUEUE_SIZE);
	if (ret < 0) {
		virtio_blk_destroy(*out);
		*out = NULL;
	}
	return ret;
}

int virtio_blk_create(struct kvm *kvm, const struct blk_opts *o, struct virtio_blk **out, char *err,
		      size_t errlen)
{
	int ret = blk_alloc(kvm, o, out, err, errlen);

	if (ret < 0)
		return ret;
	ret = virtio_device_attach(kvm, &(*out)->vdev, o->trans, 1, VIRTIO_BLK_QUEUE_SIZE);
	if (ret < 0) {
		errfmt(err, errlen, "virtio-blk: %s transport: %s", virtio_trans_name(o->trans),
		       strerror(-ret));
		virtio_blk_destroy(*out);
		*out = NULL;
	}
	return ret;
}

struct virtio_device *virtio_blk_vdev(struct virtio_blk *b)
{
	return &b->vdev;
}

bool virtio_blk_direct(struct virtio_blk *b)
{
	return b->direct;
}

void virtio_blk_destroy(struct virtio_blk *b)
{
	if (!b)
		return;
	worker_stop(&b->worker);
	virtio_device_exit(&b->vdev);
	if (b->ctx)
		io_destroy(b->ctx);
	for (int i = 0; i < NR_REQS; i++) {
		free(b->reqs[i].iov);
		free(b->reqs[i].bounce);
	}
	if (b->fd >= 0)
		close(b->fd);
	disk_close(b->disk);
	if (b->lock_fd >= 0)
		close(b->lock_fd);
	if (b->aio_efd >= 0)
		close(b->aio_efd);
	free(b->elem);
	worker_destroy(&b->worker);
	free(b);
}

void virtio_blk_stats(struct virtio_blk *b, struct stats_visitor *v)
{
	virtio_queue_stats(&b->vdev, 0, v, "req0", "requests");
	v->counter(v, "errors", atomic_load(&rq(b)->stats.drops));
	v->group(v, "bounce");
	v->counter(v, "bytes", atomic_load(&b->bounce_now));
	v->counter(v, "peak", atomic_load(&b->bounce_peak));
	v->counter(v, "limit", BOUNCE_MAX);
	v->counter(v, "waits", atomic_load(&b->bounce_waits));
	if (b->disk)
		disk_stats(b->disk, v);
}

/* ---- the disk as an entry of the VM's device list ---- */

static int blk_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	struct blk_opts o = *(const struct blk_opts *)d->arg;
	struct virtio_blk *b;
	int ret;

	if (!o.trans_set)
		o.trans = kvm->cfg.virtio_trans;
	ret = virtio_blk_create(kvm, &o, &b, err, errlen);
	if (ret < 0)
		return ret;
	d->priv = b;
	pr_debug("virtio-blk %d over %s: %s%s, %s%s", d->index, virtio_trans_name(o.trans), o.path,
		 o.ro ? " (read-only)" : "", o.io == BLK_IO_SYNC ? "pread/pwrite" : "libaio",
		 b->direct ? ", O_DIRECT" : "");
	return 0;
}

static void blk_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	virtio_blk_destroy(d->priv);
}

void virtio_blk_quiesce(struct virtio_blk *b)
{
	worker_quiesce(&b->worker);
}

void virtio_blk_resume(struct virtio_blk *b)
{
	worker_resume(&b->worker);
}

static void blk_dev_quiesce(struct kvm_dev *d)
{
	virtio_blk_quiesce(d->priv);
}

static void blk_dev_resume(struct kvm_dev *d)
{
	virtio_blk_resume(d->priv);
}

static void blk_dev_reset(struct kvm_dev *d)
{
	virtio_device_reset(&((struct virtio_blk *)d->priv)->vdev);
}

static void blk_dev_stats(struct kvm_dev *d, struct stats_visitor *v)
{
	virtio_blk_stats(d->priv, v);
}

/* ---- snapshot ---- */

/* The image by its size and path (the new process opened it from its own -d options at init).
 * A quiesced disk holds no request in flight (settle completed them); one waiting for bounce
 * memory had nothing of it done: it is given back at load (vq_unpop) and taken again after
 * start, so it is done exactly once. */
struct blk_snap {
	u64 size;
	u8 ro, waiting;
	u8 pad[6];
};
_Static_assert(sizeof(struct blk_snap) == 16, "blk_snap has a hole");

int virtio_blk_save(struct virtio_blk *b, struct snap_rec_buf *rb, char *err, size_t errlen)
{
	struct blk_snap s;

	if (b->disk) {
		errfmt(err, errlen,
		       "virtio-blk: %s (%s): a snapshot of this disk is not supported yet", b->path,
		       disk_format(b->disk));
		return -ENOTSUP;
	}
	memset(&s, 0, sizeof(s));
	s.size = b->size;
	s.ro = b->ro;
	s.waiting = b->waiting != NULL;
	/* No path: the image is the restoring command line's -d (docs/snapshot.md), checked by
	 * its size and mode. */
	snap_rec_put(rb, BLK_SNAP_TAG_STATE, &s, sizeof(s));
	return virtio_snap_save(&b->vdev, rb, err, errlen);
}

int virtio_blk_snap_size(const void *sec, size_t len, u64 *size)
{
	struct blk_snap s;
	int ret = snap_rec_get(sec, len, BLK_SNAP_TAG_STATE, &s, sizeof(s));

	if (ret == 0)
		*size = s.size;
	return ret;
}

static int blk_snap_check(struct virtio_blk *b, const void *sec, size_t len, char *err,
			  size_t errlen)
{
	struct blk_snap s;
	int ret = virtio_snap_get(sec, len, BLK_SNAP_TAG_STATE, &s, sizeof(s), "virtio-blk", err,
				  errlen);

	if (ret < 0)
		return ret;
	if (s.size != b->size || s.ro != b->ro) {
		/* Another path with the same size is taken: a copy of the image (a clone's). */
		errfmt(err, errlen, "%s is not the snapshot's (size %llu%s, was %llu%s)", b->path,
		       (unsigned long long)b->size, b->ro ? ", read-only" : "",
		       (unsigned long long)s.size, s.ro ? ", read-only" : "");
		return -EINVAL;
	}
	if (s.waiting > 1)
		errfmt(err, errlen, "virtio-blk: state out of range");
	return s.waiting > 1 ? -EINVAL : s.waiting;
}

int virtio_blk_load(struct virtio_blk *b, const void *sec, size_t len, char *err, size_t errlen)
{
	struct virtqueue *vq = &rq(b)->vq;
	int waiting = blk_snap_check(b, sec, len, err, errlen), ret;

	ret = waiting < 0 ? waiting : virtio_snap_load(&b->vdev, sec, len, err, errlen);
	if (ret < 0)
		return ret;
	/* Every chain taken was used, but the one waiting, which goes back to the ring. */
	if ((u16)(vq->last_avail - vq->used_idx) != (u16)waiting || (waiting && !vq->ready)) {
		errfmt(err, errlen, "virtio-blk: %u requests in flight in a quiesced disk",
		       (u16)(vq->last_avail - vq->used_idx));
		virtio_device_reset(&b->vdev);
		return -EINVAL;
	}
	vq_unpop(vq, (u16)waiting);
	return 0;
}

static int blk_dev_save(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen)
{
	return virtio_blk_save(d->priv, b, err, errlen);
}

static int blk_dev_load(struct kvm_dev *d, const void *sec, size_t len, char *err, size_t errlen)
{
	return virtio_blk_load(d->priv, sec, len, err, errlen);
}

static int blk_dev_start(struct kvm_dev *d)
{
	return virtio_snap_start(&((struct virtio_blk *)d->priv)->vdev);
}

static const struct kvm_dev_ops blk_dev_ops = {
	.name = "virtio-blk",
	.prio = DEV_PRIO_VIRTIO,
	.init = blk_dev_init,
	.start = blk_dev_start,
	.quiesce = blk_dev_quiesce,
	.resume = blk_dev_resume,
	.reset = blk_dev_reset,
	.stats = blk_dev_stats,
	.stats_name = "disk",
	.save = blk_dev_save,
	.load = blk_dev_load,
	.exit = blk_dev_exit,
};

int virtio_blk_add(struct kvm *kvm, const struct blk_opts *o)
{
	return kvm_dev_add(kvm, &blk_dev_ops, o, sizeof(*o));
}

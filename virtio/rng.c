/* virtio-rng (virtio 1.2 §5.4): every writable buffer the guest posts filled from getrandom(2). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_ring.h>

#include "lkvm/dev.h"
#include "lkvm/iov.h"
#include "lkvm/kvm.h"
#include "lkvm/virtio-console.h"
#include "lkvm/worker.h"

#define QUEUE_SIZE 64
/* Bytes given per request, the rest of a longer chain left unwritten: the device MAY use
 * less than the whole buffer (virtio 1.2 §5.4.6.2), the driver takes the used length and
 * asks again (Linux asks for a cache line's worth at a time). */
#define MAX_PER_CHAIN 4096

struct virtio_rng {
	struct virtio_device vdev;
	struct kvm *kvm;
	struct worker worker; /* the queue thread */
	bool broken;
	struct vq_elem *elem;
};

/* Fill every posted buffer. Wake-up protocol as virtio-net's TX: notifications off, drain,
 * re-enable, re-check (vq_enable_notify's barrier pairs with the driver's). Stop is looked at
 * between chains, so a driver that reposts each buffer as it is used cannot hold the thread. */
static void drain(struct virtio_rng *r)
{
	struct virtio_queue *q = &r->vdev.q[0];
	u8 buf[MAX_PER_CHAIN];

	if (r->broken)
		return;
	do {
		vq_disable_notify(&q->vq);
		for (;;) {
			int ret;
			size_t want, done = 0;

			if (worker_leaving(&r->worker))
				return;
			ret = vq_pop(&q->vq, r->elem);
			if (ret == 0)
				break;
			if (ret < 0) {
				r->broken = true;
				virtio_set_needs_reset(&r->vdev, "virtio-rng: malformed chain");
				return;
			}
			want = (size_t)MIN(r->elem->in_len, (u64)sizeof(buf));
			while (done < want) {
				ssize_t n = getrandom(buf + done, want - done, 0);

				if (n < 0 && errno == EINTR)
					continue;
				if (n <= 0)
					break;
				done += (size_t)n;
			}
			done = iov_to(r->elem->iov + r->elem->out_num, r->elem->in_num, 0, buf,
				      done);
			atomic_fetch_add_explicit(&q->stats.packets, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&q->stats.bytes, done, memory_order_relaxed);
			vq_push(&q->vq, r->elem->head, (u32)done);
			virtio_notify_queue(&r->vdev, 0);
		}
	} while (vq_enable_notify(&q->vq));
}

static void rng_thread(void *arg)
{
	struct virtio_rng *r = arg;
	struct virtio_queue *q = &r->vdev.q[0];

	drain(r);
	for (;;) {
		struct pollfd p[2] = {
			{ .fd = worker_fd(&r->worker), .events = POLLIN },
			{ .fd = r->broken ? -1 : q->kick_fd, .events = POLLIN },
		};
		u64 v;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents && worker_park(&r->worker))
			break;
		if (p[1].revents && read(q->kick_fd, &v, sizeof(v)) == sizeof(v))
			atomic_fetch_add_explicit(&q->stats.kicks, v, memory_order_relaxed);
		drain(r);
	}
}

static void rng_stop(struct virtio_device *vdev)
{
	worker_stop(&((struct virtio_rng *)vdev->priv)->worker);
}

static int rng_start(struct virtio_device *vdev)
{
	struct virtio_rng *r = vdev->priv;

	rng_stop(vdev);
	if (!vdev->q[0].vq.ready)
		return 0;
	r->broken = false;
	return worker_start(&r->worker, "lkvm-rng", SB_RNG, rng_thread, r);
}

static u64 rng_features(struct virtio_device *vdev)
{
	return 1ULL << VIRTIO_RING_F_INDIRECT_DESC;
}

static const struct virtio_dev_ops virtio_rng_ops = {
	.device_id = VIRTIO_ID_RNG,
	.class_code = 0x0b4000, /* processor, co-processor */
	.get_features = rng_features,
	.start = rng_start,
	.stop = rng_stop,
};

int virtio_rng_create(struct kvm *kvm, enum virtio_trans trans, bool bare, struct virtio_rng **out)
{
	struct virtio_rng *r = calloc(1, sizeof(*r));
	int ret;

	*out = NULL;
	if (!r)
		return -ENOMEM;
	r->kvm = kvm;
	r->elem = malloc(sizeof(*r->elem));
	r->vdev.ops = &virtio_rng_ops;
	r->vdev.priv = r;
	r->vdev.use_ioeventfd = !kvm->cfg.no_ioeventfd;
	if (!r->elem || worker_init(&r->worker, kvm) < 0) {
		virtio_rng_destroy(r);
		return -ENOMEM;
	}
	ret = bare ? virtio_device_init(&r->vdev, kvm, 1, QUEUE_SIZE)
		   : virtio_device_attach(kvm, &r->vdev, trans, 1, QUEUE_SIZE);
	if (ret < 0) {
		virtio_rng_destroy(r);
		return ret;
	}
	*out = r;
	return 0;
}

struct virtio_device *virtio_rng_vdev(struct virtio_rng *r)
{
	return &r->vdev;
}

void virtio_rng_destroy(struct virtio_rng *r)
{
	if (!r)
		return;
	worker_stop(&r->worker);
	virtio_device_exit(&r->vdev);
	free(r->elem);
	worker_destroy(&r->worker);
	free(r);
}

void virtio_rng_stats(struct virtio_rng *r, struct stats_visitor *v)
{
	virtio_queue_stats(&r->vdev, 0, v, "req0", "requests");
}

/* ---- the entropy device as an entry of the VM's device list ---- */

static int rng_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	return virtio_rng_create(kvm, kvm->cfg.virtio_trans, false, (struct virtio_rng **)&d->priv);
}

static void rng_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	virtio_rng_destroy(d->priv);
}

void virtio_rng_quiesce(struct virtio_rng *r)
{
	worker_quiesce(&r->worker);
}

void virtio_rng_resume(struct virtio_rng *r)
{
	worker_resume(&r->worker);
}

static void rng_dev_quiesce(struct kvm_dev *d)
{
	virtio_rng_quiesce(d->priv);
}

static void rng_dev_resume(struct kvm_dev *d)
{
	virtio_rng_resume(d->priv);
}

static void rng_dev_reset(struct kvm_dev *d)
{
	virtio_device_reset(&((struct virtio_rng *)d->priv)->vdev);
}

static void rng_dev_stats(struct kvm_dev *d, struct stats_visitor *v)
{
	virtio_rng_stats(d->priv, v);
}

/* The device has no state of its own: every chain it pops it fills and pushes before it looks
 * at stop or a pause, so the core's records are all of it. */
static int rng_dev_save(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen)
{
	return virtio_snap_save(&((struct virtio_rng *)d->priv)->vdev, b, err, errlen);
}

static int rng_dev_load(struct kvm_dev *d, const void *sec, size_t len, char *err, size_t errlen)
{
	return virtio_snap_load(&((struct virtio_rng *)d->priv)->vdev, sec, len, err, errlen);
}

static int rng_dev_start(struct kvm_dev *d)
{
	return virtio_snap_start(&((struct virtio_rng *)d->priv)->vdev);
}

static const struct kvm_dev_ops rng_dev_ops = {
	.name = "virtio-rng",
	.prio = DEV_PRIO_VIRTIO,
	.init = rng_dev_init,
	.start = rng_dev_start,
	.quiesce = rng_dev_quiesce,
	.resume = rng_dev_resume,
	.reset = rng_dev_reset,
	.stats = rng_dev_stats,
	.stats_name = "rng",
	.save = rng_dev_save,
	.load = rng_dev_load,
	.exit = rng_dev_exit,
};

int virtio_rng_add(struct kvm *kvm)
{
	return kvm_dev_add(kvm, &rng_dev_ops, NULL, 0);
}

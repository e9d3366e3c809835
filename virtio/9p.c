/* virtio-9p (virtio 1.2 §5.11): one request queue served by the 9P2000.L server (9p-server.c) on its own thread. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <linux/virtio_9p.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_ring.h>

#include "lkvm/dev.h"
#include "lkvm/host-files.h"
#include "lkvm/kvm.h"
#include "lkvm/p9.h"
#include "lkvm/stats.h"
#include "lkvm/virtio-9p.h"
#include "lkvm/worker.h"

/* Linux's 9p transport posts one chain per request and waits for a free slot when the ring
 * is full; 128 is its own VIRTQUEUE_NUM, twice that lets a writeback burst queue up. */
#define QUEUE_SIZE 256
/*
 * Work per wake-up before the thread looks at its eventfds again (a pause, a stop): every
 * request is bounded by msize (P9_MSIZE_MAX), so 64 requests or 8 MiB of requests and
 * replies, whichever comes first. Stop and a reset are also looked at between any two
 * requests; the budget is what keeps a driver that reposts as fast as we answer from
 * holding the thread inside one drain.
 */
#define REQS_PER_WAKE 64
#define BYTES_PER_WAKE MiB(8)
struct virtio_9p {
	struct virtio_device vdev;
	struct kvm *kvm;
	struct p9_share share;
	struct p9_server *srv; /* touched by the thread while busy, by stop while it is not */
	struct worker worker;
	struct vq_elem *elem;
	int wake_fd; /* eventfd: DRIVER_OK came (the thread starts serving) */
	/*
	 * The serving handshake between the device's thread and the transport's start/stop
	 * (a vCPU at DRIVER_OK and reset, or teardown). The thread was started once, from the
	 * main thread (a vCPU's filter does not let it create a thread of this kind), and lives
	 * as long as the device: start and stop only turn `serving` on and off. The thread
	 * takes a drain only under lock with serving set, marking itself busy; stop clears
	 * serving (which the drain looks at between requests) and waits under lock for busy to
	 * fall, so once stop returns the thread touches neither the queue nor the server.
	 */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	atomic_bool serving;
	bool busy;
	bool broken; /* the thread's, or stop's while the thread is not busy */
	u8 config[sizeof(struct virtio_9p_config) + VIRTIO_9P_TAG_MAX];
	/* The server's counters as of its last request (the server's own are the thread's). */
	atomic_ullong errors, reads, read_bytes, write_bytes;
	atomic_uint fids, max_fids, msize;
	atomic_uint nodes, cached, open;
	atomic_ullong reopens, stale, cap_hits;
};

/* ---- the request queue ---- */

static void mirror_stats(struct virtio_9p *p)
{
	struct p9_stats st;

	p9_server_stats(p->srv, &st);
	atomic_store_explicit(&p->errors, st.errors, memory_order_relaxed);
	atomic_store_explicit(&p->reads, st.reads, memory_order_relaxed);
	atomic_store_explicit(&p->read_bytes, st.read_bytes, memory_order_relaxed);
	atomic_store_explicit(&p->write_bytes, st.write_bytes, memory_order_relaxed);
	atomic_store_explicit(&p->fids, st.fids, memory_order_relaxed);
	atomic_store_explicit(&p->max_fids, st.max_fids, memory_order_relaxed);
	atomic_store_explicit(&p->msize, st.msize, memory_order_relaxed);
	atomic_store_explicit(&p->nodes, st.fs.nodes, memory_order_relaxed);
	atomic_store_explicit(&p->cached, st.fs.cached, memory_order_relaxed);
	atomic_store_explicit(&p->open, st.fs.open, memory_order_relaxed);
	atomic_store_explicit(&p->reopens, st.fs.reopens, memory_order_relaxed);
	atomic_store_explicit(&p->stale, st.fs.stale, memory_order_relaxed);
	atomic_store_explicit(&p->cap_hits,
			      st.fid_cap_hits + st.fs.cap_hits[HOSTFS_CAP_NODES] +
				      st.fs.cap_hits[HOSTFS_CAP_OPEN],
			      memory_order_relaxed);
}

static bool still_serving(struct virtio_9p *p)
{
	return atomic_load_explicit(&p->serving, memory_order_relaxed) &&
	       !worker_leaving(&p->worker);
}

/* Answer one chain. false: the transport cannot use it (NEEDS_RESET set). */
static bool answer(struct virtio_9p *p, struct vq_elem *e, u64 *moved)
{
	struct virtio_queue *q = &p->vdev.q[0];
	u64 data = atomic_load_explicit(&p->read_bytes, memory_order_relaxed) +
		   atomic_load_explicit(&p->write_bytes, memory_order_relaxed);
	ssize_t len = p9_server_handle(p->srv, e->iov, e->out_num, e->iov + e->out_num, e->in_num);

	if (len < 0) {
		/* Not even an Rlerror fits, or the size field lies about the chain: nothing
		 * to answer with, so the driver must reset (p9.h). */
		atomic_fetch_add_explicit(&q->stats.drops, 1, memory_order_relaxed);
		virtio_set_needs_reset(&p->vdev,
				       "virtio-9p: request chain without a usable 9P message");
		return false;
	}
	mirror_stats(p);
	data = atomic_load_explicit(&p->read_bytes, memory_order_relaxed) +
	       atomic_load_explicit(&p->write_bytes, memory_order_relaxed) - data;
	atomic_fetch_add_explicit(&q->stats.packets, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&q->stats.bytes, data, memory_order_relaxed);
	*moved += e->out_len + (u64)len;
	vq_push(&q->vq, e->head, (u32)len);
	virtio_notify_queue(&p->vdev, 0);
	return true;
}

/*
 * Answer what the driver posted, one request at a time (nothing is in flight when this
 * returns). Wake-up protocol as virtio-rng's: notifications off, drain, re-enable,
 * re-check (vq_enable_notify's full barrier pairs with the driver's after it publishes
 * avail->idx). Returns true when the budget ran out with work left: the caller looks at
 * its eventfds and comes back at once (notifications are still off then).
 */
static bool drain(struct virtio_9p *p)
{
	struct virtio_queue *q = &p->vdev.q[0];
	u64 moved = 0;
	int reqs = 0;

	if (p->broken)
		return false;
	do {
		vq_disable_notify(&q->vq);
		for (;;) {
			int ret;

			if (!still_serving(p))
				return false;
			if (reqs == REQS_PER_WAKE || moved >= BYTES_PER_WAKE)
				return true;
			ret = vq_pop(&q->vq, p->elem);
			if (ret == 0)
				break;
			if (ret < 0) {
				atomic_fetch_add_explicit(&q->stats.drops, 1, memory_order_relaxed);
				virtio_set_needs_reset(&p->vdev, "virtio-9p: malformed chain");
			}
			if (ret < 0 || !answer(p, p->elem, &moved)) {
				p->broken = true;
				return false;
			}
			reqs++;
		}
	} while (vq_enable_notify(&q->vq));
	return false;
}

/* One drain if the device is being served (see the handshake at struct virtio_9p). */
static bool serve(struct virtio_9p *p)
{
	bool more;

	pthread_mutex_lock(&p->lock);
	if (!atomic_load(&p->serving)) {
		pthread_mutex_unlock(&p->lock);
		return false;
	}
	p->busy = true;
	pthread_mutex_unlock(&p->lock);
	more = drain(p);
	pthread_mutex_lock(&p->lock);
	p->busy = false;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	return more;
}

static void p9_thread(void *arg)
{
	struct virtio_9p *p = arg;
	struct virtio_queue *q = &p->vdev.q[0];
	bool more = true; /* a first look: the driver may have been quicker than us */

	for (;;) {
		struct pollfd pf[3] = {
			{ .fd = worker_fd(&p->worker), .events = POLLIN },
			{ .fd = p->wake_fd, .events = POLLIN },
			{ .fd = q->kick_fd, .events = POLLIN },
		};
		u64 v;

		if (poll(pf, 3, more ? 0 : -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[0].revents && worker_park(&p->worker))
			break;
		if (pf[1].revents)
			eventfd_drain(p->wake_fd);
		if (pf[2].revents && read(q->kick_fd, &v, sizeof(v)) == sizeof(v))
			atomic_fetch_add_explicit(&q->stats.kicks, v, memory_order_relaxed);
		more = serve(p);
	}
}

/* ---- the transport's side: DRIVER_OK, reset, config ---- */

/* DRIVER_OK (a vCPU, vdev->lock held): serve the queue from now on. */
static int p9_start(struct virtio_device *vdev)
{
	struct virtio_9p *p = vdev->priv;

	if (!vdev->q[0].vq.ready)
		return 0;
	pthread_mutex_lock(&p->lock);
	p->broken = false;
	atomic_store(&p->serving, true);
	pthread_mutex_unlock(&p->lock);
	if (eventfd_write(p->wake_fd, 1) < 0)
		return -errno;
	return 0;
}

/* Reset or teardown: the thread out of the queue, then every fid of the session closed. */
static void p9_stop(struct virtio_device *vdev)
{
	struct virtio_9p *p = vdev->priv;

	pthread_mutex_lock(&p->lock);
	atomic_store(&p->serving, false);
	while (p->busy)
		pthread_cond_wait(&p->cond, &p->lock);
	if (p->srv) {
		p9_server_reset(p->srv);
		mirror_stats(p);
	}
	pthread_mutex_unlock(&p->lock);
}

static u64 p9_features(struct virtio_device *vdev)
{
	return 1ULL << VIRTIO_9P_MOUNT_TAG | 1ULL << VIRTIO_RING_F_INDIRECT_DESC |
	       1ULL << VIRTIO_RING_F_EVENT_IDX;
}

/* Read-only for the driver: tag_len (le16), then the tag. Written once, before attach. */
static void p9_config_read(struct virtio_device *vdev, u32 off, u8 *data, u32 len)
{
	memcpy(data, ((struct virtio_9p *)vdev->priv)->config + off, len);
}

static const struct virtio_dev_ops virtio_9p_ops = {
	.device_id = VIRTIO_ID_9P,
	.class_code = 0x018000, /* mass storage, other (what kvmtool and QEMU use) */
	.get_features = p9_features,
	.config_size = sizeof(((struct virtio_9p *)0)->config),
	.config_read = p9_config_read,
	.start = p9_start,
	.stop = p9_stop,
};

/* ---- creation ---- */

static int check_share(const struct p9_share *s)
{
	size_t tl = strnlen(s->tag, sizeof(s->tag));

	if (tl == 0 || tl > VIRTIO_9P_TAG_MAX || s->host_dir[0] != '/' ||
	    strnlen(s->host_dir, sizeof(s->host_dir)) == sizeof(s->host_dir) ||
	    (s->guest_dir[0] && s->guest_dir[0] != '/') ||
	    strnlen(s->guest_dir, sizeof(s->guest_dir)) == sizeof(s->guest_dir))
		return -EINVAL;
	return 0;
}

/* A cap reached (the server's or its table's, once each): one line on lkvm's stderr. */
static void share_warn(void *opaque, const char *msg)
{
	pr_warn("%s", msg);
}

int virtio_9p_create(struct kvm *kvm, const struct p9_share *share, bool bare, u32 max_fids,
		     struct virtio_9p **out, char *err, size_t errlen)
{
	struct p9_server_opts o = {
		.readonly = share->ro,
		.max_fids = max_fids ? max_fids : share->fids,
		.fs = { .label = share->host_dir, .warn = share_warn },
	};
	struct virtio_9p *p;
	size_t tl;
	int ret;

	*out = NULL;
	if (check_share(share) < 0) {
		errfmt(err, errlen, "share '%.200s': bad tag or directory", share->host_dir);
		return -EINVAL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->kvm = kvm;
	p->share = *share;
	p->wake_fd = -1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	tl = strlen(share->tag);
	p->config[0] = (u8)tl;
	p->config[1] = (u8)(tl >> 8);
	memcpy(p->config + sizeof(struct virtio_9p_config), share->tag, tl);
	p->vdev.ops = &virtio_9p_ops;
	p->vdev.priv = p;
	p->vdev.use_ioeventfd = !kvm->cfg.no_ioeventfd;
	ret = p9_server_open(&p->srv, share->host_dir, &o, err, errlen);
	if (ret < 0)
		goto fail;
	mirror_stats(p);
	p->elem = malloc(sizeof(*p->elem));
	p->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ret = !p->elem || p->wake_fd < 0 ? -ENOMEM : worker_init(&p->worker, kvm);
	if (ret < 0) {
		errfmt(err, errlen, "%s", strerror(-ret));
		goto fail;
	}
	ret = bare ? virtio_device_init(&p->vdev, kvm, 1, QUEUE_SIZE)
		   : virtio_device_attach(kvm, &p->vdev,
					  share->trans_set ? share->trans : kvm->cfg.virtio_trans,
					  1, QUEUE_SIZE);
	if (ret < 0) {
		errfmt(err, errlen, "%s", strerror(-ret));
		goto fail;
	}
	*out = p;
	return 0;
fail:
	virtio_9p_destroy(p);
	return ret;
}

int virtio_9p_run(struct virtio_9p *p)
{
	return worker_start(&p->worker, "lkvm-9p", SB_P9, p9_thread, p);
}

struct virtio_device *virtio_9p_vdev(struct virtio_9p *p)
{
	return &p->vdev;
}

void virtio_9p_quiesce(struct virtio_9p *p)
{
	worker_quiesce(&p->worker);
}

void virtio_9p_resume(struct virtio_9p *p)
{
	worker_resume(&p->worker);
}

void virtio_9p_destroy(struct virtio_9p *p)
{
	if (!p)
		return;
	worker_stop(&p->worker);
	virtio_device_exit(&p->vdev); /* stops the device: its fids closed */
	worker_destroy(&p->worker);
	p9_server_close(p->srv);
	if (p->wake_fd >= 0)
		close(p->wake_fd);
	free(p->elem);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

void virtio_9p_stats(struct virtio_9p *p, struct stats_visitor *v)
{
	virtio_queue_stats(&p->vdev, 0, v, "req0", "requests");
	v->counter(v, "errors", atomic_load_explicit(&p->errors, memory_order_relaxed));
	v->counter(v, "reads", atomic_load_explicit(&p->reads, memory_order_relaxed));
	v->counter(v, "read_bytes", atomic_load_explicit(&p->read_bytes, memory_order_relaxed));
	v->counter(v, "write_bytes", atomic_load_explicit(&p->write_bytes, memory_order_relaxed));
	v->counter(v, "malformed",
		   atomic_load_explicit(&p->vdev.q[0].stats.drops, memory_order_relaxed));
	v->group(v, "fids");
	v->counter(v, "in_use", atomic_load_explicit(&p->fids, memory_order_relaxed));
	v->counter(v, "limit", atomic_load_explicit(&p->max_fids, memory_order_relaxed));
	v->counter(v, "msize", atomic_load_explicit(&p->msize, memory_order_relaxed));
	v->group(v, "files");
	v->counter(v, "nodes", atomic_load_explicit(&p->nodes, memory_order_relaxed));
	v->counter(v, "cached", atomic_load_explicit(&p->cached, memory_order_relaxed));
	v->counter(v, "open", atomic_load_explicit(&p->open, memory_order_relaxed));
	v->counter(v, "reopens", atomic_load_explicit(&p->reopens, memory_order_relaxed));
	v->counter(v, "stale", atomic_load_explicit(&p->stale, memory_order_relaxed));
	v->counter(v, "cap_hits", atomic_load_explicit(&p->cap_hits, memory_order_relaxed));
}

/* ---- snapshot ---- */

/* The server's records (9p-snap.c) after the core's. */
#define P9_TAG_SERVER VIRTIO_SNAP_TAG_DEV

int virtio_9p_save(struct virtio_9p *p, struct snap_rec_buf *b, char *err, size_t errlen)
{
	/* Quiesced: the thread is parked between two drains, no request half answered. */
	int ret = p9_server_save(p->srv, P9_TAG_SERVER, b, err, errlen);

	return ret ? ret : virtio_snap_save(&p->vdev, b, err, errlen);
}

int virtio_9p_load(struct virtio_9p *p, const void *sec, size_t len, char *err, size_t errlen)
{
	int ret = virtio_snap_load(&p->vdev, sec, len, err, errlen);

	if (ret < 0)
		return ret;
	ret = p9_server_load(p->srv, P9_TAG_SERVER, sec, len, err, errlen);
	if (ret < 0) {
		/* Back to power-on, as virtio_snap_load leaves a device it refuses. */
		virtio_device_reset(&p->vdev);
		p->vdev.snap_start = false;
		return ret;
	}
	mirror_stats(p);
	return 0;
}

/* ---- the share as an entry of the VM's device list ---- */

static const struct kvm_dev_ops p9_dev_ops;

static int p9_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	int n = 0;

	for (struct kvm_dev *o = kvm->devs; o; o = o->next)
		n += o->ops->host_files != NULL;
	/* Raised now, before this share's and the later devices' descriptors are opened; the
	 * caps themselves are settled once all of them are (host_files_fit). */
	host_files_raise_nofile((u32)n);
	return virtio_9p_create(kvm, d->arg, false, 0, (struct virtio_9p **)&d->priv, err, errlen);
}

/* From the main thread, after the capabilities were dropped and before the vCPUs run. A
 * restored device serves its queue from here on (virtio_snap_start: once the thread runs). */
static int p9_dev_start(struct kvm_dev *d)
{
	int ret = virtio_9p_run(d->priv);

	return ret ? ret : virtio_snap_start(&((struct virtio_9p *)d->priv)->vdev);
}

static void p9_dev_quiesce(struct kvm_dev *d)
{
	virtio_9p_quiesce(d->priv);
}

static void p9_dev_resume(struct kvm_dev *d)
{
	virtio_9p_resume(d->priv);
}

static void p9_dev_reset(struct kvm_dev *d)
{
	virtio_device_reset(&((struct virtio_9p *)d->priv)->vdev);
}

static void p9_dev_stats(struct kvm_dev *d, struct stats_visitor *v)
{
	virtio_9p_stats(d->priv, v);
}

static void p9_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	virtio_9p_destroy(d->priv);
}

static int p9_dev_save(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen)
{
	return virtio_9p_save(d->priv, b, err, errlen);
}

static int p9_dev_load(struct kvm_dev *d, const void *sec, size_t len, char *err, size_t errlen)
{
	return virtio_9p_load(d->priv, sec, len, err, errlen);
}

static struct hostfs *p9_dev_host_files(struct kvm_dev *d)
{
	return p9_server_fs(((struct virtio_9p *)d->priv)->srv);
}

/* In a snapshot: the virtio core's records and the server's (each fid by its path beneath the
 * share, reopened at restore from the same --share, or the host's / again for run -- CMD). */
static const struct kvm_dev_ops p9_dev_ops = {
	.name = "virtio-9p",
	.prio = DEV_PRIO_VIRTIO,
	.init = p9_dev_init,
	.start = p9_dev_start,
	.quiesce = p9_dev_quiesce,
	.resume = p9_dev_resume,
	.reset = p9_dev_reset,
	.stats = p9_dev_stats,
	.stats_name = "9p",
	.exit = p9_dev_exit,
	.save = p9_dev_save,
	.load = p9_dev_load,
	.host_files = p9_dev_host_files,
};

int virtio_9p_add(struct kvm *kvm, const struct p9_share *share)
{
	if (check_share(share) < 0)
		return -EINVAL;
	return kvm_dev_add(kvm, &p9_dev_ops, share, sizeof(*share));
}

int virtio_9p_add_shares(struct kvm *kvm, const struct p9_shares *s)
{
	int ret = 0;

	for (int i = 0; s && i < s->nr && !ret; i++)
		if (!s->share[i].no_9p)
			ret = virtio_9p_add(kvm, &s->share[i]);
	return ret;
}

/* virtio-fs (virtio 1.2 §5.11, device 26): the hiprio queue and one request queue served by the FUSE server (fuse-server.c) on one thread. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <linux/virtio_fs.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_ring.h>

#include "lkvm/dev.h"
#include "lkvm/host-files.h"
#include "lkvm/kvm.h"
#include "lkvm/stats.h"
#include "lkvm/virtio-9p.h"
#include "lkvm/virtio-fs.h"
#include "lkvm/worker.h"

/* Linux's virtio-fs posts one chain per request and waits for room when the ring is full;
 * 9p's 256 lets a writeback burst queue up the same way. */
#define QUEUE_SIZE 256
#define HIPRIO 0
#define REQQ 1
/*
 * Work per wake-up before the thread looks at its eventfds again (a pause, a stop), as 9p's:
 * each request is bounded by FUSE_SRV_MAX_WRITE, so 64 requests or 8 MiB of requests and
 * replies, whichever comes first. Stop and a reset are also looked at between any two.
 */
#define REQS_PER_WAKE 64
#define BYTES_PER_WAKE MiB(8)

struct virtio_fs {
	struct virtio_device vdev;
	struct kvm *kvm;
	char host_dir[PATH_MAX];
	enum virtio_trans trans;
	struct fuse_server *srv; /* touched by the thread while busy, by stop while it is not */
	struct worker worker;
	struct vq_elem *elem;
	int wake_fd; /* eventfd: DRIVER_OK came (the thread starts serving) */
	/*
	 * The serving handshake between the thread and the transport's start/stop, as
	 * virtio-9p's (virtio/9p.c): the thread takes a drain only under lock with serving set,
	 * marking itself busy; stop clears serving (which the drain looks at between requests)
	 * and waits under lock for busy to fall, so once stop returns the thread touches
	 * neither the queues nor the server.
	 */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	atomic_bool serving;
	bool busy;
	bool broken; /* the thread's, or stop's while the thread is not busy */
	struct virtio_fs_config config;
	/* The server's counters as of its last request (the server's own are the thread's). */
	atomic_ullong errors, reads, read_bytes, write_bytes, reopens, stale, cap_hits;
	atomic_uint handles, max_handles, nodes, max_nodes, cached, open;
};

/* ---- the queues ---- */

static void mirror_stats(struct virtio_fs *f)
{
	struct fuse_srv_stats st;
	u64 caps = 0;

	fuse_server_stats(f->srv, &st);
	for (int i = 0; i < HOSTFS_CAP_NR; i++)
		caps += st.fs.cap_hits[i];
	atomic_store_explicit(&f->errors, st.errors, memory_order_relaxed);
	atomic_store_explicit(&f->reads, st.reads, memory_order_relaxed);
	atomic_store_explicit(&f->read_bytes, st.read_bytes, memory_order_relaxed);
	atomic_store_explicit(&f->write_bytes, st.write_bytes, memory_order_relaxed);
	atomic_store_explicit(&f->reopens, st.fs.reopens, memory_order_relaxed);
	atomic_store_explicit(&f->stale, st.fs.stale, memory_order_relaxed);
	atomic_store_explicit(&f->cap_hits, caps, memory_order_relaxed);
	atomic_store_explicit(&f->handles, st.handles, memory_order_relaxed);
	atomic_store_explicit(&f->max_handles, st.max_handles, memory_order_relaxed);
	atomic_store_explicit(&f->nodes, st.fs.nodes, memory_order_relaxed);
	atomic_store_explicit(&f->max_nodes, st.fs.max_nodes, memory_order_relaxed);
	atomic_store_explicit(&f->cached, st.fs.cached, memory_order_relaxed);
	atomic_store_explicit(&f->open, st.fs.open, memory_order_relaxed);
}

static bool still_serving(struct virtio_fs *f)
{
	return atomic_load_explicit(&f->serving, memory_order_relaxed) &&
	       !worker_leaving(&f->worker);
}

static u64 data_bytes(struct virtio_fs *f)
{
	return atomic_load_explicit(&f->read_bytes, memory_order_relaxed) +
	       atomic_load_explicit(&f->write_bytes, memory_order_relaxed);
}

/* Answer one chain of queue qi: the readable part is the request, the reply goes into the
 * writable part (a FORGET's chain is given back with 0 bytes). false: the server could not
 * read a request or place a reply (fuse-server.h), NEEDS_RESET set. */
static bool answer(struct virtio_fs *f, int qi, struct vq_elem *e, u64 *moved)
{
	struct virtio_queue *q = &f->vdev.q[qi];
	u64 data = data_bytes(f);
	ssize_t len =
		fuse_server_handle(f->srv, e->iov, e->out_num, e->iov + e->out_num, e->in_num);

	if (len < 0) {
		atomic_fetch_add_explicit(&q->stats.drops, 1, memory_order_relaxed);
		virtio_set_needs_reset(&f->vdev,
				       "virtio-fs: request chain without a usable FUSE message");
		return false;
	}
	mirror_stats(f);
	atomic_fetch_add_explicit(&q->stats.packets, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&q->stats.bytes, data_bytes(f) - data, memory_order_relaxed);
	*moved += e->out_len + (u64)len;
	vq_push(&q->vq, e->head, (u32)len);
	virtio_notify_queue(&f->vdev, qi);
	return true;
}

/*
 * Answer what the driver posted on queue qi, one request at a time (nothing is in flight when
 * this returns). Wake-up protocol as virtio-9p's: notifications off, drain, re-enable,
 * re-check (vq_enable_notify's full barrier pairs with the driver's after it publishes
 * avail->idx). *reqs and *moved count against the wake-up's budget across both queues;
 * true when it ran out with work left (notifications are still off then).
 */
static bool drain_queue(struct virtio_fs *f, int qi, int *reqs, u64 *moved)
{
	struct virtio_queue *q = &f->vdev.q[qi];

	if (!q->vq.ready)
		return false;
	do {
		vq_disable_notify(&q->vq);
		for (;;) {
			int ret;

			if (!still_serving(f) || f->broken)
				return false;
			if (*reqs == REQS_PER_WAKE || *moved >= BYTES_PER_WAKE)
				return true;
			ret = vq_pop(&q->vq, f->elem);
			if (ret == 0)
				break;
			if (ret < 0) {
				atomic_fetch_add_explicit(&q->stats.drops, 1, memory_order_relaxed);
				virtio_set_needs_reset(&f->vdev, "virtio-fs: malformed chain");
			}
			if (ret < 0 || !answer(f, qi, f->elem, moved)) {
				f->broken = true;
				return false;
			}
			(*reqs)++;
		}
	} while (vq_enable_notify(&q->vq));
	return false;
}

/* hiprio first: a FORGET frees what later requests might otherwise find at a cap. */
static bool drain(struct virtio_fs *f)
{
	int reqs = 0;
	u64 moved = 0;
	bool more = drain_queue(f, HIPRIO, &reqs, &moved);

	return drain_queue(f, REQQ, &reqs, &moved) || more;
}

/* One drain if the device is being served (see the handshake at struct virtio_fs). */
static bool serve(struct virtio_fs *f)
{
	bool more;

	pthread_mutex_lock(&f->lock);
	if (!atomic_load(&f->serving)) {
		pthread_mutex_unlock(&f->lock);
		return false;
	}
	f->busy = true;
	pthread_mutex_unlock(&f->lock);
	more = drain(f);
	pthread_mutex_lock(&f->lock);
	f->busy = false;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	return more;
}

static void count_kicks(struct virtio_queue *q)
{
	u64 v;

	if (read(q->kick_fd, &v, sizeof(v)) == sizeof(v))
		atomic_fetch_add_explicit(&q->stats.kicks, v, memory_order_relaxed);
}

static void fs_thread(void *arg)
{
	struct virtio_fs *f = arg;
	bool more = true; /* a first look: the driver may have been quicker than us */

	for (;;) {
		struct pollfd pf[4] = {
			{ .fd = worker_fd(&f->worker), .events = POLLIN },
			{ .fd = f->wake_fd, .events = POLLIN },
			{ .fd = f->vdev.q[HIPRIO].kick_fd, .events = POLLIN },
			{ .fd = f->vdev.q[REQQ].kick_fd, .events = POLLIN },
		};

		if (poll(pf, 4, more ? 0 : -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[0].revents && worker_park(&f->worker))
			break;
		if (pf[1].revents)
			eventfd_drain(f->wake_fd);
		for (int i = 0; i < VIRTIO_FS_QUEUES; i++)
			if (pf[2 + i].revents)
				count_kicks(&f->vdev.q[i]);
		more = serve(f);
	}
}

/* ---- the transport's side: DRIVER_OK, reset, config ---- */

/* DRIVER_OK (a vCPU, vdev->lock held): serve the queues from now on. */
static int fs_start(struct virtio_device *vdev)
{
	struct virtio_fs *f = vdev->priv;

	if (!vdev->q[REQQ].vq.ready)
		return 0;
	pthread_mutex_lock(&f->lock);
	f->broken = false;
	atomic_store(&f->serving, true);
	pthread_mutex_unlock(&f->lock);
	if (eventfd_write(f->wake_fd, 1) < 0)
		return -errno;
	return 0;
}

/* Reset or teardown: the thread out of the queues, then the session forgotten. */
static void fs_stop(struct virtio_device *vdev)
{
	struct virtio_fs *f = vdev->priv;

	pthread_mutex_lock(&f->lock);
	atomic_store(&f->serving, false);
	while (f->busy)
		pthread_cond_wait(&f->cond, &f->lock);
	if (f->srv) {
		fuse_server_reset(f->srv);
		mirror_stats(f);
	}
	pthread_mutex_unlock(&f->lock);
}

static u64 fs_features(struct virtio_device *vdev)
{
	return 1ULL << VIRTIO_RING_F_INDIRECT_DESC | 1ULL << VIRTIO_RING_F_EVENT_IDX;
}

/* Read-only for the driver: tag[36], num_request_queues (le32). Written once, before attach. */
static void fs_config_read(struct virtio_device *vdev, u32 off, u8 *data, u32 len)
{
	memcpy(data, (u8 *)&((struct virtio_fs *)vdev->priv)->config + off, len);
}

static const struct virtio_dev_ops virtio_fs_ops = {
	.device_id = VIRTIO_ID_FS,
	.class_code = 0x018000, /* mass storage, other (what QEMU's vhost-user-fs-pci uses) */
	.get_features = fs_features,
	.config_size = sizeof(struct virtio_fs_config),
	.config_read = fs_config_read,
	.start = fs_start,
	.stop = fs_stop,
};

/* ---- creation ---- */

static int check_share(const struct p9_share *s, const struct virtio_fs_share *fs)
{
	size_t tl = strnlen(fs->tag, sizeof(fs->tag));

	if (tl == 0 || tl > VIRTIO_FS_TAG_MAX || s->host_dir[0] != '/' ||
	    strnlen(s->host_dir, sizeof(s->host_dir)) == sizeof(s->host_dir) ||
	    (unsigned)fs->cache > FUSE_CACHE_NONE)
		return -EINVAL;
	return 0;
}

/* A cap reached, from the thread: one line, once per cap (hostfs.h). */
static void warn_cap(void *opaque, const char *msg)
{
	pr_warn("virtio-fs: %s", msg);
}

static int open_server(struct virtio_fs *f, const struct p9_share *share,
		       const struct virtio_fs_share *fs, char *err, size_t errlen)
{
	struct fuse_server_opts o = {
		.readonly = share->ro,
		.cache = fs->cache,
		.fs = { .readonly = share->ro, .label = f->host_dir, .warn = warn_cap },
	};
	int ret = fuse_server_open(&f->srv, share->host_dir, &o, err, errlen);

	if (!ret)
		mirror_stats(f);
	return ret;
}

static struct virtio_fs *fs_new(struct kvm *kvm, const struct p9_share *share,
				const struct virtio_fs_share *fs)
{
	struct virtio_fs *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->kvm = kvm;
	strcpy(f->host_dir, share->host_dir);
	f->trans = share->trans_set ? share->trans : kvm->cfg.virtio_trans;
	f->wake_fd = -1;
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	memcpy(f->config.tag, fs->tag, strnlen(fs->tag, VIRTIO_FS_TAG_MAX));
	f->config.num_request_queues = htole32(VIRTIO_FS_REQUEST_QUEUES);
	f->vdev.ops = &virtio_fs_ops;
	f->vdev.priv = f;
	f->vdev.use_ioeventfd = !kvm->cfg.no_ioeventfd;
	return f;
}

int virtio_fs_create(struct kvm *kvm, const struct p9_share *share,
		     const struct virtio_fs_share *fs, bool bare, struct virtio_fs **out, char *err,
		     size_t errlen)
{
	struct virtio_fs *f;
	int ret;

	*out = NULL;
	if (check_share(share, fs) < 0) {
		errfmt(err, errlen, "share '%.200s': bad tag or directory", share->host_dir);
		return -EINVAL;
	}
	f = fs_new(kvm, share, fs);
	if (!f)
		return -ENOMEM;
	ret = open_server(f, share, fs, err, errlen);
	if (ret < 0)
		goto fail;
	f->elem = malloc(sizeof(*f->elem));
	f->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ret = !f->elem || f->wake_fd < 0 ? -ENOMEM : worker_init(&f->worker, kvm);
	if (!ret)
		ret = bare ? virtio_device_init(&f->vdev, kvm, VIRTIO_FS_QUEUES, QUEUE_SIZE)
			   : virtio_device_attach(kvm, &f->vdev, f->trans, VIRTIO_FS_QUEUES,
						  QUEUE_SIZE);
	if (ret < 0) {
		errfmt(err, errlen, "%s", strerror(-ret));
		goto fail;
	}
	*out = f;
	return 0;
fail:
	virtio_fs_destroy(f);
	return ret;
}

int virtio_fs_run(struct virtio_fs *f)
{
	return worker_start(&f->worker, "lkvm-fs", SB_FS, fs_thread, f);
}

struct virtio_device *virtio_fs_vdev(struct virtio_fs *f)
{
	return &f->vdev;
}

struct hostfs *virtio_fs_hostfs(struct virtio_fs *f)
{
	return fuse_server_fs(f->srv);
}

void virtio_fs_quiesce(struct virtio_fs *f)
{
	worker_quiesce(&f->worker);
}

void virtio_fs_resume(struct virtio_fs *f)
{
	worker_resume(&f->worker);
}

void virtio_fs_destroy(struct virtio_fs *f)
{
	if (!f)
		return;
	worker_stop(&f->worker);
	virtio_device_exit(&f->vdev); /* stops the device: the session forgotten */
	worker_destroy(&f->worker);
	if (f->srv)
		fuse_server_close(f->srv);
	if (f->wake_fd >= 0)
		close(f->wake_fd);
	free(f->elem);
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

static void load_counter(struct stats_visitor *v, const char *name, atomic_ullong *c)
{
	v->counter(v, name, atomic_load_explicit(c, memory_order_relaxed));
}

static void load_level(struct stats_visitor *v, const char *name, atomic_uint *c)
{
	v->counter(v, name, atomic_load_explicit(c, memory_order_relaxed));
}

void virtio_fs_stats(struct virtio_fs *f, struct stats_visitor *v)
{
	virtio_queue_stats(&f->vdev, HIPRIO, v, "hiprio", "requests");
	virtio_queue_stats(&f->vdev, REQQ, v, "req0", "requests");
	load_counter(v, "errors", &f->errors);
	load_counter(v, "reads", &f->reads);
	load_counter(v, "read_bytes", &f->read_bytes);
	load_counter(v, "write_bytes", &f->write_bytes);
	v->counter(v, "malformed",
		   atomic_load_explicit(&f->vdev.q[HIPRIO].stats.drops, memory_order_relaxed) +
			   atomic_load_explicit(&f->vdev.q[REQQ].stats.drops,
						memory_order_relaxed));
	v->group(v, "files");
	load_level(v, "handles", &f->handles);
	load_level(v, "handle_limit", &f->max_handles);
	load_level(v, "nodes", &f->nodes);
	load_level(v, "node_limit", &f->max_nodes);
	load_level(v, "cached", &f->cached);
	load_level(v, "open", &f->open);
	load_counter(v, "reopens", &f->reopens);
	load_counter(v, "stale", &f->stale);
	load_counter(v, "cap_hits", &f->cap_hits);
}

/* ---- snapshot ---- */

/* The server's records (FUSE_SNAP_TAGS of them) after the core's. */
#define FS_TAG_SERVER VIRTIO_SNAP_TAG_DEV

int virtio_fs_save(struct virtio_fs *f, struct snap_rec_buf *b, char *err, size_t errlen)
{
	/* Quiesced: the thread is parked between two drains, no request half answered. */
	int ret = fuse_server_save(f->srv, FS_TAG_SERVER, b, err, errlen);

	return ret ? ret : virtio_snap_save(&f->vdev, b, err, errlen);
}

int virtio_fs_load(struct virtio_fs *f, const void *sec, size_t len, char *err, size_t errlen)
{
	int ret = virtio_snap_load(&f->vdev, sec, len, err, errlen);

	if (ret < 0)
		return ret;
	ret = fuse_server_load(f->srv, FS_TAG_SERVER, sec, len, err, errlen);
	if (ret < 0) {
		/* Back to power-on, as virtio_snap_load leaves a device it refuses. */
		virtio_device_reset(&f->vdev);
		f->vdev.snap_start = false;
		return ret;
	}
	mirror_stats(f);
	return 0;
}

/* ---- the share as an entry of the VM's device list ---- */

/* What the list copies: the share and how virtio-fs serves it. */
struct fs_dev_arg {
	struct p9_share share;
	struct virtio_fs_share fs;
};

static int fs_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	struct fs_dev_arg *a = d->arg;
	u32 n = 0;

	for (struct kvm_dev *o = kvm->devs; o; o = o->next)
		n += o->ops->host_files != NULL;
	/* Raised now, before this share's and the later devices' descriptors are opened; the
	 * caps themselves are settled once all of them are (host_files_fit), as 9p's. */
	host_files_raise_nofile(n);
	return virtio_fs_create(kvm, &a->share, &a->fs, false, (struct virtio_fs **)&d->priv, err,
				errlen);
}

/* From the main thread, after the capabilities were dropped and before the vCPUs run. A
 * restored device serves its queues from here on (virtio_snap_start: once the thread runs). */
static int fs_dev_start(struct kvm_dev *d)
{
	int ret = virtio_fs_run(d->priv);

	return ret ? ret : virtio_snap_start(virtio_fs_vdev(d->priv));
}

static void fs_dev_quiesce(struct kvm_dev *d)
{
	virtio_fs_quiesce(d->priv);
}

static void fs_dev_resume(struct kvm_dev *d)
{
	virtio_fs_resume(d->priv);
}

static void fs_dev_reset(struct kvm_dev *d)
{
	virtio_device_reset(virtio_fs_vdev(d->priv));
}

static void fs_dev_stats(struct kvm_dev *d, struct stats_visitor *v)
{
	virtio_fs_stats(d->priv, v);
}

/* Its share's node table, for the descriptor budget (host_files_fit). */
static struct hostfs *fs_dev_host_files(struct kvm_dev *d)
{
	return virtio_fs_hostfs(d->priv);
}

static void fs_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	virtio_fs_destroy(d->priv);
}

static int fs_dev_save(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen)
{
	return virtio_fs_save(d->priv, b, err, errlen);
}

static int fs_dev_load(struct kvm_dev *d, const void *sec, size_t len, char *err, size_t errlen)
{
	return virtio_fs_load(d->priv, sec, len, err, errlen);
}

/* In a snapshot: the virtio core's records and the server's (each node by its path beneath
 * the share, found again at restore from the same --share, or the host's / for run -- CMD). */
static const struct kvm_dev_ops fs_dev_ops = {
	.name = "virtio-fs",
	.prio = DEV_PRIO_VIRTIO,
	.init = fs_dev_init,
	.start = fs_dev_start,
	.quiesce = fs_dev_quiesce,
	.resume = fs_dev_resume,
	.reset = fs_dev_reset,
	.stats = fs_dev_stats,
	.stats_name = "fs",
	.host_files = fs_dev_host_files,
	.exit = fs_dev_exit,
	.save = fs_dev_save,
	.load = fs_dev_load,
};

int virtio_fs_add(struct kvm *kvm, const struct p9_share *share, const struct virtio_fs_share *fs)
{
	struct fs_dev_arg a = { .share = *share, .fs = *fs };

	if (check_share(share, fs) < 0)
		return -EINVAL;
	return kvm_dev_add(kvm, &fs_dev_ops, &a, sizeof(a));
}

int virtio_fs_add_shares(struct kvm *kvm, const struct p9_shares *s)
{
	int ret = 0;

	for (int i = 0; s && i < s->nr && !ret; i++) {
		const struct p9_share *sh = &s->share[i];
		struct virtio_fs_share fs = { .cache = sh->cache };

		if (!sh->vfs)
			continue;
		snprintf(fs.tag, sizeof(fs.tag), VIRTIO_FS_SHARE_TAG "%d", i);
		ret = virtio_fs_add(kvm, sh, &fs);
	}
	return ret;
}

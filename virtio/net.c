/* The virtio-net device (virtio 1.2 §5.1): features, config space, lifecycle and the thread table, counters, the device-list entry. */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_net.h>
#include <linux/virtio_ring.h>

#include "lkvm/dev.h"
#include "lkvm/kvm.h"
#include "lkvm/net-vhost.h"
#include "lkvm/stats.h"
#include "lkvm/worker.h"
#include "lkvm/virtio-net.h"
#include "net-priv.h"

_Static_assert(sizeof(struct virtio_net_hdr_v1) == HDR_LEN, "virtio_net_hdr_v1 is 12 bytes");
_Static_assert(2 * NET_MAX_QUEUE_PAIRS + 1 <= VIRTIO_MAX_QUEUES, "queue table too small");
_Static_assert(RX_MAX_IOV >= VQ_MAX_SG, "one chain's writable part always fits");

/* ---- device ops ---- */

static struct virtio_net *to_net(struct virtio_device *vdev)
{
	return vdev->priv;
}

static u64 net_offered(const struct virtio_net *n)
{
	u64 f = F(VIRTIO_NET_F_MAC) | F(VIRTIO_NET_F_STATUS) | F(VIRTIO_NET_F_MRG_RXBUF) |
		F(VIRTIO_NET_F_CSUM) | F(VIRTIO_NET_F_GUEST_CSUM) | F(VIRTIO_NET_F_HOST_TSO4) |
		F(VIRTIO_NET_F_HOST_TSO6) | F(VIRTIO_NET_F_GUEST_TSO4) |
		F(VIRTIO_NET_F_GUEST_TSO6) | F(VIRTIO_NET_F_CTRL_VQ) | F(VIRTIO_NET_F_CTRL_RX) |
		F(VIRTIO_RING_F_EVENT_IDX) | F(VIRTIO_RING_F_INDIRECT_DESC);

	if (n->pairs > 1)
		f |= F(VIRTIO_NET_F_MQ);
	/* What serves the rings must be able to do what is offered. */
	if (n->vhost)
		f &= ~net_vhost_unsupported(n->vhost);
	/* passt takes and gives whole frames with their checksums: nothing to offload. */
	if (n->be[0]->plain_frames)
		f &= ~(F(VIRTIO_NET_F_CSUM) | F(VIRTIO_NET_F_GUEST_CSUM) |
		       F(VIRTIO_NET_F_HOST_TSO4) | F(VIRTIO_NET_F_HOST_TSO6) |
		       F(VIRTIO_NET_F_GUEST_TSO4) | F(VIRTIO_NET_F_GUEST_TSO6));
	return f;
}

static u64 net_get_features(struct virtio_device *vdev)
{
	return net_offered(to_net(vdev));
}

/* Feature dependencies of §5.1.3.1, and nothing device-specific we did not offer. */
static bool net_features_ok(struct virtio_device *vdev, u64 f)
{
	u64 transport = 0;

	for (unsigned b = VIRTIO_TRANSPORT_F_START; b < VIRTIO_TRANSPORT_F_END; b++)
		transport |= F(b);
	if (f & ~(net_offered(to_net(vdev)) | transport))
		return false;
	/* The 12-byte header and little-endian config assume a modern driver. */
	if (!(f & F(VIRTIO_F_VERSION_1)))
		return false;
	if ((f & (F(VIRTIO_NET_F_GUEST_TSO4) | F(VIRTIO_NET_F_GUEST_TSO6))) &&
	    !(f & F(VIRTIO_NET_F_GUEST_CSUM)))
		return false;
	if ((f & (F(VIRTIO_NET_F_HOST_TSO4) | F(VIRTIO_NET_F_HOST_TSO6))) &&
	    !(f & F(VIRTIO_NET_F_CSUM)))
		return false;
	if ((f & (F(VIRTIO_NET_F_CTRL_RX) | F(VIRTIO_NET_F_MQ))) && !(f & F(VIRTIO_NET_F_CTRL_VQ)))
		return false;
	return true;
}

static void net_config_read(struct virtio_device *vdev, u32 off, u8 *data, u32 len)
{
	struct virtio_net *n = to_net(vdev);
	u32 size = sizeof(n->cfg);

	memset(data, 0, len);
	if (off >= size)
		return;
	pthread_mutex_lock(&n->cfg_lock);
	memcpy(data, (const u8 *)&n->cfg + off, MIN(len, size - off));
	pthread_mutex_unlock(&n->cfg_lock);
}

static void net_config_write(struct virtio_device *vdev, u32 off, const u8 *data, u32 len)
{
	/* Every field is read-only for a VERSION_1 driver (the MAC changes through the
	 * control queue); ignore. */
}

static void net_stop(struct virtio_device *vdev);

/* Zeroed memory on cache-line boundaries (union net_thread is line-aligned), for free(). */
static void *zalloc_lines(size_t size)
{
	void *p = NULL;

	if (posix_memalign(&p, 64, size))
		return NULL;
	return memset(p, 0, size);
}

/* Each kind of queue thread: its path's entry points, its name, its seccomp kind. The
 * threads are named here only. */
static const struct net_path {
	worker_fn thread;
	int (*alloc)(struct net_worker *w); /* NULL: nothing beyond w->elem */
	void (*free)(struct net_worker *w);
	void (*serve)(struct net_worker *w); /* virtio_net_serve_once */
	const char *qname; /* the queue's name (data queues: the pair's index after it) */
	const char *tname; /* "lkvm-net-" and this (NULL: the queue's name) */
	enum sandbox_kind sb;
} net_paths[] = {
	[W_RX] = { net_rx_thread, net_rx_alloc, net_rx_free, net_rx_serve, "rx", NULL, SB_NET_RX },
	[W_TX] = { net_tx_thread, net_tx_alloc, net_tx_free, net_tx_serve, "tx", NULL, SB_NET_TX },
	[W_CTL] = { net_ctl_thread, NULL, NULL, net_ctl_serve, "ctrl", "ctl", SB_NET_CTL },
};
_Static_assert(ARRAY_SIZE(net_paths) == W_KINDS, "a path per worker kind");

static void worker_free(struct net_worker *w)
{
	if (net_paths[w->kind].free)
		net_paths[w->kind].free(w);
	FREE_AND_NULL(w->elem);
}

/* The worker's buffers: every kind pops chains; its path adds its own. */
static int worker_alloc(struct net_worker *w)
{
	const struct net_path *p = &net_paths[w->kind];

	w->elem = malloc(sizeof(*w->elem));
	if (!w->elem || (p->alloc && p->alloc(w) < 0)) {
		worker_free(w);
		return -ENOMEM;
	}
	return 0;
}

/* A worker for queue qi of pair `pair` in t (zeroed): its name and buffers. */
static int worker_make(struct virtio_net *n, union net_thread *t, enum worker_kind kind, int qi,
		       int pair)
{
	struct net_worker *w = &t->w;

	w->n = n;
	w->kind = kind;
	w->qi = qi;
	w->pair = pair;
	w->trace = pair == 0 && kind != W_CTL ? n->trace : NULL; /* one echo in flight */
	snprintf(w->qname, sizeof(w->qname), kind == W_CTL ? "%s" : "%s%d", net_paths[kind].qname,
		 pair);
	return worker_alloc(w);
}

static int net_worker_start(struct virtio_net *n, enum worker_kind kind, int qi, int pair)
{
	union net_thread *t;
	char tname[40];
	int ret;

	if (!n->vdev.q[qi].vq.ready)
		return 0; /* the driver did not enable this queue */
	t = &n->w[n->nworkers];
	memset(t, 0, sizeof(*t));
	ret = worker_make(n, t, kind, qi, pair);
	if (ret < 0)
		return ret;
	/* The kernel keeps 15 characters of a name; "lkvm-net-tx7" fits. */
	snprintf(tname, sizeof(tname), "lkvm-net-%s",
		 net_paths[kind].tname ? net_paths[kind].tname : t->w.qname);
	t->w.wk = &n->wk[n->nworkers];
	ret = worker_start(t->w.wk, tname, net_paths[kind].sb, net_paths[kind].thread, t);
	if (ret < 0) {
		worker_free(&t->w);
		return ret;
	}
	n->nworkers++;
	return 0;
}

/* Start a worker per queue in use; run_lock held. */
static int start_workers_locked(struct virtio_net *n)
{
	u64 f = atomic_load_explicit(&n->vdev.features, memory_order_relaxed);
	int data_pairs = (f & F(VIRTIO_NET_F_MQ)) ? n->pairs : 1;
	int ret = 0;

	if (n->trace) /* kvm_run_setup read it before the guest ran */
		net_trace_set_clock(n->trace, n->kvm->guest_tsc.khz, n->kvm->guest_tsc.offset,
				    n->kvm->guest_tsc.err_ns);
	if (n->vhost)
		ret = net_vhost_start(n->vhost, data_pairs);
	for (int p = 0; p < data_pairs && !ret && !n->vhost; p++) {
		ret = net_worker_start(n, W_RX, 2 * p, p);
		if (!ret)
			ret = net_worker_start(n, W_TX, 2 * p + 1, p);
	}
	/* The control queue follows the data queues in use (§5.1.2). */
	if (!ret && (f & F(VIRTIO_NET_F_CTRL_VQ)))
		ret = net_worker_start(n, W_CTL, 2 * data_pairs, 0);
	return ret;
}

/* Stop and join every worker; run_lock held. Each one counts the kicks left in its eventfd
 * and gives back what it held (RX chains), so the queues can be served again later. */
static void stop_workers_locked(struct virtio_net *n)
{
	for (int i = 0; i < n->nworkers; i++) {
		worker_stop(n->w[i].w.wk);
		worker_free(&n->w[i].w);
	}
	n->nworkers = 0;
}

/* Attach the backend queues of pairs [0, pairs), detach the others (pair 0 always stays);
 * stops at the first failure. Returns 0 or -errno. */
static int attach_pairs(struct virtio_net *n, int pairs)
{
	int ret = 0;

	for (int p = 1; p < n->pairs && !ret; p++) {
		bool on = p < pairs;

		if (n->attached[p] == on)
			continue;
		pthread_mutex_lock(&n->rx_gate[p]);
		ret = n->be[p]->ops->set_enabled(n->be[p], on);
		if (!ret)
			n->attached[p] = on;
		pthread_mutex_unlock(&n->rx_gate[p]);
	}
	return ret;
}

/*
 * Only the pairs the driver enabled receive (virtio 1.2 5.1.6.5.5: no packet on a receive
 * queue beyond virtqueue_pairs once VQ_PAIRS_SET is acknowledged; pair 0 alone after a
 * reset until the driver sets more). Every pair's RX thread keeps running, but the tap
 * queues of inactive pairs are detached, so the kernel steers no flow there (QEMU's
 * virtio_net_set_queue_pairs does the same), and their RX threads read nothing
 * (rx_drain_active). TX of an inactive pair is served as before: a detached tap queue
 * still sends, and a driver that leaves chains there loses none. On failure the pairs are
 * put back as they were and -errno returned. Called by the control thread, or with the
 * threads stopped (start, reset, creation): one caller at a time.
 */
int set_active_pairs(struct virtio_net *n, int pairs)
{
	int ret = attach_pairs(n, pairs);

	if (ret < 0) {
		pr_warn_rl(&n->log_rl, "virtio-net: %s: setting %d active queue pairs: %s",
			   n->be[0]->ifname, pairs, strerror(-ret));
		attach_pairs(n, atomic_load(&n->curr_pairs));
		return ret;
	}
	atomic_store(&n->curr_pairs, pairs);
	return 0;
}

static int net_start(struct virtio_device *vdev)
{
	struct virtio_net *n = to_net(vdev);
	u64 f = atomic_load_explicit(&vdev->features, memory_order_relaxed);
	struct net_offloads off;
	int ret = 0;

	net_stop(vdev); /* a second DRIVER_OK without reset: restart cleanly */
	pthread_mutex_lock(&n->run_lock);
	n->mrg_rxbuf = f & F(VIRTIO_NET_F_MRG_RXBUF);
	net_offloads_from_features(f, &off);
	for (int p = 0; p < n->pairs; p++) {
		if (n->be[p]->ops->set_offloads &&
		    (ret = n->be[p]->ops->set_offloads(n->be[p], &off)) < 0) {
			pr_warn_rl(&n->log_rl, "virtio-net: %s: setting offloads: %s",
				   n->be[p]->ifname, strerror(-ret));
			goto out;
		}
	}
	/* A restored NIC receives on the pairs it did (virtio_net_load), others on pair 0 alone. */
	ret = set_active_pairs(n, n->restore_pairs ? n->restore_pairs : 1);
	n->restore_pairs = 0;
	if (!ret)
		ret = start_workers_locked(n);
out:
	pthread_mutex_unlock(&n->run_lock);
	if (ret < 0) {
		pr_warn_rl(&n->log_rl, "virtio-net: cannot start: %s", strerror(-ret));
		net_stop(vdev);
	}
	return ret;
}

static void net_stop(struct virtio_device *vdev)
{
	struct virtio_net *n = to_net(vdev);

	pthread_mutex_lock(&n->run_lock);
	stop_workers_locked(n);
	/* Teardown: closing the vhost fds detaches everything (and main needs no vhost ioctl). */
	if (n->vhost && n->closing) {
		net_vhost_close(n->vhost);
		n->vhost = NULL;
	} else if (n->vhost) {
		net_vhost_stop(n->vhost);
	}
	/* A reset leaves pair 0 alone receiving until the driver sets more. */
	if (!n->closing)
		set_active_pairs(n, 1);
	pthread_mutex_unlock(&n->run_lock);
}

void virtio_net_quiesce(struct virtio_net *n)
{
	pthread_mutex_lock(&n->run_lock);
	for (int i = 0; i < n->nworkers; i++)
		worker_quiesce(n->w[i].w.wk);
	if (n->vhost)
		net_vhost_pause(n->vhost);
	pthread_mutex_unlock(&n->run_lock);
}

void virtio_net_resume(struct virtio_net *n)
{
	pthread_mutex_lock(&n->run_lock);
	if (n->vhost)
		net_vhost_resume(n->vhost);
	for (int i = 0; i < n->nworkers; i++)
		worker_resume(n->w[i].w.wk);
	pthread_mutex_unlock(&n->run_lock);
}

static const struct virtio_dev_ops virtio_net_ops = {
	.device_id = VIRTIO_ID_NET,
	.subsys_id = VIRTIO_ID_NET,
	.class_code = 0x020000,
	.get_features = net_get_features,
	.config_size = sizeof(struct virtio_net_config),
	.config_read = net_config_read,
	.config_write = net_config_write,
	.features_ok = net_features_ok,
	.start = net_start,
	.stop = net_stop,
};

/* ---- creation, teardown, counters ---- */

static void close_backends(struct net_backend **be, int n)
{
	for (int i = 0; i < n; i++) {
		if (be[i] && be[i]->ops && be[i]->ops->close)
			be[i]->ops->close(be[i]);
		be[i] = NULL;
	}
}

/* vhost=on: vhost-net for every pair, or an error; vhost=auto: the same, or lkvm's threads
 * (--debug says why). */
static int vhost_open(struct virtio_net *n, const struct net_opts *o, char *err, size_t errlen)
{
	int fds[NET_MAX_QUEUE_PAIRS];
	int ret;

	for (int p = 0; p < n->pairs; p++)
		fds[p] = n->be[p]->rx_fd; /* a tap queue: one fd both ways */
	ret = net_vhost_open(n->kvm, &n->vdev, fds, n->pairs, NULL, &n->vhost, err, errlen);
	if (ret < 0 && o->vhost == NET_VHOST_AUTO) {
		pr_debug("virtio-net: vhost=auto: the rings stay in lkvm (%s)", err);
		if (errlen)
			err[0] = '\0';
		return 0;
	}
	if (ret == 0)
		n->batch = false; /* no lkvm thread moves frames */
	return ret;
}

/* The backends net_alloc was given: one per pair, each able to send and receive (and, with
 * several pairs, to attach and detach its queue). Else they are closed and -EINVAL. */
static int net_check_backends(struct net_backend **be, int pairs, char *err, size_t errlen)
{
	if (pairs < 1 || pairs > NET_MAX_QUEUE_PAIRS) {
		errfmt(err, errlen, "virtio-net: %d queue pairs (1..%d)", pairs,
		       NET_MAX_QUEUE_PAIRS);
		close_backends(be, MAX(0, MIN(pairs, NET_MAX_QUEUE_PAIRS)));
		return -EINVAL;
	}
	for (int i = 0; i < pairs; i++) {
		if (!be[i] || !be[i]->ops || !be[i]->ops->send || !be[i]->ops->recv ||
		    (pairs > 1 && !be[i]->ops->set_enabled)) {
			errfmt(err, errlen, "virtio-net: no backend for queue pair %d", i);
			close_backends(be, pairs);
			return -EINVAL;
		}
	}
	return 0;
}

/* n's settings from o, the backends (taken from be), its locks and config space. */
static void net_init(struct virtio_net *n, struct kvm *kvm, const struct net_opts *o,
		     struct net_backend **be, int pairs)
{
	static const u8 default_mac[6] = VIRTIO_NET_DEFAULT_MAC;

	n->kvm = kvm;
	n->pairs = pairs;
	n->mode = o->mode;
	n->tx_mode = o->tx_mode;
	n->tx_timer_ns = 1000ull * (o->tx_timer_us ? o->tx_timer_us : NET_TX_TIMER_US_DEFAULT);
	n->poll_max_ns = 1000ull * (o->poll_us ? o->poll_us : NET_POLL_US_DEFAULT);
	n->batch = o->batch;
	for (int i = 0; i < pairs; i++)
		n->batch &= be[i]->ops->send_batch && be[i]->ops->recv_batch;
	for (int i = 0; i < pairs; i++) {
		n->be[i] = be[i];
		be[i] = NULL;
	}
	pthread_mutex_init(&n->cfg_lock, NULL);
	pthread_mutex_init(&n->run_lock, NULL);
	for (int i = 0; i < NET_MAX_QUEUE_PAIRS; i++) {
		pthread_mutex_init(&n->rx_gate[i], NULL);
		n->attached[i] = i < pairs; /* as the backends come */
	}

	memcpy(n->cfg.mac, default_mac, sizeof(n->cfg.mac));
	if (o->mac_set)
		memcpy(n->cfg.mac, o->guest_mac, sizeof(n->cfg.mac));
	n->cfg.status = htole16(VIRTIO_NET_S_LINK_UP);
	n->cfg.max_virtqueue_pairs = htole16((u16)pairs);

	/* The device's part only; the transport (or virtio_device_init) does the rest. */
	n->vdev.ops = &virtio_net_ops;
	n->vdev.priv = n;
	n->vdev.use_ioeventfd = o->ioeventfd;
}

static int net_alloc(struct kvm *kvm, const struct net_opts *o, struct net_backend **be,
		     struct virtio_net **out, char *err, size_t errlen)
{
	int pairs = o->queue_pairs ? o->queue_pairs : 1;
	struct virtio_net *n;
	int ret;

	*out = NULL;
	ret = net_check_backends(be, pairs, err, errlen);
	if (ret < 0)
		return ret;
	n = zalloc_lines(sizeof(*n));
	if (!n) {
		errfmt(err, errlen, "virtio-net: out of memory");
		close_backends(be, pairs);
		return -ENOMEM;
	}
	net_init(n, kvm, o, be, pairs);
	if (o->trace && !(n->trace = net_trace_new())) {
		errfmt(err, errlen, "virtio-net: out of memory");
		ret = -ENOMEM;
	}
	for (int i = 0; i < 2 * pairs + 1 && ret >= 0; i++) {
		ret = worker_init(&n->wk[i], kvm);
		if (ret < 0)
			errfmt(err, errlen, "virtio-net: eventfd: %s", strerror(-ret));
	}
	/* Until a driver sets more, pair 0 alone receives: the host queues no frame where
	 * nobody will read it. */
	atomic_init(&n->curr_pairs, pairs);
	if (ret >= 0) {
		ret = set_active_pairs(n, 1);
		if (ret < 0)
			errfmt(err, errlen,
			       "virtio-net: %s: detaching its queues beyond the first: %s",
			       n->be[0]->ifname, strerror(-ret));
	}
	/* Before the transport asks for the features (what vhost can do limits them). */
	if (ret >= 0 && o->vhost != NET_VHOST_OFF && o->mode == NET_MODE_TAP)
		ret = vhost_open(n, o, err, errlen);
	if (ret < 0) {
		virtio_net_destroy(n);
		return ret;
	}
	*out = n;
	return 0;
}

int virtio_net_create_bare(struct kvm *kvm, const struct net_opts *o, struct net_backend **be,
			   struct virtio_net **out)
{
	char err[128];
	int ret = net_alloc(kvm, o, be, out, err, sizeof(err));

	if (ret < 0) {
		pr_debug("%s", err);
		return ret;
	}
	ret = virtio_device_init(&(*out)->vdev, kvm, 2 * (*out)->pairs + 1, VIRTIO_NET_QUEUE_SIZE);
	if (ret < 0) {
		virtio_net_destroy(*out);
		*out = NULL;
	}
	return ret;
}

int virtio_net_create(struct kvm *kvm, const struct net_opts *o, struct net_backend **be,
		      struct virtio_net **out, char *err, size_t errlen)
{
	struct virtio_net *n;
	int ret = net_alloc(kvm, o, be, &n, err, errlen);

	if (ret < 0)
		return ret;
	ret = virtio_device_attach(kvm, &n->vdev, o->trans, 2 * n->pairs + 1,
				   VIRTIO_NET_QUEUE_SIZE);
	if (ret < 0) {
		errfmt(err, errlen, "virtio-net: %s transport: %s", virtio_trans_name(o->trans),
		       strerror(-ret));
		virtio_net_destroy(n);
		return ret;
	}
	*out = n;
	return 0;
}

void virtio_net_destroy(struct virtio_net *n)
{
	if (!n)
		return;
	n->closing = true;
	net_stop(&n->vdev);
	virtio_device_exit(&n->vdev);
	close_backends(n->be, n->pairs);
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++)
		worker_destroy(&n->wk[i]);
	net_trace_free(n->trace);
	pthread_mutex_destroy(&n->cfg_lock);
	pthread_mutex_destroy(&n->run_lock);
	for (int i = 0; i < NET_MAX_QUEUE_PAIRS; i++)
		pthread_mutex_destroy(&n->rx_gate[i]);
	free(n);
}

bool virtio_net_has_vhost(const struct virtio_net *n)
{
	return n->vhost != NULL;
}

struct virtio_device *virtio_net_vdev(struct virtio_net *n)
{
	return &n->vdev;
}

int virtio_net_serve_once(struct virtio_net *n, int qi)
{
	struct virtio_device *vdev = &n->vdev;
	int ctl = (vdev->features & F(VIRTIO_NET_F_MQ)) ? 2 * n->pairs : 2;
	union net_thread *t;
	struct worker wk; /* no thread: never asked to leave */

	if (qi < 0 || qi > ctl || !vdev->q[qi].vq.ready || n->nworkers)
		return -EINVAL;
	t = zalloc_lines(sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->w.wk = &wk;
	if (worker_make(n, t,
			qi == ctl ? W_CTL
			: qi % 2  ? W_TX
				  : W_RX,
			qi, qi == ctl ? 0 : qi / 2) < 0 ||
	    worker_init(&wk, n->kvm) < 0) {
		worker_free(&t->w);
		free(t);
		return -ENOMEM;
	}
	n->mrg_rxbuf = vdev->features & F(VIRTIO_NET_F_MRG_RXBUF);
	net_paths[t->w.kind].serve(&t->w);
	worker_destroy(&wk);
	worker_free(&t->w);
	free(t);
	return 0;
}

void virtio_net_set_tx_hook(struct virtio_net *n, virtio_net_tx_hook fn, void *arg)
{
	__atomic_store_n(&n->tx_hook_arg, arg, __ATOMIC_RELAXED);
	__atomic_store_n(&n->tx_hook, fn, __ATOMIC_RELEASE);
}

/* Queue names in the layout the driver negotiated (all pairs if it never got that far). */
static int stats_rows(struct virtio_net *n, int qi[], const char *name[], char buf[][24])
{
	u64 f = atomic_load_explicit(&n->vdev.features, memory_order_relaxed);
	int pairs = (!f || (f & F(VIRTIO_NET_F_MQ))) ? n->pairs : 1, rows = 0;

	for (int p = 0; p < pairs; p++) {
		for (int d = 0; d < 2; d++) {
			snprintf(buf[rows], sizeof(buf[rows]), "%s%d", d ? "tx" : "rx", p);
			qi[rows] = 2 * p + d;
			name[rows] = buf[rows];
			rows++;
		}
	}
	qi[rows] = 2 * pairs;
	name[rows] = "ctrl";
	return rows + 1;
}

void virtio_net_stats(struct virtio_net *n, struct stats_visitor *v)
{
	int qi[VIRTIO_MAX_QUEUES];
	const char *name[VIRTIO_MAX_QUEUES];
	char buf[VIRTIO_MAX_QUEUES][24];
	int rows = stats_rows(n, qi, name, buf);

	for (int r = 0; r < rows; r++) {
		struct virtio_queue_stats *s = &n->vdev.q[qi[r]].stats;

		/* vhost's queues have no counters here: no row of zeros that would look measured. */
		if (n->vhost && r < rows - 1)
			continue;
		virtio_queue_stats(&n->vdev, qi[r], v, name[r], "packets");
		v->counter(v, "drops", stat_get(&s->drops));
		v->counter(v, "batches", stat_get(&s->batches));
		v->counter(v, "calls", stat_get(&s->calls));
		v->counter(v, "polls", stat_get(&s->polls));
		v->counter(v, "poll_hits", stat_get(&s->poll_hits));
		v->counter(v, "poll_us", stat_get(&s->poll_ns) / 1000);
	}
	if (n->vhost) {
		v->group(v, "vhost");
		v->counter(v, "pairs", (u64)n->pairs);
		/* Under run_lock: a reset on a vCPU stops the rings (net_vhost_stop) meanwhile. */
		pthread_mutex_lock(&n->run_lock);
		v->counter(v, "running", (u64)net_vhost_pairs(n->vhost));
		/* Each data ring's used index: proof of which pairs vhost moved frames on. */
		for (int r = 0; r < rows - 1; r++) {
			char c[32];

			snprintf(c, sizeof(c), "%s_used_idx", name[r]);
			v->counter(v, c, (u64)MAX(net_vhost_used_idx(n->vhost, qi[r]), 0));
		}
		pthread_mutex_unlock(&n->run_lock);
	}
	if (n->trace && !n->vhost)
		net_trace_stats(n->trace, v);
}

/* ---- the NIC as an entry of the VM's device list ---- */

typedef int (*net_open_fn)(const struct net_opts *o, struct net_backend **be, int n, char *err,
			   size_t errlen);
/* How each -n mode opens its backends (the fake, for tests, is made below). */
static const net_open_fn net_open[] = {
	[NET_MODE_TAP] = net_tap_open,
	[NET_MODE_USER] = net_passt_open,
};
static const char *const net_mode_name[] = {
	[NET_MODE_TAP] = "tap",
	[NET_MODE_USER] = "passt",
	[NET_MODE_FAKE] = "fake",
};

const char *net_mode_str(int mode)
{
	if (mode < 0 || (unsigned)mode >= ARRAY_SIZE(net_mode_name) || !net_mode_name[mode])
		return "?";
	return net_mode_name[mode];
}

/* Its backends (a tap, passt, or fake ones for tests), then the device. */
static int net_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	struct net_backend *be[NET_MAX_QUEUE_PAIRS] = { NULL };
	static const u8 default_mac[6] = VIRTIO_NET_DEFAULT_MAC;
	struct net_opts o = *(const struct net_opts *)d->arg;
	char ifname[sizeof(be[0]->ifname)] = "fake";
	int ret, pairs = o.queue_pairs ? o.queue_pairs : 1;

	if (kvm->cfg.no_ioeventfd)
		o.ioeventfd = false;
	if (!o.trans_set)
		o.trans = kvm->cfg.virtio_trans;
	if (!o.mac_set) {
		memcpy(o.guest_mac, default_mac, sizeof(o.guest_mac));
		o.guest_mac[5] = (u8)(o.guest_mac[5] + d->index);
		o.mac_set = true;
	}
	if (o.mode == NET_MODE_FAKE) {
		/* One that cannot be made is reported by virtio_net_create ("no backend"). */
		for (int i = 0; i < pairs && i < NET_MAX_QUEUE_PAIRS; i++)
			be[i] = net_fake_create();
	} else {
		if ((unsigned)o.mode >= ARRAY_SIZE(net_open) || !net_open[o.mode]) {
			errfmt(err, errlen, "virtio-net: no backend for mode %d", o.mode);
			return -EINVAL;
		}
		ret = net_open[o.mode](&o, be, pairs, err, errlen);
		if (ret < 0)
			return ret;
		memcpy(ifname, be[0]->ifname, sizeof(ifname));
	}
	/* From here the device owns the backends, on failure too. */
	ret = virtio_net_create(kvm, &o, be, (struct virtio_net **)&d->priv, err, errlen);
	if (ret < 0)
		return ret;
	pr_debug("virtio-net %d over %s on %s %s, %s, tx=%s%s", d->index,
		 virtio_trans_name(o.trans), net_mode_str(o.mode), ifname,
		 o.ioeventfd ? "ioeventfd" : "trapped notifies", net_tx_mode_name(o.tx_mode),
		 virtio_net_has_vhost(d->priv) ? ", data rings in vhost-net" : "");
	return 0;
}

static void net_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	virtio_net_destroy(d->priv);
}

static void net_dev_quiesce(struct kvm_dev *d)
{
	virtio_net_quiesce(d->priv);
}

static void net_dev_resume(struct kvm_dev *d)
{
	virtio_net_resume(d->priv);
}

static void net_dev_reset(struct kvm_dev *d)
{
	virtio_device_reset(virtio_net_vdev(d->priv));
}

static void net_dev_stats(struct kvm_dev *d, struct stats_visitor *v)
{
	virtio_net_stats(d->priv, v);
}

static int net_dev_save(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen)
{
	return virtio_net_save(d->priv, b, err, errlen);
}

static int net_dev_load(struct kvm_dev *d, const void *sec, size_t len, char *err, size_t errlen)
{
	return virtio_net_load(d->priv, sec, len, err, errlen);
}

static int net_dev_start(struct kvm_dev *d)
{
	virtio_net_start(d->priv);
	return 0;
}

/* save refuses a NIC whose data rings are vhost-net's (virtio_net_save). */
static const struct kvm_dev_ops net_dev_ops = {
	.name = "virtio-net",
	.prio = DEV_PRIO_VIRTIO,
	.init = net_dev_init,
	.start = net_dev_start,
	.quiesce = net_dev_quiesce,
	.resume = net_dev_resume,
	.reset = net_dev_reset,
	.stats = net_dev_stats,
	.stats_name = "net",
	.save = net_dev_save,
	.load = net_dev_load,
	.exit = net_dev_exit,
};

int virtio_net_add(struct kvm *kvm, const struct net_opts *o)
{
	return kvm_dev_add(kvm, &net_dev_ops, o, sizeof(*o));
}

/* virtio-console (virtio 1.2 §5.3, one port, no multiport): guest output to the terminal, terminal input to the guest (hvc0). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_ring.h>

#include "lkvm/dev.h"
#include "lkvm/iov.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"
#include "lkvm/term.h"
#include "lkvm/virtio-console.h"
#include "lkvm/worker.h"

#define QUEUE_SIZE 64
#define RXQ 0
#define TXQ 1
#define IN_BUF 4096
#define OUT_CHUNK 4096 /* one write to the terminal; stop is looked at between two */
/*
 * Guest output taken per wake-up. A TX chain may alias all of guest RAM through VQ_MAX_SG
 * descriptors (1024 x RAM bytes): a chain longer than this is continued at the next round,
 * where it stopped, after stop and terminal input were looked at, so nothing is lost or
 * repeated and neither a reset nor input waits for it. Linux's hvc driver posts at most a
 * page per chain, so one round still takes 16 of its chains; a round costs one more poll(2).
 */
#define TX_BUDGET (64 * 1024)

struct virtio_console {
	struct virtio_device vdev;
	struct kvm *kvm;
	int in_fd;	      /* eventfd: input was queued */
	struct worker worker; /* the queue thread */
	/* Terminal input not yet given to the guest (term thread writes, queue thread reads). */
	pthread_mutex_t in_lock;
	u8 in[IN_BUF];
	size_t in_head, in_len;
	bool broken[2];
	struct vq_elem *elem;	 /* RX */
	struct vq_elem *tx_elem; /* the TX chain being written, while tx_busy */
	bool tx_busy;
	u64 tx_off; /* its bytes written so far */
	virtio_console_out_fn out;
};

static void broken(struct virtio_console *c, int qi)
{
	c->broken[qi] = true;
	virtio_set_needs_reset(&c->vdev, qi == RXQ ? "virtio-console rx: malformed chain"
						   : "virtio-console tx: malformed chain");
}

static bool stopping(struct virtio_console *c)
{
	return worker_leaving(&c->worker);
}

/*
 * Guest output: every chain's readable bytes, in order, to the terminal, at most TX_BUDGET
 * bytes per call. Wake-up protocol as virtio-net's TX: notifications off, drain, re-enable,
 * re-check (vq_enable_notify's barrier pairs with the driver's). Returns true when the
 * budget ran out (or stop came) with output left: notifications stay off and the caller
 * calls again without waiting for a kick.
 */
static bool tx_drain(struct virtio_console *c)
{
	struct virtqueue *vq = &c->vdev.q[TXQ].vq;
	struct vq_elem *e = c->tx_elem;
	u64 budget = TX_BUDGET;
	u8 buf[OUT_CHUNK];

	if (c->broken[TXQ])
		return false;
	do {
		vq_disable_notify(vq);
		for (;;) {
			if (!c->tx_busy) {
				int r = vq_pop(vq, e);

				if (r == 0)
					break;
				if (r < 0) {
					broken(c, TXQ);
					return false;
				}
				c->tx_busy = true;
				c->tx_off = 0;
			}
			while (c->tx_off < e->out_len) {
				size_t n;

				if (!budget || stopping(c))
					return true;
				n = iov_from(e->iov, e->out_num, c->tx_off, buf,
					     (size_t)MIN(budget, sizeof(buf)));
				c->out(c->kvm, buf, n);
				c->tx_off += n;
				budget -= n;
			}
			atomic_fetch_add_explicit(&c->vdev.q[TXQ].stats.packets, 1,
						  memory_order_relaxed);
			atomic_fetch_add_explicit(&c->vdev.q[TXQ].stats.bytes, e->out_len,
						  memory_order_relaxed);
			c->tx_busy = false;
			vq_push(vq, e->head, 0);
			virtio_notify_queue(&c->vdev, TXQ);
		}
	} while (vq_enable_notify(vq));
	return false;
}

/* Terminal input into the guest's receive buffers, while both last. */
static void rx_fill(struct virtio_console *c)
{
	struct virtqueue *vq = &c->vdev.q[RXQ].vq;

	if (c->broken[RXQ] || !vq->ready)
		return;
	pthread_mutex_lock(&c->in_lock);
	while (c->in_len) {
		size_t done = 0;
		int r = vq_pop(vq, c->elem);

		if (r == 0) {
			/* No buffer: ask for a kick when the guest adds one, and look again. */
			if (vq_enable_notify(vq))
				continue;
			break;
		}
		if (r < 0) {
			pthread_mutex_unlock(&c->in_lock);
			broken(c, RXQ);
			return;
		}
		while (c->in_len && done < c->elem->in_len) {
			size_t run = MIN(c->in_len, IN_BUF - c->in_head);
			size_t n = iov_to(c->elem->iov + c->elem->out_num, c->elem->in_num, done,
					  c->in + c->in_head, run);

			if (!n)
				break;
			done += n;
			c->in_head = (c->in_head + n) % IN_BUF;
			c->in_len -= n;
		}
		atomic_fetch_add_explicit(&c->vdev.q[RXQ].stats.packets, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&c->vdev.q[RXQ].stats.bytes, done, memory_order_relaxed);
		vq_push(vq, c->elem->head, (u32)done);
		virtio_notify_queue(&c->vdev, RXQ);
	}
	pthread_mutex_unlock(&c->in_lock);
}

static void console_thread(void *arg)
{
	struct virtio_console *c = arg;
	bool more;

	more = tx_drain(c);
	rx_fill(c);
	for (;;) {
		struct pollfd p[4] = {
			{ .fd = worker_fd(&c->worker), .events = POLLIN },
			{ .fd = c->vdev.q[TXQ].kick_fd, .events = POLLIN },
			{ .fd = c->vdev.q[RXQ].kick_fd, .events = POLLIN },
			{ .fd = c->in_fd, .events = POLLIN },
		};
		u64 v;

		/* Output left over from the last round: only look, do not wait. */
		if (poll(p, 4, more ? 0 : -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents) {
			/* Stop, or a pause: a chain cut short stays where it stopped and goes on
			 * after it; terminal input waits in c->in. */
			if (worker_park(&c->worker))
				break;
			more = tx_drain(c);
			rx_fill(c);
			continue;
		}
		for (int i = 1; i < 4; i++) {
			if (p[i].revents && read(p[i].fd, &v, sizeof(v)) == sizeof(v) && i < 3)
				atomic_fetch_add_explicit(
					&c->vdev.q[i == 1 ? TXQ : RXQ].stats.kicks, v,
					memory_order_relaxed);
		}
		if (p[1].revents || more)
			more = tx_drain(c);
		rx_fill(c);
	}
	/* A chain cut short by stop was the last one taken: give it back (a restart without
	 * reset writes it again; a reset discards the ring anyway). */
	if (c->tx_busy) {
		vq_unpop(&c->vdev.q[TXQ].vq, 1);
		c->tx_busy = false;
	}
}

size_t virtio_console_receive(struct virtio_console *c, const u8 *buf, size_t n)
{
	size_t took;
	u64 one = 1;

	pthread_mutex_lock(&c->in_lock);
	took = MIN(n, IN_BUF - c->in_len);
	for (size_t i = 0; i < took; i++)
		c->in[(c->in_head + c->in_len + i) % IN_BUF] = buf[i];
	c->in_len += took;
	pthread_mutex_unlock(&c->in_lock);
	if (took && write(c->in_fd, &one, sizeof(one)) < 0)
		pr_debug("virtio-console: input eventfd write failed");
	return took;
}

/* ---- device ops ---- */

static int con_start(struct virtio_device *vdev)
{
	struct virtio_console *c = vdev->priv;

	worker_stop(&c->worker); /* a second DRIVER_OK without reset: restart cleanly */
	c->broken[0] = c->broken[1] = false;
	return worker_start(&c->worker, "lkvm-vcon", SB_VCONSOLE, console_thread, c);
}

static void con_stop(struct virtio_device *vdev)
{
	worker_stop(&((struct virtio_console *)vdev->priv)->worker);
}

static u64 con_features(struct virtio_device *vdev)
{
	return 1ULL << VIRTIO_RING_F_INDIRECT_DESC;
}

static const struct virtio_dev_ops virtio_console_ops = {
	.device_id = VIRTIO_ID_CONSOLE,
	.class_code = 0x078000, /* communication controller, other */
	.get_features = con_features,
	.start = con_start,
	.stop = con_stop,
};

int virtio_console_create(struct kvm *kvm, enum virtio_trans trans, virtio_console_out_fn out,
			  bool bare, struct virtio_console **outp)
{
	struct virtio_console *c = calloc(1, sizeof(*c));
	int ret;

	*outp = NULL;
	if (!c)
		return -ENOMEM;
	c->kvm = kvm;
	c->out = out ? out : term_output;
	pthread_mutex_init(&c->in_lock, NULL);
	c->in_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->elem = malloc(sizeof(*c->elem));
	c->tx_elem = malloc(sizeof(*c->tx_elem));
	c->vdev.ops = &virtio_console_ops;
	c->vdev.priv = c;
	c->vdev.use_ioeventfd = !kvm->cfg.no_ioeventfd;
	if (c->in_fd < 0 || !c->elem || !c->tx_elem || worker_init(&c->worker, kvm) < 0) {
		virtio_console_destroy(c);
		return -ENOMEM;
	}
	ret = bare ? virtio_device_init(&c->vdev, kvm, 2, QUEUE_SIZE)
		   : virtio_device_attach(kvm, &c->vdev, trans, 2, QUEUE_SIZE);
	if (ret < 0) {
		virtio_console_destroy(c);
		return ret;
	}
	*outp = c;
	return 0;
}

struct virtio_device *virtio_console_vdev(struct virtio_console *c)
{
	return &c->vdev;
}

bool virtio_console_stopping(struct virtio_console *c)
{
	return stopping(c);
}

void virtio_console_destroy(struct virtio_console *c)
{
	if (!c)
		return;
	worker_stop(&c->worker);
	virtio_device_exit(&c->vdev);
	if (c->in_fd >= 0)
		close(c->in_fd);
	free(c->elem);
	free(c->tx_elem);
	worker_destroy(&c->worker);
	pthread_mutex_destroy(&c->in_lock);
	free(c);
}

void virtio_console_stats(struct virtio_console *c, struct stats_visitor *v)
{
	static const char *const names[] = { [RXQ] = "rx", [TXQ] = "tx" };

	for (int qi = 0; qi < 2; qi++)
		virtio_queue_stats(&c->vdev, qi, v, names[qi], "packets");
}

/* ---- the console as an entry of the VM's device list ---- */

static size_t con_input(void *dev, const u8 *buf, size_t n)
{
	return virtio_console_receive(dev, buf, n);
}

/* What virtio_console_add_port was given. */
struct con_port {
	virtio_console_out_fn out;
	bool input;
};

/* hvc0 is the console (--console virtio): terminal input goes here, not to the UART. */
static int con_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	const struct con_port *port = d->arg;
	struct virtio_console *c;
	int ret = virtio_console_create(kvm, kvm->cfg.virtio_trans, port->out, false, &c);

	if (ret < 0)
		return ret;
	d->priv = c;
	if (port->input)
		term_set_input(kvm, con_input, c);
	return 0;
}

static void con_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	term_clear_input(kvm, d->priv);
	virtio_console_destroy(d->priv);
}

void virtio_console_quiesce(struct virtio_console *c)
{
	worker_quiesce(&c->worker);
}

void virtio_console_resume(struct virtio_console *c)
{
	worker_resume(&c->worker);
}

static void con_dev_quiesce(struct kvm_dev *d)
{
	virtio_console_quiesce(d->priv);
}

static void con_dev_resume(struct kvm_dev *d)
{
	virtio_console_resume(d->priv);
}

static void con_dev_reset(struct kvm_dev *d)
{
	virtio_device_reset(&((struct virtio_console *)d->priv)->vdev);
}

static void con_dev_stats(struct kvm_dev *d, struct stats_visitor *v)
{
	virtio_console_stats(d->priv, v);
}

/* ---- snapshot ---- */

/* The console's own state: the transmit chain cut short by the pause (its head and how much
 * of it reached the terminal: the rest goes out after restore, nothing twice), and terminal
 * input the guest has not taken yet (VIRTIO_SNAP_TAG_DEV + 1, in_len bytes in order). The
 * receive queue holds no chain: each is filled and pushed as it is popped. */
struct con_snap {
	u64 tx_off;
	u32 in_len;
	u16 tx_head;
	u8 tx_busy;
	u8 pad;
};
_Static_assert(sizeof(struct con_snap) == 16, "con_snap has a hole");
#define CON_TAG_STATE VIRTIO_SNAP_TAG_DEV
#define CON_TAG_INPUT (VIRTIO_SNAP_TAG_DEV + 1)

int virtio_console_save(struct virtio_console *c, struct snap_rec_buf *b, char *err, size_t errlen)
{
	struct con_snap s;
	u8 in[IN_BUF];

	memset(&s, 0, sizeof(s));
	s.tx_busy = c->tx_busy;
	if (c->tx_busy) {
		s.tx_head = c->tx_elem->head;
		s.tx_off = c->tx_off;
	}
	pthread_mutex_lock(&c->in_lock);
	s.in_len = (u32)c->in_len;
	for (size_t i = 0; i < c->in_len; i++)
		in[i] = c->in[(c->in_head + i) % IN_BUF];
	pthread_mutex_unlock(&c->in_lock);
	snap_rec_put(b, CON_TAG_STATE, &s, sizeof(s));
	if (s.in_len)
		snap_rec_put(b, CON_TAG_INPUT, in, s.in_len);
	return virtio_snap_save(&c->vdev, b, err, errlen);
}

/* The chain in flight, popped again from the restored ring: the one the old process held
 * (its last popped, not yet used), with output left in it. */
static int tx_repop(struct virtio_console *c, const struct con_snap *s, char *err, size_t errlen)
{
	struct virtqueue *vq = &c->vdev.q[TXQ].vq;

	if (vq->ready && (u16)(vq->last_avail - vq->used_idx) == 1) {
		vq_unpop(vq, 1);
		if (vq_pop(vq, c->tx_elem) == 1 && c->tx_elem->head == s->tx_head &&
		    s->tx_off < c->tx_elem->out_len) {
			c->tx_busy = true;
			c->tx_off = s->tx_off;
			return 0;
		}
	}
	errfmt(err, errlen, "the output chain in flight is not in the ring");
	return -EINVAL;
}

int virtio_console_load(struct virtio_console *c, const void *sec, size_t len, char *err,
			size_t errlen)
{
	struct con_snap s;
	int ret = virtio_snap_get(sec, len, CON_TAG_STATE, &s, sizeof(s), "virtio-console", err,
				  errlen);

	if (ret == 0 && (s.tx_busy > 1 || s.in_len > IN_BUF)) {
		errfmt(err, errlen, "virtio-console: state out of range");
		ret = -EINVAL;
	}
	if (ret == 0 && s.in_len)
		ret = virtio_snap_get(sec, len, CON_TAG_INPUT, c->in, s.in_len,
				      "virtio-console input", err, errlen);
	if (ret == 0)
		ret = virtio_snap_load(&c->vdev, sec, len, err, errlen);
	if (ret == 0 && s.tx_busy)
		ret = tx_repop(c, &s, err, errlen);
	if (ret < 0) {
		s.in_len = 0;
		virtio_device_reset(&c->vdev);
	}
	pthread_mutex_lock(&c->in_lock);
	c->in_head = 0;
	c->in_len = s.in_len;
	pthread_mutex_unlock(&c->in_lock);
	return ret;
}

void virtio_console_start(struct virtio_console *c)
{
	virtio_snap_start(&c->vdev);
}

static int con_dev_save(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen)
{
	return virtio_console_save(d->priv, b, err, errlen);
}

static int con_dev_load(struct kvm_dev *d, const void *sec, size_t len, char *err, size_t errlen)
{
	return virtio_console_load(d->priv, sec, len, err, errlen);
}

static int con_dev_start(struct kvm_dev *d)
{
	virtio_console_start(d->priv);
	return 0;
}

static const struct kvm_dev_ops con_dev_ops = {
	.name = "virtio-console",
	.prio = DEV_PRIO_VIRTIO,
	.init = con_dev_init,
	.start = con_dev_start,
	.quiesce = con_dev_quiesce,
	.resume = con_dev_resume,
	.reset = con_dev_reset,
	.stats = con_dev_stats,
	.stats_name = "console",
	.save = con_dev_save,
	.load = con_dev_load,
	.exit = con_dev_exit,
};

int virtio_console_add_port(struct kvm *kvm, virtio_console_out_fn out, bool input)
{
	struct con_port port = { out, input };

	return kvm_dev_add(kvm, &con_dev_ops, &port, sizeof(port));
}

int virtio_console_add(struct kvm *kvm)
{
	return virtio_console_add_port(kvm, NULL, true);
}

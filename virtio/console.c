/* virtio-console (virtio 1.2 §5.3, one port: a console, or a named multiport port): guest output to the terminal, terminal input to the guest. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <linux/virtio_console.h>
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
#define CRXQ 2 /* a named port's control receiveq (device to driver) */
#define CTXQ 3 /* and transmitq (driver to device) */
#define NQ_MAX 4
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
/* What virtio_console_flush writes out at most at teardown: the ring's 64 chains of Linux's
 * largest port write (32 KiB), a bound a hostile chain cannot stretch. */
#define FLUSH_ROUNDS (QUEUE_SIZE * 32 * 1024 / TX_BUDGET)

/* The config space (virtio 1.2 §5.3.4): only max_nr_ports means anything here. */
struct con_config {
	u16 cols, rows;
	u32 max_nr_ports;
	u32 emerg_wr;
};

struct virtio_console {
	struct virtio_device vdev;
	struct kvm *kvm;
	int in_fd;	      /* eventfd: input was queued */
	struct worker worker; /* the queue thread */
	/* Terminal input not yet given to the guest (term thread writes, queue thread reads). */
	pthread_mutex_t in_lock;
	u8 in[IN_BUF];
	size_t in_head, in_len;
	bool broken[NQ_MAX];
	struct vq_elem *elem;	  /* RX */
	struct vq_elem *ctl_elem; /* the control queues' (the queue thread's) */
	struct vq_elem *tx_elem;  /* the TX chain being written, while tx_busy */
	bool tx_busy;
	u64 tx_off;	       /* its bytes written so far */
	bool flushing;	       /* virtio_console_flush: the worker is stopped, output goes on */
	atomic_bool keep_busy; /* and a chain cut short stays taken (flush goes on with it) */
	virtio_console_out_fn out;
	char name[VIRTIO_CONSOLE_NAME_MAX + 1]; /* "": a console, no multiport */
	struct vcon_ctl ctl;			/* the queue thread's (a snapshot's when parked) */
};

static void broken_why(struct virtio_console *c, int qi, const char *why)
{
	c->broken[qi] = true;
	virtio_set_needs_reset(&c->vdev, why);
}

static void broken(struct virtio_console *c, int qi)
{
	static const char *const why[NQ_MAX] = {
		[RXQ] = "virtio-console rx: malformed chain",
		[TXQ] = "virtio-console tx: malformed chain",
		[CRXQ] = "virtio-console control rx: malformed chain",
		[CTXQ] = "virtio-console control tx: malformed chain",
	};

	broken_why(c, qi, why[qi]);
}

static bool stopping(struct virtio_console *c)
{
	return !c->flushing && worker_leaving(&c->worker);
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

/* The driver's control messages, each checked (vcon_ctl_recv); wake-up protocol as tx_drain's
 * (vq_enable_notify's barrier pairs with the driver's). A malformed one breaks the device. */
static void ctl_recv(struct virtio_console *c)
{
	struct virtqueue *vq = &c->vdev.q[CTXQ].vq;
	struct vq_elem *e = c->ctl_elem;

	do {
		vq_disable_notify(vq);
		for (;;) {
			const char *why = "virtio-console control tx: malformed chain";
			u8 msg[8];
			int r = vq_pop(vq, e);

			if (r == 0)
				break;
			if (r > 0 && e->out_len != sizeof(msg)) {
				why = "virtio-console control tx: a message is not 8 bytes";
				r = -EINVAL;
			} else if (r > 0) {
				iov_from(e->iov, e->out_num, 0, msg, sizeof(msg));
				r = vcon_ctl_recv(&c->ctl, msg, sizeof(msg), &why);
			}
			if (r < 0) {
				broken_why(c, CTXQ, why);
				return;
			}
			atomic_fetch_add_explicit(&c->vdev.q[CTXQ].stats.packets, 1,
						  memory_order_relaxed);
			vq_push(vq, e->head, 0);
			virtio_notify_queue(&c->vdev, CTXQ);
		}
	} while (vq_enable_notify(vq));
}

/* What the device owes the driver (PORT_ADD, PORT_NAME, PORT_OPEN), into its control receive
 * buffers while both last; with none, a kick says when one comes. */
static void ctl_send(struct virtio_console *c)
{
	struct virtqueue *vq = &c->vdev.q[CRXQ].vq;
	struct vq_elem *e = c->ctl_elem;

	while (c->ctl.pend) {
		u8 msg[8 + VIRTIO_CONSOLE_NAME_MAX];
		int n, r = vq_pop(vq, e);

		if (r == 0) {
			if (vq_enable_notify(vq))
				continue;
			break;
		}
		n = r < 0 ? r
			  : vcon_ctl_next(&c->ctl, c->name, msg,
					  (size_t)MIN(e->in_len, (u64)sizeof(msg)));
		if (n <= 0 ||
		    iov_to(e->iov + e->out_num, e->in_num, 0, msg, (size_t)n) != (size_t)n) {
			broken(c, CRXQ);
			return;
		}
		atomic_fetch_add_explicit(&c->vdev.q[CRXQ].stats.packets, 1, memory_order_relaxed);
		vq_push(vq, e->head, (u32)n);
		virtio_notify_queue(&c->vdev, CRXQ);
	}
}

/* A named port's control queues, when the driver set them up (it did not if it refused
 * VIRTIO_CONSOLE_F_MULTIPORT: the port is then a plain console). */
static void ctl_service(struct virtio_console *c)
{
	if (!c->name[0] || c->broken[CTXQ] || c->broken[CRXQ] || !c->vdev.q[CTXQ].vq.ready ||
	    !c->vdev.q[CRXQ].vq.ready)
		return;
	ctl_recv(c);
	if (!c->broken[CTXQ])
		ctl_send(c);
}

static void console_thread(void *arg)
{
	struct virtio_console *c = arg;
	bool more;

	int np = c->name[0] ? 6 : 4;

	ctl_service(c);
	more = tx_drain(c);
	rx_fill(c);
	for (;;) {
		/* queue q's kicks at p[1 + q] (receive, transmit), p[2 + q] (control) */
		struct pollfd p[6] = {
			{ .fd = worker_fd(&c->worker), .events = POLLIN },
			{ .fd = c->vdev.q[RXQ].kick_fd, .events = POLLIN },
			{ .fd = c->vdev.q[TXQ].kick_fd, .events = POLLIN },
			{ .fd = c->in_fd, .events = POLLIN },
			{ .fd = np > 4 ? c->vdev.q[CRXQ].kick_fd : -1, .events = POLLIN },
			{ .fd = np > 4 ? c->vdev.q[CTXQ].kick_fd : -1, .events = POLLIN },
		};
		u64 v;

		/* Output left over from the last round: only look, do not wait. */
		if (poll(p, (nfds_t)np, more ? 0 : -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents) {
			/* Stop, or a pause: a chain cut short stays where it stopped and goes on
			 * after it; terminal input waits in c->in. */
			if (worker_park(&c->worker))
				break;
			ctl_service(c);
			more = tx_drain(c);
			rx_fill(c);
			continue;
		}
		for (int i = 1; i < np; i++) {
			if (p[i].revents && read(p[i].fd, &v, sizeof(v)) == sizeof(v) && i != 3)
				atomic_fetch_add_explicit(
					&c->vdev.q[i > 3 ? i - 2 : i - 1].stats.kicks, v,
					memory_order_relaxed);
		}
		if (p[4].revents || p[5].revents)
			ctl_service(c);
		if (p[2].revents || more)
			more = tx_drain(c);
		rx_fill(c);
	}
	/* A chain cut short by stop was the last one taken: give it back (a restart without
	 * reset writes it again; a reset discards the ring anyway), unless the flush at teardown
	 * goes on from where it stopped (given back, its start would be written twice). */
	if (c->tx_busy && !atomic_load(&c->keep_busy)) {
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
	memset(c->broken, 0, sizeof(c->broken));
	return worker_start(&c->worker, "lkvm-vcon", SB_VCONSOLE, console_thread, c);
}

/* Reset or teardown: a reset driver starts over with DEVICE_READY (a restored device keeps
 * what its load set: it is started, not stopped first). */
static void con_stop(struct virtio_device *vdev)
{
	struct virtio_console *c = vdev->priv;

	worker_stop(&c->worker);
	c->ctl = (struct vcon_ctl){ 0 };
}

static u64 con_features(struct virtio_device *vdev)
{
	struct virtio_console *c = vdev->priv;

	return 1ULL << VIRTIO_RING_F_INDIRECT_DESC |
	       (c->name[0] ? 1ULL << VIRTIO_CONSOLE_F_MULTIPORT : 0);
}

static void con_config_read(struct virtio_device *vdev, u32 off, u8 *data, u32 len)
{
	const struct con_config cfg = { .max_nr_ports = 1 };

	memset(data, 0, len);
	if (off < sizeof(cfg))
		memcpy(data, (const u8 *)&cfg + off, MIN(len, (u32)sizeof(cfg) - off));
}

static const struct virtio_dev_ops virtio_console_ops = {
	.device_id = VIRTIO_ID_CONSOLE,
	.class_code = 0x078000, /* communication controller, other */
	.get_features = con_features,
	.config_size = sizeof(struct con_config),
	.config_read = con_config_read,
	.start = con_start,
	.stop = con_stop,
};

int virtio_console_create(struct kvm *kvm, enum virtio_trans trans, virtio_console_out_fn out,
			  const char *name, bool bare, struct virtio_console **outp)
{
	struct virtio_console *c;
	int ret, nq;

	*outp = NULL;
	if (name && (!name[0] || strlen(name) > VIRTIO_CONSOLE_NAME_MAX))
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	if (name)
		strcpy(c->name, name);
	c->kvm = kvm;
	c->out = out ? out : term_output;
	pthread_mutex_init(&c->in_lock, NULL);
	c->in_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->elem = malloc(sizeof(*c->elem));
	c->tx_elem = malloc(sizeof(*c->tx_elem));
	c->ctl_elem = malloc(sizeof(*c->ctl_elem));
	c->vdev.ops = &virtio_console_ops;
	c->vdev.priv = c;
	c->vdev.use_ioeventfd = !kvm->cfg.no_ioeventfd;
	if (c->in_fd < 0 || !c->elem || !c->tx_elem || !c->ctl_elem ||
	    worker_init(&c->worker, kvm) < 0) {
		virtio_console_destroy(c);
		return -ENOMEM;
	}
	nq = c->name[0] ? NQ_MAX : 2;
	ret = bare ? virtio_device_init(&c->vdev, kvm, nq, QUEUE_SIZE)
		   : virtio_device_attach(kvm, &c->vdev, trans, nq, QUEUE_SIZE);
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
	free(c->ctl_elem);
	worker_destroy(&c->worker);
	pthread_mutex_destroy(&c->in_lock);
	free(c);
}

void virtio_console_stats(struct virtio_console *c, struct stats_visitor *v)
{
	static const char *const names[NQ_MAX] = {
		[RXQ] = "rx", [TXQ] = "tx", [CRXQ] = "ctl-rx", [CTXQ] = "ctl-tx"
	};

	for (int qi = 0; qi < c->vdev.nr_queues; qi++)
		virtio_queue_stats(&c->vdev, qi, v, names[qi], "packets");
}

void virtio_console_flush(struct virtio_console *c)
{
	atomic_store(&c->keep_busy, true);
	worker_stop(&c->worker);
	if (!c->vdev.q[TXQ].vq.ready)
		return;
	c->flushing = true;
	for (int i = 0; i < FLUSH_ROUNDS && tx_drain(c); i++)
		;
	c->flushing = false;
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
	char name[VIRTIO_CONSOLE_NAME_MAX + 1];
};

/* hvc0 is the console (--console virtio): terminal input goes here, not to the UART. */
static int con_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	const struct con_port *port = d->arg;
	struct virtio_console *c;
	int ret = virtio_console_create(kvm, kvm->cfg.virtio_trans, port->out,
					port->name[0] ? port->name : NULL, false, &c);

	if (ret < 0)
		return ret;
	d->priv = c;
	if (port->input)
		term_set_input(kvm, con_input, c);
	return 0;
}

static void con_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	struct virtio_console *c = d->priv;

	term_clear_input(kvm, c);
	if (c->name[0])
		virtio_console_flush(c);
	virtio_console_destroy(c);
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
 * input the guest has not taken yet (VIRTIO_SNAP_TAG_DEV + 1, in_len bytes in order), and a
 * named port's control channel (VIRTIO_SNAP_TAG_DEV + 2: the messages still owed to the
 * driver, whether the guest has the port open). The receive queues hold no chain: each is
 * filled and pushed as it is popped, and a control message is taken whole. */
struct con_snap {
	u64 tx_off;
	u32 in_len;
	u16 tx_head;
	u8 tx_busy;
	u8 pad;
};
_Static_assert(sizeof(struct con_snap) == 16, "con_snap has a hole");
struct con_ctl_snap {
	u8 pend;
	u8 guest_open;
	u8 pad[6];
};
_Static_assert(sizeof(struct con_ctl_snap) == 8, "con_ctl_snap has a hole");
#define CON_TAG_STATE VIRTIO_SNAP_TAG_DEV
#define CON_TAG_INPUT (VIRTIO_SNAP_TAG_DEV + 1)
#define CON_TAG_CTL (VIRTIO_SNAP_TAG_DEV + 2)

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
	if (c->name[0]) {
		struct con_ctl_snap cs = { .pend = c->ctl.pend, .guest_open = c->ctl.guest_open };

		snap_rec_put(b, CON_TAG_CTL, &cs, sizeof(cs));
	}
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

/* A named port's control channel, checked. */
static int ctl_load(struct virtio_console *c, const void *sec, size_t len, char *err, size_t errlen)
{
	struct con_ctl_snap cs;
	int ret = virtio_snap_get(sec, len, CON_TAG_CTL, &cs, sizeof(cs), "virtio-console control",
				  err, errlen);

	if (ret == 0 && ((cs.pend & ~VCON_SEND_ALL) || cs.guest_open > 1)) {
		errfmt(err, errlen, "virtio-console: control state out of range");
		ret = -EINVAL;
	}
	if (ret == 0)
		c->ctl = (struct vcon_ctl){ .pend = cs.pend, .guest_open = cs.guest_open };
	return ret;
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
	if (ret == 0 && c->name[0])
		ret = ctl_load(c, sec, len, err, errlen);
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

int virtio_console_add_port(struct kvm *kvm, virtio_console_out_fn out, bool input,
			    const char *name)
{
	struct con_port port = { out, input, "" };

	if (name && (!name[0] || strlen(name) > VIRTIO_CONSOLE_NAME_MAX))
		return -EINVAL;
	if (name)
		strcpy(port.name, name);
	return kvm_dev_add(kvm, &con_dev_ops, &port, sizeof(port));
}

int virtio_console_add(struct kvm *kvm)
{
	return virtio_console_add_port(kvm, NULL, true, NULL);
}

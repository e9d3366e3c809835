/* In-memory net backend for tests: bounded frame queues in each direction behind eventfds. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lkvm/iov.h"
#include "lkvm/net.h"

#define FAKE_QLEN 256
#define FAKE_MAX_FRAME 65550 /* without the 12-byte header */

struct fake_q {
	u8 *buf[FAKE_QLEN];
	size_t len[FAKE_QLEN];
	unsigned head, count;
};

struct fake {
	struct net_backend be;
	pthread_mutex_t lock;
	struct fake_q inject, sent;
	struct net_offloads off;
	bool no_peek;  /* behave like a tap: no peek_len */
	bool gone;     /* like a deleted tap: every send and receive fails with EBADFD */
	bool detached; /* like a detached tap queue: nothing is received */
	int send_batches, recv_batches; /* batch calls so far */
};

static struct fake *to_fake(struct net_backend *be)
{
	return be->priv;
}

static bool q_push(struct fake_q *q, u8 *buf, size_t len)
{
	unsigned tail;

	if (q->count == FAKE_QLEN)
		return false;
	tail = (q->head + q->count) % FAKE_QLEN;
	q->buf[tail] = buf;
	q->len[tail] = len;
	q->count++;
	return true;
}

static void q_pop(struct fake_q *q)
{
	free(q->buf[q->head]);
	q->buf[q->head] = NULL;
	q->head = (q->head + 1) % FAKE_QLEN;
	q->count--;
}

static ssize_t fake_send(struct net_backend *be, const struct iovec *iov, int iovcnt)
{
	struct fake *f = to_fake(be);
	size_t total = iov_length(iov, iovcnt);
	u8 *buf;

	if (total < NET_VNET_HDR_LEN)
		return -EINVAL;
	if (total > NET_VNET_HDR_LEN + FAKE_MAX_FRAME)
		return -EMSGSIZE;
	pthread_mutex_lock(&f->lock);
	if (f->gone) {
		pthread_mutex_unlock(&f->lock);
		return -EBADFD;
	}
	pthread_mutex_unlock(&f->lock);
	buf = malloc(total);
	if (!buf)
		return -ENOMEM;
	iov_from(iov, iovcnt, 0, buf, total);
	pthread_mutex_lock(&f->lock);
	if (!q_push(&f->sent, buf, total)) {
		pthread_mutex_unlock(&f->lock);
		free(buf);
		return -ENOBUFS;
	}
	pthread_mutex_unlock(&f->lock);
	return (ssize_t)total;
}

static ssize_t fake_recv(struct net_backend *be, const struct iovec *iov, int iovcnt)
{
	static const u8 zero_hdr[NET_VNET_HDR_LEN];
	struct fake *f = to_fake(be);
	size_t total = iov_length(iov, iovcnt), n;
	eventfd_t v;
	struct fake_q *q = &f->inject;

	if (total < NET_VNET_HDR_LEN)
		return -EINVAL;
	pthread_mutex_lock(&f->lock);
	if (f->gone) {
		pthread_mutex_unlock(&f->lock);
		return -EBADFD;
	}
	if (!q->count) {
		pthread_mutex_unlock(&f->lock);
		return -EAGAIN;
	}
	/* As tun does: what fit, cut silently. */
	n = iov_to(iov, iovcnt, 0, zero_hdr, sizeof(zero_hdr));
	n += iov_to(iov, iovcnt, n, q->buf[q->head], q->len[q->head]);
	q_pop(q);
	/* rx_fd is a semaphore eventfd holding the queue length: readable iff non-empty.
	 * Adjusted under the lock so the count and the queue never disagree. */
	if (eventfd_read(be->rx_fd, &v)) /* cannot fail: the count equals q->count >= 1 */
		abort();
	pthread_mutex_unlock(&f->lock);
	return (ssize_t)n;
}

/* The batch ops: each frame as the single-frame op would do it, in order, one call counted. */
static int fake_send_batch(struct net_backend *be, struct net_io *io, int n)
{
	struct fake *f = to_fake(be);

	pthread_mutex_lock(&f->lock);
	f->send_batches++;
	pthread_mutex_unlock(&f->lock);
	for (int i = 0; i < n; i++)
		io[i].res = fake_send(be, io[i].iov, io[i].iovcnt);
	return 0;
}

static int fake_recv_batch(struct net_backend *be, struct net_io *io, int n)
{
	struct fake *f = to_fake(be);

	pthread_mutex_lock(&f->lock);
	f->recv_batches++;
	pthread_mutex_unlock(&f->lock);
	for (int i = 0; i < n; i++)
		io[i].res = fake_recv(be, io[i].iov, io[i].iovcnt);
	return 0;
}

static ssize_t fake_peek_len(struct net_backend *be)
{
	struct fake *f = to_fake(be);
	ssize_t n = 0;

	pthread_mutex_lock(&f->lock);
	if (f->gone)
		n = -EBADFD;
	else if (f->no_peek)
		n = -ENOTSUP;
	else if (f->inject.count)
		n = (ssize_t)(NET_VNET_HDR_LEN + f->inject.len[f->inject.head]);
	pthread_mutex_unlock(&f->lock);
	return n;
}

static int fake_set_offloads(struct net_backend *be, const struct net_offloads *off)
{
	struct fake *f = to_fake(be);

	pthread_mutex_lock(&f->lock);
	f->off = *off;
	pthread_mutex_unlock(&f->lock);
	return 0;
}

static int fake_set_enabled(struct net_backend *be, bool on)
{
	struct fake *f = to_fake(be);
	eventfd_t v;

	pthread_mutex_lock(&f->lock);
	f->detached = !on;
	/* As tun's detach purges the queue's ring; rx_fd counts the frames (fake_recv). */
	while (!on && f->inject.count) {
		q_pop(&f->inject);
		if (eventfd_read(be->rx_fd, &v))
			abort();
	}
	pthread_mutex_unlock(&f->lock);
	return 0;
}

static void fake_close(struct net_backend *be)
{
	struct fake *f;

	if (!be)
		return;
	f = to_fake(be);
	while (f->inject.count)
		q_pop(&f->inject);
	while (f->sent.count)
		q_pop(&f->sent);
	if (be->rx_fd >= 0)
		close(be->rx_fd);
	if (be->tx_fd >= 0)
		close(be->tx_fd);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

static const struct net_backend_ops fake_ops = {
	.name = "fake",
	.send = fake_send,
	.recv = fake_recv,
	.send_batch = fake_send_batch,
	.recv_batch = fake_recv_batch,
	.peek_len = fake_peek_len,
	.set_offloads = fake_set_offloads,
	.set_enabled = fake_set_enabled,
	.close = fake_close,
};

struct net_backend *net_fake_create(void)
{
	struct fake *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	pthread_mutex_init(&f->lock, NULL);
	f->be.ops = &fake_ops;
	f->be.priv = f;
	f->be.rx_fd = eventfd(0, EFD_NONBLOCK | EFD_SEMAPHORE | EFD_CLOEXEC);
	/* Never written, so always writable: the fake drops (-ENOBUFS) rather than blocks. */
	f->be.tx_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	snprintf(f->be.ifname, sizeof(f->be.ifname), "fake");
	if (f->be.rx_fd < 0 || f->be.tx_fd < 0) {
		fake_close(&f->be);
		return NULL;
	}
	return &f->be;
}

int net_fake_inject(struct net_backend *be, const void *frame, size_t len)
{
	struct fake *f = to_fake(be);
	u8 *buf;

	if (len == 0)
		return -EINVAL;
	if (len > FAKE_MAX_FRAME)
		return -EMSGSIZE;
	buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, frame, len);
	pthread_mutex_lock(&f->lock);
	if (f->detached) {
		pthread_mutex_unlock(&f->lock);
		free(buf);
		return -ENOLINK;
	}
	if (!q_push(&f->inject, buf, len)) {
		pthread_mutex_unlock(&f->lock);
		free(buf);
		return -ENOBUFS;
	}
	if (eventfd_write(be->rx_fd, 1))
		abort();
	pthread_mutex_unlock(&f->lock);
	return 0;
}

int net_fake_pending(struct net_backend *be)
{
	struct fake *f = to_fake(be);
	int n;

	pthread_mutex_lock(&f->lock);
	n = (int)f->inject.count;
	pthread_mutex_unlock(&f->lock);
	return n;
}

ssize_t net_fake_take(struct net_backend *be, void *buf, size_t len)
{
	struct fake *f = to_fake(be);
	ssize_t n;

	pthread_mutex_lock(&f->lock);
	if (!f->sent.count) {
		n = 0;
	} else if (f->sent.len[f->sent.head] > len) {
		n = -EMSGSIZE;
	} else {
		n = (ssize_t)f->sent.len[f->sent.head];
		memcpy(buf, f->sent.buf[f->sent.head], (size_t)n);
		q_pop(&f->sent);
	}
	pthread_mutex_unlock(&f->lock);
	return n;
}

bool net_fake_enabled(struct net_backend *be)
{
	struct fake *f = to_fake(be);
	bool on;

	pthread_mutex_lock(&f->lock);
	on = !f->detached;
	pthread_mutex_unlock(&f->lock);
	return on;
}

void net_fake_offloads(struct net_backend *be, struct net_offloads *out)
{
	struct fake *f = to_fake(be);

	pthread_mutex_lock(&f->lock);
	*out = f->off;
	pthread_mutex_unlock(&f->lock);
}

void net_fake_batch_calls(struct net_backend *be, int *sends, int *recvs)
{
	struct fake *f = to_fake(be);

	pthread_mutex_lock(&f->lock);
	*sends = f->send_batches;
	*recvs = f->recv_batches;
	pthread_mutex_unlock(&f->lock);
}

void net_fake_set_no_peek(struct net_backend *be, bool no_peek)
{
	struct fake *f = to_fake(be);

	pthread_mutex_lock(&f->lock);
	f->no_peek = no_peek;
	pthread_mutex_unlock(&f->lock);
}

void net_fake_set_gone(struct net_backend *be)
{
	struct fake *f = to_fake(be);

	pthread_mutex_lock(&f->lock);
	f->gone = true;
	/* A deleted tap's fd polls as ready (POLLERR): make rx_fd readable for good. */
	if (eventfd_write(be->rx_fd, 1))
		abort();
	pthread_mutex_unlock(&f->lock);
}

/* virtio-net's control queue: the RX mode, MAC and MQ commands, the control thread. */
#include <endian.h>
#include <string.h>

#include "lkvm/iov.h"
#include "lkvm/kvm.h"
#include "net-priv.h"

/* The command's payload: readable bytes after the 2-byte class/command header. */
struct ctl_cmd {
	const struct vq_elem *e;
	u64 len;
};

static bool ctl_read(const struct ctl_cmd *c, u64 off, void *dst, size_t len)
{
	if (!range_ok(off, len, c->len))
		return false;
	return iov_from(c->e->iov, c->e->out_num, sizeof(struct virtio_net_ctrl_hdr) + off, dst,
			len) == len;
}

static u8 ctl_rx(struct virtio_net *n, u8 cmd, const struct ctl_cmd *c)
{
	u8 on;

	if (cmd > VIRTIO_NET_CTRL_RX_NOBCAST || c->len != 1 || !ctl_read(c, 0, &on, 1))
		return VIRTIO_NET_ERR;
	/* A tap hands us everything; the guest's own stack filters. Recorded only. */
	if (cmd == VIRTIO_NET_CTRL_RX_PROMISC)
		atomic_store(&n->promisc, on != 0);
	else if (cmd == VIRTIO_NET_CTRL_RX_ALLMULTI)
		atomic_store(&n->allmulti, on != 0);
	return VIRTIO_NET_OK;
}

static u8 ctl_mac(struct virtio_net *n, u8 cmd, const struct ctl_cmd *c)
{
	if (cmd == VIRTIO_NET_CTRL_MAC_ADDR_SET) {
		u8 mac[6];

		if (c->len != sizeof(mac) || !ctl_read(c, 0, mac, sizeof(mac)))
			return VIRTIO_NET_ERR;
		pthread_mutex_lock(&n->cfg_lock);
		memcpy(n->cfg.mac, mac, sizeof(mac));
		pthread_mutex_unlock(&n->cfg_lock);
		return VIRTIO_NET_OK;
	}
	if (cmd == VIRTIO_NET_CTRL_MAC_TABLE_SET) {
		/* Two tables (unicast, multicast): le32 entries, then entries * 6 bytes each;
		 * together exactly the payload. */
		u64 off = 0;

		for (int t = 0; t < 2; t++) {
			u32 entries;

			if (!ctl_read(c, off, &entries, sizeof(entries)))
				return VIRTIO_NET_ERR;
			off += sizeof(entries);
			if (!range_ok(off, (u64)le32toh(entries) * 6, c->len))
				return VIRTIO_NET_ERR;
			off += (u64)le32toh(entries) * 6;
		}
		return off == c->len ? VIRTIO_NET_OK : VIRTIO_NET_ERR;
	}
	return VIRTIO_NET_ERR;
}

static u8 ctl_mq(struct virtio_net *n, u8 cmd, const struct ctl_cmd *c)
{
	u16 pairs;

	if (cmd != VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET || !(n->vdev.features & F(VIRTIO_NET_F_MQ)) ||
	    c->len != sizeof(pairs) || !ctl_read(c, 0, &pairs, sizeof(pairs)))
		return VIRTIO_NET_ERR;
	pairs = le16toh(pairs);
	if (pairs < 1 || pairs > n->pairs || set_active_pairs(n, pairs) < 0)
		return VIRTIO_NET_ERR;
	return VIRTIO_NET_OK;
}

typedef u8 (*ctl_handler)(struct virtio_net *n, u8 cmd, const struct ctl_cmd *c);

static const ctl_handler ctl_handlers[] = {
	[VIRTIO_NET_CTRL_RX] = ctl_rx,
	[VIRTIO_NET_CTRL_MAC] = ctl_mac,
	[VIRTIO_NET_CTRL_MQ] = ctl_mq,
};

/* Handle one command chain and acknowledge it in its last writable byte. */
static void ctl_one(struct net_worker *w, const struct vq_elem *e)
{
	struct virtio_queue_stats *st = &w->n->vdev.q[w->qi].stats;
	struct virtio_net_ctrl_hdr h;
	struct ctl_cmd c = { .e = e };
	u8 ack = VIRTIO_NET_ERR;
	const struct iovec *last;

	if (e->out_len >= sizeof(h) &&
	    iov_from(e->iov, e->out_num, 0, &h, sizeof(h)) == sizeof(h)) {
		c.len = e->out_len - sizeof(h);
		if (h.class < ARRAY_SIZE(ctl_handlers) && ctl_handlers[h.class])
			ack = ctl_handlers[h.class](w->n, h.cmd, &c);
	}
	if (e->in_num == 0) {
		/* Nowhere to put the ack: hand the chain back untouched. */
		stat_add(&st->drops, 1);
		fill_used(w, e->head, 0);
		return;
	}
	last = &e->iov[e->out_num + e->in_num - 1];
	/* The walker drops empty buffers, so iov_len >= 1. The used length must not claim
	 * bytes we did not write (§2.7.8.2): 1 only when the ack is the whole writable part. */
	((u8 *)last->iov_base)[last->iov_len - 1] = ack;
	stat_add(&st->packets, 1);
	if (ack != VIRTIO_NET_OK)
		stat_add(&st->drops, 1);
	fill_used(w, e->head, e->in_len == 1 ? 1 : 0);
}

/* Same wake-up protocol as tx_drain (net-tx.c). */
static void ctl_drain(struct net_worker *w)
{
	struct virtio_queue *q = &w->n->vdev.q[w->qi];
	struct virtqueue *vq = &q->vq;
	bool worked = false;

	do {
		vq_disable_notify(vq);
		for (;;) {
			int r = net_pop(w, w->elem);

			if (r == 0)
				break;
			if (r < 0)
				goto out;
			worked = true;
			ctl_one(w, w->elem);
			if (w->pending >= MIN(BATCH, vq->size))
				flush_pending(w);
			if (leaving(w))
				goto out;
		}
		flush_pending(w);
	} while (!leaving(w) && vq_enable_notify(vq));
out:
	flush_pending(w);
	if (worked)
		stat_add(&q->stats.batches, 1);
}

void net_ctl_thread(void *arg)
{
	struct net_ctl *c = arg;
	struct net_worker *w = &c->w;
	struct virtio_queue *q = &w->n->vdev.q[w->qi];

	ctl_drain(w);
	for (;;) {
		int wake = wait_for(w, !w->broken, -1, 0);

		if ((wake & WAKE_STOP) && stop_or_park(w, wake))
			break;
		if (!w->broken && !leaving(w))
			ctl_drain(w);
	}
	drain_kicks(q);
}

/* virtio_net_serve_once on the control queue: one drain, as after a kick. */
void net_ctl_serve(struct net_worker *w)
{
	ctl_drain(w);
}

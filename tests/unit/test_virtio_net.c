/* Unit tests for the virtio-net device without KVM (features, config, lifecycle, counters, notifications, a backend gone, the stream backend): the test drives the rings, the fake backend plays the host network. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <x86intrin.h>

/* Before vnet.h: its inline bench_frame_head has a local t, vnet.h a global one. */
#include "lkvm/bench-frame.h"
#include "capture.h"
#include "check_main.h"
#include "stats_fmt.h"
#include "vnet.h"

/* ---- a backend gone ---- */

/* The backend disappears (a deleted tap): link down in the config space, a config-change
 * interrupt, one log line; TX keeps consuming (dropping) what the guest sends. */
START_TEST(backend_gone_link_down)
{
	struct virtio_net_config c;
	struct capture cap;
	char out[512];
	int lines;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_STATUS), 256);
	t.vdev->ops->config_read(t.vdev, 0, (u8 *)&c, sizeof(c));
	ck_assert_uint_eq(c.status, VIRTIO_NET_S_LINK_UP);
	ck_assert_uint_eq(atomic_load(&t.vdev->isr), 0);
	post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	capture_start(&cap);
	net_fake_set_gone(t.be[0]);
	for (int ms = 0; ms < WAIT_MS && !(atomic_load(&t.vdev->isr) & 2); ms++)
		poll(NULL, 0, 1);
	ck_assert_uint_eq(atomic_load(&t.vdev->isr) & 2, 2);
	t.vdev->ops->config_read(t.vdev, 0, (u8 *)&c, sizeof(c));
	ck_assert_uint_eq(c.status & VIRTIO_NET_S_LINK_UP, 0);
	/* TX: each chain used (and counted as dropped), none left waiting. */
	for (int i = 0; i < 10; i++)
		post(1, &(struct vd_buf){ galloc(72), 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 10));
	ck_assert_uint_eq(STAT(1, drops), 10);
	/* A reset and a new start: still down, still quiet. */
	t.vdev->ops->stop(t.vdev);
	ck_assert_int_eq(t.vdev->ops->start(t.vdev), 0);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	lines = capture_end(&cap, out, sizeof(out));
	ck_assert_int_eq(lines, 1);
	ck_assert_msg(strstr(out, "fake fake is gone") && strstr(out, "link down"), "%s", out);
	t.vdev->ops->config_read(t.vdev, 0, (u8 *)&c, sizeof(c));
	ck_assert_uint_eq(c.status & VIRTIO_NET_S_LINK_UP, 0);
	dev_destroy();
}
END_TEST

/* ---- the stream backend (passt's protocol) ---- */

/* The peer's side of a stream record: read one record whole (blocking, bounded by
 * SO_RCVTIMEO); returns the frame's length, or -1. */
static ssize_t peer_read_record(int fd, u8 *frame, size_t cap)
{
	u8 len_be[4];
	size_t len;

	if (recv(fd, len_be, 4, MSG_WAITALL) != 4)
		return -1;
	len = (size_t)len_be[0] << 24 | (size_t)len_be[1] << 16 | (size_t)len_be[2] << 8 |
	      len_be[3];
	if (len > cap || recv(fd, frame, len, MSG_WAITALL) != (ssize_t)len)
		return -1;
	return (ssize_t)len;
}

/* Frames guest -> stream and stream -> guest through the device's TX and RX threads, as with
 * passt: no offloads offered, a plain header on received frames, one record per frame
 * whatever the chain's split; the peer closing turns the link down. */
START_TEST(stream_backend_moves_frames)
{
	struct timeval tv = { .tv_sec = 2 };
	struct virtio_net_config c;
	struct net_backend *be;
	struct capture cap;
	u8 frame[1514], got[2048];
	char out[512];
	u64 rx[12], a, b;
	int sv[2], lines;

	signal(SIGPIPE, SIG_IGN); /* as lkvm: a closed peer is EPIPE */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_int_eq(setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	ck_assert_int_eq(net_stream_backend(sv[0], &be), 0);
	ck_assert(be->plain_frames);
	ck_assert_int_ne(fcntl(sv[0], F_GETFL) & O_NONBLOCK, 0);
	dev_create(1, be);
	/* Nothing to offload to passt, in either direction. */
	ck_assert_uint_eq(t.vdev->ops->get_features(t.vdev) &
				  (F(VIRTIO_NET_F_CSUM) | F(VIRTIO_NET_F_GUEST_CSUM) |
				   F(VIRTIO_NET_F_HOST_TSO4) | F(VIRTIO_NET_F_GUEST_TSO4) |
				   F(VIRTIO_NET_F_HOST_TSO6) | F(VIRTIO_NET_F_GUEST_TSO6)),
			  0);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_STATUS) | F(VIRTIO_NET_F_MRG_RXBUF), 256);

	/* TX: the header split from the frame across two buffers; the record is the frame. */
	fill_pattern(frame, sizeof(frame), 3);
	a = galloc(20);
	b = galloc(sizeof(frame));
	memset(gp(a), 0, 12);
	memcpy(gp(a + 12), frame, 8);
	memcpy(gp(b), frame + 8, sizeof(frame) - 8);
	post(1, (struct vd_buf[]){ { a, 20, false }, { b, sizeof(frame) - 8, false } }, 2);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 1));
	ck_assert_int_eq(peer_read_record(sv[1], got, sizeof(got)), sizeof(frame));
	ck_assert_mem_eq(got, frame, sizeof(frame));
	/* A header asking for a checksum offload that was not offered: dropped, not sent. */
	a = galloc(12 + 60);
	memset(gp(a), 0, 12 + 60);
	((struct virtio_net_hdr_v1 *)gp(a))->flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
	post(1, &(struct vd_buf){ a, 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 2));
	ck_assert(WAIT_STAT(1, drops, 1));
	ck_assert_uint_eq(STAT(1, packets), 1);
	ck_assert_uint_eq(STAT(1, bytes), sizeof(frame));

	/* RX: ten records in one write (a zero-length one among them), ten buffers. */
	for (int i = 0; i < 10; i++) {
		rx[i] = galloc(2048);
		memset(gp(rx[i]), 0xee, 12);
		post(0, &(struct vd_buf){ rx[i], 2048, true }, 1);
	}
	vd_kick(t.vdev, 0);
	{
		u8 burst[10 * (4 + 200) + 4], *p = burst;

		for (int i = 0; i < 10; i++) {
			size_t len = 60 + 10 * (size_t)i;

			p[0] = p[1] = 0;
			p[2] = (u8)(len >> 8);
			p[3] = (u8)len;
			fill_pattern(p + 4, len, (u8)i);
			p += 4 + len;
			if (i == 4) {
				memset(p, 0, 4); /* length 0: skipped */
				p += 4;
			}
		}
		ck_assert_uint_eq(write_full(sv[1], burst, (size_t)(p - burst)),
				  (size_t)(p - burst));
	}
	ck_assert(wait_used(0, 10));
	for (int i = 0; i < 10; i++) {
		struct virtio_net_hdr_v1 h;
		size_t len = 60 + 10 * (size_t)i;

		fill_pattern(frame, len, (u8)i);
		ck_assert_uint_eq(t.q[0].used->ring[i].len, 12 + len);
		memcpy(&h, gp(rx[i]), sizeof(h));
		ck_assert_uint_eq(h.flags, 0);
		ck_assert_uint_eq(h.gso_type, VIRTIO_NET_HDR_GSO_NONE);
		ck_assert_uint_eq(h.num_buffers, 1);
		ck_assert_mem_eq(gp(rx[i] + 12), frame, len);
	}
	ck_assert_uint_eq(STAT(0, packets), 10);
	ck_assert_uint_eq(STAT(0, drops), 0);

	/* A frame split across two writes arrives once whole. */
	rx[10] = galloc(2048);
	post(0, &(struct vd_buf){ rx[10], 2048, true }, 1);
	vd_kick(t.vdev, 0);
	fill_pattern(frame, 300, 77);
	{
		u8 rec[304] = { 0, 0, 300 >> 8, 300 & 0xff };

		memcpy(rec + 4, frame, 300);
		ck_assert_uint_eq(write_full(sv[1], rec, 150), 150);
		ck_assert(wait_thread_idle("lkvm-net-rx0"));
		ck_assert_uint_eq(used_idx(0), 10);
		ck_assert_uint_eq(write_full(sv[1], rec + 150, 154), 154);
	}
	ck_assert(wait_used(0, 11));
	ck_assert_mem_eq(gp(rx[10] + 12), frame, 300);

	/* The peer (passt) goes away: link down, one line, the guest's frames dropped. */
	capture_start(&cap);
	close(sv[1]);
	ck_assert(WAIT_UNTIL(WAIT_MS, atomic_load(&t.vdev->isr) & 2));
	t.vdev->ops->config_read(t.vdev, 0, (u8 *)&c, sizeof(c));
	ck_assert_uint_eq(c.status & VIRTIO_NET_S_LINK_UP, 0);
	post(1, &(struct vd_buf){ galloc(72), 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 3));
	ck_assert(WAIT_STAT(1, drops, 2));
	lines = capture_end(&cap, out, sizeof(out));
	ck_assert_int_eq(lines, 1);
	ck_assert_msg(strstr(out, "passt stream is gone") && strstr(out, "link down"), "%s", out);
	dev_destroy();
}
END_TEST

/* ---- notification suppression ---- */

START_TEST(event_idx_suppresses_interrupts)
{
	u8 frame[60] = { 0 };
	u16 *used_event, *avail_event;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_RING_F_EVENT_IDX), 256);
	used_event = &t.q[0].avail->ring[256];
	for (int i = 0; i < 4; i++)
		post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	ck_assert(irq_fired(0, WAIT_MS)); /* the first one always interrupts */
	/* Interrupt only after used idx passes 5: nothing for the next two. */
	__atomic_store_n(used_event, 4, __ATOMIC_RELEASE);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 2));
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 3));
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert(!irq_fired(0, 0));
	/* used_event = 3: the next element takes used idx from 3 to 4, crossing it. */
	__atomic_store_n(used_event, 3, __ATOMIC_RELEASE);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 4));
	ck_assert(irq_fired(0, WAIT_MS));
	ck_assert_uint_eq(STAT(0, irqs), 2);

	/* TX: after draining, avail_event asks for a kick at the next chain only. */
	avail_event = (u16 *)(void *)&t.q[1].used->ring[256];
	for (int i = 0; i < 3; i++)
		post(1, &(struct vd_buf){ galloc(72), 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 3));
	ck_assert(wait_cond_u16(avail_event, 3));
	dev_destroy();
}
END_TEST

START_TEST(no_interrupt_flag_respected)
{
	u8 frame[60] = { 0 };

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	t.q[0].avail->flags = VRING_AVAIL_F_NO_INTERRUPT;
	post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert(!irq_fired(0, 0));
	ck_assert_uint_eq(STAT(0, irqs), 0);
	dev_destroy();
}
END_TEST

/* ---- negotiation, config, lifecycle ---- */

START_TEST(features_negotiation)
{
	struct virtio_device *v;
	u64 off, ver = F(VIRTIO_F_VERSION_1);
	struct net_offloads o;

	dev_create(1, NULL);
	v = t.vdev;
	off = v->ops->get_features(v);
	ck_assert(!(off & F(VIRTIO_NET_F_MQ)));
	ck_assert(off & F(VIRTIO_RING_F_EVENT_IDX));
	ck_assert(off & F(VIRTIO_RING_F_INDIRECT_DESC));
	ck_assert(off & F(VIRTIO_NET_F_MRG_RXBUF));
	ck_assert(off & F(VIRTIO_NET_F_CTRL_RX));
	ck_assert(v->ops->features_ok(v, off | ver));
	ck_assert(v->ops->features_ok(v, ver));
	ck_assert(!v->ops->features_ok(v, off)); /* no VERSION_1 */
	ck_assert(!v->ops->features_ok(v, ver | F(VIRTIO_NET_F_GUEST_TSO4)));
	ck_assert(!v->ops->features_ok(v, ver | F(VIRTIO_NET_F_GUEST_TSO6)));
	ck_assert(v->ops->features_ok(v, ver | F(VIRTIO_NET_F_GUEST_TSO6) |
						 F(VIRTIO_NET_F_GUEST_CSUM)));
	ck_assert(!v->ops->features_ok(v, ver | F(VIRTIO_NET_F_HOST_TSO4)));
	ck_assert(!v->ops->features_ok(v, ver | F(VIRTIO_NET_F_HOST_TSO6)));
	ck_assert(v->ops->features_ok(v, ver | F(VIRTIO_NET_F_HOST_TSO4) | F(VIRTIO_NET_F_CSUM)));
	ck_assert(!v->ops->features_ok(v, ver | F(VIRTIO_NET_F_CTRL_RX)));
	ck_assert(!v->ops->features_ok(v, ver | F(VIRTIO_NET_F_MQ) | F(VIRTIO_NET_F_CTRL_VQ)));
	ck_assert(!v->ops->features_ok(v, ver | F(VIRTIO_NET_F_GUEST_UFO) |
						  F(VIRTIO_NET_F_GUEST_CSUM)));
	ck_assert_uint_eq(v->ops->device_id, 1);
	ck_assert_int_eq(v->nr_queues, 3);
	ck_assert_uint_eq(v->q[0].max_size, 256);
	/* Offloads follow the negotiated guest features at start. */
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_GUEST_CSUM) | F(VIRTIO_NET_F_GUEST_TSO4), 16);
	net_fake_offloads(t.be[0], &o);
	ck_assert(o.csum && o.tso4 && !o.tso6);
	dev_destroy();
}
END_TEST

START_TEST(config_space)
{
	struct virtio_net_config c;
	u8 b[4], big[64];
	struct net_opts o = { .mode = NET_MODE_FAKE,
			      .queue_pairs = 3,
			      .mac_set = true,
			      .guest_mac = { 2, 1, 2, 3, 4, 5 } };
	struct net_backend *be[NET_MAX_QUEUE_PAIRS] = { net_fake_create(), net_fake_create(),
							net_fake_create() };
	struct virtio_net *n2;
	struct virtio_device *v2;

	dev_create(1, NULL);
	ck_assert_uint_eq(t.vdev->ops->config_size, sizeof(c));
	t.vdev->ops->config_read(t.vdev, 0, (u8 *)&c, sizeof(c));
	ck_assert_mem_eq(c.mac, "\x52\x54\x00\x12\x34\x56", 6);
	ck_assert_uint_eq(c.status, VIRTIO_NET_S_LINK_UP);
	ck_assert_uint_eq(c.max_virtqueue_pairs, 1);
	t.vdev->ops->config_read(t.vdev, 5, b, 3); /* any offset and width */
	ck_assert_mem_eq(b, "\x56\x01\x00", 3);
	memset(big, 0xff, sizeof(big));
	t.vdev->ops->config_read(t.vdev, 20, big, 10); /* past the end reads as zero */
	for (int i = 0; i < 10; i++)
		ck_assert_uint_eq(big[i], 0);
	t.vdev->ops->config_write(t.vdev, 0, (const u8 *)"\xff\xff", 2); /* ignored */
	t.vdev->ops->config_read(t.vdev, 0, b, 2);
	ck_assert_mem_eq(b, "\x52\x54", 2);

	/* A second NIC: its own MAC, three pairs, seven queues. */
	ck_assert_int_eq(virtio_net_create_bare(vd.kvm, &o, be, &n2), 0);
	v2 = virtio_net_vdev(n2);
	v2->ops->config_read(v2, 0, (u8 *)&c, sizeof(c));
	ck_assert_mem_eq(c.mac, "\x02\x01\x02\x03\x04\x05", 6);
	ck_assert_uint_eq(c.max_virtqueue_pairs, 3);
	ck_assert_int_eq(v2->nr_queues, 7);
	virtio_net_destroy(n2); /* never started */
	o.mac_set = false;
	be[0] = net_fake_create();
	ck_assert_int_eq(virtio_net_create_bare(vd.kvm, &o, be, &n2), -EINVAL); /* be[1] missing */
	o.queue_pairs = 1;
	be[0] = net_fake_create();
	ck_assert_int_eq(virtio_net_create_bare(vd.kvm, &o, be, &n2), 0);
	virtio_net_vdev(n2)->ops->config_read(virtio_net_vdev(n2), 0, (u8 *)&c, sizeof(c));
	/* The device does not number NICs (lkvm run does: test_vm.c). */
	ck_assert_mem_eq(c.mac, "\x52\x54\x00\x12\x34\x56", 6);
	virtio_net_destroy(n2);
	dev_destroy();
}
END_TEST

/* Guest RAM is what it was at snap. */
static bool ram_is(const u8 *snap)
{
	return !memcmp(snap, vd.ram, RAM_SIZE);
}

/*
 * A paused NIC moves nothing: a frame the guest sends waits in the ring, one the host sends
 * waits in the backend, no guest byte changes and no interrupt is raised; after resume both
 * go through. For every TX strategy (kick, timer, poll: each waits in its own place).
 */
START_TEST(quiesce_holds_frames)
{
	static const enum net_tx_mode modes[] = { NET_TX_KICK, NET_TX_TIMER, NET_TX_POLL };
	u8 frame[60], out[200], *snap = malloc(RAM_SIZE);
	u64 rx, tx;

	ck_assert_ptr_nonnull(snap);
	dev_create_opts(1, NULL, (struct net_opts){ .tx_mode = modes[_i] });
	dev_start(BASE_FEATURES, 256);
	rx = galloc(2048);
	post(0, &(struct vd_buf){ rx, 2048, true }, 1);
	vd_kick(t.vdev, 0);
	virtio_net_quiesce(t.n);
	fill_pattern(frame, sizeof(frame), 9);
	tx = galloc(72);
	memcpy(gp(tx + 12), frame, sizeof(frame));
	post(1, &(struct vd_buf){ tx, 72, false }, 1);
	/* The memory as it stands, then what would wake the threads. */
	memcpy(snap, vd.ram, RAM_SIZE);
	vd_kick(t.vdev, 1);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(HOLDS_FOR(100, ram_is(snap) && net_fake_pending(t.be[0]) == 1));
	ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 0);
	ck_assert_uint_eq(STAT(0, irqs) + STAT(1, irqs), 0);
	virtio_net_resume(t.n);
	ck_assert(wait_used(1, 1));
	ck_assert(wait_used(0, 1));
	ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 72);
	ck_assert_mem_eq(out + 12, frame, sizeof(frame));
	ck_assert_mem_eq(gp(rx + 12), frame, sizeof(frame));
	dev_destroy();
	free(snap);
}
END_TEST

static void net_visit(void *dev, struct stats_visitor *v)
{
	virtio_net_stats(dev, v);
}

START_TEST(restart_and_stats)
{
	u8 frame[60] = { 0 };
	char *buf;
	int depth = 0;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	post(1, &(struct vd_buf){ galloc(72), 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 1));
	t.vdev->ops->stop(t.vdev);
	t.vdev->ops->stop(t.vdev); /* idempotent */
	ck_assert_int_eq(t.vdev->ops->start(t.vdev), 0);
	ck_assert_int_eq(t.vdev->ops->start(t.vdev), 0); /* restart without stop */
	post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	ck_assert_int_eq(count_threads("lkvm-net-rx0"), 1);

	buf = stats_fmt("net", t.n, net_visit, false);
	ck_assert_ptr_nonnull(strstr(buf, "net0:\n"));
	ck_assert_ptr_nonnull(strstr(buf, "pkts/kick"));
	ck_assert_ptr_nonnull(strstr(buf, "\nrx0 "));
	ck_assert_ptr_nonnull(strstr(buf, "\ntx0 "));
	ck_assert_ptr_nonnull(strstr(buf, "\nctrl "));
	free(buf);
	buf = stats_fmt("net", t.n, net_visit, true);
	ck_assert_ptr_nonnull(
		strstr(buf, "\"nets\":[{\"nic\":0,\"queues\":[{\"name\":\"rx0\",\"kicks\":1,"));
	ck_assert_ptr_nonnull(strstr(
		buf,
		"{\"name\":\"tx0\",\"kicks\":1,\"trapped\":0,\"irqs\":1,\"packets\":1,\"bytes\":60,"));
	ck_assert_ptr_nonnull(strstr(buf, "\"name\":\"ctrl\""));
	ck_assert_ptr_nonnull(strstr(buf, "\"pkts_per_irq\":null"));
	for (char *p = buf; *p; p++) {
		depth += (*p == '{' || *p == '[') - (*p == '}' || *p == ']');
		ck_assert_int_ge(depth, 0);
	}
	ck_assert_int_eq(depth, 0);
	ck_assert_int_eq(buf[strlen(buf) - 2], '}'); /* one JSON object per line */
	ck_assert_int_eq(buf[strlen(buf) - 1], '\n');
	free(buf);
	dev_destroy();
}
END_TEST

/* One rr transaction as net-bench's guest (trace=1) and the peer make it: bench frame seq
 * with its stamps out on tx0 (the n-th chain), echoed back into rx0's buffer; returns the TSC
 * when the guest saw the echo (G7). not_bench: an ordinary frame instead (EtherType 0x0800). */
static u64 rr_once(u64 seq, u64 g_seen, u16 n, bool not_bench)
{
	static const u8 mac[6] = { 2 };
	u64 tx = galloc(12 + BENCH_FRAME_MIN), g;
	u8 *f = (u8 *)gp(tx) + 12, echo[12 + BENCH_FRAME_MIN];
	ssize_t len = 0;

	post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	memset(gp(tx), 0, 12 + BENCH_FRAME_MIN);
	g = __rdtsc();
	bench_frame_head(f, mac, BENCH_TEST_RR);
	if (not_bench)
		f[BENCH_OFF_ETHERTYPE] = 0x08;
	memcpy(f + BENCH_OFF_SEQ, &seq, 8);
	memcpy(f + BENCH_OFF_T_WRITE, &g, 8);
	memcpy(f + BENCH_OFF_T_SEEN, &g_seen, 8);
	g = __rdtsc();
	memcpy(f + BENCH_OFF_T_KICK, &g, 8);
	post(1, &(struct vd_buf){ tx, 12 + BENCH_FRAME_MIN, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, n));
	ck_assert(WAIT_UNTIL(WAIT_MS, (len = net_fake_take(t.be[0], echo, sizeof(echo))) > 0));
	ck_assert_int_eq(net_fake_inject(t.be[0], echo + 12, (size_t)len - 12), 0);
	ck_assert(wait_used(0, n));
	return __rdtsc();
}

/* The "trace" group's counter name, from the JSON line. */
static u64 trace_counter(const char *name)
{
	char *buf = stats_fmt("net", t.n, net_visit, true), key[48], *p;
	u64 v;

	snprintf(key, sizeof(key), "\"%s\":", name);
	p = strstr(buf, "\"trace\":{");
	ck_assert_msg(p && strstr(p, key), "%s", buf);
	v = strtoull(strstr(p, key) + strlen(key), NULL, 10);
	free(buf);
	return v;
}

/* -n trace=on: ten rr transactions (the test plays the guest and the peer) give nine timed
 * ones (the last waits for its successor's G7), none bad, each stage measured; a frame that
 * is no bench frame changes nothing. trace=off: no group "trace". */
START_TEST(trace_round_trips)
{
	u64 seen = 0;
	char *buf;

	dev_create_opts(1, NULL, (struct net_opts){ .trace = true });
	vd.kvm->guest_tsc = (struct kvm_guest_tsc){ .khz = 1000000 }; /* as kvm_run_setup would */
	dev_start(BASE_FEATURES, 256);
	rr_once(7, 0, 1, true);
	for (u16 i = 0; i < 10; i++)
		seen = rr_once(100 + i, seen, (u16)(i + 2), false);
	ck_assert_uint_eq(trace_counter("transactions"), 9);
	ck_assert_uint_eq(trace_counter("bad"), 0);
	ck_assert_uint_eq(trace_counter("tsc_khz"), 1000000);
	ck_assert_uint_gt(trace_counter("tx_p50_ns"), 0);
	ck_assert_uint_gt(trace_counter("notice_p99_ns"), 0);
	dev_destroy();

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	rr_once(1, 0, 1, false);
	buf = stats_fmt("net", t.n, net_visit, true);
	ck_assert_ptr_null(strstr(buf, "trace"));
	free(buf);
	dev_destroy();
}
END_TEST

/* ---- batch=on: a batch call in doubt ---- */

/* A backend whose batch call fails with requests left in flight (NET_BATCH_IN_DOUBT, as tap-uring
 * says when io_uring_submit took only some SQEs, or submitting the cancels or waiting failed).
 * It keeps the first io's iovecs, which the kernel could still reach. */
static struct {
	const struct iovec *iov;
	int iovcnt, calls;
} doubt;

static int doubt_batch(struct net_backend *be, struct net_io *io, int n)
{
	if (!doubt.calls++) {
		doubt.iov = io[0].iov;
		doubt.iovcnt = io[0].iovcnt;
	}
	return NET_BATCH_IN_DOUBT;
}

/*
 * batch=on, a batch call in doubt (_i = 0: RX, 1: TX): the device never hands back or reuses the
 * chains of that call (no used element, none unpopped, at stop neither) and puts itself in
 * NEEDS_RESET; the memory the requests point at stays alive after the device is gone: the late
 * write of an RX read into its slot's spill area, or the kernel reading the iovec array of a TX
 * chain, is no use-after-free (run under ASan: make ASAN=1).
 */
START_TEST(batch_in_doubt_keeps_memory)
{
	static struct net_backend_ops ops;
	struct net_backend *fb = net_fake_create();
	int qi = _i ? 1 : 0;
	u16 avail;

	ck_assert_ptr_nonnull(fb);
	ops = *fb->ops;
	if (_i)
		ops.send_batch = doubt_batch;
	else
		ops.recv_batch = doubt_batch;
	fb->ops = &ops;
	memset(&doubt, 0, sizeof(doubt));
	dev_create_opts(1, fb, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	ck_assert(wait_thread_idle(_i ? "lkvm-net-tx0" : "lkvm-net-rx0"));
	if (_i) {
		post_tx(4, 72);
	} else {
		for (int i = 0; i < 4; i++)
			post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
		ck_assert_int_eq(net_fake_inject(fb, "frame", 5), 0);
	}
	vd_kick(t.vdev, qi);
	ck_assert(wait_needs_reset());
	ck_assert(wait_thread_idle(_i ? "lkvm-net-tx0" : "lkvm-net-rx0"));
	ck_assert_int_eq(doubt.calls, 1);
	ck_assert_ptr_nonnull(doubt.iov);
	avail = t.vdev->q[qi].vq.last_avail;
	ck_assert_uint_eq(avail, 4);
	ck_assert_uint_eq(used_idx(qi), 0);
	t.vdev->ops->stop(t.vdev);
	ck_assert_uint_eq(t.vdev->q[qi].vq.last_avail, avail);
	ck_assert_uint_eq(used_idx(qi), 0);
	dev_destroy();
	/* What the kernel may still do with the requests in flight, after everything is gone. */
	if (_i) {
		ck_assert_int_eq(doubt.iovcnt, 1);
		ck_assert_uint_eq(((volatile const struct iovec *)doubt.iov)->iov_len, 72);
	} else {
		const struct iovec *spill = &doubt.iov[doubt.iovcnt - 1];

		ck_assert_int_eq(doubt.iovcnt, 2);
		memset(spill->iov_base, 0xab, spill->iov_len);
	}
}
END_TEST

/* The device tests that run on both data paths, batch=off and batch=on. */
static void add_both_paths(TCase *tc)
{
	tcase_add_loop_test(tc, quiesce_holds_frames, 0, 3);
	tcase_add_test(tc, backend_gone_link_down);
	tcase_add_test(tc, event_idx_suppresses_interrupts);
	tcase_add_test(tc, no_interrupt_flag_respected);
	tcase_add_test(tc, features_negotiation);
	tcase_add_test(tc, config_space);
	tcase_add_test(tc, restart_and_stats);
	tcase_add_test(tc, trace_round_trips);
}

/* batch=off's own: the stream backend (no batch). */
static void device_own(TCase *tc)
{
	tcase_add_test(tc, stream_backend_moves_frames);
}

static void batch_own(TCase *tc)
{
	tcase_add_loop_test(tc, batch_in_doubt_keeps_memory, 0, 2);
}

static Suite *virtio_net_suite(void)
{
	return vnet_suite("virtio_net", add_both_paths, device_own, batch_own);
}

LKVM_CHECK_MAIN(virtio_net_suite)

/* Unit tests of virtio-net in a snapshot (virtio/net-snap.c): a NIC driven over fake backends and saved paused, a new one from the same options loaded from it goes on with the right indices; hostile sections refused. */
#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "check_main.h"
#include "vnet.h"
#include "lkvm/snap.h"

#define FEATS (BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF))
#define BIG 3000 /* a frame longer than one 1024-byte receive buffer */

/* The records' layout (virtio/net-snap.c), for the hostile edits. */
#define TAG_STATE 48
#define TAG_RX 49
#define ST_PAIRS 6
#define ST_CURR 8
#define ST_MODE 10
#define ST_PROMISC 11
#define RX_UNPOP 0
#define RX_NZERO 2
#define RX_ZERO 4
#define RX_LOST 132

/* ---- A and B in one VM: A saved and gone, B made from the same options ---- */

/* A's driver negotiated as a FEATURES_OK write records it (the core's record compares). */
static void nic_up(int pairs, u64 feats)
{
	dev_create(pairs, NULL);
	dev_start(feats, 256);
	t.vdev->driver_features = t.vdev->features;
}

/* Save A, paused as lkvm pause does (virtio_net_quiesce), into b, and destroy it; the VM and
 * its rings stay. */
static void nic_save_gone(struct snap_rec_buf *b)
{
	char err[256] = "";
	struct vd_fds fds;

	ck_assert_msg(virtio_net_save(t.n, b, err, sizeof(err)) == 0, "%s", err);
	vd_fds_save(&fds, t.vdev, t.nq);
	virtio_net_destroy(t.n);
	vd_fds_close(&fds);
	t.n = NULL;
	t.vdev = NULL;
}

/* B: new fake backends (the new process's), the device, the eventfds a transport makes. */
static void nic_b(int pairs)
{
	for (int i = 0; i < pairs; i++)
		ck_assert_ptr_nonnull(t.be[i] = net_fake_create());
	dev_create_be(pairs, (struct net_opts){ .mode = NET_MODE_FAKE });
	for (int qi = 0; qi < t.nq; qi++) {
		t.vdev->q[qi].kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		t.vdev->q[qi].irq_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	}
}

static void nic_b_gone(void)
{
	struct vd_fds fds;

	vd_fds_save(&fds, t.vdev, t.nq);
	virtio_net_destroy(t.n);
	vd_fds_close(&fds);
}

static u16 num_buffers(u64 gpa)
{
	struct virtio_net_hdr_v1 h;

	memcpy(&h, gp(gpa), sizeof(h));
	return h.num_buffers;
}

/* A read its frames with the fake's batch calls (batch=on). */
static bool a_batched;

/* A: 3 frames sent, one received, then a BIG frame with one 1024-byte buffer posted (its head
 * in *held): batch=off holds that buffer and leaves the frame in the backend; batch=on has
 * read the frame into the buffer and its spill and waits for more buffers. Saved into b. */
static void nic_a_traffic(struct snap_rec_buf *b, u16 *held)
{
	u8 frame[60], out[200];
	u64 buf;

	nic_up(1, FEATS);
	post_tx(3, 100);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 3));
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 100);
	buf = galloc(2048);
	post(0, &(struct vd_buf){ buf, 2048, true }, 1);
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 1);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	*held = post(0, &(struct vd_buf){ galloc(1024), 1024, true }, 1);
	vd_kick(t.vdev, 0);
	{
		u8 big[BIG];

		fill_pattern(big, sizeof(big), 7);
		ck_assert_int_eq(net_fake_inject(t.be[0], big, sizeof(big)), 0);
	}
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	virtio_net_quiesce(t.n);
	ck_assert_uint_eq(t.vdev->q[0].vq.last_avail, 2); /* the 1024-byte buffer held */
	ck_assert_uint_eq(used_idx(0), 1);
	a_batched = fake_batches(false) > 0;
	nic_save_gone(b);
}

/* B goes on where A stopped: the held buffer is back in the ring (last_avail 1), nothing else
 * in flight; once started, the next frame takes it first and two more (num_buffers 3, used
 * index 4, an interrupt), and the next TX chain goes out as used element 3. */
START_TEST(nic_restore)
{
	struct snap_rec_buf b = { 0 };
	u8 big[BIG], out[200];
	char err[256] = "";
	u64 bufs[3];
	u16 held;

	nic_a_traffic(&b, &held);
	nic_b(1);
	ck_assert_msg(virtio_net_load(t.n, b.buf, b.len, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(t.vdev->q[0].vq.last_avail, 1);
	ck_assert_uint_eq(t.vdev->q[0].vq.used_idx, 1);
	ck_assert_uint_eq(t.vdev->q[1].vq.last_avail, 3);
	ck_assert_uint_eq(t.vdev->q[1].vq.used_idx, 3);
	/* batch=on had read the frame: the restored NIC lost it (a drop); batch=off had not. */
	ck_assert_uint_eq(STAT(0, drops), a_batched ? 1 : 0);
	virtio_net_start(t.n);
	fill_pattern(big, sizeof(big), 7);
	ck_assert_int_eq(net_fake_inject(t.be[0], big, sizeof(big)), 0);
	bufs[0] = t.q[0].desc[held].addr;
	for (int i = 1; i < 3; i++) {
		bufs[i] = galloc(1024);
		post(0, &(struct vd_buf){ bufs[i], 1024, true }, 1);
	}
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(0, 4));
	ck_assert_uint_eq(t.q[0].used->ring[1].id, held);
	ck_assert_uint_eq(t.q[0].used->ring[1].len, 1024);
	ck_assert_uint_eq(t.q[0].used->ring[3].len, BIG + 12 - 2048);
	ck_assert_uint_eq(num_buffers(bufs[0]), 3);
	ck_assert_mem_eq(gp(bufs[0] + 12), big, 1012);
	ck_assert_mem_eq(gp(bufs[1]), big + 1012, 1024);
	ck_assert_mem_eq(gp(bufs[2]), big + 2036, BIG - 2036);
	ck_assert(irq_fired(0, WAIT_MS));
	post_tx(1, 100);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 4));
	ck_assert(WAIT_UNTIL(WAIT_MS, net_fake_take(t.be[0], out, sizeof(out)) == 100));
	snap_rec_free(&b);
	dev_destroy();
}
END_TEST

/* Send one control command with a 1-byte status; returns the ack. */
static u8 ctl(int qi, const void *cmd, u32 len)
{
	u64 a = galloc(len), st = galloc(1);
	u16 want = (u16)(used_idx(qi) + 1);

	memcpy(gp(a), cmd, len);
	*(u8 *)gp(st) = 0xaa;
	post(qi, (struct vd_buf[]){ { a, len, false }, { st, 1, true } }, 2);
	vd_kick(t.vdev, qi);
	ck_assert(wait_used(qi, want));
	return *(u8 *)gp(st);
}

/* Two pairs, both receiving (VQ_PAIRS_SET), a MAC the guest set: B receives on pair 1 again
 * (its backend queue attached by the start), reads the guest's MAC, and its control queue goes
 * on with the next index. */
START_TEST(nic_restore_mq)
{
	u8 pairs2[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 2, 0 };
	u8 mac[] = { VIRTIO_NET_CTRL_MAC, VIRTIO_NET_CTRL_MAC_ADDR_SET, 2, 0, 0, 0xaa, 0xbb, 0xcc };
	u8 promisc[] = { VIRTIO_NET_CTRL_RX, VIRTIO_NET_CTRL_RX_PROMISC, 1 };
	struct snap_rec_buf b = { 0 };
	u8 frame[60], cfg[6];
	char err[256] = "";
	u64 buf;

	nic_up(2, FEATS | F(VIRTIO_NET_F_MQ) | F(VIRTIO_NET_F_CTRL_RX));
	ck_assert_uint_eq(ctl(4, pairs2, sizeof(pairs2)), VIRTIO_NET_OK);
	ck_assert_uint_eq(ctl(4, mac, sizeof(mac)), VIRTIO_NET_OK);
	ck_assert_uint_eq(ctl(4, promisc, sizeof(promisc)), VIRTIO_NET_OK);
	virtio_net_quiesce(t.n);
	nic_save_gone(&b);
	nic_b(2);
	ck_assert(!net_fake_enabled(t.be[1])); /* as made: pair 0 alone */
	ck_assert_msg(virtio_net_load(t.n, b.buf, b.len, err, sizeof(err)) == 0, "%s", err);
	virtio_net_start(t.n);
	ck_assert(net_fake_enabled(t.be[1]));
	t.vdev->ops->config_read(t.vdev, 0, cfg, sizeof(cfg));
	ck_assert_mem_eq(cfg, mac + 2, 6);
	buf = galloc(2048);
	post(2, &(struct vd_buf){ buf, 2048, true }, 1);
	vd_kick(t.vdev, 2);
	fill_pattern(frame, sizeof(frame), 3);
	ck_assert_int_eq(net_fake_inject(t.be[1], frame, sizeof(frame)), 0);
	ck_assert(wait_used(2, 1));
	ck_assert_mem_eq(gp(buf + 12), frame, sizeof(frame));
	promisc[2] = 0;
	ck_assert_uint_eq(ctl(4, promisc, sizeof(promisc)), VIRTIO_NET_OK);
	ck_assert_uint_eq(used_idx(4), 4);
	snap_rec_free(&b);
	dev_destroy();
}
END_TEST

/* A held buffer that was not the last popped (batch=on, rx_slots_release) comes back to the
 * guest as used with length 0 at load, with the next used index; nothing is unpopped. */
START_TEST(nic_load_used_zero)
{
	struct snap_rec_buf b = { 0 }, z = { 0 };
	struct snap_rec_iter it;
	char err[256] = "";
	const void *data;
	u32 len;
	u16 tag, held;

	nic_a_traffic(&b, &held);
	it = (struct snap_rec_iter){ b.buf, b.len };
	while (snap_rec_next(&it, &tag, &data, &len) == 1) {
		u8 r[140];

		if (tag != TAG_RX) {
			snap_rec_put(&z, tag, data, len);
			continue;
		}
		ck_assert_uint_eq(len, sizeof(r));
		memcpy(r, data, len);
		memcpy(r + RX_UNPOP, &(u16){ 0 }, 2);
		memcpy(r + RX_NZERO, &(u16){ 1 }, 2);
		memcpy(r + RX_ZERO, &held, 2);
		snap_rec_put(&z, tag, r, len);
	}
	nic_b(1);
	ck_assert_msg(virtio_net_load(t.n, z.buf, z.len, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(t.vdev->q[0].vq.last_avail, 2);
	ck_assert_uint_eq(used_idx(0), 2);
	ck_assert_uint_eq(t.q[0].used->ring[1].id, held);
	ck_assert_uint_eq(t.q[0].used->ring[1].len, 0);
	virtio_net_start(t.n);
	snap_rec_free(&z);
	snap_rec_free(&b);
	dev_destroy();
}
END_TEST

/* ---- hostile sections ---- */

/* A copy of in with record `which` dropped (drop) or its length changed by -delta, and the
 * first record of tag `tag` edited. */
struct mutation {
	int which;
	bool drop;
	int delta;
	u16 tag;
	void (*edit)(u8 *data);
};

static void mutate(const struct snap_rec_buf *in, struct snap_rec_buf *out,
		   const struct mutation *m)
{
	struct snap_rec_iter it = { in->buf, in->len };
	const void *data;
	bool edited = false;
	u8 buf[1024];
	u32 len;
	u16 tag;

	for (int i = 0; snap_rec_next(&it, &tag, &data, &len) == 1; i++) {
		ck_assert_uint_le(len + 1, sizeof(buf));
		memcpy(buf, data, len);
		buf[len] = 0xa5;
		if (m->edit && tag == m->tag && !edited) {
			m->edit(buf);
			edited = true;
		}
		if (i != m->which)
			snap_rec_put(out, tag, buf, len);
		else if (!m->drop)
			snap_rec_put(out, tag, buf, len - (u32)m->delta);
	}
	ck_assert_int_eq(out->err, 0);
}

/* A new B refuses sec: -EINVAL, a one-line reason (containing want when given), B left reset
 * (nothing started by virtio_net_start). */
static void refused(const struct snap_rec_buf *good, const struct mutation *m, const char *what,
		    const char *want)
{
	struct snap_rec_buf bad = { 0 };
	char err[256] = "";
	int ret;

	mutate(good, &bad, m);
	nic_b(1);
	ret = virtio_net_load(t.n, bad.buf, bad.len, err, sizeof(err));
	ck_assert_msg(ret == -EINVAL, "%s: load returned %d (%s)", what, ret, err);
	ck_assert_msg(*err && !strchr(err, '\n'), "%s: no one-line reason", what);
	ck_assert_msg(!want || strstr(err, want), "%s: \"%s\"", what, err);
	ck_assert_uint_eq(atomic_load(&t.vdev->status), 0);
	virtio_net_start(t.n);
	ck_assert_int_eq(count_threads("lkvm-net-rx0"), 0);
	nic_b_gone();
	snap_rec_free(&bad);
}

static void put16(u8 *p, int off, u16 v)
{
	memcpy(p + off, &v, sizeof(v));
}

static void e_mode_tap(u8 *p)
{
	p[ST_MODE] = NET_MODE_TAP;
}
static void e_pairs2(u8 *p)
{
	put16(p, ST_PAIRS, 2);
}
static void e_curr0(u8 *p)
{
	put16(p, ST_CURR, 0);
}
static void e_curr2(u8 *p)
{
	put16(p, ST_PAIRS, 2);
	put16(p, ST_CURR, 2);
}
static void e_promisc2(u8 *p)
{
	p[ST_PROMISC] = 2;
}
static void e_unpop0(u8 *p)
{
	put16(p, RX_UNPOP, 0);
}
static void e_unpop2(u8 *p)
{
	put16(p, RX_UNPOP, 2);
}
static void e_zero_range(u8 *p)
{
	put16(p, RX_UNPOP, 0);
	put16(p, RX_NZERO, 1);
	put16(p, RX_ZERO, 256);
}
static void e_nzero65(u8 *p)
{
	put16(p, RX_NZERO, 65);
}
static void e_lost(u8 *p)
{
	u32 v = 1000;

	memcpy(p + RX_LOST, &v, sizeof(v));
}

/* Each record dropped, shorter or longer; each field out of range; a backend of another mode. */
START_TEST(nic_hostile)
{
	static const struct {
		u16 tag;
		void (*edit)(u8 *p);
		const char *want;
	} edits[] = {
		{ TAG_STATE, e_mode_tap, "the snapshot's backend was tap, this one is fake" },
		{ TAG_STATE, e_pairs2, "queue pairs" },
		{ TAG_STATE, e_curr0, "queue pairs" },
		{ TAG_STATE, e_curr2, "queue pairs" },
		{ TAG_STATE, e_promisc2, "rx mode" },
		{ TAG_RX, e_unpop0, "queue 0: 1 chains in flight, 0 held" },
		{ TAG_RX, e_unpop2, "rx0" },
		{ TAG_RX, e_zero_range, "out of range" },
		{ TAG_RX, e_nzero65, "rx0" },
		{ TAG_RX, e_lost, "lost" },
	};
	struct snap_rec_buf good = { 0 }, extra = { 0 };
	struct snap_rec_iter it;
	const void *data;
	u32 len;
	u16 tag, held;
	int n = 0;

	nic_a_traffic(&good, &held);
	it = (struct snap_rec_iter){ good.buf, good.len };
	while (snap_rec_next(&it, &tag, &data, &len) == 1) {
		for (int delta = -1; delta <= 1; delta++)
			refused(&good,
				&(struct mutation){ .which = n, .drop = !delta, .delta = delta },
				"a record cut", NULL);
		n++;
	}
	for (size_t i = 0; i < ARRAY_SIZE(edits); i++)
		refused(&good,
			&(struct mutation){
				.which = -1, .tag = edits[i].tag, .edit = edits[i].edit },
			edits[i].want, edits[i].want);
	/* A receive record for a pair this NIC does not have. */
	mutate(&good, &extra, &(struct mutation){ .which = -1 });
	snap_rec_put(&extra, TAG_RX + 1, (u8[140]){ 0 }, 140);
	refused(&extra, &(struct mutation){ .which = -1 }, "pair 1", "not on this NIC");
	snap_rec_free(&extra);
	snap_rec_free(&good);
	vd_vm_free();
	memset(&t, 0, sizeof(t));
}
END_TEST

static void add_both_paths(TCase *tc)
{
	tcase_add_test(tc, nic_restore);
	tcase_add_test(tc, nic_restore_mq);
	tcase_add_test(tc, nic_load_used_zero);
	tcase_add_test(tc, nic_hostile);
}

static Suite *virtio_net_snap_suite(void)
{
	return vnet_suite("virtio_net_snap", add_both_paths, NULL, NULL);
}

LKVM_CHECK_MAIN(virtio_net_snap_suite)

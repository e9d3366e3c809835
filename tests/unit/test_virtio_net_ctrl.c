/* Unit tests for virtio-net's control queue: its commands, and the queue pairs VQ_PAIRS_SET turns on (over fake backends and over a real two-queue tap). */
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "tap_host.h"
#include "vnet.h"

/* ---- control queue ---- */

/* Send one command (readable parts as given) with a 1-byte status; returns the ack. */
static u8 ctl(int qi, const void *cmd, u32 len, u32 split)
{
	u64 a = galloc(len + 1), st = galloc(1);
	u16 want = (u16)(used_idx(qi) + 1);
	struct vd_buf b[3];
	int nb = 0;

	if (len)
		memcpy(gp(a), cmd, len);
	*(u8 *)gp(st) = 0xaa;
	if (split && split < len) {
		b[nb++] = (struct vd_buf){ a, split, false };
		b[nb++] = (struct vd_buf){ a + split, len - split, false };
	} else if (len) {
		b[nb++] = (struct vd_buf){ a, len, false };
	}
	b[nb++] = (struct vd_buf){ st, 1, true };
	post(qi, b, nb);
	vd_kick(t.vdev, qi);
	ck_assert(wait_used(qi, want));
	ck_assert_uint_eq(t.q[qi].used->ring[(u16)(want - 1) % t.q[qi].size].len, 1);
	return *(u8 *)gp(st);
}

START_TEST(ctrl_commands)
{
	u8 promisc[] = { VIRTIO_NET_CTRL_RX, VIRTIO_NET_CTRL_RX_PROMISC, 1 };
	u8 allmulti_bad[] = { VIRTIO_NET_CTRL_RX, VIRTIO_NET_CTRL_RX_ALLMULTI };
	u8 mac_set[] = {
		VIRTIO_NET_CTRL_MAC, VIRTIO_NET_CTRL_MAC_ADDR_SET, 2, 0, 0, 0xaa, 0xbb, 0xcc
	};
	u8 mac_short[] = { VIRTIO_NET_CTRL_MAC, VIRTIO_NET_CTRL_MAC_ADDR_SET, 2, 0, 0 };
	u8 table[2 + 4 + 6 + 4 + 12] = { VIRTIO_NET_CTRL_MAC, VIRTIO_NET_CTRL_MAC_TABLE_SET, 1 };
	u8 table_bad[2 + 4 + 6 + 4] = { VIRTIO_NET_CTRL_MAC,
					VIRTIO_NET_CTRL_MAC_TABLE_SET,
					1,
					0,
					0,
					0,
					1,
					2,
					3,
					4,
					5,
					6,
					0xff,
					0xff,
					0xff,
					0xff };
	u8 mq[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 1, 0 };
	u8 unknown[] = { 99, 0, 0 };
	u8 vlan[] = { VIRTIO_NET_CTRL_VLAN, VIRTIO_NET_CTRL_VLAN_ADD, 1, 0 };
	u8 one[] = { VIRTIO_NET_CTRL_RX };
	u8 mac[6];

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_CTRL_RX), 64);
	table[2 + 4 + 6] = 2; /* second table: 2 entries */
	ck_assert_uint_eq(ctl(2, promisc, sizeof(promisc), 0), VIRTIO_NET_OK);
	ck_assert_uint_eq(ctl(2, promisc, sizeof(promisc), 1), VIRTIO_NET_OK); /* header split */
	ck_assert_uint_eq(ctl(2, allmulti_bad, sizeof(allmulti_bad), 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(2, mac_set, sizeof(mac_set), 5), VIRTIO_NET_OK);
	t.vdev->ops->config_read(t.vdev, 0, mac, 6);
	ck_assert_mem_eq(mac, "\x02\x00\x00\xaa\xbb\xcc", 6);
	ck_assert_uint_eq(ctl(2, mac_short, sizeof(mac_short), 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(2, table, sizeof(table), 9), VIRTIO_NET_OK);
	ck_assert_uint_eq(ctl(2, table, sizeof(table) - 1, 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(2, table_bad, sizeof(table_bad), 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(2, mq, sizeof(mq), 0), VIRTIO_NET_ERR); /* MQ not negotiated */
	ck_assert_uint_eq(ctl(2, unknown, sizeof(unknown), 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(2, vlan, sizeof(vlan), 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(2, one, sizeof(one), 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(2, NULL, 0, 0), VIRTIO_NET_ERR);
	/* No status byte: given back with length 0, queue still fine. */
	post(2, &(struct vd_buf){ galloc(3), 3, false }, 1);
	vd_kick(t.vdev, 2);
	ck_assert(wait_used(2, 14));
	ck_assert_uint_eq(t.q[2].used->ring[13].len, 0);
	ck_assert_uint_eq(ctl(2, promisc, sizeof(promisc), 0), VIRTIO_NET_OK);
	ck_assert(!(atomic_load(&t.vdev->status) & VIRTIO_CONFIG_S_NEEDS_RESET));
	/* A malformed chain does break it. */
	post(2, &(struct vd_buf){ RAM_SIZE, 16, false }, 1);
	vd_kick(t.vdev, 2);
	ck_assert(wait_needs_reset());
	dev_destroy();
}
END_TEST

/* ---- multiqueue: the pairs VQ_PAIRS_SET enables ---- */

START_TEST(multiqueue_pairs)
{
	u8 mq2[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 2, 0 };
	u8 mq3[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 3, 0 };
	u8 mq0[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 0, 0 };
	u8 out[128], frame[60] = { 0x33 };
	u64 g, rx;

	dev_create(2, NULL);
	ck_assert(t.vdev->ops->get_features(t.vdev) & F(VIRTIO_NET_F_MQ));
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MQ), 256);
	ck_assert_int_eq(count_threads("lkvm-net-rx0"), 1);
	ck_assert_int_eq(count_threads("lkvm-net-tx1"), 1);
	ck_assert_int_eq(count_threads("lkvm-net-ctl"), 1);
	/* Control queue is queue 4. */
	ck_assert_uint_eq(ctl(4, mq2, sizeof(mq2), 0), VIRTIO_NET_OK);
	ck_assert_uint_eq(ctl(4, mq3, sizeof(mq3), 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(4, mq0, sizeof(mq0), 0), VIRTIO_NET_ERR);
	/* tx1 goes to the second backend, rx1 comes from it. */
	g = galloc(80);
	memset(gp(g), 0, 80);
	post(3, &(struct vd_buf){ g, 80, false }, 1);
	vd_kick(t.vdev, 3);
	ck_assert(wait_used(3, 1));
	ck_assert_int_eq(net_fake_take(t.be[1], out, sizeof(out)), 80);
	ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 0);
	rx = galloc(2048);
	post(2, &(struct vd_buf){ rx, 2048, true }, 1);
	vd_kick(t.vdev, 2);
	ck_assert_int_eq(net_fake_inject(t.be[1], frame, sizeof(frame)), 0);
	ck_assert(wait_used(2, 1));
	ck_assert_uint_eq(STAT(2, packets), 1);
	ck_assert_uint_eq(STAT(0, packets), 0);
	dev_destroy();
	ck_assert_int_eq(count_threads("lkvm-net-tx1"), 0);
}
END_TEST

/* Only the pairs the driver enabled receive (virtio 1.2 5.1.6.5.5): pair 0 alone from
 * creation, at start and after a reset; VQ_PAIRS_SET moves the others' backend queues in and
 * out of the host's steering; a bad command is refused and changes nothing. */
START_TEST(multiqueue_active_pairs)
{
	u8 mq1[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 1, 0 };
	u8 mq2[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 2, 0 };
	u8 bad[][5] = {
		{ VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 0, 0 },	  /* no pair */
		{ VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 3, 0 },	  /* > max */
		{ VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 0, 1 },	  /* 256 */
		{ VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 2 },	  /* short */
		{ VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 2, 0, 0 }, /* long */
		{ VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_RSS_CONFIG, 2, 0 },	  /* no RSS */
	};
	u32 bad_len[] = { 4, 4, 4, 3, 5, 4 };
	u8 frame[60] = { 0x33 }, out[128];
	u64 tx;

	dev_create(2, NULL);
	tx = galloc(80);
	ck_assert(net_fake_enabled(t.be[0]));
	ck_assert(!net_fake_enabled(t.be[1]));
	ck_assert_int_eq(net_fake_inject(t.be[1], frame, sizeof(frame)), -ENOLINK);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MQ), 256);
	ck_assert(!net_fake_enabled(t.be[1]));
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 4; j++)
			post(2 * i, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
		vd_kick(t.vdev, 2 * i);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		ck_assert_uint_eq(ctl(4, bad[i], bad_len[i], 0), VIRTIO_NET_ERR);
		ck_assert(!net_fake_enabled(t.be[1]));
	}
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	/* A chain the driver leaves on an inactive pair's TX queue still goes out. */
	memset(gp(tx), 0, 80);
	post(3, &(struct vd_buf){ tx, 80, false }, 1);
	vd_kick(t.vdev, 3);
	ck_assert(wait_used(3, 1));
	ck_assert_int_eq(net_fake_take(t.be[1], out, sizeof(out)), 80);

	ck_assert_uint_eq(ctl(4, mq2, sizeof(mq2), 0), VIRTIO_NET_OK);
	ck_assert(net_fake_enabled(t.be[1]));
	ck_assert_int_eq(net_fake_inject(t.be[1], frame, sizeof(frame)), 0);
	ck_assert(wait_used(2, 1));
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		ck_assert_uint_eq(ctl(4, bad[i], bad_len[i], 0), VIRTIO_NET_ERR);
		ck_assert(net_fake_enabled(t.be[1]));
	}
	ck_assert_uint_eq(ctl(4, mq1, sizeof(mq1), 0), VIRTIO_NET_OK);
	ck_assert(!net_fake_enabled(t.be[1]));
	ck_assert_uint_eq(ctl(4, mq2, sizeof(mq2), 0), VIRTIO_NET_OK);
	ck_assert(net_fake_enabled(t.be[1]));
	/* A reset: pair 0 alone again. */
	virtio_device_reset(t.vdev);
	ck_assert(!net_fake_enabled(t.be[1]));
	ck_assert_uint_eq(STAT(2, packets), 1);
	dev_destroy();
}
END_TEST

/* The same over a real two-queue tap: flows the host sends reach only pair 0 until
 * VQ_PAIRS_SET 2, then both pairs (the tap spreads them by hash), and after a reset the
 * second queue is out of the steering again. */
START_TEST(multiqueue_tap_steering)
{
	static const u8 mac[6] = VIRTIO_NET_DEFAULT_MAC;
	u8 mq2[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 2, 0 };
	struct net_opts o;
	char err[160];
	u64 rx0;
	int ps;

	enter_netns();
	memset(&t, 0, sizeof(t));
	vd_vm_new(RAM_SIZE, BUF_BASE);
	ck_assert_int_eq(net_parse_opts("tapif=lkvmv0,queues=2,script=none", &o, err, sizeof(err)),
			 0);
	ck_assert_msg(net_tap_open(&o, t.be, 2, err, sizeof(err)) == 0, "%s", err);
	dev_create_be(2, o);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MQ), 256);
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 200; j++)
			post(2 * i, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
		vd_kick(t.vdev, 2 * i);
	}
	ps = tap_host_socket("lkvmv0");
	tap_send_flows(ps, mac, 64);
	ck_assert(WAIT_UNTIL(WAIT_MS, STAT(0, packets) >= 64));
	ck_assert_uint_eq(STAT(2, packets), 0);
	ck_assert_uint_eq(used_idx(2), 0);

	ck_assert_uint_eq(ctl(4, mq2, sizeof(mq2), 0), VIRTIO_NET_OK);
	rx0 = STAT(0, packets);
	tap_send_flows(ps, mac, 64);
	ck_assert(WAIT_UNTIL(WAIT_MS, STAT(0, packets) + STAT(2, packets) >= rx0 + 64));
	ck_assert_uint_gt(STAT(0, packets), rx0);
	ck_assert_uint_gt(STAT(2, packets), 0); /* all 64 flows on one queue: 2^-63 */

	/* Reset: the threads are gone, the tap's queues hold what comes; only the first gets it. */
	virtio_device_reset(t.vdev);
	tap_send_flows(ps, mac, 64);
	ck_assert_int_eq(tap_take_flows(t.be[0]), 64);
	ck_assert_int_eq(tap_take_flows(t.be[1]), 0);
	close(ps);
	dev_destroy();
}
END_TEST

/* The control-queue tests that run on both data paths, batch=off and batch=on. */
static void add_both_paths(TCase *tc)
{
	tcase_add_test(tc, ctrl_commands);
	tcase_add_test(tc, multiqueue_pairs);
	tcase_add_test(tc, multiqueue_active_pairs);
}

static Suite *virtio_net_ctrl_suite(void)
{
	Suite *s = vnet_suite("virtio_net_ctrl", add_both_paths, NULL, NULL);
	TCase *tap = tcase_create("tap");
	const char *why = tap_unavailable();

	if (why) {
		lkvm_skip("test_virtio_net_ctrl", 1, "tap tests", why);
	} else {
		tcase_add_test(tap, multiqueue_tap_steering);
		tcase_set_timeout(tap, 20);
		suite_add_tcase(s, tap);
	}
	return s;
}

LKVM_CHECK_MAIN(virtio_net_ctrl_suite)

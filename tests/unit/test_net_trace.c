/* The round-trip trace (virtio/net-trace.c): known stamps give known stage percentiles, the offset is applied, bad stamps are counted, hostile ones are harmless. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "lkvm/bench-frame.h"
#include "lkvm/ctl.h"
#include "lkvm/net-trace.h"
#include "lkvm/stats-fmt.h"
#include "stats_fmt.h"

#define KHZ 1000000ull /* 1 GHz: a cycle is a ns */
#define OFF 5000000ull /* guest TSC - host TSC */

/* Stage lengths (ns) of transaction i: each stage gets its own base, and one transaction in
 * 100 a slow one, so p50 and p99 differ. */
static u64 stage_ns(int s, int i)
{
	u64 base = 1000 * (u64)(s + 1);

	return i % 100 == 99 ? base * 10 : base + (u64)(i % 7);
}

/* Run n transactions through the trace on one thread, as the guest, TX and RX would stamp them. */
static void feed(struct net_trace *t, int n, u64 off)
{
	u64 host = 1000000;

	for (int i = 0; i <= n; i++) {
		struct net_trace_frame f = { .seq = 100 + (u64)i };
		u64 g0 = host + off, g1 = g0 + stage_ns(NT_WRITE, i);
		u64 t2 = g1 - off + stage_ns(NT_KICK, i), t3 = t2 + stage_ns(NT_TX, i);
		u64 t4 = t3 + stage_ns(NT_WIRE, i), t5 = t4 + stage_ns(NT_RX, i);
		u64 t6 = t5 + stage_ns(NT_PUBLISH, i);

		f.g_write = g0;
		f.g_kick = g1;
		/* G7 of the previous transaction: host was its T6 + its notice. */
		f.g_seen = i ? host + off : 0;
		net_trace_tx(t, &f, t2, t3);
		net_trace_rx(t, f.seq, t4, t5, t6);
		host = t6 + stage_ns(NT_NOTICE, i);
	}
}

static void assert_near(u64 got, u64 want, const char *what)
{
	ck_assert_msg(got * 100 >= want * 97 && got * 100 <= want * 103,
		      "%s: %llu, want %llu within 3 %%", what, (unsigned long long)got,
		      (unsigned long long)want);
}

START_TEST(stages_known)
{
	struct net_trace *t = net_trace_new();

	ck_assert_ptr_nonnull(t);
	net_trace_set_clock(t, KHZ, OFF, 0);
	feed(t, 1000, OFF);
	for (int s = 0; s < NT_STAGES; s++) {
		/* p50: base + 0..6; p99: the slow ones are 10 in 1000, so still base. */
		assert_near(net_trace_percentile(t, s, 50), 1000 * (u64)(s + 1) + 3,
			    net_trace_stage_name(s));
		assert_near(net_trace_percentile(t, s, 100), 10000 * (u64)(s + 1),
			    net_trace_stage_name(s));
	}
	net_trace_free(t);
}
END_TEST

/* The offset is applied to the guest's stamps: a trace that assumes 0 sees kick and notice
 * off by it (kick > 1 s backwards: every transaction bad). */
START_TEST(offset_applied)
{
	struct net_trace *t = net_trace_new();
	struct net_trace *z = net_trace_new();

	net_trace_set_clock(t, KHZ, OFF, 0);
	net_trace_set_clock(z, KHZ, 0, 0);
	feed(t, 100, OFF);
	feed(z, 100, 2000000000ull); /* 2 s ahead: kick is negative, never added */
	assert_near(net_trace_percentile(t, NT_KICK, 50), 2003, "kick");
	ck_assert_uint_eq(net_trace_percentile(z, NT_KICK, 50), 0);
	net_trace_free(t);
	net_trace_free(z);
}
END_TEST

/* p99 of 200 samples: 198 at 1000 ns, 2 at 100 us; p99's rank is 198, so 1000 ns. */
START_TEST(percentile_ranks)
{
	struct net_trace *t = net_trace_new();
	u64 host = 1000000;

	net_trace_set_clock(t, 2 * KHZ, 0, 7); /* 2 GHz: a ns is two cycles */
	for (int i = 0; i <= 200; i++) {
		u64 tx = i >= 198 ? 200000 : 2000;
		struct net_trace_frame f = {
			.seq = (u64)i, .g_write = host, .g_kick = host, .g_seen = i ? host : 0
		};

		net_trace_tx(t, &f, host, host + tx);
		net_trace_rx(t, (u64)i, host + tx, host + tx, host + tx);
		host += tx;
	}
	assert_near(net_trace_percentile(t, NT_TX, 99), 1000, "tx p99");
	assert_near(net_trace_percentile(t, NT_TX, 100), 100000, "tx max");
	net_trace_free(t);
}
END_TEST

static u64 counter(struct net_trace *t, const char *want);

START_TEST(bad_counted)
{
	struct net_trace *t = net_trace_new();
	struct net_trace_frame f = { .seq = 1, .g_write = 10, .g_kick = 20 };

	net_trace_set_clock(t, KHZ, 0, 0);
	net_trace_tx(t, &f, 30, 40);
	net_trace_rx(t, 1, 50, 60, 70);
	/* seq mismatch: frame 3 after 1 */
	f = (struct net_trace_frame){ .seq = 3, .g_write = 100, .g_kick = 110, .g_seen = 80 };
	net_trace_tx(t, &f, 120, 130);
	ck_assert_uint_eq(counter(t, "bad"), 1);
	/* no echo of 3 seen */
	f = (struct net_trace_frame){ .seq = 4, .g_write = 200, .g_kick = 210, .g_seen = 190 };
	net_trace_tx(t, &f, 220, 230);
	ck_assert_uint_eq(counter(t, "bad"), 2);
	/* negative notice (G7 before T6) */
	net_trace_rx(t, 4, 240, 250, 260);
	f = (struct net_trace_frame){ .seq = 5, .g_write = 300, .g_kick = 310, .g_seen = 255 };
	net_trace_tx(t, &f, 320, 330);
	ck_assert_uint_eq(counter(t, "bad"), 3);
	/* over 1 s (wire) */
	net_trace_rx(t, 5, 330 + 1000000001ull, 1000000400ull, 1000000500ull);
	f = (struct net_trace_frame){ .seq = 6, .g_seen = 1000000600ull };
	net_trace_tx(t, &f, 1000000700ull, 1000000800ull);
	ck_assert_uint_eq(counter(t, "bad"), 4);
	/* a good one, without G1 (no notify): write and kick have no sample */
	net_trace_rx(t, 6, 1000000900ull, 1000001000ull, 1000001100ull);
	f = (struct net_trace_frame){ .seq = 7, .g_seen = 1000001200ull };
	net_trace_tx(t, &f, 1000001300ull, 1000001400ull);
	ck_assert_uint_eq(counter(t, "bad"), 4);
	ck_assert_uint_eq(counter(t, "transactions"), 1);
	ck_assert_uint_eq(net_trace_percentile(t, NT_KICK, 50), 0);
	assert_near(net_trace_percentile(t, NT_WIRE, 50), 100, "wire");
	/* clock unknown: bad */
	net_trace_set_clock(t, 0, 0, 0);
	net_trace_rx(t, 7, 1000001500ull, 1000001600ull, 1000001700ull);
	f = (struct net_trace_frame){ .seq = 8, .g_seen = 1000001800ull };
	net_trace_tx(t, &f, 0, 0);
	ck_assert_uint_eq(counter(t, "bad"), 5);
	net_trace_free(t);
}
END_TEST

/* Garbage and wrapping stamps: counted or not, never UB (the ASan/UBSan build runs this). */
START_TEST(hostile)
{
	struct net_trace *t = net_trace_new();
	u64 r = 0x9e3779b97f4a7c15ull;

	net_trace_set_clock(t, 0xffffffffffffffffull, 0xffffffffffffffffull, 0);
	for (int i = 0; i < 20000; i++) {
		struct net_trace_frame f;

		if (i == 10000)
			net_trace_set_clock(t, KHZ, 0x8000000000000000ull, 0);
		r ^= r << 13, r ^= r >> 7, r ^= r << 17;
		f = (struct net_trace_frame){
			.seq = i % 3 ? (u64)i : r, .g_write = r, .g_kick = ~r, .g_seen = r * 3
		};
		net_trace_tx(t, &f, r >> 1, ~0ull - (u64)i);
		net_trace_rx(t, i % 5 ? (u64)i : r, r, r + 1, ~0ull);
	}
	for (int s = 0; s < NT_STAGES; s++)
		ck_assert_uint_le(net_trace_percentile(t, s, 99), 1100000000ull);
	ck_assert_uint_eq(net_trace_percentile(t, NT_STAGES, 50), 0);
	ck_assert_uint_eq(net_trace_percentile(t, NT_TX, 0), 0);
	ck_assert_uint_eq(net_trace_percentile(t, NT_TX, 101), 0);
	ck_assert_str_eq(net_trace_stage_name(NT_STAGES), "?");
	net_trace_free(t);
}
END_TEST

/* A frame read through its iovecs, split anywhere; not a bench frame: false. */
START_TEST(frame_parse)
{
	u8 buf[12 + BENCH_FRAME_MIN] = { 0 }, *fr = buf + 12, mac[6] = { 2 };
	u64 v[4] = { 42, 1111, 2222, 3333 };
	struct iovec iov[3] = { { buf, 5 }, { buf + 5, 40 }, { buf + 45, sizeof(buf) - 45 } };
	struct net_trace_frame f;

	bench_frame_head(fr, mac, BENCH_TEST_RR);
	memcpy(fr + BENCH_OFF_SEQ, &v[0], 8);
	memcpy(fr + BENCH_OFF_T_WRITE, &v[1], 8);
	memcpy(fr + BENCH_OFF_T_KICK, &v[2], 8);
	memcpy(fr + BENCH_OFF_T_SEEN, &v[3], 8);
	ck_assert(net_trace_frame(iov, 3, 12, &f));
	ck_assert_uint_eq(f.seq, 42);
	ck_assert_uint_eq(f.g_write, 1111);
	ck_assert_uint_eq(f.g_kick, 2222);
	ck_assert_uint_eq(f.g_seen, 3333);
	iov[2].iov_len = BENCH_OFF_T_SEEN + 7 + 12 - 45; /* one byte short */
	ck_assert(!net_trace_frame(iov, 3, 12, &f));
	iov[2].iov_len = sizeof(buf) - 45;
	fr[BENCH_OFF_ETHERTYPE + 1] ^= 1;
	ck_assert(!net_trace_frame(iov, 3, 12, &f));
	fr[BENCH_OFF_ETHERTYPE + 1] ^= 1;
	fr[BENCH_OFF_MAGIC] ^= 1;
	ck_assert(!net_trace_frame(iov, 3, 12, &f));
}
END_TEST

/* TX and RX on threads of their own, ordered only by what stands in for the guest (echoed),
 * while a third reads the percentiles: TSan's build checks the atomics. */
static struct net_trace *th_t;
static atomic_ullong th_sent, th_echoed;

static void *th_rx(void *arg)
{
	for (u64 seq = 1; seq <= 2000; seq++) {
		u64 now;

		while (atomic_load(&th_sent) != seq)
			;
		now = 1000000 + seq * 100;
		net_trace_rx(th_t, seq, now + 30, now + 40, now + 50);
		atomic_store(&th_echoed, seq);
	}
	return NULL;
}

static void *th_reader(void *arg)
{
	while (atomic_load(&th_echoed) < 2000)
		net_trace_percentile(th_t, NT_WIRE, 99);
	return NULL;
}

START_TEST(threads)
{
	pthread_t rx, rd;

	th_t = net_trace_new();
	net_trace_set_clock(th_t, KHZ, 0, 0);
	ck_assert_int_eq(pthread_create(&rx, NULL, th_rx, NULL), 0);
	ck_assert_int_eq(pthread_create(&rd, NULL, th_reader, NULL), 0);
	for (u64 seq = 1; seq <= 2000; seq++) {
		u64 now = 1000000 + seq * 100;
		struct net_trace_frame f = { .seq = seq,
					     .g_write = now,
					     .g_kick = now + 5,
					     .g_seen = seq > 1 ? now - 40 : 0 };

		net_trace_tx(th_t, &f, now + 10, now + 20);
		atomic_store(&th_sent, seq);
		while (atomic_load(&th_echoed) != seq)
			;
	}
	pthread_join(rx, NULL);
	pthread_join(rd, NULL);
	ck_assert_uint_eq(counter(th_t, "transactions"), 1999);
	ck_assert_uint_eq(counter(th_t, "bad"), 0);
	ck_assert_uint_eq(net_trace_percentile(th_t, NT_WIRE, 50), 10);
	net_trace_free(th_t);
}
END_TEST

static void trace_visit(void *dev, struct stats_visitor *v)
{
	net_trace_stats(dev, v);
}

static u64 counter(struct net_trace *t, const char *want)
{
	char *buf = stats_fmt("net", t, trace_visit, true), key[64], *p;
	u64 v;

	snprintf(key, sizeof(key), "\"%s\":", want);
	p = strstr(buf, key);
	ck_assert_msg(p, "no %s in %s", want, buf);
	v = strtoull(p + strlen(key), NULL, 10);
	free(buf);
	return v;
}

/* The counters as --stats=json shows them: net0's device-wide group "trace", named as the spec says. */
START_TEST(stats_shape)
{
	struct net_trace *t = net_trace_new();
	char *buf;

	net_trace_set_clock(t, KHZ, OFF, 123);
	feed(t, 10, OFF);
	buf = stats_fmt("net", t, trace_visit, true);
	ck_assert_msg(strstr(buf, "\"nets\":[{\"nic\":0,\"queues\":[],\"trace\":{"
				  "\"transactions\":10,\"bad\":0,\"clock_err_ns\":123,"
				  "\"tsc_khz\":1000000,\"write_p50_ns\":"),
		      "%s", buf);
	for (int s = 0; s < NT_STAGES; s++) {
		char key[32];

		snprintf(key, sizeof(key), "\"%s_p50_ns\":", net_trace_stage_name(s));
		ck_assert_msg(strstr(buf, key), "%s lacks %s", buf, key);
		snprintf(key, sizeof(key), "\"%s_p99_ns\":", net_trace_stage_name(s));
		ck_assert_msg(strstr(buf, key), "%s lacks %s", buf, key);
	}
	ck_assert_uint_eq(counter(t, "wire_p50_ns"), net_trace_percentile(t, NT_WIRE, 50));
	free(buf);
	net_trace_free(t);
}
END_TEST

/* Flat counters of one NIC's trace group as lkvm stat receives them. */
static void trace_kvs(struct ctl_msg *m, struct ctl_kvs *kvs, u64 transactions, u64 kick_p50)
{
	ctl_msg_init(m, CTL_STAT, 0);
	ck_assert_int_eq(ctl_add_u64(m, "net0.tx0.packets", transactions), 0);
	ck_assert_int_eq(ctl_add_u64(m, "net0.trace.transactions", transactions), 0);
	ck_assert_int_eq(ctl_add_u64(m, "net0.trace.tsc_khz", 2596136), 0);
	ck_assert_int_eq(ctl_add_u64(m, "net0.trace.kick_p50_ns", kick_p50), 0);
	ck_assert_int_eq(ctl_kvs_decode(m, kvs), 0);
}

/* lkvm stat: the trace group is a line (an object) of its own, not a queue with the queues'
 * columns; with --watch its percentiles and clock are levels (a histogram's median has no
 * difference to show: 17664 then 5440 is not -12224), its transactions a change. */
START_TEST(stat_group_levels)
{
	struct ctl_msg m0, m1;
	struct ctl_kvs prev, cur;
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(out);
	trace_kvs(&m0, &prev, 1000, 17664);
	trace_kvs(&m1, &cur, 1500, 5440);
	stats_print(out, &cur, &prev, 1.0, true);
	stats_print(out, &cur, &prev, 1.0, false);
	fclose(out);
	ck_assert_msg(strstr(buf, "\"trace\":{\"transactions\":500,\"tsc_khz\":2596136,"
				  "\"kick_p50_ns\":5440}"),
		      "%s", buf);
	ck_assert_msg(strstr(buf, "\ntrace: transactions 500, tsc_khz 2596136, kick_p50_ns 5440\n"),
		      "%s", buf);
	ck_assert_ptr_null(strstr(buf, "\"name\":\"trace\""));
	free(buf);
	ctl_kvs_free(&prev);
	ctl_kvs_free(&cur);
	ctl_msg_free(&m0);
	ctl_msg_free(&m1);
}
END_TEST

static Suite *net_trace_suite(void)
{
	Suite *s = suite_create("net_trace");
	TCase *tc = tcase_create("trace");

	tcase_add_test(tc, stages_known);
	tcase_add_test(tc, offset_applied);
	tcase_add_test(tc, percentile_ranks);
	tcase_add_test(tc, bad_counted);
	tcase_add_test(tc, hostile);
	tcase_add_test(tc, frame_parse);
	tcase_add_test(tc, stats_shape);
	tcase_add_test(tc, threads);
	tcase_add_test(tc, stat_group_levels);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(net_trace_suite)

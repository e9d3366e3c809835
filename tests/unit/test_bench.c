/* lkvm bench net's pieces without a VM: /proc parsing for its CPU accounting (stat, schedstat), lkvm's stats line (the trace group), vCPU thread names, and its charts (panels, bars, floors, colours, the rr stages). */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/bench.h"

/* The chart into the file the environment variable env names, if it is set, to look at:
 * rsvg-convert -o x.png FILE. */
static void save_svg(const char *env, const char *svg)
{
	const char *path = getenv(env);
	FILE *f;

	if (!path)
		return;
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(svg, f);
	fclose(f);
}

START_TEST(task_stat_parses)
{
	char comm[16];
	u64 ticks;

	/* A name with a space, a slash and a ')' of its own: it ends at the last ')'. */
	ck_assert_int_eq(bench_parse_task_stat("4242 (CPU 0/KVM) R 1 1 1 0 -1 4194560 10 0 0 0 "
					       "1200 34 0 0 20 0 3 0 100 0 0",
					       comm, sizeof(comm), &ticks),
			 0);
	ck_assert_str_eq(comm, "CPU 0/KVM");
	ck_assert_uint_eq(ticks, 1234);
	ck_assert_int_eq(bench_parse_task_stat("7 (a) b)) S 1 1 1 0 -1 0 0 0 0 0 5 6 0 0", comm,
					       sizeof(comm), &ticks),
			 0);
	ck_assert_str_eq(comm, "a) b)");
	ck_assert_uint_eq(ticks, 11);
	ck_assert_int_eq(bench_parse_task_stat("7 (short) S 1 1", comm, sizeof(comm), &ticks),
			 -EINVAL);
	ck_assert_int_eq(bench_parse_task_stat("no name here", comm, sizeof(comm), &ticks),
			 -EINVAL);
}
END_TEST

START_TEST(schedstat_parses)
{
	u64 ns = 77;

	ck_assert_int_eq(bench_parse_schedstat("18053667 7244917 71\n", &ns), 0);
	ck_assert_uint_eq(ns, 18053667);
	ck_assert_int_eq(bench_parse_schedstat("0 0 0", &ns), 0);
	ck_assert_uint_eq(ns, 0);
	ck_assert_int_eq(bench_parse_schedstat("42", &ns), 0); /* the first field alone */
	ck_assert_uint_eq(ns, 42);
	ck_assert_int_eq(bench_parse_schedstat("18446744073709551615 0 0", &ns), 0);
	ck_assert_uint_eq(ns, UINT64_MAX);
	/* Hostile or odd: nothing is taken, ns keeps its value. */
	ns = 77;
	ck_assert_int_eq(bench_parse_schedstat("18446744073709551616 0 0", &ns), -ERANGE);
	ck_assert_int_eq(bench_parse_schedstat("99999999999999999999999999999", &ns), -ERANGE);
	ck_assert_int_eq(bench_parse_schedstat("", &ns), -EINVAL);
	ck_assert_int_eq(bench_parse_schedstat("\n", &ns), -EINVAL);
	ck_assert_int_eq(bench_parse_schedstat(" 5 0 0", &ns), -EINVAL);
	ck_assert_int_eq(bench_parse_schedstat("-5 0 0", &ns), -EINVAL);
	ck_assert_int_eq(bench_parse_schedstat("+5 0 0", &ns), -EINVAL);
	ck_assert_int_eq(bench_parse_schedstat("12abc 0 0", &ns), -EINVAL);
	ck_assert_int_eq(bench_parse_schedstat("0x10 0 0", &ns), -EINVAL);
	ck_assert_int_eq(bench_parse_schedstat("garbage", &ns), -EINVAL);
	ck_assert_int_eq(bench_parse_schedstat("1.5 0 0", &ns), -EINVAL);
	ck_assert_uint_eq(ns, 77);
}
END_TEST

START_TEST(vcpu_threads_by_name)
{
	ck_assert(bench_vcpu_thread("lkvm-vcpu0"));
	ck_assert(bench_vcpu_thread("lkvm-vcpu12"));
	ck_assert(bench_vcpu_thread("CPU 0/KVM"));
	ck_assert(bench_vcpu_thread("CPU 11/KVM"));
	ck_assert(!bench_vcpu_thread("lkvm-net-tx0"));
	ck_assert(!bench_vcpu_thread("qemu-system-x86"));
	ck_assert(!bench_vcpu_thread("CPU /KVM"));
	ck_assert(!bench_vcpu_thread("worker"));
}
END_TEST

START_TEST(vhost_workers_by_name)
{
	/* Before Linux 6.4 the worker is the kernel thread "vhost-<owner pid>". */
	ck_assert(bench_vhost_worker("vhost-4242", 4242));
	ck_assert(bench_vhost_worker("vhost-1", 1));
	ck_assert(!bench_vhost_worker("vhost-42421", 4242)); /* another VMM's */
	ck_assert(!bench_vhost_worker("vhost-424", 4242));
	ck_assert(!bench_vhost_worker("vhost-4242 ", 4242));
	ck_assert(!bench_vhost_worker("xvhost-4242", 4242));
	ck_assert(!bench_vhost_worker("vhost-", 4242));
	ck_assert(!bench_vhost_worker("lkvm-net-tx0", 4242));
	ck_assert(!bench_vhost_worker("vhost-0", 0));
}
END_TEST

START_TEST(vhost_mode_parses)
{
	bool vhost = false;
	int m = bench_mode_of("vhost", &vhost);

	ck_assert_int_ge(m, 0);
	ck_assert(vhost);
	ck_assert_int_ge(bench_mode_of("ioeventfd", &vhost), 0);
	ck_assert(!vhost);
	ck_assert_int_ne(bench_mode_of("poll", NULL), m);
	ck_assert_int_eq(bench_mode_of("vhost=on", &vhost), -EINVAL);
	ck_assert_int_eq(bench_mode_of("qemu/vhost", &vhost), -EINVAL); /* QEMU's come by --qemu */
	ck_assert_int_eq(bench_mode_of("", &vhost), -EINVAL);
}
END_TEST

START_TEST(proc_stat_busy)
{
	u64 busy;

	/* user nice system idle iowait irq softirq steal: busy leaves out idle, iowait, steal. */
	ck_assert_int_eq(
		bench_parse_proc_stat("cpu  100 2 30 5000 70 4 5 900 0 0\ncpu0 ...", &busy), 0);
	ck_assert_uint_eq(busy, 141);
	ck_assert_int_eq(bench_parse_proc_stat("intr 1 2 3", &busy), -EINVAL);
}
END_TEST

/* A thread: its name and CPU, in ns or (ticks) clock ticks. */
static struct bench_thread th(int tid, const char *comm, u64 cpu, bool kworker, bool ticks)
{
	struct bench_thread t = { .tid = tid, .cpu = cpu, .kworker = kworker, .ticks = ticks };

	snprintf(t.comm, sizeof(t.comm), "%s", comm);
	return t;
}

START_TEST(thread_cpu_split)
{
	struct bench_threads a = { 0 }, b = { 0 };
	double host, vcpu, hz = (double)sysconf(_SC_CLK_TCK);

	a.t[0] = th(10, "lkvm-vcpu0", 100000, false, false);
	a.t[1] = th(11, "lkvm-net-tx0", 40000, false, false);
	a.t[2] = th(900, "vhost-9", 30, true, true);
	a.n = 3;
	b.n = 4;
	b.t[0] = th(10, "lkvm-vcpu0", 300000, false, false);
	/* 50 us of host CPU: clock ticks (10 ms) would have read 0 (the bug this guards). */
	b.t[1] = th(11, "lkvm-net-tx0", 90000, false, false);
	b.t[2] = th(12, "lkvm-net-rx0", 7000, false, false); /* new since a: from 0 */
	/* The VMM's kernel vhost worker (a kernel thread before Linux 6.4): host CPU; read in
	 * ticks here (a kernel without schedstat), each thread in its own unit. */
	b.t[3] = th(900, "vhost-9", 130, true, true);
	bench_threads_cpu(&a, &b, &host, &vcpu);
	ck_assert(fabs(vcpu - 200e-6) < 1e-12);
	ck_assert(fabs(host - (57e-6 + 100 / hz)) < 1e-12);
	ck_assert(bench_threads_ticks(&b));
	/* All of a worker's CPU is the VMM's: what bench_load_other leaves out of "other". */
	ck_assert(fabs(bench_kworkers_cpu(&b) - 130 / hz) < 1e-9);
	b.t[3].ticks = false;
	ck_assert(!bench_threads_ticks(&b));
	ck_assert(fabs(bench_kworkers_cpu(&b) - 130e-9) < 1e-15);
	/* This process's own threads can be read (the sampler's path), with /proc's workers. A
	 * running thread's schedstat moves at a tick or when it sleeps (a fresh fork's reads 0
	 * before either): sleep once. */
	usleep(1000);
	memset(&a, 0, sizeof(a));
	a.kworkers = BENCH_KW_SCAN;
	ck_assert_int_eq(bench_threads_sample(getpid(), &a), 0);
	ck_assert_int_ge(a.n, 1);
	ck_assert(fabs(bench_kworkers_cpu(&a)) < 1e-9); /* no vhost device: no worker */
	/* This kernel has schedstat (Debian's too): ns, and a thread that ran shows it. */
	if (!access("/proc/self/schedstat", F_OK)) {
		ck_assert(!bench_threads_ticks(&a));
		ck_assert_uint_gt(a.t[0].cpu, 0);
	}
}
END_TEST

static struct bench_row row(const char *mode, const char *test, bool floor, bool qemu,
			    const char *group, const char *batch, double pps, double rtt,
			    double host_ns)
{
	struct bench_row r = { .size = 64,
			       .floor = floor,
			       .qemu = qemu,
			       .group = group,
			       .batch = batch,
			       .pps = pps,
			       .rtt_med_us = rtt,
			       .host_ns = host_ns };

	snprintf(r.mode, sizeof(r.mode), "%s", mode);
	snprintf(r.test, sizeof(r.test), "%s", test);
	return r;
}

static char *chart(const struct bench_row *rows, int n, bool cpu)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(bench_svg(f, rows, n, 3, "native-pvm", cpu), 0);
	fclose(f);
	return buf;
}

static int count(const char *s, const char *what)
{
	int n = 0;

	for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
		n++;
	return n;
}

START_TEST(chart_panels_bars_floors)
{
	struct bench_row rows[] = {
		row("floor/tap", "tx", true, false, NULL, NULL, 2573000, NAN, 380),
		row("floor/peer", "rr", true, false, NULL, NULL, NAN, 4.2, 2100),
		row("ioeventfd", "tx", false, false, "kick, ioeventfd", "on", 2400000, NAN, 410),
		row("ioeventfd/nobatch", "tx", false, false, "kick, ioeventfd", "off", 1417000, NAN,
		    700),
		row("qemu/bh", "tx", false, true, "kick, ioeventfd", NULL, 439000, NAN, 2300),
		row("poll", "tx", false, false, "poll, ioeventfd", "on", 1500000, NAN, 800),
		row("ioeventfd", "rr", false, false, "kick, ioeventfd", "on", NAN, 43.8, 9000),
		row("qemu/bh", "rr", false, true, "kick, ioeventfd", NULL, NAN, 54.0, 12000),
	};
	char *svg = chart(rows, ARRAY_SIZE(rows), false), *cpu;

	ck_assert_ptr_nonnull(strstr(svg, "<svg "));
	ck_assert_ptr_nonnull(strstr(svg, "</svg>"));
	/* A panel per test that has cells (no rx here), a floor line in each. */
	ck_assert_int_eq(count(svg, "<g class=\"panel\""), 2);
	ck_assert_ptr_nonnull(strstr(svg, "data-test=\"tx\" data-size=\"64\""));
	ck_assert_ptr_nonnull(strstr(svg, "data-test=\"rr\" data-size=\"64\""));
	ck_assert_int_eq(count(svg, "class=\"floor\""), 2);
	ck_assert_ptr_nonnull(strstr(svg, "class=\"floor\" data-value=\"2573.000\""));
	ck_assert_ptr_nonnull(strstr(svg, "class=\"floor\" data-value=\"4.200\""));
	/* A bar per cell with its value: Kpps for tx, the RTT median for rr. */
	ck_assert_int_eq(count(svg, "class=\"bar\""), 6);
	ck_assert_ptr_nonnull(strstr(svg, "data-mode=\"ioeventfd\" data-vmm=\"lkvm\" "
					  "data-batch=\"on\" data-value=\"2400.000\""));
	ck_assert_ptr_nonnull(strstr(
		svg,
		"data-mode=\"qemu/bh\" data-vmm=\"qemu\" data-batch=\"\" data-value=\"54.000\""));
	ck_assert_int_eq(count(svg, "class=\"value\""), 6);
	/* lkvm and QEMU in their own colours; batch=off in a third. Nothing turned sideways. */
	ck_assert_int_eq(count(svg, "fill=\"#1f5fa8\""), 3 + 1); /* 3 bars and the legend */
	ck_assert_int_eq(count(svg, "fill=\"#e8731c\""), 2 + 1);
	ck_assert_int_eq(count(svg, "fill=\"#8fb8e3\""), 1 + 1);
	ck_assert_ptr_null(strstr(svg, "rotate"));
	/* Groups by strategy, labelled under the axis. */
	ck_assert_int_eq(count(svg, "class=\"group\""), 3);
	cpu = chart(rows, ARRAY_SIZE(rows), true);
	ck_assert_ptr_nonnull(strstr(cpu, "class=\"floor\" data-value=\"380.000\""));
	ck_assert_ptr_nonnull(strstr(
		cpu,
		"data-mode=\"qemu/bh\" data-vmm=\"qemu\" data-batch=\"\" data-value=\"2300.000\""));
	free(svg);
	free(cpu);
}
END_TEST

/* A full matrix (5 strategies, lkvm batch on and off, QEMU, three tests): the panels grow so
 * that every bar keeps its width, and no value label is wider than its bar allows. */
START_TEST(chart_full_matrix)
{
	static const struct {
		const char *mode, *group, *batch;
		bool qemu;
	} m[] = {
		{ "ioeventfd", "kick, ioeventfd", "on", false },
		{ "ioeventfd/nobatch", "kick, ioeventfd", "off", false },
		{ "trap", "kick, trapped", "on", false },
		{ "trap/nobatch", "kick, trapped", "off", false },
		{ "timer", "timer, ioeventfd", "on", false },
		{ "timer/nobatch", "timer, ioeventfd", "off", false },
		{ "poll", "poll, ioeventfd", "on", false },
		{ "poll/nobatch", "poll, ioeventfd", "off", false },
		{ "qemu/bh", "kick, ioeventfd", NULL, true },
		{ "qemu/bh-trap", "kick, trapped", NULL, true },
		{ "qemu/timer", "timer, ioeventfd", NULL, true },
		{ "qemu/timer-trap", "timer, trapped", NULL, true },
	};
	static const char *const tests[] = { "tx", "rx", "rr" };
	struct bench_row rows[3 + ARRAY_SIZE(m) * 3];
	int n = 0;
	char *svg;
	const char *w;

	for (int t = 0; t < 3; t++) {
		rows[n++] = row(t == 2 ? "floor/peer" : "floor/tap", tests[t], true, false, NULL,
				NULL, 2573000.0 / (t + 1), 6.3, 1990);
		for (size_t i = 0; i < ARRAY_SIZE(m); i++)
			rows[n++] = row(m[i].mode, tests[t], false, m[i].qemu, m[i].group,
					m[i].batch, 1000.0 * (double)(88 + 37 * i),
					60.0 + 11 * (double)i, 1500.0 + 230 * (double)i);
	}
	rows[n - 1].busy = true;
	svg = chart(rows, n, false);
	ck_assert_int_eq(count(svg, "<g class=\"panel\""), 3);
	ck_assert_int_eq(count(svg, "class=\"bar\""), 3 * (int)ARRAY_SIZE(m));
	ck_assert_int_eq(count(svg, "class=\"group\""), 3 * 5);
	/* 5 groups of 3 bars of 46 px and their gaps: wider than the least panel. */
	w = strstr(svg, "width=\"");
	ck_assert_int_ge(atoi(w + 7), 64 + 92 + 5 * (3 * 46 + 30));
	ck_assert_ptr_nonnull(strstr(svg, "width=\"44.0\"")); /* a bar: 46 px less its 2 px gap */
	ck_assert_ptr_nonnull(strstr(svg, "*: taken while other processes kept the host busy"));
	save_svg("BENCH_SVG_OUT", svg);
	free(svg);
}
END_TEST

/* lkvm's traced rr rows (-n trace=on) get a stacked bar of their stages under the panels, with
 * the RTT median as a tick; QEMU's rows, untraced rows and the CPU chart have none. */
START_TEST(chart_stages)
{
	struct bench_row rows[] = {
		row("floor/peer", "rr", true, false, NULL, NULL, NAN, 4.2, 2100),
		row("ioeventfd", "rr", false, false, "kick, ioeventfd", "on", NAN, 33.3, 9000),
		row("poll", "rr", false, false, "poll, ioeventfd", "on", NAN, 30.2, 13000),
		row("qemu/bh", "rr", false, true, "kick, ioeventfd", NULL, NAN, 36.2, 9061),
		row("ioeventfd", "tx", false, false, "kick, ioeventfd", "on", 700000, NAN, 1358),
	};
	static const double p50[BENCH_NSTAGES] = { 150, 9000, 2100, 6000, 1500, 90, 12000 };
	char *svg, *cpu;

	svg = chart(rows, ARRAY_SIZE(rows), false);
	ck_assert_ptr_null(strstr(svg, "class=\"stages\"")); /* nothing traced: no section */
	free(svg);
	for (int s = 0; s < BENCH_NSTAGES; s++) {
		rows[1].stage_p50[s] = p50[s];
		rows[1].stage_p99[s] = 2 * p50[s];
		rows[3].stage_p50[s] = p50[s]; /* QEMU's would-be figures: not shown */
	}
	rows[1].trace_transactions = 90000;
	rows[3].trace_transactions = 90000;
	rows[4].trace_transactions = 90000; /* a tx row: never a breakdown */
	rows[2].trace_transactions = 0;	    /* poll traced, no transaction aggregated */
	svg = chart(rows, ARRAY_SIZE(rows), false);
	ck_assert_int_eq(count(svg, "class=\"stages\""), 1);
	ck_assert_int_eq(count(svg, "class=\"stage\""), BENCH_NSTAGES);
	ck_assert_int_eq(count(svg, "data-mode=\"ioeventfd\" data-size=\"64\" data-stage="),
			 BENCH_NSTAGES);
	ck_assert_ptr_nonnull(strstr(svg, "data-stage=\"wire\" data-value=\"6.000\""));
	ck_assert_ptr_nonnull(strstr(svg, "data-stage=\"notice\" data-value=\"12.000\""));
	ck_assert_ptr_nonnull(strstr(svg, "class=\"stage-rtt\" data-value=\"33.300\""));
	ck_assert_ptr_nonnull(strstr(svg, "30.8 us (RTT 33.3)")); /* the stages' sum beside it */
	ck_assert_ptr_null(strstr(svg, "data-mode=\"qemu/bh\" data-size"));
	cpu = chart(rows, ARRAY_SIZE(rows), true);
	ck_assert_ptr_null(strstr(cpu, "class=\"stages\""));
	save_svg("BENCH_STAGES_OUT", svg);
	free(svg);
	free(cpu);
}
END_TEST

/* lkvm's --stats=json line as an rr cell gives it, with (trace) or without lkvm's "trace" group. */
#define STATS_HEAD                                                                                         \
	"{\"vcpu_exits\":{\"total\":575,\"io\":521},\"nets\":[{\"nic\":0,\"queues\":["                     \
	"{\"name\":\"rx0\",\"kicks\":1,\"irqs\":12,\"packets\":43598,\"drops\":0,\"pkts_per_kick\":1.00}," \
	"{\"name\":\"tx0\",\"kicks\":43450,\"packets\":43598,\"drops\":0,\"pkts_per_kick\":null}"
#define STATS_TAIL "]}],\"disks\":[]}"

START_TEST(stats_trace_group)
{
	struct bench_row r = { .size = 64 };

	bench_parse_stats(
		&r, STATS_HEAD
		",{\"name\":\"trace\",\"transactions\":43597,\"bad\":1,\"clock_err_ns\":0,"
		"\"tsc_khz\":2596136,\"write_p50_ns\":120,\"write_p99_ns\":300,"
		"\"kick_p50_ns\":9000,\"kick_p99_ns\":15000,\"tx_p50_ns\":2100,"
		"\"tx_p99_ns\":4000,\"wire_p50_ns\":6000,\"wire_p99_ns\":9000,"
		"\"rx_p50_ns\":1500,\"rx_p99_ns\":2500,\"publish_p50_ns\":90,"
		"\"publish_p99_ns\":200,\"notice_p50_ns\":400,\"notice_p99_ns\":"
		"1200,\"pkts_per_kick\":null}" STATS_TAIL);
	ck_assert_uint_eq(r.tx_pkts, 43598); /* the queues still read */
	ck_assert_uint_eq(r.kicks, 43451);
	ck_assert_double_eq(r.trace_transactions, 43597);
	ck_assert_double_eq(r.trace_clock_err_ns, 0);
	ck_assert_str_eq(bench_stages[0], "write");
	ck_assert_str_eq(bench_stages[BENCH_NSTAGES - 1], "notice");
	ck_assert_double_eq(r.stage_p50[0], 120);
	ck_assert_double_eq(r.stage_p99[1], 15000);
	ck_assert_double_eq(r.stage_p50[3], 6000);
	ck_assert_double_eq(r.stage_p99[5], 200);
	ck_assert_double_eq(r.stage_p50[6], 400);
	ck_assert_double_eq(r.stage_p99[6], 1200);

	/* The group as an object of its own ("trace":{...}) reads the same; a stage it lacks
	 * reads NAN, not 0. */
	bench_parse_stats(&r, "{\"vcpu_exits\":{\"total\":5},\"trace\":{\"transactions\":10,"
			      "\"clock_err_ns\":7,\"kick_p50_ns\":800},\"wire_p50_ns\":99}");
	ck_assert_double_eq(r.trace_transactions, 10);
	ck_assert_double_eq(r.trace_clock_err_ns, 7);
	ck_assert_double_eq(r.stage_p50[1], 800);
	ck_assert(isnan(r.stage_p50[3])); /* past the group's '}': another object's */
	ck_assert(isnan(r.stage_p99[1]));
}
END_TEST

START_TEST(stats_no_trace_group)
{
	struct bench_row r = { .size = 64 };

	bench_parse_stats(&r, STATS_HEAD STATS_TAIL);
	ck_assert_uint_eq(r.rx_pkts, 43598);
	ck_assert_uint_eq(r.exits, 575);
	ck_assert(isnan(r.trace_transactions));
	ck_assert(isnan(r.trace_clock_err_ns));
	for (int s = 0; s < BENCH_NSTAGES; s++)
		ck_assert(isnan(r.stage_p50[s]) && isnan(r.stage_p99[s]));

	/* A group with no transaction aggregated (no echo came back) has no stages either. */
	bench_parse_stats(&r, STATS_HEAD ",{\"name\":\"trace\",\"transactions\":0,"
					 "\"kick_p50_ns\":0}" STATS_TAIL);
	ck_assert_double_eq(r.trace_transactions, 0);
	ck_assert(isnan(r.stage_p50[1]));
	bench_parse_stats(&r, NULL);
	ck_assert(isnan(r.trace_transactions) && isnan(r.stage_p50[0]));
}
END_TEST

static Suite *bench_suite(void)
{
	Suite *s = suite_create("bench");
	TCase *tc = tcase_create("bench");

	tcase_add_test(tc, task_stat_parses);
	tcase_add_test(tc, schedstat_parses);
	tcase_add_test(tc, vcpu_threads_by_name);
	tcase_add_test(tc, vhost_workers_by_name);
	tcase_add_test(tc, vhost_mode_parses);
	tcase_add_test(tc, proc_stat_busy);
	tcase_add_test(tc, thread_cpu_split);
	tcase_add_test(tc, chart_panels_bars_floors);
	tcase_add_test(tc, chart_full_matrix);
	tcase_add_test(tc, chart_stages);
	tcase_add_test(tc, stats_trace_group);
	tcase_add_test(tc, stats_no_trace_group);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(bench_suite)

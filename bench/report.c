/* `lkvm bench net`'s results: the table, the progress lines, the JSON and the charts' files. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/bench.h"
#include "lkvm/util.h"
#include "lkvm/x86.h"

#include "bench.h"

static void fmt(char *buf, size_t len, double v, int prec)
{
	if (isnan(v) || isinf(v))
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.*f", prec, v);
}

static double per(unsigned long long a, unsigned long long b)
{
	return b ? (double)a / (double)b : NAN;
}

/* Where the figures come from: scripts/kvm-host.sh says (LKVM_HOST_KIND), else this machine's KVM. */
const char *bench_host_kind(void)
{
	const char *k = getenv("LKVM_HOST_KIND");

	if (k && *k)
		return k;
	return x86_host_is_pvm() ? "native-pvm" : "native";
}

bool bench_host_emulated(void)
{
	return strcmp(bench_host_kind(), "emulated-svm") == 0;
}

#define HEAD_FMT "%-20s %-6s %5s %9s %9s %9s %9s %9s %9s %9s %9s %9s %8s %6s %8s %8s %7s\n"

static void print_header(FILE *out)
{
	fprintf(out, "# host: %s%s\n", bench_host_kind(),
		bench_host_emulated()
			? " (EMULATED: everything ran under QEMU's TCG; no figure stands for real hardware)"
			: "");
	fprintf(out, HEAD_FMT, "mode", "test", "size", "Kpps", "Mb/s", "RTTmed_us", "RTTp99_us",
		"trans/s", "exits/pkt", "kicks/pkt", "irqs/pkt", "pkts/kick", "x_floor", "cpu",
		"host_ns", "floor_ns", "other");
}

/* What the table's marks mean, once, under it. */
static void print_notes(FILE *out, const struct bench *b)
{
	bool busy = false, beats = false, ticks = false;

	for (int i = 0; i < b->nrows; i++) {
		busy |= b->rows[i].busy;
		beats |= b->rows[i].beats_floor;
		ticks |= b->rows[i].cpu_ticks;
	}
	if (ticks)
		fprintf(out,
			"# host_ns: this kernel has no /proc/PID/task/TID/schedstat: threads' CPU "
			"read in clock ticks (10 ms), so a short cell's host_ns may read 0\n");
	if (busy)
		fprintf(out,
			"# *: other processes used more than %.2f cores while the row ran (other): taken on "
			"a busy host, not a result\n",
			BENCH_BUSY_CORES);
	if (beats)
		fprintf(out,
			"# !: better than its floor by more than the noise (x_floor past %.2f): that floor "
			"measures something else\n",
			BENCH_FLOOR_NOISE);
}

static void print_row(FILE *out, const struct bench_row *r)
{
	char c[14][24], size[12];

	if (r->error[0]) {
		fprintf(out, "%-20s %-6s %5u FAILED: %s\n", r->mode, r->test, r->size, r->error);
		return;
	}
	fmt(c[0], sizeof(c[0]), r->pps / 1000, 1);
	fmt(c[1], sizeof(c[1]), r->mbps, 1);
	fmt(c[2], sizeof(c[2]), r->rtt_med_us, 1);
	fmt(c[3], sizeof(c[3]), r->rtt_p99_us, 1);
	fmt(c[4], sizeof(c[4]), r->tps, 0);
	fmt(c[5], sizeof(c[5]), r->floor || r->qemu ? NAN : per(r->exits, r->packets), 3);
	fmt(c[6], sizeof(c[6]), r->floor ? NAN : per(r->kicks, r->packets), 3);
	fmt(c[7], sizeof(c[7]), r->floor || r->qemu ? NAN : per(r->irqs, r->packets), 3);
	fmt(c[8], sizeof(c[8]), r->floor ? NAN : per(r->packets, r->kicks), 1);
	fmt(c[9], sizeof(c[9]), r->ratio, 2);
	fmt(c[10], sizeof(c[10]), r->cpu, 2);
	fmt(c[11], sizeof(c[11]), r->host_ns, 0);
	fmt(c[12], sizeof(c[12]), r->floor_ns, 0);
	fmt(c[13], sizeof(c[13]), r->other_cpu, 2);
	if (r->beats_floor)
		strcat(c[9], "!");
	if (r->busy)
		strcat(c[13], "*");
	if (!strcmp(r->test, "notify")) {
		/* Per notify rather than per packet. */
		fmt(c[5], sizeof(c[5]), r->qemu ? NAN : per(r->exits, r->guest_frames), 3);
		fmt(c[6], sizeof(c[6]), per(r->kicks, r->guest_frames), 3);
	}
	snprintf(size, sizeof(size), "%u", r->size);
	fprintf(out, HEAD_FMT, r->mode, r->test, size, c[0], c[1], c[2], c[3], c[4], c[5], c[6],
		c[7], c[8], c[9], c[10], c[11], c[12], c[13]);
}

/* An rr row's breakdown under the table (lkvm -n trace=on): each stage's median, their sum
 * against the RTT median the guest measured (the stages' medians add up to it only roughly). */
static void print_stages(FILE *out, const struct bench_row *r)
{
	double sum = 0;

	if (r->error[0] || !(r->trace_transactions > 0))
		return;
	fprintf(out, "# rr stages %s %u (p50 ns):", r->mode, r->size);
	for (int s = 0; s < BENCH_NSTAGES; s++) {
		fprintf(out, " %s %.0f", bench_stages[s], r->stage_p50[s]);
		sum += r->stage_p50[s];
	}
	fprintf(out, " = %.0f vs RTT median %.0f (%.0f transactions, clock +-%.0f ns)\n", sum,
		r->rtt_med_us * 1000, r->trace_transactions, r->trace_clock_err_ns);
}

/* The table on out: the host, why QEMU or vhost did not run, the rows, what the marks mean.
 * Returns how many rows failed. */
int bench_print_table(FILE *out, const struct bench *b)
{
	int failed = 0;

	print_header(out);
	if (b->qemu_note[0])
		fprintf(out, "# qemu: %s\n", b->qemu_note);
	if (b->vhost_note[0])
		fprintf(out, "# vhost: %s\n", b->vhost_note);
	for (int i = 0; i < b->nrows; i++) {
		print_row(out, &b->rows[i]);
		failed += b->rows[i].error[0] != 0;
	}
	print_notes(out, b);
	for (int i = 0; i < b->nrows; i++)
		print_stages(out, &b->rows[i]);
	return failed;
}

static void jdbl(FILE *f, const char *key, double v)
{
	if (isnan(v) || isinf(v))
		fprintf(f, ",\"%s\":null", key);
	else
		fprintf(f, ",\"%s\":%.3f", key, v);
}

/* s inside a JSON string: quotes and backslashes escaped, control characters as '?'. */
static void jesc(FILE *f, const char *s)
{
	for (const char *p = s; *p; p++)
		fprintf(f, (*p == '"' || *p == '\\') ? "\\%c" : (*p < 0x20 ? "?" : "%c"), *p);
}

/* A row's numbers in the JSON, in this order (null where not measured: jdbl). */
static const struct {
	const char *key;
	size_t off; /* of a double in struct bench_row */
} json_numbers[] = {
	{ "secs", offsetof(struct bench_row, secs) },
	{ "pps", offsetof(struct bench_row, pps) },
	{ "mbps", offsetof(struct bench_row, mbps) },
	{ "rtt_median_us", offsetof(struct bench_row, rtt_med_us) },
	{ "rtt_p99_us", offsetof(struct bench_row, rtt_p99_us) },
	{ "tps", offsetof(struct bench_row, tps) },
	{ "x_floor", offsetof(struct bench_row, ratio) },
	{ "lkvm_cpu", offsetof(struct bench_row, cpu) },
	{ "host_ns_per_pkt", offsetof(struct bench_row, host_ns) },
	{ "vcpu_ns_per_pkt", offsetof(struct bench_row, vcpu_ns) },
	{ "floor_ns_per_pkt", offsetof(struct bench_row, floor_ns) },
	{ "other_cpu", offsetof(struct bench_row, other_cpu) },
#define STAGE(i, name)                                                            \
	{ "stage_" name "_p50_ns", offsetof(struct bench_row, stage_p50[i]) },    \
	{                                                                         \
		"stage_" name "_p99_ns", offsetof(struct bench_row, stage_p99[i]) \
	}
	/* in bench_stages' order */
	STAGE(0, "write"),
	STAGE(1, "kick"),
	STAGE(2, "tx"),
	STAGE(3, "wire"),
	STAGE(4, "rx"),
	STAGE(5, "publish"),
	STAGE(6, "notice"),
#undef STAGE
	{ "trace_transactions", offsetof(struct bench_row, trace_transactions) },
	{ "trace_clock_err_ns", offsetof(struct bench_row, trace_clock_err_ns) },
};

/* One row as a JSON object (without the comma between rows). */
static void json_row(FILE *f, const struct bench_row *r)
{
	fprintf(f,
		"{\"mode\":\"%s\",\"test\":\"%s\",\"size\":%u,\"floor\":%s,\"ok\":%s,\"vmm\":\"%s\"",
		r->mode, r->test, r->size, r->floor ? "true" : "false",
		r->error[0] ? "false" : "true", r->qemu ? "qemu" : "lkvm");
	if (r->error[0]) {
		fputs(",\"error\":\"", f);
		jesc(f, r->error);
		fputc('"', f);
	}
	for (size_t i = 0; i < ARRAY_SIZE(json_numbers); i++)
		jdbl(f, json_numbers[i].key,
		     *(const double *)((const char *)r + json_numbers[i].off));
	fprintf(f, ",\"cpu_ticks\":%s", r->cpu_ticks ? "true" : "false");
	fprintf(f, ",\"busy\":%s,\"beats_floor\":%s,\"batch\":%s%s%s", r->busy ? "true" : "false",
		r->beats_floor ? "true" : "false", r->batch ? "\"" : "",
		r->batch ? r->batch : "null", r->batch ? "\"" : "");
	fprintf(f,
		",\"guest_frames\":%llu,\"lost\":%llu,\"peer_frames\":%llu,\"peer_drops\":%llu"
		",\"tap_rx\":%llu,\"tap_tx\":%llu,\"tap_tx_drops\":%llu,\"packets\":%llu,\"kicks\":%llu",
		r->guest_frames, r->lost, r->peer_frames, r->peer_drops, r->tap_rx, r->tap_tx,
		r->tap_tx_drops, r->packets, r->kicks);
	/* lkvm's device counters; QEMU has none to read: null. */
	const struct {
		const char *key;
		unsigned long long v;
	} dev[] = { { "dev_tx_packets", r->tx_pkts }, { "dev_tx_drops", r->tx_drops },
		    { "dev_rx_packets", r->rx_pkts }, { "dev_rx_drops", r->rx_drops },
		    { "trapped", r->trapped },	      { "irqs", r->irqs },
		    { "vcpu_exits", r->exits },	      { "polls", r->polls },
		    { "poll_hits", r->poll_hits },    { "poll_us", r->poll_us } };
	for (size_t d = 0; d < ARRAY_SIZE(dev); d++) {
		if (r->qemu)
			fprintf(f, ",\"%s\":null", dev[d].key);
		else
			fprintf(f, ",\"%s\":%llu", dev[d].key, dev[d].v);
	}
	fputc('}', f);
}

int bench_write_json(const struct bench *b, const char *path)
{
	FILE *f = fopen(path, "we");

	if (!f) {
		pr_err("bench: --json %s: %s", path, strerror(errno));
		return -1;
	}
	fprintf(f, "{\"duration\":%u,\"tap\":\"%s\",\"host\":\"%s\",\"emulated\":%s,\"qemu\":\"",
		b->cfg.secs, TAP_NAME, bench_host_kind(), bench_host_emulated() ? "true" : "false");
	/* "ran", "not asked", or why it could not run */
	jesc(f, !b->cfg.qemu ? "not asked" : b->qemu_note[0] ? b->qemu_note : "ran");
	fputs("\",\"vhost\":\"", f);
	jesc(f, !b->vhost_asked ? "not asked" : b->vhost_note[0] ? b->vhost_note : "ran");
	fputs("\",\"rows\":[\n", f);
	for (int i = 0; i < b->nrows; i++) {
		json_row(f, &b->rows[i]);
		fprintf(f, "%s\n", i + 1 < b->nrows ? "," : "");
	}
	fputs("]}\n", f);
	return fclose(f) ? -1 : 0;
}

/* The charts: --svg FILE (rates) and FILE with "-cpu" before its ".svg" (host CPU per packet). */
int bench_write_svgs(const struct bench *b, const char *path)
{
	char cpu_path[PATH_MAX];
	size_t l = strlen(path);
	int ret = 0;

	if (l > 4 && !strcmp(path + l - 4, ".svg"))
		snprintf(cpu_path, sizeof(cpu_path), "%.*s-cpu.svg", (int)(l - 4), path);
	else
		snprintf(cpu_path, sizeof(cpu_path), "%s-cpu.svg", path);
	for (int cpu = 0; cpu < 2 && !ret; cpu++) {
		const char *p = cpu ? cpu_path : path;
		FILE *f = fopen(p, "we");

		ret = f ? bench_svg(f, b->rows, b->nrows, b->cfg.secs, bench_host_kind(), cpu)
			: -errno;
		if (f && fclose(f) && !ret)
			ret = -errno;
		if (ret)
			pr_err("bench: --svg %s: %s", p, strerror(-ret));
	}
	return ret;
}

/* A row's line on stderr as it ends: how far the run is and the row's headline figure. */
void bench_progress(struct bench *b, const struct bench_row *r)
{
	char a[24], c[24];

	b->done++;
	if (r->error[0]) {
		fprintf(stderr, "bench: [%2d/%d] %s %s %u: FAILED: %s\n", b->done, b->total,
			r->mode, r->test, r->size, r->error);
		return;
	}
	if (!strcmp(r->test, "rr")) {
		fmt(a, sizeof(a), r->tps, 0);
		fmt(c, sizeof(c), r->rtt_med_us, 1);
		fprintf(stderr, "bench: [%2d/%d] %s %s %u: %s trans/s, RTT median %s us\n", b->done,
			b->total, r->mode, r->test, r->size, a, c);
	} else {
		fmt(a, sizeof(a), r->pps / 1000, 1);
		fprintf(stderr, "bench: [%2d/%d] %s %s %u: %s K%s/s\n", b->done, b->total, r->mode,
			r->test, r->size, a, strcmp(r->test, "notify") ? "frames" : "notifies");
	}
}

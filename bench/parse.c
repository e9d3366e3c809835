/* Reading what `lkvm bench net`'s guest and VMM print: the guest's BENCH line and lkvm's --stats=json counters, into a row. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/bench.h"
#include "lkvm/util.h"

#include "bench.h"

/* The value after " key=" in a BENCH line, or NAN. */
static double kv(const char *line, const char *key)
{
	char pat[48];
	const char *p;

	snprintf(pat, sizeof(pat), " %s=", key);
	p = strstr(line, pat);
	return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* A count after " key=": what the guest wrote, unless it is not a number from 0 to 2^63 (a
 * double out of an integer's range converts to undefined behaviour); then 0. */
static unsigned long long kv_count(const char *line, const char *key)
{
	double v = kv(line, key);

	return v >= 0 && v < 0x1p63 ? (unsigned long long)v : 0;
}

/* A number field of the JSON object starting at obj (up to its first '}'). */
static unsigned long long jnum(const char *obj, const char *key)
{
	char pat[48];
	const char *end, *p;

	if (!obj)
		return 0;
	end = strchr(obj, '}');
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(obj, pat);
	if (!p || (end && p > end))
		return 0;
	return strtoull(p + strlen(pat), NULL, 10);
}

/* A number field of the JSON object at obj (up to its first '}'), or NAN: absent, or not a
 * number (null). */
static double jval(const char *obj, const char *key)
{
	char pat[48], *num_end;
	const char *end, *p;
	double v;

	if (!obj)
		return NAN;
	end = strchr(obj, '}');
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(obj, pat);
	if (!p || (end && p > end))
		return NAN;
	p += strlen(pat);
	v = strtod(p, &num_end);
	return num_end == p ? NAN : v;
}

static const char *jqueue(const char *stats, const char *name)
{
	char pat[48];

	snprintf(pat, sizeof(pat), "\"name\":\"%s\"", name);
	return stats ? strstr(stats, pat) : NULL;
}

const char *bench_last_line(const char *out, const char *prefix)
{
	const char *best = NULL;
	size_t pl = strlen(prefix);

	for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, prefix, pl))
			best = p;
	return best;
}

const char *const bench_stages[BENCH_NSTAGES] = { "write", "kick",    "tx",    "wire",
						  "rx",	   "publish", "notice" };

/* lkvm's "trace" group (-n trace=on): an object of its own ("trace":{...}) or a named one
 * ({"name":"trace",...}); the stages stay NAN without it or without a transaction. */
static void parse_trace(struct bench_row *r, const char *stats)
{
	const char *t = stats ? strstr(stats, "\"trace\":{") : NULL;
	char key[40];

	if (!t)
		t = jqueue(stats, "trace");
	r->trace_transactions = jval(t, "transactions");
	r->trace_clock_err_ns = jval(t, "clock_err_ns");
	for (int s = 0; s < BENCH_NSTAGES; s++) {
		r->stage_p50[s] = r->stage_p99[s] = NAN;
		if (!(r->trace_transactions > 0))
			continue;
		snprintf(key, sizeof(key), "%s_p50_ns", bench_stages[s]);
		r->stage_p50[s] = jval(t, key);
		snprintf(key, sizeof(key), "%s_p99_ns", bench_stages[s]);
		r->stage_p99[s] = jval(t, key);
	}
}

/* Fills the device counters of r from the --stats=json line. */
void bench_parse_stats(struct bench_row *r, const char *stats)
{
	const char *tx = jqueue(stats, "tx0"), *rx = jqueue(stats, "rx0");

	r->exits = jnum(stats, "total");
	r->tx_pkts = jnum(tx, "packets");
	r->tx_drops = jnum(tx, "drops");
	r->rx_pkts = jnum(rx, "packets");
	r->rx_drops = jnum(rx, "drops");
	r->kicks = jnum(tx, "kicks") + jnum(rx, "kicks");
	r->trapped = jnum(tx, "trapped") + jnum(rx, "trapped");
	r->irqs = jnum(tx, "irqs") + jnum(rx, "irqs");
	r->polls = jnum(tx, "polls");
	r->poll_hits = jnum(tx, "poll_hits");
	r->poll_us = jnum(tx, "poll_us");
	r->packets = r->tx_pkts + r->rx_pkts;
	parse_trace(r, stats);
}

/* The guest's BENCH line into the row (under QEMU, which counts nothing for us, the notifies
 * the guest wrote stand for kicks). */
void bench_parse_bench_line(struct bench_row *r, const char *bl, bool qemu)
{
	char line[1024];
	size_t l = strcspn(bl, "\n");

	snprintf(line, sizeof(line), "%.*s", (int)MIN(l, sizeof(line) - 1), bl);
	r->secs = kv(line, "secs");
	if (!strcmp(r->test, "tx") || !strcmp(r->test, "rx")) {
		r->guest_frames = kv_count(line, "frames");
		r->pps = kv(line, "pps");
		r->mbps = kv(line, "mbps");
	} else if (!strcmp(r->test, "rr")) {
		r->guest_frames = kv_count(line, "transactions");
		r->lost = kv_count(line, "lost");
		r->tps = kv(line, "tps");
		r->pps = 2 * r->tps;
		r->mbps = 2 * r->tps * r->size * 8 / 1e6;
		r->rtt_med_us = kv(line, "lat_median_ns") / 1000;
		r->rtt_p99_us = kv(line, "lat_p99_ns") / 1000;
	} else { /* notify */
		r->guest_frames = kv_count(line, "notifies");
		r->pps = kv(line, "rate");
	}
	if (qemu) {
		r->kicks = !strcmp(r->test, "notify") ? r->guest_frames : kv_count(line, "kicks");
		r->packets = !strcmp(r->test, "rr") ? 2 * r->guest_frames : r->guest_frames;
	}
}

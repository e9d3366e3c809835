/* The one formatter of --stats and lkvm stat: a VM's flat counters (stats.h's names, as the control socket carries them) as a table or JSON. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/ctl.h"
#include "lkvm/stats-fmt.h"

/* ---- how each kind of device is shown ---- */

/* A table column: a counter (head is its name), or the ratio num/den (json names it). */
struct stats_col {
	const char *head;
	int width;
	const char *num, *den, *json;
};

#define COL(name, w)                      \
	{                                 \
		name, w, NULL, NULL, NULL \
	}
#define RATIO(head, w, num, den, json)  \
	{                               \
		head, w, num, den, json \
	}

/* A device-wide group (not a queue): one line in the table, an object of its own in JSON. */
struct stats_group {
	const char *name;
	/* its values that are levels, not counts: shown as they are ("*SUFFIX": any name ending so) */
	const char *const *gauges;
};

struct stats_kind {
	const char *name;	      /* "net": devices net0, net1, ... */
	const char *array, *index;    /* JSON: "nets": [{"nic": 0, "queues": [...]}, ...] */
	const struct stats_col *cols; /* the table's columns; JSON has every counter, then ratios */
	const struct stats_group *groups; /* ended by a NULL name; NULL: none */
};

static const struct stats_col net_cols[] = {
	COL("kicks", 12),
	COL("trapped", 12),
	COL("irqs", 12),
	COL("packets", 12),
	COL("bytes", 14),
	RATIO("pkts/kick", 10, "packets", "kicks", "pkts_per_kick"),
	RATIO("pkts/irq", 10, "packets", "irqs", "pkts_per_irq"),
	COL("drops", 10),
	COL("calls", 12),
	RATIO("pkts/call", 10, "packets", "calls", "pkts_per_call"),
	COL("polls", 10),
	COL("poll_hits", 10),
	COL("poll_us", 10),
	{ 0 },
};
static const struct stats_col disk_cols[] = {
	COL("kicks", 12), COL("trapped", 12), COL("irqs", 12), COL("requests", 12),
	COL("bytes", 14), COL("errors", 10),  { 0 },
};
static const struct stats_col console_cols[] = {
	COL("kicks", 12),   COL("trapped", 12), COL("irqs", 12),
	COL("packets", 12), COL("bytes", 14),	{ 0 },
};
static const struct stats_col rng_cols[] = {
	COL("kicks", 12),    COL("trapped", 12), COL("irqs", 12),
	COL("requests", 12), COL("bytes", 14),	 { 0 },
};
static const struct stats_col p9_cols[] = {
	COL("kicks", 12),
	COL("trapped", 12),
	COL("irqs", 12),
	COL("requests", 12),
	COL("bytes", 14),
	COL("errors", 10),
	COL("reads", 12),
	COL("read_bytes", 14),
	COL("write_bytes", 14),
	COL("malformed", 10),
	{ 0 },
};
/* virtio-fs: hiprio and req0 as queues, the server's counters beside them (as 9p's). */
static const struct stats_col fs_cols[] = {
	COL("kicks", 12),
	COL("trapped", 12),
	COL("irqs", 12),
	COL("requests", 12),
	COL("bytes", 14),
	COL("errors", 10),
	COL("reads", 12),
	COL("read_bytes", 14),
	COL("write_bytes", 14),
	COL("malformed", 10),
	{ 0 },
};
static const char *const bounce_gauges[] = { "bytes", "peak", "limit", NULL };
/* A NIC whose data rings vhost-net serves (no counters of those queues here). */
static const char *const vhost_gauges[] = { "pairs", "running", "*_used_idx", NULL };
/* -n trace=on's round-trip stages: the percentiles are of every transaction since the start
 * (a histogram has no difference to show), so `lkvm stat --watch` shows them as they are. */
static const char *const trace_gauges[] = { "tsc_khz", "clock_err_ns", "*_p50_ns", "*_p99_ns",
					    NULL };
static const char *const fid_gauges[] = { "in_use", "limit", "msize", NULL };
/* A share's host files (hostfs): levels; reopens, stale and cap_hits count up. */
static const char *const file_gauges[] = { "nodes", "cached", "open", NULL };

static const struct stats_group net_groups[] = {
	{ "vhost", vhost_gauges },
	{ "trace", trace_gauges },
	{ NULL, NULL },
};
/* snapshot=on's overlay and a qcow2 image's allocation: sizes now, not rates. */
static const char *const overlay_gauges[] = { "bytes", "clusters", NULL };
static const char *const qcow2_gauges[] = { "clusters", "allocated", NULL };
static const struct stats_group disk_groups[] = {
	{ "bounce", bounce_gauges },
	{ "overlay", overlay_gauges },
	{ "qcow2", qcow2_gauges },
	{ NULL, NULL },
};
static const struct stats_group p9_groups[] = {
	{ "fids", fid_gauges },
	{ "files", file_gauges },
	{ NULL, NULL },
};
/* virtio-fs's files group: 9p's and the FUSE server's open handles, and both limits. */
static const char *const fs_file_gauges[] = { "handles", "handle_limit", "nodes", "node_limit",
					      "cached",	 "open",	 NULL };
static const struct stats_group fs_groups[] = { { "files", fs_file_gauges }, { NULL, NULL } };

static const struct stats_kind kinds[] = {
	{ "net", "nets", "nic", net_cols, net_groups },
	{ "disk", "disks", "disk", disk_cols, disk_groups },
	{ "console", "consoles", "console", console_cols, NULL },
	{ "rng", "rngs", "rng", rng_cols, NULL },
	{ "9p", "shares", "share", p9_cols, p9_groups },
	{ "fs", "fs_shares", "share", fs_cols, fs_groups },
};

/* The device-wide group called name, or NULL when it is a queue. */
static const struct stats_group *group_of(const struct stats_kind *kd, const char *name)
{
	for (const struct stats_group *g = kd->groups; g && g->name; g++)
		if (!strcmp(g->name, name))
			return g;
	return NULL;
}

/* ---- reading flat counters ---- */

/* Consecutive values of one device's group: entries [first, end) of the list. */
struct run {
	int index;
	char group[24];
	size_t first, end;
};

/* "KINDn.GROUP.COUNTER" of this kind: n and GROUP, and where COUNTER starts. */
static const char *split(const char *name, const char *kind, int *index, char *group, size_t glen)
{
	size_t kl = strlen(kind);
	const char *dot;
	char *end;
	long n;

	if (strncmp(name, kind, kl) || name[kl] < '0' || name[kl] > '9')
		return NULL;
	n = strtol(name + kl, &end, 10);
	if (*end != '.' || n > 1000 || !(dot = strchr(end + 1, '.')) ||
	    (size_t)(dot - end - 1) >= glen)
		return NULL;
	memcpy(group, end + 1, (size_t)(dot - end - 1));
	group[dot - end - 1] = '\0';
	*index = (int)n;
	return dot + 1;
}

static bool next_run(const struct ctl_kvs *k, size_t *at, const char *kind, struct run *r)
{
	char group[sizeof(r->group)];
	int index;

	for (; *at < k->n; (*at)++)
		if (!k->v[*at].is_str &&
		    split(k->v[*at].name, kind, &r->index, r->group, sizeof(r->group)))
			break;
	if (*at >= k->n)
		return false;
	r->first = (*at)++;
	while (*at < k->n && !k->v[*at].is_str &&
	       split(k->v[*at].name, kind, &index, group, sizeof(group)) && index == r->index &&
	       !strcmp(group, r->group))
		(*at)++;
	r->end = *at;
	return true;
}

/* The value of `name` in cur, less its value in prev unless it is a level. */
static u64 val(const struct ctl_kvs *cur, const struct ctl_kvs *prev, const char *name, bool level)
{
	u64 v = ctl_kv_u64(cur, name);

	return prev && !level ? v - ctl_kv_u64(prev, name) : v;
}

static bool is_gauge(const struct stats_kind *kd, const struct run *r, const char *counter)
{
	const struct stats_group *grp = group_of(kd, r->group);
	size_t n = strlen(counter);

	for (const char *const *g = grp ? grp->gauges : NULL; g && *g; g++) {
		/* "*SUFFIX": every counter ending in SUFFIX (one per queue: rx0_used_idx, ...). */
		size_t sl = strlen(*g + 1);

		if (**g == '*' ? n >= sl && !strcmp(counter + n - sl, *g + 1)
			       : !strcmp(counter, *g))
			return true;
	}
	return false;
}

/* Counter `counter` of run r. */
static u64 run_val(const struct stats_kind *kd, const struct ctl_kvs *cur,
		   const struct ctl_kvs *prev, const struct run *r, const char *counter)
{
	char name[CTL_NAME_MAX + 1];

	snprintf(name, sizeof(name), "%s%d.%s.%s", kd->name, r->index, r->group, counter);
	return val(cur, prev, name, is_gauge(kd, r, counter));
}

static void ratio(char *buf, size_t len, u64 a, u64 b, bool json)
{
	if (b)
		snprintf(buf, len, "%.2f", (double)a / (double)b);
	else
		snprintf(buf, len, "%s", json ? "null" : "-");
}

/* The run's counters, "bytes 0, peak 0" in the table, "\"bytes\":0,\"peak\":0" in JSON; with
 * more, after something already printed (a comma first). */
static void put_counters(FILE *out, const struct stats_kind *kd, const struct ctl_kvs *cur,
			 const struct ctl_kvs *prev, const struct run *r, bool json, bool more)
{
	for (size_t i = r->first; i < r->end; i++) {
		const char *counter = strrchr(cur->v[i].name, '.') + 1;
		u64 v = run_val(kd, cur, prev, r, counter);
		const char *sep = i > r->first || more ? "," : "";

		if (json)
			fprintf(out, "%s\"%s\":%" PRIu64, sep, counter, v);
		else
			fprintf(out, "%s %s %" PRIu64, sep, counter, v);
	}
}

/* ---- the table ---- */

static void table_head(FILE *out, const struct stats_kind *kd, int index)
{
	fprintf(out, "%s%d:\n%-6s", kd->name, index, "queue");
	for (const struct stats_col *c = kd->cols; c->head; c++)
		fprintf(out, " %*s", c->width, c->head);
	fputc('\n', out);
}

static void table_row(FILE *out, const struct stats_kind *kd, const struct ctl_kvs *cur,
		      const struct ctl_kvs *prev, const struct run *r)
{
	char buf[32];

	fprintf(out, "%-6s", r->group);
	for (const struct stats_col *c = kd->cols; c->head; c++) {
		if (c->num) {
			ratio(buf, sizeof(buf), run_val(kd, cur, prev, r, c->num),
			      run_val(kd, cur, prev, r, c->den), false);
			fprintf(out, " %*s", c->width, buf);
		} else {
			fprintf(out, " %*" PRIu64, c->width, run_val(kd, cur, prev, r, c->head));
		}
	}
	fputc('\n', out);
}

/* A device-wide group on one line: "bounce: bytes 0, peak 0, limit 67108864, waits 0". */
static void table_group(FILE *out, const struct stats_kind *kd, const struct ctl_kvs *cur,
			const struct ctl_kvs *prev, const struct run *r)
{
	fprintf(out, "%s:", r->group);
	put_counters(out, kd, cur, prev, r, false, false);
	fputc('\n', out);
}

static void table_kind(FILE *out, const struct stats_kind *kd, const struct ctl_kvs *cur,
		       const struct ctl_kvs *prev)
{
	size_t at = 0;
	struct run r;
	int dev = -1;

	while (next_run(cur, &at, kd->name, &r)) {
		if (r.index != dev)
			table_head(out, kd, r.index);
		dev = r.index;
		if (group_of(kd, r.group))
			table_group(out, kd, cur, prev, &r);
		else
			table_row(out, kd, cur, prev, &r);
	}
}

/* gdb's counters (gdb.COUNTER), there once the VM has had a gdb server: a VM-wide group, as a
 * device-wide one is shown ("gdb: stops 2, breakpoints_hit 1, ..." in the table, "gdb":{...} in
 * JSON). Counts: --watch shows their changes. */
static void put_gdb(FILE *out, const struct ctl_kvs *cur, const struct ctl_kvs *prev, bool json)
{
	bool any = false;

	for (size_t i = 0; i < cur->n; i++) {
		const char *n = cur->v[i].name;

		if (cur->v[i].is_str || strncmp(n, "gdb.", 4))
			continue;
		if (json)
			fprintf(out, "%s\"%s\":%" PRIu64, any ? "," : ",\"gdb\":{", n + 4,
				val(cur, prev, n, false));
		else
			fprintf(out, "%s %s %" PRIu64, any ? "," : "gdb:", n + 4,
				val(cur, prev, n, false));
		any = true;
	}
	if (any)
		fputs(json ? "}" : "\n", out);
}

static void table_top(FILE *out, const struct ctl_kvs *cur, const struct ctl_kvs *prev,
		      double interval)
{
	char up[32];
	bool any = false;

	if (ctl_kv_get(cur, "name")) {
		ctl_fmt_duration(up, sizeof(up), ctl_kv_u64(cur, "uptime_ns"));
		fprintf(out, "%s: %s, up %s, guest clock ", ctl_kv_str(cur, "name"),
			ctl_kv_str(cur, "state"), up);
		if (prev)
			fprintf(out, "+%.3f s; changes in the last %.1f s:\n",
				(double)val(cur, prev, "guest_clock_ns", false) / 1e9, interval);
		else
			fprintf(out, "%.3f s\n", (double)ctl_kv_u64(cur, "guest_clock_ns") / 1e9);
	}
	fprintf(out, "vCPU exits: %" PRIu64 " (port I/O %" PRIu64 ", MMIO %" PRIu64 ")\n",
		val(cur, prev, "vcpu.exits.total", false), val(cur, prev, "vcpu.exits.io", false),
		val(cur, prev, "vcpu.exits.mmio", false));
	for (size_t i = 0; i < cur->n; i++) {
		if (strncmp(cur->v[i].name, "vcpu.exit.", 10))
			continue;
		fprintf(out, "%s %s %" PRIu64, any ? "," : "  by reason:", cur->v[i].name + 10,
			val(cur, prev, cur->v[i].name, false));
		any = true;
	}
	if (any)
		fputc('\n', out);
	if (ctl_kv_get(cur, "memory.rss_kib"))
		fprintf(out,
			"memory: RSS %" PRIu64 " KiB: guest RAM %" PRIu64 " KiB, lkvm %" PRIu64
			" KiB (%" PRIu64 " KiB not its binary's or libraries' pages)\n",
			ctl_kv_u64(cur, "memory.rss_kib"), ctl_kv_u64(cur, "memory.guest_kib"),
			ctl_kv_u64(cur, "memory.lkvm_kib"),
			ctl_kv_u64(cur, "memory.lkvm_private_kib"));
	put_gdb(out, cur, prev, false);
}

/* ---- JSON ---- */

static void json_row(FILE *out, const struct stats_kind *kd, const struct ctl_kvs *cur,
		     const struct ctl_kvs *prev, const struct run *r, bool first)
{
	char buf[32];

	fprintf(out, "%s{\"name\":", first ? "" : ",");
	ctl_json_str(out, r->group);
	put_counters(out, kd, cur, prev, r, true, true);
	for (const struct stats_col *c = kd->cols; c->head; c++) {
		if (!c->num)
			continue;
		ratio(buf, sizeof(buf), run_val(kd, cur, prev, r, c->num),
		      run_val(kd, cur, prev, r, c->den), true);
		fprintf(out, ",\"%s\":%s", c->json, buf);
	}
	fputc('}', out);
}

static void json_group(FILE *out, const struct stats_kind *kd, const struct ctl_kvs *cur,
		       const struct ctl_kvs *prev, const struct run *r)
{
	fprintf(out, ",\"%s\":{", r->group);
	put_counters(out, kd, cur, prev, r, true, false);
	fputc('}', out);
}

/* "nets":[{"nic":0,"queues":[{...},...],"bounce":{...}},...]. A device reports its queues
 * before its group; a queue after it would make a second "queues" and is left out. */
static void json_kind(FILE *out, const struct stats_kind *kd, const struct ctl_kvs *cur,
		      const struct ctl_kvs *prev)
{
	bool in_queues = false, first = true;
	size_t at = 0;
	struct run r;
	int dev = -1;

	fprintf(out, ",\"%s\":[", kd->array);
	while (next_run(cur, &at, kd->name, &r)) {
		bool group = group_of(kd, r.group) != NULL;

		if (r.index != dev) {
			fprintf(out, "%s{\"%s\":%d,\"queues\":[",
				dev < 0	    ? ""
				: in_queues ? "]},"
					    : "},",
				kd->index, r.index);
			dev = r.index;
			in_queues = first = true;
		}
		if (group && in_queues)
			fputc(']', out);
		if (group) {
			in_queues = false;
			json_group(out, kd, cur, prev, &r);
		} else if (in_queues) {
			json_row(out, kd, cur, prev, &r, first);
			first = false;
		}
	}
	fprintf(out, "%s]", dev < 0 ? "" : in_queues ? "]}" : "}");
}

static void json_top(FILE *out, const struct ctl_kvs *cur, const struct ctl_kvs *prev,
		     double interval)
{
	bool any = false;

	if (ctl_kv_get(cur, "name")) {
		fputs("\"name\":", out);
		ctl_json_str(out, ctl_kv_str(cur, "name"));
		fputs(",\"state\":", out);
		ctl_json_str(out, ctl_kv_str(cur, "state"));
		fprintf(out, ",\"uptime_s\":%.3f,\"guest_clock_s\":%.6f,",
			(double)ctl_kv_u64(cur, "uptime_ns") / 1e9,
			(double)val(cur, prev, "guest_clock_ns", false) / 1e9);
		if (prev)
			fprintf(out, "\"interval_s\":%.3f,", interval);
	}
	fprintf(out,
		"\"vcpu_exits\":{\"total\":%" PRIu64 ",\"io\":%" PRIu64 ",\"mmio\":%" PRIu64
		",\"by_reason\":{",
		val(cur, prev, "vcpu.exits.total", false), val(cur, prev, "vcpu.exits.io", false),
		val(cur, prev, "vcpu.exits.mmio", false));
	for (size_t i = 0; i < cur->n; i++) {
		if (strncmp(cur->v[i].name, "vcpu.exit.", 10))
			continue;
		fprintf(out, "%s\"%s\":%" PRIu64, any ? "," : "", cur->v[i].name + 10,
			val(cur, prev, cur->v[i].name, false));
		any = true;
	}
	fputs("}}", out);
	/* Levels, never differences (--watch shows them as they are). */
	if (ctl_kv_get(cur, "memory.rss_kib"))
		fprintf(out,
			",\"memory\":{\"rss_kib\":%" PRIu64 ",\"guest_kib\":%" PRIu64
			",\"lkvm_kib\":%" PRIu64 ",\"lkvm_private_kib\":%" PRIu64 "}",
			ctl_kv_u64(cur, "memory.rss_kib"), ctl_kv_u64(cur, "memory.guest_kib"),
			ctl_kv_u64(cur, "memory.lkvm_kib"),
			ctl_kv_u64(cur, "memory.lkvm_private_kib"));
	put_gdb(out, cur, prev, true);
}

void stats_print(FILE *out, const struct ctl_kvs *cur, const struct ctl_kvs *prev, double interval,
		 bool json)
{
	if (json)
		fputc('{', out);
	(json ? json_top : table_top)(out, cur, prev, interval);
	for (size_t i = 0; i < ARRAY_SIZE(kinds); i++)
		(json ? json_kind : table_kind)(out, &kinds[i], cur, prev);
	if (json)
		fputs("}\n", out);
}

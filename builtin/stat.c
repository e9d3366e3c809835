/* `lkvm stat NAME [--json] [--watch SECS]`: a running VM's counters (the fields of --stats), or their deltas per interval. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lkvm/builtin.h"
#include "lkvm/ctl.h"

static const char *const queue_fields[] = { "kicks", "trapped", "irqs", "packets", "bytes", "drops",
					    "batches", "polls", "poll_hits", "poll_us" };

void stat_usage(FILE *out)
{
	fprintf(out,
		"usage: lkvm stat NAME [--json] [--watch SECS [--count N]]\n"
		"\n"
		"Print a running VM's counters, the fields of lkvm run --stats: vCPU exits (total,\n"
		"port I/O, MMIO, and by KVM exit reason), and per NIC and queue kicks, trapped\n"
		"exits, interrupts, packets, bytes, packets per kick and per interrupt, drops,\n"
		"wake-ups with work (batches), and for tx=poll polls, poll_hits and poll_us.\n"
		"\n"
		"      --json        one JSON object (one per interval with --watch):\n"
		"                    {name, state, uptime_s, guest_clock_s (kvm-clock; with --watch its\n"
		"                    advance), [interval_s,] vcpu_exits: {total, io, mmio,\n"
		"                    by_reason: {...}}, nets: [{nic, queues: [{name, kicks, ...}]}]}\n"
		"      --watch SECS  every SECS (0.1 to 3600) print what changed in that interval:\n"
		"                    counters are deltas, ratios are of the deltas; ends when the VM\n"
		"                    does (exit 0) or on Ctrl-C\n"
		"      --count N     with --watch: stop after N intervals\n"
		"  -h, --help        this text\n"
		"\n"
		"Exit status: 0, or 1 no such VM or bad arguments.\n");
}

/* The counter `name` in cur, minus its value in prev when given. */
static u64 val(const struct ctl_kvs *cur, const struct ctl_kvs *prev, const char *name)
{
	u64 v = ctl_kv_u64(cur, name);

	return prev ? v - ctl_kv_u64(prev, name) : v;
}

static void ratio(char *buf, size_t len, u64 a, u64 b, bool json)
{
	if (b)
		snprintf(buf, len, "%.2f", (double)a / (double)b);
	else
		snprintf(buf, len, "%s", json ? "null" : "-");
}

/* NIC number and queue name of a "netN.QUEUE.FIELD" field; false for anything else. */
static bool net_field(const char *name, int *nic, char *queue, size_t qlen)
{
	const char *dot, *dot2;
	char *end;
	long n;

	if (strncmp(name, "net", 3))
		return false;
	n = strtol(name + 3, &end, 10);
	if (end == name + 3 || *end != '.' || n < 0 || n > 64)
		return false;
	dot = end;
	dot2 = strchr(dot + 1, '.');
	if (!dot2 || (size_t)(dot2 - dot - 1) >= qlen)
		return false;
	memcpy(queue, dot + 1, (size_t)(dot2 - dot - 1));
	queue[dot2 - dot - 1] = '\0';
	*nic = (int)n;
	return true;
}

struct row {
	int nic;
	char queue[24];
};

/* The (NIC, queue) pairs in the order the VM sent them. */
static size_t rows_of(const struct ctl_kvs *k, struct row *rows, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < k->n; i++) {
		struct row r;
		bool seen = false;

		if (!net_field(k->v[i].name, &r.nic, r.queue, sizeof(r.queue)))
			continue;
		for (size_t j = 0; j < n && !seen; j++)
			seen = rows[j].nic == r.nic && !strcmp(rows[j].queue, r.queue);
		if (!seen && n < max)
			rows[n++] = r;
	}
	return n;
}

static void print_table(const struct ctl_kvs *cur, const struct ctl_kvs *prev, double interval)
{
	struct row rows[4 * 24];
	size_t nrows = rows_of(cur, rows, ARRAY_SIZE(rows));
	char up[32];
	int nic = -1;
	bool any = false;

	ctl_fmt_duration(up, sizeof(up), ctl_kv_u64(cur, "uptime_ns"));
	if (prev)
		printf("%s: %s, up %s, guest clock +%.3f s; changes in the last %.1f s:\n", ctl_kv_str(cur, "name"),
		       ctl_kv_str(cur, "state"), up, (double)val(cur, prev, "guest_clock_ns") / 1e9, interval);
	else
		printf("%s: %s, up %s, guest clock %.3f s\n", ctl_kv_str(cur, "name"), ctl_kv_str(cur, "state"), up,
		       (double)ctl_kv_u64(cur, "guest_clock_ns") / 1e9);
	printf("vCPU exits: %" PRIu64 " (port I/O %" PRIu64 ", MMIO %" PRIu64 ")\n", val(cur, prev, "vcpu.exits.total"),
	       val(cur, prev, "vcpu.exits.io"), val(cur, prev, "vcpu.exits.mmio"));
	for (size_t i = 0; i < cur->n; i++) {
		if (strncmp(cur->v[i].name, "vcpu.exit.", 10))
			continue;
		printf("%s %s %" PRIu64, any ? "," : "  by reason:", cur->v[i].name + 10,
		       val(cur, prev, cur->v[i].name));
		any = true;
	}
	if (any)
		putchar('\n');
	for (size_t r = 0; r < nrows; r++) {
		char name[CTL_NAME_MAX + 1], pk[32], pi[32];
		u64 v[ARRAY_SIZE(queue_fields)];

		if (rows[r].nic != nic) {
			nic = rows[r].nic;
			printf("net%d:\n%-6s %12s %12s %12s %12s %14s %10s %10s %10s %10s %10s %10s\n", nic, "queue",
			       "kicks", "trapped", "irqs", "packets", "bytes", "pkts/kick", "pkts/irq", "drops",
			       "polls", "poll_hits", "poll_us");
		}
		for (size_t f = 0; f < ARRAY_SIZE(queue_fields); f++) {
			snprintf(name, sizeof(name), "net%d.%s.%s", nic, rows[r].queue, queue_fields[f]);
			v[f] = val(cur, prev, name);
		}
		ratio(pk, sizeof(pk), v[3], v[0], false);
		ratio(pi, sizeof(pi), v[3], v[2], false);
		printf("%-6s %12" PRIu64 " %12" PRIu64 " %12" PRIu64 " %12" PRIu64 " %14" PRIu64
		       " %10s %10s %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64 "\n",
		       rows[r].queue, v[0], v[1], v[2], v[3], v[4], pk, pi, v[5], v[7], v[8], v[9]);
	}
}

static void print_json(const struct ctl_kvs *cur, const struct ctl_kvs *prev, double interval)
{
	struct row rows[4 * 24];
	size_t nrows = rows_of(cur, rows, ARRAY_SIZE(rows));
	int nic = -1;
	bool any = false;

	fputs("{\"name\":", stdout);
	ctl_json_str(stdout, ctl_kv_str(cur, "name"));
	fputs(",\"state\":", stdout);
	ctl_json_str(stdout, ctl_kv_str(cur, "state"));
	printf(",\"uptime_s\":%.3f,\"guest_clock_s\":%.6f", (double)ctl_kv_u64(cur, "uptime_ns") / 1e9,
	       (double)val(cur, prev, "guest_clock_ns") / 1e9);
	if (prev)
		printf(",\"interval_s\":%.3f", interval);
	printf(",\"vcpu_exits\":{\"total\":%" PRIu64 ",\"io\":%" PRIu64 ",\"mmio\":%" PRIu64 ",\"by_reason\":{",
	       val(cur, prev, "vcpu.exits.total"), val(cur, prev, "vcpu.exits.io"), val(cur, prev, "vcpu.exits.mmio"));
	for (size_t i = 0; i < cur->n; i++) {
		if (strncmp(cur->v[i].name, "vcpu.exit.", 10))
			continue;
		printf("%s\"%s\":%" PRIu64, any ? "," : "", cur->v[i].name + 10, val(cur, prev, cur->v[i].name));
		any = true;
	}
	fputs("}},\"nets\":[", stdout);
	for (size_t r = 0; r < nrows; r++) {
		char name[CTL_NAME_MAX + 1], pk[32], pi[32];
		u64 v[ARRAY_SIZE(queue_fields)];

		if (rows[r].nic != nic) {
			printf("%s{\"nic\":%d,\"queues\":[", nic < 0 ? "" : "]},", rows[r].nic);
			nic = rows[r].nic;
		} else {
			fputc(',', stdout);
		}
		printf("{\"name\":\"%s\"", rows[r].queue);
		for (size_t f = 0; f < ARRAY_SIZE(queue_fields); f++) {
			snprintf(name, sizeof(name), "net%d.%s.%s", nic, rows[r].queue, queue_fields[f]);
			v[f] = val(cur, prev, name);
			printf(",\"%s\":%" PRIu64, queue_fields[f], v[f]);
		}
		ratio(pk, sizeof(pk), v[3], v[0], true);
		ratio(pi, sizeof(pi), v[3], v[2], true);
		printf(",\"pkts_per_kick\":%s,\"pkts_per_irq\":%s}", pk, pi);
	}
	printf("%s]}\n", nic < 0 ? "" : "]}");
}

static int parse_secs(const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0.1 && v <= 3600))
		return -EINVAL;
	*out = v;
	return 0;
}

int cmd_stat(int argc, char **argv)
{
	const char *name = NULL;
	bool json = false;
	double watch = 0;
	long count = 0;
	struct ctl_kvs prev, cur;
	u64 t_prev;

	if (ctl_cli_wants_help(argc, argv)) {
		stat_usage(stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		char *end;

		if (!strcmp(argv[i], "--json")) {
			json = true;
		} else if (!strcmp(argv[i], "--watch")) {
			if (i + 1 >= argc || parse_secs(argv[i + 1], &watch) < 0) {
				pr_err("stat: --watch needs seconds from 0.1 to 3600");
				return 1;
			}
			i++;
		} else if (!strcmp(argv[i], "--count")) {
			count = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
			if (i + 1 >= argc || *end || count < 1) {
				pr_err("stat: --count needs a positive number of intervals");
				return 1;
			}
			i++;
		} else if (argv[i][0] == '-' || name) {
			pr_err("stat: unexpected argument '%s' (see lkvm stat --help)", argv[i]);
			return 1;
		} else {
			name = argv[i];
		}
	}
	if (!name) {
		pr_err("stat: give a VM name (see lkvm stat --help)");
		return 1;
	}
	if (count && !watch) {
		pr_err("stat: --count goes with --watch");
		return 1;
	}
	if (ctl_cli_call(name, CTL_STAT, &prev, NULL, 10000))
		return 1;
	t_prev = now_ns();
	if (!watch) {
		if (json)
			print_json(&prev, NULL, 0);
		else
			print_table(&prev, NULL, 0);
		ctl_kvs_free(&prev);
		return 0;
	}
	for (long n = 0; !count || n < count; n++) {
		u64 due = t_prev + (u64)(watch * 1e9), now = now_ns();
		struct timespec ts;
		u64 t;

		if (due > now) {
			ts = (struct timespec){ .tv_sec = (time_t)((due - now) / 1000000000ull),
						.tv_nsec = (long)((due - now) % 1000000000ull) };
			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
		}
		if (ctl_cli_call(name, CTL_STAT, &cur, NULL, 10000)) {
			printf("%s: gone\n", name);
			break;
		}
		t = now_ns();
		if (json)
			print_json(&cur, &prev, (double)(t - t_prev) / 1e9);
		else
			print_table(&cur, &prev, (double)(t - t_prev) / 1e9);
		fflush(stdout);
		ctl_kvs_free(&prev);
		prev = cur;
		t_prev = t;
	}
	ctl_kvs_free(&prev);
	return 0;
}

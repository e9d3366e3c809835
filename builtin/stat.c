/* `lkvm stat NAME [--json] [--watch SECS]`: a running VM's counters (the fields of --stats), or their deltas per interval. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lkvm/builtin.h"
#include "lkvm/ctl.h"
#include "lkvm/stats-fmt.h"

void stat_usage(FILE *out)
{
	fprintf(out,
		"usage: lkvm stat NAME [--json] [--watch SECS [--count N]]\n"
		"\n"
		"Print a running VM's counters, those of lkvm run --stats: vCPU exits (total,\n"
		"port I/O, MMIO, and by KVM exit reason); per NIC and queue kicks, trapped\n"
		"exits, interrupts, packets, bytes, packets per kick and per interrupt, drops,\n"
		"wake-ups with work (batches), and for tx=poll polls, poll_hits and poll_us; per\n"
		"disk its queue's kicks, trapped, irqs, requests, bytes and errors, its bounce\n"
		"buffers, and snapshot=on's overlay (bytes, clusters) or a qcow2 image's data\n"
		"clusters (clusters, allocated by this run); for virtio-console (rx, tx) and\n"
		"virtio-rng the same per queue; once the VM has had a gdb server, gdb's stops,\n"
		"breakpoints_hit, steps, packets, bad_packets and clients.\n"
		"\n"
		"      --json        one JSON object (one per interval with --watch):\n"
		"                    {name, state, uptime_s, guest_clock_s (kvm-clock; with --watch its\n"
		"                    advance), [interval_s,] vcpu_exits: {total, io, mmio,\n"
		"                    by_reason: {...}}, [gdb: {stops, ...},] nets: [{nic, queues:\n"
		"                    [{name, kicks, ...}]}],\n"
		"                    disks: [{disk, queues: [...], bounce: {...}, [overlay: {...},]\n"
		"                    [qcow2: {...}]}], consoles: [...],\n"
		"                    rngs: [...]}\n"
		"      --watch SECS  every SECS (0.1 to 3600) print what changed in that interval:\n"
		"                    counters are deltas, ratios are of the deltas; ends when the VM\n"
		"                    does (exit 0) or on Ctrl-C\n"
		"      --count N     with --watch: stop after N intervals\n"
		"  -h, --help        this text\n"
		"\n"
		"Exit status: 0, or 1 no such VM or bad arguments.\n");
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

struct stat_args {
	const char *name;
	bool json;
	double watch;
	long count;
};

/* 0, or 1 with the error printed. */
static int parse_args(int argc, char **argv, struct stat_args *a)
{
	for (int i = 1; i < argc; i++) {
		char *end;

		if (!strcmp(argv[i], "--json")) {
			a->json = true;
		} else if (!strcmp(argv[i], "--watch")) {
			if (i + 1 >= argc || parse_secs(argv[i + 1], &a->watch) < 0) {
				pr_err("stat: --watch needs seconds from 0.1 to 3600");
				return 1;
			}
			i++;
		} else if (!strcmp(argv[i], "--count")) {
			a->count = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
			if (i + 1 >= argc || *end || a->count < 1) {
				pr_err("stat: --count needs a positive number of intervals");
				return 1;
			}
			i++;
		} else if (argv[i][0] == '-' || a->name) {
			pr_err("stat: unexpected argument '%s' (see lkvm stat --help)", argv[i]);
			return 1;
		} else {
			a->name = argv[i];
		}
	}
	if (!a->name) {
		pr_err("stat: give a VM name (see lkvm stat --help)");
		return 1;
	}
	if (a->count && !a->watch) {
		pr_err("stat: --count goes with --watch");
		return 1;
	}
	return 0;
}

/* Every interval, what changed since the last one, until the VM ends or count is reached. */
static void watch(const struct stat_args *a, struct ctl_kvs *prev)
{
	u64 t_prev = now_ns();

	for (long n = 0; !a->count || n < a->count; n++) {
		u64 due = t_prev + (u64)(a->watch * 1e9), now = now_ns();
		struct ctl_kvs cur;
		struct timespec ts;
		u64 t;

		if (due > now) {
			ts = (struct timespec){ .tv_sec = (time_t)((due - now) / 1000000000ull),
						.tv_nsec = (long)((due - now) % 1000000000ull) };
			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
		}
		if (ctl_cli_call(a->name, CTL_STAT, &cur, NULL, 10000)) {
			printf("%s: gone\n", a->name);
			break;
		}
		t = now_ns();
		stats_print(stdout, &cur, prev, (double)(t - t_prev) / 1e9, a->json);
		fflush(stdout);
		ctl_kvs_free(prev);
		*prev = cur;
		t_prev = t;
	}
}

int cmd_stat(int argc, char **argv)
{
	struct stat_args a = { 0 };
	struct ctl_kvs first;

	if (ctl_cli_wants_help(argc, argv)) {
		stat_usage(stdout);
		return 0;
	}
	if (parse_args(argc, argv, &a) || ctl_cli_call(a.name, CTL_STAT, &first, NULL, 10000))
		return 1;
	if (a.watch)
		watch(&a, &first);
	else
		stats_print(stdout, &first, NULL, 0, a.json);
	ctl_kvs_free(&first);
	return 0;
}

/* `lkvm bench`: its options and help; `lkvm bench net` itself is the program in bench/ (bench/run.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lkvm/builtin.h"
#include "lkvm/opt.h"
#include "lkvm/util.h"

#include "../bench/bench.h"

/* A mode's what, its later lines under its first (help's column of descriptions). */
static void mode_help(FILE *out, const char *name, int width, const char *what)
{
	int l = (int)strcspn(what, "\n");

	fprintf(out, "                     %-*s %.*s\n", width, name, l, what);
	while (what[l]) {
		what += l + 1;
		l = (int)strcspn(what, "\n");
		fprintf(out, "                     %-*s %.*s\n", width, "", l, what);
	}
}

static void modes_help(FILE *out)
{
	for (int m = 0; m < M_NR; m++)
		mode_help(out, bench_mode_info[m].name, 10, bench_mode_info[m].what);
}

static void qemu_help(FILE *out)
{
	for (int q = 0; q < Q_NR; q++)
		mode_help(out, bench_qemu_info[q].name, 16, bench_qemu_info[q].what);
	fprintf(out,
		"                   QEMU rows have no device counters (shown as -) except kicks, which\n"
		"                   the guest counts itself. Where QEMU cannot run, one line says why\n"
		"                   and only lkvm's rows are printed.\n");
}

#define CFG(member) OPT_AT(struct bench_cfg, member)

static const struct opt bench_opts[] = {
	{ "modes", 0, OPT_FN, .fn = bench_opt_modes, .arg = "LIST", .more_help = modes_help,
	  .help = "TX strategies, comma-separated (default ioeventfd,trap,timer,poll):" },
	{ "tests", 0, OPT_FN, .fn = bench_opt_tests, .arg = "LIST",
	  .help = "tx (guest sends), rr (guest sends, peer echoes: latency), rx (peer\n"
		  "sends) (default tx,rr,rx)" },
	{ "sizes", 0, OPT_FN, .fn = bench_opt_sizes, .arg = "LIST",
	  .help = "frame sizes in bytes, 60-1514 (default 64,1500)" },
	{ "batch", 0, OPT_FN, .fn = bench_opt_batch, .arg = "LIST",
	  .help = "lkvm's -n batch= per mode, on and/or off (default on,off where\n"
		  "lkvm has it, else neither: the rows are then lkvm's only path);\n"
		  "batch=off rows are named MODE/nobatch" },
	{ "duration", 0, OPT_UINT, CFG(secs), .min = 1, .max = 600, .arg = "S",
	  .bad = "want whole seconds from", .help = "seconds per cell, 1-600 (default 5)" },
	{ "qemu", 0, OPT_FN, .optional = true, .fn = bench_opt_qemu, .arg = "PATH",
	  .more_help = qemu_help,
	  .help = "also boot the same guest under QEMU (qemu-system-x86_64 from PATH, or\n"
		  "the one given) with virtio-net-pci, modern only, on the same tap and\n"
		  "peer, and print its rows beside lkvm's: QEMU's notify floors, then per\n"
		  "cell:" },
	{ "json", 0, OPT_STR, CFG(json), .arg = "FILE",
	  .help = "every row as JSON (one object per line inside \"rows\")" },
	{ "svg", 0, OPT_STR, CFG(svg), .arg = "FILE",
	  .help = "two charts: packet rates and rr RTT in FILE, host CPU per packet in\n"
		  "FILE with -cpu before .svg (a panel per test and size, lkvm and QEMU\n"
		  "side by side per TX strategy, the floor as a line)" },
	{ "log-dir", 0, OPT_STR, CFG(log_dir), .arg = "DIR",
	  .help = "keep each cell's lkvm and net-peer output there" },
	{ "guest", 0, OPT_STR, CFG(guest_arg), .arg = "ELF",
	  .help = "the guest (default: build/guests/net-bench.elf beside lkvm)" },
	{ "peer", 0, OPT_STR, CFG(peer_arg), .arg = "PATH",
	  .help = "the host peer (default: build/tools/net-peer beside lkvm)" },
	{ "help", 'h', OPT_HELP, .help = "this text" },
	{ .kind = OPT_END },
};

const struct opt_set bench_opt_set = {
	.opts = bench_opts,
	.prefix = "bench: --",
	.verb = "want",
	.unknown = { "bench: unknown argument '", "' (lkvm bench net --help)" },
	.needs_value = { "bench: ", " needs a value" },
	.unexpected = { "bench: unknown argument '", "' (lkvm bench net --help)" },
	.in_order = true,
	.exact = true,
	.empty_is_missing = true,
	.usage = bench_usage,
	.help_col = 19,
};

void bench_usage(FILE *out)
{
	fprintf(out,
		"usage: lkvm bench net [--modes LIST] [--tests LIST] [--sizes LIST] [--batch LIST]\n"
		"                      [--duration S] [--qemu[=PATH]] [--json FILE] [--svg FILE]\n"
		"                      [--log-dir DIR] [--guest ELF] [--peer PATH]\n"
		"\n"
		"Boots build/guests/net-bench.elf once per mode, test and size against the host peer\n"
		"build/tools/net-peer on a tap in a private network namespace (gone when the command\n"
		"exits, on every path), and prints one table row per cell, after the floors measured\n"
		"in the same run. Needs root (network namespace, tap) and /dev/kvm; where /dev/kvm\n"
		"cannot be opened it runs itself in the emulated KVM host (scripts/kvm-host.sh), and\n"
		"the table's first line and the JSON's \"host\" say the figures are emulated.\n"
		"\n");
	opt_usage(out, &bench_opt_set);
	fprintf(out,
		"\n"
		"Floors: notify (a bare notify-register loop in the guest: trapped and ioeventfd),\n"
		"tap write (a host thread writes frames into the tap; tx's floor), tap read (a host thread\n"
		"reads what net-peer blasts; rx's floor), peer echo (a host thread and net-peer's\n"
		"spin-echo over the tap; rr's floor). The floors' threads poll the tap without sleeping,\n"
		"as the fastest mode does (a sleeping thread measures the host's wake-up latency).\n"
		"x_floor is pps / floor pps for tx and rx and RTT median / floor RTT median for rr; '!'\n"
		"marks a cell better than its floor by more than 10 %% (that floor is wrong). Per-packet\n"
		"counters come from lkvm's --stats=json: packets are frames through tx0 and rx0; rr's Kpps\n"
		"and Mb/s count frames both ways. cpu: the VMM's CPU time (all threads, boot included) per\n"
		"second of its run: 1.00 = one core. host_ns: ns of CPU per packet of the VMM's threads\n"
		"but its vCPUs (/proc/PID/task, while the guest measured; vhost rows add the kernel's\n"
		"vhost-PID worker threads), for floors their own thread's; floor_ns: the floor's host_ns\n"
		"beside a cell's. other: cores other processes used while the row ran (/proc/stat minus\n"
		"the bench's own and its VMMs' vhost workers); '*' marks more than 0.10: a busy host.\n"
		"vhost rows (--modes ...,vhost; qemu/vhost with --qemu) need /dev/vhost-net: where it\n"
		"cannot be opened one line says why and no vhost row runs.\n"
		"Exit status: 0 every cell produced a row, 1 some cell failed or bad arguments,\n"
		"130/143 interrupted (the rows so far are still printed).\n");
}

/* 0: go; 1: error (message printed); 2: --help printed. */
static int parse_args(int argc, char **argv, struct bench_cfg *c)
{
	char err[256];
	int ret = bench_set_defaults(c, err, sizeof(err));

	if (!ret)
		ret = opt_parse_argv(&bench_opt_set, argc, argv, c, stdout, err, sizeof(err));
	if (ret == 1)
		return 2;
	if (ret) {
		pr_err("%s", err);
		return 1;
	}
	if (bench_find_programs(c) || bench_batch_axis(c))
		return 1;
	if (c->log_dir && mkdir(c->log_dir, 0755) < 0 && errno != EEXIST) {
		pr_err("bench: --log-dir %s: %s", c->log_dir, strerror(errno));
		return 1;
	}
	return 0;
}

int cmd_bench(int argc, char **argv)
{
	struct bench *b;
	int ret;

	if (argc < 2 ||
	    (strcmp(argv[1], "net") && strcmp(argv[1], "--help") && strcmp(argv[1], "-h"))) {
		if (argc >= 2)
			pr_err("bench: unknown benchmark '%s' (only: net)", argv[1]);
		bench_usage(stderr);
		return 1;
	}
	if (strcmp(argv[1], "net")) {
		bench_usage(stdout);
		return 0;
	}
	b = calloc(1, sizeof(*b));
	if (!b) {
		pr_err("bench: out of memory");
		return 1;
	}
	ret = parse_args(argc - 1, argv + 1, &b->cfg);
	if (ret) {
		free(b);
		return ret == 2 ? 0 : 1;
	}
	ret = bench_net(b, argc, argv);
	free(b);
	return ret;
}

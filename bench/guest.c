/* One boot of `lkvm bench net`'s guest, under lkvm or QEMU: its command line, its VMM's threads' CPU while it measures, and its row. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/bench.h"
#include "lkvm/util.h"

#include "bench.h"

/*
 * QEMU's command line for the same guest on the same tap: KVM, one vCPU, no firmware devices
 * beyond the PC's, the serial console on stdout, the guest's i8042 reset ends the run
 * (-no-reboot: exit 0) and its pvpanic write fails it (exit 1). Without vhost but in
 * qemu/vhost, so QEMU's own TX strategy (tx=bh or tx=timer) is what runs. -cpu host without
 * arch-capabilities: on a PVM
 * host QEMU cannot set that MSR and aborts, and the guest does not need it anywhere.
 */
static void qemu_argv(struct bench *b, int q, const char *params, char *netdev, size_t nlen,
		      char *dev, size_t dlen, char **argv)
{
	int n = 0;

	snprintf(netdev, nlen, "tap,id=n0,ifname=%s,script=no,downscript=no,vhost=%s", TAP_NAME,
		 bench_qemu_info[q].vhost ? "on" : "off");
	snprintf(dev, dlen, "virtio-net-pci,netdev=n0,disable-legacy=on,mac=52:54:00:12:34:56,%s",
		 bench_qemu_info[q].dev);
	argv[n++] = b->cfg.qemu_bin;
	argv[n++] = (char *)"-enable-kvm";
	argv[n++] = (char *)"-cpu";
	argv[n++] = (char *)"host,-arch-capabilities";
	argv[n++] = (char *)"-smp";
	argv[n++] = (char *)"1";
	argv[n++] = (char *)"-m";
	argv[n++] = (char *)"256";
	argv[n++] = (char *)"-name";
	argv[n++] = (char *)"lkvm-bench,debug-threads=on"; /* vCPU threads named "CPU 0/KVM" */
	argv[n++] = (char *)"-nodefaults";
	argv[n++] = (char *)"-no-reboot";
	argv[n++] = (char *)"-display";
	argv[n++] = (char *)"none";
	argv[n++] = (char *)"-serial";
	argv[n++] = (char *)"stdio";
	argv[n++] = (char *)"-kernel";
	argv[n++] = b->cfg.guest;
	argv[n++] = (char *)"-append";
	argv[n++] = (char *)params;
	argv[n++] = (char *)"-netdev";
	argv[n++] = netdev;
	argv[n++] = (char *)"-device";
	argv[n++] = dev;
	argv[n++] = (char *)"-device";
	argv[n++] = (char *)"pvpanic";
	argv[n++] = (char *)"-action";
	argv[n++] = (char *)"panic=exit-failure";
	argv[n] = NULL;
}

/*
 * The VMM's threads while the guest measures: from its "entering CPL3" line (the measured
 * loop starts) to its BENCH line (the loop ended), sampled every SAMPLE_MS in between so that
 * a VMM gone before the last sample still leaves the one before.
 */
struct cpu_watch {
	struct watch w;
	pid_t pid;
	int phase; /* 0: before the loop, 1: in it, 2: done */
	u64 last;
	struct bench_threads now, start;
};

static void cpu_watch_fn(struct watch *w, const char *out)
{
	struct cpu_watch *c = (struct cpu_watch *)w;
	bool mark = out &&
		    (c->phase == 0 ? strstr(out, "entering CPL3") != NULL
				   : c->phase == 1 && bench_last_line(out, "BENCH ") != NULL);
	u64 t = now_ns();

	if (c->phase == 2 || (!mark && t - c->last < SAMPLE_MS * 1000000ull))
		return;
	c->last = t;
	/* Kernel vhost workers: looked for at the loop's start and end, re-read in between. */
	if (c->now.kworkers != BENCH_KW_NONE)
		c->now.kworkers = mark ? BENCH_KW_SCAN : BENCH_KW_KNOWN;
	bench_threads_sample(c->pid, &c->now);
	if (mark && c->phase++ == 0)
		c->start = c->now;
}

/* Packets the guest counted in its measured loop: rr's transactions are two each. */
static double guest_packets(const struct bench_row *r)
{
	return (double)r->guest_frames * (!strcmp(r->test, "rr") ? 2 : 1);
}

/* Host and vCPU CPU per packet from the watch, when it saw the whole loop. */
static void set_thread_cpu(struct bench_row *r, const struct cpu_watch *c)
{
	double host, vcpu, pk = guest_packets(r);

	if (c->phase != 2 || pk <= 0)
		return;
	bench_threads_cpu(&c->start, &c->now, &host, &vcpu);
	r->host_ns = host * 1e9 / pk;
	r->vcpu_ns = vcpu * 1e9 / pk;
	r->cpu_ticks = bench_threads_ticks(&c->now);
}

/* The row's error from the VMM's output: the guest's failure, the VMM's, or its last word. */
static void guest_failed(struct bench_row *r, int q, int status, const char *out, bool bench_line)
{
	const char *why = out ? bench_last_line(out, "GUEST FAIL") : NULL;
	char *nl;

	if (!why && out)
		why = bench_last_line(out, q < 0 ? "lkvm: error" : "qemu-system-x86_64:");
	if (!why && out && q >= 0 && *out)
		why = bench_last_line(out, ""); /* QEMU's last word */
	snprintf(r->error, sizeof(r->error), "%s exited %d%s%s%.100s", q < 0 ? "lkvm" : "qemu",
		 status, bench_line ? "" : ", no BENCH line", why ? ": " : "", why ? why : "");
	nl = strchr(r->error, '\n');
	if (nl)
		*nl = '\0';
}

static void save_log(const struct bench *b, const char *log, const char *out)
{
	FILE *f = log && b->cfg.log_dir ? fopen(log, "we") : NULL;

	if (f) {
		fputs(out ? out : "", f);
		fclose(f);
	}
}

/* Boots the guest once, under lkvm (q < 0) or QEMU in QEMU mode q; fills r from its BENCH
 * line, the VMM's threads (with vhost, its kernel vhost workers too) and, under lkvm, the
 * stats. Returns the VMM's exit status. */
int bench_run_guest(struct bench *b, int q, bool vhost, const char *nopts, const char *params,
		    struct bench_row *r, const char *log)
{
	char timeout[16], net[128], qnetdev[160], qdev[192];
	char *argv[40] = { b->cfg.self,	   "run", "-k", b->cfg.guest, "--timeout",    timeout,
			   "--stats=json", "-n",  net,	"-p",	      (char *)params, NULL };
	struct cpu_watch cw = { .w.fn = cpu_watch_fn };
	struct kid k = { .out = -1, .err = -1 };
	char *out = NULL;
	size_t len = 0;
	const char *bl, *st;
	int ret, status;
	double cpu = 0;
	u64 t0;

	snprintf(timeout, sizeof(timeout), "%u", b->cfg.secs + 30);
	snprintf(net, sizeof(net), "mode=tap,tapif=%s,script=none%s", TAP_NAME, nopts);
	if (q >= 0) {
		qemu_argv(b, q, params, qnetdev, sizeof(qnetdev), qdev, sizeof(qdev), argv);
		r->qemu = true;
	}
	t0 = now_ns();
	ret = bench_spawn(b, 0, argv, true, &k);
	if (ret < 0) {
		snprintf(r->error, sizeof(r->error), "cannot start %s: %s", q < 0 ? "lkvm" : "qemu",
			 strerror(-ret));
		return 1;
	}
	cw.pid = k.pid;
	cw.now.kworkers = vhost ? BENCH_KW_KNOWN : BENCH_KW_NONE;
	if (!bench_slurp(k.out, &out, &len, now_ns() + (b->cfg.secs + 40) * 1000000000ull, &cw.w))
		kill(k.pid, SIGTERM);
	status = bench_reap(b, 0, &k, &cpu);
	/* Kernel workers' CPU is not in the VMM's rusage nor "other": known from their samples. */
	r->kworker_s = bench_kworkers_cpu(&cw.now);
	r->cpu = cpu / ((double)(now_ns() - t0) / 1e9);
	save_log(b, log, out);
	bl = out ? bench_last_line(out, "BENCH ") : NULL;
	st = out ? bench_last_line(out, "{\"vcpu_exits\"") : NULL;
	if (bench_interrupted)
		snprintf(r->error, sizeof(r->error), "interrupted");
	else if (status != 0 || !bl || (q < 0 && !st))
		guest_failed(r, q, status, out, bl != NULL);
	if (r->error[0]) {
		free(out);
		return status ? status : 1;
	}
	bench_parse_bench_line(r, bl, q >= 0);
	if (q < 0)
		bench_parse_stats(r, st);
	set_thread_cpu(r, &cw);
	free(out);
	return 0;
}

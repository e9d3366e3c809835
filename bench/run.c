/* `lkvm bench net`: the net-bench guest per TX strategy, test and frame size against net-peer on a private tap, with floors, as a table, JSON and SVG. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/bench.h"
#include "lkvm/util.h"

#include "bench.h"

/*
 * How it runs. The command first moves itself into a new, unnamed network namespace
 * (unshare(CLONE_NEWNET)) and creates a persistent tap there; every child (lkvm run,
 * net-peer) inherits the namespace, and when the last of them exits the kernel deletes the
 * namespace and the tap with it: nothing is left behind on any exit path, SIGKILL included.
 * The host peer is build/tools/net-peer, executed per cell (count for tx, echo for rr, blast
 * for rx); the guest is build/guests/net-bench.elf, booted per cell by this same binary
 * (/proc/self/exe run ... --stats=json). Floors run in this process, on the same tap.
 */

volatile sig_atomic_t bench_interrupted;

static void on_signal(int sig)
{
	bench_interrupted = sig;
}

/* ---- rows ---- */

static struct bench_row *new_row(struct bench *b, const char *mode, const char *test, unsigned size,
				 bool floor)
{
	struct bench_row *r = &b->rows[b->nrows++];

	memset(r, 0, sizeof(*r));
	snprintf(r->mode, sizeof(r->mode), "%s", mode);
	snprintf(r->test, sizeof(r->test), "%s", test);
	r->size = size;
	r->floor = floor;
	r->secs = r->pps = r->mbps = r->rtt_med_us = r->rtt_p99_us = r->tps = r->ratio = r->cpu =
		NAN;
	r->other_cpu = r->host_ns = r->vcpu_ns = r->floor_ns = NAN;
	r->trace_transactions = r->trace_clock_err_ns = NAN;
	for (int s = 0; s < BENCH_NSTAGES; s++)
		r->stage_p50[s] = r->stage_p99[s] = NAN;
	return r;
}

static const struct bench_row *find_floor(const struct bench *b, const char *test, unsigned size)
{
	for (int i = 0; i < b->nrows; i++) {
		const struct bench_row *f = &b->rows[i];

		if (f->floor && !f->error[0] && !strcmp(f->test, test) &&
		    (f->size == size || !size))
			return f;
	}
	return NULL;
}

static void set_ratio(const struct bench *b, struct bench_row *r)
{
	const struct bench_row *f = find_floor(b, r->test, r->size);

	if (!f || r->floor)
		return;
	if (!strcmp(r->test, "rr")) {
		r->ratio = r->rtt_med_us / f->rtt_med_us;
		r->beats_floor = r->ratio < BENCH_FLOOR_NOISE;
	} else {
		r->ratio = r->pps / f->pps;
		r->beats_floor = r->ratio > 1 / BENCH_FLOOR_NOISE;
	}
	r->floor_ns = f->host_ns;
}

/* What other processes ran while a row was measured: from load_begin to load_end. */
static void load_begin(struct bench_load *l)
{
	if (bench_load_start(l) < 0)
		l->t_ns = 0;
}

static void load_end(struct bench_row *r, const struct bench_load *l)
{
	r->other_cpu = l->t_ns ? bench_load_other(l, r->kworker_s) : NAN;
	r->busy = r->other_cpu > BENCH_BUSY_CORES;
}

/* ---- the run ---- */

/* DIR/MODE-TEST-SIZE.WHAT, the mode's '/' (floor/tap, qemu/bh, poll/nobatch) made '-'. */
static void log_path(const struct bench *b, char *buf, size_t len, const struct bench_row *r,
		     const char *what)
{
	char mode[sizeof(r->mode)];

	buf[0] = '\0';
	if (!b->cfg.log_dir)
		return;
	snprintf(mode, sizeof(mode), "%s", r->mode);
	for (char *p = strchr(mode, '/'); p; p = strchr(p, '/'))
		*p = '-';
	snprintf(buf, len, "%s/%s-%s-%u.%s", b->cfg.log_dir, mode, r->test, r->size, what);
}

/* The notify floor under lkvm (q < 0) or QEMU (Q_BH: ioeventfd, Q_BH_TRAP: trapped); its row. */
static struct bench_row *notify_floor(struct bench *b, bool trap, int q)
{
	static const char *const names[2][2] = { { "floor/ioeventfd", "floor/trap" },
						 { "qemu/floor/ioeventfd", "qemu/floor/trap" } };
	struct bench_row *r = new_row(b, names[q >= 0][trap], "notify", 0, true);
	char params[64], log[PATH_MAX];

	struct bench_load l;

	snprintf(params, sizeof(params), "bench=notify secs=%u", b->cfg.secs);
	log_path(b, log, sizeof(log), r, "log");
	load_begin(&l);
	bench_run_guest(b, q, false, trap ? ",ioeventfd=off" : "", params, r, log[0] ? log : NULL);
	load_end(r, &l);
	return r;
}

static void run_notify_floor(struct bench *b, bool trap, int q)
{
	bench_progress(b, notify_floor(b, trap, q));
}

/* A floor that runs in this process on the tap while net-peer runs in peer_mode. */
static void run_host_floor(struct bench *b, const char *test, const char *peer_mode, unsigned size,
			   void (*fn)(struct bench *, int, struct bench_row *))
{
	static const char *const names[] = { "floor/tap", "floor/tap", "floor/peer" };
	int which = !strcmp(test, "tx") ? 0 : !strcmp(test, "rx") ? 1 : 2;
	struct bench_row *r = new_row(b, names[which], test, size, true);
	struct bench_load l;
	struct peer_run p;
	char log[PATH_MAX];
	int fd;

	log_path(b, log, sizeof(log), r, "peer");
	load_begin(&l);
	if (bench_peer_start(b, peer_mode, size, &p, r->error, sizeof(r->error)) == 0) {
		fd = bench_tap_attach(false, false);
		if (fd < 0) {
			snprintf(r->error, sizeof(r->error), "attaching to %s: %s", TAP_NAME,
				 strerror(-fd));
		} else {
			fn(b, fd, r);
			close(fd);
		}
		bench_peer_stop(b, &p, &r->peer_frames, &r->peer_drops, log[0] ? log : NULL);
	}
	load_end(r, &l);
	bench_progress(b, r);
}

/* The row of one cell: lkvm in mode with batch (-1: this lkvm has no -n batch=), or QEMU in
 * QEMU mode q; lkvm's batch=off rows are named MODE/nobatch. */
static struct bench_row *cell_row(struct bench *b, int mode, int batch, int q, int test,
				  unsigned size)
{
	char name[32];
	struct bench_row *r;

	if (q >= 0)
		snprintf(name, sizeof(name), "%s", bench_qemu_info[q].name);
	else
		snprintf(name, sizeof(name), "%s%s", bench_mode_info[mode].name,
			 batch == 0 ? "/nobatch" : "");
	r = new_row(b, name, bench_test_info[test].name, size, false);
	r->group = q >= 0 ? bench_qemu_info[q].group : bench_mode_info[mode].group;
	r->batch = q >= 0 || batch < 0 ? NULL : batch ? "on" : "off";
	return r;
}

/*
 * rr under lkvm's own device breaks its round trip into stages: the guest stamps its frames
 * (trace=1) and lkvm records when its threads handled them (-n trace=on), where this lkvm has
 * trace= (before it, the cell runs as it did). Not QEMU's, and not vhost's (the kernel serves
 * those rings: no thread of lkvm's sees the frame).
 */
static bool cell_traced(int mode, int q, int test)
{
	return q < 0 && test == T_RR && !bench_mode_info[mode].vhost && bench_lkvm_has("trace");
}

static void run_cell(struct bench *b, int mode, int batch, int q, int test, unsigned size)
{
	struct bench_row *r = cell_row(b, mode, batch, q, test, size);
	unsigned long long rx0, tx0, txd0, rx1, tx1, txd1;
	char params[96], nopts[96], log[PATH_MAX], plog[PATH_MAX];
	bool trace = cell_traced(mode, q, test);
	struct bench_load l;
	struct peer_run p;

	log_path(b, log, sizeof(log), r, "log");
	log_path(b, plog, sizeof(plog), r, "peer");
	snprintf(params, sizeof(params), "bench=%s size=%u secs=%u%s", bench_test_info[test].name,
		 size, b->cfg.secs, trace ? " trace=1" : "");
	snprintf(nopts, sizeof(nopts), "%s%s%s", q < 0 ? bench_mode_info[mode].nopts : "",
		 q >= 0 || batch < 0 ? ""
		 : batch	     ? ",batch=on"
				     : ",batch=off",
		 trace ? ",trace=on" : "");
	load_begin(&l);
	if (bench_peer_start(b, bench_test_info[test].peer, size, &p, r->error, sizeof(r->error)) ==
	    0) {
		bench_tap_counters(&rx0, &tx0, &txd0);
		bench_run_guest(b, q,
				q >= 0 ? bench_qemu_info[q].vhost : bench_mode_info[mode].vhost,
				nopts, params, r, log[0] ? log : NULL);
		bench_tap_counters(&rx1, &tx1, &txd1);
		bench_peer_stop(b, &p, &r->peer_frames, &r->peer_drops, plog[0] ? plog : NULL);
		r->tap_rx = rx1 - rx0;
		r->tap_tx = tx1 - tx0;
		r->tap_tx_drops = txd1 - txd0;
	}
	load_end(r, &l);
	if (!r->error[0])
		set_ratio(b, r);
	bench_progress(b, r);
}

/* Whether lkvm mode m runs here: vhost modes only where /dev/vhost-net opened. */
static bool mode_runs(const struct bench *b, int m)
{
	return !bench_mode_info[m].vhost || !b->vhost_note[0];
}

/* Whether QEMU mode q runs: qemu/vhost only with vhost among --modes and /dev/vhost-net. */
static bool qemu_runs(const struct bench *b, int q)
{
	return !bench_qemu_info[q].vhost || (b->vhost_asked && !b->vhost_note[0]);
}

/* lkvm's batch axis for mode m: vhost takes no batch= (one row per cell, batch -1). */
static int mode_batches(const struct bench_cfg *c, int m)
{
	return bench_mode_info[m].vhost ? 1 : c->nbatch;
}

/*
 * Whether vhost was asked for and can run here: /dev/vhost-net opens (as lkvm's vhost=on and
 * QEMU's vhost=on open it). If not, b->vhost_note says why in one line and no vhost cell runs.
 */
static void vhost_probe(struct bench *b)
{
	const struct bench_cfg *c = &b->cfg;
	int fd;

	for (int m = 0; m < c->nmodes; m++)
		b->vhost_asked |= bench_mode_info[c->modes[m]].vhost;
	if (!b->vhost_asked)
		return;
	fd = open("/dev/vhost-net", O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return;
	}
	snprintf(b->vhost_note, sizeof(b->vhost_note),
		 "not run: cannot open /dev/vhost-net: %s (modprobe vhost_net)", strerror(errno));
	fprintf(stderr, "bench: vhost: %s\n", b->vhost_note);
}

/*
 * --qemu: QEMU's notify floors, which also tell whether QEMU can run the guest here at all.
 * Returns how many QEMU modes to run per cell (Q_NR, or 0 with b->qemu_note saying why).
 */
static int qemu_probe(struct bench *b)
{
	const struct bench_cfg *c = &b->cfg;
	struct bench_row *r;

	if (!c->qemu_bin[0]) {
		snprintf(
			b->qemu_note, sizeof(b->qemu_note),
			"not run: qemu-system-x86_64 is not in PATH (apt-get install qemu-system-x86)");
	} else if (access(c->qemu_bin, X_OK)) {
		snprintf(b->qemu_note, sizeof(b->qemu_note), "not run: %.120s: %s", c->qemu_bin,
			 strerror(errno));
	} else {
		r = notify_floor(b, false, Q_BH);
		if (!r->error[0]) {
			b->total += 2;
			bench_progress(b, r);
		} else if (!bench_interrupted) {
			/* QEMU cannot run the guest here: one line says why, no QEMU rows. */
			snprintf(b->qemu_note, sizeof(b->qemu_note),
				 "cannot run the guest here: %.150s", r->error);
			b->nrows--;
		}
		if (b->qemu_note[0] || bench_interrupted)
			goto out;
		if (!bench_interrupted)
			run_notify_floor(b, true, Q_BH_TRAP);
		for (int q = 0; q < Q_NR; q++)
			b->total += qemu_runs(b, q) * c->ntests * c->nsizes;
		return Q_NR;
	}
out:
	if (b->qemu_note[0])
		fprintf(stderr, "bench: --qemu: %s\n", b->qemu_note);
	return 0;
}

static bool wants(const struct bench_cfg *c, int test)
{
	for (int i = 0; i < c->ntests; i++)
		if (c->tests[i] == test)
			return true;
	return false;
}

static void run_all(struct bench *b)
{
	const struct bench_cfg *c = &b->cfg;
	int host_floors = (wants(c, T_TX) + wants(c, T_RX) + wants(c, T_RR)) * c->nsizes;

	int qemu_modes = 0;

	vhost_probe(b);
	b->total = 2 + host_floors;
	for (int m = 0; m < c->nmodes; m++)
		if (mode_runs(b, c->modes[m]))
			b->total += mode_batches(c, c->modes[m]) * c->ntests * c->nsizes;
	run_notify_floor(b, false, -1);
	if (!bench_interrupted)
		run_notify_floor(b, true, -1);
	if (c->qemu && !bench_interrupted)
		qemu_modes = qemu_probe(b);
	for (int s = 0; s < c->nsizes && !bench_interrupted; s++) {
		if (wants(c, T_TX) && !bench_interrupted)
			run_host_floor(b, "tx", "count", c->sizes[s], bench_floor_tap_write);
		if (wants(c, T_RX) && !bench_interrupted)
			run_host_floor(b, "rx", "blast", c->sizes[s], bench_floor_tap_read);
		if (wants(c, T_RR) && !bench_interrupted)
			run_host_floor(b, "rr", "spin-echo", c->sizes[s], bench_floor_peer_echo);
	}
	/* Tests outermost, then sizes, then modes: the modes to compare run back to back. */
	for (int t = 0; t < c->ntests && !bench_interrupted; t++)
		for (int s = 0; s < c->nsizes && !bench_interrupted; s++) {
			for (int m = 0; m < c->nmodes && !bench_interrupted; m++) {
				int mode = c->modes[m];

				for (int i = 0; mode_runs(b, mode) && i < mode_batches(c, mode) &&
						!bench_interrupted;
				     i++)
					run_cell(b, mode,
						 bench_mode_info[mode].vhost ? -1 : c->batch[i], -1,
						 c->tests[t], c->sizes[s]);
			}
			for (int q = 0; q < qemu_modes && !bench_interrupted; q++)
				if (qemu_runs(b, q))
					run_cell(b, 0, -1, q, c->tests[t], c->sizes[s]);
		}
}

/* A /dev/kvm whose module did not bind exists but cannot be opened: open it to know. */
static bool kvm_usable(void)
{
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* No usable /dev/kvm: run this same command in the emulated KVM host (scripts/kvm-host.sh
 * beside the checkout's lkvm), which labels every figure as emulated. Returns only on failure. */
static int run_emulated(const struct bench_cfg *c, int argc, char **argv)
{
	char script[PATH_MAX];
	char **args;

	if (bench_host_emulated() ||
	    bench_find_beside(c->self, "scripts/kvm-host.sh", script, sizeof(script)) < 0) {
		pr_err("bench: /dev/kvm cannot be opened here, and there is no scripts/kvm-host.sh beside %s "
		       "to run in an emulated KVM host",
		       c->self);
		return 1;
	}
	args = calloc((size_t)argc + 5, sizeof(*args));
	if (!args) {
		pr_err("bench: out of memory");
		return 1;
	}
	args[0] = script;
	args[1] = (char *)"--";
	args[2] = (char *)c->self;
	args[3] = (char *)"bench";
	for (int i = 1; i < argc; i++)
		args[3 + i] = argv[i];
	fprintf(stderr,
		"bench: no usable /dev/kvm here: running in the emulated KVM host (%s); "
		"every figure is emulated\n",
		script);
	fflush(NULL);
	execv(script, args);
	pr_err("bench: %s: %s", script, strerror(errno));
	free(args);
	return 1;
}

/* Runs lkvm bench net as parsed into b (in the emulated KVM host where /dev/kvm cannot be
 * opened): the floors and cells, then the table, the JSON and the charts. Its exit status. */
int bench_net(struct bench *b, int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_signal };
	int ret, failed;

	if (!kvm_usable())
		return run_emulated(&b->cfg, argc, argv);
	if (bench_setup_netns() < 0)
		return 1;
	/* No SA_RESTART: blocking reads and polls return, and every loop checks the flag. */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	fprintf(stderr,
		"bench: %u s per cell, tap %s in a private network namespace, guest %s, peer %s, host %s\n",
		b->cfg.secs, TAP_NAME, b->cfg.guest, b->cfg.peer, bench_host_kind());
	run_all(b);
	for (int i = 0; i < 2; i++)
		if (b->kids[i] > 0)
			kill(b->kids[i], SIGTERM);
	failed = bench_print_table(stdout, b);
	fflush(stdout);
	if (b->cfg.json && bench_write_json(b, b->cfg.json) < 0)
		failed++;
	if (b->cfg.svg && !bench_interrupted && bench_write_svgs(b, b->cfg.svg) < 0)
		failed++;
	ret = bench_interrupted ? 128 + bench_interrupted : failed ? 1 : 0;
	if (bench_interrupted)
		fprintf(stderr, "bench: interrupted after %d of %d rows\n", b->nrows, b->total);
	return ret;
}

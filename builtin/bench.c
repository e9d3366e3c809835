/* `lkvm bench net`: the net-bench guest per TX strategy, test and frame size against net-peer on a private tap, with floors, as a table, JSON and SVG. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/if_tun.h>

#include "lkvm/bench-frame.h"
#include "lkvm/bench.h"
#include "lkvm/builtin.h"
#include "lkvm/net.h"
#include "lkvm/opt.h"
#include "lkvm/util.h"
#include "lkvm/x86.h"

/*
 * How it runs. The command first moves itself into a new, unnamed network namespace
 * (unshare(CLONE_NEWNET)) and creates a persistent tap there; every child (lkvm run,
 * net-peer) inherits the namespace, and when the last of them exits the kernel deletes the
 * namespace and the tap with it: nothing is left behind on any exit path, SIGKILL included.
 * The host peer is build/tools/net-peer, executed per cell (count for tx, echo for rr, blast
 * for rx); the guest is build/guests/net-bench.elf, booted per cell by this same binary
 * (/proc/self/exe run ... --stats=json). Floors run in this process, on the same tap.
 */

#define TAP_NAME "lkvmbench0"
#define MAX_LIST 8
#define MAX_ROWS 256
#define MAX_SAMPLES (1u << 20)
#define OUT_MAX (4u << 20) /* most output kept from one child */
#define READY_MS 10000	   /* net-peer must be receiving within this */
#define RR_TIMEOUT_NS 200000000ull

enum bench_mode { M_IOEVENTFD, M_TRAP, M_TIMER, M_POLL, M_TIMER_TRAP, M_POLL_TRAP, M_VHOST, M_NR };

struct mode_info {
	const char *name;
	const char *nopts; /* appended to -n */
	const char *what;
	const char *group; /* the TX strategy, as the chart groups lkvm's and QEMU's bars */
	/* Its rings are served by the kernel: it needs /dev/vhost-net, and lkvm refuses batch=
	 * with vhost=on, so it runs once per cell with no batch axis (no /nobatch row). */
	bool vhost;
};

/* The chart's groups: each names one TX strategy that lkvm and QEMU may both have. */
#define G_KICK "kick, ioeventfd"
#define G_KICK_TRAP "kick, trapped"
#define G_TIMER "timer, ioeventfd"
#define G_TIMER_TRAP "timer, trapped"
#define G_VHOST "vhost (kernel)"

static const struct mode_info mode_info[] = {
	[M_IOEVENTFD] = { "ioeventfd", "", "tx=kick, notifies through ioeventfd", G_KICK, false },
	[M_TRAP] = { "trap", ",ioeventfd=off", "tx=kick, every notify a trapped exit", G_KICK_TRAP,
		     false },
	[M_TIMER] = { "timer", ",tx=timer", "tx=timer (150 us), ioeventfd", G_TIMER, false },
	[M_POLL] = { "poll", ",tx=poll", "tx=poll (adaptive window up to 50 us), ioeventfd",
		     "poll, ioeventfd", false },
	[M_TIMER_TRAP] = { "timer-trap", ",tx=timer,ioeventfd=off", "tx=timer, trapped notifies",
			   G_TIMER_TRAP, false },
	[M_POLL_TRAP] = { "poll-trap", ",tx=poll,ioeventfd=off", "tx=poll, trapped notifies",
			  "poll, trapped", false },
	[M_VHOST] = { "vhost", ",vhost=on",
		      "rings served by the kernel's vhost-net (/dev/vhost-net);\n"
		      "notifies through ioeventfd, interrupts through irqfd",
		      G_VHOST, true },
};
_Static_assert(ARRAY_SIZE(mode_info) == M_NR, "mode_info must name every mode");

/* --qemu: the same guest under QEMU's virtio-net-pci (modern only) on the same tap; qemu/vhost
 * only where vhost is among --modes. */
enum qemu_mode { Q_BH, Q_BH_TRAP, Q_TIMER, Q_TIMER_TRAP, Q_VHOST, Q_NR };

static const struct {
	const char *name;
	const char *dev; /* virtio-net-pci properties */
	const char *what;
	const char *group;
	bool vhost; /* -netdev tap,vhost=on: QEMU's TX strategy no longer matters (tx= unset) */
} qemu_info[] = {
	[Q_BH] = { "qemu/bh", "tx=bh,ioeventfd=on", "QEMU tx=bh, notifies through ioeventfd",
		   G_KICK, false },
	[Q_BH_TRAP] = { "qemu/bh-trap", "tx=bh,ioeventfd=off", "QEMU tx=bh, trapped notifies",
			G_KICK_TRAP, false },
	[Q_TIMER] = { "qemu/timer", "tx=timer,ioeventfd=on", "QEMU tx=timer (150 us), ioeventfd",
		      G_TIMER, false },
	[Q_TIMER_TRAP] = { "qemu/timer-trap", "tx=timer,ioeventfd=off",
			   "QEMU tx=timer, trapped notifies", G_TIMER_TRAP, false },
	[Q_VHOST] = { "qemu/vhost", "ioeventfd=on",
		      "QEMU -netdev tap,vhost=on (with vhost among --modes)", G_VHOST, true },
};
_Static_assert(ARRAY_SIZE(qemu_info) == Q_NR, "qemu_info must name every QEMU mode");

enum bench_test { T_TX, T_RR, T_RX, T_NR };

struct test_info {
	const char *name;
	const char *peer; /* net-peer mode */
};

static const struct test_info test_info[] = {
	[T_TX] = { "tx", "count" },
	[T_RR] = { "rr", "echo" },
	[T_RX] = { "rx", "blast" },
};
_Static_assert(ARRAY_SIZE(test_info) == T_NR, "test_info must name every test");

struct bench_cfg {
	int modes[M_NR], nmodes;
	int tests[T_NR], ntests;
	unsigned sizes[MAX_LIST];
	int nsizes;
	unsigned secs;
	int batch[2], nbatch; /* lkvm's -n batch= per mode: 1 on, 0 off; -1: this lkvm has none */
	bool qemu;	      /* --qemu given */
	const char *json, *svg, *log_dir;
	const char *guest_arg, *peer_arg; /* --guest, --peer (else found beside lkvm) */
	char self[PATH_MAX], guest[PATH_MAX], peer[PATH_MAX], qemu_bin[PATH_MAX];
};

struct bench {
	struct bench_cfg cfg;
	struct bench_row rows[MAX_ROWS];
	int nrows, total, done;
	char qemu_note[200];  /* non-empty: --qemu was asked for and could not run, why */
	bool vhost_asked;     /* a vhost mode is among --modes */
	char vhost_note[200]; /* non-empty: it was asked for and cannot run here, why */
	pid_t kids[2];	      /* children running now, for the signal path */
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	interrupted = sig;
}

/* Splits a comma list and maps each item with fn; 0 or -EINVAL with a message. */
static int parse_list(const char *opt, const char *arg, int (*fn)(const char *item, int *out),
		      int *out, int max, int *n, char *err, size_t errlen)
{
	char *copy = strdup(arg), *save = NULL;

	if (!copy)
		return -ENOMEM;
	*n = 0;
	for (char *it = strtok_r(copy, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
		int v;

		if (*n >= max || fn(it, &v) < 0) {
			errfmt(err, errlen, "bench: %s: '%s' %s", opt, it,
			       *n >= max ? "is one too many"
					 : "is not valid (lkvm bench net --help)");
			free(copy);
			return -EINVAL;
		}
		for (int i = 0; i < *n; i++) {
			if (out[i] == v) {
				errfmt(err, errlen, "bench: %s: '%s' given twice", opt, it);
				free(copy);
				return -EINVAL;
			}
		}
		out[(*n)++] = v;
	}
	free(copy);
	if (!*n) {
		errfmt(err, errlen, "bench: %s: empty list", opt);
		return -EINVAL;
	}
	return 0;
}

int bench_mode_of(const char *name, bool *vhost)
{
	for (int m = 0; m < M_NR; m++) {
		if (!strcmp(name, mode_info[m].name)) {
			if (vhost)
				*vhost = mode_info[m].vhost;
			return m;
		}
	}
	return -EINVAL;
}

static int mode_of(const char *s, int *out)
{
	int m = bench_mode_of(s, NULL);

	if (m < 0)
		return m;
	*out = m;
	return 0;
}

static int test_of(const char *s, int *out)
{
	for (int t = 0; t < T_NR; t++)
		if (!strcmp(s, test_info[t].name))
			return *out = t, 0;
	return -EINVAL;
}

static int batch_of(const char *s, int *out)
{
	if (strcmp(s, "on") && strcmp(s, "off"))
		return -EINVAL;
	*out = !strcmp(s, "on");
	return 0;
}

static int size_of(const char *s, int *out)
{
	unsigned long long v;

	if (opt_uint(s, BENCH_FRAME_MIN, BENCH_FRAME_MAX, &v))
		return -EINVAL;
	*out = (int)v;
	return 0;
}

/* Finds `rel` beside the lkvm binary: next to it (./lkvm) or two levels up (build/asan/lkvm). */
static int find_beside(const char *self, const char *rel, char *out, size_t len)
{
	static const char *const up[] = { "", "/../.." };
	char dir[PATH_MAX / 2];
	char *slash;

	if (snprintf(dir, sizeof(dir), "%s", self) >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(up); i++) {
		if (snprintf(out, len, "%s%s/%s", dir, up[i], rel) >= (int)len)
			continue;
		if (access(out, R_OK) == 0)
			return 0;
	}
	if (snprintf(out, len, "%s/%s", dir, rel) >= (int)len)
		return -ENAMETOOLONG;
	return -ENOENT;
}

/* Finds prog in $PATH; its path goes to out (if any). */
static bool find_in_path(const char *prog, char *out, size_t len)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
		const char *c = strchr(p, ':');
		size_t l = c ? (size_t)(c - p) : strlen(p);

		snprintf(buf, sizeof(buf), "%.*s/%s", (int)l, p, prog);
		if (access(buf, X_OK) == 0) {
			if (out)
				snprintf(out, len, "%s", buf);
			return true;
		}
		if (!c)
			break;
		p = c + 1;
	}
	return false;
}

/* ---- options ---- */

static int opt_modes(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct bench_cfg *c = base;

	return parse_list("--modes", v, mode_of, c->modes, M_NR, &c->nmodes, err, errlen);
}

static int opt_tests(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct bench_cfg *c = base;

	return parse_list("--tests", v, test_of, c->tests, T_NR, &c->ntests, err, errlen);
}

static int opt_sizes(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct bench_cfg *c = base;

	return parse_list("--sizes", v, size_of, (int *)c->sizes, MAX_LIST, &c->nsizes, err,
			  errlen);
}

static int opt_batch(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct bench_cfg *c = base;

	return parse_list("--batch", v, batch_of, c->batch, 2, &c->nbatch, err, errlen);
}

static int opt_qemu(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct bench_cfg *c = base;

	c->qemu = true;
	if (v && !*v) {
		errfmt(err, errlen, "bench: --qemu= needs a path");
		return -EINVAL;
	}
	if (v)
		snprintf(c->qemu_bin, sizeof(c->qemu_bin), "%s", v);
	return 0;
}

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
		mode_help(out, mode_info[m].name, 10, mode_info[m].what);
}

static void qemu_help(FILE *out)
{
	for (int q = 0; q < Q_NR; q++)
		mode_help(out, qemu_info[q].name, 16, qemu_info[q].what);
	fprintf(out,
		"                   QEMU rows have no device counters (shown as -) except kicks, which\n"
		"                   the guest counts itself. Where QEMU cannot run, one line says why\n"
		"                   and only lkvm's rows are printed.\n");
}

#define CFG(member) OPT_AT(struct bench_cfg, member)

static const struct opt bench_opts[] = {
	{ "modes", 0, OPT_FN, .fn = opt_modes, .arg = "LIST", .more_help = modes_help,
	  .help = "TX strategies, comma-separated (default ioeventfd,trap,timer,poll):" },
	{ "tests", 0, OPT_FN, .fn = opt_tests, .arg = "LIST",
	  .help = "tx (guest sends), rr (guest sends, peer echoes: latency), rx (peer\n"
		  "sends) (default tx,rr,rx)" },
	{ "sizes", 0, OPT_FN, .fn = opt_sizes, .arg = "LIST",
	  .help = "frame sizes in bytes, 60-1514 (default 64,1500)" },
	{ "batch", 0, OPT_FN, .fn = opt_batch, .arg = "LIST",
	  .help = "lkvm's -n batch= per mode, on and/or off (default on,off where\n"
		  "lkvm has it, else neither: the rows are then lkvm's only path);\n"
		  "batch=off rows are named MODE/nobatch" },
	{ "duration", 0, OPT_UINT, CFG(secs), .min = 1, .max = 600, .arg = "S",
	  .bad = "want whole seconds from", .help = "seconds per cell, 1-600 (default 5)" },
	{ "qemu", 0, OPT_FN, .optional = true, .fn = opt_qemu, .arg = "PATH",
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

/* The defaults, then the options; then where the guest, the peer and QEMU are. */
static int set_defaults(struct bench_cfg *c, char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	c->secs = 5;
	return opt_modes(NULL, "ioeventfd,trap,timer,poll", c, err, errlen) ||
	       opt_tests(NULL, "tx,rr,rx", c, err, errlen) ||
	       opt_sizes(NULL, "64,1500", c, err, errlen);
}

/* Where the guest, the peer and QEMU are, and whether what the options ask for can be had. */
static int find_programs(struct bench_cfg *c)
{
	ssize_t l = readlink("/proc/self/exe", c->self, sizeof(c->self) - 1);

	if (l < 0) {
		pr_err("bench: /proc/self/exe: %s", strerror(errno));
		return 1;
	}
	c->self[l] = '\0';
	if (c->guest_arg)
		snprintf(c->guest, sizeof(c->guest), "%s", c->guest_arg);
	else
		find_beside(c->self, "build/guests/net-bench.elf", c->guest, sizeof(c->guest));
	if (c->peer_arg)
		snprintf(c->peer, sizeof(c->peer), "%s", c->peer_arg);
	else
		find_beside(c->self, "build/tools/net-peer", c->peer, sizeof(c->peer));
	if (access(c->guest, R_OK)) {
		pr_err("bench: no guest at %s (make guests, or --guest ELF)", c->guest);
		return 1;
	}
	if (access(c->peer, X_OK)) {
		pr_err("bench: no host peer at %s (make tools, or --peer PATH)", c->peer);
		return 1;
	}
	if (c->qemu && !c->qemu_bin[0])
		find_in_path("qemu-system-x86_64", c->qemu_bin, sizeof(c->qemu_bin));
	return 0;
}

/* Whether the lkvm that runs the cells (this binary) has -n batch=: from its own table. */
static bool lkvm_has_batch(void)
{
	for (const struct opt *o = net_opt_set.opts; o->kind != OPT_END; o++)
		if (!strcmp(o->name, "batch"))
			return true;
	return false;
}

/* The batch axis: --batch's values, by default on and off where lkvm has them, else none. */
static int batch_axis(struct bench_cfg *c)
{
	if (lkvm_has_batch()) {
		if (!c->nbatch) {
			c->batch[0] = 1;
			c->batch[1] = 0;
			c->nbatch = 2;
		}
		return 0;
	}
	if (c->nbatch) {
		pr_err("bench: --batch: this lkvm has no -n batch= (lkvm run --help)");
		return 1;
	}
	c->batch[0] = -1;
	c->nbatch = 1;
	return 0;
}

/* 0: go; 1: error (message printed); 2: --help printed. */
static int parse_args(int argc, char **argv, struct bench_cfg *c)
{
	char err[256];
	int ret = set_defaults(c, err, sizeof(err));

	if (!ret)
		ret = opt_parse_argv(&bench_opt_set, argc, argv, c, stdout, err, sizeof(err));
	if (ret == 1)
		return 2;
	if (ret) {
		pr_err("%s", err);
		return 1;
	}
	if (find_programs(c) || batch_axis(c))
		return 1;
	if (c->log_dir && mkdir(c->log_dir, 0755) < 0 && errno != EEXIST) {
		pr_err("bench: --log-dir %s: %s", c->log_dir, strerror(errno));
		return 1;
	}
	return 0;
}

/* ---- the namespace and the tap ---- */

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	if (write(fd, text, strlen(text)) < 0)
		pr_debug("bench: %s: %s", path, strerror(errno));
	close(fd);
}

static int tap_attach(bool vnet_hdr, bool persist)
{
	struct ifreq ifr = { .ifr_flags = IFF_TAP | IFF_NO_PI | (vnet_hdr ? IFF_VNET_HDR : 0) };
	int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return -errno;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", TAP_NAME);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0 || (persist && ioctl(fd, TUNSETPERSIST, 1) < 0)) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

/* A private network namespace with one persistent tap, up, and no IPv6 chatter on it. */
static int setup_netns(void)
{
	struct ifreq ifr = { 0 };
	int fd, s;

	if (unshare(CLONE_NEWNET) < 0) {
		pr_err("bench: unshare(CLONE_NEWNET): %s (run as root)", strerror(errno));
		return -1;
	}
	write_file("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
	write_file("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
	fd = tap_attach(true, true);
	if (fd < 0) {
		pr_err("bench: creating tap %s: %s", TAP_NAME, strerror(-fd));
		return -1;
	}
	close(fd);
	s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", TAP_NAME);
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0 ||
	    (ifr.ifr_flags |= IFF_UP, ioctl(s, SIOCSIFFLAGS, &ifr) < 0)) {
		pr_err("bench: bringing %s up: %s", TAP_NAME, strerror(errno));
		if (s >= 0)
			close(s);
		return -1;
	}
	close(s);
	return 0;
}

/* The tap's counters from /proc/net/dev (this namespace's). rx: frames the host took from
 * the tap (what lkvm wrote), tx: frames the host put into it. */
static void tap_counters(unsigned long long *rx, unsigned long long *tx,
			 unsigned long long *tx_drop)
{
	char line[512];
	FILE *f = fopen("/proc/net/dev", "re");

	*rx = *tx = *tx_drop = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *p = strstr(line, TAP_NAME ":");
		unsigned long long v[12];

		if (!p)
			continue;
		if (sscanf(p + strlen(TAP_NAME) + 1,
			   "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
			   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10],
			   &v[11]) == 12) {
			*rx = v[1];
			*tx = v[9];
			*tx_drop = v[11];
		}
	}
	fclose(f);
}

/* ---- children ---- */

struct kid {
	pid_t pid;
	int out, err; /* read ends; err -1 when merged into out */
};

static int spawn(struct bench *b, int slot, char *const argv[], bool merge, struct kid *k)
{
	int o[2], e[2] = { -1, -1 };

	if (pipe2(o, O_CLOEXEC) < 0)
		return -errno;
	if (!merge && pipe2(e, O_CLOEXEC) < 0) {
		close(o[0]);
		close(o[1]);
		return -errno;
	}
	k->pid = fork();
	if (k->pid == 0) {
		int null = open("/dev/null", O_RDONLY);

		dup2(null, 0);
		dup2(o[1], 1);
		dup2(merge ? o[1] : e[1], 2);
		execv(argv[0], argv);
		fprintf(stderr, "bench: exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(o[1]);
	if (e[1] >= 0)
		close(e[1]);
	if (k->pid < 0) {
		close(o[0]);
		if (e[0] >= 0)
			close(e[0]);
		return -errno;
	}
	k->out = o[0];
	k->err = e[0];
	b->kids[slot] = k->pid;
	return 0;
}

/* Called at least every SAMPLE_MS while a child's output is read, with all of it so far. */
struct watch {
	void (*fn)(struct watch *w, const char *out);
};

#define SAMPLE_MS 20

/* Appends what fd has to *buf until EOF (true), the deadline, or a signal (false); calls w
 * (may be NULL) after each read and each SAMPLE_MS without one. */
static bool slurp(int fd, char **buf, size_t *len, u64 deadline, struct watch *w)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		u64 now = now_ns();
		int wait = (int)MIN((deadline - now) / 1000000 + 1, w ? SAMPLE_MS : 1000);
		char tmp[8192];
		ssize_t r;

		if (interrupted || now >= deadline)
			return false;
		if (poll(&p, 1, wait) <= 0) {
			if (w)
				w->fn(w, *buf);
			continue;
		}
		r = read(fd, tmp, sizeof(tmp));
		if (r == 0)
			return true;
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return true;
		}
		if (*len + (size_t)r + 1 > OUT_MAX)
			continue; /* keep the beginning; the rest is dropped */
		char *nb = realloc(*buf, *len + (size_t)r + 1);

		if (!nb)
			return false;
		*buf = nb;
		memcpy(*buf + *len, tmp, (size_t)r);
		*len += (size_t)r;
		(*buf)[*len] = '\0';
		if (w)
			w->fn(w, *buf);
	}
}

/* Waits for "ready" on the peer's stderr. */
static bool peer_ready(struct kid *k, char **err, size_t *len)
{
	u64 deadline = now_ns() + READY_MS * 1000000ull;

	while (!interrupted && now_ns() < deadline) {
		struct pollfd p = { .fd = k->err, .events = POLLIN };
		char tmp[1024];
		ssize_t r;

		if (poll(&p, 1, 100) <= 0)
			continue;
		r = read(k->err, tmp, sizeof(tmp) - 1);
		if (r <= 0)
			return false;
		tmp[r] = '\0';
		char *nb = realloc(*err, *len + (size_t)r + 1);

		if (!nb)
			return false;
		*err = nb;
		memcpy(*err + *len, tmp, (size_t)r + 1);
		*len += (size_t)r;
		if (strstr(*err, "ready"))
			return true;
	}
	return false;
}

static int reap(struct bench *b, int slot, struct kid *k, double *cpu_secs)
{
	struct rusage ru = { 0 };
	int st = 0;

	if (k->pid > 0)
		while (wait4(k->pid, &st, 0, &ru) < 0 && errno == EINTR)
			;
	if (cpu_secs)
		*cpu_secs = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
			    (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	b->kids[slot] = 0;
	if (k->out >= 0)
		close(k->out);
	if (k->err >= 0)
		close(k->err);
	k->pid = 0;
	k->out = k->err = -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

struct peer_run {
	struct kid k;
	char *err;
	size_t err_len;
};

static int peer_start(struct bench *b, const char *mode, unsigned size, struct peer_run *p,
		      char *why, size_t wlen)
{
	char secs[16], sz[16];
	char *argv[] = { b->cfg.peer, (char *)mode, TAP_NAME, secs, sz, NULL };
	int ret;

	memset(p, 0, sizeof(*p));
	p->k.out = p->k.err = -1;
	snprintf(secs, sizeof(secs), "%u", b->cfg.secs + 120);
	snprintf(sz, sizeof(sz), "%u", size);
	ret = spawn(b, 1, argv, false, &p->k);
	if (ret < 0) {
		snprintf(why, wlen, "cannot start net-peer: %s", strerror(-ret));
		return ret;
	}
	if (!peer_ready(&p->k, &p->err, &p->err_len)) {
		snprintf(why, wlen, "net-peer %s not ready: %.100s", mode,
			 p->err ? p->err : "no output");
		kill(p->k.pid, SIGTERM);
		reap(b, 1, &p->k, NULL);
		free(p->err);
		return -ETIMEDOUT;
	}
	return 0;
}

/* Stops the peer and returns its PEER line's numbers. */
static void peer_stop(struct bench *b, struct peer_run *p, unsigned long long *frames,
		      unsigned long long *drops, const char *log)
{
	char *out = NULL;
	size_t len = 0;
	const char *l;

	kill(p->k.pid, SIGTERM);
	slurp(p->k.out, &out, &len, now_ns() + 5000000000ull, NULL);
	reap(b, 1, &p->k, NULL);
	*frames = *drops = 0;
	l = out ? strstr(out, "PEER ") : NULL;
	if (l) {
		const char *f = strstr(l, " frames="), *d = strstr(l, " drops=");

		if (f)
			*frames = strtoull(f + 8, NULL, 10);
		if (d)
			*drops = strtoull(d + 7, NULL, 10);
	}
	if (log && b->cfg.log_dir) {
		FILE *f = fopen(log, "we");

		if (f) {
			fprintf(f, "%s%s", p->err ? p->err : "", out ? out : "");
			fclose(f);
		}
	}
	free(out);
	free(p->err);
}

/* ---- parsing lkvm's output ---- */

/* The value after " key=" in a BENCH line, or NAN. */
static double kv(const char *line, const char *key)
{
	char pat[48];
	const char *p;

	snprintf(pat, sizeof(pat), " %s=", key);
	p = strstr(line, pat);
	return p ? strtod(p + strlen(pat), NULL) : NAN;
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

static const char *jqueue(const char *stats, const char *name)
{
	char pat[48];

	snprintf(pat, sizeof(pat), "\"name\":\"%s\"", name);
	return stats ? strstr(stats, pat) : NULL;
}

static const char *last_line(const char *out, const char *prefix)
{
	const char *best = NULL;
	size_t pl = strlen(prefix);

	for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, prefix, pl))
			best = p;
	return best;
}

/* Fills the device counters of r from the --stats=json line. */
static void parse_stats(struct bench_row *r, const char *stats)
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
}

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
		 qemu_info[q].vhost ? "on" : "off");
	snprintf(dev, dlen, "virtio-net-pci,netdev=n0,disable-legacy=on,mac=52:54:00:12:34:56,%s",
		 qemu_info[q].dev);
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

/* The guest's BENCH line into the row (under QEMU, which counts nothing for us, the notifies
 * the guest wrote stand for kicks). */
static void parse_bench_line(struct bench_row *r, const char *bl, bool qemu)
{
	char line[1024];
	size_t l = strcspn(bl, "\n");

	snprintf(line, sizeof(line), "%.*s", (int)MIN(l, sizeof(line) - 1), bl);
	r->secs = kv(line, "secs");
	if (!strcmp(r->test, "tx") || !strcmp(r->test, "rx")) {
		r->guest_frames = (unsigned long long)kv(line, "frames");
		r->pps = kv(line, "pps");
		r->mbps = kv(line, "mbps");
	} else if (!strcmp(r->test, "rr")) {
		r->guest_frames = (unsigned long long)kv(line, "transactions");
		r->lost = (unsigned long long)kv(line, "lost");
		r->tps = kv(line, "tps");
		r->pps = 2 * r->tps;
		r->mbps = 2 * r->tps * r->size * 8 / 1e6;
		r->rtt_med_us = kv(line, "lat_median_ns") / 1000;
		r->rtt_p99_us = kv(line, "lat_p99_ns") / 1000;
	} else { /* notify */
		r->guest_frames = (unsigned long long)kv(line, "notifies");
		r->pps = kv(line, "rate");
	}
	if (qemu) {
		double gk = kv(line, "kicks");

		r->kicks = !strcmp(r->test, "notify") ? r->guest_frames
			   : isnan(gk)		      ? 0
						      : (unsigned long long)gk;
		r->packets = !strcmp(r->test, "rr") ? 2 * r->guest_frames : r->guest_frames;
	}
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
	bool mark = out && (c->phase == 0 ? strstr(out, "entering CPL3") != NULL
					  : c->phase == 1 && last_line(out, "BENCH ") != NULL);
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
}

/* The row's error from the VMM's output: the guest's failure, the VMM's, or its last word. */
static void guest_failed(struct bench_row *r, int q, int status, const char *out, bool bench_line)
{
	const char *why = out ? last_line(out, "GUEST FAIL") : NULL;
	char *nl;

	if (!why && out)
		why = last_line(out, q < 0 ? "lkvm: error" : "qemu-system-x86_64:");
	if (!why && out && q >= 0 && *out)
		why = last_line(out, ""); /* QEMU's last word */
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
static int run_guest(struct bench *b, int q, bool vhost, const char *nopts, const char *params,
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
	ret = spawn(b, 0, argv, true, &k);
	if (ret < 0) {
		snprintf(r->error, sizeof(r->error), "cannot start %s: %s", q < 0 ? "lkvm" : "qemu",
			 strerror(-ret));
		return 1;
	}
	cw.pid = k.pid;
	cw.now.kworkers = vhost ? BENCH_KW_KNOWN : BENCH_KW_NONE;
	if (!slurp(k.out, &out, &len, now_ns() + (b->cfg.secs + 40) * 1000000000ull, &cw.w))
		kill(k.pid, SIGTERM);
	status = reap(b, 0, &k, &cpu);
	/* Kernel workers' CPU is not in the VMM's rusage nor "other": known from their samples. */
	r->kworker_s = bench_kworkers_cpu(&cw.now);
	r->cpu = cpu / ((double)(now_ns() - t0) / 1e9);
	save_log(b, log, out);
	bl = out ? last_line(out, "BENCH ") : NULL;
	st = out ? last_line(out, "{\"vcpu_exits\"") : NULL;
	if (interrupted)
		snprintf(r->error, sizeof(r->error), "interrupted");
	else if (status != 0 || !bl || (q < 0 && !st))
		guest_failed(r, q, status, out, bl != NULL);
	if (r->error[0]) {
		free(out);
		return status ? status : 1;
	}
	parse_bench_line(r, bl, q >= 0);
	if (q < 0)
		parse_stats(r, st);
	set_thread_cpu(r, &cw);
	free(out);
	return 0;
}

/* ---- floors measured in this process ---- */

static void build_frame(unsigned char *f, unsigned size)
{
	static const unsigned char mac[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };

	memset(f, 0, size);
	bench_frame_head(f, mac, BENCH_TEST_TX);
}

static int cmp_u64(const void *a, const void *b)
{
	u64 x = *(const u64 *)a, y = *(const u64 *)b;

	return x < y ? -1 : x > y;
}

/*
 * Every floor runs the way the fastest mode does: its host thread polls the non-blocking tap
 * without sleeping (for BENCH_SPIN_NS since it last had work, then it sleeps in poll() so that
 * on a busy host it does not starve the peer it waits for). A thread that sleeps between
 * frames measures the host's wake-up latency, not the path: on a host whose idle CPUs halt (a
 * VM without a cpuidle driver, as the PVM hosts are), waking a halted CPU costs tens of
 * microseconds, which a mode whose threads spin never pays (docs/benchmarks.md).
 */

/* After a try that found nothing to do: spin on (return) within the window, else sleep. */
static void floor_wait(int fd, short events, u64 since)
{
	struct pollfd p = { .fd = fd, .events = events };

	if (now_ns() - since > BENCH_SPIN_NS)
		poll(&p, 1, 1);
}

static u64 thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (u64)ts.tv_sec * 1000000000ull + (u64)ts.tv_nsec;
}

/* The floor thread's CPU per packet since c0, less idle_ns it spent polling a tap that had
 * nothing for it (tx, rx: the cost of moving a frame, not of waiting for the peer). */
static void set_floor_cpu(struct bench_row *r, u64 c0, u64 idle_ns)
{
	u64 cpu = thread_cpu_ns() - c0;

	if (r->packets)
		r->host_ns = (double)(cpu > idle_ns ? cpu - idle_ns : 0) / (double)r->packets;
}

/* The floors' tap with batch=on's io_uring batches (net/tap-uring.c, the very code the device
 * uses) where this host has them: the floor then moves frames the way the fastest mode does.
 * The tap has no vnet header here: the batch calls only readv/writev the iovecs given. */
static const struct net_backend_ops floor_ops = { .name = "floor" };

static bool floor_batch(struct net_backend *be, int fd)
{
	char why[128];

	*be = (struct net_backend){ .ops = &floor_ops, .rx_fd = fd, .tx_fd = fd };
	return net_tap_uring_attach(be, why, sizeof(why)) == 0;
}

/* A host thread writes frames to the non-blocking tap as fast as it takes them (NET_TX_BATCH
 * per io_uring call where batch=on can be used, else one write each): the most a tx cell can
 * move. */
static void floor_tap_write(struct bench *b, int fd, struct bench_row *r)
{
	static unsigned char f[NET_TX_BATCH][BENCH_FRAME_MAX];
	struct iovec iov[NET_TX_BATCH];
	struct net_io io[NET_TX_BATCH];
	struct net_backend be;
	bool batch = floor_batch(&be, fd);
	int per = batch ? NET_TX_BATCH : 1;
	u64 t0 = now_ns(), end = t0 + b->cfg.secs * 1000000000ull, t = t0, n = 0,
	    c0 = thread_cpu_ns();
	u64 last = t0;

	for (int i = 0; i < per; i++) {
		build_frame(f[i], r->size);
		iov[i] = (struct iovec){ .iov_base = f[i], .iov_len = r->size };
		io[i] = (struct net_io){ .iov = &iov[i], .iovcnt = 1 };
	}
	while (!interrupted && t < end) {
		u64 sent = 0;

		for (int i = 0; i < per; i++) {
			u64 seq = n + (u64)i;

			memcpy(f[i] + BENCH_OFF_SEQ, &seq, 8);
		}
		if (batch) {
			if (be.ops->send_batch(&be, io, per) < 0) {
				/* Refused (a tap without RWF_NOWAIT, as batch=on's fallback): one write
				 * per frame from here; the buffers are static, a late request harmless. */
				net_tap_uring_detach(&be);
				batch = false;
				per = 1;
				continue;
			}
			for (int i = 0; i < per && io[i].res == (ssize_t)r->size; i++)
				sent++;
		} else if (write(fd, f[0], r->size) == (ssize_t)r->size) {
			sent = 1;
		}
		n += sent;
		if (!sent) /* rare: a tap takes every write it has memory for */
			floor_wait(fd, POLLOUT, last);
		else if (batch || !(n & 63)) /* the clock read per call, or per 64 writes */
			t = last = now_ns();
	}
	t = now_ns();
	if (batch)
		net_tap_uring_detach(&be); /* the rings go, the tap stays */
	r->guest_frames = n;
	r->secs = (double)(t - t0) / 1e9;
	r->pps = (double)n / r->secs;
	r->mbps = r->pps * r->size * 8 / 1e6;
	r->packets = n;
	set_floor_cpu(r, c0, 0);
}

/* net-peer blasts, a host thread reads the non-blocking tap in a loop (NET_RX_BATCH buffers
 * per io_uring call where batch=on can be used, else one read each): the most an rx cell can
 * take. */
static void floor_tap_read(struct bench *b, int fd, struct bench_row *r)
{
	static unsigned char f[NET_RX_BATCH][2048];
	struct iovec iov[NET_RX_BATCH];
	struct net_io io[NET_RX_BATCH];
	struct net_backend be;
	bool batch = floor_batch(&be, fd);
	int per = batch ? NET_RX_BATCH : 1;
	u64 t0 = now_ns(), end = t0 + b->cfg.secs * 1000000000ull, t = t0, n = 0, bytes = 0;
	u64 c0 = thread_cpu_ns(), last = t0, idle = 0;

	for (int i = 0; i < per; i++) {
		iov[i] = (struct iovec){ .iov_base = f[i], .iov_len = sizeof(f[i]) };
		io[i] = (struct net_io){ .iov = &iov[i], .iovcnt = 1 };
	}
	while (!interrupted && (t = now_ns()) < end) {
		int got = 0;

		if (batch) {
			if (be.ops->recv_batch(&be, io, per) < 0) {
				net_tap_uring_detach(
					&be); /* refused: one read per frame, as above */
				batch = false;
				per = 1;
				continue;
			}
		} else {
			io[0].res = read(fd, f[0], sizeof(f[0]));
		}
		for (int i = 0; i < per; i++) {
			ssize_t l = io[i].res;

			if (l < 0)
				continue;
			got++;
			if (l >= 14 && f[i][BENCH_OFF_ETHERTYPE] == (BENCH_ETHERTYPE >> 8) &&
			    f[i][BENCH_OFF_ETHERTYPE + 1] == (BENCH_ETHERTYPE & 0xff)) {
				n++;
				bytes += (u64)l;
			}
		}
		if (got) {
			last = t;
		} else {
			idle += now_ns() - t; /* the empty read; floor_wait's sleep is no CPU */
			floor_wait(fd, POLLIN, last);
		}
	}
	if (batch)
		net_tap_uring_detach(&be);
	r->guest_frames = n;
	r->secs = (double)(t - t0) / 1e9;
	r->pps = (double)n / r->secs;
	r->mbps = (double)bytes * 8 / r->secs / 1e6;
	r->packets = n;
	set_floor_cpu(r, c0, idle);
}

/* Polls the non-blocking tap until the echo of seq comes back (true) or the timeout. */
static bool await_echo(int fd, const unsigned char *sent, unsigned size, u64 seq, u64 ts)
{
	unsigned char in[2048];

	while (!interrupted && now_ns() - ts < RR_TIMEOUT_NS) {
		ssize_t l = read(fd, in, sizeof(in));

		if (l == (ssize_t)size && !memcmp(in + BENCH_OFF_SEQ, &seq, 8) &&
		    !memcmp(in + BENCH_OFF_ETHERTYPE, sent + BENCH_OFF_ETHERTYPE, 2))
			return true;
		if (l < 0)
			floor_wait(fd, POLLIN, ts);
	}
	return false;
}

/* One frame into the tap, net-peer echoes it (spin-echo: it polls without sleeping too), the
 * thread polls until it is back: rr without a VM. */
static void floor_peer_echo(struct bench *b, int fd, struct bench_row *r)
{
	unsigned char f[BENCH_FRAME_MAX];
	u64 *lat = malloc(MAX_SAMPLES * sizeof(u64));
	u64 t0 = now_ns(), end = t0 + b->cfg.secs * 1000000000ull, n = 0, seq = 0, lost = 0;
	u64 c0 = thread_cpu_ns();

	if (!lat) {
		snprintf(r->error, sizeof(r->error), "out of memory");
		return;
	}
	build_frame(f, r->size);
	while (!interrupted && now_ns() < end && n < MAX_SAMPLES) {
		u64 ts;

		seq++;
		memcpy(f + BENCH_OFF_SEQ, &seq, 8);
		ts = now_ns();
		if (write(fd, f, r->size) == (ssize_t)r->size &&
		    await_echo(fd, f, r->size, seq, ts))
			lat[n++] = now_ns() - ts;
		else
			lost++;
	}
	r->secs = (double)(now_ns() - t0) / 1e9;
	r->guest_frames = n;
	r->lost = lost;
	if (n) {
		qsort(lat, n, sizeof(*lat), cmp_u64);
		r->rtt_med_us = (double)lat[n / 2] / 1000;
		r->rtt_p99_us = (double)lat[n * 99 / 100] / 1000;
	} else {
		snprintf(r->error, sizeof(r->error), "no echo came back");
	}
	r->tps = (double)n / r->secs;
	r->pps = 2 * r->tps;
	r->mbps = r->pps * r->size * 8 / 1e6;
	r->packets = 2 * n;
	set_floor_cpu(r, c0, 0); /* rr's waiting is its cost: a polling mode pays it too */
	free(lat);
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
static const char *host_kind(void)
{
	const char *k = getenv("LKVM_HOST_KIND");

	if (k && *k)
		return k;
	return x86_host_is_pvm() ? "native-pvm" : "native";
}

static bool host_emulated(void)
{
	return strcmp(host_kind(), "emulated-svm") == 0;
}

#define HEAD_FMT "%-20s %-6s %5s %9s %9s %9s %9s %9s %9s %9s %9s %9s %8s %6s %8s %8s %7s\n"

static void print_header(FILE *out)
{
	fprintf(out, "# host: %s%s\n", host_kind(),
		host_emulated()
			? " (EMULATED: everything ran under QEMU's TCG; no figure stands for real hardware)"
			: "");
	fprintf(out, HEAD_FMT, "mode", "test", "size", "Kpps", "Mb/s", "RTTmed_us", "RTTp99_us",
		"trans/s", "exits/pkt", "kicks/pkt", "irqs/pkt", "pkts/kick", "x_floor", "cpu",
		"host_ns", "floor_ns", "other");
}

/* What the table's marks mean, once, under it. */
static void print_notes(FILE *out, const struct bench *b)
{
	bool busy = false, beats = false;

	for (int i = 0; i < b->nrows; i++) {
		busy |= b->rows[i].busy;
		beats |= b->rows[i].beats_floor;
	}
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

static int write_json(const struct bench *b, const char *path)
{
	FILE *f = fopen(path, "we");

	if (!f) {
		pr_err("bench: --json %s: %s", path, strerror(errno));
		return -1;
	}
	fprintf(f, "{\"duration\":%u,\"tap\":\"%s\",\"host\":\"%s\",\"emulated\":%s,\"qemu\":\"",
		b->cfg.secs, TAP_NAME, host_kind(), host_emulated() ? "true" : "false");
	/* "ran", "not asked", or why it could not run */
	jesc(f, !b->cfg.qemu ? "not asked" : b->qemu_note[0] ? b->qemu_note : "ran");
	fputs("\",\"vhost\":\"", f);
	jesc(f, !b->vhost_asked ? "not asked" : b->vhost_note[0] ? b->vhost_note : "ran");
	fputs("\",\"rows\":[\n", f);
	for (int i = 0; i < b->nrows; i++) {
		const struct bench_row *r = &b->rows[i];

		fprintf(f,
			"{\"mode\":\"%s\",\"test\":\"%s\",\"size\":%u,\"floor\":%s,\"ok\":%s,\"vmm\":\"%s\"",
			r->mode, r->test, r->size, r->floor ? "true" : "false",
			r->error[0] ? "false" : "true", r->qemu ? "qemu" : "lkvm");
		if (r->error[0]) {
			fputs(",\"error\":\"", f);
			jesc(f, r->error);
			fputc('"', f);
		}
		jdbl(f, "secs", r->secs);
		jdbl(f, "pps", r->pps);
		jdbl(f, "mbps", r->mbps);
		jdbl(f, "rtt_median_us", r->rtt_med_us);
		jdbl(f, "rtt_p99_us", r->rtt_p99_us);
		jdbl(f, "tps", r->tps);
		jdbl(f, "x_floor", r->ratio);
		jdbl(f, "lkvm_cpu", r->cpu);
		jdbl(f, "host_ns_per_pkt", r->host_ns);
		jdbl(f, "vcpu_ns_per_pkt", r->vcpu_ns);
		jdbl(f, "floor_ns_per_pkt", r->floor_ns);
		jdbl(f, "other_cpu", r->other_cpu);
		fprintf(f, ",\"busy\":%s,\"beats_floor\":%s,\"batch\":%s%s%s",
			r->busy ? "true" : "false", r->beats_floor ? "true" : "false",
			r->batch ? "\"" : "", r->batch ? r->batch : "null", r->batch ? "\"" : "");
		fprintf(f,
			",\"guest_frames\":%llu,\"lost\":%llu,\"peer_frames\":%llu,\"peer_drops\":%llu"
			",\"tap_rx\":%llu,\"tap_tx\":%llu,\"tap_tx_drops\":%llu,\"packets\":%llu,\"kicks\":%llu",
			r->guest_frames, r->lost, r->peer_frames, r->peer_drops, r->tap_rx,
			r->tap_tx, r->tap_tx_drops, r->packets, r->kicks);
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
		fprintf(f, "}%s\n", i + 1 < b->nrows ? "," : "");
	}
	fputs("]}\n", f);
	return fclose(f) ? -1 : 0;
}

/* The charts: --svg FILE (rates) and FILE with "-cpu" before its ".svg" (host CPU per packet). */
static int write_svgs(const struct bench *b, const char *path)
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

		ret = f ? bench_svg(f, b->rows, b->nrows, b->cfg.secs, host_kind(), cpu) : -errno;
		if (f && fclose(f) && !ret)
			ret = -errno;
		if (ret)
			pr_err("bench: --svg %s: %s", p, strerror(-ret));
	}
	return ret;
}

/* ---- the run ---- */

static void progress(struct bench *b, const struct bench_row *r)
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
	run_guest(b, q, false, trap ? ",ioeventfd=off" : "", params, r, log[0] ? log : NULL);
	load_end(r, &l);
	return r;
}

static void run_notify_floor(struct bench *b, bool trap, int q)
{
	progress(b, notify_floor(b, trap, q));
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
	if (peer_start(b, peer_mode, size, &p, r->error, sizeof(r->error)) == 0) {
		fd = tap_attach(false, false);
		if (fd < 0) {
			snprintf(r->error, sizeof(r->error), "attaching to %s: %s", TAP_NAME,
				 strerror(-fd));
		} else {
			fn(b, fd, r);
			close(fd);
		}
		peer_stop(b, &p, &r->peer_frames, &r->peer_drops, log[0] ? log : NULL);
	}
	load_end(r, &l);
	progress(b, r);
}

/* The row of one cell: lkvm in mode with batch (-1: this lkvm has no -n batch=), or QEMU in
 * QEMU mode q; lkvm's batch=off rows are named MODE/nobatch. */
static struct bench_row *cell_row(struct bench *b, int mode, int batch, int q, int test,
				  unsigned size)
{
	char name[32];
	struct bench_row *r;

	if (q >= 0)
		snprintf(name, sizeof(name), "%s", qemu_info[q].name);
	else
		snprintf(name, sizeof(name), "%s%s", mode_info[mode].name,
			 batch == 0 ? "/nobatch" : "");
	r = new_row(b, name, test_info[test].name, size, false);
	r->group = q >= 0 ? qemu_info[q].group : mode_info[mode].group;
	r->batch = q >= 0 || batch < 0 ? NULL : batch ? "on" : "off";
	return r;
}

static void run_cell(struct bench *b, int mode, int batch, int q, int test, unsigned size)
{
	struct bench_row *r = cell_row(b, mode, batch, q, test, size);
	unsigned long long rx0, tx0, txd0, rx1, tx1, txd1;
	char params[96], nopts[96], log[PATH_MAX], plog[PATH_MAX];
	struct bench_load l;
	struct peer_run p;

	log_path(b, log, sizeof(log), r, "log");
	log_path(b, plog, sizeof(plog), r, "peer");
	snprintf(params, sizeof(params), "bench=%s size=%u secs=%u", test_info[test].name, size,
		 b->cfg.secs);
	snprintf(nopts, sizeof(nopts), "%s%s", q < 0 ? mode_info[mode].nopts : "",
		 q >= 0 || batch < 0 ? ""
		 : batch	     ? ",batch=on"
				     : ",batch=off");
	load_begin(&l);
	if (peer_start(b, test_info[test].peer, size, &p, r->error, sizeof(r->error)) == 0) {
		tap_counters(&rx0, &tx0, &txd0);
		run_guest(b, q, q >= 0 ? qemu_info[q].vhost : mode_info[mode].vhost, nopts, params,
			  r, log[0] ? log : NULL);
		tap_counters(&rx1, &tx1, &txd1);
		peer_stop(b, &p, &r->peer_frames, &r->peer_drops, plog[0] ? plog : NULL);
		r->tap_rx = rx1 - rx0;
		r->tap_tx = tx1 - tx0;
		r->tap_tx_drops = txd1 - txd0;
	}
	load_end(r, &l);
	if (!r->error[0])
		set_ratio(b, r);
	progress(b, r);
}

/* Whether lkvm mode m runs here: vhost modes only where /dev/vhost-net opened. */
static bool mode_runs(const struct bench *b, int m)
{
	return !mode_info[m].vhost || !b->vhost_note[0];
}

/* Whether QEMU mode q runs: qemu/vhost only with vhost among --modes and /dev/vhost-net. */
static bool qemu_runs(const struct bench *b, int q)
{
	return !qemu_info[q].vhost || (b->vhost_asked && !b->vhost_note[0]);
}

/* lkvm's batch axis for mode m: vhost takes no batch= (one row per cell, batch -1). */
static int mode_batches(const struct bench_cfg *c, int m)
{
	return mode_info[m].vhost ? 1 : c->nbatch;
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
		b->vhost_asked |= mode_info[c->modes[m]].vhost;
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
			progress(b, r);
		} else if (!interrupted) {
			/* QEMU cannot run the guest here: one line says why, no QEMU rows. */
			snprintf(b->qemu_note, sizeof(b->qemu_note),
				 "cannot run the guest here: %.150s", r->error);
			b->nrows--;
		}
		if (b->qemu_note[0] || interrupted)
			goto out;
		if (!interrupted)
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
	if (!interrupted)
		run_notify_floor(b, true, -1);
	if (c->qemu && !interrupted)
		qemu_modes = qemu_probe(b);
	for (int s = 0; s < c->nsizes && !interrupted; s++) {
		if (wants(c, T_TX) && !interrupted)
			run_host_floor(b, "tx", "count", c->sizes[s], floor_tap_write);
		if (wants(c, T_RX) && !interrupted)
			run_host_floor(b, "rx", "blast", c->sizes[s], floor_tap_read);
		if (wants(c, T_RR) && !interrupted)
			run_host_floor(b, "rr", "spin-echo", c->sizes[s], floor_peer_echo);
	}
	/* Tests outermost, then sizes, then modes: the modes to compare run back to back. */
	for (int t = 0; t < c->ntests && !interrupted; t++)
		for (int s = 0; s < c->nsizes && !interrupted; s++) {
			for (int m = 0; m < c->nmodes && !interrupted; m++) {
				int mode = c->modes[m];

				for (int i = 0; mode_runs(b, mode) && i < mode_batches(c, mode) &&
						!interrupted;
				     i++)
					run_cell(b, mode, mode_info[mode].vhost ? -1 : c->batch[i],
						 -1, c->tests[t], c->sizes[s]);
			}
			for (int q = 0; q < qemu_modes && !interrupted; q++)
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

	if (host_emulated() ||
	    find_beside(c->self, "scripts/kvm-host.sh", script, sizeof(script)) < 0) {
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

int cmd_bench(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_signal };
	struct bench *b;
	int ret, failed = 0;

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
	if (!kvm_usable()) {
		ret = run_emulated(&b->cfg, argc, argv);
		free(b);
		return ret;
	}
	if (setup_netns() < 0) {
		free(b);
		return 1;
	}
	/* No SA_RESTART: blocking reads and polls return, and every loop checks the flag. */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	fprintf(stderr,
		"bench: %u s per cell, tap %s in a private network namespace, guest %s, peer %s, host %s\n",
		b->cfg.secs, TAP_NAME, b->cfg.guest, b->cfg.peer, host_kind());
	run_all(b);
	for (int i = 0; i < 2; i++)
		if (b->kids[i] > 0)
			kill(b->kids[i], SIGTERM);
	print_header(stdout);
	if (b->qemu_note[0])
		printf("# qemu: %s\n", b->qemu_note);
	if (b->vhost_note[0])
		printf("# vhost: %s\n", b->vhost_note);
	for (int i = 0; i < b->nrows; i++) {
		print_row(stdout, &b->rows[i]);
		failed += b->rows[i].error[0] != 0;
	}
	print_notes(stdout, b);
	fflush(stdout);
	if (b->cfg.json && write_json(b, b->cfg.json) < 0)
		failed++;
	if (b->cfg.svg && !interrupted && write_svgs(b, b->cfg.svg) < 0)
		failed++;
	ret = interrupted ? 128 + interrupted : failed ? 1 : 0;
	if (interrupted)
		fprintf(stderr, "bench: interrupted after %d of %d rows\n", b->nrows, b->total);
	free(b);
	return ret;
}

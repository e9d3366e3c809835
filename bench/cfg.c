/* The axes of `lkvm bench net`'s matrix (lkvm's TX strategies, QEMU's, the tests) and its configuration: the option lists, the defaults, where the guest, the peer and QEMU are. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/bench-frame.h"
#include "lkvm/bench.h"
#include "lkvm/net.h"
#include "lkvm/opt.h"
#include "lkvm/util.h"

#include "bench.h"

/* The chart's groups: each names one TX strategy that lkvm and QEMU may both have. */
#define G_KICK "kick, ioeventfd"
#define G_KICK_TRAP "kick, trapped"
#define G_TIMER "timer, ioeventfd"
#define G_TIMER_TRAP "timer, trapped"
#define G_VHOST "vhost (kernel)"

const struct mode_info bench_mode_info[] = {
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
_Static_assert(ARRAY_SIZE(bench_mode_info) == M_NR, "bench_mode_info must name every mode");

const struct qemu_info bench_qemu_info[] = {
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
_Static_assert(ARRAY_SIZE(bench_qemu_info) == Q_NR, "bench_qemu_info must name every QEMU mode");

const struct test_info bench_test_info[] = {
	[T_TX] = { "tx", "count" },
	[T_RR] = { "rr", "echo" },
	[T_RX] = { "rx", "blast" },
};
_Static_assert(ARRAY_SIZE(bench_test_info) == T_NR, "bench_test_info must name every test");

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
		if (!strcmp(name, bench_mode_info[m].name)) {
			if (vhost)
				*vhost = bench_mode_info[m].vhost;
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
		if (!strcmp(s, bench_test_info[t].name))
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
int bench_find_beside(const char *self, const char *rel, char *out, size_t len)
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

int bench_opt_modes(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct bench_cfg *c = base;

	return parse_list("--modes", v, mode_of, c->modes, M_NR, &c->nmodes, err, errlen);
}

int bench_opt_tests(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct bench_cfg *c = base;

	return parse_list("--tests", v, test_of, c->tests, T_NR, &c->ntests, err, errlen);
}

int bench_opt_sizes(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct bench_cfg *c = base;

	return parse_list("--sizes", v, size_of, (int *)c->sizes, MAX_LIST, &c->nsizes, err,
			  errlen);
}

int bench_opt_batch(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct bench_cfg *c = base;

	return parse_list("--batch", v, batch_of, c->batch, 2, &c->nbatch, err, errlen);
}

int bench_opt_qemu(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
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

/* The defaults, then the options; then where the guest, the peer and QEMU are. */
int bench_set_defaults(struct bench_cfg *c, char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	c->secs = 5;
	return bench_opt_modes(NULL, "ioeventfd,trap,timer,poll", c, err, errlen) ||
	       bench_opt_tests(NULL, "tx,rr,rx", c, err, errlen) ||
	       bench_opt_sizes(NULL, "64,1500", c, err, errlen);
}

/* Where the guest, the peer and QEMU are, and whether what the options ask for can be had. */
int bench_find_programs(struct bench_cfg *c)
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
		bench_find_beside(c->self, "build/guests/net-bench.elf", c->guest,
				  sizeof(c->guest));
	if (c->peer_arg)
		snprintf(c->peer, sizeof(c->peer), "%s", c->peer_arg);
	else
		bench_find_beside(c->self, "build/tools/net-peer", c->peer, sizeof(c->peer));
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

/* Whether the lkvm that runs the cells (this binary) has -n NAME=: from its own table. */
bool bench_lkvm_has(const char *name)
{
	for (const struct opt *o = net_opt_set.opts; o->kind != OPT_END; o++)
		if (!strcmp(o->name, name))
			return true;
	return false;
}

/* The batch axis: --batch's values, by default on and off where lkvm has them, else none. */
int bench_batch_axis(struct bench_cfg *c)
{
	if (bench_lkvm_has("batch")) {
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

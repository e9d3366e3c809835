/* `lkvm bench net`'s processes: the private network namespace and its tap, and the children it runs (lkvm or QEMU with the guest, net-peer), their output read as it comes. */
#include <errno.h>
#include <fcntl.h>
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
#include <sys/wait.h>
#include <unistd.h>
#include <linux/if_tun.h>

#include "lkvm/util.h"

#include "bench.h"

#define OUT_MAX (4u << 20) /* most output kept from one child */
#define READY_MS 10000	   /* net-peer must be receiving within this */

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

int bench_tap_attach(bool vnet_hdr, bool persist)
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
int bench_setup_netns(void)
{
	struct ifreq ifr = { 0 };
	int fd, s;

	if (unshare(CLONE_NEWNET) < 0) {
		pr_err("bench: unshare(CLONE_NEWNET): %s (run as root)", strerror(errno));
		return -1;
	}
	write_file("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
	write_file("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
	fd = bench_tap_attach(true, true);
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
void bench_tap_counters(unsigned long long *rx, unsigned long long *tx, unsigned long long *tx_drop)
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

int bench_spawn(struct bench *b, int slot, char *const argv[], bool merge, struct kid *k)
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

/* Appends what fd has to *buf until EOF (true), the deadline, or a signal (false); calls w
 * (may be NULL) after each read and each SAMPLE_MS without one. */
bool bench_slurp(int fd, char **buf, size_t *len, u64 deadline, struct watch *w)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		u64 now = now_ns();
		int wait = (int)MIN((deadline - now) / 1000000 + 1, w ? SAMPLE_MS : 1000);
		char tmp[8192];
		ssize_t r;

		if (bench_interrupted || now >= deadline)
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

	while (!bench_interrupted && now_ns() < deadline) {
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

int bench_reap(struct bench *b, int slot, struct kid *k, double *cpu_secs)
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

int bench_peer_start(struct bench *b, const char *mode, unsigned size, struct peer_run *p,
		     char *why, size_t wlen)
{
	char secs[16], sz[16];
	char *argv[] = { b->cfg.peer, (char *)mode, TAP_NAME, secs, sz, NULL };
	int ret;

	memset(p, 0, sizeof(*p));
	p->k.out = p->k.err = -1;
	snprintf(secs, sizeof(secs), "%u", b->cfg.secs + 120);
	snprintf(sz, sizeof(sz), "%u", size);
	ret = bench_spawn(b, 1, argv, false, &p->k);
	if (ret < 0) {
		snprintf(why, wlen, "cannot start net-peer: %s", strerror(-ret));
		return ret;
	}
	if (!peer_ready(&p->k, &p->err, &p->err_len)) {
		snprintf(why, wlen, "net-peer %s not ready: %.100s", mode,
			 p->err ? p->err : "no output");
		kill(p->k.pid, SIGTERM);
		bench_reap(b, 1, &p->k, NULL);
		free(p->err);
		return -ETIMEDOUT;
	}
	return 0;
}

/* Stops the peer and returns its PEER line's numbers. */
void bench_peer_stop(struct bench *b, struct peer_run *p, unsigned long long *frames,
		     unsigned long long *drops, const char *log)
{
	char *out = NULL;
	size_t len = 0;
	const char *l;

	kill(p->k.pid, SIGTERM);
	bench_slurp(p->k.out, &out, &len, now_ns() + 5000000000ull, NULL);
	bench_reap(b, 1, &p->k, NULL);
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

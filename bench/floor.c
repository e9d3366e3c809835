/* `lkvm bench net`'s floors measured in its own process on the tap: a host thread writing frames (tx), reading net-peer's blast (rx), and an echo through net-peer (rr). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lkvm/bench-frame.h"
#include "lkvm/bench.h"
#include "lkvm/net.h"
#include "lkvm/util.h"

#include "bench.h"

#define MAX_SAMPLES (1u << 20)
#define RR_TIMEOUT_NS 200000000ull

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
void bench_floor_tap_write(struct bench *b, int fd, struct bench_row *r)
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
	while (!bench_interrupted && t < end) {
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
void bench_floor_tap_read(struct bench *b, int fd, struct bench_row *r)
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
	while (!bench_interrupted && (t = now_ns()) < end) {
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

	while (!bench_interrupted && now_ns() - ts < RR_TIMEOUT_NS) {
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
void bench_floor_peer_echo(struct bench *b, int fd, struct bench_row *r)
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
	while (!bench_interrupted && now_ns() < end && n < MAX_SAMPLES) {
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

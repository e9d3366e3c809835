/* Guest net-bench: drives lkvm's virtio-net from CPL3 with polled rings and prints one BENCH line for tx, rr or rx. */
#include "guest.h"
#include "lkvm/bench-frame.h"

/*
 * Command line (lkvm -p): bench=tx|rr|rx|notify size=BYTES secs=SECONDS event_idx=0|1 resets=N
 *   trace=0|1
 *   tx  sends frames of `size` bytes (Ethernet header included, 60-1514) as fast as the TX
 *       ring allows for `secs`, then waits for the device to consume the rest; with resets=N
 *       (0-16) the run is cut into N + 1 equal parts, and between two the device is reset and
 *       set up again once every chain posted came back (a device reset in the middle of
 *       traffic: every frame before it, and those after it, must get out);
 *   rr  sends one frame, waits for the host's echo (same bytes, MAC addresses swapped), repeats;
 *       per-transaction latency from RDTSC (rate from kvm-clock, see clock.c); with trace=1
 *       each frame carries three TSC stamps (lkvm/bench-frame.h) for lkvm's -n trace=on,
 *       echoed back and checked like the rest;
 *   rx  counts the frames the host sends for `secs`;
 *   notify  writes the TX queue's notify register in a loop for `secs` with no chain posted:
 *       the bare cost of one notification (trapped exit or ioeventfd), the floor of a kick.
 * Frames are broadcast, in the format of lkvm/bench-frame.h.
 * Set-up (PCI, virtio status, queue registers) runs at CPL0; buffers and the measured loop
 * at CPL3, where a PVM host runs code natively. Rings are polled: no interrupts are used.
 */

#define ETH_HLEN 14
#define VNET_HDR_LEN 12 /* struct virtio_net_hdr_v1: VERSION_1 always has num_buffers */
#define BUF_SIZE 2048
#define RXQ 0
#define TXQ 1
#define QSIZE 256
#define MAX_SAMPLES (1u << 20)
#define RR_TIMEOUT_NS 200000000ull /* a transaction with no echo after this is lost */
#define DRAIN_TIMEOUT_NS 2000000000ull

struct bench {
	struct virtio_pci vp;
	struct virtq rx, tx;
	enum bench_frame_test test;
	const char *name;
	u32 size;
	u64 secs;
	u64 resets; /* tx: device resets in the middle of the run */
	u64 want;   /* the features asked for, again after each reset */
	bool trace; /* rr: the frame carries the guest's TSC stamps (trace=1) */
	u8 mac[6];
	u8 *txbuf, *rxbuf; /* QSIZE buffers of BUF_SIZE each */
};

static struct bench B;

static u64 get64(const u8 *p)
{
	u64 v;

	memcpy(&v, p, 8);
	return v;
}

static u32 get32(const u8 *p)
{
	u32 v;

	memcpy(&v, p, 4);
	return v;
}

/* Header (zero: no offloads) and frame for slot i; the sequence number goes in at send time. */
static void build_frame(u8 *buf)
{
	u8 *f = buf + VNET_HDR_LEN;

	memset(buf, 0, VNET_HDR_LEN);
	bench_frame_head(f, B.mac, B.test);
}

_Static_assert(BENCH_OFF_T_SEEN + 8 <= BENCH_FRAME_MIN, "the trace stamps fit the smallest frame");

/* The pattern after the sequence number; with trace=1 after the stamps, which it must not
 * overwrite (the echo is checked byte-exact, stamps included). */
static void set_seq(u8 *buf, u64 seq, bool pattern)
{
	u8 *f = buf + VNET_HDR_LEN;

	memcpy(f + BENCH_OFF_SEQ, &seq, 8);
	if (pattern)
		for (u32 j = B.trace ? BENCH_OFF_T_SEEN + 8 : BENCH_OFF_PATTERN; j < B.size; j++)
			f[j] = (u8)(seq * 7 + j);
}

/* trace=1: a TSC stamp into the frame at off (a BENCH_OFF_T_* field). */
static void set_stamp(u8 *buf, u32 off, u64 tsc)
{
	if (B.trace)
		memcpy(buf + VNET_HDR_LEN + off, &tsc, 8);
}

static u8 *txslot(u64 i)
{
	return B.txbuf + i * BUF_SIZE;
}
static u8 *rxslot(u64 i)
{
	return B.rxbuf + i * BUF_SIZE;
}

static void post_rx(u64 i)
{
	struct vq_buf b = { (u64)(uintptr_t)rxslot(i), BUF_SIZE };

	if (!virtq_add(&B.rx, &b, 0, 1, (void *)(uintptr_t)(i + 1)))
		GUEST_FAIL("rx ring full");
}

static bool post_tx(u64 i)
{
	struct vq_buf b = { (u64)(uintptr_t)txslot(i), VNET_HDR_LEN + B.size };

	return virtq_add(&B.tx, &b, 1, 0, (void *)(uintptr_t)(i + 1));
}

/* Our frame, or NULL: a frame the host stack sent (IPv6 router solicitation, ...) is skipped. */
static const u8 *our_frame(const u8 *buf, u32 len)
{
	const u8 *f = buf + VNET_HDR_LEN;

	if (len < VNET_HDR_LEN + BENCH_OFF_PATTERN ||
	    f[BENCH_OFF_ETHERTYPE] != (BENCH_ETHERTYPE >> 8) ||
	    f[BENCH_OFF_ETHERTYPE + 1] != (BENCH_ETHERTYPE & 0xff) ||
	    get32(f + BENCH_OFF_MAGIC) != BENCH_MAGIC)
		return NULL;
	return f;
}

static void print_secs(char *out, size_t n, u64 ns)
{
	gsnprintf(out, n, "%llu.%06llu", ns / 1000000000ull, ns % 1000000000ull / 1000);
}

/* count per second over ns, in microseconds so no 128-bit division is needed (count < 1.8e13). */
static u64 per_sec(u64 count, u64 ns)
{
	u64 us = ns / 1000;

	return us ? count * 1000000ull / us : 0;
}

/* ---- tx ---- */

/* Wait until the device used every chain posted (done reaches sent), up to DRAIN_TIMEOUT_NS;
 * t_last: when the last one came back. */
static void tx_drain(u64 sent, u64 *done, u64 *t_last)
{
	u64 end = rdtsc() + ns_to_tsc(DRAIN_TIMEOUT_NS);

	while (*done < sent && rdtsc() < end) {
		if (virtq_get(&B.tx, NULL)) {
			(*done)++;
			*t_last = rdtsc();
		} else {
			cpu_relax();
		}
	}
}

static void device_up(void);

static void run_tx(void)
{
	u64 free_slots[QSIZE], nfree = 0, sent = 0, done = 0, seq = 0, kicks = 0, resets = 0;
	u64 t0, end, t_last, now, part;
	char secs[32];

	for (u64 i = 0; i < QSIZE; i++) {
		build_frame(txslot(i));
		set_seq(txslot(i), 0, true);
		free_slots[nfree++] = i;
	}
	t0 = rdtsc();
	end = t0 + ns_to_tsc(B.secs * 1000000000ull);
	part = (end - t0) / (B.resets + 1);
	t_last = t0;
	for (now = t0; now < end; now = rdtsc()) {
		void *tok;
		bool added = false;

		if (resets < B.resets && now >= t0 + (resets + 1) * part) {
			/* Every chain back first: a reset forgets what the device did not use. */
			tx_drain(sent, &done, &t_last);
			GUEST_ASSERT_EQ(done, sent);
			kicks += B.tx.kicks;
			device_up();
			virtq_resetup(&B.rx);
			virtq_resetup(&B.tx);
			virtio_driver_ok(&B.vp);
			nfree = 0;
			for (u64 i = 0; i < QSIZE; i++)
				free_slots[nfree++] = i;
			resets++;
		}

		while ((tok = virtq_get(&B.tx, NULL))) {
			free_slots[nfree++] = (u64)(uintptr_t)tok - 1;
			done++;
		}
		while (nfree) {
			u64 i = free_slots[nfree - 1];

			memcpy(txslot(i) + VNET_HDR_LEN + BENCH_OFF_SEQ, &seq, 8);
			if (!post_tx(i))
				break;
			nfree--;
			seq++;
			sent++;
			added = true;
		}
		if (added)
			virtq_kick(&B.tx);
		else
			cpu_relax();
	}
	/* Everything posted must come back: the device consumes every chain. */
	t_last = rdtsc();
	tx_drain(sent, &done, &t_last);
	GUEST_ASSERT_EQ(done, sent);
	u64 ns = tsc_to_ns(t_last - t0);
	print_secs(secs, sizeof(secs), ns);
	gprintf("BENCH test=tx size=%u frames=%llu bytes=%llu secs=%s pps=%llu mbps=%llu kicks=%llu event_idx=%u clock=%s resets=%llu\n",
		B.size, sent, sent * B.size, secs, per_sec(sent, ns),
		per_sec(sent * B.size * 8, ns) / 1000000, kicks + B.tx.kicks, B.tx.event_idx,
		clock_source(), resets);
}

/* ---- rr ---- */

static void sort_u64(u64 *a, u64 n) /* heapsort: no recursion, no extra memory */
{
	for (u64 start = n / 2; start-- > 0;)
		for (u64 r = start, c; (c = 2 * r + 1) < n; r = c) {
			if (c + 1 < n && a[c + 1] > a[c])
				c++;
			if (a[r] >= a[c])
				break;
			u64 t = a[r];
			a[r] = a[c];
			a[c] = t;
		}
	for (u64 end = n; end-- > 1;) {
		u64 t = a[0];
		a[0] = a[end];
		a[end] = t;
		for (u64 r = 0, c; (c = 2 * r + 1) < end; r = c) {
			if (c + 1 < end && a[c + 1] > a[c])
				c++;
			if (a[r] >= a[c])
				break;
			t = a[r];
			a[r] = a[c];
			a[c] = t;
		}
	}
}

static void run_rr(void)
{
	u64 *lat = galloc(MAX_SAMPLES * sizeof(u64), 8);
	u64 n = 0, lost = 0, bad = 0, stray = 0, seq = 0, bytes = 0, t0, end, ns;
	u64 seen = 0; /* trace: when the previous echo was seen (G7), 0 if it never came */
	u64 timeout = ns_to_tsc(RR_TIMEOUT_NS);
	u64 tx_free[QSIZE], ntx = 0;
	char secs[32];

	for (u64 i = 0; i < QSIZE; i++) {
		build_frame(txslot(i));
		tx_free[ntx++] = i;
		post_rx(i);
	}
	virtq_kick(&B.rx);
	t0 = rdtsc();
	end = t0 + ns_to_tsc(B.secs * 1000000000ull);
	while (rdtsc() < end && n < MAX_SAMPLES) {
		void *tok;
		u64 i, ts, te, tw;
		bool matched = false;

		while ((tok = virtq_get(&B.tx, NULL)))
			tx_free[ntx++] = (u64)(uintptr_t)tok - 1;
		GUEST_ASSERT(ntx > 0);
		i = tx_free[--ntx];
		seq++;
		tw = rdtsc();
		set_seq(txslot(i), seq, true);
		set_stamp(txslot(i), BENCH_OFF_T_WRITE, tw);
		set_stamp(txslot(i), BENCH_OFF_T_SEEN, seen);
		ts = rdtsc();
		/* G1 before the chain is published, not after: from then on the device may copy the
		 * frame (a polling TX thread does), and a later store would race with its read. */
		set_stamp(txslot(i), BENCH_OFF_T_KICK, ts);
		GUEST_ASSERT(post_tx(i));
		virtq_kick(&B.tx);
		for (;;) {
			u32 len;

			te = rdtsc();
			tok = virtq_get(&B.rx, &len);
			if (!tok) {
				if (te - ts > timeout)
					break;
				cpu_relax();
				continue;
			}
			u64 r = (u64)(uintptr_t)tok - 1;
			const u8 *f = our_frame(rxslot(r), len);

			if (f && get64(f + BENCH_OFF_SEQ) == seq) {
				/* Everything after the MAC addresses must be what we sent. */
				if (len != VNET_HDR_LEN + B.size ||
				    memcmp(f + 12, txslot(i) + VNET_HDR_LEN + 12, B.size - 12))
					bad++;
				else
					bytes += B.size;
				matched = true;
			} else {
				stray++; /* not ours, or a late echo of a lost transaction */
			}
			post_rx(r);
			virtq_kick(&B.rx);
			if (matched)
				break;
		}
		if (matched)
			lat[n++] = te - ts;
		else
			lost++;
		seen = matched ? te : 0;
	}
	ns = tsc_to_ns(rdtsc() - t0);
	/* Every frame sent goes out before the count is printed, a lost transaction's too (no
	 * echo came in time): the peer then saw transactions + lost frames, even when the run
	 * ends right after a loss (a TX thread held off 200 ms by a loaded emulated host). */
	{
		u64 out = QSIZE - ntx, back = 0, t_last = 0;

		tx_drain(out, &back, &t_last);
		GUEST_ASSERT_EQ(back, out);
	}
	GUEST_ASSERT(n > 0);
	sort_u64(lat, n);
	print_secs(secs, sizeof(secs), ns);
	gprintf("BENCH test=rr size=%u transactions=%llu secs=%s tps=%llu lat_min_ns=%llu lat_median_ns=%llu lat_p99_ns=%llu lat_max_ns=%llu lost=%llu bad=%llu stray=%llu bytes=%llu kicks=%llu clock=%s%s\n",
		B.size, n, secs, per_sec(n, ns), tsc_to_ns(lat[0]), tsc_to_ns(lat[n / 2]),
		tsc_to_ns(lat[n * 99 / 100]), tsc_to_ns(lat[n - 1]), lost, bad, stray, bytes,
		B.tx.kicks, clock_source(), B.trace ? " trace=1" : "");
	GUEST_ASSERT_EQ(bad, 0);
}

/* ---- rx ---- */

static void run_rx(void)
{
	u64 frames = 0, bytes = 0, other = 0, t0, t_first = 0, t_last = 0, end, ns;
	char secs[32];

	for (u64 i = 0; i < QSIZE; i++)
		post_rx(i);
	virtq_kick(&B.rx);
	t0 = rdtsc();
	end = t0 + ns_to_tsc(B.secs * 1000000000ull);
	while (rdtsc() < end) {
		void *tok;
		u32 len;
		bool any = false;

		while ((tok = virtq_get(&B.rx, &len))) {
			u64 r = (u64)(uintptr_t)tok - 1;

			if (our_frame(rxslot(r), len)) {
				if (!frames)
					t_first = rdtsc();
				t_last = rdtsc();
				frames++;
				bytes += len - VNET_HDR_LEN;
			} else {
				other++;
			}
			post_rx(r);
			any = true;
		}
		if (any)
			virtq_kick(&B.rx);
		else
			cpu_relax();
	}
	ns = frames > 1 ? tsc_to_ns(t_last - t_first) : 0;
	print_secs(secs, sizeof(secs), ns);
	gprintf("BENCH test=rx frames=%llu bytes=%llu secs=%s pps=%llu mbps=%llu other=%llu kicks=%llu clock=%s\n",
		frames, bytes, secs, per_sec(frames, ns), per_sec(bytes * 8, ns) / 1000000, other,
		B.rx.kicks, clock_source());
}

/* ---- notify ---- */

static void run_notify(void)
{
	u64 n = 0, t0 = rdtsc(), end = t0 + ns_to_tsc(B.secs * 1000000000ull), ns;
	char secs[32];

	/* Check the clock every 64 writes: rdtsc is cheap, but not free next to an ioeventfd. */
	do {
		for (int i = 0; i < 64; i++)
			mmio_write16(B.tx.notify_addr, B.tx.index);
		n += 64;
	} while (rdtsc() < end);
	ns = tsc_to_ns(rdtsc() - t0);
	print_secs(secs, sizeof(secs), ns);
	gprintf("BENCH test=notify notifies=%llu secs=%s rate=%llu ns_per_notify=%llu clock=%s\n",
		n, secs, per_sec(n, ns), n ? ns / n : 0, clock_source());
}

static void user_main(void *arg)
{
	B.txbuf = galloc(QSIZE * BUF_SIZE, 4096);
	B.rxbuf = galloc(QSIZE * BUF_SIZE, 4096);
	if (B.test == BENCH_TEST_TX)
		run_tx();
	else if (B.test == BENCH_TEST_RR)
		run_rr();
	else if (B.test == BENCH_TEST_NOTIFY)
		run_notify();
	else
		run_rx();
}

/* Reset, then features negotiated (B.want): the first set-up and every resets= one. */
static void device_up(void)
{
	virtio_reset(&B.vp);
	if (!virtio_negotiate(&B.vp, B.want))
		GUEST_FAIL("virtio-net: feature negotiation failed");
}

static void setup_device(bool event_idx)
{
	const char *why = virtio_pci_find(&B.vp, 0x1041, "virtio-net");

	if (why)
		GUEST_FAIL("%s (lkvm -n mode=tap,...)", why);
	B.want = 1ull << VIRTIO_NET_F_MAC;
	if (event_idx)
		B.want |= 1ull << VIRTIO_F_RING_EVENT_IDX;
	device_up();
	if (!virtq_setup(&B.vp, &B.rx, RXQ, QSIZE) || !virtq_setup(&B.vp, &B.tx, TXQ, QSIZE))
		GUEST_FAIL("virtio-net: no rx/tx queue pair");
	GUEST_ASSERT_EQ(B.rx.size, QSIZE);
	GUEST_ASSERT_EQ(B.tx.size, QSIZE);
	for (int i = 0; i < 6; i++)
		B.mac[i] = (B.vp.features & (1ull << VIRTIO_NET_F_MAC))
				   ? virtio_cfg_read8(&B.vp, (u32)i)
				   : (u8)(i ? i : 2);
	virtio_driver_ok(&B.vp);
	gprintf("GUEST net-bench: 1af4:1041 at %02x:%02x.%u features=0x%llx mac=%02x:%02x:%02x:%02x:%02x:%02x queues=%u size=%u\n",
		B.vp.pci.bus, B.vp.pci.dev, B.vp.pci.fn, B.vp.features, B.mac[0], B.mac[1],
		B.mac[2], B.mac[3], B.mac[4], B.mac[5], virtio_num_queues(&B.vp), QSIZE);
}

void guest_main(void)
{
	char name[8];

	if (!cmdline_get("bench", name, sizeof(name)))
		GUEST_FAIL("no bench=tx|rr|rx|notify on the command line");
	if (!strcmp(name, "tx"))
		B.test = BENCH_TEST_TX;
	else if (!strcmp(name, "rr"))
		B.test = BENCH_TEST_RR;
	else if (!strcmp(name, "rx"))
		B.test = BENCH_TEST_RX;
	else if (!strcmp(name, "notify"))
		B.test = BENCH_TEST_NOTIFY;
	else
		GUEST_FAIL("unknown bench=%s", name);
	B.size = (u32)cmdline_u64("size", 64);
	B.secs = cmdline_u64("secs", 2);
	B.resets = cmdline_u64("resets", 0);
	if (B.resets > 16 || (B.resets && B.test != BENCH_TEST_TX))
		GUEST_FAIL("resets=%llu: 0-16, and only with bench=tx", B.resets);
	u64 trace = cmdline_u64("trace", 0);
	if (trace > 1 || (trace && B.test != BENCH_TEST_RR))
		GUEST_FAIL("trace=%llu: 0 or 1, and only with bench=rr", trace);
	B.trace = trace;
	if (B.size < BENCH_FRAME_MIN || B.size > BENCH_FRAME_MAX)
		GUEST_FAIL("size=%u outside %u-%u", B.size, BENCH_FRAME_MIN, BENCH_FRAME_MAX);
	if (B.secs < 1 || B.secs > 600)
		GUEST_FAIL("secs=%llu outside 1-600", B.secs);
	clock_init();
	setup_device(cmdline_u64("event_idx", 1));
	gprintf("GUEST net-bench: bench=%s size=%u secs=%llu tsc_hz=%llu clock=%s, entering CPL3\n",
		name, B.size, B.secs, tsc_hz, clock_source());
	guest_run_user(user_main, NULL);
}

/* Guest net-faults: drives lkvm's virtio-net through host faults (the tap deleted under it) and resets in the middle of traffic. */
#include "guest.h"
#include "lkvm/bench-frame.h"

/*
 * Command line (lkvm -p): fault=link|resets|idle|none [resets=N]
 *   link    set up the NIC (VIRTIO_NET_F_STATUS), check the link is up, then poll the ISR
 *           (no MSI-X: a config change sets ISR bit 1) until a config-change interrupt
 *           shows the link down (a status of 0: no other bit with it), sending a frame now
 *           and then; then frames sent must still complete; prints
 *           "net-faults: link down after config interrupt" and ends with status 0.
 *   resets  N times (N >= 10, on the command line: the host script chooses it): reset the
 *           device, set it up again and post frames, without waiting for them: the next
 *           reset lands in the middle of the traffic (the host echoes every frame back).
 *           After 10 and after N resets, with traffic drained, it prints
 *           "net-faults: checkpoint K resets=I" and waits for a byte on the console so the
 *           host can count lkvm's fds, threads and memory at the same point twice. Then
 *           traffic must flow again: 96 frames out, their echoes back; status 0.
 *   idle    set up the NIC, print "net-faults: idle" and spin (the host stops lkvm).
 *   none    set up the NIC, exchange a few frames if a peer echoes, end with status 0.
 * Every check is the guest's own (GUEST_ASSERT, GUEST_FAIL: guest.h); the console's lines are
 * for reading, and the checkpoint and idle lines for the host to wait on.
 * Set-up of PCI at CPL0, the rest at CPL3 (MMIO directly, console through the #GP path).
 */

#define HDR 12
#define FRAME 64
#define BUF 2048
#define RXQ 0
#define TXQ 1
#define QSIZE 256
#define NRX 64
#define NTX 16
#define NET_F_STATUS 16
#define CFG_STATUS 6
#define LINK_UP 1
#define ISR_CONFIG 2

static struct virtio_pci vp;
static struct virtq rxq, txq;
static u8 mac[6];
static u8 *rxbuf, *txbuf;
static u64 rx_frames, tx_frames;

static u64 now_ns(void)
{
	return tsc_to_ns(rdtsc());
}

static void post_rx(int i)
{
	struct vq_buf b = { (u64)(uintptr_t)(rxbuf + (u64)i * BUF), BUF };

	GUEST_ASSERT(virtq_add(&rxq, &b, 0, 1, (void *)(uintptr_t)(i + 1)));
}

/* Reset, negotiate, queues on the same memory as before, RX buffers, DRIVER_OK. */
static void bring_up(bool first)
{
	virtio_reset(&vp);
	GUEST_ASSERT(virtio_negotiate(&vp, 1ull << VIRTIO_NET_F_MAC | 1ull << NET_F_STATUS));
	if (first) {
		GUEST_ASSERT(virtq_setup(&vp, &rxq, RXQ, QSIZE));
		GUEST_ASSERT(virtq_setup(&vp, &txq, TXQ, QSIZE));
	} else {
		virtq_resetup(&rxq);
		virtq_resetup(&txq);
	}
	for (int i = 0; i < NRX; i++)
		post_rx(i);
	virtio_driver_ok(&vp);
	virtq_kick(&rxq);
}

/* Post n frames (n <= NTX, every TX slot free) and kick. */
static void send(int n)
{
	for (int i = 0; i < n; i++) {
		u8 *p = txbuf + (u64)i * BUF, *f = p + HDR;
		struct vq_buf b = { (u64)(uintptr_t)p, HDR + FRAME };

		memset(p, 0, HDR + FRAME);
		memset(f, 0xff, 6);
		memcpy(f + 6, mac, 6);
		f[BENCH_OFF_ETHERTYPE] = BENCH_ETHERTYPE >> 8;
		f[BENCH_OFF_ETHERTYPE + 1] = BENCH_ETHERTYPE & 0xff;
		memcpy(f + 14, "LKVF", 4);
		memcpy(f + 18, &tx_frames, 8);
		tx_frames++;
		GUEST_ASSERT(virtq_add(&txq, &b, 1, 0, (void *)(uintptr_t)(i + 1)));
	}
	virtq_kick(&txq);
}

/* Take what the device used: TX slots back, received frames counted, their buffers re-posted. */
static int reap(void)
{
	int tx = 0;
	void *tok;
	u32 len;
	bool rx = false;

	while (virtq_get(&txq, &len))
		tx++;
	while ((tok = virtq_get(&rxq, &len))) {
		int i = (int)(uintptr_t)tok - 1;
		const u8 *f = rxbuf + (u64)i * BUF + HDR;

		if (len >= HDR + 14 && f[BENCH_OFF_ETHERTYPE] == (BENCH_ETHERTYPE >> 8) &&
		    f[BENCH_OFF_ETHERTYPE + 1] == (BENCH_ETHERTYPE & 0xff))
			rx_frames++;
		post_rx(i);
		rx = true;
	}
	if (rx)
		virtq_kick(&rxq);
	return tx;
}

/* Send n frames in rounds of NTX, each round fully used; wait up to 5 s for want echoes. */
static void traffic(int n, u64 want_rx)
{
	u64 rx0 = rx_frames, end;

	for (int sent = 0; sent < n; sent += NTX) {
		int k = n - sent < NTX ? n - sent : NTX, done = 0;

		send(k);
		end = now_ns() + 5000000000ull;
		while (done < k) {
			done += reap();
			if (now_ns() > end)
				GUEST_FAIL("TX: %d of %d frames used after 5 s", done, k);
			cpu_relax();
		}
	}
	end = now_ns() + 5000000000ull;
	while (rx_frames - rx0 < want_rx && now_ns() < end)
		reap();
	if (rx_frames - rx0 < want_rx)
		GUEST_FAIL("RX: %llu of %llu echoes after 5 s", rx_frames - rx0, want_rx);
}

static u16 link_status(void)
{
	return (u16)(virtio_cfg_read8(&vp, CFG_STATUS) | virtio_cfg_read8(&vp, CFG_STATUS + 1)
								 << 8);
}

static void run_link(void)
{
	u64 next_tx = 0;

	GUEST_ASSERT(vp.features & (1ull << NET_F_STATUS));
	GUEST_ASSERT_EQ(link_status() & LINK_UP, LINK_UP);
	(void)mmio_read8(vp.isr); /* start with nothing pending */
	gprintf("GUEST net-faults: link up, watching\n");
	for (;;) {
		u8 isr = mmio_read8(vp.isr); /* reading acknowledges */

		if (isr & ISR_CONFIG) {
			u16 st = link_status();

			gprintf("GUEST net-faults: config interrupt, status=0x%x\n", st);
			if (!(st & LINK_UP)) {
				GUEST_ASSERT_EQ(st, 0); /* link down, and no announce with it */
				break;
			}
		}
		/* Keep sending: a dead tap must not stall the TX ring. */
		if (now_ns() > next_tx) {
			reap();
			if (txq.num_free == txq.size)
				send(1);
			next_tx = now_ns() + 20000000ull;
		}
		cpu_relax();
	}
	/* TX still completes (frames dropped by the device, not left hanging). */
	traffic(NTX, 0);
	gprintf("GUEST net-faults: link down after config interrupt, tx still completes\n");
}

static void checkpoint(int k, u64 i)
{
	traffic(NTX, 1);
	gprintf("GUEST net-faults: checkpoint %d resets=%llu\n", k, i);
	(void)serial_getc(); /* the host's go */
}

static void run_resets(u64 n)
{
	for (u64 i = 1; i <= n; i++) {
		bring_up(false);
		send(NTX);
		/* Let the device get a varying way into the batch before the next reset. */
		for (u64 s = 0; s < (i % 8) * 200; s++)
			cpu_relax();
		if (i == 10)
			checkpoint(1, i);
		if (i == n)
			checkpoint(2, i);
	}
	bring_up(false);
	traffic(96, 48);
	gprintf("GUEST net-faults: traffic resumed after %llu resets: tx=%llu rx=%llu\n", n,
		tx_frames, rx_frames);
}

static void user_main(void *arg)
{
	char mode[16] = "none";

	cmdline_get("fault", mode, sizeof(mode));
	if (!strcmp(mode, "link")) {
		run_link();
	} else if (!strcmp(mode, "resets")) {
		u64 n = cmdline_u64("resets", 0);

		if (n < 10)
			GUEST_FAIL(
				"fault=resets needs resets=N, N >= 10 (checkpoint 1 comes at 10)");
		run_resets(n);
	} else if (!strcmp(mode, "idle")) {
		gprintf("GUEST net-faults: idle\n");
		for (;;)
			cpu_relax();
	} else {
		u64 end = now_ns() + 1000000000ull;

		send(4);
		while ((txq.num_free != txq.size || !rx_frames) && now_ns() < end)
			reap();
		gprintf("GUEST net-faults: none: tx=%llu rx=%llu\n", tx_frames, rx_frames);
	}
}

void guest_main(void)
{
	const char *why;

	clock_init();
	if ((why = virtio_pci_find(&vp, 0x1041, "virtio-net")))
		GUEST_FAIL("%s", why);
	rxbuf = galloc((u64)NRX * BUF, 4096);
	txbuf = galloc((u64)NTX * BUF, 4096);
	bring_up(true);
	for (int i = 0; i < 6; i++)
		mac[i] = virtio_cfg_read8(&vp, (u32)i);
	gprintf("GUEST net-faults: %02x:%02x:%02x:%02x:%02x:%02x up\n", mac[0], mac[1], mac[2],
		mac[3], mac[4], mac[5]);
	guest_run_user(user_main, NULL);
}

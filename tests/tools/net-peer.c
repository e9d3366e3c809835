/* Test helper: the host side of net-bench on a tap (AF_PACKET): count the guest's frames, echo them back, or send frames to it. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lkvm/bench-frame.h"

/*
 * net-peer MODE IFNAME SECONDS [SIZE]
 *   count  count frames of EtherType BENCH_ETHERTYPE arriving from the guest
 *   echo   send each such frame back with the MAC addresses swapped (source: IFNAME's MAC)
 *   spin-echo  echo, polling the socket without sleeping for BENCH_SPIN_NS after each frame
 *          (the rr floor's peer: a peer that sleeps adds the host's wake-up latency, which a
 *          spinning mode does not pay; docs/benchmarks.md)
 *   blast  send SIZE-byte bench frames (lkvm/bench-frame.h) to the guest as fast as possible
 * Runs until SECONDS pass (counted from the start) or SIGTERM/SIGINT, prints "ready" on
 * stderr once it receives, then one line on stdout:
 *   PEER MODE frames=N bytes=N drops=N (spin-echo says echo)
 * frames/bytes: what it received (count, echo) or sent (blast), bytes counting the Ethernet
 * header; drops: frames the kernel dropped on this socket (PACKET_STATISTICS), or for blast
 * the sends that failed. count reads through a TPACKET_V3 ring (the kernel fills blocks, one
 * wake-up per block) so that counting costs the sender as little as possible; echo takes
 * frames one by one (recvmmsg) to answer each at once.
 */

#define BATCH 64
#define FRAME_MAX 2048

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Opened with protocol 0 (receiving nothing yet) and bound to the EtherType only once the
 * socket is ready: binding a socket that already receives, or adding a ring to one, waits
 * for an RCU grace period each, which on a loaded host has taken seconds.
 */
static int open_socket(const char *ifname, int *ifindex, unsigned char mac[6])
{
	struct ifreq ifr;
	int fd, one = 1, big = 32 << 20;

	fd = socket(AF_PACKET, SOCK_RAW, 0);
	if (fd < 0) {
		perror("net-peer: socket(AF_PACKET)");
		return -1;
	}
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	if (ioctl(fd, SIOCGIFINDEX, &ifr) < 0) {
		fprintf(stderr, "net-peer: %s: %s\n", ifname, strerror(errno));
		close(fd);
		return -1;
	}
	*ifindex = ifr.ifr_ifindex;
	if (ioctl(fd, SIOCGIFHWADDR, &ifr) < 0) {
		perror("net-peer: SIOCGIFHWADDR");
		close(fd);
		return -1;
	}
	memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
	/* Our own transmissions are not input. Best effort: the pkttype check remains. */
	setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one));
	/* A deep queue so a burst from the guest is counted, not dropped (root: FORCE). */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
	return fd;
}

/* Starts receiving EtherType frames on ifindex, then tells the test script so. */
static int bind_socket(int fd, int ifindex, const char *ifname)
{
	struct sockaddr_ll sll = { .sll_family = AF_PACKET,
				   .sll_protocol = htons(BENCH_ETHERTYPE),
				   .sll_ifindex = ifindex };

	if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
		perror("net-peer: bind");
		return -1;
	}
	fprintf(stderr, "net-peer: ready on %s (ifindex %d)\n", ifname, ifindex);
	return 0;
}

static unsigned long long socket_drops(int fd)
{
	struct tpacket_stats st;
	socklen_t len = sizeof(st);

	if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) < 0)
		return 0;
	return st.tp_drops;
}

static int run_rx(int fd, int ifindex, const unsigned char mac[6], double end, int echo, int spin)
{
	static unsigned char bufs[BATCH][FRAME_MAX];
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	struct sockaddr_ll from[BATCH];
	unsigned long long frames = 0, bytes = 0, drops = 0, send_fail = 0;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	double last = now();

	while (!stop && now() < end) {
		int n;

		for (int i = 0; i < BATCH; i++) {
			iov[i] = (struct iovec){ bufs[i], FRAME_MAX };
			msgs[i].msg_hdr = (struct msghdr){ .msg_name = &from[i],
							   .msg_namelen = sizeof(from[i]),
							   .msg_iov = &iov[i],
							   .msg_iovlen = 1 };
		}
		n = recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR) {
				perror("net-peer: recvmmsg");
				return 1;
			}
			/* spin-echo: poll without sleeping for BENCH_SPIN_NS after the last frame */
			if (!spin || now() - last > BENCH_SPIN_NS / 1e9)
				poll(&p, 1, 50);
			continue;
		}
		last = now();
		for (int i = 0; i < n; i++) {
			unsigned char *f = bufs[i];
			unsigned len = msgs[i].msg_len;

			if (from[i].sll_pkttype == PACKET_OUTGOING || len < 14)
				continue;
			frames++;
			bytes += len;
			if (!echo)
				continue;
			memcpy(f, f + 6, 6);
			memcpy(f + 6, mac, 6);
			struct sockaddr_ll to = { .sll_family = AF_PACKET,
						  .sll_ifindex = ifindex,
						  .sll_halen = 6,
						  .sll_protocol = htons(BENCH_ETHERTYPE) };
			memcpy(to.sll_addr, f, 6);
			if (sendto(fd, f, len, 0, (struct sockaddr *)&to, sizeof(to)) !=
			    (ssize_t)len)
				send_fail++;
		}
	}
	drops = socket_drops(fd);
	printf("PEER %s frames=%llu bytes=%llu drops=%llu send_fail=%llu\n",
	       echo ? "echo" : "count", frames, bytes, drops, send_fail);
	return 0;
}

#define RING_BLOCK (1u << 22)
#define RING_BLOCKS 16
#define RING_FRAME 2048
#define RING_TOV_MS 10 /* a partly filled block is handed over after this */

/* Counts one retired block's frames (ours only; outgoing ones are skipped) and gives it back. */
static void count_block(struct tpacket_block_desc *bd, unsigned long long *frames,
			unsigned long long *bytes)
{
	struct tpacket3_hdr *h = (void *)((char *)bd + bd->hdr.bh1.offset_to_first_pkt);

	for (unsigned i = 0; i < bd->hdr.bh1.num_pkts; i++) {
		const struct sockaddr_ll *sll = (void *)((char *)h + TPACKET_ALIGN(sizeof(*h)));

		if (sll->sll_pkttype != PACKET_OUTGOING) {
			(*frames)++;
			*bytes += h->tp_len;
		}
		h = (void *)((char *)h + h->tp_next_offset);
	}
	__atomic_store_n(&bd->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
}

static int run_count(int fd, int ifindex, const char *ifname, double end)
{
	int v = TPACKET_V3;
	struct tpacket_req3 req = { .tp_block_size = RING_BLOCK,
				    .tp_block_nr = RING_BLOCKS,
				    .tp_frame_size = RING_FRAME,
				    .tp_frame_nr = RING_BLOCK / RING_FRAME * RING_BLOCKS,
				    .tp_retire_blk_tov = RING_TOV_MS };
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLERR };
	unsigned long long frames = 0, bytes = 0;
	struct tpacket_stats_v3 st = { 0 };
	socklen_t len = sizeof(st);
	unsigned b = 0;
	double idle_since = 0;
	char *ring;

	if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof(v)) < 0 ||
	    setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) < 0) {
		perror("net-peer: TPACKET_V3 ring");
		return 1;
	}
	ring = mmap(NULL, (size_t)RING_BLOCK * RING_BLOCKS, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		    0);
	if (ring == MAP_FAILED) {
		perror("net-peer: mmap");
		return 1;
	}
	if (bind_socket(fd, ifindex, ifname) < 0)
		return 1;
	/* After the stop request keep draining until no block has come for 10 retire periods:
	 * the last, partly filled block is handed over only when its timer runs out. */
	for (;;) {
		struct tpacket_block_desc *bd = (void *)(ring + (size_t)b * RING_BLOCK);

		if (__atomic_load_n(&bd->hdr.bh1.block_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER) {
			count_block(bd, &frames, &bytes);
			b = (b + 1) % RING_BLOCKS;
			idle_since = 0;
			continue;
		}
		if (stop || now() >= end) {
			if (!idle_since)
				idle_since = now();
			else if (now() - idle_since > RING_TOV_MS * 10 / 1000.0)
				break;
		}
		poll(&p, 1, RING_TOV_MS);
	}
	getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &len);
	printf("PEER count frames=%llu bytes=%llu drops=%u send_fail=0\n", frames, bytes,
	       st.tp_drops);
	return 0;
}

static int run_blast(int fd, int ifindex, const unsigned char mac[6], double end, unsigned size)
{
	unsigned char f[FRAME_MAX];
	unsigned long long frames = 0, fails = 0, seq = 0;
	struct sockaddr_ll to = { .sll_family = AF_PACKET,
				  .sll_ifindex = ifindex,
				  .sll_halen = 6,
				  .sll_protocol = htons(BENCH_ETHERTYPE) };

	memset(f, 0, sizeof(f));
	bench_frame_head(f, mac, BENCH_TEST_RX);
	memset(to.sll_addr, 0xff, 6);
	while (!stop && ((frames & 1023) || now() < end)) {
		seq++;
		memcpy(f + BENCH_OFF_SEQ, &seq, 8);
		if (sendto(fd, f, size, 0, (struct sockaddr *)&to, sizeof(to)) == (ssize_t)size) {
			frames++;
		} else {
			fails++;
			if (errno == ENOBUFS || errno == EAGAIN)
				usleep(100);
		}
	}
	printf("PEER blast frames=%llu bytes=%llu drops=%llu\n", frames, frames * size, fails);
	return 0;
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_signal };
	unsigned char mac[6];
	int fd, ifindex;
	unsigned size;
	double end;

	if (argc < 4 || (strcmp(argv[1], "count") && strcmp(argv[1], "echo") &&
			 strcmp(argv[1], "spin-echo") && strcmp(argv[1], "blast"))) {
		fprintf(stderr,
			"usage: net-peer count|echo|spin-echo|blast IFNAME SECONDS [SIZE]\n");
		return 2;
	}
	size = argc > 4 ? (unsigned)atoi(argv[4]) : 64;
	if (size < BENCH_FRAME_MIN || size > BENCH_FRAME_MAX) {
		fprintf(stderr, "net-peer: SIZE must be %d-%d\n", BENCH_FRAME_MIN, BENCH_FRAME_MAX);
		return 2;
	}
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	setvbuf(stdout, NULL, _IONBF, 0);
	fd = open_socket(argv[2], &ifindex, mac);
	if (fd < 0)
		return 1;
	end = now() + atof(argv[3]);
	if (!strcmp(argv[1], "count"))
		return run_count(fd, ifindex, argv[2], end);
	if (bind_socket(fd, ifindex, argv[2]) < 0)
		return 1;
	if (!strcmp(argv[1], "blast"))
		return run_blast(fd, ifindex, mac, end, size);
	return run_rx(fd, ifindex, mac, end, 1, !strcmp(argv[1], "spin-echo"));
}

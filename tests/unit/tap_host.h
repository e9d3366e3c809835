/* Unit tests on a real tap: the private network namespace, the probe that skips without one, and frames of many flows sent from the host side. */
#ifndef LKVM_TEST_TAP_HOST_H
#define LKVM_TEST_TAP_HOST_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "lkvm/net.h"
#include "lkvm/util.h"

/* linux/if.h and net/if.h clash; this is the one function we need from the latter. */
extern unsigned int if_nametoindex(const char *ifname);

/* Can this process make a tap in a private netns? Probed in a child so the runner
 * itself stays in its namespace. Returns NULL or the reason it cannot. */
static inline const char *tap_unavailable(void)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return "fork failed";
	if (pid == 0) {
		int fd;

		if (unshare(CLONE_NEWNET))
			_exit(1);
		fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
		if (fd < 0)
			_exit(2);
		close(fd);
		_exit(0);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return "probe child died";
	switch (WEXITSTATUS(status)) {
	case 0:
		return NULL;
	case 1:
		return "unshare(CLONE_NEWNET) not permitted";
	case 2:
		return "/dev/net/tun cannot be opened";
	default:
		return "probe failed";
	}
}

/* The test (Check forks one process per test) gets a network namespace of its own: its
 * taps disappear with it. */
static inline void enter_netns(void)
{
	ck_assert_msg(unshare(CLONE_NEWNET) == 0, "unshare(CLONE_NEWNET): %s", strerror(errno));
}

/* An AF_PACKET socket that sends on tap `ifname` from the host side: what it sends goes
 * through the tap's transmit path, where tun picks the queue by the frame's flow hash. */
static inline int tap_host_socket(const char *ifname)
{
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL) };
	int ps = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));

	ck_assert_int_ge(ps, 0);
	sll.sll_ifindex = (int)if_nametoindex(ifname);
	ck_assert_int_gt(sll.sll_ifindex, 0);
	ck_assert_int_eq(bind(ps, (struct sockaddr *)&sll, sizeof(sll)), 0);
	return ps;
}

#define TAP_FLOW_FRAME 60 /* Ethernet + IPv4 + UDP + 18 bytes */

/* Send n IPv4/UDP frames to dst_mac, flow i from UDP source port 10000 + i: n flows, which
 * tun spreads over its attached queues (no flow of the guest's has pinned them). */
static inline void tap_send_flows(int ps, const u8 dst_mac[6], int n)
{
	static const u8 src_mac[6] = { 0x02, 0x00, 0x00, 0x00, 0x00, 0x01 };

	for (int i = 0; i < n; i++) {
		u8 f[TAP_FLOW_FRAME] = { 0 };
		u8 *ip = f + 14, *udp = ip + 20;

		memcpy(f, dst_mac, 6);
		memcpy(f + 6, src_mac, 6);
		f[12] = 0x08; /* IPv4 */
		ip[0] = 0x45;
		ip[3] = TAP_FLOW_FRAME - 14;
		ip[8] = 64;
		ip[9] = 17; /* UDP */
		memcpy(ip + 12, "\x0a\x0b\x0c\x01\x0a\x0b\x0c\x02", 8);
		udp[0] = (u8)((10000 + i) >> 8);
		udp[1] = (u8)(10000 + i);
		udp[2] = 0x4e; /* port 20000 */
		udp[3] = 0x20;
		udp[5] = TAP_FLOW_FRAME - 34;
		ck_assert_int_eq(send(ps, f, sizeof(f), 0), (ssize_t)sizeof(f));
	}
}

/* Read what tap queue be holds now; returns how many were tap_send_flows's frames (the host's
 * own frames may come too). */
static inline int tap_take_flows(struct net_backend *be)
{
	u8 buf[12 + 2048];
	struct iovec iov = { buf, sizeof(buf) };
	ssize_t r;
	int n = 0;

	while ((r = be->ops->recv(be, &iov, 1)) > 0)
		n += r == 12 + TAP_FLOW_FRAME && buf[12 + 12] == 0x08 && buf[12 + 23] == 17 &&
		     buf[12 + 36] == 0x4e && buf[12 + 37] == 0x20;
	ck_assert_int_eq(r, -EAGAIN);
	return n;
}

#endif

/* Unit tests of net/: -n parsing, offload mapping, the fake backend, a tap in a private netns. */
#include <arpa/inet.h>
#include <cap-ng.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>
#include <seccomp.h>

#include "capture.h"
#include "check_main.h"
#include "tap_host.h"
#include "wait.h"
#include "lkvm/net.h"

/* ---- -n parsing ---- */

START_TEST(test_opts_defaults)
{
	struct net_opts o;
	char err[128];
	static const u8 def[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };

	ck_assert_int_eq(net_parse_opts("mode=tap", &o, err, sizeof(err)), 0);
	ck_assert_str_eq(err, "");
	ck_assert_int_eq(o.mode, NET_MODE_TAP);
	ck_assert(o.ioeventfd);
	ck_assert_int_eq(o.queue_pairs, 1);
	ck_assert(!o.mac_set);
	ck_assert_mem_eq(o.guest_mac, def, 6);
	ck_assert_str_eq(o.tapif, "");
	ck_assert_str_eq(o.host_ip, "");
	ck_assert_str_eq(o.script, "");
	ck_assert_int_eq(o.tx_mode, NET_TX_KICK);
	ck_assert_uint_eq(o.tx_timer_us, NET_TX_TIMER_US_DEFAULT);
	ck_assert_uint_eq(o.poll_us, NET_POLL_US_DEFAULT);
	ck_assert_int_eq(o.vhost, NET_VHOST_OFF);
	ck_assert(!o.trace);
	ck_assert_int_eq(net_parse_opts("trace=on,batch=on", &o, err, sizeof(err)), 0);
	ck_assert(o.trace);
	ck_assert_int_eq(net_parse_opts("trace=off", &o, err, sizeof(err)), 0);
	ck_assert(!o.trace);
	/* vhost: on, off, auto; auto may fall back to lkvm's path, whose tuning then applies. */
	ck_assert_int_eq(net_parse_opts("mode=tap,vhost=on,queues=2", &o, err, sizeof(err)), 0);
	ck_assert_int_eq(o.vhost, NET_VHOST_ON);
	ck_assert_int_eq(net_parse_opts("vhost=off,tx=poll", &o, err, sizeof(err)), 0);
	ck_assert_int_eq(o.vhost, NET_VHOST_OFF);
	ck_assert_int_eq(net_parse_opts("vhost=auto,tx=poll,batch=on", &o, err, sizeof(err)), 0);
	ck_assert_int_eq(o.vhost, NET_VHOST_AUTO);
	ck_assert_int_eq(net_parse_opts("mode=user,vhost=off", &o, err, sizeof(err)), 0);

	ck_assert_int_eq(net_parse_opts("mode=none", &o, err, sizeof(err)), 0);
	ck_assert_int_eq(o.mode, NET_MODE_NONE);
	ck_assert_int_eq(net_parse_opts("mode=user", &o, err, sizeof(err)), 0);
	ck_assert_int_eq(o.mode, NET_MODE_USER);
	ck_assert_str_eq(o.socket, "");
	ck_assert_int_eq(o.queue_pairs, 1);
	ck_assert_int_eq(net_parse_opts("mode=user,socket=/tmp/p.sock,queues=1,tx=poll", &o, err,
					sizeof(err)),
			 0);
	ck_assert_str_eq(o.socket, "/tmp/p.sock");
	/* Any single key alone is enough; mode defaults to tap. */
	ck_assert_int_eq(net_parse_opts("tapif=tap7", &o, err, sizeof(err)), 0);
	ck_assert_int_eq(o.mode, NET_MODE_TAP);
	ck_assert_str_eq(o.tapif, "tap7");
}
END_TEST

START_TEST(test_opts_all_keys)
{
	struct net_opts o;
	char err[128];
	static const u8 mac[6] = { 0x02, 0xab, 0xcd, 0x00, 0x00, 0x01 };

	ck_assert_int_eq(net_parse_opts("mode=tap,tapif=Tap-0.x_123456,guest_mac=02:AB:cd:00:00:01,"
					"host_ip=10.0.0.1/30,script=/etc/lkvm-ifup,ioeventfd=off,"
					"queues=8",
					&o, err, sizeof(err)),
			 0);
	ck_assert_int_eq(o.mode, NET_MODE_TAP);
	ck_assert_str_eq(o.tapif, "Tap-0.x_123456");
	ck_assert(o.mac_set);
	ck_assert_mem_eq(o.guest_mac, mac, 6);
	ck_assert_str_eq(o.host_ip, "10.0.0.1/30");
	ck_assert_str_eq(o.script, "/etc/lkvm-ifup");
	ck_assert(!o.ioeventfd);
	ck_assert_int_eq(o.queue_pairs, NET_MAX_QUEUE_PAIRS);

	/* Order does not matter; a plain address means /24 and is stored normalised. */
	ck_assert_int_eq(net_parse_opts("queues=3,host_ip=192.168.7.1,ioeventfd=on,script=none", &o,
					err, sizeof(err)),
			 0);
	ck_assert_int_eq(o.queue_pairs, 3);
	ck_assert_str_eq(o.host_ip, "192.168.7.1/24");
	ck_assert_str_eq(o.script, "none");
	ck_assert(o.ioeventfd);
	ck_assert_int_eq(net_parse_opts("host_ip=0.0.0.0/0", &o, err, sizeof(err)), 0);
	ck_assert_str_eq(o.host_ip, "0.0.0.0/0");
	ck_assert_int_eq(net_parse_opts("host_ip=255.255.255.255/32", &o, err, sizeof(err)), 0);
	ck_assert_str_eq(o.host_ip, "255.255.255.255/32");
	/* A 15-character name is the longest IFNAMSIZ allows. */
	ck_assert_int_eq(net_parse_opts("tapif=abcdefghijklmno", &o, err, sizeof(err)), 0);
	ck_assert_str_eq(o.tapif, "abcdefghijklmno");
}
END_TEST

static const struct {
	const char *arg;
	const char *want; /* must appear in the message */
} bad_opts[] = {
	{ "", "empty" },
	{ "foo=1", "unknown key 'foo'" },
	{ "mode=tap,foo=bar", "unknown key 'foo'" },
	{ "=tap", "unknown key ''" },
	{ "Mode=tap", "unknown key 'Mode'" },
	{ "mode", "'mode'" },
	{ "mode=tap,queues", "'queues'" },
	{ "tapif=", "empty value for 'tapif'" },
	{ "mode=", "empty value for 'mode'" },
	{ "mode=tap,mode=none", "duplicate key 'mode'" },
	{ "queues=1,tapif=a,queues=1", "duplicate key 'queues'" },
	{ "mode=tap,", "empty item" },
	{ "vhost=maybe", "vhost" },
	{ "mode=user,vhost=on", "-n vhost=on: only with mode=tap" },
	{ "mode=user,vhost=auto", "-n vhost=auto: only with mode=tap" },
	{ "vhost=on,tx=poll", "-n tx: tunes lkvm's data path, which vhost=on does not use" },
	{ "vhost=on,batch=on", "-n batch: tunes lkvm's data path" },
	{ "vhost=on,trace=on", "-n trace: tunes lkvm's data path" },
	{ "trace=yes", "-n trace" },
	{ "vhost=on,tx=timer,tx_timer_us=10", "-n tx: tunes lkvm's data path" },
	{ ",mode=tap", "empty item" },
	{ "mode=tap,,queues=2", "empty item" },
	{ ",", "empty item" },
	{ "mode=user,queues=2", "queues=2: mode=user has one queue pair" },
	{ "mode=user,tapif=tap0", "tapif: only with mode=tap" },
	{ "mode=user,host_ip=10.0.0.1", "host_ip: only with mode=tap" },
	{ "mode=user,script=none", "script: only with mode=tap" },
	{ "socket=/run/passt.sock", "socket: only with mode=user" },
	{ "mode=none,socket=/x", "socket: only with mode=user" },
	{ "mode=user,socket=", "empty value for 'socket'" },
	{ "mode=user,socket=/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	  "socket: want a path of 1 to 107 bytes" },
	/* fwd=: the user's own input, parsed strictly; passt never sees a spec that did not. */
	{ "fwd=tcp:8080:80", "fwd: only with mode=user" },
	{ "mode=none,fwd=tcp:8080:80", "fwd: only with mode=user" },
	{ "mode=user,socket=/x,fwd=tcp:8080:80", "fwd: only with the passt lkvm starts" },
	{ "mode=user,fwd=", "empty value for 'fwd'" },
	{ "mode=user,fwd=tcp", "fwd 'tcp': want tcp|udp:[ADDR:]HOSTPORT:GUESTPORT" },
	{ "mode=user,fwd=tcp:80", "fwd 'tcp:80'" },
	{ "mode=user,fwd=sctp:1:2", "fwd 'sctp:1:2'" },
	{ "mode=user,fwd=TCP:1:2", "fwd 'TCP:1:2'" },
	{ "mode=user,fwd=tcpx:1:2", "fwd 'tcpx:1:2'" },
	{ "mode=user,fwd=tcp:0:80", "fwd 'tcp:0:80'" },
	{ "mode=user,fwd=tcp:80:0", "fwd 'tcp:80:0'" },
	{ "mode=user,fwd=tcp:65536:80", "fwd 'tcp:65536:80'" },
	{ "mode=user,fwd=tcp:80:99999999999999999999", "fwd 'tcp:80:99999999999999999999'" },
	{ "mode=user,fwd=tcp:-1:80", "fwd 'tcp:-1:80'" },
	{ "mode=user,fwd=tcp:+80:80", "fwd 'tcp:+80:80'" },
	{ "mode=user,fwd=tcp: 80:80", "fwd 'tcp: 80:80'" },
	{ "mode=user,fwd=tcp:0x50:80", "fwd 'tcp:0x50:80'" },
	{ "mode=user,fwd=tcp:80:", "fwd 'tcp:80:'" },
	{ "mode=user,fwd=tcp::80:80", "fwd 'tcp::80:80'" },
	{ "mode=user,fwd=tcp:1.2.3:80:80", "fwd 'tcp:1.2.3:80:80'" },
	{ "mode=user,fwd=tcp:1.2.3.256:80:80", "fwd 'tcp:1.2.3.256:80:80'" },
	{ "mode=user,fwd=tcp:localhost:80:80", "fwd 'tcp:localhost:80:80'" },
	{ "mode=user,fwd=tcp:1.2.3.4/8:80:80", "fwd 'tcp:1.2.3.4/8:80:80'" },
	{ "mode=user,fwd=tcp:::1:80:80", "fwd 'tcp:::1:80:80'" },
	{ "mode=user,fwd=tcp:1.2.3.4:80:80:1", "fwd 'tcp:1.2.3.4:80:80:1'" },
	{ "mode=user,fwd=tcp:80:80%eth0", "fwd 'tcp:80:80%eth0'" },
	{ "mode=user,fwd=tcp:80-90:80", "fwd 'tcp:80-90:80'" },
	{ "mode=user,fwd=tcp:~80:80", "fwd 'tcp:~80:80'" },
	{ "mode=user,fwd=tcp:8080:80,fwd=tcp:127.0.0.1:8080:22",
	  "fwd 'tcp:127.0.0.1:8080:22': that tcp host port is forwarded twice" },
	{ "mode=user,fwd=tcp:8080:80,fwd=tcp:8080:81", "forwarded twice" },
	{ "mode=User", "mode 'User': want tap, user or none" },
	{ "mode=bridge", "mode 'bridge'" },
	{ "mode=TAP", "mode 'TAP'" },
	{ "tapif=abcdefghijklmnop", "tapif 'abcdefghijklmnop'" },
	{ "tapif=a b", "tapif 'a b'" },
	{ "tapif=a/b", "tapif 'a/b'" },
	{ "tapif=tap%d", "tapif 'tap%d'" },
	{ "guest_mac=zz", "guest_mac 'zz'" },
	{ "guest_mac=01:00:00:00:00:01", "multicast" },
	{ "guest_mac=ff:ff:ff:ff:ff:ff", "multicast" },
	{ "guest_mac=00:00:00:00:00:00", "all-zero" },
	{ "guest_mac=52:54:00:12:34", "guest_mac '52:54:00:12:34'" },
	{ "guest_mac=52:54:00:12:34:567", "guest_mac '52:54:00:12:34:567'" },
	{ "guest_mac=52-54-00-12-34-56", "guest_mac '52-54-00-12-34-56'" },
	{ "guest_mac=5:554:00:12:34:56", "guest_mac '5:554:00:12:34:56'" },
	{ "guest_mac=52:54:00:12:34:5g", "guest_mac '52:54:00:12:34:5g'" },
	{ "host_ip=10.0.0.1/33", "host_ip '10.0.0.1/33'" },
	{ "host_ip=10.0.0/24", "host_ip '10.0.0/24'" },
	{ "host_ip=10.0.0.1/", "host_ip '10.0.0.1/'" },
	{ "host_ip=10.0.0.1/+1", "host_ip '10.0.0.1/+1'" },
	{ "host_ip=10.0.0.1/024", "host_ip '10.0.0.1/024'" },
	{ "host_ip=10.0.0.256", "host_ip '10.0.0.256'" },
	{ "host_ip=::1", "host_ip '::1'" },
	{ "host_ip=/24", "host_ip '/24'" },
	{ "ioeventfd=yes", "ioeventfd 'yes'" },
	{ "queues=0", "queues '0'" },
	{ "queues=9", "queues '9'" },
	{ "queues=1x", "queues '1x'" },
	{ "queues=-1", "queues '-1'" },
	{ "queues= 2", "queues ' 2'" },
	{ "queues=99999999999999999999", "queues '99999999999999999999'" },
	{ "tx=fast", "tx 'fast': want kick, timer or poll" },
	{ "tx=", "empty value for 'tx'" },
	{ "tx=Poll", "tx 'Poll'" },
	{ "tx=poll,tx=kick", "duplicate key 'tx'" },
	{ "tx_timer_us=100", "tx_timer_us: only with tx=timer (tx is kick)" },
	{ "tx=poll,tx_timer_us=100", "tx_timer_us: only with tx=timer (tx is poll)" },
	{ "poll_us=10", "poll_us: only with tx=poll (tx is kick)" },
	{ "poll_us=10,tx=timer", "poll_us: only with tx=poll (tx is timer)" },
	{ "tx=timer,tx_timer_us=0", "tx_timer_us '0': want microseconds from 1 to 10000" },
	{ "tx=timer,tx_timer_us=10001", "tx_timer_us '10001'" },
	{ "tx=timer,tx_timer_us=-5", "tx_timer_us '-5'" },
	{ "tx=poll,poll_us=0", "poll_us '0': want microseconds from 1 to 10000" },
	{ "tx=poll,poll_us=1ms", "poll_us '1ms'" },
	{ "tx=poll,poll_us=99999999999999999999", "poll_us '99999999999999999999'" },
};

START_TEST(test_opts_tx_modes)
{
	struct net_opts o;
	char err[128];

	ck_assert_int_eq(net_parse_opts("tx=kick", &o, err, sizeof(err)), 0);
	ck_assert_int_eq(o.tx_mode, NET_TX_KICK);
	ck_assert_int_eq(net_parse_opts("tx=timer", &o, err, sizeof(err)), 0);
	ck_assert_int_eq(o.tx_mode, NET_TX_TIMER);
	ck_assert_uint_eq(o.tx_timer_us, NET_TX_TIMER_US_DEFAULT);
	ck_assert_int_eq(net_parse_opts("tx_timer_us=1,tx=timer", &o, err, sizeof(err)), 0);
	ck_assert_uint_eq(o.tx_timer_us, 1);
	ck_assert_int_eq(
		net_parse_opts("mode=tap,tx=timer,tx_timer_us=10000", &o, err, sizeof(err)), 0);
	ck_assert_uint_eq(o.tx_timer_us, 10000);
	ck_assert_int_eq(net_parse_opts("tx=poll", &o, err, sizeof(err)), 0);
	ck_assert_int_eq(o.tx_mode, NET_TX_POLL);
	ck_assert_uint_eq(o.poll_us, NET_POLL_US_DEFAULT);
	ck_assert_int_eq(net_parse_opts("poll_us=200,tx=poll,ioeventfd=off", &o, err, sizeof(err)),
			 0);
	ck_assert_uint_eq(o.poll_us, 200);
	ck_assert(!o.ioeventfd);
	ck_assert_str_eq(net_tx_mode_name(NET_TX_POLL), "poll");
	ck_assert_str_eq(net_tx_mode_name(NET_TX_NR), "?");
}
END_TEST

START_TEST(test_opts_bad)
{
	struct net_opts o;
	char err[160];

	err[0] = 'x';
	ck_assert_msg(net_parse_opts(bad_opts[_i].arg, &o, err, sizeof(err)) == -EINVAL,
		      "'%s' accepted", bad_opts[_i].arg);
	ck_assert_msg(strstr(err, bad_opts[_i].want), "'%s': message '%s' lacks '%s'",
		      bad_opts[_i].arg, err, bad_opts[_i].want);
	ck_assert_msg(!strncmp(err, "-n", 2), "'%s' -> '%s'", bad_opts[_i].arg, err);
	ck_assert_ptr_null(strchr(err, '\n'));
}
END_TEST

START_TEST(test_opts_err_buffers)
{
	struct net_opts o;
	char tiny[8];

	/* No buffer, or a tiny one: still -EINVAL, never an overflow. */
	ck_assert_int_eq(net_parse_opts("foo=bar", &o, NULL, 0), -EINVAL);
	ck_assert_int_eq(net_parse_opts("foo=bar", &o, tiny, sizeof(tiny)), -EINVAL);
	ck_assert_uint_eq(strlen(tiny), sizeof(tiny) - 1);
	ck_assert_int_eq(net_parse_opts(NULL, &o, tiny, sizeof(tiny)), -EINVAL);
}
END_TEST

START_TEST(test_parse_mac)
{
	u8 mac[6] = { 0 };
	static const u8 want[6] = { 0xaa, 0xBB, 0x0c, 0xd0, 0x00, 0xff };
	static const u8 keep[6] = { 1, 2, 3, 4, 5, 6 };

	ck_assert_int_eq(net_parse_mac("aa:BB:0c:d0:00:fF", mac), 0);
	ck_assert_mem_eq(mac, want, 6);
	/* Syntax only: multicast and zero parse (the option parser refuses them). */
	ck_assert_int_eq(net_parse_mac("01:00:5e:00:00:01", mac), 0);
	ck_assert_int_eq(net_parse_mac("00:00:00:00:00:00", mac), 0);

	memcpy(mac, keep, 6);
	ck_assert_int_eq(net_parse_mac("", mac), -EINVAL);
	ck_assert_int_eq(net_parse_mac("aa:bb:cc:dd:ee", mac), -EINVAL);
	ck_assert_int_eq(net_parse_mac("aa:bb:cc:dd:ee:ff:", mac), -EINVAL);
	ck_assert_int_eq(net_parse_mac("aa:bb:cc:dd:ee:f", mac), -EINVAL);
	ck_assert_int_eq(net_parse_mac("aabb:cc:dd:ee:ff:", mac), -EINVAL);
	ck_assert_int_eq(net_parse_mac("aa.bb.cc.dd.ee.ff", mac), -EINVAL);
	ck_assert_int_eq(net_parse_mac(" a:bb:cc:dd:ee:ff", mac), -EINVAL);
	ck_assert_int_eq(net_parse_mac("+a:bb:cc:dd:ee:ff", mac), -EINVAL);
	ck_assert_int_eq(net_parse_mac("aa:bb:cc:dd:ee:fg", mac), -EINVAL);
	/* A failed parse leaves the output alone. */
	ck_assert_mem_eq(mac, keep, 6);
}
END_TEST

START_TEST(test_parse_host_ip)
{
	u32 a;
	int p;

	ck_assert_int_eq(net_parse_host_ip("10.1.2.3/8", &a, &p), 0);
	ck_assert_uint_eq(a, htonl(0x0a010203));
	ck_assert_int_eq(p, 8);
	ck_assert_int_eq(net_parse_host_ip("10.1.2.3", &a, &p), 0);
	ck_assert_int_eq(p, 24);
	ck_assert_int_eq(net_parse_host_ip("10.1.2.3/32", &a, &p), 0);
	ck_assert_int_eq(p, 32);
	ck_assert_int_eq(net_parse_host_ip("10.1.2.3/33", &a, &p), -EINVAL);
	ck_assert_int_eq(net_parse_host_ip("10.1.2.3/a", &a, &p), -EINVAL);
	ck_assert_int_eq(net_parse_host_ip("10.1.2.3/1/2", &a, &p), -EINVAL);
	ck_assert_int_eq(net_parse_host_ip("010.1.2.3", &a, &p), -EINVAL);
	ck_assert_int_eq(net_parse_host_ip("255.255.255.255.255", &a, &p), -EINVAL);
}
END_TEST

/* ---- offload mapping ---- */

#define F(x) (1ULL << VIRTIO_NET_F_##x)

static const struct {
	u64 features;
	struct net_offloads want;
} offload_cases[] = {
	{ 0, { 0 } },
	{ F(GUEST_CSUM), { .csum = true } },
	/* Segmentation without GUEST_CSUM is meaningless: nothing. */
	{ F(GUEST_TSO4) | F(GUEST_TSO6) | F(GUEST_UFO) | F(GUEST_ECN), { 0 } },
	{ F(GUEST_CSUM) | F(GUEST_TSO4), { .csum = true, .tso4 = true } },
	{ F(GUEST_CSUM) | F(GUEST_TSO6) | F(GUEST_ECN),
	  { .csum = true, .tso6 = true, .ecn = true } },
	/* ECN needs TSO4 or TSO6. */
	{ F(GUEST_CSUM) | F(GUEST_ECN) | F(GUEST_UFO), { .csum = true, .ufo = true } },
	{ F(GUEST_CSUM) | F(GUEST_TSO4) | F(GUEST_TSO6) | F(GUEST_ECN) | F(GUEST_UFO),
	  { true, true, true, true, true } },
	/* Host-side and unrelated bits do not leak in. */
	{ F(CSUM) | F(HOST_TSO4) | F(HOST_TSO6) | F(HOST_UFO) | F(MRG_RXBUF) | (1ULL << 32),
	  { 0 } },
};

START_TEST(test_offloads_from_features)
{
	struct net_offloads off;

	memset(&off, 0xff, sizeof(off));
	net_offloads_from_features(offload_cases[_i].features, &off);
	ck_assert_int_eq(off.csum, offload_cases[_i].want.csum);
	ck_assert_int_eq(off.tso4, offload_cases[_i].want.tso4);
	ck_assert_int_eq(off.tso6, offload_cases[_i].want.tso6);
	ck_assert_int_eq(off.ecn, offload_cases[_i].want.ecn);
	ck_assert_int_eq(off.ufo, offload_cases[_i].want.ufo);
}
END_TEST

/* ---- fake backend ---- */

static bool fd_ready(int fd, short ev)
{
	struct pollfd p = { .fd = fd, .events = ev };

	ck_assert_int_ge(poll(&p, 1, 0), 0);
	return p.revents & ev;
}

static void fill(u8 *buf, size_t len, u8 seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (u8)(seed + i * 7);
}

START_TEST(test_fake_inject_recv)
{
	struct net_backend *be = net_fake_create();
	u8 frame[100], hdr[12], a[5], b[200];
	struct iovec iov2[2] = { { a, sizeof(a) }, { b, sizeof(b) } };
	static const u8 zero[12];

	ck_assert_ptr_nonnull(be);
	ck_assert_ptr_nonnull(be->ops->peek_len);
	ck_assert(!fd_ready(be->rx_fd, POLLIN));
	ck_assert(fd_ready(be->tx_fd, POLLOUT));
	ck_assert_int_eq(be->ops->peek_len(be), 0);
	ck_assert_int_eq(be->ops->recv(be, iov2, 2), -EAGAIN);

	fill(frame, sizeof(frame), 1);
	ck_assert_int_eq(net_fake_inject(be, frame, sizeof(frame)), 0);
	ck_assert(fd_ready(be->rx_fd, POLLIN));
	ck_assert_int_eq(be->ops->peek_len(be), 12 + 100);

	/* Header split across two iovs, the frame across the next two. */
	memset(hdr, 0xee, sizeof(hdr));
	memset(a, 0xee, sizeof(a));
	memset(b, 0xee, sizeof(b));
	struct iovec iov4[4] = { { hdr, 7 }, { hdr + 7, 5 }, { a, sizeof(a) }, { b, sizeof(b) } };
	ck_assert_int_eq(be->ops->recv(be, iov4, 4), 112);
	ck_assert_mem_eq(hdr, zero, 12);
	ck_assert_mem_eq(a, frame, 5);
	ck_assert_mem_eq(b, frame + 5, 95);
	ck_assert_uint_eq(b[95], 0xee);
	ck_assert(!fd_ready(be->rx_fd, POLLIN));
	ck_assert_int_eq(be->ops->peek_len(be), 0);
	ck_assert_int_eq(be->ops->recv(be, iov4, 4), -EAGAIN);

	/* An iov too short for the header is refused and the frame stays queued. */
	ck_assert_int_eq(net_fake_inject(be, frame, 20), 0);
	ck_assert_int_eq(be->ops->recv(be, iov2, 1), -EINVAL);
	ck_assert(fd_ready(be->rx_fd, POLLIN));
	ck_assert_int_eq(be->ops->recv(be, iov2, 2), 12 + 20);
	ck_assert_mem_eq(a, zero, 5);
	ck_assert_mem_eq(b, zero + 5, 7);
	ck_assert_mem_eq(b + 7, frame, 20);
	be->ops->close(be);
}
END_TEST

START_TEST(test_fake_truncate_and_order)
{
	struct net_backend *be = net_fake_create();
	u8 f1[100], f2[30], f3[64], buf[12 + 40];
	struct iovec iov = { buf, sizeof(buf) };

	fill(f1, sizeof(f1), 1);
	fill(f2, sizeof(f2), 2);
	fill(f3, sizeof(f3), 3);
	ck_assert_int_eq(net_fake_inject(be, f1, sizeof(f1)), 0);
	ck_assert_int_eq(net_fake_inject(be, f2, sizeof(f2)), 0);
	ck_assert_int_eq(net_fake_inject(be, f3, sizeof(f3)), 0);

	/* Longer than the iov: truncated, the truncated length returned, frame consumed. */
	ck_assert_int_eq(be->ops->recv(be, &iov, 1), (ssize_t)sizeof(buf));
	ck_assert_mem_eq(buf + 12, f1, 40);
	ck_assert(fd_ready(be->rx_fd, POLLIN));
	ck_assert_int_eq(be->ops->peek_len(be), 12 + 30);
	ck_assert_int_eq(be->ops->recv(be, &iov, 1), 12 + 30);
	ck_assert_mem_eq(buf + 12, f2, 30);
	ck_assert(fd_ready(be->rx_fd, POLLIN));
	ck_assert_int_eq(be->ops->recv(be, &iov, 1), (ssize_t)sizeof(buf));
	ck_assert_mem_eq(buf + 12, f3, 40);
	ck_assert(!fd_ready(be->rx_fd, POLLIN));
	ck_assert_int_eq(be->ops->recv(be, &iov, 1), -EAGAIN);

	ck_assert_int_eq(net_fake_inject(be, f1, 0), -EINVAL);
	{
		static u8 big[65551];

		ck_assert_int_eq(net_fake_inject(be, big, 65551), -EMSGSIZE);
		ck_assert_int_eq(net_fake_inject(be, big, 65550), 0);
	}
	/* Closing with frames still queued frees them (ASan checks). */
	be->ops->close(be);
}
END_TEST

START_TEST(test_fake_send_take)
{
	struct net_backend *be = net_fake_create();
	u8 hdr[12], p1[3], p2[61], out[200], want[76];
	struct iovec iov[3] = { { hdr, 12 }, { p1, 3 }, { p2, 61 } };

	fill(hdr, 12, 9);
	fill(p1, 3, 10);
	fill(p2, 61, 11);
	memcpy(want, hdr, 12);
	memcpy(want + 12, p1, 3);
	memcpy(want + 15, p2, 61);

	ck_assert_int_eq(net_fake_take(be, out, sizeof(out)), 0);
	ck_assert_int_eq(be->ops->send(be, iov, 3), 76);
	/* The device's buffers are reusable once send returns: the fake copied them. */
	memset(p2, 0, sizeof(p2));
	ck_assert_int_eq(be->ops->send(be, iov, 1), 12);
	ck_assert_int_eq(net_fake_take(be, out, 75), -EMSGSIZE);
	ck_assert_int_eq(net_fake_take(be, out, sizeof(out)), 76);
	ck_assert_mem_eq(out, want, 76);
	ck_assert_int_eq(net_fake_take(be, out, 12), 12);
	ck_assert_mem_eq(out, hdr, 12);
	ck_assert_int_eq(net_fake_take(be, out, sizeof(out)), 0);

	/* Shorter than a header: refused. */
	iov[0].iov_len = 11;
	ck_assert_int_eq(be->ops->send(be, iov, 1), -EINVAL);
	ck_assert_int_eq(net_fake_take(be, out, sizeof(out)), 0);
	be->ops->close(be);
}
END_TEST

START_TEST(test_fake_full_queues)
{
	struct net_backend *be = net_fake_create();
	u8 frame[60], out[100];
	struct iovec iov = { frame, sizeof(frame) };
	int i;

	for (i = 0; i < 256; i++) {
		frame[0] = (u8)i;
		ck_assert_int_eq(net_fake_inject(be, frame, sizeof(frame)), 0);
		ck_assert_int_eq(be->ops->send(be, &iov, 1), 60);
	}
	ck_assert_int_eq(net_fake_inject(be, frame, sizeof(frame)), -ENOBUFS);
	ck_assert_int_eq(be->ops->send(be, &iov, 1), -ENOBUFS);
	/* Full does not mean "not writable": the fake drops rather than asking to wait. */
	ck_assert(fd_ready(be->tx_fd, POLLOUT));

	for (i = 0; i < 256; i++) {
		struct iovec r = { out, sizeof(out) };

		ck_assert(fd_ready(be->rx_fd, POLLIN));
		ck_assert_int_eq(be->ops->recv(be, &r, 1), 72);
		ck_assert_uint_eq(out[12], (u8)i);
		ck_assert_int_eq(net_fake_take(be, out, sizeof(out)), 60);
		ck_assert_uint_eq(out[0], (u8)i);
	}
	ck_assert(!fd_ready(be->rx_fd, POLLIN));
	ck_assert_int_eq(net_fake_inject(be, frame, sizeof(frame)), 0);
	be->ops->close(be);
}
END_TEST

START_TEST(test_fake_offloads)
{
	struct net_backend *be = net_fake_create();
	struct net_offloads off = { .csum = true, .tso6 = true }, got;

	net_fake_offloads(be, &got);
	ck_assert(!got.csum && !got.tso4 && !got.tso6 && !got.ecn && !got.ufo);
	ck_assert_int_eq(be->ops->set_offloads(be, &off), 0);
	net_fake_offloads(be, &got);
	ck_assert(got.csum && got.tso6 && !got.tso4);
	be->ops->close(be);
}
END_TEST

#define NR_THREADED 20000

static void *inject_thread(void *arg)
{
	struct net_backend *be = arg;

	for (u32 i = 0; i < NR_THREADED; i++) {
		u8 frame[64];
		int ret;

		fill(frame, sizeof(frame), (u8)i);
		memcpy(frame, &i, sizeof(i));
		while ((ret = net_fake_inject(be, frame, 4 + i % 60)) == -ENOBUFS)
			sched_yield();
		if (ret)
			return (void *)1;
	}
	return NULL;
}

/* A producer thread against a consumer waiting on rx_fd: every frame, in order, once. */
START_TEST(test_fake_threads)
{
	struct net_backend *be = net_fake_create();
	pthread_t t;
	void *res;
	u32 next = 0;

	ck_assert_int_eq(pthread_create(&t, NULL, inject_thread, be), 0);
	while (next < NR_THREADED) {
		struct pollfd p = { .fd = be->rx_fd, .events = POLLIN };
		u8 buf[12 + 64], want[64];
		struct iovec iov = { buf, sizeof(buf) };
		ssize_t n;

		/* No deadline of its own (2 s ran out at a load of 14): the tcase's timeout is the
		 * guard, and a frame that never comes fails it. */
		ck_assert_int_eq(poll(&p, 1, -1), 1);
		while ((n = be->ops->recv(be, &iov, 1)) > 0) {
			ck_assert_int_eq(n, 12 + 4 + next % 60);
			fill(want, sizeof(want), (u8)next);
			memcpy(want, &next, sizeof(next));
			ck_assert_mem_eq(buf + 12, want, (size_t)n - 12);
			next++;
		}
		ck_assert_int_eq(n, -EAGAIN);
	}
	ck_assert_int_eq(pthread_join(t, &res), 0);
	ck_assert_ptr_null(res);
	ck_assert(!fd_ready(be->rx_fd, POLLIN));
	be->ops->close(be);
}
END_TEST

/* ---- tap ---- */

/* Without CAP_NET_ADMIN, creating a tap is refused up front with a clear reason. */
START_TEST(test_tap_needs_cap)
{
	pid_t pid = fork();
	int status;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct net_opts o;
		struct net_backend *be[1];
		char err[160];
		int ret;

		capng_get_caps_process();
		capng_update(CAPNG_DROP, CAPNG_EFFECTIVE | CAPNG_PERMITTED, CAP_NET_ADMIN);
		if (capng_apply(CAPNG_SELECT_CAPS))
			_exit(3);
		if (net_parse_opts("mode=tap", &o, err, sizeof(err)))
			_exit(4);
		ret = net_tap_open(&o, be, 1, err, sizeof(err));
		if (ret != -EPERM)
			_exit(5);
		if (!strstr(err, "CAP_NET_ADMIN") || !strstr(err, "run as root"))
			_exit(6);
		/* Attaching to an existing tap by name with a host_ip also needs it. */
		if (net_parse_opts("tapif=nosuch0,host_ip=10.0.0.1", &o, err, sizeof(err)) ||
		    net_tap_open(&o, be, 1, err, sizeof(err)) != -EPERM)
			_exit(7);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
}
END_TEST

START_TEST(test_tap_bad_request)
{
	struct net_opts o;
	struct net_backend *be[NET_MAX_QUEUE_PAIRS + 1];
	char err[160];

	ck_assert_int_eq(net_parse_opts("mode=none", &o, err, sizeof(err)), 0);
	ck_assert_int_eq(net_tap_open(&o, be, 1, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(net_parse_opts("mode=tap", &o, err, sizeof(err)), 0);
	ck_assert_int_eq(net_tap_open(&o, be, 0, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(net_tap_open(&o, be, NET_MAX_QUEUE_PAIRS + 1, err, sizeof(err)), -EINVAL);
}
END_TEST

static int open_tap(const char *arg, struct net_backend **be, int n, char *err, size_t errlen)
{
	struct net_opts o;

	ck_assert_int_eq(net_parse_opts(arg, &o, err, errlen), 0);
	return net_tap_open(&o, be, n, err, errlen);
}

static void get_ifreq(const char *ifname, unsigned long req, struct ifreq *ifr)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(s, 0);
	memset(ifr, 0, sizeof(*ifr));
	snprintf(ifr->ifr_name, sizeof(ifr->ifr_name), "%s", ifname);
	ck_assert_int_eq(ioctl(s, req, ifr), 0);
	close(s);
}

#define TEST_ETHERTYPE 0x88b5 /* IEEE local experimental: nothing else on the link uses it */

START_TEST(test_tap_roundtrip)
{
	struct net_backend *be[1];
	char err[160];
	struct ifreq ifr;
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
	static const u8 guest_mac[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };
	static const u8 host_mac[6] = { 0x02, 0x00, 0x00, 0x00, 0x00, 0x01 };
	u8 frame[142], hdr[12], out[2048];
	struct sockaddr_ll sll = { .sll_family = AF_PACKET };
	struct net_offloads off = {
		.csum = true, .tso4 = true, .tso6 = true, .ecn = true, .ufo = true
	};
	ssize_t n;
	int ps;
	bool found = false;

	enter_netns();
	ck_assert_msg(open_tap("tapif=lkvmt0,host_ip=10.11.12.1/28,script=none", be, 1, err,
			       sizeof(err)) == 0,
		      "%s", err);
	ck_assert_str_eq(be[0]->ifname, "lkvmt0");
	ck_assert_int_eq(be[0]->rx_fd, be[0]->tx_fd);
	ck_assert_int_ge(fcntl(be[0]->rx_fd, F_GETFL) & O_NONBLOCK, 1);
	get_ifreq("lkvmt0", SIOCGIFFLAGS, &ifr);
	ck_assert(ifr.ifr_flags & IFF_UP);
	get_ifreq("lkvmt0", SIOCGIFADDR, &ifr);
	ck_assert_uint_eq(sin->sin_addr.s_addr, htonl(0x0a0b0c01));
	get_ifreq("lkvmt0", SIOCGIFNETMASK, &ifr);
	ck_assert_uint_eq(sin->sin_addr.s_addr, htonl(0xfffffff0));
	ck_assert_int_eq(be[0]->ops->peek_len(be[0]), -ENOTSUP);
	ck_assert_int_eq(be[0]->ops->set_offloads(be[0], &off), 0);
	memset(&off, 0, sizeof(off));
	ck_assert_int_eq(be[0]->ops->set_offloads(be[0], &off), 0);

	/* Guest -> host: a broadcast frame through send; the host stack takes it or drops it. */
	memset(hdr, 0, sizeof(hdr));
	memset(frame, 0xff, 6);
	memcpy(frame + 6, guest_mac, 6);
	frame[12] = TEST_ETHERTYPE >> 8;
	frame[13] = TEST_ETHERTYPE & 0xff;
	fill(frame + 14, sizeof(frame) - 14, 42);
	{
		struct iovec iov[3] = { { hdr, 12 },
					{ frame, 20 },
					{ frame + 20, sizeof(frame) - 20 } };

		n = be[0]->ops->send(be[0], iov, 3);
		ck_assert_msg(n == 12 + (ssize_t)sizeof(frame) || (n < 0 && n != -EFAULT),
			      "send: %zd", n);
	}

	/* Host -> guest: inject with AF_PACKET on the tap, read it back through recv. */
	ps = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
	ck_assert_int_ge(ps, 0);
	sll.sll_protocol = htons(ETH_P_ALL);
	sll.sll_ifindex = (int)if_nametoindex("lkvmt0");
	ck_assert_int_gt(sll.sll_ifindex, 0);
	ck_assert_int_eq(bind(ps, (struct sockaddr *)&sll, sizeof(sll)), 0);
	memcpy(frame, guest_mac, 6);
	memcpy(frame + 6, host_mac, 6);
	ck_assert_int_eq(send(ps, frame, sizeof(frame), 0), (ssize_t)sizeof(frame));

	/* IPv6 autoconfiguration may put its own frames in front of ours; skip those. */
	for (int tries = 0; tries < 50 && !found; tries++) {
		struct pollfd p = { .fd = be[0]->rx_fd, .events = POLLIN };
		struct iovec iov[3] = { { hdr, 12 }, { out, 9 }, { out + 9, sizeof(out) - 9 } };

		/* The tcase's timeout is the guard (a fixed deadline fails under load). */
		ck_assert_int_eq(poll(&p, 1, -1), 1);
		n = be[0]->ops->recv(be[0], iov, 3);
		if (n == -EAGAIN)
			continue;
		ck_assert_int_ge(n, 12 + 14);
		if (out[12] != (TEST_ETHERTYPE >> 8) || out[13] != (TEST_ETHERTYPE & 0xff))
			continue;
		ck_assert_int_eq(n, 12 + (ssize_t)sizeof(frame));
		ck_assert_mem_eq(out, frame, sizeof(frame));
		/* No offloads were enabled, so no GSO and no partial checksum. */
		const struct virtio_net_hdr_v1 *vh = (const void *)hdr;

		ck_assert_uint_eq(vh->gso_type, VIRTIO_NET_HDR_GSO_NONE);
		ck_assert_uint_eq(vh->flags & VIRTIO_NET_HDR_F_NEEDS_CSUM, 0);
		found = true;
	}
	ck_assert(found);

	/* Truncation: recv reports what landed in the iov, not the frame's size (tun's
	 * read clamps its result), so only spare room in the iov can reveal a cut. */
	ck_assert_int_eq(send(ps, frame, sizeof(frame), 0), (ssize_t)sizeof(frame));
	found = false;
	for (int tries = 0; tries < 50 && !found; tries++) {
		struct pollfd p = { .fd = be[0]->rx_fd, .events = POLLIN };
		struct iovec iov[2] = { { hdr, 12 }, { out, 30 } };

		ck_assert_int_eq(poll(&p, 1, -1), 1);
		n = be[0]->ops->recv(be[0], iov, 2);
		if (n == -EAGAIN || out[12] != (TEST_ETHERTYPE >> 8))
			continue;
		ck_assert_int_eq(n, 12 + 30);
		ck_assert_mem_eq(out, frame, 30);
		found = true;
	}
	ck_assert(found);
	close(ps);
	be[0]->ops->close(be[0]);
	/* The tap was not persistent: closing its only queue deletes it. */
	ck_assert_uint_eq(if_nametoindex("lkvmt0"), 0);
}
END_TEST

/* batch=on: the tap's io_uring batch ops move frames both ways, in order, with
 * -EAGAIN for what found no frame; closing lets go of the tap at once. */
START_TEST(test_tap_batch)
{
	struct net_backend *be[1];
	static const u8 guest_mac[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };
	static const u8 host_mac[6] = { 0x02, 0x00, 0x00, 0x00, 0x00, 0x01 };
	struct sockaddr_ll sll = { .sll_family = AF_PACKET };
	u8 hdr[4][12], frame[3][100], out[4][256];
	struct iovec iov[4][2];
	struct net_io io[4];
	char err[160];
	int ps, found = 0;

	enter_netns();
	ck_assert_msg(open_tap("tapif=lkvmb0,script=none,batch=on", be, 1, err, sizeof(err)) == 0,
		      "%s", err);
	ck_assert_ptr_nonnull(be[0]->ops->send_batch);
	ck_assert_ptr_nonnull(be[0]->ops->recv_batch);

	/* Guest -> host: three frames (of three lengths) in one call. */
	memset(hdr, 0, sizeof(hdr));
	for (int i = 0; i < 3; i++) {
		memset(frame[i], 0xff, 6);
		memcpy(frame[i] + 6, guest_mac, 6);
		frame[i][12] = TEST_ETHERTYPE >> 8;
		frame[i][13] = TEST_ETHERTYPE & 0xff;
		fill(frame[i] + 14, sizeof(frame[i]) - 14, (u8)(50 + i));
		iov[i][0] = (struct iovec){ hdr[i], 12 };
		iov[i][1] = (struct iovec){ frame[i], 60 + 10 * (size_t)i };
		io[i] = (struct net_io){ .iov = iov[i], .iovcnt = 2 };
	}
	ck_assert_int_eq(be[0]->ops->send_batch(be[0], io, 3), 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(io[i].res, 12 + 60 + 10 * i);

	/* Host -> guest: two frames injected on the tap, read four at a time until both came
	 * (IPv6 autoconfiguration may put its own frames among them). */
	ps = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
	ck_assert_int_ge(ps, 0);
	sll.sll_protocol = htons(ETH_P_ALL);
	sll.sll_ifindex = (int)if_nametoindex("lkvmb0");
	ck_assert_int_gt(sll.sll_ifindex, 0);
	ck_assert_int_eq(bind(ps, (struct sockaddr *)&sll, sizeof(sll)), 0);
	for (int i = 0; i < 2; i++) {
		memcpy(frame[i], guest_mac, 6);
		memcpy(frame[i] + 6, host_mac, 6);
		ck_assert_int_eq(send(ps, frame[i], 70 + (size_t)i, 0), 70 + i);
	}
	for (int tries = 0; tries < 50 && found < 2; tries++) {
		struct pollfd p = { .fd = be[0]->rx_fd, .events = POLLIN };

		/* The tcase's timeout is the guard (a fixed deadline fails under load). */
		ck_assert_int_eq(poll(&p, 1, -1), 1);
		for (int i = 0; i < 4; i++) {
			iov[i][0] = (struct iovec){ hdr[i], 12 };
			iov[i][1] = (struct iovec){ out[i], sizeof(out[i]) };
			io[i] = (struct net_io){ .iov = iov[i], .iovcnt = 2 };
		}
		ck_assert_int_eq(be[0]->ops->recv_batch(be[0], io, 4), 0);
		for (int i = 0; i < 4; i++) {
			if (io[i].res == -EAGAIN)
				continue;
			ck_assert_int_ge(io[i].res, 12 + 14);
			if (out[i][12] != (TEST_ETHERTYPE >> 8) ||
			    out[i][13] != (TEST_ETHERTYPE & 0xff))
				continue;
			ck_assert_int_eq(io[i].res, 12 + 70 + found);
			ck_assert_mem_eq(out[i], frame[found], 70 + (size_t)found);
			found++;
		}
	}
	ck_assert_int_eq(found, 2);
	close(ps);
	be[0]->ops->close(be[0]);
	ck_assert_uint_eq(if_nametoindex("lkvmb0"), 0);
}
END_TEST

/* io_uring refused (as a container's seccomp would: EPERM): batch=on falls back to the
 * per-frame path with one line saying why; the tap works as before. In a child, which
 * installs the filter (Check's fork mode is off). */
START_TEST(test_tap_batch_unavailable)
{
	int st;
	pid_t pid;

	enter_netns();
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
		struct net_backend *be[1];
		struct capture c;
		char err[160], log[512];
		int lines, ret;

		if (!ctx ||
		    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(io_uring_setup), 0) ||
		    seccomp_load(ctx))
			_exit(10);
		capture_start(&c);
		ret = open_tap("tapif=lkvmb1,script=none,batch=on", be, 1, err, sizeof(err));
		lines = capture_end(&c, log, sizeof(log));
		if (ret)
			_exit(11);
		if (be[0]->ops->send_batch || be[0]->ops->recv_batch)
			_exit(12);
		if (lines != 1 || !strstr(log, "batch=on unavailable") ||
		    !strstr(log, strerror(EPERM)))
			_exit(13);
		be[0]->ops->close(be[0]);
		_exit(if_nametoindex("lkvmb1") == 0 ? 0 : 14);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status 0x%x", st);
}
END_TEST

START_TEST(test_tap_multiqueue_and_busy)
{
	struct net_backend *be[4], *be2[1];
	char err[160];

	enter_netns();
	ck_assert_msg(open_tap("tapif=lkvmmq,queues=4", be, 4, err, sizeof(err)) == 0, "%s", err);
	for (int i = 0; i < 4; i++) {
		ck_assert_str_eq(be[i]->ifname, "lkvmmq");
		for (int j = 0; j < i; j++)
			ck_assert_int_ne(be[i]->rx_fd, be[j]->rx_fd);
	}
	/* A single-queue open of a multiqueue tap is refused, naming it. */
	ck_assert_int_lt(open_tap("tapif=lkvmmq", be2, 1, err, sizeof(err)), 0);
	ck_assert_msg(strstr(err, "lkvmmq"), "%s", err);
	for (int i = 0; i < 4; i++)
		be[i]->ops->close(be[i]);

	/* A kernel-chosen name comes back in ifname. */
	ck_assert_msg(open_tap("mode=tap", be, 1, err, sizeof(err)) == 0, "%s", err);
	ck_assert(!strncmp(be[0]->ifname, "tap", 3));
	ck_assert_int_ne(if_nametoindex(be[0]->ifname), 0);
	be[0]->ops->close(be[0]);

	/* A second open of an attached single-queue tap is busy. */
	ck_assert_msg(open_tap("tapif=lkvmb0", be2, 1, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(open_tap("tapif=lkvmb0", be, 1, err, sizeof(err)), -EBUSY);
	ck_assert_msg(strstr(err, "lkvmb0") && strstr(err, "busy"), "%s", err);
	be2[0]->ops->close(be2[0]);
}
END_TEST

/* A queue out of the tap's steering gets no frame, keeps none, still sends, and comes back
 * without any capability, under another uid (lkvm after it dropped both: net-ctl attaches
 * on VQ_PAIRS_SET). */
START_TEST(test_tap_queue_enable)
{
	static const u8 mac[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };
	struct net_backend *be[2];
	u8 hdr[12] = { 0 }, frame[60] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	struct iovec iov[2] = { { hdr, sizeof(hdr) }, { frame, sizeof(frame) } };
	int ps, got0 = 0, got1 = 0, status;
	char err[160];
	pid_t pid;

	enter_netns();
	ck_assert_msg(open_tap("tapif=lkvmq0,queues=2,script=none", be, 2, err, sizeof(err)) == 0,
		      "%s", err);
	ps = tap_host_socket("lkvmq0");
	ck_assert_int_eq(be[1]->ops->set_enabled(be[1], false), 0);
	ck_assert_int_eq(be[1]->ops->set_enabled(be[1], false), -EINVAL); /* not attached */
	tap_send_flows(ps, mac, 64);
	ck_assert(WAIT_UNTIL(5000, (got0 += tap_take_flows(be[0])) >= 64));
	ck_assert_int_eq(got0, 64);
	ck_assert_int_eq(tap_take_flows(be[1]), 0);
	ck_assert_int_eq(be[1]->ops->send(be[1], iov, 2), 12 + (ssize_t)sizeof(frame));

	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setgroups(0, NULL) || setresgid(65534, 65534, 65534) ||
		    setresuid(65534, 65534, 65534))
			_exit(3);
		if (capng_get_caps_process() ||
		    capng_have_capabilities(CAPNG_SELECT_CAPS) != CAPNG_NONE)
			_exit(4);
		_exit(be[1]->ops->set_enabled(be[1], true) ? 5 : 0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);

	/* Both queues in the steering: 64 flows reach both (all on one: 2^-63). */
	got0 = 0;
	tap_send_flows(ps, mac, 64);
	ck_assert(WAIT_UNTIL(5000, (got0 += tap_take_flows(be[0]), got1 += tap_take_flows(be[1]),
				    got0 + got1 >= 64)));
	ck_assert_int_eq(got0 + got1, 64);
	ck_assert_int_gt(got0, 0);
	ck_assert_int_gt(got1, 0);

	/* Detaching drops what the queue held. */
	tap_send_flows(ps, mac, 64);
	ck_assert(WAIT_UNTIL(5000, fd_ready(be[1]->rx_fd, POLLIN)));
	ck_assert_int_eq(be[1]->ops->set_enabled(be[1], false), 0);
	ck_assert(!fd_ready(be[1]->rx_fd, POLLIN));
	ck_assert_int_eq(tap_take_flows(be[1]), 0);
	close(ps);
	be[0]->ops->close(be[0]);
	be[1]->ops->close(be[1]);
}
END_TEST

static char *write_script(const char *body)
{
	static char path[64];
	int fd;

	snprintf(path, sizeof(path), "/tmp/lkvm-test-net-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, body, strlen(body)), (ssize_t)strlen(body));
	ck_assert_int_eq(fchmod(fd, 0700), 0);
	close(fd);
	return path;
}

START_TEST(test_tap_script)
{
	struct net_backend *be[2];
	char err[256], arg[200], outpath[64], got[32] = { 0 };
	char *script;
	FILE *f;

	enter_netns();
	snprintf(outpath, sizeof(outpath), "/tmp/lkvm-test-net-out.%d", (int)getpid());
	snprintf(arg, sizeof(arg), "#!/bin/sh\necho \"$#:$1\" > %s\n", outpath);
	script = write_script(arg);
	snprintf(arg, sizeof(arg), "tapif=lkvms0,queues=2,script=%s", script);
	ck_assert_msg(open_tap(arg, be, 2, err, sizeof(err)) == 0, "%s", err);
	f = fopen(outpath, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(got, sizeof(got), f));
	fclose(f);
	ck_assert_str_eq(got, "1:lkvms0\n");
	unlink(outpath);
	unlink(script);
	be[0]->ops->close(be[0]);
	be[1]->ops->close(be[1]);

	/* A failing script fails the open and leaves no tap behind. */
	script = write_script("#!/bin/sh\nexit 3\n");
	snprintf(arg, sizeof(arg), "tapif=lkvms1,script=%s", script);
	ck_assert_int_eq(open_tap(arg, be, 1, err, sizeof(err)), -EIO);
	ck_assert_msg(strstr(err, "status 3") && strstr(err, script), "%s", err);
	ck_assert_ptr_null(be[0]);
	ck_assert_uint_eq(if_nametoindex("lkvms1"), 0);
	unlink(script);

	ck_assert_int_eq(open_tap("tapif=lkvms2,script=/nonexistent/ifup", be, 1, err, sizeof(err)),
			 -ENOENT);
	ck_assert_msg(strstr(err, "/nonexistent/ifup"), "%s", err);
	ck_assert_uint_eq(if_nametoindex("lkvms2"), 0);
}
END_TEST

/* fwd= made into passt's own -t/-u specs, repeatable up to NET_MAX_FWDS, the address
 * normalised (127.0.0.1 unless given); the same port for tcp and udp, or on two addresses,
 * is two forwards. */
START_TEST(test_opts_fwd)
{
	struct net_opts o;
	char err[256], arg[1024];
	int n;

	ck_assert_int_eq(net_parse_opts("mode=user,fwd=tcp:8080:80,fwd=udp:5353:53,fwd=udp:8080:80,"
					"fwd=tcp:0.0.0.0:2222:22,fwd=tcp:10.0.0.1:8080:8080,"
					"fwd=tcp:65535:65535,fwd=tcp:1:1",
					&o, err, sizeof(err)),
			 0);
	ck_assert_int_eq(o.nr_fwds, 7);
	ck_assert(!o.fwd[0].udp);
	ck_assert_str_eq(o.fwd[0].spec, "127.0.0.1/8080:80");
	ck_assert(o.fwd[1].udp);
	ck_assert_str_eq(o.fwd[1].spec, "127.0.0.1/5353:53");
	ck_assert(o.fwd[2].udp);
	ck_assert_str_eq(o.fwd[3].spec, "0.0.0.0/2222:22");
	ck_assert_str_eq(o.fwd[4].spec, "10.0.0.1/8080:8080");
	ck_assert_str_eq(o.fwd[5].spec, "127.0.0.1/65535:65535");
	ck_assert_str_eq(o.fwd[6].spec, "127.0.0.1/1:1");
	/* A leading zero is still the number (no octal); the longest address fits. */
	ck_assert_int_eq(net_parse_opts("mode=user,fwd=tcp:255.255.255.255:08080:00080", &o, err,
					sizeof(err)),
			 0);
	ck_assert_str_eq(o.fwd[0].spec, "255.255.255.255/8080:80");
	/* NET_MAX_FWDS, not one more. */
	n = snprintf(arg, sizeof(arg), "mode=user");
	for (int i = 0; i < NET_MAX_FWDS; i++)
		n += snprintf(arg + n, sizeof(arg) - (size_t)n, ",fwd=tcp:%d:80", 10000 + i);
	ck_assert_int_eq(net_parse_opts(arg, &o, err, sizeof(err)), 0);
	ck_assert_int_eq(o.nr_fwds, NET_MAX_FWDS);
	snprintf(arg + n, sizeof(arg) - (size_t)n, ",fwd=udp:1:1");
	ck_assert_int_eq(net_parse_opts(arg, &o, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "-n fwd: at most 16 forwards per NIC");
	/* Another key still may not repeat. */
	ck_assert_int_eq(net_parse_opts("mode=user,fwd=tcp:1:1,mode=user", &o, err, sizeof(err)),
			 -EINVAL);
	ck_assert_str_eq(err, "-n: duplicate key 'mode'");
}
END_TEST

static Suite *net_suite(void)
{
	Suite *s = suite_create("net");
	TCase *opts = tcase_create("options");
	TCase *off = tcase_create("offloads");
	TCase *fake = tcase_create("fake");
	TCase *tap = tcase_create("tap");
	const char *why;

	tcase_add_test(opts, test_opts_defaults);
	tcase_add_test(opts, test_opts_all_keys);
	tcase_add_test(opts, test_opts_tx_modes);
	tcase_add_test(opts, test_opts_fwd);
	tcase_add_loop_test(opts, test_opts_bad, 0, (int)ARRAY_SIZE(bad_opts));
	tcase_add_test(opts, test_opts_err_buffers);
	tcase_add_test(opts, test_parse_mac);
	tcase_add_test(opts, test_parse_host_ip);
	tcase_add_loop_test(off, test_offloads_from_features, 0, (int)ARRAY_SIZE(offload_cases));
	tcase_add_test(fake, test_fake_inject_recv);
	tcase_add_test(fake, test_fake_truncate_and_order);
	tcase_add_test(fake, test_fake_send_take);
	tcase_add_test(fake, test_fake_full_queues);
	tcase_add_test(fake, test_fake_offloads);
	tcase_add_test(fake, test_fake_threads);
	tcase_set_timeout(fake, 30);
	tcase_add_test(tap, test_tap_needs_cap);
	tcase_add_test(tap, test_tap_bad_request);
	why = tap_unavailable();
	if (why) {
		lkvm_skip("test_net", 5, "tap tests", why);
	} else {
		tcase_add_test(tap, test_tap_roundtrip);
		tcase_add_test(tap, test_tap_batch);
		tcase_add_test(tap, test_tap_batch_unavailable);
		tcase_add_test(tap, test_tap_multiqueue_and_busy);
		tcase_add_test(tap, test_tap_queue_enable);
		tcase_add_test(tap, test_tap_script);
	}
	tcase_set_timeout(tap, 20);
	suite_add_tcase(s, opts);
	suite_add_tcase(s, off);
	suite_add_tcase(s, fake);
	suite_add_tcase(s, tap);
	return s;
}

LKVM_CHECK_MAIN(net_suite)

/* Unit tests for QEMU's stream framing (net/stream.c) against a socket pair: lengths, cuts, garbage, partial reads and writes. */
#include <errno.h>
#include <fcntl.h>
#include <linux/virtio_net.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/net-stream.h"
#include "lkvm/net.h"

#define MAXF NET_STREAM_MAX_FRAME

/* sv[0]: lkvm's end (non-blocking), sv[1]: the peer's (blocking). */
static int sv[2];
static struct net_stream_rx rx;
static struct net_stream_tx tx;
static u8 *big;

static void setup(void)
{
	/* A closed peer must be EPIPE, not the end of the test (lkvm ignores SIGPIPE too). */
	signal(SIGPIPE, SIG_IGN);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_int_eq(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
	ck_assert_int_eq(net_stream_rx_init(&rx), 0);
	ck_assert_int_eq(net_stream_tx_init(&tx), 0);
	big = malloc(2 * (MAXF + 8));
	ck_assert_ptr_nonnull(big);
}

static void teardown(void)
{
	close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	net_stream_rx_free(&rx);
	net_stream_tx_free(&tx);
	free(big);
}

static void fill_pattern(u8 *p, size_t len, u8 seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (u8)(seed + i * 13);
}

/* A record (length len_field, then len bytes of pattern seed) at p; returns its size. */
static size_t record(u8 *p, u32 len_field, size_t len, u8 seed)
{
	p[0] = (u8)(len_field >> 24);
	p[1] = (u8)(len_field >> 16);
	p[2] = (u8)(len_field >> 8);
	p[3] = (u8)len_field;
	fill_pattern(p + 4, len, seed);
	return 4 + len;
}

static void peer_write(const void *p, size_t len)
{
	ck_assert_uint_eq(write_full(sv[1], p, len), len);
}

static void peer_close(void)
{
	close(sv[1]);
	sv[1] = -1;
}

/* The next frame is len bytes of pattern seed; then it is consumed. */
static void expect_frame(size_t len, u8 seed)
{
	u8 *want = malloc(len ? len : 1);

	fill_pattern(want, len, seed);
	ck_assert_int_eq(net_stream_rx_read(&rx, sv[0]), (ssize_t)len);
	/* Asked again before _next: the same frame, nothing more read. */
	ck_assert_int_eq(net_stream_rx_read(&rx, sv[0]), (ssize_t)len);
	ck_assert_mem_eq(net_stream_rx_frame(&rx), want, len);
	net_stream_rx_next(&rx);
	free(want);
}

/* Lengths 1, 65535 and 65550 (the largest) arrive whole; then nothing is pending. */
START_TEST(rx_lengths)
{
	static const size_t lens[] = { 1, 14, 65535, MAXF };

	for (size_t i = 0; i < ARRAY_SIZE(lens); i++) {
		peer_write(big, record(big, (u32)lens[i], lens[i], (u8)i));
		expect_frame(lens[i], (u8)i);
		ck_assert_int_eq(net_stream_rx_read(&rx, sv[0]), 0);
	}
	/* The peer closes between records: the stream ends, and stays ended. */
	peer_close();
	ck_assert_int_eq(net_stream_rx_read(&rx, sv[0]), -EPIPE);
	ck_assert_int_eq(net_stream_rx_read(&rx, sv[0]), -EPIPE);
}
END_TEST

/* Length 0 is skipped: the next record is the frame. */
START_TEST(rx_zero_length_skipped)
{
	size_t n = record(big, 0, 0, 0);

	n += record(big + n, 0, 0, 0);
	n += record(big + n, 3, 3, 5);
	peer_write(big, n);
	expect_frame(3, 5);
	peer_write(big, record(big, 0, 0, 0));
	ck_assert_int_eq(net_stream_rx_read(&rx, sv[0]), 0);
	ck_assert_int_eq(rx.err, 0);
}
END_TEST

/* 65551 (one over) and a garbage length end the stream, with nothing delivered. */
START_TEST(rx_too_long_ends)
{
	static const u32 lens[] = { MAXF + 1, 0xffffffffu, 0x41414141u };

	for (size_t i = 0; i < ARRAY_SIZE(lens); i++) {
		net_stream_rx_free(&rx);
		ck_assert_int_eq(net_stream_rx_init(&rx), 0);
		peer_write(big, record(big, lens[i], 16, 1));
		ck_assert_int_eq(net_stream_rx_read(&rx, sv[0]), -EMSGSIZE);
		ck_assert_int_eq(net_stream_rx_read(&rx, sv[0]), -EMSGSIZE);
		/* Drain what the peer wrote after the length (an ended stream reads no more). */
		while (read(sv[0], big, MAXF) > 0)
			;
	}
}
END_TEST

/* The peer closes inside a frame, or inside a length field: the stream ends, cut. */
START_TEST(rx_cut_mid_frame)
{
	size_t n = record(big, 100, 100, 3);

	peer_write(big, n - 50);
	ck_assert_int_eq(net_stream_rx_read(&rx, sv[0]), 0);
	peer_close();
	ck_assert_int_eq(net_stream_rx_read(&rx, sv[0]), -EPROTO);
}
END_TEST

START_TEST(rx_cut_mid_length)
{
	peer_write("\0\0", 2);
	ck_assert_int_eq(net_stream_rx_read(&rx, sv[0]), 0);
	peer_close();
	ck_assert_int_eq(net_stream_rx_read(&rx, sv[0]), -EPROTO);
}
END_TEST

/* Many records in one write: one frame per call, in order, and no frame held back once the
 * socket is empty (each call reads only the current record). */
START_TEST(rx_many_in_one_read)
{
	size_t n = 0;

	for (int i = 0; i < 40; i++)
		n += record(big + n, (u32)(60 + i), 60 + i, (u8)i);
	peer_write(big, n);
	for (int i = 0; i < 40; i++)
		expect_frame(60 + i, (u8)i);
	ck_assert_int_eq(net_stream_rx_read(&rx, sv[0]), 0);
}
END_TEST

/* A record arriving in pieces (the length split too): kept across calls until whole. */
START_TEST(rx_split_across_reads)
{
	size_t n = record(big, 1000, 1000, 9);
	static const size_t cuts[] = { 1, 3, 4, 5, 500, 1003 };
	size_t at = 0;

	for (size_t i = 0; i < ARRAY_SIZE(cuts); i++) {
		peer_write(big + at, cuts[i] - at);
		at = cuts[i];
		ck_assert_int_eq(net_stream_rx_read(&rx, sv[0]), 0);
	}
	peer_write(big + at, n - at);
	expect_frame(1000, 9);
	/* Byte by byte through want/got, as the fuzz target feeds it. */
	n = record(big, 7, 7, 4);
	for (size_t i = 0; i < n; i++) {
		void *p;
		size_t want;

		net_stream_rx_want(&rx, &p, &want);
		ck_assert_uint_ge(want, 1);
		memcpy(p, big + i, 1);
		ck_assert_int_eq(net_stream_rx_got(&rx, 1), i + 1 == n ? 7 : 0);
	}
	ck_assert_mem_eq(net_stream_rx_frame(&rx), big + 4, 7);
}
END_TEST

/* Garbage: whatever the bytes, frames come out no longer than the maximum, or the stream ends. */
START_TEST(rx_garbage)
{
	u8 junk[4096];
	ssize_t r;
	int frames = 0;

	srandom(1);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (u8)random();
	/* Small lengths first, so some frames come out before the ending one. */
	junk[0] = junk[1] = 0;
	junk[2] = 0;
	junk[3] = 20;
	peer_write(junk, sizeof(junk));
	peer_close();
	while ((r = net_stream_rx_read(&rx, sv[0])) > 0) {
		ck_assert_int_le(r, MAXF);
		net_stream_rx_next(&rx);
		frames++;
	}
	ck_assert_int_ge(frames, 1);
	ck_assert(r == -EMSGSIZE || r == -EPROTO || r == -EPIPE);
}
END_TEST

/* TX: a frame split over iovecs goes out as one record; bad lengths are refused, the stream
 * goes on. */
START_TEST(tx_records)
{
	u8 a[10], b[90], got[200];
	struct iovec iov[2] = { { a, sizeof(a) }, { b, sizeof(b) } };

	fill_pattern(a, sizeof(a), 1);
	fill_pattern(b, sizeof(b), 11);
	ck_assert_int_eq(net_stream_tx_send(&tx, sv[0], iov, 2, 100), 100);
	ck_assert_int_eq(read(sv[1], got, sizeof(got)), 104);
	ck_assert_mem_eq(got, "\0\0\0\x64", 4);
	ck_assert_mem_eq(got + 4, a, sizeof(a));
	ck_assert_mem_eq(got + 14, b, sizeof(b));
	ck_assert_int_eq(net_stream_tx_send(&tx, sv[0], iov, 0, 0), -EMSGSIZE);
	ck_assert_int_eq(net_stream_tx_send(&tx, sv[0], iov, 2, 99), -EMSGSIZE);
	ck_assert_int_eq(tx.err, 0);
	iov[0] = (struct iovec){ big, MAXF + 1 };
	ck_assert_int_eq(net_stream_tx_send(&tx, sv[0], iov, 1, MAXF + 1), -EMSGSIZE);
	ck_assert_int_eq(tx.err, 0);
	/* The peer is gone: the stream ends. */
	peer_close();
	iov[0] = (struct iovec){ a, sizeof(a) };
	ck_assert_int_eq(net_stream_tx_send(&tx, sv[0], iov, 1, sizeof(a)), -EPIPE);
	ck_assert_int_eq(net_stream_tx_send(&tx, sv[0], iov, 1, sizeof(a)), -EPIPE);
}
END_TEST

/* A full socket: the frame it took part of is finished before the next one, which waits
 * (-EAGAIN); the peer reads every record whole and in order. */
START_TEST(tx_partial_write_kept)
{
	int small = 4096, sent = 0, seen = 0;
	struct net_stream_rx peer;
	struct iovec v;
	ssize_t r;

	ck_assert_int_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	ck_assert_int_eq(net_stream_rx_init(&peer), 0);
	ck_assert_int_eq(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
	/* Send until the socket refuses; then read everything, flush, repeat. */
	for (int round = 0; round < 4; round++) {
		for (;;) {
			fill_pattern(big, MAXF, (u8)sent);
			v = (struct iovec){ big, MAXF };
			r = net_stream_tx_send(&tx, sv[0], &v, 1, MAXF);
			if (r == -EAGAIN)
				break;
			ck_assert_int_eq(r, MAXF);
			sent++;
		}
		ck_assert(sent > 0);
		do {
			while ((r = net_stream_rx_read(&peer, sv[1])) > 0) {
				fill_pattern(big, MAXF, (u8)seen);
				ck_assert_int_eq(r, MAXF);
				ck_assert_mem_eq(net_stream_rx_frame(&peer), big, MAXF);
				net_stream_rx_next(&peer);
				seen++;
			}
			ck_assert_int_eq(r, 0);
		} while (net_stream_tx_flush(&tx, sv[0]) == -EAGAIN);
		while ((r = net_stream_rx_read(&peer, sv[1])) > 0) {
			net_stream_rx_next(&peer);
			seen++;
		}
		ck_assert_int_eq(seen, sent);
		ck_assert(!net_stream_tx_pending(&tx));
	}
	net_stream_rx_free(&peer);
}
END_TEST

/* ---- net/passt.c: the backend lkvm starts (a stand-in passt here) or connects to ---- */

static char bindir[64];

/* What a fake passt says to be set up, as passt does: its pid into the --pid file (lkvm's FIFO). */
#define READY "while [ $# -gt 1 ] && [ \"$1\" != --pid ]; do shift; done; echo $$ >\"$2\"\n"

/* A "passt" in its own directory, first in PATH: `body` is its shell script after #!/bin/sh. */
static void fake_passt(const char *body)
{
	char path[96];
	FILE *f;

	snprintf(bindir, sizeof(bindir), "/tmp/lkvm-test-passt-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(bindir));
	snprintf(path, sizeof(path), "%s/passt", bindir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "#!/bin/sh\n%s\n", body);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(path, 0755), 0);
	char newpath[4096];

	snprintf(newpath, sizeof(newpath), "%s:%s", bindir, getenv("PATH") ? getenv("PATH") : "");
	ck_assert_int_eq(setenv("PATH", newpath, 1), 0);
}

static void fake_passt_remove(void)
{
	char path[96];

	snprintf(path, sizeof(path), "%s/passt", bindir);
	unlink(path);
	rmdir(bindir);
}

/* Send one frame (12-byte header first, as the device hands it) and wait for one back. */
static void echo_one(struct net_backend *be, size_t len, u8 seed)
{
	u8 frame[NET_VNET_HDR_LEN + 1600] = { 0 }, back[NET_VNET_HDR_LEN + 1600];
	struct iovec out = { frame, NET_VNET_HDR_LEN + len }, in = { back, sizeof(back) };
	struct pollfd p = { .fd = be->rx_fd, .events = POLLIN };
	ssize_t r;

	fill_pattern(frame + NET_VNET_HDR_LEN, len, seed);
	ck_assert_int_eq(be->ops->send(be, &out, 1), (ssize_t)(NET_VNET_HDR_LEN + len));
	while ((r = be->ops->peek_len(be)) == 0)
		ck_assert_int_eq(poll(&p, 1, 10000), 1);
	ck_assert_int_eq(r, (ssize_t)(NET_VNET_HDR_LEN + len));
	memset(back, 0xee, sizeof(back));
	ck_assert_int_eq(be->ops->recv(be, &in, 1), (ssize_t)(NET_VNET_HDR_LEN + len));
	ck_assert_mem_eq(back, "\0\0\0\0\0\0\0\0\0\0\0\0", NET_VNET_HDR_LEN);
	ck_assert_mem_eq(back + NET_VNET_HDR_LEN, frame + NET_VNET_HDR_LEN, len);
}

/* lkvm starts "passt" with the stream on fd 3 (here one that echoes every byte back), and
 * only fd 3 beyond 0-2; close stops and reaps it. */
START_TEST(passt_started_and_reaped)
{
	struct net_opts o = { .mode = NET_MODE_USER, .queue_pairs = 1 };
	struct net_backend *be[1];
	char err[160], *oldpath = strdup(getenv("PATH") ? getenv("PATH") : "");
	int pid;

	/* Told --fd 3, which is a socket; no fd of the test's beyond it (the shell keeps its own at
	 * 10 and up); then it echoes the stream. Any of these wrong: it exits, the echo fails. */
	fake_passt("case \"$*\" in *'--foreground --quiet --fd 3 --pid '*) ;; *) exit 7 ;; esac\n"
		   "[ -S /proc/$$/fd/3 ] || exit 9\n"
		   "for f in 4 5 6 7 8 9; do [ -e /proc/$$/fd/$f ] && exit 8; done\n" READY
		   "exec /bin/cat <&3 >&3");
	/* An fd lkvm inherited without close-on-exec: not passt's business. */
	ck_assert_int_eq(dup2(STDIN_FILENO, 7), 7);
	ck_assert_int_eq(net_passt_open(&o, be, 1, err, sizeof(err)), 0);
	close(7);
	ck_assert(be[0]->plain_frames);
	ck_assert_str_eq(be[0]->ops->name, "passt");
	ck_assert_int_eq(sscanf(be[0]->ifname, "pid %d", &pid), 1);
	echo_one(be[0], 60, 1);
	echo_one(be[0], 1514, 2);
	/* A frame whose header asks for an offload: refused, not sent (the stream goes on). */
	{
		u8 f[NET_VNET_HDR_LEN + 60] = { VIRTIO_NET_HDR_F_NEEDS_CSUM };
		struct iovec v = { f, sizeof(f) };

		ck_assert_int_eq(be[0]->ops->send(be[0], &v, 1), -EINVAL);
	}
	echo_one(be[0], 100, 3);
	be[0]->ops->close(be[0]);
	/* Reaped by close: no such child any more. */
	ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), -1);
	ck_assert_int_eq(errno, ECHILD);
	setenv("PATH", oldpath, 1);
	free(oldpath);
	fake_passt_remove();
}
END_TEST

/* A passt that dies: the stream ends (what virtio-net reads as the link gone). */
START_TEST(passt_dies)
{
	struct net_opts o = { .mode = NET_MODE_USER, .queue_pairs = 1 };
	struct net_backend *be[1];
	char err[160], *oldpath = strdup(getenv("PATH") ? getenv("PATH") : "");
	struct pollfd p;
	ssize_t r;

	signal(SIGPIPE, SIG_IGN);
	fake_passt(READY "exit 3");
	ck_assert_int_eq(net_passt_open(&o, be, 1, err, sizeof(err)), 0);
	p = (struct pollfd){ .fd = be[0]->rx_fd, .events = POLLIN };
	ck_assert_int_eq(poll(&p, 1, 10000), 1);
	r = be[0]->ops->peek_len(be[0]);
	ck_assert_int_eq(r, -EPIPE);
	ck_assert_int_eq(be[0]->ops->peek_len(be[0]), -EPIPE);
	be[0]->ops->close(be[0]);
	setenv("PATH", oldpath, 1);
	free(oldpath);
	fake_passt_remove();
}
END_TEST

/* A passt that exits before it is set up (on a host without a route: "No external routable
 * interface for IPv4"): the open fails with its status and its words in one line, without
 * passt's "cannot reach syslog" noise; nothing is left (reaped, its start-up files gone). */
START_TEST(passt_cannot_start)
{
	struct net_opts o = { .mode = NET_MODE_USER, .queue_pairs = 1 };
	struct net_backend *be[1];
	char err[256], *oldpath = strdup(getenv("PATH") ? getenv("PATH") : "");

	fake_passt("echo 'Failed to send 46 bytes to syslog' >&2\n"
		   "echo 'No external routable interface for IPv4' >&2\n"
		   "echo 'External interface not usable' >&2\nexit 1");
	ck_assert_int_eq(net_passt_open(&o, be, 1, err, sizeof(err)), -ECHILD);
	ck_assert_str_eq(err,
			 "-n mode=user: passt could not start (status 1): No external routable "
			 "interface for IPv4; External interface not usable");
	ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
	ck_assert_int_eq(errno, ECHILD);
	fake_passt_remove();
	setenv("PATH", oldpath, 1);
	fake_passt("kill -9 $$");
	ck_assert_int_eq(net_passt_open(&o, be, 1, err, sizeof(err)), -ECHILD);
	ck_assert_str_eq(err, "-n mode=user: passt could not start (signal 9): no message");
	setenv("PATH", oldpath, 1);
	free(oldpath);
	fake_passt_remove();
}
END_TEST

/* No passt in PATH, nobody at socket=PATH: one line each, nothing left open. */
START_TEST(passt_open_errors)
{
	struct net_opts o = { .mode = NET_MODE_USER, .queue_pairs = 1 };
	struct net_backend *be[1];
	char err[200], *oldpath = strdup(getenv("PATH") ? getenv("PATH") : "");

	ck_assert_int_eq(setenv("PATH", "/nonexistent-lkvm-test", 1), 0);
	ck_assert_int_eq(net_passt_open(&o, be, 1, err, sizeof(err)), -ENOENT);
	ck_assert_str_eq(err, "-n mode=user: passt is not in PATH (Debian: apt install passt)");
	setenv("PATH", oldpath, 1);
	free(oldpath);
	snprintf(o.socket, sizeof(o.socket), "/nonexistent-lkvm-test/passt.sock");
	ck_assert_int_eq(net_passt_open(&o, be, 1, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "cannot connect: No such file or directory"), "%s", err);
	o.queue_pairs = 2;
	ck_assert_int_eq(net_passt_open(&o, be, 2, err, sizeof(err)), -EINVAL);
}
END_TEST

/* socket=PATH: lkvm connects to a listening passt (the test, here) and speaks the stream. */
START_TEST(passt_socket_connects)
{
	struct net_opts o = { .mode = NET_MODE_USER, .queue_pairs = 1 };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct net_backend *be[1];
	char err[160];
	u8 rec[4 + 60];
	int l, c;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "/tmp/lkvm-test-passt-%d.sock", (int)getpid());
	unlink(sa.sun_path);
	l = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_ge(l, 0);
	ck_assert_int_eq(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(l, 1), 0);
	snprintf(o.socket, sizeof(o.socket), "%s", sa.sun_path);
	ck_assert_int_eq(net_passt_open(&o, be, 1, err, sizeof(err)), 0);
	ck_assert_str_eq(be[0]->ifname, "socket");
	c = accept(l, NULL, NULL);
	ck_assert_int_ge(c, 0);
	{
		u8 f[NET_VNET_HDR_LEN + 60] = { 0 };
		struct iovec v = { f, sizeof(f) };

		fill_pattern(f + NET_VNET_HDR_LEN, 60, 4);
		ck_assert_int_eq(be[0]->ops->send(be[0], &v, 1), (ssize_t)sizeof(f));
		ck_assert_int_eq(recv(c, rec, sizeof(rec), MSG_WAITALL), sizeof(rec));
		ck_assert_mem_eq(rec, "\0\0\0\x3c", 4);
		ck_assert_mem_eq(rec + 4, f + NET_VNET_HDR_LEN, 60);
	}
	be[0]->ops->close(be[0]);
	/* The passt lkvm connected to is not lkvm's: it sees the end of the stream, nothing more. */
	ck_assert_int_eq(recv(c, rec, 1, 0), 0);
	close(c);
	close(l);
	unlink(sa.sun_path);
}
END_TEST

static Suite *net_stream_suite(void)
{
	Suite *s = suite_create("net_stream");
	TCase *tc = tcase_create("stream");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, rx_lengths);
	tcase_add_test(tc, rx_zero_length_skipped);
	tcase_add_test(tc, rx_too_long_ends);
	tcase_add_test(tc, rx_cut_mid_frame);
	tcase_add_test(tc, rx_cut_mid_length);
	tcase_add_test(tc, rx_many_in_one_read);
	tcase_add_test(tc, rx_split_across_reads);
	tcase_add_test(tc, rx_garbage);
	tcase_add_test(tc, tx_records);
	tcase_add_test(tc, tx_partial_write_kept);
	suite_add_tcase(s, tc);
	tc = tcase_create("passt");
	tcase_add_test(tc, passt_started_and_reaped);
	tcase_add_test(tc, passt_dies);
	tcase_add_test(tc, passt_cannot_start);
	tcase_add_test(tc, passt_open_errors);
	tcase_add_test(tc, passt_socket_connects);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(net_stream_suite)

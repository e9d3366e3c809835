/* Unit tests for the gdb server (gdb/server.c) end to end over a socket against a fake target: a session, resumes and stops, no-ack mode and resends, hostile clients, the addresses it listens on. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/gdb-rsp.h"
#include "lkvm/gdb.h"
#include "gdb_helpers.h"

/* ---- a fake target: 2 threads, 64 KiB of memory at FAKE_BASE ---- */

#define FAKE_BASE 0x100000ULL
#define FAKE_MEM (64 * 1024)

static struct fake {
	pthread_mutex_t lock;
	struct gdb_x86_regs regs[2];
	u8 mem[FAKE_MEM];
	int stop_all, resume, last_step, detach, kill, bp_set, bp_clear;
	u64 bp_addr;
} fk = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The fake's counters are read by the test while the server's thread writes them. */
static int fk_get(const int *field)
{
	int v;

	pthread_mutex_lock(&fk.lock);
	v = *field;
	pthread_mutex_unlock(&fk.lock);
	return v;
}

static void fk_inc(int *field)
{
	pthread_mutex_lock(&fk.lock);
	(*field)++;
	pthread_mutex_unlock(&fk.lock);
}

static int f_nthreads(void *ctx)
{
	return 2;
}

static int f_stop_all(void *ctx)
{
	fk_inc(&fk.stop_all);
	return 0;
}

static int f_resume(void *ctx, int step)
{
	pthread_mutex_lock(&fk.lock);
	fk.resume++;
	fk.last_step = step;
	pthread_mutex_unlock(&fk.lock);
	return 0;
}

static int f_get_regs(void *ctx, int t, struct gdb_x86_regs *r)
{
	if (t < 1 || t > 2)
		return -ESRCH;
	pthread_mutex_lock(&fk.lock);
	*r = fk.regs[t - 1];
	pthread_mutex_unlock(&fk.lock);
	return 0;
}

static int f_set_regs(void *ctx, int t, const struct gdb_x86_regs *r)
{
	if (t < 1 || t > 2)
		return -ESRCH;
	pthread_mutex_lock(&fk.lock);
	fk.regs[t - 1] = *r;
	pthread_mutex_unlock(&fk.lock);
	return 0;
}

static int f_read_mem(void *ctx, int t, u64 gva, void *buf, size_t len)
{
	if (gva < FAKE_BASE || !range_ok(gva - FAKE_BASE, len, FAKE_MEM))
		return -EFAULT;
	pthread_mutex_lock(&fk.lock);
	memcpy(buf, fk.mem + (gva - FAKE_BASE), len);
	pthread_mutex_unlock(&fk.lock);
	return 0;
}

static int f_write_mem(void *ctx, int t, u64 gva, const void *buf, size_t len)
{
	if (gva < FAKE_BASE || !range_ok(gva - FAKE_BASE, len, FAKE_MEM))
		return -EFAULT;
	pthread_mutex_lock(&fk.lock);
	memcpy(fk.mem + (gva - FAKE_BASE), buf, len);
	pthread_mutex_unlock(&fk.lock);
	return 0;
}

static int f_set_bp(void *ctx, enum gdb_bp_kind kind, u64 addr, u64 len)
{
	if (kind == GDB_WP_READ)
		return -EOPNOTSUPP;
	pthread_mutex_lock(&fk.lock);
	fk.bp_set++;
	fk.bp_addr = addr;
	pthread_mutex_unlock(&fk.lock);
	return 0;
}

static int f_clear_bp(void *ctx, enum gdb_bp_kind kind, u64 addr, u64 len)
{
	fk_inc(&fk.bp_clear);
	return addr == fk.bp_addr ? 0 : -ENOENT;
}

static void f_detach(void *ctx)
{
	fk_inc(&fk.detach);
}

static void f_kill(void *ctx)
{
	fk_inc(&fk.kill);
}

static const struct gdb_target_ops fake_ops = {
	.nthreads = f_nthreads,
	.stop_all = f_stop_all,
	.resume = f_resume,
	.get_regs = f_get_regs,
	.set_regs = f_set_regs,
	.read_mem = f_read_mem,
	.write_mem = f_write_mem,
	.set_bp = f_set_bp,
	.clear_bp = f_clear_bp,
	.detach = f_detach,
	.kill = f_kill,
};

static char dir[64], sock_path[128];
static struct gdb_server *srv;

static void server_setup(void)
{
	char err[256] = "", addr[160];

	signal(SIGPIPE, SIG_IGN);
	pthread_mutex_lock(&fk.lock);
	fk.stop_all = fk.resume = fk.detach = fk.kill = fk.bp_set = fk.bp_clear = 0;
	pthread_mutex_unlock(&fk.lock);
	fill_regs(&fk.regs[0], 1);
	fill_regs(&fk.regs[1], 2);
	for (size_t i = 0; i < FAKE_MEM; i++)
		fk.mem[i] = (u8)(i * 3);
	strcpy(dir, "/tmp/lkvm-test-gdb-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(sock_path, sizeof(sock_path), "%s/gdb.sock", dir);
	snprintf(addr, sizeof(addr), "unix:%s", sock_path);
	ck_assert_msg(gdb_server_start(addr, &fake_ops, NULL, &srv, err, sizeof(err)) == 0, "%s",
		      err);
}

static void server_teardown(void)
{
	gdb_server_stop(srv);
	srv = NULL;
	/* The server removed its socket: the folder is empty. */
	ck_assert_int_eq(rmdir(dir), 0);
}

/* ---- a client: gdb's side of the wire, with its own decoder ---- */

struct client {
	int fd;
	bool no_ack;
	struct gdb_rx rx;
	u8 in[8192];
	size_t pos, len;
};

static void client_open(struct client *c)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	memset(c, 0, sizeof(*c));
	gdb_rx_init(&c->rx);
	strcpy(sa.sun_path, sock_path);
	c->fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_ge(c->fd, 0);
	ck_assert_int_eq(connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
}

static void client_close(struct client *c)
{
	close(c->fd);
	c->fd = -1;
}

static void raw(struct client *c, const void *buf, size_t len)
{
	ck_assert_uint_eq(write_full(c->fd, buf, len), len);
}

static void send_pkt(struct client *c, const char *payload, size_t len)
{
	char frame[GDB_FRAME_MAX];
	size_t n = gdb_frame(payload, len, frame, sizeof(frame));

	ck_assert_uint_gt(n, 0);
	raw(c, frame, n);
}

/* The next event from the server within 5 s; -1 at the end of the stream. */
static int next_event(struct client *c)
{
	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		enum gdb_rx_event ev = GDB_RX_NONE;
		ssize_t n;

		if (c->pos < c->len) {
			c->pos += gdb_rx_feed(&c->rx, c->in + c->pos, c->len - c->pos, &ev);
			if (ev != GDB_RX_NONE)
				return ev;
			continue;
		}
		ck_assert_msg(poll(&p, 1, 5000) == 1, "no answer from the server in 5 s");
		n = read(c->fd, c->in, sizeof(c->in));
		if (n <= 0)
			return -1;
		c->pos = 0;
		c->len = (size_t)n;
	}
}

/* The server's next packet (its '+' first, unless acks are off); acked as gdb does. */
static const char *reply_of(struct client *c, bool want_ack)
{
	int ev;

	if (want_ack && !c->no_ack)
		ck_assert_int_eq(next_event(c), GDB_RX_ACK);
	ev = next_event(c);
	ck_assert_msg(ev == GDB_RX_PACKET, "expected a packet, got event %d", ev);
	/* Not checked: after D or k the server may have closed already. */
	if (!c->no_ack && write(c->fd, "+", 1) < 0)
		return c->rx.buf;
	return c->rx.buf;
}

static const char *cmd(struct client *c, const char *payload)
{
	send_pkt(c, payload, strlen(payload));
	return reply_of(c, true);
}

/* The fake's counter reaches want within 5 s (the server's thread gets there). */
static void wait_for(const int *field, int want)
{
	for (int i = 0; i < 5000 && fk_get(field) < want; i++)
		usleep(1000);
	ck_assert_int_eq(fk_get(field), want);
}

/* ---- the server end to end ---- */

START_TEST(server_session)
{
	struct client c;
	char want[2 * sizeof(struct gdb_x86_regs) + 1] = "";
	const char *r;

	client_open(&c);
	r = cmd(&c, "qSupported:multiprocess+;swbreak+;xmlRegisters=i386");
	ck_assert_ptr_nonnull(strstr(r, "PacketSize=1000"));
	ck_assert_ptr_nonnull(strstr(r, "qXfer:features:read+"));
	/* Attaching stopped the VM, and the stop is what '?' says. */
	ck_assert_int_eq(fk_get(&fk.stop_all), 1);
	ck_assert_str_eq(cmd(&c, "?"), "T02thread:1;");
	ck_assert_str_eq(cmd(&c, "qAttached"), "1");
	ck_assert_str_eq(cmd(&c, "qOffsets"), "");
	ck_assert_str_eq(cmd(&c, "vMustReplyEmpty"), "");
	ck_assert_str_eq(cmd(&c, "vCont?"), "vCont;c;C;s;S;t");
	ck_assert_str_eq(cmd(&c, "qfThreadInfo"), "m1,2");
	ck_assert_str_eq(cmd(&c, "qsThreadInfo"), "l");
	ck_assert_str_eq(cmd(&c, "T2"), "OK");
	ck_assert_str_eq(cmd(&c, "T3"), "E03");
	r = cmd(&c, "qXfer:features:read:target.xml:0,ffb");
	ck_assert(r[0] == 'm' || r[0] == 'l');
	ck_assert_ptr_nonnull(strstr(r, "i386:x86-64"));
	ck_assert_str_eq(cmd(&c, "qXfer:features:read:target.xml:fffff,ffb"), "l");
	/* Registers of the thread gdb picked. */
	ck_assert_str_eq(cmd(&c, "Hg2"), "OK");
	ck_assert_str_eq(cmd(&c, "qC"), "QC2");
	gdb_regs_to_hex(&fk.regs[1], want);
	ck_assert_str_eq(cmd(&c, "g"), want);
	ck_assert_str_eq(cmd(&c, "P10=efbeadde00000000"), "OK");
	ck_assert_str_eq(cmd(&c, "p10"), "efbeadde00000000");
	ck_assert_str_eq(cmd(&c, "p1000"), "E16");
	ck_assert_str_eq(cmd(&c, "Hg3"), "E03");
	ck_assert_str_eq(cmd(&c, "Hg1"), "OK");
	ck_assert_int_eq(gdb_reg_to_hex(&fk.regs[0], 16, want), 0);
	want[16] = '\0';
	ck_assert_str_eq(cmd(&c, "p10"), want); /* thread 1's rip, untouched */
	/* Memory: read, write in hex and in binary (escaped on the wire), unmapped. */
	ck_assert_str_eq(cmd(&c, "m100000,4"), "00030609");
	ck_assert_str_eq(cmd(&c, "M100010,2:abcd"), "OK");
	ck_assert_str_eq(cmd(&c, "m100010,2"), "abcd");
	send_pkt(&c, "X100020,3:$#*", 13);
	ck_assert_str_eq(reply_of(&c, true), "OK");
	ck_assert_str_eq(cmd(&c, "m100020,3"), "24232a");
	ck_assert_str_eq(cmd(&c, "m0,4"), "E0e");
	ck_assert_str_eq(cmd(&c, "M100000,1:zz"), "E16");
	/* The end of the fake's memory: a read across it gets the part up to the page end. */
	ck_assert_uint_eq(strlen(cmd(&c, "m10fff0,40")), 32);
	/* Breakpoints; a kind the target refuses is "not supported", the empty reply. */
	ck_assert_str_eq(cmd(&c, "Z0,100040,1"), "OK");
	ck_assert_int_eq(fk_get(&fk.bp_set), 1);
	ck_assert_str_eq(cmd(&c, "z0,100040,1"), "OK");
	ck_assert_str_eq(cmd(&c, "z0,100041,1"), "E02");
	ck_assert_str_eq(cmd(&c, "Z3,100040,1"), "");
	ck_assert_str_eq(cmd(&c, "D"), "OK");
	ck_assert_int_eq(next_event(&c), -1);
	ck_assert_int_eq(fk_get(&fk.detach), 1);
	client_close(&c);
}
END_TEST

static void *notify_later(void *arg)
{
	usleep(20000);
	gdb_server_notify_stop(srv, arg);
	return NULL;
}

/* c, s, and Ctrl-C: the stop is the reply, from a notify on another thread or gdb's 0x03. */
START_TEST(server_resume_and_stops)
{
	struct gdb_stop trap = { .reason = GDB_STOP_TRAP, .thread = 2 };
	struct gdb_stop watch = {
		.reason = GDB_STOP_WATCH, .thread = 1, .watch = GDB_WP_WRITE, .watch_addr = 0x100050
	};
	struct gdb_server_stats st;
	struct client c;
	pthread_t t;

	client_open(&c);
	ck_assert_str_eq(cmd(&c, "?"), "T02thread:1;");
	send_pkt(&c, "vCont;c", 7);
	ck_assert_int_eq(next_event(&c), GDB_RX_ACK);
	wait_for(&fk.resume, 1);
	ck_assert_int_eq(fk_get(&fk.last_step), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, notify_later, &trap), 0);
	ck_assert_str_eq(reply_of(&c, false), "T05thread:2;");
	pthread_join(t, NULL);
	ck_assert_int_eq(fk_get(&fk.stop_all), 2);
	/* The stopped thread is now the current one. */
	ck_assert_str_eq(cmd(&c, "qC"), "QC2");
	/* Step thread 1, the others held; a watchpoint ends it. */
	send_pkt(&c, "vCont;s:1;c", 11);
	ck_assert_int_eq(next_event(&c), GDB_RX_ACK);
	wait_for(&fk.resume, 2);
	ck_assert_int_eq(fk_get(&fk.last_step), 1);
	ck_assert_int_eq(pthread_create(&t, NULL, notify_later, &watch), 0);
	ck_assert_str_eq(reply_of(&c, false), "T05watch:100050;thread:1;");
	pthread_join(t, NULL);
	/* Continue, then gdb's Ctrl-C. */
	send_pkt(&c, "c", 1);
	ck_assert_int_eq(next_event(&c), GDB_RX_ACK);
	wait_for(&fk.resume, 3);
	raw(&c, "\x03", 1);
	ck_assert_str_eq(reply_of(&c, false), "T02thread:1;");
	ck_assert_int_eq(fk_get(&fk.stop_all), 4);
	/* A Ctrl-C while stopped is nothing; 'c' at an address moves rip first. */
	raw(&c, "\x03", 1);
	send_pkt(&c, "c100080", 7);
	ck_assert_int_eq(next_event(&c), GDB_RX_ACK);
	wait_for(&fk.resume, 4);
	pthread_mutex_lock(&fk.lock);
	ck_assert_uint_eq(fk.regs[0].rip, 0x100080);
	pthread_mutex_unlock(&fk.lock);
	raw(&c, "\x03", 1);
	ck_assert_str_eq(reply_of(&c, false), "T02thread:1;");
	gdb_server_get_stats(srv, &st);
	ck_assert_uint_eq(st.stops, 5); /* attach, trap, watch, two Ctrl-C */
	ck_assert_uint_eq(st.breakpoints_hit, 2);
	ck_assert_uint_eq(st.bad_packets, 0);
	ck_assert_uint_eq(st.packets, 6);
	/* gdb vanishing while the VM runs is a detach too. */
	send_pkt(&c, "c", 1);
	wait_for(&fk.resume, 5);
	client_close(&c);
	wait_for(&fk.detach, 1);
}
END_TEST

START_TEST(server_noack_and_resend)
{
	struct client c;

	client_open(&c);
	ck_assert_str_eq(cmd(&c, "qAttached"), "1");
	/* '-': the last reply again. */
	raw(&c, "-", 1);
	ck_assert_str_eq(reply_of(&c, false), "1");
	ck_assert_str_eq(cmd(&c, "QStartNoAckMode"), "OK");
	c.no_ack = true;
	ck_assert_str_eq(cmd(&c, "qC"), "QC1");
	/* No '-' for a bad packet either: it is dropped, the next one answered. */
	raw(&c, "$qC#00", 6);
	ck_assert_str_eq(cmd(&c, "?"), "T02thread:1;");
	send_pkt(&c, "k", 1);
	ck_assert_int_eq(next_event(&c), -1);
	ck_assert_int_eq(fk_get(&fk.kill), 1);
	ck_assert_int_eq(fk_get(&fk.detach), 0);
	client_close(&c);
}
END_TEST

/* Garbage, wrong checksums, a packet over the limit, one with no end, a second client, a
 * client gone mid-packet: the server answers what it must, detaches, serves the next. */
START_TEST(server_hostile_clients)
{
	struct client a, b;
	struct gdb_server_stats st;
	size_t len;
	char *big = long_packet(3 * GDB_PACKET_MAX, &len);

	client_open(&a);
	raw(&a, "hello\xff\x7f garbage #00 }}", 21);
	raw(&a, "$g#00", 5);
	ck_assert_int_eq(next_event(&a), GDB_RX_NAK);
	raw(&a, big, len);
	ck_assert_int_eq(next_event(&a), GDB_RX_NAK);
	ck_assert_str_eq(cmd(&a, "qC"), "QC1");
	/* A second client while one is attached: closed at once; the first goes on. */
	client_open(&b);
	ck_assert_int_eq(next_event(&b), -1);
	client_close(&b);
	ck_assert_str_eq(cmd(&a, "qC"), "QC1");
	/* A '$' and ten times the limit with no end, then the client vanishes: a detach. */
	big[0] = '$';
	memset(big + 1, 'x', len - 1);
	raw(&a, big, len);
	client_close(&a);
	wait_for(&fk.detach, 1);
	gdb_server_get_stats(srv, &st);
	ck_assert_uint_eq(st.bad_packets, 2);
	/* The next client is served, and stops the VM again. */
	client_open(&b);
	ck_assert_str_eq(cmd(&b, "?"), "T02thread:1;");
	ck_assert_int_eq(fk_get(&fk.stop_all), 2);
	raw(&b, "$m100000,", 9);
	client_close(&b);
	wait_for(&fk.detach, 2);
	free(big);
}
END_TEST

static int start_at(const char *addr, struct gdb_server **s, char *err, size_t errlen)
{
	err[0] = '\0';
	return gdb_server_start(addr, &fake_ops, NULL, s, err, errlen);
}

START_TEST(server_addresses)
{
	static const char *const bad[] = { "",
					   "abc",
					   "0",
					   "70000",
					   "1234x",
					   "host:",
					   ":1234",
					   "unix:",
					   "-1",
					   "[::1",
					   "+80",
					   "1:2:x",
					   "99999999999999999999999" };
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	struct gdb_server *s;
	struct client c;
	char err[256], addr[64];
	int fd;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		ck_assert_msg(start_at(bad[i], &s, err, sizeof(err)) == -EINVAL, "'%s'", bad[i]);
		ck_assert_msg(err[0] && !strchr(err, '\n'), "'%s': '%s'", bad[i], err);
	}
	/* A port in use: one line that says so. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd, 1), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	snprintf(addr, sizeof(addr), "%u", ntohs(sa.sin_port));
	ck_assert_int_eq(start_at(addr, &s, err, sizeof(err)), -EADDRINUSE);
	ck_assert_msg(strstr(err, "in use") && strstr(err, "127.0.0.1"), "%s", err);
	close(fd);
	/* Free again: served over TCP. */
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sa.sin_port));
	ck_assert_msg(start_at(addr, &s, err, sizeof(err)) == 0, "%s", err);
	memset(&c, 0, sizeof(c));
	gdb_rx_init(&c.rx);
	c.fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(c.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_str_eq(cmd(&c, "qAttached"), "1");
	client_close(&c);
	gdb_server_stop(s);
}
END_TEST

START_TEST(server_unix_paths)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct gdb_server *s;
	struct stat st;
	char err[256], addr[160];
	int fd;

	strcpy(dir, "/tmp/lkvm-test-gdb-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(sock_path, sizeof(sock_path), "%s/gdb.sock", dir);
	snprintf(addr, sizeof(addr), "unix:%s", sock_path);
	/* Not a socket: left alone, refused. */
	fd = open(sock_path, O_CREAT | O_WRONLY, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(start_at(addr, &s, err, sizeof(err)), -EADDRINUSE);
	ck_assert_ptr_nonnull(strstr(err, "not a socket"));
	ck_assert_int_eq(unlink(sock_path), 0);
	/* A stale socket (its server died): taken over. */
	strcpy(sa.sun_path, sock_path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	ck_assert_msg(start_at(addr, &s, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(stat(sock_path, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
	/* A live one: refused, and left alone. */
	ck_assert_int_eq(start_at(addr, &srv, err, sizeof(err)), -EADDRINUSE);
	ck_assert_ptr_nonnull(strstr(err, "in use"));
	gdb_server_stop(s);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* Entries in dir other than . and .. */
static int dir_entries(const char *d)
{
	DIR *dp = opendir(d);
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(dp);
	while ((e = readdir(dp)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(dp);
	return n;
}

/*
 * unix:PATH's mode is 0600 whatever the umask (here 0, which would leave a bound socket 0777)
 * and set without going through PATH: a symlink at PATH is neither followed nor replaced (its
 * target keeps its mode), and the private directory the socket was bound in is gone.
 */
START_TEST(server_unix_mode_no_follow)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char err[256], addr[160], target[160];
	struct gdb_server *s;
	struct stat st;
	mode_t old;
	int fd;

	strcpy(dir, "/tmp/lkvm-test-gdb-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(sock_path, sizeof(sock_path), "%s/gdb.sock", dir);
	snprintf(target, sizeof(target), "%s/target", dir);
	snprintf(addr, sizeof(addr), "unix:%s", sock_path);
	old = umask(0);
	ck_assert_msg(start_at(addr, &s, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(lstat(sock_path, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	ck_assert_int_eq(st.st_mode & 07777, 0600);
	ck_assert_int_eq(st.st_uid, geteuid());
	ck_assert_int_eq(dir_entries(dir), 1); /* no private directory left */
	strcpy(sa.sun_path, sock_path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	gdb_server_stop(s);
	ck_assert_int_eq(lstat(sock_path, &st), -1);
	/* A symlink at PATH, to a file of ours: refused, the link and its target as they were. */
	fd = open(target, O_CREAT | O_WRONLY, 0644);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(symlink(target, sock_path), 0);
	ck_assert_int_eq(start_at(addr, &s, err, sizeof(err)), -EADDRINUSE);
	ck_assert_ptr_nonnull(strstr(err, "not a socket"));
	ck_assert_int_eq(lstat(sock_path, &st), 0);
	ck_assert(S_ISLNK(st.st_mode));
	ck_assert_int_eq(stat(target, &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	ck_assert_int_eq(st.st_mode & 07777, 0644);
	ck_assert_int_eq(dir_entries(dir), 2);
	umask(old);
	ck_assert_int_eq(unlink(sock_path), 0);
	ck_assert_int_eq(unlink(target), 0);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static Suite *gdb_server_suite(void)
{
	Suite *s = suite_create("gdb-server");
	TCase *srv_tc = tcase_create("server");
	TCase *addr_tc = tcase_create("addresses");

	tcase_add_checked_fixture(srv_tc, server_setup, server_teardown);
	tcase_add_test(srv_tc, server_session);
	tcase_add_test(srv_tc, server_resume_and_stops);
	tcase_add_test(srv_tc, server_noack_and_resend);
	tcase_add_test(srv_tc, server_hostile_clients);
	suite_add_tcase(s, srv_tc);
	tcase_add_test(addr_tc, server_addresses);
	tcase_add_test(addr_tc, server_unix_paths);
	tcase_add_test(addr_tc, server_unix_mode_no_follow);
	suite_add_tcase(s, addr_tc);
	return s;
}

LKVM_CHECK_MAIN(gdb_server_suite)

/* Unit tests for the gdb server (gdb/): packet decoder and encoder, command parser, registers and target.xml, and the server end to end over a socket against a fake target, hostile clients included. */
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

/* ---- the decoder ---- */

/* Feed all of data in chunks of chunk bytes; returns the events in order (at most max). */
static int feed_all(struct gdb_rx *rx, const char *data, size_t len, size_t chunk,
		    enum gdb_rx_event *evs, int max, char (*pkts)[GDB_PACKET_MAX + 1])
{
	int n = 0;

	for (size_t off = 0; off < len;) {
		size_t end = MIN(len, off + chunk);

		while (off < end) {
			enum gdb_rx_event ev;

			off += gdb_rx_feed(rx, (const u8 *)data + off, end - off, &ev);
			if (ev == GDB_RX_NONE)
				continue;
			ck_assert_int_lt(n, max);
			if (ev == GDB_RX_PACKET && pkts)
				memcpy(pkts[n], rx->buf, rx->len + 1);
			evs[n++] = ev;
		}
	}
	return n;
}

static char pkts[4][GDB_PACKET_MAX + 1];

START_TEST(rx_split_chunks)
{
	const char *in = "+$qSupported:multiprocess+;swbreak+#1b$g#67-";
	struct gdb_rx rx;
	enum gdb_rx_event ev[8];

	/* Every chunk size, 1 byte to the whole: the same events, the same packets. */
	for (size_t chunk = 1; chunk <= strlen(in); chunk++) {
		gdb_rx_init(&rx);
		ck_assert_int_eq(feed_all(&rx, in, strlen(in), chunk, ev, 8, pkts), 4);
		ck_assert_int_eq(ev[0], GDB_RX_ACK);
		ck_assert_int_eq(ev[1], GDB_RX_PACKET);
		ck_assert_str_eq(pkts[1], "qSupported:multiprocess+;swbreak+");
		ck_assert_int_eq(ev[2], GDB_RX_PACKET);
		ck_assert_str_eq(pkts[2], "g");
		ck_assert_int_eq(ev[3], GDB_RX_NAK);
	}
}
END_TEST

START_TEST(rx_escapes_and_frame)
{
	const char payload[] = "X10,4:$#}*";
	char frame[64];
	size_t n = gdb_frame(payload, strlen(payload), frame, sizeof(frame));
	struct gdb_rx rx;
	enum gdb_rx_event ev;

	/* Escaped: none of $ # } * appears raw between the frame's '$' and '#'. */
	ck_assert_uint_eq(n, 1 + 6 + 4 * 2 + 3);
	ck_assert(memchr(frame + 1, '$', n - 4) == NULL);
	ck_assert(memchr(frame + 1, '*', n - 4) == NULL);
	ck_assert_mem_eq(frame + 7, "}\x04}\x03}]}\x0a", 8);
	gdb_rx_init(&rx);
	ck_assert_uint_eq(gdb_rx_feed(&rx, (u8 *)frame, n, &ev), n);
	ck_assert_int_eq(ev, GDB_RX_PACKET);
	ck_assert_uint_eq(rx.len, strlen(payload));
	ck_assert_mem_eq(rx.buf, payload, rx.len);
	/* The empty reply, and a frame that cannot fit. */
	ck_assert_uint_eq(gdb_frame("", 0, frame, sizeof(frame)), 4);
	ck_assert_mem_eq(frame, "$#00", 4);
	ck_assert_uint_eq(gdb_frame(payload, strlen(payload), frame, 12), 0);
}
END_TEST

START_TEST(rx_bad_checksums)
{
	const char *in = "$g#68$g#zz$g#6$g#67";
	struct gdb_rx rx;
	enum gdb_rx_event ev[8];

	gdb_rx_init(&rx);
	/* #68: wrong; #zz: not hex; "#6$g" takes '$' as the second digit; then a good one. */
	ck_assert_int_eq(feed_all(&rx, in, strlen(in), 3, ev, 8, pkts), 3);
	ck_assert_int_eq(ev[0], GDB_RX_BAD);
	ck_assert_int_eq(ev[1], GDB_RX_BAD);
	ck_assert_int_eq(ev[2], GDB_RX_BAD);
	/* After the bad ones the decoder is in step again. */
	ck_assert_int_eq(feed_all(&rx, "$g#67", 5, 5, ev, 8, pkts), 1);
	ck_assert_int_eq(ev[0], GDB_RX_PACKET);
}
END_TEST

/* '$', n bytes of 'a', '#', checksum. */
static char *long_packet(size_t n, size_t *len)
{
	char *p = malloc(n + 5); /* snprintf's NUL after the checksum */
	u8 sum = 0;

	p[0] = '$';
	memset(p + 1, 'a', n);
	for (size_t i = 0; i < n; i++)
		sum += 'a';
	snprintf(p + 1 + n, 4, "#%02x", sum);
	*len = n + 4;
	return p;
}

START_TEST(rx_oversize)
{
	struct gdb_rx rx;
	enum gdb_rx_event ev[4];
	size_t len;
	char *p = long_packet(GDB_PACKET_MAX, &len);

	gdb_rx_init(&rx);
	ck_assert_int_eq(feed_all(&rx, p, len, 100, ev, 4, NULL), 1);
	ck_assert_int_eq(ev[0], GDB_RX_PACKET);
	ck_assert_uint_eq(rx.len, GDB_PACKET_MAX);
	free(p);
	/* One byte more, checksum right: dropped, never stored past the buffer. */
	p = long_packet(GDB_PACKET_MAX + 1, &len);
	ck_assert_int_eq(feed_all(&rx, p, len, 100, ev, 4, NULL), 1);
	ck_assert_int_eq(ev[0], GDB_RX_BAD);
	ck_assert_uint_eq(rx.len, GDB_PACKET_MAX);
	free(p);
	/* Ten times the limit, also fine. */
	p = long_packet(10 * GDB_PACKET_MAX, &len);
	ck_assert_int_eq(feed_all(&rx, p, len, 4096, ev, 4, NULL), 1);
	ck_assert_int_eq(ev[0], GDB_RX_BAD);
	free(p);
}
END_TEST

START_TEST(rx_interrupt)
{
	/* 0x03 between packets is Ctrl-C; inside one (X's binary data) it is a byte. */
	const char in[] = "\x03garbage$X0,1:\x03#22\x03";
	struct gdb_rx rx;
	enum gdb_rx_event ev[8];
	int n;

	gdb_rx_init(&rx);
	n = feed_all(&rx, in, sizeof(in) - 1, 2, ev, 8, pkts);
	ck_assert_int_eq(n, 3);
	ck_assert_int_eq(ev[0], GDB_RX_INTERRUPT);
	ck_assert_int_eq(ev[1], GDB_RX_PACKET);
	ck_assert_mem_eq(pkts[1], "X0,1:\x03", 6);
	ck_assert_int_eq(ev[2], GDB_RX_INTERRUPT);
}
END_TEST

/* ---- the parser ---- */

static struct gdb_cmd parse(const char *p)
{
	struct gdb_cmd c;

	gdb_parse(p, strlen(p), &c);
	return c;
}

START_TEST(parse_fields)
{
	struct gdb_cmd c;

	c = parse("m ffffffff81000000,40");
	ck_assert_int_eq(c.kind, GDB_CMD_BAD); /* no space allowed */
	c = parse("mffffffff81000000,40");
	ck_assert_int_eq(c.kind, GDB_CMD_READ_MEM);
	ck_assert_uint_eq(c.addr, 0xffffffff81000000ULL);
	ck_assert_uint_eq(c.len, 0x40);
	c = parse("M1000,2:abCD");
	ck_assert_int_eq(c.kind, GDB_CMD_WRITE_MEM);
	ck_assert_uint_eq(c.data_len, 4);
	ck_assert_mem_eq(c.data, "abCD", 4);
	c = parse("X1000,3:a:b");
	ck_assert_int_eq(c.kind, GDB_CMD_WRITE_MEM_X);
	ck_assert_mem_eq(c.data, "a:b", 3);
	c = parse("Z1,ffffffff81000010,1");
	ck_assert_int_eq(c.kind, GDB_CMD_INSERT_BP);
	ck_assert_int_eq(c.bp, GDB_BP_HW);
	ck_assert_uint_eq(c.addr, 0xffffffff81000010ULL);
	c = parse("z2,2000,8");
	ck_assert_int_eq(c.kind, GDB_CMD_REMOVE_BP);
	ck_assert_int_eq(c.bp, GDB_WP_WRITE);
	ck_assert_uint_eq(c.len, 8);
	c = parse("Hg-1");
	ck_assert_int_eq(c.kind, GDB_CMD_SET_THREAD);
	ck_assert_int_eq(c.op, 'g');
	ck_assert_int_eq(c.thread, GDB_THREAD_ALL);
	c = parse("Hc0");
	ck_assert_int_eq(c.op, 'c');
	ck_assert_int_eq(c.thread, GDB_THREAD_ANY);
	c = parse("T2");
	ck_assert_int_eq(c.kind, GDB_CMD_THREAD_ALIVE);
	ck_assert_int_eq(c.thread, 2);
	c = parse("p10");
	ck_assert_int_eq(c.kind, GDB_CMD_READ_REG);
	ck_assert_uint_eq(c.reg, 16);
	c = parse("P11=01020304");
	ck_assert_int_eq(c.kind, GDB_CMD_WRITE_REG);
	ck_assert_uint_eq(c.reg, 17);
	ck_assert_uint_eq(c.data_len, 8);
	c = parse("qXfer:features:read:target.xml:7f,ffb");
	ck_assert_int_eq(c.kind, GDB_CMD_XFER_FEATURES);
	ck_assert_uint_eq(c.addr, 0x7f);
	ck_assert_uint_eq(c.len, 0xffb);
	ck_assert_int_eq(parse("D;1").kind, GDB_CMD_DETACH);
	ck_assert_int_eq(parse("qSupported:multiprocess+").kind, GDB_CMD_SUPPORTED);
	ck_assert_int_eq(parse("qAttached:1").kind, GDB_CMD_ATTACHED);
	ck_assert_int_eq(parse("QStartNoAckMode").kind, GDB_CMD_NOACK);
}
END_TEST

START_TEST(parse_resume)
{
	struct gdb_cmd c;

	c = parse("c");
	ck_assert_int_eq(c.kind, GDB_CMD_CONTINUE);
	ck_assert(!c.has_addr);
	c = parse("s1000");
	ck_assert_int_eq(c.kind, GDB_CMD_STEP);
	ck_assert(c.has_addr);
	ck_assert_uint_eq(c.addr, 0x1000);
	c = parse("C0b;2000"); /* the signal is dropped */
	ck_assert_int_eq(c.kind, GDB_CMD_CONTINUE);
	ck_assert_uint_eq(c.addr, 0x2000);
	ck_assert_int_eq(parse("S05").kind, GDB_CMD_STEP);
	ck_assert_int_eq(parse("vCont?").kind, GDB_CMD_VCONT_QUERY);
	ck_assert_int_eq(parse("vCont;c").kind, GDB_CMD_CONTINUE);
	ck_assert_int_eq(parse("vCont;C05").kind, GDB_CMD_CONTINUE);
	ck_assert_int_eq(parse("vCont;t").kind, GDB_CMD_VCONT_STOP);
	/* gdb's step of thread 2 with the others continued: a step of thread 2. */
	c = parse("vCont;s:2;c");
	ck_assert_int_eq(c.kind, GDB_CMD_STEP);
	ck_assert_int_eq(c.thread, 2);
	c = parse("vCont;c;S05:1");
	ck_assert_int_eq(c.kind, GDB_CMD_STEP);
	ck_assert_int_eq(c.thread, 1);
	ck_assert_int_eq(parse("vCont;s").thread, GDB_THREAD_ANY);
}
END_TEST

/* Malformed: answered E. */
static const char *const malformed[] = {
	"m10000000000000000,1", /* 17 digits: past 64 bits */
	"mfffffffffffffffff,1",
	"m1000,",
	"m1000",
	"mxyz,1",
	"m1000,4;",
	"M1000,2:abc",
	"M1000,3:abcdef0",
	"X1000,4:ab",
	"Hx1",
	"Hg10000",
	"Hg-2",
	"T",
	"Tzz",
	"p",
	"p100000000",
	"P1",
	"Z0,1000",
	"Z0,1000,1;X1,ab",
	"z0,,1",
	"c1000x",
	"C",
	"C100",
	"C05;",
	"vCont;x",
	"vCont;s:",
	"vCont;c;",
	"vCont;",
	"qXfer:features:read:other.xml:0,10",
	"qXfer:features:read:target.xml:0",
	"D1",
	"qSupportedx",
};
/* Not ours: answered with the empty packet. */
static const char *const foreign[] = {
	"Z5,1000,1",
	"qXfer:libraries:read::0,10",
	"vMustReplyEmpty",
	"qOffsets",
	"qTStatus",
	"",
	"!",
	"vKill;1",
	"kk",
	"??",
	"gg",
	"qCx",
};

START_TEST(parse_bad)
{
	for (size_t i = 0; i < ARRAY_SIZE(malformed); i++)
		ck_assert_msg(parse(malformed[i]).kind == GDB_CMD_BAD, "'%s' parsed as %d",
			      malformed[i], parse(malformed[i]).kind);
	for (size_t i = 0; i < ARRAY_SIZE(foreign); i++)
		ck_assert_msg(parse(foreign[i]).kind == GDB_CMD_UNKNOWN, "'%s' parsed as %d",
			      foreign[i], parse(foreign[i]).kind);
	/* 16 digits are fine, leading zeros too. */
	ck_assert_uint_eq(parse("mffffffffffffffff,1").addr, ~0ULL);
	ck_assert_uint_eq(parse("m00000000000000000001,1").addr, 1);
}
END_TEST

/* ---- registers and target.xml ---- */

static void fill_regs(struct gdb_x86_regs *r, u8 seed)
{
	u8 *p = (u8 *)r;

	for (size_t i = 0; i < sizeof(*r); i++)
		p[i] = (u8)(seed + i * 7);
}

START_TEST(regs_round_trip)
{
	struct gdb_x86_regs a, b;
	size_t total = gdb_regs_size();
	char *hex = malloc(2 * total), one[40];

	/* gdb's amd64 layout: 16+1 x 8, eflags and 6 selectors x 4, 8 x 10, 8 x 4, 16 x 16, 4;
	 * then the 9 system registers x 8. */
	ck_assert_uint_eq(total, 17 * 8 + 7 * 4 + 8 * 10 + 8 * 4 + 16 * 16 + 4 + 9 * 8);
	ck_assert_str_eq(gdb_reg_name(0), "rax");
	ck_assert_str_eq(gdb_reg_name(16), "rip");
	ck_assert_str_eq(gdb_reg_name(17), "eflags");
	ck_assert_str_eq(gdb_reg_name(24), "st0");
	ck_assert_str_eq(gdb_reg_name(40), "xmm0");
	ck_assert_ptr_null(gdb_reg_name(gdb_regs_count()));
	fill_regs(&a, 1);
	memset(&b, 0, sizeof(b));
	gdb_regs_to_hex(&a, hex);
	ck_assert_int_eq(gdb_regs_from_hex(&b, hex, 2 * total), 0);
	/* Field by field: the struct's padding is not on the wire. */
	for (unsigned n = 0; n < gdb_regs_count(); n++) {
		char ha[40], hb[40];

		ck_assert_int_eq(gdb_reg_to_hex(&a, n, ha), 0);
		ck_assert_int_eq(gdb_reg_to_hex(&b, n, hb), 0);
		ck_assert_mem_eq(ha, hb, 2 * gdb_reg_size(n));
	}
	/* Little endian: rax 0x0102030405060708 is 0807060504030201 first on the wire. */
	a.gpr[0] = 0x0102030405060708ULL;
	a.eflags = 0x246;
	gdb_regs_to_hex(&a, hex);
	ck_assert_mem_eq(hex, "0807060504030201", 16);
	ck_assert_int_eq(gdb_reg_to_hex(&a, 17, one), 0);
	ck_assert_mem_eq(one, "46020000", 8);
	ck_assert_int_eq(gdb_reg_from_hex(&b, 16, "efbeadde00000000", 16), 0);
	ck_assert_uint_eq(b.rip, 0xdeadbeef);
	free(hex);
}
END_TEST

START_TEST(regs_bad_hex)
{
	struct gdb_x86_regs a, b;
	size_t total = gdb_regs_size();
	char *hex = malloc(2 * total + 2);

	fill_regs(&a, 3);
	b = a;
	gdb_regs_to_hex(&a, hex);
	hex[2 * total] = '0';
	hex[2 * total + 1] = '0';
	ck_assert_int_eq(gdb_regs_from_hex(&b, hex, 2 * total + 2), -EINVAL); /* too long */
	ck_assert_int_eq(gdb_regs_from_hex(&b, hex, 3), -EINVAL);	      /* odd */
	hex[2 * total - 1] = 'g';
	ck_assert_int_eq(gdb_regs_from_hex(&b, hex, 2 * total), -EINVAL);
	ck_assert_mem_eq(&a, &b, sizeof(a)); /* a bad digit at the end changed nothing */
	/* A short G sets the registers it reaches. */
	ck_assert_int_eq(gdb_regs_from_hex(&b, "ffffffffffffffff", 16), 0);
	ck_assert_uint_eq(b.gpr[0], ~0ULL);
	ck_assert_uint_eq(b.gpr[1], a.gpr[1]);
	ck_assert_int_eq(gdb_reg_from_hex(&b, 16, "00", 2), -EINVAL); /* rip is 8 bytes */
	ck_assert_int_eq(gdb_reg_from_hex(&b, gdb_regs_count(), "00", 2), -EINVAL);
	ck_assert_int_eq(gdb_reg_to_hex(&b, gdb_regs_count(), hex), -EINVAL);
	free(hex);
}
END_TEST

START_TEST(xml_names_every_register)
{
	size_t len = gdb_target_xml(NULL, 0);
	char *xml = malloc(len + 1), needle[96];

	ck_assert_uint_eq(gdb_target_xml(xml, len + 1), len);
	ck_assert_uint_eq(strlen(xml), len);
	ck_assert_ptr_nonnull(strstr(xml, "<architecture>i386:x86-64</architecture>"));
	ck_assert_ptr_nonnull(strstr(xml, "<feature name=\"org.gnu.gdb.i386.core\">"));
	ck_assert_ptr_nonnull(strstr(xml, "<feature name=\"org.gnu.gdb.i386.sse\">"));
	for (unsigned n = 0; n < gdb_regs_count(); n++) {
		snprintf(needle, sizeof(needle), "<reg name=\"%s\" bitsize=\"%zu\"",
			 gdb_reg_name(n), 8 * gdb_reg_size(n));
		ck_assert_msg(strstr(xml, needle), "target.xml lacks %s", needle);
		snprintf(needle, sizeof(needle), "regnum=\"%u\"", n);
		ck_assert_msg(strstr(xml, needle), "target.xml lacks %s", needle);
	}
	for (const char *r = "fs_base\0gs_base\0k_gs_base\0cr0\0cr2\0cr3\0cr4\0cr8\0efer\0"; *r;
	     r += strlen(r) + 1) {
		snprintf(needle, sizeof(needle), "<reg name=\"%s\"", r);
		ck_assert_msg(strstr(xml, needle), "target.xml lacks %s", r);
	}
	/* Cut short: NUL-terminated, the full length still returned. */
	ck_assert_uint_eq(gdb_target_xml(xml, 10), len);
	ck_assert_uint_eq(strlen(xml), 9);
	free(xml);
}
END_TEST

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

static Suite *gdb_suite(void)
{
	Suite *s = suite_create("gdb");
	TCase *tc = tcase_create("rsp");
	TCase *srv_tc = tcase_create("server");
	TCase *addr_tc = tcase_create("addresses");

	tcase_add_test(tc, rx_split_chunks);
	tcase_add_test(tc, rx_escapes_and_frame);
	tcase_add_test(tc, rx_bad_checksums);
	tcase_add_test(tc, rx_oversize);
	tcase_add_test(tc, rx_interrupt);
	tcase_add_test(tc, parse_fields);
	tcase_add_test(tc, parse_resume);
	tcase_add_test(tc, parse_bad);
	tcase_add_test(tc, regs_round_trip);
	tcase_add_test(tc, regs_bad_hex);
	tcase_add_test(tc, xml_names_every_register);
	suite_add_tcase(s, tc);
	tcase_add_checked_fixture(srv_tc, server_setup, server_teardown);
	tcase_add_test(srv_tc, server_session);
	tcase_add_test(srv_tc, server_resume_and_stops);
	tcase_add_test(srv_tc, server_noack_and_resend);
	tcase_add_test(srv_tc, server_hostile_clients);
	suite_add_tcase(s, srv_tc);
	tcase_add_test(addr_tc, server_addresses);
	tcase_add_test(addr_tc, server_unix_paths);
	suite_add_tcase(s, addr_tc);
	return s;
}

LKVM_CHECK_MAIN(gdb_suite)

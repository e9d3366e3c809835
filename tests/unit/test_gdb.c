/* Unit tests for the gdb server's protocol layer (gdb/rsp.c, gdb/commands.c, gdb/target-xml.c): packet decoder and encoder, command parser, registers and target.xml; the server itself in test_gdb_server.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "gdb_helpers.h"
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

static Suite *gdb_suite(void)
{
	Suite *s = suite_create("gdb");
	TCase *tc = tcase_create("rsp");

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
	return s;
}

LKVM_CHECK_MAIN(gdb_suite)

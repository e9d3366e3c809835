/* Unit tests of the 16550A UART: transmit, interrupt logic, loopback, DLAB, RX FIFO. */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "check_main.h"
#include "lkvm/dev.h"
#include "lkvm/hw.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"

#include "fake_vm.h"

#define BASE 0x3f8
#define IRQ 4

/* The hooks get the struct kvm; the test keeps its observations around it. */
struct tvm {
	struct kvm kvm;
	struct serial8250 *s;
	u8 out[256];
	size_t out_len;
	int levels[64];
	int nr_levels;
};

#define TVM(k) ((struct tvm *)((char *)(k)-offsetof(struct tvm, kvm)))

static int fake_irq(struct kvm *kvm, u32 irq, int level)
{
	struct tvm *t = TVM(kvm);

	ck_assert_uint_eq(irq, IRQ);
	ck_assert_int_lt(t->nr_levels, 64);
	t->levels[t->nr_levels++] = level;
	return 0;
}

static void fake_out(struct kvm *kvm, const u8 *buf, size_t len)
{
	struct tvm *t = TVM(kvm);

	ck_assert_uint_le(t->out_len + len, sizeof(t->out));
	memcpy(t->out + t->out_len, buf, len);
	t->out_len += len;
}

static struct tvm *tvm_new(void)
{
	struct tvm *t = calloc(1, sizeof(*t));

	ck_assert_ptr_nonnull(t);
	fake_vm_init(&t->kvm, 0);
	t->s = serial8250_create(&t->kvm, BASE, IRQ);
	ck_assert_ptr_nonnull(t->s);
	serial8250_set_hooks(t->s, fake_irq, fake_out);
	return t;
}

static void tvm_free(struct tvm *t)
{
	serial8250_destroy(t->s);
	fake_vm_exit(&t->kvm);
	free(t);
}

static void outb(struct tvm *t, u16 reg, u8 v)
{
	ck_assert(io_bus_dispatch(&t->kvm.pio, NULL, BASE + reg, &v, 1, true));
}

static u8 inb(struct tvm *t, u16 reg)
{
	u8 v = 0;

	ck_assert(io_bus_dispatch(&t->kvm.pio, NULL, BASE + reg, &v, 1, false));
	return v;
}

START_TEST(test_tx_reaches_output)
{
	struct tvm *t = tvm_new();
	const char *msg = "hello\n";

	for (size_t i = 0; i < strlen(msg); i++)
		outb(t, 0, (u8)msg[i]);
	ck_assert_uint_eq(t->out_len, strlen(msg));
	ck_assert(memcmp(t->out, msg, strlen(msg)) == 0);
	/* Transmitter always empty; no interrupt without IER. */
	ck_assert_uint_eq(inb(t, 5) & 0x60, 0x60);
	ck_assert_int_eq(t->nr_levels, 0);
	tvm_free(t);
}
END_TEST

START_TEST(test_thre_interrupt)
{
	struct tvm *t = tvm_new();

	outb(t, 2, 0x01);		    /* FIFO on */
	ck_assert_uint_eq(inb(t, 2), 0xc1); /* 16550A signature, nothing pending */
	outb(t, 1, 0x02);		    /* ETBEI: THR is empty, so it pends at once */
	ck_assert_int_eq(t->nr_levels, 1);
	ck_assert_int_eq(t->levels[0], 1);
	ck_assert_uint_eq(inb(t, 2), 0xc2); /* THRE, and reading it acknowledges */
	ck_assert_int_eq(t->nr_levels, 2);
	ck_assert_int_eq(t->levels[1], 0);
	ck_assert_uint_eq(inb(t, 2), 0xc1);

	outb(t, 0, 'x'); /* a write empties THR again: re-arm */
	ck_assert_int_eq(t->nr_levels, 3);
	ck_assert_int_eq(t->levels[2], 1);
	outb(t, 1, 0x00); /* masking drops the line */
	ck_assert_int_eq(t->nr_levels, 4);
	ck_assert_int_eq(t->levels[3], 0);
	ck_assert_uint_eq(inb(t, 1), 0);
	outb(t, 1, 0xff); /* only the 16550A's four bits stick */
	ck_assert_uint_eq(inb(t, 1), 0x0f);
	tvm_free(t);
}
END_TEST

START_TEST(test_rx_priority_and_fifo)
{
	struct tvm *t = tvm_new();
	u8 buf[100];

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (u8)i;
	ck_assert_uint_eq(inb(t, 5) & 0x01, 0);
	outb(t, 1, 0x01); /* ERBFI */
	ck_assert_int_eq(t->nr_levels, 0);

	ck_assert_uint_eq(serial8250_receive(t->s, buf, sizeof(buf)), SERIAL_RX_FIFO_SIZE);
	ck_assert_uint_eq(serial8250_receive(t->s, buf, 1), 0); /* full */
	ck_assert_int_eq(t->nr_levels, 1);
	ck_assert_int_eq(t->levels[0], 1);
	ck_assert_uint_eq(inb(t, 5) & 0x01, 0x01);

	outb(t, 1, 0x03); /* RX outranks THRE */
	ck_assert_uint_eq(inb(t, 2) & 0x0f, 0x04);
	for (int i = 0; i < SERIAL_RX_FIFO_SIZE; i++)
		ck_assert_uint_eq(inb(t, 0), (u8)i);
	ck_assert_uint_eq(inb(t, 5) & 0x01, 0);	   /* DR cleared */
	ck_assert_uint_eq(inb(t, 2) & 0x0f, 0x02); /* now THRE shows */
	ck_assert_uint_eq(inb(t, 2) & 0x0f, 0x01);
	ck_assert_int_eq(t->levels[t->nr_levels - 1], 0);

	/* Room again after draining; FCR can flush it. */
	ck_assert_uint_eq(serial8250_receive(t->s, buf, 3), 3);
	outb(t, 2, 0x03);
	ck_assert_uint_eq(inb(t, 5) & 0x01, 0);
	ck_assert_int_eq(t->levels[t->nr_levels - 1], 0);
	tvm_free(t);
}
END_TEST

/* A paused VM's UART takes no typed byte and raises no interrupt; once unfrozen it takes
 * them again (the terminal keeps what was refused and retries, in order). */
START_TEST(test_frozen_takes_nothing)
{
	struct tvm *t = tvm_new();

	outb(t, 1, 0x01); /* ERBFI */
	serial8250_freeze(t->s, true);
	ck_assert_uint_eq(serial8250_receive(t->s, (const u8 *)"ab", 2), 0);
	ck_assert_int_eq(t->nr_levels, 0);
	ck_assert_uint_eq(inb(t, 5) & 0x01, 0); /* no data ready */
	serial8250_freeze(t->s, false);
	ck_assert_uint_eq(serial8250_receive(t->s, (const u8 *)"ab", 2), 2);
	ck_assert_int_eq(t->nr_levels, 1);
	ck_assert_uint_eq(inb(t, 0), 'a');
	ck_assert_uint_eq(inb(t, 0), 'b');
	tvm_free(t);
}
END_TEST

START_TEST(test_loopback)
{
	struct tvm *t = tvm_new();

	ck_assert_uint_eq(inb(t, 6) & 0xf0, 0xb0); /* DCD, DSR, CTS from the console */
	/* What Linux's autoconfig writes and checks. */
	outb(t, 4, 0x10 | 0x0a);
	ck_assert_uint_eq(inb(t, 6) & 0xf0, 0x90);
	outb(t, 4, 0x10 | 0x05);
	ck_assert_uint_eq(inb(t, 6) & 0xf0, 0x60);
	outb(t, 0, 0x5a);
	ck_assert_uint_eq(t->out_len, 0); /* loops, not sent */
	ck_assert_uint_eq(inb(t, 5) & 0x01, 0x01);
	ck_assert_uint_eq(inb(t, 0), 0x5a);
	ck_assert_uint_eq(serial8250_receive(t->s, (const u8 *)"x", 1), 0);
	outb(t, 4, 0x00);
	outb(t, 0, 'y');
	ck_assert_uint_eq(t->out_len, 1);
	ck_assert_uint_eq(t->out[0], 'y');
	tvm_free(t);
}
END_TEST

START_TEST(test_dlab)
{
	struct tvm *t = tvm_new();

	outb(t, 1, 0x05);
	outb(t, 3, 0x83);
	outb(t, 0, 0x01); /* DLL: 115200 baud, not transmitted */
	outb(t, 1, 0x00); /* DLM, not IER */
	ck_assert_uint_eq(inb(t, 0), 0x01);
	ck_assert_uint_eq(inb(t, 1), 0x00);
	ck_assert_uint_eq(t->out_len, 0);
	outb(t, 3, 0x03);
	ck_assert_uint_eq(inb(t, 3), 0x03);
	ck_assert_uint_eq(inb(t, 1), 0x05); /* IER untouched */
	outb(t, 7, 0xa5);
	ck_assert_uint_eq(inb(t, 7), 0xa5);
	tvm_free(t);
}
END_TEST

START_TEST(test_ports_and_destroy)
{
	struct tvm *t = tvm_new();
	u8 v = 0;

	/* Exactly 8 ports, gone after destroy. */
	ck_assert(!io_bus_dispatch(&t->kvm.pio, NULL, BASE + 8, &v, 1, false));
	ck_assert(serial8250_create(&t->kvm, BASE + 4, IRQ) == NULL); /* overlap refused */
	serial8250_destroy(t->s);
	t->s = NULL;
	ck_assert(!io_bus_dispatch(&t->kvm.pio, NULL, BASE, &v, 1, false));
	tvm_free(t);
}
END_TEST

/* A: divisor, line settings, FIFO on, both interrupts enabled, a full receive FIFO that
 * has wrapped around its end (from slot 60), an overrun pending: the line is up. */
static void drive_busy(struct tvm *t)
{
	u8 buf[SERIAL_RX_FIFO_SIZE];

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (u8)(0x80 + i);
	outb(t, 3, 0x83);
	outb(t, 0, 0x03);
	outb(t, 1, 0x01);
	outb(t, 3, 0x1b);
	outb(t, 2, 0x81);
	outb(t, 4, 0x0b);
	outb(t, 7, 0x5c);
	ck_assert_uint_eq(serial8250_receive(t->s, buf, sizeof(buf)), SERIAL_RX_FIFO_SIZE);
	for (int i = 0; i < 60; i++)
		ck_assert_uint_eq(inb(t, 0), (u8)(0x80 + i));
	ck_assert_uint_eq(serial8250_receive(t->s, buf, sizeof(buf)), 60);
	outb(t, 4, 0x1b); /* loopback: a byte into the full FIFO is an overrun */
	outb(t, 0, 'L');
	outb(t, 4, 0x0b);
	outb(t, 1, 0x03);
	ck_assert_int_eq(t->levels[t->nr_levels - 1], 1);
}

static void save(struct tvm *t, struct snap_rec_buf *b)
{
	*b = (struct snap_rec_buf){ 0 };
	serial8250_save(t->s, b);
	ck_assert_int_eq(b->err, 0);
}

/* B, loaded from A's record, raises the line once and then reads as A does: every register,
 * the FIFO's bytes in order, the interrupts as they are acknowledged. */
START_TEST(test_snap_round_trip)
{
	struct tvm *a = tvm_new(), *b = tvm_new();
	struct snap_rec_buf rb;
	char err[128] = "";
	static const u8 regs[] = { 1, 2, 3, 4, 6, 7, 5 };

	drive_busy(a);
	save(a, &rb);
	ck_assert_msg(serial8250_load(b->s, rb.buf, rb.len, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(b->nr_levels, 1);
	ck_assert_int_eq(b->levels[0], 1);
	a->nr_levels = b->nr_levels = 0;
	ck_assert_uint_eq(inb(a, 5), 0x63); /* data ready, overrun, THR empty */
	ck_assert_uint_eq(inb(b, 5), 0x63);
	for (size_t i = 0; i < sizeof(regs); i++)
		ck_assert_uint_eq(inb(b, regs[i]), inb(a, regs[i]));
	outb(a, 3, 0x9b);
	outb(b, 3, 0x9b);
	ck_assert_uint_eq(inb(b, 0), 0x03); /* DLL */
	ck_assert_uint_eq(inb(b, 1), 0x01); /* DLM */
	outb(a, 3, 0x1b);
	outb(b, 3, 0x1b);
	for (int i = 0; i < SERIAL_RX_FIFO_SIZE + 2; i++) {
		ck_assert_uint_eq(inb(b, 2), inb(a, 2));
		ck_assert_uint_eq(inb(b, 5), inb(a, 5));
		ck_assert_uint_eq(inb(b, 0), inb(a, 0));
	}
	ck_assert_uint_eq(b->nr_levels, a->nr_levels);
	ck_assert_mem_eq(b->levels, a->levels, sizeof(a->levels[0]) * (size_t)a->nr_levels);
	ck_assert_int_eq(b->levels[b->nr_levels - 1], 0);
	ck_assert_uint_eq(b->out_len, 0);
	snap_rec_free(&rb);
	tvm_free(a);
	tvm_free(b);
}
END_TEST

static void expect_refused(const void *sec, size_t len)
{
	struct tvm *t = tvm_new();
	char err[128] = "";

	ck_assert_int_eq(serial8250_load(t->s, sec, len, err, sizeof(err)), -EINVAL);
	ck_assert(err[0] != '\0' && !strchr(err, '\n'));
	ck_assert_int_eq(t->nr_levels, 0); /* nothing applied */
	ck_assert_uint_eq(inb(t, 1), 0);
	tvm_free(t);
}

/* The record after its 6-byte header: ier lcr mcr scr dll dlm fcr lsr_err thre rx_count
 * reserved[6] rx[64]. */
START_TEST(test_snap_hostile)
{
	static const struct {
		unsigned off;
		u8 v;
	} bad[] = { { 0, 0x10 }, { 2, 0x20 }, { 6, 0x02 }, { 7, 0x01 },
		    { 8, 2 },	 { 9, 65 },   { 10, 1 },   { 15, 0x80 } };
	struct tvm *a = tvm_new();
	struct snap_rec_buf rb, longer = { 0 };
	u8 copy[256];

	drive_busy(a);
	save(a, &rb);
	ck_assert_uint_le(rb.len, sizeof(copy));
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		memcpy(copy, rb.buf, rb.len);
		copy[6 + bad[i].off] = bad[i].v;
		expect_refused(copy, rb.len);
	}
	expect_refused(NULL, 0); /* missing */
	for (size_t cut = 1; cut < rb.len; cut += 7)
		expect_refused(rb.buf, rb.len - cut); /* truncated */
	memset(copy, 0, sizeof(copy));
	snap_rec_put(&longer, DEV_SNAP_TAG_MIN, copy, rb.len - 6 + 1);
	expect_refused(longer.buf, longer.len); /* a record one byte too long */
	snap_rec_free(&longer);
	snap_rec_free(&rb);
	tvm_free(a);
}
END_TEST

static Suite *serial_suite(void)
{
	Suite *s = suite_create("serial");
	TCase *tc = tcase_create("uart");

	tcase_add_test(tc, test_tx_reaches_output);
	tcase_add_test(tc, test_thre_interrupt);
	tcase_add_test(tc, test_rx_priority_and_fifo);
	tcase_add_test(tc, test_loopback);
	tcase_add_test(tc, test_frozen_takes_nothing);
	tcase_add_test(tc, test_dlab);
	tcase_add_test(tc, test_ports_and_destroy);
	tcase_add_test(tc, test_snap_round_trip);
	tcase_add_test(tc, test_snap_hostile);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(serial_suite)

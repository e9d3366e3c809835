/* Fuzz target: the gdb server's packets (gdb/rsp.c) in pieces of every size, parsed and answered (gdb/commands.c) against a fake target. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../../gdb/server-priv.h"
#include "fuzz.h"

/*
 * Input: u8 chunk seed, then the bytes gdb sends. The seed picks the size of each feed
 * (xorshift), so packets arrive cut anywhere. Every packet is parsed and answered through the
 * server's own command table against a fake VM (2 threads, 4 KiB of memory at FAKE_BASE); a
 * resume is stopped at once, as if a breakpoint hit. Checked: the decoder never stores past
 * its bound and consumes what it is given; parsed fields point inside the packet; every reply
 * fits its frame and decodes back to itself.
 */
#define FAKE_BASE 0x1000ULL
#define FAKE_MEM 4096

static u8 fake_mem[FAKE_MEM];
static struct gdb_x86_regs fake_regs[2];

static int f_nthreads(void *ctx)
{
	return 2;
}

static int f_ok(void *ctx)
{
	return 0;
}

static int f_resume(void *ctx, int step)
{
	FUZZ_ASSERT(step >= 0 && step <= 2);
	return 0;
}

static int f_get_regs(void *ctx, int t, struct gdb_x86_regs *r)
{
	FUZZ_ASSERT(t >= 1 && t <= 2);
	*r = fake_regs[t - 1];
	return 0;
}

static int f_set_regs(void *ctx, int t, const struct gdb_x86_regs *r)
{
	FUZZ_ASSERT(t >= 1 && t <= 2);
	fake_regs[t - 1] = *r;
	return 0;
}

static int f_read_mem(void *ctx, int t, u64 gva, void *buf, size_t len)
{
	FUZZ_ASSERT(len > 0 && len <= GDB_PACKET_MAX);
	if (gva < FAKE_BASE || !range_ok(gva - FAKE_BASE, len, FAKE_MEM))
		return -EFAULT;
	memcpy(buf, fake_mem + (gva - FAKE_BASE), len);
	return 0;
}

static int f_write_mem(void *ctx, int t, u64 gva, const void *buf, size_t len)
{
	FUZZ_ASSERT(len > 0 && len <= GDB_PACKET_MAX);
	if (gva < FAKE_BASE || !range_ok(gva - FAKE_BASE, len, FAKE_MEM))
		return -EFAULT;
	memcpy(fake_mem + (gva - FAKE_BASE), buf, len);
	return 0;
}

static int f_bp(void *ctx, enum gdb_bp_kind kind, u64 addr, u64 len)
{
	FUZZ_ASSERT(kind >= GDB_BP_SW && kind <= GDB_WP_ACCESS);
	return kind == GDB_WP_READ ? -EOPNOTSUPP : 0;
}

static void f_nothing(void *ctx)
{
}

static const struct gdb_target_ops fake_ops = {
	.nthreads = f_nthreads,
	.stop_all = f_ok,
	.resume = f_resume,
	.get_regs = f_get_regs,
	.set_regs = f_set_regs,
	.read_mem = f_read_mem,
	.write_mem = f_write_mem,
	.set_bp = f_bp,
	.clear_bp = f_bp,
	.detach = f_nothing,
	.kill = f_nothing,
};

static u32 next(u32 *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* The reply framed, and decoded again by a second decoder: the same bytes. */
static void check_reply(struct gdb_server *s)
{
	static struct gdb_rx back;
	enum gdb_rx_event ev;
	size_t n;

	FUZZ_ASSERT(s->reply_len <= sizeof(s->reply));
	n = gdb_frame(s->reply, s->reply_len, s->frame, sizeof(s->frame));
	FUZZ_ASSERT(n >= 4 && n <= sizeof(s->frame));
	gdb_rx_init(&back);
	FUZZ_ASSERT(gdb_rx_feed(&back, (u8 *)s->frame, n, &ev) == n);
	FUZZ_ASSERT(ev == GDB_RX_PACKET && back.len == s->reply_len);
	FUZZ_ASSERT(!memcmp(back.buf, s->reply, s->reply_len));
}

static void on_packet(struct gdb_server *s)
{
	struct gdb_cmd cmd;
	enum gdb_after after;

	FUZZ_ASSERT(s->rx.len <= GDB_PACKET_MAX);
	gdb_parse(s->rx.buf, s->rx.len, &cmd);
	if (cmd.data) {
		FUZZ_ASSERT(cmd.data >= s->rx.buf && cmd.data <= s->rx.buf + s->rx.len);
		FUZZ_ASSERT(cmd.data_len <= (size_t)(s->rx.buf + s->rx.len - cmd.data));
	}
	after = gdb_command(s, &cmd);
	if (after == GDB_REPLY || after == GDB_REPLY_CLOSE)
		check_reply(s);
	/* A resume: the VM stops at once (a breakpoint on the thread that ran). */
	if (after == GDB_NO_REPLY) {
		struct gdb_stop st = { .reason = GDB_STOP_TRAP, .thread = 1 };

		s->running = false;
		s->last = st;
		gdb_stop_reply(s, &st);
		check_reply(s);
	}
}

int fuzz_gdb(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct gdb_server *s = calloc(1, sizeof(*s));
	u32 seed = (u32)fuzz_take(&in, 1) | 0x100; /* never 0: xorshift would stay there */

	if (!s)
		return 0;
	/* Each input starts from the same VM. */
	memset(fake_mem, 0x90, sizeof(fake_mem));
	memset(fake_regs, 0, sizeof(fake_regs));
	s->ops = &fake_ops;
	s->listen_fd = s->client_fd = s->wake_fd = -1;
	pthread_mutex_init(&s->lock, NULL);
	s->xml_len = gdb_target_xml(NULL, 0);
	s->xml = malloc(s->xml_len + 1);
	if (s->xml) {
		gdb_target_xml(s->xml, s->xml_len + 1);
		gdb_rx_init(&s->rx);
		for (size_t off = 0; off < in.left;) {
			size_t n = 1 + next(&seed) % 64, used;
			enum gdb_rx_event ev;

			n = MIN(n, in.left - off);
			used = gdb_rx_feed(&s->rx, in.p + off, n, &ev);
			FUZZ_ASSERT(used >= 1 && used <= n);
			FUZZ_ASSERT(ev != GDB_RX_NONE || used == n);
			off += used;
			if (ev == GDB_RX_PACKET)
				on_packet(s);
		}
	}
	free(s->xml);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return 0;
}

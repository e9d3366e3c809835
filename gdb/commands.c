/* The gdb server's answers: one handler per parsed command, on the target's ops, all-stop. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "server-priv.h"

/* qfThreadInfo's threads per reply: gdb asks again (qsThreadInfo) for the rest. */
#define THREADS_PER_REPLY 64
/* A guest page: a read that fails is tried again up to the next boundary, so gdb gets the
 * mapped part of a range (m's reply may be short). */
#define GUEST_PAGE 4096ULL

static void __printf(2, 3) reply(struct gdb_server *s, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(s->reply, sizeof(s->reply), fmt, ap);
	va_end(ap);
	s->reply_len = n < 0 ? 0 : MIN((size_t)n, sizeof(s->reply) - 1);
}

/* gdb reads E NN as an error number of the stub's own: errno's, in hex. */
static enum gdb_after reply_err(struct gdb_server *s, int err)
{
	reply(s, "E%02x", (unsigned)(err < 0 ? -err : err) & 0xff);
	return GDB_REPLY;
}

static enum gdb_after reply_ret(struct gdb_server *s, int ret)
{
	if (ret < 0)
		return reply_err(s, ret);
	reply(s, "OK");
	return GDB_REPLY;
}

static int nthreads(struct gdb_server *s)
{
	int n = s->ops->nthreads(s->ctx);

	return n < 0 ? 0 : MIN(n, GDB_THREAD_MAX);
}

/* The thread a command acts on: gdb's choice (Hg), else the one that stopped. */
static int cur_thread(struct gdb_server *s, int chosen)
{
	if (chosen > 0 && chosen <= nthreads(s))
		return chosen;
	return s->last.thread > 0 ? s->last.thread : 1;
}

void gdb_count_stop(struct gdb_server *s, const struct gdb_stop *st)
{
	atomic_fetch_add(&s->stops, 1);
	if (st->reason == GDB_STOP_TRAP || st->reason == GDB_STOP_WATCH)
		atomic_fetch_add(&s->breakpoints_hit, 1);
}

void gdb_stop_reply(struct gdb_server *s, const struct gdb_stop *st)
{
	static const char *const watch[] = {
		[GDB_WP_WRITE] = "watch", [GDB_WP_READ] = "rwatch", [GDB_WP_ACCESS] = "awatch"
	};
	int t = st->thread > 0 ? st->thread : 1;

	if (st->reason == GDB_STOP_EXITED)
		reply(s, "W%02x", (unsigned)st->exit_status & 0xff);
	else if (st->reason == GDB_STOP_INTERRUPT)
		reply(s, "T02thread:%x;", t);
	else if (st->reason == GDB_STOP_WATCH && st->watch >= GDB_WP_WRITE &&
		 st->watch <= GDB_WP_ACCESS)
		reply(s, "T05%s:%" PRIx64 ";thread:%x;", watch[st->watch], st->watch_addr, t);
	else
		reply(s, "T05thread:%x;", t);
}

/* The stop was counted when it was first reported. */
static enum gdb_after cmd_status(struct gdb_server *s, const struct gdb_cmd *c)
{
	gdb_stop_reply(s, &s->last);
	return GDB_REPLY;
}

static enum gdb_after cmd_read_regs(struct gdb_server *s, const struct gdb_cmd *c)
{
	struct gdb_x86_regs r;
	int ret = s->ops->get_regs(s->ctx, cur_thread(s, s->g_thread), &r);

	if (ret < 0)
		return reply_err(s, ret);
	_Static_assert(sizeof(s->reply) > 2 * sizeof(struct gdb_x86_regs), "g's reply fits");
	gdb_regs_to_hex(&r, s->reply);
	s->reply_len = 2 * gdb_regs_size();
	return GDB_REPLY;
}

static enum gdb_after cmd_write_regs(struct gdb_server *s, const struct gdb_cmd *c)
{
	struct gdb_x86_regs r;
	int t = cur_thread(s, s->g_thread), ret = s->ops->get_regs(s->ctx, t, &r);

	if (ret == 0)
		ret = gdb_regs_from_hex(&r, c->data, c->data_len);
	if (ret == 0)
		ret = s->ops->set_regs(s->ctx, t, &r);
	return reply_ret(s, ret);
}

static enum gdb_after cmd_read_reg(struct gdb_server *s, const struct gdb_cmd *c)
{
	struct gdb_x86_regs r;
	int ret;

	if (c->reg >= gdb_regs_count())
		return reply_err(s, -EINVAL);
	ret = s->ops->get_regs(s->ctx, cur_thread(s, s->g_thread), &r);
	if (ret == 0)
		ret = gdb_reg_to_hex(&r, c->reg, s->reply);
	if (ret < 0)
		return reply_err(s, ret);
	s->reply_len = 2 * gdb_reg_size(c->reg);
	return GDB_REPLY;
}

static enum gdb_after cmd_write_reg(struct gdb_server *s, const struct gdb_cmd *c)
{
	struct gdb_x86_regs r;
	int t = cur_thread(s, s->g_thread), ret = s->ops->get_regs(s->ctx, t, &r);

	if (ret == 0)
		ret = gdb_reg_from_hex(&r, c->reg, c->data, c->data_len);
	if (ret == 0)
		ret = s->ops->set_regs(s->ctx, t, &r);
	return reply_ret(s, ret);
}

static enum gdb_after cmd_read_mem(struct gdb_server *s, const struct gdb_cmd *c)
{
	int t = cur_thread(s, s->g_thread), ret;
	/* Bounded by what one reply holds (gdb asks for at most that: PacketSize / 2), and by the
	 * end of the address space. */
	u64 len = MIN(c->len, (u64)GDB_PACKET_MAX / 2);

	if (c->addr + len < c->addr)
		len = 0 - c->addr;
	if (!len)
		return reply_err(s, -EINVAL);
	ret = s->ops->read_mem(s->ctx, t, c->addr, s->mem, len);
	if (ret < 0 && (c->addr | (GUEST_PAGE - 1)) - c->addr + 1 < len) {
		len = (c->addr | (GUEST_PAGE - 1)) - c->addr + 1;
		ret = s->ops->read_mem(s->ctx, t, c->addr, s->mem, len);
	}
	if (ret < 0)
		return reply_err(s, ret);
	gdb_hex_encode(s->mem, len, s->reply);
	s->reply_len = 2 * len;
	return GDB_REPLY;
}

static enum gdb_after cmd_write_mem(struct gdb_server *s, const struct gdb_cmd *c)
{
	int t = cur_thread(s, s->g_thread);

	/* The parser matched len to the data, which one packet bounds. */
	if (c->len > sizeof(s->mem) || !gdb_hex_decode(c->data, c->len, s->mem))
		return reply_err(s, -EINVAL);
	if (!c->len)
		return reply_ret(s, 0);
	return reply_ret(s, s->ops->write_mem(s->ctx, t, c->addr, s->mem, c->len));
}

static enum gdb_after cmd_write_mem_x(struct gdb_server *s, const struct gdb_cmd *c)
{
	/* X addr,0: gdb asking whether X works. */
	if (!c->len)
		return reply_ret(s, 0);
	return reply_ret(s, s->ops->write_mem(s->ctx, cur_thread(s, s->g_thread), c->addr, c->data,
					      c->len));
}

/* c, s, C, S, vCont: an address moves the thread's rip first; then the VM runs until a stop
 * (gdb_server_notify_stop) or gdb's Ctrl-C, and that stop is the reply. */
static enum gdb_after resume(struct gdb_server *s, const struct gdb_cmd *c, bool step)
{
	int t = cur_thread(s, c->thread > 0 ? c->thread : s->c_thread), ret = 0;
	struct gdb_stop st;

	if (c->thread > nthreads(s))
		return reply_err(s, -ESRCH);
	if (c->has_addr) {
		struct gdb_x86_regs r;

		ret = s->ops->get_regs(s->ctx, t, &r);
		r.rip = c->addr;
		if (ret == 0)
			ret = s->ops->set_regs(s->ctx, t, &r);
		if (ret < 0)
			return reply_err(s, ret);
	}
	/* A stop that came while the VM was stopped is stale, but the VM's end is not: say so
	 * instead of running a VM that is gone. */
	if (gdb_take_pending(s, &st) && st.reason == GDB_STOP_EXITED) {
		s->last = st;
		gdb_count_stop(s, &st);
		gdb_stop_reply(s, &st);
		return GDB_REPLY;
	}
	s->running = true;
	ret = s->ops->resume(s->ctx, step ? t : 0);
	if (ret < 0) {
		s->running = false;
		return reply_err(s, ret);
	}
	if (step)
		atomic_fetch_add(&s->steps, 1);
	return GDB_NO_REPLY;
}

static enum gdb_after cmd_continue(struct gdb_server *s, const struct gdb_cmd *c)
{
	return resume(s, c, false);
}

static enum gdb_after cmd_step(struct gdb_server *s, const struct gdb_cmd *c)
{
	return resume(s, c, true);
}

static enum gdb_after cmd_vcont_query(struct gdb_server *s, const struct gdb_cmd *c)
{
	reply(s, "vCont;c;C;s;S;t");
	return GDB_REPLY;
}

/* vCont;t asks to stop threads that, in all-stop, already are. */
static enum gdb_after cmd_ok(struct gdb_server *s, const struct gdb_cmd *c)
{
	return reply_ret(s, 0);
}

static enum gdb_after cmd_breakpoint(struct gdb_server *s, const struct gdb_cmd *c)
{
	int ret = c->kind == GDB_CMD_INSERT_BP ? s->ops->set_bp(s->ctx, c->bp, c->addr, c->len)
					       : s->ops->clear_bp(s->ctx, c->bp, c->addr, c->len);

	/* The empty reply tells gdb this kind is not supported (it falls back, or says so). */
	if (ret == -EOPNOTSUPP) {
		s->reply_len = 0;
		return GDB_REPLY;
	}
	return reply_ret(s, ret);
}

static enum gdb_after cmd_set_thread(struct gdb_server *s, const struct gdb_cmd *c)
{
	if (c->thread > nthreads(s))
		return reply_err(s, -ESRCH);
	if (c->op == 'g')
		s->g_thread = c->thread;
	else
		s->c_thread = c->thread;
	return reply_ret(s, 0);
}

static enum gdb_after cmd_thread_alive(struct gdb_server *s, const struct gdb_cmd *c)
{
	return reply_ret(s, c->thread > 0 && c->thread <= nthreads(s) ? 0 : -ESRCH);
}

static enum gdb_after cmd_supported(struct gdb_server *s, const struct gdb_cmd *c)
{
	reply(s, "PacketSize=%x;qXfer:features:read+;QStartNoAckMode+;vContSupported+",
	      GDB_PACKET_MAX);
	return GDB_REPLY;
}

/* "1": gdb attached to a running machine, so its quit detaches instead of killing the VM. */
static enum gdb_after cmd_attached(struct gdb_server *s, const struct gdb_cmd *c)
{
	reply(s, "1");
	return GDB_REPLY;
}

static enum gdb_after cmd_current_thread(struct gdb_server *s, const struct gdb_cmd *c)
{
	reply(s, "QC%x", cur_thread(s, s->g_thread));
	return GDB_REPLY;
}

/* One gdb thread per vCPU: "m1,2,..." in bounded replies, then "l". */
static enum gdb_after cmd_threads(struct gdb_server *s, const struct gdb_cmd *c)
{
	int n = nthreads(s), end;
	size_t len = 1;

	if (c->kind == GDB_CMD_THREADS_FIRST)
		s->next_info = 1;
	if (s->next_info < 1 || s->next_info > n) {
		reply(s, "l");
		return GDB_REPLY;
	}
	s->reply[0] = 'm';
	end = MIN(n, s->next_info + THREADS_PER_REPLY - 1);
	for (; s->next_info <= end; s->next_info++)
		len += (size_t)snprintf(s->reply + len, sizeof(s->reply) - len, "%s%x",
					len > 1 ? "," : "", s->next_info);
	s->reply_len = len;
	return GDB_REPLY;
}

/* target.xml from OFF, at most LEN bytes: 'm' and more to come, or 'l' and the last. */
static enum gdb_after cmd_xfer(struct gdb_server *s, const struct gdb_cmd *c)
{
	u64 n;

	if (!c->len)
		return reply_err(s, -EINVAL);
	if (c->addr >= s->xml_len) {
		reply(s, "l");
		return GDB_REPLY;
	}
	/* No longer than the PacketSize we told gdb, 'm' or 'l' included. */
	n = MIN(MIN(c->len, (u64)(s->xml_len - c->addr)), (u64)GDB_PACKET_MAX - 1);
	s->reply[0] = c->addr + n < s->xml_len ? 'm' : 'l';
	memcpy(s->reply + 1, s->xml + c->addr, n);
	s->reply_len = 1 + n;
	return GDB_REPLY;
}

/* This packet was acked; from its OK on neither side acks. */
static enum gdb_after cmd_noack(struct gdb_server *s, const struct gdb_cmd *c)
{
	s->no_ack = true;
	return reply_ret(s, 0);
}

static enum gdb_after cmd_detach(struct gdb_server *s, const struct gdb_cmd *c)
{
	s->ops->detach(s->ctx);
	reply(s, "OK");
	return GDB_REPLY_CLOSE;
}

static enum gdb_after cmd_kill(struct gdb_server *s, const struct gdb_cmd *c)
{
	s->ops->kill(s->ctx);
	return GDB_CLOSE;
}

/* The protocol's "not supported": the empty packet. */
static enum gdb_after cmd_unknown(struct gdb_server *s, const struct gdb_cmd *c)
{
	s->reply_len = 0;
	return GDB_REPLY;
}

static enum gdb_after cmd_bad(struct gdb_server *s, const struct gdb_cmd *c)
{
	return reply_err(s, -EINVAL);
}

static enum gdb_after (*const handlers[])(struct gdb_server *s, const struct gdb_cmd *c) = {
	[GDB_CMD_UNKNOWN] = cmd_unknown,
	[GDB_CMD_BAD] = cmd_bad,
	[GDB_CMD_STATUS] = cmd_status,
	[GDB_CMD_READ_REGS] = cmd_read_regs,
	[GDB_CMD_WRITE_REGS] = cmd_write_regs,
	[GDB_CMD_READ_REG] = cmd_read_reg,
	[GDB_CMD_WRITE_REG] = cmd_write_reg,
	[GDB_CMD_READ_MEM] = cmd_read_mem,
	[GDB_CMD_WRITE_MEM] = cmd_write_mem,
	[GDB_CMD_WRITE_MEM_X] = cmd_write_mem_x,
	[GDB_CMD_CONTINUE] = cmd_continue,
	[GDB_CMD_STEP] = cmd_step,
	[GDB_CMD_VCONT_QUERY] = cmd_vcont_query,
	[GDB_CMD_VCONT_STOP] = cmd_ok,
	[GDB_CMD_INSERT_BP] = cmd_breakpoint,
	[GDB_CMD_REMOVE_BP] = cmd_breakpoint,
	[GDB_CMD_SET_THREAD] = cmd_set_thread,
	[GDB_CMD_THREAD_ALIVE] = cmd_thread_alive,
	[GDB_CMD_SUPPORTED] = cmd_supported,
	[GDB_CMD_ATTACHED] = cmd_attached,
	[GDB_CMD_CURRENT_THREAD] = cmd_current_thread,
	[GDB_CMD_THREADS_FIRST] = cmd_threads,
	[GDB_CMD_THREADS_NEXT] = cmd_threads,
	[GDB_CMD_XFER_FEATURES] = cmd_xfer,
	[GDB_CMD_NOACK] = cmd_noack,
	[GDB_CMD_DETACH] = cmd_detach,
	[GDB_CMD_KILL] = cmd_kill,
};
_Static_assert(ARRAY_SIZE(handlers) == GDB_CMD_KILL + 1, "a handler for every command kind");

enum gdb_after gdb_command(struct gdb_server *s, const struct gdb_cmd *cmd)
{
	s->reply_len = 0;
	return handlers[cmd->kind](s, cmd);
}

/* The gdb remote serial protocol's packets: the incremental decoder, the reply encoder and the command parser (no sockets, no VM). */
#include <string.h>

#include "lkvm/gdb-rsp.h"

enum { RX_IDLE, RX_DATA, RX_ESC, RX_SUM1, RX_SUM2 };

#define GDB_ESCAPE '}'
#define GDB_ESCAPE_XOR 0x20
#define GDB_CTRL_C 0x03

void gdb_hex_encode(const u8 *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 0xf];
	}
}

bool gdb_hex_decode(const char *in, size_t n, u8 *out)
{
	for (size_t i = 0; i < n; i++) {
		int hi = hex_digit((u8)in[2 * i]), lo = hex_digit((u8)in[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		out[i] = (u8)(hi << 4 | lo);
	}
	return true;
}

void gdb_rx_init(struct gdb_rx *rx)
{
	memset(rx, 0, sizeof(*rx));
	rx->state = RX_IDLE;
}

static void rx_start(struct gdb_rx *rx)
{
	rx->state = RX_DATA;
	rx->sum = 0;
	rx->len = 0;
	rx->overflow = false;
}

/* Past GDB_PACKET_MAX the bytes are counted in the checksum and dropped: the buffer never
 * grows, and the packet is answered '-' at its end. */
static void rx_store(struct gdb_rx *rx, u8 c)
{
	if (rx->len < GDB_PACKET_MAX)
		rx->buf[rx->len++] = (char)c;
	else
		rx->overflow = true;
}

/* Between packets: the start of one, an ack, gdb's Ctrl-C; anything else is line noise. */
static enum gdb_rx_event rx_idle(struct gdb_rx *rx, u8 c)
{
	switch (c) {
	case '$':
		rx_start(rx);
		return GDB_RX_NONE;
	case '+':
		return GDB_RX_ACK;
	case '-':
		return GDB_RX_NAK;
	case GDB_CTRL_C:
		return GDB_RX_INTERRUPT;
	default:
		return GDB_RX_NONE;
	}
}

/* The second checksum digit ends the packet: good, or answered '-'. */
static enum gdb_rx_event rx_end(struct gdb_rx *rx, u8 c)
{
	int v = hex_digit(c);

	rx->state = RX_IDLE;
	if (v < 0 || rx->want == 0xff || rx->overflow || (u8)(rx->want << 4 | v) != rx->sum)
		return GDB_RX_BAD;
	rx->buf[rx->len] = '\0';
	return GDB_RX_PACKET;
}

static enum gdb_rx_event rx_byte(struct gdb_rx *rx, u8 c)
{
	int v;

	switch (rx->state) {
	case RX_IDLE:
		return rx_idle(rx, c);
	case RX_DATA:
		if (c == '#') {
			rx->state = RX_SUM1;
		} else if (c == '$') {
			/* A new packet inside one: the first was cut (gdb resent it); drop it. */
			rx_start(rx);
			return GDB_RX_BAD;
		} else {
			rx->sum += c;
			if (c == GDB_ESCAPE)
				rx->state = RX_ESC;
			else
				rx_store(rx, c);
		}
		return GDB_RX_NONE;
	case RX_ESC:
		rx->sum += c;
		rx_store(rx, c ^ GDB_ESCAPE_XOR);
		rx->state = RX_DATA;
		return GDB_RX_NONE;
	case RX_SUM1:
		v = hex_digit(c);
		/* 0xff marks a bad first digit (a real high digit is at most 0xf). */
		rx->want = v < 0 ? 0xff : (u8)v;
		rx->state = RX_SUM2;
		return GDB_RX_NONE;
	default:
		return rx_end(rx, c);
	}
}

size_t gdb_rx_feed(struct gdb_rx *rx, const u8 *data, size_t len, enum gdb_rx_event *ev)
{
	for (size_t i = 0; i < len; i++) {
		*ev = rx_byte(rx, data[i]);
		if (*ev != GDB_RX_NONE)
			return i + 1;
	}
	*ev = GDB_RX_NONE;
	return len;
}

size_t gdb_frame(const char *payload, size_t len, char *out, size_t cap)
{
	static const char digits[] = "0123456789abcdef";
	size_t n = 0;
	u8 sum = 0;

	/* Worst case: every byte escaped, plus '$', '#' and two digits. */
	if (len > (cap - 4) / 2 || cap < 4)
		return 0;
	out[n++] = '$';
	for (size_t i = 0; i < len; i++) {
		u8 c = (u8)payload[i];

		if (c == '$' || c == '#' || c == GDB_ESCAPE || c == '*') {
			out[n++] = GDB_ESCAPE;
			sum += GDB_ESCAPE;
			c ^= GDB_ESCAPE_XOR;
		}
		out[n++] = (char)c;
		sum += c;
	}
	out[n++] = '#';
	out[n++] = digits[sum >> 4];
	out[n++] = digits[sum & 0xf];
	return n;
}

/* ---- the command parser: a cursor over the payload, every field checked ---- */

struct cur {
	const char *p, *end;
};

static bool at_end(const struct cur *c)
{
	return c->p == c->end;
}

static bool take(struct cur *c, char ch)
{
	if (at_end(c) || *c->p != ch)
		return false;
	c->p++;
	return true;
}

/* One or more hex digits into a u64; false on none, or on a value past 64 bits. */
static bool take_hex(struct cur *c, u64 *out)
{
	const char *start = c->p;
	u64 v = 0;
	int d;

	while (!at_end(c) && (d = hex_digit((u8)*c->p)) >= 0) {
		if (v >> 60)
			return false;
		v = v << 4 | (u64)d;
		c->p++;
	}
	*out = v;
	return c->p != start;
}

/* A thread id: "-1" (all), 0 (any) or 1..GDB_THREAD_MAX. */
static bool take_thread(struct cur *c, int *t)
{
	u64 v;

	if (take(c, '-')) {
		*t = GDB_THREAD_ALL;
		return take(c, '1');
	}
	if (!take_hex(c, &v) || v > GDB_THREAD_MAX)
		return false;
	*t = (int)v;
	return true;
}

/* "addr,len" as m, M, X and Z's tail write it. */
static bool take_addr_len(struct cur *c, struct gdb_cmd *cmd)
{
	return take_hex(c, &cmd->addr) && take(c, ',') && take_hex(c, &cmd->len);
}

/* The rest of the packet is the command's data. */
static void take_rest(struct cur *c, struct gdb_cmd *cmd)
{
	cmd->data = c->p;
	cmd->data_len = (size_t)(c->end - c->p);
	c->p = c->end;
}

static bool parse_none(struct cur *c, struct gdb_cmd *cmd)
{
	return at_end(c);
}

static bool parse_G(struct cur *c, struct gdb_cmd *cmd)
{
	take_rest(c, cmd);
	return true;
}

static bool parse_p(struct cur *c, struct gdb_cmd *cmd)
{
	u64 n;

	if (!take_hex(c, &n) || n > UINT32_MAX)
		return false;
	cmd->reg = (u32)n;
	return true;
}

static bool parse_P(struct cur *c, struct gdb_cmd *cmd)
{
	if (!parse_p(c, cmd) || !take(c, '='))
		return false;
	take_rest(c, cmd);
	return true;
}

static bool parse_m(struct cur *c, struct gdb_cmd *cmd)
{
	return take_addr_len(c, cmd) && at_end(c);
}

/* M's data is two hex digits a byte, X's the bytes themselves (unescaped by the decoder). */
static bool parse_M(struct cur *c, struct gdb_cmd *cmd)
{
	if (!take_addr_len(c, cmd) || !take(c, ':'))
		return false;
	take_rest(c, cmd);
	return cmd->len <= GDB_PACKET_MAX && cmd->data_len == 2 * cmd->len;
}

static bool parse_X(struct cur *c, struct gdb_cmd *cmd)
{
	if (!take_addr_len(c, cmd) || !take(c, ':'))
		return false;
	take_rest(c, cmd);
	return cmd->data_len == cmd->len;
}

/* c [addr], s [addr] */
static bool parse_resume(struct cur *c, struct gdb_cmd *cmd)
{
	cmd->thread = GDB_THREAD_ANY;
	if (at_end(c))
		return true;
	cmd->has_addr = true;
	return take_hex(c, &cmd->addr) && at_end(c);
}

/* C sig[;addr], S sig[;addr]: lkvm injects no signals, so sig is checked and dropped. */
static bool parse_resume_sig(struct cur *c, struct gdb_cmd *cmd)
{
	u64 sig;

	cmd->thread = GDB_THREAD_ANY;
	if (!take_hex(c, &sig) || sig > 0xff)
		return false;
	if (at_end(c))
		return true;
	cmd->has_addr = true;
	return take(c, ';') && take_hex(c, &cmd->addr) && at_end(c);
}

/*
 * vCont;ACTION[:TID][;ACTION[:TID]]...: all-stop reduces it to one request. A step (s or S)
 * wins: gdb sends "vCont;s:N;c" to step thread N, and lkvm keeps the others stopped while it
 * steps (resume's contract). Else a c or C continues everything; only t (a non-stop stop
 * request) leaves nothing to do.
 */
static bool parse_vcont_action(struct cur *c, struct gdb_cmd *cmd, bool *cont)
{
	char a = at_end(c) ? 0 : *c->p++;
	u64 sig;
	int t = GDB_THREAD_ALL;

	if ((a == 'C' || a == 'S') && (!take_hex(c, &sig) || sig > 0xff))
		return false;
	if (a != 'c' && a != 'C' && a != 's' && a != 'S' && a != 't')
		return false;
	if (take(c, ':') && !take_thread(c, &t))
		return false;
	if ((a == 's' || a == 'S') && cmd->kind != GDB_CMD_STEP) {
		cmd->kind = GDB_CMD_STEP;
		cmd->thread = t == GDB_THREAD_ALL ? GDB_THREAD_ANY : t;
	}
	*cont |= a == 'c' || a == 'C';
	return true;
}

static bool parse_vcont(struct cur *c, struct gdb_cmd *cmd)
{
	bool cont = false;

	cmd->kind = GDB_CMD_VCONT_STOP;
	cmd->thread = GDB_THREAD_ANY;
	do {
		if (!parse_vcont_action(c, cmd, &cont))
			return false;
	} while (take(c, ';'));
	if (cmd->kind != GDB_CMD_STEP && cont)
		cmd->kind = GDB_CMD_CONTINUE;
	return at_end(c);
}

/* Ztype,addr,kind. A type past 4 does not exist: answered empty, as unsupported; a
 * condition list (";X...") is refused: we do not offer ConditionalBreakpoints. */
static bool parse_Z(struct cur *c, struct gdb_cmd *cmd)
{
	char t = at_end(c) ? 0 : *c->p++;

	if (t < '0' || t > '4') {
		cmd->kind = GDB_CMD_UNKNOWN;
		return true;
	}
	cmd->bp = (enum gdb_bp_kind)(t - '0');
	return take(c, ',') && take_addr_len(c, cmd) && at_end(c);
}

static bool parse_H(struct cur *c, struct gdb_cmd *cmd)
{
	if (!take(c, 'g') && !take(c, 'c'))
		return false;
	cmd->op = c->p[-1];
	return take_thread(c, &cmd->thread) && at_end(c);
}

static bool parse_T(struct cur *c, struct gdb_cmd *cmd)
{
	return take_thread(c, &cmd->thread) && at_end(c);
}

/* qSupported[:feature;...]: gdb's features change nothing we answer. */
static bool parse_supported(struct cur *c, struct gdb_cmd *cmd)
{
	return at_end(c) || take(c, ':');
}

/* qXfer:features:read:ANNEX:off,len, for the one annex there is. */
static bool parse_xfer(struct cur *c, struct gdb_cmd *cmd)
{
	static const char annex[] = "target.xml:";
	size_t n = sizeof(annex) - 1;

	if ((size_t)(c->end - c->p) < n || memcmp(c->p, annex, n))
		return false;
	c->p += n;
	return take_addr_len(c, cmd) && at_end(c);
}

/* D, or D;pid as a multiprocess gdb writes it (one process here, whichever pid). */
static bool parse_D(struct cur *c, struct gdb_cmd *cmd)
{
	u64 pid;

	return at_end(c) || (take(c, ';') && take_hex(c, &pid) && at_end(c));
}

enum match { EXACT, PREFIX };

/* Every command lkvm answers: the name, whether the packet is just it or starts with it, what
 * it is, and the parser of the rest. Earlier rows win (vCont? before vCont;). */
static const struct gdb_cmd_row {
	const char *name;
	enum match match;
	enum gdb_cmd_kind kind;
	bool (*parse)(struct cur *c, struct gdb_cmd *cmd);
} cmd_table[] = {
	{ "?", EXACT, GDB_CMD_STATUS, parse_none },
	{ "g", EXACT, GDB_CMD_READ_REGS, parse_none },
	{ "G", PREFIX, GDB_CMD_WRITE_REGS, parse_G },
	{ "p", PREFIX, GDB_CMD_READ_REG, parse_p },
	{ "P", PREFIX, GDB_CMD_WRITE_REG, parse_P },
	{ "m", PREFIX, GDB_CMD_READ_MEM, parse_m },
	{ "M", PREFIX, GDB_CMD_WRITE_MEM, parse_M },
	{ "X", PREFIX, GDB_CMD_WRITE_MEM_X, parse_X },
	{ "c", PREFIX, GDB_CMD_CONTINUE, parse_resume },
	{ "s", PREFIX, GDB_CMD_STEP, parse_resume },
	{ "C", PREFIX, GDB_CMD_CONTINUE, parse_resume_sig },
	{ "S", PREFIX, GDB_CMD_STEP, parse_resume_sig },
	{ "vCont?", EXACT, GDB_CMD_VCONT_QUERY, parse_none },
	{ "vCont;", PREFIX, GDB_CMD_CONTINUE, parse_vcont },
	{ "Z", PREFIX, GDB_CMD_INSERT_BP, parse_Z },
	{ "z", PREFIX, GDB_CMD_REMOVE_BP, parse_Z },
	{ "H", PREFIX, GDB_CMD_SET_THREAD, parse_H },
	{ "T", PREFIX, GDB_CMD_THREAD_ALIVE, parse_T },
	{ "qSupported", PREFIX, GDB_CMD_SUPPORTED, parse_supported },
	{ "qAttached", PREFIX, GDB_CMD_ATTACHED, parse_none },
	{ "qC", EXACT, GDB_CMD_CURRENT_THREAD, parse_none },
	{ "qfThreadInfo", EXACT, GDB_CMD_THREADS_FIRST, parse_none },
	{ "qsThreadInfo", EXACT, GDB_CMD_THREADS_NEXT, parse_none },
	{ "qXfer:features:read:", PREFIX, GDB_CMD_XFER_FEATURES, parse_xfer },
	{ "QStartNoAckMode", EXACT, GDB_CMD_NOACK, parse_none },
	{ "D", PREFIX, GDB_CMD_DETACH, parse_D },
	{ "k", EXACT, GDB_CMD_KILL, parse_none },
};

static const struct gdb_cmd_row *find_row(const char *p, size_t len)
{
	for (size_t i = 0; i < ARRAY_SIZE(cmd_table); i++) {
		const struct gdb_cmd_row *row = &cmd_table[i];
		size_t n = strlen(row->name);

		if (len < n || memcmp(p, row->name, n) || (row->match == EXACT && len != n))
			continue;
		return row;
	}
	return NULL;
}

void gdb_parse(const char *p, size_t len, struct gdb_cmd *cmd)
{
	const struct gdb_cmd_row *row = find_row(p, len);
	struct cur c;

	memset(cmd, 0, sizeof(*cmd));
	if (!row) {
		cmd->kind = GDB_CMD_UNKNOWN;
		return;
	}
	c.p = p + strlen(row->name);
	c.end = p + len;
	cmd->kind = row->kind;
	/* qAttached may carry a pid (multiprocess); anything after the name is ignored. */
	if (row->kind == GDB_CMD_ATTACHED)
		return;
	if (!row->parse(&c, cmd))
		cmd->kind = GDB_CMD_BAD;
}

/* The gdb remote serial protocol without sockets or a VM: packet decoder and encoder, command parser, x86-64 register table. */
#ifndef LKVM_GDB_RSP_H
#define LKVM_GDB_RSP_H

#include <stdbool.h>
#include <stddef.h>

#include "lkvm/gdb.h"
#include "lkvm/util.h"

/*
 * The longest payload gdb may send us (advertised as PacketSize in qSupported, so gdb splits
 * its M and X writes to fit). A longer packet is dropped and answered '-', never stored.
 */
#define GDB_PACKET_MAX 4096
/* A reply's payload, before escaping: the longest is an m reply (hex of GDB_PACKET_MAX / 2
 * bytes) or a qXfer chunk. */
#define GDB_REPLY_MAX (GDB_PACKET_MAX + 64)
/* '$', the payload with every byte escaped, '#', two checksum digits, a NUL. */
#define GDB_FRAME_MAX (2 * GDB_REPLY_MAX + 5)

/* What one gdb_rx_feed call found. */
enum gdb_rx_event {
	GDB_RX_NONE,	  /* the input ran out inside or between packets */
	GDB_RX_PACKET,	  /* a packet with a good checksum: rx->buf, rx->len (unescaped) */
	GDB_RX_BAD,	  /* a bad checksum or a packet over GDB_PACKET_MAX: answer '-' */
	GDB_RX_INTERRUPT, /* 0x03 between packets: gdb's Ctrl-C */
	GDB_RX_ACK,	  /* '+': gdb got our last reply */
	GDB_RX_NAK,	  /* '-': gdb wants our last reply again */
};

/* The decoder: fed arbitrary chunks of the byte stream, it keeps its place across them. */
struct gdb_rx {
	int state;		      /* where in a packet (rsp.c's enum) */
	u8 sum;			      /* running checksum of the raw payload bytes */
	u8 want;		      /* the checksum the packet carries, digit by digit */
	bool overflow;		      /* the payload passed GDB_PACKET_MAX: drop it at '#' */
	size_t len;		      /* payload bytes in buf (unescaped) */
	char buf[GDB_PACKET_MAX + 1]; /* NUL-terminated for convenience; X data may hold NULs */
};

void gdb_rx_init(struct gdb_rx *rx);
/* Consumes bytes of data up to and including the first event's last byte, and returns how many
 * (len when *ev is GDB_RX_NONE). A GDB_RX_PACKET's buf stays valid until the next call. */
size_t gdb_rx_feed(struct gdb_rx *rx, const u8 *data, size_t len, enum gdb_rx_event *ev);

/* Frame a reply payload: '$', the payload with '$' '#' '}' '*' escaped, '#', the checksum.
 * Returns the frame's length, or 0 when it would not fit in cap (a bug: replies are bounded). */
size_t gdb_frame(const char *payload, size_t len, char *out, size_t cap);

enum gdb_cmd_kind {
	GDB_CMD_UNKNOWN,	/* answered with the empty packet: "not supported" */
	GDB_CMD_BAD,		/* a command we know, malformed: answered E */
	GDB_CMD_STATUS,		/* ? */
	GDB_CMD_READ_REGS,	/* g */
	GDB_CMD_WRITE_REGS,	/* G hex */
	GDB_CMD_READ_REG,	/* p n */
	GDB_CMD_WRITE_REG,	/* P n=hex */
	GDB_CMD_READ_MEM,	/* m addr,len */
	GDB_CMD_WRITE_MEM,	/* M addr,len:hex */
	GDB_CMD_WRITE_MEM_X,	/* X addr,len:binary */
	GDB_CMD_CONTINUE,	/* c [addr], C sig[;addr], vCont;c */
	GDB_CMD_STEP,		/* s [addr], S sig[;addr], vCont;s:TID */
	GDB_CMD_VCONT_QUERY,	/* vCont? */
	GDB_CMD_VCONT_STOP,	/* vCont;t (a non-stop request: nothing to do in all-stop) */
	GDB_CMD_INSERT_BP,	/* Z0-Z4 type,addr,kind */
	GDB_CMD_REMOVE_BP,	/* z0-z4 */
	GDB_CMD_SET_THREAD,	/* Hg TID, Hc TID */
	GDB_CMD_THREAD_ALIVE,	/* T TID */
	GDB_CMD_SUPPORTED,	/* qSupported[:features] */
	GDB_CMD_ATTACHED,	/* qAttached */
	GDB_CMD_CURRENT_THREAD, /* qC */
	GDB_CMD_THREADS_FIRST,	/* qfThreadInfo */
	GDB_CMD_THREADS_NEXT,	/* qsThreadInfo */
	GDB_CMD_XFER_FEATURES,	/* qXfer:features:read:target.xml:off,len */
	GDB_CMD_NOACK,		/* QStartNoAckMode */
	GDB_CMD_DETACH,		/* D, D;pid */
	GDB_CMD_KILL,		/* k */
};

/* Thread ids as gdb writes them: -1 every thread, 0 any thread, N > 0 gdb thread N. */
#define GDB_THREAD_ALL (-1)
#define GDB_THREAD_ANY 0
/* gdb's thread ids are vCPU index + 1; a larger one is refused by the parser. */
#define GDB_THREAD_MAX 0xffff

struct gdb_cmd {
	enum gdb_cmd_kind kind;
	u64 addr;	     /* m M X Z z; qXfer's offset; c/s's resume address */
	u64 len;	     /* m M X; Z's kind; qXfer's length */
	bool has_addr;	     /* c/s/C/S: an address to resume at */
	u32 reg;	     /* p P */
	enum gdb_bp_kind bp; /* Z z */
	int thread;	     /* H T; s's thread (vCont;s:TID), GDB_THREAD_ANY: the current */
	char op;	     /* H: 'g' or 'c' */
	const char *data;    /* G P M: hex digits; X: binary; points into the packet */
	size_t data_len;
};

/* Parse one packet's payload (len bytes, not NUL-terminated). Every number is checked for
 * bad digits and overflow; M's and X's data length must match len. Always fills *cmd. */
void gdb_parse(const char *p, size_t len, struct gdb_cmd *cmd);

/* Hex helpers: n bytes to 2n lowercase digits; 2n digits to n bytes (false on a bad digit). */
void gdb_hex_encode(const u8 *in, size_t n, char *out);
bool gdb_hex_decode(const char *in, size_t n, u8 *out);

/*
 * The x86-64 register file, one table (gdb/target-xml.c) that writes target.xml and
 * (de)serialises struct gdb_x86_regs in its order: gdb's register N is entry N.
 */
unsigned gdb_regs_count(void);
/* Bytes of register n on the wire (0: no such register), and of all of them (g's reply / 2). */
size_t gdb_reg_size(unsigned n);
size_t gdb_regs_size(void);
const char *gdb_reg_name(unsigned n);
/* g's reply: 2 * gdb_regs_size() hex digits (out holds that many, no NUL). */
void gdb_regs_to_hex(const struct gdb_x86_regs *r, char *out);
/* G's payload: an even number of hex digits covering the registers from the first; the ones
 * it does not reach keep their values. -EINVAL on a bad digit, an odd or too long input. */
int gdb_regs_from_hex(struct gdb_x86_regs *r, const char *hex, size_t len) __must_check;
/* p's reply (2 * gdb_reg_size(n) digits) and P's value (exactly that many). */
int gdb_reg_to_hex(const struct gdb_x86_regs *r, unsigned n, char *out) __must_check;
int gdb_reg_from_hex(struct gdb_x86_regs *r, unsigned n, const char *hex, size_t len) __must_check;
/* target.xml into buf (NUL-terminated when it fits); returns its length (snprintf's way). */
size_t gdb_target_xml(char *buf, size_t cap);

#endif

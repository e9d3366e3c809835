/* Round-trip tracing of bench frames (net-trace.h): one transaction in flight, a log-linear histogram per stage. */
#include <endian.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <x86intrin.h>

#include "lkvm/bench-frame.h"
#include "lkvm/iov.h"
#include "lkvm/net-trace.h"
#include "lkvm/stats.h"

/*
 * Log-linear buckets over ns: below HSUB ns one per ns, then HSUB per power of two, so a
 * bucket is at most 1/HSUB of its values wide and its midpoint within 1/(2 HSUB) = 1.6 % of
 * any of them. Deltas are at most 1 s < 2^30 ns.
 */
#define HBITS 5
#define HSUB (1u << HBITS)
#define HMAX_LOG 30
#define HBUCKETS (HSUB + (HMAX_LOG - HBITS) * HSUB)
/* The RX stamps of the last few echoes, by seq: the echo of N+1 may land while the TX thread
 * still aggregates N. */
#define RX_SLOTS 4

static const char *const stage_names[] = {
	[NT_WRITE] = "write", [NT_KICK] = "kick",	[NT_TX] = "tx",		[NT_WIRE] = "wire",
	[NT_RX] = "rx",	      [NT_PUBLISH] = "publish", [NT_NOTICE] = "notice",
};
_Static_assert(ARRAY_SIZE(stage_names) == NT_STAGES, "a name per stage");

/* The RX stamps of one echo, under a sequence lock (gen odd while being written). */
struct rx_stamps {
	atomic_ullong gen, seq, t4, t5, t6;
};

struct net_trace {
	atomic_ullong tsc_khz, offset, clock_err_ns;
	atomic_ullong transactions, bad;
	atomic_ullong hist[NT_STAGES][HBUCKETS];
	struct rx_stamps rx[RX_SLOTS];
	/* The TX thread's own: the last frame sent, waiting for its successor's G7. */
	struct {
		bool have;
		u64 seq, g0, g1, t2, t3;
	} tx;
};

const char *net_trace_stage_name(enum net_trace_stage s)
{
	return (unsigned)s < NT_STAGES ? stage_names[s] : "?";
}

struct net_trace *net_trace_new(void)
{
	return calloc(1, sizeof(struct net_trace));
}

void net_trace_free(struct net_trace *t)
{
	free(t);
}

void net_trace_set_clock(struct net_trace *t, u64 tsc_khz, u64 offset, u64 err_ns)
{
	atomic_store_explicit(&t->offset, offset, memory_order_relaxed);
	atomic_store_explicit(&t->clock_err_ns, err_ns, memory_order_relaxed);
	atomic_store_explicit(&t->tsc_khz, tsc_khz, memory_order_relaxed);
}

u64 net_trace_now(void)
{
	return __rdtsc();
}

static u64 le64_at(const u8 *b, int off)
{
	u64 v;

	memcpy(&v, b + off, sizeof(v));
	return le64toh(v);
}

bool net_trace_frame(const struct iovec *iov, int cnt, u64 off, struct net_trace_frame *f)
{
	u8 b[BENCH_OFF_T_SEEN + 8];
	u32 magic;

	if (iov_from(iov, cnt, off, b, sizeof(b)) != sizeof(b))
		return false;
	memcpy(&magic, b + BENCH_OFF_MAGIC, sizeof(magic));
	if (b[BENCH_OFF_ETHERTYPE] != BENCH_ETHERTYPE >> 8 ||
	    b[BENCH_OFF_ETHERTYPE + 1] != (BENCH_ETHERTYPE & 0xff) || le32toh(magic) != BENCH_MAGIC)
		return false;
	*f = (struct net_trace_frame){ .seq = le64_at(b, BENCH_OFF_SEQ),
				       .g_write = le64_at(b, BENCH_OFF_T_WRITE),
				       .g_kick = le64_at(b, BENCH_OFF_T_KICK),
				       .g_seen = le64_at(b, BENCH_OFF_T_SEEN) };
	return true;
}

static unsigned bucket_of(u64 ns)
{
	unsigned e, i;

	if (ns < HSUB)
		return (unsigned)ns;
	e = 63u - (unsigned)__builtin_clzll(ns);
	i = HSUB + (e - HBITS) * HSUB + (unsigned)((ns >> (e - HBITS)) & (HSUB - 1));
	return MIN(i, HBUCKETS - 1);
}

/* The midpoint of bucket i, in ns. */
static u64 bucket_ns(unsigned i)
{
	unsigned k, shift;

	if (i < HSUB)
		return i;
	k = i - HSUB;
	shift = k / HSUB;
	return ((u64)(HSUB + k % HSUB) << shift) + ((1ull << shift) >> 1);
}

u64 net_trace_percentile(struct net_trace *t, enum net_trace_stage s, unsigned p)
{
	u64 n = 0, rank, seen = 0;

	if ((unsigned)s >= NT_STAGES || !p || p > 100)
		return 0;
	for (unsigned i = 0; i < HBUCKETS; i++)
		n += atomic_load_explicit(&t->hist[s][i], memory_order_relaxed);
	if (!n)
		return 0;
	rank = MAX((n * p + 99) / 100, 1);
	for (unsigned i = 0; i < HBUCKETS; i++) {
		seen += atomic_load_explicit(&t->hist[s][i], memory_order_relaxed);
		if (seen >= rank)
			return bucket_ns(i);
	}
	return bucket_ns(HBUCKETS - 1); /* counts grew while we read */
}

/*
 * Sequence lock over rx[seq % RX_SLOTS] (one writer, the RX thread; one reader, the TX
 * thread), without fences (ThreadSanitizer does not model them): every field is an atomic,
 * so a torn read is a wrong number, never a data race, and the lock says when the numbers
 * belong together. Each field's release store pairs with rx_read's acquire load of it: a
 * reader that sees a new field also sees the odd gen stored before it, and fails its
 * second gen check. The even gen's release store pairs with rx_read's first (acquire) gen
 * load: a reader that sees it sees every field of that write.
 */
void net_trace_rx(struct net_trace *t, u64 seq, u64 t4, u64 t5, u64 t6)
{
	struct rx_stamps *r = &t->rx[seq % RX_SLOTS];
	u64 g = atomic_load_explicit(&r->gen, memory_order_relaxed);

	atomic_store_explicit(&r->gen, g + 1, memory_order_relaxed);
	atomic_store_explicit(&r->seq, seq, memory_order_release); /* pairs: rx_read */
	atomic_store_explicit(&r->t4, t4, memory_order_release);
	atomic_store_explicit(&r->t5, t5, memory_order_release);
	atomic_store_explicit(&r->t6, t6, memory_order_release);
	atomic_store_explicit(&r->gen, g + 2, memory_order_release); /* pairs: rx_read's first */
}

/* The RX stamps of seq's echo into ts[0..3) (T4, T5, T6): false when none was seen (or it
 * was being overwritten). */
static bool rx_read(struct net_trace *t, u64 seq, u64 ts[3])
{
	struct rx_stamps *r = &t->rx[seq % RX_SLOTS];
	u64 g = atomic_load_explicit(&r->gen, memory_order_acquire); /* pairs: net_trace_rx */
	u64 s = atomic_load_explicit(&r->seq, memory_order_acquire); /* pairs: its stores */

	ts[0] = atomic_load_explicit(&r->t4, memory_order_acquire);
	ts[1] = atomic_load_explicit(&r->t5, memory_order_acquire);
	ts[2] = atomic_load_explicit(&r->t6, memory_order_acquire);
	return !(g & 1) && g && s == seq &&
	       atomic_load_explicit(&r->gen, memory_order_relaxed) == g;
}

/*
 * The stages of the pending transaction, whose echo's stamps are ts and whose successor
 * brought g7, into d[] (ns; d[NT_WRITE] and d[NT_KICK] ~0 without G1). False when a delta is
 * < 0 or > 1 s (as unsigned differences, both are > 1 s) or the clock is unknown.
 */
static bool stage_deltas(struct net_trace *t, const u64 ts[3], u64 g7, u64 d[NT_STAGES])
{
	u64 khz = atomic_load_explicit(&t->tsc_khz, memory_order_relaxed);
	u64 off = atomic_load_explicit(&t->offset, memory_order_relaxed);
	u64 sec = khz * 1000, c[NT_STAGES];
	bool g1 = t->tx.g1 != 0;

	if (!khz || khz > 1000000000ull)
		return false;
	c[NT_WRITE] = t->tx.g1 - t->tx.g0;
	c[NT_KICK] = t->tx.t2 - (t->tx.g1 - off);
	c[NT_TX] = t->tx.t3 - t->tx.t2;
	c[NT_WIRE] = ts[0] - t->tx.t3;
	c[NT_RX] = ts[1] - ts[0];
	c[NT_PUBLISH] = ts[2] - ts[1];
	c[NT_NOTICE] = (g7 - off) - ts[2];
	for (int s = 0; s < NT_STAGES; s++) {
		if (!g1 && (s == NT_WRITE || s == NT_KICK)) {
			d[s] = ~0ull;
			continue;
		}
		if (c[s] > sec)
			return false;
		d[s] = (u64)((unsigned __int128)c[s] * 1000000u / khz);
	}
	return true;
}

/* Frame pending's successor brought g7: aggregate pending, or count it bad. */
static void aggregate(struct net_trace *t, u64 g7)
{
	u64 ts[3], d[NT_STAGES];

	if (!rx_read(t, t->tx.seq, ts) || !stage_deltas(t, ts, g7, d)) {
		atomic_fetch_add_explicit(&t->bad, 1, memory_order_relaxed);
		return;
	}
	for (int s = 0; s < NT_STAGES; s++)
		if (d[s] != ~0ull)
			atomic_fetch_add_explicit(&t->hist[s][bucket_of(d[s])], 1,
						  memory_order_relaxed);
	atomic_fetch_add_explicit(&t->transactions, 1, memory_order_relaxed);
}

void net_trace_tx(struct net_trace *t, const struct net_trace_frame *f, u64 t2, u64 t3)
{
	if (f->g_seen && t->tx.have) {
		if (t->tx.seq + 1 == f->seq)
			aggregate(t, f->g_seen);
		else
			atomic_fetch_add_explicit(&t->bad, 1, memory_order_relaxed);
	}
	t->tx.have = true;
	t->tx.seq = f->seq;
	t->tx.g0 = f->g_write;
	t->tx.g1 = f->g_kick;
	t->tx.t2 = t2;
	t->tx.t3 = t3;
}

void net_trace_stats(struct net_trace *t, struct stats_visitor *v)
{
	char name[32];

	v->group(v, "trace");
	v->counter(v, "transactions", atomic_load_explicit(&t->transactions, memory_order_relaxed));
	v->counter(v, "bad", atomic_load_explicit(&t->bad, memory_order_relaxed));
	v->counter(v, "clock_err_ns", atomic_load_explicit(&t->clock_err_ns, memory_order_relaxed));
	v->counter(v, "tsc_khz", atomic_load_explicit(&t->tsc_khz, memory_order_relaxed));
	for (int s = 0; s < NT_STAGES; s++) {
		snprintf(name, sizeof(name), "%s_p50_ns", stage_names[s]);
		v->counter(v, name, net_trace_percentile(t, s, 50));
		snprintf(name, sizeof(name), "%s_p99_ns", stage_names[s]);
		v->counter(v, name, net_trace_percentile(t, s, 99));
	}
}

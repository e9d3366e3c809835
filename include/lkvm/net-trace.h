/* Round-trip tracing of bench frames: the stamps of one transaction at a time and a histogram per stage, knowing no virtio. */
#ifndef LKVM_NET_TRACE_H
#define LKVM_NET_TRACE_H

#include <stdbool.h>
#include <sys/uio.h>

#include "lkvm/util.h"

struct stats_visitor;
struct net_trace;

/*
 * One rr transaction (seq N) goes through seven stages, each the time between two stamps
 * (G*: the guest's TSC, written into the frame; T*: the host's TSC, host = guest - offset):
 *   write   G0 -> G1  the guest writes the frame -> its notify (no G1: write and kick skipped)
 *   kick    G1 -> T2  -> the TX drain pass that popped the chain began
 *   tx      T2 -> T3  -> the backend's send returned
 *   wire    T3 -> T4  -> the RX pass that read the echo began
 *   rx      T4 -> T5  -> the echo copied into the guest's buffer
 *   publish T5 -> T6  -> the used index published
 *   notice  T6 -> G7  -> the guest saw it (G7 comes in frame N+1)
 * N is aggregated when frame N+1 brings G7: its deltas go into the stages' histograms
 * (counted in `transactions`); a delta < 0 or > 1 s is counted in `bad` instead, as is a
 * transaction whose stamps do not belong together (frame N+1 after another than N, no echo
 * of N seen). The stamps are only numbers from guest memory: any value is harmless.
 */
enum net_trace_stage { NT_WRITE, NT_KICK, NT_TX, NT_WIRE, NT_RX, NT_PUBLISH, NT_NOTICE, NT_STAGES };

/* The stage's name, as its counters carry it (kick: kick_p50_ns, kick_p99_ns). */
const char *net_trace_stage_name(enum net_trace_stage s);

/* NULL when out of memory. */
struct net_trace *net_trace_new(void);
void net_trace_free(struct net_trace *t);

/* The guest's clock: TSC kHz (0: unknown, every transaction is bad), guest TSC - host TSC,
 * and how far that offset may be off (ns; 0 when KVM told it exactly). Any thread, any time. */
void net_trace_set_clock(struct net_trace *t, u64 tsc_khz, u64 offset, u64 err_ns);

/* The host's TSC (the stamps' clock). */
u64 net_trace_now(void);

/* What a bench frame carries for the trace (net_trace_frame). */
struct net_trace_frame {
	u64 seq, g_write, g_kick, g_seen;
};

/* Read the trace fields of the frame at byte off of iov[0..cnt) (after the virtio-net
 * header): false when it is no bench frame (EtherType, magic) or too short. */
bool net_trace_frame(const struct iovec *iov, int cnt, u64 off, struct net_trace_frame *f);

/* The TX thread, frame seq sent: f's guest stamps, t2 (its drain pass began) and t3 (the
 * send returned). Aggregates seq - 1 when f->g_seen is set. One TX thread per trace. */
void net_trace_tx(struct net_trace *t, const struct net_trace_frame *f, u64 t2, u64 t3);
/* The RX thread, the echo of seq: t4 (its pass began), t5 (in the guest's buffer), t6 (the
 * used index published). One RX thread per trace. */
void net_trace_rx(struct net_trace *t, u64 seq, u64 t4, u64 t5, u64 t6);

/* Group "trace": transactions, bad, clock_err_ns, tsc_khz, then S_p50_ns and S_p99_ns per
 * stage (0 while the stage has no sample). */
void net_trace_stats(struct net_trace *t, struct stats_visitor *v);
/* Stage s's p-th percentile (0 < p <= 100) in ns, within ~2 %; 0 without samples. */
u64 net_trace_percentile(struct net_trace *t, enum net_trace_stage s, unsigned p);

#endif

/* The frame format that `lkvm bench net`, its guest (tests/guest/net-bench.c) and its host peer (tests/tools/net-peer.c) share. */
#ifndef LKVM_BENCH_FRAME_H
#define LKVM_BENCH_FRAME_H

/*
 * Freestanding (the guest has no libc): macros, an enum and one inline function on compiler
 * builtins. A bench frame is an
 * Ethernet frame (broadcast or the peer's MAC) of BENCH_FRAME_MIN to BENCH_FRAME_MAX bytes:
 *   0  destination MAC, 6  source MAC, 12 EtherType BENCH_ETHERTYPE (big-endian),
 *   14 BENCH_MAGIC, 18 the test (enum bench_frame_test), 22 a sequence number,
 *   30 a pattern derived from the sequence number (the guest checks rr's echoes against it);
 *   in rr with the guest's trace=1, three guest TSC stamps come first and the pattern starts
 *   at 54: 30 G0 (it started writing the frame), 38 G1 (right before its notify; 0 if it
 *   will not notify), 46 G7 (it saw the previous transaction's echo; 0 for the first), for
 *   lkvm's -n trace=on to break the round trip into stages.
 * Multi-byte fields after the EtherType are little-endian (the x86 guest writes them as-is).
 */
#define BENCH_ETHERTYPE 0x88b5 /* IEEE local experimental: nothing else on the link uses it */
#define BENCH_MAGIC 0x42564b4c /* "LKVB" little-endian */
#define BENCH_OFF_ETHERTYPE 12
#define BENCH_OFF_MAGIC 14 /* u32 */
#define BENCH_OFF_TEST 18  /* u32 */
#define BENCH_OFF_SEQ 22   /* u64 */
#define BENCH_OFF_PATTERN 30
#define BENCH_OFF_T_WRITE 30
#define BENCH_OFF_T_KICK 38
#define BENCH_OFF_T_SEEN 46
#define BENCH_FRAME_MIN 60
#define BENCH_FRAME_MAX 1514

/*
 * How long the bench's floors (a host thread on the tap) and net-peer's spin-echo poll without
 * sleeping before they sleep in poll(): longer than lkvm's tx=poll window (50 us) and than any
 * round trip on an idle host, so that there they never sleep, while on a busy host two
 * spinners sharing a CPU still let each other run.
 */
#define BENCH_SPIN_NS 100000

enum bench_frame_test { BENCH_TEST_TX = 1, BENCH_TEST_RR, BENCH_TEST_RX, BENCH_TEST_NOTIFY };

/* Writes a bench frame's head (broadcast destination, source MAC, EtherType, magic, test) at f:
 * the one writer of the layout above for the guest, net-peer and the bench's floors. */
static inline void bench_frame_head(unsigned char *f, const unsigned char mac[6],
				    enum bench_frame_test test)
{
	unsigned magic = BENCH_MAGIC, t = test;

	__builtin_memset(f, 0xff, 6);
	__builtin_memcpy(f + 6, mac, 6);
	f[BENCH_OFF_ETHERTYPE] = BENCH_ETHERTYPE >> 8;
	f[BENCH_OFF_ETHERTYPE + 1] = BENCH_ETHERTYPE & 0xff;
	__builtin_memcpy(f + BENCH_OFF_MAGIC, &magic, 4);
	__builtin_memcpy(f + BENCH_OFF_TEST, &t, 4);
}

#endif

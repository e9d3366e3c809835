/* Inside `lkvm bench net`: a row of its table, the CPU it accounts (bench/cpu.c) and its charts (bench/svg.c). */
#ifndef LKVM_BENCH_H
#define LKVM_BENCH_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "lkvm/util.h"

/* Other processes used more than this many cores while a row ran: the row was taken on a
 * busy host (on 2 cores one other busy process made rr 3-6x slower). */
#define BENCH_BUSY_CORES 0.10
/* A cell that does better than its floor by more than this fraction means the floor is not
 * one (rr: RTT below 0.9x the floor's; tx, rx: more than 1/0.9x the floor's packet rate). */
#define BENCH_FLOOR_NOISE 0.9

/* The round trip's stages as lkvm's -n trace=on names them (its "trace" stats group), in order:
 * write, kick, tx, wire, rx, publish, notice (docs: the frame's stamps in lkvm/bench-frame.h). */
#define BENCH_NSTAGES 7
extern const char *const bench_stages[BENCH_NSTAGES];

/* One line of the table: a cell (mode x test x size) or a floor. NAN: not applicable. */
struct bench_row {
	char mode[32], test[8];
	const char *group; /* the TX strategy the chart groups it under (NULL: floors) */
	const char *batch; /* lkvm: "on" or "off" where -n batch= exists, else NULL */
	unsigned size;
	bool floor;
	bool qemu;	  /* under QEMU: no device counters, kicks as the guest counted them */
	bool busy;	  /* other_cpu above BENCH_BUSY_CORES */
	bool beats_floor; /* better than its floor beyond BENCH_FLOOR_NOISE */
	char error[160];  /* non-empty: the cell failed, why */
	double secs, pps, mbps, rtt_med_us, rtt_p99_us, tps, ratio;
	double cpu;	  /* the VMM's CPU time (all threads) / its wall time: 1.0 = one core */
	double other_cpu; /* other processes' CPU while the row ran, in cores */
	/* ns of host CPU per packet: the VMM's threads but its vCPUs while the guest measured
	 * (floors: the floor's own thread) */
	double host_ns;
	double vcpu_ns;	  /* ns of the vCPU threads' CPU per packet, the same window */
	double floor_ns;  /* cells: the floor's host_ns */
	double kworker_s; /* CPU s of the VMM's kernel vhost workers: the VMM's, not "other" */
	/* host_ns and vcpu_ns partly from clock ticks (no schedstat): 10 ms steps, a short cell's
	 * few ms read 0 */
	bool cpu_ticks;
	/* lkvm's rr with -n trace=on: per stage (bench_stages) the median and p99 in ns, the
	 * transactions that gave them and the clock's error bound; NAN without (QEMU, floors, tx,
	 * rx, an lkvm with no trace=) */
	double stage_p50[BENCH_NSTAGES], stage_p99[BENCH_NSTAGES];
	double trace_transactions, trace_clock_err_ns;
	unsigned long long guest_frames, lost, peer_frames, peer_drops;
	unsigned long long tx_pkts, tx_drops, rx_pkts, rx_drops, tap_rx, tap_tx, tap_tx_drops;
	unsigned long long kicks, trapped, irqs, exits, polls, poll_hits, poll_us, packets;
};

/* ---- what the guest and the VMM print (bench/parse.c): the guest's words are untrusted ---- */

/* The last line of out that starts with prefix, or NULL. */
const char *bench_last_line(const char *out, const char *prefix);
/* lkvm's --stats=json line: the device counters into r (0 where absent) and its "trace" group's
 * stages (NAN where absent). */
void bench_parse_stats(struct bench_row *r, const char *stats);
/* The guest's BENCH line (up to its newline) into r, as r->test says; a count the line does not
 * give as a number from 0 to 2^63 reads 0. */
void bench_parse_bench_line(struct bench_row *r, const char *bl, bool qemu);

/* ---- CPU accounting (bench/cpu.c) ---- */

#define BENCH_MAX_THREADS 64

/* Whether a sample also takes the VMM's kernel vhost workers, which before Linux 6.4 are kernel
 * threads "vhost-<VMM pid>" (/proc/TID, not the VMM's task list; from 6.4 they are the VMM's
 * own threads, already in it). Finding them reads every process's /proc/N/stat (2.4 ms with
 * 100 processes): done at the samples that matter, the others re-read the workers found. */
enum bench_kworkers { BENCH_KW_NONE, BENCH_KW_KNOWN, BENCH_KW_SCAN };

/* A process's threads as /proc/PID/task/TID/stat (the name) and schedstat (the CPU) last showed
 * them. */
struct bench_threads {
	enum bench_kworkers kworkers; /* set by the caller */
	int n;
	struct bench_thread {
		int tid;
		char comm[16];
		u64 cpu;      /* ns on a CPU (schedstat), or with ticks stat's utime + stime */
		bool kworker; /* a kernel vhost worker of the VMM (host CPU, not another process's) */
		bool ticks;   /* no schedstat: cpu in 1/CLK_TCK s ticks (10 ms) */
	} t[BENCH_MAX_THREADS];
};

/* A vCPU thread by its name: lkvm's "lkvm-vcpuN", QEMU's "CPU N/KVM" (-name debug-threads=on). */
bool bench_vcpu_thread(const char *comm);
/* A kernel vhost worker of the VMM pid by its name: exactly "vhost-<pid>". */
bool bench_vhost_worker(const char *comm, pid_t pid);
/* One /proc/PID/task/TID/stat line: the name and utime + stime. 0 or -EINVAL. */
int bench_parse_task_stat(const char *line, char *comm, size_t len, u64 *ticks);
/* One /proc/PID/task/TID/schedstat line: its first field, ns the thread ran. 0, -EINVAL, or
 * -ERANGE past u64. */
int bench_parse_schedstat(const char *line, u64 *ns);
/* Reads pid's threads into s (and its kernel vhost workers as s->kworkers says), keeping what
 * s had for threads that are gone. 0 or -errno. */
int bench_threads_sample(pid_t pid, struct bench_threads *s);
/* Seconds of CPU from a to b: the vCPU threads' and the others' (a thread new in b from 0). */
void bench_threads_cpu(const struct bench_threads *a, const struct bench_threads *b, double *host_s,
		       double *vcpu_s);
/* Whether some thread in s was read in clock ticks (no schedstat). */
bool bench_threads_ticks(const struct bench_threads *s);
/* Seconds of CPU the kernel vhost workers in s used since they started (all of it the VMM's). */
double bench_kworkers_cpu(const struct bench_threads *s);

/* The whole host's busy CPU and this process's own (itself and its reaped children). */
struct bench_load {
	u64 busy_ticks, t_ns;
	double own_s;
};

/* /proc/stat's first line: user + nice + system + irq + softirq (no idle, iowait, steal). */
int bench_parse_proc_stat(const char *line, u64 *busy);
int bench_load_start(struct bench_load *l);
/* Cores the other processes used since l (never below 0), or NAN if /proc/stat is unreadable;
 * mine_s: CPU seconds of kernel threads that worked for the bench's own VMMs (vhost workers). */
double bench_load_other(const struct bench_load *l, double mine_s);

/* A --modes name: its index in lkvm bench net's mode table, and whether it is a vhost mode
 * (vhost may be NULL); -EINVAL if there is none. */
int bench_mode_of(const char *name, bool *vhost);

/* ---- charts (bench/svg.c) ---- */

/* The rates chart (tx, rx Kpps and rr RTT per test and size, the floor as a line) or, with
 * cpu, host CPU per packet; lkvm's and QEMU's bars side by side per TX strategy. 0 or -errno. */
int bench_svg(FILE *f, const struct bench_row *rows, int n, unsigned secs, const char *host,
	      bool cpu);

#endif

/* Inside `lkvm bench net` (bench/): its matrix's axes, its configuration and state, and what its files give each other. */
#ifndef LKVM_BENCH_PRIV_H
#define LKVM_BENCH_PRIV_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "lkvm/bench.h"
#include "lkvm/opt.h"
#include "lkvm/util.h"

#define TAP_NAME "lkvmbench0"
#define MAX_LIST 8
#define MAX_ROWS 256

enum bench_mode { M_IOEVENTFD, M_TRAP, M_TIMER, M_POLL, M_TIMER_TRAP, M_POLL_TRAP, M_VHOST, M_NR };

struct mode_info {
	const char *name;
	const char *nopts; /* appended to -n */
	const char *what;
	const char *group; /* the TX strategy, as the chart groups lkvm's and QEMU's bars */
	/* Its rings are served by the kernel: it needs /dev/vhost-net, and lkvm refuses batch=
	 * with vhost=on, so it runs once per cell with no batch axis (no /nobatch row). */
	bool vhost;
};

/* --qemu: the same guest under QEMU's virtio-net-pci (modern only) on the same tap; qemu/vhost
 * only where vhost is among --modes. */
enum qemu_mode { Q_BH, Q_BH_TRAP, Q_TIMER, Q_TIMER_TRAP, Q_VHOST, Q_NR };

struct qemu_info {
	const char *name;
	const char *dev; /* virtio-net-pci properties */
	const char *what;
	const char *group;
	bool vhost; /* -netdev tap,vhost=on: QEMU's TX strategy no longer matters (tx= unset) */
};

enum bench_test { T_TX, T_RR, T_RX, T_NR };

struct test_info {
	const char *name;
	const char *peer; /* net-peer mode */
};

/* The tables, indexed by those enums (bench/cfg.c). */
extern const struct mode_info bench_mode_info[];
extern const struct qemu_info bench_qemu_info[];
extern const struct test_info bench_test_info[];

struct bench_cfg {
	int modes[M_NR], nmodes;
	int tests[T_NR], ntests;
	unsigned sizes[MAX_LIST];
	int nsizes;
	unsigned secs;
	int batch[2], nbatch; /* lkvm's -n batch= per mode: 1 on, 0 off; -1: this lkvm has none */
	bool qemu;	      /* --qemu given */
	const char *json, *svg, *log_dir;
	const char *guest_arg, *peer_arg; /* --guest, --peer (else found beside lkvm) */
	char self[PATH_MAX], guest[PATH_MAX], peer[PATH_MAX], qemu_bin[PATH_MAX];
};

struct bench {
	struct bench_cfg cfg;
	struct bench_row rows[MAX_ROWS];
	int nrows, total, done;
	char qemu_note[200];  /* non-empty: --qemu was asked for and could not run, why */
	bool vhost_asked;     /* a vhost mode is among --modes */
	char vhost_note[200]; /* non-empty: it was asked for and cannot run here, why */
	pid_t kids[2];	      /* children running now, for the signal path */
};

/* Set by SIGINT or SIGTERM to the signal: every loop checks it (bench/run.c). */
extern volatile sig_atomic_t bench_interrupted;

/* ---- configuration (cfg.c) ---- */

/* The options' lists into c (--modes, --tests, --sizes, --batch) and --qemu[=PATH]: opt.h's
 * OPT_FN callbacks, base the struct bench_cfg. */
int bench_opt_modes(const struct opt *o, const char *v, void *base, char *err, size_t errlen);
int bench_opt_tests(const struct opt *o, const char *v, void *base, char *err, size_t errlen);
int bench_opt_sizes(const struct opt *o, const char *v, void *base, char *err, size_t errlen);
int bench_opt_batch(const struct opt *o, const char *v, void *base, char *err, size_t errlen);
int bench_opt_qemu(const struct opt *o, const char *v, void *base, char *err, size_t errlen);
int bench_set_defaults(struct bench_cfg *c, char *err, size_t errlen);
/* After the options: 0, or 1 with the message printed. */
int bench_find_programs(struct bench_cfg *c);
int bench_batch_axis(struct bench_cfg *c);
/* Whether this lkvm (which runs the cells) has -n NAME= (batch, trace). */
bool bench_lkvm_has(const char *name);
int bench_find_beside(const char *self, const char *rel, char *out, size_t len);

/* ---- processes (proc.c) ---- */

struct kid {
	pid_t pid;
	int out, err; /* read ends; err -1 when merged into out */
};

/* Called at least every SAMPLE_MS while a child's output is read, with all of it so far. */
struct watch {
	void (*fn)(struct watch *w, const char *out);
};

#define SAMPLE_MS 20

struct peer_run {
	struct kid k;
	char *err;
	size_t err_len;
};

int bench_tap_attach(bool vnet_hdr, bool persist);
int bench_setup_netns(void);
void bench_tap_counters(unsigned long long *rx, unsigned long long *tx,
			unsigned long long *tx_drop);
/* Starts argv[0] as b's child in slot (0: the VMM, 1: net-peer), stdin from /dev/null. */
int bench_spawn(struct bench *b, int slot, char *const argv[], bool merge, struct kid *k);
bool bench_slurp(int fd, char **buf, size_t *len, u64 deadline, struct watch *w);
/* Waits for k; its exit status (128 + the signal if killed) and CPU seconds (may be NULL). */
int bench_reap(struct bench *b, int slot, struct kid *k, double *cpu_secs);
/* Starts net-peer in mode on the tap and waits until it is ready; why says it if not. */
int bench_peer_start(struct bench *b, const char *mode, unsigned size, struct peer_run *p,
		     char *why, size_t wlen);
void bench_peer_stop(struct bench *b, struct peer_run *p, unsigned long long *frames,
		     unsigned long long *drops, const char *log);

/* ---- parsing (parse.c) ---- */

/* bench_last_line, bench_parse_stats, bench_parse_bench_line: in lkvm/bench.h (fuzz_bench). */

/* ---- one boot of the guest (guest.c) ---- */

int bench_run_guest(struct bench *b, int q, bool vhost, const char *nopts, const char *params,
		    struct bench_row *r, const char *log);

/* ---- floors (floor.c): each fills r from its run on the tap fd ---- */

void bench_floor_tap_write(struct bench *b, int fd, struct bench_row *r);
void bench_floor_tap_read(struct bench *b, int fd, struct bench_row *r);
void bench_floor_peer_echo(struct bench *b, int fd, struct bench_row *r);

/* ---- results (report.c) ---- */

const char *bench_host_kind(void);
bool bench_host_emulated(void);
void bench_progress(struct bench *b, const struct bench_row *r);
int bench_print_table(FILE *out, const struct bench *b);
int bench_write_json(const struct bench *b, const char *path);
int bench_write_svgs(const struct bench *b, const char *path);

/* ---- the run (run.c) ---- */

int bench_net(struct bench *b, int argc, char **argv);

#endif

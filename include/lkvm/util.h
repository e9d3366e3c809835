/* Small shared helpers: fixed-width types, logging, error-return conventions. */
#ifndef LKVM_UTIL_H
#define LKVM_UTIL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>
#include <stddef.h>
#include <stdint.h>

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int64_t s64;

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define ALIGN_UP(x, a) (((x) + ((a)-1)) & ~((__typeof__(x))(a)-1))
#define ALIGN_DOWN(x, a) ((x) & ~((__typeof__(x))(a)-1))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
/* free() and forget: a buffer that may be freed again, or allocated again on a later start. */
#define FREE_AND_NULL(p) (free(p), (p) = NULL)
#define KiB(x) ((u64)(x) << 10)
#define MiB(x) ((u64)(x) << 20)
#define GiB(x) ((u64)(x) << 30)

#define __must_check __attribute__((warn_unused_result))
#define __printf(a, b) __attribute__((format(printf, a, b)))
#define __unused __attribute__((unused))

enum log_level { LOG_ERR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Messages go to stderr prefixed with "lkvm: "; the level threshold is process-wide
 * configuration (set once by main), not VM state. */
void lkvm_log(enum log_level lvl, const char *fmt, ...) __printf(2, 3);
void lkvm_set_log_level(enum log_level lvl);
#define pr_err(...) lkvm_log(LOG_ERR, __VA_ARGS__)
#define pr_warn(...) lkvm_log(LOG_WARN, __VA_ARGS__)
#define pr_info(...) lkvm_log(LOG_INFO, __VA_ARGS__)
#define pr_debug(...) lkvm_log(LOG_DEBUG, __VA_ARGS__)

/*
 * Rate limit for messages a guest can trigger (it must not be able to flood the host's
 * log): at most RATELIMIT_BURST lines per RATELIMIT_INTERVAL_MS for one limiter, then
 * silence; the next line that passes says how many were suppressed. A zeroed struct is
 * ready to use; keep one per message source in the device's state (never file-static).
 * Lock-free: concurrent callers may let a line or two more through a window, never an
 * unbounded number.
 */
#define RATELIMIT_BURST 5
#define RATELIMIT_INTERVAL_MS 5000
struct ratelimit {
	atomic_ullong start_ns; /* start of the current window (0: none yet) */
	atomic_uint count;	/* lines asked for in this window */
	atomic_uint missed;	/* suppressed since the last line that passed */
};
/* True when a line may go out now; *missed is then the number suppressed before it. */
bool ratelimit_allow(struct ratelimit *rl, unsigned *missed) __must_check;
/* lkvm_log through rl; below the log threshold nothing is counted. */
void lkvm_log_rl(struct ratelimit *rl, enum log_level lvl, const char *fmt, ...) __printf(3, 4);
#define pr_err_rl(rl, ...) lkvm_log_rl(rl, LOG_ERR, __VA_ARGS__)
#define pr_warn_rl(rl, ...) lkvm_log_rl(rl, LOG_WARN, __VA_ARGS__)
#define pr_info_rl(rl, ...) lkvm_log_rl(rl, LOG_INFO, __VA_ARGS__)
#define pr_debug_rl(rl, ...) lkvm_log_rl(rl, LOG_DEBUG, __VA_ARGS__)

/* Format an error message into buf (library code reports problems this way and
 * returns -errno; only main/command files print). Always NUL-terminates. */
void errfmt(char *buf, size_t len, const char *fmt, ...) __printf(3, 4);

/* Read a whole file into a malloc'd buffer. Returns 0 or -errno. */
int read_file(const char *path, u8 **data, size_t *len) __must_check;

/* Monotonic clock in nanoseconds. */
u64 now_ns(void);

/* CLOCK_MONOTONIC's time ms milliseconds from now into *ts (for pthread_cond_clockwait). */
void deadline_after_ms(struct timespec *ts, int ms);

/* Start a thread with every signal blocked in it: signals stay with the threads that expect
 * them (main's signalfd, the vCPUs' kicks). 0 or -errno. */
int thread_start_nosig(pthread_t *t, void *(*fn)(void *), void *arg) __must_check;

/* A hex digit's value, or -1. */
static inline int hex_digit(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Write all of buf to fd, retrying short writes and EINTR. Returns the bytes written, less
 * than len only when fd failed (or reported no progress). */
size_t write_full(int fd, const void *buf, size_t len);

/* Empty a non-blocking eventfd (fd < 0: nothing to do). */
void eventfd_drain(int fd);

/* len (at most 4) bytes little-endian, as in virtio and PCI registers. */
static inline u32 le_load(const u8 *p, u32 len)
{
	u32 v = 0;

	for (u32 i = 0; i < len && i < 4; i++)
		v |= (u32)p[i] << (8 * i);
	return v;
}

static inline void le_store(u8 *p, u32 len, u32 v)
{
	for (u32 i = 0; i < len && i < 4; i++)
		p[i] = (u8)(v >> (8 * i));
}

/* A full memory barrier (store-load ordering included). GCC refuses fences under
 * ThreadSanitizer, which does not model them: there it is the x86 locked no-op Linux's
 * smp_mb() uses, the same barrier in hardware, invisible to TSan. */
static inline void full_barrier(void)
{
#ifdef __SANITIZE_THREAD__
	__asm__ __volatile__("lock; orl $0, (%%rsp)" ::: "memory", "cc");
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/* Overflow-checked a + b <= limit, in u64. */
static inline bool range_ok(u64 base, u64 len, u64 limit)
{
	return base <= limit && len <= limit - base;
}

#endif

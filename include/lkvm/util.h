/* Small shared helpers: fixed-width types, logging, error-return conventions. */
#ifndef LKVM_UTIL_H
#define LKVM_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int64_t s64;

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((__typeof__(x))(a) - 1))
#define ALIGN_DOWN(x, a) ((x) & ~((__typeof__(x))(a) - 1))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
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

/* Format an error message into buf (library code reports problems this way and
 * returns -errno; only main/command files print). Always NUL-terminates. */
void errfmt(char *buf, size_t len, const char *fmt, ...) __printf(3, 4);

/* Read a whole file into a malloc'd buffer. Returns 0 or -errno. */
int read_file(const char *path, u8 **data, size_t *len) __must_check;

/* Monotonic clock in nanoseconds. */
u64 now_ns(void);

/* Overflow-checked a + b <= limit, in u64. */
static inline bool range_ok(u64 base, u64 len, u64 limit)
{
	return base <= limit && len <= limit - base;
}

#endif

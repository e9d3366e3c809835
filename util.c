/* Logging, error formatting, file reading and clocks shared by every part of lkvm. */
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lkvm/util.h"

/* Process-wide output policy, set once by main before any thread starts. */
static enum log_level log_threshold = LOG_INFO;

void lkvm_set_log_level(enum log_level lvl)
{
	log_threshold = lvl;
}

static void log_line(enum log_level lvl, const char *fmt, va_list ap, unsigned missed)
	__printf(2, 0);

void lkvm_log(enum log_level lvl, const char *fmt, ...)
{
	va_list ap;

	if (lvl > log_threshold)
		return;
	va_start(ap, fmt);
	log_line(lvl, fmt, ap, 0);
	va_end(ap);
}

void lkvm_log_rl(struct ratelimit *rl, enum log_level lvl, const char *fmt, ...)
{
	unsigned missed;
	va_list ap;

	if (lvl > log_threshold || !ratelimit_allow(rl, &missed))
		return;
	va_start(ap, fmt);
	log_line(lvl, fmt, ap, missed);
	va_end(ap);
}

bool ratelimit_allow(struct ratelimit *rl, unsigned *missed)
{
	/* unsigned long long, as atomic_ullong's compare-exchange wants (u64 is unsigned long). */
	unsigned long long now = now_ns(),
			   start = atomic_load_explicit(&rl->start_ns, memory_order_relaxed);

	*missed = 0;
	/* now is never 0 here (monotonic time since boot), so 0 can mean "no window". */
	if (!start || now - start >= (u64)RATELIMIT_INTERVAL_MS * 1000000ull) {
		/* One caller opens the new window; the others count in it. */
		if (atomic_compare_exchange_strong(&rl->start_ns, &start, now))
			atomic_store(&rl->count, 0);
	}
	if (atomic_fetch_add(&rl->count, 1) < RATELIMIT_BURST) {
		*missed = atomic_exchange(&rl->missed, 0);
		return true;
	}
	atomic_fetch_add(&rl->missed, 1);
	return false;
}

static void log_line(enum log_level lvl, const char *fmt, va_list ap, unsigned missed)
{
	static const char *const prefix[] = {
		[LOG_ERR] = "error: ",
		[LOG_WARN] = "warning: ",
		[LOG_INFO] = "",
		[LOG_DEBUG] = "debug: ",
	};
	char line[1024];
	int n;

	n = snprintf(line, sizeof(line), "lkvm: %s", prefix[lvl]);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	if (missed && n < (int)sizeof(line))
		snprintf(line + n, sizeof(line) - (size_t)n, " (%u similar messages suppressed)",
			 missed);
	/* One write per line so lines from several threads do not interleave. A bare \n: the
	 * terminal's raw mode keeps ONLCR (term.c), and a log file gets no \r. */
	n = (int)strnlen(line, sizeof(line) - 2);
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* Nowhere left to report to. */
	}
}

void errfmt(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!buf || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

int read_file(const char *path, u8 **data, size_t *len)
{
	struct stat st;
	size_t off = 0;
	u8 *buf;
	int fd, err;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	if (S_ISDIR(st.st_mode)) {
		close(fd);
		return -EISDIR;
	}
	if (!S_ISREG(st.st_mode) || st.st_size < 0 || (u64)st.st_size > GiB(4)) {
		close(fd);
		return -EFBIG;
	}
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (off < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + off, (size_t)st.st_size - off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			err = r < 0 ? -errno : -EIO;
			free(buf);
			close(fd);
			return err;
		}
		off += (size_t)r;
	}
	close(fd);
	*data = buf;
	*len = off;
	return 0;
}

size_t write_full(int fd, const void *buf, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t w = write(fd, (const char *)buf + off, len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	return off;
}

void eventfd_drain(int fd)
{
	u64 v;

	/* EAGAIN (nothing was pending) is the only failure of a non-blocking eventfd read. */
	if (fd >= 0 && read(fd, &v, sizeof(v)) < 0)
		return;
}

u64 now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (u64)ts.tv_sec * 1000000000ULL + (u64)ts.tv_nsec;
}

void deadline_after_ms(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

int thread_start_nosig(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	int ret;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	ret = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -ret;
}

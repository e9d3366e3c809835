/* Logging, error formatting, file reading and clocks shared by every part of lkvm. */
#include <errno.h>
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

void lkvm_log(enum log_level lvl, const char *fmt, ...)
{
	static const char *const prefix[] = {
		[LOG_ERR] = "error: ",
		[LOG_WARN] = "warning: ",
		[LOG_INFO] = "",
		[LOG_DEBUG] = "debug: ",
	};
	char line[1024];
	va_list ap;
	int n;

	if (lvl > log_threshold)
		return;
	n = snprintf(line, sizeof(line), "lkvm: %s", prefix[lvl]);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	/* One write per line so lines from several threads do not interleave; \r\n because
	 * the terminal may be in raw mode while the guest runs. */
	n = (int)strnlen(line, sizeof(line) - 3);
	line[n++] = '\r';
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

u64 now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (u64)ts.tv_sec * 1000000000ULL + (u64)ts.tv_nsec;
}

/* Unit-test helper: capture what lkvm logs to stderr (or prints to stdout), to count its lines. */
#ifndef LKVM_TEST_CAPTURE_H
#define LKVM_TEST_CAPTURE_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/util.h"

struct capture {
	int saved, fd, target;
};

/* Capture what goes to fd `target` (STDOUT_FILENO or STDERR_FILENO). */
static inline void capture_start_fd(struct capture *c, int target)
{
	char path[] = "/tmp/lkvm-test-stderr-XXXXXX";

	fflush(NULL);
	c->target = target;
	c->fd = mkstemp(path);
	ck_assert_int_ge(c->fd, 0);
	unlink(path);
	c->saved = dup(target);
	ck_assert_int_ge(c->saved, 0);
	ck_assert_int_ge(dup2(c->fd, target), 0);
}

static inline void capture_start(struct capture *c)
{
	capture_start_fd(c, STDERR_FILENO);
}

/* Restores stderr; returns the number of lines captured and, if buf, their text. */
static inline int capture_end(struct capture *c, char *buf, size_t len)
{
	char b[4096];
	ssize_t r;
	size_t used = 0;
	int lines = 0;

	fflush(NULL);
	ck_assert_int_ge(dup2(c->saved, c->target), 0);
	close(c->saved);
	ck_assert_int_eq(lseek(c->fd, 0, SEEK_SET), 0);
	while ((r = read(c->fd, b, sizeof(b))) > 0) {
		for (ssize_t i = 0; i < r; i++)
			lines += b[i] == '\n';
		if (buf && used + 1 < len) {
			size_t n = MIN((size_t)r, len - 1 - used);

			memcpy(buf + used, b, n);
			used += n;
		}
	}
	if (buf && len)
		buf[used] = '\0';
	close(c->fd);
	return lines;
}

#endif

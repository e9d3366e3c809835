/* Unit tests for a gdb server on one connected client (gdb_server_attach_fd, as `lkvm debug --gdb` uses it) against a fake target: no stop before gdb's first byte, its session, and its end when the client goes. */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/gdb.h"

/* What the server asked of the fake target. */
static atomic_int stops, resumes, detaches;

/* A counter's value (a function: Check's messages then name it, not atomic_load's expansion). */
static int got(atomic_int *c)
{
	return atomic_load(c);
}

static int f_nthreads(void *ctx)
{
	return 1;
}

static int f_stop_all(void *ctx)
{
	atomic_fetch_add(&stops, 1);
	return 0;
}

static int f_resume(void *ctx, int step_thread)
{
	atomic_fetch_add(&resumes, 1);
	return 0;
}

static void f_detach(void *ctx)
{
	atomic_fetch_add(&detaches, 1);
}

static const struct gdb_target_ops ops = {
	.nthreads = f_nthreads,
	.stop_all = f_stop_all,
	.resume = f_resume,
	.detach = f_detach,
};

/* Until cond holds or 5 s pass. */
#define WAIT_FOR(cond)                                                                   \
	do {                                                                             \
		for (int i_ = 0; i_ < 500 && !(cond); i_++)                              \
			nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000000L }, NULL); \
	} while (0)

/* One reply frame from the server (after its '+'), NUL-terminated in buf. */
static void read_reply(int fd, char *buf, size_t len)
{
	size_t got = 0;

	while (got + 1 < len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		ck_assert_int_eq(poll(&p, 1, 5000), 1);
		n = recv(fd, buf + got, len - 1 - got, 0);
		ck_assert_int_gt(n, 0);
		got += (size_t)n;
		buf[got] = '\0';
		if (strchr(buf, '#') && strlen(strchr(buf, '#')) >= 3)
			return;
	}
}

/* The VM runs until gdb's first byte; '?' then answers the attach's stop; the client leaving is
 * a detach, and the server's thread ends by itself, its counters kept. */
START_TEST(attach_session)
{
	struct gdb_server_stats st;
	struct gdb_server *s;
	char err[256] = "", buf[256];
	int sv[2], wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	atomic_store(&stops, 0);
	atomic_store(&detaches, 0);
	ck_assert_int_ge(wake, 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_msg(gdb_server_attach_fd(sv[0], wake, &ops, NULL, &s, err, sizeof(err)) == 0,
		      "%s", err);
	nanosleep(&(struct timespec){ .tv_nsec = 100 * 1000000L }, NULL);
	ck_assert_int_eq(got(&stops), 0); /* nothing from gdb yet: the VM runs */
	ck_assert(!gdb_server_ended(s));
	ck_assert_int_eq(send(sv[1], "$?#3f", 5, 0), 5);
	read_reply(sv[1], buf, sizeof(buf));
	ck_assert_msg(strstr(buf, "$T02thread:1;#") != NULL, "reply %s", buf);
	ck_assert_int_eq(got(&stops), 1);
	close(sv[1]); /* gdb vanished */
	WAIT_FOR(gdb_server_ended(s));
	ck_assert(gdb_server_ended(s));
	ck_assert_int_eq(got(&detaches), 1);
	gdb_server_get_stats(s, &st);
	ck_assert_uint_eq(st.clients, 1);
	ck_assert_uint_eq(st.stops, 1);
	ck_assert_uint_eq(st.packets, 1);
	gdb_server_stop(s);
	/* The wake-up eventfd is the caller's: still open, for the next attach. */
	ck_assert_int_eq(eventfd_write(wake, 1), 0);
	close(wake);
}
END_TEST

/* A client that leaves before its first byte (lkvm debug stopped before gdb came): no stop, no
 * detach of a VM never stopped, no session counted. */
START_TEST(attach_gone_before_gdb)
{
	struct gdb_server_stats st;
	struct gdb_server *s;
	char err[256] = "";
	int sv[2], wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	atomic_store(&stops, 0);
	atomic_store(&detaches, 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_msg(gdb_server_attach_fd(sv[0], wake, &ops, NULL, &s, err, sizeof(err)) == 0,
		      "%s", err);
	close(sv[1]);
	WAIT_FOR(gdb_server_ended(s));
	ck_assert(gdb_server_ended(s));
	ck_assert_int_eq(got(&stops), 0);
	ck_assert_int_eq(got(&detaches), 0);
	gdb_server_get_stats(s, &st);
	ck_assert_uint_eq(st.clients, 0);
	gdb_server_stop(s);
	close(wake);
}
END_TEST

static Suite *gdb_attach_suite(void)
{
	Suite *s = suite_create("gdb_attach");
	TCase *tc = tcase_create("attach_fd");

	tcase_add_test(tc, attach_session);
	tcase_add_test(tc, attach_gone_before_gdb);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(gdb_attach_suite)

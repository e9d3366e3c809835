/* Unit tests of the device-thread helper (worker.c): started named, parked and let go, stopped while parked, and a thread that ended by itself. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "check_main.h"
#include "wait.h"
#include "lkvm/worker.h"

#define WAIT_MS 2000

/* A device thread as the devices write them: it serves `work` (an eventfd standing for a
 * queue) and takes a unit of it per wake-up; `left` counts how it ended. */
struct job {
	struct worker w;
	int work;
	atomic_int served, left;
	bool end_by_itself;
};

static void job_thread(void *arg)
{
	struct job *j = arg;

	for (;;) {
		struct pollfd p[2] = {
			{ .fd = worker_fd(&j->w), .events = POLLIN },
			{ .fd = j->work, .events = POLLIN },
		};
		u64 v;

		if (j->end_by_itself)
			break;
		if (poll(p, 2, -1) < 0)
			continue;
		if (p[0].revents && worker_park(&j->w))
			break;
		if (!p[0].revents && (p[1].revents & POLLIN) &&
		    read(j->work, &v, sizeof(v)) == sizeof(v))
			atomic_fetch_add(&j->served, 1);
	}
	atomic_fetch_add(&j->left, 1);
}

static void job_init(struct job *j)
{
	memset(j, 0, sizeof(*j));
	ck_assert_int_eq(worker_init(&j->w, NULL), 0);
	j->work = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ck_assert_int_ge(j->work, 0);
}

static void job_fini(struct job *j)
{
	worker_destroy(&j->w);
	close(j->work);
}

static void add_work(struct job *j)
{
	u64 one = 1;

	ck_assert_int_eq(write(j->work, &one, sizeof(one)), sizeof(one));
}

static bool readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

/* Readable without waiting: nobody took the work. */
static bool work_pending(struct job *j)
{
	return readable(j->work);
}

/* The name the kernel has for the worker's thread. */
static void thread_name(struct job *j, char *buf, size_t len)
{
	ck_assert_int_eq(pthread_getname_np(j->w.tid, buf, len), 0);
}

START_TEST(start_named_and_stop)
{
	char name[16];
	struct job j;

	job_init(&j);
	worker_stop(&j.w); /* never started: nothing to do */
	ck_assert_int_eq(worker_start(&j.w, "lkvm-test-job", SB_BLK, job_thread, &j), 0);
	/* Named before worker_start returned, by the thread itself. */
	thread_name(&j, name, sizeof(name));
	ck_assert_str_eq(name, "lkvm-test-job");
	ck_assert_int_eq(worker_start(&j.w, "lkvm-test-job", SB_BLK, job_thread, &j), -EBUSY);
	add_work(&j);
	ck_assert(WAIT_UNTIL(WAIT_MS, atomic_load(&j.served) == 1));
	worker_stop(&j.w);
	ck_assert_int_eq(atomic_load(&j.left), 1);
	ck_assert(!readable(worker_fd(&j.w))); /* emptied for the next start */
	worker_stop(&j.w);		       /* twice: no-op */
	/* Started again after a stop, as on a device reset. */
	ck_assert_int_eq(worker_start(&j.w, "lkvm-test-job", SB_BLK, job_thread, &j), 0);
	add_work(&j);
	ck_assert(WAIT_UNTIL(WAIT_MS, atomic_load(&j.served) == 2));
	job_fini(&j);
	ck_assert_int_eq(atomic_load(&j.left), 2);
}
END_TEST

/* Parked, the thread takes nothing; resumed, it takes what came meanwhile. */
START_TEST(park_and_resume)
{
	struct job j;

	job_init(&j);
	worker_quiesce(&j.w); /* not running: no-op */
	worker_resume(&j.w);
	ck_assert_int_eq(worker_start(&j.w, "lkvm-test-park", SB_BLK, job_thread, &j), 0);
	for (int round = 1; round <= 3; round++) {
		worker_quiesce(&j.w);
		/* The thread acknowledged: it is parked and can take nothing now. */
		ck_assert(j.w.parked);
		add_work(&j);
		ck_assert(work_pending(&j));
		ck_assert_int_eq(atomic_load(&j.served), round - 1);
		worker_resume(&j.w);
		ck_assert(WAIT_UNTIL(WAIT_MS, atomic_load(&j.served) == round));
		ck_assert(!work_pending(&j));
	}
	ck_assert_int_eq(atomic_load(&j.left), 0);
	job_fini(&j);
	ck_assert_int_eq(atomic_load(&j.left), 1);
}
END_TEST

/* A stop reaches a parked thread (teardown of a paused VM). */
START_TEST(stop_while_parked)
{
	struct job j;

	job_init(&j);
	ck_assert_int_eq(worker_start(&j.w, "lkvm-test-stop", SB_BLK, job_thread, &j), 0);
	worker_quiesce(&j.w);
	add_work(&j);
	worker_stop(&j.w);
	ck_assert_int_eq(atomic_load(&j.left), 1);
	ck_assert_int_eq(atomic_load(&j.served), 0);
	job_fini(&j);
}
END_TEST

/* A thread that ended on its own (its poll failed, say) does not hold up a pause. */
START_TEST(quiesce_after_thread_ended)
{
	struct job j;

	job_init(&j);
	j.end_by_itself = true;
	ck_assert_int_eq(worker_start(&j.w, "lkvm-test-end", SB_BLK, job_thread, &j), 0);
	ck_assert(WAIT_UNTIL(WAIT_MS, atomic_load(&j.left) == 1));
	worker_quiesce(&j.w);
	worker_resume(&j.w);
	worker_stop(&j.w);
	job_fini(&j);
	ck_assert_int_eq(atomic_load(&j.left), 1);
}
END_TEST

static Suite *worker_suite(void)
{
	Suite *s = suite_create("worker");
	TCase *tc = tcase_create("worker");

	tcase_add_test(tc, start_named_and_stop);
	tcase_add_test(tc, park_and_resume);
	tcase_add_test(tc, stop_while_parked);
	tcase_add_test(tc, quiesce_after_thread_ended);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(worker_suite)

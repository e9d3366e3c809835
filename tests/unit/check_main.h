/* Shared main() for the Check unit-test executables: one suite per file, fork mode off for ASan. */
#ifndef LKVM_CHECK_MAIN_H
#define LKVM_CHECK_MAIN_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tests that cannot run here are not added to the suite but reported on a line
 * tests/run-unit.sh counts: "<file>: skipped N: <what> (<why>)". */
static inline void lkvm_skip(const char *file, int n, const char *what, const char *why)
{
	printf("%s: skipped %d: %s (%s)\n", file, n, what, why);
	fflush(stdout);
}

/* An exit test that must run in a process of its own (it installs a seccomp filter, say): in
 * Check's fork mode added to tc with its unchecked fixture (run in the parent) and tc to s;
 * with CK_FORK=no reported skipped. */
#define LKVM_ADD_FORKED_EXIT_TEST(s, tc, file, test, setup, teardown)         \
	do {                                                                  \
		if (getenv("CK_FORK") && !strcmp(getenv("CK_FORK"), "no")) {  \
			lkvm_skip(file, 1, #test, "needs Check's fork mode"); \
		} else {                                                      \
			tcase_add_unchecked_fixture(tc, setup, teardown);     \
			tcase_add_exit_test(tc, test, 0);                     \
			suite_add_tcase(s, tc);                               \
		}                                                             \
	} while (0)

/* Check's default 4 s per test is a hang guard that a loaded 2-core host trips (test_sandbox's
 * 50 children, each dropping privileges and installing a filter, took longer at a load of 11):
 * no unit test asserts its own speed, so a test case without a timeout of its own gets 60 s
 * (read by tcase_create, hence set before suite_fn; CK_DEFAULT_TIMEOUT from outside wins). */
#define LKVM_CHECK_MAIN(suite_fn)                            \
	int main(void)                                       \
	{                                                    \
		setenv("CK_DEFAULT_TIMEOUT", "60", 0);       \
		SRunner *sr = srunner_create(suite_fn());    \
		srunner_run_all(sr, CK_NORMAL);              \
		int failed = srunner_ntests_failed(sr);      \
		srunner_free(sr);                            \
		return failed ? EXIT_FAILURE : EXIT_SUCCESS; \
	}

#endif

/* Shared main() for the Check unit-test executables: one suite per file, fork mode off for ASan. */
#ifndef LKVM_CHECK_MAIN_H
#define LKVM_CHECK_MAIN_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

/* Tests that cannot run here are not added to the suite but reported on a line
 * tests/run-unit.sh counts: "<file>: skipped N: <what> (<why>)". */
static inline void lkvm_skip(const char *file, int n, const char *what, const char *why)
{
	printf("%s: skipped %d: %s (%s)\n", file, n, what, why);
	fflush(stdout);
}

#define LKVM_CHECK_MAIN(suite_fn)                                   \
	int main(void)                                              \
	{                                                           \
		SRunner *sr = srunner_create(suite_fn());           \
		srunner_run_all(sr, CK_NORMAL);                     \
		int failed = srunner_ntests_failed(sr);             \
		srunner_free(sr);                                   \
		return failed ? EXIT_FAILURE : EXIT_SUCCESS;        \
	}

#endif

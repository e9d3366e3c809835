/* Shared main() for the Check unit-test executables: one suite per file, fork mode off for ASan. */
#ifndef LKVM_CHECK_MAIN_H
#define LKVM_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

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

/* `lkvm version`: the version string and the commit lkvm was built from. */
#include <stdio.h>
#include <string.h>

#include "lkvm/builtin.h"
#include "lkvm/util.h"
#include "lkvm/version.h"

int cmd_version(int argc, char **argv)
{
	if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		printf("usage: lkvm version\n\nPrint lkvm's version and the git commit it was built from\n(git describe; only the version for a build outside git).\n\n"
		       "Exit status: 0, or 1 an unexpected argument.\n");
		return 0;
	}
	/* Anything else is a mistake said, not ignored. */
	if (argc > 1) {
		pr_err("version: unexpected '%s' (lkvm version takes no arguments)", argv[1]);
		return 1;
	}
	/* LKVM_GIT: `git describe --always --dirty` when the Makefile ran in a git tree, else empty
	 * (a tarball, a source package): then only the version is said. */
#ifndef LKVM_GIT
#define LKVM_GIT ""
#endif
	if (LKVM_GIT[0])
		printf("lkvm version %s (git %s)\n", LKVM_VERSION, LKVM_GIT);
	else
		printf("lkvm version %s\n", LKVM_VERSION);
	return 0;
}

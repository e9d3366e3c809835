/* `lkvm version`: the version string. */
#include <stdio.h>
#include <string.h>

#include "lkvm/builtin.h"
#include "lkvm/util.h"
#include "lkvm/version.h"

int cmd_version(int argc, char **argv)
{
	if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		printf("usage: lkvm version\n\nPrint lkvm's version.\n");
		return 0;
	}
	/* Anything else is a mistake said, not ignored. */
	if (argc > 1) {
		pr_err("version: unexpected '%s' (lkvm version takes no arguments)", argv[1]);
		return 1;
	}
	printf("lkvm version %s\n", LKVM_VERSION);
	return 0;
}

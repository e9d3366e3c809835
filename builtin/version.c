/* `lkvm version`: the version string. */
#include <stdio.h>

#include "lkvm/builtin.h"

int cmd_version(int argc, char **argv)
{
	printf("lkvm version %s\n", LKVM_VERSION);
	return 0;
}

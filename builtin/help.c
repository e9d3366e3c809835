/* `lkvm help [COMMAND]`: the overall usage, or one command's own help. */
#include <stdio.h>
#include <string.h>

#include "lkvm/builtin.h"
#include "lkvm/run.h"
#include "lkvm/util.h"

int cmd_help(int argc, char **argv)
{
	if (argc < 2) {
		lkvm_usage(stdout);
		return 0;
	}
	if (!lkvm_find_cmd(argv[1])) {
		pr_err("no command '%s' (lkvm help lists them)", argv[1]);
		return 1;
	}
	if (!strcmp(argv[1], "run"))
		kvm_run_usage(stdout);
	else if (!strcmp(argv[1], "bench"))
		bench_usage(stdout);
	else
		lkvm_usage(stdout);
	return 0;
}

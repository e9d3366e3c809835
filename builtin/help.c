/* `lkvm help [COMMAND]`: the overall usage, or one command's own help. */
#include <stdio.h>
#include <string.h>

#include "lkvm/builtin.h"
#include "lkvm/util.h"

int cmd_help(int argc, char **argv)
{
	/* lkvm help --help: help's own usage is the overall one. */
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		lkvm_usage(stdout);
		return 0;
	}
	if (argc > 2) {
		pr_err("help: unexpected '%s' (lkvm help [COMMAND])", argv[2]);
		return 1;
	}
	const struct lkvm_cmd *c = lkvm_find_cmd(argv[1]);

	if (!c) {
		pr_err("no command '%s' (lkvm help lists them)", argv[1]);
		return 1;
	}
	if (c->usage)
		c->usage(stdout);
	else
		lkvm_usage(stdout);
	return 0;
}

/* Entry point: pick the subcommand and hand over; only this and the command files print-and-exit. */
#include <stdio.h>
#include <string.h>

#include "lkvm/builtin.h"
#include "lkvm/util.h"

int main(int argc, char **argv)
{
	const struct lkvm_cmd *cmd;

	if (argc < 2) {
		lkvm_usage(stderr);
		return 1;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
		return cmd_help(1, argv);
	if (!strcmp(argv[1], "--version"))
		return cmd_version(1, argv);
	cmd = lkvm_find_cmd(argv[1]);
	if (!cmd) {
		pr_err("unknown command '%s' (lkvm help lists them)", argv[1]);
		return 1;
	}
	return cmd->fn(argc - 1, argv + 1);
}

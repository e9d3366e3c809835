/* Subcommands of the lkvm binary and their dispatch table. */
#ifndef LKVM_BUILTIN_H
#define LKVM_BUILTIN_H

#include <stdio.h>

struct lkvm_cmd {
	const char *name;
	const char *summary;
	int (*fn)(int argc, char **argv); /* argv[0] is the command name; returns exit status */
};

extern const struct lkvm_cmd lkvm_commands[];
const struct lkvm_cmd *lkvm_find_cmd(const char *name);
void lkvm_usage(FILE *out);

int cmd_help(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_bench(int argc, char **argv);
void bench_usage(FILE *out);

#ifndef LKVM_VERSION
#define LKVM_VERSION "0.1.0"
#endif

#endif

/* Subcommands of the lkvm binary and their dispatch table. */
#ifndef LKVM_BUILTIN_H
#define LKVM_BUILTIN_H

#include <stdio.h>

struct opt_set;

struct lkvm_cmd {
	const char *name;
	const char *summary;
	int (*fn)(int argc, char **argv); /* argv[0] is the command name; returns exit status */
	void (*usage)(FILE *out);	  /* its --help text (lkvm help NAME) */
};

extern const struct lkvm_cmd lkvm_commands[];
const struct lkvm_cmd *lkvm_find_cmd(const char *name);
void lkvm_usage(FILE *out);

int cmd_help(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_bench(int argc, char **argv);
void bench_usage(FILE *out);
extern const struct opt_set bench_opt_set; /* `lkvm bench net`'s options (opt.h) */
/* The control commands: they talk to a running VM over its socket (see lkvm/ctl.h). */
int cmd_list(int argc, char **argv);
void list_usage(FILE *out);
int cmd_stop(int argc, char **argv);
void stop_usage(FILE *out);
int cmd_pause(int argc, char **argv);
void pause_usage(FILE *out);
int cmd_resume(int argc, char **argv);
void resume_usage(FILE *out);
int cmd_stat(int argc, char **argv);
void stat_usage(FILE *out);
int cmd_debug(int argc, char **argv);
int cmd_snapshot(int argc, char **argv);
int cmd_dump(int argc, char **argv);
void dump_usage(FILE *out);
void snapshot_usage(FILE *out);
void debug_usage(FILE *out);

#endif

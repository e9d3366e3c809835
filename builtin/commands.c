/* The table of subcommands and the top-level usage text built from it. */
#include <string.h>

#include "lkvm/builtin.h"
#include "lkvm/run.h"

const struct lkvm_cmd lkvm_commands[] = {
	{ "run", "boot a kernel in a new VM (lkvm run --help for options)", kvm_cmd_run,
	  kvm_run_usage },
	{ "list", "list the running VMs: name, pid, state, vCPUs, RAM, uptime", cmd_list,
	  list_usage },
	{ "stop", "stop a VM (or --all) in order and wait for it to exit", cmd_stop, stop_usage },
	{ "pause", "pause a VM: vCPUs parked, devices quiet, clock frozen", cmd_pause,
	  pause_usage },
	{ "resume", "resume a paused VM", cmd_resume, resume_usage },
	{ "stat", "a running VM's exit and queue counters (--json, --watch SECS)", cmd_stat,
	  stat_usage },
	{ "debug", "a running VM's vCPU registers and last exits", cmd_debug, debug_usage },
	{ "snapshot", "write a running VM's whole state to a file (lkvm run --restore FILE)",
	  cmd_snapshot, snapshot_usage },
	{ "dump", "write a running VM's RAM and registers as an ELF core (gdb, crash)", cmd_dump,
	  dump_usage },
	{ "bench", "measure virtio-net per TX strategy (lkvm bench net --help)", cmd_bench,
	  bench_usage },
	{ "help", "show this text, or a command's help (lkvm help run)", cmd_help, NULL },
	{ "version", "print lkvm's version", cmd_version, NULL },
	{ NULL, NULL, NULL, NULL },
};

const struct lkvm_cmd *lkvm_find_cmd(const char *name)
{
	for (const struct lkvm_cmd *c = lkvm_commands; c->name; c++)
		if (!strcmp(c->name, name))
			return c;
	return NULL;
}

void lkvm_usage(FILE *out)
{
	fprintf(out,
		"usage: lkvm COMMAND [ARGS]\n\nA lightweight KVM virtual machine monitor for x86-64.\n\nCommands:\n");
	for (const struct lkvm_cmd *c = lkvm_commands; c->name; c++)
		fprintf(out, "  %-10s %s\n", c->name, c->summary);
	fprintf(out,
		"\nExample: lkvm run -k bzImage -i initrd.img -p \"quiet\" -m 256 -c 2 --name web\n"
		"         lkvm stat web --watch 1; lkvm pause web; lkvm resume web; lkvm stop web\n"
		"Each command has --help (or: lkvm help COMMAND).\n");
}

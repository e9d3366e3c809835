/* `lkvm debug NAME`: every vCPU's registers and its last exit, read while the vCPUs are parked for a moment. */
#include <string.h>

#include "lkvm/builtin.h"
#include "lkvm/ctl.h"

void debug_usage(FILE *out)
{
	fprintf(out,
		"usage: lkvm debug NAME\n"
		"\n"
		"Print each vCPU's general, control and segment registers and its last exit to lkvm\n"
		"(reason; port or address, size and direction for I/O and MMIO; how long ago). The\n"
		"vCPUs are parked for the moment it takes to read them (registers can only be read\n"
		"outside the guest) and then continue; a paused VM stays paused.\n"
		"\n"
		"  -h, --help   this text\n"
		"\n"
		"Exit status: 0, or 1 no such VM or its vCPUs did not stop in 5 s.\n");
}

int cmd_debug(int argc, char **argv)
{
	struct ctl_kvs kv;

	if (ctl_cli_wants_help(argc, argv)) {
		debug_usage(stdout);
		return 0;
	}
	if (argc != 2 || argv[1][0] == '-') {
		pr_err("debug: give one VM name (see lkvm debug --help)");
		return 1;
	}
	if (ctl_cli_call(argv[1], CTL_DEBUG, &kv, NULL, 10000))
		return 1;
	printf("%s (%s):\n%s", ctl_kv_str(&kv, "name"), ctl_kv_str(&kv, "state"),
	       ctl_kv_str(&kv, "text"));
	ctl_kvs_free(&kv);
	return 0;
}

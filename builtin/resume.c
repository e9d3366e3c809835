/* `lkvm resume NAME`: continue a paused VM where it stopped. */
#include <string.h>

#include "lkvm/builtin.h"
#include "lkvm/ctl.h"

void resume_usage(FILE *out)
{
	fprintf(out,
		"usage: lkvm resume NAME\n"
		"\n"
		"Resume a VM paused with lkvm pause: its clocks continue from where they stood,\n"
		"the device threads start again and the vCPUs re-enter the guest.\n"
		"\n"
		"  -h, --help   this text\n"
		"\n"
		"Exit status: 0 resumed, 1 no such VM or it was not paused.\n");
}

int cmd_resume(int argc, char **argv)
{
	struct ctl_kvs kv;
	char d[32];

	if (ctl_cli_wants_help(argc, argv)) {
		resume_usage(stdout);
		return 0;
	}
	if (argc != 2 || argv[1][0] == '-') {
		pr_err("resume: give one VM name (see lkvm resume --help)");
		return 1;
	}
	if (ctl_cli_call(argv[1], CTL_RESUME, &kv, NULL, 10000))
		return 1;
	ctl_fmt_duration(d, sizeof(d), ctl_kv_u64(&kv, "paused_ns"));
	printf("%s resumed (paused %s in all)\n", argv[1], d);
	ctl_kvs_free(&kv);
	return 0;
}

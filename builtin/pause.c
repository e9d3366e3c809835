/* `lkvm pause NAME`: park the VM's vCPUs, quiesce its device threads, freeze its clocks. */
#include <string.h>

#include "lkvm/builtin.h"
#include "lkvm/ctl.h"

void pause_usage(FILE *out)
{
	fprintf(out,
		"usage: lkvm pause NAME\n"
		"\n"
		"Pause a running VM: every vCPU leaves the guest and waits in lkvm, every device\n"
		"stops (its threads park; a disk's requests in flight complete first; frames the\n"
		"guest queued stay in its rings, frames from the host wait in the tap, typed keys\n"
		"wait in lkvm), and the guest's clock stands still:\n"
		"kvm-clock resumes where it stopped (KVM_GET_CLOCK/KVM_SET_CLOCK), the TSC too where\n"
		"KVM offers the per-vCPU TSC offset, and a guest using kvm-clock is told it was\n"
		"stopped (KVM_KVMCLOCK_CTRL). lkvm resume NAME continues it; lkvm stop NAME ends it.\n"
		"--timeout of lkvm run keeps counting wall time while paused.\n"
		"\n"
		"  -h, --help   this text\n"
		"\n"
		"Exit status: 0 paused, 1 no such VM, already paused, or a vCPU did not stop in 5 s\n"
		"(the VM then keeps running).\n");
}

int cmd_pause(int argc, char **argv)
{
	struct ctl_kvs kv;

	if (ctl_cli_wants_help(argc, argv)) {
		pause_usage(stdout);
		return 0;
	}
	if (argc != 2 || argv[1][0] == '-') {
		pr_err("pause: give one VM name (see lkvm pause --help)");
		return 1;
	}
	if (ctl_cli_call(argv[1], CTL_PAUSE, &kv, NULL, 10000))
		return 1;
	printf("%s paused\n", argv[1]);
	ctl_kvs_free(&kv);
	return 0;
}

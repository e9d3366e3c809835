/* `lkvm list [--json]`: every VM with a control socket in the runtime directory: name, pid, state, vCPUs, RAM, uptime. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/builtin.h"
#include "lkvm/ctl.h"

void list_usage(FILE *out)
{
	fprintf(out,
		"usage: lkvm list [--json]\n"
		"\n"
		"List the running VMs of this user: name, pid, state (running, paused, stopping),\n"
		"vCPUs, RAM and uptime, asking each VM over its control socket in the runtime\n"
		"directory ($LKVM_RUNTIME_DIR, else /run/lkvm for root, else $XDG_RUNTIME_DIR/lkvm,\n"
		"else /tmp/lkvm-UID). A socket whose VM was killed is removed (said on stderr).\n"
		"\n"
		"      --json   one JSON array of objects {name, pid, state, vcpus, ram_mib, uptime_s,\n"
		"               paused_s, kernel}\n"
		"  -h, --help   this text\n"
		"\n"
		"Exit status: 0 (also when no VM runs), 1 bad arguments, or a runtime directory that is\n"
		"unreadable or not this user's.\n");
}

int cmd_list(int argc, char **argv)
{
	char dir[PATH_MAX], err[512];
	bool json = false;
	size_t n, shown = 0;
	char **names;

	if (ctl_cli_wants_help(argc, argv)) {
		list_usage(stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = true;
		} else {
			pr_err("list: unexpected argument '%s' (see lkvm list --help)", argv[i]);
			return 1;
		}
	}
	if (ctl_cli_names(dir, sizeof(dir), &names, &n))
		return 1;
	if (json)
		fputc('[', stdout);
	else
		printf("%-24s %8s %-9s %5s %9s %10s\n", "NAME", "PID", "STATE", "VCPUS", "RAM(MiB)",
		       "UPTIME");
	for (size_t i = 0; i < n; i++) {
		struct ctl_kvs kv;
		char up[32];
		int fd = ctl_cli_connect(dir, names[i], err, sizeof(err)), ret;

		if (fd == -ECONNREFUSED)
			continue; /* a stale socket: removed and said so */
		if (fd < 0) {
			pr_warn("%s", err);
			continue;
		}
		ret = ctl_request(fd, names[i], CTL_INFO, &kv, 5000, err, sizeof(err));
		close(fd);
		if (ret < 0) {
			pr_warn("%s", err);
			continue;
		}
		if (json) {
			printf("%s{\"name\":", shown ? "," : "");
			ctl_json_str(stdout, ctl_kv_str(&kv, "name"));
			printf(",\"pid\":%llu,\"state\":",
			       (unsigned long long)ctl_kv_u64(&kv, "pid"));
			ctl_json_str(stdout, ctl_kv_str(&kv, "state"));
			printf(",\"vcpus\":%llu,\"ram_mib\":%llu,\"uptime_s\":%.3f,\"paused_s\":%.3f,\"kernel\":",
			       (unsigned long long)ctl_kv_u64(&kv, "vcpus"),
			       (unsigned long long)ctl_kv_u64(&kv, "ram_mib"),
			       (double)ctl_kv_u64(&kv, "uptime_ns") / 1e9,
			       (double)ctl_kv_u64(&kv, "paused_ns") / 1e9);
			ctl_json_str(stdout, ctl_kv_str(&kv, "kernel"));
			fputc('}', stdout);
		} else {
			ctl_fmt_duration(up, sizeof(up), ctl_kv_u64(&kv, "uptime_ns"));
			printf("%-24s %8llu %-9s %5llu %9llu %10s\n", ctl_kv_str(&kv, "name"),
			       (unsigned long long)ctl_kv_u64(&kv, "pid"), ctl_kv_str(&kv, "state"),
			       (unsigned long long)ctl_kv_u64(&kv, "vcpus"),
			       (unsigned long long)ctl_kv_u64(&kv, "ram_mib"), up);
		}
		shown++;
		ctl_kvs_free(&kv);
	}
	if (json)
		fputs("]\n", stdout);
	ctl_names_free(names, n);
	return 0;
}

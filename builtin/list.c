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
		"Exit status: 0 (also when no VM runs), 1 bad arguments or unreadable directory.\n");
}

int cmd_list(int argc, char **argv)
{
	char dir[PATH_MAX], err[512];
	bool json = false;
	size_t n, shown = 0;
	char **names;
	int e;

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
	if (ctl_runtime_dir(dir, sizeof(dir)) < 0) {
		pr_err("the runtime directory's path is too long");
		return 1;
	}
	names = ctl_list_names(dir, &n, &e);
	if (e < 0) {
		pr_err("cannot read %s: %s", dir, strerror(-e));
		return 1;
	}
	if (json)
		fputc('[', stdout);
	else
		printf("%-24s %8s %-9s %5s %9s %10s\n", "NAME", "PID", "STATE", "VCPUS", "RAM(MiB)", "UPTIME");
	for (size_t i = 0; i < n; i++) {
		struct ctl_msg reply;
		struct ctl_kvs kv;
		char up[32];
		int fd = ctl_connect(dir, names[i], err, sizeof(err));

		if (fd == -ECONNREFUSED) {
			if (ctl_remove_stale(dir, names[i]) == 1)
				pr_info("removed the stale socket of '%s' (its VM was killed)", names[i]);
			continue;
		}
		if (fd < 0) {
			pr_warn("%s", err);
			continue;
		}
		if (ctl_call(fd, CTL_INFO, &reply, 5000, err, sizeof(err)) < 0 || reply.hdr.status != CTL_OK ||
		    ctl_kvs_decode(&reply, &kv) < 0) {
			if (reply.hdr.status != CTL_OK)
				ctl_msg_free(&reply);
			pr_warn("%s: %s", names[i], *err ? err : "no usable answer");
			close(fd);
			continue;
		}
		ctl_msg_free(&reply);
		close(fd);
		if (json) {
			printf("%s{\"name\":", shown ? "," : "");
			ctl_json_str(stdout, ctl_kv_str(&kv, "name"));
			printf(",\"pid\":%llu,\"state\":", (unsigned long long)ctl_kv_u64(&kv, "pid"));
			ctl_json_str(stdout, ctl_kv_str(&kv, "state"));
			printf(",\"vcpus\":%llu,\"ram_mib\":%llu,\"uptime_s\":%.3f,\"paused_s\":%.3f,\"kernel\":",
			       (unsigned long long)ctl_kv_u64(&kv, "vcpus"), (unsigned long long)ctl_kv_u64(&kv, "ram_mib"),
			       (double)ctl_kv_u64(&kv, "uptime_ns") / 1e9, (double)ctl_kv_u64(&kv, "paused_ns") / 1e9);
			ctl_json_str(stdout, ctl_kv_str(&kv, "kernel"));
			fputc('}', stdout);
		} else {
			ctl_fmt_duration(up, sizeof(up), ctl_kv_u64(&kv, "uptime_ns"));
			printf("%-24s %8llu %-9s %5llu %9llu %10s\n", ctl_kv_str(&kv, "name"),
			       (unsigned long long)ctl_kv_u64(&kv, "pid"), ctl_kv_str(&kv, "state"),
			       (unsigned long long)ctl_kv_u64(&kv, "vcpus"), (unsigned long long)ctl_kv_u64(&kv, "ram_mib"),
			       up);
		}
		shown++;
		ctl_kvs_free(&kv);
	}
	if (json)
		fputs("]\n", stdout);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return 0;
}

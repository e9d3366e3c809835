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

/* print_vm: one VM's row (the table's, or an object of the JSON array after `shown` others). */
static void print_vm(const struct ctl_kvs *kv, bool json, size_t shown)
{
	char up[32];

	if (json) {
		printf("%s{\"name\":", shown ? "," : "");
		ctl_json_str(stdout, ctl_kv_str(kv, "name"));
		printf(",\"pid\":%llu,\"state\":", (unsigned long long)ctl_kv_u64(kv, "pid"));
		ctl_json_str(stdout, ctl_kv_str(kv, "state"));
		printf(",\"vcpus\":%llu,\"ram_mib\":%llu,\"uptime_s\":%.3f,\"paused_s\":%.3f,\"kernel\":",
		       (unsigned long long)ctl_kv_u64(kv, "vcpus"),
		       (unsigned long long)ctl_kv_u64(kv, "ram_mib"),
		       (double)ctl_kv_u64(kv, "uptime_ns") / 1e9,
		       (double)ctl_kv_u64(kv, "paused_ns") / 1e9);
		ctl_json_str(stdout, ctl_kv_str(kv, "kernel"));
		fputc('}', stdout);
	} else {
		ctl_fmt_duration(up, sizeof(up), ctl_kv_u64(kv, "uptime_ns"));
		printf("%-24s %8llu %-9s %5llu %9llu %10s\n", ctl_kv_str(kv, "name"),
		       (unsigned long long)ctl_kv_u64(kv, "pid"), ctl_kv_str(kv, "state"),
		       (unsigned long long)ctl_kv_u64(kv, "vcpus"),
		       (unsigned long long)ctl_kv_u64(kv, "ram_mib"), up);
	}
}

/* query_vm: the VM's answer to CTL_INFO into *kv; -1 (warned, or a stale socket removed and
 * said so) when there is none. */
static int query_vm(const char *dir, const char *name, struct ctl_kvs *kv)
{
	char err[512];
	int fd = ctl_cli_connect(dir, name, err, sizeof(err)), ret;

	if (fd == -ECONNREFUSED)
		return -1; /* a stale socket: removed and said so */
	if (fd < 0) {
		pr_warn("%s", err);
		return -1;
	}
	ret = ctl_request(fd, name, CTL_INFO, kv, 5000, err, sizeof(err));
	close(fd);
	if (ret < 0) {
		pr_warn("%s", err);
		return -1;
	}
	return 0;
}

int cmd_list(int argc, char **argv)
{
	char dir[PATH_MAX];
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

		if (query_vm(dir, names[i], &kv))
			continue;
		print_vm(&kv, json, shown);
		shown++;
		ctl_kvs_free(&kv);
	}
	if (json)
		fputs("]\n", stdout);
	ctl_names_free(names, n);
	return 0;
}

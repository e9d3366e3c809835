/* `lkvm stop NAME...|--all`: ask VMs for an orderly shutdown and wait until each process is gone. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/builtin.h"
#include "lkvm/ctl.h"

#define DEFAULT_WAIT_S 30

void stop_usage(FILE *out)
{
	fprintf(out,
		"usage: lkvm stop NAME... | --all [--wait SECS]\n"
		"\n"
		"Ask each VM for an orderly shutdown (as SIGTERM would: vCPUs stopped, devices torn\n"
		"down, the terminal restored) and wait until its lkvm process has exited. The run\n"
		"then exits with status 3 (\"stopped by lkvm stop\"). A paused VM is stopped too.\n"
		"\n"
		"      --all        every VM lkvm list shows\n"
		"      --wait SECS  how long to wait for each exit (default %d; 0: do not wait)\n"
		"  -h, --help       this text\n"
		"\n"
		"Exit status: 0 every VM named stopped, 1 otherwise (no such VM, it did not exit in time).\n",
		DEFAULT_WAIT_S);
}

/* Stop one VM; the server keeps our connection open until its process ends (EOF). */
static int stop_one(const char *name, int wait_s)
{
	struct ctl_kvs kv;
	u64 t0 = now_ns();
	int fd, rc = 0;

	if (ctl_cli_call(name, CTL_STOP, &kv, &fd, 10000))
		return 1;
	if (wait_s > 0) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		u64 end = t0 + (u64)wait_s * 1000000000ull;
		char b[64];

		for (;;) {
			u64 now = now_ns();
			int r;

			if (now >= end) {
				pr_err("%s (pid %llu) did not exit within %d s", name,
				       (unsigned long long)ctl_kv_u64(&kv, "pid"), wait_s);
				rc = 1;
				break;
			}
			r = poll(&p, 1, (int)((end - now) / 1000000 + 1));
			if (r < 0 && errno == EINTR)
				continue;
			if (r > 0 && read(fd, b, sizeof(b)) > 0)
				continue; /* nothing is expected after the reply; ignore */
			if (r != 0)
				break; /* EOF (or error): the process is gone */
		}
		if (!rc)
			printf("%s stopped (pid %llu, %.3f s)\n", name, (unsigned long long)ctl_kv_u64(&kv, "pid"),
			       (double)(now_ns() - t0) / 1e9);
	} else {
		printf("%s: stop requested (pid %llu)\n", name, (unsigned long long)ctl_kv_u64(&kv, "pid"));
	}
	close(fd);
	ctl_kvs_free(&kv);
	return rc;
}

int cmd_stop(int argc, char **argv)
{
	bool all = false;
	int wait_s = DEFAULT_WAIT_S, rc = 0, named = 0;
	char dir[PATH_MAX];

	if (ctl_cli_wants_help(argc, argv)) {
		stop_usage(stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		char *end;

		if (!strcmp(argv[i], "--all")) {
			all = true;
		} else if (!strcmp(argv[i], "--wait")) {
			long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;

			if (i + 1 >= argc || *end || v < 0 || v > 3600) {
				pr_err("stop: --wait needs whole seconds from 0 to 3600");
				return 1;
			}
			wait_s = (int)v;
			i++;
		} else if (argv[i][0] == '-') {
			pr_err("stop: unknown option '%s' (see lkvm stop --help)", argv[i]);
			return 1;
		} else {
			named++;
		}
	}
	if (all == (named > 0)) {
		pr_err("stop: give VM names or --all, not both or neither (see lkvm stop --help)");
		return 1;
	}
	if (!all) {
		for (int i = 1; i < argc; i++) {
			if (!strcmp(argv[i], "--wait"))
				i++;
			else if (argv[i][0] != '-')
				rc |= stop_one(argv[i], wait_s);
		}
		return rc;
	}
	{
		char **names;
		size_t n;

		if (ctl_cli_names(dir, sizeof(dir), &names, &n))
			return 1;
		for (size_t i = 0; i < n; i++) {
			char err[512];
			int fd = ctl_cli_connect(dir, names[i], err, sizeof(err));

			if (fd >= 0) {
				close(fd);
				rc |= stop_one(names[i], wait_s);
			} else if (fd != -ECONNREFUSED) {
				pr_warn("%s", err);
			}
		}
		ctl_names_free(names, n);
		if (!n)
			printf("no VM running\n");
	}
	return rc;
}

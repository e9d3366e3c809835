/* `lkvm stop NAME...|--all`: ask VMs for an orderly shutdown, all at once, and wait until each process is gone. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "lkvm/builtin.h"
#include "lkvm/ctl.h"

#define DEFAULT_WAIT_S 30
/* The reply to a stop is part of the wait the user asked for: never less than the other
 * commands' 10 s, more when --wait allows it (a VM on a loaded or emulated host answers late). */
#define REPLY_MIN_MS 10000
/* VMs asked at once: each stop waits mostly on its VM (the reply, then the process's exit),
 * so a thread per VM makes 50 stops take about as long as the slowest, not their sum. The
 * cap bounds the client's threads and fds for a host with thousands of VMs. */
#define STOP_THREADS_MAX 64

void stop_usage(FILE *out)
{
	fprintf(out,
		"usage: lkvm stop NAME... | --all [--wait SECS]\n"
		"\n"
		"Ask each VM for an orderly shutdown (as SIGTERM would: vCPUs stopped, devices torn\n"
		"down, the terminal restored) and wait until its lkvm process has exited. The run\n"
		"then exits with status 3 (\"stopped by lkvm stop\"). A paused VM is stopped too.\n"
		"Every VM named is asked at once (up to %d at a time) and a line is printed for\n"
		"each as it stops.\n"
		"\n"
		"      --all        every VM lkvm list shows\n"
		"      --wait SECS  how long to wait for each reply and exit (default %d; 0: do not\n"
		"                   wait for the exit; the reply is waited for at least 10 s)\n"
		"  -h, --help       this text\n"
		"\n"
		"Exit status: 0 every VM named stopped, 1 otherwise (no such VM, it did not exit in time).\n",
		STOP_THREADS_MAX, DEFAULT_WAIT_S);
}

/* Stop one VM and wait until its process is gone: ctl_wait_gone watches the process that
 * listens on the socket (a pidfd opened before the request), not the connection, whose
 * end says only that the server closed it. */
static int stop_one(const char *dir, const char *name, int wait_s)
{
	struct ctl_kvs kv;
	u64 t0 = now_ns();
	char err[512];
	int fd, pidfd = -1, rc = 0, ret;
	long pid;

	fd = ctl_cli_connect(dir, name, err, sizeof(err));
	if (fd < 0) {
		pr_err("%s", err);
		return 1;
	}
	pid = ctl_peer_pid(fd);
	if (pid > 0)
		pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	ret = ctl_request(fd, name, CTL_STOP, &kv, MAX(REPLY_MIN_MS, wait_s * 1000), err,
			  sizeof(err));
	/* A VM already on its way out (stopped by another client) may close the connection
	 * without reading our request; it is stopping all the same. */
	if (ret < 0 && !((ret == -ECONNRESET || ret == -EPIPE) && pidfd >= 0)) {
		pr_err("%s", err);
		rc = 1;
	} else if (pid <= 0) {
		pid = (long)ctl_kv_u64(&kv, "pid");
	}
	if (!rc && wait_s > 0) {
		ret = ctl_wait_gone(fd, pidfd, wait_s * 1000);
		if (ret == 0) {
			printf("%s stopped (pid %ld, %.3f s)\n", name, pid,
			       (double)(now_ns() - t0) / 1e9);
		} else {
			pr_err("%s (pid %ld) did not exit within %d s", name, pid, wait_s);
			rc = 1;
		}
	} else if (!rc) {
		printf("%s: stop requested (pid %ld)\n", name, pid);
	}
	if (pidfd >= 0)
		close(pidfd);
	close(fd);
	ctl_kvs_free(&kv);
	return rc;
}

/* parse_args: --all and --wait into *all and *wait_s, the VM names counted in *named. 1 (said)
 * on a bad argument. */
static int parse_args(int argc, char **argv, bool *all, int *wait_s, int *named)
{
	for (int i = 1; i < argc; i++) {
		char *end;

		if (!strcmp(argv[i], "--all")) {
			*all = true;
		} else if (!strcmp(argv[i], "--wait")) {
			long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;

			if (i + 1 >= argc || *end || v < 0 || v > 3600) {
				pr_err("stop: --wait needs whole seconds from 0 to 3600");
				return 1;
			}
			*wait_s = (int)v;
			i++;
		} else if (argv[i][0] == '-') {
			pr_err("stop: unknown option '%s' (see lkvm stop --help)", argv[i]);
			return 1;
		} else {
			(*named)++;
		}
	}
	return 0;
}

/* The VMs of one `lkvm stop`, shared by its threads: each takes the next name. */
struct stop_set {
	const char *dir;
	const char *const *names;
	size_t n;
	int wait_s;
	bool skip_refused; /* --all: a socket nobody listens on is a stale one, not an error */
	atomic_size_t next;
	atomic_int rc;
};

static void *stop_worker(void *arg)
{
	struct stop_set *s = arg;
	size_t i;

	while ((i = atomic_fetch_add(&s->next, 1)) < s->n) {
		char err[512];
		int fd;

		if (s->skip_refused) {
			fd = ctl_cli_connect(s->dir, s->names[i], err, sizeof(err));
			if (fd == -ECONNREFUSED)
				continue;
			if (fd < 0) {
				pr_warn("%s", err);
				continue;
			}
			close(fd);
		}
		if (stop_one(s->dir, s->names[i], s->wait_s))
			atomic_store(&s->rc, 1);
	}
	return NULL;
}

/* Stop every VM of s together: STOP_THREADS_MAX threads at most, each taking names in turn
 * (the calling thread is one of them, so a thread that cannot be made only slows it). */
static int stop_set_run(struct stop_set *s)
{
	pthread_t t[STOP_THREADS_MAX - 1];
	size_t nt = 0, want = MIN(s->n, (size_t)STOP_THREADS_MAX) - (s->n > 0);

	while (nt < want && !pthread_create(&t[nt], NULL, stop_worker, s))
		nt++;
	stop_worker(s);
	for (size_t i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	return atomic_load(&s->rc);
}

/* stop_named: every VM named in argv. */
static int stop_named(int argc, char **argv, int wait_s)
{
	char dir[PATH_MAX];
	const char **names = calloc((size_t)argc, sizeof(*names));
	struct stop_set s = { .dir = dir, .wait_s = wait_s };
	int rc;

	if (!names) {
		pr_err("stop: out of memory");
		return 1;
	}
	if (ctl_runtime_dir(dir, sizeof(dir)) < 0) {
		pr_err("the runtime directory's path is too long");
		free(names);
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--wait"))
			i++;
		else if (argv[i][0] != '-')
			names[s.n++] = argv[i];
	}
	s.names = names;
	rc = stop_set_run(&s);
	free(names);
	return rc;
}

/* stop_all: every VM that answers on its socket (a stale one is removed). */
static int stop_all(int wait_s)
{
	char dir[PATH_MAX];
	char **names;
	struct stop_set s = { .dir = dir, .wait_s = wait_s, .skip_refused = true };
	int rc;

	if (ctl_cli_names(dir, sizeof(dir), &names, &s.n))
		return 1;
	s.names = (const char *const *)names;
	rc = stop_set_run(&s);
	ctl_names_free(names, s.n);
	if (!s.n)
		printf("no VM running\n");
	return rc;
}

int cmd_stop(int argc, char **argv)
{
	bool all = false;
	int wait_s = DEFAULT_WAIT_S, named = 0;

	if (ctl_cli_wants_help(argc, argv)) {
		stop_usage(stdout);
		return 0;
	}
	if (parse_args(argc, argv, &all, &wait_s, &named))
		return 1;
	if (all == (named > 0)) {
		pr_err("stop: give VM names or --all, not both or neither (see lkvm stop --help)");
		return 1;
	}
	return all ? stop_all(wait_s) : stop_named(argc, argv, wait_s);
}

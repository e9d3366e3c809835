/* CPU accounting for `lkvm bench net`: other processes' load from /proc/stat, and a VMM's threads' CPU in ns from /proc/PID/task/N/schedstat (and its kernel vhost workers'), its vCPUs told apart by name. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "lkvm/bench.h"

bool bench_vcpu_thread(const char *comm)
{
	size_t l = strlen(comm);

	if (!strncmp(comm, "lkvm-vcpu", 9))
		return true;
	return !strncmp(comm, "CPU ", 4) && l > 8 && !strcmp(comm + l - 4, "/KVM");
}

bool bench_vhost_worker(const char *comm, pid_t pid)
{
	char want[24];

	snprintf(want, sizeof(want), "vhost-%d", (int)pid);
	return pid > 0 && !strcmp(comm, want);
}

/*
 * "TID (COMM) STATE PPID ..." where COMM may hold spaces and parentheses: it ends at the last
 * ')'. utime and stime are the 14th and 15th fields, the 12th and 13th after the state.
 */
int bench_parse_task_stat(const char *line, char *comm, size_t len, u64 *ticks)
{
	const char *open = strchr(line, '('), *close = strrchr(line, ')');
	unsigned long long ut, st;
	size_t cl;

	if (!open || !close || close < open || !len)
		return -EINVAL;
	cl = MIN((size_t)(close - open - 1), len - 1);
	memcpy(comm, open + 1, cl);
	comm[cl] = '\0';
	if (sscanf(close + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) !=
	    2)
		return -EINVAL;
	*ticks = ut + st;
	return 0;
}

/*
 * "RUN_NS WAIT_NS SLICES": the first field is the ns the task ran (the scheduler's
 * sum_exec_runtime, as precise as the clock; stat's utime + stime are 1/CLK_TCK s ticks, so a
 * thread that ran < 10 ms in a sample window reads 0 there). A number only: no sign, no
 * blank before it, no overflow, and a separator or the end after it.
 */
int bench_parse_schedstat(const char *line, u64 *ns)
{
	unsigned long long v;
	char *end;

	if (!isdigit((unsigned char)line[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(line, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	if (*end != '\0' && *end != ' ' && *end != '\n')
		return -EINVAL;
	*ns = v;
	return 0;
}

static int read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r;

	if (fd < 0)
		return -errno;
	r = read(fd, buf, len - 1);
	close(fd);
	if (r < 0)
		return -errno;
	buf[r] = '\0';
	return 0;
}

static struct bench_thread *thread_slot(struct bench_threads *s, int tid)
{
	for (int i = 0; i < s->n; i++)
		if (s->t[i].tid == tid)
			return &s->t[i];
	if (s->n == BENCH_MAX_THREADS)
		return NULL;
	s->t[s->n] = (struct bench_thread){ .tid = tid };
	return &s->t[s->n++];
}

/* Thread tid in dir (/proc/PID/task, or /proc for kernel workers) into s; with owner, only if
 * it is a kernel vhost worker of owner. Its CPU in ns from schedstat; in ticks from stat only
 * where schedstat is missing (a kernel without CONFIG_SCHED_INFO). */
static void sample_one(const char *dir, int tid, pid_t owner, struct bench_threads *s)
{
	char path[64], line[1024], comm[16];
	struct bench_thread *t;
	bool ticks = false;
	u64 cpu, ns;

	snprintf(path, sizeof(path), "%s/%d/stat", dir, tid);
	if (read_small(path, line, sizeof(line)) ||
	    bench_parse_task_stat(line, comm, sizeof(comm), &cpu))
		return; /* it ended between the listing and the read */
	if (owner && !bench_vhost_worker(comm, owner))
		return;
	snprintf(path, sizeof(path), "%s/%d/schedstat", dir, tid);
	if (read_small(path, line, sizeof(line))) {
		if (!access("/proc/self/schedstat", F_OK))
			return; /* this kernel has it: the thread ended after its stat */
		ticks = true;	/* cpu stays stat's utime + stime */
	} else if (bench_parse_schedstat(line, &ns)) {
		ticks = true;
	} else {
		cpu = ns;
	}
	t = thread_slot(s, tid);
	/* A thread keeps its first unit: a difference across two units would mean nothing. */
	if (t && (t->comm[0] == '\0' || t->ticks == ticks) && cpu >= t->cpu) {
		memcpy(t->comm, comm, sizeof(t->comm));
		t->cpu = cpu;
		t->ticks = ticks;
		t->kworker = owner != 0;
	}
}

/* Every thread listed in dir into s (with owner: only owner's kernel vhost workers). */
static int sample_dir(const char *dir, pid_t owner, struct bench_threads *s)
{
	struct dirent *de;
	DIR *d = opendir(dir);

	if (!d)
		return -errno;
	while ((de = readdir(d)))
		if (atoi(de->d_name) > 0)
			sample_one(dir, atoi(de->d_name), owner, s);
	closedir(d);
	return 0;
}

int bench_threads_sample(pid_t pid, struct bench_threads *s)
{
	char path[64];
	int ret;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	ret = sample_dir(path, 0, s);
	/* Before Linux 6.4 the vhost worker is a kernel thread: not in the VMM's task list. */
	if (!ret && s->kworkers == BENCH_KW_SCAN)
		return sample_dir("/proc", pid, s);
	for (int i = 0; !ret && s->kworkers == BENCH_KW_KNOWN && i < s->n; i++)
		if (s->t[i].kworker)
			sample_one("/proc", s->t[i].tid, pid, s);
	return ret;
}

/* Seconds of t's CPU since before (same unit: sample_one keeps a thread's first). */
static double thread_s(const struct bench_thread *t, u64 before)
{
	u64 d = t->cpu - before;

	return t->ticks ? (double)d / (double)sysconf(_SC_CLK_TCK) : (double)d / 1e9;
}

void bench_threads_cpu(const struct bench_threads *a, const struct bench_threads *b, double *host_s,
		       double *vcpu_s)
{
	*host_s = *vcpu_s = 0;
	for (int i = 0; i < b->n; i++) {
		const struct bench_thread *t = &b->t[i];
		u64 before = 0;

		for (int j = 0; j < a->n; j++)
			if (a->t[j].tid == t->tid)
				before = a->t[j].cpu;
		if (t->cpu < before)
			continue;
		if (bench_vcpu_thread(t->comm))
			*vcpu_s += thread_s(t, before);
		else
			*host_s += thread_s(t, before);
	}
}

bool bench_threads_ticks(const struct bench_threads *s)
{
	for (int i = 0; i < s->n; i++)
		if (s->t[i].ticks)
			return true;
	return false;
}

double bench_kworkers_cpu(const struct bench_threads *s)
{
	double cpu = 0;

	for (int i = 0; i < s->n; i++)
		if (s->t[i].kworker)
			cpu += thread_s(&s->t[i], 0);
	return cpu;
}

int bench_parse_proc_stat(const char *line, u64 *busy)
{
	unsigned long long v[7];

	if (sscanf(line, "cpu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		   &v[4], &v[5], &v[6]) != 7)
		return -EINVAL;
	*busy = v[0] + v[1] + v[2] + v[5] + v[6]; /* user nice system (idle iowait) irq softirq */
	return 0;
}

static double rusage_s(int who)
{
	struct rusage ru;

	if (getrusage(who, &ru) < 0)
		return 0;
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

int bench_load_start(struct bench_load *l)
{
	char buf[512];
	int ret = read_small("/proc/stat", buf, sizeof(buf));

	if (!ret)
		ret = bench_parse_proc_stat(buf, &l->busy_ticks);
	l->own_s = rusage_s(RUSAGE_SELF) + rusage_s(RUSAGE_CHILDREN);
	l->t_ns = now_ns();
	return ret;
}

double bench_load_other(const struct bench_load *l, double mine_s)
{
	struct bench_load e;
	double wall, other;

	if (bench_load_start(&e) < 0 || e.t_ns <= l->t_ns)
		return NAN;
	wall = (double)(e.t_ns - l->t_ns) / 1e9;
	other = (double)(e.busy_ticks - l->busy_ticks) / (double)sysconf(_SC_CLK_TCK) -
		(e.own_s - l->own_s) - mine_s;
	return MAX(other, 0.0) / wall;
}

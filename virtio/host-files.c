/* The descriptor budget of the host-file devices: RLIMIT_NOFILE shared out into each share's hostfs caps (include/lkvm/host-files.h). */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/resource.h>

#include "lkvm/dev.h"
#include "lkvm/host-files.h"
#include "lkvm/hostfs.h"
#include "lkvm/kvm.h"

/* Headroom asked for beside the shares' descriptors when the soft limit is raised (lkvm's own
 * are counted, not guessed, when the caps are settled: host_files_fit). */
#define FD_HEADROOM 1024u

/* A share's part of the budget beyond its request's: the least that serves it. */
#define SHARE_MIN_PART \
	MAX(HOST_FILES_FDS_PER_OPEN * 2 * HOST_FILES_MIN_OPEN, 2 * HOST_FILES_MIN_CACHED)

int host_files_budget(u64 nofile, u64 reserve, u32 nshares, struct host_files_caps *c)
{
	u64 fixed = reserve + (u64)nshares * HOST_FILES_REQ_FDS, part, open;

	if (!nshares || nofile <= fixed)
		return -EMFILE;
	part = (nofile - fixed) / nshares;
	if (part < SHARE_MIN_PART)
		return -EMFILE;
	/* A quarter to open files (two descriptors each: half the part), the rest to the cache. */
	open = MIN(part / (2 * HOST_FILES_FDS_PER_OPEN), (u64)HOSTFS_OPEN_DEFAULT);
	c->max_open = (u32)open;
	c->max_cached = (u32)MIN(part - HOST_FILES_FDS_PER_OPEN * open, (u64)HOSTFS_CACHED_DEFAULT);
	return 0;
}

u64 host_files_budget_need(u64 reserve, u32 nshares)
{
	return reserve + (u64)nshares * (HOST_FILES_REQ_FDS + SHARE_MIN_PART);
}

u64 host_files_want(u32 nshares)
{
	return (u64)nshares * (HOST_FILES_REQ_FDS + HOSTFS_CACHED_DEFAULT +
			       HOST_FILES_FDS_PER_OPEN * (u64)HOSTFS_OPEN_DEFAULT);
}

u64 host_files_raise_nofile(u32 nshares)
{
	rlim_t want = (rlim_t)host_files_want(nshares) + FD_HEADROOM;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	if (rl.rlim_cur < want && rl.rlim_cur < rl.rlim_max) {
		struct rlimit up = { .rlim_cur = MIN(want, rl.rlim_max), .rlim_max = rl.rlim_max };

		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			rl = up;
	}
	return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (u64)rl.rlim_cur;
}

/* Descriptors open in this process now (the directory's own not counted). */
static int count_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -errno;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1;
}

/* The device's node table, if it is a host-file device that is up. */
static struct hostfs *dev_files(struct kvm_dev *d)
{
	return d->up && d->ops->host_files ? d->ops->host_files(d) : NULL;
}

int host_files_fit(struct kvm *kvm, u32 later, char *err, size_t errlen)
{
	struct host_files_caps caps;
	u32 n = 0;
	u64 nofile;
	int open;

	for (struct kvm_dev *d = kvm->devs; d; d = d->next)
		n += dev_files(d) != NULL;
	if (!n)
		return 0;
	nofile = host_files_raise_nofile(n);
	open = count_open_fds();
	if (open < 0) {
		errfmt(err, errlen,
		       "host files: cannot count lkvm's descriptors in /proc/self/fd: %s",
		       strerror(-open));
		return open;
	}
	if (host_files_budget(nofile, (u64)open + later, n, &caps)) {
		errfmt(err, errlen,
		       "virtio-9p: %u shares need at least %llu descriptors; RLIMIT_NOFILE allows %llu: raise it with ulimit -n",
		       n, (unsigned long long)host_files_budget_need((u64)open + later, n),
		       (unsigned long long)nofile);
		return -EMFILE;
	}
	pr_debug(
		"host files: %llu descriptors allowed (RLIMIT_NOFILE), %d open: %u cached and %u open files per share",
		(unsigned long long)nofile, open, caps.max_cached, caps.max_open);
	for (struct kvm_dev *d = kvm->devs; d; d = d->next) {
		struct hostfs *fs = dev_files(d);
		struct hostfs_stats st;

		if (!fs)
			continue;
		hostfs_stats(fs, &st);
		hostfs_set_caps(fs, st.max_nodes, caps.max_cached, caps.max_open);
	}
	return 0;
}

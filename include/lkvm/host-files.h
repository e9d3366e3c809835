/* The descriptor budget of the devices that serve host files (virtio-9p, virtio-fs): RLIMIT_NOFILE shared out into each share's hostfs caps. */
#ifndef LKVM_HOST_FILES_H
#define LKVM_HOST_FILES_H

#include "lkvm/util.h"

struct kvm;

/*
 * Who takes part: every entry of the VM's device list whose ops have a `host_files` hook
 * (dev.h) returning its share's node table, struct hostfs (virtio-9p: p9_server_fs; virtio-fs:
 * fuse_server_fs). One device, one share, one table. Nothing else to register: a new kind of
 * host-file device fills the hook, calls host_files_raise_nofile() at its init (as 9p does)
 * and is counted by host_files_fit() with the others.
 *
 * What a share may hold in descriptors (hostfs.h): up to max_cached O_PATH descriptors in
 * its cache, two per open file (the node's O_PATH and the open one) up to max_open, and, for
 * a moment while it answers one request, HOST_FILES_REQ_FDS more (nodes a request touched,
 * cached until the trim after it; a reopen's intermediate; the ".." climb; a create's copy).
 * Its table's own (root, /proc/self/fd) are open when the budget is settled, and counted.
 */
#define HOST_FILES_REQ_FDS 24u
#define HOST_FILES_FDS_PER_OPEN 2u
/* Fewest a share is served with: a guest's mount and a walk a few levels deep with a few
 * files open. Fewer, and lkvm does not start. */
#define HOST_FILES_MIN_CACHED 16u
#define HOST_FILES_MIN_OPEN 8u

struct host_files_caps {
	u32 max_cached, max_open;
};

/*
 * The caps of each of nshares shares when lkvm may hold nofile descriptors (RLIMIT_NOFILE) and
 * reserve of them are not the shares' (lkvm's own): what is left after each share's
 * HOST_FILES_REQ_FDS, shared out evenly, a quarter of each share's part to open files (two
 * descriptors each) and the rest to its cache, at most HOSTFS_OPEN_DEFAULT and
 * HOSTFS_CACHED_DEFAULT. 0, or -EMFILE when a share would get fewer than the minimums.
 */
int host_files_budget(u64 nofile, u64 reserve, u32 nshares, struct host_files_caps *c);
/* The least RLIMIT_NOFILE with which host_files_budget(., reserve, nshares) succeeds. */
u64 host_files_budget_need(u64 reserve, u32 nshares);
/* Descriptors nshares shares at the default caps could use (what the soft limit is raised to). */
u64 host_files_want(u32 nshares);

/*
 * The soft RLIMIT_NOFILE raised up to host_files_want(nshares) plus headroom for lkvm's own,
 * within the hard limit, which is left alone (the user's, or the service manager's, word on
 * what lkvm may hold). Called by a host-file device's init, before its descriptors and later
 * devices' are opened. Returns the soft limit in force (UINT64_MAX: unlimited).
 */
u64 host_files_raise_nofile(u32 nshares);

/*
 * Settle the caps of every host-file device of kvm (up: its share open) once everything of
 * the VM's set-up is open, before the guest runs: RLIMIT_NOFILE (raised as far as it may go)
 * minus the descriptors open now and `later` more that lkvm opens while it runs, shared out by
 * host_files_budget, each share's table given them with hostfs_set_caps (its node cap left as
 * it was: memory, not descriptors). Until then a table has the hostfs defaults. 0, or -EMFILE
 * with the one-line reason in err ("N shares need at least M descriptors; RLIMIT_NOFILE allows
 * K: raise it with ulimit -n") when the limit cannot serve every share, or -errno when
 * /proc/self/fd cannot be read.
 */
int host_files_fit(struct kvm *kvm, u32 later, char *err, size_t errlen) __must_check;

#endif

/* The virtio-9p device (a host directory shared with the guest over 9P2000.L) and `--share`. */
#ifndef LKVM_VIRTIO_9P_H
#define LKVM_VIRTIO_9P_H

#include <limits.h>

#include "lkvm/fuse-server.h"
#include "lkvm/virtio.h"

struct kvm;
struct kvm_config;
struct opt_set;
struct stats_visitor;
struct virtio_9p;

/*
 * Most bytes of a mount tag (the config space's tag field, not NUL-terminated there). Linux
 * reads any length; 31 keeps a tag a short name in /proc/mounts, and our own tags
 * ("lkvm-share7", "lkvm-root") are far below it.
 */
#define VIRTIO_9P_TAG_MAX 31
/* Tags of --share's devices: "lkvm-share0", "lkvm-share1", ... in command-line order. */
#define VIRTIO_9P_SHARE_TAG "lkvm-share"

/*
 * Most --share options. Each share is a device with its own fid table (memory: P9_FIDS_DEFAULT
 * fids) and node table (hostfs), whose descriptor caps are settled from RLIMIT_NOFILE with
 * every other host-file device's (host_files_fit, host-files.h), or lkvm does not start.
 * 8 also fits on the virtio-mmio bus (9 slots) beside the root over one file system; with
 * --fs auto both devices of every share would not (18), so there virtio-fs takes only the
 * slots 9p leaves, the root first (builtin/run.c's share_fs_decide).
 */
#define VIRTIO_9P_MAX_SHARES 8

/* One shared directory, as --share gives it or as `lkvm run -- CMD` makes the host root. */
struct p9_share {
	char host_dir[PATH_MAX];	 /* absolute, an existing directory */
	char guest_dir[PATH_MAX];	 /* where lkvm's init mounts it (absolute); "" for none */
	char tag[VIRTIO_9P_TAG_MAX + 1]; /* mount tag, 1..VIRTIO_9P_TAG_MAX bytes */
	bool ro;  /* every request that would change the host answers EROFS */
	u32 fids; /* the fid bound (`fids=N`; 0: P9_FIDS_DEFAULT), memory: 48 bytes a fid */
	enum virtio_trans trans;
	bool trans_set; /* else --virtio-transport decides */
	/* Which devices serve it (virtio-fs.h; --fs, decided by share_fs_decide in
	 * builtin/run.c): virtio-9p unless no_9p, virtio-fs too (or only) when vfs. */
	bool no_9p, vfs;
	enum fuse_cache cache; /* virtio-fs's cache mode (cache=; default auto) */
};

/* The --share options of a run (struct kvm_config's shares: NULL when none, which every
 * function below takes as no share). */
struct p9_shares {
	int nr;
	struct p9_share share[VIRTIO_9P_MAX_SHARES];
};

/*
 * Parse one `--share HOSTDIR[:GUESTDIR][,ro][,trans=pci|mmio][,fids=N][,cache=MODE]` into the next share of s:
 * HOSTDIR made absolute (realpath) and checked to be a directory, GUESTDIR (absolute)
 * defaulting to it, tag VIRTIO_9P_SHARE_TAG + its index; read-write unless ro. Neither
 * directory can contain ':' or ','. 0, or -errno with a one-line reason in err (missing
 * or not a directory, GUESTDIR not absolute, an unknown suffix, more than
 * VIRTIO_9P_MAX_SHARES).
 */
/* Its suffixes (for --help). */
extern const struct opt_set p9_share_opt_set;
/* cache='s values (and --cache's): auto, always, none (never: the same). */
struct opt_choice;
extern const struct opt_choice fuse_cache_choices[];
int p9_share_parse(struct p9_shares *s, const char *arg, char *err, size_t errlen) __must_check;
/* How many devices of s (9p and virtio-fs) end up on transport t (dflt: --virtio-transport),
 * for the mmio bound. */
int p9_shares_on(const struct p9_shares *s, enum virtio_trans dflt, enum virtio_trans t);

/* Share i of the run's --share options (for lkvm's init configuration), or NULL past the
 * last. */
const struct p9_share *p9_share_get(const struct p9_shares *s, int i);

/*
 * Add a virtio-9p device serving share->host_dir to kvm's device list ("virtio-9p", stats
 * kind "9p"), on share->trans when trans_set, else --virtio-transport. The share is copied.
 * The directory is opened at the list's init (kvm_devs_init: an error then names it), its
 * thread started at the list's start (from the main thread). 0, -EINVAL (an empty or too
 * long tag, a relative host_dir) or -ENOMEM.
 */
int virtio_9p_add(struct kvm *kvm, const struct p9_share *share) __must_check;

/*
 * The device itself (for the device list and for tests). Opens share->host_dir with the
 * server (read-only shares refuse every change; max_fids 0: share->fids, else P9_FIDS_DEFAULT) and attaches
 * to share->trans (else --virtio-transport), or to no transport when bare (tests set up the
 * queue and call ops->start). 0 or -errno with a one-line reason in err.
 */
int virtio_9p_create(struct kvm *kvm, const struct p9_share *share, bool bare, u32 max_fids,
		     struct virtio_9p **out, char *err, size_t errlen) __must_check;
/* Start its thread (inside SB_P9): from a thread that may create one (main, before the
 * vCPUs run), once. It serves the queue from DRIVER_OK to the next reset. 0 or -errno. */
int virtio_9p_run(struct virtio_9p *p) __must_check;
struct virtio_device *virtio_9p_vdev(struct virtio_9p *p);
/* Pause: the thread parks between two requests (none half answered); nothing is answered,
 * no interrupt raised, until resume. */
void virtio_9p_quiesce(struct virtio_9p *p);
void virtio_9p_resume(struct virtio_9p *p);
/* Stop the thread, detach, close every fid and the share. NULL is fine. */
void virtio_9p_destroy(struct virtio_9p *p);
/*
 * Snapshot: save (the VM paused: the thread parked) the core's records and the server's
 * (p9_server_save: refused for an xattr fid or a file removed from the share); load, on a
 * device just created from the same share: the core's state, then every fid walked to and
 * reopened (p9_server_load), else -EINVAL with the reason in err and the device reset. The
 * restored device serves its queue once virtio_snap_start(virtio_9p_vdev(p)) is called
 * after virtio_9p_run (the device list's start op does both).
 */
struct snap_rec_buf;
int virtio_9p_save(struct virtio_9p *p, struct snap_rec_buf *b, char *err,
		   size_t errlen) __must_check;
int virtio_9p_load(struct virtio_9p *p, const void *sec, size_t len, char *err,
		   size_t errlen) __must_check;
/* Counters: group req0 (kicks, trapped, irqs, requests, bytes of file data read and written,
 * errors: requests answered with Rlerror, reads: Treads answered, read_bytes, write_bytes, malformed: chains that
 * put the device in NEEDS_RESET), then group fids (in_use, limit, msize: levels), then group
 * files, the share's host files (hostfs_stats): nodes, cached, open (levels), reopens, stale
 * (evicted nodes found again, and those gone or replaced), cap_hits (requests refused at the
 * fid bound or a hostfs cap; the first of each also said once as a warning). */
void virtio_9p_stats(struct virtio_9p *p, struct stats_visitor *v);

/* Add one device per share of s that has one (not no_9p), in order. 0 or the first -errno. */
int virtio_9p_add_shares(struct kvm *kvm, const struct p9_shares *s) __must_check;

#endif

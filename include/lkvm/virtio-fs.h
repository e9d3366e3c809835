/* The virtio-fs device (a host directory shared with the guest over FUSE), beside virtio-9p for --share and the host root. */
#ifndef LKVM_VIRTIO_FS_H
#define LKVM_VIRTIO_FS_H

#include "lkvm/fuse-server.h"
#include "lkvm/virtio.h"

struct kvm;
struct p9_share;
struct p9_shares;
struct snap_rec_buf;
struct stats_visitor;
struct virtio_fs;

/* Bytes of the config space's tag (virtio 1.2 §5.11.4: not NUL-terminated when full). */
#define VIRTIO_FS_TAG_MAX 36
/* Tags: the host root's, and --share's ("lkvm-fs0", "lkvm-fs1", ... in command-line order). */
#define VIRTIO_FS_ROOT_TAG "lkvm-fs-root"
#define VIRTIO_FS_SHARE_TAG "lkvm-fs"
/* Queue 0 is hiprio (FORGETs), then num_request_queues request queues: one is enough for a
 * server that answers one request at a time. */
#define VIRTIO_FS_REQUEST_QUEUES 1
#define VIRTIO_FS_QUEUES (1 + VIRTIO_FS_REQUEST_QUEUES)

/* How a share is served and cached over virtio-fs (the 9p device ignores it). */
struct virtio_fs_share {
	char tag[VIRTIO_FS_TAG_MAX + 1]; /* 1..VIRTIO_FS_TAG_MAX bytes */
	enum fuse_cache cache;
};

/*
 * Add a virtio-fs device serving share->host_dir (read-only when share->ro, on share->trans
 * when trans_set, else --virtio-transport) as fs->tag with fs->cache to kvm's device list
 * ("virtio-fs", stats kind "fs"). Both are copied. The directory is opened at the list's
 * init, the thread started at its start. 0, -EINVAL (a bad tag, a relative host_dir) or
 * -ENOMEM.
 */
int virtio_fs_add(struct kvm *kvm, const struct p9_share *share,
		  const struct virtio_fs_share *fs) __must_check;
/* A device for each share of s that has_vfs, in order (tags VIRTIO_FS_SHARE_TAG + index). */
int virtio_fs_add_shares(struct kvm *kvm, const struct p9_shares *s) __must_check;

/*
 * The device itself (for the device list and for tests). Opens share->host_dir with the FUSE
 * server (max_handles 0: FUSE_SRV_HANDLES_DEFAULT) and attaches to its transport, or to none
 * when bare (tests set up the queues and call ops->start). 0 or -errno with a one-line reason
 * in err.
 */
int virtio_fs_create(struct kvm *kvm, const struct p9_share *share,
		     const struct virtio_fs_share *fs, bool bare, struct virtio_fs **out, char *err,
		     size_t errlen) __must_check;
/* Start its thread (inside SB_FS): from main, before the vCPUs run, once. It serves both
 * queues from DRIVER_OK to the next reset. 0 or -errno. */
int virtio_fs_run(struct virtio_fs *f) __must_check;
struct virtio_device *virtio_fs_vdev(struct virtio_fs *f);
/* The server's node table (the descriptor budget: its caps). */
struct hostfs *virtio_fs_hostfs(struct virtio_fs *f);
/* Pause: the thread parks between two requests; nothing answered, no interrupt, until resume. */
void virtio_fs_quiesce(struct virtio_fs *f);
void virtio_fs_resume(struct virtio_fs *f);
/* Stop the thread, detach, close the server. NULL is fine. */
void virtio_fs_destroy(struct virtio_fs *f);
/*
 * Snapshot (as virtio_9p_save/load): the core's records and the server's (fuse_server_save:
 * refused for a node whose name is gone); load, on a device just created from the same share,
 * the core's state then the server's, else -EINVAL with the reason in err and the device
 * reset. The list's start op serves a restored device (virtio_snap_start).
 */
int virtio_fs_save(struct virtio_fs *f, struct snap_rec_buf *b, char *err,
		   size_t errlen) __must_check;
int virtio_fs_load(struct virtio_fs *f, const void *sec, size_t len, char *err,
		   size_t errlen) __must_check;
/*
 * Counters: group hiprio and req0 (kicks, trapped, irqs, requests, bytes of file data;
 * malformed: chains that put the device in NEEDS_RESET), the server's errors, reads,
 * read_bytes, write_bytes, then group files (handles, handle_limit, nodes, node_limit,
 * cached, open: levels; reopens, stale, cap_hits: counts).
 */
void virtio_fs_stats(struct virtio_fs *f, struct stats_visitor *v);

#endif

/* The virtio-blk device on a raw image file (qcow2 and overlays through disk.h): requests through libaio (or synchronous pread/pwrite), flush, get-id, read-only. */
#ifndef LKVM_VIRTIO_BLK_H
#define LKVM_VIRTIO_BLK_H

#include <limits.h>

#include "lkvm/virtio.h"

struct kvm;
struct stats_visitor;
struct virtio_blk;

#define VIRTIO_BLK_QUEUE_SIZE 256
#define VIRTIO_BLK_SEG_MAX 254 /* data segments per request (queue size - header - status) */
#define VIRTIO_BLK_MAX_DISKS 4

enum blk_io { BLK_IO_LIBAIO, BLK_IO_SYNC };

/* What `-d PATH[,ro][,trans=pci|mmio][,aio=libaio|sync][,direct=on|off][,snapshot=on]
 * [,backing=PATH]` says. */
struct blk_opts {
	char path[PATH_MAX];
	bool ro;
	enum virtio_trans trans;
	bool trans_set;		/* else --virtio-transport decides */
	enum blk_io io;		/* default libaio */
	bool no_direct;		/* direct=off: never O_DIRECT */
	bool snapshot;		/* snapshot=on: writes go to a private overlay (disk.h) */
	char backing[PATH_MAX]; /* backing=PATH: a qcow2 image's backing file ("": beside it) */
};

/* What may follow -d PATH: the keys blk_parse_opts reads, and their help. */
extern const struct opt_set blk_opt_set;

/* Parse one -d value. 0 or -EINVAL with a one-line reason in err. */
int blk_parse_opts(const char *arg, struct blk_opts *o, char *err, size_t errlen) __must_check;

/* Open the image (O_DIRECT when the file system allows and direct is not off; read-only
 * for ro) and attach the device to o->trans. 0 or -errno with a reason in err. */
int virtio_blk_create(struct kvm *kvm, const struct blk_opts *o, struct virtio_blk **out, char *err,
		      size_t errlen) __must_check;
/* The same without a transport, for tests (the test sets up the queue and calls
 * ops->start); kvm needs only .mem. */
int virtio_blk_create_bare(struct kvm *kvm, const struct blk_opts *o, struct virtio_blk **out,
			   char *err, size_t errlen) __must_check;
struct virtio_device *virtio_blk_vdev(struct virtio_blk *b);
/* Whether the image is open with O_DIRECT (for tests and --debug). */
bool virtio_blk_direct(struct virtio_blk *b);
/* Pause: the requests in flight complete, then the thread parks; nothing more completes, no
 * guest byte is written and no interrupt raised until resume, which serves what came
 * meanwhile. No-op when the device is not running. */
void virtio_blk_quiesce(struct virtio_blk *b);
void virtio_blk_resume(struct virtio_blk *b);
/* Waits for requests in flight, stops the thread, detaches, closes the image. NULL is fine. */
void virtio_blk_destroy(struct virtio_blk *b);
/* Counters: the queue's (group req0: kicks, trapped, irqs, requests, bytes, errors), and the
 * bounce buffers for O_DIRECT (group bounce: bytes held now, the peak, the limit, beyond
 * which a request waits for completions, and how many requests had to wait). */
void virtio_blk_stats(struct virtio_blk *b, struct stats_visitor *v);
/* Snapshot (the VM paused): the image's size and mode and the queue's state as records, and
 * back on a disk just created from the restoring command line's -d: 0, or -EINVAL with a
 * reason ("PATH is not the snapshot's (size X, was Y)" when the image differs; a failed load
 * leaves it reset). No path is saved (an older lkvm's record BLK_SNAP_TAG_PATH is ignored):
 * a snapshot names no host file. */
#define BLK_SNAP_TAG_STATE VIRTIO_SNAP_TAG_DEV
#define BLK_SNAP_TAG_PATH (VIRTIO_SNAP_TAG_DEV + 1)
/* The saved image's size in bytes from a disk's section. 0, or -ENOENT/-EBADMSG. */
int virtio_blk_snap_size(const void *sec, size_t len, u64 *size) __must_check;
int virtio_blk_save(struct virtio_blk *b, struct snap_rec_buf *rb, char *err,
		    size_t errlen) __must_check;
int virtio_blk_load(struct virtio_blk *b, const void *sec, size_t len, char *err,
		    size_t errlen) __must_check;
/* Add a disk to kvm's device list ("virtio-blk", stats kind "disk"), on o->trans (else
 * --virtio-transport). 0 or -ENOMEM. */
int virtio_blk_add(struct kvm *kvm, const struct blk_opts *o) __must_check;

#endif

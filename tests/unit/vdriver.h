/* Unit tests: one virtio driver (guest RAM without KVM, rings, chains, waits), one fake device. */
#ifndef LKVM_TEST_VDRIVER_H
#define LKVM_TEST_VDRIVER_H

#include <stdbool.h>
#include <linux/virtio_ring.h>

#include "lkvm/kvm.h"
#include "fake_vm.h"
#include "lkvm/virtio.h"

/* ---- the VM: guest RAM and a struct kvm without /dev/kvm ---- */

/* The device tests' VM (one at a time, as each test file drives one device). */
struct vdriver {
	u8 *ram;
	u64 ram_size;
	struct kvm *kvm;
	u64 buf_next; /* vd_galloc's next free guest address */
};

extern struct vdriver vd;

/* vd: ram_size bytes of zeroed, page-aligned RAM in a new struct kvm; vd_galloc from buf_base. */
void vd_vm_new(u64 ram_size, u64 buf_base);
void vd_vm_free(void);
/* The host address of guest physical address gpa in vd's RAM. */
void *gp(u64 gpa);
/* len bytes of guest RAM at an address aligned to align, at or after the last ones. */
u64 vd_galloc(u64 len, u64 align);

/* ---- the driver's side of one split ring: desc at base, avail +0x1000, used +0x2000 ---- */

#define VD_AVAIL_OFF 0x1000
#define VD_USED_OFF 0x2000

struct vd_queue {
	u16 size;
	struct vring_desc *desc;
	struct vring_avail *avail;
	struct vring_used *used;
	u16 next_desc; /* where the next chain's head goes */
	u16 aidx;      /* the avail index the driver published last */
};

/* One buffer of a chain (write: the device writes it). */
struct vd_buf {
	u64 gpa;
	u32 len;
	bool write;
};

/* d: the driver's view of the ring at base (in vd's RAM). */
void vd_queue_at(struct vd_queue *d, u64 base, u16 size);
/* What a transport does for queue qi of vdev up to DRIVER_OK (vq_init on the ring at base, its
 * kick and irq eventfds), and d: the driver's view of it. */
void vd_queue_up(struct virtio_device *vdev, int qi, struct vd_queue *d, u64 base, u16 size,
		 bool event_idx);
/* DRIVER_OK (and the bits before it) set, and the device started. */
void vd_driver_ok(struct virtio_device *vdev);
/* Close the kick and irq eventfds of queues [0, n), saved before the device forgot them. */
struct vd_fds {
	int n;
	int kick[VIRTIO_MAX_QUEUES], irq[VIRTIO_MAX_QUEUES];
};
void vd_fds_save(struct vd_fds *f, const struct virtio_device *vdev, int n);
void vd_fds_close(const struct vd_fds *f);

/* Make head available (again). */
void vd_publish(struct vd_queue *d, u16 head);
/* Descriptors for nb buffers at table[first...] (indices modulo n), chained in order. */
void vd_fill_descs(struct vring_desc *table, u16 first, u16 n, const struct vd_buf *b, int nb);
/* Post one chain of nb buffers, in order, made available; returns its head. */
u16 vd_post(struct vd_queue *d, const struct vd_buf *b, int nb);
/* One descriptor with flags (WRITE, INDIRECT) as one chain, made available; returns its head. */
u16 vd_post_desc(struct vd_queue *d, u64 gpa, u32 len, u16 flags);
/* The guest's notify of queue qi (its kick eventfd). */
void vd_kick(const struct virtio_device *vdev, int qi);
u16 vd_used_idx(const struct vd_queue *d);
/* Bounded wait (ms) for the used index to reach want. */
bool vd_wait_used(const struct vd_queue *d, u16 want, int ms);

/* ---- the fake device the transport tests (virtio-mmio, virtio-pci) attach ---- */

#define VD_TDEV_FEATURE_LO (1ULL << 5)
#define VD_TDEV_FEATURE_HI (1ULL << 35)
#define VD_TDEV_REFUSED (1ULL << 6) /* offered, but features_ok says no */

/* Counts starts and stops, serves 8 bytes of config, refuses VD_TDEV_REFUSED. */
struct vd_tdev {
	struct virtio_device vdev;
	struct virtio_dev_ops ops;
	int starts, stops, start_ret; /* start_ret: what ops->start returns */
	bool ready_at_start[2];	      /* queues 0 and 1 ready when start ran */
	u8 config[8];
	u64 features_seen; /* the last features_ok asked */
};

/* t (zeroed by the caller) as device device_id of class class_code, its config (8 bytes) or
 * zeroes (NULL). vdev's use_ioeventfd and lock are the caller's (a transport test's choice). */
void vd_tdev_init(struct vd_tdev *t, u16 device_id, u32 class_code, const void *config);
/* detach(t's vdev) (the transport's teardown): t stopped once more, its transport gone, and no
 * MMIO range of it left on kvm's bus. */
void vd_tdev_detach(struct vd_tdev *t, void (*detach)(struct virtio_device *), struct kvm *kvm);

#endif

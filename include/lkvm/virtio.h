/* Virtio devices and their transport: the ops a device fills, the per-queue state the transport owns. */
#ifndef LKVM_VIRTIO_H
#define LKVM_VIRTIO_H

#include <pthread.h>
#include <stdatomic.h>
#include <linux/virtio_config.h>

#include "lkvm/io.h"
#include "lkvm/opt.h"
#include "lkvm/util.h"
#include "lkvm/virtio-trans.h"
#include "lkvm/virtqueue.h"

struct kvm;
struct snap_rec_buf;
struct stats_visitor;
struct virtio_device;

#define VIRTIO_MAX_QUEUES 17 /* 8 queue pairs + a control queue */
#define VIRTIO_MSI_NO_VECTOR 0xffff
#define VIRTIO_MAX_DOORBELLS 2 /* guest addresses that notify one queue (pci: 2- and 4-byte) */

/* Per-queue counters (relaxed atomics: written by the queue's thread or a vCPU, read
 * by --stats at the end). */
struct virtio_queue_stats {
	atomic_ullong kicks;   /* guest notifications seen (ioeventfd or trapped):
	                              * counted by the device thread, adding the values it
	                              * reads from kick_fd (a trapped notify is written
	                              * there too), in both modes */
	atomic_ullong trapped; /* of which came as exits to the vCPU thread (counted
	                              * by the transport's notify handler) */
	atomic_ullong irqs;    /* interrupts sent to the guest */
	atomic_ullong packets; /* frames moved (device-defined unit) */
	atomic_ullong bytes;
	atomic_ullong drops;	 /* frames lost (backend error, no guest buffer, truncation) */
	atomic_ullong batches;	 /* wake-ups that found work (for packets per wake-up) */
	atomic_ullong calls;	 /* net: data calls to the backend (a frame, or a batch of them) */
	atomic_ullong polls;	 /* tx=poll: poll windows (the ring polled after a drain) */
	atomic_ullong poll_hits; /* of which found a new chain before the window closed */
	atomic_ullong poll_ns;	 /* time spent in poll windows */
};

/* Transport-owned state of one queue, visible to the device (the same for every
 * transport; what only one transport needs, such as MSI-X vectors, lives in it). */
struct virtio_queue {
	struct virtqueue vq; /* valid while the device runs (after DRIVER_OK) */
	u16 size;	     /* driver-written size (<= max) */
	u16 max_size;
	bool enabled;		  /* queue enable/ready written 1 */
	u64 desc, driver, device; /* guest addresses from the transport's registers */
	int kick_fd;		  /* eventfd: the guest's notify lands here either way */
	int irq_fd;		  /* eventfd bound with KVM_IRQFD to this queue's vector
	                              * (or -1: use virtio_signal_queue's fallback path) */
	struct kvm_ioevent ioev[VIRTIO_MAX_DOORBELLS]; /* KVM_IOEVENTFDs on kick_fd (core.c) */
	u8 nioev;
	struct virtio_queue_stats stats;
};

struct virtio_dev_ops {
	u16 device_id;					 /* VIRTIO_ID_* */
	u16 subsys_id;					 /* 0: device_id */
	u32 class_code;					 /* class code for transports that have one
	                                              * (PCI), e.g. 0x020000 for network */
	u64 (*get_features)(struct virtio_device *vdev); /* device bits; VERSION_1 is added */
	u32 config_size;
	/* Device-specific config reads/writes (offset checked by the transport against
	 * config_size; any alignment). */
	void (*config_read)(struct virtio_device *vdev, u32 off, u8 *data, u32 len);
	void (*config_write)(struct virtio_device *vdev, u32 off, const u8 *data, u32 len);
	/* FEATURES_OK was written: may refuse a combination (return false, the transport
	 * then clears FEATURES_OK as the spec says). */
	bool (*features_ok)(struct virtio_device *vdev, u64 features);
	/* DRIVER_OK: every enabled queue's vq is initialised; start serving. Return -errno
	 * to put the device in NEEDS_RESET. */
	int (*start)(struct virtio_device *vdev);
	/* Reset or teardown: stop and join the device's threads; afterwards the transport
	 * resets the queues. Must be safe when start never ran. */
	void (*stop)(struct virtio_device *vdev);
};

/* What a transport does for the transport-neutral code (virtio/core.c). */
struct virtio_transport_ops {
	const char *name; /* "pci", "mmio" */
	/* Raise the device's interrupt after ISR bits were set, for a queue or a config
	 * change that has no irqfd (device threads call it; must not take vdev->lock). */
	void (*signal_isr)(struct virtio_device *vdev);
	/* Where the guest's notify of queue qi lands now, for KVM_IOEVENTFD: fills out (at
	 * most VIRTIO_MAX_DOORBELLS) and returns how many; 0 when nowhere (e.g. a BAR not
	 * mapped). vdev->lock held. */
	int (*doorbells)(struct virtio_device *vdev, int qi, struct kvm_ioevent *out);
	/* Device reset (status 0), vdev->lock held and the device stopped: forget what the
	 * driver set up in the transport's own registers (interrupt vectors, INTx level). */
	void (*reset)(struct virtio_device *vdev);
	/* Close what the transport made (vectors, irqfds), vdev->lock held, device stopped. */
	void (*release)(struct virtio_device *vdev);
	/* Unplug, then virtio_transport_exit, then free the transport's state. */
	void (*destroy)(struct virtio_device *vdev);
	/* Snapshot (virtio/snap.c), vdev->lock held. save: the transport's own registers as
	 * its record (VIRTIO_SNAP_TAG_TRANSPORT). load: after the core's state is back, before
	 * the ioeventfds and the device's start: check the record, take its registers and
	 * re-arm what their writes armed (vectors, routes, irqfds). 0 or -EINVAL and a reason. */
	void (*save)(struct virtio_device *vdev, struct snap_rec_buf *b);
	int (*load)(struct virtio_device *vdev, const void *sec, size_t len, char *err,
		    size_t errlen);
};

struct virtio_device {
	struct kvm *kvm;
	const struct virtio_dev_ops *ops;
	void *priv;
	int nr_queues;
	struct virtio_queue q[VIRTIO_MAX_QUEUES];
	u64 host_features; /* offered */
	/* Shared with other threads: atomics, by the rules at the top of virtio/core.c. */
	atomic_ullong features; /* negotiated (valid after FEATURES_OK) */
	atomic_uint status;	/* VIRTIO_CONFIG_S_* */
	atomic_uint isr;	/* ISR status bits for INTx */
	atomic_uchar config_generation;
	bool use_ioeventfd;   /* per-device: --no-ioeventfd / ioeventfd=off clear it */
	bool initialised;     /* virtio_device_init ran (lock valid) */
	pthread_mutex_t lock; /* transport state: registers, status, interrupt tables */
	/* The transport-neutral registers (core.c), under lock. */
	u32 dfselect, gfselect; /* which half of the device / driver features */
	u64 driver_features;	/* as the driver wrote them, checked at FEATURES_OK */
	u32 queue_select;
	/* Set by the transport; NULL in tests without one. */
	const struct virtio_transport_ops *tops;
	void *transport;
	int config_irq_fd;		/* eventfd for config-change interrupts, or -1: ISR +
	                              * tops->signal_isr */
	bool snap_start;		/* restored running: virtio_snap_start starts it */
	atomic_bool needs_reset_logged; /* once per reset cycle ... */
	struct ratelimit log_rl;	/* ... and rate-limited: a guest may loop resets */
};

/* The device's side of setting up: before attaching, a device sets only vdev->ops,
 * vdev->priv, vdev->use_ioeventfd (and host_features beyond ops->get_features). */

/* Initialise the transport-neutral state: lock, kvm, nr_queues (1..VIRTIO_MAX_QUEUES),
 * every queue (max_size = size = queue_max_size, a power of two <= VQ_MAX_SIZE;
 * kick_fd and irq_fd -1, stats zeroed), status, features, and ORs ops->get_features
 * and VERSION_1 into host_features. Transports call it; so do tests that drive a
 * device without one. Returns 0 or -EINVAL (nothing initialised then). */
int virtio_device_init(struct virtio_device *vdev, struct kvm *kvm, int nr_queues,
		       u16 queue_max_size) __must_check;
/* Destroy the lock; no-op when not initialised. */
void virtio_device_uninit(struct virtio_device *vdev);
/* Put the device on transport t (virtio/transport.c: virtio_pci_init or virtio_mmio_init). The
 * device is reachable by the guest when this returns: finish the device's own setup first. */
int virtio_device_attach(struct kvm *kvm, struct virtio_device *vdev, enum virtio_trans t,
			 int nr_queues, u16 queue_max_size) __must_check;
/* Detach from the transport (which stops the device) and uninitialise; for a device
 * without transport just uninitialise. Call before freeing the device; no-op twice. */
void virtio_device_exit(struct virtio_device *vdev);
/* "pci", "mmio". */
const char *virtio_trans_name(enum virtio_trans t);
/* "pci" and "mmio", for the options that pick a transport (opt.h). */
extern const struct opt_choice virtio_trans_choices[VIRTIO_TRANS_NR + 1];

/* Called by device threads; transport-independent (virtio/core.c). */
/* Interrupt the guest for queue qi if the ring says so (vq_should_notify): via the
 * queue's irqfd (MSI-X), or ISR bit 0 + INTx. Counts in stats.irqs. */
void virtio_notify_queue(struct virtio_device *vdev, int qi);
/* The same without asking the ring: for an interrupt someone else decided on (vhost's call
 * eventfd, relayed where the queue has no irqfd). */
void virtio_raise_queue(struct virtio_device *vdev, int qi);
/* Config-change interrupt (ISR bit 1 / config vector). */
void virtio_notify_config(struct virtio_device *vdev);
/* The device changed its config space (device thread, no lock): bump config_generation
 * so a driver reading several fields sees the change, then the config-change interrupt. */
void virtio_config_changed(struct virtio_device *vdev);
/* The driver broke a queue: set DEVICE_NEEDS_RESET, log once, notify config. The
 * device stops using that queue; lkvm and other devices carry on. */
void virtio_set_needs_reset(struct virtio_device *vdev, const char *why);
/* Queue qi's counters as stats group `group` (stats.h): kicks, trapped, irqs, then what
 * stats.packets counts under the name `unit` ("packets", "requests"), and bytes. The
 * device adds its own counters to the group after them. */
void virtio_queue_stats(struct virtio_device *vdev, int qi, struct stats_visitor *v,
			const char *group, const char *unit);

/* ---- For transports (virtio/core.c): the state machine behind their registers ---- */

/* virtio_device_init, then a kick eventfd per queue, the transport's ops and state, and
 * ioeventfds only where KVM has them. 0 or -errno (nothing left set up then). */
int virtio_transport_init(struct virtio_device *vdev, struct kvm *kvm, int nr_queues,
			  u16 queue_max_size, const struct virtio_transport_ops *tops,
			  void *transport) __must_check;
/* The guest can no longer reach the device: stop it (ops->stop), drop the ioeventfds,
 * reset the queues, tops->release, close the kick eventfds, uninitialise. */
void virtio_transport_exit(struct virtio_device *vdev);

/* The registers every transport has, by meaning; each transport maps its layout onto
 * them. vdev->lock held. Reads of a missing queue (selector out of range) give 0, writes
 * to it are ignored; queue set-up registers change only before the queue is enabled and
 * the device runs. Writing STATUS runs the state machine: bits are only ever added,
 * except by writing 0 (reset: the device stopped, the queues and every register back to
 * their initial values); FEATURES_OK sticks only when the driver's features are
 * acceptable; DRIVER_OK only after FEATURES_OK, and it starts the device. */
enum virtio_reg {
	VREG_DEVICE_FEATURES_SEL,
	VREG_DEVICE_FEATURES,
	VREG_DRIVER_FEATURES_SEL,
	VREG_DRIVER_FEATURES,
	VREG_NUM_QUEUES,
	VREG_STATUS,
	VREG_CONFIG_GENERATION,
	VREG_QUEUE_SEL,
	VREG_QUEUE_SIZE_MAX,
	VREG_QUEUE_SIZE,
	VREG_QUEUE_ENABLE,
	VREG_QUEUE_DESC_LO,
	VREG_QUEUE_DESC_HI,
	VREG_QUEUE_DRIVER_LO,
	VREG_QUEUE_DRIVER_HI,
	VREG_QUEUE_DEVICE_LO,
	VREG_QUEUE_DEVICE_HI,
	VREG_NR
};
/* In a transport's register table: which accesses of an entry go to a core register. */
#define VREG_READ 1
#define VREG_WRITE 2
u32 virtio_reg_read(struct virtio_device *vdev, enum virtio_reg r);
void virtio_reg_write(struct virtio_device *vdev, enum virtio_reg r, u32 v);
/* The selected queue, or NULL when the selector is out of range. vdev->lock held. */
struct virtio_queue *virtio_selected_queue(struct virtio_device *vdev);
/* The device-specific configuration space, any width (offset checked against
 * ops->config_size; outside it reads 0 and writes are ignored). Takes vdev->lock. */
void virtio_config_access(struct virtio_device *vdev, u32 off, u8 *data, u32 len, bool is_write);
/* A notify of queue qi that exited to us (trap mode, or a width or address without
 * ioeventfd): counted in `trapped` and passed on to kick_fd, which the device thread
 * counts as a kick (so each notify is one kick whichever way it came). No lock. */
void virtio_notify_trapped(struct virtio_device *vdev, u32 qi);
/* The doorbells moved (a BAR was reprogrammed): the ioeventfds follow at once, if the
 * device runs. vdev->lock held. */
void virtio_doorbells_moved(struct virtio_device *vdev);
/* The driver set DRIVER_OK (and the device has not been reset since). */
bool virtio_driver_ok(struct virtio_device *vdev);
/* Reset the device as a driver's status write of 0 does. vdev->lock held. */
void virtio_reset(struct virtio_device *vdev);
/* The same, taking vdev->lock (the device list's reset); no-op when not initialised. */
void virtio_device_reset(struct virtio_device *vdev);

/*
 * ---- Snapshot (issue 31, virtio/snap.c) ----
 * A virtio device's section holds the core's records (status, features, selectors, ISR,
 * config generation; one per queue: set-up registers and the ring walker's indices), the
 * transport's, then the device's own from VIRTIO_SNAP_TAG_DEV on. The device's save op
 * (the VM paused, its threads parked) calls virtio_snap_save first; its load op calls
 * virtio_snap_load on the device just initialised from the same options, then reads its
 * own records; its kvm_dev start op calls virtio_snap_start, which starts the threads of a
 * device that was running (they must not run before the vCPUs' and irqchip's state is back).
 */
#define VIRTIO_SNAP_TAG_CORE 16
#define VIRTIO_SNAP_TAG_QUEUE 17 /* + the queue's index */
#define VIRTIO_SNAP_TAG_TRANSPORT (VIRTIO_SNAP_TAG_QUEUE + VIRTIO_MAX_QUEUES)
#define VIRTIO_SNAP_TAG_DEV 48
_Static_assert(VIRTIO_SNAP_TAG_TRANSPORT < VIRTIO_SNAP_TAG_DEV, "virtio snapshot tags overlap");
/* 0, or -errno (-ENOMEM) and a reason. */
int virtio_snap_save(struct virtio_device *vdev, struct snap_rec_buf *b, char *err,
		     size_t errlen) __must_check;
/* 0, or -EINVAL and a one-line reason (the device is then as init left it, but for the queue
 * rings, which a reset undoes: the caller fails the restore anyway). */
int virtio_snap_load(struct virtio_device *vdev, const void *sec, size_t len, char *err,
		     size_t errlen) __must_check;
/* After every device's load: a restored running device gets a kick on each ready queue (chains
 * posted before the snapshot are looked at) and ops->start. 0; no-op otherwise. */
int virtio_snap_start(struct virtio_device *vdev);
/* A device's own record of tag (>= VIRTIO_SNAP_TAG_DEV) into out, exactly len bytes: 0, or
 * -EINVAL with "NAME: record missing or of the wrong size" in err. */
int virtio_snap_get(const void *sec, size_t sec_len, u16 tag, void *out, size_t len,
		    const char *name, char *err, size_t errlen) __must_check;

#endif

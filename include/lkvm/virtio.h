/* Virtio devices and their transport: the ops a device fills, the per-queue state the transport owns. */
#ifndef LKVM_VIRTIO_H
#define LKVM_VIRTIO_H

#include <pthread.h>
#include <stdatomic.h>
#include <linux/virtio_config.h>

#include "lkvm/util.h"
#include "lkvm/virtqueue.h"

struct kvm;
struct virtio_device;

#define VIRTIO_MAX_QUEUES 17      /* 8 queue pairs + a control queue */
#define VIRTIO_MSI_NO_VECTOR 0xffff

/* Per-queue counters (relaxed atomics: written by the queue's thread or a vCPU, read
 * by --stats at the end). */
struct virtio_queue_stats {
	atomic_ullong kicks;         /* guest notifications seen (ioeventfd or trapped):
	                              * counted by the device thread, adding the values it
	                              * reads from kick_fd (a trapped notify is written
	                              * there too), in both modes */
	atomic_ullong trapped;       /* of which came as exits to the vCPU thread (counted
	                              * by the transport's notify handler) */
	atomic_ullong irqs;          /* interrupts sent to the guest */
	atomic_ullong packets;       /* frames moved (device-defined unit) */
	atomic_ullong bytes;
	atomic_ullong drops;         /* frames lost (backend error, no guest buffer, truncation) */
	atomic_ullong batches;       /* wake-ups that found work (for packets per wake-up) */
	atomic_ullong polls;         /* tx=poll: poll windows (the ring polled after a drain) */
	atomic_ullong poll_hits;     /* of which found a new chain before the window closed */
	atomic_ullong poll_ns;       /* time spent in poll windows */
};

/* Transport-owned state of one queue, visible to the device (the same for every
 * transport; what only one transport needs, such as MSI-X vectors, lives in it). */
struct virtio_queue {
	struct virtqueue vq;         /* valid while the device runs (after DRIVER_OK) */
	u16 size;                    /* driver-written size (<= max) */
	u16 max_size;
	bool enabled;                /* queue enable/ready written 1 */
	u64 desc, driver, device;    /* guest addresses from the transport's registers */
	int kick_fd;                 /* eventfd: the guest's notify lands here either way */
	int irq_fd;                  /* eventfd bound with KVM_IRQFD to this queue's vector
	                              * (or -1: use virtio_signal_queue's fallback path) */
	struct virtio_queue_stats stats;
};

struct virtio_dev_ops {
	u16 device_id;                               /* VIRTIO_ID_* */
	u16 subsys_id;                               /* 0: device_id */
	u32 class_code;                              /* class code for transports that have one
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
	const char *name;                            /* "pci", "mmio" */
	/* Raise the device's interrupt after ISR bits were set, for a queue or a config
	 * change that has no irqfd (device threads call it; must not take vdev->lock). */
	void (*signal_isr)(struct virtio_device *vdev);
	/* Unplug, stop the device (ops->stop), release what the transport created and
	 * uninitialise the device (virtio_device_uninit). */
	void (*destroy)(struct virtio_device *vdev);
};

/* Which transport a device is attached to (-n/-d trans=, --virtio-transport). */
enum virtio_trans { VIRTIO_TRANS_PCI, VIRTIO_TRANS_MMIO, VIRTIO_TRANS_NR };

struct virtio_device {
	struct kvm *kvm;
	const struct virtio_dev_ops *ops;
	void *priv;
	int nr_queues;
	struct virtio_queue q[VIRTIO_MAX_QUEUES];
	u64 host_features;           /* offered */
	u64 features;                /* negotiated (valid after FEATURES_OK); written by the
	                              * transport under lock, read elsewhere with atomics */
	atomic_uint status;          /* VIRTIO_CONFIG_S_* */
	atomic_uint isr;             /* ISR status bits for INTx */
	u8 config_generation;        /* atomics: bumped by devices too (virtio_config_changed) */
	bool use_ioeventfd;          /* per-device: --no-ioeventfd / ioeventfd=off clear it */
	bool initialised;            /* virtio_device_init ran (lock valid) */
	pthread_mutex_t lock;        /* transport state: registers, status, interrupt tables */
	/* Set by the transport; NULL in tests without one. */
	const struct virtio_transport_ops *tops;
	void *transport;
	int config_irq_fd;           /* eventfd for config-change interrupts, or -1: ISR +
	                              * tops->signal_isr */
	atomic_bool needs_reset_logged; /* once per reset cycle ... */
	struct ratelimit log_rl;     /* ... and rate-limited: a guest may loop resets */
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
/* Put the device on transport t (virtio_pci_init or virtio_mmio_init). The device is
 * reachable by the guest when this returns: finish the device's own setup first. */
int virtio_device_attach(struct kvm *kvm, struct virtio_device *vdev, enum virtio_trans t,
			 int nr_queues, u16 queue_max_size) __must_check;
/* Detach from the transport (which stops the device) and uninitialise; for a device
 * without transport just uninitialise. Call before freeing the device; no-op twice. */
void virtio_device_exit(struct virtio_device *vdev);
/* "pci", "mmio"; and the reverse (-EINVAL for anything else). */
const char *virtio_trans_name(enum virtio_trans t);
int virtio_trans_parse(const char *s, enum virtio_trans *t) __must_check;

/* Called by device threads; transport-independent (virtio/core.c). */
/* Interrupt the guest for queue qi if the ring says so (vq_should_notify): via the
 * queue's irqfd (MSI-X), or ISR bit 0 + INTx. Counts in stats.irqs. */
void virtio_notify_queue(struct virtio_device *vdev, int qi);
/* Config-change interrupt (ISR bit 1 / config vector). */
void virtio_notify_config(struct virtio_device *vdev);
/* The device changed its config space (device thread, no lock): bump config_generation
 * so a driver reading several fields sees the change, then the config-change interrupt. */
void virtio_config_changed(struct virtio_device *vdev);
/* The driver broke a queue: set DEVICE_NEEDS_RESET, log once, notify config. The
 * device stops using that queue; lkvm and other devices carry on. */
void virtio_set_needs_reset(struct virtio_device *vdev, const char *why);

#endif

/* Virtio devices and their transport: the ops a device fills, the per-queue state the transport owns. */
#ifndef LKVM_VIRTIO_H
#define LKVM_VIRTIO_H

#include <pthread.h>
#include <stdatomic.h>
#include <linux/virtio_config.h>

#include "lkvm/pci.h"
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

/* Transport-owned state of one queue, visible to the device. */
struct virtio_queue {
	struct virtqueue vq;         /* valid while the device runs (after DRIVER_OK) */
	u16 size;                    /* driver-written size (<= max) */
	u16 max_size;
	bool enabled;                /* queue_enable written 1 */
	u64 desc, driver, device;    /* guest addresses from the common config */
	u16 msix_vector;
	u16 notify_off;
	int kick_fd;                 /* eventfd: the guest's notify lands here either way */
	int irq_fd;                  /* eventfd bound with KVM_IRQFD to this queue's vector
	                              * (or -1: use virtio_signal_queue's fallback path) */
	struct virtio_queue_stats stats;
};

struct virtio_dev_ops {
	u16 device_id;                               /* VIRTIO_ID_* (transport adds 0x1040) */
	u16 subsys_id;
	u32 class_code;                              /* PCI class, e.g. 0x020000 for network */
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
	bool msix_enabled;
	pthread_mutex_t lock;        /* transport state: common config, status, MSI-X table;
	                              * initialised and destroyed by the device */
	void *transport;             /* struct virtio_pci */
	/* Set by the transport: raise the legacy interrupt after ISR bits were set (used
	 * when a queue has no irqfd). NULL in tests without a transport. */
	void (*intx_notify)(struct virtio_device *vdev);
	int config_irq_fd;           /* irqfd of the config vector, -1 without MSI-X */
	atomic_bool needs_reset_logged; /* once per reset cycle ... */
	struct ratelimit log_rl;     /* ... and rate-limited: a guest may loop resets */
};

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

/* Modern virtio-pci transport (device id 0x1040 + id, vendor 0x1af4): common, notify,
 * ISR, device and pci-cfg capabilities in one memory BAR, MSI-X table and PBA in
 * another; one KVM_IOEVENTFD per queue on its notify address (unless use_ioeventfd is
 * false: then the notify write traps and the handler writes kick_fd on the vCPU
 * thread); MSI-X vectors routed with KVM_SET_GSI_ROUTING, one KVM_IRQFD per vector;
 * INTx through the queue's PCI pin when MSI-X is off. nr_queues and ops must be set.
 * Returns 0 or -errno.
 * Before calling: vdev->ops, vdev->priv, vdev->use_ioeventfd (and host_features, if
 * any beyond ops->get_features) are set, and vdev->lock is initialised: the device owns
 * it (initialises and destroys it), the transport only takes it. The call sets every
 * q[i] (max_size = size = queue_max_size, a power of two <= VQ_MAX_SIZE; kick_fd
 * created; irq_fd -1; stats zeroed), kvm, nr_queues (1..VIRTIO_MAX_QUEUES),
 * transport, intx_notify, config_irq_fd; it ORs ops->get_features and VERSION_1 into
 * host_features, and clears use_ioeventfd when there is no VM or KVM lacks
 * KVM_CAP_IOEVENTFD. ops->config_size is at most 4096. The device is on the bus, so
 * reachable by the guest, when this returns: finish the device's own setup first.
 * Guest resets call ops->stop on a vCPU thread with vdev->lock held (device threads
 * must never take it); the transport then resets the queues. */
int virtio_pci_init(struct kvm *kvm, struct virtio_device *vdev, int nr_queues,
		    u16 queue_max_size) __must_check;
/* Unplugs the device, calls ops->stop, drops ioeventfds/irqfds/routes, closes kick_fd
 * and the vector eventfds. Call it before freeing the device's state; no-op twice. */
void virtio_pci_destroy(struct virtio_device *vdev);

#endif

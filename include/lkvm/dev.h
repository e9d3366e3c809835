/* The per-VM device list: every device, legacy or virtio, is an entry with the same lifecycle ops; the VM walks the list to build, start, pause, resume, reset, count and tear down. */
#ifndef LKVM_DEV_H
#define LKVM_DEV_H

#include <stddef.h>

#include "lkvm/util.h"

struct kvm;
struct kvm_dev;
struct hostfs;
struct stats_visitor;
struct snap_rec_buf;
struct snap_writer;
struct snap_reader;

/* Lower runs first: buses before the devices on them. Equal priorities keep the order
 * of registration. */
enum kvm_dev_prio {
	DEV_PRIO_BUS = 10,    /* PCI bus */
	DEV_PRIO_LEGACY = 20, /* UART, i8042, RTC, pvpanic, lkvm-exit */
	DEV_PRIO_VIRTIO = 30, /* virtio devices, on their transports */
};

/*
 * What a device does at each point of the VM's life; NULL where it has nothing to do
 * (only init is required). Each device file fills one of these and adds itself with
 * kvm_dev_add. The walkers below call them in list order (resume and exit in reverse).
 */
struct kvm_dev_ops {
	const char *name; /* "virtio-net", in errors and for kvm_dev_find */
	int prio;	  /* enum kvm_dev_prio */
	/* Build the device from d->arg and keep it in d->priv. 0 or -errno with a one-line
	 * reason in err. */
	int (*init)(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen);
	/* The machine is built and its vCPUs are about to run. 0 or -errno. */
	int (*start)(struct kvm_dev *d);
	/* Pause: once it returns, the device changes nothing the guest can see (no guest byte
	 * written, no request completed, no interrupt raised) until resume. Work that arrives
	 * meanwhile (kicks, frames, typed keys) waits and is done after resume. */
	void (*quiesce)(struct kvm_dev *d);
	void (*resume)(struct kvm_dev *d);
	/* Back to the state the guest found at power-on (a virtio device: as a driver's reset). */
	void (*reset)(struct kvm_dev *d);
	/* Its counters, through the visitor (stats.h), under the kind stats_name ("net":
	 * net0, net1, ... in --stats and lkvm stat). */
	void (*stats)(struct kvm_dev *d, struct stats_visitor *v);
	const char *stats_name;
	/*
	 * Snapshot (issue 31, docs/snapshot.md). save: the VM is paused (quiesce done, vCPUs
	 * parked); append the device's guest-visible state as records (tags >= DEV_SNAP_TAG_MIN;
	 * lower ones are the walker's) to b. NULL save: this device cannot be saved, and a
	 * snapshot of a VM that has it is refused, naming it. load: on a device that has just
	 * been through init (same options), before start and before any vCPU runs; sec/len is
	 * its whole section (snap_rec_get finds its records; every field read is checked, the
	 * file is hostile). Both 0, or -errno with a one-line reason in err (without the
	 * device's name: the walker adds it).
	 */
	int (*save)(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen);
	int (*load)(struct kvm_dev *d, const void *sec, size_t len, char *err, size_t errlen);
	/* A device serving host files (virtio-9p, virtio-fs): its share's node table, whose
	 * descriptor caps host_files_fit() settles with the others' (host-files.h). NULL: not
	 * one. */
	struct hostfs *(*host_files)(struct kvm_dev *d);
	/* Undo a successful init. */
	void (*exit)(struct kvm *kvm, struct kvm_dev *d);
};

struct kvm_dev {
	const struct kvm_dev_ops *ops;
	void *arg;  /* a copy of what kvm_dev_add was given (freed with the entry) */
	void *priv; /* set by init */
	int index;  /* n-th device of this name, from 0 (e.g. the NIC number) */
	bool up;    /* init succeeded, exit pending */
	struct kvm_dev *next;
};

/* Add a device to kvm->devs (sorted by ops->prio, stable), copying arg_len bytes of arg.
 * Returns 0 or -ENOMEM. */
int kvm_dev_add(struct kvm *kvm, const struct kvm_dev_ops *ops, const void *arg,
		size_t arg_len) __must_check;
/* Run the init of every device not yet up, in order. On the first failure return its
 * -errno (err says which device and why); devices already up stay up, for
 * kvm_devs_exit (kvm_destroy) to undo. */
int kvm_devs_init(struct kvm *kvm, char *err, size_t errlen) __must_check;
/* Every device's start, in order; the first failure is returned (err names the device). */
int kvm_devs_start(struct kvm *kvm, char *err, size_t errlen) __must_check;
/* Pause every device (list order), and let them go on (reverse order). */
void kvm_devs_quiesce(struct kvm *kvm);
void kvm_devs_resume(struct kvm *kvm);
/* Reset every device to its power-on state, in order. */
void kvm_devs_reset(struct kvm *kvm);
/* Every device's counters: v->device(kind, index), then its stats op. */
void kvm_devs_stats(struct kvm *kvm, struct stats_visitor *v);
/* Exit every device that is up, in reverse order, and free the list. kvm_destroy calls
 * it after the vCPUs stopped. */
void kvm_devs_exit(struct kvm *kvm);
/*
 * Snapshot walkers (dev-snap.c). Every device that is up gets one SNAP_SEC_DEVICE section,
 * instance = its place in the list, starting with the walker's records: its name
 * (DEV_SNAP_TAG_NAME) and index (DEV_SNAP_TAG_INDEX), which a restore compares with the
 * device at the same place (the machine must be built with the same devices).
 */
#define DEV_SNAP_TAG_NAME 1
#define DEV_SNAP_TAG_INDEX 2
#define DEV_SNAP_TAG_MIN 16
/* 0 when every device has a save op, else -EOPNOTSUPP and "DEVICE: cannot be saved". */
int kvm_devs_can_save(struct kvm *kvm, char *err, size_t errlen) __must_check;
int kvm_devs_save(struct kvm *kvm, struct snap_writer *w, char *err, size_t errlen) __must_check;
/* Every device's section, checked against the list (same count, names, indices; no device
 * section left over), then each load op in list order. */
int kvm_devs_load(struct kvm *kvm, const struct snap_reader *r, char *err,
		  size_t errlen) __must_check;
/* The n-th device (0-based) named `name` that is up, or NULL. */
struct kvm_dev *kvm_dev_find(struct kvm *kvm, const char *name, int n);

#endif

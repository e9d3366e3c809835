/* The per-VM device list: devices register an init and an exit with a priority; the VM runs inits in order and exits in reverse. */
#ifndef LKVM_DEV_H
#define LKVM_DEV_H

#include <stddef.h>

#include "lkvm/util.h"

struct kvm;
struct kvm_dev;

/* Lower runs first: buses before the devices on them. Equal priorities keep the order
 * of registration. */
enum kvm_dev_prio {
	DEV_PRIO_BUS = 10,    /* PCI bus */
	DEV_PRIO_LEGACY = 20, /* UART, i8042, RTC, pvpanic */
	DEV_PRIO_VIRTIO = 30, /* virtio devices, on their transports */
};

/* init builds the device from d->arg and stores what it made in d->priv; it returns 0
 * or -errno with a one-line reason in err. exit undoes a successful init (only those). */
typedef int (*kvm_dev_init_fn)(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen);
typedef void (*kvm_dev_exit_fn)(struct kvm *kvm, struct kvm_dev *d);

struct kvm_dev {
	const char *name;
	int prio;
	kvm_dev_init_fn init;
	kvm_dev_exit_fn exit;
	void *arg;  /* a copy of what kvm_dev_add was given (freed with the entry) */
	void *priv; /* set by init */
	int index;  /* n-th device of this name, from 0 (e.g. the NIC number) */
	bool up;    /* init succeeded, exit pending */
	struct kvm_dev *next;
};

/* Add a device to kvm->devs (sorted by prio, stable), copying arg_len bytes of arg.
 * Returns 0 or -ENOMEM. */
int kvm_dev_add(struct kvm *kvm, const char *name, int prio, kvm_dev_init_fn init,
		kvm_dev_exit_fn exit, const void *arg, size_t arg_len) __must_check;
/* Run the init of every device not yet up, in order. On the first failure return its
 * -errno (err says which device and why); devices already up stay up, for
 * kvm_devs_exit (kvm_destroy) to undo. */
int kvm_devs_init(struct kvm *kvm, char *err, size_t errlen) __must_check;
/* Exit every device that is up, in reverse order, and free the list. kvm_destroy calls
 * it after the vCPUs stopped. */
void kvm_devs_exit(struct kvm *kvm);
/* The n-th device (0-based) named `name` that is up, or NULL. */
struct kvm_dev *kvm_dev_find(struct kvm *kvm, const char *name, int n);

#endif

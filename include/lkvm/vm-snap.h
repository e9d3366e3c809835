/* Snapshot and restore of a whole VM (vm-snap.c): what the control thread and lkvm run call; the file is snap.h's, the x86 state x86.h's, the devices' dev.h's. */
#ifndef LKVM_VM_SNAP_H
#define LKVM_VM_SNAP_H

#include <stdbool.h>
#include <stddef.h>

#include "lkvm/util.h"

struct kvm;
struct snap_reader;

#define SNAP_PAUSE_TIMEOUT_MS 5000 /* as lkvm pause waits for the vCPUs to park */

struct kvm_snap_result {
	u64 pause_ns; /* from the request to every vCPU parked and device quiesced */
	u64 save_ns;  /* the state and the memory written (the VM paused throughout) */
	u64 bytes;    /* the file's size */
};

/*
 * Write the VM's whole state into fd (an empty file the caller created; the caller syncs and
 * names it): refused at once (-EOPNOTSUPP, naming it) when a device cannot be saved; else the
 * VM is paused as lkvm pause pauses it, written, and resumed, or ended with EXIT_STOPPED when
 * stop. A VM lkvm pause paused stays paused. 0 or -errno with a one-line reason.
 */
int kvm_snapshot(struct kvm *kvm, int fd, bool stop, struct kvm_snap_result *res, char *err,
		 size_t errlen) __must_check;

/* The saved run's options (argv without argv[0]), for lkvm run --restore to build the same
 * machine. 0 (free with kvm_snapshot_argv_free) or -errno with a reason. */
int kvm_snapshot_argv(const struct snap_reader *r, char ***argv, int *argc, char *err,
		      size_t errlen) __must_check;
void kvm_snapshot_argv_free(char **argv, int argc);
/* Whether the saved machine was lkvm run -- CMD's (the host's / shared): 0, -ENOENT (a
 * snapshot of an older lkvm: its options tell), or -EBADMSG. */
int kvm_snapshot_host_root(const struct snap_reader *r, bool *on);
/* The section of device NAME number index (its records), for what a restore tells before the
 * machine is built (a disk's size). 0 or -ENOENT. */
int kvm_snapshot_device(const struct snap_reader *r, const char *name, int index, const void **sec,
			size_t *len);

/*
 * On a VM built from those options, its vCPUs created and not run: the machine checked
 * against the file (vCPUs, RAM, CPU features), guest RAM mapped from the file copy-on-write,
 * every vCPU's state, the irqchip, PIT and kvm-clock, then every device's. 0 or -errno with
 * a one-line reason.
 */
int kvm_restore(struct kvm *kvm, const struct snap_reader *r, char *err,
		size_t errlen) __must_check;

#endif

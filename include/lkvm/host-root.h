/* Host-root mode's machine (`lkvm run -- CMD`): the exit port, the host's / over virtio-9p and/or virtio-fs, CMD's consoles and its stdin device. */
#ifndef LKVM_HOST_ROOT_H
#define LKVM_HOST_ROOT_H

#include "lkvm/util.h"

struct kvm;
struct kvm_config;

/* The 9p tag of the host's root (read-only, under init's tmpfs overlay). */
#define HOST_ROOT_TAG "lkvm-root"

/* Kernel parameters host-root mode adds after lkvm's own ("" when off): the kernel's log
 * stays on ttyS0 (quiet; every level with --debug or --console-log: host_root.full_log) and a
 * panic reboots, ending the run. */
const char *host_root_kernel_params(const struct kvm_config *cfg);

/* Registers what host-root mode adds to the machine (cfg->host_root): the exit port, the
 * host's root over virtio-9p and/or virtio-fs (--fs: host_root.no_9p, vfs), CMD's consoles (hvc0: the terminal or stdin's way in; ports
 * lkvm.stdout and lkvm.stderr for output that is not a terminal) and stdin's
 * forwarder (cmd_stdin_add). A machine-table row of machine.c: nothing when off. 0 or
 * -errno. */
int host_root_add_devices(struct kvm *kvm, const struct kvm_config *cfg) __must_check;
/* The virtio-mmio devices it adds with --virtio-transport mmio (the root's 9p and virtio-fs
 * devices, as --fs decided, and at most three consoles), for the parse-time count. */
int host_root_mmio_devices(const struct kvm_config *cfg);

/* Adds to kvm's device list ("cmd-stdin", hw/cmd-stdin.c): lkvm's stdin, framed
 * (initcfg_stdin_encode), into the first virtio-console's input once init reports it is
 * ready (LKVM_EXIT_STDIN_READY), then the end-of-input mark; its thread is started by
 * kvm_devs_start. Register it after that console. 0 or -ENOMEM. */
int cmd_stdin_add(struct kvm *kvm) __must_check;

#endif

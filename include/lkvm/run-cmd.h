/* `lkvm run -- CMD` and the host-root mode: the kernel, lkvm's initramfs, the host's / over 9p, CMD's consoles, stdin and status. */
#ifndef LKVM_RUN_CMD_H
#define LKVM_RUN_CMD_H

#include "lkvm/util.h"

struct kvm;
struct kvm_config;
struct term;

/* The 9p tag of the host's root (read-only, under init's tmpfs overlay). */
#define RUN_CMD_ROOT_TAG "lkvm-root"

/*
 * kvm_config's part (kvm_run_parse fills argc/argv/dashdash/console_log, run_cmd_check `on`,
 * run_cmd_prepare the rest). Host-root mode is on with `--` (CMD after it; nothing after it:
 * a shell), and when neither -k, -i nor -d is given (`lkvm run` alone: kernel discovery, a
 * shell). An explicit -k without `--` keeps the plain machine (the kernel's console on the
 * terminal), which every freestanding guest and -d/-i boot relies on.
 */
struct run_cmd_opts {
	bool dashdash; /* `--` was given */
	int argc;      /* CMD's words (0: the shell) */
	char **argv;
	const char *console_log; /* --console-log FILE: the serial console (kernel log) to FILE */
	bool on;		 /* host-root mode */
	/* Decided by run_cmd_prepare from lkvm's own descriptors: */
	bool tty;	   /* stdin and stdout are terminals: hvc0 is CMD's terminal */
	bool stdin_framed; /* not tty: stdin goes framed to init (initcfg.h), the host's
				  * terminal, if any, is left as it is (term.c reads nothing) */
	bool stderr_own;   /* CMD's stderr has its own console (hvc1): not a tty, or
				  * lkvm's stderr is not that terminal */
};

/* opt_set.trailing of `lkvm run` (base: its struct kvm_config): the words after `--`. 0. */
int run_cmd_trailing(void *base, int argc, char **argv, char *err, size_t errlen);
/* Decides cfg->cmd.on and checks what cannot go with it (-i, --console virtio). 0 or
 * -EINVAL with err. Parsing only: nothing is opened. */
int run_cmd_check(struct kvm_config *cfg, char *err, size_t errlen) __must_check;

/* Kernel parameters host-root mode adds after lkvm's own ("" when off): the kernel's log
 * stays on ttyS0 (quiet unless --debug) and a panic reboots, ending the run. */
const char *run_cmd_kernel_params(const struct kvm_config *cfg);

struct run_cmd;

/*
 * Before the VM is made (cfg is copied into it then): refuses a host that cannot run guest
 * user space (a PVM host), finds the kernel when there is no -k (one line says which),
 * decides the console modes, builds the initramfs in memory (lkvm-init, its configuration,
 * the modules a modular kernel needs) and opens the kernel log's destination. *out is NULL
 * when host-root mode is off and there is no --console-log. 0 or -errno with err.
 */
int run_cmd_prepare(struct kvm_config *cfg, struct run_cmd **out, char *err,
		    size_t errlen) __must_check;
/* Hands over the initramfs (malloc'd; the caller frees it). */
void run_cmd_take_initrd(struct run_cmd *rc, u8 **data, size_t *len);
/* Registers what host-root mode adds to the machine: the exit port, the host's root over
 * virtio-9p, CMD's consoles (hvc0 stdin+stdout, hvc1 stderr) and stdin's forwarder (its thread
 * started by kvm_devs_start). A
 * machine-table row of kvm-run.c: nothing when off. 0 or -errno. */
int run_cmd_add_devices(struct kvm *kvm, const struct kvm_config *cfg) __must_check;
/* The virtio-mmio devices it adds with --virtio-transport mmio (the root's 9p device and
 * at most two consoles), for the parse-time count. */
int run_cmd_mmio_devices(const struct kvm_config *cfg);
/* After term_init: the serial console (the kernel's log) goes to --console-log's file; in
 * host-root mode without it, to stderr with --debug, else nowhere. No-op for rc NULL. */
void run_cmd_term(struct run_cmd *rc, struct term *t);
/* After the vCPUs stopped: the run's status, with the reason rewritten where the guest ended
 * without the command's status; *quiet when the status is CMD's own (lkvm adds no closing
 * line to CMD's output). */
int run_cmd_end(struct kvm *kvm, int status, bool *quiet);
void run_cmd_free(struct run_cmd *rc);

#endif

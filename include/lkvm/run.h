/* The `run` command: option parsing (unit-tested) and the VM's life from setup to teardown. */
#ifndef LKVM_RUN_H
#define LKVM_RUN_H

#include <stdio.h>

#include "lkvm/kvm.h"
#include "lkvm/opt.h"

/* `lkvm run`'s options: what kvm_run_parse reads and kvm_run_usage prints. */
extern const struct opt_set run_opt_set;

/* Parse `lkvm run` arguments (argv[0] is "run"). Returns 0, 1 when help was asked for
 * (printed to `out`), or -EINVAL with a one-line message in err. */
int kvm_run_parse(int argc, char **argv, struct kvm_config *cfg, FILE *out, char *err,
		  size_t errlen) __must_check;
void kvm_run_usage(FILE *out);

/* Build the kernel command line: user params, lkvm's defaults, and the quirk params. */
int kvm_run_cmdline(const struct kvm_config *cfg, bool pvm_quirks, char *buf, size_t len) __must_check;

/* Register the machine's devices from kvm->cfg in kvm's device list (PCI bus, UART,
 * i8042, RTC, pvpanic, each -n NIC; NET_MODE_FAKE NICs get fake backends, for tests);
 * kvm_devs_init then builds them and kvm_destroy removes them. 0 or -errno. */
int kvm_run_add_devices(struct kvm *kvm, char *err, size_t errlen) __must_check;

/* Run a VM to its end; returns the process exit status (EXIT_*). */
int kvm_cmd_run(int argc, char **argv);

#endif

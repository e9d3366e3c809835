/* The `run` command: its options and configuration (builtin/run.c), the machine it builds and tears down (machine.c). */
#ifndef LKVM_RUN_H
#define LKVM_RUN_H

#include <stdio.h>

#include "lkvm/kvm.h"
#include "lkvm/opt.h"
#include "lkvm/run-cmd.h"
#include "lkvm/term.h"

/* `lkvm run`'s options: what kvm_run_parse reads and kvm_run_usage prints. */
extern const struct opt_set run_opt_set;

/* What `lkvm run`'s options fill (the base of run_opt_set): the VM's configuration, and beside
 * it the options of -- CMD, which the machine never sees (run-cmd.h). */
struct run_args {
	struct kvm_config cfg;
	struct run_cmd_opts cmd;
	const char *status_file; /* --status-file FILE (run-status.h), any run */
};

/* --restore's snapshot and the merged argv, owned by lkvm run until it ends. */
struct restore_args {
	struct snap_reader *snap;
	char **argv, **saved, **made; /* made: the -n and -d values with the saved shape */
	int argc, nsaved, nmade;
};

/* Parse `lkvm run` arguments (argv[0] is "run"). Returns 0, 1 when help was asked for
 * (printed to `out`), or -EINVAL with a one-line message in err. After 0 the caller owns the
 * -n and -d arrays: kvm_config_free(&a->cfg) (once the VM that copied it is gone). */
int kvm_run_parse(int argc, char **argv, struct run_args *a, FILE *out, char *err,
		  size_t errlen) __must_check;
void kvm_config_free(struct kvm_config *cfg);
void kvm_run_usage(FILE *out);

/* Always on the guest command line (before the user's -p, so the user can override). */
#define BASE_KERNEL_PARAMS \
	"console=ttyS0 earlyprintk=serial,ttyS0,115200 reboot=k pci=conf1 i8042.noaux"

struct snap_reader;

/* Everything the run owns, so one function can undo whatever part was built. */
struct run_state {
	struct kvm kvm;
	struct term term;
	bool kvm_up, term_up;
	/* -- CMD / host-root mode, --console-log (NULL: neither): builtin/run.c's, which frees it
	 * after kvm_run_teardown (the kernel's log may be its descriptor). */
	struct run_cmd *cmd;
	u8 *kernel, *initrd, *dtb; /* initrd: -i's file, or -- CMD's initramfs handed over */
	size_t kernel_len, initrd_len, dtb_len;
	/* --restore FILE: the snapshot, opened and checked before the VM is built (its options
	 * are the machine's); the set-up restores from it instead of loading a kernel, then
	 * closes it (guest RAM stays mapped from the file). */
	struct snap_reader *snap;
};

/* The machine (machine.c): the files loaded, the VM made with the devices kvm->cfg asks for, the
 * guest loaded and its vCPUs made, ready to start. 0 or -errno with err; kvm_run_teardown then
 * undoes whatever part was built (also after a success, once the run ended). */
int kvm_run_setup(struct run_state *st, const struct kvm_config *cfg, char *err,
		  size_t errlen) __must_check;
void kvm_run_teardown(struct run_state *st);

/* Build the kernel command line: user params, lkvm's defaults, and the quirk params. */
int kvm_run_cmdline(const struct kvm_config *cfg, bool pvm_quirks, char *buf,
		    size_t len) __must_check;

/* Register the machine's devices from kvm->cfg in kvm's device list (PCI bus, UART,
 * i8042, RTC, pvpanic, each -n NIC; NET_MODE_FAKE NICs get fake backends, for tests);
 * kvm_devs_init then builds them and kvm_destroy removes them. 0 or -errno. */
int kvm_run_add_devices(struct kvm *kvm, char *err, size_t errlen) __must_check;

/* --restore's FILE in a run's argv (options only), or NULL. */
const char *run_restore_path(int argc, char **argv);
/* lkvm run --restore (builtin/run-restore.c): argv merged with the machine's options of the
 * snapshot ra->snap into ra->argv/argc (words pointing into argv and into ra's; the host's
 * resources from argv only, with the saved NICs' and disks' shape added). 0, or -errno with a
 * one-line reason (a resource the snapshot's machine has and argv does not give names the
 * option). run_restore_free frees what it made, also after a failure. */
int run_restore_args(int argc, char **argv, struct restore_args *ra, char *err,
		     size_t errlen) __must_check;
void run_restore_free(struct restore_args *ra);

/* Run a VM to its end; returns the process exit status (EXIT_*). */
int kvm_cmd_run(int argc, char **argv);

#endif

/* The VM's configuration: what `lkvm run`'s options ask of the machine, and no command's own options. */
#ifndef LKVM_KVM_CONFIG_H
#define LKVM_KVM_CONFIG_H

#include "lkvm/failon.h"
#include "lkvm/util.h"
#include "lkvm/virtio-trans.h"

enum quirks_mode { QUIRKS_AUTO, QUIRKS_PVM, QUIRKS_NONE };
/* --fs: which device serves each shared directory (the host root and --share's). auto: both,
 * init mounts virtio-fs where the kernel has it, else 9p (on virtio-mmio only where the bus
 * has room: builtin/run.c's share_fs_decide). */
enum fs_mode { FS_AUTO, FS_9P, FS_VIRTIOFS };

struct net_opts;
struct blk_opts;
struct p9_shares;

/*
 * Host-root mode (`lkvm run -- CMD`, or `lkvm run` alone; builtin/run-cmd.c decides it and the
 * console modes): the machine adds lkvm's exit port, the host's / over virtio-9p/-fs and the
 * command's consoles and stdin (host-root.c). All false: the plain machine.
 */
struct host_root_cfg {
	bool on;
	bool tty;	   /* stdin and stdout are terminals: hvc0 is CMD's terminal */
	bool stdin_framed; /* not tty: stdin goes framed to init (initcfg.h), the host's
			    * terminal, if any, is left as it is (term.c reads nothing) */
	bool stderr_own;   /* CMD's stderr has its own port (lkvm.stderr): not a tty, or
			    * lkvm's stderr is not that terminal */
	bool full_log;	   /* --console-log FILE: the whole kernel log, whatever its levels */
	/* The root's devices as for a share (p9_share's no_9p, vfs) and its virtio-fs cache
	 * mode (--cache; enum fuse_cache, default always: the host's files as CMD starts). */
	bool no_9p, vfs;
	int cache;
};

struct kvm_config {
	const char *kernel_path;
	const char *initrd_path;
	const char *cmdline; /* user's -p, may be NULL */
	const char *name;
	const char *exit_on; /* --exit-on TEXT: end with 0 when the console prints TEXT */
	/* --fail-on PATTERN|default, as given (term.c expands them), and --fail-on-finish: a
	 * kernel-bug line on the console ends the run with EXIT_FAIL_ON, or only sets it. */
	const char *fail_on[FAILON_MAX];
	int nr_fail_on;
	bool fail_on_finish;
	u64 ram_mib;
	int nr_cpus;
	int timeout_s; /* 0: none */
	enum quirks_mode quirks;
	bool console_serial; /* the 8250 UART is always there (earlyprintk, ttyS0) */
	bool console_virtio; /* --console virtio: hvc0 is the console and takes the input */
	bool rng;	     /* --rng: a virtio-rng device */
	bool debug;
	bool no_ioeventfd;		/* --no-ioeventfd: every virtio notify is a trapped exit */
	enum virtio_trans virtio_trans; /* --virtio-transport: for devices without trans= */
	const char *dump_dtb;		/* --dump-dtb FILE */
	enum { STATS_OFF, STATS_TABLE, STATS_JSON } stats;
	/* -n and -d, once per NIC and disk: arrays kvm_run_parse allocates (kvm_config_free), in
	 * whose options (net.h, virtio-blk.h) struct kvm takes no interest: the devices copy them
	 * into the device list. */
	int nr_nets;
	struct net_opts *net;
	int nr_disks;
	struct blk_opts *disk;
	/* --share, up to VIRTIO_9P_MAX_SHARES (virtio-9p.h): allocated with the first one, like
	 * the arrays above; NULL when there is none. */
	struct p9_shares *shares;
	enum fs_mode fs;  /* --fs */
	bool sandbox;	  /* --sandbox=on (default): drop capabilities, seccomp per thread */
	const char *user; /* --user USER: switch to it after set-up, or NULL */
	struct host_root_cfg host_root;
	/* --gdb ADDR (-s: 127.0.0.1:1234): the gdb server's address, or NULL; --gdb-wait: the
	 * vCPUs wait for gdb before the first guest instruction. */
	const char *gdb_addr;
	bool gdb_default; /* -s given (kvm_run_parse turns it into gdb_addr) */
	bool gdb_wait;
	const char *restore_path; /* --restore FILE (builtin/run-restore.c) */
	/* The options after "run" as parsed (with --restore: merged with the snapshot's), kept
	 * in a snapshot of this VM so that a restore builds the same machine. */
	char **argv;
	int argc;
};

#endif

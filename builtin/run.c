/* `lkvm run`: its options (one table, opt.c) and the run: the machine built (machine.c), started, waited for to its end, torn down. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "lkvm/ctl.h"
#include "lkvm/gdb-target.h"
#include "lkvm/host-root.h"
#include "lkvm/kvm-cpu.h"
#include "lkvm/kvm.h"
#include "lkvm/net.h"
#include "lkvm/opt.h"
#include "lkvm/run.h"
#include "lkvm/snap.h"
#include "lkvm/run-cmd.h"
#include "lkvm/run-status.h"
#include "lkvm/sandbox.h"
#include "lkvm/stats.h"
#include "lkvm/stats-fmt.h"
#include "lkvm/term.h"
#include "lkvm/dev.h"
#include "lkvm/virtio-9p.h"
#include "lkvm/virtio-blk.h"
#include "lkvm/virtio-mmio.h"
#include "lkvm/x86.h"

#define DEFAULT_RAM_MIB 256
#define MAX_RAM_MIB (1024ULL * 1024) /* 1 TiB */
#define MAX_TIMEOUT_S (7 * 24 * 3600)
#define MAX_NETS 4
#define STR_(x) #x
#define STR(x) STR_(x) /* a number in the help text */

static int parse_mem(const char *s, u64 *mib)
{
	char buf[32];
	size_t n = strlen(s);
	unsigned long long mult = 1, v;

	if (n == 0 || n >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, n + 1);
	if (buf[n - 1] == 'G' || buf[n - 1] == 'g') {
		mult = 1024;
		buf[n - 1] = 0;
	} else if (buf[n - 1] == 'M' || buf[n - 1] == 'm') {
		buf[n - 1] = 0;
	}
	if (opt_uint(buf, 1, MAX_RAM_MIB, &v) || v * mult > MAX_RAM_MIB)
		return -EINVAL;
	*mib = v * mult;
	return 0;
}

/* ---- the options' own parsers (OPT_FN), each wording its errors ---- */

static int opt_mem(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct kvm_config *cfg = &((struct run_args *)base)->cfg;

	if (parse_mem(v, &cfg->ram_mib) == 0)
		return 0;
	errfmt(err, errlen, "--%s '%s': give the size in MiB (1 to %llu), e.g. -m 256 or -m 2G",
	       o->name, v, (unsigned long long)MAX_RAM_MIB);
	return -EINVAL;
}

static int opt_name(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct kvm_config *cfg = &((struct run_args *)base)->cfg;

	if (!ctl_name_valid(v)) {
		errfmt(err, errlen,
		       "--name '%s': give 1 to 64 of A-Z a-z 0-9 . _ - (not starting with . or -)",
		       v);
		return -EINVAL;
	}
	cfg->name = v;
	return 0;
}

static int opt_net(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct kvm_config *cfg = &((struct run_args *)base)->cfg;

	if (cfg->nr_nets >= MAX_NETS) {
		errfmt(err, errlen, "-n: at most %d network devices", MAX_NETS);
		return -EINVAL;
	}
	if (!cfg->net && !(cfg->net = calloc(MAX_NETS, sizeof(*cfg->net)))) {
		errfmt(err, errlen, "-n: out of memory");
		return -ENOMEM;
	}
	if (net_parse_opts(v, &cfg->net[cfg->nr_nets], err, errlen) < 0)
		return -EINVAL;
	cfg->nr_nets++;
	return 0;
}

static int opt_disk(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct kvm_config *cfg = &((struct run_args *)base)->cfg;

	if (cfg->nr_disks >= VIRTIO_BLK_MAX_DISKS) {
		errfmt(err, errlen, "-d: at most %d disks", VIRTIO_BLK_MAX_DISKS);
		return -EINVAL;
	}
	if (!cfg->disk && !(cfg->disk = calloc(VIRTIO_BLK_MAX_DISKS, sizeof(*cfg->disk)))) {
		errfmt(err, errlen, "-d: out of memory");
		return -ENOMEM;
	}
	if (blk_parse_opts(v, &cfg->disk[cfg->nr_disks], err, errlen) < 0)
		return -EINVAL;
	cfg->nr_disks++;
	return 0;
}

static int opt_share(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct kvm_config *cfg = &((struct run_args *)base)->cfg;

	if (!cfg->shares && !(cfg->shares = calloc(1, sizeof(*cfg->shares)))) {
		errfmt(err, errlen, "--share: out of memory");
		return -ENOMEM;
	}
	return p9_share_parse(cfg->shares, v, err, errlen);
}

/* --rwdir DIR (vng's): --share DIR, read-write at the same path; --share's own syntax
 * (GUESTDIR, options) is --share's. */
static int opt_rwdir(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	if (!*v || strpbrk(v, ",:")) {
		errfmt(err, errlen,
		       "--rwdir '%s': give a directory without ',' or ':' (--share HOSTDIR:GUESTDIR,OPTION takes those)",
		       v);
		return -EINVAL;
	}
	return opt_share(o, v, base, err, errlen);
}

/* --net user (vng's): -n mode=user; anything else is -n's OPTS. */
static int opt_net_alias(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	return opt_net(o, strcmp(v, "user") ? v : "mode=user", base, err, errlen);
}

/* --fail-on PATTERN|default, repeatable: checked by expanding all given so far (term.c does it
 * again for the run), so that a pattern too long or one too many is the option's error. */
_Static_assert(FAILON_MAX == 32, "--fail-on's help says 32");
static int opt_fail_on(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct kvm_config *cfg = &((struct run_args *)base)->cfg;
	struct failon f = { 0 };
	int ret = 0;

	for (int i = 0; ret == 0 && i < cfg->nr_fail_on; i++)
		ret = failon_add(&f, cfg->fail_on[i]);
	if (ret == 0 && cfg->nr_fail_on < FAILON_MAX)
		ret = failon_add(&f, v);
	else if (ret == 0)
		ret = -E2BIG;
	if (ret == -E2BIG)
		errfmt(err, errlen, "--fail-on '%.64s': more than %d patterns (default counts %d)",
		       v, FAILON_MAX, FAILON_DEFAULT_NR);
	else if (ret < 0)
		errfmt(err, errlen, "--fail-on '%.64s': give 1 to %d bytes of text, or default", v,
		       FAILON_PATTERN_MAX);
	else
		cfg->fail_on[cfg->nr_fail_on++] = v;
	return ret;
}

static int opt_stats(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct kvm_config *cfg = &((struct run_args *)base)->cfg;

	if (!v || !strcmp(v, "table"))
		cfg->stats = STATS_TABLE;
	else if (!strcmp(v, "json"))
		cfg->stats = STATS_JSON;
	else {
		errfmt(err, errlen, "--stats='%s': give --stats, --stats=table or --stats=json", v);
		return -EINVAL;
	}
	return 0;
}

static const struct opt_choice console_choices[] = { { "serial", false },
						     { "virtio", true },
						     { NULL, 0 } };
static const struct opt_choice quirks_choices[] = {
	{ "auto", QUIRKS_AUTO },
	{ "pvm", QUIRKS_PVM },
	{ "none", QUIRKS_NONE },
	{ NULL, 0 },
};
static const struct opt_choice fs_choices[] = {
	{ "auto", FS_AUTO },
	{ "9p", FS_9P },
	{ "virtiofs", FS_VIRTIOFS },
	{ NULL, 0 },
};
static const struct opt_choice on_off[] = { { "on", true }, { "off", false }, { NULL, 0 } };

#define CFG(member) OPT_AT(struct run_args, cfg.member)

static const struct opt run_opts[] = {
	{ "kernel", 'k', OPT_STR, CFG(kernel_path), .arg = "FILE",
	  .help = "kernel to boot (required without -- CMD)", .host = true },
	{ "initrd", 'i', OPT_STR, CFG(initrd_path), .arg = "FILE", .help = "initial ramdisk",
	  .host = true },
	{ "params", 'p', OPT_STR, CFG(cmdline), .arg = "TEXT",
	  .help = "kernel command line, appended to lkvm's defaults\n(\"" BASE_KERNEL_PARAMS
		  "\")" },
	{ "mem", 'm', OPT_FN, .fn = opt_mem, .arg = "MIB",
	  .help = "guest RAM in MiB, or with a G suffix in GiB (default " STR(DEFAULT_RAM_MIB) ")" },
	{ "cpus", 'c', OPT_UINT, CFG(nr_cpus), .min = 1, .max = LKVM_MAX_CPUS,
	  .bad = "give a number of vCPUs from",
	  .help = "number of vCPUs, 1 to " STR(LKVM_MAX_CPUS) " (default 1)" },
	{ "name", 0, OPT_FN, .fn = opt_name, .arg = "NAME",
	  .help = "this VM's name for lkvm list/stop/pause/resume/stat/debug\n"
		  "(1-64 of A-Z a-z 0-9 . _ -; default guest-PID, printed at start);\n"
		  "a second VM of the same name exits with 1",
	  .process = true },
	{ "console", 0, OPT_CHOICE, CFG(console_virtio), .choices = console_choices,
	  .help = "the console: the 8250 UART (ttyS0, default), or\n"
		  "virtio-console (hvc0: console=hvc0 is added, terminal\n"
		  "input goes there; the UART stays for early messages)" },
	{ "rng", 0, OPT_FLAG, CFG(rng), .help = "a virtio-rng device fed from getrandom(2)" },
	{ "timeout", 0, OPT_UINT, CFG(timeout_s), .min = 1, .max = MAX_TIMEOUT_S, .arg = "SECS",
	  .bad = "give whole seconds from",
	  .help = "stop the guest after SECS seconds and exit with 124", .process = true },
	{ "exit-on", 0, OPT_STR, CFG(exit_on), .arg = "TEXT", .bad = "the text must not be empty",
	  .help = "exit with 0 as soon as the console prints TEXT", .process = true },
	{ "fail-on", 0, OPT_FN, .fn = opt_fail_on, .arg = "PATTERN",
	  .help = "exit with 5 as soon as a console line contains PATTERN\n"
		  "(repeatable, up to 32 patterns); default: the kernel's bug\n"
		  "reports, BUG:, WARNING:, KASAN:, KFENCE:, UBSAN:, Oops:,\n"
		  "soft lockup, blocked for more than (hung task), Kernel panic\n"
		  "(unless pvpanic reports it: 2); with -- CMD the kernel then\n"
		  "logs warnings too (loglevel=5: each console byte costs the\n"
		  "UART's exits)",
	  .process = true },
	{ "fail-on-finish", 0, OPT_FLAG, CFG(fail_on_finish),
	  .help = "with --fail-on: the run goes on to its end, then exits with 5\n"
		  "if a line matched (unless it ended by panic, stop or signal)",
	  .process = true },
	{ "quirks", 0, OPT_CHOICE, CFG(quirks), .choices = quirks_choices, .arg = "MODE",
	  .help = "auto (default): complete what the host cannot emulate\n"
		  "when /sys/module/kvm_pvm exists; pvm: always; none: never" },
	{ "network", 'n', OPT_FN, .fn = opt_net, .arg = "OPTS", .keys = &net_opt_set,
	  .help = "a virtio-net NIC (up to " STR(MAX_NETS) "), OPTS as in kvmtool: KEY=VALUE,...",
	  .host = true },
	{ "disk", 'd', OPT_FN, .fn = opt_disk, .arg = "PATH[,OPTION...]", .keys = &blk_opt_set,
	  .help = "a virtio-blk disk on a raw image (up to " STR(
		  VIRTIO_BLK_MAX_DISKS) "), OPTION one of:",
	  .host = true },
	{ "share", 0, OPT_FN, .fn = opt_share, .arg = "HOSTDIR[:GUESTDIR][,OPTION...]",
	  .keys = &p9_share_opt_set,
	  .help = "a host directory over virtio-9p and virtio-fs (--fs; up to " STR(
		  VIRTIO_9P_MAX_SHARES) "),\n"
					"read-write unless ro; mount tags lkvm-share0, lkvm-share1, ... (9p)\n"
					"and lkvm-fs0, lkvm-fs1, ... (virtio-fs) in order; lkvm's init mounts\n"
					"it at GUESTDIR (default: HOSTDIR's absolute path); OPTION one of:",
	  .host = true },
	{ "fs", 0, OPT_CHOICE, CFG(fs), .choices = fs_choices, .arg = "MODE",
	  .help = "the shares' and the host root's file system: auto (default):\n"
		  "both devices, init mounts virtio-fs where the kernel has it,\n"
		  "else 9p (virtio-mmio: virtio-fs only where the bus has room,\n"
		  "the host root first); 9p or virtiofs: that one only" },
	{ "cache", 0, OPT_CHOICE, CFG(host_root.cache), .choices = fuse_cache_choices,
	  .arg = "MODE",
	  .help = "with -- CMD: the host root's virtio-fs caching (virtiofsd's\n"
		  "--cache): always (default: the host's files as CMD starts),\n"
		  "auto (host changes seen), none (never cached)" },
	{ "no-ioeventfd", 0, OPT_FLAG, CFG(no_ioeventfd),
	  .help = "every virtio notify traps to the vCPU thread (for comparison)" },
	{ "virtio-transport", 0, OPT_CHOICE, CFG(virtio_trans), .choices = virtio_trans_choices,
	  .help = "transport of virtio devices without trans=\n"
		  "(default pci; mmio devices are announced to Linux with\n"
		  "virtio_mmio.device= on its command line and in the DTB)" },
	{ "dump-dtb", 0, OPT_STR, CFG(dump_dtb), .arg = "FILE", .bad = "give a file name",
	  .help = "write the machine's flattened device tree to FILE (also\n"
		  "given to a bzImage guest as setup_data SETUP_DTB)",
	  .process = true },
	{ "stats", 0, OPT_FN, .optional = true, .fn = opt_stats, .arg = "table|json",
	  .help = "print exit and per-queue counters (kicks, trapped,\n"
		  "irqs, packets, drops; polls, poll_hits, poll_us for\n"
		  "tx=poll; each disk's requests, bytes, errors) to stderr\n"
		  "at the end, and on SIGUSR2",
	  .process = true },
	{ "sandbox", 0, OPT_CHOICE, CFG(sandbox), .choices = on_off,
	  .help = "on (default): once set up, drop every capability and confine\n"
		  "each thread kind to its system calls (seccomp); a forbidden\n"
		  "call stops lkvm with 159 and names the thread",
	  .process = true },
	{ "user", 0, OPT_STR, CFG(user), .max = 64, .arg = "USER",
	  .bad = "give a user name or uid (1 to 64 characters)",
	  .help = "after set-up run as USER (a name or a uid), without\n"
		  "supplementary groups; with -- CMD run as root the default\n"
		  "is sudo's user (SUDO_UID) with its groups, else nobody\n"
		  "(--user root serves root's files); with -- CMD the command\n"
		  "runs as that user in the guest too (else as lkvm's own)",
	  .process = true },
	{ "console-log", 0, OPT_STR, OPT_AT(struct run_args, cmd.console_log), .arg = "FILE",
	  .bad = "give a file name",
	  .help = "the serial console (the kernel's log) to FILE; with -- CMD\n"
		  "the whole log (ignore_loglevel, not quiet), which goes\n"
		  "nowhere without this, to stderr with --debug",
	  .process = true },
	{ "status-file", 0, OPT_STR, OPT_AT(struct run_args, status_file), .arg = "FILE",
	  .bad = "give a file name",
	  .help = "at the end write how the run ended to FILE, key=value lines:\n"
		  "ended=command|init|panic|timeout|error|stop|signal|reboot|\n"
		  "poweroff|exit-on|quit|closed|sandbox|assert|fail-on,\n"
		  "command_status=N (CMD's own), status=N (lkvm's exit status),\n"
		  "fail_on=LINE (the first --fail-on match), ... (docs/run.md)",
	  .process = true },
	{ "modules", 0, OPT_STR, OPT_AT(struct run_args, cmd.modules), .arg = "DIR",
	  .bad = "give a directory",
	  .help = "with -- CMD: the kernel's modules from DIR (a lib/modules/RELEASE\n"
		  "directory); default: its build tree, else <root>/lib/modules/RELEASE\n"
		  "beside <root>/boot/KERNEL, else /lib/modules/RELEASE",
	  .host = true },
	{ "gdb", 0, OPT_STR, CFG(gdb_addr), .arg = "ADDR",
	  .bad = "give PORT, HOST:PORT or unix:PATH",
	  .help = "serve gdb's remote protocol on ADDR; gdb: target remote ADDR.\n"
		  "unix:PATH (recommended): a socket only you may open (0600);\n"
		  "PORT: 127.0.0.1:PORT, where every local user can connect and\n"
		  "read and write the guest; HOST:PORT: anyone who reaches it can",
	  .process = true },
	{ "gdb-default", 's', OPT_FLAG, CFG(gdb_default),
	  .help = "--gdb 1234 (127.0.0.1:1234: open to every local user),\nas QEMU's -s",
	  .process = true },
	{ "gdb-wait", 0, OPT_FLAG, CFG(gdb_wait),
	  .help = "with --gdb: no guest instruction runs until gdb continues\n(QEMU's -S)",
	  .process = true },
	{ "restore", 0, OPT_STR, CFG(restore_path), .arg = "FILE", .bad = "give a snapshot file",
	  .process = true,
	  .help = "start from a snapshot (lkvm snapshot) instead of booting:\n"
		  "the machine is the saved one's (-m, -c, --console, ...; those\n"
		  "given here replace them), the guest goes on where it was;\n"
		  "each disk, NIC and share, and -- for a -- CMD run, is given\n"
		  "here again (-d IMG, -n OPTS, --share DIR): none is taken\n"
		  "from the file (docs/snapshot.md)" },
	{ "debug", 0, OPT_FLAG, CFG(debug), .help = "more log lines, and the start-up profile",
	  .process = true },
	{ "root", 0, OPT_FLAG, OPT_AT(struct run_args, cmd.root),
	  .help = "with -- CMD: the command runs as root in the guest; by default\n"
		  "it runs as the user whose credentials serve the files (--user)" },
	/* virtme-ng's spellings, where they mean what lkvm's options do. */
	{ "memory", 0, OPT_FN, .fn = opt_mem, .arg = "MIB", .help = "= --mem (vng's spelling)" },
	{ "append", 0, OPT_STR, CFG(cmdline), .arg = "TEXT", .help = "= --params" },
	{ "exec", 0, OPT_FN, .fn = run_cmd_exec, .arg = "CMD", .help = "= -- sh -c CMD",
	  .host = true },
	{ "rwdir", 0, OPT_FN, .fn = opt_rwdir, .arg = "DIR",
	  .help = "= --share DIR (read-write, at the same path)", .host = true },
	{ "net", 0, OPT_FN, .fn = opt_net_alias, .arg = "user|OPTS",
	  .help = "user: = -n mode=user; OPTS: = -n OPTS", .host = true },
	{ "verbose", 'v', OPT_FLAG, CFG(debug),
	  .help = "= --debug (with -- CMD: the kernel's log on stderr)", .process = true },
	{ "rw", 0, OPT_FLAG, OPT_AT(struct run_args, cmd.rw),
	  .help = "refused: the guest's writes to / stay in its overlay\n(give --share DIR or --rwdir DIR)" },
	{ "help", 'h', OPT_HELP, .help = "this text", .process = true },
	{ .kind = OPT_END },
};

const struct opt_set run_opt_set = {
	.opts = run_opts,
	.prefix = "--",
	.verb = "give",
	.unknown = { "unknown option '", "' (see lkvm run --help)" },
	.needs_value = { "option '", "' needs a value" },
	.unexpected = { "unexpected argument '", "' (see lkvm run --help)" },
	.usage = kvm_run_usage,
	.in_order = true, /* `--` comes before CMD, whose words are its own */
	.trailing = run_cmd_trailing,
	.help_col = 24,
	.short_col = true,
};

void kvm_run_usage(FILE *out)
{
	fprintf(out,
		"usage: lkvm run -k KERNEL [options]\n"
		"       lkvm run [options] [-- [CMD [ARG...]]]\n"
		"\n"
		"Boot a Linux kernel (bzImage, or an ELF vmlinux with a PVH note) with a serial console.\n"
		"With -- CMD (or with none of -k, -i, -d): run CMD (nothing after --: $SHELL, else\n"
		"/bin/sh) in the kernel on the host's files: / over virtio-fs or virtio-9p (--fs),\n"
		"read-only, under a tmpfs the command writes to, in the current directory, as the\n"
		"user whose credentials serve the files (--root: as root), with the user's environment;\n"
		"CMD's stdout and stderr are lkvm's, stdin is forwarded, lkvm exits with CMD's status.\n"
		"Without -k the kernel is ./bzImage, ./arch/x86/boot/bzImage,\n"
		"../../arch/x86/boot/bzImage or /boot/vmlinuz-$(uname -r), the first there; a modular\n"
		"kernel's virtio, virtiofs, 9p and overlay modules come from its tree, <root>/lib/modules\n"
		"beside <root>/boot/KERNEL or /lib/modules (--modules DIR: from DIR).\n"
		"\n");
	opt_usage(out, &run_opt_set);
	fprintf(out,
		"\n"
		"Console: Ctrl-a x quits, Ctrl-a a sends Ctrl-a.\n"
		"Control socket: $LKVM_RUNTIME_DIR, else /run/lkvm (root), else $XDG_RUNTIME_DIR/lkvm,\n"
		"else /tmp/lkvm-UID; NAME.sock in it (see lkvm help).\n"
		"Exit status: 0 guest powered off (through ACPI: a kernel without CONFIG_ACPI only\n"
		"halts) or rebooted (or --exit-on matched), 1 error,\n"
		"2 guest panic (pvpanic), 3 stopped by lkvm stop, 5 a --fail-on line,\n"
		"124 --timeout expired,\n"
		"128+N stopped by signal N (159: the sandbox stopped a forbidden system call).\n"
		"With -- CMD: CMD's own status (0-255; 128+N when a signal N killed it), or 2, 124,\n"
		"1, 128+N as above, and 125 when the guest ended without CMD's status (init could\n"
		"not run it, e.g. the kernel cannot mount the 9p root: the error says what it lacks;\n"
		"a reset before CMD ended), 141 when lkvm's stdout or stderr closed; 0 also when\n"
		"the guest powered off before CMD ended (lkvm run --root -- poweroff -f: through\n"
		"ACPI, or a kernel without it halts, which ends the run the same way; CMD must be\n"
		"root in the guest: as root without sudo or --root, CMD runs as nobody).\n");
}

/* A device's transport: its own trans= or else --virtio-transport. */
static enum virtio_trans trans_of(const struct kvm_config *cfg, bool set, enum virtio_trans trans)
{
	return set ? trans : cfg->virtio_trans;
}

/* The virtio-mmio devices the options ask for (checked here: the IRQs run out at set-up). */
static int count_mmio(const struct kvm_config *cfg)
{
	int n = 0;

	for (int i = 0; i < cfg->nr_nets; i++)
		n += cfg->net[i].mode != NET_MODE_NONE &&
		     trans_of(cfg, cfg->net[i].trans_set, cfg->net[i].trans) == VIRTIO_TRANS_MMIO;
	for (int i = 0; i < cfg->nr_disks; i++)
		n += trans_of(cfg, cfg->disk[i].trans_set, cfg->disk[i].trans) == VIRTIO_TRANS_MMIO;
	if (cfg->virtio_trans == VIRTIO_TRANS_MMIO)
		n += cfg->console_virtio + cfg->rng;
	n += p9_shares_on(cfg->shares, cfg->virtio_trans, VIRTIO_TRANS_MMIO);
	n += host_root_mmio_devices(cfg);
	return n;
}

/*
 * --fs into each share's and the root's devices. auto offers virtio-fs beside 9p (init mounts
 * the one the kernel has); on virtio-mmio, whose 9 slots 8 shares and the root already fill
 * with 9p alone, only while a slot is free: the host root first (its files are what every
 * command reads), then the shares in order. A share without virtio-fs there keeps 9p.
 */
static void share_fs_decide(struct kvm_config *cfg)
{
	bool only = cfg->fs == FS_VIRTIOFS;
	struct host_root_cfg *hr = &cfg->host_root;
	int room;

	if (cfg->fs == FS_9P)
		return;
	room = VIRTIO_MMIO_MAX_DEVS - count_mmio(cfg);
	if (hr->on && (only || cfg->virtio_trans != VIRTIO_TRANS_MMIO || room-- > 0)) {
		hr->vfs = true;
		hr->no_9p = only;
	}
	for (int i = 0; cfg->shares && i < cfg->shares->nr; i++) {
		struct p9_share *sh = &cfg->shares->share[i];
		bool mmio = trans_of(cfg, sh->trans_set, sh->trans) == VIRTIO_TRANS_MMIO;

		if (only || !mmio || room-- > 0) {
			sh->vfs = true;
			sh->no_9p = only;
		}
	}
}

int kvm_run_parse(int argc, char **argv, struct run_args *a, FILE *out, char *err, size_t errlen)
{
	struct kvm_config *cfg = &a->cfg;
	int ret;

	memset(a, 0, sizeof(*a));
	cfg->ram_mib = DEFAULT_RAM_MIB;
	cfg->nr_cpus = 1;
	cfg->quirks = QUIRKS_AUTO;
	cfg->console_serial = true;
	cfg->sandbox = true;
	cfg->host_root.cache = FUSE_CACHE_ALWAYS;

	ret = opt_parse_argv(&run_opt_set, argc, argv, a, out, err, errlen);
	if (!ret && run_cmd_check(cfg, &a->cmd, err, errlen) < 0)
		ret = -EINVAL;
	if (!ret)
		share_fs_decide(cfg);
	if (!ret && !cfg->kernel_path && !cfg->host_root.on && !cfg->restore_path) {
		errfmt(err, errlen, "no kernel given: use -k KERNEL (see lkvm run --help)");
		ret = -EINVAL;
	}
	if (!ret && cfg->gdb_default && !cfg->gdb_addr)
		cfg->gdb_addr = "127.0.0.1:1234";
	if (!ret && cfg->gdb_wait && !cfg->gdb_addr) {
		errfmt(err, errlen, "--gdb-wait needs --gdb ADDR (or -s)");
		ret = -EINVAL;
	}
	if (!ret && count_mmio(cfg) > VIRTIO_MMIO_MAX_DEVS) {
		errfmt(err, errlen,
		       "%d virtio-mmio devices asked for: at most %d (each needs one of the free ISA IRQs)",
		       count_mmio(cfg), VIRTIO_MMIO_MAX_DEVS);
		ret = -EINVAL;
	}
	if (ret)
		kvm_config_free(cfg); /* the caller owns the arrays of a configuration it got */
	return ret;
}

void kvm_config_free(struct kvm_config *cfg)
{
	free(cfg->net);
	free(cfg->disk);
	free(cfg->shares);
	cfg->net = NULL;
	cfg->disk = NULL;
	cfg->shares = NULL;
	cfg->nr_nets = cfg->nr_disks = 0;
}

static void put_msg(void *arg, const char *name, u64 value)
{
	ctl_add_u64(arg, name, value);
}

/* Every counter (kvm_stats_collect, as lkvm stat gets them) to stderr, formatted as lkvm stat
 * does, in one write where memory allows: a snapshot taken while the guest prints (SIGUSR2)
 * is not cut into pieces by the console's output. */
static void print_stats(struct kvm *kvm)
{
	bool json = kvm->cfg.stats == STATS_JSON;
	struct ctl_kvs kvs = { 0 };
	struct ctl_msg m;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	ctl_msg_init(&m, CTL_STAT, 0);
	kvm_stats_collect(kvm, put_msg, &m);
	if (m.oom || ctl_kvs_decode(&m, &kvs) < 0) {
		pr_warn("--stats: out of memory");
		ctl_msg_free(&m);
		return;
	}
	ctl_msg_free(&m);
	f = open_memstream(&buf, &len);
	stats_print(f ? f : stderr, &kvs, NULL, 0, json);
	if (f && fclose(f) == 0)
		write_full(STDERR_FILENO, buf, len);
	else
		fflush(stderr);
	free(buf);
	ctl_kvs_free(&kvs);
}

/* lkvm's own footprint at the end (--debug): what --stats and lkvm stat show as memory.* */
static void report_memory(struct kvm *kvm)
{
	struct kvm_mem_usage u;

	if (kvm_mem_usage(kvm, &u) < 0)
		return;
	pr_debug("memory: RSS %llu KiB, guest RAM resident %llu KiB, lkvm itself %lld KiB (%lld "
		 "KiB of it its binary's and libraries' pages)",
		 (unsigned long long)u.rss_kib, (unsigned long long)u.guest_kib,
		 (long long)u.rss_kib - (long long)u.guest_kib, (long long)u.files_kib);
}

static void report_completions(struct kvm *kvm)
{
	char line[256];
	int n = 0;

	if (!kvm->pvm_quirks)
		return;
	for (int i = 0; i < EMU_NR; i++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "%s %s=%llu", i ? "," : "",
			      x86_emu_name(i), (unsigned long long)atomic_load(&kvm->emu_hits[i]));
	pr_debug("instructions completed for the host:%s", line);
}

/* Wait for a stop request, the timeout, or a signal. */
static void wait_for_end(struct kvm *kvm, int sig_fd)
{
	u64 deadline = kvm->cfg.timeout_s ? now_ns() + (u64)kvm->cfg.timeout_s * 1000000000ULL : 0;

	while (!atomic_load(&kvm->stopping)) {
		struct pollfd p[2] = {
			{ .fd = kvm->stop_fd, .events = POLLIN },
			{ .fd = sig_fd, .events = POLLIN },
		};
		int ms = -1;

		if (deadline) {
			u64 now = now_ns();

			if (now >= deadline) {
				kvm_request_exit(kvm, EXIT_TIMEOUT, "timeout: %d s passed",
						 kvm->cfg.timeout_s);
				break;
			}
			ms = (int)MIN((deadline - now + 999999) / 1000000, (u64)INT_MAX);
		}
		if (poll(p, sig_fd >= 0 ? 2 : 1, ms) < 0 && errno != EINTR)
			break;
		if (sig_fd >= 0 && (p[1].revents & POLLIN)) {
			struct signalfd_siginfo si;

			if (read(sig_fd, &si, sizeof(si)) != sizeof(si))
				continue;
			/* SIGUSR2: a snapshot of the counters, for benchmarks that diff two. */
			if (si.ssi_signo == SIGUSR2) {
				if (kvm->cfg.stats != STATS_OFF)
					print_stats(kvm);
				continue;
			}
			/* The shell's convention, so a stop by signal is never taken for success. */
			kvm_request_end(kvm, KVM_END_SIGNAL, 128 + (int)si.ssi_signo,
					"stopped by signal %u (%s)", si.ssi_signo,
					strsignal((int)si.ssi_signo));
		}
	}
}

/* Termination signals become an orderly stop: block them in every thread and read them from a
 * signalfd in the main loop (SIGUSR2: a counter snapshot). Returns the signalfd or -1. */
static int block_signals(void)
{
	sigset_t sigs;

	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	return signalfd(-1, &sigs, SFD_CLOEXEC);
}

/* The control socket, named first: a second VM of the same name stops before it builds
 * anything. 0 (*ctl NULL when the VM runs without one) or -errno after the error. */
static int open_control(struct run_state *st, const struct kvm_config *cfg, char *name, size_t len,
			struct ctl_server **ctl)
{
	char err[512] = "";
	int ret;

	snprintf(name, len, "%s", cfg->name ? cfg->name : "");
	if (!cfg->name)
		snprintf(name, len, "guest-%d", (int)getpid());
	ret = ctl_server_create(&st->kvm, name, geteuid(), ctl, err, sizeof(err));
	/* A name in use, or a runtime directory that is another user's (whose sockets would
	 * answer in this VM's place): no run. Anything else leaves the VM without control. */
	if (ret == -EADDRINUSE || ret == -EPERM) {
		pr_err("%s", err);
		return ret;
	}
	if (ret < 0)
		pr_warn("no control socket (lkvm list/stop/stat will not see this VM): %s", err);
	if (*ctl)
		pr_debug("control socket: %s", ctl_server_path(*ctl));
	return 0;
}

/* No capability left, and the user lkvm becomes: in -- CMD mode the one whose credentials
 * serve the host's files (run_cmd_user: also with --sandbox=off), else --user's. A failure
 * is the run's end, said once (the reason is lkvm's closing line). */
static int drop_privileges(struct run_state *st, const struct kvm_config *cfg)
{
	const struct sandbox_user *who = run_cmd_user(st->cmd);
	struct sandbox_user user;
	char err[512] = "";
	int ret = 0;

	if (!who && cfg->user) {
		ret = sandbox_user_resolve(cfg->user, &user, err, sizeof(err));
		who = &user;
	}
	if (ret == 0 && (cfg->sandbox || who))
		ret = sandbox_drop_privileges(who, err, sizeof(err));
	if (ret < 0)
		kvm_request_exit(&st->kvm, EXIT_LKVM_ERROR, "%s", err);
	st->kvm.sandbox = cfg->sandbox;
	return ret;
}

/* The built VM started: the terminal, privileges dropped, the vCPUs, the control thread, the
 * main thread's sandbox. A failure is the run's end (kvm_request_exit), said once. */
static void start(struct run_state *st, const struct kvm_config *cfg, struct ctl_server *ctl)
{
	char err[512] = "";
	int ret = term_init(&st->kvm, &st->term);

	if (ret == 0)
		st->term_up = true;
	run_cmd_term(st->cmd, &st->term);
	/* Everything is open: from here on no thread needs privileges, and each kind of
	 * thread confines itself to its system calls as it starts (sandbox.c). */
	st->kvm.statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	if (st->kvm.statm_fd >= 0 && sandbox_allow_fd(st->kvm.statm_fd) < 0) {
		close(st->kvm.statm_fd);
		st->kvm.statm_fd = -1;
	}
	if (ret == 0)
		ret = drop_privileges(st, cfg);
	if (ret == 0)
		ret = term_start(&st->term);
	/* The gdb server's thread: without capabilities, before a vCPU runs (--gdb-wait). */
	if (ret == 0 && (ret = gdb_vm_serve(&st->kvm, err, sizeof(err))) < 0)
		kvm_request_exit(&st->kvm, EXIT_LKVM_ERROR, "%s", err);
	kvm_mark(&st->kvm, "terminal, privileges, gdb");
	/* Device threads that only main may create (without capabilities by now). */
	if (ret == 0 && (ret = kvm_devs_start(&st->kvm, err, sizeof(err))) < 0)
		kvm_request_exit(&st->kvm, EXIT_LKVM_ERROR, "%s", err);
	kvm_mark(&st->kvm, "device threads");
	for (int i = 0; ret == 0 && i < st->kvm.nr_cpus; i++)
		ret = kvm_cpu_start(st->kvm.cpus[i]);
	kvm_mark(&st->kvm, "vCPU threads");
	if (ret == 0 && ctl && (ret = ctl_server_start(ctl)) < 0) {
		pr_warn("control socket: cannot start its thread: %s", strerror(-ret));
		ret = 0;
	}
	if (ret < 0 && !atomic_load(&st->kvm.stopping))
		kvm_request_exit(&st->kvm, EXIT_LKVM_ERROR, "cannot start: %s", strerror(-ret));
	if (ret == 0 && sandbox_enter(&st->kvm, SB_MAIN) < 0)
		kvm_request_exit(&st->kvm, EXIT_LKVM_ERROR,
				 "main thread: cannot enter the sandbox");
}

/* The run ended: the vCPUs and the control thread stopped, the reports, the closing line.
 * Returns the exit status. */
static int finish(struct run_state *st, const struct kvm_config *cfg, struct ctl_server *ctl)
{
	bool quiet; /* the status is CMD's: nothing of lkvm's after CMD's output */
	int status;

	kvm_cpu_stop_all(&st->kvm);
	/* No more requests: the VM is going away (a pause in progress gave up above). */
	ctl_server_stop(ctl);
	if (cfg->debug)
		report_memory(&st->kvm);
	if (cfg->stats != STATS_OFF)
		print_stats(&st->kvm);
	if (st->term_up)
		term_exit(&st->term);
	st->term_up = false;

	status = run_cmd_end(&st->kvm, atomic_load(&st->kvm.exit_status), &quiet);
	if (st->kvm.fail_on_line[0]) {
		int settled = term_fail_on_settle(&st->kvm, status);

		quiet &= settled == status; /* CMD's status is no longer lkvm's: say why */
		status = settled;
	}
	if (quiet)
		pr_debug("%s", st->kvm.exit_reason);
	else if (status == EXIT_GUEST_OK || status == EXIT_STOPPED)
		pr_info("%s%s%s", cfg->name ? cfg->name : "", cfg->name ? ": " : "",
			st->kvm.exit_reason);
	else
		pr_err("%s%s%s", cfg->name ? cfg->name : "", cfg->name ? ": " : "",
		       st->kvm.exit_reason);
	/* Only at a panic: a plain machine without a root is a real use until it panics. */
	if (status == EXIT_GUEST_PANIC && run_cmd_root_missing(cfg))
		pr_info("hint: no root given (no -i, -d or root=): \"lkvm run -k %s --\" gives a shell on the host's files",
			cfg->kernel_path);
	if (cfg->debug) {
		char prof[1024];

		kvm_startup_format(&st->kvm, prof, sizeof(prof));
		pr_debug("start-up, ms each step took after lkvm run started: %s", prof);
	}
	report_completions(&st->kvm);
	return status;
}

/* The run's state, with -- CMD prepared in it (the host checked, the kernel found, the
 * initramfs made and handed over: all before the VM). NULL after the error. */
static struct run_state *prepare(struct run_args *a)
{
	struct run_state *st = calloc(1, sizeof(*st)); /* large (struct kvm) */
	char err[512] = "";

	if (!st) {
		pr_err("out of memory");
		return NULL;
	}
	st->kvm.statm_fd = -1; /* kvm_create sets it again; until then nothing to close */
	/* --user looked up before anything is built (drop_privileges looks again, after): an
	 * unknown user is the run's one line, not its end after the VM's name. -- CMD's own
	 * look-up is run_cmd_prepare's. */
	if (a->cfg.user && !a->cfg.host_root.on &&
	    sandbox_user_resolve(a->cfg.user, &(struct sandbox_user){ 0 }, err, sizeof(err)) < 0) {
		pr_err("%s", err);
		free(st);
		return NULL;
	}
	if (run_cmd_prepare(&a->cfg, &a->cmd, &st->cmd, err, sizeof(err)) < 0) {
		pr_err("%s", err);
		free(st);
		return NULL;
	}
	if (st->cmd)
		run_cmd_take_initrd(st->cmd, &st->initrd, &st->initrd_len);
	return st;
}

/* --gdb: the target on the built VM and the server on its address, before any vCPU runs (with
 * --gdb-wait they are held). 0, or -errno after the one error line. */
static int start_gdb(struct run_state *st, const struct kvm_config *cfg, struct gdb_server **srv)
{
	struct kvm *kvm = &st->kvm;
	struct gdb_vm *g;
	char err[512] = "";
	int ret = gdb_vm_supported(kvm, err, sizeof(err));

	if (ret < 0) {
		pr_err("--gdb: %s", err);
		return ret;
	}
	ret = gdb_vm_create(kvm, cfg->gdb_wait, &g);
	if (ret == 0)
		ret = gdb_server_listen(cfg->gdb_addr, &gdb_vm_ops, g, srv, err, sizeof(err));
	if (ret < 0) {
		pr_err("--gdb %s: %s", cfg->gdb_addr, err[0] ? err : strerror(-ret));
		gdb_vm_destroy(kvm->gdb);
		return ret;
	}
	gdb_vm_set_server(g, *srv);
	/* What the probe of issue 30 found a PVM host's KVM does: said once, at start. */
	if (x86_host_is_pvm())
		pr_warn("gdb: this PVM host stops at breakpoints and steps only in guest kernel mode (CPL0), and fires no watchpoint");
	pr_info("gdb: listening on %s%s", cfg->gdb_addr,
		cfg->gdb_wait ? "; the guest waits for gdb to continue" : "");
	return 0;
}

/* The machine built, started, waited for to its end; its exit status (EXIT_LKVM_ERROR when it
 * could not be built). kvm_run_teardown follows, whatever happened. */
static int run_vm(struct run_state *st, const struct kvm_config *cfg, struct ctl_server *ctl,
		  const char *name, int sig_fd, u64 t0)
{
	struct gdb_server *gdb = NULL;
	char err[512] = "";
	int ret = kvm_run_setup(st, cfg, err, sizeof(err)), status;

	st->kvm.start_ns = t0;
	if (ret < 0) {
		pr_err("%s", err);
		return EXIT_LKVM_ERROR;
	}
	if (cfg->gdb_addr && start_gdb(st, cfg, &gdb) < 0)
		return EXIT_LKVM_ERROR;
	/* Once the VM is built, so a bad kernel still gets its one-line error and nothing else. */
	if (ctl && !cfg->name && !cfg->host_root.on)
		pr_info("VM name: %s (lkvm stat %s, lkvm stop %s)", name, name, name);
	start(st, cfg, ctl);
	wait_for_end(&st->kvm, sig_fd);
	status = finish(st, cfg, ctl);
	/* gdb hears the exit status, then its server and target go: --gdb's, or an attached one's
	 * (lkvm debug --gdb); the vCPUs and the control thread are stopped by then. */
	gdb_vm_end(&st->kvm, status);
	return status;
}

/* --restore FILE: the snapshot opened and checked, and argv merged with its saved options (the
 * run's argv then). 0, or -errno after the error line. */
static int open_restore(const char *path, int *argc, char ***argv, struct restore_args *r)
{
	char err[512] = "";
	int ret = snap_open(&r->snap, path, 0, err, sizeof(err));

	if (ret == 0)
		ret = run_restore_args(*argc, *argv, r, err, sizeof(err));
	if (ret < 0) {
		pr_err("--restore: %s", err[0] ? err : strerror(-ret));
		return ret;
	}
	*argc = r->argc;
	*argv = r->argv;
	return 0;
}

static void close_restore(struct restore_args *r)
{
	if (r->snap)
		snap_close(r->snap);
	run_restore_free(r);
}

/* Parsed (and with --restore, merged with the snapshot's options first). 0, 1 after help, or
 * -1 after the error line. */
static int parse(int argc, char **argv, struct run_args *a, struct restore_args *r)
{
	char err[512] = "";
	const char *path = run_restore_path(argc, argv);
	int ret = path ? open_restore(path, &argc, &argv, r) : 0;

	if (ret < 0)
		return -1;
	ret = kvm_run_parse(argc, argv, a, stdout, err, sizeof(err));
	if (ret == 1)
		return 1;
	if (ret < 0) {
		pr_err("%s", err);
		return -1;
	}
	a->cfg.argc = argc - 1;
	a->cfg.argv = argv + 1;
	return 0;
}

/* --status-file FILE opened, first after parsing: every end from here on is recorded. 0, or -1
 * after the error line (the configuration freed). */
static int open_status(struct run_args *a)
{
	char err[512] = "";

	if (!a->status_file || run_status_open(a->status_file, err, sizeof(err)) == 0)
		return 0;
	pr_err("%s", err);
	kvm_config_free(&a->cfg);
	return -1;
}

/* --status-file's record (no-op without it), before the VM is torn down; st NULL: it never
 * got built (an error, said). */
static void end_status(struct run_state *st, int status)
{
	struct run_status s = { .by = KVM_END_ERROR, .status = status, .command_status = -1 };

	if (st)
		run_status_collect(&s, &st->kvm, status);
	run_status_close(&s);
}

int kvm_cmd_run(int argc, char **argv)
{
	struct restore_args r = { 0 };
	struct run_state *st;
	u64 t0 = now_ns();
	struct run_args a;
	struct ctl_server *ctl = NULL;
	char name[72];
	int sig_fd, ret, status = EXIT_LKVM_ERROR;

	ret = parse(argc, argv, &a, &r);
	if (ret == 0 && open_status(&a) < 0)
		ret = -1;
	if (ret) {
		close_restore(&r);
		return ret == 1 ? 0 : EXIT_LKVM_ERROR;
	}
	if (a.cfg.debug)
		lkvm_set_log_level(LOG_DEBUG);
	sig_fd = block_signals();
	st = prepare(&a);
	if (st) {
		st->snap = r.snap; /* the set-up closes it */
		r.snap = NULL;
	}
	if (st && open_control(st, &a.cfg, name, sizeof(name), &ctl) == 0)
		status = run_vm(st, &a.cfg, ctl, name, sig_fd, t0);
	end_status(st, status);
	if (st) {
		if (st->kvm.statm_fd >= 0)
			close(st->kvm.statm_fd);
		kvm_run_teardown(st);
		run_cmd_free(st->cmd); /* after the VM: the kernel's log may be its descriptor */
		free(st);
	}
	kvm_config_free(&a.cfg);
	close_restore(&r);
	if (sig_fd >= 0)
		close(sig_fd);
	/* Last, so a waiting `lkvm stop` returns only once the VM is gone. */
	ctl_server_destroy(ctl);
	return status;
}

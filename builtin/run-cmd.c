/* `lkvm run -- CMD`, the command's side: its options, whose credentials serve the host's files, the run prepared (the kernel found, the initramfs composed, the kernel log opened) and its exit status. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "lkvm/exitport.h"
#include "lkvm/host-root.h"
#include "lkvm/initrd.h"
#include "lkvm/kvm.h"
#include "lkvm/run-cmd.h"
#include "lkvm/run.h"
#include "lkvm/sandbox.h"
#include "lkvm/term.h"
#include "lkvm/virtio-9p.h"
#include "lkvm/virtio-fs.h"
#include "lkvm/virtio-net.h"
#include "lkvm/x86.h"

extern char **environ;

struct run_cmd {
	bool on;
	struct run_cmd_creds creds; /* whose credentials serve the host's files */
	char kernel[PATH_MAX];	    /* the kernel found without -k (cfg->kernel_path points here) */
	u8 *initrd;
	size_t initrd_len;
	int log_fd;   /* where the serial console goes; -1: unchanged (stdout) */
	bool log_own; /* log_fd is ours to close */
};

int run_cmd_trailing(void *base, int argc, char **argv, char *err, size_t errlen)
{
	struct run_cmd_opts *o = &((struct run_args *)base)->cmd;

	if (o->exec_argv[0] && argc) {
		errfmt(err, errlen, "--exec CMD and -- CMD: give the command once");
		return -EINVAL;
	}
	o->dashdash = true;
	if (o->exec_argv[0])
		return 0;
	o->argc = argc;
	o->argv = argv;
	return 0;
}

int run_cmd_exec(const struct opt *opt, const char *v, void *base, char *err, size_t errlen)
{
	struct run_cmd_opts *o = &((struct run_args *)base)->cmd;

	o->exec_argv[0] = "sh";
	o->exec_argv[1] = "-c";
	o->exec_argv[2] = (char *)v;
	o->exec_argv[3] = NULL;
	o->dashdash = true;
	o->argc = 3;
	o->argv = o->exec_argv;
	return 0;
}

int run_cmd_check(struct kvm_config *cfg, const struct run_cmd_opts *cmd, char *err, size_t errlen)
{
	/* A restore names no kernel (none is read): only its own -- makes it -- CMD's. */
	bool on = cmd->dashdash ||
		  (!cfg->restore_path && !cfg->kernel_path && !cfg->initrd_path && !cfg->nr_disks);

	cfg->host_root.on = on;
	if (cmd->rw) {
		errfmt(err, errlen,
		       "--rw: lkvm keeps the guest's writes to / in its tmpfs overlay; give --share DIR (or --rwdir DIR) for a host directory the command writes to");
		return -EINVAL;
	}
	if (cmd->modules && !on) {
		errfmt(err, errlen,
		       "--modules without -- CMD: lkvm puts modules only in the initramfs it makes for -- CMD");
		return -EINVAL;
	}
	if (cmd->root && !on) {
		errfmt(err, errlen, "--root is for -- CMD (the command runs as root in the guest)");
		return -EINVAL;
	}
	if (!on)
		return 0;
	if (cfg->initrd_path) {
		errfmt(err, errlen, "-i and -- CMD: lkvm makes the initramfs of -- CMD itself");
		return -EINVAL;
	}
	if (cfg->console_virtio) {
		errfmt(err, errlen,
		       "--console virtio and -- CMD: the command's consoles are virtio consoles already, the kernel's stays on ttyS0");
		return -EINVAL;
	}
	return 0;
}

/* ---- whose files ---- */

/* Strictly an id: digits only (no sign, no space), below (uid_t)-1, which means "unchanged". */
static bool parse_id(const char *s, unsigned long *v)
{
	size_t n = strlen(s);

	if (!n || n > 10 || strspn(s, "0123456789") != n)
		return false;
	*v = strtoul(s, NULL, 10);
	return *v <= 0xfffffffeUL;
}

/* root through sudo: SUDO_UID's user (not root, checked), its gid and groups. */
static int sudo_creds(unsigned long uid, struct passwd *p, const struct run_cmd_sudo *sudo,
		      const struct run_cmd_pw *pw, struct run_cmd_creds *c, char *err,
		      size_t errlen)
{
	unsigned long gid = p->pw_gid;
	const char *name = p->pw_name;
	struct passwd *named;

	if (sudo->gid && !parse_id(sudo->gid, &gid)) {
		errfmt(err, errlen,
		       "SUDO_GID '%.32s' is not a gid (digits only): unset it, or give --user USER",
		       sudo->gid);
		return -EINVAL;
	}
	/* Two names of one uid: the groups are those of the name sudo was run by. */
	if (sudo->user && (named = pw->byname(sudo->user)) && named->pw_uid == uid)
		name = named->pw_name;
	c->as = RUN_AS_SUDO;
	c->user = (struct sandbox_user){ .uid = (uid_t)uid, .gid = (gid_t)gid, .groups = true };
	snprintf(c->user.name, sizeof(c->user.name), "%s", name);
	return 0;
}

int run_cmd_creds(uid_t euid, const char *user, const struct run_cmd_sudo *sudo,
		  const struct run_cmd_pw *pw, struct run_cmd_creds *c, char *err, size_t errlen)
{
	unsigned long uid = 0;
	struct passwd *p = NULL;

	*c = (struct run_cmd_creds){ .as = RUN_AS_LKVM };
	if (euid != 0 || user)
		return 0;
	if (sudo->uid && !parse_id(sudo->uid, &uid)) {
		errfmt(err, errlen,
		       "SUDO_UID '%.32s' is not a uid (digits only): unset it, or give --user USER",
		       sudo->uid);
		return -EINVAL;
	}
	if (sudo->uid && !(p = pw->byuid((uid_t)uid))) {
		errfmt(err, errlen,
		       "SUDO_UID %lu: no such user (no passwd entry): unset it, or give --user USER",
		       uid);
		return -ENOENT;
	}
	if (uid != 0)
		return sudo_creds(uid, p, sudo, pw, c, err, errlen);
	/* No one behind root but root: root's files only when asked for (--user root). */
	p = pw->byname("nobody");
	c->as = RUN_AS_NOBODY;
	c->user =
		(struct sandbox_user){ .uid = p ? p->pw_uid : 65534, .gid = p ? p->pw_gid : 65534 };
	snprintf(c->user.name, sizeof(c->user.name), "nobody");
	return 0;
}

/* run_cmd_creds for this run, and its one line. */
static int choose_creds(struct run_cmd *rc, const struct kvm_config *cfg, char *err, size_t errlen)
{
	static const struct run_cmd_pw pw = { getpwuid, getpwnam };
	struct run_cmd_sudo sudo = { getenv("SUDO_UID"), getenv("SUDO_GID"), getenv("SUDO_USER") };
	struct sandbox_user *u = &rc->creds.user;
	int ret = run_cmd_creds(geteuid(), cfg->user, &sudo, &pw, &rc->creds, err, errlen);

	if (ret)
		return ret;
	if (rc->creds.as == RUN_AS_NOBODY)
		pr_info("root with no sudo user behind it: the command gets the host's files as user nobody (--user root: as root)");
	if (rc->creds.as != RUN_AS_LKVM)
		pr_debug("the host's files are served as %s (uid %u, gid %u%s)", u->name,
			 (unsigned)u->uid, (unsigned)u->gid, u->groups ? ", its groups" : "");
	return 0;
}

/* ---- the kernel ---- */

/* Without -k: kvmtool's order, and one line saying what was found. */
static int find_kernel(struct run_cmd *rc, struct kvm_config *cfg, char *err, size_t errlen)
{
	const char *rule;
	int ret;

	if (cfg->kernel_path)
		return 0;
	ret = kernel_find(NULL, NULL, NULL, rc->kernel, sizeof(rc->kernel), &rule);
	if (ret) {
		errfmt(err, errlen,
		       "no kernel: none of ./bzImage, ./arch/x86/boot/bzImage, ../../arch/x86/boot/bzImage, /boot/vmlinuz-$(uname -r) is a file (give one with -k)");
		return ret;
	}
	pr_info("kernel: %s (%s)", rc->kernel, rule);
	cfg->kernel_path = rc->kernel;
	return 0;
}

/* ---- the initramfs ---- */

/* Each NIC for init, by the MAC the device gets (virtio_net_add's default: the base MAC plus
 * the NIC's index among those made): passt's (mode=user) configured by DHCP, a tap's only up. */
static void add_nics(struct initcfg *ic, const struct kvm_config *cfg)
{
	static const u8 base[6] = VIRTIO_NET_DEFAULT_MAC;
	int index = 0;

	for (int i = 0; i < cfg->nr_nets && ic->nr_nics < INITCFG_MAX_NICS; i++) {
		const struct net_opts *o = &cfg->net[i];
		struct initcfg_nic *n = &ic->nics[ic->nr_nics++];

		if (o->mode == NET_MODE_NONE) {
			ic->nr_nics--;
			continue;
		}
		memcpy(n->mac, o->mac_set ? o->guest_mac : base, 6);
		if (!o->mac_set)
			n->mac[5] = (u8)(n->mac[5] + index);
		index++;
		n->how = o->mode == NET_MODE_USER ? INITCFG_NIC_DHCP : INITCFG_NIC_UP;
	}
}

/* The root's and the shares' virtio-fs tags where lkvm offers it (--fs: share_fs_decide),
 * the shares, and --debug (init then says which file system it mounted). */
static void add_shares(struct initcfg *ic, const struct kvm_config *cfg,
		       char (*fs_tags)[VIRTIO_FS_TAG_MAX + 1])
{
	const struct host_root_cfg *hr = &cfg->host_root;

	ic->root_fs_tag = hr->vfs ? VIRTIO_FS_ROOT_TAG : NULL;
	ic->root_fs_only = hr->no_9p;
	ic->debug = cfg->debug;
	for (const struct p9_share *s; ic->nr_shares < INITCFG_MAX_SHARES &&
				       (s = p9_share_get(cfg->shares, (int)ic->nr_shares));) {
		struct initcfg_share *is = &ic->shares[ic->nr_shares];

		*is = (struct initcfg_share){ .tag = s->tag, .path = s->guest_dir, .ro = s->ro };
		if (s->vfs) {
			snprintf(fs_tags[ic->nr_shares], VIRTIO_FS_TAG_MAX + 1,
				 VIRTIO_FS_SHARE_TAG "%zu", ic->nr_shares);
			is->fs_tag = fs_tags[ic->nr_shares];
			is->fs_only = s->no_9p;
		}
		ic->nr_shares++;
	}
}

/* Init's configuration: CMD, its user, the user's environment and directory, the host's root,
 * the shares, CMD's consoles; initrd_make adds the modules its kernel needs. */
static int make_initrd(struct run_cmd *rc, const struct kvm_config *cfg,
		       const struct run_cmd_opts *cmd, char *err, size_t errlen)
{
	const struct host_root_cfg *hr = &cfg->host_root;
	struct initcfg ic = {
		.argv = cmd->argv,
		.argc = (size_t)cmd->argc,
		.root = INITCFG_ROOT_9P_OVERLAY,
		.root_tag = HOST_ROOT_TAG,
		.stdio_dev = "/dev/hvc0",
		.stderr_dev = "/dev/hvc0",
		.stdout_port = hr->tty ? NULL : INITCFG_STDOUT_PORT,
		.stderr_port = hr->stderr_own ? INITCFG_STDERR_PORT : NULL,
		.tty = hr->tty ? INITCFG_TTY : INITCFG_RAW,
	};
	static const struct run_cmd_pw pw = { getpwuid, getpwnam };
	static struct run_cmd_guest guest; /* large; ic.envp points into it */
	static char fs_tags[INITCFG_MAX_SHARES][VIRTIO_FS_TAG_MAX + 1];
	char cwd[PATH_MAX];
	struct winsize ws;
	int ret;

	ic.envp = initrd_env_filter(environ, &ic.envc);
	if (!ic.envp)
		return -ENOMEM;
	ret = run_cmd_guest_user(&rc->creds, cfg->user, cmd->root, &pw, &ic, &guest, err, errlen);
	if (ret) {
		free(ic.envp);
		return ret;
	}
	if (getcwd(cwd, sizeof(cwd)))
		ic.cwd = cwd;
	if (hr->tty && !ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) && ws.ws_row && ws.ws_col) {
		ic.rows = ws.ws_row;
		ic.cols = ws.ws_col;
	}
	add_shares(&ic, cfg, fs_tags);
	add_nics(&ic, cfg);
	ret = initrd_make(&ic, cfg->kernel_path, cmd->modules,
			  cfg->virtio_trans == VIRTIO_TRANS_MMIO, &rc->initrd, &rc->initrd_len, err,
			  errlen);
	free(ic.envp);
	return ret;
}

/* The kernel's log (the serial console): --console-log FILE, else in host-root mode stderr
 * with --debug and nowhere without. */
static int open_log(struct run_cmd *rc, const struct kvm_config *cfg, const char *path, char *err,
		    size_t errlen)
{
	rc->log_fd = -1;
	if (!path && cfg->debug)
		rc->log_fd = STDERR_FILENO;
	if (!path && (cfg->debug || !rc->on))
		return 0;
	if (!path)
		path = "/dev/null";
	rc->log_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (rc->log_fd < 0) {
		int ret = -errno;

		errfmt(err, errlen, "--console-log '%s': %s", path, strerror(-ret));
		return ret;
	}
	rc->log_own = true;
	/* The UART writes it from the vCPU threads, whose filters allow fds 0-2 and eventfds. */
	return sandbox_allow_fd(rc->log_fd);
}

/* Where CMD's output goes and how its input comes, from lkvm's own descriptors. */
static void console_modes(struct host_root_cfg *o)
{
	o->tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
	o->stdin_framed = !o->tty;
	o->stderr_own = !o->tty || !isatty(STDERR_FILENO);
}

int run_cmd_prepare(struct kvm_config *cfg, const struct run_cmd_opts *cmd, struct run_cmd **out,
		    char *err, size_t errlen)
{
	struct run_cmd *rc;
	int ret;

	*out = NULL;
	if (!cfg->host_root.on && !cmd->console_log)
		return 0;
	if (cfg->host_root.on && x86_host_is_pvm()) {
		errfmt(err, errlen,
		       "this host's KVM is kvm_pvm, where guest user space cannot make system calls, and -- CMD runs it: run lkvm in the emulated host (scripts/kvm-host.sh --emulated -- lkvm run ..., or LKVM_HOST=emulated)");
		return -EOPNOTSUPP;
	}
	rc = calloc(1, sizeof(*rc));
	if (!rc)
		return -ENOMEM;
	rc->on = cfg->host_root.on;
	rc->log_fd = -1;
	ret = rc->on ? choose_creds(rc, cfg, err, errlen) : 0;
	if (!ret)
		ret = open_log(rc, cfg, cmd->console_log, err, errlen);
	if (!ret && rc->on) {
		console_modes(&cfg->host_root);
		cfg->host_root.full_log = cmd->console_log != NULL;
		/* A restore boots nothing: its guest's init has its command and files already. */
		if (!cfg->restore_path)
			ret = find_kernel(rc, cfg, err, errlen);
		if (!ret && !cfg->restore_path)
			ret = make_initrd(rc, cfg, cmd, err, errlen);
	}
	if (ret) {
		run_cmd_free(rc);
		return ret;
	}
	*out = rc;
	return 0;
}

void run_cmd_take_initrd(struct run_cmd *rc, u8 **data, size_t *len)
{
	*data = rc->initrd;
	*len = rc->initrd_len;
	rc->initrd = NULL;
	rc->initrd_len = 0;
}

void run_cmd_term(struct run_cmd *rc, struct term *t)
{
	if (rc && rc->log_fd >= 0)
		t->out_fd = rc->log_fd;
}

const struct sandbox_user *run_cmd_user(const struct run_cmd *rc)
{
	return rc && rc->creds.as != RUN_AS_LKVM ? &rc->creds.user : NULL;
}

void run_cmd_free(struct run_cmd *rc)
{
	if (!rc)
		return;
	if (rc->log_own)
		close(rc->log_fd);
	free(rc->initrd);
	free(rc);
}

int run_cmd_end(struct kvm *kvm, int status, bool *quiet)
{
	unsigned kind = exitport_report_kind(kvm);

	*quiet = kvm->cfg.host_root.on &&
		 (kind == LKVM_EXIT_EXITED || kind == LKVM_EXIT_SIGNALED) && !kvm->cfg.debug;
	if (kvm->cfg.host_root.on && !kind && status == EXIT_GUEST_NO_STATUS) {
		char why[64];

		/* The reason is short: "guest reset (i8042)", "guest powered off". */
		snprintf(why, sizeof(why), "%.63s", kvm->exit_reason);
		snprintf(
			kvm->exit_reason, sizeof(kvm->exit_reason),
			"the guest ended (%s) without the command's status (the kernel's log: --console-log FILE or --debug)",
			why);
	}
	return status;
}

bool run_cmd_root_missing(const struct kvm_config *cfg)
{
	const char *p = cfg->cmdline;

	if (cfg->host_root.on || cfg->initrd_path || cfg->nr_disks || cfg->restore_path)
		return false;
	/* root= as a word of -p (the defaults name none). */
	while (p && *p) {
		p += strspn(p, " ");
		if (!strncmp(p, "root=", 5))
			return false;
		p += strcspn(p, " ");
	}
	return true;
}

/* `lkvm run -- CMD` and the host-root mode: kernel discovery, lkvm's initramfs, the host's / over virtio-9p, CMD's consoles and stdin, its exit status. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "lkvm/dev.h"
#include "lkvm/exitport.h"
#include "lkvm/initrd.h"
#include "lkvm/kvm.h"
#include "lkvm/run-cmd.h"
#include "lkvm/sandbox.h"
#include "lkvm/term.h"
#include "lkvm/virtio-9p.h"
#include "lkvm/virtio-console.h"
#include "lkvm/worker.h"
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
	struct run_cmd_opts *o = &((struct kvm_config *)base)->cmd;

	o->dashdash = true;
	o->argc = argc;
	o->argv = argv;
	return 0;
}

int run_cmd_check(struct kvm_config *cfg, char *err, size_t errlen)
{
	struct run_cmd_opts *o = &cfg->cmd;

	o->on = o->dashdash || (!cfg->kernel_path && !cfg->initrd_path && !cfg->nr_disks);
	if (!o->on)
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

const char *run_cmd_kernel_params(const struct kvm_config *cfg)
{
	if (!cfg->cmd.on)
		return "";
	return cfg->debug ? "panic=-1" : "quiet panic=-1";
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

/* ---- the kernel and its modules ---- */

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

/* The kernel build tree a kernel image sits in, for its modules: PATH minus
 * arch/x86/boot/bzImage, else PATH's directory (a vmlinux, or ./bzImage). kmod_dir_find
 * checks that the tree's release is the kernel's. */
static void kernel_tree(const char *path, char *tree, size_t len)
{
	static const char *const suffixes[] = { "arch/x86/boot/bzImage",
						"arch/x86_64/boot/bzImage" };
	size_t n = strlen(path);
	const char *slash;

	for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
		size_t sl = strlen(suffixes[i]);

		if (n >= sl && !strcmp(path + n - sl, suffixes[i])) {
			snprintf(tree, len, "%.*s", (int)(n - sl), path);
			if (!*tree)
				snprintf(tree, len, ".");
			return;
		}
	}
	slash = strrchr(path, '/');
	if (slash)
		snprintf(tree, len, "%.*s", (int)(slash == path ? 1 : slash - path), path);
	else
		snprintf(tree, len, ".");
}

/* The modules the guest needs when the kernel has them as modules (a distribution kernel, a
 * tree after `make modules`); none when no module directory of its release exists (the
 * kernel then has to have everything built in, as the project's guest kernel does). */
static int find_modules(const struct kvm_config *cfg, struct kmod_list *mods, char *err,
			size_t errlen)
{
	/* pvpanic_pci where there is one, so a panic ends the run with 2 (panic=-1 alone would
	 * make it a reset, 125). */
	static const char *const names[] = { INITRD_MODULES_9P_ROOT, "?pvpanic_pci",
					     "virtio_mmio" };
	char release[256], tree[PATH_MAX], dir[PATH_MAX];
	/* virtio_mmio only when a device of ours is on it. */
	size_t n = ARRAY_SIZE(names) - (cfg->virtio_trans != VIRTIO_TRANS_MMIO);
	int ret;

	if (kernel_release(cfg->kernel_path, release, sizeof(release)))
		return 0; /* no release in it: nothing to look up (a freestanding kernel) */
	kernel_tree(cfg->kernel_path, tree, sizeof(tree));
	ret = kmod_dir_find(tree, NULL, release, dir, sizeof(dir));
	if (ret) {
		pr_debug(
			"kernel %s: no module directory, assuming 9p, virtio and overlay are built in",
			release);
		return 0;
	}
	ret = kmod_resolve(dir, names, n, mods, err, errlen);
	if (ret == -ENOENT) {
		pr_debug(
			"kernel %s: no modules.dep or modules.order in %s, assuming 9p, virtio and overlay are built in",
			release, dir);
		return 0;
	}
	if (ret) {
		char why[256];

		snprintf(why, sizeof(why), "%s", err);
		errfmt(err, errlen, "kernel %s: its modules in %s: %s", release, dir, why);
		return ret;
	}
	pr_debug("kernel %s: %zu modules from %s", release, mods->n, dir);
	return 0;
}

/* ---- the initramfs ---- */

/* Init's configuration: CMD, the user's environment and directory, the host's root, the
 * shares, CMD's consoles. */
static int make_initrd(struct run_cmd *rc, const struct kvm_config *cfg, char *err, size_t errlen)
{
	struct initcfg ic = {
		.argv = cfg->cmd.argv,
		.argc = (size_t)cfg->cmd.argc,
		.root = INITCFG_ROOT_9P_OVERLAY,
		.root_tag = RUN_CMD_ROOT_TAG,
		.stdio_dev = "/dev/hvc0",
		.stderr_dev = cfg->cmd.stderr_own ? "/dev/hvc1" : "/dev/hvc0",
		.tty = cfg->cmd.tty ? INITCFG_TTY : INITCFG_RAW,
	};
	struct kmod_list mods = { 0 };
	struct cpio c = { 0 };
	char cwd[PATH_MAX];
	struct winsize ws;
	int ret;

	ic.envp = initrd_env_filter(environ, &ic.envc);
	if (!ic.envp)
		return -ENOMEM;
	if (getcwd(cwd, sizeof(cwd)))
		ic.cwd = cwd;
	if (cfg->cmd.tty && !ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) && ws.ws_row && ws.ws_col) {
		ic.rows = ws.ws_row;
		ic.cols = ws.ws_col;
	}
	for (const struct p9_share *s; ic.nr_shares < INITCFG_MAX_SHARES &&
				       (s = p9_share_get(cfg->shares, (int)ic.nr_shares));)
		ic.shares[ic.nr_shares++] = (struct initcfg_share){ s->tag, s->guest_dir, s->ro };
	ret = find_modules(cfg, &mods, err, errlen);
	if (!ret)
		ret = initrd_build(&c, &ic, &mods, err, errlen);
	if (!ret)
		ret = cpio_finish(&c);
	kmod_list_free(&mods);
	free(ic.envp);
	if (ret) {
		if (!*err)
			errfmt(err, errlen, "making the initramfs: %s", strerror(-ret));
		cpio_free(&c);
		return ret;
	}
	rc->initrd = c.buf;
	rc->initrd_len = c.len;
	c.buf = NULL;
	cpio_free(&c);
	return 0;
}

/* The kernel's log (the serial console): --console-log FILE, else in host-root mode stderr
 * with --debug and nowhere without. */
static int open_log(struct run_cmd *rc, const struct kvm_config *cfg, char *err, size_t errlen)
{
	const char *path = cfg->cmd.console_log;

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
static void console_modes(struct run_cmd_opts *o)
{
	o->tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
	o->stdin_framed = !o->tty;
	o->stderr_own = !o->tty || !isatty(STDERR_FILENO);
}

int run_cmd_prepare(struct kvm_config *cfg, struct run_cmd **out, char *err, size_t errlen)
{
	struct run_cmd *rc;
	int ret;

	*out = NULL;
	if (!cfg->cmd.on && !cfg->cmd.console_log)
		return 0;
	if (cfg->cmd.on && x86_host_is_pvm()) {
		errfmt(err, errlen,
		       "this host's KVM is kvm_pvm, where guest user space cannot make system calls, and -- CMD runs it: run lkvm in the emulated host (scripts/kvm-host.sh --emulated -- lkvm run ..., or LKVM_HOST=emulated)");
		return -EOPNOTSUPP;
	}
	rc = calloc(1, sizeof(*rc));
	if (!rc)
		return -ENOMEM;
	rc->on = cfg->cmd.on;
	rc->log_fd = -1;
	ret = rc->on ? choose_creds(rc, cfg, err, errlen) : 0;
	if (!ret)
		ret = open_log(rc, cfg, err, errlen);
	if (!ret && rc->on) {
		console_modes(&cfg->cmd);
		ret = find_kernel(rc, cfg, err, errlen);
		if (!ret)
			ret = make_initrd(rc, cfg, err, errlen);
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

/* ---- CMD's consoles ---- */

/* A closed stdout ends the run as it would end CMD on the host (SIGPIPE). */
static void cmd_output(struct kvm *kvm, int fd, const u8 *buf, size_t len)
{
	if (write_full(fd, buf, len) < len && errno == EPIPE)
		kvm_request_exit(kvm, 128 + SIGPIPE, "the command's %s was closed (SIGPIPE)",
				 fd == STDOUT_FILENO ? "stdout" : "stderr");
}

static void cmd_stdout(struct kvm *kvm, const u8 *buf, size_t len)
{
	cmd_output(kvm, STDOUT_FILENO, buf, len);
}

static void cmd_stderr(struct kvm *kvm, const u8 *buf, size_t len)
{
	cmd_output(kvm, STDERR_FILENO, buf, len);
}

/*
 * stdin's forwarder (framed mode): lkvm's stdin, framed (initcfg_stdin_encode), into hvc0's
 * input, then the end-of-input mark at EOF (or a read error). The console takes what fits
 * its buffer; the rest waits for the guest to read (a full console holds lkvm's stdin back,
 * as a full pipe would).
 */
struct cmd_stdin {
	struct kvm *kvm;
	struct virtio_console *con;
	struct worker worker;
	int ready_fd; /* eventfd: init reported LKVM_EXIT_STDIN_READY (nothing is read before) */
};

#define STDIN_CHUNK 2048
#define STDIN_RETRY_MS 5 /* a full console has no "room again" event: look again this often */

/* Everything of buf into the console. False: stop asked for. */
static bool stdin_push(struct cmd_stdin *s, const u8 *buf, size_t len)
{
	size_t off = 0;

	while (off < len) {
		struct pollfd p = { .fd = worker_fd(&s->worker), .events = POLLIN };

		off += virtio_console_receive(s->con, buf + off, len - off);
		if (off == len)
			break;
		if (poll(&p, 1, STDIN_RETRY_MS) > 0 && worker_park(&s->worker))
			return false;
	}
	return true;
}

static void stdin_thread(void *arg)
{
	static const u8 eof[] = { INITCFG_STDIN_ESC, INITCFG_STDIN_EOF };
	struct cmd_stdin *s = arg;
	u8 buf[STDIN_CHUNK], enc[2 * STDIN_CHUNK];
	bool ready = false, done = false;

	for (;;) {
		struct pollfd p[3] = {
			{ .fd = worker_fd(&s->worker), .events = POLLIN },
			{ .fd = ready ? -1 : s->ready_fd, .events = POLLIN },
			{ .fd = !ready || done ? -1 : STDIN_FILENO, .events = POLLIN },
		};
		ssize_t n;

		if (poll(p, 3, -1) < 0 && errno != EINTR)
			break;
		if (p[0].revents) {
			if (worker_park(&s->worker))
				break;
			continue;
		}
		if (p[1].revents)
			ready = true;
		if (!p[2].revents)
			continue;
		n = read(STDIN_FILENO, buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n > 0 && !stdin_push(s, enc, initcfg_stdin_encode(buf, (size_t)n, enc)))
			break;
		if (n <= 0) {
			done = true; /* then only a stop or a pause wakes the thread */
			if (!stdin_push(s, eof, sizeof(eof)))
				break;
		}
	}
}

static void stdin_free(struct cmd_stdin *s)
{
	worker_destroy(&s->worker); /* stops the thread if it runs; nothing if never made */
	if (s->ready_fd >= 0)
		close(s->ready_fd);
	free(s);
}

/* Init's report, on a vCPU thread: the stdio console is raw now. */
static void stdin_ready(void *arg)
{
	struct cmd_stdin *s = arg;
	u64 one = 1;

	if (write(s->ready_fd, &one, sizeof(one)) < 0)
		pr_debug("cmd-stdin: ready eventfd write failed");
}

static int stdin_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	struct kvm_dev *con = kvm_dev_find(kvm, "virtio-console", 0);
	struct cmd_stdin *s;
	int ret;

	if (!con) {
		errfmt(err, errlen, "no virtio-console for the command's stdin");
		return -ENODEV;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->kvm = kvm;
	s->con = con->priv;
	s->ready_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ret = s->ready_fd < 0 ? -errno : worker_init(&s->worker, kvm);
	if (!ret)
		ret = exitport_on_stdin_ready(kvm, stdin_ready, s);
	if (ret) {
		stdin_free(s);
		return ret;
	}
	d->priv = s;
	return 0;
}

static void stdin_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	stdin_free(d->priv);
}

/* From the main thread (kvm_devs_start), before its sandbox. */
static int stdin_dev_start(struct kvm_dev *d)
{
	struct cmd_stdin *s = d->priv;

	return worker_start(&s->worker, "lkvm-cmd-stdin", SB_CONSOLE, stdin_thread, s);
}

static void stdin_dev_quiesce(struct kvm_dev *d)
{
	worker_quiesce(&((struct cmd_stdin *)d->priv)->worker);
}

static void stdin_dev_resume(struct kvm_dev *d)
{
	worker_resume(&((struct cmd_stdin *)d->priv)->worker);
}

static const struct kvm_dev_ops stdin_dev_ops = {
	.name = "cmd-stdin",
	.prio = DEV_PRIO_VIRTIO, /* after the consoles it feeds */
	.init = stdin_dev_init,
	.start = stdin_dev_start,
	.quiesce = stdin_dev_quiesce,
	.resume = stdin_dev_resume,
	.exit = stdin_dev_exit,
};

/* ---- the machine's part and the end ---- */

static int add_root(struct kvm *kvm)
{
	struct p9_share root = { .host_dir = "/", .tag = RUN_CMD_ROOT_TAG, .ro = true };

	return virtio_9p_add(kvm, &root);
}

int run_cmd_mmio_devices(const struct kvm_config *cfg)
{
	return cfg->cmd.on && cfg->virtio_trans == VIRTIO_TRANS_MMIO ? 3 : 0;
}

int run_cmd_add_devices(struct kvm *kvm, const struct kvm_config *cfg)
{
	int ret;

	if (!cfg->cmd.on)
		return 0;
	/* A guest reset or power-off before init's report is a run without CMD's status. */
	kvm->guest_end_status = EXIT_GUEST_NO_STATUS;
	ret = exitport_add(kvm);
	if (!ret)
		ret = add_root(kvm);
	/* hvc0 then hvc1: Linux numbers them in the order it finds them (PCI slot order). */
	if (!ret)
		ret = virtio_console_add_port(kvm, cmd_stdout, cfg->cmd.tty);
	if (!ret && cfg->cmd.stderr_own)
		ret = virtio_console_add_port(kvm, cmd_stderr, false);
	if (!ret && cfg->cmd.stdin_framed)
		ret = kvm_dev_add(kvm, &stdin_dev_ops, NULL, 0);
	return ret;
}

int run_cmd_end(struct kvm *kvm, int status, bool *quiet)
{
	unsigned kind = exitport_report_kind(kvm);

	*quiet = kvm->cfg.cmd.on && (kind == LKVM_EXIT_EXITED || kind == LKVM_EXIT_SIGNALED) &&
		 !kvm->cfg.debug;
	if (kvm->cfg.cmd.on && !kind && status == EXIT_GUEST_NO_STATUS) {
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

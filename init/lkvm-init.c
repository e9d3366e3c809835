/* lkvm's guest init, PID 1 of lkvm's initramfs: mounts, modules, root, CMD, its status to lkvm. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>
#include <sys/io.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "lkvm/initcfg.h"
#include "user.h"
#include "net.h"
#include "ports.h"
#include "relay.h"

/* linux/module.h, which musl's headers do not bring: the kernel decompresses the file. */
#define MODULE_INIT_COMPRESSED_FILE 4

/* Where the 9p root is assembled before init enters it (directories of the initramfs). */
#define LOWER_DIR "/lkvm/lower"
#define RW_DIR "/lkvm/rw"
#define NEWROOT_DIR "/lkvm/root"

extern char **environ;

static struct initcfg cfg;
static int log_fd = 2; /* the kernel's console until CMD's stderr console is open */

static void __attribute__((format(printf, 1, 2))) msg(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n = snprintf(line, sizeof(line), "lkvm-init: ");

	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(log_fd, line, (size_t)n) < 0) {
		/* Nowhere else to say it. */
	}
}

/* One 32-bit word to the exit port: a single outl where the kernel allows ioperm
 * (CONFIG_X86_IOPL_IOPERM), else byte by byte through /dev/port (CONFIG_DEVPORT); the device
 * commits when the last byte arrives, so both deliver the same report. */
static void report(uint32_t word)
{
	unsigned port = cfg.exit_port ? cfg.exit_port : LKVM_EXIT_PORT;
	unsigned char b[LKVM_EXIT_PORT_LEN];
	int fd;

	if (ioperm(port, LKVM_EXIT_PORT_LEN, 1) == 0) {
		outl(word, (unsigned short)port);
		return;
	}
	for (size_t i = 0; i < sizeof(b); i++)
		b[i] = (unsigned char)(word >> (8 * i));
	fd = open("/dev/port", O_WRONLY | O_CLOEXEC);
	if (fd >= 0 && pwrite(fd, b, sizeof(b), port) == (ssize_t)sizeof(b)) {
		close(fd);
		return;
	}
	msg("cannot reach the exit port 0x%x (needs CONFIG_X86_IOPL_IOPERM or CONFIG_DEVPORT): %s",
	    port, strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* The end of the run: write back what CMD wrote to a share, report, and reboot (a power-off
 * works only in a kernel with CONFIG_ACPI, elsewhere it would only halt, and PID 1 returning
 * from it panics the kernel; lkvm ends the run at the i8042 reset, after the report that
 * decides its status, whatever the kernel). */
static void __attribute__((noreturn)) finish(uint32_t word)
{
	sync();
	report(word);
	reboot(RB_AUTOBOOT);
	for (;;)
		pause();
}

static void __attribute__((noreturn)) fail(enum lkvm_init_stage stage, int err, const char *what)
{
	const char *hint = initcfg_stage_hint(stage, err);

	msg("%s: %s: %s%s%s%s", initcfg_stage_name(stage), what, strerror(err), *hint ? " (" : "",
	    hint, *hint ? ")" : "");
	finish(LKVM_EXIT_WORD(LKVM_EXIT_INIT_FAILED, stage, (unsigned)err & 0xffff));
}

/* mkdir -p; existing directories are fine. */
static int mkdir_p(const char *path, mode_t mode)
{
	char p[4096];
	size_t n = strlen(path);

	if (n >= sizeof(p))
		return -ENAMETOOLONG;
	memcpy(p, path, n + 1);
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s)
			continue;
		char c = *s;

		*s = '\0';
		if (mkdir(p, mode) && errno != EEXIST)
			return -errno;
		if (!c)
			return 0;
		*s = c;
	}
}

static void mount_or_fail(enum lkvm_init_stage stage, const char *src, const char *dst,
			  const char *type, unsigned long flags, const char *opts)
{
	int ret = mkdir_p(dst, 0755);

	if (!ret && mount(src, dst, type, flags, opts))
		ret = -errno;
	if (ret)
		fail(stage, -ret, dst);
}

static const struct {
	const char *src, *dst, *type, *opts;
	unsigned long flags;
	bool own_root; /* only in the initramfs: over the host's root, the overlay is writable
			* already and the host's files there stay visible (a command started
			* in a directory below /tmp finds it) */
} early_mounts[] = {
	{ "devtmpfs", "/dev", "devtmpfs", "mode=0755", MS_NOSUID, false },
	{ "proc", "/proc", "proc", NULL, MS_NOSUID | MS_NODEV | MS_NOEXEC, false },
	{ "sysfs", "/sys", "sysfs", NULL, MS_NOSUID | MS_NODEV | MS_NOEXEC, false },
}, late_mounts[] = {
	{ "tmpfs", "/tmp", "tmpfs", "mode=1777", MS_NOSUID | MS_NODEV, true },
	{ "tmpfs", "/run", "tmpfs", "mode=0755", MS_NOSUID | MS_NODEV, false },
	{ "devpts", "/dev/pts", "devpts", "gid=5,mode=0620,ptmxmode=0666", MS_NOSUID | MS_NOEXEC, false },
	{ "tmpfs", "/dev/shm", "tmpfs", "mode=1777", MS_NOSUID | MS_NODEV, false },
};

/* What bash process substitution and many scripts expect beside devtmpfs's nodes. */
static const struct {
	const char *target, *path;
} dev_links[] = {
	{ "/proc/self/fd", "/dev/fd" },
	{ "/proc/self/fd/0", "/dev/stdin" },
	{ "/proc/self/fd/1", "/dev/stdout" },
	{ "/proc/self/fd/2", "/dev/stderr" },
};

static void mount_early(void)
{
	for (size_t i = 0; i < sizeof(early_mounts) / sizeof(early_mounts[0]); i++)
		mount_or_fail(LKVM_STAGE_MOUNT, early_mounts[i].src, early_mounts[i].dst,
			      early_mounts[i].type, early_mounts[i].flags, early_mounts[i].opts);
}

static void mount_late(void)
{
	for (size_t i = 0; i < sizeof(late_mounts) / sizeof(late_mounts[0]); i++)
		if (!late_mounts[i].own_root || cfg.root == INITCFG_ROOT_INITRAMFS)
			mount_or_fail(LKVM_STAGE_MOUNT, late_mounts[i].src, late_mounts[i].dst,
				      late_mounts[i].type, late_mounts[i].flags,
				      late_mounts[i].opts);
	for (size_t i = 0; i < sizeof(dev_links) / sizeof(dev_links[0]); i++)
		if (symlink(dev_links[i].target, dev_links[i].path) && errno != EEXIST)
			fail(LKVM_STAGE_MOUNT, errno, dev_links[i].path);
}

/* The configuration, read whole (bounded) and decoded; the buffer lives as long as init. */
static void read_config(void)
{
	static char buf[INITCFG_MAX_SIZE + 1];
	size_t len = 0;
	ssize_t n;
	int fd = open(INITCFG_PATH, O_RDONLY | O_CLOEXEC), ret;

	if (fd < 0)
		fail(LKVM_STAGE_CONFIG, errno, INITCFG_PATH);
	while ((n = read(fd, buf + len, sizeof(buf) - len)) > 0)
		len += (size_t)n;
	if (n < 0)
		fail(LKVM_STAGE_CONFIG, errno, INITCFG_PATH);
	close(fd);
	ret = len > INITCFG_MAX_SIZE ? -EFBIG : initcfg_decode(buf, len, &cfg);
	if (ret)
		fail(LKVM_STAGE_CONFIG, -ret, INITCFG_PATH);
}

static bool has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcmp(s + n - m, suffix);
}

/* In the order given (lkvm sorted them by dependency); a module already there is fine. Each
 * file is removed once loaded: the initramfs stays in RAM for the whole run. */
static void load_modules(void)
{
	for (size_t i = 0; i < cfg.nr_modules; i++) {
		const char *path = cfg.modules[i];
		int flags = has_suffix(path, ".ko") ? 0 : MODULE_INIT_COMPRESSED_FILE;
		int fd = open(path, O_RDONLY | O_CLOEXEC);

		if (fd < 0)
			fail(LKVM_STAGE_MODULE, errno, path);
		if (syscall(SYS_finit_module, fd, "", flags) && errno != EEXIST)
			fail(LKVM_STAGE_MODULE, errno, path);
		close(fd);
		unlink(path);
	}
}

/* 9p mount options: cache=mmap for the root and the shares. read() and write() go to the host
 * at once, msize at a time, straight into the caller's buffer (so both sides see each other's
 * writes, and a command sees the host's files as they are); only mmap'ed pages (executables,
 * libraries) are cached, and unlike cache=none shared writable mmap works. The root used
 * cache=loose until issue 26: every byte read went through the guest's page cache first, and
 * filling it cost the guest far more than the Treads did (in the emulated host a cold 64 MiB
 * read of the root took 6-10x as long as through a share or with O_DIRECT, and 3-6x vng's,
 * whose root is cache=none); the overlay above the root keeps the dentries loose cached. */
static void p9_opts(char *buf, size_t len, const char *cache)
{
	snprintf(buf, len, "trans=virtio,version=9p2000.L,msize=%u,cache=%s",
		 cfg.msize ? cfg.msize : INITCFG_DEFAULT_MSIZE, cache);
}

/*
 * One shared directory at dst: over virtio-fs when lkvm offers it (fs_tag) and the kernel has
 * it, else over 9p (unless fs_only: there is no 9p device). The virtio-fs mount takes no
 * cache options: the server's replies set the timeouts and caching (lkvm's cache modes).
 * With "debug", one line says which.
 */
static void mount_dir(enum lkvm_init_stage stage, const char *tag, const char *fs_tag, bool fs_only,
		      const char *dst, unsigned long flags)
{
	char opts[128];
	int ret = fs_tag ? mkdir_p(dst, 0755) : 0, fs_err = 0;

	if (ret)
		fail(stage, -ret, dst);
	if (fs_tag && !mount(fs_tag, dst, "virtiofs", flags, NULL)) {
		if (cfg.debug)
			msg("%s: virtiofs (%s)", dst, fs_tag);
		return;
	}
	if (fs_tag)
		fs_err = errno;
	if (fs_only)
		fail(stage, fs_err, dst);
	p9_opts(opts, sizeof(opts), "mmap");
	mount_or_fail(stage, tag, dst, "9p", flags, opts);
	if (cfg.debug)
		msg("%s: 9p (%s)%s%s", dst, tag, fs_err ? ", virtiofs: " : "",
		    fs_err ? strerror(fs_err) : "");
}

/* The host's root read-only, a tmpfs over it, and the overlay entered as / (what switch_root
 * does: move the mounts, move the new root onto /, chroot). */
static void enter_root(void)
{
	static const char *const moved[] = { "/dev", "/proc", "/sys" };
	char dst[64];

	mount_dir(LKVM_STAGE_ROOT, cfg.root_tag, cfg.root_fs_tag, cfg.root_fs_only, LOWER_DIR,
		  MS_RDONLY);
	mount_or_fail(LKVM_STAGE_ROOT, "tmpfs", RW_DIR, "tmpfs", 0, "mode=0755");
	if (mkdir(RW_DIR "/upper", 0755) || mkdir(RW_DIR "/work", 0755))
		fail(LKVM_STAGE_ROOT, errno, RW_DIR);
	mount_or_fail(LKVM_STAGE_ROOT, "overlay", NEWROOT_DIR, "overlay", 0,
		      "lowerdir=" LOWER_DIR ",upperdir=" RW_DIR "/upper,workdir=" RW_DIR "/work");
	for (size_t i = 0; i < sizeof(moved) / sizeof(moved[0]); i++) {
		snprintf(dst, sizeof(dst), NEWROOT_DIR "%s", moved[i]);
		mount_or_fail(LKVM_STAGE_ROOT, moved[i], dst, NULL, MS_MOVE, NULL);
	}
	if (chdir(NEWROOT_DIR) || mount(".", "/", NULL, MS_MOVE, NULL) || chroot(".") || chdir("/"))
		fail(LKVM_STAGE_ROOT, errno, "entering the new root");
}

static void mount_shares(void)
{
	for (size_t i = 0; i < cfg.nr_shares; i++)
		mount_dir(LKVM_STAGE_SHARE, cfg.shares[i].tag, cfg.shares[i].fs_tag,
			  cfg.shares[i].fs_only, cfg.shares[i].path,
			  cfg.shares[i].ro ? MS_RDONLY : 0);
}

static const char *cfg_getenv(const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < cfg.envc; i++)
		if (!strncmp(cfg.envp[i], name, n) && cfg.envp[i][n] == '=')
			return cfg.envp[i] + n + 1;
	return NULL;
}

struct consoles {
	int io, out, err; /* CMD's stdin (and the shell's terminal), stdout, stderr */
};

/* How long a named port may take to appear after the console driver's probe. */
#define PORT_WAIT_MS 10000

/* CMD's output on the virtio-serial port `name` when lkvm named one, else on fallback. */
static int open_port(const char *name, int fallback)
{
	int fd;

	if (!name)
		return fallback;
	fd = port_open(name, PORT_WAIT_MS);
	if (fd >= 0)
		return fd;
	msg("virtio-serial port %s: %s; its output goes to the console", name, strerror(-fd));
	return fallback;
}

static void open_consoles(struct consoles *con)
{
	const char *io = cfg.stdio_dev ? cfg.stdio_dev : INITCFG_DEFAULT_STDIO;
	const char *err = cfg.stderr_dev ? cfg.stderr_dev : INITCFG_DEFAULT_STDERR;
	struct termios t;

	con->io = open(io, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (con->io < 0)
		fail(LKVM_STAGE_CONSOLE, errno, io);
	con->err = strcmp(io, err) ? open(err, O_RDWR | O_NOCTTY | O_CLOEXEC) : con->io;
	if (con->err < 0) {
		msg("%s: %s; CMD's stderr goes to %s", err, strerror(errno), io);
		con->err = con->io;
	}
	con->out = open_port(cfg.stdout_port, con->io);
	con->err = open_port(cfg.stderr_port, con->err);
	log_fd = con->err;
	/* raw: bytes pass unchanged both ways (no \n -> \r\n, no echo into stdout). A stderr
	 * console of its own is raw even for the shell: on the host it is a file or a pipe (a
	 * terminal shares the stdio console). */
	int fds[] = { con->io, con->err };
	bool raw[] = { cfg.tty == INITCFG_RAW, cfg.tty == INITCFG_RAW || con->err != con->io };

	for (size_t i = 0; i < 2; i++)
		if (raw[i] && !tcgetattr(fds[i], &t)) {
			cfmakeraw(&t);
			tcsetattr(fds[i], TCSANOW, &t);
		}
	/* Only now may CMD's stdin come (lkvm holds it until this report). */
	if (cfg.tty == INITCFG_RAW)
		report(LKVM_EXIT_WORD(LKVM_EXIT_STDIN_READY, 0, 0));
	if (cfg.rows) {
		struct winsize ws = { .ws_row = (unsigned short)cfg.rows,
				      .ws_col = (unsigned short)cfg.cols };

		ioctl(con->io, TIOCSWINSZ, &ws);
	}
}

/* CMD's environment: the host's (filtered by lkvm), PWD where it starts, and for the shell a
 * TERM if the host had none. */
static char **make_env(const char *cwd, bool shell)
{
	static char pwd[4096 + 5];
	char **env = calloc(cfg.envc + 3, sizeof(*env));
	size_t n = 0;

	if (!env)
		fail(LKVM_STAGE_FORK, ENOMEM, "environment");
	for (size_t i = 0; i < cfg.envc; i++)
		env[n++] = cfg.envp[i];
	snprintf(pwd, sizeof(pwd), "PWD=%s", cwd);
	env[n++] = pwd;
	if (shell && !cfg_getenv("TERM"))
		env[n++] = "TERM=linux";
	env[n] = NULL;
	return env;
}

static void __attribute__((noreturn))
exec_cmd(const struct consoles *con, int in, char **argv, char **env)
{
	const char *what = "";
	int e;

	setsid();
	/* The shell's terminal: its session's controlling tty, so job control and ^C work. */
	if (cfg.tty == INITCFG_TTY)
		ioctl(con->io, TIOCSCTTY, 1);
	if (dup2(in, 0) < 0 || dup2(con->out, 1) < 0 || dup2(con->err, 2) < 0)
		_exit(126);
	/* After the mounts and the terminal (TIOCSCTTY needs root), before the exec. */
	e = user_enter(&cfg, (const int[]){ 0, 1, 2 }, 3, &what);
	if (e) {
		log_fd = 2;
		msg("cannot run the command as uid %u: %s: %s", (unsigned)cfg.uid, what,
		    strerror(-e));
		_exit(126);
	}
	environ = env;
	execvp(argv[0], argv);
	e = errno;
	log_fd = 2;
	msg("%s: %s", argv[0], strerror(e));
	_exit(e == ENOENT ? 127 : 126);
}

/* CMD's framed stdin (raw mode), from the stdio console to the pipe `out` until the
 * end-of-input mark, which closes it (CMD reads its end of file). Runs as init's child; it
 * also ends when CMD closed its end (EPIPE), and init kills it once CMD ended. */
static void __attribute__((noreturn)) relay_stdin(int in, int out)
{
	struct initcfg_stdin_dec d = { 0 };
	uint8_t buf[4096], dec[sizeof(buf)];

	signal(SIGPIPE, SIG_DFL);
	while (!d.eof) {
		ssize_t n = read(in, buf, sizeof(buf));
		size_t m, off = 0;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		m = initcfg_stdin_decode(&d, buf, (size_t)n, dec);
		while (off < m) {
			ssize_t w = write(out, dec + off, m - off);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				_exit(0);
			off += (size_t)w;
		}
	}
	_exit(0);
}

/* CMD's stdin: the stdio console itself (tty), or a pipe fed by relay_stdin (raw). Returns
 * the descriptor for CMD, and the relay's pid in *relay (0: none). */
static int open_stdin(const struct consoles *con, pid_t *relay)
{
	int p[2];

	*relay = 0;
	if (cfg.tty == INITCFG_TTY)
		return con->io;
	if (pipe2(p, O_CLOEXEC))
		fail(LKVM_STAGE_FORK, errno, "stdin pipe");
	*relay = fork();
	if (*relay < 0)
		fail(LKVM_STAGE_FORK, errno, "stdin relay");
	if (*relay == 0) {
		close(p[0]);
		relay_stdin(con->io, p[1]);
	}
	close(p[1]);
	return p[0];
}

/* CMD's stdout and stderr where they are ports: pipes a relay empties into them (relay.h says
 * why); outs[] the relays' pids (0: none, CMD writes the console itself). */
static void open_outputs(const struct consoles *con, struct consoles *cmd, pid_t outs[2])
{
	int *fd[2] = { &cmd->out, &cmd->err };
	int port[2] = { con->out, con->err };
	bool is_port[2] = { cfg.stdout_port && con->out != con->io,
			    cfg.stderr_port && con->err != con->io };

	outs[0] = outs[1] = 0;
	for (int i = 0; i < 2; i++) {
		int w;

		if (!is_port[i])
			continue;
		w = relay_start(port[i], i ? cmd->out : -1, &outs[i]);
		if (w < 0)
			fail(LKVM_STAGE_FORK, -w, i ? "stderr relay" : "stdout relay");
		*fd[i] = w;
	}
}

/* Runs CMD (or the shell) and waits for it, reaping every other orphan meanwhile as PID 1
 * must; returns the exit-port word for how it ended. */
static uint32_t run(const struct consoles *con, const char *cwd)
{
	char *shell_argv[2] = { NULL, NULL };
	char **argv = cfg.argv, **env;
	struct consoles cmd = *con; /* what CMD gets: pipes in place of the ports */
	pid_t pid, relay, outs[2];
	int st, in;

	if (!cfg.argc) {
		const char *sh = cfg_getenv("SHELL");

		shell_argv[0] = (char *)(sh && sh[0] == '/' && !access(sh, X_OK) ? sh : "/bin/sh");
		argv = shell_argv;
	}
	env = make_env(cwd, !cfg.argc);
	in = open_stdin(con, &relay);
	open_outputs(con, &cmd, outs);
	pid = fork();
	if (pid < 0)
		fail(LKVM_STAGE_FORK, errno, argv[0]);
	if (pid == 0)
		exec_cmd(&cmd, in, argv, env);
	if (in != con->io)
		close(in);
	for (int i = 0; i < 2; i++)
		if (outs[i] > 0)
			close(i ? cmd.err : cmd.out);
	for (;;) {
		pid_t p = wait(&st);

		if (p == pid)
			break;
		if (p == relay)
			relay = 0; /* reaped: its pid may be anyone's now */
		for (int i = 0; i < 2; i++)
			if (p == outs[i])
				outs[i] = 0; /* the pipe's end: all its output went out */
		if (p < 0 && errno != EINTR)
			fail(LKVM_STAGE_FORK, errno, "wait");
	}
	/* Input CMD did not read is dropped with the relay. */
	if (relay > 0) {
		kill(relay, SIGKILL);
		waitpid(relay, NULL, 0);
	}
	relay_finish(outs[0]);
	relay_finish(outs[1]);
	/* Everything CMD wrote reaches lkvm before the report ends the run: a console's writes
	 * wait for lkvm (tcdrain), a port's lkvm takes from its ring at teardown
	 * (virtio_console_flush). */
	tcdrain(con->out);
	tcdrain(con->err);
	if (WIFSIGNALED(st))
		return LKVM_EXIT_WORD(LKVM_EXIT_SIGNALED, WTERMSIG(st), 0);
	return LKVM_EXIT_WORD(LKVM_EXIT_EXITED, WEXITSTATUS(st), 0);
}

int main(void)
{
	struct consoles con;
	const char *cwd;

	umask(022);
	mount_early();
	read_config();
	load_modules();
	if (cfg.root == INITCFG_ROOT_9P_OVERLAY)
		enter_root();
	mount_late();
	mount_shares();
	open_consoles(&con);
	cwd = cfg.cwd ? cfg.cwd : "/";
	if (chdir(cwd)) {
		msg("cannot enter %s (%s): starting in /", cwd, strerror(errno));
		cwd = "/";
		if (chdir(cwd))
			fail(LKVM_STAGE_MOUNT, errno, "/");
	}
	/* After the root (its /etc gets resolv.conf) and the consoles (its lines reach stderr). */
	init_net(&cfg, msg);
	finish(run(&con, cwd));
}

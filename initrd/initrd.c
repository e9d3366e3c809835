/* lkvm's initramfs for `run -- CMD`: init, modules, configuration, and CMD's environment. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/initrd.h"

/* Mount points init uses (lkvm-init.c): the basics, and where it assembles the 9p root. */
static const char *const initrd_dirs[] = {
	"/dev", "/proc", "/sys", "/tmp", "/run", "/lkvm/lower", "/lkvm/rw", "/lkvm/root",
};

#define CONSOLE_MAJOR 5 /* /dev/console, c 5 1: the kernel opens it as init's fds 0-2 */
#define CONSOLE_MINOR 1

/* The modules go in as NN-FILE (NN: load order), so a listing shows the order too. */
static int add_modules(struct cpio *c, const struct kmod_list *mods, char **paths, char *err,
		       size_t errlen)
{
	for (size_t i = 0; i < mods->n; i++) {
		const char *base = strrchr(mods->v[i].path, '/');
		size_t len;
		u8 *data;
		int ret;

		base = base ? base + 1 : mods->v[i].path;
		if (asprintf(&paths[i], INITRD_MODULE_DIR "/%02zu-%s", i, base) < 0) {
			paths[i] = NULL;
			return -ENOMEM;
		}
		ret = read_file(mods->v[i].path, &data, &len);
		if (ret) {
			errfmt(err, errlen, "module %s: %s: %s", mods->v[i].name, mods->v[i].path,
			       strerror(-ret));
			return ret;
		}
		ret = cpio_add_file(c, paths[i], 0644, data, len);
		free(data);
		if (ret) {
			errfmt(err, errlen, "module %s: adding it to the initramfs: %s",
			       mods->v[i].name, strerror(-ret));
			return ret;
		}
	}
	return 0;
}

static int add_config(struct cpio *c, const struct initcfg *cfg, char *const *paths, size_t n,
		      char *err, size_t errlen)
{
	struct initcfg full = *cfg;
	size_t len;
	char *buf;
	int ret;

	for (size_t i = 0; i < n; i++)
		full.modules[i] = paths[i];
	full.nr_modules = n;
	ret = initcfg_encode(&full, &buf, &len);
	if (ret) {
		errfmt(err, errlen, "encoding the guest's configuration: %s", strerror(-ret));
		return ret;
	}
	ret = cpio_add_file(c, INITCFG_PATH, 0644, buf, len);
	free(buf);
	if (ret)
		errfmt(err, errlen, "adding %s to the initramfs: %s", INITCFG_PATH, strerror(-ret));
	return ret;
}

int initrd_build(struct cpio *c, const struct initcfg *cfg, const struct kmod_list *mods, char *err,
		 size_t errlen)
{
	size_t n = mods ? mods->n : 0;
	char **paths;
	int ret = 0;

	if (cfg->nr_modules || n > INITCFG_MAX_MODULES) {
		errfmt(err, errlen, "%zu modules: at most %u", n + cfg->nr_modules,
		       INITCFG_MAX_MODULES);
		return -EINVAL;
	}
	for (size_t i = 0; i < ARRAY_SIZE(initrd_dirs) && !ret; i++)
		ret = cpio_add_dir(c, initrd_dirs[i], 0755);
	if (!ret)
		ret = cpio_add_chardev(c, "/dev/console", 0600, CONSOLE_MAJOR, CONSOLE_MINOR);
	if (!ret)
		ret = cpio_add_file(c, "/init", 0755, lkvm_init_start,
				    (size_t)(lkvm_init_end - lkvm_init_start));
	if (ret) {
		errfmt(err, errlen, "making the initramfs: %s", strerror(-ret));
		return ret;
	}
	paths = calloc(n + 1, sizeof(*paths));
	if (!paths)
		return -ENOMEM;
	if (n)
		ret = add_modules(c, mods, paths, err, errlen);
	if (!ret)
		ret = add_config(c, cfg, paths, n, err, errlen);
	for (size_t i = 0; i < n; i++)
		free(paths[i]);
	free(paths);
	return ret;
}

/* Host variables that name the host's session, sockets, processes or terminals: meaningless
 * (or misleading: tmux, ssh-agent clients) in the guest. PWD and OLDPWD: init sets PWD. */
static const char *const env_dropped[] = {
	"DISPLAY",
	"WAYLAND_DISPLAY",
	"XAUTHORITY",
	"SESSION_MANAGER",
	"DBUS_SESSION_BUS_ADDRESS",
	"XDG_RUNTIME_DIR",
	"XDG_SESSION_ID",
	"XDG_SESSION_TYPE",
	"XDG_SESSION_CLASS",
	"XDG_SEAT",
	"XDG_VTNR",
	"SSH_AUTH_SOCK",
	"SSH_AGENT_PID",
	"SSH_CONNECTION",
	"SSH_CLIENT",
	"SSH_TTY",
	"GPG_AGENT_INFO",
	"TMUX",
	"TMUX_PANE",
	"STY",
	"WINDOW",
	"WINDOWID",
	"LISTEN_FDS",
	"LISTEN_PID",
	"LISTEN_FDNAMES",
	"NOTIFY_SOCKET",
	"INVOCATION_ID",
	"JOURNAL_STREAM",
	"PWD",
	"OLDPWD",
	"_",
};

static bool env_wanted(const char *entry)
{
	size_t n = strcspn(entry, "=");

	if (!n || !entry[n] || strnlen(entry, INITCFG_MAX_STRING + 1) > INITCFG_MAX_STRING)
		return false; /* no NAME=VALUE, or longer than execve takes */
	for (size_t i = 0; i < ARRAY_SIZE(env_dropped); i++)
		if (strlen(env_dropped[i]) == n && !memcmp(env_dropped[i], entry, n))
			return false;
	return true;
}

char **initrd_env_filter(char *const *env, size_t *n)
{
	size_t total = 0, k = 0;
	char **out;

	while (env && env[total])
		total++;
	out = calloc(total + 1, sizeof(*out));
	if (!out)
		return NULL;
	for (size_t i = 0; i < total; i++)
		if (env_wanted(env[i]))
			out[k++] = env[i];
	*n = k;
	return out;
}

int initrd_make(const struct initcfg *cfg, const char *kernel_path, const char *moddir, bool mmio,
		u8 **data, size_t *len, char *err, size_t errlen)
{
	struct kmod_list mods = { 0 };
	struct cpio c = { 0 };
	int ret = kmod_for_kernel(kernel_path, moddir, mmio, cfg->nr_nics > 0, &mods, err, errlen);

	if (!ret)
		ret = initrd_build(&c, cfg, &mods, err, errlen);
	if (!ret)
		ret = cpio_finish(&c);
	kmod_list_free(&mods);
	if (ret) {
		if (!*err)
			errfmt(err, errlen, "making the initramfs: %s", strerror(-ret));
		cpio_free(&c);
		return ret;
	}
	*data = c.buf;
	*len = c.len;
	c.buf = NULL;
	cpio_free(&c);
	return 0;
}

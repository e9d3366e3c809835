/* Writes lkvm's initramfs for a command to a file (what `run -- CMD` makes in memory). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/initrd.h"

static void usage(void)
{
	fprintf(stderr,
		"usage: mkinitrd -o OUT [options] [--] [CMD [ARG...]]\n"
		"  -o FILE          the archive to write (uncompressed newc cpio)\n"
		"  -f HOST:GUEST    add the host file HOST at GUEST (0755; repeatable)\n"
		"  -e NAME=VALUE    an environment variable for CMD (repeatable)\n"
		"  -s TAG:PATH[:ro] a 9p share init mounts at PATH (repeatable)\n"
		"  -r TAG           root 9p-overlay on 9p TAG (default: stay in the initramfs)\n"
		"  -C DIR           CMD's working directory\n"
		"  -E DEV           CMD's stderr console (" INITCFG_DEFAULT_STDERR ")\n"
		"  -R               raw consoles (no line discipline; default: a terminal)\n"
		"  -m DIR -M NAME   load module NAME and its dependencies from DIR (repeatable)\n"
		"Without CMD, init runs a shell.\n");
	exit(2);
}

static void die(const char *what, int err)
{
	fprintf(stderr, "mkinitrd: %s: %s\n", what, strerror(err));
	exit(1);
}

static void add_file(struct cpio *c, char *spec)
{
	char *colon = strchr(spec, ':');
	size_t len;
	u8 *data;
	int ret;

	if (!colon)
		usage();
	*colon = '\0';
	ret = read_file(spec, &data, &len);
	if (ret)
		die(spec, -ret);
	ret = cpio_add_file(c, colon + 1, 0755, data, len);
	if (ret)
		die(colon + 1, -ret);
	free(data);
}

static void add_share(struct initcfg *cfg, char *spec)
{
	char *path = strchr(spec, ':'), *mode;

	if (!path || cfg->nr_shares == INITCFG_MAX_SHARES)
		usage();
	*path++ = '\0';
	mode = strchr(path, ':');
	if (mode)
		*mode++ = '\0';
	cfg->shares[cfg->nr_shares++] = (struct initcfg_share){ .tag = spec,
								.path = path,
								.ro = mode && !strcmp(mode, "ro") };
}

int main(int argc, char **argv)
{
	static char *env[256], *files[64], *names[64];
	size_t nr_files = 0, nr_names = 0;
	struct initcfg cfg = { .root = INITCFG_ROOT_INITRAMFS };
	struct kmod_list mods = { 0 };
	const char *out = NULL, *moddir = NULL;
	struct cpio c = { 0 };
	char err[512] = "";
	FILE *f;
	int opt, ret;

	while ((opt = getopt(argc, argv, "+o:f:e:s:r:C:E:Rm:M:h")) != -1) {
		switch (opt) {
		case 'o':
			out = optarg;
			break;
		case 'f':
			if (nr_files == 64)
				usage();
			files[nr_files++] = optarg;
			break;
		case 'e':
			if (cfg.envc == 255)
				usage();
			env[cfg.envc++] = optarg;
			break;
		case 's':
			add_share(&cfg, optarg);
			break;
		case 'r':
			cfg.root = INITCFG_ROOT_9P_OVERLAY;
			cfg.root_tag = optarg;
			break;
		case 'C':
			cfg.cwd = optarg;
			break;
		case 'E':
			cfg.stderr_dev = optarg;
			break;
		case 'R':
			cfg.tty = INITCFG_RAW;
			break;
		case 'm':
			moddir = optarg;
			break;
		case 'M':
			if (nr_names == 64)
				usage();
			names[nr_names++] = optarg;
			break;
		default:
			usage();
		}
	}
	if (!out || (nr_names && !moddir))
		usage();
	cfg.envp = env;
	cfg.argv = argv + optind;
	cfg.argc = (size_t)(argc - optind);
	if (nr_names) {
		ret = kmod_resolve(moddir, (const char *const *)names, nr_names, &mods, err,
				   sizeof(err));
		if (ret)
			die(err, -ret);
	}
	ret = initrd_build(&c, &cfg, &mods, err, sizeof(err));
	if (ret)
		die(err, -ret);
	for (size_t i = 0; i < nr_files; i++)
		add_file(&c, files[i]);
	ret = cpio_finish(&c);
	if (ret)
		die("finishing the archive", -ret);
	f = fopen(out, "wb");
	if (!f || fwrite(c.buf, 1, c.len, f) != c.len || fclose(f))
		die(out, errno);
	kmod_list_free(&mods);
	cpio_free(&c);
	return 0;
}

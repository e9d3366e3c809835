/* `--share HOSTDIR[:GUESTDIR][,ro][,trans=pci|mmio][,fids=N][,cache=MODE]`: one shared directory per option (virtio-9p, virtio-fs or both: --fs). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lkvm/opt.h"
#include "lkvm/p9.h"
#include "lkvm/virtio-9p.h"

#define SHARE(member) OPT_AT(struct p9_share, member)

/* virtiofsd's names (and "never", its Rust version's for none). */
const struct opt_choice fuse_cache_choices[] = {
	{ "auto", FUSE_CACHE_AUTO },
	{ "always", FUSE_CACHE_ALWAYS },
	{ "none", FUSE_CACHE_NONE },
	{ "never", FUSE_CACHE_NONE },
	{ NULL, 0 },
};

/* The suffixes after the directories. */
static const struct opt share_keys[] = {
	{ "ro", 0, OPT_FLAG, SHARE(ro), .help = "read-only: every change refused (EROFS)" },
	{ "trans", 0, OPT_CHOICE, SHARE(trans), OPT_GIVEN(struct p9_share, trans_set),
	  .choices = virtio_trans_choices, .help = "the transport (default: --virtio-transport)" },
	{ "fids", 0, OPT_UINT, SHARE(fids), .min = 16, .max = P9_FIDS_MAX,
	  .help = "the most fids the guest may hold (default 1048576; memory, not descriptors)" },
	{ "cache", 0, OPT_CHOICE, SHARE(cache), .choices = fuse_cache_choices,
	  .help = "virtio-fs caching: auto (default: host writes seen),\n"
		  "always (long timeouts, contents kept), none (never/direct I/O)" },
	{ .kind = OPT_END },
};

const struct opt_set p9_share_opt_set = {
	.opts = share_keys,
	.prefix = "--share ",
	.verb = "want",
	.name = "--share",
	.lenient = true,
	.help_col = 20,
};

/* HOSTDIR made absolute and checked to be a directory now (a clear error at the command
 * line rather than at device set-up). */
static int share_host_dir(struct p9_share *sh, const char *dir, char *err, size_t errlen)
{
	struct stat st;
	char *abs;

	if (!*dir) {
		errfmt(err, errlen, "no host directory (HOSTDIR[:GUESTDIR][,ro])");
		return -EINVAL;
	}
	abs = realpath(dir, NULL);
	if (!abs || stat(abs, &st) < 0) {
		errfmt(err, errlen, "host directory '%s': %s", dir, strerror(errno));
		free(abs);
		return -ENOENT;
	}
	if (!S_ISDIR(st.st_mode) || strlen(abs) >= sizeof(sh->host_dir)) {
		errfmt(err, errlen, "'%s' is not a directory", dir);
		free(abs);
		return -ENOTDIR;
	}
	strcpy(sh->host_dir, abs);
	free(abs);
	return 0;
}

/* HOSTDIR[:GUESTDIR] (arg is the copy to cut up) */
static int parse_dirs(struct p9_share *sh, int index, char *arg, char *err, size_t errlen)
{
	char *guest;
	int ret;

	guest = strchr(arg, ':');
	if (guest)
		*guest++ = '\0';
	ret = share_host_dir(sh, arg, err, errlen);
	if (ret < 0)
		return ret;
	if (guest && (guest[0] != '/' || strlen(guest) >= sizeof(sh->guest_dir))) {
		errfmt(err, errlen, "guest directory '%s' is not an absolute path", guest);
		return -EINVAL;
	}
	strcpy(sh->guest_dir, guest ? guest : sh->host_dir);
	snprintf(sh->tag, sizeof(sh->tag), VIRTIO_9P_SHARE_TAG "%d", index);
	return 0;
}

int p9_share_parse(struct p9_shares *s, const char *arg, char *err, size_t errlen)
{
	struct p9_share *sh;
	char why[PATH_MAX + 128];
	char *copy;
	int ret;

	if (s->nr >= VIRTIO_9P_MAX_SHARES) {
		errfmt(err, errlen, "--share: at most %d shares", VIRTIO_9P_MAX_SHARES);
		return -E2BIG;
	}
	copy = strndup(arg, strcspn(arg, ","));
	if (!copy)
		return -ENOMEM;
	sh = &s->share[s->nr];
	memset(sh, 0, sizeof(*sh));
	ret = parse_dirs(sh, s->nr, copy, why, sizeof(why));
	free(copy);
	if (ret < 0) {
		errfmt(err, errlen, "--share '%s': %s", arg, why);
		return ret;
	}
	if (opt_parse_kv(&p9_share_opt_set, arg + strcspn(arg, ","), arg, sh, NULL, err, errlen) <
	    0)
		return -EINVAL;
	s->nr++;
	return 0;
}

const struct p9_share *p9_share_get(const struct p9_shares *s, int i)
{
	return s && i >= 0 && i < s->nr ? &s->share[i] : NULL;
}

int p9_shares_on(const struct p9_shares *s, enum virtio_trans dflt, enum virtio_trans t)
{
	int n = 0;

	for (int i = 0; s && i < s->nr; i++)
		if ((s->share[i].trans_set ? s->share[i].trans : dflt) == t)
			n += !s->share[i].no_9p + s->share[i].vfs;
	return n;
}

/* The options of -d (virtio-blk): the keys after the image path, their help, and the parse into struct blk_opts. */
#include <errno.h>
#include <string.h>

#include "lkvm/opt.h"
#include "lkvm/virtio-blk.h"

static const struct opt_choice aio_choices[] = {
	{ "libaio", BLK_IO_LIBAIO },
	{ "sync", BLK_IO_SYNC },
	{ NULL, 0 },
};
static const struct opt_choice snapshot_choices[] = { { "on", true },
						      { "off", false },
						      { NULL, 0 } };
static const struct opt_choice direct_choices[] = { { "on", false }, { "off", true }, { NULL, 0 } };

#define BLK(member) OPT_AT(struct blk_opts, member)

static int backing_opt(const struct opt *o, const char *v, void *base, char *err, size_t errlen)
{
	struct blk_opts *b = base;

	if (!v || !*v || strlen(v) >= sizeof(b->backing)) {
		errfmt(err, errlen, "-d backing: give a path");
		return -EINVAL;
	}
	strcpy(b->backing, v);
	return 0;
}

/* What may follow -d PATH (any item refused is an "unknown option"). */
static const struct opt blk_keys[] = {
	{ "ro", 0, OPT_FLAG, BLK(ro), .help = "read-only" },
	{ "trans", 0, OPT_CHOICE, BLK(trans), OPT_GIVEN(struct blk_opts, trans_set),
	  .choices = virtio_trans_choices, .help = "the transport (default: --virtio-transport)" },
	{ "aio", 0, OPT_CHOICE, BLK(io), .choices = aio_choices,
	  .help = "I/O through libaio (default) or pread/pwrite" },
	{ "direct", 0, OPT_CHOICE, BLK(no_direct), .choices = direct_choices,
	  .help = "on (default): O_DIRECT where the file system\nallows it" },
	{ "backing", 0, OPT_FN, .fn = backing_opt, .arg = "PATH",
	  .help = "a qcow2 image's backing file (else only one\nbeside the image is opened)" },
	{ "snapshot", 0, OPT_CHOICE, BLK(snapshot), .choices = snapshot_choices,
	  .help = "on: writes go to a private overlay discarded\nat exit; the image is never written" },
	{ .kind = OPT_END },
};

const struct opt_set blk_opt_set = {
	.opts = blk_keys,
	.prefix = "-d ",
	.verb = "want",
	.name = "-d",
	.lenient = true,
	.help_col = 20,
};

int blk_parse_opts(const char *arg, struct blk_opts *o, char *err, size_t errlen)
{
	size_t n = strlen(arg), plen = strcspn(arg, ",");
	char keys[128];

	memset(o, 0, sizeof(*o));
	if (n == 0 || n >= PATH_MAX + 64) {
		opt_kv_list(&blk_opt_set, keys, sizeof(keys));
		errfmt(err, errlen, "-d: give an image path (and options: %s)", keys);
		return -EINVAL;
	}
	if (plen == 0 || plen >= sizeof(o->path)) {
		errfmt(err, errlen, "-d '%s': give an image path first", arg);
		return -EINVAL;
	}
	memcpy(o->path, arg, plen);
	o->path[plen] = '\0';
	return opt_parse_kv(&blk_opt_set, arg + plen, arg, o, NULL, err, errlen) < 0 ? -EINVAL : 0;
}

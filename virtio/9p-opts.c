/* `--share HOSTDIR[:GUESTDIR][,ro]`: one virtio-9p share per option. */
#include <errno.h>

#include "lkvm/virtio-9p.h"

int p9_share_parse(struct p9_shares *s, const char *arg, char *err, size_t errlen)
{
	errfmt(err, errlen, "--share: not implemented yet");
	return -ENOSYS;
}

const struct p9_share *p9_share_get(const struct p9_shares *s, int i)
{
	return i >= 0 && i < s->nr ? &s->share[i] : NULL;
}

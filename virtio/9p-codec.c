/* The 9P2000.L message codec: little-endian fields, strings and names checked as they are read, replies built within their room, qids of host files. */
#include <string.h>
#include <sys/stat.h>

#include "9p-priv.h"

#define P9_QID_INO_BITS 48

/* ---- message decoding and encoding ---- */

static u64 get(struct p9_call *c, unsigned bytes)
{
	u64 v = 0;

	if (c->in_left < bytes) {
		c->in_short = true;
		c->in_left = 0;
		return 0;
	}
	for (unsigned i = 0; i < bytes; i++)
		v |= (u64)c->in[i] << (8 * i);
	c->in += bytes;
	c->in_left -= bytes;
	return v;
}

u8 p9_get8(struct p9_call *c)
{
	return (u8)get(c, 1);
}

u16 p9_get16(struct p9_call *c)
{
	return (u16)get(c, 2);
}

u32 p9_get32(struct p9_call *c)
{
	return (u32)get(c, 4);
}

u64 p9_get64(struct p9_call *c)
{
	return get(c, 8);
}

/* A string's bytes inside the body copy (not NUL-terminated); NULL when it runs past the end. */
const char *p9_get_str(struct p9_call *c, u16 *len)
{
	const char *p;

	*len = p9_get16(c);
	if (c->in_short || *len > c->in_left) {
		c->in_short = true;
		c->in_left = 0;
		*len = 0;
		return NULL;
	}
	p = (const char *)c->in;
	c->in += *len;
	c->in_left -= *len;
	return p;
}

/* Whatever was wrong with the request's fields, or 0: the message ended early (-EPROTO),
 * else the first string refused. Handlers parse every field, then look here (p9_fid_req does). */
int p9_parse_error(const struct p9_call *c)
{
	return c->in_short ? -EPROTO : c->bad;
}

static void refuse(struct p9_call *c, char *buf, int err)
{
	buf[0] = '\0';
	if (!c->bad)
		c->bad = err;
}

/*
 * A string into buf (NUL-terminated), refused (p9_parse_error()) beyond max bytes
 * (-ENAMETOOLONG), with a NUL inside (C would cut it short) or empty when !may_be_empty
 * (-EINVAL).
 */
void p9_get_cstr(struct p9_call *c, char *buf, size_t max, bool may_be_empty)
{
	u16 len;
	const char *p = p9_get_str(c, &len);

	if (!p)
		buf[0] = '\0'; /* in_short says so */
	else if (len > max)
		refuse(c, buf, -ENAMETOOLONG);
	else if ((!len && !may_be_empty) || memchr(p, '\0', len))
		refuse(c, buf, -EINVAL);
	else {
		memcpy(buf, p, len);
		buf[len] = '\0';
	}
}

/* One path component: not empty, no '/', not "." nor ".." (unless dotdot_ok, for Twalk). */
void p9_get_name(struct p9_call *c, char name[NAME_MAX + 1], bool dotdot_ok)
{
	p9_get_cstr(c, name, NAME_MAX, false);
	if (strchr(name, '/') || !strcmp(name, ".") || (!dotdot_ok && !strcmp(name, "..")))
		refuse(c, name, -EINVAL);
}

static void put(struct p9_call *c, u64 v, unsigned bytes)
{
	if (c->out_cap - c->out_len < bytes) {
		c->out_over = true;
		return;
	}
	for (unsigned i = 0; i < bytes; i++)
		c->out[c->out_len++] = (u8)(v >> (8 * i));
}

void p9_put8(struct p9_call *c, u8 v)
{
	put(c, v, 1);
}

void p9_put16(struct p9_call *c, u16 v)
{
	put(c, v, 2);
}

void p9_put32(struct p9_call *c, u32 v)
{
	put(c, v, 4);
}

void p9_put64(struct p9_call *c, u64 v)
{
	put(c, v, 8);
}

void p9_put_str(struct p9_call *c, const char *p, size_t len)
{
	if (len > 0xffff || c->out_cap - c->out_len < 2 + len) {
		c->out_over = true;
		return;
	}
	p9_put16(c, (u16)len);
	memcpy(c->out + c->out_len, p, len);
	c->out_len += len;
}

void p9_put_qid(struct p9_call *c, const struct p9_qid *q)
{
	p9_put8(c, q->type);
	p9_put32(c, q->version);
	p9_put64(c, q->path);
}

/* ---- qids ---- */

/*
 * qid.path must be unique across the share, but a share spans mounts whose inode numbers
 * overlap: each host device met gets an index, put above the inode's 48 bits (the share's
 * own device is index 0, so its qid paths are its inode numbers). Past P9_QID_DEVS devices,
 * or for an inode number of 48 bits or more, the path is folded into prefix 0xffff:
 * unique in practice, not guaranteed.
 */
u64 p9_qid_path(struct p9_server *s, dev_t dev, u64 ino)
{
	const u64 mask = (1ull << P9_QID_INO_BITS) - 1;
	u32 i;

	for (i = 0; i < s->ndevs && s->devs[i] != dev; i++)
		;
	if (i == s->ndevs && i < P9_QID_DEVS)
		s->devs[s->ndevs++] = dev;
	if (i < s->ndevs && ino <= mask)
		return (u64)i << P9_QID_INO_BITS | ino;
	return 0xffffull << P9_QID_INO_BITS | ((ino ^ (u64)dev * 0x9e3779b97f4a7c15ull) & mask);
}

static u8 qid_type(u32 mode)
{
	return S_ISDIR(mode) ? P9_QTDIR : S_ISLNK(mode) ? P9_QTSYMLINK : P9_QTFILE;
}

/* version: the modification time, as kvmtool and QEMU do (cached clients notice changes). */
void p9_qid_of(struct p9_server *s, const struct stat *st, struct p9_qid *q)
{
	q->type = qid_type(st->st_mode);
	q->version = (u32)st->st_mtim.tv_sec;
	q->path = p9_qid_path(s, st->st_dev, st->st_ino);
}

/*
 * Room for a reply body of n bytes? Looked at before an operation acts: a request carried
 * out, then answered with an error because the answer did not fit, would leave the guest
 * believing nothing happened (a file it did not make, a fid it does not know of). The
 * ops table gives each operation's largest reply; Twalk, Treadlink and Tgetlock, whose
 * reply size the request (or the link) decides, ask here themselves.
 */
int p9_room(const struct p9_call *c, size_t n)
{
	return n <= c->out_cap ? 0 : -EMSGSIZE;
}

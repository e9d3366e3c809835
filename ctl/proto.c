/* The control protocol's encoding: message header, field lists, whole-message I/O with length checks, VM names. */
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lkvm/ctl.h"

void ctl_msg_init(struct ctl_msg *m, u16 type, u32 status)
{
	memset(m, 0, sizeof(*m));
	m->hdr = (struct ctl_hdr){
		.magic = CTL_MAGIC, .version = CTL_VERSION, .type = type, .status = status
	};
}

void ctl_msg_free(struct ctl_msg *m)
{
	free(m->buf);
	m->buf = NULL;
	m->len = m->cap = 0;
}

static int reserve(struct ctl_msg *m, size_t more)
{
	size_t cap;
	u8 *b;

	if (m->oom)
		return -ENOMEM;
	if (more > CTL_MAX_REPLY - m->len) {
		m->oom = true;
		return -EMSGSIZE;
	}
	if (m->len + more <= m->cap)
		return 0;
	cap = MAX(m->cap * 2, (size_t)256);
	while (cap < m->len + more)
		cap *= 2;
	b = realloc(m->buf, cap);
	if (!b) {
		m->oom = true;
		return -ENOMEM;
	}
	m->buf = b;
	m->cap = cap;
	return 0;
}

/* The characters of VM names and field names: [A-Za-z0-9._-]. */
static bool name_chars_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

/* A field name: 1..CTL_NAME_MAX of those, so a client may print it (and put it in JSON) as
 * it is. */
static bool field_name_ok(const char *name, size_t n)
{
	return n > 0 && n <= CTL_NAME_MAX && name_chars_ok(name, n);
}

static int add_head(struct ctl_msg *m, u8 kind, const char *name, size_t extra)
{
	size_t n = name ? strlen(name) : 0;
	int ret;

	if (!field_name_ok(name, n)) {
		m->oom = true;
		return -EINVAL;
	}
	ret = reserve(m, 2 + n + extra);
	if (ret < 0)
		return ret;
	m->buf[m->len++] = kind;
	m->buf[m->len++] = (u8)n;
	memcpy(m->buf + m->len, name, n);
	m->len += n;
	return 0;
}

int ctl_add_u64(struct ctl_msg *m, const char *name, u64 v)
{
	u64 le = htole64(v);
	int ret = add_head(m, CTL_F_U64, name, 8);

	if (ret < 0)
		return ret;
	memcpy(m->buf + m->len, &le, 8);
	m->len += 8;
	return 0;
}

int ctl_add_strn(struct ctl_msg *m, const char *name, const char *s, size_t len)
{
	u16 le;
	int ret;

	if (len > CTL_STR_MAX) {
		m->oom = true;
		return -EINVAL;
	}
	ret = add_head(m, CTL_F_STR, name, 2 + len);
	if (ret < 0)
		return ret;
	le = htole16((u16)len);
	memcpy(m->buf + m->len, &le, 2);
	memcpy(m->buf + m->len + 2, s, len);
	m->len += 2 + len;
	return 0;
}

int ctl_add_str(struct ctl_msg *m, const char *name, const char *s)
{
	return ctl_add_strn(m, name, s, strlen(s));
}

void ctl_hdr_encode(const struct ctl_hdr *h, u8 out[CTL_HDR_LEN])
{
	u32 magic = htole32(h->magic), status = htole32(h->status), len = htole32(h->len);
	u16 version = htole16(h->version), type = htole16(h->type);

	memcpy(out, &magic, 4);
	memcpy(out + 4, &version, 2);
	memcpy(out + 6, &type, 2);
	memcpy(out + 8, &status, 4);
	memcpy(out + 12, &len, 4);
}

int ctl_hdr_decode(const u8 in[CTL_HDR_LEN], u32 max, struct ctl_hdr *h)
{
	u32 magic, status, len;
	u16 version, type;

	memcpy(&magic, in, 4);
	memcpy(&version, in + 4, 2);
	memcpy(&type, in + 6, 2);
	memcpy(&status, in + 8, 4);
	memcpy(&len, in + 12, 4);
	*h = (struct ctl_hdr){ .magic = le32toh(magic),
			       .version = le16toh(version),
			       .type = le16toh(type),
			       .status = le32toh(status),
			       .len = le32toh(len) };
	if (h->magic != CTL_MAGIC)
		return -EPROTO;
	if (h->version != CTL_VERSION)
		return -EPROTONOSUPPORT;
	if (h->len > max)
		return -EMSGSIZE;
	return 0;
}

int ctl_next_field(const u8 *p, size_t len, size_t *off, struct ctl_field *f)
{
	size_t o = *off, n;

	if (o == len)
		return 0;
	if (o > len || len - o < 2)
		return -EBADMSG;
	f->kind = p[o];
	n = p[o + 1];
	if (n == 0 || n > CTL_NAME_MAX || len - o - 2 < n ||
	    !field_name_ok((const char *)p + o + 2, n))
		return -EBADMSG;
	memcpy(f->name, p + o + 2, n);
	f->name[n] = '\0';
	o += 2 + n;
	f->u = 0;
	f->str = NULL;
	f->str_len = 0;
	if (f->kind == CTL_F_U64) {
		u64 v;

		if (len - o < 8)
			return -EBADMSG;
		memcpy(&v, p + o, 8);
		f->u = le64toh(v);
		o += 8;
	} else if (f->kind == CTL_F_STR) {
		u16 sl;

		if (len - o < 2)
			return -EBADMSG;
		memcpy(&sl, p + o, 2);
		sl = le16toh(sl);
		if (len - o - 2 < sl)
			return -EBADMSG;
		f->str = (const char *)p + o + 2;
		f->str_len = sl;
		o += 2 + (size_t)sl;
	} else {
		return -EBADMSG;
	}
	*off = o;
	return 1;
}

int ctl_payload_check(const u8 *p, size_t len)
{
	struct ctl_field f;
	size_t off = 0;
	int r;

	while ((r = ctl_next_field(p, len, &off, &f)) > 0)
		;
	return r;
}

int ctl_find(const u8 *p, size_t len, const char *name, enum ctl_field_kind kind,
	     struct ctl_field *f)
{
	size_t off = 0;

	while (ctl_next_field(p, len, &off, f) > 0)
		if (f->kind == kind && !strcmp(f->name, name))
			return 0;
	return -ENOENT;
}

/* ---- whole messages on a socket ---- */

static int write_all(int fd, const u8 *p, size_t len)
{
	while (len) {
		ssize_t w = send(fd, p, len, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int ctl_send(int fd, const struct ctl_msg *m)
{
	struct ctl_hdr h = m->hdr;
	u8 hb[CTL_HDR_LEN];
	int ret;

	if (m->oom || m->len > CTL_MAX_REPLY)
		return -EMSGSIZE;
	h.len = (u32)m->len;
	ctl_hdr_encode(&h, hb);
	ret = write_all(fd, hb, sizeof(hb));
	if (ret == 0 && m->len)
		ret = write_all(fd, m->buf, m->len);
	return ret;
}

int ctl_send_fd(int sock, const struct ctl_msg *m, int fd)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctrl;
	struct ctl_hdr h = m->hdr;
	u8 hb[CTL_HDR_LEN];
	struct iovec iov = { hb, sizeof(hb) };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = ctrl.buf,
			     .msg_controllen = sizeof(ctrl.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	ssize_t n;

	if (m->oom || m->len > CTL_MAX_REQUEST)
		return -EMSGSIZE;
	h.len = (u32)m->len;
	ctl_hdr_encode(&h, hb);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	/* The descriptor rides on the header's bytes: the server reads them with recvmsg. */
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if ((size_t)n < sizeof(hb) && write_all(sock, hb + n, sizeof(hb) - (size_t)n) < 0)
		return -EIO;
	return m->len ? write_all(sock, m->buf, m->len) : 0;
}

/* Read exactly len bytes; *got tells how many arrived (for EOF-before-anything vs mid-message). */
static int read_full(int fd, u8 *p, size_t len, int timeout_ms, size_t *got)
{
	*got = 0;
	while (*got < len) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t r;
		int pr = poll(&pfd, 1, timeout_ms);

		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return -errno;
		if (pr == 0)
			return -ETIMEDOUT;
		r = recv(fd, p + *got, len - *got, MSG_DONTWAIT);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EPIPE;
		*got += (size_t)r;
	}
	return 0;
}

int ctl_recv(int fd, struct ctl_msg *m, u32 max, int timeout_ms)
{
	u8 hb[CTL_HDR_LEN];
	size_t got;
	int ret;

	memset(m, 0, sizeof(*m));
	ret = read_full(fd, hb, sizeof(hb), timeout_ms, &got);
	if (ret == -EPIPE && got == 0)
		return -ECONNRESET;
	if (ret < 0)
		return ret;
	ret = ctl_hdr_decode(hb, max, &m->hdr);
	if (ret < 0)
		return ret;
	if (m->hdr.len) {
		m->buf = malloc(m->hdr.len);
		if (!m->buf)
			return -ENOMEM;
		m->cap = m->hdr.len;
		ret = read_full(fd, m->buf, m->hdr.len, timeout_ms, &got);
		if (ret < 0) {
			ctl_msg_free(m);
			return ret;
		}
	}
	m->len = m->hdr.len;
	ret = ctl_payload_check(m->buf, m->len);
	if (ret < 0)
		ctl_msg_free(m);
	return ret;
}

bool ctl_name_valid(const char *name)
{
	size_t n = strlen(name);

	return n > 0 && n <= 64 && name[0] != '.' && name[0] != '-' && name_chars_ok(name, n);
}

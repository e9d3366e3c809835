/* What the control commands share: one call to a named VM with its errors in words, decoded reply fields, JSON and duration output. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/ctl.h"

/* A VM's text as this side keeps and prints it: bytes outside printable ASCII as \xNN (a
 * newline kept, for debug's text), so whatever answers on a VM's socket cannot send the
 * terminal escape sequences or move the cursor back over other lines. */
static char *escape(const char *s, size_t len)
{
	char *out = malloc(len * 4 + 1), *o = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c >= 0x20 && c < 0x7f) || c == '\n') {
			*o++ = (char)c;
		} else {
			snprintf(o, 5, "\\x%02x", c);
			o += 4;
		}
	}
	*o = '\0';
	return out;
}

int ctl_kvs_decode(const struct ctl_msg *m, struct ctl_kvs *out)
{
	struct ctl_field f;
	size_t off = 0, cap = 0;
	int r;

	memset(out, 0, sizeof(*out));
	while ((r = ctl_next_field(m->buf, m->len, &off, &f)) > 0) {
		struct ctl_kv *kv;

		if (out->n == cap) {
			struct ctl_kv *v = realloc(out->v, (cap ? cap * 2 : 32) * sizeof(*v));

			if (!v) {
				ctl_kvs_free(out);
				return -ENOMEM;
			}
			out->v = v;
			cap = cap ? cap * 2 : 32;
		}
		kv = &out->v[out->n];
		memset(kv, 0, sizeof(*kv));
		memcpy(kv->name, f.name, sizeof(kv->name));
		kv->is_str = f.kind == CTL_F_STR;
		kv->u = f.u;
		if (kv->is_str) {
			kv->s = escape(f.str, f.str_len);
			if (!kv->s) {
				ctl_kvs_free(out);
				return -ENOMEM;
			}
		}
		out->n++;
	}
	if (r < 0)
		ctl_kvs_free(out);
	return r;
}

void ctl_kvs_free(struct ctl_kvs *k)
{
	for (size_t i = 0; i < k->n; i++)
		free(k->v[i].s);
	free(k->v);
	k->v = NULL;
	k->n = 0;
}

const struct ctl_kv *ctl_kv_get(const struct ctl_kvs *k, const char *name)
{
	for (size_t i = 0; i < k->n; i++)
		if (!strcmp(k->v[i].name, name))
			return &k->v[i];
	return NULL;
}

u64 ctl_kv_u64(const struct ctl_kvs *k, const char *name)
{
	const struct ctl_kv *kv = ctl_kv_get(k, name);

	return kv && !kv->is_str ? kv->u : 0;
}

const char *ctl_kv_str(const struct ctl_kvs *k, const char *name)
{
	const struct ctl_kv *kv = ctl_kv_get(k, name);

	return kv && kv->is_str ? kv->s : "";
}

int ctl_cli_connect(const char *dir, const char *name, char *err, size_t errlen)
{
	int fd = ctl_connect(dir, name, err, errlen);

	if (fd == -ECONNREFUSED && ctl_remove_stale(dir, name) == 1)
		pr_info("removed the stale socket of '%s' (its VM was killed)", name);
	return fd;
}

int ctl_request(int fd, const char *name, u16 type, struct ctl_kvs *out, int timeout_ms, char *err,
		size_t errlen)
{
	struct ctl_msg reply;
	char why[256];
	int ret;

	memset(out, 0, sizeof(*out));
	ret = ctl_call(fd, type, &reply, timeout_ms, why, sizeof(why));
	if (ret < 0) {
		errfmt(err, errlen, "%s: %s", name, why);
		return ret;
	}
	ret = ctl_kvs_decode(&reply, out);
	if (ret < 0) {
		errfmt(err, errlen, "%s: malformed reply: %s", name, strerror(-ret));
	} else if (reply.hdr.status != CTL_OK) {
		const char *e = ctl_kv_str(out, "error");

		errfmt(err, errlen, "%s", *e ? e : "the VM refused the request");
		ctl_kvs_free(out);
		ret = -EREMOTEIO;
	}
	ctl_msg_free(&reply);
	return ret;
}

int ctl_cli_call(const char *name, u16 type, struct ctl_kvs *out, int *fd_out, int timeout_ms)
{
	char dir[PATH_MAX], err[512];
	int fd;

	memset(out, 0, sizeof(*out));
	if (fd_out)
		*fd_out = -1;
	if (ctl_runtime_dir(dir, sizeof(dir)) < 0) {
		pr_err("the runtime directory's path is too long");
		return 1;
	}
	fd = ctl_cli_connect(dir, name, err, sizeof(err));
	if (fd < 0) {
		pr_err("%s", err);
		return 1;
	}
	if (ctl_request(fd, name, type, out, timeout_ms, err, sizeof(err)) < 0) {
		pr_err("%s", err);
		close(fd);
		return 1;
	}
	if (fd_out)
		*fd_out = fd;
	else
		close(fd);
	return 0;
}

int ctl_cli_names(char *dir, size_t dirlen, char ***names, size_t *n)
{
	char err[512];
	int e;

	*names = NULL;
	*n = 0;
	if (ctl_runtime_dir(dir, dirlen) < 0) {
		pr_err("the runtime directory's path is too long");
		return 1;
	}
	e = ctl_dir_check(dir, err, sizeof(err));
	if (e == -ENOENT)
		return 0;
	if (e < 0) {
		pr_err("%s", err);
		return 1;
	}
	*names = ctl_list_names(dir, n, &e);
	if (e < 0) {
		pr_err("cannot read %s: %s", dir, strerror(-e));
		return 1;
	}
	return 0;
}

void ctl_names_free(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

int ctl_wait_gone(int fd, int pidfd, int timeout_ms)
{
	/* The pidfd turns readable when the process has exited; without one, the connection's
	 * end (what a server does at its very end) is all there is to go by. */
	struct pollfd p = { .fd = pidfd >= 0 ? pidfd : fd, .events = POLLIN };
	u64 end = now_ns() + (u64)timeout_ms * 1000000ull;
	char b[64];

	for (;;) {
		u64 now = now_ns();
		int r;

		if (now >= end)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)((end - now) / 1000000 + 1));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			continue;
		if (pidfd >= 0 || read(fd, b, sizeof(b)) <= 0)
			return 0;
		/* bytes after the reply: nothing is expected; ignore them */
	}
}

void ctl_json_str(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", out);
		else if (c < 0x20)
			fprintf(out, "\\u%04x", c);
		else
			fputc(c, out);
	}
	fputc('"', out);
}

void ctl_fmt_duration(char *buf, size_t len, u64 ns)
{
	u64 s = ns / 1000000000ull;

	if (s < 60)
		snprintf(buf, len, "%.1fs", (double)ns / 1e9);
	else if (s < 3600)
		snprintf(buf, len, "%llum%02llus", (unsigned long long)(s / 60),
			 (unsigned long long)(s % 60));
	else
		snprintf(buf, len, "%lluh%02llum%02llus", (unsigned long long)(s / 3600),
			 (unsigned long long)(s / 60 % 60), (unsigned long long)(s % 60));
}

bool ctl_cli_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return true;
	return false;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

char **ctl_list_names(const char *dir, size_t *n, int *err)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **v = NULL;
	size_t cap = 0;

	*n = 0;
	*err = 0;
	if (!d) {
		*err = errno == ENOENT ? 0 : -errno;
		return NULL;
	}
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		char **nv;

		if (l <= 5 || strcmp(e->d_name + l - 5, ".sock"))
			continue;
		if (*n == cap) {
			nv = realloc(v, (cap = cap ? cap * 2 : 16) * sizeof(*v));
			if (!nv)
				break;
			v = nv;
		}
		v[*n] = strndup(e->d_name, l - 5);
		if (v[*n] && ctl_name_valid(v[*n]))
			(*n)++;
		else
			free(v[*n]);
	}
	closedir(d);
	if (*n)
		qsort(v, *n, sizeof(*v), by_name);
	return v;
}

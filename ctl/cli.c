/* What the control commands share: one call to a named VM with its errors in words, decoded reply fields, JSON and duration output. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/ctl.h"

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
			kv->s = strndup(f.str, f.str_len);
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

int ctl_cli_call(const char *name, u16 type, struct ctl_kvs *out, int *fd_out, int timeout_ms)
{
	char dir[PATH_MAX], err[512];
	struct ctl_msg reply;
	int fd, ret;

	memset(out, 0, sizeof(*out));
	if (fd_out)
		*fd_out = -1;
	if (ctl_runtime_dir(dir, sizeof(dir)) < 0) {
		pr_err("the runtime directory's path is too long");
		return 1;
	}
	fd = ctl_connect(dir, name, err, sizeof(err));
	if (fd == -ECONNREFUSED && ctl_remove_stale(dir, name) == 1)
		pr_info("removed the stale socket of '%s' (its VM was killed)", name);
	if (fd < 0) {
		pr_err("%s", err);
		return 1;
	}
	ret = ctl_call(fd, type, &reply, timeout_ms, err, sizeof(err));
	if (ret < 0) {
		pr_err("%s: %s", name, err);
		close(fd);
		return 1;
	}
	ret = ctl_kvs_decode(&reply, out);
	if (ret < 0) {
		pr_err("%s: malformed reply: %s", name, strerror(-ret));
		ctl_msg_free(&reply);
		close(fd);
		return 1;
	}
	if (reply.hdr.status != CTL_OK) {
		const char *e = ctl_kv_str(out, "error");

		pr_err("%s", *e ? e : "the VM refused the request");
		ctl_kvs_free(out);
		ctl_msg_free(&reply);
		close(fd);
		return 1;
	}
	ctl_msg_free(&reply);
	if (fd_out)
		*fd_out = fd;
	else
		close(fd);
	return 0;
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
		snprintf(buf, len, "%llum%02llus", (unsigned long long)(s / 60), (unsigned long long)(s % 60));
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


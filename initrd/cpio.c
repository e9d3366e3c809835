/* A cpio "newc" archive written in memory (the format the kernel unpacks an initramfs from). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lkvm/initrd.h"

#define CPIO_PATH_MAX 4096
#define CPIO_HDR_LEN 110 /* "070701" and 13 fields of 8 hex digits */
#define CPIO_TRAILER "TRAILER!!!"

static int reserve(struct cpio *c, size_t n)
{
	size_t cap = c->cap ? c->cap : 64 * 1024;
	u8 *b;

	if (n <= c->cap - c->len)
		return 0;
	while (n > cap - c->len) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	b = realloc(c->buf, cap);
	if (!b)
		return -ENOMEM;
	c->buf = b;
	c->cap = cap;
	return 0;
}

/* Bytes after a name or a body up to the next 4-byte boundary of the archive. */
static void pad4(struct cpio *c)
{
	while (c->len % 4)
		c->buf[c->len++] = 0;
}

/* One entry: header, name, padding, body, padding. The path is already checked. */
static int put_entry(struct cpio *c, const char *name, u32 mode, u32 rmajor, u32 rminor,
		     const void *data, size_t len)
{
	size_t namesize = strlen(name) + 1;
	char hdr[CPIO_HDR_LEN + 1];
	int ret;

	if (c->finished)
		return -EINVAL;
	if (len > UINT32_MAX)
		return -EFBIG;
	ret = reserve(c, CPIO_HDR_LEN + namesize + 3 + len + 3);
	if (ret)
		return ret;
	/* ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor, rdevminor,
	 * namesize, check */
	snprintf(hdr, sizeof(hdr), "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		 ++c->ino, mode, 0, 0, S_ISDIR(mode) ? 2 : 1, 0, (u32)len, 0, 0, rmajor, rminor,
		 (u32)namesize, 0);
	memcpy(c->buf + c->len, hdr, CPIO_HDR_LEN);
	c->len += CPIO_HDR_LEN;
	memcpy(c->buf + c->len, name, namesize);
	c->len += namesize;
	pad4(c);
	if (len)
		memcpy(c->buf + c->len, data, len);
	c->len += len;
	pad4(c);
	return 0;
}

/* The archive name of path (no leading '/'), or NULL when it is empty, too long, or has an
 * empty, "." or ".." component. */
static const char *entry_name(const char *path)
{
	const char *p, *name;
	size_t n;

	while (*path == '/')
		path++;
	name = path;
	if (!*name || strnlen(name, CPIO_PATH_MAX) >= CPIO_PATH_MAX)
		return NULL;
	for (p = name; *p; p += n + (p[n] == '/')) {
		n = strcspn(p, "/");
		if (!n || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return NULL;
		if (p[n] == '/' && !p[n + 1])
			return NULL; /* trailing slash */
	}
	return name;
}

static bool have_dir(const struct cpio *c, const char *name, size_t n)
{
	for (size_t i = 0; i < c->nr_dirs; i++)
		if (strlen(c->dirs[i]) == n && !memcmp(c->dirs[i], name, n))
			return true;
	return false;
}

/* Records name[0..n) as a directory and writes it, once. */
static int put_dir(struct cpio *c, const char *name, size_t n, u32 perm)
{
	char **dirs, *copy;
	int ret;

	if (have_dir(c, name, n))
		return 0;
	copy = strndup(name, n);
	dirs = realloc(c->dirs, (c->nr_dirs + 1) * sizeof(*dirs));
	if (!copy || !dirs) {
		free(copy);
		if (dirs)
			c->dirs = dirs;
		return -ENOMEM;
	}
	c->dirs = dirs;
	ret = put_entry(c, copy, S_IFDIR | (perm & 07777), 0, 0, NULL, 0);
	if (ret) {
		free(copy);
		return ret;
	}
	c->dirs[c->nr_dirs++] = copy;
	return 0;
}

/* The kernel creates no parents: each directory must come before what it holds. */
static int put_parents(struct cpio *c, const char *name)
{
	for (const char *s = strchr(name, '/'); s; s = strchr(s + 1, '/')) {
		int ret = put_dir(c, name, (size_t)(s - name), 0755);

		if (ret)
			return ret;
	}
	return 0;
}

static int add(struct cpio *c, const char *path, u32 mode, u32 rmajor, u32 rminor, const void *data,
	       size_t len)
{
	const char *name = entry_name(path);
	int ret;

	if (!name)
		return -EINVAL;
	ret = put_parents(c, name);
	if (ret)
		return ret;
	if (S_ISDIR(mode))
		return put_dir(c, name, strlen(name), mode);
	return put_entry(c, name, mode, rmajor, rminor, data, len);
}

int cpio_add_dir(struct cpio *c, const char *path, u32 perm)
{
	return add(c, path, S_IFDIR | (perm & 07777), 0, 0, NULL, 0);
}

int cpio_add_file(struct cpio *c, const char *path, u32 perm, const void *data, size_t len)
{
	return add(c, path, S_IFREG | (perm & 07777), 0, 0, data, len);
}

int cpio_add_symlink(struct cpio *c, const char *path, const char *target)
{
	if (!*target)
		return -EINVAL;
	return add(c, path, S_IFLNK | 0777, 0, 0, target, strlen(target));
}

int cpio_add_chardev(struct cpio *c, const char *path, u32 perm, u32 major, u32 minor)
{
	return add(c, path, S_IFCHR | (perm & 07777), major, minor, NULL, 0);
}

int cpio_finish(struct cpio *c)
{
	int ret = put_entry(c, CPIO_TRAILER, 0, 0, 0, NULL, 0);

	if (!ret)
		c->finished = true;
	return ret;
}

void cpio_free(struct cpio *c)
{
	for (size_t i = 0; i < c->nr_dirs; i++)
		free(c->dirs[i]);
	free(c->dirs);
	free(c->buf);
	memset(c, 0, sizeof(*c));
}

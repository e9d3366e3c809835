/* The snapshot writer: sections appended to a temporary file, then the table and header, fsync and an atomic rename. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format.h"

struct snap_writer {
	int fd;
	char *path, *tmp; /* tmp NULL: the caller's fd (snap_writer_open_fd) */
	u64 off;	  /* where the next section goes */
	struct snap_disk_header hdr;
	struct snap_disk_section *secs;
	u32 nr, cap;
	int err; /* the first failure, with its reason in msg */
	char msg[256];
};

static int fail(struct snap_writer *w, int err, const char *what)
{
	if (!w->err) {
		w->err = err;
		snprintf(w->msg, sizeof(w->msg), "snapshot %s: %s: %s", w->path, what,
			 strerror(-err));
	}
	return w->err;
}

static void start(struct snap_writer *w, const struct snap_machine *m)
{
	memcpy(w->hdr.magic, SNAP_MAGIC, 8);
	w->hdr.version = SNAP_VERSION;
	w->hdr.header_len = SNAP_HEADER_LEN;
	w->hdr.nr_vcpus = m->nr_vcpus;
	w->hdr.ram_bytes = m->ram_bytes;
	w->hdr.page_size = SNAP_PAGE_SIZE;
	memcpy(w->hdr.cpuid_digest, m->cpuid_digest, SNAP_DIGEST_LEN);
	snprintf(w->hdr.lkvm_version, SNAP_VERSION_LEN, "%.*s", SNAP_VERSION_LEN - 1,
		 m->lkvm_version);
	w->off = SNAP_HEADER_LEN;
}

int snap_writer_open(struct snap_writer **wp, const char *path, const struct snap_machine *m,
		     char *err, size_t errlen)
{
	struct snap_writer *w = calloc(1, sizeof(*w));

	if (!w || asprintf(&w->tmp, "%s.tmp-XXXXXX", path) < 0 || !(w->path = strdup(path))) {
		if (w)
			free(w->path);
		free(w);
		errfmt(err, errlen, "snapshot %s: out of memory", path);
		return -ENOMEM;
	}
	/* Beside PATH, so the rename stays in one file system and is atomic. */
	w->fd = mkostemp(w->tmp, O_CLOEXEC);
	if (w->fd < 0) {
		int e = -errno;

		errfmt(err, errlen, "snapshot %s: cannot create %s: %s", path, w->tmp,
		       strerror(errno));
		free(w->tmp);
		free(w->path);
		free(w);
		return e;
	}
	start(w, m);
	*wp = w;
	return 0;
}

int snap_writer_open_fd(struct snap_writer **wp, int fd, const char *name,
			const struct snap_machine *m, char *err, size_t errlen)
{
	struct snap_writer *w = calloc(1, sizeof(*w));

	if (!w || !(w->path = strdup(name))) {
		free(w);
		errfmt(err, errlen, "snapshot %s: out of memory", name);
		return -ENOMEM;
	}
	w->fd = fd;
	start(w, m);
	*wp = w;
	return 0;
}

static int pwrite_all(int fd, const void *buf, size_t len, u64 off)
{
	const u8 *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
		off += (u64)n;
	}
	return 0;
}

/* A table entry for the section starting at w->off; the caller fills length and crc. */
static struct snap_disk_section *new_section(struct snap_writer *w, u32 type, u32 instance,
					     u64 align)
{
	if (w->nr == w->cap) {
		u32 cap = w->cap ? w->cap * 2 : 16;
		void *n = reallocarray(w->secs, cap, sizeof(*w->secs));

		if (!n) {
			fail(w, -ENOMEM, "section table");
			return NULL;
		}
		w->secs = n;
		w->cap = cap;
	}
	w->off = ALIGN_UP(w->off, align);
	w->secs[w->nr] =
		(struct snap_disk_section){ .type = type, .instance = instance, .offset = w->off };
	return &w->secs[w->nr++];
}

int snap_add_iov(struct snap_writer *w, u32 type, u32 instance, const struct iovec *iov, int iovcnt)
{
	struct snap_disk_section *s;
	int r;

	if (w->err)
		return w->err;
	s = new_section(w, type, instance, 8);
	if (!s)
		return w->err;
	for (int i = 0; i < iovcnt; i++) {
		r = pwrite_all(w->fd, iov[i].iov_base, iov[i].iov_len, w->off);
		if (r)
			return fail(w, r, "write");
		s->crc = snap_crc32c(s->crc, iov[i].iov_base, iov[i].iov_len);
		s->length += iov[i].iov_len;
		w->off += iov[i].iov_len;
	}
	return 0;
}

int snap_add(struct snap_writer *w, u32 type, u32 instance, const void *buf, size_t len)
{
	struct iovec iov = { (void *)buf, len };

	return snap_add_iov(w, type, instance, &iov, 1);
}

int snap_add_fd(struct snap_writer *w, u32 type, u32 instance, int fd)
{
	struct snap_disk_section *s;
	u8 buf[65536];
	ssize_t n;

	if (w->err)
		return w->err;
	s = new_section(w, type, instance, 8);
	if (!s)
		return w->err;
	while ((n = read(fd, buf, sizeof(buf))) != 0) {
		int r;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return fail(w, -errno, "read the section's source");
		r = pwrite_all(w->fd, buf, (size_t)n, w->off);
		if (r)
			return fail(w, r, "write");
		s->crc = snap_crc32c(s->crc, buf, (size_t)n);
		s->length += (u64)n;
		w->off += (u64)n;
	}
	return 0;
}

static bool page_is_zero(const u8 *p)
{
	const u64 *q = (const u64 *)p;

	for (size_t i = 0; i < SNAP_PAGE_SIZE / 8; i++)
		if (q[i])
			return false;
	return true;
}

/* The runs of non-zero pages, joined across gaps shorter than SNAP_GAP_PAGES. */
static int memory_runs(const u8 *ram, u64 pages, struct snap_disk_run **runs, u64 *nr)
{
	struct snap_disk_run *v = NULL;
	u64 n = 0, cap = 0;

	for (u64 pg = 0; pg < pages; pg++) {
		struct snap_disk_run *last = n ? &v[n - 1] : NULL;

		if (page_is_zero(ram + pg * SNAP_PAGE_SIZE))
			continue;
		if (last && pg - (last->first_page + last->nr_pages) < SNAP_GAP_PAGES) {
			last->nr_pages = pg + 1 - last->first_page;
			continue;
		}
		if (n == cap) {
			void *nv = reallocarray(v, cap = cap ? cap * 2 : 64, sizeof(*v));

			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		v[n++] = (struct snap_disk_run){ pg, 1 };
	}
	*runs = v;
	*nr = n;
	return 0;
}

/* The data section (the runs' pages, page aligned so a restore can map them), then the map. */
int snap_add_memory(struct snap_writer *w, const void *ram, u64 size)
{
	struct snap_disk_memmap mm = { .page_size = SNAP_PAGE_SIZE };
	struct snap_disk_section *s;
	struct snap_disk_run *runs;
	int r;

	if (w->err)
		return w->err;
	if (size != w->hdr.ram_bytes || size % SNAP_PAGE_SIZE)
		return fail(w, -EINVAL, "memory image is not the machine's RAM size");
	r = memory_runs(ram, size / SNAP_PAGE_SIZE, &runs, &mm.nr_runs);
	if (r)
		return fail(w, r, "memory map");
	s = new_section(w, SNAP_SEC_MEM_DATA, 0, SNAP_PAGE_SIZE);
	for (u64 i = 0; s && i < mm.nr_runs; i++) {
		const u8 *p = (const u8 *)ram + runs[i].first_page * SNAP_PAGE_SIZE;
		u64 len = runs[i].nr_pages * SNAP_PAGE_SIZE;

		r = pwrite_all(w->fd, p, len, w->off);
		if (r) {
			fail(w, r, "write");
			break;
		}
		s->crc = snap_crc32c(s->crc, p, len);
		s->length += len;
		w->off += len;
	}
	if (!w->err) {
		struct iovec iov[2] = { { &mm, sizeof(mm) }, { runs, mm.nr_runs * sizeof(*runs) } };

		snap_add_iov(w, SNAP_SEC_MEM_MAP, 0, iov, 2);
	}
	free(runs);
	return w->err;
}

static void writer_free(struct snap_writer *w)
{
	if (w->fd >= 0 && w->tmp)
		close(w->fd);
	free(w->secs);
	free(w->tmp);
	free(w->path);
	free(w);
}

void snap_writer_abort(struct snap_writer *w)
{
	if (w->tmp)
		unlink(w->tmp);
	writer_free(w);
}

/* The rename is durable only once the directory is on disk too. */
static int sync_dir(const char *path)
{
	char *copy = strdup(path);
	int fd, r = 0;

	if (!copy)
		return -ENOMEM;
	fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(copy);
	if (fd < 0)
		return -errno;
	if (fsync(fd))
		r = -errno;
	close(fd);
	return r;
}

/* Table at the end, header last: a file cut anywhere before this point has no valid header. */
static int write_tail(struct snap_writer *w)
{
	size_t tlen = (size_t)w->nr * sizeof(*w->secs);
	int r;

	w->hdr.table_off = w->off = ALIGN_UP(w->off, 8);
	w->hdr.nr_sections = w->nr;
	w->hdr.table_crc = snap_crc32c(0, w->secs, tlen);
	w->hdr.file_len = w->hdr.table_off + tlen;
	w->hdr.header_crc = snap_crc32c(0, &w->hdr, offsetof(struct snap_disk_header, header_crc));
	r = pwrite_all(w->fd, w->secs, tlen, w->hdr.table_off);
	if (!r)
		r = pwrite_all(w->fd, &w->hdr, sizeof(w->hdr), 0);
	if (r)
		return fail(w, r, "write");
	if (!w->tmp)
		return 0; /* the caller's file: it syncs and names it */
	if (fsync(w->fd))
		return fail(w, -errno, "fsync");
	if (rename(w->tmp, w->path))
		return fail(w, -errno, "rename into place");
	r = sync_dir(w->path);
	return r ? fail(w, r, "fsync its directory") : 0;
}

int snap_writer_finish(struct snap_writer *w, char *err, size_t errlen)
{
	int r = w->err;

	if (!r && w->nr > SNAP_MAX_SECTIONS)
		r = fail(w, -E2BIG, "too many sections");
	if (!r)
		r = write_tail(w);
	if (r) {
		errfmt(err, errlen, "%s", w->msg);
		/* After a failed rename the temporary file is still there; after a good one,
		 * unlink finds nothing under the temporary name. */
		if (w->tmp)
			unlink(w->tmp);
	}
	writer_free(w);
	return r;
}

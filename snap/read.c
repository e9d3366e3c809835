/* The snapshot reader: validates the whole container before anything is used, then hands out sections and maps the memory image. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format.h"

struct snap_reader {
	int fd;
	char *name;
	u64 size; /* the file's, from fstat */
	struct snap_machine m;
	struct snap_disk_header hdr;
	struct snap_disk_section *secs;
	u8 **data; /* each section's bytes, read and checked at open (NULL: the memory data) */
	const struct snap_disk_section *mem_data;
	const struct snap_disk_run *runs; /* in data[] of the map section */
	u64 nr_runs;
};

/* One line, "snapshot NAME: ...", and -EINVAL (a bad file, not a failed call). */
__printf(4, 5) static int bad(const struct snap_reader *r, char *err, size_t errlen,
			      const char *fmt, ...)
{
	char what[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	errfmt(err, errlen, "snapshot %s: %s", r->name, what);
	return -EINVAL;
}

static int pread_all(int fd, void *buf, size_t len, u64 off)
{
	u8 *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO; /* shrank since fstat */
		p += n;
		len -= (size_t)n;
		off += (u64)n;
	}
	return 0;
}

static int truncated(const struct snap_reader *r, char *err, size_t errlen, u64 want)
{
	return bad(r, err, errlen, "truncated at byte %llu (%llu expected)",
		   (unsigned long long)r->size, (unsigned long long)want);
}

/* Magic and version first: a file of another version may lay its header out differently. */
static int check_ident(struct snap_reader *r, char *err, size_t errlen)
{
	struct snap_disk_header *h = &r->hdr;
	u64 have = MIN(r->size, sizeof(*h));
	int e = pread_all(r->fd, h, have, 0);

	if (e) {
		errfmt(err, errlen, "snapshot %s: read: %s", r->name, strerror(-e));
		return e;
	}
	if (have < 8 || memcmp(h->magic, SNAP_MAGIC, 8))
		return have < 8 && !memcmp(h->magic, SNAP_MAGIC, have)
			       ? truncated(r, err, errlen, SNAP_HEADER_LEN)
			       : bad(r, err, errlen, "not an lkvm snapshot (no LKVMSNAP magic)");
	if (have < 12)
		return truncated(r, err, errlen, SNAP_HEADER_LEN);
	if (h->version != SNAP_VERSION)
		return bad(r, err, errlen, "was written by format version %u, this lkvm reads %u",
			   h->version, SNAP_VERSION);
	if (have < sizeof(*h))
		return truncated(r, err, errlen, SNAP_HEADER_LEN);
	if (h->header_crc != snap_crc32c(0, h, offsetof(struct snap_disk_header, header_crc)))
		return bad(r, err, errlen, "header checksum mismatch");
	if (h->header_len != SNAP_HEADER_LEN)
		return bad(r, err, errlen, "header length %u, version %u has %u", h->header_len,
			   SNAP_VERSION, SNAP_HEADER_LEN);
	return 0;
}

/* The header's fields, now that its checksum holds: each within what the format allows. */
static int check_header(struct snap_reader *r, char *err, size_t errlen)
{
	const struct snap_disk_header *h = &r->hdr;

	if (h->flags)
		return bad(r, err, errlen, "unknown header flags %#x", h->flags);
	if (h->page_size != SNAP_PAGE_SIZE)
		return bad(r, err, errlen, "page size %u, not %u", h->page_size, SNAP_PAGE_SIZE);
	if (!h->nr_vcpus || h->nr_vcpus > SNAP_MAX_VCPUS)
		return bad(r, err, errlen, "%u vCPUs (1 to %u)", h->nr_vcpus, SNAP_MAX_VCPUS);
	if (!h->ram_bytes || h->ram_bytes % SNAP_PAGE_SIZE)
		return bad(r, err, errlen, "RAM size %llu is not a whole number of pages",
			   (unsigned long long)h->ram_bytes);
	if (!memchr(h->lkvm_version, 0, SNAP_VERSION_LEN))
		return bad(r, err, errlen, "lkvm version string not terminated");
	if (r->size < h->file_len)
		return truncated(r, err, errlen, h->file_len);
	if (r->size > h->file_len)
		return bad(r, err, errlen, "%llu bytes after its end at byte %llu",
			   (unsigned long long)(r->size - h->file_len),
			   (unsigned long long)h->file_len);
	if (h->nr_sections > SNAP_MAX_SECTIONS)
		return bad(r, err, errlen, "%u sections (at most %u)", h->nr_sections,
			   SNAP_MAX_SECTIONS);
	if (h->table_off < SNAP_HEADER_LEN || h->table_off % 8 || h->table_off > h->file_len ||
	    h->file_len - MIN(h->file_len, h->table_off) !=
		    (u64)h->nr_sections * sizeof(struct snap_disk_section))
		return bad(r, err, errlen, "section table at %llu does not end the file",
			   (unsigned long long)h->table_off);
	return 0;
}

static int by_offset(const void *a, const void *b)
{
	const struct snap_disk_section *x = *(const struct snap_disk_section *const *)a;
	const struct snap_disk_section *y = *(const struct snap_disk_section *const *)b;

	/* An empty section at another's start sorts first, so it overlaps nothing. */
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return x->length < y->length ? -1 : x->length > y->length;
}

static int by_name(const void *a, const void *b)
{
	const struct snap_disk_section *x = *(const struct snap_disk_section *const *)a;
	const struct snap_disk_section *y = *(const struct snap_disk_section *const *)b;

	if (x->type != y->type)
		return x->type < y->type ? -1 : 1;
	return x->instance < y->instance ? -1 : x->instance > y->instance;
}

/* Sorted pointers to the table's entries (a sort of a copy: the table keeps file order). */
static const struct snap_disk_section **sorted(const struct snap_reader *r,
					       int (*cmp)(const void *, const void *))
{
	u32 n = r->hdr.nr_sections;
	const struct snap_disk_section **v = calloc(n ? n : 1, sizeof(*v));

	if (v) {
		for (u32 i = 0; i < n; i++)
			v[i] = &r->secs[i];
		qsort(v, n, sizeof(*v), cmp);
	}
	return v;
}

/* Each entry between the header and the table, flags clear, no two overlapping. */
static int check_extents(struct snap_reader *r, char *err, size_t errlen)
{
	const struct snap_disk_section **v;
	int e = 0;

	for (u32 i = 0; i < r->hdr.nr_sections; i++) {
		const struct snap_disk_section *s = &r->secs[i];

		if (s->flags)
			return bad(r, err, errlen, "section %s %u: unknown flags %#x",
				   snap_sec_name(s->type), s->instance, s->flags);
		if (s->offset < SNAP_HEADER_LEN ||
		    !range_ok(s->offset, s->length, r->hdr.table_off))
			return bad(r, err, errlen,
				   "section %s %u: bytes %llu+%llu outside the file",
				   snap_sec_name(s->type), s->instance,
				   (unsigned long long)s->offset, (unsigned long long)s->length);
	}
	v = sorted(r, by_offset);
	if (!v)
		return -ENOMEM;
	for (u32 i = 1; i < r->hdr.nr_sections && !e; i++)
		if (v[i - 1]->offset + v[i - 1]->length > v[i]->offset)
			e = bad(r, err, errlen, "section %s %u overlaps section %s %u",
				snap_sec_name(v[i]->type), v[i]->instance,
				snap_sec_name(v[i - 1]->type), v[i - 1]->instance);
	free(v);
	return e;
}

/* One section per (type, instance); the memory's two sections come together, instance 0. */
static int check_names(struct snap_reader *r, char *err, size_t errlen)
{
	const struct snap_disk_section *map = NULL, **v = sorted(r, by_name);
	int e = 0;

	if (!v)
		return -ENOMEM;
	for (u32 i = 1; i < r->hdr.nr_sections && !e; i++)
		if (!by_name(&v[i - 1], &v[i]))
			e = bad(r, err, errlen, "section %s %u appears twice",
				snap_sec_name(v[i]->type), v[i]->instance);
	free(v);
	if (e)
		return e;
	for (u32 i = 0; i < r->hdr.nr_sections; i++) {
		const struct snap_disk_section *s = &r->secs[i];

		if ((s->type == SNAP_SEC_MEM_MAP || s->type == SNAP_SEC_MEM_DATA) && s->instance)
			return bad(r, err, errlen, "section %s %u: only instance 0 exists",
				   snap_sec_name(s->type), s->instance);
		if (s->type == SNAP_SEC_MEM_MAP)
			map = s;
		if (s->type == SNAP_SEC_MEM_DATA)
			r->mem_data = s;
	}
	if (!map != !r->mem_data)
		return bad(r, err, errlen, "memory map and memory data must come together");
	if (r->mem_data && r->mem_data->offset % SNAP_PAGE_SIZE)
		return bad(r, err, errlen, "memory data at byte %llu is not page aligned",
			   (unsigned long long)r->mem_data->offset);
	return 0;
}

static int read_table(struct snap_reader *r, char *err, size_t errlen)
{
	size_t tlen = (size_t)r->hdr.nr_sections * sizeof(*r->secs);
	int e;

	r->secs = malloc(tlen ? tlen : 1);
	r->data = calloc(r->hdr.nr_sections ? r->hdr.nr_sections : 1, sizeof(*r->data));
	if (!r->secs || !r->data)
		return -ENOMEM;
	e = pread_all(r->fd, r->secs, tlen, r->hdr.table_off);
	if (e) {
		errfmt(err, errlen, "snapshot %s: read: %s", r->name, strerror(-e));
		return e;
	}
	if (snap_crc32c(0, r->secs, tlen) != r->hdr.table_crc)
		return bad(r, err, errlen, "section table checksum mismatch");
	return 0;
}

/* Every section but the memory data is read whole and its checksum compared. */
static int load_sections(struct snap_reader *r, char *err, size_t errlen)
{
	for (u32 i = 0; i < r->hdr.nr_sections; i++) {
		const struct snap_disk_section *s = &r->secs[i];
		int e;

		if (s == r->mem_data)
			continue;
		/* Inside the file (checked), so no larger than what is on disk. */
		r->data[i] = malloc(s->length ? s->length : 1);
		if (!r->data[i])
			return -ENOMEM;
		e = pread_all(r->fd, r->data[i], s->length, s->offset);
		if (e) {
			errfmt(err, errlen, "snapshot %s: read: %s", r->name, strerror(-e));
			return e;
		}
		if (snap_crc32c(0, r->data[i], s->length) != s->crc)
			return bad(r, err, errlen, "section %s %u: checksum mismatch",
				   snap_sec_name(s->type), s->instance);
	}
	return 0;
}

/* The runs: each non-empty, after the one before, within RAM; their pages fill the data. */
static int check_memmap(struct snap_reader *r, const u8 *p, u64 len, char *err, size_t errlen)
{
	struct snap_disk_memmap mm;
	u64 ram_pages = r->hdr.ram_bytes / SNAP_PAGE_SIZE, end = 0, pages = 0;

	if (len < sizeof(mm))
		return bad(r, err, errlen, "memory map of %llu bytes", (unsigned long long)len);
	memcpy(&mm, p, sizeof(mm));
	if (mm.page_size != SNAP_PAGE_SIZE || mm.reserved)
		return bad(r, err, errlen, "memory map: page size %u, not %u", mm.page_size,
			   SNAP_PAGE_SIZE);
	if (mm.nr_runs != (len - sizeof(mm)) / sizeof(struct snap_disk_run) ||
	    (len - sizeof(mm)) % sizeof(struct snap_disk_run))
		return bad(r, err, errlen, "memory map: %llu runs in %llu bytes",
			   (unsigned long long)mm.nr_runs, (unsigned long long)len);
	r->runs = (const struct snap_disk_run *)(p + sizeof(mm));
	r->nr_runs = mm.nr_runs;
	for (u64 i = 0; i < r->nr_runs; i++) {
		const struct snap_disk_run *run = &r->runs[i];

		if (!run->nr_pages || run->first_page < end)
			return bad(r, err, errlen, "memory map: run %llu (page %llu) out of order",
				   (unsigned long long)i, (unsigned long long)run->first_page);
		if (!range_ok(run->first_page, run->nr_pages, ram_pages))
			return bad(r, err, errlen,
				   "memory map: run %llu ends past RAM (%llu pages)",
				   (unsigned long long)i, (unsigned long long)ram_pages);
		end = run->first_page + run->nr_pages;
		pages += run->nr_pages;
	}
	if (pages * SNAP_PAGE_SIZE != r->mem_data->length)
		return bad(r, err, errlen, "memory map: %llu pages, memory data holds %llu bytes",
			   (unsigned long long)pages, (unsigned long long)r->mem_data->length);
	return 0;
}

static int verify_memory(struct snap_reader *r, char *err, size_t errlen)
{
	const struct snap_disk_section *s = r->mem_data;
	u8 *buf = malloc(MiB(1));
	u32 crc = 0;
	int e = 0;

	if (!buf)
		return -ENOMEM;
	for (u64 off = 0; off < s->length && !e; off += MiB(1)) {
		size_t n = MIN(MiB(1), s->length - off);

		e = pread_all(r->fd, buf, n, s->offset + off);
		crc = snap_crc32c(crc, buf, n);
	}
	free(buf);
	if (e) {
		errfmt(err, errlen, "snapshot %s: read: %s", r->name, strerror(-e));
		return e;
	}
	if (crc != s->crc)
		return bad(r, err, errlen, "section memory 0: checksum mismatch");
	return 0;
}

static int validate(struct snap_reader *r, unsigned flags, char *err, size_t errlen)
{
	int e = check_ident(r, err, errlen);

	if (!e)
		e = check_header(r, err, errlen);
	if (!e)
		e = read_table(r, err, errlen);
	if (!e)
		e = check_extents(r, err, errlen);
	if (!e)
		e = check_names(r, err, errlen);
	if (!e)
		e = load_sections(r, err, errlen);
	for (u32 i = 0; !e && r->mem_data && i < r->hdr.nr_sections; i++)
		if (r->secs[i].type == SNAP_SEC_MEM_MAP)
			e = check_memmap(r, r->data[i], r->secs[i].length, err, errlen);
	if (!e && r->mem_data && (flags & SNAP_OPEN_VERIFY_MEMORY))
		e = verify_memory(r, err, errlen);
	if (e == -ENOMEM)
		errfmt(err, errlen, "snapshot %s: out of memory", r->name);
	return e;
}

int snap_open_fd(struct snap_reader **rp, int fd, const char *name, unsigned flags, char *err,
		 size_t errlen)
{
	struct snap_reader *r = calloc(1, sizeof(*r));
	struct stat st;
	int e;

	if (!r || !(r->name = strdup(name))) {
		free(r);
		close(fd);
		errfmt(err, errlen, "snapshot %s: out of memory", name);
		return -ENOMEM;
	}
	r->fd = fd;
	if (fstat(fd, &st)) {
		e = -errno;
		errfmt(err, errlen, "snapshot %s: %s", name, strerror(errno));
	} else {
		r->size = (u64)st.st_size;
		e = validate(r, flags, err, errlen);
	}
	if (e) {
		snap_close(r);
		return e;
	}
	r->m.nr_vcpus = r->hdr.nr_vcpus;
	r->m.ram_bytes = r->hdr.ram_bytes;
	memcpy(r->m.cpuid_digest, r->hdr.cpuid_digest, SNAP_DIGEST_LEN);
	memcpy(r->m.lkvm_version, r->hdr.lkvm_version, SNAP_VERSION_LEN);
	*rp = r;
	return 0;
}

int snap_open(struct snap_reader **rp, const char *path, unsigned flags, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		int e = -errno;

		errfmt(err, errlen, "snapshot %s: %s", path, strerror(errno));
		return e;
	}
	return snap_open_fd(rp, fd, path, flags, err, errlen);
}

void snap_close(struct snap_reader *r)
{
	if (!r)
		return;
	for (u32 i = 0; r->data && i < r->hdr.nr_sections; i++)
		free(r->data[i]);
	free(r->data);
	free(r->secs);
	free(r->name);
	close(r->fd);
	free(r);
}

const struct snap_machine *snap_machine(const struct snap_reader *r)
{
	return &r->m;
}

int snap_check_machine(const struct snap_reader *r, const struct snap_machine *want, char *err,
		       size_t errlen)
{
	if (r->m.nr_vcpus != want->nr_vcpus)
		return bad(r, err, errlen, "has %u vCPUs, this machine %u", r->m.nr_vcpus,
			   want->nr_vcpus);
	if (r->m.ram_bytes != want->ram_bytes)
		return bad(r, err, errlen, "has %llu MiB of RAM, this machine %llu MiB",
			   (unsigned long long)(r->m.ram_bytes >> 20),
			   (unsigned long long)(want->ram_bytes >> 20));
	if (memcmp(r->m.cpuid_digest, want->cpuid_digest, SNAP_DIGEST_LEN))
		return bad(r, err, errlen,
			   "was taken with other CPU features (lkvm %s): this host's differ",
			   r->m.lkvm_version);
	return 0;
}

int snap_section(const struct snap_reader *r, u32 type, u32 instance, const void **data,
		 size_t *len)
{
	for (u32 i = 0; i < r->hdr.nr_sections; i++) {
		if (r->secs[i].type != type || r->secs[i].instance != instance || !r->data[i])
			continue;
		*data = r->data[i];
		*len = r->secs[i].length;
		return 0;
	}
	return -ENOENT;
}

u32 snap_nr_sections(const struct snap_reader *r)
{
	return r->hdr.nr_sections;
}

void snap_section_at(const struct snap_reader *r, u32 i, u32 *type, u32 *instance)
{
	*type = r->secs[i].type;
	*instance = r->secs[i].instance;
}

int snap_map_memory(const struct snap_reader *r, void *ram, u64 size, char *err, size_t errlen)
{
	u64 off;

	if (size != r->hdr.ram_bytes)
		return bad(r, err, errlen, "memory image of %llu bytes mapped over %llu",
			   (unsigned long long)r->hdr.ram_bytes, (unsigned long long)size);
	if (!r->mem_data)
		return bad(r, err, errlen, "has no memory image");
	off = r->mem_data->offset;
	for (u64 i = 0; i < r->nr_runs; i++) {
		u64 len = r->runs[i].nr_pages * SNAP_PAGE_SIZE;
		void *at = (u8 *)ram + r->runs[i].first_page * SNAP_PAGE_SIZE;

		/* MAP_PRIVATE: the guest's writes stay in this process; clones share the file's
		 * page cache until they write. */
		if (mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, r->fd,
			 (off_t)off) == MAP_FAILED) {
			int e = -errno;

			errfmt(err, errlen, "snapshot %s: map memory run %llu: %s", r->name,
			       (unsigned long long)i, strerror(errno));
			return e;
		}
		off += len;
	}
	return 0;
}

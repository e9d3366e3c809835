/* Fuzz target: the snapshot reader (snap/read.c) and the section records (snap/record.c) on a file of the input's bytes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "lkvm/snap.h"
#include "../../snap/format.h"

/* Input: a mode byte, then the whole file. Mode bit 0 makes every checksum in the file right
 * (each one whose bytes lie inside the input) before it is read, so that mutations get past
 * the checksums to the structure behind them; without it they rarely would. Checked: open
 * refuses with -EINVAL and a one-line reason or accepts; an accepted file's sections are all
 * found by their name, their records walk to the end without leaving the section, and its
 * memory (when RAM is small enough to map here) maps and reads back. */
#define FUZZ_MAX_RAM MiB(16)

static void walk_records(const void *d, size_t len)
{
	struct snap_rec_iter it = { d, len };
	const void *rec;
	u64 first = 0;
	u32 n, seen = 0;
	u16 tag;
	int r;

	while ((r = snap_rec_next(&it, &tag, &rec, &n)) > 0) {
		FUZZ_ASSERT((const u8 *)rec + n <= (const u8 *)d + len);
		seen += n;
	}
	FUZZ_ASSERT(r == 0 || r == -EBADMSG);
	r = snap_rec_get(d, len, 1, &first, sizeof(first));
	FUZZ_ASSERT(r == 0 || r == -ENOENT || r == -EBADMSG);
	(void)seen;
}

static void map_and_read(struct snap_reader *r)
{
	u64 size = snap_machine(r)->ram_bytes;
	volatile u8 sum = 0;
	char err[256];
	u8 *ram;

	if (size > FUZZ_MAX_RAM)
		return;
	ram = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	FUZZ_ASSERT(ram != MAP_FAILED);
	if (snap_map_memory(r, ram, size, err, sizeof(err)) == 0)
		for (u64 off = 0; off < size; off += SNAP_PAGE_SIZE)
			sum += ram[off];
	(void)sum; /* volatile: every page is really read */
	munmap(ram, size);
}

/* The sections' checksums, the table's and the header's, where the input holds their bytes. */
static void reseal(u8 *f, size_t size)
{
	struct snap_disk_header *h = (struct snap_disk_header *)f;
	u64 tlen;

	if (size < sizeof(*h))
		return;
	tlen = (u64)h->nr_sections * sizeof(struct snap_disk_section);
	if (range_ok(h->table_off, tlen, size) && h->table_off % 8 == 0) {
		struct snap_disk_section *t = (struct snap_disk_section *)(f + h->table_off);

		for (u32 i = 0; i < h->nr_sections; i++)
			if (range_ok(t[i].offset, t[i].length, size))
				t[i].crc = snap_crc32c(0, f + t[i].offset, t[i].length);
		h->table_crc = snap_crc32c(0, t, tlen);
	}
	h->header_crc = snap_crc32c(0, h, offsetof(struct snap_disk_header, header_crc));
}

int fuzz_snap(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz-snap", MFD_CLOEXEC);
	struct snap_reader *r;
	char err[256] = "";
	int e;

	FUZZ_ASSERT(fd >= 0);
	if (size && (data[0] & 1)) {
		/* A copy of the file without the mode byte: malloc's alignment for the structs. */
		u8 *copy = malloc(size);

		FUZZ_ASSERT(copy);
		memcpy(copy, data + 1, size - 1);
		reseal(copy, size - 1);
		FUZZ_ASSERT(write_full(fd, copy, size - 1) == size - 1);
		free(copy);
	} else if (size) {
		FUZZ_ASSERT(write_full(fd, data + 1, size - 1) == size - 1);
	}
	e = snap_open_fd(&r, fd, "F", SNAP_OPEN_VERIFY_MEMORY, err, sizeof(err));
	if (e) {
		FUZZ_ASSERT(e == -EINVAL && !strncmp(err, "snapshot F: ", 12));
		FUZZ_ASSERT(!strchr(err, '\n'));
		return 0;
	}
	for (u32 i = 0; i < snap_nr_sections(r); i++) {
		const void *d;
		size_t len;
		u32 type, inst;

		snap_section_at(r, i, &type, &inst);
		e = snap_section(r, type, inst, &d, &len);
		FUZZ_ASSERT(e == 0 || (e == -ENOENT && type == SNAP_SEC_MEM_DATA));
		if (!e)
			walk_records(d, len);
		if (!e && type == SNAP_SEC_VM) {
			char **words;
			int n;

			/* The run's options (vm-snap.c's tag 64): words within the record. */
			if (snap_rec_words(d, len, 64, 65536, &words, &n) == 0) {
				for (int w = 0; w < n; w++)
					FUZZ_ASSERT(words[w] && strlen(words[w]) < len);
				snap_words_free(words, n);
			}
		}
	}
	map_and_read(r);
	snap_close(r);
	return 0;
}

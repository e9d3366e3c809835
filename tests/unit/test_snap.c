/* Unit tests for the snapshot file (snap/): round trip, sparse memory mapped back, every refusal, the atomic writer, records. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/snap.h"
#include "../../snap/format.h"

#define BIG_RAM MiB(64)
#define SMALL_RAM MiB(1)

static char dir[] = "/tmp/test_snap-XXXXXX";
static char err[256];

static void setup(void)
{
	strcpy(dir, "/tmp/test_snap-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static struct snap_machine machine(u64 ram)
{
	struct snap_machine m = { .nr_vcpus = 2, .ram_bytes = ram };

	for (int i = 0; i < SNAP_DIGEST_LEN; i++)
		m.cpuid_digest[i] = (u8)(i * 7 + 1);
	strcpy(m.lkvm_version, "lkvm test");
	return m;
}

/* A zeroed RAM with a few pages of pattern: page 0, pages 5-6, 3 pages near 2/3, the last. */
static u8 *make_ram(u64 size)
{
	u8 *ram = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	u64 pages = size / SNAP_PAGE_SIZE;
	u64 present[] = { 0, 5, 6, pages * 2 / 3, pages * 2 / 3 + 1, pages * 2 / 3 + 20, pages - 1 };

	ck_assert_ptr_ne(ram, MAP_FAILED);
	for (size_t i = 0; i < ARRAY_SIZE(present); i++)
		for (u32 b = 0; b < SNAP_PAGE_SIZE; b += 61)
			ram[present[i] * SNAP_PAGE_SIZE + b] = (u8)(present[i] + b + 1);
	return ram;
}

static const char vm_rec[] = "irqchip and pit";
static const u64 vcpu_regs[2][4] = { { 1, 2, 3, 4 }, { 5, 6, 7, 8 } };

/* Sections from a buffer (records), an iovec, a pipe, and the memory image. */
static void write_snapshot(const char *path, u64 ram_size, const u8 *ram)
{
	struct snap_machine m = machine(ram_size);
	struct snap_rec_buf rb = { 0 };
	struct snap_writer *w;
	int pfd[2];

	ck_assert_int_eq(snap_writer_open(&w, path, &m, err, sizeof(err)), 0);
	snap_rec_put(&rb, 1, vm_rec, sizeof(vm_rec));
	snap_rec_put(&rb, 2, &ram_size, sizeof(ram_size));
	ck_assert_int_eq(rb.err, 0);
	ck_assert_int_eq(snap_add(w, SNAP_SEC_VM, 0, rb.buf, rb.len), 0);
	snap_rec_free(&rb);
	for (u32 i = 0; i < 2; i++) {
		struct iovec iov[2] = { { (void *)vcpu_regs[i], 16 },
					{ (void *)&vcpu_regs[i][2], 16 } };

		ck_assert_int_eq(snap_add_iov(w, SNAP_SEC_VCPU, i, iov, 2), 0);
	}
	ck_assert_int_eq(pipe(pfd), 0);
	ck_assert_int_eq(write(pfd[1], "device three", 12), 12);
	close(pfd[1]);
	ck_assert_int_eq(snap_add_fd(w, SNAP_SEC_DEVICE, 3, pfd[0]), 0);
	close(pfd[0]);
	ck_assert_int_eq(snap_add(w, SNAP_SEC_DEVICE, 4, NULL, 0), 0);
	ck_assert_int_eq(snap_add_memory(w, ram, ram_size), 0);
	ck_assert_msg(snap_writer_finish(w, err, sizeof(err)) == 0, "%s", err);
}

static void path_in_dir(char *path, size_t len, const char *name)
{
	snprintf(path, len, "%s/%s", dir, name);
}

START_TEST(crc32c_known_value)
{
	const char *s = "123456789";

	/* The check value of CRC-32C (RFC 3720's polynomial). */
	ck_assert_uint_eq(snap_crc32c(0, s, 9), 0xe3069283);
	ck_assert_uint_eq(snap_crc32c_sw(0, s, 9), 0xe3069283);
	ck_assert_uint_eq(snap_crc32c(snap_crc32c(0, s, 4), s + 4, 5), 0xe3069283);
	ck_assert_uint_eq(snap_crc32c_sw(snap_crc32c_sw(0, s, 3), s + 3, 6), 0xe3069283);
}
END_TEST

/* What the round trip's reader must give back. */
static void check_sections(struct snap_reader *r)
{
	const void *d;
	size_t len;
	char rec[sizeof(vm_rec)];
	u64 v;

	ck_assert_int_eq(snap_section(r, SNAP_SEC_VM, 0, &d, &len), 0);
	ck_assert_int_eq(snap_rec_get(d, len, 1, rec, sizeof(rec)), 0);
	ck_assert_str_eq(rec, vm_rec);
	ck_assert_int_eq(snap_rec_get(d, len, 2, &v, sizeof(v)), 0);
	ck_assert_uint_eq(v, BIG_RAM);
	for (u32 i = 0; i < 2; i++) {
		ck_assert_int_eq(snap_section(r, SNAP_SEC_VCPU, i, &d, &len), 0);
		ck_assert_uint_eq(len, sizeof(vcpu_regs[i]));
		ck_assert_mem_eq(d, vcpu_regs[i], len);
	}
	ck_assert_int_eq(snap_section(r, SNAP_SEC_DEVICE, 3, &d, &len), 0);
	ck_assert_uint_eq(len, 12);
	ck_assert_mem_eq(d, "device three", 12);
	ck_assert_int_eq(snap_section(r, SNAP_SEC_DEVICE, 4, &d, &len), 0);
	ck_assert_uint_eq(len, 0);
	ck_assert_int_eq(snap_section(r, SNAP_SEC_VCPU, 2, &d, &len), -ENOENT);
	/* The memory data is mapped, never handed out. */
	ck_assert_int_eq(snap_section(r, SNAP_SEC_MEM_DATA, 0, &d, &len), -ENOENT);
	ck_assert_uint_eq(snap_nr_sections(r), 7);
}

START_TEST(round_trip_sparse)
{
	char path[300];
	u8 *ram = make_ram(BIG_RAM), *back;
	struct snap_reader *r;
	struct snap_machine want = machine(BIG_RAM);
	struct stat st;

	path_in_dir(path, sizeof(path), "a.snap");
	write_snapshot(path, BIG_RAM, ram);
	ck_assert_int_eq(stat(path, &st), 0);
	/* 7 present pages (5-6 joined, the 20-page gap not): 64 MiB of RAM in under 64 KiB. */
	ck_assert_int_lt(st.st_size, KiB(64));
	ck_assert_msg(snap_open(&r, path, SNAP_OPEN_VERIFY_MEMORY, err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert_uint_eq(snap_machine(r)->nr_vcpus, 2);
	ck_assert_str_eq(snap_machine(r)->lkvm_version, "lkvm test");
	ck_assert_int_eq(snap_check_machine(r, &want, err, sizeof(err)), 0);
	check_sections(r);
	back = mmap(NULL, BIG_RAM, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(back, MAP_FAILED);
	ck_assert_msg(snap_map_memory(r, back, BIG_RAM, err, sizeof(err)) == 0, "%s", err);
	snap_close(r);
	ck_assert_int_eq(memcmp(back, ram, BIG_RAM), 0);
	/* Copy-on-write: a write to the mapping leaves the file as it was. */
	back[0] ^= 0xff;
	ck_assert_int_eq(snap_open(&r, path, SNAP_OPEN_VERIFY_MEMORY, err, sizeof(err)), 0);
	snap_close(r);
	munmap(back, BIG_RAM);
	munmap(ram, BIG_RAM);
}
END_TEST

START_TEST(machine_mismatch)
{
	char path[300];
	u8 *ram = make_ram(SMALL_RAM);
	struct snap_reader *r;
	struct snap_machine want = machine(SMALL_RAM);

	path_in_dir(path, sizeof(path), "m.snap");
	write_snapshot(path, SMALL_RAM, ram);
	ck_assert_int_eq(snap_open(&r, path, 0, err, sizeof(err)), 0);
	want.nr_vcpus = 3;
	ck_assert_int_eq(snap_check_machine(r, &want, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "has 2 vCPUs, this machine 3"));
	want = machine(MiB(2));
	ck_assert_int_eq(snap_check_machine(r, &want, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "has 1 MiB of RAM, this machine 2 MiB"));
	want = machine(SMALL_RAM);
	want.cpuid_digest[5] ^= 1;
	ck_assert_int_eq(snap_check_machine(r, &want, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "other CPU features"));
	snap_close(r);
	munmap(ram, SMALL_RAM);
}
END_TEST

/* The small snapshot's bytes, for the tests that corrupt them. */
static u8 *small_file(size_t *len)
{
	char path[300];
	u8 *ram = make_ram(SMALL_RAM), *data;

	path_in_dir(path, sizeof(path), "s.snap");
	write_snapshot(path, SMALL_RAM, ram);
	munmap(ram, SMALL_RAM);
	ck_assert_int_eq(read_file(path, &data, len), 0);
	return data;
}

/* Opens len bytes of buf as a file: 0 or -errno, err holding the reason. */
static int open_bytes(const u8 *buf, size_t len, unsigned flags)
{
	int fd = memfd_create("snap", MFD_CLOEXEC);
	struct snap_reader *r;
	int e;

	ck_assert_int_ge(fd, 0);
	ck_assert_uint_eq(write_full(fd, buf, len), len);
	err[0] = 0;
	e = snap_open_fd(&r, fd, "F", flags, err, sizeof(err));
	if (!e)
		snap_close(r);
	return e;
}

static void expect_refused(const u8 *buf, size_t len, unsigned flags, const char *reason)
{
	ck_assert_int_eq(open_bytes(buf, len, flags), -EINVAL);
	ck_assert_msg(strstr(err, reason), "expected \"%s\", got \"%s\"", reason, err);
	ck_assert_msg(!strncmp(err, "snapshot F: ", 12) && !strchr(err, '\n'), "%s", err);
}

START_TEST(truncated_everywhere)
{
	size_t len;
	u8 *f = small_file(&len);
	char want[80];

	ck_assert_int_eq(open_bytes(f, len, SNAP_OPEN_VERIFY_MEMORY), 0);
	/* Every length short of the whole file, each refused as cut where it was cut. */
	for (size_t cut = 0; cut < len; cut++) {
		snprintf(want, sizeof(want), "truncated at byte %zu ", cut);
		expect_refused(f, cut, 0, want);
	}
	free(f);
}
END_TEST

static struct snap_disk_header *hdr(u8 *f)
{
	return (struct snap_disk_header *)f;
}

static struct snap_disk_section *table(u8 *f)
{
	return (struct snap_disk_section *)(f + hdr(f)->table_off);
}

/* Checksums made right again after a field was changed, so the check behind them is reached. */
static void reseal(u8 *f)
{
	struct snap_disk_header *h = hdr(f);

	if (h->table_off + (u64)h->nr_sections * 32 <= h->file_len)
		h->table_crc = snap_crc32c(0, table(f), h->nr_sections * 32);
	h->header_crc = snap_crc32c(0, h, offsetof(struct snap_disk_header, header_crc));
}

/* One header field changed (and the header resealed), and the reason it is refused for. */
#define HEADER_CASE(field, value, reason)                                            \
	{                                                                            \
		offsetof(struct snap_disk_header, field),                            \
			sizeof(((struct snap_disk_header *)0)->field), value, reason \
	}
static const struct {
	size_t off, size;
	u64 value;
	const char *reason;
} header_cases[] = {
	HEADER_CASE(magic, 0x50414e534d564b4dull, "not an lkvm snapshot"),
	HEADER_CASE(version, 3, "was written by format version 3, this lkvm reads 1"),
	HEADER_CASE(version, 0, "was written by format version 0, this lkvm reads 1"),
	HEADER_CASE(header_len, 64, "header length 64"),
	HEADER_CASE(flags, 1, "unknown header flags"),
	HEADER_CASE(nr_vcpus, 0, "0 vCPUs"),
	HEADER_CASE(nr_vcpus, 5000, "5000 vCPUs"),
	HEADER_CASE(ram_bytes, 0, "RAM size 0"),
	HEADER_CASE(ram_bytes, MiB(1) + 1, "not a whole number of pages"),
	HEADER_CASE(file_len, 1 << 30, "truncated at byte"),
	HEADER_CASE(file_len, 200, "bytes after its end"),
	HEADER_CASE(table_off, 100, "section table at 100"),
	HEADER_CASE(table_off, 1 << 30, "does not end the file"),
	HEADER_CASE(table_off, 132, "does not end the file"),
	HEADER_CASE(nr_sections, 6, "does not end the file"),
	HEADER_CASE(nr_sections, 1 << 20, "sections (at most"),
	HEADER_CASE(page_size, 8192, "page size 8192"),
	HEADER_CASE(table_crc, 1, "section table checksum mismatch"),
	HEADER_CASE(lkvm_version, 0x4141414141414141ull, "lkvm version string not terminated"),
	HEADER_CASE(cpuid_digest, 1, ""), /* any digest is a valid file */
};

START_TEST(header_fields)
{
	size_t len;
	u8 *f = small_file(&len), *g = malloc(len);

	for (size_t i = 0; i < ARRAY_SIZE(header_cases); i++) {
		memcpy(g, f, len);
		memcpy(g + header_cases[i].off, &header_cases[i].value,
		       MIN(header_cases[i].size, sizeof(u64)));
		if (header_cases[i].off == offsetof(struct snap_disk_header, lkvm_version))
			memset(g + header_cases[i].off, 'A', SNAP_VERSION_LEN);
		hdr(g)->header_crc =
			snap_crc32c(0, g, offsetof(struct snap_disk_header, header_crc));
		if (!header_cases[i].reason[0])
			ck_assert_int_eq(open_bytes(g, len, 0), 0);
		else
			expect_refused(g, len, 0, header_cases[i].reason);
	}
	/* Any flipped header byte: the checksum (or the magic and version before it). */
	for (size_t b = 12; b < SNAP_HEADER_LEN; b++) {
		memcpy(g, f, len);
		g[b] ^= 0x10;
		expect_refused(g, len, 0, "header checksum mismatch");
	}
	free(g);
	free(f);
}
END_TEST

START_TEST(flipped_byte_in_each_section)
{
	size_t len;
	u8 *f = small_file(&len);
	char want[80];

	for (u32 i = 0; i < hdr(f)->nr_sections; i++) {
		struct snap_disk_section s = table(f)[i];

		if (!s.length)
			continue;
		snprintf(want, sizeof(want), "section %s %u: checksum mismatch",
			 snap_sec_name(s.type), s.instance);
		for (u64 at = 0; at < s.length; at += MAX(s.length / 3, 1)) {
			f[s.offset + at] ^= 0x01;
			/* The memory data is checked only when asked: mapping it must not read it. */
			if (s.type == SNAP_SEC_MEM_DATA)
				ck_assert_int_eq(open_bytes(f, len, 0), 0);
			expect_refused(f, len, SNAP_OPEN_VERIFY_MEMORY, want);
			f[s.offset + at] ^= 0x01;
		}
	}
	/* A flipped table byte. */
	f[hdr(f)->table_off + 5] ^= 0x80;
	expect_refused(f, len, 0, "section table checksum mismatch");
	free(f);
}
END_TEST

/* The index of the first section of type in the table. */
static u32 find(u8 *f, u32 type)
{
	for (u32 i = 0; i < hdr(f)->nr_sections; i++)
		if (table(f)[i].type == type)
			return i;
	ck_abort_msg("no section of type %u", type);
	return 0;
}

START_TEST(bad_extents)
{
	size_t len;
	u8 *f = small_file(&len), *g = malloc(len);
	u32 vm = find(f, SNAP_SEC_VM), cpu = find(f, SNAP_SEC_VCPU), mem;
	struct {
		u32 idx;
		size_t field;
		u64 value;
		const char *reason;
	} cases[] = {
		{ vm, offsetof(struct snap_disk_section, offset), 64, "vm 0: bytes 64+" },
		{ vm, offsetof(struct snap_disk_section, offset), 1 << 30, "outside the file" },
		{ vm, offsetof(struct snap_disk_section, length), 1 << 30, "outside the file" },
		{ vm, offsetof(struct snap_disk_section, length), ~0ull, "outside the file" },
		{ vm, offsetof(struct snap_disk_section, length), 60, "overlaps section vm 0" },
		{ cpu, offsetof(struct snap_disk_section, offset), 130, "overlaps" },
		{ vm, offsetof(struct snap_disk_section, flags), 2, "vm 0: unknown flags" },
		{ cpu, offsetof(struct snap_disk_section, instance), 1, "vcpu 1 appears twice" },
		{ vm, offsetof(struct snap_disk_section, type), SNAP_SEC_MEM_MAP, "appears twice" },
		{ vm, offsetof(struct snap_disk_section, type), 99,
		  "" }, /* unknown: the VM side's */
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		memcpy(g, f, len);
		memcpy((u8 *)&table(g)[cases[i].idx] + cases[i].field, &cases[i].value,
		       cases[i].field == offsetof(struct snap_disk_section, offset) ||
				       cases[i].field == offsetof(struct snap_disk_section, length)
			       ? 8
			       : 4);
		reseal(g);
		if (!cases[i].reason[0])
			ck_assert_int_eq(open_bytes(g, len, 0), 0);
		else
			expect_refused(g, len, 0, cases[i].reason);
	}
	/* The memory data moved off its page boundary (and its map with it) */
	memcpy(g, f, len);
	mem = find(g, SNAP_SEC_MEM_DATA);
	table(g)[mem].offset -= 8;
	reseal(g);
	expect_refused(g, len, 0, "not page aligned");
	/* ... or its map gone. */
	memcpy(g, f, len);
	table(g)[find(g, SNAP_SEC_MEM_MAP)].type = 77;
	reseal(g);
	expect_refused(g, len, 0, "must come together");
	free(g);
	free(f);
}
END_TEST

/* The small file with its memory map's run k (first page, page count) changed, resealed. */
static void set_run(u8 *f, u32 k, u64 first, u64 pages)
{
	struct snap_disk_section *s = &table(f)[find(f, SNAP_SEC_MEM_MAP)];
	struct snap_disk_run *run = (struct snap_disk_run *)(f + s->offset + 16) + k;

	run->first_page = first;
	run->nr_pages = pages;
	s->crc = snap_crc32c(0, f + s->offset, s->length);
	reseal(f);
}

START_TEST(bad_memory_map)
{
	size_t len;
	u8 *f = small_file(&len), *g = malloc(len);
	struct snap_disk_section *s = &table(f)[find(f, SNAP_SEC_MEM_MAP)];
	struct snap_disk_run *runs = (struct snap_disk_run *)(f + s->offset + 16);
	u64 nr = *(u64 *)(f + s->offset + 8);

	/* [0..6], [170..171], [190], [255] of 256 pages. */
	ck_assert_uint_eq(nr, 4);
	ck_assert_uint_eq(runs[0].nr_pages, 7);
	ck_assert_uint_eq(runs[3].first_page, 255);
	memcpy(g, f, len);
	set_run(g, 3, 256, 1);
	expect_refused(g, len, 0, "run 3 ends past RAM (256 pages)");
	memcpy(g, f, len);
	set_run(g, 3, ~0ull, 2); /* wraps */
	expect_refused(g, len, 0, "run 3 ends past RAM");
	memcpy(g, f, len);
	set_run(g, 1, 3, 2); /* starts inside run 0 */
	expect_refused(g, len, 0, "run 1 (page 3) out of order");
	memcpy(g, f, len);
	set_run(g, 2, 100, 1); /* before run 1 */
	expect_refused(g, len, 0, "run 2 (page 100) out of order");
	memcpy(g, f, len);
	set_run(g, 2, 190, 0);
	expect_refused(g, len, 0, "run 2 (page 190) out of order");
	memcpy(g, f, len);
	set_run(g, 2, 190, 2); /* one page more than the data holds */
	expect_refused(g, len, 0, "memory map: 12 pages, memory data holds 45056 bytes");
	/* A run count that does not match the section's length. */
	memcpy(g, f, len);
	s = &table(g)[find(g, SNAP_SEC_MEM_MAP)];
	*(u64 *)(g + s->offset + 8) = 5;
	s->crc = snap_crc32c(0, g + s->offset, s->length);
	reseal(g);
	expect_refused(g, len, 0, "memory map: 5 runs in 80 bytes");
	free(g);
	free(f);
}
END_TEST

/* Files in dir other than the final name: a temporary one the writer left behind. */
static size_t stray_files(const char *final)
{
	char pat[300];
	glob_t g;
	size_t n = 0;

	snprintf(pat, sizeof(pat), "%s/*", dir);
	if (glob(pat, 0, NULL, &g) == 0) {
		for (size_t i = 0; i < g.gl_pathc; i++)
			n += strcmp(g.gl_pathv[i], final) != 0;
		globfree(&g);
	}
	return n;
}

START_TEST(writer_never_leaves_partial_file)
{
	char path[300];
	struct snap_machine m = machine(SMALL_RAM);
	u8 *ram = make_ram(SMALL_RAM), *data;
	struct snap_writer *w;
	size_t len;

	path_in_dir(path, sizeof(path), "w.snap");
	ck_assert_int_eq(write_full(open(path, O_WRONLY | O_CREAT, 0600), "old", 3), 3);
	/* While sections are written, PATH is still the old file. */
	ck_assert_int_eq(snap_writer_open(&w, path, &m, err, sizeof(err)), 0);
	ck_assert_int_eq(snap_add(w, SNAP_SEC_VM, 0, "x", 1), 0);
	ck_assert_int_eq(snap_add_memory(w, ram, SMALL_RAM), 0);
	ck_assert_int_eq(read_file(path, &data, &len), 0);
	ck_assert_uint_eq(len, 3);
	free(data);
	ck_assert_uint_eq(stray_files(path), 1);
	snap_writer_abort(w);
	ck_assert_uint_eq(stray_files(path), 0);
	/* A failed step: the error sticks, finish reports it, PATH is untouched, no temp left. */
	ck_assert_int_eq(snap_writer_open(&w, path, &m, err, sizeof(err)), 0);
	ck_assert_int_eq(snap_add_memory(w, ram, SMALL_RAM / 2), -EINVAL);
	ck_assert_int_eq(snap_add(w, SNAP_SEC_VM, 0, "x", 1), -EINVAL);
	ck_assert_int_eq(snap_writer_finish(w, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "memory image is not the machine's RAM size"));
	ck_assert_int_eq(read_file(path, &data, &len), 0);
	ck_assert_uint_eq(len, 3);
	free(data);
	ck_assert_uint_eq(stray_files(path), 0);
	/* A directory that is not there: refused at open. */
	ck_assert_int_eq(snap_writer_open(&w, "/nonexistent/dir/x.snap", &m, err, sizeof(err)),
			 -ENOENT);
	/* Success replaces PATH whole and leaves nothing else. */
	write_snapshot(path, SMALL_RAM, ram);
	ck_assert_uint_eq(stray_files(path), 0);
	ck_assert_int_eq(read_file(path, &data, &len), 0);
	ck_assert_int_eq(open_bytes(data, len, SNAP_OPEN_VERIFY_MEMORY), 0);
	free(data);
	munmap(ram, SMALL_RAM);
}
END_TEST

START_TEST(records)
{
	struct snap_rec_buf b = { 0 };
	struct snap_rec_iter it;
	u32 a = 0x11223344, out32;
	u64 big = 0x5566778899aabbccull, out64;
	const void *d;
	u32 n;
	u16 tag;

	snap_rec_put(&b, 7, &a, sizeof(a));
	snap_rec_put(&b, 9, NULL, 0);
	snap_rec_put(&b, 8, &big, sizeof(big));
	ck_assert_int_eq(b.err, 0);
	ck_assert_uint_eq(b.len, 3 * 6 + 4 + 8);
	ck_assert_int_eq(snap_rec_get(b.buf, b.len, 8, &out64, sizeof(out64)), 0);
	ck_assert_uint_eq(out64, big);
	ck_assert_int_eq(snap_rec_get(b.buf, b.len, 7, &out32, sizeof(out32)), 0);
	ck_assert_uint_eq(out32, a);
	/* A record of another size than the struct asked for, an absent tag. */
	ck_assert_int_eq(snap_rec_get(b.buf, b.len, 7, &out64, sizeof(out64)), -EBADMSG);
	ck_assert_int_eq(snap_rec_get(b.buf, b.len, 1, &out32, sizeof(out32)), -ENOENT);
	/* Cut anywhere inside the last record: every get fails, nothing read past the end. */
	for (size_t cut = b.len - 14 + 1; cut < b.len; cut++) {
		out32 = 0;
		ck_assert_int_eq(snap_rec_get(b.buf, cut, 7, &out32, sizeof(out32)), -EBADMSG);
		ck_assert_uint_eq(out32, 0);
	}
	it = (struct snap_rec_iter){ b.buf, b.len };
	ck_assert_int_eq(snap_rec_next(&it, &tag, &d, &n), 1);
	ck_assert_uint_eq(tag, 7);
	ck_assert_int_eq(snap_rec_next(&it, &tag, &d, &n), 1);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(snap_rec_next(&it, &tag, &d, &n), 1);
	ck_assert_int_eq(snap_rec_next(&it, &tag, &d, &n), 0);
	snap_rec_free(&b);
}
END_TEST

static Suite *snap_suite(void)
{
	Suite *s = suite_create("snap");
	TCase *tc = tcase_create("file");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, crc32c_known_value);
	tcase_add_test(tc, round_trip_sparse);
	tcase_add_test(tc, machine_mismatch);
	tcase_add_test(tc, truncated_everywhere);
	tcase_add_test(tc, header_fields);
	tcase_add_test(tc, flipped_byte_in_each_section);
	tcase_add_test(tc, bad_extents);
	tcase_add_test(tc, bad_memory_map);
	tcase_add_test(tc, writer_never_leaves_partial_file);
	tcase_add_test(tc, records);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(snap_suite)

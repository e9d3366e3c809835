/* The snapshot file's on-disk structures (little-endian, as x86 stores them), shared by the writer and the reader. */
#ifndef LKVM_SNAP_FORMAT_H
#define LKVM_SNAP_FORMAT_H

#include "lkvm/snap.h"

#define SNAP_MAGIC "LKVMSNAP"
#define SNAP_HEADER_LEN 128
/* A table larger than this is a corrupted count, not a machine (1024 vCPUs and devices fit). */
#define SNAP_MAX_SECTIONS 65536
#define SNAP_MAX_VCPUS 1024

/* At offset 0. header_crc covers bytes 0..123 (itself excluded). */
struct snap_disk_header {
	char magic[8];
	u32 version;
	u32 header_len;
	u32 flags; /* none defined: a set bit is a feature this reader lacks */
	u32 nr_vcpus;
	u64 ram_bytes;
	u64 file_len;  /* the whole file: a shorter one was truncated */
	u64 table_off; /* the table ends the file */
	u32 nr_sections;
	u32 page_size;
	u8 cpuid_digest[SNAP_DIGEST_LEN];
	char lkvm_version[SNAP_VERSION_LEN];
	u32 table_crc;
	u32 header_crc;
};
_Static_assert(sizeof(struct snap_disk_header) == SNAP_HEADER_LEN, "header layout");

/* One per section, in the order they were written. */
struct snap_disk_section {
	u32 type;
	u32 instance;
	u64 offset;
	u64 length;
	u32 crc;   /* CRC32C of the section's bytes */
	u32 flags; /* none defined */
};
_Static_assert(sizeof(struct snap_disk_section) == 32, "table entry layout");

/* SNAP_SEC_MEM_MAP: this, then nr_runs runs; the data section holds the runs' pages in order. */
struct snap_disk_memmap {
	u32 page_size;
	u32 reserved;
	u64 nr_runs;
};
struct snap_disk_run {
	u64 first_page;
	u64 nr_pages;
};
_Static_assert(sizeof(struct snap_disk_memmap) == 16 && sizeof(struct snap_disk_run) == 16,
	       "memory map layout");

u32 snap_crc32c_sw(u32 crc, const void *buf, size_t len);

#endif

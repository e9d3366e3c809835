/* The snapshot file (snap/): a versioned, checksummed container of sections and a sparse memory image; knows files and bytes, not KVM. */
#ifndef LKVM_SNAP_H
#define LKVM_SNAP_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

#include "lkvm/util.h"

/* The format this lkvm writes and the only one it reads (docs/snapshot.md has the layout). */
#define SNAP_VERSION 1
#define SNAP_PAGE_SIZE 4096u
#define SNAP_DIGEST_LEN 32
#define SNAP_VERSION_LEN 32

/* Section types. The container checks every section's bounds and checksum whatever its type;
 * what a VM, vCPU or device section holds is the VM side's (records, below). */
enum snap_sec_type {
	SNAP_SEC_MEM_MAP = 1,  /* the runs of present guest pages (written by snap_add_memory) */
	SNAP_SEC_MEM_DATA = 2, /* their bytes, page aligned in the file (mapped, not read) */
	SNAP_SEC_VM = 3,       /* irqchip, PIT, clock: one per file */
	SNAP_SEC_VCPU = 4,     /* instance = vCPU index */
	SNAP_SEC_DEVICE = 5,   /* instance = the device's place in the VM's list */
};

/* What a restore must match: the VM side fills it when writing and compares it when reading. */
struct snap_machine {
	u32 nr_vcpus;
	u64 ram_bytes;			     /* a multiple of SNAP_PAGE_SIZE */
	u8 cpuid_digest[SNAP_DIGEST_LEN];    /* the VM side's digest of the CPU features given */
	char lkvm_version[SNAP_VERSION_LEN]; /* NUL-terminated; recorded, not compared */
};

/* CRC32C (Castagnoli): SSE4.2's instruction when the CPU has it, a table otherwise. */
u32 snap_crc32c(u32 crc, const void *buf, size_t len);
const char *snap_sec_name(u32 type);

/*
 * Writer. Sections are appended to a temporary file beside PATH (PATH.tmp-XXXXXX); finish
 * writes the table and the header, fsyncs and renames it onto PATH, so PATH is either the
 * old file or the whole new one. The first error sticks: later calls return it and do
 * nothing, finish reports it (with its reason) and removes the temporary file.
 */
struct snap_writer;
int snap_writer_open(struct snap_writer **wp, const char *path, const struct snap_machine *m,
		     char *err, size_t errlen) __must_check;
/* As snap_writer_open, into fd (empty, at offset 0; not closed) that the caller created: finish
 * writes the table and header and nothing more (no fsync, no rename: the caller's). name is for
 * messages. */
int snap_writer_open_fd(struct snap_writer **wp, int fd, const char *name,
			const struct snap_machine *m, char *err, size_t errlen) __must_check;
int snap_add(struct snap_writer *w, u32 type, u32 instance, const void *buf, size_t len);
int snap_add_iov(struct snap_writer *w, u32 type, u32 instance, const struct iovec *iov,
		 int iovcnt);
/* Everything fd gives until end of file (a pipe or a file at its current offset). */
int snap_add_fd(struct snap_writer *w, u32 type, u32 instance, int fd);
/* Guest RAM of the machine's ram_bytes: pages that are all zero are left out, runs closer
 * than SNAP_GAP_PAGES are written as one (fewer mappings at restore for a few zero pages). */
#define SNAP_GAP_PAGES 8
int snap_add_memory(struct snap_writer *w, const void *ram, u64 size);
/* Completes the file (0) or reports the first error; frees w either way. */
int snap_writer_finish(struct snap_writer *w, char *err, size_t errlen) __must_check;
/* Drops the file being written (PATH untouched); frees w. */
void snap_writer_abort(struct snap_writer *w);

/*
 * A new file put at PATH exactly as written, or not at all (snap/place.c; lkvm snapshot's
 * FILE), also in a directory other users can write: open makes it in a private directory
 * beside PATH (".BASE.lkvm-XXXXXXXX", 0700) and returns its fd; commit fsyncs it, renames it
 * onto PATH through the directories' descriptors, and checks that PATH is the file written
 * (-ESTALE, "not saved", when it is not), then fsyncs the directory; close removes the file
 * (unless placed) and the private directory. before_rename (NULL but in tests) runs between
 * the fsync and the rename. 0 or -errno, each with a one-line reason in err.
 */
struct snap_place {
	int dirfd, subfd, fd;
	bool placed;
	char sub[256], base[256], path[PATH_MAX];
};
int snap_place_open(struct snap_place *p, const char *path, char *err, size_t errlen) __must_check;
int snap_place_commit(struct snap_place *p, void (*before_rename)(void *arg), void *arg, char *err,
		      size_t errlen) __must_check;
void snap_place_close(struct snap_place *p);

/*
 * Reader. Open validates the whole container before it returns: magic, version, sizes,
 * checksums of the header, the table and every section but the memory data, every section
 * inside the file and apart from the others, the memory map's runs within RAM and in order.
 * The memory data's checksum is read only with SNAP_OPEN_VERIFY_MEMORY: reading the whole
 * image is what mapping it saves.
 */
#define SNAP_OPEN_VERIFY_MEMORY 1u
struct snap_reader;
int snap_open(struct snap_reader **rp, const char *path, unsigned flags, char *err,
	      size_t errlen) __must_check;
/* As snap_open on an open fd (kept by the reader, closed by snap_close); name is for messages. */
int snap_open_fd(struct snap_reader **rp, int fd, const char *name, unsigned flags, char *err,
		 size_t errlen) __must_check;
void snap_close(struct snap_reader *r);
const struct snap_machine *snap_machine(const struct snap_reader *r);
/* First mismatch of the machine against want (vCPUs, RAM, CPU features): -EINVAL and a reason. */
int snap_check_machine(const struct snap_reader *r, const struct snap_machine *want, char *err,
		       size_t errlen) __must_check;
/* The section's checksummed bytes (valid until snap_close), or -ENOENT. */
int snap_section(const struct snap_reader *r, u32 type, u32 instance, const void **data,
		 size_t *len) __must_check;
/* The table in file order, so the VM side can refuse sections it does not know. */
u32 snap_nr_sections(const struct snap_reader *r);
void snap_section_at(const struct snap_reader *r, u32 i, u32 *type, u32 *instance);
/* Maps the present pages over ram (size = ram_bytes) privately, copy-on-write, from the
 * file; pages absent from the file are left as they are, so ram must be zeroed (a fresh
 * anonymous mapping). One mapping per run. */
int snap_map_memory(const struct snap_reader *r, void *ram, u64 size, char *err,
		    size_t errlen) __must_check;

/*
 * Records inside a section: (tag u16, length u32, bytes) one after another, little-endian,
 * no padding. A getter checks the record's length against the struct the caller expects,
 * so nothing is read past a section's end or past a record's.
 */
struct snap_rec_buf {
	u8 *buf;
	size_t len, cap;
	int err; /* -ENOMEM or -E2BIG once, then every put is a no-op */
};
void snap_rec_put(struct snap_rec_buf *b, u16 tag, const void *data, size_t len);
void snap_rec_free(struct snap_rec_buf *b);
struct snap_rec_iter {
	const u8 *p;
	size_t left;
};
/* 1 and the next record, 0 at the end, -EBADMSG for a record that runs past the end. */
int snap_rec_next(struct snap_rec_iter *it, u16 *tag, const void **data, u32 *len);
/* Copies record tag (its first) into out: -ENOENT when absent, -EBADMSG when its length is not
 * len or the section is malformed. */
int snap_rec_get(const void *sec, size_t sec_len, u16 tag, void *out, size_t len) __must_check;

/* Record tag (the first) as NUL-terminated words, at most max bytes: a NULL-terminated array of
 * *n copies (snap_words_free). -ENOENT absent, -EBADMSG empty, too long, not NUL-terminated or
 * a malformed section, -ENOMEM. */
int snap_rec_words(const void *sec, size_t sec_len, u16 tag, size_t max, char ***words,
		   int *n) __must_check;
void snap_words_free(char **words, int n);

#endif

/* Fuzz targets: one entry point each, run by libFuzzer (tests/fuzz/libfuzzer.c) and replayed by test_fuzz_regress. */
#ifndef LKVM_FUZZ_H
#define LKVM_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Each takes one input and returns 0; a bug shows as a sanitizer report or a trap. */
int fuzz_virtqueue(const uint8_t *data, size_t size);
int fuzz_pci(const uint8_t *data, size_t size);
int fuzz_net(const uint8_t *data, size_t size);
int fuzz_boot(const uint8_t *data, size_t size);
int fuzz_opts(const uint8_t *data, size_t size);
int fuzz_p9(const uint8_t *data, size_t size);
int fuzz_stream(const uint8_t *data, size_t size);
int fuzz_bench(const uint8_t *data, size_t size);
int fuzz_snap(const uint8_t *data, size_t size);
int fuzz_gdb(const uint8_t *data, size_t size);
int fuzz_dhcp(const uint8_t *data, size_t size);
int fuzz_vcon(const uint8_t *data, size_t size);
int fuzz_fuse(const uint8_t *data, size_t size);
int fuzz_qcow2(const uint8_t *data, size_t size);
int fuzz_failon(const uint8_t *data, size_t size);

/* A broken invariant the sanitizers cannot see: stop here so libFuzzer keeps the input. */
#define FUZZ_ASSERT(c)                    \
	do {                              \
		if (!(c))                 \
			__builtin_trap(); \
	} while (0)

/* Input reader: takes little-endian fields from the front, zeroes once exhausted. */
struct fuzz_in {
	const uint8_t *p;
	size_t left;
};

static inline uint64_t fuzz_take(struct fuzz_in *in, int bytes)
{
	uint64_t v = 0;

	for (int i = 0; i < bytes && in->left; i++, in->p++, in->left--)
		v |= (uint64_t)*in->p << (8 * i);
	return v;
}

#endif

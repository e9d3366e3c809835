/* Fuzz target: the kernel loaders (x86/boot.c): bzImage, ELF with a PVH note, initrd placement, zero page. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "lkvm/boot.h"
#include "lkvm/layout.h"

/* Input: the kernel image, then a 3-byte trailer: u8 flags (bit 0 an initrd, bit 1 a
 * command line of exactly BOOT_CMDLINE_MAX - 1 characters, bit 2 one character too many,
 * bit 3 32 MiB of RAM instead of 16), u16 initrd length (taken off the image's end). */
#define BF_RAM_MAX MiB(32)

static u8 *ram;
static char longline[BOOT_CMDLINE_MAX + 1];

int fuzz_boot(const uint8_t *data, size_t size)
{
	struct boot_args a = { .cmdline = "console=ttyS0" };
	struct boot_entry e;
	struct guest_mem m;
	char err[256];
	u8 flags = 0;
	size_t ilen = 0;
	u64 ram_size;

	if (!ram) {
		ram = aligned_alloc(4096, BF_RAM_MAX);
		FUZZ_ASSERT(ram);
	}
	if (size >= 3) {
		flags = data[size - 3];
		ilen = (size_t)data[size - 2] | (size_t)data[size - 1] << 8;
		size -= 3;
	}
	a.kernel = data;
	a.kernel_len = size;
	if (flags & 1) {
		ilen = MIN(ilen, size);
		a.kernel_len = size - ilen;
		a.initrd = data + a.kernel_len;
		a.initrd_len = ilen;
	}
	if (flags & 6) {
		memset(longline, 'x', sizeof(longline));
		longline[(flags & 4) ? BOOT_CMDLINE_MAX : BOOT_CMDLINE_MAX - 1] = '\0';
		a.cmdline = longline;
	}
	ram_size = (flags & 8) ? BF_RAM_MAX : BOOT_MIN_RAM;
	FUZZ_ASSERT(gmem_init(&m, ram, ram_size) == 0);
	boot_detect(a.kernel, a.kernel_len);
	if (boot_load(&m, &a, &e, err, sizeof(err)) < 0) {
		FUZZ_ASSERT(memchr(err, '\0', sizeof(err)) && err[0]);
		return 0;
	}
	FUZZ_ASSERT(e.kind == BOOT_KIND_BZIMAGE || e.kind == BOOT_KIND_PVH);
	FUZZ_ASSERT(e.kernel_start <= e.kernel_end && e.kernel_end <= ram_size);
	FUZZ_ASSERT(range_ok(e.initrd_start, e.initrd_size, ram_size));
	FUZZ_ASSERT(e.initrd_size == (a.initrd ? a.initrd_len : 0));
	return 0;
}

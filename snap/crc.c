/* CRC32C for the snapshot file: the SSE4.2 instruction where the CPU has it, a table otherwise. */
#include <nmmintrin.h>
#include <pthread.h>

#include "format.h"

/* Reflected Castagnoli polynomial. */
#define CRC32C_POLY 0x82f63b78u

static u32 crc_table[256];

static void crc_table_init(void)
{
	for (u32 i = 0; i < 256; i++) {
		u32 c = i;

		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (CRC32C_POLY & -(c & 1));
		crc_table[i] = c;
	}
}

u32 snap_crc32c_sw(u32 crc, const void *buf, size_t len)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	const u8 *p = buf;

	pthread_once(&once, crc_table_init);
	crc = ~crc;
	while (len--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

/* Eight bytes an instruction: a memory image checksums at several GB/s. */
__attribute__((target("sse4.2"))) static u32 crc32c_hw(u32 crc, const u8 *p, size_t len)
{
	u64 c = ~crc;

	for (; len >= 8; p += 8, len -= 8) {
		u64 v;

		__builtin_memcpy(&v, p, 8);
		c = _mm_crc32_u64(c, v);
	}
	for (; len; p++, len--)
		c = _mm_crc32_u8((u32)c, *p);
	return ~(u32)c;
}

u32 snap_crc32c(u32 crc, const void *buf, size_t len)
{
	if (__builtin_cpu_supports("sse4.2"))
		return crc32c_hw(crc, buf, len);
	return snap_crc32c_sw(crc, buf, len);
}

const char *snap_sec_name(u32 type)
{
	static const char *const names[] = {
		[SNAP_SEC_MEM_MAP] = "memory map",
		[SNAP_SEC_MEM_DATA] = "memory",
		[SNAP_SEC_VM] = "vm",
		[SNAP_SEC_VCPU] = "vcpu",
		[SNAP_SEC_DEVICE] = "device",
	};

	if (type < ARRAY_SIZE(names) && names[type])
		return names[type];
	return "unknown";
}

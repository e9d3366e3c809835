/* Helpers test_gdb.c and test_gdb_server.c share: a known register set, a packet of a given length. */
#ifndef LKVM_GDB_HELPERS_H
#define LKVM_GDB_HELPERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/gdb-rsp.h"

/* A known pattern in every byte of a register set. */
static inline void fill_regs(struct gdb_x86_regs *r, u8 seed)
{
	u8 *p = (u8 *)r;

	for (size_t i = 0; i < sizeof(*r); i++)
		p[i] = (u8)(seed + i * 7);
}

/* '$', n bytes of 'a', '#', checksum. */
static inline char *long_packet(size_t n, size_t *len)
{
	char *p = malloc(n + 5); /* snprintf's NUL after the checksum */
	u8 sum = 0;

	p[0] = '$';
	memset(p + 1, 'a', n);
	for (size_t i = 0; i < n; i++)
		sum += 'a';
	snprintf(p + 1 + n, 4, "#%02x", sum);
	*len = n + 4;
	return p;
}

#endif

/* The qcow2 backend's entry point, for disk.c (a private header of disk/). */
#ifndef LKVM_DISK_QCOW2_H
#define LKVM_DISK_QCOW2_H

#include "lkvm/disk.h"

#define QCOW2_MAGIC "QFI\xfb"

/* The qcow2 image open on fd (owned from now on, closed on failure too), path its name (for
 * messages and the backing file's directory); backing: a backing file the user allows. */
int qcow2_open(int fd, const char *path, bool ro, const char *backing, struct disk **out, char *err,
	       size_t errlen) __must_check;

#endif

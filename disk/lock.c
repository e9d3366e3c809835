/* Disk images locked as QEMU locks them: one writer and nobody beside it, readers together. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "lkvm/disk.h"

/*
 * Two VMs never write one image (issue 40), as QEMU locks its images: with an open file
 * description (OFD) lock, held while the fd is open and dropped by the kernel when the
 * process dies; one of a second open() conflicts even in the same process (a POSIX lock would
 * not), and a byte-range lock past the data changes no I/O. A read-write opener holds a write
 * lock on the byte, a read-only one a read lock: two read-only openers share it, anything
 * with a writer is refused. The byte is QEMU's "write not shared" byte (RAW_LOCK_SHARED_BASE
 * 200 + BLK_PERM_WRITE's bit 1): QEMU's writers test it and its read-only openers (qemu-img
 * info) take a read lock on it, so each also sees lkvm's writer.
 */
#define BLK_LOCK_BYTE 201

int disk_lock(int fd, bool ro, const char *path, char *err, size_t errlen)
{
	struct flock fl = { .l_type = ro ? F_RDLCK : F_WRLCK,
			    .l_whence = SEEK_SET,
			    .l_start = BLK_LOCK_BYTE,
			    .l_len = 1 };

	if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
		return 0;
	if (errno != EAGAIN && errno != EACCES) {
		errfmt(err, errlen, "-d '%s': cannot lock it: %s", path, strerror(errno));
		return -errno;
	}
	/* Who holds it, for the message: a writer, or (to a writer) a reader. */
	fl = (struct flock){
		.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = BLK_LOCK_BYTE, .l_len = 1
	};
	if (fcntl(fd, F_OFD_GETLK, &fl) < 0)
		fl.l_type = F_WRLCK;
	errfmt(err, errlen, "disk %s is in use by another process (%s)", path,
	       fl.l_type == F_RDLCK ? "open read-only" : "locked for writing");
	return -EBUSY;
}

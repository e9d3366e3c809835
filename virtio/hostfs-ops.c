/* The rules both file servers apply to host files: lookups beneath a directory, kernel-interface mounts kept opaque, opening for I/O (pinned, capped, O_NOATIME on read-only shares), modes a guest may set. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <linux/magic.h>
#include <linux/openat2.h>

#include "hostfs-priv.h"

#define RESOLVE_FLAGS (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

int hostfs_fd_stat(int fd, struct stat *st)
{
	return fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ? hostfs_errno() : 0;
}

/* One component beneath dfd: never leaves it (-EXDEV) and never follows a symlink (-ELOOP;
 * with O_PATH a final link is opened itself). */
int hostfs_open_beneath(int dfd, const char *name, u64 flags, u64 mode)
{
	struct open_how how = {
		.flags = flags | O_NOFOLLOW | O_CLOEXEC,
		.mode = mode,
		.resolve = RESOLVE_FLAGS,
	};
	long fd = syscall(SYS_openat2, dfd, name, &how, sizeof(how));

	return fd < 0 ? hostfs_errno() : (int)fd;
}

void hostfs_proc_name(char buf[16], int fd)
{
	snprintf(buf, 16, "%d", fd);
}

/* File systems that are kernel interfaces, not files: opaque when met inside a share (the
 * host's /proc, /sys, debugfs... when the share is "/"): their root can be looked up and
 * stat'ed, so the guest can mount its own over it, but not opened, listed or walked into. */
static const long kernel_fs_types[] = {
	PROC_SUPER_MAGIC,	  SYSFS_MAGIC,	      DEBUGFS_MAGIC,	  TRACEFS_MAGIC,
	SECURITYFS_MAGIC,	  BPF_FS_MAGIC,	      CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC,
	EFIVARFS_MAGIC,		  PSTOREFS_MAGIC,     SELINUX_MAGIC,	  SMACK_MAGIC,
	BINFMTFS_MAGIC,		  DEVPTS_SUPER_MAGIC, NSFS_MAGIC,	  0x62656570 /* configfs */,
	0x65735543 /* fusectl */,
};

bool hostfs_kernel_fs(int fd)
{
	struct statfs sfs;

	if (fstatfs(fd, &sfs) < 0)
		return true; /* cannot tell: do not expose it */
	for (size_t i = 0; i < ARRAY_SIZE(kernel_fs_types); i++)
		if (sfs.f_type == kernel_fs_types[i])
			return true;
	return false;
}

/*
 * openat for I/O; on a read-only share with O_NOATIME, so that the guest's reads leave the
 * host's access times as they were (a share is often the host's root, read-only, and every
 * file a guest boot reads would look used). O_NOATIME is refused with EPERM unless we own
 * the file or hold CAP_FOWNER (lkvm drops its capabilities once set up, and may run as
 * anyone): then one more try without it, so someone else's file is still read, its atime
 * moving as for any reader. Another EPERM is the same answer again.
 */
int hostfs_open_at(const struct hostfs *fs, int dfd, const char *name, int flags)
{
	int fd = -1;

	if (fs->readonly)
		fd = openat(dfd, name, flags | O_NOATIME);
	if (!fs->readonly || (fd < 0 && errno == EPERM))
		fd = openat(dfd, name, flags);
	return fd < 0 ? hostfs_errno() : fd;
}

static const char *const cap_what[HOSTFS_CAP_NR] = {
	[HOSTFS_CAP_NODES] = "files known to the guest at once",
	[HOSTFS_CAP_OPEN] = "files open at once",
};
/* How each cap is raised: the open-file cap follows the descriptor limit (host-files.h's
 * host_files_fit), the node cap is memory and fixed. */
static const char *const cap_raise[HOSTFS_CAP_NR] = {
	[HOSTFS_CAP_NODES] = "a fixed bound on lkvm's memory",
	[HOSTFS_CAP_OPEN] = "raise it with ulimit -n",
};
_Static_assert(ARRAY_SIZE(cap_what) == HOSTFS_CAP_NR, "cap_what indexed by enum hostfs_cap");

void hostfs_cap_hit(struct hostfs *fs, enum hostfs_cap cap)
{
	u32 max = cap == HOSTFS_CAP_NODES ? fs->max_nodes : fs->max_open;
	char msg[256];

	fs->st.cap_hits[cap]++;
	if (fs->warned[cap])
		return;
	fs->warned[cap] = true;
	if (!fs->warn)
		return;
	snprintf(msg, sizeof(msg),
		 "share %s: %u %s (the most): the guest's next ones fail with ENFILE; %s",
		 fs->label, max, cap_what[cap], cap_raise[cap]);
	fs->warn(fs->warn_opaque, msg);
}

/*
 * Open what n names for I/O: a directory through "." beneath it, a regular file through its
 * /proc/self/fd magic link (the only way to reopen an O_PATH descriptor; it names the same
 * inode, whatever happened to its path). Nothing else is opened: a FIFO would block the
 * server, a device node would hand the guest a host device.
 */
static int open_node(struct hostfs *fs, const struct hostfs_node *n, int pfd, int flags)
{
	char name[16];

	if (S_ISDIR(n->mode)) {
		if ((flags & O_ACCMODE) != O_RDONLY)
			return -EISDIR;
		return hostfs_open_at(fs, pfd, ".", (flags & ~O_TRUNC) | O_DIRECTORY | O_CLOEXEC);
	}
	if (flags & O_DIRECTORY)
		return -ENOTDIR;
	hostfs_proc_name(name, pfd);
	return hostfs_open_at(fs, fs->proc_fd, name, flags | O_CLOEXEC | O_NOCTTY);
}

int hostfs_open_room(struct hostfs *fs)
{
	if (fs->nopen < fs->max_open)
		return 0;
	hostfs_cap_hit(fs, HOSTFS_CAP_OPEN);
	return -ENFILE;
}

int hostfs_take_io(struct hostfs *fs, struct hostfs_node *n, int fd)
{
	int ret = hostfs_open_room(fs);

	if (!ret)
		ret = hostfs_fd(fs, n); /* pinned means cached: it must hold its O_PATH one */
	if (ret < 0)
		return ret;
	hostfs_pin(fs, n);
	fs->nopen++;
	return 0;
}

int hostfs_open_io(struct hostfs *fs, struct hostfs_node *n, int flags)
{
	int pfd, fd;

	if (n->opaque)
		return -EACCES;
	if (!S_ISDIR(n->mode) && !S_ISREG(n->mode))
		return S_ISLNK(n->mode) ? -ELOOP : -EPERM;
	if (hostfs_open_room(fs))
		return -ENFILE;
	pfd = hostfs_fd(fs, n);
	if (pfd < 0)
		return pfd;
	fd = open_node(fs, n, pfd, flags);
	if (fd < 0)
		return fd;
	/* Pinned: an open file keeps its O_PATH descriptor, so it is never looked up by a name
	 * that may name another file now (open-unlink-fstat, rename over an open file). */
	hostfs_pin(fs, n);
	fs->nopen++;
	return fd;
}

void hostfs_release_io(struct hostfs *fs, struct hostfs_node *n, int fd)
{
	if (fd >= 0)
		close(fd);
	if (!n->nopen)
		return; /* a reset released it already */
	hostfs_unpin(fs, n);
	fs->nopen--;
}

/*
 * The permission bits a guest may give a host file: never set-user-ID or set-group-ID on a
 * file (lkvm may run as root, and such a file in a share would run with lkvm's credentials
 * for whoever on the host executes it); a directory keeps set-group-ID (group inheritance).
 */
u32 hostfs_guest_mode(u32 mode, bool dir)
{
	return mode & (dir ? 03777u : 01777u);
}

/* A device node in a share would give whoever reaches it on the host the device. */
bool hostfs_is_device_type(u32 mode)
{
	return S_ISCHR(mode) || S_ISBLK(mode);
}

/*
 * A new file gets exactly the mode the guest asked for (hostfs_guest_mode() applied): our
 * umask does not take bits away (the guest applied its own), nor does mkdir drop
 * set-group-ID; a directory keeps the set-group-ID it inherited. fd: the new file, never a
 * symlink; changed through its magic link, so exactly its inode.
 */
int hostfs_fix_mode(struct hostfs *fs, int fd, const struct stat *st, u32 mode)
{
	u32 want = mode | (S_ISDIR(st->st_mode) ? st->st_mode & S_ISGID : 0);
	char name[16];

	if ((st->st_mode & 07777) == want)
		return 0;
	hostfs_proc_name(name, fd);
	return fchmodat(fs->proc_fd, name, want, 0) < 0 ? hostfs_errno() : 0;
}

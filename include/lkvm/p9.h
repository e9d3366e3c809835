/* 9P2000.L file server for one shared host directory, independent of any transport: one T-message in, one R-message out. */
#ifndef LKVM_P9_H
#define LKVM_P9_H

#include <sys/types.h>
#include <sys/uio.h>

#include "lkvm/hostfs.h"
#include "lkvm/util.h"

/*
 * Bounds (every one of them applies to what a guest can make the server hold):
 * - msize: Linux's virtio transport never negotiates more than PAGE_SIZE * (VIRTQUEUE_NUM - 3)
 *   = 500 KiB (its default is 128 KiB); 512 KiB lets `msize=512000` through and caps what one
 *   request can make us read, write or buffer. Linux refuses a server below 4 KiB; from 4 KiB
 *   every fixed-size reply fits (Rgetattr is 160 bytes, a 16-name Rwalk 217), but not every
 *   Rreadlink: a target may be PATH_MAX - 1 = 4095 bytes, 4104 with the reply's header and
 *   length, so one longer than 4087 bytes answers EMSGSIZE at msize 4096.
 * - fids: a fid is a slot of the server's table (struct p9_fid: an id, its kind, an open
 *   descriptor when opened, and a reference to a hostfs node) naming a node of the share's
 *   hostfs table, shared by every fid naming the same host file. A fid holds no path and no
 *   descriptor of its own: descriptors are hostfs's, bounded by its cache and open caps
 *   (max_cached, max_open), nodes by its node cap (hostfs.h). So the fid bound is memory:
 *   P9_FIDS_DEFAULT per share, past which Twalk, Tattach and Txattrwalk answer ENFILE (and
 *   the first time, one warning); the table grows with use, never beyond twice the bound in
 *   slots. docs/devices.md states the bytes.
 */
#define P9_MSIZE_MIN 4096u
#define P9_MSIZE_MAX KiB(512)
#define P9_FIDS_DEFAULT (1u << 20)
#define P9_FIDS_MAX (1u << 22)
/* Most iovecs on either side of one request (the virtqueue's own chain bound). */
#define P9_MAX_IOV 1024

/* Message types (Linux's include/net/9p/9p.h); an R-message's type is its T-message's + 1. */
enum p9_msg_type {
	P9_TLERROR = 6,
	P9_RLERROR = 7,
	P9_TSTATFS = 8,
	P9_TLOPEN = 12,
	P9_TLCREATE = 14,
	P9_TSYMLINK = 16,
	P9_TMKNOD = 18,
	P9_TRENAME = 20,
	P9_TREADLINK = 22,
	P9_TGETATTR = 24,
	P9_TSETATTR = 26,
	P9_TXATTRWALK = 30,
	P9_TXATTRCREATE = 32,
	P9_TREADDIR = 40,
	P9_TFSYNC = 50,
	P9_TLOCK = 52,
	P9_TGETLOCK = 54,
	P9_TLINK = 70,
	P9_TMKDIR = 72,
	P9_TRENAMEAT = 74,
	P9_TUNLINKAT = 76,
	P9_TVERSION = 100,
	P9_TAUTH = 102,
	P9_TATTACH = 104,
	P9_TFLUSH = 108,
	P9_TWALK = 110,
	P9_TOPEN = 112,
	P9_TCREATE = 114,
	P9_TREAD = 116,
	P9_TWRITE = 118,
	P9_TCLUNK = 120,
	P9_TREMOVE = 122,
	P9_TSTAT = 124,
	P9_TWSTAT = 126,
};

#define P9_HDR_SIZE 7 /* size[4] type[1] tag[2] */
#define P9_NOFID 0xffffffffu
#define P9_NOTAG 0xffffu
#define P9_MAXWELEM 16 /* names in one Twalk */
#define P9_VERSION_L "9P2000.L"

/* qid types */
#define P9_QTDIR 0x80
#define P9_QTSYMLINK 0x02
#define P9_QTFILE 0x00

/* Tlopen/Tlcreate flags (9P2000.L: Linux's own values on x86) */
#define P9_DOTL_ACCMODE 03
#define P9_DOTL_NOACCESS 03
#define P9_DOTL_CREATE 0100
#define P9_DOTL_EXCL 0200
#define P9_DOTL_NOCTTY 0400
#define P9_DOTL_TRUNC 01000
#define P9_DOTL_APPEND 02000
#define P9_DOTL_NONBLOCK 04000
#define P9_DOTL_DSYNC 010000
#define P9_DOTL_FASYNC 020000
#define P9_DOTL_DIRECT 040000
#define P9_DOTL_LARGEFILE 0100000
#define P9_DOTL_DIRECTORY 0200000
#define P9_DOTL_NOFOLLOW 0400000
#define P9_DOTL_NOATIME 01000000
#define P9_DOTL_CLOEXEC 02000000
#define P9_DOTL_SYNC 04000000
#define P9_DOTL_AT_REMOVEDIR 0x200 /* Tunlinkat */

/* Tsetattr valid bits */
#define P9_SETATTR_MODE 0x001
#define P9_SETATTR_UID 0x002
#define P9_SETATTR_GID 0x004
#define P9_SETATTR_SIZE 0x008
#define P9_SETATTR_ATIME 0x010
#define P9_SETATTR_MTIME 0x020
#define P9_SETATTR_CTIME 0x040
#define P9_SETATTR_ATIME_SET 0x080
#define P9_SETATTR_MTIME_SET 0x100

/* Rgetattr valid mask: mode to blocks */
#define P9_STATS_BASIC 0x7ffull

/* Tlock / Tgetlock */
#define P9_LOCK_TYPE_RDLCK 0
#define P9_LOCK_TYPE_WRLCK 1
#define P9_LOCK_TYPE_UNLCK 2
#define P9_LOCK_SUCCESS 0

struct p9_server;

struct p9_server_opts {
	bool readonly; /* every request that would change the host answers EROFS */
	u32 max_msize; /* 0: P9_MSIZE_MAX; else clamped to [P9_MSIZE_MIN, P9_MSIZE_MAX] */
	u32 max_fids;  /* 0: P9_FIDS_DEFAULT; else at most P9_FIDS_MAX */
	/* the node table's caps, the share's label and the warning said once per bound reached
	 * (the fid bound's too); readonly is copied in */
	struct hostfs_opts fs;
};

/* Counters for --stats and `lkvm stat` (read by the thread that calls p9_server_handle). */
struct p9_stats {
	u64 requests;	  /* messages answered (framing errors not included) */
	u64 errors;	  /* of those, answered with Rlerror */
	u64 reads;	  /* Tread requests answered with data or EOF (how finely a read was cut) */
	u64 read_bytes;	  /* file data returned by Tread */
	u64 write_bytes;  /* file data written by Twrite */
	u32 fids;	  /* fids in use now */
	u32 max_fids;	  /* the bound */
	u32 msize;	  /* negotiated by the last Tversion (0: none yet) */
	u64 fid_cap_hits; /* fids refused at max_fids */
	struct hostfs_stats fs; /* the share's nodes, descriptors and caps */
};

/*
 * Serve the directory `root` (opened once, here; every later access is relative to it).
 * Needs Linux 5.6+ (openat2) and /proc mounted (an O_PATH fid is reopened for I/O through
 * /proc/self/fd, the one way to do that without a path string). Returns 0 with *out set,
 * or -errno with a reason in err.
 *
 * Ownership: files are created with the guest's mode bits (exactly: our umask does not
 * apply) and owned by whoever runs lkvm; the uid and gid a guest names at attach and create
 * are not used, and its chown requests reach the host as they are (they fail with EPERM
 * once capabilities are dropped). This is QEMU's security_model=none / virtme-ng's setup:
 * the guest sees the host's owners and modes, and the host's permission checks apply to
 * lkvm's own credentials. One exception: no file gets set-user-ID or set-group-ID (lkvm
 * may be root, and such a file would run as lkvm's user for any host user); directories
 * may be set-group-ID.
 */
int p9_server_open(struct p9_server **out, const char *root, const struct p9_server_opts *opts,
		   char *err, size_t errlen) __must_check;
void p9_server_close(struct p9_server *s);

/*
 * Answer one request. req: the readable buffers holding the T-message (its size field
 * first); resp: the writable buffers for the R-message. Both are read or written once each
 * (what is parsed is copied first, so a guest changing them meanwhile changes nothing);
 * Twrite data goes from req and Tread data into resp without a copy in between.
 * Returns the R-message's length (an Rlerror for anything wrong inside the message; EMSGSIZE
 * when the reply would not fit msize or resp, decided before the request changes anything), or
 * -errno when the framing itself is unusable and no reply can be made: fewer than 7
 * readable bytes, a size field below 7 or above the readable bytes (-EBADMSG), fewer than
 * 11 writable bytes (-ENOBUFS), more than P9_MAX_IOV buffers (-EINVAL). The device then
 * sets NEEDS_RESET. Calls on one server must not overlap (one server thread); different
 * servers are independent.
 */
ssize_t p9_server_handle(struct p9_server *s, const struct iovec *req, int req_cnt,
			 const struct iovec *resp, int resp_cnt) __must_check;

/* A new fid bound (0: P9_FIDS_DEFAULT; at most P9_FIDS_MAX), for a server that answers no
 * request meanwhile. Fids beyond it stay until clunked; no new one is made past it. */
void p9_server_set_max_fids(struct p9_server *s, u32 max_fids);

/* Device reset: every fid clunked, the session back to before Tversion. */
void p9_server_reset(struct p9_server *s);

void p9_server_stats(const struct p9_server *s, struct p9_stats *st);
/* The share's node table (its caps settled by the device: host_files_fit). */
struct hostfs *p9_server_fs(struct p9_server *s);

/*
 * Snapshot (virtio/9p-snap.c): the session (msize) and every fid as records of tags tag ..
 * tag + P9_SNAP_TAGS - 1, each fid by its path beneath the share, its kind, whether it is
 * open and with which flags. Save: the server answers nothing meanwhile (its thread parked);
 * refused (-EOPNOTSUPP, the fid and why in err) for an xattr fid, a fid whose path is not
 * known (longer than PATH_MAX - 1) and one whose file was removed from the share (open or
 * not: its path names nothing, or another file). Load, on a server that has answered
 * nothing: every fid's path walked beneath the root as Twalk walks it and, if it was open,
 * opened again with its flags (never truncating); a path gone is "fid N's path 'a/b' is gone
 * from the share (ENOENT)", another kind or (on the same share) another inode refused too.
 * Every field is checked as a guest's request would be: -EINVAL with a one-line reason, the
 * server left with no fid.
 */
#define P9_SNAP_TAGS 3
struct snap_rec_buf;
int p9_server_save(struct p9_server *s, u16 tag, struct snap_rec_buf *b, char *err,
		   size_t errlen) __must_check;
int p9_server_load(struct p9_server *s, u16 tag, const void *sec, size_t len, char *err,
		   size_t errlen) __must_check;

/* The server's one lookup of a guest's name, exposed for tests: name opened beneath the
 * directory dfd with openat2 (flags | O_NOFOLLOW | O_CLOEXEC, mode for O_CREAT), never
 * leaving it (absolute names and ".." past dfd: -EXDEV) and following no symlink (-ELOOP;
 * with O_PATH, a final link is opened itself). Returns an fd or -errno. */
int p9_open_beneath(int dfd, const char *name, u64 flags, u64 mode) __must_check;

#endif

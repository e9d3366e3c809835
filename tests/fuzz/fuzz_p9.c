/* Fuzz target: the 9P2000.L server (virtio/9p-server.c) on a temporary tree, one session per input; nothing outside the share may be touched. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "fuzz.h"
#include "lkvm/p9.h"

/*
 * Input: u8 flags, then messages, each a u16 length and that many bytes handed to the
 * server as one request, its own size field included (so it may lie).
 *   flags bit 0: read-only share
 *   bit 1: no handshake (otherwise the harness sends Tversion, msize 16384, and attaches fid 0)
 *   bits 2-3: the request's first 256 bytes cut into iovecs of (whole, 1, 5, 64) bytes
 *   bits 4-5: the reply's likewise
 *   bit 6: reply room 64 bytes instead of msize + 64; bit 7: 10 bytes (not even an Rlerror)
 * The share (created once per process, rebuilt before each input) holds a file, a directory,
 * a FIFO and symlinks pointing out (absolute and relative, to a file and a directory) and in;
 * beside it, outside the share, a directory with a secret file.
 * Oracles, besides the sanitizers: a negative return only for framing errors; a reply's
 * size field, tag and type consistent and within the buffers; no qid in any reply names the
 * tree's top, the outside directory, the secret or the directory above the tree; inotify sees
 * nothing outside the share opened, read, changed, created or removed; no set-id file or
 * device node left in the share; no descriptor leaks once the server is closed.
 */
#define FZ_MAX_MSIZE 65536
#define FZ_HANDSHAKE_MSIZE 16384
#define FZ_MAX_FIDS 32
#define FZ_ROOM (FZ_MAX_MSIZE + 64)

static struct {
	bool ready;
	char top[64], secret[128];
	int share_fd, ino, nfds;
	u64 forbidden[4]; /* inode numbers (the share's own device: qid.path is the inode) */
} fz;

/* Remove everything beneath dfd (modes may have been changed by the input), checking that
 * nothing the server must never make is there: a set-id file, a device node. */
static void wipe(int dfd)
{
	DIR *d;
	struct dirent *e;
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* its own offset */

	FUZZ_ASSERT(fd >= 0);
	d = fdopendir(fd);
	FUZZ_ASSERT(d);
	while ((e = readdir(d))) {
		struct stat st;
		int sub;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		FUZZ_ASSERT(fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0);
		FUZZ_ASSERT(S_ISDIR(st.st_mode) || !(st.st_mode & (S_ISUID | S_ISGID)));
		FUZZ_ASSERT(!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode));
		if (unlinkat(dfd, e->d_name, 0) == 0)
			continue;
		fchmodat(dfd, e->d_name, 0700, 0);
		sub = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		FUZZ_ASSERT(sub >= 0);
		wipe(sub);
		close(sub);
		FUZZ_ASSERT(unlinkat(dfd, e->d_name, AT_REMOVEDIR) == 0);
	}
	closedir(d);
}

static void put_file(int dfd, const char *name, const char *data)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	FUZZ_ASSERT(fd >= 0 && write(fd, data, strlen(data)) == (ssize_t)strlen(data));
	close(fd);
}

/* The share's contents, as every input finds them (wipe() empties it after each). */
static void populate(void)
{
	int d = fz.share_fd;

	FUZZ_ASSERT(fchmod(d, 0755) == 0);
	put_file(d, "file", "hello, world\n");
	FUZZ_ASSERT(mkdirat(d, "dir", 0755) == 0 && mkdirat(d, "dir/sub", 0755) == 0);
	put_file(d, "dir/inner", "inner\n");
	FUZZ_ASSERT(symlinkat(fz.secret, d, "abs") == 0);
	FUZZ_ASSERT(symlinkat("../outside/secret", d, "rel") == 0);
	FUZZ_ASSERT(symlinkat("../outside", d, "dirout") == 0);
	FUZZ_ASSERT(symlinkat("file", d, "in") == 0);
	FUZZ_ASSERT(mknodat(d, "fifo", S_IFIFO | 0644, 0) == 0);
}

static u64 ino_of(const char *path)
{
	struct stat st;

	FUZZ_ASSERT(lstat(path, &st) == 0);
	return st.st_ino;
}

static void cleanup(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", fz.top);
	if (system(cmd) != 0)
		fprintf(stderr, "fuzz_p9: could not remove %s\n", fz.top);
}

/* Descriptors open in this process. */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	FUZZ_ASSERT(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void fz_init(void)
{
	/* tmpfs when there is one: the tree is rebuilt for every input */
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	char outside[96], share[96];
	int fd;

	snprintf(fz.top, sizeof(fz.top), "%s/lkvm-fuzz-p9-XXXXXX", base);
	FUZZ_ASSERT(mkdtemp(fz.top));
	atexit(cleanup);
	snprintf(share, sizeof(share), "%s/share", fz.top);
	snprintf(outside, sizeof(outside), "%s/outside", fz.top);
	snprintf(fz.secret, sizeof(fz.secret), "%s/secret", outside);
	FUZZ_ASSERT(mkdir(share, 0755) == 0 && mkdir(outside, 0755) == 0);
	fd = open(outside, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	put_file(fd, "secret", "never to be read through the share\n");
	close(fd);
	fz.share_fd = open(share, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	FUZZ_ASSERT(fz.share_fd >= 0);
	fz.forbidden[0] = ino_of(fz.top);
	fz.forbidden[1] = ino_of(outside);
	fz.forbidden[2] = ino_of(fz.secret);
	fz.forbidden[3] = ino_of(base);
	fz.ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	FUZZ_ASSERT(fz.ino >= 0);
	FUZZ_ASSERT(inotify_add_watch(fz.ino, outside, IN_ALL_EVENTS) >= 0);
	FUZZ_ASSERT(inotify_add_watch(fz.ino, fz.secret, IN_ALL_EVENTS) >= 0);
	FUZZ_ASSERT(inotify_add_watch(fz.ino, fz.top, IN_CREATE | IN_DELETE | IN_MOVE) >= 0);
	fz.ready = true;
}

static u64 le(const u8 *p, int bytes)
{
	u64 v = 0;

	for (int i = 0; i < bytes; i++)
		v |= (u64)p[i] << (8 * i);
	return v;
}

static void check_qid(const u8 *rep, size_t len, size_t at)
{
	u64 path;

	FUZZ_ASSERT(at + 13 <= len);
	path = le(rep + at + 5, 8);
	for (size_t i = 0; i < ARRAY_SIZE(fz.forbidden); i++)
		FUZZ_ASSERT(path != fz.forbidden[i]);
}

/* Replies that carry one qid, and where. */
static const struct {
	u8 type;
	u8 at;
} qid_at[] = {
	{ P9_TATTACH + 1, 7 },	{ P9_TLOPEN + 1, 7 }, { P9_TLCREATE + 1, 7 },  { P9_TMKDIR + 1, 7 },
	{ P9_TSYMLINK + 1, 7 }, { P9_TMKNOD + 1, 7 }, { P9_TGETATTR + 1, 15 },
};

static void check_reply(const u8 *rep, size_t len)
{
	u8 type = rep[4];

	for (size_t i = 0; i < ARRAY_SIZE(qid_at); i++)
		if (type == qid_at[i].type)
			check_qid(rep, len, qid_at[i].at);
	if (type == P9_TWALK + 1) {
		u16 n = (u16)le(rep + 7, 2);

		FUZZ_ASSERT(n <= P9_MAXWELEM && len == 9 + 13 * (size_t)n);
		for (u16 i = 0; i < n; i++)
			check_qid(rep, len, 9 + 13 * (size_t)i);
	}
	if (type == P9_TREADDIR + 1) {
		size_t end = 11 + le(rep + 7, 4), at = 11;

		FUZZ_ASSERT(end == len);
		while (at < end) {
			check_qid(rep, len, at);
			FUZZ_ASSERT(at + 24 <= end);
			at += 24 + le(rep + at + 22, 2);
			FUZZ_ASSERT(at <= end);
		}
	}
	if (type == P9_RLERROR)
		FUZZ_ASSERT(len == 11 && le(rep + 7, 4) > 0 && le(rep + 7, 4) < 4096);
}

/* buf as iovecs: its first 256 bytes in pieces of `chunk` bytes (0: none), then the rest. */
static int cut(struct iovec *iov, u8 *buf, size_t len, size_t chunk)
{
	size_t off = 0;
	int n = 0;

	while (chunk && off < MIN(len, (size_t)256)) {
		iov[n++] = (struct iovec){ buf + off, MIN(chunk, len - off) };
		off += iov[n - 1].iov_len;
	}
	if (off < len || !n)
		iov[n++] = (struct iovec){ buf + off, len - off };
	return n;
}

/* One request, in buffers of exactly its size (so the sanitizers see any overread). */
static void one(struct p9_server *s, const u8 *msg, size_t len, u8 flags)
{
	static const size_t chunks[] = { 0, 1, 5, 64 };
	static struct iovec in[257], out[257];
	size_t room = flags & 0x80 ? 10 : flags & 0x40 ? 64 : FZ_ROOM;
	u8 *req = malloc(len ? len : 1), *rep = malloc(room);
	int nin, nout;
	ssize_t n;

	FUZZ_ASSERT(req && rep);
	memcpy(req, msg, len);
	nin = cut(in, req, len, chunks[(flags >> 2) & 3]);
	nout = cut(out, rep, room, chunks[(flags >> 4) & 3]);
	n = p9_server_handle(s, in, nin, out, nout);
	if (n < 0) {
		FUZZ_ASSERT(n == -EBADMSG || n == -ENOBUFS);
	} else {
		FUZZ_ASSERT(n >= P9_HDR_SIZE && (size_t)n <= room);
		FUZZ_ASSERT(le(rep, 4) == (u64)n && len >= P9_HDR_SIZE);
		FUZZ_ASSERT(le(rep + 5, 2) == le(req + 5, 2));
		FUZZ_ASSERT(rep[4] == (u8)(req[4] + 1) || rep[4] == P9_RLERROR);
		check_reply(rep, (size_t)n);
	}
	free(req);
	free(rep);
}

static void handshake(struct p9_server *s, u8 flags)
{
	static const u8 version[] = { 21, 0, 0,	  0,   P9_TVERSION, 0xff, 0xff, 0x00, 0x40, 0,	0,
				      8,  0, '9', 'P', '2',	    '0',  '0',	'0',  '.',  'L' };
	static const u8 attach[] = { 23,   0,	 0,    0, P9_TATTACH, 1, 0, 0, 0, 0, 0, 0xff,
				     0xff, 0xff, 0xff, 0, 0,	      0, 0, 0, 0, 0, 0 };

	_Static_assert(FZ_HANDSHAKE_MSIZE == 0x4000, "the Tversion above asks for this msize");
	one(s, version, sizeof(version), flags & ~0xc0);
	one(s, attach, sizeof(attach), flags & ~0xc0);
}

int fuzz_p9(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	u8 flags = (u8)fuzz_take(&in, 1);
	struct p9_server_opts o = { .readonly = flags & 1,
				    .max_msize = FZ_MAX_MSIZE,
				    .max_fids = FZ_MAX_FIDS };
	struct p9_server *s;
	char err[256], share[96], ev[4096];

	if (!fz.ready)
		fz_init();
	fz.nfds = count_fds();
	populate();
	snprintf(share, sizeof(share), "%s/share", fz.top);
	FUZZ_ASSERT(p9_server_open(&s, share, &o, err, sizeof(err)) == 0);
	if (!(flags & 2))
		handshake(s, flags);
	while (in.left >= 2) {
		size_t len = (size_t)fuzz_take(&in, 2);

		len = MIN(len, in.left);
		one(s, in.p, len, flags);
		in.p += len;
		in.left -= len;
	}
	p9_server_close(s);
	FUZZ_ASSERT(fchmod(fz.share_fd, 0755) == 0);
	wipe(fz.share_fd);
	/* Nothing outside was touched (a read shows IN_ACCESS, an open IN_OPEN...). */
	FUZZ_ASSERT(read(fz.ino, ev, sizeof(ev)) < 0 && errno == EAGAIN);
	FUZZ_ASSERT(count_fds() == fz.nfds); /* none leaked */
	return 0;
}

/* Fuzz target: the FUSE server (virtio/fuse-server.c and its files, on virtio/hostfs.c) on a temporary tree, one session per input; nothing outside the share may be touched. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <linux/fuse.h>

#include "fuzz.h"
#include "lkvm/fuse-server.h"
#include "lkvm/snap.h"

/*
 * Input: u8 flags, then requests, each a u16 length and that many bytes handed to the server
 * as one request, its fuse_in_header included (so its len may lie).
 *   flags bit 0: read-only share
 *   bit 1: no INIT (otherwise the harness starts a 7.36 session)
 *   bits 2-3: the request's first 256 bytes cut into iovecs of (whole, 1, 5, 64) bytes
 *   bits 4-5: the reply's likewise
 *   bits 6-7: reply room 64 KiB + 4 KiB (0), 200 bytes (1), 12 bytes (2: not even a header),
 *   1 MiB + 4 KiB (3: a whole max_write READ; allocated per request, so not the default)
 * A request of length 0 is a snapshot instead: the server saved, and (when the save works) a
 * new server on the share loaded from it and taking over; a load that fails must leave it
 * answering nothing (no session). The requests after it go to whichever server there is.
 * Bytes 8..15 of a request (its unique) are left as they are; a node id or fh of the form
 * 0xff..ff NN (top bytes all set) is replaced by the NN-th one the server gave in this input,
 * so the fuzzer reaches real nodes and handles without guessing generations.
 * The share (rebuilt before each input) holds a file, a directory with a file and a
 * subdirectory, a FIFO and symlinks pointing out (absolute and relative, to a file and a
 * directory) and in; beside it, outside the share, a directory with a secret file. The caps are
 * small (16 handles, 64 nodes, 8 cached descriptors, 12 open files) so they are reached.
 * Oracles, besides the sanitizers: a negative return only for framing errors, 0 only for the
 * opcodes that take no reply; a reply's header consistent and within the buffers, an error one
 * exactly a header; no inode number in any entry, attribute or directory entry names the tree's
 * top, the outside directory or the secret; inotify sees nothing outside the share touched (the
 * secret is never opened: its text in a reply would prove nothing, the guest can write it); no set-id file or device node left in the share; no descriptor
 * leaked once the server is closed.
 */
#define FZ_ROOM (FUSE_SRV_MAX_WRITE + 4096)
#define FZ_SECRET "never to be read through the share\n"
#define FZ_IDS 64

static struct {
	bool ready;
	char top[64], secret[128];
	int share_fd, ino, nfds;
	u64 forbidden[3];
	u64 nodes[FZ_IDS], fhs[FZ_IDS]; /* given in this input, for the NN substitution */
	u32 nnodes, nfhs;
} fz;

/* Remove everything beneath dfd, checking that nothing the server must never make is there. */
static void wipe(int dfd)
{
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *e;
	DIR *d;

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
		fprintf(stderr, "fuzz_fuse: could not remove %s\n", fz.top);
}

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
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	char outside[96], share[96];
	int fd;

	snprintf(fz.top, sizeof(fz.top), "%s/lkvm-fuzz-fuse-XXXXXX", base);
	FUZZ_ASSERT(mkdtemp(fz.top));
	atexit(cleanup);
	snprintf(share, sizeof(share), "%s/share", fz.top);
	snprintf(outside, sizeof(outside), "%s/outside", fz.top);
	snprintf(fz.secret, sizeof(fz.secret), "%s/secret", outside);
	FUZZ_ASSERT(mkdir(share, 0755) == 0 && mkdir(outside, 0755) == 0);
	fd = open(outside, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	put_file(fd, "secret", FZ_SECRET);
	close(fd);
	fz.share_fd = open(share, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	FUZZ_ASSERT(fz.share_fd >= 0);
	fz.forbidden[0] = ino_of(fz.top);
	fz.forbidden[1] = ino_of(outside);
	fz.forbidden[2] = ino_of(fz.secret);
	/* The tree is on tmpfs: a FALLOCATE or truncate of gigabytes is RAM (and a wipe of it
	 * takes seconds). Files stop at 16 MiB (EFBIG, SIGXFSZ ignored), as a full disk would. */
	signal(SIGXFSZ, SIG_IGN);
	FUZZ_ASSERT(setrlimit(RLIMIT_FSIZE, &(struct rlimit){ MiB(16), MiB(16) }) == 0);
	fz.ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	FUZZ_ASSERT(fz.ino >= 0);
	FUZZ_ASSERT(inotify_add_watch(fz.ino, outside, IN_ALL_EVENTS) >= 0);
	FUZZ_ASSERT(inotify_add_watch(fz.ino, fz.secret, IN_ALL_EVENTS) >= 0);
	FUZZ_ASSERT(inotify_add_watch(fz.ino, fz.top, IN_CREATE | IN_DELETE | IN_MOVE) >= 0);
	fz.ready = true;
}

static void check_ino(u64 ino)
{
	for (size_t i = 0; i < ARRAY_SIZE(fz.forbidden); i++)
		FUZZ_ASSERT(ino != fz.forbidden[i]);
}

static void remember(u64 *list, u32 *n, u64 v)
{
	if (*n < FZ_IDS)
		list[(*n)++] = v;
}

static void check_entry(const u8 *p)
{
	struct fuse_entry_out e;

	memcpy(&e, p, sizeof(e));
	check_ino(e.attr.ino);
	if (e.nodeid)
		remember(fz.nodes, &fz.nnodes, e.nodeid);
}

/* A READDIR(PLUS) reply: whole records, every inode allowed. */
static void check_dir(const u8 *p, size_t len, bool plus)
{
	size_t at = 0;

	while (at < len) {
		struct fuse_dirent d;

		if (plus) {
			FUZZ_ASSERT(at + sizeof(struct fuse_entry_out) <= len);
			check_entry(p + at);
			at += sizeof(struct fuse_entry_out);
		}
		FUZZ_ASSERT(at + FUSE_NAME_OFFSET <= len);
		memcpy(&d, p + at, FUSE_NAME_OFFSET);
		FUZZ_ASSERT(d.namelen && d.namelen <= 255);
		check_ino(d.ino);
		at += FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + d.namelen);
		FUZZ_ASSERT(at <= len);
	}
}

/* The body of a successful reply to opcode op (body: len bytes). */
static void check_body(u32 op, const u8 *body, size_t len)
{
	struct fuse_open_out o;

	switch (op) {
	case FUSE_LOOKUP:
	case FUSE_MKDIR:
	case FUSE_MKNOD:
	case FUSE_SYMLINK:
	case FUSE_LINK:
		FUZZ_ASSERT(len == sizeof(struct fuse_entry_out));
		check_entry(body);
		break;
	case FUSE_CREATE:
		FUZZ_ASSERT(len == sizeof(struct fuse_entry_out) + sizeof(o));
		check_entry(body);
		memcpy(&o, body + sizeof(struct fuse_entry_out), sizeof(o));
		remember(fz.fhs, &fz.nfhs, o.fh);
		break;
	case FUSE_OPEN:
	case FUSE_OPENDIR:
		FUZZ_ASSERT(len == sizeof(o));
		memcpy(&o, body, sizeof(o));
		remember(fz.fhs, &fz.nfhs, o.fh);
		break;
	case FUSE_GETATTR:
	case FUSE_SETATTR:
		FUZZ_ASSERT(len == sizeof(struct fuse_attr_out));
		check_ino(((const struct fuse_attr_out *)(const void *)body)->attr.ino);
		break;
	case FUSE_READDIR:
	case FUSE_READDIRPLUS:
		check_dir(body, len, op == FUSE_READDIRPLUS);
		break;
	}
}

/* A node id or fh of the form 0xffffffffffffffNN: the NN-th one given (or left alone). */
static void substitute(u8 *p, const u64 *list, u32 n)
{
	u64 v;

	memcpy(&v, p, 8);
	if ((v >> 8) == 0xffffffffffffffull && n)
		memcpy(p, &list[(v & 0xff) % n], 8);
}

static void fix_ids(u8 *req, size_t len)
{
	struct fuse_in_header ih;

	if (len < sizeof(ih))
		return;
	memcpy(&ih, req, sizeof(ih));
	substitute(req + offsetof(struct fuse_in_header, nodeid), fz.nodes, fz.nnodes);
	/* Every fh-carrying argument starts with the fh, but SETATTR's and GETATTR's. */
	if (len >= sizeof(ih) + 8)
		substitute(req + sizeof(ih), fz.fhs, fz.nfhs);
	if (len >= sizeof(ih) + 16)
		substitute(req + sizeof(ih) + 8, fz.fhs, fz.nfhs);
	if ((ih.opcode == FUSE_COPY_FILE_RANGE) && len >= sizeof(ih) + 32)
		substitute(req + sizeof(ih) + 24, fz.fhs, fz.nfhs);
}

static bool noreply(u32 op)
{
	return op == FUSE_FORGET || op == FUSE_BATCH_FORGET || op == FUSE_INTERRUPT ||
	       op == FUSE_NOTIFY_REPLY;
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

static void check_reply(const u8 *req, size_t len, const u8 *rep, size_t room, ssize_t n)
{
	struct fuse_in_header ih;
	struct fuse_out_header oh;

	if (n < 0) {
		FUZZ_ASSERT(n == -EBADMSG || n == -ENOBUFS);
		return;
	}
	FUZZ_ASSERT(len >= sizeof(ih));
	memcpy(&ih, req, sizeof(ih));
	if (!n) {
		FUZZ_ASSERT(noreply(ih.opcode));
		return;
	}
	FUZZ_ASSERT(!noreply(ih.opcode));
	FUZZ_ASSERT((size_t)n >= sizeof(oh) && (size_t)n <= room);
	memcpy(&oh, rep, sizeof(oh));
	FUZZ_ASSERT(oh.len == (u32)n && oh.unique == ih.unique);
	FUZZ_ASSERT(oh.error <= 0 && oh.error > -4096);
	if (oh.error)
		FUZZ_ASSERT(n == sizeof(oh));
	else
		check_body(ih.opcode, rep + sizeof(oh), (size_t)n - sizeof(oh));
}

/* One request, in buffers of exactly its size (so the sanitizers see any overread). */
static void one(struct fuse_server *s, const u8 *msg, size_t len, u8 flags)
{
	static const size_t chunks[] = { 0, 1, 5, 64 };
	static struct iovec in[257], out[257];
	static const size_t rooms[] = { KiB(68), 200, 12, FZ_ROOM };
	size_t room = rooms[flags >> 6];
	u8 *req = malloc(len ? len : 1), *rep = malloc(room);
	int nin, nout;

	FUZZ_ASSERT(req && rep);
	memcpy(req, msg, len);
	fix_ids(req, len);
	nin = cut(in, req, len, chunks[(flags >> 2) & 3]);
	nout = cut(out, rep, room, chunks[(flags >> 4) & 3]);
	check_reply(req, len, rep, room, fuse_server_handle(s, in, nin, out, nout));
	free(req);
	free(rep);
}

/* Save s and load a new server from it (fuse_server_save/load), which replaces s. */
static struct fuse_server *snapshot(struct fuse_server *s, const struct fuse_server_opts *o,
				    const char *share)
{
	struct snap_rec_buf b = { 0 };
	struct fuse_server *n;
	char err[256];
	int ret = fuse_server_save(s, 0x100, &b, err, sizeof(err));

	FUZZ_ASSERT(!ret || ret == -EOPNOTSUPP || ret == -ENOMEM);
	if (ret || b.err) {
		snap_rec_free(&b);
		return s;
	}
	fuse_server_close(s);
	FUZZ_ASSERT(fuse_server_open(&n, share, o, err, sizeof(err)) == 0);
	ret = fuse_server_load(n, 0x100, b.buf, b.len, err, sizeof(err));
	FUZZ_ASSERT(!ret || ret == -EINVAL);
	if (ret) {
		/* Left empty: no handle, no node but the root. */
		struct fuse_srv_stats st;

		fuse_server_stats(n, &st);
		FUZZ_ASSERT(st.handles == 0 && st.fs.nodes <= 1 && st.fs.open == 0);
	}
	snap_rec_free(&b);
	return n;
}

static void handshake(struct fuse_server *s, u8 flags)
{
	struct {
		struct fuse_in_header ih;
		struct fuse_init_in in;
	} m = { .ih = { .len = sizeof(m), .opcode = FUSE_INIT, .unique = 1 },
		.in = { .major = 7, .minor = 36, .max_readahead = 1 << 17, .flags = ~0u } };

	one(s, (const u8 *)&m, sizeof(m), flags & ~0xc0);
}

int fuzz_fuse(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	u8 flags = (u8)fuzz_take(&in, 1);
	struct fuse_server_opts o = {
		.readonly = flags & 1,
		.cache = (enum fuse_cache)(size % 3),
		.max_handles = 16,
		.fs = { .max_nodes = 64, .max_cached = 8, .max_open = 12, .label = "fuzz" },
	};
	struct fuse_server *s;
	char err[256], share[96], ev[4096];

	if (!fz.ready)
		fz_init();
	fz.nfds = count_fds();
	fz.nnodes = fz.nfhs = 0;
	remember(fz.nodes, &fz.nnodes, 1);
	populate();
	snprintf(share, sizeof(share), "%s/share", fz.top);
	FUZZ_ASSERT(fuse_server_open(&s, share, &o, err, sizeof(err)) == 0);
	if (!(flags & 2))
		handshake(s, flags);
	while (in.left >= 2) {
		size_t len = (size_t)fuzz_take(&in, 2);

		len = MIN(len, in.left);
		if (!len)
			s = snapshot(s, &o, share);
		else
			one(s, in.p, len, flags);
		in.p += len;
		in.left -= len;
	}
	fuse_server_close(s);
	FUZZ_ASSERT(fchmod(fz.share_fd, 0755) == 0);
	wipe(fz.share_fd);
	FUZZ_ASSERT(read(fz.ino, ev, sizeof(ev)) < 0 && errno == EAGAIN);
	FUZZ_ASSERT(count_fds() == fz.nfds);
	return 0;
}

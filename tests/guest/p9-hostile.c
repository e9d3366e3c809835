/* Guest p9-hostile: a malicious virtio-9p driver that tries to reach host files outside its share (.., a held directory moved out, symlinks out, long names, huge counts, fid exhaustion, writes on a read-only share, malformed messages and chains). */
#include "guest.h"

/*
 * Run by tests/integration/test-9p.sh with two shares: lkvm-share0 read-write on T/share and
 * lkvm-share1 read-only on T/ro, where T/outside/canary (beside the shares, never shared)
 * holds a line starting "LKVM-CANARY" and the shares hold symlinks out of them: abs ->
 * T/outside/canary, absdir -> T/outside (absolute), rel -> ../outside/canary, reldir ->
 * ../outside. T/share/file holds "share-file\n", T/ro/file "ro-file\n", T/share/held/file
 * "held-file\n"; T/away (never shared) holds a copy of the canary, and the script moves
 * T/share/held there while the guest holds it (c_moved_out).
 * Every reply the device gives is searched for "LKVM-CANARY" (a read of the canary would
 * show it); the script checks the canary and T/outside unchanged, T/ro unchanged, lkvm's
 * counters, and lkvm alive at the end. Every case asserts what it expects (guest.h) and the
 * guest that all NCASES ran: its status (0 through the exit port) is the result. Prints
 * "GUEST p9: NAME ok (...)" per case and "GUEST p9: ALL OK (N cases)" for the reader, and
 * "GUEST p9: N fids held, then ENFILE" for the script to hold against lkvm's fid limit.
 * Runs at CPL0, polling the queue (no interrupts).
 */

#define QSIZE 256
#define MSIZE 65536u
#define BIG (MSIZE + 4096) /* request and reply buffers */
#define WAIT_NS 5000000000ull
#define S_NEEDS_RESET 0x40
#define VIRTIO_9P_MOUNT_TAG 0
#define CANARY "LKVM-CANARY"
#define NO_REPLY (-100000) /* call(): the device put itself in NEEDS_RESET instead */
#define NCASES 15	   /* the ok()s of the cases guest_main runs */

/* 9P2000.L message types and constants (Linux's include/net/9p/9p.h). */
enum {
	TLERROR = 6,
	RLERROR = 7,
	TSTATFS = 8,
	TLOPEN = 12,
	TLCREATE = 14,
	TSYMLINK = 16,
	TMKNOD = 18,
	TREADLINK = 22,
	TGETATTR = 24,
	TSETATTR = 26,
	TXATTRCREATE = 32,
	TREADDIR = 40,
	TLINK = 70,
	TMKDIR = 72,
	TRENAMEAT = 74,
	TUNLINKAT = 76,
	TVERSION = 100,
	TATTACH = 104,
	TWALK = 110,
	TREAD = 116,
	TWRITE = 118,
	TCLUNK = 120,
};
#define NOFID 0xffffffffu
#define QTSYMLINK 0x02
#define O_RDONLY 0
#define O_WRONLY 1
#define O_RDWR 2
#define O_CREAT 0100
#define O_TRUNC 01000
#define E_NOENT 2
#define E_BADF 9
#define E_ACCES 13
#define E_EXIST 17
#define E_NOTDIR 20
#define E_INVAL 22
#define E_NFILE 23
#define E_ROFS 30
#define E_NAMETOOLONG 36
#define E_LOOP 40
#define ROOT 1u

struct dev {
	struct virtio_pci vp;
	struct virtq vq;
	bool queue_made;
	char tag[32];
};

static struct dev devs[2];
static int ndevs;
static struct dev *rw, *ro;
static u8 *treq, *trsp;	     /* one request and its reply */
static u32 tlen, rlen, rpos; /* request length; reply length and read position */
static u16 tagn;
static int ncases;

static u64 now_ns(void)
{
	return tsc_to_ns(rdtsc());
}

/* ---- building a T-message, reading an R-message ---- */

static void put(u64 v, int bytes)
{
	if (tlen + (u32)bytes > BIG)
		GUEST_FAIL("request too long");
	for (int i = 0; i < bytes; i++)
		treq[tlen++] = (u8)(v >> (8 * i));
}

static void put_strn(const char *s, u32 n)
{
	put(n, 2);
	if (tlen + n > BIG)
		GUEST_FAIL("request too long");
	memcpy(treq + tlen, s, n);
	tlen += n;
}

static void put_str(const char *s)
{
	put_strn(s, (u32)strlen(s));
}

static void begin(u8 type)
{
	tlen = 0;
	put(0, 4);
	put(type, 1);
	put(++tagn == 0xffff ? ++tagn : tagn, 2);
}

/* The size field from what was built. */
static void seal(void)
{
	for (int i = 0; i < 4; i++)
		treq[i] = (u8)(tlen >> (8 * i));
}

static u64 get(int bytes)
{
	u64 v = 0;

	if (rpos + (u32)bytes > rlen)
		GUEST_FAIL("reply too short (%u + %d > %u, type %u)", rpos, bytes, rlen, trsp[4]);
	for (int i = 0; i < bytes; i++)
		v |= (u64)trsp[rpos++] << (8 * i);
	return v;
}

static bool contains(const u8 *p, u32 n, const char *s)
{
	u32 k = (u32)strlen(s);

	for (u32 i = 0; i + k <= n; i++)
		if (!memcmp(p + i, s, k))
			return true;
	return false;
}

/* ---- the device ---- */

static bool needs_reset(struct dev *d)
{
	return virtio_status(&d->vp) & S_NEEDS_RESET;
}

static void up(struct dev *d)
{
	virtio_reset(&d->vp);
	GUEST_ASSERT(virtio_negotiate(&d->vp, 1ull << VIRTIO_9P_MOUNT_TAG |
						      1ull << VIRTIO_F_INDIRECT_DESC));
	if (!d->queue_made)
		GUEST_ASSERT(virtq_setup(&d->vp, &d->vq, 0, QSIZE));
	else
		virtq_resetup(&d->vq);
	d->queue_made = true;
	virtio_driver_ok(&d->vp);
}

static void notify(struct dev *d)
{
	mmio_write16(d->vq.notify_addr, 0);
}

/* The next used chain's token, or NULL when the device put itself in NEEDS_RESET instead.
 * The status is read only now and then: each read is an exit to lkvm. */
static void *next_used(struct dev *d, u32 *len)
{
	u64 end = now_ns() + WAIT_NS;
	void *token;

	for (u32 spins = 1; !(token = virtq_get(&d->vq, len)); spins++) {
		if (spins % 1024 == 0 && needs_reset(d))
			return NULL;
		if (now_ns() > end)
			GUEST_FAIL("no reply and no NEEDS_RESET within 5 s");
	}
	return token;
}

/* Notify, and wait for the chain just made available: 0 with its reply length, or NO_REPLY
 * when the device put itself in NEEDS_RESET (then the chain must stay unused). */
static int wait_used(struct dev *d, u32 *len)
{
	notify(d);
	return next_used(d, len) ? 0 : NO_REPLY;
}

/* Send the request built (sealed here) with room bytes for the reply. 0: the request's
 * R-message (read it with get()), -ecode: an Rlerror, NO_REPLY: NEEDS_RESET. */
static int call_room(struct dev *d, u32 room)
{
	struct vq_buf b[2] = { { (u64)(uintptr_t)treq, tlen }, { (u64)(uintptr_t)trsp, room } };
	u8 type = treq[4];
	int ret;

	seal();
	memset(trsp, 0, 16);
	GUEST_ASSERT(virtq_add(&d->vq, b, 1, 1, treq));
	ret = wait_used(d, &rlen);
	if (ret)
		return ret;
	GUEST_ASSERT(rlen >= 7 && rlen <= room);
	if (contains(trsp, rlen, CANARY))
		GUEST_FAIL("a reply carries the canary: a host file outside the share was read");
	rpos = 0;
	GUEST_ASSERT_EQ(get(4), rlen);
	rpos = 5;
	GUEST_ASSERT_EQ(get(2), (u16)(treq[5] | treq[6] << 8));
	if (trsp[4] == RLERROR) {
		rpos = 7;
		return -(int)get(4);
	}
	GUEST_ASSERT_EQ(trsp[4], type + 1);
	rpos = 7;
	return 0;
}

static int call(struct dev *d)
{
	return call_room(d, BIG);
}

#define EXPECT(expr, want)                                                           \
	do {                                                                         \
		int got_ = (expr);                                                   \
		if (got_ != (want))                                                  \
			GUEST_FAIL("%s: %d, expected %d", #expr, got_, (int)(want)); \
	} while (0)

/* ---- one wrapper per operation ---- */

static int t_version(struct dev *d, u32 msize, u32 *got)
{
	int ret;

	begin(TVERSION);
	put(msize, 4);
	put_str("9P2000.L");
	ret = call(d);
	if (!ret && got)
		*got = (u32)get(4);
	return ret;
}

static int t_attach(struct dev *d, u32 fid)
{
	begin(TATTACH);
	put(fid, 4);
	put(NOFID, 4);
	put_str("root");
	put_str("");
	put(0, 4);
	return call(d);
}

/* Version, and ROOT attached. */
static void session(struct dev *d)
{
	u32 msize = 0;

	EXPECT(t_version(d, MSIZE, &msize), 0);
	GUEST_ASSERT_EQ(msize, MSIZE);
	EXPECT(t_attach(d, ROOT), 0);
}

/* Twalk through n names; the number of qids (into types[], when given) or -errno. */
static int t_walk(struct dev *d, u32 fid, u32 newfid, int n, const char *const *names, u8 *types)
{
	int ret, got;

	begin(TWALK);
	put(fid, 4);
	put(newfid, 4);
	put((u64)n, 2);
	for (int i = 0; i < n; i++)
		put_str(names[i]);
	ret = call(d);
	if (ret)
		return ret;
	got = (int)get(2);
	for (int i = 0; i < got; i++) {
		u8 t = (u8)get(1);

		get(4);
		get(8);
		if (types)
			types[i] = t;
	}
	return got;
}

#define WALK(d, fid, newfid, types, ...)                                                \
	t_walk(d, fid, newfid, (int)ARRAY_SIZE(((const char *const[]){ __VA_ARGS__ })), \
	       (const char *const[]){ __VA_ARGS__ }, types)

static int t_fid(struct dev *d, u8 type, u32 fid)
{
	begin(type);
	put(fid, 4);
	return call(d);
}

static int t_clunk(struct dev *d, u32 fid)
{
	return t_fid(d, TCLUNK, fid);
}

static int t_lopen(struct dev *d, u32 fid, u32 flags)
{
	begin(TLOPEN);
	put(fid, 4);
	put(flags, 4);
	return call(d);
}

static int t_lcreate(struct dev *d, u32 dfid, const char *name, u32 flags)
{
	begin(TLCREATE);
	put(dfid, 4);
	put_str(name);
	put(flags, 4);
	put(0644, 4);
	put(0, 4);
	return call(d);
}

/* Tread of count at off into the reply: the count returned or -errno. */
static int t_read(struct dev *d, u8 type, u32 fid, u64 off, u32 count)
{
	int ret;
	u32 n;

	begin(type);
	put(fid, 4);
	put(off, 8);
	put(count, 4);
	ret = call(d);
	if (ret)
		return ret;
	n = (u32)get(4);
	GUEST_ASSERT(n <= count && rpos + n == rlen);
	return (int)n;
}

static int t_write(struct dev *d, u32 fid, u64 off, u32 count, const char *data, u32 len)
{
	int ret;

	begin(TWRITE);
	put(fid, 4);
	put(off, 8);
	put(count, 4);
	memcpy(treq + tlen, data, len);
	tlen += len;
	ret = call(d);
	return ret ? ret : (int)get(4);
}

static int t_mkdir(struct dev *d, u32 dfid, const char *name)
{
	begin(TMKDIR);
	put(dfid, 4);
	put_str(name);
	put(0755, 4);
	put(0, 4);
	return call(d);
}

static int t_symlink(struct dev *d, u32 dfid, const char *name, const char *target)
{
	begin(TSYMLINK);
	put(dfid, 4);
	put_str(name);
	put_str(target);
	put(0, 4);
	return call(d);
}

static int t_setattr(struct dev *d, u32 fid, u32 valid, u32 mode, u64 size)
{
	begin(TSETATTR);
	put(fid, 4);
	put(valid, 4);
	put(mode, 4);
	put(0, 4);
	put(0, 4);
	put(size, 8);
	for (int i = 0; i < 4; i++)
		put(0, 8);
	return call(d);
}

static int t_two(struct dev *d, u8 type, u32 a, const char *an, u32 b, const char *bn)
{
	begin(type);
	put(a, 4);
	if (an)
		put_str(an);
	put(b, 4);
	if (bn)
		put_str(bn);
	return call(d);
}

static void ok(const char *name, const char *what)
{
	ncases++;
	gprintf("GUEST p9: %s ok (%s)\n", name, what);
}

/* ---- the cases ---- */

static void c_tags(void)
{
	for (int i = 0; i < ndevs; i++) {
		struct dev *d = &devs[i];
		u32 len = virtio_cfg_read8(&d->vp, 0) | (u32)virtio_cfg_read8(&d->vp, 1) << 8;

		GUEST_ASSERT(len > 0 && len < sizeof(d->tag));
		for (u32 k = 0; k < len; k++)
			d->tag[k] = (char)virtio_cfg_read8(&d->vp, 2 + k);
		if (!strcmp(d->tag, "lkvm-share0"))
			rw = d;
		if (!strcmp(d->tag, "lkvm-share1"))
			ro = d;
	}
	if (!rw || !ro)
		GUEST_FAIL(
			"want the tags lkvm-share0 and lkvm-share1 (lkvm --share DIR --share DIR,ro)");
	ok("tags", "lkvm-share0, lkvm-share1");
}

static void c_version(void)
{
	u32 msize = 0;

	up(rw);
	EXPECT(t_version(rw, 0xffffffffu, &msize), 0);
	GUEST_ASSERT(msize >= 4096 && msize <= 512 * 1024);
	session(rw);
	ok("version", "msize 4 GiB asked, bounded");
}

/* ".." at the share's root stays there: nothing beside the share is reachable by name. */
static void c_dotdot(void)
{
	u8 t[16];
	int n;

	n = WALK(rw, ROOT, 2, t, "..", "outside", "canary");
	if (n == 3 && t_lopen(rw, 2, O_RDONLY) == 0)
		t_read(rw, TREAD, 2, 0, 64); /* what an escape would leak: call() fails on it */
	EXPECT(n, 1);			     /* stops at "outside": ".." at the root is the root */
	EXPECT(WALK(rw, ROOT, 2, t, "..", "..", "..", "outside", "canary"), 3);
	EXPECT(t_clunk(rw, 2), -E_BADF); /* a partial walk makes no fid */
	EXPECT(WALK(rw, ROOT, 2, t, "..", "file"), 2);
	EXPECT(t_lopen(rw, 2, O_RDONLY), 0);
	EXPECT(t_read(rw, TREAD, 2, 0, 64), 11);
	GUEST_ASSERT(!memcmp(trsp + rpos, "share-file\n", 11));
	EXPECT(t_clunk(rw, 2), 0);
	EXPECT(WALK(rw, ROOT, 2, t, "..", "share", "file"), 1); /* stops at "share" */
	EXPECT(t_clunk(rw, 2), -E_BADF);
	ok("dotdot", ".. at the root stays at the root");
}

/*
 * A directory the host moves out of the share while the guest holds a fid on it: test-9p.sh
 * moves T/share/held to T/away (beside a copy of the canary) when the guest says it holds it,
 * then makes T/share/moved, which the guest waits for. ".." from the held directory is
 * refused from then on, so nothing beside it is reachable; what it holds still is its own.
 */
static void c_moved_out(void)
{
	u64 end = now_ns() + 60000000000ull;
	u8 t[4];
	int n;

	EXPECT(WALK(rw, ROOT, 30, t, "held"), 1);
	EXPECT(WALK(rw, 30, 31, t, "..", "held"), 2); /* in the share: its ".." is the root */
	EXPECT(t_clunk(rw, 31), 0);
	gprintf("GUEST p9: holding held\n");
	while (WALK(rw, ROOT, 31, t, "moved") != 1) {
		if (now_ns() > end)
			GUEST_FAIL("no share/moved within 60 s: the host did not move held");
		udelay(20000);
	}
	EXPECT(t_clunk(rw, 31), 0);
	EXPECT(WALK(rw, ROOT, 31, t, "held"), -E_NOENT);
	n = WALK(rw, 30, 31, t, "..", "canary");
	if (n == 2 && t_lopen(rw, 31, O_RDONLY) == 0)
		t_read(rw, TREAD, 31, 0, 64); /* what an escape would leak: call() fails on it */
	EXPECT(n, -E_ACCES);
	EXPECT(WALK(rw, 30, 31, t, "..", "..", "outside", "canary"), -E_ACCES);
	EXPECT(WALK(rw, 30, 31, t, "file", ".."), 1); /* ".." from a file: no directory */
	EXPECT(t_clunk(rw, 31), -E_BADF);
	EXPECT(WALK(rw, 30, 31, t, "file"), 1);
	EXPECT(t_lopen(rw, 31, O_RDONLY), 0);
	EXPECT(t_read(rw, TREAD, 31, 0, 64), 10);
	GUEST_ASSERT(!memcmp(trsp + rpos, "held-file\n", 10));
	EXPECT(t_clunk(rw, 31), 0);
	EXPECT(t_clunk(rw, 30), 0);
	ok("moved-out", "a held directory moved out of the share: its .. refused");
}

/* Symlinks out of the share are never followed: not by walks, opens, creates or setattr. */
static void c_symlinks(void)
{
	static const char *const links[] = { "abs", "absdir", "rel", "reldir" };
	u8 t[4];

	for (unsigned i = 0; i < ARRAY_SIZE(links); i++) {
		u32 fid = 10 + i;

		EXPECT(WALK(rw, ROOT, fid, t, links[i]), 1);
		GUEST_ASSERT_EQ(t[0], QTSYMLINK);
		GUEST_ASSERT(t_lopen(rw, fid, O_RDONLY) < 0);
		GUEST_ASSERT(t_lopen(rw, fid, O_WRONLY | O_TRUNC) < 0);
		GUEST_ASSERT(t_setattr(rw, fid, 0x8 /* size */, 0, 0) < 0);
		GUEST_ASSERT(t_lcreate(rw, fid, "evil", O_RDWR | O_CREAT) < 0);
		GUEST_ASSERT(t_mkdir(rw, fid, "evil") < 0);
		GUEST_ASSERT(t_read(rw, TREADDIR, fid, 0, 4096) < 0);
		GUEST_ASSERT(WALK(rw, fid, 20, t, "canary") < 0);
		/* The link's own target is the guest's to read (it names, it does not open). */
		begin(TREADLINK);
		put(fid, 4);
		EXPECT(call(rw), 0);
	}
	/* Through a link as if it were a directory: the walk stops at the link. */
	EXPECT(WALK(rw, ROOT, 20, t, "absdir", "canary"), 1);
	EXPECT(WALK(rw, ROOT, 20, t, "reldir", "canary"), 1);
	EXPECT(t_clunk(rw, 20), -E_BADF);
	/* A link the guest makes itself, to the canary, is as inert. */
	EXPECT(t_symlink(rw, ROOT, "made", "../outside/canary"), 0);
	EXPECT(WALK(rw, ROOT, 20, t, "made"), 1);
	GUEST_ASSERT(t_lopen(rw, 20, O_RDWR | O_TRUNC) < 0);
	EXPECT(t_two(rw, TUNLINKAT, ROOT, "made", 0, NULL), 0);
	ok("symlinks", "absolute and relative links out: not followed");
}

/* Names that are not one path component, or too long for one. */
static void c_names(void)
{
	static char longname[300];
	static const char *const bad[] = { "a/b", "../outside", "/etc", "", ".", ".." };

	memset(longname, 'n', sizeof(longname) - 1);
	EXPECT(WALK(rw, ROOT, 2, NULL, longname), -E_NAMETOOLONG);
	EXPECT(t_lcreate(rw, ROOT, longname, O_RDWR), -E_NAMETOOLONG);
	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		GUEST_ASSERT(t_lcreate(rw, ROOT, bad[i], O_RDWR | O_CREAT) < 0);
		GUEST_ASSERT(t_mkdir(rw, ROOT, bad[i]) < 0);
		GUEST_ASSERT(t_symlink(rw, ROOT, bad[i], "file") < 0);
		GUEST_ASSERT(t_two(rw, TRENAMEAT, ROOT, "file", ROOT, bad[i]) < 0);
		GUEST_ASSERT(t_two(rw, TUNLINKAT, ROOT, bad[i], 0, NULL) < 0);
	}
	EXPECT(WALK(rw, ROOT, 2, NULL, "a/b"), -E_INVAL);
	/* A string whose length field runs past the message. */
	begin(TWALK);
	put(ROOT, 4);
	put(2, 4);
	put(1, 2);
	put(0xffff, 2);
	put('x', 1);
	GUEST_ASSERT(call(rw) < 0);
	/* A name with a NUL inside. */
	begin(TLCREATE);
	put(ROOT, 4);
	put_strn("ok\0../x", 7);
	put(O_RDWR | O_CREAT, 4);
	put(0644, 4);
	put(0, 4);
	GUEST_ASSERT(call(rw) < 0);
	/* Twalk with more names than 9P allows. */
	begin(TWALK);
	put(ROOT, 4);
	put(2, 4);
	put(0xffff, 2);
	GUEST_ASSERT(call(rw) < 0);
	ok("names", "long, empty, dotted, slashed, NUL, past the message: refused");
}

/* Counts and offsets near their limits: replies bounded by msize, no write past the data. */
static void c_counts(void)
{
	int n;

	EXPECT(WALK(rw, ROOT, 2, NULL, "file"), 1);
	EXPECT(t_lopen(rw, 2, O_RDWR), 0);
	n = t_read(rw, TREAD, 2, 0, 0xffffffffu);
	GUEST_ASSERT_EQ(n, 11);
	n = t_read(rw, TREAD, 2, 0xfffffffffffffff0ull, 0xffffffffu);
	GUEST_ASSERT(n == 0 || n < 0);
	/* A Twrite whose count claims more than the message carries. */
	GUEST_ASSERT(t_write(rw, 2, 0, 0xffffffffu, "XXXX", 4) < 0);
	GUEST_ASSERT(t_write(rw, 2, 0, 1000, "XXXX", 4) < 0);
	GUEST_ASSERT(t_write(rw, 2, 0xfffffffffffffff0ull, 4, "XXXX", 4) < 0);
	EXPECT(t_read(rw, TREAD, 2, 0, 64), 11);
	GUEST_ASSERT(!memcmp(trsp + rpos, "share-file\n", 11)); /* unchanged */
	EXPECT(WALK(rw, ROOT, 3, NULL), 0);
	EXPECT(t_lopen(rw, 3, O_RDONLY), 0);
	n = t_read(rw, TREADDIR, 3, 0, 0xffffffffu);
	GUEST_ASSERT(n > 0 && (u32)n <= MSIZE);
	n = t_read(rw, TREADDIR, 3, 0xfffffffffffffff0ull, 0xffffffffu);
	GUEST_ASSERT(n >= 0 || n < 0); /* any answer, no crash */
	/* A reply buffer smaller than what was asked: the reply fits it. */
	begin(TREAD);
	put(2, 4);
	put(0, 8);
	put(0xffffffffu, 4);
	EXPECT(call_room(rw, 16), 0);
	GUEST_ASSERT(rlen <= 16);
	EXPECT(t_clunk(rw, 2), 0);
	EXPECT(t_clunk(rw, 3), 0);
	ok("counts", "4 GiB counts and offsets near 2^64: bounded");
}

/* Cloning fids until the device refuses: ENFILE at its bound, then it recovers. The walks go
 * in batches filling the ring (each its own request and reply buffers). */
#define BATCH (QSIZE / 2)
static void c_fids(void)
{
	static u8 *reqs, *rsps;
	u32 made = 0, refused = 0, fid = 1000;
	u64 t0 = now_ns();

	if (!reqs) {
		reqs = galloc(BATCH * 32, 64);
		rsps = galloc(BATCH * 64, 64);
	}
	while (!refused) {
		for (int i = 0; i < BATCH; i++) {
			u8 *q = reqs + i * 32;
			struct vq_buf b[2] = { { (u64)(uintptr_t)q, 17 },
					       { (u64)(uintptr_t)(rsps + i * 64), 64 } };
			u32 nf = fid + (u32)i;

			/* size[4] Twalk tag[2] fid[4] newfid[4] nwname[2]=0 */
			memcpy(q, "\x11\0\0\0\x6e\0\0", 7);
			q[5] = (u8)i;
			memcpy(q + 7, &(u32){ ROOT }, 4);
			memcpy(q + 11, &nf, 4);
			q[15] = q[16] = 0;
			GUEST_ASSERT(virtq_add(&rw->vq, b, 1, 1, q));
		}
		notify(rw);
		for (int i = 0; i < BATCH; i++) {
			u8 *r = next_used(rw, NULL);

			if (!r)
				GUEST_FAIL("fids: NEEDS_RESET");
			r = rsps + (r - reqs) / 32 * 64;
			if (r[4] == RLERROR) {
				GUEST_ASSERT_EQ(r[7], E_NFILE);
				refused++;
			} else {
				GUEST_ASSERT_EQ(r[4], TWALK + 1);
				made++;
			}
		}
		fid += BATCH;
		if (made > 2000000)
			GUEST_FAIL("fids: %u fids and no bound", made);
	}
	GUEST_ASSERT(made >= 1000);
	/* One clunked: one more walk goes through; a new session frees them all. */
	EXPECT(t_clunk(rw, 1000), 0);
	EXPECT(WALK(rw, ROOT, 1000, NULL), 0);
	EXPECT(WALK(rw, ROOT, 7, NULL), -E_NFILE);
	session(rw);
	EXPECT(WALK(rw, ROOT, 7, NULL), 0);
	EXPECT(t_clunk(rw, 7), 0);
	gprintf("GUEST p9: %u fids held, then ENFILE (%llu ms)\n", made + 1,
		(now_ns() - t0) / 1000000);
	ok("fids", "bounded, then recovered");
}

/* A read-only share refuses every change, whatever the open flags. */
static void c_readonly(void)
{
	u8 t[2];

	up(ro);
	session(ro);
	EXPECT(WALK(ro, ROOT, 2, t, "file"), 1);
	EXPECT(WALK(ro, ROOT, 3, t), 0);
	EXPECT(t_lopen(ro, 2, O_RDWR), -E_ROFS);
	EXPECT(t_lopen(ro, 2, O_WRONLY), -E_ROFS);
	EXPECT(t_lopen(ro, 2, O_RDONLY | O_TRUNC), -E_ROFS);
	EXPECT(t_lcreate(ro, 3, "new", O_RDWR | O_CREAT), -E_ROFS);
	EXPECT(t_mkdir(ro, 3, "new"), -E_ROFS);
	EXPECT(t_symlink(ro, 3, "new", "file"), -E_ROFS);
	EXPECT(t_setattr(ro, 2, 0x8, 0, 0), -E_ROFS);
	EXPECT(t_setattr(ro, 2, 0x1, 0777, 0), -E_ROFS);
	EXPECT(t_two(ro, TLINK, 3, NULL, 2, "hard"), -E_ROFS);
	EXPECT(t_two(ro, TRENAMEAT, 3, "file", 3, "moved"), -E_ROFS);
	EXPECT(t_two(ro, TUNLINKAT, 3, "file", 0, NULL), -E_ROFS);
	begin(TMKNOD);
	put(3, 4);
	put_str("fifo");
	put(0010644, 4);
	put(0, 4);
	put(0, 4);
	put(0, 4);
	EXPECT(call(ro), -E_ROFS);
	begin(TXATTRCREATE);
	put(2, 4);
	put_str("user.x");
	put(1, 8);
	put(0, 4);
	GUEST_ASSERT(call(ro) < 0);
	EXPECT(t_lopen(ro, 2, O_RDONLY), 0);
	EXPECT(t_read(ro, TREAD, 2, 0, 64), 8);
	GUEST_ASSERT(!memcmp(trsp + rpos, "ro-file\n", 8));
	GUEST_ASSERT(t_write(ro, 2, 0, 4, "XXXX", 4) < 0);
	ok("readonly", "every change EROFS");
}

/* A malformed message is answered with Rlerror; the device keeps working. */
static void c_bad_messages(void)
{
	static const u8 types[] = { 0, 5, TLERROR, RLERROR, 99, 101, 255 };

	for (unsigned i = 0; i < ARRAY_SIZE(types); i++) {
		begin(types[i]);
		put(ROOT, 4);
		GUEST_ASSERT(call(rw) < 0);
	}
	begin(TGETATTR); /* fields cut short */
	put(ROOT, 2);
	GUEST_ASSERT(call(rw) < 0);
	begin(TSTATFS); /* bytes after the message's size are not part of it */
	put(ROOT, 4);
	seal();
	put(0xdeadbeef, 4);
	{
		struct vq_buf b[2] = { { (u64)(uintptr_t)treq, tlen },
				       { (u64)(uintptr_t)trsp, BIG } };

		GUEST_ASSERT(virtq_add(&rw->vq, b, 1, 1, treq));
		EXPECT(wait_used(rw, &rlen), 0);
		GUEST_ASSERT_EQ(trsp[4], TSTATFS + 1);
	}
	GUEST_ASSERT(!needs_reset(rw));
	EXPECT(WALK(rw, ROOT, 2, NULL, "file"), 1);
	EXPECT(t_clunk(rw, 2), 0);
	ok("bad-messages", "Rlerror, device still working");
}

/* A chain the transport cannot use: NEEDS_RESET, nothing answered, and a reset recovers. */
static void expect_broken(const char *name)
{
	u32 len;

	EXPECT(wait_used(rw, &len), NO_REPLY);
	up(rw);
	session(rw);
	EXPECT(WALK(rw, ROOT, 2, NULL, "file"), 1);
	EXPECT(t_lopen(rw, 2, O_RDONLY), 0);
	EXPECT(t_read(rw, TREAD, 2, 0, 64), 11);
	EXPECT(t_clunk(rw, 2), 0);
	ok(name, "NEEDS_RESET, recovered");
}

static void c_bad_chains(void)
{
	struct vq_buf b[2] = { { (u64)(uintptr_t)treq, 0 }, { (u64)(uintptr_t)trsp, BIG } };

	/* No writable part: no room for any reply. */
	begin(TCLUNK);
	put(ROOT, 4);
	seal();
	b[0].len = tlen;
	GUEST_ASSERT(virtq_add(&rw->vq, b, 1, 0, treq));
	expect_broken("chain-no-reply-room");
	/* A size field larger than the readable part. */
	begin(TCLUNK);
	put(ROOT, 4);
	seal();
	treq[1] = 1;
	b[0].len = tlen;
	GUEST_ASSERT(virtq_add(&rw->vq, b, 1, 1, treq));
	expect_broken("chain-size-lies");
	/* A buffer beyond guest RAM. */
	b[0] = (struct vq_buf){ guest_ram_top() + (1ull << 30), 64 };
	GUEST_ASSERT(virtq_add(&rw->vq, b, 1, 1, treq));
	expect_broken("chain-outside-ram");
	/* A readable buffer after a writable one (on a fresh ring: written by hand). */
	up(rw);
	rw->vq.desc[0] = (struct virtq_desc){ (u64)(uintptr_t)trsp, 64,
					      VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 1 };
	rw->vq.desc[1] = (struct virtq_desc){ (u64)(uintptr_t)treq, 11, 0, 0 };
	rw->vq.avail->ring[0] = 0;
	barrier();
	WRITE_ONCE(rw->vq.avail->idx, 1);
	expect_broken("chain-write-then-read");
	/* A descriptor loop. */
	up(rw);
	rw->vq.desc[0] = (struct virtq_desc){ (u64)(uintptr_t)treq, 11, VIRTQ_DESC_F_NEXT, 1 };
	rw->vq.desc[1] = (struct virtq_desc){ (u64)(uintptr_t)trsp, 64,
					      VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 0 };
	rw->vq.avail->ring[0] = 0;
	barrier();
	WRITE_ONCE(rw->vq.avail->idx, 1);
	expect_broken("chain-loop");
}

/* Every virtio-9p function on the bus (modern id 0x1040 + 9). */
static bool found(const struct pci_dev *d, void *arg)
{
	if (d->vendor == 0x1af4 && d->device == 0x1049 && ndevs < (int)ARRAY_SIZE(devs) &&
	    virtio_pci_init(&devs[ndevs].vp, d))
		ndevs++;
	return false;
}

void guest_main(void)
{
	clock_init();
	pci_scan(found, NULL);
	if (ndevs != 2)
		GUEST_FAIL("want 2 virtio-9p devices (1af4:1049), found %d", ndevs);
	treq = galloc(BIG, 4096);
	trsp = galloc(BIG, 4096);
	c_tags();
	c_version();
	c_dotdot();
	c_moved_out();
	c_symlinks();
	c_names();
	c_counts();
	c_bad_messages();
	c_bad_chains();
	c_readonly();
	c_fids();
	GUEST_ASSERT_EQ(ncases, NCASES);
	gprintf("GUEST p9: ALL OK (%d cases)\n", ncases);
}

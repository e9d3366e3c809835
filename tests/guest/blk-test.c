/* blk-test: a freestanding virtio-blk driver (virtio-pci or virtio-mmio, polled) that checks known sectors, writes some, and measures IOPS and the cost of a notify. */
#include "guest.h"

/*
 * Command line (lkvm -p):
 *   trans=pci|mmio     where the disk is (mmio: the first virtio-mmio window, 0xc0000000)
 *   blk=verify blk.capacity=N
 *                      the disk has N sectors (the host's image size); read sectors 0..63 and
 *                      check the host's pattern (byte i of sector s is (s * 13 + i * 7 + 1) &
 *                      0xff), then write sectors 64..71 with (s * 29 + i * 3 + 5) & 0xff,
 *                      flush, read them back, and a read past the end fails. The device must not offer
 *                      VIRTIO_BLK_F_RO. The guest asserts each (guest.h) and ends with status 0;
 *                      "BLK-VERIFY-OK" is printed for the reader.
 *   blk=ro blk.capacity=N
 *                      a read-only disk (lkvm -d IMAGE,ro) of N sectors: the device offers
 *                      VIRTIO_BLK_F_RO, sectors 0..63 read back as above, a write of sectors
 *                      64..71 completes with VIRTIO_BLK_S_IOERR and sector 64 still holds the
 *                      host's pattern (all asserted); "BLK-RO-OK" at the end
 *   blk=bench qd=N pattern=seq|rand secs=S
 *                      4 KiB reads at queue depth N for S seconds from CPL3; prints
 *                      "BENCH blk ... iops=..."
 *   blk=notify secs=S  back-to-back notifies of the request queue with nothing posted:
 *                      "BENCH notify ... ns_per_notify=..."
 *   blk=bounce         a driver that makes the host copy: QSIZE reads of BOUNCE_LEN bytes in
 *                      flight at once, each into the same buffer 8 bytes past a page (no
 *                      O_DIRECT alignment) through its own indirect table: 512 MiB of bounce
 *                      buffers if the host held them all. Every one must complete, with the
 *                      host's pattern in the buffer: "BLK-BOUNCE-OK requests=N bytes=B"
 *   blk=pause qd=N kib=K
 *                      reads of K KiB kept N in flight (each through an indirect table, its
 *                      data in pieces of at most 256 KiB that all alias one buffer, so a long
 *                      request costs the guest little memory), interrupts asked for, while
 *                      typed input is taken from hvc0 (lkvm --console virtio):
 *                      "BLK-PAUSE-READY" once both run; every input line reported as
 *                      "GUEST blk-test: line N 'TEXT' reads=R" (reads completed so far); the
 *                      line "done" ends it once the reads in flight are back:
 *                      "BLK-PAUSE-OK reads=R errors=E"
 */

#define SECTOR 512
#define QSIZE 128
#define BLK_T_IN 0
#define BLK_T_OUT 1
#define BLK_T_FLUSH 4
#define BLK_S_OK 0
#define BLK_S_IOERR 1
#define BLK_F_RO 5
#define MMIO_BASE 0xc0000000ull
#define IO_SIZE 4096
#define MAX_QD 64
#define BOUNCE_LEN (4u << 20)

struct blk_hdr {
	u32 type;
	u32 reserved;
	u64 sector;
};

struct req {
	struct blk_hdr hdr;
	u8 status;
	u8 *buf;
};

static struct {
	bool mmio;
	struct virtio_pci vp;
	struct virtq vq;
	u64 capacity;	  /* sectors */
	u64 offered;	  /* feature bits the device offered */
	struct req *reqs; /* MAX_QD */
	u64 secs, qd, kib;
	bool rand;
} B;

/* ---- virtio-mmio (version 2), enough for one queue ---- */

#define M_MAGIC 0x000
#define M_VERSION 0x004
#define M_DEVICE_ID 0x008
#define M_DEV_FEATURES 0x010
#define M_DEV_FEATURES_SEL 0x014
#define M_DRV_FEATURES 0x020
#define M_DRV_FEATURES_SEL 0x024
#define M_QUEUE_SEL 0x030
#define M_QUEUE_NUM_MAX 0x034
#define M_QUEUE_NUM 0x038
#define M_QUEUE_READY 0x044
#define M_QUEUE_NOTIFY 0x050
#define M_STATUS 0x070
#define M_QUEUE_DESC 0x080
#define M_QUEUE_DRIVER 0x090
#define M_QUEUE_DEVICE 0x0a0
#define M_CONFIG 0x100

static u32 mr(u32 off)
{
	return mmio_read32(MMIO_BASE + off);
}

static void mw(u32 off, u32 v)
{
	mmio_write32(MMIO_BASE + off, v);
}

static void mmio_setup(void)
{
	struct virtq *vq = &B.vq;
	u64 offered;

	if (mr(M_MAGIC) != 0x74726976 || mr(M_VERSION) != 2 || mr(M_DEVICE_ID) != 2)
		GUEST_FAIL("no virtio-mmio v2 block device at 0x%llx (lkvm -d IMAGE,trans=mmio)",
			   MMIO_BASE);
	mw(M_STATUS, 0);
	mw(M_STATUS, 1 | 2);
	mw(M_DEV_FEATURES_SEL, 1);
	offered = (u64)mr(M_DEV_FEATURES) << 32;
	mw(M_DEV_FEATURES_SEL, 0);
	B.offered = offered | mr(M_DEV_FEATURES);
	GUEST_ASSERT(offered & (1ull << VIRTIO_F_VERSION_1));
	mw(M_DRV_FEATURES_SEL, 0);
	mw(M_DRV_FEATURES, 0);
	mw(M_DRV_FEATURES_SEL, 1);
	mw(M_DRV_FEATURES, 1); /* VERSION_1 only */
	mw(M_STATUS, 1 | 2 | 8);
	GUEST_ASSERT(mr(M_STATUS) & 8);
	mw(M_QUEUE_SEL, 0);
	GUEST_ASSERT(mr(M_QUEUE_NUM_MAX) >= QSIZE);
	memset(vq, 0, sizeof(*vq));
	vq->size = QSIZE;
	vq->desc = galloc(sizeof(struct virtq_desc) * QSIZE, 4096);
	vq->avail = galloc(6 + 2u * QSIZE, 4096);
	vq->used = galloc(6 + sizeof(struct virtq_used_elem) * QSIZE, 4096);
	vq->token = galloc(sizeof(void *) * QSIZE, 8);
	vq->used_event = &vq->avail->ring[QSIZE];
	vq->avail_event = (volatile u16 *)&vq->used->ring[QSIZE];
	for (u16 i = 0; i < QSIZE; i++)
		vq->desc[i].next = (u16)(i + 1);
	vq->num_free = QSIZE;
	vq->avail->flags = VIRTQ_AVAIL_F_NO_INTERRUPT;
	vq->notify_addr = MMIO_BASE + M_QUEUE_NOTIFY;
	vq->notify32 = true;
	mw(M_QUEUE_NUM, QSIZE);
	mw(M_QUEUE_DESC, (u32)(uintptr_t)vq->desc);
	mw(M_QUEUE_DESC + 4, 0);
	mw(M_QUEUE_DRIVER, (u32)(uintptr_t)vq->avail);
	mw(M_QUEUE_DRIVER + 4, 0);
	mw(M_QUEUE_DEVICE, (u32)(uintptr_t)vq->used);
	mw(M_QUEUE_DEVICE + 4, 0);
	mw(M_QUEUE_READY, 1);
	B.capacity = mr(M_CONFIG) | (u64)mr(M_CONFIG + 4) << 32;
	mw(M_STATUS, 1 | 2 | 8 | 4);
	if (mr(M_STATUS) != (1 | 2 | 8 | 4))
		GUEST_FAIL("virtio-mmio: status 0x%x after DRIVER_OK", mr(M_STATUS));
}

static void pci_setup(void)
{
	const char *why = virtio_pci_find(&B.vp, 0x1042, "virtio-blk");

	if (why)
		GUEST_FAIL("%s (lkvm -d IMAGE)", why);
	virtio_reset(&B.vp);
	if (!virtio_negotiate(&B.vp, 1ull << VIRTIO_F_INDIRECT_DESC))
		GUEST_FAIL("virtio-blk: feature negotiation failed");
	B.offered = B.vp.offered;
	if (!virtq_setup(&B.vp, &B.vq, 0, QSIZE))
		GUEST_FAIL("virtio-blk: no request queue");
	B.capacity = 0;
	for (int i = 0; i < 8; i++)
		B.capacity |= (u64)virtio_cfg_read8(&B.vp, (u32)i) << (8 * i);
	virtio_driver_ok(&B.vp);
}

/* ---- requests ---- */

static void submit(struct req *r, u32 type, u64 sector, u32 len)
{
	struct vq_buf b[3];
	int n = 0, nout = 1;

	r->hdr = (struct blk_hdr){ .type = type, .sector = sector };
	r->status = 0xff;
	b[n++] = (struct vq_buf){ (u64)(uintptr_t)&r->hdr, sizeof(r->hdr) };
	if (len) {
		b[n++] = (struct vq_buf){ (u64)(uintptr_t)r->buf, len };
		if (type == BLK_T_OUT)
			nout = 2;
	}
	b[n++] = (struct vq_buf){ (u64)(uintptr_t)&r->status, 1 };
	if (!virtq_add(&B.vq, b, nout, n - nout, r))
		GUEST_FAIL("virtio-blk: ring full");
}

static struct req *wait_one(void)
{
	struct req *r;

	while (!(r = virtq_get(&B.vq, NULL)))
		cpu_relax();
	return r;
}

static u8 do_io(u32 type, u64 sector, u32 len)
{
	struct req *r = &B.reqs[0];

	submit(r, type, sector, len);
	virtq_kick(&B.vq);
	GUEST_ASSERT(wait_one() == r);
	return r->status;
}

/* The host's pattern: byte i of sector s. */
static u8 pattern(u64 s, u64 i)
{
	return (u8)(s * 13 + i * 7 + 1);
}

/* Reads sectors first..first+n-1 (n a multiple of 8) and checks the host's pattern. */
static void read_check(u64 first, u64 n)
{
	u8 *p = B.reqs[0].buf;

	for (u64 s = first; s < first + n; s += 8) {
		GUEST_ASSERT_EQ(do_io(BLK_T_IN, s, 8 * SECTOR), BLK_S_OK);
		for (u64 k = 0; k < 8; k++)
			for (u64 i = 0; i < SECTOR; i++)
				if (p[k * SECTOR + i] != pattern(s + k, i))
					GUEST_FAIL("sector %llu byte %llu: 0x%x", s + k, i,
						   p[k * SECTOR + i]);
	}
}

/* Writes the guest's pattern to sectors 64..71; returns the request's status. */
static u8 write_64(void)
{
	u8 *p = B.reqs[0].buf;

	for (u64 k = 0; k < 8; k++)
		for (u64 i = 0; i < SECTOR; i++)
			p[k * SECTOR + i] = (u8)((64 + k) * 29 + i * 3 + 5);
	return do_io(BLK_T_OUT, 64, 8 * SECTOR);
}

/* blk.capacity: the disk's size in sectors, which only the host knows. */
static void check_capacity(void)
{
	u64 want = cmdline_u64("blk.capacity", 0);

	if (!want)
		GUEST_FAIL("no blk.capacity=SECTORS on the command line");
	GUEST_ASSERT_EQ(B.capacity, want);
	GUEST_ASSERT(B.capacity >= 72);
}

static void verify(void)
{
	check_capacity();
	GUEST_ASSERT(!(B.offered & (1ull << BLK_F_RO)));
	read_check(0, 64);
	gprintf("GUEST blk-test: sectors 0-63 read back as the host wrote them\n");
	GUEST_ASSERT_EQ(write_64(), BLK_S_OK);
	GUEST_ASSERT_EQ(do_io(BLK_T_FLUSH, 0, 0), BLK_S_OK);
	/* Read back (through snapshot=on's overlay, say): the guest's own bytes. */
	GUEST_ASSERT_EQ(do_io(BLK_T_IN, 64, 8 * SECTOR), BLK_S_OK);
	for (u64 i = 0; i < 8 * SECTOR; i++)
		if (B.reqs[0].buf[i] != (u8)((64 + i / SECTOR) * 29 + i % SECTOR * 3 + 5))
			GUEST_FAIL("sector %llu byte %llu read back 0x%x", 64 + i / SECTOR,
				   i % SECTOR, B.reqs[0].buf[i]);
	/* Past the end: an error status, not a crash. */
	GUEST_ASSERT(do_io(BLK_T_IN, B.capacity, SECTOR) != BLK_S_OK);
	gprintf("BLK-VERIFY-OK capacity=%llu\n", B.capacity);
}

static void read_only(void)
{
	u8 st;

	check_capacity();
	if (!(B.offered & (1ull << BLK_F_RO)))
		GUEST_FAIL("a read-only disk without VIRTIO_BLK_F_RO (features 0x%llx)", B.offered);
	read_check(0, 64);
	gprintf("GUEST blk-test: sectors 0-63 read back as the host wrote them\n");
	st = write_64();
	if (st != BLK_S_IOERR)
		GUEST_FAIL(
			"a write to a read-only disk completed with status %u, not VIRTIO_BLK_S_IOERR",
			st);
	read_check(64, 8);
	gprintf("BLK-RO-OK features=0x%llx write_status=%u capacity=%llu\n", B.offered, st,
		B.capacity);
}

/* blk=bounce, at CPL3 (4 MiB zeroed and checked in emulated kernel mode would crawl). */
static void bounce(void *arg)
{
	static struct virtq_desc tables[QSIZE][3];
	static struct req reqs[QSIZE];
	u8 *buf = (u8 *)galloc(BOUNCE_LEN + 4096, 4096) + 8;
	u64 done = 0;

	for (int i = 0; i < QSIZE; i++) {
		struct req *r = &reqs[i];
		struct vq_buf b[3] = {
			{ (u64)(uintptr_t)&r->hdr, sizeof(r->hdr) },
			{ (u64)(uintptr_t)buf, BOUNCE_LEN },
			{ (u64)(uintptr_t)&r->status, 1 },
		};

		r->hdr = (struct blk_hdr){ .type = BLK_T_IN, .sector = 0 };
		r->status = 0xff;
		if (!virtq_add_indirect(&B.vq, tables[i], b, 1, 2, r))
			GUEST_FAIL("virtio-blk: ring full at request %d", i);
	}
	virtq_kick(&B.vq);
	while (done < QSIZE) {
		struct req *r = wait_one();

		if (r->status != BLK_S_OK)
			GUEST_FAIL("bounce: request %ld: status %u", (long)(r - reqs), r->status);
		done++;
	}
	for (u64 k = 0; k < BOUNCE_LEN; k++)
		if (buf[k] != pattern(k / SECTOR, k % SECTOR))
			GUEST_FAIL("bounce: byte %llu: 0x%x", k, buf[k]);
	gprintf("BLK-BOUNCE-OK requests=%llu bytes=%llu\n", done, done * BOUNCE_LEN);
	guest_done();
}

#define PAUSE_PIECE (256u << 10)
#define PAUSE_PIECES 256 /* 64 MiB, the most one request may move */
#define PIECE_OF(len) ((len) < PAUSE_PIECE ? (len) : (u64)PAUSE_PIECE)

static struct virtq_desc (*pause_tables)[PAUSE_PIECES + 2];
static u8 *pause_buf;

/* blk=pause: the next read of `len` bytes, round the disk. */
static u64 pause_sector(u64 *at, u64 len)
{
	u64 s = *at;

	*at += len / SECTOR;
	if (*at + len / SECTOR > B.capacity)
		*at = 0;
	return s;
}

/* A read of len bytes at sector into pieces that alias pause_buf, through r's own table. */
static void pause_submit(struct req *r, u64 sector, u64 len)
{
	struct vq_buf b[PAUSE_PIECES + 2];
	u32 piece = (u32)PIECE_OF(len), n = (u32)(len / piece);

	r->hdr = (struct blk_hdr){ .type = BLK_T_IN, .sector = sector };
	r->status = 0xff;
	b[0] = (struct vq_buf){ (u64)(uintptr_t)&r->hdr, sizeof(r->hdr) };
	for (u32 i = 0; i < n; i++)
		b[1 + i] = (struct vq_buf){ (u64)(uintptr_t)pause_buf, piece };
	b[1 + n] = (struct vq_buf){ (u64)(uintptr_t)&r->status, 1 };
	if (!virtq_add_indirect(&B.vq, pause_tables[r - B.reqs], b, 1, (int)n + 1, r))
		GUEST_FAIL("virtio-blk: ring full");
}

/* blk=pause, at CPL3: reads kept in flight, hvc0's lines reported (see the top). */
static void pause_run(void *arg)
{
	static char line[80];
	u64 len = B.kib * 1024, at = 0, reads = 0, errors = 0, lines = 0;
	size_t n = 0;

	for (u64 i = 0; i < B.qd; i++)
		pause_submit(&B.reqs[i], pause_sector(&at, len), len);
	virtq_kick(&B.vq);
	gprintf("BLK-PAUSE-READY qd=%llu kib=%llu\n", B.qd, B.kib);
	for (;;) {
		struct req *r = virtq_get(&B.vq, NULL);
		int c = hvc_poll();

		if (r) {
			reads++;
			errors += r->status != BLK_S_OK;
			pause_submit(r, pause_sector(&at, len), len);
			virtq_kick(&B.vq);
		}
		if (c < 0) {
			if (!r)
				cpu_relax();
			continue;
		}
		if (c != '\n') {
			if (n + 1 < sizeof(line))
				line[n++] = (char)c;
			continue;
		}
		line[n] = '\0';
		gprintf("GUEST blk-test: line %llu '%s' reads=%llu\n", ++lines, line, reads);
		if (!strcmp(line, "done"))
			break;
		n = 0;
	}
	/* The reads in flight come back too: every one the device took is counted. */
	for (u64 i = 0; i < B.qd; i++, reads++)
		errors += wait_one()->status != BLK_S_OK;
	gprintf("BLK-PAUSE-OK reads=%llu errors=%llu\n", reads, errors);
	guest_done();
}

static void pause_mode(void)
{
	u64 len;

	B.kib = cmdline_u64("kib", 4);
	len = B.kib * 1024;
	if (B.kib < 1 || len > (u64)PAUSE_PIECE * PAUSE_PIECES || len % PIECE_OF(len) ||
	    B.capacity < 2 * len / SECTOR)
		GUEST_FAIL(
			"blk=pause: kib=%llu (up to 256, or multiples of 256 up to 65536; at most half the disk)",
			B.kib);
	if (B.mmio || !(B.vp.features & (1ull << VIRTIO_F_INDIRECT_DESC)))
		GUEST_FAIL("blk=pause: needs virtio-pci and indirect descriptors");
	if (!hvc_init())
		GUEST_FAIL("blk=pause: no hvc0 (lkvm --console virtio)");
	pause_buf = galloc(PIECE_OF(len), 4096);
	pause_tables = galloc(sizeof(*pause_tables) * B.qd, 16);
	/* Interrupts asked for (the guest still polls): lkvm counts those it raises. */
	B.vq.avail->flags = 0;
	guest_run_user(pause_run, NULL);
}

static u64 rng_state = 88172645463325252ull;

static u64 next_sector(u64 *seq)
{
	u64 blocks = B.capacity / (IO_SIZE / SECTOR);

	if (!B.rand) {
		u64 s = *seq;

		*seq = (*seq + 1) % blocks;
		return s * (IO_SIZE / SECTOR);
	}
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (rng_state % blocks) * (IO_SIZE / SECTOR);
}

static void bench(void *arg)
{
	u64 t0 = rdtsc(), end = t0 + ns_to_tsc(B.secs * 1000000000ull), done = 0, seq = 0,
	    errors = 0;
	u64 ns;

	for (u64 i = 0; i < B.qd; i++)
		submit(&B.reqs[i], BLK_T_IN, next_sector(&seq), IO_SIZE);
	virtq_kick(&B.vq);
	while (rdtsc() < end) {
		struct req *r = virtq_get(&B.vq, NULL);

		if (!r) {
			cpu_relax();
			continue;
		}
		done++;
		errors += r->status != BLK_S_OK;
		submit(r, BLK_T_IN, next_sector(&seq), IO_SIZE);
		virtq_kick(&B.vq);
	}
	ns = tsc_to_ns(rdtsc() - t0);
	gprintf("BENCH blk trans=%s pattern=%s qd=%llu ios=%llu errors=%llu ns=%llu iops=%llu kicks=%llu\n",
		B.mmio ? "mmio" : "pci", B.rand ? "rand" : "seq", B.qd, done, errors, ns,
		ns ? done * 1000000000ull / ns : 0, B.vq.kicks);
	guest_done();
}

/* The bare cost of one notify (ioeventfd or trapped, whatever lkvm set up), from CPL3. */
static void notify(void *arg)
{
	u64 t0 = rdtsc(), end = t0 + ns_to_tsc(B.secs * 1000000000ull), n = 0, ns;

	do {
		for (int i = 0; i < 64; i++) {
			if (B.vq.notify32)
				mmio_write32(B.vq.notify_addr, 0);
			else
				mmio_write16(B.vq.notify_addr, 0);
		}
		n += 64;
	} while (rdtsc() < end);
	ns = tsc_to_ns(rdtsc() - t0);
	gprintf("BENCH notify trans=%s notifies=%llu ns=%llu ns_per_notify=%llu\n",
		B.mmio ? "mmio" : "pci", n, ns, n ? ns / n : 0);
	guest_done();
}

void guest_main(void)
{
	char mode[16], trans[8] = "pci", pat[8] = "seq";

	if (!cmdline_get("blk", mode, sizeof(mode)))
		GUEST_FAIL("no blk=verify|ro|bench|notify|bounce on the command line");
	cmdline_get("trans", trans, sizeof(trans));
	cmdline_get("pattern", pat, sizeof(pat));
	B.mmio = !strcmp(trans, "mmio");
	B.rand = !strcmp(pat, "rand");
	B.qd = cmdline_u64("qd", 1);
	B.secs = cmdline_u64("secs", 2);
	if (B.qd < 1 || B.qd > MAX_QD || B.secs < 1 || B.secs > 600)
		GUEST_FAIL("qd=%llu (1-%u) or secs=%llu (1-600) out of range", B.qd, MAX_QD,
			   B.secs);
	clock_init();
	B.reqs = galloc(sizeof(struct req) * MAX_QD, 64);
	for (int i = 0; i < MAX_QD; i++)
		B.reqs[i].buf = galloc(IO_SIZE, 4096);
	if (B.mmio)
		mmio_setup();
	else
		pci_setup();
	gprintf("GUEST blk-test: %s disk, %llu sectors, features 0x%llx, mode %s\n",
		B.mmio ? "virtio-mmio" : "virtio-pci", B.capacity, B.offered, mode);
	if (!strcmp(mode, "verify")) {
		verify();
		guest_done();
	}
	if (!strcmp(mode, "ro")) {
		read_only();
		guest_done();
	}
	if (!strcmp(mode, "bounce")) {
		if (B.mmio || !(B.vp.features & (1ull << VIRTIO_F_INDIRECT_DESC)))
			GUEST_FAIL("blk=bounce: needs virtio-pci and indirect descriptors");
		if (B.capacity < BOUNCE_LEN / SECTOR)
			GUEST_FAIL("blk=bounce: the disk needs %u sectors", BOUNCE_LEN / SECTOR);
		guest_run_user(bounce, NULL);
	}
	if (!strcmp(mode, "pause"))
		pause_mode();
	if (B.capacity < 2 * (IO_SIZE / SECTOR))
		GUEST_FAIL("disk too small to benchmark");
	if (!strcmp(mode, "bench"))
		guest_run_user(bench, NULL);
	if (!strcmp(mode, "notify"))
		guest_run_user(notify, NULL);
	GUEST_FAIL("unknown blk=%s", mode);
}

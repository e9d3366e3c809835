/* Unit tests of the virtio-9p device driven through its virtio-mmio registers without KVM (identity, tag, a 9P session over the queue, read-only shares, malformed chains, reset, pause, stop, counters, its thread's sandbox), and of --share's parser. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/virtio_9p.h>
#include <linux/virtio_mmio.h>
#include <linux/virtio_ring.h>

#include "check_main.h"
#include "irq_hook.h"
#include "p9_client.h"
#include "stats_fmt.h"
#include "vdriver.h"
#include "wait.h"
#include "lkvm/dev.h"
#include "lkvm/kvm.h"
#include "lkvm/run.h"
#include "lkvm/sandbox.h"
#include "lkvm/snap.h"
#include "lkvm/host-files.h"
#include "lkvm/hostfs.h"
#include "lkvm/virtio-9p.h"
#include "lkvm/virtio-mmio.h"

#define RAM_SIZE MiB(4)
#define QSIZE 64
#define QBASE 0x10000ULL /* desc; avail +0x1000; used +0x2000 */
#define REQ_GPA 0x100000ULL
#define RESP_GPA 0x200000ULL /* up to sizeof(rm) bytes */
#define WAIT_MS 10000
#define HELLO "hello, world\n"
#define FEATURES (1ULL << VIRTIO_F_VERSION_1 | 1ULL << VIRTIO_9P_MOUNT_TAG)

static struct {
	char top[64], share[96];
	struct virtio_9p *p;
	struct virtio_device *vdev;
	u64 base;
	struct vd_queue q;
} t;

/* ---- the driver: registers ---- */

static u64 acc(u32 off, u32 len, bool is_write, u64 v)
{
	u8 d[8] = { 0 };

	memcpy(d, &v, len);
	ck_assert(io_bus_dispatch(&vd.kvm->mmio, NULL, t.base + off, d, len, is_write));
	v = 0;
	memcpy(&v, d, len);
	return v;
}

static u32 rd(u32 off)
{
	return (u32)acc(off, 4, false, 0);
}

static void wr(u32 off, u32 v)
{
	acc(off, 4, true, v);
}

static bool needs_reset(void)
{
	return rd(VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_NEEDS_RESET;
}

/* What Linux's virtio_9p probe does up to DRIVER_OK: features, one queue of QSIZE. */
static void driver_up(void)
{
	wr(VIRTIO_MMIO_STATUS, 0);
	wr(VIRTIO_MMIO_STATUS, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER);
	wr(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
	wr(VIRTIO_MMIO_DRIVER_FEATURES, (u32)FEATURES);
	wr(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	wr(VIRTIO_MMIO_DRIVER_FEATURES, (u32)(FEATURES >> 32));
	wr(VIRTIO_MMIO_STATUS, rd(VIRTIO_MMIO_STATUS) | VIRTIO_CONFIG_S_FEATURES_OK);
	ck_assert(rd(VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_FEATURES_OK);
	memset(gp(QBASE), 0, 0x3000);
	wr(VIRTIO_MMIO_QUEUE_SEL, 0);
	wr(VIRTIO_MMIO_QUEUE_NUM, QSIZE);
	wr(VIRTIO_MMIO_QUEUE_DESC_LOW, (u32)QBASE);
	wr(VIRTIO_MMIO_QUEUE_DESC_HIGH, 0);
	wr(VIRTIO_MMIO_QUEUE_AVAIL_LOW, (u32)(QBASE + 0x1000));
	wr(VIRTIO_MMIO_QUEUE_AVAIL_HIGH, 0);
	wr(VIRTIO_MMIO_QUEUE_USED_LOW, (u32)(QBASE + 0x2000));
	wr(VIRTIO_MMIO_QUEUE_USED_HIGH, 0);
	wr(VIRTIO_MMIO_QUEUE_READY, 1);
	vd_queue_at(&t.q, QBASE, QSIZE);
	wr(VIRTIO_MMIO_STATUS, rd(VIRTIO_MMIO_STATUS) | VIRTIO_CONFIG_S_DRIVER_OK);
	ck_assert(rd(VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_DRIVER_OK);
	p9c_tag = 0;
}

/* ---- the driver: the queue ---- */

static u16 used_idx(void)
{
	return vd_used_idx(&t.q);
}

/* One request chain: readable [req, req + len), then writable [resp, resp + room). */
static u16 post(u64 req, u32 len, u64 resp, u32 room)
{
	return vd_post(&t.q, (struct vd_buf[]){ { req, len, false }, { resp, room, true } }, 2);
}

static void notify(void)
{
	wr(VIRTIO_MMIO_QUEUE_NOTIFY, 0);
}

/* The client's transport: the message through the queue, its reply back from guest RAM.
 * -EIO when the device gave up on the chain (NEEDS_RESET) instead of answering. */
static ssize_t queue_handle(size_t len, size_t room)
{
	u16 want = (u16)(used_idx() + 1);
	struct vring_used_elem *e;

	memcpy(gp(REQ_GPA), tm, len);
	post(REQ_GPA, (u32)len, RESP_GPA, (u32)room);
	notify();
	ck_assert_msg(WAIT_UNTIL(WAIT_MS, used_idx() == want || needs_reset()), "no answer");
	if (used_idx() != want)
		return -EIO;
	e = &t.q.used->ring[(u16)(want - 1) % QSIZE];
	ck_assert_uint_le(e->len, room);
	memcpy(rm, gp(RESP_GPA), e->len);
	return e->len;
}

/* ---- the fixture ---- */

/* A path in the share (one at a time). */
static const char *in_share(const char *rel)
{
	static char path[160];

	snprintf(path, sizeof(path), "%s/%s", t.share, rel);
	return path;
}

/* The host descriptors this process holds. */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void tree_up(void)
{
	memset(&t, 0, sizeof(t));
	strcpy(t.top, "/tmp/lkvm-v9p-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(t.top));
	snprintf(t.share, sizeof(t.share), "%s/share", t.top);
	ck_assert_int_eq(mkdir(t.share, 0755), 0);
	host_write(in_share("file"), HELLO);
	p9c_handle = queue_handle;
}

/* A VM without KVM: guest RAM, the buses, and the transport for devices without trans=. */
static void vm_up(void)
{
	vd_vm_new(RAM_SIZE, 0);
	vd.kvm->cfg.virtio_trans = VIRTIO_TRANS_MMIO;
	vd_queue_at(&t.q, QBASE, QSIZE);
}

static void share_of(struct p9_share *sh, bool ro)
{
	memset(sh, 0, sizeof(*sh));
	strcpy(sh->host_dir, t.share);
	strcpy(sh->tag, "lkvm-share0");
	sh->ro = ro;
}

/* The device on the MMIO transport with its thread running (max_fids 0: the default). */
static void dev_up(bool ro, u32 max_fids)
{
	struct virtio_mmio_slot slots[VIRTIO_MMIO_MAX_DEVS];
	struct p9_share sh;
	char err[256];

	vm_up();
	share_of(&sh, ro);
	ck_assert_msg(virtio_9p_create(vd.kvm, &sh, false, max_fids, &t.p, err, sizeof(err)) == 0,
		      "%s", err);
	t.vdev = virtio_9p_vdev(t.p);
	ck_assert_int_eq(virtio_mmio_slots(vd.kvm, slots), 1);
	t.base = slots[0].addr;
	ck_assert_int_eq(virtio_9p_run(t.p), 0);
}

static void dev_down(void)
{
	virtio_9p_destroy(t.p);
	vd_vm_free();
}

static void tree_down(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", t.top);
	ck_assert_int_eq(system(cmd), 0);
}

static void setup(void)
{
	tree_up();
	dev_up(false, 0);
}

static void teardown(void)
{
	dev_down();
	tree_down();
}

static void visit(void *dev, struct stats_visitor *v)
{
	virtio_9p_stats(dev, v);
}

/* One counter of the device by its flat name (as lkvm stat carries it: 9p0.GROUP.NAME). */
struct one {
	char want[64];
	u64 v;
	bool seen;
};

static void one_put(void *arg, const char *name, u64 value)
{
	struct one *o = arg;

	if (!strcmp(name, o->want)) {
		o->v = value;
		o->seen = true;
	}
}

static u64 counter(const char *group_name)
{
	struct stats_flat f;
	struct one o = { .seen = false };

	snprintf(o.want, sizeof(o.want), "9p0.%s", group_name);
	stats_flat_init(&f, one_put, &o);
	f.v.device(&f.v, "9p", 0);
	virtio_9p_stats(t.p, &f.v);
	ck_assert_msg(o.seen, "no counter %s", o.want);
	return o.v;
}

/* ---- tests ---- */

START_TEST(identity_and_tag)
{
	char tag[VIRTIO_9P_TAG_MAX + 1] = "";
	u32 len;

	ck_assert_uint_eq(rd(VIRTIO_MMIO_DEVICE_ID), VIRTIO_ID_9P);
	wr(VIRTIO_MMIO_DEVICE_FEATURES_SEL, 0);
	ck_assert(rd(VIRTIO_MMIO_DEVICE_FEATURES) & (1u << VIRTIO_9P_MOUNT_TAG));
	wr(VIRTIO_MMIO_QUEUE_SEL, 0);
	ck_assert_uint_ge(rd(VIRTIO_MMIO_QUEUE_NUM_MAX), 128); /* Linux's 9p posts up to 128 */
	/* struct virtio_9p_config: tag_len (le16), then the tag, read a byte at a time as
	 * virtio_cread_bytes may. */
	len = (u32)acc(VIRTIO_MMIO_CONFIG, 2, false, 0);
	ck_assert_uint_eq(len, strlen("lkvm-share0"));
	for (u32 i = 0; i < len; i++)
		tag[i] = (char)acc(VIRTIO_MMIO_CONFIG + 2 + i, 1, false, 0);
	ck_assert_str_eq(tag, "lkvm-share0");
	acc(VIRTIO_MMIO_CONFIG, 2, true, 0x4141); /* the driver cannot change it */
	ck_assert_uint_eq(acc(VIRTIO_MMIO_CONFIG, 2, false, 0), len);
}
END_TEST

/* A session over the queue: read a host file, create and write one, the counters. */
START_TEST(session_over_queue)
{
	char buf[64];
	char *out;
	u64 kicks;

	driver_up();
	session();
	ck_assert_int_eq(walk_to(2, "file"), 0);
	ck_assert_int_eq(t_lopen(2, O_RDONLY, NULL), 0);
	ck_assert_int_eq(t_read(2, 0, sizeof(buf), buf, sizeof(buf)), (int)strlen(HELLO));
	ck_assert_mem_eq(buf, HELLO, strlen(HELLO));
	ck_assert_int_eq(t_walk(ROOT, 3, NULL, NULL), 0);
	ck_assert_int_eq(t_lcreate(3, "new", O_RDWR, 0644, NULL), 0);
	ck_assert_int_eq(t_write(3, 0, "from the guest", 14), 14);
	ck_assert_str_eq(host_read(in_share("new"), buf, sizeof(buf)), "from the guest");
	ck_assert_int_eq(walk_to(4, "nope"), -ENOENT);

	/* 9 requests (version, attach, 2 walks, lopen, read, lcreate, write, a failed walk). */
	kicks = counter("req0.kicks");
	ck_assert_uint_eq(counter("req0.requests"), 9);
	ck_assert_uint_eq(counter("req0.errors"), 1);
	ck_assert_uint_eq(counter("req0.reads"), 1);
	ck_assert_uint_eq(counter("req0.read_bytes"), strlen(HELLO));
	ck_assert_uint_eq(counter("req0.write_bytes"), 14);
	ck_assert_uint_eq(counter("req0.bytes"), strlen(HELLO) + 14);
	ck_assert_uint_eq(counter("req0.trapped"), 9);
	ck_assert_uint_ge(kicks, 1); /* notifies that came while busy are read together */
	ck_assert_uint_le(kicks, 9);
	ck_assert_uint_eq(counter("req0.malformed"), 0);
	ck_assert_uint_eq(counter("fids.in_use"), 3);
	ck_assert_uint_eq(counter("fids.limit"), P9_FIDS_DEFAULT);
	ck_assert_uint_eq(counter("fids.msize"), MSIZE);
	/* the share's host files: the root, file and new; two of them open */
	ck_assert_uint_eq(counter("files.nodes"), 3);
	ck_assert_uint_eq(counter("files.open"), 2);
	ck_assert_uint_eq(counter("files.cap_hits"), 0);
	out = stats_fmt("9p", t.p, visit, false);
	ck_assert_msg(strstr(out, "files: nodes 3, cached "), "%s", out);
	ck_assert_msg(strstr(out, "9p0:") && strstr(out, "read_bytes") && strstr(out, "req0 ") &&
			      strstr(out, "fids: in_use 3, limit 1048576, msize 65536"),
		      "%s", out);
	free(out);
	out = stats_fmt("9p", t.p, visit, true);
	ck_assert_msg(strstr(out, "\"shares\":[{\"share\":0,\"queues\":[{\"name\":\"req0\"") &&
			      strstr(out, "\"requests\":9") &&
			      strstr(out, "\"fids\":{\"in_use\":3"),
		      "%s", out);
	free(out);
}
END_TEST

START_TEST(readonly_share)
{
	char buf[64];

	dev_down();
	dev_up(true, 0);
	driver_up();
	session();
	ck_assert_int_eq(t_walk(ROOT, 2, NULL, NULL), 0);
	ck_assert_int_eq(t_lcreate(2, "new", O_RDWR, 0644, NULL), -EROFS);
	ck_assert_int_eq(walk_to(3, "file"), 0);
	ck_assert_int_eq(t_lopen(3, O_RDWR, NULL), -EROFS);
	ck_assert_int_eq(t_lopen(3, O_RDONLY, NULL), 0);
	ck_assert_int_eq(t_read(3, 0, sizeof(buf), buf, sizeof(buf)), (int)strlen(HELLO));
	ck_assert_str_eq(host_read(in_share("file"), buf, sizeof(buf)), HELLO);
	ck_assert_int_eq(access(t.share, F_OK), 0);
}
END_TEST

/*
 * Issue 39: a share's bound reached says so once, on lkvm's stderr, as one "lkvm: warning:"
 * line naming the share and the bound, and --stats counts every refusal.
 */
START_TEST(cap_warns_once)
{
	char path[] = "/tmp/lkvm-9p-warn-XXXXXX", text[4096];
	int fd = mkstemp(path), saved = dup(STDERR_FILENO), lines = 0;
	ssize_t n;

	ck_assert_int_ge(fd, 0);
	dev_down();
	dev_up(false, 3);
	driver_up();
	session(); /* the attach: 1 of 3 */
	ck_assert_int_eq(dup2(fd, STDERR_FILENO), STDERR_FILENO);
	ck_assert_int_eq(walk_to(2, "file"), 0);
	ck_assert_int_eq(walk_to(3, "file"), 0);
	ck_assert_int_eq(walk_to(4, "file"), -ENFILE);
	ck_assert_int_eq(walk_to(5, "file"), -ENFILE);
	ck_assert_int_eq(dup2(saved, STDERR_FILENO), STDERR_FILENO);
	close(saved);
	n = pread(fd, text, sizeof(text) - 1, 0);
	close(fd);
	unlink(path);
	ck_assert_int_ge(n, 0);
	text[n] = '\0';
	for (char *l = text; (l = strstr(l, "lkvm: warning: ")); l++, lines++)
		ck_assert_msg(strstr(l, t.share) && strstr(l, "3 fids (the most)"), "%s", text);
	ck_assert_msg(lines == 1, "%d warnings: %s", lines, text);
	ck_assert_uint_eq(counter("files.cap_hits"), 2);
}
END_TEST

/* A malformed 9P message is the server's: an Rlerror, and the device goes on. */
START_TEST(malformed_message_gets_rlerror)
{
	driver_up();
	session();
	begin(0x55); /* no such message type */
	w(1, 4);
	ck_assert_int_lt(call(), 0);
	begin(P9_TWALK); /* a walk that stops half-way through its fields */
	w(ROOT, 4);
	ck_assert_int_lt(call(), 0);
	ck_assert(!needs_reset());
	ck_assert_int_eq(t_walk(ROOT, 2, NULL, NULL), 0);
	ck_assert_uint_eq(counter("req0.malformed"), 0);
}
END_TEST

/* A chain the transport cannot use puts the device in NEEDS_RESET, answers nothing more
 * until the driver resets, and the reset closes every fid of the session. */
START_TEST(malformed_chain_then_reset)
{
	u16 before;
	int fds;

	driver_up();
	fds = open_fds();
	session();
	ck_assert_int_eq(walk_to(2, "file"), 0);
	ck_assert_int_eq(t_lopen(2, O_RDONLY, NULL), 0);
	ck_assert_uint_eq(counter("fids.in_use"), 2);
	ck_assert_int_gt(open_fds(), fds);

	/* A buffer past the end of guest RAM. */
	before = used_idx();
	post(RAM_SIZE - 8, 64, RESP_GPA, 4096);
	notify();
	ck_assert(WAIT_UNTIL(WAIT_MS, needs_reset()));
	ck_assert_uint_eq(counter("req0.malformed"), 1);
	/* Nothing is answered now, not even a good request. */
	memcpy(gp(REQ_GPA), "\x0b\0\0\0\x78\1\0\1\0\0\0", 11); /* Tclunk fid 1 */
	post(REQ_GPA, 11, RESP_GPA, 4096);
	notify();
	ck_assert(HOLDS_FOR(100, used_idx() == before));

	/* Reset: the fids (and their host descriptors) are gone, a new session works. */
	wr(VIRTIO_MMIO_STATUS, 0);
	ck_assert_uint_eq(counter("fids.in_use"), 0);
	ck_assert_uint_eq(counter("fids.msize"), 0);
	ck_assert_int_eq(open_fds(), fds);
	driver_up();
	ck_assert(!needs_reset());
	session();
	ck_assert_int_eq(walk_to(2, "file"), 0);

	/* A message whose size field claims more than the chain holds: no reply can be made. */
	begin(P9_TCLUNK);
	w(2, 4);
	tm_len = 11;
	tm[0] = 200;
	ck_assert_int_eq(p9c_handle(11, 4096), -EIO);
	ck_assert_uint_eq(counter("req0.malformed"), 2);
	/* No room for even an Rlerror: likewise. */
	wr(VIRTIO_MMIO_STATUS, 0);
	driver_up();
	begin(P9_TCLUNK);
	w(2, 4);
	tm[0] = 11;
	ck_assert_int_eq(p9c_handle(11, 10), -EIO);
	ck_assert_uint_eq(counter("req0.malformed"), 3);
}
END_TEST

/* Paused, the device answers nothing; after resume, what came meanwhile is answered. */
START_TEST(pause_answers_nothing)
{
	u16 before;

	driver_up();
	session();
	virtio_9p_quiesce(t.p);
	before = used_idx();
	begin(P9_TCLUNK);
	w(ROOT, 4);
	tm[0] = 11;
	memcpy(gp(REQ_GPA), tm, 11);
	post(REQ_GPA, 11, RESP_GPA, 4096);
	notify();
	ck_assert(HOLDS_FOR(200, used_idx() == before));
	ck_assert_uint_eq(counter("fids.in_use"), 1);
	virtio_9p_resume(t.p);
	ck_assert(WAIT_UNTIL(WAIT_MS, used_idx() == (u16)(before + 1)));
	ck_assert_uint_eq(counter("fids.in_use"), 0);
}
END_TEST

/* ---- snapshot ---- */

/* Device A with fid 2 open on "file", a Tread of it (offset 7) posted and kicked while paused,
 * saved into b and destroyed (guest RAM stays as A left it). */
static void a_saved(struct snap_rec_buf *b)
{
	char buf[16], err[384] = "";

	driver_up();
	session();
	ck_assert_int_eq(walk_to(2, "file"), 0);
	ck_assert_int_eq(t_lopen(2, 0, NULL), 0);
	ck_assert_int_eq(t_read(2, 0, 5, buf, sizeof(buf)), 5);
	virtio_9p_quiesce(t.p);
	begin_io(P9_TREAD, 2, 7, 64);
	for (int i = 0; i < 4; i++)
		tm[i] = (u8)(tm_len >> (8 * i));
	memcpy(gp(REQ_GPA), tm, tm_len);
	post(REQ_GPA, (u32)tm_len, RESP_GPA, 4096);
	notify();
	ck_assert(HOLDS_FOR(50, used_idx() == 5)); /* version, attach, walk, open, read */
	ck_assert_msg(virtio_9p_save(t.p, b, err, sizeof(err)) == 0, "%s", err);
	virtio_9p_destroy(t.p);
	t.p = NULL;
}

/* Device B loads A's section on the same share: nothing moves before start; started, the
 * request posted before the snapshot is answered with the next index and an interrupt, and
 * the session goes on (fid 2 still open, the fid count, msize). */
START_TEST(restored_device_goes_on)
{
	struct virtio_mmio_slot slots[VIRTIO_MMIO_MAX_DEVS];
	struct snap_rec_buf b = { 0 };
	struct vring_used_elem *e;
	char buf[16], err[384] = "";
	struct p9_share sh;
	const u8 *reply;

	a_saved(&b);
	share_of(&sh, false);
	ck_assert_int_eq(virtio_9p_create(vd.kvm, &sh, false, 0, &t.p, err, sizeof(err)), 0);
	t.vdev = virtio_9p_vdev(t.p);
	ck_assert_int_eq(virtio_mmio_slots(vd.kvm, slots), 1);
	t.base = slots[0].addr;
	ck_assert_msg(virtio_9p_load(t.p, b.buf, b.len, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(counter("fids.in_use"), 2);
	ck_assert_uint_eq(counter("fids.msize"), MSIZE);
	ck_assert_int_eq(virtio_9p_run(t.p), 0);
	ck_assert(HOLDS_FOR(50, used_idx() == 5));
	ck_assert_int_eq(virtio_snap_start(t.vdev), 0);
	ck_assert(WAIT_UNTIL(WAIT_MS, used_idx() == 6));
	e = &t.q.used->ring[5];
	reply = gp(RESP_GPA);
	ck_assert_uint_eq(e->len, P9_HDR_SIZE + 4 + 6);
	ck_assert_uint_eq(reply[4], P9_TREAD + 1);
	ck_assert_int_eq(memcmp(reply + P9_HDR_SIZE + 4, "world\n", 6), 0);
	ck_assert(WAIT_UNTIL(WAIT_MS, rd(VIRTIO_MMIO_INTERRUPT_STATUS) & 1));
	ck_assert_int_eq(t_read(2, 0, 5, buf, sizeof(buf)), 5);
	ck_assert_int_eq(memcmp(buf, "hello", 5), 0);
	ck_assert_int_eq(t_clunk(2), 0);
	ck_assert_uint_eq(counter("fids.in_use"), 1);
	snap_rec_free(&b);
}
END_TEST

/* The file A's fid had open is gone when B loads: refused in one line, B at power-on. */
START_TEST(restore_refused_when_gone)
{
	struct snap_rec_buf b = { 0 };
	char err[384] = "";
	struct p9_share sh;

	a_saved(&b);
	ck_assert_int_eq(unlink(in_share("file")), 0);
	share_of(&sh, false);
	ck_assert_int_eq(virtio_9p_create(vd.kvm, &sh, false, 0, &t.p, err, sizeof(err)), 0);
	t.vdev = virtio_9p_vdev(t.p);
	ck_assert_int_eq(virtio_9p_load(t.p, b.buf, b.len, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "fid 2's path 'file' is gone from the share (ENOENT)");
	ck_assert_uint_eq(counter("fids.in_use"), 0);
	ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), 0);
	snap_rec_free(&b);
}
END_TEST

/* A device whose thread is paused is still reset at once (the reset waits for nothing the
 * paused thread holds), and answers after resume. */
START_TEST(reset_while_paused)
{
	driver_up();
	session();
	virtio_9p_quiesce(t.p);
	wr(VIRTIO_MMIO_STATUS, 0);
	ck_assert_uint_eq(counter("fids.in_use"), 0);
	driver_up();
	virtio_9p_resume(t.p);
	session();
	ck_assert_uint_eq(counter("fids.in_use"), 1);
}
END_TEST

/* ---- a driver that never lets the ring run dry (bare device, stand-in transport) ---- */

static u8 endless_req[11] = { 11, 0, 0, 0, P9_TCLUNK, 1, 0, 9, 0, 0, 0 }; /* Tclunk fid 9 */

static void bare_up(void)
{
	struct p9_share sh;
	char err[256];

	vm_up();
	share_of(&sh, false);
	ck_assert_msg(virtio_9p_create(vd.kvm, &sh, true, 0, &t.p, err, sizeof(err)) == 0, "%s",
		      err);
	t.vdev = virtio_9p_vdev(t.p);
	vd_queue_up(t.vdev, 0, &t.q, QBASE, QSIZE, false);
	memcpy(gp(REQ_GPA), endless_req, sizeof(endless_req));
	endless_set(t.vdev, 0, &t.q, post(REQ_GPA, sizeof(endless_req), RESP_GPA, 4096));
	ck_assert_int_eq(virtio_9p_run(t.p), 0);
	atomic_store(&t.vdev->status, VIRTIO_CONFIG_S_DRIVER_OK | VIRTIO_CONFIG_S_FEATURES_OK);
}

static void bare_down(void)
{
	struct vd_fds fds;

	vd_fds_save(&fds, t.vdev, 1);
	virtio_9p_destroy(t.p);
	vd_fds_close(&fds);
	vd_vm_free();
}

/* Every answer's interrupt posts the request again: a reset and a pause still get the thread
 * out between two requests, and it answered more than one wake-up's budget meanwhile. */
START_TEST(stop_and_pause_with_endless_driver)
{
	int served;

	tree_up();
	bare_up();
	ck_assert_int_eq(t.vdev->ops->start(t.vdev), 0);
	ck_assert(WAIT_UNTIL(WAIT_MS, endless_served() > 1000));
	virtio_9p_quiesce(t.p);
	served = endless_served();
	ck_assert(HOLDS_FOR(50, endless_served() == served));
	virtio_9p_resume(t.p);
	ck_assert(WAIT_UNTIL(WAIT_MS, endless_served() > served + 1000));
	t.vdev->ops->stop(t.vdev); /* what a reset does: returns, and nothing is answered after */
	served = endless_served();
	ck_assert(HOLDS_FOR(50, endless_served() == served));
	ck_assert_uint_eq(counter("req0.requests"), (u64)served);
	bare_down();
	tree_down();
}
END_TEST

/* The device's thread inside its seccomp filter (SB_P9) serves a session: a call outside
 * the allow-list would end this child with 159 instead of 0. */
START_TEST(thread_in_sandbox)
{
	char err[256];

	struct virtio_mmio_slot slots[VIRTIO_MMIO_MAX_DEVS];
	struct p9_share sh;

	/* lkvm's order: the devices made (their eventfds open), privileges dropped (the
	 * sandbox learns which fds its threads may read and write), the threads started. */
	vm_up();
	share_of(&sh, false);
	ck_assert_msg(virtio_9p_create(vd.kvm, &sh, false, 0, &t.p, err, sizeof(err)) == 0, "%s",
		      err);
	t.vdev = virtio_9p_vdev(t.p);
	ck_assert_int_eq(virtio_mmio_slots(vd.kvm, slots), 1);
	t.base = slots[0].addr;
	ck_assert_msg(sandbox_drop_privileges(NULL, err, sizeof(err)) == 0, "%s", err);
	vd.kvm->sandbox = true;
	ck_assert_int_eq(virtio_9p_run(t.p), 0);
	driver_up();
	session();
	ck_assert_int_eq(walk_to(2, "file"), 0);
	ck_assert_int_eq(t_lopen(2, O_RDONLY, NULL), 0);
	ck_assert_int_eq(t_read(2, 0, 5, NULL, 0), 5);
	ck_assert_int_eq(t_walk(ROOT, 3, NULL, NULL), 0);
	ck_assert_int_eq(t_lcreate(3, "new", O_RDWR, 0644, NULL), 0);
	ck_assert_int_eq(t_write(3, 0, "x", 1), 1);
	virtio_9p_quiesce(t.p);
	virtio_9p_resume(t.p);
	wr(VIRTIO_MMIO_STATUS, 0); /* the reset on this ("vCPU") thread */
	virtio_9p_destroy(t.p);	   /* the thread ends inside its filter */
	_exit(0);
}
END_TEST

/* ---- --share ---- */

START_TEST(share_parse)
{
	struct p9_shares s = { 0 };
	char err[PATH_MAX + 256], arg[PATH_MAX], real[PATH_MAX];
	const struct p9_share *sh;

	ck_assert_ptr_nonnull(realpath(t.share, real));
	snprintf(arg, sizeof(arg), "%s/../share", t.share);
	ck_assert_msg(p9_share_parse(&s, arg, err, sizeof(err)) == 0, "%s", err);
	snprintf(arg, sizeof(arg), "%s:/data,ro,trans=mmio,fids=4096", t.share);
	ck_assert_msg(p9_share_parse(&s, arg, err, sizeof(err)) == 0, "%s", err);
	sh = p9_share_get(&s, 0);
	ck_assert_str_eq(sh->host_dir, real);
	ck_assert_str_eq(sh->guest_dir, real); /* GUESTDIR defaults to HOSTDIR, made absolute */
	ck_assert_str_eq(sh->tag, "lkvm-share0");
	ck_assert(!sh->ro && !sh->trans_set && !sh->fids);
	sh = p9_share_get(&s, 1);
	ck_assert_uint_eq(sh->fids, 4096);
	ck_assert_str_eq(sh->guest_dir, "/data");
	ck_assert_str_eq(sh->tag, "lkvm-share1");
	ck_assert(sh->ro && sh->trans_set && sh->trans == VIRTIO_TRANS_MMIO);
	ck_assert_ptr_null(p9_share_get(&s, 2));
	ck_assert_ptr_null(p9_share_get(&s, -1));
	ck_assert_int_eq(p9_shares_on(&s, VIRTIO_TRANS_PCI, VIRTIO_TRANS_MMIO), 1);
	ck_assert_int_eq(p9_shares_on(&s, VIRTIO_TRANS_MMIO, VIRTIO_TRANS_MMIO), 2);
}
END_TEST

START_TEST(share_parse_errors)
{
	static const struct {
		const char *after; /* appended to the share directory */
		int ret;
		const char *why;
	} bad[] = {
		{ "/nope", -ENOENT, "No such file or directory" },
		{ "/../share/file", -ENOTDIR, "is not a directory" },
		{ ",rx", -EINVAL,
		  "unknown option 'rx' (want ro, trans=pci|mmio, fids=N, cache=auto|always|none|never)" },
		{ ",fids=8", -EINVAL, "fids" }, /* below the 16 a mount needs */
		{ ",trans=isa", -EINVAL, "unknown option 'trans=isa'" },
		{ ",rw", -EINVAL, "unknown option 'rw'" },
		{ ":data", -EINVAL, "guest directory 'data' is not an absolute path" },
	};
	struct p9_shares s = { 0 };
	char err[PATH_MAX + 256], arg[PATH_MAX];

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		snprintf(arg, sizeof(arg), "%s%s", t.share, bad[i].after);
		ck_assert_int_eq(p9_share_parse(&s, arg, err, sizeof(err)), bad[i].ret);
		ck_assert_msg(strstr(err, bad[i].why) && !strncmp(err, "--share '", 9), "%s", err);
		ck_assert_int_eq(s.nr, 0);
	}
	ck_assert_int_eq(p9_share_parse(&s, ":/data", err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "--share ':/data': no host directory (HOSTDIR[:GUESTDIR][,ro])");
	for (int i = 0; i < VIRTIO_9P_MAX_SHARES; i++)
		ck_assert_int_eq(p9_share_parse(&s, t.share, err, sizeof(err)), 0);
	ck_assert_int_eq(p9_share_parse(&s, t.share, err, sizeof(err)), -E2BIG);
	ck_assert_str_eq(err, "--share: at most 8 shares");
	ck_assert_str_eq(s.share[VIRTIO_9P_MAX_SHARES - 1].tag, "lkvm-share7");
}
END_TEST

/* The device list refuses a share it could not describe to the guest. */
START_TEST(add_checks_share)
{
	struct p9_share sh;

	vm_up();
	share_of(&sh, false);
	sh.tag[0] = '\0';
	ck_assert_int_eq(virtio_9p_add(vd.kvm, &sh), -EINVAL);
	share_of(&sh, false);
	memset(sh.tag, 'x', sizeof(sh.tag)); /* not terminated within VIRTIO_9P_TAG_MAX */
	ck_assert_int_eq(virtio_9p_add(vd.kvm, &sh), -EINVAL);
	share_of(&sh, false);
	strcpy(sh.host_dir, "relative");
	ck_assert_int_eq(virtio_9p_add(vd.kvm, &sh), -EINVAL);
	share_of(&sh, false);
	ck_assert_int_eq(virtio_9p_add(vd.kvm, &sh), 0);
	kvm_devs_exit(vd.kvm); /* never initialised: only the entry is freed */
	vd_vm_free();
}
END_TEST

/* lkvm run's options: --share fills the configuration (freed with it), and the shares count
 * towards the virtio-mmio bound. */
START_TEST(run_options)
{
	char ro[PATH_MAX], err[PATH_MAX + 256];
	char *argv[32] = { "run", "-k", "bzImage", "--share", t.share, "--share", ro };
	struct run_args a;
	int argc = 7;

	snprintf(ro, sizeof(ro), "%s:/ro,ro,trans=mmio", t.share);
	ck_assert_msg(kvm_run_parse(argc, argv, &a, stdout, err, sizeof(err)) == 0, "%s", err);
	ck_assert_ptr_nonnull(p9_share_get(a.cfg.shares, 1));
	ck_assert_ptr_null(p9_share_get(a.cfg.shares, 2));
	ck_assert_str_eq(p9_share_get(a.cfg.shares, 1)->guest_dir, "/ro");
	ck_assert(p9_share_get(a.cfg.shares, 1)->ro);
	kvm_config_free(&a.cfg);
	ck_assert_ptr_null(a.cfg.shares);

	/* None: no list at all, which every share function takes as empty. */
	ck_assert_int_eq(kvm_run_parse(3, argv, &a, stdout, err, sizeof(err)), 0);
	ck_assert_ptr_null(a.cfg.shares);
	ck_assert_ptr_null(p9_share_get(a.cfg.shares, 0));
	ck_assert_int_eq(p9_shares_on(a.cfg.shares, VIRTIO_TRANS_MMIO, VIRTIO_TRANS_MMIO), 0);
	kvm_config_free(&a.cfg);

	/* 8 shares on mmio, and the console and rng there too: 10 devices for 9 slots. */
	argv[3] = "--virtio-transport";
	argv[4] = "mmio";
	argv[5] = "--rng";
	argv[6] = "--console";
	argv[7] = "virtio";
	argc = 8;
	for (int i = 0; i < VIRTIO_9P_MAX_SHARES; i++) {
		argv[argc++] = "--share";
		argv[argc++] = t.share;
	}
	ck_assert_int_eq(kvm_run_parse(argc, argv, &a, stdout, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "10 virtio-mmio devices asked for"), "%s", err);
	argv[argc++] = "--share"; /* and a 9th share */
	argv[argc++] = t.share;
	ck_assert_int_eq(kvm_run_parse(argc, argv, &a, stdout, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "--share: at most 8 shares");
}
END_TEST

/*
 * The shares' descriptor caps fit the descriptor limit: whatever the limit, lkvm's reserve and
 * the number of shares, every share holding its whole cache, every open file it may (two
 * descriptors each) and one request's (HOST_FILES_REQ_FDS) stays within RLIMIT_NOFILE, or the
 * shares are refused. Issue 27: with the kernel's default hard limit 4096 and 6 shares, the
 * shares could hold 3072 descriptors beyond the guess of lkvm's own. Issue 39: with the
 * descriptors in hostfs's caps, fids cost memory alone.
 */
START_TEST(host_files_budget_fits)
{
	const u64 reserves[] = { 0, 40, 71, 300, 4000 };
	struct host_files_caps c;

	for (u32 n = 1; n <= VIRTIO_9P_MAX_SHARES + 1; n++)
		for (size_t r = 0; r < ARRAY_SIZE(reserves); r++)
			for (u64 nofile = 0; nofile <= 120000; nofile += 7) {
				int ret = host_files_budget(nofile, reserves[r], n, &c);
				u64 need = host_files_budget_need(reserves[r], n);
				u64 held = HOST_FILES_REQ_FDS + c.max_cached +
					   HOST_FILES_FDS_PER_OPEN * (u64)c.max_open;

				ck_assert_msg(ret || reserves[r] + n * held <= nofile,
					      "%u shares, reserve %llu, limit %llu: %u+%u each", n,
					      (unsigned long long)reserves[r],
					      (unsigned long long)nofile, c.max_cached, c.max_open);
				ck_assert(ret || (c.max_cached >= HOST_FILES_MIN_CACHED &&
						  c.max_open >= HOST_FILES_MIN_OPEN &&
						  c.max_cached <= HOSTFS_CACHED_DEFAULT &&
						  c.max_open <= HOSTFS_OPEN_DEFAULT));
				/* Refused exactly below what the refusal says is needed. */
				ck_assert_msg((ret == 0) == (nofile >= need),
					      "limit %llu, need %llu: %d",
					      (unsigned long long)nofile, (unsigned long long)need,
					      ret);
			}
	/* The case: soft 1024 raised to the hard 4096, lkvm's own 100, one share. */
	ck_assert_int_eq(host_files_budget(4096, 100, 1, &c), 0);
	ck_assert_uint_eq(c.max_open, (4096 - 100 - HOST_FILES_REQ_FDS) / 4);
	/* A large limit: the defaults, no more. */
	ck_assert_int_eq(host_files_budget(UINT64_MAX, 100, 9, &c), 0);
	ck_assert_uint_eq(c.max_cached, HOSTFS_CACHED_DEFAULT);
	ck_assert_uint_eq(c.max_open, HOSTFS_OPEN_DEFAULT);
	ck_assert_int_eq(host_files_budget(4096, 100, 0, &c), -EMFILE);
	ck_assert_int_eq(host_files_budget(100, 100, 1, &c), -EMFILE);
	ck_assert_uint_ge(host_files_want(1), host_files_budget_need(0, 1));
}
END_TEST

static Suite *virtio_9p_suite(void)
{
	Suite *s = suite_create("virtio_9p");
	TCase *dev = tcase_create("device"), *opt = tcase_create("options");
	TCase *bare = tcase_create("endless"), *sbx = tcase_create("sandbox");

	tcase_add_checked_fixture(dev, setup, teardown);
	tcase_add_test(dev, identity_and_tag);
	tcase_add_test(dev, session_over_queue);
	tcase_add_test(dev, readonly_share);
	tcase_add_test(dev, cap_warns_once);
	tcase_add_test(dev, malformed_message_gets_rlerror);
	tcase_add_test(dev, malformed_chain_then_reset);
	tcase_add_test(dev, pause_answers_nothing);
	tcase_add_test(dev, reset_while_paused);
	tcase_add_test(dev, restored_device_goes_on);
	tcase_add_test(dev, restore_refused_when_gone);
	tcase_add_test(bare, stop_and_pause_with_endless_driver);
	tcase_set_timeout(bare, 60); /* under the sanitizers */
	tcase_add_checked_fixture(opt, tree_up, tree_down);
	tcase_add_test(opt, share_parse);
	tcase_add_test(opt, share_parse_errors);
	tcase_add_test(opt, add_checks_share);
	tcase_add_test(opt, run_options);
	tcase_add_test(opt, host_files_budget_fits);
	LKVM_ADD_FORKED_EXIT_TEST(s, sbx, "test_virtio_9p", thread_in_sandbox, tree_up, tree_down);
	suite_add_tcase(s, dev);
	suite_add_tcase(s, bare);
	suite_add_tcase(s, opt);
	return s;
}

LKVM_CHECK_MAIN(virtio_9p_suite)

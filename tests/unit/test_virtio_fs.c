/* Unit tests of the virtio-fs device driven through its virtio-mmio registers without KVM (identity, config space, FUSE requests over the request queue, FORGET on hiprio, malformed chains, reset, pause, counters) and of --fs's choice of devices. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/fuse.h>
#include <linux/virtio_fs.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_mmio.h>
#include <linux/virtio_ring.h>

#include "check_main.h"
#include "stats_fmt.h"
#include "vdriver.h"
#include "wait.h"
#include "lkvm/kvm.h"
#include "lkvm/run.h"
#include "lkvm/snap.h"
#include "lkvm/stats.h"
#include "lkvm/virtio-9p.h"
#include "lkvm/virtio-fs.h"
#include "lkvm/virtio-mmio.h"
#include "lkvm/hostfs.h"

#define RAM_SIZE MiB(4)
#define QSIZE 64
#define QBASE0 0x10000ULL /* hiprio: desc; avail +0x1000; used +0x2000 */
#define QBASE1 0x20000ULL /* the request queue */
#define REQ_GPA 0x100000ULL
#define RESP_GPA 0x200000ULL
#define RESP_ROOM 4096u
#define WAIT_MS 10000
#define HELLO "hello, world\n"
#define TAG "lkvm-fs0"

static struct {
	char top[64], share[96];
	struct virtio_fs *f;
	u64 base;
	struct vd_queue q[VIRTIO_FS_QUEUES];
	u64 unique;
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

static void queue_up(int qi, u64 base)
{
	memset(gp(base), 0, 0x3000);
	wr(VIRTIO_MMIO_QUEUE_SEL, (u32)qi);
	wr(VIRTIO_MMIO_QUEUE_NUM, QSIZE);
	wr(VIRTIO_MMIO_QUEUE_DESC_LOW, (u32)base);
	wr(VIRTIO_MMIO_QUEUE_DESC_HIGH, 0);
	wr(VIRTIO_MMIO_QUEUE_AVAIL_LOW, (u32)(base + VD_AVAIL_OFF));
	wr(VIRTIO_MMIO_QUEUE_AVAIL_HIGH, 0);
	wr(VIRTIO_MMIO_QUEUE_USED_LOW, (u32)(base + VD_USED_OFF));
	wr(VIRTIO_MMIO_QUEUE_USED_HIGH, 0);
	wr(VIRTIO_MMIO_QUEUE_READY, 1);
	vd_queue_at(&t.q[qi], base, QSIZE);
}

/* What Linux's virtio_fs probe does up to DRIVER_OK: VERSION_1, hiprio and one request queue. */
static void driver_up(void)
{
	wr(VIRTIO_MMIO_STATUS, 0);
	wr(VIRTIO_MMIO_STATUS, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER);
	wr(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
	wr(VIRTIO_MMIO_DRIVER_FEATURES, 0);
	wr(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	wr(VIRTIO_MMIO_DRIVER_FEATURES, 1); /* VIRTIO_F_VERSION_1 */
	wr(VIRTIO_MMIO_STATUS, rd(VIRTIO_MMIO_STATUS) | VIRTIO_CONFIG_S_FEATURES_OK);
	ck_assert(rd(VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_FEATURES_OK);
	queue_up(0, QBASE0);
	queue_up(1, QBASE1);
	wr(VIRTIO_MMIO_STATUS, rd(VIRTIO_MMIO_STATUS) | VIRTIO_CONFIG_S_DRIVER_OK);
	ck_assert(rd(VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_DRIVER_OK);
}

/* ---- the driver: FUSE requests through the queues ---- */

/* A request: header (opcode, node, the next unique) and len bytes of arguments, at REQ_GPA. */
static u32 request(u32 opcode, u64 nodeid, const void *arg, u32 len)
{
	struct fuse_in_header h = {
		.len = (u32)sizeof(h) + len,
		.opcode = opcode,
		.unique = ++t.unique,
		.nodeid = nodeid,
	};

	memcpy(gp(REQ_GPA), &h, sizeof(h));
	memcpy(gp(REQ_GPA + sizeof(h)), arg, len);
	return h.len;
}

/* Post it on queue qi (room 0: no writable part) and notify; the used element, or NULL when
 * the device gave up on the chain (NEEDS_RESET) instead. */
static struct vring_used_elem *send(int qi, u32 len, u32 room)
{
	struct vd_queue *q = &t.q[qi];
	u16 want = (u16)(vd_used_idx(q) + 1);
	struct vd_buf b[2] = { { REQ_GPA, len, false }, { RESP_GPA, room, true } };

	memset(gp(RESP_GPA), 0xee, RESP_ROOM);
	vd_post(q, b, room ? 2 : 1);
	wr(VIRTIO_MMIO_QUEUE_NOTIFY, (u32)qi);
	ck_assert_msg(WAIT_UNTIL(WAIT_MS, vd_used_idx(q) == want || needs_reset()), "no answer");
	if (vd_used_idx(q) != want)
		return NULL;
	return &q->used->ring[(u16)(want - 1) % QSIZE];
}

/* A request that takes a reply: the reply's header checked (its length is the used length,
 * its unique the request's); its error returned, the body in *body. */
static int call(u32 opcode, u64 nodeid, const void *arg, u32 len, void **body)
{
	struct vring_used_elem *e = send(1, request(opcode, nodeid, arg, len), RESP_ROOM);
	struct fuse_out_header *h = gp(RESP_GPA);

	ck_assert_ptr_nonnull(e);
	ck_assert_uint_ge(e->len, sizeof(*h));
	ck_assert_uint_eq(h->len, e->len);
	ck_assert_uint_eq(h->unique, t.unique);
	if (body)
		*body = h + 1;
	return h->error;
}

static void fuse_init(void)
{
	struct fuse_init_in in = { .major = FUSE_KERNEL_VERSION, .minor = 31 };
	struct fuse_init_out *out;

	ck_assert_int_eq(call(FUSE_INIT, 0, &in, sizeof(in), (void **)&out), 0);
	ck_assert_uint_eq(out->major, FUSE_KERNEL_VERSION);
	ck_assert_uint_eq(out->minor, 31);
}

/* ---- the fixture ---- */

static void tree_up(void)
{
	char path[160];
	FILE *fp;

	memset(&t, 0, sizeof(t));
	strcpy(t.top, "/tmp/lkvm-vfs-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(t.top));
	snprintf(t.share, sizeof(t.share), "%s/share", t.top);
	ck_assert_int_eq(mkdir(t.share, 0755), 0);
	snprintf(path, sizeof(path), "%s/file", t.share);
	fp = fopen(path, "w");
	ck_assert_ptr_nonnull(fp);
	fputs(HELLO, fp);
	fclose(fp);
}

static void tree_down(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", t.top);
	ck_assert_int_eq(system(cmd), 0);
}

static void setup(void)
{
	struct virtio_mmio_slot slots[VIRTIO_MMIO_MAX_DEVS];
	struct p9_share sh = { .ro = false };
	struct virtio_fs_share fs = { .tag = TAG, .cache = FUSE_CACHE_AUTO };
	char err[256];

	tree_up();
	vd_vm_new(RAM_SIZE, 0);
	vd.kvm->cfg.virtio_trans = VIRTIO_TRANS_MMIO;
	strcpy(sh.host_dir, t.share);
	ck_assert_msg(virtio_fs_create(vd.kvm, &sh, &fs, false, &t.f, err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert_int_eq(virtio_mmio_slots(vd.kvm, slots), 1);
	t.base = slots[0].addr;
	ck_assert_int_eq(virtio_fs_run(t.f), 0);
}

static void teardown(void)
{
	virtio_fs_destroy(t.f);
	vd_vm_free();
	tree_down();
}

/* One counter of the device by its flat name (as lkvm stat carries it: fs0.GROUP.NAME). */
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
	struct stats_flat fl;
	struct one o = { .seen = false };

	snprintf(o.want, sizeof(o.want), "fs0.%s", group_name);
	stats_flat_init(&fl, one_put, &o);
	fl.v.device(&fl.v, "fs", 0);
	virtio_fs_stats(t.f, &fl.v);
	ck_assert_msg(o.seen, "no counter %s", o.want);
	return o.v;
}

static void visit(void *dev, struct stats_visitor *v)
{
	virtio_fs_stats(dev, v);
}

/* ---- tests ---- */

START_TEST(config_space)
{
	char tag[VIRTIO_FS_TAG_MAX + 1] = "";

	ck_assert_uint_eq(rd(VIRTIO_MMIO_DEVICE_ID), VIRTIO_ID_FS);
	/* hiprio and one request queue, no third. */
	for (u32 qi = 0; qi < 2; qi++) {
		wr(VIRTIO_MMIO_QUEUE_SEL, qi);
		ck_assert_uint_ge(rd(VIRTIO_MMIO_QUEUE_NUM_MAX), 128);
	}
	wr(VIRTIO_MMIO_QUEUE_SEL, 2);
	ck_assert_uint_eq(rd(VIRTIO_MMIO_QUEUE_NUM_MAX), 0);
	/* struct virtio_fs_config, a byte at a time as virtio_cread_bytes may. */
	for (u32 i = 0; i < VIRTIO_FS_TAG_MAX; i++)
		tag[i] = (char)acc(VIRTIO_MMIO_CONFIG + i, 1, false, 0);
	ck_assert_str_eq(tag, TAG);
	ck_assert_uint_eq(
		acc(VIRTIO_MMIO_CONFIG + offsetof(struct virtio_fs_config, num_request_queues), 4,
		    false, 0),
		1);
	acc(VIRTIO_MMIO_CONFIG, 4, true, 0x41414141); /* the driver cannot change it */
	ck_assert_uint_eq(acc(VIRTIO_MMIO_CONFIG, 1, false, 0), 'l');
}
END_TEST

/* INIT then LOOKUP through the request queue: replies in the writable part, the counters. */
START_TEST(init_then_lookup)
{
	struct fuse_entry_out *e;
	char *out;

	driver_up();
	fuse_init();
	ck_assert_int_eq(call(FUSE_LOOKUP, FUSE_ROOT_ID, "file", 5, (void **)&e), 0);
	ck_assert_uint_ne(e->nodeid, 0);
	ck_assert_uint_ne(e->nodeid, FUSE_ROOT_ID);
	ck_assert_uint_eq(e->attr.size, strlen(HELLO));
	ck_assert(S_ISREG(e->attr.mode));
	ck_assert_int_eq(call(FUSE_LOOKUP, FUSE_ROOT_ID, "nope", 5, NULL), -ENOENT);

	ck_assert_uint_eq(counter("req0.requests"), 3);
	ck_assert_uint_eq(counter("req0.errors"), 1);
	ck_assert_uint_eq(counter("hiprio.requests"), 0);
	ck_assert_uint_eq(counter("req0.malformed"), 0);
	ck_assert_uint_ge(counter("req0.kicks"), 1);
	out = stats_fmt("fs", t.f, visit, false);
	ck_assert_msg(strstr(out, "fs0:") && strstr(out, "req0 ") && strstr(out, "hiprio ") &&
			      strstr(out, "files: "),
		      "%s", out);
	free(out);
}
END_TEST

/* A FORGET on hiprio: the chain has no writable part and is given back with 0 bytes. */
START_TEST(forget_on_hiprio)
{
	struct fuse_forget_in fi = { .nlookup = 1 };
	struct fuse_entry_out *e;
	struct vring_used_elem *u;

	driver_up();
	fuse_init();
	ck_assert_int_eq(call(FUSE_LOOKUP, FUSE_ROOT_ID, "file", 5, (void **)&e), 0);
	u = send(0, request(FUSE_FORGET, e->nodeid, &fi, sizeof(fi)), 0);
	ck_assert_ptr_nonnull(u);
	ck_assert_uint_eq(u->len, 0);
	ck_assert(!needs_reset());
	ck_assert_uint_eq(counter("hiprio.requests"), 1);
	/* The session goes on. */
	ck_assert_int_eq(call(FUSE_LOOKUP, FUSE_ROOT_ID, "file", 5, NULL), 0);
}
END_TEST

/* A chain the server cannot read a request from: NEEDS_RESET, nothing more answered; lkvm goes
 * on, and after a reset a new session works. */
START_TEST(malformed_chain_then_reset)
{
	struct fuse_in_header *h;
	u16 before;
	u32 len;

	driver_up();
	fuse_init();
	/* The header's len claims more than the chain holds. */
	len = request(FUSE_GETATTR, FUSE_ROOT_ID, "", 0);
	h = gp(REQ_GPA);
	h->len = 4096;
	ck_assert_ptr_null(send(1, len, RESP_ROOM));
	ck_assert(needs_reset());
	ck_assert_uint_eq(counter("req0.malformed"), 1);
	before = vd_used_idx(&t.q[1]);
	vd_post(&t.q[1],
		(struct vd_buf[]){ { REQ_GPA, request(FUSE_GETATTR, 1, "", 0), false },
				   { RESP_GPA, RESP_ROOM, true } },
		2);
	wr(VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	ck_assert(HOLDS_FOR(100, vd_used_idx(&t.q[1]) == before));

	wr(VIRTIO_MMIO_STATUS, 0);
	driver_up();
	ck_assert(!needs_reset());
	fuse_init();
	ck_assert_int_eq(call(FUSE_LOOKUP, FUSE_ROOT_ID, "file", 5, NULL), 0);

	/* A buffer past the end of guest RAM: the walker refuses the chain. */
	vd_post(&t.q[1],
		(struct vd_buf[]){ { RAM_SIZE - 8, 64, false }, { RESP_GPA, RESP_ROOM, true } }, 2);
	wr(VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	ck_assert(WAIT_UNTIL(WAIT_MS, needs_reset()));
	ck_assert_uint_eq(counter("req0.malformed"), 2);
}
END_TEST

/* A device reset ends the session: the node looked up before is unknown to the next one. */
START_TEST(reset_forgets_session)
{
	struct fuse_getattr_in ga = { 0 };
	struct fuse_entry_out *e;
	u64 node;

	driver_up();
	fuse_init();
	ck_assert_int_eq(call(FUSE_LOOKUP, FUSE_ROOT_ID, "file", 5, (void **)&e), 0);
	node = e->nodeid;
	ck_assert_int_eq(call(FUSE_GETATTR, node, &ga, sizeof(ga), NULL), 0);
	ck_assert_uint_eq(counter("files.nodes"), 2);
	wr(VIRTIO_MMIO_STATUS, 0);
	ck_assert_uint_eq(counter("files.nodes"), 1);
	driver_up();
	fuse_init();
	ck_assert_int_ne(call(FUSE_GETATTR, node, &ga, sizeof(ga), NULL), 0);
	ck_assert_int_eq(call(FUSE_GETATTR, FUSE_ROOT_ID, &ga, sizeof(ga), NULL), 0);
}
END_TEST

/* A file the guest still knows (looked up, not forgotten) is removed, its node evicted from
 * the descriptor cache, and a new file made in the same directory, which the host may give the
 * freed inode number: the new file must come back with a reply and a node id of its own, never
 * the removed file's (hostfs tells them apart by their file handles; test_hostfs's
 * reused_inode_number_is_another_file checks that the host did reuse the number). */
START_TEST(reused_inode)
{
	struct fuse_create_in ci = { .flags = O_RDWR | O_CREAT, .mode = 0100644 };
	struct fuse_release_in ri = { 0 };
	char arg[64];
	int fails = 0, reused = 0;
	u64 held[64];
	u64 gens[64];
	int nheld = 0;

	driver_up();
	fuse_init();
	hostfs_set_caps(virtio_fs_hostfs(t.f), 0, 8, 8);
	for (int round = 0; round < 50; round++) {
		struct {
			struct fuse_entry_out e;
			struct fuse_open_out o;
		} * r;
		char name[16];
		int err;

		snprintf(name, sizeof(name), "c%d", round);
		memcpy(arg, &ci, sizeof(ci));
		strcpy(arg + sizeof(ci), name);
		err = call(FUSE_CREATE, FUSE_ROOT_ID, arg, (u32)(sizeof(ci) + strlen(name) + 1),
			   (void **)&r);
		if (err) {
			fprintf(stderr, "round %d: CREATE %s: %d\n", round, name, err);
			fails++;
			continue;
		}
		for (int k = 0; k < nheld; k++)
			if (held[k] == r->e.nodeid && gens[k] == r->e.generation) {
				fprintf(stderr,
					"round %d: %s got node %llu gen %llu of a removed file\n",
					round, name, (unsigned long long)r->e.nodeid,
					(unsigned long long)r->e.generation);
				reused++;
			}
		held[nheld] = r->e.nodeid;
		gens[nheld++] = r->e.generation;
		ri.fh = r->o.fh;
		ck_assert_int_eq(call(FUSE_RELEASE, r->e.nodeid, &ri, sizeof(ri), NULL), 0);
		ck_assert_int_eq(call(FUSE_UNLINK, FUSE_ROOT_ID, name, (u32)strlen(name) + 1, NULL),
				 0);
		/* Evict: look up other names (the share's "file") many times. */
		for (int i = 0; i < 12; i++) {
			char other[16];
			snprintf(other, sizeof(other), "o%d", i);
			memcpy(arg, &ci, sizeof(ci));
			strcpy(arg + sizeof(ci), other);
			if (call(FUSE_CREATE, FUSE_ROOT_ID, arg,
				 (u32)(sizeof(ci) + strlen(other) + 1), (void **)&r) == 0) {
				ri.fh = r->o.fh;
				call(FUSE_RELEASE, r->e.nodeid, &ri, sizeof(ri), NULL);
			}
		}
	}
	ck_assert_int_eq(fails, 0);
	ck_assert_int_eq(reused, 0);
}
END_TEST

/* Paused, the device answers nothing on either queue; after resume, what came is answered. */
START_TEST(pause_answers_nothing)
{
	struct fuse_forget_in fi = { .nlookup = 1 };
	struct fuse_getattr_in ga = { 0 };
	u16 before0, before1;

	driver_up();
	fuse_init();
	virtio_fs_quiesce(t.f);
	before0 = vd_used_idx(&t.q[0]);
	before1 = vd_used_idx(&t.q[1]);
	vd_post(&t.q[1],
		(struct vd_buf[]){ { REQ_GPA, request(FUSE_GETATTR, 1, &ga, sizeof(ga)), false },
				   { RESP_GPA, RESP_ROOM, true } },
		2);
	wr(VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	vd_post(&t.q[0],
		(struct vd_buf[]){
			{ REQ_GPA + 0x1000, sizeof(struct fuse_in_header) + sizeof(fi), false } },
		1);
	memcpy(gp(REQ_GPA + 0x1000), gp(REQ_GPA), sizeof(struct fuse_in_header));
	((struct fuse_in_header *)gp(REQ_GPA + 0x1000))->opcode = FUSE_FORGET;
	((struct fuse_in_header *)gp(REQ_GPA + 0x1000))->len =
		sizeof(struct fuse_in_header) + sizeof(fi);
	memcpy(gp(REQ_GPA + 0x1000 + sizeof(struct fuse_in_header)), &fi, sizeof(fi));
	wr(VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	ck_assert(
		HOLDS_FOR(200, vd_used_idx(&t.q[1]) == before1 && vd_used_idx(&t.q[0]) == before0));
	virtio_fs_resume(t.f);
	ck_assert(WAIT_UNTIL(WAIT_MS, vd_used_idx(&t.q[1]) == (u16)(before1 + 1) &&
					      vd_used_idx(&t.q[0]) == (u16)(before0 + 1)));
	ck_assert_int_eq(((struct fuse_out_header *)gp(RESP_GPA))->error, 0);
}
END_TEST

/* ---- snapshot ---- */

/* Device A with "file" looked up and a GETATTR of it posted and kicked while paused, saved into
 * b and destroyed (guest RAM stays as A left it); the node id in *node. */
static void a_saved(struct snap_rec_buf *b, u64 *node)
{
	struct fuse_getattr_in ga = { 0 };
	struct fuse_entry_out *e;
	char err[384] = "";

	driver_up();
	fuse_init();
	ck_assert_int_eq(call(FUSE_LOOKUP, FUSE_ROOT_ID, "file", 5, (void **)&e), 0);
	*node = e->nodeid;
	virtio_fs_quiesce(t.f);
	vd_post(&t.q[1],
		(struct vd_buf[]){
			{ REQ_GPA, request(FUSE_GETATTR, *node, &ga, sizeof(ga)), false },
			{ RESP_GPA, RESP_ROOM, true } },
		2);
	wr(VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	ck_assert(HOLDS_FOR(50, vd_used_idx(&t.q[1]) == 2)); /* INIT, LOOKUP */
	ck_assert_msg(virtio_fs_save(t.f, b, err, sizeof(err)) == 0, "%s", err);
	virtio_fs_destroy(t.f);
	t.f = NULL;
}

static void b_created(void)
{
	struct virtio_mmio_slot slots[VIRTIO_MMIO_MAX_DEVS];
	struct p9_share sh = { .ro = false };
	struct virtio_fs_share fs = { .tag = TAG, .cache = FUSE_CACHE_AUTO };
	char err[256];

	strcpy(sh.host_dir, t.share);
	ck_assert_msg(virtio_fs_create(vd.kvm, &sh, &fs, false, &t.f, err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert_int_eq(virtio_mmio_slots(vd.kvm, slots), 1);
	t.base = slots[0].addr;
}

/* Device B loads A's section on the same share: nothing moves before start; started, the
 * GETATTR posted before the snapshot is answered, and the node A looked up is B's too. */
START_TEST(restored_device_goes_on)
{
	struct snap_rec_buf b = { 0 };
	struct fuse_attr_out *a;
	char err[384] = "";
	u64 node;

	a_saved(&b, &node);
	b_created();
	ck_assert_msg(virtio_fs_load(t.f, b.buf, b.len, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_ge(counter("files.nodes"), 2);
	ck_assert_int_eq(virtio_fs_run(t.f), 0);
	ck_assert(HOLDS_FOR(50, vd_used_idx(&t.q[1]) == 2));
	ck_assert_int_eq(virtio_snap_start(virtio_fs_vdev(t.f)), 0);
	ck_assert(WAIT_UNTIL(WAIT_MS, vd_used_idx(&t.q[1]) == 3));
	a = (void *)((struct fuse_out_header *)gp(RESP_GPA) + 1);
	ck_assert_int_eq(((struct fuse_out_header *)gp(RESP_GPA))->error, 0);
	ck_assert_uint_eq(a->attr.size, strlen(HELLO));
	t.unique = 100;
	ck_assert_int_eq(call(FUSE_GETATTR, node, &(struct fuse_getattr_in){ 0 },
			      sizeof(struct fuse_getattr_in), NULL),
			 0);
	snap_rec_free(&b);
}
END_TEST

/* The file A looked up is gone when B loads: refused with a reason, B at power-on. */
START_TEST(restore_refused_when_gone)
{
	struct snap_rec_buf b = { 0 };
	char err[384] = "", path[160];
	u64 node;

	a_saved(&b, &node);
	snprintf(path, sizeof(path), "%s/file", t.share);
	ck_assert_int_eq(unlink(path), 0);
	b_created();
	ck_assert_int_eq(virtio_fs_load(t.f, b.buf, b.len, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "file"), "%s", err);
	ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), 0);
	snap_rec_free(&b);
}
END_TEST

/* ---- --fs: which devices serve each share ---- */

/* `lkvm run ARGS...` parsed (args ends with NULL, at most 30 of them). */
static int parse(struct run_args *a, const char *const *args)
{
	char *argv[32] = { "run" };
	char err[512];
	int argc = 0;

	for (; args[argc]; argc++) {
		ck_assert_int_lt(argc + 1, 32);
		argv[argc + 1] = (char *)args[argc];
	}
	return kvm_run_parse(argc + 1, argv, a, NULL, err, sizeof(err));
}

START_TEST(fs_option)
{
	struct run_args a;

	/* auto on pci: both devices for the share. */
	ck_assert_int_eq(parse(&a, (const char *[]){ "-k", "/dev/null", "--share", t.share, NULL }),
			 0);
	ck_assert(a.cfg.shares->share[0].vfs && !a.cfg.shares->share[0].no_9p);
	ck_assert_int_eq(a.cfg.shares->share[0].cache, FUSE_CACHE_AUTO);
	kvm_config_free(&a.cfg);
	ck_assert_int_eq(parse(&a, (const char *[]){ "-k", "/dev/null", "--fs", "9p", "--share",
						     t.share, NULL }),
			 0);
	ck_assert(!a.cfg.shares->share[0].vfs && !a.cfg.shares->share[0].no_9p);
	kvm_config_free(&a.cfg);
	ck_assert_int_eq(parse(&a, (const char *[]){ "-k", "/dev/null", "--fs", "virtiofs",
						     "--share", t.share, NULL }),
			 0);
	ck_assert(a.cfg.shares->share[0].vfs && a.cfg.shares->share[0].no_9p);
	kvm_config_free(&a.cfg);
	ck_assert_int_eq(parse(&a, (const char *[]){ "-k", "/dev/null", "--share",
						     "/tmp,cache=always", NULL }),
			 0);
	ck_assert_int_eq(a.cfg.shares->share[0].cache, FUSE_CACHE_ALWAYS);
	kvm_config_free(&a.cfg);
	ck_assert_int_eq(parse(&a, (const char *[]){ "-k", "/dev/null", "--share",
						     "/tmp,cache=never", NULL }),
			 0);
	ck_assert_int_eq(a.cfg.shares->share[0].cache, FUSE_CACHE_NONE);
	kvm_config_free(&a.cfg);
	ck_assert_int_ne(parse(&a, (const char *[]){ "-k", "/dev/null", "--fs", "nfs", NULL }), 0);
	ck_assert_int_ne(parse(&a, (const char *[]){ "-k", "/dev/null", "--share",
						     "/tmp,cache=sometimes", NULL }),
			 0);
}
END_TEST

/* auto on virtio-mmio: virtio-fs only while the bus has a slot, the rest stay 9p only. */
START_TEST(fs_auto_fits_mmio)
{
	const char *args[32] = { "-k", "/dev/null", "--virtio-transport", "mmio" };
	struct run_args a;
	int n = 4, vfs = 0, devs = 0;

	for (int i = 0; i < 8; i++) {
		args[n++] = "--share";
		args[n++] = t.share;
	}
	args[n] = NULL;
	ck_assert_int_eq(parse(&a, args), 0);
	for (int i = 0; i < a.cfg.shares->nr; i++) {
		vfs += a.cfg.shares->share[i].vfs;
		devs += !a.cfg.shares->share[i].no_9p + a.cfg.shares->share[i].vfs;
	}
	/* 8 shares over 9p, and the one free slot for the first share's virtio-fs. */
	ck_assert_int_eq(vfs, 1);
	ck_assert(a.cfg.shares->share[0].vfs);
	ck_assert_int_eq(devs, VIRTIO_MMIO_MAX_DEVS);
	kvm_config_free(&a.cfg);
}
END_TEST

static Suite *virtio_fs_suite(void)
{
	Suite *s = suite_create("virtio_fs");
	TCase *dev = tcase_create("device"), *opt = tcase_create("options");

	tcase_add_checked_fixture(dev, setup, teardown);
	tcase_add_test(dev, config_space);
	tcase_add_test(dev, init_then_lookup);
	tcase_add_test(dev, forget_on_hiprio);
	tcase_add_test(dev, malformed_chain_then_reset);
	tcase_add_test(dev, reset_forgets_session);
	tcase_add_test(dev, reused_inode);
	tcase_add_test(dev, pause_answers_nothing);
	tcase_add_test(dev, restored_device_goes_on);
	tcase_add_test(dev, restore_refused_when_gone);
	tcase_add_checked_fixture(opt, tree_up, tree_down);
	tcase_add_test(opt, fs_option);
	tcase_add_test(opt, fs_auto_fits_mmio);
	suite_add_tcase(s, dev);
	suite_add_tcase(s, opt);
	return s;
}

LKVM_CHECK_MAIN(virtio_fs_suite)

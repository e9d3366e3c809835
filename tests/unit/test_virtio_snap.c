/* Unit tests of virtio devices in a snapshot (virtio/snap.c and the devices' records): a device driven to a state, saved, a new one loaded from it goes on as the first would; hostile sections refused. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <linux/virtio_blk.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <linux/virtio_mmio.h>
#include <linux/virtio_pci.h>
#include <linux/virtio_ring.h>

#include "check_main.h"
#include "vdriver.h"
#include "wait.h"
#include "lkvm/kvm.h"
#include "lkvm/pci.h"
#include "lkvm/snap.h"
#include "lkvm/virtio-blk.h"
#include "lkvm/virtio-console.h"
#include "lkvm/virtio-mmio.h"
#include "lkvm/virtio-pci.h"

#define RAM_SIZE MiB(8)
#define QSIZE 16
#define QBASE(i) (0x10000ULL * ((u64)(i) + 1))
#define WAIT_MS 10000
#define VERSION_1 (1ULL << VIRTIO_F_VERSION_1)

/* ---- the rng on virtio-mmio, driven through its registers ---- */

static u32 mmio(u32 off, bool is_write, u32 v)
{
	u8 d[4];

	memcpy(d, &v, 4);
	ck_assert(io_bus_dispatch(&vd.kvm->mmio, NULL, VIRTIO_MMIO_BASE + off, d, 4, is_write));
	memcpy(&v, d, 4);
	return v;
}

static u32 rd(u32 off)
{
	return mmio(off, false, 0);
}

static void wr(u32 off, u32 v)
{
	mmio(off, true, v);
}

/* A driver's bring-up of queue 0 (QSIZE entries at QBASE(0)) up to DRIVER_OK. */
static void mmio_driver_up(struct vd_queue *dq)
{
	wr(VIRTIO_MMIO_STATUS, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER);
	wr(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	wr(VIRTIO_MMIO_DRIVER_FEATURES, (u32)(VERSION_1 >> 32));
	wr(VIRTIO_MMIO_STATUS, rd(VIRTIO_MMIO_STATUS) | VIRTIO_CONFIG_S_FEATURES_OK);
	ck_assert(rd(VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_FEATURES_OK);
	wr(VIRTIO_MMIO_QUEUE_SEL, 0);
	wr(VIRTIO_MMIO_QUEUE_NUM, QSIZE);
	wr(VIRTIO_MMIO_QUEUE_DESC_LOW, (u32)QBASE(0));
	wr(VIRTIO_MMIO_QUEUE_AVAIL_LOW, (u32)(QBASE(0) + VD_AVAIL_OFF));
	wr(VIRTIO_MMIO_QUEUE_USED_LOW, (u32)(QBASE(0) + VD_USED_OFF));
	wr(VIRTIO_MMIO_QUEUE_READY, 1);
	wr(VIRTIO_MMIO_STATUS, rd(VIRTIO_MMIO_STATUS) | VIRTIO_CONFIG_S_DRIVER_OK);
	vd_queue_at(dq, QBASE(0), QSIZE);
}

/* The registers a driver can read back. */
struct regs {
	u32 status, ready, desc, avail, used, isr, gen;
};

static struct regs regs_now(void)
{
	wr(VIRTIO_MMIO_QUEUE_SEL, 0);
	return (struct regs){ rd(VIRTIO_MMIO_STATUS),		rd(VIRTIO_MMIO_QUEUE_READY),
			      rd(VIRTIO_MMIO_QUEUE_DESC_LOW),	rd(VIRTIO_MMIO_QUEUE_AVAIL_LOW),
			      rd(VIRTIO_MMIO_QUEUE_USED_LOW),	rd(VIRTIO_MMIO_INTERRUPT_STATUS),
			      rd(VIRTIO_MMIO_CONFIG_GENERATION) };
}

static struct virtio_rng *rng_new(void)
{
	struct virtio_rng *r;

	ck_assert_int_eq(virtio_rng_create(vd.kvm, VIRTIO_TRANS_MMIO, false, &r), 0);
	return r;
}

/* Device A: three requests served and acknowledged, a fourth posted while paused (its kick
 * lost with the old process); saved into b. */
static void rng_saved(struct snap_rec_buf *b, struct vd_queue *dq, struct regs *before)
{
	struct virtio_rng *a = rng_new();
	char err[256] = "";

	mmio_driver_up(dq);
	for (int i = 0; i < 3; i++) {
		vd_post_desc(dq, 0x100000 + 0x100 * (u64)i, 32, VRING_DESC_F_WRITE);
		wr(VIRTIO_MMIO_QUEUE_NOTIFY, 0);
		ck_assert(vd_wait_used(dq, (u16)(i + 1), WAIT_MS));
	}
	ck_assert_uint_eq(rd(VIRTIO_MMIO_INTERRUPT_STATUS), 1);
	wr(VIRTIO_MMIO_INTERRUPT_ACK, 1);
	virtio_rng_quiesce(a);
	vd_post_desc(dq, 0x100400, 32, VRING_DESC_F_WRITE);
	wr(VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	*before = regs_now();
	ck_assert_int_eq(virtio_snap_save(virtio_rng_vdev(a), b, err, sizeof(err)), 0);
	virtio_rng_destroy(a); /* frees slot 0 for B, leaves guest RAM as it is */
}

START_TEST(test_rng_mmio_restore)
{
	struct snap_rec_buf b = { 0 };
	struct vd_queue dq;
	struct regs before, after;
	struct virtio_rng *r;
	char err[256] = "";

	vd_vm_new(RAM_SIZE, 0);
	rng_saved(&b, &dq, &before);
	r = rng_new();
	ck_assert_msg(virtio_snap_load(virtio_rng_vdev(r), b.buf, b.len, err, sizeof(err)) == 0,
		      "%s", err);
	after = regs_now();
	ck_assert_mem_eq(&after, &before, sizeof(before));
	ck_assert_uint_eq(before.status & VIRTIO_CONFIG_S_DRIVER_OK, VIRTIO_CONFIG_S_DRIVER_OK);
	ck_assert_uint_eq(virtio_rng_vdev(r)->q[0].vq.last_avail, 3);
	ck_assert_uint_eq(virtio_rng_vdev(r)->q[0].vq.used_idx, 3);
	/* Nothing moves before start (the vCPUs' and irqchip's state is not back yet). */
	ck_assert(HOLDS_FOR(50, vd_used_idx(&dq) == 3));
	/* Started: the request posted before the snapshot completes with the next index, and the
	 * interrupt comes as it would. */
	ck_assert_int_eq(virtio_snap_start(virtio_rng_vdev(r)), 0);
	ck_assert(vd_wait_used(&dq, 4, WAIT_MS));
	ck_assert_uint_eq(dq.used->ring[3].id, 3);
	ck_assert_uint_eq(dq.used->ring[3].len, 32);
	ck_assert(WAIT_UNTIL(WAIT_MS, rd(VIRTIO_MMIO_INTERRUPT_STATUS) == 1));
	/* And the next one, kicked through the register. */
	vd_post_desc(&dq, 0x100500, 8, VRING_DESC_F_WRITE);
	wr(VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	ck_assert(vd_wait_used(&dq, 5, WAIT_MS));
	virtio_rng_destroy(r);
	snap_rec_free(&b);
	vd_vm_free();
}
END_TEST

/* ---- hostile sections ---- */

/* The layouts of virtio/snap.c's and virtio/mmio.c's records, to break their fields. */
struct core_rec {
	u64 host_features, features, driver_features;
	u32 status, isr, dfselect, gfselect, queue_select, nr_queues;
	u8 config_generation, needs_reset_logged, pad[6];
};
struct queue_rec {
	u64 desc, driver, device;
	u16 size, max_size, last_avail, used_idx, signalled_used;
	u8 enabled, ready, broken, signalled_used_valid, pad[2];
};
struct mmio_rec {
	u64 base;
	u32 irq, slot;
};

/* How to break a good section: its record number `which` dropped, or `delta` bytes shorter
 * (> 0) or longer (< 0); and/or the first record of `tag` passed to `edit`. */
struct mutation {
	int which;
	bool drop;
	int delta; /* bytes taken off (> 0) or added (< 0) */
	u16 tag;   /* edit: the first record of this tag */
	void (*edit)(void *data);
};

static void mutate(const struct snap_rec_buf *in, struct snap_rec_buf *out,
		   const struct mutation *m)
{
	struct snap_rec_iter it = { in->buf, in->len };
	const void *data;
	u8 buf[1024];
	u32 len;
	u16 tag;

	for (int i = 0; snap_rec_next(&it, &tag, &data, &len) == 1; i++) {
		ck_assert_uint_le(len + 1, sizeof(buf));
		memcpy(buf, data, len);
		buf[len] = 0xa5;
		if (m->edit && tag == m->tag)
			m->edit(buf);
		if (i != m->which)
			snap_rec_put(out, tag, buf, len);
		else if (!m->drop)
			snap_rec_put(out, tag, buf, len - (u32)m->delta);
	}
	ck_assert_int_eq(out->err, 0);
}

/* A new rng B loads sec: want 0, or -EINVAL with a one-line reason and B left at power-on
 * (nothing started by virtio_snap_start). */
static void load_as(const void *sec, size_t len, int want, const char *what)
{
	struct virtio_rng *r = rng_new();
	char err[256] = "";
	int ret = virtio_snap_load(virtio_rng_vdev(r), sec, len, err, sizeof(err));

	ck_assert_msg(ret == want, "%s: load returned %d (%s)", what, ret, err);
	if (want < 0) {
		ck_assert_msg(*err && !strchr(err, '\n'), "%s: no one-line reason", what);
		ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), 0);
		ck_assert(!virtio_rng_vdev(r)->q[0].vq.ready);
	}
	ck_assert_int_eq(virtio_snap_start(virtio_rng_vdev(r)), 0);
	virtio_rng_destroy(r);
}

static void refused(const struct snap_rec_buf *good, const struct mutation *m, const char *what)
{
	struct snap_rec_buf bad = { 0 };

	mutate(good, &bad, m);
	load_as(bad.buf, bad.len, -EINVAL, what);
	snap_rec_free(&bad);
}

static void q_size3(void *p)
{
	((struct queue_rec *)p)->size = 3;
}
static void q_size128(void *p)
{
	((struct queue_rec *)p)->size = 128;
}
static void q_in_flight(void *p)
{
	((struct queue_rec *)p)->last_avail += QSIZE + 1;
}
static void q_outside(void *p)
{
	((struct queue_rec *)p)->device = RAM_SIZE - 8;
}
static void q_enabled2(void *p)
{
	((struct queue_rec *)p)->enabled = 2;
}
static void q_not_ready(void *p)
{
	((struct queue_rec *)p)->ready = 0;
}
static void c_no_features_ok(void *p)
{
	((struct core_rec *)p)->status &= ~VIRTIO_CONFIG_S_FEATURES_OK;
}
static void c_status(void *p)
{
	((struct core_rec *)p)->status |= 0x100;
}
static void c_isr(void *p)
{
	((struct core_rec *)p)->isr = 4;
}
static void c_queues(void *p)
{
	((struct core_rec *)p)->nr_queues = 2;
}
static void c_features(void *p)
{
	((struct core_rec *)p)->features |= 1ULL << 40;
}
static void c_host(void *p)
{
	((struct core_rec *)p)->host_features ^= 1;
}
static void m_slot(void *p)
{
	((struct mmio_rec *)p)->slot = 5;
}
static void m_base(void *p)
{
	((struct mmio_rec *)p)->base += 0x200;
}

/* Each field edit alone makes a state the device cannot have been in. */
static const struct mutation edits[] = {
	{ -1, false, 0, VIRTIO_SNAP_TAG_QUEUE, q_size3 },
	{ -1, false, 0, VIRTIO_SNAP_TAG_QUEUE, q_size128 },
	{ -1, false, 0, VIRTIO_SNAP_TAG_QUEUE, q_in_flight },
	{ -1, false, 0, VIRTIO_SNAP_TAG_QUEUE, q_outside },
	{ -1, false, 0, VIRTIO_SNAP_TAG_QUEUE, q_enabled2 },
	{ -1, false, 0, VIRTIO_SNAP_TAG_QUEUE, q_not_ready },
	{ -1, false, 0, VIRTIO_SNAP_TAG_CORE, c_no_features_ok },
	{ -1, false, 0, VIRTIO_SNAP_TAG_CORE, c_status },
	{ -1, false, 0, VIRTIO_SNAP_TAG_CORE, c_isr },
	{ -1, false, 0, VIRTIO_SNAP_TAG_CORE, c_queues },
	{ -1, false, 0, VIRTIO_SNAP_TAG_CORE, c_features },
	{ -1, false, 0, VIRTIO_SNAP_TAG_CORE, c_host },
	{ -1, false, 0, VIRTIO_SNAP_TAG_TRANSPORT, m_slot },
	{ -1, false, 0, VIRTIO_SNAP_TAG_TRANSPORT, m_base },
};

START_TEST(test_hostile)
{
	struct snap_rec_buf good = { 0 }, extra = { 0 };
	struct snap_rec_iter it;
	struct vd_queue dq;
	struct regs before;
	const void *data;
	int nrec = 0;
	struct queue_rec q1 = { .size = QSIZE, .max_size = 64 };
	u32 len;
	u16 tag;

	vd_vm_new(RAM_SIZE, 0);
	rng_saved(&good, &dq, &before);
	it = (struct snap_rec_iter){ good.buf, good.len };
	while (snap_rec_next(&it, &tag, &data, &len) == 1)
		nrec++;
	ck_assert_int_eq(nrec, 3); /* core, queue 0, transport: each one required */
	for (int i = 0; i < nrec; i++) {
		char what[64];

		snprintf(what, sizeof(what), "record %d dropped", i);
		refused(&good, &(struct mutation){ .which = i, .drop = true }, what);
		snprintf(what, sizeof(what), "record %d short", i);
		refused(&good, &(struct mutation){ .which = i, .delta = 1 }, what);
		snprintf(what, sizeof(what), "record %d long", i);
		refused(&good, &(struct mutation){ .which = i, .delta = -1 }, what);
	}
	for (size_t i = 0; i < ARRAY_SIZE(edits); i++) {
		char what[64];

		snprintf(what, sizeof(what), "edit %zu", i);
		refused(&good, &edits[i], what);
	}
	/* A queue this device does not have. */
	mutate(&good, &extra, &(struct mutation){ .which = -1 });
	snap_rec_put(&extra, VIRTIO_SNAP_TAG_QUEUE + 1, &q1, sizeof(q1));
	refused(&extra, &(struct mutation){ .which = -1 }, "extra queue");
	/* A section cut in the middle of the last record's header, or of its data. */
	load_as(extra.buf, good.len + 3, -EINVAL, "cut header");
	load_as(extra.buf, extra.len - 1, -EINVAL, "cut data");
	/* The good one still loads after all that. */
	load_as(good.buf, good.len, 0, "good");
	snap_rec_free(&extra);
	snap_rec_free(&good);
	vd_vm_free();
}
END_TEST

/* ---- the console (no transport): output cut short by the pause, input waiting ---- */

#define CHAIN_DESCS 64
#define CHAIN_PIECE KiB(64) /* each descriptor aliases the same 64 KiB of 'z' */

static struct {
	struct virtio_console *c;
	atomic_bool hold, held; /* hold: the next output waits for a pause (held: it came) */
	atomic_ullong bytes, zs;
} o;

static void out_hook(struct kvm *kvm, const u8 *buf, size_t len)
{
	if (atomic_load(&o.hold) && !atomic_exchange(&o.held, true))
		WAIT_UNTIL(WAIT_MS, virtio_console_stopping(o.c));
	for (size_t i = 0; i < len; i++)
		if (buf[i] == 'z')
			atomic_fetch_add(&o.zs, 1);
	atomic_fetch_add(&o.bytes, len);
}

static struct virtio_console *console_new(void)
{
	struct virtio_console *c;

	ck_assert_int_eq(virtio_console_create(vd.kvm, VIRTIO_TRANS_PCI, out_hook, NULL, true, &c),
			 0);
	o.c = c;
	return c;
}

/* The kick and interrupt eventfds a transport would have made at init. */
static void fds_new(struct virtio_device *vdev, struct vd_fds *f, int n)
{
	for (int i = 0; i < n; i++) {
		vdev->q[i].kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		vdev->q[i].irq_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	}
	vd_fds_save(f, vdev, n);
}

static u64 irqs_sent(int fd)
{
	u64 v = 0;

	return read(fd, &v, sizeof(v)) == sizeof(v) ? v : 0;
}

/* A: "hello " written, "ls" received; then a 4 MiB chain whose first piece is being written
 * when the pause comes, and "typed" input with no buffer for it. Saved into b. */
static void console_saved(struct snap_rec_buf *b, struct vd_queue *dq)
{
	struct virtio_console *a = console_new();
	struct virtio_device *v = virtio_console_vdev(a);
	char err[256] = "";
	struct vd_fds fds;

	for (int i = 0; i < 2; i++)
		vd_queue_up(v, i, &dq[i], QBASE(i), QSIZE, false);
	v->driver_features = VERSION_1; /* what a driver negotiates */
	atomic_store(&v->features, VERSION_1);
	vd_driver_ok(v);
	memcpy(gp(0x100000), "hello ", 6);
	vd_post_desc(&dq[1], 0x100000, 6, 0);
	vd_kick(v, 1);
	ck_assert(vd_wait_used(&dq[1], 1, WAIT_MS));
	ck_assert_uint_eq(virtio_console_receive(a, (const u8 *)"ls", 2), 2);
	vd_post_desc(&dq[0], 0x110000, 16, VRING_DESC_F_WRITE);
	vd_kick(v, 0);
	ck_assert(vd_wait_used(&dq[0], 1, WAIT_MS));

	memset(gp(0x200000), 'z', CHAIN_PIECE);
	for (int i = 0; i < CHAIN_DESCS; i++)
		((struct vring_desc *)gp(0x1c0000))[i] = (struct vring_desc){
			.addr = 0x200000,
			.len = CHAIN_PIECE,
			.flags = i + 1 < CHAIN_DESCS ? VRING_DESC_F_NEXT : 0,
			.next = (u16)(i + 1),
		};
	atomic_store(&o.hold, true);
	vd_post_desc(&dq[1], 0x1c0000, 16 * CHAIN_DESCS, VRING_DESC_F_INDIRECT);
	vd_kick(v, 1);
	ck_assert(WAIT_UNTIL(WAIT_MS, atomic_load(&o.held)));
	virtio_console_quiesce(a);
	ck_assert_uint_eq(virtio_console_receive(a, (const u8 *)"typed", 5), 5);
	ck_assert_int_eq(virtio_console_save(a, b, err, sizeof(err)), 0);
	ck_assert_uint_lt(atomic_load(&o.bytes), 6 + CHAIN_DESCS * CHAIN_PIECE);
	vd_fds_save(&fds, v, 2);
	virtio_console_destroy(a);
	vd_fds_close(&fds);
}

/* B goes on where A stopped: the rest of the chain, exactly (no byte lost or twice), used with
 * the next index and an interrupt; the typed input reaches the next receive buffer. */
START_TEST(test_console_restore)
{
	struct snap_rec_buf b = { 0 };
	struct vd_queue dq[2];
	struct virtio_console *c;
	struct virtio_device *v;
	char err[256] = "";
	struct vd_fds fds;

	vd_vm_new(RAM_SIZE, 0);
	memset(&o, 0, sizeof(o));
	console_saved(&b, dq);
	c = console_new();
	v = virtio_console_vdev(c);
	fds_new(v, &fds, 2);
	ck_assert_msg(virtio_console_load(c, b.buf, b.len, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(v->q[1].vq.last_avail, 2);
	ck_assert_uint_eq(v->q[1].vq.used_idx, 1);
	virtio_console_start(c);
	ck_assert(vd_wait_used(&dq[1], 2, WAIT_MS));
	ck_assert_uint_eq(atomic_load(&o.bytes), 6 + CHAIN_DESCS * CHAIN_PIECE);
	ck_assert_uint_eq(atomic_load(&o.zs), CHAIN_DESCS * CHAIN_PIECE);
	ck_assert_uint_eq(dq[1].used->ring[1].id, 1);
	ck_assert(WAIT_UNTIL(WAIT_MS, irqs_sent(fds.irq[1]) > 0));
	vd_post_desc(&dq[0], 0x120000, 16, VRING_DESC_F_WRITE);
	vd_kick(v, 0);
	ck_assert(vd_wait_used(&dq[0], 2, WAIT_MS));
	ck_assert_uint_eq(dq[0].used->ring[1].len, 5);
	ck_assert_mem_eq(gp(0x120000), "typed", 5);
	virtio_console_destroy(c);
	vd_fds_close(&fds);
	snap_rec_free(&b);
	vd_vm_free();
}
END_TEST

/* Each record of the console's section (its own and the core's) dropped, shorter or longer:
 * refused, and the console left reset. */
START_TEST(test_console_hostile)
{
	struct snap_rec_buf good = { 0 };
	struct vd_queue dq[2];
	struct snap_rec_iter it;
	const void *data;
	u32 len;
	u16 tag;
	int i = 0;

	vd_vm_new(RAM_SIZE, 0);
	memset(&o, 0, sizeof(o));
	console_saved(&good, dq);
	it = (struct snap_rec_iter){ good.buf, good.len };
	while (snap_rec_next(&it, &tag, &data, &len) == 1) {
		for (int delta = -1; delta <= 1; delta++) {
			struct snap_rec_buf bad = { 0 };
			struct virtio_console *c = console_new();
			char err[256] = "";
			struct vd_fds fds;
			int ret;

			fds_new(virtio_console_vdev(c), &fds, 2);
			mutate(&good, &bad,
			       &(struct mutation){ .which = i, .drop = !delta, .delta = delta });
			ret = virtio_console_load(c, bad.buf, bad.len, err, sizeof(err));
			ck_assert_msg(ret == -EINVAL, "record %d (tag %u) delta %d: %d", i, tag,
				      delta, ret);
			ck_assert_uint_eq(atomic_load(&virtio_console_vdev(c)->status), 0);
			virtio_console_start(c);
			virtio_console_destroy(c);
			vd_fds_close(&fds);
			snap_rec_free(&bad);
		}
		i++;
	}
	snap_rec_free(&good);
	vd_vm_free();
}
END_TEST

/* ---- a named port: its control channel ---- */

#define MULTIPORT (1ULL << 1) /* VIRTIO_CONSOLE_F_MULTIPORT */
#define CON_TAG_CTL (VIRTIO_SNAP_TAG_DEV + 2)

static struct virtio_console *port_new(void)
{
	struct virtio_console *c;

	ck_assert_int_eq(virtio_console_create(vd.kvm, VIRTIO_TRANS_PCI, out_hook, "lkvm.stdout",
					       true, &c),
			 0);
	o.c = c;
	return c;
}

/* A driver's control message (little-endian id, event, value) at gpa, on the control
 * transmitq (3), kicked. */
static void ctl_msg(struct virtio_device *v, struct vd_queue *dq, u64 gpa, u32 id, u16 ev, u16 val)
{
	u8 *m = gp(gpa);

	memcpy(m, &id, 4);
	memcpy(m + 4, &ev, 2);
	memcpy(m + 6, &val, 2);
	vd_post_desc(&dq[3], gpa, 8, 0);
	vd_kick(v, 3);
}

/* A: its driver said DEVICE_READY, took PORT_ADD, said PORT_READY and opened the port; the
 * PORT_NAME and PORT_OPEN it is owed wait for a control buffer. Saved into b. */
static void port_saved(struct snap_rec_buf *b, struct vd_queue *dq)
{
	struct virtio_console *a = port_new();
	struct virtio_device *v = virtio_console_vdev(a);
	char err[256] = "";
	struct vd_fds fds;

	for (int i = 0; i < 4; i++)
		vd_queue_up(v, i, &dq[i], QBASE(i), QSIZE, false);
	v->driver_features = VERSION_1 | MULTIPORT;
	atomic_store(&v->features, VERSION_1 | MULTIPORT);
	vd_driver_ok(v);
	vd_post_desc(&dq[2], 0x130000, 64, VRING_DESC_F_WRITE);
	vd_kick(v, 2);
	ctl_msg(v, dq, 0x140000, ~0u, 0, 1); /* DEVICE_READY */
	ck_assert(vd_wait_used(&dq[2], 1, WAIT_MS));
	ctl_msg(v, dq, 0x140100, 0, 3, 1); /* PORT_READY */
	ctl_msg(v, dq, 0x140200, 0, 6, 1); /* PORT_OPEN */
	ck_assert(vd_wait_used(&dq[3], 3, WAIT_MS));
	virtio_console_quiesce(a);
	ck_assert_int_eq(virtio_console_save(a, b, err, sizeof(err)), 0);
	vd_fds_save(&fds, v, 4);
	virtio_console_destroy(a);
	vd_fds_close(&fds);
}

/* B sends what A owed, once the driver gives it buffers: the name, then the port open. */
START_TEST(test_port_restore)
{
	struct snap_rec_buf b = { 0 };
	struct vd_queue dq[4];
	struct virtio_console *c;
	struct virtio_device *v;
	char err[256] = "";
	struct vd_fds fds;
	const u8 *m;

	vd_vm_new(RAM_SIZE, 0);
	memset(&o, 0, sizeof(o));
	port_saved(&b, dq);
	c = port_new();
	v = virtio_console_vdev(c);
	fds_new(v, &fds, 4);
	ck_assert_msg(virtio_console_load(c, b.buf, b.len, err, sizeof(err)) == 0, "%s", err);
	virtio_console_start(c);
	vd_post_desc(&dq[2], 0x150000, 64, VRING_DESC_F_WRITE);
	vd_post_desc(&dq[2], 0x150100, 64, VRING_DESC_F_WRITE);
	vd_kick(v, 2);
	ck_assert(vd_wait_used(&dq[2], 3, WAIT_MS));
	m = gp(0x150000);
	ck_assert_uint_eq(dq[2].used->ring[1].len, 8 + strlen("lkvm.stdout"));
	ck_assert_uint_eq(m[4], 7); /* PORT_NAME */
	ck_assert_mem_eq(m + 8, "lkvm.stdout", strlen("lkvm.stdout"));
	m = gp(0x150100);
	ck_assert_uint_eq(dq[2].used->ring[2].len, 8);
	ck_assert_uint_eq(m[4], 6); /* PORT_OPEN 1 */
	ck_assert_uint_eq(m[6], 1);
	virtio_console_destroy(c);
	vd_fds_close(&fds);
	snap_rec_free(&b);
	vd_vm_free();
}
END_TEST

static void ctl_pend_bad(void *p)
{
	((u8 *)p)[0] = 0x80;
}

static void ctl_open_bad(void *p)
{
	((u8 *)p)[1] = 2;
}

/* A named port's section: each record dropped, shorter or longer, and its control record's
 * fields out of range: refused, the port left reset. */
START_TEST(test_port_hostile)
{
	static void (*const ctl_edits[])(void *) = { ctl_pend_bad, ctl_open_bad };
	struct snap_rec_buf good = { 0 };
	struct vd_queue dq[4];
	int nrec = 0;

	vd_vm_new(RAM_SIZE, 0);
	memset(&o, 0, sizeof(o));
	port_saved(&good, dq);
	for (struct snap_rec_iter it = { good.buf, good.len };
	     snap_rec_next(&it, &(u16){ 0 }, &(const void *){ NULL }, &(u32){ 0 }) == 1;)
		nrec++;
	for (int i = 0; i < 3 * nrec + 2; i++) {
		struct mutation m = { .which = i / 3, .drop = i % 3 == 1, .delta = i % 3 - 1 };
		struct snap_rec_buf bad = { 0 };
		struct virtio_console *c = port_new();
		char err[256] = "";
		struct vd_fds fds;
		int ret;

		if (i >= 3 * nrec)
			m = (struct mutation){ .which = -1,
					       .tag = CON_TAG_CTL,
					       .edit = ctl_edits[i - 3 * nrec] };
		fds_new(virtio_console_vdev(c), &fds, 4);
		mutate(&good, &bad, &m);
		ret = virtio_console_load(c, bad.buf, bad.len, err, sizeof(err));
		ck_assert_msg(ret == -EINVAL && *err, "mutation %d: %d", i, ret);
		ck_assert_uint_eq(atomic_load(&virtio_console_vdev(c)->status), 0);
		virtio_console_start(c);
		virtio_console_destroy(c);
		vd_fds_close(&fds);
		snap_rec_free(&bad);
	}
	snap_rec_free(&good);
	vd_vm_free();
}
END_TEST

/* ---- the disk: its image checked, its queue going on ---- */

/* An image of `sectors` sectors in /tmp, its path in path (the caller unlinks it). */
static int image_new(u64 sectors, char *path)
{
	int fd;

	strcpy(path, "/tmp/lkvm-snap-blk-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)(sectors * 512)), 0);
	return fd;
}

static struct virtio_blk *disk_new(const char *path)
{
	struct blk_opts opts = { .io = BLK_IO_SYNC, .no_direct = true };
	struct virtio_blk *b;
	char err[256] = "";

	snprintf(opts.path, sizeof(opts.path), "%s", path);
	ck_assert_msg(virtio_blk_create_bare(vd.kvm, &opts, &b, err, sizeof(err)) == 0, "%s", err);
	return b;
}

/* A request: header at 0x100000 + 0x10000 * i, 512 bytes of data after it, the status byte
 * after that; kicked. */
static void blk_req(struct virtio_blk *b, struct vd_queue *dq, int i, u32 type, u64 sector)
{
	u64 at = 0x100000 + 0x10000 * (u64)i;
	struct virtio_blk_outhdr h = { .type = type, .sector = sector };
	struct vd_buf bufs[] = { { at, sizeof(h), false },
				 { at + 0x1000, 512, type == VIRTIO_BLK_T_IN },
				 { at + 0x2000, 1, true } };

	memcpy(gp(at), &h, sizeof(h));
	vd_post(dq, bufs, 3);
	vd_kick(virtio_blk_vdev(b), 0);
}

START_TEST(test_blk_restore)
{
	struct snap_rec_buf rb = { 0 };
	char path[64], other[64], err[256] = "";
	int fd = image_new(64, path), ofd = image_new(65, other);
	struct virtio_blk *a, *b, *c;
	struct vd_queue dq;
	struct vd_fds fds;

	vd_vm_new(RAM_SIZE, 0);
	a = disk_new(path);
	vd_queue_up(virtio_blk_vdev(a), 0, &dq, QBASE(0), QSIZE, false);
	virtio_blk_vdev(a)->driver_features = VERSION_1;
	atomic_store(&virtio_blk_vdev(a)->features, VERSION_1);
	vd_driver_ok(virtio_blk_vdev(a));
	memset(gp(0x101000), 'w', 512);
	blk_req(a, &dq, 0, VIRTIO_BLK_T_OUT, 3);
	ck_assert(vd_wait_used(&dq, 1, WAIT_MS));
	virtio_blk_quiesce(a);
	ck_assert_int_eq(virtio_blk_save(a, &rb, err, sizeof(err)), 0);
	vd_fds_save(&fds, virtio_blk_vdev(a), 1);
	virtio_blk_destroy(a);
	vd_fds_close(&fds);
	/* Another image (one sector more): refused, naming it. */
	c = disk_new(other);
	ck_assert_int_eq(virtio_blk_load(c, rb.buf, rb.len, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, other) &&
			      strstr(err, "is not the snapshot's (size 33280, was 32768)"),
		      "%s", err);
	virtio_blk_destroy(c);
	/* The same: the next request completes with the next index and reads what A wrote. */
	b = disk_new(path);
	fds_new(virtio_blk_vdev(b), &fds, 1);
	ck_assert_msg(virtio_blk_load(b, rb.buf, rb.len, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(virtio_snap_start(virtio_blk_vdev(b)), 0);
	blk_req(b, &dq, 1, VIRTIO_BLK_T_IN, 3);
	ck_assert(vd_wait_used(&dq, 2, WAIT_MS));
	ck_assert_uint_eq(*(u8 *)gp(0x112000), VIRTIO_BLK_S_OK);
	ck_assert_mem_eq(gp(0x111000), gp(0x101000), 512);
	ck_assert(WAIT_UNTIL(WAIT_MS, irqs_sent(fds.irq[0]) > 0));
	virtio_blk_destroy(b);
	vd_fds_close(&fds);
	snap_rec_free(&rb);
	close(fd);
	close(ofd);
	unlink(path);
	unlink(other);
	vd_vm_free();
}
END_TEST

/* ---- the rng on virtio-pci: vectors, the MSI-X table and a pending bit ---- */

#define MSIX_CTRL 0x9a /* virtio/pci.c's MSI-X capability (0x98) + 2 */

static u64 bar(int i)
{
	return pci_cfg_read(vd.kvm->pci, 1, (u16)(PCI_BASE_ADDRESS_0 + 4 * i), 4) & ~0xfULL;
}

static u64 pacc(u64 addr, u32 len, bool is_write, u64 v)
{
	u8 d[8] = { 0 };

	memcpy(d, &v, len);
	ck_assert(io_bus_dispatch(&vd.kvm->mmio, NULL, addr, d, len, is_write));
	memcpy(&v, d, len);
	return v & (len == 8 ? ~0ULL : (1ULL << (8 * len)) - 1);
}

static void cc(u32 off, u32 len, u32 v)
{
	pacc(bar(0) + off, len, true, v);
}

/* MSI-X on, vector 0 programmed and masked, queue 0 on it, DRIVER_OK. */
static void pci_driver_up(struct vd_queue *dq)
{
	pci_cfg_write(vd.kvm->pci, 1, MSIX_CTRL, 2, 0x8000);
	pacc(bar(2) + 0, 4, true, 0xfee00000);
	pacc(bar(2) + 8, 4, true, 0x41);
	pacc(bar(2) + 12, 4, true, 1);
	cc(VIRTIO_PCI_COMMON_STATUS, 1, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER);
	cc(VIRTIO_PCI_COMMON_GFSELECT, 4, 1);
	cc(VIRTIO_PCI_COMMON_GF, 4, (u32)(VERSION_1 >> 32));
	cc(VIRTIO_PCI_COMMON_STATUS, 1, 0xb);
	cc(VIRTIO_PCI_COMMON_Q_SELECT, 2, 0);
	cc(VIRTIO_PCI_COMMON_Q_SIZE, 2, QSIZE);
	cc(VIRTIO_PCI_COMMON_Q_MSIX, 2, 0);
	cc(VIRTIO_PCI_COMMON_Q_DESCLO, 4, (u32)QBASE(0));
	cc(VIRTIO_PCI_COMMON_Q_AVAILLO, 4, (u32)(QBASE(0) + VD_AVAIL_OFF));
	cc(VIRTIO_PCI_COMMON_Q_USEDLO, 4, (u32)(QBASE(0) + VD_USED_OFF));
	cc(VIRTIO_PCI_COMMON_Q_ENABLE, 2, 1);
	cc(VIRTIO_PCI_COMMON_STATUS, 1, 0xf);
	vd_queue_at(dq, QBASE(0), QSIZE);
}

static void pci_request(struct vd_queue *dq, u16 want)
{
	vd_post_desc(dq, 0x100000 + 0x100 * (u64)want, 16, VRING_DESC_F_WRITE);
	pacc(bar(0) + 0x3000, 2, true, 0); /* queue 0's notify */
	ck_assert(vd_wait_used(dq, want, WAIT_MS));
}

/* The PCI configuration space is the bus's to restore (hw/pci.c): here B's stays as init
 * left it, and the transport's record alone must bring the vectors back. */
START_TEST(test_rng_pci_restore)
{
	struct snap_rec_buf b = { 0 };
	struct virtio_rng *r;
	struct vd_queue dq;
	char err[256] = "";

	vd_vm_new(RAM_SIZE, 0);
	ck_assert_int_eq(pci_bus_create(vd.kvm), 0);
	ck_assert_int_eq(virtio_rng_create(vd.kvm, VIRTIO_TRANS_PCI, false, &r), 0);
	pci_driver_up(&dq);
	pci_request(&dq, 1);
	ck_assert_uint_eq(pacc(bar(2) + 0x800, 8, false, 0), 1); /* masked: pending */
	virtio_rng_quiesce(r);
	ck_assert_int_eq(virtio_snap_save(virtio_rng_vdev(r), &b, err, sizeof(err)), 0);
	virtio_rng_destroy(r);

	ck_assert_int_eq(virtio_rng_create(vd.kvm, VIRTIO_TRANS_PCI, false, &r), 0);
	ck_assert_msg(virtio_snap_load(virtio_rng_vdev(r), b.buf, b.len, err, sizeof(err)) == 0,
		      "%s", err);
	ck_assert_uint_eq(pacc(bar(0) + VIRTIO_PCI_COMMON_Q_MSIX, 2, false, 0), 0);
	ck_assert_uint_eq(pacc(bar(0) + VIRTIO_PCI_COMMON_STATUS, 1, false, 0), 0xf);
	ck_assert_uint_eq(pacc(bar(2) + 8, 4, false, 0), 0x41);
	ck_assert_uint_eq(pacc(bar(2) + 12, 4, false, 0), 1);
	ck_assert_uint_eq(pacc(bar(2) + 0x800, 8, false, 0), 1);
	ck_assert(virtio_pci_msix_enabled(virtio_rng_vdev(r)));
	ck_assert_int_ge(virtio_rng_vdev(r)->q[0].irq_fd, 0);
	ck_assert_int_eq(virtio_snap_start(virtio_rng_vdev(r)), 0);
	pci_request(&dq, 2);
	virtio_rng_destroy(r);
	snap_rec_free(&b);
	pci_bus_destroy(vd.kvm);
	vd_vm_free();
}
END_TEST

static Suite *snap_suite(void)
{
	Suite *s = suite_create("virtio-snap");
	TCase *tc = tcase_create("snap");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_rng_mmio_restore);
	tcase_add_test(tc, test_hostile);
	tcase_add_test(tc, test_console_restore);
	tcase_add_test(tc, test_console_hostile);
	tcase_add_test(tc, test_port_restore);
	tcase_add_test(tc, test_port_hostile);
	tcase_add_test(tc, test_blk_restore);
	tcase_add_test(tc, test_rng_pci_restore);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(snap_suite)

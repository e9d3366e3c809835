/* Unit tests of virtio-console (output to the terminal hook, input into receive buffers) and virtio-rng, driven by the test without KVM. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <linux/virtio_console.h>
#include <linux/virtio_ring.h>

#include "check_main.h"
#include "irq_hook.h"
#include "vdriver.h"
#include "wait.h"
#include "lkvm/kvm.h"
#include "lkvm/virtio-console.h"

#define RAM_SIZE MiB(2)
#define QSIZE 64
#define QBASE(i) (0x10000ULL * ((u64)(i) + 1))
#define WAIT_MS 10000
#define TX_BUDGET (64 * 1024) /* the console's output per wake-up (virtio/console.c) */
#define OUT_CHUNK 4096	      /* and per write to the terminal */

static struct {
	struct virtio_device *vdev;
	struct vd_queue q[4];
	char out[256];
	size_t out_len;
	pthread_mutex_t lock;
} t;

static void catch_out(struct kvm *kvm, const u8 *buf, size_t len)
{
	pthread_mutex_lock(&t.lock);
	len = MIN(len, sizeof(t.out) - 1 - t.out_len);
	memcpy(t.out + t.out_len, buf, len);
	t.out_len += len;
	pthread_mutex_unlock(&t.lock);
}

static void env_up(void)
{
	memset(&t, 0, sizeof(t));
	pthread_mutex_init(&t.lock, NULL);
	vd_vm_new(RAM_SIZE, 0);
}

/* The driver's set-up of nq queues, up to just before DRIVER_OK. */
static void queues_up(int nq)
{
	for (int i = 0; i < nq; i++)
		vd_queue_up(t.vdev, i, &t.q[i], QBASE(i), QSIZE, false);
}

static void start(int nq)
{
	queues_up(nq);
	vd_driver_ok(t.vdev);
}

static void env_down(const struct vd_fds *fds)
{
	vd_fds_close(fds);
	vd_vm_free();
	pthread_mutex_destroy(&t.lock);
}

/* One descriptor as one chain (flags: WRITE, INDIRECT), made available and kicked; returns
 * its head. */
static u16 post_desc(int qi, u64 gpa, u32 len, u16 flags)
{
	u16 idx = vd_post_desc(&t.q[qi], gpa, len, flags);

	vd_kick(t.vdev, qi);
	return idx;
}

/* One buffer as one chain, kicked. */
static void post1(int qi, u64 gpa, u32 len, bool dev_writes)
{
	post_desc(qi, gpa, len, dev_writes ? VRING_DESC_F_WRITE : 0);
}

/* A chain of n buffers that all alias [gpa, gpa + len), through an indirect table at table
 * (16 * n bytes), kicked: n * len bytes for the device to read from len bytes of RAM. */
static u16 post_aliased(int qi, u64 table, int n, u64 gpa, u32 len)
{
	struct vring_desc *d = gp(table);

	for (int i = 0; i < n; i++)
		d[i] = (struct vring_desc){ .addr = gpa,
					    .len = len,
					    .flags = i + 1 < n ? VRING_DESC_F_NEXT : 0,
					    .next = (u16)(i + 1) };
	return post_desc(qi, table, (u32)(16 * n), VRING_DESC_F_INDIRECT);
}

static bool wait_used(int qi, u16 want)
{
	return vd_wait_used(&t.q[qi], want, WAIT_MS);
}

START_TEST(test_console)
{
	struct virtio_console *c;
	struct vd_fds fds;

	env_up();
	ck_assert_int_eq(virtio_console_create(vd.kvm, VIRTIO_TRANS_PCI, catch_out, NULL, true, &c),
			 0);
	t.vdev = virtio_console_vdev(c);
	ck_assert_int_eq(t.vdev->nr_queues, 2);
	start(2);
	/* Output: transmitq chains reach the terminal hook in order. */
	memcpy(gp(0x100000), "hello ", 6);
	memcpy(gp(0x100100), "hvc0\n", 5);
	post1(1, 0x100000, 6, false);
	post1(1, 0x100100, 5, false);
	ck_assert(wait_used(1, 2));
	ck_assert_str_eq(t.out, "hello hvc0\n");
	/* Input before the guest has a buffer waits; a buffer then gets it. */
	ck_assert_uint_eq(virtio_console_receive(c, (const u8 *)"ls\r", 3), 3);
	post1(0, 0x110000, 2, true);
	post1(0, 0x110100, 64, true);
	ck_assert(wait_used(0, 2));
	ck_assert_mem_eq(gp(0x110000), "ls", 2);
	ck_assert_mem_eq(gp(0x110100), "\r", 1);
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 2);
	ck_assert_uint_eq(t.q[0].used->ring[1].len, 1);
	/* Input beyond the buffer (4 KiB) is refused, not dropped silently. */
	{
		static u8 big[8192];

		ck_assert_uint_eq(virtio_console_receive(c, big, sizeof(big)), 4096);
	}
	vd_fds_save(&fds, t.vdev, 2);
	virtio_console_destroy(c);
	env_down(&fds);
}
END_TEST

START_TEST(test_rng)
{
	struct virtio_rng *r;
	static const u8 zero[64];
	struct vd_fds fds;

	env_up();
	ck_assert_int_eq(virtio_rng_create(vd.kvm, VIRTIO_TRANS_PCI, true, &r), 0);
	t.vdev = virtio_rng_vdev(r);
	start(1);
	post1(0, 0x100000, 64, true);
	post1(0, 0x100100, 16, true);
	ck_assert(wait_used(0, 2));
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 64);
	ck_assert_uint_eq(t.q[0].used->ring[1].len, 16);
	ck_assert(memcmp(gp(0x100000), zero, 64) != 0);
	ck_assert(memcmp(gp(0x100000), gp(0x100100), 16) != 0);
	/* A readable-only chain gets nothing, and the device goes on. */
	post1(0, 0x100200, 16, false);
	ck_assert(wait_used(0, 3));
	ck_assert_uint_eq(t.q[0].used->ring[2].len, 0);
	vd_fds_save(&fds, t.vdev, 1);
	virtio_rng_destroy(r);
	env_down(&fds);
}
END_TEST

/* Output seen by the terminal hooks below (written by the queue thread, read after join or
 * after used ring updates that follow it). */
static struct {
	struct virtio_console *c;
	u8 *buf; /* a copy of what was written, up to cap bytes */
	size_t cap;
	atomic_ullong bytes; /* everything written */
	atomic_ullong rx_at; /* bytes written before the first call that saw input delivered */
	atomic_bool started;
} o;

/* Copies, and notes when the receive queue's first buffer was used. */
static void note_out(struct kvm *kvm, const u8 *buf, size_t len)
{
	u64 done = atomic_load(&o.bytes);

	if (vd_used_idx(&t.q[0]) && atomic_load(&o.rx_at) == ~0ULL)
		atomic_store(&o.rx_at, done);
	if (done < o.cap)
		memcpy(o.buf + done, buf, MIN(len, o.cap - done));
	atomic_fetch_add(&o.bytes, len);
}

static void fill_pattern(u8 *p, size_t len, u8 seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (u8)(seed + i * 7 + i / 251);
}

/*
 * Output is taken TX_BUDGET bytes per wake-up: a chain of 3 budgets and a bit, then a short
 * one, arrive whole and in order, and terminal input waiting meanwhile reaches the guest
 * after the first budget's worth, not after all of it. Everything is posted before the
 * device starts, so its thread's first rounds are known: output, input, output...
 */
START_TEST(test_console_tx_budget)
{
	const u32 big = 3 * TX_BUDGET + 1234;
	static u8 want[3 * TX_BUDGET + 1234 + 5];
	struct vd_fds fds;
	u64 bytes, rx_at;

	env_up();
	memset(&o, 0, sizeof(o));
	o.cap = sizeof(want);
	o.buf = calloc(1, o.cap);
	atomic_store(&o.rx_at, ~0ULL);
	ck_assert_int_eq(
		virtio_console_create(vd.kvm, VIRTIO_TRANS_PCI, note_out, NULL, true, &o.c), 0);
	t.vdev = virtio_console_vdev(o.c);
	queues_up(2);
	fill_pattern(want, big, 3);
	memcpy(want + big, "tail\n", 5);
	memcpy(gp(0x100000), want, big);
	memcpy(gp(0x1f0000), "tail\n", 5);
	post1(1, 0x100000, big, false);
	post1(1, 0x1f0000, 5, false);
	post1(0, 0x1f1000, 16, true);
	ck_assert_uint_eq(virtio_console_receive(o.c, (const u8 *)"x", 1), 1);
	vd_driver_ok(t.vdev);
	ck_assert(wait_used(1, 2));
	ck_assert(wait_used(0, 1));
	bytes = atomic_load(&o.bytes);
	rx_at = atomic_load(&o.rx_at);
	ck_assert_uint_eq(bytes, sizeof(want));
	ck_assert(!memcmp(o.buf, want, sizeof(want)));
	ck_assert_uint_eq(t.q[1].used->ring[0].len, 0);
	ck_assert_uint_eq(*(u8 *)gp(0x1f1000), 'x');
	ck_assert_msg(rx_at <= TX_BUDGET, "input delivered after %llu bytes of output (%s)",
		      (unsigned long long)rx_at,
		      rx_at == ~0ULL ? "all of it" : "more than a budget");
	vd_fds_save(&fds, t.vdev, 2);
	virtio_console_destroy(o.c);
	free(o.buf);
	env_down(&fds);
}
END_TEST

/* ---- a named port (multiport): its control channel, its flush ---- */

/* A driver's control message (little-endian id, event, value) at gpa, posted on the control
 * transmitq (3) and kicked. */
static void ctl_msg(u64 gpa, u32 id, u16 ev, u16 val)
{
	u8 *m = gp(gpa);

	memcpy(m, &id, 4);
	memcpy(m + 4, &ev, 2);
	memcpy(m + 6, &val, 2);
	post1(3, gpa, 8, false);
}

static bool needs_reset(void)
{
	return atomic_load(&t.vdev->status) & VIRTIO_CONFIG_S_NEEDS_RESET;
}

/*
 * Linux's side of a named port: DEVICE_READY gets PORT_ADD, PORT_READY gets the name and the
 * host side open, in the driver's buffers; output then reaches the hook. The config space
 * says one port. A message of 7 bytes breaks the device (NEEDS_RESET), nothing else.
 */
START_TEST(test_console_port)
{
	struct virtio_console *c;
	struct vd_fds fds;
	u32 ports = 0;
	const u8 *m;

	env_up();
	ck_assert_int_eq(virtio_console_create(vd.kvm, VIRTIO_TRANS_PCI, catch_out, "x", true, &c),
			 0);
	t.vdev = virtio_console_vdev(c);
	ck_assert_int_eq(t.vdev->nr_queues, 4);
	ck_assert(t.vdev->host_features & (1ULL << VIRTIO_CONSOLE_F_MULTIPORT));
	t.vdev->ops->config_read(t.vdev, 4, (u8 *)&ports, 4);
	ck_assert_uint_eq(ports, 1);
	start(4);
	for (int i = 0; i < 3; i++)
		post1(2, 0x120000 + 0x100 * (u64)i, 64, true);
	ctl_msg(0x130000, ~0u, 0, 1); /* DEVICE_READY */
	ck_assert(wait_used(2, 1));
	m = gp(0x120000);
	ck_assert_uint_eq(t.q[2].used->ring[0].len, 8);
	ck_assert(!memcmp(m, "\0\0\0\0\1\0", 6)); /* port 0, PORT_ADD */
	ctl_msg(0x130100, 0, 3, 1);		  /* PORT_READY */
	ck_assert(wait_used(2, 3));
	ck_assert_uint_eq(t.q[2].used->ring[1].len, 9);
	ck_assert(!memcmp(gp(0x120100), "\0\0\0\0\7\0\1\0x", 9)); /* PORT_NAME "x" */
	ck_assert(!memcmp(gp(0x120200), "\0\0\0\0\6\0\1\0", 8));  /* PORT_OPEN 1 */
	memcpy(gp(0x100000), "out", 3);
	post1(1, 0x100000, 3, false);
	ck_assert(wait_used(1, 1));
	ck_assert_str_eq(t.out, "out");
	ck_assert(!needs_reset());
	post1(3, 0x130200, 7, false);
	ck_assert(WAIT_UNTIL(WAIT_MS, needs_reset()));
	vd_fds_save(&fds, t.vdev, 4);
	virtio_console_destroy(c);
	env_down(&fds);
}
END_TEST

/* The control channel's checks: each malformed message refused with a reason; what is owed
 * goes in order, and a buffer too small for it is refused. */
START_TEST(test_console_ctl)
{
	static const struct {
		u8 msg[9];
		size_t len;
		int want;
	} cases[] = {
		{ { 0xff, 0xff, 0xff, 0xff, 0, 0, 1, 0 }, 8, 0 }, /* DEVICE_READY, Linux's id */
		{ { 0, 0, 0, 0, 3, 0, 1, 0 }, 8, 0 },		  /* PORT_READY */
		{ { 0, 0, 0, 0, 6, 0, 1, 0 }, 8, 0 },		  /* PORT_OPEN */
		{ { 0, 0, 0, 0, 6, 0, 1, 0 }, 7, -EINVAL },	  /* short */
		{ { 0, 0, 0, 0, 6, 0, 1, 0 }, 9, -EINVAL },	  /* long */
		{ { 1, 0, 0, 0, 3, 0, 1, 0 }, 8, -EINVAL },	  /* port 1 */
		{ { 0, 0, 0, 0, 3, 0, 2, 0 }, 8, -EINVAL },	  /* value 2 */
		{ { 0, 0, 0, 0, 5, 0, 1, 0 }, 8, -EINVAL },	  /* RESIZE: the device's */
		{ { 0, 0, 0, 0, 8, 1, 1, 0 }, 8, -EINVAL },	  /* unknown */
	};
	struct vcon_ctl s = { 0 };
	u8 buf[64];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		const char *why = NULL;

		ck_assert_int_eq(vcon_ctl_recv(&s, cases[i].msg, cases[i].len, &why),
				 cases[i].want);
		ck_assert(cases[i].want == 0 || (why && *why));
	}
	ck_assert_uint_eq(s.pend, VCON_SEND_ALL);
	ck_assert(s.guest_open);
	ck_assert_int_eq(vcon_ctl_next(&s, "name", buf, 7), -ENOSPC);
	ck_assert_int_eq(vcon_ctl_next(&s, "name", buf, sizeof(buf)), 8);
	ck_assert_uint_eq(buf[4], 1);
	ck_assert_int_eq(vcon_ctl_next(&s, "name", buf, 11), -ENOSPC);
	ck_assert_int_eq(vcon_ctl_next(&s, "name", buf, sizeof(buf)), 12);
	ck_assert_mem_eq(buf + 8, "name", 4);
	ck_assert_int_eq(vcon_ctl_next(&s, "name", buf, sizeof(buf)), 8);
	ck_assert_uint_eq(buf[4], 6);
	ck_assert_int_eq(vcon_ctl_next(&s, "name", buf, sizeof(buf)), 0);
}
END_TEST

/* A driver that failed to set up says so with value 0 (Linux's DEVICE_READY 0, PORT_READY 0):
 * it is owed nothing, so no PORT_ADD (nor a name, nor an open) comes after it. */
START_TEST(test_console_ctl_not_ready)
{
	static const u8 dev_not_ready[8] = { 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0 };
	static const u8 port_not_ready[8] = { 0, 0, 0, 0, 3, 0, 0, 0 };
	struct vcon_ctl s = { 0 };
	const char *why = NULL;
	u8 buf[64];

	ck_assert_int_eq(vcon_ctl_recv(&s, dev_not_ready, 8, &why), 0);
	ck_assert_uint_eq(s.pend, 0);
	ck_assert_int_eq(vcon_ctl_next(&s, "name", buf, sizeof(buf)), 0);
	ck_assert_int_eq(vcon_ctl_recv(&s, port_not_ready, 8, &why), 0);
	ck_assert_uint_eq(s.pend, 0);
	ck_assert_int_eq(vcon_ctl_next(&s, "name", buf, sizeof(buf)), 0);
}
END_TEST

/* Holds the first piece of output until the device was asked to stop. */
static void held_out(struct kvm *kvm, const u8 *buf, size_t len)
{
	if (!atomic_exchange(&o.started, true))
		WAIT_UNTIL(WAIT_MS, virtio_console_stopping(o.c));
	atomic_fetch_add(&o.bytes, len);
}

/* held_out that keeps the bytes too (note_out's buffer). */
static void held_note(struct kvm *kvm, const u8 *buf, size_t len)
{
	u64 done;

	if (!atomic_exchange(&o.started, true))
		WAIT_UNTIL(WAIT_MS, virtio_console_stopping(o.c));
	done = atomic_load(&o.bytes);
	if (done < o.cap)
		memcpy(o.buf + done, buf, MIN(len, o.cap - done));
	atomic_fetch_add(&o.bytes, len);
}

/*
 * One TX chain of 1024 descriptors aliasing the same 1 MiB (1 GiB of output): a stop asked
 * for while its first piece is being written ends the thread after that piece, not after
 * the gigabyte; the chain is not used but given back.
 */
START_TEST(test_console_stop_huge_chain)
{
	struct vd_fds fds;
	u64 bytes;

	env_up();
	memset(&o, 0, sizeof(o));
	ck_assert_int_eq(
		virtio_console_create(vd.kvm, VIRTIO_TRANS_PCI, held_out, NULL, true, &o.c), 0);
	t.vdev = virtio_console_vdev(o.c);
	start(2);
	memset(gp(0x100000), 'z', MiB(1));
	post_aliased(1, 0x1c0000, 1024, 0x100000, (u32)MiB(1));
	ck_assert(WAIT_UNTIL(WAIT_MS, atomic_load(&o.started)));
	t.vdev->ops->stop(t.vdev);
	bytes = atomic_load(&o.bytes);
	ck_assert_msg(bytes > 0 && bytes <= 2 * OUT_CHUNK,
		      "%llu bytes written in all (the stop came during the first piece)",
		      (unsigned long long)bytes);
	ck_assert_uint_eq(vd_used_idx(&t.q[1]), 0);
	ck_assert_uint_eq(t.vdev->q[1].vq.last_avail, 0);
	vd_fds_save(&fds, t.vdev, 2);
	virtio_console_destroy(o.c);
	env_down(&fds);
}
END_TEST

/*
 * The flush at teardown: a chain the stop cut short goes on where it stopped (nothing twice),
 * and the chain after it is written too; a chain of 1 GiB stops at the flush's bound.
 */
START_TEST(test_console_flush)
{
	struct vd_fds fds;
	u64 bytes;

	env_up();
	memset(&o, 0, sizeof(o));
	ck_assert_int_eq(virtio_console_create(vd.kvm, VIRTIO_TRANS_PCI, held_out, "x", true, &o.c),
			 0);
	t.vdev = virtio_console_vdev(o.c);
	start(2);
	memset(gp(0x100000), 'z', MiB(1));
	post_aliased(1, 0x1c0000, 1024, 0x100000, (u32)MiB(1));
	ck_assert(WAIT_UNTIL(WAIT_MS, atomic_load(&o.started)));
	virtio_console_flush(o.c);
	bytes = atomic_load(&o.bytes);
	ck_assert_msg(bytes >= MiB(1) && bytes <= MiB(3), "%llu bytes flushed",
		      (unsigned long long)bytes);
	vd_fds_save(&fds, t.vdev, 2);
	virtio_console_destroy(o.c);
	env_down(&fds);

	/* 3 chains of 8 KiB: the first cut short after its first piece, all 24 KiB out once. */
	env_up();
	memset(&o, 0, sizeof(o));
	o.cap = 3 * 8192;
	o.buf = calloc(1, o.cap);
	ck_assert_int_eq(
		virtio_console_create(vd.kvm, VIRTIO_TRANS_PCI, held_note, "x", true, &o.c), 0);
	t.vdev = virtio_console_vdev(o.c);
	queues_up(2);
	fill_pattern(gp(0x100000), 3 * 8192, 9);
	for (int i = 0; i < 3; i++)
		post1(1, 0x100000 + 8192 * (u64)i, 8192, false);
	vd_driver_ok(t.vdev);
	ck_assert(WAIT_UNTIL(WAIT_MS, atomic_load(&o.started)));
	virtio_console_flush(o.c);
	ck_assert_uint_eq(atomic_load(&o.bytes), 3 * 8192);
	ck_assert(!memcmp(o.buf, gp(0x100000), 3 * 8192));
	ck_assert_uint_eq(vd_used_idx(&t.q[1]), 3);
	vd_fds_save(&fds, t.vdev, 2);
	virtio_console_destroy(o.c);
	free(o.buf);
	env_down(&fds);
}
END_TEST

/* An rng driver whose interrupt handler posts the same buffer again at once (endless_set):
 * the ring never runs dry, and stop still ends the thread (between two chains). */
START_TEST(test_rng_stop_endless)
{
	struct virtio_rng *r;
	struct vd_fds fds;

	env_up();
	ck_assert_int_eq(virtio_rng_create(vd.kvm, VIRTIO_TRANS_PCI, true, &r), 0);
	t.vdev = virtio_rng_vdev(r);
	queues_up(1);
	endless_set(t.vdev, 0, &t.q[0], t.q[0].next_desc);
	vd_driver_ok(t.vdev);
	ck_assert_uint_eq(post_desc(0, 0x100000, 4096, VRING_DESC_F_WRITE), endless.head);
	ck_assert(WAIT_UNTIL(WAIT_MS, endless_served() >= 100));
	t.vdev->ops->stop(t.vdev); /* returns: the thread looked at stop while the ring was full */
	vd_fds_save(&fds, t.vdev, 1);
	virtio_rng_destroy(r);
	env_down(&fds);
}
END_TEST

/* Guest RAM is what it was at snap. */
static bool ram_is(const u8 *snap)
{
	return !memcmp(snap, vd.ram, RAM_SIZE);
}

static size_t out_len(void)
{
	size_t n;

	pthread_mutex_lock(&t.lock);
	n = t.out_len;
	pthread_mutex_unlock(&t.lock);
	return n;
}

/* A paused console writes nothing to the terminal, takes no output chain and delivers no
 * input (typed keys wait in its buffer), raises no interrupt; after resume all of it, in order. */
START_TEST(test_console_quiesce)
{
	u8 *snap = malloc(RAM_SIZE);
	struct virtio_console *c;
	struct vd_fds fds;

	ck_assert_ptr_nonnull(snap);
	env_up();
	ck_assert_int_eq(virtio_console_create(vd.kvm, VIRTIO_TRANS_PCI, catch_out, NULL, true, &c),
			 0);
	t.vdev = virtio_console_vdev(c);
	start(2);
	virtio_console_quiesce(c);
	/* The chains first, then what would wake the thread, with the memory as it stands. */
	memcpy(gp(0x100000), "while paused\n", 13);
	vd_post_desc(&t.q[1], 0x100000, 13, 0);
	vd_post_desc(&t.q[0], 0x110000, 64, VRING_DESC_F_WRITE);
	memcpy(snap, vd.ram, RAM_SIZE);
	ck_assert_uint_eq(virtio_console_receive(c, (const u8 *)"typed", 5), 5);
	vd_kick(t.vdev, 1);
	vd_kick(t.vdev, 0);
	ck_assert(HOLDS_FOR(100, ram_is(snap) && out_len() == 0));
	ck_assert_uint_eq(
		atomic_load(&t.vdev->q[0].stats.irqs) + atomic_load(&t.vdev->q[1].stats.irqs), 0);
	virtio_console_resume(c);
	ck_assert(wait_used(1, 1));
	ck_assert(wait_used(0, 1));
	ck_assert_str_eq(t.out, "while paused\n");
	ck_assert_mem_eq(gp(0x110000), "typed", 5);
	vd_fds_save(&fds, t.vdev, 2);
	virtio_console_destroy(c);
	env_down(&fds);
	free(snap);
}
END_TEST

/* A paused rng fills no buffer; after resume it does. */
START_TEST(test_rng_quiesce)
{
	u8 *snap = malloc(RAM_SIZE);
	struct virtio_rng *r;
	struct vd_fds fds;

	ck_assert_ptr_nonnull(snap);
	env_up();
	ck_assert_int_eq(virtio_rng_create(vd.kvm, VIRTIO_TRANS_PCI, true, &r), 0);
	t.vdev = virtio_rng_vdev(r);
	start(1);
	virtio_rng_quiesce(r);
	vd_post_desc(&t.q[0], 0x100000, 64, VRING_DESC_F_WRITE);
	memcpy(snap, vd.ram, RAM_SIZE);
	vd_kick(t.vdev, 0);
	ck_assert(HOLDS_FOR(100, ram_is(snap)));
	virtio_rng_resume(r);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 64);
	vd_fds_save(&fds, t.vdev, 1);
	virtio_rng_destroy(r);
	env_down(&fds);
	free(snap);
}
END_TEST

static Suite *console_suite(void)
{
	Suite *s = suite_create("virtio-console");
	TCase *tc = tcase_create("console");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_console);
	tcase_add_test(tc, test_console_tx_budget);
	tcase_add_test(tc, test_console_stop_huge_chain);
	tcase_add_test(tc, test_console_port);
	tcase_add_test(tc, test_console_ctl);
	tcase_add_test(tc, test_console_ctl_not_ready);
	tcase_add_test(tc, test_console_flush);
	tcase_add_test(tc, test_rng);
	tcase_add_test(tc, test_rng_stop_endless);
	tcase_add_test(tc, test_console_quiesce);
	tcase_add_test(tc, test_rng_quiesce);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(console_suite)

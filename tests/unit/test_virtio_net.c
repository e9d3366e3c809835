/* Unit tests for the virtio-net device without KVM: the test drives the rings, the fake backend plays the host network. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/virtio_config.h>
#include <linux/virtio_net.h>
#include <linux/virtio_ring.h>

#include "capture.h"
#include "check_main.h"
#include "stats_fmt.h"
#include "tap_host.h"
#include "irq_hook.h"
#include "vdriver.h"
#include "wait.h"
#include "lkvm/kvm.h"
#include "lkvm/virtio-net.h"

#define RAM_SIZE MiB(4)
#define QBASE(i) (0x10000ULL * ((u64)(i) + 1)) /* desc; avail +0x1000; used +0x2000 */
#define BUF_BASE 0x100000ULL
#define WAIT_MS 2000
#define F(b) (1ULL << (b))
#define BASE_FEATURES (F(VIRTIO_F_VERSION_1) | F(VIRTIO_NET_F_CTRL_VQ))

static struct {
	struct net_backend *be[NET_MAX_QUEUE_PAIRS];
	struct virtio_net *n;
	struct virtio_device *vdev;
	struct vd_queue q[VIRTIO_MAX_QUEUES];
	int nq;
} t;

/* The "batch" test case's fixture: every device is made with -n batch=on. */
static bool batch_all;

static void batch_on(void)
{
	batch_all = true;
}

static void batch_off(void)
{
	batch_all = false;
}

static u64 galloc(u64 len)
{
	return vd_galloc(len, 64);
}

/* Create the device over the backends in t.be (pairs of them) with the TX strategy in o
 * (queue pairs and ioeventfd are set here). */
static void dev_create_be(int pairs, struct net_opts o)
{
	struct net_backend *be[NET_MAX_QUEUE_PAIRS];

	o.ioeventfd = true;
	o.batch |= batch_all;
	o.queue_pairs = pairs;
	/* The device takes ownership and clears the caller's array; keep our copy. */
	memcpy(be, t.be, sizeof(be));
	ck_assert_int_eq(virtio_net_create_bare(vd.kvm, &o, be, &t.n), 0);
	ck_assert_ptr_null(be[0]);
	t.vdev = virtio_net_vdev(t.n);
	t.nq = 2 * pairs + 1;
}

/* Create the device (pairs queue pairs over fake backends, or over `custom`) with the
 * TX strategy in o (mode, queue pairs and ioeventfd are set here). */
static void dev_create_opts(int pairs, struct net_backend *custom, struct net_opts o)
{
	o.mode = NET_MODE_FAKE;
	memset(&t, 0, sizeof(t));
	vd_vm_new(RAM_SIZE, BUF_BASE);
	for (int i = 0; i < pairs; i++) {
		t.be[i] = custom && i == 0 ? custom : net_fake_create();
		ck_assert_ptr_nonnull(t.be[i]);
	}
	dev_create_be(pairs, o);
}

static void dev_create(int pairs, struct net_backend *custom)
{
	dev_create_opts(pairs, custom, (struct net_opts){ 0 });
}

/* Negotiate, lay out every queue (size each), give it eventfds, DRIVER_OK. */
static void dev_start(u64 features, u16 size)
{
	struct virtio_device *vdev = t.vdev;

	features |= F(VIRTIO_F_VERSION_1);
	ck_assert(vdev->ops->features_ok(vdev, features));
	vdev->features = features;
	for (int i = 0; i < t.nq; i++)
		vd_queue_up(vdev, i, &t.q[i], QBASE(i), size,
			    features & F(VIRTIO_RING_F_EVENT_IDX));
	vd_driver_ok(vdev);
}

static void dev_destroy(void)
{
	struct vd_fds fds;

	vd_fds_save(&fds, t.vdev, t.nq);
	virtio_net_destroy(t.n);
	vd_fds_close(&fds);
	vd_vm_free();
	memset(&t, 0, sizeof(t));
}

/* The driver's calls on queue qi of this device (vdriver.h). */
static u16 post(int qi, const struct vd_buf *b, int nb)
{
	return vd_post(&t.q[qi], b, nb);
}

static u16 used_idx(int qi)
{
	return vd_used_idx(&t.q[qi]);
}

static bool wait_used(int qi, u16 want)
{
	return vd_wait_used(&t.q[qi], want, WAIT_MS);
}

static bool wait_cond_u16(const u16 *p, u16 want)
{
	return WAIT_UNTIL(WAIT_MS, __atomic_load_n(p, __ATOMIC_ACQUIRE) == want);
}

static bool wait_needs_reset(void)
{
	return WAIT_UNTIL(WAIT_MS, atomic_load(&t.vdev->status) & VIRTIO_CONFIG_S_NEEDS_RESET);
}

/* The ids of this process's threads called name (at most max of them); returns how many
 * there are. */
static int threads_named(const char *name, int *tids, int max)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d))) {
		char path[300], comm[32] = "";
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
		if (strcmp(comm, name))
			continue;
		if (n < max)
			tids[n] = atoi(de->d_name);
		n++;
	}
	closedir(d);
	return n;
}

/* The first line of /proc/self/task/TID/FILE into buf ("" when it cannot be read). */
static void task_file(int tid, const char *file, char *buf, size_t len)
{
	char path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/%s", tid, file);
	buf[0] = '\0';
	f = fopen(path, "r");
	if (f && !fgets(buf, (int)len, f))
		buf[0] = '\0';
	if (f)
		fclose(f);
}

/*
 * Is thread tid asleep in poll/ppoll with no wake-up pending, i.e. has it handled
 * everything it was woken for? An eventfd write (kick, injected frame) wakes a thread
 * polling it before write() returns; from then until it has run and gone to sleep again
 * its state is not 'S' (TASK_WAKING or running: 'R' in /proc/TID/stat). So the state is
 * read first, then /proc/TID/syscall names the call it sleeps in. The syscall file alone
 * is not enough: a wake-up handed to another CPU's queue (the kernel's wakelist, state
 * TASK_WAKING) leaves it showing the poll the thread is about to leave; that let
 * rx_no_peek_mergeable_waits_whole stop the device before it had read its frame.
 */
static bool task_idle(int tid)
{
	char st[512], sc[64];
	const char *p;
	long nr;

	task_file(tid, "stat", st, sizeof(st));
	p = strrchr(st, ')'); /* "tid (comm) S ...", comm may hold anything */
	if (!p || p[1] != ' ' || p[2] != 'S')
		return false;
	task_file(tid, "syscall", sc, sizeof(sc));
	nr = strtol(sc, NULL, 10);
	return sc[0] && strncmp(sc, "running", 7) && (nr == SYS_poll || nr == SYS_ppoll);
}

/*
 * Is the device thread `name` idle (task_idle)? Once this returns true after a write that
 * woke it, the thread has seen that write and gone back to sleep: a "nothing happened"
 * check that follows is exact, with no guess at how long the device might take. A check
 * that something did happen waits for that thing itself (a counter, a used index, the
 * backend's queue), not for idleness.
 */
static bool thread_idle_now(const char *name)
{
	int tids[4], n = threads_named(name, tids, 4);
	bool idle = n > 0 && n <= 4;

	for (int i = 0; i < n && idle; i++)
		idle = task_idle(tids[i]);
	return idle;
}

static bool wait_thread_idle(const char *name)
{
	return WAIT_UNTIL(WAIT_MS, thread_idle_now(name));
}

/* Is the queue's interrupt eventfd signalled (within ms)? Consumes it. */
static bool irq_fired(int qi, int ms)
{
	struct pollfd p = { .fd = t.vdev->q[qi].irq_fd, .events = POLLIN };
	u64 v;

	if (poll(&p, 1, ms) != 1)
		return false;
	return read(p.fd, &v, sizeof(v)) == sizeof(v);
}

static u64 stat(int qi, size_t off)
{
	return atomic_load((atomic_ullong *)((u8 *)&t.vdev->q[qi].stats + off));
}
#define STAT(qi, field) stat(qi, offsetof(struct virtio_queue_stats, field))

/* Bounded wait for a queue counter to reach want (the device thread may count after the
 * used index moved: a kick read once the chain it announced was already drained). */
#define WAIT_STAT(qi, field, want) WAIT_UNTIL(WAIT_MS, STAT(qi, field) == (want))

/* Bounded wait for the device to have received every injected frame (into a guest buffer,
 * or held aside, or dropped). */
static bool wait_frames_taken(int pair)
{
	return WAIT_UNTIL(WAIT_MS, net_fake_pending(t.be[pair]) == 0);
}

static void fill_pattern(u8 *p, size_t len, u8 seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (u8)(seed + i * 7);
}

static u16 rx_num_buffers(u64 gpa)
{
	struct virtio_net_hdr_v1 h;

	memcpy(&h, gp(gpa), sizeof(h));
	return h.num_buffers;
}

/* ---- RX ---- */

START_TEST(rx_single_frame)
{
	u8 frame[60];
	u64 buf;
	u16 head;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	buf = galloc(2048);
	head = post(0, &(struct vd_buf){ buf, 2048, true }, 1);
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 1);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(t.q[0].used->ring[0].id, head);
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 72);
	ck_assert_uint_eq(rx_num_buffers(buf), 1);
	ck_assert_mem_eq(gp(buf + 12), frame, sizeof(frame));
	ck_assert(irq_fired(0, WAIT_MS));
	ck_assert_uint_eq(STAT(0, packets), 1);
	ck_assert_uint_eq(STAT(0, bytes), 60);
	ck_assert_uint_eq(STAT(0, irqs), 1);
	ck_assert_uint_eq(STAT(0, drops), 0);
	dev_destroy();
}
END_TEST

/* A frame that arrives before any buffer waits in the backend, then goes out on the kick. */
START_TEST(rx_waits_for_buffers)
{
	u8 frame[100];
	u64 buf;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_RING_F_EVENT_IDX), 256);
	fill_pattern(frame, sizeof(frame), 9);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	/* Ring empty: the device asks for a kick at the next chain (avail_event = 0). */
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert_uint_eq(used_idx(0), 0);
	ck_assert_uint_eq(t.be[0]->ops->peek_len(t.be[0]), 112);
	buf = galloc(4096);
	post(0, &(struct vd_buf){ buf, 4096, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 112);
	ck_assert_mem_eq(gp(buf + 12), frame, sizeof(frame));
	ck_assert(WAIT_STAT(0, kicks, 1));
	/* Many frames, one buffer each, posted in one go: delivered in batches. */
	for (int i = 0; i < 20; i++)
		post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	for (int i = 0; i < 20; i++)
		ck_assert_int_eq(net_fake_inject(t.be[0], frame, 60 + i), 0);
	ck_assert(wait_used(0, 21));
	ck_assert_uint_eq(STAT(0, packets), 21);
	ck_assert_uint_le(STAT(0, batches), 21);
	dev_destroy();
}
END_TEST

START_TEST(rx_mergeable_spans_buffers)
{
	static u8 frame[5000], got[5000];
	u64 buf[8];
	u16 head[8];
	size_t off = 0;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF), 256);
	for (int i = 0; i < 8; i++) {
		buf[i] = galloc(2048);
		head[i] = post(0, &(struct vd_buf){ buf[i], 2048, true }, 1);
	}
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 3);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 3));
	ck_assert_uint_eq(rx_num_buffers(buf[0]), 3);
	ck_assert_uint_eq(t.q[0].used->ring[0].id, head[0]);
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 2048);
	ck_assert_uint_eq(t.q[0].used->ring[1].id, head[1]);
	ck_assert_uint_eq(t.q[0].used->ring[1].len, 2048);
	ck_assert_uint_eq(t.q[0].used->ring[2].id, head[2]);
	ck_assert_uint_eq(t.q[0].used->ring[2].len, 5012 - 4096);
	memcpy(got, gp(buf[0] + 12), 2036);
	off = 2036;
	memcpy(got + off, gp(buf[1]), 2048);
	off += 2048;
	memcpy(got + off, gp(buf[2]), 5000 - off);
	ck_assert_mem_eq(got, frame, sizeof(frame));
	/* The five chains not needed were given back, in order. */
	ck_assert(wait_cond_u16(&t.vdev->q[0].vq.last_avail, 3));
	ck_assert_uint_eq(t.q[0].avail->idx, 8);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, 100), 0);
	ck_assert(wait_used(0, 4));
	ck_assert_uint_eq(t.q[0].used->ring[3].id, head[3]);
	ck_assert_uint_eq(t.q[0].used->ring[3].len, 112);
	ck_assert_uint_eq(rx_num_buffers(buf[3]), 1);
	ck_assert(wait_cond_u16(&t.vdev->q[0].vq.last_avail, 4));
	ck_assert_uint_eq(STAT(0, packets), 2);
	ck_assert_uint_eq(STAT(0, bytes), 5100);
	dev_destroy();
}
END_TEST

/* Not enough room for a known-size frame: wait for more buffers rather than truncate. */
START_TEST(rx_mergeable_waits_for_room)
{
	static u8 frame[5000];
	u64 b1 = 0;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF) | F(VIRTIO_RING_F_EVENT_IDX), 256);
	for (int i = 0; i < 2; i++) {
		u64 b = galloc(2048);

		if (!i)
			b1 = b;
		post(0, &(struct vd_buf){ b, 2048, true }, 1);
	}
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 5);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert_uint_eq(used_idx(0), 0);
	post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(0, 3));
	ck_assert_uint_eq(rx_num_buffers(b1), 3);
	ck_assert_uint_eq(STAT(0, bytes), 5000);
	dev_destroy();
}
END_TEST

/* A backend that cannot tell a frame's size before reading it (a tap): a frame longer
 * than the receive buffer is dropped and counted, never delivered cut. */
START_TEST(rx_no_peek_long_frame_dropped)
{
	static u8 big[500], small[60];
	u64 buf;
	u16 head;

	dev_create(1, NULL);
	net_fake_set_no_peek(t.be[0], true);
	dev_start(BASE_FEATURES, 256);
	buf = galloc(200);
	head = post(0, &(struct vd_buf){ buf, 200, true }, 1);
	vd_kick(t.vdev, 0);
	fill_pattern(big, sizeof(big), 21);
	fill_pattern(small, sizeof(small), 22);
	ck_assert_int_eq(net_fake_inject(t.be[0], big, sizeof(big)), 0);
	for (int ms = 0; ms < WAIT_MS && STAT(0, drops) == 0; ms++)
		poll(NULL, 0, 1);
	ck_assert_uint_eq(STAT(0, drops), 1);
	ck_assert_uint_eq(used_idx(0), 0);
	/* The buffer is still there for the next frame, which fits. */
	ck_assert_int_eq(net_fake_inject(t.be[0], small, sizeof(small)), 0);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(t.q[0].used->ring[0].id, head);
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 72);
	ck_assert_mem_eq(gp(buf + 12), small, sizeof(small));
	ck_assert_uint_eq(STAT(0, packets), 1);
	ck_assert_uint_eq(STAT(0, bytes), 60);
	ck_assert_uint_eq(STAT(0, drops), 1);
	dev_destroy();
}
END_TEST

/* The same with MRG_RXBUF: a frame longer than the buffers posted so far waits for more
 * (read already, kept aside), then arrives whole across them. */
START_TEST(rx_no_peek_mergeable_waits_whole)
{
	static u8 frame[3000], got[3000];
	u64 b[4];
	size_t off;

	dev_create(1, NULL);
	net_fake_set_no_peek(t.be[0], true);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF) | F(VIRTIO_RING_F_EVENT_IDX), 256);
	for (int i = 0; i < 4; i++)
		b[i] = galloc(1000);
	post(0, &(struct vd_buf){ b[0], 1000, true }, 1);
	post(0, &(struct vd_buf){ b[1], 1000, true }, 1);
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 31);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_frames_taken(0));
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert_uint_eq(used_idx(0), 0);
	ck_assert_uint_eq(STAT(0, drops), 0);
	post(0, &(struct vd_buf){ b[2], 1000, true }, 1);
	post(0, &(struct vd_buf){ b[3], 1000, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(0, 4));
	ck_assert_uint_eq(rx_num_buffers(b[0]), 4);
	ck_assert_uint_eq(t.q[0].used->ring[3].len, 12);
	memcpy(got, gp(b[0] + 12), 988);
	off = 988;
	for (int i = 1; i < 4; i++) {
		size_t n = MIN(sizeof(frame) - off, (size_t)1000);

		memcpy(got + off, gp(b[i]), n);
		off += n;
	}
	ck_assert_uint_eq(off, sizeof(frame));
	ck_assert_mem_eq(got, frame, sizeof(frame));
	ck_assert_uint_eq(STAT(0, packets), 1);
	ck_assert_uint_eq(STAT(0, drops), 0);
	/* A frame that waits while the device stops is counted as dropped. Stop only once the
	 * device has read it: a stop that comes first leaves it in the backend, not dropped. */
	post(0, &(struct vd_buf){ b[0], 1000, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_frames_taken(0));
	t.vdev->ops->stop(t.vdev);
	ck_assert_uint_eq(STAT(0, drops), 1);
	ck_assert_uint_eq(used_idx(0), 4);
	dev_destroy();
}
END_TEST

/* Which of the n buffers (posted with heads head[] at gpa[]) is `id`: its address. */
static u64 buf_of(u32 id, const u16 *head, const u64 *gpa, int n)
{
	for (int i = 0; i < n; i++)
		if (head[i] == id)
			return gpa[i];
	ck_abort_msg("used id %u was never posted", id);
	return 0;
}

/*
 * MRG_RXBUF, a long frame and a short one behind it, with buffers for neither whole: the long
 * one waits for buffers holding those it has, and the short one waits behind it (batch=on
 * read both already: it must not overtake). Once the guest posts more, both arrive, whole and
 * in order, nothing dropped. With and without peek_len (_i: 1 like a tap, without).
 */
START_TEST(rx_mergeable_wait_keeps_order)
{
	static u8 frame[3000], got[3000];
	u64 gpa[5];
	u16 head[5];
	const struct vring_used_elem *u;
	size_t off = 0;

	dev_create(1, NULL);
	net_fake_set_no_peek(t.be[0], _i);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF) | F(VIRTIO_RING_F_EVENT_IDX), 256);
	/* Both frames wait in the backend first, so that one call can take them both. */
	fill_pattern(frame, sizeof(frame), 41);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame + 7, 100), 0);
	for (int i = 0; i < 5; i++)
		gpa[i] = galloc(1000);
	for (int i = 0; i < 2; i++)
		head[i] = post(0, &(struct vd_buf){ gpa[i], 1000, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert_uint_eq(used_idx(0), 0);
	ck_assert_uint_eq(STAT(0, drops), 0);
	for (int i = 2; i < 5; i++)
		head[i] = post(0, &(struct vd_buf){ gpa[i], 1000, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(0, 5));
	/* The long one in the first four used buffers (1000 + 1000 + 1000 + 12 bytes). */
	u = t.q[0].used->ring;
	ck_assert_uint_eq(rx_num_buffers(buf_of(u[0].id, head, gpa, 5)), 4);
	for (int i = 0; i < 4; i++) {
		u64 b = buf_of(u[i].id, head, gpa, 5);
		u32 skip = i ? 0 : 12, n = u[i].len - skip;

		ck_assert_uint_eq(u[i].len, i < 3 ? 1000 : 12);
		ck_assert_uint_le(off + n, sizeof(got));
		memcpy(got + off, gp(b + skip), n);
		off += n;
	}
	ck_assert_uint_eq(off, sizeof(frame));
	ck_assert_mem_eq(got, frame, sizeof(frame));
	/* Then the short one, alone in the fifth. */
	ck_assert_uint_eq(u[4].len, 112);
	ck_assert_uint_eq(rx_num_buffers(buf_of(u[4].id, head, gpa, 5)), 1);
	ck_assert_mem_eq(gp(buf_of(u[4].id, head, gpa, 5) + 12), frame + 7, 100);
	ck_assert(WAIT_STAT(0, packets, 2));
	ck_assert_uint_eq(STAT(0, drops), 0);
	dev_destroy();
}
END_TEST

/* MRG_RXBUF, a frame longer than the whole ring's buffers (4 of 1000 bytes): the guest can post
 * no more, so waiting would never end: it is dropped (counted once) and the buffers take the
 * next frame. Without peek_len (the tap's way: the frame is read before its size is known). */
START_TEST(rx_mergeable_never_fits_dropped)
{
	static u8 frame[5000];
	u64 b0 = 0;
	u16 h0 = 0;

	dev_create(1, NULL);
	net_fake_set_no_peek(t.be[0], true);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF) | F(VIRTIO_RING_F_EVENT_IDX), 4);
	for (int i = 0; i < 4; i++) {
		u64 b = galloc(1000);
		u16 h = post(0, &(struct vd_buf){ b, 1000, true }, 1);

		if (!i) {
			b0 = b;
			h0 = h;
		}
	}
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 43);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(WAIT_STAT(0, drops, 1));
	ck_assert_uint_eq(used_idx(0), 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, 100), 0);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(t.q[0].used->ring[0].id, h0);
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 112);
	ck_assert_uint_eq(rx_num_buffers(b0), 1);
	ck_assert_mem_eq(gp(b0 + 12), frame, 100);
	ck_assert_uint_eq(STAT(0, drops), 1);
	dev_destroy();
}
END_TEST

/* A backend that tells a frame's size in advance (peek_len: passt, the fake): a frame that can
 * never fit is dropped and counted, never delivered cut; the buffers take the next frame.
 * _i: 0 MRG_RXBUF, longer than the whole ring (4 buffers of 1000 bytes); 1 without MRG_RXBUF,
 * longer than its one buffer (the ring has more); 2 MRG_RXBUF, longer than RX_MAX_CHAINS (64)
 * buffers of 100 bytes while the ring has 70. */
START_TEST(rx_peek_never_fits_dropped)
{
	static const struct {
		bool mrg;
		u16 size, nbufs;
		u32 buf_len, frame_len;
	} c[] = { { true, 4, 4, 1000, 5000 },
		  { false, 8, 8, 200, 500 },
		  { true, 128, 70, 100, 6800 } };
	static u8 frame[7000];
	u64 b0 = 0;
	u16 h0 = 0;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_RING_F_EVENT_IDX) |
			  (c[_i].mrg ? F(VIRTIO_NET_F_MRG_RXBUF) : 0),
		  c[_i].size);
	for (int i = 0; i < c[_i].nbufs; i++) {
		u64 b = galloc(c[_i].buf_len);
		u16 h = post(0, &(struct vd_buf){ b, c[_i].buf_len, true }, 1);

		if (!i) {
			b0 = b;
			h0 = h;
		}
	}
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 47);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, c[_i].frame_len), 0);
	ck_assert(WAIT_STAT(0, drops, 1));
	ck_assert_uint_eq(used_idx(0), 0);
	ck_assert_uint_eq(STAT(0, packets), 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame + 1, 60), 0);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(t.q[0].used->ring[0].id, h0);
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 72);
	ck_assert_uint_eq(rx_num_buffers(b0), 1);
	ck_assert_mem_eq(gp(b0 + 12), frame + 1, 60);
	ck_assert_uint_eq(STAT(0, packets), 1);
	ck_assert_uint_eq(STAT(0, drops), 1);
	dev_destroy();
}
END_TEST

/* The 12-byte header split over several buffers of the first chain. */
START_TEST(rx_header_split)
{
	u8 frame[64];
	u64 a, b, c;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF), 256);
	a = galloc(7);
	b = galloc(4);
	c = galloc(2000);
	memset(gp(a), 0xee, 7);
	memset(gp(b), 0xee, 4);
	post(0, (struct vd_buf[]){ { a, 7, true }, { b, 4, true }, { c, 2000, true } }, 3);
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 11);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 76);
	/* num_buffers is bytes 10-11: the last byte of b and the first byte of c. */
	ck_assert_uint_eq(*(u8 *)gp(b + 3), 1);
	ck_assert_uint_eq(*(u8 *)gp(c), 0);
	ck_assert_mem_eq(gp(c + 1), frame, sizeof(frame));
	dev_destroy();
}
END_TEST

START_TEST(rx_malformed_chain_needs_reset)
{
	u8 frame[60] = { 1 };

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	/* A receive chain with only a readable buffer. */
	post(0, &(struct vd_buf){ galloc(2048), 2048, false }, 1);
	vd_kick(t.vdev, 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_needs_reset());
	ck_assert_uint_eq(used_idx(0), 0);
	/* TX carries on. */
	u64 tx = galloc(72);
	post(1, &(struct vd_buf){ tx, 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 1));
	dev_destroy();
}
END_TEST

/* ---- TX ---- */

/* A driver whose interrupt handler makes the same TX chain available again at once
 * (endless_set): the ring never runs dry. Stop still ends the TX thread, which looks at it
 * every BATCH chains (each at most one frame): the rule the other devices' threads follow. */
START_TEST(tx_stop_endless_ring)
{
	u64 g;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 64);
	t.vdev->ops->stop(t.vdev);
	endless_set(t.vdev, 1, &t.q[1], t.q[1].next_desc);
	ck_assert_int_eq(t.vdev->ops->start(t.vdev), 0);
	g = galloc(72);
	memset(gp(g), 0, 72);
	post(1, &(struct vd_buf){ g, 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(WAIT_UNTIL(WAIT_MS, endless_served() >= 100));
	t.vdev->ops->stop(t.vdev); /* returns: the thread looked at stop while the ring was full */
	ck_assert_uint_ge(STAT(1, packets) + STAT(1, drops), 100);
	dev_destroy();
}
END_TEST

START_TEST(tx_split_chain)
{
	u8 pkt[112], out[200];
	u64 a, b, c;
	u16 head;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	fill_pattern(pkt, sizeof(pkt), 42);
	a = galloc(10);
	b = galloc(50);
	c = galloc(52);
	memcpy(gp(a), pkt, 10);
	memcpy(gp(b), pkt + 10, 50);
	memcpy(gp(c), pkt + 60, 52);
	head = post(1, (struct vd_buf[]){ { a, 10, false }, { b, 50, false }, { c, 52, false } },
		    3);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 1));
	ck_assert_uint_eq(t.q[1].used->ring[0].id, head);
	ck_assert_uint_eq(t.q[1].used->ring[0].len, 0);
	ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), sizeof(pkt));
	ck_assert_mem_eq(out, pkt, sizeof(pkt));
	ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 0);
	/* The thread's first drain may send the chain before it reads the kick. */
	ck_assert(WAIT_STAT(1, kicks, 1));
	ck_assert_uint_eq(STAT(1, packets), 1);
	ck_assert_uint_eq(STAT(1, bytes), 100);
	ck_assert_uint_eq(STAT(1, batches), 1);
	ck_assert(irq_fired(1, WAIT_MS));

	/* 30 chains, one kick: all sent, in order. */
	for (int i = 0; i < 30; i++) {
		u64 g = galloc(12 + 60);

		memset(gp(g), 0, 12);
		memset(gp(g + 12), i, 60);
		post(1, &(struct vd_buf){ g, 72, false }, 1);
	}
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 31));
	for (int i = 0; i < 30; i++) {
		ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 72);
		ck_assert_uint_eq(out[12], i);
	}
	ck_assert_uint_eq(STAT(1, kicks), 2);
	ck_assert_uint_eq(STAT(1, packets), 31);
	dev_destroy();
}
END_TEST

START_TEST(tx_bad_lengths_dropped)
{
	u8 out[64];

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	post(1, &(struct vd_buf){ galloc(8), 8, false }, 1);	     /* shorter than the header */
	post(1, &(struct vd_buf){ galloc(2048), 2048, true }, 1);    /* nothing readable */
	post(1, &(struct vd_buf){ galloc(70000), 70000, false }, 1); /* longer than any frame */
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 3));
	for (int i = 0; i < 3; i++)
		ck_assert_uint_eq(t.q[1].used->ring[i].len, 0);
	ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 0);
	ck_assert_uint_eq(STAT(1, drops), 3);
	ck_assert_uint_eq(STAT(1, packets), 0);
	ck_assert(!(atomic_load(&t.vdev->status) & VIRTIO_CONFIG_S_NEEDS_RESET));
	dev_destroy();
}
END_TEST

START_TEST(tx_malformed_chain_needs_reset)
{
	u8 frame[60] = { 7 };
	u64 rx, good;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	/* Descriptor 0 points at itself. */
	t.q[1].desc[0] = (struct vring_desc){
		.addr = galloc(64), .len = 64, .flags = VRING_DESC_F_NEXT, .next = 0
	};
	t.q[1].avail->ring[0] = 0;
	__atomic_store_n(&t.q[1].avail->idx, ++t.q[1].aidx, __ATOMIC_RELEASE);
	t.q[1].next_desc = 1;
	vd_kick(t.vdev, 1);
	ck_assert(wait_needs_reset());
	ck_assert_uint_eq(used_idx(1), 0);
	/* The queue is left alone from now on; kicks are still counted. */
	good = galloc(72);
	post(1, &(struct vd_buf){ good, 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_thread_idle("lkvm-net-tx0"));
	ck_assert_uint_eq(used_idx(1), 0);
	/* RX still works. */
	rx = galloc(2048);
	post(0, &(struct vd_buf){ rx, 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	ck_assert_mem_eq(gp(rx + 12), frame, sizeof(frame));
	dev_destroy();
}
END_TEST

START_TEST(tx_buffer_outside_ram_needs_reset)
{
	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	post(1, &(struct vd_buf){ RAM_SIZE - 16, 64, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_needs_reset());
	ck_assert_uint_eq(used_idx(1), 0);
	dev_destroy();
}
END_TEST

/* The backend disappears (a deleted tap): link down in the config space, a config-change
 * interrupt, one log line; TX keeps consuming (dropping) what the guest sends. */
START_TEST(backend_gone_link_down)
{
	struct virtio_net_config c;
	struct capture cap;
	char out[512];
	int lines;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_STATUS), 256);
	t.vdev->ops->config_read(t.vdev, 0, (u8 *)&c, sizeof(c));
	ck_assert_uint_eq(c.status, VIRTIO_NET_S_LINK_UP);
	ck_assert_uint_eq(atomic_load(&t.vdev->isr), 0);
	post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	capture_start(&cap);
	net_fake_set_gone(t.be[0]);
	for (int ms = 0; ms < WAIT_MS && !(atomic_load(&t.vdev->isr) & 2); ms++)
		poll(NULL, 0, 1);
	ck_assert_uint_eq(atomic_load(&t.vdev->isr) & 2, 2);
	t.vdev->ops->config_read(t.vdev, 0, (u8 *)&c, sizeof(c));
	ck_assert_uint_eq(c.status & VIRTIO_NET_S_LINK_UP, 0);
	/* TX: each chain used (and counted as dropped), none left waiting. */
	for (int i = 0; i < 10; i++)
		post(1, &(struct vd_buf){ galloc(72), 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 10));
	ck_assert_uint_eq(STAT(1, drops), 10);
	/* A reset and a new start: still down, still quiet. */
	t.vdev->ops->stop(t.vdev);
	ck_assert_int_eq(t.vdev->ops->start(t.vdev), 0);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	lines = capture_end(&cap, out, sizeof(out));
	ck_assert_int_eq(lines, 1);
	ck_assert_msg(strstr(out, "fake fake is gone") && strstr(out, "link down"), "%s", out);
	t.vdev->ops->config_read(t.vdev, 0, (u8 *)&c, sizeof(c));
	ck_assert_uint_eq(c.status & VIRTIO_NET_S_LINK_UP, 0);
	dev_destroy();
}
END_TEST

/* ---- the stream backend (passt's protocol) ---- */

/* The peer's side of a stream record: read one record whole (blocking, bounded by
 * SO_RCVTIMEO); returns the frame's length, or -1. */
static ssize_t peer_read_record(int fd, u8 *frame, size_t cap)
{
	u8 len_be[4];
	size_t len;

	if (recv(fd, len_be, 4, MSG_WAITALL) != 4)
		return -1;
	len = (size_t)len_be[0] << 24 | (size_t)len_be[1] << 16 | (size_t)len_be[2] << 8 |
	      len_be[3];
	if (len > cap || recv(fd, frame, len, MSG_WAITALL) != (ssize_t)len)
		return -1;
	return (ssize_t)len;
}

/* Frames guest -> stream and stream -> guest through the device's TX and RX threads, as with
 * passt: no offloads offered, a plain header on received frames, one record per frame
 * whatever the chain's split; the peer closing turns the link down. */
START_TEST(stream_backend_moves_frames)
{
	struct timeval tv = { .tv_sec = 2 };
	struct virtio_net_config c;
	struct net_backend *be;
	struct capture cap;
	u8 frame[1514], got[2048];
	char out[512];
	u64 rx[12], a, b;
	int sv[2], lines;

	signal(SIGPIPE, SIG_IGN); /* as lkvm: a closed peer is EPIPE */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_int_eq(setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	ck_assert_int_eq(net_stream_backend(sv[0], &be), 0);
	ck_assert(be->plain_frames);
	ck_assert_int_ne(fcntl(sv[0], F_GETFL) & O_NONBLOCK, 0);
	dev_create(1, be);
	/* Nothing to offload to passt, in either direction. */
	ck_assert_uint_eq(t.vdev->ops->get_features(t.vdev) &
				  (F(VIRTIO_NET_F_CSUM) | F(VIRTIO_NET_F_GUEST_CSUM) |
				   F(VIRTIO_NET_F_HOST_TSO4) | F(VIRTIO_NET_F_GUEST_TSO4) |
				   F(VIRTIO_NET_F_HOST_TSO6) | F(VIRTIO_NET_F_GUEST_TSO6)),
			  0);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_STATUS) | F(VIRTIO_NET_F_MRG_RXBUF), 256);

	/* TX: the header split from the frame across two buffers; the record is the frame. */
	fill_pattern(frame, sizeof(frame), 3);
	a = galloc(20);
	b = galloc(sizeof(frame));
	memset(gp(a), 0, 12);
	memcpy(gp(a + 12), frame, 8);
	memcpy(gp(b), frame + 8, sizeof(frame) - 8);
	post(1, (struct vd_buf[]){ { a, 20, false }, { b, sizeof(frame) - 8, false } }, 2);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 1));
	ck_assert_int_eq(peer_read_record(sv[1], got, sizeof(got)), sizeof(frame));
	ck_assert_mem_eq(got, frame, sizeof(frame));
	/* A header asking for a checksum offload that was not offered: dropped, not sent. */
	a = galloc(12 + 60);
	memset(gp(a), 0, 12 + 60);
	((struct virtio_net_hdr_v1 *)gp(a))->flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
	post(1, &(struct vd_buf){ a, 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 2));
	ck_assert(WAIT_STAT(1, drops, 1));
	ck_assert_uint_eq(STAT(1, packets), 1);
	ck_assert_uint_eq(STAT(1, bytes), sizeof(frame));

	/* RX: ten records in one write (a zero-length one among them), ten buffers. */
	for (int i = 0; i < 10; i++) {
		rx[i] = galloc(2048);
		memset(gp(rx[i]), 0xee, 12);
		post(0, &(struct vd_buf){ rx[i], 2048, true }, 1);
	}
	vd_kick(t.vdev, 0);
	{
		u8 burst[10 * (4 + 200) + 4], *p = burst;

		for (int i = 0; i < 10; i++) {
			size_t len = 60 + 10 * (size_t)i;

			p[0] = p[1] = 0;
			p[2] = (u8)(len >> 8);
			p[3] = (u8)len;
			fill_pattern(p + 4, len, (u8)i);
			p += 4 + len;
			if (i == 4) {
				memset(p, 0, 4); /* length 0: skipped */
				p += 4;
			}
		}
		ck_assert_uint_eq(write_full(sv[1], burst, (size_t)(p - burst)),
				  (size_t)(p - burst));
	}
	ck_assert(wait_used(0, 10));
	for (int i = 0; i < 10; i++) {
		struct virtio_net_hdr_v1 h;
		size_t len = 60 + 10 * (size_t)i;

		fill_pattern(frame, len, (u8)i);
		ck_assert_uint_eq(t.q[0].used->ring[i].len, 12 + len);
		memcpy(&h, gp(rx[i]), sizeof(h));
		ck_assert_uint_eq(h.flags, 0);
		ck_assert_uint_eq(h.gso_type, VIRTIO_NET_HDR_GSO_NONE);
		ck_assert_uint_eq(h.num_buffers, 1);
		ck_assert_mem_eq(gp(rx[i] + 12), frame, len);
	}
	ck_assert_uint_eq(STAT(0, packets), 10);
	ck_assert_uint_eq(STAT(0, drops), 0);

	/* A frame split across two writes arrives once whole. */
	rx[10] = galloc(2048);
	post(0, &(struct vd_buf){ rx[10], 2048, true }, 1);
	vd_kick(t.vdev, 0);
	fill_pattern(frame, 300, 77);
	{
		u8 rec[304] = { 0, 0, 300 >> 8, 300 & 0xff };

		memcpy(rec + 4, frame, 300);
		ck_assert_uint_eq(write_full(sv[1], rec, 150), 150);
		ck_assert(wait_thread_idle("lkvm-net-rx0"));
		ck_assert_uint_eq(used_idx(0), 10);
		ck_assert_uint_eq(write_full(sv[1], rec + 150, 154), 154);
	}
	ck_assert(wait_used(0, 11));
	ck_assert_mem_eq(gp(rx[10] + 12), frame, 300);

	/* The peer (passt) goes away: link down, one line, the guest's frames dropped. */
	capture_start(&cap);
	close(sv[1]);
	ck_assert(WAIT_UNTIL(WAIT_MS, atomic_load(&t.vdev->isr) & 2));
	t.vdev->ops->config_read(t.vdev, 0, (u8 *)&c, sizeof(c));
	ck_assert_uint_eq(c.status & VIRTIO_NET_S_LINK_UP, 0);
	post(1, &(struct vd_buf){ galloc(72), 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 3));
	ck_assert(WAIT_STAT(1, drops, 2));
	lines = capture_end(&cap, out, sizeof(out));
	ck_assert_int_eq(lines, 1);
	ck_assert_msg(strstr(out, "passt stream is gone") && strstr(out, "link down"), "%s", out);
	dev_destroy();
}
END_TEST

/* ---- notification suppression ---- */

START_TEST(event_idx_suppresses_interrupts)
{
	u8 frame[60] = { 0 };
	u16 *used_event, *avail_event;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_RING_F_EVENT_IDX), 256);
	used_event = &t.q[0].avail->ring[256];
	for (int i = 0; i < 4; i++)
		post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	ck_assert(irq_fired(0, WAIT_MS)); /* the first one always interrupts */
	/* Interrupt only after used idx passes 5: nothing for the next two. */
	__atomic_store_n(used_event, 4, __ATOMIC_RELEASE);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 2));
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 3));
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert(!irq_fired(0, 0));
	/* used_event = 3: the next element takes used idx from 3 to 4, crossing it. */
	__atomic_store_n(used_event, 3, __ATOMIC_RELEASE);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 4));
	ck_assert(irq_fired(0, WAIT_MS));
	ck_assert_uint_eq(STAT(0, irqs), 2);

	/* TX: after draining, avail_event asks for a kick at the next chain only. */
	avail_event = (u16 *)(void *)&t.q[1].used->ring[256];
	for (int i = 0; i < 3; i++)
		post(1, &(struct vd_buf){ galloc(72), 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 3));
	ck_assert(wait_cond_u16(avail_event, 3));
	dev_destroy();
}
END_TEST

START_TEST(no_interrupt_flag_respected)
{
	u8 frame[60] = { 0 };

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	t.q[0].avail->flags = VRING_AVAIL_F_NO_INTERRUPT;
	post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert(!irq_fired(0, 0));
	ck_assert_uint_eq(STAT(0, irqs), 0);
	dev_destroy();
}
END_TEST

/* ---- control queue ---- */

/* Send one command (readable parts as given) with a 1-byte status; returns the ack. */
static u8 ctl(int qi, const void *cmd, u32 len, u32 split)
{
	u64 a = galloc(len + 1), st = galloc(1);
	u16 want = (u16)(used_idx(qi) + 1);
	struct vd_buf b[3];
	int nb = 0;

	if (len)
		memcpy(gp(a), cmd, len);
	*(u8 *)gp(st) = 0xaa;
	if (split && split < len) {
		b[nb++] = (struct vd_buf){ a, split, false };
		b[nb++] = (struct vd_buf){ a + split, len - split, false };
	} else if (len) {
		b[nb++] = (struct vd_buf){ a, len, false };
	}
	b[nb++] = (struct vd_buf){ st, 1, true };
	post(qi, b, nb);
	vd_kick(t.vdev, qi);
	ck_assert(wait_used(qi, want));
	ck_assert_uint_eq(t.q[qi].used->ring[(u16)(want - 1) % t.q[qi].size].len, 1);
	return *(u8 *)gp(st);
}

START_TEST(ctrl_commands)
{
	u8 promisc[] = { VIRTIO_NET_CTRL_RX, VIRTIO_NET_CTRL_RX_PROMISC, 1 };
	u8 allmulti_bad[] = { VIRTIO_NET_CTRL_RX, VIRTIO_NET_CTRL_RX_ALLMULTI };
	u8 mac_set[] = {
		VIRTIO_NET_CTRL_MAC, VIRTIO_NET_CTRL_MAC_ADDR_SET, 2, 0, 0, 0xaa, 0xbb, 0xcc
	};
	u8 mac_short[] = { VIRTIO_NET_CTRL_MAC, VIRTIO_NET_CTRL_MAC_ADDR_SET, 2, 0, 0 };
	u8 table[2 + 4 + 6 + 4 + 12] = { VIRTIO_NET_CTRL_MAC, VIRTIO_NET_CTRL_MAC_TABLE_SET, 1 };
	u8 table_bad[2 + 4 + 6 + 4] = { VIRTIO_NET_CTRL_MAC,
					VIRTIO_NET_CTRL_MAC_TABLE_SET,
					1,
					0,
					0,
					0,
					1,
					2,
					3,
					4,
					5,
					6,
					0xff,
					0xff,
					0xff,
					0xff };
	u8 mq[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 1, 0 };
	u8 unknown[] = { 99, 0, 0 };
	u8 vlan[] = { VIRTIO_NET_CTRL_VLAN, VIRTIO_NET_CTRL_VLAN_ADD, 1, 0 };
	u8 one[] = { VIRTIO_NET_CTRL_RX };
	u8 mac[6];

	dev_create(1, NULL);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_CTRL_RX), 64);
	table[2 + 4 + 6] = 2; /* second table: 2 entries */
	ck_assert_uint_eq(ctl(2, promisc, sizeof(promisc), 0), VIRTIO_NET_OK);
	ck_assert_uint_eq(ctl(2, promisc, sizeof(promisc), 1), VIRTIO_NET_OK); /* header split */
	ck_assert_uint_eq(ctl(2, allmulti_bad, sizeof(allmulti_bad), 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(2, mac_set, sizeof(mac_set), 5), VIRTIO_NET_OK);
	t.vdev->ops->config_read(t.vdev, 0, mac, 6);
	ck_assert_mem_eq(mac, "\x02\x00\x00\xaa\xbb\xcc", 6);
	ck_assert_uint_eq(ctl(2, mac_short, sizeof(mac_short), 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(2, table, sizeof(table), 9), VIRTIO_NET_OK);
	ck_assert_uint_eq(ctl(2, table, sizeof(table) - 1, 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(2, table_bad, sizeof(table_bad), 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(2, mq, sizeof(mq), 0), VIRTIO_NET_ERR); /* MQ not negotiated */
	ck_assert_uint_eq(ctl(2, unknown, sizeof(unknown), 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(2, vlan, sizeof(vlan), 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(2, one, sizeof(one), 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(2, NULL, 0, 0), VIRTIO_NET_ERR);
	/* No status byte: given back with length 0, queue still fine. */
	post(2, &(struct vd_buf){ galloc(3), 3, false }, 1);
	vd_kick(t.vdev, 2);
	ck_assert(wait_used(2, 14));
	ck_assert_uint_eq(t.q[2].used->ring[13].len, 0);
	ck_assert_uint_eq(ctl(2, promisc, sizeof(promisc), 0), VIRTIO_NET_OK);
	ck_assert(!(atomic_load(&t.vdev->status) & VIRTIO_CONFIG_S_NEEDS_RESET));
	/* A malformed chain does break it. */
	post(2, &(struct vd_buf){ RAM_SIZE, 16, false }, 1);
	vd_kick(t.vdev, 2);
	ck_assert(wait_needs_reset());
	dev_destroy();
}
END_TEST

/* ---- multiqueue, negotiation, config, lifecycle ---- */

static int count_threads(const char *name)
{
	return threads_named(name, NULL, 0);
}

START_TEST(multiqueue_pairs)
{
	u8 mq2[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 2, 0 };
	u8 mq3[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 3, 0 };
	u8 mq0[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 0, 0 };
	u8 out[128], frame[60] = { 0x33 };
	u64 g, rx;

	dev_create(2, NULL);
	ck_assert(t.vdev->ops->get_features(t.vdev) & F(VIRTIO_NET_F_MQ));
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MQ), 256);
	ck_assert_int_eq(count_threads("lkvm-net-rx0"), 1);
	ck_assert_int_eq(count_threads("lkvm-net-tx1"), 1);
	ck_assert_int_eq(count_threads("lkvm-net-ctl"), 1);
	/* Control queue is queue 4. */
	ck_assert_uint_eq(ctl(4, mq2, sizeof(mq2), 0), VIRTIO_NET_OK);
	ck_assert_uint_eq(ctl(4, mq3, sizeof(mq3), 0), VIRTIO_NET_ERR);
	ck_assert_uint_eq(ctl(4, mq0, sizeof(mq0), 0), VIRTIO_NET_ERR);
	/* tx1 goes to the second backend, rx1 comes from it. */
	g = galloc(80);
	memset(gp(g), 0, 80);
	post(3, &(struct vd_buf){ g, 80, false }, 1);
	vd_kick(t.vdev, 3);
	ck_assert(wait_used(3, 1));
	ck_assert_int_eq(net_fake_take(t.be[1], out, sizeof(out)), 80);
	ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 0);
	rx = galloc(2048);
	post(2, &(struct vd_buf){ rx, 2048, true }, 1);
	vd_kick(t.vdev, 2);
	ck_assert_int_eq(net_fake_inject(t.be[1], frame, sizeof(frame)), 0);
	ck_assert(wait_used(2, 1));
	ck_assert_uint_eq(STAT(2, packets), 1);
	ck_assert_uint_eq(STAT(0, packets), 0);
	dev_destroy();
	ck_assert_int_eq(count_threads("lkvm-net-tx1"), 0);
}
END_TEST

/* Only the pairs the driver enabled receive (virtio 1.2 5.1.6.5.5): pair 0 alone from
 * creation, at start and after a reset; VQ_PAIRS_SET moves the others' backend queues in and
 * out of the host's steering; a bad command is refused and changes nothing. */
START_TEST(multiqueue_active_pairs)
{
	u8 mq1[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 1, 0 };
	u8 mq2[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 2, 0 };
	u8 bad[][5] = {
		{ VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 0, 0 },	  /* no pair */
		{ VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 3, 0 },	  /* > max */
		{ VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 0, 1 },	  /* 256 */
		{ VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 2 },	  /* short */
		{ VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 2, 0, 0 }, /* long */
		{ VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_RSS_CONFIG, 2, 0 },	  /* no RSS */
	};
	u32 bad_len[] = { 4, 4, 4, 3, 5, 4 };
	u8 frame[60] = { 0x33 }, out[128];
	u64 tx;

	dev_create(2, NULL);
	tx = galloc(80);
	ck_assert(net_fake_enabled(t.be[0]));
	ck_assert(!net_fake_enabled(t.be[1]));
	ck_assert_int_eq(net_fake_inject(t.be[1], frame, sizeof(frame)), -ENOLINK);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MQ), 256);
	ck_assert(!net_fake_enabled(t.be[1]));
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 4; j++)
			post(2 * i, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
		vd_kick(t.vdev, 2 * i);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		ck_assert_uint_eq(ctl(4, bad[i], bad_len[i], 0), VIRTIO_NET_ERR);
		ck_assert(!net_fake_enabled(t.be[1]));
	}
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	/* A chain the driver leaves on an inactive pair's TX queue still goes out. */
	memset(gp(tx), 0, 80);
	post(3, &(struct vd_buf){ tx, 80, false }, 1);
	vd_kick(t.vdev, 3);
	ck_assert(wait_used(3, 1));
	ck_assert_int_eq(net_fake_take(t.be[1], out, sizeof(out)), 80);

	ck_assert_uint_eq(ctl(4, mq2, sizeof(mq2), 0), VIRTIO_NET_OK);
	ck_assert(net_fake_enabled(t.be[1]));
	ck_assert_int_eq(net_fake_inject(t.be[1], frame, sizeof(frame)), 0);
	ck_assert(wait_used(2, 1));
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		ck_assert_uint_eq(ctl(4, bad[i], bad_len[i], 0), VIRTIO_NET_ERR);
		ck_assert(net_fake_enabled(t.be[1]));
	}
	ck_assert_uint_eq(ctl(4, mq1, sizeof(mq1), 0), VIRTIO_NET_OK);
	ck_assert(!net_fake_enabled(t.be[1]));
	ck_assert_uint_eq(ctl(4, mq2, sizeof(mq2), 0), VIRTIO_NET_OK);
	ck_assert(net_fake_enabled(t.be[1]));
	/* A reset: pair 0 alone again. */
	virtio_device_reset(t.vdev);
	ck_assert(!net_fake_enabled(t.be[1]));
	ck_assert_uint_eq(STAT(2, packets), 1);
	dev_destroy();
}
END_TEST

/* The same over a real two-queue tap: flows the host sends reach only pair 0 until
 * VQ_PAIRS_SET 2, then both pairs (the tap spreads them by hash), and after a reset the
 * second queue is out of the steering again. */
START_TEST(multiqueue_tap_steering)
{
	static const u8 mac[6] = VIRTIO_NET_DEFAULT_MAC;
	u8 mq2[] = { VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, 2, 0 };
	struct net_opts o;
	char err[160];
	u64 rx0;
	int ps;

	enter_netns();
	memset(&t, 0, sizeof(t));
	vd_vm_new(RAM_SIZE, BUF_BASE);
	ck_assert_int_eq(net_parse_opts("tapif=lkvmv0,queues=2,script=none", &o, err, sizeof(err)),
			 0);
	ck_assert_msg(net_tap_open(&o, t.be, 2, err, sizeof(err)) == 0, "%s", err);
	dev_create_be(2, o);
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MQ), 256);
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 200; j++)
			post(2 * i, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
		vd_kick(t.vdev, 2 * i);
	}
	ps = tap_host_socket("lkvmv0");
	tap_send_flows(ps, mac, 64);
	ck_assert(WAIT_UNTIL(WAIT_MS, STAT(0, packets) >= 64));
	ck_assert_uint_eq(STAT(2, packets), 0);
	ck_assert_uint_eq(used_idx(2), 0);

	ck_assert_uint_eq(ctl(4, mq2, sizeof(mq2), 0), VIRTIO_NET_OK);
	rx0 = STAT(0, packets);
	tap_send_flows(ps, mac, 64);
	ck_assert(WAIT_UNTIL(WAIT_MS, STAT(0, packets) + STAT(2, packets) >= rx0 + 64));
	ck_assert_uint_gt(STAT(0, packets), rx0);
	ck_assert_uint_gt(STAT(2, packets), 0); /* all 64 flows on one queue: 2^-63 */

	/* Reset: the threads are gone, the tap's queues hold what comes; only the first gets it. */
	virtio_device_reset(t.vdev);
	tap_send_flows(ps, mac, 64);
	ck_assert_int_eq(tap_take_flows(t.be[0]), 64);
	ck_assert_int_eq(tap_take_flows(t.be[1]), 0);
	close(ps);
	dev_destroy();
}
END_TEST

START_TEST(features_negotiation)
{
	struct virtio_device *v;
	u64 off, ver = F(VIRTIO_F_VERSION_1);
	struct net_offloads o;

	dev_create(1, NULL);
	v = t.vdev;
	off = v->ops->get_features(v);
	ck_assert(!(off & F(VIRTIO_NET_F_MQ)));
	ck_assert(off & F(VIRTIO_RING_F_EVENT_IDX));
	ck_assert(off & F(VIRTIO_RING_F_INDIRECT_DESC));
	ck_assert(off & F(VIRTIO_NET_F_MRG_RXBUF));
	ck_assert(off & F(VIRTIO_NET_F_CTRL_RX));
	ck_assert(v->ops->features_ok(v, off | ver));
	ck_assert(v->ops->features_ok(v, ver));
	ck_assert(!v->ops->features_ok(v, off)); /* no VERSION_1 */
	ck_assert(!v->ops->features_ok(v, ver | F(VIRTIO_NET_F_GUEST_TSO4)));
	ck_assert(!v->ops->features_ok(v, ver | F(VIRTIO_NET_F_GUEST_TSO6)));
	ck_assert(v->ops->features_ok(v, ver | F(VIRTIO_NET_F_GUEST_TSO6) |
						 F(VIRTIO_NET_F_GUEST_CSUM)));
	ck_assert(!v->ops->features_ok(v, ver | F(VIRTIO_NET_F_HOST_TSO4)));
	ck_assert(!v->ops->features_ok(v, ver | F(VIRTIO_NET_F_HOST_TSO6)));
	ck_assert(v->ops->features_ok(v, ver | F(VIRTIO_NET_F_HOST_TSO4) | F(VIRTIO_NET_F_CSUM)));
	ck_assert(!v->ops->features_ok(v, ver | F(VIRTIO_NET_F_CTRL_RX)));
	ck_assert(!v->ops->features_ok(v, ver | F(VIRTIO_NET_F_MQ) | F(VIRTIO_NET_F_CTRL_VQ)));
	ck_assert(!v->ops->features_ok(v, ver | F(VIRTIO_NET_F_GUEST_UFO) |
						  F(VIRTIO_NET_F_GUEST_CSUM)));
	ck_assert_uint_eq(v->ops->device_id, 1);
	ck_assert_int_eq(v->nr_queues, 3);
	ck_assert_uint_eq(v->q[0].max_size, 256);
	/* Offloads follow the negotiated guest features at start. */
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_GUEST_CSUM) | F(VIRTIO_NET_F_GUEST_TSO4), 16);
	net_fake_offloads(t.be[0], &o);
	ck_assert(o.csum && o.tso4 && !o.tso6);
	dev_destroy();
}
END_TEST

START_TEST(config_space)
{
	struct virtio_net_config c;
	u8 b[4], big[64];
	struct net_opts o = { .mode = NET_MODE_FAKE,
			      .queue_pairs = 3,
			      .mac_set = true,
			      .guest_mac = { 2, 1, 2, 3, 4, 5 } };
	struct net_backend *be[NET_MAX_QUEUE_PAIRS] = { net_fake_create(), net_fake_create(),
							net_fake_create() };
	struct virtio_net *n2;
	struct virtio_device *v2;

	dev_create(1, NULL);
	ck_assert_uint_eq(t.vdev->ops->config_size, sizeof(c));
	t.vdev->ops->config_read(t.vdev, 0, (u8 *)&c, sizeof(c));
	ck_assert_mem_eq(c.mac, "\x52\x54\x00\x12\x34\x56", 6);
	ck_assert_uint_eq(c.status, VIRTIO_NET_S_LINK_UP);
	ck_assert_uint_eq(c.max_virtqueue_pairs, 1);
	t.vdev->ops->config_read(t.vdev, 5, b, 3); /* any offset and width */
	ck_assert_mem_eq(b, "\x56\x01\x00", 3);
	memset(big, 0xff, sizeof(big));
	t.vdev->ops->config_read(t.vdev, 20, big, 10); /* past the end reads as zero */
	for (int i = 0; i < 10; i++)
		ck_assert_uint_eq(big[i], 0);
	t.vdev->ops->config_write(t.vdev, 0, (const u8 *)"\xff\xff", 2); /* ignored */
	t.vdev->ops->config_read(t.vdev, 0, b, 2);
	ck_assert_mem_eq(b, "\x52\x54", 2);

	/* A second NIC: its own MAC, three pairs, seven queues. */
	ck_assert_int_eq(virtio_net_create_bare(vd.kvm, &o, be, &n2), 0);
	v2 = virtio_net_vdev(n2);
	v2->ops->config_read(v2, 0, (u8 *)&c, sizeof(c));
	ck_assert_mem_eq(c.mac, "\x02\x01\x02\x03\x04\x05", 6);
	ck_assert_uint_eq(c.max_virtqueue_pairs, 3);
	ck_assert_int_eq(v2->nr_queues, 7);
	virtio_net_destroy(n2); /* never started */
	o.mac_set = false;
	be[0] = net_fake_create();
	ck_assert_int_eq(virtio_net_create_bare(vd.kvm, &o, be, &n2), -EINVAL); /* be[1] missing */
	o.queue_pairs = 1;
	be[0] = net_fake_create();
	ck_assert_int_eq(virtio_net_create_bare(vd.kvm, &o, be, &n2), 0);
	virtio_net_vdev(n2)->ops->config_read(virtio_net_vdev(n2), 0, (u8 *)&c, sizeof(c));
	/* The device does not number NICs (lkvm run does: test_vm.c). */
	ck_assert_mem_eq(c.mac, "\x52\x54\x00\x12\x34\x56", 6);
	virtio_net_destroy(n2);
	dev_destroy();
}
END_TEST

/* A backend that is always full, to see a TX thread blocked on it still stop. */
struct stuck {
	struct net_backend be;
	int sends;
};

static ssize_t stuck_send(struct net_backend *be, const struct iovec *iov, int n)
{
	__atomic_add_fetch(&((struct stuck *)be->priv)->sends, 1, __ATOMIC_RELAXED);
	return -EAGAIN;
}

static ssize_t stuck_recv(struct net_backend *be, const struct iovec *iov, int n)
{
	return -EAGAIN;
}

static void stuck_close(struct net_backend *be)
{
	close(be->rx_fd);
	close(be->tx_fd);
	free(be->priv);
}

static const struct net_backend_ops stuck_ops = {
	.send = stuck_send,
	.recv = stuck_recv,
	.close = stuck_close,
};

/* A stuck backend of ops: its tx_fd an eventfd at its maximum, which is never writable. */
static struct stuck *stuck_new(const struct net_backend_ops *ops)
{
	struct stuck *s = calloc(1, sizeof(*s));
	u64 max = 0xfffffffffffffffeULL;

	ck_assert_ptr_nonnull(s);
	s->be.ops = ops;
	s->be.priv = s;
	s->be.rx_fd = eventfd(0, EFD_NONBLOCK);
	s->be.tx_fd = eventfd(0, EFD_NONBLOCK);
	ck_assert_int_eq(write(s->be.tx_fd, &max, sizeof(max)), sizeof(max));
	return s;
}

START_TEST(stop_while_backend_full)
{
	struct stuck *s = stuck_new(&stuck_ops);

	dev_create(1, &s->be);
	dev_start(BASE_FEATURES, 256);
	post(1, &(struct vd_buf){ galloc(72), 72, false }, 1);
	vd_kick(t.vdev, 1);
	for (int ms = 0; ms < WAIT_MS && !__atomic_load_n(&s->sends, __ATOMIC_RELAXED); ms++)
		poll(NULL, 0, 1);
	ck_assert(wait_thread_idle("lkvm-net-tx0"));
	ck_assert_int_eq(__atomic_load_n(&s->sends, __ATOMIC_RELAXED),
			 1); /* waiting, not spinning */
	/* RX without peek_len: a buffer but no frame, so nothing delivered. */
	post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	t.vdev->ops->stop(t.vdev);
	/* The chain was not consumed: given back for the next start. */
	ck_assert_uint_eq(t.vdev->q[1].vq.last_avail, 0);
	ck_assert_uint_eq(used_idx(1), 0);
	ck_assert_uint_eq(t.vdev->q[0].vq.last_avail, 0);
	ck_assert_int_eq(count_threads("lkvm-net-tx0"), 0);
	dev_destroy();
}
END_TEST

/* A backend whose fd stays readable while every receive fails: RX must pause, not spin. */
static ssize_t failing_recv(struct net_backend *be, const struct iovec *iov, int n)
{
	__atomic_add_fetch(&((struct stuck *)be->priv)->sends, 1, __ATOMIC_RELAXED);
	return -EIO;
}

static const struct net_backend_ops failing_ops = {
	.send = stuck_send,
	.recv = failing_recv,
	.close = stuck_close,
};

START_TEST(rx_backend_error_backs_off)
{
	struct stuck *s = calloc(1, sizeof(*s));
	u64 one = 1, t0, elapsed_ms;
	int tries;

	ck_assert_ptr_nonnull(s);
	s->be.ops = &failing_ops;
	s->be.priv = s;
	s->be.rx_fd = eventfd(0, EFD_NONBLOCK);
	s->be.tx_fd = eventfd(0, EFD_NONBLOCK);
	ck_assert_int_eq(write(s->be.rx_fd, &one, sizeof(one)), sizeof(one)); /* always readable */
	dev_create(1, &s->be);
	t0 = now_ns();
	dev_start(BASE_FEATURES, 256);
	post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	/* Wait for a count of tries, not for a time: at least 10 ms apart, so the 5th comes
	 * 40 ms or more after the first however loaded the machine is. */
	for (int ms = 0; ms < 10 * WAIT_MS && __atomic_load_n(&s->sends, __ATOMIC_RELAXED) < 5;
	     ms++)
		poll(NULL, 0, 1);
	t.vdev->ops->stop(t.vdev); /* threads joined: the counts below are final */
	elapsed_ms = (now_ns() - t0) / 1000000;
	tries = __atomic_load_n(&s->sends, __ATOMIC_RELAXED);
	ck_assert_int_ge(tries, 5);
	/* A pause between tries: a spinning thread would make thousands in this time. */
	ck_assert_msg((u64)(tries - 1) * 10 <= elapsed_ms, "%d tries in %llu ms", tries,
		      (unsigned long long)elapsed_ms);
	ck_assert_uint_eq(STAT(0, drops), (u64)tries);
	ck_assert_uint_eq(used_idx(0), 0); /* the buffer was given back, not consumed */
	dev_destroy();
}
END_TEST

/* Guest RAM is what it was at snap. */
static bool ram_is(const u8 *snap)
{
	return !memcmp(snap, vd.ram, RAM_SIZE);
}

/*
 * A paused NIC moves nothing: a frame the guest sends waits in the ring, one the host sends
 * waits in the backend, no guest byte changes and no interrupt is raised; after resume both
 * go through. For every TX strategy (kick, timer, poll: each waits in its own place).
 */
START_TEST(quiesce_holds_frames)
{
	static const enum net_tx_mode modes[] = { NET_TX_KICK, NET_TX_TIMER, NET_TX_POLL };
	u8 frame[60], out[200], *snap = malloc(RAM_SIZE);
	u64 rx, tx;

	ck_assert_ptr_nonnull(snap);
	dev_create_opts(1, NULL, (struct net_opts){ .tx_mode = modes[_i] });
	dev_start(BASE_FEATURES, 256);
	rx = galloc(2048);
	post(0, &(struct vd_buf){ rx, 2048, true }, 1);
	vd_kick(t.vdev, 0);
	virtio_net_quiesce(t.n);
	fill_pattern(frame, sizeof(frame), 9);
	tx = galloc(72);
	memcpy(gp(tx + 12), frame, sizeof(frame));
	post(1, &(struct vd_buf){ tx, 72, false }, 1);
	/* The memory as it stands, then what would wake the threads. */
	memcpy(snap, vd.ram, RAM_SIZE);
	vd_kick(t.vdev, 1);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(HOLDS_FOR(100, ram_is(snap) && net_fake_pending(t.be[0]) == 1));
	ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 0);
	ck_assert_uint_eq(STAT(0, irqs) + STAT(1, irqs), 0);
	virtio_net_resume(t.n);
	ck_assert(wait_used(1, 1));
	ck_assert(wait_used(0, 1));
	ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 72);
	ck_assert_mem_eq(out + 12, frame, sizeof(frame));
	ck_assert_mem_eq(gp(rx + 12), frame, sizeof(frame));
	dev_destroy();
	free(snap);
}
END_TEST

static void net_visit(void *dev, struct stats_visitor *v)
{
	virtio_net_stats(dev, v);
}

START_TEST(restart_and_stats)
{
	u8 frame[60] = { 0 };
	char *buf;
	int depth = 0;

	dev_create(1, NULL);
	dev_start(BASE_FEATURES, 256);
	post(1, &(struct vd_buf){ galloc(72), 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 1));
	t.vdev->ops->stop(t.vdev);
	t.vdev->ops->stop(t.vdev); /* idempotent */
	ck_assert_int_eq(t.vdev->ops->start(t.vdev), 0);
	ck_assert_int_eq(t.vdev->ops->start(t.vdev), 0); /* restart without stop */
	post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 1));
	ck_assert_int_eq(count_threads("lkvm-net-rx0"), 1);

	buf = stats_fmt("net", t.n, net_visit, false);
	ck_assert_ptr_nonnull(strstr(buf, "net0:\n"));
	ck_assert_ptr_nonnull(strstr(buf, "pkts/kick"));
	ck_assert_ptr_nonnull(strstr(buf, "\nrx0 "));
	ck_assert_ptr_nonnull(strstr(buf, "\ntx0 "));
	ck_assert_ptr_nonnull(strstr(buf, "\nctrl "));
	free(buf);
	buf = stats_fmt("net", t.n, net_visit, true);
	ck_assert_ptr_nonnull(
		strstr(buf, "\"nets\":[{\"nic\":0,\"queues\":[{\"name\":\"rx0\",\"kicks\":1,"));
	ck_assert_ptr_nonnull(strstr(
		buf,
		"{\"name\":\"tx0\",\"kicks\":1,\"trapped\":0,\"irqs\":1,\"packets\":1,\"bytes\":60,"));
	ck_assert_ptr_nonnull(strstr(buf, "\"name\":\"ctrl\""));
	ck_assert_ptr_nonnull(strstr(buf, "\"pkts_per_irq\":null"));
	for (char *p = buf; *p; p++) {
		depth += (*p == '{' || *p == '[') - (*p == '}' || *p == ']');
		ck_assert_int_ge(depth, 0);
	}
	ck_assert_int_eq(depth, 0);
	ck_assert_int_eq(buf[strlen(buf) - 2], '}'); /* one JSON object per line */
	ck_assert_int_eq(buf[strlen(buf) - 1], '\n');
	free(buf);
	dev_destroy();
}
END_TEST

/* ---- the TX wake-up protocol in every strategy (kick, timer, poll) ---- */

/* The driver's side of notification suppression (virtio 1.2 §2.7.10): after publishing
 * avail->idx (old -> new), a full barrier, then the device's avail_event or NO_NOTIFY flag. */
static bool driver_wants_kick(int qi, u16 old, u16 new, bool event_idx)
{
	struct vd_queue *d = &t.q[qi];

	full_barrier();
	if (event_idx) {
		u16 ev = __atomic_load_n((u16 *)(void *)&d->used->ring[d->size], __ATOMIC_RELAXED);

		return (u16)(new - ev - 1) < (u16)(new - old);
	}
	return !(__atomic_load_n(&d->used->flags, __ATOMIC_RELAXED) & VRING_USED_F_NO_NOTIFY);
}

/* Post one 72-byte TX frame and kick only if the driver rule says so. */
static bool post_tx_frame(u64 gpa, bool event_idx)
{
	u16 old = t.q[1].aidx;

	post(1, &(struct vd_buf){ gpa, 72, false }, 1);
	if (!driver_wants_kick(1, old, t.q[1].aidx, event_idx))
		return false;
	vd_kick(t.vdev, 1);
	return true;
}

struct mode_case {
	enum net_tx_mode tx;
	bool event_idx;
	bool batch; /* -n batch=on: the fake's batch ops */
};

static const struct mode_case mode_cases[] = {
	{ NET_TX_KICK, false, false },	{ NET_TX_KICK, true, false },
	{ NET_TX_TIMER, false, false }, { NET_TX_TIMER, true, false },
	{ NET_TX_POLL, false, false },	{ NET_TX_POLL, true, false },
	{ NET_TX_KICK, false, true },	{ NET_TX_KICK, true, true },
	{ NET_TX_TIMER, false, true },	{ NET_TX_TIMER, true, true },
	{ NET_TX_POLL, false, true },	{ NET_TX_POLL, true, true },
};

static struct net_opts mode_opts(const struct mode_case *c)
{
	/* Short timer and poll windows keep the tests quick; the protocol is the same. */
	return (struct net_opts){
		.tx_mode = c->tx, .tx_timer_us = 20, .poll_us = 20, .batch = c->batch
	};
}

/* What the hook saw: it runs on the TX thread at "ring drained, notifications still off". */
static struct {
	atomic_int calls;
	atomic_int posted; /* chains it posted */
	atomic_int kicked; /* of which the driver rule would have kicked */
	int want;	   /* chains to post, one per call */
	u64 gpa;
	bool event_idx;
} hk;

static void post_in_window(void *arg, int qi)
{
	/* The thread's first drain runs before the driver ever saw notifications off (with
	 * EVENT_IDX a fresh ring asks for a kick): start at the second window. */
	if (qi != 1 || atomic_fetch_add(&hk.calls, 1) == 0 || atomic_load(&hk.posted) >= hk.want)
		return;
	u16 old = t.q[1].aidx;

	atomic_fetch_add(&hk.posted, 1);
	/* Never kicked, whatever the driver rule says: only the device's re-check after
	 * re-enabling can find this chain. (Without EVENT_IDX the rule agrees: NO_NOTIFY is
	 * set here. With it, avail_event may still invite a kick after a stale wake-up.) */
	post(1, &(struct vd_buf){ hk.gpa, 72, false }, 1);
	if (driver_wants_kick(1, old, t.q[1].aidx, hk.event_idx))
		atomic_fetch_add(&hk.kicked, 1);
}

/*
 * A chain posted exactly between "drained" and "re-enable" is still sent, in every
 * strategy, with and without EVENT_IDX: 5 times in a row, each time in the window the
 * previous re-check opened (without the re-check the device would sleep on a kick that
 * never comes).
 */
START_TEST(tx_chain_posted_before_reenable)
{
	const struct mode_case *c = &mode_cases[_i];
	u64 gpa;
	u64 f = BASE_FEATURES | (c->event_idx ? F(VIRTIO_RING_F_EVENT_IDX) : 0);

	dev_create_opts(1, NULL, mode_opts(c));
	memset(&hk, 0, sizeof(hk));
	gpa = galloc(72);
	hk.want = 5;
	hk.gpa = gpa;
	hk.event_idx = c->event_idx;
	virtio_net_set_tx_hook(t.n, post_in_window, NULL);
	dev_start(f, 256);
	/* The first chain comes with a kick; each drain then finds one posted in its window. */
	post(1, &(struct vd_buf){ gpa, 72, false }, 1);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 6));
	ck_assert_int_eq(atomic_load(&hk.posted), 5);
	if (!c->event_idx)
		ck_assert_int_eq(atomic_load(&hk.kicked), 0);
	ck_assert_uint_eq(stat(1, offsetof(struct virtio_queue_stats, packets)), 6);
	virtio_net_set_tx_hook(t.n, NULL, NULL);
	dev_destroy();
}
END_TEST

/* Chains posted while notifications are off (timer hold, poll window) and never kicked
 * are still sent; in poll mode the counters show the windows. */
START_TEST(tx_unkicked_chains_while_off)
{
	const struct mode_case *c = &mode_cases[_i];
	u64 f = BASE_FEATURES | (c->event_idx ? F(VIRTIO_RING_F_EVENT_IDX) : 0);
	u64 gpa;
	int kicks = 0;

	dev_create_opts(1, NULL, mode_opts(c));
	dev_start(f, 256);
	gpa = galloc(72);
	for (u16 i = 1; i <= 50; i++) {
		kicks += post_tx_frame(gpa, c->event_idx);
		if (i % 10 == 0)
			ck_assert(wait_used(1, i));
	}
	ck_assert(wait_used(1, 50));
	ck_assert_uint_eq(stat(1, offsetof(struct virtio_queue_stats, packets)), 50);
	/* Every kick the driver made reached the device's counter (threads counted at exit). */
	t.vdev->ops->stop(t.vdev);
	ck_assert_uint_eq(stat(1, offsetof(struct virtio_queue_stats, kicks)), (u64)kicks);
	if (c->tx == NET_TX_POLL) {
		u64 polls = stat(1, offsetof(struct virtio_queue_stats, polls));
		u64 hits = stat(1, offsetof(struct virtio_queue_stats, poll_hits));

		ck_assert_uint_ge(polls, 1);
		ck_assert_uint_le(hits, polls);
		ck_assert_uint_gt(stat(1, offsetof(struct virtio_queue_stats, poll_ns)), 0);
	} else {
		ck_assert_uint_eq(stat(1, offsetof(struct virtio_queue_stats, polls)), 0);
	}
	dev_destroy();
}
END_TEST

/*
 * A driver thread racing the device: 20000 chains through a 64-entry ring, posted in
 * bursts of varying length, kicked exactly when the driver rule says so. Every chain must
 * come back used; a lost wake-up shows as the used index stuck below the avail index.
 */
START_TEST(tx_race_no_chain_unseen)
{
	const struct mode_case *c = &mode_cases[_i];
	u64 f = BASE_FEATURES | (c->event_idx ? F(VIRTIO_RING_F_EVENT_IDX) : 0);
	const u32 total = 20000;
	const u16 size = 64;
	u64 gpa, deadline;
	u32 posted = 0, burst = 1;
	u8 frame[128];

	dev_create_opts(1, NULL, mode_opts(c));
	dev_start(f, size);
	gpa = galloc(72);
	deadline = now_ns() + 20ull * 1000000000ull;
	while (posted < total) {
		u16 done = used_idx(1);
		u16 room = (u16)(size - (u16)(t.q[1].aidx - done));

		while (net_fake_take(t.be[0], frame, sizeof(frame)) > 0)
			;
		if (!room) {
			ck_assert_msg(now_ns() < deadline, "stuck at %u used of %u posted", done,
				      posted);
			sched_yield();
			continue;
		}
		for (u32 b = 0; b < MIN(burst, (u32)room) && posted < total; b++, posted++)
			post_tx_frame(gpa, c->event_idx);
		burst = burst % 37 + 1;
	}
	while (used_idx(1) != (u16)total) {
		ck_assert_msg(now_ns() < deadline, "lost wake-up: %u of %u chains used",
			      used_idx(1), total);
		while (net_fake_take(t.be[0], frame, sizeof(frame)) > 0)
			;
		sched_yield();
	}
	ck_assert_uint_eq(stat(1, offsetof(struct virtio_queue_stats, packets)) +
				  stat(1, offsetof(struct virtio_queue_stats, drops)),
			  total);
	dev_destroy();
}
END_TEST

/* tx=poll's budget rule: a hit doubles, a miss followed by a kick within the cap grows the
 * window to cover that gap (+1/4), a later kick halves it; always within [min(1 us, cap), cap]. */
START_TEST(poll_budget_adapts)
{
	const u64 cap = 50000;

	ck_assert_uint_eq(virtio_net_poll_budget(10000, cap, true, 0), 20000);
	ck_assert_uint_eq(virtio_net_poll_budget(40000, cap, true, 0), cap);
	/* rr: one chain per round trip, a bit longer than the shrunken window: grow to it. */
	ck_assert_uint_eq(virtio_net_poll_budget(1000, cap, false, 30000), 37500);
	ck_assert_uint_eq(virtio_net_poll_budget(1000, cap, false, 45000), cap);
	ck_assert_uint_eq(virtio_net_poll_budget(30000, cap, false, 2000),
			  60000 > cap ? cap : 60000);
	/* The guest went quiet (the kick came after the cap): halve, down to 1 us. */
	ck_assert_uint_eq(virtio_net_poll_budget(40000, cap, false, 60000), 20000);
	ck_assert_uint_eq(virtio_net_poll_budget(1000, cap, false, 1000000), 1000);
	ck_assert_uint_eq(virtio_net_poll_budget(1500, cap, false, ~0ull), 1000);
	/* A cap below 1 us is the floor too. */
	ck_assert_uint_eq(virtio_net_poll_budget(500, 500, false, ~0ull), 500);
	ck_assert_uint_eq(virtio_net_poll_budget(500, 500, true, 0), 500);
	/* Any sequence stays within bounds. */
	u64 b = cap, x = 88172645463325252ull;
	for (int i = 0; i < 100000; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		b = virtio_net_poll_budget(b, cap, x & 1, (x >> 1) % (3 * cap));
		ck_assert(b >= 1000 && b <= cap);
	}
}
END_TEST

/* ---- batch=on (the fake's batch ops) ---- */

/* The fake's batch calls so far: TX sends (tx) or RX receives (!tx). */
static int fake_batches(bool tx)
{
	int sends, recvs;

	net_fake_batch_calls(t.be[0], &sends, &recvs);
	return tx ? sends : recvs;
}

/* Post n TX chains of len bytes each (a header and a pattern). */
static void post_tx(int n, u32 len)
{
	for (int i = 0; i < n; i++) {
		u64 gpa = galloc(len);

		memset(gp(gpa), 0, MIN(len, 12u));
		if (len > 12)
			fill_pattern(gp(gpa + 12), len - 12, (u8)i);
		post(1, &(struct vd_buf){ gpa, len, false }, 1);
	}
}

/* Five chains in one batch, the third too short for a header: only it is dropped (drops
 * moves by exactly 1), the other four go out in order in one backend call. */
START_TEST(batch_tx_bad_chain_in_middle)
{
	static const u32 lens[] = { 72, 80, 8, 90, 100 };
	u8 out[256];

	dev_create_opts(1, NULL, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	ck_assert(wait_thread_idle("lkvm-net-tx0"));
	for (int i = 0; i < 5; i++)
		post_tx(1, lens[i]);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 5));
	ck_assert(WAIT_STAT(1, packets, 4));
	ck_assert_uint_eq(STAT(1, drops), 1);
	ck_assert_uint_eq(STAT(1, calls), 1);
	ck_assert_int_eq(fake_batches(true), 1);
	for (int i = 0; i < 5; i++) {
		if (i == 2)
			continue;
		ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), lens[i]);
	}
	ck_assert_int_eq(net_fake_take(t.be[0], out, sizeof(out)), 0);
	for (int i = 0; i < 5; i++)
		ck_assert_uint_eq(t.q[1].used->ring[i].len, 0);
	dev_destroy();
}
END_TEST

/* A full ring (256 chains) goes out in TX_BATCH (64) chains per backend call, one used-ring
 * update and at most one interrupt per call. */
START_TEST(batch_tx_ring_full)
{
	u8 out[128];
	int n = 0;

	dev_create_opts(1, NULL, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	ck_assert(wait_thread_idle("lkvm-net-tx0"));
	post_tx(256, 72);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 256));
	ck_assert(WAIT_STAT(1, packets, 256));
	ck_assert_int_eq(fake_batches(true), 4);
	ck_assert_uint_eq(STAT(1, calls), 4);
	ck_assert_uint_ge(STAT(1, irqs), 1);
	ck_assert_uint_le(STAT(1, irqs), 4);
	while (net_fake_take(t.be[0], out, sizeof(out)) == 72)
		n++;
	ck_assert_int_eq(n, 256);
	dev_destroy();
}
END_TEST

/* A backend that is always full, with batch ops: stop while a batch waits for room gives
 * every chain of it back, none completed. */
static int stuck_send_batch(struct net_backend *be, struct net_io *io, int n)
{
	__atomic_add_fetch(&((struct stuck *)be->priv)->sends, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < n; i++)
		io[i].res = -EAGAIN;
	return 0;
}

static int stuck_recv_batch(struct net_backend *be, struct net_io *io, int n)
{
	for (int i = 0; i < n; i++)
		io[i].res = -EAGAIN;
	return 0;
}

static const struct net_backend_ops stuck_batch_ops = {
	.send = stuck_send,
	.recv = stuck_recv,
	.send_batch = stuck_send_batch,
	.recv_batch = stuck_recv_batch,
	.close = stuck_close,
};

START_TEST(batch_stop_during_batch)
{
	struct stuck *s = stuck_new(&stuck_batch_ops);

	/* rx_fd readable: RX offers its slots. */
	dev_create_opts(1, &s->be, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	ck_assert(wait_thread_idle("lkvm-net-tx0"));
	post_tx(3, 72);
	vd_kick(t.vdev, 1);
	for (int ms = 0; ms < WAIT_MS && !__atomic_load_n(&s->sends, __ATOMIC_RELAXED); ms++)
		poll(NULL, 0, 1);
	ck_assert(wait_thread_idle("lkvm-net-tx0"));
	ck_assert_int_eq(__atomic_load_n(&s->sends, __ATOMIC_RELAXED), 1); /* one call, waiting */
	for (int i = 0; i < 3; i++)
		post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	t.vdev->ops->stop(t.vdev);
	/* Nothing consumed: TX's three chains and RX's held buffers are given back. */
	ck_assert_uint_eq(t.vdev->q[1].vq.last_avail, 0);
	ck_assert_uint_eq(used_idx(1), 0);
	ck_assert_uint_eq(STAT(1, drops), 0);
	ck_assert_uint_eq(t.vdev->q[0].vq.last_avail, 0);
	ck_assert_uint_eq(used_idx(0), 0);
	dev_destroy();
}
END_TEST

/* Fewer frames than buffers offered (a partial batch), then more: each lands whole in the
 * next buffer, in order; the buffers that got none stay for the next frames. */
START_TEST(batch_rx_partial)
{
	u8 frame[100];
	u64 buf[8];
	u16 head[8];

	dev_create_opts(1, NULL, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	for (int i = 0; i < 8; i++) {
		buf[i] = galloc(2048);
		head[i] = post(0, &(struct vd_buf){ buf[i], 2048, true }, 1);
	}
	vd_kick(t.vdev, 0);
	for (int i = 0; i < 3; i++) {
		fill_pattern(frame, sizeof(frame), (u8)i);
		ck_assert_int_eq(net_fake_inject(t.be[0], frame, 60 + i), 0);
	}
	ck_assert(wait_used(0, 3));
	for (int i = 3; i < 5; i++) {
		fill_pattern(frame, sizeof(frame), (u8)i);
		ck_assert_int_eq(net_fake_inject(t.be[0], frame, 60 + i), 0);
	}
	ck_assert(wait_used(0, 5));
	for (int i = 0; i < 5; i++) {
		fill_pattern(frame, sizeof(frame), (u8)i);
		ck_assert_uint_eq(t.q[0].used->ring[i].id, head[i]);
		ck_assert_uint_eq(t.q[0].used->ring[i].len, 72 + i);
		ck_assert_uint_eq(rx_num_buffers(buf[i]), 1);
		ck_assert_mem_eq(gp(buf[i] + 12), frame, 60 + i);
	}
	ck_assert(WAIT_STAT(0, packets, 5));
	ck_assert_uint_eq(STAT(0, drops), 0);
	ck_assert_int_ge(fake_batches(false), 2);
	ck_assert_uint_eq(STAT(0, calls), fake_batches(false));
	dev_destroy();
}
END_TEST

/* More frames than buffers (the ring full of frames): the rest wait in the backend until
 * the guest posts more, then come in order. */
START_TEST(batch_rx_ring_full)
{
	u8 frame[100];
	u64 buf[10];

	dev_create_opts(1, NULL, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES | F(VIRTIO_RING_F_EVENT_IDX), 256);
	for (int i = 0; i < 4; i++)
		post(0, &(struct vd_buf){ buf[i] = galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	for (int i = 0; i < 10; i++) {
		fill_pattern(frame, sizeof(frame), (u8)i);
		ck_assert_int_eq(net_fake_inject(t.be[0], frame, 60 + i), 0);
	}
	ck_assert(wait_used(0, 4));
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert_uint_eq(used_idx(0), 4);
	ck_assert_int_eq(net_fake_pending(t.be[0]), 6);
	for (int i = 4; i < 10; i++)
		post(0, &(struct vd_buf){ buf[i] = galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(0, 10));
	for (int i = 0; i < 10; i++) {
		fill_pattern(frame, sizeof(frame), (u8)i);
		ck_assert_uint_eq(t.q[0].used->ring[i].len, 72 + i);
		ck_assert_mem_eq(gp(buf[i] + 12), frame, 60 + i);
	}
	ck_assert_uint_eq(STAT(0, drops), 0);
	dev_destroy();
}
END_TEST

/* A frame too long for its buffer in the middle of a batch (no MRG_RXBUF): only it is dropped
 * (drops moves by exactly 1); its buffer takes the next frame. */
START_TEST(batch_rx_long_frame_in_middle)
{
	static u8 big[500], small[60];
	u64 buf[3];
	u16 head[3];

	dev_create_opts(1, NULL, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	for (int i = 0; i < 3; i++) {
		buf[i] = galloc(200);
		head[i] = post(0, &(struct vd_buf){ buf[i], 200, true }, 1);
	}
	vd_kick(t.vdev, 0);
	fill_pattern(big, sizeof(big), 21);
	fill_pattern(small, sizeof(small), 22);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	/* Injected in one go, so that one call sees all three (the fake holds its lock per frame). */
	ck_assert_int_eq(net_fake_inject(t.be[0], small, sizeof(small)), 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], big, sizeof(big)), 0);
	ck_assert_int_eq(net_fake_inject(t.be[0], small, 50), 0);
	ck_assert(WAIT_STAT(0, packets, 2));
	ck_assert_uint_eq(STAT(0, drops), 1);
	ck_assert(wait_used(0, 2));
	ck_assert_uint_eq(t.q[0].used->ring[0].len, 72);
	ck_assert_uint_eq(t.q[0].used->ring[1].len, 62);
	/* Which buffers took them depends on how the frames met the calls; the one left over
	 * takes the next frame. */
	ck_assert_int_eq(net_fake_inject(t.be[0], small, 40), 0);
	ck_assert(wait_used(0, 3));
	ck_assert_uint_eq(t.q[0].used->ring[2].len, 52);
	ck_assert_uint_eq(STAT(0, drops), 1);
	{
		bool seen[3] = { false };

		for (int i = 0; i < 3; i++)
			for (int j = 0; j < 3; j++)
				seen[j] |= t.q[0].used->ring[i].id == head[j];
		ck_assert(seen[0] && seen[1] && seen[2]);
	}
	(void)buf;
	dev_destroy();
}
END_TEST

/* MRG_RXBUF: a frame longer than one buffer spans the next held ones, in order. */
START_TEST(batch_rx_mergeable_spans)
{
	static u8 frame[5000], got[5000];
	u64 buf[8];
	u16 head[8];
	size_t off;

	dev_create_opts(1, NULL, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES | F(VIRTIO_NET_F_MRG_RXBUF), 256);
	for (int i = 0; i < 8; i++) {
		buf[i] = galloc(2048);
		head[i] = post(0, &(struct vd_buf){ buf[i], 2048, true }, 1);
	}
	vd_kick(t.vdev, 0);
	fill_pattern(frame, sizeof(frame), 3);
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 3));
	ck_assert_uint_eq(rx_num_buffers(buf[0]), 3);
	for (int i = 0; i < 3; i++)
		ck_assert_uint_eq(t.q[0].used->ring[i].id, head[i]);
	ck_assert_uint_eq(t.q[0].used->ring[2].len, 5012 - 4096);
	memcpy(got, gp(buf[0] + 12), 2036);
	off = 2036;
	memcpy(got + off, gp(buf[1]), 2048);
	off += 2048;
	memcpy(got + off, gp(buf[2]), 5000 - off);
	ck_assert_mem_eq(got, frame, sizeof(frame));
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, 100), 0);
	ck_assert(wait_used(0, 4));
	ck_assert_uint_eq(t.q[0].used->ring[3].id, head[3]);
	ck_assert_uint_eq(rx_num_buffers(buf[3]), 1);
	ck_assert(WAIT_STAT(0, packets, 2));
	ck_assert_uint_eq(STAT(0, drops), 0);
	dev_destroy();
}
END_TEST

/* batch=on's recv_batch as when a frame arrives during the call: the first read of a call over
 * more than one slot finds none, the next ones find it, so the frame lands in a later slot
 * than an empty one. With late_fail, every call after the first fails as a whole (the ring
 * unusable: the per-frame path goes on). */
static const struct net_backend_ops *late_orig;
static struct net_backend_ops late_ops;
static int late_calls;
static bool late_fail;

static int late_recv_batch(struct net_backend *be, struct net_io *io, int n)
{
	if (__atomic_add_fetch(&late_calls, 1, __ATOMIC_RELAXED) > 1 && late_fail)
		return -EIO;
	for (int i = 0; i < n; i++)
		io[i].res = i == 0 && n > 1 ? -EAGAIN
					    : late_orig->recv(be, io[i].iov, io[i].iovcnt);
	return 0;
}

/*
 * batch=on: a held buffer popped before one that went to the guest (the frame landed in a
 * later slot) cannot be unpopped, yet it is given back all the same: at stop, then a start
 * without reset (_i = 0), or when batch calls fail and the per-frame path goes on (_i = 1).
 * Every posted buffer is then used or available again, the one given back as used says no
 * byte (length 0), and the next frames fill the others.
 */
START_TEST(batch_rx_release_out_of_order)
{
	struct net_backend *fb = net_fake_create();
	const struct vring_used_elem *u;
	u8 frame[60];
	u16 head[4];

	ck_assert_ptr_nonnull(fb);
	late_orig = fb->ops;
	late_ops = *fb->ops;
	late_ops.recv_batch = late_recv_batch;
	fb->ops = &late_ops;
	late_calls = 0;
	late_fail = _i;
	dev_create_opts(1, fb, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	u = t.q[0].used->ring;
	fill_pattern(frame, sizeof(frame), 51);
	/* The frame waits in the backend, so that the first call offers all four buffers. */
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	for (int i = 0; i < 4; i++)
		head[i] = post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
	vd_kick(t.vdev, 0);
	ck_assert(wait_used(0, 1));
	ck_assert_uint_eq(u[0].id, head[1]);
	ck_assert_uint_eq(u[0].len, 72);
	ck_assert(wait_thread_idle("lkvm-net-rx0"));
	if (_i == 0) {
		t.vdev->ops->stop(t.vdev);
	} else {
		ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
		ck_assert(wait_used(0, 3));
		ck_assert_uint_eq(u[2].id, head[2]);
		ck_assert_uint_eq(u[2].len, 72);
	}
	/* head[0] as used, saying no byte; head[2] and head[3] available again (or used). */
	ck_assert_uint_ge(used_idx(0), 2);
	ck_assert_uint_eq(u[1].id, head[0]);
	ck_assert_uint_eq(u[1].len, 0);
	ck_assert_uint_eq(used_idx(0) + (u16)(t.q[0].avail->idx - t.vdev->q[0].vq.last_avail), 4);
	if (_i == 0) {
		ck_assert_int_eq(t.vdev->ops->start(t.vdev), 0);
		ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	}
	ck_assert_int_eq(net_fake_inject(t.be[0], frame, sizeof(frame)), 0);
	ck_assert(wait_used(0, 4));
	ck_assert_uint_eq(u[3].len, 72);
	ck_assert((u[2].id == head[2] && u[3].id == head[3]) ||
		  (u[2].id == head[3] && u[3].id == head[2]));
	ck_assert_uint_eq(STAT(0, drops), 0);
	dev_destroy();
}
END_TEST

/* A backend whose batch call fails with requests left in flight (NET_BATCH_IN_DOUBT, as tap-uring
 * says when io_uring_submit took only some SQEs, or submitting the cancels or waiting failed).
 * It keeps the first io's iovecs, which the kernel could still reach. */
static struct {
	const struct iovec *iov;
	int iovcnt, calls;
} doubt;

static int doubt_batch(struct net_backend *be, struct net_io *io, int n)
{
	if (!doubt.calls++) {
		doubt.iov = io[0].iov;
		doubt.iovcnt = io[0].iovcnt;
	}
	return NET_BATCH_IN_DOUBT;
}

/*
 * batch=on, a batch call in doubt (_i = 0: RX, 1: TX): the device never hands back or reuses the
 * chains of that call (no used element, none unpopped, at stop neither) and puts itself in
 * NEEDS_RESET; the memory the requests point at stays alive after the device is gone: the late
 * write of an RX read into its slot's spill area, or the kernel reading the iovec array of a TX
 * chain, is no use-after-free (run under ASan: make ASAN=1).
 */
START_TEST(batch_in_doubt_keeps_memory)
{
	static struct net_backend_ops ops;
	struct net_backend *fb = net_fake_create();
	int qi = _i ? 1 : 0;
	u16 avail;

	ck_assert_ptr_nonnull(fb);
	ops = *fb->ops;
	if (_i)
		ops.send_batch = doubt_batch;
	else
		ops.recv_batch = doubt_batch;
	fb->ops = &ops;
	memset(&doubt, 0, sizeof(doubt));
	dev_create_opts(1, fb, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	ck_assert(wait_thread_idle(_i ? "lkvm-net-tx0" : "lkvm-net-rx0"));
	if (_i) {
		post_tx(4, 72);
	} else {
		for (int i = 0; i < 4; i++)
			post(0, &(struct vd_buf){ galloc(2048), 2048, true }, 1);
		ck_assert_int_eq(net_fake_inject(fb, "frame", 5), 0);
	}
	vd_kick(t.vdev, qi);
	ck_assert(wait_needs_reset());
	ck_assert(wait_thread_idle(_i ? "lkvm-net-tx0" : "lkvm-net-rx0"));
	ck_assert_int_eq(doubt.calls, 1);
	ck_assert_ptr_nonnull(doubt.iov);
	avail = t.vdev->q[qi].vq.last_avail;
	ck_assert_uint_eq(avail, 4);
	ck_assert_uint_eq(used_idx(qi), 0);
	t.vdev->ops->stop(t.vdev);
	ck_assert_uint_eq(t.vdev->q[qi].vq.last_avail, avail);
	ck_assert_uint_eq(used_idx(qi), 0);
	dev_destroy();
	/* What the kernel may still do with the requests in flight, after everything is gone. */
	if (_i) {
		ck_assert_int_eq(doubt.iovcnt, 1);
		ck_assert_uint_eq(((volatile const struct iovec *)doubt.iov)->iov_len, 72);
	} else {
		const struct iovec *spill = &doubt.iov[doubt.iovcnt - 1];

		ck_assert_int_eq(doubt.iovcnt, 2);
		memset(spill->iov_base, 0xab, spill->iov_len);
	}
}
END_TEST

/* A batch call the backend refuses before attempting anything (-errno: an old kernel's tap
 * without RWF_NOWAIT, seen with Debian's 6.1): its frames go out one by one, none dropped,
 * and later frames too, without batches. */
static int refused_batch(struct net_backend *be, struct net_io *io, int n)
{
	(void)be;
	(void)io;
	(void)n;
	return -EOPNOTSUPP;
}

START_TEST(batch_tx_refused_sends_each)
{
	static struct net_backend_ops ops;
	struct net_backend *fb = net_fake_create();
	u8 out[128];
	int n = 0;

	ck_assert_ptr_nonnull(fb);
	ops = *fb->ops;
	ops.send_batch = refused_batch;
	fb->ops = &ops;
	dev_create_opts(1, fb, (struct net_opts){ .batch = true });
	dev_start(BASE_FEATURES, 256);
	ck_assert(wait_thread_idle("lkvm-net-tx0"));
	post_tx(5, 72);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 5));
	ck_assert(WAIT_STAT(1, packets, 5));
	post_tx(3, 80);
	vd_kick(t.vdev, 1);
	ck_assert(wait_used(1, 8));
	ck_assert(WAIT_STAT(1, packets, 8));
	ck_assert_uint_eq(STAT(1, drops), 0);
	while (net_fake_take(fb, out, sizeof(out)) > 0)
		n++;
	ck_assert_int_eq(n, 8);
	dev_destroy();
}
END_TEST

/* The device tests that run on both data paths, batch=off and batch=on. */
static void add_both_paths(TCase *tc)
{
	tcase_add_test(tc, rx_single_frame);
	tcase_add_test(tc, rx_waits_for_buffers);
	tcase_add_test(tc, rx_header_split);
	tcase_add_test(tc, rx_no_peek_long_frame_dropped);
	tcase_add_test(tc, rx_mergeable_waits_for_room);
	tcase_add_test(tc, rx_no_peek_mergeable_waits_whole);
	tcase_add_loop_test(tc, rx_mergeable_wait_keeps_order, 0, 2);
	tcase_add_test(tc, rx_mergeable_never_fits_dropped);
	tcase_add_loop_test(tc, rx_peek_never_fits_dropped, 0, 3);
	tcase_add_test(tc, rx_malformed_chain_needs_reset);
	tcase_add_test(tc, tx_split_chain);
	tcase_add_loop_test(tc, quiesce_holds_frames, 0, 3);
	tcase_add_test(tc, tx_bad_lengths_dropped);
	tcase_add_test(tc, tx_malformed_chain_needs_reset);
	tcase_add_test(tc, tx_buffer_outside_ram_needs_reset);
	tcase_add_test(tc, tx_stop_endless_ring);
	tcase_add_test(tc, backend_gone_link_down);
	tcase_add_test(tc, event_idx_suppresses_interrupts);
	tcase_add_test(tc, no_interrupt_flag_respected);
	tcase_add_test(tc, ctrl_commands);
	tcase_add_test(tc, multiqueue_pairs);
	tcase_add_test(tc, multiqueue_active_pairs);
	tcase_add_test(tc, features_negotiation);
	tcase_add_test(tc, config_space);
	tcase_add_test(tc, stop_while_backend_full);
	tcase_add_test(tc, rx_backend_error_backs_off);
	tcase_add_test(tc, restart_and_stats);
	tcase_add_loop_test(tc, tx_chain_posted_before_reenable, 0, (int)ARRAY_SIZE(mode_cases));
	tcase_add_loop_test(tc, tx_unkicked_chains_while_off, 0, (int)ARRAY_SIZE(mode_cases));
	tcase_add_loop_test(tc, tx_race_no_chain_unseen, 0, (int)ARRAY_SIZE(mode_cases));
	tcase_add_test(tc, poll_budget_adapts);
}

static Suite *virtio_net_suite(void)
{
	Suite *s = suite_create("virtio_net");
	TCase *tc = tcase_create("device");
	TCase *tap = tcase_create("tap");
	const char *why;

	tcase_set_timeout(tc, 30);
	/* batch=off's own: the buffers a frame did not need given back at once (batch=on holds
	 * them for the next frames), and the stream backend (no batch). */
	tcase_add_test(tc, rx_mergeable_spans_buffers);
	tcase_add_test(tc, stream_backend_moves_frames);
	add_both_paths(tc);
	suite_add_tcase(s, tc);
	/* The same with batch=on (the fake's batch ops). */
	tc = tcase_create("batch");
	tcase_set_timeout(tc, 30);
	tcase_add_checked_fixture(tc, batch_on, batch_off);
	/* Not here: rx_mergeable_spans_buffers (batch=off gives back at once the buffers a frame
	 * did not need; batch=on holds them for the next frames: batch_rx_mergeable_spans). */
	tcase_add_test(tc, batch_tx_bad_chain_in_middle);
	tcase_add_test(tc, batch_tx_ring_full);
	tcase_add_test(tc, batch_stop_during_batch);
	tcase_add_test(tc, batch_rx_partial);
	tcase_add_test(tc, batch_rx_ring_full);
	tcase_add_test(tc, batch_rx_long_frame_in_middle);
	tcase_add_test(tc, batch_rx_mergeable_spans);
	tcase_add_loop_test(tc, batch_rx_release_out_of_order, 0, 2);
	tcase_add_loop_test(tc, batch_in_doubt_keeps_memory, 0, 2);
	tcase_add_test(tc, batch_tx_refused_sends_each);
	add_both_paths(tc);
	suite_add_tcase(s, tc);
	why = tap_unavailable();
	if (why) {
		lkvm_skip("test_virtio_net", 1, "tap tests", why);
	} else {
		tcase_add_test(tap, multiqueue_tap_steering);
		tcase_set_timeout(tap, 20);
		suite_add_tcase(s, tap);
	}
	return s;
}

LKVM_CHECK_MAIN(virtio_net_suite)

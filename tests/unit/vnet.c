/* Unit tests of virtio-net: the device under test over fake backends, the driver's calls on its queues, its threads' waits and counters (vnet.h). */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <check.h>

#include "vnet.h"

struct vnet t;

/* Every device made with -n batch=on (the "batch" test case's fixture: batch_on, batch_off). */
static bool batch_all;

void batch_on(void)
{
	batch_all = true;
}

void batch_off(void)
{
	batch_all = false;
}

u64 galloc(u64 len)
{
	return vd_galloc(len, 64);
}

void dev_create_be(int pairs, struct net_opts o)
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

void dev_create_opts(int pairs, struct net_backend *custom, struct net_opts o)
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

void dev_create(int pairs, struct net_backend *custom)
{
	dev_create_opts(pairs, custom, (struct net_opts){ 0 });
}

void dev_start(u64 features, u16 size)
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

void dev_destroy(void)
{
	struct vd_fds fds;

	vd_fds_save(&fds, t.vdev, t.nq);
	virtio_net_destroy(t.n);
	vd_fds_close(&fds);
	vd_vm_free();
	memset(&t, 0, sizeof(t));
}

u16 post(int qi, const struct vd_buf *b, int nb)
{
	return vd_post(&t.q[qi], b, nb);
}

u16 used_idx(int qi)
{
	return vd_used_idx(&t.q[qi]);
}

bool wait_used(int qi, u16 want)
{
	return vd_wait_used(&t.q[qi], want, WAIT_MS);
}

bool wait_cond_u16(const u16 *p, u16 want)
{
	return WAIT_UNTIL(WAIT_MS, __atomic_load_n(p, __ATOMIC_ACQUIRE) == want);
}

bool wait_needs_reset(void)
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

bool wait_thread_idle(const char *name)
{
	return WAIT_UNTIL(WAIT_MS, thread_idle_now(name));
}

int count_threads(const char *name)
{
	return threads_named(name, NULL, 0);
}

bool irq_fired(int qi, int ms)
{
	struct pollfd p = { .fd = t.vdev->q[qi].irq_fd, .events = POLLIN };
	u64 v;

	if (poll(&p, 1, ms) != 1)
		return false;
	return read(p.fd, &v, sizeof(v)) == sizeof(v);
}

u64 queue_stat(int qi, size_t off)
{
	return atomic_load((atomic_ullong *)((u8 *)&t.vdev->q[qi].stats + off));
}

void fill_pattern(u8 *p, size_t len, u8 seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (u8)(seed + i * 7);
}

int fake_batches(bool tx)
{
	int sends, recvs;

	net_fake_batch_calls(t.be[0], &sends, &recvs);
	return tx ? sends : recvs;
}

void post_tx(int n, u32 len)
{
	for (int i = 0; i < n; i++) {
		u64 gpa = galloc(len);

		memset(gp(gpa), 0, MIN(len, 12u));
		if (len > 12)
			fill_pattern(gp(gpa + 12), len - 12, (u8)i);
		post(1, &(struct vd_buf){ gpa, len, false }, 1);
	}
}

ssize_t stuck_send(struct net_backend *be, const struct iovec *iov, int n)
{
	__atomic_add_fetch(&((struct stuck *)be->priv)->sends, 1, __ATOMIC_RELAXED);
	return -EAGAIN;
}

ssize_t stuck_recv(struct net_backend *be, const struct iovec *iov, int n)
{
	return -EAGAIN;
}

void stuck_close(struct net_backend *be)
{
	close(be->rx_fd);
	close(be->tx_fd);
	free(be->priv);
}

struct stuck *stuck_new(const struct net_backend_ops *ops)
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

static TCase *vnet_case(Suite *s, const char *name, void (*own)(TCase *), void (*both)(TCase *))
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, 30);
	if (own)
		own(tc);
	both(tc);
	suite_add_tcase(s, tc);
	return tc;
}

Suite *vnet_suite(const char *name, void (*both)(TCase *), void (*device_own)(TCase *),
		  void (*batch_own)(TCase *))
{
	Suite *s = suite_create(name);
	TCase *batch;

	vnet_case(s, "device", device_own, both);
	batch = vnet_case(s, "batch", batch_own, both);
	tcase_add_checked_fixture(batch, batch_on, batch_off);
	return s;
}

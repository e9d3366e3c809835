/* Unit tests of virtio-console (output to the terminal hook, input into receive buffers) and virtio-rng, driven by the test without KVM. */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <linux/virtio_ring.h>

#include "check_main.h"
#include "lkvm/kvm.h"
#include "lkvm/virtio-console.h"

#define RAM_SIZE MiB(2)
#define QSIZE 64
#define QBASE(i) (0x10000ULL * ((u64)(i) + 1))
#define WAIT_MS 3000

struct dq {
	struct vring_desc *desc;
	struct vring_avail *avail;
	struct vring_used *used;
	u16 next, aidx;
};

static struct {
	u8 *ram;
	struct kvm *kvm;
	struct virtio_device *vdev;
	struct dq q[2];
	char out[256];
	size_t out_len;
	pthread_mutex_t lock;
} t;

static void *gp(u64 gpa)
{
	return t.ram + gpa;
}

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
	t.ram = aligned_alloc(4096, RAM_SIZE);
	ck_assert_ptr_nonnull(t.ram);
	memset(t.ram, 0, RAM_SIZE);
	t.kvm = calloc(1, sizeof(*t.kvm));
	ck_assert_ptr_nonnull(t.kvm);
	ck_assert_int_eq(gmem_init(&t.kvm->mem, t.ram, RAM_SIZE), 0);
}

static void start(int nq)
{
	struct virtio_device *vdev = t.vdev;

	for (int i = 0; i < nq; i++) {
		ck_assert_int_eq(vq_init(&vdev->q[i].vq, &t.kvm->mem, QSIZE, QBASE(i), QBASE(i) + 0x1000,
					 QBASE(i) + 0x2000, false), 0);
		vdev->q[i].enabled = true;
		vdev->q[i].kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		vdev->q[i].irq_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		t.q[i] = (struct dq){ gp(QBASE(i)), gp(QBASE(i) + 0x1000), gp(QBASE(i) + 0x2000), 0, 0 };
	}
	atomic_store(&vdev->status, VIRTIO_CONFIG_S_DRIVER_OK | VIRTIO_CONFIG_S_FEATURES_OK);
	ck_assert_int_eq(vdev->ops->start(vdev), 0);
}

static void env_down(int nq, int kick_fds[], int irq_fds[])
{
	for (int i = 0; i < nq; i++) {
		close(kick_fds[i]);
		close(irq_fds[i]);
	}
	free(t.ram);
	free(t.kvm);
	pthread_mutex_destroy(&t.lock);
}

/* One buffer as one chain, kicked. */
static void post1(int qi, u64 gpa, u32 len, bool dev_writes)
{
	struct dq *d = &t.q[qi];
	u16 idx = d->next++ % QSIZE;
	u64 one = 1;

	d->desc[idx] = (struct vring_desc){ .addr = gpa, .len = len, .flags = dev_writes ? VRING_DESC_F_WRITE : 0 };
	d->avail->ring[d->aidx % QSIZE] = idx;
	__atomic_store_n(&d->avail->idx, ++d->aidx, __ATOMIC_RELEASE);
	ck_assert_int_eq(write(t.vdev->q[qi].kick_fd, &one, sizeof(one)), sizeof(one));
}

static bool wait_used(int qi, u16 want)
{
	for (int ms = 0; ms < WAIT_MS; ms++) {
		if (__atomic_load_n(&t.q[qi].used->idx, __ATOMIC_ACQUIRE) == want)
			return true;
		poll(NULL, 0, 1);
	}
	return false;
}

START_TEST(test_console)
{
	struct virtio_console *c;
	int kfd[2], ifd[2];

	env_up();
	ck_assert_int_eq(virtio_console_create(t.kvm, VIRTIO_TRANS_PCI, catch_out, true, &c), 0);
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
	for (int i = 0; i < 2; i++) {
		kfd[i] = t.vdev->q[i].kick_fd;
		ifd[i] = t.vdev->q[i].irq_fd;
	}
	virtio_console_destroy(c);
	env_down(2, kfd, ifd);
}
END_TEST

START_TEST(test_rng)
{
	struct virtio_rng *r;
	static const u8 zero[64];
	int kfd, ifd;

	env_up();
	ck_assert_int_eq(virtio_rng_create(t.kvm, VIRTIO_TRANS_PCI, true, &r), 0);
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
	kfd = t.vdev->q[0].kick_fd;
	ifd = t.vdev->q[0].irq_fd;
	virtio_rng_destroy(r);
	env_down(1, &kfd, &ifd);
}
END_TEST

static Suite *console_suite(void)
{
	Suite *s = suite_create("virtio-console");
	TCase *tc = tcase_create("console");

	tcase_add_test(tc, test_console);
	tcase_add_test(tc, test_rng);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(console_suite)

/* Unit tests of virtio-net (test_virtio_net*.c): the device over fake backends, the driver's calls on its queues, its threads' waits and counters. */
#ifndef LKVM_TEST_VNET_H
#define LKVM_TEST_VNET_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>
#include <linux/virtio_config.h>
#include <linux/virtio_net.h>
#include <linux/virtio_ring.h>

#include <check.h>

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

/* The device under test (one at a time, as vd's VM) and the driver's side of its queues. */
struct vnet {
	struct net_backend *be[NET_MAX_QUEUE_PAIRS];
	struct virtio_net *n;
	struct virtio_device *vdev;
	struct vd_queue q[VIRTIO_MAX_QUEUES];
	int nq;
};

extern struct vnet t;

/* The "batch" test case's fixture: every device is made with -n batch=on. */
void batch_on(void);
void batch_off(void);

u64 galloc(u64 len);

/* Create the device over the backends in t.be (pairs of them) with the TX strategy in o
 * (queue pairs and ioeventfd are set here). */
void dev_create_be(int pairs, struct net_opts o);
/* Create the device (pairs queue pairs over fake backends, or over `custom`) with the
 * TX strategy in o (mode, queue pairs and ioeventfd are set here). */
void dev_create_opts(int pairs, struct net_backend *custom, struct net_opts o);
void dev_create(int pairs, struct net_backend *custom);
/* Negotiate, lay out every queue (size each), give it eventfds, DRIVER_OK. */
void dev_start(u64 features, u16 size);
void dev_destroy(void);

/* The driver's calls on queue qi of this device (vdriver.h). */
u16 post(int qi, const struct vd_buf *b, int nb);
u16 used_idx(int qi);
bool wait_used(int qi, u16 want);
bool wait_cond_u16(const u16 *p, u16 want);
bool wait_needs_reset(void);

/* Bounded wait (WAIT_MS) for the device thread `name` to be idle: asleep in poll with nothing
 * pending (vnet.c: thread_idle_now, what that proves and what it does not). */
bool wait_thread_idle(const char *name);
/* How many of this process's threads are called name. */
int count_threads(const char *name);

/* Is the queue's interrupt eventfd signalled (within ms)? Consumes it. */
bool irq_fired(int qi, int ms);

u64 queue_stat(int qi, size_t off);
#define STAT(qi, field) queue_stat(qi, offsetof(struct virtio_queue_stats, field))

/* Bounded wait for a queue counter to reach want (the device thread may count after the
 * used index moved: a kick read once the chain it announced was already drained). */
#define WAIT_STAT(qi, field, want) WAIT_UNTIL(WAIT_MS, STAT(qi, field) == (want))

void fill_pattern(u8 *p, size_t len, u8 seed);

/* The fake's batch calls so far: TX sends (tx) or RX receives (!tx). */
int fake_batches(bool tx);
/* Post n TX chains of len bytes each (a header and a pattern). */
void post_tx(int n, u32 len);

/* A backend that is always full, to see a TX thread blocked on it still stop. */
struct stuck {
	struct net_backend be;
	int sends;
};

ssize_t stuck_send(struct net_backend *be, const struct iovec *iov, int n);
ssize_t stuck_recv(struct net_backend *be, const struct iovec *iov, int n);
void stuck_close(struct net_backend *be);
/* A stuck backend of ops: its tx_fd an eventfd at its maximum, which is never writable. */
struct stuck *stuck_new(const struct net_backend_ops *ops);

/* The suite each test_virtio_net* file makes: case "device" (batch=off) and case "batch"
 * (batch=on: the fake's batch ops), each with its own tests (device_own, batch_own: either may
 * be NULL) and then the tests of both paths (both). */
Suite *vnet_suite(const char *name, void (*both)(TCase *), void (*device_own)(TCase *),
		  void (*batch_own)(TCase *));

#endif

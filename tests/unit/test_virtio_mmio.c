/* Unit tests of the virtio-mmio transport without /dev/kvm (register sequences, good and bad), and of the device tree read back with libfdt. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <libfdt.h>
#include <linux/virtio_mmio.h>
#include <linux/virtio_ring.h>

#include "check_main.h"
#include "lkvm/fdt.h"
#include "vdriver.h"
#include "lkvm/kvm.h"
#include "lkvm/virtio-mmio.h"

#define RAM_SIZE MiB(1)
#define QMAX 256
#define VERSION_1 (1ULL << VIRTIO_F_VERSION_1)

struct env {
	struct kvm kvm;
	u8 *ram;
	struct vd_tdev t;
	u64 base;
};

/* Slot i as the transport lists it (for the command line and the DTB), or NULL when free. */
static const struct virtio_mmio_slot *slot(struct env *e, int i)
{
	static struct virtio_mmio_slot slots[VIRTIO_MMIO_MAX_DEVS];
	int n = virtio_mmio_slots(&e->kvm, slots);

	for (int k = 0; k < n; k++)
		if (slots[k].slot == i)
			return &slots[k];
	return NULL;
}

static struct env *env_new(void)
{
	struct env *e = calloc(1, sizeof(*e));

	ck_assert_ptr_nonnull(e);
	fake_vm_init(&e->kvm, RAM_SIZE);
	e->ram = e->kvm.mem.base;
	e->kvm.cfg.nr_cpus = 2;
	vd_tdev_init(&e->t, 2, 0, "\x01\x02\x03\x04\x05\x06\x07\x08");
	e->t.vdev.use_ioeventfd = true; /* no VM: must fall back to trapping */
	ck_assert_int_eq(virtio_device_attach(&e->kvm, &e->t.vdev, VIRTIO_TRANS_MMIO, 2, QMAX), 0);
	ck_assert(!e->t.vdev.use_ioeventfd);
	ck_assert_ptr_nonnull(slot(e, 0));
	ck_assert_uint_eq(slot(e, 0)->device_id, 2);
	e->base = slot(e, 0)->addr;
	ck_assert_uint_eq(e->base, VIRTIO_MMIO_BASE);
	return e;
}

static void env_free(struct env *e)
{
	vd_tdev_detach(&e->t, virtio_device_exit, &e->kvm);
	ck_assert_ptr_null(slot(e, 0));
	fake_vm_exit(&e->kvm);
	free(e);
}

static u64 acc(struct env *e, u32 off, u32 len, bool is_write, u64 v)
{
	u8 d[8] = { 0 };

	memcpy(d, &v, len);
	ck_assert(io_bus_dispatch(&e->kvm.mmio, NULL, e->base + off, d, len, is_write));
	v = 0;
	memcpy(&v, d, len);
	return v;
}

static u32 rd(struct env *e, u32 off)
{
	return (u32)acc(e, off, 4, false, 0);
}

static void wr(struct env *e, u32 off, u32 v)
{
	acc(e, off, 4, true, v);
}

static void drv_features(struct env *e, u64 f)
{
	wr(e, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
	wr(e, VIRTIO_MMIO_DRIVER_FEATURES, (u32)f);
	wr(e, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	wr(e, VIRTIO_MMIO_DRIVER_FEATURES, (u32)(f >> 32));
}

static bool negotiate(struct env *e, u64 f)
{
	wr(e, VIRTIO_MMIO_STATUS, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER);
	drv_features(e, f);
	wr(e, VIRTIO_MMIO_STATUS, rd(e, VIRTIO_MMIO_STATUS) | VIRTIO_CONFIG_S_FEATURES_OK);
	return rd(e, VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_FEATURES_OK;
}

static void setup_queue(struct env *e, u32 qi, u32 size, u64 desc)
{
	wr(e, VIRTIO_MMIO_QUEUE_SEL, qi);
	wr(e, VIRTIO_MMIO_QUEUE_NUM, size);
	wr(e, VIRTIO_MMIO_QUEUE_DESC_LOW, (u32)desc);
	wr(e, VIRTIO_MMIO_QUEUE_DESC_HIGH, (u32)(desc >> 32));
	wr(e, VIRTIO_MMIO_QUEUE_AVAIL_LOW, (u32)(desc + 0x1000));
	wr(e, VIRTIO_MMIO_QUEUE_AVAIL_HIGH, 0);
	wr(e, VIRTIO_MMIO_QUEUE_USED_LOW, (u32)(desc + 0x2000));
	wr(e, VIRTIO_MMIO_QUEUE_USED_HIGH, 0);
	wr(e, VIRTIO_MMIO_QUEUE_READY, 1);
}

START_TEST(test_identity)
{
	struct env *e = env_new();
	char cmd[256] = "x";

	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_MAGIC_VALUE), 0x74726976);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_VERSION), 2);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_DEVICE_ID), 2);
	ck_assert_uint_ne(rd(e, VIRTIO_MMIO_VENDOR_ID), 0);
	wr(e, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 0);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_DEVICE_FEATURES),
			  (u32)(VD_TDEV_FEATURE_LO | VD_TDEV_REFUSED));
	wr(e, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 1);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_DEVICE_FEATURES),
			  (u32)((VD_TDEV_FEATURE_HI | VERSION_1) >> 32));
	wr(e, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 2);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_DEVICE_FEATURES), 0);
	wr(e, VIRTIO_MMIO_QUEUE_SEL, 1);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_QUEUE_NUM_MAX), QMAX);
	wr(e, VIRTIO_MMIO_QUEUE_SEL, 2); /* no such queue */
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_QUEUE_NUM_MAX), 0);
	/* Config space: any width, inside config_size only. */
	ck_assert_uint_eq(acc(e, VIRTIO_MMIO_CONFIG + 1, 2, false, 0), 0x0302);
	acc(e, VIRTIO_MMIO_CONFIG + 6, 2, true, 0xaabb);
	ck_assert_mem_eq(e->t.config + 6, "\xbb\xaa", 2);
	ck_assert_uint_eq(acc(e, VIRTIO_MMIO_CONFIG + 7, 2, false, 0), 0); /* crosses the end */
	ck_assert_uint_eq(acc(e, VIRTIO_MMIO_CONFIG + 0x80, 4, false, 0), 0);
	ck_assert_int_eq(virtio_mmio_cmdline(&e->kvm, cmd, sizeof(cmd)), 0);
	ck_assert_str_eq(cmd, "x virtio_mmio.device=0x200@0xc0000000:5");
	strcpy(cmd, "x");
	ck_assert_int_eq(virtio_mmio_cmdline(&e->kvm, cmd, 20), -E2BIG); /* does not fit */
	memset(cmd, 'y', 8);
	ck_assert_int_eq(virtio_mmio_cmdline(&e->kvm, cmd, 8), -E2BIG); /* not even terminated */
	env_free(e);
}
END_TEST

START_TEST(test_features)
{
	struct env *e = env_new();

	ck_assert(!negotiate(e, VD_TDEV_FEATURE_LO)); /* no VERSION_1 */
	wr(e, VIRTIO_MMIO_STATUS, 0);
	ck_assert(!negotiate(e, VERSION_1 | VD_TDEV_REFUSED)); /* the device says no */
	wr(e, VIRTIO_MMIO_STATUS, 0);
	ck_assert(!negotiate(e, VERSION_1 | (1ULL << 40))); /* never offered */
	wr(e, VIRTIO_MMIO_STATUS, 0);
	ck_assert(negotiate(e, VERSION_1 | VD_TDEV_FEATURE_HI));
	ck_assert_uint_eq(e->t.vdev.features, VERSION_1 | VD_TDEV_FEATURE_HI);
	drv_features(e, VERSION_1); /* after FEATURES_OK: ignored */
	ck_assert_uint_eq(e->t.vdev.features, VERSION_1 | VD_TDEV_FEATURE_HI);
	env_free(e);
}
END_TEST

START_TEST(test_queue_setup_and_start)
{
	struct env *e = env_new();
	struct virtio_queue *q = &e->t.vdev.q[0];

	/* DRIVER_OK before FEATURES_OK is refused. */
	wr(e, VIRTIO_MMIO_STATUS,
	   VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER | VIRTIO_CONFIG_S_DRIVER_OK);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_DRIVER_OK, 0);
	ck_assert(negotiate(e, VERSION_1));
	wr(e, VIRTIO_MMIO_QUEUE_SEL, 0);
	wr(e, VIRTIO_MMIO_QUEUE_NUM, 100); /* not a power of two: kept at max */
	ck_assert_uint_eq(q->size, QMAX);
	wr(e, VIRTIO_MMIO_QUEUE_NUM, 2 * QMAX); /* above max */
	ck_assert_uint_eq(q->size, QMAX);
	setup_queue(e, 0, 64, 0x10000);
	ck_assert_uint_eq(q->size, 64);
	ck_assert(q->enabled);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_QUEUE_READY), 1);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_QUEUE_AVAIL_LOW), 0x11000);
	/* Ready: the queue's registers are frozen. */
	wr(e, VIRTIO_MMIO_QUEUE_NUM, 32);
	wr(e, VIRTIO_MMIO_QUEUE_DESC_LOW, 0x20000);
	wr(e, VIRTIO_MMIO_QUEUE_READY, 0);
	ck_assert_uint_eq(q->size, 64);
	ck_assert_uint_eq(q->desc, 0x10000);
	ck_assert(q->enabled);
	wr(e, VIRTIO_MMIO_STATUS, rd(e, VIRTIO_MMIO_STATUS) | VIRTIO_CONFIG_S_DRIVER_OK);
	ck_assert_int_eq(e->t.starts, 1);
	ck_assert(e->t.ready_at_start[0]);
	ck_assert(!e->t.ready_at_start[1]); /* never enabled */
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_NEEDS_RESET, 0);
	/* Running: queue 1 can no longer be set up. */
	setup_queue(e, 1, 64, 0x30000);
	ck_assert(!e->t.vdev.q[1].enabled);
	env_free(e);
}
END_TEST

START_TEST(test_bad_ring_needs_reset)
{
	struct env *e = env_new();

	ck_assert(negotiate(e, VERSION_1));
	setup_queue(e, 0, 64, RAM_SIZE - 0x800); /* rings past the end of RAM */
	wr(e, VIRTIO_MMIO_STATUS, rd(e, VIRTIO_MMIO_STATUS) | VIRTIO_CONFIG_S_DRIVER_OK);
	ck_assert_int_eq(e->t.starts, 0);
	ck_assert_uint_ne(rd(e, VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_NEEDS_RESET, 0);
	/* The config-change interrupt: InterruptStatus bit 1, acknowledged by the driver. */
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_INTERRUPT_STATUS), VIRTIO_MMIO_INT_CONFIG);
	wr(e, VIRTIO_MMIO_INTERRUPT_ACK, VIRTIO_MMIO_INT_CONFIG);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_INTERRUPT_STATUS), 0);
	/* A reset recovers: status 0, queues down, generation bumped, stop called. */
	u32 gen = rd(e, VIRTIO_MMIO_CONFIG_GENERATION);
	int stops = e->t.stops;

	wr(e, VIRTIO_MMIO_STATUS, 0);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_STATUS), 0);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_CONFIG_GENERATION), gen + 1);
	ck_assert_int_eq(e->t.stops, stops + 1);
	ck_assert(!e->t.vdev.q[0].enabled);
	ck_assert(negotiate(e, VERSION_1));
	setup_queue(e, 0, 64, 0x10000);
	wr(e, VIRTIO_MMIO_STATUS, rd(e, VIRTIO_MMIO_STATUS) | VIRTIO_CONFIG_S_DRIVER_OK);
	ck_assert_int_eq(e->t.starts, 1);
	env_free(e);
}
END_TEST

START_TEST(test_notify_and_interrupts)
{
	struct env *e = env_new();
	struct virtio_device *vdev = &e->t.vdev;
	struct pollfd p = { .fd = vdev->q[1].kick_fd, .events = POLLIN };
	u64 v;

	wr(e, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	ck_assert_int_eq(poll(&p, 1, 0), 1);
	ck_assert_int_eq(read(vdev->q[1].kick_fd, &v, sizeof(v)), sizeof(v));
	ck_assert_uint_eq(v, 1);
	ck_assert_uint_eq(vdev->q[1].stats.trapped, 1);
	ck_assert_uint_eq(vdev->q[0].stats.trapped, 0);
	wr(e, VIRTIO_MMIO_QUEUE_NOTIFY, 2);	      /* no such queue: ignored */
	wr(e, VIRTIO_MMIO_QUEUE_NOTIFY, 0xffff);      /* likewise */
	acc(e, VIRTIO_MMIO_QUEUE_NOTIFY, 2, true, 0); /* wrong width: ignored */
	ck_assert_uint_eq(vdev->q[0].stats.trapped, 0);
	/* A queue interrupt sets bit 0; the used ring asks for it (flags 0). */
	ck_assert(negotiate(e, VERSION_1));
	setup_queue(e, 0, 64, 0x10000);
	wr(e, VIRTIO_MMIO_STATUS, rd(e, VIRTIO_MMIO_STATUS) | VIRTIO_CONFIG_S_DRIVER_OK);
	virtio_notify_queue(vdev, 0);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_INTERRUPT_STATUS), VIRTIO_MMIO_INT_VRING);
	ck_assert_uint_eq(vdev->q[0].stats.irqs, 1);
	virtio_notify_config(vdev);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_INTERRUPT_STATUS),
			  VIRTIO_MMIO_INT_VRING | VIRTIO_MMIO_INT_CONFIG);
	wr(e, VIRTIO_MMIO_INTERRUPT_ACK, VIRTIO_MMIO_INT_VRING); /* only what was acknowledged */
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_INTERRUPT_STATUS), VIRTIO_MMIO_INT_CONFIG);
	env_free(e);
}
END_TEST

START_TEST(test_bad_accesses)
{
	struct env *e = env_new();

	/* Registers: 32-bit aligned only; others read 0, writes are ignored. */
	ck_assert_uint_eq(acc(e, VIRTIO_MMIO_MAGIC_VALUE, 2, false, 0), 0);
	ck_assert_uint_eq(acc(e, VIRTIO_MMIO_MAGIC_VALUE, 1, false, 0), 0);
	ck_assert_uint_eq(acc(e, VIRTIO_MMIO_MAGIC_VALUE + 1, 4, false, 0), 0);
	ck_assert_uint_eq(acc(e, VIRTIO_MMIO_MAGIC_VALUE, 8, false, 0), 0);
	acc(e, VIRTIO_MMIO_STATUS, 1, true, VIRTIO_CONFIG_S_ACKNOWLEDGE);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_STATUS), 0);
	/* Read-only registers ignore writes; write-only ones read 0. */
	wr(e, VIRTIO_MMIO_MAGIC_VALUE, 0);
	wr(e, VIRTIO_MMIO_VERSION, 1);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_MAGIC_VALUE), 0x74726976);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_VERSION), 2);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_QUEUE_NOTIFY), 0);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_INTERRUPT_ACK), 0);
	/* Unknown offsets, and a queue that does not exist. */
	wr(e, 0x0ac, 0xffffffff);
	ck_assert_uint_eq(rd(e, 0x0ac), 0);
	ck_assert_uint_eq(rd(e, 0x0f8), 0);
	wr(e, VIRTIO_MMIO_QUEUE_SEL, 7);
	wr(e, VIRTIO_MMIO_QUEUE_NUM, 16);
	wr(e, VIRTIO_MMIO_QUEUE_READY, 1);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_QUEUE_READY), 0);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_QUEUE_DESC_LOW), 0);
	/* NEEDS_RESET cannot be set by the driver. */
	wr(e, VIRTIO_MMIO_STATUS, VIRTIO_CONFIG_S_NEEDS_RESET | VIRTIO_CONFIG_S_ACKNOWLEDGE);
	ck_assert_uint_eq(rd(e, VIRTIO_MMIO_STATUS), VIRTIO_CONFIG_S_ACKNOWLEDGE);
	env_free(e);
}
END_TEST

START_TEST(test_slots)
{
	struct env *e = env_new();
	struct vd_tdev more[VIRTIO_MMIO_MAX_DEVS];
	struct vd_tdev extra = { 0 };
	const u8 irqs[] = VIRTIO_MMIO_IRQS;

	memset(more, 0, sizeof(more));
	vd_tdev_init(&extra, 2, 0, NULL);
	for (int i = 1; i < VIRTIO_MMIO_MAX_DEVS; i++) {
		vd_tdev_init(&more[i], 2, 0, NULL);
		ck_assert_int_eq(virtio_mmio_init(&e->kvm, &more[i].vdev, 1, 16), 0);
		ck_assert_uint_eq(slot(e, i)->addr, VIRTIO_MMIO_BASE + (u64)i * VIRTIO_MMIO_SIZE);
		ck_assert_uint_eq(slot(e, i)->irq, irqs[i]);
	}
	ck_assert_int_eq(virtio_mmio_init(&e->kvm, &extra.vdev, 1, 16), -ENOSPC);
	ck_assert(!extra.vdev.initialised);
	/* A freed slot is reused. */
	virtio_device_exit(&more[4].vdev);
	ck_assert_ptr_null(slot(e, 4));
	ck_assert_int_eq(virtio_mmio_init(&e->kvm, &extra.vdev, 1, 16), 0);
	ck_assert_ptr_nonnull(slot(e, 4));
	virtio_device_exit(&extra.vdev);
	for (int i = 1; i < VIRTIO_MMIO_MAX_DEVS; i++)
		virtio_device_exit(&more[i].vdev); /* twice for [4]: no-op */
	/* Bad arguments. */
	ck_assert_int_eq(virtio_mmio_init(&e->kvm, &extra.vdev, 0, 16), -EINVAL);
	ck_assert_int_eq(virtio_mmio_init(&e->kvm, &extra.vdev, 1, 100), -EINVAL);
	ck_assert_int_eq(e->kvm.mmio.nr, 1);
	env_free(e);
}
END_TEST

/* ---- the device tree ---- */

static const void *prop(const void *fdt, const char *path, const char *name, int *len)
{
	int off = fdt_path_offset(fdt, path);

	ck_assert_msg(off >= 0, "no node %s", path);
	return fdt_getprop(fdt, off, name, len);
}

static u64 cell64(const void *p, int i)
{
	return fdt64_to_cpu(((const fdt64_t *)p)[i]);
}

START_TEST(test_dtb)
{
	struct env *e = env_new();
	static u8 buf[FDT_MAX_SIZE];
	const fdt32_t *irq;
	const void *p;
	int len, n, cpus = 0, off;

	n = fdt_build(&e->kvm, "console=ttyS0 virtio_mmio.device=0x200@0xc0000000:5", buf,
		      sizeof(buf));
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(fdt_check_header(buf), 0);
	ck_assert_int_eq((int)fdt_totalsize(buf), n);
	ck_assert_str_eq(prop(buf, "/chosen", "bootargs", &len),
			 "console=ttyS0 virtio_mmio.device=0x200@0xc0000000:5");
	ck_assert_str_eq(prop(buf, "/chosen", "stdout-path", &len), "/serial@3f8");
	p = prop(buf, "/memory@0", "reg", &len);
	ck_assert_int_eq(len, 16);
	ck_assert_uint_eq(cell64(p, 0), 0);
	ck_assert_uint_eq(cell64(p, 1), RAM_SIZE);
	ck_assert_str_eq(prop(buf, "/memory@0", "device_type", &len), "memory");
	fdt_for_each_subnode(off, buf, fdt_path_offset(buf, "/cpus")) cpus++;
	ck_assert_int_eq(cpus, 2);
	p = prop(buf, "/virtio_mmio@c0000000", "reg", &len);
	ck_assert_uint_eq(cell64(p, 0), VIRTIO_MMIO_BASE);
	ck_assert_uint_eq(cell64(p, 1), VIRTIO_MMIO_SIZE);
	ck_assert_str_eq(prop(buf, "/virtio_mmio@c0000000", "compatible", &len), "virtio,mmio");
	irq = prop(buf, "/virtio_mmio@c0000000", "interrupts", &len);
	ck_assert_int_eq(len, 8);
	ck_assert_uint_eq(fdt32_to_cpu(irq[0]), 5);
	irq = prop(buf, "/serial@3f8", "interrupts", &len);
	ck_assert_uint_eq(fdt32_to_cpu(irq[0]), 4);
	ck_assert_ptr_nonnull(prop(buf, "/ioapic@fec00000", "interrupt-controller", &len));
	/* Only slots in use appear; a buffer too small is an error, not a truncated tree. */
	ck_assert_int_lt(fdt_path_offset(buf, "/virtio_mmio@c0000200"), 0);
	ck_assert_int_eq(fdt_build(&e->kvm, "x", buf, 256), -ENOSPC);
	env_free(e);
}
END_TEST

/* What the transport shares with other threads (the negotiated features that device threads
 * and counter readers load, the config generation devices bump) is atomic on virtio-mmio as
 * on virtio-pci: ThreadSanitizer reports a plain access racing an atomic one. */
#define SHARED_ROUNDS 500

static void *config_changer(void *arg)
{
	struct env *e = arg;
	u64 seen = 0;

	for (int i = 0; i < SHARED_ROUNDS; i++) {
		seen |= atomic_load_explicit(&e->t.vdev.features, memory_order_relaxed);
		virtio_config_changed(&e->t.vdev);
	}
	return (void *)(uintptr_t)(seen & ~(VERSION_1 | VD_TDEV_FEATURE_HI));
}

START_TEST(test_shared_state_atomic)
{
	struct env *e = env_new();
	u8 gen0 = (u8)rd(e, VIRTIO_MMIO_CONFIG_GENERATION);
	pthread_t th;
	void *stray;

	ck_assert_int_eq(pthread_create(&th, NULL, config_changer, e), 0);
	for (int i = 0; i < SHARED_ROUNDS; i++) {
		ck_assert(negotiate(e, VERSION_1 | VD_TDEV_FEATURE_HI));
		rd(e, VIRTIO_MMIO_CONFIG_GENERATION);
		wr(e, VIRTIO_MMIO_STATUS, 0);
	}
	ck_assert_int_eq(pthread_join(th, &stray), 0);
	ck_assert_ptr_null(stray); /* only ever the negotiated features, or none */
	/* Each reset and each change moved the generation by one. */
	ck_assert_uint_eq((u8)(rd(e, VIRTIO_MMIO_CONFIG_GENERATION) - gen0),
			  (u8)(2 * SHARED_ROUNDS));
	env_free(e);
}
END_TEST

static Suite *mmio_suite(void)
{
	Suite *s = suite_create("virtio-mmio");
	TCase *tc = tcase_create("mmio");

	tcase_add_test(tc, test_identity);
	tcase_add_test(tc, test_features);
	tcase_add_test(tc, test_queue_setup_and_start);
	tcase_add_test(tc, test_bad_ring_needs_reset);
	tcase_add_test(tc, test_notify_and_interrupts);
	tcase_add_test(tc, test_bad_accesses);
	tcase_add_test(tc, test_slots);
	tcase_add_test(tc, test_dtb);
	tcase_add_test(tc, test_shared_state_atomic);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(mmio_suite)

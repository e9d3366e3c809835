/* Unit tests of the virtio-pci transport without /dev/kvm: capabilities, common config, notify, reset, pci-cfg window, MSI-X. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/kvm.h>
#include <linux/virtio_pci.h>
#include <linux/virtio_ring.h>

#include "capture.h"
#include "check_main.h"
#include "vdriver.h"
#include "lkvm/kvm.h"
#include "lkvm/pci.h"
#include "lkvm/virtio-pci.h"

#define RAM_SIZE MiB(1)
#define QMAX 256
#define OFFERED (VD_TDEV_FEATURE_LO | VD_TDEV_FEATURE_HI | 1ULL << VIRTIO_F_VERSION_1)

#define COMMON 0x0000
#define ISR 0x1000
#define DEVCFG 0x2000
#define NOTIFY 0x3000

#define MAC_CONFIG "\x52\x54\x00\x12\x34\x56\x01\x00" /* the device's 8 config bytes */

/* The VM and one device in slot 1. */
struct env {
	struct kvm kvm;
	u8 *ram;
	struct vd_tdev t;
	u64 bar0, bar2;
};

static struct env *env_new(void)
{
	struct env *e = calloc(1, sizeof(*e));

	ck_assert_ptr_nonnull(e);
	fake_vm_init(&e->kvm, RAM_SIZE);
	e->ram = e->kvm.mem.base;
	ck_assert_int_eq(pci_bus_create(&e->kvm), 0);

	vd_tdev_init(&e->t, 1, 0x020000, MAC_CONFIG);
	e->t.vdev.use_ioeventfd = true; /* no VM: the transport must fall back to trapping */
	pthread_mutex_init(&e->t.vdev.lock, NULL); /* the device's, not the transport's */
	ck_assert_int_eq(virtio_pci_init(&e->kvm, &e->t.vdev, 2, QMAX), 0);
	ck_assert(!e->t.vdev.use_ioeventfd);
	e->bar0 = pci_cfg_read(e->kvm.pci, 1, PCI_BASE_ADDRESS_0, 4) & ~0xfULL;
	e->bar2 = pci_cfg_read(e->kvm.pci, 1, PCI_BASE_ADDRESS_0 + 8, 4) & ~0xfULL;
	ck_assert_uint_ne(e->bar0, 0);
	ck_assert_uint_ne(e->bar2, 0);
	return e;
}

static void env_free(struct env *e)
{
	vd_tdev_detach(&e->t, virtio_pci_destroy, &e->kvm);
	pthread_mutex_destroy(&e->t.vdev.lock);
	pci_bus_destroy(&e->kvm);
	fake_vm_exit(&e->kvm);
	free(e);
}

static u32 cfg_rd(struct env *e, u16 off, int len)
{
	return pci_cfg_read(e->kvm.pci, 1, off, len);
}

static void cfg_wr(struct env *e, u16 off, int len, u32 v)
{
	pci_cfg_write(e->kvm.pci, 1, off, len, v);
}

static u64 mmio(struct env *e, u64 addr, u32 len, bool is_write, u64 v)
{
	u8 d[8] = { 0 };

	memcpy(d, &v, len);
	ck_assert(io_bus_dispatch(&e->kvm.mmio, NULL, addr, d, len, is_write));
	v = 0;
	memcpy(&v, d, len);
	return v;
}

static u64 rd(struct env *e, u32 off, u32 len)
{
	return mmio(e, e->bar0 + off, len, false, 0);
}

static void wr(struct env *e, u32 off, u32 len, u64 v)
{
	mmio(e, e->bar0 + off, len, true, v);
}

static u32 cc_rd(struct env *e, u32 off, u32 len)
{
	return (u32)rd(e, COMMON + off, len);
}

static void cc_wr(struct env *e, u32 off, u32 len, u32 v)
{
	wr(e, COMMON + off, len, v);
}

static u8 status(struct env *e)
{
	return (u8)cc_rd(e, VIRTIO_PCI_COMMON_STATUS, 1);
}

static void set_status(struct env *e, u8 s)
{
	cc_wr(e, VIRTIO_PCI_COMMON_STATUS, 1, s);
}

static void drv_features(struct env *e, u64 f)
{
	cc_wr(e, VIRTIO_PCI_COMMON_GFSELECT, 4, 0);
	cc_wr(e, VIRTIO_PCI_COMMON_GF, 4, (u32)f);
	cc_wr(e, VIRTIO_PCI_COMMON_GFSELECT, 4, 1);
	cc_wr(e, VIRTIO_PCI_COMMON_GF, 4, (u32)(f >> 32));
}

static bool negotiate(struct env *e, u64 f)
{
	set_status(e, VIRTIO_CONFIG_S_ACKNOWLEDGE);
	set_status(e, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER);
	drv_features(e, f);
	set_status(e, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER |
			      VIRTIO_CONFIG_S_FEATURES_OK);
	return status(e) & VIRTIO_CONFIG_S_FEATURES_OK;
}

static void wr64(struct env *e, u32 lo, u64 v)
{
	cc_wr(e, lo, 4, (u32)v);
	cc_wr(e, lo + 4, 4, (u32)(v >> 32));
}

/* Queue qi with size 64, rings in RAM at a per-queue address. */
static void setup_queue(struct env *e, u16 qi, u64 base)
{
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SELECT, 2, qi);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SIZE, 2, 64);
	wr64(e, VIRTIO_PCI_COMMON_Q_DESCLO, base);
	wr64(e, VIRTIO_PCI_COMMON_Q_AVAILLO, base + 0x1000);
	wr64(e, VIRTIO_PCI_COMMON_Q_USEDLO, base + 0x2000);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_ENABLE, 2, 1);
}

static const u8 S_RUNNING = VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER |
			    VIRTIO_CONFIG_S_FEATURES_OK | VIRTIO_CONFIG_S_DRIVER_OK;

static void bring_up(struct env *e)
{
	ck_assert(negotiate(e, OFFERED));
	setup_queue(e, 0, 0x10000);
	setup_queue(e, 1, 0x20000);
	set_status(e, S_RUNNING);
}

/* Every common-config register, for every queue select (0, 1, out of range). */
struct cc_snapshot {
	u32 v[3][32];
};

static void snapshot(struct env *e, struct cc_snapshot *s)
{
	static const struct {
		u16 off;
		u8 len;
	} regs[] = {
		{ VIRTIO_PCI_COMMON_DFSELECT, 4 },  { VIRTIO_PCI_COMMON_DF, 4 },
		{ VIRTIO_PCI_COMMON_GFSELECT, 4 },  { VIRTIO_PCI_COMMON_GF, 4 },
		{ VIRTIO_PCI_COMMON_MSIX, 2 },	    { VIRTIO_PCI_COMMON_NUMQ, 2 },
		{ VIRTIO_PCI_COMMON_STATUS, 1 },    { VIRTIO_PCI_COMMON_Q_SIZE, 2 },
		{ VIRTIO_PCI_COMMON_Q_MSIX, 2 },    { VIRTIO_PCI_COMMON_Q_ENABLE, 2 },
		{ VIRTIO_PCI_COMMON_Q_NOFF, 2 },    { VIRTIO_PCI_COMMON_Q_DESCLO, 4 },
		{ VIRTIO_PCI_COMMON_Q_DESCHI, 4 },  { VIRTIO_PCI_COMMON_Q_AVAILLO, 4 },
		{ VIRTIO_PCI_COMMON_Q_AVAILHI, 4 }, { VIRTIO_PCI_COMMON_Q_USEDLO, 4 },
		{ VIRTIO_PCI_COMMON_Q_USEDHI, 4 },
	};
	u32 sel = cc_rd(e, VIRTIO_PCI_COMMON_Q_SELECT, 2);

	memset(s, 0, sizeof(*s));
	for (u32 q = 0; q < 3; q++) {
		cc_wr(e, VIRTIO_PCI_COMMON_Q_SELECT, 2, q == 2 ? 7 : q);
		for (size_t i = 0; i < ARRAY_SIZE(regs); i++)
			s->v[q][i] = cc_rd(e, regs[i].off, regs[i].len);
		s->v[q][ARRAY_SIZE(regs)] = (u32)rd(e, ISR, 1);
	}
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SELECT, 2, sel);
}

START_TEST(test_identity)
{
	struct env *e = env_new();

	ck_assert_uint_eq(cfg_rd(e, PCI_VENDOR_ID, 2), 0x1af4);
	ck_assert_uint_eq(cfg_rd(e, PCI_DEVICE_ID, 2), 0x1041);
	ck_assert_uint_eq(cfg_rd(e, PCI_REVISION_ID, 1), 1);
	ck_assert_uint_eq(cfg_rd(e, PCI_REVISION_ID, 4) >> 8, 0x020000);
	ck_assert_uint_eq(cfg_rd(e, PCI_SUBSYSTEM_VENDOR_ID, 2), 0x1af4);
	ck_assert_uint_eq(cfg_rd(e, PCI_SUBSYSTEM_ID, 2), 1);
	ck_assert_uint_eq(cfg_rd(e, PCI_HEADER_TYPE, 1), 0);
	ck_assert_uint_eq(cfg_rd(e, PCI_INTERRUPT_PIN, 1), 1);
	ck_assert_uint_eq(cfg_rd(e, PCI_STATUS, 2) & PCI_STATUS_CAP_LIST, PCI_STATUS_CAP_LIST);
	/* BAR sizes through the sizing protocol. */
	cfg_wr(e, PCI_BASE_ADDRESS_0, 4, 0xffffffff);
	ck_assert_uint_eq(cfg_rd(e, PCI_BASE_ADDRESS_0, 4), 0xffffc000u);
	cfg_wr(e, PCI_BASE_ADDRESS_0, 4, (u32)e->bar0);
	cfg_wr(e, PCI_BASE_ADDRESS_0 + 8, 4, 0xffffffff);
	ck_assert_uint_eq(cfg_rd(e, PCI_BASE_ADDRESS_0 + 8, 4), 0xfffff000u);
	cfg_wr(e, PCI_BASE_ADDRESS_0 + 8, 4, (u32)e->bar2);
	ck_assert_uint_eq(cfg_rd(e, PCI_BASE_ADDRESS_0 + 4, 4), 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_NUMQ, 2), 2);
	env_free(e);
}
END_TEST

START_TEST(test_capabilities)
{
	struct env *e = env_new();
	int seen[16] = { 0 }, n = 0;
	u16 msix = 0, pcicfg = 0;

	for (u16 at = (u16)cfg_rd(e, PCI_CAPABILITY_LIST, 1); at; at = (u16)cfg_rd(e, at + 1, 1)) {
		u8 id = (u8)cfg_rd(e, at, 1);

		ck_assert_int_lt(++n, 10); /* no loop */
		ck_assert_uint_ge(at, 0x40);
		ck_assert_uint_eq(at % 4, 0);
		if (id == 0x11) {
			msix = at;
			continue;
		}
		ck_assert_uint_eq(id, 0x09);
		u8 type = (u8)cfg_rd(e, at + VIRTIO_PCI_CAP_CFG_TYPE, 1);
		u8 len = (u8)cfg_rd(e, at + VIRTIO_PCI_CAP_LEN, 1);
		u8 bar = (u8)cfg_rd(e, at + VIRTIO_PCI_CAP_BAR, 1);
		u32 off = cfg_rd(e, at + VIRTIO_PCI_CAP_OFFSET, 4);
		u32 length = cfg_rd(e, at + VIRTIO_PCI_CAP_LENGTH, 4);

		ck_assert_uint_lt(type, 16);
		seen[type]++;
		switch (type) {
		case VIRTIO_PCI_CAP_COMMON_CFG:
			ck_assert_uint_eq(len, sizeof(struct virtio_pci_cap));
			ck_assert_uint_eq(bar, 0);
			ck_assert_uint_eq(off, COMMON);
			ck_assert_uint_ge(length, VIRTIO_PCI_COMMON_Q_USEDHI + 4);
			break;
		case VIRTIO_PCI_CAP_NOTIFY_CFG:
			ck_assert_uint_eq(len, sizeof(struct virtio_pci_notify_cap));
			ck_assert_uint_eq(bar, 0);
			ck_assert_uint_eq(off, NOTIFY);
			ck_assert_uint_ge(length, 2 * 4);
			ck_assert_uint_eq(cfg_rd(e, at + 16, 4), 4); /* notify_off_multiplier */
			break;
		case VIRTIO_PCI_CAP_ISR_CFG:
			ck_assert_uint_eq(bar, 0);
			ck_assert_uint_eq(off, ISR);
			ck_assert_uint_ge(length, 1);
			break;
		case VIRTIO_PCI_CAP_DEVICE_CFG:
			ck_assert_uint_eq(bar, 0);
			ck_assert_uint_eq(off, DEVCFG);
			ck_assert_uint_eq(length, 8);
			break;
		case VIRTIO_PCI_CAP_PCI_CFG:
			ck_assert_uint_eq(len, sizeof(struct virtio_pci_cfg_cap));
			pcicfg = at;
			break;
		default:
			ck_abort_msg("unexpected virtio cap type %u", type);
		}
		/* Regions lie inside BAR 0 (16 KiB). */
		ck_assert(range_ok(off, length, 0x4000));
	}
	for (int t = VIRTIO_PCI_CAP_COMMON_CFG; t <= VIRTIO_PCI_CAP_PCI_CFG; t++)
		ck_assert_int_eq(seen[t], 1);
	ck_assert_uint_ne(msix, 0);
	ck_assert_uint_ne(pcicfg, 0);

	/* MSI-X: 3 vectors (2 queues + config), table at BAR 2 + 0, PBA after it in BAR 2. */
	u32 ctrl = cfg_rd(e, msix + 2, 2), table = cfg_rd(e, msix + 4, 4),
	    pba = cfg_rd(e, msix + 8, 4);

	ck_assert_uint_eq(ctrl, 2);
	ck_assert_uint_eq(table, 0x000 | 2);
	ck_assert_uint_eq(pba & 7, 2);
	ck_assert_uint_ge(pba & ~7u, 3 * 16);
	/* Only enable (15) and function mask (14) are writable. */
	cfg_wr(e, msix + 2, 2, 0xffff);
	ck_assert_uint_eq(cfg_rd(e, msix + 2, 2), 0xc002);
	ck_assert(virtio_pci_msix_enabled(&e->t.vdev));
	cfg_wr(e, msix + 2, 2, 0);
	ck_assert_uint_eq(cfg_rd(e, msix + 2, 2), 2);
	ck_assert(!virtio_pci_msix_enabled(&e->t.vdev));
	cfg_wr(e, msix, 4, 0);
	cfg_wr(e, msix + 4, 4, 0);
	ck_assert_uint_eq(cfg_rd(e, msix, 1), 0x11);
	ck_assert_uint_eq(cfg_rd(e, msix + 4, 4), table);

	/* Virtio caps are read-only, except the pci-cfg window fields. */
	u16 first = (u16)cfg_rd(e, PCI_CAPABILITY_LIST, 1);
	u32 before = cfg_rd(e, first + VIRTIO_PCI_CAP_OFFSET, 4);

	cfg_wr(e, first, 4, 0xffffffff);
	cfg_wr(e, first + VIRTIO_PCI_CAP_OFFSET, 4, 0x1234);
	ck_assert_uint_eq(cfg_rd(e, first, 1), 0x09);
	ck_assert_uint_eq(cfg_rd(e, first + VIRTIO_PCI_CAP_OFFSET, 4), before);
	cfg_wr(e, pcicfg + VIRTIO_PCI_CAP_OFFSET, 4, 0x14);
	ck_assert_uint_eq(cfg_rd(e, pcicfg + VIRTIO_PCI_CAP_OFFSET, 4), 0x14);
	cfg_wr(e, pcicfg, 4, 0);
	ck_assert_uint_eq(cfg_rd(e, pcicfg, 1), 0x09);
	ck_assert_uint_eq(cfg_rd(e, pcicfg + VIRTIO_PCI_CAP_CFG_TYPE, 1), VIRTIO_PCI_CAP_PCI_CFG);
	env_free(e);
}
END_TEST

START_TEST(test_features)
{
	struct env *e = env_new();

	cc_wr(e, VIRTIO_PCI_COMMON_DFSELECT, 4, 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_DF, 4), (u32)(OFFERED | VD_TDEV_REFUSED));
	cc_wr(e, VIRTIO_PCI_COMMON_DFSELECT, 4, 1);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_DFSELECT, 4), 1);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_DF, 4), (u32)(OFFERED >> 32));
	ck_assert_uint_ne(cc_rd(e, VIRTIO_PCI_COMMON_DF, 4) & 1, 0); /* VERSION_1 is bit 32 */
	cc_wr(e, VIRTIO_PCI_COMMON_DFSELECT, 4, 2);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_DF, 4), 0);
	cc_wr(e, VIRTIO_PCI_COMMON_DF, 4, 0xffffffff); /* read-only */
	cc_wr(e, VIRTIO_PCI_COMMON_DFSELECT, 4, 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_DF, 4), (u32)(OFFERED | VD_TDEV_REFUSED));

	/* Driver features read back as written, by halves. */
	drv_features(e, 0x123456789abcdefULL);
	cc_wr(e, VIRTIO_PCI_COMMON_GFSELECT, 4, 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_GF, 4), 0x89abcdef);
	cc_wr(e, VIRTIO_PCI_COMMON_GFSELECT, 4, 1);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_GF, 4), 0x01234567);

	/* An unoffered bit, a missing VERSION_1, a combination the device refuses. */
	ck_assert(!negotiate(e, OFFERED | 1ULL << 40));
	ck_assert_uint_eq(status(e), VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER);
	ck_assert(!negotiate(e, VD_TDEV_FEATURE_LO));
	ck_assert(!negotiate(e, OFFERED | VD_TDEV_REFUSED));
	ck_assert_uint_eq(e->t.features_seen, OFFERED | VD_TDEV_REFUSED);
	ck_assert_uint_eq(e->t.vdev.features, 0);
	/* DRIVER_OK without FEATURES_OK does not stick. */
	set_status(e, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER |
			      VIRTIO_CONFIG_S_DRIVER_OK);
	ck_assert_uint_eq(status(e), VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER);
	ck_assert_int_eq(e->t.starts, 0);

	ck_assert(negotiate(e, VD_TDEV_FEATURE_HI | 1ULL << VIRTIO_F_VERSION_1));
	ck_assert_uint_eq(e->t.vdev.features, VD_TDEV_FEATURE_HI | 1ULL << VIRTIO_F_VERSION_1);
	/* Frozen after FEATURES_OK. */
	drv_features(e, OFFERED);
	cc_wr(e, VIRTIO_PCI_COMMON_GFSELECT, 4, 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_GF, 4), 0);
	ck_assert_uint_eq(e->t.vdev.features, VD_TDEV_FEATURE_HI | 1ULL << VIRTIO_F_VERSION_1);
	/* Status bits cannot be taken away except by reset; NEEDS_RESET is not the driver's. */
	set_status(e, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_NEEDS_RESET);
	ck_assert_uint_eq(status(e), VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER |
					     VIRTIO_CONFIG_S_FEATURES_OK);
	env_free(e);
}
END_TEST

START_TEST(test_queue_setup_and_start)
{
	struct env *e = env_new();
	struct virtio_device *vdev = &e->t.vdev;

	ck_assert(negotiate(e, OFFERED));
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SELECT, 2, 1);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_SIZE, 2), QMAX);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_NOFF, 2), 1);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_MSIX, 2), VIRTIO_MSI_NO_VECTOR);
	/* Sizes: not a power of two, zero, above the maximum: ignored. */
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SIZE, 2, 48);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SIZE, 2, 0);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SIZE, 2, QMAX * 2);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_SIZE, 2), QMAX);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SIZE, 2, 16);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_SIZE, 2), 16);
	/* 64-bit addresses by halves. */
	wr64(e, VIRTIO_PCI_COMMON_Q_DESCLO, 0x123456789000ULL);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_DESCLO, 4), 0x56789000);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_DESCHI, 4), 0x1234);
	ck_assert_uint_eq(vdev->q[1].desc, 0x123456789000ULL);

	/* Out-of-range select: reads 0, writes go nowhere. */
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SELECT, 2, 2);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_SELECT, 2), 2);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_SIZE, 2), 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_NOFF, 2), 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_MSIX, 2), 0);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SIZE, 2, 8);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_ENABLE, 2, 1);
	wr64(e, VIRTIO_PCI_COMMON_Q_USEDLO, 0x5000);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_ENABLE, 2), 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_USEDLO, 4), 0);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SELECT, 2, 0xffff);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_SIZE, 2), 0);

	setup_queue(e, 0, 0x10000);
	setup_queue(e, 1, 0x20000);
	ck_assert(vdev->q[0].enabled && vdev->q[1].enabled);
	/* Once enabled, setup registers are frozen. */
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SIZE, 2, 8);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_DESCLO, 4, 0x9000);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_ENABLE, 2, 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_SIZE, 2), 64);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_DESCLO, 4), 0x20000);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_ENABLE, 2), 1);
	ck_assert(!vdev->q[0].vq.ready);

	set_status(e, S_RUNNING);
	ck_assert_uint_eq(status(e), S_RUNNING);
	ck_assert_int_eq(e->t.starts, 1);
	ck_assert(e->t.ready_at_start[0] && e->t.ready_at_start[1]);
	ck_assert_uint_eq(vdev->q[0].vq.size, 64);
	ck_assert_ptr_eq(vdev->q[1].vq.desc, e->ram + 0x20000);
	ck_assert_ptr_eq(vdev->q[1].vq.used, e->ram + 0x22000);
	/* Writing DRIVER_OK again does not start twice. */
	set_status(e, S_RUNNING);
	ck_assert_int_eq(e->t.starts, 1);
	/* EVENT_IDX was not negotiated. */
	ck_assert(!vdev->q[0].vq.event_idx);
	env_free(e);
}
END_TEST

START_TEST(test_driver_ok_failures)
{
	struct env *e = env_new();

	/* A ring outside RAM: NEEDS_RESET, no start. */
	ck_assert(negotiate(e, OFFERED));
	setup_queue(e, 0, 0x10000);
	setup_queue(e, 1, RAM_SIZE - 0x100);
	set_status(e, S_RUNNING);
	ck_assert_uint_eq(status(e), S_RUNNING | VIRTIO_CONFIG_S_NEEDS_RESET);
	ck_assert_int_eq(e->t.starts, 0);
	/* Reset clears it; a device whose start fails also ends in NEEDS_RESET. */
	set_status(e, 0);
	ck_assert_uint_eq(status(e), 0);
	ck_assert(!atomic_load(&e->t.vdev.needs_reset_logged));
	e->t.start_ret = -EIO;
	bring_up(e);
	ck_assert_int_eq(e->t.starts, 1);
	ck_assert_uint_eq(status(e), S_RUNNING | VIRTIO_CONFIG_S_NEEDS_RESET);
	/* A queue that was never enabled is not initialised, and that is fine. */
	e->t.start_ret = 0;
	set_status(e, 0);
	ck_assert(negotiate(e, OFFERED));
	setup_queue(e, 1, 0x20000);
	set_status(e, S_RUNNING);
	ck_assert_uint_eq(status(e), S_RUNNING);
	ck_assert(!e->t.ready_at_start[0] && e->t.ready_at_start[1]);
	env_free(e);
}
END_TEST

START_TEST(test_notify_trap)
{
	struct env *e = env_new();
	struct virtio_device *vdev = &e->t.vdev;
	u64 v = 0;

	bring_up(e);
	ck_assert_int_ge(vdev->q[0].kick_fd, 0);
	ck_assert_int_lt(read(vdev->q[1].kick_fd, &v, 8), 0); /* nothing yet */
	wr(e, NOTIFY + 4, 2, 1); /* what Linux writes: iowrite16(queue index) */
	wr(e, NOTIFY + 4, 4, 1);
	ck_assert_int_eq(read(vdev->q[1].kick_fd, &v, 8), 8);
	ck_assert_uint_eq(v, 2);
	ck_assert_uint_eq(atomic_load(&vdev->q[1].stats.trapped), 2);
	ck_assert_uint_eq(atomic_load(&vdev->q[0].stats.trapped), 0);
	/* Kicks are the device thread's to count, from what it reads on kick_fd. */
	ck_assert_uint_eq(atomic_load(&vdev->q[1].stats.kicks), 0);
	wr(e, NOTIFY, 2, 0);
	ck_assert_int_eq(read(vdev->q[0].kick_fd, &v, 8), 8);
	/* Not a queue's address, a queue we do not have, a read: nothing. */
	wr(e, NOTIFY + 2, 2, 0);
	wr(e, NOTIFY + 8, 2, 2);
	wr(e, NOTIFY + 0x800, 4, 0);
	ck_assert_uint_eq(rd(e, NOTIFY + 4, 2), 0);
	ck_assert_int_lt(read(vdev->q[0].kick_fd, &v, 8), 0);
	ck_assert_int_lt(read(vdev->q[1].kick_fd, &v, 8), 0);
	ck_assert_uint_eq(atomic_load(&vdev->q[0].stats.trapped), 1);
	/* Kicks pending at reset are dropped. */
	wr(e, NOTIFY, 2, 0);
	set_status(e, 0);
	ck_assert_int_lt(read(vdev->q[0].kick_fd, &v, 8), 0);
	env_free(e);
}
END_TEST

START_TEST(test_reset)
{
	struct env *e = env_new();
	struct virtio_device *vdev = &e->t.vdev;
	struct cc_snapshot initial, after;
	u8 gen = (u8)cc_rd(e, VIRTIO_PCI_COMMON_CFGGENERATION, 1);

	snapshot(e, &initial);
	ck_assert_uint_eq(initial.v[0][4], VIRTIO_MSI_NO_VECTOR); /* msix_config */
	bring_up(e);
	cc_wr(e, VIRTIO_PCI_COMMON_MSIX, 2, 2);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SELECT, 2, 0);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_MSIX, 2, 0);
	cc_wr(e, VIRTIO_PCI_COMMON_DFSELECT, 4, 1);
	atomic_fetch_or(&vdev->isr, 1);
	virtio_set_needs_reset(vdev, "test");
	ck_assert(atomic_load(&vdev->needs_reset_logged));
	snapshot(e, &after);
	ck_assert_mem_ne(&initial, &after, sizeof(initial));
	ck_assert_int_eq(e->t.stops, 0);

	set_status(e, 0);
	ck_assert_int_eq(e->t.stops, 1);
	ck_assert(!vdev->q[0].vq.ready && !vdev->q[1].vq.ready);
	ck_assert_uint_eq(vdev->features, 0);
	ck_assert(!atomic_load(&vdev->needs_reset_logged));
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_CFGGENERATION, 1), (u8)(gen + 1));
	snapshot(e, &after);
	for (int q = 0; q < 3; q++)
		for (int i = 0; i < 32; i++)
			ck_assert_msg(initial.v[q][i] == after.v[q][i], "q %d reg %d: %#x != %#x",
				      q, i, initial.v[q][i], after.v[q][i]);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SELECT, 2, 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_SELECT, 2), 0);
	/* And the device comes up again. */
	bring_up(e);
	ck_assert_int_eq(e->t.starts, 2);
	ck_assert_uint_eq(status(e), S_RUNNING);
	env_free(e);
}
END_TEST

START_TEST(test_bad_accesses)
{
	struct env *e = env_new();

	/* Wrong widths on common-config registers: reads 0, writes ignored. */
	cc_wr(e, VIRTIO_PCI_COMMON_DFSELECT, 2, 1);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_DFSELECT, 4), 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_DF, 2), 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_DF + 1, 1), 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_NUMQ, 4), 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_NUMQ, 1), 0);
	cc_wr(e, VIRTIO_PCI_COMMON_STATUS, 4, VIRTIO_CONFIG_S_ACKNOWLEDGE);
	cc_wr(e, VIRTIO_PCI_COMMON_STATUS, 2, VIRTIO_CONFIG_S_ACKNOWLEDGE);
	ck_assert_uint_eq(status(e), 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_DESCLO, 8), 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_SIZE + 1, 1), 0);
	/* Read-only registers. */
	cc_wr(e, VIRTIO_PCI_COMMON_NUMQ, 2, 9);
	cc_wr(e, VIRTIO_PCI_COMMON_CFGGENERATION, 1, 9);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_NOFF, 2, 9);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_NUMQ, 2), 2);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_CFGGENERATION, 1), 0);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_NOFF, 2), 0);
	/* Unknown offsets: past the structure, inside the region, between regions. */
	ck_assert_uint_eq(cc_rd(e, 0x38, 2), 0);
	ck_assert_uint_eq(cc_rd(e, 0x3c, 4), 0);
	ck_assert_uint_eq(cc_rd(e, 0xffc, 4), 0);
	cc_wr(e, 0x40, 4, 0xffffffff);
	ck_assert_uint_eq(rd(e, 0xffe, 4), 0); /* straddles common and ISR */
	/* ISR: byte reads only. */
	atomic_store(&e->t.vdev.isr, 3);
	ck_assert_uint_eq(rd(e, ISR, 4), 0);
	ck_assert_uint_eq(rd(e, ISR + 1, 1), 0);
	wr(e, ISR, 1, 0);
	ck_assert_uint_eq(atomic_load(&e->t.vdev.isr), 3);
	ck_assert_uint_eq(rd(e, ISR, 1), 3);
	ck_assert_uint_eq(rd(e, ISR, 1), 0);
	/* Device config: any alignment inside config_size, nothing past it. */
	ck_assert_uint_eq(rd(e, DEVCFG, 4), 0x12005452);
	ck_assert_uint_eq(rd(e, DEVCFG + 3, 2), 0x3412);
	ck_assert_uint_eq(rd(e, DEVCFG + 6, 2), 0x0001);
	ck_assert_uint_eq(rd(e, DEVCFG + 7, 2), 0);
	ck_assert_uint_eq(rd(e, DEVCFG + 8, 1), 0);
	wr(e, DEVCFG + 6, 2, 0xbeef);
	wr(e, DEVCFG + 7, 4, 0xffffffff);
	ck_assert_uint_eq(rd(e, DEVCFG + 6, 2), 0xbeef);
	ck_assert_uint_eq(rd(e, DEVCFG + 0xff0, 8), 0);
	/* MSI-X BAR: bytes, words and misaligned accesses. */
	ck_assert_uint_eq(mmio(e, e->bar2 + 12, 4, false, 0), 1); /* vector 0 masked */
	ck_assert_uint_eq(mmio(e, e->bar2 + 12, 1, false, 0), 0);
	ck_assert_uint_eq(mmio(e, e->bar2 + 10, 4, false, 0), 0);
	ck_assert_uint_eq(mmio(e, e->bar2 + 4, 8, false, 0), 0);
	mmio(e, e->bar2 + 12, 2, true, 0);
	ck_assert_uint_eq(mmio(e, e->bar2 + 12, 4, false, 0), 1);
	env_free(e);
}
END_TEST

START_TEST(test_pci_cfg_window)
{
	struct env *e = env_new();
	u16 cap = 0;

	for (u16 at = (u16)cfg_rd(e, PCI_CAPABILITY_LIST, 1); at; at = (u16)cfg_rd(e, at + 1, 1))
		if (cfg_rd(e, at, 1) == 0x09 &&
		    cfg_rd(e, at + VIRTIO_PCI_CAP_CFG_TYPE, 1) == VIRTIO_PCI_CAP_PCI_CFG)
			cap = at;
	ck_assert_uint_ne(cap, 0);
	u16 data = cap + offsetof(struct virtio_pci_cfg_cap, pci_cfg_data);

	/* num_queues, 2 bytes. */
	cfg_wr(e, cap + VIRTIO_PCI_CAP_BAR, 1, 0);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_OFFSET, 4, COMMON + VIRTIO_PCI_COMMON_NUMQ);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_LENGTH, 4, 2);
	ck_assert_uint_eq(cfg_rd(e, data, 4), 2);
	ck_assert_uint_eq(cfg_rd(e, data, 2), 2);
	/* device_feature, 4 bytes. */
	cfg_wr(e, cap + VIRTIO_PCI_CAP_OFFSET, 4, COMMON + VIRTIO_PCI_COMMON_DF);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_LENGTH, 4, 4);
	ck_assert_uint_eq(cfg_rd(e, data, 4), (u32)(OFFERED | VD_TDEV_REFUSED));
	ck_assert_uint_eq(cfg_rd(e, data + 2, 2), (u32)(OFFERED | VD_TDEV_REFUSED) >> 16);
	/* A status write through the window is a status write. */
	cfg_wr(e, cap + VIRTIO_PCI_CAP_OFFSET, 4, COMMON + VIRTIO_PCI_COMMON_STATUS);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_LENGTH, 4, 1);
	cfg_wr(e, data, 1, VIRTIO_CONFIG_S_ACKNOWLEDGE);
	ck_assert_uint_eq(status(e), VIRTIO_CONFIG_S_ACKNOWLEDGE);
	ck_assert_uint_eq(cfg_rd(e, data, 1), VIRTIO_CONFIG_S_ACKNOWLEDGE);
	/* Device config and the MSI-X table (BAR 2) are reachable too. */
	cfg_wr(e, cap + VIRTIO_PCI_CAP_OFFSET, 4, DEVCFG + 2);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_LENGTH, 4, 2);
	ck_assert_uint_eq(cfg_rd(e, data, 2), 0x1200);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_BAR, 1, 2);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_OFFSET, 4, 12);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_LENGTH, 4, 4);
	ck_assert_uint_eq(cfg_rd(e, data, 4), 1);
	/* Rejected windows: a BAR we do not have, bad length, misaligned, past the BAR. */
	cfg_wr(e, cap + VIRTIO_PCI_CAP_BAR, 1, 1);
	ck_assert_uint_eq(cfg_rd(e, data, 4), 0);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_BAR, 1, 7);
	ck_assert_uint_eq(cfg_rd(e, data, 4), 0);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_BAR, 1, 0);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_OFFSET, 4, COMMON + VIRTIO_PCI_COMMON_NUMQ);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_LENGTH, 4, 3);
	ck_assert_uint_eq(cfg_rd(e, data, 4), 0);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_LENGTH, 4, 8);
	ck_assert_uint_eq(cfg_rd(e, data, 4), 0);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_OFFSET, 4, COMMON + VIRTIO_PCI_COMMON_NUMQ + 1);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_LENGTH, 4, 2);
	ck_assert_uint_eq(cfg_rd(e, data, 4), 0);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_OFFSET, 4, 0x4000);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_LENGTH, 4, 1);
	ck_assert_uint_eq(cfg_rd(e, data, 1), 0);
	cfg_wr(e, cap + VIRTIO_PCI_CAP_OFFSET, 4, 0xffffffff);
	ck_assert_uint_eq(cfg_rd(e, data, 1), 0);
	cfg_wr(e, data, 1, 0); /* ignored: no reset happened */
	ck_assert_uint_eq(status(e), VIRTIO_CONFIG_S_ACKNOWLEDGE);
	env_free(e);
}
END_TEST

static u16 find_msix(struct env *e)
{
	for (u16 at = (u16)cfg_rd(e, PCI_CAPABILITY_LIST, 1); at; at = (u16)cfg_rd(e, at + 1, 1))
		if (cfg_rd(e, at, 1) == 0x11)
			return at;
	ck_abort_msg("no MSI-X capability");
	return 0;
}

static u32 tbl_rd(struct env *e, int v, int field)
{
	return (u32)mmio(e, e->bar2 + 16 * (u64)v + 4 * (u64)field, 4, false, 0);
}

static void tbl_wr(struct env *e, int v, int field, u32 val)
{
	mmio(e, e->bar2 + 16 * (u64)v + 4 * (u64)field, 4, true, val);
}

static u64 pba(struct env *e)
{
	u16 msix = find_msix(e);

	return mmio(e, e->bar2 + (cfg_rd(e, msix + 8, 4) & ~7u), 8, false, 0);
}

static bool fd_count(int fd, u64 *v)
{
	return read(fd, v, 8) == 8;
}

START_TEST(test_msix)
{
	struct env *e = env_new();
	struct virtio_device *vdev = &e->t.vdev;
	u16 msix = find_msix(e);
	u64 one = 1, v;

	/* Table: every entry starts masked; address/data stored; only the mask bit sticks. */
	for (int i = 0; i < 3; i++) {
		ck_assert_uint_eq(tbl_rd(e, i, 3), 1);
		ck_assert_uint_eq(tbl_rd(e, i, 0), 0);
	}
	for (int i = 0; i < 3; i++) {
		tbl_wr(e, i, 0, 0xfee00000 + 0x1000 * (u32)i);
		tbl_wr(e, i, 1, 0);
		tbl_wr(e, i, 2, 0x40 + (u32)i);
	}
	tbl_wr(e, 1, 3, 0xfffffffe);
	ck_assert_uint_eq(tbl_rd(e, 1, 3), 0);
	tbl_wr(e, 1, 3, 0xffffffff);
	ck_assert_uint_eq(tbl_rd(e, 1, 3), 1);
	ck_assert_uint_eq(tbl_rd(e, 2, 0), 0xfee02000);
	ck_assert_uint_eq(tbl_rd(e, 2, 2), 0x42);
	ck_assert_uint_eq(mmio(e, e->bar2 + 16, 8, false, 0), 0xfee01000);
	mmio(e, e->bar2 + 16, 8, true, 0x00000001fee0f000ULL);
	ck_assert_uint_eq(tbl_rd(e, 1, 0), 0xfee0f000);
	ck_assert_uint_eq(tbl_rd(e, 1, 1), 1);
	/* Past the 3 vectors: nothing. */
	tbl_wr(e, 3, 0, 0x1234);
	ck_assert_uint_eq(tbl_rd(e, 3, 0), 0);
	mmio(e, e->bar2 + (cfg_rd(e, msix + 8, 4) & ~7u), 8, true, ~0ULL); /* PBA read-only */
	ck_assert_uint_eq(pba(e), 0);

	/* Vectors: out-of-range ones read back NO_VECTOR; without MSI-X, no eventfds. */
	cc_wr(e, VIRTIO_PCI_COMMON_MSIX, 2, 3);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_MSIX, 2), VIRTIO_MSI_NO_VECTOR);
	cc_wr(e, VIRTIO_PCI_COMMON_MSIX, 2, 2);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_MSIX, 2), 2);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SELECT, 2, 0);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_MSIX, 2, 0);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SELECT, 2, 1);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_MSIX, 2, 7);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_MSIX, 2), VIRTIO_MSI_NO_VECTOR);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_MSIX, 2, 1);
	ck_assert_int_eq(vdev->q[0].irq_fd, -1);
	ck_assert_int_eq(vdev->config_irq_fd, -1);

	/* Enable: the queue and config signal their vectors' eventfds. */
	cfg_wr(e, msix + 2, 2, 0x8000);
	ck_assert(virtio_pci_msix_enabled(vdev));
	ck_assert_int_ge(vdev->q[0].irq_fd, 0);
	ck_assert_int_ge(vdev->q[1].irq_fd, 0);
	ck_assert_int_ge(vdev->config_irq_fd, 0);
	ck_assert_int_ne(vdev->q[0].irq_fd, vdev->q[1].irq_fd);
	ck_assert_int_ne(vdev->q[0].irq_fd, vdev->config_irq_fd);

	/* Vector 1 is masked: its signal is pending in the PBA until unmasked. */
	ck_assert_int_eq(write(vdev->q[1].irq_fd, &one, 8), 8);
	ck_assert_uint_eq(pba(e), 1u << 1);
	ck_assert_uint_eq(pba(e), 1u << 1); /* reading does not consume it */
	ck_assert_uint_eq(mmio(e, e->bar2 + (cfg_rd(e, msix + 8, 4) & ~7u), 4, false, 0), 2);
	tbl_wr(e, 1, 3, 0);
	ck_assert_uint_eq(pba(e), 0);
	/* Without a VM nothing drains the eventfd: the signal is still counted there. */
	ck_assert(fd_count(vdev->q[1].irq_fd, &v));
	ck_assert_uint_eq(v, 1);
	/* Function mask: every vector masked. */
	tbl_wr(e, 0, 3, 0);
	tbl_wr(e, 2, 3, 0);
	cfg_wr(e, msix + 2, 2, 0xc000);
	ck_assert_int_eq(write(vdev->config_irq_fd, &one, 8), 8);
	ck_assert_uint_eq(pba(e), 1u << 2);
	cfg_wr(e, msix + 2, 2, 0x8000);
	ck_assert_uint_eq(pba(e), 0);
	ck_assert(fd_count(vdev->config_irq_fd, &v));

	/* A queue interrupt goes to its vector, not to the ISR. */
	bring_up(e);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SELECT, 2, 0);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_MSIX, 2, 0);
	virtio_notify_queue(vdev, 0);
	ck_assert(fd_count(vdev->q[0].irq_fd, &v));
	ck_assert_uint_eq(atomic_load(&vdev->isr), 0);
	ck_assert_uint_eq(atomic_load(&vdev->q[0].stats.irqs), 1);
	/* A queue without a vector under MSI-X: no interrupt (ISR bit only). */
	cc_wr(e, VIRTIO_PCI_COMMON_Q_MSIX, 2, VIRTIO_MSI_NO_VECTOR);
	ck_assert_int_eq(vdev->q[0].irq_fd, -1);

	/* Disable: back to INTx, the ISR carries the cause. */
	cfg_wr(e, msix + 2, 2, 0);
	ck_assert(!virtio_pci_msix_enabled(vdev));
	ck_assert_int_eq(vdev->q[1].irq_fd, -1);
	ck_assert_int_eq(vdev->config_irq_fd, -1);
	atomic_store(&vdev->isr, 0);
	virtio_notify_config(vdev);
	ck_assert_uint_eq(rd(e, ISR, 1), 2);
	ck_assert_uint_eq(rd(e, ISR, 1), 0);
	virtio_notify_queue(vdev, 1);
	ck_assert_uint_eq(rd(e, ISR, 1), 1);

	/* Reset: vectors back to NO_VECTOR, the table itself stays (PCI state). */
	cfg_wr(e, msix + 2, 2, 0x8000);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_SELECT, 2, 1);
	cc_wr(e, VIRTIO_PCI_COMMON_Q_MSIX, 2, 1);
	set_status(e, 0);
	ck_assert_int_eq(vdev->q[1].irq_fd, -1);
	ck_assert_uint_eq(cc_rd(e, VIRTIO_PCI_COMMON_Q_MSIX, 2), VIRTIO_MSI_NO_VECTOR);
	ck_assert_uint_eq(tbl_rd(e, 2, 2), 0x42);
	env_free(e);
}
END_TEST

START_TEST(test_gsi_allocator)
{
	struct kvm *kvm = calloc(1, sizeof(*kvm));
	int a, b, c;

	ck_assert_ptr_nonnull(kvm);
	kvm->vm_fd = -1;
	a = kvm_gsi_alloc(kvm);
	b = kvm_gsi_alloc(kvm);
	ck_assert_int_eq(a, KVM_IRQ_MSI_GSI_BASE);
	ck_assert_int_eq(b, KVM_IRQ_MSI_GSI_BASE + 1);
	ck_assert_int_eq(kvm_gsi_route_msi(kvm, b, 0xfee00000, 0x41), 0);
	ck_assert(kvm->msi_routes[1].valid);
	ck_assert_int_eq(kvm_gsi_route_msi(kvm, 5, 0xfee00000, 0x41), -EINVAL);
	ck_assert_int_eq(kvm_gsi_route_msi(kvm, b + 1, 0xfee00000, 0x41), -EINVAL);
	kvm_gsi_free(kvm, a);
	c = kvm_gsi_alloc(kvm);
	ck_assert_int_eq(c, a);
	kvm_gsi_free(kvm, b);
	ck_assert(!kvm->msi_routes[1].valid);
	kvm_gsi_free(kvm, 3); /* not ours: ignored */
	for (int i = 1; i < KVM_IRQ_MSI_ROUTES; i++)
		ck_assert_int_ge(kvm_gsi_alloc(kvm), KVM_IRQ_MSI_GSI_BASE);
	ck_assert_int_eq(kvm_gsi_alloc(kvm), -ENOSPC);
	free(kvm);
}
END_TEST

START_TEST(test_init_errors)
{
	struct env *e = env_new();
	struct vd_tdev t2 = { 0 };

	vd_tdev_init(&t2, 1, 0x020000, NULL);
	pthread_mutex_init(&t2.vdev.lock, NULL);
	ck_assert_int_eq(virtio_pci_init(&e->kvm, &t2.vdev, 0, 256), -EINVAL);
	ck_assert_int_eq(virtio_pci_init(&e->kvm, &t2.vdev, VIRTIO_MAX_QUEUES + 1, 256), -EINVAL);
	ck_assert_int_eq(virtio_pci_init(&e->kvm, &t2.vdev, 1, 100), -EINVAL);
	ck_assert_int_eq(virtio_pci_init(&e->kvm, &t2.vdev, 1, 0), -EINVAL);
	/* The largest device: 17 queues, 18 vectors, in slot 2. */
	ck_assert_int_eq(virtio_pci_init(&e->kvm, &t2.vdev, VIRTIO_MAX_QUEUES, 1024), 0);
	ck_assert_uint_eq(pci_cfg_read(e->kvm.pci, 2, PCI_VENDOR_ID, 4), 0x10411af4);
	ck_assert_uint_eq(pci_cfg_read(e->kvm.pci, 2, 0x9a, 2) & 0x7ff, VIRTIO_MAX_QUEUES);
	virtio_pci_destroy(&t2.vdev);
	virtio_pci_destroy(&t2.vdev); /* twice: no-op */
	ck_assert_uint_eq(pci_cfg_read(e->kvm.pci, 2, PCI_VENDOR_ID, 4), 0xffffffffu);
	pthread_mutex_destroy(&t2.vdev.lock);
	env_free(e);
}
END_TEST

/* A guest looping "reset, break a queue" logs a bounded number of NEEDS_RESET lines. */
START_TEST(test_needs_reset_log_bounded)
{
	struct env *e = env_new();
	struct capture c;
	int lines;

	capture_start(&c);
	for (int i = 0; i < 300; i++) {
		bring_up(e);
		virtio_set_needs_reset(&e->t.vdev, "looping guest");
		ck_assert(status(e) & VIRTIO_CONFIG_S_NEEDS_RESET);
		set_status(e, 0);
	}
	lines = capture_end(&c, NULL, 0);
	ck_assert_int_ge(lines, 1);
	ck_assert_int_le(lines, RATELIMIT_BURST);
	env_free(e);
}
END_TEST

/* Is there a KVM_IOEVENTFD (any datamatch) of this length at addr? KVM refuses a second
 * one on the same address and length with EEXIST; a successful probe is taken back. */
static bool ioeventfd_at(int vm_fd, u64 addr, u32 len)
{
	int fd = eventfd(0, EFD_CLOEXEC);
	struct kvm_ioeventfd req = { .addr = addr, .len = len, .fd = fd };
	bool exists;

	ck_assert_int_ge(fd, 0);
	if (ioctl(vm_fd, KVM_IOEVENTFD, &req) == 0) {
		req.flags = KVM_IOEVENTFD_FLAG_DEASSIGN;
		ck_assert_int_eq(ioctl(vm_fd, KVM_IOEVENTFD, &req), 0);
		exists = false;
	} else {
		ck_assert_int_eq(errno, EEXIST);
		exists = true;
	}
	close(fd);
	return exists;
}

/* The notify ioeventfds follow BAR 0: gone from where it was, never placed where its
 * mapping failed (on top of another device's BAR), back when it is mapped again. */
START_TEST(test_ioeventfds_follow_bar0)
{
	struct env *e = calloc(1, sizeof(*e));
	struct vd_tdev t2 = { 0 };
	int sys_fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	u64 b0, other;

	ck_assert_ptr_nonnull(e);
	ck_assert_int_ge(sys_fd, 0);
	fake_vm_init(&e->kvm, RAM_SIZE);
	e->ram = e->kvm.mem.base;
	e->kvm.vm_fd = ioctl(sys_fd, KVM_CREATE_VM, 0);
	ck_assert_int_ge(e->kvm.vm_fd, 0);
	pthread_mutex_init(&e->kvm.irq_lock, NULL);
	ck_assert_int_eq(pci_bus_create(&e->kvm), 0);
	vd_tdev_init(&e->t, 1, 0x020000, NULL);
	e->t.vdev.use_ioeventfd = true;
	pthread_mutex_init(&e->t.vdev.lock, NULL);
	ck_assert_int_eq(virtio_pci_init(&e->kvm, &e->t.vdev, 2, QMAX), 0);
	ck_assert(e->t.vdev.use_ioeventfd);
	vd_tdev_init(&t2, 1, 0x020000, NULL);
	pthread_mutex_init(&t2.vdev.lock, NULL);
	ck_assert_int_eq(virtio_pci_init(&e->kvm, &t2.vdev, 2, QMAX), 0);
	b0 = e->bar0 = pci_cfg_read(e->kvm.pci, 1, PCI_BASE_ADDRESS_0, 4) & ~0xfULL;
	other = pci_cfg_read(e->kvm.pci, 2, PCI_BASE_ADDRESS_0, 4) & ~0xfULL;

	bring_up(e);
	ck_assert(ioeventfd_at(e->kvm.vm_fd, b0 + NOTIFY + 4, 2));
	ck_assert(ioeventfd_at(e->kvm.vm_fd, b0 + NOTIFY + 4, 4));
	/* Onto the other device's BAR 0: the mapping fails; no ioeventfd stays behind at the
	 * old address, and none lands on the other device's registers. */
	cfg_wr(e, PCI_BASE_ADDRESS_0, 4, (u32)other);
	ck_assert(!ioeventfd_at(e->kvm.vm_fd, b0 + NOTIFY + 4, 2));
	ck_assert(!ioeventfd_at(e->kvm.vm_fd, other + NOTIFY + 4, 2));
	ck_assert(!ioeventfd_at(e->kvm.vm_fd, other + NOTIFY, 4));
	/* Back where it was: mapped, and the ioeventfds with it. */
	cfg_wr(e, PCI_BASE_ADDRESS_0, 4, (u32)b0);
	ck_assert(ioeventfd_at(e->kvm.vm_fd, b0 + NOTIFY + 4, 2));
	/* Decode off: none. A reset drops them too. */
	cfg_wr(e, PCI_COMMAND, 2, 0);
	ck_assert(!ioeventfd_at(e->kvm.vm_fd, b0 + NOTIFY, 2));
	cfg_wr(e, PCI_COMMAND, 2, PCI_COMMAND_MEMORY);
	ck_assert(ioeventfd_at(e->kvm.vm_fd, b0 + NOTIFY, 2));
	set_status(e, 0);
	ck_assert(!ioeventfd_at(e->kvm.vm_fd, b0 + NOTIFY, 2));

	virtio_pci_destroy(&t2.vdev);
	pthread_mutex_destroy(&t2.vdev.lock);
	virtio_pci_destroy(&e->t.vdev);
	pthread_mutex_destroy(&e->t.vdev.lock);
	pci_bus_destroy(&e->kvm);
	pthread_mutex_destroy(&e->kvm.irq_lock);
	close(e->kvm.vm_fd);
	close(sys_fd);
	fake_vm_exit(&e->kvm);
	free(e);
}
END_TEST

static Suite *virtio_pci_suite(void)
{
	Suite *s = suite_create("virtio-pci");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_identity);
	tcase_add_test(tc, test_capabilities);
	tcase_add_test(tc, test_features);
	tcase_add_test(tc, test_queue_setup_and_start);
	tcase_add_test(tc, test_driver_ok_failures);
	tcase_add_test(tc, test_notify_trap);
	tcase_add_test(tc, test_reset);
	tcase_add_test(tc, test_bad_accesses);
	tcase_add_test(tc, test_pci_cfg_window);
	tcase_add_test(tc, test_msix);
	tcase_add_test(tc, test_gsi_allocator);
	tcase_add_test(tc, test_init_errors);
	tcase_add_test(tc, test_needs_reset_log_bounded);
	if (access("/dev/kvm", R_OK | W_OK) == 0)
		tcase_add_test(tc, test_ioeventfds_follow_bar0);
	else
		lkvm_skip("test_virtio_pci", 1, "test_ioeventfds_follow_bar0",
			  "no usable /dev/kvm");
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(virtio_pci_suite)

/* Many VMs in one process: the device list builds and tears down every device, in order, and no fd or byte is left behind. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>
#include <linux/virtio_net.h>

#include "check_main.h"
#include "lkvm/dev.h"
#include "lkvm/kvm.h"
#include "lkvm/pci.h"
#include "lkvm/run.h"
#include "lkvm/stats.h"
#include "lkvm/virtio-blk.h"
#include "lkvm/virtio-mmio.h"
#include "lkvm/virtio-net.h"

#define RAM_MIB 16
#define NR_VMS 4
#define ROUNDS 3

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own fd */
}

static bool have_kvm(void)
{
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* A small image every VM's disks open, read-only: the VMs exist at once, and an image a VM
 * writes no other opens (virtio-blk's lock). */
static char disk_path[64];

static struct kvm_config vm_config(void)
{
	static struct blk_opts disks[2];
	static struct net_opts nets[3];
	struct kvm_config cfg = { .ram_mib = RAM_MIB, .nr_cpus = 1, .disk = disks, .net = nets };

	cfg.nr_disks = 2;
	snprintf(cfg.disk[0].path, sizeof(cfg.disk[0].path), "%s", disk_path);
	cfg.disk[0].trans = VIRTIO_TRANS_MMIO;
	cfg.disk[0].trans_set = true;
	cfg.disk[0].ro = true;
	snprintf(cfg.disk[1].path, sizeof(cfg.disk[1].path), "%s", disk_path);
	cfg.disk[1].ro = true;

	cfg.nr_nets = 3;
	cfg.net[0] =
		(struct net_opts){ .mode = NET_MODE_FAKE, .ioeventfd = true, .queue_pairs = 1 };
	cfg.net[1] =
		(struct net_opts){ .mode = NET_MODE_FAKE, .ioeventfd = true, .queue_pairs = 2 };
	cfg.net[2] = (struct net_opts){ .mode = NET_MODE_FAKE,
					.ioeventfd = true,
					.queue_pairs = 1,
					.trans = VIRTIO_TRANS_MMIO,
					.trans_set = true };
	cfg.console_virtio = cfg.rng = true; /* on --virtio-transport: PCI */
	return cfg;
}

/* A VM as kvm_create makes it, or without /dev/kvm the same minus the KVM fds (devices
 * then run in their no-VM modes); kvm_destroy frees both. */
static struct kvm *vm_new(bool real)
{
	struct kvm_config cfg = vm_config();
	struct kvm *kvm = calloc(1, sizeof(*kvm));
	char err[256];
	u8 *ram;

	ck_assert_ptr_nonnull(kvm);
	if (real) {
		ck_assert_msg(kvm_create(kvm, &cfg, err, sizeof(err)) == 0, "%s", err);
		return kvm;
	}
	kvm->cfg = cfg;
	kvm->sys_fd = kvm->vm_fd = -1;
	kvm->stop_fd = eventfd(0, EFD_CLOEXEC);
	io_bus_init(&kvm->pio);
	io_bus_init(&kvm->mmio);
	ram = mmap(NULL, (u64)RAM_MIB << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		   -1, 0);
	ck_assert(ram != MAP_FAILED);
	ck_assert_int_eq(gmem_init(&kvm->mem, ram, (u64)RAM_MIB << 20), 0);
	return kvm;
}

static void vm_devices(struct kvm *kvm)
{
	struct virtio_mmio_slot slots[VIRTIO_MMIO_MAX_DEVS];
	struct virtio_net_config c;
	char err[256];

	ck_assert_int_eq(kvm_run_add_devices(kvm, err, sizeof(err)), 0);
	ck_assert_msg(kvm_devs_init(kvm, err, sizeof(err)) == 0, "%s", err);
	ck_assert_ptr_nonnull(kvm->pci);
	ck_assert_ptr_nonnull(kvm_dev_find(kvm, "uart", 0));
	ck_assert_ptr_nonnull(kvm_dev_find(kvm, "rtc", 0));
	ck_assert_ptr_nonnull(kvm_dev_find(kvm, "virtio-net", 0));
	ck_assert_ptr_nonnull(kvm_dev_find(kvm, "virtio-net", 1));
	ck_assert_ptr_nonnull(kvm_dev_find(kvm, "virtio-net", 2));
	ck_assert_ptr_null(kvm_dev_find(kvm, "virtio-net", 3));
	ck_assert_ptr_nonnull(kvm_dev_find(kvm, "virtio-console", 0));
	ck_assert_ptr_nonnull(kvm_dev_find(kvm, "virtio-rng", 0));
	/* Terminal input goes to hvc0 when it is the console, not to the UART. */
	ck_assert_ptr_eq(kvm->console_in.dev, kvm_dev_find(kvm, "virtio-console", 0)->priv);
	/* The third NIC on virtio-mmio, in the first slot. */
	ck_assert_int_eq(virtio_mmio_slots(kvm, slots), 2);
	ck_assert_int_eq(slots[0].slot, 0);
	ck_assert_uint_eq(slots[0].device_id, 1);
	ck_assert_int_eq(slots[1].slot, 1); /* the first disk */
	ck_assert_uint_eq(slots[1].device_id, 2);
	ck_assert_ptr_nonnull(kvm_dev_find(kvm, "virtio-blk", 1));
	/* The run numbers NICs without a MAC. */
	for (int i = 0; i < 3; i++) {
		struct virtio_device *v = virtio_net_vdev(kvm_dev_find(kvm, "virtio-net", i)->priv);

		v->ops->config_read(v, 0, (u8 *)&c, sizeof(c));
		ck_assert_uint_eq(c.mac[5], 0x56 + i);
	}
	/* Two NICs on the bus besides the host bridge and pvpanic. */
	ck_assert_uint_eq(pci_cfg_read(kvm->pci, 2, PCI_VENDOR_ID, 2), 0x1af4);
	ck_assert_uint_eq(pci_cfg_read(kvm->pci, 3, PCI_VENDOR_ID, 2), 0x1af4);
}

static void many_vms(bool real)
{
	int fds, dfd;

	strcpy(disk_path, "/var/tmp/lkvm-vm-XXXXXX");
	dfd = mkstemp(disk_path);
	ck_assert_int_ge(dfd, 0);
	ck_assert_int_eq(ftruncate(dfd, 1 << 20), 0);
	close(dfd);
	fds = count_fds();

	for (int r = 0; r < ROUNDS; r++) {
		struct kvm *vm[NR_VMS];

		for (int i = 0; i < NR_VMS; i++) {
			vm[i] = vm_new(real);
			vm_devices(vm[i]);
		}
		ck_assert_int_gt(count_fds(), fds);
		for (int i = 0; i < NR_VMS; i++) {
			kvm_destroy(vm[i]);
			ck_assert_ptr_null(vm[i]->devs);
			ck_assert_int_eq(vm[i]->pio.nr, 0);
			free(vm[i]);
		}
		ck_assert_int_eq(count_fds(), fds);
	}
	unlink(disk_path);
}

START_TEST(many_vms_without_kvm)
{
	many_vms(false);
}
END_TEST

START_TEST(many_vms_with_kvm)
{
	many_vms(true);
}
END_TEST

/* ---- order and failure ---- */

struct trace {
	char log[64];	/* init (a, b, ...) and exit (A, B, ...) */
	char walk[64];	/* start, quiesce, resume, reset: the tags in the order they came */
	char flat[256]; /* what the stats walk gave, flat */
	int fail_at;	/* the prio whose init fails, or -1 */
	int fd;		/* an fd the "device" holds while up */
};

static struct trace tr;

static int t_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	char c = *(const char *)d->arg;

	if (d->ops->prio == tr.fail_at) {
		errfmt(err, errlen, "refused");
		return -EIO;
	}
	d->priv = (void *)(long)eventfd(0, EFD_CLOEXEC);
	strncat(tr.log, &c, 1);
	return 0;
}

static void t_exit(struct kvm *kvm, struct kvm_dev *d)
{
	char c = (char)(*(const char *)d->arg - 'a' + 'A');

	close((int)(long)d->priv);
	strncat(tr.log, &c, 1);
}

static void t_walk(struct kvm_dev *d)
{
	strncat(tr.walk, (const char *)d->arg, 1);
}

static int t_start(struct kvm_dev *d)
{
	t_walk(d);
	return 0;
}

static void t_stats(struct kvm_dev *d, struct stats_visitor *v)
{
	v->group(v, "q");
	v->counter(v, "n", (u64)(*(const char *)d->arg));
}

static void t_put(void *arg, const char *name, u64 value)
{
	size_t n = strlen(tr.flat);

	snprintf(tr.flat + n, sizeof(tr.flat) - n, "%s=%c ", name, (char)value);
}

#define T_OPS(n, p)                                                                        \
	{                                                                                  \
		.name = n, .prio = p, .init = t_init, .start = t_start, .quiesce = t_walk, \
		.resume = t_walk, .reset = t_walk, .exit = t_exit                          \
	}
static const struct kvm_dev_ops bus_ops = T_OPS("bus", 10);
static const struct kvm_dev_ops legacy_ops = T_OPS("legacy", 20);
static const struct kvm_dev_ops x_ops = {
	.name = "x", .prio = 30, .init = t_init, .exit = t_exit, .stats = t_stats, .stats_name = "x"
};

static void add(struct kvm *kvm, const struct kvm_dev_ops *ops, char tag)
{
	ck_assert_int_eq(kvm_dev_add(kvm, ops, &tag, 1), 0);
}

START_TEST(order_and_unwind)
{
	int fds = count_fds();
	struct kvm *kvm = vm_new(false);
	struct stats_flat f;
	char err[128];

	memset(&tr, 0, sizeof(tr));
	tr.fail_at = -1;
	/* Registered out of order: run by priority, equal ones in registration order. */
	add(kvm, &x_ops, 'd');
	add(kvm, &bus_ops, 'a');
	add(kvm, &x_ops, 'e');
	add(kvm, &legacy_ops, 'b');
	add(kvm, &legacy_ops, 'c');
	ck_assert_int_eq(kvm_devs_init(kvm, err, sizeof(err)), 0);
	ck_assert_str_eq(tr.log, "abcde");
	ck_assert_int_eq(kvm_dev_find(kvm, "x", 1)->index, 1);
	ck_assert_int_eq(count_fds(), fds + 5 + 1); /* five devices, the stop eventfd */
	/* The other walks: each device that has the op, in order; resume in reverse. The
	 * stats walk names each device by its kind and index. */
	ck_assert_int_eq(kvm_devs_start(kvm, err, sizeof(err)), 0);
	kvm_devs_quiesce(kvm);
	kvm_devs_resume(kvm);
	kvm_devs_reset(kvm);
	ck_assert_str_eq(tr.walk, "abc"
				  "abc"
				  "cba"
				  "abc");
	stats_flat_init(&f, t_put, NULL);
	kvm_devs_stats(kvm, &f.v);
	ck_assert_str_eq(tr.flat, "x0.q.n=d x1.q.n=e ");
	kvm_destroy(kvm);
	ck_assert_str_eq(tr.log, "abcdeEDCBA");
	free(kvm);
	ck_assert_int_eq(count_fds(), fds);

	/* A failing init: the error names the device; what came up is undone by destroy. */
	kvm = vm_new(false);
	memset(&tr, 0, sizeof(tr));
	tr.fail_at = 20;
	add(kvm, &bus_ops, 'a');
	add(kvm, &legacy_ops, 'b');
	add(kvm, &x_ops, 'c');
	ck_assert_int_eq(kvm_devs_init(kvm, err, sizeof(err)), -EIO);
	ck_assert_str_eq(err, "legacy: refused");
	ck_assert_str_eq(tr.log, "a");
	/* Walks skip what is not up. */
	kvm_devs_quiesce(kvm);
	ck_assert_str_eq(tr.walk, "a");
	kvm_destroy(kvm);
	ck_assert_str_eq(tr.log, "aA");
	free(kvm);
	ck_assert_int_eq(count_fds(), fds);
}
END_TEST

/* --debug's start-up profile: each step's own time (from the step before it, the first from the
 * run's start), then the first guest instruction's since the start; kvm_mark keeps at most
 * KVM_STARTUP_MAX steps and kvm_create keeps the steps marked before it. */
START_TEST(startup_profile)
{
	struct kvm *kvm = calloc(1, sizeof(*kvm));
	char buf[512];

	ck_assert_ptr_nonnull(kvm);
	kvm->start_ns = 1000000;
	kvm->startup = (struct kvm_startup){ 3,
					     { "read kernel", "KVM_CREATE_VM", "guest RAM" },
					     { 1500000, 1750000, 9750000 } };
	atomic_store(&kvm->first_insn_ns, 12000000);
	kvm_startup_format(kvm, buf, sizeof(buf));
	ck_assert_str_eq(buf, "read kernel 0.50, KVM_CREATE_VM 0.25, guest RAM 8.00; first guest "
			      "instruction at 11.00 ms");
	/* Never more than KVM_STARTUP_MAX steps; a short buffer is cut, not overrun. */
	for (int i = 0; i < KVM_STARTUP_MAX + 5; i++)
		kvm_mark(kvm, "step");
	ck_assert_int_eq(kvm->startup.n, KVM_STARTUP_MAX);
	kvm_startup_format(kvm, buf, 16);
	ck_assert_uint_eq(strlen(buf), 15);
	free(kvm);
}
END_TEST

static Suite *vm_suite(void)
{
	Suite *s = suite_create("vm");
	TCase *tc = tcase_create("vm");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, many_vms_without_kvm);
	/* Not added without /dev/kvm but reported as skipped (make check runs this where KVM works). */
	if (have_kvm())
		tcase_add_test(tc, many_vms_with_kvm);
	else
		lkvm_skip("test_vm", 1, "many_vms_with_kvm", "no usable /dev/kvm");
	tcase_add_test(tc, order_and_unwind);
	tcase_add_test(tc, startup_profile);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(vm_suite)

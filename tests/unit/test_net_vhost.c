/* Unit tests of virtio/net-vhost.c that need no /dev/vhost-net: the memory table from lkvm's guest RAM regions, the errors of opening a device that is missing or is not vhost-net, and its rings' used indices as --stats shows them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "lkvm/ctl.h"
#include "lkvm/kvm.h"
#include "lkvm/net-vhost.h"
#include "lkvm/stats-fmt.h"
#include "lkvm/virtio.h"

/* gmem_init only computes addresses: a base nobody maps is enough here. */
#define FAKE_BASE ((u8 *)0x7f0000000000ULL)

START_TEST(mem_regions_below_hole)
{
	struct guest_mem m;
	struct vhost_memory_region r[GMEM_MAX_REGIONS];

	ck_assert_int_eq(gmem_init(&m, FAKE_BASE, 256ULL << 20), 0);
	ck_assert_int_eq(net_vhost_mem_regions(&m, r, GMEM_MAX_REGIONS), 1);
	ck_assert_uint_eq(r[0].guest_phys_addr, 0);
	ck_assert_uint_eq(r[0].memory_size, 256ULL << 20);
	ck_assert_uint_eq(r[0].userspace_addr, (u64)(uintptr_t)FAKE_BASE);
	ck_assert_uint_eq(r[0].flags_padding, 0);
}
END_TEST

/* 5 GiB: RAM up to the PCI hole, then the rest from 4 GiB up; vhost gets both, each at the
 * host address of the same guest bytes (nothing for the hole). */
START_TEST(mem_regions_both_sides_of_hole)
{
	struct guest_mem m;
	struct vhost_memory_region r[GMEM_MAX_REGIONS];
	u64 ram = 5ULL << 30, low = PCI_HOLE_START;

	ck_assert_int_eq(gmem_init(&m, FAKE_BASE, ram), 0);
	ck_assert_int_eq(net_vhost_mem_regions(&m, r, GMEM_MAX_REGIONS), 2);
	ck_assert_uint_eq(r[0].guest_phys_addr, 0);
	ck_assert_uint_eq(r[0].memory_size, low);
	ck_assert_uint_eq(r[0].userspace_addr, (u64)(uintptr_t)FAKE_BASE);
	ck_assert_uint_eq(r[1].guest_phys_addr, PCI_HOLE_END);
	ck_assert_uint_eq(r[1].memory_size, ram - low);
	ck_assert_uint_eq(r[1].userspace_addr, (u64)(uintptr_t)FAKE_BASE + low);
	/* The table agrees with the one accessor: the last byte above the hole. */
	ck_assert_ptr_eq(gmem_ptr(&m, PCI_HOLE_END + ram - low - 1, 1),
			 (void *)(uintptr_t)(r[1].userspace_addr + r[1].memory_size - 1));
	/* Too small a table is an error, not a partial one. */
	ck_assert_int_eq(net_vhost_mem_regions(&m, r, 1), -E2BIG);
}
END_TEST

/* What `-n vhost=on` prints where the device is missing: one line, the cause and the way out. */
START_TEST(open_missing_device)
{
	struct kvm kvm = { 0 };
	struct virtio_device vdev = { 0 };
	struct net_vhost *v = (struct net_vhost *)1;
	int fds[1] = { -1 };
	char err[256];

	ck_assert_int_eq(gmem_init(&kvm.mem, FAKE_BASE, 64ULL << 20), 0);
	ck_assert_int_eq(net_vhost_open(&kvm, &vdev, fds, 1, "/nonexistent/vhost-net", &v, err,
					sizeof(err)),
			 -ENOENT);
	ck_assert_ptr_null(v);
	ck_assert_str_eq(
		err,
		"vhost=on: cannot open /nonexistent/vhost-net: No such file or directory (is module vhost_net loaded?); -n vhost=off or auto runs without it");
}
END_TEST

/* A device that opens but is not vhost-net: the first ioctl's refusal, named. */
START_TEST(open_not_vhost)
{
	struct kvm kvm = { 0 };
	struct virtio_device vdev = { 0 };
	struct net_vhost *v = NULL;
	int fds[2] = { -1, -1 };
	char err[256];

	ck_assert_int_eq(gmem_init(&kvm.mem, FAKE_BASE, 64ULL << 20), 0);
	ck_assert_int_eq(net_vhost_open(&kvm, &vdev, fds, 2, "/dev/null", &v, err, sizeof(err)),
			 -ENOTTY);
	ck_assert_ptr_null(v);
	ck_assert_str_eq(err,
			 "vhost=on: /dev/null: VHOST_SET_OWNER: Inappropriate ioctl for device");
	/* Pair counts outside 1..NET_MAX_QUEUE_PAIRS are refused before anything opens. */
	ck_assert_int_eq(net_vhost_open(&kvm, &vdev, fds, 0, "/dev/null", &v, err, sizeof(err)),
			 -EINVAL);
}
END_TEST

/* Flat counters of one NIC served by vhost: its pairs, and rx0's used index. */
static void vhost_kvs(struct ctl_msg *m, struct ctl_kvs *kvs, u64 rx0_used)
{
	ctl_msg_init(m, CTL_STAT, 0);
	ck_assert_int_eq(ctl_add_u64(m, "net0.ctrl.kicks", 1), 0);
	ck_assert_int_eq(ctl_add_u64(m, "net0.vhost.pairs", 2), 0);
	ck_assert_int_eq(ctl_add_u64(m, "net0.vhost.running", 2), 0);
	ck_assert_int_eq(ctl_add_u64(m, "net0.vhost.rx0_used_idx", rx0_used), 0);
	ck_assert_int_eq(ctl_kvs_decode(m, kvs), 0);
}

/* A used index is where the ring is (modulo 2^16), not a count: lkvm stat --watch shows it as it
 * is, never as a difference that a wrap would make huge. */
START_TEST(stats_used_idx_is_a_level)
{
	struct ctl_msg m0, m1;
	struct ctl_kvs prev, cur;
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(out);
	vhost_kvs(&m0, &prev, 65530);
	vhost_kvs(&m1, &cur, 4); /* wrapped */
	stats_print(out, &cur, &prev, 1.0, true);
	fclose(out);
	ck_assert_msg(strstr(buf, "\"vhost\":{\"pairs\":2,\"running\":2,\"rx0_used_idx\":4}"),
		      "the used index as it is: %s", buf);
	free(buf);
	ctl_kvs_free(&prev);
	ctl_kvs_free(&cur);
	ctl_msg_free(&m0);
	ctl_msg_free(&m1);
	ck_assert_int_eq(net_vhost_used_idx(NULL, 0), -EINVAL);
}
END_TEST

static Suite *net_vhost_suite(void)
{
	Suite *s = suite_create("net_vhost");
	TCase *mem = tcase_create("memory table");
	TCase *open = tcase_create("open");
	TCase *stats = tcase_create("stats");

	tcase_add_test(mem, mem_regions_below_hole);
	tcase_add_test(mem, mem_regions_both_sides_of_hole);
	tcase_add_test(open, open_missing_device);
	tcase_add_test(open, open_not_vhost);
	suite_add_tcase(s, mem);
	tcase_add_test(stats, stats_used_idx_is_a_level);
	suite_add_tcase(s, open);
	suite_add_tcase(s, stats);
	return s;
}

LKVM_CHECK_MAIN(net_vhost_suite)

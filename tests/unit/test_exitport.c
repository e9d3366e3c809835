/* Unit tests of lkvm-exit (hw/exitport.c): each report in every access width, a test guest's results, what is ignored. */
#include <errno.h>
#include <string.h>

#include "check_main.h"
#include "lkvm/dev.h"
#include "lkvm/exitport.h"
#include "lkvm/initcfg.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"

#include "fake_vm.h"

/* cmd: the VM runs -- CMD (the reports are its command's) rather than a test guest. */
static struct kvm *vm_new_as(bool cmd)
{
	struct kvm *kvm = fake_vm_new(0);
	char err[256];

	kvm->cfg.host_root.on = cmd;
	ck_assert_int_eq(exitport_add(kvm), 0);
	ck_assert_int_eq(kvm_devs_init(kvm, err, sizeof(err)), 0);
	return kvm;
}

static struct kvm *vm_new(void)
{
	return vm_new_as(true);
}

static void vm_free(struct kvm *kvm)
{
	kvm_devs_exit(kvm);
	ck_assert_int_eq(kvm->pio.nr, 0);
	fake_vm_free(kvm);
}

/* The word in accesses of `width` bytes, in increasing port order. */
static void write_word(struct kvm *kvm, u32 word, u32 width)
{
	u8 b[4];

	for (int i = 0; i < 4; i++)
		b[i] = (u8)(word >> (8 * i));
	for (u32 off = 0; off < 4; off += width)
		ck_assert(io_bus_dispatch(&kvm->pio, NULL, LKVM_EXIT_PORT + off, b + off, width,
					  true));
}

static void expect_exit_as(bool cmd, u32 word, u32 width, int status, const char *reason)
{
	struct kvm *kvm = vm_new_as(cmd);

	ck_assert(!atomic_load(&kvm->stopping));
	write_word(kvm, word, width);
	ck_assert_msg(atomic_load(&kvm->stopping),
		      "word 0x%x in %u-byte writes did not end the run", word, width);
	ck_assert_int_eq(atomic_load(&kvm->exit_status), status);
	ck_assert_str_eq(kvm->exit_reason, reason);
	vm_free(kvm);
}

static void expect_exit(u32 word, u32 width, int status, const char *reason)
{
	expect_exit_as(true, word, width, status, reason);
}

START_TEST(test_exited)
{
	for (u32 width = 1; width <= 4; width *= 2) {
		expect_exit(LKVM_EXIT_WORD(LKVM_EXIT_EXITED, 7, 0), width, 7,
			    "command exited with 7 (lkvm-exit)");
		expect_exit(LKVM_EXIT_WORD(LKVM_EXIT_EXITED, 0, 0), width, 0,
			    "command exited with 0 (lkvm-exit)");
		expect_exit(LKVM_EXIT_WORD(LKVM_EXIT_EXITED, 255, 0), width, 255,
			    "command exited with 255 (lkvm-exit)");
	}
}
END_TEST

/* The first n pieces of a and b (LKVM_EXIT_ASSERT_VALUE), then a failed assertion at line 9:
 * the pieces end nothing, and lkvm's reason is returned in reason. */
static void assert_with_pieces(u64 a, u64 b, u32 n, char *reason, size_t len)
{
	const u64 v[2] = { a, b };
	struct kvm *kvm = vm_new_as(false);

	for (u32 i = 0; i < n; i++) {
		write_word(kvm,
			   LKVM_EXIT_WORD(LKVM_EXIT_ASSERT_VALUE, i,
					  (v[i / 4] >> (i % 4) * 16) & 0xffff),
			   4);
		ck_assert(!atomic_load(&kvm->stopping));
	}
	write_word(kvm, LKVM_EXIT_WORD(LKVM_EXIT_GUEST_ASSERT, 0, 9), 4);
	ck_assert(atomic_load(&kvm->stopping));
	ck_assert_int_eq(atomic_load(&kvm->exit_status), EXIT_GUEST_ASSERT);
	snprintf(reason, len, "%s", kvm->exit_reason);
	vm_free(kvm);
}

/* A failed GUEST_ASSERT_EQ's values reach lkvm's line when all eight pieces came before it; a
 * report that lost some says the line alone, never a half-made value. */
START_TEST(test_assert_values)
{
	char r[256];

	assert_with_pieces(0x1234567893ull, 0xfedcba9876543210ull, 8, r, sizeof(r));
	ck_assert_str_eq(r,
			 "guest assertion failed at line 9 (a=0x1234567893 b=0xfedcba9876543210; "
			 "its console's GUEST FAIL line says where and why)");
	assert_with_pieces(0, ~0ull, 8, r, sizeof(r));
	ck_assert_str_eq(r, "guest assertion failed at line 9 (a=0x0 b=0xffffffffffffffff; its "
			    "console's GUEST FAIL line says where and why)");
	assert_with_pieces(1, 2, 7, r, sizeof(r));
	ck_assert_str_eq(r, "guest assertion failed at line 9 (its console's GUEST FAIL line says "
			    "where and why)");
}
END_TEST

/* A test guest (no -- CMD): its pass is status 0, a failed assertion EXIT_GUEST_ASSERT with
 * its line, and nothing but that number of the guest's reaches lkvm's message. */
START_TEST(test_guest_results)
{
	expect_exit_as(false, LKVM_EXIT_WORD(LKVM_EXIT_EXITED, 0, 0), 4, 0,
		       "guest exited with 0 (lkvm-exit)");
	for (u32 width = 1; width <= 4; width *= 2)
		expect_exit_as(false, LKVM_EXIT_WORD(LKVM_EXIT_GUEST_ASSERT, 0, 1234), width,
			       EXIT_GUEST_ASSERT,
			       "guest assertion failed at line 1234 (its console's GUEST FAIL line "
			       "says where and why)");
	expect_exit_as(false, LKVM_EXIT_WORD(LKVM_EXIT_GUEST_ASSERT, 0, 0xffff), 4,
		       EXIT_GUEST_ASSERT,
		       "guest assertion failed at line 65535 (its console's GUEST FAIL line "
		       "says where and why)");
	/* -- CMD's guest may report one too (any guest code can write the port). */
	expect_exit(LKVM_EXIT_WORD(LKVM_EXIT_GUEST_ASSERT, 0, 7), 4, EXIT_GUEST_ASSERT,
		    "guest assertion failed at line 7 (its console's GUEST FAIL line says where "
		    "and why)");
}
END_TEST

/* Every VM gets the port from the machine, and run -- CMD's devices add it again: one device. */
START_TEST(test_added_once)
{
	struct kvm *kvm = fake_vm_new(0);
	char err[256];
	int n = 0;

	ck_assert_int_eq(exitport_add(kvm), 0);
	ck_assert_int_eq(exitport_add(kvm), 0);
	for (struct kvm_dev *d = kvm->devs; d; d = d->next)
		n++;
	ck_assert_int_eq(n, 1);
	ck_assert_int_eq(kvm_devs_init(kvm, err, sizeof(err)), 0);
	ck_assert_ptr_null(kvm_dev_find(kvm, "lkvm-exit", 1));
	vm_free(kvm);
}
END_TEST

START_TEST(test_signaled)
{
	expect_exit(LKVM_EXIT_WORD(LKVM_EXIT_SIGNALED, 9, 0), 4, 137,
		    "command killed by signal 9 (SIGKILL)");
	expect_exit(LKVM_EXIT_WORD(LKVM_EXIT_SIGNALED, 15, 0), 1, 143,
		    "command killed by signal 15 (SIGTERM)");
}
END_TEST

START_TEST(test_init_failed)
{
	expect_exit(LKVM_EXIT_WORD(LKVM_EXIT_INIT_FAILED, LKVM_STAGE_ROOT, ENODEV), 1,
		    EXIT_GUEST_NO_STATUS,
		    "guest init failed mounting the 9p root and its overlay: No such device "
		    "(the kernel needs CONFIG_9P_FS, CONFIG_NET_9P and CONFIG_OVERLAY_FS; "
		    "--fs virtiofs: CONFIG_FUSE_FS and CONFIG_VIRTIO_FS)");
	expect_exit(LKVM_EXIT_WORD(LKVM_EXIT_INIT_FAILED, LKVM_STAGE_FORK, 0), 4,
		    EXIT_GUEST_NO_STATUS, "guest init failed starting the command: no error code");
}
END_TEST

/* Malformed words are ignored (the run goes on), and a partial word commits nothing. */
START_TEST(test_ignored)
{
	static const u32 bad[] = {
		0,					       /* no kind */
		LKVM_EXIT_WORD(6, 0, 0),		       /* unknown kind */
		LKVM_EXIT_WORD(LKVM_EXIT_GUEST_ASSERT, 1, 10), /* a value on an assertion */
		LKVM_EXIT_WORD(LKVM_EXIT_STDIN_READY, 0, 0),   /* not an end (no hook here) */
		LKVM_EXIT_WORD(LKVM_EXIT_STDIN_READY, 1, 0),
		LKVM_EXIT_WORD(LKVM_EXIT_EXITED, 1, 1),	  /* detail on an exit */
		LKVM_EXIT_WORD(LKVM_EXIT_SIGNALED, 0, 0), /* signal 0 */
		LKVM_EXIT_WORD(LKVM_EXIT_SIGNALED, 128, 0),
		LKVM_EXIT_WORD(LKVM_EXIT_INIT_FAILED, LKVM_STAGE_NR, 0),
	};
	struct kvm *kvm = vm_new();
	u8 b[3] = { 7, LKVM_EXIT_EXITED, 0 };
	u32 v = 0xffffffff;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		write_word(kvm, bad[i], 4);
		ck_assert_msg(!atomic_load(&kvm->stopping), "word 0x%x ended the run", bad[i]);
	}
	/* Three bytes, and reads, commit nothing; the fourth byte does. */
	ck_assert(io_bus_dispatch(&kvm->pio, NULL, LKVM_EXIT_PORT, b, 3, true));
	ck_assert(io_bus_dispatch(&kvm->pio, NULL, LKVM_EXIT_PORT, (u8 *)&v, 4, false));
	ck_assert_uint_eq(v, 0);
	ck_assert(!atomic_load(&kvm->stopping));
	b[0] = 0;
	ck_assert(io_bus_dispatch(&kvm->pio, NULL, LKVM_EXIT_PORT + 3, b, 1, true));
	ck_assert(atomic_load(&kvm->stopping));
	ck_assert_int_eq(atomic_load(&kvm->exit_status), 7);
	/* Only the first report counts. */
	write_word(kvm, LKVM_EXIT_WORD(LKVM_EXIT_EXITED, 9, 0), 4);
	ck_assert_int_eq(atomic_load(&kvm->exit_status), 7);
	vm_free(kvm);
}
END_TEST

static void count(void *arg)
{
	(*(int *)arg)++;
}

/* init's "stdin ready" reaches the hook, ends nothing and is no end report; the end report
 * that follows is what exitport_report_kind tells. */
START_TEST(test_stdin_ready)
{
	struct kvm *kvm = vm_new();
	int n = 0;

	ck_assert_int_eq(exitport_on_stdin_ready(kvm, count, &n), 0);
	write_word(kvm, LKVM_EXIT_WORD(LKVM_EXIT_STDIN_READY, 0, 0), 1);
	ck_assert_int_eq(n, 1);
	write_word(kvm, LKVM_EXIT_WORD(LKVM_EXIT_STDIN_READY, 0, 1), 4); /* malformed */
	ck_assert_int_eq(n, 1);
	ck_assert(!atomic_load(&kvm->stopping));
	ck_assert_uint_eq(exitport_report_kind(kvm), 0);
	write_word(kvm, LKVM_EXIT_WORD(LKVM_EXIT_SIGNALED, 9, 0), 4);
	ck_assert_uint_eq(exitport_report_kind(kvm), LKVM_EXIT_SIGNALED);
	write_word(kvm, LKVM_EXIT_WORD(LKVM_EXIT_EXITED, 0, 0), 4);
	ck_assert_uint_eq(exitport_report_kind(kvm), LKVM_EXIT_SIGNALED);
	vm_free(kvm);
	/* Without the device: nothing to hook, no report. */
	kvm = calloc(1, sizeof(*kvm));
	ck_assert_int_eq(exitport_on_stdin_ready(kvm, count, &n), -ENODEV);
	ck_assert_uint_eq(exitport_report_kind(kvm), 0);
	free(kvm);
}
END_TEST

static int snap_save(struct kvm *kvm, struct snap_rec_buf *b, char *err)
{
	struct kvm_dev *d = kvm_dev_find(kvm, "lkvm-exit", 0);

	*b = (struct snap_rec_buf){ 0 };
	err[0] = '\0';
	return d->ops->save(d, b, err, 128);
}

static int snap_load(struct kvm *kvm, const void *sec, size_t len, char *err)
{
	struct kvm_dev *d = kvm_dev_find(kvm, "lkvm-exit", 0);

	err[0] = '\0';
	return d->ops->load(d, sec, len, err, 128);
}

/* A word half written when the snapshot is taken is finished by the restored guest: its
 * last byte ends B's run with the whole word's status. */
START_TEST(test_snap_latch)
{
	u32 word = LKVM_EXIT_WORD(LKVM_EXIT_EXITED, 42, 0);
	u8 bytes[4] = { (u8)word, (u8)(word >> 8), (u8)(word >> 16), (u8)(word >> 24) };
	struct kvm *a = vm_new(), *b = vm_new();
	struct snap_rec_buf rb;
	char err[128];

	for (u32 off = 0; off < 3; off++)
		ck_assert(
			io_bus_dispatch(&a->pio, NULL, LKVM_EXIT_PORT + off, bytes + off, 1, true));
	ck_assert_int_eq(snap_save(a, &rb, err), 0);
	ck_assert_msg(snap_load(b, rb.buf, rb.len, err) == 0, "%s", err);
	ck_assert(io_bus_dispatch(&b->pio, NULL, LKVM_EXIT_PORT + 3, bytes + 3, 1, true));
	ck_assert(atomic_load(&b->stopping));
	ck_assert_int_eq(atomic_load(&b->exit_status), 42);

	/* Hostile: reserved bytes, the record cut, gone. */
	rb.buf[rb.len - 1] = 1;
	ck_assert_int_eq(snap_load(b, rb.buf, rb.len, err), -EINVAL);
	ck_assert(err[0] && !strchr(err, '\n'));
	ck_assert_int_eq(snap_load(b, rb.buf, rb.len - 1, err), -EINVAL);
	ck_assert_int_eq(snap_load(b, NULL, 0, err), -EINVAL);
	snap_rec_free(&rb);

	/* A guest that has reported its end is not saved. */
	ck_assert_int_eq(snap_save(b, &rb, err), -EBUSY);
	ck_assert_str_eq(err, "the guest has already reported its end");
	snap_rec_free(&rb);
	vm_free(a);
	vm_free(b);
}
END_TEST

static Suite *exitport_suite(void)
{
	Suite *s = suite_create("exitport");
	TCase *tc = tcase_create("lkvm-exit");

	tcase_add_test(tc, test_exited);
	tcase_add_test(tc, test_guest_results);
	tcase_add_test(tc, test_assert_values);
	tcase_add_test(tc, test_added_once);
	tcase_add_test(tc, test_signaled);
	tcase_add_test(tc, test_init_failed);
	tcase_add_test(tc, test_ignored);
	tcase_add_test(tc, test_stdin_ready);
	tcase_add_test(tc, test_snap_latch);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(exitport_suite)

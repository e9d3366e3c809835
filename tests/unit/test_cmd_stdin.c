/* Unit tests of run -- CMD's stdin device in a snapshot (hw/cmd-stdin.c): its state saved and loaded through its device ops, hostile sections refused. */
#include <errno.h>
#include <string.h>

#include "check_main.h"
#include "vdriver.h"
#include "lkvm/dev.h"
#include "lkvm/exitport.h"
#include "lkvm/host-root.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"
#include "lkvm/virtio-console.h"

#define TAG_STATE DEV_SNAP_TAG_MIN
#define TAG_PENDING (DEV_SNAP_TAG_MIN + 1)

struct state {
	u8 ready, done, reserved[2];
	u32 pending;
};

static struct kvm_dev *dev;

/* The exit port, hvc0 and the stdin device, initialised (no thread started: it reads lkvm's
 * stdin). */
static void setup(void)
{
	char err[256];

	vd_vm_new(MiB(4), 0);
	vd.kvm->cfg.virtio_trans = VIRTIO_TRANS_MMIO;
	vd.kvm->cfg.host_root.on = true;
	ck_assert_int_eq(exitport_add(vd.kvm), 0);
	ck_assert_int_eq(virtio_console_add(vd.kvm), 0);
	ck_assert_int_eq(cmd_stdin_add(vd.kvm), 0);
	ck_assert_msg(kvm_devs_init(vd.kvm, err, sizeof(err)) == 0, "%s", err);
	dev = kvm_dev_find(vd.kvm, "cmd-stdin", 0);
	ck_assert_ptr_nonnull(dev);
}

static void teardown(void)
{
	kvm_devs_exit(vd.kvm);
	vd_vm_free();
}

static void section(struct snap_rec_buf *b, struct state s, const void *pending, size_t len)
{
	*b = (struct snap_rec_buf){ 0 };
	snap_rec_put(b, TAG_STATE, &s, sizeof(s));
	snap_rec_put(b, TAG_PENDING, pending, len);
}

static int load(const struct snap_rec_buf *b, char *err, size_t errlen)
{
	err[0] = '\0';
	return dev->ops->load(dev, b->buf, b->len, err, errlen);
}

/* What a restore loads is what a snapshot of the restored device saves: the ready report,
 * the end mark and the framed bytes not yet in the console, exactly. */
START_TEST(state_round_trip)
{
	struct snap_rec_buf in, out = { 0 };
	struct state s = { .ready = 1, .done = 1, .pending = 5 }, got;
	char err[256], bytes[8];

	section(&in, s,
		"ab\x1b"
		"cd",
		5);
	ck_assert_msg(load(&in, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(dev->ops->save(dev, &out, err, sizeof(err)), 0);
	ck_assert_int_eq(snap_rec_get(out.buf, out.len, TAG_STATE, &got, sizeof(got)), 0);
	ck_assert_mem_eq(&got, &s, sizeof(s));
	ck_assert_int_eq(snap_rec_get(out.buf, out.len, TAG_PENDING, bytes, 5), 0);
	ck_assert_mem_eq(bytes,
			 "ab\x1b"
			 "cd",
			 5);
	snap_rec_free(&in);
	snap_rec_free(&out);
	/* A device fresh from init: nothing seen, nothing pending. */
	out = (struct snap_rec_buf){ 0 };
	teardown();
	setup();
	ck_assert_int_eq(dev->ops->save(dev, &out, err, sizeof(err)), 0);
	ck_assert_int_eq(snap_rec_get(out.buf, out.len, TAG_STATE, &got, sizeof(got)), 0);
	ck_assert_uint_eq(got.ready | got.done | got.pending, 0);
	snap_rec_free(&out);
}
END_TEST

static const struct {
	const char *what;
	struct state s;
	size_t len; /* of the pending record */
	bool no_state;
} bad[] = {
	{ "ready 2", { .ready = 2 }, 0, false },
	{ "done 2", { .ready = 1, .done = 2 }, 0, false },
	{ "reserved", { .ready = 1, .reserved = { 0, 1 } }, 0, false },
	{ "pending before ready", { .pending = 1 }, 1, false },
	{ "too many pending", { .ready = 1, .pending = 4097 }, 4097, false },
	{ "pending record short", { .ready = 1, .pending = 4 }, 3, false },
	{ "pending record long", { .ready = 1, .pending = 4 }, 5, false },
	{ "no state", { .ready = 1 }, 0, true },
};

START_TEST(hostile)
{
	static u8 bytes[8192];
	struct snap_rec_buf b = { 0 };
	char err[256];

	if (bad[_i].no_state)
		snap_rec_put(&b, TAG_PENDING, bytes, 0);
	else
		section(&b, bad[_i].s, bytes, bad[_i].len);
	ck_assert_msg(load(&b, err, sizeof(err)) == -EINVAL, "%s loaded", bad[_i].what);
	ck_assert_msg(err[0] && !strchr(err, '\n'), "%s: '%s'", bad[_i].what, err);
	snap_rec_free(&b);
}
END_TEST

static Suite *cmd_stdin_suite(void)
{
	Suite *s = suite_create("cmd_stdin");
	TCase *tc = tcase_create("snap");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, state_round_trip);
	tcase_add_loop_test(tc, hostile, 0, (int)ARRAY_SIZE(bad));
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(cmd_stdin_suite)

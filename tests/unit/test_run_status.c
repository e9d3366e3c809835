/* Unit tests of --status-file's record (builtin/run-status.c): who ended the run, from the exit port's reports and lkvm's own ends, as key=value lines. */
#include <errno.h>
#include <string.h>

#include "check_main.h"
#include "lkvm/dev.h"
#include "lkvm/exitport.h"
#include "lkvm/initcfg.h"
#include "lkvm/kvm.h"
#include "lkvm/run-status.h"
#include "lkvm/term.h"

#include "fake_vm.h"

static struct kvm *vm_new(void)
{
	struct kvm *kvm = fake_vm_new(0);
	char err[256];

	kvm->cfg.host_root.on = true;
	ck_assert_int_eq(exitport_add(kvm), 0);
	ck_assert_int_eq(kvm_devs_init(kvm, err, sizeof(err)), 0);
	return kvm;
}

static void vm_free(struct kvm *kvm)
{
	kvm_devs_exit(kvm);
	fake_vm_free(kvm);
}

/* init's report: one 32-bit write to the exit port. */
static void report(struct kvm *kvm, unsigned kind, unsigned value)
{
	u32 word = value | kind << 8;

	ck_assert(io_bus_dispatch(&kvm->pio, NULL, LKVM_EXIT_PORT, (u8 *)&word, 4, true));
}

/* The record of kvm's end with lkvm's status `status`. */
static void expect_record(struct kvm *kvm, int status, const char *want)
{
	struct run_status s;
	char buf[512];

	run_status_collect(&s, kvm, status);
	ck_assert_int_eq(run_status_format(&s, buf, sizeof(buf)), (int)strlen(want));
	ck_assert_str_eq(buf, want);
}

/* A failing `make` exits 2: the record tells it from a panic, which is also 2. */
START_TEST(test_command_or_panic)
{
	struct kvm *kvm = vm_new();

	report(kvm, LKVM_EXIT_EXITED, 2);
	expect_record(kvm, 2,
		      "ended=command\ncommand_status=2\nstatus=2\n"
		      "reason=command exited with 2 (lkvm-exit)\n");
	vm_free(kvm);

	kvm = vm_new();
	kvm_request_exit(kvm, EXIT_GUEST_PANIC, "guest panicked (pvpanic)");
	report(kvm, LKVM_EXIT_EXITED, 0); /* too late: the first end counts */
	expect_record(kvm, 2, "ended=panic\nstatus=2\nreason=guest panicked (pvpanic)\n");
	vm_free(kvm);
}
END_TEST

/* CMD killed by SIGKILL (137) and init's failure (125), against lkvm's own 124 and 128+N. */
START_TEST(test_kinds)
{
	struct kvm *kvm = vm_new();

	report(kvm, LKVM_EXIT_SIGNALED, 9);
	expect_record(kvm, 137,
		      "ended=command\ncommand_status=137\ncommand_signal=9\nstatus=137\n"
		      "reason=command killed by signal 9 (SIGKILL)\n");
	vm_free(kvm);

	kvm = vm_new();
	report(kvm, LKVM_EXIT_INIT_FAILED, LKVM_STAGE_ROOT);
	ck_assert_str_eq(run_status_kind_name((enum kvm_end)kvm->exit_by), "init");
	vm_free(kvm);

	kvm = vm_new();
	kvm_request_exit(kvm, EXIT_TIMEOUT, "timeout: %d s passed", 5);
	expect_record(kvm, 124, "ended=timeout\nstatus=124\nreason=timeout: 5 s passed\n");
	vm_free(kvm);

	kvm = vm_new();
	kvm_request_end(kvm, KVM_END_SIGNAL, 143, "stopped by signal 15\n(Terminated)");
	expect_record(
		kvm, 143,
		"ended=signal\nsignal=15\nstatus=143\nreason=stopped by signal 15 (Terminated)\n");
	vm_free(kvm);
}
END_TEST

/* --fail-on-finish: CMD's status stays in the record, the line is there, escaped by term.c. */
START_TEST(test_fail_on)
{
	struct kvm *kvm = vm_new();

	snprintf(kvm->fail_on_line, sizeof(kvm->fail_on_line), "WARNING: x\\x1b");
	report(kvm, LKVM_EXIT_EXITED, 0);
	ck_assert_int_eq(term_fail_on_settle(kvm, 0), EXIT_FAIL_ON);
	expect_record(kvm, 5,
		      "ended=fail-on\ncommand_status=0\nstatus=5\n"
		      "reason=console printed a kernel bug: WARNING: x\\x1b (then: command exited "
		      "with 0 (lkvm-exit))\nfail_on=WARNING: x\\x1b\n");
	vm_free(kvm);
}
END_TEST

/* A run that never started (a missing kernel) is lkvm's error; a kind out of range is other;
 * a buffer too short is said. */
START_TEST(test_not_run)
{
	struct kvm *kvm = vm_new();
	struct run_status s;
	char buf[16];

	expect_record(kvm, 1, "ended=error\nstatus=1\n");
	ck_assert_str_eq(run_status_kind_name(KVM_END_NR), "other");
	run_status_collect(&s, kvm, 1);
	ck_assert_int_eq(run_status_format(&s, buf, sizeof(buf)), -ENOSPC);
	ck_assert_int_eq(strlen(buf), sizeof(buf) - 1);
	vm_free(kvm);
}
END_TEST

static Suite *run_status_suite(void)
{
	Suite *s = suite_create("run_status");
	TCase *tc = tcase_create("record");

	tcase_add_test(tc, test_command_or_panic);
	tcase_add_test(tc, test_kinds);
	tcase_add_test(tc, test_not_run);
	tcase_add_test(tc, test_fail_on);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(run_status_suite)

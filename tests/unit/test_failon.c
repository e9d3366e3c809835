/* Unit tests of --fail-on (failon.c, term.c, the option): kernel-bug lines found in console output split, long or hostile, reported once. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/failon.h"
#include "lkvm/kvm.h"
#include "lkvm/run.h"
#include "lkvm/term.h"

static bool feed(struct failon *f, const char *s)
{
	return failon_feed(f, (const u8 *)s, strlen(s));
}

/* A line is searched when it ends (\n or \r), however the writes cut it. */
START_TEST(test_split_lines)
{
	struct failon f = { 0 };

	ck_assert_int_eq(failon_add(&f, "default"), 0);
	ck_assert_int_eq(f.n, FAILON_DEFAULT_NR);
	ck_assert(!feed(&f, "[    1.0] booting\r\n[    2.0] WARN"));
	ck_assert(!feed(&f, "ING: CPU: 0 PID: 1 at x.c:5"));
	ck_assert(feed(&f, "\r\n"));
	ck_assert_str_eq(f.text, "[    2.0] WARNING: CPU: 0 PID: 1 at x.c:5");
	ck_assert(!f.hit_deferred);
	/* Byte by byte, as the UART writes: the first stays the one reported. */
	for (const char *p = "BUG: kernel NULL pointer dereference\n"; *p; p++)
		ck_assert(!failon_feed(&f, (const u8 *)p, 1));
	ck_assert_uint_eq(f.hits, 2);
	ck_assert_str_eq(f.text, "[    2.0] WARNING: CPU: 0 PID: 1 at x.c:5");
}
END_TEST

/* Nothing matches a pattern cut by a line's end; a pattern of the user's own is found. */
START_TEST(test_own_pattern)
{
	struct failon f = { 0 };

	ck_assert_int_eq(failon_add(&f, "selftest failed"), 0);
	ck_assert(!feed(&f, "selftest\nfailed\n"));
	ck_assert(!feed(&f, "WARNING: not mine\n"));
	ck_assert(feed(&f, "ok 1\nnot ok 2 selftest failed at 3\n"));
	ck_assert_str_eq(f.text, "not ok 2 selftest failed at 3");
	/* No pattern: nothing is kept or found. */
	struct failon none = { 0 };

	ck_assert(!feed(&none, "BUG: x\n"));
	ck_assert_uint_eq(none.len, 0);
}
END_TEST

/* A line of a megabyte without an end: searched in bounded pieces, a match across a piece's
 * cut found, the report bounded. */
START_TEST(test_long_line)
{
	struct failon f = { 0 };
	static u8 big[1 << 20];

	ck_assert_int_eq(failon_add(&f, "KASAN:"), 0);
	memset(big, 'a', sizeof(big));
	ck_assert(!failon_feed(&f, big, sizeof(big)));
	ck_assert_uint_le(f.len, FAILON_LINE_MAX);
	/* The pattern across the buffer's cut, wherever the line stands. */
	for (size_t at = 0; at < FAILON_LINE_MAX; at++) {
		struct failon g = { 0 };

		ck_assert_int_eq(failon_add(&g, "KASAN:"), 0);
		ck_assert(!failon_feed(&g, big, FAILON_LINE_MAX + at));
		ck_assert(failon_feed(&g, (const u8 *)"KASAN: x", 8) ||
			  failon_feed(&g, (const u8 *)"\n", 1));
		ck_assert_uint_le(strlen(g.text), FAILON_TEXT_MAX - 1);
	}
	ck_assert(!feed(&f, "KA"));
	ck_assert(feed(&f, "SAN: use-after-free\n"));
	ck_assert(strstr(f.text, "aaaaKASAN: use-after-free"));
	ck_assert_uint_lt(strlen(f.text), FAILON_TEXT_MAX);
}
END_TEST

/* The guest's bytes cannot make a second line or drive a terminal: escaped. */
START_TEST(test_hostile_bytes)
{
	struct failon f = { 0 };
	u8 line[FAILON_LINE_MAX - 1];

	ck_assert_int_eq(failon_add(&f, "Oops:"), 0);
	memset(line, 0x1b, sizeof(line));
	memcpy(line, "Oops:\\\xff", 7);
	ck_assert(failon_feed(&f, line, sizeof(line)) || feed(&f, "\n"));
	ck_assert(!strncmp(f.text, "Oops:\\x5c\\xff\\x1b", 17));
	ck_assert_uint_eq(strlen(f.text), 5 + 4 * (sizeof(line) - 5));
	ck_assert(!strpbrk(f.text, "\n\r\x1b"));
}
END_TEST

/* The panic line waits (pvpanic tells it better); the set's patterns are what docs/run.md
 * lists; bad patterns are refused. */
START_TEST(test_set_and_errors)
{
	struct failon f = { 0 };
	static char long_pat[FAILON_PATTERN_MAX + 2];

	ck_assert_int_eq(failon_add(&f, "default"), 0);
	ck_assert(feed(&f, "Kernel panic - not syncing: Attempted to kill init!\n"));
	ck_assert(f.hit_deferred);
	ck_assert_int_eq(failon_add(&f, ""), -EINVAL);
	memset(long_pat, 'x', sizeof(long_pat) - 1);
	ck_assert_int_eq(failon_add(&f, long_pat), -EINVAL);
	long_pat[FAILON_PATTERN_MAX] = '\0';
	ck_assert_int_eq(failon_add(&f, long_pat), 0);
	while (f.n < FAILON_MAX)
		ck_assert_int_eq(failon_add(&f, "x"), 0);
	ck_assert_int_eq(failon_add(&f, "x"), -E2BIG);
}
END_TEST

static int parse(struct run_args *a, char *err, int argc, ...)
{
	static char *argv[64];
	va_list ap;
	FILE *null = fopen("/dev/null", "w");
	int ret;

	va_start(ap, argc);
	for (int i = 0; i < argc; i++)
		argv[i] = va_arg(ap, char *);
	va_end(ap);
	argv[argc] = NULL;
	err[0] = 0;
	kvm_config_free(&a->cfg);
	ret = kvm_run_parse(argc, argv, a, null, err, 256);
	fclose(null);
	return ret;
}

/* The options: repeatable, default counts its patterns, each error one line. */
START_TEST(test_options)
{
	struct run_args a = { 0 };
	char err[256];

	ck_assert_int_eq(parse(&a, err, 8, "run", "-k", "k", "--fail-on", "default", "--fail-on",
			       "oops", "--fail-on-finish"),
			 0);
	ck_assert_int_eq(a.cfg.nr_fail_on, 2);
	ck_assert(a.cfg.fail_on_finish);
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "--fail-on", ""), -EINVAL);
	ck_assert_str_eq(err, "--fail-on '': give 1 to 64 bytes of text, or default");
	ck_assert_int_eq(parse(&a, err, 13, "run", "-k", "k", "--fail-on", "default", "--fail-on",
			       "default", "--fail-on", "default", "--fail-on", "default",
			       "--fail-on", "x"),
			 -EINVAL);
	ck_assert_str_eq(err, "--fail-on 'default': more than 32 patterns (default counts 9)");
	kvm_config_free(&a.cfg);
}
END_TEST

/* A VM whose console output goes to /dev/null, with --fail-on default. */
static void vm_init(struct kvm *kvm, struct term *t, bool finish)
{
	memset(kvm, 0, sizeof(*kvm));
	memset(t, 0, sizeof(*t));
	kvm->stop_fd = -1;
	kvm->cfg.fail_on[kvm->cfg.nr_fail_on++] = "default";
	kvm->cfg.fail_on_finish = finish;
	ck_assert_int_eq(term_init(kvm, t), 0);
	t->out_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	ck_assert_int_ge(t->out_fd, 0);
}

static void vm_exit(struct term *t)
{
	close(t->out_fd);
	term_exit(t);
}

/* The first bug line ends the run with 5 and says the line; with --fail-on-finish the run goes
 * on and its end becomes fail-on, unless pvpanic told the panic. */
START_TEST(test_run_end)
{
	struct kvm kvm;
	struct term t;

	vm_init(&kvm, &t, false);
	term_output(&kvm, (const u8 *)"ok\nWARNING: at x\n", 17);
	ck_assert(atomic_load(&kvm.stopping));
	ck_assert_int_eq(atomic_load(&kvm.exit_status), EXIT_FAIL_ON);
	ck_assert_int_eq(kvm.exit_by, KVM_END_FAIL_ON);
	ck_assert_str_eq(kvm.exit_reason, "console printed a kernel bug: WARNING: at x");
	ck_assert_str_eq(kvm.fail_on_line, "WARNING: at x");
	vm_exit(&t);

	vm_init(&kvm, &t, true);
	term_output(&kvm, (const u8 *)"BUG: x\n", 7);
	ck_assert(!atomic_load(&kvm.stopping));
	kvm_request_end(&kvm, KVM_END_POWEROFF, EXIT_GUEST_OK, "guest powered off");
	ck_assert_int_eq(term_fail_on_settle(&kvm, 0), EXIT_FAIL_ON);
	ck_assert_int_eq(kvm.exit_by, KVM_END_FAIL_ON);
	ck_assert_str_eq(kvm.exit_reason,
			 "console printed a kernel bug: BUG: x (then: guest powered off)");
	vm_exit(&t);

	vm_init(&kvm, &t, false);
	term_output(&kvm, (const u8 *)"Kernel panic - not syncing: x\n", 30);
	ck_assert(!atomic_load(&kvm.stopping));
	kvm_request_exit(&kvm, EXIT_GUEST_PANIC, "guest panicked (pvpanic)");
	ck_assert_int_eq(term_fail_on_settle(&kvm, 2), 2);
	ck_assert_int_eq(kvm.exit_by, KVM_END_PANIC);
	vm_exit(&t);
}
END_TEST

static Suite *failon_suite(void)
{
	Suite *s = suite_create("failon");
	TCase *tc = tcase_create("match");

	tcase_add_test(tc, test_split_lines);
	tcase_add_test(tc, test_own_pattern);
	tcase_add_test(tc, test_long_line);
	tcase_add_test(tc, test_hostile_bytes);
	tcase_add_test(tc, test_set_and_errors);
	tcase_add_test(tc, test_options);
	tcase_add_test(tc, test_run_end);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(failon_suite)

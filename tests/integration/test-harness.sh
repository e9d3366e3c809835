#!/usr/bin/env bash
# The test harness itself: lib.sh's accounting (a silent non-zero return, a grep that cannot search, a missing lkvm fail; a test's own output is not its result; skips keep their one line format) and scripts/kvm-host.sh's emulated host run from a checkout under /tmp.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=harness
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

# inner NAME BODY: runs BODY as a test script of its own on lib.sh (summary prefix "inner"); its
# output in $LOG_DIR/harness-NAME.log (LAST_LOG), its exit status in LAST_STATUS.
inner() {
	LAST_LOG=$LOG_DIR/harness-$1.log
	SUMMARY_PREFIX=inner bash -c ". '$REPO_ROOT/tests/integration/lib.sh'; $2" >"$LAST_LOG" 2>&1
	LAST_STATUS=$?
}

# A test that returns non-zero without calling fail or skip has failed; one that prints on its
# stdout still has its own result.
t_silent_return() {
	inner silent-return 't_quiet() { false; }; t_ok() { echo chatter; }; run_test quiet t_quiet; run_test fine t_ok; finish_tests'
	expect_status 1 || return
	expect_output '^FAIL quiet: the test returned 1 without a reason' || return
	expect_output '^ok fine$' || return
	expect_output '^inner: 1 passed, 1 failed, 0 skipped'
}

# expect_no_output on a log grep cannot read, or with a regex it cannot compile, fails.
t_grep_error() {
	inner grep-error 't_nolog() { LAST_LOG=/nonexistent/lkvm.log; expect_no_output lkvm; }
		t_regex() { LAST_LOG=/dev/null; expect_no_output "a("; }
		run_test nolog t_nolog; run_test regex t_regex; finish_tests'
	expect_status 1 || return
	expect_output '^FAIL nolog: grep cannot search /nonexistent/lkvm.log' || return
	expect_output '^FAIL regex: grep cannot search /dev/null for /a\(/' || return
	expect_output '^inner: 0 passed, 2 failed, 0 skipped'
}

# No lkvm binary: every test fails (the project builds it), none is skipped; a skip keeps its
# "skip NAME: why" line (tests/check.sh lists those).
t_missing_lkvm() {
	inner missing-lkvm 'LKVM=/nonexistent/lkvm; skip_unless_kvm; t() { :; }; run_test a t; finish_tests'
	expect_status 1 || return
	expect_output '^FAIL a: no lkvm binary at /nonexistent/lkvm' || return
	expect_output '^inner: 0 passed, 1 failed, 0 skipped' || return
	inner skip-line 't() { skip "this machine lacks it"; }; run_test s t; finish_tests'
	expect_status 0 || return
	expect_output '^skip s: this machine lacks it$' || return
	expect_output '^inner: 0 passed, 0 failed, 1 skipped'
}

# The emulated host run from a checkout under /tmp (where L1 mounts a tmpfs): the checkout must
# be visible there at its own path, CMD may make a user namespace (passt needs one: a chrooted
# CMD could not), and CMD's stdout, stderr and status come back. The checkout is
# bind-mounted under /tmp in a mount namespace of its own, so nothing is copied and nothing stays.
t_tmp_checkout() {
	local mnt
	unshare -m --propagation private true 2>/dev/null || { skip "cannot make a mount namespace (unshare -m)"; return; }
	mnt=$(mktemp -d /tmp/lkvm-harness.XXXXXX)
	LAST_LOG=$LOG_DIR/harness-tmp-checkout.log
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare -m --propagation private sh -c 'mount --bind "$1" "$2" && cd "$2" &&
		exec scripts/kvm-host.sh --emulated --timeout 600 -- \
			sh -c "pwd; test -f README.md && echo checkout-visible; unshare -U -r true && echo userns;
				echo to-stderr >&2; exit 7"' \
		sh "$REPO_ROOT" "$mnt" >"$LAST_LOG" 2>"$LAST_LOG.err"
	LAST_STATUS=$?
	rmdir "$mnt"
	if [ "$LAST_STATUS" != 7 ]; then
		cat "$LAST_LOG.err" >>"$LAST_LOG"
		expect_status 7
		return
	fi
	[ "$(cat "$LAST_LOG")" = "$mnt"$'\n'checkout-visible$'\n'userns ] ||
		{ fail "stdout is not the checkout's path, 'checkout-visible' and 'userns': $(head -c 200 "$LAST_LOG")"; return; }
	grep -qx to-stderr "$LAST_LOG.err" || fail "stderr lacks the command's line ($LAST_LOG.err)"
}

run_test silent-return t_silent_return
run_test grep-error t_grep_error
run_test missing-lkvm t_missing_lkvm
run_test tmp-checkout t_tmp_checkout
finish_tests

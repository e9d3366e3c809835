#!/usr/bin/env bash
# lkvm's guest init (init/lkvm-init.c) in the project's kernel: an initramfs from build/tools/mkinitrd
# runs a command on the virtio console and lkvm exits with the command's status through the exit
# port. Needs guest user space: a VMX/SVM host or the emulated one (scripts/kvm-host.sh --emulated).
set -u
SUMMARY_PREFIX=init
# One boot at a time: two guests on the emulated host's one CPU slowed each other down (one did
# not finish booting in 250 s there).
TEST_JOBS=${TEST_JOBS:-1}
. "$(dirname "$0")/lib.sh"

G=${LKVM_GUEST_DIR:-$REPO_ROOT/build/guest}
T=${LINUX_TIMEOUT:-600}
MKINITRD=$REPO_ROOT/build/tools/mkinitrd

# run_init LOG STATUS [MKINITRD-ARGS...] -- CMD...: an initramfs with busybox as /bin/sh and
# stderr on hvc0 too (lkvm has one virtio console so far), booted with --console virtio.
run_init() {
	local log=$1 want=$2
	shift 2
	skip_unless_userspace || return
	[ -f "$G/bzImage" ] || { fail "$G/bzImage missing (run scripts/build-guest.sh)"; return; }
	[ -x "$MKINITRD" ] || { fail "$MKINITRD missing (run make tools)"; return; }
	"$MKINITRD" -o "$LOG_DIR/$log.cpio" -f /bin/busybox:/bin/sh -e PATH=/bin -E /dev/hvc0 -R "$@" ||
		{ fail "mkinitrd failed"; return; }
	run_lkvm "$log" "$want" -- run -k "$G/bzImage" -i "$LOG_DIR/$log.cpio" -m 256 --console virtio --timeout $T
}

t_exit_status() {
	run_init init-exit7 7 -- sh -c 'echo LKVM-INIT-OUT $((6 * 7)); echo LKVM-INIT-ERR >&2; exit 7' || return
	expect_output "LKVM-INIT-OUT 42" "the command's stdout" || return
	expect_output "LKVM-INIT-ERR" "the command's stderr" || return
	expect_output "command exited with 7" "lkvm's report of the exit port"
}

t_signal() {
	run_init init-signal 137 -- sh -c 'echo LKVM-INIT-KILLING; kill -9 $$' || return
	expect_output "LKVM-INIT-KILLING" "the command's output" || return
	expect_output "command killed by signal 9 \(SIGKILL\)" "lkvm's report of the signal"
}

# A command that is not there: the shell's 127, and init says why on the command's stderr,
# which falls back to hvc0 when the stderr console (hvc1 here) cannot be opened.
t_not_found() {
	run_init init-enoent 127 -E /dev/hvc1 -- /no/such/command || return
	expect_output "lkvm-init: /dev/hvc1: .*; CMD's stderr goes to /dev/hvc0" "init's console fallback" ||
		return
	expect_output "lkvm-init: /no/such/command: No such file or directory" "init's message"
}

# The project's kernel has no 9p: a share cannot be mounted, and init says why.
t_init_failed() {
	run_init init-no9p 125 -s nosuch:/mnt -- sh -c 'echo LKVM-INIT-SHOULD-NOT-RUN' || return
	expect_no_output "LKVM-INIT-SHOULD-NOT-RUN" "the command running" || return
	expect_output "guest init failed mounting a share: No such device \(the kernel needs CONFIG_9P_FS" \
		"lkvm's report of init's failure"
}

skip_unless_kvm
run_test init-exit-status t_exit_status
run_test init-signal t_signal
run_test init-not-found t_not_found
run_test init-failed t_init_failed
finish_tests

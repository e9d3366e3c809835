#!/usr/bin/env bash
# Boots the project's Linux kernel (build/guest, from scripts/build-guest.sh) in lkvm and checks each outcome.
set -u
SUMMARY_PREFIX=linux
. "$(dirname "$0")/lib.sh"

T=${LINUX_TIMEOUT:-600}    # guest kernel code is emulated on a PVM host: a boot takes about a minute idle, over 300 s at load 7
LAST_STAGE="Waiting for root device /dev/vda"
# No initramfs and a disk that never comes: the kernel finishes booting and waits, in kernel
# mode, which is as far as a PVM host can take it (HOST-KVM.md); the same on a VMX host.
ROOTWAIT="root=/dev/vda rootwait"

boot_to_last_stage() { # boot_to_last_stage LOG KERNEL CPUS
	need_kernel "$2" || return
	run_lkvm "$1" 0 -- run -k "$G/$2" -m 256 -c "$3" -p "$ROOTWAIT" --timeout $T --exit-on "$LAST_STAGE" || return
	expect_output "Linux version 6\.1" "the kernel banner" || return
	expect_output "$LAST_STAGE" "the last boot stage" || return
	expect_output "console printed" "lkvm's exit-on message"
}

# The bzImage (its decompressor and the 64-bit boot protocol) with 2 CPUs and the initramfs: one
# boot proves all three (a bzImage boot costs a PVM host about 35 s of CPU). On a PVM host the
# kernel hands over to /init, as far as it can go; elsewhere the init script reports both CPUs.
t_bzimage() {
	need_kernel bzImage initramfs.cpio.gz || return
	if is_pvm_host; then
		# Uncompressed: the kernel's gunzip of the 1 MB image, emulated here, took 56 s of the
		# boot's 72; what lkvm does with the initrd is the same for either.
		local cpio=$LOG_DIR/linux-bzimage.cpio
		gzip -dc "$G/initramfs.cpio.gz" >"$cpio" || { fail "cannot gunzip $G/initramfs.cpio.gz"; return; }
		run_lkvm linux-bzimage 0 -- run -k "$G/bzImage" -i "$cpio" -m 256 -c 2 --timeout $T \
			--exit-on "Run /init as init process" || return
		expect_output "console printed" "lkvm's exit-on message" || return
	else
		run_lkvm linux-bzimage 0 -- run -k "$G/bzImage" -i "$G/initramfs.cpio.gz" -m 256 -c 2 --timeout $T || return
		expect_output "LKVM-GUEST-USERSPACE-OK .* cpus=2" "the init script's marker" || return
	fi
	expect_output "Linux version 6\.1" "the kernel banner" || return
	expect_output "smp: Brought up 1 node, 2 CPUs" "both CPUs up" || return
	expect_output "Unpacking initramfs|Freeing initrd memory" "the initramfs being unpacked"
}

# The vmlinux through its PVH entry, one CPU, to the last boot stage.
t_pvh() {
	boot_to_last_stage linux-pvh vmlinux 1 || return
	expect_output "smp: Brought up 1 node, 1 CPU" "one CPU up"
}

t_panic() {
	# No initramfs and no root=: the kernel cannot mount a root and panics; pvpanic tells lkvm.
	need_kernel vmlinux || return
	run_lkvm linux-panic 2 -- run -k "$G/vmlinux" -m 256 --timeout $T || return
	expect_output "Kernel panic - not syncing" "the kernel's panic message" || return
	expect_output "guest panicked" "lkvm's panic report" || return
	# One line after it says how to get a shell (no -i, -d or root= was given).
	[ "$(grep -c "^lkvm: hint: no root given (no -i, -d or root=): \"lkvm run -k $G/vmlinux --\" gives a shell on the host's files" "$LAST_LOG")" = 1 ] ||
		fail "not one line with the hint: $(grep -v '^\[' "$LAST_LOG" | tail -3 | tr '\n' '|')"
}

t_timeout() {
	need_kernel bzImage || return
	# Status 124 and lkvm's line say the timeout ended the run; it must not have fired early (a
	# lower bound on the wall time cannot fail for a slow host; no upper bound is asserted).
	run_lkvm linux-timeout 124 -- run -k "$G/bzImage" -m 256 -p "$ROOTWAIT" --timeout 5 || return
	expect_output "^lkvm: error: timeout: 5 s passed" "lkvm's timeout line" || return
	awk -v s="$LAST_SECS" 'BEGIN { exit !(s >= 5) }' || fail "ended after ${LAST_SECS}s, before the 5 s timeout"
}

skip_unless_kvm
run_test linux-timeout t_timeout
run_test linux-bzimage t_bzimage
run_test linux-pvh t_pvh
run_test linux-panic t_panic
finish_tests

#!/usr/bin/env bash
# Runs one case of the hostile virtio-net guest (build/guests/virtio-hostile.elf: a looping chain
# between two good frames) on a tap in a throw-away network namespace, with and without ioeventfd,
# and counts what went out: notifies, frames, what the host side of the tap received.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=virtio-guest
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=30            # lkvm --timeout
TAP=lkvmbad0
REAL_LKVM=$LKVM

# The guest's case: a good frame, then a looping chain (NEEDS_RESET; the used index stays at 1),
# then a reset and a good frame again. Three TX notifies, two frames.
GUEST_CASE=loop-between-frames

# t_virtio_bad CASE LKVM-BINARY EXTRA-N-OPTIONS PRECREATE-TAP(0/1)
t_virtio_bad() {
	skip_unless_net || return
	need_lkvm "$2" || return
	need_guest virtio-hostile || return
	in_netns virtio_bad_in "$@"
}

virtio_bad_in() {
	local name=$1 bin=$2 extra=$3 precreate=$4
	if [ "$precreate" = 1 ]; then
		tap_up "$TAP" || return
	fi
	# The guest checks NEEDS_RESET, the used index left at 1 and a good frame after the reset
	# (tests/guest/lib/guest.h): its status is that result. The rest is what only the host sees.
	LKVM=$bin run_guest "virtio-guest-$name" 0 -- run -k "$ELF" -n "mode=tap,tapif=$TAP,script=none$extra" \
		-p "case=$GUEST_CASE" --timeout $T --stats || return
	expect_no_output 'ERROR: [A-Za-z]+Sanitizer|runtime error:|SUMMARY: [A-Za-z]+Sanitizer' "a sanitizer report" || return
	expect_no_output 'Segmentation fault|Assertion .* failed|core dumped' "a crash" || return
	# lkvm says so once (it logs the first NEEDS_RESET of a device only).
	local n
	n=$(grep -v '^GUEST ' "$LAST_LOG" | grep -Eic 'needs[ _-]?reset')
	[ "$n" = 1 ] || { fail "expected one lkvm line about 'needs reset', found $n"; return; }
	# --stats: the two valid frames went out, the looping chain did not; the three notifies (two
	# valid chains and the looping one) trapped only in trap mode.
	local kicks trapped packets
	read -r kicks trapped packets < <(awk '$1 == "tx0" { print $2, $3, $5; exit }' "$LAST_LOG")
	[ -n "${packets:-}" ] || { fail "no tx0 line in the --stats table"; return; }
	[ "$packets" = 2 ] || { fail "--stats: tx0 sent $packets frames, expected 2"; return; }
	case $extra in
	*ioeventfd=off*) [ "$trapped" = 3 ] || { fail "--stats: tx0 trapped=$trapped, expected 3"; return; } ;;
	*) [ "$trapped" = 0 ] || { fail "--stats: tx0 trapped=$trapped with ioeventfd, expected 0"; return; } ;;
	esac
	# Each notify counted once, however it arrived (the eventfd sums what ioeventfd coalesces).
	[ "$kicks" = 3 ] || { fail "--stats: tx0 kicks=$kicks for 3 notifies (trapped=$trapped)"; return; }
	if [ "$precreate" = 1 ]; then
		# Frames the guest sent are what the host side of the tap received: the two valid ones only.
		local rx
		rx=$(tap_stat "$TAP" rx_packets)
		[ "$rx" = 2 ] || fail "host side of $TAP received ${rx:-?} frames, expected 2"
	fi
}

skip_unless_kvm
ASAN_LKVM=$REPO_ROOT/build/asan/lkvm
run_test ioeventfd t_virtio_bad ioeventfd "$REAL_LKVM" "" 0
run_test trapped t_virtio_bad trapped "$REAL_LKVM" ",ioeventfd=off" 0
run_test host-rx t_virtio_bad host-rx "$REAL_LKVM" "" 1
run_test asan-ioeventfd t_virtio_bad asan-ioeventfd "$ASAN_LKVM" "" 0
run_test asan-trapped t_virtio_bad asan-trapped "$ASAN_LKVM" ",ioeventfd=off" 0
finish_tests

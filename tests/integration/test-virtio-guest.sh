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
NS_PREFIX=lkvm-vbad-$$
REAL_LKVM=$LKVM

# Every namespace this script made goes, whatever happens (each test also deletes its own).
cleanup_namespaces() {
	local ns
	for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }'); do
		case $ns in "$NS_PREFIX"-*) ip netns del "$ns" 2>/dev/null ;; esac
	done
	rm -f "$LOG_DIR/.netns-exec.$$"
}
trap cleanup_namespaces EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Why the network cases cannot run here, or empty.
NET_SKIP=""
if [ ! -c /dev/net/tun ]; then
	NET_SKIP="/dev/net/tun missing"
elif ! { exec 8<>/dev/net/tun; } 2>/dev/null; then
	NET_SKIP="/dev/net/tun cannot be opened"
elif ! command -v ip >/dev/null 2>&1; then
	fail_all "no ip(8) (scripts/deps.sh test installs iproute2)"
elif ! ip netns add "$NS_PREFIX-probe" 2>/dev/null; then
	NET_SKIP="cannot create a network namespace (ip netns add)"
else
	ip netns del "$NS_PREFIX-probe"
fi
exec 8>&-

# run_lkvm runs "$LKVM ARGS": this wrapper puts lkvm in the test's namespace (exec keeps the pid,
# so the wall-clock guard still kills lkvm itself).
WRAP=$LOG_DIR/.netns-exec.$$
# shellcheck disable=SC2016 # expanded by the wrapper, not here
printf '#!/bin/sh\nexec ip netns exec "$LKVM_NETNS" "$LKVM_REAL" "$@"\n' >"$WRAP"
chmod +x "$WRAP"

# The guest's case: a good frame, then a looping chain (NEEDS_RESET; the used index stays at 1),
# then a reset and a good frame again. Three TX notifies, two frames.
GUEST_CASE=loop-between-frames

# t_virtio_bad CASE LKVM-BINARY EXTRA-N-OPTIONS PRECREATE-TAP(0/1)
t_virtio_bad() {
	local name=$1 bin=$2 extra=$3 precreate=$4
	[ -z "$NET_SKIP" ] || { skip "$NET_SKIP"; return; }
	need_lkvm "$bin" || return
	need_guest virtio-hostile || return
	local ns=$NS_PREFIX-$name
	ip netns add "$ns" || { fail "ip netns add $ns failed"; return; }
	# This runs in its own subshell: the trap removes the namespace when the test ends, however.
	# shellcheck disable=SC2064
	trap "ip netns del '$ns' 2>/dev/null" EXIT
	if [ "$precreate" = 1 ]; then
		ip netns exec "$ns" ip tuntap add dev "$TAP" mode tap vnet_hdr ||
			{ fail "could not pre-create tap $TAP"; return; }
		ip netns exec "$ns" ip link set "$TAP" up || { fail "could not bring $TAP up"; return; }
	fi
	export LKVM_NETNS=$ns LKVM_REAL=$bin
	LKVM=$WRAP
	run_lkvm "virtio-guest-$name" 0 -- run -k "$ELF" -n "mode=tap,tapif=$TAP,script=none$extra" \
		-p "case=$GUEST_CASE" --timeout $T --stats || return
	expect_no_output '^GUEST (FAIL|EXCEPTION)' "a guest failure" || return
	expect_no_output 'ERROR: [A-Za-z]+Sanitizer|runtime error:|SUMMARY: [A-Za-z]+Sanitizer' "a sanitizer report" || return
	expect_no_output 'Segmentation fault|Assertion .* failed|core dumped' "a crash" || return
	# The guest checked NEEDS_RESET, the used index left at 1 and a good frame after the reset.
	expect_output "^GUEST hostile: $GUEST_CASE ok \\(NEEDS_RESET, recovered\\)\$" || return
	expect_output '^GUEST hostile: ALL OK \(1 cases\)$' || return
	expect_output '^GUEST DONE$' || return
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
		rx=$(ip netns exec "$ns" cat "/sys/class/net/$TAP/statistics/rx_packets" 2>/dev/null)
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

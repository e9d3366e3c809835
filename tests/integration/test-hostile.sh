#!/usr/bin/env bash
# A malicious virtio-net driver (build/guests/virtio-hostile.elf, C on tests/guest/lib): looping
# and out-of-range chains, addresses outside RAM / in the PCI hole / near 2^64, lengths near 2^32,
# nested, oversized and looping indirect tables, avail idx jumps, queue sizes 0 and 100, queue
# changes while running, writes to read-only registers, MSI-X table and PBA abuse, odd-sized and
# unaligned accesses to every BAR. lkvm keeps running, every case recovers after a reset, the
# other devices answer, and lkvm's own log stays bounded, also when the guest repeats a case.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=hostile
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=120
NCASES=22
REAL_LKVM=$LKVM
ASAN_LKVM=$REPO_ROOT/build/asan/lkvm

NET_SKIP=""
[ -c /dev/net/tun ] || NET_SKIP="/dev/net/tun missing"
command -v ip >/dev/null 2>&1 || fail_all "no ip(8) (scripts/deps.sh test installs iproute2)"

WRAP=$LOG_DIR/.hostile-netns-exec.$$
# shellcheck disable=SC2016 # expanded by the wrapper
printf '#!/bin/sh\nexec ip netns exec "$LKVM_NETNS" "$LKVM_REAL" "$@"\n' >"$WRAP"
chmod +x "$WRAP"
trap 'rm -f "$WRAP"' EXIT

# lkvm's own lines (not the guest's, not --stats).
# lkvm's own lines, less the two that set-up prints whatever the guest does (the VM's name,
# and a stale control socket of a killed VM whose pid this run reuses).
own_lines() {
	grep -v '^GUEST ' "$LAST_LOG" | grep '^lkvm: ' |
		grep -cvE '^lkvm: (VM name: |removed a stale control socket )'
}
# The most a rate limit of 5 lines per 5 s allows in the last run's wall time, plus lkvm's
# closing line and one of slack.
max_lines() { local s=${LAST_SECS%.*}; echo $((5 * (s / 5 + 1) + 2)); }

all_body() {
	local name=$1 bin=$2 extra=$3
	export LKVM_NETNS=$NETNS LKVM_REAL=$bin
	LKVM=$WRAP
	run_lkvm "$name" 0 -- run -k "$ELF" --timeout $T -n "mode=tap,tapif=lkvmh0,script=none$extra" || return
	expect_no_output 'ERROR: [A-Za-z]+Sanitizer|runtime error:|SUMMARY: [A-Za-z]+Sanitizer' "a sanitizer report" || return
	expect_no_output '^GUEST (FAIL|EXCEPTION)' "a guest failure" || return
	local ok
	ok=$(grep -c '^GUEST hostile: [a-z0-9^-]* ok ' "$LAST_LOG")
	[ "$ok" = $NCASES ] || { fail "$ok of $NCASES cases ok"; return; }
	expect_output "^GUEST hostile: ALL OK \\($NCASES cases\\)$" || return
	expect_output '^GUEST DONE$' || return
	# 16 cases break a queue; the warnings are rate-limited (5 per 5 s, then a count).
	local n
	n=$(own_lines)
	[ "$n" -le "$(max_lines)" ] || fail "lkvm logged $n lines for $NCASES cases in $LAST_SECS s"
}

flood_body() {
	export LKVM_NETNS=$NETNS LKVM_REAL=$REAL_LKVM
	LKVM=$WRAP
	run_lkvm hostile-flood 0 -- run -k "$ELF" --timeout $T -p "case=desc-loop repeat=300" \
		-n "mode=tap,tapif=lkvmh1,script=none" || return
	expect_output '^GUEST hostile: ALL OK \(300 cases\)$' || return
	# 300 broken queues: a few lines per 5 s, not 300.
	local n
	n=$(own_lines)
	[ "$n" -le "$(max_lines)" ] || { fail "lkvm logged $n lines for 300 broken queues in $LAST_SECS s"; return; }
	expect_output 'device needs reset \([0-9]+ similar messages suppressed\)' "a count of suppressed lines"
}

t_all() {
	[ -z "$NET_SKIP" ] || { skip "$NET_SKIP"; return; }
	need_lkvm "$2" || return
	need_guest virtio-hostile || return
	in_netns all_body "$@"
}

t_flood() {
	[ -z "$NET_SKIP" ] || { skip "$NET_SKIP"; return; }
	need_guest virtio-hostile || return
	in_netns flood_body
}

skip_unless_kvm
run_test hostile-ioeventfd t_all hostile-ioeventfd "$REAL_LKVM" ""
run_test hostile-trapped t_all hostile-trapped "$REAL_LKVM" ",ioeventfd=off"
run_test hostile-asan t_all hostile-asan "$ASAN_LKVM" ""
run_test hostile-flood t_flood
finish_tests

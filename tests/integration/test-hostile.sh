#!/usr/bin/env bash
# A malicious virtio-net driver (build/guests/virtio-hostile.elf, C on tests/guest/lib): looping
# and out-of-range chains (also between two good frames), addresses outside RAM / in the PCI hole / near 2^64, lengths near 2^32,
# nested, oversized and looping indirect tables, avail idx jumps, queue sizes 0 and 100, queue
# changes while running, writes to read-only registers, MSI-X table and PBA abuse, odd-sized and
# unaligned accesses to every BAR; and a virtio-console chain of 16 GiB of output followed by a
# reset. lkvm keeps running, every case recovers after a reset, the other devices answer, and
# lkvm's own log stays bounded, also when the guest repeats a case. A disk driver that makes the
# host copy (blk-test blk=bounce): 128 unaligned 4 MiB reads at once, all into the same buffer,
# complete while lkvm holds no more bounce memory than its limit (--stats=json).
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=hostile
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

# Every VM's --timeout is a leak guard, not a deadline the test expects: 120 s ran out in the
# emulated host at a load of 13 (hostile-flood), so it is 600 s as in test-ctl.sh.
T=600
NCASES=25
REAL_LKVM=$LKVM
ASAN_LKVM=$REPO_ROOT/build/asan/lkvm

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
	# The guest checks that every case recovers after its reset, and that all of them ran
	# (tests/guest/lib/guest.h): its status is that result. The rest is what the host sees.
	LKVM=$bin run_guest "$name" 0 -- run -k "$ELF" --timeout $T -n "mode=tap,tapif=lkvmh0,script=none$extra" \
		--console virtio || return
	expect_no_output 'ERROR: [A-Za-z]+Sanitizer|runtime error:|SUMMARY: [A-Za-z]+Sanitizer' "a sanitizer report" || return
	case $extra in *batch=on*)
		# A tap without RWF_NOWAIT (Debian's 6.1, the emulated host's) refuses the batches: the
		# batched path never ran here (the per-frame one did, with no report above).
		if grep -q 'batch call failed (Operation not supported)' "$LAST_LOG"; then
			skip "this kernel's tap refuses io_uring's RWF_NOWAIT: batch=on fell back to one frame per call"
			return
		fi
		expect_no_output 'batch=on unavailable' "the per-frame fallback" || return
		;;
	esac
	# The console's line after the 16-GiB chain's reset reached the host.
	expect_output '^GUEST hostile: console prints after the reset$' "the console's line after its reset" || return
	# 18 cases break a queue; the warnings are rate-limited (5 per 5 s, then a count).
	local n
	n=$(own_lines)
	[ "$n" -le "$(max_lines)" ] || fail "lkvm logged $n lines for $NCASES cases in $LAST_SECS s"
}

flood_body() {
	run_guest hostile-flood 0 -- run -k "$ELF" --timeout $T -p "case=desc-loop repeat=300" \
		-n "mode=tap,tapif=lkvmh1,script=none" || return
	# 300 broken queues: a few lines per 5 s, not 300.
	local n
	n=$(own_lines)
	[ "$n" -le "$(max_lines)" ] || { fail "lkvm logged $n lines for 300 broken queues in $LAST_SECS s"; return; }
	expect_output 'device needs reset \([0-9]+ similar messages suppressed\)' "a count of suppressed lines"
}

t_all() {
	skip_unless_net || return
	need_lkvm "$2" || return
	need_guest virtio-hostile || return
	in_netns all_body "$@"
}

t_flood() {
	skip_unless_net || return
	need_guest virtio-hostile || return
	in_netns flood_body
}

# The bounce counters of the last --stats=json line: "bytes peak limit waits".
bounce_stats() {
	grep '^{"vcpu_exits"' "$LAST_LOG" | tail -n1 | python3 -c '
import json, sys
b = json.load(sys.stdin)["disks"][0]["bounce"]
print(b["bytes"], b["peak"], b["limit"], b["waits"])'
}

t_blk_bounce() {
	need_python && need_guest blk-test || return
	local img=$LOG_DIR/hostile-bounce.img bytes peak limit waits
	make_pattern_image "$img" 8192
	# The guest checks that all 128 reads completed with the right data: its status says so.
	run_guest hostile-blk-bounce 0 -- run -k "$ELF" -d "$img" -p "blk=bounce" --timeout $T --stats=json || return
	rm -f "$img"
	read -r bytes peak limit waits <<<"$(bounce_stats)"
	[ -n "$waits" ] || { fail "no bounce counters in --stats=json"; return; }
	# Where the image's file system takes no O_DIRECT, nothing is bounced at all.
	[ "$peak" -gt 0 ] || { skip "no O_DIRECT for $img here: no bounce buffers to bound"; return; }
	[ "$peak" -le "$limit" ] || { fail "bounce peak $peak > limit $limit"; return; }
	[ "$waits" -gt 0 ] || { fail "no request waited for bounce memory (peak $peak)"; return; }
	[ "$bytes" = 0 ] || fail "$bytes bounce bytes still held at exit"
}

skip_unless_kvm
run_test hostile-ioeventfd t_all hostile-ioeventfd "$REAL_LKVM" ""
run_test hostile-trapped t_all hostile-trapped "$REAL_LKVM" ",ioeventfd=off"
run_test hostile-asan t_all hostile-asan "$ASAN_LKVM" ""
# The batched data path (io_uring) under the same driver, with ASan+UBSan watching.
run_test hostile-batch-asan t_all hostile-batch-asan "$ASAN_LKVM" ",batch=on"
run_test hostile-flood t_flood
run_test hostile-blk-bounce t_blk_bounce
finish_tests

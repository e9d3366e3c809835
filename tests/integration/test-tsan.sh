#!/usr/bin/env bash
# lkvm built with ThreadSanitizer (make TSAN=1: build/tsan/lkvm) moving traffic both ways: the
# net-bench guest's request/response run against net-peer on a tap, once with ioeventfd and once
# with trapped notifies; and a 2-vCPU guest paused, dumped and resumed over and over while it does
# port I/O. Any TSan report fails the run (exit 66) and the test.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=tsan
LKVM=${LKVM:-build/tsan/lkvm}
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=60
SECS=${TSAN_SECS:-2}
REAL_LKVM=$LKVM
export TSAN_OPTIONS="exitcode=66 halt_on_error=0 suppressions=$REPO_ROOT/tests/tsan.supp${TSAN_OPTIONS:+ $TSAN_OPTIONS}"

# rr_run NAME -n-EXTRA: inside in_netns.
rr_run() {
	local name=$1 nextra=$2 tap=lkvmts0 i
	tap_up $tap || return
	peer_start "$name" echo "$tap" $((T + 10)) 64 || return
	# --stats snapshots (SIGUSR2) while the threads run, so the counters' readers race their
	# writers if they can: every 0.3 s while this run's lkvm (its pid from LKVM_PIDFILE, its
	# name checked before each signal) is there, from when the guest runs (lkvm blocks the
	# signal during set-up; before that it would still kill it, and TSan's start is slow).
	local LKVM_PIDFILE=$LOG_DIR/$name.pid
	rm -f "$LKVM_PIDFILE" "$LOG_DIR/$name.done"
	(
		local pid=""
		for ((i = 0; i < 400; i++)); do
			sleep 0.3
			[ -e "$LOG_DIR/$name.done" ] && break
			grep -q '^GUEST net-bench' "$LOG_DIR/$name.log" 2>/dev/null || continue
			[ -n "$pid" ] || pid=$(cat "$LKVM_PIDFILE" 2>/dev/null)
			[ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = lkvm ] && kill -USR2 "$pid" 2>/dev/null
		done
	) &
	local usr2=$!
	run_guest "$name" 0 -- run -k "$GUEST_DIR/net-bench.elf" --timeout $T --stats=json \
		-n "mode=tap,tapif=$tap,script=none$nextra" -p "bench=rr size=64 secs=$SECS"
	local st=$?
	touch "$LOG_DIR/$name.done"
	wait "$usr2"
	rm -f "$LOG_DIR/$name.done" "$LKVM_PIDFILE"
	peer_stop
	expect_no_output 'WARNING: ThreadSanitizer' "a ThreadSanitizer report" || return
	[ $st = 0 ] || return
	# Counted anywhere in a line: a snapshot goes to stderr, the guest's console to stdout, and
	# in this one log it may start in the middle of a console line (seen in the emulated host).
	[ "$(grep -o '{"vcpu_exits"' "$LAST_LOG" | wc -l)" -ge 2 ] || { fail "no --stats snapshot taken while running"; return; }
	local n
	# The device moved frames both ways (qstat reads the last --stats line, printed at exit,
	# after the guest finished: never interleaved).
	local tx rx n
	tx=$(qstat tx0 packets); rx=$(qstat rx0 packets)
	[ "${tx:-0}" -gt 0 ] && [ "${rx:-0}" -gt 0 ] || { fail "no frames counted (tx0 $tx, rx0 $rx)"; return; }
	# And at least as many as the guest's own count of transactions, when its BENCH line is
	# whole: a snapshot (stderr) may land in the middle of it, the serial console and lkvm
	# sharing one log, and then that line cannot be read.
	n=$(sed -n 's/^BENCH test=rr size=64 transactions=\([0-9][0-9]*\) .*/\1/p' "$LAST_LOG" | tail -n 1)
	[ -z "$n" ] || [ "$n" -gt 0 ] || { fail "the guest completed no transactions"; return; }
	[ -z "$n" ] || { [ "$tx" -ge "$n" ] && [ "$rx" -ge "$n" ]; } ||
		fail "device counters (tx0 $tx, rx0 $rx) below the guest's $n transactions"
}

t_rr() {
	skip_unless_net || return
	need_lkvm "$REAL_LKVM" || return
	need_guest net-bench || return
	in_netns rr_run "$@"
}

# Pauses of a guest whose vCPUs keep exiting for port I/O (the ticks guest's UART lines): the
# control thread kicks the vCPUs (immediate_exit, the started flags) while they complete their
# I/O before parking, and reads the paused time that pause and resume write. --sandbox=off: a
# TSan report opens /proc/self/maps, which the sandbox would stop (159) before it is printed.
t_pause() {
	need_lkvm "$REAL_LKVM" || return
	need_guest ticks || return
	local n=tsan-pause-$$ i
	VM_TIMEOUT=$T start_vm $n tsan-pause -k "$GUEST_DIR/ticks.elf" -c 2 -m 64 -p tick_ms=5 --sandbox=off
	wait_vm $n || return
	wait_log "$VM_LOG" '^TICK n=' 30 || return
	for ((i = 0; i < 6; i++)); do
		ctl tsan-pause-ctl pause $n && expect_status 0 || return
		ctl tsan-pause-ctl stat $n && expect_status 0 || return
		ctl tsan-pause-ctl debug $n && expect_status 0 || return
		ctl tsan-pause-ctl resume $n && expect_status 0 || return
		ctl tsan-pause-ctl list && expect_status 0 || return
	done
	ctl tsan-pause-ctl stop $n && expect_status 0 || return
	end_vm
	expect_no_output 'WARNING: ThreadSanitizer' "a ThreadSanitizer report" || return
	expect_status 3
}

skip_unless_kvm
run_test_serial tsan-pause t_pause
run_test_serial tsan-net-ioeventfd t_rr tsan-net-ioeventfd ""
run_test_serial tsan-net-trapped t_rr tsan-net-trapped ",ioeventfd=off"
finish_tests

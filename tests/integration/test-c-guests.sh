#!/usr/bin/env bash
# Runs the C test guests (build/guests/libtest.elf, net-bench.elf): the guest library's checks and failure paths, and net-bench tx/rr/rx against build/tools/net-peer on a tap in a network namespace.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=c-guests
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=30                            # lkvm --timeout
SECS=${BENCH_SECS:-2}           # length of each net-bench run

# ---- the library (libtest.c) ----

# The guest checks itself (tests/guest/lib/guest.h): its one status is the result.
t_libtest() {
	need_guest libtest || return
	run_guest c-libtest 0 -- run -k "$ELF" --timeout $T -p "libtest.echo=hello libtest.n=0x10"
}

# t_libtest_fail NAME STATUS REGEX: a failure path ends the run with STATUS (4: an assertion,
# 2: an exception) and the guest's console says why; for an assertion lkvm's own line names the
# same line number (the only thing of the guest's that reaches lkvm's messages).
t_libtest_fail() {
	local name=$1 want=$2 re=$3 line
	need_guest libtest || return
	run_lkvm "c-libtest-$name" "$want" -- run -k "$ELF" --timeout $T -p "test=$name" || return
	expect_output "$re" || return
	expect_no_output '^GUEST DONE' "GUEST DONE after a failure" || return
	[ "$want" = 4 ] || return 0
	line=$(sed -n 's/^GUEST FAIL [^:]*:\([0-9]*\): .*/\1/p' "$LAST_LOG" | head -n 1)
	expect_output "^lkvm: error: guest assertion failed at line $line " "lkvm's line naming line $line"
}

# A failed GUEST_ASSERT_EQ: lkvm's own line carries both values (the exit port's pieces), as the
# guest's console does.
t_libtest_assert_eq() {
	t_libtest_fail assert-eq 4 \
		'^GUEST FAIL tests/guest/libtest\.c:[0-9]+: .* == 0xfedcba9876543210ull: a=0x1234567893 b=0xfedcba9876543210$' ||
		return
	expect_output '^lkvm: error: guest assertion failed at line [0-9]+ \(a=0x1234567893 b=0xfedcba9876543210; ' \
		"lkvm's line with both values"
}

# ---- --fail-on: kernel-bug lines on the console (kbug.c prints them) ----

# t_kbug WHAT STATUS ENDED [OPTION...]: kbug=WHAT run with --fail-on OPTION... ends with STATUS,
# the status file's ended=ENDED; with fail-on a fail_on= line that names the bug line.
t_kbug() {
	local what=$1 want=$2 ended=$3 st
	shift 3
	need_guest kbug || return
	st=$LOG_DIR/c-$_T_NAME.status
	run_lkvm "c-$_T_NAME" "$want" -- run -k "$ELF" --timeout $T -p "kbug=$what" \
		--status-file "$st" "$@" || return
	grep -qx "ended=$ended" "$st" || { fail "$st: not ended=$ended: $(tr '\n' ' ' <"$st")"; return; }
	case $what in
	warning) [ "$ended" = command ] || grep -qx 'fail_on=\[    1\.000000\] WARNING: CPU: 0 PID: 1 at tests/guest/kbug\.c:[0-9]* guest_main' "$st" ;;
	hostile) grep -qx 'fail_on=\[    1\.000000\] WARNING: \\x1b\[2J\\x07[0-9]*' "$st" &&
		[ "$(grep '^fail_on=' "$st" | wc -c)" -le 300 ] ;;
	panic) grep -q '^fail_on=.*Kernel panic - not syncing: kbug$' "$st" ;;
	*) ! grep -q '^fail_on=' "$st" ;;
	esac || { fail "$st: the fail_on= line is not what kbug printed: $(grep '^fail_on=' "$st" | cut -c1-200)"; return; }
	[ "$want" != 5 ] || expect_output '^lkvm: error: console printed a kernel bug: ' "lkvm's line naming the bug"
}

# ---- net-bench against net-peer ----

# t_bench TEST PEER-MODE SIZE [EXTRA -p WORDS] [EXTRA -n OPTIONS]
t_bench() {
	local test=$1 mode=$2 size=$3 pextra=${4:-} nextra=${5:-}
	local name=c-bench-$test-$size${pextra:+-${pextra// /-}}${nextra:+-${nextra//[,=]/-}}
	name=${name//=/-}
	skip_unless_net || return
	need_guest net-bench || return
	in_netns bench_in "$name" "$test" "$mode" "$size" "$pextra" "$nextra"
}

# bench_in NAME TEST PEER-MODE SIZE PEXTRA NEXTRA: t_bench in its namespace.
bench_in() {
	net_bench_in "$@" lkvmcg0 || return
	case $6 in *batch=on*) check_batch "$2" ;; esac
	case $6 in *trace=on*) check_trace "$5" ;; esac
	# trace=1: the stamps went out and came back inside every echo the guest checked
	# byte-exact (bad=0), and its BENCH line says so for the host.
	case $5 in *trace=1*) [ "$(kv trace "$BENCH_LINE")" = 1 ] || fail "no trace=1 in the BENCH line" ;; esac
}

# -n trace=on (PEXTRA as given to the guest): the group "trace" is there with the guest's TSC
# rate; transactions are timed only when the guest stamps its frames (trace=1), else none is
# (what sits where the stamps go is the pattern, whose deltas are never in range).
check_trace() {
	local n khz
	n=$(group_stat trace transactions); khz=$(group_stat trace tsc_khz)
	[ -n "$n" ] && [ -n "$khz" ] || { fail "no trace group in --stats"; return; }
	[ "$khz" -gt 0 ] || { fail "trace: tsc_khz 0 (the guest's TSC unknown)"; return; }
	case " $1 " in
	*" trace=1 "*) [ "$n" -gt 0 ] || fail "trace: no transaction timed" ;;
	*) [ "$n" = 0 ] || fail "trace: $n transactions timed from a guest that wrote no stamps" ;;
	esac
}

# -n batch=on was given: it was not refused (no fallback line), and the queue that carried the
# traffic went through the batch calls. How many frames a call carries is scheduling (the
# emulated host, one CPU for the vCPU and the TX thread, gave one per call): it is printed, not
# asserted; the unit tests (test_virtio_net_tx, test_virtio_net_rx, test_net) assert batches of
# many frames.
check_batch() {
	local q=tx0 pk calls
	[ "$1" = rx ] && q=rx0
	# A tap without RWF_NOWAIT (Debian's 6.1, the emulated host's) refuses the first batch:
	# the frames still all went out one by one (the counts above), but no batch ran here.
	if grep -q "virtio-net $q: batch call failed (Operation not supported)" "$LAST_LOG"; then
		skip "this kernel's tap refuses io_uring's RWF_NOWAIT: batch=on falls back to one frame per call (every frame counted above)"
		return
	fi
	expect_no_output 'batch=on unavailable|batch call failed' "a batch fallback" || return
	pk=$(qstat $q packets); calls=$(qstat $q calls)
	[ -n "$pk" ] && [ -n "$calls" ] || { fail "no $q packets/calls in --stats"; return; }
	[ "$calls" -gt 0 ] || { fail "$q: $pk frames and no batch call"; return; }
	echo "$q: $pk frames in $calls batch calls" >&2
}

t_bench_nonic() {
	need_guest net-bench || return
	run_lkvm c-bench-nonic 4 -- run -k "$ELF" --timeout $T -p "bench=tx" || return
	expect_output '^GUEST FAIL .*net-bench\.c:[0-9]+: no virtio-net device 1af4:1041'
}

skip_unless_kvm
run_test libtest t_libtest
run_test libtest-assert t_libtest_fail assert 4 '^GUEST FAIL tests/guest/libtest\.c:[0-9]+: cpl\(\) == 0$'
run_test libtest-assert-cpl0 t_libtest_fail assert0 4 '^GUEST FAIL tests/guest/libtest\.c:[0-9]+: cpl\(\) == 3$'
run_test libtest-assert-eq t_libtest_assert_eq
run_test libtest-pagefault t_libtest_fail fault 2 '^GUEST EXCEPTION vector=14 #PF rip=0x[0-9a-f]+ err=0x[0-9a-f]+ cs=0x2b .*cr2=0x100000000$'
run_test libtest-ud t_libtest_fail ud 2 '^GUEST EXCEPTION vector=6 #UD rip=0x[0-9a-f]+ err=0x0 cs=0x2b '
run_test net-bench-nonic t_bench_nonic
run_test kbug-warning t_kbug warning 5 fail-on --fail-on default
run_test kbug-warning-finish t_kbug warning 5 fail-on --fail-on default --fail-on-finish
run_test kbug-warning-own t_kbug warning 5 fail-on --fail-on 'PID: 1 at'
run_test kbug-warning-off t_kbug warning 0 command
run_test kbug-warning-other t_kbug warning 0 command --fail-on 'KASAN:'
run_test kbug-hostile t_kbug hostile 5 fail-on --fail-on default
run_test kbug-panic-pvpanic t_kbug panic 2 panic --fail-on default
run_test kbug-none t_kbug none 0 command --fail-on default
# The benchmarks one at a time: the hosts have 2 cores and a spinning vCPU takes one.
run_test_serial net-bench-tx-64 t_bench tx count 64
run_test_serial net-bench-tx-1514 t_bench tx count 1514
run_test_serial net-bench-tx-no-event-idx t_bench tx count 64 "event_idx=0"
run_test_serial net-bench-tx-trapped t_bench tx count 64 "" ",ioeventfd=off"
run_test_serial net-bench-rr-64 t_bench rr echo 64
run_test_serial net-bench-rr-1514 t_bench rr echo 1514
# The guest's TSC stamps in the frame, read by lkvm's -n trace=on (every stage timed); the
# stamps without trace=on are bytes, and trace=on without stamps times nothing.
run_test_serial net-bench-rr-64-trace t_bench rr echo 64 "trace=1" ",trace=on"
run_test_serial net-bench-rr-64-stamps t_bench rr echo 64 "trace=1"
run_test_serial net-bench-rr-64-trace-nostamps t_bench rr echo 64 "" ",trace=on"
run_test_serial net-bench-rx-64 t_bench rx blast 64
# Both data paths by name (the default is batch=off).
run_test_serial net-bench-tx-64-batch t_bench tx count 64 "" ",batch=on"
run_test_serial net-bench-rx-64-batch t_bench rx blast 64 "" ",batch=on"
run_test_serial net-bench-rr-64-batch t_bench rr echo 64 "" ",batch=on"
run_test_serial net-bench-tx-64-nobatch t_bench tx count 64 "" ",batch=off"
run_test_serial net-bench-rx-64-nobatch t_bench rx blast 64 "" ",batch=off"
finish_tests

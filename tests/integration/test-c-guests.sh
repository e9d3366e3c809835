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

t_libtest() {
	need_guest libtest || return
	run_lkvm c-libtest 0 -- run -k "$ELF" --timeout $T -p "libtest.echo=hello libtest.n=0x10" || return
	expect_no_output '^GUEST (FAIL|EXCEPTION)' "a guest failure" || return
	expect_output '^GUEST libtest: start test=all cpl=0 ' "start at CPL0" || return
	expect_output '^GUEST libtest printf: d=-42 u=42 x=beef lx=123456789abcdef s=str c=Z llu=18446744073709551615 OK$' \
		"gprintf's formats" || return
	expect_output '^GUEST libtest cmdline: libtest.echo=hello n=16$' "command-line values" || return
	expect_output '^GUEST libtest pci 00:00\.0 8086:1237 class=060000$' "the host bridge in the PCI scan" || return
	expect_output '^GUEST libtest pci: [0-9]+ functions, pvpanic 1b36:0011 at 00:[0-9a-f]{2}\.0 bar0=0x[0-9a-f]+ mmio=0x03 OK$' \
		"the pvpanic PCI device, its BAR and an MMIO read" || return
	expect_output '^GUEST libtest clock: source=(kvmclock|cpuid15|cpuid16|lapic) tsc_hz=[1-9][0-9]{8,}$' "a TSC rate" || return
	expect_output '^GUEST libtest cpl3: cpl=3 iopl=[03]$' "CPL3" || return
	expect_output '^GUEST libtest cpl3: port 0x505=0x03 mmio=0x03 OK' "port I/O and MMIO from CPL3" || return
	# The CPL3 loop ran all its iterations (the guest checks the sum); its speed is not judged.
	expect_output '^GUEST libtest cpl3 loop: 100000000 iterations, sum=4999999950000000 OK ' \
		"the CPL3 loop's 10^8 iterations" || return
	expect_output '^GUEST libtest: ALL OK$' || return
	expect_output '^GUEST DONE$' "guest_done()"
}

# t_libtest_fail NAME REGEX: a failure path ends the run with status 2 and says why.
t_libtest_fail() {
	local name=$1 re=$2
	need_guest libtest || return
	run_lkvm "c-libtest-$name" 2 -- run -k "$ELF" --timeout $T -p "test=$name" || return
	expect_output "$re" || return
	expect_no_output '^GUEST DONE' "GUEST DONE after a failure" || return
	expect_no_output '^GUEST libtest: ALL OK' "ALL OK after a failure"
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
	run_lkvm c-bench-nonic 2 -- run -k "$ELF" --timeout $T -p "bench=tx" || return
	expect_output '^GUEST FAIL .*net-bench\.c:[0-9]+: no virtio-net device 1af4:1041'
}

skip_unless_kvm
run_test libtest t_libtest
run_test libtest-assert t_libtest_fail assert '^GUEST FAIL tests/guest/libtest\.c:[0-9]+: cpl\(\) == 0$'
run_test libtest-assert-cpl0 t_libtest_fail assert0 '^GUEST FAIL tests/guest/libtest\.c:[0-9]+: cpl\(\) == 3$'
run_test libtest-pagefault t_libtest_fail fault '^GUEST EXCEPTION vector=14 #PF rip=0x[0-9a-f]+ err=0x[0-9a-f]+ cs=0x2b .*cr2=0x100000000$'
run_test libtest-ud t_libtest_fail ud '^GUEST EXCEPTION vector=6 #UD rip=0x[0-9a-f]+ err=0x0 cs=0x2b '
run_test net-bench-nonic t_bench_nonic
# The benchmarks one at a time: the hosts have 2 cores and a spinning vCPU takes one.
run_test_serial net-bench-tx-64 t_bench tx count 64
run_test_serial net-bench-tx-1514 t_bench tx count 1514
run_test_serial net-bench-tx-no-event-idx t_bench tx count 64 "event_idx=0"
run_test_serial net-bench-tx-trapped t_bench tx count 64 "" ",ioeventfd=off"
run_test_serial net-bench-rr-64 t_bench rr echo 64
run_test_serial net-bench-rr-1514 t_bench rr echo 1514
run_test_serial net-bench-rx-64 t_bench rx blast 64
# Both data paths by name (the default is batch=off).
run_test_serial net-bench-tx-64-batch t_bench tx count 64 "" ",batch=on"
run_test_serial net-bench-rx-64-batch t_bench rx blast 64 "" ",batch=on"
run_test_serial net-bench-rr-64-batch t_bench rr echo 64 "" ",batch=on"
run_test_serial net-bench-tx-64-nobatch t_bench tx count 64 "" ",batch=off"
run_test_serial net-bench-rx-64-nobatch t_bench rx blast 64 "" ",batch=off"
finish_tests

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
	local name=$1 test=$2 mode=$3 size=$4 pextra=$5 nextra=$6 tap=lkvmcg0
	tap_up $tap || return
	peer_start "$name" "$mode" "$tap" $((T + 10)) "$size" || return
	run_lkvm "$name" 0 -- run -k "$ELF" --timeout $T --stats=json \
		-n "mode=tap,tapif=$tap,script=none$nextra" -p "bench=$test size=$size secs=$SECS $pextra"
	local st=$?
	peer_stop
	[ $st = 0 ] || return
	expect_no_output '^GUEST (FAIL|EXCEPTION)' "a guest failure" || return
	expect_output '^GUEST DONE$' || return
	[ "$(grep -c '^BENCH ' "$LAST_LOG")" = 1 ] || { fail "not exactly one BENCH line"; return; }
	local b p
	b=$(grep '^BENCH ' "$LAST_LOG")
	p=$(grep '^PEER ' "$PEER_LOG")
	[ -n "$p" ] || { fail "no PEER line from net-peer (log: $PEER_LOG)"; return; }
	echo "$b" >"$LOG_DIR/$name.bench"
	"check_$test" "$b" "$p" "$tap" "$size" || return
	case $nextra in *batch=on*) check_batch "$test" ;; esac
}

# -n batch=on was given: it was not refused (no fallback line), and the queue that carried the
# traffic went through the batch calls. How many frames a call carries is scheduling (the
# emulated host, one CPU for the vCPU and the TX thread, gave one per call): it is printed, not
# asserted; the unit tests (test_virtio_net, test_net) assert batches of many frames.
check_batch() {
	local q=tx0 pk calls
	[ "$1" = rx ] && q=rx0
	expect_no_output 'batch=on unavailable' "a batch fallback" || return
	pk=$(qstat $q packets); calls=$(qstat $q calls)
	[ -n "$pk" ] && [ -n "$calls" ] || { fail "no $q packets/calls in --stats"; return; }
	[ "$calls" -gt 0 ] || { fail "$q: $pk frames and no batch call"; return; }
	echo "$q: $pk frames in $calls batch calls" >&2
}

# Every frame the guest sent reached the host: the peer's count plus its socket's drops equals
# the guest's count minus what the device dropped, and so does the tap's own counter.
check_tx() {
	local b=$1 p=$2 tap=$3 size=$4
	local frames bytes pf pdrops ddrops dpk taprx
	frames=$(kv frames "$b"); bytes=$(kv bytes "$b")
	pf=$(kv frames "$p"); pdrops=$(kv drops "$p")
	ddrops=$(qstat tx0 drops); dpk=$(qstat tx0 packets)
	taprx=$(tap_stat "$tap" rx_packets)
	[ -n "$frames" ] && [ -n "$ddrops" ] && [ -n "$dpk" ] || { fail "unparsable BENCH or --stats line"; return; }
	[ "$frames" -gt 0 ] || { fail "the guest sent no frames"; return; }
	[ "$bytes" = $((frames * size)) ] || { fail "guest bytes $bytes != frames $frames x $size"; return; }
	[ "$dpk" = $((frames - ddrops)) ] || { fail "device sent $dpk frames, guest $frames, device drops $ddrops"; return; }
	[ "$taprx" = "$dpk" ] || { fail "tap received $taprx frames, the device sent $dpk"; return; }
	[ $((pf + pdrops)) = "$dpk" ] || { fail "peer counted $pf (+$pdrops dropped on its socket), the device sent $dpk"; return; }
	[ "$(kv bytes "$p")" = $((pf * size)) ] || fail "peer bytes $(kv bytes "$p") != $pf x $size"
}

# Transactions happened, every echo carried the bytes sent, and both sides agree on the count.
check_rr() {
	local b=$1 p=$2 size=$4
	local n bad lost bytes pf k
	n=$(kv transactions "$b"); bad=$(kv bad "$b"); lost=$(kv lost "$b"); bytes=$(kv bytes "$b")
	pf=$(kv frames "$p")
	[ -n "$n" ] && [ -n "$pf" ] || { fail "unparsable BENCH or PEER line"; return; }
	[ "$n" -gt 0 ] || { fail "no transactions"; return; }
	[ "$bad" = 0 ] || { fail "$bad echoes differ from what was sent"; return; }
	[ "$bytes" = $((n * size)) ] || { fail "echoed bytes $bytes != $n x $size"; return; }
	# Each transaction is one frame out and one back; a lost one went out but may not have come back.
	[ "$pf" = $((n + lost)) ] || { fail "peer echoed $pf frames for $n transactions + $lost lost"; return; }
	[ "$(qstat tx0 packets)" = "$pf" ] || { fail "device sent $(qstat tx0 packets) frames, peer saw $pf"; return; }
	[ "$(qstat rx0 packets)" -ge "$n" ] || fail "device delivered $(qstat rx0 packets) frames < $n echoes"
	for k in lat_median_ns lat_p99_ns; do
		[ "$(kv $k "$b")" -gt 0 ] || { fail "$k is not positive"; return; }
	done
}

# The guest counted frames, no more than the device delivered, no more than the peer sent.
check_rx() {
	local b=$1 p=$2
	local frames sent dpk
	frames=$(kv frames "$b"); sent=$(kv frames "$p"); dpk=$(qstat rx0 packets)
	[ -n "$frames" ] && [ -n "$sent" ] && [ -n "$dpk" ] || { fail "unparsable BENCH, PEER or --stats line"; return; }
	[ "$frames" -gt 0 ] || { fail "the guest received no frames (peer sent $sent)"; return; }
	[ "$frames" -le "$dpk" ] || { fail "guest counted $frames > device delivered $dpk"; return; }
	[ "$dpk" -le "$sent" ] || fail "device delivered $dpk > peer sent $sent"
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

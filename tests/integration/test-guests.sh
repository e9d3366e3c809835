#!/usr/bin/env bash
# Boots every freestanding test guest (build/guests/*.elf, from `make guests`) in lkvm and checks the outcome.
set -u
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=20 # lkvm --timeout for guests that should end by themselves

# The guests check themselves (tests/guest/lib/guest.h): each run's one status is the result.
t_cpl0() {
	need_guest cpl0 || return
	run_guest cpl0 0 -- run -k "$ELF" --timeout $T
}

# A PVM host runs CPL3 with the hardware IOPL at 0: the guest's port I/O then faults and its
# runtime completes it at CPL0 (counted); elsewhere IOPL=3 holds and nothing faults. The guest
# checks whichever this host is.
t_cpl3() {
	local iopl=3
	need_guest cpl3 || return
	is_pvm_host && iopl=0
	run_guest cpl3 0 -- run -k "$ELF" --timeout $T -p "cpl3.iopl=$iopl"
}

t_hlt() {
	need_guest hlt || return
	run_guest hlt 0 -- run -k "$ELF" --timeout $T
}

t_insn() {
	need_guest insn || return
	run_guest insn 0 -- run -k "$ELF" --timeout $T || return
	is_pvm_host || return 0
	# Without lkvm's completions the host cannot run int3: proves they are what makes it pass.
	run_lkvm insn-quirks-none 1 -- run -k "$ELF" --timeout $T --quirks none || return
	expect_output_i 'emulat' "an emulation-failure message" || return
	expect_output_i '\bcc\b|0xcc|\bcc[0-9a-f]' "the instruction bytes (cc)"
}

# stac/clac exist only with SMAP. lkvm passes the CPU's SMAP bit through (PVM hosts cannot hide
# it), so the guest must see SMAP exactly when this CPU has it; only a CPU without SMAP skips.
t_insn_smap() {
	need_guest insn || return
	grep -qw smap /proc/cpuinfo || { skip "this CPU has no SMAP: stac and clac raise #UD in any guest"; return; }
	run_guest insn-smap 0 -- run -k "$ELF" --timeout $T -p insn.smap=1
}

t_panic() {
	need_guest panic || return
	run_lkvm panic 2 -- run -k "$ELF" --timeout $T || return
	expect_output '^GUEST panic: writing pvpanic'
}

# The guest spins for ever: status 124, lkvm's line and --status-file's `ended=timeout` say the
# timeout ended it (the unit test of the record calls the end itself; this one runs run.c's
# timer). It must not fire early (a lower bound on the wall time cannot fail for a slow host; no
# upper bound is asserted).
t_spin() {
	need_guest spin || return
	local sf="$LOG_DIR/spin.status" got
	run_lkvm spin 124 -- run -k "$ELF" --timeout 2 --status-file "$sf" || return
	expect_output '^GUEST spin: spinning' || return
	expect_output '^lkvm: error: timeout: 2 s passed' "lkvm's timeout line" || return
	got=$(head -n 2 "$sf" 2>&1 | tr '\n' ' ')
	[ "$got" = "ended=timeout status=124 " ] ||
		{ fail "--status-file begins '$got', want 'ended=timeout status=124'"; return; }
	local cs=${LAST_SECS/./}
	[ "$((10#$cs))" -ge 200 ] || fail "ended after ${LAST_SECS}s, before the 2s timeout"
}

# The spinning guest never ends by itself and the timeout would give 124: status 0 is --exit-on's.
t_exit_on() {
	need_guest spin || return
	run_lkvm spin-exit-on 0 -- run -k "$ELF" --timeout $T --exit-on "spin: spinning" || return
	expect_output '^GUEST spin: spinning' || return
	expect_output '^lkvm: console printed "spin: spinning"' "lkvm's exit-on line"
}

t_smp() {
	local n=$1
	need_guest smp || return
	run_guest "smp-$n" 0 -- run -k "$ELF" -c "$n" --timeout $T -p "smp.cpus=$n"
}

t_badinsn() {
	need_guest badinsn || return
	if ! is_pvm_host; then
		# VMX/SVM: the CPU runs it (SSE4.2), nothing for lkvm to complete or reject.
		grep -qw sse4_2 /proc/cpuinfo || { skip "this CPU has no SSE4.2 (crc32)"; return; }
		run_guest badinsn 0 -- run -k "$ELF" --timeout $T
		return
	fi
	run_lkvm badinsn 1 -- run -k "$ELF" --timeout $T || return
	expect_output '^GUEST badinsn: executing' || return
	expect_no_output '^GUEST badinsn: survived' || return
	expect_output_i 'emulation' "an emulation-failure message" || return
	expect_output_i 'f2 ?0f ?38 ?f1|0xf2' "the instruction bytes (f2 0f 38 f1)"
}

t_missing_kernel() {
	run_lkvm bad-missing-kernel 1 -- run -k "$LOG_DIR/no-such-kernel.elf" --timeout 5 || return
	one_error_line "cannot read kernel '.*/no-such-kernel\\.elf': No such file or directory"
}

t_garbage_kernel() {
	local f=$LOG_DIR/garbage-kernel.bin
	yes 'this is not a kernel image' | head -c 65536 >"$f"
	run_lkvm bad-garbage-kernel 1 -- run -k "$f" --timeout 5 || return
	one_error_line "kernel '.*/garbage-kernel\\.bin' is neither a bzImage nor an ELF vmlinux"
}

t_truncated_kernel() {
	need_guest cpl0 || return
	local f=$LOG_DIR/truncated-$1.elf off fsz cut why
	read -r off fsz < <(readelf -lW "$ELF" | awk '$1 == "LOAD" { print $2, $5; exit }')
	[ -n "$fsz" ] || { fail "no LOAD segment in $ELF"; return; }
	off=$((off)) fsz=$((fsz))
	case $1 in
	header) # ELF header, then half a program header table
		cut=100 why="ELF program headers at 0x[0-9a-f]+ lie past the end of the file" ;;
	segment) # half of the load segment's file bytes
		cut=$((off + fsz / 2)) why="ELF segment 0 \\(offset .*\\) lies past the end of the file" ;;
	esac
	head -c "$cut" "$ELF" >"$f"
	run_lkvm "bad-truncated-$1" 1 -- run -k "$f" --timeout 5 || return
	one_error_line "$why"
}

skip_unless_kvm
run_test spin t_spin
run_test cpl0 t_cpl0
run_test cpl3 t_cpl3
run_test hlt t_hlt
run_test insn t_insn
run_test insn-stac-clac t_insn_smap
run_test panic t_panic
run_test spin-exit-on t_exit_on
run_test smp-2 t_smp 2
run_test smp-4 t_smp 4
run_test badinsn t_badinsn
run_test bad-missing-kernel t_missing_kernel
run_test bad-garbage-kernel t_garbage_kernel
run_test bad-truncated-header t_truncated_kernel header
run_test bad-truncated-segment t_truncated_kernel segment
finish_tests

#!/usr/bin/env bash
# Boots every freestanding test guest (build/guests/*.elf, from `make guests`) in lkvm and checks the outcome.
set -u
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=20 # lkvm --timeout for guests that should end by themselves

t_cpl0() {
	need_guest cpl0 || return
	run_lkvm cpl0 0 -- run -k "$ELF" --timeout $T || return
	expect_output '^GUEST cpl0-pio: OK' || return
	expect_output '^GUEST cpl0 pvpanic-port=0x03' "pvpanic port read 0x03" || return
	expect_output '^GUEST cpl0 pvpanic-pci-dev=0x8000[0-9a-f][08]00' "pvpanic PCI device on bus 0" || return
	expect_output '^GUEST cpl0 pvpanic-bar0=0x([cde][0-9a-f]|f[0-e])[0-9a-f]{6}' "BAR0 inside the PCI hole" || return
	expect_output '^GUEST cpl0 pvpanic-mmio=0x03' "pvpanic MMIO read 0x03" || return
	expect_output '^GUEST cpl0 unclaimed-mmio 0x[0-9a-f]{8}=0xffffffff' "unclaimed MMIO read all-ones" || return
	expect_output '^GUEST cpl0: done'
}

t_cpl3() {
	need_guest cpl3 || return
	run_lkvm cpl3 0 -- run -k "$ELF" --timeout $T || return
	expect_output '^GUEST cpl3-pio: OK' || return
	# A PVM host runs CPL3 with the hardware IOPL at 0: the guest's port I/O then faults and its
	# runtime completes it at CPL0 (counted); elsewhere IOPL=3 holds and nothing faults.
	if is_pvm_host; then
		expect_output '^GUEST cpl3 cpl=3 iopl=0 io_completed=[1-9][0-9]*$' "cpl=3, port I/O completed" || return
	else
		expect_output '^GUEST cpl3 cpl=3 iopl=3 io_completed=0$' "cpl=3 iopl=3" || return
	fi
	expect_output '^GUEST cpl3 pvpanic-mmio=0x03' "pvpanic MMIO read 0x03 from CPL3" || return
	expect_output '^GUEST cpl3: resetting from CPL3'
}

t_hlt() {
	need_guest hlt || return
	run_lkvm hlt 0 -- run -k "$ELF" --timeout $T || return
	expect_output '^GUEST hlt: woke from HLT count=1$' || return
	expect_output '^GUEST hlt: woke from HLT count=5$' || return
	expect_output '^GUEST hlt: done, timer wakes=5$'
}

t_insn() {
	need_guest insn || return
	run_lkvm insn 0 -- run -k "$ELF" --timeout $T || return
	expect_output '^GUEST insn int3: count=1 eip=0x[0-9a-f]{8} OK' "int3 handled once, continued" || return
	expect_output '^GUEST insn fwait: OK' || return
	expect_output '^GUEST insn: ALL OK' || return
	is_pvm_host || return 0
	# Without lkvm's completions the host cannot run int3: proves they are what makes it pass.
	run_lkvm insn-quirks-none 1 -- run -k "$ELF" --timeout $T --quirks none || return
	expect_no_output '^GUEST insn int3:' "int3 completed despite --quirks none" || return
	expect_output_i 'emulat' "an emulation-failure message" || return
	expect_output_i '\bcc\b|0xcc|\bcc[0-9a-f]' "the instruction bytes (cc)"
}

# stac/clac exist only with SMAP. lkvm passes the CPU's SMAP bit through (PVM hosts cannot hide
# it), so the guest must see SMAP exactly when this CPU has it; only a CPU without SMAP skips.
t_insn_smap() {
	need_guest insn || return
	grep -qw smap /proc/cpuinfo || { skip "this CPU has no SMAP: stac and clac raise #UD in any guest"; return; }
	run_lkvm insn-smap 0 -- run -k "$ELF" --timeout $T || return
	expect_no_output '^GUEST insn smap absent' "the guest seeing no SMAP on a CPU with SMAP" || return
	expect_output '^GUEST insn stac: ac=1 OK' || return
	expect_output '^GUEST insn clac: ac=0 OK' || return
	expect_output '^GUEST insn: ALL OK'
}

t_panic() {
	need_guest panic || return
	run_lkvm panic 2 -- run -k "$ELF" --timeout $T || return
	expect_output '^GUEST panic: writing pvpanic'
}

# The guest spins for ever: status 124 and lkvm's line say the timeout ended it. It must not fire
# early (a lower bound on the wall time cannot fail for a slow host; no upper bound is asserted).
t_spin() {
	need_guest spin || return
	run_lkvm spin 124 -- run -k "$ELF" --timeout 2 || return
	expect_output '^GUEST spin: spinning' || return
	expect_output '^lkvm: error: timeout: 2 s passed' "lkvm's timeout line" || return
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
	local n=$1 i
	need_guest smp || return
	run_lkvm "smp-$n" 0 -- run -k "$ELF" -c "$n" --timeout $T || return
	expect_output "^GUEST smp: MP table cpus=$n\$" || return
	for ((i = 1; i < n; i++)); do
		expect_output "^GUEST smp: AP $i up\$" || return
	done
	expect_output "^GUEST smp: SMP OK cpus=$n\$"
}

t_badinsn() {
	need_guest badinsn || return
	if ! is_pvm_host; then
		# VMX/SVM: the CPU runs it (SSE4.2), nothing for lkvm to complete or reject.
		grep -qw sse4_2 /proc/cpuinfo || { skip "this CPU has no SSE4.2 (crc32)"; return; }
		run_lkvm badinsn 0 -- run -k "$ELF" --timeout $T || return
		expect_output '^GUEST badinsn: survived' "the instruction run by the CPU"
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

#!/usr/bin/env bash
# The machine lkvm builds, checked from inside (the machine guest, tests/guest/machine.c): CPUID, RAM above the PCI hole, the device tree of a bzImage guest, the device limits, a triple fault, and pauses of a C guest and of Linux (kvm-clock, KVMCLOCK_CTRL, parked vCPUs).
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=machine
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=60                                    # lkvm --timeout of the C guests
LINUX_T=${LINUX_TIMEOUT:-600}           # a Linux boot: about a minute idle (its kernel code is emulated on PVM), over 300 s at load 7
# Scratch (disk images, pids, control sockets) in /tmp: the checkout may be a 9p share (the
# emulated host), where no socket can be made.
WORK=$(mktemp -d /tmp/lkvm-machine-test.XXXXXX)
# shellcheck disable=SC2034 # read by lib.sh
PIDS_FILE=$WORK/pids                    # start_vm (lib.sh) records what it started, kills at exit
# shellcheck disable=SC2016 # expanded when the script ends
at_exit 'rm -rf "$WORK"'
export LKVM_RUNTIME_DIR=$WORK/run       # the paused VMs' sockets, away from anyone else's
mkdir -m 700 "$LKVM_RUNTIME_DIR"

# kvm_has cap N | cpuid LEAF REG BIT | tsc-offset: 1 when this machine's KVM reports it
# (KVM_CHECK_EXTENSION on /dev/kvm; KVM_GET_SUPPORTED_CPUID, REG one of a b c d; a vCPU's
# KVM_VCPU_TSC_OFFSET attribute), else 0. Asked of KVM, not of lkvm.
kvm_has() {
	"$PY" - "$@" <<'EOF'
import fcntl, os, struct, sys
KVM_CHECK_EXTENSION, KVM_GET_SUPPORTED_CPUID, NENT = 0xAE03, 0xC008AE05, 256
KVM_CREATE_VM, KVM_CREATE_VCPU, KVM_HAS_DEVICE_ATTR = 0xAE01, 0xAE41, 0x4018AEE3
fd = os.open('/dev/kvm', os.O_RDWR)
if sys.argv[1] == 'cap':
    print(int(fcntl.ioctl(fd, KVM_CHECK_EXTENSION, int(sys.argv[2])) > 0))
    sys.exit(0)
if sys.argv[1] == 'tsc-offset':  # group KVM_VCPU_TSC_CTRL (0), attribute KVM_VCPU_TSC_OFFSET (0)
    vcpu = fcntl.ioctl(fcntl.ioctl(fd, KVM_CREATE_VM, 0), KVM_CREATE_VCPU, 0)
    try:
        fcntl.ioctl(vcpu, KVM_HAS_DEVICE_ATTR, struct.pack('<IIQQ', 0, 0, 0, 0))
        print(1)
    except OSError:
        print(0)
    sys.exit(0)
leaf, reg, bit = int(sys.argv[2], 0), 'abcd'.index(sys.argv[3]), int(sys.argv[4])
buf = bytearray(struct.pack('<II', NENT, 0) + bytes(40 * NENT))  # struct kvm_cpuid2 + entries
fcntl.ioctl(fd, KVM_GET_SUPPORTED_CPUID, buf)
for i in range(struct.unpack_from('<I', buf)[0]):
    e = struct.unpack_from('<7I', buf, 8 + 40 * i)  # function, index, flags, eax, ebx, ecx, edx
    if e[0] == leaf:
        print((e[3 + reg] >> bit) & 1)
        sys.exit(0)
print(0)
EOF
}

KVM_CAP_TSC_DEADLINE_TIMER=72
EOL=$'\r?$' # a line's end, with the \r a terminal's ONLCR adds (a pty's output) or without

# A run of the machine guest that passes: it checks what its want.* words say (and what it can
# see for itself) and reports status 0 through the exit port (run_guest, tests/guest/lib/guest.h).
# machine_ok LOG KERNEL-FILE [RUN ARGS...] -p "check=... want...."
machine_ok() {
	local log=$1 kernel=$2
	shift 2
	run_guest "$log" 0 -- run -k "$GUEST_DIR/$kernel" --timeout $T "$@"
}

# ---- CPUID ----

# want_cpuid QUIRKS CPUS: the want.* words for the cpuid check of a run with --quirks QUIRKS on
# CPUS vCPUs. TSC-deadline where KVM has the timer. PV send-IPI and the invariant TSC as KVM offers
# them, but both hidden with the PVM quirks (auto: on a PVM host): the send-IPI hypercall never
# returns there, and the guest reads the host's TSC natively, so a pause cannot stop it; the
# invariant TSC also where KVM cannot move a vCPU's TSC offset.
want_cpuid() {
	local dl ipi=0 inv=0
	dl=$(kvm_has cap $KVM_CAP_TSC_DEADLINE_TIMER) || return
	if [ "$1" = none ] || { [ "$1" = auto ] && ! is_pvm_host; }; then
		ipi=$(kvm_has cpuid 0x40000001 a 11) || return
		[ "$(kvm_has tsc-offset)" = 0 ] || inv=$(kvm_has cpuid 0x80000007 d 8) || return
	fi
	echo "want.cpus=$2 want.tsc_deadline=$dl want.pv_send_ipi=$ipi want.invariant_tsc=$inv"
}

# The bits lkvm sets, as this host's KVM allows (want_cpuid), on 2 vCPUs; the hypervisor bit and
# KVM's leaves; and the TSC-deadline timer armed and fired where the bit is set.
t_cpuid() {
	need_guest machine && need_python || return
	local want
	want=$(want_cpuid auto 2) || { fail "cannot ask /dev/kvm"; return; }
	machine_ok machine-cpuid machine.elf -c 2 -p "check=cpuid $want"
}

# --quirks pvm hides the PV send-IPI KVM offers (CPUID 0x40000001 EAX bit 11) and the invariant TSC;
# --quirks none shows them.
t_cpuid_quirks() {
	need_guest machine && need_python || return
	[ "$(kvm_has cpuid 0x40000001 a 11)" = 1 ] ||
		{ skip "this KVM does not offer PV send-IPI (CPUID 0x40000001 EAX bit 11): nothing to hide"; return; }
	local q
	for q in none pvm; do
		machine_ok "machine-cpuid-$q" machine.elf --quirks $q -p "check=cpuid $(want_cpuid $q 1)" || return
	done
}

# ---- RAM above the PCI hole ----

# t_highmem MEM MIB: the memory map has RAM up to 3 GiB and the rest from 4 GiB; patterns written
# below the hole and above 4 GiB hold, and none does past the end of RAM.
t_highmem() {
	need_guest machine || return
	machine_ok "machine-highmem-$1" machine.elf -m "$1" -p "check=highmem want.ram_mib=$2"
}

# ---- the device tree of a bzImage guest ----

# The same guest as a bzImage: setup_data SETUP_DTB is a valid FDT whose /chosen bootargs is its
# command line and whose cpus and memory (around the hole) match; its e820 (zero page) too.
t_dtb() {
	need_guest machine || return
	need_built "$GUEST_DIR/machine.bzImage" "make guests" || return
	machine_ok machine-dtb machine.bzImage -m 5000 -c 2 -p "check=dtb,highmem want.cpus=2 want.ram_mib=5000"
}

# ---- the device limits: 4 NICs, 4 disks, 9 virtio-mmio devices ----

disks() { # disks N: N "-d IMAGE" arguments on fresh 1 MiB images
	local i
	for ((i = 1; i <= $1; i++)); do
		truncate -s 1M "$WORK/disk$i-$BASHPID.img" && printf -- '-d %s ' "$WORK/disk$i-$BASHPID.img"
	done
}

nics() { # nics N: N "-n" arguments, taps lkvm makes (in the test's namespace)
	local i
	for ((i = 1; i <= $1; i++)); do printf -- '-n mode=tap,script=none '; done
}

# Every device at its limit on PCI: the guest finds exactly 4 NICs, 4 disks, the console and rng.
devices_pci() {
	# shellcheck disable=SC2046 # the helpers' words are arguments
	machine_ok machine-devices-pci machine.elf $(nics 4) $(disks 4) --console virtio --rng \
		-p "check=devices want.pci.net=4 want.pci.blk=4 want.pci.console=1 want.pci.rng=1"
}

# Nine virtio-mmio devices, found at the command line's addresses and in the bzImage's device tree.
devices_mmio() {
	local want="want.cpus=1 want.ram_mib=256 want.mmio.net=4 want.mmio.blk=4 want.mmio.console=1 want.virtio_mmio=9"
	# shellcheck disable=SC2046
	machine_ok machine-devices-mmio machine.bzImage $(nics 4) $(disks 4) --console virtio \
		--virtio-transport mmio -p "check=dtb,devices $want"
}

t_devices() {
	skip_unless_net || return
	need_guest machine || return
	in_netns "devices_$1"
}

# limit LOG WHY-REGEX ARGS...: one more than a limit is one line "lkvm: error: ..." and exit 1.
limit() {
	local log=$1 why=$2
	shift 2
	run_lkvm "$log" 1 -- run -k "$GUEST_DIR/machine.elf" --timeout $T "$@" || return
	one_error_line "$why"
}

limit_mmio() {
	# shellcheck disable=SC2046
	limit machine-limit-mmio '10 virtio-mmio devices asked for: at most 9 \(each needs one of the free ISA IRQs\)' \
		$(nics 4) $(disks 4) --console virtio --rng --virtio-transport mmio
}

t_limits() {
	need_guest machine || return
	# shellcheck disable=SC2046
	limit machine-limit-nics '-n: at most 4 network devices' $(nics 5) || return
	# shellcheck disable=SC2046
	limit machine-limit-disks '-d: at most 4 disks' $(disks 5) || return
	skip_unless_net "(the NICs and disks limits passed)" || return
	in_netns limit_mmio
}

# ---- triple fault ----

# An empty IDT and ud2: a triple fault, which the README counts as a reboot (exit 0).
t_triple() {
	need_guest machine || return
	run_lkvm machine-triple 0 -- run -k "$ELF" --timeout $T -p check=triple || return
	expect_output '^GUEST machine triple: empty IDT, then ud2$' || return
	expect_output "^lkvm: guest reset \\(triple fault on vCPU 0\\)$EOL" "lkvm's triple-fault line" || return
	expect_no_output '^GUEST (DONE|FAIL|EXCEPTION)' "another way out than the triple fault"
}

# ---- pauses ----

# How long a pause lasts: it is absence that is checked, so there is no event to wait for. Linux's
# is longer: it is measured from where the host saw a console line, which may be late (below).
PAUSE_S=4
LINUX_PAUSE_S=8

# now_ms: wall-clock milliseconds (bash's own clock).
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }

# pause_for NAME SECS: pause NAME, check nothing moves for SECS (vCPU exits), resume. Sets PAUSED_MS
# (from pause asked to resume done) and EXITS (the count while paused).
pause_for() {
	local n=$1 secs=$2 e1 e2 t0
	t0=$(now_ms)
	ctl "$n-pause" pause "$n"
	expect_status 0 || return
	e1=$(stat_val "$n" "d['vcpu_exits']['total']")
	sleep "$secs"
	e2=$(stat_val "$n" "d['vcpu_exits']['total']")
	[ -n "$e1" ] && [ -n "$e2" ] || { fail "lkvm stat $n gave no vCPU exit count while paused"; return; }
	[ "$e1" = "$e2" ] || { fail "vCPU exits moved while paused: $e1 -> $e2 (a vCPU was not parked)"; return; }
	ctl "$n-resume" resume "$n"
	expect_status 0 || return
	PAUSED_MS=$(($(now_ms) - t0))
	EXITS=$e1
}

# The C guest spins on kvm-clock with a port exit every round: while paused no exit happens; after
# resume it sees PVCLOCK_GUEST_STOPPED (lkvm's KVM_KVMCLOCK_CTRL, what spares Linux its soft-lockup
# reports); its kvm-clock never went back and made no step near the pause's length.
t_pause_c() {
	need_guest machine && need_python || return
	local n=machine-pause
	VM_TIMEOUT=$T start_vm $n machine-pause -k "$ELF" -p check=pause --stats=json
	LAST_LOG=$VM_LOG
	wait_log "$VM_LOG" '^GUEST machine pause: ready$' || return
	pause_for $n $PAUSE_S || { kill -KILL "$VM_PID"; return; }
	LAST_LOG=$VM_LOG
	if ! wait_log "$VM_LOG" '^GUEST machine pause: PVCLOCK_GUEST_STOPPED seen' 30; then
		local e
		e=$(stat_val $n "d['vcpu_exits']['total']")
		kill -KILL "$VM_PID"
		if [ "${e:-0}" -gt "$EXITS" ]; then
			fail "the guest ran on after resume ($EXITS -> $e exits) but never saw PVCLOCK_GUEST_STOPPED (no KVM_KVMCLOCK_CTRL at the pause?)"
		else
			fail "the guest never ran again after resume (vCPU exits $EXITS -> ${e:-?})"
		fi
		return
	fi
	wait_exit "$VM_PID" 30 || return
	LAST_STATUS=$EXIT_STATUS
	expect_status 0 || { why_guest_failed; return; }
	expect_output '^GUEST DONE$' || return
	local step total
	step=$(sed -n 's/^GUEST machine pause: PVCLOCK_GUEST_STOPPED seen after [0-9]* rounds, max_step_us=\([0-9]*\)$/\1/p' "$VM_LOG")
	total=$(grep '^{"vcpu_exits"' "$VM_LOG" | tail -n 1 | "$PY" -c "import json,sys; print(json.load(sys.stdin)['vcpu_exits']['total'])")
	[ -n "$step" ] && [ -n "$total" ] || { fail "no max_step_us line or --stats line"; return; }
	[ "$total" -gt "$EXITS" ] || { fail "no vCPU exit after resume ($EXITS -> $total): the guest never ran again"; return; }
	# The pause lasted PAUSED_MS of wall time; a kvm-clock that ran over it steps by about that much.
	[ $((step * 2)) -lt $((PAUSED_MS * 1000)) ] ||
		fail "kvm-clock stepped ${step} us between two reads around a pause of ${PAUSED_MS} ms: it ran over the pause"
}

# printk_s REGEX: the printk time (seconds, as "S.US") of the first console line matching REGEX.
printk_s() { sed -n -E "s/^\[ *([0-9]+\.[0-9]+)\] .*($1).*/\1/p" "$VM_LOG" | head -n 1; }

# Linux over a pause, with a 20 s rootdelay in which the host pauses it for LINUX_PAUSE_S:
# - no vCPU exit while paused (nohz=off: the idle guest takes its tick, an exit, every 10 ms);
# - no soft-lockup or clocksource complaint after it (watchdog_thresh=1: a 2 s threshold, well
#   under the pause). This idle guest reported none even with lkvm's KVM_SET_CLOCK and
#   KVMCLOCK_CTRL both left out, so KVMCLOCK_CTRL itself is checked by the C guest above;
# - its clock goes on from where it stood: between "Waiting 20 sec" and the end of the wait (the
#   kernel then cannot mount a root and panics) at least 20 s passed on its clock, and less than
#   the wall time minus half the pause (a clock that ran over the pause ends the wait early by
#   the pause; the host sees the first line late by its polling, which the half pause allows
#   for); printk times never go back.
t_pause_linux() {
	need_kernel vmlinux && need_python || return
	local n=machine-linux-pause d=20 waiting="Waiting 20 sec before mounting root device" w0 w1 at
	VM_TIMEOUT=$((LINUX_T + d + 120)) start_vm $n machine-linux-pause -k "$G/vmlinux" -m 256 --stats=json \
		-p "rootdelay=$d watchdog_thresh=1 nohz=off"
	LAST_LOG=$VM_LOG
	wait_log "$VM_LOG" "$waiting" "$LINUX_T" || return
	w0=$(now_ms)
	at=$(stat -c %s "$VM_LOG")
	pause_for $n $LINUX_PAUSE_S || { kill -KILL "$VM_PID"; return; }
	LAST_LOG=$VM_LOG
	if grep -q 'VFS: ' "$VM_LOG"; then
		kill -KILL "$VM_PID"
		fail "the guest's $d s rootdelay ended before the pause: the host took that long to pause it"
		return
	fi
	wait_log "$VM_LOG" 'VFS: Cannot open root device' $((d + 60)) || return
	w1=$(now_ms)
	wait_exit "$VM_PID" 30 || return
	LAST_STATUS=$EXIT_STATUS
	expect_status 2 || return
	expect_output 'Kernel panic - not syncing: VFS: Unable to mount root fs' "the panic after the rootdelay" || return
	# Only after the pause: while it boots, the kernel (emulated on PVM) rightly reports stretches of
	# more than 2 s without scheduling.
	local after
	# Not the clocksource watchdog's "read-back delay ... marking unstable": that one says the
	# vCPU was held up between two reads of the watchdog clock a few instructions apart (2.7 ms,
	# seen once in a clean clone's make check with every core busy), a loaded host's scheduling,
	# not a clock that ran over the pause (that is the skew message, still caught).
	after=$(tail -c +$((at + 1)) "$VM_LOG" | grep -v 'read-back delay' |
		grep -Em1 'soft lockup|watchdog: BUG|clocksource.*unstable|[Ss]kew is too large|rcu.*stall')
	[ -z "$after" ] || { fail "after the pause: $after"; return; }
	local why
	why=$("$PY" - "$VM_LOG" "$(printk_s "$waiting")" "$(printk_s 'VFS: Cannot open root device')" \
		"$d" "$((w1 - w0))" "$PAUSED_MS" <<'EOF'
import re, sys
log, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
d, wall_ms, paused_ms = map(int, sys.argv[4:])
times = [float(m.group(1)) for m in re.finditer(r'^\[ *(\d+\.\d+)\] ', open(log, errors='replace').read(), re.M)]
back = [(a, b) for a, b in zip(times, times[1:]) if b < a]
if back:
    print("printk time went back from %.6f to %.6f" % back[0])
elif t1 - t0 < d:
    print("the %d s rootdelay took %.3f s on the guest's clock" % (d, t1 - t0))
elif (t1 - t0) * 1000 > wall_ms - paused_ms / 2:
    print("the guest's clock ran over the pause: the %d s rootdelay took %.3f s on its clock in %.3f s of "
          "wall time with %.3f s paused" % (d, t1 - t0, wall_ms / 1000, paused_ms / 1000))
EOF
) || why="cannot read the printk times"
	[ -z "$why" ] || fail "$why"
}

skip_unless_kvm
run_test cpuid t_cpuid
run_test cpuid-quirks t_cpuid_quirks
run_test highmem-4g t_highmem 4G 4096
run_test highmem-5000m t_highmem 5000 5000
run_test dtb-bzimage t_dtb
run_test devices-pci t_devices pci
run_test devices-mmio t_devices mmio
run_test limits t_limits
run_test triple-fault t_triple
run_test_serial pause-c-guest t_pause_c
run_test_serial pause-linux t_pause_linux
finish_tests

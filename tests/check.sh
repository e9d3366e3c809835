#!/usr/bin/env bash
# `make check`: every test: unit tests (normal, ASan+UBSan and ThreadSanitizer builds), fuzz targets, freestanding guests, Linux boots,
# networking, and Linux guest user space (in the emulated SVM host where this machine cannot run it).
# lkvm, its sanitizer and test-hook builds, the unit tests, guests and tools are built first (a
# failure stops here). Then the stages of the table below run, side by side where the machine's
# cores allow (each stage says how many it keeps busy), the guest kernel's build among them (a
# failure skips no test silently: it is counted, and the stages that boot the kernel do not run).
# Each stage's output is kept in build/test-logs/stage-NAME.log and shown whole when it ends; it is
# counted from its scripts' summary lines. At the end: the time table (each stage's wall and CPU
# time, the slowest tests; also build/test-logs/check-times.txt), every skip with its reason, and
# the total.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
mkdir -p build/test-logs
: >build/test-logs/test-times.txt # each test's wall time (tests/integration/lib.sh, run-unit.sh)

jobs=$(nproc)
total_p=0 total_f=0 total_s=0
TIMES=()
RAN=() # the stages that ran, whose logs the list of skips is read from

# The Debian packages the tests use: one that cannot be installed is a failure (what the project
# installs itself is never a reason to skip a test).
for group in test guest bench deb; do
    scripts/deps.sh "$group" || { echo "check: scripts/deps.sh $group failed"; total_f=$((total_f + 1)); }
done

# Only building here: the unit tests run in their stages below.
echo "== build"
if ! { make -s -j"$jobs" lkvm unit-build tools guests build/testhooks/lkvm &&
       make -s -j"$jobs" ASAN=1 build/asan/lkvm unit-build &&
       make -s -j"$jobs" TSAN=1 build/tsan/lkvm unit-build; } > build/test-logs/build.log 2>&1; then
    cat build/test-logs/build.log
    echo "check: build failed (log: build/test-logs/build.log)"
    echo "check: $total_p passed, $((total_f + 1)) failed, $total_s skipped"
    exit 1
fi

# The stages that need /dev/kvm run through scripts/kvm-host.sh: on this machine's KVM when it has
# one, otherwise in the emulated SVM host (one emulated-host boot per stage); inside, only the
# tests run. The unit tests that need it too (LKVM_UNIT_KVM_HOST=1: tests/run-unit.sh).
kind=$(scripts/kvm-host.sh --print-kind)
echo "check: KVM stages run on: $kind"
export LKVM_UNIT_KVM_HOST=1
# Where guest user space runs: natively on VMX/SVM; on a PVM host (its guests cannot make system
# calls) or without /dev/kvm, in the emulated SVM host.
us_host=
[ "$kind" = native ] || us_host=--emulated

# --- the stage table -----------------------------------------------------------------------------
# stage NAME COST NEEDS SUMMARIES COMMAND: COMMAND (a bash script) is counted from the summary lines
# "PREFIX: N passed, N failed, N skipped" of the scripts it runs, one for each PREFIX of the
# comma-separated SUMMARIES, read at the start of a line ("-": from its exit status alone). A
# missing one (a script that crashed or was cut short) is a failure; so is a non-zero exit when
# none of them reported a failed test.
# COST: the cores the stage keeps busy, which decides what may run beside it: 1 (one process at a
# time, or one emulated host: QEMU's TCG runs its one L1 CPU on one core), 2 (tests two at a time
# on this machine's KVM, a parallel build: the whole machine), "alone" (nothing beside it: the
# benchmark's rows are only meaningful on an idle host).
# NEEDS: "kernel" for the stages that boot the guest kernel (they start once it is built, and do not
# run when its build failed), else "-".
# Stages start in table order as cores free up: the longest ones first, so that the short ones
# fill in beside them.
S_NAME=() S_COST=() S_NEEDS=() S_WANT=() S_CMD=()
stage() {
    S_NAME+=("$1") S_COST+=("$2") S_NEEDS+=("$3") S_WANT+=("$4") S_CMD+=("$5")
}
# kvm: the cost of a stage that runs its tests two at a time on KVM: the whole machine natively,
# one core when every stage is an emulated host.
kvm=2
[ "$kind" = emulated-svm ] && kvm=1
# us: the same for a stage where guest user space runs (the emulated host, but for a VMX/SVM host).
us=1
[ "$kind" = native ] && us=2

# The guest kernel (a failed build is a failure, and no stage boots a kernel left by an earlier
# build: scripts/build-guest.sh removes it first).
stage guest-kernel 2 - - 'scripts/build-guest.sh'
# The stages that take one core, longest first (on a PVM host the emulated ones side by side with
# the short native ones; in the emulated host, every KVM stage is one).
# lkvm run -- CMD on the host's files, with lkvm's guest init and exit port (where guest user
# space runs), and a PVM host's refusal of it (natively: only this machine's KVM can be kvm_pvm).
stage run $us kernel run "scripts/kvm-host.sh $us_host --timeout 3600 -- tests/integration/test-run.sh"
stage run-pvm 1 kernel run-pvm 'RUN_TESTS=pvm-refusal SUMMARY_PREFIX=run-pvm scripts/kvm-host.sh --timeout 300 -- tests/integration/test-run.sh'
# libFuzzer targets (tests/fuzz/), 12 s each from their seed corpora (15 targets: the stage is on the critical path). A failed build fails the
# stage: nothing fuzzes the binaries an earlier build left.
stage fuzz 1 - fuzz 'if ! make -s fuzz-build > build/test-logs/fuzz-build.log 2>&1; then
        cat build/test-logs/fuzz-build.log
        echo "fuzz: the fuzz targets did not build (log: build/test-logs/fuzz-build.log)"
        echo "fuzz: 0 passed, 1 failed, 0 skipped"; exit 1
    fi
    tests/fuzz/run.sh 12 $(make -s fuzz-targets)'
# vhost-net: here (vhost=on's error where there is no /dev/vhost-net), and in the emulated host,
# whose kernel has vhost_net, when this machine has no /dev/vhost-net of its own.
if [ "$kind" != emulated-svm ] && [ ! -c /dev/vhost-net ]; then
    stage vhost-emulated 1 kernel vhost-emulated 'SUMMARY_PREFIX=vhost-emulated scripts/kvm-host.sh --emulated --timeout 1500 -- tests/integration/test-vhost.sh'
fi
# Guest user space: where this machine's guests cannot make system calls (a PVM host) or there is
# no /dev/kvm, in the emulated SVM host (us_host above), the only place here where it runs.
stage userspace $us kernel userspace,blk "scripts/kvm-host.sh $us_host --timeout 1500 -- bash -c 'rc=0; tests/integration/test-userspace.sh || rc=1; BLK_TESTS=userspace tests/integration/test-blk.sh || rc=1; exit \$rc'"
# User-mode networking through passt with guest user space (DHCP, a file fetched, the TCP rate
# against a tap) where that runs.
# run -- sh saved at its prompt and restored: guest user space (test-snap.sh's snap-shell).
stage snap-us $us kernel snap-us "SNAP_TESTS=userspace SUMMARY_PREFIX=snap-us scripts/kvm-host.sh $us_host --timeout 900 -- tests/integration/test-snap.sh"
stage net-user-us $us kernel net-user-us "NET_USER_TESTS=userspace SUMMARY_PREFIX=net-user-us scripts/kvm-host.sh $us_host --timeout 1500 -- tests/integration/test-net-user.sh"
# ThreadSanitizer: the unit tests, then lkvm moving traffic with ioeventfd and with trapped notifies
# (one test at a time).
stage tsan 1 - unit,tsan "bash -c 'rc=0; make -s TSAN=1 unit || rc=1; scripts/kvm-host.sh --timeout 600 -- tests/integration/test-tsan.sh || rc=1; exit \$rc'"
# The machine seen from inside: CPUID, RAM above the PCI hole, the device tree of a bzImage, device
# limits, triple fault, and pauses of a C guest and of Linux (kvm-clock, KVMCLOCK_CTRL, parked
# vCPUs). Mostly one VM at a time: one core.
stage machine 1 kernel machine 'scripts/kvm-host.sh --timeout 1500 -- tests/integration/test-machine.sh'
stage unit-asan 1 - unit 'make -s ASAN=1 unit'
stage unit 1 - unit 'make -s unit'
# Host faults under a running guest (the tap deleted, SIGTERM/SIGINT/SIGKILL, 1000 device resets)
# and a malicious virtio-net driver (mostly one VM at a time).
stage faults 1 - faults,hostile "scripts/kvm-host.sh --timeout 1500 -- bash -c 'rc=0; tests/integration/test-faults.sh || rc=1; tests/integration/test-hostile.sh || rc=1; exit \$rc'"
# The control plane's client side: a non-root user's runtime directory, stop --wait, mute peers
# (they mostly wait).
stage ctl-client 1 - ctl-client 'scripts/kvm-host.sh --timeout 900 -- tests/integration/test-ctl-client.sh'
# The harness itself: lib.sh's accounting, and the emulated host run from a checkout under /tmp.
stage harness 1 - harness 'tests/integration/test-harness.sh'
# The tree is as clang-format (.clang-format) writes it (`make format` fixes a file this fails on),
# and no function outside tests/ is over 60 lines (scripts/funclen.awk).
stage format 1 - format 'tests/integration/test-format.sh'
# make install into a temporary DESTDIR (as nobody when root), the installed lkvm, its man pages
# (rendered with no warning, each page's options those of --help) and bash completion, make
# uninstall (seconds).
stage install 1 - install 'tests/integration/test-install.sh'
# The Debian package: dpkg-buildpackage -b (one core, the unit tests inside: about 3 minutes),
# lintian, dpkg -i and the installed lkvm.
stage deb 1 - deb 'tests/integration/test-deb.sh'
# The stages that run two tests at a time on this machine's KVM, longest first.
kernel_net="scripts/kvm-host.sh --timeout 1500 -- bash -c 'rc=0; tests/integration/test-net.sh || rc=1; tests/integration/test-virtio-guest.sh || rc=1; exit \$rc'"
stage net $kvm kernel net,virtio-guest "$kernel_net"
stage linux $kvm kernel linux 'scripts/kvm-host.sh --timeout 1500 -- tests/integration/test-linux.sh'
# User-mode networking through passt: the kernel-mode tests where the kernel runs, as a user who
# is not root (netconsole; guard 1500 s: its boots may take 600 s each on a loaded host).
stage net-user $kvm kernel net-user 'NET_USER_TESTS=kernel scripts/kvm-host.sh --timeout 1500 -- tests/integration/test-net-user.sh'
stage blk $kvm kernel blk 'scripts/kvm-host.sh --timeout 1500 -- tests/integration/test-blk.sh'
stage c-guests $kvm - c-guests 'scripts/kvm-host.sh --timeout 900 -- tests/integration/test-c-guests.sh'
stage ctl $kvm - ctl 'scripts/kvm-host.sh --timeout 900 -- tests/integration/test-ctl.sh'
# Debian's gdb against lkvm run --gdb on a C guest: breakpoints, steps, the exit; the refusals; and
# one session on the Linux guest (one boot: why it waits for the kernel's build).
stage gdb $kvm kernel gdb 'scripts/kvm-host.sh --timeout 1500 -- tests/integration/test-gdb.sh'
# lkvm snapshot and run --restore: a counting guest restored twice at once, the Linux guest (one
# boot: why it waits for the kernel's build), a NIC mid-traffic, bad files.
stage snap $kvm kernel snap 'SNAP_TESTS=kernel scripts/kvm-host.sh --timeout 1500 -- tests/integration/test-snap.sh'
stage sandbox $kvm - sandbox 'scripts/kvm-host.sh --timeout 600 -- tests/integration/test-sandbox.sh'
# The console as a user meets it: typed input, Ctrl-a, keys while paused, the terminal restored.
stage console $kvm - console 'scripts/kvm-host.sh --timeout 1500 -- tests/integration/test-console.sh'
stage guests $kvm - guests 'scripts/kvm-host.sh --timeout 600 -- tests/integration/test-guests.sh'
# A malicious virtio-9p driver: escapes from the shares, fid exhaustion, a read-only share, bad chains.
stage 9p $kvm - 9p 'scripts/kvm-host.sh --timeout 600 -- tests/integration/test-9p.sh'
stage vhost $kvm kernel vhost 'scripts/kvm-host.sh --timeout 1500 -- tests/integration/test-vhost.sh'
# The benchmark last and alone: its floors and rows mean something only on an otherwise idle host.
stage bench alone - bench 'scripts/kvm-host.sh --timeout 900 -- tests/integration/test-bench.sh'

# --- running the table ---------------------------------------------------------------------------

# run_one I: stage I's command, its output in its log; then its wall and CPU time (the CPU of every
# process it waited for: QEMU's, lkvm's vCPUs emulated by a PVM host's kernel) and exit status.
run_one() {
    local i=$1 log=build/test-logs/stage-${S_NAME[$1]}.log t0=${EPOCHREALTIME/[.,]/} rc cpu
    bash -c "${S_CMD[$i]}" >"$log" 2>&1 </dev/null
    rc=$?
    # times, not in a pipe or $(...): a forked shell's children's times start again at zero.
    times >"build/test-logs/stage-${S_NAME[$i]}.times"
    cpu=$(tail -n 1 "build/test-logs/stage-${S_NAME[$i]}.times" |
        awk '{ for (i = 1; i <= 2; i++) { split($i, a, /m|s/); t += a[1] * 60 + a[2] } } END { printf "%.0f", t }')
    echo "$rc $(((${EPOCHREALTIME/[.,]/} - t0) / 1000000)) $cpu" >"build/test-logs/stage-${S_NAME[$i]}.result"
}

# count I: shows stage I's log and counts it from its summary lines.
count() {
    local i=$1 name=${S_NAME[$1]} want=${S_WANT[$1]} log=build/test-logs/stage-${S_NAME[$1]}.log
    local rc wall cpu prefix line p f s sp=0 sf=0 ss=0
    read -r rc wall cpu <"build/test-logs/stage-$name.result"
    echo "== $name (${wall}s wall, ${cpu}s CPU, exit $rc)"
    cat "$log"
    TIMES+=("$name ${wall}s/${cpu}cpu")
    RAN+=("$name")
    if [ "$want" = - ]; then
        [ "$rc" -eq 0 ] || { echo "$name: failed (exit $rc; log: $log)"; sf=1; }
    fi
    for prefix in ${want//,/ }; do
        [ "$prefix" = - ] && continue
        line=$(grep -E "^$prefix: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped" "$log" | tail -n 1)
        if [ -z "$line" ]; then
            echo "$name: no '$prefix: N passed, N failed, N skipped' line (exit $rc): it crashed or was cut short"
            sf=$((sf + 1))
            continue
        fi
        read -r p f s < <(sed -E 's/^[^:]*: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped.*/\1 \2 \3/' <<<"$line")
        sp=$((sp + p)) sf=$((sf + f)) ss=$((ss + s))
    done
    if [ "$rc" -ne 0 ] && [ "$sf" -eq 0 ]; then
        echo "$name: exited $rc without reporting a failed test"
        sf=1
    fi
    total_p=$((total_p + sp)) total_f=$((total_f + sf)) total_s=$((total_s + ss))
    if [ "$name" = guest-kernel ] && [ "$sf" -ne 0 ]; then
        kernel_ok=0
        echo "check: guest kernel build failed: the stages that boot it do not run"
    fi
}

# The scheduler: start every stage whose needs are met, in table order, while cores are free;
# when none can start, wait for one to end and count it.
kernel_ok=pending
declare -A PID_OF_STAGE=()
free=$jobs
[ "$free" -ge 2 ] || free=2 # a one-core machine runs the stages one at a time all the same
slots=$free
todo=("${!S_NAME[@]}")
while [ ${#todo[@]} -gt 0 ] || [ ${#PID_OF_STAGE[@]} -gt 0 ]; do
    left=()
    for i in "${todo[@]}"; do
        cost=${S_COST[$i]}
        [ "$cost" = alone ] && cost=$slots
        [ "$cost" -le "$slots" ] || cost=$slots
        if [ "${S_NEEDS[$i]}" = kernel ] && [ "$kernel_ok" = 0 ]; then
            echo "== ${S_NAME[$i]}"
            echo "${S_NAME[$i]}: not run: the guest kernel build failed"
            continue
        fi
        if { [ "${S_NEEDS[$i]}" = kernel ] && [ "$kernel_ok" != 1 ]; } || [ "$cost" -gt "$free" ] ||
            { [ "${S_COST[$i]}" = alone ] && [ ${#PID_OF_STAGE[@]} -gt 0 ]; }; then
            left+=("$i")
            continue
        fi
        # An "alone" stage waits for the ones before it in the table too.
        if [ "${S_COST[$i]}" = alone ] && [ ${#left[@]} -gt 0 ]; then
            left+=("$i")
            continue
        fi
        echo "== ${S_NAME[$i]}: started ($(date +%T))"
        run_one "$i" &
        PID_OF_STAGE[$!]=$i
        free=$((free - cost))
    done
    todo=("${left[@]}")
    [ ${#PID_OF_STAGE[@]} -gt 0 ] || { [ ${#todo[@]} -eq 0 ] && break; }
    if [ ${#PID_OF_STAGE[@]} -eq 0 ]; then
        echo "check: no stage can start (a scheduling bug): ${todo[*]}"
        total_f=$((total_f + 1))
        break
    fi
    wait -n -p done_pid
    i=${PID_OF_STAGE[$done_pid]}
    unset "PID_OF_STAGE[$done_pid]"
    cost=${S_COST[$i]}
    [ "$cost" = alone ] && cost=$slots
    [ "$cost" -le "$slots" ] || cost=$slots
    free=$((free + cost))
    [ "${S_NAME[$i]}" = guest-kernel ] && kernel_ok=1
    count "$i"
done

# The time table: each stage's wall and CPU time, then the slowest tests (their own wall time,
# beside whatever ran with them), also in build/test-logs/check-times.txt.
{
    echo "check: stage wall times: ${TIMES[*]} (total ${SECONDS}s, KVM stages on $kind)"
    echo "check: slowest tests (wall s, stage-summary/test):"
    sort -rn build/test-logs/test-times.txt | head -n 25 | sed 's/^/check:   /'
} | tee build/test-logs/check-times.txt
# Each fuzz target's executions and coverage, again at the end.
sed -n 's/^  \([a-z]*\): \(ok\|FAIL[^:]*\): /check: fuzz \1: \2: /p' build/test-logs/stage-fuzz.log 2>/dev/null
# Every skip, with its reason: the "skip NAME: why" lines of tests/integration/lib.sh and
# tests/run-unit.sh in the logs of the stages that ran.
for name in "${RAN[@]}"; do
    sed -n "s/^skip /check: skipped in $name: /p" "build/test-logs/stage-$name.log"
done
echo "check: $total_p passed, $total_f failed, $total_s skipped"
[ "$total_f" -eq 0 ]

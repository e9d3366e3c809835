#!/usr/bin/env bash
# `make check`: every test: unit tests (normal, ASan+UBSan and ThreadSanitizer builds), fuzz targets, freestanding guests, Linux boots,
# networking, and Linux guest user space (in the emulated SVM host where this machine cannot run it).
# lkvm, its sanitizer and test-hook builds, the unit tests, guests and tools are built first (a failure stops
# here), then the guest kernel (a failure skips no test silently: it is counted, and the stages
# that boot the kernel do not run); each stage is counted from its scripts' summary lines; at the
# end, the stage times, every skip with its reason, and the total.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
mkdir -p build/test-logs
: > build/test-logs/test-times.txt # each integration test's wall time (tests/integration/lib.sh)

jobs=$(nproc)
total_p=0 total_f=0 total_s=0
TIMES=()
RAN=() # the stages that ran, whose logs the list of skips is read from

# The Debian packages the tests use: one that cannot be installed is a failure (what the project
# installs itself is never a reason to skip a test).
for group in test guest bench; do
    scripts/deps.sh "$group" || { echo "check: scripts/deps.sh $group failed"; total_f=$((total_f + 1)); }
done

# stage NAME SUMMARIES COMMAND...: runs COMMAND (output shown and kept in
# build/test-logs/stage-NAME.log) and counts it from the summary lines "PREFIX: N passed, N failed,
# N skipped" of the scripts it runs, one for each PREFIX of the comma-separated SUMMARIES, read at
# the start of a line. A missing one (a script that crashed or was cut short) is a failure; so is a
# non-zero exit when none of them reported a failed test.
stage() {
    local name=$1 want=$2 log=build/test-logs/stage-$1.log
    shift 2
    echo "== $name"
    local t0=$SECONDS
    "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]} prefix line p f s sp=0 sf=0 ss=0
    TIMES+=("$name $((SECONDS - t0))s")
    RAN+=("$name")
    for prefix in ${want//,/ }; do
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
}

# Only building here: the unit tests run in their stages below.
echo "== build"
if ! { make -s -j"$jobs" lkvm unit-build tools guests &&
       make -s -j"$jobs" ASAN=1 build/asan/lkvm unit-build &&
       make -s -j"$jobs" TSAN=1 build/tsan/lkvm unit-build &&
       make -s -j"$jobs" TESTHOOKS=1 build/testhooks/lkvm; } > build/test-logs/build.log 2>&1; then
    cat build/test-logs/build.log
    echo "check: build failed (log: build/test-logs/build.log)"
    echo "check: $total_p passed, $((total_f + 1)) failed, $total_s skipped"
    exit 1
fi
# The guest kernel (before the unit tests: test_boot boots it too). A failed build is a failure,
# and no stage boots a kernel left by an earlier build (scripts/build-guest.sh removes it first).
kernel_ok=1
echo "== guest-kernel"
if ! scripts/build-guest.sh > build/test-logs/build-guest.log 2>&1; then
    cat build/test-logs/build-guest.log
    echo "check: guest kernel build failed (log: build/test-logs/build-guest.log): linux, blk, net and userspace do not run"
    total_f=$((total_f + 1))
    kernel_ok=0
fi
# kernel_stage: a stage that boots the guest kernel; not run without one.
kernel_stage() {
    [ "$kernel_ok" = 1 ] && { stage "$@"; return; }
    echo "== $1"
    echo "$1: not run: the guest kernel build failed"
}
# The stages that need /dev/kvm run through scripts/kvm-host.sh: on this machine's KVM when it has
# one, otherwise in the emulated SVM host (one emulated-host boot per stage); inside, only the
# tests run. The unit tests that need it too (LKVM_UNIT_KVM_HOST=1: tests/run-unit.sh).
kind=$(scripts/kvm-host.sh --print-kind)
echo "check: KVM stages run on: $kind"
export LKVM_UNIT_KVM_HOST=1
# The harness itself: lib.sh's accounting, and the emulated host run from a checkout under /tmp.
stage harness harness tests/integration/test-harness.sh
# The tree is as clang-format (.clang-format) writes it: `make format` fixes a file this fails on.
stage format format tests/integration/test-format.sh
stage unit unit make -s unit
stage unit-asan unit make -s ASAN=1 unit
# ThreadSanitizer: the unit tests, then lkvm moving traffic with ioeventfd and with trapped notifies.
stage tsan unit,tsan bash -c 'rc=0; make -s TSAN=1 unit || rc=1; scripts/kvm-host.sh --timeout 600 -- tests/integration/test-tsan.sh || rc=1; exit $rc'
# libFuzzer targets (tests/fuzz/), about 20 s each from their seed corpora. A failed build fails the
# stage: nothing fuzzes the binaries an earlier build left.
stage fuzz fuzz bash -c 'if ! make -s fuzz-build > build/test-logs/fuzz-build.log 2>&1; then
        cat build/test-logs/fuzz-build.log
        echo "fuzz: the fuzz targets did not build (log: build/test-logs/fuzz-build.log)"
        echo "fuzz: 0 passed, 1 failed, 0 skipped"; exit 1
    fi
    tests/fuzz/run.sh 20 $(make -s fuzz-targets)'
stage guests guests scripts/kvm-host.sh --timeout 600 -- tests/integration/test-guests.sh
stage sandbox sandbox scripts/kvm-host.sh --timeout 600 -- tests/integration/test-sandbox.sh
stage c-guests c-guests scripts/kvm-host.sh --timeout 900 -- tests/integration/test-c-guests.sh
stage bench bench scripts/kvm-host.sh --timeout 900 -- tests/integration/test-bench.sh
stage ctl ctl scripts/kvm-host.sh --timeout 900 -- tests/integration/test-ctl.sh
# The console as a user meets it: typed input, Ctrl-a, keys while paused, the terminal restored.
stage console console scripts/kvm-host.sh --timeout 1500 -- tests/integration/test-console.sh
# The control plane's client side: a non-root user's runtime directory, stop --wait, mute peers.
stage ctl-client ctl-client scripts/kvm-host.sh --timeout 900 -- tests/integration/test-ctl-client.sh
kernel_stage linux linux scripts/kvm-host.sh --timeout 1500 -- tests/integration/test-linux.sh
# The machine seen from inside: CPUID, RAM above the PCI hole, the device tree of a bzImage, device
# limits, triple fault, and pauses of a C guest and of Linux (kvm-clock, KVMCLOCK_CTRL, parked vCPUs).
kernel_stage machine machine scripts/kvm-host.sh --timeout 1500 -- tests/integration/test-machine.sh
# Host faults under a running guest (the tap deleted, SIGTERM/SIGINT/SIGKILL, 1000 device resets)
# and a malicious virtio-net driver.
stage faults faults,hostile scripts/kvm-host.sh --timeout 1500 -- bash -c "rc=0; tests/integration/test-faults.sh || rc=1; tests/integration/test-hostile.sh || rc=1; exit \$rc"
# A malicious virtio-9p driver: escapes from the shares, fid exhaustion, a read-only share, bad chains.
stage 9p 9p scripts/kvm-host.sh --timeout 600 -- tests/integration/test-9p.sh
kernel_stage blk blk scripts/kvm-host.sh --timeout 1500 -- tests/integration/test-blk.sh
# Where guest user space runs: natively on VMX/SVM; on a PVM host (its guests cannot make system
# calls) or without /dev/kvm, in the emulated SVM host.
us_host=
[ "$kind" = native ] || us_host=--emulated
# User-mode networking through passt: the kernel-mode tests where the kernel runs, as a user who
# is not root (netconsole; guard 1500 s: its boots may take 600 s each on a loaded host), then
# those with guest user space (DHCP, a file fetched, the TCP rate against a tap) where that runs.
kernel_stage net-user net-user,net-user-us bash -c "rc=0
    NET_USER_TESTS=kernel scripts/kvm-host.sh --timeout 1500 -- tests/integration/test-net-user.sh || rc=1
    NET_USER_TESTS=userspace SUMMARY_PREFIX=net-user-us scripts/kvm-host.sh $us_host --timeout 1500 -- tests/integration/test-net-user.sh || rc=1
    exit \$rc"
kernel_stage net net,virtio-guest scripts/kvm-host.sh --timeout 1500 -- bash -c "rc=0; tests/integration/test-net.sh || rc=1; tests/integration/test-virtio-guest.sh || rc=1; exit \$rc"
# vhost-net: here (vhost=on's error where there is no /dev/vhost-net), and in the emulated host,
# whose kernel has vhost_net, when this machine has no /dev/vhost-net of its own.
vh_want=vhost vh_emu=:
if [ "$kind" != emulated-svm ] && [ ! -c /dev/vhost-net ]; then
    vh_want=vhost,vhost-emulated
    vh_emu="SUMMARY_PREFIX=vhost-emulated scripts/kvm-host.sh --emulated --timeout 1500 -- tests/integration/test-vhost.sh"
fi
kernel_stage vhost $vh_want bash -c "rc=0
    scripts/kvm-host.sh --timeout 1500 -- tests/integration/test-vhost.sh || rc=1
    $vh_emu || rc=1
    exit \$rc"
# Guest user space: where this machine's guests cannot make system calls (a PVM host) or there is
# no /dev/kvm, in the emulated SVM host (us_host above), the only place here where it runs.
kernel_stage userspace userspace,blk scripts/kvm-host.sh $us_host --timeout 1500 -- bash -c "rc=0; tests/integration/test-userspace.sh || rc=1; BLK_TESTS=userspace tests/integration/test-blk.sh || rc=1; exit \$rc"
# lkvm run -- CMD on the host's files, with lkvm's guest init and exit port (where guest user
# space runs), and a PVM host's refusal of it (natively: only this machine's KVM can be kvm_pvm).
kernel_stage run run,run-pvm bash -c "rc=0
    RUN_TESTS=pvm-refusal SUMMARY_PREFIX=run-pvm scripts/kvm-host.sh --timeout 300 -- tests/integration/test-run.sh || rc=1
    scripts/kvm-host.sh $us_host --timeout 3600 -- tests/integration/test-run.sh || rc=1
    exit \$rc"

# The time table: each stage's wall time, then the slowest tests (their own wall time, beside
# whatever ran with them), also in build/test-logs/check-times.txt.
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

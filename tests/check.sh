#!/usr/bin/env bash
# `make check`: every test: unit tests (normal, ASan+UBSan and ThreadSanitizer builds), fuzz targets, freestanding guests, Linux boots,
# networking, and Linux guest user space (in the emulated SVM host where this machine cannot run it).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
scripts/deps.sh test
scripts/deps.sh guest
scripts/deps.sh bench

jobs=$(nproc)
total_p=0 total_f=0 total_s=0
tally() { # sums every "NAME: N passed, N failed[, N skipped]" summary line of a stage's log
    local p f s
    read -r p f s < <(grep -E '^[A-Za-z0-9_-]+: [0-9]+ passed, [0-9]+ failed' "$1" |
        sed -E 's/^[^:]*: ([0-9]+) passed, ([0-9]+) failed(, ([0-9]+) skipped)?.*/\1 \2 \4/' |
        awk '{p+=$1; f+=$2; s+=($3==""?0:$3); n++} END {if (n) print p, f, s; else print 0, 1, 0}')
    total_p=$((total_p + p)); total_f=$((total_f + f)); total_s=$((total_s + s))
}
mkdir -p build/test-logs
TIMES=()
stage() { # stage NAME COMMAND...: run, show output, count
    local name=$1; shift
    echo "== $name"
    local t0=$SECONDS
    "$@" 2>&1 | tee "build/test-logs/stage-$name.log"
    local rc=${PIPESTATUS[0]}
    TIMES+=("$name $((SECONDS - t0))s")
    tally "build/test-logs/stage-$name.log"
    if [ "$rc" -ne 0 ] && ! grep -qE '[1-9][0-9]* failed' "build/test-logs/stage-$name.log"; then
        echo "$name: exited $rc without reporting a failed test"; total_f=$((total_f + 1))
    fi
}

if ! make -s -j"$jobs" lkvm unit > build/test-logs/build.log 2>&1 ||
   ! make -s -j"$jobs" ASAN=1 build/asan/lkvm >> build/test-logs/build.log 2>&1 ||
   ! make -s -j"$jobs" TSAN=1 build/tsan/lkvm >> build/test-logs/build.log 2>&1; then
    cat build/test-logs/build.log
    echo "check: build failed"
    echo "check: 0 passed, 1 failed, 0 skipped"
    exit 1
fi
# The stages that need /dev/kvm run through scripts/kvm-host.sh: on this machine's KVM when it has
# one, otherwise in the emulated SVM host (one emulated-host boot per stage). Everything is built
# here first; inside, only the tests run.
kind=$(scripts/kvm-host.sh --print-kind)
echo "check: KVM stages run on: $kind"
stage unit make -s unit
stage unit-asan make -s ASAN=1 unit
# ThreadSanitizer: the unit tests, then lkvm moving traffic with ioeventfd and with trapped notifies.
stage tsan bash -c 'make -s TSAN=1 unit; rc=$?; make -s tools guests || exit 1; scripts/kvm-host.sh --timeout 600 -- tests/integration/test-tsan.sh || rc=1; exit $rc'
# libFuzzer targets (tests/fuzz/), about 20 s each from their seed corpora; SKIP without clang.
stage fuzz bash -c 'scripts/deps.sh fuzz >/dev/null 2>&1 || echo "fuzz: cannot install clang"
    if command -v clang >/dev/null && ! make -s fuzz-build > build/test-logs/fuzz-build.log 2>&1; then
        cat build/test-logs/fuzz-build.log; fi
    tests/fuzz/run.sh 20 virtqueue pci net boot opts'
stage guests bash -c 'make -s guests && scripts/kvm-host.sh --timeout 600 -- tests/integration/test-guests.sh'
stage sandbox bash -c 'make -s guests && scripts/kvm-host.sh --timeout 600 -- tests/integration/test-sandbox.sh'
stage c-guests bash -c 'make -s tools guests && scripts/kvm-host.sh --timeout 900 -- tests/integration/test-c-guests.sh'
stage bench bash -c 'make -s tools guests && scripts/kvm-host.sh --timeout 900 -- tests/integration/test-bench.sh'
stage ctl bash -c 'make -s tools guests && scripts/kvm-host.sh --timeout 900 -- tests/integration/test-ctl.sh'
scripts/build-guest.sh > build/test-logs/build-guest.log 2>&1 || { cat build/test-logs/build-guest.log; echo "check: guest kernel build failed"; }
stage linux scripts/kvm-host.sh --timeout 900 -- tests/integration/test-linux.sh
# The machine seen from inside: CPUID, RAM above the PCI hole, the device tree of a bzImage, device
# limits, triple fault, and pauses of a C guest and of Linux (kvm-clock, KVMCLOCK_CTRL, parked vCPUs).
stage machine bash -c 'make -s guests || exit 1; scripts/kvm-host.sh --timeout 900 -- tests/integration/test-machine.sh'
# Host faults under a running guest (the tap deleted, SIGTERM/SIGINT/SIGKILL, 1000 device resets)
# and a malicious virtio-net driver.
stage faults bash -c 'make -s tools guests || exit 1; scripts/kvm-host.sh --timeout 600 -- bash -c "rc=0; tests/integration/test-faults.sh || rc=1; tests/integration/test-hostile.sh || rc=1; exit \$rc"'
stage blk bash -c 'make -s guests || exit 1; scripts/kvm-host.sh --timeout 900 -- tests/integration/test-blk.sh'
stage net bash -c 'make -s tools guests || exit 1; scripts/kvm-host.sh --timeout 900 -- bash -c "rc=0; tests/integration/test-net.sh || rc=1; tests/integration/test-virtio-guest.sh || rc=1; exit \$rc"'
# Guest user space: where this machine's guests cannot make system calls (a PVM host) or there is
# no /dev/kvm, in the emulated SVM host, the only place here where it runs; natively on VMX/SVM.
us_host=
[ "$kind" = native ] || us_host=--emulated
stage userspace scripts/kvm-host.sh $us_host --timeout 900 -- bash -c "rc=0; tests/integration/test-userspace.sh || rc=1; BLK_TESTS=userspace tests/integration/test-blk.sh || rc=1; exit \$rc"

echo "check: stage wall times: ${TIMES[*]} (total ${SECONDS}s, KVM stages on $kind)"
# Each fuzz target's executions and coverage, again at the end.
sed -n 's/^  \([a-z]*\): \(ok\|FAIL[^:]*\): /check: fuzz \1: \2: /p' build/test-logs/stage-fuzz.log 2>/dev/null
echo "check: $total_p passed, $total_f failed, $total_s skipped"
[ "$total_f" -eq 0 ]

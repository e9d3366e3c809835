#!/usr/bin/env bash
# `make check`: every test: unit tests (normal and ASan+UBSan builds), freestanding guests, Linux boots.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
scripts/deps.sh test
scripts/deps.sh guest

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
stage() { # stage NAME COMMAND...: run, show output, count
    local name=$1; shift
    echo "== $name"
    "$@" 2>&1 | tee "build/test-logs/stage-$name.log"
    local rc=${PIPESTATUS[0]}
    tally "build/test-logs/stage-$name.log"
    if [ "$rc" -ne 0 ] && ! grep -qE '[1-9][0-9]* failed' "build/test-logs/stage-$name.log"; then
        echo "$name: exited $rc without reporting a failed test"; total_f=$((total_f + 1))
    fi
}

if ! make -s -j"$jobs" lkvm unit > build/test-logs/build.log 2>&1 ||
   ! make -s -j"$jobs" ASAN=1 build/asan/lkvm >> build/test-logs/build.log 2>&1; then
    cat build/test-logs/build.log
    echo "check: build failed"
    echo "check: 0 passed, 1 failed, 0 skipped"
    exit 1
fi
stage unit make -s unit
stage unit-asan make -s ASAN=1 unit
stage guests bash -c 'make -s guests && tests/integration/test-guests.sh'
stage linux bash -c 'scripts/build-guest.sh && tests/integration/test-linux.sh'
stage net bash -c 'make -s tools guests || exit 1; rc=0; tests/integration/test-net.sh || rc=1; tests/integration/test-virtio-guest.sh || rc=1; exit $rc'

echo "check: $total_p passed, $total_f failed, $total_s skipped"
[ "$total_f" -eq 0 ]

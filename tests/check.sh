#!/usr/bin/env bash
# `make check`: every test: unit tests (normal and ASan+UBSan builds), freestanding guests, Linux boots.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
scripts/deps.sh test
scripts/deps.sh guest

jobs=$(nproc)
total_p=0 total_f=0 total_s=0
tally() { # reads "...: N passed, N failed[, N skipped]" from the last matching line of a log
    local line p f s
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)
    p=$(echo "$line" | sed -n 's/.*\b\([0-9]\+\) passed.*/\1/p'); p=${p:-0}
    f=$(echo "$line" | sed -n 's/.* \([0-9]\+\) failed.*/\1/p'); f=${f:-1}
    s=$(echo "$line" | sed -n 's/.* \([0-9]\+\) skipped.*/\1/p'); s=${s:-0}
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

echo "check: $total_p passed, $total_f failed, $total_s skipped"
[ "$total_f" -eq 0 ]

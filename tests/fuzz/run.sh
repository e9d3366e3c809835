#!/usr/bin/env bash
# Runs each libFuzzer target (build/fuzz/fuzz-TARGET, from `make fuzz-build`) for SECONDS from its
# seed corpus tests/fuzz/corpus/TARGET; new inputs go to build/fuzz/corpus/TARGET, crashes to
# build/fuzz/crashes/TARGET. Prints executions and coverage per target and one summary line. A
# target that is not built, or whose binary is older than its sources, fails.
# Usage: tests/fuzz/run.sh SECONDS TARGET...
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
secs=${1:?usage: run.sh SECONDS TARGET...}; shift
pass=0 fail=0 skip=0
for t in "$@"; do
    bin=build/fuzz/fuzz-$t log=build/fuzz/$t.log
    if [ ! -x "$bin" ]; then
        echo "  $t: FAIL: $bin was not built (make fuzz-build)"; fail=$((fail + 1)); continue
    fi
    # A binary older than its sources is one a failed build left behind: fuzzing it tests old code.
    if ! make -s -q "$bin" 2>/dev/null; then
        echo "  $t: FAIL: $bin is older than its sources (its build failed or did not run: make fuzz-build)"
        fail=$((fail + 1)); continue
    fi
    mkdir -p "build/fuzz/corpus/$t" "build/fuzz/crashes/$t"
    # -timeout: one input running 10 s is a hang; -rss_limit_mb bounds memory leaks per input.
    "$bin" -max_total_time="$secs" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="build/fuzz/crashes/$t/" "build/fuzz/corpus/$t" "tests/fuzz/corpus/$t" \
        >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -n1)
    if [ "$rc" -eq 0 ] && [ -n "$execs" ]; then
        echo "  $t: ok: ${execs} executions in ${secs}s, ${cov:-cov: ?}"; pass=$((pass + 1))
    else
        echo "  $t: FAIL (exit $rc): ${execs:-?} executions, ${cov:-cov: ?}; log $log, inputs in build/fuzz/crashes/$t/"
        grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$log" | head -n 5 | sed 's/^/    /'
        fail=$((fail + 1))
    fi
done
echo "fuzz: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]

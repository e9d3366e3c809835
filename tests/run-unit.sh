#!/usr/bin/env bash
# Runs the Check unit-test executables given as arguments; prints one summary line. A test
# that cannot run here is reported by its executable as "NAME: skipped N: what (why)" and
# counted as skipped, never as passed.
set -u
pass=0 fail=0 skip=0
for t in "$@"; do
    out=$("$t" 2>&1); rc=$?
    echo "$out" | sed "s|^|  $(basename "$t"): |"
    s=$(echo "$out" | sed -n 's/^[A-Za-z0-9_]*: skipped \([0-9]*\): .*/\1/p' | awk '{n+=$1} END {print n+0}')
    skip=$((skip + s))
    # Check's summary: "100%: Checks: N, Failures: F, Errors: E"
    n=$(echo "$out" | sed -n 's/.*Checks: \([0-9]*\), Failures: \([0-9]*\), Errors: \([0-9]*\).*/\1 \2 \3/p' | tail -n1)
    if [ -z "$n" ]; then
        echo "  $(basename "$t"): no Check summary (exit $rc)"; fail=$((fail + 1)); continue
    fi
    read -r c f e <<< "$n"
    pass=$((pass + c - f - e)); fail=$((fail + f + e))
    [ $rc -eq 0 ] || [ $((f + e)) -gt 0 ] || fail=$((fail + 1))
done
echo "unit: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]

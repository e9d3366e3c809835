#!/usr/bin/env bash
# Runs the Check unit-test executables given as arguments; prints one summary line. A test
# that cannot run here is reported by its executable as "NAME: skipped N: what (why)" and
# counted as skipped, never as passed; each such report is printed again as the one skip line
# of the test scripts, "skip NAME: why" (tests/integration/lib.sh), which tests/check.sh lists.
# With LKVM_UNIT_KVM_HOST=1 (tests/check.sh), the executables with tests that need /dev/kvm (their
# source reports "no usable /dev/kvm" skips) run through scripts/kvm-host.sh, where KVM works:
# natively, or in the emulated host like every other KVM stage; their summary is "unit-kvm: ...".
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=${LKVM_UNIT_PREFIX:-unit}
pass=0 fail=0 skip=0
kvm=()
for t in "$@"; do
    if [ "${LKVM_UNIT_KVM_HOST-}" = 1 ] && grep -qF 'no usable /dev/kvm' "$here/tests/unit/$(basename "$t").c" 2>/dev/null; then
        kvm+=("$t")
        continue
    fi
    t0=${EPOCHREALTIME/[.,]/}
    out=$("$t" 2>&1); rc=$?
    # Its wall time, for tests/check.sh's slowest-tests table.
    [ -d "$here/build/test-logs" ] && printf '%s %s/%s\n' \
        "$(awk -v us=$((${EPOCHREALTIME/[.,]/} - t0)) 'BEGIN { printf "%.1f", us / 1e6 }')" \
        "$prefix" "$(basename "$t")" >>"$here/build/test-logs/test-times.txt"
    echo "$out" | sed "s|^|  $(basename "$t"): |"
    s=$(echo "$out" | sed -n 's/^[A-Za-z0-9_]*: skipped \([0-9]*\): .*/\1/p' | awk '{n+=$1} END {print n+0}')
    skip=$((skip + s))
    echo "$out" | sed -n -e 's/^\([A-Za-z0-9_]*\): skipped 1: \([^(]*\) (\(.*\))$/skip \1 \2: \3/p' \
        -e 's/^\([A-Za-z0-9_]*\): skipped \([0-9]*\): \([^(]*\) (\(.*\))$/skip \1 \3 (\2 tests): \4/p'
    # Check's summary: "100%: Checks: N, Failures: F, Errors: E"
    n=$(echo "$out" | sed -n 's/.*Checks: \([0-9]*\), Failures: \([0-9]*\), Errors: \([0-9]*\).*/\1 \2 \3/p' | tail -n1)
    if [ -z "$n" ]; then
        echo "  $(basename "$t"): no Check summary (exit $rc)"; fail=$((fail + 1)); continue
    fi
    read -r c f e <<< "$n"
    pass=$((pass + c - f - e)); fail=$((fail + f + e))
    [ $rc -eq 0 ] || [ $((f + e)) -gt 0 ] || fail=$((fail + 1))
done
if [ ${#kvm[@]} -gt 0 ]; then
    log=$(mktemp)
    "$here/scripts/kvm-host.sh" --timeout 1800 -- env LKVM_UNIT_KVM_HOST= LKVM_UNIT_PREFIX=unit-kvm \
        "$here/tests/run-unit.sh" "${kvm[@]}" 2>&1 | tee "$log"
    n=$(sed -n 's/^unit-kvm: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1 \2 \3/p' "$log" | tail -n1)
    rm -f "$log"
    if [ -z "$n" ]; then
        echo "  unit-kvm: no summary from scripts/kvm-host.sh"; fail=$((fail + 1))
    else
        read -r p f s <<< "$n"
        pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    fi
fi
echo "$prefix: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]

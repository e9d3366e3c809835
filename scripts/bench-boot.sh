#!/usr/bin/env bash
# Boot-time benchmark: N interleaved runs of each case, medians reported side by side.
#   first-insn: lkvm start to the first guest instruction (the tiny panic guest)
#   bzImage / pvh: process start to the kernel's last boot message ("Waiting for root device")
# Also lkvm's own memory (RSS minus resident guest RAM) and the completions made per boot.
# Usage: scripts/bench-boot.sh [N]   (needs `make`, `make guests`, scripts/build-guest.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
n=${1:-10}
lkvm=${LKVM:-./lkvm}
g=build/guest
out=build/bench-boot
mkdir -p "$out"
: > "$out/results.tsv"
last="Waiting for root device"

run_case() { # run_case CASE ITER ARGS...
    local c=$1 i=$2; shift 2
    local log=$out/$c-$i.log t0 t1
    t0=$(date +%s%N)
    "$lkvm" run --debug "$@" </dev/null >"$log" 2>&1 || true
    t1=$(date +%s%N)
    local wall_ms=$(( (t1 - t0) / 1000000 ))
    local first own
    first=$(sed -n 's/.*first guest instruction \(at \)\{0,1\}\([0-9.]*\) ms.*/\2/p' "$log" | tail -n1)
    own=$(sed -n 's/.*lkvm itself \(-\?[0-9]*\) KiB.*/\1/p' "$log" | tail -n1)
    if [ "$c" != first-insn ] && ! grep -q "$last" "$log"; then
        echo "$c run $i did not reach '$last' (log: $log)" >&2
        wall_ms=NA
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$c" "$i" "$wall_ms" "${first:-NA}" "${own:-NA}" >> "$out/results.tsv"
    printf '%-10s run %2d: wall %6s ms, first insn %8s ms, lkvm RSS %6s KiB\n' "$c" "$i" "$wall_ms" "${first:-NA}" "${own:-NA}"
}

for i in $(seq 1 "$n"); do
    run_case first-insn "$i" -k build/guests/panic.elf
    run_case bzImage "$i" -k $g/bzImage -m 256 -p "root=/dev/vda rootwait" --exit-on "$last" --timeout 600
    run_case pvh "$i" -k $g/vmlinux -m 256 -p "root=/dev/vda rootwait" --exit-on "$last" --timeout 600
done

median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) {print "NA"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; print m}'; }
echo
echo "medians of $n runs ($(date -u +%F), $(nproc) cores, host KVM: $([ -e /sys/module/kvm_pvm ] && echo kvm_pvm || echo standard))"
printf '%-12s %14s %16s %16s\n' case wall_ms first_insn_ms lkvm_rss_KiB
for c in first-insn bzImage pvh; do
    w=$(awk -v c=$c '$1==c && $3!="NA" {print $3}' "$out/results.tsv" | median)
    f=$(awk -v c=$c '$1==c && $4!="NA" {print $4}' "$out/results.tsv" | median)
    r=$(awk -v c=$c '$1==c && $5!="NA" {print $5}' "$out/results.tsv" | median)
    printf '%-12s %14s %16s %16s\n' "$c" "$w" "$f" "$r"
done
echo
echo "completions in the last bzImage boot:"
grep -h "instructions completed" "$out/bzImage-$n.log" || echo "(none: quirks off)"

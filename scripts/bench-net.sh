#!/usr/bin/env bash
# virtio-net benchmark: the project's kernel on a tap in a private network namespace, once with
# ioeventfd notifies and once with trapped notifies, both booted side by side, then measured in
# alternation: ping RTT (median, p99) and `ping -f` rate, with exits, kicks and interrupts per packet
# from lkvm's --stats=json snapshots (SIGUSR2) taken around each measurement. Usage: scripts/bench-net.sh [PING_COUNT] [FLOOD_SECONDS] [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
count=${1:-50}
flood=${2:-10}
rounds=${3:-2}
lkvm=${LKVM:-./lkvm}
g=build/guest
out=build/bench-net
mkdir -p "$out"
modes=(ioeventfd trap)
declare -A pid ns
cleanup() {
    for m in "${modes[@]}"; do
        [ -n "${pid[$m]:-}" ] && kill -KILL "${pid[$m]}" 2>/dev/null || true
        [ -n "${ns[$m]:-}" ] && ip netns del "${ns[$m]}" 2>/dev/null || true
    done
}
trap cleanup EXIT

i=0
for m in "${modes[@]}"; do
    i=$((i + 1))
    ns[$m]=lkvm-bench-$m-$$
    ip netns add "${ns[$m]}"
    ip netns exec "${ns[$m]}" ip link set lo up
    extra=""
    [ "$m" = trap ] && extra=",ioeventfd=off"
    ip netns exec "${ns[$m]}" "$lkvm" run -k $g/bzImage -m 256 --stats=json --timeout 3600 \
        -n "mode=tap,tapif=lkvmb$i,host_ip=10.0.$i.1/24,script=none$extra" \
        -p "root=/dev/vda rootwait ip=10.0.$i.15::10.0.$i.1:255.255.255.0:lkvm:eth0:off" \
        </dev/null > "$out/$m.log" 2>&1 &
    pid[$m]=$!
done
for m in "${modes[@]}"; do
    for _ in $(seq 600); do grep -q "Waiting for root device" "$out/$m.log" && break; sleep 1; done
    grep -q "Waiting for root device" "$out/$m.log" || { echo "$m: guest did not boot (log $out/$m.log)"; exit 1; }
done
echo "both guests up; measuring ($rounds rounds, alternating modes)"

: > "$out/rtt.tsv"; : > "$out/flood.tsv"; : > "$out/counters.tsv"
sum_field() { grep -o "\"$1\":[0-9]*" | cut -d: -f2 | awk '{s+=$1} END {print s+0}'; }
# snap MODE: "exits kicks irqs trapped packets" now, from a fresh --stats=json line (SIGUSR2).
snap() {
    local m=$1 before after json
    before=$(grep -c '^{"vcpu_exits"' "$out/$m.log" || true)
    kill -USR2 "${pid[$m]}"
    for _ in $(seq 50); do
        after=$(grep -c '^{"vcpu_exits"' "$out/$m.log" || true)
        [ "$after" -gt "$before" ] && break
        sleep 0.1
    done
    json=$(grep '^{"vcpu_exits"' "$out/$m.log" | tail -n 1)
    echo "$(echo "$json" | grep -o '"vcpu_exits":{"total":[0-9]*' | grep -o '[0-9]*$')" \
        "$(echo "$json" | sum_field kicks)" "$(echo "$json" | sum_field irqs)" \
        "$(echo "$json" | sum_field trapped)" \
        "$(echo "$json" | grep -o '"name":"[rt]x[0-9]*"[^}]*' | sum_field packets)"
}
for r in $(seq "$rounds"); do
    i=0
    for m in "${modes[@]}"; do
        i=$((i + 1))
        read -r e0 k0 q0 t0 p0 < <(snap "$m")
        ip netns exec "${ns[$m]}" ping -c "$count" -i 0.2 -W 2 10.0.$i.15 > "$out/$m-ping-$r.txt" || true
        sed -n 's/.*time=\([0-9.]*\) ms.*/\1/p' "$out/$m-ping-$r.txt" | sed "s/^/$m\t/" >> "$out/rtt.tsv"
        ip netns exec "${ns[$m]}" ping -f -q -w "$flood" 10.0.$i.15 > "$out/$m-flood-$r.txt" 2>&1 || true
        rx=$(sed -n 's/.* \([0-9]*\) received.*/\1/p' "$out/$m-flood-$r.txt")
        tx=$(sed -n 's/^\([0-9]*\) packets transmitted.*/\1/p' "$out/$m-flood-$r.txt")
        printf '%s\t%s\t%s\n' "$m" "${tx:-0}" "${rx:-0}" >> "$out/flood.tsv"
        read -r e1 k1 q1 t1 p1 < <(snap "$m")
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$m" $((e1 - e0)) $((k1 - k0)) $((q1 - q0)) $((t1 - t0)) $((p1 - p0)) >> "$out/counters.tsv"
    done
done
for m in "${modes[@]}"; do kill -TERM "${pid[$m]}"; wait "${pid[$m]}" || true; pid[$m]=""; done

pct() { sort -n | awk -v p="$1" '{a[NR]=$1} END {if (!NR) {print "NA"; exit} i=int((NR-1)*p/100)+1; print a[i]}'; }
echo
echo "virtio-net over tap, $(date -u +%F), $(nproc) cores, host KVM: $([ -e /sys/module/kvm_pvm ] && echo kvm_pvm || echo standard)"
printf '%-10s %10s %10s %14s %12s %12s %12s %12s\n' mode rtt_med_ms rtt_p99_ms flood_rx_per_s exits/pkt kicks/pkt irqs/pkt trapped/pkt
for m in "${modes[@]}"; do
    med=$(awk -v m=$m '$1==m {print $2}' "$out/rtt.tsv" | pct 50)
    p99=$(awk -v m=$m '$1==m {print $2}' "$out/rtt.tsv" | pct 99)
    rate=$(awk -v m=$m -v s="$flood" '$1==m {rx+=$3; n++} END {if (n) printf "%.0f", rx/(n*s); else print "NA"}' "$out/flood.tsv")
    read -r exits kicks irqs trapped pk < <(awk -v m=$m '$1==m {e+=$2; k+=$3; q+=$4; t+=$5; p+=$6} END {print e+0, k+0, q+0, t+0, p+0}' "$out/counters.tsv")
    per() { awk -v a="$1" -v b="$pk" 'BEGIN {if (b > 0) printf "%.3f", a / b; else print "NA"}'; }
    printf '%-10s %10s %10s %14s %12s %12s %12s %12s\n' "$m" "$med" "$p99" "$rate" "$(per "$exits")" "$(per "$kicks")" "$(per "$irqs")" "$(per "$trapped")"
done
echo "(counts per packet over the measurements only; packets = frames through rx + tx queues; logs in $out)"

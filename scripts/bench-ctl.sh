#!/usr/bin/env bash
# Control-plane latency: `lkvm stat` against a running guest (median and p90 of N calls, the whole
# command as a user runs it), and the time from `lkvm stop` to the run's exit (median of M VMs).
# Usage: scripts/bench-ctl.sh [STAT_CALLS (100)] [STOP_RUNS (10)] [GUEST (spin)]
# Needs /dev/kvm (wrap in scripts/kvm-host.sh where there is none) and `make lkvm guests`.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-100}
M=${2:-10}
GUEST=${3:-spin}
LKVM=$here/lkvm
ELF=$here/build/guests/$GUEST.elf
[ -x "$LKVM" ] && [ -f "$ELF" ] || { echo "bench-ctl: run make lkvm guests first" >&2; exit 1; }
LKVM_RUNTIME_DIR=$(mktemp -d /tmp/lkvm-bench-ctl.XXXXXX)
export LKVM_RUNTIME_DIR
pid=
trap '[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$LKVM_RUNTIME_DIR"' EXIT

# percentile P < values (one per line, ns): prints ms with 3 decimals.
percentile() { sort -n | awk -v p="$1" '{ v[NR] = $1 } END { i = int((NR - 1) * p / 100) + 1; printf "%.3f", v[i] / 1e6 }'; }

start() {
	"$LKVM" run -k "$ELF" --name "$1" --timeout 600 </dev/null >"$LKVM_RUNTIME_DIR/$1.log" 2>&1 &
	pid=$!
	until "$LKVM" stat "$1" >/dev/null 2>&1; do
		kill -0 "$pid" 2>/dev/null || { echo "bench-ctl: the VM died: $(cat "$LKVM_RUNTIME_DIR/$1.log")" >&2; exit 1; }
		sleep 0.05
	done
}

start bench-stat
: >"$LKVM_RUNTIME_DIR/stat.ns"
for ((i = 0; i < N; i++)); do
	t0=$(date +%s%N)
	"$LKVM" stat bench-stat >/dev/null
	t1=$(date +%s%N)
	echo $((t1 - t0)) >>"$LKVM_RUNTIME_DIR/stat.ns"
done
"$LKVM" stop bench-stat >/dev/null
wait "$pid" || true
pid=

: >"$LKVM_RUNTIME_DIR/stop.ns"
for ((i = 0; i < M; i++)); do
	start "bench-stop-$i"
	t0=$(date +%s%N)
	"$LKVM" stop --wait 0 "bench-stop-$i" >/dev/null
	st=0
	wait "$pid" || st=$?
	t1=$(date +%s%N)
	pid=
	[ "$st" = 3 ] || { echo "bench-ctl: a stopped run exited $st, not 3" >&2; exit 1; }
	echo $((t1 - t0)) >>"$LKVM_RUNTIME_DIR/stop.ns"
done

kind=$("$here/scripts/kvm-host.sh" --print-kind 2>/dev/null || echo unknown)
echo "bench-ctl: host $kind, guest $GUEST, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "lkvm stat (whole command, $N calls): median $(percentile 50 <"$LKVM_RUNTIME_DIR/stat.ns") ms, p90 $(percentile 90 <"$LKVM_RUNTIME_DIR/stat.ns") ms, max $(percentile 100 <"$LKVM_RUNTIME_DIR/stat.ns") ms"
echo "lkvm stop -> run exited ($M VMs): median $(percentile 50 <"$LKVM_RUNTIME_DIR/stop.ns") ms, p90 $(percentile 90 <"$LKVM_RUNTIME_DIR/stop.ns") ms, max $(percentile 100 <"$LKVM_RUNTIME_DIR/stop.ns") ms"

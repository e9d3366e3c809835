#!/usr/bin/env bash
# Snapshot and restore figures (issue 31): the Linux guest's snapshot write, restore to its first instruction beside a cold boot's, and the memory of many clones of one file.
# usage: scripts/bench-snap.sh [RUNS (default 10)] [CLONES (default 20)]
# Boots build/guest/vmlinux (-m 256 -c 2) to its last boot stage (waiting for a root disk that
# never comes: an idle kernel), snapshots it RUNS times (lkvm snapshot's own timings), then
# alternates RUNS restores and RUNS cold boots of the same machine, each to its first guest
# instruction (lkvm run --debug's start-up profile), and prints medians; then restores CLONES
# VMs from one file at once and reads each one's memory (RSS, PSS, private) once all run.
# Run it on an idle host: the figures are wall times.
set -eu
RUNS=${1:-10}
CLONES=${2:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LKVM=${LKVM:-$ROOT/lkvm}
KERNEL=${KERNEL:-$ROOT/build/guest/vmlinux}
WORK=$(mktemp -d /tmp/lkvm-bench-snap.XXXXXX)
export LKVM_RUNTIME_DIR=$WORK/run
mkdir -m 700 "$LKVM_RUNTIME_DIR"
trap '"$LKVM" stop --all >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
LAST="Waiting for root device /dev/vda"
MACHINE=(-k "$KERNEL" -m 256 -c 2 -p "root=/dev/vda rootwait")

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
first_insn() { sed -n 's/.*first guest instruction at \([0-9.]*\) ms.*/\1/p' "$1"; }
wait_for() { # FILE REGEX SECS
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		grep -q -- "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "bench-snap: no '$2' in $1 after $3 s" >&2
	return 1
}

echo "host: $(scripts/kvm-host.sh --print-kind 2>/dev/null || echo unknown), load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs, $(date -u +%FT%TZ)"
"$LKVM" run "${MACHINE[@]}" --name bench-src >"$WORK/src.log" 2>&1 &
wait_for "$WORK/src.log" "$LAST" 600
for ((i = 0; i < RUNS; i++)); do
	"$LKVM" snapshot bench-src "$WORK/s$i.snap" >>"$WORK/snap.log"
	[ "$i" = 0 ] || rm -f "$WORK/s$i.snap"
done
"$LKVM" stop bench-src >/dev/null
SNAP=$WORK/s0.snap
echo "snapshot file: $(du -k --apparent-size "$SNAP" | cut -f1) KiB ($(du -k "$SNAP" | cut -f1) KiB on disk) for 256 MiB of guest RAM"
echo "snapshot, median of $RUNS: paused in $(sed -n 's/.*paused in \([0-9.]*\) ms.*/\1/p' "$WORK/snap.log" | median) ms, written in $(sed -n 's/.*written in \([0-9.]*\) ms.*/\1/p' "$WORK/snap.log" | median) ms"

# Restores and cold boots alternate, each run for a second (--timeout 1), its first instruction's
# time read from the start-up profile --debug prints at the end.
: >"$WORK/restore.ms"
: >"$WORK/boot.ms"
for ((i = 0; i < RUNS; i++)); do
	"$LKVM" run --restore "$SNAP" --debug --timeout 1 >"$WORK/r.log" 2>&1 || true
	first_insn "$WORK/r.log" >>"$WORK/restore.ms"
	"$LKVM" run "${MACHINE[@]}" --debug --timeout 1 >"$WORK/b.log" 2>&1 || true
	first_insn "$WORK/b.log" >>"$WORK/boot.ms"
done
r=$(median <"$WORK/restore.ms") b=$(median <"$WORK/boot.ms")
echo "to the first guest instruction, median of $RUNS: restore $r ms, cold boot $b ms (restore/boot $(awk -v r="$r" -v b="$b" 'BEGIN { printf "%.2f", r / b }'))"
echo "  restores: $(tr '\n' ' ' <"$WORK/restore.ms")"
echo "  boots:    $(tr '\n' ' ' <"$WORK/boot.ms")"

# CLONES restored from the one file at once, each running on its own (the kernel idle in rootwait).
for ((i = 0; i < CLONES; i++)); do
	"$LKVM" run --restore "$SNAP" --name c$i >"$WORK/c$i.log" 2>&1 &
done
for ((i = 0; i < CLONES; i++)); do
	until "$LKVM" stat c$i >/dev/null 2>&1; do sleep 0.1; done
done
sleep 2 # let each clone's kernel run a while (its timers, its idle loop) before the reading
# The VMs' own pids, from lkvm list (each lkvm has a small clean-up process beside it).
"$LKVM" list | awk 'NR > 1 && $1 ~ /^c[0-9]+$/ { print $2 }' >"$WORK/clones.pid"
python3 - "$WORK/clones.pid" <<'EOF'
import sys
rows = []
for pid in open(sys.argv[1]).read().split():
    try:
        f = dict(l.split(":", 1) for l in open("/proc/%s/smaps_rollup" % pid).read().splitlines()[1:])
    except OSError:
        continue
    kb = lambda k: int(f[k].split()[0])
    rows.append((kb("Rss"), kb("Pss"), kb("Private_Clean") + kb("Private_Dirty")))
if rows:
    n = len(rows)
    med = lambda i: sorted(r[i] for r in rows)[n // 2]
    print("%d clones of one 256 MiB guest: median per clone RSS %d KiB, PSS %d KiB, private %d KiB "
          "(%.1f%% of the guest's RAM)" % (n, med(0), med(1), med(2), med(2) * 100.0 / (256 * 1024)))
EOF
"$LKVM" stop --all >/dev/null 2>&1 || true

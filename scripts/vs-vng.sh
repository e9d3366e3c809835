#!/usr/bin/env bash
# Times `lkvm run -- CMD` against virtme-ng's vng on the same kernel, alternating, and prints medians.
#
# Usage: scripts/vs-vng.sh [-n RUNS] [-k KERNEL] [--vng PATH] [--lkvm PATH] [--before PATH]
#   -n RUNS      boots of each kind per row, alternating lkvm and vng (default 3)
#   -k KERNEL    the kernel both boot (default /boot/vmlinuz-$(uname -r), else the Debian kernel
#                scripts/kvm-host.sh unpacks under build/kvm-host/kernel/boot: the emulated
#                host's own, whose modules are its /lib/modules)
#   --vng PATH   vng to run (default: vng on PATH; none: lkvm's rows only)
#   --lkvm PATH  lkvm to run (default: ./lkvm of this checkout)
#   --before PATH  another lkvm (an older build) measured in the same alternation, its own column
# Both get 1024 MiB, 1 vCPU and the host's / over virtio-9p (vng --force-9p), each at its own
# default msize and mount options. Rows (docs/benchmarks.md):
#   seq      `seq 200000` (1.29 MB) to stdout, timed in the guest (date +%s%N around it); the
#            host's copy of stdout must be seq's, byte for byte
#   read     a 64 MiB file made on the host under build/vs-vng/ read once with dd bs=1M in a fresh
#            boot (so through the guest's cold cache), timed in the guest, in MB/s
#   uname    `run -- uname -r`, the host's wall time from start to exit
# Where guest user space runs: a VMX/SVM host, or scripts/kvm-host.sh --emulated --mem 2048 --.
# A tool, not a test: exit 0 unless a boot of lkvm failed or printed the wrong bytes.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
runs=3
kernel=
vng=
lkvm=$here/lkvm
before=
usage() { sed -n '4,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	-n) [ $# -ge 2 ] || usage; runs=$2; shift 2 ;;
	-k) [ $# -ge 2 ] || usage; kernel=$2; shift 2 ;;
	--vng) [ $# -ge 2 ] || usage; vng=$2; shift 2 ;;
	--lkvm) [ $# -ge 2 ] || usage; lkvm=$2; shift 2 ;;
	--before) [ $# -ge 2 ] || usage; before=$2; shift 2 ;;
	-h | --help) usage ;;
	*) echo "vs-vng: unknown argument $1" >&2; usage ;;
	esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "vs-vng: -n wants a positive number" >&2; exit 2; }
if [ -z "$kernel" ]; then
	kernel=/boot/vmlinuz-$(uname -r)
	[ -r "$kernel" ] || kernel=$here/build/kvm-host/kernel/boot/vmlinuz-$(uname -r)
fi
[ -r "$kernel" ] || { echo "vs-vng: no kernel $kernel (-k KERNEL)" >&2; exit 2; }
[ -x "$lkvm" ] || { echo "vs-vng: no $lkvm (make lkvm, or --lkvm PATH)" >&2; exit 2; }
[ -z "$before" ] || [ -x "$before" ] || { echo "vs-vng: no $before (--before PATH)" >&2; exit 2; }
[ -n "$vng" ] || vng=$(command -v vng || true)
if [ -z "$vng" ] || [ ! -x "$vng" ]; then
	echo "vs-vng: vng not found (install virtme-ng or pass --vng PATH): lkvm's rows only"
	vng=
fi

MEM=1024 CPUS=1 T=900 SEQ_N=200000
work=$here/build/vs-vng
mkdir -p "$work"
file=$work/read-64m
[ "$(stat -c %s "$file" 2>/dev/null)" = 67108864 ] || head -c 67108864 /dev/urandom >"$file"
chmod 0644 "$file"
seq "$SEQ_N" >"$work/seq.want"
release=$(basename "$kernel" | sed -n 's/^vmlinuz-//p')
# lkvm serves the host's files as nobody unless told (builtin/run-cmd.c); vng's QEMU serves
# them as whoever runs it: as root, both as root.
user_args=()
[ "$(id -u)" = 0 ] && user_args=(--user root)

# One boot: seq to stdout, then the read; both timed in the guest, the times on stderr.
# shellcheck disable=SC2016 # the guest expands it
GUEST='t0=$(date +%s%N); seq "$1"; t1=$(date +%s%N)
dd if="$2" of=/dev/null bs=1M 2>/dev/null; t2=$(date +%s%N)
echo "vs-vng: seq_ns=$((t1 - t0)) read_ns=$((t2 - t1))" >&2'

boot() { # boot TOOL CMD...: CMD on the tool's VM (lkvm, before, vng), stdout in $work/out, stderr in $work/err
	if [ "$1" != vng ]; then
		local bin=$lkvm
		[ "$1" = lkvm ] || bin=$before
		shift
		timeout -s KILL $((T + 30)) "$bin" run -k "$kernel" -m "$MEM" --cpus "$CPUS" \
			"${user_args[@]}" --timeout "$T" -- "$@"
	else
		shift
		# vng's "#!/usr/bin/env python3" must find the system's python3, whose packages
		# (python3-argcomplete, python3-requests) it imports, before a pyenv or venv one.
		(cd /tmp && PATH=/usr/bin:/usr/sbin:$PATH timeout -s KILL $((T + 30)) "$vng" --run "$kernel" --force-9p \
			--memory "${MEM}M" --cpus "$CPUS" -- "$@")
	fi </dev/null >"$work/out" 2>"$work/err"
}

declare -A vals # vals[tool.row] = one value a line
bad=0
note() { echo "vs-vng: $*"; }
measure() { # measure TOOL: one boot for seq and read, one for uname
	local tool=$1 line seq_ns read_ns t0 t1
	boot "$tool" sh -c "$GUEST" sh "$SEQ_N" "$file"
	line=$(tr -d '\r' <"$work/err" | grep -ao 'vs-vng: seq_ns=[0-9]* read_ns=[0-9]*' | tail -n 1)
	# vng may send stderr down stdout: the times' line is not seq's.
	grep -av '^vs-vng: seq_ns=' "$work/out" >"$work/seq.got"
	[ -n "$line" ] || line=$(tr -d '\r' <"$work/out" | grep -ao 'vs-vng: seq_ns=[0-9]* read_ns=[0-9]*' | tail -n 1)
	if [ -z "$line" ]; then
		note "$tool: no times from the guest: $(tail -c 300 "$work/err")"
		[ "$tool" != vng ] && bad=1
	elif ! cmp -s "$work/seq.got" "$work/seq.want"; then
		note "$tool: stdout is not seq $SEQ_N's ($(stat -c %s "$work/seq.got") bytes): $(cmp "$work/seq.got" "$work/seq.want" 2>&1 | head -c 200)"
		[ "$tool" != vng ] && bad=1
	else
		seq_ns=${line#*seq_ns=}; seq_ns=${seq_ns%% *}; read_ns=${line##*read_ns=}
		vals[$tool.seq]+="$(awk -v n="$seq_ns" 'BEGIN { printf "%.3f", n / 1e9 }')"$'\n'
		vals[$tool.read]+="$(awk -v n="$read_ns" 'BEGIN { printf "%.1f", 67108864 / (n / 1e9) / 1e6 }')"$'\n'
	fi
	t0=$(date +%s%N)
	boot "$tool" uname -r
	t1=$(date +%s%N)
	line=$(tr -d '\r' <"$work/out" | head -n 1)
	if [ -n "$line" ] && { [ -z "$release" ] || [ "$line" = "$release" ]; }; then
		vals[$tool.uname]+="$(awk -v n=$((t1 - t0)) 'BEGIN { printf "%.2f", n / 1e9 }')"$'\n'
	else
		note "$tool: uname -r printed '${line:0:80}': $(tail -c 300 "$work/err")"
		[ "$tool" != vng ] && bad=1
	fi
}

median() { printf '%s' "${vals[$1]-}" | sort -g | awk '{ v[NR] = $1 } END {
	if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

read -r l1 l5 l15 _ </proc/loadavg
busy=$(awk -v l="$l1" 'BEGIN { print (l > 0.5) ? "BUSY (load > 0.5: timings distorted)" : "idle" }')
echo "host load: $l1 $l5 $l15 ($busy)"
echo "kernel: $kernel; $runs run(s) each, alternating; ${MEM} MiB, $CPUS vCPU, 9p root in both"
echo "lkvm: $lkvm${before:+; before: $before}"
echo "vng: ${vng:-not found}"
for ((i = 1; i <= runs; i++)); do
	[ -z "$before" ] || measure before
	measure lkvm
	[ -z "$vng" ] || measure vng
done

printf '\n| %-44s | %10s | %10s | %10s | %8s |\n' "median of $runs" before lkvm vng lkvm/vng
printf '| %-44s | %10s | %10s | %10s | %8s |\n' "$(printf -- '-%.0s' {1..44})" ---------- ---------- ---------- --------
row() { # row KEY LABEL
	local a b r p
	p=$(median "before.$1")
	a=$(median "lkvm.$1")
	b=$(median "vng.$1")
	r=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }')
	printf '| %-44s | %10s | %10s | %10s | %8s |\n' "$2" "$p" "$a" "$b" "$r"
}
row seq "seq $SEQ_N to stdout, in the guest (s)"
row read "64 MiB cold read from the root (MB/s)"
row uname "run -- uname -r, host wall time (s)"
read -r l1 l5 l15 _ </proc/loadavg
echo "host load at the end: $l1 $l5 $l15"
exit $bad

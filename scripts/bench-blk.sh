#!/usr/bin/env bash
# virtio-blk from a freestanding guest (build/guests/blk-test.elf, hot loop at CPL3, polled rings):
# 4 KiB read IOPS, sequential and random, queue depth 1 and 32, libaio against pread/pwrite, and the
# bare cost of one notify over virtio-pci and virtio-mmio (ioeventfd and trapped); the same reads
# through each disk backend (qcow2, snapshot=on, a qcow2 overlay) against raw.
# Usage: scripts/bench-blk.sh [SECS] [IMAGE_MIB] [DIR]   (root or a kvm group member; /dev/kvm)
# The image goes in DIR (default /var/tmp: a real file system, so O_DIRECT applies; tmpfs has none).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-3}
mib=${2:-256}
dir=${3:-/var/tmp}
lkvm=$here/lkvm
elf=$here/build/guests/blk-test.elf
[ -x "$lkvm" ] && [ -f "$elf" ] || make -s -C "$here" lkvm guests
img=$(mktemp "$dir/lkvm-bench-blk.XXXXXX")
trap 'rm -f "$img"' EXIT
# Written, not sparse: reads must reach the file system's blocks, not its holes.
dd if=/dev/urandom of="$img" bs=1M count="$mib" status=none
sync

run() { # OPTS PARAMS: the guest's BENCH line
	local out
	out=$("$lkvm" run -k "$elf" -m 256 -d "$img,$1" -p "$2 secs=$secs" --timeout $((secs + 60)) 2>&1) || {
		echo "$out" | tail -n 3 >&2
		echo "bench-blk: run failed: -d $1 -p \"$2\"" >&2
		exit 1
	}
	echo "$out" | grep '^BENCH' | tail -n 1
}
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }

echo "virtio-blk 4 KiB reads, ${secs} s per cell, ${mib} MiB image in $dir ($(df -T "$dir" | awk 'NR==2 {print $2}')), host $(uname -r)"
printf '%-8s %-6s %4s %12s %12s %8s\n' backend pattern qd iops "MB/s" "kicks/io"
for io in libaio sync; do
	for pat in seq rand; do
		for qd in 1 32; do
			line=$(run "trans=pci,aio=$io" "blk=bench pattern=$pat qd=$qd")
			iops=$(echo "$line" | field iops)
			ios=$(echo "$line" | field ios)
			kicks=$(echo "$line" | field kicks)
			printf '%-8s %-6s %4s %12s %12s %8s\n' "$io" "$pat" "$qd" "$iops" \
				"$(awk -v i="$iops" 'BEGIN { printf "%.1f", i * 4096 / 1e6 }')" \
				"$(awk -v k="$kicks" -v n="$ios" 'BEGIN { printf "%.2f", n ? k / n : 0 }')"
		done
	done
done
echo
# The same reads through each disk backend: raw (pread/pwrite, the backends' synchronous way),
# the image as qcow2 (qemu-img convert), raw behind snapshot=on's overlay, and a qcow2 overlay
# on the raw image (nothing allocated: every read goes to its base). Reads only: blk-test's
# bench mode does not write.
if command -v qemu-img >/dev/null; then
	qimg=$img.qcow2 oimg=$img.top.qcow2
	trap 'rm -f "$img" "$qimg" "$oimg"' EXIT
	qemu-img convert -f raw -O qcow2 "$img" "$qimg"
	qemu-img create -q -f qcow2 -b "$(basename "$img")" -F raw "$oimg"
	echo "disk formats: 4 KiB reads, queue depth 32 (the baseline: raw, aio=sync,direct=off: the backends go through the page cache too)"
	printf '%-16s %-6s %12s %8s\n' format pattern iops "x raw"
	for pat in seq rand; do
		base=""
		for f in raw-sync qcow2 raw-snapshot qcow2-overlay; do
			case $f in
			raw-sync) d="$img" o="trans=pci,aio=sync,direct=off" ;;
			qcow2) d="$qimg" o="trans=pci" ;;
			raw-snapshot) d="$img" o="trans=pci,snapshot=on" ;;
			qcow2-overlay) d="$oimg" o="trans=pci" ;;
			esac
			iops=$(img=$d run "$o" "blk=bench pattern=$pat qd=32" | field iops)
			base=${base:-$iops}
			printf '%-16s %-6s %12s %8s\n' "$f" "$pat" "$iops" \
				"$(awk -v i="$iops" -v b="$base" 'BEGIN { printf "%.2f", b ? i / b : 0 }')"
		done
	done
else
	echo "disk formats: skipped (no qemu-img: scripts/deps.sh test installs qemu-utils)"
fi
echo
echo "notify cost per kick (guest CPL3, back-to-back writes to the queue's notify register)"
printf '%-6s %-10s %14s\n' trans notify ns_per_kick
for trans in pci mmio; do
	for ev in on off; do
		extra=""
		[ $ev = off ] && extra=" --no-ioeventfd"
		# shellcheck disable=SC2086
		line=$("$lkvm" run -k "$elf" -m 256 -d "$img,trans=$trans" -p "blk=notify trans=$trans secs=$secs" \
			--timeout $((secs + 60)) $extra 2>&1 | grep '^BENCH' | tail -n 1)
		printf '%-6s %-10s %14s\n' "$trans" "$([ $ev = on ] && echo ioeventfd || echo trapped)" \
			"$(echo "$line" | field ns_per_notify)"
	done
done

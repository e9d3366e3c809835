#!/usr/bin/env bash
# `lkvm run -- CMD` against QEMU booting the same kernel with the same initramfs (lkvm's init, made by build/tools/mkinitrd) over -virtfs: wall times of `true` and `uname -r`, and a 64 MiB 9p read, N runs each, medians and ratios.
# Usage: scripts/kvm-host.sh [--emulated] -- scripts/bench-run.sh [N]
# (needs make, make tools, scripts/build-guest.sh and qemu-system-x86_64). In QEMU the exit port
# is missing: init's report goes nowhere and its reboot ends QEMU (-no-reboot); the command's
# output arrives on QEMU's virtconsoles hvc0 and hvc1 as with lkvm. Indicative only: the
# machine is shared and, in the emulated host, everything is emulated.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
n=${1:-3}
lkvm=${LKVM:-./lkvm}
k=build/guest/bzImage
out=build/bench-run
mkdir -p "$out"
big=$(mktemp /tmp/lkvm-bench-run.XXXXXX) # the 9p file, on the host's (or emulated host's) tmpfs
# As root, the files served as root, as QEMU's -virtfs serves them (lkvm's default there: nobody).
as=()
[ "$(id -u)" != 0 ] || as=(--user root)
trap 'rm -f "$big"' EXIT
head -c $((64 << 20)) /dev/urandom >"$big"

# The guest command that times the read itself (ns, on its stdout).
# shellcheck disable=SC2016 # the guest expands it
read_cmd=(sh -c 's=$(date +%s%N); cat "$1" >/dev/null; e=$(date +%s%N); echo $((e - s))' sh "$big")

qemu_run() { # qemu_run LOG CMD...: the same kernel, lkvm's initramfs for CMD, the host's / on 9p
	local log=$1 rd=$out/qemu.cpio
	shift
	build/tools/mkinitrd -o "$rd" -r lkvm-root -R -C "$PWD" -- "$@"
	qemu-system-x86_64 -accel kvm -cpu host -m 256 -nodefaults -no-user-config -display none -no-reboot \
		-kernel "$k" -initrd "$rd" -append "console=ttyS0 quiet panic=-1 reboot=k" \
		-serial null -virtfs local,path=/,mount_tag=lkvm-root,security_model=none,readonly=on \
		-device virtio-serial-pci -chardev file,id=o,path="$log" -device virtconsole,chardev=o \
		-chardev null,id=e -device virtconsole,chardev=e </dev/null
}

ms() { echo $((($2 - $1) / 1000000)); }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

: >"$out/results.tsv"
for i in $(seq 1 "$n"); do
	for c in true uname; do
		cmd=(true)
		[ $c = uname ] && cmd=(uname -r)
		t0=$(date +%s%N)
		"$lkvm" run -k "$k" -m 256 "${as[@]}" -- "${cmd[@]}" </dev/null >"$out/lkvm-$c.out"
		t1=$(date +%s%N)
		qemu_run "$out/qemu-$c.out" "${cmd[@]}"
		t2=$(date +%s%N)
		printf 'lkvm-%s\t%s\nqemu-%s\t%s\n' $c "$(ms "$t0" "$t1")" $c "$(ms "$t1" "$t2")" >>"$out/results.tsv"
	done
	"$lkvm" run -k "$k" -m 256 "${as[@]}" -- "${read_cmd[@]}" </dev/null >"$out/lkvm-read.out"
	qemu_run "$out/qemu-read.out" "${read_cmd[@]}"
	printf 'lkvm-read\t%s\nqemu-read\t%s\n' "$(($(cat "$out/lkvm-read.out") / 1000000))" \
		"$(($(tr -dc 0-9 <"$out/qemu-read.out") / 1000000))" >>"$out/results.tsv"
	echo "bench-run: round $i of $n done"
done
for c in true uname read; do
	l=$(awk -v c="lkvm-$c" '$1 == c { print $2 }' "$out/results.tsv" | median)
	q=$(awk -v c="qemu-$c" '$1 == c { print $2 }' "$out/results.tsv" | median)
	case $c in
	read) echo "bench-run: 64 MiB 9p read: lkvm $l ms ($((64000 / (l > 0 ? l : 1))) MiB/s), QEMU $q ms ($((64000 / (q > 0 ? q : 1))) MiB/s), lkvm/QEMU time $(awk -v a="$l" -v b="$q" 'BEGIN { printf "%.2f", a / b }')" ;;
	*) echo "bench-run: -- $c wall: lkvm $l ms, QEMU $q ms, lkvm/QEMU $(awk -v a="$l" -v b="$q" 'BEGIN { printf "%.2f", a / b }')" ;;
	esac
done

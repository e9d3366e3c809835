#!/usr/bin/env bash
# Runs a command where a working /dev/kvm is: here when this machine has one, otherwise inside an
# emulated KVM host (QEMU's TCG emulating AMD SVM, a Debian kernel as L1) that sees this machine's
# files read-only and the checkout read-write.
#
# Usage: scripts/kvm-host.sh [--emulated|--native] [--timeout SECS] [--mem MIB] [--] CMD [ARGS...]
#        scripts/kvm-host.sh [--emulated|--native] --print-kind
#   --emulated     use the emulated host even when /dev/kvm works here (LKVM_HOST=emulated too)
#   --native       never emulate: fail (exit 1) when /dev/kvm does not work here
#   --timeout S    stop CMD (and the emulated host) after S seconds, exit 124 (default 3600)
#   --mem MIB      the emulated host's RAM (default 4096)
#   --print-kind   print where CMD would run (native-pvm, native, emulated-svm) and exit
# CMD runs in the current directory with this environment plus LKVM_HOST_KIND (native-pvm,
# native, emulated-svm). Its output and exit status come back; stdout and stderr stay apart.
# Nothing is left running: QEMU is killed on timeout and on SIGINT/SIGTERM/SIGHUP.
# The L1 kernel, its modules and initramfs are cached under build/kvm-host/ (kept by make clean).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cache=$here/build/kvm-host
mode=${LKVM_HOST:-auto}
timeout=3600
mem=4096
print_kind=0

usage() { sed -n '5,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
say() { echo "kvm-host: $*" >&2; }
die() { echo "kvm-host: error: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
	case $1 in
	--emulated) mode=emulated; shift ;;
	--print-kind) print_kind=1; shift ;;
	--native) mode=native; shift ;;
	--timeout) [ $# -ge 2 ] || usage; timeout=$2; shift 2 ;;
	--timeout=*) timeout=${1#*=}; shift ;;
	--mem) [ $# -ge 2 ] || usage; mem=$2; shift 2 ;;
	--mem=*) mem=${1#*=}; shift ;;
	-h|--help) usage ;;
	--) shift; break ;;
	-*) echo "kvm-host: unknown option $1" >&2; usage ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || [ $print_kind = 1 ] || usage
[[ $timeout =~ ^[0-9]+$ ]] && [ "$timeout" -gt 0 ] || die "--timeout wants a positive number of seconds"
[[ $mem =~ ^[0-9]+$ ]] && [ "$mem" -ge 1024 ] || die "--mem wants at least 1024 (MiB)"

# A /dev/kvm that exists but whose module did not bind cannot be opened: ask the device.
kvm_works() { [ -c /dev/kvm ] && (exec 9<>/dev/kvm) 2>/dev/null; }

# kvm_pvm (guest kernel code emulated) serves /dev/kvm when it is loaded and the CPU offers
# neither VMX nor SVM; loaded alone it proves nothing (it may not have bound).
native_kind() {
	if [ -d /sys/module/kvm_pvm ] && ! grep -qwE 'vmx|svm' /proc/cpuinfo; then echo native-pvm; else echo native; fi
}

case $mode in
auto|native)
	if kvm_works; then
		kind=$(native_kind)
		# Inside the emulated host itself (a nested call) it stays the emulated host.
		[ "${LKVM_HOST_KIND-}" = emulated-svm ] && kind=emulated-svm
		[ $print_kind = 1 ] && { echo "$kind"; exit 0; }
		export LKVM_HOST_KIND=$kind
		exec timeout --foreground -k 10 "$timeout" "$@"
	fi
	[ "$mode" = native ] && die "/dev/kvm does not work on this machine (and --native was given)"
	;;
emulated) ;;
*) die "LKVM_HOST must be auto, native or emulated, not '$mode'" ;;
esac
[ $print_kind = 1 ] && { echo emulated-svm; exit 0; }

# --- the emulated host -------------------------------------------------------------------------
case $here in *[[:space:]]*) die "the checkout's path ($here) must not contain spaces" ;; esac
[ "$mode" = emulated ] || say "no usable /dev/kvm here"
say "running in an emulated KVM host (QEMU TCG with nested SVM); everything runs emulated and slow, timings mean nothing"
"$here/scripts/deps.sh" kvm-host

# The L1 kernel: Debian's current 6.1 image, unpacked, never installed.
prepare_kernel() {
	local pkg deb
	l1_package() { apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n 1; }
	pkg=$(l1_package)
	if [ -z "$pkg" ] && [ ! -f "$cache/kernel/package" ]; then
		apt-get update -q > /dev/null 2>&1 || true # a fresh machine may have no package lists yet
		pkg=$(l1_package)
	fi
	if [ -z "$pkg" ] && [ -f "$cache/kernel/package" ]; then pkg=$(cat "$cache/kernel/package"); fi
	[ -n "$pkg" ] || die "cannot tell which linux-image package linux-image-amd64 depends on (apt-get update?)"
	if [ -f "$cache/kernel/package" ] && [ "$(cat "$cache/kernel/package")" = "$pkg" ]; then
		return 0
	fi
	say "fetching the L1 kernel: Debian's $pkg (about 70 MB, once)"
	rm -rf "$cache/kernel" "$cache/deb"
	mkdir -p "$cache/deb"
	(cd "$cache/deb" && apt-get download -q "$pkg" >/dev/null 2>&1) ||
		{ apt-get update -q >/dev/null && (cd "$cache/deb" && apt-get download -q "$pkg" >/dev/null 2>&1); } ||
		die "apt-get download $pkg failed"
	dpkg-deb -x "$cache"/deb/*.deb "$cache/kernel"
	rm -rf "$cache/deb"
	# QEMU boots the uncompressed ELF through its PVH note: no decompressor run under TCG
	# (saves about 10 s a boot). The bzImage stays as the fallback.
	local z off
	z=$(ls "$cache"/kernel/boot/vmlinuz-* | head -n 1)
	off=$(LC_ALL=C grep -obUaP '\xFD7zXZ\x00' "$z" | head -n 1 | cut -d: -f1)
	if [ -n "$off" ] && { tail -c +$((off + 1)) "$z" || true; } | xz -dc --single-stream > "$cache/kernel/vmlinux" 2>/dev/null &&
		LC_ALL=C grep -qaF 'Xen' "$cache/kernel/vmlinux"; then
		:
	else
		rm -f "$cache/kernel/vmlinux"
	fi
	echo "$pkg" > "$cache/kernel/package"
}

# Modules L1 loads at boot, with what they depend on first (read from each module's depends=).
# vhost_net (with vhost, tap): /dev/vhost-net for -n vhost=on (tests/integration/test-vhost.sh);
# a kernel that does not ship it just has no /dev/vhost-net, and those tests skip.
L1_MODULES="virtio_pci 9pnet_virtio 9p overlay irqbypass kvm ccp kvm-amd tun veth bridge vhost_net"
resolve_modules() { # prints module paths, relative to lib/modules, in load order
	local mdir=$1 m
	declare -A seen=()
	visit() {
		local name=$1 f deps d
		[ -n "${seen[$name]-}" ] && return 0
		seen[$name]=1
		f=$(find "$mdir/kernel" \( -name "$name.ko" -o -name "${name//_/-}.ko" -o -name "${name//-/_}.ko" \) | head -n 1)
		[ -n "$f" ] || return 0 # built in
		deps=$(strings -a "$f" | sed -n 's/^depends=//p' | head -n 1)
		for d in ${deps//,/ }; do visit "$d"; done
		echo "${f#"$mdir"/}"
	}
	for m in $L1_MODULES; do visit "$m"; done
}

prepare_initramfs() {
	local kver mdir want out=$cache/l1-initramfs.cpio.gz root
	kver=$(basename "$(ls -d "$cache"/kernel/lib/modules/*/)")
	mdir=$cache/kernel/lib/modules/$kver
	want=$({ cat "$cache/kernel/package"; sha256sum "$here/scripts/kvm-host-init" "$0"; stat -c '%s %Y' /bin/busybox; } | sha256sum | cut -c1-16)
	if [ -f "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
	say "building the L1 initramfs"
	root=$(mktemp -d)
	mkdir -p "$root"/{bin,sbin,dev,proc,sys,mnt,lib/modules}
	cp /bin/busybox "$root/bin/busybox"
	for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$root/bin/$a"; done
	resolve_modules "$mdir" > "$root/modules.load"
	while read -r m; do
		mkdir -p "$root/lib/modules/$(dirname "$m")"
		cp "$mdir/$m" "$root/lib/modules/$m"
	done < "$root/modules.load"
	install -m 0755 "$here/scripts/kvm-host-init" "$root/init"
	(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) > "$out.tmp"
	rm -rf "$root"
	mv "$out.tmp" "$out"
	echo "$want" > "$out.stamp"
}

mkdir -p "$cache"
(
	flock 8
	prepare_kernel
	prepare_initramfs
) 8> "$cache/.lock"
kernel=$cache/kernel/vmlinux
[ -f "$kernel" ] || kernel=$(ls "$cache"/kernel/boot/vmlinuz-* | head -n 1)

# The command, as a script in the checkout (which L1 mounts read-write at the same path).
mkdir -p "$cache/runs"
# Run folders of emulated hosts that were killed (SIGKILL leaves them) and are a day old.
find "$cache/runs" -mindepth 1 -maxdepth 1 -type d -mmin +1440 -exec rm -rf {} + 2>/dev/null || true
rundir=$(mktemp -d "$cache/runs/run.XXXXXX")
runrel=${rundir#"$here"/}
cleanup_run() { [ -n "${LKVM_HOST_KEEP-}" ] || rm -rf "$rundir"; }
{
	echo "# written by scripts/kvm-host.sh"
	export -p | grep -vE '^declare -[a-zA-Z-]*x (BASH_[A-Z_]*|SHELLOPTS|BASHOPTS|PWD|OLDPWD|SHLVL|_|PPID|UID|EUID|LKVM_HOST|LKVM_HOST_KIND)='
	echo "export LKVM_HOST_KIND=emulated-svm"
	echo "export LKVM_HOST=native"
	[ -t 0 ] && stty size 2>/dev/null | awk '{ print "stty rows " $1 " cols " $2 " 2>/dev/null" }'
	printf 'cd %q || exit 1\n' "$PWD"
	printf '%q ' "$@"
	echo
	printf 'echo $? > %q\n' "$rundir/status"
} > "$rundir/cmd.sh"

tty=0
[ -t 0 ] && [ -t 1 ] && tty=1
# L1's timer in periodic mode (no TSC deadline, no high-resolution one-shot, ticks while idle):
# QEMU re-arms a periodic LAPIC timer itself, so one lost wake-up of an idle TCG vCPU cannot
# stall it for good (seen: "rcu_preempt kthread timer wakeup didn't happen", L1 hung).
# no_timer_check: the boot-time check that the timer ticks in time fails when TCG runs slowly on
# a loaded machine (seen: "IO-APIC + timer doesn't work!", L1 panicked at boot).
append="console=ttyS2 panic=-1 lapic=notscdeadline highres=off nohz=off no_timer_check lkvmhost.repo=$here lkvmhost.run=$runrel lkvmhost.time=$(date +%s) lkvmhost.tty=$tty"
# One L1 CPU: with two, L1 hung now and then (a CPU busy forever, or an idle one never woken:
# interrupts crossing TCG vCPU threads into nested guest mode); guests with -c 2 or -c 4 still run.
qemu=(qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m "$mem" -machine pc
	-nodefaults -no-user-config -display none -no-reboot
	-kernel "$kernel" -initrd "$cache/l1-initramfs.cpio.gz" -append "$append"
	-chardev stdio,id=out,signal=off -serial chardev:out
	-chardev file,id=err,path=/dev/stderr,append=on -serial chardev:err
	-chardev file,id=klog,path="$rundir/l1-console.log" -serial chardev:klog
	-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap
	-virtfs local,path="$here",mount_tag=work,security_model=none,multidevs=remap)

qpid=""
stop_qemu() { if [ -n "$qpid" ]; then kill -TERM "$qpid" 2>/dev/null || true; fi; }
on_signal() { # on_signal SIG STATUS
	say "stopped by SIG$1: killing the emulated host"
	stop_qemu; wait 2>/dev/null; cleanup_run; exit "$2"
}
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP
trap 'stop_qemu; cleanup_run' EXIT

t0=$(date +%s)
# timeout(1) ends QEMU (SIGTERM, then SIGKILL 5 s later) at the limit; --foreground keeps QEMU in
# this process group so that it may read a terminal.
timeout --foreground -k 5 "$timeout" "${qemu[@]}" <&0 &
qpid=$!
qrc=0
wait "$qpid" || qrc=$?
qpid=""
if [ "$qrc" = 124 ] && [ ! -f "$rundir/status" ]; then
	say "time limit of ${timeout}s reached: the emulated host was stopped; its console's last lines:"
	tail -n 20 "$rundir/l1-console.log" >&2 2>/dev/null || true
	exit 124
fi
if [ ! -f "$rundir/status" ]; then
	say "error: the emulated host ended (QEMU status $qrc) after $(($(date +%s) - t0))s before the command finished; its console's last lines:"
	tail -n 20 "$rundir/l1-console.log" >&2 2>/dev/null || true
	exit 125
fi
st=$(cat "$rundir/status")
say "emulated host finished in $(($(date +%s) - t0))s; the command's exit status: $st"
exit "$st"

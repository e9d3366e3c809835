#!/usr/bin/env bash
# Installs the Debian packages lkvm needs (build, tests, guest assets) when they are missing.
# Usage: deps.sh [build|test|guest|kvm-host|bench|fuzz|deb|all] [--list: print the packages, install nothing]
set -euo pipefail
what=${1:-all}
build_pkgs="gcc make pkg-config libfdt-dev libaio-dev libcap-ng-dev libseccomp-dev liburing-dev musl-tools"  # musl-tools: the static guest init; liburing-dev: -n batch=on
test_pkgs="check iproute2 iputils-ping socat device-tree-compiler e2fsprogs python3 cpio procps clang-format passt gdb qemu-utils man-db groff-base"  # man-db, groff-base: the install stage renders the man pages; qemu-utils: qemu-img makes and checks the qcow2 images of test_qcow2 and test-blk.sh; gdb: tests/integration/test-gdb.sh drives it; dtc: --dump-dtb; mkfs.ext4 -d: disk images; python3: raw control clients, a pseudo-terminal driver; cpio: test_initrd extracts archives; pgrep: lkvm's cleanup helper; clang-format: the format stage; passt: -n mode=user's tests
kvm_host_pkgs="qemu-system-x86 busybox-static cpio gzip xz-utils binutils util-linux coreutils"
bench_pkgs="librsvg2-bin python3 qemu-system-x86"  # rsvg-convert: the bench charts as PNG (tests look at them); python3 checks the JSON and SVG in tests; --qemu
fuzz_pkgs="clang libclang-rt-dev"  # libFuzzer (libclang_rt.fuzzer) and the sanitizer runtimes
# deb: the Debian package's build (debian/control's Build-Depends are build_pkgs and check:
# tests/integration/test-deb.sh compares them) and its checks.
deb_pkgs="check debhelper devscripts lintian dpkg-dev fakeroot man-db"
guest_pkgs="linux-source-6.1 busybox-static cpio gzip lz4 flex bison bc libelf-dev libssl-dev xz-utils"
case "$what" in
    build) pkgs="$build_pkgs" ;;
    test) pkgs="$build_pkgs $test_pkgs" ;;
    guest) pkgs="$guest_pkgs" ;;
    kvm-host) pkgs="$kvm_host_pkgs" ;;
    bench) pkgs="$build_pkgs $test_pkgs $bench_pkgs" ;;
    fuzz) pkgs="$build_pkgs $fuzz_pkgs" ;;
    deb) pkgs="$build_pkgs $deb_pkgs" ;;
    all) pkgs="$build_pkgs $test_pkgs $guest_pkgs" ;;
    *) echo "usage: $0 [build|test|guest|kvm-host|bench|fuzz|deb|all] [--list]" >&2; exit 2 ;;
esac
[ "${2:-}" = --list ] && { echo $pkgs; exit 0; }
missing=()
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q >/dev/null
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null

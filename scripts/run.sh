#!/usr/bin/env bash
# `make run`: install what is missing, build lkvm and the guest, boot it into a shell on the host's files.
# Extra lkvm options: make run ARGS="--timeout 120"
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# Where the guest will run is decided before any long build (scripts/kvm-host.sh).
kind=$(scripts/kvm-host.sh --print-kind)
case $kind in
native-pvm) echo "run: this machine's KVM is kvm_pvm (guest kernel code emulated, no guest user space)" ;;
native) echo "run: this machine's KVM (VMX/SVM)" ;;
emulated-svm) echo "run: no usable /dev/kvm here: the guest runs in an emulated KVM host (QEMU TCG with nested SVM), emulated and slow (about a minute to the shell)" ;;
esac
scripts/deps.sh all
make -s -j"$(nproc)" lkvm
scripts/build-guest.sh
g=build/guest
if [ "$kind" = native-pvm ]; then
    # Guest user space cannot make system calls here (../shared/HOST-KVM.md), so stop at the
    # kernel's last boot stage: no initramfs, waiting for a root disk, network stack up.
    # The PVH vmlinux skips the decompressor, which costs ~20 s when emulated.
    echo "run: booting vmlinux to the kernel's last boot stage (about 30 s); Ctrl-a x quits"
    # shellcheck disable=SC2086
    exec ./lkvm run -k $g/vmlinux -m 256 -c 2 -p "root=/dev/vda rootwait" ${ARGS:-}
fi
# lkvm run -- (the host-root mode): a shell on this machine's files over virtio-9p, read-only
# under a tmpfs, in this directory (in the emulated host: the files it sees, this checkout
# included).
echo "run: booting to a shell on this machine's files (lkvm run -k $g/bzImage --); exit or Ctrl-a x quits"
# shellcheck disable=SC2086
exec scripts/kvm-host.sh --timeout 86400 -- ./lkvm run -k $g/bzImage -m 256 -c 2 ${ARGS:-} --

#!/usr/bin/env bash
# `make run`: install what is missing, build lkvm and the guest, boot it on the serial console.
# Extra lkvm options: make run ARGS="--timeout 120"
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
scripts/deps.sh all
make -s -j"$(nproc)" lkvm
scripts/build-guest.sh
g=build/guest
if [ -e /sys/module/kvm_pvm ]; then
    # This host runs guest kernel code emulated and cannot run guest user space
    # (../shared/HOST-KVM.md), so stop at the kernel's last boot stage: no initramfs,
    # waiting for a root disk, network stack up. On a VMX/SVM host the initramfs runs.
    # The PVH vmlinux skips the decompressor, which costs ~20 s when emulated.
    echo "run: PVM host: booting vmlinux to the kernel's last boot stage (about 30 s); Ctrl-a x quits"
    exec ./lkvm run -k $g/vmlinux -m 256 -c 2 -p "root=/dev/vda rootwait" ${ARGS:-}
fi
echo "run: booting to a busybox shell; Ctrl-a x quits"
exec ./lkvm run -k $g/bzImage -i $g/initramfs.cpio.gz -m 256 -c 2 -p "lkvm.shell" ${ARGS:-}

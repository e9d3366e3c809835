#!/usr/bin/env bash
# Builds the guest kernel (bzImage and vmlinux) and the initramfs under build/guest, cached by input hash.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${LKVM_GUEST_DIR:-$here/build/guest}
mkdir -p "$out"
"$here/scripts/deps.sh" guest

frag=$here/tests/guest/kernel.fragment
src_tar=/usr/src/linux-source-6.1.tar.xz
kdir=$out/linux
stamp=$out/kernel.stamp
# The key is what the kernel is made from, not where the checkout is (a copied build/guest stays good).
want=$( { cat "$frag" "$here/scripts/build-guest.sh"; stat -c '%s %Y' "$src_tar"; } | sha256sum | cut -c1-16)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$out/bzImage" ] && [ -f "$out/vmlinux" ]; then
    echo "guest kernel: up to date ($out/bzImage)"
else
    # What an earlier build left goes first: a build that fails leaves no kernel to test.
    rm -f "$stamp" "$out/bzImage" "$out/vmlinux"
    if [ ! -f "$kdir/Makefile" ]; then
        echo "guest kernel: unpacking $src_tar (about a minute)"
        rm -rf "$kdir" "$out/linux-source-6.1"
        tar -C "$out" -xf "$src_tar"
        mv "$out/linux-source-6.1" "$kdir"
    fi
    echo "guest kernel: configuring (tinyconfig + tests/guest/kernel.fragment)"
    make -C "$kdir" -s tinyconfig
    "$kdir/scripts/kconfig/merge_config.sh" -m -O "$kdir" "$kdir/.config" "$frag" >/dev/null
    make -C "$kdir" -s olddefconfig
    # Every line of the fragment must have survived olddefconfig, or the kernel is not what we
    # test: each one that did not is listed with what the config has instead, and the build fails.
    missing=0
    while IFS= read -r line; do
        case "$line" in ''|'#'*) continue ;; esac
        opt=${line%%=*}; val=${line#*=}
        have=$(grep -E "^$opt=|^# $opt is not set" "$kdir/.config" || echo "$opt absent")
        if [ "$val" = n ]; then
            grep -q "^$opt=" "$kdir/.config" && { echo "guest kernel: $opt should be off; config has: $have"; missing=1; }
        else
            grep -qx "$line" "$kdir/.config" || { echo "guest kernel: $line did not stick; config has: $have"; missing=1; }
        fi
    done < "$frag"
    if [ $missing != 0 ]; then
        echo "guest kernel: error: the config differs from tests/guest/kernel.fragment (above)" >&2
        exit 1
    fi
    echo "guest kernel: building with $(nproc) jobs (a few minutes; log in $out/kernel-build.log)"
    if ! make -C "$kdir" -j"$(nproc)" bzImage > "$out/kernel-build.log" 2>&1; then
        tail -n 30 "$out/kernel-build.log"
        echo "guest kernel: build failed" >&2
        exit 1
    fi
    cp "$kdir/arch/x86/boot/bzImage" "$out/bzImage"
    cp "$kdir/vmlinux" "$out/vmlinux"
    strip --strip-debug "$out/vmlinux" 2>/dev/null || true
    echo "$want" > "$stamp"
    echo "guest kernel: built $out/bzImage and $out/vmlinux"
fi

"$here/scripts/build-initramfs.sh" "$out/initramfs.cpio.gz"

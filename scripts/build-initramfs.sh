#!/usr/bin/env bash
# Makes a small busybox initramfs (newc cpio, gzip) whose /init prints a marker and powers off.
set -euo pipefail
out=$1
here=$(cd "$(dirname "$0")/.." && pwd)
init=$here/tests/guest/init
want=$( { sha256sum "$init" "$0"; stat -c '%s %Y' /bin/busybox; } | sha256sum | cut -c1-16)
if [ -f "$out" ] && [ -f "$out.stamp" ] && [ "$(cat "$out.stamp")" = "$want" ]; then
    echo "initramfs: up to date ($out)"
    exit 0
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,etc}
cp /bin/busybox "$root/bin/busybox"
for a in sh mount echo cat ls ip ping grep sed tr tail wc seq nc sha256sum poweroff reboot sleep uname dmesg ifconfig; do
    ln -s busybox "$root/bin/$a"
done
install -m 0755 "$init" "$root/init"
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet | gzip -9) > "$out.tmp"
mv "$out.tmp" "$out"
echo "$want" > "$out.stamp"
echo "initramfs: built $out"

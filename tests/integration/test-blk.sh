#!/usr/bin/env bash
# virtio-blk, virtio-mmio, the device tree, virtio-console and virtio-rng: a freestanding guest reads
# known sectors and writes some (checked in the image afterwards) over PCI and MMIO, libaio and
# pread/pwrite; read-only disks; snapshot=on (10 VMs on one image, which stays as it was); qcow2
# images (converted from raw, an overlay on a raw base, with snapshot=on), qemu-img check after;
# --dump-dtb parsed by dtc; Linux finds the mmio disk, its partition table and mounts its ext4 root;
# where guest user space runs, it boots from an ext4 image built here; an image in use by a writer
# is refused to a second opener.
# BLK_TESTS=userspace runs only the user-space tests (make check runs them in the emulated host).
set -u
SUMMARY_PREFIX=blk
. "$(dirname "$0")/lib.sh"

T=${LINUX_TIMEOUT:-600} # a Linux boot: about a minute idle on a PVM host, over 300 s at load 7
# Its own folder per selection: make check runs the user-space tests beside the others.
WORK=$LOG_DIR/blk${BLK_TESTS:+-$BLK_TESTS}
mkdir -p "$WORK"

# Sectors 64..71 hold what blk-test writes, (s*29 + i*3 + 5) & 0xff, and 72 on are untouched.
check_written() { # FILE
	python3 - "$1" <<'EOF'
import sys
d = open(sys.argv[1], 'rb').read()
for s in range(64, 72):
    want = bytes(((s * 29 + i * 3 + 5) & 0xff) for i in range(512))
    if d[s * 512:(s + 1) * 512] != want:
        sys.exit("sector %d not written as expected" % s)
for s in (63, 72, 100):
    if d[s * 512:(s + 1) * 512] != bytes(((s * 13 + i * 7 + 1) & 0xff) for i in range(512)):
        sys.exit("sector %d changed" % s)
EOF
}

# t_verify TRANS EXTRA: the guest checks the disk's size, sectors 0-63 and a refused read past
# the end, and writes 64-71 (its status says so); the host checks the image and the counters.
t_verify() {
	local trans=$1 extra=${2-}
	local img=$WORK/verify-$trans${extra//[,=]/-}.img
	need_python && need_guest blk-test || return
	make_pattern_image "$img" 2048
	run_guest blk-verify-$trans${extra//[,=]/-} 0 -- run -k "$ELF" -d "$img,trans=$trans$extra" \
		-p "blk=verify trans=$trans blk.capacity=2048" --timeout 60 --stats || return
	check_written "$img" || { fail "image check: $(check_written "$img" 2>&1)"; return; }
	# 8 reads, a write, a flush, a read back and one refused read past the end: 12 requests,
	# 1 error.
	grep -Eq '^req0 +[0-9]+ +0 +[0-9]+ +12 +40960 +1$' "$LAST_LOG" ||
		fail "disk counters: $(grep '^req0' "$LAST_LOG")"
}

# t_read_only TRANS: the guest sees VIRTIO_BLK_F_RO, reads, and its write completes with
# VIRTIO_BLK_S_IOERR (blk-test asserts both); the image is byte for byte what it was.
t_read_only() {
	local trans=$1 img=$WORK/ro-$1.img sum
	need_python && need_guest blk-test || return
	make_pattern_image "$img" 2048
	sum=$(sha256sum < "$img")
	run_guest "blk-ro-$trans" 0 -- run -k "$ELF" -d "$img,ro,trans=$trans" \
		-p "blk=ro trans=$trans blk.capacity=2048" --timeout 60 --stats || return
	[ "$(sha256sum < "$img")" = "$sum" ] || { fail "the read-only image changed"; return; }
	# 8 reads, the refused write, 1 read: 10 requests, 1 error.
	grep -Eq '^req0 +[0-9]+ +0 +[0-9]+ +10 +[0-9]+ +1$' "$LAST_LOG" ||
		fail "disk counters: $(grep '^req0' "$LAST_LOG")"
}

# t_snapshot N: N VMs at once on one image with snapshot=on: each guest writes sectors 64-71 and
# reads its own bytes back (blk=verify), each overlay holds the one cluster written, and the
# image is byte for byte what it was.
t_snapshot() {
	local n=$1 img=$WORK/snapshot.img sum i pids=() bad=""
	need_python && need_guest blk-test || return
	make_pattern_image "$img" 2048
	sum=$(sha256sum <"$img")
	for i in $(seq "$n"); do
		timeout -s KILL 120 "$LKVM" run -k "$ELF" -d "$img,snapshot=on" --timeout 60 --stats \
			-p "blk=verify trans=pci blk.capacity=2048" </dev/null >"$LOG_DIR/blk-snapshot-$i.log" 2>&1 &
		pids+=($!)
	done
	for i in $(seq "$n"); do
		wait "${pids[$((i - 1))]}" || bad+=" vm$i:status=$?"
		grep -q "BLK-VERIFY-OK capacity=2048" "$LOG_DIR/blk-snapshot-$i.log" || bad+=" vm$i:no-verify"
		grep -Eq '^ *overlay: bytes 65536, clusters 1' "$LOG_DIR/blk-snapshot-$i.log" || bad+=" vm$i:overlay"
	done
	[ -z "$bad" ] || { fail "snapshot=on VMs:$bad (logs $LOG_DIR/blk-snapshot-N.log)"; return; }
	[ "$(sha256sum <"$img")" = "$sum" ] || fail "snapshot=on wrote the image"
}

# t_qcow2 KIND: the guest's checks (blk=verify) through a qcow2 image: "convert" is the pattern
# image converted by qemu-img, "overlay" a qcow2 overlay on the raw one (which stays as it was),
# "snapshot" the converted one with snapshot=on (unchanged). qemu-img check is clean after, and
# qemu-img convert reads back what the guest wrote.
t_qcow2() {
	local kind=$1 raw=$WORK/qcow2-$1.raw q=$WORK/qcow2-$1.qcow2 opt="" rawsum qsum
	need_python && need_guest blk-test && need_cmd qemu-img test || return
	make_pattern_image "$raw" 2048
	rm -f "$q"
	if [ "$kind" = overlay ]; then
		(cd "$WORK" && qemu-img create -q -f qcow2 -b "qcow2-$kind.raw" -F raw "qcow2-$kind.qcow2") || { fail "qemu-img create"; return; }
	else
		qemu-img convert -f raw -O qcow2 "$raw" "$q" || { fail "qemu-img convert"; return; }
	fi
	[ "$kind" = snapshot ] && opt=,snapshot=on
	rawsum=$(sha256sum <"$raw") qsum=$(sha256sum <"$q")
	run_guest "blk-qcow2-$kind" 0 -- run -k "$ELF" -d "$q$opt" -p "blk=verify trans=pci blk.capacity=2048" \
		--timeout 60 --stats || return
	[ "$(sha256sum <"$raw")" = "$rawsum" ] || { fail "the raw base changed"; return; }
	qemu-img check -q "$q" >"$WORK/check-$kind.log" 2>&1 || { fail "qemu-img check: $(head -c 300 "$WORK/check-$kind.log")"; return; }
	if [ "$kind" = snapshot ]; then
		[ "$(sha256sum <"$q")" = "$qsum" ] || fail "snapshot=on wrote the qcow2 image"
		return
	fi
	qemu-img convert -O raw "$q" "$WORK/qcow2-$kind.out" || { fail "qemu-img convert back"; return; }
	check_written "$WORK/qcow2-$kind.out" || fail "image check: $(check_written "$WORK/qcow2-$kind.out" 2>&1)"
}

# t_qcow2_refused: a backing file elsewhere than beside the image is refused in one line that
# says how to allow it, and opened when named with backing=; compressed clusters are refused.
t_qcow2_refused() {
	local raw=$WORK/refused.raw q=$WORK/refused.qcow2 z=$WORK/refused-z.qcow2
	need_python && need_guest blk-test && need_cmd qemu-img test || return
	make_pattern_image "$raw" 2048
	rm -f "$q" "$z"
	qemu-img create -q -f qcow2 -b "$raw" -F raw "$q" && qemu-img convert -c -O qcow2 "$raw" "$z" ||
		{ fail "qemu-img"; return; }
	run_lkvm blk-qcow2-backing-refused 1 -- run -k "$ELF" -d "$q" --timeout 10 || return
	expect_output "^lkvm: error: virtio-blk: -d '.*refused.qcow2': backing file '.*refused.raw' is not beside the image; allow it with -d .*refused.qcow2,backing=PATH$" \
		"the backing file refused" || return
	run_guest blk-qcow2-backing-allowed 0 -- run -k "$ELF" -d "$q,backing=$raw" \
		-p "blk=verify trans=pci blk.capacity=2048" --timeout 60 || return
	run_lkvm blk-qcow2-compressed 1 -- run -k "$ELF" -d "$z" --timeout 10 || return
	expect_output "^lkvm: error: virtio-blk: -d '.*refused-z.qcow2': qcow2 compressed clusters: not supported$" \
		"compressed clusters refused"
}

t_bad_disk() {
	need_guest blk-test || return
	run_lkvm blk-missing 1 -- run -k "$ELF" -d "$WORK/does-not-exist.img" --timeout 10 || return
	expect_output "error: virtio-blk: -d '.*does-not-exist.img': No such file" "a clear error" || return
	run_lkvm blk-bad-opt 1 -- run -k "$ELF" -d "$WORK/x.img,rw" --timeout 10 || return
	expect_output "error: -d .*unknown option 'rw'" "the bad option named"
}

# Two VMs never write one image (OFD locks, as QEMU's): beside a running writer, a second writer
# and a reader are refused in one line naming the image; two readers run side by side, and a
# writer beside them is refused; once they are gone a writer runs.
t_lock() {
	local img=$WORK/lock.img rc re="virtio-blk: disk $WORK/lock\.img is in use by another process"
	local spin=$GUEST_DIR/spin.elf
	rm -f "$img" && truncate -s 1M "$img" || { fail "cannot make $img"; return; }
	start_vm blk-lock-w blk-lock-w -d "$img"
	wait_vm blk-lock-w || return
	run_lkvm blk-lock-w2 1 -- run -k "$spin" -d "$img" --timeout 10 &&
		one_error_line "$re \(locked for writing\)" &&
		run_lkvm blk-lock-r 1 -- run -k "$spin" -d "$img,ro" --timeout 10 &&
		one_error_line "$re \(locked for writing\)"
	rc=$?
	ctl blk-lock-stop-w stop blk-lock-w
	wait_exit "$VM_PID" 20 && [ "$rc" = 0 ] || return
	start_vm blk-lock-r1 blk-lock-r1 -d "$img,ro"
	local r1=$VM_PID
	wait_vm blk-lock-r1 && start_vm blk-lock-r2 blk-lock-r2 -d "$img,ro" && wait_vm blk-lock-r2 &&
		run_lkvm blk-lock-w3 1 -- run -k "$spin" -d "$img" --timeout 10 &&
		one_error_line "$re \(open read-only\)"
	rc=$?
	ctl blk-lock-stop-r1 stop blk-lock-r1
	ctl blk-lock-stop-r2 stop blk-lock-r2
	wait_exit "$VM_PID" 20 && VM_PID=$r1 wait_exit "$r1" 20 && [ "$rc" = 0 ] || return
	start_vm blk-lock-w4 blk-lock-w4 -d "$img"
	wait_vm blk-lock-w4
	rc=$?
	ctl blk-lock-stop-w4 stop blk-lock-w4
	return $rc
}

t_dtb() {
	need_cmd dtc test || return
	need_guest hlt || return
	local img=$WORK/dtb.img dtb=$WORK/lkvm.dtb
	truncate -s 1M "$img"
	rm -f "$dtb"
	run_lkvm blk-dtb 0 -- run -k "$ELF" -c 2 -d "$img" --virtio-transport mmio --rng --dump-dtb "$dtb" --timeout 30 || return
	dtc -I dtb -O dts -o "$WORK/lkvm.dts" "$dtb" 2> "$WORK/dtc.err" || { fail "dtc: $(head -c 200 "$WORK/dtc.err")"; return; }
	grep -q 'virtio_mmio@c0000000' "$WORK/lkvm.dts" && grep -q 'virtio_mmio@c0000200' "$WORK/lkvm.dts" ||
		{ fail "the two mmio devices are not in the tree ($WORK/lkvm.dts)"; return; }
	grep -q 'cpu@1' "$WORK/lkvm.dts" && grep -q 'serial@3f8' "$WORK/lkvm.dts" && grep -q 'memory@0' "$WORK/lkvm.dts" ||
		fail "CPUs, UART or memory missing ($WORK/lkvm.dts)"
}

# A little-endian 32-bit value as printf escapes.
le32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 & 255)) $((($1 >> 8) & 255)) $((($1 >> 16) & 255)) $((($1 >> 24) & 255)); }

# A disk with an MBR (one Linux partition from sector 2048 to the end, written here) and an ext4
# file system in it whose files come from DIR (mkfs.ext4 -d); fails the test when it cannot.
make_ext4_disk() { # FILE DIR
	local img=$1 dir=$2 sectors=$((40 * 2048))
	need_cmd mkfs.ext4 test || return
	rm -f "$img"
	truncate -s $((sectors * 512)) "$img"
	# Entry 1 at 446: not bootable, CHS unused, type 0x83, first LBA, sector count; then 0x55aa.
	printf "\\x00\\x00\\x00\\x00\\x83\\x00\\x00\\x00$(le32 2048)$(le32 $((sectors - 2048)))" |
		dd of="$img" bs=1 seek=446 conv=notrunc status=none
	printf '\x55\xaa' | dd of="$img" bs=1 seek=510 conv=notrunc status=none
	mkfs.ext4 -q -F -E offset=$((2048 * 512)) -d "$dir" "$img" $(((sectors - 2048) / 2))k >"$img.mkfs" 2>&1 ||
		{ fail "mkfs.ext4 failed: $(head -c 200 "$img.mkfs")"; return 1; }
}

# t_linux TRANS: the kernel finds the disk and its partition, and mounts the ext4 root. On a PVM
# host that is as far as it goes (no user space); the run ends at the mount.
t_linux() {
	local trans=$1 img=$WORK/linux-$1.img
	need_kernel vmlinux || return
	grep -q '^CONFIG_EXT4_FS=y' "$G/linux/.config" 2>/dev/null || { fail "guest kernel lacks ext4 (rebuild with scripts/build-guest.sh)"; return; }
	mkdir -p "$WORK/root-$trans/sbin" && echo lkvm > "$WORK/root-$trans/hello"
	make_ext4_disk "$img" "$WORK/root-$trans" || return
	# The vmlinux through its PVH entry: no decompressor run emulated (test-linux.sh boots the bzImage).
	run_lkvm blk-linux-$trans 0 -- run -k "$G/vmlinux" -m 256 -d "$img,trans=$trans" --rng --stats \
		-p "root=/dev/vda1 rootfstype=ext4 ro rootwait" --timeout $T --exit-on "VFS: Mounted root (ext4 filesystem) readonly" || return
	if [ "$trans" = mmio ]; then
		expect_output "virtio_mmio.device=0x200@0xc0000000:5" "the disk on the command line" || return
		expect_output "virtio-mmio: Registering device virtio-mmio.0 at 0xc0000000-0xc00001ff, IRQ 5" "Linux registering the disk" || return
	fi
	expect_output "virtio_blk virtio[0-9]: \[vda\] 81920 512-byte logical blocks" "the disk's size" || return
	expect_output " vda: vda1" "the partition table" || return
	expect_output "EXT4-fs \(vda1\): mounted filesystem" "the ext4 mount" || return
	expect_output "VFS: Mounted root \(ext4 filesystem\) readonly" "the root"
}

need_userspace() {
	if is_pvm_host; then
		skip "guest user space cannot make system calls on a PVM host (make check runs this in the emulated host)"
		return 1
	fi
}

# Guest user space from an ext4 root on virtio-blk (mmio), console on hvc0, entropy from virtio-rng:
# init reads /dev/hwrng, writes a file on the disk, and reboots; the host reads the file back.
t_userspace() {
	need_userspace || return
	[ -f "$G/bzImage" ] || { fail "$G/bzImage missing"; return; }
	need_cmd busybox guest || return
	local root=$WORK/uroot img=$WORK/userspace.img
	rm -rf "$root" && mkdir -p "$root"/{bin,dev,proc,sys,tmp,mnt}
	cp "$(command -v busybox)" "$root/bin/busybox"
	for a in sh mount umount echo cat head od wc sync reboot grep uname; do ln -s busybox "$root/bin/$a"; done
	cat > "$root/init" <<'EOF'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "LKVM-BLK-USERSPACE-OK $(uname -r) console=$(cat /sys/class/tty/console/active)"
rng=$(cat /sys/class/misc/hw_random/rng_current 2>/dev/null)
n=$(head -c 64 /dev/hwrng | wc -c)
echo "LKVM-RNG rng=$rng bytes=$n"
mount -o remount,rw / && echo "written from the guest" > /from-guest && sync && mount -o remount,ro /
echo "LKVM-BLK-WRITTEN"
reboot -f
EOF
	chmod 755 "$root/init"
	make_ext4_disk "$img" "$root" || return
	run_lkvm blk-userspace 0 -- run -k "$G/bzImage" -m 256 -d "$img,trans=mmio" --console virtio --rng \
		--virtio-transport mmio -p "root=/dev/vda1 rootfstype=ext4 ro init=/init" --timeout $T || return
	expect_output "LKVM-BLK-USERSPACE-OK .* console=.*hvc0" "user space from the ext4 root, on hvc0" || return
	expect_output "LKVM-RNG rng=virtio_rng.0 bytes=64" "64 bytes from virtio-rng" || return
	expect_output "LKVM-BLK-WRITTEN" || return
	need_cmd debugfs test || return
	debugfs -R "cat /from-guest" "$img?offset=$((2048 * 512))" 2>/dev/null | grep -q "written from the guest" ||
		fail "the guest's file is not in the image"
}

skip_unless_kvm
if [ "${BLK_TESTS-}" = userspace ]; then
	run_test blk-userspace t_userspace
else
	run_test blk-verify-pci t_verify pci
	run_test blk-verify-mmio t_verify mmio
	run_test blk-verify-mmio-sync t_verify mmio ,aio=sync
	run_test blk-verify-pci-buffered t_verify pci ,direct=off
	run_test blk-snapshot t_snapshot 10
	run_test blk-qcow2-convert t_qcow2 convert
	run_test blk-qcow2-overlay t_qcow2 overlay
	run_test blk-qcow2-snapshot t_qcow2 snapshot
	run_test blk-qcow2-refused t_qcow2_refused
	run_test blk-ro-mmio t_read_only mmio
	run_test blk-ro-pci t_read_only pci
	run_test blk-bad-disk t_bad_disk
	run_test blk-lock t_lock
	run_test blk-dtb t_dtb
	run_test blk-linux-mmio t_linux mmio
	run_test blk-linux-pci t_linux pci
	run_test blk-userspace t_userspace
fi
finish_tests

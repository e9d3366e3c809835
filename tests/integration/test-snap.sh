#!/usr/bin/env bash
# lkvm snapshot and lkvm run --restore (issue 31): a counting guest saved mid-sequence and restored twice at once goes on with the exact sequence and continuous clocks; bad snapshots and devices that cannot be saved are refused in one line.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=${SUMMARY_PREFIX:-snap}
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=60         # lkvm --timeout
TICK_MS=100  # the ticks guest's period: each line's kvm-clock reading is TICK_MS after the last
GAP_S=1      # how long the saved VM lies in its file before it is restored (see t_sequence)
JUMP_MS=400  # a tick later than this after the one before is a clock that jumped (< GAP_S)
# The emulated host's guests run in bursts (QEMU TCG): a longer bound, and a longer gap above it.
if [ "$(host_kind)" = emulated-svm ]; then
	GAP_S=4
	JUMP_MS=2000
fi
PIDS_FILE=$LOG_DIR/snap.pids # start_vm's: lib.sh kills them when the script ends
: >"$PIDS_FILE"

# last_tick LOG: the number of the last whole TICK line in LOG.
last_tick() { grep -oE '^TICK n=[0-9]+ kvmclock_ns=[0-9]+ tsc=[0-9]+$' "$1" | tail -n 1 | sed -E 's/TICK n=([0-9]+) .*/\1/'; }

# ticks_vm NAME LOG [ARGS...]: the ticks guest (tests/guest/ticks.c) in the background.
ticks_vm() {
	local name=$1 log=$2
	shift 2
	need_guest ticks || return
	VM_TIMEOUT=$T start_vm "$name" "$log" -k "$ELF" -m 64 -p "tick_ms=$TICK_MS" "$@"
}

# snap_of NAME FILE LOG [ARGS...]: lkvm snapshot, which must succeed.
snap_of() {
	local name=$1 file=$2 log=$3
	shift 3
	ctl "$log" snapshot "$name" "$file" "$@"
	expect_status 0 || return
	expect_output "^$name: snapshot $file \(" "the snapshot's line"
}

# check_sequence SAVED-LOG RESTORED-LOG [HZ-LOG]: the restored guest's lines go on from the saved
# guest's last one: the TICK numbers with no gap and no repeat, kvm-clock and TSC never back and
# never jumping (each tick TICK_MS after the one before, give or take a loaded host's delay,
# however long the VM lay in its file). A line cut by the snapshot is finished by the restored
# guest. HZ-LOG: the log with the guest's first line (its TSC's rate), when SAVED-LOG is itself a
# restored one's. On a PVM host the TSC is the host's whatever KVM is told (no per-vCPU offset:
# the pause tests' pause-guest-tsc), so there it only must not go back.
check_sequence() {
	local tsc_still=1
	is_pvm_host && tsc_still=0
	"$PY" - "$1" "$2" "$TICK_MS" "${3:-$1}" "$tsc_still" "$JUMP_MS" <<'EOF'
import re, sys
# newline="": lkvm's "\r\n" before its own line is how a cut line is told (no translation).
saved, restored = (open(f, newline="").read() for f in sys.argv[1:3])
tick_ms = int(sys.argv[3])
tsc_still, jump_ms = sys.argv[5] == "1", int(sys.argv[6])
LINE = re.compile(r"TICK n=(\d+) kvmclock_ns=(\d+) tsc=(\d+)")
def guest_lines(t):
    """The guest's lines; one that lkvm's own line cut (lkvm ends it with "\\r\\n", or writes
    straight after it) is followed by None."""
    out = []
    for l in t.split("\n"):
        i = l.find("lkvm: ")
        if i == 0:
            continue
        if i > 0:
            out += [l[:i], None]
        elif l.endswith("\r"):
            out += [l[:-1], None]
        else:
            out.append(l)
    return out
def ticks_of(lines):
    return [tuple(map(int, m.groups())) for l in lines if l is not None for m in [LINE.fullmatch(l)] if m]
s_lines, r_lines = guest_lines(saved), [l for l in guest_lines(restored) if l != ""]
# The line the snapshot cut: its start in the saved log, its end the restored guest's first.
if None in s_lines and r_lines and r_lines[0] is not None:
    cut = s_lines.index(None)
    s_lines = s_lines[:cut - 1] + [s_lines[cut - 1] + r_lines[0]]
    r_lines = r_lines[1:]
# A line lkvm's stop cut at the end of the restored log is no tick.
if None in r_lines:
    r_lines = r_lines[:r_lines.index(None) - 1]
hz = int(re.search(r"tsc_hz=(\d+)", open(sys.argv[4]).read()).group(1))
ticks = ticks_of(s_lines) + ticks_of(r_lines)
last_saved = len(ticks_of(guest_lines(saved)))
if last_saved < 2 or len(ticks) < last_saved + 3:
    sys.exit("too few ticks: %d saved, %d after the restore" % (last_saved, len(ticks) - last_saved))
for i in range(1, len(ticks)):
    (n0, ns0, tsc0), (n1, ns1, tsc1) = ticks[i - 1], ticks[i]
    where = "around the restore" if i == last_saved else "at tick %d" % n1
    if n1 != n0 + 1:
        sys.exit("tick %d after tick %d %s: a number lost or repeated" % (n1, n0, where))
    dns, dtsc_ms = (ns1 - ns0) / 1e6, (tsc1 - tsc0) * 1e3 / hz
    # A tick starts once kvm-clock passed the last one's reading + TICK_MS: less is a clock
    # gone wrong; JUMP_MS or more a jump (the time in the file, GAP_S, would show whole).
    if not (tick_ms * 0.99 <= dns < jump_ms) or not (0 < dtsc_ms < (jump_ms if tsc_still else 1e9)):
        sys.exit("kvm-clock +%.1f ms, TSC +%.1f ms %s (each tick is %d ms)" % (dns, dtsc_ms, where, tick_ms))
print("%d ticks saved, %d after the restore, kvm-clock%s continuous across it" % (last_saved, len(ticks) - last_saved, " and the TSC" if tsc_still else ""))
EOF
}

# Saved mid-sequence and stopped, then restored twice at once: each copy goes on with the exact
# sequence from where the saved one stopped, with its clocks continuous.
t_sequence() {
	local snap=$LOG_DIR/seq.snap pids=() i rc=0
	ticks_vm snap-seq snap-seq-saved -c 2 || return
	local saved_log=$VM_LOG saved_pid=$VM_PID
	wait_log "$saved_log" 'TICK n=5 ' 20 || return
	snap_of snap-seq "$snap" snap-seq-snapshot --stop || return
	wait_exit "$saved_pid" 20 || return
	[ "$EXIT_STATUS" = 3 ] || { fail "the saved VM exited with $EXIT_STATUS, expected 3 (stopped)"; return; }
	# A gap the clocks must not show: time passes while the VM is only a file (a deliberate
	# wait, not one for an event).
	sleep "$GAP_S"
	for i in 1 2; do
		VM_TIMEOUT=$T start_vm snap-seq-r$i snap-seq-r$i --restore "$snap" --debug
		pids+=("$VM_PID")
	done
	local want=$(($(last_tick "$saved_log") + 6))
	for i in 1 2; do
		VM_PID=${pids[$((i - 1))]}
		wait_log "$LOG_DIR/snap-seq-r$i.log" "TICK n=$want " 20 || rc=1
	done
	for i in 1 2; do ctl snap-seq-stop-r$i stop "snap-seq-r$i"; done
	[ "$rc" = 0 ] || return
	for i in 1 2; do
		check_sequence "$saved_log" "$LOG_DIR/snap-seq-r$i.log" >"$LOG_DIR/snap-seq-check-r$i.log" 2>&1 ||
			{ fail "restored copy $i: $(tail -n 1 "$LOG_DIR/snap-seq-check-r$i.log")"; return; }
		# The restore's time to the guest's first instruction, for the record.
		grep -o 'first guest instruction at [0-9.]* ms' "$LOG_DIR/snap-seq-r$i.log" >&2
	done
}

# A restored VM is one like any other: listed, paused and resumed, snapshotted again and that
# snapshot restored; a snapshot of a paused VM leaves it paused.
t_again() {
	local snap1=$LOG_DIR/again1.snap snap2=$LOG_DIR/again2.snap
	ticks_vm snap-again snap-again || return
	wait_log "$VM_LOG" 'TICK n=2 ' 20 || return
	snap_of snap-again "$snap1" snap-again-snap1 --stop || return
	wait_exit "$VM_PID" 20 || return
	local want=$(($(last_tick "$VM_LOG") + 3))
	VM_TIMEOUT=$T start_vm snap-again2 snap-again2 --restore "$snap1"
	wait_log "$VM_LOG" "TICK n=$want " 20 || return
	ctl snap-again-pause pause snap-again2 && expect_status 0 || return
	snap_of snap-again2 "$snap2" snap-again-snap2 || return
	ctl snap-again-list list
	expect_output '^snap-again2 +[0-9]+ +paused ' 'the VM still paused after its snapshot' || return
	ctl snap-again-stop stop snap-again2
	want=$(($(last_tick "$VM_LOG") + 4))
	VM_TIMEOUT=$T start_vm snap-again3 snap-again3 --restore "$snap2"
	wait_log "$VM_LOG" "TICK n=$want " 20 || return
	ctl snap-again-stop3 stop snap-again3
	check_sequence "$LOG_DIR/snap-again2.log" "$VM_LOG" "$LOG_DIR/snap-again.log" >"$LOG_DIR/snap-again-check.log" 2>&1 ||
		fail "the second restore: $(tail -n 1 "$LOG_DIR/snap-again-check.log")"
}

# A disk saved: the restore names no image (one line saying to give -d, with the saved size);
# the image given restores (the ticks go on), and a second restore beside it on the same image is
# refused (its lock). A clone restored on the same image behind snapshot=on (its own overlay) goes
# on; a VM whose disk has an overlay cannot be saved yet: one line. Of another size, or gone,
# refused in one line.
t_disk() {
	local img=$LOG_DIR/snap-disk.img snap=$LOG_DIR/disk.snap want
	rm -f "$img" && truncate -s 1M "$img" || { fail "cannot make $img"; return; }
	ticks_vm snap-disk snap-disk -d "$img" || return
	wait_log "$VM_LOG" 'TICK n=1 ' 20 || return
	snap_of snap-disk "$snap" snap-disk-snap --stop || return
	wait_exit "$VM_PID" 20 || return
	want=$(($(last_tick "$VM_LOG") + 3))
	bad_restore snap-disk-none "$snap" "--restore: the snapshot's machine has a disk \(virtio-blk 0, 1 MiB\): give it with -d IMG" || return
	VM_TIMEOUT=$T start_vm snap-disk2 snap-disk2 --restore "$snap" -d "$img"
	wait_log "$VM_LOG" "TICK n=$want " 20 || return
	# A second clone of a VM with a read-write disk would write the same image: refused.
	bad_restore snap-disk-second "$snap" "virtio-blk: disk .*snap-disk\.img is in use by another process \(locked for writing\)" -d "$img" || return
	ctl snap-disk-stop stop snap-disk2
	wait_exit "$VM_PID" 20 || return
	VM_TIMEOUT=$T start_vm snap-disk-clone snap-disk-clone --restore "$snap" -d "$img,snapshot=on"
	wait_log "$VM_LOG" "TICK n=$want " 20 || return
	ctl snap-disk-clone-snap snapshot snap-disk-clone "$LOG_DIR/clone.snap"
	expect_status 1 || return
	one_error_line "snap-disk-clone: virtio-blk 0: virtio-blk: .*snap-disk.img \\(overlay\\): a snapshot of this disk is not supported yet" || return
	ctl snap-disk-clone-stop stop snap-disk-clone
	wait_exit "$VM_PID" 20 || return
	truncate -s 2M "$img"
	bad_restore snap-disk-resized "$snap" ".*snap-disk\.img is not the snapshot's \(size 2097152, was 1048576\)" -d "$img" || return
	rm -f "$img"
	bad_restore snap-disk-gone "$snap" ".*snap-disk\.img.*No such file or directory.*" -d "$img"
}

# One saved VM for the bad-file cases.
make_bad_base() {
	BASE=$LOG_DIR/bad-base.snap
	ticks_vm snap-bad snap-bad || return
	wait_log "$VM_LOG" 'TICK n=1 ' 20 || return
	snap_of snap-bad "$BASE" snap-bad-snap --stop || return
	wait_exit "$VM_PID" 20
}

# bad_restore LOG FILE REGEX [ARGS...]: lkvm run --restore FILE: status 1, one error line.
bad_restore() {
	local log=$1 file=$2 re=$3
	shift 3
	run_lkvm "$log" 1 -- run --restore "$file" --timeout 10 "$@" || return
	one_error_line "$re"
}

# Truncated, a flipped byte, another format version, more vCPUs than saved, -k or -p given, no such
# file, not a snapshot: one line each, status 1, no crash.
t_bad() {
	local f=$LOG_DIR/bad
	make_bad_base || return
	head -c $(($(stat -c %s "$BASE") - 100)) "$BASE" >"$f-trunc.snap"
	bad_restore snap-bad-trunc "$f-trunc.snap" '--restore: snapshot .*truncated at byte .*' || return
	cp "$BASE" "$f-flip.snap"
	printf '\xff' | dd of="$f-flip.snap" bs=1 seek=200 conv=notrunc status=none
	bad_restore snap-bad-flip "$f-flip.snap" '--restore: snapshot .*(checksum|CRC).*' || return
	cp "$BASE" "$f-version.snap"
	printf '\x07' | dd of="$f-version.snap" bs=1 seek=8 conv=notrunc status=none
	bad_restore snap-bad-version "$f-version.snap" '--restore: snapshot .*format version 7.*' || return
	bad_restore snap-bad-cpus "$BASE" '.*has 1 vCPUs?, this machine 2.*' -c 2 || return
	# What sets up a boot means nothing to a restore: refused, not ignored.
	bad_restore snap-bad-kernel "$BASE" '--restore: --kernel: a restore boots nothing, .*' -k "$ELF" || return
	bad_restore snap-bad-params "$BASE" '--restore: --params: a restore boots nothing, .*' -p quiet || return
	bad_restore snap-bad-missing "$f-nosuch.snap" '--restore: .*No such file or directory.*' || return
	head -c 4096 /dev/zero >"$f-zero.snap"
	bad_restore snap-bad-zero "$f-zero.snap" '--restore: snapshot .*not an lkvm snapshot.*'
}

# A VM with a 9p share (no fid: the ticks guest mounts nothing) is saved and stopped, and
# restored with the share given again: the ticks go on. Without --share, or with the share's
# directory gone, the restore is refused in one line.
t_share() {
	local snap=$LOG_DIR/share.snap dir=$LOG_DIR/snap-share-dir last
	rm -rf "$dir" && mkdir -p "$dir"
	ticks_vm snap-share snap-share --share "$dir" || return
	wait_log "$VM_LOG" 'TICK n=1 ' 20 || return
	snap_of snap-share "$snap" snap-share-snap --stop || return
	wait_exit "$VM_PID" 20 || return
	last=$(grep -o 'TICK n=[0-9]*' "$LOG_DIR/snap-share.log" | tail -n 1 | cut -d= -f2)
	bad_restore snap-share-none "$snap" "--restore: the snapshot's machine has a 9p share \(virtio-9p 0\): give it with --share DIR" || return
	VM_TIMEOUT=$T start_vm snap-share2 snap-share2 --restore "$snap" --share "$dir"
	wait_log "$VM_LOG" "TICK n=$((last + 3)) " 20 || return
	ctl snap-share-stop stop snap-share2
	rmdir "$dir"
	bad_restore snap-share-gone "$snap" ".*$dir.*No such file or directory.*" --share "$dir"
}

EDIT=$(dirname "$0")/snap-edit.py

# A snapshot is data (issue 40): the ticks guest saved with a NIC on a tap (script=none), its
# saved options edited as a hostile sender would (script= a script that leaves a marker; a disk,
# a share, -- CMD's machine added; checksums resealed). Restored without the NIC: one line naming -n, and
# the script never runs; restored with this command line's NIC: it runs on, on that NIC, and
# the script still never runs. Each other resource added: one line naming its option.
t_hostile() {
	skip_unless_net || return
	need_guest ticks || return
	in_netns t_hostile_in
}

t_hostile_in() {
	local base=$LOG_DIR/hostile-base.snap evil=$LOG_DIR/hostile.snap dir marker last
	local nic="mode=tap,tapif=lkvmhost0,script=none"
	dir=$(mktemp -d "${TMPDIR:-/tmp}/lkvm-hostile.XXXXXX") || { fail "mktemp"; return; }
	at_exit "rm -rf '$dir'"
	marker=$dir/script-ran
	printf '#!/bin/sh\ntouch %s\n' "$marker" >"$dir/evil.sh" && chmod 755 "$dir/evil.sh"
	truncate -s 1M "$dir/victim.img"
	ticks_vm snap-hostile snap-hostile -n "$nic" || return
	wait_log "$VM_LOG" 'TICK n=1 ' 20 || return
	snap_of snap-hostile "$base" snap-hostile-snap --stop || return
	wait_exit "$VM_PID" 20 || return
	last=$(last_tick "$VM_LOG")
	"$PY" "$EDIT" "$base" "$evil" --sub script=none "script=$dir/evil.sh" ||
		{ fail "snap-edit.py could not edit $base"; return; }
	grep -q "script=$dir/evil.sh" "$evil" || { fail "the edited snapshot lacks the script"; return; }
	bad_restore snap-hostile-nic "$evil" "--restore: the snapshot's machine has a NIC \(virtio-net 0\): give it with -n OPTS .*"
	[ ! -e "$marker" ] || { fail "the snapshot's script ran at a refused restore"; return; }
	VM_TIMEOUT=$T start_vm snap-hostile2 snap-hostile2 --restore "$evil" -n "mode=tap,tapif=lkvmmine0,script=none"
	wait_log "$VM_LOG" "TICK n=$((last + 3)) " 20 || return
	ip netns exec "$NETNS" ip link show lkvmmine0 >/dev/null 2>&1 || { fail "the command line's tap lkvmmine0 is not there"; return; }
	ctl snap-hostile-stop stop snap-hostile2
	wait_exit "$VM_PID" 20 || return
	[ ! -e "$marker" ] || { fail "the snapshot's script ran"; return; }
	"$PY" "$EDIT" "$base" "$evil" -d "$dir/victim.img" && bad_restore snap-hostile-disk "$evil" "--restore: the snapshot's machine has a disk \(virtio-blk 0\): give it with -d IMG" -n "$nic" || return
	"$PY" "$EDIT" "$base" "$evil" --share "$dir" && bad_restore snap-hostile-share "$evil" "--restore: the snapshot's machine has a 9p share \(virtio-9p 0\): give it with --share DIR" -n "$nic" || return
	"$PY" "$EDIT" "$base" "$evil" --rec 65 01 -- sh && bad_restore snap-hostile-cmd "$evil" "--restore: the snapshot's machine runs a command on the host's files .*give -- .*" -n "$nic"
}

# lkvm snapshot into a directory every user may write, without the sticky bit (issue 40): held by
# the test build between its write and its rename, another user (uid OTHER_UID, by setpriv) cannot
# write into the directory lkvm writes in, but renames it away and puts its own in its place, with
# its own file under the snapshot's name. The snapshot still ends at FILE, exactly as lkvm wrote it:
# the other user's bytes are not there, and FILE restores (the ticks go on).
OTHER_UID=64123
t_place() {
	need_testhooks && need_guest ticks && need_cmd setpriv test || return
	local shared fifo snap log=$LOG_DIR/snap-place-snap.log pid sub last
	shared=$(mktemp -d "${TMPDIR:-/tmp}/lkvm-snap-shared.XXXXXX") && fifo=$shared.go && mkfifo "$fifo" ||
		{ fail "cannot make a directory and a FIFO in ${TMPDIR:-/tmp}"; return; }
	at_exit "rm -rf '$shared' '$fifo'"
	chmod 0777 "$shared" && snap=$shared/vm.snap
	as_other() { setpriv --reuid=$OTHER_UID --regid=$OTHER_UID --clear-groups -- sh -c "$1" 2>/dev/null; }
	ticks_vm snap-place snap-place || return
	local vm_pid=$VM_PID vm_log=$VM_LOG
	wait_log "$vm_log" 'TICK n=1 ' 20 || return
	LKVM_TEST_PAUSE_AT=snapshot-rename LKVM_TEST_PAUSE_GO=$fifo timeout -s KILL 60 "$LKVM_TESTHOOKS" \
		snapshot snap-place "$snap" --stop >"$log" 2>&1 &
	pid=$!
	VM_PID=$pid wait_log "$log" '^lkvm-test: paused at snapshot-rename: ' 30 || { : >"$fifo"; return; }
	sub=$(sed -n 's/^lkvm-test: paused at snapshot-rename: //p' "$log")
	if as_other "echo theirs >'$shared/$sub/x'"; then
		: >"$fifo"
		fail "another user wrote into lkvm's directory $sub"
		return
	fi
	as_other "mv '$shared/$sub' '$shared/moved' && mkdir '$shared/$sub' && echo theirs >'$shared/$sub/snapshot'" ||
		{ : >"$fifo"; fail "the other user could not swap the directory's name (the test's premise)"; return; }
	: >"$fifo" # lkvm goes on: the rename
	wait "$pid"
	LAST_STATUS=$? LAST_LOG=$log
	expect_status 0 && expect_output "^snap-place: snapshot $snap \\(" "the snapshot's line" || return
	! grep -q theirs "$snap" || { fail "FILE holds the other user's bytes"; return; }
	wait_exit "$vm_pid" 20 || return
	last=$(last_tick "$vm_log")
	VM_TIMEOUT=$T start_vm snap-place2 snap-place2 --restore "$snap"
	wait_log "$VM_LOG" "TICK n=$((last + 3)) " 20 || return
	ctl snap-place-stop stop snap-place2
}

LINUX_T=${LINUX_TIMEOUT:-600} # a kernel boot on a loaded PVM host (test-linux.sh's bound)
ROOTDELAY=3                   # s the kernel sleeps before it looks for its root (and panics)
LINUX_GAP_S=8                 # the saved kernel lies this long in its file (see t_linux)
# The emulated host takes seconds to notice the kernel's line and snapshot it: a longer sleep,
# and a gap longer than it, so that a clock that jumped by the gap still shows.
if [ "$(host_kind)" = emulated-svm ]; then
	ROOTDELAY=12
	LINUX_GAP_S=20
fi

# kernel_stamp REGEX LOG: the printk time (s) of the first console line matching REGEX.
kernel_stamp() { grep -m1 -E "^\[ *[0-9]+\.[0-9]+\] .*$1" "$2" | sed -E 's/^\[ *([0-9]+\.[0-9]+)\].*/\1/'; }

# The Linux guest (2 vCPUs, 256 MiB, PVH vmlinux) saved while its kernel sleeps ROOTDELAY s
# before mounting a root, stopped, restored LINUX_GAP_S s later: the restored kernel's own
# timers end the sleep, its console goes on (it panics for want of a root: pvpanic, status 2),
# and its clock shows the sleep as ROOTDELAY s, not ROOTDELAY + the time in the file. The
# restore's time to the first instruction goes to the log.
t_linux() {
	local snap=$LOG_DIR/linux.snap t1 t2
	need_kernel vmlinux || return
	VM_TIMEOUT=$LINUX_T start_vm snap-linux snap-linux-saved -k "$G/vmlinux" -m 256 -c 2 \
		-p "rootdelay=$ROOTDELAY"
	local saved_log=$VM_LOG
	wait_log "$saved_log" "Waiting $ROOTDELAY sec before mounting root device" "$LINUX_T" || return
	snap_of snap-linux "$snap" snap-linux-snapshot --stop || return
	grep -o '(.*)' "$LAST_LOG" >&2
	wait_exit "$VM_PID" 30 || return
	sleep "$LINUX_GAP_S" # the time in the file (a deliberate wait, not one for an event)
	VM_TIMEOUT=$LINUX_T start_vm snap-linux-r snap-linux-restored --restore "$snap" --debug
	end_vm
	expect_status 2 || return
	expect_output "Kernel panic - not syncing: VFS: Unable to mount root fs" "the restored kernel's panic" || return
	grep -o 'first guest instruction at [0-9.]* ms' "$VM_LOG" >&2
	t1=$(kernel_stamp "Waiting $ROOTDELAY sec before mounting" "$saved_log")
	t2=$(kernel_stamp "Kernel panic - not syncing" "$VM_LOG")
	awk -v a="$t1" -v b="$t2" -v d="$ROOTDELAY" -v g="$LINUX_GAP_S" 'BEGIN { exit !(a != "" && b != "" && b - a >= d && b - a < g) }' ||
		{ fail "the kernel's clock: the sleep began at [$t1], the panic after it at [$t2] (${ROOTDELAY} s asleep, ${LINUX_GAP_S} s in the file)"; return; }
	echo "kernel clock: asleep at [$t1], panic at [$t2]" >&2
}

# A NIC on a tap saved in the middle of net-bench's echoes (rr against net-peer) and stopped, then
# restored with the tap given again: the transactions go on (at least 20 more frames through the
# tap), every echo carries the bytes sent, at most the one in flight at the snapshot is lost, and
# the guest's count agrees with the peer's (each frame out was echoed once).
t_net() {
	skip_unless_net || return
	need_guest net-bench || return
	in_netns t_net_in
}

t_net_in() {
	local snap=$LOG_DIR/net.snap tap=lkvmsnap0 saved_pid before after b pf n lost
	local nic="mode=tap,tapif=$tap,script=none"
	tap_up "$tap" || return
	peer_start snap-net echo "$tap" $((T + 10)) 128 || return
	VM_TIMEOUT=$T start_vm snap-net snap-net-saved -k "$ELF" -m 64 -n "$nic" -p "bench=rr size=128 secs=4"
	saved_pid=$VM_PID
	if ! wait_until 20 tap_rx_above "$tap" 200; then
		peer_stop
		fail "fewer than 200 frames from the guest before the snapshot"
		return
	fi
	snap_of snap-net "$snap" snap-net-snapshot --stop && wait_exit "$saved_pid" 20 || { peer_stop; return; }
	before=$(tap_stat "$tap" rx_packets)
	VM_TIMEOUT=$T start_vm snap-net-r snap-net-restored --restore "$snap" -n "$nic"
	end_vm
	peer_stop
	expect_status 0 || return
	b=$(grep '^BENCH ' "$LAST_LOG") pf=$(kv frames "$(grep '^PEER ' "$PEER_LOG")")
	n=$(kv transactions "$b") lost=$(kv lost "$b")
	[ -n "$n" ] && [ -n "$pf" ] || { fail "no BENCH line or PEER line"; return; }
	[ "$(kv bad "$b")" = 0 ] || { fail "$(kv bad "$b") echoes differ from what was sent"; return; }
	[ "$lost" -le 1 ] || { fail "$lost transactions lost (at most the one in flight)"; return; }
	[ "$pf" = $((n + lost)) ] || { fail "peer echoed $pf frames for $n transactions + $lost lost"; return; }
	after=$(($(tap_stat "$tap" rx_packets) - before))
	[ "$after" -ge 20 ] || { fail "$after frames from the guest after the restore (20 wanted)"; return; }
	echo "$n transactions, $after after the restore, $lost lost" >&2
}

# run -- sh, its stdin a FIFO: saved at the shell's prompt (after a first command's output),
# stopped, restored with a new stdin (and --share and -- again: host resources are the
# restoring command line's): a command typed there prints and its status is lkvm's.
# The root and a --share are virtio-fs (--fs auto on the project's kernel): the shell's
# directory in the share and a file it holds open there (fd 3) are saved and found again, and
# what it reads from fd 3 and writes after the restore reaches the host.
# Guest user space: the emulated host (a skip on a PVM host). FIFOs in /tmp: the emulated
# host's checkout is a 9p share, which holds none.
t_shell() {
	local snap=$LOG_DIR/shell.snap in1 in2 out1=$LOG_DIR/snap-shell-saved.out out2=$LOG_DIR/snap-shell-restored.out pid
	local share=$LOG_DIR/snap-shell-share
	skip_unless_userspace || return
	need_kernel bzImage || return
	rm -rf "$share" && mkdir -p "$share" && echo held-line >"$share/held" || { fail "cannot make $share"; return; }
	in1=$(mktemp -u "${TMPDIR:-/tmp}/lkvm-snap-in1.XXXXXX") in2=$(mktemp -u "${TMPDIR:-/tmp}/lkvm-snap-in2.XXXXXX")
	mkfifo "$in1" "$in2" || { fail "mkfifo in ${TMPDIR:-/tmp}"; return; }
	at_exit "rm -f '$in1' '$in2'"
	timeout -s KILL $T "$LKVM" run -k "$G/bzImage" --name snap-shell --user root --share "$share:/mnt/s" -- sh \
		<"$in1" >"$out1" 2>"$LOG_DIR/snap-shell-saved.err" &
	pid=$!
	exec 7>"$in1"
	echo 'exec 3</mnt/s/held; cd /mnt/s && echo ready-$((40 + 2))' >&7
	VM_PID=$pid wait_log "$out1" '^ready-42$' $T || { exec 7>&-; return; }
	snap_of snap-shell "$snap" snap-shell-snapshot --stop || { exec 7>&-; return; }
	exec 7>&-
	wait "$pid"
	timeout -s KILL $T "$LKVM" run --restore "$snap" --name snap-shell-r --user root --share "$share:/mnt/s" -- <"$in2" >"$out2" 2>"$LOG_DIR/snap-shell-restored.err" &
	pid=$!
	echo 'read -r l <&3; echo "$l" >copy; echo after-$((6 * 7)); exit 5' >"$in2"
	wait "$pid"
	LAST_STATUS=$? LAST_LOG=$LOG_DIR/snap-shell-restored.err
	expect_status 5 || return
	grep -qx 'after-42' "$out2" || { fail "the restored shell's output lacks after-42: $(head -c 200 "$out2" | tr '\n' '|')"; return; }
	[ "$(cat "$share/copy" 2>&1)" = held-line ] || fail "the share's copy after the restore: '$(head -c 100 "$share/copy" 2>&1)'"
}

skip_unless_kvm
# A guest holding more of a share's nodes than its descriptor cache keeps (RLIMIT_NOFILE 256:
# caps of a few dozen; 300 files walked over the virtio-fs root): the snapshot stats every held
# node on the control thread, reopening the evicted ones by name (its filter allows openat2;
# without it lkvm stopped with 159), then the restored guest (restored with 1024: the restore
# itself holds more) finishes its command (status 0, its count of the tree). The guest waits on
# its stdin, a FIFO nobody writes while it is saved, then the restored run's (EOF at once): never
# for a fixed time.
t_evicted() {
	local snap=$LOG_DIR/evicted.snap tree=$LOG_DIR/snap-evicted-tree out=$LOG_DIR/snap-evicted.out pid in
	skip_unless_userspace || return
	need_kernel bzImage || return
	rm -rf "$tree" && mkdir -p "$tree" && (cd "$tree" && for i in $(seq 1 30); do
		mkdir "d$i" && touch "d$i/f"{1..9}; done) || { fail "cannot make $tree"; return; }
	in=$(mktemp -u "${TMPDIR:-/tmp}/lkvm-snap-evicted.XXXXXX")
	mkfifo "$in" || { fail "mkfifo in ${TMPDIR:-/tmp}"; return; }
	at_exit "rm -f '$in'"
	(ulimit -Sn 256 && ulimit -Hn 256 && exec timeout -s KILL $T "$LKVM" run -k "$G/bzImage" \
		--name snap-evicted --user root -- sh -c 'ls -R "$1" >/dev/null; echo ready; read -r x
		ls -R "$1" | grep -c "^f"' sh "$tree") <"$in" >"$out" 2>"$LOG_DIR/snap-evicted-saved.err" &
	pid=$!
	exec 7>"$in" # the guest's read waits: nothing is written
	VM_PID=$pid wait_log "$out" '^ready' $T || { exec 7>&-; return; }
	snap_of snap-evicted "$snap" snap-evicted-snapshot --stop || { exec 7>&-; return; }
	exec 7>&-
	wait "$pid"
	(ulimit -Sn 1024 && ulimit -Hn 1024 && exec timeout -s KILL $T "$LKVM" run --restore "$snap" \
		--name snap-evicted-r --user root --) >"$out.r" 2>"$LOG_DIR/snap-evicted-restored.err" </dev/null
	LAST_STATUS=$? LAST_LOG=$LOG_DIR/snap-evicted-restored.err
	expect_status 0 || return
	grep -qx 270 "$out.r" || fail "the restored guest counted '$(head -c 100 "$out.r")' files, not 270"
}

# SNAP_TESTS (make check's two stages): userspace, the one that runs guest user space (where it
# runs: the emulated host on a PVM host); kernel, the others; unset, all.
if [ "${SNAP_TESTS:-all}" != kernel ]; then
	run_test snap-shell t_shell
	run_test snap-evicted t_evicted
fi
if [ "${SNAP_TESTS:-all}" != userspace ]; then
	run_test snap-linux t_linux
	run_test snap-sequence t_sequence
	run_test snap-again t_again
	run_test snap-bad t_bad
	run_test snap-disk t_disk
	run_test snap-share t_share
	run_test snap-net t_net
	run_test snap-hostile t_hostile
	run_test snap-place t_place
fi
finish_tests

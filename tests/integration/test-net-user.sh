#!/usr/bin/env bash
# -n mode=user (virtio-net through passt, no tap, no root): a non-root user's guest kernel sends netconsole lines to a host UDP socket through the passt lkvm starts; socket=PATH to a passt the test started; passt killed mid-run (link down to Linux and to the net-faults guest, lkvm carries on); passt gone on every exit path; bad options; with guest user space, a non-root user's guest gets its address by DHCP and fetches a file from the host's loopback, and the TCP stream rate through passt against a tap.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=${SUMMARY_PREFIX:-net-user}
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

SINK=$REPO_ROOT/build/tools/udp-sink
# How long a guest kernel may take to boot: 600 s, as test-faults' (on a loaded 2-core PVM host
# three of these boots side by side took over 300 s); each VM's --timeout is a minute more.
T=${LINUX_TIMEOUT:-600}
VM_T=$((T + 60))
WORK=$(mktemp -d /tmp/lkvm-net-user.XXXXXX)
chmod 755 "$WORK"
# shellcheck disable=SC2034 # read by lib.sh: its VMs are killed when the script ends
PIDS_FILE=$WORK/.pids
# Every passt started here, lkvm's included, carries this in its environment: what is left of
# them when the script ends is found (and killed) by it, never by name.
TAG=LKVM_NET_USER_TEST=$$
export "${TAG?}"
# is_passt PID: the process is passt (which re-executes itself as passt.avx2 where it can).
is_passt() { case $(cat "/proc/$1/comm" 2>/dev/null) in passt | passt.*) return 0 ;; esac; return 1; }
tagged_passts() { # the pids of this script's passt processes still running
	local e p
	for e in /proc/[0-9]*/environ; do
		p=${e#/proc/}
		p=${p%/environ}
		is_passt "$p" || continue
		tr '\0' '\n' <"$e" 2>/dev/null | grep -qx "$TAG" && alive "$p" && echo "$p"
	done
	return 0
}
no_tagged_passt() { [ -z "$(tagged_passts)" ]; }
describe_passts() { # what a failure says of each one left: who started it, when, as whom
	local p
	for p in $(tagged_passts); do
		ps -o pid=,ppid=,user=,stat=,etimes=,args= -p "$p" 2>/dev/null | tr -s ' ' | tr '\n' ';'
	done
}
cleanup() {
	local p
	for p in $(tagged_passts); do kill -KILL "$p" 2>/dev/null; done
	rm -rf "$WORK"
}
at_exit cleanup

# The guest kernel only (no user space: it runs on a PVM host too): netconsole needs no init.
# Kernel mode only after boot: no initramfs, it waits for a disk that never comes.
BOOTED="Waiting for root device"

# passt gives the guest the host's own address and reaches the host's loopback through the
# gateway's (passt(1), "--no-map-gw"): netconsole's source and target are those.
HOST_IF=$(ip -4 route show default 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit } }')
GW=$(ip -4 route show default 2>/dev/null | awk '{ print $3; exit }')
GUEST_IP=$(ip -4 -o addr show dev "${HOST_IF:-none}" 2>/dev/null | awk '{ split($4, a, "/"); print a[1]; exit }')

# need_user_net: what every run here needs; skips when this machine gives passt nothing to
# work with. The emulated host always has a route (scripts/kvm-host-init makes it): there its
# absence is a failure.
need_user_net() {
	need_kernel vmlinux && need_built "$SINK" "make tools" && need_cmd passt test && need_python || return
	[ -n "$GW" ] && [ -n "$GUEST_IP" ] && return
	[ "$(host_kind)" != emulated-svm ] ||
		{ fail "the emulated host has no IPv4 default route (scripts/kvm-host-init gives it one)"; return; }
	skip "no IPv4 default route with an address: passt has none to give the guest"
}

# passt_works PREFIX...: passt starts (its user namespace and sandbox set up: it wrote its pid
# file) when run under PREFIX (empty: as root); else skips the test with passt's own words.
passt_works() {
	local out rc dir=$WORK/probe-$_T_NAME
	mkdir -m 777 "$dir"
	out=$("$@" "$PY" - "$dir/pid" <<'PYEOF' 2>&1
import os, socket, subprocess, sys, time
a, b = socket.socketpair()
p = subprocess.Popen(["passt", "--foreground", "--quiet", "--fd", str(b.fileno()), "--pid", sys.argv[1]],
                     pass_fds=(b.fileno(),), stderr=subprocess.PIPE)
b.close()
end = time.monotonic() + 20
while time.monotonic() < end:
    if p.poll() is not None:
        err = p.stderr.read().decode(errors="replace").strip().splitlines()
        print("passt exited with status %d: %s" % (p.returncode, err[-1] if err else "no message"))
        sys.exit(1)
    if os.path.exists(sys.argv[1]) and os.path.getsize(sys.argv[1]) > 0:
        a.close()
        p.wait(20)
        sys.exit(0)
    time.sleep(0.05)
p.kill()
print("passt not ready after 20 s")
sys.exit(1)
PYEOF
)
	rc=$?
	[ "$rc" = 0 ] && return 0
	skip "passt cannot run here${1:+ as this user}: $(tail -n 1 <<<"$out" | cut -c1-200)"
	return 1
}

# sink_start PORT: udp-sink on PORT (all addresses) for the VM's life; SINK_LOG, SINK_PID.
sink_start() {
	SINK_LOG=$LOG_DIR/net-user-$_T_NAME.netconsole
	"$SINK" "$1" $((VM_T + 60)) >"$SINK_LOG" 2>&1 &
	SINK_PID=$!
}
sink_stop() { kill "$SINK_PID" 2>/dev/null; wait "$SINK_PID" 2>/dev/null; }

# A UDP port of this run's own for each test (netconsole's target, through passt's mapping).
port_for() { echo $((20000 + ($$ * 8 + $1) % 40000)); }

netconsole() { # netconsole PORT: the kernel parameters that send its lines to the sink
	echo "root=/dev/vda rootwait netconsole=@$GUEST_IP/eth0,$1@$GW/"
}

# passt_child PID: the passt lkvm PID started (its child named passt), empty if none.
passt_child() {
	local c
	for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
		is_passt "$c" && echo "$c"
	done
	return 0
}

# uid_of PID: the real uid the process runs as.
uid_of() { awk '/^Uid:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }

# What a stand-in passt runs to say it is set up, as passt does: its pid into its --pid file.
# shellcheck disable=SC2016 # for the stand-in's shell
READY_SH='while [ $# -gt 1 ] && [ "$1" != --pid ]; do shift; done; echo $$ >"$2"'

# ---- (1) a non-root user, no tap, no namespace of its own: netconsole through lkvm's passt ----

# as_nobody: lkvm and passt as user nobody, no tap, no namespace of its own: sets AS_UID, AS_USER
# (a prefix that runs a command as that user, with lkvm's runtime directory AS_RT of its own) and
# AS_BIN (copies of lkvm and the guest kernel that user may run, one folder per test: a copy made
# over another test's running lkvm would fail). Skips the test where that user cannot run a VM
# or passt.
as_nobody() {
	AS_UID=$(id -u nobody 2>/dev/null) || { skip "no user nobody"; return 1; }
	local as_user="$REPO_ROOT/tests/integration/as-user.sh $WORK/kvm-node-$_T_NAME"
	mkdir -p "$WORK/kvm-node-$_T_NAME"
	# /dev/kvm for that user: a node of its own in a private mount namespace (as-user.sh). Where
	# that cannot be made and /dev/kvm is not open to others, the user cannot run a VM at all.
	# shellcheck disable=SC2086
	if ! $as_user "$AS_UID" true 2>/dev/null; then
		skip "cannot give user $AS_UID a /dev/kvm node (as-user.sh needs root; /dev/kvm is $(stat -c '%a %U' /dev/kvm))"
		return 1
	fi
	# shellcheck disable=SC2086
	$as_user "$AS_UID" sh -c 'exec 3<>/dev/kvm' 2>/dev/null ||
		{ skip "user $AS_UID cannot open /dev/kvm even with a node of its own"; return 1; }
	# shellcheck disable=SC2086
	passt_works $as_user "$AS_UID" || return
	AS_BIN=$WORK/bin-$_T_NAME
	copy_for_others "$AS_BIN" "$LKVM" "$G/vmlinux" "$G/bzImage" || return
	AS_RT=$WORK/rt-$_T_NAME
	mkdir -m 700 "$AS_RT" && chown "$AS_UID:$AS_UID" "$AS_RT" # as-user.sh: the uid's own gid
	AS_USER="$as_user $AS_UID env LKVM_RUNTIME_DIR=$AS_RT"
}

t_netconsole_nonroot() {
	need_user_net || return
	as_nobody || return
	local uid=$AS_UID port
	port=$(port_for 1)
	sink_start "$port"
	# shellcheck disable=SC2034 # read by start_vm
	local LKVM_PREFIX=$AS_USER VM_TIMEOUT=$VM_T
	LKVM=$AS_BIN/lkvm start_vm - "net-user-$_T_NAME" -k "$AS_BIN/vmlinux" -m 256 --stats=json \
		-n mode=user -p "$(netconsole "$port")"
	local passt=""
	wait_until 30 test -n "$(passt_child "$VM_PID")"
	passt=$(passt_child "$VM_PID")
	wait_log "$SINK_LOG" "$BOOTED" "$T" || { kill -KILL "$VM_PID"; sink_stop; return 1; }
	local lkvm_uid passt_uid
	lkvm_uid=$(uid_of "$VM_PID") passt_uid=$(uid_of "$passt")
	kill -TERM "$VM_PID"
	end_vm
	sink_stop
	expect_status 143 || return
	[ -n "$passt" ] || { fail "lkvm started no passt child"; return; }
	[ "$lkvm_uid" = "$uid" ] && [ "$passt_uid" = "$uid" ] ||
		{ fail "lkvm ran as uid $lkvm_uid and passt as $passt_uid, not $uid"; return; }
	grep -q "$BOOTED" "$SINK_LOG" ||
		{ fail "no netconsole line '$BOOTED' reached the host's UDP socket through passt"; return; }
	grep -q "Linux version" "$SINK_LOG" ||
		{ fail "netconsole's first lines (Linux version) did not reach the host"; return; }
	echo "netconsole lines through passt: $(grep -c . "$SINK_LOG")" >&2
	# The frames went through the device's counters (tx0) and passt is gone with lkvm.
	local txp
	txp=$(qstat tx0 packets)
	[ "${txp:-0}" -ge "$(grep -c . "$SINK_LOG")" ] ||
		{ fail "tx0 counted ${txp:-no} frames, fewer than the $(grep -c . "$SINK_LOG") lines the sink got"; return; }
	wait_until 10 gone "$passt" || { fail "passt (pid $passt) still runs after lkvm ended"; return; }
	expect_no_output "is gone" "a link-down line"
}

# ---- (2) socket=PATH: a passt the test started, lkvm connecting to it ----

t_socket() {
	need_user_net || return
	passt_works || return
	local dir=$WORK/sock-$_T_NAME port
	mkdir -m 777 "$dir" # passt makes its socket as the user it runs as (nobody, from root)
	passt --foreground --quiet --socket "$dir/passt.sock" --pid "$dir/passt.pid" \
		>"$LOG_DIR/net-user-$_T_NAME.passt" 2>&1 &
	local ppid=$!
	wait_until 20 test -S "$dir/passt.sock" ||
		{ kill -KILL "$ppid"; fail "passt --socket made no socket in 20 s"; return; }
	port=$(port_for 2)
	sink_start "$port"
	VM_TIMEOUT=$VM_T start_vm - "net-user-$_T_NAME" -k "$G/vmlinux" -m 256 \
		-n "mode=user,socket=$dir/passt.sock" -p "$(netconsole "$port")"
	# The first lines are enough here (netconsole sends the boot log so far when it starts).
	if ! wait_log "$SINK_LOG" "Linux version" "$T"; then
		kill -KILL "$VM_PID" "$ppid"
		sink_stop
		return 1
	fi
	local children
	children=$(passt_child "$VM_PID")
	kill -TERM "$VM_PID"
	end_vm
	sink_stop
	local still=0
	alive "$ppid" && still=1
	kill -TERM "$ppid" 2>/dev/null
	wait "$ppid" 2>/dev/null
	expect_status 143 || return
	grep -q "Linux version" "$SINK_LOG" || { fail "no netconsole line reached the host through the test's passt"; return; }
	[ -z "$children" ] || { fail "lkvm started a passt of its own ($children) with socket="; return; }
	# Not lkvm's to stop: the passt it connected to outlives it.
	[ "$still" = 1 ] || { fail "the test's passt ended with lkvm"; return; }
	expect_no_output "is gone" "a link-down line"
}

# ---- (3) passt killed mid-run: link down, the guest and lkvm carry on, lkvm ends cleanly ----

t_passt_killed() {
	need_user_net || return
	passt_works || return
	local port
	port=$(port_for 3)
	sink_start "$port"
	VM_TIMEOUT=$VM_T start_vm - "net-user-$_T_NAME" -k "$G/vmlinux" -m 256 -n mode=user \
		-p "$(netconsole "$port")"
	# Frames went through (netconsole's first lines); the guest goes on booting meanwhile.
	wait_log "$SINK_LOG" "Linux version" "$T" || { kill -KILL "$VM_PID"; sink_stop; return 1; }
	local passt
	passt=$(passt_child "$VM_PID")
	[ -n "$passt" ] || { kill -KILL "$VM_PID"; sink_stop; fail "no passt child of lkvm"; return; }
	kill -KILL "$passt"
	wait_log "$VM_LOG" "virtio-net: passt pid $passt is gone \\(.*\\): link down" 60 ||
		{ kill -KILL "$VM_PID"; sink_stop; return 1; }
	alive "$VM_PID" || { sink_stop; end_vm; fail "lkvm ended when passt died (status $LAST_STATUS)"; return; }
	# The guest keeps running: the console still answers to the control socket's stat.
	"$LKVM" stat "$(sed -n 's/.*VM name: \([^ ]*\) .*/\1/p' "$VM_LOG" | head -n 1)" >/dev/null 2>&1 ||
		{ kill -KILL "$VM_PID"; sink_stop; fail "lkvm stat got no answer after passt died"; return; }
	kill -TERM "$VM_PID"
	end_vm
	sink_stop
	expect_status 143 || return
	[ "$(grep -c 'is gone' "$LAST_LOG")" = 1 ] || { fail "not exactly one link-down line"; return; }
	# Reaped: no zombie passt left behind while lkvm ran on.
	gone "$passt" || fail "passt (pid $passt) still there"
}

# The guest's side of passt dying: the net-faults C guest sees the link go down (config
# interrupt, status without LINK_UP) and its frames still complete, as with a deleted tap.
t_guest_link_down() {
	need_user_net || return
	passt_works || return
	need_guest net-faults || return
	VM_TIMEOUT=$VM_T start_vm - "net-user-$_T_NAME" -k "$ELF" -p "fault=link" -n mode=user
	wait_log "$VM_LOG" 'GUEST net-faults: link up, watching' "$T" || { kill -KILL "$VM_PID"; return 1; }
	local passt
	passt=$(passt_child "$VM_PID")
	[ -n "$passt" ] || { kill -KILL "$VM_PID"; fail "no passt child of lkvm"; return; }
	kill -KILL "$passt"
	end_vm
	# The guest checks that it saw the link go down and that its frames still complete.
	expect_guest 0 || return
	[ "$(grep -c "virtio-net: passt pid $passt is gone .*link down" "$LAST_LOG")" = 1 ] ||
		fail "not exactly one 'passt pid $passt is gone' line"
}

# ---- passt gone on every exit path: an error after it started, SIGKILL of lkvm ----

t_exit_paths() {
	need_user_net || return
	passt_works || return
	# An error after the NIC was made (the disk is opened later): lkvm exits 1, passt with it.
	run_lkvm "net-user-$_T_NAME-error" 1 -- run --debug -k "$G/vmlinux" -n mode=user -d "$WORK/no-such-disk" --timeout 30 || return
	expect_output "passt started \\(pid [0-9]+\\)" "passt started before the error" || return
	local p
	p=$(sed -n 's/.*passt started (pid \([0-9]*\)).*/\1/p' "$LAST_LOG" | head -n 1)
	wait_until 60 gone "$p" || { fail "passt (pid $p) outlived lkvm's error exit"; return; }
	# SIGKILL: nothing of lkvm's runs, the kernel closes its end of the socket and passt leaves.
	# Its pid from lkvm's own line (an event to wait for: a poll of lkvm's children for 30 s
	# found none in the emulated host).
	VM_TIMEOUT=$VM_T start_vm - "net-user-$_T_NAME" -k "$G/vmlinux" -m 256 -n mode=user --debug
	wait_log "$VM_LOG" 'passt started \(pid [0-9]+\)' "$T" || { kill -KILL "$VM_PID"; return 1; }
	p=$(sed -n 's/.*passt started (pid \([0-9]*\)).*/\1/p' "$VM_LOG" | head -n 1)
	alive "$p" || { kill -KILL "$VM_PID"; end_vm; fail "passt (pid $p) is not running: $(tail -n 3 "$VM_LOG" | tr '\n' ' ')"; return; }
	kill -KILL "$VM_PID"
	end_vm
	wait_until 60 gone "$p" || { fail "passt (pid $p) outlived lkvm's SIGKILL"; return; }
	# And the lkvm timeout's own exit: lkvm reaps its passt before it exits (its own line says
	# so), or, where it may not signal one that stays past 2 s (below), says it left it, which
	# then leaves by itself: its socket is closed.
	run_lkvm "net-user-$_T_NAME-timeout" 124 -- run --debug -k "$G/vmlinux" -m 256 -n mode=user --timeout 3 || return
	p=$(sed -n 's/.*passt started (pid \([0-9]*\)).*/\1/p' "$LAST_LOG" | head -n 1)
	expect_output "passt \\(pid $p\\) (reaped: |cannot be killed by lkvm)" "lkvm's teardown of its passt (pid $p)" || return
	wait_until 60 no_tagged_passt || { fail "passt left running after lkvm's (pid $p) ended: $(describe_passts)"; return; }
	# A "passt" that does not leave when its socket closes (it never reads it): lkvm kills it
	# through its pidfd at teardown, from main's sandbox (pidfd_send_signal, waitid), and reaps it.
	mkdir -p "$WORK/stuck-bin"
	# Each says it is set up first, as passt does (its pid into --pid, lkvm's FIFO): else lkvm
	# waits 10 s for it before the guest runs.
	printf '#!/bin/sh\n%s\nexec sleep %d\n' "$READY_SH" $((T + 60)) >"$WORK/stuck-bin/passt"
	chmod 755 "$WORK/stuck-bin/passt"
	# shellcheck disable=SC2034 # read by run_lkvm
	local LKVM_WRAP="env PATH=$WORK/stuck-bin:$PATH"
	run_lkvm "net-user-$_T_NAME-stuck" 124 -- run --debug -k "$G/vmlinux" -m 256 -n mode=user --timeout 3 || return
	expect_output "passt \\(pid [0-9]+\\) still runs 2000 ms after its socket closed: killing it" "the kill of a passt that stayed" || return
	p=$(sed -n 's/.*passt started (pid \([0-9]*\)).*/\1/p' "$LAST_LOG" | head -n 1)
	[ -n "$p" ] && gone "$p" || { fail "the stuck passt (pid ${p:-?}) outlived lkvm"; return; }
	# One that runs as nobody, as a root lkvm's real passt does: lkvm (root without CAP_KILL)
	# may not signal it, says so and exits all the same (run_lkvm's guard catches a wait without
	# end). Only a root lkvm starts passt as nobody.
	if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
		echo "exit-paths: no stuck passt as nobody (needs root and setpriv)" >&2
		return
	fi
	printf '#!/bin/sh\n%s\nexec setpriv --reuid=65534 --regid=65534 --clear-groups sleep %d\n' \
		"$READY_SH" $((T + 60)) >"$WORK/stuck-bin/passt"
	run_lkvm "net-user-$_T_NAME-stuck-nobody" 124 -- run --debug -k "$G/vmlinux" -m 256 -n mode=user --timeout 3
	p=$(sed -n 's/.*passt started (pid \([0-9]*\)).*/\1/p' "$LAST_LOG" | head -n 1)
	[ -z "$p" ] || kill -KILL "$p" 2>/dev/null # ours to end: lkvm left it
	[ "$LAST_STATUS" = 124 ] || return # run_lkvm said why
	expect_output "passt \\(pid $p\\) cannot be killed by lkvm \\(Operation not permitted\\): left running" \
		"lkvm leaving a passt it may not signal"
}

# ---- (4) bad options: one line saying what is wrong ----

t_bad_options() {
	need_kernel vmlinux || return
	local long
	long=$(printf '/%0120d' 0)
	run_lkvm net-user-bad-queues 1 -- run -k "$G/vmlinux" -n mode=user,queues=2 || return
	one_error_line "-n queues=2: mode=user has one queue pair \\(passt serves one stream\\)" || return
	run_lkvm net-user-bad-tapif 1 -- run -k "$G/vmlinux" -n mode=user,tapif=tap0 || return
	one_error_line "-n tapif: only with mode=tap .*" || return
	run_lkvm net-user-bad-socket-tap 1 -- run -k "$G/vmlinux" -n mode=tap,socket=/x || return
	one_error_line "-n socket: only with mode=user" || return
	run_lkvm net-user-bad-socket-long 1 -- run -k "$G/vmlinux" -n "mode=user,socket=$long" || return
	one_error_line "-n socket: want a path of 1 to 107 bytes" || return
	run_lkvm net-user-no-listener 1 -- run -k "$G/vmlinux" -n "mode=user,socket=$WORK/nobody-listens" || return
	one_error_line "virtio-net: -n socket=$WORK/nobody-listens: cannot connect: No such file or directory .*" || return
	# shellcheck disable=SC2034 # read by run_lkvm
	local LKVM_WRAP="env PATH=$WORK/empty-path"
	run_lkvm net-user-no-passt 1 -- run -k "$G/vmlinux" -n mode=user || return
	one_error_line "virtio-net: -n mode=user: passt is not in PATH \\(Debian: apt install passt\\)" || return
	# A passt that cannot start (on a host without a route passt says "No external routable
	# interface for IPv4; ..."): its words and status in lkvm's one line, not a link never up.
	mkdir -p "$WORK/bad-passt" &&
		printf '#!/bin/sh\necho "Failed to send 9 bytes to syslog" >&2\necho "no way out" >&2\nexit 3\n' >"$WORK/bad-passt/passt" &&
		chmod 755 "$WORK/bad-passt/passt" || return
	LKVM_WRAP="env PATH=$WORK/bad-passt:$PATH"
	run_lkvm net-user-bad-passt 1 -- run -k "$G/vmlinux" --timeout 30 -n mode=user || return
	one_error_line "virtio-net: -n mode=user: passt could not start \\(status 3\\): no way out"
}

# ---- (5) guest user space through passt: DHCP, a file fetched, the TCP rate against a tap ----
# Linux user space: on a VMX/SVM host or in the emulated one; a PVM host's guests make no system
# calls (skip_unless_userspace). `lkvm run -- sh guest-net.sh ...` runs the guest's side on the
# host's files (9p): busybox's udhcpc, ip and sha256sum (busybox-static: scripts/deps.sh guest),
# socat (deps.sh test).

GUEST_NET=$WORK/guest-net.sh
cat >"$GUEST_NET" <<'EOF'
#!/bin/sh
# In the guest of `lkvm run -- sh guest-net.sh NET STEP...`: eth0 configured, then TCP transfers
# with the test's server on the host, one per step, in order.
#   NET: dhcp (address, netmask and default route from DHCP: busybox udhcpc, from passt; the
#        server is the router, whose address passt maps to the host's loopback) or ADDR/LEN@SERVER
#   get PORT FILE: SERVER:PORT's bytes into FILE; prints "guest: got FILE sha256=HASH"
#   put PORT FILE: FILE's bytes to SERVER:PORT (from a copy in the guest's RAM: 9p is not timed),
#        done when the server (recv:N) answers that it got them all
#   exit N: ends here with status N (lkvm's must be the same)
# No address: status 3; a transfer that failed: 4; each with a line on stderr. udhcpc runs this
# script too, with its event as $1 and the lease in its environment (busybox udhcpc).
set -u
bb=busybox
case ${1-} in
deconfig | leasefail | nak | renew) exit 0 ;;
bound) # passt's MTU option is left out: the same 1500-byte link as the tap's
	$bb ip addr add "$ip/$mask" dev "$interface" &&
		$bb ip route add default via "${router%% *}" dev "$interface" &&
		echo "ip=$ip router=${router%% *}" >/tmp/lkvm-lease
	exit ;;
esac
$bb ip link set eth0 up || { echo "guest: no eth0" >&2; exit 3; }
case $1 in
dhcp)
	# lkvm's init configures a -n mode=user NIC from passt's DHCP itself (init/net.c): its lease
	# is the address and default route eth0 has; udhcpc only where it has none.
	router=$($bb ip -4 route show default dev eth0 2>/dev/null | $bb sed -n 's/^default via \([0-9.]*\).*/\1/p')
	ip=$($bb ip -4 addr show dev eth0 2>/dev/null | $bb sed -n 's/.*inet \([0-9.]*\)\/.*/\1/p')
	if [ -z "$router" ] || [ -z "$ip" ]; then
		rm -f /tmp/lkvm-lease # the guest's /tmp shows the host's: only this lease counts
		$bb udhcpc -i eth0 -f -q -n -t 10 -T 3 -s "$0" >&2 && [ -s /tmp/lkvm-lease ] ||
			{ echo "guest: no DHCP lease" >&2; exit 3; }
		. /tmp/lkvm-lease
	fi
	server=$router
	echo "guest: lease ip=$ip router=$router" ;;
*)
	$bb ip addr add "${1%@*}" dev eth0 || { echo "guest: cannot add ${1%@*}" >&2; exit 3; }
	server=${1#*@} ;;
esac
shift
while [ $# -ge 2 ]; do
	case $1 in
	get)
		socat -u "TCP:$server:$2" "CREATE:$3" || { echo "guest: get from $server:$2 failed" >&2; exit 4; }
		echo "guest: got $3 sha256=$($bb sha256sum <"$3" | cut -d' ' -f1)"
		shift 3 ;;
	put)
		# Done when the server says it has every byte ("got N", then its close), not when socat -u
		# has put the last byte in the guest's send buffer: the exit that follows reboots the
		# guest, and what that buffer still held would never leave (the host got 3.5 of 4 MiB).
		# shut-none: no half-close from the guest. After a guest's FIN, Debian 12's passt
		# (0.0~git20230309) sent the server's answer again and again at advancing sequence
		# numbers and never passed the server's FIN on (its --pcap shows it): socat waited.
		cp "$3" /tmp/lkvm-put || { echo "guest: cannot copy $3" >&2; exit 4; }
		n=$(($($bb wc -c </tmp/lkvm-put)))
		ack=$(socat -t 600 STDIO "TCP:$server:$2,shut-none" </tmp/lkvm-put) ||
			{ echo "guest: put to $server:$2 failed" >&2; exit 4; }
		[ "$ack" = "got $n" ] ||
			{ echo "guest: put to $server:$2: the server answered '$ack', not 'got $n'" >&2; exit 4; }
		rm -f /tmp/lkvm-put
		shift 3 ;;
	exit) exit "$2" ;;
	*) echo "guest: unknown step $1" >&2; exit 2 ;;
	esac
done
EOF
chmod 755 "$GUEST_NET"

# need_guest_net: what a guest running guest-net.sh needs: user space (a skip on a PVM host), the
# guest kernel, socat, and a DHCP client (busybox's udhcpc; a busybox built without it: a skip).
need_guest_net() {
	skip_unless_userspace || return
	need_kernel && need_cmd socat test && need_cmd busybox guest && need_python || return
	busybox --list | grep -qx udhcpc ||
		{ skip "$(command -v busybox) has no udhcpc applet: the guest has no DHCP client"; return 1; }
}

# tcp_serve NAME ADDR PORT send|recv|recv:N FILE [PORT HOW FILE]...: one TCP connection on each
# ADDR:PORT (in $NETNS when set), served in the background (SERVE_PID) in the order given: FILE's
# bytes sent (done once the peer closed: it had every byte) or the peer's bytes written to FILE
# (done at their end; recv:N: at N bytes, answered with a line "got N" and a close), each timed
# from its accept. SERVE_LOG ($LOG_DIR/net-user-NAME.serve)
# gets a line "PORT send|recv bytes=N secs=S" for each. Waits until all listen (10 s).
tcp_serve() {
	SERVE_LOG=$LOG_DIR/net-user-$1.serve
	shift
	rm -f "$SERVE_LOG"
	# shellcheck disable=SC2086 # the namespace's prefix, split on purpose
	${NETNS:+ip netns exec $NETNS} "$PY" - $((VM_T + 60)) "$@" >"$SERVE_LOG" 2>&1 <<'PYEOF' &
import socket, sys, time
limit, addr, args = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
jobs = []
for i in range(0, len(args), 3):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, int(args[i])))
    s.listen(1)
    s.settimeout(limit)
    jobs.append((s, args[i], args[i + 1], args[i + 2]))
print("listening", flush=True)
for s, port, how, path in jobs:
    c, _ = s.accept()
    c.settimeout(limit)
    t0, n, want = time.monotonic(), 0, -1
    if how == "send":
        with open(path, "rb") as f:
            data = f.read()
        c.sendall(data)
        n = len(data)
        c.shutdown(socket.SHUT_WR)
        while c.recv(65536):
            pass
    else:
        if how.startswith("recv:"):
            want = int(how[5:])
        with open(path, "wb") as f:
            while n != want:
                b = c.recv(1 << 16)
                if not b:
                    break
                f.write(b)
                n += len(b)
    secs = time.monotonic() - t0
    if want >= 0:
        c.sendall(b"got %d\n" % n)  # the peer's proof that every byte arrived (guest-net.sh put)
    print("%s %s bytes=%d secs=%.3f" % (port, how, n, secs), flush=True)
    c.close()
PYEOF
	SERVE_PID=$!
	echo "$SERVE_PID" >>"$PIDS_FILE" # killed when the script ends, as its VMs are
	wait_until 10 grep -q listening "$SERVE_LOG" && return 0
	serve_end
	fail "the test's TCP server did not listen in 10 s: $(tail -n 2 "$SERVE_LOG" | tr '\n' ' ')"
}

# serve_end: waits for tcp_serve's server to end by itself (10 s: its last peer is gone by the
# time lkvm is), killing it otherwise.
serve_end() {
	wait_until 10 gone "$SERVE_PID" || kill -KILL "$SERVE_PID" 2>/dev/null
	wait "$SERVE_PID" 2>/dev/null
}

# served PORT FIELD: FIELD (bytes, secs) of the server's line for PORT.
served() { kv "$2" " $(grep "^$1 " "$SERVE_LOG" 2>/dev/null)"; }

# dhcp-fetch: as user nobody (as-user.sh; no tap, no namespace), `lkvm run -n mode=user -- CMD`:
# CMD gets its address by DHCP from the passt lkvm started, fetches 2 MiB from a TCP server on
# the host's loopback through the gateway's address (passt's mapping) and writes them to a host
# folder shared over 9p (as that user); lkvm exits with CMD's status.
t_dhcp_fetch() {
	need_user_net && need_guest_net || return
	as_nobody || return
	local d=$WORK/$_T_NAME port
	mkdir -p "$d/out" && chown "$AS_UID:$AS_UID" "$d/out"
	head -c $((2 << 20)) /dev/urandom >"$d/data" && chmod 644 "$d/data"
	port=$(port_for 5)
	tcp_serve "$_T_NAME" 127.0.0.1 "$port" send "$d/data" || return
	cd "$WORK" || return # the guest's working directory: one that user may enter
	# shellcheck disable=SC2034 # read by run_lkvm
	local LKVM_WRAP=$AS_USER
	LKVM=$AS_BIN/lkvm run_lkvm "net-user-$_T_NAME" 42 -- run -k "$AS_BIN/bzImage" -m 256 \
		--timeout "$VM_T" -n mode=user --share "$d/out" -- \
		sh "$GUEST_NET" dhcp get "$port" "$d/out/fetched" exit 42
	local st=$?
	serve_end
	[ "$st" = 0 ] || return
	expect_output "^guest: lease ip=$GUEST_IP router=$GW\$" "the guest's DHCP lease from passt (ip=$GUEST_IP router=$GW)" || return
	[ "$(served "$port" bytes)" = $((2 << 20)) ] ||
		{ fail "the host's server sent $(served "$port" bytes) bytes: $(head -c 200 "$SERVE_LOG")"; return; }
	cmp -s "$d/data" "$d/out/fetched" ||
		fail "the file the guest wrote ($(stat -c %s "$d/out/fetched" 2>&1) bytes) differs from the host's: $(cmp "$d/data" "$d/out/fetched" 2>&1 | head -c 200)"
}

# run-net: `lkvm run -n mode=user -- CMD` with no network set-up in CMD: init brought eth0 up with
# passt's DHCP lease (the host's address, the default route via the gateway, a nameserver in
# the guest's /etc/resolv.conf) and lo up, and CMD fetches a file from a TCP server on the
# host's loopback through the gateway's address (passt's mapping).
t_run_net() {
	need_user_net && need_guest_net || return
	passt_works || return
	local d=$WORK/$_T_NAME port want
	mkdir -p "$d"
	head -c 65536 /dev/urandom >"$d/data"
	want=$(sha256sum <"$d/data")
	want=${want%% *}
	port=$(port_for 4)
	tcp_serve "$_T_NAME" 127.0.0.1 "$port" send "$d/data" || return
	cd "$WORK" || return
	run_lkvm "net-user-$_T_NAME" 0 -- run -k "$G/bzImage" -m 256 --timeout "$VM_T" -n mode=user --user root -- \
		sh -c "busybox ip -4 addr show eth0; busybox ip route; cat /etc/resolv.conf; busybox ip -4 addr show lo
			socat -u TCP:$GW:$port CREATE:/tmp/lkvm-got && echo guest: got sha256=\$(busybox sha256sum </tmp/lkvm-got)"
	local st=$?
	serve_end
	[ "$st" = 0 ] || return
	expect_output "inet ${GUEST_IP//./\\.}/[0-9]+ " "eth0 with passt's address $GUEST_IP" &&
		expect_output "^default via ${GW//./\\.} dev eth0" "the default route via $GW" &&
		expect_output "^nameserver [0-9.]+" "a nameserver in /etc/resolv.conf" &&
		expect_output "inet 127\\.0\\.0\\.1/8 " "lo up" &&
		expect_output "^guest: got sha256=$want" "the host's file fetched through passt"
}

# fwd_get URL FILE: one HTTP GET of URL into FILE (5 s at most); fails on anything but a 200.
fwd_get() {
	"$PY" - "$1" "$2" <<'PYEOF' 2>/dev/null
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=5) as r, open(sys.argv[2], "wb") as f:
    f.write(r.read())
PYEOF
}

# fwd_ready PORT FILE: the guest's page fetched through the forward, or the VM gone (no wait).
fwd_ready() { fwd_get "http://127.0.0.1:$1/page" "$2" || gone "$VM_PID"; }

# fwd: `lkvm run -n mode=user,fwd=tcp:PORT:8080 -- busybox httpd -f -p 8080`: a web server in
# the guest answers an HTTP GET on the host's 127.0.0.1:PORT through passt's forward (polled
# until it does: passt listens at once, the guest's server only after the boot), the page's
# bytes the host's file's; a UDP forward beside it; the run goes on until lkvm stop (3).
t_fwd() {
	need_user_net && need_guest_net || return
	passt_works || return
	busybox --list | grep -qx httpd ||
		{ skip "$(command -v busybox) has no httpd applet: no web server for the guest"; return; }
	local d=$WORK/$_T_NAME port name=lkvm-fwd-$$
	mkdir -p "$d/www"
	head -c 100000 /dev/urandom >"$d/www/page"
	chmod -R a+rX "$d"
	port=$(port_for 0)
	cd "$WORK" || return
	# Not start_vm: it adds --timeout and --name after the arguments, which -- CMD would take.
	VM_LOG=$LOG_DIR/net-user-$_T_NAME.log
	"$LKVM" run --name "$name" -k "$G/bzImage" -m 256 --timeout "$VM_T" \
		-n "mode=user,fwd=tcp:$port:8080,fwd=udp:127.0.0.1:$port:53" --user root -- \
		busybox httpd -f -p 8080 -h "$d/www" </dev/null >"$VM_LOG" 2>&1 &
	VM_PID=$!
	[ -z "${PIDS_FILE-}" ] || echo "$VM_PID" >>"$PIDS_FILE"
	if ! wait_until "$VM_T" fwd_ready "$port" "$d/got" || gone "$VM_PID"; then
		"$LKVM" stop "$name" >/dev/null 2>&1
		end_vm
		fail "no page from 127.0.0.1:$port (lkvm: $(tail -n 2 "$LAST_LOG" | tr '\n' ' '))"
		return
	fi
	"$LKVM" stop "$name" >/dev/null 2>&1
	end_vm
	expect_status 3 || return
	cmp -s "$d/www/page" "$d/got" ||
		fail "the page fetched through the forward ($(stat -c %s "$d/got") bytes) differs from the guest's: $(cmp "$d/www/page" "$d/got" 2>&1 | head -c 200)"
}

# tcp-rate: one TCP stream each way, guest<-host then guest->host, RATE_MB MiB each, through
# passt (-n mode=user, the server on the host's loopback) and through a tap (in a namespace of
# the test's, the server there), and where /dev/vhost-net is, through the tap with vhost=on:
# every byte arrives intact in each. The rates, from the
# host's side (accept to the end of the stream, the guest's receive into RAM included), go to
# $LOG_DIR/net-user-tcp-rate.txt and the script's stderr; no rate is asserted.
RATE_MB=${RATE_MB:-4}
RATE_TXT=$LOG_DIR/net-user-tcp-rate.txt
rm -f "$RATE_TXT"

# rate_run BACKEND NET NETOPTS: one lkvm run over BACKEND (user, tap): NET is guest-net.sh's,
# NETOPTS -n's; the server listens on SERVE_ADDR. Sets RATE_IN and RATE_OUT (MB/s).
rate_run() {
	local b=$1 d=$WORK/$_T_NAME in out want
	in=$(port_for 6) out=$(port_for 7)
	tcp_serve "$_T_NAME-$b" "$SERVE_ADDR" "$in" send "$d/data" "$out" "recv:$((RATE_MB << 20))" "$d/from-guest-$b" || return
	cd "$WORK" || return
	# --user root: the guest reads $WORK (mode 0700), which nobody, a root lkvm's default, may not.
	run_lkvm "net-user-$_T_NAME-$b" 0 -- run -k "$G/bzImage" -m 256 --timeout "$VM_T" -n "$3" --user root -- \
		sh "$GUEST_NET" "$2" get "$in" /tmp/lkvm-rate-in put "$out" "$d/data" exit 0
	local st=$?
	serve_end
	[ "$st" = 0 ] || return
	want=$(sha256sum <"$d/data")
	want=${want%% *}
	expect_output "^guest: got /tmp/lkvm-rate-in sha256=$want\$" "the guest's hash of the host's $RATE_MB MiB ($b)" || return
	cmp -s "$d/data" "$d/from-guest-$b" ||
		{ fail "the host received $(stat -c %s "$d/from-guest-$b") bytes that differ from the guest's $RATE_MB MiB ($b)"; return; }
	[ "$(served "$in" bytes)" = $((RATE_MB << 20)) ] ||
		{ fail "the server's send to the guest ($b): $(head -c 200 "$SERVE_LOG")"; return; }
	RATE_IN=$(awk -v n="$(served "$in" bytes)" -v s="$(served "$in" secs)" 'BEGIN { printf "%.2f", n / s / 1e6 }')
	RATE_OUT=$(awk -v n="$(served "$out" bytes)" -v s="$(served "$out" secs)" 'BEGIN { printf "%.2f", n / s / 1e6 }')
}

rate_tap() { # rate_tap [NAME EXTRA]: rate_run over a tap lkvm makes in $NETNS (as root), -n ...EXTRA
	# shellcheck disable=SC2034 # read by rate_run
	local SERVE_ADDR=0.0.0.0 # the tap's address exists only once lkvm runs
	rate_run "${1:-tap}" 10.0.6.15/24@10.0.6.1 "mode=tap,tapif=lkvmrate0,host_ip=10.0.6.1/24,script=none${2:-}"
}

t_tcp_rate() {
	need_user_net && need_guest_net || return
	skip_unless_net "(the tap to compare passt with)" || return
	passt_works || return
	local d=$WORK/$_T_NAME
	mkdir -p "$d"
	head -c $((RATE_MB << 20)) /dev/urandom >"$d/data"
	local load0 user_in user_out tap_in tap_out
	load0=$(cut -d' ' -f1-3 /proc/loadavg)
	# shellcheck disable=SC2034 # read by rate_run
	SERVE_ADDR=127.0.0.1 rate_run user dhcp mode=user || return
	user_in=$RATE_IN user_out=$RATE_OUT
	in_netns rate_tap || return
	tap_in=$RATE_IN tap_out=$RATE_OUT
	# Where vhost-net is (the emulated host loads it): the same streams over the tap with its
	# rings served by vhost (-n vhost=on), every byte checked as above.
	local vh_in="" vh_out=""
	if [ -c /dev/vhost-net ]; then
		in_netns rate_tap vhost ,vhost=on || return
		vh_in=$RATE_IN vh_out=$RATE_OUT
	fi
	{
		echo "tcp-rate $(date -u '+%Y-%m-%d %H:%M UTC') host $(host_kind), $(nproc) CPUs, load $load0 before, $(cut -d' ' -f1-3 /proc/loadavg) after; $RATE_MB MiB each way, one run each, lkvm run -m 256 -- socat"
		awk -v ui="$user_in" -v uo="$user_out" -v ti="$tap_in" -v to="$tap_out" 'BEGIN {
			printf "guest<-host: passt %s MB/s, tap %s MB/s, passt/tap %.2f\n", ui, ti, ui / ti
			printf "guest->host: passt %s MB/s, tap %s MB/s, passt/tap %.2f\n", uo, to, uo / to }'
		[ -z "$vh_in" ] || awk -v vi="$vh_in" -v vo="$vh_out" -v ti="$tap_in" -v to="$tap_out" 'BEGIN {
			printf "tap with vhost=on: guest<-host %s MB/s (vhost/tap %.2f), guest->host %s MB/s (%.2f)\n", vi, vi / ti, vo, vo / to }'
	} >"$RATE_TXT"
	cat "$RATE_TXT" >&2
}

skip_unless_kvm
# NET_USER_TESTS: the tests to run, by name or group (default: all).
# Two groups: kernel (kernel mode only: a PVM host runs them) and userspace (guest user space:
# a VMX/SVM host or the emulated one).
KERNEL_TESTS="netconsole-nonroot socket passt-killed guest-link-down exit-paths bad-options"
USERSPACE_TESTS="dhcp-fetch run-net fwd tcp-rate"
tests=""
for name in ${NET_USER_TESTS:-kernel userspace}; do
	case $name in
	kernel) tests+=" $KERNEL_TESTS" ;;
	userspace) tests+=" $USERSPACE_TESTS" ;;
	*) tests+=" $name" ;;
	esac
done
for name in $tests; do
	case $name in
	netconsole-nonroot) run_test "$name" t_netconsole_nonroot ;;
	socket) run_test "$name" t_socket ;;
	passt-killed) run_test "$name" t_passt_killed ;;
	guest-link-down) run_test "$name" t_guest_link_down ;;
	exit-paths) run_test "$name" t_exit_paths ;;
	bad-options) run_test "$name" t_bad_options ;;
	dhcp-fetch) run_test "$name" t_dhcp_fetch ;;
	run-net) run_test "$name" t_run_net ;;
	fwd) run_test "$name" t_fwd ;;
	# Alone: nothing else of this script's runs while it measures.
	tcp-rate) run_test_serial "$name" t_tcp_rate ;;
	*) echo "test-net-user.sh: unknown test '$name' in NET_USER_TESTS" >&2; exit 2 ;;
	esac
done
finish_tests
rc=$?
# The rates tcp-rate measured, after the summary (a test's own output is not kept).
[ ! -f "$RATE_TXT" ] || cat "$RATE_TXT" >&2
exit $rc

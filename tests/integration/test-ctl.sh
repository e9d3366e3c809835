#!/usr/bin/env bash
# The control plane: lkvm list/stop/pause/resume/stat/debug against running and missing VMs, pause/resume under traffic, stale sockets, duplicate names, malformed clients, stop while paused.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=ctl
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

# lkvm --timeout of every VM here: a guard against a VM left behind, never reached (each test
# stops its VMs). 60 s ran out mid-test in the emulated host on a loaded machine.
T=600
VM_TIMEOUT=$T                         # start_vm's (lib.sh)
# Every VM of this script lives in its own runtime directory, away from anyone else's VMs.
# Each test gets its own directory under CTL_DIR (own_dir), so tests running side by side never
# see each other's VMs (lkvm list, stop --all).
CTL_DIR=$(mktemp -d /tmp/lkvm-ctl-test.XXXXXX)
chmod 711 "$CTL_DIR"
export LKVM_RUNTIME_DIR=$CTL_DIR/none
PIDS_FILE=$CTL_DIR/.pids              # start_vm's: lib.sh kills them when the script ends
# shellcheck disable=SC2016 # expanded when the script ends
at_exit 'rm -rf "$CTL_DIR"'

own_dir() {
	export LKVM_RUNTIME_DIR=$CTL_DIR/$_T_NAME
	mkdir -m 700 "$LKVM_RUNTIME_DIR"
}

# kill_hard PID: SIGKILL lkvm and, first, its cleanup helper (a crash of both, an OOM kill):
# only then is its socket left behind, stale. The helper, killed first, runs no more code.
kill_hard() {
	# shellcheck disable=SC2046 # one pid per word
	kill -KILL $(pgrep -P "$1") "$1"
	wait "$1" 2>/dev/null
}

# json_get FILE EXPR: a value from the JSON in FILE (python3 expression over `d`).
json_get() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
# ---- help and missing VMs ----

t_help() {
	own_dir
	local c
	ctl ctl-help help
	expect_status 0 || return
	for c in list stop pause resume stat debug; do
		expect_output "^  $c " "lkvm help listing '$c'" || return
	done
	for c in list stop pause resume stat debug; do
		ctl "ctl-help-$c" "$c" --help
		expect_status 0 || return
		expect_output "^usage: lkvm $c" "lkvm $c --help" || return
		ctl "ctl-help2-$c" help "$c"
		expect_output "^usage: lkvm $c" "lkvm help $c" || return
	done
	ctl ctl-help-bad pause
	expect_status 1 && expect_output "give one VM name" || return
	# help's and version's own --help, a word version does not take, snapshot's refusals
	# (issue 40, finding 9).
	ctl ctl-help-help help --help
	expect_status 0 && expect_output "^usage: lkvm COMMAND" "lkvm help --help" || return
	ctl ctl-version-help version --help
	expect_status 0 && expect_output "^usage: lkvm version" "lkvm version --help" || return
	ctl ctl-version-bogus version --bogus
	expect_status 1 && one_error_line "version: unexpected '--bogus' \(lkvm version takes no arguments\)" || return
	ctl ctl-snapshot-help snapshot --help
	expect_status 0 && expect_output "cannot be saved \(a vhost-net$" "snapshot --help's refusals" &&
		expect_no_output "9p" "snapshot --help saying a 9p share cannot be saved (it can)"
}

t_missing() {
	own_dir
	local c
	for c in stop pause resume stat debug; do
		ctl "ctl-missing-$c" "$c" no-such-vm
		expect_status 1 || return
		expect_output "error: no VM named 'no-such-vm'" "a clear 'no VM named' for $c" || return
	done
	ctl ctl-missing-list list
	expect_status 0 || return
	[ "$(wc -l <"$LAST_LOG")" = 1 ] || { fail "lkvm list with no VM printed more than its header"; return; }
	ctl ctl-missing-list-json list --json
	expect_status 0 || return
	[ "$(cat "$LAST_LOG")" = "[]" ] || fail "lkvm list --json with no VM: $(head -c 100 "$LAST_LOG")"
}

# ---- every command against a running VM ----

t_running() {
	own_dir
	local n=ctl-run1
	start_vm $n ctl-running -c 2
	wait_vm $n || return
	ctl ctl-running-list list
	expect_status 0 || return
	grep -Eq "^$n +$VM_PID +running +2 +256 " "$LAST_LOG" || { fail "list lacks '$n $VM_PID running 2 256'"; return; }
	ctl ctl-running-list-json list --json
	[ "$(json_get "$LAST_LOG" "[(v['name'],v['pid'],v['state'],v['vcpus'],v['ram_mib']) for v in d]")" = \
		"[('$n', $VM_PID, 'running', 2, 256)]" ] || { fail "list --json: $(head -c 200 "$LAST_LOG")"; return; }
	ctl ctl-running-stat stat $n
	expect_status 0 || return
	expect_output "^$n: running, up " || return
	expect_output "^vCPU exits: [1-9][0-9]* \(port I/O [1-9]" "vCPU exits with port I/O (the guest's banner)" || return
	expect_output "by reason: .*io [1-9]" "exits by reason" || return
	expect_output "^memory: RSS [1-9][0-9]* KiB: guest RAM [0-9]* KiB, lkvm [1-9]" "lkvm's memory" || return
	ctl ctl-running-stat-json stat $n --json
	[ "$(json_get "$LAST_LOG" "d['vcpu_exits']['io'] > 0 and d['vcpu_exits']['by_reason']['io'] == d['vcpu_exits']['io'] and d['state']")" = running ] ||
		{ fail "stat --json: $(head -c 200 "$LAST_LOG")"; return; }
	# lkvm's memory: the resident set is the guest's resident RAM and lkvm's own; its private
	# part is less than its own (the binary and libraries are resident too).
	[ "$(json_get "$LAST_LOG" "d['memory']['rss_kib'] == d['memory']['guest_kib'] + d['memory']['lkvm_kib'] and 0 < d['memory']['lkvm_private_kib'] < d['memory']['lkvm_kib']")" = True ] ||
		{ fail "stat --json memory: $(grep -o '"memory":{[^}]*}' "$LAST_LOG")"; return; }
	ctl ctl-running-watch stat $n --json --watch 0.2 --count 3
	expect_status 0 || return
	[ "$(grep -c '"interval_s"' "$LAST_LOG")" = 3 ] || { fail "stat --watch --count 3 printed $(grep -c interval_s "$LAST_LOG") intervals"; return; }
	# --watch shows memory as it is, not as a change (it would be about 0 twice).
	[ "$(grep -o '"rss_kib":[0-9]*' "$LAST_LOG" | cut -d: -f2 | sort -n | head -1)" -gt 1000 ] ||
		{ fail "stat --watch: memory as a difference: $(grep -o '"memory":{[^}]*}' "$LAST_LOG" | head -1)"; return; }
	ctl ctl-running-debug debug $n
	expect_status 0 || return
	expect_output "^vCPU 0:" && expect_output "^vCPU 1:" && expect_output "^ rip [0-9a-f]{16} " &&
		expect_output "^ cr0 [0-9a-f]{16} " && expect_output "last exit: " || return
	ctl ctl-running-pause pause $n
	expect_status 0 && expect_output "^$n paused$" || return
	ctl ctl-running-list2 list
	grep -Eq "^$n +$VM_PID +paused " "$LAST_LOG" || { fail "list does not show $n paused"; return; }
	ctl ctl-running-pause2 pause $n
	expect_status 1 && expect_output "error: $n: already paused" || return
	ctl ctl-running-debug-paused debug $n
	expect_status 0 && expect_output "^$n \(paused\):" || return
	ctl ctl-running-resume resume $n
	expect_status 0 && expect_output "^$n resumed" || return
	ctl ctl-running-resume2 resume $n
	expect_status 1 && expect_output "error: $n: not paused" || return
	ctl ctl-running-stop stop $n
	expect_status 0 && expect_output "^$n stopped \(pid $VM_PID, " || return
	# `lkvm stop` returns once the process is gone.
	! alive "$VM_PID" || { fail "lkvm stop returned while pid $VM_PID still runs"; return; }
	wait_exit "$VM_PID" 10 || return
	LAST_LOG=$VM_LOG
	[ "$EXIT_STATUS" = 3 ] || { fail "a stopped run exited $EXIT_STATUS, not 3"; return; }
	expect_output "lkvm: $n: stopped by lkvm stop" || return
	[ ! -e "$LKVM_RUNTIME_DIR/$n.sock" ] || fail "the socket outlived its VM"
}

# A VM without --name gets guest-PID, printed at start, in the default runtime directory.
t_default_name() {
	local dir=/run/lkvm
	[ "$(id -u)" = 0 ] || dir=${XDG_RUNTIME_DIR:+$XDG_RUNTIME_DIR/lkvm}
	[ -n "$dir" ] || dir=/tmp/lkvm-$(id -u)
	LKVM_PREFIX="env -u LKVM_RUNTIME_DIR" start_vm - ctl-default-name
	local n=guest-$VM_PID i
	for ((i = 0; i < 200; i++)); do
		env -u LKVM_RUNTIME_DIR "$LKVM" stat "$n" >/dev/null 2>&1 && break
		sleep 0.05
	done
	LAST_LOG=$VM_LOG
	expect_output "VM name: $n " "the generated name printed at start" || return
	[ "$(stat -c %a "$dir")" = 700 ] || { fail "$dir has mode $(stat -c %a "$dir"), not 700"; return; }
	[ "$(stat -c %a "$dir/$n.sock")" = 600 ] || { fail "$dir/$n.sock has mode $(stat -c %a "$dir/$n.sock"), not 600"; return; }
	CTL_PREFIX="env -u LKVM_RUNTIME_DIR" ctl ctl-default-name-stop stop "$n"
	expect_status 0 || return
	wait_exit "$VM_PID" 10 && [ "$EXIT_STATUS" = 3 ] || fail "exit status ${EXIT_STATUS:-?}, not 3"
}

# ---- names: duplicates and stale sockets ----

t_duplicate() {
	own_dir
	local n=ctl-dup first
	start_vm $n ctl-dup-1
	first=$VM_PID
	wait_vm $n || return
	start_vm $n ctl-dup-2
	wait_exit "$VM_PID" 10 || return
	LAST_LOG=$VM_LOG
	[ "$EXIT_STATUS" = 1 ] || { fail "a second VM named $n exited $EXIT_STATUS, not 1"; return; }
	expect_output "error: a VM named '$n' is already running" || return
	expect_no_output "^GUEST" "the duplicate ran its guest" || return
	# The first one is untouched.
	[ "$(stat_val $n "d['state']")" = running ] || { fail "the first $n no longer answers"; return; }
	ctl ctl-dup-stop stop $n
	wait_exit "$first" 10
}

t_stale() {
	own_dir
	local n=ctl-stale
	start_vm $n ctl-stale-1
	wait_vm $n || return
	kill_hard "$VM_PID"
	[ -S "$LKVM_RUNTIME_DIR/$n.sock" ] || { fail "no socket left behind by SIGKILL (nothing to test)"; return; }
	# A client says so and removes it...
	ctl ctl-stale-stat stat $n
	expect_status 1 && expect_output "is stale" && expect_output "removed the stale socket of '$n'" || return
	[ ! -e "$LKVM_RUNTIME_DIR/$n.sock" ] || { fail "lkvm stat left the stale socket"; return; }
	# ...and so does lkvm list, and a new VM of the same name starts over one.
	start_vm $n ctl-stale-2
	wait_vm $n || return
	kill_hard "$VM_PID"
	ctl ctl-stale-list list
	expect_status 0 && expect_output "removed the stale socket of '$n'" || return
	start_vm $n ctl-stale-3
	wait_vm $n || return
	kill_hard "$VM_PID"
	# Waiting on its console, not its socket: a client would clean the stale socket up first.
	start_vm $n ctl-stale-4
	wait_log "$VM_LOG" '^GUEST spin' || return
	LAST_LOG=$VM_LOG
	expect_output "removed a stale control socket .*/$n.sock \(its VM is gone\)" || return
	ctl ctl-stale-stop stop $n
	expect_status 0 || return
	wait_exit "$VM_PID" 10 && [ "$EXIT_STATUS" = 3 ] || fail "exit status ${EXIT_STATUS:-?}, not 3"
}

# ---- clients that break the protocol, and other users ----

# raw NAME PYTHON: connect to NAME's socket as `s` and run PYTHON; it prints what to check.
# RAW_PREFIX runs it under a command (another user).
raw() {
	# shellcheck disable=SC2086 # RAW_PREFIX is word-split on purpose
	${RAW_PREFIX-} "$PY" - "$LKVM_RUNTIME_DIR/$1.sock" <<EOF
import socket, struct, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
def hdr(t, ln, magic=0x43564b4c, ver=1, st=0): return struct.pack('<IHHII', magic, ver, t, st, ln)
def reply():
    b = b''
    while True:
        c = s.recv(65536)
        if not c: break
        b += c
    if len(b) < 16: return (None, None, b)
    m, v, t, st, ln = struct.unpack('<IHHII', b[:16])
    return (t, st, b[16:16 + ln])
$2
EOF
}

t_malformed() {
	own_dir
	local n=ctl-bad out
	need_cmd python3 bench || return
	start_vm $n ctl-bad
	wait_vm $n || return
	out=$(raw $n "s.sendall(b'GET / HTTP/1.0\r\n\r\n'); t, st, p = reply(); print(st, b'bad magic' in p)")
	[ "$out" = "1 True" ] || { fail "garbage: reply '$out', expected status 1 (protocol) and 'bad magic'"; return; }
	out=$(raw $n "s.sendall(hdr(5, 1 << 30)); t, st, p = reply(); print(st, b'at most 4096' in p)")
	[ "$out" = "1 True" ] || { fail "oversized length: reply '$out'"; return; }
	out=$(raw $n "s.sendall(hdr(5, 0, ver=9)); t, st, p = reply(); print(st, b'version 9' in p)")
	[ "$out" = "2 True" ] || { fail "another version: reply '$out'"; return; }
	out=$(raw $n "s.sendall(hdr(77, 0)); t, st, p = reply(); print(t, st, b'unknown request type 77' in p)")
	[ "$out" = "32845 3 True" ] || { fail "unknown type: reply '$out'"; return; }
	out=$(raw $n "s.sendall(hdr(5, 3) + b'\x01\x01a'); t, st, p = reply(); print(st, b'malformed payload' in p)")
	[ "$out" = "1 True" ] || { fail "truncated field: reply '$out'"; return; }
	# Half a header, and a header with half its payload: the client goes away mid-message.
	raw $n "s.sendall(hdr(5, 0)[:7]); s.close()" || { fail "raw client failed"; return; }
	raw $n "s.sendall(hdr(5, 40) + b'x' * 10); s.close()" || { fail "raw client failed"; return; }
	# One that sends half a header and then nothing: dropped after its 2 s, others still served.
	# It says when it has connected and sent: from then on it holds its connection.
	local fifo=$CTL_DIR/ctl-bad.fifo said="" # not under the checkout: 9p (emulated host) has no FIFOs
	rm -f "$fifo" && mkfifo "$fifo" || { fail "mkfifo $fifo failed"; return; }
	raw $n "s.sendall(hdr(5, 0)[:5]); print('sent', flush=True); time.sleep(3)" >"$fifo" &
	local slow=$!
	read -r -t 10 said <"$fifo"
	rm -f "$fifo"
	[ "$said" = sent ] || { fail "the slow raw client never connected"; return; }
	[ "$(stat_val $n "d['state']")" = running ] || { fail "stat failed while a slow client held a connection"; return; }
	wait $slow
	# Still running, still answering, and it said what happened (rate-limited).
	[ "$(stat_val $n "d['state']")" = running ] || { fail "lkvm stopped answering after malformed clients"; return; }
	alive "$VM_PID" || { fail "lkvm died"; return; }
	ctl ctl-bad-stop stop $n
	wait_exit "$VM_PID" 10 || return
	LAST_LOG=$VM_LOG
	[ "$EXIT_STATUS" = 3 ] || { fail "exit status $EXIT_STATUS, not 3"; return; }
	expect_output "control socket: a request without the protocol's magic" || return
	expect_output "control socket: a client disconnected in the middle of a request" || return
	[ "$(grep -c 'control socket:' "$VM_LOG")" -le 5 ] || fail "more than 5 malformed-request lines: not rate-limited"
}

# Only the owner: another user's client refuses a directory that is not its own, and when the
# permissions are opened by hand, SO_PEERCRED still turns a (raw) client of another uid away.
t_other_user() {
	own_dir
	local n=ctl-owner out
	[ "$(id -u)" = 0 ] || { skip "needs root to act as another user"; return; }
	command -v setpriv >/dev/null || { skip "no setpriv"; return; }
	need_cmd python3 test || return
	start_vm $n ctl-owner
	wait_vm $n || return
	local CTL_PREFIX="setpriv --reuid=65534 --regid=65534 --clear-groups"
	ctl ctl-owner-nobody stat $n
	expect_status 1 && expect_output "runtime directory .* is not this user's" || return
	chmod 755 "$LKVM_RUNTIME_DIR" && chmod 666 "$LKVM_RUNTIME_DIR/$n.sock"
	# (The VM answers a client of another uid at once, before it sent anything.)
	out=$(RAW_PREFIX=$CTL_PREFIX raw $n "t, st, p = reply(); print(st, b'permission denied: only uid 0 may control this VM' in p)")
	chmod 700 "$LKVM_RUNTIME_DIR"
	CTL_PREFIX=
	[ "$out" = "1 True" ] || { fail "a pause by uid 65534: reply '$out', expected status 1 and 'only uid 0'"; return; }
	[ "$(stat_val $n "d['state']")" = running ] || { fail "the VM is not running after a refused pause"; return; }
	ctl ctl-owner-stop stop $n
	wait_exit "$VM_PID" 10
}

# ---- stop ----

t_stop_paused() {
	own_dir
	local n=ctl-stop-paused
	start_vm $n ctl-stop-paused -c 2
	wait_vm $n || return
	ctl ctl-stop-paused-pause pause $n
	expect_status 0 || return
	ctl ctl-stop-paused-stop stop $n
	expect_status 0 && expect_output "^$n stopped " || return
	wait_exit "$VM_PID" 10 || return
	[ "$EXIT_STATUS" = 3 ] || fail "a paused VM that was stopped exited $EXIT_STATUS, not 3"
}

t_stop_all() {
	own_dir
	local a b
	start_vm ctl-all-a ctl-all-a
	a=$VM_PID
	wait_vm ctl-all-a || return
	start_vm ctl-all-b ctl-all-b
	b=$VM_PID
	wait_vm ctl-all-b || return
	ctl ctl-all-stop stop --all
	expect_status 0 && expect_output "^ctl-all-a stopped" && expect_output "^ctl-all-b stopped" || return
	wait_exit "$a" 10 && [ "$EXIT_STATUS" = 3 ] || { fail "a: exit ${EXIT_STATUS:-?}"; return; }
	wait_exit "$b" 10 && [ "$EXIT_STATUS" = 3 ] || fail "b: exit ${EXIT_STATUS:-?}"
}

# ---- many VMs ----

_density_listed() { [ "$("$LKVM" list 2>/dev/null | grep -c '^density-')" -ge "$1" ]; }

# DENSITY (default 50) small VMs at once (the ticks guest, one line a second and halted between:
# 64 MiB, 1 vCPU), then one `lkvm stop --all`: it says each one stopped, each exits 3, and nothing
# of them is left (no socket or lock in the runtime directory, no process). No speed is asserted;
# the stop's output (each VM's time) and its whole time are in ctl-density.log.
t_density() {
	own_dir
	local n=${DENSITY:-50} i pids=() bad="" t0 left
	for ((i = 0; i < n; i++)); do
		"$LKVM" run -k "$GUEST_DIR/ticks.elf" -p tick_ms=1000 -m 64 --name density-$i \
			--timeout $T </dev/null >"$LOG_DIR/ctl-density-$i.log" 2>&1 &
		pids+=($!)
		echo "$!" >>"$PIDS_FILE"
	done
	wait_until 120 _density_listed "$n" ||
		{ fail "$("$LKVM" list 2>/dev/null | grep -c '^density-') of $n VMs answered in 120 s"; return; }
	t0=$(date +%s%N)
	ctl ctl-density stop --all
	echo "stop --all of $n VMs: $((($(date +%s%N) - t0) / 1000000)) ms" >>"$LAST_LOG"
	expect_status 0 || return
	[ "$(grep -c '^density-[0-9]* stopped (pid ' "$LAST_LOG")" = "$n" ] ||
		{ fail "stop --all said $(grep -c ' stopped ' "$LAST_LOG") of $n VMs stopped"; return; }
	for ((i = 0; i < n; i++)); do
		wait_exit "${pids[i]}" 10 || return
		[ "$EXIT_STATUS" = 3 ] || bad+=" density-$i:$EXIT_STATUS"
	done
	[ -z "$bad" ] || { fail "exit statuses other than 3:$bad"; return; }
	left=$(pgrep -f -- '--name density-' | tr '\n' ' ')
	[ -z "$left" ] || { fail "processes left: $left"; return; }
	rt_empty
}

# ---- the user who started it, and whose sockets are believed ----

# rt_empty: the test's runtime directory holds nothing (no socket, no lock) once its VMs ended.
rt_is_empty() { [ -z "$(ls -A "$LKVM_RUNTIME_DIR")" ]; }
rt_empty() { rt_is_empty || fail "left in the runtime directory: $(ls -A "$LKVM_RUNTIME_DIR")"; }

# --user nobody: root, who started the VM, still controls it (the socket is in root's directory,
# and the VM believes the uid that started it); after the exit nothing of it is left there.
t_user_control() {
	own_dir
	local n=ctl-user
	[ "$(id -u)" = 0 ] || { skip "needs root for --user"; return; }
	id nobody >/dev/null 2>&1 || { skip "no user nobody"; return; }
	start_vm $n ctl-user --user nobody
	wait_vm $n || return
	local c
	# Each command and what it must print.
	for c in "list|^$n +$VM_PID +running " "stat $n|^$n: running, up " "pause $n|^$n paused\$" \
		"resume $n|^$n resumed" "stop $n|^$n stopped \(pid $VM_PID, "; do
		# shellcheck disable=SC2086 # the command and its argument
		ctl "ctl-user-${c%%[ |]*}" ${c%%|*}
		expect_status 0 && expect_output "${c#*|}" || return
	done
	wait_exit "$VM_PID" 10 || return
	[ "$EXIT_STATUS" = 3 ] || { fail "exit status $EXIT_STATUS, not 3"; return; }
	rt_empty
}

# SIGKILL of lkvm alone leaves nothing behind either: its cleanup helper removes the socket and
# lock once lkvm is gone (asynchronously: waited for, 10 s at most).
t_kill_cleans() {
	own_dir
	local n=ctl-killed
	start_vm $n ctl-killed
	wait_vm $n || return
	kill -KILL "$VM_PID"
	wait "$VM_PID" 2>/dev/null
	wait_until 10 rt_is_empty
	rt_empty
}

# The fallback /tmp/lkvm-UID created first by another user (nobody): lkvm run, list and stop of
# that uid refuse it with one line, instead of running without a socket or talking to whatever
# listens in there.
t_foreign_dir() {
	[ "$(id -u)" = 0 ] || { skip "needs root to act as two users"; return; }
	command -v setpriv >/dev/null || { skip "no setpriv"; return; }
	local uid d="" c
	# A uid without an account, whose fallback directory does not exist yet.
	for ((uid = 61000 + $$ % 1000; uid < 62100; uid++)); do
		getent passwd "$uid" >/dev/null || [ -e "/tmp/lkvm-$uid" ] || { d=/tmp/lkvm-$uid; break; }
	done
	[ -n "$d" ] || { skip "no free uid between 61000 and 62100"; return; }
	setpriv --reuid=65534 --regid=65534 --clear-groups mkdir -m 755 "$d" || { fail "nobody could not create $d"; return; }
	local CTL_PREFIX="setpriv --reuid=$uid --regid=$uid --clear-groups env -u LKVM_RUNTIME_DIR -u XDG_RUNTIME_DIR"
	# That uid runs lkvm and the guest from a directory it can reach, whatever the checkout's.
	local bin
	bin=$(mktemp -d /tmp/lkvm-foreign-bin.XXXXXX) && copy_for_others "$bin" "$LKVM" "$GUEST_DIR/spin.elf" ||
		{ rm -rf "$d" "$bin"; return; }
	local LKVM=$bin/${LKVM##*/}
	for c in "run -k $bin/spin.elf --name ctl-foreign --timeout 10" "list" "stop ctl-foreign"; do
		# shellcheck disable=SC2086 # c is the command and its arguments
		ctl "ctl-foreign-${c%% *}" $c
		expect_status 1 && one_error_line "runtime directory $d is not this user's: .* of uid 65534 with mode 0755 .*" ||
			break
	done
	rm -rf "$d" "$bin"
}

# A socket in our directory served by a process of another uid (it bound as root, then became
# nobody and listened) is not believed: whatever it answers, lkvm stop does not say stopped and
# lkvm list shows no VM.
t_fake_server() {
	own_dir
	local n=ctl-fake ready=$LOG_DIR/ctl-fake.ready fake
	[ "$(id -u)" = 0 ] || { skip "needs root to serve as another uid"; return; }
	need_cmd python3 test || return
	rm -f "$ready"
	"$PY" - "$LKVM_RUNTIME_DIR/$n.sock" >"$ready" <<'EOF' &
import os, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
os.setgid(65534)
os.setuid(65534)
s.listen(4)
print('ready', flush=True)
def f(name, v):
    n = name.encode()
    if isinstance(v, int):
        return bytes([1, len(n)]) + n + struct.pack('<Q', v)
    return bytes([2, len(n)]) + n + struct.pack('<H', len(v)) + v.encode()
while True:
    c, _ = s.accept()
    h = c.recv(16)  # nothing when the client does not believe us
    if len(h) == 16:
        t = struct.unpack('<IHHII', h)[2]
        body = f('name', 'ctl-fake') + f('pid', 1) + f('state', 'running') + f('vcpus', 1)
        c.sendall(struct.pack('<IHHII', 0x43564b4c, 1, t | 0x8000, 0, len(body)) + body)
    c.close()
EOF
	fake=$!
	wait_until 10 test -s "$ready" || { kill "$fake"; fail "the fake server did not start"; return; }
	ctl ctl-fake-stop stop $n
	expect_status 1 && expect_output "served by a process of uid 65534, not of this user \(uid 0\): not believed" &&
		expect_no_output "stopped" || { kill "$fake"; return; }
	ctl ctl-fake-list list
	kill "$fake"
	wait "$fake" 2>/dev/null
	expect_status 0 && expect_output "warning: .*$n.sock is served by a process of uid 65534" &&
		expect_no_output "^$n " "a row for the fake VM"
}

# ---- many stops at once ----

# blocked_in PID NR...: PID's main thread sleeps in one of the system calls NR, or PID is gone.
blocked_in() {
	local pid=$1 nr state _
	shift
	alive "$pid" || return 0
	read -r _ _ state _ <"/proc/$pid/stat" 2>/dev/null || return 0
	read -r nr _ <"/proc/$pid/syscall" 2>/dev/null || return 0
	[ "$state" = S ] || return 1
	[[ " $* " == *" $nr "* ]]
}

# in_stderr_write PID: PID's main thread is in write(2, ...).
in_stderr_write() { [[ "$(cat "/proc/$1/syscall" 2>/dev/null)" == "1 0x2 "* ]]; }

# 17 `lkvm stop --wait $T` at once (the reply waited for as long: the test bounds each step),
# more than the server keeps waiting (16) and as many as its listen backlog queues (16 + 1: one
# more would wait inside connect(), and a connect the kernel wakes when the socket closes looks
# the path up again and finds none): each may say "stopped" only
# once the lkvm process is gone. The clients connect and send while lkvm is stopped (SIGSTOP),
# so they all wait on it; lkvm's stderr is a pipe kept full, so once stopped it waits in its
# exit message with every client answered (or left). Until the pipe goes, no client may have
# ended; after, all say "stopped".
t_many_stops() {
	local MANY=17
	own_dir
	local n=ctl-many fifo=$CTL_DIR/ctl-many.fifo fd i c pids=() early=()
	need_cmd python3 test || return
	mkfifo "$fifo" && exec {fd}<>"$fifo" || { fail "no fifo"; return; }
	VM_LOG=$LOG_DIR/ctl-many.log
	LAST_LOG=$VM_LOG
	# Only this shell may hold the pipe's read end ({fd}>&- for everything it starts).
	"$LKVM" run -k "$GUEST_DIR/spin.elf" --name $n --timeout $T </dev/null >"$VM_LOG" 2>"$fifo" {fd}>&- &
	VM_PID=$!
	echo "$VM_PID" >>"$PIDS_FILE"
	wait_vm $n || { exec {fd}>&-; return; }
	# Fill the pipe to the last byte (writes up to PIPE_BUF are all or nothing).
	"$PY" - "$fifo" {fd}>&- <<'EOF'
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK)
n = 4096
while n:
    try:
        os.write(fd, b'x' * n)
    except BlockingIOError:
        n //= 2
EOF
	kill -STOP "$VM_PID"
	for ((i = 0; i < MANY; i++)); do
		"$LKVM" stop $n --wait $T >"$LOG_DIR/ctl-many-$i.log" 2>&1 {fd}>&- &
		pids+=($!)
	done
	# Every client has sent its request and waits for the reply (poll): queued on the socket,
	# which lkvm answers before it closes (the server's drain). Required, not hoped for: a client
	# still starting when lkvm goes on finds no socket (seen in the emulated host under load:
	# "no VM named 'ctl-many'").
	for c in "${pids[@]}"; do
		wait_until 120 blocked_in "$c" 7 271 && continue
		kill -CONT "$VM_PID"
		exec {fd}>&-
		fail "stop client $c never waited for its reply in poll (syscall $(cut -d' ' -f1 "/proc/$c/syscall" 2>/dev/null))"
		return
	done
	kill -CONT "$VM_PID"
	# lkvm, stopped, blocks writing its exit message (write, fd 2)...
	wait_until 20 in_stderr_write "$VM_PID" ||
		{ exec {fd}>&-; fail "lkvm did not reach its exit message"; return; }
	# ...and each client has either ended (too early: lkvm is still there) or waits in poll.
	for c in "${pids[@]}"; do
		wait_until 20 blocked_in "$c" 7 271
		alive "$c" || early+=("$c")
	done
	# The pipe's last reader goes: lkvm's write fails (EPIPE) and it exits.
	exec {fd}>&-
	for c in "${pids[@]}"; do wait "$c" || early+=("$c:status $?"); done
	[ ${#early[@]} = 0 ] || { fail "clients ended while lkvm was still running, or failed: ${early[*]} ($(cat "$LOG_DIR"/ctl-many-*.log | sort | uniq -c | head -c 300))"; return; }
	for ((i = 0; i < MANY; i++)); do
		LAST_LOG=$LOG_DIR/ctl-many-$i.log
		expect_output "^$n stopped \(pid $VM_PID, " || return
	done
	wait_exit "$VM_PID" 10 || return
	[ "$EXIT_STATUS" = 3 ] || { fail "exit status $EXIT_STATUS, not 3"; return; }
	rt_empty
}

# ---- pause and resume while the guest sends ----

PAUSE_MS=1500 # how long a pause lasts at least: it is absence that is checked, no event to wait for

sleep_ms() { sleep "$(($1 / 1000)).$(printf '%03d' $(($1 % 1000)))"; }

# The guest sends frames for SECS of its own time (TSC); meanwhile it is paused for PAUSE_MS.
# While paused nothing moves (device counters, the tap, vCPU exits); afterwards every frame the
# guest sent is accounted for: device packets + drops = guest frames = tap's count = peer's + its drops.
# (The guest's clocks over a pause: pause-guest-clock.)
t_pause_traffic() {
	own_dir
	skip_unless_net || return
	need_python || return
	need_guest net-bench || return
	in_netns pause_traffic_in
}

pause_traffic_in() {
	local n=ctl-traffic tap=lkvmctl0 secs=12
	tap_up $tap || return
	peer_start ctl-traffic count "$tap" $((T + 10)) 64 || return
	start_vm $n ctl-traffic -k "$GUEST_DIR/net-bench.elf" --stats=json \
		-n "mode=tap,tapif=$tap,script=none" -p "bench=tx size=64 secs=$secs"
	# Wait until frames flow (the tap's own counter: cheap enough to poll in the emulated host),
	# then pause at once: the guest sends for only $secs s.
	local p1 p2 p3 e1 e2 tap1 tap2
	wait_until 20 tap_rx_above $tap 0 ||
		{ peer_stop; LAST_LOG=$VM_LOG; fail "no frames before the pause"; return; }
	ctl ctl-traffic-pause pause $n
	expect_status 0 || { peer_stop; return; }
	read -r p1 e1 < <(stat_val $n "d['nets'][0]['queues'][1]['packets'], d['vcpu_exits']['total']" | tr -d '(),')
	tap1=$(tap_stat $tap rx_packets)
	sleep_ms $PAUSE_MS
	read -r p2 e2 < <(stat_val $n "d['nets'][0]['queues'][1]['packets'], d['vcpu_exits']['total']" | tr -d '(),')
	tap2=$(tap_stat $tap rx_packets)
	if [ -z "$p2" ] || [ "$p1" != "$p2" ] || [ "$tap1" != "$tap2" ] || [ "$e1" != "$e2" ]; then
		kill -KILL "$VM_PID" "$PEER_PID"
		LAST_LOG=$VM_LOG
		[ -n "$p2" ] || { fail "the paused VM stopped answering: $(grep -v '^{' "$VM_LOG" | tail -n 1)"; return; }
		fail "the VM moved while paused: tx0 packets $p1 -> $p2, tap frames $tap1 -> $tap2, vCPU exits $e1 -> $e2"
		return
	fi
	ctl ctl-traffic-resume resume $n
	expect_status 0 || { peer_stop; return; }
	wait_until 20 tap_rx_above $tap "$tap2"
	p3=$(stat_val $n "d['nets'][0]['queues'][1]['packets']")
	wait_exit "$VM_PID" 60 || { peer_stop; return; }
	peer_stop
	LAST_LOG=$VM_LOG
	[ "$EXIT_STATUS" = 0 ] || { fail "the bench run exited $EXIT_STATUS"; return; }
	[ "${p3:-0}" -gt "$p2" ] || { fail "no frames after resume ($p2 -> ${p3:-?})"; return; }
	# Every frame accounted for.
	local b p frames dpk ddrops taprx pf pdrops
	b=$(grep '^BENCH ' "$VM_LOG")
	p=$(grep '^PEER ' "$PEER_LOG")
	frames=$(kv frames "$b")
	dpk=$(grep '^{"vcpu_exits"' "$VM_LOG" | tail -n 1 | "$PY" -c "import json,sys; print(json.load(sys.stdin)['nets'][0]['queues'][1]['packets'])")
	ddrops=$(grep '^{"vcpu_exits"' "$VM_LOG" | tail -n 1 | "$PY" -c "import json,sys; print(json.load(sys.stdin)['nets'][0]['queues'][1]['drops'])")
	taprx=$(tap_stat $tap rx_packets)
	pf=$(kv frames "$p")
	pdrops=$(kv drops "$p")
	[ -n "$frames" ] && [ -n "$dpk" ] && [ -n "$pf" ] || { fail "unparsable BENCH/PEER/--stats lines"; return; }
	[ "$dpk" = $((frames - ddrops)) ] || { fail "device sent $dpk, guest $frames, device drops $ddrops"; return; }
	[ "$ddrops" = 0 ] || { fail "the device dropped $ddrops frames"; return; }
	[ "$taprx" = "$dpk" ] || { fail "tap received $taprx, device sent $dpk"; return; }
	[ $((pf + pdrops)) = "$dpk" ] || fail "peer counted $pf (+$pdrops dropped), device sent $dpk"
}

# ---- a pause freezes every device ----

# frozen NAME: what must stand still while NAME is paused, from lkvm stat: every disk's and
# console's counters (kicks, requests, bytes, interrupts...) and the vCPU exits.
frozen() {
	stat_val "$1" "json.dumps([d['disks'], d['consoles'], d['vcpu_exits']], sort_keys=True)"
}

# The blk-test guest keeps 32 reads of 64 MiB in flight (the disk, written out so O_DIRECT reads
# it from the device, always has a good part of a second of work queued) and reads hvc0. Paused,
# nothing moves while a line is typed: no request completes, no typed byte reaches the guest, no
# interrupt is raised, the guest prints nothing. After resume the typed line arrives, in order;
# at the end the guest's count of completed reads is the disk's, and every typed byte arrived.
t_pause_devices() {
	own_dir
	local n=ctl-pause-dev img=$LOG_DIR/ctl-pause-dev.img fifo=$LKVM_RUNTIME_DIR/stdin in
	local s1 s2 lines reads req rx before
	need_python && need_guest blk-test || return
	dd if=/dev/zero of="$img" bs=1M count=256 status=none || { fail "cannot write $img"; return; }
	mkfifo "$fifo" && exec {in}<>"$fifo" || { fail "cannot make the input FIFO"; return; }
	VM_STDIN=$fifo VM_TIMEOUT=300 start_vm $n ctl-pause-dev -k "$GUEST_DIR/blk-test.elf" \
		-d "$img,aio=sync" --console virtio --stats=json -p "blk=pause qd=32 kib=65536"
	wait_log "$VM_LOG" '^BLK-PAUSE-READY' 120 && printf 'before\n' >&"$in" &&
		wait_log "$VM_LOG" "^GUEST blk-test: line 1 'before'" 60 || { kill -KILL "$VM_PID"; return; }
	ctl ctl-pause-dev-pause pause $n
	expect_status 0 || { kill -KILL "$VM_PID"; return; }
	s1=$(frozen $n)
	lines=$(wc -l <"$VM_LOG")
	printf 'while paused\n' >&"$in"
	sleep 1.5 # absence is what is checked: there is no event to wait for
	s2=$(frozen $n)
	[ "$(wc -l <"$VM_LOG")" = "$lines" ] || fail "the guest printed while paused: $(tail -n 1 "$VM_LOG")"
	ctl ctl-pause-dev-resume resume $n
	expect_status 0 && wait_log "$VM_LOG" "^GUEST blk-test: line 2 'while paused'" 60 &&
		printf 'done\n' >&"$in" && wait_exit "$VM_PID" 120 || { kill -KILL "$VM_PID"; return; }
	exec {in}>&-
	rm -f "$img"
	LAST_LOG=$VM_LOG
	[ "$EXIT_STATUS" = 0 ] || { fail "the run exited $EXIT_STATUS"; return; }
	[ -n "$s1" ] && [ "$s1" = "$s2" ] || { fail "devices moved while paused: $s1 -> $s2"; return; }
	reads=$(sed -n 's/^BLK-PAUSE-OK reads=\([0-9]*\) errors=0$/\1/p' "$VM_LOG")
	[ -n "$reads" ] || { fail "no BLK-PAUSE-OK line without errors"; return; }
	read -r req rx < <(grep '^{"vcpu_exits"' "$VM_LOG" | tail -n 1 | "$PY" -c "import json,sys; d=json.load(sys.stdin)
print(d['disks'][0]['queues'][0]['requests'], d['consoles'][0]['queues'][0]['bytes'])")
	[ "$req" = "$reads" ] || { fail "the disk completed $req requests, the guest saw $reads"; return; }
	[ "$rx" = 25 ] || { fail "hvc0 got $rx bytes of the 25 typed"; return; }
	# There was work to hold: reads went on after the pause.
	before=$("$PY" -c "import json,sys; print(json.loads(sys.argv[1])[0][0]['queues'][0]['requests'])" "$s1")
	[ "$reads" -gt "$before" ] || fail "no read completed after the pause ($before before it, $reads in all)"
}

# now_us: wall-clock microseconds (bash's own clock: no process to start, which the emulated host
# makes slow).
now_us() { echo "${EPOCHREALTIME/./}"; }

# ticks_around LOG BYTES: "N NS TSC" of the last TICK line of the ticks guest that ended within the
# first BYTES of LOG, then the same of the first one that began after them; nothing when either is
# missing. The guest reads its clocks after a line's first bytes: the first line's reading is
# from before the pause at BYTES, the second's from after it (a line cut by the pause could hold
# either, and is left out).
ticks_around() {
	"$PY" - "$1" "$2" <<'EOF'
import re, sys
data = open(sys.argv[1], 'rb').read()
cut = int(sys.argv[2])
ticks = [(m.start(), m.end(), m.groups()) for m in
         re.finditer(rb'^TICK n=(\d+) kvmclock_ns=(\d+) tsc=(\d+)\n', data, re.M)]
before = [t for start, end, t in ticks if end <= cut]
after = [t for start, end, t in ticks if start >= cut]
if before and after:
    print(b' '.join(before[-1] + after[0]).decode())
EOF
}

# The guest's own clocks over a pause (the ticks guest prints its kvm-clock and TSC readings every
# 50 ms of kvm-clock). While paused the guest stands still: not a byte on its console, not one vCPU
# exit. Its kvm-clock goes on from where it stood: the first reading after resume is not behind
# the clock lkvm saved at the pause, and ahead of it by no more than the wall time since resume
# was asked for (a clock that ran over the pause is ahead by the pause); then it keeps going.
t_pause_clock() {
	own_dir
	local n=ctl-clock res=$LOG_DIR/ctl-clock.result
	rm -f "$res"
	need_guest ticks || return
	start_vm $n ctl-clock -k "$ELF" -p "tick_ms=50"
	wait_vm $n || return
	wait_log "$VM_LOG" '^TICK n=3 ' || return
	local t0 t1 t2 t3 seen="" size1 size2 e1 e2 cp
	t0=$(now_us)
	ctl ctl-clock-pause pause $n
	t1=$(now_us)
	expect_status 0 || return
	size1=$(stat -c %s "$VM_LOG")
	read -r e1 cp < <(stat_val $n "d['vcpu_exits']['total'], round(d['guest_clock_s'] * 1e9)" | tr -d '(),')
	# A clock that ran over the pause shows only if the pause outlasts the time lkvm takes to
	# pause and resume (the checks' slack): where commands are slow, pause longer.
	sleep_ms $((PAUSE_MS + 4 * (t1 - t0) / 1000))
	e2=$(stat_val $n "d['vcpu_exits']['total']")
	size2=$(stat -c %s "$VM_LOG")
	LAST_LOG=$VM_LOG
	if [ "$size1" != "$size2" ] || [ "$e1" != "$e2" ]; then
		kill -KILL "$VM_PID"
		fail "the guest ran while paused: it printed $((size2 - size1)) bytes, vCPU exits $e1 -> $e2 (a vCPU was not parked)"
		return
	fi
	t2=$(now_us)
	ctl ctl-clock-resume resume $n
	t3=$(now_us)
	expect_status 0 || return
	# The first tick after resume, seen as soon as it is printed (tail -f wakes on the write, or
	# looks every 50 ms where inotify does not work): its reading is compared with the wall time
	# since resume was asked for. What follows the pause may first be the rest of a line it cut.
	local line around="" n1 g1 c1 n2 g2 c2
	while IFS= read -r -t 10 line; do
		[[ $line == "TICK n="* ]] && { seen=$(now_us); break; }
	done < <(tail --pid="$VM_PID" -s 0.05 -c +$((size2 + 1)) -f "$VM_LOG")
	LAST_LOG=$VM_LOG
	expect_no_output '^GUEST (FAIL|EXCEPTION)' "a guest failure (a clock went back?)" || return
	[ -n "$seen" ] ||
		{ fail "no tick within 10 s of resume: the guest made no progress (its clock stands still?)"; return; }
	around=$(ticks_around "$VM_LOG" "$size2")
	[ -n "$around" ] || { fail "no whole TICK line before the pause or after it"; return; }
	read -r n1 g1 c1 n2 g2 c2 <<<"$around"
	# And it goes on: two more ticks, each 50 ms later on its clock.
	wait_log "$VM_LOG" "^TICK n=$((n2 + 2)) " ||
		{ fail "the guest stopped ticking after resume (no tick n=$((n2 + 2))): its clock stands still?"; return; }
	ctl ctl-clock-stop stop $n
	wait_exit "$VM_PID" 10 || return
	LAST_LOG=$VM_LOG
	[ "$EXIT_STATUS" = 3 ] || { fail "exit status $EXIT_STATUS, not 3"; return; }
	[ "$n2" = $((n1 + 1)) ] || [ "$n2" = $((n1 + 2)) ] ||
		{ fail "ticks $n1 then $n2 around the pause: the guest lost count"; return; }
	local why
	why=$("$PY" - "$g1" "$cp" "$g2" "$((seen - t2))" <<'EOF'
import sys
g1, cp, g2, wall_us = map(int, sys.argv[1:])
# stat gives the clock to 1 us: allow that much either way.
if cp + 1000 < g1:
    print("lkvm saved kvm-clock at %d ns at the pause, behind the guest's reading %d ns before it" % (cp, g1))
elif g2 + 1000 < cp:
    print("kvm-clock went back over the pause: %d ns saved, %d ns read by the guest after resume" % (cp, g2))
elif g2 - cp > wall_us * 1000 * 1.01 + 1000:
    print("kvm-clock ran over the pause: the guest read %d ms past the clock saved at the pause, "
          "only %d ms after resume was asked for" % ((g2 - cp) // 1000000, wall_us // 1000))
EOF
)
	[ -z "$why" ] || { fail "$why"; return; }
	echo "tsc1=$c1 tsc2=$c2 clock1=$g1 clock2=$g2 saved=$cp seen_us=$((seen - t2)) pause_us=$((t1 - t0)) resume_us=$((t3 - t2))" \
		"tsc_hz=$(sed -n 's/^GUEST ticks: tsc_hz=\([0-9]*\) .*/\1/p' "$VM_LOG")" >"$res"
}

# The guest's TSC over the same pause: with every vCPU's TSC offset moved back by the pause, the
# TSC advanced between the two ticks around it as much as kvm-clock did, give or take the time
# lkvm took to pause and to resume (both clocks stop and start within those). A TSC that ran
# over the pause is ahead by the whole pause.
t_pause_tsc() {
	local r why
	is_pvm_host && { skip "PVM host: KVM has no per-vCPU TSC offset here, so the guest's TSC runs over a pause (kvm-clock: pause-guest-clock)"; return; }
	r=$(cat "$LOG_DIR/ctl-clock.result" 2>/dev/null) || { fail "pause-guest-clock left no readings"; return; }
	LAST_LOG=$LOG_DIR/ctl-clock.log
	why=$("$PY" - "$r" <<'EOF'
import sys
v = {k: int(x) for k, x in (w.split('=') for w in sys.argv[1].split())}
tsc_ms = (v['tsc2'] - v['tsc1']) * 1000 / v['tsc_hz']
clock_ms = (v['clock2'] - v['clock1']) / 1e6
slack_ms = (v['pause_us'] + v['resume_us']) / 1000 + 1
if abs(tsc_ms - clock_ms) > slack_ms:
    print("the guest's TSC %s the pause: it advanced %.1f ms between the ticks around it, kvm-clock %.1f ms "
          "(pause and resume took %.1f ms)" % ("ran over" if tsc_ms > clock_ms else "went back over",
                                              tsc_ms, clock_ms, slack_ms - 1))
EOF
) || why="unparsable readings: $r"
	[ -z "$why" ] || fail "$why"
}

skip_unless_kvm
[ -f "$GUEST_DIR/spin.elf" ] || fail_all "no $GUEST_DIR/spin.elf (make guests)"
run_test help t_help
run_test missing t_missing
run_test running t_running
run_test default-name t_default_name
run_test duplicate-name t_duplicate
run_test stale-socket t_stale
run_test malformed-client t_malformed
run_test other-user t_other_user
run_test stop-while-paused t_stop_paused
run_test stop-all t_stop_all
run_test user-control t_user_control
run_test kill-cleans t_kill_cleans
run_test foreign-dir t_foreign_dir
run_test fake-server t_fake_server
run_test_serial many-stops t_many_stops
run_test_serial density t_density
run_test_serial pause-devices t_pause_devices
run_test_serial pause-during-traffic t_pause_traffic
run_test_serial pause-guest-clock t_pause_clock
run_test_serial pause-guest-tsc t_pause_tsc
finish_tests

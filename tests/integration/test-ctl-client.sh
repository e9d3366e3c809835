#!/usr/bin/env bash
# The control plane from the client's side: the runtime directory of a user who is not root ($XDG_RUNTIME_DIR/lkvm, else /tmp/lkvm-UID, refused when not the user's with 0700), lkvm stop --wait, a VM that never answers, a client that never asks.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=ctl-client
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=300 # lkvm --timeout of every VM here (they are stopped long before; the emulated host is slow)
PY=$(command -v /usr/bin/python3 || command -v python3 || true)
SPIN=$GUEST_DIR/spin.elf
WORK=$(mktemp -d /tmp/lkvm-ctl-client.XXXXXX)
chmod 755 "$WORK"
# shellcheck disable=SC2034 # read by lib.sh
PIDS_FILE=$WORK/.pids # start_vm's: lib.sh kills them when the script ends
# shellcheck disable=SC2034 # read by lib.sh (start_vm, ctl)
VM_TIMEOUT=$T CTL_TIMEOUT=60

# Users who are not root: numeric uids without an account (nobody else's files or processes),
# one per test so tests running side by side never share /tmp/lkvm-UID.
uids_taken() { # uids_taken BASE: one of BASE..BASE+3 has an account
	local u
	for u in 0 1 2 3; do getent passwd $(($1 + u)) >/dev/null && return 0; done
	return 1
}
UID_BASE=$((61000 + $$ % 1000 * 4))
while uids_taken "$UID_BASE"; do UID_BASE=$((UID_BASE + 4)); done

cleanup() {
	local u
	for u in 0 1 2 3; do rm -rf "/tmp/lkvm-$((UID_BASE + u))"; done
	rm -rf "$WORK"
}
at_exit cleanup

# Runs a command as another user who may open /dev/kvm (tests/integration/as-user.sh).
AS_USER="$REPO_ROOT/tests/integration/as-user.sh $WORK/kvm-node"
mkdir "$WORK/kvm-node"
# The users run lkvm and the guest from a directory they can reach, whatever the checkout's.
copy_for_others "$WORK/bin" "$LKVM" "$SPIN" || exit 1
LKVM=$WORK/bin/${LKVM##*/} SPIN=$WORK/bin/${SPIN##*/}

own_dir() {
	export LKVM_RUNTIME_DIR=$WORK/$_T_NAME
	mkdir -m 700 "$LKVM_RUNTIME_DIR"
}

# own_vm NAME: a spin VM named NAME in this test's own runtime directory, up (its socket made).
own_vm() {
	own_dir
	start_vm "$1" "ctl-client-$_T_NAME" -k "$SPIN"
	wait_until 20 test -S "$LKVM_RUNTIME_DIR/$1.sock" || { fail "the VM never made its socket"; return 1; }
}

# mode_owner PATH: "MODE UID" of PATH.
mode_owner() { stat -c '%a %u' "$1"; }

# ---- the runtime directory of a user who is not root ----

# user_vm N DIR [ENV...]: as test user N, with ENV (env(1) assignments) and neither
# LKVM_RUNTIME_DIR nor, unless ENV sets it, XDG_RUNTIME_DIR: a VM whose control socket must be in
# DIR, made 0700 and the user's; that user's lkvm list shows it and stops it, root's does not
# see it (root's runtime directory is /run/lkvm).
user_vm() {
	local uid=$((UID_BASE + $1)) dir=$2 n=cc-user-$1-$$
	shift 2
	local LKVM_PREFIX="$AS_USER $uid env -u LKVM_RUNTIME_DIR -u XDG_RUNTIME_DIR $*"
	start_vm "$n" "ctl-client-$_T_NAME" -k "$SPIN"
	wait_until 20 test -S "$dir/$n.sock" ||
		{ fail "no socket $dir/$n.sock ($(tail -n 2 "$VM_LOG" | tr '\n' ' '))"; return; }
	[ "$(mode_owner "$dir")" = "700 $uid" ] ||
		{ fail "$dir: mode and owner $(mode_owner "$dir"), not 700 $uid"; return; }
	[ "$(mode_owner "$dir/$n.sock")" = "600 $uid" ] ||
		{ fail "$dir/$n.sock: mode and owner $(mode_owner "$dir/$n.sock"), not 600 $uid"; return; }
	local CTL_PREFIX=$LKVM_PREFIX
	ctl "ctl-client-$_T_NAME-list" list
	expect_status 0 || return
	grep -Eq "^$n +$VM_PID +running " "$LAST_LOG" ||
		{ fail "the user's lkvm list does not show $n running"; return; }
	CTL_PREFIX="env -u LKVM_RUNTIME_DIR"
	ctl "ctl-client-$_T_NAME-root-list" list
	expect_status 0 || return
	expect_no_output "^$n " "root's lkvm list showing the user's VM" || return
	ctl "ctl-client-$_T_NAME-root-stat" stat "$n"
	expect_status 1 && expect_output "no VM named '$n'" || return
	CTL_PREFIX=$LKVM_PREFIX
	ctl "ctl-client-$_T_NAME-stop" stop "$n"
	expect_status 0 && expect_output "^$n stopped \\(pid $VM_PID, " || return
	wait_exit "$VM_PID" 10 || return
	[ "$EXIT_STATUS" = 3 ] || { fail "the user's VM exited $EXIT_STATUS after lkvm stop, not 3"; return; }
	[ ! -e "$dir/$n.sock" ] || fail "$dir/$n.sock outlived its VM"
}

t_user_xdg() {
	local xdg=$WORK/xdg-$_T_NAME uid=$((UID_BASE + 0))
	mkdir -m 700 "$xdg" && chown "$uid:$uid" "$xdg"
	user_vm 0 "$xdg/lkvm" "XDG_RUNTIME_DIR=$xdg"
}

t_user_tmp() {
	rm -rf "/tmp/lkvm-$((UID_BASE + 1))"
	user_vm 1 "/tmp/lkvm-$((UID_BASE + 1))"
}

# gone_or_spinning PID LOG: lkvm PID has ended, or its spin guest runs.
gone_or_spinning() { gone "$1" || grep -q '^GUEST spin' "$2"; }

# refused N DIR MODE OWNER [ENV...]: DIR exists with MODE and OWNER, not the user's with 0700: the
# user's lkvm refuses it, saying why, and never serves a socket there. It then either stops (1)
# or runs the guest without a control socket (stopped here by SIGTERM: 143).
refused() {
	local uid=$((UID_BASE + $1)) dir=$2 mode=$3 owner=$4
	shift 4
	local LKVM_PREFIX="$AS_USER $uid env -u LKVM_RUNTIME_DIR -u XDG_RUNTIME_DIR $*" n=cc-refused-$$
	rm -rf "$dir"
	mkdir -m "$mode" "$dir" && chown "$owner:$owner" "$dir" && chmod "$mode" "$dir"
	start_vm "$n" "ctl-client-$_T_NAME" -k "$SPIN"
	LAST_LOG=$VM_LOG
	wait_until 20 grep -q "runtime directory $dir" "$VM_LOG" || { fail "lkvm did not refuse $dir"; return; }
	wait_until 20 gone_or_spinning "$VM_PID" "$VM_LOG"
	alive "$VM_PID" && kill -TERM "$VM_PID"
	wait_exit "$VM_PID" 10 || return
	expect_output "runtime directory $dir .*uid $uid with mode 0700.*uid $owner,? (with )?mode 0$mode" \
		"the refusal naming $dir, uid $uid and mode 0700, and what $dir is" || return
	case $EXIT_STATUS in
	1) ;;
	143) expect_output "no control socket" || return ;;
	*) fail "exit status $EXIT_STATUS: neither 1 (refused to run) nor 143 (ran without control)"; return ;;
	esac
	[ -z "$(ls -A "$dir")" ] || fail "lkvm put something in the refused $dir: $(ls -A "$dir")"
}

# /tmp/lkvm-UID made by someone else first (root here): another user could otherwise plant it.
t_refused_tmp() { refused 2 "/tmp/lkvm-$((UID_BASE + 2))" 700 0; }
# The user's own $XDG_RUNTIME_DIR/lkvm, but open to others.
t_refused_xdg() {
	local xdg=$WORK/xdg-$_T_NAME uid=$((UID_BASE + 3))
	mkdir -m 700 "$xdg" && chown "$uid:$uid" "$xdg"
	refused 3 "$xdg/lkvm" 755 "$uid" "XDG_RUNTIME_DIR=$xdg"
}

# ---- lkvm stop --wait ----

# t_stop_wait SECS: `lkvm stop --wait SECS` with SECS > 0 returns once the VM's process is gone,
# with 0 once it was asked; status 0 both; the run exits 3.
t_stop_wait() {
	local n=cc-stop-wait-$1
	own_vm "$n" || return
	ctl "ctl-client-$_T_NAME-stop" stop --wait "$1" "$n"
	expect_status 0 || return
	if [ "$1" = 0 ]; then
		expect_output "^$n: stop requested \\(pid $VM_PID\\)$" || return
	else
		expect_output "^$n stopped \\(pid $VM_PID, [0-9.]+ s\\)$" || return
		gone "$VM_PID" || { fail "lkvm stop --wait returned while pid $VM_PID still runs"; return; }
	fi
	wait_exit "$VM_PID" 10 || return
	[ "$EXIT_STATUS" = 3 ] || fail "the stopped run exited $EXIT_STATUS, not 3"
}

# plug FD FIFO LOG: copies what lkvm wrote so far (up to its guest's first line) from the pipe's
# read end FD to LOG, then fills the pipe: lkvm's next write to its stdout or stderr blocks.
plug() {
	"$PY" - "$1" "$2" "$3" <<'EOF'
import fcntl, os, select, sys, time
rd, path, log = int(sys.argv[1]), sys.argv[2], sys.argv[3]
F_SETPIPE_SZ = 1031
got, end = b"", time.monotonic() + 30
while b"GUEST spin" not in got and time.monotonic() < end:
    if select.select([rd], [], [], 0.1)[0]:
        got += os.read(rd, 4096)
open(log, "ab").write(got)
w = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
fcntl.fcntl(w, F_SETPIPE_SZ, 4096)
for size in (4096, 256, 1):
    try:
        while True:
            os.write(w, b"#" * size)
    except BlockingIOError:
        pass
os.close(w)
EOF
}

# A VM that cannot finish exiting (its stderr is a full pipe, so its last line blocks): --wait 1
# gives up with status 1 and one error line while the process still runs; once the pipe drains,
# the run ends with status 3.
t_stop_wait_timeout() {
	own_dir
	[ -n "$PY" ] || { fail "no python3 (scripts/deps.sh test installs it)"; return; }
	local n=cc-stop-stuck fifo=$WORK/stuck.fifo rd log=$LOG_DIR/ctl-client-stop-stuck.log
	mkfifo "$fifo"
	: >"$log"
	"$LKVM" run -k "$SPIN" --timeout $T --name $n </dev/null >"$fifo" 2>&1 &
	VM_PID=$!
	echo "$VM_PID" >>"$PIDS_FILE"
	exec {rd}<"$fifo"
	plug "$rd" "$fifo" "$log" || { fail "could not fill lkvm's output pipe"; return; }
	grep -q '^GUEST spin' "$log" || { fail "the guest did not run ($(head -c 200 "$log"))"; return; }
	ctl ctl-client-stop-stuck-stop stop --wait 1 $n
	expect_status 1 || return
	one_error_line "$n \\(pid $VM_PID\\) did not exit within 1 s" || return
	alive "$VM_PID" || { fail "the VM exited although its output pipe was full: nothing tested"; return; }
	timeout -s KILL 30 cat <&"$rd" >>"$log"
	exec {rd}<&-
	wait_exit "$VM_PID" 10 || return
	LAST_LOG=$log
	[ "$EXIT_STATUS" = 3 ] || { fail "the stopped run exited $EXIT_STATUS, not 3"; return; }
	expect_output "lkvm: $n: stopped by lkvm stop" # after the filler, on its line
}

# ---- a VM that never answers, a client that never asks ----

# A socket that accepts and then says nothing: the client gives up with status 1 and one error
# line (stat), or a warning and no row (list). The bound is a hang guard, not a speed claim.
t_client_timeout() {
	own_dir
	[ -n "$PY" ] || { fail "no python3 (scripts/deps.sh test installs it)"; return; }
	local ready=$WORK/mute.ready
	"$PY" - "$LKVM_RUNTIME_DIR/mute.sock" "$ready" <<'EOF' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(8)
open(sys.argv[2], "w").close()
held = []
while True:
    held.append(s.accept()[0])
EOF
	local mute=$!
	echo "$mute" >>"$PIDS_FILE"
	wait_until 10 test -e "$ready" || { kill "$mute"; fail "the mute server did not start"; return; }
	ctl ctl-client-mute-stat stat mute
	local stat_status=$LAST_STATUS stat_secs=$LAST_SECS
	ctl ctl-client-mute-list list
	kill "$mute"
	wait "$mute" 2>/dev/null
	LAST_LOG=$LOG_DIR/ctl-client-mute-stat.log LAST_STATUS=$stat_status
	expect_status 1 || return
	one_error_line "mute: no reply within [0-9]+ ms" || return
	[ "$stat_secs" -lt 30 ] || { fail "lkvm stat took ${stat_secs}s against a mute VM"; return; }
	LAST_LOG=$LOG_DIR/ctl-client-mute-list.log
	[ "$(tr -d '\r' <"$LAST_LOG" | grep -c '^lkvm: warning: mute: no reply within [0-9]* ms$')" = 1 ] ||
		{ fail "lkvm list: no one warning about the mute VM: $(tr '\n' '|' <"$LAST_LOG")"; return; }
	[ "$(grep -vc '^lkvm: ' "$LAST_LOG")" = 1 ] || fail "lkvm list printed a row for the mute VM"
}

# A client that connects and sends nothing, and one that sends half a header: the VM drops each
# once its 2 s are up (not before 1 s: that is the client's time; 10 s is a hang guard), says so,
# and keeps serving.
t_silent_client() {
	[ -n "$PY" ] || { fail "no python3 (scripts/deps.sh test installs it)"; return; }
	local n=cc-silent out
	own_vm $n || return
	out=$("$PY" - "$LKVM_RUNTIME_DIR/$n.sock" <<'EOF'
import socket, struct, sys, time
conns = []
for first in (b"", struct.pack("<IHHII", 0x43564B4C, 1, 5, 0, 0)[:7]):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    s.sendall(first)
    s.settimeout(10)
    conns.append(s)
t0 = time.monotonic()
for s in conns:
    b = b""
    try:
        while True:
            c = s.recv(65536)
            if not c:
                break
            b += c
    except socket.timeout:
        print("no EOF within 10 s")
        continue
    print("dropped after %s" % ("1 s or more" if time.monotonic() - t0 >= 1 else "less than 1 s"))
EOF
)
	[ "$out" = $'dropped after 1 s or more\ndropped after 1 s or more' ] ||
		{ fail "expected both clients dropped after about 2 s, got: ${out//$'\n'/ | }"; return; }
	ctl ctl-client-silent-stat stat $n
	expect_status 0 || { fail "the VM no longer answers after the silent clients"; return; }
	ctl ctl-client-silent-stop stop $n
	wait_exit "$VM_PID" 10 || return
	LAST_LOG=$VM_LOG
	[ "$EXIT_STATUS" = 3 ] || { fail "exit status $EXIT_STATUS, not 3"; return; }
	[ "$(grep -c 'control socket: a client sent no whole request in time' "$VM_LOG")" = 2 ] ||
		fail "not two 'no whole request in time' lines"
}

skip_unless_kvm
[ -f "$SPIN" ] || _SKIP_ALL=${_SKIP_ALL:-"no $SPIN (make guests)"}
USER_SKIP=""
if [ "$(id -u)" != 0 ]; then
	USER_SKIP="needs root to run lkvm as another user"
elif ! unshare --mount --propagation private true 2>/dev/null; then
	USER_SKIP="cannot make a mount namespace (unshare --mount)"
fi
user_test() { [ -z "$USER_SKIP" ] || { skip "$USER_SKIP"; return; }; "$@"; }
run_test user-xdg-runtime-dir user_test t_user_xdg
run_test user-tmp-runtime-dir user_test t_user_tmp
run_test user-refused-tmp-dir user_test t_refused_tmp
run_test user-refused-xdg-dir user_test t_refused_xdg
run_test stop-wait t_stop_wait 20
run_test stop-wait-0 t_stop_wait 0
run_test stop-wait-timeout t_stop_wait_timeout
run_test client-timeout t_client_timeout
run_test silent-client t_silent_client
finish_tests

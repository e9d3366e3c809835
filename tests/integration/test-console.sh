#!/usr/bin/env bash
# The console as a user meets it: typed input reaching the UART and hvc0 (pseudo-terminal and pipe), Ctrl-a x and Ctrl-a a, keys typed while paused, and the terminal restored on every way lkvm ends.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=console
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=300 # lkvm --timeout of every run here (each ends long before, by its own test; the emulated host is slow)
PY=$(command -v /usr/bin/python3 || command -v python3 || true)
TTYDRIVE=$REPO_ROOT/tests/integration/ttydrive.py
# The VMs of this script have their own runtime directory (names for pause and stop).
LKVM_RUNTIME_DIR=$(mktemp -d /tmp/lkvm-console-test.XXXXXX)
export LKVM_RUNTIME_DIR
# shellcheck disable=SC2016 # expanded when the script ends
at_exit 'rm -rf "$LKVM_RUNTIME_DIR"'

# tty_lkvm pty|pipe LOG WANT STEP... -- RUN-ARGS...: `lkvm run -k console-echo.elf RUN-ARGS` on a
# pseudo-terminal or on pipes, played by ttydrive.py's STEPs, with --timeout $RUN_TIMEOUT (default
# T; the hang guard stays T + GUARD_SLACK); sets LAST_LOG and LAST_STATUS. Fails unless lkvm exited WANT and, on a terminal, had it in
# raw mode and left it as it found it (`stty -g` equal before and after).
tty_lkvm() {
	local mode=$1 log=$2 want=$3 t=${RUN_TIMEOUT:-$T} opt=() steps=() res
	shift 3
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		steps+=("$1")
		shift
	done
	shift
	[ -n "$PY" ] || { fail "no python3 to drive a terminal (scripts/deps.sh test installs it)"; return 1; }
	need_guest console-echo || return 1
	[ "$mode" = pipe ] && opt=(--pipe)
	LAST_LOG=$LOG_DIR/$log.log
	{
		printf '$ ttydrive.py %s' "${opt[*]}"
		printf ' %q' "${steps[@]}" -- "$LKVM" run -k "$ELF" --timeout "$t" "$@"
		printf '\n'
	} >"$LAST_LOG.cmd"
	res=$("$PY" "$TTYDRIVE" "${opt[@]}" --timeout $((T + GUARD_SLACK)) "$LAST_LOG" "${steps[@]}" -- \
		"$LKVM" run -k "$ELF" --timeout "$t" "$@" 2>&1)
	case $res in
	skip:*) skip "${res#skip: }"; return 1 ;;
	status=*) ;;
	*) fail "ttydrive: ${res:0:300}"; return 1 ;;
	esac
	LAST_STATUS=${res#status=}
	LAST_STATUS=${LAST_STATUS%% *}
	expect_status "$want" || return 1
	[ "$mode" = pipe ] && return 0
	case $res in
	*" restored=-"*) ;; # hung up: nothing left to read back
	*" raw=0 restored=1 "*) [ -n "${TTY_NEVER_RAW:-}" ] ||
		{ fail "lkvm never put the terminal in raw mode ($res)"; return 1; } ;;
	*" raw=1 "*) [ -z "${TTY_NEVER_RAW:-}" ] ||
		{ fail "lkvm put the terminal in raw mode for a run it refused ($res)"; return 1; } ;;&
	*" raw=1 restored=1 "*) ;;
	*" raw=0 "*) fail "lkvm never put the terminal in raw mode ($res)"; return 1 ;;
	*) fail "the terminal was not restored: ${res#* restored=0 }"; return 1 ;;
	esac
}

# bytes FROM TO [SKIP...]: the bytes FROM..TO (decimal) but the SKIP ones, as ttydrive send: text
# in SEND and as the guest reports them (hex) in HEX.
bytes() {
	local i
	SEND="" HEX=""
	for ((i = $1; i <= $2; i++)); do
		case " ${*:3} " in *" $i "*) continue ;; esac
		SEND+=$(printf '\\x%02x' "$i")
		HEX+=$(printf '%02x' "$i")
	done
}

# expect_line N HEX: the guest reported its N-th line as exactly these bytes.
expect_line() {
	local got
	got=$(grep -E "^GUEST console-echo: line $1 " "$LAST_LOG" | head -n 1)
	[ "$got" = "GUEST console-echo: line $1 len=$((${#2} / 2)) hex=$2" ] && return 0
	fail "line $1: expected ${#2} hex digits $2, the guest got: ${got:-nothing}"
}

READY='wait:^GUEST console-echo: ready'
# line_done N: the step that waits until the guest has reported its N-th line, all of it.
line_done() { printf 'wait:^GUEST console-echo: line %s .*\\n' "$1"; }

# ---- input reaches the guest ----

# Every byte value but '\n' (the guest's line end) and, on a terminal, Ctrl-a (lkvm's escape):
# raw mode passes Ctrl-C, Ctrl-Z, Ctrl-S/Ctrl-Q, DEL and bytes above 0x7f as they are, and lkvm
# keeps running. On a pipe there is no escape: Ctrl-a is an ordinary byte.
t_input() {
	local mode=$1 console=$2 dev=uart
	[ "$console" = virtio ] && dev=hvc0
	if [ "$mode" = pty ]; then bytes 0 255 1 10; else bytes 0 255 10; fi
	tty_lkvm "$mode" "console-input-$dev-$mode" 0 "$READY \\($dev\\)" "send:$SEND\n" \
		"$(line_done 1)" 'send:done\n' -- --console "$console" || return
	expect_line 1 "$HEX" || return
	expect_line 2 646f6e65 && expect_output '^GUEST DONE$'
}

# Ctrl-a a types one Ctrl-a (01), also when the two keys arrive in separate reads; Ctrl-a and
# another key pass both on, whole, also across reads; Ctrl-a x quits with status 0 (the guest
# never ends by itself), the terminal restored.
t_ctrl_a() {
	tty_lkvm pty console-ctrl-a 0 "$READY" 'send:x\x01ay\n' "$(line_done 1)" \
		'send:p\x01' read 'send:aq\n' "$(line_done 2)" \
		'send:r\x01' read 'send:bs\n' "$(line_done 3)" 'send:\x01x' -- || return
	expect_line 1 780179 && expect_line 2 700171 && expect_line 3 72016273 || return
	expect_output '^lkvm: stopped from the console \(Ctrl-a x\)' && expect_no_output '^GUEST DONE'
}

t_ctrl_a_x_hvc() {
	tty_lkvm pty console-ctrl-a-x-hvc 0 "$READY \\(hvc0\\)" 'send:\x01x' -- --console virtio || return
	expect_output '^lkvm: stopped from the console \(Ctrl-a x\)'
}

# Keys typed while the VM is paused wait, and arrive after resume, in order, none lost: more than
# the UART's FIFO and the first read (64 bytes) hold, in three bursts; the guest prints nothing
# while paused.
t_paused() {
	local console=$1 dev=uart name=con-paused-$1 all="" i
	[ "$console" = virtio ] && dev=hvc0
	local sends=()
	for i in 0 1 2; do
		bytes $((32 + i * 30)) $((32 + i * 30 + 99))
		sends+=("send:$SEND")
		all+=$HEX
	done
	tty_lkvm pty "console-paused-$dev" 0 "$READY \\($dev\\)" \
		"sh:$(printf '%q pause %q' "$LKVM" "$name")" "${sends[@]}" taken 'absent:^GUEST console-echo: line' 'send:\n' \
		"sh:$(printf '%q resume %q' "$LKVM" "$name")" "$(line_done 1)" 'send:done\n' \
		-- --console "$console" --name "$name" || return
	expect_line 1 "$all"
}

# ---- the terminal restored, however lkvm ends ----

# restored LOG WANT REGEX [STEP...] [-- RUN-ARGS...]: the run ends with status WANT, says REGEX
# (unless it is empty), and leaves the terminal as it found it (tty_lkvm checks).
restored() {
	local log=$1 want=$2 rx=$3 steps=()
	shift 3
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		steps+=("$1")
		shift
	done
	[ $# -gt 0 ] && shift
	tty_lkvm pty "console-restore-$log" "$want" "${steps[@]}" -- "$@" || return
	[ -z "$rx" ] || expect_output "$rx"
}

t_restore_panic() { restored panic 2 '^GUEST FAIL .*panic requested' "$READY" 'send:panic\n'; }
t_restore_timeout() { RUN_TIMEOUT=3 restored timeout 124 '^lkvm: error: timeout: 3 s passed'; }
t_restore_stop() {
	restored stop 3 '^lkvm: con-stop: stopped by lkvm stop' "$READY" \
		"sh:$(printf '%q stop con-stop' "$LKVM")" -- --name con-stop
}
# A run refused before the VM is built (an unknown --user is looked up first) leaves the terminal
# as it found it and never raw (TTY_NEVER_RAW).
t_restore_error() {
	TTY_NEVER_RAW=1 restored error 1 "^lkvm: error: --user 'lkvm-no-such-user': no such user" -- \
		--user lkvm-no-such-user || return
	[ "$(grep -c '^lkvm: error:' "$LAST_LOG")" = 1 ] ||
		fail "not one 'lkvm: error:' line: $(grep '^lkvm: error:' "$LAST_LOG" | tr '\n' '|')"
}
# The console thread's probe (LKVM_TEST_SANDBOX_VIOLATE, the test build's) stopped by its filter.
t_restore_sandbox() {
	need_testhooks || return
	LKVM=$LKVM_TESTHOOKS LKVM_TEST_SANDBOX_VIOLATE=console restored sandbox 159 '' || return
	expect_probe_stopped console
}
t_restore_sigterm() { restored sigterm 143 'stopped by signal 15' "$READY" kill:TERM; }
t_restore_sighup() { restored sighup 129 'stopped by signal 1 ' "$READY" kill:HUP; }
# The terminal itself goes away (a closed ssh session): lkvm gets SIGHUP from the kernel and stops
# the same way; there is no terminal left to restore or to print to, but an orderly stop removes
# the control socket (death by the signal would leave it behind).
t_hangup() {
	restored hangup 129 '' "$READY" hangup -- --name con-hangup || return
	[ ! -e "$LKVM_RUNTIME_DIR/con-hangup.sock" ] || fail "lkvm left its control socket: not an orderly stop"
}

skip_unless_kvm
run_test input-uart-pty t_input pty serial
run_test input-uart-pipe t_input pipe serial
run_test input-hvc0-pty t_input pty virtio
run_test input-hvc0-pipe t_input pipe virtio
run_test ctrl-a t_ctrl_a
run_test ctrl-a-x-hvc0 t_ctrl_a_x_hvc
run_test paused-uart t_paused serial
run_test paused-hvc0 t_paused virtio
run_test restore-panic t_restore_panic
run_test restore-timeout t_restore_timeout
run_test restore-stop t_restore_stop
run_test restore-error t_restore_error
run_test restore-sandbox t_restore_sandbox
run_test restore-sigterm t_restore_sigterm
run_test restore-sighup t_restore_sighup
run_test hangup t_hangup
finish_tests

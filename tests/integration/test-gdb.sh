#!/usr/bin/env bash
# Drives Debian's gdb (batch mode) against lkvm run --gdb on tests/guest/gdb-target.c: a breakpoint with its arguments, stepi, finish, a watchpoint, continue to a clean exit; lkvm debug NAME --gdb on a running VM; the refusals (one error line, status 1); and one session on the project's Linux guest (start_kernel, threads, jiffies, Ctrl-C, detach).
# shellcheck disable=SC2016 # $rdi, $pc and $N are gdb's, not the shell's
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=gdb
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=60 # lkvm --timeout
# start_vm's and lkvm debug's: lib.sh kills them when the script ends (a failed attach test's VM
# would run on to its --timeout).
PIDS_FILE=$(mktemp /tmp/lkvm-gdb-pids.XXXXXX)
# shellcheck disable=SC2016 # expanded when the script ends
at_exit 'rm -f "$PIDS_FILE"'

# A port for this test's server: 127.0.0.1, from the test's own pid (tests run in parallel).
port_of() { echo $((20000 + ($1 % 20000))); }
# The server's address for a gdb case: that port, or in the emulated host a unix socket in its
# /tmp (the checkout is a 9p share there, which holds no socket), so that unix:PATH, the one
# docs/debugging.md recommends, is served end to end by run --gdb and debug --gdb somewhere.
gdb_addr() {
	if [ "$(host_kind)" = emulated-svm ]; then
		echo "unix:${TMPDIR:-/tmp}/lkvm-gdb-$1.sock"
	else
		port_of "$1"
	fi
}

# gdb_vm NAME ADDR [RUN ARGS...]: lkvm run --gdb ADDR --gdb-wait on the guest in the background
# (start_vm), waiting until the server listens.
gdb_vm() {
	local name=$1 port=$2
	shift 2
	need_guest gdb-target || return
	VM_TIMEOUT=$T start_vm - "$name" -k "$ELF" --gdb "$port" --gdb-wait "$@"
	wait_until 10 _listening_or_gone "$port" || true
	_listening "$port" && return 0
	fail "lkvm --gdb $port never listened ($(tail -n 2 "$VM_LOG" | tr '\n' ' '))"
}
_listening() {
	case $1 in
	unix:*) [ -S "${1#unix:}" ] ;;
	*) ss -Hltn "sport = :$1" 2>/dev/null | grep -q . ;;
	esac
}
_listening_or_gone() { _listening "$1" || gone "$VM_PID"; }

# run_gdb LOG ADDR GDB-COMMAND...: gdb -batch on the guest's ELF against ADDR (gdb_addr), each command
# an -ex; its output in $LOG_DIR/LOG.gdb.log (GDB_LOG).
run_gdb() {
	local log=$1 port=$2 args=()
	shift 2
	need_cmd gdb test || return
	local target=127.0.0.1:$port
	[[ $port == unix:* ]] && target=${port#unix:}
	for c in "set pagination off" "set confirm off" "target remote $target" "$@"; do
		args+=(-ex "$c")
	done
	GDB_LOG=$LOG_DIR/$log.gdb.log
	timeout $T gdb -batch -nx "$ELF" "${args[@]}" >"$GDB_LOG" 2>&1
}

# gdb_has REGEX [DESCRIPTION]: in gdb's output.
gdb_has() {
	grep -Eq -- "$1" "$GDB_LOG" && return 0
	fail "gdb's output lacks ${2:-/$1/} (gdb log: $GDB_LOG)"
}

# The emulated host's nested SVM fires no breakpoint (only steps): a skip, never a pass.
no_bps_here() {
	[ "$(host_kind)" = emulated-svm ] || return 1
	skip "the emulated host's nested SVM fires no breakpoint, only steps (the probe of issue 30)"
	return 0
}

# Break on the function (the 4th call: a=3, b=6), its arguments, one instruction, finish to the
# caller (it returned 3 + 6), the global after four calls (0 + 3 + 6 + 9), then no breakpoint
# and on to a clean exit.
t_break() {
	local port
	no_bps_here && return
	port=$(gdb_addr $BASHPID)
	gdb_vm gdb-break "$port" -p "gdb.rounds=20 gdb.int3=1" || return
	run_gdb gdb-break "$port" 'break gdb_target_fn if $rdi == 3' continue 'p/x $rdi' \
		'p/x $rsi' 'p $pc == (long)gdb_target_fn' stepi 'p $pc > (long)gdb_target_fn' \
		finish 'p gdb_counter' delete continue
	end_vm
	gdb_has '^\$1 = 0x3$' 'rdi = 3 (a)' || return
	gdb_has '^\$2 = 0x6$' 'rsi = 6 (b)' || return
	gdb_has '^\$3 = 1$' 'the stop at gdb_target_fn' || return
	gdb_has '^\$4 = 1$' 'stepi moving on inside it' || return
	gdb_has '^0x[0-9a-f]+ in rounds ' 'finish back in the caller' || return
	gdb_has '^Value returned is \$5 = 9$' "finish's return value (3 + 6)" || return
	gdb_has '^\$6 = 18$' 'gdb_counter after four calls' || return
	gdb_has 'exited normally' "the guest's clean exit, as gdb saw it" || return
	expect_guest 0
}

# A hardware execution breakpoint (a debug register), hit by two calls in a row: continuing
# from it reaches the next call (a=1), not the same one again; then on to a clean exit.
t_hbreak() {
	local port
	no_bps_here && return
	port=$(gdb_addr $BASHPID)
	gdb_vm gdb-hbreak "$port" -p "gdb.rounds=20" || return
	run_gdb gdb-hbreak "$port" 'hbreak gdb_target_fn' continue 'p/x $rdi' continue 'p/x $rdi' \
		delete continue
	end_vm
	gdb_has '^Hardware assisted breakpoint 1 at ' || return
	gdb_has '^\$1 = 0x0$' 'the first call (a=0)' || return
	gdb_has '^\$2 = 0x1$' 'the second call (a=1)' || return
	gdb_has 'exited normally' || return
	expect_guest 0
}

# What every host does, the emulated one too: held before the first instruction, stepi moves
# the pc, gdb reads the global (0: nothing ran yet), continue to a clean exit.
t_step() {
	local port
	port=$(gdb_addr $BASHPID)
	gdb_vm gdb-step "$port" -p "gdb.rounds=20" || return
	run_gdb gdb-step "$port" 'p $pc == (long)_start' stepi stepi 'p $pc != (long)_start' \
		'p gdb_counter' continue
	end_vm
	gdb_has '^\$1 = 1$' 'the stop before the first instruction' || return
	gdb_has '^\$2 = 1$' 'stepi moving the pc' || return
	gdb_has '^\$3 = 0$' 'gdb_counter read before any call' || return
	gdb_has 'exited normally' || return
	expect_guest 0
}

# While gdb holds the VM stopped, lkvm resume and lkvm pause are refused (no vCPU runs under
# gdb), the global has not moved, and gdb's continue still runs the guest to its clean exit.
t_pause_owner() {
	local port n=gdb-pause-owner
	need_guest gdb-target || return
	port=$(gdb_addr $BASHPID)
	VM_TIMEOUT=$T start_vm $n $n -k "$ELF" --gdb "$port" --gdb-wait -p "gdb.rounds=20" || return
	wait_until 10 _listening_or_gone "$port" || true
	run_gdb $n "$port" "shell $LKVM resume $n; echo resume-status=\$?" \
		"shell $LKVM pause $n; echo pause-status=\$?" 'p gdb_counter' continue
	end_vm
	gdb_has "^lkvm: error: $n: gdb holds the VM stopped: continue or detach in gdb first$" \
		"lkvm resume's refusal" || return
	gdb_has '^resume-status=1$' || return
	gdb_has '^pause-status=1$' "lkvm pause's refusal" || return
	gdb_has '^\$1 = 0$' 'gdb_counter still 0' || return
	gdb_has 'exited normally' || return
	expect_guest 0
}

# A write watchpoint on the global (a debug register): fires on the store in the function.
t_watch() {
	local port
	is_pvm_host && { skip "this PVM host's KVM fires no watchpoint (the probe of issue 30)"; return; }
	no_bps_here && return
	port=$(gdb_addr $BASHPID)
	gdb_vm gdb-watch "$port" -p "gdb.rounds=20" || return
	run_gdb gdb-watch "$port" 'watch gdb_counter' continue continue delete continue
	end_vm
	gdb_has '^Hardware watchpoint 1: gdb_counter' || return
	gdb_has '^New value = 3$' 'the second call writing 3' || return
	gdb_has 'exited normally' || return
	expect_guest 0
}

t_wait_alone() {
	need_guest gdb-target || return
	run_lkvm gdb-wait-alone 1 -- run -k "$ELF" --gdb-wait || return
	one_error_line '--gdb-wait needs --gdb ADDR \(or -s\)'
}

t_bad_addr() {
	need_guest gdb-target || return
	run_lkvm gdb-bad-addr 1 -- run -k "$ELF" --gdb nosuch.invalid:99999 || return
	one_error_line '--gdb nosuch\.invalid:99999: .*'
}

t_port_in_use() {
	local port pid
	need_guest gdb-target || return
	need_cmd socat test || return
	port=$(port_of $BASHPID)
	socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr" - </dev/null >/dev/null 2>&1 &
	pid=$!
	wait_until 5 _listening "$port"
	run_lkvm gdb-port-in-use 1 -- run -k "$ELF" --gdb "$port"
	kill "$pid" 2>/dev/null
	[ "$LAST_STATUS" = 1 ] || { expect_status 1; return; }
	one_error_line "--gdb $port: .*"
}

# --- the project's Linux guest (one boot serves every check) --------------------------------------

LINUX_T=${LINUX_TIMEOUT:-600} # a bzImage boot on a loaded PVM host (test-linux.sh's bound)
# test-linux.sh's last boot stage: no disk comes, the kernel waits for it (as far as a PVM host goes).
LINUX_LAST_STAGE="Waiting for root device /dev/vda"

LINUX_CPUS_UP="smp: Brought up 1 node, 2 CPUs"
_cpus_up_or_gone() { grep -q "$LINUX_CPUS_UP" "$VM_LOG" || gone "$VM_PID" || gone "$GDB_PID"; }

# gdb_start LOG ADDR FILE GDB-COMMAND...: run_gdb's session on FILE's symbols, in the background
# (GDB_PID: timeout(1)'s, which hands a SIGINT on to gdb: Ctrl-C, which gdb relays as the 0x03
# interrupt); its output in $LOG_DIR/LOG.gdb.log (GDB_LOG).
gdb_start() {
	local log=$1 port=$2 file=$3 args=()
	shift 3
	need_cmd gdb test || return
	local target=127.0.0.1:$port
	[[ $port == unix:* ]] && target=${port#unix:}
	for c in "set pagination off" "set confirm off" "shell date +gdb-t0=%s.%N" "target remote $target" \
		"shell date +gdb-t1=%s.%N" "$@"; do
		args+=(-ex "$c")
	done
	GDB_LOG=$LOG_DIR/$log.gdb.log
	timeout "$LINUX_T" gdb -batch -nx "$file" "${args[@]}" >"$GDB_LOG" 2>&1 &
	GDB_PID=$!
}

# gdb_val REGEX: the first line of gdb's output matching REGEX, with sed's \1 of it.
gdb_val() { sed -nE "0,/$1/s/$1/\1/p" "$GDB_LOG"; }

# gdb_times: the time from `target remote` to the first stop (--gdb-wait's, before the first
# instruction) and to the stop at start_kernel (the decompressor ran meanwhile), from the dates
# the session printed, appended to gdb's log.
gdb_times() {
	local t0 t1 t2
	t0=$(gdb_val '^gdb-t0=([0-9.]+)$') t1=$(gdb_val '^gdb-t1=([0-9.]+)$') t2=$(gdb_val '^gdb-t2=([0-9.]+)$')
	awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "time: target remote to the first stop %.3f s, to start_kernel %.3f s\n", b - a, c - a }' \
		>>"$GDB_LOG"
}

# The kernel held before its first instruction on 2 vCPUs: a hardware breakpoint at start_kernel
# (its text is not yet where vmlinux says, so no int3), bt, rip, both vCPUs as gdb threads,
# jiffies; on until the console shows both CPUs up, where Ctrl-C stops the running guest: jiffies
# moved; detach, and the kernel runs on to its last boot stage, where it waits for a disk that
# never comes (so a fast host cannot end the run before the Ctrl-C lands: lkvm stop ends it).
t_linux() {
	local port
	no_bps_here && return
	need_kernel bzImage vmlinux || return
	port=$(gdb_addr $BASHPID)
	VM_TIMEOUT=$LINUX_T start_vm "gdb-linux-$BASHPID" gdb-linux -k "$G/bzImage" -m 256 -c 2 \
		--gdb "$port" --gdb-wait -p "nokaslr root=/dev/vda rootwait"
	wait_until 30 _listening_or_gone "$port" || true
	if ! _listening "$port"; then
		kill "$VM_PID" 2>/dev/null
		fail "lkvm --gdb $port never listened ($(tail -n 2 "$VM_LOG" | tr '\n' ' '))"
		return
	fi
	gdb_start gdb-linux "$port" "$G/vmlinux" 'hbreak start_kernel' continue 'shell date +gdb-t2=%s.%N' \
		bt 'info registers rip' 'p/x (long)&start_kernel' 'info threads' 'p *(unsigned long *)&jiffies' \
		delete continue 'p *(unsigned long *)&jiffies' detach || { kill "$VM_PID"; return 1; }
	# Ctrl-C only once the guest runs (gdb is in its second continue): its console says so.
	wait_until "$LINUX_T" _cpus_up_or_gone
	if ! grep -q "$LINUX_CPUS_UP" "$VM_LOG"; then
		kill "$GDB_PID" "$VM_PID" 2>/dev/null
		fail "no '$LINUX_CPUS_UP' on the console (gdb log: $GDB_LOG; $(tail -n 1 "$VM_LOG"))"
		return
	fi
	kill -INT "$GDB_PID"
	wait_exit "$GDB_PID" 120 || { kill "$VM_PID" 2>/dev/null; return 1; }
	wait_log "$VM_LOG" "$LINUX_LAST_STAGE" "$LINUX_T" || { kill "$VM_PID" 2>/dev/null; return 1; }
	ctl gdb-linux-stop stop "gdb-linux-$BASHPID"
	end_vm
	gdb_times
	linux_gdb_checks || return
	expect_status 3
}

# core_jiffies CORE: jiffies as gdb reads it from CORE with vmlinux's symbols (empty: none).
core_jiffies() {
	gdb -batch -nx "$G/vmlinux" ${1:+"$1"} -ex 'p *(unsigned long *)&jiffies' 2>/dev/null |
		sed -n 's/^\$1 = \([0-9][0-9]*\)$/\1/p'
}

# lkvm dump of the Linux guest (nokaslr, 2 vCPUs) waiting for its disk: readelf reads the core's
# header, its PT_LOADs (direct map and kernel map) and two NT_PRSTATUS; gdb with vmlinux reads
# jiffies from it, past the value vmlinux itself holds (INITIAL_JIFFIES); a second dump's is
# later (the VM ran on after the first, as lkvm list says), and lkvm stop ends it (3).
t_dump() {
	need_kernel bzImage vmlinux && need_cmd gdb test && need_cmd readelf build || return
	local name=gdb-dump-$BASHPID core=$LOG_DIR/gdb-dump-$BASHPID.core j0 j1 j2
	VM_TIMEOUT=$LINUX_T start_vm "$name" gdb-dump -k "$G/bzImage" -m 256 -c 2 \
		-p "nokaslr root=/dev/vda rootwait"
	wait_log "$VM_LOG" "$LINUX_LAST_STAGE" "$LINUX_T" || { kill "$VM_PID" 2>/dev/null; return 1; }
	ctl gdb-dump-1 dump "$name" "$core"
	if ! expect_status 0; then kill "$VM_PID" 2>/dev/null; return 1; fi
	readelf -h -l -n "$core" >"$LOG_DIR/gdb-dump.readelf" 2>&1
	j0=$(core_jiffies) j1=$(core_jiffies "$core")
	ctl gdb-dump-2 dump "$name" "$core.2"
	j2=$(core_jiffies "$core.2")
	ctl gdb-dump-list list
	grep -Eq "^$name +[0-9]+ +running " "$LAST_LOG" || { fail "not running after the dumps: $(cat "$LAST_LOG")"; kill "$VM_PID"; return 1; }
	ctl gdb-dump-stop stop "$name"
	end_vm
	rm -f "$core.2"
	grep -q 'Type: *CORE' "$LOG_DIR/gdb-dump.readelf" &&
		[ "$(grep -c '^ *LOAD ' "$LOG_DIR/gdb-dump.readelf")" = 2 ] &&
		grep -q '^ *LOAD .* 0xffff888000000000 0x0000000000000000$' "$LOG_DIR/gdb-dump.readelf" &&
		grep -q '^ *LOAD .* 0xffffffff80000000 0x0000000000000000$' "$LOG_DIR/gdb-dump.readelf" &&
		[ "$(grep -c 'NT_PRSTATUS' "$LOG_DIR/gdb-dump.readelf")" = 2 ] ||
		{ fail "readelf of the core: $(tr '\n' ' ' <"$LOG_DIR/gdb-dump.readelf" | head -c 300)"; return; }
	rm -f "$core"
	if [ -z "$j0" ] || [ -z "$j1" ] || [ -z "$j2" ] || [ "$j1" -le "$j0" ] || [ "$j2" -le "$j1" ]; then
		fail "jiffies: vmlinux's $j0, the first dump's '$j1', the second's '$j2'"
		return
	fi
	echo "jiffies: vmlinux $j0, dump 1 $j1, dump 2 $j2" >&2
	expect_status 3
}

# What t_linux's gdb session printed.
linux_gdb_checks() {
	local rip addr j1 j2 threads
	gdb_has '^Hardware assisted breakpoint 1 at ' || return
	gdb_has 'hit Breakpoint 1, 0x[0-9a-f]+ in start_kernel \(\)' 'the stop at start_kernel' || return
	gdb_has '^#0 +0x[0-9a-f]+ in start_kernel \(\)$' "bt's frame #0 in start_kernel" || return
	rip=$(gdb_val '^rip +(0x[0-9a-f]+) .*') addr=$(gdb_val '^\$1 = (0x[0-9a-f]+)$')
	if [ -z "$rip" ] || [ "$rip" != "$addr" ]; then
		fail "info registers rip: '$rip', start_kernel is at '$addr' (gdb log: $GDB_LOG)"
		return
	fi
	threads=$(sed -n '/^  Id  *Target Id/,/^\$/p' "$GDB_LOG" | grep -cE '^[* ] +[0-9]+ +Thread ')
	[ "$threads" = 2 ] || { fail "info threads: $threads threads, not 2 (-c 2; gdb log: $GDB_LOG)"; return; }
	j1=$(gdb_val '^\$2 = ([0-9]+)$') j2=$(gdb_val '^\$3 = ([0-9]+)$')
	if [ -z "$j1" ] || [ -z "$j2" ] || [ "$j2" -le "$j1" ]; then
		fail "jiffies did not move: '$j1' at start_kernel, '$j2' after the Ctrl-C (gdb log: $GDB_LOG)"
		return
	fi
	gdb_has 'received signal SIGINT, Interrupt' "Ctrl-C's stop" || return
	gdb_has '^\[Inferior 1 \(Remote target\) detached\]$' 'the detach'
}

# debug_gdb NAME ADDR LOG: lkvm debug NAME --gdb ADDR in the background (DEBUG_PID, its output in
# $LOG_DIR/LOG.log: DEBUG_LOG), waiting until it listens.
debug_gdb() {
	DEBUG_LOG=$LOG_DIR/$3.log
	# Not under timeout(1): DEBUG_PID is lkvm's own, which wait_exit and the script's end kill.
	"$LKVM" debug "$1" --gdb "$2" </dev/null >"$DEBUG_LOG" 2>&1 &
	DEBUG_PID=$!
	echo "$DEBUG_PID" >>"$PIDS_FILE"
	wait_until 10 _listening_or_debug_gone "$2" || true
	_listening "$2" && return 0
	LAST_LOG=$DEBUG_LOG
	fail "lkvm debug --gdb $2 never listened ($(tr '\n' ' ' <"$DEBUG_LOG"))"
}
_listening_or_debug_gone() { _listening "$1" || gone "$DEBUG_PID"; }

# clock_continuous LOG: the ticks guest's kvm-clock between consecutive TICK lines of LOG (every
# 50 ms of its clock) never jumped by 500 ms or more, and no tick number is missing: a stop that
# lasted longer (gdb's) was a pause, as lkvm pause's is. Says what it found otherwise.
clock_continuous() {
	"$PY" - "$1" <<'EOF2'
import re, sys
t = [(int(n), int(ns)) for n, ns in
     re.findall(r'^TICK n=(\d+) kvmclock_ns=(\d+) ', open(sys.argv[1], errors='replace').read(), re.M)]
for (n1, g1), (n2, g2) in zip(t, t[1:]):
    if n2 != n1 + 1 or g2 - g1 >= 500_000_000:
        print(f"ticks {n1} -> {n2}: kvm-clock {g1} -> {g2} ns")
        sys.exit(1)
EOF2
}

# lkvm debug NAME --gdb on a running VM (the ticks guest, a line every 50 ms of its kvm-clock):
# gdb reads a global and a register, steps once, holds the VM over a second, and a second attach
# meanwhile is refused (one line, status 1); after gdb detaches lkvm debug ends with 0, the guest
# ticks on, its clock continuous over the stop, and lkvm stat counts gdb's stops (the attach and
# the step), the step, one client and no bad packet.
t_attach() {
	local n=gdb-attach addr addr2 last second=$LOG_DIR/gdb-attach-second.log
	need_guest ticks || return
	addr=$(gdb_addr $BASHPID)
	addr2=$(gdb_addr $((BASHPID + 1)))
	VM_TIMEOUT=$T start_vm $n $n -k "$ELF" -p tick_ms=50
	wait_vm $n || return
	wait_log "$VM_LOG" '^TICK n=3 ' || return
	debug_gdb $n "$addr" gdb-attach-debug || return
	grep -q "^gdb: listening on $addr (VM $n); the VM runs until gdb stops it$" "$DEBUG_LOG" ||
		{ LAST_LOG=$DEBUG_LOG; fail "lkvm debug's listening line"; return; }
	run_gdb $n "$addr" 'p prev_ns > 0' 'p $pc != 0' stepi 'shell sleep 1' \
		"shell $LKVM debug $n --gdb $addr2 >$second 2>&1; echo second-status=\$?" detach
	wait_exit "$DEBUG_PID" 10 || return
	[ "$EXIT_STATUS" = 0 ] || { LAST_LOG=$DEBUG_LOG; fail "lkvm debug ended with $EXIT_STATUS"; return; }
	gdb_has '^\$1 = 1$' 'prev_ns, a global of the guest, read' || return
	gdb_has '^\$2 = 1$' 'the pc read' || return
	gdb_has '^second-status=1$' "the second attach's status" || return
	LAST_LOG=$second
	one_error_line "$n: gdb: another gdb is attached \(lkvm debug --gdb\): one gdb at a time" || return
	last=$(grep -Eo '^TICK n=[0-9]+' "$VM_LOG" | tail -n 1)
	wait_log "$VM_LOG" "^TICK n=$((${last#TICK n=} + 3)) " ||
		{ fail "the guest stopped ticking after gdb detached"; return; }
	local why
	why=$(clock_continuous "$VM_LOG") || { LAST_LOG=$VM_LOG; fail "not continuous: $why"; return; }
	local st
	st=$(stat_val $n "' '.join(str(d['gdb'][k]) for k in ('stops', 'breakpoints_hit', 'steps', 'clients', 'bad_packets')), d['gdb']['packets'] > 10")
	[ "$st" = "2 1 1 1 0 True" ] ||
		{ fail "lkvm stat's gdb counters (stops, breakpoints_hit, steps, clients, bad_packets; packets > 10): $st, expected 2 1 1 1 0 True"; return; }
	[[ $addr != unix:* ]] || [ ! -e "${addr#unix:}" ] || { fail "lkvm debug left ${addr#unix:} behind"; return; }
	ctl $n-stop stop $n
	wait_exit "$VM_PID" 10 || return
	LAST_LOG=$VM_LOG
	[ "$EXIT_STATUS" = 3 ] || fail "exit status $EXIT_STATUS after lkvm stop, not 3"
}

# The VM ends (lkvm stop) while gdb, attached with lkvm debug, waits in continue: gdb hears the
# exit status (3) and lkvm debug ends with 0.
t_attach_exit() {
	local n=gdb-attach-exit addr
	need_guest ticks || return
	addr=$(gdb_addr $BASHPID)
	VM_TIMEOUT=$T start_vm $n $n -k "$ELF" -p tick_ms=50
	wait_vm $n || return
	debug_gdb $n "$addr" gdb-attach-exit-debug || return
	run_gdb $n "$addr" "shell (sleep 1; $LKVM stop $n) >/dev/null 2>&1 &" continue
	wait_exit "$DEBUG_PID" 10 || return
	[ "$EXIT_STATUS" = 0 ] || { LAST_LOG=$DEBUG_LOG; fail "lkvm debug ended with $EXIT_STATUS"; return; }
	gdb_has 'exited with code 03' "the VM's end (status 3), as gdb saw it" || return
	wait_exit "$VM_PID" 10 || return
	LAST_LOG=$VM_LOG
	[ "$EXIT_STATUS" = 3 ] || fail "exit status $EXIT_STATUS after lkvm stop, not 3"
}

# gdb vanishes (killed) while attached with lkvm debug: lkvm debug ends with 0 and the VM runs on
# (the server detaches it: breakpoints out, its pause ended).
t_attach_vanish() {
	local n=gdb-attach-vanish addr last
	need_guest ticks || return
	addr=$(gdb_addr $BASHPID)
	VM_TIMEOUT=$T start_vm $n $n -k "$ELF" -p tick_ms=50
	wait_vm $n || return
	debug_gdb $n "$addr" gdb-attach-vanish-debug || return
	# shellcheck disable=SC2016 # gdb's shell expands $PPID: gdb itself
	run_gdb $n "$addr" 'p $pc != 0' 'shell kill -KILL $PPID'
	gdb_has '^\$1 = 1$' 'the pc read' || return
	wait_exit "$DEBUG_PID" 10 || return
	[ "$EXIT_STATUS" = 0 ] || { LAST_LOG=$DEBUG_LOG; fail "lkvm debug ended with $EXIT_STATUS"; return; }
	last=$(grep -Eo '^TICK n=[0-9]+' "$VM_LOG" | tail -n 1)
	wait_log "$VM_LOG" "^TICK n=$((${last#TICK n=} + 3)) " ||
		{ fail "the guest stopped ticking after gdb vanished"; return; }
	ctl $n-stop stop $n
	wait_exit "$VM_PID" 10
}

# Refusals, one line and status 1 each: no such VM; a VM that serves gdb itself (run --gdb).
t_attach_refused() {
	local n=gdb-attach-run addr
	need_guest ticks || return
	addr=$(gdb_addr $BASHPID)
	run_lkvm gdb-attach-novm 1 -- debug gdb-no-such-vm --gdb "$addr" || return
	one_error_line "no VM named 'gdb-no-such-vm' .*" || return
	VM_TIMEOUT=$T start_vm $n $n -k "$ELF" -p tick_ms=50 --gdb "$addr"
	wait_vm $n || return
	run_lkvm gdb-attach-run-debug 1 -- debug $n --gdb "$(gdb_addr $((BASHPID + 1)))" || return
	one_error_line "$n: gdb: this VM serves gdb on its own address \(lkvm run --gdb\): one gdb at a time" || return
	ctl $n-stop stop $n
	wait_exit "$VM_PID" 10
}

# --gdb unix:PATH under the sandbox: the socket is gone after the run (main may not unlink: a
# child forked at listen time removes it), after a gdb session as after none.
t_unix_gone() {
	local n=gdb-unix-gone sock=${TMPDIR:-/tmp}/lkvm-gdb-gone-$BASHPID.sock
	need_guest gdb-target || return
	rm -f "$sock"
	gdb_vm $n "unix:$sock" -p "gdb.rounds=20" || return
	run_gdb $n "unix:$sock" continue
	end_vm
	gdb_has 'exited normally' || return
	expect_guest 0 || return
	[ ! -e "$sock" ] || { fail "$sock left behind after the run"; return; }
	VM_TIMEOUT=$T start_vm $n $n -k "$GUEST_DIR/ticks.elf" --gdb "unix:$sock"
	wait_vm $n || return
	[ -S "$sock" ] || { fail "no socket $sock while the VM runs"; return; }
	ctl $n-stop stop $n
	wait_exit "$VM_PID" 10 || return
	[ ! -e "$sock" ] || fail "$sock left behind after lkvm stop"
}

skip_unless_kvm
run_test gdb-break t_break
run_test gdb-hbreak t_hbreak
run_test gdb-step t_step
run_test gdb-pause-owner t_pause_owner
run_test gdb-watch t_watch
run_test gdb-wait-alone t_wait_alone
run_test gdb-bad-addr t_bad_addr
run_test gdb-port-in-use t_port_in_use
run_test gdb-linux t_linux
run_test gdb-dump t_dump
run_test gdb-attach t_attach
run_test gdb-attach-exit t_attach_exit
run_test gdb-attach-vanish t_attach_vanish
run_test gdb-attach-refused t_attach_refused
run_test gdb-unix-gone t_unix_gone
finish_tests

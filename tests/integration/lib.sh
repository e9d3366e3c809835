# Bash helpers for integration tests: run lkvm under a wall-clock guard, assert status and output, tally results.
# shellcheck shell=bash
#
# A test is a shell function run by `run_test NAME FUNC [ARGS...]` (in a subshell, possibly in the
# background). Inside it: `run_lkvm LOG STATUS -- LKVM-ARGS...`, `expect_status`, `expect_output`,
# `fail WHY`, `skip WHY`. Each test prints exactly one line: "ok NAME", "FAIL NAME: why (log: path)"
# or "skip NAME: why". `finish_tests` waits for all, prints them in order and the summary line
# "guests: N passed, N failed, N skipped (host: KIND)", and returns non-zero when any test failed.
# A test passes only when it returns 0 without calling fail or skip: one that returns non-zero
# without saying why fails.
# Skips: only for what this machine lacks (no /dev/net/tun, no network namespaces, not root).
# What the project builds or installs itself (lkvm, guests, tools, the guest kernel, the Debian
# packages of scripts/deps.sh) being absent is a failure. "skip NAME: why" at the start of a line
# is the one skip format: tests/run-unit.sh prints the same and tests/check.sh lists them all.
# For VMs a test drives while they run (pause, stat, stop): start_vm, end_vm, wait_vm, wait_log,
# wait_exit, ctl, stat_val (and expect_guest, after end_vm, for a C test guest). For a NIC on a
# tap: skip_unless_net, in_netns, tap_up, tap_stat, peer_start, peer_stop. Clean-up when the
# script ends, however it ends: at_exit (and PIDS_FILE).

REPO_ROOT=${REPO_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LKVM=${LKVM:-$REPO_ROOT/lkvm}
case $LKVM in /*) ;; *) LKVM=$REPO_ROOT/$LKVM ;; esac
# The test build (make build/testhooks/lkvm): lkvm with its test hooks
# (LKVM_TEST_SANDBOX_VIOLATE), which the release lkvm leaves out. Run it as LKVM=$LKVM_TESTHOOKS.
LKVM_TESTHOOKS=${LKVM_TESTHOOKS:-$REPO_ROOT/build/testhooks/lkvm}
GUEST_DIR=${GUEST_DIR:-$REPO_ROOT/build/guests}
LOG_DIR=${LOG_DIR:-$REPO_ROOT/build/test-logs}
TEST_JOBS=${TEST_JOBS:-2}       # tests run at once (the hosts have 2 cores)
GUARD_SLACK=${GUARD_SLACK:-10}  # seconds the wall-clock guard allows beyond lkvm's --timeout
GUARD_DEFAULT=${GUARD_DEFAULT:-60}
SUMMARY_PREFIX=${SUMMARY_PREFIX:-guests}

mkdir -p "$LOG_DIR"
_RES_DIR=$(mktemp -d "$LOG_DIR/.results.XXXXXX")
_TEST_ORDER=()
_SKIP_ALL=""
_FAIL_ALL=""

# --- when the script ends ------------------------------------------------------------------------

_AT_EXIT=()

# at_exit CMD: CMD (eval'd) runs when the script ends, however it ends (after the lkvm processes
# of PIDS_FILE are killed and the network namespaces of in_netns deleted): tests run in
# background subshells, and one interrupted leaves what it made for the script to remove.
at_exit() { _AT_EXIT+=("$*"); }

_lib_exit() {
	local p c
	if [ -n "${PIDS_FILE-}" ] && [ -f "$PIDS_FILE" ]; then
		while read -r p; do kill -KILL "$p" 2>/dev/null; done <"$PIDS_FILE"
	fi
	netns_cleanup
	for c in "${_AT_EXIT[@]}"; do eval "$c"; done
}
trap _lib_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# fail_all WHY: every later test fails with WHY (something the project builds is missing).
fail_all() { _FAIL_ALL=${_FAIL_ALL:-$*}; }

# Marks every later test skipped (not passed) when /dev/kvm is missing or cannot be opened (run
# the script through scripts/kvm-host.sh, which finds one), and failed when lkvm is not built.
skip_unless_kvm() {
	if [ ! -e /dev/kvm ]; then
		_SKIP_ALL="/dev/kvm missing (scripts/kvm-host.sh runs tests where KVM works)"
	elif ! { exec 9<>/dev/kvm; } 2>/dev/null; then
		_SKIP_ALL="/dev/kvm cannot be opened read-write (scripts/kvm-host.sh runs tests where KVM works)"
	else
		exec 9>&-
	fi
	[ -x "$LKVM" ] || fail_all "no lkvm binary at $LKVM (run make)"
}

# Where the guests run: native-pvm (this machine's KVM is kvm_pvm: guest kernel code emulated,
# no guest user space), native (VMX or SVM), or emulated-svm (inside scripts/kvm-host.sh's
# emulated host, which sets LKVM_HOST_KIND). "kvm_pvm loaded" alone does not make a PVM host: it
# may not have bound (no /dev/kvm), and a CPU with VMX/SVM serves /dev/kvm through kvm_intel/amd.
host_kind() {
	if [ -n "${LKVM_HOST_KIND-}" ]; then
		echo "$LKVM_HOST_KIND"
	elif [ -d /sys/module/kvm_pvm ] && ! grep -qwE 'vmx|svm' /proc/cpuinfo; then
		echo native-pvm
	else
		echo native
	fi
}

# True on a host whose KVM is kvm_pvm (guest kernel code emulated; lkvm completes some instructions).
is_pvm_host() { [ "$(host_kind)" = native-pvm ]; }

# In a test that runs guest user space: skips it on a PVM host, where that cannot make system
# calls (make check runs such stages in the emulated host).
skip_unless_userspace() {
	is_pvm_host || return 0
	skip "guest user space cannot make system calls on a PVM host (make check runs this stage in the emulated host)"
	return 1
}

# --- inside a test -------------------------------------------------------------------------------

fail() {
	_T_RESULT="FAIL $_T_NAME: $* (log: ${LAST_LOG:-none})"
	return 1
}

skip() {
	_T_RESULT="skip $_T_NAME: $*"
	return 1
}

# run_lkvm LOG EXPECTED_STATUS -- ARGS...: runs "$LKVM ARGS..." with stdin from /dev/null, stdout and
# stderr into $LOG_DIR/LOG.log (under $LKVM_WRAP when set), under timeout(1) (SIGKILL at lkvm's --timeout + GUARD_SLACK s).
# Sets LAST_LOG, LAST_STATUS, LAST_SECS (wall time, 0.01 s); fails unless the status is expected.
run_lkvm() {
	local log=$1 want=$2
	shift 2
	[ "${1-}" = "--" ] && shift
	local guard=$GUARD_DEFAULT prev="" a
	for a in "$@"; do
		if [ "$prev" = "--timeout" ]; then guard=$((a + GUARD_SLACK)); fi
		case $a in --timeout=*) guard=$((${a#--timeout=} + GUARD_SLACK)) ;; esac
		prev=$a
	done
	LAST_LOG=$LOG_DIR/$log.log
	local t0 t1
	t0=$(date +%s%N)
	{
		printf '$ %s' "$LKVM"
		printf ' %q' "$@"
		printf '\n'
	} >"$LAST_LOG.cmd"
	# LKVM_WRAP: a command lkvm runs under, e.g. "ip netns exec NS" (word-split on purpose),
	# that execs it. LKVM_PIDFILE: where lkvm's pid goes, for a test that signals it.
	local pre=()
	# shellcheck disable=SC2016 # sh expands it
	[ -z "${LKVM_PIDFILE-}" ] || pre=(sh -c 'echo $$ >"$0" && exec "$@"' "$LKVM_PIDFILE")
	# shellcheck disable=SC2086
	timeout -s KILL "$guard" "${pre[@]}" ${LKVM_WRAP-} "$LKVM" "$@" </dev/null >"$LAST_LOG" 2>&1
	LAST_STATUS=$?
	t1=$(date +%s%N)
	LAST_SECS=$(((t1 - t0) / 10000000))
	LAST_SECS=$((LAST_SECS / 100)).$(printf '%02d' $((LAST_SECS % 100)))
	# 137 is also lkvm's own status for a guest command killed by SIGKILL: the guard only if its
	# time ran out.
	if [ "$LAST_STATUS" = 137 ] && [ $(((t1 - t0) / 1000000000)) -ge "$guard" ]; then
		fail "wall-clock guard (${guard}s) killed lkvm: it hung"
		return 1
	fi
	expect_status "$want"
}

# run_guest LOG EXPECTED_STATUS -- ARGS...: run_lkvm for a C test guest that checks itself
# (tests/guest/lib/guest.h): its status, through lkvm's exit port, is the result. 0 is a pass
# only with lkvm's line saying the guest reported it (guest_done; a reset or a triple fault also
# ends with 0), 4 a failed GUEST_ASSERT, 2 an exception. A run that ends otherwise fails the test
# with the guest's own "GUEST FAIL file:line: ..." line when it printed one.
run_guest() {
	local log=$1 want=$2
	shift 2
	run_lkvm "$log" "$want" "$@" || { why_guest_failed; return 1; }
	_guest_reported "$want"
}

# expect_guest EXPECTED_STATUS: run_guest's check for a C test guest run with start_vm, after
# end_vm (a guest the script drives while it runs).
expect_guest() {
	expect_status "$1" || { why_guest_failed; return 1; }
	_guest_reported "$1"
}

# _guest_reported STATUS: a status 0 came through the exit port (guest_done), not a reset.
_guest_reported() {
	[ "$1" = 0 ] || return 0
	_log_has -E 'guest exited with 0 \(lkvm-exit\)'
	case $? in 0) return 0 ;; 2) return 1 ;; esac
	fail "status 0 without the guest's report through the exit port (a reset, not guest_done)"
}

expect_status() {
	[ "$LAST_STATUS" = "$1" ] && return 0
	local last
	last=$(grep -v '^GUEST ' "$LAST_LOG" | tail -n 1 | cut -c1-200)
	fail "exit status $LAST_STATUS, expected $1${last:+; last line: $last}"
}

# _log_has GREP-OPTIONS REGEX: grep's answer on the last run's output (0 found, 1 not); a grep
# that cannot answer (no log, a bad regex) fails the test and returns 2.
_log_has() {
	local err rc
	err=$(grep -q "$1" -- "$2" "$LAST_LOG" 2>&1)
	rc=$?
	[ "$rc" -le 1 ] && return "$rc"
	fail "grep cannot search ${LAST_LOG:-(no log)} for /$2/: ${err:-status $rc}"
	return 2
}

# copy_for_others DIR FILE...: copies of FILEs (same base names) in DIR, made 0755, that any
# user may read and run. A test that runs lkvm as another user runs these: a checkout inside a
# 0700 directory (mktemp -d under /tmp, as a clean clone is made) is not that user's to reach.
copy_for_others() {
	local dir=$1
	shift
	mkdir -p "$dir" && chmod 755 "$dir" && cp "$@" "$dir/" && chmod a+rX "$dir"/* ||
		{ fail "cannot copy $* to $dir for another user"; return 1; }
}

# one_error_line REGEX: the last command printed exactly one line, an error matching REGEX (a \r,
# as a terminal's ONLCR adds, is ignored).
one_error_line() {
	[ "$(wc -l <"$LAST_LOG")" = 1 ] && tr -d '\r' <"$LAST_LOG" | grep -Eq -- "^lkvm: error: $1\$" &&
		return 0
	fail "expected one line 'lkvm: error: $1', got: $(head -c 300 "$LAST_LOG" | tr '\n' '|')"
}

# expect_output REGEX [DESCRIPTION]: extended regex somewhere in the last run's output.
expect_output() {
	_log_has -E "$1"
	case $? in 0) return 0 ;; 2) return 1 ;; esac
	fail "output lacks ${2:-/$1/}"
}

expect_output_i() {
	_log_has -Ei "$1"
	case $? in 0) return 0 ;; 2) return 1 ;; esac
	fail "output lacks ${2:-/$1/ (any case)}"
}

expect_no_output() {
	_log_has -E "$1"
	case $? in 1) return 0 ;; 2) return 1 ;; esac
	fail "output has ${2:-/$1/}: $(grep -Em1 -- "$1" "$LAST_LOG" | cut -c1-200)"
}

# --- a NIC on a tap: network namespaces, taps, net-peer -------------------------------------------

PEER=${PEER:-$REPO_ROOT/build/tools/net-peer}

# skip_unless_net [NOTE]: in a test that needs a tap in a network namespace: skips it where this
# machine cannot (no /dev/net/tun, or it cannot be opened, or no namespaces; NOTE is added to the
# reason), fails it without ip(8), which scripts/deps.sh installs.
skip_unless_net() {
	local why="" ns=lkvm-probe-$BASHPID-$$
	if [ ! -c /dev/net/tun ]; then
		why="/dev/net/tun missing"
	elif ! (exec 3<>/dev/net/tun) 2>/dev/null; then
		why="/dev/net/tun cannot be opened"
	elif ! command -v ip >/dev/null 2>&1; then
		fail "no ip(8) (scripts/deps.sh test installs iproute2)"
		return 1
	elif ! ip netns add "$ns" 2>/dev/null; then
		why="cannot create network namespaces (ip netns add)"
	else
		ip netns del "$ns"
		return 0
	fi
	skip "$why${1:+ $1}"
	return 1
}

# in_netns FUNC [ARGS...]: runs FUNC with NETNS naming a new network namespace (lo up), in which
# run_lkvm and start_vm start lkvm (LKVM_WRAP, LKVM_PREFIX), and deletes it when FUNC returns,
# whatever FUNC returns (netns_cleanup, when the script ends, gets one an interrupted test left).
# Skips the test when no namespace can be made.
in_netns() {
	NETNS=lkvm-$_T_NAME-$$
	ip netns add "$NETNS" 2>/dev/null || { skip "cannot create network namespaces (ip netns add)"; return 1; }
	ip netns exec "$NETNS" ip link set lo up
	local rc=0 LKVM_WRAP="ip netns exec $NETNS" LKVM_PREFIX="ip netns exec $NETNS"
	"$@" || rc=$?
	ip netns del "$NETNS" 2>/dev/null
	return $rc
}

# netns_cleanup: deletes the namespaces this script's tests made (named lkvm-*-PID).
netns_cleanup() {
	local ns
	command -v ip >/dev/null 2>&1 || return 0
	for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }'); do
		case $ns in lkvm-*-"$$") ip netns del "$ns" 2>/dev/null ;; esac
	done
}

# tap_up NAME: a vnet_hdr tap in $NETNS, up, with IPv6 off there (the host's own router
# solicitations would count among the frames a test expects). Fails the test when it cannot.
tap_up() {
	ip netns exec "$NETNS" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null
	ip netns exec "$NETNS" ip tuntap add dev "$1" mode tap vnet_hdr &&
		ip netns exec "$NETNS" ip link set "$1" up && return 0
	fail "could not create tap $1"
}

# tap_stat NAME COUNTER: the host side's COUNTER (rx_packets, tx_packets, ...) of link NAME in
# $NETNS: what crossed the tap, whatever lkvm and the guest say.
tap_stat() { ip netns exec "$NETNS" cat "/sys/class/net/$1/statistics/$2" 2>/dev/null; }

# tap_rx_above TAP N: the host side of TAP has received more than N frames.
tap_rx_above() { [ "$(tap_stat "$1" rx_packets)" -gt "$2" ]; }

# has_link NAME: link NAME exists in $NETNS (a tap lkvm made, or removed).
has_link() { ip netns exec "$NETNS" ip link show "$1" >/dev/null 2>&1; }

# peer_start LOG MODE TAP SECS SIZE: build/tools/net-peer MODE (count, echo, ...) in $NETNS on TAP
# for SECS s with SIZE-byte frames, in the background (PEER_PID); its results in PEER_LOG
# ($LOG_DIR/LOG.peer), its messages in PEER_LOG.err. Waits until it is ready (10 s), or stops it
# and fails the test: frames the guest sends before then would be lost.
peer_start() {
	PEER_LOG=$LOG_DIR/$1.peer
	need_built "$PEER" "make tools" || return
	rm -f "$PEER_LOG" "$PEER_LOG.err" # an earlier run's "ready" must not count
	ip netns exec "$NETNS" "$PEER" "$2" "$3" "$4" "$5" >"$PEER_LOG" 2>"$PEER_LOG.err" &
	PEER_PID=$!
	wait_until 10 grep -q ready "$PEER_LOG.err" && return 0
	kill -KILL "$PEER_PID" 2>/dev/null
	wait "$PEER_PID" 2>/dev/null
	fail "net-peer not ready after 10 s: $(head -c 200 "$PEER_LOG.err")"
}

# peer_stop: ends net-peer (SIGTERM: it prints its counts to PEER_LOG) and waits for it.
peer_stop() {
	kill -TERM "$PEER_PID" 2>/dev/null
	wait "$PEER_PID"
}

# kv KEY LINE: the value of KEY=value in LINE (a guest's BENCH line, net-peer's PEER line).
kv() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"; }

# qstat QUEUE FIELD: a counter of one queue (tx0, rx0, ...) from the last --stats=json line of
# the last run's log.
qstat() {
	grep '^{"vcpu_exits"' "$LAST_LOG" | tail -n 1 | grep -o "\"name\":\"$1\"[^}]*" |
		grep -o "\"$2\":[0-9]*" | cut -d: -f2
}

# group_stat GROUP NAME: a value of a device-wide group (vhost: pairs, running, rx0_used_idx, ...;
# trace: transactions, tsc_khz, ...) from the last --stats=json line of the last run's log.
group_stat() {
	grep '^{"vcpu_exits"' "$LAST_LOG" | tail -n 1 | grep -o "\"$1\":{[^}]*" |
		grep -o "\"$2\":[0-9]*" | cut -d: -f2
}
vhost_stat() { group_stat vhost "$1"; }

# udp_flows ADDR: 64 UDP datagrams from $NETNS to ADDR, each from a new source port, to ports
# nobody listens on: flows a multiqueue tap spreads over its attached queues by their hash (the
# chance that all 64 take one of two queues is 2^-63). ADDR's MAC must be known (ping it first).
udp_flows() {
	ip netns exec "$NETNS" bash -c "for p in {1..64}; do echo mq > /dev/udp/$1/\$((20000 + p)); done"
}

# ---- net-bench (build/guests/net-bench.elf, ELF from need_guest) against net-peer: test-c-guests
# and test-vhost ----

# net_bench_in NAME TEST PEER-MODE SIZE PEXTRA NEXTRA TAP: in the caller's network namespace,
# net-peer in PEER-MODE on TAP and net-bench's TEST (-p "bench=TEST size=SIZE secs=$SECS PEXTRA",
# -n "...NEXTRA"); the guest reported status 0 (run_guest) and printed one BENCH line, and every
# count agrees at both ends (net_bench_check_TEST). BENCH_LINE and PEER_LINE hold the two lines.
# NET_BENCH_VHOST=1: vhost served the rings, so lkvm has no counters of them and the tap's and
# the guest's stand in.
net_bench_in() {
	local name=$1 test=$2 mode=$3 size=$4 pextra=$5 nextra=$6 tap=$7
	BENCH_LINE="" PEER_LINE=""
	tap_up "$tap" || return
	peer_start "$name" "$mode" "$tap" $((T + 10)) "$size" || return
	run_guest "$name" 0 -- run -k "$ELF" --timeout "$T" --stats=json \
		-n "mode=tap,tapif=$tap,script=none$nextra" -p "bench=$test size=$size secs=$SECS $pextra"
	local st=$?
	peer_stop
	[ $st = 0 ] || return
	[ "$(grep -c '^BENCH ' "$LAST_LOG")" = 1 ] || { fail "not exactly one BENCH line"; return; }
	BENCH_LINE=$(grep '^BENCH ' "$LAST_LOG")
	PEER_LINE=$(grep '^PEER ' "$PEER_LOG")
	[ -n "$PEER_LINE" ] || { fail "no PEER line from net-peer (log: $PEER_LOG)"; return; }
	echo "$BENCH_LINE" >"$LOG_DIR/$name.bench"
	"net_bench_check_$test" "$BENCH_LINE" "$PEER_LINE" "$tap" "$size"
}

# A device counter of the last run (qstat), or with vhost (no such counter) the value given.
_dev_count() { if [ "${NET_BENCH_VHOST:-0}" = 1 ]; then echo "$3"; else qstat "$1" "$2"; fi; }

# tx: every frame the guest sent reached the host: the peer's count plus its socket's drops
# equals the guest's count minus what the device dropped, and so does the tap's own counter.
net_bench_check_tx() {
	local b=$1 p=$2 tap=$3 size=$4
	local frames bytes pf pdrops ddrops dpk taprx
	frames=$(kv frames "$b"); bytes=$(kv bytes "$b")
	pf=$(kv frames "$p"); pdrops=$(kv drops "$p")
	ddrops=$(_dev_count tx0 drops 0); dpk=$(_dev_count tx0 packets "$frames")
	taprx=$(tap_stat "$tap" rx_packets)
	[ -n "$frames" ] && [ -n "$ddrops" ] && [ -n "$dpk" ] || { fail "unparsable BENCH or --stats line"; return; }
	[ "$frames" -gt 0 ] || { fail "the guest sent no frames"; return; }
	[ "$bytes" = $((frames * size)) ] || { fail "guest bytes $bytes != frames $frames x $size"; return; }
	[ "$dpk" = $((frames - ddrops)) ] || { fail "device sent $dpk frames, guest $frames, device drops $ddrops"; return; }
	[ "$taprx" = "$dpk" ] || { fail "tap received $taprx frames, the device sent $dpk"; return; }
	[ $((pf + pdrops)) = "$dpk" ] || { fail "peer counted $pf (+$pdrops dropped on its socket), the device sent $dpk"; return; }
	[ "$(kv bytes "$p")" = $((pf * size)) ] || fail "peer bytes $(kv bytes "$p") != $pf x $size"
}

# rr: transactions happened, every echo carried the bytes sent, and every count agrees: each
# transaction is one frame out and one back; a lost one went out (the guest drains its TX ring
# before BENCH) but no echo came in time.
net_bench_check_rr() {
	local b=$1 p=$2 tap=$3 size=$4
	local n bad lost bytes pf k
	n=$(kv transactions "$b"); bad=$(kv bad "$b"); lost=$(kv lost "$b"); bytes=$(kv bytes "$b")
	pf=$(kv frames "$p")
	[ -n "$n" ] && [ -n "$pf" ] || { fail "unparsable BENCH or PEER line"; return; }
	[ "$n" -gt 0 ] || { fail "no transactions"; return; }
	[ "$bad" = 0 ] || { fail "$bad echoes differ from what was sent"; return; }
	[ "$bytes" = $((n * size)) ] || { fail "echoed bytes $bytes != $n x $size"; return; }
	[ "$pf" = $((n + lost)) ] || { fail "peer echoed $pf frames for $n transactions + $lost lost"; return; }
	[ "$(tap_stat "$tap" rx_packets)" = "$pf" ] || { fail "tap received $(tap_stat "$tap" rx_packets) frames, the peer $pf"; return; }
	[ "$(_dev_count tx0 packets "$pf")" = "$pf" ] || { fail "device sent $(qstat tx0 packets) frames, peer saw $pf"; return; }
	[ "$(_dev_count rx0 packets "$n")" -ge "$n" ] || { fail "device delivered $(qstat rx0 packets) frames < $n echoes"; return; }
	for k in lat_median_ns lat_p99_ns; do
		[ "$(kv $k "$b")" -gt 0 ] || { fail "$k is not positive"; return; }
	done
}

# rx: the guest counted frames, no more than the device delivered, no more than the tap gave,
# no more than the peer sent.
net_bench_check_rx() {
	local b=$1 p=$2 tap=$3
	local frames sent dpk taptx
	frames=$(kv frames "$b"); sent=$(kv frames "$p"); taptx=$(tap_stat "$tap" tx_packets)
	dpk=$(_dev_count rx0 packets "$frames")
	[ -n "$frames" ] && [ -n "$sent" ] && [ -n "$dpk" ] || { fail "unparsable BENCH, PEER or --stats line"; return; }
	[ "$frames" -gt 0 ] || { fail "the guest received no frames (peer sent $sent)"; return; }
	[ "$frames" -le "$dpk" ] || { fail "guest counted $frames > device delivered $dpk"; return; }
	[ "$dpk" -le "$taptx" ] || { fail "device delivered $dpk > tap sent $taptx"; return; }
	[ "$taptx" -le "$sent" ] || fail "tap sent $taptx > peer sent $sent"
}

# An image of N sectors where byte i of sector s is (s*13 + i*7 + 1) & 0xff (what blk-test checks).
make_pattern_image() { # FILE SECTORS
	python3 - "$1" "$2" <<'EOF'
import sys
with open(sys.argv[1], 'wb') as f:
    for s in range(int(sys.argv[2])):
        f.write(bytes(((s * 13 + i * 7 + 1) & 0xff) for i in range(512)))
EOF
}

# need_guest NAME: sets ELF to the built guest's path; fails the test when it is missing.
need_guest() {
	ELF=$GUEST_DIR/$1.elf
	[ -f "$ELF" ] && return 0
	fail "guest $ELF not built (run make guests)"
}

# need_testhooks: fails the test unless the test build is there (the project builds it).
need_testhooks() {
	[ -x "$LKVM_TESTHOOKS" ] && return 0
	fail "no test build at $LKVM_TESTHOOKS (run make build/testhooks/lkvm)"
}

# expect_probe_stopped KIND: in the last log, the test build's KIND thread made its probe
# (LKVM_TEST_SANDBOX_VIOLATE=KIND: a call its own filter forbids and the one it inherits allows,
# sandbox.c) and its filter stopped lkvm naming the thread and that system call; the call never
# returned.
expect_probe_stopped() {
	local nr
	nr=$(sed -n "s/^lkvm: warning: sandbox test: the $1 thread makes system call \([0-9]*\) .*/\1/p" \
		"$LAST_LOG" | head -n 1)
	[ -n "$nr" ] || { fail "the $1 thread did not make its probe"; return; }
	expect_output "^lkvm: error: sandbox: the $1 thread made system call $nr, which its allow-list forbids" \
		"the $1 thread and its probe (system call $nr) named" || return
	expect_no_output 'no filter stopped it' "the probe returning"
}

# The guest kernel's build (scripts/build-guest.sh: bzImage, vmlinux, initramfs.cpio.gz).
G=${LKVM_GUEST_DIR:-$REPO_ROOT/build/guest}

# need_kernel [FILE...]: fails the test unless these files of the guest kernel's build (default
# bzImage) are there: the project builds them, so their absence is a failure.
need_kernel() {
	local f
	for f in "${@:-bzImage}"; do need_built "$G/$f" scripts/build-guest.sh || return; done
}

# need_built PATH HOW: fails the test when PATH, which the project builds (HOW says how), is missing.
need_built() {
	[ -e "$1" ] && return 0
	fail "$1 not built ($2)"
}

# need_cmd COMMAND DEPS-GROUP: fails the test when COMMAND, installed by scripts/deps.sh
# DEPS-GROUP, is missing.
need_cmd() {
	command -v "$1" >/dev/null 2>&1 && return 0
	fail "no $1 (scripts/deps.sh $2 installs it)"
}

need_python() { need_cmd python3 bench; }

# need_lkvm BIN: fails the test unless BIN (an lkvm build: make, make ASAN=1, make TSAN=1) runs.
need_lkvm() {
	local out rc
	[ -x "$1" ] || { fail "no lkvm binary at $1 (make builds it)"; return 1; }
	out=$("$1" help 2>&1) && return 0
	rc=$?
	fail "$1 does not run (status $rc)${out:+: $(tail -n 3 <<<"$out" | tr '\n' ' ' | cut -c1-200)}"
}

# --- running tests -------------------------------------------------------------------------------

_run_one() {
	local name=$1
	shift
	_T_NAME=$name
	_T_RESULT=""
	LAST_LOG=""
	if [ -n "$_FAIL_ALL" ]; then
		echo "FAIL $name: $_FAIL_ALL"
		return 0
	fi
	if [ -n "$_SKIP_ALL" ]; then
		echo "skip $name: $_SKIP_ALL"
		return 0
	fi
	# What the test itself prints goes with its stderr: its result is the one line on stdout.
	"$@" >&2
	local rc=$?
	if [ -n "$_T_RESULT" ]; then
		echo "$_T_RESULT"
	elif [ "$rc" -ne 0 ]; then
		echo "FAIL $name: the test returned $rc without a reason (its last command failed?)"
	else
		echo "ok $name"
	fi
}

# ONLY="NAME..." (a developer's run of a few tests): the tests of a script not named there are
# left out, neither run nor reported.
_selected() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

# run_test NAME FUNC [ARGS...]: starts a test in the background, at most TEST_JOBS at once.
# Tests marked serial (run_test_serial) wait for everything before them and run alone.
run_test() {
	_selected "$1" || return 0
	local name=$1
	_TEST_ORDER+=("$name")
	while [ "$(jobs -pr | wc -l)" -ge "$TEST_JOBS" ]; do
		wait -n 2>/dev/null || : # one ended (a test's status says nothing: its result file does)
	done
	(_timed_one "$@" >"$_RES_DIR/$name" 2>"$_RES_DIR/$name.err") &
}

run_test_serial() {
	_selected "$1" || return 0
	wait
	local name=$1
	_TEST_ORDER+=("$name")
	(_timed_one "$@" >"$_RES_DIR/$name" 2>"$_RES_DIR/$name.err")
}

# _timed_one NAME FUNC...: _run_one, its wall time (0.1 s) kept beside its result for the
# slowest-tests table (finish_tests appends it to $LOG_DIR/test-times.txt, tests/check.sh sorts).
_timed_one() {
	local t0=${EPOCHREALTIME/[.,]/}
	_run_one "$@"
	echo $(((${EPOCHREALTIME/[.,]/} - t0) / 100000)) >"$_RES_DIR/$1.secs"
}

finish_tests() {
	wait
	local pass=0 failn=0 skipn=0 name line
	for name in "${_TEST_ORDER[@]}"; do
		line=$(head -n 1 "$_RES_DIR/$name" 2>/dev/null)
		[ -n "$line" ] || line="FAIL $name: test produced no result ($(head -c 200 "$_RES_DIR/$name.err" 2>/dev/null))"
		echo "$line"
		[ -f "$_RES_DIR/$name.secs" ] &&
			printf '%s %s/%s\n' "$(sed -E 's/^([0-9]*)([0-9])$/\1.\2/; s/^\./0./' "$_RES_DIR/$name.secs")" \
				"$SUMMARY_PREFIX" "$name" >>"$LOG_DIR/test-times.txt"
		case $line in
		ok\ *) pass=$((pass + 1)) ;;
		skip\ *) skipn=$((skipn + 1)) ;;
		*) failn=$((failn + 1)) ;;
		esac
	done
	rm -rf "$_RES_DIR"
	echo "$SUMMARY_PREFIX: $pass passed, $failn failed, $skipn skipped (host: $(host_kind))"
	[ "$failn" -eq 0 ]
}

# --- waiting on events (polled conditions with a bound, never a fixed sleep) ----------------------

# wait_until SECS CMD...: runs CMD every 0.05 s until it succeeds; false when it still fails
# after SECS.
wait_until() {
	local secs=$1 i
	shift
	for ((i = 0; i < secs * 20; i++)); do
		"$@" && return 0
		sleep 0.05
	done
	"$@"
}

# alive PID: the process runs (a zombie waiting for `wait` does not); gone PID: it does not.
alive() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null; }
gone() { ! alive "$1"; }

# wait_exit PID SECS: waits for the test's child PID to end; its status in EXIT_STATUS. Fails the
# test (and kills PID) when it still runs after SECS.
wait_exit() {
	local pid=$1 secs=$2
	if ! wait_until "$secs" gone "$pid"; then
		kill -KILL "$pid" 2>/dev/null
		fail "lkvm (pid $pid) still running after $secs s"
		return 1
	fi
	wait "$pid"
	EXIT_STATUS=$?
}

# --- VMs in the background (for lkvm pause/resume/stat/stop while they run) ---------------------

PY=${PY:-$(command -v /usr/bin/python3 || command -v python3 || true)}

# start_vm NAME LOG [RUN ARGS...]: lkvm run in the background (spin guest unless -k is given) with
# --timeout $VM_TIMEOUT (default 60); sets VM_PID and VM_LOG and adds the pid to $PIDS_FILE when
# that is set (for the script's clean-up). NAME "-" means no --name. LKVM_PREFIX runs it under a
# command that execs it (VM_PID is lkvm's; in_netns sets one); its input is VM_STDIN (a file or
# FIFO; default /dev/null).
start_vm() {
	local name=$1 log=$2
	shift 2
	local args=("$@")
	# A restore boots nothing (and refuses -k).
	[[ " ${args[*]} " == *" -k "* || " ${args[*]} " == *" --restore "* ]] ||
		args=(-k "$GUEST_DIR/spin.elf" "${args[@]}")
	[ "$name" = - ] || args+=(--name "$name")
	VM_LOG=$LOG_DIR/$log.log
	# Emptied here, not by the background job's redirection: wait_log must never see an
	# earlier run's lines.
	: >"$VM_LOG"
	# shellcheck disable=SC2086 # LKVM_PREFIX is word-split on purpose
	${LKVM_PREFIX-} "$LKVM" run "${args[@]}" --timeout "${VM_TIMEOUT:-60}" <"${VM_STDIN:-/dev/null}" \
		>>"$VM_LOG" 2>&1 &
	VM_PID=$!
	[ -z "${PIDS_FILE-}" ] || echo "$VM_PID" >>"$PIDS_FILE"
}

# end_vm: waits for start_vm's lkvm to end by itself (its own --timeout bounds it); its status in
# LAST_STATUS and its log as LAST_LOG, for expect_status and expect_output.
end_vm() {
	wait "$VM_PID"
	LAST_STATUS=$?
	LAST_LOG=$VM_LOG
}

_vm_answers() { "$LKVM" stat "$1" >/dev/null 2>&1; }
_answers_or_gone() { _vm_answers "$1" || gone "$VM_PID"; }

# wait_vm NAME: until `lkvm stat NAME` answers (10 s; the emulated host is slow), or VM_PID is gone.
wait_vm() {
	wait_until 10 _answers_or_gone "$1"
	_vm_answers "$1" && return 0
	fail "VM $1 never answered on its socket ($(tail -n 2 "$VM_LOG" | tr '\n' ' '))"
}

_has_or_gone() { grep -Eq -- "$2" "$1" || gone "$VM_PID"; }

# wait_log LOG REGEX [SECS]: until LOG has a line matching REGEX (default 10 s), or VM_PID is gone.
wait_log() {
	wait_until "${3:-10}" _has_or_gone "$1" "$2"
	grep -Eq -- "$2" "$1" || fail "no /$2/ in $1"
}

# ctl LOG CMD...: runs "lkvm CMD..." into $LOG_DIR/LOG.log (killed after CTL_TIMEOUT s, default
# 30); status in LAST_STATUS, whole seconds it took in LAST_SECS. CTL_PREFIX runs it under a
# command (another user, another environment).
ctl() {
	local log=$1 t0=$SECONDS
	shift
	LAST_LOG=$LOG_DIR/$log.log
	# shellcheck disable=SC2086 # CTL_PREFIX is word-split on purpose
	timeout -s KILL "${CTL_TIMEOUT:-30}" ${CTL_PREFIX-} "$LKVM" "$@" >"$LAST_LOG" 2>&1
	LAST_STATUS=$? # read by expect_status
	LAST_SECS=$((SECONDS - t0))
}

# stat_val NAME FIELD: one counter of `lkvm stat NAME --json` (a python expression over d).
stat_val() {
	"$LKVM" stat "$1" --json 2>/dev/null | "$PY" -c "import json,sys; d=json.load(sys.stdin); print($2)"
}

# why_guest_failed: after a run that ended wrong, makes the test's failure the guest's own
# "GUEST FAIL ..." or "GUEST EXCEPTION ..." line when it printed one (that says what went wrong;
# lkvm's last line only says the guest panicked). Returns 1 either way, for `|| { ...; return; }`.
why_guest_failed() {
	local g
	g=$(grep -Em1 '^GUEST (FAIL|EXCEPTION)' "$LAST_LOG" 2>/dev/null | tr -d '\r' | cut -c1-240)
	[ -z "$g" ] || fail "$g (exit status $LAST_STATUS)"
	return 1
}

#!/usr/bin/env bash
# The sandbox (sandbox.c): capabilities dropped, every thread under its seccomp filter, --user, and a
# forbidden system call from a device thread stopping lkvm with a clear message (LKVM_TEST_SANDBOX_VIOLATE).
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=sandbox
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=20

# A forbidden call: the thread of KIND opens a socket right after entering its filter.
t_violate_console() {
	need_guest hlt || return
	LKVM_TEST_SANDBOX_VIOLATE=console run_lkvm sandbox-violate-console 159 -- run -k "$ELF" --timeout $T || return
	expect_output '^lkvm: error: sandbox: the console thread made system call 41, which its allow-list forbids' \
		"the console thread and socket (41) named" || return
	expect_no_output 'opened a socket' "the socket call succeeding"
}

# The control: without the filter the same call succeeds and the guest runs to its end.
t_violate_console_off() {
	need_guest hlt || return
	LKVM_TEST_SANDBOX_VIOLATE=console run_lkvm sandbox-violate-console-off 0 -- run -k "$ELF" --timeout $T --sandbox=off || return
	expect_output 'sandbox test: the console thread opened a socket' "the socket call succeeding" || return
	expect_output '^GUEST hlt: done'
}

# A thread signalling another process (LKVM_TEST_SANDBOX_VIOLATE=KIND:signal=PID, SIGKILL by
# tgkill): the filter stops lkvm and names the call (234), and the process lives on. With
# --sandbox=off (the control) the signal is delivered.
t_violate_signal() {
	need_guest hlt || return
	local sandbox=$1 want=$2 victim st vst
	sleep 300 &
	victim=$!
	LKVM_TEST_SANDBOX_VIOLATE=console:signal=$victim run_lkvm "sandbox-violate-signal-$sandbox" "$want" -- \
		run -k "$ELF" --timeout $T --sandbox="$sandbox"
	st=$?
	kill -TERM "$victim" 2>/dev/null # ours to end; no effect once it is dead
	wait "$victim"
	vst=$? # 143: ended here, 137: killed by lkvm
	[ $st = 0 ] || return
	if [ "$sandbox" = on ]; then
		[ $vst = 143 ] || { fail "pid $victim was killed by lkvm's console thread"; return; }
		expect_output '^lkvm: error: sandbox: the console thread made system call 234, which its allow-list forbids' \
			"the console thread and tgkill (234) named" || return
		expect_no_output 'sent SIGKILL' "the signal going out"
	else
		[ $vst = 137 ] || { fail "the control: pid $victim was not killed (status $vst)"; return; }
		expect_output "sandbox test: the console thread sent SIGKILL to pid $victim \\(delivered\\)"
	fi
}

# A device thread: virtio-net's TX thread, started when the guest's driver sets DRIVER_OK.
t_violate_net() {
	[ -c /dev/net/tun ] || { skip "no /dev/net/tun"; return; }
	need_cmd ip test || return
	need_guest virtio-bad || return
	in_netns t_violate_net_in "$@"
}

t_violate_net_in() {
	local sandbox=$1 want=$2
	LKVM_TEST_SANDBOX_VIOLATE=net-tx LKVM_WRAP="ip netns exec $NETNS" \
		run_lkvm "sandbox-violate-net-$sandbox" "$want" -- run -k "$ELF" \
		-n mode=tap,tapif=lkvmsb0,script=none --timeout $T --sandbox="$sandbox" || return
	if [ "$sandbox" = on ]; then
		expect_output '^lkvm: error: sandbox: the net-tx thread made system call 41, which its allow-list forbids' \
			"the net-tx thread and socket (41) named" || return
		expect_no_output 'opened a socket' "the socket call succeeding"
	else
		expect_output 'sandbox test: the net-tx thread opened a socket' "the socket call succeeding" || return
		expect_output '^GUEST virtio-bad: done'
	fi
}

# field PID FIELD: a line of /proc/PID/status, value only (builtins only: this runs in loops, and
# in the emulated host every process start is slow).
field() {
	local k v _
	while read -r k v _; do
		[ "$k" = "$2:" ] && { echo "$v"; return; }
	done <"/proc/$1/status" 2>/dev/null
}

# While a guest runs: no capabilities (effective, permitted, bounding), every thread filtered
# (main and the vCPU; the console thread ends at once on stdin's EOF).
t_state() {
	need_guest spin || return
	local mode=$1 log=$LOG_DIR/sandbox-state-$1.log
	LAST_LOG=$log
	"$LKVM" run -k "$ELF" --timeout 120 --sandbox="$mode" </dev/null >"$log" 2>&1 &
	local vm=$! i threads=0
	for ((i = 0; i < 100; i++)); do # until the vCPU thread is up (it names itself)
		grep -qs '^lkvm-vcpu0$' /proc/$vm/task/*/comm && break
		sleep 0.1
	done
	local eff prm bnd seccomp=() t want=0
	[ "$mode" = on ] && want=2
	# A thread names itself just before it installs its filter: look until all are as
	# expected, or 10 s passed.
	for ((i = 0; i < 100; i++)); do
		seccomp=() threads=0
		for t in /proc/$vm/task/*; do
			local comm=""
			read -r comm <"$t/comm" 2>/dev/null
			seccomp+=("$comm=$(field "$vm/task/${t##*/}" Seccomp)")
			threads=$((threads + 1))
		done
		[[ " ${seccomp[*]} " != *=[013]\ * ]] && [ "$threads" -ge 2 ] && [ "$want" = 2 ] && break
		[[ " ${seccomp[*]} " != *=[123]\ * ]] && [ "$threads" -ge 2 ] && [ "$want" = 0 ] && break
		sleep 0.1
	done
	eff=$(field $vm CapEff) prm=$(field $vm CapPrm) bnd=$(field $vm CapBnd)
	kill -TERM $vm; wait $vm; LAST_STATUS=$?
	expect_status 143 || return
	[ "$threads" -ge 2 ] || { fail "only $threads threads seen (${seccomp[*]})"; return; }
	[[ " ${seccomp[*]} " == *" lkvm-vcpu0="* ]] || { fail "no vCPU thread seen (${seccomp[*]})"; return; }
	if [ "$mode" = on ]; then
		[ "$eff$prm" = 00000000000000000000000000000000 ] || { fail "capabilities left: CapEff=$eff CapPrm=$prm"; return; }
		if [ "$(id -u)" = 0 ]; then
			[ "$bnd" = 0000000000000000 ] || { fail "bounding set left: CapBnd=$bnd"; return; }
		fi
		for t in "${seccomp[@]}"; do
			[ "${t##*=}" = 2 ] || { fail "thread without a seccomp filter: ${seccomp[*]}"; return; }
		done
	else
		for t in "${seccomp[@]}"; do
			[ "${t##*=}" = 0 ] || { fail "a filter with --sandbox=off: ${seccomp[*]}"; return; }
		done
		if [ "$(id -u)" = 0 ] && [ "$eff" = 0000000000000000 ]; then
			fail "root run with --sandbox=off has no capabilities"; return
		fi
	fi
}

# --user: the guest runs to its end as that user.
t_user() {
	[ "$(id -u)" = 0 ] || { skip "needs root to change user"; return; }
	id nobody >/dev/null 2>&1 || { skip "no user nobody"; return; }
	need_guest spin || return
	local log=$LOG_DIR/sandbox-user.log
	LAST_LOG=$log
	"$LKVM" run -k "$ELF" --timeout 120 --user nobody </dev/null >"$log" 2>&1 &
	local vm=$! i uid="" gid="" groups=""
	for ((i = 0; i < 100; i++)); do
		grep -qs '^lkvm-vcpu0$' /proc/$vm/task/*/comm && break
		sleep 0.1
	done
	uid=$(awk '$1 == "Uid:" { print $2, $3, $4, $5 }' /proc/$vm/status)
	gid=$(awk '$1 == "Gid:" { print $2 }' /proc/$vm/status)
	groups=$(awk '$1 == "Groups:" { $1 = ""; print }' /proc/$vm/status | tr -d ' ')
	kill -TERM $vm; wait $vm; LAST_STATUS=$?
	expect_status 143 || return
	local n; n=$(id -u nobody)
	[ "$uid" = "$n $n $n $n" ] || { fail "uids '$uid', expected $n everywhere"; return; }
	[ "$gid" = "$(id -g nobody)" ] || { fail "gid $gid, expected $(id -g nobody)"; return; }
	[ -z "$groups" ] || fail "supplementary groups left: $groups"
}

t_user_unknown() {
	need_guest hlt || return
	run_lkvm sandbox-user-unknown 1 -- run -k "$ELF" --timeout $T --user no-such-user-lkvm || return
	expect_output "^lkvm: error: --user 'no-such-user-lkvm': no such user"
}

t_bad_option() {
	need_guest hlt || return
	run_lkvm sandbox-bad-option 1 -- run -k "$ELF" --sandbox=maybe || return
	expect_output "^lkvm: error: --sandbox 'maybe': give on or off"
}

skip_unless_kvm
run_test violate-console t_violate_console
run_test violate-console-off t_violate_console_off
run_test violate-signal t_violate_signal on 159
run_test violate-signal-off t_violate_signal off 0
run_test violate-net-tx t_violate_net on 159
run_test violate-net-tx-off t_violate_net off 0
run_test state-on t_state on
run_test state-off t_state off
run_test user t_user
run_test user-unknown t_user_unknown
run_test bad-option t_bad_option
finish_tests

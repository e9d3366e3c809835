#!/usr/bin/env bash
# The sandbox (sandbox.c): capabilities dropped, every thread under its seccomp filter, --user, and a
# forbidden system call from a thread of each kind stopping lkvm with a clear message
# (LKVM_TEST_SANDBOX_VIOLATE, in the test build only: build/testhooks/lkvm), with a guest that
# brings up every kind of device.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=sandbox
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=20

# Every thread kind with a filter: the names in sandbox.c's table, and the name each kind's
# thread gives itself (main is the process itself).
declare -A THREAD_OF=(
	[main]="" [vcpu]=lkvm-vcpu0 [console]=lkvm-console [net-rx]=lkvm-net-rx0 [net-tx]=lkvm-net-tx0
	[net-ctl]=lkvm-net-ctl [blk]=lkvm-blk [virtio-console]=lkvm-vcon [rng]=lkvm-rng [ctl]=lkvm-ctl [9p]=lkvm-9p [fs]=lkvm-fs
	[gdb]=lkvm-gdb
)
KINDS="main vcpu console net-rx net-tx net-ctl blk virtio-console rng ctl 9p fs gdb"
# Kinds in sandbox.c's table that no lkvm option starts yet: each reports a skip until one does.
UNSTARTED=""
# Kinds another script's guest starts: net-irq needs /dev/vhost-net (test-vhost.sh's sandbox test).
ELSEWHERE="net-irq"
# The kinds whose threads the vCPU thread starts (on DRIVER_OK): filters stack, so each runs
# under the vCPU's filter and its own.
SPAWNED_BY_VCPU="net-rx net-tx net-ctl blk virtio-console rng"

# The kinds sandbox.c's table names, in its order.
table_kinds() {
	sed -n '/^static const struct sb_kind kinds\[/,/^};/p' "$REPO_ROOT/sandbox.c" |
		sed -n 's/^[[:space:]]*\.name = "\([^"]*\)",.*/\1/p' | tr '\n' ' '
}

# A new kind in sandbox.c must be covered here too.
t_kinds_covered() {
	local have k
	have=$(table_kinds)
	[ -n "$have" ] || { fail "no kinds found in sandbox.c's table"; return; }
	for k in $have; do
		[[ " $KINDS $UNSTARTED $ELSEWHERE " == *" $k "* ]] ||
			{ fail "sandbox.c has a thread kind '$k' this script does not cover"; return; }
	done
	for k in $KINDS $UNSTARTED $ELSEWHERE; do
		[[ " $have " == *" $k "* ]] || { fail "'$k' is not in sandbox.c's table ($have)"; return; }
	done
}

t_unstarted() {
	skip "no lkvm option starts a $1 thread yet (sandbox.c has its allow-list)"
}

# A thread signalling another process (LKVM_TEST_SANDBOX_VIOLATE=KIND:signal=PID, SIGKILL by
# tgkill): the filter stops lkvm and names the call (234), and the process lives on. With
# --sandbox=off (the control) the signal is delivered.
t_violate_signal() {
	need_guest hlt || return
	need_testhooks || return
	local sandbox=$1 want=$2 victim st vst
	sleep 300 &
	victim=$!
	LKVM=$LKVM_TESTHOOKS LKVM_TEST_SANDBOX_VIOLATE=console:signal=$victim run_lkvm "sandbox-violate-signal-$sandbox" "$want" -- \
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

# with_devices FUNC [ARGS...]: runs FUNC in a new network namespace with DEVICES set to lkvm run
# arguments that give the devices guest every kind of device thread: a NIC on a tap (rx, tx and
# control queues), a disk, a virtio-console and virtio-rng, and the gdb server (-s: its port in
# the namespace's own loopback); and LKVM_WRAP putting lkvm there.
with_devices() {
	skip_unless_net || return
	need_guest devices || return
	local img=$LOG_DIR/sandbox-$_T_NAME.img
	local share=$LOG_DIR/sandbox-$_T_NAME.share
	rm -f "$img" && truncate -s 1M "$img" && mkdir -p "$share"
	DEVICES=(-k "$ELF" -n mode=tap,tapif=lkvmsb0,script=none -d "$img" --console virtio --rng
		--share "$share" -s)
	in_netns "$@"
}

# t_violate KIND on|off: the first thread of KIND makes its probe right after entering its filter
# (LKVM_TEST_SANDBOX_VIOLATE in the test build): a call its own allow-list forbids and the filter it
# inherits from the thread that started it allows (sandbox.c's probes: filters stack, so a call
# the parent's filter refuses too would be stopped whatever the thread's own list says).
# On: lkvm stops with 159 and names the thread and the call. Off (the control): the call returns,
# and the guest brings every device up and ends.
t_violate() {
	need_testhooks || return
	with_devices t_violate_in "$@"
}

t_violate_in() {
	local kind=$1 sandbox=$2 LKVM=$LKVM_TESTHOOKS
	if [ "$sandbox" = on ]; then
		LKVM_TEST_SANDBOX_VIOLATE=$kind run_lkvm "sandbox-violate-$kind" 159 -- run "${DEVICES[@]}" \
			-p devices.then=done --timeout $T || return
		expect_probe_stopped "$kind"
	else
		LKVM_TEST_SANDBOX_VIOLATE=$kind run_lkvm "sandbox-violate-$kind-off" 0 -- run "${DEVICES[@]}" \
			-p devices.then=done --timeout $T --sandbox=off || { why_guest_failed; return; }
		expect_output "sandbox test: the $kind thread's .* returned .*: no filter stopped it" \
			"the probe returning" || return
		expect_output '^GUEST devices: up net=1 blk=1 console=1 rng=1' "every device up" || return
		expect_output '^GUEST DONE'
	fi
}

# The release lkvm has no test hooks: LKVM_TEST_SANDBOX_VIOLATE set, the guest brings every
# device up and ends (status 0, where the test build stops at the blk thread's probe with 159),
# and the variable's name is nowhere in the binary.
t_release_no_hooks() {
	with_devices t_release_no_hooks_in
}

t_release_no_hooks_in() {
	LKVM_TEST_SANDBOX_VIOLATE=blk run_lkvm sandbox-release-no-hooks 0 -- run "${DEVICES[@]}" \
		-p devices.then=done --timeout $T || { why_guest_failed; return; }
	expect_output '^GUEST devices: up net=1 blk=1 console=1 rng=1' "every device up" || return
	expect_no_output 'sandbox test' "a test hook acting" || return
	! grep -qa LKVM_TEST_SANDBOX_VIOLATE "$LKVM" ||
		fail "$LKVM holds the name LKVM_TEST_SANDBOX_VIOLATE: the test hook is compiled in"
}

# field PID FIELD: a line of /proc/PID/status, value only (builtins only: this runs in loops, and
# in the emulated host every process start is slow).
field() {
	local k v _
	while read -r k v _; do
		[ "$k" = "$2:" ] && { echo "$v"; return; }
	done <"/proc/$1/status" 2>/dev/null
}

# While the devices guest runs with every device up: no capabilities (effective, permitted,
# bounding), and every thread (main, vCPU, console, net rx/tx/control, blk, virtio-console, rng,
# control socket) present and under a filter; with --sandbox=off none is. stdin stays open (a
# pipe from a sleep), or the console thread would end at its EOF.
t_state() {
	with_devices t_state_in "$@"
}

t_state_in() {
	local mode=$1 log=$LOG_DIR/sandbox-state-$1.log in holder
	LAST_LOG=$log
	exec {in}< <(exec sleep 600)
	holder=$!
	$LKVM_WRAP "$LKVM" run "${DEVICES[@]}" --timeout 120 --sandbox="$mode" <&$in >"$log" 2>&1 &
	local vm=$! i
	exec {in}<&-
	# Until the guest brought its devices up (their threads start on DRIVER_OK) ...
	wait_until 10 grep -q '^GUEST devices: up ' "$log"
	# ... and each thread named itself and installed its filter (it names itself first).
	local want=0 seen=() k t tid comm missing
	declare -A nfilters=()
	[ "$mode" = on ] && want=2
	for ((i = 0; i < 100; i++)); do
		seen=() missing="" nfilters=()
		[ -e "/proc/$vm" ] || break
		for t in /proc/$vm/task/*; do
			tid=${t##*/} comm=""
			read -r comm <"$t/comm" 2>/dev/null || continue # gone meanwhile
			[ "$tid" = "$vm" ] && comm=main
			seen+=("$comm=$(field "$vm/task/$tid" Seccomp)")
			nfilters[$comm]=$(field "$vm/task/$tid" Seccomp_filters)
		done
		for k in $KINDS; do
			[[ " ${seen[*]} " == *" ${THREAD_OF[$k]:-main}=$want "* ]] || missing+=" $k"
		done
		[ -z "$missing" ] && [[ " ${seen[*]} " != *" lkvm"*=[!$want]\ * ]] && break
		sleep 0.1
	done
	local eff prm bnd
	eff=$(field $vm CapEff) prm=$(field $vm CapPrm) bnd=$(field $vm CapBnd)
	kill -TERM $vm
	wait $vm
	LAST_STATUS=$?
	kill "$holder" 2>/dev/null
	expect_status 143 || return
	expect_output '^GUEST devices: up net=1 blk=1 console=1 rng=1' "every device up" || return
	[ -z "$missing" ] || { fail "no thread with Seccomp $want of kind:$missing (threads: ${seen[*]})"; return; }
	# Every thread of lkvm's; KVM's own workers in the process (kvm-nx-lpage-recovery) run
	# kernel code only, and inherit whatever the thread that made them had.
	for t in "${seen[@]}"; do
		[[ $t == kvm-* ]] && continue
		[ "${t##*=}" = "$want" ] || { fail "thread ${t%=*} has Seccomp ${t##*=}, not $want (threads: ${seen[*]})"; return; }
	done
	# Each thread under a filter of its own: Seccomp says only that some filter applies, and a
	# thread the vCPU started inherits the vCPU's, so count them (Linux 5.9 and later show it).
	if [ "$mode" = on ] && [ -n "${nfilters[lkvm-vcpu0]}" ]; then
		local v=${nfilters[lkvm-vcpu0]} n
		for k in $KINDS; do
			n=${nfilters[${THREAD_OF[$k]:-main}]}
			if [[ " $SPAWNED_BY_VCPU " == *" $k "* ]]; then
				[ "$n" = $((v + 1)) ] ||
					{ fail "the $k thread runs under $n seccomp filters, the vCPU that started it under $v: it did not install its own"; return; }
			else
				[ "$n" -ge 1 ] || { fail "the $k thread runs under no seccomp filter"; return; }
			fi
		done
	fi
	if [ "$mode" = on ]; then
		[ "$eff$prm" = 00000000000000000000000000000000 ] || { fail "capabilities left: CapEff=$eff CapPrm=$prm"; return; }
		if [ "$(id -u)" = 0 ]; then
			[ "$bnd" = 0000000000000000 ] || { fail "bounding set left: CapBnd=$bnd"; return; }
		fi
	elif [ "$(id -u)" = 0 ] && [ "$eff" = 0000000000000000 ]; then
		fail "root run with --sandbox=off has no capabilities"
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

# --debug's last lines under the sandbox (as root, and with --user when root): main's memory line
# reads /proc/self/statm through an fd it opened before its filter, which lets it open nothing
# (it stopped lkvm with SIGSYS, status 159, when main read a file it opened afterwards).
t_debug() {
	need_guest spin || return
	local user=()
	if [ -n "${1-}" ]; then
		[ "$(id -u)" = 0 ] || { skip "needs root to change user"; return; }
		id "$1" >/dev/null 2>&1 || { skip "no user $1"; return; }
		user=(--user "$1")
	fi
	run_lkvm "sandbox-debug${1:+-$1}" 124 -- run -k "$ELF" --timeout 2 --debug "${user[@]}" || return
	expect_no_output 'sandbox: the .* thread made system call' || return
	expect_output '^lkvm: debug: memory: RSS [1-9][0-9]* KiB, guest RAM resident [0-9]+ KiB' || return
	expect_output '^lkvm: error: timeout: 2 s passed'
}

t_user_unknown() {
	need_guest hlt || return
	run_lkvm sandbox-user-unknown 1 -- run -k "$ELF" --timeout $T --user no-such-user-lkvm || return
	# Found before the VM is built: no "VM name" line before it (issue 40, finding 9).
	one_error_line "--user 'no-such-user-lkvm': no such user"
}

t_bad_option() {
	need_guest hlt || return
	run_lkvm sandbox-bad-option 1 -- run -k "$ELF" --sandbox=maybe || return
	expect_output "^lkvm: error: --sandbox 'maybe': give on or off"
}

skip_unless_kvm
run_test kinds-covered t_kinds_covered
run_test violate-signal t_violate_signal on 159
run_test violate-signal-off t_violate_signal off 0
for k in $KINDS; do
	run_test "violate-$k" t_violate "$k" on
	run_test "violate-$k-off" t_violate "$k" off
done
run_test release-no-hooks t_release_no_hooks
for k in $UNSTARTED; do
	run_test "violate-$k" t_unstarted "$k"
done
run_test state-on t_state on
run_test state-off t_state off
run_test user t_user
run_test user-unknown t_user_unknown
run_test debug t_debug
run_test debug-user t_debug nobody
run_test bad-option t_bad_option
finish_tests

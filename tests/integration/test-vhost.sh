#!/usr/bin/env bash
# vhost-net (-n vhost=on|auto): without /dev/vhost-net, vhost=on's one-line error and vhost=auto's fallback; with it (the emulated host loads vhost_net), net-bench's tx, rx and rr counted at both ends, a device reset and a pause/resume in the middle of traffic losing nothing, and a Linux guest's pings on mmio and with queues=2.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=${SUMMARY_PREFIX:-vhost} # check.sh's emulated run: vhost-emulated
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=60                  # lkvm --timeout of a net-bench run
SECS=${BENCH_SECS:-1} # length of each net-bench run (the emulated host is slow: keep the stage short)
LINUX_T=${LINUX_TIMEOUT:-600} # as test-net's: a loaded host boots slowly
HOST_IP=10.0.3.1
GUEST_IP=10.0.3.15

skip_unless_vhost() {
	[ -c /dev/vhost-net ] && return 0
	skip "no /dev/vhost-net on this host (the emulated host has it: LKVM_HOST=emulated scripts/kvm-host.sh -- $0)"
	return 1
}

# ---- without /dev/vhost-net ----

# vhost=on: one line saying what is missing and what to do; vhost=auto: the guest runs on lkvm's
# own data path (and --debug says why).
t_missing() {
	[ ! -e /dev/vhost-net ] || { skip "/dev/vhost-net exists here: the error needs a host without it"; return; }
	skip_unless_net || return
	need_guest net-bench || return
	in_netns missing_in
}

missing_in() {
	local tap=lkvmvh0
	tap_up $tap || return
	run_lkvm vhost-missing-on 1 -- run -k "$ELF" --timeout $T \
		-n "mode=tap,tapif=$tap,script=none,vhost=on" -p "bench=tx size=64 secs=1" || return
	one_error_line "virtio-net: vhost=on: cannot open /dev/vhost-net: No such file or directory \(is module vhost_net loaded\?\); -n vhost=off or auto runs without it" || return
	peer_start vhost-missing-auto count $tap $((T + 10)) 64 || return
	run_lkvm vhost-missing-auto 0 -- run --debug -k "$ELF" --timeout $T --stats=json \
		-n "mode=tap,tapif=$tap,script=none,vhost=auto" -p "bench=tx size=64 secs=1"
	local st=$?
	peer_stop
	[ $st = 0 ] || return
	expect_output 'virtio-net: vhost=auto: the rings stay in lkvm \(vhost=on: cannot open /dev/vhost-net' "the fallback's debug line" || return
	expect_output '^BENCH test=tx ' || return
	local pk
	pk=$(qstat tx0 packets)
	[ "${pk:-0}" -gt 0 ] || fail "lkvm's own tx0 moved no frames (${pk:-no tx0 in --stats})"
}

# mode=user with vhost: refused on the command line.
t_user() {
	run_lkvm vhost-user 1 -- run -k "$GUEST_DIR/spin.elf" -n mode=user,vhost=on || return
	one_error_line "-n vhost=on: only with mode=tap \(vhost-net serves a tap\)"
}

# ---- with /dev/vhost-net: net-bench against net-peer ----

# t_vbench TEST PEER-MODE SIZE [EXTRA -p WORDS] [EXTRA -n OPTIONS]
t_vbench() {
	skip_unless_vhost || return
	skip_unless_net || return
	need_guest net-bench || return
	in_netns vbench_in "$@"
}

vbench_in() {
	local test=$1 mode=$2 size=$3 pextra=${4:-} nextra=${5:-}
	local name=vhost-$test-$size${pextra:+-${pextra// /-}}${nextra//[,=]/-}
	name=${name//=/-}
	# shellcheck disable=SC2034 # read by net_bench_in's checks: vhost keeps no lkvm counters
	local NET_BENCH_VHOST=1
	net_bench_in "$name" "$test" "$mode" "$size" "$pextra" ",vhost=on$nextra" lkvmvh1 || return
	vhost_served 1 || return
	# resets=N: the guest reset the device N times in the middle of tx (each time once every
	# chain came back): vhost's rings were rebuilt at each DRIVER_OK, and the counts found no loss.
	case $pextra in
	*resets=*) [ "$(kv resets "$BENCH_LINE")" = "${pextra#*resets=}" ] || fail "the guest did not reset ${pextra#*resets=} times: $BENCH_LINE" ;;
	esac
}

# vhost_served PAIRS: --stats names the NIC's data path vhost (no lkvm counters of those queues).
vhost_served() {
	local j
	j=$(grep '^{"vcpu_exits"' "$LAST_LOG" | tail -n 1)
	grep -q "\"vhost\":{\"pairs\":$1," <<<"$j" || { fail "--stats has no \"vhost\":{\"pairs\":$1,...}: ${j:0:300}"; return; }
	! grep -q '"name":"tx0"' <<<"$j" || fail "--stats shows lkvm counters for tx0, which vhost served"
}

# ---- pause and resume in the middle of traffic (also the 1514-byte tx run) ----

PAUSE_MS=1500 # the pause's length: it is absence that is checked, no event to wait for

t_pause() {
	skip_unless_vhost || return
	skip_unless_net || return
	need_python || return
	need_guest net-bench || return
	in_netns pause_in
}

pause_in() {
	local n=vhost-pause tap=lkvmvh2 tap1 tap2
	tap_up $tap || return
	peer_start vhost-pause count "$tap" $((T + 10)) 1514 || return
	VM_TIMEOUT=$T start_vm $n vhost-pause -k "$GUEST_DIR/net-bench.elf" --stats=json \
		-n "mode=tap,tapif=$tap,script=none,vhost=on" -p "bench=tx size=1514 secs=20"
	wait_until 30 tap_rx_above $tap 0 || { peer_stop; LAST_LOG=$VM_LOG; fail "no frames before the pause"; return; }
	ctl vhost-pause-pause pause $n
	expect_status 0 || { peer_stop; return; }
	tap1=$(tap_stat $tap rx_packets)
	sleep "$((PAUSE_MS / 1000)).$((PAUSE_MS % 1000))"
	tap2=$(tap_stat $tap rx_packets)
	ctl vhost-pause-resume resume $n
	expect_status 0 || { peer_stop; return; }
	wait_until 30 tap_rx_above $tap "$tap2"
	end_vm
	peer_stop
	[ "$LAST_STATUS" = 0 ] || { fail "the bench run exited $LAST_STATUS"; return; }
	[ "$tap1" = "$tap2" ] || { fail "frames left the paused VM: tap $tap1 -> $tap2"; return; }
	[ "$(tap_stat $tap rx_packets)" -gt "$tap2" ] || { fail "no frames after resume"; return; }
	local b p
	b=$(grep '^BENCH ' "$VM_LOG")
	p=$(grep '^PEER ' "$PEER_LOG")
	[ -n "$b" ] && [ -n "$p" ] || { fail "no BENCH or PEER line"; return; }
	# shellcheck disable=SC2034 # read by net_bench_check_tx: vhost keeps no lkvm counters
	local NET_BENCH_VHOST=1
	net_bench_check_tx "$b" "$p" "$tap" 1514
}

# ---- the sandbox of the relay thread ----

# net-bench polls its rings and gives its queues no MSI-X vector: vhost's calls go through the
# relay thread (net-irq), whose filter stops a forbidden call (LKVM_TEST_SANDBOX_VIOLATE in the
# test build: its probe, a call the vCPU that starts the relay may make) as every kind's does.
# The vCPU's and the control thread's vhost ioctls ran under their filters above.
t_sandbox() {
	skip_unless_vhost || return
	skip_unless_net || return
	need_guest net-bench || return
	need_testhooks || return
	in_netns sandbox_in
}

sandbox_in() {
	local tap=lkvmvh4
	tap_up $tap || return
	LKVM=$LKVM_TESTHOOKS LKVM_TEST_SANDBOX_VIOLATE=net-irq run_lkvm vhost-sandbox 159 -- \
		run -k "$ELF" --timeout $T -n "mode=tap,tapif=$tap,script=none,vhost=on" \
		-p "bench=tx size=64 secs=1" || return
	expect_probe_stopped net-irq
}

# ---- a Linux guest: mmio, and two queue pairs ----

# t_linux NAME EXTRA-N CPUS PAIRS: boots the kernel with a static address, pings it 20 times from
# the host side of the tap (no loss), and --stats says vhost served PAIRS pairs; with PAIRS > 1,
# UDP flows the tap spreads over its queues first, and each pair's RX ring moved (its used index,
# which only vhost advances: lkvm counts nothing on vhost's rings). The kernel is
# quiet: in the emulated host each console byte is a trapped exit of a nested guest, and the
# console's boot lines cost more time than the rest of the test; the first answered ping is the
# sign that it is up.
t_linux() {
	skip_unless_vhost || return
	skip_unless_net || return
	need_kernel vmlinux || return
	need_cmd ping test || return
	in_netns linux_in "$@"
}

linux_in() {
	local name=vhost-$1 extra=$2 cpus=$3 pairs=$4 tap=lkvmvh3
	# The vmlinux (PVH entry): no decompressor to run emulated; test-linux.sh boots the bzImage.
	VM_TIMEOUT=$LINUX_T start_vm - "$name" -k "$G/vmlinux" -m 256 -c "$cpus" --stats=json \
		-n "mode=tap,tapif=$tap,host_ip=$HOST_IP/24,script=none,vhost=on$extra" \
		-p "quiet root=/dev/vda rootwait ip=$GUEST_IP::$HOST_IP:255.255.255.0:lkvm:eth0:off"
	if ! wait_until "$LINUX_T" guest_answers; then
		kill -KILL "$VM_PID"
		end_vm
		fail "the guest never answered a ping (log: $VM_LOG)"
		return
	fi
	[ "$pairs" = 1 ] || udp_flows $GUEST_IP
	ip netns exec "$NETNS" ping -c 20 -i 0.2 -W 3 $GUEST_IP >"$LOG_DIR/$name.ping" 2>&1
	local ping_rc=$?
	kill -TERM "$VM_PID"
	end_vm
	expect_status 143 || return
	[ $ping_rc = 0 ] && grep -q " 0% packet loss" "$LOG_DIR/$name.ping" ||
		{ fail "ping lost packets: $(grep 'packet loss' "$LOG_DIR/$name.ping")"; return; }
	vhost_served "$pairs" || return
	local p per=""
	for ((p = 0; p < pairs; p++)); do
		per+=" rx$p=$(vhost_stat rx${p}_used_idx) tx$p=$(vhost_stat tx${p}_used_idx)"
	done
	echo "used indices:$per" >"$LOG_DIR/$name.pairs"
	[ "$(vhost_stat running)" = "$pairs" ] || { fail "vhost ran $(vhost_stat running) pairs, want $pairs:$per"; return; }
	for ((p = 0; p < pairs; p++)); do
		[ "$(vhost_stat rx${p}_used_idx)" -ge 1 ] || { fail "pair $p's RX ring never moved:$per"; return; }
	done
}

# guest_answers: one ping of the guest from $NETNS is answered (or lkvm is gone: wait_until ends).
guest_answers() { gone "$VM_PID" || ip netns exec "$NETNS" ping -c 1 -W 1 $GUEST_IP >/dev/null 2>&1; }

skip_unless_kvm
run_test user t_user
run_test missing t_missing
# One at a time: the hosts have 2 cores and a spinning vCPU takes one.
run_test_serial rx t_vbench rx blast 64
run_test_serial rr t_vbench rr echo 64
# Trapped notifies (the vCPU writes the kick eventfd vhost polls) and 3 resets in one run.
run_test_serial tx-trapped-resets t_vbench tx count 64 "resets=3" ",ioeventfd=off"
run_test_serial pause t_pause
run_test_serial sandbox t_sandbox
run_test_serial linux-mmio t_linux mmio ",trans=mmio" 1 1
run_test_serial linux-mq t_linux mq ",queues=2" 2 2
finish_tests

#!/usr/bin/env bash
# Linux guest on virtio-net over a tap, in a network namespace this test creates: static ip=,
# netconsole, ping from the host in ioeventfd and trapped-notify modes, counters checked; and
# multiqueue (queues=N): only the pairs Linux enables receive, each pair's counters.
set -u
SUMMARY_PREFIX=net
. "$(dirname "$0")/lib.sh"

SINK=$REPO_ROOT/build/tools/udp-sink
T=${LINUX_TIMEOUT:-600} # a Linux boot: about a minute idle on a PVM host, over 300 s at load 7
HOST_IP=10.0.2.1
GUEST_IP=10.0.2.15
GUEST_MAC=52:54:00:6c:6b:01 # not lkvm's default: seen in the guest, it came through the device

# What this machine lacks is a skip (skip_unless_net); what the project builds or installs, a failure.
need_net() {
	skip_unless_net || return
	need_cmd ping test && need_built "$SINK" "make tools" && need_kernel vmlinux
}

# t_ping MODE: ioeventfd, trap (notifies trap to the vCPU), intx (the guest is told not to
# use MSI-X, so interrupts take the legacy INTx pin through the IOAPIC), or mmio and mmio-trap
# (the NIC on the virtio-mmio transport, with ioeventfd or trapped notifies), mq (2 vCPUs and
# queues=2: Linux enables both pairs; lkvm runs as nobody after set-up, so attaching the second
# tap queue needs no capability and no tap owner), mq8 (1 vCPU and queues=8: one pair) and batch
# (batch=on: io_uring TX and RX under Linux's driver, mergeable RX buffers, no per-frame fallback).
t_ping() {
	need_net || return
	in_netns t_ping_in "$1"
}

t_ping_in() {
	local mode=$1
	local ns=$NETNS tap=lkvmt$mode extra=""
	local kparams="" cpus=1 pairs=1 queues=1 user=()
	case $mode in
	trap) extra=",ioeventfd=off" ;;
	intx) kparams=" pci=nomsi" ;;
	mmio) extra=",trans=mmio" ;;
	mmio-trap) extra=",trans=mmio,ioeventfd=off" ;;
	mq) cpus=2 queues=2 pairs=2 extra=",queues=2" user=(--user nobody) ;;
	mq8) queues=8 extra=",queues=8" ;; # Linux enables min(queues, CPUs) pairs
	batch) extra=",batch=on" ;;
	esac
	local log=$LOG_DIR/net-$mode.log nc=$LOG_DIR/net-$mode.netconsole
	LAST_LOG=$log
	ip netns exec $ns "$SINK" 6666 $((T + 30)) > "$nc" 2>&1 &
	local sink=$!
	# Kernel mode only after boot (HOST-KVM.md): no initramfs, wait for a disk that never comes.
	# The vmlinux through its PVH entry: no decompressor run emulated (a bzImage costs about 17 s
	# more host CPU a boot on a PVM host); test-linux.sh boots the bzImage.
	ip netns exec $ns "$LKVM" run -k "$G/vmlinux" -m 256 -c $cpus "${user[@]}" --timeout $T --stats=json \
		-n mode=tap,tapif=$tap,host_ip=$HOST_IP/24,guest_mac=$GUEST_MAC,script=none$extra \
		-p "root=/dev/vda rootwait ip=$GUEST_IP::$HOST_IP:255.255.255.0:lkvm:eth0:off netconsole=6665@$GUEST_IP/eth0,6666@$HOST_IP/$kparams" \
		</dev/null > "$log" 2>&1 &
	local vm=$! i
	for ((i = 0; i < T; i++)); do
		grep -q "Waiting for root device" "$log" && break
		kill -0 $vm 2>/dev/null || break
		sleep 1
	done
	if ! grep -q "Waiting for root device" "$log"; then
		# Say how it ended: lkvm gone early (its status; >128 is a signal) or still booting.
		local how="still running after ${T}s"
		if ! kill -0 $vm 2>/dev/null; then
			wait $vm 2>/dev/null; how="lkvm exited early with status $?"
		fi
		kill -KILL $vm $sink 2>/dev/null; wait $vm $sink 2>/dev/null
		fail "guest did not finish booting ($how, $(wc -c < "$log") bytes of output)"; return
	fi
	local attached=""
	if [ $queues -gt 1 ]; then
		# The tap queues in the kernel's steering (its sysfs queues are the attached ones, as
		# the namespace's own sysfs shows them): the active pairs', not all it has.
		attached=$(ip netns exec $ns ls /sys/class/net/$tap/queues | grep -c '^rx-')
		# Flows the tap spreads over its attached queues (after a ping, whose ARP makes the
		# guest's MAC known).
		ip netns exec $ns ping -c 1 -W 3 $GUEST_IP >/dev/null 2>&1
		udp_flows $GUEST_IP
	fi
	ip netns exec $ns ping -c 20 -i 0.2 -W 3 $GUEST_IP > "$LOG_DIR/net-$mode.ping" 2>&1
	local ping_rc=$?
	kill -TERM $vm; wait $vm; local st=$?
	kill $sink 2>/dev/null; wait $sink 2>/dev/null
	LAST_STATUS=$st
	[ $ping_rc -eq 0 ] && grep -q " 0% packet loss" "$LOG_DIR/net-$mode.ping" ||
		{ fail "ping lost packets: $(grep 'packet loss' "$LOG_DIR/net-$mode.ping")"; return; }
	expect_status 143 || return
	if [ "$mode" = batch ]; then
		expect_no_output 'batch=on unavailable' "the per-frame fallback" || return
	fi
	# The NIC as the kernel configured it: eth0 with the MAC its driver read from the device's
	# config (IP-Config's device line; the command line names eth0 but no MAC).
	expect_output "device=eth0, hwaddr=$GUEST_MAC, ipaddr=${GUEST_IP//./\\.}," "eth0 with the MAC lkvm gave the device" || return
	expect_output "IP-Config: Complete" "static IP configuration" || return
	if [ "$mode" = intx ]; then
		expect_output "virtio-pci .*INT A -> IRQ" "virtio-pci on its INTx pin" || return
	fi
	if [[ $mode == mmio* ]]; then
		expect_output "virtio_mmio.device=0x200@0xc0000000:5" "the device on the command line" || return
		expect_output "virtio-mmio: Registering device virtio-mmio.0 at 0xc0000000" "Linux finding it" || return
	fi
	grep -q "Waiting for root device" "$nc" || { fail "no netconsole line arrived (log: $nc)"; return; }
	local json; json=$(grep '^{"vcpu_exits"' "$log" | tail -n 1)
	[ -n "$json" ] || { fail "no --stats=json line"; return; }
	echo "$json" > "$LOG_DIR/net-$mode.json"
	# Sums over the NIC's queues, by name prefix.
	sum() { echo "$json" | grep -o "\"name\":\"$1[0-9]*\"[^}]*" | grep -o "\"$2\":[0-9]*" | cut -d: -f2 | awk '{s+=$1} END {print s+0}'; }
	local tx_pk rx_pk tx_kicks trapped irqs
	tx_pk=$(sum tx packets); rx_pk=$(sum rx packets); tx_kicks=$(sum tx kicks)
	trapped=$(echo "$json" | grep -o '"trapped":[0-9]*' | cut -d: -f2 | awk '{s+=$1} END {print s+0}')
	irqs=$(echo "$json" | grep -o '"irqs":[0-9]*' | cut -d: -f2 | awk '{s+=$1} END {print s+0}')
	[ "$rx_pk" -ge 20 ] || { fail "rx packets $rx_pk < 20 pings"; return; }
	[ "$tx_pk" -ge 20 ] || { fail "tx packets $tx_pk < 20 replies"; return; }
	[ "$tx_kicks" -ge 1 ] || { fail "no tx kicks counted"; return; }
	[ "$irqs" -ge 1 ] || { fail "no interrupts counted"; return; }
	if [[ $mode == *trap ]]; then
		[ "$trapped" -ge "$tx_kicks" ] || { fail "trap mode: trapped $trapped < tx kicks $tx_kicks"; return; }
	else
		[ "$trapped" -eq 0 ] || { fail "ioeventfd mode: $trapped trapped notifies"; return; }
	fi
	[ $queues -gt 1 ] || return 0
	# Each pair's own counters (qstat reads LAST_LOG's --stats=json).
	local p pk per=""
	for ((p = 0; p < queues; p++)); do
		per+=" rx$p=$(qstat rx$p packets) tx$p=$(qstat tx$p packets)"
	done
	echo "pairs: $per" > "$LOG_DIR/net-$mode.pairs"
	[ "$attached" = $pairs ] || { fail "$attached tap queues attached, want the $pairs Linux enabled ($per)"; return; }
	for ((p = 0; p < queues; p++)); do
		pk=$(qstat rx$p packets)
		if [ $p -lt $pairs ]; then
			[ "${pk:-0}" -ge 1 ] || { fail "active pair $p received nothing:$per"; return; }
		else
			[ "${pk:-0}" -eq 0 ] && [ "$(qstat tx$p packets)" -eq 0 ] ||
				{ fail "inactive pair $p carried frames:$per"; return; }
		fi
	done
	return 0
}

t_bad_tap() {
	# A tap name that cannot exist: a one-line error and status 1, no crash.
	need_net || return
	run_lkvm net-bad-tap 1 -- run -k "$G/vmlinux" -n "mode=tap,tapif=this-name-is-too-long0" --timeout 5 || return
	expect_output "error: .*tapif" "a message naming tapif"
}

skip_unless_kvm
run_test net-ioeventfd t_ping ioeventfd
run_test net-trap t_ping trap
run_test net-intx t_ping intx
run_test net-mmio t_ping mmio
run_test net-mmio-trap t_ping mmio-trap
run_test net-batch t_ping batch
# Alone: a 2-vCPU guest beside another VM on a 2-core host answers pings seconds late.
run_test_serial net-mq t_ping mq
run_test_serial net-mq8 t_ping mq8
run_test net-bad-tap t_bad_tap
finish_tests

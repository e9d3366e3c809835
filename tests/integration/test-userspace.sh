#!/usr/bin/env bash
# Linux guest user space: the busybox initramfs on 2 vCPUs, and its network used from user space
# (ping, a byte stream each way over TCP, checked at the other end). Needs a host whose guests can
# make system calls: a VMX/SVM host, or the emulated one (make check runs this stage there).
set -u
SUMMARY_PREFIX=userspace
. "$(dirname "$0")/lib.sh"

T=${LINUX_TIMEOUT:-600} # a Linux boot: about a minute idle on a PVM host, over 300 s at load 7
HOST_IP=10.0.3.1
GUEST_IP=10.0.3.15

need_userspace() {
	skip_unless_userspace || return
	need_kernel bzImage initramfs.cpio.gz
}

t_smp() {
	need_userspace || return
	run_lkvm userspace-smp 0 -- run -k "$G/bzImage" -i "$G/initramfs.cpio.gz" -m 256 -c 2 --timeout $T || return
	expect_output "LKVM-GUEST-USERSPACE-OK .* cpus=2" "the init script's marker with 2 CPUs" || return
	expect_output "smp: Brought up 1 node, 2 CPUs" "both CPUs up" || return
	expect_output "guest reset|guest powered off" "lkvm's report of the guest's reboot"
}

# t_net MODE: ioeventfd, or trap (every notify a trapped exit).
t_net() {
	need_userspace || return
	need_cmd socat test || return
	skip_unless_net || return
	in_netns t_net_in "$1"
}

t_net_in() {
	local mode=$1 ns=$NETNS
	local tap=lkvmu$mode extra="" d=$LOG_DIR/userspace-net-$mode
	[ "$mode" = trap ] && extra=",ioeventfd=off"
	rm -rf "$d" && mkdir -p "$d"
	head -c 262144 /dev/urandom > "$d/to-guest"
	# The tap (and so HOST_IP) exists only once lkvm runs: listen on any address of the namespace.
	ip netns exec "$ns" socat -u TCP-LISTEN:5001,reuseaddr OPEN:"$d/from-guest",creat,trunc 2> "$d/socat-in.err" &
	local rx=$!
	ip netns exec "$ns" socat -u OPEN:"$d/to-guest" TCP-LISTEN:5002,reuseaddr 2> "$d/socat-out.err" &
	local tx=$!
	run_lkvm userspace-net-$mode 0 -- run -k "$G/bzImage" \
		-i "$G/initramfs.cpio.gz" -m 256 --timeout $T --stats=json \
		-n "mode=tap,tapif=$tap,host_ip=$HOST_IP/24,script=none$extra" -p "lkvm.nettest=$GUEST_IP/24,$HOST_IP"
	local st=$?
	kill "$rx" "$tx" 2> /dev/null
	wait "$rx" "$tx" 2> /dev/null
	[ $st -eq 0 ] || return
	expect_output "LKVM-NET-PING-OK 5 packets transmitted, 5 packets received" "5 of 5 pings answered" || return
	expect_output "LKVM-NET-SENT bytes=288894" "the guest's send finishing" || return
	seq 1 50000 | cmp -s - "$d/from-guest" ||
		{ fail "the host received $(wc -c < "$d/from-guest") bytes that differ from the guest's stream"; return; }
	local want; want=$(sha256sum < "$d/to-guest"); want=${want%% *}
	expect_output "LKVM-NET-RECEIVED sha256=$want" "the guest's hash of the host's 256 KiB" || return
	local json; json=$(grep '^{"vcpu_exits"' "$LAST_LOG" | tail -n 1)
	[ -n "$json" ] || { fail "no --stats=json line"; return; }
	sum() { echo "$json" | grep -o "\"name\":\"$1[0-9]*\"[^}]*" | grep -o "\"$2\":[0-9]*" | cut -d: -f2 | awk '{s+=$1} END {print s+0}'; }
	local trapped rx_bytes tx_bytes
	trapped=$(echo "$json" | grep -o '"trapped":[0-9]*' | cut -d: -f2 | awk '{s+=$1} END {print s+0}')
	rx_bytes=$(sum rx bytes); tx_bytes=$(sum tx bytes)
	[ "$rx_bytes" -ge 262144 ] || { fail "rx bytes $rx_bytes < the 256 KiB sent to the guest"; return; }
	[ "$tx_bytes" -ge 288894 ] || { fail "tx bytes $tx_bytes < the guest's 288894-byte stream"; return; }
	if [ "$mode" = trap ]; then
		[ "$trapped" -gt 0 ] || { fail "trap mode: no trapped notifies counted"; return; }
	else
		[ "$trapped" -eq 0 ] || { fail "ioeventfd mode: $trapped trapped notifies"; return; }
	fi
}

skip_unless_kvm
run_test userspace-smp t_smp
run_test userspace-net-ioeventfd t_net ioeventfd
run_test userspace-net-trap t_net trap
finish_tests

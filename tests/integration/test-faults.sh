#!/usr/bin/env bash
# Host faults under a running guest: the tap deleted (link down to the guest, lkvm carries on),
# SIGTERM/SIGINT (orderly shutdown, 128+N), 1000 device resets in the middle of traffic (no fd,
# thread or memory growth, traffic resumes), SIGKILL (the next run is unaffected).
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=faults
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

# Every VM's --timeout is a leak guard, not a deadline the test expects: 120 s ran out in the
# emulated host at a load of 13 (fault-resets), so it is 600 s as in test-ctl.sh.
T=600
RESETS=${FAULT_RESETS:-1000}
GUEST=$GUEST_DIR/net-faults.elf

# ---- the tap deleted under a running guest ----

link_body() {
	local tap=lkvmfl0
	tap_up $tap || return
	VM_TIMEOUT=$T start_vm - fault-link -k "$GUEST" -p "fault=link" -n "mode=tap,tapif=$tap,script=none"
	wait_log "$VM_LOG" 'GUEST net-faults: link up, watching' $T ||
		{ kill "$VM_PID"; end_vm; fail "the guest never set up its NIC"; return; }
	ip netns exec "$NETNS" ip link del "$tap" || { fail "ip link del $tap failed"; return; }
	end_vm
	# The guest checks that it saw the link go down and that its frames still complete.
	expect_guest 0 || return
	[ "$(grep -c 'lkvm: warning: virtio-net: tap lkvmfl0 is gone .*link down' "$LAST_LOG")" = 1 ] ||
		fail "not exactly one 'tap is gone' line"
}

t_link() {
	skip_unless_net || return
	need_guest net-faults || return
	in_netns link_body
}

# ---- SIGTERM / SIGINT: orderly shutdown ----

# Inside a pseudo-terminal, so "the terminal is restored" can be checked: after lkvm exits the
# pty must be back in canonical mode with echo. Prints "status=N canon=0|1 echo=0|1".
PTY_RUN='
import fcntl, os, select, signal, sys, termios, time
sig, log, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
master, slave = os.openpty()
pid = os.fork()
if pid == 0:
    os.setsid()
    for fd in (0, 1, 2):
        os.dup2(slave, fd)
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    os.close(master)
    os.execvp(argv[0], argv)
out = open(log, "wb")
buf, raw_seen, sent, status = b"", False, False, None
deadline = time.time() + 90
while time.time() < deadline:
    r, _, _ = select.select([master], [], [], 0.05)
    if r:
        d = os.read(master, 4096)
        out.write(d); out.flush(); buf += d
    if not (termios.tcgetattr(slave)[3] & termios.ICANON):
        raw_seen = True
    if not sent and raw_seen and b"net-faults: idle" in buf:
        os.kill(pid, sig)
        sent = True
    p, st = os.waitpid(pid, os.WNOHANG)
    if p:
        status = os.waitstatus_to_exitcode(st)
        break
if status is None:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
lflag = termios.tcgetattr(slave)[3]
print("status=%s raw_seen=%d canon=%d echo=%d" % (status, raw_seen, bool(lflag & termios.ICANON),
      bool(lflag & termios.ECHO)))
'

signal_body() {
	local sig=$1 want=$2 tap=lkvmfs$1 res
	LAST_LOG=$LOG_DIR/fault-signal-$sig.log
	# A tap lkvm creates itself (it does not exist yet): it must be gone after the stop.
	res=$(ip netns exec "$NETNS" python3 -c "$PTY_RUN" "$sig" "$LAST_LOG" "$LKVM" run -k "$GUEST" \
		--timeout $T -p "fault=idle" -n "mode=tap,tapif=$tap,host_ip=10.77.0.1/24,script=none" 2>&1)
	case $res in
	*"status=$want raw_seen=1 canon=1 echo=1"*) ;;
	*) fail "expected status=$want, raw mode while running and the terminal restored; got: $res"; return ;;
	esac
	expect_output "stopped by signal $sig" || return
	has_link $tap && { fail "tap $tap still exists after lkvm stopped"; return; }
	return 0
}

t_signal() {
	skip_unless_net || return
	need_cmd python3 bench || return
	need_guest net-faults || return
	in_netns signal_body "$@"
}

# ---- 1000 resets in the middle of traffic ----

# proc_counts PID: "fds threads rss_kib" from /proc.
proc_counts() {
	local fds threads rss
	fds=$(find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
	threads=$(find "/proc/$1/task" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
	rss=$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status")
	echo "$fds $threads $rss"
}

resets_body() {
	local tap=lkvmfr0 fifo a b
	tap_up $tap || return
	peer_start fault-resets echo "$tap" $((T + 10)) 64 || return
	# Not under the checkout: the emulated host shares it over 9p, which refuses FIFOs.
	fifo=$(mktemp -u /tmp/lkvm-fault-resets.XXXXXX)
	mkfifo "$fifo" || { peer_stop; fail "mkfifo $fifo failed"; return; }
	exec 7<>"$fifo" # held open both ways: lkvm's console never sees EOF, we write the go bytes
	VM_STDIN=$fifo VM_TIMEOUT=$T start_vm - fault-resets -k "$GUEST" --stats=json \
		-p "fault=resets resets=$RESETS" -n "mode=tap,tapif=$tap,script=none"
	if wait_log "$VM_LOG" '^GUEST net-faults: checkpoint 1 ' 60; then
		a=$(proc_counts "$VM_PID")
		printf g >&7
	fi
	if [ -n "${a-}" ] && wait_log "$VM_LOG" '^GUEST net-faults: checkpoint 2 ' $T; then
		b=$(proc_counts "$VM_PID")
		printf g >&7
	fi
	end_vm
	exec 7>&-
	rm -f "$fifo"
	peer_stop
	# The guest checks that it made $RESETS resets and that traffic resumed after them.
	expect_guest 0 || return
	[ -n "${a-}" ] && [ -n "${b-}" ] || { fail "the guest did not reach both checkpoints"; return; }
	echo "after 10 resets: fds threads rss_kib = $a; after $RESETS: $b" >"$LOG_DIR/fault-resets.counts"
	read -r fa ta ra <<<"$a"
	read -r fb tb rb <<<"$b"
	[ "$fa" = "$fb" ] || { fail "fds $fa after 10 resets, $fb after $RESETS"; return; }
	[ "$ta" = "$tb" ] || { fail "threads $ta after 10 resets, $tb after $RESETS"; return; }
	# A leak of a worker's buffers (16 KiB and up) per reset would be 16 MiB here.
	[ $((rb - ra)) -lt 2048 ] || { fail "RSS grew by $((rb - ra)) KiB over $((RESETS - 10)) resets"; return; }
	return 0
}

t_resets() {
	skip_unless_net || return
	need_guest net-faults || return
	in_netns resets_body
}

# ---- SIGKILL leaves nothing that breaks the next run ----

kill_body() {
	local tap=lkvmfk0
	# shellcheck disable=SC2034 # read by start_vm (lib.sh)
	local VM_TIMEOUT=$T
	start_vm - fault-sigkill -k "$GUEST" -p "fault=idle" \
		-n "mode=tap,tapif=$tap,host_ip=10.78.0.1/24,script=none"
	wait_log "$VM_LOG" '^GUEST net-faults: idle' $T || { kill "$VM_PID"; end_vm; fail "guest not idle"; return; }
	has_link $tap || { kill "$VM_PID"; end_vm; fail "lkvm did not create $tap"; return; }
	kill -KILL "$VM_PID"
	end_vm
	[ "$LAST_STATUS" = 137 ] || { fail "status $LAST_STATUS after SIGKILL"; return; }
	# The same command again: same tap name, same address.
	start_vm - fault-sigkill-again -k "$GUEST" -p "fault=none" \
		-n "mode=tap,tapif=$tap,host_ip=10.78.0.1/24,script=none"
	end_vm
	expect_guest 0
}

t_sigkill() {
	skip_unless_net || return
	need_guest net-faults || return
	in_netns kill_body
}

skip_unless_kvm
run_test fault-link t_link
run_test fault-sigterm t_signal 15 143
run_test fault-sigint t_signal 2 130
run_test fault-sigkill t_sigkill
run_test_serial fault-resets t_resets
finish_tests

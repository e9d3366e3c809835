#!/usr/bin/env bash
# virtio-9p against a malicious driver (build/guests/p9-hostile.elf, C on tests/guest/lib): two
# shares (read-write and ro) beside a directory that is never shared, holding a canary file that
# symlinks in the shares point at. The guest tries .., .. out of a directory it holds that this
# script moves out of the share meanwhile, absolute and relative symlinks, over-long and
# malformed names, huge counts and offsets, fid exhaustion, every change on the read-only share,
# malformed messages and chains. The guest checks every case itself and reports one status
# (tests/guest/lib/guest.h). Checked here: that status, lkvm ended normally (also as the ASan
# build), the canary's text never reached the guest's console, the canary, the unshared
# directory and the read-only share are unchanged, and lkvm's counters agree with the guest.
# And lkvm stat, pause, resume and stop of a VM with a share on each transport; the device's thread
# without capabilities and inside its seccomp filter; too many shares for the descriptor limit
# refused at start-up.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=9p
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=120
REAL_LKVM=$LKVM
ASAN_LKVM=$REPO_ROOT/build/asan/lkvm
# lkvm's descriptor limit for these runs. A fid costs memory, not descriptors (issue 39: it
# names a hostfs node, and the descriptors are each share's cache and open files, settled from
# this limit by host_files_fit): the fid bound is the share's `fids=N`, whatever the limit,
# which the guest exhausts (the default, a million, would take minutes). fids_ok checks a bound
# against that.
FD_LIMIT=8192
FIDS=4096
NMALFORMED=5 # the guest's chain-* cases

# make_tree DIR: DIR/share (read-write), DIR/ro (read-only), DIR/outside (never shared) with a
# canary whose text (a random token) is in $TOKEN, and links out of each share; DIR/share/held,
# which t_hostile moves to DIR/away (never shared either, a copy of the canary in it).
make_tree() {
	local d=$1 s
	TOKEN=LKVM-CANARY-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
	mkdir -p "$d/share/held" "$d/ro" "$d/outside" "$d/away"
	echo "$TOKEN" >"$d/outside/canary"
	echo "$TOKEN" >"$d/away/canary"
	printf 'share-file\n' >"$d/share/file"
	printf 'held-file\n' >"$d/share/held/file"
	printf 'ro-file\n' >"$d/ro/file"
	for s in share ro; do
		ln -s "$d/outside/canary" "$d/$s/abs"
		ln -s "$d/outside" "$d/$s/absdir"
		ln -s ../outside/canary "$d/$s/rel"
		ln -s ../outside "$d/$s/reldir"
	done
}

# What must not change: every name, type, size, mode, mtime and link target under DIR/outside
# and DIR/ro, and the files' contents.
snapshot() {
	(cd "$1" && find outside ro -printf '%p %y %s %m %T@ %l\n' | sort &&
		find outside ro -type f -exec sha256sum {} + | sort)
}

# The 9p counters of the last --stats=json line: "malformed limit" of share 0, "limit" of share 1.
share_stats() {
	grep '^{"vcpu_exits"' "$LAST_LOG" | tail -n1 | python3 -c '
import json, sys
s = json.load(sys.stdin)["shares"]
print(s[0]["queues"][0]["malformed"], s[0]["fids"]["limit"], s[1]["fids"]["limit"])'
}

# fids_ok LIMIT: a share's fid bound is its fids=N, not cut by the descriptor limit.
fids_ok() {
	[ "$1" = $FIDS ]
}

t_hostile() {
	local name=$1 bin=$2 tree before after malformed lim0 lim1
	need_lkvm "$bin" && need_guest p9-hostile && need_python && need_cmd prlimit test || return
	tree=$(mktemp -d "$LOG_DIR/$name.XXXXXX")
	make_tree "$tree"
	before=$(snapshot "$tree")
	VM_TIMEOUT=$T LKVM=$bin LKVM_PREFIX="prlimit --nofile=$FD_LIMIT:$FD_LIMIT" start_vm - "$name" \
		-k "$ELF" --share "$tree/share,fids=$FIDS" --share "$tree/ro,ro,fids=$FIDS" --stats=json
	# The guest's moved-out case: once it holds share/held, the directory goes beside a copy of
	# the canary, and share/moved tells the guest (which polls for it) that it has.
	if ! wait_log "$VM_LOG" '^GUEST p9: holding held$' 60; then
		end_vm
		why_guest_failed
		return 1
	fi
	mv "$tree/share/held" "$tree/away/held" && : >"$tree/share/moved"
	end_vm
	# Every case passed, and all of them ran: the guest's status says so.
	expect_guest 0 || return
	expect_no_output 'ERROR: [A-Za-z]+Sanitizer|runtime error:|SUMMARY: [A-Za-z]+Sanitizer' "a sanitizer report" || return
	! grep -qF "$TOKEN" "$LAST_LOG" || { fail "the canary's text reached the guest"; return; }
	after=$(snapshot "$tree")
	[ "$before" = "$after" ] || { fail "outside/ or ro/ changed: $(diff <(echo "$before") <(echo "$after") | head -n 4 | tr '\n' ' ')"; return; }
	[ "$(cat "$tree/share/file")" = share-file ] || { fail "share/file changed"; return; }
	read -r malformed lim0 lim1 <<<"$(share_stats)"
	[ "$malformed" = $NMALFORMED ] || { fail "--stats: $malformed malformed chains, the guest sent $NMALFORMED"; return; }
	if [ "$lim0" != "$lim1" ] || ! fids_ok "$lim0"; then
		fail "--stats: fid limits $lim0, $lim1; expected both $FIDS"
		return
	fi
	# lkvm's bound is what the guest ran into (the guest checks the ENFILE, not the number:
	# only the host knows it).
	expect_output "^GUEST p9: $lim0 fids held, then ENFILE" "the guest held $lim0 fids, then ENFILE" || return
	rm -rf "$tree"
}

# lkvm stat, pause, resume and stop of a VM with a share on each transport: both devices are
# listed with their fid bound, and the VM goes on and stops normally.
t_stat() {
	local n=lkvm-9p-stat-$$ dir lim
	need_python || return
	dir=$(mktemp -d "$LOG_DIR/9p-stat.XXXXXX")
	VM_TIMEOUT=$T LKVM_PREFIX="prlimit --nofile=$FD_LIMIT:$FD_LIMIT" start_vm $n 9p-stat \
		--share "$dir,fids=$FIDS" --share "$dir,ro,trans=mmio,fids=$FIDS"
	wait_vm $n || return
	[ "$(stat_val $n 'len(d["shares"])')" = 2 ] || { fail "lkvm stat lists $(stat_val $n 'len(d["shares"])') shares, not 2"; return; }
	lim=$(stat_val $n 'd["shares"][1]["fids"]["limit"]')
	fids_ok "$lim" || { fail "lkvm stat: share 1's fid limit $lim, not $FIDS"; return; }
	[ "$(stat_val $n 'd["shares"][0]["queues"][0]["requests"]')" = 0 ] || { fail "requests without a driver"; return; }
	ctl 9p-stat-pause pause $n
	expect_status 0 || return
	ctl 9p-stat-resume resume $n
	expect_status 0 || return
	ctl 9p-stat-stop stop $n
	expect_status 0 || return
	wait_exit "$VM_PID" 10 || return
	[ "$EXIT_STATUS" = 3 ] || { fail "exit status $EXIT_STATUS, not 3 (lkvm stop)"; return; }
	rm -rf "$dir"
}

# The device's thread: without capabilities and under its seccomp filter (Seccomp: 2), and a
# forbidden call from it (LKVM_TEST_SANDBOX_VIOLATE=9p in the test build: its probe, sandbox.c)
# stops lkvm with 159, naming it.
t_thread() {
	local n=lkvm-9p-thread-$$ dir comm status
	dir=$(mktemp -d "$LOG_DIR/9p-thread.XXXXXX")
	VM_TIMEOUT=$T start_vm $n 9p-thread --share "$dir"
	wait_vm $n || return
	comm=$(grep -lx lkvm-9p /proc/"$VM_PID"/task/*/comm | head -n 1)
	[ -n "$comm" ] || { fail "no lkvm-9p thread in lkvm $VM_PID"; return; }
	status=$(grep -E '^(CapEff|CapPrm|Seccomp):' "${comm%/comm}/status" | tr -s '\t\n' '  ')
	[ "$status" = "CapPrm: 0000000000000000 CapEff: 0000000000000000 Seccomp: 2 " ] ||
		{ fail "the 9p thread: $status"; return; }
	ctl 9p-thread-stop stop $n
	expect_status 0 || return
	wait_exit "$VM_PID" 10 || return
	need_guest hlt || return
	need_testhooks || return
	LKVM=$LKVM_TESTHOOKS LKVM_TEST_SANDBOX_VIOLATE=9p run_lkvm 9p-violate 159 -- \
		run -k "$ELF" --share "$dir" --timeout $T || return
	expect_probe_stopped 9p || return
	rm -rf "$dir"
}

# More shares than lkvm's descriptor limit can serve (issue 27: each share used to get at least
# 256 fids whatever the limit, and a guest could fill lkvm's table): refused at start-up with
# one line saying what is needed, status 1.
t_fd_limit() {
	local dir i args=()
	need_guest hlt && need_cmd prlimit test || return
	dir=$(mktemp -d "$LOG_DIR/9p-fd-limit.XXXXXX")
	for i in 1 2 3 4 5 6 7 8; do args+=(--share "$dir"); done
	# --fs 9p: 9p's devices alone (--fs auto adds a virtio-fs device per share to the budget).
	LKVM_WRAP="prlimit --nofile=256:256" run_lkvm 9p-fd-limit 1 -- run -k "$ELF" "${args[@]}" \
		--fs 9p --timeout $T || return
	one_error_line 'virtio-9p: 8 shares need at least [0-9]+ descriptors; RLIMIT_NOFILE allows 256: raise it with ulimit -n' || return
	rm -rf "$dir"
}

skip_unless_kvm
run_test 9p-hostile t_hostile 9p-hostile "$REAL_LKVM"
run_test 9p-hostile-asan t_hostile 9p-hostile-asan "$ASAN_LKVM"
run_test 9p-stat t_stat
run_test 9p-thread t_thread
run_test 9p-fd-limit t_fd_limit
finish_tests

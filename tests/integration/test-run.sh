#!/usr/bin/env bash
# `lkvm run -- CMD` and the shell mode: CMD on the host's files over virtio-fs or virtio-9p, its status, stdout, stderr and stdin, shares, the shell on a terminal, the statuses of a run without CMD's, a stock Debian kernel, and the PVM host's refusal.
# Needs guest user space (a VMX/SVM host or the emulated one); RUN_TESTS=pvm-refusal runs the
# refusal, which needs a PVM host (tests/check.sh runs it natively there).
# shellcheck disable=SC2016 # the guest's commands are single-quoted on purpose: the guest expands them
set -u
SUMMARY_PREFIX=${SUMMARY_PREFIX:-run}
# One boot at a time on the emulated host's one CPU, except where the test runs two on purpose.
TEST_JOBS=${TEST_JOBS:-1}
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

T=${LINUX_TIMEOUT:-600}
TTYDRIVE=$REPO_ROOT/tests/integration/ttydrive.py
# The test's host files: below the checkout, which the emulated host sees at the same path (its
# /tmp is the guest's too, but a test's files should outlive a failed run for a look). One folder
# per summary: make check runs the PVM refusal (run-pvm) beside the others.
WORK=$LOG_DIR/$SUMMARY_PREFIX-files
rm -rf "$WORK"
mkdir -p "$WORK"

# cmd_run LOG STATUS [LKVM-RUN-ARGS...] -- CMD...: lkvm run -k the guest kernel ARGS -- CMD with
# stdin from $RUN_STDIN (default /dev/null), stdout and stderr apart in LOG.out and LOG.err
# (LAST_LOG is LOG.err: lkvm's own lines are there); fails unless it exits STATUS.
cmd_run() {
	local log=$1 want=$2
	shift 2
	skip_unless_userspace || return
	need_kernel || return
	LAST_LOG=$LOG_DIR/$log.err
	printf '$ %s run -k %s%s\n' "$LKVM" "$G/bzImage" "$(printf ' %q' "$@")" >"$LOG_DIR/$log.cmd"
	timeout -s KILL $((T + GUARD_SLACK)) "$LKVM" run -k "$G/bzImage" --timeout "$T" "$@" \
		<"${RUN_STDIN:-/dev/null}" >"$LOG_DIR/$log.out" 2>"$LAST_LOG"
	LAST_STATUS=$?
	expect_status "$want"
}

# Where a test reads or writes the test's files (or wants lkvm silent), it passes --user root: run
# as root, lkvm otherwise serves the host's files as nobody and says so in a line on stderr, and
# nobody may not enter a checkout below a directory of mode 0700 (a clone in mktemp -d's).

# same FILE WANT WHAT: FILE's bytes are WANT's.
same() {
	cmp -s "$1" "$2" && return 0
	fail "$3 differs from $2 ($(stat -c %s "$1") bytes, want $(stat -c %s "$2"); $(cmp "$1" "$2" 2>&1 | head -c 200))"
}

# status_file FILE WANT: --status-file's FILE begins with the lines WANT (printf's format).
status_file() {
	local want
	want=$(printf '%b' "$2")
	[ "$(head -n "$(printf '%s\n' "$want" | wc -l)" "$1" 2>&1)" = "$want" ] ||
		fail "--status-file wrote '$(head -c 200 "$1" 2>&1)', want '$want...'"
}

t_status() {
	cmd_run "run-status-$1" "$1" --user root --status-file "$LOG_DIR/run-status-$1.status" -- \
		sh -c "exit $1" || return
	# CMD's own status: lkvm adds nothing to CMD's output.
	if [ -s "$LOG_DIR/run-status-$1.out" ] || [ -s "$LAST_LOG" ]; then
		fail "lkvm or the kernel printed something: $(head -c 200 "$LAST_LOG" "$LOG_DIR/run-status-$1.out")"
		return
	fi
	# Who ended it, for a script: CMD, whatever its status (a failing make's 2 is not a panic).
	status_file "$LOG_DIR/run-status-$1.status" "ended=command\ncommand_status=$1\nstatus=$1\n"
}

# Killed by a signal: the shell's 128 + N.
t_signal() {
	cmd_run run-signal 137 --status-file "$LOG_DIR/run-signal.status" -- \
		sh -c 'echo killing; kill -9 $$' || return
	[ "$(cat "$LOG_DIR/run-signal.out")" = killing ] ||
		{ fail "the command printed '$(head -c 100 "$LOG_DIR/run-signal.out")'"; return; }
	status_file "$LOG_DIR/run-signal.status" "ended=command\ncommand_status=137\ncommand_signal=9\n"
}

# A command that is not there: the shell's 127, and init says why on the command's stderr.
t_not_found() {
	cmd_run run-not-found 127 -- /no/such/command || return
	expect_output "^lkvm-init: /no/such/command: No such file or directory" "init's message"
}

# Init cannot mount a share where it was asked to (below /proc): 125, the stage named, and the
# command never runs.
t_init_failed() {
	cmd_run run-init-failed 125 --share "$WORK:/proc/lkvm-no-such-dir" -- echo should-not-run || return
	expect_output "guest init failed mounting a share: " "lkvm's report of init's failure" || return
	[ ! -s "$LOG_DIR/run-init-failed.out" ] || fail "the command ran"
}

# 1 MiB through stdin (every byte value, the framing's escape byte included) comes back on
# stdout as it was, only once stdin's end reached the guest (cat ends at EOF); another 1 MiB
# host file goes to stderr; stdout and stderr are the command's only, byte for byte.
t_stdio() {
	head -c 1048576 /dev/urandom >"$WORK/stdin.bin"
	head -c 1048576 /dev/urandom >"$WORK/stderr.bin"
	RUN_STDIN=$WORK/stdin.bin cmd_run run-stdio 7 --user root -- sh -c 'cat; cat "$1" >&2; exit 7' sh \
		"$WORK/stderr.bin" || return
	same "$LOG_DIR/run-stdio.out" "$WORK/stdin.bin" "stdout" || return
	same "$LOG_DIR/run-stdio.err" "$WORK/stderr.bin" "stderr"
}

# Output that is not a terminal goes through named virtio-serial ports (lkvm.stdout), whose writes
# do not wait for lkvm: CMD's stdout is no tty, so seq 200000 (1.29 MB) writes it in 4 KiB blocks
# and it arrives byte for byte in a few hundred transmit chains (--stats' console tx packets);
# through a console (hvc0) it was a tty, a chain per line or so (30,000 with our kernel).
t_output() {
	local chains
	seq 200000 >"$WORK/seq.txt"
	cmd_run run-output 0 --user root --stats -- sh -c 'test -t 1 && echo stdout-is-a-tty >&2; seq 200000' || return
	same "$LOG_DIR/run-output.out" "$WORK/seq.txt" "stdout" || return
	! grep -q stdout-is-a-tty "$LAST_LOG" || { fail "CMD's stdout was a terminal"; return; }
	chains=$(awk '/^console[0-9]+:$/ { c = 1; next } /^[a-z0-9-]+:$/ { c = 0 }
		c && $1 == "tx" { n += $5 } END { print n + 0 }' "$LAST_LOG")
	[ "$chains" -gt 0 ] && [ "$chains" -le 2000 ] ||
		fail "the consoles took $chains chains for 1.29 MB (want 1 to 2000)"
}

# The README's example: a pipe into cat.
t_pipe() {
	skip_unless_userspace || return
	need_kernel || return
	LAST_LOG=$LOG_DIR/run-pipe.err
	local out
	out=$(echo x | timeout -s KILL $((T + GUARD_SLACK)) "$LKVM" run -k "$G/bzImage" --timeout "$T" -- cat 2>"$LAST_LOG")
	LAST_STATUS=$?
	expect_status 0 || return
	[ "$out" = x ] || fail "echo x | lkvm run -- cat printed '${out:0:100}'"
}

# The guest starts in the host's directory with the host's environment, and a write to / (or
# over a host file) stays in the guest's overlay.
t_root_write() {
	echo host >"$WORK/file"
	cd "$WORK" || return # each test runs in a subshell of its own
	LKVM_RUN_TEST_VAR=from-host cmd_run run-root-write 0 --user root -- sh -c '
		echo "cwd=$PWD var=$LKVM_RUN_TEST_VAR"
		cat file && echo guest >file && cat file &&
		echo guest >/lkvm-run-test-marker && cat /lkvm-run-test-marker' || return
	local want
	want=$(printf 'cwd=%s var=from-host\nhost\nguest\nguest' "$WORK")
	[ "$(cat "$LOG_DIR/run-root-write.out")" = "$want" ] ||
		{ fail "the guest printed '$(head -c 300 "$LOG_DIR/run-root-write.out")'"; return; }
	[ "$(cat "$WORK/file")" = host ] || { fail "the host's file changed: $(head -c 100 "$WORK/file")"; return; }
	[ ! -e /lkvm-run-test-marker ] || fail "the guest's write to / reached the host"
}

# A 64 MiB read of the 9p root goes to the host msize at a time and does not fill the guest's
# page cache (init/lkvm-init.c: the root's cache=mmap; under cache=loose the page cache grew by
# the whole file, and filling it made such reads 6-10x slower), and the bytes are the host's.
# --fs 9p: over virtio-fs the root is cache=always, whose page cache is the point.
t_root_read() {
	head -c 67108864 /dev/urandom >"$WORK/read-64m"
	cmd_run run-root-read 0 --user root --stats --fs 9p -- sh -c '
		cached() { sed -n "s/^Cached: *\([0-9]*\) kB/\1/p" /proc/meminfo; }
		c0=$(cached); dd if="$1" of=/dev/null bs=1M 2>/dev/null || exit 1; c1=$(cached)
		echo "cached_kb=$((c1 - c0)) tail=$(tail -c 16 "$1" | od -An -tx1 | tr -d " \n")"' sh "$WORK/read-64m" || return
	local out want grown bytes
	out=$(cat "$LOG_DIR/run-root-read.out")
	want="tail=$(tail -c 16 "$WORK/read-64m" | od -An -tx1 | tr -d ' \n')" # cksum: SIGILL in the guest
	[ "${out#* }" = "$want" ] || { fail "the guest read '${out#* }', the host has '$want'"; return; }
	grown=${out%% *}
	grown=${grown#cached_kb=}
	[[ $grown =~ ^-?[0-9]+$ ]] || { fail "the guest printed '${out:0:200}'"; return; }
	[ "$grown" -lt 16384 ] || { fail "the guest's page cache grew by $grown KiB reading 64 MiB of the root"; return; }
	# --stats: the 9p root's file data read (the 64 MiB and what the command's start read).
	bytes=$(awk '$1 == "req0" && NF == 11 { print $9 }' "$LAST_LOG" | head -n 1)
	[ "${bytes:-0}" -ge 67108864 ] || fail "--stats shows ${bytes:-no} read_bytes for the root"
}

# --share: a read-write share's writes land on the host, a read-only one refuses them.
t_shares() {
	mkdir -p "$WORK/rw" "$WORK/ro"
	echo ro-data >"$WORK/ro/in"
	rm -f "$WORK/rw/out" "$WORK/ro/out"
	cmd_run run-shares 0 --user root --share "$WORK/rw:/mnt/rw" --share "$WORK/ro:/mnt/ro,ro" -- sh -c '
		cat /mnt/ro/in >/mnt/rw/out && echo written >>/mnt/rw/out
		if echo no >/mnt/ro/out; then echo "ro share written"; exit 1; fi' || return
	[ "$(cat "$WORK/rw/out" 2>/dev/null)" = "$(printf 'ro-data\nwritten')" ] ||
		{ fail "the read-write share's file on the host: '$(head -c 100 "$WORK/rw/out" 2>&1)'"; return; }
	[ ! -e "$WORK/ro/out" ] || { fail "the read-only share was written"; return; }
	expect_output "Read-only file system" "the guest's error for the read-only share"
}

# virtio-fs (--fs auto, the default, on a kernel that has it) and --fs 9p, one boot each: the
# root (init's --debug line: its lower layer is outside the command's /proc/mounts) and both
# shares (/proc/mounts) mounted by the file system asked for, a 1 MiB file read through the root
# and written through the rw share arrives byte-exact on the host, the ro share refuses a
# write, and tests/tools/fs-posix's cases (open+unlink+fstat+read, rename over an open file, a
# hard link, a MAP_SHARED write seen by read()) on the rw share. FS: virtiofs (--fs auto), 9p
# or only (--fs virtiofs: the same, and no 9p device at all).
t_fs() {
	local fs=$1 mode=auto root rw ro posix=$REPO_ROOT/build/tools/fs-posix d=$WORK/fs-$1
	[ -x "$posix" ] || { fail "no $posix (make tools)"; return; }
	mkdir -p "$d/rw" "$d/ro" && head -c 1048576 /dev/urandom >"$d/data" ||
		{ fail "cannot make $d"; return; }
	[ "$fs" = only ] && mode=virtiofs
	if [ "$fs" != 9p ]; then
		root='^lkvm-init: /lkvm/lower: virtiofs \(lkvm-fs-root\)'
		rw='^lkvm-fs0 /mnt/rw virtiofs rw' ro='^lkvm-fs1 /mnt/ro virtiofs ro'
	else
		mode=9p root='^lkvm-init: /lkvm/lower: 9p \(lkvm-root\)'
		rw='^lkvm-share0 /mnt/rw 9p rw' ro='^lkvm-share1 /mnt/ro 9p ro'
	fi
	cmd_run "run-fs-$fs" 0 --user root --debug --stats --fs "$mode" \
		--share "$d/rw:/mnt/rw" --share "$d/ro:/mnt/ro,ro" -- sh -c '
		for m in "$1" "$2"; do grep -q "$m" /proc/mounts || { echo "no mount $m"; cat /proc/mounts; exit 1; }; done
		cp "$4/data" /mnt/rw/copy || exit 1
		if echo no >/mnt/ro/out; then echo "ro share written"; exit 1; fi
		"$3" /mnt/rw' sh "$rw" "$ro" "$posix" "$d" || return
	expect_output "$root" "init's line for the root" || return
	same "$d/rw/copy" "$d/data" "the file written through the share" || return
	[ ! -e "$d/ro/out" ] || { fail "the read-only share was written"; return; }
	grep -q "^fs-posix: ok" "$LOG_DIR/run-fs-$fs.out" ||
		{ fail "fs-posix: $(head -c 300 "$LOG_DIR/run-fs-$fs.out" | tr '\n' '|')"; return; }
	if [ "$fs" != 9p ]; then
		expect_output "^fs0:" "the virtio-fs devices' counters (--stats)" || return
	elif grep -q "^fs0:" "$LAST_LOG"; then
		fail "--fs 9p made virtio-fs devices"
		return
	fi
	if [ "$fs" = only ] && grep -q "^9p0:" "$LAST_LOG"; then
		fail "--fs virtiofs made virtio-9p devices"
	fi
}

# The shell on a pseudo-terminal: typed commands run, Ctrl-a x ends lkvm with 0 and the
# terminal is left as it was.
t_shell() {
	skip_unless_userspace || return
	need_kernel || return
	need_python || return
	LAST_LOG=$LOG_DIR/run-shell.log
	local res
	res=$(SHELL=/bin/sh PS1='lkvm-run$ ' "$PY" "$TTYDRIVE" --timeout "$T" "$LAST_LOG" \
		'wait:lkvm-run\$ ' 'send:echo answer=$((6 * 7)) tty=$(tty)\n' \
		'wait:answer=42 tty=/dev/hvc0' 'send:\x01x' -- \
		"$LKVM" run -k "$G/bzImage" --timeout "$T" -- 2>&1)
	case $res in
	skip:*) skip "${res#skip: }"; return ;;
	*" raw=1 restored=1 "*) ;;
	*) fail "ttydrive: ${res:0:300}"; return ;;
	esac
	LAST_STATUS=${res#status=}
	LAST_STATUS=${LAST_STATUS%% *}
	expect_status 0
}

# A kernel panic (no init to run: rdinit= names none) is 2, not "no status"; the kernel's whole
# log, every level (KERN_INFO's "Memory:" line too, which a quiet console leaves out), is in
# --console-log's file (written from the vCPU threads, in their sandbox).
t_panic() {
	cmd_run run-panic 2 --console-log "$LOG_DIR/run-panic.console" -p rdinit=/no-such-init \
		--status-file "$LOG_DIR/run-panic.status" -- true || return
	expect_output "guest panicked" "lkvm's report of the panic" || return
	status_file "$LOG_DIR/run-panic.status" "ended=panic\nstatus=2\n" || return
	grep -q "Kernel panic" "$LOG_DIR/run-panic.console" ||
		{ fail "no 'Kernel panic' in --console-log's file ($(tail -c 200 "$LOG_DIR/run-panic.console" 2>&1))"; return; }
	grep -q "\] Memory: [0-9]*K/[0-9]*K available" "$LOG_DIR/run-panic.console" ||
		fail "--console-log's file is not the whole log: no KERN_INFO 'Memory: ...K available' line ($(wc -l <"$LOG_DIR/run-panic.console") lines)"
}

# --fail-on default in a quiet -- CMD run: a WARNING written to the kernel's log (as root, to
# /dev/kmsg, at the default level 4, which quiet keeps from the console) ends the run with 5
# before CMD's own 0 is reported (the run may end before CMD's next line reaches the host); with
# --fail-on-finish CMD runs to its end, its 0 is reported first and the run's end is 5.
t_fail_on() {
	local st=$LOG_DIR/run-fail-on-$1.status opt=
	[ "$1" = finish ] && opt=--fail-on-finish
	cmd_run "run-fail-on-$1" 5 --root --fail-on default $opt --status-file "$st" -- \
		sh -c 'echo "WARNING: lkvm fail-on test" >/dev/kmsg && echo written' || return
	if [ "$1" = finish ]; then
		# The run went on: CMD's output after the WARNING is there.
		[ "$(cat "$LOG_DIR/run-fail-on-$1.out")" = written ] ||
			{ fail "the command printed '$(head -c 100 "$LOG_DIR/run-fail-on-$1.out")'"; return; }
		status_file "$st" "ended=fail-on\ncommand_status=0\nstatus=5\n" || return
	else
		status_file "$st" "ended=fail-on\nstatus=5\n" || return
	fi
	grep -qx 'fail_on=\[ *[0-9.]*\] WARNING: lkvm fail-on test' "$st" ||
		fail "no fail_on= line naming the WARNING in $st: $(grep fail_on "$st" | head -c 200)"
}

t_timeout() {
	cmd_run run-timeout 124 --timeout 30 --status-file "$LOG_DIR/run-timeout.status" -- sleep 1000 ||
		return
	expect_output "timeout: 30 s passed" "lkvm's report of the timeout" || return
	status_file "$LOG_DIR/run-timeout.status" "ended=timeout\nstatus=124\n"
}

# The guest resetting before init's report (the command rebooted it): 125, and the reason.
# --root: rebooting takes root in the guest (the command runs as lkvm's chosen user otherwise,
# and `reboot` fails with 1), while the files are still served with that user's credentials:
# /etc/shadow stays closed (else 9).
t_reset() {
	cmd_run run-reset 125 --root --status-file "$LOG_DIR/run-reset.status" -- sh -c 'if cat /etc/shadow >/dev/null 2>&1; then exit 9; fi
		exec busybox reboot -f' || return
	expect_output "the guest ended \(guest reset \(i8042\)\) without the command's status" \
		"lkvm's reason" || return
	status_file "$LOG_DIR/run-reset.status" "ended=reboot\nstatus=125\n"
}

# A closed stdout ends the run as it ends a host command: SIGPIPE's 141 (yes never stops).
t_sigpipe() {
	skip_unless_userspace || return
	need_kernel || return
	LAST_LOG=$LOG_DIR/run-sigpipe.err
	local first
	first=$(timeout -s KILL $((T + GUARD_SLACK)) "$LKVM" run -k "$G/bzImage" --timeout "$T" -- yes \
		</dev/null 2>"$LAST_LOG" | head -n 1; exit "${PIPESTATUS[0]}")
	LAST_STATUS=$?
	expect_status 141 || return
	[ "$first" = y ] || fail "the first line was '${first:0:100}'"
}

# Two runs at once: each gets its own command's output and status.
t_two() {
	skip_unless_userspace || return
	need_kernel || return
	local i pids=()
	for i in 1 2; do
		timeout -s KILL $((T + GUARD_SLACK)) "$LKVM" run -k "$G/bzImage" --timeout "$T" -- \
			sh -c "for n in 1 2 3 4 5 6 7 8; do echo run$i-\$n; done; exit 1$i" \
			</dev/null >"$LOG_DIR/run-two-$i.out" 2>"$LOG_DIR/run-two-$i.err" &
		pids+=($!)
	done
	for i in 1 2; do
		LAST_LOG=$LOG_DIR/run-two-$i.err
		wait "${pids[$((i - 1))]}"
		LAST_STATUS=$?
		expect_status "1$i" || return
		[ "$(cat "$LOG_DIR/run-two-$i.out")" = "$(printf 'run%s-%s\n' $i 1 $i 2 $i 3 $i 4 $i 5 $i 6 $i 7 $i 8)" ] ||
			{ fail "run $i printed '$(head -c 200 "$LOG_DIR/run-two-$i.out")'"; return; }
	done
}

# The emulated host's own Debian kernel (virtio, 9p and overlay are modules there), found as
# /boot/vmlinuz-$(uname -r) (its /boot bound over this machine's in a mount namespace), with
# its modules from /lib/modules: uname -r in the guest is that kernel's.
DEBIAN_BOOT=$REPO_ROOT/build/kvm-host/kernel/boot
debian_kernel() {
	[ "$(host_kind)" = emulated-svm ] ||
		{ skip "needs the emulated host, whose kernel is a Debian package with its modules installed"; return 1; }
	[ -f "$DEBIAN_BOOT/vmlinuz-$(uname -r)" ] ||
		{ fail "no $DEBIAN_BOOT/vmlinuz-$(uname -r) (scripts/kvm-host.sh unpacks it)"; return 1; }
	[ -d "/lib/modules/$(uname -r)" ] || { fail "no /lib/modules/$(uname -r) in the emulated host"; return 1; }
}

t_debian() {
	debian_kernel || return
	LAST_LOG=$LOG_DIR/run-debian.err
	timeout -s KILL $((T + GUARD_SLACK)) unshare -m sh -c 'mount --bind "$1" /boot && cd / &&
		shift && exec "$@"' sh "$DEBIAN_BOOT" "$LKVM" run -m 512 --timeout "$T" --debug -- uname -r \
		</dev/null >"$LOG_DIR/run-debian.out" 2>"$LAST_LOG"
	LAST_STATUS=$?
	expect_status 0 || return
	# Its fuse and virtiofs modules went into the initramfs, and init mounted the root with them.
	expect_output '^lkvm-init: /lkvm/lower: virtiofs \(lkvm-fs-root\)' "init's virtio-fs root line" || return
	tr -d '\r' <"$LAST_LOG" | grep -qxF "lkvm: kernel: /boot/vmlinuz-$(uname -r) (/boot/vmlinuz-\$(uname -r))" ||
		{ fail "no line saying which kernel"; return; }
	[ "$(cat "$LOG_DIR/run-debian.out")" = "$(uname -r)" ] ||
		fail "uname -r in the guest printed '$(head -c 100 "$LOG_DIR/run-debian.out")'"
}

# The same kernel without its modules (an empty /lib/modules/RELEASE, and a link to it outside
# its package's boot/, so none beside it): no 9p, and the run says which options the kernel
# lacks, with 125.
t_no9p() {
	debian_kernel || return
	LAST_LOG=$LOG_DIR/run-no9p.err
	ln -sf "$DEBIAN_BOOT/vmlinuz-$(uname -r)" "$WORK/vmlinuz-$(uname -r)"
	timeout -s KILL $((T + GUARD_SLACK)) unshare -m sh -c 'mount -t tmpfs tmpfs "/lib/modules/$1" &&
		shift && exec "$@"' sh "$(uname -r)" "$LKVM" run -k "$WORK/vmlinuz-$(uname -r)" \
		-m 512 --timeout "$T" -- echo should-not-run </dev/null >"$LOG_DIR/run-no9p.out" 2>"$LAST_LOG"
	LAST_STATUS=$?
	expect_status 125 || return
	expect_output "guest init failed mounting the 9p root and its overlay: No such device \(the kernel needs CONFIG_9P_FS" \
		"lkvm's report of what the kernel lacks" || return
	[ ! -s "$LOG_DIR/run-no9p.out" ] || fail "the command ran: $(head -c 100 "$LOG_DIR/run-no9p.out")"
}

# The same kernel where its package was unpacked (<root>/boot/vmlinuz-R), with the host's
# /lib/modules/R hidden (as in no9p): its modules come from <root>/lib/modules/R beside it, as
# vng finds them, without a bind mount; --modules naming no module directory is one line.
t_modules() {
	debian_kernel || return
	run_lkvm run-modules-bad 1 -- run --user root -k "$DEBIAN_BOOT/vmlinuz-$(uname -r)" --modules "$DEBIAN_BOOT" \
		-- true || return
	one_error_line "--modules '$DEBIAN_BOOT': no modules.dep or modules.order in it \(give a lib/modules/RELEASE directory\)" ||
		return
	LAST_LOG=$LOG_DIR/run-modules.err
	timeout -s KILL $((T + GUARD_SLACK)) unshare -m sh -c 'mount -t tmpfs tmpfs "/lib/modules/$1" &&
		shift && exec "$@"' sh "$(uname -r)" "$LKVM" run -k "$DEBIAN_BOOT/vmlinuz-$(uname -r)" \
		-m 512 --timeout "$T" -- uname -r </dev/null >"$LOG_DIR/run-modules.out" 2>"$LAST_LOG"
	LAST_STATUS=$?
	expect_status 0 || return
	[ "$(cat "$LOG_DIR/run-modules.out")" = "$(uname -r)" ] ||
		fail "uname -r in the guest printed '$(head -c 100 "$LOG_DIR/run-modules.out")'"
}

# A power-off in the guest (reboot(2) POWER_OFF, here busybox's) ends the run with 0 and lkvm's
# line, at once rather than at --timeout: the Debian kernel has ACPI, and lkvm's tables and PM1
# registers let it power off. One boot with 2 CPUs also shows ACPI's MADT brought both up and
# its PCI root bridge found the virtio-pci devices the command runs on. (Our own build/guest
# kernel has no CONFIG_ACPI: it only halts, docs/run.md.) --root: a power-off takes root in the
# guest; --status-file: the run's end is the power-off's.
t_poweroff() { # t_poweroff NAME KERNEL
	debian_kernel || return
	[ -f "$2" ] || { skip "no $2"; return; }
	LAST_LOG=$LOG_DIR/run-$1.err
	timeout -s KILL $((T + GUARD_SLACK)) "$LKVM" run -k "$2" -c 2 -m 512 --timeout "$T" --root \
		--status-file "$LOG_DIR/run-$1.status" -- \
		sh -c 'nproc && busybox poweroff -f' </dev/null >"$LOG_DIR/run-$1.out" 2>"$LAST_LOG"
	LAST_STATUS=$?
	expect_status 0 || return
	expect_output "^lkvm: guest powered off" "lkvm's power-off line" || return
	[ "$(cat "$LOG_DIR/run-$1.out")" = 2 ] ||
		{ fail "nproc in the guest printed '$(head -c 100 "$LOG_DIR/run-$1.out")'"; return; }
	status_file "$LOG_DIR/run-$1.status" "ended=poweroff\nstatus=0\n"
}

# The project's kernel has no CONFIG_ACPI: its power-off halts, and with -- CMD lkvm ends the run
# as a power-off when the kernel says "reboot: System halted" (term.c), with 0, at once rather than
# at --timeout (124). As root without sudo, CMD runs as nobody, whose power-off is refused: CMD's
# own status (busybox's 1), the guest running on until CMD's report. docs/run.md says both.
t_halt() {
	cmd_run run-halt-nobody 1 -- busybox poweroff -f || return
	cmd_run run-halt 0 --root --status-file "$LOG_DIR/run-halt.status" -- busybox poweroff -f ||
		return
	expect_output '^lkvm: guest halted \(its kernel has no ACPI to power off with\)$' \
		"lkvm's halt line" || return
	status_file "$LOG_DIR/run-halt.status" "ended=poweroff\nstatus=0\n"
}

# ---- whose credentials serve the host's files (builtin/run-cmd.c: run_cmd_creds) ----

# with_creds_dir FUNC: FUNC with CREDS_DIR, a directory under /tmp open to all holding "open"
# (mode 0644) and "canary" (root's, 0600), removed after it.
with_creds_dir() {
	[ "$(id -u)" = 0 ] || { skip "needs root: the choice tested is a root lkvm's"; return; }
	CREDS_DIR=$(mktemp -d /tmp/lkvm-run-creds.XXXXXX) || { fail "mktemp -d under /tmp failed"; return; }
	if ! { chmod 755 "$CREDS_DIR" && echo open-data >"$CREDS_DIR/open" && chmod 644 "$CREDS_DIR/open" &&
		echo root-secret >"$CREDS_DIR/canary" && chmod 600 "$CREDS_DIR/canary"; }; then
		fail "cannot make the files in $CREDS_DIR"
		rm -rf "$CREDS_DIR"
		return
	fi
	"$@"
	local rc=$?
	rm -rf "$CREDS_DIR"
	return "$rc"
}

# root with no sudo user behind it: the command gets the host's files as nobody, and one line
# says so: it reads the file open to all, not root's; with --user root it reads root's.
t_creds_nobody() {
	unset SUDO_UID SUDO_GID SUDO_USER
	cmd_run run-creds-nobody 1 -- sh -c 'cat "$1/open" && id -u && cat "$1/canary"' sh "$CREDS_DIR" || return
	# The command runs as nobody too (id -u).
	[ "$(cat "$LOG_DIR/run-creds-nobody.out")" = "$(printf 'open-data\n%s' "$(id -u nobody)")" ] ||
		{ fail "the command printed '$(head -c 100 "$LOG_DIR/run-creds-nobody.out")'"; return; }
	expect_output "canary.*Permission denied" "the guest's refusal of root's file" || return
	[ "$(grep -c "as user nobody (--user root: as root)" "$LAST_LOG")" = 1 ] ||
		{ fail "not one line saying nobody serves the files: $(head -c 300 "$LAST_LOG" | tr '\n' '|')"; return; }
	cmd_run run-creds-root 0 --user root -- sh -c 'cat "$1/canary" && id -u' sh "$CREDS_DIR" || return
	[ "$(cat "$LOG_DIR/run-creds-root.out")" = "$(printf 'root-secret\n0')" ] ||
		{ fail "with --user root the command printed '$(head -c 100 "$LOG_DIR/run-creds-root.out")'"; return; }
	[ ! -s "$LAST_LOG" ] || fail "lkvm printed something with --user root: $(head -c 200 "$LAST_LOG")"
}

# free_ids N: N consecutive numbers from 47000 up that are neither a uid nor a gid here.
free_ids() {
	local first=47000 i
	for ((i = first; i < first + $1; i++)); do
		if getent passwd "$i" >/dev/null || getent group "$i" >/dev/null; then
			first=$((i + 1))
		fi
	done
	[ "$first" -lt 48000 ] && echo "$first"
}

# root through sudo: SUDO_UID, SUDO_GID and SUDO_USER of a user of the test's own (in a mount
# namespace whose /etc/passwd and /etc/group have it, and a group it is a member of): the command
# reads that user's file (0600) and its group's (0640), not root's, and what it writes to a
# --share is that user's on the host.
t_creds_sudo() {
	skip_unless_userspace || return
	need_kernel || return
	local d=$CREDS_DIR u g
	u=$(free_ids 2) || { skip "no two free ids from 47000"; return; }
	g=$((u + 1))
	if ! { { cat /etc/passwd && echo "lkvm-run-creds:x:$u:$u::/nonexistent:/bin/false"; } >"$d/passwd" &&
		{ cat /etc/group && echo "lkvm-run-creds:x:$u:" &&
			echo "lkvm-run-creds-g:x:$g:lkvm-run-creds"; } >"$d/group" &&
		echo user-data >"$d/user-only" && chown "$u:$u" "$d/user-only" && chmod 600 "$d/user-only" &&
		echo group-data >"$d/group-only" && chown "0:$g" "$d/group-only" && chmod 640 "$d/group-only" &&
		mkdir -m 755 "$d/rw" && chown "$u:$u" "$d/rw"; }; then
		fail "cannot make the user's files in $d"
		return
	fi
	LAST_LOG=$LOG_DIR/run-creds-sudo.err
	SUDO_UID=$u SUDO_GID=$u SUDO_USER=lkvm-run-creds timeout -s KILL $((T + GUARD_SLACK)) \
		unshare -m sh -c 'mount --bind "$1/passwd" /etc/passwd && mount --bind "$1/group" /etc/group &&
		shift && exec "$@"' sh "$d" "$LKVM" run -k "$G/bzImage" --timeout "$T" --share "$d/rw:/mnt/rw" -- \
		sh -c 'cat "$1/user-only" "$1/group-only" && echo out >/mnt/rw/out &&
		echo "$(id -u) $(id -g) $(id -G) $HOME $USER $LOGNAME" && cat "$1/canary"' sh "$d" \
		</dev/null >"$LOG_DIR/run-creds-sudo.out" 2>"$LAST_LOG"
	LAST_STATUS=$?
	expect_status 1 || return
	# The command runs as that user, with its groups and its passwd entry's HOME.
	[ "$(cat "$LOG_DIR/run-creds-sudo.out")" = "$(printf 'user-data\ngroup-data\n%s' \
		"$u $u $u $g /nonexistent lkvm-run-creds lkvm-run-creds")" ] ||
		{ fail "the command printed '$(head -c 100 "$LOG_DIR/run-creds-sudo.out")'"; return; }
	expect_output "canary.*Permission denied" "the guest's refusal of root's file" || return
	expect_no_output "as user nobody" || return
	[ "$(stat -c %u:%g "$d/rw/out" 2>&1)" = "$u:$u" ] ||
		fail "the file written to the share is $(stat -c %u:%g "$d/rw/out" 2>&1)'s, not $u:$u's"
}

# A non-root lkvm (user nobody through as-user.sh, in CREDS_DIR's copies): the command runs as
# that user (uid, gid, groups; lkvm's own HOME), what it writes in its directory (a --share) is
# that user's on the host, a write to its own file outside a share is copied up into the
# overlay, /tmp and a reopened /dev/stdout work (--root: run-reset).
t_user() {
	skip_unless_userspace || return
	need_kernel || return
	local d=$CREDS_DIR u out
	u=$(id -u nobody 2>/dev/null) || { skip "no user nobody"; return; }
	copy_for_others "$d/bin" "$LKVM" "$G/bzImage" || return
	if ! { mkdir -p "$d/kvm-node" "$d/cwd" "$d/own" && mkdir -m 700 "$d/rt" &&
		echo host >"$d/own/file" && chown -R "$u:$u" "$d/cwd" "$d/own" "$d/rt"; }; then
		fail "cannot make the user's files in $d"
		return
	fi
	LAST_LOG=$LOG_DIR/run-user.err
	(cd "$d/cwd" && HOME=/lkvm-test-home timeout -s KILL $((T + GUARD_SLACK)) \
		"$REPO_ROOT/tests/integration/as-user.sh" "$d/kvm-node" "$u" env LKVM_RUNTIME_DIR="$d/rt" \
		"$d/bin/${LKVM##*/}" run -k "$d/bin/bzImage" --timeout "$T" --share "$d/cwd" -- \
		sh -c 'echo "$(id -u) $(id -g) $(id -G) $HOME" && echo guest >new &&
		echo more >>"$1/own/file" && cat "$1/own/file" && echo tmp >/tmp/lkvm-run-user &&
		cat /tmp/lkvm-run-user && echo reopened >/dev/stdout' sh "$d" \
		</dev/null >"$LOG_DIR/run-user.out" 2>"$LAST_LOG")
	LAST_STATUS=$?
	expect_status 0 || return
	out=$(printf '%s\nhost\nmore\ntmp\nreopened' "$u $u $u /lkvm-test-home")
	[ "$(cat "$LOG_DIR/run-user.out")" = "$out" ] ||
		{ fail "the command printed '$(head -c 300 "$LOG_DIR/run-user.out" | tr '\n' '|')'"; return; }
	[ "$(stat -c %u:%g "$d/cwd/new" 2>&1)" = "$u:$u" ] ||
		{ fail "the file written to the share is $(stat -c %u:%g "$d/cwd/new" 2>&1)'s, not $u:$u's"; return; }
	[ "$(cat "$d/own/file")" = host ] || fail "the overlay's copy-up reached the host"
}

# A SUDO_UID that is not a number: one line, before anything is built.
t_creds_bad_sudo() {
	skip_unless_userspace || return
	need_kernel || return
	SUDO_UID=12x run_lkvm run-creds-bad-sudo 1 -- run -k "$G/bzImage" -- true || return
	one_error_line "SUDO_UID '12x' is not a uid \(digits only\): unset it, or give --user USER"
}

# A PVM host cannot run guest user space: one error line at once, naming the way out.
# Issue 39: a guest that walks a large tree (Linux's 9p client keeps one fid per cached dentry)
# over the host root, with CI containers' descriptor limits (soft 1024, hard 4096), sees every
# file: fids cost lkvm memory, not descriptors (before, each fid held one or two descriptors and
# the guest's find got ENFILE past about 2000 of them). The guest's `find -xdev` counts what the
# host's counts (here, where lkvm runs), its tar of the tree is as long as the host's, and
# nothing says "Too many open files" (ENFILE, EMFILE) or has lkvm warn of a bound. The tree is
# made here, MANY_FILES files (default 2500: past the old bound, and within what the emulated
# host serves in minutes: about 50 9P requests a second there, so /usr's 150000 names would take
# hours).
MANY_FILES=${MANY_FILES:-2500}
t_many_files() {
	skip_unless_userspace || return
	need_kernel || return
	local log=run-many-files tree=$WORK/many want got d
	(ulimit -Sn 1024 && ulimit -Hn 4096) 2>/dev/null ||
		{ skip "cannot set RLIMIT_NOFILE to 1024/4096 here"; return; }
	rm -rf "$tree"
	for ((d = 0; d < MANY_FILES / 50; d++)); do
		mkdir -p "$tree/d$d"
		(cd "$tree/d$d" && for ((i = 0; i < 50; i++)); do echo "$d.$i" >"f$i"; done)
	done
	want=$(
		find "$tree" -xdev | wc -l
		tar cf - -C "$WORK" many | wc -c
	)
	LAST_LOG=$LOG_DIR/$log.err
	printf '$ ulimit -Sn 1024; ulimit -Hn 4096; %s run -k %s --user root -- sh -c ...\n' "$LKVM" "$G/bzImage" >"$LOG_DIR/$log.cmd"
	(
		ulimit -Sn 1024 && ulimit -Hn 4096 || exit 98
		exec timeout -s KILL $((2 * T + GUARD_SLACK)) "$LKVM" run -k "$G/bzImage" --timeout $((2 * T)) \
			--user root --stats -- sh -c 'find "$1/many" -xdev | wc -l; tar cf - -C "$1" many | wc -c' sh "$WORK"
	) </dev/null >"$LOG_DIR/$log.out" 2>"$LAST_LOG"
	LAST_STATUS=$?
	expect_status 0 || return
	got=$(cat "$LOG_DIR/$log.out")
	[ "$got" = "$want" ] ||
		{ fail "the guest counted '${got//$'\n'/ }' (find's names, tar's bytes), the host '${want//$'\n'/ }'"; return; }
	! grep -qi 'too many open files' "$LOG_DIR/$log.out" "$LAST_LOG" ||
		{ fail "$(grep -hi -m1 'too many open files' "$LOG_DIR/$log.out" "$LAST_LOG")"; return; }
	! grep -q '^lkvm: warning: share ' "$LAST_LOG" || { fail "$(grep -m1 '^lkvm: warning: share ' "$LAST_LOG")"; return; }
	rm -rf "$tree"
}

t_pvm() {
	is_pvm_host || { skip "not a PVM host (the refusal is for kvm_pvm)"; return; }
	run_lkvm run-pvm 1 -- run -- true || return
	one_error_line "this host's KVM is kvm_pvm, .*scripts/kvm-host.sh --emulated.*"
}

# RUN_TESTS: the tests to run, by name without "run-" (default: all but pvm-refusal).
RUN_TESTS=${RUN_TESTS:-status-0 status-1 status-7 status-255 signal not-found init-failed stdio output pipe root-write root-read shares fs-virtiofs fs-9p fs-only shell panic fail-on fail-on-finish reset sigpipe timeout two debian no9p modules poweroff poweroff-pvh halt creds-nobody creds-sudo creds-bad-sudo user many-files}
skip_unless_kvm
for name in $RUN_TESTS; do
	case $name in
	status-*) run_test "run-$name" t_status "${name#status-}" ;;
	pvm-refusal) run_test run-pvm-refusal t_pvm ;;
	fail-on) run_test run-fail-on t_fail_on first ;;
	fail-on-finish) run_test run-fail-on-finish t_fail_on finish ;;
	creds-nobody | creds-sudo | user) run_test "run-$name" with_creds_dir "t_${name//-/_}" ;;
	creds-bad-sudo) run_test "run-$name" t_creds_bad_sudo ;;
	poweroff) run_test run-poweroff t_poweroff poweroff "$DEBIAN_BOOT/vmlinuz-$(uname -r)" ;;
	poweroff-pvh) run_test run-poweroff-pvh t_poweroff poweroff-pvh "${DEBIAN_BOOT%/boot}/vmlinux" ;;
	root-write | root-read | not-found | init-failed | many-files) run_test "run-$name" "t_${name//-/_}" ;;
	fs-virtiofs | fs-9p | fs-only) run_test "run-$name" t_fs "${name#fs-}" ;;
	signal | stdio | output | pipe | shares | shell | panic | reset | sigpipe | timeout | two | debian | no9p | modules | halt)
		run_test "run-$name" "t_$name" ;;
	*) echo "test-run.sh: unknown test '$name' in RUN_TESTS" >&2; exit 2 ;;
	esac
done
finish_tests

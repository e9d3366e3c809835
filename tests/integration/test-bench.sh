#!/usr/bin/env bash
# Runs `lkvm bench net` in a short mode (1 s a cell, 64-byte frames, every default mode and test) and checks that its rows and charts are sane, and that no cell beats its floor on a quiet host: never its speed.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=bench
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

MODES=${BENCH_MODES:-ioeventfd,trap,timer,poll}
TESTS=tx,rr,rx
SIZES=64
OUT=$LOG_DIR/bench
JSON=$OUT/bench.json
SVG=$OUT/bench.svg
SVG_CPU=$OUT/bench-cpu.svg
# Where lkvm has -n batch=, every mode runs with batch=on (MODE) and batch=off (MODE/nobatch).
BATCHES=1
LKVM_MODES=$MODES
if "$LKVM" run --help 2>/dev/null | grep -q ' batch='; then
	BATCHES=2
	LKVM_MODES=$MODES,$(sed 's|,|/nobatch,|g; s|$|/nobatch|' <<<"$MODES")
fi
CELLS=$(($(tr ',' '\n' <<<"$MODES" | wc -l) * 3 * BATCHES))
FLOORS=5 # notify ioeventfd and trap, tap write, tap read, peer echo (one size)
# --qemu where QEMU is installed: its two notify floors and four modes per test, or one line
# saying why it could not run (then no QEMU rows).
QEMU_MODES="qemu/bh qemu/bh-trap qemu/timer qemu/timer-trap"
QEMU=()
command -v qemu-system-x86_64 >/dev/null 2>&1 && QEMU=(--qemu)

BENCH_SKIP=""
if [ ! -c /dev/net/tun ]; then
	BENCH_SKIP="/dev/net/tun missing"
elif command -v unshare >/dev/null 2>&1 && ! unshare -n true 2>/dev/null; then
	BENCH_SKIP="cannot create a network namespace (unshare -n)"
fi
# Built by the project: missing is a failure.
[ -x "$REPO_ROOT/build/tools/net-peer" ] && [ -f "$GUEST_DIR/net-bench.elf" ] ||
	fail_all "net-peer or net-bench.elf not built (make tools guests)"

# jv KEY ROW: a field of one JSON row (the bench writes one row per line).
jv() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" <<<"$2" | tr -d '"'; }
# rows MODE TEST: the JSON rows of that cell.
rows() { grep "\"mode\":\"$1\",\"test\":\"$2\"" "$JSON"; }
# qemu_ran: the run was asked for QEMU rows and QEMU could run here.
qemu_ran() { [ ${#QEMU[@]} -gt 0 ] && grep -q '"qemu":"ran"' "$JSON" 2>/dev/null; }
need_run() {
	[ -z "$BENCH_SKIP" ] || { skip "$BENCH_SKIP"; return 1; }
	[ -s "$JSON" ] || { fail "the bench run wrote no $JSON"; return 1; }
}

t_run() {
	[ -z "$BENCH_SKIP" ] || { skip "$BENCH_SKIP"; return; }
	rm -rf "$OUT"
	mkdir -p "$OUT"
	GUARD_DEFAULT=900 run_lkvm bench 0 -- bench net --modes "$MODES" --tests $TESTS --sizes $SIZES \
		--duration 1 --json "$JSON" --log-dir "$OUT/cells" --svg "$SVG" "${QEMU[@]}" || return
	expect_output '^mode +test +size +Kpps +Mb/s +RTTmed_us +RTTp99_us +trans/s +exits/pkt +kicks/pkt +irqs/pkt +pkts/kick +x_floor +cpu +host_ns +floor_ns +other$' \
		"the table header" || return
	local want=$((CELLS + FLOORS))
	qemu_ran && want=$((want + 2 + 4 * 3))
	expect_output "^bench: \[ *$want/$want\] " "a progress line per row" || return
	expect_no_output 'FAILED' "a failed cell" || return
	grep -q '<svg' "$SVG" && grep -q '<svg' "$SVG_CPU" || fail "no SVG charts in $SVG and $SVG_CPU"
}

# Every requested cell and floor has exactly one row in the table and in the JSON, and each is ok.
t_rows() {
	need_run || return
	local m t n
	for m in ${LKVM_MODES//,/ }; do
		for t in ${TESTS//,/ }; do
			n=$(grep -cE "^$m +$t +$SIZES " "$LOG_DIR/bench.log")
			[ "$n" = 1 ] || { fail "table has $n rows for $m $t $SIZES"; return; }
			n=$(rows "$m" "$t" | grep -c "\"size\":$SIZES,\"floor\":false,\"ok\":true")
			[ "$n" = 1 ] || { fail "JSON has $n ok rows for $m $t $SIZES"; return; }
		done
	done
	for m in floor/ioeventfd:notify floor/trap:notify floor/tap:tx floor/tap:rx floor/peer:rr; do
		n=$(rows "${m%:*}" "${m#*:}" | grep -c '"floor":true,"ok":true')
		[ "$n" = 1 ] || { fail "JSON has $n ok rows for the floor $m"; return; }
	done
	local want=$((CELLS + FLOORS))
	if qemu_ran; then
		want=$((want + 2 + 4 * 3))
		for m in $QEMU_MODES; do
			for t in ${TESTS//,/ }; do
				n=$(rows "$m" "$t" | grep -c "\"size\":$SIZES,\"floor\":false,\"ok\":true,\"vmm\":\"qemu\"")
				[ "$n" = 1 ] || { fail "JSON has $n ok rows for $m $t $SIZES"; return; }
			done
		done
		for m in qemu/floor/ioeventfd qemu/floor/trap; do
			n=$(rows "$m" notify | grep -c '"floor":true,"ok":true,"vmm":"qemu"')
			[ "$n" = 1 ] || { fail "JSON has $n ok rows for the floor $m"; return; }
		done
	fi
	n=$(grep -c '^{"mode"' "$JSON")
	[ "$n" = "$want" ] || fail "JSON has $n rows, want $want"
}

# --qemu: QEMU ran and produced its rows, or the table says in one line why it could not.
t_qemu() {
	need_run || return
	if [ ${#QEMU[@]} = 0 ]; then
		fail "qemu-system-x86_64 is not installed (scripts/deps.sh bench installs it)"
		return
	fi
	if ! qemu_ran; then
		expect_output '^# qemu: ' "the line saying why QEMU did not run" || return
		skip "QEMU could not run the guest here: $(grep -m1 '^# qemu: ' "$LOG_DIR/bench.log")"
		return
	fi
	# QEMU has no device counters: null, never a number pretending to be one.
	local r m g tap pf pd n lost
	r=$(rows qemu/bh tx)
	[ "$(jv vcpu_exits "$r")" = null ] && [ "$(jv dev_tx_packets "$r")" = null ] ||
		{ fail "qemu/bh tx: device counters should be null: $r"; return; }
	for m in $QEMU_MODES; do
		# tx: every frame the guest sent reached the tap, and the peer counted or dropped it.
		r=$(rows "$m" tx)
		g=$(jv guest_frames "$r"); tap=$(jv tap_rx "$r"); pf=$(jv peer_frames "$r"); pd=$(jv peer_drops "$r")
		[ "${g:-0}" -gt 0 ] || { fail "$m tx: the guest sent nothing"; return; }
		[ "$tap" = "$g" ] || { fail "$m tx: tap received $tap, guest sent $g"; return; }
		[ $((pf + pd)) = "$tap" ] || { fail "$m tx: peer counted $pf + $pd dropped, tap received $tap"; return; }
		# rr: the peer echoed each transaction and each lost one.
		r=$(rows "$m" rr)
		n=$(jv guest_frames "$r"); lost=$(jv lost "$r"); pf=$(jv peer_frames "$r")
		[ "${n:-0}" -gt 0 ] || { fail "$m rr: no transactions"; return; }
		[ "$pf" = $((n + lost)) ] || { fail "$m rr: peer echoed $pf for $n transactions + $lost lost"; return; }
		# rx: the guest counted no more than the tap handed over.
		r=$(rows "$m" rx)
		g=$(jv guest_frames "$r"); tap=$(jv tap_tx "$r")
		[ "${g:-0}" -gt 0 ] && [ "$g" -le "$tap" ] || { fail "$m rx: guest counted $g, tap handed over $tap"; return; }
	done
	grep -qE '^qemu/bh +tx +64 +[0-9]' "$LOG_DIR/bench.log" || fail "no qemu/bh row in the table"
}

t_json() {
	need_run || return
	# Every figure says where it was measured (emulated-svm: under QEMU's TCG).
	grep -q "\"host\":\"$(host_kind)\",\"emulated\":$([ "$(host_kind)" = emulated-svm ] && echo true || echo false)," "$JSON" ||
		{ fail "JSON does not name the host $(host_kind)"; return; }
	grep -q "^# host: $(host_kind)" "$LOG_DIR/bench.log" || { fail "the table does not name the host $(host_kind)"; return; }
	# The rr breakdown's columns are in every row; only lkvm's rr rows (with -n trace=) may
	# fill them: QEMU's, the floors' and tx and rx rows have none.
	local n
	n=$(grep -c '"mode"' "$JSON")
	[ "$(grep -c '"stage_notice_p99_ns":[^,]*,"trace_transactions":' "$JSON")" = "$n" ] ||
		{ fail "a JSON row without the stage columns"; return; }
	grep '"mode"' "$JSON" | grep -v '"test":"rr",.*"vmm":"lkvm"' | grep -v '"trace_transactions":null,' &&
		{ fail "a row other than lkvm's rr with trace figures"; return; }
	if command -v python3 >/dev/null 2>&1; then
		python3 -m json.tool "$JSON" >/dev/null 2>"$OUT/json.err" || fail "python3 cannot parse $JSON: $(head -c 200 "$OUT/json.err")"
		return
	fi
	# Without python3: the shape the bench writes (one object a line, balanced braces, no NaN).
	head -n 1 "$JSON" | grep -q '^{"duration":[0-9]*,"tap":"[^"]*","host":"[^"]*","emulated":[a-z]*,"rows":\[$' || { fail "JSON header"; return; }
	[ "$(tail -n 1 "$JSON")" = ']}' ] || { fail "JSON does not end with ]}"; return; }
	grep -v '^{"mode":"[^"]*",.*}[,]\?$' "$JSON" | grep -vq '^\({"duration".*\|]}\)$' && { fail "a malformed JSON row"; return; }
	! grep -qiE ':(nan|inf|-nan)[,}]' "$JSON" || fail "NaN or inf in the JSON"
}

# tx: what the guest sent, minus the device's drops, is what the device sent, what the tap
# received, and what the peer counted plus what its socket dropped.
t_tx_frames() {
	need_run || return
	local m r g tx txd tap pf pd
	for m in ${LKVM_MODES//,/ }; do
		r=$(rows "$m" tx)
		g=$(jv guest_frames "$r"); tx=$(jv dev_tx_packets "$r"); txd=$(jv dev_tx_drops "$r")
		tap=$(jv tap_rx "$r"); pf=$(jv peer_frames "$r"); pd=$(jv peer_drops "$r")
		[ "${g:-0}" -gt 0 ] || { fail "$m tx: the guest sent nothing"; return; }
		[ "$tx" = $((g - txd)) ] || { fail "$m tx: device sent $tx, guest $g, device drops $txd"; return; }
		[ "$tap" = "$tx" ] || { fail "$m tx: tap received $tap, device sent $tx"; return; }
		[ $((pf + pd)) = "$tx" ] || { fail "$m tx: peer counted $pf + $pd dropped, device sent $tx"; return; }
	done
}

# rr: every transaction is one frame each way; a lost one went out but did not come back.
t_rr_frames() {
	need_run || return
	local m r n lost pf tx rx
	for m in ${LKVM_MODES//,/ }; do
		r=$(rows "$m" rr)
		n=$(jv guest_frames "$r"); lost=$(jv lost "$r"); pf=$(jv peer_frames "$r")
		tx=$(jv dev_tx_packets "$r"); rx=$(jv dev_rx_packets "$r")
		[ "${n:-0}" -gt 0 ] || { fail "$m rr: no transactions"; return; }
		[ "$pf" = $((n + lost)) ] || { fail "$m rr: peer echoed $pf for $n transactions + $lost lost"; return; }
		[ "$tx" = "$pf" ] || { fail "$m rr: device sent $tx, peer saw $pf"; return; }
		[ "$rx" -ge "$n" ] || { fail "$m rr: device delivered $rx < $n echoes"; return; }
		[ "$(jv rtt_median_us "$r" | cut -d. -f1)" != "" ] || { fail "$m rr: no RTT"; return; }
	done
	r=$(rows floor/peer rr)
	[ "$(jv peer_frames "$r")" = $(($(jv guest_frames "$r") + $(jv lost "$r"))) ] ||
		fail "peer echo floor: peer echoed $(jv peer_frames "$r"), $(jv guest_frames "$r") came back + $(jv lost "$r") lost"
}

# rx: the device delivered exactly what the tap handed it; the guest counted no more than that;
# the tap handed over or dropped no more than the peer sent (the rest was in flight at the end).
t_rx_frames() {
	need_run || return
	local m r g rx tap tapd pf
	for m in ${LKVM_MODES//,/ }; do
		r=$(rows "$m" rx)
		g=$(jv guest_frames "$r"); rx=$(jv dev_rx_packets "$r"); tap=$(jv tap_tx "$r")
		tapd=$(jv tap_tx_drops "$r"); pf=$(jv peer_frames "$r")
		[ "${g:-0}" -gt 0 ] || { fail "$m rx: the guest received nothing (peer sent $pf)"; return; }
		[ "$rx" = "$tap" ] || { fail "$m rx: device delivered $rx, tap handed over $tap"; return; }
		[ "$g" -le "$rx" ] || { fail "$m rx: guest counted $g > device delivered $rx"; return; }
		[ $((tap + tapd)) -le "$pf" ] || { fail "$m rx: tap passed $tap + dropped $tapd > peer sent $pf"; return; }
	done
}

# The device counters agree with the packets and the mode: trapped exits only where notifies
# trap (and then every kick is one), poll windows only with tx=poll.
t_counters() {
	need_run || return
	local m t r pk tx rx kicks trapped exits polls hits
	for m in ${LKVM_MODES//,/ }; do
		for t in ${TESTS//,/ }; do
			r=$(rows "$m" "$t")
			pk=$(jv packets "$r"); tx=$(jv dev_tx_packets "$r"); rx=$(jv dev_rx_packets "$r")
			kicks=$(jv kicks "$r"); trapped=$(jv trapped "$r"); exits=$(jv vcpu_exits "$r")
			polls=$(jv polls "$r"); hits=$(jv poll_hits "$r")
			[ "$pk" = $((tx + rx)) ] || { fail "$m $t: packets $pk != tx $tx + rx $rx"; return; }
			case $m in
			*trap*)
				[ "$trapped" -gt 0 ] && [ "$trapped" = "$kicks" ] ||
					{ fail "$m $t: $trapped trapped of $kicks kicks (want all, and some)"; return; } ;;
			*)
				[ "$trapped" = 0 ] || { fail "$m $t: $trapped trapped exits without trapping"; return; } ;;
			esac
			[ "$exits" -ge "$trapped" ] || { fail "$m $t: $exits vCPU exits < $trapped trapped"; return; }
			[ "$hits" -le "$polls" ] || { fail "$m $t: $hits poll hits > $polls polls"; return; }
			case $m in
			poll*) [ "$t" = rx ] || [ "$polls" -gt 0 ] || { fail "$m $t: no poll windows"; return; } ;;
			*) [ "$polls" = 0 ] || { fail "$m $t: $polls poll windows without tx=poll"; return; } ;;
			esac
		done
	done
	# The notify floors: one kick per notify, trapped only when trapping.
	for m in ioeventfd trap; do
		r=$(rows "floor/$m" notify)
		[ "$(jv kicks "$r")" = "$(jv guest_frames "$r")" ] ||
			{ fail "notify floor $m: $(jv kicks "$r") kicks for $(jv guest_frames "$r") notifies"; return; }
	done
	[ "$(jv trapped "$(rows floor/trap notify)")" = "$(jv guest_frames "$(rows floor/trap notify)")" ] ||
		{ fail "notify floor trap: not every notify trapped"; return; }
	[ "$(jv trapped "$(rows floor/ioeventfd notify)")" = 0 ] || fail "notify floor ioeventfd: trapped exits"
}

# Load and host CPU: every row says what other processes took while it ran (busy exactly when
# over 0.10 cores); every cell and host floor has a host CPU per packet (a cell that moved
# packets ran its device threads: > 0 in ns, however short or loaded), and each cell carries
# its floor's beside its own. Where this kernel has schedstat no row was read in clock ticks
# (10 ms: a 1 s cell's few ms of host CPU read 0 there, a failure only under load).
t_cpu() {
	need_run || return
	local m t r h v o busy f fh ns=false
	[ -e /proc/self/schedstat ] && ns=true
	while read -r r; do
		m=$(jv mode "$r"); t=$(jv test "$r"); o=$(jv other_cpu "$r"); busy=$(jv busy "$r")
		[ "$ns" = false ] || [ "$(jv cpu_ticks "$r")" = false ] ||
			{ fail "$m $t: cpu_ticks '$(jv cpu_ticks "$r")' on a kernel with schedstat"; return; }
		[ -n "$o" ] && [ "$o" != null ] || { fail "$m $t: no other_cpu"; return; }
		[ "$busy" = "$(awk -v o="$o" 'BEGIN { print (o > 0.10) ? "true" : "false" }')" ] ||
			{ fail "$m $t: busy=$busy with other_cpu $o"; return; }
		[ "$t" = notify ] && continue
		h=$(jv host_ns_per_pkt "$r"); v=$(jv vcpu_ns_per_pkt "$r")
		awk -v h="$h" 'BEGIN { exit !(h > 0) }' || { fail "$m $t: host CPU per packet '$h'"; return; }
		[ "$(jv floor "$r")" = true ] && continue
		awk -v v="$v" 'BEGIN { exit !(v > 0) }' || { fail "$m $t: vCPU CPU per packet '$v'"; return; }
		f=$([ "$t" = rr ] && echo floor/peer || echo floor/tap)
		fh=$(jv host_ns_per_pkt "$(rows "$f" "$t")")
		[ "$(jv floor_ns_per_pkt "$r")" = "$fh" ] ||
			{ fail "$m $t: floor_ns_per_pkt $(jv floor_ns_per_pkt "$r"), the floor's is $fh"; return; }
	done < <(grep '^{"mode"' "$JSON" | grep '"ok":true')
	grep -qE '^# \*: other processes' "$LOG_DIR/bench.log" || ! grep -q '"busy":true' "$JSON" ||
		fail "busy rows but no note under the table"
}

# No cell beats its floor by more than the noise (x_floor < 0.9 for rr, > 1/0.9 for tx and rx):
# that would mean the floor measures something else. Rows taken on a busy host (theirs or
# their floor's other_cpu over 0.10 cores) are no evidence either way: then a skip says so.
t_floors() {
	need_run || return
	local r m t f loaded=""
	while read -r r; do
		m=$(jv mode "$r"); t=$(jv test "$r")
		f=$([ "$t" = rr ] && echo floor/peer || echo floor/tap)
		if [ "$(jv busy "$r")" = true ] || [ "$(jv busy "$(rows "$f" "$t")")" = true ]; then
			loaded="$loaded $m/$t (x_floor $(jv x_floor "$r"))"
			continue
		fi
		fail "$m $t beats its floor on a quiet host: x_floor $(jv x_floor "$r") ($r)"
		return
	done < <(grep '"beats_floor":true' "$JSON")
	[ -z "$loaded" ] || skip "cells beat their floor only while the host was busy:$loaded"
}

# The charts: a panel per test with the floor's line at the floor's figure, a bar per cell at
# its figure (Kpps, RTT median, host ns per packet), lkvm and QEMU in different colours, no
# label turned; and the PNG that rsvg-convert makes of each (build/logs/.../bench/*.png: look).
t_chart() {
	need_run || return
	command -v python3 >/dev/null 2>&1 || { skip "python3 missing (scripts/deps.sh bench)"; return; }
	python3 - "$JSON" "$SVG" "$SVG_CPU" >"$OUT/chart.out" 2>&1 <<'PY' || { fail "$(tail -n 3 "$OUT/chart.out")"; return; }
import json, sys, xml.etree.ElementTree as ET
rows = [r for r in json.load(open(sys.argv[1]))["rows"] if r["ok"]]
N = "{http://www.w3.org/2000/svg}"
def fig(r, cpu):
    if cpu:
        return r["host_ns_per_pkt"]
    return r["rtt_median_us"] if r["test"] == "rr" else r["pps"] / 1000
for path, cpu in ((sys.argv[2], False), (sys.argv[3], True)):
    svg = ET.parse(path).getroot()
    assert "rotate" not in open(path).read(), f"{path}: a label turned sideways"
    panels = {p.get("data-test"): p for p in svg.iter(N + "g") if p.get("class") == "panel"}
    assert sorted(panels) == ["rr", "rx", "tx"], f"{path}: panels {sorted(panels)}"
    for test, p in panels.items():
        floor = [r for r in rows if r["floor"] and r["test"] == test]
        lines = [l for l in p.iter(N + "line") if l.get("class") == "floor"]
        assert len(lines) == 1 and abs(float(lines[0].get("data-value")) - fig(floor[0], cpu)) < 0.01, \
            f"{path} {test}: floor line {[l.get('data-value') for l in lines]} for {fig(floor[0], cpu)}"
        cells = {r["mode"]: r for r in rows if not r["floor"] and r["test"] == test}
        bars = {b.get("data-mode"): b for b in p.iter(N + "rect") if b.get("class") == "bar"}
        assert sorted(bars) == sorted(cells), f"{path} {test}: bars {sorted(bars)} for cells {sorted(cells)}"
        for m, b in bars.items():
            assert abs(float(b.get("data-value")) - fig(cells[m], cpu)) < 0.01, f"{path} {test} {m}: bar"
            assert float(b.get("height")) >= 0
        fills = {b.get("data-vmm"): set() for b in bars.values()}
        for b in bars.values():
            fills[b.get("data-vmm")].add(b.get("fill"))
        if "qemu" in fills:
            assert not fills["qemu"] & fills["lkvm"], f"{path} {test}: lkvm and QEMU share a colour"
        values = [t for t in p.iter(N + "text") if t.get("class") == "value"]
        assert len(values) == len(bars), f"{path} {test}: {len(values)} values on {len(bars)} bars"
print("charts agree with the JSON")
PY
	command -v rsvg-convert >/dev/null 2>&1 ||
		{ skip "rsvg-convert missing (scripts/deps.sh bench installs librsvg2-bin)"; return; }
	local s
	for s in "$SVG" "$SVG_CPU"; do
		rsvg-convert -o "${s%.svg}.png" "$s" 2>"$OUT/rsvg.err" && [ -s "${s%.svg}.png" ] ||
			{ fail "rsvg-convert $s: $(head -c 200 "$OUT/rsvg.err")"; return; }
		[ "$(head -c 8 "${s%.svg}.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
			{ fail "${s%.svg}.png is not a PNG"; return; }
	done
}

t_usage() {
	run_lkvm bench-help 0 -- bench net --help || return
	local o
	for o in --modes --tests --sizes --batch --duration --qemu --json --svg host_ns floor_ns other \
		ioeventfd trap timer poll vhost qemu/bh qemu/timer-trap qemu/vhost /dev/vhost-net; do
		grep -q -- "$o" "$LAST_LOG" || { fail "bench net --help does not mention $o"; return; }
	done
	run_lkvm bench-list 0 -- help || return
	expect_output '^  bench ' "bench in lkvm help" || return
	run_lkvm bench-bad-mode 1 -- bench net --modes ioeventfd,fast || return
	expect_output "^lkvm: error: bench: --modes: 'fast' is not valid" || return
	run_lkvm bench-bad-size 1 -- bench net --sizes 64,20 || return
	expect_output "^lkvm: error: bench: --sizes: '20' is not valid" || return
	run_lkvm bench-bad-duration 1 -- bench net --duration 0 || return
	expect_output "^lkvm: error: bench: --duration '0'" || return
	run_lkvm bench-unknown 1 -- bench disk || return
	expect_output "unknown benchmark 'disk'"
}

# --modes vhost where /dev/vhost-net cannot be opened: one line says why, no vhost row runs, the
# JSON says so too, and the rest of the run (its floors) is whole. Where it opens, vhost runs.
t_vhost() {
	[ -z "$BENCH_SKIP" ] || { skip "$BENCH_SKIP"; return; }
	[ -e /dev/vhost-net ] &&
		{ skip "/dev/vhost-net exists here: vhost rows run"; return; }
	local json=$OUT/vhost.json
	mkdir -p "$OUT"
	GUARD_DEFAULT=300 run_lkvm bench-vhost 0 -- bench net --modes vhost --tests tx --sizes 64 \
		--duration 1 --json "$json" || return
	local n
	n=$(grep -c '^# vhost: not run: cannot open /dev/vhost-net: .* (modprobe vhost_net)$' "$LAST_LOG")
	[ "$n" = 1 ] || { fail "want one '# vhost: not run' line, got $n"; return; }
	expect_no_output '^(qemu/)?vhost +' "a vhost row" || return
	expect_output '^floor/tap +tx +64 +[0-9]' "the tx floor" || return
	expect_output '^bench: \[ *3/3\] ' "the progress count without vhost cells" || return
	grep -q '"vhost":"not run: cannot open /dev/vhost-net: ' "$json" ||
		fail "the JSON does not say why vhost did not run"
}

# SIGINT in the middle of a cell: exit 130, the rows so far printed, no lkvm or net-peer left.
t_interrupt() {
	[ -z "$BENCH_SKIP" ] || { skip "$BENCH_SKIP"; return; }
	local tag=$OUT/int-$$ log=$LOG_DIR/bench-interrupt.log i pid st
	mkdir -p "$OUT"
	cp "$GUEST_DIR/net-bench.elf" "$tag.elf" && cp "$REPO_ROOT/build/tools/net-peer" "$tag.peer" || { fail "copy"; return; }
	LAST_LOG=$log
	"$LKVM" bench net --modes poll --tests rr --sizes 64 --duration 2 --guest "$tag.elf" --peer "$tag.peer" \
		</dev/null >"$log" 2>&1 &
	pid=$!
	# Wait for the first row, then for the lkvm of the second (the trapped notify floor).
	for ((i = 0; i < 300; i++)); do
		grep -q '\[ 1/' "$log" && pgrep -f "run -k $tag.elf" >/dev/null && break
		sleep 0.1
	done
	kill -INT "$pid"
	wait "$pid"
	st=$?
	[ "$st" = 130 ] || { fail "exit status $st after SIGINT, want 130"; return; }
	expect_output 'bench: interrupted after' || return
	expect_output '^floor/ioeventfd +notify +0 +[0-9]' "the row measured before the signal" || return
	for ((i = 0; i < 50; i++)); do
		pgrep -f "$tag" >/dev/null || break
		sleep 0.1
	done
	pgrep -f "$tag" >/dev/null && { fail "processes left: $(pgrep -af "$tag" | head -c 200)"; return; }
	rm -f "$tag.elf" "$tag.peer"
}

skip_unless_kvm
run_test_serial bench-run t_run
run_test bench-rows t_rows
run_test bench-json t_json
run_test bench-tx-frames t_tx_frames
run_test bench-rr-frames t_rr_frames
run_test bench-rx-frames t_rx_frames
run_test bench-counters t_counters
run_test bench-cpu t_cpu
run_test bench-floors t_floors
run_test bench-chart t_chart
run_test bench-qemu t_qemu
run_test bench-usage t_usage
run_test_serial bench-vhost t_vhost
run_test_serial bench-interrupt t_interrupt
finish_tests

#!/usr/bin/env bash
# Times the host's files in a guest: lkvm on 9p, lkvm on virtio-fs and virtme-ng's vng, alternating, medians.
#
# Usage: scripts/vs-fs.sh [-n RUNS] [-k KERNEL] [--vng PATH] [--vng-fs 9p|virtiofs] [--lkvm PATH]
#                         [--before PATH]
#   -n RUNS      boots of each kind, alternating (default 3)
#   -k KERNEL    the kernel every tool boots (default as scripts/vs-vng.sh: /boot/vmlinuz-$(uname -r),
#                else the emulated host's Debian kernel under build/kvm-host/kernel/boot)
#   --vng PATH   vng to run (default: vng on PATH; none: lkvm's columns only)
#   --vng-fs FS  vng's root: 9p (--force-9p, as vs-vng.sh) or virtiofs (needs virtiofsd; default)
#   --lkvm PATH  lkvm to run (default: ./lkvm of this checkout)
#   --before PATH  an older lkvm (9p only, as it was) in the same alternation, its own column
# Every tool: 1024 MiB, 1 vCPU, the host's / as the root, a read-write share of
# build/vs-fs/rw. One boot per tool and run does every row, each timed in the guest (date +%s%N
# around it) and checked against the host's own figure:
#   find     `find /usr -xdev | wc -l`: the count must be the host's
#   tar      `tar cf - /usr/include | wc -c`: the bytes must be the host's
#   git1/2   `git status --porcelain | wc -l` twice on build/vs-fs/linux (the unpacked
#            linux-source, about 80,000 files, committed once on the host): 0 lines both times
#   cc       `gcc -c` of a file including 30 system headers, in the share
#   make     `make -j1` of 10 small C files and a link, in the share (made clean first)
#   sha      `sha256sum` of a 64 MiB file under build/vs-fs/: the host's digest
# Where guest user space runs: a VMX/SVM host, or scripts/kvm-host.sh --emulated --mem 2048 --.
# A tool, not a test: exit 0 unless a boot of lkvm failed or a row's check failed for lkvm.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
runs=3 kernel= vng= vng_fs=virtiofs lkvm=$here/lkvm before=
usage() { sed -n '4,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	-n) [ $# -ge 2 ] || usage; runs=$2; shift 2 ;;
	-k) [ $# -ge 2 ] || usage; kernel=$2; shift 2 ;;
	--vng) [ $# -ge 2 ] || usage; vng=$2; shift 2 ;;
	--vng-fs) [ $# -ge 2 ] || usage; vng_fs=$2; shift 2 ;;
	--lkvm) [ $# -ge 2 ] || usage; lkvm=$2; shift 2 ;;
	--before) [ $# -ge 2 ] || usage; before=$2; shift 2 ;;
	-h | --help) usage ;;
	*) echo "vs-fs: unknown argument $1" >&2; usage ;;
	esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "vs-fs: -n wants a positive number" >&2; exit 2; }
case $vng_fs in 9p | virtiofs) ;; *) echo "vs-fs: --vng-fs is 9p or virtiofs" >&2; exit 2 ;; esac
if [ -z "$kernel" ]; then
	kernel=/boot/vmlinuz-$(uname -r)
	[ -r "$kernel" ] || kernel=$here/build/kvm-host/kernel/boot/vmlinuz-$(uname -r)
fi
[ -r "$kernel" ] || { echo "vs-fs: no kernel $kernel (-k KERNEL)" >&2; exit 2; }
[ -x "$lkvm" ] || { echo "vs-fs: no $lkvm (make lkvm, or --lkvm PATH)" >&2; exit 2; }
[ -z "$before" ] || [ -x "$before" ] || { echo "vs-fs: no $before (--before PATH)" >&2; exit 2; }
[ -n "$vng" ] || vng=$(command -v vng || true)
if [ -z "$vng" ] || [ ! -x "$vng" ]; then
	echo "vs-fs: vng not found (install virtme-ng or pass --vng PATH): lkvm's columns only"
	vng=
fi
for t in git gcc make sha256sum tar find; do
	command -v "$t" >/dev/null || { echo "vs-fs: needs $t on the host (the guest runs the host's)" >&2; exit 2; }
done

MEM=1024 CPUS=1 T=1800
work=$here/build/vs-fs
mkdir -p "$work/rw"
# The data: a 64 MiB file, a committed kernel-sized tree, the share's sources.
file=$work/read-64m
[ "$(stat -c %s "$file" 2>/dev/null)" = 67108864 ] || head -c 67108864 /dev/urandom >"$file"
chmod 0644 "$file"
tree=$work/linux
if [ ! -d "$tree/.git" ]; then
	src=$(ls /usr/src/linux-source-*.tar.xz 2>/dev/null | tail -n 1)
	[ -n "$src" ] || { echo "vs-fs: no /usr/src/linux-source-*.tar.xz (scripts/deps.sh guest)" >&2; exit 2; }
	echo "vs-fs: unpacking and committing $src once (a few minutes)"
	rm -rf "$tree" && mkdir -p "$tree"
	tar -xJf "$src" -C "$tree" --strip-components=1 &&
		git -C "$tree" init -q && git -C "$tree" add -A &&
		git -C "$tree" -c user.name=vs-fs -c user.email=vs-fs@localhost commit -qm tree ||
		{ echo "vs-fs: could not make $tree" >&2; rm -rf "$tree"; exit 2; }
fi
git -C "$tree" status --porcelain | head -n 1 | grep -q . && { echo "vs-fs: $tree is not clean" >&2; exit 2; }
headers="stdio.h stdlib.h string.h unistd.h fcntl.h errno.h signal.h time.h math.h ctype.h
	limits.h stdint.h inttypes.h stdbool.h stddef.h stdarg.h assert.h locale.h setjmp.h wchar.h
	pthread.h dirent.h sys/types.h sys/stat.h sys/mman.h sys/socket.h sys/wait.h netinet/in.h
	arpa/inet.h poll.h"
: >"$work/rw/cc30.c"
for h in $headers; do echo "#include <$h>" >>"$work/rw/cc30.c"; done
echo 'int main(void) { return 0; }' >>"$work/rw/cc30.c"
mkdir -p "$work/rw/mk"
for i in 0 1 2 3 4 5 6 7 8 9; do
	printf '#include <stdio.h>\n#include <string.h>\nint f%d(const char *s) { return (int)strlen(s) + %d; }\n' "$i" "$i" >"$work/rw/mk/f$i.c"
done
printf 'int f0(const char *);\nint main(void) { return f0("x") != 1; }\n' >"$work/rw/mk/main.c"
printf 'OBJS := $(patsubst %%.c,%%.o,$(wildcard *.c))\nprog: $(OBJS)\n\t$(CC) -o $@ $^\nclean:\n\trm -f *.o prog\n' >"$work/rw/mk/Makefile"
chmod -R a+rwX "$work/rw"
want_find=$(find /usr -xdev | wc -l)
want_tar=$(tar cf - /usr/include 2>/dev/null | wc -c)
want_sha=$(sha256sum <"$file" | cut -d' ' -f1)
user_args=()
[ "$(id -u)" = 0 ] && user_args=(--user root)

# One boot: every row, each timed in the guest; results on stderr as "vs-fs: ROW NS VALUE".
# shellcheck disable=SC2016 # the guest expands it
GUEST='rw=$1 tree=$2 file=$3
t() { local row=$1 t0 t1 v; shift; t0=$(date +%s%N); v=$("$@" 2>/dev/null | tail -n 1); t1=$(date +%s%N)
	echo "vs-fs: $row $((t1 - t0)) ${v:-none}" >&2; }
t find sh -c "find /usr -xdev | wc -l"
t tar sh -c "tar cf - /usr/include 2>/dev/null | wc -c"
t git1 sh -c "cd $tree && git status --porcelain | wc -l"
t git2 sh -c "cd $tree && git status --porcelain | wc -l"
t cc sh -c "cd $rw && gcc -c -o /tmp/cc30.o cc30.c && echo ok"
make -s -C "$rw/mk" clean >/dev/null 2>&1
t make sh -c "make -s -j1 -C $rw/mk >/dev/null && $rw/mk/prog && echo ok"
t sha sh -c "sha256sum < $file | cut -d\" \" -f1"'

boot() { # boot TOOL: the guest script on the tool's VM; stdout in $work/out, stderr in $work/err
	local tool=$1
	case $tool in
	lkvm-9p | lkvm-virtiofs | before)
		local bin=$lkvm fs=()
		[ "$tool" = before ] && bin=$before
		[ "$tool" = lkvm-9p ] && fs=(--fs 9p)
		[ "$tool" = lkvm-virtiofs ] && fs=(--fs virtiofs)
		timeout -s KILL $((T + 30)) "$bin" run -k "$kernel" -m "$MEM" --cpus "$CPUS" "${fs[@]}" \
			"${user_args[@]}" --share "$work/rw" --timeout "$T" -- \
			sh -c "$GUEST" sh "$work/rw" "$tree" "$file" ;;
	vng)
		local f=()
		[ "$vng_fs" = 9p ] && f=(--force-9p)
		(cd /tmp && PATH=/usr/bin:/usr/sbin:$PATH timeout -s KILL $((T + 30)) "$vng" --run "$kernel" \
			"${f[@]}" --rwdir "$work/rw" --memory "${MEM}M" --cpus "$CPUS" -- \
			sh -c "$GUEST" sh "$work/rw" "$tree" "$file") ;;
	esac </dev/null >"$work/out" 2>"$work/err"
}

declare -A vals want=([find]=$want_find [tar]=$want_tar [git1]=0 [git2]=0 [cc]=ok [make]=ok [sha]=$want_sha)
ROWS="find tar git1 git2 cc make sha"
bad=0
measure() { # measure TOOL
	local tool=$1 row line ns v
	boot "$tool"
	for row in $ROWS; do
		line=$(cat "$work/err" "$work/out" 2>/dev/null | tr -d '\r' | grep -ao "vs-fs: $row [0-9]* .*" | tail -n 1)
		read -r _ _ ns v <<<"$line"
		if [ -z "$line" ] || [ "$v" != "${want[$row]}" ]; then
			echo "vs-fs: $tool: $row gave '${v:-nothing}', the host '${want[$row]}': $(tail -c 200 "$work/err" | tr '\n' ' ')"
			[ "$tool" = vng ] || bad=1
			continue
		fi
		vals[$tool.$row]+="$(awk -v n="$ns" 'BEGIN { printf "%.3f", n / 1e9 }')"$'\n'
	done
}
median() { printf '%s' "${vals[$1]-}" | sort -g | awk '{ v[NR] = $1 } END {
	if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

read -r l1 l5 l15 _ </proc/loadavg
busy=$(awk -v l="$l1" 'BEGIN { print (l > 0.5) ? "BUSY (load > 0.5: timings distorted)" : "idle" }')
echo "host load: $l1 $l5 $l15 ($busy)"
echo "kernel: $kernel; $runs run(s) each, alternating; ${MEM} MiB, $CPUS vCPU"
echo "lkvm: $lkvm${before:+; before: $before}; vng: ${vng:-not found} ($vng_fs)"
echo "host: find /usr $want_find entries, /usr/include tar $want_tar bytes"
tools="lkvm-9p lkvm-virtiofs"
[ -z "$before" ] || tools="before $tools"
[ -z "$vng" ] || tools="$tools vng"
for ((i = 1; i <= runs; i++)); do
	for tool in $tools; do measure "$tool"; done
done

printf '\n| %-36s |' "median of $runs, seconds"
for tool in $tools; do printf ' %13s |' "$tool"; done
printf ' %9s | %9s |\n' "vfs/9p" "vfs/vng"
printf '| %-36s |' "$(printf -- '-%.0s' {1..36})"
for tool in $tools; do printf ' %13s |' -------------; done
printf ' %9s | %9s |\n' --------- ---------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
declare -A label=([find]="find /usr -xdev | wc -l" [tar]="tar cf - /usr/include | wc -c"
	[git1]="git status, first (kernel tree)" [git2]="git status, second, same boot"
	[cc]="gcc -c, 30 system headers" [make]="make of 10 files in a rw share" [sha]="sha256sum of 64 MiB")
for row in $ROWS; do
	printf '| %-36s |' "${label[$row]}"
	for tool in $tools; do printf ' %13s |' "$(median "$tool.$row")"; done
	printf ' %9s | %9s |\n' "$(ratio "$(median "lkvm-virtiofs.$row")" "$(median "lkvm-9p.$row")")" \
		"$(ratio "$(median "lkvm-virtiofs.$row")" "$(median "vng.$row")")"
done
read -r l1 l5 l15 _ </proc/loadavg
echo "host load at the end: $l1 $l5 $l15"
exit $bad

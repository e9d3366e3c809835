#!/usr/bin/env bash
# The tree stays formatted: every C file is as clang-format (.clang-format) would write it, and the check sees a file that is not.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=format
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

# c_files: the tree's C sources and headers, one per line (git's list in a clone; else find's,
# for an unpacked tarball), relative to the top.
c_files() {
	if git -C "$REPO_ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		git -C "$REPO_ROOT" ls-files '*.c' '*.h'
	else
		(cd "$REPO_ROOT" && find . -path ./build -prune -o -name '*.[ch]' -print | sed 's|^\./||')
	fi
}

# misformatted FILE...: prints each FILE clang-format would change, with its first complaint.
misformatted() {
	local f out
	for f in "$@"; do
		out=$(clang-format --dry-run --Werror "$f" 2>&1) || echo "$f: $(head -n 1 <<<"$out")"
	done
}

t_tree() {
	need_cmd clang-format test || return
	local files bad n
	mapfile -t files < <(c_files)
	n=${#files[@]}
	[ "$n" -gt 100 ] || { fail "found only $n C files under $REPO_ROOT"; return; }
	bad=$(cd "$REPO_ROOT" && misformatted "${files[@]}")
	[ -z "$bad" ] || { fail "$(wc -l <<<"$bad") of $n files differ from clang-format's output (make format fixes them): $(head -n 5 <<<"$bad" | tr '\n' ' ')"; return; }
}

# The same check on a copy of a tree file with one line broken the wrong way: it must complain.
t_sees_misformat() {
	need_cmd clang-format test || return
	local d
	d=$(mktemp -d "$LOG_DIR/format.XXXXXX")
	cp "$REPO_ROOT/.clang-format" "$d/"
	printf 'static int f(int a){ if(a) return 1; return 0; }\n' >"$d/bad.c"
	printf 'static int f(int a)\n{\n\tif (a)\n\t\treturn 1;\n\treturn 0;\n}\n' >"$d/good.c"
	local out
	out=$(cd "$d" && misformatted bad.c good.c)
	rm -rf "$d"
	grep -q '^bad\.c: ' <<<"$out" || { fail "a misformatted file passed the check: '$out'"; return; }
	! grep -q '^good\.c' <<<"$out" || { fail "a formatted file failed the check: '$out'"; return; }
}

run_test tree-formatted t_tree
run_test sees-misformat t_sees_misformat
finish_tests

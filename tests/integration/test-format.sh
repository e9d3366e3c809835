#!/usr/bin/env bash
# The tree stays formatted: every C file is as clang-format (.clang-format) would write it, no function outside tests/ is
# over 60 lines (scripts/funclen.awk), README.md's source map and docs/design.md name the tree and only what is in it,
# and the checks see a file or tree that breaks them.
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

# The longest a function outside tests/ may be, from the first line of its signature to its closing brace.
FUNC_MAX=60

# long_functions FILE...: prints "FILE:LINE: N lines: SIGNATURE" for each function over FUNC_MAX lines.
long_functions() {
	awk -v N="$FUNC_MAX" -f "$REPO_ROOT/scripts/funclen.awk" "$@"
}

t_short_functions() {
	local files long n
	mapfile -t files < <(c_files | grep '\.c$' | grep -v '^tests/')
	n=${#files[@]}
	[ "$n" -gt 50 ] || { fail "found only $n C files outside tests/ under $REPO_ROOT"; return; }
	long=$(cd "$REPO_ROOT" && long_functions "${files[@]}")
	[ -z "$long" ] && return
	LAST_LOG=$LOG_DIR/format-long-functions.log
	echo "$long" >"$LAST_LOG"
	fail "$(wc -l <<<"$long") functions over $FUNC_MAX lines (split them into named helpers): $(paste -sd ';' <<<"$long" | sed 's/;/; /g')"
}

# The length check on made-up files: a function of FUNC_MAX + 1 lines (with a signature over two
# lines and a label at column 0) must be listed, one of FUNC_MAX lines and a long array initializer
# closed by `};` at column 0 must not.
t_sees_long_function() {
	local d out
	d=$(mktemp -d "$LOG_DIR/format.XXXXXX")
	# body N: a function of N lines in all.
	body() {
		local i
		printf 'static int f%s(int a,\n\t\tint b)\n{\n' "$1"
		for ((i = 0; i < $1 - 6; i++)); do printf '\ta += b;\n'; done
		printf 'out:\n\treturn a;\n}\n'
	}
	body $((FUNC_MAX + 1)) >"$d/long.c"
	{
		body "$FUNC_MAX"
		printf 'static const int table[] = {\n'
		for ((i = 0; i < FUNC_MAX * 2; i++)); do printf '\t%d,\n' "$i"; done
		printf '};\n'
	} >"$d/short.c"
	out=$(cd "$d" && long_functions long.c short.c)
	rm -rf "$d"
	[ "$out" = "long.c:1: $((FUNC_MAX + 1)) lines: static int f$((FUNC_MAX + 1))(int a," ] ||
		fail "expected only long.c's function listed, got: '$(tr '\n' ' ' <<<"$out")'"
}

# ---- the map: README.md's source map and docs/design.md name the tree, and only what is in it ----

# tree_entries ROOT: the files and folders (a folder with its slash) at ROOT's top level and the
# files under include/lkvm/, one per line: git's list when ROOT is a clone's top, else find's.
tree_entries() {
	local root=$1
	if [ "$(git -C "$root" rev-parse --show-toplevel 2>/dev/null)" = "$(cd "$root" && pwd -P)" ]; then
		git -C "$root" ls-files
	else
		(cd "$root" && find . -path ./build -prune -o -type f -print | sed 's|^\./||')
	fi | awk -F/ 'NF == 1 { print; next } { print $1 "/" } $1 "/" $2 == "include/lkvm" && NF == 3' |
		sort -u
}

# unmapped ROOT: each tree_entries entry that neither ROOT/README.md nor ROOT/docs/design.md names
# as a word of its own, a folder with its slash (include/lkvm/'s files by their names; README.md
# is the map itself).
unmapped() {
	local root=$1 e name re
	tree_entries "$root" | while read -r e; do
		[ "$e" = README.md ] && continue
		name=${e#include/lkvm/}
		re=${name//./[.]}
		[[ $name == */ ]] || re+='([^A-Za-z0-9_-]|$)' # a folder's slash ends its name
		grep -qE "(^|[^A-Za-z0-9_./-])$re" "$root/README.md" \
			"$root/docs/design.md" 2>/dev/null || echo "$e"
	done
}

# design_names FILE: the C names FILE gives in backquotes outside code blocks (an identifier with an
# underscore, after an optional struct or enum and before an optional "()").
design_names() {
	# shellcheck disable=SC2016 # the backquotes are markdown's
	awk '/^```/ { code = !code; next } !code' "$1" | tr '\n' ' ' | grep -o '`[^`]*`' | tr -d '`' |
		sed -E 's/^(struct|enum) //; s/\(\)$//' | grep -E '^[A-Za-z_][A-Za-z0-9_]*_[A-Za-z0-9_]*$' |
		sort -u
}

# stale_names ROOT: each name ROOT/docs/design.md gives that no C file of ROOT has as a word.
stale_names() {
	local root=$1
	comm -23 <(design_names "$root/docs/design.md") \
		<(cd "$root" && c_files_in "$root" | xargs -d '\n' cat |
			grep -oE '[A-Za-z_][A-Za-z0-9_]*' | sort -u)
}

# c_files_in ROOT: c_files for ROOT (a made-up tree is no clone: find's list).
c_files_in() {
	if [ "$(git -C "$1" rev-parse --show-toplevel 2>/dev/null)" = "$(cd "$1" && pwd -P)" ]; then
		git -C "$1" ls-files '*.c' '*.h'
	else
		(cd "$1" && find . -name '*.[ch]' -print | sed 's|^\./||')
	fi
}

t_map() {
	local missing stale n
	n=$(tree_entries "$REPO_ROOT" | wc -l)
	[ "$n" -gt 60 ] || { fail "found only $n files and folders to map under $REPO_ROOT"; return; }
	missing=$(unmapped "$REPO_ROOT")
	stale=$(stale_names "$REPO_ROOT")
	[ -z "$missing" ] || fail "named in neither README.md's source map nor docs/design.md: $(paste -sd ' ' <<<"$missing")"
	[ -z "$stale" ] || fail "docs/design.md names what is in no C file: $(paste -sd ' ' <<<"$stale")"
}

# The same checks on a made-up tree: a file nobody names, a header nobody names and a stale name
# must be listed; what the docs name (a file, a folder, a header, a function, a struct) and a
# name in a code block must not.
# shellcheck disable=SC2016 # the backquotes are markdown's
t_sees_stale_map() {
	local d out
	d=$(mktemp -d "$LOG_DIR/format.XXXXXX")
	mkdir -p "$d/docs" "$d/sub" "$d/include/lkvm"
	printf 'int real_fn(void);\nstruct real_type { int x; };\n' >"$d/a.c"
	: >"$d/b.c"
	: >"$d/sub/c.c"
	: >"$d/include/lkvm/x.h"
	: >"$d/include/lkvm/y.h"
	printf '| `/` | `a.c` |\n| `sub/` | more |\n| `docs/` | docs |\n| `include/lkvm/` | headers |\n' >"$d/README.md"
	printf '# D\n`x.h`; `real_fn` calls\n`made_up_fn`, `struct real_type`, `gone_fn()`.\n```\nin_code_fn\n```\n' \
		>"$d/docs/design.md"
	out="$(unmapped "$d" | paste -sd ' ') / $(stale_names "$d" | paste -sd ' ')"
	rm -rf "$d"
	[ "$out" = "b.c include/lkvm/y.h / gone_fn made_up_fn" ] ||
		fail "expected 'b.c include/lkvm/y.h / gone_fn made_up_fn', got '$out'"
}

run_test tree-formatted t_tree
run_test short-functions t_short_functions
run_test sees-long-function t_sees_long_function
run_test sees-misformat t_sees_misformat
run_test map t_map
run_test sees-stale-map t_sees_stale_map
finish_tests

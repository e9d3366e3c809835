#!/usr/bin/env bash
# lkvm installed like real software: make install into a temporary DESTDIR (as a normal user, so
# nothing can be written outside it), the installed lkvm, its man pages (rendered without a
# warning, their options those of --help), the bash completion, and make uninstall.
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=install
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

DEST=$(mktemp -d "$LOG_DIR/install.XXXXXX")
at_exit "rm -rf '$DEST'"
PFX=$DEST/usr/local
MAN1=$PFX/share/man/man1
INSTALL_LOG=$LOG_DIR/install-make.log

# The commands of the command table, as `lkvm help` lists them.
commands() { "$1" help | awk '/^Commands:/ {on = 1; next} on && /^$/ {exit} on {print $1}'; }

# as_installer CMD...: CMD where a write outside DESTDIR fails. As root: as nobody when nobody can
# read the tree (DEST is made nobody's); else (a checkout under a 0700 directory, as mktemp -d
# makes) as root in a private mount namespace whose / is remounted read-only, DEST bound writable
# over itself. Not root: as this user, who owns only what it owns.
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
as_installer() {
	if [ "$(id -u)" != 0 ]; then
		"$@"
	elif "${NOBODY[@]}" test -r "$REPO_ROOT/Makefile"; then
		chown -R 65534:65534 "$DEST" && "${NOBODY[@]}" "$@"
	else
		unshare --mount --propagation private -- sh -c \
			'mount --bind "$1" "$1" && mount -o remount,bind,ro / && shift && exec "$@"' \
			sh "$DEST" "$@"
	fi
}

# Installing: lkvm and the man pages are made first (as this user), then `make install` runs
# through as_installer. GIT_DESCRIBE as the build had it: nobody's git refuses root's tree.
install_tree() {
	make -s -C "$REPO_ROOT" lkvm man || return 1
	as_installer make -s -C "$REPO_ROOT" install DESTDIR="$DEST" \
		GIT_DESCRIBE="$(cat "$REPO_ROOT/build/obj/git-describe")"
}
install_tree >"$INSTALL_LOG" 2>&1 || fail_all "make install into $DEST failed: $(tail -n 3 "$INSTALL_LOG" | tr '\n' ' ')"

t_installed() {
	LAST_LOG=$INSTALL_LOG
	local f want
	want=$(printf '%s\n' "$PFX/bin/lkvm" "$PFX/share/bash-completion/completions/lkvm" "$MAN1/lkvm.1" \
		$(commands "$REPO_ROOT/lkvm" | sed "s|.*|$MAN1/lkvm-&.1|") | sort)
	f=$(find "$DEST" -type f | sort)
	[ "$f" = "$want" ] || { fail "installed: $(tr '\n' ' ' <<<"$f"), wanted: $(tr '\n' ' ' <<<"$want")"; return; }
	local v
	v=$("$PFX/bin/lkvm" version) || { fail "the installed lkvm version failed"; return; }
	want="lkvm version $(sed -n 's/^#define LKVM_VERSION "\(.*\)"/\1/p' "$REPO_ROOT/include/lkvm/version.h")"
	if [ -e "$REPO_ROOT/.git" ]; then # as the Makefile decides
		want="$want (git $(git -C "$REPO_ROOT" describe --always --dirty))"
	fi
	[ "$v" = "$want" ] || { fail "lkvm version said '$v', wanted '$want'"; return; }
	"$PFX/bin/lkvm" run --help | head -n 1 | grep -q '^usage: lkvm run' ||
		fail "the installed lkvm run --help printed no usage"
}

# Every page renders with neither man's nor groff's warnings (-ww: all of them).
t_man_render() {
	need_cmd man test && need_cmd groff test || return
	local f err n=0
	for f in "$MAN1"/*.1; do
		err=$(MANWIDTH=80 man -l --warnings=w "$f" 2>&1 >/dev/null)
		err+=$(LC_ALL=C.UTF-8 groff -ww -man -Tutf8 -z "$f" 2>&1)
		[ -z "$err" ] || { fail "$(basename "$f"): $err"; return; }
		for s in NAME SYNOPSIS '"EXIT STATUS"' ENVIRONMENT FILES EXAMPLES; do
			grep -qx ".SH $s" "$f" || { fail "$(basename "$f") has no $s section"; return; }
		done
		n=$((n + 1))
	done
	[ "$n" -ge 12 ] || fail "only $n man pages"
}

# The long and short option names in an option list: the lines the help text starts with an option.
opt_names() {
	grep -oE '^ +(-[a-zA-Z], )?--[a-z0-9-]+' | sed 's/^ *//; s/, /\n/' | sort -u
}
# A page's OPTIONS section as text (roff's \- read as -).
man_opts() { sed -n '/^\.SH OPTIONS/,/^\.SH/p' "$1" | sed 's/\\-/-/g' | opt_names; }
# drift LKVM PAGE CMD: says how PAGE's options differ from LKVM CMD --help's (nothing: the same).
drift() {
	diff <(man_opts "$2") <("$1" "$3" --help | opt_names) | grep '^[<>]' | tr '\n' ' '
}

# Each command's page lists the options its --help does; a page with one option renamed is seen.
t_man_options() {
	local c d n=0
	for c in $(commands "$PFX/bin/lkvm"); do
		[ "$c" = help ] && continue # help --help prints the overall usage, not options
		d=$(drift "$PFX/bin/lkvm" "$MAN1/lkvm-$c.1" "$c")
		[ -z "$d" ] || { fail "lkvm-$c.1 and lkvm $c --help differ: $d"; return; }
		n=$((n + $(man_opts "$MAN1/lkvm-$c.1" | wc -l)))
	done
	[ "$n" -gt 60 ] || { fail "only $n options in the man pages"; return; }
	local bad=$DEST/drifted.1
	sed 's/\\-\\-rng /\\-\\-rngx /' "$MAN1/lkvm-run.1" >"$bad"
	d=$(drift "$PFX/bin/lkvm" "$bad" run)
	rm -f "$bad"
	[ "$d" = "< --rngx > --rng " ] || fail "a page with --rng renamed --rngx: the check said '$d'"
}

# Every variable lkvm's sources read (but the test hooks') is in the ENVIRONMENT section.
t_man_environment() {
	local v miss=""
	for v in $(cd "$REPO_ROOT" && git ls-files '*.c' | grep -v '^tests/' | xargs grep -hoE '(^|[^_a-z])getenv\("[A-Z_]*"\)' |
		sed 's/.*getenv("\(.*\)")/\1/' | grep -v '^LKVM_TEST_' | sort -u); do
		sed -n '/^\.SH ENVIRONMENT/,/^\.SH FILES/p' "$MAN1/lkvm.1" | grep -q "\\b$v\\b" || miss+=" $v"
	done
	[ -z "$miss" ] || fail "lkvm.1's ENVIRONMENT lacks$miss"
}

# comp WORD...: what the installed completion offers for the command line WORD... (the last word
# being completed; after an = only what follows it, as bash shows it), sorted, on one line; with the installed lkvm first on PATH and no VM running.
comp() {
	PATH="$PFX/bin:$PATH" LKVM_RUNTIME_DIR="$DEST/run" bash -c '
		. "$1"; shift
		COMP_LINE="$*" COMP_POINT=${#COMP_LINE} COMPREPLY=()
		_lkvm || exit 1
		[ ${#COMPREPLY[@]} -gt 0 ] || exit 0
		printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " "' comp \
		"$PFX/share/bash-completion/completions/lkvm" "$@" 2>&1
}

t_completion() {
	local f=$PFX/share/bash-completion/completions/lkvm got
	bash -n "$f" || { fail "bash -n $f failed"; return; }
	mkdir -p "$DEST/run" && chmod 0700 "$DEST/run"
	check_comp() { # WANT WORD...
		local want=$1
		shift
		got=$(comp "$@")
		[ "$got" = "$want" ] || { fail "completing '$*' gave '$got', wanted '$want'"; return 1; }
	}
	check_comp "stat stop " lkvm st || return
	check_comp "serial virtio " lkvm run --console "" || return
	check_comp "none tap user " lkvm run -n mode= || return
	check_comp "kick poll timer " lkvm run -n mode=user,tx= || return
	check_comp "user,queues= " lkvm run -n mode=user,qu || return
	check_comp "--all --help --wait " lkvm stop -- || return
	check_comp "" lkvm stop "" || return # no VM: nothing, and no error
	local k
	k=$(mktemp -d "$LOG_DIR/install-k.XXXXXX") && : >"$k/bzImage"
	check_comp "$k/bzImage " lkvm run -k "$k/bz" &&
		check_comp "$k/bzImage " lkvm run --restore "$k/b" &&
		check_comp "$k/bzImage " lkvm run -d "$k/b"
	rm -rf "$k"
}

# make uninstall removes what install wrote.
t_uninstall() {
	as_installer make -s -C "$REPO_ROOT" uninstall DESTDIR="$DEST" \
		GIT_DESCRIBE="$(cat "$REPO_ROOT/build/obj/git-describe")" >"$LOG_DIR/uninstall.log" 2>&1 ||
		{ fail "make uninstall failed: $(tail -n 2 "$LOG_DIR/uninstall.log")"; return; }
	local left
	left=$(find "$DEST" -type f)
	[ -z "$left" ] || fail "left after make uninstall: $(tr '\n' ' ' <<<"$left")"
}

run_test installed t_installed
run_test man-render t_man_render
run_test man-options t_man_options
run_test man-environment t_man_environment
run_test completion t_completion
run_test_serial uninstall t_uninstall
finish_tests

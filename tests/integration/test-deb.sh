#!/usr/bin/env bash
# The Debian package: debian/control's Build-Depends are scripts/deps.sh's build list,
# debian/changelog's version is lkvm's, and dpkg-buildpackage -b builds lkvm_VERSION_amd64.deb
# (the unit tests run in it) from a copy of the tree, lintian reports no error or warning, dpkg -i
# installs it and the installed lkvm version and man lkvm-run work (the package is removed after).
set -u
# shellcheck disable=SC2034 # read by lib.sh
SUMMARY_PREFIX=deb
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

VERSION=$(sed -n 's/^#define LKVM_VERSION "\(.*\)"/\1/p' "$REPO_ROOT/include/lkvm/version.h")

# A package list from Build-Depends: names only, without versions and build profiles.
build_depends() {
	sed -n '/^Build-Depends:/,/^[A-Z][a-zA-Z-]*:/p' "$1" | sed '$d' | sed 's/^Build-Depends://' |
		tr ',' '\n' | sed 's/[(<].*//; s/ //g' | grep -v '^$' | grep -v '^debhelper-compat$' | sort
}

# Build-Depends: the build group of scripts/deps.sh but gcc and make (build-essential, which every
# Debian build has and policy says not to list), and check (the unit tests, <!nocheck>).
t_build_depends() {
	local want got
	want=$("$REPO_ROOT/scripts/deps.sh" build --list | tr ' ' '\n' | grep -vx 'gcc\|make' |
		{ cat; echo check; } | sort)
	got=$(build_depends "$REPO_ROOT/debian/control")
	[ "$got" = "$want" ] || fail "Build-Depends differ from deps.sh build: $(diff <(echo "$got") <(echo "$want") | grep '^[<>]' | tr '\n' ' ')"
	# the comparison sees a package deps.sh has and control lacks
	got=$(sed '/^ *musl-tools,/d' "$REPO_ROOT/debian/control" | build_depends /dev/stdin)
	[ "$got" != "$want" ] || fail "a control without musl-tools compared equal"
}

t_changelog() {
	local v
	v=$(dpkg-parsechangelog -l "$REPO_ROOT/debian/changelog" -S Version) || { fail "dpkg-parsechangelog failed"; return; }
	[ "$v" = "$VERSION" ] || fail "debian/changelog says $v, include/lkvm/version.h $VERSION"
}

# The build, from a copy of the tree's files (dpkg-buildpackage writes beside the source directory).
t_build() {
	need_cmd dpkg-buildpackage deb && need_cmd lintian deb || return
	local d=$LOG_DIR/deb src deb
	rm -rf "$d" && mkdir -p "$d/lkvm-$VERSION"
	src=$d/lkvm-$VERSION
	(cd "$REPO_ROOT" && git ls-files -co --exclude-standard | grep -v '^build/' | tar -cf - -T - |
		tar -xf - -C "$src") || { fail "copying the tree failed"; return; }
	LAST_LOG=$d/build.log
	(cd "$src" && dpkg-buildpackage -b -us -uc) >"$LAST_LOG" 2>&1 || { fail "dpkg-buildpackage failed: $(tail -n 3 "$LAST_LOG" | tr '\n' ' ')"; return; }
	deb=$d/lkvm_${VERSION}_amd64.deb
	[ -f "$deb" ] || { fail "no $deb"; return; }
	grep -q '^unit: [0-9]* passed, 0 failed' "$LAST_LOG" || { fail "the unit tests did not pass in the build"; return; }
	LAST_LOG=$d/lintian.log
	lintian --display-info "$d/lkvm_${VERSION}_amd64.changes" >"$LAST_LOG" 2>&1
	! grep -q '^[EW]: ' "$LAST_LOG" || { fail "lintian: $(grep '^[EW]: ' "$LAST_LOG" | head -n 3 | tr '\n' ' ')"; return; }
	dpkg-deb -f "$deb" Depends | grep -q 'libseccomp2' || { fail "Depends lacks the shared libraries: $(dpkg-deb -f "$deb" Depends)"; return; }
	install_deb "$deb"
}

# dpkg -i on this machine (root only; not over an lkvm package installed already), then removed.
install_deb() {
	[ "$(id -u)" = 0 ] || { skip "dpkg -i needs root"; return; }
	! dpkg-query -W lkvm >/dev/null 2>&1 || { skip "a package lkvm is installed already: not replaced"; return; }
	at_exit "dpkg -r lkvm >/dev/null 2>&1"
	LAST_LOG=$LOG_DIR/deb/dpkg.log
	dpkg -i "$1" >"$LAST_LOG" 2>&1 || { fail "dpkg -i failed"; dpkg -r lkvm >/dev/null 2>&1; return; }
	local v
	v=$(/usr/bin/lkvm version)
	[ "$v" = "lkvm version $VERSION" ] || { fail "the installed lkvm version said '$v'"; dpkg -r lkvm >/dev/null 2>&1; return; }
	MANWIDTH=80 man --warnings=w lkvm-run 2>&1 | grep -q -- '--kernel FILE' ||
		{ fail "man lkvm-run did not show lkvm-run(1)"; dpkg -r lkvm >/dev/null 2>&1; return; }
	dpkg -r lkvm >"$LAST_LOG" 2>&1 || fail "dpkg -r lkvm failed"
	[ ! -e /usr/bin/lkvm ] || fail "/usr/bin/lkvm left after dpkg -r"
}

run_test build-depends t_build_depends
run_test changelog t_changelog
run_test build t_build
finish_tests

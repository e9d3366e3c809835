#!/usr/bin/env bash
# Writes lkvm's man pages (lkvm.1, lkvm-COMMAND.1 for each command of `lkvm help`) into OUTDIR,
# made from the --help text each command prints, so a page cannot say other than the binary.
# Usage: mkman.sh LKVM OUTDIR
set -euo pipefail
lkvm=$1 out=$2
mkdir -p "$out"
ver=$("$lkvm" version | awk '{print $3}')
date=$(date -u -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}" +%Y-%m-%d)

# The sections every page shares (one place): the environment (each getenv of lkvm's sources but
# the test hooks; tests/integration/test-install.sh checks the list) and the runtime directory.
common() {
    cat <<'ROFF'
.SH ENVIRONMENT
.TP
.B LKVM_RUNTIME_DIR
the runtime directory holding each VM's control socket NAME.sock (see FILES)
.TP
.B XDG_RUNTIME_DIR
without LKVM_RUNTIME_DIR, a non-root user's runtime directory is $XDG_RUNTIME_DIR/lkvm
.TP
.BR SUDO_UID ", " SUDO_GID ", " SUDO_USER
lkvm run \-\- CMD run through sudo: the user CMD runs as by default (\-\-user)
.TP
.BR PATH ", " TMPDIR
where \-n mode=user finds passt, and where its files go
.TP
.B LKVM_HOST_KIND
lkvm bench: the kind of host named in its report
.SH FILES
.TP
.I /run/lkvm/NAME.sock
root's VMs' control sockets
.TP
.I $XDG_RUNTIME_DIR/lkvm/NAME.sock
another user's (else
.IR /tmp/lkvm\-UID/NAME.sock )
ROFF
}

# roff from a help text on stdin: SYNOPSIS (the usage lines), DESCRIPTION (the paragraphs),
# OPTIONS (the option lines as printed: their columns are the help's layout), EXIT STATUS (from
# the "Exit status:" line on). Text is escaped: \ as \e, - as \-, a leading . or ' behind \&.
to_roff() {
    awk '
    function esc(s) { gsub(/\\/, "\\e", s); gsub(/-/, "\\-", s); if (s ~ /^[.\x27]/) s = "\\&" s; return s }
    function flush(   i) {
        if (!n) return
        if (kind == "syn") { syn = syn (syn ? "\n.br\n" : "") ; for (i = 1; i <= n; i++) syn = syn (i > 1 ? "\n.br\n" : "") esc(b[i]) }
        else if (kind == "opt") { opt = opt (opt ? "\n\n" : ""); for (i = 1; i <= n; i++) opt = opt (i > 1 ? "\n" : "") esc(b[i]) }
        else if (kind == "exit") { ex = ex (ex ? "\n" : ""); for (i = 1; i <= n; i++) ex = ex (i > 1 ? "\n" : "") esc(b[i]) }
        else { desc = desc ".PP\n"; for (i = 1; i <= n; i++) desc = desc esc(b[i]) "\n" }
        n = 0
    }
    /^$/ { flush(); kind = ""; next }
    /^usage: / { flush(); kind = "syn"; sub(/^usage: /, ""); b[++n] = $0; next }
    /^Exit status: / { flush(); kind = "exit"; sub(/^Exit status: /, ""); b[++n] = $0; next }
    kind == "syn" { sub(/^ +/, ""); b[++n] = $0; next }
    kind == "" && /^ +-/ { kind = "opt" }
    kind == "" { kind = "desc" }
    { b[++n] = $0 }
    END {
        flush()
        print ".SH SYNOPSIS\n" syn
        if (desc) print ".SH DESCRIPTION\n" desc
        if (opt) print ".SH OPTIONS\n.nf\n" opt "\n.fi"
        if (ex) print ".SH \"EXIT STATUS\"\n" ex
    }'
}

# Each command's examples (lkvm.1: those of `lkvm help`).
examples() {
    case $1 in
    run) echo 'lkvm run \-k bzImage \-i initrd.img \-m 256 \-c 2 \-\-name web
lkvm run \-\- uname \-a
lkvm run \-k bzImage \-\-exit\-on "Run /init" \-\-timeout 60' ;;
    list) echo 'lkvm list \-\-json' ;;
    stop) echo 'lkvm stop web
lkvm stop \-\-all \-\-wait 10' ;;
    pause | resume | debug) echo "lkvm $1 web" ;;
    stat) echo 'lkvm stat web \-\-watch 1 \-\-count 5' ;;
    snapshot) echo 'lkvm snapshot web web.snap \-\-stop
lkvm run \-\-restore web.snap \-\-name web' ;;
    bench) echo 'lkvm bench net \-\-sizes 64 \-\-duration 2' ;;
    help) echo 'lkvm help run' ;;
    version) echo 'lkvm version' ;;
    esac
}

header() { # NAME SUMMARY
    printf '.TH %s 1 "%s" "lkvm %s" "lkvm manual"\n.SH NAME\n%s \\- %s\n' \
        "$(echo "$1" | tr a-z A-Z)" "$date" "$ver" "${1//-/\\-}" "${2//-/\\-}"
}

cmds=$("$lkvm" help | awk '/^Commands:/ {on = 1; next} on && /^$/ {exit} on {print $1}')
{
    header lkvm "a small KVM virtual machine monitor for x86-64"
    echo '.SH SYNOPSIS
.B lkvm
.I COMMAND
.RI [ ARGS ]
.SH DESCRIPTION
lkvm boots a Linux kernel in a KVM virtual machine, runs a command in a kernel on the
host'"'"'s files, and lists, pauses, inspects, snapshots and stops running VMs by name.
.SH COMMANDS'
    "$lkvm" help | awk '/^Commands:/ {on = 1; next} on && /^$/ {exit}
        on {n = $1; sub(/^ +[^ ]+ +/, ""); gsub(/\\/, "\\e"); gsub(/-/, "\\-");
            printf ".TP\n.BR lkvm\\-%s (1)\n%s\n", n, $0}'
    echo '.SH "EXIT STATUS"
Each command'"'"'s page says its own; 1 is an error (bad arguments, no such VM).'
    common
    echo '.SH EXAMPLES
.nf'
    "$lkvm" help | awk '/^Example: /{sub(/^Example: +/, ""); on = 1} /^Each command/ {on = 0}
        on {sub(/^ +/, ""); gsub(/\\/, "\\e"); gsub(/-/, "\\-"); print}'
    echo '.fi
.SH "SEE ALSO"'
    for c in $cmds; do printf '.BR lkvm\\-%s (1)\n' "$c"; done | sed '$!s/$/ ,/'
} >"$out/lkvm.1"

for c in $cmds; do
    summary=$("$lkvm" help | awk -v c="$c" '/^Commands:/ {on = 1; next} on && $1 == c {sub(/^ +[^ ]+ +/, ""); print; exit}')
    {
        header "lkvm-$c" "$summary"
        if [ "$c" = help ]; then # help --help prints the overall usage: its own synopsis here
            printf '.SH SYNOPSIS\nlkvm help [COMMAND]\n.SH DESCRIPTION\nWithout COMMAND, the commands of \\fBlkvm\\fR(1) with a line each; else COMMAND'"'"'s \\-\\-help.\n.SH "EXIT STATUS"\n0, or 1 no such command.\n'
        else
            "$lkvm" "$c" --help | to_roff
        fi
        common
        printf '.SH EXAMPLES\n.nf\n%s\n.fi\n.SH "SEE ALSO"\n.BR lkvm (1)\n' "$(examples "$c")"
    } >"$out/lkvm-$c.1"
done

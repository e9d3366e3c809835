# Functions longer than N lines (awk -v N=60 -f scripts/funclen.awk FILE.c...), counted from the first
# line of the signature to the closing brace, as clang-format writes Linux style: the signature starts
# at column 0 (its continuation lines are indented) and the body opens with a `{` alone on a line at
# column 0 and closes with a `}` at column 0. Prints "FILE:LINE: N lines: SIGNATURE" for each one and
# exits 1 if there is any. A `{` with anything after it (an initializer) opens no body, so the `};`
# closing a struct or an array at column 0 is not counted; labels at column 0 inside a body (goto
# targets) are not signatures. Headers are not given to it (their short static inlines are not checked).
FNR == 1 { sig = 0; open = 0 }
open && /^\}/ {
	len = FNR - start + 1
	if (len > N) {
		printf "%s:%d: %d lines: %s\n", FILENAME, start, len, fname
		over++
	}
	open = 0
	next
}
open { next }
/^\{[ \t]*$/ && sig { start = sig; fname = name; open = 1; next }
/^[A-Za-z_]/ { sig = FNR; name = $0; sub(/[ \t]+$/, "", name); next }
# Anything else at column 0 outside a body (a comment, a preprocessor line, a closing `};`) ends the
# signature being read: the next `{` alone belongs to no function seen.
/^[^ \t]/ { sig = 0 }
END { exit over ? 1 : 0 }

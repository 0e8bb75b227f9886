#!/usr/bin/env bash
# check_format.sh: the lines of C/C++/CUDA changed since a base commit must be as clang-format
# (the pinned version, .clang-format) writes them. Only changed lines are checked
# (git diff -M, renames followed), so code older than the base is formatted when it is next touched, never
# all at once.
#
#   scripts/check_format.sh          check the working tree against the base; exit 1 with the
#                                    diff clang-format wants
#   scripts/check_format.sh --fix    rewrite those lines in place instead
#
# The base: $PLLM_FORMAT_BASE if set, else the commit recorded in .ci/format-base (the commit
# the check started from; move it forward only to a commit whose changed lines pass).
# The version: Debian 12's clang-format (LLVM 14; scripts/setup.sh installs it). Another major
# version formats differently, so it is refused rather than trusted.
set -euo pipefail
cd "$(dirname "$0")/.."
want_major=14
fix=0
[ "${1:-}" = --fix ] && fix=1

if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "check_format: not a git checkout: nothing to compare with, skipped" >&2
    exit 0
fi
cf=""
for c in clang-format-$want_major clang-format; do
    if command -v "$c" >/dev/null && "$c" --version | grep -q "version $want_major\."; then
        cf=$(command -v "$c")
        break
    fi
done
if [ -z "$cf" ]; then
    echo "check_format: FAILED: needs clang-format $want_major (Debian 12's package clang-format;" \
        "scripts/setup.sh installs it); found: $(clang-format --version 2>/dev/null || echo none)" >&2
    exit 1
fi
base=${PLLM_FORMAT_BASE:-$(sed -n 's/^\([0-9a-f]\{7,40\}\).*/\1/p' .ci/format-base | head -1)}
if ! git cat-file -e "$base^{commit}" 2>/dev/null; then
    echo "check_format: FAILED: base commit '$base' (.ci/format-base or PLLM_FORMAT_BASE) is not in" \
        "this clone (a shallow clone? fetch more history)" >&2
    exit 1
fi

# Changed lines per file: the hunks of `git diff -M` (renames followed, so a moved file counts only
# the lines edited in it), as "FILE LINES-ARGS" with one --lines=FIRST:LAST per hunk.
ranges=$(git diff -M -U0 --no-color --diff-filter=AMR "$base" -- \
    '*.c' '*.h' '*.cpp' '*.cu' '*.cuh' | awk '
    /^\+\+\+ b\// { if (f != "" && r != "") print f r; f = substr($0, 7); r = ""; next }
    /^@@ / {
        split($3, a, ",")                       # +START[,COUNT]
        start = substr(a[1], 2); n = (a[2] == "" ? 1 : a[2])
        if (n > 0) r = r " --lines=" start ":" (start + n - 1)
    }
    END { if (f != "" && r != "") print f r }')

bad=0
n=0
while read -r file args; do
    [ -n "$file" ] && [ -f "$file" ] || continue
    n=$((n + 1))
    # shellcheck disable=SC2086
    if [ "$fix" = 1 ]; then
        "$cf" -i $args "$file"
    elif ! "$cf" --dry-run -Werror $args "$file" 2>/tmp/check_format.$$; then
        cat /tmp/check_format.$$ >&2
        bad=$((bad + 1))
    fi
done <<<"$ranges"
rm -f /tmp/check_format.$$
if [ "$bad" -gt 0 ]; then
    echo "check_format: FAILED: $bad file(s) with lines changed since ${base:0:12} that clang-format" \
        "$want_major writes otherwise (above); scripts/check_format.sh --fix rewrites them" >&2
    exit 1
fi
[ "$fix" = 1 ] && echo "check_format: formatted the changed lines of $n file(s)" ||
    echo "check_format: the changed lines of $n file(s) since ${base:0:12} are formatted (clang-format $want_major)"

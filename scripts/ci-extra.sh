#!/usr/bin/env bash
# ci-extra.sh: the sanitizer and fuzzing part of the test run (issue 8). scripts/test.sh calls it
# after the plain test suite; it also runs on its own.
#
#   1. sanitizers: the `asan` preset (ASan + UBSan + LeakSanitizer, gcc -O1 with asserts on; the
#      CPU backend and the CUDA emulation, no nvcc) builds everything and runs THE WHOLE ctest
#      suite under it: unit tests, the CUDA emulation tests and the Python integration tests,
#      which drive that build's pllm binary and tools ($PLLM_BIN, $PLLM_BUILD, set by ctest).
#      Every finding is fatal: ASan/UBSan halt and abort (a test sees SIGABRT, never exit 0 or
#      an expected error code), LeakSanitizer checks every process at exit. ASan and LSan
#      reports also go to build-asan/sanitizer-reports/ (one file per process): this script
#      prints them and fails if there is any, so such a finding in a process whose exit status
#      a test ignores, or whose failure a test expects, still fails CI. (gcc's UBSan runtime
#      ignores log_path and prints to stderr; its findings abort the process, SIGABRT.) PLLM_SANITIZE=1 tells the slowest tests to use
#      fewer inputs (each says what it cuts; see "PLLM_SANITIZE" in tests/).
#   2. fuzzing: tests/fuzz/run.sh replays the regression corpus through the libFuzzer harnesses,
#      then fuzzes every target for PLLM_FUZZ_SECONDS (default 30) under ASan+UBSan, two at a time.
#
#   scripts/ci-extra.sh            both
#   scripts/ci-extra.sh asan       only the sanitizer run (fuzz: only fuzzing)
# Environment: PLLM_FUZZ_SECONDS; PLLM_ASAN_BUILD: the sanitizer build directory (default
# build-asan, the preset's); PLLM_ASAN_CTEST: extra ctest arguments for the sanitizer run
# (e.g. "-R rel_" to run part of it while working on it; CI gives none: every test).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
jobs=$(nproc)
t_start=$(date +%s)
stamp() { echo "ci-extra: $1 ($(( $(date +%s) - t_start )) s so far)" >&2; }

if [ "$what" = all ] || [ "$what" = asan ]; then
    stamp "ASan+UBSan+LSan build (preset asan)"
    asan_dir=${PLLM_ASAN_BUILD:-build-asan}
    cmake --preset asan -B "$asan_dir" >/dev/null
    cmake --build "$asan_dir" -j"$jobs" >/dev/null
    reports=$(cd "$asan_dir" && pwd)/sanitizer-reports
    rm -rf "$reports"
    mkdir -p "$reports"
    # halt_on_error + abort_on_error: the first report ends the process with SIGABRT (a test
    # expecting exit 1 or 3 cannot mistake it for its own error); detect_leaks: LeakSanitizer
    # at every exit; log_path: every ASan/LSan report also kept as a file, checked below.
    common="halt_on_error=1:abort_on_error=1:log_path=$reports/report"
    # handle_sigbus=0: SIGBUS stays the real signal (pllm guards its mapped files itself, and
    # rel_mapped_file checks the signal a child dies of)
    export ASAN_OPTIONS="$common:handle_sigbus=0:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
    export UBSAN_OPTIONS="$common:print_stacktrace=1"
    export LSAN_OPTIONS=report_objects=1
    export PLLM_SANITIZE=1
    stamp "the whole test suite under ASan+UBSan+LSan"
    rc=0
    # shellcheck disable=SC2086
    ctest --test-dir "$asan_dir" --output-on-failure -j2 ${PLLM_ASAN_CTEST:-} || rc=$?
    unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS PLLM_SANITIZE
    if [ -n "$(ls -A "$reports")" ]; then
        for f in "$reports"/*; do
            echo "==== sanitizer report $f" >&2
            cat "$f" >&2
        done
        echo "ci-extra: FAILED: $(ls "$reports" | wc -l) sanitizer report(s) (above; in $reports)" >&2
        exit 1
    fi
    [ "$rc" = 0 ] || { echo "ci-extra: FAILED: tests under ASan+UBSan+LSan" >&2; exit "$rc"; }
    stamp "sanitizers: every test passed, no report"
fi

if [ "$what" = all ] || [ "$what" = fuzz ]; then
    stamp "fuzzing: ${PLLM_FUZZ_SECONDS:-30} s per target"
    PLLM_FUZZ_JOBS=${PLLM_FUZZ_JOBS:-2} tests/fuzz/run.sh
fi
stamp "done"

#!/usr/bin/env bash
# ci-extra.sh: the sanitizer and fuzzing part of the test run (issue 8). scripts/test.sh calls it
# after the plain test suite; it also runs on its own.
#
#   1. sanitizers: the `asan` preset (ASan + UBSan, LeakSanitizer on, every report fatal) builds
#      everything and runs, under it, every test labelled unit, the CUDA emulation tests (the
#      emulator's self-test, kernels, device API, ops and sampler kernels; not the end-to-end
#      model comparisons, which take over 25 minutes at -O0 under ASan) and a short real-model
#      run of the pllm binary (rel_generate_smoke): no report, no leak;
#   2. fuzzing: tests/fuzz/run.sh replays the regression corpus through the libFuzzer harnesses,
#      then fuzzes every target for PLLM_FUZZ_SECONDS (default 30) under ASan+UBSan, two at a time.
#
#   scripts/ci-extra.sh            both
#   scripts/ci-extra.sh asan       only the sanitizer run (fuzz: only fuzzing)
# Environment: PLLM_FUZZ_SECONDS, PLLM_ASAN_LABELS (ctest -L regex; default "unit"),
# PLLM_ASAN_TESTS (more tests, a name regex; default the CUDA emulation tests and the smoke run).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
jobs=$(nproc)
t_start=$(date +%s)
stamp() { echo "ci-extra: $1 ($(( $(date +%s) - t_start )) s so far)" >&2; }

if [ "$what" = all ] || [ "$what" = asan ]; then
    stamp "ASan+UBSan build (preset asan)"
    cmake --preset asan >/dev/null
    cmake --build --preset asan -j"$jobs" >/dev/null
    # abort_on_error: a report is a test failure; detect_leaks: LeakSanitizer at every exit
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    export LSAN_OPTIONS=report_objects=1
    more=${PLLM_ASAN_TESTS:-cuemu_selftest|cuemu_kernels|cuemu_device|cuda_ops|cuda_sampler|rel_generate_smoke}
    stamp "tests under ASan+UBSan: labels ${PLLM_ASAN_LABELS:-unit} + $more"
    ctest --test-dir build-asan --output-on-failure -j2 -L "${PLLM_ASAN_LABELS:-unit}"
    ctest --test-dir build-asan --output-on-failure -j2 -R "^($more)\$"
    unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
fi

if [ "$what" = all ] || [ "$what" = fuzz ]; then
    stamp "fuzzing: ${PLLM_FUZZ_SECONDS:-30} s per target"
    PLLM_FUZZ_JOBS=${PLLM_FUZZ_JOBS:-2} tests/fuzz/run.sh
fi
stamp "done"

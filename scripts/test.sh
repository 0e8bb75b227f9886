#!/usr/bin/env bash
# test.sh: set up (packages, reference libraries, default model), check the sources' layering
# and formatting (scripts/check_layers.sh, scripts/check_format.sh), build warning-free, and run
# the whole test suite. This is the README's test command and what CI runs.
#
#   scripts/test.sh              everything: the test suite, then the same unit tests under
#                                ASan+UBSan+LeakSanitizer and a bounded fuzzing run of every
#                                parser (scripts/ci-extra.sh)
#   scripts/test.sh -L unit      extra arguments go to ctest (here: only tests labelled unit);
#                                the sanitizer and fuzzing steps are then left out
#   PLLM_TEST_EXTRA=0|1          leave out / force the sanitizer and fuzzing steps
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# source checks (seconds): includes point down the layers; changed lines are clang-formatted
scripts/check_layers.sh
scripts/check_format.sh
BUILD=${PLLM_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPLLM_WERROR=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
ctest --test-dir "$BUILD" --output-on-failure -j2 "$@"
if [ "${PLLM_TEST_EXTRA:-$([ $# -eq 0 ] && echo 1 || echo 0)}" = 1 ]; then
    scripts/ci-extra.sh
fi

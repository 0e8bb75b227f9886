#!/usr/bin/env bash
# test.sh: set up (packages, reference libraries, default model), build warning-free, and run
# the whole test suite. This is the README's test command and what CI runs.
#
#   scripts/test.sh              everything
#   scripts/test.sh -L unit      extra arguments go to ctest (here: only tests labelled unit)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD=${PLLM_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPLLM_WERROR=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
ctest --test-dir "$BUILD" --output-on-failure -j2 "$@"

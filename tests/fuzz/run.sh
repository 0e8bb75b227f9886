#!/usr/bin/env bash
# run.sh: build the libFuzzer harnesses (clang, ASan+UBSan, LeakSanitizer on), fuzz each target
# for a bounded time, then replay the saved regression corpus through the fuzzing binaries.
# CI runs it through scripts/ci-extra.sh; exit status 1 when any target found anything (crash,
# leak, sanitizer report, timeout, out-of-memory) or a regression input fails again.
#
#   tests/fuzz/run.sh                    every target, PLLM_FUZZ_SECONDS (default 30) each
#   tests/fuzz/run.sh -t 120 gguf chat   chosen targets, 120 s each
#   tests/fuzz/run.sh -r                 only replay tests/fuzz/regressions/ and the seeds
#   tests/fuzz/run.sh -j 2               two targets at a time (PLLM_FUZZ_JOBS; default 1)
#
# Corpus: each target starts from the committed seeds (tests/fuzz/seeds/<t>), seeds built at
# run time from the real data and the default model (make_seeds.py, into the build directory)
# and the regressions; what it finds goes to BUILD/fuzz-work/corpus/<t> (kept between local
# runs, so fuzzing continues where it stopped). A finding is saved as
# BUILD/fuzz-work/artifacts/<t>/crash-* (or leak-*, timeout-*, oom-*): reproduce it with
# `BUILD/tests/fuzz_<t> FILE`, fix it, and add the file to tests/fuzz/regressions/<t>/.
# Per-target results (executions, exec/s, corpus size) are printed and appended to
# BUILD/fuzz-work/runs.tsv.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FUZZ_DIR=$ROOT/tests/fuzz
BUILD=${PLLM_FUZZ_BUILD:-$ROOT/build-fuzz}
SECS=${PLLM_FUZZ_SECONDS:-30}
JOBS=${PLLM_FUZZ_JOBS:-1}
ALL_TARGETS="gguf safetensors hf_config hf_dir records tokenizer tok_files chat io merge prefix_store"
replay_only=0
targets=""
while [ $# -gt 0 ]; do
    case "$1" in
    -t) SECS=$2; shift 2 ;;
    -j) JOBS=$2; shift 2 ;;
    -r) replay_only=1; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets="$targets $1"; shift ;;
    esac
done
targets=${targets:-$ALL_TARGETS}

max_len() {
    case "$1" in
    gguf) echo 49152 ;; hf_dir) echo 32768 ;; tok_files) echo 16384 ;; tokenizer) echo 2048 ;; hf_config | records) echo 4096 ;; *) echo 8192 ;;
    esac
}

echo "fuzz: building harnesses in $BUILD" >&2
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DPLLM_FUZZ=ON -DPLLM_CUDA=OFF -DPLLM_WERROR=ON >/dev/null
cmake --build "$BUILD" --target fuzz -j"${PLLM_JOBS:-2}" >/dev/null

WORK=$BUILD/fuzz-work
mkdir -p "$WORK"
# seeds from the real files, rebuilt when the generator changes
if [ ! -f "$WORK/seeds/.stamp" ] || [ "$FUZZ_DIR/make_seeds.py" -nt "$WORK/seeds/.stamp" ]; then
    rm -rf "$WORK/seeds"
    PLLM_SHARED_DATA=${PLLM_SHARED_DATA:-$ROOT/../shared/data} python3 "$FUZZ_DIR/make_seeds.py" "$WORK/seeds" >&2
    touch "$WORK/seeds/.stamp"
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:detect_stack_use_after_return=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target: replay its saved inputs, then fuzz it; the verdict goes to $WORK/result_<t>.
fuzz_one() {
    local t=$1 bin=$BUILD/tests/fuzz_$1 art=$WORK/artifacts/$1 log=$WORK/logs/$1.log res=$WORK/result_$1
    mkdir -p "$WORK/corpus/$t" "$art" "$WORK/logs"
    # 1. replay every saved input once (files given one by one run once each)
    local inputs
    inputs=$(find "$FUZZ_DIR/regressions/$t" "$FUZZ_DIR/seeds/$t" -type f ! -name '*.md' 2>/dev/null | sort || true)
    if [ -n "$inputs" ]; then
        # shellcheck disable=SC2086
        if ! "$bin" -rss_limit_mb=2048 -timeout=30 $inputs >"$log.replay" 2>&1; then
            printf "%-12s %12s %10s %8s %s\n" "$t" - - - "FAILED: a saved input fails again (see $log.replay)" >"$res"
            return
        fi
    fi
    if [ "$replay_only" = 1 ]; then
        printf "%-12s %12s %10s %8s %s\n" "$t" - - - "replayed" >"$res"
        return
    fi
    # 2. fuzz for SECS seconds
    local dirs="$WORK/corpus/$t" d rc=0
    for d in "$WORK/seeds/$t" "$FUZZ_DIR/seeds/$t" "$FUZZ_DIR/regressions/$t"; do [ -d "$d" ] && dirs="$dirs $d"; done
    # shellcheck disable=SC2086
    "$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$t")" -dict="$FUZZ_DIR/dict/$t.dict" \
        -artifact_prefix="$art/" -print_final_stats=1 -close_fd_mask=1 $dirs >"$log" 2>&1 || rc=$?
    local execs speed ncorp result=ok
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    ncorp=$(find "$WORK/corpus/$t" -type f | wc -l)
    [ "$rc" = 0 ] || result="FOUND (exit $rc): $art/$(ls -t "$art" | head -1) -- see $log"
    printf "%-12s %12s %10s %8s %s\n" "$t" "${execs:-?}" "${speed:-?}" "$ncorp" "$result" >"$res"
    printf "%s\t%s\t%s\t%s\t%s\t%s\n" "$(date -u +%FT%TZ)" "$t" "$SECS" "${execs:-0}" "${speed:-0}" "$result" >>"$WORK/runs.tsv"
}

for t in $targets; do
    [ -x "$BUILD/tests/fuzz_$t" ] || { echo "run.sh: no harness $t" >&2; exit 2; }
    rm -f "$WORK/result_$t"
done
running=0
for t in $targets; do
    fuzz_one "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$JOBS" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait
failed=""
printf "%-12s %12s %10s %8s %s\n" target executions exec/s corpus result
for t in $targets; do
    line=$(cat "$WORK/result_$t" 2>/dev/null || echo "$t ? ? ? FAILED: no result")
    echo "$line"
    case "$line" in *FOUND* | *FAILED*) failed="$failed $t" ;; esac
done
if [ -n "$failed" ]; then
    echo "fuzz: FAILED:$failed" >&2
    exit 1
fi
echo "fuzz: all targets clean" >&2

#!/usr/bin/env bash
# run_long.sh: long fuzzing runs, counted: each target is fuzzed (ASan+UBSan, one process) in
# chunks until its total number of executions reaches the goal. Totals are kept in
# BUILD/fuzz-work/long.tsv (one row per chunk: date, target, executions, seconds, result), so
# the script can be stopped and started again and goes on where it stopped; the corpus grows in
# BUILD/fuzz-work/corpus/<target> between chunks.
#
#   tests/fuzz/run_long.sh                      every target up to 10,000,000 executions
#   tests/fuzz/run_long.sh -n 2000000 gguf io   chosen targets, another goal
#   tests/fuzz/run_long.sh -s                   print the totals only: this build's (long.tsv)
#                                               and the committed record (campaigns.tsv)
#   tests/fuzz/run_long.sh -c                   this build's chunks not yet printed by an earlier
#                                               -c, as rows for the committed record
#                                               tests/fuzz/campaigns.tsv (append them); the
#                                               line count of long.tsv already printed is kept
#                                               in BUILD/fuzz-work/long.printed
#
# Runs at the lowest CPU priority (nice 19) in one process per target at a time, so that it
# takes only idle time on a shared machine. The per-input timeout is 60 s of wall time
# (PLLM_FUZZ_TIMEOUT): a starved low-priority process on a loaded machine can wait seconds for
# the CPU, and libFuzzer's timer counts that (a 10 s limit gave false timeouts at load 13). A finding stops that target (the input is in
# BUILD/fuzz-work/artifacts/<target>/); fix it, add the input to tests/fuzz/regressions/<target>/
# and run again.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${PLLM_FUZZ_BUILD:-$ROOT/build-fuzz}
GOAL=10000000
CHUNK=${PLLM_FUZZ_CHUNK:-1000000}
ALL="gguf safetensors hf_config hf_dir records tokenizer tok_files chat io merge"
summary=0
targets=""
while [ $# -gt 0 ]; do
    case "$1" in
    -n) GOAL=$2; shift 2 ;;
    -s) summary=1; shift ;;
    -c) summary=2; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) targets="$targets $1"; shift ;;
    esac
done
targets=${targets:-$ALL}
WORK=$BUILD/fuzz-work
TSV=$WORK/long.tsv

# total_of / secs_of TARGET [FILE]: executions / seconds of TARGET's chunks in FILE (default: long.tsv)
total_of() { awk -F'\t' -v t="$1" '$2 == t && $5 == "ok" { s += $3 } END { print s + 0 }' "${2:-$TSV}" 2>/dev/null || echo 0; }
secs_of() { awk -F'\t' -v t="$1" '$2 == t { s += $4 } END { print s + 0 }' "${2:-$TSV}" 2>/dev/null || echo 0; }

RECORD=$ROOT/tests/fuzz/campaigns.tsv
recorded_of() { awk -F'\t' -v t="$1" '$2 == t { s += $3 } END { print s + 0 }' "$RECORD" 2>/dev/null || echo 0; }

print_totals() {
    printf "%-12s %14s %10s %14s %s\n" target executions cpu-s recorded "command: $BUILD/tests/fuzz_<target> (see tests/fuzz/run_long.sh); recorded: tests/fuzz/campaigns.tsv"
    for t in $ALL; do printf "%-12s %14s %10s %14s\n" "$t" "$(total_of "$t")" "$(secs_of "$t")" "$(recorded_of "$t")"; done
}
if [ "$summary" = 1 ]; then print_totals; exit 0; fi
if [ "$summary" = 2 ]; then # rows for campaigns.tsv: last chunk's date, target, executions, cpu-s, command
    # only the chunks after those an earlier -c printed, so that appending never counts a chunk twice
    [ -f "$TSV" ] || exit 0
    done_lines=$(cat "$WORK/long.printed" 2>/dev/null || echo 0)
    all_lines=$(wc -l <"$TSV")
    NEW=$(mktemp)
    tail -n +"$((done_lines + 1))" "$TSV" >"$NEW"
    for t in $ALL; do
        n=$(total_of "$t" "$NEW")
        [ "$n" -gt 0 ] || continue
        d=$(awk -F'\t' -v t="$t" '$2 == t { d = $1 } END { print d }' "$NEW")
        printf "%s\t%s\t%s\t%s\t%s\n" "$d" "$t" "$n" "$(secs_of "$t" "$NEW")" "tests/fuzz/run_long.sh $t (libFuzzer, ASan+UBSan+LSan, nice 19)"
    done
    rm -f "$NEW"
    echo "$all_lines" >"$WORK/long.printed"
    exit 0
fi

# build and seed once, through run.sh (replays the regression corpus too)
PLLM_FUZZ_BUILD=$BUILD "$ROOT/tests/fuzz/run.sh" -r $targets >/dev/null
mkdir -p "$WORK/logs"
touch "$TSV"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:detect_stack_use_after_return=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
max_len() {
    case "$1" in
    gguf) echo 49152 ;; hf_dir) echo 32768 ;; tok_files) echo 16384 ;; tokenizer) echo 2048 ;; hf_config | records) echo 4096 ;; *) echo 8192 ;;
    esac
}
status=0
for t in $targets; do
    while [ "$(total_of "$t")" -lt "$GOAL" ]; do
        left=$(( GOAL - $(total_of "$t") ))
        runs=$(( left < CHUNK ? left : CHUNK ))
        dirs="$WORK/corpus/$t"
        mkdir -p "$dirs" "$WORK/artifacts/$t"
        for d in "$WORK/seeds/$t" "$ROOT/tests/fuzz/seeds/$t" "$ROOT/tests/fuzz/regressions/$t"; do [ -d "$d" ] && dirs="$dirs $d"; done
        log=$WORK/logs/long_$t.log
        t0=$(date +%s)
        rc=0
        # shellcheck disable=SC2086
        nice -n 19 "$BUILD/tests/fuzz_$t" -runs="$runs" -timeout="${PLLM_FUZZ_TIMEOUT:-60}" -rss_limit_mb=2048 -max_len="$(max_len "$t")" \
            -dict="$ROOT/tests/fuzz/dict/$t.dict" -artifact_prefix="$WORK/artifacts/$t/" -print_final_stats=1 \
            -close_fd_mask=1 $dirs >"$log" 2>&1 || rc=$?
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        result=ok
        [ "$rc" = 0 ] || result="found(exit $rc)"
        printf "%s\t%s\t%s\t%s\t%s\n" "$(date -u +%FT%TZ)" "$t" "${execs:-0}" "$(( $(date +%s) - t0 ))" "$result" >>"$TSV"
        echo "run_long: $t: +${execs:-0} executions ($result), total $(total_of "$t")" >&2
        if [ "$rc" != 0 ]; then
            echo "run_long: $t: FOUND something: $(ls -t "$WORK/artifacts/$t" | head -1); see $log" >&2
            status=1
            break
        fi
    done
done
print_totals
exit $status

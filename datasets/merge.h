/*
 * merge.h: `pllm merge`: join the outputs of shard runs (pllm generate --shard K/N, or any
 * outputs of pllm generate) into one output holding every request exactly once, and merge
 * their statistics.
 *
 * Records. Each output line is keyed as --resume keys it (pllm_output_key: custom_id or id;
 * plus the completion's "index" for n > 1). A key seen more than once (a requeued shard whose
 * first attempt wrote to another file, a file given twice) is written once: the first
 * successful line, or the first line when all are errors. A line that is not a JSON object
 * naming a request (a torn last line of a killed run, garbage) is skipped and counted. The
 * field "input_index" that shard runs add is removed again. --order input sorts by it (lines
 * without it keep their place after those with it); --order completion keeps the order of the
 * files as given, each file in its own order.
 *
 * Checks. A file's sidecar (FILE.shard.json, datasets/shard.h) says which shard it is: merge
 * checks that all sidecars are of one partition (N, key length, balance), names every shard of
 * 0..N-1 that no file covers, and every shard whose runs never completed (its record count,
 * when known, against the lines merged for it). With the input (--input), every record's key
 * is looked up and a missing one is named (file:line and id), which needs no sidecar.
 *
 * Statistics. Exact counters add: requests, prompt, output and cached tokens are recounted
 * from the merged lines themselves (so duplicates and a killed attempt's lost lines cannot
 * skew them); the engine's counters (steps, preemptions, prompt tokens computed and cached)
 * are the sums over every recorded attempt of every shard, peak KV blocks the largest.
 * Percentiles (TTFT, TPOT, E2E latency) are recomputed from the merged lines' ttft_ms,
 * latency_ms and completion_tokens; mean ITL is the pooled mean over the attempts; ITL's median
 * and p99 need per-token times that outputs do not carry, and are null. Throughput is over the
 * wall-clock span of all shards: the earliest attempt's start to the latest attempt's end (so
 * time a requeued task spent waiting counts, as it does for whoever waits for the result).
 *
 * Memory: one entry per distinct key (the key text and a few integers); --order input also
 * keeps the chosen lines in an unlinked temporary file and 24 bytes per line in memory. The
 * lines themselves are streamed.
 *
 * Ownership: pllm_merge_result_free frees the result's JSON.
 */
#pragma once

#include "datasets/records.h"

#include <stdio.h>

typedef struct pllm_merge_params {
    const char *const *paths; /* [n_paths] the outputs to merge (.zst read as such) */
    size_t n_paths;
    const char *out_path; /* "-": stdout */
    bool order_input;
    const char *input_path; /* optional: the prompts, to name missing records */
    pllm_format input_format;
    FILE *log;     /* warnings and problems, NULL: none */
    int max_named; /* how many missing records / bad lines to name (0: 10) */
} pllm_merge_params;

typedef struct pllm_merge_result {
    int64_t n_lines;      /* lines read from all files */
    int64_t n_written;    /* lines written */
    int64_t n_duplicates; /* lines dropped as a repeat of a key */
    int64_t n_bad;        /* lines that name no request (torn, not JSON) */
    int32_t n_shards;     /* N of the sidecars, 0 when there were none */
    int32_t n_missing_shards, n_incomplete_shards;
    int64_t n_missing;    /* records of the input (or of complete shards' counts) not merged */
    int64_t n_unexpected; /* --input: merged keys that are not in the input */
    json_t *stats;        /* the merged statistics (report keys plus "merge": {...}) */
} pllm_merge_result;

/* Merge. PLLM_OK when the output was written (the result then says whether anything is missing:
 * n_missing_shards, n_incomplete_shards, n_missing, n_bad); an error status when an input cannot
 * be read, the sidecars contradict each other, or the output cannot be written. */
pllm_status pllm_merge_run(const pllm_merge_params *p, pllm_merge_result *res);
void pllm_merge_result_free(pllm_merge_result *res);

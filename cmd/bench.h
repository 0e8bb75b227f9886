/*
 * bench.h: the parts of `pllm bench` (bench.c parses the options and reports): the workload
 * (bench_workload.c) and one run of it on a fresh engine (bench_run.c). The gate is gate.h's.
 */
#pragma once

#include "cmd/plot.h"
#include "cmd/progress.h"
#include "cmd/runtime.h"
#include "datasets/records.h"
#include "engine/engine.h"
#include "engine/report.h"

#include <signal.h>

/* ---------------------------------------------------------------- workload (bench_workload.c) */

typedef struct bench_req {
    int32_t *ids;
    int32_t n, max_tokens;
} bench_req;

typedef struct bench_workload {
    bench_req *v;
    int64_t n, cap;
    int64_t n_bad, n_too_long, n_empty;
    int64_t prompt_tokens, max_tokens;
    uint64_t fingerprint;
} bench_workload;

typedef struct bench_opts {
    const char *dataset, *dataset_path, *format_s, *extra_s;
    pllm_extra_fields extra;
    int32_t num_prompts, input_len, output_len, prefix_len, num_prefixes, warmup, repeat;
    bool input_len_given, output_len_given;
} bench_opts;

/* Frees the requests; w may be zeroed. */
void cmd_bench_workload_free(bench_workload *w);
/* A hash of every request's ids and output length. */
uint64_t cmd_bench_workload_fingerprint(const bench_workload *w);
/* random / prefix: o->num_prompts synthetic prompts (ids outside the special tokens). 0, 2 (they
 * do not fit max_len) or 3 (message printed). */
int cmd_bench_workload_synthetic(bench_workload *w, const bench_opts *o, const cmd_runtime *rt,
                                 uint64_t seed, int32_t max_len);
/* sharegpt / FILE: the first o->num_prompts usable records of path (bad, empty and too long
 * ones are counted in w). 0 or 3 (message printed). */
int cmd_bench_workload_from_file(bench_workload *w, const bench_opts *o, const cmd_runtime *rt,
                                 const char *path, pllm_format format, int32_t max_len, bool quiet);

/* ---------------------------------------------------------------- runs (bench_run.c) */

/* One run of requests [0, n) on a fresh engine. rep NULL: a warmup (nothing recorded).
 * 0, 3 (an engine error) or 130 (*interrupted). */
int cmd_bench_run_once(const cmd_runtime *rt, const pllm_engine_params *ep, const bench_workload *w,
                       int64_t n, pllm_report *rep, bool new_run, pllm_engine_stats *es,
                       pllm_engine_plan_stats *plan, volatile sig_atomic_t *interrupted,
                       cmd_progress *prog, cmd_plot *plot, uint64_t *digest);

/*
 * report.h: the statistics report of a run, with the names users know from vLLM's
 * benchmarks: request throughput (req/s), input, output and total token throughput (tok/s),
 * TTFT, TPOT, ITL and end-to-end latency (mean, median, std, p99, in ms), prefix cache hit rate,
 * plus the engine's exact counters (steps, preemptions, prompt tokens computed vs cached, peak
 * KV blocks).
 *
 * Definitions (per completion, as vLLM's benchmarks compute them):
 *   TTFT  = first token time - arrival (the time it was added to the engine);
 *   TPOT  = (finish - first token) / (completion tokens - 1), over completions with >= 2 tokens;
 *   ITL   = the gaps between consecutive tokens of a completion, pooled over all completions
 *           (pllm_completion.token_times; the tokens of one engine step share a time, so a
 *           gap is the time between the steps that sampled them). Over a completion the
 *           gaps sum to its last token time - first token time, so TPOT is the mean of that
 *           completion's ITL up to the few microseconds between the last token and finish;
 *           the pooled mean ITL weighs completions by their token counts, TPOT's mean does
 *           not (equal when every completion has the same length);
 *   E2E   = finish - arrival;
 *   duration of a run = the last finish - the run's start;
 *   cache hit rate = cached prompt tokens / prompt tokens (finished completions).
 * Percentiles interpolate linearly between closest ranks (numpy's default); std is the
 * population standard deviation (numpy's default, as vLLM reports it).
 *
 * Memory: a series keeps its exact values up to PLLM_SERIES_EXACT of them, then folds them
 * into log-spaced buckets (relative width 0.2%, 16000 of them, from 0.1 us to ~90 days) so
 * that a run of millions of requests stays bounded: mean and std stay exact, median and p99
 * are then within 0.1% of the exact value.
 *
 * Runs (pllm bench --repeat): the report accumulates several runs of the same workload. The
 * counts it prints are per run (the totals divided by the number of runs: exact when the runs
 * are identical, as deterministic counters are), throughputs are the mean over runs with a 95%
 * confidence interval (Student's t; its lower bound truncated at 0, as the quantities are
 * positive), latency percentiles pool all runs.
 *
 * Ownership: pllm_report_init/free; the add functions copy what they need.
 */
#pragma once

#include "engine/engine.h"

#include <jansson.h>
#include <stdio.h>

#define PLLM_SERIES_EXACT 65536

typedef struct pllm_series {
    double *v; /* exact values while hist == NULL */
    size_t n, cap;
    uint32_t *hist; /* [PLLM_SERIES_BUCKETS] once more than PLLM_SERIES_EXACT values came */
    uint64_t count; /* values added */
    double sum, sumsq, min, max;
} pllm_series;

typedef struct pllm_summary {
    double mean, median, std, p99; /* NaN when the series is empty */
    uint64_t count;
} pllm_summary;

pllm_status pllm_series_add(pllm_series *s, double x);
pllm_summary pllm_series_summary(const pllm_series *s);
void pllm_series_free(pllm_series *s);

/* One run's totals (for throughput per run). */
typedef struct pllm_run_totals {
    double duration;
    int64_t n_ok, prompt_tokens, completion_tokens;
} pllm_run_totals;

typedef struct pllm_report {
    double t_start, t_end;              /* the current run */
    int64_t n_ok, n_failed, n_rejected; /* n_failed counts rejected input records too */
    int64_t prompt_tokens, completion_tokens, cached_tokens;
    pllm_series ttft, tpot, itl, latency; /* seconds */
    pllm_run_totals *runs;                /* [n_runs] closed runs */
    int n_runs;
    pllm_run_totals at_run_start; /* totals when the current run started */
} pllm_report;

void pllm_report_init(pllm_report *r, double t_start);
void pllm_report_free(pllm_report *r);
/* A finished completion (ok or failed). A successful one with token_times adds its
 * n_tokens - 1 inter-token gaps to ITL (pllm_report_add_token_times). */
pllm_status pllm_report_add(pllm_report *r, const pllm_completion *c);
/* Per-token timestamps of a completion (pllm_now() seconds when each token was sampled):
 * adds its n - 1 inter-token gaps to ITL. pllm_report_add calls it. */
pllm_status pllm_report_add_token_times(pllm_report *r, const double *t, int32_t n);
/* A request that failed before it ran (bad input record). */
void pllm_report_add_rejected(pllm_report *r);
/* Close the current run and start another at t_start. */
pllm_status pllm_report_new_run(pllm_report *r, double t_start);

typedef struct pllm_throughput {
    double req_s, input_tok_s, output_tok_s, total_tok_s;
} pllm_throughput;

/* A mean with its 95% confidence interval (Student's t with n-1 degrees of freedom; lo = hi
 * = mean when n < 2). */
typedef struct pllm_interval {
    double mean, lo, hi;
    int n;
} pllm_interval;

pllm_interval pllm_interval95(const double *v, int n);
/* The 0.975 quantile of Student's t distribution with df degrees of freedom (df >= 1). */
double pllm_t_quantile_975(int df);
/* P(T <= t) for Student's t with df > 0 degrees of freedom (fractional: Welch's test). */
double pllm_t_cdf(double t, double df);

/* Number of runs so far (closed ones plus the current one). */
int pllm_report_n_runs(const pllm_report *r);
/* Throughput of run i (0-based; the last one is the current run). */
pllm_throughput pllm_report_run_throughput(const pllm_report *r, int i);

/* Extra lines for the human-readable table (NULL: none): label/value pairs printed after the
 * engine counters. */
typedef struct pllm_report_note {
    const char *label, *value;
} pllm_report_note;

/* Human-readable table (vLLM's layout). es may be NULL. */
void pllm_report_print(const pllm_report *r, const pllm_engine_stats *es, const char *title,
                       const pllm_report_note *notes, int n_notes, FILE *f);
/* Machine-readable: a new JSON object (caller decrefs) with vLLM's key names
 * (request_throughput, output_throughput, mean_ttft_ms, p99_itl_ms, ...; null where a series
 * is empty), the per-run throughputs and their intervals, and the engine counters under
 * "counters". */
json_t *pllm_report_json(const pllm_report *r, const pllm_engine_stats *es);

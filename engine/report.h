/*
 * report.h: the statistics report of a run, with the names users know from vLLM's
 * benchmarks: request throughput, input/output/total token throughput, TTFT, TPOT and
 * end-to-end latency (mean, median, p99), prefix cache hit rate, plus the engine's exact
 * counters (steps, preemptions, prompt tokens computed vs cached, peak KV blocks).
 *
 * TPOT of a request = (latency - TTFT) / (completion tokens - 1), over requests with at least
 * two tokens. Cache hit rate = cached prompt tokens / prompt tokens.
 *
 * Ownership: pllm_report_init/free; add() copies what it needs.
 */
#pragma once

#include "engine/engine.h"

#include <jansson.h>
#include <stdio.h>

typedef struct pllm_series {
    double *v;
    size_t n, cap;
} pllm_series;

typedef struct pllm_report {
    double t_start, t_end;
    int64_t n_ok, n_failed;
    int64_t prompt_tokens, completion_tokens, cached_tokens;
    pllm_series ttft, tpot, latency; /* seconds */
} pllm_report;

void pllm_report_init(pllm_report *r, double t_start);
void pllm_report_free(pllm_report *r);
/* A finished completion (ok or failed). */
pllm_status pllm_report_add(pllm_report *r, const pllm_completion *c);
/* A request that failed before it ran (bad input line). */
void pllm_report_add_rejected(pllm_report *r);

typedef struct pllm_summary {
    double mean, median, p99;
} pllm_summary;
pllm_summary pllm_series_summary(const pllm_series *s);

/* Human-readable table. */
void pllm_report_print(const pllm_report *r, const pllm_engine_stats *es, FILE *f);
/* Machine-readable: a new JSON object (caller decrefs). */
json_t *pllm_report_json(const pllm_report *r, const pllm_engine_stats *es);

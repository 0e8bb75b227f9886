#include "engine/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void pllm_report_init(pllm_report *r, double t_start)
{
    memset(r, 0, sizeof *r);
    r->t_start = t_start;
    r->t_end = t_start;
}

void pllm_report_free(pllm_report *r)
{
    if (!r) return;
    free(r->ttft.v);
    free(r->tpot.v);
    free(r->latency.v);
    memset(r, 0, sizeof *r);
}

static pllm_status series_add(pllm_series *s, double x)
{
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 256;
        double *v = pllm_realloc(s->v, ncap * sizeof *v);
        if (!v) return PLLM_ERR_NOMEM;
        s->v = v;
        s->cap = ncap;
    }
    s->v[s->n++] = x;
    return PLLM_OK;
}

pllm_status pllm_report_add(pllm_report *r, const pllm_completion *c)
{
    if (c->t_finish > r->t_end) r->t_end = c->t_finish;
    if (c->finish == PLLM_FINISH_ERROR) {
        r->n_failed++;
        return PLLM_OK;
    }
    r->n_ok++;
    r->prompt_tokens += c->prompt_tokens;
    r->cached_tokens += c->cached_tokens;
    r->completion_tokens += c->n_tokens;
    PLLM_TRY(series_add(&r->latency, c->t_finish - c->t_arrival));
    if (c->n_tokens > 0 && c->t_first_token > 0) PLLM_TRY(series_add(&r->ttft, c->t_first_token - c->t_arrival));
    if (c->n_tokens > 1 && c->t_first_token > 0)
        PLLM_TRY(series_add(&r->tpot, (c->t_finish - c->t_first_token) / (double)(c->n_tokens - 1)));
    return PLLM_OK;
}

void pllm_report_add_rejected(pllm_report *r) { r->n_failed++; }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

pllm_summary pllm_series_summary(const pllm_series *s)
{
    pllm_summary out = {0, 0, 0};
    if (!s->n) return out;
    double *v = malloc(s->n * sizeof *v);
    if (!v) return out;
    memcpy(v, s->v, s->n * sizeof *v);
    qsort(v, s->n, sizeof *v, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < s->n; i++) sum += v[i];
    out.mean = sum / (double)s->n;
    out.median = s->n % 2 ? v[s->n / 2] : 0.5 * (v[s->n / 2 - 1] + v[s->n / 2]);
    /* p99 by linear interpolation between closest ranks (numpy's default). */
    double pos = 0.99 * (double)(s->n - 1);
    size_t lo = (size_t)floor(pos);
    size_t hi = lo + 1 < s->n ? lo + 1 : lo;
    out.p99 = v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
    free(v);
    return out;
}

static double elapsed(const pllm_report *r)
{
    double e = r->t_end - r->t_start;
    return e > 0 ? e : 1e-9;
}

void pllm_report_print(const pllm_report *r, const pllm_engine_stats *es, FILE *f)
{
    double t = elapsed(r);
    pllm_summary ttft = pllm_series_summary(&r->ttft), tpot = pllm_series_summary(&r->tpot),
                 lat = pllm_series_summary(&r->latency);
    fprintf(f, "============ pllm run ============\n");
    fprintf(f, "%-34s %lld\n", "Successful requests:", (long long)r->n_ok);
    fprintf(f, "%-34s %lld\n", "Failed requests:", (long long)r->n_failed);
    fprintf(f, "%-34s %.2f\n", "Duration (s):", t);
    fprintf(f, "%-34s %lld\n", "Total input tokens:", (long long)r->prompt_tokens);
    fprintf(f, "%-34s %lld\n", "Total generated tokens:", (long long)r->completion_tokens);
    fprintf(f, "%-34s %.2f\n", "Request throughput (req/s):", (double)r->n_ok / t);
    fprintf(f, "%-34s %.2f\n", "Input token throughput (tok/s):", (double)r->prompt_tokens / t);
    fprintf(f, "%-34s %.2f\n", "Output token throughput (tok/s):", (double)r->completion_tokens / t);
    fprintf(f, "%-34s %.2f\n", "Total token throughput (tok/s):", (double)(r->prompt_tokens + r->completion_tokens) / t);
    fprintf(f, "%-34s %.2f%%\n", "Prefix cache hit rate:",
            r->prompt_tokens ? 100.0 * (double)r->cached_tokens / (double)r->prompt_tokens : 0.0);
    fprintf(f, "---------- latency (ms) ----------\n");
    fprintf(f, "%-18s %10s %10s %10s\n", "", "mean", "median", "p99");
    fprintf(f, "%-18s %10.2f %10.2f %10.2f\n", "TTFT", ttft.mean * 1e3, ttft.median * 1e3, ttft.p99 * 1e3);
    fprintf(f, "%-18s %10.2f %10.2f %10.2f\n", "TPOT", tpot.mean * 1e3, tpot.median * 1e3, tpot.p99 * 1e3);
    fprintf(f, "%-18s %10.2f %10.2f %10.2f\n", "E2E latency", lat.mean * 1e3, lat.median * 1e3, lat.p99 * 1e3);
    if (es) {
        fprintf(f, "------------- engine -------------\n");
        fprintf(f, "%-34s %lld\n", "Steps:", (long long)es->steps);
        fprintf(f, "%-34s %lld\n", "Preemptions:", (long long)es->preemptions);
        fprintf(f, "%-34s %lld\n", "Prompt tokens computed:", (long long)es->prompt_tokens_computed);
        fprintf(f, "%-34s %lld\n", "Prompt tokens cached:", (long long)es->prompt_tokens_cached);
        fprintf(f, "%-34s %d / %d (block size %d)\n", "Peak KV blocks in use:", es->peak_blocks_used, es->n_blocks,
                es->block_size);
    }
    fprintf(f, "==================================\n");
}

static json_t *summary_json(const pllm_series *s)
{
    pllm_summary x = pllm_series_summary(s);
    return json_pack("{s:f, s:f, s:f}", "mean", x.mean * 1e3, "median", x.median * 1e3, "p99", x.p99 * 1e3);
}

json_t *pllm_report_json(const pllm_report *r, const pllm_engine_stats *es)
{
    double t = elapsed(r);
    json_t *o = json_object();
    json_object_set_new(o, "successful_requests", json_integer(r->n_ok));
    json_object_set_new(o, "failed_requests", json_integer(r->n_failed));
    json_object_set_new(o, "duration_s", json_real(t));
    json_object_set_new(o, "total_input_tokens", json_integer(r->prompt_tokens));
    json_object_set_new(o, "total_output_tokens", json_integer(r->completion_tokens));
    json_object_set_new(o, "request_throughput", json_real((double)r->n_ok / t));
    json_object_set_new(o, "input_throughput", json_real((double)r->prompt_tokens / t));
    json_object_set_new(o, "output_throughput", json_real((double)r->completion_tokens / t));
    json_object_set_new(o, "total_token_throughput", json_real((double)(r->prompt_tokens + r->completion_tokens) / t));
    json_object_set_new(o, "prefix_cache_hit_rate",
                        json_real(r->prompt_tokens ? (double)r->cached_tokens / (double)r->prompt_tokens : 0.0));
    json_object_set_new(o, "ttft_ms", summary_json(&r->ttft));
    json_object_set_new(o, "tpot_ms", summary_json(&r->tpot));
    json_object_set_new(o, "e2e_latency_ms", summary_json(&r->latency));
    if (es) {
        json_t *c = json_object();
        json_object_set_new(c, "steps", json_integer(es->steps));
        json_object_set_new(c, "preemptions", json_integer(es->preemptions));
        json_object_set_new(c, "prompt_tokens_computed", json_integer(es->prompt_tokens_computed));
        json_object_set_new(c, "prompt_tokens_cached", json_integer(es->prompt_tokens_cached));
        json_object_set_new(c, "output_tokens", json_integer(es->output_tokens));
        json_object_set_new(c, "peak_kv_blocks", json_integer(es->peak_blocks_used));
        json_object_set_new(c, "kv_blocks", json_integer(es->n_blocks));
        json_object_set_new(c, "block_size", json_integer(es->block_size));
        json_object_set_new(o, "engine", c);
    }
    return o;
}

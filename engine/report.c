#include "engine/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Histogram buckets: bucket k >= 1 holds [LO * G^(k-1), LO * G^k); bucket 0 holds [0, LO). */
#define SERIES_LO           1e-7
#define SERIES_G            1.002 /* 0.2% wide: the midpoint is within 0.1% of any value in the bucket */
#define PLLM_SERIES_BUCKETS 16000 /* LO * G^16000 ~ 8e6 s */

/* ---------------------------------------------------------------- series */

static size_t bucket_of(double x)
{
    if (!(x >= SERIES_LO)) return 0;
    double k = floor(log(x / SERIES_LO) / log(SERIES_G)) + 1;
    if (k >= PLLM_SERIES_BUCKETS - 1) return PLLM_SERIES_BUCKETS - 1;
    return (size_t)k;
}

/* Representative value of bucket k: the geometric middle. */
static double bucket_value(size_t k)
{
    if (k == 0) return SERIES_LO / 2;
    return SERIES_LO * pow(SERIES_G, (double)k - 0.5);
}

pllm_status pllm_series_add(pllm_series *s, double x)
{
    if (s->count == 0 || x < s->min) s->min = x;
    if (s->count == 0 || x > s->max) s->max = x;
    if (!s->hist && s->n == PLLM_SERIES_EXACT) {
        s->hist = pllm_calloc(PLLM_SERIES_BUCKETS, sizeof *s->hist);
        if (!s->hist) return PLLM_ERR_NOMEM;
        for (size_t i = 0; i < s->n; i++) s->hist[bucket_of(s->v[i])]++;
        free(s->v);
        s->v = NULL;
        s->n = s->cap = 0;
    }
    if (s->hist) {
        s->hist[bucket_of(x)]++;
    } else {
        if (s->n == s->cap) {
            size_t ncap = s->cap ? s->cap * 2 : 256;
            double *v = pllm_realloc(s->v, ncap * sizeof *v);
            if (!v) return PLLM_ERR_NOMEM;
            s->v = v;
            s->cap = ncap;
        }
        s->v[s->n++] = x;
    }
    s->count++;
    s->sum += x;
    s->sumsq += x * x;
    return PLLM_OK;
}

void pllm_series_free(pllm_series *s)
{
    free(s->v);
    free(s->hist);
    memset(s, 0, sizeof *s);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Value of rank r (0-based) in the histogram. */
static double hist_rank(const pllm_series *s, uint64_t r)
{
    uint64_t acc = 0;
    for (size_t k = 0; k < PLLM_SERIES_BUCKETS; k++) {
        acc += s->hist[k];
        if (acc > r) {
            double v = bucket_value(k);
            return v < s->min ? s->min : v > s->max ? s->max : v;
        }
    }
    return s->max;
}

/* Quantile q by linear interpolation between closest ranks. */
static double quantile(const pllm_series *s, const double *sorted, double q)
{
    double pos = q * (double)(s->count - 1);
    uint64_t lo = (uint64_t)floor(pos), hi = lo + 1 < s->count ? lo + 1 : lo;
    double a = sorted ? sorted[lo] : hist_rank(s, lo), b = sorted ? sorted[hi] : hist_rank(s, hi);
    return a + (b - a) * (pos - (double)lo);
}

pllm_summary pllm_series_summary(const pllm_series *s)
{
    pllm_summary out = {NAN, NAN, NAN, NAN, s->count};
    if (!s->count) return out;
    out.mean = s->sum / (double)s->count;
    double var = s->sumsq / (double)s->count - out.mean * out.mean;
    double *v = NULL;
    if (!s->hist) {
        /* exact: recompute the variance in two passes for accuracy */
        v = malloc(s->n * sizeof *v);
        if (!v) return out;
        memcpy(v, s->v, s->n * sizeof *v);
        qsort(v, s->n, sizeof *v, cmp_double);
        double acc = 0;
        for (size_t i = 0; i < s->n; i++) acc += (v[i] - out.mean) * (v[i] - out.mean);
        var = acc / (double)s->n;
    }
    out.std = sqrt(var > 0 ? var : 0);
    out.median = quantile(s, v, 0.5);
    out.p99 = quantile(s, v, 0.99);
    free(v);
    return out;
}

/* ---------------------------------------------------------------- Student's t */

/* Continued fraction of the regularized incomplete beta function (modified Lentz). */
static double beta_cf(double a, double b, double x)
{
    const double tiny = 1e-300;
    double c = 1, d = 1 - (a + b) * x / (a + 1);
    if (fabs(d) < tiny) d = tiny;
    d = 1 / d;
    double h = d;
    for (int m = 1; m <= 300; m++) {
        double m2 = 2.0 * m;
        double num = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
        d = 1 + num * d;
        c = 1 + num / c;
        if (fabs(d) < tiny) d = tiny;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        h *= d * c;
        num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
        d = 1 + num * d;
        c = 1 + num / c;
        if (fabs(d) < tiny) d = tiny;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return h;
}

/* I_x(a, b). */
static double inc_beta(double a, double b, double x)
{
    if (x <= 0) return 0;
    if (x >= 1) return 1;
    double lbt = lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x);
    if (x < (a + 1) / (a + b + 2)) return exp(lbt) * beta_cf(a, b, x) / a;
    return 1 - exp(lbt) * beta_cf(b, a, 1 - x) / b;
}

/* P(T <= t) for t >= 0. */
static double t_cdf(double t, double df)
{
    return 1 - 0.5 * inc_beta(df / 2, 0.5, df / (df + t * t));
}

double pllm_t_cdf(double t, double df)
{
    return t >= 0 ? t_cdf(t, df) : 1 - t_cdf(-t, df);
}

double pllm_t_quantile_975(int df)
{
    PLLM_ASSERT(df >= 1);
    double lo = 0, hi = 64;
    while (t_cdf(hi, df) < 0.975) hi *= 2;
    for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; i++) {
        double mid = 0.5 * (lo + hi);
        if (t_cdf(mid, df) < 0.975)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

pllm_interval pllm_interval95(const double *v, int n)
{
    pllm_interval out = {0, 0, 0, n};
    if (n <= 0) return out;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    out.mean = sum / n;
    out.lo = out.hi = out.mean;
    if (n < 2) return out;
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (v[i] - out.mean) * (v[i] - out.mean);
    double half = pllm_t_quantile_975(n - 1) * sqrt(ss / (n - 1)) / sqrt((double)n);
    out.lo = out.mean - half;
    out.hi = out.mean + half;
    return out;
}

/* ---------------------------------------------------------------- report */

void pllm_report_init(pllm_report *r, double t_start)
{
    memset(r, 0, sizeof *r);
    r->t_start = t_start;
    r->t_end = t_start;
}

void pllm_report_free(pllm_report *r)
{
    if (!r) return;
    pllm_series_free(&r->ttft);
    pllm_series_free(&r->tpot);
    pllm_series_free(&r->itl);
    pllm_series_free(&r->latency);
    free(r->runs);
    memset(r, 0, sizeof *r);
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
    PLLM_TRY(pllm_series_add(&r->latency, c->t_finish - c->t_arrival));
    if (c->n_tokens > 0 && c->t_first_token > 0)
        PLLM_TRY(pllm_series_add(&r->ttft, c->t_first_token - c->t_arrival));
    if (c->n_tokens > 1 && c->t_first_token > 0)
        PLLM_TRY(pllm_series_add(&r->tpot,
                                 (c->t_finish - c->t_first_token) / (double)(c->n_tokens - 1)));
    if (c->token_times) PLLM_TRY(pllm_report_add_token_times(r, c->token_times, c->n_tokens));
    return PLLM_OK;
}

pllm_status pllm_report_add_token_times(pllm_report *r, const double *t, int32_t n)
{
    for (int32_t i = 1; i < n; i++) PLLM_TRY(pllm_series_add(&r->itl, t[i] - t[i - 1]));
    return PLLM_OK;
}

void pllm_report_add_rejected(pllm_report *r)
{
    r->n_failed++;
    r->n_rejected++;
}

static pllm_run_totals current_run(const pllm_report *r)
{
    pllm_run_totals t = {
        .duration = r->t_end - r->t_start,
        .n_ok = r->n_ok - r->at_run_start.n_ok,
        .prompt_tokens = r->prompt_tokens - r->at_run_start.prompt_tokens,
        .completion_tokens = r->completion_tokens - r->at_run_start.completion_tokens,
    };
    if (!(t.duration > 0)) t.duration = 1e-9;
    return t;
}

pllm_status pllm_report_new_run(pllm_report *r, double t_start)
{
    pllm_run_totals *runs = pllm_realloc(r->runs, (size_t)(r->n_runs + 1) * sizeof *runs);
    if (!runs) return PLLM_ERR_NOMEM;
    r->runs = runs;
    r->runs[r->n_runs++] = current_run(r);
    r->at_run_start = (pllm_run_totals){0, r->n_ok, r->prompt_tokens, r->completion_tokens};
    r->t_start = r->t_end = t_start;
    return PLLM_OK;
}

int pllm_report_n_runs(const pllm_report *r)
{
    return r->n_runs + 1;
}

pllm_throughput pllm_report_run_throughput(const pllm_report *r, int i)
{
    pllm_run_totals t = i < r->n_runs ? r->runs[i] : current_run(r);
    return (pllm_throughput){
        .req_s = (double)t.n_ok / t.duration,
        .input_tok_s = (double)t.prompt_tokens / t.duration,
        .output_tok_s = (double)t.completion_tokens / t.duration,
        .total_tok_s = (double)(t.prompt_tokens + t.completion_tokens) / t.duration,
    };
}

/* Intervals of the four throughputs and the duration over all runs. */
typedef struct tp_intervals {
    pllm_interval req, in, out, total, duration;
} tp_intervals;

static tp_intervals intervals(const pllm_report *r)
{
    int n = pllm_report_n_runs(r);
    double *v = malloc((size_t)n * 5 * sizeof *v);
    tp_intervals out;
    memset(&out, 0, sizeof out);
    if (!v) return out;
    for (int i = 0; i < n; i++) {
        pllm_throughput t = pllm_report_run_throughput(r, i);
        v[i] = t.req_s;
        v[n + i] = t.input_tok_s;
        v[2 * n + i] = t.output_tok_s;
        v[3 * n + i] = t.total_tok_s;
        v[4 * n + i] = i < r->n_runs ? r->runs[i].duration : current_run(r).duration;
    }
    out.req = pllm_interval95(v, n);
    out.in = pllm_interval95(v + n, n);
    out.out = pllm_interval95(v + 2 * n, n);
    out.total = pllm_interval95(v + 3 * n, n);
    out.duration = pllm_interval95(v + 4 * n, n);
    /* the quantities are positive: a lower bound below 0 (few, scattered runs) says only that */
    pllm_interval *all[] = {&out.req, &out.in, &out.out, &out.total, &out.duration};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(all); i++) all[i]->lo = fmax(all[i]->lo, 0.0);
    free(v);
    return out;
}

static void print_tp(FILE *f, const char *label, pllm_interval iv)
{
    if (iv.n > 1)
        fprintf(f, "%-40s %.2f  (95%% CI %.2f .. %.2f)\n", label, iv.mean, iv.lo, iv.hi);
    else
        fprintf(f, "%-40s %.2f\n", label, iv.mean);
}

static void print_ms(FILE *f, const char *what, const char *label, const pllm_series *s)
{
    pllm_summary x = pllm_series_summary(s);
    char l[64];
    const char *names[3] = {"Mean", "Median", "P99"};
    double vals[3] = {x.mean, x.median, x.p99};
    for (int i = 0; i < 3; i++) {
        snprintf(l, sizeof l, "%s %s (ms):", names[i], label);
        if (x.count)
            fprintf(f, "%-40s %.2f\n", l, vals[i] * 1e3);
        else
            fprintf(f, "%-40s %s\n", l, "n/a");
    }
    (void)what;
}

static void rule(FILE *f, const char *title)
{
    int w = 50, n = (int)strlen(title);
    int left = (w - n) / 2, right = w - n - left;
    fprintf(f, "%.*s%s%.*s\n", left, "==================================================", title,
            right, "==================================================");
}

static void sub(FILE *f, const char *title)
{
    int w = 50, n = (int)strlen(title);
    int left = (w - n) / 2, right = w - n - left;
    fprintf(f, "%.*s%s%.*s\n", left, "--------------------------------------------------", title,
            right, "--------------------------------------------------");
}

void pllm_report_print(const pllm_report *r, const pllm_engine_stats *es, const char *title,
                       const pllm_report_note *notes, int n_notes, FILE *f)
{
    int runs = pllm_report_n_runs(r);
    tp_intervals iv = intervals(r);
    char t[80];
    snprintf(t, sizeof t, " %s ", title ? title : "pllm run");
    rule(f, t);
    if (runs > 1)
        fprintf(f, "%-40s %d (counts are per run; throughput: mean and 95%% CI)\n", "Runs:", runs);
    fprintf(f, "%-40s %lld\n", "Successful requests:", (long long)(r->n_ok / runs));
    fprintf(f, "%-40s %lld", "Failed requests:", (long long)(r->n_failed / runs));
    if (r->n_rejected)
        fprintf(f, " (%lld rejected input records)", (long long)(r->n_rejected / runs));
    fputc('\n', f);
    print_tp(f, "Duration (s):", iv.duration);
    fprintf(f, "%-40s %lld\n", "Total input tokens:", (long long)(r->prompt_tokens / runs));
    fprintf(f, "%-40s %lld\n", "Total generated tokens:", (long long)(r->completion_tokens / runs));
    print_tp(f, "Request throughput (req/s):", iv.req);
    print_tp(f, "Input token throughput (tok/s):", iv.in);
    print_tp(f, "Output token throughput (tok/s):", iv.out);
    print_tp(f, "Total token throughput (tok/s):", iv.total);
    fprintf(f, "%-40s %.2f%%\n", "Prefix cache hit rate:",
            r->prompt_tokens ? 100.0 * (double)r->cached_tokens / (double)r->prompt_tokens : 0.0);
    sub(f, "Time to First Token");
    print_ms(f, "ttft", "TTFT", &r->ttft);
    sub(f, "Time per Output Token (excl. 1st token)");
    print_ms(f, "tpot", "TPOT", &r->tpot);
    sub(f, "Inter-token Latency");
    print_ms(f, "itl", "ITL", &r->itl);
    sub(f, "End-to-end Latency");
    print_ms(f, "e2el", "E2EL", &r->latency);
    if (es) {
        sub(f, "Engine counters (exact)");
        fprintf(f, "%-40s %lld\n", "Steps:", (long long)es->steps);
        fprintf(f, "%-40s %lld\n", "Preemptions:", (long long)es->preemptions);
        fprintf(f, "%-40s %lld\n",
                "Prompt tokens computed:", (long long)es->prompt_tokens_computed);
        fprintf(f, "%-40s %lld\n", "Prompt tokens cached:", (long long)es->prompt_tokens_cached);
        fprintf(f, "%-40s %d / %d (block size %d)\n",
                "Peak KV blocks in use:", es->peak_blocks_used, es->n_blocks, es->block_size);
        if (es->n_blocks_sw > 0) /* the hybrid KV layout: the count above is the global pool's */
            fprintf(f,
                    "%-40s %d / %d (%d sliding layers, window %d; the pool above holds the "
                    "other layers; %.1f MB in all)\n",
                    "Peak sliding-window KV blocks in use:", es->peak_blocks_used_sw,
                    es->n_blocks_sw, es->n_layer_sw, es->kv_window, (double)es->kv_bytes / 1e6);
        if (es->n_blocks_sw > 0 && es->kv_split_seqs > 0)
            fprintf(f,
                    "%-40s the workload's %lld sequences (prompt + max_tokens: mean %.0f tokens)\n",
                    "KV pools split for:", (long long)es->kv_split_seqs, es->kv_split_mean_len);
        else if (es->n_blocks_sw > 0)
            fprintf(f, "%-40s sequences of max_model_len (%.0f tokens; the workload is unknown)\n",
                    "KV pools split for:", es->kv_split_mean_len);
        else if (es->kv_hybrid_off && es->kv_split_seqs > 0)
            fprintf(f, "%-40s %s (for the workload's %lld sequences, mean %.0f tokens)\n",
                    "Sliding-window KV pool:", es->kv_hybrid_off, (long long)es->kv_split_seqs,
                    es->kv_split_mean_len);
        else if (es->kv_hybrid_off)
            fprintf(f, "%-40s %s\n", "Sliding-window KV pool:", es->kv_hybrid_off);
        if (es->spec_drafted > 0 || es->spec_steps > 0) {
            fprintf(f, "%-40s %lld of %lld (%.2f%%), in %lld steps\n",
                    "Speculation: drafts accepted:", (long long)es->spec_accepted,
                    (long long)es->spec_drafted,
                    es->spec_drafted ? 100.0 * (double)es->spec_accepted / (double)es->spec_drafted
                                     : 0.0,
                    (long long)es->spec_steps);
            if (es->spec_cost_a > 0 || es->spec_cost_b > 0)
                fprintf(f, "%-40s %.3f ms + %.4f ms per sequence + %.4f ms per draft\n",
                        "Speculation: fitted step time:", 1e3 * es->spec_cost_a,
                        1e3 * es->spec_cost_c, 1e3 * es->spec_cost_b);
        }
        if (es->decode_samples > 0)
            fprintf(f, "%-40s %.3f\n", "Tokens per sequence step:",
                    (double)es->decode_tokens / (double)es->decode_samples);
        fprintf(f,
                "%-40s %lld overlapped, %lld synchronous (%lld for penalties, %lld speculative)\n",
                "Steps in flight:", (long long)es->steps_overlapped, (long long)es->steps_sync,
                (long long)es->sync_penalties, (long long)es->sync_speculation);
        if (es->steps_overlapped > 0)
            fprintf(f, "%-40s %lld\n",
                    "Rows computed after their sequence ended:", (long long)es->wasted_slots);
        if (es->device_seconds >= 0 && es->step_wall_seconds > 0)
            fprintf(f, "%-40s %.1f%% (%.3f of %.3f s, CUDA events)\n",
                    "Device busy:", 100.0 * es->device_seconds / es->step_wall_seconds,
                    es->device_seconds, es->step_wall_seconds);
        else
            fprintf(f, "%-40s n/a (host backend)\n", "Device busy:");
    }
    for (int i = 0; i < n_notes; i++) {
        char l[80];
        snprintf(l, sizeof l, "%s:", notes[i].label);
        fprintf(f, "%-40s %s\n", l, notes[i].value);
    }
    fprintf(f, "==================================================\n");
}

static json_t *num_or_null(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

static void put_series(json_t *o, const char *name, const pllm_series *s)
{
    pllm_summary x = pllm_series_summary(s);
    char k[64];
    snprintf(k, sizeof k, "mean_%s_ms", name);
    json_object_set_new(o, k, num_or_null(x.mean * 1e3));
    snprintf(k, sizeof k, "median_%s_ms", name);
    json_object_set_new(o, k, num_or_null(x.median * 1e3));
    snprintf(k, sizeof k, "std_%s_ms", name);
    json_object_set_new(o, k, num_or_null(x.std * 1e3));
    snprintf(k, sizeof k, "p99_%s_ms", name);
    json_object_set_new(o, k, num_or_null(x.p99 * 1e3));
}

static json_t *interval_json(pllm_interval iv)
{
    return json_pack("{s:f, s:f, s:f, s:i}", "mean", iv.mean, "ci95_low", iv.lo, "ci95_high", iv.hi,
                     "n", iv.n);
}

json_t *pllm_report_json(const pllm_report *r, const pllm_engine_stats *es)
{
    int runs = pllm_report_n_runs(r);
    tp_intervals iv = intervals(r);
    json_t *o = json_object();
    json_object_set_new(o, "num_runs", json_integer(runs));
    json_object_set_new(o, "completed", json_integer(r->n_ok / runs));
    json_object_set_new(o, "failed", json_integer(r->n_failed / runs));
    json_object_set_new(o, "rejected", json_integer(r->n_rejected / runs));
    json_object_set_new(o, "duration", json_real(iv.duration.mean));
    json_object_set_new(o, "total_input_tokens", json_integer(r->prompt_tokens / runs));
    json_object_set_new(o, "total_output_tokens", json_integer(r->completion_tokens / runs));
    json_object_set_new(o, "total_cached_tokens", json_integer(r->cached_tokens / runs));
    json_object_set_new(o, "request_throughput", json_real(iv.req.mean));
    json_object_set_new(o, "input_throughput", json_real(iv.in.mean));
    json_object_set_new(o, "output_throughput", json_real(iv.out.mean));
    json_object_set_new(o, "total_token_throughput", json_real(iv.total.mean));
    json_object_set_new(
        o, "prefix_cache_hit_rate",
        json_real(r->prompt_tokens ? (double)r->cached_tokens / (double)r->prompt_tokens : 0.0));
    put_series(o, "ttft", &r->ttft);
    put_series(o, "tpot", &r->tpot);
    put_series(o, "itl", &r->itl);
    put_series(o, "e2el", &r->latency);
    json_object_set_new(o, "throughput_ci95",
                        json_pack("{s:o, s:o, s:o, s:o, s:o}", "request_throughput",
                                  interval_json(iv.req), "input_throughput", interval_json(iv.in),
                                  "output_throughput", interval_json(iv.out),
                                  "total_token_throughput", interval_json(iv.total), "duration",
                                  interval_json(iv.duration)));
    json_t *per = json_array();
    for (int i = 0; i < runs; i++) {
        pllm_throughput t = pllm_report_run_throughput(r, i);
        double d = i < r->n_runs ? r->runs[i].duration : r->t_end - r->t_start;
        json_array_append_new(per, json_pack("{s:f, s:f, s:f, s:f, s:f}", "duration", d,
                                             "request_throughput", t.req_s, "input_throughput",
                                             t.input_tok_s, "output_throughput", t.output_tok_s,
                                             "total_token_throughput", t.total_tok_s));
    }
    json_object_set_new(o, "runs", per);
    if (es) {
        json_t *c = json_object();
        json_object_set_new(c, "steps", json_integer(es->steps));
        json_object_set_new(c, "preemptions", json_integer(es->preemptions));
        json_object_set_new(c, "prompt_tokens", json_integer(es->prompt_tokens));
        json_object_set_new(c, "prompt_tokens_computed", json_integer(es->prompt_tokens_computed));
        json_object_set_new(c, "prompt_tokens_cached", json_integer(es->prompt_tokens_cached));
        json_object_set_new(c, "output_tokens", json_integer(es->output_tokens));
        json_object_set_new(c, "requests_finished", json_integer(es->requests_finished));
        json_object_set_new(c, "requests_failed", json_integer(es->requests_failed));
        json_object_set_new(c, "peak_kv_blocks", json_integer(es->peak_blocks_used));
        json_object_set_new(c, "kv_blocks", json_integer(es->n_blocks));
        if (es->n_blocks_sw > 0) {
            json_object_set_new(c, "kv_blocks_sw", json_integer(es->n_blocks_sw));
            json_object_set_new(c, "peak_kv_blocks_sw", json_integer(es->peak_blocks_used_sw));
            json_object_set_new(c, "kv_window", json_integer(es->kv_window));
            json_object_set_new(c, "kv_split_seqs", json_integer(es->kv_split_seqs));
            json_object_set_new(c, "kv_split_mean_len", json_real(es->kv_split_mean_len));
        }
        json_object_set_new(c, "block_size", json_integer(es->block_size));
        json_object_set_new(c, "spec_steps", json_integer(es->spec_steps));
        json_object_set_new(c, "spec_drafted", json_integer(es->spec_drafted));
        json_object_set_new(c, "spec_accepted", json_integer(es->spec_accepted));
        json_object_set_new(c, "spec_acceptance_rate",
                            json_real(es->spec_drafted
                                          ? (double)es->spec_accepted / (double)es->spec_drafted
                                          : 0.0));
        json_object_set_new(c, "steps_overlapped", json_integer(es->steps_overlapped));
        json_object_set_new(c, "steps_sync", json_integer(es->steps_sync));
        json_object_set_new(c, "steps_sync_penalties", json_integer(es->sync_penalties));
        json_object_set_new(c, "pending_penalty_samples",
                            json_integer(es->pending_penalty_samples));
        json_object_set_new(c, "steps_sync_speculation", json_integer(es->sync_speculation));
        json_object_set_new(c, "wasted_rows", json_integer(es->wasted_slots));
        json_object_set_new(c, "decode_samples", json_integer(es->decode_samples));
        json_object_set_new(c, "decode_tokens", json_integer(es->decode_tokens));
        json_object_set_new(c, "tokens_per_seq_step",
                            json_real(es->decode_samples
                                          ? (double)es->decode_tokens / (double)es->decode_samples
                                          : 0.0));
        json_object_set_new(o, "counters", c);
        /* timings (not counters: the gate compares counters exactly between runs) */
        json_object_set_new(o, "device_busy_seconds",
                            es->device_seconds >= 0 ? json_real(es->device_seconds) : json_null());
        json_object_set_new(o, "device_busy_fraction",
                            es->device_seconds >= 0 && es->step_wall_seconds > 0
                                ? json_real(es->device_seconds / es->step_wall_seconds)
                                : json_null());
    }
    return o;
}

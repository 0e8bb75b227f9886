/* cli_unit: the statistics report (engine/report.c): series summaries against a sorted
 * reference, exact and histogram mode, Student's t quantiles against published table values,
 * confidence intervals, runs and throughputs, TPOT/ITL definitions, the JSON keys. */
#include "engine/report.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy.percentile(v, q) with linear interpolation, on a sorted copy. */
static double ref_quantile(const double *sorted, size_t n, double q)
{
    double pos = q * (double)(n - 1);
    size_t lo = (size_t)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - (double)lo);
}

static void check_series(size_t n, uint64_t seed, double tol, const char *what)
{
    pllm_series s = {0};
    double *v = malloc(n * sizeof *v);
    uint64_t rng = seed;
    for (size_t i = 0; i < n; i++) {
        /* log-uniform between 10 us and 100 s: latencies span orders of magnitude */
        double u = (double)(pllm_test_rand(&rng) >> 11) * 0x1p-53;
        v[i] = 1e-5 * pow(1e7, u);
        CHECK_OK(pllm_series_add(&s, v[i]));
    }
    pllm_summary x = pllm_series_summary(&s);
    qsort(v, n, sizeof *v, cmp);
    double sum = 0, ss = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    double mean = sum / (double)n;
    for (size_t i = 0; i < n; i++) ss += (v[i] - mean) * (v[i] - mean);
    double std = sqrt(ss / (double)n);
    double med = ref_quantile(v, n, 0.5), p99 = ref_quantile(v, n, 0.99);
    double e_mean = fabs(x.mean - mean) / mean,
           e_std = std > 0 ? fabs(x.std - std) / std : fabs(x.std);
    double e_med = fabs(x.median - med) / med, e_p99 = fabs(x.p99 - p99) / p99;
    printf("series %-9s n=%-7zu rel err: mean %.1e std %.1e median %.1e p99 %.1e (bound %.0e)\n",
           what, n, e_mean, e_std, e_med, e_p99, tol);
    CHECK(x.count == n);
    CHECK(e_mean < 1e-12 && e_std < 1e-6);
    CHECK(e_med <= tol && e_p99 <= tol);
    free(v);
    pllm_series_free(&s);
}

static void test_series(void)
{
    check_series(1, 1, 1e-15, "exact");
    check_series(2, 2, 1e-15, "exact");
    check_series(1001, 3, 1e-15, "exact");
    check_series(PLLM_SERIES_EXACT, 4, 1e-15, "exact");
    check_series(300000, 5, 1e-3, "histogram"); /* bucketed: within 0.1% */
    pllm_series e = {0};
    pllm_summary x = pllm_series_summary(&e);
    CHECK(x.count == 0 && isnan(x.mean) && isnan(x.p99));
}

static void test_t_quantiles(void)
{
    /* two-sided 95% critical values (any statistics table) */
    const struct {
        int df;
        double t;
    } tab[] = {{1, 12.7062047362}, {2, 4.3026527297},   {3, 3.1824463053},
               {4, 2.7764451052},  {5, 2.5705818356},   {9, 2.2621571628},
               {29, 2.0452296421}, {100, 1.9839715185}, {1000, 1.9623390808}};
    double worst = 0;
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        double t = pllm_t_quantile_975(tab[i].df), e = fabs(t - tab[i].t) / tab[i].t;
        worst = e > worst ? e : worst;
        if (e > 1e-8) {
            fprintf(stderr, "t(0.975, %d) = %.10f, want %.10f\n", tab[i].df, t, tab[i].t);
            pllm_test_failures++;
        }
    }
    printf("student t: %zu table values, max rel err %.1e\n", sizeof tab / sizeof tab[0], worst);
    const double v[] = {10, 12, 11, 13};
    pllm_interval iv = pllm_interval95(v, 4);
    /* mean 11.5, sample sd sqrt(5/3), half width t3 * sd / 2 */
    double half = 3.1824463053 * sqrt(5.0 / 3.0) / 2;
    CHECK(fabs(iv.mean - 11.5) < 1e-12 && fabs(iv.hi - iv.mean - half) < 1e-8 &&
          fabs(iv.mean - iv.lo - half) < 1e-8);
    iv = pllm_interval95(v, 1);
    CHECK(iv.n == 1 && iv.lo == 10 && iv.hi == 10 && iv.mean == 10);
}

static pllm_completion completion(double arrival, double first, double finish, int32_t n_tokens,
                                  int32_t prompt, int32_t cached)
{
    return (pllm_completion){.finish = PLLM_FINISH_LENGTH,
                             .n_tokens = n_tokens,
                             .prompt_tokens = prompt,
                             .cached_tokens = cached,
                             .t_arrival = arrival,
                             .t_first_token = first,
                             .t_finish = finish};
}

/* Two runs far apart: Student's t interval reaches below 0; the report truncates it at 0. */
static void test_interval_clamp(void)
{
    pllm_report r;
    pllm_report_init(&r, 0.0);
    pllm_completion a = completion(0.0, 0.5, 1.0, 2, 10, 0),
                    b = completion(10.0, 10.5, 110.0, 2, 10, 0);
    CHECK_OK(pllm_report_add(&r, &a)); /* run 1: 1 s */
    CHECK_OK(pllm_report_new_run(&r, 10.0));
    CHECK_OK(pllm_report_add(&r, &b)); /* run 2: 100 s */
    json_t *j = pllm_report_json(&r, NULL);
    const json_t *ci = json_object_get(j, "throughput_ci95");
    const json_t *req = json_object_get(ci, "request_throughput"),
                 *dur = json_object_get(ci, "duration");
    CHECK(fabs(json_real_value(json_object_get(req, "mean")) - 0.505) < 1e-12 &&
          json_real_value(json_object_get(req, "ci95_low")) == 0.0 &&
          json_real_value(json_object_get(req, "ci95_high")) > 0.505);
    CHECK(fabs(json_real_value(json_object_get(dur, "mean")) - 50.5) < 1e-12 &&
          json_real_value(json_object_get(dur, "ci95_low")) == 0.0);
    json_decref(j);
    pllm_report_free(&r);
}

static void test_report(void)
{
    pllm_report r;
    pllm_report_init(&r, 100.0);
    /* a's token times give ITL gaps 0.5 0.25 0.75 0.5; b has one token (no gap); the failed
     * f's times are not counted */
    const double times[] = {100.5, 101.0, 101.25, 102.0, 102.5}, btimes[] = {101.0},
                 ftimes[] = {100.1, 100.9};
    pllm_completion a = completion(100.0, 100.5, 102.5, 5, 10, 4),
                    b = completion(100.0, 101.0, 104.0, 1, 30, 0);
    a.token_times = times;
    b.token_times = btimes;
    CHECK_OK(pllm_report_add(&r, &a));
    CHECK_OK(pllm_report_add(&r, &b));
    pllm_completion f = completion(100, 100.1, 101, 2, 3, 0);
    f.finish = PLLM_FINISH_ERROR;
    f.token_times = ftimes;
    CHECK_OK(pllm_report_add(&r, &f));
    pllm_report_add_rejected(&r);
    /* duration 4 s: 2 ok requests, 40 prompt tokens, 6 generated */
    pllm_throughput t = pllm_report_run_throughput(&r, 0);
    CHECK(fabs(t.req_s - 0.5) < 1e-12 && fabs(t.input_tok_s - 10) < 1e-12 &&
          fabs(t.output_tok_s - 1.5) < 1e-12 && fabs(t.total_tok_s - 11.5) < 1e-12);
    pllm_summary tpot = pllm_series_summary(&r.tpot), ttft = pllm_series_summary(&r.ttft),
                 itl = pllm_series_summary(&r.itl);
    CHECK(tpot.count == 1 &&
          fabs(tpot.mean - 0.5) < 1e-12); /* (102.5 - 100.5) / 4; b has one token: no TPOT */
    CHECK(ttft.count == 2 && fabs(ttft.mean - 0.75) < 1e-12);
    CHECK(itl.count == 4 && fabs(itl.mean - 0.5) < 1e-12 && fabs(itl.median - 0.5) < 1e-12);
    /* numpy: np.percentile([0.5, 0.25, 0.75, 0.5], 99) = 0.7425 */
    CHECK(fabs(itl.p99 - 0.7425) < 1e-12);
    pllm_engine_stats es = {.steps = 7,
                            .prompt_tokens = 40,
                            .prompt_tokens_computed = 36,
                            .prompt_tokens_cached = 4,
                            .n_blocks = 10,
                            .block_size = 16};
    json_t *j = pllm_report_json(&r, &es);
    const char *keys[] = {"completed",
                          "failed",
                          "rejected",
                          "duration",
                          "total_input_tokens",
                          "total_output_tokens",
                          "request_throughput",
                          "input_throughput",
                          "output_throughput",
                          "total_token_throughput",
                          "prefix_cache_hit_rate",
                          "mean_ttft_ms",
                          "median_ttft_ms",
                          "std_ttft_ms",
                          "p99_ttft_ms",
                          "mean_tpot_ms",
                          "p99_tpot_ms",
                          "mean_itl_ms",
                          "median_itl_ms",
                          "p99_itl_ms",
                          "mean_e2el_ms",
                          "median_e2el_ms",
                          "p99_e2el_ms",
                          "throughput_ci95",
                          "runs",
                          "counters"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!json_object_get(j, keys[i])) {
            fprintf(stderr, "report JSON lacks %s\n", keys[i]);
            pllm_test_failures++;
        }
    CHECK(json_integer_value(json_object_get(j, "completed")) == 2 &&
          json_integer_value(json_object_get(j, "failed")) == 2 &&
          json_integer_value(json_object_get(j, "rejected")) == 1);
    CHECK(fabs(json_real_value(json_object_get(j, "prefix_cache_hit_rate")) - 0.1) < 1e-12);
    CHECK(fabs(json_real_value(json_object_get(j, "mean_e2el_ms")) - 3250) < 1e-6);
    CHECK(json_integer_value(json_object_get(json_object_get(j, "counters"), "steps")) == 7);
    json_decref(j);

    /* a second run twice as fast: per-run throughputs, mean and interval */
    CHECK_OK(pllm_report_new_run(&r, 200.0));
    pllm_completion a2 = completion(200.0, 200.25, 201.25, 5, 10, 4),
                    b2 = completion(200.0, 200.5, 202.0, 1, 30, 0);
    CHECK_OK(pllm_report_add(&r, &a2));
    CHECK_OK(pllm_report_add(&r, &b2));
    CHECK(pllm_report_n_runs(&r) == 2);
    pllm_throughput t2 = pllm_report_run_throughput(&r, 1);
    CHECK(fabs(t2.req_s - 1.0) < 1e-12 &&
          fabs(pllm_report_run_throughput(&r, 0).req_s - 0.5) < 1e-12);
    j = pllm_report_json(&r, NULL);
    json_t *ci = json_object_get(json_object_get(j, "throughput_ci95"), "request_throughput");
    double half = 12.7062047362 * sqrt(0.125) / sqrt(2.0); /* sd of {0.5, 1} = sqrt(0.125) */
    CHECK(fabs(json_real_value(json_object_get(j, "request_throughput")) - 0.75) < 1e-12);
    CHECK(fabs(json_real_value(json_object_get(ci, "ci95_high")) - 0.75 - half) < 1e-6);
    CHECK(json_integer_value(json_object_get(j, "completed")) == 2); /* per run */
    CHECK(json_array_size(json_object_get(j, "runs")) == 2);
    json_decref(j);
    FILE *devnull = fopen("/dev/null", "w");
    pllm_report_print(&r, &es, "unit", NULL, 0, devnull);
    fclose(devnull);
    pllm_report_free(&r);
}

int main(void)
{
    test_series();
    test_t_quantiles();
    test_report();
    test_interval_clamp();
    return pllm_test_finish("cli_unit");
}

/*
 * gate.c: the CI gate (gate.h).
 */
#include "cmd/gate.h"

#include "model/common.h"
#include "engine/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void mean_var(const double *v, int n, double *mean, double *var)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (v[i] - *mean) * (v[i] - *mean);
    *var = n > 1 ? ss / (n - 1) : 0;
}

void cmd_gate_judge(const double *base, int nb, const double *cur, int nc, double max_reg,
                    cmd_gate_verdict *v)
{
    double mb, vb, mc, vc;
    mean_var(base, nb, &mb, &vb);
    mean_var(cur, nc, &mc, &vc);
    v->change_pct = mb > 0 ? 100.0 * (mc - mb) / mb : 0;
    v->p_real = v->p_beyond = v->band_pct = NAN;
    v->df_kind = 0;
    /* the limit as a value: the baseline scaled by (1 - max_reg), its variance by the square */
    const double k = 1 - max_reg / 100, lim = k * mb;
    double se = 0, se_lim = 0, df = 0;
    if (nb > 1 && nc > 1) { /* Welch */
        double a = vb / nb, b = vc / nc, al = k * k * a;
        se = sqrt(a + b);
        se_lim = sqrt(al + b);
        df = al + b > 0 ? (al + b) * (al + b) / (al * al / (nb - 1) + b * b / (nc - 1))
                        : nb + nc - 2;
        v->df_kind = 2;
    } else if (nb > 1 || nc > 1) { /* one run against the other side's spread */
        int n = nb > 1 ? nb : nc;
        double var = nb > 1 ? vb : vc;
        se = sqrt(var * (1 + 1.0 / n));
        se_lim = nb > 1 ? k * se : se;
        df = n - 1;
        v->df_kind = 1;
        if (mb > 0) v->band_pct = 100.0 * pllm_t_quantile_975(n - 1) * se / mb;
    }
    if (v->df_kind > 0) {
        v->p_real = se > 0 ? pllm_t_cdf((mb - mc) / se, df) : (mc < mb ? 1.0 : 0.0);
        v->p_beyond = se_lim > 0 ? pllm_t_cdf((lim - mc) / se_lim, df) : (mc < lim ? 1.0 : 0.0);
        v->fail = v->change_pct < -max_reg && v->p_beyond >= 0.95;
    } else {
        v->fail = v->change_pct < -max_reg;
    }
}

static double jnum(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* The per-run values of a throughput (the "runs" list), or its one value when the file has no
 * list. Caller frees; NULL when absent. */
static double *runs_of(const json_t *doc, const char *key, int *n)
{
    const json_t *runs = json_object_get(doc, "runs");
    size_t m = json_is_array(runs) ? json_array_size(runs) : 0;
    double *v = malloc((m ? m : 1) * sizeof *v);
    if (!v) return NULL;
    for (size_t i = 0; i < m; i++) {
        v[i] = jnum(json_array_get(runs, i), key);
        if (!isfinite(v[i])) m = 0; /* a damaged list: fall back to the mean */
    }
    if (m == 0) {
        v[0] = jnum(doc, key);
        if (!isfinite(v[0])) {
            free(v);
            return NULL;
        }
        m = 1;
    }
    *n = (int)m;
    return v;
}

int cmd_gate(const json_t *base, const json_t *cur, double max_reg, const char *base_path)
{
    const json_t *bw = json_object_get(base, "workload"), *cw = json_object_get(cur, "workload");
    if (!json_is_object(bw)) {
        fprintf(stderr, "pllm: baseline %s: not a pllm bench --stats-json file (no \"workload\")\n",
                base_path);
        return 3;
    }
    /* comparability: every workload field except where the dataset file lives */
    pllm_buf diff = {0};
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)cw, k, v)
    {
        if (!strcmp(k, "dataset_path")) continue;
        if (!json_equal(v, json_object_get(bw, k))) {
            char *a = json_dumps(json_object_get(bw, k), JSON_ENCODE_ANY | JSON_COMPACT);
            char *b = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            pllm_buf_appendf(&diff, "\n      %s: baseline %s, now %s", k, a ? a : "(absent)",
                             b ? b : "?");
            free(a);
            free(b);
        }
    }
    json_object_foreach((json_t *)bw, k, v)
    {
        if (strcmp(k, "dataset_path") && !json_object_get(cw, k))
            pllm_buf_appendf(&diff, "\n      %s: only in the baseline", k);
    }
    if (diff.n) {
        fprintf(stderr,
                "pllm: the baseline %s is not comparable: it measured a different workload:%s\n"
                "      (not a regression: rerun the baseline with this workload, or this bench "
                "with the baseline's)\n",
                base_path, diff.s);
        pllm_buf_free(&diff);
        return 3;
    }
    const json_t *bs = json_object_get(base, "setup"), *cs = json_object_get(cur, "setup");
    if (!json_equal(bs, cs)) {
        char *a = json_dumps(bs, JSON_COMPACT), *b = json_dumps(cs, JSON_COMPACT);
        fprintf(stderr,
                "pllm: warning: the setup differs from the baseline's (timings may not compare): "
                "baseline %s, now %s\n",
                a ? a : "?", b ? b : "?");
        free(a);
        free(b);
    }
    int fails = 0;
    fprintf(stderr, "================ pllm bench vs baseline ================\n");
    fprintf(stderr, "baseline: %s\n", base_path);
    fprintf(stderr, "%-34s %14s %14s %9s %8s %9s  %s\n", "metric", "baseline", "current", "change",
            "P(drop)", "P(>limit)", "gate");
    static const struct {
        const char *key, *label;
    } tput[] = {{"request_throughput", "Request throughput (req/s)"},
                {"input_throughput", "Input token throughput (tok/s)"},
                {"output_throughput", "Output token throughput (tok/s)"},
                {"total_token_throughput", "Total token throughput (tok/s)"}};
    cmd_gate_verdict first = {0};
    int nb = 0, nc = 0;
    for (size_t i = 0; i < PLLM_ARRAY_LEN(tput); i++) {
        double *bv = runs_of(base, tput[i].key, &nb), *cv = runs_of(cur, tput[i].key, &nc);
        cmd_gate_verdict vd = {.fail = true, .p_real = NAN, .band_pct = NAN};
        bool ok = bv && cv;
        for (int j = 0; ok && j < nb; j++) ok = bv[j] > 0;
        for (int j = 0; ok && j < nc; j++) ok = cv[j] >= 0;
        if (ok) cmd_gate_judge(bv, nb, cv, nc, max_reg, &vd);
        if (i == 0) first = vd;
        fails += vd.fail;
        char p[16] = "n/a", pb[16] = "n/a";
        if (isfinite(vd.p_real)) snprintf(p, sizeof p, "%.3f", vd.p_real);
        if (isfinite(vd.p_beyond)) snprintf(pb, sizeof pb, "%.3f", vd.p_beyond);
        fprintf(stderr, "%-34s %14.2f %14.2f %+8.1f%% %8s %9s  %s\n", tput[i].label,
                jnum(base, tput[i].key), jnum(cur, tput[i].key), vd.change_pct, p, pb,
                !ok                        ? "FAIL (missing or not positive)"
                : vd.fail                  ? "FAIL (a drop past the limit, beyond the noise)"
                : vd.change_pct < -max_reg ? "ok (within the noise)"
                                           : "ok");
        free(bv);
        free(cv);
    }
    if (first.df_kind == 2)
        fprintf(stderr,
                "gate: %d baseline and %d current runs, Welch's t-test: a throughput fails when "
                "it dropped by more than %g%% with P(>limit) >= 0.95\n",
                nb, nc, max_reg);
    else if (first.df_kind == 1)
        fprintf(stderr,
                "gate: one run against the other side's %d-run spread (one run's noise: +-%.1f%%): "
                "a throughput fails when it dropped by more than %g%% with P(>limit) >= 0.95%s\n",
                nb > 1 ? nb : nc, first.band_pct, max_reg,
                first.band_pct > max_reg ? "; the limit is inside one run's noise: measure "
                                           "with --repeat 3 or more (both sides) for a sharper gate"
                                         : "");
    else
        fprintf(stderr,
                "gate: warning: the baseline and this bench have one run each, so the noise is "
                "unknown and a drop past %g%% fails even when it is noise; save the baseline and "
                "run the gate with --repeat 3 or more\n",
                max_reg);
    static const char *const lat[] = {"mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
                                      "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
                                      "mean_itl_ms",  "median_itl_ms",  "p99_itl_ms",
                                      "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms"};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(lat); i++) {
        double a = jnum(base, lat[i]), b = jnum(cur, lat[i]);
        if (!isfinite(a) || !isfinite(b)) continue;
        fprintf(stderr, "%-34s %14.2f %14.2f %+8.1f%%  %s\n", lat[i], a, b,
                a > 0 ? 100.0 * (b - a) / a : 0.0, "(info)");
    }
    static const char *const totals[] = {"completed", "failed", "total_input_tokens",
                                         "total_output_tokens", "total_cached_tokens"};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(totals); i++) {
        const json_t *a = json_object_get(base, totals[i]), *b = json_object_get(cur, totals[i]);
        bool same = json_equal(a, b);
        fails += !same;
        fprintf(stderr, "%-34s %14lld %14lld %9s  %s\n", totals[i],
                (long long)json_integer_value(a), (long long)json_integer_value(b),
                same ? "=" : "changed", same ? "ok (exact)" : "FAIL (exact)");
    }
    const json_t *bc = json_object_get(base, "counters"), *cc = json_object_get(cur, "counters");
    json_object_foreach((json_t *)cc, k, v)
    {
        const json_t *a = json_object_get(bc, k);
        bool same = json_equal(a, v);
        fails += !same;
        fprintf(stderr, "%-34s %14lld %14lld %9s  %s\n", k, (long long)json_integer_value(a),
                (long long)json_integer_value(v), same ? "=" : "changed",
                same ? "ok (exact)" : "FAIL (exact)");
    }
    fprintf(stderr, "verdict: %s\n", fails ? "FAIL" : "PASS");
    fprintf(stderr, "========================================================\n");
    return fails ? 1 : 0;
}

bool cmd_gate_parse_percent(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s) return false;
    if (*end == '%') end++;
    if (*end || !(v >= 0) || !isfinite(v)) return false;
    *out = v;
    return true;
}

int cmd_gate_files(const char *baseline, const char *current, double max_reg)
{
    if (!baseline) {
        fprintf(stderr, "pllm: --current FILE is judged against --baseline FILE: give both\n");
        return 2;
    }
    json_error_t e1, e2;
    json_t *b = json_load_file(baseline, 0, &e1), *c = json_load_file(current, 0, &e2);
    int g = 3;
    if (!b)
        fprintf(stderr, "pllm: --baseline %s:%d: %s\n", baseline, e1.line, e1.text);
    else if (!c)
        fprintf(stderr, "pllm: --current %s:%d: %s\n", current, e2.line, e2.text);
    else
        g = cmd_gate(b, c, max_reg, baseline);
    json_decref(b);
    json_decref(c);
    return g;
}

/*
 * gate.h: the CI regression gate of `pllm bench --baseline FILE`: a saved --stats-json against
 * the current one.
 *
 * Comparable or not: every workload field (dataset fingerprint, lengths, seed, model, engine
 * parameters) must match, else exit 3 naming the differences. Exact counters (steps,
 * preemptions, tokens, blocks, request counts) must be equal: any change fails.
 *
 * Throughputs are timings, and timings are noisy: the gate judges a drop against the noise it
 * measured, not against a fixed line alone. For each throughput, with the per-run values of
 * both files ("runs"):
 *   - both sides have 2+ runs: Welch's t-test on the means (unequal variances, Welch-
 *     Satterthwaite degrees of freedom);
 *   - one side has 1 run: that run against the other side's spread (the prediction interval of
 *     one more run: sd * sqrt(1 + 1/n), n - 1 degrees of freedom); when --max-regression is
 *     narrower than that noise band the gate says so;
 *   - both have 1 run: no noise is known; the fixed margin alone decides, with a warning.
 * P(drop) is the probability that the current mean really is lower than the baseline's (one
 * sided: 1 - the test's p-value); P(>limit) that it is lower than the limit (the baseline's
 * mean less --max-regression). A throughput FAILs when it dropped by more than --max-regression
 * and P(>limit) >= 0.95: the gate fails only a drop it is confident goes past the limit. Judging
 * "any real drop" instead (P(drop) >= 0.95) kept 1.9% false alarms over 420 pairs of identical
 * --repeat 3 benches on the shared 2-core machine: the runs of one invocation share its moment's
 * load, so their spread understates the spread between invocations (bench/gate_noise.py).
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>

typedef struct cmd_gate_verdict {
    double change_pct; /* 100 (mean_cur - mean_base) / mean_base */
    double p_real;     /* P(current mean < baseline mean); NAN when no noise is known */
    double p_beyond;   /* P(current mean < baseline mean * (1 - max_reg/100)); NAN likewise */
    double band_pct;   /* one run's noise band (95%), in percent of the baseline; NAN if unknown */
    int df_kind;       /* 2: Welch, 1: one run against the other side's spread, 0: none */
    bool fail;
} cmd_gate_verdict;

/* Judge one throughput: base[nb], cur[nc] per-run values (n >= 1), max_reg in percent. */
void cmd_gate_judge(const double *base, int nb, const double *cur, int nc, double max_reg,
                    cmd_gate_verdict *v);

/* The whole gate: the table on stderr and the verdict: 0 pass, 1 fail, 3 not comparable. */
int cmd_gate(const json_t *base, const json_t *cur, double max_reg, const char *base_path);

/* `pllm bench --baseline B --current C`: the gate on two saved --stats-json files (nothing is
 * measured); 2 when baseline is NULL, 3 when a file does not parse (message printed). */
int cmd_gate_files(const char *baseline, const char *current, double max_reg);

/* --max-regression: a percentage ("5" or "5%"), >= 0 and finite. */
bool cmd_gate_parse_percent(const char *s, double *out);

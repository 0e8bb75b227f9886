/*
 * sampler_unit: hand-computed checks of the reference sampler (model/sampling.h): greedy
 * ties, bans, each penalty, the exact kept sets of top-k / top-p / min-p and their order,
 * determinism of the counter RNG, logprobs against a float64 log-softmax, the fallback when
 * nothing is finite, validation messages, and a padded vocabulary (ids past ctx.n_valid). Ends with
 * a small speed report on a 49152 vocab.
 */
#include "model/sampling.h"
#include "tests/testutil.h"

#include <math.h>
#include <string.h>

#define MAXV 64

/* One call on a copy of logits[n]; the processed logits are left in out_logits if given. */
static pllm_sample_result run(const float *logits, int32_t n, const pllm_sampling_params *p, const pllm_sample_ctx *ctx,
                              float *out_logits, int32_t *top_ids, float *top_lps)
{
    static _Thread_local unsigned char scratch[1 << 16];
    float work[MAXV];
    PLLM_ASSERT(n <= MAXV && pllm_sample_scratch_bytes(n) + 1 <= sizeof scratch);
    memcpy(work, logits, sizeof(float) * (size_t)n);
    pllm_sample_result r = {.top_ids = top_ids, .top_logprobs = top_lps};
    pllm_sample_ctx empty = {0};
    /* +1: an unaligned scratch pointer must work too */
    pllm_sample(&r, work, n, p, ctx ? ctx : &empty, scratch + 1);
    if (out_logits) memcpy(out_logits, work, sizeof(float) * (size_t)n);
    return r;
}

/* Draw over steps 0..n_steps-1 (output = zeros, so only the step changes); counts[n]. */
static void draw_counts(const float *logits, int32_t n, const pllm_sampling_params *p, const int32_t *banned,
                        int32_t n_banned, int32_t n_steps, int32_t *counts)
{
    static int32_t zeros[20000];
    PLLM_ASSERT(n_steps <= 20000);
    memset(counts, 0, sizeof(int32_t) * (size_t)n);
    for (int32_t s = 0; s < n_steps; s++) {
        pllm_sample_ctx ctx = {NULL, 0, zeros, s, banned, n_banned, 0};
        pllm_sample_result r = run(logits, n, p, &ctx, NULL, NULL, NULL);
        PLLM_ASSERT(r.token >= 0 && r.token < n);
        counts[r.token]++;
    }
}

/* The drawn set as a bit mask (n <= 64). */
static uint64_t drawn_set(const float *logits, int32_t n, const pllm_sampling_params *p, int32_t n_steps)
{
    int32_t counts[MAXV];
    draw_counts(logits, n, p, NULL, 0, n_steps, counts);
    uint64_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (counts[i]) m |= 1ull << i;
    return m;
}

static void test_greedy(void)
{
    pllm_sampling_params p;
    pllm_sampling_defaults(&p);
    CHECK(p.temperature == 0.0f && p.top_k == 0 && p.top_p == 1.0f && p.min_p == 0.0f &&
          p.repetition_penalty == 1.0f && p.logprobs == 0);
    CHECK_OK(pllm_sampling_validate(&p));
    float l[8] = {0.5f, 1.0f, -3.0f, 2.0f, 1.5f, 0.0f, 2.0f, 2.0f};
    CHECK(run(l, 8, &p, NULL, NULL, NULL, NULL).token == 3); /* ties 3, 6, 7: lowest id */
    int32_t ban[] = {3};
    pllm_sample_ctx ctx = {.banned = ban, .n_banned = 1};
    CHECK(run(l, 8, &p, &ctx, NULL, NULL, NULL).token == 6);
    /* top_k == 1 is greedy whatever the temperature, also with ties */
    p.temperature = 1.5f;
    p.top_k = 1;
    static int32_t zeros[50];
    for (int32_t s = 0; s < 50; s++) {
        pllm_sample_ctx c2 = {.output = zeros, .n_output = s};
        p.seed = (uint64_t)s;
        CHECK(run(l, 8, &p, &c2, NULL, NULL, NULL).token == 3);
    }
    /* single-entry vocabulary, both paths */
    float one[1] = {-7.0f};
    pllm_sampling_defaults(&p);
    CHECK(run(one, 1, &p, NULL, NULL, NULL, NULL).token == 0);
    p.temperature = 1.0f;
    p.top_p = 0.5f;
    p.min_p = 0.9f;
    CHECK(run(one, 1, &p, NULL, NULL, NULL, NULL).token == 0);
}

static void test_nonfinite(void)
{
    pllm_sampling_params p;
    pllm_sampling_defaults(&p);
    float l[5] = {NAN, 1.0f, INFINITY, NAN, 2.0f};
    CHECK(run(l, 5, &p, NULL, NULL, NULL, NULL).token == 2); /* +inf acts as FLT_MAX */
    float m[5] = {NAN, 1.0f, NAN, -INFINITY, 2.0f};
    p.temperature = 1.0f;
    int32_t counts[5];
    draw_counts(m, 5, &p, NULL, 0, 2000, counts);
    CHECK(counts[0] == 0 && counts[2] == 0 && counts[3] == 0 && counts[1] > 0 && counts[4] > counts[1]);
    /* nothing finite after bans: the lowest id that is not banned */
    float n[4] = {1.0f, 2.0f, -INFINITY, -INFINITY};
    int32_t ban[] = {1, 0};
    pllm_sample_ctx ctx = {.banned = ban, .n_banned = 2};
    for (int32_t t = 0; t < 2; t++) {
        p.temperature = t ? 1.0f : 0.0f;
        CHECK(run(n, 4, &p, &ctx, NULL, NULL, NULL).token == 2);
    }
    int32_t all[] = {0, 1, 2, 3};
    pllm_sample_ctx ctx_all = {.banned = all, .n_banned = 4};
    CHECK(run(n, 4, &p, &ctx_all, NULL, NULL, NULL).token == 0);
}

static void test_bans_and_penalties(void)
{
    pllm_sampling_params p;
    pllm_sampling_defaults(&p);
    float l[6] = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f, 0.0f};
    float out[6];

    /* repetition 2 over the distinct ids of prompt ∪ output (prompt repeats 0, output repeats 1) */
    p.repetition_penalty = 2.0f;
    int32_t prompt[] = {0, 0, 0, 5, 99, -1};
    int32_t output[] = {1, 1, 0};
    pllm_sample_ctx ctx = {prompt, 6, output, 3, NULL, 0, 0};
    pllm_sample_result r = run(l, 6, &p, &ctx, out, NULL, NULL);
    CHECK(out[0] == 1.0f && out[1] == -4.0f && out[2] == 1.0f && out[3] == 0.5f && out[4] == 3.0f && out[5] == 0.0f);
    CHECK(r.token == 4);

    /* frequency 0.5 and presence 0.25 over the output only: id 2 three times, id 3 once */
    pllm_sampling_defaults(&p);
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    int32_t out2[] = {2, 3, 2, 2};
    pllm_sample_ctx ctx2 = {prompt, 6, out2, 4, NULL, 0, 0};
    run(l, 6, &p, &ctx2, out, NULL, NULL);
    CHECK(out[0] == 2.0f && out[1] == -2.0f && out[2] == 1.0f - 1.75f && out[3] == 0.5f - 0.75f && out[4] == 3.0f);

    /* negative penalties raise; repetition applies before frequency/presence */
    p.frequency_penalty = -1.0f;
    p.presence_penalty = -2.0f;
    p.repetition_penalty = 0.5f;
    int32_t out3[] = {1, 1};
    pllm_sample_ctx ctx3 = {NULL, 0, out3, 2, NULL, 0, 0};
    r = run(l, 6, &p, &ctx3, out, NULL, NULL);
    CHECK(out[1] == -2.0f * 0.5f + 2.0f + 2.0f); /* -1 + 4 = 3 */
    CHECK(out[4] == 3.0f && r.token == 1);       /* tie 1 vs 4 at 3: lowest id */

    /* bans: never drawn on the random path */
    pllm_sampling_defaults(&p);
    p.temperature = 1.0f;
    float flat[6] = {0, 0, 0, 0, 0, 0};
    int32_t ban[] = {1, 4, 4};
    int32_t counts[6];
    draw_counts(flat, 6, &p, ban, 3, 3000, counts);
    CHECK(counts[1] == 0 && counts[4] == 0);
    CHECK(counts[0] > 600 && counts[2] > 600 && counts[3] > 600 && counts[5] > 600);
}

static void test_filters(void)
{
    pllm_sampling_params p;
    pllm_sampling_defaults(&p);
    p.temperature = 1.0f;
    p.seed = 1234;
    /* probabilities 0.4 0.3 0.2 0.1 at temperature 1 */
    float l[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    const int32_t steps = 3000;
    CHECK(drawn_set(l, 4, &p, steps) == 0xF);
    p.top_k = 2;
    CHECK(drawn_set(l, 4, &p, steps) == 0x3);
    p.top_k = 0;
    p.top_p = 0.69f; /* before: 0, .4, .7 */
    CHECK(drawn_set(l, 4, &p, steps) == 0x3);
    p.top_p = 0.71f;
    CHECK(drawn_set(l, 4, &p, steps) == 0x7);
    p.top_p = 0.3f;
    CHECK(drawn_set(l, 4, &p, steps) == 0x1);
    p.top_p = 1.0f;
    p.min_p = 0.45f; /* keep p >= 0.18 */
    CHECK(drawn_set(l, 4, &p, steps) == 0x7);
    p.min_p = 0.6f; /* keep p >= 0.24 */
    CHECK(drawn_set(l, 4, &p, steps) == 0x3);
    p.min_p = 1.0f;
    CHECK(drawn_set(l, 4, &p, steps) == 0x1);

    /* order: top_p works on the survivors of min_p and top_k, renormalised (vLLM) */
    p.min_p = 0.6f;
    p.top_p = 0.5f; /* on {0.4, 0.3} renormalised 0.571 already reaches 0.5: only id 0 */
    CHECK(drawn_set(l, 4, &p, steps) == 0x1);
    p.min_p = 0.0f;
    p.top_k = 2;
    p.top_p = 0.55f; /* on the full distribution it would keep {0, 1} */
    CHECK(drawn_set(l, 4, &p, steps) == 0x1);
    p.top_k = 3;
    p.top_p = 0.6f; /* {.4,.3,.2}/.9: 0.444 < 0.6 keeps id 1; 0.778 stops */
    CHECK(drawn_set(l, 4, &p, steps) == 0x3);

    /* top_k keeps ties with the k-th value */
    float t[5] = {3.0f, 2.0f, 2.0f, 2.0f, 1.0f};
    pllm_sampling_defaults(&p);
    p.temperature = 1.0f;
    p.top_k = 2;
    CHECK(drawn_set(t, 5, &p, steps) == 0xF);
    p.top_k = 4;
    CHECK(drawn_set(t, 5, &p, steps) == 0xF);
    p.top_k = 5;
    CHECK(drawn_set(t, 5, &p, steps) == 0x1F);
    p.top_k = -1;
    CHECK(drawn_set(t, 5, &p, steps) == 0x1F);

    /* top_p ties: ranked by lower id first */
    float u[6] = {0, 0, 0, 0, 0, 0};
    pllm_sampling_defaults(&p);
    p.temperature = 0.7f;
    p.top_p = 0.3f; /* before: 0, 1/6 < 0.3, 2/6 stops */
    CHECK(drawn_set(u, 6, &p, steps) == 0x3);
    p.top_p = 0.5f; /* before 3/6 = 0.5 is not < 0.5: three ids */
    CHECK(drawn_set(u, 6, &p, steps) == 0x7);
    float v[6] = {0, 1, 0, 1, 0, 1};
    p.temperature = 1.0f;
    p.top_p = 0.4f; /* ids 1, 3, 5 carry 0.244 each: 1 and 3 */
    CHECK(drawn_set(v, 6, &p, steps) == ((1u << 1) | (1u << 3)));

    /* temperature: the frequencies follow softmax(l / T) */
    pllm_sampling_defaults(&p);
    p.temperature = 0.5f;
    int32_t counts[4];
    draw_counts(l, 4, &p, NULL, 0, 20000, counts);
    double z = 0, e[4];
    for (int32_t i = 0; i < 4; i++) z += e[i] = exp((double)l[i] / 0.5);
    double x2 = 0;
    for (int32_t i = 0; i < 4; i++) {
        double want = 20000 * e[i] / z;
        x2 += (counts[i] - want) * (counts[i] - want) / want;
    }
    fprintf(stderr, "temperature 0.5 frequencies: %d %d %d %d, chi2 %.2f on 3 df\n", counts[0], counts[1], counts[2],
            counts[3], x2);
    CHECK(x2 < 25.0); /* p ~ 1.5e-5 */
}

static void test_rng(void)
{
    /* golden values from an independent Python implementation of the stated formula */
    CHECK(pllm_rng_uniform(0, 0) * 0x1.0p53 == 4110325583158613.0);
    CHECK(pllm_rng_uniform(42, 7) * 0x1.0p53 == 5707135212615821.0);
    CHECK(pllm_rng_uniform(UINT64_MAX, 123456789) * 0x1.0p53 == 4137345852614706.0);
    double mean = 0, lo = 1, hi = 0;
    int32_t hist[10] = {0};
    for (uint64_t s = 0; s < 100000; s++) {
        double u = pllm_rng_uniform(s % 7, s / 7);
        CHECK(u == pllm_rng_uniform(s % 7, s / 7));
        mean += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        hist[(int)(u * 10)]++;
    }
    mean /= 100000;
    CHECK(lo >= 0 && hi < 1 && fabs(mean - 0.5) < 0.005);
    for (int32_t i = 0; i < 10; i++) CHECK(hist[i] > 9500 && hist[i] < 10500);
    /* neighbouring seeds and steps are not correlated in the obvious way */
    CHECK(pllm_rng_uniform(1, 0) != pllm_rng_uniform(0, 1));

    /* the same (seed, step) gives the same token; the step, not the call count, matters */
    pllm_sampling_params p;
    pllm_sampling_defaults(&p);
    p.temperature = 1.0f;
    p.seed = 99;
    float l[16];
    for (int32_t i = 0; i < 16; i++) l[i] = (float)(i % 5) * 0.3f;
    int32_t hist_out[8] = {0};
    pllm_sample_ctx c5 = {.output = hist_out, .n_output = 5};
    int32_t a = run(l, 16, &p, &c5, NULL, NULL, NULL).token;
    for (int32_t k = 0; k < 5; k++) {
        run(l, 16, &p, NULL, NULL, NULL, NULL);
        CHECK(run(l, 16, &p, &c5, NULL, NULL, NULL).token == a);
    }
    /* over steps the tokens vary, and another seed gives another sequence */
    int32_t seq_a[64], seq_b[64], distinct = 0, same = 0;
    uint32_t seen = 0;
    static int32_t zeros[64];
    for (int32_t s = 0; s < 64; s++) {
        pllm_sample_ctx c = {.output = zeros, .n_output = s};
        p.seed = 99;
        seq_a[s] = run(l, 16, &p, &c, NULL, NULL, NULL).token;
        p.seed = 100;
        seq_b[s] = run(l, 16, &p, &c, NULL, NULL, NULL).token;
        if (!(seen >> seq_a[s] & 1)) distinct++;
        seen |= 1u << seq_a[s];
        same += seq_a[s] == seq_b[s];
    }
    CHECK(distinct >= 10);
    CHECK(same < 20); /* chance agreement ~ 64 * sum p^2 ~ 5 */
}

static void test_logprobs(void)
{
    pllm_sampling_params p;
    pllm_sampling_defaults(&p);
    float l[20];
    uint64_t st = 7;
    for (int32_t i = 0; i < 20; i++) l[i] = pllm_test_randf(&st) * 4.0f;
    l[5] = l[9] = l[12] = 4.5f; /* a three-way tie at the top */
    double mx = 4.5, z = 0;
    for (int32_t i = 0; i < 20; i++) z += exp((double)l[i] - mx);
    double lse = mx + log(z);

    p.logprobs = 20;
    p.temperature = 0.8f;
    p.repetition_penalty = 1.7f;
    int32_t ban[] = {5};
    int32_t prompt[] = {9, 12};
    int32_t ids[20];
    float lps[20];
    double max_err = 0;
    for (int32_t s = 0; s < 200; s++) {
        static int32_t out[200];
        pllm_sample_ctx ctx = {prompt, 2, out, s, ban, 1, 0};
        p.seed = (uint64_t)s * 7919;
        pllm_sample_result r = run(l, 20, &p, &ctx, NULL, ids, lps);
        CHECK(r.n_top == 20 && r.token != 5);
        /* the sampled token's logprob is raw: penalties and bans do not change it */
        double want = (double)l[r.token] - lse;
        max_err = fmax(max_err, fabs(r.logprob - want));
        double sum = 0;
        for (int32_t t = 0; t < 20; t++) {
            sum += exp(lps[t]);
            max_err = fmax(max_err, fabs(lps[t] - ((double)l[ids[t]] - lse)));
            if (t) CHECK(lps[t] < lps[t - 1] || (lps[t] == lps[t - 1] && ids[t] > ids[t - 1]));
        }
        CHECK(fabs(sum - 1.0) < 1e-5);
        CHECK(ids[0] == 5 && ids[1] == 9 && ids[2] == 12); /* banned 5 is still listed, ties by id */
    }
    fprintf(stderr, "logprobs: max |error| vs float64 log-softmax %.3g\n", max_err);
    CHECK(max_err < 1e-5);

    /* fewer requested than the vocabulary, and more */
    p.logprobs = 3;
    pllm_sample_result r = run(l, 20, &p, NULL, NULL, ids, lps);
    CHECK(r.n_top == 3 && ids[0] == 5 && ids[1] == 9 && ids[2] == 12);
    p.logprobs = 20;
    r = run(l, 4, &p, NULL, NULL, ids, lps);
    CHECK(r.n_top == 4);
    /* no top list: NULL arrays are fine */
    p.logprobs = 0;
    r = run(l, 20, &p, NULL, NULL, NULL, NULL);
    CHECK(r.n_top == 0 && fabs(r.logprob - ((double)l[r.token] - lse)) < 1e-5);
}

/* res.no_logprob (the step returns no logprobs): the same token as the full sampler on random
 * logits (greedy and random, with bans, penalties and filters, ties included), logprob NAN;
 * with a top-N list asked for, the normaliser is kept and the logprobs are the full ones. */
static void test_no_logprob(void)
{
    uint64_t st = 99;
    static unsigned char scratch[1 << 16];
    int32_t n_same = 0, n_cases = 0;
    for (int32_t c = 0; c < 400; c++) {
        int32_t n = 2 + (int32_t)(pllm_test_rand(&st) % (MAXV - 1));
        float l[MAXV], w1[MAXV], w2[MAXV];
        for (int32_t i = 0; i < n; i++) l[i] = pllm_test_randf(&st) * 6.0f;
        if (c % 5 == 0) l[n - 1] = l[0]; /* a tie */
        pllm_sampling_params p;
        pllm_sampling_defaults(&p);
        p.temperature = c % 2 ? 0.0f : 0.3f + (float)(c % 7) * 0.2f;
        p.top_k = c % 3 == 0 ? 1 + c % 5 : 0;
        p.top_p = c % 4 == 1 ? 0.8f : 1.0f;
        p.repetition_penalty = c % 6 == 2 ? 1.3f : 1.0f;
        p.presence_penalty = c % 8 == 3 ? 0.5f : 0.0f;
        p.logprobs = c % 10 == 7 ? 3 : 0;
        p.seed = (uint64_t)c;
        int32_t prompt[2] = {(int32_t)(pllm_test_rand(&st) % (uint64_t)n), 0};
        int32_t out[3] = {1, (int32_t)(pllm_test_rand(&st) % (uint64_t)n), 0};
        int32_t ban[1] = {(int32_t)(pllm_test_rand(&st) % (uint64_t)n)};
        pllm_sample_ctx ctx = {prompt, 2, out, 3, ban, c % 3 == 2, 0};
        int32_t ids1[3], ids2[3];
        float lp1[3], lp2[3];
        memcpy(w1, l, sizeof(float) * (size_t)n);
        memcpy(w2, l, sizeof(float) * (size_t)n);
        pllm_sample_result full = {.top_ids = ids1, .top_logprobs = lp1};
        pllm_sample_result fast = {.top_ids = ids2, .top_logprobs = lp2, .no_logprob = true};
        pllm_sample(&full, w1, n, &p, &ctx, scratch);
        pllm_sample(&fast, w2, n, &p, &ctx, scratch + 3);
        n_cases++;
        n_same += fast.token == full.token;
        CHECK(fast.token == full.token);
        if (p.logprobs > 0) {
            CHECK(fast.logprob == full.logprob && fast.n_top == full.n_top);
            CHECK(memcmp(ids1, ids2, sizeof ids1) == 0 && memcmp(lp1, lp2, sizeof lp1) == 0);
        } else {
            CHECK(isnan(fast.logprob) && !isnan(full.logprob));
        }
    }
    fprintf(stderr, "no_logprob: %d of %d tokens the same as the full sampler's\n", n_same,
            n_cases);
}

static void expect_invalid(pllm_sampling_params p, const char *field, const char *value)
{
    pllm_status st = pllm_sampling_validate(&p);
    const char *msg = pllm_errmsg();
    bool ok = st == PLLM_ERR_INVALID && strstr(msg, field) && strstr(msg, value);
    if (!ok) fprintf(stderr, "validate: expected an error naming %s and %s, got %d \"%s\"\n", field, value, st, msg);
    CHECK(ok);
}

static void test_validate(void)
{
    pllm_sampling_params d, p;
    pllm_sampling_defaults(&d);
    p = d, p.temperature = -1.0f, expect_invalid(p, "temperature", "-1");
    p = d, p.temperature = NAN, expect_invalid(p, "temperature", "nan");
    p = d, p.temperature = INFINITY, expect_invalid(p, "temperature", "inf");
    p = d, p.top_k = -2, expect_invalid(p, "top_k", "-2");
    p = d, p.top_p = 0.0f, expect_invalid(p, "top_p", "0");
    p = d, p.top_p = 1.5f, expect_invalid(p, "top_p", "1.5");
    p = d, p.top_p = NAN, expect_invalid(p, "top_p", "nan");
    p = d, p.min_p = -0.25f, expect_invalid(p, "min_p", "-0.25");
    p = d, p.min_p = 1.25f, expect_invalid(p, "min_p", "1.25");
    p = d, p.repetition_penalty = 0.0f, expect_invalid(p, "repetition_penalty", "0");
    p = d, p.repetition_penalty = -1.0f, expect_invalid(p, "repetition_penalty", "-1");
    p = d, p.presence_penalty = 2.5f, expect_invalid(p, "presence_penalty", "2.5");
    p = d, p.frequency_penalty = -3.0f, expect_invalid(p, "frequency_penalty", "-3");
    p = d, p.frequency_penalty = NAN, expect_invalid(p, "frequency_penalty", "nan");
    p = d, p.logprobs = -1, expect_invalid(p, "logprobs", "-1");
    p = d, p.logprobs = 21, expect_invalid(p, "logprobs", "21");
    /* the edges are valid */
    p = d, p.top_k = -1;
    CHECK_OK(pllm_sampling_validate(&p));
    p = d, p.top_k = 100000, p.top_p = 1.0f, p.min_p = 1.0f;
    CHECK_OK(pllm_sampling_validate(&p));
    p = d, p.presence_penalty = -2.0f, p.frequency_penalty = 2.0f, p.logprobs = 20;
    CHECK_OK(pllm_sampling_validate(&p));
    p = d, p.temperature = 1e-6f, p.repetition_penalty = 1e-3f;
    CHECK_OK(pllm_sampling_validate(&p));
}

/* A padded vocabulary (ctx.n_valid < n): the row is its first n_valid logits, for the draw, the
 * greedy choice, the logprob normaliser and the top list alike; the padding's logits, however
 * large, never matter. */
static void test_padded_vocab(void)
{
    const int32_t n = 12, nv = 8;
    float l[MAXV], ref[MAXV];
    uint64_t rng = 77;
    for (int32_t i = 0; i < n; i++) l[i] = pllm_test_randf(&rng) * 3.0f;
    memcpy(ref, l, sizeof ref);
    l[9] = 100.0f, l[11] = INFINITY, l[8] = NAN; /* padding that would win */
    pllm_sampling_params p;
    pllm_sampling_defaults(&p);
    p.logprobs = 20;
    int32_t ids[20], ids_ref[20];
    float lps[20], lps_ref[20];
    pllm_sample_ctx ctx = {.n_valid = nv};
    /* greedy and its logprobs equal the sampler on the first nv logits alone */
    pllm_sample_result a = run(l, n, &p, &ctx, NULL, ids, lps);
    pllm_sample_result b = run(ref, nv, &p, NULL, NULL, ids_ref, lps_ref);
    CHECK(a.token == b.token && a.token < nv);
    CHECK(a.logprob == b.logprob);
    CHECK(a.n_top == nv && b.n_top == nv);
    for (int32_t k = 0; k < nv; k++) CHECK(ids[k] == ids_ref[k] && lps[k] == lps_ref[k]);
    /* random draws, with every filter off and with top-k/top-p/min-p: same draws, none padded */
    for (int32_t mode = 0; mode < 2; mode++) {
        p.temperature = 1.5f;
        p.logprobs = 0;
        p.top_k = mode ? 5 : 0, p.top_p = mode ? 0.9f : 1.0f, p.min_p = mode ? 0.01f : 0.0f;
        static int32_t zeros[400];
        for (int32_t s = 0; s < 400; s++) {
            pllm_sample_ctx c1 = {.output = zeros, .n_output = s, .n_valid = nv};
            pllm_sample_ctx c2 = {.output = zeros, .n_output = s};
            pllm_sample_result x = run(l, n, &p, &c1, NULL, NULL, NULL);
            pllm_sample_result y = run(ref, nv, &p, &c2, NULL, NULL, NULL);
            CHECK(x.token == y.token && x.token < nv);
        }
    }
    /* n_valid 0 or >= n: every id counts (the padding wins again) */
    pllm_sampling_defaults(&p);
    for (int32_t v = 0; v <= n + 1; v += n) {
        pllm_sample_ctx c = {.n_valid = v};
        CHECK(run(l, n, &p, &c, NULL, NULL, NULL).token == 11);
    }
    /* everything valid banned: the fallback stays inside the vocabulary too */
    int32_t all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    pllm_sample_ctx cb = {.banned = all, .n_banned = 8, .n_valid = nv};
    CHECK(run(l, n, &p, &cb, NULL, NULL, NULL).token == 0);
}

int main(void)
{
    test_greedy();
    test_nonfinite();
    test_bans_and_penalties();
    test_filters();
    test_rng();
    test_logprobs();
    test_no_logprob();
    test_validate();
    test_padded_vocab();
    return pllm_test_finish("sampler_unit");
}

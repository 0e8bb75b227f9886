/*
 * sampler_bench: time pllm_sample per call on one row of logits, for a few parameter sets and
 * vocabulary sizes (49152: SmolLM2; 151936: Qwen2). Logits are synthetic: "normal" is
 * N(0, 2^2) for every id (a wide distribution: top-p keeps thousands of ids), "peaked" adds
 * +12 to 20 random ids (closer to a trained LM, where top-p keeps a handful).
 *
 * The machine is shared, so each row reports the median and the minimum over the iterations.
 *
 * usage: sampler_bench [iterations]     (report on stderr, one JSON line per row on stdout)
 */
#include "model/sampling.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9E3779B97F4A7C15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) { return (double)((rng_next(s) >> 11) + 1) * 0x1.0p-53; }

static void fill_logits(float *l, int32_t n, bool peaked, uint64_t seed)
{
    uint64_t s = seed;
    for (int32_t i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(rng_unit(&s))), t = 2.0 * M_PI * rng_unit(&s);
        l[i] = (float)(2.0 * r * cos(t));
        if (i + 1 < n) l[i + 1] = (float)(2.0 * r * sin(t));
    }
    if (peaked)
        for (int32_t k = 0; k < 20; k++) l[rng_next(&s) % (uint64_t)n] += 12.0f;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bench_case {
    const char *name;
    float temperature, top_p, min_p, rep;
    int32_t top_k, logprobs, n_history;
    bool no_logprob; /* the caller reads no logprob (a step that returns none) */
} bench_case;

int main(int argc, char **argv)
{
    int32_t iters = argc > 1 ? atoi(argv[1]) : 200;
    const int32_t vocabs[] = {49152, 151936};
    const bench_case cases[] = {
        {"greedy", 0.0f, 1.0f, 0.0f, 1.0f, 0, 0, 0, false},
        {"greedy,no_logprob", 0.0f, 1.0f, 0.0f, 1.0f, 0, 0, 0, true},
        {"greedy+logprobs5", 0.0f, 1.0f, 0.0f, 1.0f, 0, 5, 0, false},
        {"temperature=0.8", 0.8f, 1.0f, 0.0f, 1.0f, 0, 0, 0, false},
        {"top_p=0.9,T=0.8", 0.8f, 0.9f, 0.0f, 1.0f, 0, 0, 0, false},
        {"top_k=50,top_p=0.9,T=0.8", 0.8f, 0.9f, 0.0f, 1.0f, 50, 0, 0, false},
        {"min_p=0.05,T=0.8", 0.8f, 1.0f, 0.05f, 1.0f, 0, 0, 0, false},
        {"top_p=0.9,T=0.8,rep=1.1,hist=1024", 0.8f, 0.9f, 0.0f, 1.1f, 0, 0, 1024, false},
    };
    int32_t history[1024];
    uint64_t hs = 5;
    double *times = malloc(sizeof(double) * (size_t)(iters > 0 ? iters : 1));
    if (!times || iters < 1) return 1;
    fprintf(stderr, "%-36s %8s %8s %12s %12s\n", "params", "vocab", "logits", "median us", "min us");
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        int32_t n = vocabs[v];
        float *base = malloc(sizeof(float) * (size_t)n), *work = malloc(sizeof(float) * (size_t)n);
        void *scratch = malloc(pllm_sample_scratch_bytes(n));
        if (!base || !work || !scratch) return 1;
        for (int32_t i = 0; i < 1024; i++) history[i] = (int32_t)(rng_next(&hs) % (uint64_t)n);
        for (int32_t peaked = 0; peaked < 2; peaked++) {
            fill_logits(base, n, peaked, 42 + (uint64_t)n);
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
                const bench_case *bc = &cases[c];
                pllm_sampling_params p;
                pllm_sampling_defaults(&p);
                p.temperature = bc->temperature;
                p.top_p = bc->top_p;
                p.top_k = bc->top_k;
                p.min_p = bc->min_p;
                p.repetition_penalty = bc->rep;
                p.logprobs = bc->logprobs;
                p.seed = 7;
                int32_t ids[20];
                float lps[20];
                pllm_sample_result r = {
                    .top_ids = ids, .top_logprobs = lps, .no_logprob = bc->no_logprob};
                int64_t checksum = 0;
                for (int32_t it = 0; it < iters; it++) {
                    memcpy(work, base, sizeof(float) * (size_t)n);
                    pllm_sample_ctx ctx = {history,
                                           bc->n_history ? 512 : 0,
                                           history + 512,
                                           bc->n_history ? 512 : 0,
                                           NULL,
                                           0,
                                           0};
                    if (!bc->n_history) ctx.output = NULL;
                    /* vary the step without a history: a fake output pointer is never read */
                    static int32_t zeros[1];
                    if (!bc->n_history) ctx.output = zeros, ctx.n_output = 0;
                    p.seed = 7 + (uint64_t)it;
                    double t0 = pllm_now();
                    pllm_sample(&r, work, n, &p, &ctx, scratch);
                    times[it] = pllm_now() - t0;
                    checksum += r.token;
                }
                qsort(times, (size_t)iters, sizeof *times, cmp_double);
                double med = times[iters / 2] * 1e6, lo = times[0] * 1e6;
                fprintf(stderr, "%-36s %8d %8s %12.1f %12.1f\n", bc->name, n, peaked ? "peaked" : "normal", med, lo);
                printf("{\"bench\": \"sampler\", \"params\": \"%s\", \"vocab\": %d, \"logits\": \"%s\", "
                       "\"median_us\": %.2f, \"min_us\": %.2f, \"checksum\": %lld}\n",
                       bc->name, n, peaked ? "peaked" : "normal", med, lo, (long long)checksum);
            }
        }
        free(base);
        free(work);
        free(scratch);
    }
    free(times);
    return 0;
}

/*
 * cuda_sampler: the device sampler (cuda/sample.cu) against the reference pllm_sample on random
 * cases: vocabularies of 1 to 6000 ids; logits normal, coarsely quantised (many exact ties), with
 * -inf, NaN, +inf and huge values; greedy and random sampling with every combination of
 * temperature, top_k (off, 1, small, >= vocabulary), top_p, min_p, repetition, presence and
 * frequency penalties (prompt/output ids with repeats), banned ids (sometimes all of them), seeds
 * and RNG steps, 0..20 top logprobs, and padded vocabularies (ctx.n_valid < V, the padding's
 * logits the largest of the row: no id >= n_valid may be sampled or listed).
 *
 * Tokens and top-logprob ids must be identical, except in cases the reference itself leaves to
 * rounding (sampling.h: a running sum within rounding of its threshold u, top_p or min_p). A
 * mismatching token is checked against a long double replay of the rules on the CPU's processed
 * logits: it is counted as a rounding-boundary case when one of those margins is below 1e-9
 * (relative), and fails the test otherwise. Logprobs must agree to 2e-6 absolute + relative.
 * The per-sample count workspace must be all zero afterwards.
 *
 * Built twice: against the emulator (cuda_sampler) and the real CUDA build (cuda_sampler_gpu,
 * which skips when no GPU answers).
 */
#include "cuda/kernels.h"
#ifdef PLLM_CUDA_EMU
#include "cuda/emu/cuemu.h"
#endif
#include "tests/testutil.h"

#include <float.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t g_rng;

static int rnd(int n)
{
    return n <= 0 ? 0 : (int)(pllm_test_rand(&g_rng) % (uint64_t)n);
}
static float unif(void)
{
    return (pllm_test_randf(&g_rng) + 1.0f) * 0.5f;
}
static float gauss(void)
{
    float u1 = unif() * 0.999f + 0.0005f, u2 = unif();
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

typedef struct tcase {
    pllm_sampling_params p;
    int32_t *prompt, *output, *banned;
    int32_t n_prompt, n_output, n_banned;
    int32_t n_valid; /* ids >= n_valid have no token (0: all valid) */
    float *logits;   /* [V] as given */
} tcase;

static void make_case(tcase *c, int V)
{
    memset(c, 0, sizeof *c);
    pllm_sampling_defaults(&c->p);
    c->logits = malloc(sizeof(float) * (size_t)V);
    const int kind = rnd(5);
    const float scale = 0.5f + 6.0f * unif();
    for (int i = 0; i < V; i++) {
        float v = scale * gauss();
        if (kind == 1) v = roundf(v * 2.0f) / 2.0f; /* ties */
        if (kind == 2) v = (float)rnd(3);           /* mostly ties */
        c->logits[i] = v;
    }
    if (kind == 3) /* non-finite inputs */
        for (int k = 0; k < 1 + V / 50; k++) {
            int i = rnd(V), w = rnd(4);
            c->logits[i] = w == 0 ? NAN : w == 1 ? INFINITY : w == 2 ? -INFINITY : 1e30f;
        }
    if (kind == 4 && V > 2) /* a few -inf only */
        for (int k = 0; k < V / 3; k++) c->logits[rnd(V)] = -INFINITY;

    pllm_sampling_params *p = &c->p;
    const int mode = rnd(4);
    if (mode > 0) {
        p->temperature = rnd(4) == 0 ? 0.05f + unif() * 0.2f : 0.3f + 1.7f * unif();
        p->top_k = rnd(3) == 0   ? 0
                   : rnd(3) == 0 ? -1
                   : rnd(4) == 0 ? V + rnd(3)
                                 : 1 + rnd(PLLM_MAX(V / 4, 2));
        p->top_p = rnd(2) ? 1.0f : 0.05f + 0.94f * unif();
        p->min_p = rnd(2) ? 0.0f : 0.3f * unif();
    }
    if (rnd(3) == 0) p->repetition_penalty = 0.5f + 1.5f * unif();
    if (rnd(3) == 0) p->presence_penalty = 4.0f * unif() - 2.0f;
    if (rnd(3) == 0) p->frequency_penalty = 4.0f * unif() - 2.0f;
    p->seed = pllm_test_rand(&g_rng);
    p->logprobs = rnd(3) == 0 ? rnd(21) : 0;

    c->n_prompt = rnd(3) == 0 ? 0 : 1 + rnd(40);
    c->n_output = rnd(3) == 0 ? 0 : 1 + rnd(30);
    c->n_banned = rnd(3) == 0 ? 0 : rnd(4) == 0 && V <= 8 ? V : 1 + rnd(4);
    c->prompt = malloc(sizeof(int32_t) * (size_t)(c->n_prompt + 1));
    c->output = malloc(sizeof(int32_t) * (size_t)(c->n_output + 1));
    c->banned = malloc(sizeof(int32_t) * (size_t)(c->n_banned + 1));
    const int span = PLLM_MAX(1, PLLM_MIN(V, 60)); /* repeats are likely */
    for (int i = 0; i < c->n_prompt; i++) c->prompt[i] = rnd(span);
    for (int i = 0; i < c->n_output; i++) c->output[i] = rnd(span);
    for (int i = 0; i < c->n_banned; i++) c->banned[i] = c->n_banned == V ? i : rnd(V);
    if (V > 1 && rnd(4) == 0) { /* a padded vocabulary whose padding would win every draw */
        c->n_valid = 1 + rnd(V - 1);
        for (int i = c->n_valid; i < V; i++) c->logits[i] = rnd(4) == 0 ? INFINITY : 50.0f + unif();
    }
}

/* The ids the sampler may draw from: [0, n_valid) of a padded vocabulary. */
static int valid_of(const tcase *c, int V)
{
    return c->n_valid > 0 && c->n_valid < V ? c->n_valid : V;
}

static void free_case(tcase *c)
{
    free(c->logits), free(c->prompt), free(c->output), free(c->banned);
}

/*
 * Long double replay of sampling.h step 5 on the processed logits l [V] (as pllm_sample left
 * them): the smallest relative distance of a decision to its threshold (min_p, top_p, the draw).
 */
static double random_margin(const float *l, int V, const pllm_sampling_params *p, uint64_t step)
{
    float lmax = -INFINITY;
    for (int i = 0; i < V; i++) lmax = l[i] > lmax ? l[i] : lmax;
    if (lmax == -INFINITY) return 1.0;
    float lk = -INFINITY;
    if (p->top_k > 0 && p->top_k < V) { /* k-th largest: sort a copy */
        float *tmp = malloc(sizeof(float) * (size_t)V);
        memcpy(tmp, l, sizeof(float) * (size_t)V);
        for (int i = 0; i < p->top_k; i++) { /* partial selection */
            int b = i;
            for (int j = i + 1; j < V; j++)
                if (tmp[j] > tmp[b]) b = j;
            float t = tmp[i];
            tmp[i] = tmp[b], tmp[b] = t;
        }
        lk = tmp[p->top_k - 1];
        free(tmp);
    }
    long double *w = malloc(sizeof(long double) * (size_t)V);
    double margin = 1.0;
    for (int i = 0; i < V; i++) {
        w[i] = 0;
        if (l[i] == -INFINITY || l[i] < lk) continue;
        long double x = ((long double)l[i] - lmax) / p->temperature;
        w[i] = x < -708 ? 0 : expl(x);
        if (p->min_p > 0 && w[i] > 0) {
            margin = fmin(margin, (double)(fabsl(w[i] - p->min_p) / p->min_p));
            if (w[i] < p->min_p) w[i] = 0;
        }
    }
    if (p->top_p < 1.0f) { /* rank by (logit desc, id asc), exclusive prefix vs target */
        long double tot = 0;
        for (int i = 0; i < V; i++) tot += w[i];
        long double target = (long double)p->top_p * tot, acc = 0;
        bool *done = calloc((size_t)V, 1);
        for (;;) {
            int b = -1;
            for (int i = 0; i < V; i++)
                if (!done[i] && w[i] > 0 && (b < 0 || l[i] > l[b])) b = i;
            if (b < 0) break;
            done[b] = true;
            margin = fmin(margin, (double)(fabsl(acc - target) / target));
            if (!(acc < target))
                w[b] = 0;
            else
                acc += w[b];
        }
        free(done);
    }
    long double tot = 0;
    for (int i = 0; i < V; i++) tot += w[i];
    long double target = (long double)pllm_rng_uniform(p->seed, step) * tot, acc = 0;
    for (int i = 0; i < V; i++) {
        if (w[i] == 0) continue;
        acc += w[i];
        margin = fmin(margin, (double)(fabsl(acc - target) / tot));
    }
    free(w);
    return margin;
}

static bool close_lp(float a, float b)
{
    if (a == b) return true; /* also both -inf */
    return fabsf(a - b) <= 2e-6f * (1.0f + fabsf(b));
}

static void run_batch(pllm_cuda_dev *dev, int V, int S, int *n_same, int *n_ambiguous, int *n_cases)
{
    tcase *cs = calloc((size_t)S, sizeof *cs);
    pllm_cuda_sample_params *rec = calloc((size_t)S, sizeof *rec);
    float *logits = malloc(sizeof(float) * (size_t)S * V);
    int32_t n_ids = 0;
    for (int s = 0; s < S; s++) {
        make_case(&cs[s], V);
        memcpy(logits + (size_t)s * V, cs[s].logits, sizeof(float) * (size_t)V);
        pllm_sample_ctx ctx = {cs[s].prompt, cs[s].n_prompt, cs[s].output, cs[s].n_output,
                               cs[s].banned, cs[s].n_banned, cs[s].n_valid};
        n_ids += pllm_cuda_sample_n_ids(&cs[s].p, &ctx);
    }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_ids + 1));
    for (int s = 0, off = 0; s < S; s++) {
        pllm_sample_ctx ctx = {cs[s].prompt, cs[s].n_prompt, cs[s].output, cs[s].n_output,
                               cs[s].banned, cs[s].n_banned, cs[s].n_valid};
        pllm_cuda_sample_fill(&rec[s], &cs[s].p, &ctx, V, ids + off, off);
        off += pllm_cuda_sample_n_ids(&cs[s].p, &ctx);
    }

    void *d_logits = NULL, *d_work = NULL, *d_cnt = NULL, *d_rec = NULL, *d_ids = NULL,
         *d_tok = NULL, *d_lp = NULL, *d_top = NULL, *d_part = NULL;
    /* the statistics pass split anywhere from 1 chunk a row to the most (some chunks empty when
     * V is small), and as the backend splits it */
    const int n_parts = rnd(3) == 0 ? pllm_cuda_sample_parts(S, V, 132) : 1 + rnd(32);
    CHECK_OK(pllm_cuda_alloc(dev, &d_part, pllm_cuda_sample_part_bytes(S, n_parts)));
    CHECK_OK(pllm_cuda_alloc(dev, &d_logits, sizeof(float) * (size_t)S * V));
    CHECK_OK(pllm_cuda_alloc(dev, &d_work, sizeof(float) * (size_t)S * V));
    CHECK_OK(pllm_cuda_alloc(dev, &d_cnt, sizeof(int32_t) * (size_t)S * V));
    CHECK_OK(pllm_cuda_alloc(dev, &d_rec, sizeof *rec * (size_t)S));
    CHECK_OK(pllm_cuda_alloc(dev, &d_ids, sizeof(int32_t) * (size_t)(n_ids + 1)));
    CHECK_OK(pllm_cuda_alloc(dev, &d_tok, sizeof(int32_t) * (size_t)S));
    CHECK_OK(pllm_cuda_alloc(dev, &d_lp, sizeof(float) * (size_t)S));
    CHECK_OK(pllm_cuda_alloc(dev, &d_top, sizeof(pllm_cuda_sample_top) * (size_t)S));
    CHECK_OK(pllm_cuda_upload(dev, d_logits, logits, sizeof(float) * (size_t)S * V));
    CHECK_OK(pllm_cuda_memset(dev, d_cnt, 0, sizeof(int32_t) * (size_t)S * V));
    CHECK_OK(pllm_cuda_upload(dev, d_rec, rec, sizeof *rec * (size_t)S));
    if (n_ids) CHECK_OK(pllm_cuda_upload(dev, d_ids, ids, sizeof(int32_t) * (size_t)n_ids));
    pllm_cuda_sample_args a = {.logits = d_logits,
                               .work = d_work,
                               .counts = d_cnt,
                               .params = d_rec,
                               .ids = d_ids,
                               .tokens = d_tok,
                               .logprobs = d_lp,
                               .top = d_top,
                               .part = d_part,
                               .n_parts = n_parts,
                               .n_samples = S,
                               .n_vocab = V};
    CHECK_OK(pllm_cuda_sample(dev, &a));
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)S),
            *cnt = malloc(sizeof(int32_t) * (size_t)S * V);
    float *lp = malloc(sizeof(float) * (size_t)S);
    pllm_cuda_sample_top *top = malloc(sizeof *top * (size_t)S);
    float *after = malloc(sizeof(float) * (size_t)S * V);
    CHECK_OK(pllm_cuda_download(dev, tok, d_tok, sizeof(int32_t) * (size_t)S));
    CHECK_OK(pllm_cuda_download(dev, lp, d_lp, sizeof(float) * (size_t)S));
    CHECK_OK(pllm_cuda_download(dev, top, d_top, sizeof *top * (size_t)S));
    CHECK_OK(pllm_cuda_download(dev, cnt, d_cnt, sizeof(int32_t) * (size_t)S * V));
    CHECK_OK(pllm_cuda_download(dev, after, d_logits, sizeof(float) * (size_t)S * V));
    CHECK_OK(pllm_cuda_sync(dev));

    size_t nonzero = 0;
    for (size_t i = 0; i < (size_t)S * V; i++) nonzero += cnt[i] != 0;
    CHECK(nonzero == 0);
    CHECK(memcmp(after, logits, sizeof(float) * (size_t)S * V) == 0); /* logits are read only */

    void *scratch = malloc(pllm_sample_scratch_bytes(V));
    double lp_err = 0;
    for (int s = 0; s < S; s++) {
        tcase *c = &cs[s];
        pllm_sample_ctx ctx = {c->prompt, c->n_prompt, c->output, c->n_output,
                               c->banned, c->n_banned, c->n_valid};
        int32_t rid[20];
        float rlp[20];
        pllm_sample_result r = {.top_ids = rid, .top_logprobs = rlp};
        pllm_sample(&r, c->logits, V, &c->p, &ctx, scratch); /* c->logits: now processed */
        (*n_cases)++;
        const int nv = valid_of(c, V);
        CHECK(tok[s] >= 0 && tok[s] < nv); /* never an id without a token */
        CHECK(r.token >= 0 && r.token < nv);
        for (int k = 0; k < rec[s].n_top; k++) CHECK(top[s].ids[k] >= 0 && top[s].ids[k] < nv);
        bool same = tok[s] == r.token;
        if (same) {
            (*n_same)++;
            CHECK(close_lp(lp[s], r.logprob));
            lp_err = fmax(lp_err, fabs((double)lp[s] - r.logprob));
        } else {
            bool greedy = c->p.temperature == 0.0f || c->p.top_k == 1;
            double m = greedy ? 1.0 : random_margin(c->logits, nv, &c->p, (uint64_t)c->n_output);
            if (m < 1e-9) {
                (*n_ambiguous)++;
                fprintf(stderr,
                        "    V=%d sample %d: token %d vs reference %d at a rounding boundary "
                        "(margin %.2g)\n",
                        V, s, tok[s], r.token, m);
            } else {
                fprintf(stderr,
                        "    V=%d sample %d: token %d but the reference says %d (margin %.2g): "
                        "temp %g top_k %d top_p %g "
                        "min_p %g rep %g pres %g freq %g, %d prompt %d output %d banned ids\n",
                        V, s, tok[s], r.token, m, (double)c->p.temperature, c->p.top_k,
                        (double)c->p.top_p, (double)c->p.min_p, (double)c->p.repetition_penalty,
                        (double)c->p.presence_penalty, (double)c->p.frequency_penalty, c->n_prompt,
                        c->n_output, c->n_banned);
                CHECK(!"token differs from pllm_sample");
            }
        }
        CHECK(rec[s].n_top == r.n_top);
        for (int k = 0; k < r.n_top && k < rec[s].n_top; k++) {
            if (top[s].ids[k] != rid[k] || !close_lp(top[s].logprobs[k], rlp[k])) {
                fprintf(stderr,
                        "    V=%d sample %d: top logprob %d is (%d, %g), reference (%d, %g)\n", V,
                        s, k, top[s].ids[k], (double)top[s].logprobs[k], rid[k], (double)rlp[k]);
                CHECK(!"top logprobs differ");
            }
        }
    }
    fprintf(stderr, "  V=%-5d %2d samples: logprob max abs err %.2g\n", V, S, lp_err);
    free(scratch);
    for (int s = 0; s < S; s++) free_case(&cs[s]);
    free(cs), free(rec), free(logits), free(ids), free(tok), free(cnt), free(lp), free(top),
        free(after);
    pllm_cuda_free(dev, d_logits), pllm_cuda_free(dev, d_work), pllm_cuda_free(dev, d_cnt),
        pllm_cuda_free(dev, d_rec);
    pllm_cuda_free(dev, d_ids), pllm_cuda_free(dev, d_tok), pllm_cuda_free(dev, d_lp),
        pllm_cuda_free(dev, d_top), pllm_cuda_free(dev, d_part);
}

int main(int argc, char **argv)
{
    uint64_t seed = strtoull(pllm_test_env("PLLM_TEST_SEED", "0"), NULL, 10);
    if (!seed) seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    fprintf(stderr, "cuda_sampler: seed %llu (PLLM_TEST_SEED to repeat)\n",
            (unsigned long long)seed);
    g_rng = seed;
    char why[256];
    if (pllm_cuda_dev_count(why, sizeof why) == 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "needs a CUDA device: %s (the emulated build runs these checks)",
                 why);
        pllm_test_skip(msg);
    }
    pllm_cuda_dev *dev = NULL;
    CHECK_OK(pllm_cuda_dev_init(&dev, 0));
    if (!dev) return pllm_test_finish("cuda_sampler");
    const int rounds = argc > 1 ? atoi(argv[1]) : 1;
    double t0 = pllm_now();
    int n_same = 0, n_amb = 0, n_cases = 0;
    static const int vocabs[] = {1, 2, 3, 8, 64, 300, 2500, 6000};
    for (int r = 0; r < rounds; r++)
        for (size_t i = 0; i < PLLM_ARRAY_LEN(vocabs); i++)
            run_batch(dev, vocabs[i], vocabs[i] > 3000 ? 6 : 24, &n_same, &n_amb, &n_cases);
    fprintf(stderr,
            "cuda_sampler: %d cases: %d identical tokens, %d at a rounding boundary, %d wrong; "
            "%.2f s\n",
            n_cases, n_same, n_amb, n_cases - n_same - n_amb, pllm_now() - t0);
    pllm_cuda_dev_free(dev);
    return pllm_test_finish("cuda_sampler");
}

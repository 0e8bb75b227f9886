/*
 * sampler.c: the reference sampler. The semantics (order of the steps, tie-breaking, the RNG)
 * are stated in sampling.h; this file implements them and says only how.
 *
 * Cost per call for a vocabulary of n:
 *   - always: one pass for the raw max (and the greedy argmax), one pass of exp() for the raw
 *     log-softmax normaliser (the sampled token's logprob), and one more pass for top-N
 *     logprobs when asked (a small insertion list, N <= 20);
 *   - bans and penalties: O(n_banned + n_prompt + n_output), plus one memset of n int32
 *     when a penalty is on;
 *   - greedy: nothing more;
 *   - random: one pass of exp() over the candidates (all ids, or only those at or above the
 *     top-k threshold, found with a size-k min-heap); top-p sorts the candidates when there
 *     are few of them, otherwise finds the boundary with a histogram of log-probabilities and
 *     sorts only the boundary bucket; the draw is one pass over the kept ids.
 */
#include "engine/sampling.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- RNG ------------------------------------------------------------------------------- */

/* SplitMix64's output function (Steele, Lea, Flood 2014; constants of Stafford's Mix13). */
static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double pllm_rng_uniform(uint64_t seed, uint64_t step)
{
    uint64_t key = mix64(seed ^ 0x243F6A8885A308D3ull);
    uint64_t x = mix64(key + (step + 1) * 0x9E3779B97F4A7C15ull);
    return (double)(x >> 11) * 0x1.0p-53;
}

/* ---- parameters ------------------------------------------------------------------------ */

void pllm_sampling_defaults(pllm_sampling_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 0.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->seed = 0;
    p->logprobs = 0;
}

pllm_status pllm_sampling_validate(const pllm_sampling_params *p)
{
    if (!(p->temperature >= 0.0f && p->temperature <= FLT_MAX))
        return pllm_errorf(PLLM_ERR_INVALID, "temperature must be a finite number >= 0, got %g", (double)p->temperature);
    if (p->top_k < -1)
        return pllm_errorf(PLLM_ERR_INVALID, "top_k must be >= -1 (-1 or 0: off), got %d", (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return pllm_errorf(PLLM_ERR_INVALID, "top_p must be in (0, 1], got %g", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return pllm_errorf(PLLM_ERR_INVALID, "min_p must be in [0, 1], got %g", (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= FLT_MAX))
        return pllm_errorf(PLLM_ERR_INVALID, "repetition_penalty must be a finite number > 0, got %g",
                           (double)p->repetition_penalty);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return pllm_errorf(PLLM_ERR_INVALID, "presence_penalty must be in [-2, 2], got %g", (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return pllm_errorf(PLLM_ERR_INVALID, "frequency_penalty must be in [-2, 2], got %g",
                           (double)p->frequency_penalty);
    if (p->logprobs < 0 || p->logprobs > 20)
        return pllm_errorf(PLLM_ERR_INVALID, "logprobs must be in [0, 20], got %d", (int)p->logprobs);
    return PLLM_OK;
}

/* ---- scratch --------------------------------------------------------------------------- */

/* The scratch buffer, carved into four arrays of n_vocab entries each. */
typedef struct sampler_scratch {
    double *w;      /* [n] unnormalised probabilities of the candidates (compact) */
    int32_t *idx;   /* [n] candidate ids, ascending (compact) */
    float *raw;     /* [n] raw logits of the ids the penalties/bans modify (sparse) */
    void *aux;      /* [8n bytes] counts (int32), top-k heap (float), or sort pairs */
} sampler_scratch;

/* A (logit, candidate position) pair for the top-p sort. */
typedef struct lj_pair {
    float l;
    int32_t j;
} lj_pair;

#define SCRATCH_ALIGN 64

static size_t align_up(size_t x) { return (x + SCRATCH_ALIGN - 1) & ~(size_t)(SCRATCH_ALIGN - 1); }

size_t pllm_sample_scratch_bytes(int32_t n_vocab)
{
    size_t n = n_vocab > 0 ? (size_t)n_vocab : 1;
    return align_up(8 * n) + align_up(4 * n) + align_up(4 * n) + align_up(8 * n) + SCRATCH_ALIGN;
}

static sampler_scratch carve(void *scratch, int32_t n_vocab)
{
    size_t n = (size_t)n_vocab;
    uintptr_t a = ((uintptr_t)scratch + SCRATCH_ALIGN - 1) & ~(uintptr_t)(SCRATCH_ALIGN - 1);
    char *base = (char *)a;
    sampler_scratch s;
    s.w = (double *)base;
    base += align_up(8 * n);
    s.idx = (int32_t *)base;
    base += align_up(4 * n);
    s.raw = (float *)base;
    base += align_up(4 * n);
    s.aux = base;
    return s;
}

/* ---- helpers --------------------------------------------------------------------------- */

static inline bool in_vocab(int32_t id, int32_t n) { return id >= 0 && id < n; }

static bool id_in(const int32_t *ids, int32_t n_ids, int32_t id)
{
    for (int32_t i = 0; i < n_ids; i++)
        if (ids[i] == id) return true;
    return false;
}

/* Restore the min-heap property of heap[k] below position i. */
static void sift_down(float *heap, int32_t k, int32_t i, float v)
{
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= k) break;
        if (c + 1 < k && heap[c + 1] < heap[c]) c++;
        if (!(heap[c] < v)) break;
        heap[i] = heap[c];
        i = c;
    }
    heap[i] = v;
}

/* The k-th largest of x[n] (1 <= k <= n), with a size-k min-heap in heap[k]. */
static float kth_largest(const float *x, int32_t n, int32_t k, float *heap)
{
    /* Shapes: x [n], heap [k]. Heapify the first k, then replace the minimum when beaten. */
    memcpy(heap, x, sizeof(float) * (size_t)k);
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(heap, k, i, heap[i]);
    for (int32_t i = k; i < n; i++)
        if (x[i] > heap[0]) sift_down(heap, k, 0, x[i]);
    return heap[0];
}

/* Order for top-p: larger logit first, then lower id (j is ascending in id). */
static int cmp_lj_desc(const void *a, const void *b)
{
    const lj_pair *x = a, *y = b;
    if (x->l > y->l) return -1;
    if (x->l < y->l) return 1;
    return (x->j > y->j) - (x->j < y->j);
}

#define TOPP_SORT_MAX 2048   /* up to this many candidates, top-p sorts them all */
#define TOPP_BINS 512        /* histogram buckets of width 1/8 in log-probability */
#define TOPP_BINS_PER_UNIT 8.0

static inline int32_t topp_bin(float l, double lmax, double temp)
{
    double x = -(((double)l - lmax) / temp) * TOPP_BINS_PER_UNIT;
    return x >= (double)(TOPP_BINS - 1) ? TOPP_BINS - 1 : (int32_t)x;
}

/*
 * Top-p over the candidates idx[m] / w[m] (ascending ids): keep the prefix of the order
 * (logit desc, id asc) whose preceding sum is < top_p * sum(w). Compacts idx/w in place
 * (ids stay ascending) and returns the new count.
 */
static int32_t apply_top_p(const float *logits, int32_t m, double top_p, double lmax, double temp,
                           const sampler_scratch *s)
{
    double *w = s->w;
    int32_t *idx = s->idx;
    lj_pair *pairs = s->aux;
    double z = 0;
    for (int32_t j = 0; j < m; j++) z += w[j];
    double target = top_p * z;

    double before = 0; /* sum of w over candidates ranked before the sorted ones */
    int32_t n_sort = 0;
    bool keep_all = false;
    if (m <= TOPP_SORT_MAX) {
        for (int32_t j = 0; j < m; j++) pairs[n_sort++] = (lj_pair){logits[idx[j]], j};
    } else {
        double hsum[TOPP_BINS] = {0};
        for (int32_t j = 0; j < m; j++) hsum[topp_bin(logits[idx[j]], lmax, temp)] += w[j];
        int32_t bstar = -1;
        for (int32_t b = 0; b < TOPP_BINS; b++) {
            if (before + hsum[b] >= target) {
                bstar = b;
                break;
            }
            before += hsum[b];
        }
        if (bstar < 0) {
            keep_all = true; /* only by rounding: the whole mass is below target */
        } else {
            for (int32_t j = 0; j < m; j++)
                if (topp_bin(logits[idx[j]], lmax, temp) == bstar) pairs[n_sort++] = (lj_pair){logits[idx[j]], j};
        }
    }
    if (keep_all) return m;
    qsort(pairs, (size_t)n_sort, sizeof *pairs, cmp_lj_desc);
    lj_pair last = pairs[0];
    double acc = before;
    for (int32_t t = 0; t < n_sort; t++) {
        if (!(acc < target)) break;
        last = pairs[t];
        acc += w[pairs[t].j];
    }
    int32_t out = 0;
    for (int32_t j = 0; j < m; j++) {
        float l = logits[idx[j]];
        if (l > last.l || (l == last.l && j <= last.j)) {
            idx[out] = idx[j];
            w[out] = w[j];
            out++;
        }
    }
    return out;
}

/*
 * The random path: temperature, min_p, top_k, top_p, then the draw. logits [n] are the
 * processed logits (bans and penalties applied). Returns -1 when no id has a finite logit.
 */
static int32_t sample_random(const float *logits, int32_t n, const pllm_sampling_params *p, uint64_t step,
                             const sampler_scratch *s)
{
    float fmax = -INFINITY;
    for (int32_t i = 0; i < n; i++) fmax = logits[i] > fmax ? logits[i] : fmax;
    if (fmax == -INFINITY) return -1;
    double lmax = fmax, temp = p->temperature;

    float lk = -INFINITY; /* top-k threshold on the processed logits: keep l >= lk */
    if (p->top_k > 0 && p->top_k < n) lk = kth_largest(logits, n, p->top_k, s->aux);

    double min_w = p->min_p > 0.0f ? (double)p->min_p : 0.0; /* p >= min_p * p_max <=> w >= min_p */
    double *w = s->w;
    int32_t *idx = s->idx;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        float l = logits[i];
        if (!(l >= lk) || l == -INFINITY) continue;
        double wi = exp(((double)l - lmax) / temp);
        if (wi >= min_w) {
            idx[m] = i;
            w[m] = wi;
            m++;
        }
    }
    PLLM_ASSERT(m >= 1); /* the maximal id always survives: w = 1 */

    if (p->top_p < 1.0f && m > 1) m = apply_top_p(logits, m, (double)p->top_p, lmax, temp, s);

    /* Inverse CDF in ascending id order. */
    double z = 0;
    for (int32_t j = 0; j < m; j++) z += w[j];
    double target = pllm_rng_uniform(p->seed, step) * z;
    double c = 0;
    int32_t last_pos = 0;
    for (int32_t j = 0; j < m; j++) {
        if (w[j] > 0) last_pos = j;
        c += w[j];
        if (c > target) return idx[j];
    }
    return idx[last_pos]; /* u * z rounded up to z */
}

/* Lowest id that is not banned (0 when all are): the answer when no logit is finite. */
static int32_t fallback_token(const pllm_sample_ctx *ctx, int32_t n)
{
    for (int32_t t = 0; t < n; t++)
        if (!ctx || !id_in(ctx->banned, ctx->n_banned, t)) return t;
    return 0;
}

/* ---- the sampler ----------------------------------------------------------------------- */

void pllm_sample(pllm_sample_result *res, float *logits, int32_t n_vocab, const pllm_sampling_params *p,
                 const pllm_sample_ctx *ctx, void *scratch)
{
    /* Shapes: logits [n_vocab] (modified in place), res->top_ids / top_logprobs [p->logprobs]. */
    PLLM_ASSERT(res && logits && p && scratch && n_vocab > 0);
    PLLM_ASSERT(p->temperature >= 0.0f);
    const int32_t n = n_vocab;
    sampler_scratch s = carve(scratch, n);

    /* Sanitise (NaN -> -inf, +inf -> FLT_MAX) and find the raw max and its first position. */
    float rmax = -INFINITY;
    int32_t rarg = 0;
    for (int32_t i = 0; i < n; i++) {
        float v = logits[i];
        if (!(v <= FLT_MAX)) {
            v = v == INFINITY ? FLT_MAX : -INFINITY;
            logits[i] = v;
        }
        if (v > rmax) {
            rmax = v;
            rarg = i;
        }
    }

    /* Raw log-softmax normaliser: lse = rmax + log(sum exp(l - rmax)). */
    double lse = -INFINITY;
    if (rmax > -INFINITY) {
        double sum = 0, dmax = rmax;
        for (int32_t i = 0; i < n; i++) sum += exp((double)logits[i] - dmax);
        lse = dmax + log(sum);
    }

    /* Top-N raw logprobs: sorted by logit desc, then id asc. */
    int32_t n_top = PLLM_MIN(p->logprobs, n);
    res->n_top = n_top;
    if (n_top > 0) {
        PLLM_ASSERT(res->top_ids && res->top_logprobs);
        float *tv = res->top_logprobs; /* holds raw logits until the end */
        int32_t *ti = res->top_ids, cnt = 0;
        for (int32_t i = 0; i < n; i++) {
            float v = logits[i];
            if (cnt == n_top && !(v > tv[n_top - 1])) continue;
            int32_t pos = cnt < n_top ? cnt++ : n_top - 1;
            while (pos > 0 && v > tv[pos - 1]) {
                tv[pos] = tv[pos - 1];
                ti[pos] = ti[pos - 1];
                pos--;
            }
            tv[pos] = v;
            ti[pos] = i;
        }
        for (int32_t t = 0; t < n_top; t++)
            tv[t] = rmax > -INFINITY ? (float)((double)tv[t] - lse) : -INFINITY;
    }

    /* Which ids the bans and penalties touch; save their raw logits first. */
    const int32_t *banned = ctx ? ctx->banned : NULL, *prompt = ctx ? ctx->prompt : NULL;
    const int32_t *output = ctx ? ctx->output : NULL;
    int32_t n_banned = ctx ? ctx->n_banned : 0, n_prompt = ctx ? ctx->n_prompt : 0;
    int32_t n_output = ctx ? ctx->n_output : 0;
    const float rep = p->repetition_penalty, fp = p->frequency_penalty, pp = p->presence_penalty;
    const bool do_rep = rep != 1.0f && n_prompt + n_output > 0;
    const bool do_freq = (fp != 0.0f || pp != 0.0f) && n_output > 0;
    const int32_t n_rep_prompt = do_rep ? n_prompt : 0;
    const int32_t n_hist_output = do_rep || do_freq ? n_output : 0;
    for (int32_t i = 0; i < n_banned; i++)
        if (in_vocab(banned[i], n)) s.raw[banned[i]] = logits[banned[i]];
    for (int32_t i = 0; i < n_rep_prompt; i++)
        if (in_vocab(prompt[i], n)) s.raw[prompt[i]] = logits[prompt[i]];
    for (int32_t i = 0; i < n_hist_output; i++)
        if (in_vocab(output[i], n)) s.raw[output[i]] = logits[output[i]];
    const bool modified = n_banned > 0 || n_rep_prompt > 0 || n_hist_output > 0;

    /* 1. bans */
    for (int32_t i = 0; i < n_banned; i++)
        if (in_vocab(banned[i], n)) logits[banned[i]] = -INFINITY;

    /* 2-3. penalties; cnt[] is all zero between the phases and after them. */
    int32_t *cnt = s.aux;
    if (do_rep || do_freq) memset(cnt, 0, sizeof(int32_t) * (size_t)n);
    if (do_rep) {
        for (int32_t pass = 0; pass < 2; pass++) {
            const int32_t *ids = pass == 0 ? prompt : output;
            int32_t n_ids = pass == 0 ? n_prompt : n_output;
            for (int32_t i = 0; i < n_ids; i++) {
                int32_t id = ids[i];
                if (!in_vocab(id, n) || cnt[id]) continue;
                cnt[id] = 1;
                float v = logits[id];
                v = v > 0.0f ? v / rep : v * rep;
                logits[id] = v > FLT_MAX ? FLT_MAX : v;
            }
        }
        for (int32_t i = 0; i < n_prompt; i++)
            if (in_vocab(prompt[i], n)) cnt[prompt[i]] = 0;
        for (int32_t i = 0; i < n_output; i++)
            if (in_vocab(output[i], n)) cnt[output[i]] = 0;
    }
    if (do_freq) {
        for (int32_t i = 0; i < n_output; i++)
            if (in_vocab(output[i], n)) cnt[output[i]]++;
        for (int32_t i = 0; i < n_output; i++) {
            int32_t id = output[i];
            if (!in_vocab(id, n) || !cnt[id]) continue;
            float v = logits[id] - (fp * (float)cnt[id] + pp);
            logits[id] = v > FLT_MAX ? FLT_MAX : v;
            cnt[id] = 0;
        }
    }

    /* 4-5. greedy or random */
    int32_t token;
    if (p->temperature == 0.0f || p->top_k == 1) {
        if (!modified) {
            token = rarg;
        } else {
            float best = -INFINITY;
            token = -1;
            for (int32_t i = 0; i < n; i++)
                if (logits[i] > best) {
                    best = logits[i];
                    token = i;
                }
        }
        if (rmax == -INFINITY) token = -1;
    } else {
        token = sample_random(logits, n, p, (uint64_t)n_output, &s);
    }
    if (token < 0) token = fallback_token(ctx, n);

    float raw_tok = logits[token];
    if (modified && (id_in(banned, n_banned, token) || id_in(prompt, n_rep_prompt, token) ||
                     id_in(output, n_hist_output, token)))
        raw_tok = s.raw[token];
    res->token = token;
    res->logprob = rmax > -INFINITY ? (float)((double)raw_tok - lse) : -INFINITY;
}

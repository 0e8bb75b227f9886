/*
 * sampler.c: the reference sampler. The semantics (order of the steps, tie-breaking, the RNG)
 * are stated in sampling.h; this file implements them and says only how.
 *
 * Cost per call for a vocabulary of n (the exp() passes dominate):
 *   - always: one vector pass for the raw max, a scan for its first position, one vector
 *     exp() pass for the raw log-softmax normaliser (the sampled token's logprob), and one
 *     more scalar pass for top-N logprobs when asked (an insertion list, N <= 20);
 *   - bans and penalties: O(n_banned + n_prompt + n_output), plus one memset of n int32
 *     when a penalty is on;
 *   - greedy: one more max pass when bans/penalties changed the logits;
 *   - random: one vector exp() pass over the candidates (all ids, or only those at or above
 *     the top-k threshold, found with a size-k min-heap); min_p and top-p zero the weights of
 *     the ids they drop; top-p sorts the candidates when there are at most TOPP_SORT_MAX,
 *     otherwise finds the cut with a histogram of the weights' exponents and sorts only the
 *     bucket holding it; the draw sums blocks of 64 weights and walks one block.
 * exp() is our own (vexp_neg below): vectorised with GCC/Clang vector extensions, within
 * 1 ulp of the true value for the arguments used here (x <= 0), identical in every lane.
 */
#include "model/sampling.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- vector helpers -------------------------------------------------------------------- */

/* Lanes per vector: what the target has registers for (GCC/Clang vector extensions lower
 * them to SSE2/NEON pairs otherwise; the ABI of non-inlined vector functions needs the
 * matching ISA, so the width follows the compile flags). */
#if defined(__AVX512F__)
#define VW 8
#elif defined(__AVX__)
#define VW 4
#else
#define VW 2
#endif
typedef double vd __attribute__((vector_size(VW * 8)));
typedef int64_t vi64 __attribute__((vector_size(VW * 8)));
typedef float vf __attribute__((vector_size(VW * 4)));
typedef int32_t vi32 __attribute__((vector_size(VW * 4)));
#define PLLM_INLINE static inline __attribute__((always_inline))

/*
 * exp(x) for lanes x <= 0: 0 below -708 (no subnormal results) and for -inf. Cody-Waite
 * reduction x = k ln2 + r with |r| <= ln2/2 (k by the 1.5 * 2^52 rounding trick), a degree-13
 * Taylor polynomial (truncation error < 5e-18 relative), then scaling by 2^k through the
 * exponent bits. Max relative error measured against libm: 2.2e-16.
 */
PLLM_INLINE vd vexp_neg(vd x)
{
    const vd lo = (vd){0} + -708.0, shifter = (vd){0} + 0x1.8p52;
    vi64 keep = x >= lo;
    x = (vd)(((vi64)x & keep) | ((vi64)lo & ~keep));
    vd t = x * 0x1.71547652b82fep0 + shifter; /* k + 1.5 * 2^52, k = round(x / ln2) */
    vd k = t - shifter;
    vd r = x - k * 0x1.62e42fee00000p-1; /* ln2 high part: k * hi is exact */
    r = r - k * 0x1.a39ef35793c76p-33;   /* ln2 low part */
    vd q = (vd){0} + 1.0 / 6227020800.0;
    q = q * r + 1.0 / 479001600.0;
    q = q * r + 1.0 / 39916800.0;
    q = q * r + 1.0 / 3628800.0;
    q = q * r + 1.0 / 362880.0;
    q = q * r + 1.0 / 40320.0;
    q = q * r + 1.0 / 5040.0;
    q = q * r + 1.0 / 720.0;
    q = q * r + 1.0 / 120.0;
    q = q * r + 1.0 / 24.0;
    q = q * r + 1.0 / 6.0;
    q = q * r + 0.5;
    q = q * r + 1.0;
    q = q * r + 1.0;
    vi64 scale = ((vi64)t - (vi64)shifter + 1023) << 52;
    return (vd)((vi64)(q * (vd)scale) & keep);
}

/* One lane of vexp_neg (bit-identical to the vector result). */
static inline double exp_neg(double x)
{
    vd v = {0};
    v[0] = x;
    return vexp_neg(v)[0];
}

PLLM_INLINE vd load_vd_f(const float *p)
{
    vf f;
    memcpy(&f, p, sizeof f);
    return __builtin_convertvector(f, vd);
}

PLLM_INLINE double hsum(vd v)
{
    double s = 0;
    for (int i = 0; i < VW; i++) s += v[i];
    return s;
}

/* sum_i exp(l[i] - m) for l [n], m >= max(l). */
static double sum_exp(const float *l, int32_t n, double m)
{
    vd a0 = {0}, a1 = {0};
    int32_t i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        a0 += vexp_neg(load_vd_f(l + i) - m);
        a1 += vexp_neg(load_vd_f(l + i + VW) - m);
    }
    double s = hsum(a0 + a1);
    for (; i < n; i++) s += exp_neg((double)l[i] - m);
    return s;
}

/* w[i] = exp((l[i] - m) / temp) for l [n], m >= max(l), temp > 0. */
static void fill_weights(double *w, const float *l, int32_t n, double m, double temp)
{
    int32_t i = 0;
    for (; i + VW <= n; i += VW) {
        vd y = vexp_neg((load_vd_f(l + i) - m) / temp);
        memcpy(w + i, &y, sizeof y);
    }
    for (; i < n; i++) w[i] = exp_neg(((double)l[i] - m) / temp);
}

/* sum of w [n] (VW * 2 partial sums). */
static double sum_d(const double *w, int32_t n)
{
    vd a0 = {0}, a1 = {0};
    int32_t i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        vd x, y;
        memcpy(&x, w + i, sizeof x);
        memcpy(&y, w + i + VW, sizeof y);
        a0 += x;
        a1 += y;
    }
    double s = hsum(a0 + a1);
    for (; i < n; i++) s += w[i];
    return s;
}

/* max of x [n] (-inf for none); *nonfinite set when some x is NaN or +inf. */
static float max_f(const float *x, int32_t n, bool *nonfinite)
{
    vf m = (vf){0} + -INFINITY;
    vi32 bad = {0};
    int32_t i = 0;
    for (; i + VW <= n; i += VW) {
        vf v;
        memcpy(&v, x + i, sizeof v);
        vi32 gt = v > m;
        m = (vf)((gt & (vi32)v) | (~gt & (vi32)m));
        bad |= (v != v) | (v == INFINITY);
    }
    float r = -INFINITY;
    bool b = false;
    for (int32_t j = 0; j < VW; j++) {
        r = m[j] > r ? m[j] : r;
        b |= bad[j] != 0;
    }
    for (; i < n; i++) {
        r = x[i] > r ? x[i] : r;
        b |= x[i] != x[i] || x[i] == INFINITY;
    }
    *nonfinite = b;
    return r;
}

/* First i with x[i] == v (x [n] holds v). */
static int32_t find_first(const float *x, int32_t n, float v)
{
    for (int32_t i = 0; i < n; i++)
        if (x[i] == v) return i;
    return 0;
}

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

bool pllm_sampling_reads_history(const pllm_sampling_params *p)
{
    return p->repetition_penalty != 1.0f || p->frequency_penalty != 0.0f ||
           p->presence_penalty != 0.0f;
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

/* The scratch buffer, carved into arrays of n_vocab entries. */
typedef struct sampler_scratch {
    double *w;      /* [n] weights of the candidates */
    int32_t *idx;   /* [n] candidate ids when top-k compacts them (ascending) */
    float *cl;      /* [n] candidate logits when top-k compacts them */
    float *raw;     /* [n] raw logits of the ids bans/penalties modify (sparse) */
    void *aux;      /* [8n bytes] counts (int32), top-k heap (float), or top-p sort pairs */
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
    return align_up(8 * n) + 3 * align_up(4 * n) + align_up(8 * n) + SCRATCH_ALIGN;
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
    s.cl = (float *)base;
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

/* Order for top-p: larger logit first, then lower position (positions ascend with ids). */
static int cmp_lj_desc(const void *a, const void *b)
{
    const lj_pair *x = a, *y = b;
    if (x->l > y->l) return -1;
    if (x->l < y->l) return 1;
    return (x->j > y->j) - (x->j < y->j);
}

#define TOPP_SORT_MAX 2048 /* up to this many candidates, top-p sorts them all */
#define TOPP_BINS 512      /* histogram buckets: 8 per octave of weight, down to 2^-64 */

/* Bucket of a weight w in [0, 1]: non-increasing in w (8 buckets per power of two; 0 and
 * everything below 2^-64 share the last). */
static inline int32_t topp_bin(double w)
{
    uint64_t one, bits;
    double d1 = 1.0;
    memcpy(&one, &d1, sizeof one);
    memcpy(&bits, &w, sizeof bits);
    uint64_t b = (one - bits) >> 49;
    return b >= TOPP_BINS - 1 ? TOPP_BINS - 1 : (int32_t)b;
}

/* w[j] = w[j] >= t ? w[j] : 0 for w [m]. */
static void zero_below(double *w, int32_t m, double t)
{
    int32_t j = 0;
    for (; j + VW <= m; j += VW) {
        vd x;
        memcpy(&x, w + j, sizeof x);
        x = (vd)((vi64)x & (x >= t));
        memcpy(w + j, &x, sizeof x);
    }
    for (; j < m; j++) w[j] = w[j] >= t ? w[j] : 0.0;
}

/*
 * Top-p over m candidates: logits l [m] and weights w [m] (position j ascends with the id;
 * zero weights are ids already dropped). Ranks by (logit desc, position asc), keeps the
 * ranks whose preceding weight sum is < top_p * sum(w), and zeroes the weights of the rest.
 * pairs: room for m entries.
 */
static void apply_top_p(const float *l, double *w, int32_t m, double top_p, lj_pair *pairs)
{
    double target = top_p * sum_d(w, m);
    double before = 0; /* weight ranked before the pairs to sort */
    int32_t n_sort = 0;
    if (m <= TOPP_SORT_MAX) {
        for (int32_t j = 0; j < m; j++)
            if (w[j] > 0) pairs[n_sort++] = (lj_pair){l[j], j};
    } else {
        /* Buckets are monotone in w and w in l: the cut lies in the first bucket where the
         * running bucket sum reaches target; only that bucket needs sorting. Four interleaved
         * histograms keep consecutive adds to one bucket from waiting on each other. */
        double hsum[4][TOPP_BINS];
        memset(hsum, 0, sizeof hsum);
        int32_t j = 0;
        for (; j + 4 <= m; j += 4)
            for (int32_t q = 0; q < 4; q++) hsum[q][topp_bin(w[j + q])] += w[j + q];
        for (; j < m; j++) hsum[0][topp_bin(w[j])] += w[j];
        int32_t bstar = -1;
        for (int32_t b = 0; b < TOPP_BINS; b++) {
            double hb = hsum[0][b] + hsum[1][b] + hsum[2][b] + hsum[3][b];
            if (before + hb >= target) {
                bstar = b;
                break;
            }
            before += hb;
        }
        if (bstar < 0) return; /* only by rounding: the whole mass is below target */
        for (j = 0; j < m; j++)
            if (w[j] > 0 && topp_bin(w[j]) == bstar) pairs[n_sort++] = (lj_pair){l[j], j};
    }
    PLLM_ASSERT(n_sort > 0);
    qsort(pairs, (size_t)n_sort, sizeof *pairs, cmp_lj_desc);
    int32_t t_last = 0;
    double acc = before;
    for (int32_t t = 0; t < n_sort; t++) {
        if (!(acc < target)) break;
        t_last = t;
        acc += w[pairs[t].j];
    }
    /* Everything ranked after the last kept pair has w <= w_last, and every id with
     * w == w_last is among the pairs (same weight, same bucket): zero w < w_last in one
     * vector pass, then the dropped pairs that tie w_last. */
    double w_last = w[pairs[t_last].j];
    zero_below(w, m, w_last);
    for (int32_t t = t_last + 1; t < n_sort; t++) w[pairs[t].j] = 0.0;
}

/*
 * Inverse CDF over w [m] in position order: the first j whose running sum exceeds u * sum(w)
 * (the running sum is taken in blocks of 64, then within one block). Falls back to the last
 * j with w > 0 when rounding leaves none.
 */
static int32_t draw(const double *w, int32_t m, double u)
{
    enum { BLOCK = 64 };
    double target = u * sum_d(w, m), acc = 0;
    for (int32_t b = 0; b < m; b += BLOCK) {
        int32_t e = PLLM_MIN(m, b + BLOCK);
        double bs = sum_d(w + b, e - b);
        if (acc + bs <= target) {
            acc += bs;
            continue;
        }
        for (int32_t j = b; j < e; j++) {
            acc += w[j];
            if (acc > target) return j;
        }
    }
    for (int32_t j = m - 1; j > 0; j--)
        if (w[j] > 0) return j;
    return 0;
}

/*
 * The random path: temperature, min_p, top_k, top_p, then the draw. logits [n] are the
 * processed logits (finite or -inf: bans and penalties applied). Returns -1 when no id has
 * a finite logit.
 */
static int32_t sample_random(const float *logits, int32_t n, const pllm_sampling_params *p, uint64_t step,
                             const sampler_scratch *s)
{
    bool nonfinite;
    float fmax = max_f(logits, n, &nonfinite);
    if (fmax == -INFINITY) return -1;
    double lmax = fmax, temp = p->temperature;

    /* Candidates: every id (w = 0 for -inf), or the compacted ids at or above the top-k
     * threshold (ties kept). */
    const float *l = logits;
    const int32_t *idx = NULL;
    int32_t m = n;
    if (p->top_k > 0 && p->top_k < n) {
        float lk = kth_largest(logits, n, p->top_k, s->aux);
        m = 0;
        for (int32_t i = 0; i < n; i++)
            if (logits[i] >= lk && logits[i] > -INFINITY) {
                s->idx[m] = i;
                s->cl[m] = logits[i];
                m++;
            }
        l = s->cl;
        idx = s->idx;
    }
    double *w = s->w;
    fill_weights(w, l, m, lmax, temp);
    if (p->min_p > 0.0f) zero_below(w, m, (double)p->min_p); /* p >= min_p * p_max <=> w >= min_p */
    if (p->top_p < 1.0f) apply_top_p(l, w, m, (double)p->top_p, s->aux);
    int32_t j = draw(w, m, pllm_rng_uniform(p->seed, step));
    return idx ? idx[j] : j;
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
    /* a padded vocabulary: the ids past the tokenizer's do not exist for the sampler */
    const int32_t n = ctx && ctx->n_valid > 0 && ctx->n_valid < n_vocab ? ctx->n_valid : n_vocab;
    sampler_scratch s = carve(scratch, n);

    /* Sanitise (NaN -> -inf, +inf -> FLT_MAX; rare) and find the raw max. */
    bool nonfinite;
    float rmax = max_f(logits, n, &nonfinite);
    if (nonfinite) {
        for (int32_t i = 0; i < n; i++)
            if (!(logits[i] <= FLT_MAX)) logits[i] = logits[i] == INFINITY ? FLT_MAX : -INFINITY;
        rmax = max_f(logits, n, &nonfinite);
    }

    /* Top-N raw logprobs: sorted by logit desc, then id asc. */
    int32_t n_top = PLLM_MIN(p->logprobs, n);

    /* Raw log-softmax normaliser: lse = rmax + log(sum exp(l - rmax)); not where no logprob
     * is read (on a greedy row it is most of the sampler's time: an exp per id). */
    const bool want_lp = !res->no_logprob || n_top > 0;
    double lse = -INFINITY;
    if (want_lp && rmax > -INFINITY) lse = (double)rmax + log(sum_exp(logits, n, rmax));
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
        float best = modified ? max_f(logits, n, &nonfinite) : rmax;
        token = best > -INFINITY ? find_first(logits, n, best) : -1;
    } else {
        token = sample_random(logits, n, p, (uint64_t)n_output, &s);
    }
    if (token < 0) token = fallback_token(ctx, n);

    float raw_tok = logits[token];
    if (modified && (id_in(banned, n_banned, token) || id_in(prompt, n_rep_prompt, token) ||
                     id_in(output, n_hist_output, token)))
        raw_tok = s.raw[token];
    res->token = token;
    res->logprob = !want_lp ? NAN : rmax > -INFINITY ? (float)((double)raw_tok - lse) : -INFINITY;
}

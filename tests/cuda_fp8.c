/*
 * cuda_fp8: the fp8 (E4M3) KV cache of the CUDA backend (model/backend.h PLLM_KV_DTYPE_FP8)
 * against independent references.
 *
 * 1. The element conversion the kernels use (pllm_cuda_fp8_roundtrip: the KV store's
 *    __nv_cvt_float_to_fp8(x / s, __NV_SATFINITE, __NV_E4M3) and the attention kernels' read
 *    back) against a reference written from the format's definition, not from CUDA's code: the
 *    127 non-negative finite E4M3 values from sign/exponent/mantissa, and "nearest value, ties to
 *    the even code, +-448 for anything larger (infinities too), NaN to a NaN code" by search.
 *    Inputs: every one of the 256 codes' values, every midpoint between neighbours (the ties) and
 *    the floats just either side of it, subnormals (E4M3's and float's), 448 / 464 / beyond,
 *    +-0, +-inf, NaNs, and 200,000 random floats (random bit patterns and random exponents in
 *    E4M3's range); each also divided by random scales. Codes must be equal, values bitwise.
 * 2. qkv_rope with an fp8 cache: every stored byte and half scale equals the reference
 *    quantization (amax / 448 rounded up to a half, then the reference conversion) of the row
 *    the kernel left in qkv (whose rotation cuda_ops checks bitwise); other slots untouched.
 * 3. Decode (split and not) and prefill attention over an fp8 cache (GQA, head_dim 64 / 128 /
 *    10 (the pair-load fallback) / 256, block sizes 1..16, keys with outlier channels):
 *    - tight: against a float64 attention over the same dequantized K and V (s * e4m3(q)),
 *      relative error (norm-wise, per token) <= 1e-5: only the float summation order differs;
 *    - loose: against float64 attention over the unquantized K and V, <= 0.1: E4M3 keeps 3
 *      mantissa bits (relative rounding error <= 2^-4 per element); the measured error is
 *      printed (typically 0.02-0.04).
 * Built twice: against the emulator (cuda_fp8) and the real CUDA build (cuda_fp8_gpu, which
 * skips when no GPU answers).
 */
#include "cuda/kernels.h"
#include "model/backend.h"
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
    return (int)(pllm_test_rand(&g_rng) % (uint64_t)n);
}

/* ---- the reference E4M3 ------------------------------------------------------------------- */

static double g_val[128]; /* value of code c (0 <= c < 0x7f), from the format's definition */

static void ref_init(void)
{
    for (int c = 0; c < 0x7f; c++) {
        const int e = c >> 3, m = c & 7;
        g_val[c] = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10); /* bias 7, 3 mantissa bits */
    }
    g_val[0x7f] = NAN;
}

static bool ref_is_nan(uint8_t c)
{
    return (c & 0x7f) == 0x7f;
}

static double ref_value(uint8_t c)
{
    return c & 0x80 ? -g_val[c & 0x7f] : g_val[c & 0x7f];
}

/* x in E4M3: nearest, ties to the even code, saturating at 448 (infinities too), NaN -> 0x7f. */
static uint8_t ref_encode(float x)
{
    if (isnan(x)) return 0x7f;
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    const double a = fabs((double)x);
    if (a >= 448.0) return sign | 0x7e;
    int k = 0; /* the largest code whose value is <= a */
    while (k + 1 < 0x7f && g_val[k + 1] <= a) k++;
    if (g_val[k] == a) return sign | (uint8_t)k;
    const double mid = (g_val[k] + g_val[k + 1]) / 2; /* exact: dyadic, few bits */
    if (a < mid) return sign | (uint8_t)k;
    if (a > mid) return sign | (uint8_t)(k + 1);
    return sign | (uint8_t)(k % 2 == 0 ? k : k + 1);
}

/* The row scale: amax / 448 (float division) rounded up to a half, at most 65504. */
static uint16_t ref_row_scale(float amax)
{
    float v = amax / 448.0f;
    if (v > 65504.0f) v = 65504.0f;
    uint16_t h = pllm_fp32_to_fp16(v);
    if (pllm_fp16_to_fp32(h) < v) h++; /* v >= 0: the next half up */
    return h;
}

/* ---- 1. the conversion -------------------------------------------------------------------- */

static void test_conversion(pllm_cuda_dev *dev)
{
    size_t cap = 400000, n = 0;
    float *x = malloc(sizeof(float) * cap);
    for (int c = 0; c < 256; c++)
        if (!ref_is_nan((uint8_t)c)) x[n++] = (float)ref_value((uint8_t)c);
    for (int c = 0; c + 1 < 0x7f; c++)
        for (int s = 0; s < 2; s++) {
            const float mid = (float)((g_val[c] + g_val[c + 1]) / 2) * (s ? -1.0f : 1.0f);
            x[n++] = mid;
            x[n++] = nextafterf(mid, INFINITY);
            x[n++] = nextafterf(mid, -INFINITY);
        }
    const float special[] = {0.0f,
                             -0.0f,
                             448.0f,
                             -448.0f,
                             464.0f,
                             -464.0f,
                             nextafterf(464.0f, 0.0f),
                             nextafterf(464.0f, 1e9f),
                             480.0f,
                             1e30f,
                             -1e30f,
                             FLT_MAX,
                             -FLT_MAX,
                             INFINITY,
                             -INFINITY,
                             NAN,
                             -NAN,
                             FLT_TRUE_MIN,
                             -FLT_TRUE_MIN,
                             FLT_MIN,
                             0x1p-10f,
                             -0x1p-10f,
                             nextafterf(0x1p-10f, 1.0f),
                             0x1p-9f,
                             0x1.8p-9f,
                             0x1p-6f,
                             0x1.fp-7f,
                             65504.0f,
                             -65504.0f};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(special); i++) x[n++] = special[i];
    const size_t n_fixed = n;
    while (n < cap) {
        uint32_t bits = (uint32_t)pllm_test_rand(&g_rng);
        if (n % 2) { /* an exponent in E4M3's range, and a little past both ends */
            const int e = -14 + rnd(25);
            bits = (bits & 0x807fffffu) | ((uint32_t)(e + 127) << 23);
        }
        memcpy(&x[n++], &bits, 4);
    }
    const float scales[] = {1.0f, 0.00390625f, 0.0371f, 1.75f, 3.1e-5f, 0.0f};
    uint8_t *codes = malloc(n);
    float *vals = malloc(sizeof(float) * n), *xs = malloc(sizeof(float) * n);
    void *d_x = NULL, *d_c = NULL, *d_v = NULL;
    CHECK_OK(pllm_cuda_alloc(dev, &d_x, sizeof(float) * n));
    CHECK_OK(pllm_cuda_alloc(dev, &d_c, n));
    CHECK_OK(pllm_cuda_alloc(dev, &d_v, sizeof(float) * n));
    CHECK_OK(pllm_cuda_upload(dev, d_x, x, sizeof(float) * n));
    for (size_t si = 0; si < PLLM_ARRAY_LEN(scales); si++) {
        const float s = scales[si];
        CHECK_OK(pllm_cuda_fp8_roundtrip(dev, d_x, s, d_c, d_v, (int32_t)n));
        CHECK_OK(pllm_cuda_download(dev, codes, d_c, n));
        CHECK_OK(pllm_cuda_download(dev, vals, d_v, sizeof(float) * n));
        CHECK_OK(pllm_cuda_sync(dev));
        size_t bad_code = 0, bad_val = 0, ties = 0, sat = 0, nans = 0;
        for (size_t i = 0; i < n; i++) {
            xs[i] = s > 0.0f ? x[i] / s : 0.0f; /* IEEE float division, as the kernel's */
            const uint8_t want = s > 0.0f ? ref_encode(xs[i]) : 0;
            const bool ok = ref_is_nan(want) ? ref_is_nan(codes[i]) : codes[i] == want;
            if (!ok && bad_code++ < 5)
                fprintf(stderr, "  x=%a / s=%a = %a: code 0x%02x, reference 0x%02x\n", (double)x[i],
                        (double)s, (double)xs[i], codes[i], want);
            nans += ref_is_nan(want);
            sat += (want & 0x7f) == 0x7e && fabs((double)xs[i]) > 448.0;
            if (!ref_is_nan(codes[i])) {
                const float rv = (float)ref_value(codes[i]);
                if (memcmp(&rv, &vals[i], 4) && bad_val++ < 5)
                    fprintf(stderr, "  code 0x%02x read back as %a, reference %a\n", codes[i],
                            (double)vals[i], (double)rv);
            }
            if (!ref_is_nan(want) && (want & 0x7f) < 0x7e) {
                const double a = fabs((double)xs[i]), lo = g_val[want & 0x7f];
                ties += a != lo && a == (lo + g_val[(want & 0x7f) + (a > lo ? 1 : -1)]) / 2;
            }
        }
        fprintf(stderr,
                "  conversion scale %a: %zu inputs (%zu fixed), %zu exact ties, %zu saturated, %zu "
                "NaN: %zu codes and %zu read-back values differ\n",
                (double)s, n, n_fixed, ties, sat, nans, bad_code, bad_val);
        CHECK(bad_code == 0);
        CHECK(bad_val == 0);
        if (s == 1.0f) CHECK(ties >= 2 * 125); /* every midpoint, both signs */
    }
    /* the read-back of all 256 codes (as stored bytes) */
    pllm_cuda_free(dev, d_x), pllm_cuda_free(dev, d_c), pllm_cuda_free(dev, d_v);
    free(x), free(codes), free(vals), free(xs);
}

/* ---- reference quantization of one row ---------------------------------------------------- */

static void ref_quantize_row(const float *x, int hd, uint8_t *q, uint16_t *scale)
{
    float amax = 0.0f;
    for (int d = 0; d < hd; d++) amax = fmaxf(amax, fabsf(x[d]));
    *scale = ref_row_scale(amax);
    const float s = pllm_fp16_to_fp32(*scale);
    for (int d = 0; d < hd; d++) q[d] = s > 0.0f ? ref_encode(x[d] / s) : 0;
}

/* ---- 2. qkv_rope's fp8 store ------------------------------------------------------------- */

static void test_qkv_rope_fp8(pllm_cuda_dev *dev, int n_tok, int n_head, int n_head_kv, int hd,
                              int bs, int n_blocks)
{
    const int qd = n_head * hd, kvd = n_head_kv * hd, ld = qd + 2 * kvd;
    const size_t n_row = (size_t)n_tok * ld, rows = (size_t)n_blocks * n_head_kv * bs;
    const size_t data = rows * hd, bytes = data + 2 * rows;
    float *qkv = malloc(n_row * 4), *got = malloc(n_row * 4);
    int32_t *pos = malloc((size_t)n_tok * 4), *slots = malloc((size_t)n_tok * 4);
    uint8_t *cache[2], *ref[2], *out[2];
    for (int i = 0; i < 2; i++) {
        cache[i] = malloc(bytes), ref[i] = malloc(bytes), out[i] = malloc(bytes);
        for (size_t j = 0; j < bytes; j++) cache[i][j] = (uint8_t)pllm_test_rand(&g_rng);
        memcpy(ref[i], cache[i], bytes);
    }
    for (size_t i = 0; i < n_row; i++)
        qkv[i] = (i % 17 == 3 ? 40.0f : 3.0f) * pllm_test_randf(&g_rng);
    for (int t = 0; t < n_tok; t++) { /* one head in 9 of token 2 all zero: scale 0 */
        pos[t] = rnd(4096);
        slots[t] = t % 7 == 5 ? -1 : (t * 37) % (n_blocks * bs);
    }
    for (int d = 0; d < hd; d++) qkv[(size_t)2 * ld + qd + kvd + d] = 0.0f; /* a zero V row */
    double freq[64];
    for (int i = 0; i < hd / 2 && i < 64; i++) freq[i] = pow(10000.0, -2.0 * i / hd);
    void *d_qkv = NULL, *d_pos = NULL, *d_slots = NULL, *d_freq = NULL, *d_c[2] = {NULL, NULL};
    CHECK_OK(pllm_cuda_alloc(dev, &d_qkv, n_row * 4));
    CHECK_OK(pllm_cuda_upload(dev, d_qkv, qkv, n_row * 4));
    CHECK_OK(pllm_cuda_alloc(dev, &d_pos, (size_t)n_tok * 4));
    CHECK_OK(pllm_cuda_upload(dev, d_pos, pos, (size_t)n_tok * 4));
    CHECK_OK(pllm_cuda_alloc(dev, &d_slots, (size_t)n_tok * 4));
    CHECK_OK(pllm_cuda_upload(dev, d_slots, slots, (size_t)n_tok * 4));
    CHECK_OK(pllm_cuda_alloc(dev, &d_freq, sizeof freq));
    CHECK_OK(pllm_cuda_upload(dev, d_freq, freq, sizeof freq));
    for (int i = 0; i < 2; i++) {
        CHECK_OK(pllm_cuda_alloc(dev, &d_c[i], bytes));
        CHECK_OK(pllm_cuda_upload(dev, d_c[i], cache[i], bytes));
    }
    pllm_cuda_qkv_rope_args a = {.qkv = d_qkv,
                                 .ld = ld,
                                 .positions = d_pos,
                                 .slots = d_slots,
                                 .inv_freq = d_freq,
                                 .mscale = 1.0,
                                 .k_cache = d_c[0],
                                 .v_cache = d_c[1],
                                 .k_scales = (uint8_t *)d_c[0] + data,
                                 .v_scales = (uint8_t *)d_c[1] + data,
                                 .kv_dtype = PLLM_KV_DTYPE_FP8,
                                 .n_tokens = n_tok,
                                 .n_head = n_head,
                                 .n_head_kv = n_head_kv,
                                 .head_dim = hd,
                                 .rope_dim = hd,
                                 .block_size = bs,
                                 .rope_neox = 1};
    CHECK_OK(pllm_cuda_qkv_rope(dev, &a));
    CHECK_OK(pllm_cuda_download(dev, got, d_qkv, n_row * 4));
    for (int i = 0; i < 2; i++) CHECK_OK(pllm_cuda_download(dev, out[i], d_c[i], bytes));
    CHECK_OK(pllm_cuda_sync(dev));
    for (int t = 0; t < n_tok; t++) {
        if (slots[t] < 0) continue;
        for (int i = 0; i < 2; i++)
            for (int h = 0; h < n_head_kv; h++) {
                const size_t r =
                    ((size_t)(slots[t] / bs) * n_head_kv + h) * bs + (size_t)(slots[t] % bs);
                uint16_t s;
                ref_quantize_row(got + (size_t)t * ld + qd + i * kvd + h * hd, hd, ref[i] + r * hd,
                                 &s);
                memcpy(ref[i] + data + 2 * r, &s, 2);
            }
    }
    size_t bad = 0;
    for (int i = 0; i < 2; i++)
        for (size_t j = 0; j < bytes; j++) bad += ref[i][j] != out[i][j];
    fprintf(stderr,
            "  qkv_rope fp8 tok=%d heads=%d/%d hd=%d bs=%d: %zu of %zu cache bytes differ from "
            "the reference quantization\n",
            n_tok, n_head, n_head_kv, hd, bs, bad, 2 * bytes);
    CHECK(bad == 0);
    pllm_cuda_free(dev, d_qkv), pllm_cuda_free(dev, d_pos), pllm_cuda_free(dev, d_slots),
        pllm_cuda_free(dev, d_freq);
    for (int i = 0; i < 2; i++) {
        pllm_cuda_free(dev, d_c[i]);
        free(cache[i]), free(ref[i]), free(out[i]);
    }
    free(qkv), free(got), free(pos), free(slots);
}

/* ---- 3. attention over an fp8 cache --------------------------------------------------------- */

typedef struct attn_case {
    int n_seqs, n_head, n_head_kv, hd, bs;
    int max_ctx, max_new, split_len;
} attn_case;

/* out[hd] = softmax(q . K[0..n)) V[0..n) in double; K, V rows through kv(p) */
static void ref_attend(double *out, const float *q, int hd, int n, const float *const *krow,
                       const float *const *vrow)
{
    double mx = -INFINITY, sum = 0;
    double *s = malloc(sizeof(double) * (size_t)n);
    for (int p = 0; p < n; p++) {
        double d = 0;
        for (int e = 0; e < hd; e++) d += (double)q[e] * krow[p][e];
        s[p] = d, mx = d > mx ? d : mx;
    }
    for (int e = 0; e < hd; e++) out[e] = 0;
    for (int p = 0; p < n; p++) {
        const double w = exp(s[p] - mx);
        sum += w;
        for (int e = 0; e < hd; e++) out[e] += w * vrow[p][e];
    }
    for (int e = 0; e < hd; e++) out[e] /= sum;
    free(s);
}

static void test_attention_fp8(pllm_cuda_dev *dev, const attn_case *c)
{
    const int qd = c->n_head * c->hd, q_stride = qd + 2 * c->n_head_kv * c->hd, hd = c->hd;
    int *n_ctx = malloc(sizeof(int) * (size_t)c->n_seqs),
        *n_new = malloc(sizeof(int) * (size_t)c->n_seqs);
    int total_blocks = 0, n_tok = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        n_ctx[s] = 1 + rnd(c->max_ctx);
        const int want = 1 + rnd(c->max_new); /* (PLLM_MIN evaluates its arguments twice) */
        n_new[s] = PLLM_MIN(n_ctx[s], want);
        total_blocks += (n_ctx[s] + c->bs - 1) / c->bs;
        n_tok += n_new[s];
    }
    const int pool = total_blocks + total_blocks / 4 + 1;
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)pool),
            *bt = malloc(sizeof(int32_t) * (size_t)total_blocks);
    int *bt_off = malloc(sizeof(int) * (size_t)c->n_seqs);
    for (int i = 0; i < pool; i++) perm[i] = i;
    for (int i = pool - 1; i > 0; i--) {
        int j = rnd(i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int s = 0, k = 0; s < c->n_seqs; s++) {
        bt_off[s] = k;
        for (int b = 0; b < (n_ctx[s] + c->bs - 1) / c->bs; b++, k++) bt[k] = perm[k];
    }
    /* the unquantized K and V (K: a few outlier channels 8x), their fp8 cache, and the
     * dequantized rows */
    const size_t rows = (size_t)pool * c->n_head_kv * c->bs, data = rows * hd,
                 bytes = data + 2 * rows;
    float *kv[2], *deq[2];
    uint8_t *cache[2];
    for (int i = 0; i < 2; i++) {
        kv[i] = malloc(sizeof(float) * data), deq[i] = malloc(sizeof(float) * data);
        cache[i] = malloc(bytes);
        for (size_t r = 0; r < rows; r++) {
            for (int e = 0; e < hd; e++)
                kv[i][r * hd + e] = (i == 0 && e % 13 == 5 ? 8.0f : 1.0f) * pllm_test_randf(&g_rng);
            uint16_t s;
            ref_quantize_row(kv[i] + r * hd, hd, cache[i] + r * hd, &s);
            memcpy(cache[i] + data + 2 * r, &s, 2);
            for (int e = 0; e < hd; e++)
                deq[i][r * hd + e] =
                    pllm_fp16_to_fp32(s) * (float)ref_value(cache[i][r * hd + e]); /* exact */
        }
    }
    float *q = malloc(sizeof(float) * (size_t)n_tok * q_stride);
    for (size_t i = 0; i < (size_t)n_tok * q_stride; i++) q[i] = 2.0f * pllm_test_randf(&g_rng);

    const int qt = pllm_cuda_attn_prefill_tile_tokens(c->n_head, c->n_head_kv);
    pllm_cuda_attn_item *items = malloc(sizeof *items * (size_t)n_tok);
    pllm_cuda_attn_tile *tiles = malloc(sizeof *tiles * (size_t)n_tok);
    int *tok_pos = malloc(sizeof(int) * (size_t)n_tok),
        *tok_seq = malloc(sizeof(int) * (size_t)n_tok);
    int n_items = 0, n_tiles = 0, max_dec_ctx = 0;
    for (int s = 0, t = 0; s < c->n_seqs; s++) {
        for (int j = 0; j < n_new[s]; j++)
            tok_pos[t + j] = n_ctx[s] - n_new[s] + j, tok_seq[t + j] = s;
        if (n_new[s] == 1) {
            items[n_items++] = (pllm_cuda_attn_item){.tok = t, .n_ctx = n_ctx[s], .bt = bt_off[s]};
            max_dec_ctx = PLLM_MAX(max_dec_ctx, n_ctx[s]);
        } else {
            for (int j = 0; j < n_new[s]; j += qt)
                tiles[n_tiles++] = (pllm_cuda_attn_tile){.tok0 = t + j,
                                                         .n_q = PLLM_MIN(qt, n_new[s] - j),
                                                         .pos0 = n_ctx[s] - n_new[s] + j,
                                                         .bt = bt_off[s]};
        }
        t += n_new[s];
    }
    int n_splits = 1, split_len = 64;
    if (c->split_len) {
        split_len = c->split_len;
        n_splits = PLLM_MAX(1, (max_dec_ctx + split_len - 1) / split_len);
    }

    /* references: over the dequantized cache (tight) and over the unquantized K, V (loose) */
    const float scale = 1.0f / sqrtf((float)hd);
    const int group = c->n_head / c->n_head_kv;
    float *ref_t = malloc(sizeof(float) * (size_t)n_tok * qd),
          *ref_l = malloc(sizeof(float) * (size_t)n_tok * qd),
          *got = malloc(sizeof(float) * (size_t)n_tok * qd);
    const float **kr = malloc(sizeof(float *) * (size_t)c->max_ctx),
                **vr = malloc(sizeof(float *) * (size_t)c->max_ctx);
    double *o = malloc(sizeof(double) * (size_t)hd);
    float *qs = malloc(sizeof(float) * (size_t)hd);
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < c->n_head; h++) {
            for (int e = 0; e < hd; e++)
                qs[e] = q[(size_t)t * q_stride + h * hd + e] * scale; /* as the kernels scale */
            for (int w = 0; w < 2; w++) {
                const float *const *src = w ? (const float *const *)kv : (const float *const *)deq;
                for (int p = 0; p <= tok_pos[t]; p++) {
                    const size_t r =
                        ((size_t)bt[bt_off[tok_seq[t]] + p / c->bs] * c->n_head_kv + h / group) *
                            c->bs +
                        (size_t)(p % c->bs);
                    kr[p] = src[0] + r * hd, vr[p] = src[1] + r * hd;
                }
                ref_attend(o, qs, hd, tok_pos[t] + 1, kr, vr);
                float *dst = (w ? ref_l : ref_t) + (size_t)t * qd + h * hd;
                for (int e = 0; e < hd; e++) dst[e] = (float)o[e];
            }
        }

    void *d_q = NULL, *d_c[2] = {NULL, NULL}, *d_bt = NULL, *d_items = NULL, *d_tiles = NULL,
         *d_out = NULL, *d_ws = NULL;
    CHECK_OK(pllm_cuda_alloc(dev, &d_q, sizeof(float) * (size_t)n_tok * q_stride));
    CHECK_OK(pllm_cuda_upload(dev, d_q, q, sizeof(float) * (size_t)n_tok * q_stride));
    for (int i = 0; i < 2; i++) {
        CHECK_OK(pllm_cuda_alloc(dev, &d_c[i], bytes));
        CHECK_OK(pllm_cuda_upload(dev, d_c[i], cache[i], bytes));
    }
    CHECK_OK(pllm_cuda_alloc(dev, &d_bt, sizeof(int32_t) * (size_t)total_blocks));
    CHECK_OK(pllm_cuda_upload(dev, d_bt, bt, sizeof(int32_t) * (size_t)total_blocks));
    CHECK_OK(pllm_cuda_alloc(dev, &d_items, sizeof *items * (size_t)PLLM_MAX(n_items, 1)));
    if (n_items) CHECK_OK(pllm_cuda_upload(dev, d_items, items, sizeof *items * (size_t)n_items));
    CHECK_OK(pllm_cuda_alloc(dev, &d_tiles, sizeof *tiles * (size_t)PLLM_MAX(n_tiles, 1)));
    if (n_tiles) CHECK_OK(pllm_cuda_upload(dev, d_tiles, tiles, sizeof *tiles * (size_t)n_tiles));
    CHECK_OK(pllm_cuda_alloc(dev, &d_out, sizeof(float) * (size_t)n_tok * qd));
    const size_t ws = pllm_cuda_attn_decode_workspace(n_items, c->n_head, hd, n_splits);
    if (ws) CHECK_OK(pllm_cuda_alloc(dev, &d_ws, ws));
    pllm_cuda_attn_args a = {.out = d_out,
                             .out_dtype = PLLM_DTYPE_F32,
                             .q = d_q,
                             .q_stride = q_stride,
                             .k_cache = d_c[0],
                             .v_cache = d_c[1],
                             .k_scales = (uint8_t *)d_c[0] + data,
                             .v_scales = (uint8_t *)d_c[1] + data,
                             .kv_dtype = PLLM_KV_DTYPE_FP8,
                             .block_tables = d_bt,
                             .n_head = c->n_head,
                             .n_head_kv = c->n_head_kv,
                             .head_dim = hd,
                             .block_size = c->bs,
                             .scale = scale};
    CHECK_OK(pllm_cuda_attn_decode(dev, &a, d_items, n_items, n_splits, split_len, d_ws));
    CHECK_OK(pllm_cuda_attn_prefill(dev, &a, d_tiles, n_tiles));
    CHECK_OK(pllm_cuda_download(dev, got, d_out, sizeof(float) * (size_t)n_tok * qd));
    CHECK_OK(pllm_cuda_sync(dev));
    double worst_t = 0, worst_l = 0, mx;
    for (int t = 0; t < n_tok; t++) {
        const size_t at = (size_t)t * qd;
        const double rt = pllm_test_rel_err(got + at, ref_t + at, (size_t)qd, &mx),
                     rl = pllm_test_rel_err(got + at, ref_l + at, (size_t)qd, &mx);
        worst_t = isnan(rt) || rt > worst_t ? rt : worst_t; /* a NaN stays and fails */
        worst_l = isnan(rl) || rl > worst_l ? rl : worst_l;
        if (isnan(rt) || isnan(rl))
            for (int e = 0; e < qd; e++)
                if (isnan(got[at + e]) || isnan(ref_l[at + e])) {
                    fprintf(stderr, "  token %d (pos %d) element %d: %g, reference %g / %g\n", t,
                            tok_pos[t], e, (double)got[at + e], (double)ref_t[at + e],
                            (double)ref_l[at + e]);
                    break;
                }
    }
    const double all_l = pllm_test_rel_err(got, ref_l, (size_t)n_tok * qd, &mx);
    fprintf(stderr,
            "  attention fp8 seqs=%-2d tokens=%-3d (decode %d, %d tiles) heads=%d/%d hd=%-3d "
            "bs=%-2d splits=%d: worst token vs dequantized %.2g (tol 1e-5), vs unquantized %.3g "
            "(all tokens %.3g; tol 0.1)\n",
            c->n_seqs, n_tok, n_items, n_tiles, c->n_head, c->n_head_kv, hd, c->bs, n_splits,
            worst_t, worst_l, all_l);
    CHECK(worst_t <= 1e-5);
    CHECK(worst_l <= 0.1);
    pllm_cuda_free(dev, d_q), pllm_cuda_free(dev, d_c[0]), pllm_cuda_free(dev, d_c[1]);
    pllm_cuda_free(dev, d_bt), pllm_cuda_free(dev, d_items), pllm_cuda_free(dev, d_tiles);
    pllm_cuda_free(dev, d_out), pllm_cuda_free(dev, d_ws);
    for (int i = 0; i < 2; i++) free(kv[i]), free(deq[i]), free(cache[i]);
    free(n_ctx), free(n_new), free(perm), free(bt), free(bt_off), free(q), free(items), free(tiles);
    free(tok_pos), free(tok_seq), free(ref_t), free(ref_l), free(got), free(kr), free(vr), free(o),
        free(qs);
}

int main(void)
{
    uint64_t seed = strtoull(pllm_test_env("PLLM_TEST_SEED", "0"), NULL, 10);
    if (!seed) seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    fprintf(stderr, "cuda_fp8: seed %llu (PLLM_TEST_SEED to repeat)\n", (unsigned long long)seed);
    g_rng = seed;
    ref_init();
    char why[256];
    if (pllm_cuda_dev_count(why, sizeof why) == 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "needs a CUDA device: %s (the emulated build runs these checks)",
                 why);
        pllm_test_skip(msg);
    }
    pllm_cuda_dev *dev = NULL;
    CHECK_OK(pllm_cuda_dev_init(&dev, 0));
    if (!dev) return pllm_test_finish("cuda_fp8");

    test_conversion(dev);
    test_qkv_rope_fp8(dev, 9, 4, 2, 64, 16, 4);
    test_qkv_rope_fp8(dev, 7, 6, 3, 128, 5, 6);
    test_qkv_rope_fp8(dev, 5, 2, 2, 10, 3, 4);

    static const attn_case attns[] = {
        /* seqs heads kvh hd bs max_ctx max_new split */
        {5, 9, 3, 64, 16, 150, 1, 0},  /* decode, GQA 3 */
        {4, 8, 2, 64, 16, 300, 1, 64}, /* decode, split */
        {3, 4, 4, 128, 16, 130, 1, 0}, /* MHA, 8-element fp8 vectors of 128-dim rows */
        {4, 10, 5, 10, 6, 80, 1, 64},  /* hd 10: the pair-load fallback */
        {3, 8, 1, 128, 7, 120, 20, 0}, /* prefill tiles and decode, odd block size */
        {3, 4, 2, 64, 1, 60, 12, 0},   /* block size 1 */
        {2, 4, 4, 256, 16, 45, 5, 64}, /* hd 256 */
    };
    for (size_t i = 0; i < PLLM_ARRAY_LEN(attns); i++) test_attention_fp8(dev, &attns[i]);
    pllm_cuda_dev_free(dev);
    return pllm_test_finish("cuda_fp8");
}

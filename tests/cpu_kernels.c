/*
 * cpu_kernels.c: every CPU kernel and every dispatch path (scalar, AVX2, AVX-512, as far as this
 * machine runs them) against float64 references on fresh random data with odd shapes, plus the
 * thread pool. Prints the max absolute and relative error of each check.
 *
 * Matmul bound: for y = sum_k w_k x_k summed in float32 in any order, |y - y_exact| <=
 * gamma_K * sum_k |w_k x_k| with gamma_K = K u / (1 - K u), u = 2^-24 (Higham, Accuracy and
 * Stability, 3.1); one more u per term covers a weight dequantized with a fused multiply-add
 * (Q4_1/Q5_1: d*q+m rounded once instead of twice). The check uses that worst-case bound, so it
 * can only fail on a wrong result, never on rounding.
 */
#include <math.h>
#include <stddef.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "cpu/threadpool.h"
#include "model/dtype.h"
#include "tests/testutil.h"
#include "tests/cpu_gemm_rand.h"

static uint64_t g_rng = 0x1234567887654321ull;

static float randf(void) { return pllm_test_randf(&g_rng); }

static void random_row(uint8_t *dst, pllm_dtype dt, int64_t K) { pllm_test_random_row(dst, dt, K, &g_rng); }

static const pllm_dtype g_dtypes[] = {PLLM_DTYPE_F32,  PLLM_DTYPE_F16,  PLLM_DTYPE_BF16, PLLM_DTYPE_Q8_0,
                                      PLLM_DTYPE_Q4_0, PLLM_DTYPE_Q4_1, PLLM_DTYPE_Q5_0, PLLM_DTYPE_Q5_1,
                                      PLLM_DTYPE_Q4_K, PLLM_DTYPE_Q5_K, PLLM_DTYPE_Q6_K};

static void test_matmul(const pllm_cpu_kernels *kern, pllm_dtype dt, int64_t K, int64_t n_rows, int64_t n_tok)
{
    size_t rb = pllm_dtype_row_bytes(dt, K);
    uint8_t *W = malloc(rb * (size_t)n_rows);
    float *X = malloc(sizeof(float) * (size_t)(n_tok * (K + 3)));
    int64_t ldx = K + 3, ldy = n_rows + 5;
    float *Y = malloc(sizeof(float) * (size_t)(n_tok * ldy)), *Y1 = malloc(sizeof(float) * (size_t)(n_tok * ldy));
    float *wrow = malloc(sizeof(float) * (size_t)K), *scratch = malloc(sizeof(float) * (size_t)K);
    for (int64_t r = 0; r < n_rows; r++) random_row(W + (size_t)r * rb, dt, K);
    for (int64_t i = 0; i < n_tok * ldx; i++) X[i] = randf();
    for (int64_t i = 0; i < n_tok * ldy; i++) Y[i] = Y1[i] = NAN;

    /* the whole range in one call */
    kern->matmul[dt](Y, ldy, X, ldx, W, rb, K, n_tok, 0, n_rows, scratch);

    double max_abs = 0, max_ratio = 0, num = 0, den = 0;
    const double u = 0x1p-24, gamma = (K + 1) * u / (1 - (K + 1) * u);
    int bad = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        pllm_dequantize_row(wrow, W + (size_t)r * rb, dt, K);
        for (int64_t t = 0; t < n_tok; t++) {
            double s = 0, sa = 0;
            for (int64_t k = 0; k < K; k++) {
                s += (double)wrow[k] * X[t * ldx + k];
                sa += fabs((double)wrow[k] * X[t * ldx + k]);
            }
            double y = Y[t * ldy + r], e = fabs(y - s);
            if (!(e <= gamma * sa + 1e-30)) bad++;
            if (e > max_abs || e != e) max_abs = e;
            if (sa > 0 && e / (gamma * sa) > max_ratio) max_ratio = e / (gamma * sa);
            num += e * e;
            den += s * s;
        }
    }
    /* padding columns of Y untouched */
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = n_rows; r < ldy; r++)
            if (!isnan(Y[t * ldy + r])) bad++;

    /* batch invariance: one token at a time, and rows in odd sub-ranges, give the same bits */
    int diff = 0;
    for (int64_t t = 0; t < n_tok; t++) {
        int64_t cut = n_rows / 3;
        kern->matmul[dt](Y1 + t * ldy, ldy, X + t * ldx, ldx, W, rb, K, 1, 0, cut, scratch);
        kern->matmul[dt](Y1 + t * ldy, ldy, X + t * ldx, ldx, W, rb, K, 1, cut, n_rows, scratch);
    }
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < n_rows; r++)
            if (memcmp(&Y[t * ldy + r], &Y1[t * ldy + r], 4) != 0) diff++;

    fprintf(stderr, "  matmul %-6s %-5s K=%-4lld rows=%-3lld tok=%-2lld  max_abs %.3g  rel %.3g  err/bound %.3g  batch-diff %d%s\n",
            kern->name, pllm_dtype_name(dt), (long long)K, (long long)n_rows, (long long)n_tok, max_abs,
            den > 0 ? sqrt(num / den) : 0, max_ratio, diff, bad ? "  FAIL" : "");
    CHECK(bad == 0);
    CHECK(diff == 0);
    free(W); free(X); free(Y); free(Y1); free(wrow); free(scratch);
}

static void test_vec(const pllm_cpu_kernels *kern)
{
    /* attention block kernels: head dims below, at and past the vector widths, odd block sizes */
    const int64_t hds[] = {1, 7, 16, 24, 40, 64, 72, 100, 129}, ns[] = {1, 5, 16};
    double worst_s = 0, worst_a = 0;
    enum { MAXE = 16 * 129 };
    static float q[129], K[MAXE], V[MAXE], out[129], out0[129], p[16], sc[16];
    static uint16_t Kh[MAXE], Vh[MAXE];
    for (size_t hi = 0; hi < PLLM_ARRAY_LEN(hds); hi++)
        for (size_t ni = 0; ni < PLLM_ARRAY_LEN(ns); ni++) {
            int64_t hd = hds[hi], n = ns[ni];
            for (int64_t i = 0; i < hd; i++) q[i] = randf(), out0[i] = randf();
            for (int64_t i = 0; i < n * hd; i++) {
                K[i] = randf(), V[i] = randf();
                Kh[i] = pllm_fp32_to_fp16(randf()), Vh[i] = pllm_fp32_to_fp16(randf());
            }
            for (int64_t j = 0; j < n; j++) p[j] = (randf() + 1) / 2;
            const float scale = 0.37f, corr = 0.81f;
            for (int f16 = 0; f16 < 2; f16++) {
                if (f16) kern->attn_scores_f16(sc, q, Kh, n, hd, scale);
                else kern->attn_scores_f32(sc, q, K, n, hd, scale);
                for (int64_t j = 0; j < n; j++) {
                    double d = 0, da = 0;
                    for (int64_t i = 0; i < hd; i++) {
                        double kv = f16 ? pllm_fp16_to_fp32(Kh[j * hd + i]) : K[j * hd + i];
                        d += q[i] * kv;
                        da += fabs(q[i] * kv);
                    }
                    double e = fabs(sc[j] - d * scale) / ((hd + 2) * 0x1p-24 * da * scale);
                    worst_s = fmax(worst_s, e);
                    CHECK(e <= 1);
                }
                memcpy(out, out0, sizeof(float) * (size_t)hd);
                if (f16) kern->attn_accum_f16(out, corr, p, Vh, n, hd);
                else kern->attn_accum_f32(out, corr, p, V, n, hd);
                for (int64_t i = 0; i < hd; i++) {
                    double o = (double)out0[i] * corr, oa = fabs(o);
                    for (int64_t j = 0; j < n; j++) {
                        double vv = f16 ? pllm_fp16_to_fp32(Vh[j * hd + i]) : V[j * hd + i];
                        o += p[j] * vv;
                        oa += fabs(p[j] * vv);
                    }
                    double e = fabs(out[i] - o) / ((n + 2) * 0x1p-24 * oa);
                    worst_a = fmax(worst_a, e);
                    CHECK(e <= 1);
                }
            }
        }
    /* to_f16: bitwise equal to the reference conversion, over magnitudes from subnormal to overflow */
    enum { N = 4099 };
    static float src[N];
    static uint16_t got[N];
    for (int j = 0; j < N; j++) src[j] = randf() * powf(2.0f, (float)(j % 50) - 30);
    src[0] = 65520.0f;            /* rounds to inf */
    src[1] = 65519.0f;            /* rounds to 65504 */
    src[2] = 5.9604645e-8f / 2;   /* half the smallest subnormal: ties to even (0) */
    src[3] = -0.0f;
    src[4] = INFINITY;
    src[5] = 1.0f + 0x1p-11f;     /* a tie: rounds to even (1.0) */
    kern->to_f16(got, src, N);
    int mism = 0;
    for (int j = 0; j < N; j++)
        if (got[j] != pllm_fp32_to_fp16(src[j])) mism++;
    fprintf(stderr, "  vec    %-6s attn_scores err/bound %.3g  attn_accum err/bound %.3g  to_f16 mismatches %d/%d\n",
            kern->name, worst_s, worst_a, mism, N);
    CHECK(mism == 0);
}

/* Naive float64 attention over the same paged cache, for one query head. */
static void attend_ref(double *out, const float *q, int32_t kvh, const pllm_cpu_attn_args *a)
{
    const pllm_kv_layout *L = a->kv;
    int32_t hd = L->head_dim, bs = L->block_size;
    double *s = malloc(sizeof(double) * (size_t)a->n_pos), mx = -INFINITY, sum = 0;
    for (int32_t p = 0; p < a->n_pos; p++) {
        size_t idx = (((size_t)a->block_table[p / bs] * L->n_head_kv + kvh) * bs + p % bs) * hd;
        double d = 0;
        for (int32_t i = 0; i < hd; i++) {
            double kv = L->dtype == PLLM_DTYPE_F16 ? pllm_fp16_to_fp32(((const uint16_t *)a->k_cache)[idx + i])
                                                    : ((const float *)a->k_cache)[idx + i];
            d += q[i] * kv;
        }
        s[p] = d * a->scale;
        mx = fmax(mx, s[p]);
    }
    for (int32_t i = 0; i < hd; i++) out[i] = 0;
    for (int32_t p = 0; p < a->n_pos; p++) {
        double w = exp(s[p] - mx);
        sum += w;
        size_t idx = (((size_t)a->block_table[p / bs] * L->n_head_kv + kvh) * bs + p % bs) * hd;
        for (int32_t i = 0; i < hd; i++) {
            double vv = L->dtype == PLLM_DTYPE_F16 ? pllm_fp16_to_fp32(((const uint16_t *)a->v_cache)[idx + i])
                                                    : ((const float *)a->v_cache)[idx + i];
            out[i] += w * vv;
        }
    }
    for (int32_t i = 0; i < hd; i++) out[i] /= sum;
    free(s);
}

static void test_attention(const pllm_cpu_kernels *kern, pllm_dtype kvdt, int32_t hd, int32_t bs, int32_t n_pos)
{
    pllm_kv_layout L = {.n_layer = 1, .n_head_kv = 3, .head_dim = hd, .block_size = bs, .n_blocks = 41, .dtype = kvdt};
    size_t n_el = (size_t)L.n_blocks * L.n_head_kv * bs * hd, esz = kvdt == PLLM_DTYPE_F16 ? 2 : 4;
    uint8_t *K = malloc(n_el * esz), *V = malloc(n_el * esz);
    for (size_t i = 0; i < n_el; i++) {
        float k = randf() * 3, v = randf();
        if (kvdt == PLLM_DTYPE_F16) {
            ((uint16_t *)K)[i] = pllm_fp32_to_fp16(k);
            ((uint16_t *)V)[i] = pllm_fp32_to_fp16(v);
        } else {
            ((float *)K)[i] = k;
            ((float *)V)[i] = v;
        }
    }
    int32_t table[41];
    for (int32_t i = 0; i < 41; i++) table[i] = (i * 17 + 5) % 41; /* a permutation: non-contiguous ids */
    PLLM_ASSERT((n_pos + bs - 1) / bs <= 41);
    float q[256], out[256], scores[64];
    double ref[256];
    for (int32_t i = 0; i < hd; i++) q[i] = randf();
    pllm_cpu_attn_args a = {.k_cache = K, .v_cache = V, .kv = &L, .block_table = table, .n_pos = n_pos,
                            .scale = 1.0f / sqrtf((float)hd)};
    double worst = 0;
    for (int32_t h = 0; h < 3; h++) {
        pllm_cpu_attend(out, q, h, &a, kern, scores);
        attend_ref(ref, q, h, &a);
        double num = 0, den = 0;
        for (int32_t i = 0; i < hd; i++) {
            num += (out[i] - ref[i]) * (out[i] - ref[i]);
            den += ref[i] * ref[i];
        }
        worst = fmax(worst, sqrt(num / den));
    }
    fprintf(stderr, "  attend %-6s kv=%s hd=%d bs=%d n_pos=%d  rel %.3g\n", kern->name, pllm_dtype_name(kvdt), hd, bs, n_pos,
            worst);
    CHECK(worst < 2e-6);
    free(K);
    free(V);
}

/* The table's SwiGLU and RMSNorm against float64 math on random data of odd lengths, with the
 * edges of e^x (overflow, underflow through the subnormals, +-0, +-inf, NaN); SwiGLU split at an
 * odd point gives the same bits as in one call (the thread split of the forward pass). */
static void test_swiglu_rmsnorm(const pllm_cpu_kernels *kern)
{
    const int64_t lens[] = {1, 7, 15, 16, 17, 31, 33, 100, 577, 1537};
    double worst_ulp = 0, worst_tail = 0, worst_norm = 0;
    int split_diff = 0, special_bad = 0;
    for (size_t li = 0; li < PLLM_ARRAY_LEN(lens); li++) {
        const int64_t n = lens[li];
        float *g = malloc(sizeof(float) * (size_t)n), *g2 = malloc(sizeof(float) * (size_t)n),
              *g0 = malloc(sizeof(float) * (size_t)n), *up = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            /* mostly the range activations have, some far out: e^-g from 1e-38 to 1e38 and past */
            const float scale = i % 5 == 0 ? 60.0f : i % 5 == 1 ? 110.0f : 10.0f;
            g[i] = g2[i] = g0[i] = randf() * scale;
            up[i] = randf();
        }
        kern->swiglu(g, up, n);
        const int64_t cut = n / 2 | 1;
        kern->swiglu(g2, up, PLLM_MIN(cut, n));
        if (cut < n) kern->swiglu(g2 + cut, up + cut, n - cut);
        split_diff += memcmp(g, g2, sizeof(float) * (size_t)n) != 0;
        for (int64_t i = 0; i < n; i++) {
            const double ref = (double)g0[i] / (1 + exp(-(double)g0[i])) * up[i];
            if (g0[i] < -88) {
                /* e^-g overflows float (the scalar reference's expf too): silu is 0 there, off
                 * by at most |g e^g| < 3e-37 */
                worst_tail = fmax(worst_tail, fabs(g[i] - ref));
                continue;
            }
            /* error in units of the float spacing at ref (subnormal spacing at the bottom) */
            const double ulp = fmax(ldexp(1.0, ilogb(fmax(fabs(ref), 0x1p-126)) - 23), 0x1p-149);
            worst_ulp = fmax(worst_ulp, fabs(g[i] - ref) / ulp);
        }
        /* RMSNorm, out == x too */
        float *w = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) { g0[i] = randf() * 4; w[i] = randf(); }
        kern->rmsnorm(out, g0, w, n, 1e-5f);
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)g0[i] * g0[i];
        for (int64_t i = 0; i < n; i++) {
            const double ref = g0[i] / sqrt(ss / (double)n + 1e-5) * w[i];
            worst_norm = fmax(worst_norm, fabs(out[i] - ref) / (fabs(ref) + 1e-30));
        }
        kern->rmsnorm(g0, g0, w, n, 1e-5f);
        CHECK(memcmp(g0, out, sizeof(float) * (size_t)n) == 0);
        free(w);
        free(out);
        free(g);
        free(g2);
        free(g0);
        free(up);
    }
    /* special values: silu(g) * 1 */
    const float sv[] = {0.0f, -0.0f, 88.0f, 89.0f, -88.0f, -89.0f, 104.0f, -104.0f, 1000.0f, -1000.0f, INFINITY, -INFINITY, NAN};
    float gs[PLLM_ARRAY_LEN(sv)], ones[PLLM_ARRAY_LEN(sv)];
    for (size_t i = 0; i < PLLM_ARRAY_LEN(sv); i++) { gs[i] = sv[i]; ones[i] = 1; }
    kern->swiglu(gs, ones, (int64_t)PLLM_ARRAY_LEN(sv));
    for (size_t i = 0; i < PLLM_ARRAY_LEN(sv); i++) {
        const float want = isnan(sv[i]) || sv[i] == -INFINITY ? NAN : sv[i] / (1 + expf(-sv[i]));
        const bool ok = isnan(want) ? isnan(gs[i]) : gs[i] == want || fabsf(gs[i] - want) <= 4e-7f * fabsf(want);
        if (!ok) fprintf(stderr, "  swiglu %s silu(%g) = %g, want %g  FAIL\n", kern->name, sv[i], gs[i], want);
        special_bad += !ok;
    }
    fprintf(stderr,
            "  swiglu  %-10s max err %.2f ulp vs float64 (n 1..1537, -88 <= g < 110; below: abs %.2g), split: %s, edges: %s\n",
            kern->name, worst_ulp, worst_tail, split_diff ? "DIFFERS" : "same bits", special_bad ? "FAIL" : "ok");
    fprintf(stderr, "  rmsnorm %-10s max rel %.3g vs float64 (n 1..1537)\n", kern->name, worst_norm);
    CHECK(worst_ulp <= 4);
    CHECK(worst_tail < 3e-37);
    CHECK(split_diff == 0);
    CHECK(special_bad == 0);
    CHECK(worst_norm < 4e-7);
}

static void test_norm_rope_swiglu(void)
{
    /* the AVX2 and AVX-512 tables' SwiGLU: the same e^x operations, so the same bits */
    const pllm_cpu_kernels *k2 = pllm_cpu_kernels_get(PLLM_CPU_ISA_AVX2), *k5 = pllm_cpu_kernels_get(PLLM_CPU_ISA_AVX512);
    if (k2 && k5) {
        float a[1537], b[1537], u[1537];
        for (int i = 0; i < 1537; i++) { a[i] = b[i] = randf() * (i % 3 ? 12 : 120); u[i] = randf(); }
        k2->swiglu(a, u, 1537);
        k5->swiglu(b, u, 1537);
        const bool same = memcmp(a, b, sizeof a) == 0;
        fprintf(stderr, "  swiglu avx2 vs avx512 (n 1537): %s\n", same ? "same bits" : "DIFFER  FAIL");
        CHECK(same);
    } else {
        fprintf(stderr, "  swiglu avx2 vs avx512: skipped (this machine lacks one of them)\n");
    }

    /* RMSNorm */
    float x[97], w[97], out[97];
    for (int i = 0; i < 97; i++) { x[i] = randf() * 4; w[i] = randf(); }
    pllm_cpu_rmsnorm(out, x, w, 97, 1e-5f);
    double ss = 0, worst = 0;
    for (int i = 0; i < 97; i++) ss += (double)x[i] * x[i];
    for (int i = 0; i < 97; i++) {
        double ref = x[i] / sqrt(ss / 97 + 1e-5) * w[i];
        worst = fmax(worst, fabs(out[i] - ref) / (fabs(ref) + 1e-30));
    }
    fprintf(stderr, "  rmsnorm max rel %.3g\n", worst);
    CHECK(worst < 4e-7);

    /* SwiGLU */
    float g[50], up[50], g0[50];
    for (int i = 0; i < 50; i++) { g[i] = g0[i] = randf() * 8; up[i] = randf(); }
    pllm_cpu_swiglu(g, up, 50);
    worst = 0;
    for (int i = 0; i < 50; i++) {
        double ref = g0[i] / (1 + exp(-(double)g0[i])) * up[i];
        worst = fmax(worst, fabs(g[i] - ref) / (fabs(ref) + 1e-30));
    }
    fprintf(stderr, "  swiglu max rel %.3g\n", worst);
    CHECK(worst < 1e-6);

    /* RoPE: both modes, partial rotation, linear scaling and per-pair factors, against the
     * formula in double */
    const struct { pllm_rope_mode mode; pllm_rope_scaling sc; int32_t hd, rd; } cases[] = {
        {PLLM_ROPE_NORM, PLLM_ROPE_SCALING_NONE, 64, 64},   {PLLM_ROPE_NEOX, PLLM_ROPE_SCALING_NONE, 64, 64},
        {PLLM_ROPE_NORM, PLLM_ROPE_SCALING_LINEAR, 24, 16}, {PLLM_ROPE_NEOX, PLLM_ROPE_SCALING_LINEAR, 24, 16},
        {PLLM_ROPE_NORM, PLLM_ROPE_SCALING_LLAMA3, 128, 128}, {PLLM_ROPE_NEOX, PLLM_ROPE_SCALING_LLAMA3, 96, 64},
    };
    for (size_t ci = 0; ci < PLLM_ARRAY_LEN(cases); ci++) {
        pllm_model_config cfg = {.head_dim = cases[ci].hd, .rope_dim = cases[ci].rd, .rope_theta = 500000.0f,
                                 .rope_mode = cases[ci].mode, .rope_scaling = cases[ci].sc, .rope_factor = 8.0f};
        float ff[64];
        for (int i = 0; i < 64; i++) ff[i] = 1.0f + 7.0f * (randf() + 1) / 2;
        const float *factors = cfg.rope_scaling == PLLM_ROPE_SCALING_LLAMA3 ? ff : NULL;
        double inv[64];
        float cs[128], v[128], v0[128];
        pllm_cpu_rope_freqs(inv, &cfg, factors);
        worst = 0;
        const int32_t positions[] = {0, 1, 17, 1000, 7777};
        for (size_t pi = 0; pi < PLLM_ARRAY_LEN(positions); pi++) {
            int32_t pos = positions[pi];
            for (int i = 0; i < cfg.head_dim; i++) v[i] = v0[i] = randf();
            pllm_cpu_rope_table(cs, pos, inv, cfg.rope_dim / 2);
            pllm_cpu_rope_apply(v, cs, cfg.rope_dim, cfg.rope_mode);
            int32_t half = cfg.rope_dim / 2;
            for (int32_t i = 0; i < half; i++) {
                double f = 1.0 / pow(cfg.rope_theta, (2.0 * i) / cfg.rope_dim);
                if (cfg.rope_scaling == PLLM_ROPE_SCALING_LINEAR) f = f / cfg.rope_factor;
                if (factors) f = f / factors[i];
                int32_t a = cfg.rope_mode == PLLM_ROPE_NORM ? 2 * i : i, b = cfg.rope_mode == PLLM_ROPE_NORM ? 2 * i + 1 : i + half;
                double th = pos * f;
                double ra = v0[a] * cos(th) - v0[b] * sin(th), rb = v0[a] * sin(th) + v0[b] * cos(th);
                worst = fmax(worst, fmax(fabs(v[a] - ra), fabs(v[b] - rb)));
            }
            for (int32_t i = cfg.rope_dim; i < cfg.head_dim; i++) worst = fmax(worst, fabs(v[i] - v0[i]));
        }
        fprintf(stderr, "  rope mode=%d scaling=%d hd=%d rd=%d max abs %.3g\n", cases[ci].mode, cases[ci].sc, cases[ci].hd,
                cases[ci].rd, worst);
        CHECK(worst < 1e-6);
    }
}

typedef struct pool_arg {
    pllm_cpu_pool *pool;
    _Atomic long counter;
    long *per_round; /* [rounds] */
    int rounds;
    _Atomic int errors;
} pool_arg;

static void pool_fn(void *varg, int ith, int nth)
{
    pool_arg *a = varg;
    for (int r = 0; r < a->rounds; r++) {
        atomic_fetch_add(&a->counter, ith + 1);
        pllm_cpu_pool_barrier(a->pool);
        /* after the barrier every thread of this round has added */
        long expect = (long)(r + 1) * nth * (nth + 1) / 2;
        if (atomic_load(&a->counter) < expect) atomic_fetch_add(&a->errors, 1);
        pllm_cpu_pool_barrier(a->pool);
    }
}

static void test_pool(int n_threads)
{
    pllm_cpu_pool *pool = NULL;
    CHECK_OK(pllm_cpu_pool_create(&pool, n_threads));
    if (!pool) return;
    pool_arg a = {.pool = pool, .rounds = 2000};
    double t0 = pllm_now();
    for (int rep = 0; rep < 5; rep++) pllm_cpu_pool_run(pool, pool_fn, &a);
    double dt = pllm_now() - t0;
    long expect = 5L * a.rounds * n_threads * (n_threads + 1) / 2;
    fprintf(stderr, "  pool   threads=%d  counter %ld (expect %ld)  errors %d  %.2f us per barrier\n", n_threads,
            (long)atomic_load(&a.counter), expect, atomic_load(&a.errors), dt / (5.0 * 2 * a.rounds) * 1e6);
    CHECK(atomic_load(&a.counter) == expect);
    CHECK(atomic_load(&a.errors) == 0);
    pllm_cpu_pool_free(pool);

    /* split: contiguous, covering, aligned */
    for (int nth = 1; nth <= 5; nth++) {
        int64_t prev = 0;
        for (int i = 0; i < nth; i++) {
            int64_t lo, hi;
            pllm_cpu_split(1000, 16, i, nth, &lo, &hi);
            CHECK(lo == prev && hi >= lo && (lo % 16 == 0 || lo == 1000));
            prev = hi;
        }
        CHECK(prev == 1000);
    }
}

int main(void)
{
    int n_isa = 0;
    for (int isa = 0; isa < PLLM_CPU_ISA_COUNT; isa++) {
        const pllm_cpu_kernels *kern = pllm_cpu_kernels_get((pllm_cpu_isa)isa);
        if (!kern) {
            fprintf(stderr, "kernels %s: not available on this machine (not tested here)\n", pllm_cpu_isa_name((pllm_cpu_isa)isa));
            continue;
        }
        n_isa++;
        fprintf(stderr, "kernels %s:\n", kern->name);
        for (size_t d = 0; d < PLLM_ARRAY_LEN(g_dtypes); d++) {
            pllm_dtype dt = g_dtypes[d];
            if (!pllm_dtype_supported(dt) || !kern->matmul[dt]) {
                fprintf(stderr, "  matmul %-6s %-5s: no kernel%s\n", kern->name, pllm_dtype_name(dt),
                        pllm_dtype_supported(dt) ? "  FAIL (the dtype is supported)" : "");
                CHECK(!pllm_dtype_supported(dt));
                continue;
            }
            int be = pllm_dtype_block_elems(dt);
            const int64_t Ks_q[] = {32, 96, 160, 576}, Ks_f[] = {1, 17, 45, 96, 113, 577}, Ks_k[] = {256, 512, 768};
            const int64_t *Ks = be == 1 ? Ks_f : be == PLLM_QK ? Ks_q : Ks_k;
            size_t nK = be == 1 ? PLLM_ARRAY_LEN(Ks_f) : be == PLLM_QK ? PLLM_ARRAY_LEN(Ks_q) : PLLM_ARRAY_LEN(Ks_k);
            for (size_t ki = 0; ki < nK; ki++) {
                const int64_t toks[] = {1, 3, 8, 13};
                test_matmul(kern, dt, Ks[ki], 37 + (int64_t)ki * 2, toks[ki % 4]);
            }
        }
        test_vec(kern);
        test_swiglu_rmsnorm(kern);
        test_attention(kern, PLLM_DTYPE_F32, 64, 16, 1);
        test_attention(kern, PLLM_DTYPE_F32, 64, 16, 100);
        test_attention(kern, PLLM_DTYPE_F32, 24, 7, 200);
        test_attention(kern, PLLM_DTYPE_F16, 64, 5, 137);
        test_attention(kern, PLLM_DTYPE_F16, 40, 16, 16);
    }
    fprintf(stderr, "best table here: %s\n", pllm_cpu_kernels_best()->name);
    test_norm_rope_swiglu();
    test_pool(1);
    test_pool(2);
    test_pool(3);
    CHECK(n_isa >= 1);
    return pllm_test_finish("cpu_kernels");
}

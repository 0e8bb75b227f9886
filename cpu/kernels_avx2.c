/*
 * kernels_avx2.c: AVX2 + FMA + F16C kernels (per-function target attributes; called only where
 * CPUID says so).
 *
 * Matmul: a weight block of 32 elements becomes four ymm registers of float32; each token of a
 * tile of up to TILE tokens has two accumulators (groups 0,2 and 1,3), so a lone token still
 * has two FMA chains. 16 ymm registers: 4 weights + 2 * TILE accumulators + 1 input = 13.
 * The per-token operation sequence does not depend on the tile size (batch invariance). The
 * tail of a float row whose length is not a multiple of 32 is summed in scalar code.
 */
#include "cpu/kernels.h"
#include "cpu/kquant.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define T256 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))
#define TILE 4
/* Software prefetch distance in bytes: the weights of a decode step stream from DRAM, and
 * the hardware prefetcher alone reaches only ~1/3 of the bandwidth (measured). */
#define PF_DIST 2048

T256 INLINE float h2f(uint16_t h) { return _cvtsh_ss(h); }

T256 INLINE float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The 32 nibble values of a Q4/Q5 block as int32: q[0..3] hold elements 0-7, 8-15, 16-23, 24-31. */
T256 INLINE void nibbles(const uint8_t *qs, __m256i q[4])
{
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    __m128i m = _mm_set1_epi8(0x0f);
    __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    q[0] = _mm256_cvtepu8_epi32(lo);
    q[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8));
    q[2] = _mm256_cvtepu8_epi32(hi);
    q[3] = _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8));
}

/* Add 16 to element j where bit j of qh is set. */
T256 INLINE void fifth_bits(uint32_t qh, __m256i q[4])
{
    const __m256i qhv = _mm256_set1_epi32((int)qh), one = _mm256_set1_epi32(1);
    for (int g = 0; g < 4; g++) {
        __m256i sh = _mm256_setr_epi32(8 * g, 8 * g + 1, 8 * g + 2, 8 * g + 3, 8 * g + 4, 8 * g + 5, 8 * g + 6, 8 * g + 7);
        __m256i bit = _mm256_and_si256(_mm256_srlv_epi32(qhv, sh), one);
        q[g] = _mm256_add_epi32(q[g], _mm256_slli_epi32(bit, 4));
    }
}

/* 32 bytes at p, shifted right by sh bits within each byte and masked with mask. */
T256 INLINE __m256i bits8(const uint8_t *p, int sh, int mask)
{
    __m256i v = _mm256_srl_epi16(_mm256_loadu_si256((const __m256i *)p), _mm_cvtsi32_si128(sh));
    return _mm256_and_si256(v, _mm256_set1_epi8((char)mask));
}

/* The 32 bytes of v as int32, 8 per register. */
T256 INLINE void widen32(__m256i v, __m256i q[4])
{
    __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    q[0] = _mm256_cvtepu8_epi32(lo);
    q[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8));
    q[2] = _mm256_cvtepu8_epi32(hi);
    q[3] = _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8));
}

/* 32-element group g of row as float32, 8 per register. */
T256 INLINE void load32(const int dt, const uint8_t *row, int64_t g, __m256 w[4])
{
    const uint8_t *p = row + pllm_cpu_group_offset(dt, g);
    switch (dt) {
    case PLLM_DTYPE_F32:
        for (int k = 0; k < 4; k++) w[k] = _mm256_loadu_ps((const float *)p + 8 * k);
        return;
    case PLLM_DTYPE_F16:
        for (int k = 0; k < 4; k++) w[k] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p + k));
        return;
    case PLLM_DTYPE_BF16:
        for (int k = 0; k < 4; k++)
            w[k] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p + k)), 16));
        return;
    case PLLM_DTYPE_Q8_0: {
        const pllm_block_q8_0 *b = (const void *)p;
        __m256 d = _mm256_set1_ps(h2f(b->d));
        for (int k = 0; k < 4; k++)
            w[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * k)))), d);
        return;
    }
    case PLLM_DTYPE_Q4_0: {
        const pllm_block_q4_0 *b = (const void *)p;
        __m256 d = _mm256_set1_ps(h2f(b->d));
        __m256i q[4], eight = _mm256_set1_epi32(8);
        nibbles(b->qs, q);
        for (int k = 0; k < 4; k++) w[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q[k], eight)), d);
        return;
    }
    case PLLM_DTYPE_Q4_1: {
        const pllm_block_q4_1 *b = (const void *)p;
        __m256 d = _mm256_set1_ps(h2f(b->d)), m = _mm256_set1_ps(h2f(b->m));
        __m256i q[4];
        nibbles(b->qs, q);
        for (int k = 0; k < 4; k++) w[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[k]), d, m);
        return;
    }
    case PLLM_DTYPE_Q5_0: {
        const pllm_block_q5_0 *b = (const void *)p;
        __m256 d = _mm256_set1_ps(h2f(b->d));
        uint32_t qh;
        memcpy(&qh, b->qh, 4);
        __m256i q[4], sixteen = _mm256_set1_epi32(16);
        nibbles(b->qs, q);
        fifth_bits(qh, q);
        for (int k = 0; k < 4; k++) w[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q[k], sixteen)), d);
        return;
    }
    case PLLM_DTYPE_Q5_1: {
        const pllm_block_q5_1 *b = (const void *)p;
        __m256 d = _mm256_set1_ps(h2f(b->d)), m = _mm256_set1_ps(h2f(b->m));
        uint32_t qh;
        memcpy(&qh, b->qh, 4);
        __m256i q[4];
        nibbles(b->qs, q);
        fifth_bits(qh, q);
        for (int k = 0; k < 4; k++) w[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[k]), d, m);
        return;
    }
    case PLLM_DTYPE_Q4_K:
    case PLLM_DTYPE_Q5_K: {
        /* sub-block s: low (s even) or high (s odd) nibbles of qs[32 (s/2) ..]; Q5_K's fifth
         * bit is bit s of qh[l]; x = d sc q - dmin mn */
        const pllm_block_q4_k *b4 = (const void *)p;
        const pllm_block_q5_k *b5 = (const void *)p;
        const int s = (int)(g & 7);
        int sc, mn;
        pllm_cpu_kq_scale_min(b4->scales, s, &sc, &mn);
        __m256 d = _mm256_set1_ps(h2f(b4->d) * (float)sc), m = _mm256_set1_ps(h2f(b4->dmin) * (float)mn);
        __m256i q8 = bits8((dt == PLLM_DTYPE_Q4_K ? b4->qs : b5->qs) + 32 * (s >> 1), 4 * (s & 1), 0x0f);
        if (dt == PLLM_DTYPE_Q5_K) q8 = _mm256_or_si256(q8, _mm256_slli_epi16(bits8(b5->qh, s, 1), 4));
        __m256i q[4];
        widen32(q8, q);
        for (int k = 0; k < 4; k++) w[k] = _mm256_sub_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q[k]), d), m);
        return;
    }
    default: { /* Q6_K: group j = s % 4 of half h = s / 4 (see dtype.h) */
        const pllm_block_q6_k *b = (const void *)p;
        const int s = (int)(g & 7), h = s >> 2, j = s & 3;
        const float d = h2f(b->d);
        __m256i q8 = bits8(b->ql + 64 * h + 32 * (j & 1), 4 * (j >> 1), 0x0f);
        q8 = _mm256_or_si256(q8, _mm256_slli_epi16(bits8(b->qh + 32 * h, 2 * j, 3), 4));
        __m256i q[4];
        widen32(q8, q);
        const __m256i k32 = _mm256_set1_epi32(32);
        const __m256 d0 = _mm256_set1_ps(d * (float)b->scales[8 * h + 2 * j]), d1 = _mm256_set1_ps(d * (float)b->scales[8 * h + 2 * j + 1]);
        for (int k = 0; k < 4; k++) w[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q[k], k32)), k < 2 ? d0 : d1);
        return;
    }
    }
}

/* One element of a float-type row. */
INLINE float elem(const int dt, const uint8_t *row, int64_t k)
{
    uint16_t h;
    switch (dt) {
    case PLLM_DTYPE_F32: {
        float f;
        memcpy(&f, row + 4 * k, 4);
        return f;
    }
    case PLLM_DTYPE_F16: memcpy(&h, row + 2 * k, 2); return pllm_fp16_to_fp32(h);
    default: memcpy(&h, row + 2 * k, 2); return pllm_bf16_to_fp32(h);
    }
}

T256 INLINE void tile(const int dt, const int T, float *Y, int64_t ldy, const float *X, int64_t ldx, const uint8_t *w,
                      int64_t K)
{
    __m256 a0[TILE], a1[TILE];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) a0[t] = a1[t] = _mm256_setzero_ps();
    const int64_t ng = K / 32;
    for (int64_t g = 0; g < ng; g++) {
        __m256 wv[4];
        _mm_prefetch((const char *)(w + pllm_cpu_group_offset(dt, g) + PF_DIST), _MM_HINT_T0);
        load32(dt, w, g, wv);
        const float *x = X + g * 32;
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const float *xt = x + t * ldx;
            a0[t] = _mm256_fmadd_ps(wv[0], _mm256_loadu_ps(xt), a0[t]);
            a1[t] = _mm256_fmadd_ps(wv[1], _mm256_loadu_ps(xt + 8), a1[t]);
            a0[t] = _mm256_fmadd_ps(wv[2], _mm256_loadu_ps(xt + 16), a0[t]);
            a1[t] = _mm256_fmadd_ps(wv[3], _mm256_loadu_ps(xt + 24), a1[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        float s = hsum(_mm256_add_ps(a0[t], a1[t]));
        for (int64_t k = ng * 32; k < K; k++) s += elem(dt, w, k) * X[t * ldx + k];
        Y[t * ldy] = s;
    }
}

T256 INLINE void matmul(const int dt, float *restrict Y, int64_t ldy, const float *restrict X, int64_t ldx,
                        const void *restrict W, size_t row_bytes, int64_t K, int64_t n_tok, int64_t r0, int64_t r1)
{
    for (int64_t t0 = 0; t0 < n_tok; t0 += TILE) {
        const int64_t nt = n_tok - t0 < TILE ? n_tok - t0 : TILE;
        const float *Xt = X + t0 * ldx;
        float *Yt = Y + t0 * ldy;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *w = (const uint8_t *)W + (size_t)r * row_bytes;
            switch (nt) {
            case 4: tile(dt, 4, Yt + r, ldy, Xt, ldx, w, K); break;
            case 3: tile(dt, 3, Yt + r, ldy, Xt, ldx, w, K); break;
            case 2: tile(dt, 2, Yt + r, ldy, Xt, ldx, w, K); break;
            default: tile(dt, 1, Yt + r, ldy, Xt, ldx, w, K); break;
            }
        }
    }
}

#define MATMUL256(NAME, DT)                                                                                        \
    T256 static void NAME(float *restrict Y, int64_t ldy, const float *restrict X, int64_t ldx,                   \
                          const void *restrict W, size_t row_bytes, int64_t K, int64_t n_tok, int64_t r0,          \
                          int64_t r1, float *restrict scratch)                                                     \
    {                                                                                                              \
        (void)scratch;                                                                                             \
        matmul(DT, Y, ldy, X, ldx, W, row_bytes, K, n_tok, r0, r1);                                                \
    }
MATMUL256(mm_f32, PLLM_DTYPE_F32)
MATMUL256(mm_f16, PLLM_DTYPE_F16)
MATMUL256(mm_bf16, PLLM_DTYPE_BF16)
MATMUL256(mm_q8_0, PLLM_DTYPE_Q8_0)
MATMUL256(mm_q4_0, PLLM_DTYPE_Q4_0)
MATMUL256(mm_q4_1, PLLM_DTYPE_Q4_1)
MATMUL256(mm_q5_0, PLLM_DTYPE_Q5_0)
MATMUL256(mm_q5_1, PLLM_DTYPE_Q5_1)
MATMUL256(mm_q4_k, PLLM_DTYPE_Q4_K)
MATMUL256(mm_q5_k, PLLM_DTYPE_Q5_K)
MATMUL256(mm_q6_k, PLLM_DTYPE_Q6_K)
#undef MATMUL256

T256 INLINE float elem_kv(const int f16, const void *p, int64_t i)
{
    return f16 ? h2f(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

T256 INLINE __m256 load8(const int f16, const void *p, int64_t i)
{
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i))) : _mm256_loadu_ps((const float *)p + i);
}

T256 INLINE void scores(const int f16, float *s, const float *q, const void *K, int64_t n, int64_t hd, float scale)
{
    const size_t esz = f16 ? 2 : 4;
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *k = (const uint8_t *)K + (size_t)(j * hd) * esz;
        __m256 acc = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 8 <= hd; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(f16, k, i), acc);
        float d = hsum(acc);
        for (; i < hd; i++) d += q[i] * elem_kv(f16, k, i);
        s[j] = d * scale;
    }
}

/* out stays in registers 32 elements at a time while the n rows of V stream past */
T256 INLINE void accum(const int f16, float *out, float corr, const float *p, const void *V, int64_t n, int64_t hd)
{
    const size_t esz = f16 ? 2 : 4;
    const __m256 vc = _mm256_set1_ps(corr);
    int64_t i0 = 0;
    for (; i0 + 8 <= hd; i0 += 32) {
        const int nv = (int)(PLLM_MIN(hd - i0, 32) / 8);
        __m256 o[4];
        for (int v = 0; v < nv; v++) o[v] = _mm256_mul_ps(_mm256_loadu_ps(out + i0 + 8 * v), vc);
        for (int64_t j = 0; j < n; j++) {
            const uint8_t *vr = (const uint8_t *)V + (size_t)(j * hd) * esz;
            const __m256 pj = _mm256_set1_ps(p[j]);
            for (int v = 0; v < nv; v++) o[v] = _mm256_fmadd_ps(pj, load8(f16, vr, i0 + 8 * v), o[v]);
        }
        for (int v = 0; v < nv; v++) _mm256_storeu_ps(out + i0 + 8 * v, o[v]);
        if (nv < 4) { i0 += 8 * nv; break; }
    }
    for (int64_t i = i0; i < hd; i++) {
        float o = out[i] * corr;
        for (int64_t j = 0; j < n; j++) o += p[j] * elem_kv(f16, (const uint8_t *)V + (size_t)(j * hd) * esz, i);
        out[i] = o;
    }
}

T256 static void attn_scores_f32(float *s, const float *q, const float *K, int64_t n, int64_t hd, float scale) { scores(0, s, q, K, n, hd, scale); }
T256 static void attn_scores_f16(float *s, const float *q, const uint16_t *K, int64_t n, int64_t hd, float scale) { scores(1, s, q, K, n, hd, scale); }
T256 static void attn_accum_f32(float *out, float corr, const float *p, const float *V, int64_t n, int64_t hd) { accum(0, out, corr, p, V, n, hd); }
T256 static void attn_accum_f16(float *out, float corr, const float *p, const uint16_t *V, int64_t n, int64_t hd) { accum(1, out, corr, p, V, n, hd); }

T256 static void to_f16(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = pllm_fp32_to_fp16(src[i]);
}

/* 2^k for integer k in [-126, 127] (a normal float built from its exponent field). */
T256 INLINE __m256 pow2i(__m256i k) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23)); }

/* e^x in 8 lanes: the operations of kernels_avx512.c's exp16 (same clamp, reduction and
 * polynomial), with 2^n applied as two exact powers 2^(n/2) and 2^(n - n/2): p * 2^n1 is exact,
 * the second product rounds once, as vscalefps does (overflow to +inf, subnormals, NaN kept). */
T256 INLINE __m256 exp8(__m256 x)
{
    x = _mm256_min_ps(_mm256_set1_ps(100.0f), _mm256_max_ps(_mm256_set1_ps(-110.0f), x));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    const __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1);
    return _mm256_mul_ps(_mm256_mul_ps(p, pow2i(n1)), pow2i(_mm256_sub_epi32(ni, n1)));
}

/* Lanes [0, m) of a vector of 8 (m in 1..8), for the masked tail. */
T256 INLINE __m256i tail_mask(int64_t m)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)PLLM_MIN(m, 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

T256 static void swiglu(float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i k = tail_mask(n - i);
        const __m256 g = _mm256_maskload_ps(gate + i, k), u = _mm256_maskload_ps(up + i, k);
        const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
        _mm256_maskstore_ps(gate + i, k, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u));
    }
}

/* The sum of squares in double, 8 lanes at a time (x * x is exact in double). */
T256 static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 v = _mm256_maskload_ps(x + i, tail_mask(n - i));
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        s0 = _mm256_fmadd_pd(lo, lo, s0);
        s1 = _mm256_fmadd_pd(hi, hi, s1);
    }
    const __m256d s = _mm256_add_pd(s0, s1);
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    const double ss = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    const __m256 r = _mm256_set1_ps((float)(1.0 / sqrt(ss / (double)n + (double)eps)));
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i k = tail_mask(n - i);
        _mm256_maskstore_ps(out + i, k, _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i, k), r), _mm256_maskload_ps(w + i, k)));
    }
}

const pllm_cpu_kernels pllm_cpu_kernels_avx2 = {
    .isa = PLLM_CPU_ISA_AVX2,
    .name = "avx2",
    .matmul = {[PLLM_DTYPE_F32] = mm_f32, [PLLM_DTYPE_F16] = mm_f16, [PLLM_DTYPE_BF16] = mm_bf16,
               [PLLM_DTYPE_Q8_0] = mm_q8_0, [PLLM_DTYPE_Q4_0] = mm_q4_0, [PLLM_DTYPE_Q4_1] = mm_q4_1,
               [PLLM_DTYPE_Q5_0] = mm_q5_0, [PLLM_DTYPE_Q5_1] = mm_q5_1, [PLLM_DTYPE_Q4_K] = mm_q4_k,
               [PLLM_DTYPE_Q5_K] = mm_q5_k, [PLLM_DTYPE_Q6_K] = mm_q6_k},
    .attn_scores_f32 = attn_scores_f32,
    .attn_scores_f16 = attn_scores_f16,
    .attn_accum_f32 = attn_accum_f32,
    .attn_accum_f16 = attn_accum_f16,
    .to_f16 = to_f16,
    .rmsnorm = rmsnorm,
    .swiglu = swiglu,
    .quant = pllm_cpu_quant_avx2,
    .qmatmul = pllm_cpu_qmatmul_avx2,
    .qpacked = true,
};

#endif /* __x86_64__ */

/*
 * kernels_avx512.c: AVX-512 (F, BW, VL, DQ) kernels. Compiled with per-function target
 * attributes, so the file builds for any x86-64 and is only called where CPUID says it may.
 *
 * Matmul: a weight block of 32 elements is expanded to two zmm registers of float32 (nibbles
 * and high bits unpacked in integer lanes, converted, scaled by the block's half-float d and
 * offset m) and multiplied into the accumulators of a micro-tile of R rows x T tokens
 * (R = 2 for T >= 3, R = 4 for T <= 2 so that decode still has 4 independent FMA chains).
 * Each (row, token) output has one accumulator taking both halves of every block in a fixed
 * order, so its operation sequence does not depend on R, T or the batch: results are
 * batch-invariant.
 * Per block: R weight loads + ~8 unpack ops each, 2 loads per token, 2 FMAs per (row, token).
 * Registers: R*T accumulators (<= 16) + 2R weights + 2 inputs.
 */
#include "cpu/kernels.h"
#include "cpu/kquant.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))
#define TILE 8
/* Software prefetch distance in bytes: the weights of a decode step stream from DRAM, and
 * the hardware prefetcher alone reaches only ~1/3 of the bandwidth (measured). */
#define PF_DIST 2048

T512 INLINE float h2f(uint16_t h) { return _cvtsh_ss(h); }

T512 INLINE void nibbles(const uint8_t *qs, __m512i *lo, __m512i *hi)
{
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m128i m = _mm_set1_epi8(0x0f);
    *lo = _mm512_cvtepu8_epi32(_mm_and_si128(q, m));
    *hi = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), m));
}

/* 32 bytes at p, shifted right by sh bits within each byte and masked with mask. */
T512 INLINE __m256i bits8(const uint8_t *p, int sh, int mask)
{
    __m256i v = _mm256_srl_epi16(_mm256_loadu_si256((const __m256i *)p), _mm_cvtsi32_si128(sh));
    return _mm256_and_si256(v, _mm256_set1_epi8((char)mask));
}

/* 32-element group g of row as float32: elements 0..15 in *w0, 16..31 in *w1. */
T512 INLINE void load32(const int dt, const uint8_t *row, int64_t g, __m512 *w0, __m512 *w1)
{
    const uint8_t *p = row + pllm_cpu_group_offset(dt, g);
    switch (dt) {
    case PLLM_DTYPE_F32:
        *w0 = _mm512_loadu_ps((const float *)p);
        *w1 = _mm512_loadu_ps((const float *)p + 16);
        return;
    case PLLM_DTYPE_F16:
        *w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        *w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p + 1));
        return;
    case PLLM_DTYPE_BF16:
        *w0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
        *w1 = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p + 1)), 16));
        return;
    case PLLM_DTYPE_Q8_0: {
        const pllm_block_q8_0 *b = (const void *)p;
        __m512 d = _mm512_set1_ps(h2f(b->d));
        *w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->qs))), d);
        *w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->qs + 1))), d);
        return;
    }
    case PLLM_DTYPE_Q4_0: {
        const pllm_block_q4_0 *b = (const void *)p;
        __m512 d = _mm512_set1_ps(h2f(b->d));
        __m512i lo, hi, eight = _mm512_set1_epi32(8);
        nibbles(b->qs, &lo, &hi);
        *w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, eight)), d);
        *w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, eight)), d);
        return;
    }
    case PLLM_DTYPE_Q4_1: {
        const pllm_block_q4_1 *b = (const void *)p;
        __m512 d = _mm512_set1_ps(h2f(b->d)), m = _mm512_set1_ps(h2f(b->m));
        __m512i lo, hi;
        nibbles(b->qs, &lo, &hi);
        *w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), d, m);
        *w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), d, m);
        return;
    }
    case PLLM_DTYPE_Q5_0: {
        const pllm_block_q5_0 *b = (const void *)p;
        __m512 d = _mm512_set1_ps(h2f(b->d));
        uint32_t qh;
        memcpy(&qh, b->qh, 4);
        __m512i lo, hi, sixteen = _mm512_set1_epi32(16);
        nibbles(b->qs, &lo, &hi);
        /* element j gets bit j of qh as its fifth bit; then subtract 16 */
        lo = _mm512_mask_add_epi32(lo, (__mmask16)(qh & 0xffff), lo, sixteen);
        hi = _mm512_mask_add_epi32(hi, (__mmask16)(qh >> 16), hi, sixteen);
        *w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, sixteen)), d);
        *w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, sixteen)), d);
        return;
    }
    case PLLM_DTYPE_Q5_1: {
        const pllm_block_q5_1 *b = (const void *)p;
        __m512 d = _mm512_set1_ps(h2f(b->d)), m = _mm512_set1_ps(h2f(b->m));
        uint32_t qh;
        memcpy(&qh, b->qh, 4);
        __m512i lo, hi, sixteen = _mm512_set1_epi32(16);
        nibbles(b->qs, &lo, &hi);
        lo = _mm512_mask_add_epi32(lo, (__mmask16)(qh & 0xffff), lo, sixteen);
        hi = _mm512_mask_add_epi32(hi, (__mmask16)(qh >> 16), hi, sixteen);
        *w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), d, m);
        *w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), d, m);
        return;
    }
    case PLLM_DTYPE_Q4_K:
    case PLLM_DTYPE_Q5_K: {
        /* sub-block s: 4-bit values in the low (s even) or high (s odd) nibbles of
         * qs[32 (s/2) ..], Q5_K's fifth bit is bit s of qh[l]; x = d sc q - dmin mn */
        const pllm_block_q4_k *b4 = (const void *)p;
        const pllm_block_q5_k *b5 = (const void *)p;
        const int s = (int)(g & 7);
        int sc, mn;
        pllm_cpu_kq_scale_min(b4->scales, s, &sc, &mn); /* d, dmin, scales: same offsets in both */
        __m512 d = _mm512_set1_ps(h2f(b4->d) * (float)sc), m = _mm512_set1_ps(h2f(b4->dmin) * (float)mn);
        const uint8_t *qs = (dt == PLLM_DTYPE_Q4_K ? b4->qs : b5->qs) + 32 * (s >> 1);
        __m256i q = bits8(qs, 4 * (s & 1), 0x0f);
        if (dt == PLLM_DTYPE_Q5_K) q = _mm256_or_si256(q, _mm256_slli_epi16(bits8(b5->qh, s, 1), 4));
        *w0 = _mm512_sub_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q))), d), m);
        *w1 = _mm512_sub_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1))), d), m);
        return;
    }
    default: { /* Q6_K: group j = s % 4 of half h = s / 4 (see dtype.h) */
        const pllm_block_q6_k *b = (const void *)p;
        const int s = (int)(g & 7), h = s >> 2, j = s & 3;
        const float d = h2f(b->d);
        __m256i q = bits8(b->ql + 64 * h + 32 * (j & 1), 4 * (j >> 1), 0x0f);
        q = _mm256_or_si256(q, _mm256_slli_epi16(bits8(b->qh + 32 * h, 2 * j, 3), 4));
        const __m512i k32 = _mm512_set1_epi32(32);
        __m512i lo = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q)), k32);
        __m512i hi = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1)), k32);
        *w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(lo), _mm512_set1_ps(d * (float)b->scales[8 * h + 2 * j]));
        *w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(hi), _mm512_set1_ps(d * (float)b->scales[8 * h + 2 * j + 1]));
        return;
    }
    }
}

/* n (<= 16) float-type elements at p, zero-filled to 16 lanes. */
T512 INLINE __m512 load_partial(const int dt, const uint8_t *p, int n)
{
    __mmask16 k = (__mmask16)((1u << n) - 1);
    switch (dt) {
    case PLLM_DTYPE_F32: return _mm512_maskz_loadu_ps(k, p);
    case PLLM_DTYPE_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p));
    default: return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p)), 16));
    }
}

/* Y[t * ldy + i] = dot(weight row w + i * rb, X[t]) for R rows and T tokens (compile-time). One
 * accumulator per (row, token): both 16-lane halves of each block go into it. */
T512 INLINE void tile(const int dt, const int R, const int T, float *Y, int64_t ldy, const float *X, int64_t ldx,
                      const uint8_t *w, size_t rb, int64_t K)
{
    __m512 acc[4][TILE];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) acc[i][t] = _mm512_setzero_ps();
    const int64_t ng = K / 32;
    for (int64_t g = 0; g < ng; g++) {
        __m512 w0[4], w1[4];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            _mm_prefetch((const char *)(w + i * rb + pllm_cpu_group_offset(dt, g) + PF_DIST), _MM_HINT_T0);
            load32(dt, w + i * rb, g, &w0[i], &w1[i]);
        }
        const float *x = X + g * 32;
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            __m512 x0 = _mm512_loadu_ps(x + t * ldx), x1 = _mm512_loadu_ps(x + t * ldx + 16);
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                acc[i][t] = _mm512_fmadd_ps(w0[i], x0, acc[i][t]);
                acc[i][t] = _mm512_fmadd_ps(w1[i], x1, acc[i][t]);
            }
        }
    }
    const int rem = (int)(K - ng * 32);
    if (rem > 0) {
        const size_t esz = dt == PLLM_DTYPE_F32 ? 4 : 2;
        const int n0 = rem < 16 ? rem : 16, n1 = rem - n0;
        const __mmask16 k0 = (__mmask16)((1u << n0) - 1), k1 = (__mmask16)((1u << n1) - 1);
        const float *x = X + ng * 32;
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            const uint8_t *wp = w + i * rb + pllm_cpu_group_offset(dt, ng);
            __m512 w0 = load_partial(dt, wp, n0);
            __m512 w1 = n1 > 0 ? load_partial(dt, wp + 16 * esz, n1) : _mm512_setzero_ps();
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                acc[i][t] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(k0, x + t * ldx), acc[i][t]);
                acc[i][t] = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(k1, x + t * ldx + 16), acc[i][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) Y[t * ldy + i] = _mm512_reduce_add_ps(acc[i][t]);
}

#define TILE_CASE(R, T) tile(dt, R, T, Yt + r, ldy, Xt, ldx, w, row_bytes, K)
T512 INLINE void matmul(const int dt, float *restrict Y, int64_t ldy, const float *restrict X, int64_t ldx,
                        const void *restrict W, size_t row_bytes, int64_t K, int64_t n_tok, int64_t r0, int64_t r1)
{
    for (int64_t t0 = 0; t0 < n_tok; t0 += TILE) {
        const int64_t nt = n_tok - t0 < TILE ? n_tok - t0 : TILE;
        const float *Xt = X + t0 * ldx;
        float *Yt = Y + t0 * ldy;
        const int64_t R = nt <= 2 ? 4 : 2;
        int64_t r = r0;
        for (; r + R <= r1; r += R) {
            const uint8_t *w = (const uint8_t *)W + (size_t)r * row_bytes;
            switch (nt) {
            case 8: TILE_CASE(2, 8); break;
            case 7: TILE_CASE(2, 7); break;
            case 6: TILE_CASE(2, 6); break;
            case 5: TILE_CASE(2, 5); break;
            case 4: TILE_CASE(2, 4); break;
            case 3: TILE_CASE(2, 3); break;
            case 2: TILE_CASE(4, 2); break;
            default: TILE_CASE(4, 1); break;
            }
        }
        for (; r < r1; r++) {
            const uint8_t *w = (const uint8_t *)W + (size_t)r * row_bytes;
            switch (nt) {
            case 8: TILE_CASE(1, 8); break;
            case 7: TILE_CASE(1, 7); break;
            case 6: TILE_CASE(1, 6); break;
            case 5: TILE_CASE(1, 5); break;
            case 4: TILE_CASE(1, 4); break;
            case 3: TILE_CASE(1, 3); break;
            case 2: TILE_CASE(1, 2); break;
            default: TILE_CASE(1, 1); break;
            }
        }
    }
}

#define MATMUL512(NAME, DT)                                                                                        \
    T512 static void NAME(float *restrict Y, int64_t ldy, const float *restrict X, int64_t ldx,                   \
                          const void *restrict W, size_t row_bytes, int64_t K, int64_t n_tok, int64_t r0,          \
                          int64_t r1, float *restrict scratch)                                                     \
    {                                                                                                              \
        (void)scratch;                                                                                             \
        matmul(DT, Y, ldy, X, ldx, W, row_bytes, K, n_tok, r0, r1);                                                \
    }
MATMUL512(mm_f32, PLLM_DTYPE_F32)
MATMUL512(mm_f16, PLLM_DTYPE_F16)
MATMUL512(mm_bf16, PLLM_DTYPE_BF16)
MATMUL512(mm_q8_0, PLLM_DTYPE_Q8_0)
MATMUL512(mm_q4_0, PLLM_DTYPE_Q4_0)
MATMUL512(mm_q4_1, PLLM_DTYPE_Q4_1)
MATMUL512(mm_q5_0, PLLM_DTYPE_Q5_0)
MATMUL512(mm_q5_1, PLLM_DTYPE_Q5_1)
MATMUL512(mm_q4_k, PLLM_DTYPE_Q4_K)
MATMUL512(mm_q5_k, PLLM_DTYPE_Q5_K)
MATMUL512(mm_q6_k, PLLM_DTYPE_Q6_K)
#undef MATMUL512

/* hd-element vectors of float32 or half, 16 lanes at a time, the tail masked */
T512 INLINE __m512 load_row(const int f16, const void *p, int64_t i, int64_t n)
{
    if (i + 16 <= n)
        return f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)))
                   : _mm512_loadu_ps((const float *)p + i);
    __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
    return f16 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i)) : _mm512_maskz_loadu_ps(k, (const float *)p + i);
}

T512 INLINE void scores(const int f16, float *s, const float *q, const void *K, int64_t n, int64_t hd, float scale)
{
    const size_t esz = f16 ? 2 : 4;
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *k = (const uint8_t *)K + (size_t)(j * hd) * esz;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < hd; i += 16) acc = _mm512_fmadd_ps(load_row(0, q, i, hd), load_row(f16, k, i, hd), acc);
        s[j] = _mm512_reduce_add_ps(acc) * scale;
    }
}

/* out stays in registers 64 elements at a time while the n rows of V stream past */
T512 INLINE void accum(const int f16, float *out, float corr, const float *p, const void *V, int64_t n, int64_t hd)
{
    const size_t esz = f16 ? 2 : 4;
    const __m512 vc = _mm512_set1_ps(corr);
    for (int64_t i0 = 0; i0 < hd; i0 += 64) {
        const int nv = (int)((PLLM_MIN(hd - i0, 64) + 15) / 16);
        __m512 o[4];
        for (int v = 0; v < nv; v++) o[v] = _mm512_mul_ps(load_row(0, out, i0 + 16 * v, hd), vc);
        for (int64_t j = 0; j < n; j++) {
            const uint8_t *vr = (const uint8_t *)V + (size_t)(j * hd) * esz;
            const __m512 pj = _mm512_set1_ps(p[j]);
            for (int v = 0; v < nv; v++) o[v] = _mm512_fmadd_ps(pj, load_row(f16, vr, i0 + 16 * v, hd), o[v]);
        }
        for (int v = 0; v < nv; v++) {
            int64_t i = i0 + 16 * v;
            if (i + 16 <= hd) _mm512_storeu_ps(out + i, o[v]);
            else _mm512_mask_storeu_ps(out + i, (__mmask16)((1u << (hd - i)) - 1), o[v]);
        }
    }
}

T512 static void attn_scores_f32(float *s, const float *q, const float *K, int64_t n, int64_t hd, float scale) { scores(0, s, q, K, n, hd, scale); }
T512 static void attn_scores_f16(float *s, const float *q, const uint16_t *K, int64_t n, int64_t hd, float scale) { scores(1, s, q, K, n, hd, scale); }
T512 static void attn_accum_f32(float *out, float corr, const float *p, const float *V, int64_t n, int64_t hd) { accum(0, out, corr, p, V, n, hd); }
T512 static void attn_accum_f16(float *out, float corr, const float *p, const uint16_t *V, int64_t n, int64_t hd) { accum(1, out, corr, p, V, n, hd); }

T512 static void to_f16(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(dst + i, k,
                                 _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, src + i),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
}

/* e^x in 16 lanes: x = n ln2 + r with n = round(x log2 e) and ln2 in two parts (|r| <= ln2 / 2),
 * e^r by Cephes expf's degree-6 polynomial, times 2^n by vscalefps (overflow to +inf, underflow
 * through the subnormals to +0, NaN kept). x is clamped to [-110, 100] first, where e^x is
 * already 0 or inf. Max error 2 ulp (tests/cpu_kernels). The AVX2 table's exp8 computes the same
 * operations, so both give the same bits. */
T512 INLINE __m512 exp16(__m512 x)
{
    /* max/min return their second operand when one is NaN: a NaN x passes through */
    x = _mm512_min_ps(_mm512_set1_ps(100.0f), _mm512_max_ps(_mm512_set1_ps(-110.0f), x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

T512 static void swiglu(float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 g = _mm512_maskz_loadu_ps(k, gate + i), u = _mm512_maskz_loadu_ps(k, up + i);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
        _mm512_mask_storeu_ps(gate + i, k, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u));
    }
}

/* The sum of squares in double, 16 lanes at a time (x * x is exact in double). */
T512 static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
        s0 = _mm512_fmadd_pd(lo, lo, s0);
        s1 = _mm512_fmadd_pd(hi, hi, s1);
    }
    const double ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    const __m512 r = _mm512_set1_ps((float)(1.0 / sqrt(ss / (double)n + (double)eps)));
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), r),
                                                        _mm512_maskz_loadu_ps(k, w + i)));
    }
}

#define AVX512_FIELDS                                                                                                  \
    .matmul = {[PLLM_DTYPE_F32] = mm_f32, [PLLM_DTYPE_F16] = mm_f16, [PLLM_DTYPE_BF16] = mm_bf16,                      \
               [PLLM_DTYPE_Q8_0] = mm_q8_0, [PLLM_DTYPE_Q4_0] = mm_q4_0, [PLLM_DTYPE_Q4_1] = mm_q4_1,                  \
               [PLLM_DTYPE_Q5_0] = mm_q5_0, [PLLM_DTYPE_Q5_1] = mm_q5_1, [PLLM_DTYPE_Q4_K] = mm_q4_k,                  \
               [PLLM_DTYPE_Q5_K] = mm_q5_k, [PLLM_DTYPE_Q6_K] = mm_q6_k},                                             \
    .attn_scores_f32 = attn_scores_f32, .attn_scores_f16 = attn_scores_f16, .attn_accum_f32 = attn_accum_f32,          \
    .attn_accum_f16 = attn_accum_f16, .to_f16 = to_f16, .rmsnorm = rmsnorm, .swiglu = swiglu

/* Without VNNI: float math only (no integer path). */
const pllm_cpu_kernels pllm_cpu_kernels_avx512 = {.isa = PLLM_CPU_ISA_AVX512, .name = "avx512", AVX512_FIELDS};

/* With VNNI: the same float kernels plus the integer matmul of gemm_avx512.c. */
const pllm_cpu_kernels pllm_cpu_kernels_avx512vnni = {.isa = PLLM_CPU_ISA_AVX512VNNI, .name = "avx512vnni", AVX512_FIELDS,
                                                      .quant = pllm_cpu_quant_avx512,
                                                      .qmatmul = pllm_cpu_qmatmul_avx512vnni, .qpacked = true};
#undef AVX512_FIELDS

#endif /* __x86_64__ */

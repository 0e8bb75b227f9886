/*
 * kernels_avx512.c: AVX-512 (F, BW, VL, DQ) kernels. Compiled with per-function target
 * attributes, so the file builds for any x86-64 and is only called where CPUID says it may.
 *
 * Matmul: a weight block of 32 elements is expanded to two zmm registers of float32 (nibbles
 * and high bits unpacked in integer lanes, converted, scaled by the block's half-float d and
 * offset m) and multiplied into the accumulators of a tile of up to TILE tokens. Every token
 * has two accumulators (even and odd 16-element halves of the block) so that a lone token
 * (decode) still has two independent FMA chains; the per-token operation sequence does not
 * depend on the tile size, which keeps results batch-invariant.
 * Per block and tile: 1 weight load + ~8 unpack ops, then 2 loads + 2 FMAs per token.
 */
#include "cpu/kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))
#define TILE 8
/* Software prefetch distance in bytes: the weights of a decode step stream from DRAM, and
 * the hardware prefetcher alone reaches only ~1/3 of the bandwidth (measured). */
#define PF_DIST 2048

T512 INLINE float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* Bytes of a 32-element group of dtype dt. */
INLINE size_t group_bytes(const int dt)
{
    switch (dt) {
    case PLLM_DTYPE_F32: return 128;
    case PLLM_DTYPE_F16: case PLLM_DTYPE_BF16: return 64;
    case PLLM_DTYPE_Q8_0: return sizeof(pllm_block_q8_0);
    case PLLM_DTYPE_Q4_0: return sizeof(pllm_block_q4_0);
    case PLLM_DTYPE_Q4_1: return sizeof(pllm_block_q4_1);
    case PLLM_DTYPE_Q5_0: return sizeof(pllm_block_q5_0);
    default: return sizeof(pllm_block_q5_1);
    }
}

T512 INLINE void nibbles(const uint8_t *qs, __m512i *lo, __m512i *hi)
{
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m128i m = _mm_set1_epi8(0x0f);
    *lo = _mm512_cvtepu8_epi32(_mm_and_si128(q, m));
    *hi = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), m));
}

/* The 32 elements at p as float32: elements 0..15 in *w0, 16..31 in *w1. */
T512 INLINE void load32(const int dt, const uint8_t *p, __m512 *w0, __m512 *w1)
{
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
    default: { /* Q5_1 */
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

/* Y[t * ldy] = dot(weight row w, X[t]) for the T (compile-time) tokens of a tile. */
T512 INLINE void tile(const int dt, const int T, float *Y, int64_t ldy, const float *X, int64_t ldx, const uint8_t *w,
                      int64_t K)
{
    __m512 a0[TILE], a1[TILE];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) a0[t] = a1[t] = _mm512_setzero_ps();
    const int64_t ng = K / 32;
    const size_t gb = group_bytes(dt);
    for (int64_t g = 0; g < ng; g++) {
        __m512 w0, w1;
        _mm_prefetch((const char *)(w + (size_t)g * gb + PF_DIST), _MM_HINT_T0);
        load32(dt, w + (size_t)g * gb, &w0, &w1);
        const float *x = X + g * 32;
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            a0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + t * ldx), a0[t]);
            a1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + t * ldx + 16), a1[t]);
        }
    }
    const int rem = (int)(K - ng * 32); /* only float types have a tail */
    if (rem > 0) {
        const size_t esz = dt == PLLM_DTYPE_F32 ? 4 : 2;
        const uint8_t *wp = w + (size_t)ng * gb;
        const int n0 = rem < 16 ? rem : 16, n1 = rem - n0;
        __m512 w0 = load_partial(dt, wp, n0);
        __m512 w1 = n1 > 0 ? load_partial(dt, wp + 16 * esz, n1) : _mm512_setzero_ps();
        const __mmask16 k0 = (__mmask16)((1u << n0) - 1), k1 = (__mmask16)((1u << n1) - 1);
        const float *x = X + ng * 32;
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            a0[t] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(k0, x + t * ldx), a0[t]);
            a1[t] = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(k1, x + t * ldx + 16), a1[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) Y[t * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(a0[t], a1[t]));
}

/* Token tiles outside, rows inside: a tile of X stays in L1 while the thread's rows stream. */
T512 INLINE void matmul(const int dt, float *restrict Y, int64_t ldy, const float *restrict X, int64_t ldx,
                        const void *restrict W, size_t row_bytes, int64_t K, int64_t n_tok, int64_t r0, int64_t r1)
{
    for (int64_t t0 = 0; t0 < n_tok; t0 += TILE) {
        const int64_t nt = n_tok - t0 < TILE ? n_tok - t0 : TILE;
        const float *Xt = X + t0 * ldx;
        float *Yt = Y + t0 * ldy;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *w = (const uint8_t *)W + (size_t)r * row_bytes;
            switch (nt) {
            case 8: tile(dt, 8, Yt + r, ldy, Xt, ldx, w, K); break;
            case 7: tile(dt, 7, Yt + r, ldy, Xt, ldx, w, K); break;
            case 6: tile(dt, 6, Yt + r, ldy, Xt, ldx, w, K); break;
            case 5: tile(dt, 5, Yt + r, ldy, Xt, ldx, w, K); break;
            case 4: tile(dt, 4, Yt + r, ldy, Xt, ldx, w, K); break;
            case 3: tile(dt, 3, Yt + r, ldy, Xt, ldx, w, K); break;
            case 2: tile(dt, 2, Yt + r, ldy, Xt, ldx, w, K); break;
            default: tile(dt, 1, Yt + r, ldy, Xt, ldx, w, K); break;
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
#undef MATMUL512

T512 static float dot_f32(const float *a, const float *b, int64_t n)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

T512 static float dot_f16(const float *a, const uint16_t *b, int64_t n)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i))), acc);
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, b + i)), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

T512 static void scale_axpy_f32(float *y, float s, float a, const float *x, int64_t n)
{
    __m512 vs = _mm512_set1_ps(s), va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_mul_ps(_mm512_loadu_ps(y + i), vs)));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 r = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(k, x + i), _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), vs));
        _mm512_mask_storeu_ps(y + i, k, r);
    }
}

T512 static void scale_axpy_f16(float *y, float s, float a, const uint16_t *x, int64_t n)
{
    __m512 vs = _mm512_set1_ps(s), va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 xv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, xv, _mm512_mul_ps(_mm512_loadu_ps(y + i), vs)));
    }
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, x + i));
        _mm512_mask_storeu_ps(y + i, k, _mm512_fmadd_ps(va, xv, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), vs)));
    }
}

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

const pllm_cpu_kernels pllm_cpu_kernels_avx512 = {
    .isa = PLLM_CPU_ISA_AVX512,
    .name = "avx512",
    .matmul = {[PLLM_DTYPE_F32] = mm_f32, [PLLM_DTYPE_F16] = mm_f16, [PLLM_DTYPE_BF16] = mm_bf16,
               [PLLM_DTYPE_Q8_0] = mm_q8_0, [PLLM_DTYPE_Q4_0] = mm_q4_0, [PLLM_DTYPE_Q4_1] = mm_q4_1,
               [PLLM_DTYPE_Q5_0] = mm_q5_0, [PLLM_DTYPE_Q5_1] = mm_q5_1},
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .scale_axpy_f32 = scale_axpy_f32,
    .scale_axpy_f16 = scale_axpy_f16,
    .to_f16 = to_f16,
};

#endif /* __x86_64__ */

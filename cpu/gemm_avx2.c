/*
 * gemm_avx2.c: the integer matmul on AVX2 (no VNNI) over the same packed 16-row panels as the
 * AVX-512 kernel (layout in gemm_pack.c, numerics in gemm.h), and an AVX2 activation quantizer.
 *
 * Mapping: one ymm lane per weight row, so a panel is done as two halves of 8 rows (the 64-byte
 * steps of the panel hold rows 0-7 in their first 32 bytes). The 4-byte dot products of
 * vpdpbusd are vpmaddubsw (unsigned weight x signed activation byte pairs, summed to int16)
 * then vpmaddwd with ones (pairs of int16 summed to int32). vpmaddubsw saturates at +-32767: the
 * 4-, 5- and 6-bit types stay far below (2 x 63 x 127 = 16002), Q8_0's offset values (up to 255)
 * would not, so Q8_0 takes the sign trick instead (|w| times the activation with w's sign, at
 * most 2 x 128 x 127 = 32512) on the signed values and no offset correction. Every integer
 * block dot is exact, so the results are bitwise those of the scalar reference.
 * Tiles of 4 tokens x 8 rows: 4 int32 + 4 float accumulators.
 */
#include "cpu/gemm.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))
#define NT2 4
#define TOKB 64
#define PF2 1024

T2 INLINE __m256i bc4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* acc + the 4-byte dot products of w (unsigned) and x (signed) in each int32 lane */
T2 INLINE __m256i dp(__m256i acc, __m256i w, __m256i x)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
}

T2 INLINE __m256 h8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

T2 INLINE __m256 u8x8(const uint8_t *p) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p))); }

/* it[t] += values (at v, half h of each 64-byte step) dotted with token t's block q[t]. */
T2 INLINE void dots8(const int dt, const int NT, __m256i *it, const uint8_t *v, const int8_t *const *q)
{
    const int nib = dt == PLLM_DTYPE_Q4_0 || dt == PLLM_DTYPE_Q4_1 || dt == PLLM_DTYPE_Q4_K;
    if (nib) {
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        for (int s = 0; s < 4; s++) {
            __m256i w = _mm256_loadu_si256((const __m256i *)(v + 64 * s));
            __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
            for (int t = 0; t < NT; t++) {
                it[t] = dp(it[t], lo, bc4(q[t] + 8 * s));
                it[t] = dp(it[t], hi, bc4(q[t] + 8 * s + 4));
            }
        }
    } else if (dt == PLLM_DTYPE_Q8_0) {
        const __m256i flip = _mm256_set1_epi8((char)0x80);
        for (int s = 0; s < 8; s++) {
            __m256i w = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(v + 64 * s)), flip); /* signed q */
            __m256i aw = _mm256_abs_epi8(w);
            for (int t = 0; t < NT; t++) it[t] = dp(it[t], aw, _mm256_sign_epi8(bc4(q[t] + 4 * s), w));
        }
    } else {
        for (int s = 0; s < 8; s++) {
            __m256i w = _mm256_loadu_si256((const __m256i *)(v + 64 * s));
            for (int t = 0; t < NT; t++) it[t] = dp(it[t], w, bc4(q[t] + 4 * s));
        }
    }
}

/* acc[t] for rows 8h .. 8h+7 of the panel and tokens t0 .. t0+NT-1. */
T2 INLINE void tile8(const int dt, const int NT, __m256 *acc, const uint8_t *p, int h, const pllm_cpu_qact *A, int64_t t0,
                     int64_t K, int pf)
{
    const int nib = dt == PLLM_DTYPE_Q4_0 || dt == PLLM_DTYPE_Q4_1 || dt == PLLM_DTYPE_Q4_K;
    const size_t vals = nib ? 256 : 512;
    const int64_t nbr = A->cap_k / 32, nb = K / 32;
    const int8_t *q[NT2];
    for (int t = 0; t < NT; t++) {
        acc[t] = _mm256_setzero_ps();
        q[t] = A->qs + (t0 + t) * A->cap_k;
    }
    const float *dx = A->dx + t0 * nbr, *xs = A->xs + t0 * nbr;
    const int32_t *sx = A->sx + t0 * nbr, *sx16 = A->sx16 + 2 * t0 * nbr;
    __m256i it[NT2];

    if (dt == PLLM_DTYPE_Q4_K || dt == PLLM_DTYPE_Q5_K || dt == PLLM_DTYPE_Q6_K) {
        const __m256 neg = _mm256_set1_ps(-0.0f);
        for (int64_t sb = 0; sb < nb / 8; sb++) {
            const uint8_t *hdr = p;
            if (pf)
                for (size_t i = 0; i < 320 + 8 * vals; i += 64) _mm_prefetch((const char *)(p + PF2 + i), _MM_HINT_T0);
            const __m256 d = h8(hdr + 16 * h);
            p += 320;
            for (int s = 0; s < 8; s++, p += vals) {
                const int64_t b = 8 * sb + s;
                const int8_t *qb[NT2];
                for (int t = 0; t < NT; t++) qb[t] = q[t] + 32 * b;
                const uint8_t *v = p + 32 * h;
                if (dt == PLLM_DTYPE_Q6_K) {
                    const __m256i sc0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(hdr + 64 + 32 * s + 8 * h)));
                    const __m256i sc1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(hdr + 80 + 32 * s + 8 * h)));
                    for (int t = 0; t < NT; t++) {
                        const int32_t *hs = sx16 + 2 * (t * nbr + b);
                        __m256i a0 = _mm256_set1_epi32(-32 * hs[0]), a1 = _mm256_set1_epi32(-32 * hs[1]);
                        for (int st = 0; st < 4; st++) {
                            a0 = dp(a0, _mm256_loadu_si256((const __m256i *)(v + 64 * st)), bc4(qb[t] + 4 * st));
                            a1 = dp(a1, _mm256_loadu_si256((const __m256i *)(v + 256 + 64 * st)), bc4(qb[t] + 16 + 4 * st));
                        }
                        it[t] = _mm256_add_epi32(_mm256_mullo_epi32(a0, sc0), _mm256_mullo_epi32(a1, sc1));
                    }
                    for (int t = 0; t < NT; t++)
                        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(it[t]), _mm256_mul_ps(d, _mm256_set1_ps(dx[t * nbr + b])),
                                                 acc[t]);
                } else {
                    const __m256 ws = _mm256_mul_ps(d, u8x8(hdr + 64 + 16 * s + 8 * h));
                    const __m256 c = _mm256_xor_ps(_mm256_mul_ps(h8(hdr + 32 + 16 * h), u8x8(hdr + 192 + 16 * s + 8 * h)), neg);
                    for (int t = 0; t < NT; t++) it[t] = _mm256_setzero_si256();
                    dots8(dt, NT, it, v, qb);
                    for (int t = 0; t < NT; t++) {
                        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(it[t]), _mm256_mul_ps(ws, _mm256_set1_ps(dx[t * nbr + b])),
                                                 acc[t]);
                        acc[t] = _mm256_fmadd_ps(c, _mm256_set1_ps(xs[t * nbr + b]), acc[t]);
                    }
                }
            }
        }
        return;
    }

    const int has_m = dt == PLLM_DTYPE_Q4_1 || dt == PLLM_DTYPE_Q5_1;
    /* Q8_0 here dots the signed values (sign trick), so no offset */
    const int ofs = dt == PLLM_DTYPE_Q4_0 ? 8 : dt == PLLM_DTYPE_Q5_0 ? 16 : 0;
    for (int64_t b = 0; b < nb; b++) {
        if (pf)
            for (size_t i = 0; i < (size_t)(has_m ? 64 : 32) + vals; i += 64) _mm_prefetch((const char *)(p + PF2 + i), _MM_HINT_T0);
        const __m256 d = h8(p + 16 * h);
        __m256 m = _mm256_setzero_ps();
        p += 32;
        if (has_m) {
            m = h8(p + 16 * h);
            p += 32;
        }
        const int8_t *qb[NT2];
        for (int t = 0; t < NT; t++) {
            qb[t] = q[t] + 32 * b;
            it[t] = ofs ? _mm256_set1_epi32(-ofs * sx[t * nbr + b]) : _mm256_setzero_si256();
        }
        dots8(dt, NT, it, p + 32 * h, qb);
        p += vals;
        for (int t = 0; t < NT; t++) {
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(it[t]), _mm256_mul_ps(d, _mm256_set1_ps(dx[t * nbr + b])), acc[t]);
            if (has_m) acc[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(xs[t * nbr + b]), acc[t]);
        }
    }
}

/* Store lanes [lo, hi) of v (rows base + lane) */
T2 INLINE void store_rows(float *y, __m256 v, int lo, int hi)
{
    if (lo == 0 && hi == 8) {
        _mm256_storeu_ps(y, v);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    for (int i = lo; i < hi; i++) y[i] = tmp[i];
}

T2 INLINE void qmatmul2(const int dt, float *restrict Y, int64_t ldy, const pllm_cpu_qact *A, const pllm_cpu_qweight *W,
                        int64_t n_tok, int64_t r0, int64_t r1)
{
    __m256 acc[NT2];
    for (int64_t tb = 0; tb < n_tok; tb += TOKB)
        for (int64_t pn = r0 / PLLM_CPU_PANEL; pn * PLLM_CPU_PANEL < r1; pn++) {
            const uint8_t *panel = W->packed + (size_t)pn * W->panel_bytes;
            for (int h = 0; h < 2; h++) {
                const int64_t base = pn * PLLM_CPU_PANEL + 8 * h;
                const int lo = (int)(PLLM_MAX(r0, base) - base), hi = (int)(PLLM_MIN(r1, base + 8) - base);
                if (lo >= hi) continue;
                for (int64_t t0 = tb; t0 < PLLM_MIN(n_tok, tb + TOKB); t0 += NT2) {
                    const int nt = (int)PLLM_MIN((int64_t)NT2, n_tok - t0), pf = t0 == 0 && h == 0;
                    switch (nt) {
                    case 1: tile8(dt, 1, acc, panel, h, A, t0, W->K, pf); break;
                    case 2: tile8(dt, 2, acc, panel, h, A, t0, W->K, pf); break;
                    case 3: tile8(dt, 3, acc, panel, h, A, t0, W->K, pf); break;
                    default: tile8(dt, 4, acc, panel, h, A, t0, W->K, pf); break;
                    }
                    for (int t = 0; t < nt; t++) store_rows(Y + (t0 + t) * ldy + base, acc[t], lo, hi);
                }
            }
        }
}

#define QMM2(NAME, DT)                                                                                                 \
    T2 static void NAME(float *restrict Y, int64_t ldy, const pllm_cpu_qact *A, const pllm_cpu_qweight *W, int64_t n_tok, \
                        int64_t r0, int64_t r1)                                                                        \
    {                                                                                                                  \
        qmatmul2(DT, Y, ldy, A, W, n_tok, r0, r1);                                                                     \
    }
QMM2(q2_q4_0, PLLM_DTYPE_Q4_0)
QMM2(q2_q4_1, PLLM_DTYPE_Q4_1)
QMM2(q2_q5_0, PLLM_DTYPE_Q5_0)
QMM2(q2_q5_1, PLLM_DTYPE_Q5_1)
QMM2(q2_q8_0, PLLM_DTYPE_Q8_0)
QMM2(q2_q4_k, PLLM_DTYPE_Q4_K)
QMM2(q2_q5_k, PLLM_DTYPE_Q5_K)
QMM2(q2_q6_k, PLLM_DTYPE_Q6_K)
#undef QMM2

void pllm_cpu_qmatmul_avx2(float *restrict Y, int64_t ldy, const pllm_cpu_qact *A, const pllm_cpu_qweight *W, int64_t n_tok,
                           int64_t r0, int64_t r1)
{
    if (r0 >= r1 || n_tok <= 0) return;
    switch (W->dtype) {
    case PLLM_DTYPE_Q4_0: q2_q4_0(Y, ldy, A, W, n_tok, r0, r1); return;
    case PLLM_DTYPE_Q4_1: q2_q4_1(Y, ldy, A, W, n_tok, r0, r1); return;
    case PLLM_DTYPE_Q5_0: q2_q5_0(Y, ldy, A, W, n_tok, r0, r1); return;
    case PLLM_DTYPE_Q5_1: q2_q5_1(Y, ldy, A, W, n_tok, r0, r1); return;
    case PLLM_DTYPE_Q8_0: q2_q8_0(Y, ldy, A, W, n_tok, r0, r1); return;
    case PLLM_DTYPE_Q4_K: q2_q4_k(Y, ldy, A, W, n_tok, r0, r1); return;
    case PLLM_DTYPE_Q5_K: q2_q5_k(Y, ldy, A, W, n_tok, r0, r1); return;
    case PLLM_DTYPE_Q6_K: q2_q6_k(Y, ldy, A, W, n_tok, r0, r1); return;
    default: PLLM_ASSERT(!"qmatmul: dtype without an integer path");
    }
}

T2 INLINE int32_t hsum8(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* Same operations as pllm_cpu_quant_ref (max and integer sums are exact in any order). */
T2 void pllm_cpu_quant_avx2(pllm_cpu_qact *a, int64_t t, const float *x, int64_t b0, int64_t b1)
{
    const int64_t nbr = a->cap_k / 32;
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t b = b0; b < b1; b++, x += 32) {
        __m256 v[4], mx = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 8 * i);
            mx = _mm256_max_ps(mx, _mm256_and_ps(v[i], abs_mask));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        const float amax = _mm_cvtss_f32(m4), id = amax > 0 ? 127.0f / amax : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int i = 0; i < 4; i++) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], vid));
        /* int32 -> int8 in element order: packs interleave 128-bit lanes, the permute undoes it */
        __m256i p16 = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
        __m256i p8 = _mm256_packs_epi16(p16, p16b);
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(a->qs + t * a->cap_k + 32 * b), p8);
        const int32_t s0 = hsum8(_mm256_add_epi32(q[0], q[1])), s1 = hsum8(_mm256_add_epi32(q[2], q[3]));
        const float d = amax / 127.0f;
        a->dx[t * nbr + b] = d;
        a->sx[t * nbr + b] = s0 + s1;
        a->sx16[2 * (t * nbr + b)] = s0;
        a->sx16[2 * (t * nbr + b) + 1] = s1;
        a->xs[t * nbr + b] = d * (float)(s0 + s1);
    }
}

#endif

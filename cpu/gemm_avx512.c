/*
 * gemm_avx512.c: the integer matmul on AVX-512 VNNI over packed 16-row panels (layout in
 * gemm_pack.c, numerics in gemm.h), and the AVX-512 activation quantizer.
 *
 * Mapping: one zmm lane per weight row of the panel. For a tile of NT tokens (NT <= GEMM_NT) and one
 * 32-element block: each 64-byte step of the panel (16 rows x 4 values; the 4-bit types unpack
 * two steps from one load) is multiplied with the token's 4 activation bytes broadcast
 * (vpdpbusd: unsigned weights x signed activations), into one int32 accumulator per token; then
 * per token 1 convert, 1 scale product and 1 or 2 FMAs (the canonical chain of gemm.h), for all
 * 16 rows at once. The panel is unpacked once per tile of tokens: a prefill reads each panel
 * from memory once and from L1 for the following tiles.
 * Per (16 rows, token, block): 8 vpdpbusd + 4 float ops for 512 multiply-adds. The lab's rates
 * on Zen 4 (16..512 tokens: Q4_1 64-70% of the vpdpbusd peak, Q4_0 and Q8_0 67-72%) fit the
 * float ops (convert, multiply, FMAs, the Q4_0/Q8_0 offset broadcast) issuing on the same 512-bit
 * slot as vpdpbusd: 8 of 12 (Q4_1) or 8 of 11 slots do integer work. The canonical chain of
 * gemm.h leaves no float op to share between tokens or rows.
 * Registers: NT int32 + NT float accumulators, 2 weight steps, scales.
 * Loops: blocks of 64 tokens > panels of the row range > tiles of 8 tokens > the panel's blocks.
 */
#include "cpu/gemm.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#define TV __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))
#define INLINE static inline __attribute__((always_inline))
/* Tuning knobs; the lab (bench/lab/gemm_lab.c, bench/cpu.cmake) builds variants of this file with
 * other values. Figures: gemm_lab, one thread, Zen 4 (vpdpbusd zmm at one per cycle). */
#ifndef GEMM_NT
#define GEMM_NT 8 /* tokens per tile (at most 16): NT int32 + NT float accumulators stay in registers */
#endif
#ifndef GEMM_TOK_BLOCK
#define GEMM_TOK_BLOCK 64 /* tokens per outer block: their activations stay in L1/L2 across panels (lab: 512-token
                           * prefill 109 -> 156 GOP/s on Q4_1 gate/up) */
#endif
#ifndef GEMM_PF_DIST
#define GEMM_PF_DIST                                                                               \
    4096 /* software prefetch distance in the panel stream (decode streams from DRAM) */
#endif
#ifndef GEMM_PF_HINT
/* into L2, not L1: one MoE layer of bench/gen_moe_models.py (128 Q8_0 experts x 4 rows, weights
 * from DRAM, 1 thread) 3.14 ms with T0 at 1024 bytes, 2.84-2.97 with T1 at 4096; 1, 8 and 16 rows
 * and the cache-resident case within the noise */
#define GEMM_PF_HINT _MM_HINT_T1
#endif
#ifndef GEMM_UNROLL
#define GEMM_UNROLL 1 /* unroll the loops over tokens and weight steps: without it GCC 12 kept it[] and acc[] on the
                       * stack (a load and a store per 2 vpdpbusd; lab Q4_1 16..512 tokens 185 -> 310 GOP/s) */
#endif
#ifndef GEMM_EMBED_BCAST
#define GEMM_EMBED_BCAST 0 /* 1: the activation bytes as a vpdpbusd {1to16} memory operand by inline asm (GCC 12
                            * does not fold the vpbroadcastd itself); lab: no difference beyond the noise (+-5%) */
#endif
#if GEMM_UNROLL
#define UNROLL _Pragma("GCC unroll 16")
#else
#define UNROLL
#endif

TV INLINE __m512i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* acc += w (u8) x the 4 bytes at p (s8) broadcast to every lane. */
TV INLINE __m512i dpb(__m512i acc, __m512i w, const int8_t *p)
{
#if GEMM_EMBED_BCAST
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
    return acc;
#else
    return _mm512_dpbusd_epi32(acc, w, bcast4(p));
#endif
}

TV INLINE __m512 h16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

TV INLINE __m512 u8f(const uint8_t *p) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p))); }

/* it[t] += the block's values (at v) dotted with token t's block (q[t]). */
TV INLINE void block_dots(const int nib, const int NT, __m512i *it, const uint8_t *v, const int8_t *const *q)
{
    if (nib) {
        const __m512i m4 = _mm512_set1_epi8(0x0f);
        UNROLL
        for (int s = 0; s < 4; s++) {
            __m512i w = _mm512_loadu_si512((const void *)(v + 64 * s));
            __m512i lo = _mm512_and_si512(w, m4), hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
            UNROLL
            for (int t = 0; t < NT; t++) {
                it[t] = dpb(it[t], lo, q[t] + 8 * s);
                it[t] = dpb(it[t], hi, q[t] + 8 * s + 4);
            }
        }
    } else {
        UNROLL
        for (int s = 0; s < 8; s++) {
            __m512i w = _mm512_loadu_si512((const void *)(v + 64 * s));
            UNROLL
            for (int t = 0; t < NT; t++) it[t] = dpb(it[t], w, q[t] + 4 * s);
        }
    }
}

TV INLINE void prefetch(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i += 64)
        _mm_prefetch((const char *)(p + GEMM_PF_DIST + i), GEMM_PF_HINT);
}

/* acc[t] (16 rows) for tokens t0 .. t0+NT-1 over the whole panel. */
TV INLINE void panel_tile(const int dt, const int NT, __m512 *acc, const uint8_t *p, const pllm_cpu_qact *A, int64_t t0,
                          int64_t K, int pf)
{
    const int nib = dt == PLLM_DTYPE_Q4_0 || dt == PLLM_DTYPE_Q4_1 || dt == PLLM_DTYPE_Q4_K;
    const size_t vals = nib ? 256 : 512;
    const int64_t nbr = A->cap_k / 32, nb = K / 32;
    const int8_t *q[GEMM_NT];
    UNROLL
    for (int t = 0; t < NT; t++) {
        acc[t] = _mm512_setzero_ps();
        q[t] = A->qs + (t0 + t) * A->cap_k;
    }
    const float *dx = A->dx + t0 * nbr, *xs = A->xs + t0 * nbr;
    const int32_t *sx = A->sx + t0 * nbr, *sx16 = A->sx16 + 2 * t0 * nbr;
    __m512i it[GEMM_NT];

    if (dt == PLLM_DTYPE_Q4_K || dt == PLLM_DTYPE_Q5_K || dt == PLLM_DTYPE_Q6_K) {
        const __m512 neg = _mm512_set1_ps(-0.0f);
        for (int64_t sb = 0; sb < nb / 8; sb++) {
            const uint8_t *hdr = p;
            if (pf) prefetch(p, 320 + 8 * vals);
            const __m512 d = h16(hdr);
            p += 320;
            for (int s = 0; s < 8; s++, p += vals) {
                const int64_t b = 8 * sb + s;
                const int8_t *qb[GEMM_NT];
                UNROLL
                for (int t = 0; t < NT; t++) qb[t] = q[t] + 32 * b;
                if (dt == PLLM_DTYPE_Q6_K) {
                    const __m512i sc0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(hdr + 64 + 32 * s)));
                    const __m512i sc1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(hdr + 80 + 32 * s)));
                    UNROLL
                    for (int t = 0; t < NT; t++) {
                        const int32_t *h = sx16 + 2 * (t * nbr + b);
                        __m512i a0 = _mm512_set1_epi32(-32 * h[0]), a1 = _mm512_set1_epi32(-32 * h[1]);
                        UNROLL
                        for (int st = 0; st < 4; st++) {
                            a0 = dpb(a0, _mm512_loadu_si512((const void *)(p + 64 * st)), qb[t] + 4 * st);
                            a1 = dpb(a1, _mm512_loadu_si512((const void *)(p + 256 + 64 * st)), qb[t] + 16 + 4 * st);
                        }
                        it[t] = _mm512_add_epi32(_mm512_mullo_epi32(a0, sc0), _mm512_mullo_epi32(a1, sc1));
                    }
                    UNROLL
                    for (int t = 0; t < NT; t++)
                        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(it[t]), _mm512_mul_ps(d, _mm512_set1_ps(dx[t * nbr + b])),
                                                 acc[t]);
                } else {
                    const __m512 ws = _mm512_mul_ps(d, u8f(hdr + 64 + 16 * s));
                    const __m512 c = _mm512_xor_ps(_mm512_mul_ps(h16(hdr + 32), u8f(hdr + 192 + 16 * s)), neg);
                    UNROLL
                    for (int t = 0; t < NT; t++) it[t] = _mm512_setzero_si512();
                    block_dots(nib, NT, it, p, qb);
                    UNROLL
                    for (int t = 0; t < NT; t++) {
                        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(it[t]), _mm512_mul_ps(ws, _mm512_set1_ps(dx[t * nbr + b])),
                                                 acc[t]);
                        acc[t] = _mm512_fmadd_ps(c, _mm512_set1_ps(xs[t * nbr + b]), acc[t]);
                    }
                }
            }
        }
        return;
    }

    const int has_m = dt == PLLM_DTYPE_Q4_1 || dt == PLLM_DTYPE_Q5_1;
    const int ofs = dt == PLLM_DTYPE_Q4_0 ? 8 : dt == PLLM_DTYPE_Q5_0 ? 16 : dt == PLLM_DTYPE_Q8_0 ? 128 : 0;
    for (int64_t b = 0; b < nb; b++) {
        if (pf) prefetch(p, (has_m ? 64 : 32) + vals);
        const __m512 d = h16(p);
        __m512 m = _mm512_setzero_ps();
        p += 32;
        if (has_m) {
            m = h16(p);
            p += 32;
        }
        const int8_t *qb[GEMM_NT];
        UNROLL
        for (int t = 0; t < NT; t++) {
            qb[t] = q[t] + 32 * b;
            it[t] = ofs ? _mm512_set1_epi32(-ofs * sx[t * nbr + b]) : _mm512_setzero_si512();
        }
        block_dots(nib, NT, it, p, qb);
        p += vals;
        UNROLL
        for (int t = 0; t < NT; t++) {
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(it[t]), _mm512_mul_ps(d, _mm512_set1_ps(dx[t * nbr + b])), acc[t]);
            if (has_m) acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(xs[t * nbr + b]), acc[t]);
        }
    }
}

TV INLINE void qmatmul(const int dt, float *restrict Y, int64_t ldy, const pllm_cpu_qact *A, const pllm_cpu_qweight *W,
                       int64_t n_tok, int64_t r0, int64_t r1)
{
    __m512 acc[GEMM_NT];
    for (int64_t tb = 0; tb < n_tok; tb += GEMM_TOK_BLOCK)
    for (int64_t pn = r0 / PLLM_CPU_PANEL; pn * PLLM_CPU_PANEL < r1; pn++) {
        const int64_t base = pn * PLLM_CPU_PANEL;
        const int64_t lo = PLLM_MAX(r0, base) - base, hi = PLLM_MIN(r1, base + PLLM_CPU_PANEL) - base;
        const __mmask16 mask = (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
        const uint8_t *panel = W->packed + (size_t)pn * W->panel_bytes;
        for (int64_t t0 = tb; t0 < PLLM_MIN(n_tok, tb + GEMM_TOK_BLOCK); t0 += GEMM_NT) {
            const int nt = (int)PLLM_MIN((int64_t)GEMM_NT, n_tok - t0), pf = t0 == 0;
            switch (nt) {
#define CASE(N)                                                                                                        \
    case N: panel_tile(dt, N > GEMM_NT ? GEMM_NT : N, acc, panel, A, t0, W->K, pf); break;
                CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
#if GEMM_NT > 8
                CASE(9) CASE(10) CASE(11) CASE(12) CASE(13) CASE(14) CASE(15) CASE(16)
#endif
#undef CASE
            }
            for (int t = 0; t < nt; t++) _mm512_mask_storeu_ps(Y + (t0 + t) * ldy + base, mask, acc[t]);
        }
    }
}

#define QMM(NAME, DT)                                                                                                  \
    TV static void NAME(float *restrict Y, int64_t ldy, const pllm_cpu_qact *A, const pllm_cpu_qweight *W, int64_t n_tok, \
                        int64_t r0, int64_t r1)                                                                        \
    {                                                                                                                  \
        qmatmul(DT, Y, ldy, A, W, n_tok, r0, r1);                                                                      \
    }
QMM(qmm_q4_0, PLLM_DTYPE_Q4_0)
QMM(qmm_q4_1, PLLM_DTYPE_Q4_1)
QMM(qmm_q5_0, PLLM_DTYPE_Q5_0)
QMM(qmm_q5_1, PLLM_DTYPE_Q5_1)
QMM(qmm_q8_0, PLLM_DTYPE_Q8_0)
QMM(qmm_q4_k, PLLM_DTYPE_Q4_K)
QMM(qmm_q5_k, PLLM_DTYPE_Q5_K)
QMM(qmm_q6_k, PLLM_DTYPE_Q6_K)
#undef QMM

void pllm_cpu_qmatmul_avx512vnni(float *restrict Y, int64_t ldy, const pllm_cpu_qact *A, const pllm_cpu_qweight *W,
                                 int64_t n_tok, int64_t r0, int64_t r1)
{
    if (r0 >= r1 || n_tok <= 0) return;
    switch (W->dtype) {
    case PLLM_DTYPE_Q4_0: qmm_q4_0(Y, ldy, A, W, n_tok, r0, r1); return;
    case PLLM_DTYPE_Q4_1: qmm_q4_1(Y, ldy, A, W, n_tok, r0, r1); return;
    case PLLM_DTYPE_Q5_0: qmm_q5_0(Y, ldy, A, W, n_tok, r0, r1); return;
    case PLLM_DTYPE_Q5_1: qmm_q5_1(Y, ldy, A, W, n_tok, r0, r1); return;
    case PLLM_DTYPE_Q8_0: qmm_q8_0(Y, ldy, A, W, n_tok, r0, r1); return;
    case PLLM_DTYPE_Q4_K: qmm_q4_k(Y, ldy, A, W, n_tok, r0, r1); return;
    case PLLM_DTYPE_Q5_K: qmm_q5_k(Y, ldy, A, W, n_tok, r0, r1); return;
    case PLLM_DTYPE_Q6_K: qmm_q6_k(Y, ldy, A, W, n_tok, r0, r1); return;
    default: PLLM_ASSERT(!"qmatmul: dtype without an integer path");
    }
}

/* Same operations as pllm_cpu_quant_ref, 32 elements at a time (max and the integer sums are
 * exact, so the order does not matter; x * (127/amax) and rint are the same in every lane). */
TV void pllm_cpu_quant_avx512(pllm_cpu_qact *a, int64_t t, const float *x, int64_t b0, int64_t b1)
{
    const int64_t nbr = a->cap_k / 32;
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int64_t b = b0; b < b1; b++, x += 32) {
        __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(x0, abs_mask), _mm512_and_ps(x1, abs_mask)));
        const float id = amax > 0 ? 127.0f / amax : 0.0f;
        const __m512 vid = _mm512_set1_ps(id);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vid)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vid));
        int8_t *q = a->qs + t * a->cap_k + 32 * b;
        _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(q1));
        const int32_t s0 = _mm512_reduce_add_epi32(q0), s1 = _mm512_reduce_add_epi32(q1);
        const float d = amax / 127.0f;
        a->dx[t * nbr + b] = d;
        a->sx[t * nbr + b] = s0 + s1;
        a->sx16[2 * (t * nbr + b)] = s0;
        a->sx16[2 * (t * nbr + b) + 1] = s1;
        a->xs[t * nbr + b] = d * (float)(s0 + s1);
    }
}

#endif

/*
 * attention_simd.h: the AVX-512 pieces both attention tiles share (cpu/attention.c for F32/F16
 * caches, cpu/attention_i8.c for the int8 cache), internal to those two files: e^x and one
 * chunk's online-softmax step. One definition, so the tiles round alike and a change reaches both.
 */
#pragma once

#include "model/common.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define PLLM_ATTN_T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")))

/* e^x for x <= 0 (lanes below -87 give ~0): x = n ln2 + r, |r| <= ln2 / 2, degree-6 Taylor
 * polynomial of e^r (relative error < 1e-7 on the interval), times 2^n by vscalefps. */
PLLM_ATTN_T512 static inline __m512 pllm_attn_exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r =
        _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);      /* ln2 high part (exact) */
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r); /* ln2 low part */
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* One row's online-softmax step over a chunk of 16 positions: sc holds the chunk's scaled
 * scores (-inf in lanes past the row's position, jm the lanes in it); *mr the running max, *l
 * the 16-lane running sum, acc[0..NS) the row's output accumulators. m' = max(m, max sc),
 * p = e^(sc - m') (zero outside jm), and where the max moved, corr = e^(m - m'), l = l * corr
 * + p, acc *= corr; where it stayed, corr = e^0 is exactly 1 (exp of +0 is 1.0: every term but
 * the polynomial's constants is a product with r = +0), so l + p and acc as they are give the
 * same values without the exponential and the multiplies (attn_lab: 4-6% off a compute-bound
 * tile). Returns p. */
PLLM_ATTN_T512 static inline __attribute__((always_inline)) __m512
pllm_attn_softmax_step(const int NS, __m512 sc, __mmask16 jm, float *mr, __m512 *l, __m512 *acc)
{
    const float m_new = PLLM_MAX(*mr, _mm512_reduce_max_ps(sc));
    const __m512 vm = _mm512_set1_ps(m_new);
    const __m512 p = _mm512_maskz_mov_ps(jm, pllm_attn_exp512(_mm512_sub_ps(sc, vm)));
    if (m_new != *mr) {
        const __m512 corr = pllm_attn_exp512(_mm512_sub_ps(_mm512_set1_ps(*mr), vm));
        *mr = m_new;
        *l = _mm512_fmadd_ps(*l, corr, p);
#pragma GCC unroll 16
        for (int s = 0; s < NS; s++) acc[s] = _mm512_mul_ps(acc[s], corr);
    } else {
        *l = _mm512_add_ps(*l, p);
    }
    return p;
}
#endif

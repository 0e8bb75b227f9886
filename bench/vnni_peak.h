/*
 * vnni_peak.h: the register-resident vpdpbusd zmm loop that bench/ceilings and the kernel lab
 * (bench/lab/gemm_lab) both time for the int8 peak: 12 independent accumulators (enough to hide
 * the instruction's latency on two ports), 64 u8 x s8 products + 64 adds = 128 operations per
 * instruction. x86-64 only; the caller checks AVX-512 VNNI at run time.
 */
#pragma once

#include <immintrin.h>
#include <stdint.h>

/* Runs iters x 12 vpdpbusd zmm; returns the operations done (iters * 12 * 128). */
__attribute__((target("avx512f,avx512vnni"))) static inline double pllm_bench_vnni512_loop(int64_t iters)
{
    const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2), a3 = _mm512_set1_epi32(3),
            a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5), a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7),
            a8 = _mm512_set1_epi32(8), a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11);
    for (int64_t it = 0; it < iters; it++) {
        a0 = _mm512_dpbusd_epi32(a0, x, y);
        a1 = _mm512_dpbusd_epi32(a1, x, y);
        a2 = _mm512_dpbusd_epi32(a2, x, y);
        a3 = _mm512_dpbusd_epi32(a3, x, y);
        a4 = _mm512_dpbusd_epi32(a4, x, y);
        a5 = _mm512_dpbusd_epi32(a5, x, y);
        a6 = _mm512_dpbusd_epi32(a6, x, y);
        a7 = _mm512_dpbusd_epi32(a7, x, y);
        a8 = _mm512_dpbusd_epi32(a8, x, y);
        a9 = _mm512_dpbusd_epi32(a9, x, y);
        a10 = _mm512_dpbusd_epi32(a10, x, y);
        a11 = _mm512_dpbusd_epi32(a11, x, y);
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
        __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                 _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
    volatile int sink = _mm512_reduce_add_epi32(s);
    (void)sink;
    return (double)iters * 12 * 128;
}

/*
 * cpu_gemm_rand.h: random weight rows of every dtype for the CPU kernel tests and the kernel lab
 * (bench/lab). Header-only so both can use it.
 */
#pragma once

#include <stddef.h>
#include <string.h>

#include "model/dtype.h"
#include "tests/testutil.h"

/* A random row of K elements of dtype dt into dst (row_bytes bytes). Scales are random halves
 * in [0.001, 0.05), so dequantized weights are of order 0.1-1. */
static inline void pllm_test_random_row(uint8_t *dst, pllm_dtype dt, int64_t K, uint64_t *rng)
{
    switch (dt) {
    case PLLM_DTYPE_F32:
        for (int64_t k = 0; k < K; k++) {
            float f = pllm_test_randf(rng);
            memcpy(dst + 4 * k, &f, 4);
        }
        return;
    case PLLM_DTYPE_F16:
    case PLLM_DTYPE_BF16:
        for (int64_t k = 0; k < K; k++) {
            uint16_t h = dt == PLLM_DTYPE_F16 ? pllm_fp32_to_fp16(pllm_test_randf(rng)) : pllm_fp32_to_bf16(pllm_test_randf(rng));
            memcpy(dst + 2 * k, &h, 2);
        }
        return;
    case PLLM_DTYPE_Q4_K:
    case PLLM_DTYPE_Q5_K:
    case PLLM_DTYPE_Q6_K: {
        /* random super-blocks; d (and dmin) set so that weights are of order 0.1-1 */
        size_t bb = pllm_dtype_block_bytes(dt);
        for (int64_t b = 0; b < K / PLLM_QK_K; b++) {
            uint8_t *blk = dst + (size_t)b * bb;
            for (size_t i = 0; i < bb; i++) blk[i] = (uint8_t)pllm_test_rand(rng);
            uint16_t d = pllm_fp32_to_fp16((dt == PLLM_DTYPE_Q6_K ? 0.0002f : 0.001f) * (1.5f + pllm_test_randf(rng)));
            uint16_t dmin = pllm_fp32_to_fp16(0.004f * (1.5f + pllm_test_randf(rng)));
            if (dt == PLLM_DTYPE_Q6_K) {
                memcpy(blk + offsetof(pllm_block_q6_k, d), &d, 2);
            } else {
                memcpy(blk, &d, 2);
                memcpy(blk + 2, &dmin, 2);
            }
        }
        return;
    }
    default: {
        size_t bb = pllm_dtype_block_bytes(dt);
        for (int64_t b = 0; b < K / PLLM_QK; b++) {
            uint8_t *blk = dst + (size_t)b * bb;
            for (size_t i = 0; i < bb; i++) blk[i] = (uint8_t)pllm_test_rand(rng);
            uint16_t d = pllm_fp32_to_fp16(0.001f + 0.049f * (pllm_test_randf(rng) + 1) / 2);
            uint16_t m = pllm_fp32_to_fp16(-0.3f * (pllm_test_randf(rng) + 1) / 2);
            memcpy(blk, &d, 2); /* d is the first field of every block type */
            if (dt == PLLM_DTYPE_Q4_1 || dt == PLLM_DTYPE_Q5_1) memcpy(blk + 2, &m, 2);
        }
        return;
    }
    }
}


/*
 * kquant.h: small helpers the SIMD kernel files share for addressing rows in 32-element groups,
 * including the K-quants' 256-element super-blocks (layouts in model/dtype.h).
 */
#pragma once

#include "model/dtype.h"

/* Byte offset of 32-element group g of a row of dtype dt (for K-quants: of the super-block
 * holding it; the group is sub-block g % 8 of it). */
static inline size_t pllm_cpu_group_offset(pllm_dtype dt, int64_t g)
{
    switch (dt) {
    case PLLM_DTYPE_F32: return (size_t)g * 128;
    case PLLM_DTYPE_F16: case PLLM_DTYPE_BF16: return (size_t)g * 64;
    case PLLM_DTYPE_Q4_K: return (size_t)(g >> 3) * sizeof(pllm_block_q4_k);
    case PLLM_DTYPE_Q5_K: return (size_t)(g >> 3) * sizeof(pllm_block_q5_k);
    case PLLM_DTYPE_Q6_K: return (size_t)(g >> 3) * sizeof(pllm_block_q6_k);
    default: return (size_t)g * pllm_dtype_block_bytes(dt); /* the 32-element block types */
    }
}

/* 6-bit scale and min of sub-block s (0..7) of a Q4_K/Q5_K super-block (dtype.h). */
static inline void pllm_cpu_kq_scale_min(const uint8_t *scales, int s, int *sc, int *mn)
{
    if (s < 4) {
        *sc = scales[s] & 63;
        *mn = scales[s + 4] & 63;
    } else {
        *sc = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4;
        *mn = (scales[s + 4] >> 4) | (scales[s] >> 6) << 4;
    }
}

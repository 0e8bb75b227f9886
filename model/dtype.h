/*
 * dtype.h: element types of weights and activations, their block layouts, half/bfloat16
 * conversion, and the scalar reference dequantizer.
 *
 * Quantized types store a row as consecutive blocks of `pllm_dtype_block_elems()` elements,
 * `pllm_dtype_block_bytes()` bytes each (the GGML layouts, byte for byte, so GGUF tensors are
 * used in place). A row's element count must be a multiple of the block size.
 *
 * The scalar functions here are the reference every SIMD kernel is tested against: keep them
 * simple and obviously right.
 */
#pragma once

#include "model/common.h"

typedef enum pllm_dtype {
    PLLM_DTYPE_F32 = 0,
    PLLM_DTYPE_F16,
    PLLM_DTYPE_BF16,
    PLLM_DTYPE_Q8_0,
    PLLM_DTYPE_Q4_0,
    PLLM_DTYPE_Q4_1,
    PLLM_DTYPE_Q5_0,
    PLLM_DTYPE_Q5_1,
    PLLM_DTYPE_Q4_K,
    PLLM_DTYPE_Q5_K,
    PLLM_DTYPE_Q6_K,
    PLLM_DTYPE_COUNT
} pllm_dtype;

#define PLLM_QK 32   /* elements per block of the Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 types */
#define PLLM_QK_K 256 /* elements per super-block of the K-quants */

/* Block layouts (GGML's). d and m are IEEE half floats. */
typedef struct { uint16_t d; int8_t qs[PLLM_QK]; } pllm_block_q8_0;          /* x = q*d */
typedef struct { uint16_t d; uint8_t qs[PLLM_QK / 2]; } pllm_block_q4_0;     /* x = (q-8)*d */
typedef struct { uint16_t d, m; uint8_t qs[PLLM_QK / 2]; } pllm_block_q4_1;  /* x = q*d + m */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[PLLM_QK / 2]; } pllm_block_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[PLLM_QK / 2]; } pllm_block_q5_1;
/* Q4_0/Q4_1/Q5_x nibbles: byte j holds element j (low nibble) and element j+16 (high nibble).
 * Q5_x: bit j of qh (little-endian u32) is bit 4 of element j; x = (q-16)*d or q*d + m. */

/*
 * K-quants: super-blocks of 256 elements.
 *
 * Q4_K, Q5_K: 8 sub-blocks of 32 elements, x = d*sc[s]*q - dmin*mn[s] with 6-bit sub-block
 * scales sc[s] and mins mn[s] packed in scales[12]: for s < 4, sc = scales[s] & 63 and
 * mn = scales[s+4] & 63; for s >= 4, sc = (scales[s+4] & 15) | (scales[s-4] >> 6) << 4 and
 * mn = (scales[s+4] >> 4) | (scales[s] >> 6) << 4. The 4-bit parts are in qs: the 256
 * elements form 4 chunks of 64; chunk c uses qs[32c .. 32c+32), element 64c + l (l < 32) is
 * the low nibble of qs[32c + l] (sub-block 2c), element 64c + 32 + l the high nibble (sub-block
 * 2c+1). Q5_K adds a fifth bit: bit 2c of qh[l] for element 64c + l, bit 2c+1 for 64c + 32 + l.
 *
 * Q6_K: 16 sub-blocks of 16, x = d * scales[s] * (q - 32), q 6-bit, scales signed 8-bit. Two
 * halves of 128 elements; half h uses ql[64h .. 64h+64), qh[32h .. 32h+32), scales[8h ..
 * 8h+8). Within a half, for l < 32: element l = low nibble of ql[l] | (qh[l] & 3) << 4;
 * element 32+l = low nibble of ql[32+l] | (qh[l] >> 2 & 3) << 4; element 64+l = high nibble of
 * ql[l] | (qh[l] >> 4 & 3) << 4; element 96+l = high nibble of ql[32+l] | (qh[l] >> 6) << 4;
 * element e of the half has sub-block scale scales[8h + e/16].
 */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[PLLM_QK_K / 2];
} pllm_block_q4_k; /* 144 bytes */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[PLLM_QK_K / 8];
    uint8_t qs[PLLM_QK_K / 2];
} pllm_block_q5_k; /* 176 bytes */
typedef struct {
    uint8_t ql[PLLM_QK_K / 2];
    uint8_t qh[PLLM_QK_K / 4];
    int8_t scales[PLLM_QK_K / 16];
    uint16_t d;
} pllm_block_q6_k; /* 210 bytes */

const char *pllm_dtype_name(pllm_dtype t);
bool pllm_dtype_is_quantized(pllm_dtype t);
/* Elements per block (1 for float types). */
int pllm_dtype_block_elems(pllm_dtype t);
/* Bytes per block (element size for float types). */
size_t pllm_dtype_block_bytes(pllm_dtype t);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size. */
size_t pllm_dtype_row_bytes(pllm_dtype t, int64_t n);
/* Whether this build can compute with the type (dequantize/matmul). */
bool pllm_dtype_supported(pllm_dtype t);

float pllm_fp16_to_fp32(uint16_t h);
uint16_t pllm_fp32_to_fp16(float f); /* round to nearest even */
float pllm_bf16_to_fp32(uint16_t h);
uint16_t pllm_fp32_to_bf16(float f); /* round to nearest even */

/* Scalar reference: dst[0..n) = the n elements of row src. n is a multiple of the block size. */
void pllm_dequantize_row(float *dst, const void *src, pllm_dtype t, int64_t n);

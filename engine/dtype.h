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

#include "engine/common.h"

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
/* Q4_0/Q4_1/Q5_x nibbles: byte j holds element j (low nibble) and element j+16 (high nibble). */

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

/*
 * kernels.h: the CPU backend's compute kernels, one table per instruction set, chosen at run
 * time so that one binary runs on any x86-64 (scalar C, AVX2+FMA+F16C, AVX-512F/BW/VL, and
 * AVX-512 with VNNI, which adds the integer matmul of cpu/gemm.h).
 *
 * The scalar table is the reference: it dequantizes one weight row with pllm_dequantize_row
 * (model/dtype.c) and takes plain float dot products. Every other table is tested against it
 * (tests/cpu_kernels.c) and must agree to float rounding.
 *
 * Numerics: two paths, chosen per matrix by the backend.
 *   - Integer (the default where the weights are quantized, as in llama.cpp; cpu/gemm.h): the
 *     matmul input is quantized once per token to int8 in blocks of 32 with a float scale,
 *     block dot products are exact integers (AVX-512 VNNI vpdpbusd, or the scalar reference),
 *     and the scales are applied in one fixed float32 order, so every table that has the path
 *     gives bitwise the same result as the scalar reference. Its error against float math is
 *     the int8 rounding of the activations (~1e-2 relative on a logits row of the real model).
 *   - Float32 (float weights F32/F16/BF16 always; every matrix when PLLM_CPU_MATH=f32, the
 *     reference numerics): quantized weight blocks are expanded to float32 in registers (never
 *     into a copy of the matrix) and multiplied with float32 activations, so a quantized model's
 *     result differs from float64 math on the dequantized weights only by float32 rounding and
 *     summation order (tables differ from one another in summation order).
 * The avx512 table (AVX-512 without VNNI) has no integer path and computes everything in
 * float32; avx2 has one (vpmaddubsw), as do scalar (the reference) and avx512vnni.
 *
 * Batch invariance: each output Y[t][r] is computed by the same sequence of operations whatever
 * n_tok, the token's place in the batch, or the row range [r0, r1) are, so results are bitwise
 * identical for any batch composition and any thread count (per table; tables differ in
 * summation order from one another).
 *
 * All kernels are pure: no allocation, no global state; callers pass scratch.
 */
#pragma once

#include "model/common.h"
#include "model/dtype.h"
#include "cpu/gemm.h"

typedef enum pllm_cpu_isa {
    PLLM_CPU_ISA_SCALAR = 0,
    PLLM_CPU_ISA_AVX2,   /* AVX2 + FMA + F16C */
    PLLM_CPU_ISA_AVX512, /* AVX-512 F, BW, VL, DQ (+ F16C) */
    PLLM_CPU_ISA_AVX512VNNI, /* the above + AVX512_VNNI: the integer matmul (cpu/gemm.h) */
    PLLM_CPU_ISA_COUNT
} pllm_cpu_isa;

/*
 * Y[t][r] = sum_k X[t][k] * W[r][k] for t in [0, n_tok), r in [r0, r1).
 *   Y: [n_tok][ldy] float32 (only columns r0..r1-1 are written)
 *   X: [n_tok][ldx] float32 (the first K columns are read)
 *   W: rows of row_bytes bytes, each K elements of the table's dtype (K a multiple of the
 *      dtype's block size)
 *   scratch: at least K floats (the scalar table dequantizes a row there)
 * Tokens are processed in tiles that share each weight row load, so a batch reads the weights
 * once per tile, not once per token.
 */
typedef void (*pllm_cpu_matmul_fn)(float *restrict Y, int64_t ldy, const float *restrict X, int64_t ldx,
                                   const void *restrict W, size_t row_bytes, int64_t K, int64_t n_tok, int64_t r0,
                                   int64_t r1, float *restrict scratch);

typedef struct pllm_cpu_kernels {
    pllm_cpu_isa isa;
    const char *name;
    pllm_cpu_matmul_fn matmul[PLLM_DTYPE_COUNT]; /* NULL where the dtype is not supported */
    /* Attention over one block of n cached positions (K, V: [n][hd], float32 or IEEE half, the
     * KV cache's dtypes):
     *   scores: s[j] = scale * sum_i q[i] * K[j][i]
     *   accum:  out[i] = out[i] * corr + p[0] V[0][i] + p[1] V[1][i] + ... (in j order) */
    void (*attn_scores_f32)(float *s, const float *q, const float *K, int64_t n, int64_t hd, float scale);
    void (*attn_scores_f16)(float *s, const float *q, const uint16_t *K, int64_t n, int64_t hd, float scale);
    void (*attn_accum_f32)(float *out, float corr, const float *p, const float *V, int64_t n, int64_t hd);
    void (*attn_accum_f16)(float *out, float corr, const float *p, const uint16_t *V, int64_t n, int64_t hd);
    /* dst[i] = half(src[i]) rounded to nearest even */
    void (*to_f16)(uint16_t *dst, const float *src, int64_t n);
    /* RMSNorm of one token: out[i] = (x[i] * r) * w[i], r = (float)(1 / sqrt(ss / n + eps)) with
     * ss = sum x[i]^2 in double (tables differ only in the order of that sum). out, x, w: [n];
     * out may equal x. */
    void (*rmsnorm)(float *out, const float *x, const float *w, int64_t n, float eps);
    /* SwiGLU in place: gate[i] = gate[i] / (1 + e^-gate[i]) * up[i]. gate, up: [n]. Every
     * element goes through the same operations whatever n and its index are (the SIMD tables
     * mask the tail instead of finishing in scalar code), so splitting a row between threads
     * does not change a bit. The SIMD tables share one vector e^x (a few ulp; cpu_kernels). */
    void (*swiglu)(float *gate, const float *up, int64_t n);
    /* The integer path (cpu/gemm.h), NULL where the table has none: the activation quantizer,
     * the matmul for every quantized dtype, and whether it reads packed panels. */
    pllm_cpu_quant_fn quant;
    pllm_cpu_qmatmul_fn qmatmul;
    bool qpacked;
} pllm_cpu_kernels;

/* Whether this machine can run the table (CPUID via __builtin_cpu_supports). */
bool pllm_cpu_isa_available(pllm_cpu_isa isa);
/* The table for isa, or NULL when this machine cannot run it. */
const pllm_cpu_kernels *pllm_cpu_kernels_get(pllm_cpu_isa isa);
/* The fastest table this machine runs. */
const pllm_cpu_kernels *pllm_cpu_kernels_best(void);
/* The fastest table this machine runs among those up to cap (pllm_cpu_params.isa_cap). */
const pllm_cpu_kernels *pllm_cpu_kernels_best_upto(pllm_cpu_isa cap);
const char *pllm_cpu_isa_name(pllm_cpu_isa isa);
/* The isa called name ("scalar", "avx2", "avx512", "avx512vnni"), or PLLM_CPU_ISA_COUNT. */
pllm_cpu_isa pllm_cpu_isa_from_name(const char *name);

/* The tables themselves (defined in kernels_<isa>.c; use pllm_cpu_kernels_get). */
extern const pllm_cpu_kernels pllm_cpu_kernels_scalar;
extern const pllm_cpu_kernels pllm_cpu_kernels_avx2;
extern const pllm_cpu_kernels pllm_cpu_kernels_avx512;
extern const pllm_cpu_kernels pllm_cpu_kernels_avx512vnni;

/*
 * kernels_scalar.c: the reference kernels in plain C. Obviously right first: a weight row is
 * dequantized with model/dtype.c's reference dequantizer, then dotted with each token.
 */
#include "cpu/kernels.h"
#include "cpu/ops.h"

/* One row at a time: dequantize it into scratch, then one float dot per token. */
static void matmul_scalar(pllm_dtype dt, float *restrict Y, int64_t ldy, const float *restrict X, int64_t ldx,
                          const void *restrict W, size_t row_bytes, int64_t K, int64_t n_tok, int64_t r0, int64_t r1,
                          float *restrict scratch)
{
    for (int64_t r = r0; r < r1; r++) {
        pllm_dequantize_row(scratch, (const uint8_t *)W + (size_t)r * row_bytes, dt, K);
        for (int64_t t = 0; t < n_tok; t++) {
            const float *x = X + t * ldx;
            float s = 0;
            for (int64_t k = 0; k < K; k++) s += scratch[k] * x[k];
            Y[t * ldy + r] = s;
        }
    }
}

#define SCALAR_MATMUL(NAME, DT)                                                                                    \
    static void NAME(float *restrict Y, int64_t ldy, const float *restrict X, int64_t ldx, const void *restrict W,  \
                     size_t row_bytes, int64_t K, int64_t n_tok, int64_t r0, int64_t r1, float *restrict scratch)   \
    {                                                                                                              \
        matmul_scalar(DT, Y, ldy, X, ldx, W, row_bytes, K, n_tok, r0, r1, scratch);                               \
    }
SCALAR_MATMUL(mm_f32, PLLM_DTYPE_F32)
SCALAR_MATMUL(mm_f16, PLLM_DTYPE_F16)
SCALAR_MATMUL(mm_bf16, PLLM_DTYPE_BF16)
SCALAR_MATMUL(mm_q8_0, PLLM_DTYPE_Q8_0)
SCALAR_MATMUL(mm_q4_0, PLLM_DTYPE_Q4_0)
SCALAR_MATMUL(mm_q4_1, PLLM_DTYPE_Q4_1)
SCALAR_MATMUL(mm_q5_0, PLLM_DTYPE_Q5_0)
SCALAR_MATMUL(mm_q5_1, PLLM_DTYPE_Q5_1)
SCALAR_MATMUL(mm_q4_k, PLLM_DTYPE_Q4_K)
SCALAR_MATMUL(mm_q5_k, PLLM_DTYPE_Q5_K)
SCALAR_MATMUL(mm_q6_k, PLLM_DTYPE_Q6_K)
#undef SCALAR_MATMUL

static void attn_scores_f32(float *s, const float *q, const float *K, int64_t n, int64_t hd, float scale)
{
    for (int64_t j = 0; j < n; j++) {
        float d = 0;
        for (int64_t i = 0; i < hd; i++) d += q[i] * K[j * hd + i];
        s[j] = d * scale;
    }
}

static void attn_scores_f16(float *s, const float *q, const uint16_t *K, int64_t n, int64_t hd, float scale)
{
    for (int64_t j = 0; j < n; j++) {
        float d = 0;
        for (int64_t i = 0; i < hd; i++) d += q[i] * pllm_fp16_to_fp32(K[j * hd + i]);
        s[j] = d * scale;
    }
}

static void attn_accum_f32(float *out, float corr, const float *p, const float *V, int64_t n, int64_t hd)
{
    for (int64_t i = 0; i < hd; i++) {
        float o = out[i] * corr;
        for (int64_t j = 0; j < n; j++) o += p[j] * V[j * hd + i];
        out[i] = o;
    }
}

static void attn_accum_f16(float *out, float corr, const float *p, const uint16_t *V, int64_t n, int64_t hd)
{
    for (int64_t i = 0; i < hd; i++) {
        float o = out[i] * corr;
        for (int64_t j = 0; j < n; j++) o += p[j] * pllm_fp16_to_fp32(V[j * hd + i]);
        out[i] = o;
    }
}

static void to_f16(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = pllm_fp32_to_fp16(src[i]);
}

const pllm_cpu_kernels pllm_cpu_kernels_scalar = {
    .isa = PLLM_CPU_ISA_SCALAR,
    .name = "scalar",
    .matmul = {[PLLM_DTYPE_F32] = mm_f32, [PLLM_DTYPE_F16] = mm_f16, [PLLM_DTYPE_BF16] = mm_bf16,
               [PLLM_DTYPE_Q8_0] = mm_q8_0, [PLLM_DTYPE_Q4_0] = mm_q4_0, [PLLM_DTYPE_Q4_1] = mm_q4_1,
               [PLLM_DTYPE_Q5_0] = mm_q5_0, [PLLM_DTYPE_Q5_1] = mm_q5_1, [PLLM_DTYPE_Q4_K] = mm_q4_k,
               [PLLM_DTYPE_Q5_K] = mm_q5_k, [PLLM_DTYPE_Q6_K] = mm_q6_k},
    .attn_scores_f32 = attn_scores_f32,
    .attn_scores_f16 = attn_scores_f16,
    .attn_accum_f32 = attn_accum_f32,
    .attn_accum_f16 = attn_accum_f16,
    .to_f16 = to_f16,
    .rmsnorm = pllm_cpu_rmsnorm,
    .swiglu = pllm_cpu_swiglu,
    .quant = pllm_cpu_quant_ref,
    .qmatmul = pllm_cpu_qmatmul_ref,
    .qpacked = false,
};

/*
 * rmsnorm.cu: RMSNorm fused with the residual add (see kernels.h for the contract).
 */
#include "cuda/kernel_util.cuh"
#include "cuda/device_impl.h"
#include "cuda/kernels.h"

namespace
{

/*
 * rmsnorm_residual_kernel
 *   out      [n_rows][dim] OutT (F32/F16/BF16)
 *   residual [*][dim] F32; with rows == NULL, row r is updated in place to residual + x when
 *            x != NULL; with rows, read only
 *   x        [*][dim] F32 or NULL
 *   rows     [n_rows] int32 or NULL: output row r normalises input row rows[r] (the gather of
 *            the final norm; the sum residual + x is then not written back)
 *   w        [dim] F32
 * Launch: one block per output row (grid.x = n_rows), blockDim.x = min(1024, dim rounded up to
 *   32); thread t handles columns t, t + blockDim.x, ... in both passes, so the second pass reads
 *   only values the same thread wrote in the first (no barrier needed between them).
 * Shared memory: 128 bytes (block_sum's 32 warp partials), static.
 * Preconditions: dim >= 1; eps >= 0; out does not alias residual or x; rows[] inside residual.
 * Per row: reads 4*dim (residual) + 4*dim (x) + 4*dim (w, L2-resident across rows) bytes,
 *   writes 4*dim (residual) + sizeof(OutT)*dim bytes; ~5*dim FLOPs (add, square-accumulate,
 *   two multiplies). Memory bound: at d=4096, F16 out, 14 bytes/element moved from DRAM for
 *   0.36 FLOP/byte.
 */
template <typename OutT>
__global__ void __launch_bounds__(1024)
    rmsnorm_residual_kernel(OutT *__restrict__ out, float *__restrict__ residual,
                            const float *__restrict__ x, const int32_t *__restrict__ rows,
                            const float *__restrict__ w, int dim, float eps)
{
    const size_t row = rows ? (size_t)rows[blockIdx.x] : blockIdx.x;
    float *res = residual + row * (size_t)dim;
    const float *xr = x ? x + row * (size_t)dim : nullptr;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = res[i];
        if (xr) {
            v += xr[i];
            if (!rows) res[i] = v;
        }
        ss += v * v;
    }
    ss = pllm_cuda::block_sum(ss);
    const float inv = rsqrtf(ss / (float)dim + eps);
    OutT *o = out + (size_t)blockIdx.x * (size_t)dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = rows && xr ? res[i] + xr[i] : res[i];
        o[i] = pllm_cuda::from_float<OutT>(v * inv * w[i]);
    }
}

template <typename OutT>
pllm_status launch(pllm_cuda_dev *dev, OutT *out, float *residual, const float *x,
                   const int32_t *rows, const float *w, int32_t n_rows, int32_t dim, float eps)
{
    unsigned threads = ((unsigned)dim + 31) / 32 * 32;
    if (threads > 1024) threads = 1024;
    PLLM_LAUNCH(rmsnorm_residual_kernel<OutT>, dim3((unsigned)n_rows), dim3(threads), 0,
                pllm_cuda_dev_stream(dev))
    (out, residual, x, rows, w, (int)dim, eps);
    return PLLM_CUDA_LAUNCHED("rmsnorm_residual_kernel");
}

pllm_status dispatch(pllm_cuda_dev *dev, void *out, pllm_dtype out_dtype, float *residual,
                     const float *x, const int32_t *rows, const float *weight, int32_t n_rows,
                     int32_t dim, float eps)
{
    if (n_rows < 0 || dim < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "rmsnorm: bad shape n_rows=%d dim=%d", n_rows, dim);
    if (!(eps >= 0.0f)) return pllm_errorf(PLLM_ERR_INVALID, "rmsnorm: eps %g", (double)eps);
    if (n_rows == 0) return PLLM_OK;
    switch (out_dtype) {
    case PLLM_DTYPE_F32:
        return launch(dev, (float *)out, residual, x, rows, weight, n_rows, dim, eps);
    case PLLM_DTYPE_F16:
        return launch(dev, (__half *)out, residual, x, rows, weight, n_rows, dim, eps);
    case PLLM_DTYPE_BF16:
        return launch(dev, (__nv_bfloat16 *)out, residual, x, rows, weight, n_rows, dim, eps);
    default:
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "rmsnorm: output type %s (need F32, F16 or BF16)",
                           pllm_dtype_name(out_dtype));
    }
}

} /* namespace */

extern "C" pllm_status pllm_cuda_rmsnorm_residual(pllm_cuda_dev *dev, void *out,
                                                  pllm_dtype out_dtype, float *residual,
                                                  const float *x, const float *weight,
                                                  int32_t n_rows, int32_t dim, float eps)
{
    return dispatch(dev, out, out_dtype, residual, x, nullptr, weight, n_rows, dim, eps);
}

extern "C" pllm_status pllm_cuda_rmsnorm_rows(pllm_cuda_dev *dev, void *out, pllm_dtype out_dtype,
                                              const float *residual, const float *x,
                                              const int32_t *rows, const float *weight,
                                              int32_t n_rows, int32_t dim, float eps)
{
    if (n_rows > 0 && !rows) return pllm_errorf(PLLM_ERR_INVALID, "rmsnorm_rows: rows is NULL");
    /* read only with rows: the cast only lets one kernel serve both entry points */
    return dispatch(dev, out, out_dtype, const_cast<float *>(residual), x, rows, weight, n_rows,
                    dim, eps);
}

namespace
{

/*
 * head_rmsnorm_kernel (Qwen3's q_norm / k_norm)
 *   qkv  [n_tokens][ld] F32, in/out: the fused projection's rows; heads 0 .. n_head - 1 (q) and
 *        n_head .. n_head + n_head_kv - 1 (k) are head_dim contiguous columns each, from 0
 *   q_w, k_w  [head_dim] F32
 * Launch: grid (n_tokens, n_head + n_head_kv), one block per (token, head), blockDim.x =
 *   min(1024, head_dim rounded up to 32); thread t takes columns t, t + blockDim.x, ... in both
 *   passes. Shared memory: 256 bytes static (32 double partials).
 * Numerics: the sum of squares in double and r = (float)(1 / sqrt(ss / head_dim + eps)), then
 *   (x * r) * w in float, as the CPU backend's rmsnorm (kernels.h) computes it.
 * Per head: reads and writes 4 head_dim bytes; ~4 head_dim FLOPs. Memory bound, 8 (QD + KVD)
 *   bytes per token (Qwen3-8B: 48 KiB per token).
 */
__global__ void __launch_bounds__(1024)
    head_rmsnorm_kernel(float *__restrict__ qkv, int64_t ld, const float *__restrict__ q_w,
                        const float *__restrict__ k_w, int n_head, int head_dim, float eps)
{
    PLLM_SHARED(double, partial, 32);
    const int h = blockIdx.y;
    float *x = qkv + (int64_t)blockIdx.x * ld + (int64_t)h * head_dim;
    const float *w = h < n_head ? q_w : k_w;
    double ss = 0.0;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) ss += (double)x[i] * (double)x[i];
    ss = pllm_cuda::block_reduce(ss, &partial[0], 0.0, pllm_cuda::warp_sum_op{});
    const float r = (float)(1.0 / sqrt(ss / (double)head_dim + (double)eps));
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x)
        x[i] = __fmul_rn(__fmul_rn(x[i], r), w[i]);
}

} /* namespace */

namespace
{

/*
 * post_norm_add_kernel (Gemma 3's post-attention / post-FFN norms)
 *   residual [n_rows][dim] F32, in/out: residual += RMSNorm(x) * w
 *   x        [n_rows][dim] F32 (a projection's output), read only; w [dim] F32
 * Launch: one block per row, blockDim.x = min(1024, dim rounded up to 32). Shared memory: 256
 *   bytes static. Numerics: as head_rmsnorm_kernel (sum of squares in double, (x * r) * w in
 *   float), then one float add: what the CPU backend computes.
 * Per row: reads 8 dim, writes 4 dim bytes. Memory bound.
 */
__global__ void __launch_bounds__(1024)
    post_norm_add_kernel(float *__restrict__ residual, const float *__restrict__ x,
                         const float *__restrict__ w, int dim, float eps)
{
    PLLM_SHARED(double, partial, 32);
    const float *xr = x + (int64_t)blockIdx.x * dim;
    float *res = residual + (int64_t)blockIdx.x * dim;
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)xr[i] * (double)xr[i];
    ss = pllm_cuda::block_reduce(ss, &partial[0], 0.0, pllm_cuda::warp_sum_op{});
    const float r = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        res[i] = __fadd_rn(res[i], __fmul_rn(__fmul_rn(xr[i], r), w[i]));
}

} /* namespace */

extern "C" pllm_status pllm_cuda_post_norm_add(pllm_cuda_dev *dev, float *residual, const float *x,
                                               const float *weight, int32_t n_rows, int32_t dim,
                                               float eps)
{
    if (n_rows < 0 || dim < 1 || !weight)
        return pllm_errorf(PLLM_ERR_INVALID, "post_norm_add: bad shape n_rows=%d dim=%d", n_rows,
                           dim);
    if (!(eps >= 0.0f)) return pllm_errorf(PLLM_ERR_INVALID, "post_norm_add: eps %g", (double)eps);
    if (n_rows == 0) return PLLM_OK;
    unsigned threads = ((unsigned)dim + 31) / 32 * 32;
    if (threads > 1024) threads = 1024;
    PLLM_LAUNCH(post_norm_add_kernel, dim3((unsigned)n_rows), dim3(threads), 0,
                pllm_cuda_dev_stream(dev))
    (residual, x, weight, (int)dim, eps);
    return PLLM_CUDA_LAUNCHED("post_norm_add_kernel");
}

extern "C" pllm_status pllm_cuda_head_rmsnorm(pllm_cuda_dev *dev, float *qkv, int64_t ld,
                                              const float *q_weight, const float *k_weight,
                                              int32_t n_tokens, int32_t n_head, int32_t n_head_kv,
                                              int32_t head_dim, float eps)
{
    if (n_tokens < 0 || n_head < 1 || n_head_kv < 0 || head_dim < 1 ||
        ld < (int64_t)(n_head + n_head_kv) * head_dim || !q_weight || (n_head_kv && !k_weight))
        return pllm_errorf(PLLM_ERR_INVALID,
                           "head_rmsnorm: bad shape n_tokens=%d n_head=%d n_head_kv=%d "
                           "head_dim=%d ld=%lld (or a NULL weight)",
                           n_tokens, n_head, n_head_kv, head_dim, (long long)ld);
    if (!(eps >= 0.0f)) return pllm_errorf(PLLM_ERR_INVALID, "head_rmsnorm: eps %g", (double)eps);
    if (n_tokens == 0) return PLLM_OK;
    unsigned threads = ((unsigned)head_dim + 31) / 32 * 32;
    if (threads > 1024) threads = 1024;
    PLLM_LAUNCH(head_rmsnorm_kernel, dim3((unsigned)n_tokens, (unsigned)(n_head + n_head_kv)),
                dim3(threads), 0, pllm_cuda_dev_stream(dev))
    (qkv, ld, q_weight, k_weight, (int)n_head, (int)head_dim, eps);
    return PLLM_CUDA_LAUNCHED("head_rmsnorm_kernel");
}

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

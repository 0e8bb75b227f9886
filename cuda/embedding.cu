/*
 * embedding.cu: token embedding gather (see kernels.h for the contract).
 */
#include "cuda/kernel_util.cuh"
#include "cuda/device_impl.h"
#include "cuda/kernels.h"

namespace
{

/*
 * embedding_kernel
 *   out    [n_tokens][dim] F32
 *   table  [n_vocab][dim] T (F32/F16/BF16)
 *   tokens [n_tokens] int32 in [0, n_vocab); an id outside traps (launch failure)
 * Launch: one block per token (grid.x = n_tokens), 256 threads striding over the row; each warp
 *   reads 32 consecutive elements (coalesced).
 * Shared memory: none.
 * Preconditions: dim >= 1; every id in [0, n_vocab) (the kernel traps otherwise).
 * Per token: reads sizeof(T)*dim bytes + 4 (the id), writes 4*dim bytes; no FLOPs beyond the
 *   conversion. Bandwidth bound.
 */
template <typename T>
__global__ void __launch_bounds__(256)
    embedding_kernel(float *__restrict__ out, const T *__restrict__ table,
                     const int32_t *__restrict__ tokens, int dim, int n_vocab, float scale)
{
    const int32_t id = tokens[blockIdx.x];
    if (id < 0 || id >= n_vocab) __trap();
    const T *row = table + (size_t)id * (size_t)dim;
    float *o = out + (size_t)blockIdx.x * (size_t)dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        o[i] = __fmul_rn(pllm_cuda::to_float(row[i]), scale); /* scale 1: exact */
}

template <typename T>
pllm_status launch(pllm_cuda_dev *dev, float *out, const T *table, const int32_t *tokens,
                   int32_t n_tokens, int32_t dim, int32_t n_vocab, float scale)
{
    PLLM_LAUNCH(embedding_kernel<T>, dim3((unsigned)n_tokens), dim3(256), 0,
                pllm_cuda_dev_stream(dev))
    (out, table, tokens, (int)dim, (int)n_vocab, scale);
    return PLLM_CUDA_LAUNCHED("embedding_kernel");
}

/*
 * resolve_tokens_kernel: tokens[i] = src[i] >= 0 ? prev[src[i]] : tokens[i], for i < n
 *   tokens [n] int32 (in place: a packed plan's ids), src [n] int32 (-1: keep), prev [*] int32:
 *   the previous step's sampled ids (its results buffer); src was range-checked on the host.
 * Launch: ceil(n / 256) blocks of 256 threads, one token each. Shared memory: none.
 * Per token: 8-12 bytes. A handful of microseconds at any batch: one launch.
 */
__global__ void __launch_bounds__(256)
    resolve_tokens_kernel(int32_t *__restrict__ tokens, const int32_t *__restrict__ src,
                          const int32_t *__restrict__ prev, int n)
{
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    const int32_t r = src[i];
    if (r >= 0) tokens[i] = prev[r];
}

/*
 * resolve_history_kernel: base[pairs[2i]] = tokens[pairs[2i + 1]], for i < n: a sample's pending
 * last history entry (in the packed id lists, addressed from base) gets its sequence's resolved
 * token. Launch: ceil(n / 256) blocks of 256 threads. Shared memory: none.
 */
__global__ void __launch_bounds__(256)
    resolve_history_kernel(int32_t *__restrict__ base, const int32_t *__restrict__ pairs,
                           const int32_t *__restrict__ tokens, int n)
{
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    base[pairs[2 * i]] = tokens[pairs[2 * i + 1]];
}

} /* namespace */

extern "C" pllm_status pllm_cuda_resolve_history(pllm_cuda_dev *dev, int32_t *base,
                                                 const int32_t *pairs, const int32_t *tokens,
                                                 int32_t n)
{
    if (n < 0) return pllm_errorf(PLLM_ERR_INVALID, "resolve_history: n = %d", n);
    if (n == 0) return PLLM_OK;
    PLLM_LAUNCH(resolve_history_kernel, dim3((unsigned)((n + 255) / 256)), dim3(256), 0,
                pllm_cuda_dev_stream(dev))
    (base, pairs, tokens, (int)n);
    return PLLM_CUDA_LAUNCHED("resolve_history_kernel");
}

extern "C" pllm_status pllm_cuda_resolve_tokens(pllm_cuda_dev *dev, int32_t *tokens,
                                                const int32_t *src, const int32_t *prev, int32_t n)
{
    if (n < 0) return pllm_errorf(PLLM_ERR_INVALID, "resolve_tokens: n = %d", n);
    if (n == 0) return PLLM_OK;
    PLLM_LAUNCH(resolve_tokens_kernel, dim3((unsigned)((n + 255) / 256)), dim3(256), 0,
                pllm_cuda_dev_stream(dev))
    (tokens, src, prev, (int)n);
    return PLLM_CUDA_LAUNCHED("resolve_tokens_kernel");
}

extern "C" pllm_status pllm_cuda_embedding(pllm_cuda_dev *dev, float *out, const void *table,
                                           pllm_dtype table_dtype, const int32_t *tokens,
                                           int32_t n_tokens, int32_t dim, int32_t n_vocab)
{
    return pllm_cuda_embedding_scaled(dev, out, table, table_dtype, tokens, n_tokens, dim, n_vocab,
                                      1.0f);
}

extern "C" pllm_status pllm_cuda_embedding_scaled(pllm_cuda_dev *dev, float *out, const void *table,
                                                  pllm_dtype table_dtype, const int32_t *tokens,
                                                  int32_t n_tokens, int32_t dim, int32_t n_vocab,
                                                  float scale)
{
    if (n_tokens < 0 || dim < 1 || n_vocab < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "embedding: bad shape n_tokens=%d dim=%d n_vocab=%d",
                           n_tokens, dim, n_vocab);
    if (n_tokens == 0) return PLLM_OK;
    switch (table_dtype) {
    case PLLM_DTYPE_F32:
        return launch(dev, out, (const float *)table, tokens, n_tokens, dim, n_vocab, scale);
    case PLLM_DTYPE_F16:
        return launch(dev, out, (const __half *)table, tokens, n_tokens, dim, n_vocab, scale);
    case PLLM_DTYPE_BF16:
        return launch(dev, out, (const __nv_bfloat16 *)table, tokens, n_tokens, dim, n_vocab,
                      scale);
    default:
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "embedding: table type %s (need F32, F16 or BF16)",
                           pllm_dtype_name(table_dtype));
    }
}

/*
 * kernels.h: the C launchers of pllm's CUDA kernels, one per kernel (or kernel family). Each
 * takes the device context first, then outputs, then inputs, then sizes; validates its
 * arguments; queues the kernel on the context's stream; and returns the launch status (errors
 * of the kernel's execution surface at the next pllm_cuda_sync). All pointers are device
 * memory. The comment above each kernel in its .cu file gives the launch mapping, the shared
 * memory and the bytes/FLOPs it moves.
 */
#pragma once

#include "cuda/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * RMSNorm fused with the residual add (cuda/rmsnorm.cu). For each row r < n_rows:
 *     if x: residual[r] += x[r]          (residual is updated in place)
 *     out[r] = residual[r] / sqrt(mean(residual[r]^2) + eps) * weight
 * out: [n_rows][dim] of out_dtype (F32, F16 or BF16); residual, x: [n_rows][dim] F32 (x may be
 * NULL: plain RMSNorm of residual); weight: [dim] F32. out must not alias residual or x.
 */
pllm_status pllm_cuda_rmsnorm_residual(pllm_cuda_dev *dev, void *out, pllm_dtype out_dtype,
                                       float *residual, const float *x, const float *weight,
                                       int32_t n_rows, int32_t dim, float eps);

/*
 * Embedding gather (cuda/embedding.cu): out[t] = table[tokens[t]] as F32, for t < n_tokens.
 * out: [n_tokens][dim] F32; table: [n_vocab][dim] of table_dtype (F32, F16 or BF16); tokens:
 * [n_tokens] int32, each in [0, n_vocab) (an id outside traps: the device reports a launch
 * failure, as the engine validates ids before).
 */
pllm_status pllm_cuda_embedding(pllm_cuda_dev *dev, float *out, const void *table,
                                pllm_dtype table_dtype, const int32_t *tokens, int32_t n_tokens,
                                int32_t dim, int32_t n_vocab);

#ifdef __cplusplus
}
#endif

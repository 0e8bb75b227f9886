/*
 * kernel_util.cuh: small device helpers shared by pllm's kernels: float conversion of the
 * element types, and warp/block sum reductions. Included by .cu files after cuda/launch.h.
 */
#pragma once

#include "cuda/launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace pllm_cuda
{

__device__ __forceinline__ float to_float(float v)
{
    return v;
}
__device__ __forceinline__ float to_float(__half v)
{
    return __half2float(v);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ __half from_float<__half>(float v)
{
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

/* Sum over the 32 lanes of a full warp; every lane gets the same value (the butterfly adds the
 * same pairs in every lane). */
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the block; every thread gets the same value. Preconditions: blockDim.x is a
 * multiple of 32 (all warps full), blockDim.y == blockDim.z == 1, every thread calls it. One
 * __syncthreads; 128 bytes of shared memory. Not reentrant without a barrier between calls
 * (the partials would be overwritten while slower warps still read them). */
__device__ __forceinline__ float block_sum(float v)
{
    PLLM_SHARED(float, partial, 32);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < n_warps ? partial[lane] : 0.0f;
    return warp_sum(v);
}

} /* namespace pllm_cuda */

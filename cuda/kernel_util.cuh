/*
 * kernel_util.cuh: small device helpers shared by pllm's kernels: float conversion of the
 * element types, warp/block reductions, and the order-preserving float key used by the
 * selections of the sampler. Included by .cu files after cuda/launch.h.
 */
#pragma once

#include "cuda/launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

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

/* Two consecutive elements p[0], p[1] as floats, in one load (p must be aligned to 2
 * elements: an even element index in a cudaMalloc buffer). */
__device__ __forceinline__ float2 load2(const float *p)
{
    return *reinterpret_cast<const float2 *>(p);
}
__device__ __forceinline__ float2 load2(const __half *p)
{
    const __half2 h = *reinterpret_cast<const __half2 *>(p);
    return make_float2(__low2float(h), __high2float(h));
}

/*
 * The fp8 KV cache (model/backend.h, PLLM_KV_DTYPE_FP8): E4M3 bytes with one half scale per
 * row (block, head, position). fp8_e4m3 is the element type the kernels are templated on.
 */
struct fp8_e4m3 {
    uint8_t bits;
};

template <typename T> constexpr bool kIsFp8 = false;
template <> constexpr bool kIsFp8<fp8_e4m3> = true;

/* A row's scale from its amax: amax / 448 rounded up to a half (so |x / s| <= 448 up to the
 * division's rounding, which saturation absorbs); 0 for an all-zero row. */
__device__ __forceinline__ __half fp8_row_scale(float amax)
{
    return __float2half_ru(fminf(__fdiv_rn(amax, 448.0f), 65504.0f));
}

/* x / s in E4M3 as CUDA's __nv_fp8_e4m3 converts (round to nearest even, saturating at the
 * largest finite value +-448); 0 when s is 0. */
__device__ __forceinline__ uint8_t fp8_quantize(float x, float s)
{
    return s > 0.0f ? (uint8_t)__nv_cvt_float_to_fp8(__fdiv_rn(x, s), __NV_SATFINITE, __NV_E4M3)
                    : (uint8_t)0;
}

/* The two E4M3 bytes of a 16-bit word (low byte first) as floats, each divided by 256 -- exact
 * for every finite code: E4M3's sign, exponent and mantissa bits placed at an fp16's top bits
 * (s eeee mmm -> s 0eeee mmm0000000) are the same number with the exponent bias 15 instead of
 * 7, subnormals included. The caller folds the 256 into the row's scale. (The NaN codes 0x7f
 * and 0xff read as 480 / 256; saturating stores never write them.) */
__device__ __forceinline__ float2 fp8x2_div256(unsigned w)
{
    const unsigned h =
        ((w & 0x7fu) << 7) | ((w & 0x80u) << 8) | ((w & 0x7f00u) << 15) | ((w & 0x8000u) << 16);
    __half_raw lo, hi;
    lo.x = (unsigned short)(h & 0xffffu), hi.x = (unsigned short)(h >> 16);
    return make_float2(__half2float(__half(lo)), __half2float(__half(hi)));
}

/* The scale a kernel multiplies fp8x2_div256's values by: s * 256 (exact). */
__device__ __forceinline__ float fp8_scale_x256(__half s)
{
    return __half2float(s) * 256.0f;
}

/* Two consecutive fp8 elements, divided by 256 (see fp8x2_div256). */
__device__ __forceinline__ float2 load2(const fp8_e4m3 *p)
{
    return fp8x2_div256(*reinterpret_cast<const unsigned short *>(p));
}

/* Sum over the 32 lanes of a full warp; every lane gets the same value (the butterfly adds the
 * same pairs in every lane). */
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ int warp_sum(int v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ unsigned long long warp_max(unsigned long long v)
{
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}
__device__ __forceinline__ int warp_min(int v)
{
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ int warp_max(int v)
{
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
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

/*
 * Reentrant block reductions: every thread gets the result. Preconditions as block_sum; scratch
 * is 32 elements of shared memory the caller owns. Two barriers (the first keeps a previous
 * call's readers from seeing this call's partials), so calls may follow each other directly.
 */
template <typename T, typename Warp>
__device__ __forceinline__ T block_reduce(T v, T *scratch, T identity, Warp warp_op)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_op(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : identity;
    return warp_op(v);
}
struct warp_sum_op {
    template <typename T> __device__ __forceinline__ T operator()(T v) const { return warp_sum(v); }
};
struct warp_max_op {
    template <typename T> __device__ __forceinline__ T operator()(T v) const { return warp_max(v); }
};
struct warp_min_op {
    template <typename T> __device__ __forceinline__ T operator()(T v) const { return warp_min(v); }
};

/* A key that orders floats as their values (larger float, larger key), with -0 == +0. NaN
 * must not occur. */
__device__ __forceinline__ uint32_t float_key(float v)
{
    uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

} /* namespace pllm_cuda */

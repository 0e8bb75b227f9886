/*
 * fi_compat.cuh: what FlashInfer 0.7.2's headers need from CCCL and the CUDA 13.0 toolkit lacks.
 * Included before any FlashInfer header by the wrapper (cuda/flashinfer/fi_attention.cu).
 *
 * cuda::fast_mod_div<uint32_t> (fastdiv.cuh's uint_fastdiv wraps it) arrived in a CCCL newer
 * than 3.0 (CUDA 13.0 ships CCCL 3.0.1). Where CCCL lacks it, this is the Granlund-Montgomery
 * round-up division: s = ceil(log2 d), m = floor(2^32 (2^s - d) / d) + 1, and
 * n / d = (mulhi(n, m) + n) >> s, exact for every 32-bit n (the add is done in 64 bits).
 */
#pragma once

#include <cuda/std/version>
#include <stdint.h>

#if CCCL_VERSION < 3001000
namespace cuda
{
template <typename T> struct fast_mod_div;
template <> struct fast_mod_div<uint32_t> {
    uint32_t d_, m_, s_;
    __host__ __device__ fast_mod_div(uint32_t d) : d_(d), m_(0), s_(0)
    {
        while (s_ < 32 && (1ull << s_) < d) s_++;
        m_ = (uint32_t)(((1ull << 32) * ((1ull << s_) - d)) / d + 1);
    }
};
__host__ __device__ __forceinline__ uint32_t operator/(uint32_t n, const fast_mod_div<uint32_t> &d)
{
#if defined(__CUDA_ARCH__)
    const uint32_t t = __umulhi(n, d.m_);
#else
    const uint32_t t = (uint32_t)(((uint64_t)n * d.m_) >> 32);
#endif
    return (uint32_t)(((uint64_t)t + n) >> d.s_);
}
} /* namespace cuda */
#endif

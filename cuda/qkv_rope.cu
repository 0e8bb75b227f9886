/*
 * qkv_rope.cu: QKV bias + rotary embedding + the store of K and V into their paged slots, in one
 * pass over the fused QKV projection's output (see kernels.h for the contract).
 */
#include "cuda/kernel_util.cuh"
#include "cuda/device_impl.h"
#include "cuda/kernels.h"
#include "model/backend.h"

namespace
{

constexpr int kThreads = 128;
constexpr int kHeadsPerBlock = 4; /* heads of the row (q, k or v) one block takes */
static_assert(kHeadsPerBlock == kThreads / 32, "fp8 stores: one warp per head");

/*
 * qkv_rope_kernel
 *   qkv       [n_tokens][ld] F32, in/out: q | k | v of each token (QD | KVD | KVD columns)
 *   bias      [QD + 2 KVD] F32 or NULL
 *   positions [n_tokens] int32, slots [n_tokens] int32 (< 0: no store)
 *   inv_freq  [rope_dim / 2] double (inv_freq_long: the same, for positions >= long_from)
 *   k_cache, v_cache  [n_blocks][n_head_kv][block_size][head_dim] KV (F32 or F16)
 * Launch: grid (n_tokens, ceil((n_head + 2 n_head_kv) / 4)), 128 threads: block (t, y) takes
 *   heads 4y .. 4y + 3 of token t's row (q heads, then k heads, then v heads). A block with a q
 *   or k head first computes the token's cos/sin table (rope_dim / 2 double sincos, one per
 *   thread, into shared memory: once per block instead of once per rotated pair and head), then
 *   its threads take the heads' pairs (pair i < rope_dim/2 rotated, the rest of a q/k head and
 *   every v pair only get their bias): consecutive threads take consecutive pairs of one head,
 *   so q/k/v reads and writes and the cache stores are coalesced (a head's slot in the cache is
 *   head_dim contiguous elements).
 * Shared memory: 8 (rope_dim / 2) bytes dynamic (the cos and sin table, F32).
 * Preconditions: head_dim even; rope_dim even and <= head_dim; ld >= QD + 2 KVD; slots of one
 *   launch distinct (or < 0); a slot's block inside the caches.
 * Per token: reads 4 (QD + 2 KVD) bytes (+ the bias, L2-resident), writes 4 (QD + 2 KVD) back
 *   and 2 KVD sizeof(KV) bytes to the caches; rope_dim / 2 double sincos per q/k block and 6
 *   FLOPs per rotated pair. Bandwidth bound: for Llama-3-8B (QD 4096, KVD 1024) 24 KiB read and
 *   28 KiB written per token with an F16 cache; a 64-token decode step moves 3.3 MB (1.1 us at
 *   3.0 TB/s) in 768 blocks (the previous launch: 64 blocks, each thread 20 dependent double
 *   sincos: 14 us measured).
 * Numerics: the rotation is computed as the CPU backend does it (float multiplies and adds,
 *   never contracted into FMAs, on cos/sin rounded from double), so q and k match it bitwise.
 * fp8 KV (KV = fp8_e4m3, backend.h): a row's scale needs the amax of its whole head, so the
 *   pairs are written back to qkv only; after a barrier warp w quantizes head 4y + w (when it is
 *   a k or v head) from there: warp amax, the half scale (kernel_util.cuh fp8_row_scale), then
 *   each element x / s in E4M3 (one byte per lane, coalesced), and lane 0 stores the scale.
 */
template <typename KV>
__global__ void __launch_bounds__(kThreads)
    qkv_rope_kernel(pllm_cuda_qkv_rope_args a, KV *__restrict__ kc, KV *__restrict__ vc)
{
    PLLM_DYNAMIC_SHARED(float, tab);
    const int t = blockIdx.x;
    const int hd = a.head_dim, half = hd / 2, n_rot = a.rope_dim / 2;
    const int n_qk = a.n_head + a.n_head_kv, n_heads = n_qk + a.n_head_kv;
    const int h_begin = blockIdx.y * kHeadsPerBlock, h_end = min(n_heads, h_begin + kHeadsPerBlock);
    float *row = a.qkv + (int64_t)t * a.ld;
    const float *b = a.bias;
    const int slot = a.slots[t];
    const int64_t cache_row =
        slot >= 0
            ? ((int64_t)(slot / a.block_size) * a.n_head_kv * a.block_size + slot % a.block_size) *
                  hd
            : 0;
    const int64_t head_stride = (int64_t)a.block_size * hd; /* between kv heads of one block */
    float *cos_s = tab, *sin_s = tab + n_rot;
    if (h_begin < n_qk) { /* uniform over the block */
        const double pos = (double)a.positions[t];
        const double *inv =
            a.inv_freq_long && a.positions[t] >= a.long_from ? a.inv_freq_long : a.inv_freq;
        for (int i = threadIdx.x; i < n_rot; i += blockDim.x) {
            double s, c;
            sincos(pos * inv[i], &s, &c);
            cos_s[i] = (float)(c * a.mscale), sin_s[i] = (float)(s * a.mscale);
        }
        __syncthreads();
    }

    const int n_pairs = (h_end - h_begin) * half;
    for (int w = threadIdx.x; w < n_pairs; w += blockDim.x) {
        const int head = h_begin + w / half, i = w % half;
        const bool rot = head < n_qk && i < n_rot;
        int e0, e1; /* the pair's two elements within the head */
        if (rot) {
            e0 = a.rope_neox ? i : 2 * i;
            e1 = a.rope_neox ? i + n_rot : 2 * i + 1;
        } else if (head < n_qk) {
            e0 = a.rope_dim + 2 * (i - n_rot);
            e1 = e0 + 1;
        } else {
            e0 = 2 * i, e1 = 2 * i + 1;
        }
        const int c0 = head * hd + e0, c1 = head * hd + e1; /* columns in the row */
        float x0 = row[c0], x1 = row[c1];
        if (b) x0 += b[c0], x1 += b[c1];
        if (rot) {
            const float cf = cos_s[i], sf = sin_s[i];
            const float y0 = __fsub_rn(__fmul_rn(x0, cf), __fmul_rn(x1, sf));
            const float y1 = __fadd_rn(__fmul_rn(x0, sf), __fmul_rn(x1, cf));
            x0 = y0, x1 = y1;
        }
        row[c0] = x0, row[c1] = x1;
        if constexpr (pllm_cuda::kIsFp8<KV>) {
            continue; /* quantized below, once the head's amax is known */
        } else if (head >= a.n_head && slot >= 0) {
            KV *dst = head < n_qk ? kc + cache_row + (int64_t)(head - a.n_head) * head_stride
                                  : vc + cache_row + (int64_t)(head - n_qk) * head_stride;
            dst[e0] = pllm_cuda::from_float<KV>(x0);
            dst[e1] = pllm_cuda::from_float<KV>(x1);
        }
    }
    if constexpr (pllm_cuda::kIsFp8<KV>) {
        __syncthreads(); /* every pair of the block's heads is in row */
        const int lane = threadIdx.x & 31, head = h_begin + (threadIdx.x >> 5);
        if (slot >= 0 && head >= a.n_head && head < h_end) { /* uniform over the warp */
            const float *x = row + (int64_t)head * hd;
            float amax = 0.0f;
            for (int e = lane; e < hd; e += 32) amax = fmaxf(amax, fabsf(x[e]));
            amax = pllm_cuda::warp_max(amax);
            const __half s = pllm_cuda::fp8_row_scale(amax);
            const float sf = __half2float(s);
            const bool is_k = head < n_qk;
            const int kh = is_k ? head - a.n_head : head - n_qk;
            uint8_t *dst =
                reinterpret_cast<uint8_t *>(is_k ? kc : vc) + cache_row + (int64_t)kh * head_stride;
            for (int e = lane; e < hd; e += 32) dst[e] = pllm_cuda::fp8_quantize(x[e], sf);
            if (lane == 0)
                static_cast<__half *>(
                    is_k ? a.k_scales : a.v_scales)[cache_row / hd + (int64_t)kh * a.block_size] =
                    s;
        }
    }
}

template <typename KV> pllm_status launch(pllm_cuda_dev *dev, const pllm_cuda_qkv_rope_args *a)
{
    const int n_heads = a->n_head + 2 * a->n_head_kv;
    const size_t smem = (size_t)a->rope_dim * sizeof(float); /* cos and sin, rope_dim / 2 each */
    PLLM_LAUNCH(
        qkv_rope_kernel<KV>,
        dim3((unsigned)a->n_tokens, (unsigned)((n_heads + kHeadsPerBlock - 1) / kHeadsPerBlock)),
        dim3(kThreads), smem, pllm_cuda_dev_stream(dev))
    (*a, (KV *)a->k_cache, (KV *)a->v_cache);
    return PLLM_CUDA_LAUNCHED("qkv_rope_kernel");
}

} /* namespace */

extern "C" pllm_status pllm_cuda_qkv_rope(pllm_cuda_dev *dev, const pllm_cuda_qkv_rope_args *a)
{
    if (a->n_tokens < 0 || a->n_head < 1 || a->n_head_kv < 1 || a->head_dim < 2 ||
        a->head_dim % 2 || a->rope_dim < 0 || a->rope_dim > a->head_dim || a->rope_dim % 2 ||
        a->block_size < 1 || a->ld < (int64_t)(a->n_head + 2 * a->n_head_kv) * a->head_dim ||
        !(a->mscale > 0))
        return pllm_errorf(PLLM_ERR_INVALID,
                           "qkv_rope: bad shape n_tokens=%d n_head=%d n_head_kv=%d head_dim=%d "
                           "rope_dim=%d block_size=%d ld=%lld mscale=%g",
                           a->n_tokens, a->n_head, a->n_head_kv, a->head_dim, a->rope_dim,
                           a->block_size, (long long)a->ld, a->mscale);
    if (a->n_tokens == 0) return PLLM_OK;
    if (a->kv_dtype == PLLM_DTYPE_F32) return launch<float>(dev, a);
    if (a->kv_dtype == PLLM_DTYPE_F16) return launch<__half>(dev, a);
    if (a->kv_dtype == PLLM_KV_DTYPE_FP8) { /* not a pllm_dtype value (backend.h) */
        if (!a->k_scales || !a->v_scales)
            return pllm_errorf(PLLM_ERR_INVALID, "qkv_rope: an fp8 KV cache needs its scales");
        return launch<pllm_cuda::fp8_e4m3>(dev, a);
    }
    return pllm_errorf(PLLM_ERR_UNSUPPORTED, "qkv_rope: KV type %s (need F32, F16 or FP8)",
                       pllm_kv_dtype_name(a->kv_dtype));
}

namespace
{
/* fp8_roundtrip_kernel: codes[i] = E4M3(x[i] / scale) and values[i] = its value read back, by the
 * very helpers the KV store and the attention kernels use (kernel_util.cuh). */
__global__ void __launch_bounds__(kThreads)
    fp8_roundtrip_kernel(const float *__restrict__ x, float scale, uint8_t *__restrict__ codes,
                         float *__restrict__ values, int n)
{
    const int i = blockIdx.x * kThreads + threadIdx.x;
    if (i >= n) return;
    const uint8_t c = pllm_cuda::fp8_quantize(x[i], scale);
    codes[i] = c;
    values[i] = pllm_cuda::fp8x2_div256(c).x * 256.0f;
}
} /* namespace */

extern "C" pllm_status pllm_cuda_fp8_roundtrip(pllm_cuda_dev *dev, const float *x, float scale,
                                               uint8_t *codes, float *values, int32_t n)
{
    if (n < 0) return pllm_errorf(PLLM_ERR_INVALID, "fp8_roundtrip: n=%d", n);
    if (n == 0) return PLLM_OK;
    PLLM_LAUNCH(fp8_roundtrip_kernel, dim3((unsigned)((n + kThreads - 1) / kThreads)),
                dim3(kThreads), 0, pllm_cuda_dev_stream(dev))
    (x, scale, codes, values, (int)n);
    return PLLM_CUDA_LAUNCHED("fp8_roundtrip_kernel");
}

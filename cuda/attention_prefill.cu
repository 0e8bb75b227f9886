/*
 * attention_prefill.cu: paged attention for tiles of consecutive query tokens of one sequence
 * (prefill chunks, over any cached prefix), tiled over keys with an online softmax (see
 * kernels.h for the contract).
 */
#include "cuda/kernel_util.cuh"
#include "cuda/device_impl.h"
#include "cuda/kernels.h"
#include "model/backend.h"

#include <math.h>

namespace
{

constexpr int kThreads = 128; /* 4 warps */
constexpr int kRows = 16;     /* query rows (token, head) per block: 4 per warp */
constexpr int kRowsPerWarp = kRows / (kThreads / 32);
constexpr int kKeys = 32;                               /* keys per tile: one per lane */
constexpr int kDims = PLLM_CUDA_ATTN_MAX_HEAD_DIM / 32; /* output dims per lane */

/* Query heads of one kv head a block takes (the rest go to more blocks), and query tokens. */
__host__ __device__ inline int heads_per_block(int G)
{
    return G < kRows ? G : kRows;
}

inline size_t prefill_smem_bytes(int hd)
{
    return sizeof(float) * ((size_t)kRows * hd         /* q_s, pre-scaled */
                            + (size_t)kKeys * (hd + 1) /* k_s, rows padded */
                            + (size_t)kKeys * hd       /* v_s */
                            + (size_t)kRows * kKeys);  /* p_s: each warp's probabilities */
}

template <typename KV> struct kv_ptrs {
    const KV *k, *v;
    const __half *ks, *vs; /* fp8: the per-row scales (backend.h); else NULL */
};

/*
 * attn_prefill_kernel
 *   tiles  [n_tiles]: first query row, query count, first position, block table offset
 *   q      [*][q_stride] F32; caches [n_blocks][n_head_kv][block_size][head_dim] KV
 *   out    [*][n_head * head_dim] OutT
 * Launch: grid (n_tiles, n_head_kv * ceil(G / HC)), HC = min(G, 16) heads per block, tiles of
 *   QT = 16 / HC tokens (pllm_cuda_attn_prefill_tile_tokens); 128 threads. The block's 16 query
 *   rows are (token i, head g) = (r / HC, r % HC); warp w owns rows 4w .. 4w + 3 and keeps
 *   their running max, sum and output (lane l: dims l, l + 32, ...) in registers. Keys are
 *   visited 32 at a time from position 0 to the tile's last query position:
 *     1. K and V of the 32 positions are copied to shared memory, two elements per load (all
 *        warps share them: every query row of the tile, so all G heads and QT tokens, reuses
 *        one load);
 *     2. lane j scores key j against the warp's 4 rows (causal mask: key position <= the
 *        row's query position);
 *     3. per row: warp max, online-softmax rescale, probabilities to shared memory;
 *     4. per row and lane-owned dim: acc += sum_j p_j V[j][d].
 *   Two barriers per key tile (load, then reuse).
 * Preconditions: head_dim even and <= 256; n_head a multiple of n_head_kv; n_q <= the tile size
 *   of pllm_cuda_attn_prefill_tile_tokens; the block table covers [0, pos0 + n_q); the keys of
 *   the tile's own tokens are already stored (qkv_rope runs first).
 * Shared memory (dynamic): 4 (16 hd + 32 (hd + 1) + 32 hd + 512) bytes: 26 KiB at hd = 128,
 *   51 KiB at hd = 256 (opt-in).
 * Per tile of QT tokens x HC heads over n keys: reads 2 n hd sizeof(KV) bytes of cache (shared
 *   by QT HC query rows) and 4 QT HC n hd FLOPs; for a prompt of P tokens per (kv head) that is
 *   P / QT passes over the cache (FLOP/byte = 2 QT HC / sizeof(KV) = 16 for F16, compute bound
 *   on CUDA cores: no tensor cores, see docs/cuda.md).
 */
template <typename KV, typename OutT>
__global__ void __launch_bounds__(kThreads)
    attn_prefill_kernel(pllm_cuda_attn_args a, kv_ptrs<KV> kv, const pllm_cuda_attn_tile *tiles)
{
    PLLM_DYNAMIC_SHARED(float, smem);
    const int hd = a.head_dim, G = a.n_head / a.n_head_kv;
    const int HC = heads_per_block(G), n_chunks = (G + HC - 1) / HC;
    const int kvh = blockIdx.y / n_chunks, g0 = (blockIdx.y % n_chunks) * HC;
    const int gc = min(HC, G - g0); /* heads in this chunk */
    const pllm_cuda_attn_tile tile = tiles[blockIdx.x];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    const auto q_s = smem;
    const auto k_s = q_s + kRows * hd;
    const auto v_s = k_s + kKeys * (hd + 1);
    const auto p_s = v_s + kKeys * hd;

    /* row r: token r / HC of the tile, head g0 + r % HC; valid when both exist */
    for (int e = tid; e < kRows * hd; e += kThreads) {
        const int r = e / hd, d = e % hd, i = r / HC, g = r % HC;
        float v = 0.0f;
        if (i < tile.n_q && g < gc)
            v = a.q[(int64_t)(tile.tok0 + i) * a.q_stride + (int64_t)(kvh * G + g0 + g) * hd + d] *
                a.scale;
        q_s[e] = v;
    }

    int qpos[kRowsPerWarp];
    bool valid[kRowsPerWarp];
    float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kDims];
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; k++) {
        const int r = warp * kRowsPerWarp + k;
        valid[k] = r / HC < tile.n_q && r % HC < gc;
        qpos[k] = tile.pos0 + r / HC;
        m[k] = -INFINITY, l[k] = 0.0f;
#pragma unroll
        for (int e = 0; e < kDims; e++) acc[k][e] = 0.0f;
    }

    const int32_t *bt = a.block_tables + tile.bt;
    const int bs = a.block_size;
    const int n_keys = tile.pos0 + tile.n_q; /* the last query attends to [0, n_keys) */
    /* sliding window: the tile's first query sees keys from pos0 + 1 - window on, later ones
     * fewer (masked below) */
    const int k_begin = a.window > 0 ? max(0, tile.pos0 + 1 - a.window) : 0;
    for (int k0 = k_begin; k0 < n_keys; k0 += kKeys) {
        const int n = min(kKeys, n_keys - k0);
        __syncthreads(); /* the previous tile is consumed (and q_s is written) */
        for (int e = tid; e < n * hd / 2; e += kThreads) { /* pairs: one 4/8-byte load each */
            const int j = 2 * e / hd, d = 2 * e % hd, p = k0 + j;
            const int64_t r = ((int64_t)bt[p / bs] * a.n_head_kv + kvh) * bs + p % bs,
                          off = r * hd + d;
            float2 k2 = pllm_cuda::load2(kv.k + off), v2 = pllm_cuda::load2(kv.v + off);
            if constexpr (pllm_cuda::kIsFp8<KV>) { /* dequantized into shared memory */
                const float sk = pllm_cuda::fp8_scale_x256(kv.ks[r]),
                            sv = pllm_cuda::fp8_scale_x256(kv.vs[r]);
                k2.x *= sk, k2.y *= sk, v2.x *= sv, v2.y *= sv;
            }
            k_s[j * (hd + 1) + d] = k2.x, k_s[j * (hd + 1) + d + 1] = k2.y;
            v_s[j * hd + d] = v2.x, v_s[j * hd + d + 1] = v2.y;
        }
        __syncthreads();

        /* scores: lane = key */
        float s[kRowsPerWarp];
#pragma unroll
        for (int k = 0; k < kRowsPerWarp; k++) s[k] = 0.0f;
        if (lane < n)
            for (int d = 0; d < hd; d++) {
                const float kd = k_s[lane * (hd + 1) + d];
#pragma unroll
                for (int k = 0; k < kRowsPerWarp; k++)
                    s[k] += q_s[(warp * kRowsPerWarp + k) * hd + d] * kd;
            }
#pragma unroll
        for (int k = 0; k < kRowsPerWarp; k++) {
            const bool ok = valid[k] && lane < n && k0 + lane <= qpos[k] &&
                            (a.window <= 0 || k0 + lane > qpos[k] - a.window);
            const float sk = ok ? s[k] : -INFINITY;
            const float m_new = fmaxf(m[k], pllm_cuda::warp_max(sk));
            const bool none = m_new == -INFINITY;
            const float corr = none ? 1.0f : expf(m[k] - m_new);
            const float p = none ? 0.0f : expf(sk - m_new);
            l[k] = l[k] * corr + pllm_cuda::warp_sum(p);
            m[k] = m_new;
            p_s[(warp * kRowsPerWarp + k) * kKeys + lane] = p;
#pragma unroll
            for (int e = 0; e < kDims; e++) acc[k][e] *= corr;
        }
        __syncwarp();
        for (int j = 0; j < n; j++) {
#pragma unroll
            for (int e = 0; e < kDims; e++) {
                const int d = lane + 32 * e;
                if (d >= hd) break;
                const float v = v_s[j * hd + d];
#pragma unroll
                for (int k = 0; k < kRowsPerWarp; k++)
                    acc[k][e] += p_s[(warp * kRowsPerWarp + k) * kKeys + j] * v;
            }
        }
    }

#pragma unroll
    for (int k = 0; k < kRowsPerWarp; k++) {
        if (!valid[k]) continue;
        const int r = warp * kRowsPerWarp + k, i = r / HC, g = r % HC;
        OutT *o = static_cast<OutT *>(a.out) + (int64_t)(tile.tok0 + i) * a.n_head * hd +
                  (int64_t)(kvh * G + g0 + g) * hd;
        const float inv = l[k] > 0.0f ? 1.0f / l[k] : 0.0f;
#pragma unroll
        for (int e = 0; e < kDims; e++) {
            const int d = lane + 32 * e;
            if (d >= hd) break;
            o[d] = pllm_cuda::from_float<OutT>(acc[k][e] * inv);
        }
    }
}

template <typename KV, typename OutT>
pllm_status launch(pllm_cuda_dev *dev, const pllm_cuda_attn_args *a,
                   const pllm_cuda_attn_tile *tiles, int32_t n_tiles)
{
    const int G = a->n_head / a->n_head_kv, HC = heads_per_block(G);
    const int n_chunks = (G + HC - 1) / HC;
    const size_t smem = prefill_smem_bytes(a->head_dim);
    if (smem > 48 * 1024) {
        cudaError_t e =
            cudaFuncSetAttribute((const void *)attn_prefill_kernel<KV, OutT>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return PLLM_CUDA_LAUNCHED("cudaFuncSetAttribute(attn_prefill_kernel)");
    }
    kv_ptrs<KV> kv = {(const KV *)a->k_cache, (const KV *)a->v_cache, (const __half *)a->k_scales,
                      (const __half *)a->v_scales};
    PLLM_LAUNCH((attn_prefill_kernel<KV, OutT>),
                dim3((unsigned)n_tiles, (unsigned)(a->n_head_kv * n_chunks)), dim3(kThreads), smem,
                pllm_cuda_dev_stream(dev))
    (*a, kv, tiles);
    return PLLM_CUDA_LAUNCHED("attn_prefill_kernel");
}

template <typename KV>
pllm_status launch_out(pllm_cuda_dev *dev, const pllm_cuda_attn_args *a,
                       const pllm_cuda_attn_tile *tiles, int32_t n_tiles)
{
    switch (a->out_dtype) {
    case PLLM_DTYPE_F32:
        return launch<KV, float>(dev, a, tiles, n_tiles);
    case PLLM_DTYPE_F16:
        return launch<KV, __half>(dev, a, tiles, n_tiles);
    case PLLM_DTYPE_BF16:
        return launch<KV, __nv_bfloat16>(dev, a, tiles, n_tiles);
    default:
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "attn_prefill: output type %s",
                           pllm_dtype_name(a->out_dtype));
    }
}

} /* namespace */

extern "C" pllm_status pllm_cuda_attn_check(const pllm_cuda_attn_args *a, const char *who);

extern "C" int32_t pllm_cuda_attn_prefill_tile_tokens(int32_t n_head, int32_t n_head_kv)
{
    const int G = n_head_kv > 0 ? n_head / n_head_kv : 1;
    return kRows / heads_per_block(G < 1 ? 1 : G);
}

extern "C" pllm_status pllm_cuda_attn_prefill(pllm_cuda_dev *dev, const pllm_cuda_attn_args *a,
                                              const pllm_cuda_attn_tile *tiles, int32_t n_tiles)
{
    PLLM_TRY(pllm_cuda_attn_check(a, "attn_prefill"));
    if (n_tiles < 0) return pllm_errorf(PLLM_ERR_INVALID, "attn_prefill: n_tiles=%d", n_tiles);
    if (n_tiles == 0) return PLLM_OK;
    if (a->kv_dtype == PLLM_DTYPE_F16) return launch_out<__half>(dev, a, tiles, n_tiles);
    if (a->kv_dtype == PLLM_KV_DTYPE_FP8)
        return launch_out<pllm_cuda::fp8_e4m3>(dev, a, tiles, n_tiles);
    return launch_out<float>(dev, a, tiles, n_tiles);
}

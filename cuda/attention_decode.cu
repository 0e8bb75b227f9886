/*
 * attention_decode.cu: paged attention for single-token queries (decode), optionally split over
 * the context with a combining kernel (see kernels.h for the contract).
 */
#include "cuda/kernel_util.cuh"
#include "cuda/device_impl.h"
#include "cuda/kernels.h"

#include <math.h>

namespace
{

constexpr int kThreads = 128; /* 4 warps */
constexpr int kHeads = 8;     /* query heads of one kv head handled by one block */
constexpr int kTile = 64;     /* positions per tile */
constexpr int kSlots = 2;     /* output dims per thread: 2 tid, 2 tid + 1 (head_dim <= 256) */

/* Dynamic shared memory of a decode block, in floats (plus the tile's row offsets). */
__host__ __device__ inline size_t decode_smem_floats(int hd)
{
    return (size_t)kHeads * hd        /* q_s: the block's queries, pre-scaled */
           + (size_t)kTile * (hd + 1) /* k_s: one tile of keys, rows padded (no bank conflicts) */
           + (size_t)kHeads * kTile   /* s_s: scores, then probabilities */
           + 3 * kHeads;              /* m, l, corr per head */
}
inline size_t decode_smem_bytes(int hd)
{
    return decode_smem_floats(hd) * sizeof(float);
}

template <typename KV> struct kv_ptrs {
    const KV *k, *v;
};

/*
 * attn_decode_kernel
 *   items  [n_items]: query token row, context length, block table offset
 *   q      [*][q_stride] F32 (head h at column h * head_dim)
 *   caches [n_blocks][n_head_kv][block_size][head_dim] KV (F32 or F16)
 *   out    [*][n_head * head_dim] OutT (n_splits == 1)
 *   part   (n_splits > 1) ml [n_items][n_head][n_splits][2] F32 then acc
 *          [n_items][n_head][n_splits][head_dim] F32: the split's running max, sum and
 *          unnormalised output
 * Launch: grid (n_items, n_head_kv * ceil(G / 8), n_splits), G = n_head / n_head_kv; 128
 *   threads. A block handles up to 8 query heads of one kv head (GQA: they share every K and V
 *   load) over positions [z * split_len, min(n_ctx, (z + 1) * split_len)) (n_splits == 1:
 *   [0, n_ctx)), 64 at a time:
 *     1. the tile's keys are copied to shared memory two elements per load (coalesced: a
 *        block's slab of one head is contiguous), with each position's row offset;
 *     2. scores: thread i takes key i % 64 and heads i / 64, i / 64 + 2, ... (q from shared
 *        memory, broadcast; K rows padded to head_dim + 1 floats, so conflict-free);
 *     3. softmax: warp w takes heads w, w + 4: tile max, rescale of the running sum (online
 *        softmax), probabilities back into shared memory;
 *     4. V: thread i owns output dims 2i, 2i + 1 for all the block's heads, in registers, and
 *        reads them from each V row straight from global memory in one load (a warp reads
 *        128 contiguous bytes of an F16 row).
 *   Four barriers per tile.
 * Preconditions: head_dim even and <= 256; n_head a multiple of n_head_kv; split_len a multiple
 *   of 64 with n_splits * split_len >= every n_ctx when n_splits > 1; the block table covers
 *   [0, n_ctx); part
 *   holds pllm_cuda_attn_decode_workspace(n_items, n_head, head_dim, n_splits) bytes.
 * Shared memory: 4 (8 hd + 64 (hd + 1) + 8 * 64 + 24) bytes dynamic (39 KiB at hd = 128,
 *   76 KiB at hd = 256: opt-in) + 512 bytes static (row offsets).
 * Per (query, kv head): reads 2 n_ctx hd sizeof(KV) bytes of cache once for all G heads, plus
 *   4 G hd of queries; 4 G n_ctx hd FLOPs. Memory bound (G / sizeof(KV) FLOP/byte): Llama-3-8B
 *   (G 4, hd 128, F16) at n_ctx 1024 reads 512 KiB per (query, kv head).
 */
template <typename KV, typename OutT>
__global__ void __launch_bounds__(kThreads, 4) /* ptxas' own choice on sm_90a (48 registers)
                                                  spills; 4 blocks/SM is what shared memory
                                                  allows at hd = 128 anyway */
    attn_decode_kernel(pllm_cuda_attn_args a, kv_ptrs<KV> kv, const pllm_cuda_attn_item *items,
                       int n_splits, int split_len, float *part)
{
    PLLM_DYNAMIC_SHARED(float, smem);
    const int hd = a.head_dim, G = a.n_head / a.n_head_kv;
    const int n_chunks = (G + kHeads - 1) / kHeads;
    const int kvh = blockIdx.y / n_chunks, g0 = (blockIdx.y % n_chunks) * kHeads;
    const int gc = min(kHeads, G - g0);
    const int h0 = kvh * G + g0; /* first query head of the block */
    const pllm_cuda_attn_item it = items[blockIdx.x];
    const int z = blockIdx.z;
    /* one split: the whole context, whatever split_len (choose_split keeps n_splits at 1 for
     * large batches of long contexts, with split_len its base) */
    const int p_begin = z * split_len, p_end = n_splits == 1 ? it.n_ctx : min(it.n_ctx, p_begin + split_len);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    PLLM_SHARED(int64_t, row_s, kTile); /* element offset of each position's K/V row */
    const auto q_s = smem;
    const auto k_s = q_s + kHeads * hd;
    const auto s_s = k_s + kTile * (hd + 1);
    const auto m_s = s_s + kHeads * kTile, l_s = m_s + kHeads, c_s = l_s + kHeads;

    for (int e = tid; e < gc * hd; e += kThreads)
        q_s[e] = a.q[(int64_t)it.tok * a.q_stride + (int64_t)h0 * hd + e] * a.scale;
    if (tid < kHeads) m_s[tid] = -INFINITY, l_s[tid] = 0.0f, c_s[tid] = 1.0f;

    float acc[kSlots][kHeads];
#pragma unroll
    for (int s = 0; s < kSlots; s++)
#pragma unroll
        for (int g = 0; g < kHeads; g++) acc[s][g] = 0.0f;

    const int32_t *bt = a.block_tables + it.bt;
    const int bs = a.block_size;
    for (int t0 = p_begin; t0 < p_end; t0 += kTile) {
        const int n = min(kTile, p_end - t0);
        __syncthreads(); /* the previous tile is consumed (and q_s, m_s are written) */
        if (tid < n) {
            const int p = t0 + tid;
            row_s[tid] = (((int64_t)bt[p / bs] * a.n_head_kv + kvh) * bs + p % bs) * hd;
        }
        __syncthreads();
        for (int e = tid; e < n * hd / 2; e += kThreads) { /* pairs: one 4/8-byte load each */
            const int j = 2 * e / hd, d = 2 * e % hd;
            const float2 k2 = pllm_cuda::load2(kv.k + row_s[j] + d);
            k_s[j * (hd + 1) + d] = k2.x, k_s[j * (hd + 1) + d + 1] = k2.y;
        }
        __syncthreads();
        {
            const int j = tid % kTile, gh = tid / kTile;
            float dot[kHeads / 2];
#pragma unroll
            for (int k = 0; k < kHeads / 2; k++) dot[k] = 0.0f;
            if (j < n)
                for (int d = 0; d < hd; d++) {
                    const float kd = k_s[j * (hd + 1) + d];
#pragma unroll
                    for (int k = 0; k < kHeads / 2; k++)
                        if (gh + 2 * k < gc) dot[k] += q_s[(gh + 2 * k) * hd + d] * kd;
                }
#pragma unroll
            for (int k = 0; k < kHeads / 2; k++)
                if (gh + 2 * k < gc) s_s[(gh + 2 * k) * kTile + j] = j < n ? dot[k] : -INFINITY;
        }
        __syncthreads();
        for (int g = warp; g < gc; g += kThreads / 32) {
            const auto s = s_s + g * kTile;
            float mx = fmaxf(s[lane], s[lane + 32]);
            mx = pllm_cuda::warp_max(mx);
            const float m_old = m_s[g], m_new = fmaxf(m_old, mx);
            const bool none = m_new == -INFINITY; /* nothing finite yet: keep everything at 0 */
            const float corr = none ? 1.0f : expf(m_old - m_new);
            const float p0 = none ? 0.0f : expf(s[lane] - m_new);
            const float p1 = none ? 0.0f : expf(s[lane + 32] - m_new);
            s[lane] = p0, s[lane + 32] = p1;
            const float sum = pllm_cuda::warp_sum(p0 + p1);
            if (lane == 0) l_s[g] = l_s[g] * corr + sum, m_s[g] = m_new, c_s[g] = corr;
        }
        __syncthreads();
        if (2 * tid < hd) { /* this thread's dims 2 tid, 2 tid + 1: one load per V row */
#pragma unroll
            for (int g = 0; g < kHeads; g++)
                if (g < gc) acc[0][g] *= c_s[g], acc[1][g] *= c_s[g];
            for (int j = 0; j < n; j++) {
                const float2 v = pllm_cuda::load2(kv.v + row_s[j] + 2 * tid);
#pragma unroll
                for (int g = 0; g < kHeads; g++)
                    if (g < gc) {
                        const float p = s_s[g * kTile + j];
                        acc[0][g] += p * v.x, acc[1][g] += p * v.y;
                    }
            }
        }
    }
    __syncthreads(); /* m_s / l_s final (also when the range was empty) */

    if (n_splits == 1) {
        OutT *o = static_cast<OutT *>(a.out) + (int64_t)it.tok * a.n_head * hd + (int64_t)h0 * hd;
#pragma unroll
        for (int s = 0; s < kSlots; s++) {
            const int d = 2 * tid + s;
            if (d >= hd) continue;
#pragma unroll
            for (int g = 0; g < kHeads; g++)
                if (g < gc) {
                    const float l = l_s[g];
                    o[g * hd + d] = pllm_cuda::from_float<OutT>(l > 0.0f ? acc[s][g] / l : 0.0f);
                }
        }
        return;
    }
    /* partial results of this split */
    const int64_t base = ((int64_t)blockIdx.x * a.n_head + h0) * n_splits + z; /* (item, h0, z) */
    float *ml = part, *pacc = part + (int64_t)gridDim.x * a.n_head * n_splits * 2;
    if (tid < gc) {
        ml[(base + (int64_t)tid * n_splits) * 2] = m_s[tid];
        ml[(base + (int64_t)tid * n_splits) * 2 + 1] = l_s[tid];
    }
#pragma unroll
    for (int s = 0; s < kSlots; s++) {
        const int d = 2 * tid + s;
        if (d >= hd) continue;
#pragma unroll
        for (int g = 0; g < kHeads; g++)
            if (g < gc) pacc[(base + (int64_t)g * n_splits) * hd + d] = acc[s][g];
    }
}

/*
 * attn_combine_kernel: out[item][h] = sum_z e^(m_z - M) acc_z / sum_z e^(m_z - M) l_z, M = max m_z.
 * Launch: grid (n_items, n_head), 128 threads; thread i owns dims i, i + 128.
 * Shared memory: none. Per (item, head): reads n_splits (hd + 2) floats, writes hd elements.
 */
template <typename OutT>
__global__ void __launch_bounds__(kThreads)
    attn_combine_kernel(pllm_cuda_attn_args a, const pllm_cuda_attn_item *items, int n_splits,
                        const float *part)
{
    const int hd = a.head_dim, h = blockIdx.y;
    const pllm_cuda_attn_item it = items[blockIdx.x];
    const int64_t base = ((int64_t)blockIdx.x * a.n_head + h) * n_splits;
    const float *ml = part + base * 2;
    const float *pacc = part + (int64_t)gridDim.x * a.n_head * n_splits * 2 + base * hd;
    float m = -INFINITY;
    for (int z = 0; z < n_splits; z++) m = fmaxf(m, ml[2 * z]);
    float l = 0.0f;
    for (int z = 0; z < n_splits; z++)
        if (ml[2 * z] > -INFINITY) l += expf(ml[2 * z] - m) * ml[2 * z + 1];
    OutT *o = static_cast<OutT *>(a.out) + (int64_t)it.tok * a.n_head * hd + (int64_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += kThreads) {
        float v = 0.0f;
        for (int z = 0; z < n_splits; z++)
            if (ml[2 * z] > -INFINITY) v += expf(ml[2 * z] - m) * pacc[(int64_t)z * hd + d];
        o[d] = pllm_cuda::from_float<OutT>(l > 0.0f ? v / l : 0.0f);
    }
}

template <typename KV, typename OutT>
pllm_status launch(pllm_cuda_dev *dev, const pllm_cuda_attn_args *a,
                   const pllm_cuda_attn_item *items, int32_t n_items, int32_t n_splits,
                   int32_t split_len, float *part)
{
    const int G = a->n_head / a->n_head_kv, n_chunks = (G + kHeads - 1) / kHeads;
    const size_t smem = decode_smem_bytes(a->head_dim);
    if (smem > 48 * 1024) {
        cudaError_t e =
            cudaFuncSetAttribute((const void *)attn_decode_kernel<KV, OutT>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return PLLM_CUDA_LAUNCHED("cudaFuncSetAttribute(attn_decode_kernel)");
    }
    kv_ptrs<KV> kv = {(const KV *)a->k_cache, (const KV *)a->v_cache};
    PLLM_LAUNCH((attn_decode_kernel<KV, OutT>),
                dim3((unsigned)n_items, (unsigned)(a->n_head_kv * n_chunks), (unsigned)n_splits),
                dim3(kThreads), smem, pllm_cuda_dev_stream(dev))
    (*a, kv, items, (int)n_splits, (int)split_len, part);
    pllm_status st = PLLM_CUDA_LAUNCHED("attn_decode_kernel");
    if (st != PLLM_OK || n_splits == 1) return st;
    PLLM_LAUNCH(attn_combine_kernel<OutT>, dim3((unsigned)n_items, (unsigned)a->n_head),
                dim3(kThreads), 0, pllm_cuda_dev_stream(dev))
    (*a, items, (int)n_splits, (const float *)part);
    return PLLM_CUDA_LAUNCHED("attn_combine_kernel");
}

template <typename KV>
pllm_status launch_out(pllm_cuda_dev *dev, const pllm_cuda_attn_args *a,
                       const pllm_cuda_attn_item *items, int32_t n_items, int32_t n_splits,
                       int32_t split_len, float *part)
{
    switch (a->out_dtype) {
    case PLLM_DTYPE_F32:
        return launch<KV, float>(dev, a, items, n_items, n_splits, split_len, part);
    case PLLM_DTYPE_F16:
        return launch<KV, __half>(dev, a, items, n_items, n_splits, split_len, part);
    case PLLM_DTYPE_BF16:
        return launch<KV, __nv_bfloat16>(dev, a, items, n_items, n_splits, split_len, part);
    default:
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "attn_decode: output type %s",
                           pllm_dtype_name(a->out_dtype));
    }
}

} /* namespace */

extern "C" size_t pllm_cuda_attn_decode_workspace(int32_t n_items, int32_t n_head, int32_t head_dim,
                                                  int32_t n_splits)
{
    if (n_splits <= 1 || n_items <= 0) return 0;
    return (size_t)n_items * (size_t)n_head * (size_t)n_splits * (size_t)(head_dim + 2) *
           sizeof(float);
}

/* Shape checks shared by both attention launchers. */
extern "C" pllm_status pllm_cuda_attn_check(const pllm_cuda_attn_args *a, const char *who);
extern "C" pllm_status pllm_cuda_attn_check(const pllm_cuda_attn_args *a, const char *who)
{
    if (a->n_head < 1 || a->n_head_kv < 1 || a->n_head % a->n_head_kv || a->head_dim < 2 ||
        a->head_dim % 2 || a->head_dim > PLLM_CUDA_ATTN_MAX_HEAD_DIM || a->block_size < 1 ||
        a->q_stride < (int64_t)a->n_head * a->head_dim)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "%s: bad shape n_head=%d n_head_kv=%d head_dim=%d (even, <= %d) "
                           "block_size=%d q_stride=%lld",
                           who, a->n_head, a->n_head_kv, a->head_dim, PLLM_CUDA_ATTN_MAX_HEAD_DIM,
                           a->block_size, (long long)a->q_stride);
    if (a->kv_dtype != PLLM_DTYPE_F32 && a->kv_dtype != PLLM_DTYPE_F16)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: KV type %s (need F32 or F16)", who,
                           pllm_dtype_name(a->kv_dtype));
    return PLLM_OK;
}

extern "C" pllm_status pllm_cuda_attn_decode(pllm_cuda_dev *dev, const pllm_cuda_attn_args *a,
                                             const pllm_cuda_attn_item *items, int32_t n_items,
                                             int32_t n_splits, int32_t split_len, void *workspace)
{
    PLLM_TRY(pllm_cuda_attn_check(a, "attn_decode"));
    if (n_items < 0 || n_splits < 1 || split_len < kTile || split_len % kTile)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "attn_decode: n_items=%d n_splits=%d split_len=%d (a multiple of %d)",
                           n_items, n_splits, split_len, kTile);
    if (n_splits > 1 && !workspace)
        return pllm_errorf(PLLM_ERR_INVALID, "attn_decode: %d splits need a workspace", n_splits);
    if (n_items == 0) return PLLM_OK;
    float *part = static_cast<float *>(workspace);
    if (a->kv_dtype == PLLM_DTYPE_F16)
        return launch_out<__half>(dev, a, items, n_items, n_splits, split_len, part);
    return launch_out<float>(dev, a, items, n_items, n_splits, split_len, part);
}

/*
 * attention_decode.cu: paged attention for single-token queries (decode), optionally split over
 * the context with a combining kernel (see kernels.h for the contract).
 */
#include "cuda/kernel_util.cuh"
#include "cuda/device_impl.h"
#include "cuda/kernels.h"
#include "model/backend.h"

#include <math.h>

namespace
{

constexpr int kThreads = 128; /* 4 warps */
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeads =
    4; /* query heads of one kv head handled by one block (more: more blocks) */
constexpr int kSplitQuantum = 64; /* split_len is a multiple of this */

/* The register holding one vector of VE elements of KV (4, 8 or 16 bytes: one load). */
template <int BYTES> struct vbits;
template <> struct vbits<2> {
    using T = unsigned short;
};
template <> struct vbits<4> {
    using T = unsigned;
};
template <> struct vbits<8> {
    using T = uint2;
};
template <> struct vbits<16> {
    using T = uint4;
};
template <typename KV, int VE> using vraw = typename vbits<VE *(int)sizeof(KV)>::T;

/* The VE elements of a loaded vector as floats. */
template <int VE> __device__ __forceinline__ void to_floats(float (&f)[VE], const void *r, float)
{
    const float *e = reinterpret_cast<const float *>(r);
#pragma unroll
    for (int i = 0; i < VE; i++) f[i] = e[i];
}
template <int VE> __device__ __forceinline__ void to_floats(float (&f)[VE], const void *r, __half)
{
    const __half2 *h = reinterpret_cast<const __half2 *>(r);
#pragma unroll
    for (int i = 0; i < VE / 2; i++) {
        const float2 x = __half22float2(h[i]);
        f[2 * i] = x.x, f[2 * i + 1] = x.y;
    }
}

/* fp8 (E4M3): the values divided by 256 (kernel_util.cuh fp8x2_div256; the row's scale times 256
 * is applied to the score and to the probability). */
template <int VE>
__device__ __forceinline__ void to_floats(float (&f)[VE], const void *r, pllm_cuda::fp8_e4m3)
{
    const unsigned short *w = reinterpret_cast<const unsigned short *>(r);
#pragma unroll
    for (int i = 0; i < VE / 2; i++) {
        const float2 x = pllm_cuda::fp8x2_div256(w[i]);
        f[2 * i] = x.x, f[2 * i + 1] = x.y;
    }
}

/* Largest vector chunks a lane owns in one row (head_dim <= 256). */
template <int VE> __host__ __device__ constexpr int max_chunks()
{
    return PLLM_CUDA_ATTN_MAX_HEAD_DIM / VE / 32 > 0 ? PLLM_CUDA_ATTN_MAX_HEAD_DIM / VE / 32 : 1;
}

template <typename KV> struct kv_ptrs {
    const KV *k, *v;
    const __half *ks, *vs; /* fp8: the per-row scales (backend.h); else NULL */
};

/* Lanes per row for a row of hd elements in chunks of VE: the power of two >= hd / VE, at most
 * 32. */
__host__ __device__ inline int decode_lanes(int hd, int ve)
{
    const int c = hd / ve;
    int l = 1;
    while (l < c && l < 32) l *= 2;
    return l;
}

/* Dynamic shared memory of a decode block in floats: every lane group's m, l and acc for the
 * block's heads, for the final merge. */
__host__ __device__ inline size_t decode_smem_floats(int hd, int ve, int hb)
{
    const int n_groups = kWarps * (32 / decode_lanes(hd, ve));
    return (size_t)n_groups * hb * (hd + 2);
}

__device__ __forceinline__ void store_out(void *out, pllm_dtype dt, int64_t i, float v)
{
    if (dt == PLLM_DTYPE_F16)
        static_cast<__half *>(out)[i] = __float2half_rn(v);
    else if (dt == PLLM_DTYPE_BF16)
        static_cast<__nv_bfloat16 *>(out)[i] = __float2bfloat16_rn(v);
    else
        static_cast<float *>(out)[i] = v;
}

/*
 * attn_decode_kernel<KV, HB, VE>
 *   items  [n_items]: query token row, context length, block table offset
 *   q      [*][q_stride] F32 (head h at column h * head_dim)
 *   caches [n_blocks][n_head_kv][block_size][head_dim] KV (F32 or F16)
 *   out    [*][n_head * head_dim] of a.out_dtype (n_splits == 1)
 *   part   (n_splits > 1) ml [n_items][n_head][n_splits][2] F32 then acc
 *          [n_items][n_head][n_splits][head_dim] F32: the split's running max, sum and
 *          unnormalised output
 * Launch: grid (n_items, n_head_kv * ceil(G / HB), n_splits), G = n_head / n_head_kv, HB the
 *   smallest of 1, 2, 4 >= min(G, 4); 128 threads. A block handles up to HB query heads of one kv
 *   head (GQA: they share every K and V load) over positions [z * split_len, min(n_ctx, (z + 1)
 *   * split_len)) (n_splits == 1: [0, n_ctx)).
 *   Lane groups: a K or V row of head_dim elements is C = head_dim / VE vectors of VE elements
 *   (16 bytes: 8 F16 or 4 F32; VE = 2 when head_dim is not a multiple of that), read by a group
 *   of L lanes (L = C rounded up to a power of two, <= 32; lane i of a group owns vectors i,
 *   i + L, ...): L = 16 for Llama-3 (hd 128, F16), 8 for SmolLM2 (hd 64), so a warp holds 2 or
 *   4 groups and a block 8 or 16. Each group is an independent flash-decoding stream with its
 *   own online-softmax state (m, l and acc[HB][its dims] in registers): per iteration it takes U
 *   consecutive positions (U = 4 for F16, 2 for F32) and issues all 2 U K and V loads (16 bytes
 *   each) before using any, so a warp has 4 KiB in flight (F16) and a 4-block SM 64 KiB; scores
 *   are reduced inside the group with log2(L) xor shuffles (every lane gets the same bits), the
 *   running max is updated once per U positions. The block-table lookups of an iteration are
 *   independent loads issued with it (the table is tiny and L1/L2-resident). No barrier in the
 *   loop: warps run freely. At the end the groups' states are merged in shared memory (one
 *   barrier) into the output, or into the split's partial.
 * Preconditions: head_dim even and <= 256; n_head a multiple of n_head_kv; split_len a multiple
 *   of 64 with n_splits * split_len >= every n_ctx when n_splits > 1; the block table covers
 *   [0, n_ctx); part holds pllm_cuda_attn_decode_workspace(n_items, n_head, head_dim, n_splits)
 *   bytes; head_dim * sizeof(KV) and the caches 16-byte aligned when VE is the 16-byte width
 *   (the launcher picks VE = 2 otherwise).
 * Shared memory: 4 n_groups HB (hd + 2) bytes, dynamic (16.5 KiB at hd 128 F16, HB 4).
 * Per (query, kv head): reads 2 n_ctx hd sizeof(KV) bytes of cache once for all its heads, plus
 *   4 G hd of queries; 4 G n_ctx hd FLOPs and G n_ctx expf. Memory bound (G / sizeof(KV)
 *   FLOP/byte): Llama-3-8B (G 4, hd 128, F16) at n_ctx 1024 reads 512 KiB per (query, kv head);
 *   64 queries x 8 kv heads = 268 MB: 89 us at 3.0 TB/s. Why this launch should approach that:
 *   what limits a memory-bound kernel is the bytes in flight per SM (Little: 3 TB/s x ~1 us =
 *   3 MB, ~23 KiB per SM); here every lane has 2 U 16-byte loads outstanding, 64 KiB per SM at
 *   4 resident blocks of 4 warps (the previous kernel had 4-byte loads behind 4 barriers per
 *   64-position tile: 0.5-2 KiB in flight per block, 16% of the bandwidth measured).
 */
template <typename KV, int HB, int VE>
__global__ void __launch_bounds__(kThreads, HB == kMaxHeads ? 3 : 4) /* registers: <= 168 / 128 */
    attn_decode_kernel(pllm_cuda_attn_args a, kv_ptrs<KV> kv, const pllm_cuda_attn_item *items,
                       int n_splits, int split_len, float *part)
{
    constexpr int NCM = max_chunks<VE>();      /* vectors per lane per row, at most */
    constexpr int U = sizeof(KV) <= 2 ? 4 : 2; /* positions per group per iteration */
    constexpr bool FP8 = pllm_cuda::kIsFp8<KV>;
    using raw = vraw<KV, VE>;
    PLLM_DYNAMIC_SHARED(float, smem);
    const int hd = a.head_dim, G = a.n_head / a.n_head_kv;
    const int C = hd / VE, L = decode_lanes(hd, VE), R = 32 / L, n_groups = kWarps * R;
    const int n_chunks = (G + HB - 1) / HB;
    const int kvh = blockIdx.y / n_chunks, g0 = (blockIdx.y % n_chunks) * HB;
    const int gc = min(HB, G - g0);
    const int h0 = kvh * G + g0; /* first query head of the block */
    const pllm_cuda_attn_item it = items[blockIdx.x];
    const int z = blockIdx.z;
    /* one split: the whole context, whatever split_len */
    /* a sliding-window layer starts at the window (a split wholly before it takes nothing: its
     * state stays m = -inf, which the combine skips) */
    const int p_end = n_splits == 1 ? it.n_ctx : min(it.n_ctx, z * split_len + split_len);
    const int p_begin = a.window > 0 ? max(z * split_len, it.n_ctx - a.window) : z * split_len;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gl = lane % L, grp = warp * R + lane / L; /* lane in its group; group in block */

    float q[HB][NCM][VE], acc[HB][NCM][VE], m[HB], l[HB];
#pragma unroll
    for (int g = 0; g < HB; g++) {
        m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < NCM; i++) {
            const int c = gl + L * i;
#pragma unroll
            for (int e = 0; e < VE; e++) {
                acc[g][i][e] = 0.0f;
                q[g][i][e] =
                    g < gc && c < C
                        ? a.q[(int64_t)it.tok * a.q_stride + (int64_t)(h0 + g) * hd + c * VE + e] *
                              a.scale
                        : 0.0f;
            }
        }
    }

    const int32_t *bt = a.block_tables + it.bt;
    const int bs = a.block_size;
    const int64_t head_off = (int64_t)kvh * bs * hd;
    /* warp-uniform loop (the shuffles need every lane): the warp's groups take positions
     * w0 + r U .. + U - 1 */
    for (int w0 = p_begin + warp * R * U; w0 < p_end; w0 += n_groups * U) {
        const int p0 = w0 + (lane / L) * U;
        int64_t row[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int p = p0 + u;
            row[u] = p < p_end ? ((int64_t)bt[p / bs] * a.n_head_kv * bs * hd + head_off +
                                  (int64_t)(p % bs) * hd)
                               : -1;
        }
        raw kr[U][NCM], vr[U][NCM];
        float ksc[U], vsc[U]; /* fp8: the rows' scales times 256 */
#pragma unroll
        for (int u = 0; u < U; u++) {
            ksc[u] = vsc[u] = 1.0f;
            if (FP8 && row[u] >= 0) {
                const int p = p0 + u;
                const int64_t sr = ((int64_t)bt[p / bs] * a.n_head_kv + kvh) * bs + p % bs;
                ksc[u] = pllm_cuda::fp8_scale_x256(kv.ks[sr]);
                vsc[u] = pllm_cuda::fp8_scale_x256(kv.vs[sr]);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int i = 0; i < NCM; i++) {
                const int c = gl + L * i;
                if (row[u] >= 0 && c < C) {
                    kr[u][i] = *reinterpret_cast<const raw *>(kv.k + row[u] + c * VE);
                    vr[u][i] = *reinterpret_cast<const raw *>(kv.v + row[u] + c * VE);
                } else {
                    kr[u][i] = raw{}, vr[u][i] = raw{};
                }
            }
        float s[U][HB];
#pragma unroll
        for (int u = 0; u < U; u++) {
            float dot[HB];
#pragma unroll
            for (int g = 0; g < HB; g++) dot[g] = 0.0f;
#pragma unroll
            for (int i = 0; i < NCM; i++) {
                float kf[VE];
                to_floats<VE>(kf, &kr[u][i], KV());
#pragma unroll
                for (int g = 0; g < HB; g++)
#pragma unroll
                    for (int e = 0; e < VE; e++) dot[g] += q[g][i][e] * kf[e];
            }
#pragma unroll
            for (int g = 0; g < HB; g++) {
                for (int o = L / 2; o > 0; o >>= 1)
                    dot[g] += __shfl_xor_sync(0xffffffffu, dot[g], o);
                s[u][g] = row[u] >= 0 ? (FP8 ? dot[g] * ksc[u] : dot[g]) : -INFINITY;
            }
        }
#pragma unroll
        for (int g = 0; g < HB; g++) {
            if (g >= gc) continue;
            float mx = s[0][g];
#pragma unroll
            for (int u = 1; u < U; u++) mx = fmaxf(mx, s[u][g]);
            const float m_new = fmaxf(m[g], mx);
            if (m_new == -INFINITY) continue; /* nothing finite yet (uniform in the group) */
            const float corr = expf(m[g] - m_new);
            m[g] = m_new;
            float p[U], sum = 0.0f;
#pragma unroll
            for (int u = 0; u < U; u++) p[u] = expf(s[u][g] - m_new), sum += p[u];
            l[g] = l[g] * corr + sum;
#pragma unroll
            for (int i = 0; i < NCM; i++)
#pragma unroll
                for (int e = 0; e < VE; e++) acc[g][i][e] *= corr;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const float pv = FP8 ? p[u] * vsc[u] : p[u]; /* fp8: the V row's scale folded in */
#pragma unroll
                for (int i = 0; i < NCM; i++) {
                    float vf[VE];
                    to_floats<VE>(vf, &vr[u][i], KV());
#pragma unroll
                    for (int e = 0; e < VE; e++) acc[g][i][e] += pv * vf[e];
                }
            }
        }
    }

    /* merge the groups: sm_ml [n_groups][HB][2], sm_acc [n_groups][HB][hd] */
    float *sm_ml = smem, *sm_acc = smem + (size_t)n_groups * HB * 2;
#pragma unroll
    for (int g = 0; g < HB; g++) {
        if (gl == 0) sm_ml[(grp * HB + g) * 2] = m[g], sm_ml[(grp * HB + g) * 2 + 1] = l[g];
#pragma unroll
        for (int i = 0; i < NCM; i++) {
            const int c = gl + L * i;
            if (c < C)
#pragma unroll
                for (int e = 0; e < VE; e++)
                    sm_acc[(int64_t)(grp * HB + g) * hd + c * VE + e] = acc[g][i][e];
        }
    }
    __syncthreads();
    const int64_t base = ((int64_t)blockIdx.x * a.n_head + h0) * n_splits + z; /* (item, h0, z) */
    float *ml = part, *pacc = part + (int64_t)gridDim.x * a.n_head * n_splits * 2;
    for (int o = tid; o < gc * hd; o += kThreads) {
        const int g = o / hd, d = o % hd;
        float M = -INFINITY;
        for (int r = 0; r < n_groups; r++) M = fmaxf(M, sm_ml[(r * HB + g) * 2]);
        float lsum = 0.0f, v = 0.0f;
        if (M > -INFINITY)
            for (int r = 0; r < n_groups; r++) {
                const float mr = sm_ml[(r * HB + g) * 2];
                if (mr == -INFINITY) continue;
                const float f = expf(mr - M);
                lsum += f * sm_ml[(r * HB + g) * 2 + 1];
                v += f * sm_acc[(int64_t)(r * HB + g) * hd + d];
            }
        if (n_splits == 1) {
            store_out(a.out, a.out_dtype,
                      (int64_t)it.tok * a.n_head * hd + (int64_t)(h0 + g) * hd + d,
                      lsum > 0.0f ? v / lsum : 0.0f);
        } else {
            if (d == 0)
                ml[(base + (int64_t)g * n_splits) * 2] = M,
                                                    ml[(base + (int64_t)g * n_splits) * 2 + 1] =
                                                        lsum;
            pacc[(base + (int64_t)g * n_splits) * hd + d] = v;
        }
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

template <typename OutT>
pllm_status combine(pllm_cuda_dev *dev, const pllm_cuda_attn_args *a,
                    const pllm_cuda_attn_item *items, int32_t n_items, int32_t n_splits,
                    const float *part)
{
    PLLM_LAUNCH(attn_combine_kernel<OutT>, dim3((unsigned)n_items, (unsigned)a->n_head),
                dim3(kThreads), 0, pllm_cuda_dev_stream(dev))
    (*a, items, (int)n_splits, part);
    return PLLM_CUDA_LAUNCHED("attn_combine_kernel");
}

/* The query heads one block takes: 1, 2 or 4 (the smallest >= min(G, 4)). */
int heads_per_block(int G)
{
    return G >= 3 ? kMaxHeads : G;
}

template <typename KV, int HB, int VE>
pllm_status launch(pllm_cuda_dev *dev, const pllm_cuda_attn_args *a,
                   const pllm_cuda_attn_item *items, int32_t n_items, int32_t n_splits,
                   int32_t split_len, float *part)
{
    const int G = a->n_head / a->n_head_kv, n_chunks = (G + HB - 1) / HB;
    const size_t smem = decode_smem_floats(a->head_dim, VE, HB) * sizeof(float);
    kv_ptrs<KV> kv = {(const KV *)a->k_cache, (const KV *)a->v_cache, (const __half *)a->k_scales,
                      (const __half *)a->v_scales};
    PLLM_LAUNCH((attn_decode_kernel<KV, HB, VE>),
                dim3((unsigned)n_items, (unsigned)(a->n_head_kv * n_chunks), (unsigned)n_splits),
                dim3(kThreads), smem, pllm_cuda_dev_stream(dev))
    (*a, kv, items, (int)n_splits, (int)split_len, part);
    pllm_status st = PLLM_CUDA_LAUNCHED("attn_decode_kernel");
    if (st != PLLM_OK || n_splits == 1) return st;
    switch (a->out_dtype) {
    case PLLM_DTYPE_F16:
        return combine<__half>(dev, a, items, n_items, n_splits, part);
    case PLLM_DTYPE_BF16:
        return combine<__nv_bfloat16>(dev, a, items, n_items, n_splits, part);
    default:
        return combine<float>(dev, a, items, n_items, n_splits, part);
    }
}

/* 16-byte vectors when every row (and so every vector) is 16-byte aligned, else pairs. */
template <typename KV, int HB>
pllm_status launch_ve(pllm_cuda_dev *dev, const pllm_cuda_attn_args *a,
                      const pllm_cuda_attn_item *items, int32_t n_items, int32_t n_splits,
                      int32_t split_len, float *part)
{
    /* fp8: 8 elements (8-byte loads), the lane layout and registers of F16's 16-byte vectors */
    constexpr int VE16 = pllm_cuda::kIsFp8<KV> ? 8 : 16 / (int)sizeof(KV);
    const bool aligned = a->head_dim % VE16 == 0 && ((uintptr_t)a->k_cache % 16) == 0 &&
                         ((uintptr_t)a->v_cache % 16) == 0;
    if (aligned) return launch<KV, HB, VE16>(dev, a, items, n_items, n_splits, split_len, part);
    return launch<KV, HB, 2>(dev, a, items, n_items, n_splits, split_len, part);
}

template <typename KV>
pllm_status launch_kv(pllm_cuda_dev *dev, const pllm_cuda_attn_args *a,
                      const pllm_cuda_attn_item *items, int32_t n_items, int32_t n_splits,
                      int32_t split_len, float *part)
{
    switch (heads_per_block(a->n_head / a->n_head_kv)) {
    case 1:
        return launch_ve<KV, 1>(dev, a, items, n_items, n_splits, split_len, part);
    case 2:
        return launch_ve<KV, 2>(dev, a, items, n_items, n_splits, split_len, part);
    default:
        return launch_ve<KV, kMaxHeads>(dev, a, items, n_items, n_splits, split_len, part);
    }
}

} /* namespace */

extern "C" int32_t pllm_cuda_attn_decode_blocks(int32_t n_head, int32_t n_head_kv)
{
    if (n_head < 1 || n_head_kv < 1) return 0;
    const int G = n_head / n_head_kv, hb = heads_per_block(G);
    return n_head_kv * ((G + hb - 1) / hb);
}

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
    if (a->kv_dtype != PLLM_DTYPE_F32 && a->kv_dtype != PLLM_DTYPE_F16 &&
        a->kv_dtype != PLLM_KV_DTYPE_FP8)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: KV type %s (need F32, F16 or FP8)", who,
                           pllm_kv_dtype_name(a->kv_dtype));
    if (a->kv_dtype == PLLM_KV_DTYPE_FP8 && (!a->k_scales || !a->v_scales))
        return pllm_errorf(PLLM_ERR_INVALID, "%s: an fp8 KV cache needs its scales", who);
    return PLLM_OK;
}

extern "C" pllm_status pllm_cuda_attn_decode(pllm_cuda_dev *dev, const pllm_cuda_attn_args *a,
                                             const pllm_cuda_attn_item *items, int32_t n_items,
                                             int32_t n_splits, int32_t split_len, void *workspace)
{
    PLLM_TRY(pllm_cuda_attn_check(a, "attn_decode"));
    if (n_items < 0 || n_splits < 1 || split_len < kSplitQuantum || split_len % kSplitQuantum)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "attn_decode: n_items=%d n_splits=%d split_len=%d (a multiple of %d)",
                           n_items, n_splits, split_len, kSplitQuantum);
    if (n_splits > 1 && !workspace)
        return pllm_errorf(PLLM_ERR_INVALID, "attn_decode: %d splits need a workspace", n_splits);
    if (n_items == 0) return PLLM_OK;
    float *part = static_cast<float *>(workspace);
    if (a->out_dtype != PLLM_DTYPE_F32 && a->out_dtype != PLLM_DTYPE_F16 &&
        a->out_dtype != PLLM_DTYPE_BF16)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "attn_decode: output type %s",
                           pllm_dtype_name(a->out_dtype));
    if (a->kv_dtype == PLLM_DTYPE_F16)
        return launch_kv<__half>(dev, a, items, n_items, n_splits, split_len, part);
    if (a->kv_dtype == PLLM_KV_DTYPE_FP8)
        return launch_kv<pllm_cuda::fp8_e4m3>(dev, a, items, n_items, n_splits, split_len, part);
    return launch_kv<float>(dev, a, items, n_items, n_splits, split_len, part);
}

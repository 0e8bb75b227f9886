/*
 * qkv_rope.cu: QKV bias + rotary embedding + the store of K and V into their paged slots, in one
 * pass over the fused QKV projection's output (see kernels.h for the contract).
 */
#include "cuda/kernel_util.cuh"
#include "cuda/device_impl.h"
#include "cuda/kernels.h"

namespace
{

constexpr int kThreads = 128;

/*
 * qkv_rope_kernel
 *   qkv       [n_tokens][ld] F32, in/out: q | k | v of each token (QD | KVD | KVD columns)
 *   bias      [QD + 2 KVD] F32 or NULL
 *   positions [n_tokens] int32, slots [n_tokens] int32 (< 0: no store)
 *   inv_freq  [rope_dim / 2] double
 *   k_cache, v_cache  [n_blocks][n_head_kv][block_size][head_dim] KV (F32 or F16)
 * Launch: one block per token (grid.x = n_tokens), 128 threads. Work items are the pairs of
 *   every q and k head (pair i < rope_dim/2 is rotated, the rest of the head only gets its
 *   bias), then the elements of v; thread t takes items t, t + 128, ... Consecutive threads
 *   take consecutive pairs of one head, so q/k reads and writes and the cache stores are
 *   coalesced (a head's slot in the cache is head_dim contiguous elements).
 * Shared memory: none.
 * Preconditions: head_dim even; rope_dim even and <= head_dim; ld >= QD + 2 KVD; slots of one
 *   launch distinct (or < 0); a slot's block inside the caches.
 * Per token: reads 4 (QD + 2 KVD) bytes (+ the bias, L2-resident), writes 4 (QD + KVD) back and
 *   2 KVD sizeof(KV) bytes to the caches; per rotated pair one double sincos and 6 FLOPs.
 *   Bandwidth bound: for Llama-3-8B (QD 4096, KVD 1024) 24 KiB read and 24 KiB written per
 *   token with an F16 cache.
 * Numerics: the rotation is computed as the CPU backend does it (float multiplies and adds,
 *   never contracted into FMAs, on cos/sin rounded from double), so q and k match it bitwise.
 */
template <typename KV>
__global__ void __launch_bounds__(kThreads)
    qkv_rope_kernel(pllm_cuda_qkv_rope_args a, KV *__restrict__ kc, KV *__restrict__ vc)
{
    const int t = blockIdx.x;
    const int hd = a.head_dim, half = hd / 2, n_rot = a.rope_dim / 2;
    const int qd = a.n_head * hd, kvd = a.n_head_kv * hd;
    float *row = a.qkv + (int64_t)t * a.ld;
    const float *b = a.bias;
    const double pos = (double)a.positions[t];
    const int slot = a.slots[t];
    const int64_t cache_row =
        slot >= 0
            ? ((int64_t)(slot / a.block_size) * a.n_head_kv * a.block_size + slot % a.block_size) *
                  hd
            : 0;
    const int64_t head_stride = (int64_t)a.block_size * hd; /* between kv heads of one block */

    const int n_pairs = (a.n_head + a.n_head_kv) * half;
    for (int w = threadIdx.x; w < n_pairs; w += blockDim.x) {
        const int head = w / half, i = w % half;
        int e0, e1; /* the pair's two elements within the head */
        if (i < n_rot) {
            e0 = a.rope_neox ? i : 2 * i;
            e1 = a.rope_neox ? i + n_rot : 2 * i + 1;
        } else {
            e0 = a.rope_dim + 2 * (i - n_rot);
            e1 = e0 + 1;
        }
        const int c0 = head * hd + e0, c1 = head * hd + e1; /* columns in the row */
        float x0 = row[c0], x1 = row[c1];
        if (b) x0 += b[c0], x1 += b[c1];
        if (i < n_rot) {
            double s, c;
            sincos(pos * a.inv_freq[i], &s, &c);
            const float cf = (float)c, sf = (float)s;
            const float y0 = __fsub_rn(__fmul_rn(x0, cf), __fmul_rn(x1, sf));
            const float y1 = __fadd_rn(__fmul_rn(x0, sf), __fmul_rn(x1, cf));
            x0 = y0, x1 = y1;
        }
        row[c0] = x0, row[c1] = x1;
        if (head >= a.n_head && slot >= 0) {
            KV *k = kc + cache_row + (int64_t)(head - a.n_head) * head_stride;
            k[e0] = pllm_cuda::from_float<KV>(x0);
            k[e1] = pllm_cuda::from_float<KV>(x1);
        }
    }
    for (int w = threadIdx.x; w < kvd; w += blockDim.x) {
        const int c = qd + kvd + w;
        float v = row[c];
        if (b) v += b[c];
        row[c] = v;
        if (slot >= 0)
            vc[cache_row + (int64_t)(w / hd) * head_stride + w % hd] = pllm_cuda::from_float<KV>(v);
    }
}

template <typename KV> pllm_status launch(pllm_cuda_dev *dev, const pllm_cuda_qkv_rope_args *a)
{
    PLLM_LAUNCH(qkv_rope_kernel<KV>, dim3((unsigned)a->n_tokens), dim3(kThreads), 0,
                pllm_cuda_dev_stream(dev))
    (*a, (KV *)a->k_cache, (KV *)a->v_cache);
    return PLLM_CUDA_LAUNCHED("qkv_rope_kernel");
}

} /* namespace */

extern "C" pllm_status pllm_cuda_qkv_rope(pllm_cuda_dev *dev, const pllm_cuda_qkv_rope_args *a)
{
    if (a->n_tokens < 0 || a->n_head < 1 || a->n_head_kv < 1 || a->head_dim < 2 ||
        a->head_dim % 2 || a->rope_dim < 0 || a->rope_dim > a->head_dim || a->rope_dim % 2 ||
        a->block_size < 1 || a->ld < (int64_t)(a->n_head + 2 * a->n_head_kv) * a->head_dim)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "qkv_rope: bad shape n_tokens=%d n_head=%d n_head_kv=%d head_dim=%d "
                           "rope_dim=%d block_size=%d ld=%lld",
                           a->n_tokens, a->n_head, a->n_head_kv, a->head_dim, a->rope_dim,
                           a->block_size, (long long)a->ld);
    if (a->n_tokens == 0) return PLLM_OK;
    switch (a->kv_dtype) {
    case PLLM_DTYPE_F32:
        return launch<float>(dev, a);
    case PLLM_DTYPE_F16:
        return launch<__half>(dev, a);
    default:
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "qkv_rope: KV type %s (need F32 or F16)",
                           pllm_dtype_name(a->kv_dtype));
    }
}

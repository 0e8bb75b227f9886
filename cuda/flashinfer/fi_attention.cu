/*
 * fi_attention.cu: the instantiations of FlashInfer's batched paged decode attention pllm uses
 * (see fi_attention.h for the contract and the layout mapping). nvcc only.
 *
 * Instantiated: BatchDecodeWithPagedKVCacheDispatched<HEAD_DIM in {64, 128}, no positional
 * encoding in the kernel (pllm's qkv_rope has rotated q and k already), DefaultAttention without
 * custom mask, window, soft cap or ALiBi, BatchDecodeParams<half, half, half, int32_t>>, each
 * for every GQA group size FlashInfer's dispatch knows, for sm_80 and sm_90a.
 */
#include "cuda/flashinfer/fi_compat.cuh"

#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include "cuda/flashinfer/fi_attention.h"

#include <vector>

/* A named namespace, not an anonymous one: nvcc's host stubs for kernels instantiated on types
 * named inside an anonymous namespace do not compile. */
namespace pllm_fi
{

using namespace flashinfer;
using Params = BatchDecodeParams<half, half, half, int32_t>;
using Variant = DefaultAttention<false, false, false, false>;
constexpr PosEncodingMode kPos = PosEncodingMode::kNone;

template <uint32_t HD>
cudaError_t plan_hd(DecodePlanInfo &info, void *float_ws, size_t float_bytes, void *int_ws,
                    void *int_pinned, size_t int_bytes, int32_t *indptr_h, uint32_t batch,
                    uint32_t n_head, uint32_t n_head_kv, uint32_t block_size, bool graph,
                    cudaStream_t stream)
{
    cudaError_t st = cudaErrorInvalidValue;
    DISPATCH_GQA_GROUP_SIZE(n_head / n_head_kv, GROUP_SIZE, {
        auto est = BatchDecodeWithPagedKVCacheWorkEstimationDispatched<GROUP_SIZE, HD, kPos,
                                                                       Variant, Params>;
        st = DecodePlan<HD, kPos, Variant, Params>(float_ws, float_bytes, int_ws, int_pinned,
                                                   int_bytes, info, indptr_h, batch, n_head,
                                                   block_size, graph, stream, est);
    });
    return st;
}

template <uint32_t HD>
cudaError_t run_hd(const DecodePlanInfo &info, void *float_ws, void *int_ws, half *out,
                   const half *q, int64_t q_stride_n, uint32_t n_head, const pllm_fi_paged_kv *kv,
                   float sm_scale, cudaStream_t stream)
{
    const int64_t page = (int64_t)kv->n_head_kv * kv->block_size * HD;
    const int64_t strides[3] = {page, (int64_t)kv->block_size * HD, HD}; /* HND */
    paged_kv_t<half, int32_t> paged((uint32_t)kv->n_head_kv, (uint32_t)kv->block_size, HD,
                                    (uint32_t)kv->batch, QKVLayout::kHND, (half *)kv->k_cache,
                                    (half *)kv->v_cache, strides, strides, (int32_t *)kv->indices,
                                    (int32_t *)kv->indptr, (int32_t *)kv->last_page_len);
    Params p;
    p.q = const_cast<half *>(q);
    p.paged_kv = paged;
    p.o = out;
    p.lse = nullptr;
    p.num_qo_heads = n_head;
    p.q_stride_n = (int32_t)q_stride_n;
    p.q_stride_h = HD;
    p.window_left = -1;
    p.logits_soft_cap = 0.0f;
    p.sm_scale = sm_scale;
    p.rope_rcp_scale = 1.0f;
    p.rope_rcp_theta = 1.0f;
    p.request_indices = GetPtrFromBaseOffset<int32_t>(int_ws, info.request_indices_offset);
    p.kv_tile_indices = GetPtrFromBaseOffset<int32_t>(int_ws, info.kv_tile_indices_offset);
    p.o_indptr = GetPtrFromBaseOffset<int32_t>(int_ws, info.o_indptr_offset);
    p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int32_t>(int_ws, info.kv_chunk_size_ptr_offset);
    half *tmp_v = nullptr;
    float *tmp_s = nullptr;
    if (info.split_kv) {
        tmp_v = GetPtrFromBaseOffset<half>(float_ws, info.v_offset);
        tmp_s = GetPtrFromBaseOffset<float>(float_ws, info.s_offset);
        if (info.enable_cuda_graph)
            p.block_valid_mask = GetPtrFromBaseOffset<bool>(int_ws, info.block_valid_mask_offset);
    }
    p.padded_batch_size = (uint32_t)info.padded_batch_size;
    return BatchDecodeWithPagedKVCacheDispatched<HD, kPos, Variant, Params>(p, tmp_v, tmp_s, false,
                                                                            stream);
}

bool group_supported(int32_t g)
{
    return g == 1 || g == 2 || g == 3 || g == 4 || g == 6 || g == 8 || g == 16 || g == 32;
}

/* One thread per element; grid (ceil(n_cols / 256), n_rows). */
__global__ void q_to_f16_kernel(half *out, const float *q, int64_t q_stride, int n_cols)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < n_cols)
        out[(int64_t)blockIdx.y * n_cols + c] =
            __float2half_rn(q[(int64_t)blockIdx.y * q_stride + c]);
}

} /* namespace pllm_fi */

using namespace pllm_fi;

extern "C" int pllm_fi_decode_supported(int32_t n_head, int32_t n_head_kv, int32_t head_dim)
{
    return n_head_kv > 0 && n_head % n_head_kv == 0 && group_supported(n_head / n_head_kv) &&
           (head_dim == 64 || head_dim == 128);
}

extern "C" int pllm_fi_decode_plan_make(pllm_fi_decode_plan *plan, void *float_ws,
                                        size_t float_ws_bytes, void *int_ws, void *int_ws_pinned,
                                        size_t int_ws_bytes, const int32_t *indptr_h, int32_t batch,
                                        int32_t n_head, int32_t n_head_kv, int32_t block_size,
                                        int32_t head_dim, int cuda_graph, void *stream)
{
    if (!pllm_fi_decode_supported(n_head, n_head_kv, head_dim)) return (int)cudaErrorInvalidValue;
    DecodePlanInfo info;
    int32_t *ip = const_cast<int32_t *>(indptr_h);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    cudaError_t st =
        head_dim == 64
            ? plan_hd<64>(info, float_ws, float_ws_bytes, int_ws, int_ws_pinned, int_ws_bytes, ip,
                          batch, n_head, n_head_kv, block_size, cuda_graph != 0, s)
            : plan_hd<128>(info, float_ws, float_ws_bytes, int_ws, int_ws_pinned, int_ws_bytes, ip,
                           batch, n_head, n_head_kv, block_size, cuda_graph != 0, s);
    if (st != cudaSuccess) return (int)st;
    const std::vector<int64_t> v = info.ToVector();
    for (size_t i = 0; i < v.size() && i < 10; i++) plan->info[i] = v[i];
    return 0;
}

extern "C" int pllm_fi_decode_run(const pllm_fi_decode_plan *plan, void *float_ws, void *int_ws,
                                  void *out, const void *q, int64_t q_stride_n, int32_t n_head,
                                  const pllm_fi_paged_kv *kv, float sm_scale, void *stream)
{
    if (!pllm_fi_decode_supported(n_head, kv->n_head_kv, kv->head_dim))
        return (int)cudaErrorInvalidValue;
    DecodePlanInfo info;
    info.FromVector(std::vector<int64_t>(plan->info, plan->info + 10));
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (kv->head_dim == 64)
        return (int)run_hd<64>(info, float_ws, int_ws, (half *)out, (const half *)q, q_stride_n,
                               n_head, kv, sm_scale, s);
    return (int)run_hd<128>(info, float_ws, int_ws, (half *)out, (const half *)q, q_stride_n,
                            n_head, kv, sm_scale, s);
}

extern "C" int pllm_fi_q_to_f16(void *out, const float *q, int64_t q_stride, int32_t n_rows,
                                int32_t n_cols, void *stream)
{
    if (n_rows <= 0) return 0;
    q_to_f16_kernel<<<dim3((unsigned)((n_cols + 255) / 256), (unsigned)n_rows), 256, 0,
                      static_cast<cudaStream_t>(stream)>>>(static_cast<half *>(out), q, q_stride,
                                                           n_cols);
    return (int)cudaGetLastError();
}

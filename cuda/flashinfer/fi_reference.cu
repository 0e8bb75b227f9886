/*
 * fi_reference.cu: the contract of fi_attention.h (FlashInfer's batched paged decode as pllm
 * calls it), implemented plainly for the emulated build, where FlashInfer's own kernels (PTX,
 * cp.async) cannot run. It lets the emulated test suite prove everything pllm does around
 * FlashInfer: the paged-KV description (indptr, indices, last_page_len over pllm's HND blocks),
 * the F16 queries, where the output lands, the plan/run split with a pinned buffer per step in
 * flight, and CUDA-graph replays that re-plan. What it cannot prove is FlashInfer's kernels
 * themselves: bench/gpu/check.sh compares the two paths on a GPU.
 *
 * The plan copies indptr_h into the pinned int workspace and queues one copy of it to the device
 * int workspace, as FlashInfer's plan does with its schedule; run's kernel traps when the copy
 * and the paged description's indptr disagree, so a pinned buffer overwritten before its copy
 * ran, or a run without a plan, fails the launch instead of passing silently.
 *
 * Supported shapes: those of the real wrapper (head_dim 64 or 128, GQA groups FlashInfer
 * dispatches), so the emulated suite meets the same refusals a GPU would.
 */
#include "cuda/kernel_util.cuh"
#include "cuda/flashinfer/fi_attention.h"

#include <cuda_fp16.h>
#include <math.h>

namespace
{

bool group_ok(int32_t g)
{
    return g == 1 || g == 2 || g == 3 || g == 4 || g == 6 || g == 8 || g == 16 || g == 32;
}

/*
 * fi_ref_decode_kernel
 *   out [batch][n_head][HD] F16; q rows q_stride_n F16 elements apart; K/V per the paged
 *   description (HND pages of block_size positions); plan_indptr: the plan's device copy.
 * Launch: grid (batch, n_head), one thread: it walks request b's pages in order with an online
 *   softmax in F32 (scores scaled by sm_scale), the running output in registers.
 */
template <int HD>
__global__ void fi_ref_decode_kernel(__half *out, const __half *q, int64_t q_stride_n,
                                     pllm_fi_paged_kv kv, const int32_t *plan_indptr,
                                     float sm_scale)
{
    const int b = blockIdx.x, h = blockIdx.y, n_head = gridDim.y;
    const int g = n_head / kv.n_head_kv, hk = h / g;
    const int32_t p0 = kv.indptr[b], p1 = kv.indptr[b + 1];
    if (plan_indptr[b] != p0 || plan_indptr[b + 1] != p1) __trap(); /* stale or missing plan */
    if (p1 <= p0 || kv.last_page_len[b] < 1 || kv.last_page_len[b] > kv.block_size) __trap();
    const int64_t kv_len = (int64_t)(p1 - p0 - 1) * kv.block_size + kv.last_page_len[b];
    const __half *qr = q + (int64_t)b * q_stride_n + (int64_t)h * HD;
    float qf[HD], acc[HD];
    for (int d = 0; d < HD; d++) qf[d] = __half2float(qr[d]), acc[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const __half *K = static_cast<const __half *>(kv.k_cache);
    const __half *V = static_cast<const __half *>(kv.v_cache);
    for (int64_t t = 0; t < kv_len; t++) {
        const int32_t page = kv.indices[p0 + t / kv.block_size];
        const int64_t off =
            (((int64_t)page * kv.n_head_kv + hk) * kv.block_size + t % kv.block_size) * HD;
        float s = 0.0f;
        for (int d = 0; d < HD; d++) s += qf[d] * __half2float(K[off + d]);
        s *= sm_scale;
        const float m2 = fmaxf(m, s), a = expf(m - m2), e = expf(s - m2);
        for (int d = 0; d < HD; d++) acc[d] = acc[d] * a + e * __half2float(V[off + d]);
        l = l * a + e;
        m = m2;
    }
    __half *o = out + ((int64_t)b * n_head + h) * HD;
    for (int d = 0; d < HD; d++) o[d] = __float2half_rn(acc[d] / l);
}

__global__ void fi_ref_q_to_f16_kernel(__half *out, const float *q, int64_t q_stride, int n_cols)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < n_cols)
        out[(int64_t)blockIdx.y * n_cols + c] =
            __float2half_rn(q[(int64_t)blockIdx.y * q_stride + c]);
}

} /* namespace */

extern "C" int pllm_fi_decode_supported(int32_t n_head, int32_t n_head_kv, int32_t head_dim)
{
    return n_head_kv > 0 && n_head % n_head_kv == 0 && group_ok(n_head / n_head_kv) &&
           (head_dim == 64 || head_dim == 128);
}

extern "C" int pllm_fi_decode_plan_make(pllm_fi_decode_plan *plan, void *float_ws,
                                        size_t float_ws_bytes, void *int_ws, void *int_ws_pinned,
                                        size_t int_ws_bytes, const int32_t *indptr_h, int32_t batch,
                                        int32_t n_head, int32_t n_head_kv, int32_t block_size,
                                        int32_t head_dim, int cuda_graph, void *stream)
{
    (void)float_ws, (void)float_ws_bytes;
    if (!pllm_fi_decode_supported(n_head, n_head_kv, head_dim) || batch < 1 || block_size < 1 ||
        sizeof(int32_t) * (size_t)(batch + 1) > int_ws_bytes || !int_ws || !int_ws_pinned)
        return (int)cudaErrorInvalidValue;
    int32_t *pin = static_cast<int32_t *>(int_ws_pinned);
    for (int32_t i = 0; i <= batch; i++) pin[i] = indptr_h[i];
    cudaError_t st = cudaMemcpyAsync(int_ws, int_ws_pinned, sizeof(int32_t) * (size_t)(batch + 1),
                                     cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream));
    if (st != cudaSuccess) return (int)st;
    *plan = (pllm_fi_decode_plan){
        {batch, cuda_graph != 0, n_head, n_head_kv, block_size, head_dim, 0, 0, 0, 0}};
    return 0;
}

extern "C" int pllm_fi_decode_run(const pllm_fi_decode_plan *plan, void *float_ws, void *int_ws,
                                  void *out, const void *q, int64_t q_stride_n, int32_t n_head,
                                  const pllm_fi_paged_kv *kv, float sm_scale, void *stream)
{
    (void)float_ws;
    if (!pllm_fi_decode_supported(n_head, kv->n_head_kv, kv->head_dim) ||
        plan->info[0] != kv->batch || plan->info[2] != n_head || plan->info[3] != kv->n_head_kv ||
        plan->info[4] != kv->block_size || plan->info[5] != kv->head_dim)
        return (int)cudaErrorInvalidValue;
    const dim3 grid((unsigned)kv->batch, (unsigned)n_head);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const int32_t *pi = static_cast<const int32_t *>(int_ws);
    __half *o = static_cast<__half *>(out);
    const __half *qh = static_cast<const __half *>(q);
    if (kv->head_dim == 64) {
        PLLM_LAUNCH((fi_ref_decode_kernel<64>), grid, dim3(1), 0, s)
        (o, qh, q_stride_n, *kv, pi, sm_scale);
    } else {
        PLLM_LAUNCH((fi_ref_decode_kernel<128>), grid, dim3(1), 0, s)
        (o, qh, q_stride_n, *kv, pi, sm_scale);
    }
    return (int)cudaGetLastError();
}

extern "C" int pllm_fi_q_to_f16(void *out, const float *q, int64_t q_stride, int32_t n_rows,
                                int32_t n_cols, void *stream)
{
    if (n_rows <= 0) return 0;
    PLLM_LAUNCH(fi_ref_q_to_f16_kernel, dim3((unsigned)((n_cols + 255) / 256), (unsigned)n_rows),
                dim3(256), 0, static_cast<cudaStream_t>(stream))
    (static_cast<__half *>(out), q, q_stride, n_cols);
    return (int)cudaGetLastError();
}

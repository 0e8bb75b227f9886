/*
 * fi_attention.h: a thin C wrapper over FlashInfer's batched paged decode attention
 * (include/flashinfer/attention/decode.cuh, scheduler.cuh; FlashInfer 0.7.2, Apache-2.0),
 * instantiated only for what pllm needs: F16 queries, KV and output, int32 page ids, head_dim 64
 * and 128, every GQA group FlashInfer dispatches (1, 2, 3, 4, 6, 8, 16, ...). Built by nvcc only
 * (cuda/flashinfer/fi_attention.cu), when scripts/setup.sh has fetched the headers; the emulator
 * cannot run FlashInfer (PTX, cp.async), so the emulated build has no such path.
 *
 * Layout mapping. pllm's per-layer K and V caches are [n_blocks][n_head_kv][block_size]
 * [head_dim] (engine/backend.h), which is FlashInfer's HND paged layout with page = block,
 * separate K and V arrays of identical strides (page n_head_kv * block_size * head_dim, head
 * block_size * head_dim, token head_dim): no layout change is needed. A step's block tables,
 * packed one sequence after another, are FlashInfer's `indices`; `indptr[i]` is the offset of
 * sequence i's table (indptr[batch] = total), `last_page_len[i] = n_ctx - (n_blocks - 1) *
 * block_size` (>= 1). Queries are F16 [batch][n_head][head_dim] with row stride q_stride_n
 * (pllm_fi_q_to_f16 converts qkv_rope's F32 queries).
 *
 * Plan, then run (FlashInfer's scheme): plan runs on the host from indptr_h (the host copy of
 * indptr), writes its schedule into the pinned int workspace and queues one copy of it to the
 * device int workspace; run launches the kernel (and the merge of KV splits) with that plan.
 * With cuda_graph true the plan keeps a fixed padded batch (for capture); plan then run again on
 * any new step. Workspaces: float 128 MiB and int 8 MiB are FlashInfer's defaults.
 *
 * Status: compiled for sm_80 and sm_90a; not yet wired into the forward pass (see
 * docs/cuda.md, section 8) and never run (no GPU was at hand).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pllm_fi_decode_plan {
    int64_t info[10]; /* FlashInfer's DecodePlanInfo, as its ToVector() */
} pllm_fi_decode_plan;

typedef struct pllm_fi_paged_kv {
    const void *k_cache, *v_cache; /* this layer's F16 caches, HND */
    const int32_t *indptr;         /* device [batch + 1] */
    const int32_t *indices;        /* device [indptr[batch]] block ids */
    const int32_t *last_page_len;  /* device [batch] */
    int32_t batch, n_head_kv, block_size, head_dim;
} pllm_fi_paged_kv;

/* Whether the wrapper has kernels for this shape (F16 KV). */
int pllm_fi_decode_supported(int32_t n_head, int32_t n_head_kv, int32_t head_dim);

/* 0 on success, else a cudaError_t; msg gets a line naming the call. stream is a cudaStream_t. */
int pllm_fi_decode_plan_make(pllm_fi_decode_plan *plan, void *float_ws, size_t float_ws_bytes,
                             void *int_ws, void *int_ws_pinned, size_t int_ws_bytes,
                             const int32_t *indptr_h, int32_t batch, int32_t n_head,
                             int32_t n_head_kv, int32_t block_size, int32_t head_dim,
                             int cuda_graph, void *stream);

/* out: [batch][n_head][head_dim] F16; q: [batch] rows of q_stride_n F16 elements, head h at
 * h * head_dim. */
int pllm_fi_decode_run(const pllm_fi_decode_plan *plan, void *float_ws, void *int_ws, void *out,
                       const void *q, int64_t q_stride_n, int32_t n_head,
                       const pllm_fi_paged_kv *kv, float sm_scale, void *stream);

/* out[t][c] = (F16) q[t * q_stride + c] for c < n_cols: the F32 queries qkv_rope leaves, for
 * FlashInfer. */
int pllm_fi_q_to_f16(void *out, const float *q, int64_t q_stride, int32_t n_rows, int32_t n_cols,
                     void *stream);

#ifdef __cplusplus
}
#endif

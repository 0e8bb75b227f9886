/*
 * attention_fi.cpp: attention_fi.h. PLLM_CUDA_FI says what stands behind fi_attention.h in this
 * build: 1 FlashInfer's kernels (the real build with the headers), 2 the contract reference
 * (the emulated build), 0 nothing.
 */
#include "cuda/attention_fi.h"
#include "cuda/device_impl.h"
#include "model/backend.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef PLLM_CUDA_EMU
#include "cuda/emu/cuemu.h"
#endif

#ifndef PLLM_CUDA_FI
#define PLLM_CUDA_FI 0
#endif

namespace
{
constexpr size_t kFloatWs = (size_t)128 << 20, kIntWs = (size_t)8 << 20;
}

struct pllm_cuda_fi {
    void *float_ws, *int_ws;
    void *pinned[2];
    pllm_fi_decode_plan plan;
    bool planned;
};

extern "C" const char *pllm_cuda_fi_build(void)
{
#if PLLM_CUDA_FI == 1
    return "flashinfer 0.7.2.post1";
#elif PLLM_CUDA_FI == 2
    return "flashinfer contract reference (emulated)";
#else
    return NULL;
#endif
}

extern "C" bool pllm_cuda_fi_supported(const pllm_model_config *cfg, pllm_dtype kv_dtype,
                                       pllm_dtype act, char *why, size_t n)
{
    const char *no = NULL;
    char buf[160];
    if (kv_dtype == PLLM_KV_DTYPE_FP8) {
        /* FlashInfer's fp8 paged decode takes one scale per tensor; this cache has one per
         * (block, head, position) row (backend.h) */
        no = "--kv-cache-dtype fp8 keeps a scale per token and head, which FlashInfer's paged "
             "decode does not take (it has one scale per tensor)";
    } else if (cfg->sliding_window > 0) {
        no = "its sliding-window layers are not passed to FlashInfer";
    }
#if PLLM_CUDA_FI
    else if (kv_dtype != PLLM_DTYPE_F16) {
        no = "its KV cache is not F16";
    } else if (act != PLLM_DTYPE_F16) {
        no = "the weights (and so the attention output) are not F16";
    } else if (!pllm_fi_decode_supported(cfg->n_head, cfg->n_head_kv, cfg->head_dim)) {
        snprintf(buf, sizeof buf,
                 "head_dim %d with %d query heads over %d KV heads is not instantiated (head_dim "
                 "64 or 128, groups 1, 2, 3, 4, 6, 8, 16, 32)",
                 cfg->head_dim, cfg->n_head, cfg->n_head_kv);
        no = buf;
    }
#else
    (void)cfg, (void)kv_dtype, (void)act;
    no = "this build has no FlashInfer (scripts/setup.sh fetches its headers; rebuild)";
#endif
    if (why && n) snprintf(why, n, "%s", no ? no : "");
    return no == NULL;
}

static pllm_status fi_fail(int e, const char *what)
{
#ifdef PLLM_CUDA_EMU
    const char *d = pllm_cuemu_error_detail();
#else
    const char *d = "";
#endif
    const cudaError_t ce = (cudaError_t)e;
    const pllm_status code = ce == cudaErrorInvalidValue       ? PLLM_ERR_INVALID
                             : ce == cudaErrorMemoryAllocation ? PLLM_ERR_NOMEM
                                                               : PLLM_ERR_INTERNAL;
    pllm_status st = pllm_errorf(code, "flashinfer %s: %s (%s)%s%s", what, cudaGetErrorName(ce),
                                 cudaGetErrorString(ce), d[0] ? ": " : "", d);
    (void)cudaGetLastError();
    return st;
}

extern "C" void pllm_cuda_fi_free(pllm_cuda_fi *fi, pllm_cuda_dev *dev)
{
    if (!fi) return;
    pllm_cuda_free(dev, fi->float_ws);
    pllm_cuda_free(dev, fi->int_ws);
    for (int i = 0; i < 2; i++) pllm_cuda_host_free(dev, fi->pinned[i]);
    free(fi);
}

extern "C" pllm_status pllm_cuda_fi_create(pllm_cuda_fi **out, pllm_cuda_dev *dev,
                                           size_t *device_bytes)
{
    *out = NULL;
    if (!pllm_cuda_fi_build())
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "cuda backend: attention flashinfer: this build has no FlashInfer");
    pllm_cuda_fi *fi = (pllm_cuda_fi *)calloc(1, sizeof *fi);
    if (!fi) return PLLM_ERR_NOMEM;
    pllm_status st;
    if ((st = pllm_cuda_alloc(dev, &fi->float_ws, kFloatWs)) ||
        (st = pllm_cuda_alloc(dev, &fi->int_ws, kIntWs)) ||
        (st = pllm_cuda_host_alloc(dev, &fi->pinned[0], kIntWs)) ||
        (st = pllm_cuda_host_alloc(dev, &fi->pinned[1], kIntWs))) {
        pllm_cuda_fi_free(fi, dev);
        return pllm_error_prefix(st, "cuda backend: flashinfer workspaces: ");
    }
    *device_bytes = kFloatWs + kIntWs;
    *out = fi;
    return PLLM_OK;
}

extern "C" pllm_status pllm_cuda_fi_plan(pllm_cuda_fi *fi, pllm_cuda_dev *dev, int32_t slot,
                                         const int32_t *indptr_h, int32_t batch, int32_t n_head,
                                         int32_t n_head_kv, int32_t block_size, int32_t head_dim,
                                         bool graph)
{
    fi->planned = false;
    const int e = pllm_fi_decode_plan_make(
        &fi->plan, fi->float_ws, kFloatWs, fi->int_ws, fi->pinned[slot & 1], kIntWs, indptr_h,
        batch, n_head, n_head_kv, block_size, head_dim, graph ? 1 : 0, pllm_cuda_dev_stream(dev));
    if (e) return fi_fail(e, "plan");
    fi->planned = true;
    return PLLM_OK;
}

extern "C" pllm_status pllm_cuda_fi_decode(pllm_cuda_fi *fi, pllm_cuda_dev *dev, void *out,
                                           void *q16, const float *q, int64_t q_stride,
                                           int32_t n_head, const pllm_fi_paged_kv *kv, float scale)
{
    if (!fi->planned)
        return pllm_errorf(PLLM_ERR_INTERNAL, "flashinfer decode: run without a plan");
    cudaStream_t s = pllm_cuda_dev_stream(dev);
    const int32_t qd = n_head * kv->head_dim;
    int e = pllm_fi_q_to_f16(q16, q, q_stride, kv->batch, qd, s);
    if (e) return fi_fail(e, "queries to F16");
    e = pllm_fi_decode_run(&fi->plan, fi->float_ws, fi->int_ws, out, q16, qd, n_head, kv, scale, s);
    if (e) return fi_fail(e, "decode");
    return PLLM_OK;
}

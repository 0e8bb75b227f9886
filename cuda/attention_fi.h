/*
 * attention_fi.h: FlashInfer's batched paged decode attention as the CUDA backend uses it
 * (`pllm_cuda_params.attention`): workspaces, one plan per step, one run per layer. C API over
 * cuda/flashinfer/fi_attention.h (see there for the layout mapping).
 *
 * Which implementation is behind it depends on the build (pllm_cuda_fi_build):
 *   - the real build with FlashInfer's headers fetched (scripts/setup.sh): FlashInfer 0.7.2's
 *     kernels (cuda/flashinfer/fi_attention.cu);
 *   - the emulated build: a plain reference of the same contract (cuda/flashinfer/
 *     fi_reference.cu), so the test suite proves pllm's side of it (paged description, plan per
 *     step and per pinned buffer, F16 queries, output placement, graph replays);
 *   - the real build without the headers: none (pllm_cuda_fi_build returns NULL).
 *
 * A step's plan is made on the host before the step's launches (and before a graph's capture or
 * replay): it writes the schedule into the pinned int buffer of the step's slot (one per step in
 * flight, so a plan never overwrites a buffer whose copy has not run) and queues its copy.
 */
#pragma once

#include "cuda/device.h"
#include "cuda/flashinfer/fi_attention.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pllm_cuda_fi pllm_cuda_fi;

/* "flashinfer 0.7.2.post1", "flashinfer contract reference (emulated)", or NULL when this build
 * has no FlashInfer path. */
const char *pllm_cuda_fi_build(void);

/* Whether FlashInfer serves this model's decode attention with these dtypes; when not, why[]
 * says which of them it does not take. */
bool pllm_cuda_fi_supported(const pllm_model_config *cfg, pllm_dtype kv_dtype, pllm_dtype act,
                            char *why, size_t n);

/* Workspaces on the device (float 128 MiB, int 8 MiB) and two pinned int buffers (8 MiB each);
 * *device_bytes gets what the device holds. */
pllm_status pllm_cuda_fi_create(pllm_cuda_fi **out, pllm_cuda_dev *dev, size_t *device_bytes);
void pllm_cuda_fi_free(pllm_cuda_fi *fi, pllm_cuda_dev *dev);

/* Plan a decode step of batch requests (indptr_h [batch + 1]: their page ranges in the step's
 * indices) in slot's pinned buffer; graph: the step is (or will be) a graph replay of a fixed
 * batch. */
pllm_status pllm_cuda_fi_plan(pllm_cuda_fi *fi, pllm_cuda_dev *dev, int32_t slot,
                              const int32_t *indptr_h, int32_t batch, int32_t n_head,
                              int32_t n_head_kv, int32_t block_size, int32_t head_dim, bool graph);

/* One layer under the last plan: q16 [batch][n_head head_dim] F16 scratch gets the F32 queries
 * q (rows q_stride apart), out [batch][n_head head_dim] F16 the attention output. */
pllm_status pllm_cuda_fi_decode(pllm_cuda_fi *fi, pllm_cuda_dev *dev, void *out, void *q16,
                                const float *q, int64_t q_stride, int32_t n_head,
                                const pllm_fi_paged_kv *kv, float scale);

#ifdef __cplusplus
}
#endif

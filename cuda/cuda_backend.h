/*
 * cuda_backend.h: the CUDA backend: model/backend.h on one NVIDIA GPU (sm_80 and later), or on
 * the host emulator (cuda/emu/) when the library is the emulated build. C-callable.
 *
 * What it does (docs/cuda.md has the design and the expected time of every kernel):
 *   - weights are uploaded once at create: F16 and BF16 matrices as they are, F32 ones as F32,
 *     quantized GGUF matrices dequantized on the host (the reference dequantizer, exact) and
 *     rounded to F16 (or to the dtype params.weights asks for). Q, K and V are stacked into one
 *     matrix and gate over up into another, so each layer runs 4 GEMMs (cuBLAS, F16/BF16/F32
 *     inputs, F32 accumulation).
 *   - one KV pool allocation (kv_init), sized by the engine from kv_available, which is
 *     params.gpu_memory_fraction of the device's memory less what is in use and what the
 *     activation workspace needs.
 *   - one compute stream; each step uploads its packed plan (tokens, positions, slots, block
 *     tables, attention work lists, sampling records) from pinned memory in one copy, runs the
 *     forward pass and sampling on the device, and downloads the sampled ids (and the logprobs
 *     asked for) in one copy. Logits stay on the device unless the caller asks for them.
 *   - decode steps (every sequence one new token, every sequence sampled) of up to
 *     max_graph_batch sequences run as CUDA graphs, captured lazily per padded batch size and
 *     attention split (padding tokens store nothing and are not returned).
 *   - the vtable's submit/wait split a step so the host can prepare the next plan while the
 *     device runs this one (at most 2 steps in flight); its step is submit + wait.
 *
 * The vtable:
 *   kv_layout     F16 (default) or F32 K/V, the model's n_layer / n_head_kv / head_dim.
 *   kv_available  gpu_memory_fraction x total device memory, less the memory in use (this
 *                 process and others), less the activation workspace reserved for
 *                 reserve_tokens tokens and reserve_seqs samples per step; at most the free
 *                 memory less that reserve.
 *   kv_init       allocates the workspace reserve, then the pool (may be called again: the
 *                 cache's contents are then lost).
 *   step          validates the plan as the CPU backend does (same checks, messages naming the
 *                 field and value) before anything is queued; grows the workspace when a step
 *                 exceeds the reserve.
 *   copy_blocks   device-to-device copies of whole blocks (all layers, K and V).
 * Numerics: activations in F32 between kernels (residual stream, attention math, softmax),
 * GEMM inputs in the weight dtype, F32 accumulation; sampling in the CPU sampler's arithmetic
 * (sampling.h). With F32 weights and an F32 KV cache, logits match the CPU backend to float
 * rounding.
 *
 * Ownership: the model is borrowed and must outlive the backend. One step at a time per backend
 * (not reentrant).
 */
#pragma once

#include "model/backend.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The dtype of the weight matrices on the device (and of the GEMM inputs). */
typedef enum pllm_cuda_weights {
    PLLM_CUDA_WEIGHTS_AUTO = 0, /* BF16 models stay BF16, F32 models F32, the rest (F16 and
                                   quantized) F16 */
    PLLM_CUDA_WEIGHTS_F16,
    PLLM_CUDA_WEIGHTS_BF16,
    PLLM_CUDA_WEIGHTS_F32,
} pllm_cuda_weights;

/* Which kernels run decode attention (steps where every sequence has one new token). */
typedef enum pllm_cuda_attention {
    PLLM_CUDA_ATTN_AUTO = 0,   /* own, until bench/gpu/check.sh has shown FlashInfer agreeing
                                  with it on a GPU (docs/cuda.md, section 8) */
    PLLM_CUDA_ATTN_OWN,        /* pllm's kernels (cuda/attention_decode.cu) */
    PLLM_CUDA_ATTN_FLASHINFER, /* FlashInfer's batched paged decode (cuda/attention_fi.h): F16
                                  weights and KV, head_dim 64 or 128; create fails naming what
                                  it does not take. Prefill and mixed steps stay on own kernels */
} pllm_cuda_attention;

/* "auto", "own", "flashinfer"; pllm_cuda_attention_parse gives false for another name. */
const char *pllm_cuda_attention_name(pllm_cuda_attention a);
bool pllm_cuda_attention_parse(const char *s, pllm_cuda_attention *out);

typedef struct pllm_cuda_params {
    int32_t device;            /* ordinal; default 0 */
    float gpu_memory_fraction; /* share of the device's total memory this backend may use
                                  (weights, workspace, KV), in (0, 1]; default 0.9 */
    pllm_dtype kv_dtype;       /* PLLM_DTYPE_F16 (default) or PLLM_DTYPE_F32 */
    pllm_cuda_weights weights; /* default AUTO */
    int32_t reserve_tokens;    /* tokens per step the workspace is reserved for before the KV
                                  pool is sized; default 2048 (larger steps grow it) */
    int32_t reserve_seqs;      /* samples per step reserved for; default 256 */
    int32_t attn_split_len;    /* decode attention: positions per context split, a multiple of
                                  64; default 512 */
    int32_t attn_split_blocks; /* split a decode step's attention over the context when it has
                                  fewer (query, kv head) blocks than this; 0: 4 x the SM count
                                  (a decode block is 4 warps; 3-5 fit an SM) */
    bool no_graphs;            /* run decode steps without CUDA graphs */
    int32_t max_graph_batch;   /* largest decode batch run as a graph; default 256 */
    pllm_cuda_attention attention; /* decode attention kernels; default AUTO */
} pllm_cuda_params;

void pllm_cuda_params_defaults(pllm_cuda_params *p);

/* Devices that answer: 0 when there is no GPU or no driver (never an error). why[0..n) gets a
 * one-line reason ("no CUDA device (...)", "2 CUDA devices", "1 emulated device ..."); why may be
 * NULL. */
int pllm_cuda_device_count(char *why, size_t n);

/* Create the backend on params->device (NULL: defaults) and upload the weights. Errors name the
 * device, the tensor or the size that failed. */
pllm_status pllm_cuda_backend_create(pllm_backend *out, const pllm_model *model,
                                     const pllm_cuda_params *p);

typedef struct pllm_cuda_backend_info {
    char device_name[256];
    int32_t ordinal, sm_major, sm_minor, n_sm;
    bool emulated;       /* the host emulator, not a GPU */
    size_t total_bytes;  /* device memory */
    size_t weight_bytes; /* weights on the device */
    pllm_dtype weight_dtype, kv_dtype;
    size_t kv_bytes;            /* the KV pool (0 before kv_init) */
    size_t workspace_bytes;     /* activations, logits, plan and result buffers */
    double load_seconds;        /* weight conversion and upload */
    int64_t steps, graph_steps; /* steps run, and those run as a CUDA graph */
    int64_t split_steps;        /* steps whose decode attention was split over the context */
    int32_t graphs;             /* graphs captured */
    char graph_error[256];      /* why graph capture was given up ("" when it was not): a
                                   capture the driver refuses makes decode steps run eagerly */
    char attention[96];         /* the decode attention path: "own", or the FlashInfer build
                                   ("flashinfer 0.7.2.post1", the emulated contract reference) */
    int64_t fi_steps;           /* steps whose decode attention FlashInfer ran */
    int64_t src_steps;          /* steps whose token_src (backend.h) was resolved on the device */
    int64_t src_host_steps;     /* ... on the host: the results buffer grew, the step waited */
    double device_seconds;      /* CUDA-event time of the completed steps (device busy) */
} pllm_cuda_backend_info;

/* Describe a backend made by pllm_cuda_backend_create. */
void pllm_cuda_backend_get_info(const pllm_backend *b, pllm_cuda_backend_info *out);

#ifdef __cplusplus
}
#endif

/*
 * cpu_backend.h: the CPU backend (the default; runs everywhere). Implements engine/backend.h.
 *
 * Computes directly from the model's memory-mapped weights in their file dtype (quantized
 * blocks are dequantized on the fly inside the dot products, never into a full f32 copy), with
 * a persistent thread pool of n_threads threads.
 */
#pragma once

#include "engine/backend.h"
#include "engine/model.h"

typedef struct pllm_cpu_params {
    int n_threads;       /* 0: the number of online cores */
    pllm_dtype kv_dtype; /* PLLM_DTYPE_F32 (default) or PLLM_DTYPE_F16 */
} pllm_cpu_params;

void pllm_cpu_params_defaults(pllm_cpu_params *p);
/* The model is borrowed and must outlive the backend. */
pllm_status pllm_cpu_backend_create(pllm_backend *out, const pllm_model *model, const pllm_cpu_params *p);
/* The kernel table name ("scalar", "avx2", "avx512") a CPU backend created above runs, and its
 * thread count (for reports and benchmarks). */
const char *pllm_cpu_backend_describe(const pllm_backend *b, int *n_threads);

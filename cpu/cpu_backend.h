/*
 * cpu_backend.h: the CPU backend (the default; runs everywhere). Implements model/backend.h.
 *
 * Computes directly from the model's memory-mapped weights in their file dtype (quantized
 * blocks are dequantized on the fly inside the dot products, never into a full f32 copy), with
 * a persistent thread pool of n_threads threads (cpu/threadpool.h). Kernels are chosen at run
 * time for the machine (cpu/kernels.h: scalar, AVX2, AVX-512; params.isa_cap caps the choice).
 *
 * Numerics (cpu/kernels.h): by default, quantized weight matrices multiply int8 activations
 * (per-32 block scales, exact integer dot products; the llama.cpp convention); float weights,
 * and every matrix when params.math is PLLM_CPU_MATH_F32, use float32 math, which differs
 * from float64 math on the dequantized weights only by float32 rounding. Greedy results are
 * bitwise identical for any batch composition, chunking of prefills and thread count (per
 * kernel table).
 *
 * The environment: pllm_cpu_params_defaults() is the one place the backend reads it
 * (PLLM_CPU_MATH, PLLM_CPU_ISA, PLLM_CPU_QMM, PLLM_CPU_PHASE_STATS, for tests and benchmarks). It
 * gives defaults only: a field the caller sets afterwards wins.
 *
 * The vtable:
 *   kv_layout     F32, F16 or int8 K/V (params.kv_dtype; int8: PLLM_KV_DTYPE_I8, per-row fp16
 *                 scales, engine/backend.h), the model's n_layer / n_head_kv / head_dim.
 *   kv_available  MemAvailable (/proc/meminfo) less the model's weight bytes (mapped file
 *                 pages must stay resident) less max(1 GiB, 10% of MemAvailable).
 *   kv_init       allocates n_layer x 2 x n_blocks x n_head_kv x block_size x head_dim
 *                 elements (memory is committed lazily by the OS as blocks are written);
 *                 may be called again to re-size (the cache's contents are then lost).
 *   step          validates the plan first (token ids in the vocabulary, sequences covering
 *                 the tokens in order, positions = n_ctx - n_new + j, slots where the block
 *                 table puts each position, block ids inside the pool, no slot written twice,
 *                 sample requests and sampling parameters valid) and returns PLLM_ERR_* with a
 *                 message naming the field and value instead of computing on a bad plan.
 *                 Logits are computed only for sampled tokens; sampling is pllm_sample().
 *   copy_blocks   copies whole blocks (all layers, K and V).
 * One step at a time: the backend is not reentrant.
 */
#pragma once

#include "cpu/kernels.h"
#include "model/backend.h"
#include "model/model.h"

/* How quantized weight matrices are multiplied (float weights always take float32 math). */
typedef enum pllm_cpu_math {
    PLLM_CPU_MATH_AUTO = 0, /* int8 activations where the machine has an integer kernel table */
    PLLM_CPU_MATH_INT8,     /* int8 activations (falls back to float32 on a table without them) */
    PLLM_CPU_MATH_F32,      /* float32 throughout: the exact reference numerics */
} pllm_cpu_math;

typedef struct pllm_cpu_params {
    int n_threads;       /* 0: the number of online cores */
    pllm_dtype
        kv_dtype; /* PLLM_DTYPE_F32 (default), PLLM_DTYPE_F16, PLLM_KV_DTYPE_I8 (int8 with per-row
                   * scales; head_dim a multiple of 4), or PLLM_DTYPE_COUNT: auto (F16 when
                   * quantized matrices take the int8 path, else F32; what the CLI's auto asks) */
    pllm_cpu_math math; /* PLLM_CPU_MATH_AUTO (default; PLLM_CPU_MATH=f32|int8 sets the default) */
    pllm_cpu_isa isa_cap; /* the best kernel table up to this one (default PLLM_CPU_ISA_COUNT: no
                           * cap; PLLM_CPU_ISA=scalar|avx2|avx512|avx512vnni sets the default) */
    bool qmm_scalar;      /* tests: the integer matmuls and quantizer of the scalar reference table,
                           * everything else from the chosen one (default false; PLLM_CPU_QMM=scalar) */
    bool phase_stats;     /* time each phase of the forward pass per thread (read with
                           * pllm_cpu_backend_phase_stats; a table goes to stderr when the backend
                           * is freed); default false, PLLM_CPU_PHASE_STATS=1 sets it (0: off) */
} pllm_cpu_params;

/* The phases of a forward pass: each ends at a barrier of the thread pool (sampling at the
 * pass's end), so a thread's time in a phase is its work up to that barrier plus its wait in it
 * (the wait is the imbalance between the threads). */
typedef enum pllm_cpu_phase {
    PLLM_CPU_PH_EMBED,     /* embeddings and rotary tables */
    PLLM_CPU_PH_ATTN_NORM, /* RMSNorm and the int8 activations of q/k/v */
    PLLM_CPU_PH_QKV,       /* the q, k, v projections */
    PLLM_CPU_PH_ROPE_KV,   /* RoPE, and the K/V store */
    PLLM_CPU_PH_ATTN,      /* attention */
    PLLM_CPU_PH_O,         /* the output projection (and its int8 activations), the residual */
    PLLM_CPU_PH_FFN_NORM,  /* RMSNorm and the int8 activations of gate/up */
    PLLM_CPU_PH_GATE_UP,   /* gate and up, SwiGLU (GeGLU), the int8 activations of down */
    PLLM_CPU_PH_DOWN,      /* down, the residual */
    PLLM_CPU_PH_MOE,       /* a mixture-of-experts FFN, all of it */
    PLLM_CPU_PH_HEAD_NORM, /* the final RMSNorm of the sampled tokens */
    PLLM_CPU_PH_HEAD,      /* the LM head */
    PLLM_CPU_PH_SAMPLE,    /* sampling */
    PLLM_CPU_PH_COUNT
} pllm_cpu_phase;

const char *pllm_cpu_phase_name(pllm_cpu_phase ph);

typedef struct pllm_cpu_phase_stats {
    int n_threads;
    int64_t steps, tokens, samples;   /* forward passes run, their tokens and sampled rows */
    double work_s[PLLM_CPU_PH_COUNT]; /* seconds working in each phase, summed over threads */
    double wait_s[PLLM_CPU_PH_COUNT]; /* seconds waiting at the phase's barrier, summed */
} pllm_cpu_phase_stats;

/* Built-in defaults, then the environment's (above). A value the environment gives that is not
 * one of those listed is PLLM_ERR_INVALID naming the variable; *p then has the built-in default
 * for it and the rest filled. */
pllm_status pllm_cpu_params_defaults(pllm_cpu_params *p);
/* The model is borrowed and must outlive the backend. */
pllm_status pllm_cpu_backend_create(pllm_backend *out, const pllm_model *model, const pllm_cpu_params *p);
/* The kernel table name ("scalar", "avx2", "avx512") a CPU backend created above runs, and its
 * thread count (for reports and benchmarks). */
const char *pllm_cpu_backend_describe(const pllm_backend *b, int *n_threads);
/* Whether a CPU backend created above multiplies quantized matrices with int8 activations
 * (false: float32 math throughout). */
bool pllm_cpu_backend_int_math(const pllm_backend *b);
/* The KV cache dtype a CPU backend created above uses (auto resolved). */
pllm_dtype pllm_cpu_backend_kv_dtype(const pllm_backend *b);
/* The phase times so far; false (and zeros) unless the backend was created with phase_stats. */
bool pllm_cpu_backend_phase_stats(const pllm_backend *b, pllm_cpu_phase_stats *out);

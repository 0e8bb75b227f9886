/*
 * ops.h: the CPU backend's per-token operations besides matmul: RMSNorm, RoPE, SwiGLU,
 * embedding lookup, and paged attention over the KV cache (layout in model/backend.h).
 *
 * Each function works on one token (or one token and one head) so the forward pass can split
 * work across threads any way it likes; results never depend on that split. No allocation:
 * callers pass scratch.
 */
#pragma once

#include "cpu/kernels.h"
#include "model/backend.h"
#include "model/model.h"

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i].  out, x, w: [n]. out may equal x. The scalar
 * reference: the forward pass calls its kernel table's rmsnorm (kernels.h). */
void pllm_cpu_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);

/* Inverse frequencies of the rotary embedding, inv_freq[rope_dim / 2]: the backends' one rule,
 * pllm_backend_rope_freqs (model/backend.h), under the name the kernel tests use. */
static inline void pllm_cpu_rope_freqs(double *inv_freq, const pllm_model_config *cfg,
                                       const float *freq_factors)
{
    pllm_backend_rope_freqs(inv_freq, cfg, freq_factors);
}
/* cos_sin[2 * i] = cos(pos * inv_freq[i]), cos_sin[2 * i + 1] = sin(...), i < n_pairs;
 * computed in double and rounded to float. */
void pllm_cpu_rope_table(float *cos_sin, int32_t pos, const double *inv_freq, int32_t n_pairs);
/* The same with cos and sin multiplied by mscale in double before rounding (LongRoPE's
 * attention factor, model.h). */
void pllm_cpu_rope_table_scaled(float *cos_sin, int32_t pos, const double *inv_freq,
                                int32_t n_pairs, double mscale);
/* Rotate the first rope_dim dims of one head x[head_dim] in place: NORM rotates
 * (x[2i], x[2i+1]), NEOX rotates (x[i], x[i + rope_dim/2]). */
void pllm_cpu_rope_apply(float *x, const float *cos_sin, int32_t rope_dim, pllm_rope_mode mode);

/* gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g).  gate, up: [n]. The scalar
 * reference (libm expf): the forward pass calls its kernel table's swiglu (kernels.h). */
void pllm_cpu_swiglu(float *gate, const float *up, int64_t n);

/* Where the K (or V) vectors of layer-local cache `cache` live:
 *   cache: [n_blocks][n_head_kv][block_size][head_dim] of kv->dtype. */
typedef struct pllm_cpu_attn_args {
    const void *k_cache, *v_cache;  /* this layer's caches */
    const pllm_kv_layout *kv;
    const int32_t *block_table;     /* the sequence's block table */
    int32_t n_pos;                  /* attend to positions [0, n_pos) */
    float scale;                    /* 1/sqrt(head_dim), or the model's attn_scale */
    int32_t window;                 /* > 0: a sliding-window layer (model.h): a query at position
                                     * p attends to [max(0, p + 1 - window), p + 1) only */
} pllm_cpu_attn_args;

/* gate[i] = gelu_tanh(gate[i]) * up[i] (Gemma's GeGLU), gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi)
 * (g + 0.044715 g^3))), as PyTorch's gelu(approximate="tanh"). gate, up: [n]. */
void pllm_cpu_geglu(float *gate, const float *up, int64_t n);

/* out[head_dim] = softmax(q . K^T * scale) V over positions [0, n_pos) (with a window: the last
 * window of them) of kv head kv_head,
 * one block of positions at a time with an online softmax (running max and sum).
 * q: [head_dim]; scores: scratch of block_size floats. */
void pllm_cpu_attend(float *out, const float *q, int32_t kv_head, const pllm_cpu_attn_args *a,
                     const pllm_cpu_kernels *kern, float *scores);

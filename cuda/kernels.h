/*
 * kernels.h: the C launchers of pllm's CUDA kernels, one per kernel (or kernel family), and the
 * plain-data records (attention work items, sampling parameters, sampling results) the host
 * packs for them. Each launcher takes the device context first, then outputs, then inputs, then
 * sizes; validates its arguments; queues the kernel on the context's stream; and returns the
 * launch status (errors of the kernel's execution surface at the next pllm_cuda_sync). All
 * pointers are device memory. The comment above each kernel in its .cu file gives the launch
 * mapping, the shared memory and the bytes/FLOPs it moves.
 *
 * Launchers never allocate: workspace is the caller's (sizes from the *_workspace helpers), so
 * every launch can be captured into a CUDA graph.
 */
#pragma once

#include "cuda/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "model/sampling.h"

/*
 * RMSNorm fused with the residual add (cuda/rmsnorm.cu). For each row r < n_rows:
 *     if x: residual[r] += x[r]          (residual is updated in place)
 *     out[r] = residual[r] / sqrt(mean(residual[r]^2) + eps) * weight
 * out: [n_rows][dim] of out_dtype (F32, F16 or BF16); residual, x: [n_rows][dim] F32 (x may be
 * NULL: plain RMSNorm of residual); weight: [dim] F32. out must not alias residual or x.
 */
pllm_status pllm_cuda_rmsnorm_residual(pllm_cuda_dev *dev, void *out, pllm_dtype out_dtype,
                                       float *residual, const float *x, const float *weight,
                                       int32_t n_rows, int32_t dim, float eps);

/*
 * RMSNorm of gathered rows (cuda/rmsnorm.cu), for the final norm of the sampled tokens only:
 *     out[i] = norm(residual[rows[i]] + (x ? x[rows[i]] : 0)) * weight,   i < n_rows
 * residual and x are read only. out: [n_rows][dim] of out_dtype; residual, x: [*][dim] F32;
 * rows: [n_rows] int32 row indices.
 */
pllm_status pllm_cuda_rmsnorm_rows(pllm_cuda_dev *dev, void *out, pllm_dtype out_dtype,
                                   const float *residual, const float *x, const int32_t *rows,
                                   const float *weight, int32_t n_rows, int32_t dim, float eps);

/*
 * Per-head RMSNorm of q and k in place (cuda/rmsnorm.cu; Qwen3's q_norm and k_norm), before
 * qkv_rope. For each token t < n_tokens and head h < n_head + n_head_kv, the head_dim columns
 * x = qkv[t * ld + h * head_dim ..] become (x * r) * w, r = 1 / sqrt(mean(x^2) + eps), w =
 * q_weight for h < n_head (q heads) else k_weight (k heads, which follow the q heads).
 * qkv: [n_tokens][ld] F32, ld >= (n_head + n_head_kv) * head_dim; weights [head_dim] F32.
 */
pllm_status pllm_cuda_head_rmsnorm(pllm_cuda_dev *dev, float *qkv, int64_t ld,
                                   const float *q_weight, const float *k_weight, int32_t n_tokens,
                                   int32_t n_head, int32_t n_head_kv, int32_t head_dim, float eps);

/*
 * Embedding gather (cuda/embedding.cu): out[t] = table[tokens[t]] as F32, for t < n_tokens.
 * out: [n_tokens][dim] F32; table: [n_vocab][dim] of table_dtype (F32, F16 or BF16); tokens:
 * [n_tokens] int32, each in [0, n_vocab) (an id outside traps: the device reports a launch
 * failure, as the engine validates ids before).
 */
pllm_status pllm_cuda_embedding(pllm_cuda_dev *dev, float *out, const void *table,
                                pllm_dtype table_dtype, const int32_t *tokens, int32_t n_tokens,
                                int32_t dim, int32_t n_vocab);
/* The same, each element times scale in float (Gemma: sqrt(n_embd); 1 is the gather above). */
pllm_status pllm_cuda_embedding_scaled(pllm_cuda_dev *dev, float *out, const void *table,
                                       pllm_dtype table_dtype, const int32_t *tokens,
                                       int32_t n_tokens, int32_t dim, int32_t n_vocab, float scale);

/*
 * The device-side token feed of an overlapped step (cuda/embedding.cu, backend.h's token_src):
 * tokens[i] = prev[src[i]] where src[i] >= 0, for i < n; tokens, src [n] int32 device memory;
 * prev: the previous step's sampled ids on the device (src[i] < their count: checked by the
 * caller). Queued before the step's forward pass, after the previous step's sampling.
 */
pllm_status pllm_cuda_resolve_tokens(pllm_cuda_dev *dev, int32_t *tokens, const int32_t *src,
                                     const int32_t *prev, int32_t n);
/* The same for penalty histories: base[pairs[2i]] = tokens[pairs[2i + 1]] for i < n (the pending
 * last entry of a sample's packed output ids, addressed from the id lists' base, gets its
 * sequence's resolved token); device memory; queued after pllm_cuda_resolve_tokens. */
pllm_status pllm_cuda_resolve_history(pllm_cuda_dev *dev, int32_t *base, const int32_t *pairs,
                                      const int32_t *tokens, int32_t n);

/*
 * Gemma 3's post-norms (cuda/rmsnorm.cu): residual[r] += RMSNorm(x[r]) * weight for r < n_rows,
 * the norm as head_rmsnorm computes it. residual, x: [n_rows][dim] F32 (x read only, not
 * aliasing residual); weight [dim] F32.
 */
pllm_status pllm_cuda_post_norm_add(pllm_cuda_dev *dev, float *residual, const float *x,
                                    const float *weight, int32_t n_rows, int32_t dim, float eps);

/*
 * QKV bias + RoPE + K/V store (cuda/qkv_rope.cu), one kernel per layer. For each token t:
 *   q = qkv[t][0, QD), k = qkv[t][QD, QD + KVD), v = qkv[t][QD + KVD, QD + 2 KVD)
 *   (QD = n_head * head_dim, KVD = n_head_kv * head_dim, row stride ld >= QD + 2 KVD);
 *   add bias (when not NULL: [QD + 2 KVD] F32), rotate the first rope_dim dims of every q and k
 *   head by positions[t] (model.h: NORM pairs (2i, 2i+1), NEOX pairs (i, i + rope_dim/2),
 *   angle positions[t] * inv_freq[i] taken in double), write q and k back into qkv, and store k
 *   and v at slots[t] of this layer's caches (backend.h layout, kv_dtype F32 or F16). A slot
 *   < 0 stores nothing (padding tokens of a captured decode graph).
 * qkv: [n_tokens][ld] F32 (in/out); inv_freq: [rope_dim / 2] double.
 */
typedef struct pllm_cuda_qkv_rope_args {
    float *qkv;
    int64_t ld;
    const float *bias;
    const int32_t *positions, *slots; /* [n_tokens] */
    const double *inv_freq;
    /* LongRoPE (model.h): tokens at positions >= long_from take inv_freq_long (NULL: none), and
     * cos/sin are multiplied by mscale in double before rounding (1: none) */
    const double *inv_freq_long;
    int32_t long_from;
    double mscale;
    void *k_cache, *v_cache; /* [n_blocks][n_head_kv][block_size][head_dim] */
    /* PLLM_KV_DTYPE_FP8 (backend.h): the caches' per-row scales [n_blocks][n_head_kv]
     * [block_size] half; the kernel takes each row's amax over its head_dim values. NULL
     * otherwise */
    void *k_scales, *v_scales;
    pllm_dtype kv_dtype;
    int32_t n_tokens, n_head, n_head_kv, head_dim, rope_dim, block_size;
    int32_t rope_neox; /* 0: NORM, 1: NEOX */
} pllm_cuda_qkv_rope_args;
pllm_status pllm_cuda_qkv_rope(pllm_cuda_dev *dev, const pllm_cuda_qkv_rope_args *a);

/* The fp8 KV cache's element conversion on the device (cuda/qkv_rope.cu, for tests): codes[i] =
 * E4M3(x[i] / scale) as qkv_rope stores it (__nv_cvt_float_to_fp8, __NV_SATFINITE; 0 when scale
 * is 0), values[i] = that code read back as the attention kernels read it (times 1, not scale).
 * x, codes, values: [n] device memory. */
pllm_status pllm_cuda_fp8_roundtrip(pllm_cuda_dev *dev, const float *x, float scale, uint8_t *codes,
                                    float *values, int32_t n);

/*
 * Paged attention (cuda/attention_decode.cu, cuda/attention_prefill.cu). Query head h of token
 * row t is q[t * q_stride + h * head_dim .. + head_dim) (F32, as qkv_rope leaves it); it uses
 * kv head h / (n_head / n_head_kv) of this layer's caches through its sequence's block table
 * (block_tables + bt: position p lives in block block_tables[bt + p / block_size]). The output
 * row t, head h is out[t * n_head * head_dim + h * head_dim ..] in out_dtype:
 *     out = softmax(scale * q . K[0 .. n)) V[0 .. n)
 * where n is the number of positions the query attends to (its position + 1).
 */
typedef struct pllm_cuda_attn_args {
    void *out;
    pllm_dtype out_dtype; /* F32, F16 or BF16 */
    const float *q;
    int64_t q_stride;
    const void *k_cache, *v_cache; /* this layer's */
    const void *k_scales, *v_scales; /* PLLM_KV_DTYPE_FP8: per-row scales (backend.h), else NULL */
    pllm_dtype kv_dtype;             /* F32, F16 or PLLM_KV_DTYPE_FP8 */
    const int32_t *block_tables;
    int32_t n_head, n_head_kv, head_dim, block_size;
    float scale;
    /* > 0: a sliding-window layer (model.h): a query at position p attends to positions
     * [max(0, p + 1 - window), p + 1) only; 0: all of [0, p + 1) */
    int32_t window;
} pllm_cuda_attn_args;

/* A decode query: one token attending to positions [0, n_ctx). n_ctx == 0 (padding) writes
 * zeros. */
typedef struct pllm_cuda_attn_item {
    int32_t tok; /* its row in q and out */
    int32_t n_ctx;
    int32_t bt; /* its block table's offset in block_tables */
    int32_t pad_;
} pllm_cuda_attn_item;

/* The largest head_dim the attention kernels take. */
#define PLLM_CUDA_ATTN_MAX_HEAD_DIM 256

/*
 * Decode attention over n_items single-token queries. With n_splits > 1 each query's context is
 * cut into n_splits ranges of split_len positions (the last ones may be empty), computed by
 * separate blocks into workspace and combined by a second kernel; n_splits == 1 takes each
 * query's whole context (split_len is then not used) and writes out directly. workspace:
 * pllm_cuda_attn_decode_workspace(n_items, n_head, head_dim, n_splits) bytes (0 when
 * n_splits == 1). Preconditions: head_dim even and <= 256; with n_splits > 1, n_splits *
 * split_len >= every n_ctx and split_len a multiple of 64.
 */
/* Blocks per decode query (and per split): n_head_kv times the query-head groups of a kv head
 * one block takes (up to 4 heads a block). */
int32_t pllm_cuda_attn_decode_blocks(int32_t n_head, int32_t n_head_kv);
size_t pllm_cuda_attn_decode_workspace(int32_t n_items, int32_t n_head, int32_t head_dim,
                                       int32_t n_splits);
pllm_status pllm_cuda_attn_decode(pllm_cuda_dev *dev, const pllm_cuda_attn_args *a,
                                  const pllm_cuda_attn_item *items, int32_t n_items,
                                  int32_t n_splits, int32_t split_len, void *workspace);

/* A prefill tile: n_q consecutive query tokens of one sequence, rows tok0 .. tok0 + n_q - 1 at
 * positions pos0 .. pos0 + n_q - 1; query i attends causally to [0, pos0 + i]. */
typedef struct pllm_cuda_attn_tile {
    int32_t tok0, n_q, pos0, bt;
} pllm_cuda_attn_tile;

/* Query tokens per prefill tile for this head layout (tiles built by the host must have
 * n_q <= this). */
int32_t pllm_cuda_attn_prefill_tile_tokens(int32_t n_head, int32_t n_head_kv);
pllm_status pllm_cuda_attn_prefill(pllm_cuda_dev *dev, const pllm_cuda_attn_args *a,
                                   const pllm_cuda_attn_tile *tiles, int32_t n_tiles);

/*
 * Mixture of experts (cuda/moe.cu; model.h gives the routing). A layer runs:
 *   the router GEMM (logits [n_tokens][n_expert] F32, cuBLAS), then pllm_cuda_moe_route: softmax
 *   and top-k per token (sel, w), the (token, choice) entries grouped by expert into n_rows rows
 *   (row_of, row_tok, tile_exp, off: expert e's rows start at off[e], a multiple of
 *   PLLM_CUDA_MOE_TILE, padding rows have row_tok -1) and the normed inputs x (x_dtype) gathered
 *   into xg [n_rows][dim] F32;
 *   pllm_cuda_moe_gemm for gate/up (W [n_expert][2 n_ff_exp][dim]: expert e's gate rows over its
 *   up rows) and, after pllm_cuda_swiglu (F32), for down (W [n_expert][dim][n_ff_exp]);
 *   pllm_cuda_moe_combine: out[t] = sum_j w[t][j] y[row_of[t][j]] in choice order (Qwen2-MoE:
 *   plus its shared expert's output times the sigmoid of the router's extra logit column).
 * n_rows = pllm_cuda_moe_rows(n_tokens, k, n_expert): every size depends on the token count only.
 * All arrays are device memory.
 */
#define PLLM_CUDA_MOE_TILE 16
int32_t pllm_cuda_moe_rows(int32_t n_tokens, int32_t k, int32_t n_expert);
typedef struct pllm_cuda_moe_args {
    const float *logits; /* [n_tokens][logits_ld] (columns >= n_expert: not read) */
    int32_t logits_ld;
    const void *x; /* [n_tokens][dim] x_dtype */
    pllm_dtype x_dtype;
    int32_t *sel;      /* [n_tokens][k] out */
    float *w;          /* [n_tokens][k] out */
    int32_t *row_of;   /* [n_tokens][k] out */
    int32_t *row_tok;  /* [n_rows] out */
    int32_t *tile_exp; /* [n_rows / PLLM_CUDA_MOE_TILE] out */
    int32_t *off;      /* [n_expert + 1] out */
    float *xg;         /* [n_rows][dim] out */
    int32_t n_tokens, n_expert, k, dim, n_rows;
    bool norm;
} pllm_cuda_moe_args;
pllm_status pllm_cuda_moe_route(pllm_cuda_dev *dev, const pllm_cuda_moe_args *a);
/* c [n_rows][n] F32 = per tile of PLLM_CUDA_MOE_TILE rows (expert e = tile_exp[tile], -1: skipped)
 * a [rows][kd] F32 times W[e]^T, W [n_expert][n][kd] of w_dtype (F32, F16, BF16). */
pllm_status pllm_cuda_moe_gemm(pllm_cuda_dev *dev, float *c, const float *a, const void *w,
                               pllm_dtype w_dtype, const int32_t *tile_exp, int32_t n_rows,
                               int32_t n, int32_t kd);
/* ys (or NULL): a shared expert's output [n_tokens][dim] F32, added times sigmoid(sg[t * sg_ld]) */
pllm_status pllm_cuda_moe_combine(pllm_cuda_dev *dev, float *out, const float *y,
                                  const int32_t *row_of, const float *w, int32_t n_tokens,
                                  int32_t k, int32_t dim, const float *ys, const float *sg,
                                  int32_t sg_ld);

/*
 * SwiGLU over the fused gate/up projection (cuda/swiglu.cu):
 *     out[t][i] = silu(gu[t][i]) * gu[t][n_ff + i],  silu(g) = g / (1 + e^-g)
 * gu: [n_tokens][2 n_ff] of dtype (F32, F16 or BF16: the output of one GEMM with the gate rows
 * stacked over the up rows); out: [n_tokens][n_ff] of the same dtype; math in F32.
 */
pllm_status pllm_cuda_swiglu(pllm_cuda_dev *dev, void *out, const void *gu, pllm_dtype dtype,
                             int32_t n_tokens, int32_t n_ff);
/* The same with gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) for silu (Gemma's
 * GeGLU, as PyTorch's gelu(approximate="tanh") and the CPU's pllm_cpu_geglu). */
pllm_status pllm_cuda_geglu(pllm_cuda_dev *dev, void *out, const void *gu, pllm_dtype dtype,
                            int32_t n_tokens, int32_t n_ff);

/*
 * Sampling (cuda/sample.cu): the device twin of pllm_sample (model/sampling.h), one block per
 * sample. The host fills one record per sample; id lists (prompt, output, banned) are packed
 * into one int32 array and referenced by offset.
 */
enum {
    PLLM_CUDA_SAMPLE_REP = 1,  /* repetition penalty over prompt and output ids */
    PLLM_CUDA_SAMPLE_FREQ = 2, /* frequency/presence penalties over output ids */
};
#define PLLM_CUDA_MAX_TOP 20 /* sampling.h: logprobs <= 20 */

typedef struct pllm_cuda_sample_params {
    float temperature, top_p, min_p;
    float repetition_penalty, presence_penalty, frequency_penalty;
    int32_t top_k; /* as in pllm_sampling_params (0 or -1: off) */
    int32_t n_top; /* top logprobs wanted, <= PLLM_CUDA_MAX_TOP */
    uint64_t seed;
    uint64_t step;                /* the RNG step: the number of tokens generated so far */
    int32_t flags;                /* PLLM_CUDA_SAMPLE_* */
    int32_t prompt_off, n_prompt; /* prompt ids (used with REP) */
    int32_t output_off, n_output; /* output ids (used with REP or FREQ) */
    int32_t banned_off, n_banned;
    int32_t n_valid; /* the row's first n_valid logits are the vocabulary (<= n_vocab; ids past
                        it have no token and are never sampled or listed) */
} pllm_cuda_sample_params;

typedef struct pllm_cuda_sample_top {
    int32_t ids[PLLM_CUDA_MAX_TOP];
    float logprobs[PLLM_CUDA_MAX_TOP];
} pllm_cuda_sample_top;

typedef struct pllm_cuda_sample_args {
    const float *logits; /* [n_samples][n_vocab], read only */
    float *work;         /* [n_samples][n_vocab] processed logits (scratch) */
    int32_t *counts;     /* [n_samples][n_vocab], all zero on entry; left all zero */
    const pllm_cuda_sample_params *params; /* [n_samples] */
    const int32_t *ids;                    /* the packed id lists */
    int32_t *tokens;                       /* [n_samples] out */
    float *logprobs;                       /* [n_samples] out: raw log-prob of the token */
    pllm_cuda_sample_top *top; /* [n_samples] out (entries [0, n_top) written); may be NULL when
                                  no sample asks for top logprobs */
    void *part;      /* [n_samples][n_parts] per-chunk statistics (pllm_cuda_sample_part_bytes) */
    int32_t n_parts; /* chunks each row's statistics pass is split into, in [1, 32]
                        (pllm_cuda_sample_parts) */
    int32_t n_samples, n_vocab;
} pllm_cuda_sample_args;
/* Two launches: the row statistics (raw max, arg-max, log-softmax normaliser) over n_samples x
 * n_parts blocks, then the sampling kernel (one block a sample), which needs no pass of its own
 * over a greedy row without bans, penalties or top logprobs. */
pllm_status pllm_cuda_sample(pllm_cuda_dev *dev, const pllm_cuda_sample_args *a);
#define PLLM_CUDA_SAMPLE_MAX_PARTS 32
/* Bytes of args.part for n_samples rows of n_parts chunks. */
size_t pllm_cuda_sample_part_bytes(int32_t n_samples, int32_t n_parts);
/* The chunks per row that spread n_samples rows of n_vocab logits over a device of n_sm SMs
 * (about 4 blocks an SM, chunks of at least 4096 logits): 1 .. PLLM_CUDA_SAMPLE_MAX_PARTS. */
int32_t pllm_cuda_sample_parts(int32_t n_samples, int32_t n_vocab, int32_t n_sm);

/* Host side (cuda/sample_pack.c): the ids a request needs uploaded (its prompt when the
 * repetition penalty is on, its output when a penalty is on, its banned ids), and its record:
 * the lists are copied to ids[0 ..) and referenced at offsets ids_base + ... of the packed
 * array. n_valid is ctx->n_valid when in (0, n_vocab), else n_vocab; n_top is
 * min(p->logprobs, n_valid). */
int32_t pllm_cuda_sample_n_ids(const pllm_sampling_params *p, const pllm_sample_ctx *ctx);
void pllm_cuda_sample_fill(pllm_cuda_sample_params *rec, const pllm_sampling_params *p,
                           const pllm_sample_ctx *ctx, int32_t n_vocab, int32_t *ids,
                           int32_t ids_base);

#ifdef __cplusplus
}
#endif

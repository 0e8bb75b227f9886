/*
 * cuda_internal.h: what the CUDA backend's host files share (cuda_backend.c: the vtable, steps,
 * graphs; cuda_weights.c: the upload; plan validation is model/backend.c's). Not for kernels.
 */
#pragma once

#include "cuda/cuda_backend.h"
#include "cuda/kernels.h"

#define CUDA_MAX_GRAPHS 256 /* captured graphs kept at most (then decode steps run eagerly) */
#define CUDA_MAX_SPLITS 32  /* decode attention splits at most (longer contexts split coarser) */

/* A layer's weights on the device. */
typedef struct cuda_layer {
    void *w_qkv;      /* [QD + 2 KVD][n_embd] wdt: wq rows, then wk, then wv */
    void *w_o;        /* [n_embd][QD] wdt */
    void *w_gu;       /* [2 n_ff][n_embd] wdt: w_gate rows, then w_up */
    void *w_down;     /* [n_embd][n_ff] wdt */
    float *attn_norm; /* [n_embd] */
    float *ffn_norm;  /* [n_embd] */
    float *b_qkv;     /* [QD + 2 KVD] or NULL */
    float *q_norm;    /* [head_dim] or NULL (Qwen3) */
    float *k_norm;    /* [head_dim] or NULL */
    float *attn_post_norm, *ffn_post_norm; /* [n_embd] or NULL (Gemma 3) */
    int32_t window; /* sliding-window layer: the window (model.h); 0: global */
    /* mixture-of-experts layer (w_router != NULL; w_gu and w_down are NULL then) */
    void *w_router; /* [n_expert (+ 1: the shared expert's gate row)][n_embd] wdt */
    void *w_gu_exp; /* [n_expert][2 n_ff_exp][n_embd] wdt: expert e's gate rows over its up rows */
    void *w_down_exp; /* [n_expert][n_embd][n_ff_exp] wdt */
    void *w_gu_sh;    /* [2 n_ff_shexp][n_embd] wdt: the shared expert's gate over up, or NULL */
    void *w_down_sh;  /* [n_embd][n_ff_shexp] wdt */
} cuda_layer;

/* The MoE workspace for cap_tokens tokens (cuda_moe.c; kernels.h gives the layout). */
typedef struct cuda_moe_ws {
    int32_t cap_tokens, n_rows;
    float *logits, *w, *xg, *gu, *h, *y;
    void *gs, *hs; /* [T][2 n_ff_shexp], [T][n_ff_shexp] wdt: the shared expert's gate/up, swiglu */
    float *ys;     /* [T][n_embd]: its output */
    int32_t *sel, *row_of, *row_tok, *tile_exp, *off;
    size_t bytes;
} cuda_moe_ws;

/* Where a packed plan's arrays live, as byte offsets from its start; a step's counts decide
 * them (all but ids, which follows the variable-length block tables: the kernels address it
 * from the block tables' start), so a graph captured for (T, S, items, tiles) reads a later
 * plan of the same counts. */
typedef struct cuda_plan_layout {
    int32_t n_tokens, n_samples, n_items, n_tiles; /* as packed (graphs: padded) */
    size_t tokens, positions, slots, token_src, rows, items, tiles, params, fi_indptr, fi_last,
        block_tables, ids, fix;
    /* the hybrid KV layout (kv.n_blocks_sw > 0; else empty): the sliding layers' slots [T] and
     * work lists (items and tiles as above, their bt into the sliding tables, which follow the
     * global ones in the block-table region) */
    size_t sw_slots, sw_items, sw_tiles;
    size_t bytes; /* total, with the block tables and ids that follow */
} cuda_plan_layout;

/* A captured decode graph: batch B (padded), attention splits. */
typedef struct cuda_graph {
    int32_t batch, n_splits, split_len;
    bool fi; /* its decode attention is FlashInfer's */
    pllm_cuda_graph *g;
} cuda_graph;

/* A submitted step, until wait(). */
typedef struct cuda_pending {
    bool busy;
    pllm_step_out *out;
    int32_t n_samples, s_cap; /* real samples; the results layout's sample capacity */
    int32_t *req_top;         /* [n_samples] n_top of each sample (host copy) */
    int32_t req_top_cap;
    size_t res_bytes; /* bytes downloaded */
    bool timed;       /* ev_start .. ev_done bracket its device work */
} cuda_pending;

typedef struct cuda_ctx {
    const pllm_model *model;
    pllm_cuda_params params;
    pllm_cuda_dev *dev;
    pllm_cuda_dev_info info;

    /* weights */
    pllm_dtype wdt;     /* matrices and GEMM inputs: F16, BF16 or F32 */
    size_t wsz;         /* its element size */
    cuda_layer *layers; /* [n_layer] */
    void *tok_embd;     /* [n_vocab][n_embd] wdt */
    void *output;       /* [n_vocab][n_embd] wdt (== tok_embd when tied) */
    float *output_norm; /* [n_embd] */
    double *inv_freq;   /* [rope_dim / 2] device memory */
    double *inv_freq_long;  /* [rope_dim / 2] device memory: LongRoPE's long factors, or NULL */
    double *inv_freq_local; /* [rope_dim / 2] device memory: sliding layers' base, or NULL */
    size_t weight_bytes;
    double load_seconds;

    /* KV cache: layer l's K at kv_mem + kv_off[2l], V at kv_mem + kv_off[2l + 1], each
     * [n_blocks][n_head_kv][block_size][head_dim] of kv.dtype; with the hybrid layout
     * (kv.n_blocks_sw > 0) the sliding layers' hold n_blocks_sw blocks (kv_layer_bytes_sw,
     * kv_data_bytes_sw) */
    pllm_kv_layout kv;
    bool kv_ready;
    void *kv_mem;
    size_t *kv_off; /* [2 n_layer] host */
    size_t kv_layer_bytes, kv_layer_bytes_sw;
    size_t kv_data_bytes; /* of one layer's K (or V): all blocks' data; fp8's scales follow */
    size_t kv_data_bytes_sw;
    bool kv_scales;      /* fp8: per-row scales after the data (backend.h) */
    uint64_t *slot_bits; /* host: duplicate-slot check of validation */

    cuda_moe_ws moe; /* mixture of experts (unused for dense models) */

    /* activation workspace for cap_tokens tokens and cap_samples samples */
    int32_t cap_tokens, cap_samples;
    float *x;        /* [T][n_embd] residual stream */
    float *proj;     /* [T][n_embd] output of wo and w_down (added by the next norm) */
    void *xb;        /* [T][n_embd] wdt: normed input of a projection */
    float *qkv;      /* [T][QD + 2 KVD] */
    void *att;       /* [T][QD] wdt */
    void *gu;        /* [T][2 n_ff] wdt */
    void *h;         /* [T][n_ff] wdt */
    void *xs;        /* [S][n_embd] wdt: final-normed rows of the sampled tokens */
    float *logits;   /* [S][n_vocab] */
    float *work;     /* [S][n_vocab] sampler scratch */
    int32_t *counts; /* [S][n_vocab] zero between steps */
    void *sample_part; /* [S][PLLM_CUDA_SAMPLE_MAX_PARTS] sampling's row statistics */
    void *part;      /* decode attention split partials */
    size_t part_bytes;
    void *d_res; /* results: [S][tokens] [S][logprobs] [S][pllm_cuda_sample_top] */
    size_t d_res_bytes;
    void *d_plan; /* the packed plan on the device */
    size_t d_plan_bytes;
    size_t workspace_bytes;

    /* pinned host buffers and events, one pair per step in flight */
    void *h_plan[2], *h_res[2];
    size_t h_plan_bytes[2], h_res_bytes[2];
    pllm_cuda_event *ev_uploaded[2], *ev_done[2], *ev_start[2];
    cuda_pending pend[2];
    int32_t next_slot; /* slot of the next submit */
    int32_t oldest;    /* slot of the oldest pending step */
    int32_t prev_samples;   /* samples of the last submitted step: token_src reads them (d_res) */
    int64_t src_steps;      /* steps whose token sources were resolved on the device */
    int64_t src_host_steps; /* ... on the host (the results buffer grew: waited for them) */
    double device_seconds;  /* ev_start .. ev_done of the completed steps */

    /* host scratch of the packing */
    pllm_cuda_attn_item *items;
    pllm_cuda_attn_tile *tiles;
    int32_t cap_items, cap_tiles;

    /* FlashInfer's decode attention (params.attention resolved): NULL when own kernels run */
    struct pllm_cuda_fi *fi;
    void *q16;        /* [T][QD] F16: the queries FlashInfer reads (with fi only) */
    int64_t fi_steps; /* steps whose decode attention FlashInfer ran */

    /* graphs */
    cuda_graph graphs[CUDA_MAX_GRAPHS];
    int32_t n_graphs;
    bool graphs_failed;    /* a capture failed: decode steps run eagerly */
    char graph_error[256]; /* why */
    int64_t steps, graph_steps, split_steps;
} cuda_ctx;

/* cuda_weights.c */
pllm_status pllm_cuda_weights_upload(cuda_ctx *c);
void pllm_cuda_weights_free(cuda_ctx *c);

/* cuda_moe.c: the MoE workspace for T tokens (no-op for dense models), its release, and one MoE
 * layer's MLP on the normed inputs c->xb of T tokens into c->proj (F32). */
pllm_status pllm_cuda_moe_reserve(cuda_ctx *c, int32_t T);
size_t pllm_cuda_moe_bytes(const cuda_ctx *c, int32_t T); /* what reserve allocates for T */
void pllm_cuda_moe_free(cuda_ctx *c);
pllm_status pllm_cuda_moe_forward(cuda_ctx *c, const cuda_layer *w, int32_t T);

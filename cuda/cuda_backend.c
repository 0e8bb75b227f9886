/*
 * cuda_backend.c: the CUDA backend's vtable, workspace, plan packing, the forward pass as a
 * sequence of launches, CUDA graphs for decode steps, and the submit/wait split of a step.
 *
 * A step, on the host:
 *   1. validate the plan (pllm_backend_check_plan, model/backend.h) and grow the workspace if
 *      the step needs more;
 *   2. build the attention work lists (sequences with one new token are decode items, the rest
 *      prefill tiles), the sampled rows and the sampling records, and pack everything into one
 *      pinned buffer (layout_init gives the offsets);
 *   3. queue, on the one stream: the plan's upload, the forward pass and sampling (a CUDA graph
 *      replay for decode steps), the results' download, an event;
 *   4. (wait) sync on that event and unpack the results into the caller's arrays.
 * Two pinned plan buffers and two result buffers alternate, so step N + 1 can be packed and
 * queued while step N runs (the vtable's submit / wait); a token of step N + 1 that step N is
 * still sampling (backend.h's token_src) is read on the device from N's results (d_res) by one
 * small kernel before N + 1's forward pass. CUDA events around each step add up its device time
 * (pllm_cuda_backend_info.device_seconds).
 *
 * The forward pass per step: embedding gather; per layer: rmsnorm (+ the previous layer's
 * residual), QKV GEMM, (Qwen3: head_rmsnorm of q and k,) qkv_rope (bias, RoPE, K/V into their
 * slots), decode and prefill attention, wo GEMM, rmsnorm + residual, gate/up GEMM, swiglu, down
 * GEMM; then the final rmsnorm of the sampled rows only (+ the last residual), the LM head GEMM
 * over those rows, and sampling. That is 8 kernels + 4 GEMMs per layer, 4 launches after
 * (docs/cuda.md has the expected time of each).
 */
#include "cuda/attention_fi.h"
#include "cuda/cuda_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Padded batch sizes of the decode graphs (a decode step of n sequences runs as the graph of the
 * smallest size >= n). */
static const int32_t k_graph_batches[] = {1,  2,   4,   8,   16,  24,  32,  40,  48,  56,  64, 80,
                                          96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512};

#define KV_MARGIN                                                                                  \
    ((size_t)256 << 20) /* kept free beyond the workspace: graphs, cuBLAS, allocator */

static size_t align_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

/* ---- plan layout ---------------------------------------------------------------------------- */

/* (cuda_plan_layout: every offset but ids' depends only on the counts, so a graph captured for
 * some counts reads any later plan of the same counts; ids follows the variable-length block
 * tables, so the kernels address it from the block tables' start.) */

static void layout_init(cuda_plan_layout *L, int32_t T, int32_t S, int32_t n_items, int32_t n_tiles,
                        int32_t n_fi, int32_t n_bt, int32_t n_ids, int32_t n_fix, bool sw)
{
    size_t o = 0;
    L->n_tokens = T, L->n_samples = S, L->n_items = n_items, L->n_tiles = n_tiles;
    L->tokens = o, o = align_up(o + sizeof(int32_t) * (size_t)T, 16);
    L->positions = o, o = align_up(o + sizeof(int32_t) * (size_t)T, 16);
    L->slots = o, o = align_up(o + sizeof(int32_t) * (size_t)T, 16);
    L->token_src = o, o = align_up(o + sizeof(int32_t) * (size_t)T, 16);
    L->rows = o, o = align_up(o + sizeof(int32_t) * (size_t)S, 16);
    L->items = o, o = align_up(o + sizeof(pllm_cuda_attn_item) * (size_t)n_items, 16);
    L->tiles = o, o = align_up(o + sizeof(pllm_cuda_attn_tile) * (size_t)n_tiles, 16);
    L->params = o, o = align_up(o + sizeof(pllm_cuda_sample_params) * (size_t)S, 16);
    /* the sliding layers' (hybrid KV layout): counts only, like the above */
    const size_t n_sw = sw ? 1 : 0;
    L->sw_slots = o, o = align_up(o + sizeof(int32_t) * (size_t)T * n_sw, 16);
    L->sw_items = o, o = align_up(o + sizeof(pllm_cuda_attn_item) * (size_t)n_items * n_sw, 16);
    L->sw_tiles = o, o = align_up(o + sizeof(pllm_cuda_attn_tile) * (size_t)n_tiles * n_sw, 16);
    /* FlashInfer's paged description of a decode step's n_fi requests (0 without it) */
    L->fi_indptr = o, o = align_up(o + sizeof(int32_t) * (size_t)(n_fi ? n_fi + 1 : 0), 16);
    L->fi_last = o, o = align_up(o + sizeof(int32_t) * (size_t)n_fi, 16);
    L->block_tables = o, o = align_up(o + sizeof(int32_t) * (size_t)n_bt, 16);
    L->ids = o, o = align_up(o + sizeof(int32_t) * (size_t)n_ids, 16);
    /* pending history entries to patch on the device (pairs), last: the offsets before do not
     * move with them */
    L->fix = o, o = align_up(o + 2 * sizeof(int32_t) * (size_t)n_fix, 16);
    L->bytes = o;
}

/* Results on the device and in pinned memory: [s_cap] tokens, [s_cap] logprobs, [s_cap] tops. */
static size_t res_top_offset(int32_t s_cap)
{
    return align_up(8 * (size_t)s_cap, 16);
}
static size_t res_bytes(int32_t s_cap)
{
    return res_top_offset(s_cap) + sizeof(pllm_cuda_sample_top) * (size_t)s_cap;
}

/* ---- graphs -----------------------------------------------------------------------------------
 */

static void graphs_drop(cuda_ctx *c)
{
    for (int32_t i = 0; i < c->n_graphs; i++) pllm_cuda_graph_free(c->graphs[i].g);
    c->n_graphs = 0;
}

/* ---- workspace --------------------------------------------------------------------------------
 */

typedef struct ws_sizes {
    size_t per_token, per_sample, part;
} ws_sizes;

/* Decode attention blocks per query (kernels.h). */
static int32_t kv_groups(const pllm_model_config *cfg)
{
    return pllm_cuda_attn_decode_blocks(cfg->n_head, cfg->n_head_kv);
}

static int32_t split_threshold(const cuda_ctx *c)
{
    return c->params.attn_split_blocks > 0 ? c->params.attn_split_blocks
                                           : 4 * PLLM_MAX(c->info.n_sm, 1);
}

/* The most decode items a split step may have (beyond that the grid is already wide; the cap
 * bounds the partials' workspace when attn_split_blocks is set very large). */
#define MAX_SPLIT_ITEMS 256
static int32_t max_split_items(const cuda_ctx *c)
{
    const int32_t g = kv_groups(&c->model->cfg);
    return (int32_t)PLLM_MIN(MAX_SPLIT_ITEMS, ((int64_t)split_threshold(c) + g - 1) / g);
}

static ws_sizes ws_of(const cuda_ctx *c)
{
    const pllm_model_config *cfg = &c->model->cfg;
    const size_t E = (size_t)cfg->n_embd, qd = (size_t)cfg->n_head * cfg->head_dim,
                 kvd = (size_t)cfg->n_head_kv * cfg->head_dim, F = (size_t)cfg->n_ff,
                 V = (size_t)cfg->n_vocab;
    ws_sizes w;
    w.per_token = 4 * E + 4 * E + c->wsz * E + 4 * (qd + 2 * kvd) + c->wsz * qd + c->wsz * 2 * F +
                  c->wsz * F + (c->fi ? 2 * qd : 0);
    w.per_sample = c->wsz * E + 3 * 4 * V + 8 + sizeof(pllm_cuda_sample_top) +
                   pllm_cuda_sample_part_bytes(1, PLLM_CUDA_SAMPLE_MAX_PARTS);
    w.part = pllm_cuda_attn_decode_workspace(max_split_items(c), cfg->n_head, cfg->head_dim,
                                             CUDA_MAX_SPLITS);
    return w;
}

static void free_token_ws(cuda_ctx *c)
{
    void **bufs[] = {
        (void **)&c->x, (void **)&c->proj, &c->xb, (void **)&c->qkv, &c->att, &c->gu, &c->h,
        &c->q16};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(bufs); i++) {
        pllm_cuda_free(c->dev, *bufs[i]);
        *bufs[i] = NULL;
    }
    c->workspace_bytes -= (size_t)c->cap_tokens * ws_of(c).per_token;
    c->cap_tokens = 0;
    pllm_cuda_moe_free(c);
}

static void free_sample_ws(cuda_ctx *c)
{
    void **bufs[] = {&c->xs,    (void **)&c->logits, (void **)&c->work, (void **)&c->counts,
                     &c->d_res, &c->sample_part};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(bufs); i++) {
        pllm_cuda_free(c->dev, *bufs[i]);
        *bufs[i] = NULL;
    }
    c->workspace_bytes -= (size_t)c->cap_samples * ws_of(c).per_sample;
    c->cap_samples = 0;
}

static pllm_status dalloc(cuda_ctx *c, void **p, size_t bytes, const char *what, int32_t n)
{
    pllm_status st = pllm_cuda_alloc(c->dev, p, bytes ? bytes : 16);
    if (st != PLLM_OK)
        return pllm_error_prefix(st, "cuda backend: workspace (%s) for %d: %.1f MiB: ", what, n,
                                 (double)bytes / (1 << 20));
    return PLLM_OK;
}

/* Make room for n_tokens tokens and n_samples samples (growing frees the old buffers: the
 * device is idle then, as cudaFree synchronises). Invalidates the graphs when anything moves. */
static pllm_status reserve(cuda_ctx *c, int32_t n_tokens, int32_t n_samples)
{
    const pllm_model_config *cfg = &c->model->cfg;
    const size_t E = (size_t)cfg->n_embd, qd = (size_t)cfg->n_head * cfg->head_dim,
                 kvd = (size_t)cfg->n_head_kv * cfg->head_dim, F = (size_t)cfg->n_ff,
                 V = (size_t)cfg->n_vocab;
    if (!c->part && ws_of(c).part) {
        c->part_bytes = ws_of(c).part;
        PLLM_TRY(dalloc(c, &c->part, c->part_bytes, "attention splits", max_split_items(c)));
        c->workspace_bytes += c->part_bytes;
    }
    if (n_tokens > c->cap_tokens) {
        graphs_drop(c);
        free_token_ws(c);
        const int32_t T =
            (int32_t)align_up((size_t)PLLM_MAX(n_tokens, c->params.max_graph_batch), 64);
        pllm_status st;
        if ((st = dalloc(c, (void **)&c->x, 4 * E * (size_t)T, "residual", T)) ||
            (st = dalloc(c, (void **)&c->proj, 4 * E * (size_t)T, "projection", T)) ||
            (st = dalloc(c, &c->xb, c->wsz * E * (size_t)T, "norm", T)) ||
            (st = dalloc(c, (void **)&c->qkv, 4 * (qd + 2 * kvd) * (size_t)T, "qkv", T)) ||
            (st = dalloc(c, &c->att, c->wsz * qd * (size_t)T, "attention", T)) ||
            (st = dalloc(c, &c->gu, c->wsz * 2 * F * (size_t)T, "gate/up", T)) ||
            (st = dalloc(c, &c->h, c->wsz * F * (size_t)T, "swiglu", T)) ||
            (c->fi && (st = dalloc(c, &c->q16, 2 * qd * (size_t)T, "flashinfer queries", T))) ||
            (st = pllm_cuda_moe_reserve(c, T))) {
            free_token_ws(c);
            return st;
        }
        c->cap_tokens = T;
        c->workspace_bytes += (size_t)T * ws_of(c).per_token;
    }
    if (n_samples > c->cap_samples) {
        graphs_drop(c);
        free_sample_ws(c);
        const int32_t S =
            (int32_t)align_up((size_t)PLLM_MAX(n_samples, c->params.max_graph_batch), 16);
        pllm_status st;
        if ((st = dalloc(c, &c->xs, c->wsz * E * (size_t)S, "final norm", S)) ||
            (st = dalloc(c, (void **)&c->logits, 4 * V * (size_t)S, "logits", S)) ||
            (st = dalloc(c, (void **)&c->work, 4 * V * (size_t)S, "sampler", S)) ||
            (st = dalloc(c, (void **)&c->counts, 4 * V * (size_t)S, "sampler counts", S)) ||
            (st = dalloc(c, &c->d_res, res_bytes(S), "results", S)) ||
            (st = dalloc(c, &c->sample_part,
                         pllm_cuda_sample_part_bytes(S, PLLM_CUDA_SAMPLE_MAX_PARTS),
                         "sampling statistics", S)) ||
            (st = pllm_cuda_memset(c->dev, c->counts, 0, 4 * V * (size_t)S))) {
            free_sample_ws(c);
            return st;
        }
        c->cap_samples = S;
        c->workspace_bytes += (size_t)S * ws_of(c).per_sample;
    }
    return PLLM_OK;
}

/* ---- the forward pass -------------------------------------------------------------------------
 */

/* A packed step as the device sees it. */
typedef struct step_dev {
    const int32_t *tokens, *positions, *slots, *rows, *block_tables, *ids;
    const pllm_cuda_attn_item *items;
    const pllm_cuda_attn_tile *tiles;
    const int32_t *sw_slots; /* the hybrid KV layout's sliding layers (else NULL) */
    const pllm_cuda_attn_item *sw_items;
    const pllm_cuda_attn_tile *sw_tiles;
    const pllm_cuda_sample_params *params;
    const int32_t *fi_indptr, *fi_last; /* non-NULL: FlashInfer runs this step's decode */
    int32_t n_tokens, n_samples, n_items, n_tiles, n_splits, split_len;
    int32_t *res_tok;
    float *res_lp;
    pllm_cuda_sample_top *res_top;
} step_dev;

/* C [m][n] (ct) = A [m][k] (wdt) W^T, W [n][k] (wdt): a projection y = W x of m tokens. */
static pllm_status proj(cuda_ctx *c, void *C, pllm_dtype ct, const void *A, const void *W,
                        int32_t m, int32_t n, int32_t k)
{
    pllm_cuda_gemm_args g = {.m = m,
                             .n = n,
                             .k = k,
                             .batch = 1,
                             .a = A,
                             .a_dtype = c->wdt,
                             .lda = k,
                             .b = W,
                             .b_dtype = c->wdt,
                             .ldb = k,
                             .trans_b = true,
                             .c = C,
                             .c_dtype = ct,
                             .ldc = n,
                             .alpha = 1.0f,
                             .beta = 0.0f};
    return pllm_cuda_gemm(c->dev, &g);
}

static pllm_status enqueue_forward(cuda_ctx *c, const step_dev *d)
{
    const pllm_model_config *cfg = &c->model->cfg;
    const int32_t T = d->n_tokens, E = cfg->n_embd, hd = cfg->head_dim, qd = cfg->n_head * hd,
                  kvd = cfg->n_head_kv * hd, F = cfg->n_ff, V = cfg->n_vocab, ld = qd + 2 * kvd;
    const float eps = cfg->norm_eps;
    PLLM_TRY(pllm_cuda_embedding_scaled(c->dev, c->x, c->tok_embd, c->wdt, d->tokens, T, E, V,
                                        cfg->embd_scale > 0 ? cfg->embd_scale : 1.0f));
    /* the down projection the next norm adds to x (NULL: none, or already added through a
     * post-norm) */
    const float *pending = NULL;
    for (int32_t l = 0; l < cfg->n_layer; l++) {
        const cuda_layer *w = &c->layers[l];
        void *kc = (uint8_t *)c->kv_mem + c->kv_off[2 * l];
        void *vc = (uint8_t *)c->kv_mem + c->kv_off[2 * l + 1];
        /* a sliding layer of the hybrid layout: its own pool, slots and work lists */
        const bool in_sw = pllm_kv_layer_in_sw(&c->kv, w->window);
        const size_t data_bytes = in_sw ? c->kv_data_bytes_sw : c->kv_data_bytes;
        /* fp8: the per-row scales, after each cache's data (backend.h) */
        void *ks = c->kv_scales ? (uint8_t *)kc + data_bytes : NULL;
        void *vs = c->kv_scales ? (uint8_t *)vc + data_bytes : NULL;
        /* x += the previous layer's down projection; xb = norm(x) */
        PLLM_TRY(pllm_cuda_rmsnorm_residual(c->dev, c->xb, c->wdt, c->x, pending, w->attn_norm, T,
                                            E, eps));
        PLLM_TRY(proj(c, c->qkv, PLLM_DTYPE_F32, c->xb, w->w_qkv, T, ld, E));
        if (w->q_norm)
            PLLM_TRY(pllm_cuda_head_rmsnorm(c->dev, c->qkv, ld, w->q_norm, w->k_norm, T,
                                            cfg->n_head, cfg->n_head_kv, hd, eps));
        pllm_cuda_qkv_rope_args qa = {.qkv = c->qkv,
                                      .ld = ld,
                                      .bias = w->b_qkv,
                                      .positions = d->positions,
                                      .slots = in_sw ? d->sw_slots : d->slots,
                                      .inv_freq = w->window && c->inv_freq_local ? c->inv_freq_local
                                                                                 : c->inv_freq,
                                      .inv_freq_long = c->inv_freq_long,
                                      .long_from = cfg->rope_orig_ctx,
                                      .mscale = cfg->rope_scaling == PLLM_ROPE_SCALING_LONGROPE
                                                    ? (double)cfg->rope_attn_factor
                                                    : 1.0,
                                      .k_cache = kc,
                                      .v_cache = vc,
                                      .k_scales = ks,
                                      .v_scales = vs,
                                      .kv_dtype = c->kv.dtype,
                                      .n_tokens = T,
                                      .n_head = cfg->n_head,
                                      .n_head_kv = cfg->n_head_kv,
                                      .head_dim = hd,
                                      .rope_dim = cfg->rope_dim,
                                      .block_size = c->kv.block_size,
                                      .rope_neox = cfg->rope_mode == PLLM_ROPE_NEOX};
        PLLM_TRY(pllm_cuda_qkv_rope(c->dev, &qa));
        pllm_cuda_attn_args aa = {.out = c->att,
                                  .out_dtype = c->wdt,
                                  .q = c->qkv,
                                  .q_stride = ld,
                                  .k_cache = kc,
                                  .v_cache = vc,
                                  .k_scales = ks,
                                  .v_scales = vs,
                                  .kv_dtype = c->kv.dtype,
                                  .block_tables = d->block_tables,
                                  .n_head = cfg->n_head,
                                  .n_head_kv = cfg->n_head_kv,
                                  .head_dim = hd,
                                  .block_size = c->kv.block_size,
                                  .scale = cfg->attn_scale > 0 ? cfg->attn_scale
                                                               : 1.0f / sqrtf((float)hd),
                                  .window = w->window};
        if (d->fi_indptr) { /* never with the hybrid layout (shape_step) */
            const pllm_fi_paged_kv pk = {.k_cache = kc,
                                         .v_cache = vc,
                                         .indptr = d->fi_indptr,
                                         .indices = d->block_tables,
                                         .last_page_len = d->fi_last,
                                         .batch = d->n_items,
                                         .n_head_kv = cfg->n_head_kv,
                                         .block_size = c->kv.block_size,
                                         .head_dim = hd};
            PLLM_TRY(pllm_cuda_fi_decode(c->fi, c->dev, c->att, c->q16, c->qkv, ld, cfg->n_head,
                                         &pk, aa.scale));
        } else {
            PLLM_TRY(pllm_cuda_attn_decode(c->dev, &aa, in_sw ? d->sw_items : d->items, d->n_items,
                                           d->n_splits, d->split_len, c->part));
        }
        PLLM_TRY(pllm_cuda_attn_prefill(c->dev, &aa, in_sw ? d->sw_tiles : d->tiles, d->n_tiles));
        PLLM_TRY(proj(c, c->proj, PLLM_DTYPE_F32, c->att, w->w_o, T, E, qd));
        if (w->attn_post_norm) /* Gemma 3: x += norm(attention out) first */
            PLLM_TRY(pllm_cuda_post_norm_add(c->dev, c->x, c->proj, w->attn_post_norm, T, E, eps));
        PLLM_TRY(pllm_cuda_rmsnorm_residual(c->dev, c->xb, c->wdt, c->x,
                                            w->attn_post_norm ? NULL : c->proj, w->ffn_norm, T, E,
                                            eps));
        if (w->w_router) { /* mixture of experts (cuda_moe.c) */
            PLLM_TRY(pllm_cuda_moe_forward(c, w, T));
        } else {
            PLLM_TRY(proj(c, c->gu, c->wdt, c->xb, w->w_gu, T, 2 * F, E));
            if (cfg->ffn_gelu)
                PLLM_TRY(pllm_cuda_geglu(c->dev, c->h, c->gu, c->wdt, T, F));
            else
                PLLM_TRY(pllm_cuda_swiglu(c->dev, c->h, c->gu, c->wdt, T, F));
            PLLM_TRY(proj(c, c->proj, PLLM_DTYPE_F32, c->h, w->w_down, T, E, F));
        }
        pending = c->proj;
        if (w->ffn_post_norm) {
            PLLM_TRY(pllm_cuda_post_norm_add(c->dev, c->x, c->proj, w->ffn_post_norm, T, E, eps));
            pending = NULL;
        }
    }
    if (d->n_samples == 0) return PLLM_OK;
    /* the last residual and the final norm, for the sampled rows only; then their logits */
    PLLM_TRY(pllm_cuda_rmsnorm_rows(c->dev, c->xs, c->wdt, c->x, pending, d->rows, c->output_norm,
                                    d->n_samples, E, eps));
    PLLM_TRY(proj(c, c->logits, PLLM_DTYPE_F32, c->xs, c->output, d->n_samples, V, E));
    pllm_cuda_sample_args sa = {.logits = c->logits,
                                .work = c->work,
                                .counts = c->counts,
                                .params = d->params,
                                .ids = d->ids,
                                .tokens = d->res_tok,
                                .logprobs = d->res_lp,
                                .top = d->res_top,
                                .part = c->sample_part,
                                .n_parts = pllm_cuda_sample_parts(d->n_samples, V, c->info.n_sm),
                                .n_samples = d->n_samples,
                                .n_vocab = V};
    return pllm_cuda_sample(c->dev, &sa);
}

/* ---- packing ----------------------------------------------------------------------------------
 */

static pllm_status grow_host(cuda_ctx *c, void **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return PLLM_OK;
    pllm_cuda_host_free(c->dev, *buf);
    *buf = NULL;
    *cap = 0;
    size_t n = align_up(need + need / 2, 4096);
    PLLM_TRY(pllm_cuda_host_alloc(c->dev, buf, n));
    *cap = n;
    return PLLM_OK;
}

/* Choose the decode attention split for n_items queries of contexts up to max_ctx. */
static void choose_split(const cuda_ctx *c, int32_t n_items, int32_t max_ctx, int32_t *n_splits,
                         int32_t *split_len)
{
    const int32_t base = c->params.attn_split_len;
    const int32_t natural = (max_ctx + base - 1) / base;
    *n_splits = 1;
    *split_len = base;
    if (n_items == 0 || natural <= 1 || n_items > max_split_items(c) ||
        (int64_t)n_items * kv_groups(&c->model->cfg) >= split_threshold(c))
        return;
    const int32_t k = (natural + CUDA_MAX_SPLITS - 1) / CUDA_MAX_SPLITS;
    *split_len = base * k;
    *n_splits = (max_ctx + *split_len - 1) / *split_len;
}

/* The padded batch of a decode step of n sequences, or 0 when it runs eagerly. */
static int32_t graph_batch(const cuda_ctx *c, const pllm_batch_plan *p)
{
    if (c->params.no_graphs || p->n_tokens == 0 || p->n_tokens > c->params.max_graph_batch)
        return 0;
    if (p->n_seqs != p->n_tokens || p->n_samples != p->n_seqs)
        return 0; /* all decode, all sampled */
    for (size_t i = 0; i < PLLM_ARRAY_LEN(k_graph_batches); i++)
        if (k_graph_batches[i] >= p->n_tokens)
            return k_graph_batches[i] <= c->params.max_graph_batch ? k_graph_batches[i] : 0;
    return 0;
}

/* What a step needs, decided before packing: its padded counts, work lists, split, layout. */
typedef struct step_shape {
    int32_t slot;    /* pinned buffers and events of this step */
    int32_t B;       /* padded decode batch of its graph, or 0: eager */
    int32_t T, S;    /* tokens and samples as packed (B when a graph runs) */
    int32_t n_items; /* decode attention items (padded to B) */
    int32_t n_real;  /* of them, the plan's */
    int32_t n_tiles; /* prefill attention tiles */
    int32_t n_bt;    /* block-table entries packed */
    int32_t n_ids;   /* sampling id-list entries */
    int32_t max_ctx; /* longest decode context */
    int32_t n_splits, split_len;
    int32_t n_src;    /* tokens that name a sample of the previous step (backend.h token_src) */
    int32_t n_fix;    /* penalty histories ending with such a token (patched on the device) */
    bool fi;          /* FlashInfer runs the decode attention */
    bool src_on_host; /* the previous results move (workspace growth): resolve on the host */
    cuda_plan_layout L;
} step_shape;

/* Whether a sample's packed record holds its output ids (penalties; sample_pack.c's rule). */
static bool reads_history(const pllm_sample_req *r)
{
    return r->ctx.n_output > 0 && pllm_sampling_reads_history(r->params);
}

/* Work-list counts, the split, FlashInfer's eligibility and the layout of plan p. */
static pllm_status shape_step(cuda_ctx *c, const pllm_batch_plan *p, step_shape *k)
{
    const pllm_model_config *cfg = &c->model->cfg;
    const int32_t bs = c->kv.block_size;
    *k = (step_shape){.slot = c->next_slot, .B = graph_batch(c, p)};
    k->T = k->B ? k->B : p->n_tokens;
    k->S = k->B ? k->B : p->n_samples;
    for (int32_t i = 0; p->token_src && i < p->n_tokens; i++) {
        const int32_t r = p->token_src[i];
        if (r >= c->prev_samples)
            return pllm_errorf(
                PLLM_ERR_RANGE,
                "cuda step: token_src[%d] = %d but the previous step sampled %d rows", i, r,
                c->prev_samples);
        k->n_src += r >= 0;
    }
    k->src_on_host = k->n_src > 0 && k->S > c->cap_samples; /* reserve() reallocates d_res */
    bool rows_in_order = true;
    const int32_t qt = pllm_cuda_attn_prefill_tile_tokens(cfg->n_head, cfg->n_head_kv);
    for (int32_t s = 0; s < p->n_seqs; s++) {
        const pllm_seq_plan *sp = &p->seqs[s];
        k->n_bt += (sp->n_ctx + bs - 1) / bs;
        if (sp->n_new == 1)
            k->n_items++, k->max_ctx = PLLM_MAX(k->max_ctx, sp->n_ctx);
        else
            k->n_tiles += (sp->n_new + qt - 1) / qt;
        rows_in_order &= sp->token_start == s;
    }
    /* FlashInfer takes a decode step whose token rows are its requests in order (every sequence
     * one new token); its padding requests read one position of block 0 (outputs unused) */
    k->fi = c->fi && p->n_tokens > 0 && k->n_tiles == 0 && k->n_items == p->n_seqs &&
            rows_in_order && c->kv.n_blocks_sw == 0; /* FlashInfer reads one table per step */
    k->n_real = k->n_items;
    if (k->B) k->n_items = k->B;                  /* padded */
    if (k->fi) k->n_bt += k->n_items - k->n_real; /* one block-0 page per padding request */
    for (int32_t s = 0; s < p->n_samples; s++) {
        k->n_ids += pllm_cuda_sample_n_ids(p->samples[s].params, &p->samples[s].ctx);
        k->n_fix += reads_history(&p->samples[s]) && pllm_backend_pending_history(p, s) >= 0;
    }
    choose_split(c, k->n_items, k->max_ctx, &k->n_splits, &k->split_len);
    if (k->fi) k->n_splits = 1, k->split_len = c->params.attn_split_len; /* it splits itself */
    /* the hybrid layout's sliding tables follow the global ones (as many entries) */
    layout_init(&k->L, k->T, k->S, k->n_items, k->n_tiles, k->fi ? k->n_items : 0,
                c->kv.n_blocks_sw > 0 ? 2 * k->n_bt : k->n_bt, k->n_ids,
                k->src_on_host ? 0 : k->n_fix, c->kv.n_blocks_sw > 0);
    return PLLM_OK;
}

/* Tokens, their sources, positions and slots (padding rows: token 0 into no slot). With the
 * sources resolved on the host, the previous step's results are waited for here. */
static pllm_status pack_tokens(cuda_ctx *c, const pllm_batch_plan *p, const step_shape *k,
                               uint8_t *h)
{
    int32_t *tokens = (int32_t *)(h + k->L.tokens), *src = (int32_t *)(h + k->L.token_src);
    int32_t *positions = (int32_t *)(h + k->L.positions), *slots = (int32_t *)(h + k->L.slots);
    int32_t *sw_slots = c->kv.n_blocks_sw > 0 ? (int32_t *)(h + k->L.sw_slots) : NULL;
    if (p->n_tokens) {
        memcpy(tokens, p->tokens, sizeof(int32_t) * (size_t)p->n_tokens);
        memcpy(positions, p->positions, sizeof(int32_t) * (size_t)p->n_tokens);
        memcpy(slots, p->slots, sizeof(int32_t) * (size_t)p->n_tokens);
        if (sw_slots) memcpy(sw_slots, p->sw_slots, sizeof(int32_t) * (size_t)p->n_tokens);
    }
    for (int32_t t = p->n_tokens; t < k->T; t++) {
        tokens[t] = 0, positions[t] = 0, slots[t] = -1; /* padding */
        if (sw_slots) sw_slots[t] = -1;
    }
    if (k->n_src == 0) return PLLM_OK;
    if (k->src_on_host) { /* the previous step's ids, downloaded into its pinned results */
        const int32_t prev = k->slot ^ 1;
        PLLM_TRY(pllm_cuda_event_sync(c->ev_done[prev]));
        c->src_host_steps++;
        return pllm_backend_resolve_tokens("cuda", p, (const int32_t *)c->h_res[prev],
                                           c->prev_samples, tokens);
    }
    for (int32_t t = 0; t < k->T; t++) src[t] = t < p->n_tokens ? p->token_src[t] : -1;
    return PLLM_OK;
}

/* The attention work lists, block tables and FlashInfer's paged description. */
static void pack_attention(const cuda_ctx *c, const pllm_batch_plan *p, const step_shape *k,
                           uint8_t *h)
{
    const int32_t bs = c->kv.block_size;
    const int32_t qt =
        pllm_cuda_attn_prefill_tile_tokens(c->model->cfg.n_head, c->model->cfg.n_head_kv);
    int32_t *bt = (int32_t *)(h + k->L.block_tables);
    pllm_cuda_attn_item *items = (pllm_cuda_attn_item *)(h + k->L.items);
    pllm_cuda_attn_tile *tiles = (pllm_cuda_attn_tile *)(h + k->L.tiles);
    int32_t bt_at = 0, it = 0, ti = 0;
    for (int32_t s = 0; s < p->n_seqs; s++) {
        const pllm_seq_plan *sp = &p->seqs[s];
        const int32_t nb = (sp->n_ctx + bs - 1) / bs;
        memcpy(bt + bt_at, p->block_tables + sp->block_start, sizeof(int32_t) * (size_t)nb);
        if (sp->n_new == 1) {
            items[it++] =
                (pllm_cuda_attn_item){.tok = sp->token_start, .n_ctx = sp->n_ctx, .bt = bt_at};
        } else {
            for (int32_t j = 0; j < sp->n_new; j += qt)
                tiles[ti++] = (pllm_cuda_attn_tile){.tok0 = sp->token_start + j,
                                                    .n_q = PLLM_MIN(qt, sp->n_new - j),
                                                    .pos0 = sp->n_ctx - sp->n_new + j,
                                                    .bt = bt_at};
        }
        if (c->kv.n_blocks_sw > 0) /* the sliding table, k->n_bt entries further on */
            memcpy(bt + k->n_bt + bt_at, p->sw_block_tables + sp->block_start,
                   sizeof(int32_t) * (size_t)nb);
        bt_at += nb;
    }
    for (; it < k->n_items; it++)
        items[it] = (pllm_cuda_attn_item){.tok = it, .n_ctx = 0, .bt = 0}; /* padding */
    if (c->kv.n_blocks_sw > 0) { /* the same work lists over the sliding tables */
        pllm_cuda_attn_item *sw_items = (pllm_cuda_attn_item *)(h + k->L.sw_items);
        pllm_cuda_attn_tile *sw_tiles = (pllm_cuda_attn_tile *)(h + k->L.sw_tiles);
        for (int32_t i = 0; i < k->n_items; i++) {
            sw_items[i] = items[i];
            if (i < k->n_real) sw_items[i].bt += k->n_bt;
        }
        for (int32_t i = 0; i < k->n_tiles; i++) {
            sw_tiles[i] = tiles[i];
            sw_tiles[i].bt += k->n_bt;
        }
    }
    if (!k->fi) return;
    int32_t *ip = (int32_t *)(h + k->L.fi_indptr), *last = (int32_t *)(h + k->L.fi_last);
    for (int32_t i = 0; i < k->n_items; i++) {
        if (i < k->n_real) {
            const int32_t n_ctx = items[i].n_ctx;
            ip[i] = items[i].bt;
            last[i] = n_ctx - ((n_ctx + bs - 1) / bs - 1) * bs;
        } else {
            ip[i] = bt_at;
            bt[bt_at++] = 0;
            last[i] = 1;
        }
    }
    ip[k->n_items] = bt_at;
}

/* The sampled rows and sampling records (padding: greedy samples of padding rows). */
static void pack_samples(const cuda_ctx *c, const pllm_batch_plan *p, const step_shape *k,
                         uint8_t *h, cuda_pending *pd)
{
    const int32_t V = c->model->cfg.n_vocab;
    int32_t *rows = (int32_t *)(h + k->L.rows), *ids = (int32_t *)(h + k->L.ids);
    const int32_t *tokens = (const int32_t *)(h + k->L.tokens); /* resolved when src_on_host */
    int32_t *fix = (int32_t *)(h + k->L.fix), n_fix = 0;
    pllm_cuda_sample_params *rec = (pllm_cuda_sample_params *)(h + k->L.params);
    pllm_sampling_params greedy;
    pllm_sampling_defaults(&greedy);
    /* the kernels see the id lists through the block tables' base, which sits at the same place
     * for every plan of a graph's counts (the lists' own start moves with the tables' length) */
    const int32_t ids_base = (int32_t)((k->L.ids - k->L.block_tables) / sizeof(int32_t));
    for (int32_t s = 0, at = 0; s < k->S; s++) {
        if (s < p->n_samples) {
            const pllm_sample_req *r = &p->samples[s];
            const pllm_seq_plan *sp = &p->seqs[r->seq];
            rows[s] = sp->token_start + sp->n_new - 1 - r->back;
            pllm_cuda_sample_fill(&rec[s], r->params, &r->ctx, V, ids + at, ids_base + at);
            at += pllm_cuda_sample_n_ids(r->params, &r->ctx);
            pd->req_top[s] = rec[s].n_top;
            const int32_t i = reads_history(r) ? pllm_backend_pending_history(p, s) : -1;
            if (i >= 0) { /* the last output id is the sequence's token i, once resolved */
                const int32_t dst = rec[s].output_off + rec[s].n_output - 1;
                if (k->src_on_host)
                    ids[dst - ids_base] = tokens[i];
                else
                    fix[2 * n_fix] = dst, fix[2 * n_fix + 1] = i, n_fix++;
            }
        } else {
            rows[s] = s;
            pllm_cuda_sample_fill(&rec[s], &greedy, NULL, V, ids, 0);
        }
    }
}

/* Queue the plan's upload (growing the device buffer), FlashInfer's plan, and the device-side
 * token feed: the sources read the previous step's sampled ids where its sampling left them
 * (d_res), which the stream orders before this step's forward pass. */
static pllm_status upload_plan(cuda_ctx *c, const step_shape *k, const uint8_t *h)
{
    const pllm_model_config *cfg = &c->model->cfg;
    PLLM_TRY(pllm_cuda_upload(c->dev, c->d_plan, h, k->L.bytes));
    if (k->fi) /* the plan reads the host indptr and queues its schedule's copy (slot's buffer) */
        PLLM_TRY(pllm_cuda_fi_plan(c->fi, c->dev, k->slot, (const int32_t *)(h + k->L.fi_indptr),
                                   k->n_items, cfg->n_head, cfg->n_head_kv, c->kv.block_size,
                                   cfg->head_dim, k->B != 0));
    PLLM_TRY(pllm_cuda_event_record(c->dev, c->ev_uploaded[k->slot]));
    if (k->n_src > 0 && !k->src_on_host) {
        uint8_t *dp = c->d_plan;
        PLLM_TRY(pllm_cuda_resolve_tokens(c->dev, (int32_t *)(dp + k->L.tokens),
                                          (const int32_t *)(dp + k->L.token_src),
                                          (const int32_t *)c->d_res, k->T));
        PLLM_TRY(pllm_cuda_resolve_history(c->dev, (int32_t *)(dp + k->L.block_tables),
                                           (const int32_t *)(dp + k->L.fix),
                                           (const int32_t *)(dp + k->L.tokens), k->n_fix));
        c->src_steps++;
    }
    return PLLM_OK;
}

/* The forward pass and sampling: a decode step replays (capturing first) its batch's graph. */
static pllm_status run_forward(cuda_ctx *c, const step_shape *k, const step_dev *d)
{
    if (!k->B) return enqueue_forward(c, d);
    cuda_graph *g = NULL;
    for (int32_t i = 0; i < c->n_graphs && !g; i++)
        if (c->graphs[i].batch == k->B && c->graphs[i].n_splits == k->n_splits &&
            c->graphs[i].split_len == k->split_len && c->graphs[i].fi == k->fi)
            g = &c->graphs[i];
    if (!g && c->n_graphs < CUDA_MAX_GRAPHS && !c->graphs_failed) {
        pllm_status st = pllm_cuda_graph_begin(c->dev);
        if (st == PLLM_OK) {
            st = enqueue_forward(c, d);
            pllm_cuda_graph *made = NULL;
            pllm_status st2 = pllm_cuda_graph_end(c->dev, &made);
            if (st == PLLM_OK) st = st2;
            if (st == PLLM_OK) {
                g = &c->graphs[c->n_graphs++];
                *g = (cuda_graph){.batch = k->B,
                                  .n_splits = k->n_splits,
                                  .split_len = k->split_len,
                                  .fi = k->fi,
                                  .g = made};
            } else {
                pllm_cuda_graph_free(made);
            }
        }
        if (st != PLLM_OK) {
            /* a capture the driver refuses leaves nothing queued: run eagerly from now on,
             * and keep the reason for pllm_cuda_backend_get_info */
            snprintf(c->graph_error, sizeof c->graph_error, "%s", pllm_errmsg());
            c->graphs_failed = true;
            pllm_error_clear();
        }
    }
    if (!g) return enqueue_forward(c, d);
    PLLM_TRY(pllm_cuda_graph_launch(c->dev, g->g));
    c->graph_steps++;
    return PLLM_OK;
}

/* The device's view of the packed plan at d_plan. */
static step_dev device_view(const cuda_ctx *c, const step_shape *k)
{
    const uint8_t *dp = c->d_plan;
    uint8_t *dr = c->d_res;
    const cuda_plan_layout *L = &k->L;
    return (step_dev){
        .tokens = (const int32_t *)(dp + L->tokens),
        .positions = (const int32_t *)(dp + L->positions),
        .slots = (const int32_t *)(dp + L->slots),
        .rows = (const int32_t *)(dp + L->rows),
        .block_tables = (const int32_t *)(dp + L->block_tables),
        .ids = (const int32_t *)(dp + L->block_tables), /* see pack_samples */
        .items = (const pllm_cuda_attn_item *)(dp + L->items),
        .tiles = (const pllm_cuda_attn_tile *)(dp + L->tiles),
        .sw_slots = c->kv.n_blocks_sw > 0 ? (const int32_t *)(dp + L->sw_slots) : NULL,
        .sw_items = c->kv.n_blocks_sw > 0 ? (const pllm_cuda_attn_item *)(dp + L->sw_items) : NULL,
        .sw_tiles = c->kv.n_blocks_sw > 0 ? (const pllm_cuda_attn_tile *)(dp + L->sw_tiles) : NULL,
        .params = (const pllm_cuda_sample_params *)(dp + L->params),
        .fi_indptr = k->fi ? (const int32_t *)(dp + L->fi_indptr) : NULL,
        .fi_last = k->fi ? (const int32_t *)(dp + L->fi_last) : NULL,
        .n_tokens = k->T,
        .n_samples = k->S,
        .n_items = k->n_items,
        .n_tiles = k->n_tiles,
        .n_splits = k->n_splits,
        .split_len = k->split_len,
        .res_tok = (int32_t *)dr,
        .res_lp = (float *)(dr + 4 * (size_t)k->S),
        .res_top = (pllm_cuda_sample_top *)(dr + res_top_offset(k->S))};
}

/* One download of what the caller asked for, then the step's done event. */
static pllm_status queue_results(cuda_ctx *c, const pllm_batch_plan *p, pllm_step_out *out,
                                 const step_shape *k, cuda_pending *pd)
{
    bool want_top = false;
    if (out->top_ids && out->top_n > 0)
        for (int32_t s = 0; s < p->n_samples && !want_top; s++) want_top = pd->req_top[s] > 0;
    const int32_t S = k->S;
    size_t bytes = want_top
                       ? res_top_offset(S) + sizeof(pllm_cuda_sample_top) * (size_t)p->n_samples
                   : out->logprobs ? 4 * (size_t)S + 4 * (size_t)p->n_samples
                                   : 4 * (size_t)p->n_samples;
    if (p->n_samples > 0) {
        PLLM_TRY(grow_host(c, &c->h_res[k->slot], &c->h_res_bytes[k->slot], res_bytes(S)));
        PLLM_TRY(pllm_cuda_download(c->dev, c->h_res[k->slot], c->d_res, bytes));
        if (out->logits)
            PLLM_TRY(pllm_cuda_download(c->dev, out->logits, c->logits,
                                        sizeof(float) * (size_t)c->model->cfg.n_vocab *
                                            (size_t)p->n_samples));
    }
    PLLM_TRY(pllm_cuda_event_record(c->dev, c->ev_done[k->slot]));
    pd->res_bytes = bytes;
    return PLLM_OK;
}

/* This slot's per-sample host array (the n_top each sample asked for). */
static pllm_status grow_req_top(cuda_pending *pd, int32_t S)
{
    if (pd->req_top_cap >= S) return PLLM_OK;
    free(pd->req_top);
    pd->req_top_cap = 0;
    if (!(pd->req_top = pllm_malloc(sizeof(int32_t) * (size_t)PLLM_MAX(S, 1))))
        return PLLM_ERR_NOMEM;
    pd->req_top_cap = S;
    return PLLM_OK;
}

/* Grow the device plan buffer to bytes (dropping the graphs that read the old one). */
static pllm_status grow_device_plan(cuda_ctx *c, size_t bytes, int32_t T)
{
    if (bytes <= c->d_plan_bytes) return PLLM_OK;
    graphs_drop(c);
    pllm_cuda_free(c->dev, c->d_plan);
    c->d_plan = NULL;
    c->d_plan_bytes = 0;
    const size_t n = align_up(bytes + bytes / 2, 4096);
    PLLM_TRY(dalloc(c, &c->d_plan, n, "plan", T));
    c->d_plan_bytes = n;
    return PLLM_OK;
}

/* Queue one step: validate, shape, pack into this slot's pinned buffer (its previous upload
 * must be done), upload, resolve token sources on the device, forward, sample, download. */
static pllm_status submit(cuda_ctx *c, const pllm_batch_plan *p, pllm_step_out *out)
{
    cuda_pending *pd = &c->pend[c->next_slot];
    if (pd->busy)
        return pllm_errorf(
            PLLM_ERR_INVALID,
            "cuda backend: 2 steps are in flight; wait for one before submitting another");
    PLLM_TRY(pllm_backend_check_plan("cuda", c->kv_ready ? &c->kv : NULL, c->model->cfg.n_vocab,
                                     c->slot_bits, NULL, p, out));
    step_shape k;
    PLLM_TRY(shape_step(c, p, &k));
    PLLM_TRY(grow_req_top(pd, k.S));
    if (c->h_plan_bytes[k.slot]) PLLM_TRY(pllm_cuda_event_sync(c->ev_uploaded[k.slot]));
    PLLM_TRY(grow_host(c, &c->h_plan[k.slot], &c->h_plan_bytes[k.slot], k.L.bytes));
    uint8_t *h = c->h_plan[k.slot];
    PLLM_TRY(pack_tokens(c, p, &k, h)); /* before reserve(): it may move the previous results */
    if (p->n_tokens > 0) PLLM_TRY(reserve(c, k.T, k.S));
    pack_attention(c, p, &k, h);
    pack_samples(c, p, &k, h, pd);
    PLLM_TRY(grow_device_plan(c, k.L.bytes, k.T));
    PLLM_TRY(pllm_cuda_event_record(c->dev, c->ev_start[k.slot]));
    *pd = (cuda_pending){.busy = true,
                         .out = out,
                         .n_samples = p->n_samples,
                         .s_cap = k.S,
                         .req_top = pd->req_top,
                         .req_top_cap = pd->req_top_cap};
    c->next_slot ^= 1;
    c->prev_samples = p->n_tokens > 0 ? p->n_samples : 0;
    if (p->n_tokens == 0) /* nothing to run: an empty step still pairs with a wait */
        return pllm_cuda_event_record(c->dev, c->ev_done[k.slot]);
    pd->timed = true;
    const step_dev d = device_view(c, &k);
    PLLM_TRY(upload_plan(c, &k, h));
    PLLM_TRY(run_forward(c, &k, &d));
    PLLM_TRY(queue_results(c, p, out, &k, pd));
    c->steps++;
    c->split_steps += k.n_splits > 1;
    c->fi_steps += k.fi;
    return PLLM_OK;
}

static pllm_status wait_oldest(cuda_ctx *c)
{
    const int32_t slot = c->oldest;
    cuda_pending *pd = &c->pend[slot];
    if (!pd->busy)
        return pllm_errorf(PLLM_ERR_INVALID, "cuda backend: wait without a submitted step");
    pd->busy = false;
    c->oldest ^= 1;
    PLLM_TRY(pllm_cuda_event_sync(c->ev_done[slot]));
    if (pd->timed) {
        float ms = 0.0f;
        if (pllm_cuda_event_elapsed(c->ev_start[slot], c->ev_done[slot], &ms) == PLLM_OK)
            c->device_seconds += (double)ms * 1e-3;
        else
            pllm_error_clear();
    }
    pllm_step_out *out = pd->out;
    const uint8_t *h = c->h_res[slot];
    const int32_t S = pd->s_cap;
    for (int32_t s = 0; s < pd->n_samples; s++) {
        out->tokens[s] = ((const int32_t *)h)[s];
        if (out->logprobs) out->logprobs[s] = ((const float *)(h + 4 * (size_t)S))[s];
        if (out->top_ids && out->top_n > 0) {
            const pllm_cuda_sample_top *top =
                (const pllm_cuda_sample_top *)(h + res_top_offset(S)) + s;
            const bool got = pd->res_bytes > res_top_offset(S);
            for (int32_t j = 0; j < out->top_n; j++) {
                const bool have = got && j < pd->req_top[s];
                out->top_ids[(size_t)s * out->top_n + j] = have ? top->ids[j] : -1;
                if (out->top_logprobs)
                    out->top_logprobs[(size_t)s * out->top_n + j] =
                        have ? top->logprobs[j] : -INFINITY;
            }
        }
    }
    return PLLM_OK;
}

/* ---- vtable -----------------------------------------------------------------------------------
 */

static pllm_status cuda_kv_layout(void *vctx, int32_t block_size, pllm_kv_layout *out)
{
    cuda_ctx *c = vctx;
    if (block_size < 1 || block_size > 65536)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "cuda kv_layout: block_size must be in [1, 65536], got %d", block_size);
    const pllm_model_config *cfg = &c->model->cfg;
    *out = (pllm_kv_layout){.n_layer = cfg->n_layer,
                            .n_head_kv = cfg->n_head_kv,
                            .head_dim = cfg->head_dim,
                            .block_size = block_size,
                            .n_blocks = 0,
                            .dtype = c->params.kv_dtype};
    pllm_kv_layout_sliding(c->model, out);
    return PLLM_OK;
}

/* Workspace not yet allocated for the reserve sizes. */
static size_t reserve_missing(const cuda_ctx *c)
{
    const ws_sizes w = ws_of(c);
    const size_t T =
        align_up((size_t)PLLM_MAX(c->params.reserve_tokens, c->params.max_graph_batch), 64);
    const size_t S =
        align_up((size_t)PLLM_MAX(c->params.reserve_seqs, c->params.max_graph_batch), 16);
    size_t miss = 0;
    if (T > (size_t)c->cap_tokens)
        miss += (T - (size_t)c->cap_tokens) * w.per_token + pllm_cuda_moe_bytes(c, (int32_t)T) -
                c->moe.bytes; /* experts' workspace */
    if (S > (size_t)c->cap_samples) miss += (S - (size_t)c->cap_samples) * w.per_sample;
    if (!c->part) miss += w.part;
    return miss;
}

static pllm_status cuda_kv_available(void *vctx, size_t *bytes)
{
    cuda_ctx *c = vctx;
    *bytes = 0;
    pllm_cuda_dev_info info;
    PLLM_TRY(pllm_cuda_dev_info_get(c->dev, &info));
    const size_t used = info.total_bytes - info.free_bytes,
                 reserve_b = reserve_missing(c) + KV_MARGIN;
    const size_t allowed =
        (size_t)((double)c->params.gpu_memory_fraction * (double)info.total_bytes);
    size_t avail = allowed > used + reserve_b ? allowed - used - reserve_b : 0;
    const size_t free_left = info.free_bytes > reserve_b ? info.free_bytes - reserve_b : 0;
    *bytes = PLLM_MIN(avail, free_left);
    return PLLM_OK;
}

static void kv_free(cuda_ctx *c)
{
    graphs_drop(c); /* they point into the pool */
    pllm_cuda_free(c->dev, c->kv_mem);
    free(c->slot_bits);
    free(c->kv_off);
    c->kv_mem = NULL;
    c->slot_bits = NULL;
    c->kv_off = NULL;
    c->kv_ready = false;
}

static pllm_status cuda_kv_init(void *vctx, const pllm_kv_layout *L)
{
    cuda_ctx *c = vctx;
    const pllm_model_config *cfg = &c->model->cfg;
    if (L->n_layer != cfg->n_layer || L->n_head_kv != cfg->n_head_kv ||
        L->head_dim != cfg->head_dim)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "cuda kv_init: layout (n_layer %d, n_head_kv %d, head_dim %d) does not "
                           "match the model (%d, %d, %d)",
                           L->n_layer, L->n_head_kv, L->head_dim, cfg->n_layer, cfg->n_head_kv,
                           cfg->head_dim);
    if (L->dtype != PLLM_DTYPE_F32 && L->dtype != PLLM_DTYPE_F16 && L->dtype != PLLM_KV_DTYPE_FP8)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "cuda kv_init: KV dtype %s is not supported (F32, F16, FP8)",
                           pllm_kv_dtype_name(L->dtype));
    if (L->block_size < 1 || L->block_size > 65536 || L->n_blocks < 1)
        return pllm_errorf(
            PLLM_ERR_INVALID,
            "cuda kv_init: block_size %d (1..65536) and n_blocks %d (>= 1) are invalid",
            L->block_size, L->n_blocks);
    if ((int64_t)L->n_blocks * L->block_size > INT32_MAX)
        return pllm_errorf(PLLM_ERR_RANGE,
                           "cuda kv_init: %d blocks of %d tokens exceed the int32 slot range",
                           L->n_blocks, L->block_size);
    for (int i = 0; i < 2; i++)
        if (c->pend[i].busy)
            return pllm_errorf(PLLM_ERR_INVALID, "cuda kv_init: a step is in flight");
    /* one layer's K (or V): the data, then (fp8) the scales; an fp8 cache's layers start on
     * 256-byte boundaries, so its rows keep the alignment of 16-byte vector loads */
    const bool fp8 = L->dtype == PLLM_KV_DTYPE_FP8;
    PLLM_TRY(pllm_kv_check_sliding("cuda kv_init", L, c->model));
    const size_t blk = (size_t)L->n_head_kv * (size_t)L->block_size * pllm_kv_row_bytes(L);
    size_t layer = 0, layer_sw = 0, total = 0;
    if (!pllm_mul_size((size_t)L->n_blocks, blk, &layer) || layer > SIZE_MAX / 4 ||
        !pllm_mul_size((size_t)L->n_blocks_sw, blk, &layer_sw) || layer_sw > SIZE_MAX / 4 ||
        !pllm_mul_size(fp8 ? align_up(layer, 256) : layer, 2 * (size_t)L->n_layer, &total) ||
        !pllm_mul_size(fp8 ? align_up(layer_sw, 256) : layer_sw, 2 * (size_t)L->n_layer, &total))
        return pllm_errorf(PLLM_ERR_NOMEM, "cuda kv_init: %d blocks overflow the address space",
                           L->n_blocks);
    size_t *off = pllm_malloc(2 * (size_t)L->n_layer * sizeof *off);
    if (!off) return PLLM_ERR_NOMEM;
    total = 0;
    for (int32_t l = 0; l < 2 * L->n_layer; l++) {
        const size_t b = pllm_kv_layer_in_sw(L, c->model->layers[l / 2].window) ? layer_sw : layer;
        off[l] = total;
        total += fp8 ? align_up(b, 256) : b;
    }
    kv_free(c);
    c->kv_off = off;
    /* the workspace first, so the pool cannot starve it */
    PLLM_TRY(reserve(c, c->params.reserve_tokens, c->params.reserve_seqs));
    pllm_status st = pllm_cuda_alloc(c->dev, &c->kv_mem, total);
    if (st != PLLM_OK)
        return pllm_error_prefix(st, "cuda kv_init: %d KV blocks (%.2f GiB): ", L->n_blocks,
                                 (double)total / (1 << 30));
    c->slot_bits = pllm_calloc(
        ((size_t)PLLM_MAX(L->n_blocks, L->n_blocks_sw) * (size_t)L->block_size + 63) / 64,
        sizeof(uint64_t));
    if (!c->slot_bits) {
        kv_free(c);
        return PLLM_ERR_NOMEM;
    }
    c->kv = *L;
    c->kv_scales = fp8;
    c->kv_data_bytes = (size_t)L->n_blocks * (size_t)L->n_head_kv * (size_t)L->block_size *
                       (fp8 ? (size_t)L->head_dim : pllm_kv_row_bytes(L));
    c->kv_layer_bytes = fp8 ? align_up(layer, 256) : layer;
    c->kv_data_bytes_sw = (size_t)L->n_blocks_sw * (size_t)L->n_head_kv * (size_t)L->block_size *
                          (fp8 ? (size_t)L->head_dim : pllm_kv_row_bytes(L));
    c->kv_layer_bytes_sw = fp8 ? align_up(layer_sw, 256) : layer_sw;
    c->kv_ready = true;
    return PLLM_OK;
}

static pllm_status cuda_step(void *vctx, const pllm_batch_plan *plan, pllm_step_out *out)
{
    cuda_ctx *c = vctx;
    if (c->pend[0].busy || c->pend[1].busy)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "cuda step: submitted steps are still in flight (call wait first)");
    PLLM_TRY(submit(c, plan, out));
    return wait_oldest(c);
}

static pllm_status cuda_submit(void *vctx, const pllm_batch_plan *plan, pllm_step_out *out)
{
    return submit(vctx, plan, out);
}

static pllm_status cuda_wait(void *vctx)
{
    return wait_oldest(vctx);
}

static bool cuda_device_seconds(void *vctx, double *seconds)
{
    *seconds = ((const cuda_ctx *)vctx)->device_seconds;
    return true;
}

/* The bytes of one block in one layer's K (or V) cache: its data, and its scales (fp8; else 0),
 * which sit after the c->kv_data_bytes of all blocks' data (backend.h). */
static void kv_block_parts(const cuda_ctx *c, size_t *data, size_t *scales)
{
    const size_t rows = (size_t)c->kv.n_head_kv * (size_t)c->kv.block_size;
    *data = c->kv_data_bytes / (size_t)c->kv.n_blocks;
    *scales = c->kv_scales ? rows * 2 : 0;
}

static pllm_status cuda_copy_blocks(void *vctx, const int32_t *src, const int32_t *dst, int32_t n)
{
    cuda_ctx *c = vctx;
    PLLM_TRY(pllm_backend_check_copy_blocks("cuda", c->kv_ready ? &c->kv : NULL, src, dst, n));
    if (c->kv.n_blocks_sw > 0)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "cuda copy_blocks: not with a sliding pool (the hybrid KV layout)");
    size_t block, scales; /* one block of one layer's K (or V): data, and (fp8) scales */
    kv_block_parts(c, &block, &scales);
    for (int32_t i = 0; i < n; i++) {
        if (src[i] == dst[i]) continue;
        for (int32_t l = 0; l < 2 * c->kv.n_layer; l++) {
            uint8_t *base = (uint8_t *)c->kv_mem + c->kv_off[l];
            PLLM_TRY(pllm_cuda_copy(c->dev, base + (size_t)dst[i] * block,
                                    base + (size_t)src[i] * block, block));
            if (scales)
                PLLM_TRY(pllm_cuda_copy(c->dev, base + c->kv_data_bytes + (size_t)dst[i] * scales,
                                        base + c->kv_data_bytes + (size_t)src[i] * scales, scales));
        }
    }
    return PLLM_OK; /* ordered before the next step on the stream */
}

/* One block of every layer's K and V to or from buf (backend.h's kv_read_block layout: 2 *
 * n_layer slabs of one block each, K then V per layer). Waits for the copies, and so for every
 * step queued before them. */
static pllm_status cuda_block_io(cuda_ctx *c, int32_t id, uint8_t *out, const uint8_t *in)
{
    if (!c->kv_ready || id < 0 || id >= c->kv.n_blocks)
        return pllm_errorf(PLLM_ERR_RANGE, "cuda kv block %d: outside [0, %d)%s", id,
                           c->kv_ready ? c->kv.n_blocks : 0,
                           c->kv_ready ? "" : " (before kv_init)");
    if (c->kv.n_blocks_sw > 0)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "cuda kv block %d: blocks cannot be read or written with a sliding pool "
                           "(the hybrid KV layout)",
                           id);
    size_t block, scales;
    kv_block_parts(c, &block, &scales);
    size_t at = 0;
    for (int32_t l = 0; l < 2 * c->kv.n_layer; l++) {
        uint8_t *base = (uint8_t *)c->kv_mem + c->kv_off[l];
        uint8_t *parts[2] = {base + (size_t)id * block,
                             base + c->kv_data_bytes + (size_t)id * scales};
        const size_t lens[2] = {block, scales};
        for (int k = 0; k < 2; k++) {
            if (!lens[k]) continue;
            if (in)
                PLLM_TRY(pllm_cuda_upload(c->dev, parts[k], in + at, lens[k]));
            else
                PLLM_TRY(pllm_cuda_download(c->dev, out + at, parts[k], lens[k]));
            at += lens[k];
        }
    }
    PLLM_ASSERT(at == pllm_kv_block_bytes(&c->kv));
    return pllm_cuda_sync(c->dev); /* the host buffer is the caller's again */
}

static pllm_status cuda_kv_read_block(void *vctx, int32_t block, void *buf)
{
    return cuda_block_io(vctx, block, buf, NULL);
}

static pllm_status cuda_kv_write_block(void *vctx, int32_t block, const void *buf)
{
    return cuda_block_io(vctx, block, NULL, buf);
}

static void cuda_destroy(void *vctx)
{
    cuda_ctx *c = vctx;
    if (!c) return;
    if (c->dev) {
        (void)pllm_cuda_sync(c->dev);
        kv_free(c);
        free_token_ws(c);
        free_sample_ws(c);
        pllm_cuda_free(c->dev, c->part);
        pllm_cuda_free(c->dev, c->d_plan);
        pllm_cuda_fi_free(c->fi, c->dev);
        for (int i = 0; i < 2; i++) {
            pllm_cuda_host_free(c->dev, c->h_plan[i]);
            pllm_cuda_host_free(c->dev, c->h_res[i]);
            pllm_cuda_event_free(c->ev_uploaded[i]);
            pllm_cuda_event_free(c->ev_done[i]);
            pllm_cuda_event_free(c->ev_start[i]);
            free(c->pend[i].req_top);
        }
        pllm_cuda_weights_free(c);
        pllm_cuda_dev_free(c->dev);
    }
    free(c);
}

static const pllm_backend_iface g_cuda_iface = {
    .name = "cuda",
    .async = true,
    .kv_layout = cuda_kv_layout,
    .kv_available = cuda_kv_available,
    .kv_init = cuda_kv_init,
    .step = cuda_step,
    .submit = cuda_submit,
    .wait = cuda_wait,
    .device_seconds = cuda_device_seconds,
    .copy_blocks = cuda_copy_blocks,
    .kv_read_block = cuda_kv_read_block,
    .kv_write_block = cuda_kv_write_block,
    .destroy = cuda_destroy,
};

/* ---- creation ---------------------------------------------------------------------------------
 */

void pllm_cuda_params_defaults(pllm_cuda_params *p)
{
    memset(p, 0, sizeof *p);
    p->device = 0;
    p->gpu_memory_fraction = 0.9f;
    p->kv_dtype = PLLM_DTYPE_F16;
    p->weights = PLLM_CUDA_WEIGHTS_AUTO;
    p->reserve_tokens = 2048;
    p->reserve_seqs = 256;
    p->attn_split_len = 512;
    p->attn_split_blocks = 0;
    p->no_graphs = false;
    p->max_graph_batch = 256;
    p->attention = PLLM_CUDA_ATTN_AUTO;
}

const char *pllm_cuda_attention_name(pllm_cuda_attention a)
{
    switch (a) {
    case PLLM_CUDA_ATTN_AUTO:
        return "auto";
    case PLLM_CUDA_ATTN_OWN:
        return "own";
    case PLLM_CUDA_ATTN_FLASHINFER:
        return "flashinfer";
    }
    return "?";
}

bool pllm_cuda_attention_parse(const char *s, pllm_cuda_attention *out)
{
    for (int a = PLLM_CUDA_ATTN_AUTO; a <= PLLM_CUDA_ATTN_FLASHINFER; a++)
        if (!strcmp(s, pllm_cuda_attention_name((pllm_cuda_attention)a))) {
            *out = (pllm_cuda_attention)a;
            return true;
        }
    return false;
}

int pllm_cuda_device_count(char *why, size_t n)
{
    return pllm_cuda_dev_count(why, n);
}

/* The device dtype of the weights: params, or AUTO's rule over the model's matrices. */
static pllm_dtype weight_dtype(const pllm_model *m, pllm_cuda_weights w)
{
    if (w == PLLM_CUDA_WEIGHTS_F16) return PLLM_DTYPE_F16;
    if (w == PLLM_CUDA_WEIGHTS_BF16) return PLLM_DTYPE_BF16;
    if (w == PLLM_CUDA_WEIGHTS_F32) return PLLM_DTYPE_F32;
    bool all_bf16 = m->tok_embd.dtype == PLLM_DTYPE_BF16,
         all_f32 = m->tok_embd.dtype == PLLM_DTYPE_F32;
    for (int32_t l = 0; l < m->cfg.n_layer; l++) {
        const pllm_layer_weights *lw = &m->layers[l];
        const pllm_tensor *t[] = {&lw->wq,     &lw->wk,   &lw->wv,    &lw->wo,
                                  &lw->w_gate, &lw->w_up, &lw->w_down};
        for (size_t i = 0; i < PLLM_ARRAY_LEN(t); i++) {
            all_bf16 &= t[i]->dtype == PLLM_DTYPE_BF16;
            all_f32 &= t[i]->dtype == PLLM_DTYPE_F32;
        }
    }
    return all_bf16 ? PLLM_DTYPE_BF16 : all_f32 ? PLLM_DTYPE_F32 : PLLM_DTYPE_F16;
}

pllm_status pllm_cuda_backend_create(pllm_backend *out, const pllm_model *model,
                                     const pllm_cuda_params *p)
{
    out->iface = NULL;
    out->ctx = NULL;
    pllm_cuda_params params;
    if (p)
        params = *p;
    else
        pllm_cuda_params_defaults(&params);
    if (!(params.gpu_memory_fraction > 0.0f && params.gpu_memory_fraction <= 1.0f))
        return pllm_errorf(PLLM_ERR_INVALID,
                           "cuda backend: gpu_memory_fraction must be in (0, 1], got %g",
                           (double)params.gpu_memory_fraction);
    if (params.kv_dtype != PLLM_DTYPE_F32 && params.kv_dtype != PLLM_DTYPE_F16 &&
        params.kv_dtype != PLLM_KV_DTYPE_FP8)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "cuda backend: kv_dtype %s is not supported (F16, F32, FP8)",
                           pllm_kv_dtype_name(params.kv_dtype));
    if ((unsigned)params.attention > PLLM_CUDA_ATTN_FLASHINFER)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "cuda backend: attention %d is not a pllm_cuda_attention value",
                           (int)params.attention);
    if ((unsigned)params.weights > PLLM_CUDA_WEIGHTS_F32)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "cuda backend: weights %d is not a pllm_cuda_weights value",
                           (int)params.weights);
    if (params.attn_split_len <= 0) params.attn_split_len = 512;
    if (params.attn_split_len % 64)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "cuda backend: attn_split_len must be a multiple of 64, got %d",
                           params.attn_split_len);
    if (params.reserve_tokens < 1 || params.reserve_seqs < 1 || params.max_graph_batch < 0 ||
        params.attn_split_blocks < 0)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "cuda backend: reserve_tokens %d and reserve_seqs %d must be >= 1, "
                           "max_graph_batch %d and "
                           "attn_split_blocks %d >= 0",
                           params.reserve_tokens, params.reserve_seqs, params.max_graph_batch,
                           params.attn_split_blocks);
    const pllm_model_config *cfg = &model->cfg;
    if (cfg->n_head_kv < 1 || cfg->n_head % cfg->n_head_kv != 0 || cfg->head_dim % 2 ||
        cfg->head_dim > PLLM_CUDA_ATTN_MAX_HEAD_DIM || cfg->rope_dim > cfg->head_dim ||
        cfg->rope_dim % 2)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "cuda backend: model %s: heads (n_head %d, n_head_kv %d, head_dim %d "
                           "(even, <= %d), rope_dim %d) "
                           "are not supported",
                           model->name, cfg->n_head, cfg->n_head_kv, cfg->head_dim,
                           PLLM_CUDA_ATTN_MAX_HEAD_DIM, cfg->rope_dim);

    cuda_ctx *c = pllm_calloc(1, sizeof *c);
    if (!c) return PLLM_ERR_NOMEM;
    pllm_status st;
    c->model = model;
    c->params = params;
    if ((st = pllm_cuda_dev_init(&c->dev, params.device)) != PLLM_OK) {
        free(c);
        return pllm_error_prefix(st, "cuda backend: ");
    }
    if ((st = pllm_cuda_dev_info_get(c->dev, &c->info)) != PLLM_OK) goto fail;
    if (c->info.sm_major < 8) {
        st =
            pllm_errorf(PLLM_ERR_UNSUPPORTED,
                        "cuda backend: %s is sm_%d%d; pllm's kernels are built for sm_80 and later",
                        c->info.name, c->info.sm_major, c->info.sm_minor);
        goto fail;
    }
    c->wdt = weight_dtype(model, params.weights);
    c->wsz = pllm_dtype_block_bytes(c->wdt);
    for (int i = 0; i < 2; i++)
        if ((st = pllm_cuda_event_create(c->dev, &c->ev_uploaded[i])) ||
            (st = pllm_cuda_event_create(c->dev, &c->ev_done[i])) ||
            (st = pllm_cuda_event_create(c->dev, &c->ev_start[i])))
            goto fail;
    if (params.attention == PLLM_CUDA_ATTN_FLASHINFER) {
        char why[256];
        if (!pllm_cuda_fi_supported(cfg, params.kv_dtype, c->wdt, why, sizeof why)) {
            st = pllm_errorf(PLLM_ERR_UNSUPPORTED,
                             "cuda backend: --attention-backend flashinfer: model %s: %s (own "
                             "kernels serve it: --attention-backend own)",
                             model->name, why);
            goto fail;
        }
        size_t fi_bytes = 0;
        if ((st = pllm_cuda_fi_create(&c->fi, c->dev, &fi_bytes)) != PLLM_OK) goto fail;
        c->workspace_bytes += fi_bytes;
    }
    if ((st = pllm_cuda_weights_upload(c)) != PLLM_OK) goto fail;
    out->iface = &g_cuda_iface;
    out->ctx = c;
    return PLLM_OK;
fail:
    cuda_destroy(c);
    return st;
}

void pllm_cuda_backend_get_info(const pllm_backend *b, pllm_cuda_backend_info *out)
{
    const cuda_ctx *c = b->ctx;
    memset(out, 0, sizeof *out);
    snprintf(out->device_name, sizeof out->device_name, "%s", c->info.name);
    out->ordinal = c->info.ordinal;
    out->sm_major = c->info.sm_major;
    out->sm_minor = c->info.sm_minor;
    out->n_sm = c->info.n_sm;
    out->emulated = c->info.emulated;
    out->total_bytes = c->info.total_bytes;
    out->weight_bytes = c->weight_bytes;
    out->weight_dtype = c->wdt;
    out->kv_dtype = c->params.kv_dtype;
    out->kv_bytes = 0;
    for (int32_t l = 0; c->kv_ready && l < c->kv.n_layer; l++)
        out->kv_bytes +=
            2 * (pllm_kv_layer_in_sw(&c->kv, c->model->layers[l].window) ? c->kv_layer_bytes_sw
                                                                         : c->kv_layer_bytes);
    out->workspace_bytes = c->workspace_bytes + c->d_plan_bytes;
    out->load_seconds = c->load_seconds;
    out->steps = c->steps;
    out->graph_steps = c->graph_steps;
    out->split_steps = c->split_steps;
    snprintf(out->graph_error, sizeof out->graph_error, "%s", c->graph_error);
    snprintf(out->attention, sizeof out->attention, "%s", c->fi ? pllm_cuda_fi_build() : "own");
    out->fi_steps = c->fi_steps;
    out->graphs = c->n_graphs;
    out->src_steps = c->src_steps;
    out->src_host_steps = c->src_host_steps;
    out->device_seconds = c->device_seconds;
}

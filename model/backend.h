/*
 * backend.h: the one interface both backends (cpu/, cuda/) implement, the batch plan the
 * engine hands them each step, and the paged KV cache layout. This header is the contract:
 * the engine never includes a backend's headers, and a backend never includes the scheduler.
 *
 * Ownership: the engine owns block ids (which blocks a sequence uses); the backend owns KV
 * memory (what is in them). A plan and everything it points to is borrowed for the duration
 * of one step() call.
 *
 * KV layout (the only definition; kernels index by it):
 *   for each layer l, a K cache and a V cache, each
 *       [n_blocks][n_head_kv][block_size][head_dim]   elements of kv_dtype
 *   A token's slot is block_id * block_size + offset_in_block; its K for head h of layer l is
 *       K_l[slot / block_size][h][slot % block_size][0 .. head_dim)
 *   Position p of a sequence lives in block block_table[p / block_size] at offset
 *   p % block_size. Keys are stored after RoPE.
 *
 * int8 KV (dtype PLLM_KV_DTYPE_I8, CPU): each layer's K (and V) cache is
 *       data   [n_blocks][n_head_kv][block_size * head_dim]   int8
 *       scales [n_blocks][n_head_kv][block_size]              IEEE half, after all the data
 *   one fp16 scale per (block, head, position): the row x of one head of one token is stored as
 *   q = clamp(rint(x / s), -127, 127) with s = amax(|x|) / 127 rounded up to a half (0 when x is
 *   0), and x is read back as s * q. A V slab (one block of one head) is [block_size][head_dim],
 *   row-major as above; a K slab is in 4-element groups, the positions of the block interleaved,
 *   [head_dim / 4][block_size][4] (element e of position p at ((e / 4) * block_size + p) * 4 +
 *   e % 4), so that 16 consecutive positions of one group are 64 contiguous bytes: one integer
 *   dot-product instruction (vpdpbusd) then yields 16 positions' partial scores. head_dim is a
 *   multiple of 4. Per-row scales make a row's bytes a function of that row alone, so the cache
 *   does not depend on how a block filled (token by token, a prefill chunk, a copied prefix).
 *   A block takes block_size * (head_dim + 2) bytes per head and layer for K and as much for V:
 *   2 * head_dim / (head_dim + 2) times the sequences of F16 (1.94x at head_dim 64).
 *
 * fp8 KV (dtype PLLM_KV_DTYPE_FP8, CUDA): the same two regions and scales as int8, with the data
 * in OCP FP8 E4M3 (CUDA's __nv_fp8_e4m3) and both K and V slabs row-major,
 *       data   [n_blocks][n_head_kv][block_size][head_dim]   E4M3 bytes
 *       scales [n_blocks][n_head_kv][block_size]              IEEE half, after all the data
 *   s = amax(|x|) / 448 rounded up to a half (0 when x is 0); an element x is stored as
 *   __nv_cvt_float_to_fp8(x / s, __NV_SATFINITE, __NV_E4M3) (round to nearest even, saturating
 *   at +-448) and read back as s * e4m3(q). Same bytes per row as int8 (head_dim + 2).
 *
 * A step (the plan):
 *   - tokens[n_tokens], positions[n_tokens], slots[n_tokens]: every scheduled sequence's new
 *     tokens, flattened in sequence order; slots[i] is where token i's K/V are written.
 *   - seqs[n_seqs]: per sequence, its range of new tokens, its context length after the step,
 *     and its block table (a range of block_tables[]). The new tokens of sequence s are at
 *     positions n_ctx - n_new .. n_ctx - 1; they attend causally to positions [0, their own].
 *     Positions before n_ctx - n_new are already in the cache (computed earlier, or shared
 *     prefix blocks). Sequences never attend to one another's tokens.
 *   - samples[n_samples]: the sequences that need a next token this step (those whose new
 *     tokens end at the end of what is known); the token is drawn from the logits of the
 *     sequence's new token number n_new - 1 - back (back = 0: its last new token). A prefill
 *     chunk that does not reach the end of its prompt is not sampled. Speculative decoding
 *     (engine/speculate.h) appends k draft tokens to a sequence's new tokens and asks for k + 1
 *     samples of it, back = k .. 0, each with its own ctx (the history including the drafts
 *     before that row); the engine then keeps the longest prefix of drafts that the samples
 *     reproduce. Two consecutive samples of one sequence have decreasing back.
 * The backend runs the model, writes K/V of the new tokens into their slots, and fills the
 * outputs for every sample, in samples[] order.
 *
 * Asynchronous stepping (submit / wait; step is their composition): submit checks and queues a
 * step and returns; wait blocks until the oldest submitted step is done and fills its out. At
 * most 2 steps are in flight. The plan (and all it points to) is borrowed only during submit;
 * out until the matching wait. Submitted steps run in submission order, and so do
 * copy_blocks / kv_read_block / kv_write_block calls against them (a block freed by the engine
 * while a step in flight still writes it may be reused by a later step: that step's writes come
 * after). A plan submitted right after another may name, instead of an id, "the token the
 * previous step samples for its sample row r": token_src[i] = r (tokens[i] is then ignored),
 * resolved by the backend where that result lives (on a GPU, on the device: no round trip).
 * Such a token's sample histories hold PLLM_TOKEN_PENDING in its place: a sample (back 0) whose
 * sequence's last new token has token_src >= 0 may end its history (pllm_sample_ctx.output[
 * n_output - 1]) with it, and the backend uses the resolved token there too (penalties read it;
 * on a GPU it is patched into the packed history on the device). No other entry is pending.
 */
#pragma once

#include "model/common.h"
#include "model/dtype.h"
#include "model/model.h"
#include "model/sampling.h"

typedef struct pllm_kv_layout {
    int32_t n_layer;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t block_size; /* tokens per block */
    int32_t n_blocks;
    pllm_dtype dtype; /* F32, F16, PLLM_KV_DTYPE_I8 or _FP8 (backend's choice) */
    /* Sliding-window layers (model.h: pllm_layer_weights.window > 0; Gemma 3). kv_layout fills
     * window (cfg.sliding_window, 0: none) and n_layer_sw (how many layers have a window). The
     * engine sets n_blocks_sw > 0 to split the cache (the hybrid KV layout): the sliding layers'
     * K/V then live in their own pool of n_blocks_sw blocks, addressed by the plan's
     * sw_block_tables / sw_slots, and n_blocks counts the other (global) layers' blocks.
     * n_blocks_sw = 0: one pool, every layer's K/V in the n_blocks blocks (as without windows). */
    int32_t window;
    int32_t n_layer_sw;
    int32_t n_blocks_sw;
} pllm_kv_layout;

/* Whether a layer of window `window` (model.h) keeps its K/V in the sliding pool. */
static inline bool pllm_kv_layer_in_sw(const pllm_kv_layout *l, int32_t window)
{
    return l->n_blocks_sw > 0 && window > 0;
}

/* kv_layout's sliding fields for model m: n_layer_sw (layers with window > 0) and window
 * (cfg.sliding_window where there are such layers, else 0). */
void pllm_kv_layout_sliding(const pllm_model *m, pllm_kv_layout *out);

/* kv_init's check of a layout's sliding pool against model m: n_blocks_sw >= 0, > 0 only where
 * the layout's n_layer_sw and window are the model's, and its slots within int32. Errors
 * "<who>: ..." (who: e.g. "cpu kv_init"). */
pllm_status pllm_kv_check_sliding(const char *who, const pllm_kv_layout *L, const pllm_model *m);

/* The int8 KV cache type (layout above). It is a cache format, not a tensor dtype, so it extends
 * pllm_dtype here, past PLLM_DTYPE_COUNT (which backend params use for "auto"); the pllm_dtype_*
 * functions of engine/dtype.h do not take it: use the pllm_kv_* helpers below. */
#define PLLM_KV_DTYPE_I8 ((pllm_dtype)(PLLM_DTYPE_COUNT + 1))
/* The fp8 (E4M3) KV cache type (layout above), likewise past PLLM_DTYPE_COUNT. */
#define PLLM_KV_DTYPE_FP8 ((pllm_dtype)(PLLM_DTYPE_COUNT + 2))

static inline const char *pllm_kv_dtype_name(pllm_dtype t)
{
    return t == PLLM_KV_DTYPE_I8 ? "I8" : t == PLLM_KV_DTYPE_FP8 ? "FP8" : pllm_dtype_name(t);
}

/* Bytes of one token's K (or V) row of one head, per layer, scale included. */
static inline size_t pllm_kv_row_bytes(const pllm_kv_layout *l)
{
    if (l->dtype == PLLM_KV_DTYPE_I8 || l->dtype == PLLM_KV_DTYPE_FP8)
        return (size_t)l->head_dim + 2;
    return (size_t)l->head_dim * pllm_dtype_block_bytes(l->dtype);
}

/* Bytes one block takes across all layers of its pool, K and V: every layer with one pool; the
 * global layers with the hybrid layout (n_blocks_sw > 0). */
static inline size_t pllm_kv_block_bytes(const pllm_kv_layout *l)
{
    int32_t n = l->n_blocks_sw > 0 ? l->n_layer - l->n_layer_sw : l->n_layer;
    return 2 * (size_t)n * (size_t)l->n_head_kv * (size_t)l->block_size * pllm_kv_row_bytes(l);
}

/* Bytes one block of the sliding pool takes (its layers' K and V); 0 without one. */
static inline size_t pllm_kv_sw_block_bytes(const pllm_kv_layout *l)
{
    if (l->n_blocks_sw <= 0) return 0;
    return 2 * (size_t)l->n_layer_sw * (size_t)l->n_head_kv * (size_t)l->block_size *
           pllm_kv_row_bytes(l);
}

typedef struct pllm_seq_plan {
    int32_t token_start; /* first new token in plan->tokens */
    int32_t n_new;       /* new tokens this step, >= 1 */
    int32_t n_ctx;       /* context length after this step */
    int32_t block_start; /* first entry of this sequence's block table in plan->block_tables */
    int32_t n_blocks;    /* entries in the block table; >= ceil(n_ctx / block_size) */
} pllm_seq_plan;

typedef struct pllm_sample_req {
    int32_t seq;  /* index into plan->seqs */
    int32_t back; /* row: new token n_new - 1 - back of the sequence;
                     in [0, n_new); 0 (the last) unless speculating */
    const pllm_sampling_params *params;
    pllm_sample_ctx ctx; /* prompt/output history, banned ids */
} pllm_sample_req;

/* A history entry not known on the host yet (the token a submitted step is sampling). */
#define PLLM_TOKEN_PENDING (-1)

typedef struct pllm_batch_plan {
    int32_t n_tokens;
    const int32_t *tokens;    /* [n_tokens] */
    const int32_t *token_src; /* [n_tokens] or NULL (all known): >= 0: token i is the id the
                                 previously submitted step samples for its sample row
                                 token_src[i] (tokens[i] ignored); -1: tokens[i] */
    const int32_t *positions; /* [n_tokens] */
    const int32_t *slots;     /* [n_tokens] */
    int32_t n_seqs;
    const pllm_seq_plan *seqs;   /* [n_seqs] */
    const int32_t *block_tables; /* flattened; see pllm_seq_plan */
    /* The hybrid layout only (kv layout n_blocks_sw > 0; NULL otherwise): the sliding layers'
     * block tables, shaped exactly as block_tables (sequence s's at [block_start, + n_blocks),
     * entry b for positions [b * block_size, (b + 1) * block_size)) with ids in the sliding pool,
     * and -1 for blocks wholly before every new token's window: entries from
     * max(0, n_ctx - n_new + 1 - window) / block_size on must be valid. sw_slots[i]: where
     * token i's sliding-layer K/V go, sw_block_tables[pos / bs] * bs + pos % bs. */
    const int32_t *sw_block_tables;
    const int32_t *sw_slots; /* [n_tokens] */
    int32_t n_samples;
    const pllm_sample_req *samples; /* [n_samples] */
} pllm_batch_plan;

typedef struct pllm_step_out {
    int32_t *tokens;     /* [n_samples] sampled ids (required) */
    float *logprobs;     /* [n_samples] log-prob of the sampled id; optional (NULL) */
    int32_t top_n;       /* top logprobs per sample held by the arrays below */
    int32_t *top_ids;    /* [n_samples][top_n]; optional */
    float *top_logprobs; /* [n_samples][top_n]; optional */
    float *logits;       /* [n_samples][n_vocab] raw logits before sampling; optional (tests) */
} pllm_step_out;

typedef struct pllm_backend_iface {
    const char *name; /* "cpu", "cuda" */
    bool async;       /* submit returns before the step is done (a device): the engine overlaps
                         its host work with the step by default (pllm_engine_params.overlap) */
    bool no_pending_history; /* submit cannot resolve a pending history entry (above): the engine
                                completes the step in flight before queueing a sample whose
                                penalties read one (a fallback; every backend here resolves it) */
    /* The layout this backend would use for block_size-token blocks (dtype and dims; n_blocks
     * is left 0). The engine sizes its pool from pllm_kv_block_bytes of it. */
    pllm_status (*kv_layout)(void *ctx, int32_t block_size, pllm_kv_layout *out);
    /* Memory the KV cache may use, in bytes (free memory less what the backend keeps back). */
    pllm_status (*kv_available)(void *ctx, size_t *bytes);
    /* Optional (may be NULL: kv_available keeps back all a step needs): the bytes of memory,
     * counted in kv_available, that the workspace of a step of up to n_tokens tokens and
     * n_samples samples will take (activations; a mixture of experts' per-expert scratch), which
     * is allocated lazily, at the first step, so kv_available cannot see it yet. The engine's
     * default KV budget and the CLI's check of an explicit one leave it free. */
    pllm_status (*workspace_bytes)(void *ctx, int32_t n_tokens, int32_t n_samples, size_t *bytes);
    /* Allocate the KV cache; called once before the first step. */
    pllm_status (*kv_init)(void *ctx, const pllm_kv_layout *layout);
    /* Run one step: submit + wait (a plan with token_src reads the previous step's samples). */
    pllm_status (*step)(void *ctx, const pllm_batch_plan *plan, pllm_step_out *out);
    /* Queue one step (see "Asynchronous stepping" above) / complete the oldest queued one. A
     * backend without a device (cpu) may do the work in submit; wait then only returns. */
    pllm_status (*submit)(void *ctx, const pllm_batch_plan *plan, pllm_step_out *out);
    pllm_status (*wait)(void *ctx);
    /* Optional (may be NULL): device time of the steps completed so far, in seconds (CUDA
     * events around each step), for the report's "device busy" share; false: not measured. */
    bool (*device_seconds)(void *ctx, double *seconds);
    /* Optional (may be NULL): copy whole blocks src[i] -> dst[i], for copy-on-write. */
    pllm_status (*copy_blocks)(void *ctx, const int32_t *src, const int32_t *dst, int32_t n);
    /* Optional (may be NULL; the persistent prefix cache needs both): copy one block's K/V
     * out of the cache into buf, or from buf into the cache. buf holds pllm_kv_block_bytes
     * bytes: for each layer l, K then V, the block's slab [n_head_kv][block_size][row] (I8: its
     * data [n_head_kv][block_size * head_dim], then its scales [n_head_kv][block_size]), i.e.
     * the cache's own bytes, so a block read and written back is bitwise the same. Every step
     * that wrote the block has finished when kv_read_block returns. */
    pllm_status (*kv_read_block)(void *ctx, int32_t block, void *buf);
    pllm_status (*kv_write_block)(void *ctx, int32_t block, const void *buf);
    void (*destroy)(void *ctx);
} pllm_backend_iface;

typedef struct pllm_backend {
    const pllm_backend_iface *iface;
    void *ctx;
} pllm_backend;

/* Destroy a backend (accepts a zeroed struct). */
static inline void pllm_backend_free(pllm_backend *b)
{
    if (b && b->iface) b->iface->destroy(b->ctx);
    if (b) {
        b->iface = NULL;
        b->ctx = NULL;
    }
}

/* ---- shared by the backends (model/backend.c): the contract's checks and the RoPE rule ---- */

/* Check a step's plan and outputs against the contract above, before anything runs: token ids
 * in the vocabulary, sequences covering the tokens in order, positions = n_ctx - n_new + j,
 * slots where the block table puts each position, block ids inside the pool, no slot written
 * twice, sample requests and sampling parameters valid. A bad plan is PLLM_ERR_INVALID or
 * PLLM_ERR_RANGE with a message "<who> step: ..." naming the field and value.
 *   kv         the layout kv_init was given; NULL before kv_init (an error)
 *   slot_bits  [ceil(max(kv->n_blocks, kv->n_blocks_sw) * kv->block_size / 64)] zero bits, the
 *              duplicate-slot marks;
 *              zero again on return
 *   tok_seq    optional [n_tokens]: each token's sequence index, for a valid plan */
pllm_status pllm_backend_check_plan(const char *who, const pllm_kv_layout *kv, int32_t n_vocab,
                                    uint64_t *slot_bits, int32_t *tok_seq, const pllm_batch_plan *p,
                                    const pllm_step_out *out);

/* Resolve a plan's token_src (backend.h above) against the previous step's sampled ids prev
 * [n_prev]: dst[i] = token_src[i] >= 0 ? prev[token_src[i]] : tokens[i]. A source outside
 * [0, n_prev) or below -1 is PLLM_ERR_RANGE "<who> step: token_src[i] = ...". */
pllm_status pllm_backend_resolve_tokens(const char *who, const pllm_batch_plan *p,
                                        const int32_t *prev, int32_t n_prev, int32_t *dst);

/* The plan token that sample s's pending last history entry is (backend.h: PLLM_TOKEN_PENDING
 * at output[n_output - 1] of a back-0 sample whose sequence's last new token has token_src >= 0),
 * or -1 when its history holds no pending entry. */
int32_t pllm_backend_pending_history(const pllm_batch_plan *p, int32_t s);

/* Check copy_blocks' arguments: kv NULL (before kv_init), n < 0, NULL arrays, or a block id
 * outside [0, kv->n_blocks) is an error "<who> copy_blocks: ...". */
pllm_status pllm_backend_check_copy_blocks(const char *who, const pllm_kv_layout *kv,
                                           const int32_t *src, const int32_t *dst, int32_t n);

/* RoPE inverse frequencies, model.h's rule: inv_freq[rope_dim / 2], pair i of position p turns
 * by p * inv_freq[i] = p * rope_theta^(-2i/rope_dim) / ff_i, with ff_i = freq_factors[i] when
 * freq_factors != NULL (model.h's rope_freq_factors: the complete per-pair scaling), else
 * rope_factor under linear scaling, else 1. Computed in double; every backend uses this table. */
void pllm_backend_rope_freqs(double *inv_freq, const pllm_model_config *cfg,
                             const float *freq_factors);
/* The sliding-window layers' table (Gemma 3): rope_theta_local^(-2i/rope_dim), no scaling. */
void pllm_backend_rope_freqs_local(double *inv_freq, const pllm_model_config *cfg);

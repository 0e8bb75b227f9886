/*
 * kv_manager.h: per-sequence block tables on top of the block pool: allocate, append, free,
 * and the longest cached prefix.
 *
 * A sequence's position p lives in block table->ids[p / block_size] at offset p % block_size
 * (the layout backend.h defines). A table only grows while its sequence runs and is released
 * whole (when the sequence finishes or is preempted).
 *
 * Prefix reuse:
 *   - pllm_kv_find_cached walks the sequence's block keys from its first block and returns the
 *     longest chain of indexed blocks that match, never covering the last token: at most
 *     (n_tokens - 1) / block_size blocks, so the last token is always recomputed (it yields the
 *     logits of the next token).
 *   - pllm_kv_allocate takes those hits (touching them: a cached block in the free queue leaves
 *     it) plus fresh blocks for the rest.
 *   - pllm_kv_commit indexes the table's full, computed blocks after a step. When an identical
 *     block (same parent, same tokens) is already indexed, for instance because two sequences
 *     computed the same prefix at once, the table switches to that block and releases its own
 *     copy, so the table is always a chain of indexed blocks followed by unindexed ones.
 *   - pllm_kv_free releases tail first: a sequence's last blocks are evicted before its first
 *     ones, and a parent never precedes its child in the free queue (see block_pool.h).
 *
 * Sliding-window layers (the hybrid KV layout; docs/architecture.md "Hybrid KV"): a manager
 * given a sliding pool (pllm_kv_add_sliding) keeps a second table per sequence, sw, for the
 * layers that only ever read the last `window` positions. sw has one entry per block of ids
 * (same logical index); entries below sw_lo are -1 (released). With n_computed positions
 * computed, every later token attends to positions >= n_computed + 1 - window only, so
 * pllm_kv_commit releases the sliding blocks wholly before that, block lo(n_computed) =
 * max(0, n_computed + 1 - window) / block_size. A decoding sequence therefore holds at most
 * ceil(window / block_size) + 1 sliding blocks (plus those of tokens in flight: a prefill chunk,
 * drafts). The global table (ids) keeps every block, as without a window.
 *   Prefix reuse: a prefix of h cached blocks is usable only if the sliding pool still holds
 *   the blocks lo(h * bs) .. h - 1 of that same prefix (the window before position h * bs).
 *   Sliding blocks are indexed as tagged entries (block_pool.h) under the key of their logical
 *   block and a tag naming the global block they belong to (its id and generation), when
 *   pllm_kv_commit indexes that global block; released ones stay findable until evicted. The
 *   hits are trimmed (pllm_kv_trim_hits) to the longest h whose window is all present; the
 *   rest is recomputed. Without caching nothing is findable and h = 0, except for a forked
 *   sequence (n > 1), which shares its leader's held window blocks directly
 *   (pllm_kv_share_hits), as it shares its global ones.
 *
 * Ownership: the manager owns its pool(s). Tables and key chains are plain structs owned by the
 * caller (the request); free their arrays with pllm_kv_table_free / pllm_key_chain_free after
 * the blocks were released with pllm_kv_free.
 */
#pragma once

#include "engine/block_pool.h"
#include "model/common.h"

typedef struct pllm_kv_table {
    int32_t *ids; /* [n] block ids */
    int32_t n, cap;
    int32_t n_committed; /* leading blocks already offered to the index */
    int32_t *sw;         /* with a sliding pool: [n] its block ids, -1 below sw_lo; else NULL */
    int32_t sw_lo;       /* first sliding entry still held */
    bool sw_hold_on;     /* pllm_kv_hold_sliding: release nothing from sw_hold on, while ... */
    int32_t sw_hold;     /* ... the window is at most one block past it */
} pllm_kv_table;

/* Keys of a token sequence's full blocks: keys[i] covers tokens [i*bs, (i+1)*bs). */
typedef struct pllm_key_chain {
    uint64_t *keys;
    int32_t n, cap;
} pllm_key_chain;

void pllm_kv_table_free(pllm_kv_table *t); /* frees the array; blocks must be released */
void pllm_key_chain_free(pllm_key_chain *c);

typedef struct pllm_kv_manager pllm_kv_manager;

/* A second tier below the pool (engine/prefix_tier.h: blocks saved on disk). probe says how
 * many consecutive full blocks of tokens, from block `from` (at most max), it holds; load
 * writes them into the cache blocks ids[0 .. n) and says how many it loaded (a block that
 * turns out to be unusable ends the run of blocks). */
typedef struct pllm_kv_tier {
    int32_t (*probe)(void *arg, const int32_t *tokens, int32_t from, int32_t max);
    pllm_status (*load)(void *arg, const int32_t *tokens, int32_t from, int32_t n,
                        const int32_t *ids, int32_t *n_loaded);
    void *arg;
} pllm_kv_tier;

pllm_status pllm_kv_manager_init(pllm_kv_manager **out, const pllm_block_pool_params *pool_params);
void pllm_kv_manager_free(pllm_kv_manager *kv);
/* Give the manager a sliding pool of n_blocks blocks (the pool parameters as the main pool's,
 * LRU) for layers of the given window (>= 1); before any table is used. */
pllm_status pllm_kv_add_sliding(pllm_kv_manager *kv, int32_t n_blocks, int32_t window);
/* The sliding pool, or NULL without one. */
pllm_block_pool *pllm_kv_sw_pool(pllm_kv_manager *kv);
const pllm_block_pool *pllm_kv_sw_pool_c(const pllm_kv_manager *kv);
int32_t pllm_kv_window(const pllm_kv_manager *kv); /* 0 without a sliding pool */
/* Sliding blocks t holds now. */
int32_t pllm_kv_sw_held(const pllm_kv_table *t);
pllm_block_pool *pllm_kv_pool(pllm_kv_manager *kv);
const pllm_block_pool *pllm_kv_pool_c(const pllm_kv_manager *kv);
int32_t pllm_kv_block_size(const pllm_kv_manager *kv);

/* Extend c to cover every full block of tokens[0 .. n_tokens). */
pllm_status pllm_kv_keys_extend(pllm_kv_manager *kv, pllm_key_chain *c, const int32_t *tokens,
                                int32_t n_tokens);

/* Longest cached prefix of tokens[0 .. n_tokens), in blocks, at most (n_tokens - 1) / bs; the
 * blocks go to hit[] (capacity (n_tokens - 1) / bs). Extends c as needed. No side effects on
 * the pool. */
pllm_status pllm_kv_find_cached(pllm_kv_manager *kv, pllm_key_chain *c, const int32_t *tokens,
                                int32_t n_tokens, int32_t *hit, int32_t *n_hit);

/* With a sliding pool: shorten hits hit[0 .. *n_hit) of tokens (a prefix whose full blocks are
 * all keyed in c) to the longest h whose window's sliding blocks are findable (see above), and
 * remember those for the pllm_kv_can_allocate / pllm_kv_allocate of these hits that follow
 * (nothing may change the pools in between). pllm_kv_find_cached already does it; a caller
 * with hits from elsewhere (a forked sequence sharing its leader's blocks) must call it. No-op
 * without a sliding pool. */
pllm_status pllm_kv_trim_hits(pllm_kv_manager *kv, pllm_key_chain *c, const int32_t *tokens,
                              const int32_t *hit, int32_t *n_hit);

/* With a sliding pool: as pllm_kv_trim_hits, for hits hit[0 .. *n_hit) that are the leading
 * blocks of table `from` (a forked sequence taking its leader's prompt blocks, which holds the
 * same tokens): the window's sliding blocks are shared from from->sw directly, so it works
 * without prefix caching; where `from` has already released some of them, the index is tried
 * too (caching on), else the hits are trimmed to what from still holds. No-op without a
 * sliding pool. */
pllm_status pllm_kv_share_hits(pllm_kv_manager *kv, const pllm_kv_table *from, pllm_key_chain *c,
                               const int32_t *tokens, const int32_t *hit, int32_t *n_hit);

/* A leader of forked completions (n > 1) whose forks will take its first n_tokens / bs blocks
 * (pllm_kv_share_hits) needs the window of position n_tokens, blocks lo(n_tokens) on (or from
 * sw_lo, where t holds less), which
 * its own commits past n_tokens would release: keep them while t's window is at most one block
 * past them (at most one sliding block more); then release as usual. Reset by pllm_kv_free.
 * No-op without a sliding pool. */
void pllm_kv_hold_sliding(pllm_kv_manager *kv, pllm_kv_table *t, int32_t n_tokens);
/* End t's hold now (t has n_computed positions computed), releasing what it kept; whether that
 * released a block. The scheduler drops every hold before it shortens a chunk or preempts for
 * want of sliding blocks, so a hold never costs a step: with all holds dropped the pools are
 * as without them. */
bool pllm_kv_drop_hold(pllm_kv_manager *kv, pllm_kv_table *t, int32_t n_computed);

/* Set (or clear, NULL) the tier pllm_kv_fetch_tier consults; borrowed. */
void pllm_kv_set_tier(pllm_kv_manager *kv, const pllm_kv_tier *tier);
/* Extend a lookup's hits hit[0 .. *n_hit) (from pllm_kv_find_cached, capacity (n_tokens - 1) /
 * bs) with the blocks the tier holds after them: each is loaded into a fresh block (taken from
 * the free queue, never one of the hits or the last free block) and indexed, then released, so
 * the hits are again cached blocks for pllm_kv_allocate. No-op without a tier or caching, and
 * with a sliding pool (a tier block holds no sliding layers: the engine turns the hybrid
 * layout off when it has a tier). */
pllm_status pllm_kv_fetch_tier(pllm_kv_manager *kv, pllm_key_chain *c, const int32_t *tokens,
                               int32_t n_tokens, int32_t *hit, int32_t *n_hit);

/* Blocks table t must gain (besides n_hit hits) to hold n_tokens positions. */
int32_t pllm_kv_blocks_needed(const pllm_kv_manager *kv, const pllm_kv_table *t, int32_t n_hit,
                              int32_t n_tokens);
/* Whether pllm_kv_allocate(t, hit, n_hit, n_tokens) would succeed now. */
bool pllm_kv_can_allocate(const pllm_kv_manager *kv, const pllm_kv_table *t, const int32_t *hit,
                          int32_t n_hit, int32_t n_tokens);
/* With a sliding pool, when the global pool could hold n_base + n_new positions for t (with
 * hits hit[0 .. n_hit) as for pllm_kv_can_allocate) but the sliding pool cannot: the largest
 * m < n_new for which pllm_kv_can_allocate(t, hit, n_hit, n_base + m) holds (0: none), so the
 * caller can shorten a prefill chunk to what the sliding pool takes instead of preempting. Else
 * (no sliding pool, the sliding pool is not what is short, or it all fits) n_new. */
int32_t pllm_kv_fit_sliding(const pllm_kv_manager *kv, const pllm_kv_table *t, const int32_t *hit,
                            int32_t n_hit, int32_t n_base, int32_t n_new);
/* Grow t to hold n_tokens positions: first append the hits (only into an empty table; they
 * become its committed prefix), then fresh blocks. PLLM_ERR_NOMEM, changing nothing, when the
 * pool is short. */
pllm_status pllm_kv_allocate(pllm_kv_manager *kv, pllm_kv_table *t, const int32_t *hit,
                             int32_t n_hit, int32_t n_tokens);
/* Index t's full blocks within tokens[0 .. n_computed) (whose K/V are now written); with a
 * sliding pool also their sliding blocks, then release the sliding blocks before the window
 * of position n_computed. */
pllm_status pllm_kv_commit(pllm_kv_manager *kv, pllm_kv_table *t, pllm_key_chain *c,
                           const int32_t *tokens, int32_t n_computed);
/* Release every block of t, tail first; t becomes empty (its array is kept). */
void pllm_kv_free(pllm_kv_manager *kv, pllm_kv_table *t);
/* Leading blocks of t that are in the index (they survive a free until evicted). */
int32_t pllm_kv_cached_prefix(const pllm_kv_manager *kv, const pllm_kv_table *t);
/* Leading blocks of t that another table also holds (reference count >= 2): they stay in
 * memory when t is freed. With a sliding pool, only as far as a prefix stays usable: the
 * longest h of them whose window's sliding blocks (lo(h * bs) .. h - 1) t holds and another
 * table holds too (else a lookup would trim the prefix and recompute it). */
int32_t pllm_kv_shared_prefix(const pllm_kv_manager *kv, const pllm_kv_table *t);
/* Sliding blocks that freeing t would return to the sliding pool (held by t alone); 0
 * without a sliding pool. */
int32_t pllm_kv_sw_private(const pllm_kv_manager *kv, const pllm_kv_table *t);
/* Whether growing t (no hits) to n_tokens positions is short of sliding blocks only: the global
 * pool has the blocks, the sliding pool does not. */
bool pllm_kv_sliding_short(const pllm_kv_manager *kv, const pllm_kv_table *t, int32_t n_tokens);

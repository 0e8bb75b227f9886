/*
 * prefix_plan.h: offline prefix planning. The engine knows its queued requests before it runs
 * them; the planner keeps
 *   1. a trie of the live requests' reusable prompt blocks (block granularity: node = one full
 *      block in the context of every block before it), with, per node, the waiting requests
 *      that will reuse it, in queue order (two indexed heaps: the first and the last);
 *   2. the plan statistics: the best achievable prefix-cache hit over every prompt added so
 *      far, and how often each distinct prompt block was computed.
 *
 * What the scheduler asks of it:
 *   - where a new request goes: right behind the last waiting request of its deepest shared
 *     node (pllm_plan_group_tail), so the queue is the trie in depth-first order (children in
 *     first-arrival order) as far as the fairness bound lets requests move;
 *   - (PLLM_EVICT_FUTURE) the next use of every cached block: the label of the first waiting
 *     request that will reuse it (PLLM_LABEL_NEVER when none), pushed into the block pool
 *     whenever it changes. A request that reuses a block also reuses its parent, so a parent's
 *     label is never later than its child's: eviction stays leaves first.
 *
 * A request's path covers its reusable blocks: (n_tokens - 1) / block_size of them (the last
 * token is always recomputed); after a preemption it grows to cover the generated tokens too,
 * since the recompute can reuse them. Nodes are named by their own key chain
 * k_i = XXH3-64(tokens of block i; seed k_{i-1}) (not the pool's injectable hash); a 64-bit
 * collision can only make a plan worse, never an output wrong (the pool verifies every hit).
 * A node lives while a live request's path holds it. A node is linked to the pool block that
 * holds its content ((block, generation), checked before use): found at add time by a lookup,
 * or set when a request's blocks are committed.
 *
 * The best achievable hit (pllm_engine_plan_stats in engine.h states it for users): over the
 * prompts (one per completion) added so far, with B the distinct full prompt blocks, H(b) the
 * prompts that can reuse b (b among their first (n - 1) / block_size blocks) and C(b) the
 * prompts holding b at all,
 *     best = block_size * sum over b of (|H(b)| - [C(b) == H(b)])      (caching on)
 *     best = block_size * sum over completions k >= 1 of (n - 1) / block_size  (caching off)
 * kept incrementally in a set of 64-bit keys (8 bytes a distinct block, up to 2^23 blocks;
 * past that the figures are marked inexact).
 *
 * Cost: add O(L) hash lookups, wait/unwait O(L log W), pool updates O(log n_blocks) each, with
 * L the request's path length and W the waiting requests holding a node.
 *
 * Ownership: the planner borrows the pool and the requests; it owns the trie and the set, and
 * the plan fields of each request (freed by pllm_plan_remove).
 */
#pragma once

#include "engine/block_pool.h"
#include "model/common.h"
#include "engine/kv_manager.h"
#include "engine/request.h"

typedef struct pllm_plan_params {
    int32_t block_size;
    bool trie;           /* prefix caching on: keep the trie (grouping, next use) */
    pllm_kv_manager *kv; /* its pool gets next-use labels under PLLM_EVICT_FUTURE */
} pllm_plan_params;

typedef struct pllm_plan_stats {
    int64_t requests;      /* completions added */
    int64_t prompt_tokens; /* their prompt tokens */
    int64_t best_cached_tokens;
    int64_t distinct_blocks;   /* distinct full prompt blocks */
    int64_t shared_blocks;     /* of them, held by more than one prompt */
    int64_t blocks_computed;   /* full prompt blocks run through the model */
    int64_t blocks_recomputed; /* of them, blocks computed before in this run */
    int64_t grouped;           /* requests queued behind their group, not at the tail */
    bool exact;
    int32_t live_nodes;
} pllm_plan_stats;

typedef struct pllm_plan pllm_plan;

pllm_status pllm_plan_init(pllm_plan **out, const pllm_plan_params *p);
void pllm_plan_free(pllm_plan *pl);

/* A new request (its pool keys already cover its tokens): build its path, link cached blocks.
 * On error nothing of r stays in the planner. */
pllm_status pllm_plan_add(pllm_plan *pl, pllm_req *r);
/* Count r's prompt in the plan statistics (once the request and its siblings are queued). */
void pllm_plan_account(pllm_plan *pl, pllm_req *r);
/* The last waiting request (queue order) of the deepest node of r's path that has waiting
 * requests, or NULL. *depth: that node's depth in blocks (1 = first block). */
pllm_req *pllm_plan_group_tail(const pllm_plan *pl, const pllm_req *r, int32_t *depth);
void pllm_plan_note_grouped(pllm_plan *pl);
/* r (with its order label) is waiting now: its path, grown to its current tokens, enters the
 * nodes' heaps. */
pllm_status pllm_plan_wait(pllm_plan *pl, pllm_req *r);
/* r left the waiting queue (admitted). */
void pllm_plan_unwait(pllm_plan *pl, pllm_req *r);
/* r's label changed while it waits (respacing keeps the order; refreshes pool labels). */
void pllm_plan_relabeled(pllm_plan *pl, pllm_req *r);
/* Blocks [from, to) of r's table are committed: link the nodes holding their content. */
void pllm_plan_link(pllm_plan *pl, pllm_req *r, int32_t from, int32_t to);
/* r computed tokens [from, to): count the full prompt blocks that ended in that range. */
void pllm_plan_computed(pllm_plan *pl, pllm_req *r, int32_t from, int32_t to);
/* r is gone (finished, failed or never queued): drop its path and plan fields. */
void pllm_plan_remove(pllm_plan *pl, pllm_req *r);

void pllm_plan_get_stats(const pllm_plan *pl, pllm_plan_stats *out);
/* Verify the trie, the heaps and (FUTURE) every linked free block's label; for tests. */
pllm_status pllm_plan_check(const pllm_plan *pl);

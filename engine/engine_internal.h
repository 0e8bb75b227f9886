/*
 * engine_internal.h: accessors into a running engine for tests and benchmarks (not for cmd/):
 * the last step's plan, the KV manager (and through it the block pool), the prefix planner, the
 * context limit, and a create() with hooks (a degenerate block hash to force prefix-cache key
 * collisions; FCFS queueing for comparisons).
 * Pointers are borrowed from the engine and valid until its next step.
 */
#pragma once

#include "engine/engine.h"
#include "engine/kv_manager.h"
#include "engine/prefix_plan.h"
#include "engine/scheduler.h"

/* The plan of the last step (entries' req pointers are NULL for requests finished in it). */
const pllm_sched_out *pllm_engine_last_plan(const pllm_engine *e);
pllm_kv_manager *pllm_engine_kv(pllm_engine *e);
/* The scheduler (its waiting queue can be walked with pllm_sched_waiting_head / w_next). */
pllm_sched *pllm_engine_sched(pllm_engine *e);
/* The prefix planner (its check verifies the trie and the next-use labels). */
pllm_plan *pllm_engine_plan(pllm_engine *e);
/* min(max_model_len, KV capacity in tokens): a request stops ("length") when it gets there. */
int32_t pllm_engine_ctx_limit(const pllm_engine *e);

typedef struct pllm_engine_hooks {
    pllm_block_hash_fn block_hash; /* NULL: XXH3 */
    void *block_hash_arg;
    bool no_grouping;   /* queue every new request at the tail (FCFS order; for comparisons) */
    int32_t label_bits; /* queue label spacing 2^label_bits (0: 64); small forces respacing */
    /* speculation (params.speculate not off): replaces the proposers; up to k drafts into
     * draft[] continuing toks[0 .. n) of completion (req_id, index); returns how many. Tests
     * use it to propose right and wrong drafts at will. NULL: speculate.h's proposers. */
    int32_t (*propose)(void *arg, uint64_t req_id, int32_t index, const int32_t *toks, int32_t n,
                       int32_t *draft, int32_t k);
    void *propose_arg;
} pllm_engine_hooks;

pllm_status pllm_engine_create_hooked(pllm_engine **out, const pllm_model *model,
                                      pllm_backend *backend, const pllm_tokenizer *tok,
                                      const pllm_engine_params *params,
                                      const pllm_engine_hooks *hooks);

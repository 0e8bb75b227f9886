/*
 * engine_fake_backend.h: a deterministic backend for engine tests (implements backend.h).
 *
 * The "model": next token = XXH3(context tokens; seed) % n_vocab, moved up (mod n_vocab) past
 * banned ids, where the context is every token of the sequence read back from the fake KV
 * cache through the plan's block table. Its "KV cache" stores, per slot, the token id and
 * position written there. Every step it verifies the plan: budget and sequence cap, token and
 * block-table ranges, positions, slot mapping, no slot written twice, every position < n_ctx
 * of every sequence mapping to a slot that holds that position, and, for sampled sequences,
 * the context read from the cache equal to the sampling history (prompt ++ output); a sample
 * with back > 0 (speculation) reads the context up to its row. Any
 * violation fails the step with PLLM_ERR_INTERNAL and a message. A block-table or prefix-cache
 * bug therefore changes tokens or fails a step.
 */
#pragma once

#include "model/backend.h"

typedef struct fake_backend_params {
    int32_t n_vocab;
    int32_t max_batched_tokens; /* limits the plan must respect (0: unchecked) */
    int32_t max_seqs;
    size_t kv_available; /* what kv_available reports */
    size_t workspace_per_token; /* workspace_bytes reports this times its n_tokens */
    bool no_pending_history;    /* declare backend.h's no_pending_history (the engine's fallback);
                                   a pending history entry of a penalty sample is then an error */
    int32_t n_layer;     /* layers the layout claims (block bytes = 8 * block_size *
                            n_layer); 0: 1. Only sizes the budget; the fake stores one
                            token per slot. */
    /* > 0: claim n_layer_sw (< n_layer) sliding-window layers of this window (backend.h): the
     * engine may then give the KV cache a sliding pool. The fake stores per slot, in both
     * pools, the position and a hash of the whole prefix up to it (what a real K/V row depends
     * on), and checks every step that each sequence's window (the positions its new tokens
     * attend to) is where its sliding table says with the prefix hash of the global slot,
     * and that every sampled sequence's global slots hold its history's prefix hashes. */
    int32_t window;
    int32_t n_layer_sw;
} fake_backend_params;

typedef struct fake_backend_stats {
    int64_t steps;
    int64_t tokens; /* computed */
    int64_t samples;
    int32_t max_step_tokens;
    int32_t max_step_seqs;
    int32_t n_blocks, block_size; /* from kv_init */
    int32_t n_blocks_sw;          /* from kv_init: the sliding pool (0: none) */
    int64_t sw_checked;           /* window positions checked in the sliding pool */
} fake_backend_stats;

pllm_status fake_backend_create(pllm_backend *out, const fake_backend_params *p);
void fake_backend_get_stats(const pllm_backend *b, fake_backend_stats *out);

/* The model itself, for references: the token after ctx[0 .. n) and its logprob. */
int32_t fake_next_token(const int32_t *ctx, int32_t n, uint64_t seed, const int32_t *banned,
                        int32_t n_banned, int32_t n_vocab, float *logprob);
/* Top-k entries the fake reports next to a sampled token. */
void fake_top(int32_t token, float logprob, int32_t k, int32_t n_vocab, int32_t *ids, float *lps);

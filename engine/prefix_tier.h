/*
 * prefix_tier.h: the persistent prefix cache seen from the engine: a pllm_kv_tier (kv_manager.h)
 * that loads blocks from a prefix store (prefix_store.h) into the backend's KV cache when
 * admission misses them in memory, and saves the full prompt blocks a step computed.
 *
 * The namespace of the store is XXH3-64 of the model identity, the KV layout (dtype, block
 * size, layers, KV heads, head dim), the backend's name and the caller's numerics tag (the
 * kernels and weight math: anything that changes the bytes a block holds), so a run only ever
 * sees blocks that it would have computed bit for bit itself; greedy output is the same with
 * a warm directory, a cold one, or none.
 *
 * Ownership: the tier borrows the backend (which must outlive it) and owns its store.
 */
#pragma once

#include "engine/kv_manager.h"
#include "engine/prefix_store.h"
#include "model/backend.h"

typedef struct pllm_prefix_tier_params {
    const char *dir;
    size_t max_bytes; /* 0: the store's default */
    uint64_t model_identity;
    const char *tag; /* the backend's numerics (may be NULL) */
    pllm_prefix_warn_fn warn;
    void *warn_arg;
} pllm_prefix_tier_params;

typedef struct pllm_prefix_tier pllm_prefix_tier;

/* Fails when the backend cannot read and write blocks, or the directory is unusable. */
pllm_status pllm_prefix_tier_create(pllm_prefix_tier **out, pllm_backend *backend,
                                    const pllm_kv_layout *layout, const pllm_prefix_tier_params *p);
void pllm_prefix_tier_free(pllm_prefix_tier *t);
/* The kv_manager hook (valid while t lives). */
const pllm_kv_tier *pllm_prefix_tier_iface(pllm_prefix_tier *t);
/* Save blocks [from, to) of a sequence whose tokens are tokens (at least to * block_size of
 * them), held in the cache blocks ids[from .. to). */
pllm_status pllm_prefix_tier_save(pllm_prefix_tier *t, const int32_t *tokens, int32_t from,
                                  int32_t to, const int32_t *ids);
void pllm_prefix_tier_get_stats(const pllm_prefix_tier *t, pllm_prefix_store_stats *out);
uint64_t pllm_prefix_tier_ns(const pllm_prefix_tier *t);

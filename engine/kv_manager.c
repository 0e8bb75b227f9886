/* kv_manager.c: block tables, prefix lookup, commit to the index, tail-first free. */
#include "engine/kv_manager.h"

#include <stdlib.h>

struct pllm_kv_manager {
    pllm_block_pool *pool;
    int32_t block_size;
    const pllm_kv_tier *tier; /* borrowed; NULL: none */
};

void pllm_kv_table_free(pllm_kv_table *t)
{
    if (!t) return;
    PLLM_ASSERT(t->n == 0);
    free(t->ids);
    *t = (pllm_kv_table){0};
}

void pllm_key_chain_free(pllm_key_chain *c)
{
    if (!c) return;
    free(c->keys);
    *c = (pllm_key_chain){0};
}

pllm_status pllm_kv_manager_init(pllm_kv_manager **out, const pllm_block_pool_params *pp)
{
    *out = NULL;
    pllm_kv_manager *kv = pllm_calloc(1, sizeof *kv);
    if (!kv) return PLLM_ERR_NOMEM;
    pllm_status st = pllm_block_pool_init(&kv->pool, pp);
    if (st != PLLM_OK) {
        free(kv);
        return st;
    }
    kv->block_size = pp->block_size;
    *out = kv;
    return PLLM_OK;
}

void pllm_kv_manager_free(pllm_kv_manager *kv)
{
    if (!kv) return;
    pllm_block_pool_free(kv->pool);
    free(kv);
}

pllm_block_pool *pllm_kv_pool(pllm_kv_manager *kv)
{
    return kv->pool;
}
const pllm_block_pool *pllm_kv_pool_c(const pllm_kv_manager *kv)
{
    return kv->pool;
}
int32_t pllm_kv_block_size(const pllm_kv_manager *kv)
{
    return kv->block_size;
}

static pllm_status table_reserve(pllm_kv_table *t, int32_t need)
{
    if (need <= t->cap) return PLLM_OK;
    int32_t cap = t->cap ? t->cap : 8;
    while (cap < need) cap *= 2;
    int32_t *ids = pllm_realloc(t->ids, (size_t)cap * sizeof *ids);
    if (!ids) return PLLM_ERR_NOMEM;
    t->ids = ids;
    t->cap = cap;
    return PLLM_OK;
}

pllm_status pllm_kv_keys_extend(pllm_kv_manager *kv, pllm_key_chain *c, const int32_t *tokens,
                                int32_t n_tokens)
{
    int32_t bs = kv->block_size, n_full = n_tokens / bs;
    if (n_full <= c->n) return PLLM_OK;
    if (n_full > c->cap) {
        int32_t cap = c->cap ? c->cap : 8;
        while (cap < n_full) cap *= 2;
        uint64_t *keys = pllm_realloc(c->keys, (size_t)cap * sizeof *keys);
        if (!keys) return PLLM_ERR_NOMEM;
        c->keys = keys;
        c->cap = cap;
    }
    for (int32_t i = c->n; i < n_full; i++) {
        uint64_t parent = i == 0 ? PLLM_BLOCK_ROOT_KEY : c->keys[i - 1];
        c->keys[i] = pllm_block_pool_hash(kv->pool, parent, tokens + (size_t)i * (size_t)bs);
    }
    c->n = n_full;
    return PLLM_OK;
}

pllm_status pllm_kv_find_cached(pllm_kv_manager *kv, pllm_key_chain *c, const int32_t *tokens,
                                int32_t n_tokens, int32_t *hit, int32_t *n_hit)
{
    *n_hit = 0;
    if (!pllm_block_pool_caching(kv->pool) || n_tokens < 1) return PLLM_OK;
    int32_t bs = kv->block_size, max_blocks = (n_tokens - 1) / bs;
    if (max_blocks == 0) return PLLM_OK;
    PLLM_TRY(pllm_kv_keys_extend(kv, c, tokens, max_blocks * bs));
    int32_t parent = -1, n = 0;
    for (; n < max_blocks; n++) {
        int32_t id =
            pllm_block_pool_lookup(kv->pool, c->keys[n], parent, tokens + (size_t)n * (size_t)bs);
        if (id < 0) break;
        hit[n] = id;
        parent = id;
    }
    *n_hit = n;
    return PLLM_OK;
}

void pllm_kv_set_tier(pllm_kv_manager *kv, const pllm_kv_tier *tier)
{
    kv->tier = tier;
}

pllm_status pllm_kv_fetch_tier(pllm_kv_manager *kv, pllm_key_chain *c, const int32_t *tokens,
                               int32_t n_tokens, int32_t *hit, int32_t *n_hit)
{
    if (!kv->tier || !pllm_block_pool_caching(kv->pool) || n_tokens < 1) return PLLM_OK;
    int32_t bs = kv->block_size, max_blocks = (n_tokens - 1) / bs, from = *n_hit;
    if (from >= max_blocks) return PLLM_OK;
    PLLM_TRY(pllm_kv_keys_extend(kv, c, tokens, max_blocks * bs));
    /* hold the hits: taking blocks from the free queue must not evict them */
    for (int32_t i = 0; i < from; i++) pllm_block_pool_touch(kv->pool, hit[i]);
    int32_t want = PLLM_MIN(max_blocks - from, pllm_block_pool_n_free(kv->pool) - 1);
    int32_t n_avail = want > 0 ? kv->tier->probe(kv->tier->arg, tokens, from, want) : 0;
    int32_t *ids = NULL, n_loaded = 0, n_indexed = 0;
    pllm_status st = PLLM_OK;
    if (n_avail > 0) {
        ids = pllm_malloc((size_t)n_avail * sizeof *ids);
        if (!ids) st = PLLM_ERR_NOMEM;
        if (st == PLLM_OK) st = pllm_block_pool_alloc(kv->pool, n_avail, ids);
        if (st == PLLM_OK)
            st = kv->tier->load(kv->tier->arg, tokens, from, n_avail, ids, &n_loaded);
        else
            n_avail = 0;
        for (; st == PLLM_OK && n_indexed < n_loaded; n_indexed++) {
            int32_t d = from + n_indexed, parent = d == 0 ? -1 : hit[d - 1];
            int32_t got = pllm_block_pool_cache(kv->pool, ids[n_indexed], c->keys[d], parent,
                                                tokens + (size_t)d * (size_t)bs);
            if (got < 0) break;
            if (got != ids[n_indexed]) { /* already indexed after all: use that one */
                pllm_block_pool_touch(kv->pool, got);
                pllm_block_pool_release(kv->pool, &ids[n_indexed], 1);
                ids[n_indexed] = got;
            }
            hit[d] = got;
        }
        /* unused blocks first (unindexed: reused first), then the chain tail first */
        for (int32_t i = n_avail - 1; i >= n_indexed; i--)
            pllm_block_pool_release(kv->pool, &ids[i], 1);
    }
    for (int32_t i = from + n_indexed - 1; i >= 0; i--)
        pllm_block_pool_release(kv->pool, &hit[i], 1);
    free(ids);
    *n_hit = from + n_indexed;
    return st;
}

int32_t pllm_kv_blocks_needed(const pllm_kv_manager *kv, const pllm_kv_table *t, int32_t n_hit,
                              int32_t n_tokens)
{
    int32_t want = (n_tokens + kv->block_size - 1) / kv->block_size;
    int32_t have = t->n + n_hit;
    return want > have ? want - have : 0;
}

bool pllm_kv_can_allocate(const pllm_kv_manager *kv, const pllm_kv_table *t, const int32_t *hit,
                          int32_t n_hit, int32_t n_tokens)
{
    /* hits sitting in the free queue stop being allocatable once touched */
    int32_t free_hits = 0;
    for (int32_t i = 0; i < n_hit; i++)
        if (pllm_block_pool_ref_count(kv->pool, hit[i]) == 0) free_hits++;
    int32_t need = pllm_kv_blocks_needed(kv, t, n_hit, n_tokens);
    return need <= pllm_block_pool_n_free(kv->pool) - free_hits;
}

pllm_status pllm_kv_allocate(pllm_kv_manager *kv, pllm_kv_table *t, const int32_t *hit,
                             int32_t n_hit, int32_t n_tokens)
{
    PLLM_ASSERT(n_hit == 0 || t->n == 0);
    if (!pllm_kv_can_allocate(kv, t, hit, n_hit, n_tokens))
        return pllm_errorf(PLLM_ERR_NOMEM, "kv: %d more blocks needed for %d tokens, %d free",
                           pllm_kv_blocks_needed(kv, t, n_hit, n_tokens), n_tokens,
                           pllm_block_pool_n_free(kv->pool));
    int32_t need = pllm_kv_blocks_needed(kv, t, n_hit, n_tokens);
    PLLM_TRY(table_reserve(t, t->n + n_hit + need));
    for (int32_t i = 0; i < n_hit; i++) {
        pllm_block_pool_touch(kv->pool, hit[i]);
        t->ids[t->n++] = hit[i];
    }
    if (n_hit) t->n_committed = n_hit;
    pllm_status st = pllm_block_pool_alloc(kv->pool, need, t->ids + t->n);
    PLLM_ASSERT(st == PLLM_OK); /* checked above */
    t->n += need;
    return PLLM_OK;
}

pllm_status pllm_kv_commit(pllm_kv_manager *kv, pllm_kv_table *t, pllm_key_chain *c,
                           const int32_t *tokens, int32_t n_computed)
{
    int32_t bs = kv->block_size, n_full = PLLM_MIN(n_computed / bs, t->n);
    if (n_full <= t->n_committed) return PLLM_OK;
    if (!pllm_block_pool_caching(kv->pool)) {
        t->n_committed = n_full;
        return PLLM_OK;
    }
    PLLM_TRY(pllm_kv_keys_extend(kv, c, tokens, n_full * bs));
    for (int32_t i = t->n_committed; i < n_full; i++) {
        int32_t id = t->ids[i], parent = i == 0 ? -1 : t->ids[i - 1];
        int32_t got = pllm_block_pool_cache(kv->pool, id, c->keys[i], parent,
                                            tokens + (size_t)i * (size_t)bs);
        if (got < 0) break; /* parent not indexed: nothing after it can be */
        if (got != id) {
            /* an identical block is already indexed: share it, drop our copy */
            pllm_block_pool_touch(kv->pool, got);
            pllm_block_pool_release(kv->pool, &id, 1);
            t->ids[i] = got;
        }
    }
    t->n_committed = n_full;
    return PLLM_OK;
}

void pllm_kv_free(pllm_kv_manager *kv, pllm_kv_table *t)
{
    for (int32_t i = t->n - 1; i >= 0; i--) pllm_block_pool_release(kv->pool, &t->ids[i], 1);
    t->n = 0;
    t->n_committed = 0;
}

int32_t pllm_kv_cached_prefix(const pllm_kv_manager *kv, const pllm_kv_table *t)
{
    int32_t n = 0;
    while (n < t->n && pllm_block_pool_is_indexed(kv->pool, t->ids[n])) n++;
    return n;
}

int32_t pllm_kv_shared_prefix(const pllm_kv_manager *kv, const pllm_kv_table *t)
{
    int32_t n = 0;
    while (n < t->n && pllm_block_pool_ref_count(kv->pool, t->ids[n]) >= 2) n++;
    return n;
}

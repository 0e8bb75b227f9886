/* kv_manager.c: block tables, prefix lookup, commit to the index, tail-first free. */
#include "engine/kv_manager.h"

#include <stdlib.h>

struct pllm_kv_manager {
    pllm_block_pool *pool;
    int32_t block_size;
    const pllm_kv_tier *tier; /* borrowed; NULL: none */
    pllm_block_pool_params pool_params;
    /* the sliding pool (NULL: none) and its window */
    pllm_block_pool *sw;
    int32_t window;
    /* the sliding hits of the last pllm_kv_trim_hits: blocks lo .. n_hit - 1 of the prefix whose
     * last global hit is last (sw_hit[i - lo]) */
    int32_t *sw_hit, sw_hit_cap, sw_hit_n, sw_hit_lo, sw_hit_last;
};

void pllm_kv_table_free(pllm_kv_table *t)
{
    if (!t) return;
    PLLM_ASSERT(t->n == 0);
    free(t->ids);
    free(t->sw);
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
    kv->pool_params = *pp;
    *out = kv;
    return PLLM_OK;
}

pllm_status pllm_kv_add_sliding(pllm_kv_manager *kv, int32_t n_blocks, int32_t window)
{
    if (kv->sw) return pllm_errorf(PLLM_ERR_INVALID, "kv: the sliding pool exists already");
    if (window < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "kv: sliding window must be >= 1, got %d", window);
    pllm_block_pool_params pp = kv->pool_params;
    pp.n_blocks = n_blocks;
    pp.policy = PLLM_EVICT_LRU; /* tagged entries are leaves: no planner labels needed */
    PLLM_TRY(pllm_block_pool_init(&kv->sw, &pp));
    kv->window = window;
    return PLLM_OK;
}

void pllm_kv_manager_free(pllm_kv_manager *kv)
{
    if (!kv) return;
    pllm_block_pool_free(kv->pool);
    pllm_block_pool_free(kv->sw);
    free(kv->sw_hit);
    free(kv);
}

pllm_block_pool *pllm_kv_sw_pool(pllm_kv_manager *kv)
{
    return kv->sw;
}
const pllm_block_pool *pllm_kv_sw_pool_c(const pllm_kv_manager *kv)
{
    return kv->sw;
}
int32_t pllm_kv_window(const pllm_kv_manager *kv)
{
    return kv->sw ? kv->window : 0;
}
int32_t pllm_kv_sw_held(const pllm_kv_table *t)
{
    int32_t n = 0;
    for (int32_t i = t->sw ? t->sw_lo : t->n; i < t->n; i++) n += t->sw[i] >= 0;
    return n;
}

/* The first sliding block a sequence with n_computed positions computed still needs. */
static int32_t sw_lo_of(const pllm_kv_manager *kv, int32_t n_computed)
{
    return PLLM_MAX(0, n_computed + 1 - kv->window) / kv->block_size;
}

/* The tag of the sliding entry that belongs to global block id (its current content). */
static uint64_t sw_tag(const pllm_kv_manager *kv, int32_t id)
{
    return (uint64_t)pllm_block_pool_generation(kv->pool, id) << 32 | (uint64_t)(uint32_t)(id + 1);
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

static pllm_status table_reserve(const pllm_kv_manager *kv, pllm_kv_table *t, int32_t need)
{
    if (need <= t->cap && (!kv->sw || t->sw)) return PLLM_OK;
    int32_t cap = t->cap ? t->cap : 8;
    while (cap < need) cap *= 2;
    int32_t *ids = pllm_realloc(t->ids, (size_t)cap * sizeof *ids);
    if (!ids) return PLLM_ERR_NOMEM;
    t->ids = ids;
    if (kv->sw) {
        int32_t *sw = pllm_realloc(t->sw, (size_t)cap * sizeof *sw);
        if (!sw) return PLLM_ERR_NOMEM; /* ids grew: harmless, cap stays */
        t->sw = sw;
    }
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
    return pllm_kv_trim_hits(kv, c, tokens, hit, n_hit);
}

/* Room in sw_hit for the window blocks lo(h) .. h - 1 of a hit of h blocks (h - lo(h) never
 * exceeds max(h, ceil(window / bs) + 1)). */
static pllm_status sw_hit_reserve(pllm_kv_manager *kv, int32_t h)
{
    int32_t bs = kv->block_size;
    int32_t cap = PLLM_MAX(h - sw_lo_of(kv, h * bs), (kv->window + bs - 1) / bs + 2);
    if (cap <= kv->sw_hit_cap) return PLLM_OK;
    int32_t *a = pllm_realloc(kv->sw_hit, (size_t)cap * sizeof *a);
    if (!a) return PLLM_ERR_NOMEM;
    kv->sw_hit = a;
    kv->sw_hit_cap = cap;
    return PLLM_OK;
}

pllm_status pllm_kv_trim_hits(pllm_kv_manager *kv, pllm_key_chain *c, const int32_t *tokens,
                              const int32_t *hit, int32_t *n_hit)
{
    kv->sw_hit_n = 0;
    if (!kv->sw || *n_hit == 0) return PLLM_OK;
    int32_t bs = kv->block_size, h = *n_hit;
    if (!pllm_block_pool_caching(kv->sw)) {
        *n_hit = 0;
        return PLLM_OK;
    }
    PLLM_TRY(pllm_kv_keys_extend(kv, c, tokens, h * bs));
    PLLM_TRY(sw_hit_reserve(kv, h));
    /* the longest h whose window blocks lo(h) .. h - 1 are all findable: from the right, the
     * first gap at block g rules out every h with lo(h) <= g, i.e. leaves only h <= g */
    while (h > 0) {
        int32_t lo = sw_lo_of(kv, h * bs), gap = -1;
        PLLM_ASSERT(h - lo <= kv->sw_hit_cap);
        for (int32_t i = h - 1; i >= lo; i--) {
            int32_t id = pllm_block_pool_lookup_tagged(kv->sw, c->keys[i], sw_tag(kv, hit[i]),
                                                       tokens + (size_t)i * (size_t)bs);
            if (id < 0) {
                gap = i;
                break;
            }
            kv->sw_hit[i - lo] = id;
        }
        if (gap < 0) {
            kv->sw_hit_n = h;
            kv->sw_hit_lo = lo;
            kv->sw_hit_last = hit[h - 1];
            break;
        }
        h = gap;
    }
    *n_hit = h;
    return PLLM_OK;
}

pllm_status pllm_kv_share_hits(pllm_kv_manager *kv, const pllm_kv_table *from, pllm_key_chain *c,
                               const int32_t *tokens, const int32_t *hit, int32_t *n_hit)
{
    kv->sw_hit_n = 0;
    if (!kv->sw || *n_hit == 0) return PLLM_OK;
    PLLM_ASSERT(*n_hit <= from->n);
    int32_t bs = kv->block_size, h = *n_hit, want = *n_hit;
    PLLM_TRY(sw_hit_reserve(kv, h));
    /* the longest h whose window blocks lo(h) .. h - 1 from still holds (its full blocks of the
     * same tokens: their content is final); a released one at g leaves only h <= g */
    while (h > 0) {
        int32_t lo = sw_lo_of(kv, h * bs), gap = -1;
        for (int32_t i = h - 1; i >= lo; i--) {
            if (i < from->sw_lo || from->sw[i] < 0) {
                gap = i;
                break;
            }
            kv->sw_hit[i - lo] = from->sw[i];
        }
        if (gap < 0) {
            kv->sw_hit_n = h;
            kv->sw_hit_lo = lo;
            kv->sw_hit_last = hit[h - 1];
            break;
        }
        h = gap;
    }
    *n_hit = h;
    /* with caching, the index may still hold a window from has released: take the longer */
    if (h < want && pllm_block_pool_caching(kv->sw)) {
        int32_t hc = want;
        PLLM_TRY(pllm_kv_trim_hits(kv, c, tokens, hit, &hc));
        if (hc >= h) {
            *n_hit = hc;
            return PLLM_OK;
        }
        return pllm_kv_share_hits(kv, from, c, tokens, hit, n_hit); /* remember h's again */
    }
    return PLLM_OK;
}

void pllm_kv_set_tier(pllm_kv_manager *kv, const pllm_kv_tier *tier)
{
    kv->tier = tier;
}

pllm_status pllm_kv_fetch_tier(pllm_kv_manager *kv, pllm_key_chain *c, const int32_t *tokens,
                               int32_t n_tokens, int32_t *hit, int32_t *n_hit)
{
    if (!kv->tier || kv->sw || !pllm_block_pool_caching(kv->pool) || n_tokens < 1) return PLLM_OK;
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

/* The sliding hits remembered for hits hit[0 .. n_hit) (pllm_kv_trim_hits). */
static void sw_hits_of(const pllm_kv_manager *kv, const int32_t *hit, int32_t n_hit,
                       const int32_t **ids, int32_t *lo)
{
    *ids = NULL;
    *lo = n_hit;
    if (!kv->sw || n_hit == 0) return;
    /* a caller that skipped pllm_kv_trim_hits, or changed the hits since, breaks the contract */
    PLLM_ASSERT(kv->sw_hit_n == n_hit && kv->sw_hit_last == hit[n_hit - 1]);
    *ids = kv->sw_hit;
    *lo = kv->sw_hit_lo;
}

bool pllm_kv_can_allocate(const pllm_kv_manager *kv, const pllm_kv_table *t, const int32_t *hit,
                          int32_t n_hit, int32_t n_tokens)
{
    /* hits sitting in the free queue stop being allocatable once touched */
    int32_t free_hits = 0;
    for (int32_t i = 0; i < n_hit; i++)
        if (pllm_block_pool_ref_count(kv->pool, hit[i]) == 0) free_hits++;
    int32_t need = pllm_kv_blocks_needed(kv, t, n_hit, n_tokens);
    if (need > pllm_block_pool_n_free(kv->pool) - free_hits) return false;
    if (!kv->sw) return true;
    /* the sliding pool: a block for every new logical block, besides the window's hits */
    const int32_t *sw_hit;
    int32_t lo, sw_free_hits = 0;
    sw_hits_of(kv, hit, n_hit, &sw_hit, &lo);
    for (int32_t i = lo; i < n_hit; i++)
        if (pllm_block_pool_ref_count(kv->sw, sw_hit[i - lo]) == 0) sw_free_hits++;
    return need <= pllm_block_pool_n_free(kv->sw) - sw_free_hits;
}

int32_t pllm_kv_fit_sliding(const pllm_kv_manager *kv, const pllm_kv_table *t, const int32_t *hit,
                            int32_t n_hit, int32_t n_base, int32_t n_new)
{
    if (!kv->sw || pllm_kv_can_allocate(kv, t, hit, n_hit, n_base + n_new)) return n_new;
    int32_t free_hits = 0;
    for (int32_t i = 0; i < n_hit; i++)
        if (pllm_block_pool_ref_count(kv->pool, hit[i]) == 0) free_hits++;
    if (pllm_kv_blocks_needed(kv, t, n_hit, n_base + n_new) >
        pllm_block_pool_n_free(kv->pool) - free_hits)
        return n_new;               /* the global pool is short: not ours to fix */
    int32_t lo = 0, hi = n_new - 1; /* can_allocate is monotone in the token count */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (pllm_kv_can_allocate(kv, t, hit, n_hit, n_base + mid))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
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
    PLLM_TRY(table_reserve(kv, t, t->n + n_hit + need));
    if (kv->sw) { /* the window's sliding hits (before the global ones move t->n) */
        const int32_t *sw_hit;
        int32_t lo;
        sw_hits_of(kv, hit, n_hit, &sw_hit, &lo);
        for (int32_t i = 0; i < n_hit; i++) {
            t->sw[i] = i < lo ? -1 : sw_hit[i - lo];
            if (i >= lo) pllm_block_pool_touch(kv->sw, t->sw[i]);
        }
        if (t->n == 0) t->sw_lo = n_hit ? lo : 0;
    }
    for (int32_t i = 0; i < n_hit; i++) {
        pllm_block_pool_touch(kv->pool, hit[i]);
        t->ids[t->n++] = hit[i];
    }
    if (n_hit) t->n_committed = n_hit;
    pllm_status st = pllm_block_pool_alloc(kv->pool, need, t->ids + t->n);
    PLLM_ASSERT(st == PLLM_OK); /* checked above */
    if (kv->sw) {
        st = pllm_block_pool_alloc(kv->sw, need, t->sw + t->n);
        PLLM_ASSERT(st == PLLM_OK); /* checked above */
    }
    t->n += need;
    return PLLM_OK;
}

static pllm_status commit_index(pllm_kv_manager *kv, pllm_kv_table *t, pllm_key_chain *c,
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
        if (kv->sw && t->sw[i] >= 0) { /* its sliding block, under the global block's tag */
            int32_t sid = t->sw[i];
            int32_t sgot = pllm_block_pool_cache_tagged(kv->sw, sid, c->keys[i], sw_tag(kv, got),
                                                        tokens + (size_t)i * (size_t)bs);
            if (sgot >= 0 && sgot != sid) {
                pllm_block_pool_touch(kv->sw, sgot);
                pllm_block_pool_release(kv->sw, &sid, 1);
                t->sw[i] = sgot;
            }
        }
    }
    t->n_committed = n_full;
    return PLLM_OK;
}

void pllm_kv_hold_sliding(pllm_kv_manager *kv, pllm_kv_table *t, int32_t n_tokens)
{
    if (!kv->sw) return;
    t->sw_hold_on = true;
    t->sw_hold = PLLM_MAX(sw_lo_of(kv, n_tokens), t->sw_lo); /* released ones are gone */
}

/* Release t's sliding blocks before the window of position n_computed (or the hold). */
static void sw_release(pllm_kv_manager *kv, pllm_kv_table *t, int32_t n_computed)
{
    if (!kv->sw) return;
    int32_t lo = PLLM_MIN(sw_lo_of(kv, n_computed), t->n);
    if (t->sw_hold_on && lo - t->sw_hold <= 1)
        lo = PLLM_MIN(lo, t->sw_hold);
    else
        t->sw_hold_on = false;
    for (; t->sw_lo < lo; t->sw_lo++) {
        if (t->sw[t->sw_lo] >= 0) pllm_block_pool_release(kv->sw, &t->sw[t->sw_lo], 1);
        t->sw[t->sw_lo] = -1;
    }
}

bool pllm_kv_drop_hold(pllm_kv_manager *kv, pllm_kv_table *t, int32_t n_computed)
{
    if (!kv->sw || !t->sw_hold_on) return false;
    t->sw_hold_on = false;
    int32_t before = t->sw_lo;
    sw_release(kv, t, n_computed);
    return t->sw_lo > before;
}

pllm_status pllm_kv_commit(pllm_kv_manager *kv, pllm_kv_table *t, pllm_key_chain *c,
                           const int32_t *tokens, int32_t n_computed)
{
    PLLM_TRY(commit_index(kv, t, c, tokens, n_computed));
    sw_release(kv, t, n_computed);
    return PLLM_OK;
}

void pllm_kv_free(pllm_kv_manager *kv, pllm_kv_table *t)
{
    for (int32_t i = t->n - 1; i >= 0; i--) {
        if (kv->sw && i >= t->sw_lo && t->sw[i] >= 0) pllm_block_pool_release(kv->sw, &t->sw[i], 1);
        pllm_block_pool_release(kv->pool, &t->ids[i], 1);
    }
    t->n = 0;
    t->n_committed = 0;
    t->sw_lo = 0;
    t->sw_hold_on = false;
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
    if (!kv->sw) return n;
    /* the prefix of n blocks is usable only with its window's sliding blocks lo(n) .. n - 1:
     * the longest n whose window t holds and shares (a gap at g leaves only n <= g) */
    while (n > 0) {
        int32_t gap = -1;
        for (int32_t i = n - 1; i >= sw_lo_of(kv, n * kv->block_size) && gap < 0; i--)
            if (i < t->sw_lo || t->sw[i] < 0 || pllm_block_pool_ref_count(kv->sw, t->sw[i]) < 2)
                gap = i;
        if (gap < 0) break;
        n = gap;
    }
    return n;
}

int32_t pllm_kv_sw_private(const pllm_kv_manager *kv, const pllm_kv_table *t)
{
    int32_t n = 0;
    for (int32_t i = kv->sw && t->sw ? t->sw_lo : t->n; i < t->n; i++)
        n += t->sw[i] >= 0 && pllm_block_pool_ref_count(kv->sw, t->sw[i]) == 1;
    return n;
}

bool pllm_kv_sliding_short(const pllm_kv_manager *kv, const pllm_kv_table *t, int32_t n_tokens)
{
    if (!kv->sw) return false;
    int32_t need = pllm_kv_blocks_needed(kv, t, 0, n_tokens);
    return need <= pllm_block_pool_n_free(kv->pool) && need > pllm_block_pool_n_free(kv->sw);
}

/* block_pool.c: KV blocks, reference counts, free queue (LRU list or next-use heap),
 * prefix-cache index. */
#include "engine/block_pool.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct pool_block {
    int32_t ref;
    bool queued;    /* in the free queue (iff ref == 0) */
    bool indexed;   /* in the prefix-cache index */
    uint64_t key;   /* valid when indexed */
    uint64_t tag;   /* valid when indexed: 0, or the tag of a tagged entry (no parent) */
    int32_t parent; /* indexed parent block, -1 for a first block; valid when indexed */
    int32_t h_prev; /* bucket chain; -1 ends */
    int32_t h_next;
    int32_t child_head; /* first indexed child, -1 when none */
    int32_t sib_prev;   /* siblings under the same parent */
    int32_t sib_next;
    int32_t n_children;  /* indexed children */
    int32_t depth;       /* 0 for a first block; valid when indexed */
    uint32_t gen;        /* incremented each time the block is indexed */
    int32_t heap_pos;    /* FUTURE: position in the heap, -1 when not queued */
    uint64_t tick;       /* release time (FUTURE tie-breaks) */
    pllm_label next_use; /* FUTURE: valid when indexed, else NEVER */
} pool_block;

struct pllm_block_pool {
    int32_t n_blocks, block_size;
    bool enable_cache;
    uint64_t extra;
    pllm_block_hash_fn hash;
    void *hash_arg;
    pllm_evict_policy policy;
    pool_block *blocks; /* [n_blocks] */
    int32_t *q_prev;    /* LRU: [n_blocks + 1] free queue links; index n_blocks is the sentinel */
    int32_t *q_next;    /* LRU: [n_blocks + 1] */
    int32_t *heap;      /* FUTURE: [n_blocks] free blocks, heap[0] evicted first */
    int32_t n_free;     /* queue length */
    uint64_t tick;
    int32_t *tokens;  /* [n_blocks][block_size]: stored ids of indexed blocks */
    int32_t *buckets; /* [bucket_mask + 1]: head block of each chain, -1 when empty */
    uint64_t bucket_mask;
    int32_t n_indexed;
    int64_t n_evicted, n_orphan_drops, n_leaf_redirects;
};

static uint64_t default_hash(uint64_t parent_key, const int32_t *tokens, int32_t n, uint64_t extra,
                             void *arg)
{
    (void)arg;
    /* key = XXH3(tokens; seed = XXH3(parent_key; seed = extra)) */
    uint64_t seed = XXH3_64bits_withSeed(&parent_key, sizeof parent_key, extra);
    return XXH3_64bits_withSeed(tokens, (size_t)n * sizeof *tokens, seed);
}

pllm_status pllm_block_pool_init(pllm_block_pool **out, const pllm_block_pool_params *prm)
{
    *out = NULL;
    if (prm->n_blocks < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "block pool: n_blocks must be >= 1, got %d",
                           prm->n_blocks);
    if (prm->block_size < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "block pool: block_size must be >= 1, got %d",
                           prm->block_size);
    size_t n_tok;
    if (!pllm_mul_size((size_t)prm->n_blocks, (size_t)prm->block_size, &n_tok) || n_tok > INT32_MAX)
        return pllm_errorf(PLLM_ERR_RANGE, "block pool: %d blocks of %d tokens overflow",
                           prm->n_blocks, prm->block_size);
    pllm_block_pool *p = pllm_calloc(1, sizeof *p);
    if (!p) return PLLM_ERR_NOMEM;
    p->n_blocks = prm->n_blocks;
    p->block_size = prm->block_size;
    p->enable_cache = prm->enable_cache;
    p->extra = prm->extra;
    p->hash = prm->hash ? prm->hash : default_hash;
    p->hash_arg = prm->hash_arg;
    if (prm->policy != PLLM_EVICT_LRU && prm->policy != PLLM_EVICT_FUTURE) {
        free(p);
        return pllm_errorf(PLLM_ERR_INVALID, "block pool: unknown eviction policy %d",
                           (int)prm->policy);
    }
    p->policy = prm->policy;
    uint64_t n_buckets = 16;
    while (n_buckets < 2 * (uint64_t)prm->n_blocks) n_buckets *= 2;
    p->bucket_mask = n_buckets - 1;
    p->blocks = pllm_calloc((size_t)p->n_blocks, sizeof *p->blocks);
    p->q_prev = pllm_malloc(((size_t)p->n_blocks + 1) * sizeof *p->q_prev);
    p->q_next = pllm_malloc(((size_t)p->n_blocks + 1) * sizeof *p->q_next);
    p->buckets = pllm_malloc((size_t)n_buckets * sizeof *p->buckets);
    p->tokens = prm->enable_cache ? pllm_calloc(n_tok, sizeof *p->tokens) : NULL;
    p->heap =
        p->policy == PLLM_EVICT_FUTURE ? pllm_malloc((size_t)p->n_blocks * sizeof *p->heap) : NULL;
    if (!p->blocks || !p->q_prev || !p->q_next || !p->buckets ||
        (prm->enable_cache && !p->tokens) || (p->policy == PLLM_EVICT_FUTURE && !p->heap)) {
        pllm_block_pool_free(p);
        return PLLM_ERR_NOMEM;
    }
    for (uint64_t i = 0; i < n_buckets; i++) p->buckets[i] = -1;
    /* Every block starts free, in id order. */
    int32_t s = p->n_blocks;
    for (int32_t i = 0; i < p->n_blocks; i++) {
        pool_block *b = &p->blocks[i];
        b->queued = true;
        b->parent = b->h_prev = b->h_next = b->child_head = b->sib_prev = b->sib_next = -1;
        b->depth = -1;
        b->next_use = PLLM_LABEL_NEVER;
        p->q_prev[i] = i == 0 ? s : i - 1;
        p->q_next[i] = i == p->n_blocks - 1 ? s : i + 1;
        /* FUTURE: equal unindexed blocks are taken in id order (ticks n-1 .. 0, latest first) */
        b->tick = (uint64_t)(p->n_blocks - 1 - i);
        b->heap_pos = i;
        if (p->heap) p->heap[i] = i;
    }
    p->tick = (uint64_t)p->n_blocks;
    p->q_next[s] = 0;
    p->q_prev[s] = p->n_blocks - 1;
    p->n_free = p->n_blocks;
    *out = p;
    return PLLM_OK;
}

void pllm_block_pool_free(pllm_block_pool *p)
{
    if (!p) return;
    free(p->blocks);
    free(p->q_prev);
    free(p->q_next);
    free(p->tokens);
    free(p->buckets);
    free(p->heap);
    free(p);
}

int32_t pllm_block_pool_n_blocks(const pllm_block_pool *p)
{
    return p->n_blocks;
}
int32_t pllm_block_pool_block_size(const pllm_block_pool *p)
{
    return p->block_size;
}
bool pllm_block_pool_caching(const pllm_block_pool *p)
{
    return p->enable_cache;
}
int32_t pllm_block_pool_n_free(const pllm_block_pool *p)
{
    return p->n_free;
}

int32_t pllm_block_pool_ref_count(const pllm_block_pool *p, int32_t id)
{
    PLLM_ASSERT(id >= 0 && id < p->n_blocks);
    return p->blocks[id].ref;
}

bool pllm_block_pool_is_indexed(const pllm_block_pool *p, int32_t id)
{
    PLLM_ASSERT(id >= 0 && id < p->n_blocks);
    return p->blocks[id].indexed;
}

pllm_evict_policy pllm_block_pool_policy(const pllm_block_pool *p)
{
    return p->policy;
}

uint32_t pllm_block_pool_generation(const pllm_block_pool *p, int32_t id)
{
    PLLM_ASSERT(id >= 0 && id < p->n_blocks);
    return p->blocks[id].gen;
}

pllm_label pllm_block_pool_next_use(const pllm_block_pool *p, int32_t id)
{
    PLLM_ASSERT(id >= 0 && id < p->n_blocks);
    return p->blocks[id].next_use;
}

void pllm_block_pool_get_stats(const pllm_block_pool *p, pllm_block_pool_stats *out)
{
    out->n_evicted = p->n_evicted;
    out->n_orphan_drops = p->n_orphan_drops;
    out->n_leaf_redirects = p->n_leaf_redirects;
    out->n_indexed = p->n_indexed;
}

uint64_t pllm_block_pool_hash(const pllm_block_pool *p, uint64_t parent_key, const int32_t *tokens)
{
    return p->hash(parent_key, tokens, p->block_size, p->extra, p->hash_arg);
}

/* ---- free queue ---- */

/* FUTURE: should block a be evicted before block b? */
static bool evict_before(const pllm_block_pool *p, int32_t a, int32_t b)
{
    const pool_block *x = &p->blocks[a], *y = &p->blocks[b];
    if (x->indexed != y->indexed) return !x->indexed;
    if (!x->indexed) return x->tick > y->tick; /* empty: last released first */
    if (!pllm_label_eq(x->next_use, y->next_use)) return pllm_label_lt(y->next_use, x->next_use);
    if (x->tick != y->tick) return x->tick < y->tick; /* LRU */
    if (x->depth != y->depth) return x->depth > y->depth;
    return a < b;
}

static void heap_set(pllm_block_pool *p, int32_t pos, int32_t id)
{
    p->heap[pos] = id;
    p->blocks[id].heap_pos = pos;
}

static void heap_up(pllm_block_pool *p, int32_t pos)
{
    int32_t id = p->heap[pos];
    while (pos > 0) {
        int32_t up = (pos - 1) / 2;
        if (!evict_before(p, id, p->heap[up])) break;
        heap_set(p, pos, p->heap[up]);
        pos = up;
    }
    heap_set(p, pos, id);
}

static void heap_down(pllm_block_pool *p, int32_t pos)
{
    int32_t id = p->heap[pos], n = p->n_free;
    for (;;) {
        int32_t c = 2 * pos + 1;
        if (c >= n) break;
        if (c + 1 < n && evict_before(p, p->heap[c + 1], p->heap[c])) c++;
        if (!evict_before(p, p->heap[c], id)) break;
        heap_set(p, pos, p->heap[c]);
        pos = c;
    }
    heap_set(p, pos, id);
}

/* A queued block's key changed. */
static void heap_fix(pllm_block_pool *p, int32_t id)
{
    int32_t pos = p->blocks[id].heap_pos;
    PLLM_ASSERT(pos >= 0 && pos < p->n_free && p->heap[pos] == id);
    heap_up(p, pos);
    heap_down(p, p->blocks[id].heap_pos);
}

static void queue_remove(pllm_block_pool *p, int32_t id)
{
    PLLM_ASSERT(p->blocks[id].queued);
    if (p->policy == PLLM_EVICT_FUTURE) {
        int32_t pos = p->blocks[id].heap_pos, last = p->heap[p->n_free - 1];
        p->n_free--;
        p->blocks[id].heap_pos = -1;
        p->blocks[id].queued = false;
        if (last != id) {
            heap_set(p, pos, last);
            heap_up(p, pos);
            heap_down(p, p->blocks[last].heap_pos);
        }
        return;
    }
    int32_t a = p->q_prev[id], b = p->q_next[id];
    p->q_next[a] = b;
    p->q_prev[b] = a;
    p->blocks[id].queued = false;
    p->n_free--;
}

/* A block whose reference count reached 0 enters the queue. */
static void queue_push(pllm_block_pool *p, int32_t id)
{
    pool_block *b = &p->blocks[id];
    PLLM_ASSERT(!b->queued);
    b->tick = p->tick++;
    b->queued = true;
    if (p->policy == PLLM_EVICT_FUTURE) {
        heap_set(p, p->n_free++, id);
        heap_up(p, p->n_free - 1);
        return;
    }
    /* LRU: cached at the most recently used end; empty at the head (reused first) */
    int32_t s = p->n_blocks, after = b->indexed ? p->q_prev[s] : s;
    int32_t nx = p->q_next[after];
    p->q_prev[id] = after;
    p->q_next[id] = nx;
    p->q_next[after] = id;
    p->q_prev[nx] = id;
    p->n_free++;
}

/* The block allocation takes next (the queue's first). */
static int32_t queue_first(const pllm_block_pool *p)
{
    return p->policy == PLLM_EVICT_FUTURE ? p->heap[0] : p->q_next[p->n_blocks];
}

/* ---- index ---- */

static uint64_t bucket_of(const pllm_block_pool *p, uint64_t key)
{
    return (key ^ (key >> 29) ^ (key >> 47)) & p->bucket_mask;
}

static const int32_t *block_tokens(const pllm_block_pool *p, int32_t id)
{
    return p->tokens + (size_t)id * (size_t)p->block_size;
}

static void unindex_one(pllm_block_pool *p, int32_t id)
{
    pool_block *b = &p->blocks[id];
    PLLM_ASSERT(b->indexed);
    /* bucket chain */
    if (b->h_prev >= 0)
        p->blocks[b->h_prev].h_next = b->h_next;
    else
        p->buckets[bucket_of(p, b->key)] = b->h_next;
    if (b->h_next >= 0) p->blocks[b->h_next].h_prev = b->h_prev;
    /* parent's child list */
    if (b->parent >= 0) {
        pool_block *par = &p->blocks[b->parent];
        if (b->sib_prev >= 0)
            p->blocks[b->sib_prev].sib_next = b->sib_next;
        else
            par->child_head = b->sib_next;
        if (b->sib_next >= 0) p->blocks[b->sib_next].sib_prev = b->sib_prev;
        par->n_children--;
    }
    b->indexed = false;
    b->parent = b->h_prev = b->h_next = b->sib_prev = b->sib_next = -1;
    b->depth = -1;
    b->next_use = PLLM_LABEL_NEVER;
    p->n_indexed--;
    if (b->queued && p->policy == PLLM_EVICT_FUTURE) heap_fix(p, id);
}

/* Drop id and every indexed descendant from the index (iteratively, deepest first). */
static void unindex_subtree(pllm_block_pool *p, int32_t id)
{
    for (;;) {
        /* descend to a leaf of the subtree */
        int32_t leaf = id;
        while (p->blocks[leaf].child_head >= 0) leaf = p->blocks[leaf].child_head;
        if (leaf != id) p->n_orphan_drops++;
        unindex_one(p, leaf);
        if (leaf == id) return;
    }
}

static int32_t lookup(const pllm_block_pool *p, uint64_t key, int32_t parent, uint64_t tag,
                      const int32_t *tokens)
{
    if (!p->enable_cache) return -1;
    size_t bytes = (size_t)p->block_size * sizeof *tokens;
    for (int32_t id = p->buckets[bucket_of(p, key)]; id >= 0; id = p->blocks[id].h_next) {
        const pool_block *b = &p->blocks[id];
        if (b->key == key && b->parent == parent && b->tag == tag &&
            memcmp(block_tokens(p, id), tokens, bytes) == 0)
            return id;
    }
    return -1;
}

int32_t pllm_block_pool_lookup(const pllm_block_pool *p, uint64_t key, int32_t parent,
                               const int32_t *tokens)
{
    return lookup(p, key, parent, 0, tokens);
}

int32_t pllm_block_pool_lookup_tagged(const pllm_block_pool *p, uint64_t key, uint64_t tag,
                                      const int32_t *tokens)
{
    PLLM_ASSERT(tag != 0);
    return lookup(p, key, -1, tag, tokens);
}

static int32_t cache(pllm_block_pool *p, int32_t id, uint64_t key, int32_t parent, uint64_t tag,
                     const int32_t *tokens)
{
    PLLM_ASSERT(id >= 0 && id < p->n_blocks);
    pool_block *b = &p->blocks[id];
    PLLM_ASSERT(b->ref > 0);
    if (!p->enable_cache) return -1;
    if (b->indexed) return id;
    if (parent >= 0 && !p->blocks[parent].indexed) return -1;
    int32_t same = lookup(p, key, parent, tag, tokens);
    if (same >= 0) return same;
    b->indexed = true;
    b->key = key;
    b->tag = tag;
    b->parent = parent;
    b->depth = parent >= 0 ? p->blocks[parent].depth + 1 : 0;
    b->gen++;
    b->next_use = PLLM_LABEL_NEVER;
    memcpy(p->tokens + (size_t)id * (size_t)p->block_size, tokens,
           (size_t)p->block_size * sizeof *tokens);
    uint64_t h = bucket_of(p, key);
    b->h_prev = -1;
    b->h_next = p->buckets[h];
    if (b->h_next >= 0) p->blocks[b->h_next].h_prev = id;
    p->buckets[h] = id;
    if (parent >= 0) {
        pool_block *par = &p->blocks[parent];
        b->sib_prev = -1;
        b->sib_next = par->child_head;
        if (b->sib_next >= 0) p->blocks[b->sib_next].sib_prev = id;
        par->child_head = id;
        par->n_children++;
    }
    p->n_indexed++;
    return id;
}

int32_t pllm_block_pool_cache(pllm_block_pool *p, int32_t id, uint64_t key, int32_t parent,
                              const int32_t *tokens)
{
    return cache(p, id, key, parent, 0, tokens);
}

int32_t pllm_block_pool_cache_tagged(pllm_block_pool *p, int32_t id, uint64_t key, uint64_t tag,
                                     const int32_t *tokens)
{
    PLLM_ASSERT(tag != 0);
    return cache(p, id, key, -1, tag, tokens);
}

/* ---- allocation ---- */

pllm_status pllm_block_pool_alloc(pllm_block_pool *p, int32_t n, int32_t *ids)
{
    if (n < 0) return pllm_errorf(PLLM_ERR_INVALID, "block pool: alloc of %d blocks", n);
    if (n > p->n_free)
        return pllm_errorf(PLLM_ERR_NOMEM, "block pool: %d blocks wanted, %d free of %d", n,
                           p->n_free, p->n_blocks);
    for (int32_t i = 0; i < n; i++) {
        int32_t id = queue_first(p);
        if (p->policy == PLLM_EVICT_FUTURE && p->blocks[id].n_children > 0) {
            /* labels out of order: take a free leaf of its subtree instead */
            int32_t leaf = id;
            while (p->blocks[leaf].child_head >= 0 && p->blocks[p->blocks[leaf].child_head].queued)
                leaf = p->blocks[leaf].child_head;
            if (leaf != id && p->blocks[leaf].n_children == 0) {
                id = leaf;
                p->n_leaf_redirects++;
            }
        }
        queue_remove(p, id);
        pool_block *b = &p->blocks[id];
        PLLM_ASSERT(b->ref == 0);
        if (b->indexed) {
            unindex_subtree(p, id);
            p->n_evicted++;
        }
        b->ref = 1;
        ids[i] = id;
    }
    return PLLM_OK;
}

void pllm_block_pool_touch(pllm_block_pool *p, int32_t id)
{
    PLLM_ASSERT(id >= 0 && id < p->n_blocks);
    pool_block *b = &p->blocks[id];
    if (b->ref == 0) queue_remove(p, id);
    b->ref++;
}

void pllm_block_pool_release(pllm_block_pool *p, const int32_t *ids, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        PLLM_ASSERT(id >= 0 && id < p->n_blocks);
        pool_block *b = &p->blocks[id];
        PLLM_ASSERT(b->ref > 0);
        if (--b->ref == 0) queue_push(p, id);
    }
}

void pllm_block_pool_set_next_use(pllm_block_pool *p, int32_t id, pllm_label next_use)
{
    PLLM_ASSERT(id >= 0 && id < p->n_blocks);
    pool_block *b = &p->blocks[id];
    if (p->policy != PLLM_EVICT_FUTURE || !b->indexed || pllm_label_eq(b->next_use, next_use))
        return;
    b->next_use = next_use;
    if (b->queued) heap_fix(p, id);
}

int32_t pllm_block_pool_queue(const pllm_block_pool *p, int32_t *ids, int32_t cap)
{
    int32_t n = 0, s = p->n_blocks;
    if (p->policy == PLLM_EVICT_FUTURE) {
        /* insertion sort of the heap into eviction order (tests only) */
        for (int32_t i = 0; i < p->n_free; i++) {
            int32_t id = p->heap[i], j = PLLM_MIN(n, cap);
            while (j > 0 && evict_before(p, id, ids[j - 1])) {
                if (j < cap) ids[j] = ids[j - 1];
                j--;
            }
            if (j < cap) ids[j] = id;
            n++;
        }
        return n;
    }
    for (int32_t id = p->q_next[s]; id != s; id = p->q_next[id]) {
        if (n < cap) ids[n] = id;
        n++;
    }
    return n;
}

static pllm_status check_queue(const pllm_block_pool *p, int32_t *n_queued)
{
    int32_t s = p->n_blocks;
    *n_queued = 0;
    if (p->policy == PLLM_EVICT_FUTURE) {
        /* heap: positions consistent, only ref-0 blocks, heap order */
        for (int32_t i = 0; i < p->n_free; i++) {
            int32_t id = p->heap[i];
            if (id < 0 || id >= p->n_blocks || p->blocks[id].heap_pos != i)
                return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: heap slot %d holds %d", i, id);
            if (!p->blocks[id].queued || p->blocks[id].ref != 0)
                return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: block %d queued with ref %d", id,
                                   p->blocks[id].ref);
            if (i > 0 && evict_before(p, id, p->heap[(i - 1) / 2]))
                return pllm_errorf(PLLM_ERR_INTERNAL,
                                   "block pool: heap order broken at slot %d (block %d)", i, id);
            (*n_queued)++;
        }
        for (int32_t id = 0; id < p->n_blocks; id++)
            if (!p->blocks[id].queued && p->blocks[id].heap_pos != -1)
                return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: held block %d has heap slot %d",
                                   id, p->blocks[id].heap_pos);
        return PLLM_OK;
    }
    /* list: well linked, only ref-0 blocks */
    int32_t guard = 0;
    for (int32_t id = p->q_next[s]; id != s; id = p->q_next[id]) {
        if (id < 0 || id >= p->n_blocks || ++guard > p->n_blocks)
            return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: free queue corrupt at %d", id);
        if (p->q_prev[p->q_next[id]] != id)
            return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: queue back link broken at block %d",
                               id);
        if (!p->blocks[id].queued || p->blocks[id].ref != 0)
            return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: block %d queued with ref %d", id,
                               p->blocks[id].ref);
        (*n_queued)++;
    }
    return PLLM_OK;
}

pllm_status pllm_block_pool_check(const pllm_block_pool *p, bool tail_first)
{
    int32_t s = p->n_blocks, n_queued = 0, n_zero = 0, n_indexed = 0;
    PLLM_TRY(check_queue(p, &n_queued));
    for (int32_t id = 0; id < p->n_blocks; id++) {
        const pool_block *b = &p->blocks[id];
        if (b->ref < 0)
            return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: block %d ref %d", id, b->ref);
        if (b->ref == 0) n_zero++;
        if ((b->ref == 0) != b->queued)
            return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: block %d ref %d but queued=%d", id,
                               b->ref, (int)b->queued);
        if (!b->indexed) {
            if (b->child_head >= 0 || b->n_children)
                return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: unindexed block %d has children",
                                   id);
            if (!pllm_label_eq(b->next_use, PLLM_LABEL_NEVER))
                return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: unindexed block %d has a label",
                                   id);
            continue;
        }
        n_indexed++;
        if (!p->enable_cache)
            return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: block %d indexed with caching off",
                               id);
        if (b->parent >= 0 && !p->blocks[b->parent].indexed)
            return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: block %d's parent %d is not indexed",
                               id, b->parent);
        if (b->depth != (b->parent >= 0 ? p->blocks[b->parent].depth + 1 : 0))
            return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: block %d has depth %d", id,
                               b->depth);
        /* findable under its own key */
        if (lookup(p, b->key, b->parent, b->tag, block_tokens(p, id)) != id)
            return pllm_errorf(PLLM_ERR_INTERNAL,
                               "block pool: indexed block %d not found by lookup", id);
        int32_t nc = 0;
        for (int32_t c = b->child_head; c >= 0; c = p->blocks[c].sib_next) {
            if (p->blocks[c].parent != id || !p->blocks[c].indexed || ++nc > p->n_blocks)
                return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: child list of block %d corrupt",
                                   id);
        }
        if (nc != b->n_children)
            return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: block %d counts %d children, has %d",
                               id, b->n_children, nc);
    }
    if (n_queued != n_zero || n_queued != p->n_free)
        return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: %d queued, %d at ref 0, n_free %d",
                           n_queued, n_zero, p->n_free);
    if (n_indexed != p->n_indexed)
        return pllm_errorf(PLLM_ERR_INTERNAL, "block pool: %d indexed, counter says %d", n_indexed,
                           p->n_indexed);
    if (!tail_first) return PLLM_OK;
    /* Caller discipline (tail-first release, chains held from their start, FUTURE: parents
     * labelled no later than their children): a held block's parent is held, and every free
     * parent is evicted after its free indexed children. */
    int32_t *pos = pllm_malloc((size_t)p->n_blocks * sizeof *pos);
    if (!pos) return PLLM_ERR_NOMEM;
    int32_t k = 0;
    for (int32_t id = 0; id < p->n_blocks; id++) pos[id] = -1;
    if (p->policy == PLLM_EVICT_LRU)
        for (int32_t id = p->q_next[s]; id != s; id = p->q_next[id]) pos[id] = k++;
    pllm_status st = PLLM_OK;
    for (int32_t id = 0; id < p->n_blocks && st == PLLM_OK; id++) {
        const pool_block *b = &p->blocks[id];
        if (!b->indexed || b->parent < 0) continue;
        bool parent_free = p->blocks[b->parent].ref == 0;
        if (b->ref > 0 && parent_free)
            st = pllm_errorf(PLLM_ERR_INTERNAL,
                             "block pool: block %d held (ref %d) but its parent %d is free", id,
                             b->ref, b->parent);
        else if (b->ref == 0 && parent_free &&
                 (p->policy == PLLM_EVICT_LRU ? pos[b->parent] < pos[id]
                                              : !evict_before(p, id, b->parent)))
            st = pllm_errorf(PLLM_ERR_INTERNAL,
                             "block pool: parent %d is evicted before its cached child %d",
                             b->parent, id);
    }
    free(pos);
    return st;
}

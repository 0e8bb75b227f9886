/*
 * block_pool.h: the physical KV blocks (ids 0 .. n_blocks-1), their reference counts, the
 * free queue in eviction order, and the prefix-cache index (block key -> block).
 *
 * Keys chain the parent: key_i = H(key_{i-1}, tokens of block i, extra), with
 * key_{-1} = PLLM_BLOCK_ROOT_KEY and extra = the model identity (anything else that changes
 * K/V). H is XXH3-64 by default and injectable (tests force collisions with a degenerate one).
 *
 * Invariants (pllm_block_pool_check verifies them all):
 *   - A block is in the free queue iff its reference count is 0.
 *   - Only full blocks are indexed. An indexed block stores its key, its token ids, its parent
 *     block (-1 for a sequence's first block) and its depth (0 for a first block). A lookup
 *     (key, parent, tokens) returns a block only when all three match, so a hash collision
 *     costs a miss, never a wrong block.
 *   - The index is prefix-closed: an indexed block's parent is itself indexed. Lookups walk a
 *     chain from its first block, so parent identity plus stored tokens make a hit exact.
 *   - Indexed blocks with reference count 0 stay indexed and sit in the queue (cached, free).
 *     Allocation takes the queue's first block and drops its index entry if it had one.
 *
 * Eviction order (the free queue), by policy:
 *   PLLM_EVICT_LRU: a doubly linked list with a sentinel (O(1) push, pop and removal).
 *     Released unindexed blocks go to the head (they hold nothing worth keeping and are reused
 *     first); released indexed blocks go to the tail (most recently used).
 *   PLLM_EVICT_FUTURE: a binary heap (O(log n) push, pop, removal and re-keying). Each block
 *     carries a next-use label set by the caller (pllm_block_pool_set_next_use: the position
 *     in the run order of the first queued request that will reuse the block, or
 *     PLLM_LABEL_NEVER), and the queue evicts first: unindexed blocks (last released first);
 *     then indexed blocks by next use, farthest (or never) first (Belady); ties least recently
 *     released first (so with no known future use it is LRU). Labels are kept while a block is
 *     held and reset to NEVER when its index entry is dropped.
 *
 * Eviction never orphans a chain. Rule: leaves first. Callers release a sequence's blocks
 * tail first (pllm_kv_free does), and whoever holds a block also holds its parent (prefix
 * reuse always takes a chain from its start), so a free block's indexed children are all free.
 *   LRU: a parent reaches reference count 0 no earlier than its children and enters the queue
 *     behind them: the queue's head is never a block with indexed children.
 *   FUTURE: a caller that labels a parent no later than its children (a request reusing a block
 *     also reuses its parent; the planner guarantees it) gets children evicted first: with equal
 *     labels the parent was released later (its last holder held the children too and released
 *     them first). Should the first block still have indexed children (a caller that breaks the
 *     label order), allocation takes a free leaf of its subtree instead (counted in
 *     n_leaf_redirects).
 * As a safety net for callers that break the release order, evicting a block that still has
 * indexed children also drops all its indexed descendants from the index (they stay valid
 * blocks, just no longer findable); n_orphan_drops counts these and stays 0 under the KV
 * manager (the random scheduler test checks it).
 *
 * Ownership: the pool owns all its arrays; token pointers passed in are borrowed.
 */
#pragma once

#include "model/common.h"

#define PLLM_BLOCK_ROOT_KEY 0x9e3779b97f4a7c15ull

/* A 128-bit position in the run order (compared as hi, then lo). The scheduler labels waiting
 * requests with increasing labels in the order it will admit them; the pool uses them as
 * next-use times. */
typedef struct pllm_label {
    uint64_t hi, lo;
} pllm_label;

#define PLLM_LABEL_NEVER ((pllm_label){UINT64_MAX, UINT64_MAX})

static inline bool pllm_label_lt(pllm_label a, pllm_label b)
{
    return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo);
}
static inline bool pllm_label_eq(pllm_label a, pllm_label b)
{
    return a.hi == b.hi && a.lo == b.lo;
}

typedef enum pllm_evict_policy {
    PLLM_EVICT_LRU = 0, /* least recently used cached block first */
    PLLM_EVICT_FUTURE,  /* the cached block whose next use is farthest away (or never) first */
} pllm_evict_policy;

/* Key of one full block: H(parent_key, tokens[0 .. n), extra). */
typedef uint64_t (*pllm_block_hash_fn)(uint64_t parent_key, const int32_t *tokens, int32_t n,
                                       uint64_t extra, void *arg);

typedef struct pllm_block_pool_params {
    int32_t n_blocks;
    int32_t block_size;      /* tokens per block */
    bool enable_cache;       /* false: nothing is ever indexed, every lookup misses */
    uint64_t extra;          /* mixed into every key (model identity) */
    pllm_block_hash_fn hash; /* NULL: XXH3-64 */
    void *hash_arg;
    pllm_evict_policy policy;
} pllm_block_pool_params;

typedef struct pllm_block_pool pllm_block_pool;

typedef struct pllm_block_pool_stats {
    int64_t n_evicted;        /* indexed blocks dropped from the index by allocation */
    int64_t n_orphan_drops;   /* descendants dropped with an evicted parent (0 when callers free
                                 tail first) */
    int64_t n_leaf_redirects; /* FUTURE: evictions redirected to a leaf (0 under the planner) */
    int32_t n_indexed;        /* blocks currently in the index */
} pllm_block_pool_stats;

pllm_status pllm_block_pool_init(pllm_block_pool **out, const pllm_block_pool_params *p);
void pllm_block_pool_free(pllm_block_pool *p);

int32_t pllm_block_pool_n_blocks(const pllm_block_pool *p);
int32_t pllm_block_pool_block_size(const pllm_block_pool *p);
bool pllm_block_pool_caching(const pllm_block_pool *p);
/* Blocks with reference count 0 (the free queue's length, cached ones included). */
int32_t pllm_block_pool_n_free(const pllm_block_pool *p);
int32_t pllm_block_pool_ref_count(const pllm_block_pool *p, int32_t id);
bool pllm_block_pool_is_indexed(const pllm_block_pool *p, int32_t id);
pllm_evict_policy pllm_block_pool_policy(const pllm_block_pool *p);
/* Incremented each time a block is indexed: (id, generation) names one cached content, so a
 * caller remembering a block can tell whether it still holds what it held. */
uint32_t pllm_block_pool_generation(const pllm_block_pool *p, int32_t id);
/* FUTURE policy: set an indexed block's next-use label (re-keys it in the queue if it is free).
 * Ignored for unindexed blocks and under LRU. */
void pllm_block_pool_set_next_use(pllm_block_pool *p, int32_t id, pllm_label next_use);
pllm_label pllm_block_pool_next_use(const pllm_block_pool *p, int32_t id);
void pllm_block_pool_get_stats(const pllm_block_pool *p, pllm_block_pool_stats *out);

/* Key of a full block of block_size tokens whose parent's key is parent_key. */
uint64_t pllm_block_pool_hash(const pllm_block_pool *p, uint64_t parent_key, const int32_t *tokens);

/* The indexed block with this key, parent block (-1 for a first block) and tokens, or -1.
 * Does not change reference counts or the queue. */
int32_t pllm_block_pool_lookup(const pllm_block_pool *p, uint64_t key, int32_t parent,
                               const int32_t *tokens);

/* Take n blocks from the queue's head (reference count 1 each), dropping the index entries of
 * evicted cached blocks. Fails with PLLM_ERR_NOMEM, taking nothing, when fewer than n are free. */
pllm_status pllm_block_pool_alloc(pllm_block_pool *p, int32_t n, int32_t *ids);
/* Add a reference; a block at count 0 leaves the free queue (a cache hit being reused). */
void pllm_block_pool_touch(pllm_block_pool *p, int32_t id);
/* Drop one reference from each block, in the order given; blocks reaching 0 enter the queue. */
void pllm_block_pool_release(pllm_block_pool *p, const int32_t *ids, int32_t n);

/* Index the full block id (held, reference count > 0) under key with its parent and tokens.
 * Returns the block a later lookup will find: id itself when it was indexed; another block
 * already indexed with identical (parent, tokens), which the caller should use in place of
 * id; or -1 when nothing can be indexed (caching disabled, or parent is not indexed). */
int32_t pllm_block_pool_cache(pllm_block_pool *p, int32_t id, uint64_t key, int32_t parent,
                              const int32_t *tokens);

/* Tagged entries (the hybrid KV layout's sliding pool, kv_manager.h): a block indexed under
 * (key, tag, tokens) with no parent (-1) and no children; tag != 0 names what the block belongs
 * to (there: a global block and its generation), so a lookup matches only when key, tag and
 * tokens all do. Tagged entries are leaves: any release order is leaves-first. */
int32_t pllm_block_pool_lookup_tagged(const pllm_block_pool *p, uint64_t key, uint64_t tag,
                                      const int32_t *tokens);
int32_t pllm_block_pool_cache_tagged(pllm_block_pool *p, int32_t id, uint64_t key, uint64_t tag,
                                     const int32_t *tokens);

/* Free queue order, head (next to be allocated) first: writes up to cap ids, returns the
 * queue length. (FUTURE: the heap in eviction order, sorted on each call; for tests.) */
int32_t pllm_block_pool_queue(const pllm_block_pool *p, int32_t *ids, int32_t cap);
/* Verify the pool's invariants; PLLM_ERR_INTERNAL with a message naming the block if one
 * fails. tail_first also checks the callers' discipline that makes eviction leaves-first: a
 * held indexed block's parent is held, and every parent sits behind its indexed children in
 * the queue (FUTURE: a free parent's label is no later than its free children's). O(n_blocks *
 * block_size); for tests. */
pllm_status pllm_block_pool_check(const pllm_block_pool *p, bool tail_first);

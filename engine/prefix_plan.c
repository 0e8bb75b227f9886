/* prefix_plan.c: the live block trie (grouping, next use) and the plan statistics. */
#include "engine/prefix_plan.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define PLAN_ROOT_KEY   0x2545f4914f6cdd1dull
#define SET_MAX_ENTRIES ((int64_t)1 << 23)
/* set entries: (key & ~F_MASK) | flags; 0 is empty */
#define F_ALLH     1u /* every prompt holding the block so far can reuse it */
#define F_COMPUTED 2u /* the model computed it at least once */
#define F_MULTI    4u /* more than one prompt holds it */
#define F_MASK     7u

typedef struct plan_node {
    uint64_t key;
    int32_t parent; /* node, -1 for a first block; the free list's link when free */
    int32_t depth;  /* 0 for a first block */
    int32_t n_live; /* paths holding it; 0: the slot is free */
    int32_t block;  /* linked pool block, -1 when none */
    uint32_t gen;   /* its generation when linked */
    int32_t n_wait, cap;
    pllm_plan_use **minh; /* [cap]: waiting users, first in queue order on top */
    pllm_plan_use **maxh; /* [cap]: last in queue order on top */
} plan_node;

typedef struct map_slot {
    uint64_t key;
    int32_t node; /* -1: empty */
} map_slot;

struct pllm_plan {
    int32_t bs;
    bool trie;
    bool feed; /* the pool evicts by next use */
    pllm_kv_manager *kv;
    pllm_block_pool *pool;
    plan_node *nodes; /* [cap_nodes] */
    int32_t n_nodes, cap_nodes, free_head;
    int64_t path_total; /* sum of live path lengths (check) */
    map_slot *map;      /* key -> node; linear probing */
    uint64_t map_mask;
    int64_t map_count;
    uint64_t *set; /* distinct prompt blocks ever added, with flags */
    uint64_t set_mask;
    int64_t set_count;
    pllm_plan_stats st;
};

pllm_status pllm_plan_init(pllm_plan **out, const pllm_plan_params *p)
{
    *out = NULL;
    if (p->block_size < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "plan: block_size must be >= 1, got %d",
                           p->block_size);
    pllm_plan *pl = pllm_calloc(1, sizeof *pl);
    if (!pl) return PLLM_ERR_NOMEM;
    pl->bs = p->block_size;
    pl->trie = p->trie;
    pl->kv = p->kv;
    pl->pool = p->kv ? pllm_kv_pool(p->kv) : NULL;
    pl->feed = p->trie && pl->pool && pllm_block_pool_policy(pl->pool) == PLLM_EVICT_FUTURE;
    pl->free_head = -1;
    pl->st.exact = true;
    *out = pl;
    return PLLM_OK;
}

void pllm_plan_free(pllm_plan *pl)
{
    if (!pl) return;
    for (int32_t i = 0; i < pl->n_nodes; i++) {
        free(pl->nodes[i].minh);
        free(pl->nodes[i].maxh);
    }
    free(pl->nodes);
    free(pl->map);
    free(pl->set);
    free(pl);
}

/* ---- key -> node map ---- */

static uint64_t slot_home(uint64_t key, uint64_t mask)
{
    return (key ^ (key >> 29) ^ (key >> 47)) & mask;
}

static int32_t map_find(const pllm_plan *pl, uint64_t key)
{
    if (!pl->map) return -1;
    for (uint64_t i = slot_home(key, pl->map_mask);; i = (i + 1) & pl->map_mask) {
        if (pl->map[i].node < 0) return -1;
        if (pl->map[i].key == key) return pl->map[i].node;
    }
}

static pllm_status map_put(pllm_plan *pl, uint64_t key, int32_t node)
{
    if (!pl->map || 2 * (pl->map_count + 1) > (int64_t)(pl->map_mask + 1)) {
        uint64_t old_n = pl->map ? pl->map_mask + 1 : 0, n = old_n ? 2 * old_n : 256;
        map_slot *m = pllm_malloc((size_t)n * sizeof *m);
        if (!m) return PLLM_ERR_NOMEM;
        for (uint64_t i = 0; i < n; i++) m[i].node = -1;
        for (uint64_t i = 0; i < old_n; i++) {
            if (pl->map[i].node < 0) continue;
            uint64_t j = slot_home(pl->map[i].key, n - 1);
            while (m[j].node >= 0) j = (j + 1) & (n - 1);
            m[j] = pl->map[i];
        }
        free(pl->map);
        pl->map = m;
        pl->map_mask = n - 1;
    }
    uint64_t i = slot_home(key, pl->map_mask);
    while (pl->map[i].node >= 0) i = (i + 1) & pl->map_mask;
    pl->map[i] = (map_slot){.key = key, .node = node};
    pl->map_count++;
    return PLLM_OK;
}

/* Remove key (backward-shift deletion keeps probe chains intact). */
static void map_del(pllm_plan *pl, uint64_t key)
{
    uint64_t i = slot_home(key, pl->map_mask);
    while (pl->map[i].key != key || pl->map[i].node < 0) {
        PLLM_ASSERT(pl->map[i].node >= 0);
        i = (i + 1) & pl->map_mask;
    }
    for (uint64_t j = i;;) {
        j = (j + 1) & pl->map_mask;
        if (pl->map[j].node < 0) break;
        uint64_t k = slot_home(pl->map[j].key, pl->map_mask);
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays) continue;
        pl->map[i] = pl->map[j];
        i = j;
    }
    pl->map[i].node = -1;
    pl->map_count--;
}

/* ---- the set of distinct prompt blocks (statistics) ---- */

static uint64_t set_key(uint64_t key)
{
    uint64_t k = key & ~(uint64_t)F_MASK;
    return k ? k : F_MASK + 1;
}

/* The slot of key, inserted with flags 0 when absent (NULL when the set is full or out of
 * memory: the statistics become inexact). *fresh tells whether it was absent. */
static uint64_t *set_get(pllm_plan *pl, uint64_t key, bool *fresh)
{
    uint64_t k = set_key(key);
    *fresh = false;
    if (pl->set) {
        for (uint64_t i = slot_home(k, pl->set_mask);; i = (i + 1) & pl->set_mask) {
            if (!pl->set[i]) break;
            if ((pl->set[i] & ~(uint64_t)F_MASK) == k) return &pl->set[i];
        }
    }
    if (pl->set_count >= SET_MAX_ENTRIES) return NULL;
    if (!pl->set || 2 * (pl->set_count + 1) > (int64_t)(pl->set_mask + 1)) {
        uint64_t old_n = pl->set ? pl->set_mask + 1 : 0, n = old_n ? 2 * old_n : 1024;
        uint64_t *t = calloc((size_t)n, sizeof *t);
        if (!t) return NULL;
        for (uint64_t i = 0; i < old_n; i++) {
            if (!pl->set[i]) continue;
            uint64_t j = slot_home(pl->set[i] & ~(uint64_t)F_MASK, n - 1);
            while (t[j]) j = (j + 1) & (n - 1);
            t[j] = pl->set[i];
        }
        free(pl->set);
        pl->set = t;
        pl->set_mask = n - 1;
    }
    uint64_t i = slot_home(k, pl->set_mask);
    while (pl->set[i]) i = (i + 1) & pl->set_mask;
    pl->set[i] = k;
    pl->set_count++;
    *fresh = true;
    return &pl->set[i];
}

/* ---- keys and paths ---- */

static pllm_status keys_extend(pllm_plan *pl, pllm_req *r, int32_t n)
{
    if (n <= r->n_plan_keys) return PLLM_OK;
    PLLM_ASSERT((int64_t)n * pl->bs <= (int64_t)r->tokens.n);
    if (n > r->plan_keys_cap) {
        int32_t cap = r->plan_keys_cap ? r->plan_keys_cap : 8;
        while (cap < n) cap *= 2;
        uint64_t *k = pllm_realloc(r->plan_keys, (size_t)cap * sizeof *k);
        if (!k) return PLLM_ERR_NOMEM;
        r->plan_keys = k;
        r->plan_keys_cap = cap;
    }
    size_t bytes = (size_t)pl->bs * sizeof(int32_t);
    for (int32_t i = r->n_plan_keys; i < n; i++)
        r->plan_keys[i] = XXH3_64bits_withSeed(r->tokens.ids + (size_t)i * (size_t)pl->bs, bytes,
                                               i ? r->plan_keys[i - 1] : PLAN_ROOT_KEY);
    r->n_plan_keys = n;
    return PLLM_OK;
}

static bool link_valid(const pllm_plan *pl, const plan_node *n)
{
    return n->block >= 0 && pllm_block_pool_is_indexed(pl->pool, n->block) &&
           pllm_block_pool_generation(pl->pool, n->block) == n->gen;
}

/* Push the node's next use into the pool (FUTURE). */
static void node_refresh(pllm_plan *pl, plan_node *n)
{
    if (!pl->feed || n->block < 0) return;
    if (!link_valid(pl, n)) {
        n->block = -1;
        return;
    }
    pllm_block_pool_set_next_use(pl->pool, n->block,
                                 n->n_wait ? n->minh[0]->order : PLLM_LABEL_NEVER);
}

static void node_link(pllm_plan *pl, int32_t node, int32_t block)
{
    plan_node *n = &pl->nodes[node];
    n->block = block;
    n->gen = pllm_block_pool_generation(pl->pool, block);
    node_refresh(pl, n);
}

static pllm_status node_new(pllm_plan *pl, uint64_t key, int32_t parent, int32_t depth,
                            int32_t *out)
{
    int32_t id = pl->free_head;
    if (id < 0) {
        if (pl->n_nodes == pl->cap_nodes) {
            int32_t cap = pl->cap_nodes ? 2 * pl->cap_nodes : 256;
            plan_node *nn = pllm_realloc(pl->nodes, (size_t)cap * sizeof *nn);
            if (!nn) return PLLM_ERR_NOMEM;
            pl->nodes = nn;
            pl->cap_nodes = cap;
        }
        id = pl->n_nodes++;
        pl->nodes[id] = (plan_node){.block = -1};
    }
    PLLM_TRY(map_put(pl, key, id));
    if (id == pl->free_head) pl->free_head = pl->nodes[id].parent;
    plan_node *n = &pl->nodes[id];
    /* keep the heap arrays of a reused slot */
    n->key = key;
    n->parent = parent;
    n->depth = depth;
    n->n_live = 0;
    n->block = -1;
    n->n_wait = 0;
    pl->st.live_nodes++;
    *out = id;
    return PLLM_OK;
}

static void node_release(pllm_plan *pl, int32_t id)
{
    plan_node *n = &pl->nodes[id];
    PLLM_ASSERT(n->n_live > 0);
    if (--n->n_live > 0) return;
    PLLM_ASSERT(n->n_wait == 0);
    if (pl->feed && link_valid(pl, n))
        pllm_block_pool_set_next_use(pl->pool, n->block, PLLM_LABEL_NEVER);
    map_del(pl, n->key);
    n->block = -1;
    n->parent = pl->free_head;
    pl->free_head = id;
    pl->st.live_nodes--;
}

/* Grow r's path to its first n blocks (r is not waiting). */
static pllm_status path_grow(pllm_plan *pl, pllm_req *r, int32_t n)
{
    PLLM_ASSERT(!r->plan_waiting);
    if (n <= r->n_plan_path) return PLLM_OK;
    PLLM_TRY(keys_extend(pl, r, n));
    if (n > r->plan_path_cap) {
        int32_t cap = r->plan_path_cap ? r->plan_path_cap : 8;
        while (cap < n) cap *= 2;
        pllm_plan_use *u = pllm_realloc(r->plan_path, (size_t)cap * sizeof *u);
        if (!u) return PLLM_ERR_NOMEM;
        r->plan_path = u;
        r->plan_path_cap = cap;
    }
    for (int32_t i = r->n_plan_path; i < n; i++) {
        int32_t node = map_find(pl, r->plan_keys[i]);
        if (node < 0)
            PLLM_TRY(node_new(pl, r->plan_keys[i], i ? r->plan_path[i - 1].node : -1, i, &node));
        pl->nodes[node].n_live++;
        r->plan_path[i] = (pllm_plan_use){.req = r, .node = node, .min_pos = -1, .max_pos = -1};
        r->n_plan_path = i + 1;
        pl->path_total++;
    }
    return PLLM_OK;
}

/* Link r's path nodes to the cached blocks holding their content (the pool's longest hit). */
static pllm_status path_link_cached(pllm_plan *pl, pllm_req *r)
{
    if (!pl->pool || !pllm_block_pool_caching(pl->pool) || r->n_plan_path == 0) return PLLM_OK;
    PLLM_TRY(pllm_kv_keys_extend(pl->kv, &r->keys, r->tokens.ids, r->n_plan_path * pl->bs));
    int32_t parent = -1;
    for (int32_t i = 0; i < r->n_plan_path; i++) {
        plan_node *n = &pl->nodes[r->plan_path[i].node];
        int32_t b = link_valid(pl, n) ? n->block : -1;
        if (b < 0) {
            b = pllm_block_pool_lookup(pl->pool, r->keys.keys[i], parent,
                                       r->tokens.ids + (size_t)i * (size_t)pl->bs);
            if (b < 0) break;
            node_link(pl, r->plan_path[i].node, b);
        }
        parent = b;
    }
    return PLLM_OK;
}

/* ---- the waiting heaps of a node ---- */

static bool use_before(const pllm_plan_use *a, const pllm_plan_use *b)
{
    if (a->order.hi != b->order.hi) return a->order.hi < b->order.hi;
    if (a->order.lo != b->order.lo) return a->order.lo < b->order.lo;
    return a->req->arrival < b->req->arrival;
}

/* mx = false: the min heap (first on top); true: the max heap. */
static bool heap_less(bool mx, const pllm_plan_use *a, const pllm_plan_use *b)
{
    return mx ? use_before(b, a) : use_before(a, b);
}

static void heap_put(plan_node *n, bool mx, int32_t pos, pllm_plan_use *u)
{
    if (mx) {
        n->maxh[pos] = u;
        u->max_pos = pos;
    } else {
        n->minh[pos] = u;
        u->min_pos = pos;
    }
}

static void heap_sift(plan_node *n, bool mx, int32_t pos, int32_t size)
{
    pllm_plan_use **h = mx ? n->maxh : n->minh;
    pllm_plan_use *u = h[pos];
    while (pos > 0 && heap_less(mx, u, h[(pos - 1) / 2])) {
        heap_put(n, mx, pos, h[(pos - 1) / 2]);
        pos = (pos - 1) / 2;
    }
    for (;;) {
        int32_t c = 2 * pos + 1;
        if (c >= size) break;
        if (c + 1 < size && heap_less(mx, h[c + 1], h[c])) c++;
        if (!heap_less(mx, h[c], u)) break;
        heap_put(n, mx, pos, h[c]);
        pos = c;
    }
    heap_put(n, mx, pos, u);
}

static pllm_status node_reserve(plan_node *n)
{
    if (n->n_wait < n->cap) return PLLM_OK;
    int32_t cap = n->cap ? 2 * n->cap : 2;
    pllm_plan_use **a = pllm_realloc(n->minh, (size_t)cap * sizeof *a);
    if (!a) return PLLM_ERR_NOMEM;
    n->minh = a;
    pllm_plan_use **b = pllm_realloc(n->maxh, (size_t)cap * sizeof *b);
    if (!b) return PLLM_ERR_NOMEM;
    n->maxh = b;
    n->cap = cap;
    return PLLM_OK;
}

static void node_push(plan_node *n, pllm_plan_use *u)
{
    PLLM_ASSERT(n->n_wait < n->cap);
    int32_t at = n->n_wait++;
    heap_put(n, false, at, u);
    heap_put(n, true, at, u);
    heap_sift(n, false, at, n->n_wait);
    heap_sift(n, true, at, n->n_wait);
}

static void heap_take(plan_node *n, bool mx, pllm_plan_use *u)
{
    pllm_plan_use **h = mx ? n->maxh : n->minh;
    int32_t pos = mx ? u->max_pos : u->min_pos, last = n->n_wait - 1;
    PLLM_ASSERT(pos >= 0 && pos <= last && h[pos] == u);
    if (pos != last) {
        heap_put(n, mx, pos, h[last]);
        heap_sift(n, mx, pos, last);
    }
    if (mx)
        u->max_pos = -1;
    else
        u->min_pos = -1;
}

static void node_take(plan_node *n, pllm_plan_use *u)
{
    heap_take(n, false, u);
    heap_take(n, true, u);
    n->n_wait--;
}

/* ---- the interface ---- */

pllm_status pllm_plan_add(pllm_plan *pl, pllm_req *r)
{
    pllm_status st = keys_extend(pl, r, r->n_prompt / pl->bs);
    if (st == PLLM_OK && pl->trie) st = path_grow(pl, r, ((int32_t)r->tokens.n - 1) / pl->bs);
    if (st == PLLM_OK && pl->trie) st = path_link_cached(pl, r);
    if (st != PLLM_OK) pllm_plan_remove(pl, r);
    return st;
}

void pllm_plan_account(pllm_plan *pl, pllm_req *r)
{
    if (r->plan_accounted) return;
    r->plan_accounted = true;
    int32_t bs = pl->bs, n_full = PLLM_MIN(r->n_prompt / bs, r->n_plan_keys);
    int32_t h = (r->n_prompt - 1) / bs;
    pl->st.requests++;
    pl->st.prompt_tokens += r->n_prompt;
    if (!pl->trie && r->index > 0) pl->st.best_cached_tokens += (int64_t)h * bs;
    for (int32_t i = 0; i < n_full; i++) {
        bool fresh, hit = i < h;
        uint64_t *e = set_get(pl, r->plan_keys[i], &fresh);
        if (!e) {
            pl->st.exact = false;
            continue;
        }
        if (fresh) {
            pl->st.distinct_blocks++;
            if (hit) *e |= F_ALLH;
            continue;
        }
        if (!(*e & F_MULTI)) {
            *e |= F_MULTI;
            pl->st.shared_blocks++;
        }
        if (!pl->trie) continue;
        /* best = |H| - [C == H] per block: a reuser adds one; the first holder that cannot reuse
         * it frees one reuser from computing it */
        if (hit) {
            pl->st.best_cached_tokens += bs;
        } else if (*e & F_ALLH) {
            pl->st.best_cached_tokens += bs;
            *e &= ~(uint64_t)F_ALLH;
        }
    }
    if (n_full < r->n_prompt / bs) pl->st.exact = false;
}

pllm_req *pllm_plan_group_tail(const pllm_plan *pl, const pllm_req *r, int32_t *depth)
{
    *depth = 0;
    for (int32_t i = r->n_plan_path - 1; i >= 0; i--) {
        const plan_node *n = &pl->nodes[r->plan_path[i].node];
        if (n->n_wait == 0) continue;
        *depth = i + 1;
        return n->maxh[0]->req;
    }
    return NULL;
}

void pllm_plan_note_grouped(pllm_plan *pl)
{
    pl->st.grouped++;
}

pllm_status pllm_plan_wait(pllm_plan *pl, pllm_req *r)
{
    if (!pl->trie || r->plan_waiting) return PLLM_OK;
    PLLM_TRY(path_grow(pl, r, ((int32_t)r->tokens.n - 1) / pl->bs));
    PLLM_TRY(path_link_cached(pl, r));
    for (int32_t i = 0; i < r->n_plan_path; i++)
        PLLM_TRY(node_reserve(&pl->nodes[r->plan_path[i].node]));
    for (int32_t i = 0; i < r->n_plan_path; i++) {
        plan_node *n = &pl->nodes[r->plan_path[i].node];
        r->plan_path[i].order = r->order;
        node_push(n, &r->plan_path[i]);
        node_refresh(pl, n);
    }
    r->plan_waiting = true;
    return PLLM_OK;
}

void pllm_plan_unwait(pllm_plan *pl, pllm_req *r)
{
    if (!r->plan_waiting) return;
    for (int32_t i = r->n_plan_path - 1; i >= 0; i--) {
        plan_node *n = &pl->nodes[r->plan_path[i].node];
        node_take(n, &r->plan_path[i]);
        node_refresh(pl, n);
    }
    r->plan_waiting = false;
}

void pllm_plan_relabeled(pllm_plan *pl, pllm_req *r)
{
    if (!r->plan_waiting) return;
    /* the order of all labels is kept, so the heaps stay valid */
    for (int32_t i = 0; i < r->n_plan_path; i++) {
        plan_node *n = &pl->nodes[r->plan_path[i].node];
        r->plan_path[i].order = r->order;
        if (n->minh[0] == &r->plan_path[i]) node_refresh(pl, n);
    }
}

void pllm_plan_link(pllm_plan *pl, pllm_req *r, int32_t from, int32_t to)
{
    if (!pl->trie || !pl->pool) return;
    for (int32_t i = from; i < to && i < r->table.n; i++) {
        int32_t node = i < r->n_plan_path   ? r->plan_path[i].node
                       : i < r->n_plan_keys ? map_find(pl, r->plan_keys[i])
                                            : -1;
        int32_t b = r->table.ids[i];
        if (node < 0 || !pllm_block_pool_is_indexed(pl->pool, b)) break;
        node_link(pl, node, b);
    }
}

void pllm_plan_computed(pllm_plan *pl, pllm_req *r, int32_t from, int32_t to)
{
    int32_t bs = pl->bs, end = PLLM_MIN(to, r->n_prompt);
    for (int32_t i = from / bs; (i + 1) * bs <= end; i++) {
        pl->st.blocks_computed++;
        if (i >= r->n_plan_keys) continue;
        bool fresh;
        uint64_t *e = set_get(pl, r->plan_keys[i], &fresh);
        if (!e) continue;
        if (*e & F_COMPUTED)
            pl->st.blocks_recomputed++;
        else
            *e |= F_COMPUTED;
    }
}

void pllm_plan_remove(pllm_plan *pl, pllm_req *r)
{
    pllm_plan_unwait(pl, r);
    for (int32_t i = r->n_plan_path - 1; i >= 0; i--) {
        node_release(pl, r->plan_path[i].node);
        pl->path_total--;
    }
    free(r->plan_path);
    free(r->plan_keys);
    r->plan_path = NULL;
    r->plan_keys = NULL;
    r->n_plan_path = r->plan_path_cap = r->n_plan_keys = r->plan_keys_cap = 0;
}

void pllm_plan_get_stats(const pllm_plan *pl, pllm_plan_stats *out)
{
    *out = pl->st;
}

pllm_status pllm_plan_check(const pllm_plan *pl)
{
    int64_t live = 0, n_live_sum = 0;
    for (int32_t id = 0; id < pl->n_nodes; id++) {
        const plan_node *n = &pl->nodes[id];
        if (n->n_live == 0) continue;
        live++;
        n_live_sum += n->n_live;
        if (map_find(pl, n->key) != id)
            return pllm_errorf(PLLM_ERR_INTERNAL, "plan: node %d not found by its key", id);
        if (n->parent >= 0 &&
            (pl->nodes[n->parent].n_live < n->n_live || pl->nodes[n->parent].depth != n->depth - 1))
            return pllm_errorf(PLLM_ERR_INTERNAL, "plan: node %d outlives or misplaces parent %d",
                               id, n->parent);
        if (n->n_wait > n->n_live)
            return pllm_errorf(PLLM_ERR_INTERNAL, "plan: node %d has %d waiting of %d live", id,
                               n->n_wait, n->n_live);
        for (int32_t i = 0; i < n->n_wait; i++) {
            if (n->minh[i]->min_pos != i || n->maxh[i]->max_pos != i || n->minh[i]->node != id ||
                n->maxh[i]->node != id || !n->minh[i]->req->plan_waiting ||
                !pllm_label_eq(n->minh[i]->order, n->minh[i]->req->order))
                return pllm_errorf(PLLM_ERR_INTERNAL, "plan: node %d heap slot %d inconsistent", id,
                                   i);
            if (i > 0 && (use_before(n->minh[i], n->minh[(i - 1) / 2]) ||
                          use_before(n->maxh[(i - 1) / 2], n->maxh[i])))
                return pllm_errorf(PLLM_ERR_INTERNAL, "plan: node %d heap order broken at %d", id,
                                   i);
        }
        if (pl->feed && link_valid(pl, n)) {
            pllm_label want = n->n_wait ? n->minh[0]->order : PLLM_LABEL_NEVER;
            if (!pllm_label_eq(pllm_block_pool_next_use(pl->pool, n->block), want))
                return pllm_errorf(PLLM_ERR_INTERNAL,
                                   "plan: node %d's block %d has a stale next-use label", id,
                                   n->block);
        }
    }
    if (live != pl->st.live_nodes || live != pl->map_count || n_live_sum != pl->path_total)
        return pllm_errorf(PLLM_ERR_INTERNAL,
                           "plan: %lld live nodes, counter %d, map %lld, paths %lld vs %lld",
                           (long long)live, pl->st.live_nodes, (long long)pl->map_count,
                           (long long)n_live_sum, (long long)pl->path_total);
    return PLLM_OK;
}

/*
 * engine_block_pool: reference counts, LRU order, eviction order, forced hash collisions, index
 * entries dropped on eviction, the FUTURE (next-use) order and its leaf redirect; then long
 * random runs against an independent model of the pool (a plain array for the LRU queue, a
 * linear scan by the stated rule for FUTURE, and a prefix -> block table for the index), with
 * the default XXH3 hash, a degenerate constant hash (every key collides) and a 2-bit hash.
 * FUTURE runs label every cached block with its Belady next use: the position of the first
 * upcoming sequence (a list of the next 6 to be allocated) that starts with its prefix.
 */
#include "engine/block_pool.h"
#include "tests/testutil.h"

#include <string.h>

static uint64_t const_hash(uint64_t parent, const int32_t *t, int32_t n, uint64_t extra, void *arg)
{
    (void)parent, (void)t, (void)n, (void)extra, (void)arg;
    return 7;
}

static uint64_t twobit_hash(uint64_t parent, const int32_t *t, int32_t n, uint64_t extra, void *arg)
{
    (void)arg;
    uint64_t h = parent ^ extra;
    for (int32_t i = 0; i < n; i++) h = h * 31 + (uint64_t)t[i];
    return h & 3;
}

static pllm_block_pool *make_pool_policy(int32_t n, int32_t bs, pllm_block_hash_fn h,
                                         pllm_evict_policy policy)
{
    pllm_block_pool_params pp = {.n_blocks = n,
                                 .block_size = bs,
                                 .enable_cache = true,
                                 .extra = 42,
                                 .hash = h,
                                 .policy = policy};
    pllm_block_pool *p = NULL;
    CHECK_OK(pllm_block_pool_init(&p, &pp));
    return p;
}

static pllm_block_pool *make_pool(int32_t n, int32_t bs, pllm_block_hash_fn h)
{
    return make_pool_policy(n, bs, h, PLLM_EVICT_LRU);
}

static pllm_label lab(uint64_t v)
{
    return (pllm_label){.hi = 0, .lo = v};
}

static bool queue_is(const pllm_block_pool *p, const int32_t *want, int32_t n)
{
    int32_t got[64];
    int32_t m = pllm_block_pool_queue(p, got, 64);
    if (m != n) return false;
    for (int32_t i = 0; i < n; i++)
        if (got[i] != want[i]) return false;
    return true;
}

static void test_basics(void)
{
    pllm_block_pool *p = make_pool(6, 2, NULL);
    CHECK(pllm_block_pool_n_free(p) == 6);
    CHECK(queue_is(p, (int32_t[]){0, 1, 2, 3, 4, 5}, 6));
    int32_t ids[8];
    CHECK_OK(pllm_block_pool_alloc(p, 3, ids));
    CHECK(ids[0] == 0 && ids[1] == 1 && ids[2] == 2);
    CHECK(pllm_block_pool_n_free(p) == 3);
    CHECK(pllm_block_pool_ref_count(p, 1) == 1);
    /* too many: fails and takes nothing */
    CHECK(pllm_block_pool_alloc(p, 4, ids + 3) == PLLM_ERR_NOMEM);
    CHECK(pllm_block_pool_n_free(p) == 3);
    /* ref counts */
    pllm_block_pool_touch(p, 1);
    CHECK(pllm_block_pool_ref_count(p, 1) == 2);
    pllm_block_pool_release(p, &ids[1], 1);
    CHECK(pllm_block_pool_ref_count(p, 1) == 1 && pllm_block_pool_n_free(p) == 3);
    /* unindexed blocks go back to the head (reused first), in release order */
    pllm_block_pool_release(p, ids, 3);
    CHECK(queue_is(p, (int32_t[]){2, 1, 0, 3, 4, 5}, 6));
    CHECK_OK(pllm_block_pool_check(p, true));
    pllm_block_pool_free(p);
}

static void test_lru_and_eviction(void)
{
    pllm_block_pool *p = make_pool(5, 2, NULL);
    int32_t ids[5];
    CHECK_OK(pllm_block_pool_alloc(p, 3, ids)); /* 0 1 2: a chain A B C */
    int32_t tok[3][2] = {{1, 2}, {3, 4}, {5, 6}};
    uint64_t k0 = pllm_block_pool_hash(p, PLLM_BLOCK_ROOT_KEY, tok[0]);
    uint64_t k1 = pllm_block_pool_hash(p, k0, tok[1]);
    uint64_t k2 = pllm_block_pool_hash(p, k1, tok[2]);
    CHECK(k0 != k1 && k1 != k2);
    /* a child cannot be indexed under an unindexed parent */
    CHECK(pllm_block_pool_cache(p, ids[1], k1, ids[0], tok[1]) == -1);
    CHECK(pllm_block_pool_cache(p, ids[0], k0, -1, tok[0]) == ids[0]);
    CHECK(pllm_block_pool_cache(p, ids[1], k1, ids[0], tok[1]) == ids[1]);
    CHECK(pllm_block_pool_cache(p, ids[2], k2, ids[1], tok[2]) == ids[2]);
    CHECK(pllm_block_pool_lookup(p, k1, ids[0], tok[1]) == ids[1]);
    /* verification: wrong parent, wrong tokens, wrong key all miss */
    CHECK(pllm_block_pool_lookup(p, k1, -1, tok[1]) == -1);
    CHECK(pllm_block_pool_lookup(p, k1, ids[0], tok[2]) == -1);
    CHECK(pllm_block_pool_lookup(p, k1 ^ 1, ids[0], tok[1]) == -1);
    /* release tail first: C B A join the tail after the two never-used blocks */
    int32_t rev[3] = {ids[2], ids[1], ids[0]};
    pllm_block_pool_release(p, rev, 3);
    CHECK(queue_is(p, (int32_t[]){3, 4, 2, 1, 0}, 5));
    CHECK_OK(pllm_block_pool_check(p, true));
    /* still findable at ref 0 */
    CHECK(pllm_block_pool_lookup(p, k0, -1, tok[0]) == 0);
    /* touching a cached free block takes it out of the queue; releasing puts it at the tail */
    pllm_block_pool_touch(p, 0);
    CHECK(queue_is(p, (int32_t[]){3, 4, 2, 1}, 4));
    pllm_block_pool_release(p, (int32_t[]){0}, 1);
    CHECK(queue_is(p, (int32_t[]){3, 4, 2, 1, 0}, 5));
    /* allocation takes the head: the unused blocks first, then the leaf C, dropping its entry */
    pllm_block_pool_stats st;
    CHECK_OK(pllm_block_pool_alloc(p, 3, ids));
    CHECK(ids[0] == 3 && ids[1] == 4 && ids[2] == 2);
    CHECK(pllm_block_pool_lookup(p, k2, 1, tok[2]) == -1);
    CHECK(!pllm_block_pool_is_indexed(p, 2));
    CHECK(pllm_block_pool_is_indexed(p, 1) && pllm_block_pool_is_indexed(p, 0));
    pllm_block_pool_get_stats(p, &st);
    CHECK(st.n_evicted == 1 && st.n_orphan_drops == 0 && st.n_indexed == 2);
    CHECK_OK(pllm_block_pool_check(p, true));
    pllm_block_pool_release(p, ids, 3);
    pllm_block_pool_free(p);
}

/* Releasing a parent before its child (breaking the tail-first rule) must not leave the child
 * findable under a reused parent: evicting the parent drops the child too. */
static void test_orphan_safety(void)
{
    pllm_block_pool *p = make_pool(3, 1, const_hash);
    int32_t ids[3];
    CHECK_OK(pllm_block_pool_alloc(p, 2, ids));
    int32_t a = 10, b = 11;
    CHECK(pllm_block_pool_cache(p, ids[0], 7, -1, &a) == ids[0]);
    CHECK(pllm_block_pool_cache(p, ids[1], 7, ids[0], &b) == ids[1]);
    pllm_block_pool_release(p, ids, 2); /* parent first: the wrong order */
    CHECK_OK(pllm_block_pool_check(p, false));
    CHECK(pllm_block_pool_check(p, true) != PLLM_OK); /* the discipline check notices */
    int32_t got[2];
    CHECK_OK(pllm_block_pool_alloc(p, 2, got)); /* the unused block 2, then the parent */
    CHECK(got[0] == 2 && got[1] == ids[0]);
    /* the parent's id now holds something else; its old child must not be found under it */
    int32_t c = 99;
    CHECK(pllm_block_pool_cache(p, got[1], 7, -1, &c) == got[1]);
    CHECK(pllm_block_pool_lookup(p, 7, got[1], &b) == -1);
    CHECK(!pllm_block_pool_is_indexed(p, ids[1]));
    pllm_block_pool_stats st;
    pllm_block_pool_get_stats(p, &st);
    CHECK(st.n_orphan_drops == 1);
    CHECK_OK(pllm_block_pool_check(p, false));
    pllm_block_pool_release(p, got, 2);
    pllm_block_pool_free(p);
}

/* Every key equal: lookups must still return exactly the block with this parent and tokens. */
static void test_collisions(void)
{
    pllm_block_pool *p = make_pool(8, 2, const_hash);
    int32_t ids[8];
    CHECK_OK(pllm_block_pool_alloc(p, 8, ids));
    int32_t t0[2] = {1, 1}, t1[2] = {2, 2};
    /* chain X: ids0(t0) -> ids1(t1); chain Y: ids2(t1) -> ids3(t0) */
    CHECK(pllm_block_pool_cache(p, ids[0], 7, -1, t0) == ids[0]);
    CHECK(pllm_block_pool_cache(p, ids[1], 7, ids[0], t1) == ids[1]);
    CHECK(pllm_block_pool_cache(p, ids[2], 7, -1, t1) == ids[2]);
    CHECK(pllm_block_pool_cache(p, ids[3], 7, ids[2], t0) == ids[3]);
    CHECK(pllm_block_pool_lookup(p, 7, -1, t0) == ids[0]);
    CHECK(pllm_block_pool_lookup(p, 7, -1, t1) == ids[2]);
    CHECK(pllm_block_pool_lookup(p, 7, ids[0], t1) == ids[1]);
    CHECK(pllm_block_pool_lookup(p, 7, ids[2], t0) == ids[3]);
    CHECK(pllm_block_pool_lookup(p, 7, ids[0], t0) == -1);
    CHECK(pllm_block_pool_lookup(p, 7, ids[2], t1) == -1);
    /* identical (parent, tokens): the existing block is returned, the new one stays unindexed */
    CHECK(pllm_block_pool_cache(p, ids[4], 7, ids[0], t1) == ids[1]);
    CHECK(!pllm_block_pool_is_indexed(p, ids[4]));
    CHECK_OK(pllm_block_pool_check(p, true));
    int32_t rev[8];
    for (int32_t i = 0; i < 8; i++) rev[i] = ids[7 - i];
    pllm_block_pool_release(p, rev, 8);
    CHECK_OK(pllm_block_pool_check(p, true));
    pllm_block_pool_free(p);
}

/* FUTURE: unindexed first (last released first), then farthest next use, then oldest. */
static void test_future_order(void)
{
    pllm_block_pool *p = make_pool_policy(8, 1, NULL, PLLM_EVICT_FUTURE);
    CHECK(pllm_block_pool_policy(p) == PLLM_EVICT_FUTURE);
    CHECK(queue_is(p, (int32_t[]){0, 1, 2, 3, 4, 5, 6, 7}, 8)); /* id order at first */
    int32_t ids[8];
    CHECK_OK(pllm_block_pool_alloc(p, 6, ids));
    CHECK(ids[0] == 0 && ids[5] == 5);
    /* two chains: A = 0 -> 1 -> 2, B = 3 -> 4; block 5 stays unindexed */
    int32_t t[6] = {10, 11, 12, 13, 14, 15};
    uint64_t k0 = pllm_block_pool_hash(p, PLLM_BLOCK_ROOT_KEY, &t[0]);
    uint64_t k1 = pllm_block_pool_hash(p, k0, &t[1]), k2 = pllm_block_pool_hash(p, k1, &t[2]);
    uint64_t k3 = pllm_block_pool_hash(p, PLLM_BLOCK_ROOT_KEY, &t[3]);
    uint64_t k4 = pllm_block_pool_hash(p, k3, &t[4]);
    uint32_t g0 = pllm_block_pool_generation(p, 0);
    CHECK(pllm_block_pool_cache(p, 0, k0, -1, &t[0]) == 0);
    CHECK(pllm_block_pool_generation(p, 0) == g0 + 1);
    CHECK(pllm_block_pool_cache(p, 1, k1, 0, &t[1]) == 1);
    CHECK(pllm_block_pool_cache(p, 2, k2, 1, &t[2]) == 2);
    CHECK(pllm_block_pool_cache(p, 3, k3, -1, &t[3]) == 3);
    CHECK(pllm_block_pool_cache(p, 4, k4, 3, &t[4]) == 4);
    CHECK(pllm_label_eq(pllm_block_pool_next_use(p, 2), PLLM_LABEL_NEVER));
    /* labels: chain A is needed at time 5 (all of it), B's first block at 9, its child never */
    pllm_block_pool_set_next_use(p, 0, lab(5));
    pllm_block_pool_set_next_use(p, 1, lab(5));
    pllm_block_pool_set_next_use(p, 2, lab(5));
    pllm_block_pool_set_next_use(p, 3, lab(9));
    pllm_block_pool_set_next_use(p, 5, lab(1)); /* unindexed: ignored */
    CHECK(pllm_label_eq(pllm_block_pool_next_use(p, 5), PLLM_LABEL_NEVER));
    /* release everything (tail first per chain) */
    pllm_block_pool_release(p, (int32_t[]){2, 1, 0, 5, 4, 3}, 6);
    CHECK_OK(pllm_block_pool_check(p, true));
    /* order: unindexed 5 (released last), 6, 7; then B's leaf 4 (never);
     * then 3 (9); then A, released 2, 1, 0: oldest first */
    CHECK(queue_is(p, (int32_t[]){5, 6, 7, 4, 3, 2, 1, 0}, 8));
    /* re-keying a free block moves it: A is needed never, B at 2 */
    pllm_block_pool_set_next_use(p, 0, PLLM_LABEL_NEVER);
    pllm_block_pool_set_next_use(p, 1, PLLM_LABEL_NEVER);
    pllm_block_pool_set_next_use(p, 2, PLLM_LABEL_NEVER);
    pllm_block_pool_set_next_use(p, 3, lab(2));
    pllm_block_pool_set_next_use(p, 4, lab(2));
    CHECK_OK(pllm_block_pool_check(p, true));
    CHECK(queue_is(p, (int32_t[]){5, 6, 7, 2, 1, 0, 4, 3}, 8));
    /* a touched block leaves the heap and comes back with its label */
    pllm_block_pool_touch(p, 3);
    CHECK(queue_is(p, (int32_t[]){5, 6, 7, 2, 1, 0, 4}, 7));
    pllm_block_pool_release(p, (int32_t[]){3}, 1);
    CHECK(queue_is(p, (int32_t[]){5, 6, 7, 2, 1, 0, 4, 3}, 8));
    /* allocation: the three empty blocks, then A leaves first; evicted blocks lose their label */
    CHECK_OK(pllm_block_pool_alloc(p, 5, ids));
    CHECK(ids[0] == 5 && ids[1] == 6 && ids[2] == 7 && ids[3] == 2 && ids[4] == 1);
    CHECK(!pllm_block_pool_is_indexed(p, 2) && pllm_block_pool_is_indexed(p, 0));
    CHECK(pllm_label_eq(pllm_block_pool_next_use(p, 2), PLLM_LABEL_NEVER));
    CHECK_OK(pllm_block_pool_check(p, true));
    /* labels out of order (a parent later than its child): the check notices, and allocation
     * takes the leaf instead of orphaning it */
    pllm_block_pool_set_next_use(p, 3, lab(100));
    pllm_block_pool_set_next_use(p, 4, lab(3));
    CHECK(pllm_block_pool_check(p, true) != PLLM_OK);
    CHECK_OK(pllm_block_pool_check(p, false));
    int32_t leaf;
    CHECK_OK(pllm_block_pool_alloc(p, 1, &leaf)); /* 0 (never) first */
    CHECK(leaf == 0);
    CHECK_OK(pllm_block_pool_alloc(p, 1, &leaf));
    pllm_block_pool_stats st;
    pllm_block_pool_get_stats(p, &st);
    CHECK(leaf == 4 && st.n_leaf_redirects == 1 && st.n_orphan_drops == 0);
    CHECK(pllm_block_pool_is_indexed(p, 3));
    CHECK_OK(pllm_block_pool_check(p, true));
    pllm_block_pool_release(p, ids, 5);
    pllm_block_pool_release(p, (int32_t[]){0, 4}, 2);
    CHECK(pllm_block_pool_n_free(p) == 8);
    CHECK_OK(pllm_block_pool_check(p, true));
    pllm_block_pool_free(p);
    /* an unknown policy is refused */
    pllm_block_pool_params pp = {
        .n_blocks = 4, .block_size = 2, .enable_cache = true, .policy = (pllm_evict_policy)7};
    CHECK(pllm_block_pool_init(&p, &pp) == PLLM_ERR_INVALID && p == NULL);
}

/* ---- random run against an independent model ---- */

#define NB   14
#define BS   2
#define MAXB 6

typedef struct model_entry {
    bool used;
    int32_t len;               /* prefix length in tokens (a multiple of BS) */
    int32_t prefix[MAXB * BS]; /* the full token prefix the block completes */
} model_entry;

typedef struct model {
    int32_t ref[NB];
    int32_t queue[NB]; /* LRU: the free queue; FUTURE: the free blocks, any order */
    int32_t n_queue;
    model_entry idx[NB]; /* by block id */
    bool future;
    uint64_t tick[NB], now;
    uint64_t label[NB]; /* FUTURE: next use of an indexed block (UINT64_MAX: never) */
} model;

/* FUTURE, by the rule in block_pool.h: is a evicted before b? */
static bool model_before(const model *m, int32_t a, int32_t b)
{
    bool ia = m->idx[a].used, ib = m->idx[b].used;
    if (ia != ib) return !ia;
    if (!ia) return m->tick[a] > m->tick[b];
    if (m->label[a] != m->label[b]) return m->label[a] > m->label[b];
    if (m->tick[a] != m->tick[b]) return m->tick[a] < m->tick[b];
    if (m->idx[a].len != m->idx[b].len) return m->idx[a].len > m->idx[b].len;
    return a < b;
}

/* The free blocks in eviction order. */
static int32_t model_order(const model *m, int32_t *out)
{
    if (!m->future) {
        memcpy(out, m->queue, (size_t)m->n_queue * 4);
        return m->n_queue;
    }
    for (int32_t i = 0; i < m->n_queue; i++) {
        int32_t id = m->queue[i], j = i;
        while (j > 0 && model_before(m, id, out[j - 1])) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = id;
    }
    return m->n_queue;
}

static int32_t model_find(const model *m, const int32_t *prefix, int32_t len)
{
    for (int32_t b = 0; b < NB; b++)
        if (m->idx[b].used && m->idx[b].len == len &&
            !memcmp(m->idx[b].prefix, prefix, (size_t)len * 4))
            return b;
    return -1;
}

static void model_queue_remove(model *m, int32_t id)
{
    for (int32_t i = 0; i < m->n_queue; i++)
        if (m->queue[i] == id) {
            memmove(&m->queue[i], &m->queue[i + 1], (size_t)(m->n_queue - i - 1) * 4);
            m->n_queue--;
            return;
        }
    PLLM_ASSERT(0);
}

static void model_release(model *m, int32_t id)
{
    if (--m->ref[id] > 0) return;
    m->tick[id] = m->now++;
    if (m->idx[id].used || m->future) {
        m->queue[m->n_queue++] = id;
    } else {
        memmove(&m->queue[1], &m->queue[0], (size_t)m->n_queue * 4);
        m->queue[0] = id;
        m->n_queue++;
    }
}

static void model_touch(model *m, int32_t id)
{
    if (m->ref[id]++ == 0) model_queue_remove(m, id);
}

static int32_t model_alloc_one(model *m)
{
    int32_t order[NB];
    model_order(m, order);
    int32_t id = order[0];
    model_queue_remove(m, id);
    if (m->idx[id].used) {
        /* drop it and every entry whose prefix extends it */
        model_entry e = m->idx[id];
        for (int32_t b = 0; b < NB; b++)
            if (m->idx[b].used && m->idx[b].len >= e.len &&
                !memcmp(m->idx[b].prefix, e.prefix, (size_t)e.len * 4)) {
                m->idx[b].used = false;
                m->label[b] = UINT64_MAX;
            }
    }
    m->ref[id] = 1;
    return id;
}

typedef struct seq {
    int32_t tok[MAXB * BS];
    int32_t n_blocks;
    int32_t ids[MAXB];
    bool live;
} seq;

#define N_NEXT 6

/* A new sequence from a 2-letter alphabet: prefixes are shared often. */
static void random_seq(seq *s, uint64_t *rs)
{
    memset(s, 0, sizeof *s);
    s->n_blocks = 1 + (int32_t)(pllm_test_rand(rs) % MAXB);
    for (int32_t i = 0; i < s->n_blocks * BS; i++) s->tok[i] = (int32_t)(pllm_test_rand(rs) % 2);
}

/* FUTURE: label every indexed block with its next use: the first upcoming sequence whose
 * blocks start with the block's prefix. */
static void relabel_all(pllm_block_pool *p, model *m, const seq *next, uint64_t base)
{
    for (int32_t b = 0; b < NB; b++) {
        if (!m->idx[b].used) continue;
        uint64_t l = UINT64_MAX;
        for (int32_t k = 0; k < N_NEXT && l == UINT64_MAX; k++)
            if (next[k].n_blocks * BS >= m->idx[b].len &&
                !memcmp(next[k].tok, m->idx[b].prefix, (size_t)m->idx[b].len * 4))
                l = base + (uint64_t)k;
        m->label[b] = l;
        pllm_block_pool_set_next_use(p, b, l == UINT64_MAX ? PLLM_LABEL_NEVER : lab(l));
    }
}

static void random_run(pllm_block_hash_fn h, uint64_t seed, int32_t n_ops, bool tail_first,
                       bool future)
{
    pllm_block_pool *p = make_pool_policy(NB, BS, h, future ? PLLM_EVICT_FUTURE : PLLM_EVICT_LRU);
    model m = {.future = future, .now = NB};
    for (int32_t i = 0; i < NB; i++) {
        m.queue[i] = i;
        m.tick[i] = (uint64_t)(NB - 1 - i);
        m.label[i] = UINT64_MAX;
    }
    m.n_queue = NB;
    seq seqs[6] = {0};
    uint64_t rs = seed, base = 0;
    seq next[N_NEXT];
    for (int32_t k = 0; k < N_NEXT; k++) random_seq(&next[k], &rs);
    int64_t hits = 0, evicts = 0;
    for (int32_t op = 0; op < n_ops; op++) {
        seq *s = &seqs[pllm_test_rand(&rs) % 6];
        if (!s->live) {
            if (future) {
                /* the next upcoming sequence (in the FUTURE run labels tell when it comes) */
                *s = next[0];
                memmove(&next[0], &next[1], (N_NEXT - 1) * sizeof *next);
                random_seq(&next[N_NEXT - 1], &rs);
                base++;
            } else {
                random_seq(s, &rs);
            }
            /* longest cached prefix, via the pool and via the model */
            int32_t parent = -1, n_hit = 0;
            uint64_t key = PLLM_BLOCK_ROOT_KEY;
            for (; n_hit < s->n_blocks; n_hit++) {
                key = pllm_block_pool_hash(p, key, s->tok + n_hit * BS);
                int32_t got = pllm_block_pool_lookup(p, key, parent, s->tok + n_hit * BS);
                int32_t want = model_find(&m, s->tok, (n_hit + 1) * BS);
                CHECK(got == want);
                if (got < 0) break;
                s->ids[n_hit] = got;
                parent = got;
            }
            int32_t free_hits = 0;
            for (int32_t i = 0; i < n_hit; i++) free_hits += m.ref[s->ids[i]] == 0;
            int32_t need = s->n_blocks - n_hit;
            if (future) relabel_all(p, &m, next, base);
            if (need > m.n_queue - free_hits) continue; /* does not fit now */
            for (int32_t i = 0; i < n_hit; i++) {
                pllm_block_pool_touch(p, s->ids[i]);
                model_touch(&m, s->ids[i]);
            }
            hits += n_hit;
            int32_t before = (int32_t)pllm_block_pool_n_free(p);
            CHECK_OK(pllm_block_pool_alloc(p, need, s->ids + n_hit));
            CHECK(pllm_block_pool_n_free(p) == before - need);
            for (int32_t i = n_hit; i < s->n_blocks; i++) {
                int32_t want = model_alloc_one(&m);
                CHECK(s->ids[i] == want);
            }
            /* "compute" and index the new blocks, switching to an identical indexed block */
            key = PLLM_BLOCK_ROOT_KEY;
            for (int32_t i = 0; i < s->n_blocks; i++) {
                key = pllm_block_pool_hash(p, key, s->tok + i * BS);
                if (i < n_hit) continue;
                int32_t par = i ? s->ids[i - 1] : -1;
                int32_t got = pllm_block_pool_cache(p, s->ids[i], key, par, s->tok + i * BS);
                int32_t want;
                if (par >= 0 && !m.idx[par].used)
                    want = -1;
                else if ((want = model_find(&m, s->tok, (i + 1) * BS)) < 0) {
                    want = s->ids[i];
                    m.idx[want].used = true;
                    m.idx[want].len = (i + 1) * BS;
                    memcpy(m.idx[want].prefix, s->tok, (size_t)(i + 1) * BS * 4);
                }
                CHECK(got == want);
                if (got >= 0 && got != s->ids[i]) {
                    pllm_block_pool_touch(p, got);
                    model_touch(&m, got);
                    pllm_block_pool_release(p, &s->ids[i], 1);
                    model_release(&m, s->ids[i]);
                    s->ids[i] = got;
                }
            }
            s->live = true;
        } else {
            /* free: tail first, or (tail_first == false) in a random rotation */
            int32_t start = tail_first ? 0 : (int32_t)(pllm_test_rand(&rs) % (uint64_t)s->n_blocks);
            for (int32_t k = 0; k < s->n_blocks; k++) {
                int32_t i = tail_first ? s->n_blocks - 1 - k : (start + k) % s->n_blocks;
                pllm_block_pool_release(p, &s->ids[i], 1);
                model_release(&m, s->ids[i]);
            }
            s->live = false;
        }
        if (future) relabel_all(p, &m, next, base);
        /* compare everything */
        int32_t q[NB], mq[NB];
        int32_t nq = pllm_block_pool_queue(p, q, NB), nm = model_order(&m, mq);
        CHECK(nq == nm && !memcmp(q, mq, (size_t)nq * 4));
        for (int32_t b = 0; b < NB; b++) {
            CHECK(pllm_block_pool_ref_count(p, b) == m.ref[b]);
            CHECK(pllm_block_pool_is_indexed(p, b) == m.idx[b].used);
        }
        CHECK_OK(pllm_block_pool_check(p, tail_first));
        if (pllm_test_failures) {
            fprintf(stderr, "random_run: first failure at op %d (seed %llu)\n", op,
                    (unsigned long long)seed);
            break;
        }
    }
    pllm_block_pool_stats st;
    pllm_block_pool_get_stats(p, &st);
    evicts = st.n_evicted;
    if (tail_first) CHECK(st.n_orphan_drops == 0 && st.n_leaf_redirects == 0);
    CHECK(hits > 0 && evicts > 0); /* the run exercised both */
    for (int32_t i = 0; i < 6; i++)
        if (seqs[i].live)
            for (int32_t k = seqs[i].n_blocks - 1; k >= 0; k--)
                pllm_block_pool_release(p, &seqs[i].ids[k], 1);
    CHECK(pllm_block_pool_n_free(p) == NB);
    fprintf(stderr,
            "  random run (%s, %s, %s): %d ops, %lld block hits, %lld evictions, %lld orphan "
            "drops\n",
            h == NULL         ? "xxh3"
            : h == const_hash ? "constant hash"
                              : "2-bit hash",
            tail_first ? "tail first" : "any order", future ? "future" : "lru", n_ops,
            (long long)hits, (long long)evicts, (long long)st.n_orphan_drops);
    pllm_block_pool_free(p);
}

static void test_disabled(void)
{
    pllm_block_pool_params pp = {.n_blocks = 4, .block_size = 2, .enable_cache = false};
    pllm_block_pool *p = NULL;
    CHECK_OK(pllm_block_pool_init(&p, &pp));
    int32_t id, t[2] = {1, 2};
    CHECK_OK(pllm_block_pool_alloc(p, 1, &id));
    uint64_t k = pllm_block_pool_hash(p, PLLM_BLOCK_ROOT_KEY, t);
    CHECK(pllm_block_pool_cache(p, id, k, -1, t) == -1);
    CHECK(pllm_block_pool_lookup(p, k, -1, t) == -1);
    pllm_block_pool_release(p, &id, 1);
    CHECK_OK(pllm_block_pool_check(p, true));
    pllm_block_pool_free(p);
    /* bad parameters */
    pp.n_blocks = 0;
    CHECK(pllm_block_pool_init(&p, &pp) == PLLM_ERR_INVALID && p == NULL);
}

int main(void)
{
    test_basics();
    test_lru_and_eviction();
    test_orphan_safety();
    test_collisions();
    test_disabled();
    test_future_order();
    for (uint64_t seed = 1; seed <= 4; seed++) {
        for (int f = 0; f < 2; f++) {
            random_run(NULL, seed, 3000, true, f);
            random_run(const_hash, seed + 100, 3000, true, f);
            random_run(twobit_hash, seed + 200, 3000, true, f);
            if (!f) random_run(const_hash, seed + 300, 3000, false, f);
        }
    }
    return pllm_test_finish("engine_block_pool");
}

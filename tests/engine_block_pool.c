/*
 * engine_block_pool: reference counts, LRU order, eviction order, forced hash collisions, index
 * entries dropped on eviction; then a long random run against an independent model of the
 * pool (a plain array for the free queue and a prefix -> block table for the index), with the
 * default XXH3 hash, a degenerate constant hash (every key collides) and a 2-bit hash.
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

static pllm_block_pool *make_pool(int32_t n, int32_t bs, pllm_block_hash_fn h)
{
    pllm_block_pool_params pp = {
        .n_blocks = n, .block_size = bs, .enable_cache = true, .extra = 42, .hash = h};
    pllm_block_pool *p = NULL;
    CHECK_OK(pllm_block_pool_init(&p, &pp));
    return p;
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
    int32_t queue[NB];
    int32_t n_queue;
    model_entry idx[NB]; /* by block id */
} model;

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
    if (m->idx[id].used) {
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
    int32_t id = m->queue[0];
    model_queue_remove(m, id);
    if (m->idx[id].used) {
        /* drop it and every entry whose prefix extends it */
        model_entry e = m->idx[id];
        for (int32_t b = 0; b < NB; b++)
            if (m->idx[b].used && m->idx[b].len >= e.len &&
                !memcmp(m->idx[b].prefix, e.prefix, (size_t)e.len * 4))
                m->idx[b].used = false;
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

static void random_run(pllm_block_hash_fn h, uint64_t seed, int32_t n_ops, bool tail_first)
{
    pllm_block_pool *p = make_pool(NB, BS, h);
    model m = {0};
    for (int32_t i = 0; i < NB; i++) m.queue[i] = i;
    m.n_queue = NB;
    seq seqs[6] = {0};
    uint64_t rs = seed;
    int64_t hits = 0, evicts = 0;
    for (int32_t op = 0; op < n_ops; op++) {
        seq *s = &seqs[pllm_test_rand(&rs) % 6];
        if (!s->live) {
            /* a new sequence from a 2-letter alphabet: prefixes are shared often */
            s->n_blocks = 1 + (int32_t)(pllm_test_rand(&rs) % MAXB);
            for (int32_t i = 0; i < s->n_blocks * BS; i++)
                s->tok[i] = (int32_t)(pllm_test_rand(&rs) % 2);
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
        /* compare everything */
        int32_t q[NB];
        int32_t nq = pllm_block_pool_queue(p, q, NB);
        CHECK(nq == m.n_queue && !memcmp(q, m.queue, (size_t)nq * 4));
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
    if (tail_first) CHECK(st.n_orphan_drops == 0);
    CHECK(hits > 0 && evicts > 0); /* the run exercised both */
    for (int32_t i = 0; i < 6; i++)
        if (seqs[i].live)
            for (int32_t k = seqs[i].n_blocks - 1; k >= 0; k--)
                pllm_block_pool_release(p, &seqs[i].ids[k], 1);
    CHECK(pllm_block_pool_n_free(p) == NB);
    fprintf(stderr,
            "  random run (%s, %s): %d ops, %lld block hits, %lld evictions, %lld orphan drops\n",
            h == NULL         ? "xxh3"
            : h == const_hash ? "constant hash"
                              : "2-bit hash",
            tail_first ? "tail first" : "any order", n_ops, (long long)hits, (long long)evicts,
            (long long)st.n_orphan_drops);
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
    for (uint64_t seed = 1; seed <= 4; seed++) {
        random_run(NULL, seed, 3000, true);
        random_run(const_hash, seed + 100, 3000, true);
        random_run(twobit_hash, seed + 200, 3000, true);
        random_run(const_hash, seed + 300, 3000, false);
    }
    return pllm_test_finish("engine_block_pool");
}

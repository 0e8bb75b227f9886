/*
 * engine_kv_manager: allocate, append, free (tail first), longest cached prefix, the last
 * token always recomputed, hits that leave the free queue, identical blocks computed twice
 * collapsing into one, and prefix caching off. The sliding pool (the hybrid KV layout): a
 * decoding sequence holds at most ceil(window / bs) + 1 sliding blocks, the blocks before its
 * window are released at commit, and a cached prefix is only a hit as far as its window's sliding
 * blocks are still cached (evicting one of them trims the hit to before it, or to nothing).
 */
#include "engine/kv_manager.h"
#include "tests/testutil.h"

#include <string.h>

static pllm_kv_manager *make_kv(int32_t n_blocks, int32_t bs, bool cache)
{
    pllm_block_pool_params pp = {
        .n_blocks = n_blocks, .block_size = bs, .enable_cache = cache, .extra = 5};
    pllm_kv_manager *kv = NULL;
    CHECK_OK(pllm_kv_manager_init(&kv, &pp));
    return kv;
}

/* Allocate and "compute" a whole sequence, then commit it; returns hit blocks. */
static int32_t run_seq(pllm_kv_manager *kv, pllm_kv_table *t, pllm_key_chain *c, const int32_t *tok,
                       int32_t n)
{
    int32_t hit[64], n_hit = 0;
    CHECK_OK(pllm_kv_find_cached(kv, c, tok, n, hit, &n_hit));
    CHECK_OK(pllm_kv_allocate(kv, t, hit, n_hit, n));
    CHECK_OK(pllm_kv_commit(kv, t, c, tok, n));
    return n_hit;
}

static void test_alloc_append_free(void)
{
    pllm_kv_manager *kv = make_kv(10, 4, true);
    pllm_block_pool *p = pllm_kv_pool(kv);
    pllm_kv_table t = {0};
    CHECK(pllm_kv_blocks_needed(kv, &t, 0, 9) == 3);
    CHECK_OK(pllm_kv_allocate(kv, &t, NULL, 0, 9));
    CHECK(t.n == 3 && pllm_block_pool_n_free(p) == 7);
    /* appending within the last block needs nothing; crossing into a new one needs one */
    CHECK(pllm_kv_blocks_needed(kv, &t, 0, 12) == 0);
    CHECK_OK(pllm_kv_allocate(kv, &t, NULL, 0, 12));
    CHECK(t.n == 3);
    CHECK_OK(pllm_kv_allocate(kv, &t, NULL, 0, 13));
    CHECK(t.n == 4 && pllm_block_pool_n_free(p) == 6);
    /* more than the pool holds: refused, nothing changes */
    CHECK(!pllm_kv_can_allocate(kv, &t, NULL, 0, 41));
    CHECK(pllm_kv_allocate(kv, &t, NULL, 0, 41) == PLLM_ERR_NOMEM);
    CHECK(t.n == 4 && pllm_block_pool_n_free(p) == 6);
    CHECK(pllm_kv_can_allocate(kv, &t, NULL, 0, 40));
    int32_t ids[4];
    memcpy(ids, t.ids, sizeof ids);
    pllm_kv_free(kv, &t);
    CHECK(t.n == 0 && pllm_block_pool_n_free(p) == 10);
    /* unindexed blocks go to the head, last released first: the table's first block leads */
    int32_t q[10];
    pllm_block_pool_queue(p, q, 10);
    CHECK(q[0] == ids[0] && q[1] == ids[1] && q[2] == ids[2] && q[3] == ids[3]);
    CHECK_OK(pllm_block_pool_check(p, true));
    pllm_kv_table_free(&t);
    pllm_kv_manager_free(kv);
}

static void test_prefix_hits(void)
{
    const int32_t bs = 4;
    pllm_kv_manager *kv = make_kv(12, bs, true);
    pllm_block_pool *p = pllm_kv_pool(kv);
    int32_t tok[16];
    for (int32_t i = 0; i < 16; i++) tok[i] = 100 + i;

    pllm_kv_table a = {0};
    pllm_key_chain ca = {0};
    CHECK(run_seq(kv, &a, &ca, tok, 14) == 0);
    CHECK(a.n == 4 && a.n_committed == 3); /* 3 full blocks indexed, the 4th is partial */
    CHECK(pllm_kv_cached_prefix(kv, &a) == 3);

    /* same 14 tokens: 3 blocks cached; (14-1)/4 = 3, so all full blocks are reused */
    pllm_key_chain cb = {0};
    int32_t hit[8], n_hit;
    CHECK_OK(pllm_kv_find_cached(kv, &cb, tok, 14, hit, &n_hit));
    CHECK(n_hit == 3 && hit[0] == a.ids[0] && hit[2] == a.ids[2]);
    /* 12 tokens = exactly 3 blocks: the last token is recomputed, so only 2 blocks */
    CHECK_OK(pllm_kv_find_cached(kv, &cb, tok, 12, hit, &n_hit));
    CHECK(n_hit == 2);
    /* 13 tokens: 3 blocks, the 13th token is computed */
    CHECK_OK(pllm_kv_find_cached(kv, &cb, tok, 13, hit, &n_hit));
    CHECK(n_hit == 3);
    /* a different token inside block 1 stops the chain at block 0 */
    int32_t tok2[16];
    memcpy(tok2, tok, sizeof tok);
    tok2[6] = 7;
    pllm_key_chain cc = {0};
    CHECK_OK(pllm_kv_find_cached(kv, &cc, tok2, 16, hit, &n_hit));
    CHECK(n_hit == 1 && hit[0] == a.ids[0]);

    /* free a: its blocks stay cached at ref 0; a new sequence's hits leave the queue */
    pllm_kv_free(kv, &a);
    CHECK(pllm_block_pool_n_free(p) == 12);
    pllm_kv_table b = {0};
    CHECK_OK(pllm_kv_find_cached(kv, &cb, tok, 16, hit, &n_hit));
    CHECK(n_hit == 3);
    /* 16 tokens need 4 blocks: 3 hits (free ones, which stop counting as free) + 1 new */
    CHECK(pllm_kv_blocks_needed(kv, &b, n_hit, 16) == 1);
    CHECK_OK(pllm_kv_allocate(kv, &b, hit, n_hit, 16));
    CHECK(b.n == 4 && b.n_committed == 3 && pllm_block_pool_n_free(p) == 8);
    for (int32_t i = 0; i < 3; i++) CHECK(pllm_block_pool_ref_count(p, b.ids[i]) == 1);
    CHECK_OK(pllm_block_pool_check(p, true));

    /* tail-first free: b's cached blocks go to the tail as 3, 2, 1, 0 -> the leaf is evicted first
     */
    CHECK_OK(pllm_kv_commit(kv, &b, &cb, tok, 16));
    CHECK(b.n_committed == 4);
    int32_t bids[4];
    memcpy(bids, b.ids, sizeof bids);
    pllm_kv_free(kv, &b);
    int32_t q[12];
    int32_t nq = pllm_block_pool_queue(p, q, 12);
    CHECK(nq == 12 && q[8] == bids[3] && q[9] == bids[2] && q[10] == bids[1] && q[11] == bids[0]);
    CHECK_OK(pllm_block_pool_check(p, true));

    pllm_kv_table_free(&a);
    pllm_kv_table_free(&b);
    pllm_key_chain_free(&ca);
    pllm_key_chain_free(&cb);
    pllm_key_chain_free(&cc);
    pllm_kv_manager_free(kv);
}

/* Two sequences compute the same prefix at once (both missed): the second commit switches to
 * the first's blocks and gives its own copies back. */
static void test_duplicate_collapse(void)
{
    const int32_t bs = 2;
    pllm_kv_manager *kv = make_kv(10, bs, true);
    pllm_block_pool *p = pllm_kv_pool(kv);
    int32_t tok[7] = {1, 2, 3, 4, 5, 6, 7};
    pllm_kv_table a = {0}, b = {0};
    pllm_key_chain ca = {0}, cb = {0};
    CHECK_OK(pllm_kv_allocate(kv, &a, NULL, 0, 7));
    CHECK_OK(pllm_kv_allocate(kv, &b, NULL, 0, 7));
    CHECK(pllm_block_pool_n_free(p) == 2);
    CHECK_OK(pllm_kv_commit(kv, &a, &ca, tok, 7));
    CHECK_OK(pllm_kv_commit(kv, &b, &cb, tok, 7));
    for (int32_t i = 0; i < 3; i++)
        CHECK(b.ids[i] == a.ids[i] && pllm_block_pool_ref_count(p, a.ids[i]) == 2);
    CHECK(b.ids[3] != a.ids[3]); /* the partial blocks stay private */
    CHECK(pllm_block_pool_n_free(p) == 5);
    CHECK(pllm_kv_cached_prefix(kv, &b) == 3);
    CHECK_OK(pllm_block_pool_check(p, true));
    pllm_kv_free(kv, &a);
    pllm_kv_free(kv, &b);
    CHECK(pllm_block_pool_n_free(p) == 10);
    CHECK_OK(pllm_block_pool_check(p, true));
    pllm_kv_table_free(&a);
    pllm_kv_table_free(&b);
    pllm_key_chain_free(&ca);
    pllm_key_chain_free(&cb);
    pllm_kv_manager_free(kv);
}

/* Chunked computation commits block by block; hits counted as free are not double-counted. */
static void test_chunks_and_capacity(void)
{
    const int32_t bs = 3;
    pllm_kv_manager *kv = make_kv(4, bs, true);
    pllm_block_pool *p = pllm_kv_pool(kv);
    int32_t tok[12] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2};
    pllm_kv_table a = {0};
    pllm_key_chain ca = {0};
    for (int32_t done = 0; done < 12; done += 5) {
        int32_t n = PLLM_MIN(done + 5, 12);
        CHECK_OK(pllm_kv_allocate(kv, &a, NULL, 0, n));
        CHECK_OK(pllm_kv_commit(kv, &a, &ca, tok, n));
        CHECK(a.n_committed == n / bs);
    }
    CHECK(pllm_block_pool_n_free(p) == 0);
    pllm_kv_free(kv, &a);
    /* all 4 blocks cached and free; a request for the same 12 tokens hits 3 of them and needs
     * one more block: the only other free block is the cached 4th, which it may evict */
    pllm_key_chain cb = {0};
    int32_t hit[4], n_hit;
    CHECK_OK(pllm_kv_find_cached(kv, &cb, tok, 12, hit, &n_hit));
    CHECK(n_hit == 3);
    pllm_kv_table b = {0};
    CHECK(pllm_kv_can_allocate(kv, &b, hit, n_hit, 12));
    /* 13 tokens would need a 5th block: refused although 4 are "free" */
    int32_t tok13[13];
    memcpy(tok13, tok, sizeof tok);
    tok13[12] = 5;
    pllm_key_chain cc = {0};
    int32_t hit13[4], n13;
    CHECK_OK(pllm_kv_find_cached(kv, &cc, tok13, 13, hit13, &n13));
    CHECK(n13 == 4);
    CHECK(!pllm_kv_can_allocate(kv, &b, hit13, n13, 13 + 3));
    CHECK_OK(pllm_kv_allocate(kv, &b, hit, n_hit, 12));
    CHECK(pllm_block_pool_n_free(p) == 0);
    pllm_kv_free(kv, &b);
    CHECK_OK(pllm_block_pool_check(p, true));
    pllm_kv_table_free(&a);
    pllm_kv_table_free(&b);
    pllm_key_chain_free(&ca);
    pllm_key_chain_free(&cb);
    pllm_key_chain_free(&cc);
    pllm_kv_manager_free(kv);
}

static void test_cache_off(void)
{
    pllm_kv_manager *kv = make_kv(6, 2, false);
    int32_t tok[6] = {1, 2, 3, 4, 5, 6};
    pllm_kv_table a = {0}, b = {0};
    pllm_key_chain ca = {0}, cb = {0};
    CHECK(run_seq(kv, &a, &ca, tok, 6) == 0);
    CHECK(run_seq(kv, &b, &cb, tok, 6) == 0);
    CHECK(pllm_kv_cached_prefix(kv, &a) == 0 && a.n_committed == 3);
    CHECK(pllm_block_pool_n_free(pllm_kv_pool(kv)) == 0);
    pllm_kv_free(kv, &a);
    pllm_kv_free(kv, &b);
    pllm_kv_table_free(&a);
    pllm_kv_table_free(&b);
    pllm_key_chain_free(&ca);
    pllm_key_chain_free(&cb);
    pllm_kv_manager_free(kv);
}

static void test_sliding(void)
{
    const int32_t bs = 4, W = 10; /* lo(n) = max(0, n + 1 - 10) / 4 */
    pllm_kv_manager *kv = make_kv(64, bs, true);
    CHECK_OK(pllm_kv_add_sliding(kv, 12, W));
    CHECK(pllm_kv_window(kv) == W && pllm_block_pool_n_blocks(pllm_kv_sw_pool(kv)) == 12);
    int32_t tok[80];
    for (int32_t i = 0; i < 80; i++) tok[i] = 100 + i;
    /* A: a prompt of 20 in one chunk, then 40 decode steps */
    pllm_kv_table a = {0};
    pllm_key_chain ka = {0};
    CHECK(run_seq(kv, &a, &ka, tok, 20) == 0);
    CHECK(a.sw_lo == (20 + 1 - W) / bs && pllm_kv_sw_held(&a) == 5 - 2);
    for (int32_t n = 21; n <= 60; n++) {
        CHECK_OK(pllm_kv_allocate(kv, &a, NULL, 0, n));
        CHECK(pllm_kv_sw_held(&a) <= (W + bs - 1) / bs + 2); /* + the token in flight */
        CHECK_OK(pllm_kv_commit(kv, &a, &ka, tok, n));
        CHECK(a.sw_lo == (n + 1 - W) / bs);
        CHECK(pllm_kv_sw_held(&a) <= (W + bs - 1) / bs + 1);
        for (int32_t b = 0; b < a.n; b++) CHECK((a.sw[b] >= 0) == (b >= a.sw_lo));
    }
    CHECK(a.n == 15 && pllm_block_pool_n_free(pllm_kv_pool(kv)) == 64 - 15);
    CHECK_OK(pllm_block_pool_check(pllm_kv_sw_pool(kv), true));
    pllm_kv_free(kv, &a);
    /* B: the same 61 tokens: 15 global blocks cached; the window before position 60 is blocks
     * 12..14, all cached (released blocks stay findable) */
    int32_t hit[64], n_hit = 0;
    pllm_key_chain kb = {0};
    CHECK_OK(pllm_kv_find_cached(kv, &kb, tok, 61, hit, &n_hit));
    CHECK(n_hit == 15);
    /* evict sliding blocks: take every free one but those of blocks 13 and 14 (and the
     * LRU order puts A's latest releases last: its window's blocks survive longest) */
    pllm_block_pool *sw = pllm_kv_sw_pool(kv);
    int32_t keep = 3, take = pllm_block_pool_n_free(sw) - keep, ids[16];
    CHECK_OK(pllm_block_pool_alloc(sw, take, ids));
    CHECK_OK(pllm_kv_find_cached(kv, &kb, tok, 61, hit, &n_hit));
    CHECK(n_hit == 15); /* blocks 12, 13, 14 were released last: still cached */
    pllm_block_pool_release(sw, ids, take);
    /* now evict block 13's sliding copy: 15 and 14 need it; h = 13 needs blocks 10..12, gone
     * long ago (evicted by the first take): nothing is usable */
    CHECK_OK(pllm_block_pool_alloc(sw, pllm_block_pool_n_free(sw), ids));
    CHECK_OK(pllm_kv_find_cached(kv, &kb, tok, 61, hit, &n_hit));
    CHECK(n_hit == 0);
    pllm_block_pool_release(sw, ids, 12);
    /* C: a prompt of 9 tokens (2 full blocks, inside one window) then B's 61: the hits are
     * trimmed to blocks whose windows C's run re-cached: C caches blocks 0, 1 -> h = 2 needs
     * blocks lo(8) = 0 .. 1 */
    pllm_kv_table c = {0};
    pllm_key_chain kc = {0};
    CHECK(run_seq(kv, &c, &kc, tok, 9) == 0);
    pllm_kv_free(kv, &c);
    CHECK_OK(pllm_kv_find_cached(kv, &kb, tok, 61, hit, &n_hit));
    CHECK(n_hit == 2);
    pllm_kv_table b = {0};
    /* a chunk of 61 - 8 tokens needs 14 fresh sliding blocks besides the 2 hits: more than the
     * pool; 24 tokens fit */
    CHECK(!pllm_kv_can_allocate(kv, &b, hit, n_hit, 61));
    CHECK(pllm_kv_can_allocate(kv, &b, hit, n_hit, 24));
    CHECK_OK(pllm_kv_allocate(kv, &b, hit, n_hit, 24));
    CHECK(b.sw_lo == 0 && b.sw[0] == c.sw[0] && b.sw[1] >= 0 && b.n == 6);
    CHECK_OK(pllm_kv_commit(kv, &b, &kb, tok, 24));
    CHECK(b.sw_lo == (24 + 1 - W) / bs);
    pllm_kv_free(kv, &b);
    CHECK(pllm_block_pool_n_free(sw) == 12 && pllm_block_pool_n_free(pllm_kv_pool(kv)) == 64);
    CHECK_OK(pllm_block_pool_check(sw, true));
    CHECK_OK(pllm_block_pool_check(pllm_kv_pool(kv), true));
    pllm_kv_table_free(&a);
    pllm_kv_table_free(&b);
    pllm_kv_table_free(&c);
    pllm_key_chain_free(&ka);
    pllm_key_chain_free(&kb);
    pllm_key_chain_free(&kc);
    pllm_kv_manager_free(kv);
}

/* Prefix caching off, a fork (n > 1) sharing its leader's prompt blocks: the leader holds the
 * fork's window (pllm_kv_hold_sliding), the fork takes it from the leader's table
 * (pllm_kv_share_hits); the shared prefix counts only while the window is shared too. */
static void test_sliding_fork(void)
{
    const int32_t bs = 4, W = 6; /* lo(n) = max(0, n + 1 - 6) / 4 */
    pllm_kv_manager *kv = make_kv(32, bs, false);
    CHECK_OK(pllm_kv_add_sliding(kv, 16, W));
    int32_t tok[40];
    for (int32_t i = 0; i < 40; i++) tok[i] = 7 + i;
    pllm_kv_table a = {0}, b = {0};
    pllm_key_chain ka = {0}, kb = {0};
    /* A: a prompt of 18; its forks take min(17 / 4, 18 / 4) = 4 blocks, window lo(16) = 2 */
    pllm_kv_hold_sliding(kv, &a, 16);
    CHECK_OK(pllm_kv_allocate(kv, &a, NULL, 0, 18));
    CHECK_OK(pllm_kv_commit(kv, &a, &ka, tok, 18));
    CHECK(a.sw_lo == 2); /* lo(18) = 3, held at 2 */
    /* B, the fork: the 4 global blocks and sliding blocks 2, 3 of A, nothing recomputed */
    int32_t hit[8], n_hit = 4;
    memcpy(hit, a.ids, 4 * sizeof *hit);
    CHECK_OK(pllm_kv_share_hits(kv, &a, &kb, tok, hit, &n_hit));
    CHECK(n_hit == 4);
    CHECK_OK(pllm_kv_allocate(kv, &b, hit, n_hit, 18));
    CHECK(b.sw_lo == 2 && b.sw[2] == a.sw[2] && b.sw[3] == a.sw[3] && b.sw[4] >= 0 &&
          b.sw[4] != a.sw[4]);
    CHECK(pllm_kv_shared_prefix(kv, &b) == 4 && pllm_kv_sw_private(kv, &b) == 1);
    /* A decodes: at 19, 20 still held (lo 3), at 21 (lo 4) the hold ends and 2, 3 go to B alone;
     * B's 4 shared global blocks are then no usable prefix (their window is B's only) */
    for (int32_t n = 19; n <= 22; n++) { /* lo(21) = 4 */
        CHECK_OK(pllm_kv_allocate(kv, &a, NULL, 0, n));
        CHECK_OK(pllm_kv_commit(kv, &a, &ka, tok, n));
        CHECK(a.sw_lo == (n < 21 ? 2 : 4));
    }
    CHECK(pllm_kv_shared_prefix(kv, &b) == 0 && pllm_kv_sw_private(kv, &b) == 3);
    /* without the hold a later fork finds nothing to share: A's window starts at block 4 */
    n_hit = 4;
    memcpy(hit, a.ids, 4 * sizeof *hit);
    CHECK_OK(pllm_kv_share_hits(kv, &a, &kb, tok, hit, &n_hit));
    CHECK(n_hit == 0);
    /* the sliding pool short, the global one not */
    CHECK(!pllm_kv_sliding_short(kv, &a, 23));
    int32_t ids[16], take = pllm_block_pool_n_free(pllm_kv_sw_pool(kv));
    CHECK_OK(pllm_block_pool_alloc(pllm_kv_sw_pool(kv), take, ids));
    CHECK(pllm_kv_sliding_short(kv, &a, 25) && !pllm_kv_sliding_short(kv, &a, 24));
    pllm_block_pool_release(pllm_kv_sw_pool(kv), ids, take);
    pllm_kv_free(kv, &b);
    pllm_kv_free(kv, &a);
    CHECK(pllm_block_pool_n_free(pllm_kv_sw_pool(kv)) == 16 &&
          pllm_block_pool_n_free(pllm_kv_pool(kv)) == 32);
    pllm_kv_table_free(&a);
    pllm_kv_table_free(&b);
    pllm_key_chain_free(&ka);
    pllm_key_chain_free(&kb);
    pllm_kv_manager_free(kv);
}

int main(void)
{
    test_alloc_append_free();
    test_prefix_hits();
    test_duplicate_collapse();
    test_chunks_and_capacity();
    test_cache_off();
    test_sliding();
    test_sliding_fork();
    return pllm_test_finish("engine_kv_manager");
}

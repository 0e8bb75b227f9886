/*
 * engine_loop: the engine's contract in fixed scenarios on the fake backend: parameter
 * validation (messages name the field), refused prompts, KV budget sizing, the preemption
 * victim rule, waiting for a prefix another request is computing, n > 1 completions sharing
 * the prompt, seeds, a failing backend, stop-string search, and (with the default model's
 * tokenizer) detokenized text, stop strings across token boundaries and stop ids; the prefix
 * plan: its statistics on a small input worked out by hand, depth-first grouping of nested
 * prefixes, and FUTURE eviction keeping the blocks the next queued request needs where LRU
 * drops them.
 */
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "engine/request.h"
#include "tests/engine_fake_backend.h"
#include "tests/testutil.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#define VOCAB 64
#define MAXC  16
#define MAXT  64

typedef struct done {
    int32_t n;
    struct {
        uint64_t id;
        int32_t index;
        int32_t tokens[MAXT];
        int32_t n_tokens;
        pllm_finish_reason finish;
        char text[1024];
        size_t text_len;
        char error[256];
        int32_t cached, prompt;
    } c[MAXC];
} done;

static void on_done(const pllm_completion *c, void *arg)
{
    done *d = arg;
    CHECK(d->n < MAXC);
    if (d->n >= MAXC) return;
    d->c[d->n].id = c->req_id;
    d->c[d->n].index = c->index;
    d->c[d->n].n_tokens = PLLM_MIN(c->n_tokens, MAXT);
    memcpy(d->c[d->n].tokens, c->token_ids, (size_t)d->c[d->n].n_tokens * sizeof(int32_t));
    d->c[d->n].finish = c->finish;
    CHECK(c->text && c->text_len < 1024 && c->text[c->text_len] == 0);
    d->c[d->n].text_len = PLLM_MIN(c->text_len, 1023);
    memcpy(d->c[d->n].text, c->text, d->c[d->n].text_len);
    d->c[d->n].text[d->c[d->n].text_len] = 0;
    snprintf(d->c[d->n].error, sizeof d->c[d->n].error, "%s", c->error ? c->error : "");
    d->c[d->n].cached = c->cached_tokens;
    d->c[d->n].prompt = c->prompt_tokens;
    d->n++;
}

static int32_t find_done(const done *d, uint64_t id, int32_t index)
{
    for (int32_t i = 0; i < d->n; i++)
        if (d->c[i].id == id && d->c[i].index == index) return i;
    return -1;
}

typedef struct rig {
    pllm_model model;
    pllm_backend be;
    pllm_engine *e;
} rig;

static bool rig_open(rig *g, pllm_engine_params *ep, const fake_backend_params *fp_in,
                     const pllm_tokenizer *tok)
{
    memset(g, 0, sizeof *g);
    fake_backend_params fp = {.n_vocab = VOCAB, .kv_available = (size_t)1 << 30};
    if (fp_in) fp = *fp_in;
    g->model.cfg.n_vocab = fp.n_vocab;
    g->model.cfg.n_ctx_train = 1000;
    g->model.identity = 77;
    CHECK_OK(fake_backend_create(&g->be, &fp));
    pllm_status st = pllm_engine_create(&g->e, &g->model, &g->be, tok, ep);
    if (st != PLLM_OK) {
        pllm_backend_free(&g->be);
        return false;
    }
    return true;
}

static void rig_close(rig *g)
{
    pllm_engine_free(g->e);
    pllm_backend_free(&g->be);
}

static bool msg_has(const char *s)
{
    return strstr(pllm_errmsg(), s) != NULL;
}

static void test_validation(void)
{
    pllm_request_params p;
#define BAD(mutate, field)                                                                         \
    do {                                                                                           \
        pllm_request_params_defaults(&p);                                                          \
        mutate;                                                                                    \
        CHECK(pllm_request_params_validate(&p) == PLLM_ERR_INVALID);                               \
        if (!msg_has(field)) {                                                                     \
            fprintf(stderr, "message '%s' does not name '%s'\n", pllm_errmsg(), field);            \
            pllm_test_failures++;                                                                  \
        }                                                                                          \
    } while (0)
    pllm_request_params_defaults(&p);
    CHECK(p.max_tokens == 256 && p.n == 1 && p.sampling.temperature == 0.0f);
    CHECK_OK(pllm_request_params_validate(&p));
    BAD(p.max_tokens = 0, "max_tokens");
    BAD(p.min_tokens = -1, "min_tokens");
    BAD((p.max_tokens = 3, p.min_tokens = 4), "min_tokens");
    BAD(p.n = 0, "n must");
    BAD(p.n_stop_ids = PLLM_MAX_STOP + 1, "stop_token_ids");
    BAD((p.n_stop_ids = 1, p.stop_ids[0] = -2), "stop_token_ids[0]");
    BAD((p.n_stop = 1, p.stop[0] = ""), "stop[0]");
    BAD((p.n_stop = 2, p.stop[0] = "x", p.stop[1] = NULL), "stop[1]");
    BAD(p.n_stop = -1, "stop");
    BAD(p.sampling.temperature = -1.0f, "temperature");
    BAD(p.sampling.logprobs = 21, "logprobs");
#undef BAD
    /* eviction policy names */
    pllm_evict_policy pol = PLLM_EVICT_LRU;
    CHECK_OK(pllm_evict_policy_parse("future", &pol));
    CHECK(pol == PLLM_EVICT_FUTURE && !strcmp(pllm_evict_policy_str(pol), "future"));
    CHECK_OK(pllm_evict_policy_parse("lru", &pol));
    CHECK(pol == PLLM_EVICT_LRU && !strcmp(pllm_evict_policy_str(pol), "lru"));
    CHECK(pllm_evict_policy_parse("belady", &pol) == PLLM_ERR_INVALID && msg_has("belady"));
    /* engine parameters */
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    CHECK(ep.block_size == 16 && ep.max_batched_tokens == 2048 && ep.max_seqs == 64 &&
          ep.max_bypass == 1024);
    rig g;
    ep.max_seqs = -1;
    CHECK(!rig_open(&g, &ep, NULL, NULL) && msg_has("max_seqs"));
    pllm_engine_params_defaults(&ep);
    ep.block_size = -4;
    CHECK(!rig_open(&g, &ep, NULL, NULL) && msg_has("block_size"));
    pllm_engine_params_defaults(&ep);
    ep.max_bypass = -1;
    CHECK(!rig_open(&g, &ep, NULL, NULL) && msg_has("max_bypass"));
    pllm_engine_params_defaults(&ep);
    CHECK(ep.eviction == PLLM_EVICT_FUTURE);
    ep.eviction = (pllm_evict_policy)9;
    CHECK(!rig_open(&g, &ep, NULL, NULL) && msg_has("eviction"));
    /* a zeroed struct means the defaults (max_bypass 0: strict FCFS) */
    memset(&ep, 0, sizeof ep);
    CHECK(rig_open(&g, &ep, NULL, NULL));
    if (g.e) {
        pllm_engine_stats st;
        pllm_engine_get_stats(g.e, &st);
        CHECK(st.block_size == 16);
        rig_close(&g);
    }
}

static void test_refusals(void)
{
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.block_size = 4;
    ep.n_blocks = 5; /* 20 tokens */
    rig g;
    if (!rig_open(&g, &ep, NULL, NULL)) return;
    CHECK(pllm_engine_ctx_limit(g.e) == 20);
    pllm_request_params p;
    pllm_request_params_defaults(&p);
    int32_t prompt[32];
    for (int32_t i = 0; i < 32; i++) prompt[i] = i;
    uint64_t id = 99;
    CHECK(pllm_engine_add(g.e, prompt, 0, &p, NULL, &id) == PLLM_ERR_INVALID && msg_has("prompt"));
    prompt[3] = VOCAB;
    CHECK(pllm_engine_add(g.e, prompt, 5, &p, NULL, &id) == PLLM_ERR_RANGE &&
          msg_has("prompt token 3"));
    prompt[3] = 3;
    CHECK(pllm_engine_add(g.e, prompt, 20, &p, NULL, &id) == PLLM_ERR_RANGE &&
          msg_has("KV cache holds 20"));
    p.n_stop_ids = 1;
    p.stop_ids[0] = VOCAB;
    CHECK(pllm_engine_add(g.e, prompt, 4, &p, NULL, &id) == PLLM_ERR_RANGE &&
          msg_has("stop_token_ids[0]"));
    p.n_stop_ids = 0;
    p.max_tokens = 0;
    CHECK(pllm_engine_add(g.e, prompt, 4, &p, NULL, &id) == PLLM_ERR_INVALID &&
          msg_has("max_tokens"));
    CHECK(!pllm_engine_has_work(g.e) && id == 99);
    /* 19 tokens fit and leave room for exactly one generated token */
    p.max_tokens = 50;
    CHECK_OK(pllm_engine_add(g.e, prompt, 19, &p, NULL, &id));
    CHECK(id == 0);
    done d = {0};
    while (pllm_engine_has_work(g.e)) CHECK_OK(pllm_engine_step(g.e, on_done, &d));
    CHECK(d.n == 1 && d.c[0].n_tokens == 1 && d.c[0].finish == PLLM_FINISH_LENGTH);
    rig_close(&g);
    /* max_model_len below the KV capacity */
    ep.max_model_len = 10;
    if (!rig_open(&g, &ep, NULL, NULL)) return;
    CHECK(pllm_engine_ctx_limit(g.e) == 10);
    CHECK(pllm_engine_add(g.e, prompt, 10, &p, NULL, &id) == PLLM_ERR_RANGE &&
          msg_has("max_model_len is 10"));
    CHECK_OK(pllm_engine_add(g.e, prompt, 6, &p, NULL, &id));
    memset(&d, 0, sizeof d);
    while (pllm_engine_has_work(g.e)) CHECK_OK(pllm_engine_step(g.e, on_done, &d));
    CHECK(d.n == 1 && d.c[0].n_tokens == 4 && d.c[0].finish == PLLM_FINISH_LENGTH);
    rig_close(&g);
}

static int32_t n_blocks_for(pllm_engine_params *ep, fake_backend_params *fp)
{
    rig g;
    if (!rig_open(&g, ep, fp, NULL)) return -1;
    pllm_engine_stats st;
    pllm_engine_get_stats(g.e, &st);
    rig_close(&g);
    return st.n_blocks;
}

static void test_kv_sizing(void)
{
    pllm_engine_params ep;
    fake_backend_params fp = {.n_vocab = VOCAB, .kv_available = (size_t)1 << 40};
    pllm_engine_params_defaults(&ep);
    ep.max_model_len = 1000;
    /* fake block: 8 bytes per token per layer -> 128 bytes for 16 tokens */
    ep.n_blocks = 7;
    CHECK(n_blocks_for(&ep, &fp) == 7);
    ep.n_blocks = 0;
    ep.kv_bytes = 1000;
    CHECK(n_blocks_for(&ep, &fp) == 7);
    ep.kv_bytes = 100;
    CHECK(n_blocks_for(&ep, &fp) == -1 && msg_has("kv_bytes"));
    ep.kv_bytes = 0;
    /* default, lots of memory: max_seqs sequences of max_model_len: 64 * ceil(1000 / 16) */
    CHECK(n_blocks_for(&ep, &fp) == 64 * 63);
    /* default, little memory: half of it */
    fp.kv_available = 2560;
    CHECK(n_blocks_for(&ep, &fp) == 10);
    /* ... less the step workspace first (backend.h workspace_bytes, allocated at the first
     * step): 2048 tokens of 1 byte */
    fp.kv_available = 2560 + 2048;
    fp.workspace_per_token = 1;
    CHECK(n_blocks_for(&ep, &fp) == 10);
    fp.workspace_per_token = 0;
    fp.kv_available = 200;
    CHECK(n_blocks_for(&ep, &fp) == -1 && msg_has("available"));
    /* default, huge blocks: the 4 GiB cap (a block of 2^20 layers is 128 MiB) */
    fp.kv_available = (size_t)1 << 40;
    fp.n_layer = 1 << 20;
    CHECK(n_blocks_for(&ep, &fp) == 32);
}

/* The engine's plan of the last step preempted exactly this (id, index). */
static bool preempted_only(pllm_engine *e, uint64_t id)
{
    const pllm_sched_out *o = pllm_engine_last_plan(e);
    return o->n_preempted == 1 && o->preempted[0].req_id == id;
}

static bool admitted(pllm_engine *e, uint64_t id, int32_t *n_hit)
{
    const pllm_sched_out *o = pllm_engine_last_plan(e);
    for (int32_t i = 0; i < o->n_entries; i++)
        if (o->entries[i].req_id == id && o->entries[i].admitted) {
            if (n_hit) *n_hit = o->entries[i].n_hit;
            return true;
        }
    return false;
}

static void test_victim_rule(void)
{
    /* No sharing: the victim is the request with the fewest computed tokens, not the latest
     * arrival. A (3-token prompt), C (1), B (4); 6 blocks of 2. */
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.block_size = 2;
    ep.n_blocks = 6;
    ep.max_seqs = 3;
    ep.no_prefix_cache = true;
    rig g;
    if (!rig_open(&g, &ep, NULL, NULL)) return;
    pllm_request_params p;
    pllm_request_params_defaults(&p);
    p.max_tokens = 20;
    uint64_t a, b, c;
    CHECK_OK(pllm_engine_add(g.e, (int32_t[]){1, 2, 3}, 3, &p, NULL, &a));
    CHECK_OK(pllm_engine_add(g.e, (int32_t[]){4}, 1, &p, NULL, &c));
    CHECK_OK(pllm_engine_add(g.e, (int32_t[]){5, 6, 7, 8}, 4, &p, NULL, &b));
    done d = {0};
    CHECK_OK(pllm_engine_step(g.e, on_done, &d)); /* all admitted: 2 + 1 + 2 blocks */
    CHECK(admitted(g.e, a, NULL) && admitted(g.e, b, NULL) && admitted(g.e, c, NULL));
    CHECK_OK(pllm_engine_step(g.e, on_done, &d)); /* B takes the last block */
    CHECK(pllm_engine_last_plan(g.e)->n_preempted == 0);
    CHECK_OK(pllm_engine_step(g.e, on_done, &d)); /* A needs one: C (2 computed) < A (4) < B (5) */
    CHECK(preempted_only(g.e, c));
    while (pllm_engine_has_work(g.e)) CHECK_OK(pllm_engine_step(g.e, on_done, &d));
    CHECK(d.n == 3);
    pllm_engine_stats st;
    pllm_engine_get_stats(g.e, &st);
    CHECK(st.preemptions >= 1 && st.requests_finished == 3);
    rig_close(&g);

    /* Sharing: S reuses A's two prompt blocks (after waiting for A to compute them), so its
     * rebuild cost is 2 tokens against B's 5, although S has more computed tokens. */
    ep.no_prefix_cache = false;
    ep.n_blocks = 8;
    if (!rig_open(&g, &ep, NULL, NULL)) return;
    uint64_t s;
    CHECK_OK(pllm_engine_add(g.e, (int32_t[]){1, 2, 3, 4, 5}, 5, &p, NULL, &a));
    CHECK_OK(pllm_engine_add(g.e, (int32_t[]){1, 2, 3, 4, 9}, 5, &p, NULL, &s));
    CHECK_OK(pllm_engine_add(g.e, (int32_t[]){20, 21, 22}, 3, &p, NULL, &b));
    memset(&d, 0, sizeof d);
    CHECK_OK(pllm_engine_step(g.e, on_done, &d));
    /* S waits: A is computing the blocks S would otherwise compute again; B goes ahead */
    CHECK(admitted(g.e, a, NULL) && admitted(g.e, b, NULL) && !admitted(g.e, s, NULL));
    CHECK_OK(pllm_engine_step(g.e, on_done, &d));
    int32_t hit = -1;
    CHECK(admitted(g.e, s, &hit) && hit == 4);
    CHECK_OK(pllm_engine_step(g.e, on_done, &d));
    CHECK(pllm_engine_last_plan(g.e)->n_preempted == 0);
    CHECK_OK(pllm_engine_step(g.e, on_done, &d));
    CHECK(preempted_only(g.e, s));
    while (pllm_engine_has_work(g.e)) CHECK_OK(pllm_engine_step(g.e, on_done, &d));
    CHECK(d.n == 3);
    int32_t i = find_done(&d, s, 0);
    CHECK(i >= 0 && d.c[i].cached == 4);
    CHECK_OK(pllm_block_pool_check(pllm_kv_pool(pllm_engine_kv(g.e)), true));
    rig_close(&g);
}

/* The reference for one completion on the fake model (no stop ids, greedy lengths). */
static int32_t simulate(const int32_t *prompt, int32_t n_prompt, uint64_t seed, int32_t max_tokens,
                        int32_t ctx_limit, int32_t *out)
{
    int32_t ctx[256];
    memcpy(ctx, prompt, (size_t)n_prompt * sizeof *ctx);
    int32_t n = n_prompt, k = 0;
    while (k < max_tokens && n < ctx_limit) {
        out[k] = fake_next_token(ctx, n, seed, NULL, 0, VOCAB, NULL);
        ctx[n++] = out[k++];
    }
    return k;
}

static void test_n_completions(void)
{
    for (int32_t cache = 0; cache < 2; cache++) {
        pllm_engine_params ep;
        pllm_engine_params_defaults(&ep);
        ep.block_size = 4;
        ep.n_blocks = 64;
        ep.no_prefix_cache = !cache;
        rig g;
        if (!rig_open(&g, &ep, NULL, NULL)) return;
        pllm_request_params p;
        pllm_request_params_defaults(&p);
        p.max_tokens = 6;
        p.n = 3;
        p.has_seed = true;
        p.sampling.seed = 1000;
        int32_t prompt[10] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
        uint64_t id;
        CHECK_OK(pllm_engine_add(g.e, prompt, 10, &p, &g, &id));
        done d = {0};
        while (pllm_engine_has_work(g.e)) CHECK_OK(pllm_engine_step(g.e, on_done, &d));
        CHECK(d.n == 3);
        bool all_same = true;
        for (int32_t k = 0; k < 3; k++) {
            int32_t i = find_done(&d, id, k);
            CHECK(i >= 0);
            if (i < 0) continue;
            int32_t want[8];
            int32_t nw = simulate(prompt, 10, 1000 + (uint64_t)k, 6, 1000, want);
            CHECK(d.c[i].n_tokens == nw && !memcmp(d.c[i].tokens, want, (size_t)nw * 4));
            /* completion 0 computes the prompt; the others share its two full blocks */
            CHECK(d.c[i].cached == (k == 0 ? 0 : 8) && d.c[i].prompt == 10);
            if (k > 0 && memcmp(d.c[i].tokens, d.c[find_done(&d, id, 0)].tokens, 6 * 4))
                all_same = false;
        }
        CHECK(!all_same); /* distinct seed streams */
        pllm_engine_stats st;
        pllm_engine_get_stats(g.e, &st);
        CHECK(st.prompt_tokens == 30 && st.prompt_tokens_cached == 16 &&
              st.prompt_tokens_computed == 14);
        CHECK(st.output_tokens == 18 && st.requests_finished == 3);
        rig_close(&g);
    }
}

/* Requests without a seed get one from the run seed and their id: reproducible across budgets
 * and batchings, different under another run seed. */
static void run_seedless(uint64_t run_seed, int32_t budget, int32_t out[4][8])
{
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.block_size = 2;
    ep.n_blocks = 40;
    ep.seed = run_seed;
    ep.max_batched_tokens = budget;
    rig g;
    if (!rig_open(&g, &ep, NULL, NULL)) return;
    pllm_request_params p;
    pllm_request_params_defaults(&p);
    p.max_tokens = 8;
    for (int32_t r = 0; r < 4; r++)
        CHECK_OK(pllm_engine_add(g.e, (int32_t[]){7, 7, 7, 7, 7}, 5, &p, NULL, NULL));
    done d = {0};
    while (pllm_engine_has_work(g.e)) CHECK_OK(pllm_engine_step(g.e, on_done, &d));
    for (int32_t r = 0; r < 4; r++) {
        int32_t i = find_done(&d, (uint64_t)r, 0);
        CHECK(i >= 0 && d.c[i].n_tokens == 8);
        if (i >= 0) memcpy(out[r], d.c[i].tokens, 8 * 4);
    }
    rig_close(&g);
}

static void test_seedless(void)
{
    int32_t a[4][8], b[4][8], c[4][8];
    run_seedless(5, 2048, a);
    run_seedless(5, 3, b);
    run_seedless(6, 2048, c);
    CHECK(!memcmp(a, b, sizeof a));
    CHECK(memcmp(a, c, sizeof a) != 0);
    CHECK(memcmp(a[0], a[1], sizeof a[0]) != 0); /* same prompt, different requests */
}

/* A backend that samples an id outside the vocabulary: the step fails, the engine stays failed.
 * It wraps the fake backend. */
typedef struct bad_ctx {
    pllm_backend inner;
} bad_ctx;

static pllm_status bad_kv_layout(void *c, int32_t bs, pllm_kv_layout *out)
{
    bad_ctx *b = c;
    return b->inner.iface->kv_layout(b->inner.ctx, bs, out);
}
static pllm_status bad_kv_available(void *c, size_t *bytes)
{
    bad_ctx *b = c;
    return b->inner.iface->kv_available(b->inner.ctx, bytes);
}
static pllm_status bad_kv_init(void *c, const pllm_kv_layout *l)
{
    bad_ctx *b = c;
    return b->inner.iface->kv_init(b->inner.ctx, l);
}
static pllm_status bad_step(void *c, const pllm_batch_plan *pl, pllm_step_out *out)
{
    bad_ctx *b = c;
    pllm_status st = b->inner.iface->step(b->inner.ctx, pl, out);
    if (st == PLLM_OK && pl->n_samples > 0) out->tokens[0] = 1 << 20;
    return st;
}
static void bad_destroy(void *c)
{
    bad_ctx *b = c;
    pllm_backend_free(&b->inner);
    free(b);
}
static const pllm_backend_iface bad_iface = {
    .name = "bad",
    .kv_layout = bad_kv_layout,
    .kv_available = bad_kv_available,
    .kv_init = bad_kv_init,
    .step = bad_step,
    .destroy = bad_destroy,
};

static void test_bad_backend(void)
{
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    bad_ctx *bc = pllm_calloc(1, sizeof *bc);
    fake_backend_params fp = {.n_vocab = VOCAB, .kv_available = 1 << 20};
    CHECK_OK(fake_backend_create(&bc->inner, &fp));
    pllm_backend be = {.iface = &bad_iface, .ctx = bc};
    pllm_model model = {0};
    model.cfg.n_vocab = VOCAB;
    model.cfg.n_ctx_train = 100;
    pllm_engine *e = NULL;
    CHECK_OK(pllm_engine_create(&e, &model, &be, NULL, &ep));
    pllm_request_params p;
    pllm_request_params_defaults(&p);
    CHECK_OK(pllm_engine_add(e, (int32_t[]){1, 2}, 2, &p, NULL, NULL));
    CHECK(pllm_engine_step(e, NULL, NULL) == PLLM_ERR_INTERNAL && msg_has("outside"));
    CHECK(pllm_engine_step(e, NULL, NULL) == PLLM_ERR_INTERNAL && msg_has("previous step failed"));
    pllm_engine_free(e);
    pllm_backend_free(&be);
}

static void test_stop_find(void)
{
    const char *s1[] = {"abc"};
    CHECK(pllm_stop_find("xxabcx", 6, 0, s1, 1) == 2);
    /* new text starts at 4 ("cx"): the match ending inside it counts */
    CHECK(pllm_stop_find("xxabcx", 6, 4, s1, 1) == 2);
    /* a match that ended before the new text was already seen */
    CHECK(pllm_stop_find("abcxxx", 6, 4, s1, 1) == -1);
    CHECK(pllm_stop_find("ab", 2, 0, s1, 1) == -1);
    const char *s2[] = {"zz", "b", "xa"};
    CHECK(pllm_stop_find("xxabcx", 6, 0, s2, 3) == 1); /* earliest start wins */
    CHECK(pllm_stop_find("xxabcx", 6, 3, s2, 3) == 3);
    CHECK(pllm_stop_find("", 0, 0, s2, 3) == -1);
}

/* ---- with the default model's tokenizer ---- */

static void run_text(const pllm_tokenizer *tok, const pllm_request_params *p, done *d)
{
    int32_t nv = pllm_tokenizer_n_vocab(tok);
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.n_blocks = 64;
    fake_backend_params fp = {.n_vocab = nv};
    rig g;
    if (!rig_open(&g, &ep, &fp, tok)) return;
    pllm_tokens prompt = {0};
    pllm_encode_opts eo = {.add_special = false, .parse_special = true};
    CHECK_OK(pllm_tokenizer_encode(tok, "The quick brown fox", 19, &eo, &prompt));
    memset(d, 0, sizeof *d);
    CHECK_OK(pllm_engine_add(g.e, prompt.ids, (int32_t)prompt.n, p, NULL, NULL));
    while (pllm_engine_has_work(g.e)) CHECK_OK(pllm_engine_step(g.e, on_done, d));
    CHECK(d->n == 1);
    pllm_tokens_free(&prompt);
    rig_close(&g);
}

/* A model whose vocabulary is larger than its tokenizer's (Phi-3, Qwen2.5 pad theirs), with a
 * backend that samples ids past the tokenizer's last (the fake ignores the sampler's n_valid,
 * as a buggy backend would): a request that gets an id without a token fails alone, with an
 * error completion naming the id; every other request finishes, and no step fails. */
static void test_padded_vocab(const pllm_tokenizer *tok)
{
    int32_t nv = pllm_tokenizer_n_vocab(tok);
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.n_blocks = 256;
    fake_backend_params fp = {.n_vocab = nv + nv / 8}; /* ~11% of the ids have no token */
    rig g;
    if (!rig_open(&g, &ep, &fp, tok)) return;
    pllm_request_params p;
    pllm_request_params_defaults(&p);
    p.max_tokens = 8;
    p.ignore_eos = true;
    p.sampling.temperature = 1.0f; /* sampled, seeded per request */
    uint64_t ids[MAXC];
    for (int32_t i = 0; i < MAXC; i++) {
        int32_t prompt[3] = {100 + i, 200 + i, 300 + i};
        p.has_seed = true;
        p.sampling.seed = (uint64_t)i;
        CHECK_OK(pllm_engine_add(g.e, prompt, 3, &p, NULL, &ids[i]));
    }
    done *d = pllm_calloc(1, sizeof *d);
    while (pllm_engine_has_work(g.e)) {
        pllm_status st = pllm_engine_step(g.e, on_done, d);
        CHECK_OK(st);
        if (st != PLLM_OK) break;
    }
    int32_t n_err = 0, n_ok = 0;
    CHECK(d->n == MAXC);
    for (int32_t i = 0; i < d->n; i++) {
        int32_t last = d->c[i].n_tokens > 0 ? d->c[i].tokens[d->c[i].n_tokens - 1] : -1;
        if (d->c[i].finish == PLLM_FINISH_ERROR) {
            n_err++;
            CHECK(last >= nv && strstr(d->c[i].error, "out of range"));
            for (int32_t k = 0; k + 1 < d->c[i].n_tokens; k++) CHECK(d->c[i].tokens[k] < nv);
        } else {
            n_ok++;
            CHECK(d->c[i].finish == PLLM_FINISH_LENGTH && d->c[i].n_tokens == 8);
            for (int32_t k = 0; k < d->c[i].n_tokens; k++) CHECK(d->c[i].tokens[k] < nv);
        }
    }
    /* the seeds give both kinds (deterministic) */
    CHECK(n_err > 0 && n_ok > 0);
    pllm_engine_stats es;
    pllm_engine_get_stats(g.e, &es);
    CHECK(es.requests_failed == n_err && es.requests_finished == MAXC);
    free(d);
    rig_close(&g);
}

static void test_text(void)
{
    const char *home = pllm_test_env("PLLM_HOME", NULL);
    char path[4096];
    if (home)
        snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", home);
    else
        snprintf(path, sizeof path, "%s/.cache/pllm/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 pllm_test_env("HOME", "."));
    pllm_gguf *gg = NULL;
    if (pllm_gguf_open(&gg, path) != PLLM_OK) {
        fprintf(stderr,
                "engine_loop: FAIL: cannot open the default model (%s); run scripts/setup.sh or "
                "set PLLM_HOME\n",
                pllm_errmsg());
        pllm_test_failures++;
        return;
    }
    pllm_tokenizer *tok = NULL;
    pllm_status st = pllm_tokenizer_from_gguf(&tok, gg);
    pllm_gguf_close(gg);
    CHECK_OK(st);
    if (st != PLLM_OK) return;

    pllm_request_params p;
    pllm_request_params_defaults(&p);
    p.max_tokens = 40;
    p.ignore_eos = true;
    p.has_seed = true;
    int32_t tested_boundary = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        p.sampling.seed = seed;
        p.n_stop = 0;
        p.n_stop_ids = 0;
        done full;
        run_text(tok, &p, &full);
        if (full.n != 1) continue;
        const int32_t *ids = full.c[0].tokens;
        int32_t n = full.c[0].n_tokens;
        CHECK(n == 40 && full.c[0].finish == PLLM_FINISH_LENGTH);
        /* the text is the whole decode of the generated ids */
        pllm_buf ref = {0};
        CHECK_OK(pllm_tokenizer_decode(tok, ids, (size_t)n, true, &ref));
        CHECK(ref.n == full.c[0].text_len && !memcmp(ref.s ? ref.s : "", full.c[0].text, ref.n));

        /* a stop string that spans a token boundary. cut[j]: decoded length after token j;
         * usable when every prefix decode is a prefix of the full text (no split characters) */
        size_t cut[41];
        bool prefixes_ok = true;
        cut[0] = 0;
        for (int32_t j = 1; j <= n; j++) {
            pllm_buf b = {0};
            CHECK_OK(pllm_tokenizer_decode(tok, ids, (size_t)j, true, &b));
            cut[j] = b.n;
            prefixes_ok &= b.n <= ref.n && (b.n == 0 || !memcmp(b.s, ref.s, b.n));
            pllm_buf_free(&b);
        }
        for (int32_t j = 3; prefixes_ok && j < n - 3; j++) {
            /* token j's text is [cut[j], cut[j+1]); take 2 bytes before it and 2 of it */
            if (cut[j] < 2 || cut[j + 1] < cut[j] + 2) continue;
            char stop[8];
            memcpy(stop, ref.s + cut[j] - 2, 4);
            stop[4] = 0;
            if (strlen(stop) != 4) continue;
            const char *first = memmem(ref.s, ref.n, stop, 4);
            size_t at = (size_t)(first - ref.s);
            /* the token after which the incremental detokenizer has emitted the whole first
             * match (it holds back an incomplete UTF-8 tail until the next token decides it) */
            pllm_detok dt;
            pllm_detok_init(&dt, tok, true);
            pllm_buf inc = {0};
            int32_t m = 0;
            while (inc.n < at + 4 && m < n) CHECK_OK(pllm_detok_push(&dt, ids[m++], &inc));
            pllm_buf_free(&inc);
            pllm_request_params q = p;
            q.n_stop = 1;
            q.stop[0] = stop;
            done sd;
            run_text(tok, &q, &sd);
            CHECK(sd.n == 1 && sd.c[0].finish == PLLM_FINISH_STOP);
            CHECK(sd.c[0].text_len == at && !memcmp(sd.c[0].text, ref.s, at));
            CHECK(sd.c[0].n_tokens == m && !memcmp(sd.c[0].tokens, ids, (size_t)m * 4));

            tested_boundary++;
            break;
        }
        /* a stop id: generation ends at its first occurrence, its text is not output */
        pllm_request_params q = p;
        q.n_stop_ids = 1;
        q.stop_ids[0] = ids[5];
        int32_t first = 0;
        while (ids[first] != ids[5]) first++;
        done sd;
        run_text(tok, &q, &sd);
        CHECK(sd.n == 1 && sd.c[0].finish == PLLM_FINISH_STOP && sd.c[0].n_tokens == first + 1);
        pllm_buf before = {0};
        CHECK_OK(pllm_tokenizer_decode(tok, ids, (size_t)first, true, &before));
        CHECK(sd.c[0].text_len == before.n &&
              !memcmp(sd.c[0].text, before.s ? before.s : "", before.n));
        pllm_buf_free(&before);
        /* min_tokens past it: that occurrence is banned, so the output changes */
        q.min_tokens = first + 2;
        run_text(tok, &q, &sd);
        CHECK(sd.n == 1 && sd.c[0].n_tokens >= first + 2);
        for (int32_t j = 0; j < first + 2 && j < sd.c[0].n_tokens; j++)
            CHECK(sd.c[0].tokens[j] != ids[5]);
        pllm_buf_free(&ref);
    }
    CHECK(tested_boundary >= 10);
    fprintf(stderr, "  text: %d stop strings across token boundaries checked\n", tested_boundary);
    test_padded_vocab(tok);
    pllm_tokenizer_free(tok);
}

/* ---- the prefix plan ---- */

static void run_all(pllm_engine *e, done *d)
{
    while (pllm_engine_has_work(e)) {
        pllm_status st = pllm_engine_step(e, on_done, d);
        CHECK_OK(st);
        if (st != PLLM_OK) return;
        CHECK_OK(pllm_plan_check(pllm_engine_plan(e)));
        CHECK_OK(pllm_block_pool_check(pllm_kv_pool(pllm_engine_kv(e)), true));
    }
}

/* Block size 4. A = 1..8, 9 (two reusable blocks); B = 1..8, 20, 21; C = 1..8 (its second
 * block holds its last token: it can reuse only the first); D = 50..54 with n = 2. Distinct
 * blocks: [1-4] (reused by A, B, C: computed once, 2 hits), [1-8] (held by A, B, C, reusable by
 * A and B: computed by C, 2 hits), [50-53] (D twice: 1 hit). Best = 5 blocks = 20 tokens of
 * 37. Queued C, A, B, D the engine reaches it, computing each distinct block once. */
static void test_plan_stats(void)
{
    for (int32_t order = 0; order < 2; order++) {
        pllm_engine_params ep;
        pllm_engine_params_defaults(&ep);
        ep.block_size = 4;
        ep.n_blocks = 32;
        rig g;
        if (!rig_open(&g, &ep, NULL, NULL)) return;
        pllm_request_params p;
        pllm_request_params_defaults(&p);
        p.max_tokens = 3;
        int32_t a[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, b[10] = {1, 2, 3, 4, 5, 6, 7, 8, 20, 21};
        int32_t dd[5] = {50, 51, 52, 53, 54};
        if (order == 0) CHECK_OK(pllm_engine_add(g.e, a, 8, &p, NULL, NULL)); /* C */
        CHECK_OK(pllm_engine_add(g.e, a, 9, &p, NULL, NULL));
        CHECK_OK(pllm_engine_add(g.e, b, 10, &p, NULL, NULL));
        if (order == 1) CHECK_OK(pllm_engine_add(g.e, a, 8, &p, NULL, NULL)); /* C last */
        p.n = 2;
        CHECK_OK(pllm_engine_add(g.e, dd, 5, &p, NULL, NULL));
        pllm_engine_plan_stats ps;
        pllm_engine_get_plan_stats(g.e, &ps);
        CHECK(ps.requests == 5 && ps.prompt_tokens == 37 && ps.best_cached_tokens == 20 &&
              ps.distinct_blocks == 3 && ps.shared_blocks == 3 && ps.exact);
        CHECK(ps.best_hit_rate > 20.0 / 37 - 1e-9 && ps.best_hit_rate < 20.0 / 37 + 1e-9);
        CHECK(ps.finished_requests == 0 && ps.hit_rate == 0.0 && ps.blocks_computed == 0);
        done d = {0};
        run_all(g.e, &d);
        pllm_engine_get_plan_stats(g.e, &ps);
        CHECK(ps.finished_requests == 5 && ps.finished_prompt_tokens == 37);
        CHECK(ps.finished_cached_tokens <= ps.best_cached_tokens &&
              ps.hit_rate <= ps.best_hit_rate);
        if (order == 0) {
            /* C computes [1-8] before A and B need it; every distinct block computed once */
            CHECK(ps.finished_cached_tokens == 20 && ps.blocks_computed == 3 &&
                  ps.blocks_recomputed == 0);
        } else {
            /* C comes after A and B: it reuses [1-4] but must compute its last block again */
            CHECK(ps.finished_cached_tokens == 16 && ps.blocks_computed == 4 &&
                  ps.blocks_recomputed == 1);
        }
        rig_close(&g);
    }
    /* without the cache only completion 1 of D reuses completion 0's block */
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.block_size = 4;
    ep.n_blocks = 32;
    ep.no_prefix_cache = true;
    rig g;
    if (!rig_open(&g, &ep, NULL, NULL)) return;
    pllm_request_params p;
    pllm_request_params_defaults(&p);
    p.max_tokens = 3;
    int32_t a[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    CHECK_OK(pllm_engine_add(g.e, a, 9, &p, NULL, NULL));
    CHECK_OK(pllm_engine_add(g.e, a, 9, &p, NULL, NULL));
    p.n = 2;
    CHECK_OK(pllm_engine_add(g.e, a, 5, &p, NULL, NULL));
    pllm_engine_plan_stats ps;
    pllm_engine_get_plan_stats(g.e, &ps);
    CHECK(ps.prompt_tokens == 28 && ps.best_cached_tokens == 4 && ps.distinct_blocks == 2);
    done d = {0};
    run_all(g.e, &d);
    pllm_engine_get_plan_stats(g.e, &ps);
    /* the identical prompt computes its two blocks again */
    CHECK(ps.finished_cached_tokens == 4 && ps.blocks_computed == 5 && ps.blocks_recomputed == 3);
    rig_close(&g);
}

/* Requests sharing a system block S and one of two 2-block subgroups X, Y, arriving
 * interleaved (X, Y, X, Y, X): the queue follows the trie depth first, X's behind X's. */
static void test_plan_grouping(void)
{
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.block_size = 4;
    ep.n_blocks = 8; /* small: grouping pays as soon as anything is queued behind the group */
    ep.max_seqs = 1;
    rig g;
    if (!rig_open(&g, &ep, NULL, NULL)) return;
    pllm_request_params p;
    pllm_request_params_defaults(&p);
    p.max_tokens = 2;
    int32_t pr[5][14];
    uint64_t id[5];
    for (int32_t r = 0; r < 5; r++) {
        for (int32_t i = 0; i < 4; i++) pr[r][i] = 1 + i;                  /* S */
        for (int32_t i = 4; i < 12; i++) pr[r][i] = (r % 2 ? 30 : 20) + i; /* X or Y */
        pr[r][12] = 40 + r;
        pr[r][13] = 50 + r;
        CHECK_OK(pllm_engine_add(g.e, pr[r], 14, &p, NULL, &id[r]));
    }
    uint64_t want[5] = {id[0], id[2], id[4], id[1], id[3]};
    int32_t k = 0;
    for (const pllm_req *x = pllm_sched_waiting_head(pllm_engine_sched(g.e)); x; x = x->w_next) {
        CHECK(k < 5 && x->id == want[k]);
        k++;
    }
    CHECK(k == 5 && pllm_sched_n_grouped(pllm_engine_sched(g.e)) == 2);
    done d = {0};
    run_all(g.e, &d);
    CHECK(d.n == 5);
    /* run in that order, one at a time: X's later members reuse S+X (12 tokens), Y's second
     * member too; the first Y reuses S */
    for (int32_t i = 0; i < d.n; i++) {
        int32_t r = (int32_t)d.c[i].id;
        CHECK(d.c[i].cached == (r == 0 ? 0 : r == 1 ? 4 : 12));
    }
    rig_close(&g);
}

/* One request at a time in add order (no grouping), 6 blocks of 4: P+a, Q+x, Z+y, P+c. Under
 * LRU the third request evicts P's older blocks and the last computes P's second block again;
 * under FUTURE the blocks of Q (never used again) go first and P+c reuses both of P's blocks.
 * With prefix grouping P+c runs right after P+a, and LRU reuses P too. */
static void test_future_eviction(void)
{
    for (int32_t v = 0; v < 3; v++) {
        pllm_engine_params ep;
        pllm_engine_params_defaults(&ep);
        ep.block_size = 4;
        ep.n_blocks = 6;
        ep.max_seqs = 1;
        ep.eviction = v == 1 ? PLLM_EVICT_FUTURE : PLLM_EVICT_LRU;
        pllm_engine_hooks hooks = {.no_grouping = v < 2};
        pllm_model model = {0};
        model.cfg.n_vocab = VOCAB;
        model.cfg.n_ctx_train = 1000;
        model.identity = 5;
        fake_backend_params fp = {.n_vocab = VOCAB, .kv_available = (size_t)1 << 30};
        pllm_backend be = {0};
        CHECK_OK(fake_backend_create(&be, &fp));
        pllm_engine *e = NULL;
        CHECK_OK(pllm_engine_create_hooked(&e, &model, &be, NULL, &ep, &hooks));
        if (!e) {
            pllm_backend_free(&be);
            return;
        }
        pllm_request_params p;
        pllm_request_params_defaults(&p);
        p.max_tokens = 1;
        int32_t reqs[4][9] = {{1, 2, 3, 4, 5, 6, 7, 8, 9},
                              {11, 12, 13, 14, 15, 16, 17, 18, 19},
                              {21, 22, 23, 24, 25, 26, 27, 28, 29},
                              {1, 2, 3, 4, 5, 6, 7, 8, 39}};
        uint64_t last = 0;
        for (int32_t r = 0; r < 4; r++) CHECK_OK(pllm_engine_add(e, reqs[r], 9, &p, NULL, &last));
        done d = {0};
        run_all(e, &d);
        int32_t i = find_done(&d, last, 0);
        pllm_engine_plan_stats ps;
        pllm_engine_get_plan_stats(e, &ps);
        CHECK(d.n == 4 && i >= 0);
        if (i >= 0) CHECK(d.c[i].cached == (v == 0 ? 4 : 8));
        CHECK(ps.blocks_recomputed == (v == 0 ? 1 : 0));
        pllm_engine_free(e);
        pllm_backend_free(&be);
    }
}

int main(void)
{
    test_validation();
    test_refusals();
    test_kv_sizing();
    test_victim_rule();
    test_n_completions();
    test_seedless();
    test_bad_backend();
    test_stop_find();
    test_text();
    test_plan_stats();
    test_plan_grouping();
    test_future_eviction();
    return pllm_test_finish("engine_loop");
}

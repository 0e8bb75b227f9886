/*
 * engine_hybrid_kv: the hybrid KV layout (docs/architecture.md "Hybrid KV": sliding-window
 * layers in their own pool, each sequence keeping only its last window there) against the
 * keep-everything layout (no_kv_hybrid), through the whole engine on a real backend.
 *
 *     engine_hybrid_kv [--quick] [MODEL]
 *
 * --quick: 5 prompts and the configurations bs8-tight, bs4-spec and bs8-quant only (the
 * emulated CUDA backend on a file's model).
 * The model: MODEL (a file pllm loads, e.g. tests/gen_hf_models.py's random Gemma 3 GGUF with
 * its window of 8), or an in-memory random model (tests/test_model.h) of 6 layers whose layers
 * 0-4 are sliding (window 12, their own RoPE base) and layer 5 global, Gemma 3's pattern.
 * Prompts of 40..150 random ids (3 to 18 windows) share prefixes and repeat, some with n = 2;
 * 20 greedy tokens each with 3 top logprobs.
 *
 * Configurations: block sizes 4, 8 and 16, chunked prefill (small token budgets), prefix cache
 * on and off, LRU and FUTURE eviction, speculative decoding (prompt lookup), a sliding pool at
 * its preferred floor and at its minimum (a window and one block: chunks shortened) (preemption),
 * and the quantized KV cache (int8 on the CPU, fp8 on CUDA). Each runs with and without the hybrid
 * layout; every completion's tokens and logprobs (top ids and values) must be identical (CUDA:
 * logprob values within 1e-4, see LP_TOL). The hybrid runs must have a sliding pool, hit the prefix
 * cache where it is on, and preempt where the pool is at its floor. One long sequence (one at a
 * time, budget 16) must hold at most ceil((window - 1 + 16) / bs) + 1 sliding blocks at any step
 * while its global blocks grow with its length.
 *
 * Built twice: against the CPU backend, and with PLLM_TEST_CUDA against the CUDA emulator
 * (engine_hybrid_kv_cuda; _gpu on a device).
 */
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "tests/test_model.h"
#include "tests/testutil.h"
#ifdef PLLM_TEST_CUDA
#include "cuda/cuda_backend.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_PROMPTS 10
#define MAX_COMP    (MAX_PROMPTS * 2)
#define MAX_GEN     20
#define MAX_PROMPT  160
#define TOP         3
/* logprob tolerance: the CPU's rows do not depend on how a prompt is chunked (bitwise equal);
 * CUDA's windowed prefill tiles may round a row differently when the sliding pool shortens a
 * chunk (tokens and top ids must still be equal) */
#ifdef PLLM_TEST_CUDA
#define LP_TOL 1e-4f
#else
#define LP_TOL 0.0f
#endif

static pllm_status make_backend(pllm_backend *b, const pllm_model *m, bool quant)
{
#ifdef PLLM_TEST_CUDA
    pllm_cuda_params cp;
    pllm_cuda_params_defaults(&cp);
    cp.kv_dtype = quant ? PLLM_KV_DTYPE_FP8 : PLLM_DTYPE_F32;
    cp.weights = PLLM_CUDA_WEIGHTS_F32;
    cp.reserve_tokens = 256;
    return pllm_cuda_backend_create(b, m, &cp);
#else
    pllm_cpu_params cp;
    pllm_cpu_params_defaults(&cp);
    cp.n_threads = 2;
    if (quant) cp.kv_dtype = PLLM_KV_DTYPE_I8;
    return pllm_cpu_backend_create(b, m, &cp);
#endif
}

typedef struct comp {
    int32_t n_emitted, n_tokens, finish;
    int32_t tok[MAX_GEN];
    float lp[MAX_GEN];
    int32_t top[MAX_GEN][TOP];
    float top_lp[MAX_GEN][TOP];
} comp;

typedef struct gen {
    comp c[MAX_COMP];
} gen;

static void on_done(const pllm_completion *c, void *arg)
{
    gen *g = arg;
    intptr_t i = (intptr_t)c->user + c->index;
    CHECK(c->finish != PLLM_FINISH_ERROR && i >= 0 && i < MAX_COMP);
    if (i < 0 || i >= MAX_COMP) return;
    comp *x = &g->c[i];
    x->n_emitted++;
    x->finish = (int32_t)c->finish;
    x->n_tokens = PLLM_MIN(c->n_tokens, MAX_GEN);
    for (int32_t k = 0; k < x->n_tokens; k++) {
        x->tok[k] = c->token_ids[k];
        x->lp[k] = c->logprobs ? c->logprobs[k] : 0.0f;
        for (int32_t j = 0; j < TOP; j++) {
            x->top[k][j] = c->logprobs && j < c->top_n ? c->top_ids[k * c->top_n + j] : -1;
            x->top_lp[k][j] = c->logprobs && j < c->top_n ? c->top_logprobs[k * c->top_n + j] : 0;
        }
    }
}

typedef struct workload {
    int32_t n_prompts;
    int32_t prompt[MAX_PROMPTS][MAX_PROMPT];
    int32_t n_prompt[MAX_PROMPTS];
    int32_t n[MAX_PROMPTS];
} workload;

static int32_t rnd(uint64_t *s, int32_t n)
{
    return (int32_t)(pllm_test_rand(s) % (uint64_t)n);
}

static void make_workload(workload *w, int32_t n_vocab, uint64_t seed)
{
    uint64_t s = seed;
    int32_t base[MAX_PROMPT];
    for (int32_t i = 0; i < MAX_PROMPT; i++) base[i] = 3 + rnd(&s, n_vocab - 3);
    w->n_prompts = MAX_PROMPTS;
    for (int32_t r = 0; r < w->n_prompts; r++) {
        w->n[r] = rnd(&s, 4) == 0 ? 2 : 1;
        if (r > 0 && rnd(&s, 5) == 0) { /* an identical prompt */
            int32_t o = rnd(&s, r);
            memcpy(w->prompt[r], w->prompt[o], sizeof w->prompt[r]);
            w->n_prompt[r] = w->n_prompt[o];
            continue;
        }
        int32_t len = 40 + rnd(&s, 111), shared = rnd(&s, 3) ? rnd(&s, len) : 0;
        for (int32_t i = 0; i < len; i++)
            w->prompt[r][i] = i < shared ? base[i] : 3 + rnd(&s, n_vocab - 3);
        w->n_prompt[r] = len;
    }
}

typedef struct config {
    const char *name;
    int32_t block_size, budget, max_seqs;
    bool no_cache, quant, spec;
    pllm_evict_policy eviction;
    bool tight_sw;   /* the sliding pool at the engine's preferred floor (n_blocks_sw) */
    bool tiny_sw;    /* ... at its minimum: a window and one block (chunks get shortened) */
    const char *dir; /* the persistent prefix cache (the engine then runs one pool) */
} config;

static void run(const pllm_model *m, const workload *w, const config *cf, bool hybrid, gen *g,
                pllm_engine_stats *st)
{
    memset(g, 0, sizeof *g);
    pllm_backend be = {0};
    CHECK_OK(make_backend(&be, m, cf->quant));
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.block_size = cf->block_size;
    ep.max_batched_tokens = cf->budget;
    ep.max_seqs = cf->max_seqs;
    ep.max_model_len = 400;
    ep.no_prefix_cache = cf->no_cache;
    ep.eviction = cf->eviction;
    ep.no_kv_hybrid = !hybrid;
    ep.seed = 5;
    if (cf->spec) ep.speculate = PLLM_SPEC_PROMPT_LOOKUP;
    ep.prefix_cache_dir = cf->dir;
    /* 2 * 400 tokens of global blocks in both layouts (the hybrid one's budget is then larger:
     * the comparison is of outputs, not capacity) */
    ep.n_blocks = 2 * 400 / cf->block_size;
    if (hybrid && cf->tight_sw)
        ep.n_blocks_sw =
            (m->cfg.sliding_window + cf->budget + cf->block_size - 1) / cf->block_size + 1;
    else if (hybrid && cf->tiny_sw)
        ep.n_blocks_sw = (m->cfg.sliding_window + cf->block_size - 1) / cf->block_size + 2;
    else if (hybrid)
        ep.n_blocks_sw = ep.n_blocks;
    pllm_engine *e = NULL;
    CHECK_OK(pllm_engine_create(&e, m, &be, NULL, &ep));
    if (!e) {
        pllm_backend_free(&be);
        return;
    }
    for (int32_t r = 0; r < w->n_prompts; r++) {
        pllm_request_params rp;
        pllm_request_params_defaults(&rp);
        rp.max_tokens = MAX_GEN;
        rp.ignore_eos = true;
        rp.n = w->n[r];
        rp.sampling.logprobs = TOP;
        uint64_t id;
        CHECK_OK(
            pllm_engine_add(e, w->prompt[r], w->n_prompt[r], &rp, (void *)(intptr_t)(2 * r), &id));
    }
    while (pllm_engine_has_work(e)) {
        pllm_status s = pllm_engine_step(e, on_done, g);
        CHECK_OK(s);
        if (s != PLLM_OK) break;
    }
    pllm_engine_get_stats(e, st);
    pllm_engine_free(e);
    pllm_backend_free(&be);
}

static int32_t n_diff;

static void compare(const workload *w, const config *cf, const gen *a, const gen *b)
{
    for (int32_t r = 0; r < w->n_prompts; r++)
        for (int32_t k = 0; k < w->n[r]; k++) {
            const comp *x = &a->c[2 * r + k], *y = &b->c[2 * r + k];
            CHECK(x->n_emitted == 1 && y->n_emitted == 1);
            bool same = x->n_tokens == y->n_tokens && x->finish == y->finish &&
                        !memcmp(x->tok, y->tok, sizeof x->tok) &&
                        !memcmp(x->top, y->top, sizeof x->top);
            for (int32_t t = 0; t < MAX_GEN; t++) {
                same &= fabsf(x->lp[t] - y->lp[t]) <= LP_TOL;
                for (int32_t j = 0; j < TOP; j++)
                    same &= fabsf(x->top_lp[t][j] - y->top_lp[t][j]) <= LP_TOL;
            }
            if (!same && n_diff++ < 5) {
                int32_t at = 0;
                while (at < MAX_GEN && x->tok[at] == y->tok[at] && x->lp[at] == y->lp[at]) at++;
                fprintf(stderr,
                        "engine_hybrid_kv %s: prompt %d completion %d differs at token %d: %d "
                        "(%.9g) kept everything, %d (%.9g) hybrid\n",
                        cf->name, r, k, at, at < MAX_GEN ? x->tok[at] : -1,
                        at < MAX_GEN ? (double)x->lp[at] : 0.0, at < MAX_GEN ? y->tok[at] : -1,
                        at < MAX_GEN ? (double)y->lp[at] : 0.0);
            }
            CHECK(same);
        }
}

/* One long sequence alone: the sliding pool stays bounded, the global one keeps it all. */
static void long_sequence(const pllm_model *m, int32_t bs)
{
    pllm_backend be = {0};
    CHECK_OK(make_backend(&be, m, false));
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.block_size = bs;
    ep.max_batched_tokens = 16;
    ep.max_seqs = 1;
    ep.max_model_len = 400;
    ep.n_blocks = 400 / bs;
    ep.n_blocks_sw = 400 / bs;
    pllm_engine *e = NULL;
    CHECK_OK(pllm_engine_create(&e, m, &be, NULL, &ep));
    if (!e) {
        pllm_backend_free(&be);
        return;
    }
    int32_t prompt[200];
    uint64_t s = 99;
    for (int32_t i = 0; i < 200; i++) prompt[i] = 3 + rnd(&s, m->cfg.n_vocab - 3);
    pllm_request_params rp;
    pllm_request_params_defaults(&rp);
    rp.max_tokens = 100;
    rp.ignore_eos = true;
    uint64_t id;
    gen *g = pllm_calloc(1, sizeof *g);
    CHECK_OK(pllm_engine_add(e, prompt, 200, &rp, NULL, &id));
    while (pllm_engine_has_work(e)) {
        pllm_status s2 = pllm_engine_step(e, on_done, g);
        CHECK_OK(s2);
        if (s2 != PLLM_OK) break;
    }
    pllm_engine_stats st;
    pllm_engine_get_stats(e, &st);
    const int32_t W = m->cfg.sliding_window, bound = (W - 1 + 16 + bs - 1) / bs + 1;
    fprintf(stderr,
            "engine_hybrid_kv: one sequence of 300 tokens, block size %d, window %d: peak %d "
            "sliding blocks (bound %d), %d global blocks\n",
            bs, W, st.peak_blocks_used_sw, bound, st.peak_blocks_used);
    CHECK(st.n_blocks_sw == 400 / bs);
    CHECK(st.peak_blocks_used_sw <= bound);
    CHECK(st.peak_blocks_used >= 299 / bs);
    free(g);
    pllm_engine_free(e);
    pllm_backend_free(&be);
}

/* n = 4 completions of one prompt, prefix caching off: the three forks share the leader's
 * full prompt blocks in both pools (pllm_kv_share_hits), so the prompt is computed once plus
 * each fork's last partial block; the same count as the keep-everything layout, same output. */
static void forks_no_cache(const pllm_model *m, int32_t bs)
{
    int32_t n_computed[2] = {0, 0};
    gen *g[2] = {pllm_calloc(1, sizeof(gen)), pllm_calloc(1, sizeof(gen))};
    const int32_t n_prompt = 150, n = 4;
    for (int hybrid = 0; hybrid < 2; hybrid++) {
        pllm_backend be = {0};
        CHECK_OK(make_backend(&be, m, false));
        pllm_engine_params ep;
        pllm_engine_params_defaults(&ep);
        ep.block_size = bs;
        ep.max_batched_tokens = 64; /* chunked: the leader's window moves while it prefills */
        ep.max_seqs = 8;
        ep.max_model_len = 400;
        ep.no_prefix_cache = true;
        ep.no_kv_hybrid = !hybrid;
        ep.n_blocks = 4 * 400 / bs;
        if (hybrid) ep.n_blocks_sw = ep.n_blocks;
        pllm_engine *e = NULL;
        CHECK_OK(pllm_engine_create(&e, m, &be, NULL, &ep));
        if (!e) {
            pllm_backend_free(&be);
            continue;
        }
        int32_t prompt[150];
        uint64_t s = 7;
        for (int32_t i = 0; i < n_prompt; i++) prompt[i] = 3 + rnd(&s, m->cfg.n_vocab - 3);
        pllm_request_params rp;
        pllm_request_params_defaults(&rp);
        rp.max_tokens = MAX_GEN;
        rp.ignore_eos = true;
        rp.n = n;
        rp.sampling.logprobs = TOP;
        rp.sampling.temperature = 0.8f; /* the forks' outputs differ */
        uint64_t id;
        CHECK_OK(pllm_engine_add(e, prompt, n_prompt, &rp, NULL, &id));
        while (pllm_engine_has_work(e)) {
            pllm_status s2 = pllm_engine_step(e, on_done, g[hybrid]);
            CHECK_OK(s2);
            if (s2 != PLLM_OK) break;
        }
        pllm_engine_stats st;
        pllm_engine_get_stats(e, &st);
        CHECK(hybrid ? st.n_blocks_sw > 0 : st.n_blocks_sw == 0);
        n_computed[hybrid] = (int32_t)st.prompt_tokens_computed;
        pllm_engine_free(e);
        pllm_backend_free(&be);
    }
    /* each fork takes min((n_prompt - 1) / bs, n_prompt / bs) blocks and computes the rest */
    const int32_t shared = PLLM_MIN((n_prompt - 1) / bs, n_prompt / bs) * bs;
    const int32_t want = n_prompt + (n - 1) * (n_prompt - shared);
    fprintf(stderr,
            "engine_hybrid_kv: n = %d forks of a %d-token prompt, no prefix cache, block size "
            "%d: %d prompt tokens computed kept everything, %d hybrid (expected %d)\n",
            n, n_prompt, bs, n_computed[0], n_computed[1], want);
    CHECK(n_computed[0] == want && n_computed[1] == want);
    for (int32_t k = 0; k < n; k++)
        CHECK(g[0]->c[k].n_emitted == 1 && !memcmp(&g[0]->c[k], &g[1]->c[k], sizeof(comp)));
    free(g[0]);
    free(g[1]);
}

#ifndef PLLM_TEST_CUDA
/* The budget split (engine.c choose_pools) on the in-memory model (F32 K/V: 128 bytes per token
 * and layer; 16-token blocks: 12288 bytes for all 6 layers, g = 2048 global, s = 10240 sliding),
 * max_model_len 400 (ng = 25, ns = min(25, ceil(12 / 16) + 1) = 2), max_batched_tokens 64
 * (preferred sliding floor ceil((12 + 64) / 16) + 1 = 6, minimum 3). */
static void split_rule(const pllm_model *m)
{
    static const struct {
        int32_t n_full;    /* the budget in full blocks */
        int32_t n_g, n_sw; /* expected; n_sw 0: one pool */
    } cases[] = {
        /* B = 1228800: n_g = B * 25 / (25 * 2048 + 2 * 10240) = 428.6, n_sw = (B - 428 * 2048) /
         * 10240 = 34.4 */
        {100, 428, 34},
        /* B = 122880: 42.9 and 3.6 < 6: the floor, n_g = (B - 6 * 10240) / 2048 = 30 */
        {10, 30, 6},
        /* B = 36864: the preferred floor leaves nothing, the minimum (3) leaves 3 = one pool's */
        {3, 3, 0},
    };
    for (size_t i = 0; i < PLLM_ARRAY_LEN(cases); i++) {
        pllm_backend be = {0};
        CHECK_OK(make_backend(&be, m, false));
        pllm_engine_params ep;
        pllm_engine_params_defaults(&ep);
        ep.block_size = 16;
        ep.max_batched_tokens = 64;
        ep.max_model_len = 400;
        ep.kv_bytes = (size_t)cases[i].n_full * 12288;
        pllm_engine *e = NULL;
        CHECK_OK(pllm_engine_create(&e, m, &be, NULL, &ep));
        pllm_engine_stats st;
        if (e) pllm_engine_get_stats(e, &st);
        fprintf(stderr, "engine_hybrid_kv: budget of %d full blocks: %d global + %d sliding (%s)\n",
                cases[i].n_full, e ? st.n_blocks : -1, e ? st.n_blocks_sw : -1,
                e && st.kv_hybrid_off ? st.kv_hybrid_off : "hybrid");
        CHECK(e && st.n_blocks == cases[i].n_g && st.n_blocks_sw == cases[i].n_sw);
        CHECK(e && (st.kv_hybrid_off != NULL) == (cases[i].n_sw == 0));
        pllm_engine_free(e);
        pllm_backend_free(&be);
    }
}

/* The split sized from the workload (engine.h workload_lens), budget 100 full blocks as in
 * split_rule's first case (ng = ceil(L / 16), ns = min(ng, 2)):
 *   - 40 sequences of 30 tokens (ng = ns = 2): G : S = 1 : 1 gives no more global blocks than
 *     one pool, so one pool of 100 blocks (the max_model_len split gave 428 + 34: a sequence
 *     holds 2 sliding blocks, so 17 ran at once);
 *   - 5 of 400 tokens (25, 2) and 5 of 30 (2, 2): G = 135, S = 20, n_g = B * 135 / (135 * 2048
 *     + 20 * 10240) = 344.7, n_sw = (B - 344 * 2048) / 10240 = 51.2;
 *   - lengths past max_model_len count as max_model_len: 4 of 10000 = the 428 + 34 of
 *     split_rule.
 * Then the concurrency it buys: the 40 short requests (20-token prompts, max_tokens 10) run
 * with the workload given and without; with it they need fewer steps (more run at once), and
 * the outputs are the same. */
static void split_workload(const pllm_model *m)
{
    static int32_t shorts[40], mixed[10], longs[4];
    for (int32_t i = 0; i < 40; i++) shorts[i] = 30;
    for (int32_t i = 0; i < 10; i++) mixed[i] = i < 5 ? 400 : 30;
    for (int32_t i = 0; i < 4; i++) longs[i] = 10000;
    static const struct {
        const int32_t *lens;
        int32_t n;
        int32_t n_g, n_sw; /* expected; n_sw 0: one pool */
    } cases[] = {{shorts, 40, 100, 0}, {mixed, 10, 344, 51}, {longs, 4, 428, 34}};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(cases); i++) {
        pllm_backend be = {0};
        CHECK_OK(make_backend(&be, m, false));
        pllm_engine_params ep;
        pllm_engine_params_defaults(&ep);
        ep.block_size = 16;
        ep.max_batched_tokens = 64;
        ep.max_model_len = 400;
        ep.kv_bytes = (size_t)100 * 12288;
        ep.workload_lens = cases[i].lens;
        ep.n_workload = cases[i].n;
        pllm_engine *e = NULL;
        CHECK_OK(pllm_engine_create(&e, m, &be, NULL, &ep));
        pllm_engine_stats st;
        if (e) pllm_engine_get_stats(e, &st);
        fprintf(stderr,
                "engine_hybrid_kv: workload case %zu (%d sequences): %d global + %d sliding (%s; "
                "split for %lld sequences of mean %.1f tokens)\n",
                i, cases[i].n, e ? st.n_blocks : -1, e ? st.n_blocks_sw : -1,
                e && st.kv_hybrid_off ? st.kv_hybrid_off : "hybrid",
                e ? (long long)st.kv_split_seqs : -1, e ? st.kv_split_mean_len : -1.0);
        CHECK(e && st.n_blocks == cases[i].n_g && st.n_blocks_sw == cases[i].n_sw);
        CHECK(e && (st.kv_hybrid_off != NULL) == (cases[i].n_sw == 0));
        CHECK(e && (st.kv_hybrid_off != NULL || st.kv_split_seqs == cases[i].n));
        pllm_engine_free(e);
        pllm_backend_free(&be);
    }
    /* the concurrency: 40 short requests, a budget of 100 full blocks */
    int64_t steps[2] = {0, 0};
    gen *g[2] = {pllm_calloc(1, sizeof(gen)), pllm_calloc(1, sizeof(gen))};
    for (int given = 0; given < 2; given++) {
        pllm_backend be = {0};
        CHECK_OK(make_backend(&be, m, false));
        pllm_engine_params ep;
        pllm_engine_params_defaults(&ep);
        ep.block_size = 16;
        ep.max_batched_tokens = 64;
        ep.max_seqs = 64;
        ep.max_model_len = 400;
        ep.kv_bytes = (size_t)100 * 12288;
        ep.workload_lens = given ? shorts : NULL;
        ep.n_workload = given ? 40 : 0;
        pllm_engine *e = NULL;
        CHECK_OK(pllm_engine_create(&e, m, &be, NULL, &ep));
        if (!e) {
            pllm_backend_free(&be);
            continue;
        }
        uint64_t s = 3;
        for (int32_t r = 0; r < 40 && r < MAX_COMP; r++) {
            int32_t prompt[20];
            for (int32_t i = 0; i < 20; i++) prompt[i] = 3 + rnd(&s, m->cfg.n_vocab - 3);
            pllm_request_params rp;
            pllm_request_params_defaults(&rp);
            rp.max_tokens = 10;
            rp.ignore_eos = true;
            uint64_t id;
            CHECK_OK(pllm_engine_add(e, prompt, 20, &rp, (void *)(intptr_t)(r % MAX_COMP), &id));
        }
        while (pllm_engine_has_work(e)) {
            pllm_status s2 = pllm_engine_step(e, on_done, g[given]);
            CHECK_OK(s2);
            if (s2 != PLLM_OK) break;
        }
        pllm_engine_stats st;
        pllm_engine_get_stats(e, &st);
        steps[given] = st.steps;
        pllm_engine_free(e);
        pllm_backend_free(&be);
    }
    fprintf(stderr,
            "engine_hybrid_kv: 40 requests of 20 + 10 tokens, 100 full blocks: %lld steps split "
            "for max_model_len, %lld split for the workload\n",
            (long long)steps[0], (long long)steps[1]);
    CHECK(steps[1] < steps[0]);
    free(g[0]);
    free(g[1]);
}

#endif

int main(int argc, char **argv)
{
    pllm_test_model tm = {0};
    pllm_model *loaded = NULL;
    const pllm_model *m;
#ifdef PLLM_TEST_CUDA
    if (pllm_cuda_device_count(NULL, 0) == 0)
        pllm_test_skip("engine_hybrid_kv_cuda: no CUDA device");
#endif
    const bool quick = argc > 1 && !strcmp(argv[1], "--quick");
    if (quick) argc--, argv++;
    if (argc > 1) {
        CHECK_OK(pllm_model_load(&loaded, argv[1]));
        if (!loaded) return pllm_test_finish("engine_hybrid_kv");
        m = loaded;
    } else {
        pllm_test_model_shape sh = {.n_vocab = 200,
                                    .n_embd = 32,
                                    .n_layer = 6,
                                    .n_head = 4,
                                    .n_head_kv = 2,
                                    .head_dim = 8,
                                    .n_ff = 48,
                                    .n_ctx_train = 512,
                                    .name = "hybrid-kv-test"};
        uint64_t rng = 17;
        pllm_test_model_build(&tm, &sh, &rng);
        tm.m.cfg.sliding_window = 12;
        tm.m.cfg.rope_theta_local = 10000.0f;
        for (int32_t l = 0; l < 6; l++) tm.layers[l].window = (l + 1) % 6 ? 12 : 0;
        m = &tm.m;
    }
    CHECK(m->cfg.sliding_window > 0);
    const config cfgs[] = {
        {.name = "bs16", .block_size = 16, .budget = 2048, .max_seqs = 8},
        {.name = "bs4-chunked",
         .block_size = 4,
         .budget = 24,
         .max_seqs = 4,
         .eviction = PLLM_EVICT_FUTURE},
        {.name = "bs8-tight", .block_size = 8, .budget = 40, .max_seqs = 6, .tight_sw = true},
        {.name = "bs4-tiny", .block_size = 4, .budget = 64, .max_seqs = 6, .tiny_sw = true},
        {.name = "bs8-nocache", .block_size = 8, .budget = 64, .max_seqs = 6, .no_cache = true},
        {.name = "bs4-spec", .block_size = 4, .budget = 64, .max_seqs = 4, .spec = true},
        {.name = "bs8-quant", .block_size = 8, .budget = 32, .max_seqs = 6, .quant = true},
    };
    workload *w = pllm_calloc(1, sizeof *w);
    gen *a = pllm_calloc(1, sizeof *a), *b = pllm_calloc(1, sizeof *b);
    make_workload(w, m->cfg.n_vocab, 1234);
    if (quick) w->n_prompts = 5;
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        const config *cf = &cfgs[c];
        if (quick && !cf->tight_sw && !cf->tiny_sw && !cf->spec && !cf->quant) continue;
        pllm_engine_stats sa, sb;
        run(m, w, cf, false, a, &sa);
        run(m, w, cf, true, b, &sb);
        compare(w, cf, a, b);
        fprintf(stderr,
                "engine_hybrid_kv %s: kept everything: %d blocks, %lld cached prompt tokens, %lld "
                "preemptions; hybrid: %d + %d sliding blocks (peak %d), %lld cached, %lld "
                "preemptions\n",
                cf->name, sa.n_blocks, (long long)sa.prompt_tokens_cached,
                (long long)sa.preemptions, sb.n_blocks, sb.n_blocks_sw, sb.peak_blocks_used_sw,
                (long long)sb.prompt_tokens_cached, (long long)sb.preemptions);
        CHECK(sa.n_blocks_sw == 0 && sb.n_blocks_sw > 0);
        if (!cf->no_cache && !(quick && (cf->tight_sw || cf->tiny_sw)))
            CHECK(sb.prompt_tokens_cached > 0);
        if (cf->tight_sw || cf->tiny_sw) CHECK(sb.preemptions > 0);
        /* without prefix caching, an n = 2 fork takes its leader's sliding blocks as it takes
         * its global ones: the hybrid run computes exactly the prompt tokens the other does */
        if (cf->no_cache) {
            fprintf(
                stderr,
                "engine_hybrid_kv %s: prompt tokens computed %lld kept everything, %lld hybrid\n",
                cf->name, (long long)sa.prompt_tokens_computed,
                (long long)sb.prompt_tokens_computed);
            CHECK(sa.preemptions == 0 && sb.preemptions == 0);
            CHECK(sb.prompt_tokens_computed == sa.prompt_tokens_computed);
        }
        if (cf->spec) {
            fprintf(stderr, "engine_hybrid_kv %s: %lld drafts, %lld accepted\n", cf->name,
                    (long long)sb.spec_drafted, (long long)sb.spec_accepted);
            CHECK(sb.spec_drafted > 0); /* rejected drafts: engine_sched_random (oracle) */
        }
    }
#ifndef PLLM_TEST_CUDA
    /* the persistent prefix cache stores every layer of a block: the engine falls back to one
     * pool (and says so), saves in the first run and loads in the second, same outputs */
    if (!quick) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/engine_hybrid_kv_%ld", pllm_test_env("PLLM_TEST_TMP", "/tmp"),
                 (long)getpid());
        const config st = {
            .name = "store", .block_size = 8, .budget = 64, .max_seqs = 6, .dir = dir};
        const config plain = {.name = "store-ref", .block_size = 8, .budget = 64, .max_seqs = 6};
        pllm_engine_stats sa, sb;
        run(m, w, &plain, true, a, &sa);
        for (int pass = 0; pass < 2; pass++) {
            run(m, w, &st, true, b, &sb);
            compare(w, &st, a, b);
            fprintf(stderr, "engine_hybrid_kv store pass %d: %d blocks, sliding pool: %s\n", pass,
                    sb.n_blocks, sb.kv_hybrid_off ? sb.kv_hybrid_off : "(none)");
            CHECK(sa.n_blocks_sw > 0 && sb.n_blocks_sw == 0 && sb.kv_hybrid_off);
        }
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0);
    }
#endif
#ifndef PLLM_TEST_CUDA
    if (!loaded) split_rule(m);
    if (!loaded) split_workload(m);
#endif
    forks_no_cache(m, 8);
    if (!quick) forks_no_cache(m, 4);
    if (!quick) long_sequence(m, 4);
    long_sequence(m, 16);
    free(w);
    free(a);
    free(b);
    pllm_model_free(loaded);
    if (!loaded) pllm_test_model_free(&tm);
    return pllm_test_finish("engine_hybrid_kv");
}

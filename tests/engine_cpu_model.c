/*
 * engine_cpu_model: the engine on the real CPU backend and the default model
 * ($PLLM_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf). Greedy output must be identical with
 * prefix caching on and off, with max_seqs 1 and 64, with 1 and 2 CPU threads, with LRU and
 * FUTURE eviction, for any token budget (chunked prefill) and KV size (preemption), and for
 * n > 1 completions sharing a prompt; sampled output with a seed (the n = 2 request) must not
 * depend on any of these either. The max_seqs 1, no-cache configuration runs every prompt
 * alone. The prefix plan's counters are checked on the first configuration: with the cache
 * large enough, every distinct prompt block is computed exactly once (the identical prompt 2
 * and the prefix-sharing prompt 1 wait for prompt 0's blocks), and the achieved hit rate
 * equals the best achievable one reported before the run. The int8 KV cache
 * (PLLM_KV_DTYPE_I8) runs the same kinds of configurations (chunked prefill, block size 4 and 8,
 * preemption, prefix cache off, one sequence, one thread) and must be just as invariant; and 64 MB
 * of it must hold 2 * head_dim / (head_dim + 2) times the blocks of fp16.
 */
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "tests/testutil.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#define N_PROMPTS 6
#define MAX_OUT   12

static const char *k_prompts[N_PROMPTS] = {
    "Printing changed how knowledge spread across Europe. The history of the printing press begins "
    "in "
    "the fifteenth century, when Johannes Gutenberg",
    "Printing changed how knowledge spread across Europe. The history of the printing press begins "
    "in "
    "the fifteenth century, when a goldsmith named",
    "Printing changed how knowledge spread across Europe. The history of the printing press begins "
    "in "
    "the fifteenth century, when Johannes Gutenberg",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Paris is the capital of France. Berlin is the capital of",
    "Q: What is 12 times 7?\nA:",
};

typedef struct outputs {
    int32_t tokens[N_PROMPTS + 2][MAX_OUT];
    int32_t n[N_PROMPTS + 2];
    char text[N_PROMPTS + 2][512];
    int32_t cached_total;
} outputs;

static void on_done(const pllm_completion *c, void *arg)
{
    outputs *o = arg;
    int32_t slot = (int32_t)(intptr_t)c->user + c->index;
    CHECK(slot >= 0 && slot < N_PROMPTS + 2 && c->n_tokens <= MAX_OUT &&
          c->finish != PLLM_FINISH_ERROR);
    if (slot < 0 || slot >= N_PROMPTS + 2) return;
    o->n[slot] = PLLM_MIN(c->n_tokens, MAX_OUT);
    memcpy(o->tokens[slot], c->token_ids, (size_t)o->n[slot] * sizeof(int32_t));
    snprintf(o->text[slot], sizeof o->text[slot], "%.*s", (int)c->text_len, c->text);
    o->cached_total += c->cached_tokens;
}

typedef struct config {
    const char *name;
    bool prefix_cache;
    int32_t budget, max_seqs, n_blocks, block_size;
    int threads;
    pllm_evict_policy eviction;
    pllm_dtype kv; /* the CPU default, F32, unless set */
} config;

static void run(const pllm_model *m, const pllm_tokenizer *tok, pllm_tokens *prompts,
                const config *cf, outputs *o, pllm_engine_stats *st, pllm_engine_plan_stats *ps,
                pllm_engine_plan_stats *ps_before)
{
    pllm_cpu_params cp;
    pllm_cpu_params_defaults(&cp);
    cp.n_threads = cf->threads;
    cp.kv_dtype = cf->kv;
    pllm_backend be = {0};
    CHECK_OK(pllm_cpu_backend_create(&be, m, &cp));
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.no_prefix_cache = !cf->prefix_cache;
    ep.max_batched_tokens = cf->budget;
    ep.max_seqs = cf->max_seqs;
    ep.n_blocks = cf->n_blocks;
    ep.block_size = cf->block_size;
    ep.eviction = cf->eviction;
    ep.max_model_len = 512;
    pllm_engine *e = NULL;
    CHECK_OK(pllm_engine_create(&e, m, &be, tok, &ep));
    if (!e) {
        pllm_backend_free(&be);
        return;
    }
    pllm_request_params p;
    pllm_request_params_defaults(&p);
    p.max_tokens = MAX_OUT;
    for (int32_t i = 0; i < N_PROMPTS; i++)
        CHECK_OK(pllm_engine_add(e, prompts[i].ids, (int32_t)prompts[i].n, &p, (void *)(intptr_t)i,
                                 NULL));
    /* a seeded, sampled request with n = 2 (slots N_PROMPTS, N_PROMPTS + 1) */
    {
        pllm_request_params q = p;
        q.n = 2;
        q.has_seed = true;
        q.sampling.seed = 42;
        q.sampling.temperature = 0.8f;
        q.sampling.top_p = 0.95f;
        CHECK_OK(pllm_engine_add(e, prompts[0].ids, (int32_t)prompts[0].n, &q,
                                 (void *)(intptr_t)N_PROMPTS, NULL));
    }
    pllm_engine_get_plan_stats(e, ps_before);
    while (pllm_engine_has_work(e)) {
        pllm_status s = pllm_engine_step(e, on_done, o);
        CHECK_OK(s);
        if (s != PLLM_OK) break;
    }
    pllm_engine_get_stats(e, st);
    pllm_engine_get_plan_stats(e, ps);
    pllm_engine_free(e);
    pllm_backend_free(&be);
}

/* The same --kv-cache-mb holds 2 * head_dim / (head_dim + 2) times the blocks with an int8 cache
 * as with fp16 (engine/backend.h: 1.94x at head_dim 64), so as many more sequences. */
static void check_capacity(const pllm_model *m, const pllm_tokenizer *tok)
{
    int32_t blocks[2] = {0};
    const pllm_dtype dts[2] = {PLLM_DTYPE_F16, PLLM_KV_DTYPE_I8};
    for (int i = 0; i < 2; i++) {
        pllm_cpu_params cp;
        pllm_cpu_params_defaults(&cp);
        cp.n_threads = 1;
        cp.kv_dtype = dts[i];
        pllm_backend be = {0};
        CHECK_OK(pllm_cpu_backend_create(&be, m, &cp));
        pllm_engine_params ep;
        pllm_engine_params_defaults(&ep);
        ep.kv_bytes = (size_t)64 << 20;
        pllm_engine *e = NULL;
        CHECK_OK(pllm_engine_create(&e, m, &be, tok, &ep));
        if (e) {
            pllm_engine_stats st;
            pllm_engine_get_stats(e, &st);
            blocks[i] = st.n_blocks;
        }
        pllm_engine_free(e);
        pllm_backend_free(&be);
    }
    const double want = 2.0 * m->cfg.head_dim / (m->cfg.head_dim + 2);
    fprintf(stderr, "  64 MB of KV cache: %d fp16 blocks, %d int8 blocks (%.3fx; %.3fx expected)\n",
            blocks[0], blocks[1], (double)blocks[1] / PLLM_MAX(blocks[0], 1), want);
    CHECK(blocks[0] > 0 && blocks[1] >= (int32_t)(want * blocks[0]) - 1 &&
          blocks[1] >= 1.9 * blocks[0]);
}

int main(void)
{
    const char *home = pllm_test_env("PLLM_HOME", NULL);
    char path[4096];
    if (home)
        snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", home);
    else
        snprintf(path, sizeof path, "%s/.cache/pllm/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 pllm_test_env("HOME", "."));
    pllm_model *m = NULL;
    if (pllm_model_load(&m, path) != PLLM_OK) {
        fprintf(stderr,
                "engine_cpu_model: FAIL: cannot load the default model (%s); run scripts/setup.sh "
                "or set PLLM_HOME\n",
                pllm_errmsg());
        return 1;
    }
    pllm_tokenizer *tok = NULL;
    CHECK_OK(pllm_tokenizer_from_gguf(&tok, m->gguf));
    if (!tok) return pllm_test_finish("engine_cpu_model");
    pllm_tokens prompts[N_PROMPTS] = {{0}};
    pllm_encode_opts eo = {.add_special = true, .parse_special = true};
    for (int32_t i = 0; i < N_PROMPTS; i++)
        CHECK_OK(pllm_tokenizer_encode(tok, k_prompts[i], strlen(k_prompts[i]), &eo, &prompts[i]));

    static const config configs[] = {
        {"cache, big budget, 64 seqs, 2 threads", true, 2048, 64, 256, 16, 2, PLLM_EVICT_LRU,
         PLLM_DTYPE_F32},
        {"no cache, budget 13 (chunked prefill), 3 seqs", false, 13, 3, 256, 16, 2, PLLM_EVICT_LRU,
         PLLM_DTYPE_F32},
        {"cache, budget 11, block size 4, 4 seqs", true, 11, 4, 512, 4, 2, PLLM_EVICT_LRU,
         PLLM_DTYPE_F32},
        {"cache, 14 blocks of 8 (preemption)", true, 64, 8, 14, 8, 2, PLLM_EVICT_LRU,
         PLLM_DTYPE_F32},
        {"no cache, 14 blocks of 8 (preemption)", false, 64, 8, 14, 8, 2, PLLM_EVICT_LRU,
         PLLM_DTYPE_F32},
        {"no cache, 1 seq (each alone), 1 thread", false, 2048, 1, 256, 16, 1, PLLM_EVICT_LRU,
         PLLM_DTYPE_F32},
        {"cache, 1 seq, 2 threads", true, 2048, 1, 256, 16, 2, PLLM_EVICT_LRU, PLLM_DTYPE_F32},
        {"cache, 64 seqs, 1 thread, future eviction", true, 2048, 64, 256, 16, 1, PLLM_EVICT_FUTURE,
         PLLM_DTYPE_F32},
        {"cache, 14 blocks of 8, 1 thread, future", true, 64, 8, 14, 8, 1, PLLM_EVICT_FUTURE,
         PLLM_DTYPE_F32},
        /* the int8 KV cache: the same invariants, against its own first configuration */
        {"int8 KV: cache, big budget, 64 seqs", true, 2048, 64, 256, 16, 2, PLLM_EVICT_LRU,
         PLLM_KV_DTYPE_I8},
        {"int8 KV: no cache, budget 13, 3 seqs", false, 13, 3, 256, 16, 2, PLLM_EVICT_LRU,
         PLLM_KV_DTYPE_I8},
        {"int8 KV: cache, budget 11, block size 4", true, 11, 4, 512, 4, 2, PLLM_EVICT_LRU,
         PLLM_KV_DTYPE_I8},
        {"int8 KV: cache, 14 blocks of 8 (preemption)", true, 64, 8, 14, 8, 2, PLLM_EVICT_LRU,
         PLLM_KV_DTYPE_I8},
        {"int8 KV: no cache, 1 seq, 1 thread", false, 2048, 1, 256, 16, 1, PLLM_EVICT_LRU,
         PLLM_KV_DTYPE_I8},
    };
    int32_t n_cfg = (int32_t)PLLM_ARRAY_LEN(configs);
    outputs *out = pllm_calloc((size_t)n_cfg, sizeof *out);
    double t0 = pllm_now();
    int32_t first_i8 = n_cfg;
    for (int32_t c = 0; c < n_cfg; c++)
        if (configs[c].kv == PLLM_KV_DTYPE_I8 && first_i8 == n_cfg) first_i8 = c;
    for (int32_t c = 0; c < n_cfg; c++) {
        const int32_t r = c >= first_i8 ? first_i8 : 0; /* the configuration it must equal */
        pllm_engine_stats st;
        pllm_engine_plan_stats ps, before;
        run(m, tok, prompts, &configs[c], &out[c], &st, &ps, &before);
        fprintf(stderr,
                "  %-46s %3lld steps, %2lld preemptions, %4lld prompt tokens computed, %3lld "
                "cached (best %lld), blocks computed %lld, again %lld\n",
                configs[c].name, (long long)st.steps, (long long)st.preemptions,
                (long long)st.prompt_tokens_computed, (long long)st.prompt_tokens_cached,
                (long long)before.best_cached_tokens, (long long)ps.blocks_computed,
                (long long)ps.blocks_recomputed);
        if (configs[c].n_blocks == 14) CHECK(st.preemptions > 0);
        if (c == 0 || c == first_i8) {
            /* prompts 0 and 2 are identical, 1 shares a prefix: each block computed once, and
             * the best achievable hit reached */
            CHECK(st.prompt_tokens_cached > 0 && st.preemptions == 0);
            CHECK(ps.blocks_recomputed == 0 && ps.blocks_computed == ps.distinct_blocks);
            CHECK(ps.finished_cached_tokens == before.best_cached_tokens && ps.exact);
        }
        if (st.preemptions == 0) CHECK(ps.finished_cached_tokens <= before.best_cached_tokens);
        for (int32_t i = 0; i < N_PROMPTS + 2; i++) {
            CHECK(out[c].n[i] > 0);
            bool same = out[c].n[i] == out[r].n[i] &&
                        !memcmp(out[c].tokens[i], out[r].tokens[i], (size_t)out[r].n[i] * 4) &&
                        !strcmp(out[c].text[i], out[r].text[i]);
            if (!same) {
                fprintf(stderr, "  config '%s', output %d differs from config '%s'\n",
                        configs[c].name, i, configs[r].name);
                pllm_test_failures++;
            }
        }
    }
    CHECK(!memcmp(out[0].tokens[0], out[0].tokens[2],
                  sizeof out[0].tokens[0])); /* same prompt, same greedy output */
    CHECK(memcmp(out[0].tokens[N_PROMPTS], out[0].tokens[N_PROMPTS + 1], MAX_OUT * 4) !=
          0); /* two seed streams */
    for (int32_t i = 0; i < N_PROMPTS; i++)
        fprintf(stderr, "  [%d] %s|%s\n", i, k_prompts[i], out[0].text[i]);
    for (int32_t i = 0; i < N_PROMPTS; i++)
        fprintf(stderr, "  [%d] int8 KV: %s\n", i, out[first_i8].text[i]);
    check_capacity(m, tok);
    fprintf(stderr, "  %d configurations in %.1f s\n", n_cfg, pllm_now() - t0);
    for (int32_t i = 0; i < N_PROMPTS; i++) pllm_tokens_free(&prompts[i]);
    free(out);
    pllm_tokenizer_free(tok);
    pllm_model_free(m);
    return pllm_test_finish("engine_cpu_model");
}

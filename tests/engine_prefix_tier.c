/*
 * engine_prefix_tier: the persistent prefix cache inside the engine (engine/prefix_tier.h,
 * kv_manager's tier hook) on the real CPU backend and the default model. The same requests run
 * without a directory, then with one cold and warm, under eviction and preemption pressure (14
 * blocks of 8, FUTURE and LRU eviction, a small token budget) and with a roomy cache: greedy and
 * seeded outputs are identical in every run; after every step the block pool's invariants hold
 * (tail-first eviction order included) and so do the prefix planner's; a warm run loads blocks
 * and computes fewer prompt tokens; the int8 KV cache and another block size use their own
 * namespaces (a first run of each loads nothing).
 */
#include "cpu/cpu_backend.h"
#include "engine/engine_internal.h"
#include "tests/testutil.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define N_PROMPTS 6
#define MAX_OUT   8

static const char *k_prompts[N_PROMPTS] = {
    "Printing changed how knowledge spread across Europe. The history of the printing press begins "
    "in the fifteenth century, when Johannes Gutenberg",
    "Printing changed how knowledge spread across Europe. The history of the printing press begins "
    "in the fifteenth century, when a goldsmith named",
    "Printing changed how knowledge spread across Europe. The history of the printing press begins "
    "in the fifteenth century, when Johannes Gutenberg",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Paris is the capital of France. Berlin is the capital of",
    "Printing changed how knowledge spread across Europe. The history of the printing press begins "
    "in the fifteenth century. Q: What is 12 times 7?\nA:",
};

typedef struct outputs {
    int32_t tokens[N_PROMPTS + 2][MAX_OUT];
    int32_t n[N_PROMPTS + 2];
} outputs;

static void on_done(const pllm_completion *c, void *arg)
{
    outputs *o = arg;
    int32_t slot = (int32_t)(intptr_t)c->user + c->index;
    CHECK(slot >= 0 && slot < N_PROMPTS + 2 && c->finish != PLLM_FINISH_ERROR);
    if (slot < 0 || slot >= N_PROMPTS + 2) return;
    o->n[slot] = PLLM_MIN(c->n_tokens, MAX_OUT);
    memcpy(o->tokens[slot], c->token_ids, (size_t)o->n[slot] * sizeof(int32_t));
}

typedef struct config {
    const char *name;
    bool dir;
    int32_t budget, n_blocks, block_size;
    pllm_evict_policy eviction;
    pllm_dtype kv;
} config;

static char g_dir[512];

static void run(const pllm_model *m, const pllm_tokenizer *tok, pllm_tokens *prompts,
                const config *cf, outputs *o, pllm_engine_stats *st, pllm_prefix_store_stats *ps)
{
    pllm_cpu_params cp;
    pllm_cpu_params_defaults(&cp);
    cp.n_threads = 2;
    cp.kv_dtype = cf->kv;
    pllm_backend be = {0};
    CHECK_OK(pllm_cpu_backend_create(&be, m, &cp));
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.max_batched_tokens = cf->budget;
    ep.max_seqs = 8;
    ep.n_blocks = cf->n_blocks;
    ep.block_size = cf->block_size;
    ep.eviction = cf->eviction;
    ep.max_model_len = 256;
    ep.prefix_cache_dir = cf->dir ? g_dir : NULL;
    ep.prefix_cache_tag = "test";
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
    pllm_request_params q = p; /* seeded, sampled, n = 2 */
    q.n = 2;
    q.has_seed = true;
    q.sampling.seed = 42;
    q.sampling.temperature = 0.8f;
    CHECK_OK(pllm_engine_add(e, prompts[0].ids, (int32_t)prompts[0].n, &q,
                             (void *)(intptr_t)N_PROMPTS, NULL));
    int bad_checks = 0;
    while (pllm_engine_has_work(e)) {
        pllm_status s = pllm_engine_step(e, on_done, o);
        CHECK_OK(s);
        if (s != PLLM_OK) break;
        if (pllm_block_pool_check(pllm_kv_pool(pllm_engine_kv(e)), true) != PLLM_OK ||
            pllm_plan_check(pllm_engine_plan(e)) != PLLM_OK) {
            if (bad_checks++ == 0) fprintf(stderr, "  %s: %s\n", cf->name, pllm_errmsg());
        }
    }
    CHECK(bad_checks == 0);
    pllm_engine_get_stats(e, st);
    pllm_engine_get_prefix_store_stats(e, ps);
    pllm_engine_free(e);
    pllm_backend_free(&be);
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
        fprintf(stderr, "engine_prefix_tier: FAIL: cannot load the default model (%s)\n",
                pllm_errmsg());
        return 1;
    }
    pllm_tokenizer *tok = NULL;
    CHECK_OK(pllm_tokenizer_from_gguf(&tok, m->gguf));
    if (!tok) return pllm_test_finish("engine_prefix_tier");
    pllm_tokens prompts[N_PROMPTS] = {{0}};
    pllm_encode_opts eo = {.add_special = true, .parse_special = true};
    for (int32_t i = 0; i < N_PROMPTS; i++)
        CHECK_OK(pllm_tokenizer_encode(tok, k_prompts[i], strlen(k_prompts[i]), &eo, &prompts[i]));
    const char *tmp = pllm_test_env("PLLM_TEST_TMP", "/tmp");
    mkdir(tmp, 0755);
    snprintf(g_dir, sizeof g_dir, "%s/engine_prefix_tier_%ld", tmp, (long)getpid());

    /* first: whether a run loads nothing (a new namespace) or must load something (warm) */
    enum { ANY, COLD, WARM };
    static const struct {
        config c;
        int expect;
    } runs[] = {
        {{"no directory, 14 blocks of 8", false, 64, 14, 8, PLLM_EVICT_FUTURE, PLLM_DTYPE_F32},
         ANY},
        {{"cold, 14 blocks of 8, future", true, 64, 14, 8, PLLM_EVICT_FUTURE, PLLM_DTYPE_F32},
         COLD},
        {{"warm, 14 blocks of 8, future", true, 64, 14, 8, PLLM_EVICT_FUTURE, PLLM_DTYPE_F32},
         WARM},
        {{"warm, 14 blocks of 8, lru, budget 11", true, 11, 14, 8, PLLM_EVICT_LRU, PLLM_DTYPE_F32},
         WARM},
        {{"warm, 256 blocks of 8", true, 2048, 256, 8, PLLM_EVICT_FUTURE, PLLM_DTYPE_F32}, WARM},
        {{"cold for block size 16", true, 2048, 256, 16, PLLM_EVICT_LRU, PLLM_DTYPE_F32}, COLD},
        {{"int8 KV, no directory", false, 64, 14, 8, PLLM_EVICT_FUTURE, PLLM_KV_DTYPE_I8}, ANY},
        {{"int8 KV, cold", true, 64, 14, 8, PLLM_EVICT_FUTURE, PLLM_KV_DTYPE_I8}, COLD},
        {{"int8 KV, warm", true, 64, 14, 8, PLLM_EVICT_FUTURE, PLLM_KV_DTYPE_I8}, WARM},
    };
    int32_t n = (int32_t)PLLM_ARRAY_LEN(runs);
    outputs *out = pllm_calloc((size_t)n, sizeof *out);
    int64_t cold_computed = 0;
    for (int32_t c = 0; c < n; c++) {
        const int32_t r = runs[c].c.kv == PLLM_KV_DTYPE_I8 ? 6 : 0; /* the run it must equal */
        pllm_engine_stats st;
        pllm_prefix_store_stats ps;
        run(m, tok, prompts, &runs[c].c, &out[c], &st, &ps);
        fprintf(stderr,
                "  %-40s %2lld preemptions, %4lld prompt tokens computed; %3lld blocks loaded, "
                "%3lld saved\n",
                runs[c].c.name, (long long)st.preemptions, (long long)st.prompt_tokens_computed,
                (long long)ps.hits, (long long)ps.writes);
        if (runs[c].c.n_blocks == 14 && runs[c].expect != WARM) CHECK(st.preemptions > 0);
        if (runs[c].expect == COLD) {
            CHECK(ps.hits == 0 && ps.writes > 0);
            cold_computed = st.prompt_tokens_computed;
        }
        if (runs[c].expect == WARM) CHECK(ps.hits > 0 && st.prompt_tokens_computed < cold_computed);
        CHECK(ps.corrupt == 0 && ps.write_errors == 0);
        for (int32_t i = 0; i < N_PROMPTS + 2; i++) {
            bool same = out[c].n[i] > 0 && out[c].n[i] == out[r].n[i] &&
                        !memcmp(out[c].tokens[i], out[r].tokens[i], (size_t)out[r].n[i] * 4);
            if (!same) {
                fprintf(stderr, "  run '%s', output %d differs from run '%s'\n", runs[c].c.name, i,
                        runs[r].c.name);
                pllm_test_failures++;
            }
        }
    }
    free(out);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "  (could not remove %s)\n", g_dir);
    for (int32_t i = 0; i < N_PROMPTS; i++) pllm_tokens_free(&prompts[i]);
    pllm_tokenizer_free(tok);
    pllm_model_free(m);
    return pllm_test_finish("engine_prefix_tier");
}

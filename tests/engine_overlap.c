/*
 * engine_overlap: one step in flight (engine.h pllm_overlap_mode) against synchronous stepping,
 * through the whole engine on an in-memory random model (llama, 2 layers, GQA, V = 320) whose
 * ids are the default model's tokenizer's first 320 (so text, stop strings across token
 * boundaries and detokenization are real).
 *
 * Random workloads (seeded): prompts sharing prefixes (prefix cache hits), n = 1..3, greedy and
 * sampled (temperature, top-k, top-p), penalties (which make an overlapped step wait for the
 * token in flight), logprobs, stop strings cut from random tokens' text, stop ids, min_tokens,
 * max_tokens; two engine shapes, one with a KV cache small enough to preempt. Each workload runs
 * with --overlap off and on; every completion must have the same tokens, text, finish reason
 * and logprobs (top ids), and the overlapped run must have queued steps while another ran,
 * computed rows for finished sequences, waited for penalties, preempted and hit the prefix
 * cache.
 *
 * Built twice: against the CPU backend (engine_overlap: its submit does the work and resolves
 * token_src on the host), and with PLLM_TEST_CUDA against the CUDA emulator
 * (engine_overlap_cuda; _gpu on a device), where the tokens step N is sampling reach step N + 1
 * on the device (the backend's resolve kernel; its info counts those steps). A broken
 * device-side feed (a wrong row) changes tokens here.
 */
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "model/gguf.h"
#include "tests/test_model.h"
#include "tests/testutil.h"
#include "tokenizer/tokenizer.h"
#ifdef PLLM_TEST_CUDA
#include "cuda/cuda_backend.h"
#endif

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { E = 32, H = 4, HKV = 2, HD = 8, F = 48, V = 320, NL = 2 };

#ifdef PLLM_TEST_CUDA
#define LP_TOL 1e-4f
#else
#define LP_TOL 0.0f
#endif

#define MAX_PROMPTS 20
#define MAX_COMP    (MAX_PROMPTS * 3)
#define MAX_GEN     24

static pllm_status make_backend(pllm_backend *b, const pllm_model *m)
{
#ifdef PLLM_TEST_CUDA
    pllm_cuda_params cp;
    pllm_cuda_params_defaults(&cp);
    cp.kv_dtype = PLLM_DTYPE_F32;
    cp.weights = PLLM_CUDA_WEIGHTS_F32;
    cp.reserve_tokens = 256;
    return pllm_cuda_backend_create(b, m, &cp);
#else
    pllm_cpu_params cp;
    pllm_cpu_params_defaults(&cp);
    cp.n_threads = 2;
    return pllm_cpu_backend_create(b, m, &cp);
#endif
}

typedef struct comp {
    int32_t n_emitted, n_tokens, finish;
    int32_t tok[MAX_GEN];
    float lp[MAX_GEN];
    int32_t top[MAX_GEN][2];
    char text[512];
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
        for (int32_t j = 0; j < 2; j++)
            x->top[k][j] = c->logprobs && j < c->top_n ? c->top_ids[k * c->top_n + j] : -1;
    }
    snprintf(x->text, sizeof x->text, "%.*s", (int)PLLM_MIN(c->text_len, 511), c->text);
}

typedef struct workload {
    int32_t n_prompts;
    int32_t prompt[MAX_PROMPTS][48];
    int32_t n_prompt[MAX_PROMPTS];
    pllm_request_params rp[MAX_PROMPTS];
    char stops[MAX_PROMPTS][2][16];
} workload;

static int32_t rnd(uint64_t *s, int32_t n)
{
    return (int32_t)(pllm_test_rand(s) % (uint64_t)n);
}

/* A stop string: the text of one random ordinary token, or its first byte. */
static void pick_stop(const pllm_tokenizer *tok, uint64_t *s, char *out)
{
    for (;;) {
        size_t len = 0;
        const int32_t id = 20 + rnd(s, V - 20);
        const char *b = pllm_tokenizer_token_bytes(tok, id, &len);
        if (!b || len == 0 || len > 8 || pllm_tokenizer_is_special(tok, id)) continue;
        bool ok = true;
        for (size_t i = 0; i < len; i++) ok &= (unsigned char)b[i] >= 0x20 && b[i] != 0x7f;
        if (!ok) continue;
        size_t n = rnd(s, 3) == 0 ? 1 : len;
        memcpy(out, b, n);
        out[n] = 0;
        return;
    }
}

static void make_workload(workload *w, const pllm_tokenizer *tok, uint64_t seed)
{
    uint64_t s = seed;
    int32_t base[2][32];
    for (int32_t b = 0; b < 2; b++)
        for (int32_t i = 0; i < 32; i++) base[b][i] = 20 + rnd(&s, V - 20);
    w->n_prompts = MAX_PROMPTS;
    for (int32_t r = 0; r < w->n_prompts; r++) {
        int32_t n = 0, shared = rnd(&s, 3) ? 8 + rnd(&s, 24) : 0, b = rnd(&s, 2);
        for (; n < shared; n++) w->prompt[r][n] = base[b][n];
        int32_t extra = 2 + rnd(&s, 14);
        for (int32_t i = 0; i < extra; i++) w->prompt[r][n++] = 20 + rnd(&s, V - 20);
        w->n_prompt[r] = n;
        pllm_request_params *p = &w->rp[r];
        pllm_request_params_defaults(p);
        p->max_tokens = 1 + rnd(&s, 20);
        p->min_tokens = rnd(&s, 4) == 0 ? rnd(&s, PLLM_MIN(3, p->max_tokens) + 1) : 0;
        p->ignore_eos = true; /* ids 0..19 are the tokenizer's specials */
        p->n = rnd(&s, 3) == 0 ? 2 + rnd(&s, 2) : 1;
        p->has_seed = true;
        p->sampling.seed = pllm_test_rand(&s);
        if (rnd(&s, 2)) { /* sampled */
            p->sampling.temperature = 0.9f;
            p->sampling.top_k = rnd(&s, 2) ? 40 : 0;
            p->sampling.top_p = rnd(&s, 2) ? 0.9f : 1.0f;
        } else {
            p->sampling.temperature = 0.0f;
        }
        int32_t pen = rnd(&s, 20); /* penalties on 3 in 20 prompts */
        if (pen == 0) p->sampling.presence_penalty = 0.7f;
        if (pen == 1) p->sampling.frequency_penalty = 0.5f;
        if (pen == 2) p->sampling.repetition_penalty = 1.3f;
        p->sampling.logprobs = rnd(&s, 3) == 0 ? 1 + rnd(&s, 2) : 0;
        if (rnd(&s, 4) == 0) p->stop_ids[p->n_stop_ids++] = 20 + rnd(&s, V - 20);
        p->n_stop = rnd(&s, 2) ? 1 + rnd(&s, 2) : 0;
        for (int32_t k = 0; k < p->n_stop; k++) {
            pick_stop(tok, &s, w->stops[r][k]);
            p->stop[k] = w->stops[r][k];
        }
    }
}

typedef struct shape {
    const char *name;
    int32_t max_seqs, budget, n_blocks;
} shape;

typedef struct run_out {
    pllm_engine_stats st;
    int64_t src_steps; /* CUDA: steps whose token_src the device resolved */
} run_out;

static void run(const pllm_model *m, const pllm_tokenizer *tok, const workload *w, const shape *sh,
                pllm_overlap_mode mode, gen *g, run_out *ro)
{
    pllm_backend bk = {0}, *be = &bk;
    memset(ro, 0, sizeof *ro);
    memset(g, 0, sizeof *g);
    CHECK_OK(make_backend(be, m));
    if (!be->iface) return;
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.block_size = 4;
    ep.max_seqs = sh->max_seqs;
    ep.max_batched_tokens = sh->budget;
    ep.n_blocks = sh->n_blocks;
    ep.max_model_len = 256;
    ep.overlap = mode;
    pllm_engine *e = NULL;
    CHECK_OK(pllm_engine_create(&e, m, be, tok, &ep));
    if (!e) {
        pllm_backend_free(be);
        return;
    }
    int32_t at = 0;
    for (int32_t i = 0; i < w->n_prompts; i++) {
        CHECK_OK(pllm_engine_add(e, w->prompt[i], w->n_prompt[i], &w->rp[i], (void *)(intptr_t)at,
                                 NULL));
        at += w->rp[i].n;
    }
    while (pllm_engine_has_work(e)) {
        pllm_status s = pllm_engine_step(e, on_done, g);
        CHECK_OK(s);
        if (s != PLLM_OK) break;
    }
    pllm_engine_get_stats(e, &ro->st);
#ifdef PLLM_TEST_CUDA
    pllm_cuda_backend_info info;
    pllm_cuda_backend_get_info(be, &info);
    ro->src_steps = info.src_steps;
    CHECK(ro->st.device_seconds > 0);
#else
    CHECK(ro->st.device_seconds < 0); /* a host backend: n/a */
#endif
    pllm_engine_free(e);
    pllm_backend_free(be);
}

/* Completions of a and b: the same tokens, text, finish reason and logprobs. */
static int32_t compare(const workload *w, const gen *a, const gen *b, const char *what)
{
    int32_t bad = 0, at = 0;
    for (int32_t r = 0; r < w->n_prompts; r++) {
        for (int32_t k = 0; k < w->rp[r].n; k++, at++) {
            const comp *x = &a->c[at], *y = &b->c[at];
            bool same = x->n_emitted == 1 && y->n_emitted == 1 && x->n_tokens == y->n_tokens &&
                        x->finish == y->finish && !strcmp(x->text, y->text) &&
                        !memcmp(x->tok, y->tok, (size_t)x->n_tokens * sizeof *x->tok) &&
                        !memcmp(x->top, y->top, (size_t)x->n_tokens * sizeof x->top[0]);
            /* logprobs: bitwise on the CPU (a row's math does not depend on the batch); on CUDA
             * the decode attention's split follows the batch's shape (rounding differs) */
            float worst = 0.0f;
            for (int32_t t = 0; t < x->n_tokens && t < y->n_tokens; t++)
                worst = fmaxf(worst, fabsf(x->lp[t] - y->lp[t]));
            same &= worst <= LP_TOL;
            if (!same && bad++ < 5)
                fprintf(stderr,
                        "  %s: completion %d.%d differs: %d tokens '%s' (%d) vs %d tokens '%s' "
                        "(%d), logprobs within %g\n",
                        what, r, k, x->n_tokens, x->text, x->finish, y->n_tokens, y->text,
                        y->finish, (double)worst);
        }
    }
    CHECK(bad == 0);
    return bad;
}

static pllm_tokenizer *open_tokenizer(void)
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
                "engine_overlap: FAIL: cannot open the default model (%s); run scripts/setup.sh "
                "or set PLLM_HOME\n",
                pllm_errmsg());
        pllm_test_failures++;
        return NULL;
    }
    pllm_tokenizer *tok = NULL;
    CHECK_OK(pllm_tokenizer_from_gguf(&tok, gg));
    pllm_gguf_close(gg);
    return tok;
}

int main(void)
{
#ifdef PLLM_TEST_CUDA
    if (pllm_cuda_device_count(NULL, 0) == 0) pllm_test_skip("engine_overlap_cuda: no CUDA device");
    const char *name = "engine_overlap_cuda";
    const int32_t n_workloads = 2;
#else
    const char *name = "engine_overlap";
    const int32_t n_workloads = 6;
#endif
    pllm_tokenizer *tok = open_tokenizer();
    if (!tok) return pllm_test_finish(name);
    uint64_t rng = 1616;
    pllm_test_model mm;
    const pllm_test_model_shape shp = {.n_vocab = V,
                                       .n_embd = E,
                                       .n_layer = NL,
                                       .n_head = H,
                                       .n_head_kv = HKV,
                                       .head_dim = HD,
                                       .n_ff = F,
                                       .n_ctx_train = 512,
                                       .s_qk = 0.4f,
                                       .s_v = 0.4f,
                                       .s_o = 0.3f,
                                       .s_ffn = 0.3f,
                                       .name = "overlap-mem-model"};
    pllm_test_model_build(&mm, &shp, &rng);
    mm.m.identity = 0x0f16;
    static const shape shapes[] = {
        {"16 seqs, budget 64", 16, 64, 400},
        {"8 seqs, budget 24, 40 blocks (preempts)", 8, 24, 40},
    };
    static workload w;
    static gen ref, got;
    run_out rs, ro;
    int64_t overlapped = 0, wasted = 0, penal = 0, preempt = 0, cached = 0, src = 0, stops = 0;
    double t0 = pllm_now();
    for (int32_t wi = 0; wi < n_workloads && !pllm_test_failures; wi++) {
        make_workload(&w, tok, 100 + (uint64_t)wi);
        for (int32_t r = 0; r < w.n_prompts; r++) stops += w.rp[r].n_stop;
        for (size_t si = 0; si < PLLM_ARRAY_LEN(shapes); si++) {
            const shape *sh = &shapes[si];
            char what[160];
            snprintf(what, sizeof what, "workload %d, %s", wi, sh->name);
            run(&mm.m, tok, &w, sh, PLLM_OVERLAP_OFF, &ref, &rs);
            run(&mm.m, tok, &w, sh, PLLM_OVERLAP_ON, &got, &ro);
            CHECK(!rs.st.overlap && rs.st.steps_overlapped == 0 && ro.st.overlap);
            compare(&w, &ref, &got, what);
            overlapped += ro.st.steps_overlapped;
            wasted += ro.st.wasted_slots;
            penal += ro.st.pending_penalty_samples;
            CHECK(ro.st.sync_penalties == 0);
            preempt += ro.st.preemptions;
            cached += ro.st.prompt_tokens_cached;
            src += ro.src_steps;
        }
    }
    fprintf(stderr,
            "%s: %d workloads x %d shapes identical with and without overlap: %lld steps "
            "overlapped, %lld wasted rows, %lld penalty samples read a pending token, %lld "
            "preemptions, "
            "%lld cached prompt tokens, %lld device-resolved steps; %.1f s\n",
            name, n_workloads, (int)PLLM_ARRAY_LEN(shapes), (long long)overlapped,
            (long long)wasted, (long long)penal, (long long)preempt, (long long)cached,
            (long long)src, pllm_now() - t0);
    CHECK(overlapped > 0 && wasted > 0 && penal > 0 && preempt > 0 && cached > 0 && stops > 0);
#ifdef PLLM_TEST_CUDA
    CHECK(src > 0);
#endif
    pllm_test_model_free(&mm);
    pllm_tokenizer_free(tok);
    return pllm_test_finish(name);
}

/*
 * engine_spec: speculative decoding (engine/speculate.h) on an in-memory random model with a
 * small vocabulary (llama, 2 layers, GQA, V = 12), through the whole engine.
 *
 *   0. The backend contract: k + 1 rows of one sequence (pllm_sample_req.back) are sampled;
 *      the last row's logits equal a one-row plan's; back outside [0, n_new) or not
 *      decreasing is refused with a message naming it.
 *   1. The proposers: prompt lookup takes the longest suffix match (most recent occurrence)
 *      and stops at the end of the known tokens; the n-gram table chains its continuations.
 *      The policy: a memory-bound step (a >> b T) speculates deeply at high acceptance, a
 *      compute-bound batch (b T >> a) does not speculate at all, a low acceptance rate
 *      drafts less; PLLM_SPEC_PROMPT_LOOKUP takes every proposal within the budget.
 *   2. Greedy: identical tokens with speculation off, prompt-lookup and auto, over several
 *      batch shapes (1 and 16 sequences, a small token budget, a KV cache small enough to
 *      preempt), with drafts accepted in every speculating run.
 *   3. Sampled with the same seeds (temperature, top-k, top-p, min-p, penalties, logprobs,
 *      n = 2): identical tokens and logprobs with and without speculation (each row is drawn
 *      with the random number the ordinary sampler uses for that token).
 *   4. The distribution: 3000 completions of one prompt sampled with speculation and 3000
 *      without, with different seeds; a two-sample chi-square test on the first two tokens
 *      (pairs), on the third token, and on the number of distinct tokens in the 6 generated
 *      must not reject at p = 0.001 (bins with fewer than 10 expected samples pooled), while a
 *      deliberately wrong acceptance rule (accept every draft; checked here through the same
 *      statistic on output that keeps the drafts) must be rejected.
 *
 * Built twice: against the CPU backend (engine_spec), and with PLLM_TEST_CUDA against the CUDA
 * emulator (engine_spec_cuda; engine_spec_cuda_gpu on a real device): parts 1 to 3 with the
 * CUDA backend, where speculation's rows
 * run through the prefill attention kernel instead of the decode one. There a divergence is
 * allowed only at a near tie (the two largest logits of the non-speculative context within
 * 1e-4 relative), counted and printed; the CPU run must match exactly.
 */
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "engine/speculate.h"
#include "tests/test_model.h"
#include "tests/testutil.h"
#ifdef PLLM_TEST_CUDA
#include "cuda/cuda_backend.h"
#endif

#include <math.h>
#include <string.h>

enum { E = 32, H = 4, HKV = 2, HD = 8, F = 48, V = 12, NL = 2 };

typedef pllm_test_model mem_model;

static uint64_t g_rng = 4242;

static void build_model(mem_model *mm)
{
    const pllm_test_model_shape s = {.n_vocab = V,
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
                                     .name = "spec-mem-model"};
    pllm_test_model_build(mm, &s, &g_rng);
    mm->m.identity = 0x5bec;
}

/* ---- backends ---- */

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

/* ---- 1. proposers and policy ---- */

static void test_proposers(void)
{
    int32_t d[8];
    /* ... 5 6 7 8 | 9 ... 5 6 7: the longest suffix "5 6 7" matched, continuation "8 9" */
    const int32_t t1[] = {1, 5, 6, 7, 8, 9, 2, 6, 7, 3, 5, 6, 7};
    int32_t n = pllm_spec_prompt_lookup(d, 4, t1, 13, 1, 4, NULL);
    CHECK(n == 4 && d[0] == 8 && d[1] == 9 && d[2] == 2 && d[3] == 6);
    /* the most recent earlier occurrence wins: "6 7" at 3..4 (not 0..1) -> 3 0 */
    const int32_t t2[] = {6, 7, 1, 6, 7, 3, 0, 6, 7};
    n = pllm_spec_prompt_lookup(d, 2, t2, 9, 2, 3, &n);
    CHECK(n == 2);
    n = pllm_spec_prompt_lookup(d, 2, t2, 9, 2, 3, NULL);
    CHECK(n == 2 && d[0] == 3 && d[1] == 0);
    n = pllm_spec_prompt_lookup(d, 8, t2, 9, 1, 1, NULL); /* "7" most recently at 4 -> 3 0 6 7 */
    CHECK(n == 4 && d[0] == 3 && d[1] == 0 && d[2] == 6 && d[3] == 7);
    const int32_t t3[] = {1, 2, 3, 4};
    CHECK(pllm_spec_prompt_lookup(d, 4, t3, 4, 1, 4, NULL) == 0); /* no repeat */
    CHECK(pllm_spec_prompt_lookup(d, 0, t1, 13, 1, 4, NULL) == 0);

    pllm_spec *s = NULL;
    pllm_spec_params sp = {.mode = PLLM_SPEC_AUTO,
                           .max_draft = 5,
                           .ngram_min = 1,
                           .ngram_max = 4,
                           .fit_max_tokens = 1000};
    CHECK_OK(pllm_spec_init(&s, &sp));
    if (!s) return;
    const int32_t o1[] = {10, 11, 12, 13, 14, 15};
    pllm_spec_ngram_add(s, o1, 0, 6);
    const int32_t q[] = {99, 11, 12};
    n = pllm_spec_ngram_propose(s, d, 5, q, 3); /* "11 12" -> 13, "11 12 13" -> 14 ... */
    CHECK(n == 3 && d[0] == 13 && d[1] == 14 && d[2] == 15);
    int32_t src = -1; /* prompt lookup finds nothing, n-grams do */
    CHECK(pllm_spec_propose(s, d, 5, q, 3, &src) == 3 && src == 4);
    CHECK(pllm_spec_propose(s, d, 5, t1, 13, &src) == 5 && src == 2); /* a 3-token match */

    /* a memory-bound backend: 10 ms + 0.05 ms per token */
    for (int i = 0; i < 40; i++) {
        int32_t T = 1 + (i % 7);
        pllm_spec_observe_step(s, T, T, T - 1, 0.010 + 0.00005 * T);
    }
    pllm_spec_stats st;
    pllm_spec_get_stats(s, &st);
    /* one sequence in every step: a sequence costs what a draft does */
    CHECK(fabs(st.cost_a - 0.010) < 1e-6 && fabs(st.cost_c - 0.00005) < 1e-8 &&
          fabs(st.cost_b - 0.00005) < 1e-8);
    pllm_spec_cand c[64];
    c[0] = (pllm_spec_cand){.n_proposed = 5, .trials = 100, .accepted = 90};
    pllm_spec_choose(s, c, 1, 1, 1, 2048);
    CHECK(c[0].k == 5); /* high acceptance, nearly free drafts: all of them */
    c[0] = (pllm_spec_cand){.n_proposed = 5, .trials = 100, .accepted = 1};
    pllm_spec_choose(s, c, 1, 1, 1, 2048);
    CHECK(c[0].k <= 1); /* almost never right: at most the first, cheap, draft */
    c[0] = (pllm_spec_cand){.n_proposed = 5, .trials = 100, .accepted = 90};
    pllm_spec_choose(s, c, 1, 1, 1, 3);
    CHECK(c[0].k == 3); /* the budget */

    /* a compute-bound batch: 1 ms + 1 ms per token, 64 sequences decoding */
    pllm_spec *s2 = NULL;
    CHECK_OK(pllm_spec_init(&s2, &sp));
    for (int i = 0; s2 && i < 40; i++) {
        int32_t T = 64 + (i % 5) * 8;
        pllm_spec_observe_step(s2, T, T, T - 64, 0.001 + 0.001 * T);
    }
    for (int32_t i = 0; s2 && i < 64; i++)
        c[i] = (pllm_spec_cand){.n_proposed = 5, .trials = 100, .accepted = 70};
    if (s2) pllm_spec_choose(s2, c, 64, 64, 64, 2048);
    int32_t total = 0;
    for (int32_t i = 0; s2 && i < 64; i++) total += c[i].k;
    CHECK(total == 0);
    /* the same batch on the memory-bound backend: speculates */
    pllm_spec_choose(s, c, 64, 64, 64, 2048);
    total = 0;
    for (int32_t i = 0; i < 64; i++) total += c[i].k;
    CHECK(total > 64);
    pllm_spec_free(s2);

    /* the CPU at 16 sequences (the fit of a copy16 run's steps, rounded): 10 ms + 7 ms per
     * sequence (its context's attention) + 2.4 ms per draft, with batches of 8..16 sequences
     * as requests come and go. A draft then costs ~2% of a 16-sequence step, and a sequence
     * whose drafts are nearly all kept (alpha 0.95) gets several. The one-variable fit
     * t = a + b T that this replaced sees 49 ms + 3.1 ms per token here and gives ~2 drafts
     * each (the checks below fail with it). */
    pllm_spec *s4 = NULL;
    sp.max_draft = 8;
    CHECK_OK(pllm_spec_init(&s4, &sp));
    for (int i = 0; s4 && i < 200; i++) {
        int32_t S = 8 + (i * 5) % 9, D = (i * 7) % 23;
        pllm_spec_observe_step(s4, S + D, S + D, D, 0.010 + 0.007 * S + 0.0024 * D);
    }
    if (s4) {
        pllm_spec_get_stats(s4, &st);
        CHECK(fabs(st.cost_a - 0.010) < 1e-6 && fabs(st.cost_c - 0.007) < 1e-7 &&
              fabs(st.cost_b - 0.0024) < 1e-7);
        for (int32_t i = 0; i < 16; i++)
            c[i] = (pllm_spec_cand){.n_proposed = 8, .trials = 1000, .accepted = 950};
        pllm_spec_choose(s4, c, 16, 16, 16, 2048);
        for (int32_t i = 0; i < 16; i++) CHECK(c[i].k >= 4);
    }
    pllm_spec_free(s4);

    /* a fresh policy explores until its fit is identified: the steps it runs (16 sequences, a
     * draft costing 2.4 ms) must give the fit its spread. Exploring with the same draft count
     * every step never did (cost_b stayed 0 and a copy16 run drafted 8 tokens a step). */
    pllm_spec *s5 = NULL;
    CHECK_OK(pllm_spec_init(&s5, &sp));
    for (int step = 0; s5 && step < 12; step++) {
        for (int32_t i = 0; i < 16; i++)
            c[i] = (pllm_spec_cand){.n_proposed = 8, .trials = 1000, .accepted = 950};
        pllm_spec_choose(s5, c, 16, 16, 16, 2048);
        int32_t D = 0;
        for (int32_t i = 0; i < 16; i++) D += c[i].k;
        pllm_spec_observe_step(s5, 16 + D, 16 + D, D, 0.120 + 0.0024 * D);
    }
    if (s5) {
        pllm_spec_get_stats(s5, &st);
        CHECK(fabs(st.cost_b - 0.0024) < 1e-7);
    }
    pllm_spec_free(s5);

    /* a shared machine: the load drifts over seconds (x1 .. x2.2, a 300-step period), and the
     * draft counts with it (copying phases: ~40 drafts a step while the load is high, ~4 while
     * it is low, +-3 from step to step). True cost at 16 sequences: (2.5 ms + 1.2 ms per
     * sequence + 0.64 ms per draft) x the load. A fit over the steps' levels reads the drift as
     * the drafts' cost (b/t ~3x too high: a sequence then stops drafting at alpha 0.9); the
     * differences of neighbouring steps see the same load in both. */
    pllm_spec *s6 = NULL;
    sp.max_draft = 16;
    CHECK_OK(pllm_spec_init(&s6, &sp));
    double load = 1;
    for (int i = 0; s6 && i < 600; i++) {
        load = 1.6 + 0.6 * sin(6.2831853 * i / 300.0);
        int32_t D = (load > 1.6 ? 40 : 4) + (i * 5) % 7 - 3;
        pllm_spec_observe_step(s6, 16 + D, 16 + D, D, load * (0.0025 + 0.0012 * 16 + 0.00064 * D));
    }
    if (s6) {
        pllm_spec_get_stats(s6, &st);
        /* the draft's cost against the step's, at the current load: 0.64 / 21.7 */
        double t16 = st.cost_a + 16 * st.cost_c, want = 0.00064 / (0.0025 + 0.0012 * 16);
        CHECK(st.cost_b / t16 > 0.75 * want && st.cost_b / t16 < 1.33 * want);
        for (int32_t i = 0; i < 16; i++)
            c[i] = (pllm_spec_cand){.n_proposed = 16, .trials = 1000, .accepted = 900};
        pllm_spec_choose(s6, c, 16, 16, 16, 2048);
        for (int32_t i = 0; i < 16; i++) CHECK(c[i].k >= 1); /* the level fit: none */
    }
    pllm_spec_free(s6);

    /* prompt-lookup mode takes every proposal within the budget */
    pllm_spec *s3 = NULL;
    sp.mode = PLLM_SPEC_PROMPT_LOOKUP;
    CHECK_OK(pllm_spec_init(&s3, &sp));
    c[0] = (pllm_spec_cand){.n_proposed = 4};
    c[1] = (pllm_spec_cand){.n_proposed = 4};
    if (s3) pllm_spec_choose(s3, c, 2, 2, 2, 6);
    CHECK(c[0].k == 4 && c[1].k == 2);
    pllm_spec_free(s3);
    pllm_spec_free(s);

    pllm_spec_mode m;
    CHECK(pllm_spec_mode_parse("prompt-lookup", &m) == PLLM_OK && m == PLLM_SPEC_PROMPT_LOOKUP);
    CHECK(pllm_spec_mode_parse("auto", &m) == PLLM_OK && m == PLLM_SPEC_AUTO);
    CHECK(pllm_spec_mode_parse("on", &m) == PLLM_ERR_INVALID && strstr(pllm_errmsg(), "'on'"));
}

/* ---- the plan's sample rows (backend.h: back) ---- */

static void test_plan_checks(const pllm_model *m)
{
    pllm_backend b = {0};
    CHECK_OK(make_backend(&b, m));
    if (!b.iface) return;
    pllm_kv_layout l;
    CHECK_OK(b.iface->kv_layout(b.ctx, 4, &l));
    l.block_size = 4;
    l.n_blocks = 8;
    CHECK_OK(b.iface->kv_init(b.ctx, &l));
    int32_t toks[3] = {1, 2, 3}, pos[3] = {0, 1, 2}, slots[3] = {0, 1, 2}, bt[1] = {0};
    pllm_seq_plan sp = {.token_start = 0, .n_new = 3, .n_ctx = 3, .block_start = 0, .n_blocks = 1};
    pllm_sampling_params g;
    pllm_sampling_defaults(&g);
    pllm_sample_req sr[3] = {{.seq = 0, .back = 2, .params = &g},
                             {.seq = 0, .back = 1, .params = &g},
                             {.seq = 0, .back = 0, .params = &g}};
    pllm_batch_plan p = {.n_tokens = 3,
                         .tokens = toks,
                         .positions = pos,
                         .slots = slots,
                         .n_seqs = 1,
                         .seqs = &sp,
                         .block_tables = bt,
                         .n_samples = 3,
                         .samples = sr};
    int32_t out_tok[3];
    float logits[3 * V];
    pllm_step_out o = {.tokens = out_tok, .logits = logits};
    CHECK_OK(b.iface->step(b.ctx, &p, &o)); /* three rows of one sequence */
    /* the last row equals a one-row plan's logits (same tokens rewritten in the same slots) */
    float last[V];
    pllm_step_out o1 = {.tokens = out_tok, .logits = last};
    p.n_samples = 1;
    p.samples = &sr[2];
    CHECK_OK(b.iface->step(b.ctx, &p, &o1));
    CHECK(memcmp(last, logits + 2 * V, sizeof last) == 0);
    sr[0].back = 3; /* outside [0, n_new) */
    p.n_samples = 3;
    p.samples = sr;
    CHECK(b.iface->step(b.ctx, &p, &o) == PLLM_ERR_RANGE && strstr(pllm_errmsg(), "back = 3"));
    sr[0].back = 0; /* not decreasing */
    CHECK(b.iface->step(b.ctx, &p, &o) == PLLM_ERR_INVALID &&
          strstr(pllm_errmsg(), "decreasing back"));
    pllm_backend_free(&b);
}

/* ---- runs through the engine ---- */

#define MAX_GEN  24
#define MAX_REQS 3200

typedef struct gen {
    int32_t n[MAX_REQS];
    int32_t tok[MAX_REQS][MAX_GEN];
    float lp[MAX_REQS][MAX_GEN];
    int32_t top[MAX_REQS][MAX_GEN][2];
} gen;

static void on_done(const pllm_completion *c, void *arg)
{
    gen *g = arg;
    intptr_t i = (intptr_t)c->user + c->index;
    CHECK(c->finish != PLLM_FINISH_ERROR && i >= 0 && i < MAX_REQS);
    if (i < 0 || i >= MAX_REQS) return;
    g->n[i] = PLLM_MIN(c->n_tokens, MAX_GEN);
    for (int32_t k = 0; k < g->n[i]; k++) {
        g->tok[i][k] = c->token_ids[k];
        g->lp[i][k] = c->logprobs ? c->logprobs[k] : 0.0f;
        for (int32_t j = 0; j < 2; j++)
            g->top[i][k][j] = c->logprobs && j < c->top_n ? c->top_ids[k * c->top_n + j] : -1;
    }
}

typedef struct shape {
    const char *name;
    int32_t max_seqs, budget, n_blocks;
} shape;

typedef struct workload {
    int32_t n_prompts;
    int32_t prompt[64][40];
    int32_t n_prompt[64];
    pllm_request_params rp[64];
} workload;

static void run(const pllm_model *m, const workload *w, const shape *sh, pllm_spec_mode mode,
                gen *g, pllm_engine_stats *st)
{
    pllm_backend bk = {0}, *be = &bk;
    memset(st, 0, sizeof *st);
    CHECK_OK(make_backend(be, m));
    if (!be->iface) return;
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.block_size = 4;
    ep.max_seqs = sh->max_seqs;
    ep.max_batched_tokens = sh->budget;
    ep.n_blocks = sh->n_blocks;
    ep.max_model_len = 256;
    ep.speculate = mode;
    ep.spec_max_draft = 4; /* (the engine default is 16 under auto) */
    pllm_engine *e = NULL;
    memset(g, 0, sizeof *g);
    CHECK_OK(pllm_engine_create(&e, m, be, NULL, &ep));
    if (!e) return;
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
    pllm_engine_get_stats(e, st);
    pllm_engine_free(e);
    pllm_backend_free(be);
}

/* A prompt with repeats (so prompt lookup proposes): a random pattern of 3..6 tokens, repeated,
 * with a random token changed here and there. */
static void make_prompt(int32_t *p, int32_t *n, uint64_t *rng)
{
    int32_t plen = 3 + (int32_t)(pllm_test_rand(rng) % 4), pat[6];
    for (int32_t i = 0; i < plen; i++) pat[i] = (int32_t)(pllm_test_rand(rng) % V);
    *n = 12 + (int32_t)(pllm_test_rand(rng) % 28);
    for (int32_t i = 0; i < *n; i++)
        p[i] = pllm_test_rand(rng) % 9 == 0 ? (int32_t)(pllm_test_rand(rng) % V) : pat[i % plen];
}

#ifdef PLLM_TEST_CUDA
/* Is the next token after ctx a near tie on this backend (the two largest logits within 1e-4
 * relative)? One prefill step of ctx in a fresh engine-free plan. */
static bool near_tie(const pllm_model *m, const int32_t *ctx, int32_t n)
{
    pllm_backend b = {0};
    if (make_backend(&b, m) != PLLM_OK) return false;
    pllm_kv_layout l;
    CHECK_OK(b.iface->kv_layout(b.ctx, 16, &l));
    l.block_size = 16;
    l.n_blocks = 32;
    CHECK_OK(b.iface->kv_init(b.ctx, &l));
    int32_t pos[512], slots[512], bt[32];
    for (int32_t i = 0; i < n; i++) pos[i] = slots[i] = i;
    for (int32_t i = 0; i < 32; i++) bt[i] = i;
    pllm_seq_plan sp = {.token_start = 0, .n_new = n, .n_ctx = n, .block_start = 0, .n_blocks = 32};
    pllm_sampling_params greedy;
    pllm_sampling_defaults(&greedy);
    pllm_sample_req sr = {.seq = 0, .params = &greedy};
    pllm_batch_plan p = {.n_tokens = n,
                         .tokens = ctx,
                         .positions = pos,
                         .slots = slots,
                         .n_seqs = 1,
                         .seqs = &sp,
                         .block_tables = bt,
                         .n_samples = 1,
                         .samples = &sr};
    float logits[V];
    int32_t tok;
    pllm_step_out o = {.tokens = &tok, .logits = logits};
    CHECK_OK(b.iface->step(b.ctx, &p, &o));
    pllm_backend_free(&b);
    float a = -INFINITY, c = -INFINITY;
    for (int32_t i = 0; i < V; i++) {
        if (logits[i] > a) {
            c = a;
            a = logits[i];
        } else if (logits[i] > c) {
            c = logits[i];
        }
    }
    return fabsf(a - c) <= 1e-4f * fmaxf(fabsf(a), 1.0f);
}
#endif

/* Compare two runs; returns the number of completions that differ (after a near tie on CUDA). */
static int32_t compare(const pllm_model *m, const workload *w, const gen *a, const gen *b,
                       bool logprobs, const char *what)
{
    int32_t at = 0, n_tie = 0, n_bad = 0;
    for (int32_t i = 0; i < w->n_prompts; i++) {
        for (int32_t c = 0; c < w->rp[i].n; c++, at++) {
            int32_t k = 0;
            while (k < a->n[at] && k < b->n[at] && a->tok[at][k] == b->tok[at][k]) k++;
            bool same = k == a->n[at] && a->n[at] == b->n[at];
            for (int32_t j = 0; same && logprobs && j < a->n[at]; j++)
                same = fabsf(a->lp[at][j] - b->lp[at][j]) <= 1e-5f &&
                       a->top[at][j][0] == b->top[at][j][0] && a->top[at][j][1] == b->top[at][j][1];
            if (same) continue;
#ifdef PLLM_TEST_CUDA
            int32_t ctx[64 + MAX_GEN];
            memcpy(ctx, w->prompt[i], (size_t)w->n_prompt[i] * sizeof *ctx);
            memcpy(ctx + w->n_prompt[i], a->tok[at], (size_t)k * sizeof *ctx);
            if (k < a->n[at] && w->rp[i].sampling.temperature == 0 &&
                near_tie(m, ctx, w->n_prompt[i] + k)) {
                n_tie++;
                continue;
            }
#else
            (void)m;
#endif
            fprintf(stderr, "  %s: completion %d differs at token %d of %d/%d\n", what, at, k,
                    a->n[at], b->n[at]);
            n_bad++;
        }
    }
    if (n_tie) fprintf(stderr, "  %s: %d completions diverge at a near tie\n", what, n_tie);
    return n_bad;
}

static void test_identity(const pllm_model *m)
{
    static workload w;
    uint64_t rng = 77;
    w.n_prompts = 16;
    for (int32_t i = 0; i < w.n_prompts; i++) {
        make_prompt(w.prompt[i], &w.n_prompt[i], &rng);
        pllm_request_params_defaults(&w.rp[i]);
        w.rp[i].max_tokens = 8 + (int32_t)(pllm_test_rand(&rng) % (MAX_GEN - 8));
        w.rp[i].ignore_eos = true;
        if (i % 4 == 3) { /* a stop id: ends early, maybe inside accepted drafts */
            w.rp[i].n_stop_ids = 1;
            w.rp[i].stop_ids[0] = w.prompt[i][1];
            w.rp[i].min_tokens = 2;
        }
    }
    static const shape shapes[] = {
        {"1 seq", 1, 2048, 0},
        {"16 seqs", 16, 2048, 0},
        {"budget 7, 4 seqs", 4, 7, 0},
        {"24 blocks (preemption), 8 seqs", 8, 64, 24},
    };
    static gen ref, got;
    pllm_engine_stats st;
    for (size_t s = 0; s < PLLM_ARRAY_LEN(shapes); s++) {
        run(m, &w, &shapes[s], PLLM_SPEC_OFF, &ref, &st);
        CHECK(st.spec_drafted == 0 && st.decode_tokens == st.decode_samples);
        static const pllm_spec_mode modes[] = {PLLM_SPEC_PROMPT_LOOKUP, PLLM_SPEC_AUTO};
        for (size_t k = 0; k < PLLM_ARRAY_LEN(modes); k++) {
            run(m, &w, &shapes[s], modes[k], &got, &st);
            char what[96];
            snprintf(what, sizeof what, "greedy, %s, %s", shapes[s].name,
                     pllm_spec_mode_str(modes[k]));
            fprintf(stderr,
                    "  %-48s %4lld steps, %2lld preemptions, drafts %4lld accepted %4lld, %.2f "
                    "tokens per sequence step\n",
                    what, (long long)st.steps, (long long)st.preemptions,
                    (long long)st.spec_drafted, (long long)st.spec_accepted,
                    (double)st.decode_tokens / (double)PLLM_MAX(st.decode_samples, 1));
            CHECK(compare(m, &w, &ref, &got, false, what) == 0);
            if (modes[k] == PLLM_SPEC_PROMPT_LOOKUP) CHECK(st.spec_accepted > 0);
            if (shapes[s].n_blocks) CHECK(st.preemptions > 0);
        }
    }

    /* sampled, same seeds: the same tokens and logprobs */
    for (int32_t i = 0; i < w.n_prompts; i++) {
        pllm_sampling_params *sp = &w.rp[i].sampling;
        sp->temperature = 0.7f + 0.1f * (float)(i % 4);
        sp->top_k = i % 3 == 0 ? 6 : 0;
        sp->top_p = i % 2 ? 0.9f : 1.0f;
        sp->min_p = i % 5 == 0 ? 0.05f : 0.0f;
        sp->repetition_penalty = i % 4 == 1 ? 1.2f : 1.0f;
        sp->frequency_penalty = i % 4 == 2 ? 0.3f : 0.0f;
        sp->presence_penalty = i % 4 == 2 ? 0.2f : 0.0f;
        sp->logprobs = 2;
        sp->seed = 1000 + (uint64_t)i;
        w.rp[i].has_seed = true;
        w.rp[i].n = i % 5 == 4 ? 2 : 1;
    }
    shape sh = {"sampled, 8 seqs", 8, 2048, 0};
    run(m, &w, &sh, PLLM_SPEC_OFF, &ref, &st);
    run(m, &w, &sh, PLLM_SPEC_PROMPT_LOOKUP, &got, &st);
    fprintf(stderr, "  %-48s drafts %4lld accepted %4lld\n", "sampled, same seeds, prompt-lookup",
            (long long)st.spec_drafted, (long long)st.spec_accepted);
    CHECK(st.spec_accepted > 0);
    CHECK(compare(m, &w, &ref, &got, true, "sampled, same seeds") == 0);
}

/* ---- 4. the distribution ---- */

/* Two-sample chi-square over histograms a, b of n bins (bins where the pooled expected count is
 * below 10 are merged into one); returns the statistic and sets *df. */
static double chi2_two_sample(const int64_t *a, const int64_t *b, int32_t n, int32_t *df)
{
    int64_t na = 0, nb = 0;
    for (int32_t i = 0; i < n; i++) na += a[i], nb += b[i];
    double x = 0, ka = sqrt((double)nb / (double)na), kb = sqrt((double)na / (double)nb);
    int64_t pa = 0, pb = 0;
    int32_t bins = 0;
    for (int32_t i = 0; i < n; i++) {
        double e = (double)(a[i] + b[i]) * (double)PLLM_MIN(na, nb) / (double)(na + nb);
        if (e < 10) {
            pa += a[i], pb += b[i];
            continue;
        }
        double d = ka * (double)a[i] - kb * (double)b[i];
        x += d * d / (double)(a[i] + b[i]);
        bins++;
    }
    if (pa + pb > 0) {
        double d = ka * (double)pa - kb * (double)pb;
        x += d * d / (double)(pa + pb);
        bins++;
    }
    *df = bins - 1;
    return x;
}

/* The 0.999 quantile of chi-square with df degrees of freedom (Wilson-Hilferty). */
static double chi2_crit(int32_t df)
{
    double z = 3.090, k = df;
    double t = 1 - 2 / (9 * k) + z * sqrt(2 / (9 * k));
    return k * t * t * t;
}

typedef struct hists {
    int64_t pair[V * V], third[V], distinct[8];
} hists;

static void histogram(const gen *g, int32_t n, hists *h)
{
    memset(h, 0, sizeof *h);
    for (int32_t i = 0; i < n; i++) {
        if (g->n[i] < 6) continue;
        h->pair[g->tok[i][0] * V + g->tok[i][1]]++;
        h->third[g->tok[i][2]]++;
        int32_t seen = 0, nd = 0;
        for (int32_t k = 0; k < 6; k++)
            if (!(seen >> g->tok[i][k] & 1)) seen |= 1 << g->tok[i][k], nd++;
        h->distinct[nd]++;
    }
}

static int32_t rejects(const hists *a, const hists *b, const char *what)
{
    int32_t df, n_rej = 0;
    const struct {
        const int64_t *x, *y;
        int32_t n;
        const char *name;
    } tests[] = {{a->pair, b->pair, V * V, "first two tokens"},
                 {a->third, b->third, V, "third token"},
                 {a->distinct, b->distinct, 8, "distinct tokens"}};
    for (size_t t = 0; t < PLLM_ARRAY_LEN(tests); t++) {
        double x = chi2_two_sample(tests[t].x, tests[t].y, tests[t].n, &df);
        double crit = chi2_crit(df);
        fprintf(stderr, "  %-34s %-18s chi2 %8.1f, df %3d, p=0.001 critical %6.1f%s\n", what,
                tests[t].name, x, df, crit, x > crit ? "  REJECTED" : "");
        n_rej += x > crit;
    }
    return n_rej;
}

static void test_distribution(const pllm_model *m)
{
    static workload w;
    uint64_t rng = 5;
    w.n_prompts = 1;
    make_prompt(w.prompt[0], &w.n_prompt[0], &rng);
    pllm_request_params_defaults(&w.rp[0]);
    w.rp[0].max_tokens = 6;
    w.rp[0].ignore_eos = true;
    w.rp[0].sampling.temperature = 1.0f;
    w.rp[0].n = 1000; /* three requests of 1000 completions: seeds base .. base + 999 */
    w.n_prompts = 3;
    for (int32_t i = 1; i < 3; i++) {
        memcpy(w.prompt[i], w.prompt[0], sizeof w.prompt[0]);
        w.n_prompt[i] = w.n_prompt[0];
        w.rp[i] = w.rp[0];
    }
    static gen a, b;
    hists ha, hb;
    pllm_engine_stats st;
    shape sh = {"64 seqs", 64, 2048, 0};
    for (int32_t i = 0; i < 3; i++) w.rp[i].sampling.seed = 1 + 1000 * (uint64_t)i;
    for (int32_t i = 0; i < 3; i++) w.rp[i].has_seed = true;
    run(m, &w, &sh, PLLM_SPEC_OFF, &a, &st);
    for (int32_t i = 0; i < 3; i++) w.rp[i].sampling.seed = 500000 + 1000 * (uint64_t)i;
    run(m, &w, &sh, PLLM_SPEC_PROMPT_LOOKUP, &b, &st);
    fprintf(stderr, "  distribution: 3000 + 3000 completions, drafts %lld, accepted %lld\n",
            (long long)st.spec_drafted, (long long)st.spec_accepted);
    CHECK(st.spec_accepted > 1000);
    histogram(&a, 3000, &ha);
    histogram(&b, 3000, &hb);
    CHECK(rejects(&ha, &hb, "speculative vs ordinary:") == 0);

    /* the test has power: a wrong rule (keep every draft: the output is the prompt-lookup
     * continuation after the first sampled token) is rejected */
    static gen wrong;
    wrong = b;
    for (int32_t i = 0; i < 3000; i++) {
        int32_t ctx[64 + 8], n = w.n_prompt[0];
        memcpy(ctx, w.prompt[0], (size_t)n * sizeof *ctx);
        ctx[n++] = b.tok[i][0];
        for (int32_t k = 1; k < 6; k++) {
            int32_t d;
            if (pllm_spec_prompt_lookup(&d, 1, ctx, n, 1, 4, NULL) == 1) wrong.tok[i][k] = d;
            ctx[n++] = wrong.tok[i][k];
        }
    }
    histogram(&wrong, 3000, &hb);
    CHECK(rejects(&ha, &hb, "keep-every-draft vs ordinary:") > 0);
}

int main(void)
{
    test_proposers();
    mem_model mm;
    build_model(&mm);
#ifdef PLLM_TEST_CUDA
    if (pllm_cuda_device_count(NULL, 0) == 0) pllm_test_skip("engine_spec_cuda: no CUDA device");
#endif
    double t0 = pllm_now();
    test_plan_checks(&mm.m);
    test_identity(&mm.m);
#ifdef PLLM_TEST_CUDA
    (void)test_distribution; /* the sampler's semantics: the CPU build runs it (the emulator
                                takes minutes for its 6000 completions) */
#else
    test_distribution(&mm.m);
#endif
    fprintf(stderr, "  engine runs: %.1f s\n", pllm_now() - t0);
    pllm_test_model_free(&mm);
#ifdef PLLM_TEST_CUDA
    return pllm_test_finish("engine_spec_cuda");
#else
    return pllm_test_finish("engine_spec");
#endif
}

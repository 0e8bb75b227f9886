/*
 * cpu_phase_stats: the CPU backend's per-phase timer (pllm_cpu_params.phase_stats,
 * PLLM_CPU_PHASE_STATS). On a random dense model and on a random mixture-of-experts model, the
 * engine runs the same requests (a prefill, then batched decode steps) with the timer off and
 * on, 2 threads (cpu_phase_stats [MODEL ...]: the MoE models tests/cpu_workspace.py gives): the
 * greedy tokens are the same; the timer counts every forward pass, token and sampled row the engine
 * ran; the phases a dense model runs all took time and the MoE phase none (the MoE model: the other
 * way round for the dense FFN phases); the time summed over the phases, per thread, is within the
 * wall time of the engine's steps; a backend without the timer reports nothing. And
 * PLLM_CPU_PHASE_STATS: 1 sets the field, 0 clears it, anything else is an error naming the
 * variable.
 */
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "tests/test_model.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_REQ   3
#define MAX_OUT 8

typedef struct outputs {
    int32_t tokens[N_REQ][MAX_OUT];
    int32_t n[N_REQ];
} outputs;

static void on_done(const pllm_completion *c, void *arg)
{
    outputs *o = arg;
    int32_t r = (int32_t)(intptr_t)c->user;
    CHECK(r >= 0 && r < N_REQ && c->finish != PLLM_FINISH_ERROR);
    if (r < 0 || r >= N_REQ) return;
    o->n[r] = PLLM_MIN(c->n_tokens, MAX_OUT);
    memcpy(o->tokens[r], c->token_ids, (size_t)o->n[r] * sizeof(int32_t));
}

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Run the requests; *ps gets the phase stats (zeros without the timer). Returns whether the
 * backend reported them. */
static bool run(const pllm_model *m, bool timer, outputs *o, pllm_engine_stats *es,
                pllm_cpu_phase_stats *ps, double *steps_s)
{
    memset(o, 0, sizeof *o);
    pllm_cpu_params cp;
    pllm_cpu_params_defaults(&cp);
    cp.n_threads = 2;
    cp.phase_stats = timer;
    pllm_backend be = {0};
    CHECK_OK(pllm_cpu_backend_create(&be, m, &cp));
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.block_size = 16;
    ep.n_blocks = 64;
    ep.max_seqs = N_REQ;
    ep.max_model_len = 256;
    pllm_engine *e = NULL;
    CHECK_OK(pllm_engine_create(&e, m, &be, NULL, &ep));
    bool have = false;
    *steps_s = 0;
    if (e) {
        for (int32_t r = 0; r < N_REQ; r++) {
            int32_t prompt[40];
            const int32_t n = 20 + 7 * r;
            for (int32_t i = 0; i < n; i++) prompt[i] = 3 + (i * (r + 5)) % (m->cfg.n_vocab - 3);
            pllm_request_params rp;
            pllm_request_params_defaults(&rp);
            rp.max_tokens = MAX_OUT;
            rp.ignore_eos = true;
            uint64_t id;
            CHECK_OK(pllm_engine_add(e, prompt, n, &rp, (void *)(intptr_t)r, &id));
        }
        while (pllm_engine_has_work(e)) {
            double t0 = wall();
            CHECK_OK(pllm_engine_step(e, on_done, o));
            *steps_s += wall() - t0;
        }
        pllm_engine_get_stats(e, es);
        pllm_engine_free(e);
    }
    have = pllm_cpu_backend_phase_stats(&be, ps);
    pllm_backend_free(&be);
    return have;
}

static void check_model(const pllm_model *m, const char *name)
{
    outputs off, on;
    pllm_engine_stats es_off, es_on;
    pllm_cpu_phase_stats ps_off, ps_on;
    double s_off, s_on;
    CHECK(!run(m, false, &off, &es_off, &ps_off, &s_off));
    CHECK(ps_off.steps == 0 && ps_off.work_s[PLLM_CPU_PH_ATTN] == 0);
    CHECK(run(m, true, &on, &es_on, &ps_on, &s_on));
    for (int32_t r = 0; r < N_REQ; r++) {
        CHECK(on.n[r] == MAX_OUT && off.n[r] == MAX_OUT);
        CHECK(memcmp(on.tokens[r], off.tokens[r], sizeof on.tokens[r]) == 0);
    }
    /* every forward pass, token and sampled row: the prompts and every output token but the
     * last (which is sampled, never fed back), one sampled row per output token */
    const int64_t prompt = 20 + 27 + 34;
    fprintf(stderr,
            "cpu_phase_stats %s: %lld passes (engine: %lld steps), %lld tokens, %lld sampled rows, "
            "%.4f s in the engine's steps\n",
            name, (long long)ps_on.steps, (long long)es_on.steps, (long long)ps_on.tokens,
            (long long)ps_on.samples, s_on);
    CHECK(ps_on.n_threads == 2);
    CHECK(ps_on.steps == es_on.steps);
    CHECK(ps_on.tokens == prompt + N_REQ * (MAX_OUT - 1));
    CHECK(ps_on.samples == N_REQ * MAX_OUT);
    int32_t n_moe = 0;
    for (int32_t l = 0; l < m->cfg.n_layer; l++) n_moe += pllm_layer_is_moe(&m->layers[l]);
    const bool moe = n_moe > 0, all_moe = n_moe == m->cfg.n_layer;
    double per_thread = 0;
    for (int ph = 0; ph < PLLM_CPU_PH_COUNT; ph++) {
        CHECK(ps_on.work_s[ph] >= 0 && ps_on.wait_s[ph] >= 0);
        CHECK(strcmp(pllm_cpu_phase_name((pllm_cpu_phase)ph), "?") != 0);
        per_thread += (ps_on.work_s[ph] + ps_on.wait_s[ph]) / ps_on.n_threads;
        const bool dense_ffn =
            ph == PLLM_CPU_PH_FFN_NORM || ph == PLLM_CPU_PH_GATE_UP || ph == PLLM_CPU_PH_DOWN;
        if (ph == PLLM_CPU_PH_MOE)
            CHECK(moe ? ps_on.work_s[ph] > 0 : ps_on.work_s[ph] + ps_on.wait_s[ph] == 0);
        else if (dense_ffn)
            CHECK(all_moe ? ps_on.work_s[ph] + ps_on.wait_s[ph] == 0 : ps_on.work_s[ph] > 0);
        else
            CHECK(ps_on.work_s[ph] > 0);
    }
    fprintf(stderr, "cpu_phase_stats %s: %.4f s a thread in phases\n", name, per_thread);
    CHECK(per_thread > 0 && per_thread <= s_on);
    CHECK(strcmp(pllm_cpu_phase_name(PLLM_CPU_PH_COUNT), "?") == 0);
}

static void check_env(void)
{
    pllm_cpu_params cp;
    setenv("PLLM_CPU_PHASE_STATS", "1", 1);
    CHECK_OK(pllm_cpu_params_defaults(&cp));
    CHECK(cp.phase_stats);
    setenv("PLLM_CPU_PHASE_STATS", "0", 1);
    CHECK_OK(pllm_cpu_params_defaults(&cp));
    CHECK(!cp.phase_stats);
    /* a bad value: named in the error, the field at its default, the other variables still read */
    setenv("PLLM_CPU_PHASE_STATS", "yes", 1);
    setenv("PLLM_CPU_MATH", "f32", 1);
    CHECK(pllm_cpu_params_defaults(&cp) == PLLM_ERR_INVALID);
    CHECK(strstr(pllm_errmsg(), "PLLM_CPU_PHASE_STATS=yes") != NULL);
    CHECK(!cp.phase_stats);
    CHECK(cp.math == PLLM_CPU_MATH_F32);
    unsetenv("PLLM_CPU_MATH");
    unsetenv("PLLM_CPU_PHASE_STATS");
    CHECK_OK(pllm_cpu_params_defaults(&cp));
    CHECK(!cp.phase_stats);
}

int main(int argc, char **argv)
{
    unsetenv("PLLM_CPU_PHASE_STATS");
    unsetenv("PLLM_CPU_MATH");
    check_env();
    for (int i = 1; i < argc; i++) { /* tests/cpu_workspace.py: random Qwen3-MoE GGUFs */
        pllm_model *m = NULL;
        CHECK_OK(pllm_model_load(&m, argv[i]));
        if (!m) continue;
        CHECK(m->cfg.n_expert > 0);
        check_model(m, argv[i]);
        pllm_model_free(m);
    }
    if (argc > 1) return pllm_test_finish("cpu_phase_stats");
    pllm_test_model_shape dense = {.n_vocab = 300,
                                   .n_embd = 64,
                                   .n_layer = 2,
                                   .n_head = 4,
                                   .n_head_kv = 2,
                                   .head_dim = 16,
                                   .n_ff = 96,
                                   .n_ctx_train = 1024,
                                   .name = "phase-stats-dense"};
    uint64_t rng = 11;
    pllm_test_model tm = {0};
    pllm_test_model_build(&tm, &dense, &rng);
    check_model(&tm.m, "dense");
    pllm_test_model_free(&tm);
    return pllm_test_finish("cpu_phase_stats");
}

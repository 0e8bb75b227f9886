/*
 * cpu_workspace: the CPU backend's workspace_bytes (model/backend.h) against what its first
 * step really allocates, on a mixture-of-experts model (the expert scratch is most of it) and a
 * dense one; and the engine's default KV budget leaving it out.
 *
 *     cpu_workspace [MODEL ...]   (tests/cpu_workspace.py gives tests/gen_hf_models.py's random
 *                                  Qwen3-MoE GGUFs, F32 and Q8_0; none: the in-memory dense model)
 *
 * For each model and math (float32; int8 where the model has quantized matrices): one engine
 * step of T = 512 prompt tokens (one sample); the bytes the heap grew by during that step
 * (mallinfo2: uordblks + hblkhd) must be covered by workspace_bytes(512, 8) (give or take
 * 64 KiB: the engine's own buffers of the step) and not overstated by more than 10% + 256 KiB.
 * Under AddressSanitizer mallinfo2 reports nothing, so only the bounds that need no measurement are
 * checked there (the MoE scratch's own size is a lower bound). Then the engine's default budget
 * (kv_bytes 0): half of kv_available less the workspace of max_batched_tokens (on a machine
 * with much memory the 4 GiB cap decides it; engine_loop checks the subtraction itself).
 */
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "tests/test_model.h"
#include "tests/testutil.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define MEASURE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEASURE 0
#endif
#endif
#ifndef MEASURE
#define MEASURE 1
#endif

static size_t heap_bytes(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static void check_model(const pllm_model *m, const char *name, pllm_cpu_math math)
{
    const int32_t T = 512;
    pllm_backend be = {0};
    pllm_cpu_params cp;
    pllm_cpu_params_defaults(&cp);
    cp.n_threads = 2;
    cp.math = math;
    CHECK_OK(pllm_cpu_backend_create(&be, m, &cp));
    if (!be.iface) return;
    CHECK(be.iface->workspace_bytes != NULL);
    size_t ws = 0, ws_big = 0;
    CHECK_OK(be.iface->workspace_bytes(be.ctx, T, 8, &ws));
    CHECK_OK(be.iface->workspace_bytes(be.ctx, 4 * T, 8, &ws_big));
    CHECK(ws_big > 3 * ws && ws_big < 4 * ws + ((size_t)1 << 20)); /* linear in the tokens */
    const pllm_model_config *cfg = &m->cfg;
    if (cfg->n_expert) { /* the expert outputs and hidden states alone */
        size_t R = (size_t)T * (size_t)cfg->n_expert_used;
        CHECK(ws >= R * ((size_t)cfg->n_embd + 2 * (size_t)cfg->n_ff_exp) * sizeof(float));
    }
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.block_size = 16;
    ep.n_blocks = 64;
    ep.max_batched_tokens = T;
    ep.max_seqs = 1;
    ep.max_model_len = 2 * T;
    pllm_engine *e = NULL;
    CHECK_OK(pllm_engine_create(&e, m, &be, NULL, &ep));
    if (e) {
        int32_t prompt[512];
        for (int32_t i = 0; i < T; i++) prompt[i] = 3 + i % (cfg->n_vocab - 3);
        pllm_request_params rp;
        pllm_request_params_defaults(&rp);
        rp.max_tokens = 1;
        rp.ignore_eos = true;
        uint64_t id;
        CHECK_OK(pllm_engine_add(e, prompt, T, &rp, NULL, &id));
        size_t before = heap_bytes();
        CHECK_OK(pllm_engine_step(e, NULL, NULL));
        size_t grew = heap_bytes() - before;
        fprintf(stderr,
                "cpu_workspace %s (%s math%s): first step of %d tokens allocated %zu bytes, "
                "workspace_bytes says %zu\n",
                name, math == PLLM_CPU_MATH_INT8 ? "int8" : "f32",
                pllm_cpu_backend_int_math(&be) ? ", integer path" : "", T, grew, ws);
        if (MEASURE) {
            CHECK(grew > 0 && ws + ((size_t)64 << 10) >= grew); /* the engine's own: small */
            CHECK(ws <= grew + grew / 10 + ((size_t)256 << 10));
        }
        while (pllm_engine_has_work(e)) CHECK_OK(pllm_engine_step(e, NULL, NULL));
        pllm_engine_free(e);
    }
    /* the default budget: half of kv_available less the workspace, in whole blocks */
    size_t avail = 0;
    CHECK_OK(be.iface->kv_available(be.ctx, &avail));
    CHECK_OK(be.iface->workspace_bytes(be.ctx, T, 64, &ws));
    ep.n_blocks = 0;
    ep.kv_bytes = 0;
    ep.max_seqs = 64;
    ep.max_model_len = 1 << 20; /* so max_seqs * max_model_len does not bound it */
    CHECK_OK(pllm_engine_create(&e, m, &be, NULL, &ep));
    if (e) {
        pllm_engine_stats st;
        pllm_engine_get_stats(e, &st);
        pllm_kv_layout l;
        CHECK_OK(be.iface->kv_layout(be.ctx, 16, &l));
        size_t bb = pllm_kv_block_bytes(&l), budget = PLLM_MIN((avail - ws) / 2, (size_t)4 << 30);
        fprintf(stderr, "cpu_workspace %s: default budget %d blocks, expected %zu\n", name,
                st.n_blocks, budget / bb);
        CHECK((size_t)st.n_blocks == PLLM_MIN(budget / bb, (size_t)INT32_MAX / 16));
        pllm_engine_free(e);
    }
    pllm_backend_free(&be);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        for (int i = 1; i < argc; i++) {
            pllm_model *m = NULL;
            CHECK_OK(pllm_model_load(&m, argv[i]));
            if (!m) continue;
            CHECK(m->cfg.n_expert > 0);
            check_model(m, argv[i], PLLM_CPU_MATH_F32);
            check_model(m, argv[i], PLLM_CPU_MATH_INT8);
            pllm_model_free(m);
        }
    } else {
        pllm_test_model_shape sh = {.n_vocab = 300,
                                    .n_embd = 64,
                                    .n_layer = 2,
                                    .n_head = 4,
                                    .n_head_kv = 2,
                                    .head_dim = 16,
                                    .n_ff = 96,
                                    .n_ctx_train = 1024,
                                    .name = "workspace-test"};
        uint64_t rng = 5;
        pllm_test_model tm = {0};
        pllm_test_model_build(&tm, &sh, &rng);
        check_model(&tm.m, "dense", PLLM_CPU_MATH_F32);
        pllm_test_model_free(&tm);
    }
    return pllm_test_finish("cpu_workspace");
}

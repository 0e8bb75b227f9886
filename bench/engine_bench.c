/*
 * engine_bench: the engine's own overhead (scheduler, KV manager, block pool, plan building,
 * stop checks) per step, on a null backend that computes nothing, and the prefix-cache hit
 * rate on a workload of shared-prefix groups whose members arrive interleaved.
 *
 *   build/bench/engine_bench [n_requests] [n_blocks] [n_groups] [max_bypass]
 *
 * Workload: n_requests prompts; each starts with its group's 512-token prefix followed by
 * 32..287 own tokens, and generates 16..143 tokens. Block size 16, max_seqs 256, budget 8192.
 */
#include "engine/engine.h"
#include "engine/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 32000

static pllm_status null_layout(void *c, int32_t bs, pllm_kv_layout *out)
{
    (void)c;
    *out = (pllm_kv_layout){
        .n_layer = 1, .n_head_kv = 1, .head_dim = 1, .block_size = bs, .dtype = PLLM_DTYPE_F32};
    return PLLM_OK;
}
static pllm_status null_avail(void *c, size_t *b)
{
    (void)c;
    *b = (size_t)1 << 30;
    return PLLM_OK;
}
static pllm_status null_init(void *c, const pllm_kv_layout *l)
{
    (void)c, (void)l;
    return PLLM_OK;
}
static pllm_status null_step(void *c, const pllm_batch_plan *pl, pllm_step_out *out)
{
    (void)c;
    for (int32_t k = 0; k < pl->n_samples; k++) {
        const pllm_seq_plan *s = &pl->seqs[pl->samples[k].seq];
        int32_t last = pl->tokens[s->token_start + s->n_new - 1];
        out->tokens[k] =
            (int32_t)(((uint32_t)last * 2654435761u + (uint32_t)s->n_ctx) % (VOCAB - 1)) + 1;
    }
    return PLLM_OK;
}
static void null_destroy(void *c)
{
    (void)c;
}
static const pllm_backend_iface null_iface = {
    .name = "null",
    .kv_layout = null_layout,
    .kv_available = null_avail,
    .kv_init = null_init,
    .step = null_step,
    .destroy = null_destroy,
};

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void on_done(const pllm_completion *c, void *arg)
{
    (void)c;
    (*(int64_t *)arg)++;
}

int main(int argc, char **argv)
{
    int32_t n_req = argc > 1 ? atoi(argv[1]) : 10000;
    int32_t n_blocks = argc > 2 ? atoi(argv[2]) : 16384;
    int32_t n_groups = argc > 3 ? atoi(argv[3]) : 100;
    int32_t max_bypass = argc > 4 ? atoi(argv[4]) : -1;
    pllm_model model = {0};
    model.cfg.n_vocab = VOCAB;
    model.cfg.n_ctx_train = 4096;
    pllm_backend be = {.iface = &null_iface, .ctx = NULL};
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.n_blocks = n_blocks;
    ep.max_seqs = 256;
    ep.max_batched_tokens = 8192;
    if (max_bypass >= 0) ep.max_bypass = max_bypass;
    pllm_engine *e = NULL;
    if (pllm_engine_create(&e, &model, &be, NULL, &ep) != PLLM_OK) {
        fprintf(stderr, "engine_bench: %s\n", pllm_errmsg());
        return 1;
    }
    uint64_t s = 12345;
    int32_t(*prefix)[512] = malloc((size_t)n_groups * sizeof *prefix);
    for (int32_t g = 0; g < n_groups; g++)
        for (int32_t i = 0; i < 512; i++) prefix[g][i] = (int32_t)(rng(&s) % VOCAB);
    int32_t prompt[1024];
    double t0 = pllm_now();
    for (int32_t r = 0; r < n_req; r++) {
        int32_t g = (int32_t)(rng(&s) % (uint64_t)n_groups),
                n = 512 + 32 + (int32_t)(rng(&s) % 256);
        memcpy(prompt, prefix[g], sizeof prefix[g]);
        for (int32_t i = 512; i < n; i++) prompt[i] = (int32_t)(rng(&s) % VOCAB);
        pllm_request_params p;
        pllm_request_params_defaults(&p);
        p.max_tokens = 16 + (int32_t)(rng(&s) % 128);
        p.ignore_eos = true;
        if (pllm_engine_add(e, prompt, n, &p, NULL, NULL) != PLLM_OK) {
            fprintf(stderr, "engine_bench: add: %s\n", pllm_errmsg());
            return 1;
        }
    }
    double t1 = pllm_now();
    int64_t done = 0;
    while (pllm_engine_has_work(e)) {
        if (pllm_engine_step(e, on_done, &done) != PLLM_OK) {
            fprintf(stderr, "engine_bench: step: %s\n", pllm_errmsg());
            return 1;
        }
    }
    double t2 = pllm_now();
    pllm_engine_stats st;
    pllm_engine_get_stats(e, &st);
    printf("engine_bench: %d requests, %d blocks of %d, %d groups, max_bypass %d, %lld grouped\n",
           n_req, st.n_blocks, st.block_size, n_groups, ep.max_bypass,
           (long long)pllm_sched_n_grouped(pllm_engine_sched(e)));
    printf("  add: %.3f s (%.1f us/request)\n", t1 - t0, (t1 - t0) * 1e6 / n_req);
    printf("  run: %.3f s, %lld steps, %.1f us/step, %lld completions\n", t2 - t1,
           (long long)st.steps, (t2 - t1) * 1e6 / (double)st.steps, (long long)done);
    printf("  prompt tokens %lld: cached %lld (hit rate %.1f%%), computed %lld; output %lld; "
           "preemptions %lld; peak blocks %d\n",
           (long long)st.prompt_tokens, (long long)st.prompt_tokens_cached,
           100.0 * (double)st.prompt_tokens_cached / (double)st.prompt_tokens,
           (long long)st.prompt_tokens_computed, (long long)st.output_tokens,
           (long long)st.preemptions, st.peak_blocks_used);
    pllm_engine_free(e);
    free(prefix);
    return 0;
}

/*
 * test_model.c: test_model.h.
 */
#include "tests/test_model.h"
#include "tests/testutil.h"

#include <string.h>

static pllm_tensor mat(float **at, uint64_t *rng, int64_t rows, int64_t cols, float scale,
                       const char *name)
{
    float *p = *at;
    for (int64_t i = 0; i < rows * cols; i++) p[i] = scale * pllm_test_randf(rng);
    *at += rows * cols;
    return (pllm_tensor){.data = p,
                         .dtype = PLLM_DTYPE_F32,
                         .n_rows = rows,
                         .n_cols = cols,
                         .row_bytes = (size_t)cols * 4,
                         .name = name};
}

static const float *vec(float **at, uint64_t *rng, int64_t n)
{
    float *p = *at;
    for (int64_t i = 0; i < n; i++) p[i] = 1.0f + 0.1f * pllm_test_randf(rng);
    *at += n;
    return p;
}

void pllm_test_model_build(pllm_test_model *tm, const pllm_test_model_shape *s, uint64_t *rng)
{
    memset(tm, 0, sizeof *tm);
    const int64_t E = s->n_embd, F = s->n_ff, V = s->n_vocab, NL = s->n_layer;
    const int64_t qd = (int64_t)s->n_head * s->head_dim, kvd = (int64_t)s->n_head_kv * s->head_dim;
    const size_t n = (size_t)(V * E + E + NL * (2 * E + qd * E + 2 * kvd * E + E * qd + 3 * F * E));
    tm->store = malloc(sizeof(float) * n);
    tm->layers = calloc((size_t)NL, sizeof *tm->layers);
    if (!tm->store || !tm->layers) {
        fprintf(stderr, "test model: out of memory\n");
        exit(1);
    }
    float *at = tm->store;
    tm->m.cfg = (pllm_model_config){.arch = PLLM_ARCH_LLAMA,
                                    .n_vocab = s->n_vocab,
                                    .n_embd = s->n_embd,
                                    .n_layer = s->n_layer,
                                    .n_head = s->n_head,
                                    .n_head_kv = s->n_head_kv,
                                    .head_dim = s->head_dim,
                                    .n_ff = s->n_ff,
                                    .n_ctx_train = s->n_ctx_train,
                                    .norm_eps = 1e-5f,
                                    .rope_theta = 10000.0f,
                                    .rope_dim = s->head_dim,
                                    .rope_mode = PLLM_ROPE_NORM,
                                    .tied_embeddings = true};
    tm->m.name = (char *)s->name; /* a test model is never freed by pllm_model_free */
    tm->m.tok_embd = mat(&at, rng, V, E, 1.0f, "token_embd");
    tm->m.output = tm->m.tok_embd;
    tm->m.output_norm = vec(&at, rng, E);
    for (int64_t l = 0; l < NL; l++) {
        pllm_layer_weights *w = &tm->layers[l];
        w->attn_norm = vec(&at, rng, E);
        w->ffn_norm = vec(&at, rng, E);
        w->wq = mat(&at, rng, qd, E, s->s_qk, "wq");
        w->wk = mat(&at, rng, kvd, E, s->s_qk, "wk");
        w->wv = mat(&at, rng, kvd, E, s->s_v, "wv");
        w->wo = mat(&at, rng, E, qd, s->s_o, "wo");
        w->w_gate = mat(&at, rng, F, E, s->s_ffn, "w_gate");
        w->w_up = mat(&at, rng, F, E, s->s_ffn, "w_up");
        w->w_down = mat(&at, rng, E, F, s->s_ffn, "w_down");
    }
    tm->m.layers = tm->layers;
}

void pllm_test_model_free(pllm_test_model *tm)
{
    free(tm->store);
    free(tm->layers);
    memset(tm, 0, sizeof *tm);
}

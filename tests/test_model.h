/*
 * test_model.h: a random llama-shaped model in memory for backend and engine tests (F32
 * weights, tied embeddings, no file): matrices uniform in [-s, s) with the scales of the shape,
 * norm weights in 1 +- 0.1, drawn from *rng in one fixed order (token embedding, output norm,
 * then per layer attn norm, ffn norm, wq, wk, wv, wo, gate, up, down), so a test's model is the
 * same on every run and the caller may change any weight afterwards.
 */
#pragma once

#include "model/model.h"

#include <stdint.h>

typedef struct pllm_test_model_shape {
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    float s_qk, s_v, s_o, s_ffn; /* the scales of wq/wk, wv, wo, and gate/up/down */
    const char *name;
} pllm_test_model_shape;

typedef struct pllm_test_model {
    pllm_model m;
    pllm_layer_weights *layers; /* [n_layer] */
    float *store;
} pllm_test_model;

void pllm_test_model_build(pllm_test_model *tm, const pllm_test_model_shape *s, uint64_t *rng);
void pllm_test_model_free(pllm_test_model *tm);

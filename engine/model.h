/*
 * model.h: the model description every backend computes from: hyperparameters (config) and
 * weights, loaded from a GGUF file (Hugging Face safetensors directories come in a later
 * loader that fills the same structs).
 *
 * Weights: matrices are pllm_tensor views into the memory-mapped file, never copied; a matrix
 * is n_rows rows of n_cols elements, row-major, each row row_bytes long, in the file's dtype.
 * For a projection y = W x, W has one row per output (n_rows = out, n_cols = in), which is
 * GGUF's layout (ne[0] = in, ne[1] = out). Small 1-D vectors (norm weights, biases) are
 * converted to owned float32 arrays at load.
 *
 * RoPE convention: PLLM_ROPE_NORM rotates adjacent pairs (x[2i], x[2i+1]), as GGUF llama files
 * store Q/K (llama.cpp permutes Hugging Face weights at conversion); PLLM_ROPE_NEOX rotates
 * (x[i], x[i + rope_dim/2]), as Hugging Face checkpoints and GGUF qwen2 do. Frequencies:
 * theta_i = pos * rope_theta^(-2i/rope_dim), i in [0, rope_dim/2).
 *
 * Ownership: pllm_model_load() returns a model freed with pllm_model_free(); the model owns its
 * GGUF handle (g), so the tokenizer can be built from the same file while the model lives.
 */
#pragma once

#include "engine/common.h"
#include "engine/dtype.h"
#include "engine/gguf.h"

typedef enum pllm_arch {
    PLLM_ARCH_LLAMA = 0, /* Llama 2/3, TinyLlama, SmolLM, Mistral (same graph) */
    PLLM_ARCH_QWEN2,     /* llama graph + Q/K/V biases */
    PLLM_ARCH_COUNT
} pllm_arch;

typedef enum pllm_rope_mode {
    PLLM_ROPE_NORM = 0, /* adjacent pairs */
    PLLM_ROPE_NEOX,     /* halves */
} pllm_rope_mode;

typedef enum pllm_rope_scaling {
    PLLM_ROPE_SCALING_NONE = 0,
    PLLM_ROPE_SCALING_LINEAR,
    PLLM_ROPE_SCALING_LLAMA3,
} pllm_rope_scaling;

typedef struct pllm_model_config {
    pllm_arch arch;
    int32_t n_vocab;
    int32_t n_embd;       /* hidden size */
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;    /* < n_head for GQA; n_head % n_head_kv == 0 */
    int32_t head_dim;     /* usually n_embd / n_head */
    int32_t n_ff;         /* MLP hidden size */
    int32_t n_ctx_train;  /* context length the model was trained for */
    float norm_eps;       /* RMSNorm epsilon */
    float rope_theta;
    int32_t rope_dim;     /* rotated dims per head (== head_dim for llama) */
    pllm_rope_mode rope_mode;
    pllm_rope_scaling rope_scaling;
    float rope_factor;             /* LINEAR and LLAMA3 */
    float rope_low_freq_factor;    /* LLAMA3 */
    float rope_high_freq_factor;   /* LLAMA3 */
    int32_t rope_orig_ctx;         /* LLAMA3: original max position embeddings */
    bool tied_embeddings;  /* output projection reuses tok_embd */
    bool has_qkv_bias;
} pllm_model_config;

/* A 2-D weight view into the mapping. */
typedef struct pllm_tensor {
    const void *data;
    pllm_dtype dtype;
    int64_t n_rows, n_cols;
    size_t row_bytes;
    const char *name;      /* for messages; owned by the model's GGUF handle */
} pllm_tensor;

typedef struct pllm_layer_weights {
    const float *attn_norm;    /* [n_embd] */
    pllm_tensor wq;            /* [n_head*head_dim rows][n_embd] */
    pllm_tensor wk;            /* [n_head_kv*head_dim][n_embd] */
    pllm_tensor wv;            /* [n_head_kv*head_dim][n_embd] */
    pllm_tensor wo;            /* [n_embd][n_head*head_dim] */
    const float *bq, *bk, *bv; /* [rows of wq/wk/wv]; NULL unless has_qkv_bias */
    const float *ffn_norm;     /* [n_embd] */
    pllm_tensor w_gate;        /* [n_ff][n_embd] */
    pllm_tensor w_up;          /* [n_ff][n_embd] */
    pllm_tensor w_down;        /* [n_embd][n_ff] */
} pllm_layer_weights;

typedef struct pllm_model {
    pllm_model_config cfg;
    pllm_tensor tok_embd;      /* [n_vocab][n_embd] */
    const float *output_norm;  /* [n_embd] */
    pllm_tensor output;        /* [n_vocab][n_embd]; == tok_embd when tied */
    pllm_layer_weights *layers; /* [n_layer] */
    char *name;                /* general.name, or the file's base name */
    char *path;
    uint64_t identity;         /* hash of the file's header: keys prefix-cache blocks */
    size_t weight_bytes;       /* bytes of all tensors */
    pllm_gguf *gguf;           /* owned; NULL for non-GGUF sources */
    float *owned_f32;          /* backing store of the converted vectors */
} pllm_model;

/* Load a model from a GGUF file. Errors name the file, key or tensor, and offset. */
pllm_status pllm_model_load(pllm_model **out, const char *path);
void pllm_model_free(pllm_model *m);

const char *pllm_arch_name(pllm_arch a);

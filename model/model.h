/*
 * model.h: the model description every backend computes from: hyperparameters (config) and
 * weights, loaded from a GGUF file (model/gguf_model.c) or a Hugging Face directory
 * (config.json plus model.safetensors or a sharded model.safetensors.index.json;
 * model/hf_model.c). Both sources fill the same structs; model.c is the API over them.
 *
 * Weights: matrices are pllm_tensor views into the memory-mapped files, never copied; a matrix
 * is n_rows rows of n_cols elements, row-major, each row row_bytes long, in the file's dtype.
 * For a projection y = W x, W has one row per output (n_rows = out, n_cols = in), which is
 * GGUF's layout (ne[0] = in, ne[1] = out) and safetensors' ([out, in]). Small 1-D vectors (norm
 * weights, biases, RoPE frequency factors) are converted to owned float32 arrays at load.
 *
 * RoPE convention: PLLM_ROPE_NORM rotates adjacent pairs (x[2i], x[2i+1]), as GGUF llama and
 * mistral files store Q/K (llama.cpp's converter permutes the Hugging Face Q/K rows so that
 * pair (i, i + head_dim/2) becomes (2i, 2i+1)); PLLM_ROPE_NEOX rotates (x[i], x[i + rope_dim/2]),
 * as Hugging Face checkpoints (all architectures) and GGUF qwen2 do. The loader sets rope_mode
 * per source, so the same weights give the same logits from either format.
 * Frequencies: theta_i = pos * rope_theta^(-2i/rope_dim) / ff_i, i in [0, rope_dim/2), where
 *   ff_i = rope_freq_factors[i]   when rope_freq_factors != NULL (the complete per-pair
 *                                 scaling: Llama-3 rope scaling from config.json's rope_scaling
 *                                 or from GGUF's rope_freqs.weight; nothing else is applied),
 *   ff_i = rope_factor            when rope_scaling == PLLM_ROPE_SCALING_LINEAR,
 *   ff_i = 1                      otherwise;
 * LONGROPE (Phi-3 / Phi-4-mini, transformers' "longrope"): a token at position pos >=
 * rope_orig_ctx takes ff_i = rope_freq_factors_long[i] instead of the short factors (per
 * position, as vLLM applies them: a sequence within the original context computes exactly what
 * transformers does; past it, keys already cached keep their short-factor rotation where
 * transformers would re-rotate the whole sequence), and both cos and sin are multiplied by
 * rope_attn_factor (in double, before rounding to float).
 *
 * Fused projections (Phi-3's qkv_proj / attn_qkv and gate_up_proj / ffn_up of 2 n_ff rows) are
 * split at load into the row ranges wq, wk, wv and w_gate, w_up: views, nothing copied.
 *
 * Hugging Face directories: path is the directory; the tokenizer and chat template are in its
 * tokenizer.json and tokenizer_config.json (read by tokenizer/, not here); generation defaults
 * (generation_config.json) are in gen.
 *
 * Ownership: pllm_model_load() returns a model freed with pllm_model_free(); the model owns its
 * GGUF handle (gguf) or its safetensors files (hf), so the tokenizer can be built from the
 * same GGUF file while the model lives.
 */
#pragma once

#include "model/common.h"
#include "model/dtype.h"
#include "model/gguf.h"
#include "model/sampling.h"

typedef enum pllm_arch {
    PLLM_ARCH_LLAMA = 0, /* Llama 2/3, TinyLlama, SmolLM, Mistral (same graph) */
    PLLM_ARCH_QWEN2,     /* llama graph + Q/K/V biases */
    PLLM_ARCH_QWEN3,     /* llama graph + per-head RMSNorm of q and k before RoPE (q_norm,
                          * k_norm over head_dim, shared by all heads), no Q/K/V bias */
    PLLM_ARCH_GEMMA3,    /* Gemma 3 (text): q/k head norms, GeGLU (tanh GELU), post-attention and
                          * post-FFN norms, embeddings times embd_scale, attn_scale, sliding-window
                          * layers with their own RoPE base (see pllm_model_config) */
    PLLM_ARCH_COUNT
} pllm_arch;

typedef enum pllm_rope_mode {
    PLLM_ROPE_NORM = 0, /* adjacent pairs */
    PLLM_ROPE_NEOX,     /* halves */
} pllm_rope_mode;

typedef enum pllm_rope_scaling {
    PLLM_ROPE_SCALING_NONE = 0,
    PLLM_ROPE_SCALING_LINEAR,   /* theta_i / rope_factor */
    PLLM_ROPE_SCALING_LLAMA3,   /* per-pair factors: always given in pllm_model.rope_freq_factors */
    PLLM_ROPE_SCALING_LONGROPE, /* Phi-3: short factors in rope_freq_factors, long ones in
                                 * rope_freq_factors_long, cos/sin times rope_attn_factor */
} pllm_rope_scaling;

/* Where a model was loaded from. */
typedef enum pllm_model_format {
    PLLM_MODEL_GGUF = 0,
    PLLM_MODEL_HF, /* a Hugging Face directory (config.json + safetensors) */
} pllm_model_format;

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
    /* LINEAR: the factor. LLAMA3: the parameters rope_freq_factors was computed from, for
     * reports (0 when the source holds only the factors: GGUF rope_freqs.weight). */
    float rope_factor;
    float rope_low_freq_factor;    /* LLAMA3 */
    float rope_high_freq_factor;   /* LLAMA3 */
    int32_t rope_orig_ctx;         /* LLAMA3, LONGROPE: original max position embeddings */
    float rope_attn_factor;        /* LONGROPE: cos and sin are multiplied by it (1: none) */
    bool tied_embeddings;  /* output projection reuses tok_embd */
    bool has_qkv_bias;
    bool has_qk_norm; /* QWEN3, GEMMA3: q_norm, k_norm per layer */
    /* Gemma 3 (zero / false for the other families):
     *   embd_scale: the embedding rows are multiplied by it (sqrt(n_embd), rounded to the
     *     embedding's dtype as transformers does); 0: no scaling.
     *   attn_scale: attention scores are q.k * attn_scale (query_pre_attn_scalar^-0.5); 0:
     *     1/sqrt(head_dim).
     *   ffn_gelu: the MLP is gelu_tanh(gate) * up (GeGLU) instead of silu(gate) * up.
     *   has_post_norms: x += RMSNorm(attn_out) * attn_post_norm, and likewise after the MLP.
     *   sliding_window: W > 0 on models with sliding-window layers (pllm_layer_weights.window):
     *     on those layers query position q attends to key positions k with q - W < k <= q.
     *   rope_theta_local: the RoPE base of the sliding layers (no rope scaling there; the
     *     global layers use rope_theta and rope_scaling).
     * Norm weights are stored as the factor they multiply by: Gemma's (1 + w) is formed at load
     * (GGUF files already hold 1 + w, as llama.cpp's converter writes them). */
    float embd_scale;
    float attn_scale;
    bool ffn_gelu;
    bool has_post_norms;
    int32_t sliding_window;
    float rope_theta_local;
    /* Mixture of experts (Qwen3-MoE, Mixtral; 0 / false for dense models): the layers whose
     * pllm_layer_weights.router is set replace the MLP by n_expert expert MLPs (SwiGLU, hidden
     * n_ff_exp), n_expert_used of which take each token. Per token x (the ffn_norm output):
     *   p = softmax(router x) over the experts (float32);
     *   S = the n_expert_used largest p (ties: the lower expert index first);
     *   w_e = p_e, divided by sum_{S} p when moe_norm_topk (Mixtral always; Qwen3-MoE's
     *         norm_topk_prob);
     *   MLP(x) = sum_{e in S} w_e * down_e(silu(gate_e x) * up_e x).
     * The other layers (mlp_only_layers / decoder_sparse_step) keep the dense MLP of n_ff.
     * Shared expert (Qwen2-MoE; n_ff_shexp > 0): MLP(x) += sigmoid(shexp_gate . x) *
     * down_s(silu(gate_s x) * up_s x), a SwiGLU MLP of n_ff_shexp every token takes. */
    int32_t n_expert;
    int32_t n_expert_used;
    int32_t n_ff_exp;
    bool moe_norm_topk;
    int32_t n_ff_shexp;
} pllm_model_config;

/* A 2-D weight view into the mapping. */
typedef struct pllm_tensor {
    const void *data;
    pllm_dtype dtype;
    int64_t n_rows, n_cols;
    size_t row_bytes;
    const char *name;      /* for messages; owned by the model's GGUF or safetensors handle */
} pllm_tensor;

typedef struct pllm_layer_weights {
    const float *attn_norm;    /* [n_embd] */
    pllm_tensor wq;            /* [n_head*head_dim rows][n_embd] */
    pllm_tensor wk;            /* [n_head_kv*head_dim][n_embd] */
    pllm_tensor wv;            /* [n_head_kv*head_dim][n_embd] */
    pllm_tensor wo;            /* [n_embd][n_head*head_dim] */
    const float *bq, *bk, *bv; /* [rows of wq/wk/wv]; NULL unless has_qkv_bias */
    /* [head_dim] each; NULL unless has_qk_norm: after the projection (and bias), every q head
     * h is replaced by RMSNorm(q_h) * q_norm (eps norm_eps), every k head by
     * RMSNorm(k_h) * k_norm, before RoPE */
    const float *q_norm, *k_norm;
    const float *ffn_norm;     /* [n_embd] */
    /* [n_embd] each; NULL unless has_post_norms: the attention output and the MLP output are
     * normed (RMSNorm * weight) before they are added to the residual */
    const float *attn_post_norm, *ffn_post_norm;
    /* sliding-window layer: cfg.sliding_window, and RoPE with rope_theta_local; 0: global */
    int32_t window;
    pllm_tensor w_gate;        /* [n_ff][n_embd] */
    pllm_tensor w_up;          /* [n_ff][n_embd] */
    pllm_tensor w_down;        /* [n_embd][n_ff] */
    /* MoE layer (router.data != NULL; then w_gate, w_up, w_down are empty, n_rows 0): the router
     * [n_expert][n_embd], and expert e's exp_gate[e], exp_up[e] ([n_ff_exp][n_embd]) and
     * exp_down[e] ([n_embd][n_ff_exp]): views (GGUF's stacked ffn_*_exps are sliced per expert) */
    pllm_tensor router;
    const pllm_tensor *exp_gate, *exp_up, *exp_down;
    /* shared expert (cfg.n_ff_shexp > 0): its gate vector [n_embd] (float32), and its SwiGLU
     * MLP: shexp_gate_w, shexp_up ([n_ff_shexp][n_embd]), shexp_down ([n_embd][n_ff_shexp]) */
    const float *shexp_inp;
    pllm_tensor shexp_gate_w, shexp_up, shexp_down;
} pllm_layer_weights;

/*
 * Generation defaults a model ships (Hugging Face generation_config.json; when that file is
 * absent, the bos/eos ids of config.json, as transformers does), for a request that sets
 * none. GGUF files carry their EOS ids in the tokenizer metadata (pllm_tokenizer_stop_ids)
 * and may carry general.sampling.{temp,top_k,top_p,min_p,penalty_repeat}, read into the
 * same fields. Each has_* flag says whether the file gave the value.
 */
typedef struct pllm_generation_defaults {
    int32_t *eos_ids;          /* [n_eos], owned: eos_token_id (an int or a list) */
    int32_t n_eos;
    bool has_bos;
    int32_t bos_id;
    bool has_do_sample, do_sample;
    bool has_temperature;
    float temperature;
    bool has_top_p;
    float top_p;
    bool has_top_k;
    int32_t top_k;
    bool has_min_p;
    float min_p;
    bool has_repetition_penalty;
    float repetition_penalty;
    bool has_max_new_tokens;
    int32_t max_new_tokens;
} pllm_generation_defaults;

typedef struct pllm_hf_files pllm_hf_files; /* the open safetensors files of an HF directory */

typedef struct pllm_model {
    pllm_model_config cfg;
    pllm_model_format format;
    const char *source_arch;   /* as the file names it: "llama", "mistral", "qwen2" */
    pllm_tensor tok_embd;      /* [n_vocab][n_embd] */
    const float *output_norm;  /* [n_embd] */
    pllm_tensor output;        /* [n_vocab][n_embd]; == tok_embd when tied */
    pllm_layer_weights *layers; /* [n_layer] */
    const float *rope_freq_factors;      /* [rope_dim/2] or NULL: per-pair divisors of theta_i
                                          * (see the top of this file); set for LLAMA3 scaling,
                                          * and LONGROPE's short factors */
    const float *rope_freq_factors_long; /* [rope_dim/2]: LONGROPE's long factors, else NULL */
    pllm_generation_defaults gen;
    char *name;                /* general.name, or the file's (directory's) base name */
    char *path;                /* the GGUF file or the HF directory as given */
    uint64_t identity;         /* hash of the headers (GGUF header; config.json + safetensors
                                * headers): keys prefix-cache blocks */
    size_t weight_bytes;       /* bytes of all tensors */
    pllm_gguf *gguf;           /* owned; NULL for HF directories */
    pllm_hf_files *hf;         /* owned; NULL for GGUF */
    float *owned_f32;          /* backing store of the converted vectors */
    pllm_tensor *owned_experts; /* backing store of the layers' exp_gate/exp_up/exp_down views */
    /* static; NULL without experts: how the files hold them. HF: "per-expert" (one tensor per
     * expert and projection), "fused" (transformers 5: mlp.experts.gate_up_proj/down_proj of
     * every expert), "mixed" (some layers each way). GGUF: "stacked" (ffn_*_exps),
     * "per-expert" (older Mixtral files), "mixed". */
    const char *expert_layout;
} pllm_model;

/* Whether layer l is a mixture-of-experts layer (see pllm_model_config). */
static inline bool pllm_layer_is_moe(const pllm_layer_weights *l)
{
    return l->router.data != NULL;
}

/*
 * Load a model from a GGUF file or a Hugging Face directory (path is a directory). Errors name
 * the file, the key/field or tensor, and a byte offset where the format has one.
 * Supported architectures: llama (with experts: Mixtral), mistral, qwen2, qwen2moe, qwen3,
 * qwen3moe, phi3, gemma3 (GGUF general.architecture), and as config.json model_type also qwen2_moe,
 * qwen3_moe and mixtral; anything else is PLLM_ERR_UNSUPPORTED with that list.
 */
pllm_status pllm_model_load(pllm_model **out, const char *path);
void pllm_model_free(pllm_model *m);

const char *pllm_arch_name(pllm_arch a);
const char *pllm_model_format_name(pllm_model_format f); /* "gguf", "hf" */

/* Overlay the model's generation defaults onto p: each sampling field the model's files give
 * (temperature, top_k, top_p, min_p, repetition_penalty) replaces p's; the rest of p is
 * untouched. As vLLM does with generation_config.json, do_sample is not consulted (a file that
 * sets temperature means it). Returns the number of fields set. */
int pllm_model_apply_generation_defaults(const pllm_model *m, pllm_sampling_params *p);

/* PLLM_OK while every file the model maps (the GGUF file, or each safetensors shard) is as it
 * was at load; else PLLM_ERR_IO naming the file that was truncated or rewritten (see
 * mapped_file.h). One fstat per file: call after each phase that read weights (each engine
 * step) and stop on error. The loader itself checks after reading the norm/bias vectors. */
pllm_status pllm_model_check_files(const pllm_model *m);

/* Append a one-line JSON description of the model to out (for `pllm info`): format, path,
 * architecture, every hyperparameter, RoPE (mode, scaling, factors), tensor dtype counts,
 * weight bytes, shard files and generation defaults. */
pllm_status pllm_model_describe(const pllm_model *m, pllm_buf *out);

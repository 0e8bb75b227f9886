/*
 * hf_model.h: the Hugging Face directory loader behind pllm_model_load() (internal to model/;
 * callers use model.h).
 *
 * A directory holds:
 *   config.json                      architecture and hyperparameters (hf_config.c)
 *   generation_config.json           optional: default EOS ids and sampling (hf_config.c)
 *   model.safetensors                the weights, or
 *   model.safetensors.index.json     {"weight_map": {tensor name: shard file name}} plus shards
 * Tensor names (transformers' LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM):
 *   model.embed_tokens.weight [vocab, hidden]      model.norm.weight [hidden]
 *   lm_head.weight [vocab, hidden] (absent when tie_word_embeddings)
 *   model.layers.N.input_layernorm.weight           model.layers.N.post_attention_layernorm.weight
 *   model.layers.N.self_attn.{q,k,v,o}_proj.weight
 *   model.layers.N.self_attn.{q,k,v}_proj.bias (qwen2)
 *   model.layers.N.mlp.{gate,up,down}_proj.weight
 *   experts (Qwen3MoeForCausalLM): model.layers.N.mlp.gate.weight [n_expert, hidden] (router),
 *     model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight
 *   experts (MixtralForCausalLM): model.layers.N.block_sparse_moe.gate.weight,
 *     model.layers.N.block_sparse_moe.experts.E.{w1,w3,w2}.weight (gate, up, down)
 *   experts, fused as transformers 5 saves them (its conversion_mapping.py for qwen2_moe,
 *     qwen3_moe and mixtral, read backwards: MergeModulelist(dim=0) stacks the experts,
 *     Concatenate(dim=1) joins gate and up; MixtralExperts / Qwen2MoeExperts hold them as
 *     parameters without a .weight suffix), any of the three model types:
 *     model.layers.N.mlp.gate.weight [n_expert, hidden] (Mixtral's router renamed),
 *     model.layers.N.mlp.experts.gate_up_proj [n_expert, 2 * ff, hidden]: expert e's gate rows
 *       [0, ff), then its up rows [ff, 2 ff) (nn.Linear's [out, in] per expert, no transpose),
 *     model.layers.N.mlp.experts.down_proj [n_expert, hidden, ff];
 *     Qwen2-MoE's shared expert keeps its names. Each expert's matrices are views into the
 *     mapping. The layout is chosen per layer; a layer holding both, or a fused tensor of another
 *     shape (expert count, one half, transposed [n_expert, in, out]) is a load error. (Where
 *     hidden == 2 ff a transposed gate_up_proj has the very shape expected and cannot be told
 *     apart; transformers 5 writes these model types untransposed: is_transposed=False, the
 *     default of its use_experts_implementation.)
 * Other tensors in the files are ignored. Matrices stay in the mapping (F32, F16 or BF16);
 * vectors are converted to float32 into the model's owned store. Q/K are used unpermuted
 * with NEOX rotation.
 */
#pragma once

#include "model/model.h"
#include "model/safetensors.h"

#include <jansson.h>

struct pllm_hf_files {
    char *weights_file;          /* model.safetensors or model.safetensors.index.json (full path) */
    int32_t n_files;
    pllm_safetensors **files;    /* [n_files]: the shards in the index's order of first mention */
};

/* Fill m (zeroed by the caller, path set) from the directory dir. */
pllm_status pllm_hf_model_init(pllm_model *m, const char *dir);
void pllm_hf_files_free(pllm_hf_files *f);

/* hf_config.c ---------------------------------------------------------------------------- */

/* config.json as the loader needs it. */
typedef struct pllm_hf_config {
    pllm_model_config cfg;       /* every field set; rope_mode NEOX */
    const char *source_arch;     /* static: "llama", "mistral", "qwen2", "qwen3", "phi3" */
    bool fused_proj;             /* phi3: qkv_proj and gate_up_proj hold the fused rows */
    bool multimodal;             /* gemma3 (Gemma3ForConditionalGeneration): the text model's
                                  * fields are in text_config, its tensors under
                                  * model.language_model. or language_model.model. */
    uint8_t layer_sliding[1024]; /* gemma3: 1 for the sliding-window layers */
    uint8_t layer_moe[1024];     /* qwen3_moe, mixtral: 1 for the layers with experts */
    bool mixtral;                /* the experts are block_sparse_moe.experts.N.w1/w3/w2, the
                                  * router block_sparse_moe.gate (else mlp.experts.N.gate_proj/
                                  * up_proj/down_proj and mlp.gate: Qwen3-MoE) */
    float rope_short[512];       /* LONGROPE: short_factor, long_factor ([rope_dim / 2]) */
    float rope_long[512];
    bool has_bos;                /* config.json's own bos/eos, the fallback when there is no */
    int32_t bos_id;              /* generation_config.json */
    int32_t n_eos;
    int32_t eos_ids[64];
} pllm_hf_config;

/* Read a JSON file of at most 64 MiB. A missing file is PLLM_ERR_NOT_FOUND (message set);
 * bad JSON names the file, line, column and byte offset. */
pllm_status pllm_hf_read_json(const char *path, json_t **out);
/* Parse config.json (path is used in messages). */
pllm_status pllm_hf_parse_config(const char *path, const json_t *root, pllm_hf_config *out);
/* Parse generation_config.json into g (eos_ids allocated; freed by the model). */
pllm_status pllm_hf_parse_generation_config(const char *path, const json_t *root,
                                            pllm_generation_defaults *g);
/* Llama-3 per-pair frequency factors ff[rope_dim/2] from c's LLAMA3 parameters. */
void pllm_rope_llama3_factors(float *ff, const pllm_model_config *c);

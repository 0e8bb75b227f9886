/*
 * fuzz_hf_config.c: config.json and generation_config.json of Hugging Face directories. The
 * input is parsed as JSON (as pllm_hf_read_json() does) and handed to both parsers; what
 * parse_config accepts must be a usable configuration (positive sizes, heads dividing, head
 * dimension even, eos ids in range of what the field allowed).
 */
#include "tests/fuzz/fuzz_common.h"

#include "model/hf_model.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t jerr;
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return 0;
    if (!json_is_object(root)) {
        json_decref(root);
        return 0;
    }
    pllm_hf_config hc;
    pllm_status st = pllm_hf_parse_config("config.json", root, &hc);
    FUZZ_ERR_HAS_MSG(st);
    fuzz_note("config", st);
    if (st == PLLM_OK) {
        const pllm_model_config *c = &hc.cfg;
        FUZZ_CHECK(c->n_vocab > 0 && c->n_embd > 0 && c->n_layer > 0 && c->n_ff > 0, "sizes");
        FUZZ_CHECK(c->n_head > 0 && c->n_head_kv > 0 && c->n_head % c->n_head_kv == 0, "heads %d/%d", c->n_head,
                   c->n_head_kv);
        FUZZ_CHECK(c->head_dim > 0 && c->head_dim % 2 == 0 && c->rope_dim > 0 && c->rope_dim <= c->head_dim,
                   "head_dim %d rope_dim %d", c->head_dim, c->rope_dim);
        FUZZ_CHECK(c->n_ctx_train > 0 && c->norm_eps > 0 && c->rope_theta > 0, "ctx/eps/theta");
        FUZZ_CHECK(hc.n_eos >= 0 && hc.n_eos <= (int32_t)PLLM_ARRAY_LEN(hc.eos_ids), "n_eos %d", hc.n_eos);
        for (int32_t i = 0; i < hc.n_eos; i++) FUZZ_CHECK(hc.eos_ids[i] >= 0, "eos id %d", hc.eos_ids[i]);
        if (c->rope_scaling == PLLM_ROPE_SCALING_LLAMA3) {
            float ff[512];
            FUZZ_CHECK(c->rope_dim / 2 <= 512, "rope_dim %d", c->rope_dim);
            pllm_rope_llama3_factors(ff, c);
            for (int i = 0; i < c->rope_dim / 2; i++) FUZZ_CHECK(ff[i] > 0, "llama3 factor %d = %g", i, ff[i]);
        }
        if (c->arch == PLLM_ARCH_GEMMA3) /* Gemma 3: a window, a scale, a local base */
            FUZZ_CHECK(c->sliding_window > 0 && c->attn_scale > 0 && c->rope_theta_local > 0 &&
                           c->has_post_norms && c->ffn_gelu,
                       "gemma3 window %d scale %g local %g", c->sliding_window, c->attn_scale,
                       c->rope_theta_local);
        if (c->n_expert) { /* experts: 1 <= used <= count, an FFN size, layers in range */
            FUZZ_CHECK(c->n_expert_used >= 1 && c->n_expert_used <= c->n_expert && c->n_ff_exp > 0,
                       "experts %d used %d ff %d", c->n_expert, c->n_expert_used, c->n_ff_exp);
            for (int32_t i = c->n_layer; i < (int32_t)PLLM_ARRAY_LEN(hc.layer_moe); i++)
                FUZZ_CHECK(!hc.layer_moe[i], "moe layer %d past %d layers", i, c->n_layer);
        }
        if (c->rope_scaling == PLLM_ROPE_SCALING_LONGROPE) {
            FUZZ_CHECK(c->rope_dim / 2 <= (int32_t)PLLM_ARRAY_LEN(hc.rope_short), "rope_dim %d",
                       c->rope_dim);
            FUZZ_CHECK(c->rope_attn_factor > 0 && c->rope_orig_ctx > 0, "longrope attn %g orig %d",
                       c->rope_attn_factor, c->rope_orig_ctx);
            for (int i = 0; i < c->rope_dim / 2; i++)
                FUZZ_CHECK(hc.rope_short[i] > 0 && hc.rope_long[i] > 0, "longrope factor %d", i);
        }
    }
    pllm_generation_defaults g = {0};
    st = pllm_hf_parse_generation_config("generation_config.json", root, &g);
    FUZZ_ERR_HAS_MSG(st);
    for (int32_t i = 0; i < g.n_eos; i++) FUZZ_CHECK(g.eos_ids[i] >= 0, "eos id %d", g.eos_ids[i]);
    free(g.eos_ids);
    json_decref(root);
    return 0;
}

/*
 * gguf_model.c: the GGUF file loader behind pllm_model_load(): hyperparameters from the
 * architecture's metadata keys, weights as views into the mapping, vectors converted to float32,
 * general.sampling.* as generation defaults.
 */
#include "model/gguf_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Architectures accepted from general.architecture, and the graph they run on. */
static const struct {
    const char *name;
    pllm_arch arch;
} g_gguf_archs[] = {{"llama", PLLM_ARCH_LLAMA},    {"mistral", PLLM_ARCH_LLAMA},
                    {"qwen2", PLLM_ARCH_QWEN2},    {"qwen3", PLLM_ARCH_QWEN3},
                    {"qwen3moe", PLLM_ARCH_QWEN3}, /* qwen3 with experts (expert_count) */
                    {"qwen2moe", PLLM_ARCH_QWEN2}, /* qwen2 with experts and a shared expert */
                    {"phi3", PLLM_ARCH_LLAMA}, /* the llama graph on fused attn_qkv / ffn_up rows,
                                                  NEOX */
                    {"gemma3", PLLM_ARCH_GEMMA3}};

typedef struct loader {
    pllm_model *m;
    const pllm_gguf *g;
    const char *prefix;       /* metadata prefix: the architecture name */
    uint32_t swa_pattern;     /* gemma3: layer i is global when (i + 1) % pattern == 0 */
    const uint8_t *swa_flags; /* gemma3: or one bool per layer (true: sliding), or NULL */
    size_t f32_used, f32_cap;
} loader;

static pllm_status get_hp(loader *L, const char *suffix, uint32_t *out, bool required)
{
    char key[256];
    snprintf(key, sizeof key, "%s.%s", L->prefix, suffix);
    if (!required) return pllm_gguf_opt_u32(L->g, key, out);
    return pllm_gguf_get_u32(L->g, key, out);
}

static pllm_status get_hp_f(loader *L, const char *suffix, float *out)
{
    char key[256];
    snprintf(key, sizeof key, "%s.%s", L->prefix, suffix);
    return pllm_gguf_opt_f32(L->g, key, out);
}

static pllm_status find_tensor(loader *L, const char *name, bool required,
                               const pllm_gguf_tensor **out)
{
    *out = pllm_gguf_find_tensor(L->g, name);
    if (!*out && required)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: missing tensor '%s'", L->g->path, name);
    return PLLM_OK;
}

/* Rows [r0, r0 + n) of a matrix: a view (a fused projection's part). */
static pllm_tensor row_view(const pllm_tensor *t, int64_t r0, int64_t n)
{
    pllm_tensor v = *t;
    v.data = (const uint8_t *)t->data + (size_t)r0 * t->row_bytes;
    v.n_rows = n;
    return v;
}

/* A matrix with n_cols elements per row and n_rows rows. */
static pllm_status load_matrix(loader *L, const char *name, int64_t n_rows, int64_t n_cols,
                               pllm_tensor *out)
{
    const pllm_gguf_tensor *t;
    PLLM_TRY(find_tensor(L, name, true, &t));
    if (t->n_dims > 2 || t->ne[0] != n_cols || t->ne[1] != n_rows)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: tensor '%s' (entry at byte offset %zu) has shape [%lld, %lld] but "
                           "the hyperparameters need [%lld, %lld]",
                           L->g->path, name, t->info_offset, (long long)t->ne[0],
                           (long long)t->ne[1], (long long)n_cols, (long long)n_rows);
    if (!pllm_dtype_supported(t->dtype))
        return pllm_errorf(
            PLLM_ERR_UNSUPPORTED,
            "%s: tensor '%s' (entry at byte offset %zu): type %s is not supported yet", L->g->path,
            name, t->info_offset, pllm_dtype_name(t->dtype));
    *out = (pllm_tensor){.data = t->data,
                         .dtype = t->dtype,
                         .n_rows = n_rows,
                         .n_cols = n_cols,
                         .row_bytes = pllm_dtype_row_bytes(t->dtype, n_cols),
                         .name = t->name};
    L->m->weight_bytes += t->nbytes;
    return PLLM_OK;
}

/* A vector of n floats, converted to float32 into the model's owned store. */
static pllm_status load_vector(loader *L, const char *name, int64_t n, bool required,
                               const float **out)
{
    const pllm_gguf_tensor *t;
    *out = NULL;
    PLLM_TRY(find_tensor(L, name, required, &t));
    if (!t) return PLLM_OK;
    if (t->n_dims != 1 || t->ne[0] != n)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: tensor '%s' (entry at byte offset %zu) has shape [%lld, %lld] but "
                           "the hyperparameters need [%lld]",
                           L->g->path, name, t->info_offset, (long long)t->ne[0],
                           (long long)t->ne[1], (long long)n);
    if (t->dtype != PLLM_DTYPE_F32 && t->dtype != PLLM_DTYPE_F16 && t->dtype != PLLM_DTYPE_BF16)
        return pllm_errorf(
            PLLM_ERR_UNSUPPORTED,
            "%s: tensor '%s' (entry at byte offset %zu): a vector must be F32, F16 or BF16, not %s",
            L->g->path, name, t->info_offset, pllm_dtype_name(t->dtype));
    PLLM_ASSERT(L->f32_used + (size_t)n <= L->f32_cap);
    float *dst = L->m->owned_f32 + L->f32_used;
    pllm_dequantize_row(dst, t->data, t->dtype, n);
    L->f32_used += (size_t)n;
    L->m->weight_bytes += t->nbytes;
    *out = dst;
    return PLLM_OK;
}

/* Gemma 3's keys, with llama.cpp's defaults where a file has none: the sliding window
 * (required), every sliding_window_pattern-th layer global (6), the sliding layers' RoPE base
 * rope.freq_base_swa (10000), attention.scale (1/sqrt(key_length); n_embd/n_head for the 62-layer
 * 27B, as llama.cpp has it), embeddings times sqrt(n_embd). The norm weights hold 1 + w already. */
static pllm_status read_gemma3(loader *L)
{
    pllm_model_config *c = &L->m->cfg;
    const pllm_gguf *g = L->g;
    uint32_t win = 0, pattern = 6;
    PLLM_TRY(get_hp(L, "attention.sliding_window", &win, true));
    if (win < 1 || win > INT32_MAX)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: '%s.attention.sliding_window' = %u is invalid",
                           g->path, L->prefix, win);
    char key[256];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", L->prefix);
    const pllm_gguf_kv *pk = pllm_gguf_find(g, key);
    if (pk && pk->type == PLLM_GGUF_ARRAY) {
        if (pk->arr_type != PLLM_GGUF_BOOL || pk->arr_n != (uint64_t)c->n_layer)
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: key '%s' at byte offset %zu must be %d booleans (one per "
                               "layer)",
                               g->path, key, pk->offset, c->n_layer);
    } else {
        PLLM_TRY(get_hp(L, "attention.sliding_window_pattern", &pattern, false));
        if (pattern < 1)
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: '%s' = %u is invalid", g->path, key, pattern);
        pk = NULL;
    }
    c->sliding_window = (int32_t)win;
    L->swa_pattern = pattern;
    L->swa_flags = pk ? pk->arr_data : NULL;
    c->rope_theta_local = 10000.0f;
    PLLM_TRY(get_hp_f(L, "rope.freq_base_swa", &c->rope_theta_local));
    c->attn_scale = 1.0f / sqrtf((float)(c->n_layer == 62 ? c->n_embd / c->n_head : c->head_dim));
    PLLM_TRY(get_hp_f(L, "attention.scale", &c->attn_scale));
    if (!(c->rope_theta_local > 1) || !(c->attn_scale > 0 && isfinite(c->attn_scale)))
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: '%s.rope.freq_base_swa' = %g or '%s.attention.scale' = %g is "
                           "invalid",
                           g->path, L->prefix, c->rope_theta_local, L->prefix, c->attn_scale);
    c->embd_scale = sqrtf((float)c->n_embd);
    c->ffn_gelu = true;
    c->has_post_norms = true;
    return PLLM_OK;
}

/* Mixture of experts: {arch}.expert_count (0 or absent: dense), expert_used_count,
 * expert_feed_forward_length (Mixtral's llama files have none: feed_forward_length is the
 * experts'), expert_weights_norm (default true: llama.cpp renormalizes the top-k weights of
 * qwen3moe and Mixtral). Shared experts and other gating functions are refused. */
static pllm_status read_experts(loader *L)
{
    pllm_model_config *c = &L->m->cfg;
    const pllm_gguf *g = L->g;
    uint32_t n_exp = 0, n_used = 0, ff = (uint32_t)c->n_ff, n_shared = 0, gating = 1;
    PLLM_TRY(get_hp(L, "expert_count", &n_exp, false));
    const bool q2 = strcmp(L->prefix, "qwen2moe") == 0;
    const bool moe_arch = strcmp(L->prefix, "qwen3moe") == 0 || strcmp(L->prefix, "llama") == 0 ||
                          strcmp(L->prefix, "mistral") == 0 || q2;
    if ((strcmp(L->prefix, "qwen3moe") == 0 || q2) && n_exp == 0)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: architecture qwen3moe needs '%s.expert_count' > 0",
                           g->path, L->prefix);
    if (n_exp == 0) return PLLM_OK;
    if (!moe_arch)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: '%s.expert_count' = %u: experts are supported for qwen3moe, "
                           "qwen2moe and llama (Mixtral) files only",
                           g->path, L->prefix, n_exp);
    PLLM_TRY(get_hp(L, "expert_used_count", &n_used, true));
    PLLM_TRY(get_hp(L, "expert_feed_forward_length", &ff, false));
    PLLM_TRY(get_hp(L, "expert_shared_count", &n_shared, false));
    PLLM_TRY(get_hp(L, "expert_gating_func", &gating, false));
    if (n_exp > 4096 || n_used < 1 || n_used > n_exp || ff < 1 || ff > 1048576)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: experts '%s.expert_count' = %u, 'expert_used_count' = %u, "
                           "'expert_feed_forward_length' = %u are invalid (1 <= used <= count <= "
                           "4096)",
                           g->path, L->prefix, n_exp, n_used, ff);
    if (n_shared && !(q2 && n_shared == 1))
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: '%s.expert_shared_count' = %u: shared experts are supported for "
                           "qwen2moe (one) only",
                           g->path, L->prefix, n_shared);
    uint32_t ff_sh = 0; /* qwen2moe: the shared expert's FFN (llama.cpp's key) */
    if (q2) {
        PLLM_TRY(get_hp(L, "expert_shared_feed_forward_length", &ff_sh, true));
        if (ff_sh < 1 || ff_sh > 1048576)
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: '%s.expert_shared_feed_forward_length' = %u is invalid",
                               g->path, L->prefix, ff_sh);
    }
    if (gating != 1)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: '%s.expert_gating_func' = %u: only softmax gating (1) is supported",
                           g->path, L->prefix, gating);
    char key[256];
    snprintf(key, sizeof key, "%s.expert_weights_norm", L->prefix);
    bool norm = !q2; /* llama.cpp: qwen2moe keeps the top-k probabilities as they are */
    const pllm_gguf_kv *kv = pllm_gguf_find(g, key);
    if (kv) {
        if (kv->type != PLLM_GGUF_BOOL)
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s' at byte offset %zu must be a bool",
                               g->path, key, kv->offset);
        norm = kv->v.u != 0;
    }
    c->n_expert = (int32_t)n_exp;
    c->n_expert_used = (int32_t)n_used;
    c->n_ff_exp = (int32_t)ff;
    c->moe_norm_topk = norm;
    c->n_ff_shexp = (int32_t)ff_sh;
    return PLLM_OK;
}

static pllm_status read_config(loader *L)
{
    pllm_model_config *c = &L->m->cfg;
    const pllm_gguf *g = L->g;
    uint32_t n_embd, n_layer, n_head, n_head_kv = 0, n_ff, n_ctx = 0, rope_dim = 0, n_vocab = 0,
                                      head_dim = 0;
    PLLM_TRY(get_hp(L, "embedding_length", &n_embd, true));
    PLLM_TRY(get_hp(L, "block_count", &n_layer, true));
    PLLM_TRY(get_hp(L, "attention.head_count", &n_head, true));
    PLLM_TRY(get_hp(L, "attention.head_count_kv", &n_head_kv, false));
    PLLM_TRY(get_hp(L, "feed_forward_length", &n_ff, true));
    PLLM_TRY(get_hp(L, "context_length", &n_ctx, false));
    PLLM_TRY(get_hp(L, "rope.dimension_count", &rope_dim, false));
    PLLM_TRY(get_hp(L, "attention.key_length", &head_dim, false));
    PLLM_TRY(get_hp(L, "vocab_size", &n_vocab, false));
    if (!n_head_kv) n_head_kv = n_head;

#define CHECK_HP(cond, key, val)                                                                   \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: hyperparameter '%s.%s' = %u is invalid (%s)", \
                               g->path, L->prefix, key, (unsigned)(val), #cond);                   \
    } while (0)
    CHECK_HP(n_embd > 0 && n_embd <= 65536, "embedding_length", n_embd);
    CHECK_HP(n_layer > 0 && n_layer <= 1024, "block_count", n_layer);
    CHECK_HP(n_head > 0 && n_head <= 1024, "attention.head_count", n_head);
    CHECK_HP(n_head_kv > 0 && n_head % n_head_kv == 0, "attention.head_count_kv", n_head_kv);
    CHECK_HP(n_ff > 0 && n_ff <= 1048576, "feed_forward_length", n_ff);
    if (!head_dim) {
        CHECK_HP(n_embd % n_head == 0, "attention.head_count", n_head);
        head_dim = n_embd / n_head;
    }
    CHECK_HP(head_dim > 0 && head_dim % 2 == 0 && head_dim <= 1024, "attention.key_length",
             head_dim);
    if (!rope_dim) rope_dim = head_dim;
    CHECK_HP(rope_dim % 2 == 0 && rope_dim <= head_dim, "rope.dimension_count", rope_dim);
#undef CHECK_HP

    c->n_embd = (int32_t)n_embd;
    c->n_layer = (int32_t)n_layer;
    c->n_head = (int32_t)n_head;
    c->n_head_kv = (int32_t)n_head_kv;
    c->n_ff = (int32_t)n_ff;
    c->head_dim = (int32_t)head_dim;
    c->rope_dim = (int32_t)rope_dim;
    c->n_ctx_train = n_ctx ? (int32_t)PLLM_MIN(n_ctx, (uint32_t)INT32_MAX) : 2048;
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    PLLM_TRY(get_hp_f(L, "attention.layer_norm_rms_epsilon", &c->norm_eps));
    PLLM_TRY(get_hp_f(L, "rope.freq_base", &c->rope_theta));
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: '%s.attention.layer_norm_rms_epsilon' = %g is invalid", g->path,
                           L->prefix, c->norm_eps);
    if (!(c->rope_theta > 1))
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: '%s.rope.freq_base' = %g is invalid", g->path,
                           L->prefix, c->rope_theta);
    /* llama.cpp's converter permutes llama/mistral Q/K rows (NORM pairs); qwen2/qwen3 keep the
     * Hugging Face order (NEOX) */
    const bool phi3 = strcmp(L->prefix, "phi3") == 0;
    c->rope_mode = c->arch == PLLM_ARCH_QWEN2 || c->arch == PLLM_ARCH_QWEN3 || phi3 ||
                           c->arch == PLLM_ARCH_GEMMA3
                       ? PLLM_ROPE_NEOX
                       : PLLM_ROPE_NORM;
    c->rope_attn_factor = 1.0f;
    c->has_qkv_bias = c->arch == PLLM_ARCH_QWEN2;
    c->has_qk_norm = c->arch == PLLM_ARCH_QWEN3 || c->arch == PLLM_ARCH_GEMMA3;
    if (c->arch == PLLM_ARCH_GEMMA3) PLLM_TRY(read_gemma3(L));
    PLLM_TRY(read_experts(L));

    /* RoPE scaling: rope.scaling.type "linear" (factor), or Llama-3 style via rope_freqs. */
    char key[256];
    snprintf(key, sizeof key, "%s.rope.scaling.type", L->prefix);
    const pllm_gguf_kv *st = pllm_gguf_find(g, key);
    if (st) {
        pllm_gguf_str s;
        PLLM_TRY(pllm_gguf_get_str(g, key, &s));
        if (s.len == 4 && memcmp(s.s, "none", 4) == 0) {
            c->rope_scaling = PLLM_ROPE_SCALING_NONE;
        } else if (s.len == 6 && memcmp(s.s, "linear", 6) == 0) {
            c->rope_scaling = PLLM_ROPE_SCALING_LINEAR;
            c->rope_factor = 1.0f;
            PLLM_TRY(get_hp_f(L, "rope.scaling.factor", &c->rope_factor));
            if (!(c->rope_factor > 0))
                return pllm_errorf(PLLM_ERR_FORMAT, "%s: '%s.rope.scaling.factor' = %g is invalid",
                                   g->path, L->prefix, c->rope_factor);
        } else {
            return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                               "%s: key '%s' at byte offset %zu: rope scaling '%.*s' is not "
                               "supported (none, linear)",
                               g->path, key, st->offset, (int)s.len, s.s);
        }
    }
    /* Llama-3 rope scaling: llama.cpp's converter stores the per-pair factors as rope_freqs.weight
     * (read in load_weights); the parameters they came from are not in the file. */
    if (pllm_gguf_find_tensor(g, "rope_freqs.weight")) {
        if (c->rope_scaling != PLLM_ROPE_SCALING_NONE)
            return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                               "%s: tensor 'rope_freqs.weight' together with "
                               "'%s.rope.scaling.type' is not supported",
                               g->path, L->prefix);
        c->rope_scaling = PLLM_ROPE_SCALING_LLAMA3;
    }

    /* LongRoPE (phi3): llama.cpp's converter stores the factors as rope_factors_short.weight
     * and rope_factors_long.weight (read in load_weights), the original context and the
     * attention factor as rope.scaling.original_context_length / .attn_factor */
    const bool has_long = pllm_gguf_find_tensor(g, "rope_factors_long.weight") != NULL;
    if (has_long || pllm_gguf_find_tensor(g, "rope_factors_short.weight")) {
        if (!phi3 || c->rope_scaling != PLLM_ROPE_SCALING_NONE)
            return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                               "%s: tensors 'rope_factors_long/short.weight' (LongRoPE) are "
                               "supported for phi3 without other rope scaling only",
                               g->path);
        uint32_t orig = 0;
        PLLM_TRY(get_hp(L, "rope.scaling.original_context_length", &orig, true));
        if (orig < 1 || orig > INT32_MAX)
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: '%s.rope.scaling.original_context_length' = %u is invalid",
                               g->path, L->prefix, orig);
        PLLM_TRY(get_hp_f(L, "rope.scaling.attn_factor", &c->rope_attn_factor));
        if (!(c->rope_attn_factor > 0 && isfinite(c->rope_attn_factor)))
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: '%s.rope.scaling.attn_factor' = %g is invalid",
                               g->path, L->prefix, c->rope_attn_factor);
        c->rope_scaling = PLLM_ROPE_SCALING_LONGROPE;
        c->rope_orig_ctx = (int32_t)orig;
        c->rope_factor = (float)c->n_ctx_train / (float)orig;
    }

    /* Vocabulary size: from the metadata when present, else from the token list. */
    const pllm_gguf_kv *toks = pllm_gguf_find(g, "tokenizer.ggml.tokens");
    if (!n_vocab && toks && toks->type == PLLM_GGUF_ARRAY)
        n_vocab = (uint32_t)PLLM_MIN(toks->arr_n, (uint64_t)UINT32_MAX);
    if (!n_vocab) {
        const pllm_gguf_tensor *te = pllm_gguf_find_tensor(g, "token_embd.weight");
        if (te && te->n_dims == 2) n_vocab = (uint32_t)PLLM_MIN(te->ne[1], (int64_t)UINT32_MAX);
    }
    if (!n_vocab || n_vocab > (1u << 24))
        return pllm_errorf(
            PLLM_ERR_FORMAT,
            "%s: vocabulary size %u is invalid (from %s.vocab_size or tokenizer.ggml.tokens)",
            g->path, n_vocab, L->prefix);
    c->n_vocab = (int32_t)n_vocab;
    return PLLM_OK;
}

/* m->expert_layout (model.h) after a layer's projection read in layout (static). */
static void note_layout(pllm_model *m, const char *layout)
{
    m->expert_layout =
        !m->expert_layout || strcmp(m->expert_layout, layout) == 0 ? layout : "mixed";
}

/* Layer i's experts: the router ffn_gate_inp, then either the stacked ffn_{gate,up,down}_exps
 * (3-D, ne = [cols, rows, n_expert]: expert e's matrix is the e-th slab) or the older Mixtral
 * files' per-expert ffn_{gate,up,down}.E.weight. Shared-expert tensors are refused. */
static pllm_status load_experts(loader *L, int32_t i, pllm_layer_weights *l)
{
    pllm_model *m = L->m;
    const pllm_model_config *c = &m->cfg;
    const int32_t n = c->n_expert;
    char name[128];
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", (int)i);
    PLLM_TRY(load_matrix(L, name, n, c->n_embd, &l->router));
    if (c->n_ff_shexp) { /* qwen2moe: the shared expert and its gate vector */
        snprintf(name, sizeof name, "blk.%d.ffn_gate_inp_shexp.weight", (int)i);
        PLLM_TRY(load_vector(L, name, c->n_embd, true, &l->shexp_inp));
        snprintf(name, sizeof name, "blk.%d.ffn_gate_shexp.weight", (int)i);
        PLLM_TRY(load_matrix(L, name, c->n_ff_shexp, c->n_embd, &l->shexp_gate_w));
        snprintf(name, sizeof name, "blk.%d.ffn_up_shexp.weight", (int)i);
        PLLM_TRY(load_matrix(L, name, c->n_ff_shexp, c->n_embd, &l->shexp_up));
        snprintf(name, sizeof name, "blk.%d.ffn_down_shexp.weight", (int)i);
        PLLM_TRY(load_matrix(L, name, c->n_embd, c->n_ff_shexp, &l->shexp_down));
    }
    static const char *const shexp[] = {"ffn_gate_inp_shexp", "ffn_gate_shexp", "ffn_up_shexp",
                                        "ffn_down_shexp"};
    for (size_t k = 0; k < PLLM_ARRAY_LEN(shexp) && !c->n_ff_shexp; k++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", (int)i, shexp[k]);
        if (pllm_gguf_find_tensor(L->g, name))
            return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                               "%s: tensor '%s': shared experts are not supported", L->g->path,
                               name);
    }
    pllm_tensor *ts = m->owned_experts + (size_t)i * 3 * (size_t)n;
    l->exp_gate = ts;
    l->exp_up = ts + n;
    l->exp_down = ts + 2 * n;
    static const char *const kinds[3] = {"gate", "up", "down"};
    for (int k = 0; k < 3; k++) {
        const int64_t rows = k == 2 ? c->n_embd : c->n_ff_exp,
                      cols = k == 2 ? c->n_ff_exp : c->n_embd;
        pllm_tensor *dst = ts + (size_t)k * (size_t)n;
        snprintf(name, sizeof name, "blk.%d.ffn_%s_exps.weight", (int)i, kinds[k]);
        const pllm_gguf_tensor *t = pllm_gguf_find_tensor(L->g, name);
        if (!t) { /* older Mixtral files: one tensor per expert */
            for (int32_t e = 0; e < n; e++) {
                snprintf(name, sizeof name, "blk.%d.ffn_%s.%d.weight", (int)i, kinds[k], (int)e);
                if (!pllm_gguf_find_tensor(L->g, name))
                    return pllm_errorf(PLLM_ERR_FORMAT,
                                       "%s: missing tensor 'blk.%d.ffn_%s_exps.weight' (or the "
                                       "per-expert '%s')",
                                       L->g->path, (int)i, kinds[k], name);
                PLLM_TRY(load_matrix(L, name, rows, cols, &dst[e]));
            }
            note_layout(m, "per-expert");
            continue;
        }
        if (t->n_dims != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != n)
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: tensor '%s' (entry at byte offset %zu) has shape [%lld, %lld, "
                               "%lld] but the hyperparameters need [%lld, %lld, %d]",
                               L->g->path, name, t->info_offset, (long long)t->ne[0],
                               (long long)t->ne[1], (long long)t->ne[2], (long long)cols,
                               (long long)rows, (int)n);
        if (!pllm_dtype_supported(t->dtype))
            return pllm_errorf(
                PLLM_ERR_UNSUPPORTED,
                "%s: tensor '%s' (entry at byte offset %zu): type %s is not supported yet",
                L->g->path, name, t->info_offset, pllm_dtype_name(t->dtype));
        const size_t rb = pllm_dtype_row_bytes(t->dtype, cols);
        for (int32_t e = 0; e < n; e++)
            dst[e] = (pllm_tensor){.data = (const uint8_t *)t->data + (size_t)e * (size_t)rows * rb,
                                   .dtype = t->dtype,
                                   .n_rows = rows,
                                   .n_cols = cols,
                                   .row_bytes = rb,
                                   .name = t->name};
        m->weight_bytes += t->nbytes;
        note_layout(m, "stacked");
    }
    return PLLM_OK;
}

static pllm_status load_weights(loader *L)
{
    pllm_model *m = L->m;
    const pllm_model_config *c = &m->cfg;
    int64_t q_dim = (int64_t)c->n_head * c->head_dim, kv_dim = (int64_t)c->n_head_kv * c->head_dim;
    char name[128];

    /* Owned float store: 2 norms per layer + output norm (+ biases) (+ rope factors: 2 sets). */
    L->f32_cap = (size_t)c->n_layer *
                     (2 * (size_t)c->n_embd + (c->has_qkv_bias ? (size_t)(q_dim + 2 * kv_dim) : 0) +
                      (c->has_qk_norm ? 2 * (size_t)c->head_dim : 0) +
                      (c->has_post_norms ? 2 * (size_t)c->n_embd : 0) +
                      (c->n_ff_shexp ? (size_t)c->n_embd : 0)) +
                 (size_t)c->n_embd + (size_t)c->rope_dim;
    /* the vectors are in the file at 2 bytes or more per element: no allocation beyond that */
    if (L->f32_cap > L->g->size / 2)
        return pllm_errorf(
            PLLM_ERR_FORMAT,
            "%s: the hyperparameters need %zu norm/bias elements but the file has only %zu bytes",
            L->g->path, L->f32_cap, L->g->size);
    m->owned_f32 = pllm_malloc(L->f32_cap * sizeof(float));
    m->layers = pllm_calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->owned_f32 || !m->layers) return PLLM_ERR_NOMEM;
    if (c->n_expert) {
        size_t ne;
        if (!pllm_mul_size((size_t)c->n_layer * 3, (size_t)c->n_expert, &ne) ||
            !(m->owned_experts = pllm_calloc(ne, sizeof *m->owned_experts)))
            return PLLM_ERR_NOMEM;
    }

    PLLM_TRY(load_matrix(L, "token_embd.weight", c->n_vocab, c->n_embd, &m->tok_embd));
    PLLM_TRY(load_vector(L, "output_norm.weight", c->n_embd, true, &m->output_norm));
    if (pllm_gguf_find_tensor(L->g, "output.weight")) {
        PLLM_TRY(load_matrix(L, "output.weight", c->n_vocab, c->n_embd, &m->output));
        m->cfg.tied_embeddings = false;
    } else {
        m->output = m->tok_embd;
        m->cfg.tied_embeddings = true;
    }
    for (int32_t i = 0; i < c->n_layer; i++) {
        pllm_layer_weights *l = &m->layers[i];
#define NAME(s) (snprintf(name, sizeof name, "blk.%d." s, (int)i), name)
        PLLM_TRY(load_vector(L, NAME("attn_norm.weight"), c->n_embd, true, &l->attn_norm));
        if (pllm_gguf_find_tensor(L->g, NAME("attn_qkv.weight"))) { /* phi3: fused rows */
            pllm_tensor qkv;
            PLLM_TRY(load_matrix(L, name, q_dim + 2 * kv_dim, c->n_embd, &qkv));
            l->wq = row_view(&qkv, 0, q_dim);
            l->wk = row_view(&qkv, q_dim, kv_dim);
            l->wv = row_view(&qkv, q_dim + kv_dim, kv_dim);
        } else {
            PLLM_TRY(load_matrix(L, NAME("attn_q.weight"), q_dim, c->n_embd, &l->wq));
            PLLM_TRY(load_matrix(L, NAME("attn_k.weight"), kv_dim, c->n_embd, &l->wk));
            PLLM_TRY(load_matrix(L, NAME("attn_v.weight"), kv_dim, c->n_embd, &l->wv));
        }
        PLLM_TRY(load_matrix(L, NAME("attn_output.weight"), c->n_embd, q_dim, &l->wo));
        if (c->has_qkv_bias) {
            PLLM_TRY(load_vector(L, NAME("attn_q.bias"), q_dim, true, &l->bq));
            PLLM_TRY(load_vector(L, NAME("attn_k.bias"), kv_dim, true, &l->bk));
            PLLM_TRY(load_vector(L, NAME("attn_v.bias"), kv_dim, true, &l->bv));
        }
        if (c->has_qk_norm) {
            PLLM_TRY(load_vector(L, NAME("attn_q_norm.weight"), c->head_dim, true, &l->q_norm));
            PLLM_TRY(load_vector(L, NAME("attn_k_norm.weight"), c->head_dim, true, &l->k_norm));
        }
        PLLM_TRY(load_vector(L, NAME("ffn_norm.weight"), c->n_embd, true, &l->ffn_norm));
        if (c->has_post_norms) {
            PLLM_TRY(load_vector(L, NAME("post_attention_norm.weight"), c->n_embd, true,
                                 &l->attn_post_norm));
            PLLM_TRY(
                load_vector(L, NAME("post_ffw_norm.weight"), c->n_embd, true, &l->ffn_post_norm));
        }
        if (c->sliding_window)
            l->window =
                (L->swa_flags ? L->swa_flags[i] != 0 : (uint32_t)(i + 1) % L->swa_pattern != 0)
                    ? c->sliding_window
                    : 0;
        if (c->n_expert && pllm_gguf_find_tensor(L->g, NAME("ffn_gate_inp.weight"))) {
            PLLM_TRY(load_experts(L, i, l));
        } else if (!pllm_gguf_find_tensor(L->g, NAME("ffn_gate.weight")) &&
                   strcmp(m->source_arch, "phi3") ==
                       0) { /* phi3: ffn_up holds gate rows, then up */
            pllm_tensor gu;
            PLLM_TRY(load_matrix(L, NAME("ffn_up.weight"), 2 * (int64_t)c->n_ff, c->n_embd, &gu));
            l->w_gate = row_view(&gu, 0, c->n_ff);
            l->w_up = row_view(&gu, c->n_ff, c->n_ff);
        } else {
            PLLM_TRY(load_matrix(L, NAME("ffn_gate.weight"), c->n_ff, c->n_embd, &l->w_gate));
            PLLM_TRY(load_matrix(L, NAME("ffn_up.weight"), c->n_ff, c->n_embd, &l->w_up));
        }
        if (!pllm_layer_is_moe(l))
            PLLM_TRY(load_matrix(L, NAME("ffn_down.weight"), c->n_embd, c->n_ff, &l->w_down));
#undef NAME
    }
    if (c->rope_scaling == PLLM_ROPE_SCALING_LONGROPE) {
        const char *names[2] = {"rope_factors_short.weight", "rope_factors_long.weight"};
        const float **dst[2] = {&m->rope_freq_factors, &m->rope_freq_factors_long};
        for (int k = 0; k < 2; k++) {
            PLLM_TRY(load_vector(L, names[k], c->rope_dim / 2, true, dst[k]));
            for (int32_t i = 0; i < c->rope_dim / 2; i++)
                if (!((*dst[k])[i] > 0 && isfinite((*dst[k])[i])))
                    return pllm_errorf(PLLM_ERR_FORMAT,
                                       "%s: tensor '%s' element %d = %g is not a positive factor",
                                       L->g->path, names[k], (int)i, (*dst[k])[i]);
        }
    }
    if (c->rope_scaling == PLLM_ROPE_SCALING_LLAMA3) {
        PLLM_TRY(load_vector(L, "rope_freqs.weight", c->rope_dim / 2, true, &m->rope_freq_factors));
        for (int32_t i = 0; i < c->rope_dim / 2; i++)
            if (!(m->rope_freq_factors[i] > 0 && isfinite(m->rope_freq_factors[i])))
                return pllm_errorf(
                    PLLM_ERR_FORMAT,
                    "%s: tensor 'rope_freqs.weight' element %d = %g is not a positive factor",
                    L->g->path, (int)i, m->rope_freq_factors[i]);
    }
    return PLLM_OK;
}

/* general.sampling.* (llama.cpp's recommended sampling keys), when present. */
static pllm_status read_gguf_sampling(const pllm_gguf *g, pllm_generation_defaults *d)
{
    const struct {
        const char *key;
        float *dst;
        bool *has;
    } fl[] = {
        {"general.sampling.temp", &d->temperature, &d->has_temperature},
        {"general.sampling.top_p", &d->top_p, &d->has_top_p},
        {"general.sampling.min_p", &d->min_p, &d->has_min_p},
        {"general.sampling.penalty_repeat", &d->repetition_penalty, &d->has_repetition_penalty}};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(fl); i++) {
        const pllm_gguf_kv *kv = pllm_gguf_find(g, fl[i].key);
        if (!kv) continue;
        PLLM_TRY(pllm_gguf_get_f32(g, fl[i].key, fl[i].dst));
        *fl[i].has = true;
        float v = *fl[i].dst;
        bool ok =
            isfinite(v) && v >= 0 &&
            (i == 0 || (i == 1 && v > 0 && v <= 1) || (i == 2 && v <= 1) || (i == 3 && v > 0));
        if (!ok)
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: key '%s' at byte offset %zu: value %g is out of range", g->path,
                               fl[i].key, kv->offset, v);
    }
    if (pllm_gguf_find(g, "general.sampling.top_k")) {
        uint32_t k;
        PLLM_TRY(pllm_gguf_get_u32(g, "general.sampling.top_k", &k));
        if (k > INT32_MAX)
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: key 'general.sampling.top_k' = %u is out of range", g->path, k);
        d->has_top_k = true;
        d->top_k = (int32_t)k;
    }
    return PLLM_OK;
}

pllm_status pllm_gguf_model_init(pllm_model *m, const char *path)
{
    pllm_status st;
    m->format = PLLM_MODEL_GGUF;
    if ((st = pllm_gguf_open(&m->gguf, path)) != PLLM_OK) return st;
    loader L = {.m = m, .g = m->gguf};

    pllm_gguf_str arch;
    if ((st = pllm_gguf_get_str(m->gguf, "general.architecture", &arch)) != PLLM_OK) return st;
    bool found = false;
    for (size_t i = 0; i < PLLM_ARRAY_LEN(g_gguf_archs); i++) {
        if (strlen(g_gguf_archs[i].name) == arch.len &&
            memcmp(g_gguf_archs[i].name, arch.s, arch.len) == 0) {
            m->cfg.arch = g_gguf_archs[i].arch;
            m->source_arch = L.prefix = g_gguf_archs[i].name;
            found = true;
        }
    }
    if (!found)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: unsupported architecture '%.*s' (general.architecture at byte "
                           "offset %zu); supported: llama, mistral, qwen2, qwen2moe, qwen3, "
                           "qwen3moe, phi3, gemma3",
                           path, (int)(arch.len > 64 ? 64 : arch.len), arch.s,
                           pllm_gguf_find(m->gguf, "general.architecture")->offset);
    if ((st = read_config(&L)) != PLLM_OK) return st;
    /* the vectors are read from the mapping: a file cut short meanwhile reads zeros, caught here */
    if (m->gguf->owns_map) pllm_mapped_file_set_polled(&m->gguf->file, true);
    st = load_weights(&L);
    if (m->gguf->owns_map) pllm_mapped_file_set_polled(&m->gguf->file, false);
    if (st != PLLM_OK || (st = pllm_gguf_check_file(m->gguf)) != PLLM_OK) return st;
    if ((st = read_gguf_sampling(m->gguf, &m->gen)) != PLLM_OK) return st;

    pllm_gguf_str gname = {0};
    const pllm_gguf_kv *nk = pllm_gguf_find(m->gguf, "general.name");
    if (nk && nk->type == PLLM_GGUF_STRING) gname = nk->v.str;
    if (gname.len) {
        m->name = pllm_malloc(gname.len + 1);
        if (!m->name) return PLLM_ERR_NOMEM;
        memcpy(m->name, gname.s, gname.len);
        m->name[gname.len] = 0;
    }
    /* Identity: the header bytes (metadata + tensor table) and the file size. */
    m->identity = XXH3_64bits_withSeed(m->gguf->map, m->gguf->data_offset, (uint64_t)m->gguf->size);
    return PLLM_OK;
}

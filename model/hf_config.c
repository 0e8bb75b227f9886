/*
 * hf_config.c: config.json and generation_config.json of a Hugging Face directory.
 *
 * Field rules follow transformers' LlamaConfig / MistralConfig / Qwen2Config / Qwen3Config:
 * absent optional fields take those classes' defaults (rms_norm_eps 1e-6, rope_theta 10000, no
 * KV grouping, untied embeddings, max_position_embeddings 2048; Qwen3: head_dim 128); a JSON null
 * counts as absent; a present field of the wrong JSON type, or out of range, is an error naming the
 * file and the field.
 */
#include "model/hf_model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define JSON_MAX_BYTES (64u << 20)

pllm_status pllm_hf_read_json(const char *path, json_t **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return pllm_errorf(errno == ENOENT ? PLLM_ERR_NOT_FOUND : PLLM_ERR_IO,
                           "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return pllm_errorf(PLLM_ERR_IO, "%s: not a readable regular file", path);
    }
    if ((uint64_t)sb.st_size > JSON_MAX_BYTES) {
        fclose(f);
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: %lld bytes is too large for a JSON configuration file (limit %u)",
                           path, (long long)sb.st_size, JSON_MAX_BYTES);
    }
    size_t n = (size_t)sb.st_size;
    char *buf = pllm_malloc(n + 1);
    if (!buf) {
        fclose(f);
        return PLLM_ERR_NOMEM;
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) {
        free(buf);
        return pllm_errorf(PLLM_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, n);
    }
    json_error_t jerr;
    *out = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &jerr);
    free(buf);
    if (!*out)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: invalid JSON at line %d, column %d (byte offset %d): %s", path,
                           jerr.line, jerr.column, jerr.position, jerr.text);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: the top level must be a JSON object", path);
    }
    return PLLM_OK;
}

/* A field lookup in one object of one file; pre names the enclosing object in messages
 * ("" or "rope_scaling."). */
typedef struct jfile {
    const char *path;
    const json_t *obj;
    const char *pre;
} jfile;

/* The value of key, or NULL when absent or null (an error when required). */
static pllm_status jget(const jfile *j, const char *key, bool required, const json_t **out)
{
    const json_t *v = json_object_get(j->obj, key);
    *out = v && !json_is_null(v) ? v : NULL;
    if (!*out && required)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: missing field '%s%s'", j->path, j->pre, key);
    return PLLM_OK;
}

static pllm_status jint(const jfile *j, const char *key, bool required, int64_t lo, int64_t hi,
                        int64_t *out, bool *present)
{
    const json_t *v;
    PLLM_TRY(jget(j, key, required, &v));
    if (present) *present = v != NULL;
    if (!v) return PLLM_OK;
    if (!json_is_integer(v))
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: field '%s%s' must be an integer, not %s", j->path,
                           j->pre, key, pllm_json_type_name(v));
    int64_t x = (int64_t)json_integer_value(v);
    if (x < lo || x > hi)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: field '%s%s' = %lld is out of range [%lld, %lld]",
                           j->path, j->pre, key, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return PLLM_OK;
}

/* A number in [lo, hi] (open at lo when lo_open). */
static pllm_status jnum(const jfile *j, const char *key, bool required, double lo, bool lo_open,
                        double hi, double *out, bool *present)
{
    const json_t *v;
    PLLM_TRY(jget(j, key, required, &v));
    if (present) *present = v != NULL;
    if (!v) return PLLM_OK;
    if (!json_is_number(v))
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: field '%s%s' must be a number, not %s", j->path,
                           j->pre, key, pllm_json_type_name(v));
    double x = json_number_value(v);
    /* the value is kept as a float: it must stay above an open bound once rounded to float
     * (an rms_norm_eps of 1e-75 is 0 in single precision) */
    if (!isfinite(x) || x < lo || (lo_open && (x == lo || (float)x <= (float)lo)) || x > hi)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: field '%s%s' = %g is out of range %s%g, %g]",
                           j->path, j->pre, key, x, lo_open ? "(" : "[", lo, hi);
    *out = x;
    return PLLM_OK;
}

static pllm_status jbool(const jfile *j, const char *key, bool *out, bool *present)
{
    const json_t *v;
    PLLM_TRY(jget(j, key, false, &v));
    if (present) *present = v != NULL;
    if (!v) return PLLM_OK;
    if (!json_is_boolean(v))
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: field '%s%s' must be a boolean, not %s", j->path,
                           j->pre, key, pllm_json_type_name(v));
    *out = json_is_true(v);
    return PLLM_OK;
}

static pllm_status jstr(const jfile *j, const char *key, bool required, const char **out)
{
    const json_t *v;
    PLLM_TRY(jget(j, key, required, &v));
    if (!v) return PLLM_OK;
    if (!json_is_string(v))
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: field '%s%s' must be a string, not %s", j->path,
                           j->pre, key, pllm_json_type_name(v));
    *out = json_string_value(v);
    return PLLM_OK;
}

/* A token id or a list of them (eos_token_id). */
static pllm_status jids(const jfile *j, const char *key, int32_t *ids, int32_t cap, int32_t *n)
{
    const json_t *v;
    PLLM_TRY(jget(j, key, false, &v));
    *n = 0;
    if (!v) return PLLM_OK;
    if (json_is_integer(v)) {
        int64_t x = (int64_t)json_integer_value(v);
        if (x < 0 || x > INT32_MAX)
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: field '%s' = %lld is not a valid token id",
                               j->path, key, (long long)x);
        ids[(*n)++] = (int32_t)x;
        return PLLM_OK;
    }
    if (!json_is_array(v))
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: field '%s' must be a token id or a list of token ids, not %s",
                           j->path, key, pllm_json_type_name(v));
    if (json_array_size(v) > (size_t)cap)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: field '%s' lists %zu ids (at most %d)",
                           j->path, key, json_array_size(v), cap);
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX)
            return pllm_errorf(
                PLLM_ERR_FORMAT,
                "%s: field '%s[%zu]' must be a token id (a non-negative integer), not %s", j->path,
                key, i, pllm_json_type_name(e));
        ids[(*n)++] = (int32_t)json_integer_value(e);
    }
    return PLLM_OK;
}

static const struct {
    const char *model_type;
    pllm_arch arch;
} g_hf_archs[] = {{"llama", PLLM_ARCH_LLAMA},
                  {"mistral", PLLM_ARCH_LLAMA},
                  {"qwen2", PLLM_ARCH_QWEN2},
                  {"qwen3", PLLM_ARCH_QWEN3},
                  {"qwen3_moe", PLLM_ARCH_QWEN3}, /* qwen3 with experts */
                  {"qwen2_moe", PLLM_ARCH_QWEN2}, /* qwen2 with experts and a shared expert */
                  {"mixtral", PLLM_ARCH_LLAMA},   /* mistral with experts */
                  {"phi3", PLLM_ARCH_LLAMA}, /* the llama graph on fused qkv_proj / gate_up_proj
                                                rows */
                  {"gemma3_text", PLLM_ARCH_GEMMA3},
                  {"gemma3", PLLM_ARCH_GEMMA3}}; /* the text model of text_config */

/* A list of n positive factors (LongRoPE's short_factor / long_factor). */
static pllm_status jfactors(const jfile *j, const char *key, int32_t n, float *out)
{
    const json_t *v;
    PLLM_TRY(jget(j, key, true, &v));
    if (!json_is_array(v) || json_array_size(v) != (size_t)n)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: field '%s%s' must be a list of %d numbers (rotary dims / 2), not "
                           "%s of %zu",
                           j->path, j->pre, key, n, pllm_json_type_name(v),
                           json_is_array(v) ? json_array_size(v) : (size_t)0);
    for (int32_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(v, (size_t)i);
        double x = json_is_number(e) ? json_number_value(e) : -1;
        if (!isfinite(x) || !((float)x > 0) || x > 1e6)
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: field '%s%s[%d]' must be a positive number (a frequency "
                               "divisor)",
                               j->path, j->pre, key, (int)i);
        out[i] = (float)x;
    }
    return PLLM_OK;
}

/* LongRoPE (Phi-3; "su" and "yarn" are transformers' old names for it in Phi3Config): the
 * factors, the original context, and the attention factor as transformers'
 * _compute_longrope_parameters defines it: attention_factor when given, else
 * sqrt(1 + ln(factor) / ln(original)) for factor = (factor, or max_position_embeddings /
 * original) > 1, else 1. */
static pllm_status parse_longrope(const jfile *j, const json_t *root, int64_t max_pos,
                                  pllm_hf_config *out)
{
    pllm_model_config *c = &out->cfg;
    const int32_t n = c->rope_dim / 2;
    if (n > (int32_t)PLLM_ARRAY_LEN(out->rope_short))
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: %d rotary pairs: LongRoPE supports %d",
                           j->path, (int)n, (int)PLLM_ARRAY_LEN(out->rope_short));
    PLLM_TRY(jfactors(j, "short_factor", n, out->rope_short));
    PLLM_TRY(jfactors(j, "long_factor", n, out->rope_long));
    int64_t orig = 0;
    bool has_orig = false;
    PLLM_TRY(jint(j, "original_max_position_embeddings", false, 1, INT32_MAX, &orig, &has_orig));
    if (!has_orig) {
        jfile top = {j->path, root, ""};
        orig = 4096; /* Phi3Config's default */
        PLLM_TRY(jint(&top, "original_max_position_embeddings", false, 1, INT32_MAX, &orig, NULL));
    }
    double factor = (double)max_pos / (double)orig, af = 0;
    bool has_af = false;
    PLLM_TRY(jnum(j, "factor", false, 0, true, 1e6, &factor, NULL));
    PLLM_TRY(jnum(j, "attention_factor", false, 0, true, 1e6, &af, &has_af));
    if (!has_af) af = factor <= 1 || orig < 2 ? 1.0 : sqrt(1 + log(factor) / log((double)orig));
    c->rope_scaling = PLLM_ROPE_SCALING_LONGROPE;
    c->rope_factor = (float)factor;
    c->rope_orig_ctx = (int32_t)orig;
    c->rope_attn_factor = (float)af;
    return PLLM_OK;
}

/* rope_scaling (or transformers 5's rope_parameters) object: type and parameters. */
static pllm_status parse_rope_scaling(const char *path, const json_t *rs, const char *field,
                                      const json_t *root, int64_t max_pos, pllm_hf_config *out)
{
    pllm_model_config *c = &out->cfg;
    if (!json_is_object(rs))
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: field '%s' must be an object or null, not %s",
                           path, field, pllm_json_type_name(rs));
    char pre[64];
    snprintf(pre, sizeof pre, "%s.", field);
    jfile j = {path, rs, pre};
    const char *type = NULL;
    PLLM_TRY(jstr(&j, "type", false, &type));
    PLLM_TRY(jstr(&j, "rope_type", false, &type)); /* the newer name wins */
    double theta = c->rope_theta;
    PLLM_TRY(jnum(&j, "rope_theta", false, 1, true, 1e12, &theta, NULL));
    c->rope_theta = (float)theta;
    if (!type || strcmp(type, "default") == 0) {
        c->rope_scaling = PLLM_ROPE_SCALING_NONE;
        return PLLM_OK;
    }
    if (out->fused_proj &&
        (strcmp(type, "longrope") == 0 || strcmp(type, "su") == 0 || strcmp(type, "yarn") == 0))
        return parse_longrope(&j, root, max_pos, out);
    double factor = 0, lo = 0, hi = 0;
    int64_t orig = 0;
    if (strcmp(type, "linear") == 0) {
        PLLM_TRY(jnum(&j, "factor", true, 0, true, 1e6, &factor, NULL));
        c->rope_scaling = PLLM_ROPE_SCALING_LINEAR;
        c->rope_factor = (float)factor;
        return PLLM_OK;
    }
    if (strcmp(type, "llama3") == 0) {
        PLLM_TRY(jnum(&j, "factor", true, 0, true, 1e6, &factor, NULL));
        PLLM_TRY(jnum(&j, "low_freq_factor", true, 0, true, 1e6, &lo, NULL));
        PLLM_TRY(jnum(&j, "high_freq_factor", true, 0, true, 1e6, &hi, NULL));
        PLLM_TRY(jint(&j, "original_max_position_embeddings", true, 1, INT32_MAX, &orig, NULL));
        if (!((float)hi > (float)lo)) /* compared as stored: equal floats would divide by zero */
            return pllm_errorf(
                PLLM_ERR_FORMAT,
                "%s: field '%s.high_freq_factor' = %g must be greater than low_freq_factor = %g",
                path, field, hi, lo);
        c->rope_scaling = PLLM_ROPE_SCALING_LLAMA3;
        c->rope_factor = (float)factor;
        c->rope_low_freq_factor = (float)lo;
        c->rope_high_freq_factor = (float)hi;
        c->rope_orig_ctx = (int32_t)orig;
        return PLLM_OK;
    }
    return pllm_errorf(
        PLLM_ERR_UNSUPPORTED,
        "%s: field '%s.rope_type' = '%.32s' is not supported (supported: default, linear, llama3; "
        "longrope for phi3)",
        path, field, type);
}

/* Experts: Qwen3MoeConfig (num_experts, num_experts_per_tok, moe_intermediate_size,
 * norm_topk_prob default false, decoder_sparse_step default 1, mlp_only_layers default []: layer
 * i has experts when it is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0) or
 * MixtralConfig (num_local_experts default 8, num_experts_per_tok default 2, intermediate_size
 * for the experts, always renormalized, every layer). Shared experts are refused. */
static pllm_status parse_experts(const jfile *j, const json_t *root, const char *mt,
                                 pllm_hf_config *out)
{
    pllm_model_config *c = &out->cfg;
    const char *path = j->path;
    int64_t n_exp = 8, n_used = 2, ff = c->n_ff, step = 1, shared = 0;
    bool norm = true;
    out->mixtral = strcmp(mt, "mixtral") == 0;
    if (out->mixtral) {
        PLLM_TRY(jint(j, "num_local_experts", false, 1, 4096, &n_exp, NULL));
        PLLM_TRY(jint(j, "num_experts_per_tok", false, 1, 4096, &n_used, NULL));
    } else {
        const bool q2 = strcmp(mt, "qwen2_moe") == 0; /* Qwen2MoeConfig: 4 per token, a shared
                                                         expert of 5632 */
        norm = false;
        n_used = q2 ? 4 : 8;
        shared = q2 ? 5632 : 0;
        PLLM_TRY(jint(j, "num_experts", true, 1, 4096, &n_exp, NULL));
        PLLM_TRY(jint(j, "num_experts_per_tok", false, 1, 4096, &n_used, NULL));
        PLLM_TRY(jint(j, "moe_intermediate_size", true, 1, 1 << 20, &ff, NULL));
        PLLM_TRY(jbool(j, "norm_topk_prob", &norm, NULL));
        PLLM_TRY(jint(j, "decoder_sparse_step", false, 1, 1024, &step, NULL));
        PLLM_TRY(
            jint(j, "shared_expert_intermediate_size", false, q2 ? 1 : 0, 1 << 20, &shared, NULL));
        if (q2)
            c->n_ff_shexp = (int32_t)shared;
        else if (shared > 0)
            return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                               "%s: field 'shared_expert_intermediate_size' = %lld: shared experts "
                               "are supported for qwen2_moe only",
                               path, (long long)shared);
    }
    if (n_used > n_exp)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: field 'num_experts_per_tok' = %lld exceeds the %lld experts", path,
                           (long long)n_used, (long long)n_exp);
    for (int32_t i = 0; i < c->n_layer; i++) out->layer_moe[i] = (i + 1) % step == 0;
    const json_t *mlo = json_object_get(root, "mlp_only_layers");
    if (!out->mixtral && mlo && !json_is_null(mlo)) {
        if (!json_is_array(mlo))
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: field 'mlp_only_layers' must be a list of layer indices", path);
        for (size_t i = 0; i < json_array_size(mlo); i++) {
            const json_t *e = json_array_get(mlo, i);
            if (!json_is_integer(e) || json_integer_value(e) < 0 ||
                json_integer_value(e) >= c->n_layer)
                return pllm_errorf(PLLM_ERR_FORMAT,
                                   "%s: field 'mlp_only_layers[%zu]' must be a layer index in [0, "
                                   "%d)",
                                   path, i, (int)c->n_layer);
            out->layer_moe[json_integer_value(e)] = 0;
        }
    }
    c->n_expert = (int32_t)n_exp;
    c->n_expert_used = (int32_t)n_used;
    c->n_ff_exp = (int32_t)ff;
    c->moe_norm_topk = norm;
    return PLLM_OK;
}

pllm_status pllm_hf_parse_config(const char *path, const json_t *root, pllm_hf_config *out)
{
    memset(out, 0, sizeof *out);
    pllm_model_config *c = &out->cfg;
    jfile j = {path, root, ""};

    const char *mt = NULL;
    PLLM_TRY(jstr(&j, "model_type", true, &mt));
    if (strcmp(mt, "gemma3") == 0) { /* Gemma3ForConditionalGeneration: the text model only */
        const json_t *tc = json_object_get(root, "text_config");
        if (!json_is_object(tc))
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: field 'text_config' must be an object for model_type gemma3",
                               path);
        root = tc;
        j = (jfile){path, root, "text_config."};
        out->multimodal = true;
    }
    bool found = false;
    for (size_t i = 0; i < PLLM_ARRAY_LEN(g_hf_archs) && !found; i++) {
        if (strcmp(mt, g_hf_archs[i].model_type) == 0) {
            c->arch = g_hf_archs[i].arch;
            out->source_arch = g_hf_archs[i].model_type;
            found = true;
        }
    }
    out->fused_proj = found && strcmp(mt, "phi3") == 0;
    if (!found)
        return pllm_errorf(
            PLLM_ERR_UNSUPPORTED,
            "%s: field 'model_type' = '%.64s': architecture not supported "
            "(supported: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, phi3, "
            "gemma3_text, gemma3)",
            path, mt);
    const json_t *qc = json_object_get(root, "quantization_config");
    if (qc && !json_is_null(qc))
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: field 'quantization_config': quantized Hugging Face checkpoints "
                           "are not supported (use F32/F16/BF16 "
                           "safetensors, or a GGUF file)",
                           path);

    const bool gemma = c->arch == PLLM_ARCH_GEMMA3;
    /* Gemma3TextConfig's defaults */
    int64_t hidden, n_layer, n_head, n_head_kv = 0, n_ff, n_vocab, head_dim = 0,
                                     n_ctx = gemma ? 131072 : 2048;
    bool has_kv = false, has_hd = false;
    PLLM_TRY(jint(&j, "hidden_size", true, 1, 65536, &hidden, NULL));
    PLLM_TRY(jint(&j, "num_hidden_layers", true, 1, 1024, &n_layer, NULL));
    PLLM_TRY(jint(&j, "num_attention_heads", true, 1, 1024, &n_head, NULL));
    PLLM_TRY(jint(&j, "num_key_value_heads", false, 1, n_head, &n_head_kv, &has_kv));
    PLLM_TRY(jint(&j, "intermediate_size", true, 1, 1 << 20, &n_ff, NULL));
    PLLM_TRY(jint(&j, "vocab_size", true, 1, 1 << 24, &n_vocab, NULL));
    PLLM_TRY(jint(&j, "head_dim", false, 2, 1024, &head_dim, &has_hd));
    PLLM_TRY(jint(&j, "max_position_embeddings", false, 1, INT64_MAX, &n_ctx, NULL));
    const int64_t max_pos = n_ctx; /* before the sliding window shortens n_ctx */
    if (!has_kv) n_head_kv = n_head;
    if (n_head % n_head_kv != 0)
        return pllm_errorf(
            PLLM_ERR_FORMAT,
            "%s: field 'num_key_value_heads' = %lld does not divide num_attention_heads = %lld",
            path, (long long)n_head_kv, (long long)n_head);
    if (!has_hd && (c->arch == PLLM_ARCH_QWEN3 || gemma)) {
        head_dim = gemma ? 256 : 128; /* Qwen3Config's / Gemma3TextConfig's default */
        has_hd = true;
    }
    if (!has_hd) {
        if (hidden % n_head != 0)
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: field 'num_attention_heads' = %lld does not divide hidden_size "
                               "= %lld (and no head_dim)",
                               path, (long long)n_head, (long long)hidden);
        head_dim = hidden / n_head;
    }
    if (head_dim % 2 != 0 || head_dim > 1024)
        return pllm_errorf(
            PLLM_ERR_FORMAT, "%s: head dimension %lld (field '%s') must be even and at most 1024",
            path, (long long)head_dim, has_hd ? "head_dim" : "hidden_size / num_attention_heads");

    double eps = 1e-6, theta = gemma ? 1e6 : 10000, prf = 1;
    PLLM_TRY(jnum(&j, "rms_norm_eps", false, 0, true, 0.5, &eps, NULL));
    PLLM_TRY(jnum(&j, "rope_theta", false, 1, true, 1e12, &theta, NULL));
    bool has_prf = false;
    PLLM_TRY(jnum(&j, "partial_rotary_factor", false, 0, true, 1, &prf, &has_prf));
    const json_t *rpo = json_object_get(root, "rope_parameters"); /* transformers >= 5 keeps it */
    if (!has_prf && json_is_object(rpo)) {                        /* there */
        jfile jr = {path, rpo, "rope_parameters."};
        PLLM_TRY(jnum(&jr, "partial_rotary_factor", false, 0, true, 1, &prf, NULL));
    }
    if (prf != 1 && !out->fused_proj) /* phi3 (Phi-4-mini: 0.75) rotates the first dims */
        return pllm_errorf(
            PLLM_ERR_UNSUPPORTED,
            "%s: field 'partial_rotary_factor' = %g is not supported for %s (only 1)", path, prf,
            mt);
    /* Qwen2 and Qwen3 (transformers' Qwen2Config / Qwen3Config) default use_sliding_window to
     * false; Llama and Mistral have no such switch (Mistral's sliding_window applies when set) */
    bool tied = gemma, attn_bias = false, mlp_bias = false,
         use_sw = c->arch != PLLM_ARCH_QWEN2 && c->arch != PLLM_ARCH_QWEN3, has_use_sw = false;
    PLLM_TRY(jbool(&j, "tie_word_embeddings", &tied, NULL));
    PLLM_TRY(jbool(&j, "attention_bias", &attn_bias, NULL));
    PLLM_TRY(jbool(&j, "mlp_bias", &mlp_bias, NULL));
    if (attn_bias && c->arch == PLLM_ARCH_QWEN3)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: field 'attention_bias' = true (biases on q/k/v/o projections) is "
                           "not supported for qwen3 (Qwen3 checkpoints have none)",
                           path);
    if (attn_bias && c->arch != PLLM_ARCH_QWEN2)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: field 'attention_bias' = true (biases on q/k/v/o projections) is "
                           "not supported for %s",
                           path, mt);
    if (mlp_bias)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: field 'mlp_bias' = true is not supported",
                           path);
    const char *act = "silu";
    if (gemma) { /* Gemma3TextConfig: hidden_activation, gelu_pytorch_tanh */
        act = "gelu_pytorch_tanh";
        PLLM_TRY(jstr(&j, "hidden_activation", false, &act));
        if (strcmp(act, "gelu_pytorch_tanh") != 0)
            return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                               "%s: field '%shidden_activation' = '%.32s' is not supported (only "
                               "gelu_pytorch_tanh)",
                               path, j.pre, act);
        static const char *const caps[] = {"final_logit_softcapping", "attn_logit_softcapping"};
        for (size_t i = 0; i < PLLM_ARRAY_LEN(caps); i++) {
            const json_t *v = json_object_get(root, caps[i]);
            if (v && !json_is_null(v))
                return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                                   "%s: field '%s%s' is set: logit soft-capping is not supported "
                                   "(Gemma 3 has none)",
                                   path, j.pre, caps[i]);
        }
        double qpas = 256, local = 10000;
        int64_t win = 4096, pattern = 6;
        PLLM_TRY(jnum(&j, "query_pre_attn_scalar", false, 0, true, 1e9, &qpas, NULL));
        PLLM_TRY(jnum(&j, "rope_local_base_freq", false, 1, true, 1e12, &local, NULL));
        PLLM_TRY(jint(&j, "sliding_window", false, 1, INT32_MAX, &win, NULL));
        PLLM_TRY(jint(&j, "sliding_window_pattern", false, 1, 1024, &pattern, NULL));
        c->attn_scale = (float)(1.0 / sqrt(qpas));
        c->rope_theta_local = (float)local;
        c->sliding_window = (int32_t)win;
        c->ffn_gelu = true;
        c->has_post_norms = true;
        /* layer_types when given (transformers >= 4.53), else every pattern-th layer is global */
        const json_t *lt = json_object_get(root, "layer_types");
        if (lt && !json_is_null(lt)) {
            if (!json_is_array(lt) || json_array_size(lt) != (size_t)n_layer)
                return pllm_errorf(PLLM_ERR_FORMAT,
                                   "%s: field '%slayer_types' must be a list of %lld layer types",
                                   path, j.pre, (long long)n_layer);
            for (size_t i = 0; i < (size_t)n_layer; i++) {
                const char *s = json_string_value(json_array_get(lt, i));
                if (s && strcmp(s, "sliding_attention") == 0)
                    out->layer_sliding[i] = 1;
                else if (!s || strcmp(s, "full_attention") != 0)
                    return pllm_errorf(PLLM_ERR_FORMAT,
                                       "%s: field '%slayer_types[%zu]' must be "
                                       "\"sliding_attention\" or \"full_attention\"",
                                       path, j.pre, i);
            }
        } else {
            for (int64_t i = 0; i < n_layer; i++) out->layer_sliding[i] = (i + 1) % pattern != 0;
        }
    } else {
        PLLM_TRY(jstr(&j, "hidden_act", false, &act));
    }
    if (!gemma && strcmp(act, "silu") != 0)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: field 'hidden_act' = '%.32s' is not supported (only silu)", path,
                           act);
    /* Sliding-window attention is not implemented: the model is exact up to the window, so the
     * usable context stops there. Qwen2 uses it only with use_sliding_window. */
    int64_t window = 0;
    bool has_window = false;
    PLLM_TRY(jbool(&j, "use_sliding_window", &use_sw, &has_use_sw));
    if (!gemma) { /* gemma3's sliding layers are enforced (above) */
        PLLM_TRY(jint(&j, "sliding_window", false, 1, INT64_MAX, &window, &has_window));
        if (has_window && use_sw && window < n_ctx) n_ctx = window;
    }

    c->n_vocab = (int32_t)n_vocab;
    c->n_embd = (int32_t)hidden;
    c->n_layer = (int32_t)n_layer;
    c->n_head = (int32_t)n_head;
    c->n_head_kv = (int32_t)n_head_kv;
    c->head_dim = (int32_t)head_dim;
    c->n_ff = (int32_t)n_ff;
    c->n_ctx_train = (int32_t)PLLM_MIN(n_ctx, (int64_t)INT32_MAX);
    c->norm_eps = (float)eps;
    c->rope_theta = (float)theta;
    c->rope_dim = (int32_t)head_dim;
    if (prf != 1) { /* transformers: int(head_dim * partial_rotary_factor) */
        c->rope_dim = (int32_t)((double)head_dim * prf);
        if (c->rope_dim < 2 || c->rope_dim % 2)
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: field 'partial_rotary_factor' = %g gives %d rotary dims of "
                               "head_dim %lld (must be even and at least 2)",
                               path, prf, (int)c->rope_dim, (long long)head_dim);
    }
    c->rope_attn_factor = 1.0f;
    c->rope_mode = PLLM_ROPE_NEOX;
    c->tied_embeddings = tied;
    c->has_qkv_bias = c->arch == PLLM_ARCH_QWEN2;
    c->has_qk_norm = c->arch == PLLM_ARCH_QWEN3 || gemma;

    const json_t *rs = json_object_get(root, "rope_scaling");
    if (rs && !json_is_null(rs))
        PLLM_TRY(parse_rope_scaling(path, rs, "rope_scaling", root, max_pos, out));
    const json_t *rp = json_object_get(root, "rope_parameters"); /* transformers >= 5 */
    if (gemma && json_is_object(rp) && json_is_object(json_object_get(rp, "full_attention"))) {
        /* per layer type: {"full_attention": {...}, "sliding_attention": {...}} */
        jfile jf = {path, json_object_get(rp, "full_attention"), "rope_parameters.full_attention."};
        jfile jl = {path, json_object_get(rp, "sliding_attention"),
                    "rope_parameters.sliding_attention."};
        double th = c->rope_theta, lo = c->rope_theta_local;
        PLLM_TRY(jnum(&jf, "rope_theta", false, 1, true, 1e12, &th, NULL));
        if (jl.obj) PLLM_TRY(jnum(&jl, "rope_theta", false, 1, true, 1e12, &lo, NULL));
        c->rope_theta = (float)th;
        c->rope_theta_local = (float)lo;
        rp = jf.obj;
        const char *ty = NULL;
        PLLM_TRY(jstr(&jf, "rope_type", false, &ty));
        if (!ty || strcmp(ty, "default") == 0) rp = NULL;
    }
    if (rp && !json_is_null(rp) && !(rs && !json_is_null(rs)))
        PLLM_TRY(parse_rope_scaling(path, rp, "rope_parameters", root, max_pos, out));

    if (strcmp(mt, "qwen3_moe") == 0 || strcmp(mt, "qwen2_moe") == 0 || strcmp(mt, "mixtral") == 0)
        PLLM_TRY(parse_experts(&j, root, mt, out));
    else if (json_object_get(root, "num_experts") || json_object_get(root, "num_local_experts"))
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: field 'num_experts' / 'num_local_experts': experts are supported "
                           "for model_type qwen3_moe, qwen2_moe and mixtral only, not %s",
                           path, mt);

    int64_t bos = 0;
    PLLM_TRY(jint(&j, "bos_token_id", false, 0, INT32_MAX, &bos, &out->has_bos));
    out->bos_id = (int32_t)bos;
    PLLM_TRY(
        jids(&j, "eos_token_id", out->eos_ids, (int32_t)PLLM_ARRAY_LEN(out->eos_ids), &out->n_eos));
    return PLLM_OK;
}

pllm_status pllm_hf_parse_generation_config(const char *path, const json_t *root,
                                            pllm_generation_defaults *g)
{
    jfile j = {path, root, ""};
    int32_t ids[64], n = 0;
    PLLM_TRY(jids(&j, "eos_token_id", ids, (int32_t)PLLM_ARRAY_LEN(ids), &n));
    if (n) {
        g->eos_ids = pllm_malloc(sizeof(int32_t) * (size_t)n);
        if (!g->eos_ids) return PLLM_ERR_NOMEM;
        memcpy(g->eos_ids, ids, sizeof(int32_t) * (size_t)n);
        g->n_eos = n;
    }
    int64_t v = 0;
    double x = 0;
    PLLM_TRY(jint(&j, "bos_token_id", false, 0, INT32_MAX, &v, &g->has_bos));
    if (g->has_bos) g->bos_id = (int32_t)v;
    PLLM_TRY(jbool(&j, "do_sample", &g->do_sample, &g->has_do_sample));
    PLLM_TRY(jnum(&j, "temperature", false, 0, false, 1e6, &x, &g->has_temperature));
    if (g->has_temperature) g->temperature = (float)x;
    PLLM_TRY(jnum(&j, "top_p", false, 0, true, 1, &x, &g->has_top_p));
    if (g->has_top_p) g->top_p = (float)x;
    PLLM_TRY(jint(&j, "top_k", false, 0, INT32_MAX, &v, &g->has_top_k));
    if (g->has_top_k) g->top_k = (int32_t)v;
    PLLM_TRY(jnum(&j, "min_p", false, 0, false, 1, &x, &g->has_min_p));
    if (g->has_min_p) g->min_p = (float)x;
    PLLM_TRY(jnum(&j, "repetition_penalty", false, 0, true, 1e6, &x, &g->has_repetition_penalty));
    if (g->has_repetition_penalty) g->repetition_penalty = (float)x;
    PLLM_TRY(jint(&j, "max_new_tokens", false, 1, INT32_MAX, &v, &g->has_max_new_tokens));
    if (g->has_max_new_tokens) g->max_new_tokens = (int32_t)v;
    return PLLM_OK;
}

void pllm_rope_llama3_factors(float *ff, const pllm_model_config *c)
{
    /* transformers' _compute_llama3_parameters, as a divisor of each pair's frequency */
    const double pi = 3.14159265358979323846;
    const double lo_wl = c->rope_orig_ctx / (double)c->rope_low_freq_factor;
    const double hi_wl = c->rope_orig_ctx / (double)c->rope_high_freq_factor;
    for (int32_t i = 0; i < c->rope_dim / 2; i++) {
        double freq = pow((double)c->rope_theta, -2.0 * i / (double)c->rope_dim),
               wl = 2 * pi / freq, f;
        if (wl < hi_wl) {
            f = 1;
        } else if (wl > lo_wl) {
            f = c->rope_factor;
        } else {
            double s = (c->rope_orig_ctx / wl - c->rope_low_freq_factor) /
                       ((double)c->rope_high_freq_factor - c->rope_low_freq_factor);
            f = 1 / ((1 - s) / c->rope_factor + s);
        }
        ff[i] = (float)f;
    }
}

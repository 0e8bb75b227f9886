#include "model/model.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/gguf_model.h"
#include "model/hf_model.h"

static const char *g_arch_names[PLLM_ARCH_COUNT] = {"llama", "qwen2", "qwen3", "gemma3"};

const char *pllm_arch_name(pllm_arch a)
{
    return (unsigned)a < PLLM_ARCH_COUNT ? g_arch_names[a] : "?";
}
const char *pllm_model_format_name(pllm_model_format f)
{
    return f == PLLM_MODEL_HF ? "hf" : "gguf";
}

/* The base name of path, without trailing slashes, as an owned string. */
static char *base_name(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    char *s = pllm_malloc(n - b + 1);
    if (s) {
        memcpy(s, path + b, n - b);
        s[n - b] = 0;
    }
    return s;
}

pllm_status pllm_model_load(pllm_model **out, const char *path)
{
    pllm_status st;
    *out = NULL;
    pllm_model *m = pllm_calloc(1, sizeof *m);
    if (!m) return PLLM_ERR_NOMEM;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        st = pllm_hf_model_init(m, path);
    else
        st = pllm_gguf_model_init(m, path);
    if (st != PLLM_OK) goto fail;
    if (!m->name) m->name = base_name(path); /* a directory, or a GGUF file without general.name */
    m->path = pllm_strdup(path);
    if (!m->name || !m->path) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    *out = m;
    return PLLM_OK;
fail:
    pllm_model_free(m);
    return st;
}

void pllm_model_free(pllm_model *m)
{
    if (!m) return;
    pllm_gguf_close(m->gguf);
    pllm_hf_files_free(m->hf);
    free(m->gen.eos_ids);
    free(m->layers);
    free(m->owned_f32);
    free(m->owned_experts);
    free(m->name);
    free(m->path);
    free(m);
}

pllm_status pllm_model_check_files(const pllm_model *m)
{
    if (m->gguf) return pllm_gguf_check_file(m->gguf);
    for (int32_t i = 0; m->hf && i < m->hf->n_files; i++)
        PLLM_TRY(pllm_safetensors_check_file(m->hf->files[i]));
    return PLLM_OK;
}

int pllm_model_apply_generation_defaults(const pllm_model *m, pllm_sampling_params *p)
{
    const pllm_generation_defaults *g = &m->gen;
    int n = 0;
    if (g->has_temperature) {
        p->temperature = g->temperature;
        n++;
    }
    if (g->has_top_k) {
        p->top_k = g->top_k;
        n++;
    }
    if (g->has_top_p) {
        p->top_p = g->top_p;
        n++;
    }
    if (g->has_min_p) {
        p->min_p = g->min_p;
        n++;
    }
    if (g->has_repetition_penalty) {
        p->repetition_penalty = g->repetition_penalty;
        n++;
    }
    return n;
}

static const char *rope_scaling_name(pllm_rope_scaling s)
{
    switch (s) {
    case PLLM_ROPE_SCALING_LINEAR:
        return "linear";
    case PLLM_ROPE_SCALING_LLAMA3:
        return "llama3";
    case PLLM_ROPE_SCALING_LONGROPE:
        return "longrope";
    default:
        return "none";
    }
}

/* Set key of o to v (which it steals); false when v is NULL or the set failed. */
static bool jset(json_t *o, const char *key, json_t *v)
{
    return v && json_object_set_new(o, key, v) == 0;
}

/* Move the object *v under key of o (when *ok), or drop it; *v is NULL afterwards. */
static void jattach(json_t *o, const char *key, json_t **v, bool *ok)
{
    if (*ok)
        *ok = jset(o, key, *v);
    else
        json_decref(*v);
    *v = NULL;
}

/* A float as JSON: rounded to float precision so 1e-5f prints as 1e-05, not 9.99999974737875e-06.
 */
static json_t *jfloat(float f)
{
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) { /* the shortest decimal that reads back as f */
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f) break;
    }
    return json_real(strtod(buf, NULL));
}

pllm_status pllm_model_describe(const pllm_model *m, pllm_buf *out)
{
    const pllm_model_config *c = &m->cfg;
    json_t *o = json_object(), *rope = json_object(), *dt = json_object(), *gen = json_object(),
           *files = json_array();
    bool ok = o && rope && dt && gen && files;
    ok = ok && jset(o, "name", json_string(m->name ? m->name : "")) &&
         jset(o, "path", json_string(m->path ? m->path : ""));
    ok = ok && jset(o, "format", json_string(pllm_model_format_name(m->format)));
    ok = ok && jset(o, "arch", json_string(pllm_arch_name(c->arch))) &&
         jset(o, "source_arch", json_string(m->source_arch ? m->source_arch : ""));
    ok = ok && jset(o, "n_vocab", json_integer(c->n_vocab)) &&
         jset(o, "n_embd", json_integer(c->n_embd)) &&
         jset(o, "n_layer", json_integer(c->n_layer)) &&
         jset(o, "n_head", json_integer(c->n_head)) &&
         jset(o, "n_head_kv", json_integer(c->n_head_kv)) &&
         jset(o, "head_dim", json_integer(c->head_dim)) && jset(o, "n_ff", json_integer(c->n_ff)) &&
         jset(o, "n_ctx_train", json_integer(c->n_ctx_train)) &&
         jset(o, "norm_eps", jfloat(c->norm_eps)) &&
         jset(o, "tied_embeddings", json_boolean(c->tied_embeddings)) &&
         jset(o, "qkv_bias", json_boolean(c->has_qkv_bias)) &&
         jset(o, "qk_norm", json_boolean(c->has_qk_norm));
    ok = ok && jset(rope, "theta", jfloat(c->rope_theta)) &&
         jset(rope, "dim", json_integer(c->rope_dim)) &&
         jset(rope, "mode", json_string(c->rope_mode == PLLM_ROPE_NEOX ? "neox" : "norm")) &&
         jset(rope, "scaling", json_string(rope_scaling_name(c->rope_scaling)));
    if (ok && c->rope_scaling != PLLM_ROPE_SCALING_NONE && c->rope_factor > 0)
        ok = jset(rope, "factor", jfloat(c->rope_factor));
    if (ok && c->rope_scaling == PLLM_ROPE_SCALING_LLAMA3 && c->rope_orig_ctx > 0)
        ok = jset(rope, "low_freq_factor", jfloat(c->rope_low_freq_factor)) &&
             jset(rope, "high_freq_factor", jfloat(c->rope_high_freq_factor)) &&
             jset(rope, "original_max_position_embeddings", json_integer(c->rope_orig_ctx));
    if (ok && c->arch == PLLM_ARCH_GEMMA3) { /* layer types, window, the Gemma specifics */
        json_t *lt = json_array();
        ok = lt != NULL;
        for (int32_t i = 0; ok && i < c->n_layer; i++)
            ok = json_array_append_new(
                     lt, json_string(m->layers[i].window ? "sliding" : "global")) == 0;
        jattach(o, "layer_types", &lt, &ok);
        ok = ok && jset(o, "sliding_window", json_integer(c->sliding_window)) &&
             jset(o, "attn_scale", jfloat(c->attn_scale)) &&
             jset(o, "embd_scale", jfloat(c->embd_scale)) &&
             jset(o, "ffn_act", json_string(c->ffn_gelu ? "gelu_tanh" : "silu")) &&
             jset(o, "post_norms", json_boolean(c->has_post_norms)) &&
             jset(rope, "theta_local", jfloat(c->rope_theta_local));
    }
    if (ok && c->n_expert > 0) { /* mixture of experts: the router and which layers have it */
        json_t *ex = json_object(), *ml = json_array();
        ok = ex && ml;
        for (int32_t i = 0; ok && i < c->n_layer; i++)
            if (pllm_layer_is_moe(&m->layers[i]))
                ok = json_array_append_new(ml, json_integer(i)) == 0;
        ok = ok && jset(ex, "count", json_integer(c->n_expert)) &&
             jset(ex, "used", json_integer(c->n_expert_used)) &&
             jset(ex, "ff_length", json_integer(c->n_ff_exp)) &&
             jset(ex, "norm_topk_prob", json_boolean(c->moe_norm_topk)) &&
             jset(ex, "gating", json_string("softmax")) &&
             jset(ex, "shared_experts", json_integer(c->n_ff_shexp ? 1 : 0)) &&
             jset(ex, "layout", json_string(m->expert_layout ? m->expert_layout : ""));
        if (ok && c->n_ff_shexp) ok = jset(ex, "shared_ff_length", json_integer(c->n_ff_shexp));
        jattach(ex, "layers", &ml, &ok);
        jattach(o, "experts", &ex, &ok);
    }
    if (ok && m->rope_freq_factors) {
        json_t *ff = json_array();
        ok = ff != NULL;
        for (int32_t i = 0; ok && i < c->rope_dim / 2; i++)
            ok = json_array_append_new(ff, jfloat(m->rope_freq_factors[i])) == 0;
        jattach(rope, "freq_factors", &ff, &ok);
    }
    if (ok && c->rope_scaling == PLLM_ROPE_SCALING_LONGROPE) {
        json_t *ff = json_array();
        ok = ff != NULL && m->rope_freq_factors_long;
        for (int32_t i = 0; ok && i < c->rope_dim / 2; i++)
            ok = json_array_append_new(ff, jfloat(m->rope_freq_factors_long[i])) == 0;
        jattach(rope, "long_factors", &ff, &ok);
        ok = ok && jset(rope, "attn_factor", jfloat(c->rope_attn_factor)) &&
             jset(rope, "original_max_position_embeddings", json_integer(c->rope_orig_ctx));
    }
    jattach(o, "rope", &rope, &ok);

    /* tensor dtypes: every matrix the model computes with */
    int counts[PLLM_DTYPE_COUNT] = {0};
    if (ok) {
        counts[m->tok_embd.dtype]++;
        if (!c->tied_embeddings) counts[m->output.dtype]++;
        for (int32_t l = 0; l < c->n_layer; l++) {
            const pllm_layer_weights *w = &m->layers[l];
            const pllm_tensor *ts[] = {&w->wq,     &w->wk,   &w->wv,    &w->wo,
                                       &w->w_gate, &w->w_up, &w->w_down};
            for (size_t i = 0; i < PLLM_ARRAY_LEN(ts); i++)
                if (ts[i]->n_rows) counts[ts[i]->dtype]++;
            if (pllm_layer_is_moe(w)) {
                counts[w->router.dtype]++;
                if (c->n_ff_shexp) {
                    counts[w->shexp_gate_w.dtype]++;
                    counts[w->shexp_up.dtype]++;
                    counts[w->shexp_down.dtype]++;
                }
                for (int32_t e = 0; e < c->n_expert; e++) {
                    counts[w->exp_gate[e].dtype]++;
                    counts[w->exp_up[e].dtype]++;
                    counts[w->exp_down[e].dtype]++;
                }
            }
        }
    }
    for (int d = 0; ok && d < PLLM_DTYPE_COUNT; d++)
        if (counts[d]) ok = jset(dt, pllm_dtype_name((pllm_dtype)d), json_integer(counts[d]));
    jattach(o, "matrix_dtypes", &dt, &ok);
    ok = ok && jset(o, "weight_bytes", json_integer((json_int_t)m->weight_bytes));
    if (ok && m->hf) {
        for (int32_t i = 0; ok && i < m->hf->n_files; i++)
            ok = json_array_append_new(files, json_string(m->hf->files[i]->path)) == 0;
        ok = ok && jset(o, "weights_file", json_string(m->hf->weights_file));
    } else if (ok && m->gguf) {
        ok = json_array_append_new(files, json_string(m->gguf->path)) == 0;
    }
    jattach(o, "files", &files, &ok);

    const pllm_generation_defaults *g = &m->gen;
    if (ok && g->n_eos) {
        json_t *e = json_array();
        ok = e != NULL;
        for (int32_t i = 0; ok && i < g->n_eos; i++)
            ok = json_array_append_new(e, json_integer(g->eos_ids[i])) == 0;
        jattach(gen, "eos_token_id", &e, &ok);
    }
    if (ok && g->has_bos) ok = jset(gen, "bos_token_id", json_integer(g->bos_id));
    if (ok && g->has_do_sample) ok = jset(gen, "do_sample", json_boolean(g->do_sample));
    if (ok && g->has_temperature) ok = jset(gen, "temperature", jfloat(g->temperature));
    if (ok && g->has_top_k) ok = jset(gen, "top_k", json_integer(g->top_k));
    if (ok && g->has_top_p) ok = jset(gen, "top_p", jfloat(g->top_p));
    if (ok && g->has_min_p) ok = jset(gen, "min_p", jfloat(g->min_p));
    if (ok && g->has_repetition_penalty)
        ok = jset(gen, "repetition_penalty", jfloat(g->repetition_penalty));
    if (ok && g->has_max_new_tokens)
        ok = jset(gen, "max_new_tokens", json_integer(g->max_new_tokens));
    jattach(o, "generation_defaults", &gen, &ok);
    char id[17];
    snprintf(id, sizeof id, "%016llx", (unsigned long long)m->identity);
    ok = ok && jset(o, "identity", json_string(id));

    char *s =
        ok ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    json_decref(rope);
    json_decref(dt);
    json_decref(gen);
    json_decref(files);
    if (!s)
        return pllm_errorf(PLLM_ERR_NOMEM,
                           "describing model %s: out of memory, or a name that is not UTF-8",
                           m->name ? m->name : "?");
    pllm_status st = pllm_buf_append(out, s, strlen(s));
    free(s);
    return st;
}

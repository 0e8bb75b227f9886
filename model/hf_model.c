/* hf_model.c: weights of a Hugging Face directory (see hf_model.h). */
#include "model/hf_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

typedef struct hf_loader {
    pllm_model *m;
    const char *dir;
    json_t *weight_map; /* the index's weight_map, or NULL for a single file */
    const char *index_path;
    size_t f32_used, f32_cap;
    const pllm_hf_config *hc;
    int32_t n_fused, n_per_expert; /* expert layers read in each layout */
} hf_loader;

/* Rows [r0, r0 + n) of a matrix: a view (a fused projection's part). */
static pllm_tensor row_view(const pllm_tensor *t, int64_t r0, int64_t n)
{
    pllm_tensor v = *t;
    v.data = (const uint8_t *)t->data + (size_t)r0 * t->row_bytes;
    v.n_rows = n;
    return v;
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = pllm_malloc(n);
    if (p) snprintf(p, n, "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/", name);
    return p;
}

void pllm_hf_files_free(pllm_hf_files *f)
{
    if (!f) return;
    for (int32_t i = 0; i < f->n_files; i++) pllm_safetensors_close(f->files[i]);
    free(f->files);
    free(f->weights_file);
    free(f);
}

/* Open (once) the shard called name, relative to the directory; *out receives it. */
static pllm_status open_shard(hf_loader *L, const char *name, pllm_safetensors **out)
{
    pllm_hf_files *hf = L->m->hf;
    for (int32_t i = 0; i < hf->n_files; i++) {
        const char *p = hf->files[i]->path, *base = strrchr(p, '/');
        if (strcmp(base ? base + 1 : p, name) == 0) {
            *out = hf->files[i];
            return PLLM_OK;
        }
    }
    pllm_safetensors **nf = pllm_realloc(hf->files, sizeof *nf * (size_t)(hf->n_files + 1));
    if (!nf) return PLLM_ERR_NOMEM;
    hf->files = nf;
    char *path = join(L->dir, name);
    if (!path) return PLLM_ERR_NOMEM;
    pllm_status st = pllm_safetensors_open(out, path);
    free(path);
    if (st != PLLM_OK) {
        if (st == PLLM_ERR_NOT_FOUND && L->index_path)
            return pllm_error_prefix(
                st, "%s: shard '%s' named in weight_map is missing: ", L->index_path, name);
        return st;
    }
    hf->files[hf->n_files++] = *out;
    return PLLM_OK;
}

/* Read model.safetensors.index.json: its weight_map, and every shard it names (opened and
 * validated up front, so a missing or broken shard is reported whatever tensor needs it). */
static pllm_status open_index(hf_loader *L, json_t *root)
{
    const char *ip = L->index_path;
    json_t *wm = json_object_get(root, "weight_map");
    if (!wm) return pllm_errorf(PLLM_ERR_FORMAT, "%s: missing field 'weight_map'", ip);
    if (!json_is_object(wm))
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: field 'weight_map' must be an object", ip);
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v)
    {
        if (!json_is_string(v))
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: field 'weight_map.%s' must be a file name (a string)", ip, key);
        const char *f = json_string_value(v);
        if (!f[0] || strchr(f, '/') || strcmp(f, ".") == 0 || strcmp(f, "..") == 0)
            return pllm_errorf(
                PLLM_ERR_FORMAT,
                "%s: field 'weight_map.%s' = '%.64s' must be a plain file name in the directory",
                ip, key, f);
        pllm_safetensors *s;
        PLLM_TRY(open_shard(L, f, &s));
    }
    L->weight_map = wm;
    return PLLM_OK;
}

/* The tensor called name (NULL when absent and not required). */
static pllm_status find(hf_loader *L, const char *name, bool required, const pllm_st_tensor **t,
                        const pllm_safetensors **file)
{
    *t = NULL;
    pllm_hf_files *hf = L->m->hf;
    if (!L->weight_map) {
        *file = hf->files[0];
        *t = pllm_safetensors_find(hf->files[0], name);
        if (!*t && required)
            return pllm_errorf(PLLM_ERR_NOT_FOUND, "%s: missing tensor '%s'", hf->files[0]->path,
                               name);
        return PLLM_OK;
    }
    const json_t *v = json_object_get(L->weight_map, name);
    if (!v) {
        if (required)
            return pllm_errorf(PLLM_ERR_NOT_FOUND, "%s: missing tensor '%s' (not in weight_map)",
                               L->index_path, name);
        return PLLM_OK;
    }
    pllm_safetensors *s;
    PLLM_TRY(open_shard(L, json_string_value(v), &s));
    *file = s;
    *t = pllm_safetensors_find(s, name);
    if (!*t)
        return pllm_errorf(
            PLLM_ERR_NOT_FOUND,
            "%s: tensor '%s' is not in this shard, where the weight_map of %s puts it", s->path,
            name, L->index_path);
    return PLLM_OK;
}

static pllm_status check_dtype(const pllm_safetensors *s, const pllm_st_tensor *t)
{
    if (t->dtype == PLLM_DTYPE_F32 || t->dtype == PLLM_DTYPE_F16 || t->dtype == PLLM_DTYPE_BF16)
        return PLLM_OK;
    return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                       "%s: tensor '%s' (header entry at byte offset %zu): dtype %s is not "
                       "supported (F32, F16, BF16)",
                       s->path, t->name, t->entry_offset, t->dtype_name);
}

static void shape_str(char *buf, size_t n, const pllm_st_tensor *t)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->n_dims && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* A matrix of n_rows rows of n_cols elements: shape [n_rows, n_cols]. */
static pllm_status load_matrix(hf_loader *L, const char *name, int64_t n_rows, int64_t n_cols,
                               pllm_tensor *out)
{
    const pllm_st_tensor *t;
    const pllm_safetensors *s;
    PLLM_TRY(find(L, name, true, &t, &s));
    if (t->n_dims != 2 || t->shape[0] != n_rows || t->shape[1] != n_cols) {
        char sh[128];
        shape_str(sh, sizeof sh, t);
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: tensor '%s' (header entry at byte offset %zu) has shape %s but "
                           "config.json needs [%lld, %lld]",
                           s->path, name, t->entry_offset, sh, (long long)n_rows,
                           (long long)n_cols);
    }
    PLLM_TRY(check_dtype(s, t));
    *out = (pllm_tensor){.data = t->data,
                         .dtype = t->dtype,
                         .n_rows = n_rows,
                         .n_cols = n_cols,
                         .row_bytes = pllm_dtype_row_bytes(t->dtype, n_cols),
                         .name = t->name};
    L->m->weight_bytes += t->nbytes;
    return PLLM_OK;
}

/* A vector of n elements, converted to float32 into the owned store. */
static pllm_status load_vector(hf_loader *L, const char *name, int64_t n, const float **out)
{
    const pllm_st_tensor *t;
    const pllm_safetensors *s;
    PLLM_TRY(find(L, name, true, &t, &s));
    if (t->n_dims != 1 || t->shape[0] != n) {
        char sh[128];
        shape_str(sh, sizeof sh, t);
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: tensor '%s' (header entry at byte offset %zu) has shape %s but "
                           "config.json needs [%lld]",
                           s->path, name, t->entry_offset, sh, (long long)n);
    }
    PLLM_TRY(check_dtype(s, t));
    PLLM_ASSERT(L->f32_used + (size_t)n <= L->f32_cap);
    float *dst = L->m->owned_f32 + L->f32_used;
    pllm_dequantize_row(dst, t->data, t->dtype, n);
    L->f32_used += (size_t)n;
    L->m->weight_bytes += t->nbytes;
    *out = dst;
    return PLLM_OK;
}

/* x rounded to dtype's precision (F16, BF16), as a torch scalar cast to it */
static float round_to(float x, pllm_dtype dt)
{
    if (dt == PLLM_DTYPE_BF16) return pllm_bf16_to_fp32(pllm_fp32_to_bf16(x));
    if (dt == PLLM_DTYPE_F16) return pllm_fp16_to_fp32(pllm_fp32_to_fp16(x));
    return x;
}

/* The file messages about the directory's tensors name: the index, or the single file. */
static const char *weights_path(const hf_loader *L)
{
    return L->index_path ? L->index_path : L->m->hf->files[0]->path;
}

/* Expert e's rows [r0, r0 + n) of a fused [n_expert, rows, cols] tensor t: a 2-D view. */
static pllm_tensor expert_view(const pllm_st_tensor *t, int64_t e, int64_t r0, int64_t n)
{
    const int64_t rows = t->shape[1], cols = t->shape[2];
    const size_t rb = pllm_dtype_row_bytes(t->dtype, cols);
    return (pllm_tensor){.data = (const uint8_t *)t->data +
                                 ((size_t)e * (size_t)rows + (size_t)r0) * rb,
                         .dtype = t->dtype,
                         .n_rows = n,
                         .n_cols = cols,
                         .row_bytes = rb,
                         .name = t->name};
}

/* Check a fused expert tensor of transformers 5 against [n_expert, rows, cols]; the messages
 * say what the shape looks like instead (another expert count, one half only, transposed). */
static pllm_status check_fused(hf_loader *L, const pllm_safetensors *s, const pllm_st_tensor *t,
                               int64_t rows, int64_t cols, int64_t half_rows)
{
    const pllm_model_config *c = &L->m->cfg;
    char sh[128];
    shape_str(sh, sizeof sh, t);
    const char *fld = L->hc->mixtral ? "num_local_experts" : "num_experts";
    const char *what = half_rows ? "[num_experts, 2 * ff, hidden] (gate rows, then up rows)"
                                 : "[num_experts, hidden, ff]";
    if (t->n_dims != 3)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: tensor '%s' (header entry at byte offset %zu) has shape %s: the "
                           "fused experts of transformers 5 are 3-D, %s = [%d, %lld, %lld]",
                           s->path, t->name, t->entry_offset, sh, what, (int)c->n_expert,
                           (long long)rows, (long long)cols);
    if (t->shape[0] != c->n_expert)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: tensor '%s' (header entry at byte offset %zu) has shape %s: %lld "
                           "experts, but config.json has %s = %d",
                           s->path, t->name, t->entry_offset, sh, (long long)t->shape[0], fld,
                           (int)c->n_expert);
    if (t->shape[1] == rows && t->shape[2] == cols) return check_dtype(s, t);
    const char *hint = "";
    if (half_rows && t->shape[1] == half_rows && t->shape[2] == cols)
        hint = ": one half only (gate_up_proj holds the gate rows and the up rows of each expert)";
    else if (t->shape[1] == cols && t->shape[2] == rows)
        hint = ": transposed ([experts, in, out], as gpt-oss stores its experts), which "
               "transformers 5 does not write for this model_type and pllm does not read";
    return pllm_errorf(PLLM_ERR_FORMAT,
                       "%s: tensor '%s' (header entry at byte offset %zu) has shape %s but "
                       "config.json needs %s = [%d, %lld, %lld]%s",
                       s->path, t->name, t->entry_offset, sh, what, (int)c->n_expert,
                       (long long)rows, (long long)cols, hint);
}

/* Layer i's router and experts (hf_model.h: Qwen3-MoE's, Qwen2-MoE's or Mixtral's names, per
 * expert or fused as transformers 5 saves them). */
static pllm_status load_experts(hf_loader *L, int32_t i, pllm_layer_weights *l)
{
    pllm_model *m = L->m;
    const pllm_model_config *c = &m->cfg;
    const int32_t n = c->n_expert;
    const bool mx = L->hc->mixtral;
    char name[192], gu_name[160], dn_name[160];
    snprintf(gu_name, sizeof gu_name, "model.layers.%d.mlp.experts.gate_up_proj", (int)i);
    snprintf(dn_name, sizeof dn_name, "model.layers.%d.mlp.experts.down_proj", (int)i);
    const pllm_st_tensor *gu, *dn;
    const pllm_safetensors *gs = NULL, *ds = NULL;
    PLLM_TRY(find(L, gu_name, false, &gu, &gs));
    PLLM_TRY(find(L, dn_name, false, &dn, &ds));
    const bool fused = gu || dn;
    /* per expert: Mixtral's block_sparse_moe.experts.E.w1/w3/w2, else mlp.experts.E.*_proj */
    const char *blk = mx ? "block_sparse_moe" : "mlp";
    static const char *const qn[3] = {"gate_proj", "up_proj", "down_proj"}, *const mn[3] = {
                                                                                "w1", "w3", "w2"};
    if (fused) { /* no per-expert tensor of this layer may be there as well */
        for (int k = 0; k < 3; k++)
            for (int32_t e = 0; e < n; e++) {
                const pllm_st_tensor *t;
                const pllm_safetensors *s;
                snprintf(name, sizeof name, "model.layers.%d.%s.experts.%d.%s.weight", (int)i, blk,
                         (int)e, mx ? mn[k] : qn[k]);
                PLLM_TRY(find(L, name, false, &t, &s));
                if (t)
                    return pllm_errorf(
                        PLLM_ERR_FORMAT,
                        "%s: layer %d mixes the per-expert tensor '%s' with the fused '%s' of "
                        "transformers 5: a layer's experts must be in one layout",
                        s->path, (int)i, name, gu ? gu_name : dn_name);
            }
        if (!gu || !dn)
            return pllm_errorf(PLLM_ERR_NOT_FOUND,
                               "%s: missing tensor '%s': the fused experts of transformers 5 need "
                               "it with '%s' (present in %s)",
                               weights_path(L), gu ? dn_name : gu_name, gu ? gu_name : dn_name,
                               (gu ? gs : ds)->path);
    } else { /* neither layout: name both */
        const pllm_st_tensor *t;
        const pllm_safetensors *s;
        snprintf(name, sizeof name, "model.layers.%d.%s.experts.0.%s.weight", (int)i, blk,
                 mx ? mn[0] : qn[0]);
        PLLM_TRY(find(L, name, false, &t, &s));
        if (!t)
            return pllm_errorf(PLLM_ERR_NOT_FOUND,
                               "%s: layer %d has no experts: missing tensor '%s' (one tensor per "
                               "expert) and '%s' (the fused experts of transformers 5)",
                               weights_path(L), (int)i, name, gu_name);
    }
    /* the router: transformers 5 renames Mixtral's block_sparse_moe.gate to mlp.gate */
    snprintf(name, sizeof name, "model.layers.%d.%s.gate.weight", (int)i,
             mx && !fused ? "block_sparse_moe" : "mlp");
    if (mx && fused) {
        const pllm_st_tensor *t;
        const pllm_safetensors *s;
        PLLM_TRY(find(L, name, false, &t, &s));
        if (!t)
            return pllm_errorf(PLLM_ERR_NOT_FOUND,
                               "%s: missing tensor '%s' (with fused experts, transformers 5 "
                               "names Mixtral's router mlp.gate, not block_sparse_moe.gate)",
                               weights_path(L), name);
    }
    PLLM_TRY(load_matrix(L, name, n, c->n_embd, &l->router));
    if (c->n_ff_shexp) { /* Qwen2-MoE: the shared expert, and its gate [1, hidden] as float32 */
        pllm_tensor g;
        snprintf(name, sizeof name, "model.layers.%d.mlp.shared_expert_gate.weight", (int)i);
        PLLM_TRY(load_matrix(L, name, 1, c->n_embd, &g));
        PLLM_ASSERT(L->f32_used + (size_t)c->n_embd <= L->f32_cap);
        float *dst = m->owned_f32 + L->f32_used;
        pllm_dequantize_row(dst, g.data, g.dtype, c->n_embd);
        L->f32_used += (size_t)c->n_embd;
        l->shexp_inp = dst;
        pllm_tensor *st[3] = {&l->shexp_gate_w, &l->shexp_up, &l->shexp_down};
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "model.layers.%d.mlp.shared_expert.%s.weight", (int)i,
                     qn[k]);
            PLLM_TRY(load_matrix(L, name, k == 2 ? c->n_embd : c->n_ff_shexp,
                                 k == 2 ? c->n_ff_shexp : c->n_embd, st[k]));
        }
    }
    pllm_tensor *ts = m->owned_experts + (size_t)i * 3 * (size_t)n;
    l->exp_gate = ts;
    l->exp_up = ts + n;
    l->exp_down = ts + 2 * n;
    if (fused) { /* views into the mapping: expert e's gate rows, up rows, down matrix */
        const int64_t F = c->n_ff_exp, H = c->n_embd;
        PLLM_TRY(check_fused(L, gs, gu, 2 * F, H, F));
        PLLM_TRY(check_fused(L, ds, dn, H, F, 0));
        for (int32_t e = 0; e < n; e++) {
            ts[e] = expert_view(gu, e, 0, F);
            ts[n + e] = expert_view(gu, e, F, F);
            ts[2 * n + e] = expert_view(dn, e, 0, H);
        }
        m->weight_bytes += gu->nbytes + dn->nbytes;
        L->n_fused++;
        return PLLM_OK;
    }
    for (int k = 0; k < 3; k++)
        for (int32_t e = 0; e < n; e++) {
            snprintf(name, sizeof name, "model.layers.%d.%s.experts.%d.%s.weight", (int)i, blk,
                     (int)e, mx ? mn[k] : qn[k]);
            PLLM_TRY(load_matrix(L, name, k == 2 ? c->n_embd : c->n_ff_exp,
                                 k == 2 ? c->n_ff_exp : c->n_embd, &ts[(size_t)k * (size_t)n + e]));
        }
    L->n_per_expert++;
    return PLLM_OK;
}

static pllm_status load_weights(hf_loader *L)
{
    pllm_model *m = L->m;
    const pllm_model_config *c = &m->cfg;
    const int64_t q_dim = (int64_t)c->n_head * c->head_dim,
                  kv_dim = (int64_t)c->n_head_kv * c->head_dim;
    char name[160];

    L->f32_cap = (size_t)c->n_layer *
                     (2 * (size_t)c->n_embd + (c->has_qkv_bias ? (size_t)(q_dim + 2 * kv_dim) : 0) +
                      (c->has_qk_norm ? 2 * (size_t)c->head_dim : 0) +
                      (c->has_post_norms ? 2 * (size_t)c->n_embd : 0) +
                      (c->n_ff_shexp ? (size_t)c->n_embd : 0)) +
                 (size_t)c->n_embd + (size_t)c->rope_dim; /* + rope factors (2 sets) */
    /* the vectors are in the files at 2 bytes or more per element: no allocation beyond that */
    size_t data_bytes = 0;
    for (int32_t i = 0; i < m->hf->n_files; i++)
        data_bytes += m->hf->files[i]->size - m->hf->files[i]->data_offset;
    if (L->f32_cap - (size_t)c->rope_dim > data_bytes / 2)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: config.json needs %zu norm/bias elements but the weight files hold "
                           "only %zu bytes of data",
                           L->dir, L->f32_cap - (size_t)c->rope_dim, data_bytes);
    m->owned_f32 = pllm_malloc(L->f32_cap * sizeof(float));
    m->layers = pllm_calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->owned_f32 || !m->layers) return PLLM_ERR_NOMEM;
    if (c->n_expert) {
        size_t ne;
        if (!pllm_mul_size((size_t)c->n_layer * 3, (size_t)c->n_expert, &ne) ||
            !(m->owned_experts = pllm_calloc(ne, sizeof *m->owned_experts)))
            return PLLM_ERR_NOMEM;
    }

    /* gemma3 (multimodal): the text model's tensors, under the prefix of the transformers
     * version that saved them */
    const char *pre = "model.";
    if (L->hc->multimodal) {
        const pllm_st_tensor *t;
        const pllm_safetensors *s;
        pre = "model.language_model.";
        PLLM_TRY(find(L, "model.language_model.embed_tokens.weight", false, &t, &s));
        if (!t) pre = "language_model.model.";
    }
#define PNAME(s) (snprintf(name, sizeof name, "%s" s, pre), name)
    PLLM_TRY(load_matrix(L, PNAME("embed_tokens.weight"), c->n_vocab, c->n_embd, &m->tok_embd));
    PLLM_TRY(load_vector(L, PNAME("norm.weight"), c->n_embd, &m->output_norm));
#undef PNAME
    if (c->arch == PLLM_ARCH_GEMMA3) /* transformers: sqrt(hidden) in the embedding's dtype */
        m->cfg.embd_scale = round_to(sqrtf((float)c->n_embd), m->tok_embd.dtype);
    if (c->tied_embeddings) {
        m->output =
            m->tok_embd; /* transformers ties lm_head to the embeddings, whatever the file holds */
    } else {
        const pllm_st_tensor *t;
        const pllm_safetensors *s;
        PLLM_TRY(find(L, "lm_head.weight", false, &t, &s));
        if (!t)
            return pllm_errorf(
                PLLM_ERR_NOT_FOUND,
                "%s: missing tensor 'lm_head.weight' (config.json has tie_word_embeddings false)",
                L->index_path ? L->index_path : m->hf->files[0]->path);
        PLLM_TRY(load_matrix(L, "lm_head.weight", c->n_vocab, c->n_embd, &m->output));
    }
    for (int32_t i = 0; i < c->n_layer; i++) {
        pllm_layer_weights *l = &m->layers[i];
#define NAME(s) (snprintf(name, sizeof name, "%slayers.%d." s, pre, (int)i), name)
        PLLM_TRY(load_vector(L, NAME("input_layernorm.weight"), c->n_embd, &l->attn_norm));
        if (L->hc->fused_proj) { /* phi3: q, k, v rows of one matrix */
            pllm_tensor qkv;
            PLLM_TRY(load_matrix(L, NAME("self_attn.qkv_proj.weight"), q_dim + 2 * kv_dim,
                                 c->n_embd, &qkv));
            l->wq = row_view(&qkv, 0, q_dim);
            l->wk = row_view(&qkv, q_dim, kv_dim);
            l->wv = row_view(&qkv, q_dim + kv_dim, kv_dim);
        } else {
            PLLM_TRY(load_matrix(L, NAME("self_attn.q_proj.weight"), q_dim, c->n_embd, &l->wq));
            PLLM_TRY(load_matrix(L, NAME("self_attn.k_proj.weight"), kv_dim, c->n_embd, &l->wk));
            PLLM_TRY(load_matrix(L, NAME("self_attn.v_proj.weight"), kv_dim, c->n_embd, &l->wv));
        }
        PLLM_TRY(load_matrix(L, NAME("self_attn.o_proj.weight"), c->n_embd, q_dim, &l->wo));
        if (c->has_qkv_bias) {
            PLLM_TRY(load_vector(L, NAME("self_attn.q_proj.bias"), q_dim, &l->bq));
            PLLM_TRY(load_vector(L, NAME("self_attn.k_proj.bias"), kv_dim, &l->bk));
            PLLM_TRY(load_vector(L, NAME("self_attn.v_proj.bias"), kv_dim, &l->bv));
        }
        if (c->has_qk_norm) {
            PLLM_TRY(load_vector(L, NAME("self_attn.q_norm.weight"), c->head_dim, &l->q_norm));
            PLLM_TRY(load_vector(L, NAME("self_attn.k_norm.weight"), c->head_dim, &l->k_norm));
        }
        if (c->has_post_norms) { /* gemma3: post_attention_layernorm is the post-norm */
            PLLM_TRY(load_vector(L, NAME("post_attention_layernorm.weight"), c->n_embd,
                                 &l->attn_post_norm));
            PLLM_TRY(
                load_vector(L, NAME("pre_feedforward_layernorm.weight"), c->n_embd, &l->ffn_norm));
            PLLM_TRY(load_vector(L, NAME("post_feedforward_layernorm.weight"), c->n_embd,
                                 &l->ffn_post_norm));
        } else {
            PLLM_TRY(
                load_vector(L, NAME("post_attention_layernorm.weight"), c->n_embd, &l->ffn_norm));
        }
        l->window = L->hc->layer_sliding[i] ? c->sliding_window : 0;
        if (c->n_expert && L->hc->layer_moe[i]) {
            PLLM_TRY(load_experts(L, i, l));
        } else if (L->hc->fused_proj) { /* phi3: gate rows, then up rows (Phi3MLP's chunk(2)) */
            pllm_tensor gu;
            PLLM_TRY(load_matrix(L, NAME("mlp.gate_up_proj.weight"), 2 * (int64_t)c->n_ff,
                                 c->n_embd, &gu));
            l->w_gate = row_view(&gu, 0, c->n_ff);
            l->w_up = row_view(&gu, c->n_ff, c->n_ff);
        } else {
            PLLM_TRY(load_matrix(L, NAME("mlp.gate_proj.weight"), c->n_ff, c->n_embd, &l->w_gate));
            PLLM_TRY(load_matrix(L, NAME("mlp.up_proj.weight"), c->n_ff, c->n_embd, &l->w_up));
        }
        if (!pllm_layer_is_moe(l))
            PLLM_TRY(load_matrix(L, NAME("mlp.down_proj.weight"), c->n_embd, c->n_ff, &l->w_down));
#undef NAME
    }
    if (L->n_fused || L->n_per_expert)
        m->expert_layout = !L->n_per_expert ? "fused" : !L->n_fused ? "per-expert" : "mixed";
    if (c->arch == PLLM_ARCH_GEMMA3) /* Gemma3RMSNorm multiplies by (1 + w): every norm vector */
        for (size_t i = 0; i < L->f32_used; i++) m->owned_f32[i] += 1.0f;
    if (c->rope_scaling == PLLM_ROPE_SCALING_LLAMA3) {
        float *ff = m->owned_f32 + L->f32_used;
        pllm_rope_llama3_factors(ff, c);
        L->f32_used += (size_t)c->rope_dim / 2;
        m->rope_freq_factors = ff;
    }
    if (c->rope_scaling == PLLM_ROPE_SCALING_LONGROPE) {
        float *ff = m->owned_f32 + L->f32_used;
        memcpy(ff, L->hc->rope_short, sizeof(float) * (size_t)(c->rope_dim / 2));
        memcpy(ff + c->rope_dim / 2, L->hc->rope_long, sizeof(float) * (size_t)(c->rope_dim / 2));
        L->f32_used += (size_t)c->rope_dim;
        m->rope_freq_factors = ff;
        m->rope_freq_factors_long = ff + c->rope_dim / 2;
    }
    return PLLM_OK;
}

/* Token ids of the generation defaults must be in the vocabulary. */
static pllm_status check_ids(const char *path, const pllm_generation_defaults *g, int32_t n_vocab)
{
    for (int32_t i = 0; i < g->n_eos; i++)
        if (g->eos_ids[i] >= n_vocab)
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: eos_token_id %d is outside the vocabulary (vocab_size %d)",
                               path, g->eos_ids[i], n_vocab);
    if (g->has_bos && g->bos_id >= n_vocab)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: bos_token_id %d is outside the vocabulary (vocab_size %d)", path,
                           g->bos_id, n_vocab);
    return PLLM_OK;
}

pllm_status pllm_hf_model_init(pllm_model *m, const char *dir)
{
    pllm_status st;
    json_t *config = NULL, *gen = NULL, *index = NULL;
    char *config_path = join(dir, "config.json"), *gen_path = join(dir, "generation_config.json"),
         *index_path = join(dir, "model.safetensors.index.json"),
         *single_path = join(dir, "model.safetensors");
    hf_loader L = {.m = m, .dir = dir};
    XXH64_hash_t h = 0;
    if (!config_path || !gen_path || !index_path || !single_path) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    m->format = PLLM_MODEL_HF;
    if (!(m->hf = pllm_calloc(1, sizeof *m->hf))) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }

    /* config.json */
    if ((st = pllm_hf_read_json(config_path, &config)) != PLLM_OK) {
        if (st == PLLM_ERR_NOT_FOUND)
            pllm_error_prefix(st, "%s is not a Hugging Face model directory: ", dir);
        goto fail;
    }
    pllm_hf_config hc;
    if ((st = pllm_hf_parse_config(config_path, config, &hc)) != PLLM_OK) goto fail;
    L.hc = &hc;
    m->cfg = hc.cfg;
    m->source_arch = hc.source_arch;
    {
        char *s = json_dumps(config, JSON_SORT_KEYS | JSON_COMPACT);
        if (!s) {
            st = pllm_errorf(PLLM_ERR_NOMEM, "out of memory");
            goto fail;
        }
        h = XXH3_64bits_withSeed(s, strlen(s), h);
        free(s);
    }

    /* generation_config.json (optional); else config.json's bos/eos */
    st = pllm_hf_read_json(gen_path, &gen);
    if (st == PLLM_OK) {
        if ((st = pllm_hf_parse_generation_config(gen_path, gen, &m->gen)) != PLLM_OK) goto fail;
        if ((st = check_ids(gen_path, &m->gen, m->cfg.n_vocab)) != PLLM_OK) goto fail;
    } else if (st == PLLM_ERR_NOT_FOUND) {
        pllm_error_clear();
        m->gen.has_bos = hc.has_bos;
        m->gen.bos_id = hc.bos_id;
        if (hc.n_eos) {
            if (!(m->gen.eos_ids = pllm_malloc(sizeof(int32_t) * (size_t)hc.n_eos))) {
                st = PLLM_ERR_NOMEM;
                goto fail;
            }
            memcpy(m->gen.eos_ids, hc.eos_ids, sizeof(int32_t) * (size_t)hc.n_eos);
            m->gen.n_eos = hc.n_eos;
        }
        if ((st = check_ids(config_path, &m->gen, m->cfg.n_vocab)) != PLLM_OK) goto fail;
    } else {
        goto fail;
    }

    /* the weights: sharded (index) or one file */
    if (access(index_path, F_OK) == 0) {
        L.index_path = index_path;
        if ((st = pllm_hf_read_json(index_path, &index)) != PLLM_OK) goto fail;
        if ((st = open_index(&L, index)) != PLLM_OK) goto fail;
        if (m->hf->n_files == 0) {
            st = pllm_errorf(PLLM_ERR_FORMAT, "%s: weight_map names no tensors", index_path);
            goto fail;
        }
        m->hf->weights_file = index_path;
        index_path = NULL;
    } else {
        pllm_safetensors *s;
        if ((st = open_shard(&L, "model.safetensors", &s)) != PLLM_OK) {
            if (st == PLLM_ERR_NOT_FOUND)
                pllm_errorf(st,
                            "%s: no weights: neither model.safetensors nor "
                            "model.safetensors.index.json (only safetensors are supported)",
                            dir);
            goto fail;
        }
        m->hf->weights_file = single_path;
        single_path = NULL;
    }
    /* the vectors are read from the mappings: a file cut short meanwhile reads zeros, caught here
     */
    for (int32_t i = 0; i < m->hf->n_files; i++) pllm_safetensors_set_polled(m->hf->files[i], true);
    st = load_weights(&L);
    for (int32_t i = 0; i < m->hf->n_files; i++)
        pllm_safetensors_set_polled(m->hf->files[i], false);
    if (st != PLLM_OK) goto fail;
    for (int32_t i = 0; i < m->hf->n_files; i++)
        if ((st = pllm_safetensors_check_file(m->hf->files[i])) != PLLM_OK) goto fail;
    for (int32_t i = 0; i < m->hf->n_files; i++) {
        const pllm_safetensors *s = m->hf->files[i];
        h = XXH3_64bits_withSeed(s->map, s->data_offset, h ^ (uint64_t)s->size);
    }
    m->identity = h;
    st = PLLM_OK;
fail:
    json_decref(config);
    json_decref(gen);
    json_decref(index);
    free(config_path);
    free(gen_path);
    free(index_path);
    free(single_path);
    return st;
}

/*
 * info.c: `pllm info [MODEL]`: what a model is: architecture and sizes, tensor dtypes,
 * tokenizer, chat template (with a sample rendering), generation defaults. Human-readable, or
 * one JSON object with --json. GGUF files and Hugging Face directories; a model whose
 * tokenizer cannot be loaded (a random-weight test GGUF without tokenizer metadata) is still
 * described, with the reason.
 */
#include "cmd/commands.h"
#include "cmd/options.h"
#include "cmd/runtime.h"
#include "cmd/shared.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t tensor_elems(const pllm_tensor *t)
{
    return t->data ? t->n_rows * t->n_cols : 0;
}

/* Parameters: every matrix plus the norm vectors (and biases); with experts, active counts the
 * n_expert_used experts a token runs through instead of all of them. */
static int64_t count_params_of(const pllm_model *m, bool active)
{
    const pllm_model_config *c = &m->cfg;
    int64_t n = tensor_elems(&m->tok_embd) + c->n_embd; /* + output norm */
    if (!c->tied_embeddings) n += tensor_elems(&m->output);
    for (int32_t l = 0; l < c->n_layer; l++) {
        const pllm_layer_weights *w = &m->layers[l];
        n += tensor_elems(&w->wq) + tensor_elems(&w->wk) + tensor_elems(&w->wv) +
             tensor_elems(&w->wo) + tensor_elems(&w->w_gate) + tensor_elems(&w->w_up) +
             tensor_elems(&w->w_down) + 2 * (int64_t)c->n_embd;
        if (c->has_qkv_bias) n += w->wq.n_rows + w->wk.n_rows + w->wv.n_rows;
        if (c->has_qk_norm) n += 2 * (int64_t)c->head_dim;
        if (c->has_post_norms) n += 2 * (int64_t)c->n_embd; /* Gemma 3 */
        if (pllm_layer_is_moe(w)) {
            n += tensor_elems(&w->router) + tensor_elems(&w->shexp_gate_w) +
                 tensor_elems(&w->shexp_up) + tensor_elems(&w->shexp_down) +
                 (w->shexp_inp ? c->n_embd : 0);
            for (int32_t e = 0; e < (active ? c->n_expert_used : c->n_expert); e++)
                n += tensor_elems(&w->exp_gate[e]) + tensor_elems(&w->exp_up[e]) +
                     tensor_elems(&w->exp_down[e]);
        }
    }
    return n;
}

static int64_t count_params(const pllm_model *m)
{
    return count_params_of(m, false);
}

static json_t *token_entry(const pllm_tokenizer *t, int32_t id)
{
    size_t n = 0;
    const char *s = id >= 0 ? pllm_tokenizer_token_bytes(t, id, &n) : NULL;
    if (!s) return json_null();
    json_t *text = json_stringn(s, n);
    return json_pack("{s:i, s:o}", "id", id, "text", text ? text : json_string("?"));
}

static json_t *tokenizer_json(const cmd_runtime *rt)
{
    if (!rt->tok)
        return json_pack("{s:b, s:s}", "loaded", 0, "error",
                         rt->tok_error ? rt->tok_error : "unknown");
    const pllm_tokenizer *t = rt->tok;
    int32_t n_stop = 0;
    const int32_t *stop = pllm_tokenizer_stop_ids(t, &n_stop);
    json_t *stops = json_array();
    for (int32_t i = 0; i < n_stop; i++) json_array_append_new(stops, token_entry(t, stop[i]));
    return json_pack("{s:b, s:s, s:i, s:o, s:o, s:o}", "loaded", 1, "kind",
                     pllm_tokenizer_describe(t), "n_vocab", pllm_tokenizer_n_vocab(t), "bos",
                     token_entry(t, pllm_tokenizer_bos(t)), "eos",
                     token_entry(t, pllm_tokenizer_eos(t)), "stop_tokens", stops);
}

static json_t *chat_json(const cmd_runtime *rt)
{
    json_t *o = json_object();
    json_object_set_new(o, "present", json_boolean(rt->chat_src != NULL));
    if (!rt->chat_src) return o;
    json_object_set_new(o, "source", json_string(rt->chat_src));
    json_object_set_new(o, "usable", json_boolean(rt->chat != NULL));
    if (rt->chat_error) json_object_set_new(o, "error", json_string(rt->chat_error));
    if (rt->chat) {
        pllm_chat_msg msgs[] = {{"system", "You are a helpful assistant."}, {"user", "Hello!"}};
        pllm_chat_render_params rp = {.messages = msgs,
                                      .n_messages = 2,
                                      .add_generation_prompt = true,
                                      .bos_token = rt->bos_text,
                                      .eos_token = rt->eos_text};
        pllm_buf out = {0};
        if (pllm_chat_template_render(rt->chat, &rp, &out) == PLLM_OK)
            json_object_set_new(o, "example", json_string(out.s ? out.s : ""));
        else
            json_object_set_new(o, "example_error", json_string(pllm_errmsg()));
        pllm_buf_free(&out);
    }
    return o;
}

static void print_human(const json_t *j, bool show_template)
{
    const json_t *m = json_object_get(j, "model");
    const char *(*S)(const json_t *) = json_string_value;
#define G(obj, k) json_object_get(obj, k)
#define I(obj, k) (long long)json_integer_value(G(obj, k))
    printf("%-20s %s\n", "model:", S(G(m, "name")));
    printf("%-20s %s (%s)\n", "path:", S(G(m, "path")), S(G(m, "format")));
    printf("%-20s %s (the file says '%s')\n", "architecture:", S(G(m, "arch")),
           S(G(m, "source_arch")));
    printf("%-20s %.1f M (%lld)\n",
           "parameters:", (double)json_integer_value(G(j, "parameters")) / 1e6, I(j, "parameters"));
    printf("%-20s %.1f MB\n", "weights:", (double)json_integer_value(G(m, "weight_bytes")) / 1e6);
    printf("%-20s %lld layers, hidden %lld, ffn %lld, %lld heads, %lld KV heads%s, head dim %lld\n",
           "shape:", I(m, "n_layer"), I(m, "n_embd"), I(m, "n_ff"), I(m, "n_head"),
           I(m, "n_head_kv"), I(m, "n_head_kv") < I(m, "n_head") ? " (GQA)" : "", I(m, "head_dim"));
    printf("%-20s %lld tokens (trained)\n", "context:", I(m, "n_ctx_train"));
    printf("%-20s %lld\n", "vocabulary:", I(m, "n_vocab"));
    const json_t *rope = G(m, "rope");
    printf("%-20s theta %g, dim %lld, %s pairs, scaling %s",
           "rope:", json_number_value(G(rope, "theta")), I(rope, "dim"), S(G(rope, "mode")),
           S(G(rope, "scaling")));
    static const char *const rope_keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                                            "original_max_position_embeddings", "attn_factor"};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(rope_keys); i++)
        if (json_is_number(G(rope, rope_keys[i])))
            printf(" %s %g", rope_keys[i], json_number_value(G(rope, rope_keys[i])));
    const json_t *ff = G(rope, "freq_factors");
    if (json_array_size(ff) > 0) {
        double lo = INFINITY, hi = -INFINITY;
        size_t i;
        json_t *x;
        json_array_foreach(ff, i, x)
        {
            lo = fmin(lo, json_number_value(x));
            hi = fmax(hi, json_number_value(x));
        }
        printf("; %zu frequency factors in [%g, %g]", json_array_size(ff), lo, hi);
    }
    const json_t *lf = G(rope, "long_factors"); /* LongRoPE: past the original context */
    if (json_array_size(lf) > 0) {
        double lo = INFINITY, hi = -INFINITY;
        size_t i;
        json_t *x;
        json_array_foreach(lf, i, x)
        {
            lo = fmin(lo, json_number_value(x));
            hi = fmax(hi, json_number_value(x));
        }
        printf(" (short), long factors in [%g, %g]", lo, hi);
    }
    printf("\n");
    printf("%-20s", "matrix dtypes:");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)G(m, "matrix_dtypes"), k, v)
        printf(" %s x%lld", k, (long long)json_integer_value(v));
    printf("\n%-20s %s; QKV bias %s; QK norm %s; norm eps %g\n",
           "embeddings:", json_is_true(G(m, "tied_embeddings")) ? "tied" : "untied",
           json_is_true(G(m, "qkv_bias")) ? "yes" : "no",
           json_is_true(G(m, "qk_norm")) ? "yes (per head, before RoPE)" : "no",
           json_number_value(G(m, "norm_eps")));
    const json_t *lt = G(m, "layer_types");
    if (json_is_array(lt)) { /* Gemma 3 */
        size_t i, n_sw = 0;
        json_array_foreach(lt, i, v) n_sw += strcmp(json_string_value(v), "sliding") == 0;
        printf("%-20s %zu sliding-window (window %lld, RoPE base %g) and %zu global of %zu; GeGLU, "
               "post-norms, embeddings x%g, attention scale %g\n",
               "layers:", n_sw, I(m, "sliding_window"),
               json_number_value(G(G(m, "rope"), "theta_local")), json_array_size(lt) - n_sw,
               json_array_size(lt), json_number_value(G(m, "embd_scale")),
               json_number_value(G(m, "attn_scale")));
        /* the hybrid KV layout (docs/architecture.md "Hybrid KV"): per sequence of the trained
         * context, F16 rows (head_dim * 2 bytes per KV head, K and V) */
        const double row = 2.0 * 2.0 * (double)I(m, "n_head_kv") * (double)I(m, "head_dim");
        const double n_ctx = (double)I(m, "n_ctx_train"), W = (double)I(m, "sliding_window");
        const double n_gl = (double)(json_array_size(lt) - n_sw);
        const double all = row * (double)json_array_size(lt) * n_ctx,
                     hyb = row * (n_gl * n_ctx + (double)n_sw * PLLM_MIN(n_ctx, W + 16));
        if (n_sw > 0 && W < n_ctx)
            printf("%-20s two pools: the %zu sliding layers keep a sequence's last %lld "
                   "positions, the %.0f global ones all; a %.0f-token sequence takes %.1f MB of "
                   "F16 K/V instead of %.1f MB (%.2fx the sequences per budget; --no-kv-hybrid "
                   "keeps everything)\n",
                   "kv cache:", n_sw, I(m, "sliding_window"), n_gl, n_ctx, hyb / 1e6, all / 1e6,
                   all / hyb);
    }
    const json_t *ex = G(m, "experts");
    if (json_is_object(ex)) { /* mixture of experts */
        printf("%-20s %lld, %lld per token (softmax, top-k%s), expert FFN %lld%s, in %zu of %lld "
               "layers; %.2fM active parameters; expert tensors %s\n",
               "experts:", I(ex, "count"), I(ex, "used"),
               json_is_true(G(ex, "norm_topk_prob")) ? ", renormalized" : "", I(ex, "ff_length"),
               I(ex, "shared_experts") ? " + a shared expert (sigmoid-gated)" : "",
               json_array_size(G(ex, "layers")), I(m, "n_layer"),
               (double)json_integer_value(G(j, "active_parameters")) / 1e6, S(G(ex, "layout")));
    }
    const json_t *t = G(j, "tokenizer");
    if (json_is_true(G(t, "loaded"))) {
        printf("%-20s %s\n", "tokenizer:", S(G(t, "kind")));
        const json_t *bos = G(t, "bos"), *eos = G(t, "eos");
        printf("%-20s BOS %s%s%s, EOS %s%s%s; stop tokens:", "special tokens:",
               bos && !json_is_null(bos) ? S(G(bos, "text")) : "none", "", "",
               eos && !json_is_null(eos) ? S(G(eos, "text")) : "none", "", "");
        size_t i;
        json_array_foreach(G(t, "stop_tokens"), i, v)
            printf(" %s (%lld)", S(G(v, "text")), I(v, "id"));
        printf("\n");
    } else {
        printf("%-20s not loadable: %s\n", "tokenizer:", S(G(t, "error")));
    }
    const json_t *c = G(j, "chat_template");
    if (!json_is_true(G(c, "present"))) {
        printf("%-20s none (messages cannot be rendered; use raw prompts)\n", "chat template:");
    } else {
        printf("%-20s %zu characters, %s\n", "chat template:", strlen(S(G(c, "source"))),
               json_is_true(G(c, "usable")) ? "usable" : "NOT usable");
        if (G(c, "error")) printf("%-20s %s\n", "", S(G(c, "error")));
        if (G(c, "example"))
            printf("%-20s (system + user \"Hello!\"):\n%s\n",
                   "example rendering:", S(G(c, "example")));
        if (show_template) printf("%-20s\n%s\n", "template source:", S(G(c, "source")));
    }
    /* generation defaults: "key value" pairs, numbers as %g (not JSON's 17 digits) */
    printf("%-20s", "generation defaults:");
    const json_t *gd = G(m, "generation_defaults");
    if (json_object_size(gd) == 0) printf(" none (built-in sampling defaults)");
    const char *sep = " ";
    json_object_foreach((json_t *)gd, k, v)
    {
        printf("%s%s ", sep, k);
        sep = ", ";
        if (json_is_array(v)) {
            size_t i;
            json_t *x;
            printf("[");
            json_array_foreach(v, i, x)
                printf("%s%lld", i ? ", " : "", (long long)json_integer_value(x));
            printf("]");
        } else if (json_is_integer(v)) {
            printf("%lld", (long long)json_integer_value(v));
        } else if (json_is_real(v)) {
            printf("%g", json_real_value(v));
        } else {
            printf("%s", json_is_true(v) ? "true" : "false");
        }
    }
    printf("\n");
    printf("%-20s %s\n", "identity:", S(G(m, "identity")));
#undef G
#undef I
}

int cmd_info(int argc, char **argv)
{
    cmd_runtime_opts ro = {.no_backend = true, .tokenizer_optional = true};
    bool as_json = false, show_template = false;
    const cmd_opt opts[] = {
        {"model", 'm', CMD_OPT_STR, &ro.model, "FILE", "$PLLM_HOME/models/" PLLM_DEFAULT_MODEL_FILE,
         "model (also accepted as the argument)", NULL},
        {"json", 0, CMD_OPT_FLAG, &as_json, NULL, "off", "print one JSON object", NULL},
        {"template", 0, CMD_OPT_FLAG, &show_template, NULL, "off",
         "also print the chat template's source", NULL},
    };
    const cmd_spec spec = {.usage = "pllm info [OPTIONS] [MODEL]",
                           .summary = "Describe a model (a GGUF file or a Hugging Face directory): "
                                      "architecture, sizes, dtypes,\n"
                                      "tokenizer, chat template and generation defaults.",
                           .opts = opts,
                           .n_opts = PLLM_ARRAY_LEN(opts),
                           .min_pos = 0,
                           .max_pos = 1};
    const char *pos[1];
    int n_pos;
    int rc = cmd_parse(&spec, argc, argv, pos, &n_pos);
    if (rc) return rc == 1 ? 0 : 2;
    if (n_pos == 1) {
        if (ro.model) {
            fprintf(stderr,
                    "pllm: give the model either as the argument or with --model, not both\n");
            return 2;
        }
        ro.model = pos[0];
    }
    cmd_runtime rt;
    if ((rc = cmd_runtime_open(&rt, &ro, true)) != 0) return rc;
    pllm_buf desc = {0};
    if (pllm_model_describe(rt.model, &desc) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        cmd_runtime_close(&rt);
        return 3;
    }
    json_error_t jerr;
    json_t *model = json_loadb(desc.s, desc.n, 0, &jerr);
    pllm_buf_free(&desc);
    if (!model) {
        fprintf(stderr, "pllm: internal error: the model description is not JSON: %s\n", jerr.text);
        cmd_runtime_close(&rt);
        return 3;
    }
    json_t *j = json_object();
    json_object_set_new(j, "model", model);
    json_object_set_new(j, "parameters", json_integer(count_params(rt.model)));
    if (rt.model->cfg.n_expert)
        json_object_set_new(j, "active_parameters", json_integer(count_params_of(rt.model, true)));
    json_object_set_new(j, "tokenizer", tokenizer_json(&rt));
    json_object_set_new(j, "chat_template", chat_json(&rt));
    if (as_json) {
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (s) puts(s);
        free(s);
    } else {
        print_human(j, show_template);
    }
    json_decref(j);
    cmd_runtime_close(&rt);
    return 0;
}

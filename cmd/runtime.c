#include "cmd/runtime.h"

#include "cpu/cpu_backend.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *cmd_default_model_path(void)
{
    const char *home = getenv("PLLM_HOME");
    pllm_buf b = {0};
    if (home && *home)
        pllm_buf_appendf(&b, "%s/models/%s", home, PLLM_DEFAULT_MODEL_FILE);
    else
        pllm_buf_appendf(&b, "%s/.cache/pllm/models/%s", getenv("HOME") ? getenv("HOME") : ".",
                         PLLM_DEFAULT_MODEL_FILE);
    return b.s;
}

static char *token_text(const pllm_tokenizer *t, int32_t id)
{
    size_t n = 0;
    const char *s = id >= 0 ? pllm_tokenizer_token_bytes(t, id, &n) : NULL;
    char *out = pllm_malloc(n + 1);
    if (!out) return NULL;
    if (s) memcpy(out, s, n);
    out[n] = 0;
    return out;
}

/* The chat template of a Hugging Face directory: tokenizer_config.json "chat_template" (a
 * string, or a list of {"name", "template"} from which "default" is taken). NULL when none. */
static char *hf_chat_template(const char *dir)
{
    pllm_buf p = {0};
    pllm_buf_appendf(&p, "%s/tokenizer_config.json", dir);
    json_t *root = p.s ? json_load_file(p.s, 0, NULL) : NULL;
    pllm_buf_free(&p);
    json_t *t = json_object_get(root, "chat_template");
    char *out = NULL;
    if (json_is_string(t)) {
        out = pllm_strdup(json_string_value(t));
    } else if (json_is_array(t)) {
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e)
        {
            if (json_is_string(json_object_get(e, "template")) &&
                json_is_string(json_object_get(e, "name")) &&
                !strcmp(json_string_value(json_object_get(e, "name")), "default"))
                out = pllm_strdup(json_string_value(json_object_get(e, "template")));
        }
    }
    json_decref(root);
    return out;
}

int cmd_runtime_open(cmd_runtime *rt, const cmd_runtime_opts *o, bool quiet)
{
    memset(rt, 0, sizeof *rt);
    char *def = NULL;
    const char *path = o->model;
    if (!path) {
        def = cmd_default_model_path();
        path = def;
        struct stat sb;
        if (stat(path, &sb) != 0) {
            fprintf(stderr,
                    "pllm: no model given and the default model is missing: looked for %s\n"
                    "      run scripts/setup.sh to fetch it (or set PLLM_HOME), or pass --model "
                    "FILE.gguf\n",
                    path);
            free(def);
            return 3;
        }
    }
    const char *dev = o->device ? o->device : "auto";
    if (!o->no_backend) {
        if (strcmp(dev, "auto") && strcmp(dev, "cpu") && strncmp(dev, "cuda", 4)) {
            fprintf(stderr, "pllm: --device '%s' is not one of auto, cpu, cuda, cuda:N\n", dev);
            free(def);
            return 2;
        }
        if (strncmp(dev, "cuda", 4) == 0) {
            fprintf(stderr,
                    "pllm: --device %s: this pllm was built without the CUDA backend; use --device "
                    "cpu\n",
                    dev);
            free(def);
            return 3;
        }
    }
    pllm_status st = pllm_model_load(&rt->model, path);
    if (st != PLLM_OK) {
        fprintf(stderr, "pllm: cannot load model: %s\n", pllm_errmsg());
        free(def);
        return 3;
    }
    st = rt->model->gguf ? pllm_tokenizer_from_gguf(&rt->tok, rt->model->gguf)
                         : pllm_tokenizer_from_dir(&rt->tok, path);
    if (st != PLLM_OK) {
        pllm_buf m = {0};
        pllm_buf_appendf(&m, "cannot load the tokenizer of %s: %s", path, pllm_errmsg());
        rt->tok_error = m.s;
    }
    if (st != PLLM_OK && !o->tokenizer_optional) {
        fprintf(stderr, "pllm: %s\n", rt->tok_error ? rt->tok_error : "cannot load the tokenizer");
        free(def);
        cmd_runtime_close(rt);
        return 3;
    }
    if (rt->tok) {
        rt->bos_text = token_text(rt->tok, pllm_tokenizer_bos(rt->tok));
        rt->eos_text = token_text(rt->tok, pllm_tokenizer_eos(rt->tok));
    }
    if (rt->model->gguf) {
        const pllm_gguf_kv *tmpl = pllm_gguf_find(rt->model->gguf, "tokenizer.chat_template");
        if (tmpl && tmpl->type == PLLM_GGUF_STRING) {
            rt->chat_src = pllm_malloc(tmpl->v.str.len + 1);
            if (rt->chat_src) {
                memcpy(rt->chat_src, tmpl->v.str.s, tmpl->v.str.len);
                rt->chat_src[tmpl->v.str.len] = 0;
            }
        }
    } else {
        rt->chat_src = hf_chat_template(path);
    }
    free(def);
    if (rt->chat_src) {
        const char *name =
            rt->model->gguf ? "tokenizer.chat_template" : "tokenizer_config.json chat_template";
        st = pllm_chat_template_parse(&rt->chat, rt->chat_src, strlen(rt->chat_src), name);
        if (st != PLLM_OK) {
            rt->chat_error = pllm_strdup(pllm_errmsg());
            if (!quiet)
                fprintf(stderr, "pllm: warning: the model's chat template cannot be used: %s\n",
                        rt->chat_error);
        }
    }
    if (o->no_backend) return 0;
    pllm_cpu_params cp;
    pllm_cpu_params_defaults(&cp);
    cp.n_threads = o->threads;
    if ((st = pllm_cpu_backend_create(&rt->backend, rt->model, &cp)) != PLLM_OK) {
        fprintf(stderr, "pllm: cannot start the CPU backend: %s\n", pllm_errmsg());
        cmd_runtime_close(rt);
        return 3;
    }
    rt->device_name = "cpu";
    if (!quiet) {
        int nt = 0;
        const char *isa = pllm_cpu_backend_describe(&rt->backend, &nt);
        fprintf(
            stderr,
            "pllm: model %s (%s, %d layers, %.1f MB of weights) on %s (%s kernels, %d threads)%s\n",
            rt->model->name, pllm_arch_name(rt->model->cfg.arch), rt->model->cfg.n_layer,
            (double)rt->model->weight_bytes / 1e6, rt->device_name, isa, nt,
            strcmp(dev, "auto") == 0 ? " (auto: no CUDA backend in this build)" : "");
    }
    return 0;
}

void cmd_runtime_close(cmd_runtime *rt)
{
    pllm_backend_free(&rt->backend);
    pllm_chat_template_free(rt->chat);
    pllm_tokenizer_free(rt->tok);
    pllm_model_free(rt->model);
    free(rt->tok_error);
    free(rt->chat_src);
    free(rt->chat_error);
    free(rt->bos_text);
    free(rt->eos_text);
    memset(rt, 0, sizeof *rt);
}

void cmd_record_where(char *out, size_t cap, const char *file, const pllm_record *rec)
{
    if (rec->element > 0)
        snprintf(out, cap, "%s:%lld: element %lld: ", file, (long long)rec->line,
                 (long long)rec->element);
    else
        snprintf(out, cap, "%s:%lld: ", file, (long long)rec->line);
}

pllm_status cmd_record_tokens(const cmd_runtime *rt, const char *file, const pllm_record *rec,
                              pllm_tokens *ids, pllm_buf *rendered)
{
    char where[512];
    cmd_record_where(where, sizeof where, file, rec);
    pllm_encode_opts eo = {.add_special = true, .parse_special = true};
    pllm_status st;
    if (rec->prompt) {
        st = pllm_tokenizer_encode(rt->tok, rec->prompt, strlen(rec->prompt), &eo, ids);
        if (st != PLLM_OK) return pllm_error_prefix(st, "%sfield 'prompt': ", where);
        if (rendered) pllm_buf_append(rendered, rec->prompt, strlen(rec->prompt));
        return PLLM_OK;
    }
    const char *field = rec->format == PLLM_FORMAT_SHAREGPT ? "conversations" : "messages";
    if (!rt->chat)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%sfield '%s': rendering messages needs a chat template, and %s", where,
                           field, rt->chat_error ? rt->chat_error : "the model has none");
    pllm_buf text = {0};
    pllm_chat_render_params rp = {.messages = rec->messages,
                                  .n_messages = rec->n_messages,
                                  .add_generation_prompt = true,
                                  .bos_token = rt->bos_text,
                                  .eos_token = rt->eos_text};
    st = pllm_chat_template_render(rt->chat, &rp, &text);
    if (st != PLLM_OK) {
        pllm_error_prefix(st, "%sfield '%s': chat template: ", where, field);
        pllm_buf_free(&text);
        return st;
    }
    eo.add_special = false;
    st = pllm_tokenizer_encode(rt->tok, text.s ? text.s : "", text.n, &eo, ids);
    if (st != PLLM_OK)
        pllm_error_prefix(st, "%sfield '%s': ", where, field);
    else if (rendered && text.n)
        pllm_buf_append(rendered, text.s, text.n);
    pllm_buf_free(&text);
    return st;
}

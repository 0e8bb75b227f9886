#include "cmd/runtime.h"

#include "cpu/cpu_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *cmd_default_model_path(void)
{
    const char *home = getenv("PLLM_HOME");
    pllm_buf b = {0};
    if (home && *home) pllm_buf_appendf(&b, "%s/models/%s", home, PLLM_DEFAULT_MODEL_FILE);
    else pllm_buf_appendf(&b, "%s/.cache/pllm/models/%s", getenv("HOME") ? getenv("HOME") : ".", PLLM_DEFAULT_MODEL_FILE);
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
                    "      run scripts/setup.sh to fetch it (or set PLLM_HOME), or pass --model FILE.gguf\n",
                    path);
            free(def);
            return 3;
        }
    }
    const char *dev = o->device ? o->device : "auto";
    if (strcmp(dev, "auto") && strcmp(dev, "cpu") && strncmp(dev, "cuda", 4)) {
        fprintf(stderr, "pllm: --device '%s' is not one of auto, cpu, cuda, cuda:N\n", dev);
        free(def);
        return 2;
    }
    if (strncmp(dev, "cuda", 4) == 0) {
        fprintf(stderr, "pllm: --device %s: this pllm was built without the CUDA backend; use --device cpu\n", dev);
        free(def);
        return 3;
    }
    pllm_status st = pllm_model_load(&rt->model, path);
    if (st != PLLM_OK) {
        fprintf(stderr, "pllm: cannot load model: %s\n", pllm_errmsg());
        free(def);
        return 3;
    }
    if (!rt->model->gguf) {
        fprintf(stderr, "pllm: %s: only GGUF models have a tokenizer pllm can load yet\n", path);
        st = PLLM_ERR_UNSUPPORTED;
    } else {
        st = pllm_tokenizer_from_gguf(&rt->tok, rt->model->gguf);
        if (st != PLLM_OK) fprintf(stderr, "pllm: cannot load the tokenizer of %s: %s\n", path, pllm_errmsg());
    }
    free(def);
    if (st != PLLM_OK) {
        cmd_runtime_close(rt);
        return 3;
    }
    rt->bos_text = token_text(rt->tok, pllm_tokenizer_bos(rt->tok));
    rt->eos_text = token_text(rt->tok, pllm_tokenizer_eos(rt->tok));
    const pllm_gguf_kv *tmpl = pllm_gguf_find(rt->model->gguf, "tokenizer.chat_template");
    if (tmpl && tmpl->type == PLLM_GGUF_STRING) {
        st = pllm_chat_template_parse(&rt->chat, tmpl->v.str.s, tmpl->v.str.len, "tokenizer.chat_template");
        if (st != PLLM_OK) {
            rt->chat_error = pllm_strdup(pllm_errmsg());
            if (!quiet) fprintf(stderr, "pllm: warning: the model's chat template cannot be used: %s\n", rt->chat_error);
        }
    }
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
        fprintf(stderr, "pllm: model %s (%s, %d layers, %.1f MB of weights) on %s%s\n", rt->model->name,
                pllm_arch_name(rt->model->cfg.arch), rt->model->cfg.n_layer, (double)rt->model->weight_bytes / 1e6,
                rt->device_name, strcmp(dev, "auto") == 0 ? " (auto: no CUDA backend in this build)" : "");
    }
    return 0;
}

void cmd_runtime_close(cmd_runtime *rt)
{
    pllm_backend_free(&rt->backend);
    pllm_chat_template_free(rt->chat);
    pllm_tokenizer_free(rt->tok);
    pllm_model_free(rt->model);
    free(rt->chat_error);
    free(rt->bos_text);
    free(rt->eos_text);
    memset(rt, 0, sizeof *rt);
}

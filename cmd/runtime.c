#include "cmd/runtime.h"

#include "cpu/cpu_backend.h"
#ifdef PLLM_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

#include <ctype.h>
#include <errno.h>
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

int cmd_device_select(cmd_device *out, const char *spec)
{
    memset(out, 0, sizeof *out);
    const char *dev = spec ? spec : "auto";
    if (!strcmp(dev, "cpu")) return 0;
    out->is_auto = !strcmp(dev, "auto");
    if (!out->is_auto) {
        /* "cuda" or "cuda:N", N decimal digits */
        const char *n = dev + 4;
        bool ok =
            !strncmp(dev, "cuda", 4) && (*n == 0 || (n[0] == ':' && isdigit((unsigned char)n[1])));
        long v = 0;
        if (ok && *n == ':') {
            char *end;
            errno = 0;
            v = strtol(n + 1, &end, 10);
            ok = *end == 0 && errno == 0 && v <= INT32_MAX;
        }
        if (!ok) {
            fprintf(stderr, "pllm: --device '%s' is not one of auto, cpu, cuda, cuda:N\n", dev);
            return 2;
        }
        out->kind = CMD_DEVICE_CUDA;
        out->ordinal = (int32_t)v;
    }
#ifdef PLLM_HAVE_CUDA
    char why[200];
    int n_dev = pllm_cuda_device_count(why, sizeof why);
    if (out->is_auto) {
        out->kind = n_dev > 0 ? CMD_DEVICE_CUDA : CMD_DEVICE_CPU;
        snprintf(out->why, sizeof out->why, "%s", why);
        return 0;
    }
    if (n_dev == 0) {
        fprintf(stderr,
                "pllm: --device %s: no CUDA device can be used here: %s; use --device cpu (or "
                "auto, which falls back to the CPU)\n",
                dev, why);
        return 2;
    }
    if (out->ordinal >= n_dev) {
        fprintf(stderr,
                "pllm: --device %s: CUDA device %d is out of range: this machine has %s (cuda:0 "
                "to cuda:%d)\n",
                dev, out->ordinal, why, n_dev - 1);
        return 2;
    }
    snprintf(out->why, sizeof out->why, "asked for; %s", why);
#else
    if (out->is_auto) {
        snprintf(out->why, sizeof out->why, "this pllm was built without the CUDA backend");
        return 0;
    }
    fprintf(stderr,
            "pllm: --device %s: this pllm was built without the CUDA backend (nvcc was not found "
            "when it was built, or -DPLLM_CUDA=OFF); use --device cpu\n",
            dev);
    return 2;
#endif
    return 0;
}

static int open_cpu(cmd_runtime *rt, const cmd_runtime_opts *o)
{
    if (o->attention == 2) {
        fprintf(stderr, "pllm: --attention-backend flashinfer needs a CUDA device; this run is on "
                        "the CPU (--device cuda, or leave --attention-backend out)\n");
        return 2;
    }
    if (o->kv_dtype == PLLM_KV_DTYPE_FP8) {
        fprintf(stderr, "pllm: --kv-cache-dtype fp8 is CUDA-only (use --device cuda, or int8 on "
                        "the CPU)\n");
        return 2;
    }
    pllm_cpu_params cp; /* the environment's defaults (PLLM_CPU_MATH, ...), read once here */
    if (pllm_cpu_params_defaults(&cp) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 2;
    }
    cp.n_threads = o->threads;
    cp.kv_dtype = o->kv_dtype >= 0 ? (pllm_dtype)o->kv_dtype : PLLM_DTYPE_COUNT; /* COUNT: auto */
    if (o->cpu_math != PLLM_CPU_MATH_AUTO)
        cp.math = (pllm_cpu_math)o->cpu_math; /* an explicit --cpu-math wins */
    if (pllm_cpu_backend_create(&rt->backend, rt->model, &cp) != PLLM_OK) {
        fprintf(stderr, "pllm: cannot start the CPU backend: %s\n", pllm_errmsg());
        return 3;
    }
    int nt = 0;
    snprintf(rt->device_name, sizeof rt->device_name, "cpu");
    snprintf(rt->kernels, sizeof rt->kernels, "%s kernels, %s math, %s KV",
             pllm_cpu_backend_describe(&rt->backend, &nt),
             pllm_cpu_backend_int_math(&rt->backend) ? "int8" : "f32",
             pllm_cpu_backend_kv_dtype(&rt->backend) == PLLM_DTYPE_F16     ? "fp16"
             : pllm_cpu_backend_kv_dtype(&rt->backend) == PLLM_KV_DTYPE_I8 ? "int8"
                                                                           : "fp32");
    rt->threads = nt;
    rt->dev.kind = CMD_DEVICE_CPU;
    return 0;
}

#ifdef PLLM_HAVE_CUDA
/* The CUDA backend on rt->dev.ordinal: 0, or 3 with the error printed. */
static int open_cuda(cmd_runtime *rt, const cmd_runtime_opts *o)
{
    pllm_cuda_params cp;
    pllm_cuda_params_defaults(&cp);
    cp.device = rt->dev.ordinal;
    if (o->gpu_memory_fraction > 0) cp.gpu_memory_fraction = o->gpu_memory_fraction;
    if (o->step_tokens > 0) cp.reserve_tokens = o->step_tokens;
    if (o->step_seqs > 0) cp.reserve_seqs = o->step_seqs;
    if (o->kv_dtype == PLLM_KV_DTYPE_I8) {
        fprintf(stderr,
                "pllm: --kv-cache-dtype int8 is CPU-only (use --device cpu, or fp16 on CUDA)\n");
        return 2;
    }
    if (o->kv_dtype >= 0) cp.kv_dtype = (pllm_dtype)o->kv_dtype;
    if (o->weight_dtype == PLLM_DTYPE_F16) cp.weights = PLLM_CUDA_WEIGHTS_F16;
    if (o->weight_dtype == PLLM_DTYPE_BF16) cp.weights = PLLM_CUDA_WEIGHTS_BF16;
    if (o->weight_dtype == PLLM_DTYPE_F32) cp.weights = PLLM_CUDA_WEIGHTS_F32;
    cp.attention = (pllm_cuda_attention)o->attention;
    if (pllm_cuda_backend_create(&rt->backend, rt->model, &cp) != PLLM_OK) {
        fprintf(stderr, "pllm: cannot start the CUDA backend on cuda:%d: %s\n", rt->dev.ordinal,
                pllm_errmsg());
        return 3;
    }
    pllm_cuda_backend_info gi;
    pllm_cuda_backend_get_info(&rt->backend, &gi);
    snprintf(rt->device_name, sizeof rt->device_name, "cuda:%d", gi.ordinal);
    snprintf(rt->kernels, sizeof rt->kernels, "%s, sm_%d%d%s", gi.device_name, gi.sm_major,
             gi.sm_minor, gi.emulated && !strstr(gi.device_name, "emulated") ? " (emulated)" : "");
    rt->threads = 0;
    return 0;
}
#endif

int cmd_thinking_parse(const char *s, pllm_chat_thinking *out)
{
    if (!strcmp(s, "auto"))
        *out = PLLM_CHAT_THINKING_DEFAULT;
    else if (!strcmp(s, "on"))
        *out = PLLM_CHAT_THINKING_ON;
    else if (!strcmp(s, "off"))
        *out = PLLM_CHAT_THINKING_OFF;
    else {
        fprintf(stderr, "pllm: --thinking '%s' is not one of auto, on, off\n", s);
        return 2;
    }
    return 0;
}

int cmd_runtime_open(cmd_runtime *rt, const cmd_runtime_opts *o, bool quiet)
{
    memset(rt, 0, sizeof *rt);
    rt->thinking = o->thinking;
    char *def = NULL;
    const char *path = o->model;
    /* the device first: asking for one that cannot run is a usage error before any work */
    if (!o->no_backend) {
        int rc = cmd_device_select(&rt->dev, o->device);
        if (rc) return rc;
    }
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
    if (!o->no_backend && !quiet) {
        if (rt->dev.kind == CMD_DEVICE_CUDA)
            fprintf(stderr, "pllm: device: cuda:%d (%s%s)\n", rt->dev.ordinal,
                    rt->dev.is_auto ? "auto: " : "", rt->dev.why);
        else if (rt->dev.is_auto)
            fprintf(stderr, "pllm: device: cpu (auto: %s)\n", rt->dev.why);
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
    rt->system_prompt = o->system_prompt;
    /* a family's own template when the file carries none (Gemma 3 GGUFs converted without) */
    const char *builtin = rt->chat_src || o->chat_template
                              ? NULL
                              : pllm_chat_template_builtin(rt->model->source_arch);
    if (builtin) rt->chat_src = pllm_strdup(builtin);
    const char *name = builtin           ? "the built-in gemma3 chat template"
                       : rt->model->gguf ? "tokenizer.chat_template"
                                         : "tokenizer_config.json chat_template";
    if (o->chat_template) { /* --chat-template FILE replaces the model's */
        free(rt->chat_src);
        rt->chat_src = NULL;
        pllm_buf b = {0};
        FILE *f = fopen(o->chat_template, "rb");
        char chunk[4096];
        size_t got;
        while (f && (got = fread(chunk, 1, sizeof chunk, f)) > 0) pllm_buf_append(&b, chunk, got);
        if (!f || ferror(f)) {
            fprintf(stderr, "pllm: --chat-template %s: cannot read it: %s\n", o->chat_template,
                    strerror(errno));
            if (f) fclose(f);
            pllm_buf_free(&b);
            cmd_runtime_close(rt);
            return 2;
        }
        fclose(f);
        rt->chat_src = b.s ? b.s : pllm_strdup("");
        name = o->chat_template;
        if (!quiet) fprintf(stderr, "pllm: chat template from %s (--chat-template)\n", name);
    }
    if (rt->chat_src) {
        st = pllm_chat_template_parse(&rt->chat, rt->chat_src, strlen(rt->chat_src), name);
        if (st != PLLM_OK && o->chat_template) {
            fprintf(stderr, "pllm: --chat-template: %s\n", pllm_errmsg());
            cmd_runtime_close(rt);
            return 2;
        }
        if (st != PLLM_OK) {
            rt->chat_error = pllm_strdup(pllm_errmsg());
            if (!quiet)
                fprintf(stderr, "pllm: warning: the model's chat template cannot be used: %s\n",
                        rt->chat_error);
        }
    }
    if (o->no_backend) return 0;
    int rc = 0;
#ifdef PLLM_HAVE_CUDA
    if (rt->dev.kind == CMD_DEVICE_CUDA) {
        rc = open_cuda(rt, o);
        if (rc && rt->dev.is_auto) {
            /* auto: a device answered but the backend cannot run on it; the CPU can */
            fprintf(stderr, "pllm: warning: --device auto falls back to the CPU\n");
            snprintf(rt->dev.why, sizeof rt->dev.why, "the CUDA backend did not start");
            rt->dev.kind = CMD_DEVICE_CPU;
            rc = 0;
        }
    }
#endif
    if (!rc && rt->dev.kind == CMD_DEVICE_CPU) rc = open_cpu(rt, o);
    if (rc) {
        cmd_runtime_close(rt);
        return rc;
    }
    if (!quiet) {
        char d[512];
        cmd_runtime_describe(rt, d, sizeof d);
        fprintf(stderr, "pllm: model %s (%s, %d layers, %.1f MB of weights) on %s\n",
                rt->model->name, pllm_arch_name(rt->model->cfg.arch), rt->model->cfg.n_layer,
                (double)rt->model->weight_bytes / 1e6, d);
    }
    return 0;
}

void cmd_runtime_describe(const cmd_runtime *rt, char *out, size_t cap)
{
#ifdef PLLM_HAVE_CUDA
    if (rt->dev.kind == CMD_DEVICE_CUDA) {
        pllm_cuda_backend_info gi;
        pllm_cuda_backend_get_info(&rt->backend, &gi);
        int n =
            snprintf(out, cap, "%s: %s (%d SMs, %.1f GiB), %s attention, %s weights %.2f GB, %s KV",
                     rt->device_name, rt->kernels, gi.n_sm, (double)gi.total_bytes / 1073741824.0,
                     gi.attention, pllm_dtype_name(gi.weight_dtype), (double)gi.weight_bytes / 1e9,
                     pllm_kv_dtype_name(gi.kv_dtype));
        if (n > 0 && (size_t)n < cap && gi.kv_bytes)
            snprintf(out + n, cap - (size_t)n, " pool %.2f GB", (double)gi.kv_bytes / 1e9);
        return;
    }
#endif
    snprintf(out, cap, "cpu (%s, %d threads)", rt->kernels, rt->threads);
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
    /* --system-prompt: a conversation without a system turn gets it first */
    pllm_chat_msg *msgs = NULL;
    bool add_system = rt->system_prompt && rec->n_messages > 0 &&
                      !(rec->messages[0].role && !strcmp(rec->messages[0].role, "system"));
    if (add_system) {
        msgs = pllm_calloc(rec->n_messages + 1, sizeof *msgs);
        if (!msgs) return PLLM_ERR_NOMEM;
        msgs[0] = (pllm_chat_msg){.role = "system", .content = rt->system_prompt};
        memcpy(msgs + 1, rec->messages, rec->n_messages * sizeof *msgs);
    }
    pllm_chat_render_params rp = {.messages = add_system ? msgs : rec->messages,
                                  .n_messages = rec->n_messages + (add_system ? 1 : 0),
                                  .add_generation_prompt = true,
                                  .bos_token = rt->bos_text,
                                  .eos_token = rt->eos_text,
                                  .enable_thinking = rt->thinking};
    st = pllm_chat_template_render(rt->chat, &rp, &text);
    free(msgs);
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

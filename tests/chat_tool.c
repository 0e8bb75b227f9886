/*
 * chat_tool: renders one chat template request per input line (or one JSON document on
 * stdin), for the parity test against Python jinja2.
 *
 *   {"template": "...", "messages": [{"role": ..., "content": ...}], "add_generation_prompt": bool,
 *    "bos_token": "..." | null, "eos_token": "..." | null, "max_steps": n (optional)}
 *   -> {"ok": true, "text": "..."} or {"ok": false, "error": "...", "status": "..."}
 *
 * With --lines, every stdin line is a request and every output line a result (one process for
 * thousands of renders). A missing bos_token/eos_token or null leaves it undefined; content
 * null renders as None. chat_tool --builtin ARCH prints pllm_chat_template_builtin(ARCH).
 */
#include "tokenizer/chat_template.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *result_error(pllm_status st, const char *msg)
{
    return json_pack("{s:b, s:s, s:s}", "ok", 0, "error", msg, "status", pllm_status_str(st));
}

static const char *opt_string(json_t *obj, const char *key, bool *bad)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return NULL;
    if (!json_is_string(v)) {
        *bad = true;
        return NULL;
    }
    return json_string_value(v);
}

static json_t *handle(json_t *req)
{
    if (!json_is_object(req)) return result_error(PLLM_ERR_INVALID, "request is not a JSON object");
    json_t *jt = json_object_get(req, "template"), *jm = json_object_get(req, "messages");
    if (!json_is_string(jt))
        return result_error(PLLM_ERR_INVALID, "request: \"template\" must be a string");
    if (!json_is_array(jm))
        return result_error(PLLM_ERR_INVALID, "request: \"messages\" must be an array");
    size_t n = json_array_size(jm);
    pllm_chat_msg *msgs = calloc(n ? n : 1, sizeof *msgs);
    if (!msgs) return result_error(PLLM_ERR_NOMEM, "out of memory");
    bool bad = false;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(jm, i);
        if (!json_is_object(m) || json_object_size(m) > 2)
            bad = true;
        else {
            msgs[i].role = opt_string(m, "role", &bad);
            msgs[i].content = opt_string(m, "content", &bad);
        }
    }
    json_t *res;
    if (bad) {
        res = result_error(PLLM_ERR_INVALID,
                           "request: messages must be objects with string role/content only");
        free(msgs);
        return res;
    }
    pllm_chat_render_params p = {
        .messages = msgs,
        .n_messages = n,
        .add_generation_prompt = json_is_true(json_object_get(req, "add_generation_prompt")),
        .bos_token = opt_string(req, "bos_token", &bad),
        .eos_token = opt_string(req, "eos_token", &bad),
    };
    json_t *et = json_object_get(req, "enable_thinking"); /* absent or null: undefined */
    if (json_is_boolean(et))
        p.enable_thinking = json_is_true(et) ? PLLM_CHAT_THINKING_ON : PLLM_CHAT_THINKING_OFF;
    else if (et && !json_is_null(et)) {
        free(msgs);
        return result_error(PLLM_ERR_INVALID, "request: enable_thinking must be a boolean or null");
    }
    json_t *ms = json_object_get(req, "max_steps");
    if (json_is_integer(ms)) p.max_steps = (uint64_t)json_integer_value(ms);
    json_t *mo = json_object_get(req, "max_output_bytes");
    if (json_is_integer(mo)) p.max_output_bytes = (size_t)json_integer_value(mo);
    pllm_chat_template *t = NULL;
    pllm_buf out = {0};
    pllm_status st = pllm_chat_template_parse(&t, json_string_value(jt), json_string_length(jt),
                                              "chat_template");
    if (st == PLLM_OK) st = pllm_chat_template_render(t, &p, &out);
    if (st == PLLM_OK)
        res = json_pack("{s:b, s:s%}", "ok", 1, "text", out.s ? out.s : "", out.n);
    else
        res = result_error(st, pllm_errmsg());
    /* jansson rejects invalid UTF-8: that would be a pllm bug, reported as such */
    if (!res) res = result_error(PLLM_ERR_INTERNAL, "chat_tool: result is not valid UTF-8");
    pllm_buf_free(&out);
    pllm_chat_template_free(t);
    free(msgs);
    return res;
}

static int emit(json_t *res)
{
    if (!res) return 1;
    char *s = json_dumps(res, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(res);
    if (!s) return 1;
    fputs(s, stdout);
    fputc('\n', stdout);
    free(s);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "--builtin") == 0) { /* the built-in template of a family */
        const char *t = pllm_chat_template_builtin(argv[2]);
        if (!t) return 1;
        fputs(t, stdout);
        return 0;
    }
    bool lines = argc > 1 && strcmp(argv[1], "--lines") == 0;
    json_error_t err;
    if (!lines) {
        json_t *req = json_loadf(stdin, JSON_ALLOW_NUL, &err);
        if (!req) return emit(result_error(PLLM_ERR_FORMAT, err.text));
        int rc = emit(handle(req));
        json_decref(req);
        return rc;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, stdin)) > 0) {
        json_t *req = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &err);
        int rc = emit(req ? handle(req) : result_error(PLLM_ERR_FORMAT, err.text));
        json_decref(req);
        if (rc) {
            free(line);
            return rc;
        }
    }
    free(line);
    return 0;
}

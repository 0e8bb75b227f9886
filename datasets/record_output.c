/*
 * record_output.c: the output line of a request (records.h, "output"): pllm JSON lines and
 * the OpenAI batch output format. Parsing the input records is records.c's job.
 */
#include "datasets/records.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---------------------------------------------------------------- output */

static pllm_status dump(char **out, json_t *obj)
{
    *out = obj ? json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
    json_decref(obj);
    if (!*out) return pllm_errorf(PLLM_ERR_NOMEM, "out of memory serialising an output record");
    return PLLM_OK;
}

/* A JSON string of s[0..n); bytes that are not valid UTF-8 become U+FFFD (the detokenizer
 * already guarantees valid text; this keeps the output valid JSON whatever happens). */
static json_t *json_text(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    if (j) return j;
    pllm_buf b = {0};
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        json_t *probe = len && i + len <= n ? json_stringn(s + i, len) : NULL;
        if (probe) {
            json_decref(probe);
            pllm_buf_append(&b, s + i, len);
            i += len;
        } else {
            pllm_buf_append(&b, "\xef\xbf\xbd", 3);
            i++;
        }
    }
    j = json_stringn(b.s ? b.s : "", b.n);
    pllm_buf_free(&b);
    return j;
}

static double ms(double seconds)
{
    return round(seconds * 1e6) / 1e3;
}

static json_t *token_json(const pllm_tokenizer *tok, int32_t id, bool with_bytes, json_t **bytes);

pllm_status pllm_output_completion(char **out, const json_t *id, const char *prompt,
                                   int32_t n_completions, const pllm_completion *c,
                                   int32_t top_logprobs, const pllm_output_opts *opts)
{
    const pllm_tokenizer *tok = opts ? opts->tok : NULL;
    json_t *o = json_object();
    if (!o) return PLLM_ERR_NOMEM;
    json_object_set(o, "id", (json_t *)id);
    if (n_completions > 1) json_object_set_new(o, "index", json_integer(c->index));
    if (opts && opts->echo_prompt && prompt)
        json_object_set_new(o, "prompt", json_text(prompt, strlen(prompt)));
    json_object_set_new(o, "text", json_text(c->text ? c->text : "", c->text ? c->text_len : 0));
    if (opts && opts->token_ids) {
        json_t *arr = json_array();
        for (int32_t i = 0; i < c->n_tokens; i++)
            json_array_append_new(arr, json_integer(c->token_ids[i]));
        json_object_set_new(o, "token_ids", arr);
    }
    if (c->logprobs) {
        int32_t top = top_logprobs < 0 ? c->top_n : PLLM_MIN(top_logprobs, c->top_n);
        json_t *lp = json_array();
        for (int32_t i = 0; i < c->n_tokens; i++) {
            json_t *e = json_object();
            json_object_set_new(e, "token_id", json_integer(c->token_ids[i]));
            if (tok) json_object_set_new(e, "token", token_json(tok, c->token_ids[i], false, NULL));
            json_object_set_new(e, "logprob", json_real(c->logprobs[i]));
            if (top > 0) {
                json_t *tl = json_array();
                for (int32_t k = 0; k < top; k++) {
                    json_t *t = json_object();
                    int32_t tid = c->top_ids[(size_t)i * c->top_n + k];
                    json_object_set_new(t, "token_id", json_integer(tid));
                    if (tok) json_object_set_new(t, "token", token_json(tok, tid, false, NULL));
                    json_object_set_new(t, "logprob",
                                        json_real(c->top_logprobs[(size_t)i * c->top_n + k]));
                    json_array_append_new(tl, t);
                }
                json_object_set_new(e, "top_logprobs", tl);
            }
            json_array_append_new(lp, e);
        }
        json_object_set_new(o, "logprobs", lp);
    }
    json_object_set_new(o, "finish_reason", json_string(pllm_finish_reason_str(c->finish)));
    json_object_set_new(o, "prompt_tokens", json_integer(c->prompt_tokens));
    json_object_set_new(o, "completion_tokens", json_integer(c->n_tokens));
    json_object_set_new(o, "cached_tokens", json_integer(c->cached_tokens));
    if (c->t_first_token > 0)
        json_object_set_new(o, "ttft_ms", json_real(ms(c->t_first_token - c->t_arrival)));
    json_object_set_new(o, "latency_ms", json_real(ms(c->t_finish - c->t_arrival)));
    if (c->finish == PLLM_FINISH_ERROR)
        json_object_set_new(
            o, "error",
            json_text(c->error ? c->error : "unknown error", c->error ? strlen(c->error) : 13));
    return dump(out, o);
}

pllm_status pllm_output_error(char **out, const json_t *id, int64_t line, int64_t element,
                              const char *message)
{
    json_t *o = json_object();
    if (!o) return PLLM_ERR_NOMEM;
    if (id)
        json_object_set(o, "id", (json_t *)id);
    else
        json_object_set_new(o, "id", json_integer(element > 0 ? element : line));
    json_object_set_new(o, "text", json_string(""));
    json_object_set_new(o, "finish_reason", json_string("error"));
    json_object_set_new(o, "prompt_tokens", json_integer(0));
    json_object_set_new(o, "completion_tokens", json_integer(0));
    json_object_set_new(o, "line", json_integer(line));
    if (element > 0) json_object_set_new(o, "element", json_integer(element));
    json_object_set_new(o, "error", json_text(message, strlen(message)));
    return dump(out, o);
}

/* ---- OpenAI */

static json_t *token_json(const pllm_tokenizer *tok, int32_t id, bool with_bytes, json_t **bytes)
{
    size_t n = 0;
    const char *s = tok ? pllm_tokenizer_token_bytes(tok, id, &n) : NULL;
    if (!s) {
        s = "";
        n = 0;
    }
    if (with_bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(*bytes, json_integer((unsigned char)s[i]));
    }
    return json_text(s, n);
}

static json_t *chat_logprobs(const pllm_completion *c, int32_t top, const pllm_tokenizer *tok)
{
    json_t *content = json_array();
    for (int32_t i = 0; i < c->n_tokens; i++) {
        json_t *e = json_object(), *bytes = NULL;
        json_object_set_new(e, "token", token_json(tok, c->token_ids[i], true, &bytes));
        json_object_set_new(e, "logprob", json_real(c->logprobs[i]));
        json_object_set_new(e, "bytes", bytes);
        json_t *tl = json_array();
        for (int32_t k = 0; k < top; k++) {
            size_t at = (size_t)i * c->top_n + k;
            json_t *t = json_object(), *tb = NULL;
            json_object_set_new(t, "token", token_json(tok, c->top_ids[at], true, &tb));
            json_object_set_new(t, "logprob", json_real(c->top_logprobs[at]));
            json_object_set_new(t, "bytes", tb);
            json_array_append_new(tl, t);
        }
        json_object_set_new(e, "top_logprobs", tl);
        json_array_append_new(content, e);
    }
    return json_pack("{s:o}", "content", content);
}

static json_t *completion_logprobs(const pllm_completion *c, int32_t top, const pllm_tokenizer *tok)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t off = 0;
    for (int32_t i = 0; i < c->n_tokens; i++) {
        size_t n = 0;
        if (tok) pllm_tokenizer_token_bytes(tok, c->token_ids[i], &n);
        json_array_append_new(tokens, token_json(tok, c->token_ids[i], false, NULL));
        json_array_append_new(lps, json_real(c->logprobs[i]));
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += n;
        json_t *m = json_object();
        for (int32_t k = 0; k < top; k++) {
            size_t at = (size_t)i * c->top_n + k;
            json_t *key = token_json(tok, c->top_ids[at], false, NULL);
            json_object_set_new(m, json_string_value(key), json_real(c->top_logprobs[at]));
            json_decref(key);
        }
        json_array_append_new(tops, m);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

pllm_status pllm_openai_choice(json_t **out, pllm_endpoint ep, const pllm_completion *c,
                               bool want_logprobs, int32_t top_logprobs, const pllm_tokenizer *tok)
{
    json_t *o = json_object();
    if (!o) return PLLM_ERR_NOMEM;
    json_object_set_new(o, "index", json_integer(c->index));
    json_t *text = json_text(c->text ? c->text : "", c->text ? c->text_len : 0);
    if (ep == PLLM_ENDPOINT_CHAT)
        json_object_set_new(o, "message",
                            json_pack("{s:s, s:o}", "role", "assistant", "content", text));
    else
        json_object_set_new(o, "text", text);
    int32_t top = PLLM_MIN(top_logprobs, c->top_n);
    if (want_logprobs && c->logprobs)
        json_object_set_new(o, "logprobs",
                            ep == PLLM_ENDPOINT_CHAT ? chat_logprobs(c, top, tok)
                                                     : completion_logprobs(c, top, tok));
    else
        json_object_set_new(o, "logprobs", json_null());
    json_object_set_new(o, "finish_reason", json_string(pllm_finish_reason_str(c->finish)));
    json_object_set_new(o, "stop_reason", json_null());
    /* carried to pllm_output_openai (which turns the request into an error line) */
    if (c->finish == PLLM_FINISH_ERROR)
        json_object_set_new(o, "_error", json_string(c->error ? c->error : "unknown error"));
    *out = o;
    return PLLM_OK;
}

static void openai_ids(const json_t *custom_id, int64_t line, char *hex, size_t cap)
{
    char *key = custom_id ? pllm_record_id_text(custom_id) : NULL;
    XXH3_state_t *s = XXH3_createState();
    XXH3_64bits_reset(s);
    if (key) XXH3_64bits_update(s, key, strlen(key));
    XXH3_64bits_update(s, &line, sizeof line);
    snprintf(hex, cap, "%016llx", (unsigned long long)XXH3_64bits_digest(s));
    XXH3_freeState(s);
    free(key);
}

pllm_status pllm_output_openai(char **out, const json_t *custom_id, int64_t line, pllm_endpoint ep,
                               const char *model, json_t *choices, const pllm_openai_usage *usage,
                               int64_t created)
{
    char hex[24], id[48], rid[64], bid[48];
    openai_ids(custom_id, line, hex, sizeof hex);
    snprintf(id, sizeof id, "pllm-%s", hex);
    snprintf(rid, sizeof rid, "pllm-batch-%s", hex);
    snprintf(bid, sizeof bid, "%s-%s", ep == PLLM_ENDPOINT_CHAT ? "chatcmpl" : "cmpl", hex);
    /* a failed completion makes the whole request an error line */
    for (size_t i = 0; i < json_array_size(choices); i++) {
        json_t *err = json_object_get(json_array_get(choices, i), "_error");
        if (err) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", json_string_value(err));
            json_decref(choices);
            return pllm_output_openai_error(out, custom_id, line, 0, msg, 500);
        }
    }
    json_t *u =
        json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)usage->prompt_tokens,
                  "total_tokens", (json_int_t)(usage->prompt_tokens + usage->completion_tokens),
                  "completion_tokens", (json_int_t)usage->completion_tokens,
                  "prompt_tokens_details", "cached_tokens", (json_int_t)usage->cached_tokens);
    json_t *body =
        json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", bid, "object",
                  ep == PLLM_ENDPOINT_CHAT ? "chat.completion" : "text_completion", "created",
                  (json_int_t)created, "model", model ? model : "", "choices", choices, "usage", u);
    json_t *o =
        json_pack("{s:s, s:O, s:{s:i, s:s, s:o}, s:n}", "id", id, "custom_id", (json_t *)custom_id,
                  "response", "status_code", 200, "request_id", rid, "body", body, "error");
    return dump(out, o);
}

pllm_status pllm_output_openai_error(char **out, const json_t *custom_id, int64_t line,
                                     int64_t element, const char *message, int status_code)
{
    char hex[24], id[48], rid[64];
    openai_ids(custom_id, element > 0 ? -element : line, hex, sizeof hex);
    snprintf(id, sizeof id, "pllm-%s", hex);
    snprintf(rid, sizeof rid, "pllm-batch-%s", hex);
    json_t *err = json_object();
    json_object_set_new(err, "message", json_text(message, strlen(message)));
    json_object_set_new(
        err, "type", json_string(status_code == 400 ? "BadRequestError" : "InternalServerError"));
    json_object_set_new(err, "code", json_integer(status_code));
    json_object_set_new(err, "line", json_integer(line));
    if (element > 0) json_object_set_new(err, "element", json_integer(element));
    json_t *o = json_pack("{s:s, s:O, s:{s:i, s:s, s:n}, s:o}", "id", id, "custom_id",
                          custom_id ? (json_t *)custom_id : json_null(), "response", "status_code",
                          status_code, "request_id", rid, "body", "error", err);
    return dump(out, o);
}

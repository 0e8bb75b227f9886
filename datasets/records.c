/*
 * records.c: prompt records in (records.h): the three input formats, their fields and errors,
 * and the keys --resume matches on. The output lines are record_output.c's.
 */
#include "datasets/records.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *pllm_format_name(pllm_format f)
{
    switch (f) {
    case PLLM_FORMAT_AUTO:
        return "auto";
    case PLLM_FORMAT_PLLM:
        return "pllm";
    case PLLM_FORMAT_OPENAI:
        return "openai";
    case PLLM_FORMAT_SHAREGPT:
        return "sharegpt";
    }
    return "?";
}

pllm_status pllm_format_parse(const char *s, pllm_format *out)
{
    for (int f = PLLM_FORMAT_AUTO; f <= PLLM_FORMAT_SHAREGPT; f++)
        if (strcmp(s, pllm_format_name((pllm_format)f)) == 0) {
            *out = (pllm_format)f;
            return PLLM_OK;
        }
    return pllm_errorf(PLLM_ERR_INVALID, "--format '%s' is not one of auto, pllm, openai, sharegpt",
                       s);
}

bool pllm_record_line_is_blank(const char *line, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)line[i])) return false;
    return true;
}

char *pllm_record_id_text(const json_t *id)
{
    if (json_is_string(id)) return pllm_strdup(json_string_value(id));
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%lld", (long long)json_integer_value(id));
    return pllm_strdup(tmp);
}

static char *loc_key(int64_t line, int64_t element)
{
    char tmp[40];
    if (element > 0)
        snprintf(tmp, sizeof tmp,
                 "\x01"
                 "e%lld",
                 (long long)element);
    else
        snprintf(tmp, sizeof tmp,
                 "\x01"
                 "l%lld",
                 (long long)line);
    return pllm_strdup(tmp);
}

char *pllm_record_key(const pllm_record *rec)
{
    if (rec->id) return pllm_record_id_text(rec->id);
    return loc_key(rec->line, rec->element);
}

char *pllm_output_key(const json_t *o)
{
    json_t *cid = json_object_get(o, "custom_id");
    if (cid) {
        if (json_is_string(cid) || json_is_integer(cid)) return pllm_record_id_text(cid);
        json_t *err = json_object_get(o, "error");
        json_t *line = json_object_get(err, "line"), *el = json_object_get(err, "element");
        if (json_is_integer(el)) return loc_key(0, json_integer_value(el));
        if (json_is_integer(line)) return loc_key(json_integer_value(line), 0);
        return NULL;
    }
    json_t *id = json_object_get(o, "id");
    if (json_is_string(id) || json_is_integer(id)) return pllm_record_id_text(id);
    if (json_is_null(id)) { /* an error line of a record whose id is not its own (a duplicate) */
        json_t *line = json_object_get(o, "line"), *el = json_object_get(o, "element");
        if (json_is_integer(el)) return loc_key(0, json_integer_value(el));
        if (json_is_integer(line)) return loc_key(json_integer_value(line), 0);
    }
    return NULL;
}

char *pllm_record_loc_key(const pllm_record *rec)
{
    return loc_key(rec->line, rec->element);
}

pllm_format pllm_format_of_object(const json_t *obj)
{
    if (json_object_get(obj, "custom_id")) return PLLM_FORMAT_OPENAI;
    if (json_object_get(obj, "conversations")) return PLLM_FORMAT_SHAREGPT;
    return PLLM_FORMAT_PLLM;
}

/* ---------------------------------------------------------------- errors */

typedef struct pctx {
    pllm_record *rec;
    const pllm_record_loc *loc;
    const char *prefix; /* "" or "body." for the field names in messages */
} pctx;

/* Record "file:line: [element N: ]message" as the record's error and the thread's message. */
__attribute__((format(printf, 3, 4))) static pllm_status rec_err(pctx *x, pllm_status st,
                                                                 const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const pllm_record_loc *l = x->loc;
    if (l->element > 0)
        pllm_errorf(st, "%s:%lld: element %lld: %s", l->file, (long long)l->line,
                    (long long)l->element, msg);
    else
        pllm_errorf(st, "%s:%lld: %s", l->file, (long long)l->line, msg);
    free(x->rec->error);
    x->rec->error = pllm_strdup(pllm_errmsg());
    return st;
}

/* A short rendering of a JSON value for messages: at most ~60 bytes. */
static void value_text(const json_t *v, char *out, size_t cap)
{
    char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    if (!s) {
        snprintf(out, cap, "?");
        return;
    }
    size_t n = strlen(s);
    if (n > 60) {
        size_t k = 57;
        while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--; /* do not split a character */
        snprintf(out, cap, "%.*s...", (int)k, s);
    } else {
        snprintf(out, cap, "%s", s);
    }
    free(s);
}

static pllm_status field_err(pctx *x, const char *field, const char *what, const json_t *v)
{
    if (!v) return rec_err(x, PLLM_ERR_FORMAT, "field '%s%s': %s", x->prefix, field, what);
    char got[96];
    value_text(v, got, sizeof got);
    return rec_err(x, PLLM_ERR_FORMAT, "field '%s%s': %s, got %s", x->prefix, field, what, got);
}

/* ---------------------------------------------------------------- fields */

static pllm_status get_int(pctx *x, json_t *v, const char *field, int64_t lo, int64_t hi,
                           int64_t *out)
{
    int64_t k;
    if (json_is_integer(v)) {
        k = (int64_t)json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9e15) {
        k = (int64_t)json_real_value(v); /* 8.0 is accepted as 8 */
    } else {
        return field_err(x, field, "must be an integer", v);
    }
    if (k < lo || k > hi) {
        char what[96];
        snprintf(what, sizeof what, "must be in [%lld, %lld]", (long long)lo, (long long)hi);
        return field_err(x, field, what, v);
    }
    *out = k;
    return PLLM_OK;
}

static pllm_status get_num(pctx *x, json_t *v, const char *field, float *out)
{
    if (!json_is_number(v)) return field_err(x, field, "must be a number", v);
    *out = (float)json_number_value(v);
    return PLLM_OK;
}

static pllm_status get_bool(pctx *x, json_t *v, const char *field, bool *out)
{
    if (!json_is_boolean(v)) return field_err(x, field, "must be true or false", v);
    *out = json_is_true(v);
    return PLLM_OK;
}

static pllm_status dup_string(pctx *x, const char *s, size_t n, char **out)
{
    *out = pllm_malloc(n + 1);
    if (!*out) return rec_err(x, PLLM_ERR_NOMEM, "out of memory");
    memcpy(*out, s, n);
    (*out)[n] = 0;
    return PLLM_OK;
}

static pllm_status parse_stop(pctx *x, json_t *v)
{
    pllm_request_params *p = &x->rec->params;
    pllm_record *rec = x->rec;
    for (int i = 0; i < PLLM_MAX_STOP; i++) {
        free(rec->stop_store[i]);
        rec->stop_store[i] = NULL;
    }
    p->n_stop = 0;
    if (json_is_null(v)) return PLLM_OK;
    if (json_is_string(v)) {
        if (!json_string_length(v)) return field_err(x, "stop", "must not be empty", v);
        if (strlen(json_string_value(v)) != json_string_length(v)) /* a C string would cut it */
            return field_err(x, "stop", "must not contain a NUL character (\\u0000)", NULL);
        PLLM_TRY(dup_string(x, json_string_value(v), json_string_length(v), &rec->stop_store[0]));
        p->stop[0] = rec->stop_store[0];
        p->n_stop = 1;
        return PLLM_OK;
    }
    if (!json_is_array(v)) return field_err(x, "stop", "must be a string or a list of strings", v);
    if (json_array_size(v) > PLLM_MAX_STOP) {
        char what[64];
        snprintf(what, sizeof what, "at most %d stop strings", PLLM_MAX_STOP);
        return field_err(x, "stop", what, NULL);
    }
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *s = json_array_get(v, i);
        if (!json_is_string(s) || !json_string_length(s))
            return field_err(x, "stop", "must hold non-empty strings", v);
        if (strlen(json_string_value(s)) != json_string_length(s))
            return field_err(x, "stop", "must not contain a NUL character (\\u0000)", NULL);
        PLLM_TRY(dup_string(x, json_string_value(s), json_string_length(s), &rec->stop_store[i]));
        p->stop[i] = rec->stop_store[i];
        p->n_stop = (int32_t)i + 1;
    }
    return PLLM_OK;
}

static pllm_status parse_stop_ids(pctx *x, json_t *v)
{
    pllm_request_params *p = &x->rec->params;
    if (!json_is_array(v)) return field_err(x, "stop_token_ids", "must be a list of token ids", v);
    if (json_array_size(v) > PLLM_MAX_STOP) {
        char what[64];
        snprintf(what, sizeof what, "at most %d ids", PLLM_MAX_STOP);
        return field_err(x, "stop_token_ids", what, NULL);
    }
    p->n_stop_ids = 0;
    for (size_t k = 0; k < json_array_size(v); k++) {
        int64_t i;
        PLLM_TRY(get_int(x, json_array_get(v, k), "stop_token_ids", 0, INT32_MAX, &i));
        p->stop_ids[p->n_stop_ids++] = (int32_t)i;
    }
    return PLLM_OK;
}

/* A sampling / generation field shared by the pllm format and OpenAI bodies. *handled is
 * false when key is not one of them. */
static pllm_status parse_param(pctx *x, const char *key, json_t *v, bool *handled)
{
    pllm_record *rec = x->rec;
    pllm_request_params *p = &rec->params;
    pllm_sampling_params *s = &p->sampling;
    int64_t i;
    *handled = true;
    if (!strcmp(key, "max_tokens")) {
        PLLM_TRY(get_int(x, v, key, 1, INT32_MAX, &i));
        p->max_tokens = (int32_t)i;
        rec->has_max_tokens = true;
        return PLLM_OK;
    }
    if (!strcmp(key, "min_tokens")) {
        PLLM_TRY(get_int(x, v, key, 0, INT32_MAX, &i));
        p->min_tokens = (int32_t)i;
        return PLLM_OK;
    }
    if (!strcmp(key, "n")) {
        PLLM_TRY(get_int(x, v, key, 1, 64, &i));
        p->n = (int32_t)i;
        return PLLM_OK;
    }
    if (!strcmp(key, "top_k")) {
        PLLM_TRY(get_int(x, v, key, -1, INT32_MAX, &i));
        s->top_k = (int32_t)i;
        return PLLM_OK;
    }
    if (!strcmp(key, "seed")) {
        if (json_is_null(v)) {
            p->has_seed = false;
            return PLLM_OK;
        }
        PLLM_TRY(get_int(x, v, key, INT64_MIN, INT64_MAX, &i));
        s->seed = (uint64_t)i;
        p->has_seed = true;
        return PLLM_OK;
    }
    if (!strcmp(key, "temperature")) return get_num(x, v, key, &s->temperature);
    if (!strcmp(key, "top_p")) return get_num(x, v, key, &s->top_p);
    if (!strcmp(key, "min_p")) return get_num(x, v, key, &s->min_p);
    if (!strcmp(key, "repetition_penalty")) return get_num(x, v, key, &s->repetition_penalty);
    if (!strcmp(key, "presence_penalty")) return get_num(x, v, key, &s->presence_penalty);
    if (!strcmp(key, "frequency_penalty")) return get_num(x, v, key, &s->frequency_penalty);
    if (!strcmp(key, "ignore_eos")) return get_bool(x, v, key, &p->ignore_eos);
    if (!strcmp(key, "stop")) return parse_stop(x, v);
    if (!strcmp(key, "stop_token_ids")) return parse_stop_ids(x, v);
    *handled = false;
    return PLLM_OK;
}

/* Validate the merged parameters; the engine's message names the field. */
static pllm_status validate_params(pctx *x)
{
    pllm_status st = pllm_request_params_validate(&x->rec->params);
    if (st != PLLM_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", pllm_errmsg());
        return rec_err(x, st, "%s%s", *x->prefix ? "body: " : "", msg);
    }
    return PLLM_OK;
}

/* messages: [{"role", "content"}]; content a string, or (allow_parts) a list of
 * {"type": "text", "text": ...} parts joined with "\n" (as vLLM does). */
static pllm_status parse_messages(pctx *x, json_t *msgs, bool allow_parts)
{
    pllm_record *rec = x->rec;
    if (!json_is_array(msgs))
        return field_err(x, "messages", "must be a list of {\"role\", \"content\"} objects", msgs);
    size_t n = json_array_size(msgs);
    if (n == 0) return field_err(x, "messages", "is empty", NULL);
    rec->messages = pllm_calloc(n, sizeof *rec->messages);
    if (!rec->messages) return rec_err(x, PLLM_ERR_NOMEM, "out of memory");
    char field[64];
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        snprintf(field, sizeof field, "messages[%zu]", i);
        if (!json_is_object(m))
            return field_err(x, field, "must be an object with \"role\" and \"content\"", m);
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        const char *key;
        json_t *val;
        json_object_foreach(m, key, val)
        {
            if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "name")) {
                snprintf(field, sizeof field, "messages[%zu].%s", i, key);
                return field_err(x, field, "is not a known message field (role, content, name)",
                                 NULL);
            }
        }
        if (!json_is_string(role)) {
            snprintf(field, sizeof field, "messages[%zu].role", i);
            return field_err(x, field, role ? "must be a string" : "is missing", role);
        }
        snprintf(field, sizeof field, "messages[%zu].content", i);
        pllm_buf text = {0};
        if (json_is_string(content)) {
            pllm_buf_append(&text, json_string_value(content), json_string_length(content));
        } else if (allow_parts && json_is_array(content)) {
            for (size_t k = 0; k < json_array_size(content); k++) {
                json_t *part = json_array_get(content, k);
                json_t *type = json_object_get(part, "type"), *t = json_object_get(part, "text");
                if (!json_is_object(part) || !json_is_string(type) ||
                    strcmp(json_string_value(type), "text") || !json_is_string(t)) {
                    pllm_buf_free(&text);
                    return field_err(x, field,
                                     "parts must be {\"type\": \"text\", \"text\": ...} (only text "
                                     "is supported)",
                                     part);
                }
                if (k) pllm_buf_append(&text, "\n", 1);
                pllm_buf_append(&text, json_string_value(t), json_string_length(t));
            }
        } else {
            return field_err(x, field, content ? "must be a string" : "is missing", content);
        }
        rec->messages[i].role = pllm_strdup(json_string_value(role));
        rec->messages[i].content = text.s ? text.s : pllm_strdup("");
        rec->n_messages = i + 1;
        if (!rec->messages[i].role || !rec->messages[i].content)
            return rec_err(x, PLLM_ERR_NOMEM, "out of memory");
    }
    /* an empty prompt: every message's content is empty */
    bool any = false;
    for (size_t i = 0; i < n; i++) any |= rec->messages[i].content[0] != 0;
    if (!any)
        return field_err(x, "messages", "every message's content is empty (an empty prompt)", NULL);
    return PLLM_OK;
}

static pllm_status parse_prompt(pctx *x, json_t *prompt)
{
    if (!json_is_string(prompt)) return field_err(x, "prompt", "must be a string", prompt);
    if (json_string_length(prompt) == 0) return field_err(x, "prompt", "is empty", NULL);
    return dup_string(x, json_string_value(prompt), json_string_length(prompt), &x->rec->prompt);
}

/* ---------------------------------------------------------------- formats */

pllm_status pllm_extra_fields_parse(const char *s, pllm_extra_fields *out)
{
    if (!strcmp(s, "error"))
        *out = PLLM_EXTRA_ERROR;
    else if (!strcmp(s, "ignore"))
        *out = PLLM_EXTRA_IGNORE;
    else if (!strcmp(s, "passthrough"))
        *out = PLLM_EXTRA_PASSTHROUGH;
    else
        return pllm_errorf(PLLM_ERR_INVALID,
                           "--extra-fields '%s' is not one of error, ignore, passthrough", s);
    return PLLM_OK;
}

/* A record's "metadata" field: kept to be echoed verbatim. */
static pllm_status take_metadata(pctx *x, json_t *v)
{
    pllm_record *rec = x->rec;
    if (rec->metadata) { /* passthrough fields came first: merge into an object */
        if (!json_is_object(v))
            return rec_err(x, PLLM_ERR_FORMAT,
                           "field 'metadata' must be an object when --extra-fields passthrough "
                           "adds fields to it");
        const char *k;
        json_t *e;
        json_object_foreach(v, k, e)
        {
            if (json_object_get(rec->metadata, k))
                return rec_err(x, PLLM_ERR_FORMAT,
                               "field '%s' is both a record field and a key of 'metadata' "
                               "(--extra-fields passthrough puts it there)",
                               k);
            json_object_set(rec->metadata, k, e);
        }
        return PLLM_OK;
    }
    rec->metadata = json_deep_copy(v);
    return rec->metadata ? PLLM_OK : rec_err(x, PLLM_ERR_NOMEM, "out of memory");
}

/* A field the format does not know, under --extra-fields ignore or passthrough: true when it
 * is taken care of (passthrough: added to the output's metadata), false for error mode. */
static pllm_status take_extra(pctx *x, const char *key, json_t *v, bool *handled)
{
    pllm_record *rec = x->rec;
    *handled = x->loc->extra != PLLM_EXTRA_ERROR;
    if (x->loc->extra != PLLM_EXTRA_PASSTHROUGH) return PLLM_OK;
    if (!rec->metadata && !(rec->metadata = json_object()))
        return rec_err(x, PLLM_ERR_NOMEM, "out of memory");
    if (!json_is_object(rec->metadata))
        return rec_err(x, PLLM_ERR_FORMAT,
                       "field 'metadata' must be an object when --extra-fields passthrough adds "
                       "field '%s%s' to it",
                       x->prefix, key);
    if (json_object_get(rec->metadata, key))
        return rec_err(x, PLLM_ERR_FORMAT,
                       "field '%s%s' is both a record field and a key of 'metadata' "
                       "(--extra-fields passthrough puts it there)",
                       x->prefix, key);
    if (json_object_set(rec->metadata, key, v) != 0)
        return rec_err(x, PLLM_ERR_NOMEM, "out of memory");
    return PLLM_OK;
}

static const char PLLM_KNOWN[] =
    "id, prompt, messages, max_tokens, min_tokens, temperature, top_p, top_k, min_p, "
    "repetition_penalty, presence_penalty, frequency_penalty, seed, stop, stop_token_ids, "
    "ignore_eos, n, logprobs, metadata; --extra-fields ignore|passthrough accepts others";

static pllm_status parse_pllm(pctx *x, json_t *root)
{
    pllm_record *rec = x->rec;
    json_t *prompt = json_object_get(root, "prompt"), *msgs = json_object_get(root, "messages");
    if (prompt && msgs)
        return rec_err(x, PLLM_ERR_FORMAT, "give either 'prompt' or 'messages', not both");
    if (!prompt && !msgs)
        return rec_err(x, PLLM_ERR_FORMAT, "missing field 'prompt' (or 'messages')");
    PLLM_TRY(prompt ? parse_prompt(x, prompt) : parse_messages(x, msgs, false));
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (!strcmp(key, "id") || !strcmp(key, "prompt") || !strcmp(key, "messages")) continue;
        if (!strcmp(key, "metadata")) {
            PLLM_TRY(take_metadata(x, v));
            continue;
        }
        if (!strcmp(key, "logprobs")) {
            int64_t i;
            if (json_is_boolean(v))
                i = json_is_true(v) ? 1 : 0;
            else
                PLLM_TRY(get_int(x, v, key, 0, 20, &i));
            rec->params.sampling.logprobs = (int32_t)i;
            rec->want_logprobs = i > 0;
            rec->top_logprobs = (int32_t)i;
            continue;
        }
        bool handled;
        PLLM_TRY(parse_param(x, key, v, &handled));
        if (!handled) PLLM_TRY(take_extra(x, key, v, &handled));
        if (!handled)
            return rec_err(x, PLLM_ERR_FORMAT, "unknown field '%s' (known: %s)", key, PLLM_KNOWN);
    }
    return validate_params(x);
}

static pllm_status parse_openai(pctx *x, json_t *root)
{
    pllm_record *rec = x->rec;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (!strcmp(key, "custom_id") || !strcmp(key, "method") || !strcmp(key, "url") ||
            !strcmp(key, "body"))
            continue;
        if (!strcmp(key, "metadata")) {
            PLLM_TRY(take_metadata(x, v));
            continue;
        }
        bool handled;
        PLLM_TRY(take_extra(x, key, v, &handled));
        if (!handled)
            return rec_err(x, PLLM_ERR_FORMAT,
                           "unknown field '%s' (an OpenAI batch line has custom_id, method, url, "
                           "body, metadata; --extra-fields ignore|passthrough accepts others)",
                           key);
    }
    const int32_t def_logprobs = rec->params.sampling.logprobs; /* --logprobs */
    json_t *method = json_object_get(root, "method"), *url = json_object_get(root, "url"),
           *body = json_object_get(root, "body");
    if (!method) return field_err(x, "method", "is missing", NULL);
    if (!json_is_string(method) || strcmp(json_string_value(method), "POST"))
        return field_err(x, "method", "must be \"POST\"", method);
    if (!url) return field_err(x, "url", "is missing", NULL);
    if (json_is_string(url) && !strcmp(json_string_value(url), "/v1/chat/completions"))
        rec->endpoint = PLLM_ENDPOINT_CHAT;
    else if (json_is_string(url) && !strcmp(json_string_value(url), "/v1/completions"))
        rec->endpoint = PLLM_ENDPOINT_COMPLETIONS;
    else
        return field_err(x, "url", "must be \"/v1/chat/completions\" or \"/v1/completions\"", url);
    if (!body) return field_err(x, "body", "is missing", NULL);
    if (!json_is_object(body)) return field_err(x, "body", "must be an object", body);
    x->prefix = "body.";
    bool chat = rec->endpoint == PLLM_ENDPOINT_CHAT;
    json_t *msgs = json_object_get(body, "messages"), *prompt = json_object_get(body, "prompt");
    if (chat) {
        if (prompt)
            return field_err(x, "prompt",
                             "is not a chat field (use /v1/completions for a raw prompt)", NULL);
        if (!msgs) return field_err(x, "messages", "is missing", NULL);
        PLLM_TRY(parse_messages(x, msgs, true));
    } else {
        if (msgs)
            return field_err(x, "messages", "is not a completions field (use /v1/chat/completions)",
                             NULL);
        if (!prompt) return field_err(x, "prompt", "is missing", NULL);
        if (json_is_array(prompt) && json_array_size(prompt) == 1 &&
            json_is_string(json_array_get(prompt, 0)))
            prompt = json_array_get(prompt, 0); /* a list of one prompt */
        PLLM_TRY(parse_prompt(x, prompt));
    }
    int64_t top = -1;
    json_object_foreach(body, key, v)
    {
        const char *name = key; /* key itself drives the iteration: never reassign it */
        if (!strcmp(name, "messages") || !strcmp(name, "prompt") || !strcmp(name, "user")) continue;
        if (!strcmp(name, "model")) {
            if (!json_is_string(v)) return field_err(x, name, "must be a string", v);
            PLLM_TRY(dup_string(x, json_string_value(v), json_string_length(v), &rec->model));
            continue;
        }
        if (!strcmp(name, "stream")) {
            if (!json_is_false(v) && !json_is_null(v))
                return field_err(x, name, "must be false (a batch is not streamed)", v);
            continue;
        }
        if (!strcmp(name, "max_completion_tokens")) name = "max_tokens";
        if (!strcmp(name, "logprobs")) {
            if (chat) {
                if (!json_is_null(v)) PLLM_TRY(get_bool(x, v, name, &rec->want_logprobs));
            } else if (!json_is_null(v)) {
                int64_t k;
                PLLM_TRY(get_int(x, v, name, 0, 20, &k));
                rec->want_logprobs = true;
                top = k;
            }
            continue;
        }
        if (!strcmp(name, "top_logprobs") && chat) {
            if (!json_is_null(v)) PLLM_TRY(get_int(x, v, name, 0, 20, &top));
            continue;
        }
        bool handled;
        PLLM_TRY(parse_param(x, name, v, &handled));
        if (!handled) PLLM_TRY(take_extra(x, key, v, &handled));
        if (!handled)
            return rec_err(x, PLLM_ERR_FORMAT,
                           "unknown field 'body.%s' (supported: model, %s, max_tokens, "
                           "max_completion_tokens, min_tokens, "
                           "temperature, top_p, top_k, min_p, repetition_penalty, "
                           "presence_penalty, frequency_penalty, "
                           "seed, stop, stop_token_ids, ignore_eos, n, logprobs%s, user, stream)",
                           key, chat ? "messages" : "prompt", chat ? ", top_logprobs" : "");
    }
    if (top > 0 && !rec->want_logprobs)
        return field_err(x, "top_logprobs", "needs \"logprobs\": true", NULL);
    if (top < 0 && def_logprobs > 0 && !json_object_get(body, "logprobs")) top = def_logprobs;
    if (rec->want_logprobs) {
        rec->top_logprobs = top > 0 ? (int32_t)top : 0;
        rec->params.sampling.logprobs =
            top > 0 ? (int32_t)top : 1; /* the engine returns logprobs with a top list */
    }
    return validate_params(x);
}

static const char *sharegpt_role(const char *from)
{
    static const char *const user[] = {"human", "user"}, *const assistant[] = {
                                                             "gpt",  "assistant", "chatgpt",
                                                             "bard", "bing",      "model"};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(user); i++)
        if (!strcmp(from, user[i])) return "user";
    for (size_t i = 0; i < PLLM_ARRAY_LEN(assistant); i++)
        if (!strcmp(from, assistant[i])) return "assistant";
    if (!strcmp(from, "system")) return "system";
    return NULL;
}

static pllm_status parse_sharegpt(pctx *x, json_t *root)
{
    pllm_record *rec = x->rec;
    json_t *conv = json_object_get(root, "conversations");
    if (!conv) return rec_err(x, PLLM_ERR_FORMAT, "missing field 'conversations'");
    if (!json_is_array(conv))
        return field_err(x, "conversations", "must be a list of {\"from\", \"value\"} turns", conv);
    size_t n = json_array_size(conv);
    if (n == 0) return field_err(x, "conversations", "is empty", NULL);
    char field[64];
    size_t last_user = n, first_user = n;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(conv, i);
        snprintf(field, sizeof field, "conversations[%zu]", i);
        if (!json_is_object(t))
            return field_err(x, field, "must be an object with \"from\" and \"value\"", t);
        json_t *from = json_object_get(t, "from"), *value = json_object_get(t, "value");
        snprintf(field, sizeof field, "conversations[%zu].from", i);
        if (!json_is_string(from))
            return field_err(x, field, from ? "must be a string" : "is missing", from);
        const char *role = sharegpt_role(json_string_value(from));
        if (!role)
            return field_err(x, field, "is not a known role (human, user, gpt, assistant, system)",
                             from);
        snprintf(field, sizeof field, "conversations[%zu].value", i);
        if (!json_is_string(value))
            return field_err(x, field, value ? "must be a string" : "is missing", value);
        if (!strcmp(role, "user")) {
            last_user = i;
            if (first_user == n) first_user = i;
        }
    }
    if (last_user == n) return field_err(x, "conversations", "has no human turn to answer", NULL);
    json_t *first = json_object_get(json_array_get(conv, first_user), "value");
    if (json_string_length(first) == 0) {
        snprintf(field, sizeof field, "conversations[%zu].value", first_user);
        return field_err(x, field, "is empty (an empty prompt)", NULL);
    }
    rec->messages = pllm_calloc(last_user + 1, sizeof *rec->messages);
    if (!rec->messages) return rec_err(x, PLLM_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i <= last_user; i++) {
        json_t *t = json_array_get(conv, i);
        json_t *value = json_object_get(t, "value");
        rec->messages[i].role =
            pllm_strdup(sharegpt_role(json_string_value(json_object_get(t, "from"))));
        rec->messages[i].content = pllm_malloc(json_string_length(value) + 1);
        rec->n_messages = i + 1;
        if (!rec->messages[i].role || !rec->messages[i].content)
            return rec_err(x, PLLM_ERR_NOMEM, "out of memory");
        memcpy((char *)rec->messages[i].content, json_string_value(value),
               json_string_length(value) + 1);
    }
    if (first_user + 1 < n) {
        json_t *t = json_array_get(conv, first_user + 1);
        if (!strcmp(sharegpt_role(json_string_value(json_object_get(t, "from"))), "assistant")) {
            json_t *value = json_object_get(t, "value");
            PLLM_TRY(dup_string(x, json_string_value(value), json_string_length(value),
                                &rec->reference));
        }
    }
    return validate_params(x);
}

/* A record's fields before parsing: where it stands, its format and the default parameters
 * (without the defaults' stop strings, which are borrowed). */
static void record_start(pllm_record *rec, pllm_format fmt, const pllm_record_loc *loc,
                         const pllm_request_params *defaults)
{
    memset(rec, 0, sizeof *rec);
    PLLM_ASSERT(fmt != PLLM_FORMAT_AUTO);
    rec->format = fmt;
    rec->line = loc->line;
    rec->element = loc->element;
    rec->params = *defaults;
    rec->params.n_stop = 0;
    /* --logprobs K: every record asks for them unless it says otherwise */
    rec->want_logprobs = defaults->sampling.logprobs > 0;
    rec->top_logprobs = defaults->sampling.logprobs;
}

/* The id of a record without a usable one of its own: its element number, else its line. */
static int64_t fallback_id(const pllm_record_loc *loc) { return loc->element > 0 ? loc->element : loc->line; }

pllm_status pllm_record_parse(pllm_record *rec, pllm_format fmt, const char *text, size_t len,
                              const pllm_record_loc *loc, const pllm_request_params *defaults)
{
    record_start(rec, fmt, loc, defaults);
    pctx x = {.rec = rec, .loc = loc, .prefix = ""};
    /* the defaults' stop strings are borrowed: copy them */
    for (int32_t i = 0; i < defaults->n_stop; i++) {
        if (!(rec->stop_store[i] = pllm_strdup(defaults->stop[i])))
            return rec_err(&x, PLLM_ERR_NOMEM, "out of memory");
        rec->params.stop[i] = rec->stop_store[i];
        rec->params.n_stop = i + 1;
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!root) {
        if (fmt != PLLM_FORMAT_OPENAI) rec->id = json_integer(fallback_id(loc));
        return rec_err(&x, PLLM_ERR_FORMAT, "invalid JSON at column %d: %s", jerr.column,
                       jerr.text);
    }
    pllm_status st = PLLM_OK;
    if (!json_is_object(root)) {
        if (fmt != PLLM_FORMAT_OPENAI) rec->id = json_integer(fallback_id(loc));
        st = rec_err(&x, PLLM_ERR_FORMAT, "a record must be a JSON object");
        goto done;
    }
    const char *id_field = fmt == PLLM_FORMAT_OPENAI ? "custom_id" : "id";
    json_t *id = json_object_get(root, id_field);
    /* an id is a resume key: a NUL inside would be cut off in its text form (two ids would
     * collide) and the --resume reader does not accept NULs in output lines */
    bool id_nul = json_is_string(id) && strlen(json_string_value(id)) != json_string_length(id);
    if (fmt == PLLM_FORMAT_OPENAI) {
        if (json_is_string(id) && !id_nul) {
            rec->id = json_incref(id);
        } else {
            st = field_err(&x, "custom_id",
                           id_nul ? "must not contain a NUL character (\\u0000)" : id ? "must be a string" : "is missing",
                           id);
            goto done;
        }
    } else if (id_nul) {
        rec->id = json_integer(fallback_id(loc));
        st = field_err(&x, "id", "must not contain a NUL character (\\u0000)", id);
        goto done;
    } else if (id && (json_is_string(id) || json_is_integer(id))) {
        rec->id = json_incref(id);
    } else {
        rec->id = json_integer(fallback_id(loc));
        if (id && !json_is_null(id)) {
            st = field_err(&x, "id", "must be a string or an integer", id);
            goto done;
        }
    }
    switch (fmt) {
    case PLLM_FORMAT_PLLM:
        st = parse_pllm(&x, root);
        break;
    case PLLM_FORMAT_OPENAI:
        st = parse_openai(&x, root);
        break;
    case PLLM_FORMAT_SHAREGPT:
        st = parse_sharegpt(&x, root);
        break;
    case PLLM_FORMAT_AUTO:
        break;
    }
done:
    json_decref(root);
    return st;
}

pllm_status pllm_record_reject(pllm_record *rec, pllm_format fmt, const pllm_record_loc *loc,
                               const pllm_request_params *defaults, const char *message)
{
    record_start(rec, fmt, loc, defaults); /* a bad record needs no stop strings */
    if (fmt != PLLM_FORMAT_OPENAI) rec->id = json_integer(fallback_id(loc));
    pctx x = {.rec = rec, .loc = loc, .prefix = ""};
    return rec_err(&x, PLLM_ERR_FORMAT, "%s", message);
}

void pllm_record_free(pllm_record *rec)
{
    if (!rec) return;
    json_decref(rec->id);
    json_decref(rec->metadata);
    free(rec->prompt);
    for (size_t i = 0; i < rec->n_messages; i++) {
        free((char *)rec->messages[i].role);
        free((char *)rec->messages[i].content);
    }
    free(rec->messages);
    free(rec->reference);
    free(rec->model);
    free(rec->error);
    for (int i = 0; i < PLLM_MAX_STOP; i++) free(rec->stop_store[i]);
    memset(rec, 0, sizeof *rec);
}

#include "datasets/records.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

static pllm_status field_err(int64_t line, const char *field, const char *what)
{
    return pllm_errorf(PLLM_ERR_FORMAT, "line %lld: field '%s': %s", (long long)line, field, what);
}

static pllm_status get_int(json_t *v, int64_t line, const char *field, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t x;
    if (json_is_integer(v)) {
        x = (int64_t)json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15) {
        x = (int64_t)json_real_value(v); /* 8.0 is accepted as 8 */
    } else {
        return field_err(line, field, "must be an integer");
    }
    if (x < lo || x > hi)
        return pllm_errorf(PLLM_ERR_FORMAT, "line %lld: field '%s': %lld is out of range [%lld, %lld]", (long long)line,
                           field, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return PLLM_OK;
}

static pllm_status get_num(json_t *v, int64_t line, const char *field, float *out)
{
    if (!json_is_number(v)) return field_err(line, field, "must be a number");
    *out = (float)json_number_value(v);
    return PLLM_OK;
}

static pllm_status parse_messages(pllm_record *rec, json_t *msgs, int64_t line)
{
    if (!json_is_array(msgs)) return field_err(line, "messages", "must be a list of {\"role\", \"content\"} objects");
    size_t n = json_array_size(msgs);
    if (n == 0) return field_err(line, "messages", "is empty");
    rec->messages = pllm_calloc(n, sizeof *rec->messages);
    if (!rec->messages) return PLLM_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        char field[64];
        snprintf(field, sizeof field, "messages[%zu]", i);
        if (!json_is_object(m)) return field_err(line, field, "must be an object with \"role\" and \"content\"");
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_string(role)) {
            snprintf(field, sizeof field, "messages[%zu].role", i);
            return field_err(line, field, role ? "must be a string" : "is missing");
        }
        if (!json_is_string(content)) {
            snprintf(field, sizeof field, "messages[%zu].content", i);
            return field_err(line, field, content ? "must be a string" : "is missing");
        }
        const char *key;
        json_t *val;
        json_object_foreach(m, key, val) {
            if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "name")) {
                snprintf(field, sizeof field, "messages[%zu].%s", i, key);
                return field_err(line, field, "is not a known message field (role, content, name)");
            }
        }
        rec->messages[i].role = pllm_strdup(json_string_value(role));
        rec->messages[i].content = pllm_strdup(json_string_value(content));
        rec->n_messages = i + 1;
        if (!rec->messages[i].role || !rec->messages[i].content) return PLLM_ERR_NOMEM;
    }
    return PLLM_OK;
}

static pllm_status parse_stop(pllm_record *rec, json_t *v, int64_t line)
{
    pllm_request_params *p = &rec->params;
    p->n_stop = 0;
    if (json_is_string(v)) {
        if (!json_string_length(v)) return field_err(line, "stop", "must not be empty");
        rec->stop_store[0] = pllm_strdup(json_string_value(v));
        if (!rec->stop_store[0]) return PLLM_ERR_NOMEM;
        p->stop[0] = rec->stop_store[0];
        p->n_stop = 1;
        return PLLM_OK;
    }
    if (!json_is_array(v)) return field_err(line, "stop", "must be a string or a list of strings");
    if (json_array_size(v) > PLLM_MAX_STOP)
        return pllm_errorf(PLLM_ERR_FORMAT, "line %lld: field 'stop': at most %d stop strings", (long long)line, PLLM_MAX_STOP);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *s = json_array_get(v, i);
        if (!json_is_string(s) || !json_string_length(s)) return field_err(line, "stop", "must hold non-empty strings");
        rec->stop_store[i] = pllm_strdup(json_string_value(s));
        if (!rec->stop_store[i]) return PLLM_ERR_NOMEM;
        p->stop[i] = rec->stop_store[i];
        p->n_stop = (int32_t)i + 1;
    }
    return PLLM_OK;
}

static pllm_status parse_field(pllm_record *rec, const char *key, json_t *v, int64_t line)
{
    pllm_request_params *p = &rec->params;
    pllm_sampling_params *s = &p->sampling;
    int64_t i;
    if (!strcmp(key, "id") || !strcmp(key, "prompt") || !strcmp(key, "messages")) return PLLM_OK;
    if (!strcmp(key, "max_tokens")) { PLLM_TRY(get_int(v, line, key, 1, INT32_MAX, &i)); p->max_tokens = (int32_t)i; return PLLM_OK; }
    if (!strcmp(key, "min_tokens")) { PLLM_TRY(get_int(v, line, key, 0, INT32_MAX, &i)); p->min_tokens = (int32_t)i; return PLLM_OK; }
    if (!strcmp(key, "n")) { PLLM_TRY(get_int(v, line, key, 1, 64, &i)); p->n = (int32_t)i; return PLLM_OK; }
    if (!strcmp(key, "top_k")) { PLLM_TRY(get_int(v, line, key, -1, INT32_MAX, &i)); s->top_k = (int32_t)i; return PLLM_OK; }
    if (!strcmp(key, "logprobs")) {
        if (json_is_boolean(v)) { s->logprobs = json_is_true(v) ? 1 : 0; return PLLM_OK; }
        PLLM_TRY(get_int(v, line, key, 0, 20, &i));
        s->logprobs = (int32_t)i;
        return PLLM_OK;
    }
    if (!strcmp(key, "seed")) {
        if (json_is_null(v)) { p->has_seed = false; return PLLM_OK; }
        PLLM_TRY(get_int(v, line, key, INT64_MIN, INT64_MAX, &i));
        s->seed = (uint64_t)i;
        p->has_seed = true;
        return PLLM_OK;
    }
    if (!strcmp(key, "temperature")) return get_num(v, line, key, &s->temperature);
    if (!strcmp(key, "top_p")) return get_num(v, line, key, &s->top_p);
    if (!strcmp(key, "min_p")) return get_num(v, line, key, &s->min_p);
    if (!strcmp(key, "repetition_penalty")) return get_num(v, line, key, &s->repetition_penalty);
    if (!strcmp(key, "presence_penalty")) return get_num(v, line, key, &s->presence_penalty);
    if (!strcmp(key, "frequency_penalty")) return get_num(v, line, key, &s->frequency_penalty);
    if (!strcmp(key, "ignore_eos")) {
        if (!json_is_boolean(v)) return field_err(line, key, "must be true or false");
        p->ignore_eos = json_is_true(v);
        return PLLM_OK;
    }
    if (!strcmp(key, "stop")) return parse_stop(rec, v, line);
    if (!strcmp(key, "stop_token_ids")) {
        if (!json_is_array(v)) return field_err(line, key, "must be a list of token ids");
        if (json_array_size(v) > PLLM_MAX_STOP)
            return pllm_errorf(PLLM_ERR_FORMAT, "line %lld: field '%s': at most %d ids", (long long)line, key, PLLM_MAX_STOP);
        p->n_stop_ids = 0;
        for (size_t k = 0; k < json_array_size(v); k++) {
            PLLM_TRY(get_int(json_array_get(v, k), line, key, 0, INT32_MAX, &i));
            p->stop_ids[p->n_stop_ids++] = (int32_t)i;
        }
        return PLLM_OK;
    }
    return pllm_errorf(PLLM_ERR_FORMAT,
                       "line %lld: unknown field '%s' (known: id, prompt, messages, max_tokens, min_tokens, temperature, "
                       "top_p, top_k, min_p, repetition_penalty, presence_penalty, frequency_penalty, seed, stop, "
                       "stop_token_ids, ignore_eos, n, logprobs)",
                       (long long)line, key);
}

pllm_status pllm_record_parse(pllm_record *rec, const char *line, size_t len, int64_t lineno,
                              const pllm_request_params *defaults)
{
    memset(rec, 0, sizeof *rec);
    rec->line = lineno;
    rec->params = *defaults;
    rec->params.n_stop = 0; /* the defaults' stop strings are borrowed: copy them */
    for (int32_t i = 0; i < defaults->n_stop; i++) {
        rec->stop_store[i] = pllm_strdup(defaults->stop[i]);
        if (!rec->stop_store[i]) return PLLM_ERR_NOMEM;
        rec->params.stop[i] = rec->stop_store[i];
        rec->params.n_stop = i + 1;
    }
    json_error_t jerr;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!root) {
        rec->id = json_integer(lineno);
        return pllm_errorf(PLLM_ERR_FORMAT, "line %lld: invalid JSON at column %d: %s", (long long)lineno, jerr.column,
                           jerr.text);
    }
    pllm_status st = PLLM_OK;
    if (!json_is_object(root)) {
        rec->id = json_integer(lineno);
        st = pllm_errorf(PLLM_ERR_FORMAT, "line %lld: a record must be a JSON object", (long long)lineno);
        goto done;
    }
    json_t *id = json_object_get(root, "id");
    if (id && (json_is_string(id) || json_is_integer(id))) {
        rec->id = json_incref(id);
    } else {
        rec->id = json_integer(lineno);
        if (id && !json_is_null(id)) {
            st = field_err(lineno, "id", "must be a string or an integer");
            goto done;
        }
    }
    json_t *prompt = json_object_get(root, "prompt"), *msgs = json_object_get(root, "messages");
    if (prompt && msgs) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "line %lld: give either 'prompt' or 'messages', not both", (long long)lineno);
        goto done;
    }
    if (!prompt && !msgs) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "line %lld: missing field 'prompt' (or 'messages')", (long long)lineno);
        goto done;
    }
    if (prompt) {
        if (!json_is_string(prompt)) { st = field_err(lineno, "prompt", "must be a string"); goto done; }
        if (json_string_length(prompt) == 0) { st = field_err(lineno, "prompt", "is empty"); goto done; }
        rec->prompt = pllm_malloc(json_string_length(prompt) + 1);
        if (!rec->prompt) { st = PLLM_ERR_NOMEM; goto done; }
        memcpy(rec->prompt, json_string_value(prompt), json_string_length(prompt) + 1);
    } else if ((st = parse_messages(rec, msgs, lineno)) != PLLM_OK) {
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if ((st = parse_field(rec, key, val, lineno)) != PLLM_OK) goto done;
    }
    if ((st = pllm_request_params_validate(&rec->params)) != PLLM_OK)
        pllm_error_prefix(st, "line %lld: ", (long long)lineno);
done:
    json_decref(root);
    return st;
}

void pllm_record_free(pllm_record *rec)
{
    if (!rec) return;
    json_decref(rec->id);
    free(rec->prompt);
    for (size_t i = 0; i < rec->n_messages; i++) {
        free((char *)rec->messages[i].role);
        free((char *)rec->messages[i].content);
    }
    free(rec->messages);
    for (int i = 0; i < PLLM_MAX_STOP; i++) free(rec->stop_store[i]);
    memset(rec, 0, sizeof *rec);
}

static pllm_status dump(char **out, json_t *obj)
{
    *out = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(10));
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

pllm_status pllm_output_completion(char **out, const json_t *id, const char *prompt, int32_t n_completions,
                                   const pllm_completion *c, const pllm_output_opts *opts)
{
    json_t *o = json_object();
    if (!o) return PLLM_ERR_NOMEM;
    json_object_set(o, "id", (json_t *)id);
    if (n_completions > 1) json_object_set_new(o, "index", json_integer(c->index));
    if (opts && opts->echo_prompt && prompt) json_object_set_new(o, "prompt", json_text(prompt, strlen(prompt)));
    json_object_set_new(o, "text", json_text(c->text ? c->text : "", c->text ? c->text_len : 0));
    if (opts && opts->token_ids) {
        json_t *arr = json_array();
        for (int32_t i = 0; i < c->n_tokens; i++) json_array_append_new(arr, json_integer(c->token_ids[i]));
        json_object_set_new(o, "token_ids", arr);
    }
    if (c->logprobs) {
        json_t *lp = json_array();
        for (int32_t i = 0; i < c->n_tokens; i++) {
            json_t *e = json_object();
            json_object_set_new(e, "token_id", json_integer(c->token_ids[i]));
            json_object_set_new(e, "logprob", json_real(c->logprobs[i]));
            if (c->top_n > 0) {
                json_t *top = json_array();
                for (int32_t k = 0; k < c->top_n; k++) {
                    json_t *t = json_object();
                    json_object_set_new(t, "token_id", json_integer(c->top_ids[(size_t)i * c->top_n + k]));
                    json_object_set_new(t, "logprob", json_real(c->top_logprobs[(size_t)i * c->top_n + k]));
                    json_array_append_new(top, t);
                }
                json_object_set_new(e, "top_logprobs", top);
            }
            json_array_append_new(lp, e);
        }
        json_object_set_new(o, "logprobs", lp);
    }
    json_object_set_new(o, "finish_reason", json_string(pllm_finish_reason_str(c->finish)));
    json_object_set_new(o, "prompt_tokens", json_integer(c->prompt_tokens));
    json_object_set_new(o, "completion_tokens", json_integer(c->n_tokens));
    json_object_set_new(o, "cached_tokens", json_integer(c->cached_tokens));
    if (c->t_first_token > 0) json_object_set_new(o, "ttft_ms", json_real(round((c->t_first_token - c->t_arrival) * 1e6) / 1e3));
    json_object_set_new(o, "latency_ms", json_real(round((c->t_finish - c->t_arrival) * 1e6) / 1e3));
    if (c->finish == PLLM_FINISH_ERROR) json_object_set_new(o, "error", json_string(c->error ? c->error : "unknown error"));
    return dump(out, o);
}

pllm_status pllm_output_error(char **out, const json_t *id, int64_t line, const char *message)
{
    json_t *o = json_object();
    if (!o) return PLLM_ERR_NOMEM;
    if (id) json_object_set(o, "id", (json_t *)id);
    else json_object_set_new(o, "id", json_integer(line));
    json_object_set_new(o, "text", json_string(""));
    json_object_set_new(o, "finish_reason", json_string("error"));
    json_object_set_new(o, "prompt_tokens", json_integer(0));
    json_object_set_new(o, "completion_tokens", json_integer(0));
    json_object_set_new(o, "line", json_integer(line));
    json_t *msg = json_string(message);
    json_object_set_new(o, "error", msg ? msg : json_string("(message is not valid UTF-8)"));
    return dump(out, o);
}

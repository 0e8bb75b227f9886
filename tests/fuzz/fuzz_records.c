/*
 * fuzz_records.c: prompt records in the three input formats (datasets/records.h: pllm JSONL,
 * OpenAI batch, ShareGPT), one record's JSON text per run, and the output lines written for
 * them. The first byte picks the format (pllm, openai, sharegpt, or auto: the format the JSON
 * object looks like) and whether the record sits in a JSON list (element > 0).
 *
 * Properties:
 *   - parse fails exactly when rec->error is set, and then with a message;
 *   - an accepted record has exactly one of prompt / messages, valid parameters, an id;
 *   - the line written for it (an error line for a bad record; a completion line echoing
 *     the prompt, with text taken from it, for a good one; in the format's own output shape)
 *     is one line of valid JSON whose --resume key (pllm_output_key) equals the record's key
 *     (pllm_record_key), and whose text survives the round trip: a record can never break the
 *     output file's one-line-per-request format or make --resume skip or repeat it.
 */
#include "tests/fuzz/fuzz_common.h"

#include "datasets/records.h"

#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

/* out must be one line of JSON whose resume key is key. Returns the parsed object. */
static json_t *check_line(const char *out, const char *key)
{
    FUZZ_CHECK(out != NULL, "no output line");
    FUZZ_CHECK(strchr(out, '\n') == NULL && strchr(out, '\r') == NULL, "newline in an output line: %s", out);
    json_error_t jerr;
    json_t *o = json_loads(out, 0, &jerr);
    FUZZ_CHECK(o != NULL && json_is_object(o), "output line is not a JSON object (%s): %s", jerr.text, out);
    char *k = pllm_output_key(o);
    FUZZ_CHECK(k && strcmp(k, key) == 0, "resume key of the output line '%s' != the record's '%s': %s", k ? k : "(none)",
               key, out);
    free(k);
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    pllm_request_params defaults;
    pllm_request_params_defaults(&defaults);
    static const char *const stops[] = {"\n\n", "###"};
    defaults.stop[0] = stops[0];
    defaults.stop[1] = stops[1];
    defaults.n_stop = (data[0] & 8) ? 2 : 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    pllm_format fmt = (pllm_format)(1 + (data[0] & 3) % 3);
    if ((data[0] & 3) == 3) { /* auto: as the source does it */
        json_t *o = json_loadb(text, len, 0, NULL);
        fmt = json_is_object(o) ? pllm_format_of_object(o) : PLLM_FORMAT_PLLM;
        json_decref(o);
    }
    pllm_record_loc loc = {.file = "fuzz.jsonl", .line = 1 + (int64_t)(size % 1000),
                           .element = (data[0] & 4) ? 1 + (int64_t)(size % 77) : 0};
    (void)pllm_record_line_is_blank(text, len);

    pllm_record rec;
    pllm_status st = pllm_record_parse(&rec, fmt, text, len, &loc, &defaults);
    fuzz_note("record", st);
    FUZZ_CHECK((st == PLLM_OK) == (rec.error == NULL), "status %d but error %s", (int)st, rec.error ? rec.error : "NULL");
    FUZZ_CHECK(st == PLLM_OK || rec.error[0], "empty error message");
    FUZZ_CHECK(fmt == PLLM_FORMAT_OPENAI || (rec.id && (json_is_string(rec.id) || json_is_integer(rec.id))),
               "a %s record without an id", pllm_format_name(fmt));
    char *key = pllm_record_key(&rec);
    FUZZ_CHECK(key != NULL, "record key");
    char *out = NULL;
    if (st != PLLM_OK) {
        if (fmt == PLLM_FORMAT_OPENAI)
            FUZZ_CHECK(pllm_output_openai_error(&out, rec.id, rec.line, rec.element, rec.error, 400) == PLLM_OK, "error line");
        else FUZZ_CHECK(pllm_output_error(&out, rec.id, rec.line, rec.element, rec.error) == PLLM_OK, "error line");
        json_decref(check_line(out, key));
        free(out);
        free(key);
        pllm_record_free(&rec);
        return 0;
    }
    FUZZ_CHECK((rec.prompt != NULL) != (rec.n_messages > 0), "prompt xor messages");
    FUZZ_CHECK(pllm_request_params_validate(&rec.params) == PLLM_OK, "accepted invalid parameters: %s", pllm_errmsg());
    FUZZ_CHECK(rec.params.n_stop >= 0 && rec.params.n_stop <= PLLM_MAX_STOP, "n_stop %d", rec.params.n_stop);
    for (int32_t i = 0; i < rec.params.n_stop; i++) FUZZ_CHECK(rec.params.stop[i] && rec.params.stop[i][0], "empty stop");
    for (size_t i = 0; i < rec.n_messages; i++) FUZZ_CHECK(rec.messages[i].role != NULL, "message %zu has no role", i);
    FUZZ_CHECK(rec.top_logprobs >= 0 && rec.top_logprobs <= PLLM_MAX(rec.params.sampling.logprobs, 0), "top_logprobs %d",
               rec.top_logprobs);

    const char *echo = rec.prompt ? rec.prompt : rec.messages[rec.n_messages - 1].content;
    if (!echo) echo = "";
    enum { NT = 2, TOP = 3 };
    int32_t ids[NT] = {1, 2}, top_ids[NT * TOP] = {1, 2, 3, 4, 5, 6};
    float lps[NT] = {-0.5f, -1.0f}, top_lps[NT * TOP] = {-0.5f, -1, -2, -1, -2, -3};
    pllm_completion c = {.finish = (pllm_finish_reason)(size % 2), .text = echo, .text_len = strlen(echo),
                         .token_ids = ids, .n_tokens = NT, .prompt_tokens = 3, .t_arrival = 1, .t_first_token = 1.5,
                         .t_finish = 2};
    if (rec.params.sampling.logprobs) {
        c.logprobs = lps;
        c.top_n = TOP;
        c.top_ids = top_ids;
        c.top_logprobs = top_lps;
    }
    json_t *o;
    if (fmt == PLLM_FORMAT_OPENAI) {
        json_t *choice = NULL, *choices = json_array();
        FUZZ_CHECK(pllm_openai_choice(&choice, rec.endpoint, &c, rec.want_logprobs, rec.top_logprobs, NULL) == PLLM_OK,
                   "choice");
        json_array_append_new(choices, choice);
        pllm_openai_usage u = {3, NT, 0};
        FUZZ_CHECK(pllm_output_openai(&out, rec.id, rec.line, rec.endpoint, rec.model, choices, &u, 1700000000) == PLLM_OK,
                   "openai line");
        o = check_line(out, key);
        json_t *ch = json_array_get(json_object_get(json_object_get(json_object_get(o, "response"), "body"), "choices"), 0);
        json_t *t = rec.endpoint == PLLM_ENDPOINT_CHAT ? json_object_get(json_object_get(ch, "message"), "content")
                                                       : json_object_get(ch, "text");
        FUZZ_CHECK(json_is_string(t) && strcmp(json_string_value(t), echo) == 0, "text did not survive: %s", out);
    } else {
        pllm_output_opts oo = {.echo_prompt = true, .token_ids = true};
        FUZZ_CHECK(pllm_output_completion(&out, rec.id, echo, rec.params.n, &c, rec.top_logprobs, &oo) == PLLM_OK,
                   "completion line");
        o = check_line(out, key);
        const char *back = json_string_value(json_object_get(o, "text"));
        FUZZ_CHECK(back && strcmp(back, echo) == 0, "text did not survive: %s", out);
    }
    json_decref(o);
    free(out);
    free(key);
    pllm_record_free(&rec);
    return 0;
}

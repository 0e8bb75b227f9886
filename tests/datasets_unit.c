/* datasets_unit: line reader/writer (plain, .zst, CRLF, BOM, no final newline, long lines), the
 * streaming JSON list splitter against jansson on random documents, format detection, prompt
 * records in every format (every malformed kind names its file, line and field), output records
 * (pllm and OpenAI), resume id sets, synthetic prompts. */
#include "datasets/idset.h"
#include "datasets/io.h"
#include "datasets/json_array.h"
#include "datasets/records.h"
#include "datasets/source.h"
#include "datasets/synth.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char g_dir[512];

static const char *tmp_path(const char *name)
{
    static char p[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
    return p[k];
}

static void test_roundtrip(const char *name)
{
    const char *path = tmp_path(name);
    pllm_writer *w;
    CHECK_OK(pllm_writer_open(&w, path, false));
    /* a long line, an empty line, unicode */
    size_t big = 300000;
    char *long_line = malloc(big + 1);
    for (size_t i = 0; i < big; i++) long_line[i] = (char)('a' + i % 26);
    long_line[big] = 0;
    const char *lines[] = {"{\"prompt\": \"héllo\"}", "", long_line, "last"};
    for (int i = 0; i < 4; i++) CHECK_OK(pllm_writer_line(w, lines[i], strlen(lines[i])));
    CHECK_OK(pllm_writer_close(w));
    pllm_reader *r;
    CHECK_OK(pllm_reader_open(&r, path));
    for (int i = 0; i < 4; i++) {
        const char *line;
        size_t len;
        int64_t no;
        bool eof;
        CHECK_OK(pllm_reader_next(r, &line, &len, &no, &eof));
        CHECK(!eof && no == i + 1 && len == strlen(lines[i]) && memcmp(line, lines[i], len) == 0);
    }
    const char *line;
    size_t len;
    int64_t no;
    bool eof;
    CHECK_OK(pllm_reader_next(r, &line, &len, &no, &eof));
    CHECK(eof);
    pllm_reader_close(r);
    free(long_line);
}

static void test_plain_edges(void)
{
    const char *path = tmp_path("edges.jsonl");
    FILE *f = fopen(path, "wb");
    fputs("a\r\nb\n\nc", f); /* CRLF, blank line, no final newline */
    fclose(f);
    pllm_reader *r;
    CHECK_OK(pllm_reader_open(&r, path));
    const char *want[] = {"a\r", "b", "", "c"};
    for (int i = 0; i < 4; i++) {
        const char *line;
        size_t len;
        int64_t no;
        bool eof;
        CHECK_OK(pllm_reader_next(r, &line, &len, &no, &eof));
        CHECK(!eof && no == i + 1 && strcmp(line, want[i]) == 0);
    }
    pllm_reader_close(r);
    /* a UTF-8 byte order mark is dropped; peeking consumes nothing */
    f = fopen(path, "wb");
    fputs("\xef\xbb\xbf  \n {\"a\": 1}\n", f);
    fclose(f);
    CHECK_OK(pllm_reader_open(&r, path));
    int c = 0;
    CHECK_OK(pllm_reader_peek_nonspace(r, &c));
    CHECK(c == '{');
    const char *line;
    size_t len;
    int64_t no;
    bool eof;
    CHECK_OK(pllm_reader_next(r, &line, &len, &no, &eof));
    CHECK(!eof && no == 1 && strcmp(line, "  ") == 0);
    CHECK_OK(pllm_reader_next(r, &line, &len, &no, &eof));
    CHECK(!eof && no == 2 && strcmp(line, " {\"a\": 1}") == 0);
    pllm_reader_close(r);
    f = fopen(path, "wb");
    fputs(" \n\t\r\n", f);
    fclose(f);
    CHECK_OK(pllm_reader_open(&r, path));
    CHECK_OK(pllm_reader_peek_nonspace(r, &c));
    CHECK(c == -1);
    pllm_reader_close(r);
    pllm_reader *r2;
    CHECK(pllm_reader_open(&r2, tmp_path("does-not-exist.jsonl")) == PLLM_ERR_NOT_FOUND);
    CHECK(strstr(pllm_errmsg(), "does-not-exist.jsonl") != NULL);
}

static void test_zst_truncated(void)
{
    /* a .zst file cut in the middle: a clear error, not silent loss */
    const char *path = tmp_path("trunc.jsonl.zst");
    pllm_writer *w;
    CHECK_OK(pllm_writer_open(&w, path, false));
    char line[200];
    for (int i = 0; i < 2000; i++) {
        snprintf(line, sizeof line,
                 "{\"id\": %d, \"prompt\": \"line %d with some text to compress\"}", i, i * 7919);
        CHECK_OK(pllm_writer_line(w, line, strlen(line)));
    }
    CHECK_OK(pllm_writer_close(w));
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    CHECK(truncate(path, n / 2) == 0);
    pllm_reader *r;
    CHECK_OK(pllm_reader_open(&r, path));
    pllm_status st = PLLM_OK;
    int got = 0;
    for (;;) {
        const char *l;
        size_t len;
        int64_t no;
        bool eof;
        st = pllm_reader_next(r, &l, &len, &no, &eof);
        if (st != PLLM_OK || eof) break;
        got++;
    }
    CHECK(st == PLLM_ERR_FORMAT && strstr(pllm_errmsg(), "truncated") != NULL);
    CHECK(got > 100); /* each line was flushed as its own block: the prefix is readable */
    pllm_reader_close(r);
}

static pllm_record_loc LOC42 = {"in.jsonl", 42, 0, PLLM_EXTRA_ERROR};

static void expect_record_error(const char *line, const char *needle1, const char *needle2)
{
    pllm_request_params d;
    pllm_request_params_defaults(&d);
    pllm_record rec;
    pllm_status st = pllm_record_parse(&rec, PLLM_FORMAT_PLLM, line, strlen(line), &LOC42, &d);
    if (st == PLLM_OK || !rec.error || !strstr(rec.error, "in.jsonl:42:") ||
        (needle1 && !strstr(rec.error, needle1)) || (needle2 && !strstr(rec.error, needle2)) ||
        strcmp(rec.error, pllm_errmsg())) {
        fprintf(stderr, "record %s: want error with '%s' '%s', got %s: %s\n", line,
                needle1 ? needle1 : "", needle2 ? needle2 : "", pllm_status_str(st),
                rec.error ? rec.error : "(no rec.error)");
        pllm_test_failures++;
    }
    CHECK(rec.id != NULL); /* the error record can always carry an id */
    pllm_record_free(&rec);
}

static pllm_status parse_as_d(pllm_record *rec, const char *text, const pllm_request_params *d)
{
    pllm_record_loc loc = {"data.json", 1, 0, PLLM_EXTRA_ERROR};
    return pllm_record_parse(rec, PLLM_FORMAT_PLLM, text, strlen(text), &loc, d);
}

static pllm_status parse_as(pllm_record *rec, pllm_format f, const char *text, int64_t line,
                            int64_t element)
{
    pllm_request_params d;
    pllm_request_params_defaults(&d);
    pllm_record_loc loc = {"data.json", line, element, PLLM_EXTRA_ERROR};
    return pllm_record_parse(rec, f, text, strlen(text), &loc, &d);
}

/* "metadata" is kept for the output line whatever the mode; --extra-fields decides what an
 * unknown field does: error (naming it), ignore, passthrough (into the metadata object). */
static void test_metadata(void)
{
    pllm_request_params d;
    pllm_request_params_defaults(&d);
    pllm_record rec;
    const char *t = "{\"id\": 1, \"prompt\": \"x\", \"metadata\": {\"a\": [1, 0.5]}, "
                    "\"expected\": \"Paris\"}";
    for (int mode = PLLM_EXTRA_ERROR; mode <= PLLM_EXTRA_PASSTHROUGH; mode++) {
        pllm_record_loc loc = {"m.jsonl", 3, 0, (pllm_extra_fields)mode};
        pllm_status st = pllm_record_parse(&rec, PLLM_FORMAT_PLLM, t, strlen(t), &loc, &d);
        json_t *want = json_pack("{s:[i,f]}", "a", 1, 0.5);
        if (mode == PLLM_EXTRA_PASSTHROUGH)
            json_object_set_new(want, "expected", json_string("Paris"));
        if (mode == PLLM_EXTRA_ERROR) {
            CHECK(st == PLLM_ERR_FORMAT && rec.error && strstr(rec.error, "m.jsonl:3:") &&
                  strstr(rec.error, "unknown field 'expected'"));
        } else {
            CHECK_OK(st);
            CHECK(json_equal(rec.metadata, want));
        }
        json_decref(want);
        pllm_record_free(&rec);
    }
    /* openai: top-level metadata, a passthrough body field beside it; a clash is an error */
    const char *o = "{\"custom_id\": \"r\", \"method\": \"POST\", \"url\": \"/v1/completions\", "
                    "\"metadata\": {\"q\": 1}, \"body\": {\"prompt\": \"x\", \"cat\": \"m\"}}";
    pllm_record_loc lp = {"o.jsonl", 1, 0, PLLM_EXTRA_PASSTHROUGH};
    CHECK_OK(pllm_record_parse(&rec, PLLM_FORMAT_OPENAI, o, strlen(o), &lp, &d));
    json_t *want = json_pack("{s:i, s:s}", "q", 1, "cat", "m");
    CHECK(json_equal(rec.metadata, want));
    json_decref(want);
    pllm_record_free(&rec);
    const char *c = "{\"prompt\": \"x\", \"q\": 2, \"metadata\": {\"q\": 1}}";
    CHECK(pllm_record_parse(&rec, PLLM_FORMAT_PLLM, c, strlen(c), &lp, &d) == PLLM_ERR_FORMAT &&
          strstr(rec.error, "both a record field and a key of 'metadata'"));
    pllm_record_free(&rec);
    CHECK(parse_as(&rec, PLLM_FORMAT_PLLM, "{\"prompt\": \"x\", \"metadata\": 7}", 1, 0) ==
              PLLM_OK &&
          json_integer_value(rec.metadata) == 7);
    pllm_record_free(&rec);
    /* --logprobs K as a record default; a record's own logprobs wins */
    d.sampling.logprobs = 3;
    CHECK_OK(parse_as_d(&rec, "{\"prompt\": \"x\"}", &d));
    CHECK(rec.want_logprobs && rec.top_logprobs == 3 && rec.params.sampling.logprobs == 3);
    pllm_record_free(&rec);
    CHECK_OK(parse_as_d(&rec, "{\"prompt\": \"x\", \"logprobs\": false}", &d));
    CHECK(!rec.want_logprobs && rec.params.sampling.logprobs == 0);
    pllm_record_free(&rec);
}

static void test_records(void)
{
    pllm_request_params d;
    pllm_request_params_defaults(&d);
    d.max_tokens = 99;
    pllm_record rec;
    const char *ok = "{\"id\": \"q1\", \"prompt\": \"Hi\", \"temperature\": 0.5, \"stop\": "
                     "[\"\\n\", \"END\"], \"max_tokens\": 8.0, \"seed\": 12345678901234}";
    CHECK_OK(pllm_record_parse(&rec, PLLM_FORMAT_PLLM, ok, strlen(ok), &LOC42, &d));
    CHECK(json_is_string(rec.id) && strcmp(json_string_value(rec.id), "q1") == 0);
    CHECK(rec.prompt && strcmp(rec.prompt, "Hi") == 0 && !rec.error);
    CHECK(rec.params.max_tokens == 8 && rec.has_max_tokens &&
          rec.params.sampling.temperature == 0.5f && rec.params.n_stop == 2);
    CHECK(rec.params.has_seed && rec.params.sampling.seed == 12345678901234ull);
    CHECK(strcmp(rec.params.stop[1], "END") == 0);
    pllm_record_free(&rec);

    const char *msgs = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                       "{\"role\": \"user\", \"content\": \"2+2?\"}]}";
    pllm_record_loc l7 = {"in.jsonl", 7, 0, PLLM_EXTRA_ERROR};
    CHECK_OK(pllm_record_parse(&rec, PLLM_FORMAT_PLLM, msgs, strlen(msgs), &l7, &d));
    CHECK(json_integer_value(rec.id) == 7 && rec.n_messages == 2 &&
          strcmp(rec.messages[1].content, "2+2?") == 0);
    CHECK(rec.params.max_tokens == 99 && !rec.has_max_tokens);
    pllm_record_free(&rec);

    expect_record_error("{\"prompt\": \"x\"", "invalid JSON", NULL);
    expect_record_error("[1, 2]", "JSON object", NULL);
    expect_record_error("{\"id\": 1}", "missing field 'prompt'", NULL);
    expect_record_error("{\"prompt\": 5}", "'prompt'", "got 5");
    expect_record_error("{\"prompt\": \"\"}", "'prompt'", "empty");
    expect_record_error("{\"prompt\": \"a\", \"messages\": []}", "not both", NULL);
    expect_record_error("{\"messages\": []}", "'messages'", "empty");
    expect_record_error("{\"messages\": [{\"role\": \"user\", \"content\": \"\"}]}", "'messages'",
                        "empty prompt");
    expect_record_error("{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content", "missing");
    expect_record_error("{\"messages\": [{\"role\": 3, \"content\": \"x\"}]}", "messages[0].role",
                        "got 3");
    expect_record_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"mood\": 1}]}",
                        "messages[0].mood", NULL);
    expect_record_error("{\"prompt\": \"a\", \"temprature\": 0.2}", "unknown field 'temprature'",
                        NULL);
    expect_record_error("{\"prompt\": \"a\", \"max_tokens\": \"9\"}", "'max_tokens'", "got \"9\"");
    expect_record_error("{\"prompt\": \"a\", \"max_tokens\": 0}", "'max_tokens'", "[1, ");
    expect_record_error("{\"prompt\": \"a\", \"max_tokens\": 2.5}", "'max_tokens'", "integer");
    expect_record_error("{\"prompt\": \"a\", \"temperature\": \"hot\"}", "'temperature'",
                        "got \"hot\"");
    expect_record_error("{\"prompt\": \"a\", \"temperature\": -1}", "temperature", NULL);
    expect_record_error("{\"prompt\": \"a\", \"top_p\": 1.5}", "top_p", NULL);
    expect_record_error("{\"prompt\": \"a\", \"stop\": 3}", "'stop'", NULL);
    expect_record_error("{\"prompt\": \"a\", \"ignore_eos\": 1}", "'ignore_eos'", NULL);
    expect_record_error("{\"prompt\": \"a\", \"id\": [1]}", "'id'", NULL);
    expect_record_error("{\"prompt\": \"a\", \"prompt\": \"b\"}", "invalid JSON", "duplicate");
    /* a long value is cut in the message */
    expect_record_error(
        "{\"prompt\": \"a\", \"seed\": "
        "\"0123456789012345678901234567890123456789012345678901234567890123456789\"}",
        "'seed'", "...");

    /* OpenAI batch lines */
    const char *oa = "{\"custom_id\": \"c1\", \"method\": \"POST\", \"url\": "
                     "\"/v1/chat/completions\", \"body\": {\"model\": \"m\", "
                     "\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", "
                     "\"text\": \"a\"}, {\"type\": \"text\", "
                     "\"text\": \"b\"}]}], \"max_completion_tokens\": 5, \"logprobs\": true, "
                     "\"top_logprobs\": 3, \"seed\": 9, \"user\": \"u\"}}";
    CHECK_OK(parse_as(&rec, PLLM_FORMAT_OPENAI, oa, 3, 0));
    CHECK(rec.endpoint == PLLM_ENDPOINT_CHAT && strcmp(json_string_value(rec.id), "c1") == 0 &&
          strcmp(rec.model, "m") == 0);
    CHECK(rec.n_messages == 1 && strcmp(rec.messages[0].content, "a\nb") == 0);
    CHECK(rec.params.max_tokens == 5 && rec.want_logprobs && rec.top_logprobs == 3 &&
          rec.params.sampling.logprobs == 3);
    CHECK(rec.params.has_seed && rec.params.sampling.seed == 9);
    pllm_record_free(&rec);
    const char *oc = "{\"custom_id\": \"c2\", \"method\": \"POST\", \"url\": \"/v1/completions\", "
                     "\"body\": {\"prompt\": [\"hello\"], \"logprobs\": 0}}";
    CHECK_OK(parse_as(&rec, PLLM_FORMAT_OPENAI, oc, 4, 0));
    CHECK(rec.endpoint == PLLM_ENDPOINT_COMPLETIONS && strcmp(rec.prompt, "hello") == 0 &&
          rec.want_logprobs && rec.top_logprobs == 0 && rec.params.sampling.logprobs == 1);
    char *key = pllm_record_key(&rec);
    CHECK(key && strcmp(key, "c2") == 0);
    free(key);
    pllm_record_free(&rec);
    const struct {
        const char *text, *want;
    } bad_oa[] = {
        {"{\"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": {\"prompt\": \"x\"}}",
         "'custom_id': is missing"},
        {"{\"custom_id\": 5, \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": "
         "{\"prompt\": \"x\"}}",
         "'custom_id': must be a string, got 5"},
        {"{\"custom_id\": \"a\", \"method\": \"GET\", \"url\": \"/v1/completions\", \"body\": "
         "{\"prompt\": \"x\"}}",
         "'method'"},
        {"{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/embeddings\", \"body\": "
         "{\"prompt\": \"x\"}}",
         "'url'"},
        {"{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/completions\"}",
         "'body': is missing"},
        {"{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": "
         "{\"prompt\": \"x\", \"temprature\": 1}}",
         "unknown field 'body.temprature'"},
        {"{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": "
         "{\"prompt\": \"\"}}",
         "'body.prompt': is empty"},
        {"{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", "
         "\"body\": {\"prompt\": \"x\"}}",
         "'body.prompt'"},
        {"{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", "
         "\"body\": {\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream\": true}}",
         "'body.stream'"},
        {"{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", "
         "\"body\": {\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": "
         "-3}}",
         "'body.max_tokens'"},
        {"{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", "
         "\"body\": {\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": "
         "2}}",
         "needs \"logprobs\": true"},
        {"{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", "
         "\"body\": {\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
         "\"image_url\"}]}]}}",
         "only text"},
        {"{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", "
         "\"body\": {}, \"extra\": 1}",
         "unknown field 'extra'"},
    };
    for (size_t i = 0; i < sizeof bad_oa / sizeof bad_oa[0]; i++) {
        pllm_status st = parse_as(&rec, PLLM_FORMAT_OPENAI, bad_oa[i].text, 9, 0);
        if (st == PLLM_OK || !rec.error || !strstr(rec.error, "data.json:9:") ||
            !strstr(rec.error, bad_oa[i].want)) {
            fprintf(stderr, "openai %zu: want '%s', got %s\n", i, bad_oa[i].want,
                    rec.error ? rec.error : "ok");
            pllm_test_failures++;
        }
        key = pllm_record_key(&rec);
        CHECK(key != NULL);
        if (!rec.id) CHECK(key && strcmp(key, "\x01l9") == 0);
        free(key);
        pllm_record_free(&rec);
    }

    /* ShareGPT entries: single turn, two turns (reference), system, bad ones; element locations */
    const char *sg1 = "{\"id\": \"s1\", \"conversations\": [{\"from\": \"human\", \"value\": \"Hi "
                      "there\"}], \"lang\": \"en\"}";
    CHECK_OK(parse_as(&rec, PLLM_FORMAT_SHAREGPT, sg1, 1, 5));
    CHECK(rec.n_messages == 1 && strcmp(rec.messages[0].role, "user") == 0 && !rec.reference &&
          rec.element == 5);
    pllm_record_free(&rec);
    const char *sg2 = "{\"conversations\": [{\"from\": \"system\", \"value\": \"S\"}, {\"from\": "
                      "\"human\", \"value\": \"Q1\"}, "
                      "{\"from\": \"gpt\", \"value\": \"A1\"}, {\"from\": \"human\", \"value\": "
                      "\"Q2\"}, {\"from\": \"gpt\", \"value\": \"A2\"}]}";
    CHECK_OK(parse_as(&rec, PLLM_FORMAT_SHAREGPT, sg2, 1, 6));
    CHECK(rec.n_messages == 4 && strcmp(rec.messages[3].content, "Q2") == 0 &&
          strcmp(rec.messages[2].role, "assistant") == 0);
    CHECK(rec.reference && strcmp(rec.reference, "A1") == 0 && json_integer_value(rec.id) == 6);
    pllm_record_free(&rec);
    const struct {
        const char *text, *want;
    } bad_sg[] = {
        {"{\"id\": \"a\"}", "missing field 'conversations'"},
        {"{\"conversations\": []}", "'conversations': is empty"},
        {"{\"conversations\": {}}", "'conversations': must be a list"},
        {"{\"conversations\": [{\"from\": \"gpt\", \"value\": \"x\"}]}", "no human turn"},
        {"{\"conversations\": [{\"from\": \"robot\", \"value\": \"x\"}]}", "conversations[0].from"},
        {"{\"conversations\": [{\"from\": \"human\", \"value\": 7}]}", "conversations[0].value"},
        {"{\"conversations\": [{\"from\": \"human\", \"value\": \"\"}]}", "empty prompt"},
        {"{\"conversations\": [\"hi\"]}", "conversations[0]': must be an object"},
    };
    for (size_t i = 0; i < sizeof bad_sg / sizeof bad_sg[0]; i++) {
        pllm_status st = parse_as(&rec, PLLM_FORMAT_SHAREGPT, bad_sg[i].text, 1, 17);
        if (st == PLLM_OK || !rec.error || !strstr(rec.error, "data.json:1: element 17:") ||
            !strstr(rec.error, bad_sg[i].want)) {
            fprintf(stderr, "sharegpt %zu: want '%s', got %s\n", i, bad_sg[i].want,
                    rec.error ? rec.error : "ok");
            pllm_test_failures++;
        }
        pllm_record_free(&rec);
    }

    char *s = NULL;
    json_t *id = json_string("x\"y");
    CHECK_OK(pllm_output_error(&s, id, 5, 0, "line 5: bad \"thing\""));
    json_t *o = json_loads(s, 0, NULL);
    CHECK(o && strcmp(json_string_value(json_object_get(o, "id")), "x\"y") == 0);
    CHECK(o && strcmp(json_string_value(json_object_get(o, "finish_reason")), "error") == 0);
    CHECK(o && json_integer_value(json_object_get(o, "line")) == 5 &&
          !json_object_get(o, "element"));
    json_decref(o);
    free(s);

    pllm_completion c = {.finish = PLLM_FINISH_STOP,
                         .text = "ok \xff\xfe tail",
                         .text_len = 10,
                         .prompt_tokens = 3,
                         .n_tokens = 2,
                         .token_ids = (const int32_t[]){5, 6},
                         .t_arrival = 1.0,
                         .t_first_token = 1.5,
                         .t_finish = 2.0};
    pllm_output_opts oo = {.echo_prompt = true, .token_ids = true};
    CHECK_OK(pllm_output_completion(&s, id, "the prompt", 1, &c, -1, &oo));
    o = json_loads(s, 0, NULL);
    CHECK(o != NULL); /* invalid UTF-8 in text still gives valid JSON */
    CHECK(o && strcmp(json_string_value(json_object_get(o, "text")),
                      "ok \xef\xbf\xbd\xef\xbf\xbd tail") == 0);
    CHECK(o && json_array_size(json_object_get(o, "token_ids")) == 2);
    CHECK(o && json_real_value(json_object_get(o, "ttft_ms")) == 500.0);
    CHECK(o && json_object_get(o, "index") == NULL);
    json_decref(o);
    free(s);

    /* OpenAI output: ids stable across calls, usage, error lines carry the line for --resume */
    json_t *choices = json_array(), *choice = NULL;
    c.index = 0;
    CHECK_OK(pllm_openai_choice(&choice, PLLM_ENDPOINT_CHAT, &c, false, 0, NULL));
    json_array_append_new(choices, choice);
    pllm_openai_usage u = {3, 2, 1};
    CHECK_OK(pllm_output_openai(&s, id, 5, PLLM_ENDPOINT_CHAT, "m", choices, &u, 1700000000));
    o = json_loads(s, 0, NULL);
    json_t *body = json_object_get(json_object_get(o, "response"), "body");
    CHECK(o && json_integer_value(json_object_get(json_object_get(o, "response"), "status_code")) ==
                   200);
    CHECK(json_is_null(json_object_get(o, "error")) &&
          strncmp(json_string_value(json_object_get(o, "id")), "pllm-", 5) == 0);
    CHECK(strcmp(json_string_value(json_object_get(body, "object")), "chat.completion") == 0);
    CHECK(json_integer_value(json_object_get(json_object_get(body, "usage"), "total_tokens")) == 5);
    json_t *msg = json_object_get(json_array_get(json_object_get(body, "choices"), 0), "message");
    CHECK(strcmp(json_string_value(json_object_get(msg, "role")), "assistant") == 0);
    char *k2 = pllm_output_key(o);
    CHECK(k2 && strcmp(k2, "x\"y") == 0);
    free(k2);
    json_decref(o);
    free(s);
    CHECK_OK(pllm_output_openai_error(&s, NULL, 12, 0, "data.json:12: bad", 400));
    o = json_loads(s, 0, NULL);
    CHECK(o && json_is_null(json_object_get(o, "custom_id")) &&
          json_integer_value(json_object_get(json_object_get(o, "response"), "status_code")) ==
              400);
    k2 = pllm_output_key(o);
    CHECK(k2 && strcmp(k2, "\x01l12") == 0);
    free(k2);
    json_decref(o);
    free(s);
    json_decref(id);
}

static void write_file(const char *path, const char *text, size_t n)
{
    if (pllm_path_is_zst(path)) {
        pllm_writer *w;
        CHECK_OK(pllm_writer_open(&w, path, false));
        /* the writer adds a newline per call: write the text as lines */
        const char *p = text, *end = text + n;
        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
            CHECK_OK(pllm_writer_line(w, p, len));
            p += len + (nl ? 1 : 0);
        }
        CHECK_OK(pllm_writer_close(w));
        return;
    }
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, n, f);
    fclose(f);
}

/* A random JSON value with strings full of the characters a splitter must not be fooled by. */
static json_t *random_value(uint64_t *rng, int depth)
{
    int kind = (int)(pllm_test_rand(rng) % (depth > 3 ? 5u : 7u));
    static const char *const strs[] = {"plain",
                                       "a \"quoted\" ]} word",
                                       "back\\slash\\",
                                       "[{,:}]",
                                       "line\nbreak\ttab",
                                       "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80",
                                       "",
                                       "\\\"",
                                       "]"};
    switch (kind) {
    case 0:
        return json_integer((json_int_t)(pllm_test_rand(rng) % 2000000) - 1000000);
    case 1:
        return json_real((double)(pllm_test_rand(rng) % 100000) / 7.0);
    case 2:
        return json_string(strs[pllm_test_rand(rng) % (sizeof strs / sizeof strs[0])]);
    case 3:
        return pllm_test_rand(rng) % 2 ? json_true() : json_false();
    case 4:
        return json_null();
    case 5: {
        json_t *a = json_array();
        int n = (int)(pllm_test_rand(rng) % 4);
        for (int i = 0; i < n; i++) json_array_append_new(a, random_value(rng, depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        int n = (int)(pllm_test_rand(rng) % 4);
        for (int i = 0; i < n; i++) {
            char k[32];
            snprintf(k, sizeof k, "%s%d",
                     strs[pllm_test_rand(rng) % (sizeof strs / sizeof strs[0])], i);
            json_object_set_new(o, k, random_value(rng, depth + 1));
        }
        return o;
    }
    }
}

static void test_json_array_random(void)
{
    uint64_t rng = 12345;
    int docs = 0, elems = 0;
    for (int t = 0; t < 300; t++) {
        json_t *doc = json_array();
        int n = t % 50 == 49 ? 4000
                             : (int)(pllm_test_rand(&rng) % 40); /* some span many 64 KiB chunks */
        for (int i = 0; i < n; i++) json_array_append_new(doc, random_value(&rng, 0));
        size_t flags = (pllm_test_rand(&rng) % 2 ? JSON_INDENT((int)(pllm_test_rand(&rng) % 4))
                                                 : JSON_COMPACT) |
                       JSON_ENCODE_ANY;
        char *text = json_dumps(doc, flags);
        const char *path = tmp_path(t % 3 == 0 ? "arr.json.zst" : "arr.json");
        write_file(path, text, strlen(text));
        /* the .zst writer ends the file with a newline; plain files keep the text as is */
        pllm_reader *r;
        CHECK_OK(pllm_reader_open(&r, path));
        pllm_json_array *a;
        CHECK_OK(pllm_json_array_open(&a, r));
        int k = 0;
        for (;;) {
            pllm_json_elem e;
            bool eof;
            pllm_status st = pllm_json_array_next(a, &e, &eof);
            CHECK_OK(st);
            if (st != PLLM_OK || eof) break;
            json_t *got = json_loadb(e.text, e.len, JSON_DECODE_ANY, NULL);
            json_t *want = json_array_get(doc, (size_t)k);
            if (!got || !json_equal(got, want) || e.index != k + 1) {
                fprintf(stderr, "doc %d element %d: got '%.*s'\n", t, k, (int)e.len, e.text);
                pllm_test_failures++;
            }
            /* the reported line is the line of the reported offset, which is where the text starts
             */
            int64_t line = 1;
            for (uint64_t i = 0; i < e.offset; i++) line += text[i] == '\n';
            CHECK(e.line == line && e.offset < strlen(text) && text[e.offset] == e.text[0]);
            json_decref(got);
            k++;
        }
        CHECK(k == n);
        elems += k;
        docs++;
        pllm_json_array_free(a);
        pllm_reader_close(r);
        free(text);
        json_decref(doc);
    }
    printf("json_array: %d random documents, %d elements, all equal to jansson's parse of the "
           "whole list\n",
           docs, elems);
}

/* Split text as a list; returns the status of the first failure (PLLM_OK at a clean end) and
 * the number of elements before it. */
static pllm_status split_list(const char *text, int *n, char *msg, size_t cap)
{
    const char *path = tmp_path("edge.json");
    write_file(path, text, strlen(text));
    pllm_reader *r;
    pllm_json_array *a;
    CHECK_OK(pllm_reader_open(&r, path));
    CHECK_OK(pllm_json_array_open(&a, r));
    pllm_status st;
    *n = 0;
    for (;;) {
        pllm_json_elem e;
        bool eof;
        st = pllm_json_array_next(a, &e, &eof);
        if (st != PLLM_OK || eof) break;
        (*n)++;
    }
    snprintf(msg, cap, "%s", st == PLLM_OK ? "" : pllm_errmsg());
    pllm_json_array_free(a);
    pllm_reader_close(r);
    return st;
}

static void test_json_array_edges(void)
{
    const struct {
        const char *text;
        int n;
        const char *err; /* NULL: a clean end */
    } cases[] = {
        {"[]", 0, NULL},
        {" \n [ \n ] \n", 0, NULL},
        {"\xef\xbb\xbf[1, 2]", 2, NULL},
        {"[{\"a\": \"]}\"}, [\"[\"], \"x\\\"]\", 3]", 4, NULL},
        {"[1, 2", 2, "end of the input"},
        {"[1, {\"a\": [", 1, "truncated"},
        {"[1 2]", 1, "expected ',' or ']'"},
        {"[1,\n]", 1, ":2:"},
        {"[1] x", 1, "after the closing"},
        {"{\"a\": 1}", 0, "expected '['"},
        {"[,1]", 0, "expected an element"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n;
        char msg[512];
        pllm_status st = split_list(cases[i].text, &n, msg, sizeof msg);
        bool ok =
            n == cases[i].n && (cases[i].err ? st == PLLM_ERR_FORMAT && strstr(msg, cases[i].err) &&
                                                   strstr(msg, "edge.json")
                                             : st == PLLM_OK);
        if (!ok) {
            fprintf(stderr, "json_array edge %zu '%s': %d elements, %s '%s'\n", i, cases[i].text, n,
                    pllm_status_str(st), msg);
            pllm_test_failures++;
        }
    }
}

static void test_source_detection(void)
{
    const struct {
        const char *name, *text;
        pllm_format want;
        bool list;
        int n, n_bad;
    } cases[] = {
        {"p.jsonl", "{\"id\": 1, \"prompt\": \"a\"}\n\n{\"prompt\": \"b\"}\n", PLLM_FORMAT_PLLM,
         false, 2, 0},
        {"o.jsonl",
         "not json\n{\"custom_id\": \"x\", \"method\": \"POST\", \"url\": \"/v1/completions\", "
         "\"body\": {\"prompt\": \"p\"}}\n",
         PLLM_FORMAT_OPENAI, false, 2, 1},
        {"s.jsonl",
         "{\"id\": \"a\", \"conversations\": [{\"from\": \"human\", \"value\": \"q\"}]}\n",
         PLLM_FORMAT_SHAREGPT, false, 1, 0},
        {"s.json",
         "\xef\xbb\xbf\n[{\"id\": \"a\", \"conversations\": [{\"from\": \"human\", \"value\": "
         "\"q\"}]},\n {\"id\": 3}]",
         PLLM_FORMAT_SHAREGPT, true, 2, 1},
        {"p.json", "[{\"prompt\": \"a\"}, {\"prompt\": \"b\"}, 7]", PLLM_FORMAT_PLLM, true, 3, 1},
        {"s.json.zst", "[{\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}]}]",
         PLLM_FORMAT_SHAREGPT, true, 1, 0},
        {"empty.jsonl", "\n  \n", PLLM_FORMAT_PLLM, false, 0, 0},
    };
    pllm_request_params d;
    pllm_request_params_defaults(&d);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = tmp_path(cases[i].name);
        write_file(path, cases[i].text, strlen(cases[i].text));
        pllm_source *src;
        CHECK_OK(pllm_source_open(&src, path, PLLM_FORMAT_AUTO));
        if (!src) continue;
        int n = 0, n_bad = 0;
        int64_t last_line = 0;
        for (;;) {
            pllm_record rec;
            bool eof;
            CHECK_OK(pllm_source_next(src, &d, &rec, &eof));
            if (eof) break;
            n++;
            n_bad += rec.error != NULL;
            if (rec.error) CHECK(strstr(rec.error, cases[i].name) != NULL);
            CHECK(rec.line >= last_line);
            last_line = rec.line;
            pllm_record_free(&rec);
        }
        if (pllm_source_format(src) != cases[i].want || pllm_source_is_list(src) != cases[i].list ||
            n != cases[i].n || n_bad != cases[i].n_bad) {
            fprintf(stderr, "source %s: format %s list %d, %d records (%d bad)\n", cases[i].name,
                    pllm_format_name(pllm_source_format(src)), pllm_source_is_list(src), n, n_bad);
            pllm_test_failures++;
        }
        pllm_source_close(src);
    }
    /* forced format: a pllm file read as openai gives one error per record, naming custom_id */
    const char *path = tmp_path("p.jsonl");
    pllm_source *src;
    CHECK_OK(pllm_source_open(&src, path, PLLM_FORMAT_OPENAI));
    pllm_record rec;
    bool eof;
    CHECK_OK(pllm_source_next(src, &d, &rec, &eof));
    CHECK(!eof && rec.error && strstr(rec.error, "custom_id") && rec.line == 1);
    pllm_record_free(&rec);
    pllm_source_close(src);
}

static void test_synth(void)
{
    int32_t allowed[] = {5, 9, 11, 40};
    pllm_synth s = {.kind = PLLM_SYNTH_PREFIX,
                    .allowed = allowed,
                    .n_allowed = 4,
                    .seed = 7,
                    .input_len = 50,
                    .prefix_len = 30,
                    .n_prefixes = 3};
    pllm_tokens a = {0}, b = {0}, c = {0};
    CHECK_OK(pllm_synth_prompt(&s, 1, &a));
    CHECK_OK(pllm_synth_prompt(&s, 4, &b)); /* the same prefix as 1 */
    CHECK_OK(pllm_synth_prompt(&s, 2, &c));
    CHECK(a.n == 80 && b.n == 80 && memcmp(a.ids, b.ids, 30 * sizeof *a.ids) == 0);
    CHECK(memcmp(a.ids + 30, b.ids + 30, 50 * sizeof *a.ids) != 0 &&
          memcmp(a.ids, c.ids, 30 * sizeof *a.ids) != 0);
    int counts[41] = {0};
    for (size_t i = 0; i < a.n; i++) counts[a.ids[i]]++;
    CHECK(counts[5] + counts[9] + counts[11] + counts[40] == 80 && counts[5] && counts[9] &&
          counts[11] && counts[40]);
    pllm_tokens a2 = {0};
    CHECK_OK(pllm_synth_prompt(&s, 1, &a2));
    CHECK(a2.n == a.n && memcmp(a.ids, a2.ids, a.n * sizeof *a.ids) == 0); /* deterministic */
    pllm_tokens_free(&a);
    pllm_tokens_free(&b);
    pllm_tokens_free(&c);
    pllm_tokens_free(&a2);
}

/* A write that fails part way (a file size limit here, as a full disk would) leaves only whole
 * lines, and the writer refuses further lines. */
static void test_writer_failure(void)
{
    const char *path = tmp_path("limited.jsonl");
    remove(path);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    pllm_writer *w;
    CHECK_OK(pllm_writer_open(&w, path, false));
    char line[150];
    memset(line, 'x', sizeof line);
    int ok = 0;
    pllm_status st = PLLM_OK;
    for (int i = 0; i < 100 && st == PLLM_OK; i++) {
        st = pllm_writer_line(w, line, sizeof line - 1); /* 150 bytes with the newline */
        ok += st == PLLM_OK;
    }
    CHECK(st == PLLM_ERR_IO && strstr(pllm_errmsg(), "limited.jsonl") &&
          strstr(pllm_errmsg(), "cut off"));
    CHECK(pllm_writer_line(w, "y", 1) != PLLM_OK);
    CHECK(pllm_writer_close(w) != PLLM_OK);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && sb.st_size == (off_t)ok * 150 && ok == 4096 / 150);
}

static void test_idset_resume(void)
{
    const char *path = tmp_path("out.jsonl");
    FILE *f = fopen(path, "wb");
    fputs(
        "{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": 2, \"text\": \"y\"}\n{\"id\": \"a\", "
        "\"index\": 1}\n"
        "{\"id\": \"pllm-1\", \"custom_id\": \"oa\", \"response\": {}}\n"
        "{\"id\": \"pllm-2\", \"custom_id\": null, \"error\": {\"line\": 9}}\n{\"id\": \"c\", \"te",
        f);
    fclose(f);
    pllm_idset *s;
    CHECK_OK(pllm_idset_create(&s));
    int64_t n;
    bool torn;
    CHECK_OK(pllm_idset_load_output(s, path, &n, &torn));
    CHECK(n == 5 && torn);
    /* a line with an index (one of n > 1 completions) counts under its completion key */
    char *ck = pllm_completion_key("a", 1);
    CHECK(pllm_idset_count(s, "a") == 1 && pllm_idset_count(s, ck) == 1 &&
          pllm_idset_count(s, "2") == 1 && pllm_idset_count(s, "c") == 0);
    free(ck);
    CHECK(pllm_idset_count(s, "oa") == 1 && pllm_idset_count(s, "pllm-1") == 0 &&
          pllm_idset_count(s, "\x01l9") == 1);
    f = fopen(path, "rb");
    char buf[256];
    size_t got = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CHECK(got > 0 && buf[got - 1] == '\n'); /* the torn line was cut */
    for (int i = 0; i < 5000; i++) {
        char k[32];
        snprintf(k, sizeof k, "k%d", i);
        CHECK_OK(pllm_idset_add(s, k));
    }
    CHECK(pllm_idset_size(s) == 5005 && pllm_idset_count(s, "k4999") == 1 &&
          pllm_idset_count(s, "k5000") == 0);
    pllm_idset_free(s);

    /* a .zst output cut mid-stream (a killed writer): the complete lines count, the file is
     * rewritten so that a resumed run's appended frame decodes after it */
    const char *zp = tmp_path("out.jsonl.zst");
    pllm_writer *w;
    CHECK_OK(pllm_writer_open(&w, zp, false));
    for (int i = 0; i < 300; i++) {
        char line[96];
        snprintf(line, sizeof line, "{\"id\": \"r%d\", \"text\": \"some generated text %d\"}", i,
                 i * 31);
        CHECK_OK(pllm_writer_line(w, line, strlen(line)));
    }
    CHECK_OK(pllm_writer_close(w));
    f = fopen(zp, "rb");
    fseek(f, 0, SEEK_END);
    long zn = ftell(f);
    fclose(f);
    CHECK(truncate(zp, zn * 2 / 3) == 0);
    CHECK_OK(pllm_idset_create(&s));
    CHECK_OK(pllm_idset_load_output(s, zp, &n, &torn));
    CHECK(torn && n > 50 && n < 300 && pllm_idset_count(s, "r0") == 1 &&
          pllm_idset_count(s, "r299") == 0);
    int64_t kept = n;
    pllm_idset_free(s);
    CHECK_OK(pllm_writer_open(&w, zp, true));
    CHECK_OK(pllm_writer_line(w, "{\"id\": \"late\"}", 14));
    CHECK_OK(pllm_writer_close(w));
    CHECK_OK(pllm_idset_create(&s));
    CHECK_OK(pllm_idset_load_output(s, zp, &n, &torn));
    CHECK(!torn && n == kept + 1 && pllm_idset_count(s, "late") == 1);
    pllm_idset_free(s);
}

/* Compression told by the first bytes, whatever the name: zstd and gzip (one member or several,
 * as `cat a.gz b.gz` makes), a cut gzip stream reported as truncated. */
static void test_magic(void)
{
    const char *text = "{\"id\": 1, \"prompt\": \"a\"}\n{\"id\": 2, \"prompt\": \"b\"}\n";
    /* zstd content under a plain name */
    const char *zp = tmp_path("z.zst");
    write_file(zp, text, strlen(text));
    const char *zplain = tmp_path("z_no_ext.jsonl");
    CHECK(rename(zp, zplain) == 0);
    /* gzip, two members */
    const char *gp = tmp_path("g.jsonl");
    gzFile gz = gzopen(gp, "wb");
    CHECK(gz != NULL);
    if (gz) {
        gzwrite(gz, text, (unsigned)strlen(text));
        gzclose(gz);
    }
    FILE *f = fopen(gp, "rb");
    char gzbuf[4096];
    size_t gzn = f ? fread(gzbuf, 1, sizeof gzbuf, f) : 0;
    if (f) fclose(f);
    CHECK(gzn > 10 &&
          pllm_compression_of((const unsigned char *)gzbuf, gzn) == PLLM_COMPRESSION_GZIP);
    const char *g2 = tmp_path("g2.data");
    f = fopen(g2, "wb");
    fwrite(gzbuf, 1, gzn, f);
    fwrite(gzbuf, 1, gzn, f);
    fclose(f);
    const struct {
        const char *path;
        pllm_compression comp;
        int reps;
    } cases[] = {{zplain, PLLM_COMPRESSION_ZSTD, 1},
                 {gp, PLLM_COMPRESSION_GZIP, 1},
                 {g2, PLLM_COMPRESSION_GZIP, 2}};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(cases); i++) {
        pllm_reader *r;
        CHECK_OK(pllm_reader_open(&r, cases[i].path));
        if (!r) continue;
        CHECK(pllm_reader_compression(r) == cases[i].comp);
        pllm_buf got = {0};
        for (;;) {
            const char *line;
            size_t len;
            int64_t no;
            bool eof;
            CHECK_OK(pllm_reader_next(r, &line, &len, &no, &eof));
            if (eof || !line) break;
            pllm_buf_append(&got, line, len);
            pllm_buf_append(&got, "\n", 1);
        }
        pllm_buf want = {0};
        for (int k = 0; k < cases[i].reps; k++) pllm_buf_append(&want, text, strlen(text));
        if (got.n != want.n || memcmp(got.s, want.s, got.n) != 0) {
            fprintf(stderr, "magic: %s read back %zu bytes, want %zu\n", cases[i].path, got.n,
                    want.n);
            pllm_test_failures++;
        }
        pllm_buf_free(&got);
        pllm_buf_free(&want);
        pllm_reader_close(r);
    }
    /* a gzip stream cut short: an error naming the truncation, never a silent end */
    const char *gcut = tmp_path("gcut.jsonl");
    f = fopen(gcut, "wb");
    fwrite(gzbuf, 1, gzn - 6, f);
    fclose(f);
    pllm_reader *r;
    CHECK_OK(pllm_reader_open(&r, gcut));
    pllm_status st = PLLM_OK;
    for (int k = 0; r && k < 10; k++) {
        const char *line;
        size_t len;
        int64_t no;
        bool eof;
        st = pllm_reader_next(r, &line, &len, &no, &eof);
        if (st != PLLM_OK || eof) break;
    }
    CHECK(st == PLLM_ERR_FORMAT && strstr(pllm_errmsg(), "truncated gzip") && r &&
          pllm_reader_truncated(r));
    pllm_reader_close(r);
    /* and through a source: detected as a JSON list inside gzip */
    const char *gl = tmp_path("list.json");
    gz = gzopen(gl, "wb");
    gzputs(gz, "[{\"prompt\": \"x\"}]");
    gzclose(gz);
    pllm_source *src;
    CHECK_OK(pllm_source_open(&src, gl, PLLM_FORMAT_AUTO));
    CHECK(src && pllm_source_is_list(src) && !pllm_source_empty(src));
    pllm_source_close(src);
}

/* A file that is not records fails to open with one message naming the file and line; an input
 * with no record opens empty; one good line among bad ones is records. */
static void test_shape(void)
{
    const struct {
        const char *name, *text, *needle;
    } bad[] = {
        {"pretty.json", "{\n  \"id\": \"a\",\n  \"prompt\": \"x\"\n}\n", "line 1"},
        {"nums.json", "[1, 2]", "element 1 (line 1) is a number"},
        {"lists.json", "[[{\"prompt\": \"x\"}]]", "element 1 (line 1) is a list"},
        {"text.txt", "hello\nworld\n", "line 1 is not valid JSON"},
        {"strings.jsonl", "\"a\"\n\"b\"\n", "line 1 is a string"},
    };
    for (size_t i = 0; i < PLLM_ARRAY_LEN(bad); i++) {
        const char *path = tmp_path(bad[i].name);
        write_file(path, bad[i].text, strlen(bad[i].text));
        pllm_source *src = NULL;
        pllm_status st = pllm_source_open(&src, path, PLLM_FORMAT_AUTO);
        if (st != PLLM_ERR_FORMAT || !strstr(pllm_errmsg(), bad[i].name) ||
            !strstr(pllm_errmsg(), bad[i].needle)) {
            fprintf(stderr, "shape %s: status %d, message '%s' (want '%s')\n", bad[i].name, st,
                    pllm_errmsg(), bad[i].needle);
            pllm_test_failures++;
        }
        pllm_source_close(src);
        /* forcing a format does not make it records */
        CHECK(pllm_source_open(&src, path, PLLM_FORMAT_PLLM) == PLLM_ERR_FORMAT);
        pllm_source_close(src);
    }
    const char *p = tmp_path("pretty.json");
    pllm_source *src = NULL;
    pllm_source_open(&src, p, PLLM_FORMAT_AUTO);
    CHECK(strstr(pllm_errmsg(), "one JSON document spread over several lines") != NULL);
    const struct {
        const char *name, *text;
        bool empty;
    } ok[] = {{"e0.jsonl", "", true},
              {"e1.jsonl", "\n \n\t\n", true},
              {"e2.json", " [ ]\n", true},
              {"mixed.jsonl", "oops\n{\"prompt\": \"x\"}\n", false}};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(ok); i++) {
        const char *path = tmp_path(ok[i].name);
        write_file(path, ok[i].text, strlen(ok[i].text));
        CHECK_OK(pllm_source_open(&src, path, PLLM_FORMAT_AUTO));
        CHECK(src && pllm_source_empty(src) == ok[i].empty);
        pllm_source_close(src);
    }
}

/* --retry-errors: error lines are not counted and leave the file; the other lines stay, in
 * order, plain and .zst alike. A pllm error line with a null id (a duplicate id) is keyed by
 * its line. */
static void test_scan_drop_errors(void)
{
    const char *text =
        "{\"id\": \"a\", \"text\": \"x\", \"finish_reason\": \"stop\"}\n"
        "{\"id\": \"b\", \"text\": \"\", \"finish_reason\": \"error\", \"line\": 2}\n"
        "{\"id\": null, \"text\": \"\", \"finish_reason\": \"error\", \"line\": 3}\n"
        "{\"id\": null, \"finish_reason\": \"stop\", \"line\": 4}\n"
        "{\"id\": \"pllm-1\", \"custom_id\": \"c\", \"response\": {}, \"error\": null}\n"
        "{\"id\": \"pllm-2\", \"custom_id\": \"d\", \"response\": {}, \"error\": {\"code\": "
        "400}}\n";
    const char *names[] = {"scan.jsonl", "scan.jsonl.zst"};
    for (size_t i = 0; i < 2; i++) {
        const char *path = tmp_path(names[i]);
        write_file(path, text, strlen(text));
        pllm_idset *s;
        pllm_output_scan res;
        CHECK_OK(pllm_idset_create(&s));
        CHECK_OK(pllm_idset_scan_output(s, path, false, &res));
        CHECK(res.n_lines == 6 && res.n_dropped == 0 && pllm_idset_count(s, "b") == 1 &&
              pllm_idset_count(s, "\x01l3") == 1 && pllm_idset_count(s, "\x01l4") == 1);
        pllm_idset_free(s);
        CHECK_OK(pllm_idset_create(&s));
        CHECK_OK(pllm_idset_scan_output(s, path, true, &res));
        CHECK(res.n_lines == 3 && res.n_dropped == 3 && pllm_idset_count(s, "a") == 1 &&
              pllm_idset_count(s, "b") == 0 && pllm_idset_count(s, "\x01l3") == 0 &&
              pllm_idset_count(s, "c") == 1 && pllm_idset_count(s, "d") == 0);
        pllm_idset_free(s);
        /* the file now holds the three good lines, in order */
        pllm_reader *r;
        CHECK_OK(pllm_reader_open(&r, path));
        const char *want[] = {"\"a\"", "\"line\": 4", "\"c\""};
        int k = 0;
        for (; r; k++) {
            const char *line;
            size_t len;
            int64_t no;
            bool eof;
            CHECK_OK(pllm_reader_next(r, &line, &len, &no, &eof));
            if (eof) break;
            CHECK(k < 3 && strstr(line, want[k]) != NULL);
        }
        CHECK(k == 3);
        pllm_reader_close(r);
    }
}

/* The duplicate-id set: every key added once is new, every second add is seen, across growth. */
static void test_hashset(void)
{
    pllm_hashset *h;
    CHECK_OK(pllm_hashset_create(&h));
    int n_seen = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 200000; i++) {
            char k[32];
            snprintf(k, sizeof k, "r%d", i);
            bool seen;
            CHECK_OK(pllm_hashset_add(h, k, &seen));
            n_seen += seen;
            if (seen != (pass == 1)) {
                CHECK(seen == (pass == 1));
                pass = 2;
                break;
            }
        }
    CHECK(n_seen == 200000);
    pllm_hashset_free(h);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "%s/datasets_unit", pllm_test_env("PLLM_TEST_TMP", "/tmp"));
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", g_dir);
    if (system(cmd) != 0) pllm_test_skip("cannot create the temporary directory");
    test_roundtrip("rt.jsonl");
    test_roundtrip("rt.jsonl.zst");
    test_plain_edges();
    test_zst_truncated();
    test_records();
    test_metadata();
    test_json_array_random();
    test_json_array_edges();
    test_source_detection();
    test_synth();
    test_writer_failure();
    test_idset_resume();
    test_magic();
    test_shape();
    test_scan_drop_errors();
    test_hashset();
    return pllm_test_finish("datasets_unit");
}

/* datasets_unit: line reader/writer (plain, .zst, CRLF, no final newline, long lines), prompt
 * records (every malformed kind names its line and field), output records, resume id sets. */
#include "datasets/idset.h"
#include "datasets/io.h"
#include "datasets/records.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
        snprintf(line, sizeof line, "{\"id\": %d, \"prompt\": \"line %d with some text to compress\"}", i, i * 7919);
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

static void expect_record_error(const char *line, const char *needle1, const char *needle2)
{
    pllm_request_params d;
    pllm_request_params_defaults(&d);
    pllm_record rec;
    pllm_status st = pllm_record_parse(&rec, line, strlen(line), 42, &d);
    if (st == PLLM_OK || !strstr(pllm_errmsg(), "line 42") || (needle1 && !strstr(pllm_errmsg(), needle1)) ||
        (needle2 && !strstr(pllm_errmsg(), needle2))) {
        fprintf(stderr, "record %s: want error with '%s' '%s', got %s: %s\n", line, needle1 ? needle1 : "",
                needle2 ? needle2 : "", pllm_status_str(st), pllm_errmsg());
        pllm_test_failures++;
    }
    CHECK(rec.id != NULL); /* the error record can always carry an id */
    pllm_record_free(&rec);
}

static void test_records(void)
{
    pllm_request_params d;
    pllm_request_params_defaults(&d);
    d.max_tokens = 99;
    pllm_record rec;
    const char *ok = "{\"id\": \"q1\", \"prompt\": \"Hi\", \"temperature\": 0.5, \"stop\": [\"\\n\", \"END\"], \"max_tokens\": 8.0, \"seed\": 12345678901234}";
    CHECK_OK(pllm_record_parse(&rec, ok, strlen(ok), 3, &d));
    CHECK(json_is_string(rec.id) && strcmp(json_string_value(rec.id), "q1") == 0);
    CHECK(rec.prompt && strcmp(rec.prompt, "Hi") == 0);
    CHECK(rec.params.max_tokens == 8 && rec.params.sampling.temperature == 0.5f && rec.params.n_stop == 2);
    CHECK(rec.params.has_seed && rec.params.sampling.seed == 12345678901234ull);
    CHECK(strcmp(rec.params.stop[1], "END") == 0);
    pllm_record_free(&rec);

    const char *msgs = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"2+2?\"}]}";
    CHECK_OK(pllm_record_parse(&rec, msgs, strlen(msgs), 7, &d));
    CHECK(json_integer_value(rec.id) == 7 && rec.n_messages == 2 && strcmp(rec.messages[1].content, "2+2?") == 0);
    CHECK(rec.params.max_tokens == 99);
    pllm_record_free(&rec);

    expect_record_error("{\"prompt\": \"x\"", "invalid JSON", NULL);
    expect_record_error("[1, 2]", "JSON object", NULL);
    expect_record_error("{\"id\": 1}", "missing field 'prompt'", NULL);
    expect_record_error("{\"prompt\": 5}", "'prompt'", "string");
    expect_record_error("{\"prompt\": \"\"}", "'prompt'", "empty");
    expect_record_error("{\"prompt\": \"a\", \"messages\": []}", "not both", NULL);
    expect_record_error("{\"messages\": []}", "'messages'", "empty");
    expect_record_error("{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content", "missing");
    expect_record_error("{\"messages\": [{\"role\": 3, \"content\": \"x\"}]}", "messages[0].role", NULL);
    expect_record_error("{\"prompt\": \"a\", \"temprature\": 0.2}", "unknown field 'temprature'", NULL);
    expect_record_error("{\"prompt\": \"a\", \"max_tokens\": \"9\"}", "'max_tokens'", "integer");
    expect_record_error("{\"prompt\": \"a\", \"max_tokens\": 0}", "'max_tokens'", "range");
    expect_record_error("{\"prompt\": \"a\", \"max_tokens\": 2.5}", "'max_tokens'", "integer");
    expect_record_error("{\"prompt\": \"a\", \"temperature\": \"hot\"}", "'temperature'", "number");
    expect_record_error("{\"prompt\": \"a\", \"temperature\": -1}", "temperature", NULL);
    expect_record_error("{\"prompt\": \"a\", \"top_p\": 1.5}", "top_p", NULL);
    expect_record_error("{\"prompt\": \"a\", \"stop\": 3}", "'stop'", NULL);
    expect_record_error("{\"prompt\": \"a\", \"ignore_eos\": 1}", "'ignore_eos'", NULL);
    expect_record_error("{\"prompt\": \"a\", \"id\": [1]}", "'id'", NULL);
    expect_record_error("{\"prompt\": \"a\", \"prompt\": \"b\"}", "invalid JSON", "duplicate");

    char *s = NULL;
    json_t *id = json_string("x\"y");
    CHECK_OK(pllm_output_error(&s, id, 5, "line 5: bad \"thing\""));
    json_t *o = json_loads(s, 0, NULL);
    CHECK(o && strcmp(json_string_value(json_object_get(o, "id")), "x\"y") == 0);
    CHECK(o && strcmp(json_string_value(json_object_get(o, "finish_reason")), "error") == 0);
    CHECK(o && json_integer_value(json_object_get(o, "line")) == 5);
    json_decref(o);
    free(s);

    pllm_completion c = {.finish = PLLM_FINISH_STOP, .text = "ok \xff\xfe tail", .text_len = 10, .prompt_tokens = 3,
                         .n_tokens = 2, .token_ids = (const int32_t[]){5, 6}, .t_arrival = 1.0, .t_first_token = 1.5,
                         .t_finish = 2.0};
    pllm_output_opts oo = {.echo_prompt = true, .token_ids = true};
    CHECK_OK(pllm_output_completion(&s, id, "the prompt", 1, &c, &oo));
    o = json_loads(s, 0, NULL);
    CHECK(o != NULL); /* invalid UTF-8 in text still gives valid JSON */
    CHECK(o && strcmp(json_string_value(json_object_get(o, "text")), "ok \xef\xbf\xbd\xef\xbf\xbd tail") == 0);
    CHECK(o && json_array_size(json_object_get(o, "token_ids")) == 2);
    CHECK(o && json_real_value(json_object_get(o, "ttft_ms")) == 500.0);
    CHECK(o && json_object_get(o, "index") == NULL);
    json_decref(o);
    free(s);
    json_decref(id);
}

static void test_idset_resume(void)
{
    const char *path = tmp_path("out.jsonl");
    FILE *f = fopen(path, "wb");
    fputs("{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": 2, \"text\": \"y\"}\n{\"id\": \"a\", \"index\": 1}\n{\"id\": \"c\", \"te", f);
    fclose(f);
    pllm_idset *s;
    CHECK_OK(pllm_idset_create(&s));
    int64_t n;
    bool torn;
    CHECK_OK(pllm_idset_load_output(s, path, &n, &torn));
    CHECK(n == 3 && torn);
    CHECK(pllm_idset_count(s, "a") == 2 && pllm_idset_count(s, "2") == 1 && pllm_idset_count(s, "c") == 0);
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
    CHECK(pllm_idset_size(s) == 5002 && pllm_idset_count(s, "k4999") == 1 && pllm_idset_count(s, "k5000") == 0);
    pllm_idset_free(s);
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
    test_idset_resume();
    return pllm_test_finish("datasets_unit");
}

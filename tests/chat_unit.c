/*
 * chat_unit: the chat template interpreter's error reporting, limits and robustness.
 *   - error messages name the construct and the template line (unknown filter/test,
 *     unterminated tags and blocks, unsupported tags, runtime type errors) and surface the
 *     raise_exception message;
 *   - every limit (loop iterations, macro depth, output size, memory, nesting) fails cleanly;
 *   - fuzz: random bytes, random token soup and mutations of real templates must parse and
 *     render to OK or an error with a message, never crash, leak (run it under the ASan
 *     preset) or hang;
 *   - a parsed template renders identically from several threads at once.
 * Output parity with Python jinja2 is tests/chat_parity.py.
 */
#include "tokenizer/chat_template.h"
#include "tests/testutil.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

static const pllm_chat_msg k_msgs[] = {
    {"system", "You are helpful."},
    {"user", "Hello \"there\" {{ braces }} é🚀"},
    {"assistant", "Hi!\nHow can I help?"},
    {"user", "Tell me a joke."},
};

static pllm_chat_render_params default_params(void)
{
    pllm_chat_render_params p = {
        .messages = k_msgs,
        .n_messages = PLLM_ARRAY_LEN(k_msgs),
        .add_generation_prompt = true,
        .bos_token = "<s>",
        .eos_token = "</s>",
    };
    return p;
}

/* Parse and render; returns the status and leaves the text (or "") in *out. */
static pllm_status render(const char *src, const pllm_chat_render_params *p, pllm_buf *out)
{
    pllm_chat_template *t = NULL;
    out->n = 0;
    if (out->s) out->s[0] = 0;
    pllm_status st = pllm_chat_template_parse(&t, src, strlen(src), "tpl");
    if (st == PLLM_OK) st = pllm_chat_template_render(t, p, out);
    pllm_chat_template_free(t);
    return st;
}

/* Expect failure with status st (or any error when st is PLLM_OK) and a message containing each
 * of the given fragments. */
static void expect_error(const char *src, const pllm_chat_render_params *p, pllm_status want,
                         const char *frag1, const char *frag2, int line)
{
    pllm_buf out = {0};
    pllm_status st = render(src, p, &out);
    const char *msg = pllm_errmsg();
    bool ok = st != PLLM_OK && (want == PLLM_OK || st == want) && (!frag1 || strstr(msg, frag1)) &&
              (!frag2 || strstr(msg, frag2));
    if (!ok) {
        fprintf(
            stderr,
            "chat_unit.c:%d: template %.60s: got status %s message '%s' (want %s, '%s', '%s')\n",
            line, src, pllm_status_str(st), st == PLLM_OK ? "" : msg, pllm_status_str(want),
            frag1 ? frag1 : "", frag2 ? frag2 : "");
        pllm_test_failures++;
    }
    pllm_buf_free(&out);
}
#define EXPECT_ERROR(src, p, st, f1, f2) expect_error((src), (p), (st), (f1), (f2), __LINE__)

static void expect_text(const char *src, const pllm_chat_render_params *p, const char *want,
                        int line)
{
    pllm_buf out = {0};
    pllm_status st = render(src, p, &out);
    if (st != PLLM_OK || strcmp(out.s ? out.s : "", want) != 0) {
        fprintf(stderr, "chat_unit.c:%d: template %.60s: got %s '%s' want '%s'\n", line, src,
                pllm_status_str(st), st == PLLM_OK ? (out.s ? out.s : "") : pllm_errmsg(), want);
        pllm_test_failures++;
    }
    pllm_buf_free(&out);
}
#define EXPECT_TEXT(src, p, want) expect_text((src), (p), (want), __LINE__)

static void test_errors(void)
{
    pllm_chat_render_params p = default_params();
    /* unknown filter / test: named, with the line, at parse time */
    EXPECT_ERROR("line one\n{% for m in messages %}\n{{ m.content|nosuchfilter }}\n{% endfor %}",
                 &p, PLLM_ERR_FORMAT, "nosuchfilter", "tpl:3:");
    EXPECT_ERROR("{{ 1 }}\n\n{{ x is nosuchtest }}", &p, PLLM_ERR_FORMAT, "nosuchtest", "tpl:3:");
    /* ... but inside an if, jinja2 only fails when it is evaluated */
    EXPECT_TEXT("{% if false %}{{ x|nosuchfilter }}{% endif %}ok", &p, "ok");
    EXPECT_ERROR("{% if true %}\n{{ x|nosuchfilter }}{% endif %}", &p, PLLM_ERR_INVALID,
                 "nosuchfilter", "tpl:2:");
    /* unterminated tags, comments, blocks, strings */
    EXPECT_ERROR("abc\n{% if x", &p, PLLM_ERR_FORMAT, "unterminated", "tpl:2:");
    EXPECT_ERROR("{{ messages", &p, PLLM_ERR_FORMAT, "unterminated", "tpl:1:");
    EXPECT_ERROR("{# comment", &p, PLLM_ERR_FORMAT, "comment", "tpl:1:");
    EXPECT_ERROR("{% if true %}\nno endif", &p, PLLM_ERR_FORMAT, "endif", NULL);
    EXPECT_ERROR("{% for m in messages %}{% if x %}{% endfor %}", &p, PLLM_ERR_FORMAT, NULL,
                 "tpl:1:");
    EXPECT_ERROR("{% raw %}no end", &p, PLLM_ERR_FORMAT, "raw", NULL);
    EXPECT_ERROR("{{ 'unterminated }}", &p, PLLM_ERR_FORMAT, "string", NULL);
    EXPECT_ERROR("{% endfor %}", &p, PLLM_ERR_FORMAT, "endfor", NULL);
    EXPECT_ERROR("{{ (1 }}", &p, PLLM_ERR_FORMAT, NULL, NULL);
    EXPECT_ERROR("{% break %}", &p, PLLM_ERR_FORMAT, "break", NULL);
    /* raise_exception surfaces its message and the line */
    EXPECT_ERROR("{% for m in messages %}\n{% if m.role == 'assistant' %}{{ raise_exception('Bad "
                 "role: ' ~ m.role) }}"
                 "{% endif %}{% endfor %}",
                 &p, PLLM_ERR_INVALID, "raise_exception: Bad role: assistant", "tpl:2:");
    /* constructs outside the subset are named */
    EXPECT_ERROR("\n{% include 'other.jinja' %}", &p, PLLM_ERR_UNSUPPORTED, "include", "tpl:2:");
    EXPECT_ERROR("{% macro m() %}{{ varargs }}{% endmacro %}", &p, PLLM_ERR_UNSUPPORTED, "varargs",
                 NULL);
    EXPECT_ERROR("{{ 'a b'|wordcount }}", &p, PLLM_ERR_UNSUPPORTED, "wordcount", "tpl:1:");
    EXPECT_ERROR("{{ '%5s' % 1 }}", &p, PLLM_ERR_UNSUPPORTED, "printf", NULL);
    EXPECT_ERROR("{{ '{:>5}'.format(1) }}", &p, PLLM_ERR_UNSUPPORTED, "format spec", NULL);
    EXPECT_ERROR("{{ messages|map('upper') }}", &p, PLLM_ERR_UNSUPPORTED, "generator", NULL);
    EXPECT_ERROR("{{ 9223372036854775807 + 1 }}", &p, PLLM_ERR_UNSUPPORTED, "overflow", NULL);
    EXPECT_ERROR("{{ é }}", &p, PLLM_ERR_UNSUPPORTED, "non-ASCII", NULL);
    /* runtime errors jinja2 raises too */
    EXPECT_ERROR("\n\n{{ messages[0].content + 1 }}", &p, PLLM_ERR_INVALID,
                 "can only concatenate str", "tpl:3:");
    EXPECT_ERROR("{{ missing.attr }}", &p, PLLM_ERR_INVALID, "'missing' is undefined", NULL);
    EXPECT_ERROR("{{ 1 // 0 }}", &p, PLLM_ERR_INVALID, "ZeroDivisionError", NULL);
    /* invalid UTF-8: in the template and in a message */
    EXPECT_ERROR("abc\xff", &p, PLLM_ERR_FORMAT, "UTF-8", NULL);
    pllm_chat_msg bad[] = {{"user", "ok"}, {"user", "bad \xc3\x28"}};
    pllm_chat_render_params pb = default_params();
    pb.messages = bad;
    pb.n_messages = 2;
    EXPECT_ERROR("{{ messages }}", &pb, PLLM_ERR_INVALID, "message 1", "UTF-8");
}

static void test_semantics(void)
{
    pllm_chat_render_params p = default_params();
    EXPECT_TEXT("{% for m in messages %}{{ m.role[0] }}{% endfor %}", &p, "suau");
    EXPECT_TEXT("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools }}|{{ "
                "documents is none }}",
                &p, "<s>|</s>|True|None|True");
    /* NULL bos: undefined (transformers leaves out a missing special token); NULL content: None */
    pllm_chat_msg m[] = {{"assistant", NULL}};
    pllm_chat_render_params q = default_params();
    q.bos_token = NULL;
    q.messages = m;
    q.n_messages = 1;
    EXPECT_TEXT("[{{ bos_token }}]{{ bos_token is defined }} {{ messages[0].content }} {{ "
                "messages[0].content is none }}",
                &q, "[]False None True");
    /* no messages */
    q.n_messages = 0;
    EXPECT_TEXT("{{ messages|length }}{% for m in messages %}x{% else %}empty{% endfor %}", &q,
                "0empty");
    EXPECT_TEXT("{{ '%s=%d %r' % ('a', 2.5, 'q') }} {{ '{0}/{x}'.format(1, x='y') }} {{ "
                "'%s!'|format('hi') }}",
                &p, "a=2 'q' 1/y hi!");
    /* jinja2's lexer ignores a comment opened at the very end */
    EXPECT_TEXT("x{#", &p, "x");
    /* whitespace control */
    EXPECT_TEXT("a  {%- if true -%}  b  {%- endif -%}  c", &p, "abc");
    EXPECT_TEXT("x\n    {% if true %}\n    y\n    {% endif %}\nz", &p, "x\n    y\nz");
    EXPECT_TEXT("{{ 'é🚀'|length }} {{ 'é🚀'[1] }} {{ 'ΟΔΟΣ'|lower }} {{ 'ß'|upper }}", &p,
                "2 🚀 οδος SS");
    /* a render appends to the caller's buffer and leaves it alone on error */
    pllm_chat_template *t = NULL;
    CHECK_OK(pllm_chat_template_parse(&t, "{{ 'x' }}", 9, NULL));
    pllm_buf out = {0};
    CHECK_OK(pllm_buf_append(&out, "pre:", 4));
    CHECK_OK(pllm_chat_template_render(t, &p, &out));
    CHECK(out.n == 5 && memcmp(out.s, "pre:x", 5) == 0);
    pllm_chat_template_free(t);
    CHECK_OK(pllm_chat_template_parse(&t, "{{ 'y' }}{{ 1/0 }}", 18, NULL));
    CHECK(pllm_chat_template_render(t, &p, &out) == PLLM_ERR_INVALID);
    CHECK(out.n == 5);
    pllm_chat_template_free(t);
    pllm_buf_free(&out);
    pllm_chat_template_free(NULL);
}

static void test_limits(void)
{
    pllm_chat_render_params p = default_params();
    /* The step budget bounds the work, whatever the template asks for (10^10 iterations here):
     * the time to trip it grows with the budget, not the template. Measured without a clock
     * limit: a budget 8x as large takes ~8x as long (the best of three of each, interleaved, in
     * this thread's CPU time);
     * the bound (24x) holds on a loaded machine, where a fixed number of seconds does not. */
    static const char *nested =
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}";
    double t_small = 1e30, t_big = 1e30;
    for (int k = 0; k < 3; k++) {
        p.max_steps = 100000;
        double t0 = pllm_test_thread_cpu();
        EXPECT_ERROR(nested, &p, PLLM_ERR_RANGE, "loop iterations", NULL);
        t_small = fmin(t_small, pllm_test_thread_cpu() - t0);
        p.max_steps = 800000;
        t0 = pllm_test_thread_cpu();
        EXPECT_ERROR(nested, &p, PLLM_ERR_RANGE, "loop iterations", NULL);
        t_big = fmin(t_big, pllm_test_thread_cpu() - t0);
    }
    fprintf(stderr, "limits: a step budget 8x as large trips in x%.1f the time (%.2f -> %.2f ms)\n",
            t_big / fmax(t_small, 1e-9), t_small * 1e3, t_big * 1e3);
    CHECK(t_big < 24 * fmax(t_small, 1e-6));
    p.max_steps = 100000;
    EXPECT_ERROR("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", &p, PLLM_ERR_RANGE,
                 "nested deeper", NULL);
    p.max_output_bytes = 1 << 20;
    EXPECT_ERROR("{% for a in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", &p, PLLM_ERR_RANGE,
                 "limit", NULL);
    EXPECT_ERROR("{{ 'x' * 1000000000 }}", &p, PLLM_ERR_RANGE, "limit", NULL);
    EXPECT_ERROR("{{ [1] * 1000000000 }}", &p, PLLM_ERR_RANGE, "limit", NULL);
    p.max_output_bytes = 0; /* default */
    p.max_memory_bytes = 32 << 20;
    EXPECT_ERROR("{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ "
                 "'xxxxxxxxxx' %}"
                 "{% endfor %}",
                 &p, PLLM_ERR_NOMEM, "memory budget", NULL);
    EXPECT_ERROR("{{ range(1000000)|list }}", &p, PLLM_ERR_INVALID, "MAX_RANGE", NULL);
    /* values nested by a loop: repr, ==, hashing and generator chains stop at a depth limit */
    p.max_steps = 0;
    EXPECT_ERROR("{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] "
                 "%}{% endfor %}"
                 "{{ ns.l }}",
                 &p, PLLM_ERR_RANGE, "nested deeper", NULL);
    EXPECT_ERROR("{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] "
                 "%}{% endfor %}"
                 "{{ ns.l == ns.l }}",
                 &p, PLLM_ERR_RANGE, "nested deeper", NULL);
    EXPECT_ERROR("{% set ns = namespace(t=()) %}{% for i in range(5000) %}{% set ns.t = (ns.t,) "
                 "%}{% endfor %}"
                 "{{ {ns.t: 1} }}",
                 &p, PLLM_ERR_RANGE, "nested deeper", NULL);
    EXPECT_ERROR(
        "{% set ns = namespace(g=[1, 2]) %}{% for i in range(5000) %}{% set ns.g = ns.g|select %}"
        "{% endfor %}{{ ns.g|list }}",
        &p, PLLM_ERR_RANGE, "nested deeper", NULL);
    /* quadratic work is charged to the same budget as loop iterations */
    p.max_steps = 1000000;
    EXPECT_ERROR("{{ (range(100000)|list * 10)|unique|list|length }}", &p, PLLM_ERR_RANGE,
                 "work steps", NULL);
    /* nesting deeper than the parser allows fails instead of exhausting the stack */
    size_t depth = 5000;
    char *deep = malloc(depth * 2 + 16);
    size_t k = 0;
    k += (size_t)sprintf(deep, "{{ ");
    for (size_t i = 0; i < depth; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (size_t i = 0; i < depth; i++) deep[k++] = ')';
    k += (size_t)sprintf(deep + k, " }}");
    EXPECT_ERROR(deep, &p, PLLM_ERR_RANGE, "nested too deeply", NULL);
    k = 0;
    for (size_t i = 0; i < 400; i++) k += (size_t)sprintf(deep + k, "{%% if true %%}");
    EXPECT_ERROR(deep, &p, PLLM_ERR_RANGE, "nested too deeply", NULL);
    k = 0;
    for (size_t i = 0; i < 3000; i++) k += (size_t)sprintf(deep + k, "-");
    sprintf(deep + k, "1");
    char *wrapped = malloc(strlen(deep) + 16);
    sprintf(wrapped, "{{ %s }}", deep);
    EXPECT_ERROR(wrapped, &p, PLLM_ERR_RANGE, "nested too deeply", NULL);
    free(wrapped);
    free(deep);
    fprintf(stderr, "limits: all tripped cleanly\n");
}

/* ---------------------------------------------------------------- fuzz */

typedef struct fuzz_stats {
    size_t n, parsed, rendered;
} fuzz_stats;

static void fuzz_one(const char *src, size_t len, fuzz_stats *fs)
{
    pllm_chat_render_params p = default_params();
    p.max_steps = 20000;
    p.max_output_bytes = 1 << 16;
    p.max_memory_bytes = 16 << 20;
    pllm_chat_template *t = NULL;
    fs->n++;
    pllm_error_clear();
    pllm_status st = pllm_chat_template_parse(&t, src, len, "fuzz");
    if (st != PLLM_OK) {
        CHECK(t == NULL);
        CHECK(pllm_errmsg()[0] != 0);
        return;
    }
    fs->parsed++;
    pllm_buf out = {0};
    pllm_error_clear();
    st = pllm_chat_template_render(t, &p, &out);
    if (st == PLLM_OK)
        fs->rendered++;
    else
        CHECK(pllm_errmsg()[0] != 0);
    CHECK(out.n <= (1 << 16));
    pllm_buf_free(&out);
    pllm_chat_template_free(t);
}

static const char *const k_frags[] = {
    "{{ ",
    " }}",
    "{%- ",
    " -%}",
    "{% ",
    " %}",
    "{#",
    "#}",
    "{{- ",
    "{%+ ",
    " +%}",
    "for ",
    "m ",
    "in ",
    "messages",
    "endfor",
    "if ",
    "elif ",
    "else",
    "endif",
    "set ",
    "x ",
    "= ",
    "ns.x",
    "namespace(x=1)",
    "macro ",
    "f(a, b=2)",
    "endmacro",
    "f(1)",
    "|length",
    "|trim",
    "|tojson",
    "|join(', ')",
    "|map(attribute='role')",
    "|list",
    "|default('d')",
    "|selectattr('role', 'eq', 'user')",
    "|sort",
    "|unique",
    "|batch(2)",
    "|indent(2)",
    "|replace('a', 'b')",
    " is defined",
    " is none",
    " is string",
    " is divisibleby 2",
    ".strip()",
    ".split()",
    ".upper()",
    ".items()",
    ".get('k')",
    "[0]",
    "[-1]",
    "[1:]",
    "[::-1]",
    "['role']",
    ".role",
    ".content",
    "loop.index",
    "loop.last",
    "loop.cycle(1, 2)",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    " + ",
    " - ",
    " * ",
    " / ",
    " // ",
    " % ",
    " ** ",
    " ~ ",
    " == ",
    " != ",
    " < ",
    " and ",
    " or ",
    "not ",
    " if ",
    " else ",
    "'str'",
    "\"dq\"",
    "'é🚀'",
    "1",
    "0",
    "-2",
    "2.5",
    "1e3",
    "none",
    "true",
    "false",
    "range(3)",
    "range(100000)",
    "raise_exception('boom')",
    "break",
    "continue",
    "raw",
    "endraw",
    "with ",
    "endwith",
    "filter upper",
    "endfilter",
    "\n",
    "  ",
    "\t",
    "text",
    "{",
    "}",
    "%",
    "#",
    "\\",
    "'",
    "set blk",
    "endset",
    "generation",
    "endgeneration",
    "print ",
    "dict(a=1)",
    "strftime_now('%Y')",
    "\xe3\x80\x80",
};

static void test_fuzz(void)
{
    const char *seed_env = getenv("PLLM_CHAT_SEED");
    uint64_t rng = seed_env ? strtoull(seed_env, NULL, 10)
                            : 0x9e3779b97f4a7c15ULL ^ (uint64_t)(pllm_now() * 1e6);
    fprintf(stderr, "fuzz seed %llu (PLLM_CHAT_SEED replays it)\n", (unsigned long long)rng);
    fuzz_stats bytes = {0}, soup = {0}, mut = {0};
    char buf[2048];
    double t0 = pllm_now();
    /* random bytes, biased toward Jinja's punctuation */
    static const char alphabet[] = "{}%#-+ \n\t'\"()[]|.,:=~<>!*/abcmx019_\\";
    for (int it = 0; it < 20000; it++) {
        size_t n = pllm_test_rand(&rng) % 120;
        for (size_t i = 0; i < n; i++) {
            uint64_t r = pllm_test_rand(&rng);
            buf[i] = (r & 7) == 0 ? (char)(r >> 8) : alphabet[(r >> 8) % (sizeof alphabet - 1)];
        }
        fuzz_one(buf, n, &bytes);
    }
    /* token soup */
    for (int it = 0; it < 20000; it++) {
        size_t n = 0, parts = 1 + pllm_test_rand(&rng) % 40;
        for (size_t k = 0; k < parts; k++) {
            const char *f = k_frags[pllm_test_rand(&rng) % PLLM_ARRAY_LEN(k_frags)];
            size_t l = strlen(f);
            if (n + l >= sizeof buf) break;
            memcpy(buf + n, f, l);
            n += l;
        }
        fuzz_one(buf, n, &soup);
    }
    /* mutations of the real templates (when the shared data is here) */
    const char *data = getenv("PLLM_SHARED_DATA");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tokenizers/chat-templates/ollama-index-extracted",
             data ? data : "");
    DIR *d = data ? opendir(dir) : NULL;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (!strstr(e->d_name, ".jinja")) continue;
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            FILE *f = fopen(path, "rb");
            if (!f) continue;
            char src[16384];
            size_t len = fread(src, 1, sizeof src - 1, f);
            fclose(f);
            fuzz_one(src, len, &mut); /* the original */
            for (int it = 0; it < 150; it++) {
                char m[16384 + 64];
                size_t n = len;
                memcpy(m, src, len);
                int edits = 1 + (int)(pllm_test_rand(&rng) % 4);
                for (int k = 0; k < edits && n > 0; k++) {
                    size_t at = pllm_test_rand(&rng) % n;
                    uint64_t r = pllm_test_rand(&rng);
                    if (r % 3 == 0) {
                        memmove(m + at, m + at + 1, n - at - 1); /* delete */
                        n--;
                    } else if (r % 3 == 1 && n < sizeof m - 1) {
                        memmove(m + at + 1, m + at, n - at); /* insert */
                        m[at] = alphabet[(r >> 8) % (sizeof alphabet - 1)];
                        n++;
                    } else {
                        m[at] = alphabet[(r >> 8) % (sizeof alphabet - 1)]; /* replace */
                    }
                }
                fuzz_one(m, n, &mut);
            }
        }
        closedir(d);
    }
    double dt = pllm_now() - t0;
    fprintf(stderr,
            "fuzz: random bytes %zu (%zu parsed, %zu rendered), token soup %zu (%zu parsed, %zu "
            "rendered), "
            "mutated real templates %zu (%zu parsed, %zu rendered) in %.2f s\n",
            bytes.n, bytes.parsed, bytes.rendered, soup.n, soup.parsed, soup.rendered, mut.n,
            mut.parsed, mut.rendered, dt);
    CHECK(soup.rendered > 100); /* the soup must reach the evaluator, not only the parser */
    if (d) CHECK(mut.rendered > 100);
}

/* ---------------------------------------------------------------- threads */

typedef struct thread_arg {
    const pllm_chat_template *t;
    const char *want;
    int bad;
} thread_arg;

static void *render_many(void *arg)
{
    thread_arg *a = arg;
    pllm_chat_render_params p = default_params();
    for (int i = 0; i < 200; i++) {
        pllm_buf out = {0};
        if (pllm_chat_template_render(a->t, &p, &out) != PLLM_OK || strcmp(out.s, a->want) != 0)
            a->bad++;
        pllm_buf_free(&out);
    }
    return NULL;
}

static void test_threads(void)
{
    const char *src =
        "{%- set ns = namespace(n=0) -%}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "<|{{ m.role }}|>{{ m.content|trim|tojson }}{{ loop.index }}/{{ ns.n }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}";
    pllm_chat_template *t = NULL;
    CHECK_OK(pllm_chat_template_parse(&t, src, strlen(src), "threads"));
    if (!t) return;
    pllm_chat_render_params p = default_params();
    pllm_buf want = {0};
    CHECK_OK(pllm_chat_template_render(t, &p, &want));
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){.t = t, .want = want.s};
        pthread_create(&th[i], NULL, render_many, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].bad == 0);
    }
    pllm_buf_free(&want);
    pllm_chat_template_free(t);
}

int main(void)
{
    test_errors();
    test_semantics();
    test_limits();
    test_fuzz();
    test_threads();
    return pllm_test_finish("chat_unit");
}

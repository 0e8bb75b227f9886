/*
 * tok_unit: tokenizer unit tests on small synthetic GGUF images (no model file needed).
 *
 * Covers: every metadata validation error (status and the key named in the message), BPE
 * merge order (rank, then leftmost; the short-piece and the heap path agree), verbatim token
 * matching (longest first; control tokens only with parse_special; user-defined always),
 * BOS/EOS, invalid UTF-8 input, decoding and the incremental detokenizer across split UTF-8
 * characters, stop ids, find and is_special.
 */
#include "model/gguf.h"
#include "tests/testutil.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h" /* pre-tokenizer internals: tested directly below */

#include <stdarg.h>
#include <string.h>

/* ---- a minimal GGUF v3 writer (metadata only) ---- */

typedef struct gw {
    pllm_buf b;
    uint64_t n_kv;
} gw;

enum { T_U32 = 4, T_I32 = 5, T_BOOL = 7, T_STR = 8, T_ARR = 9 };

static void put(gw *w, const void *p, size_t n)
{
    PLLM_ASSERT(pllm_buf_append(&w->b, p, n) == PLLM_OK);
}
static void put_u32(gw *w, uint32_t v)
{
    put(w, &v, 4);
}
static void put_u64(gw *w, uint64_t v)
{
    put(w, &v, 8);
}
static void put_str(gw *w, const char *s, size_t n)
{
    put_u64(w, n);
    put(w, s, n);
}
static void key(gw *w, const char *k, uint32_t type)
{
    put_str(w, k, strlen(k));
    put_u32(w, type);
    w->n_kv++;
}
static void kv_str(gw *w, const char *k, const char *v)
{
    key(w, k, T_STR);
    put_str(w, v, strlen(v));
}
static void kv_u32(gw *w, const char *k, uint32_t v)
{
    key(w, k, T_U32);
    put_u32(w, v);
}
static void kv_bool(gw *w, const char *k, bool v)
{
    key(w, k, T_BOOL);
    uint8_t b = v;
    put(w, &b, 1);
}
static void kv_arr_str(gw *w, const char *k, const char *const *v, const size_t *lens, size_t n)
{
    key(w, k, T_ARR);
    put_u32(w, T_STR);
    put_u64(w, n);
    for (size_t i = 0; i < n; i++) put_str(w, v[i], lens ? lens[i] : strlen(v[i]));
}
static void kv_arr_i32(gw *w, const char *k, const int32_t *v, size_t n)
{
    key(w, k, T_ARR);
    put_u32(w, T_I32);
    put_u64(w, n);
    put(w, v, n * 4);
}

/* The finished image: header then the key/values written so far. */
static pllm_buf gw_image(const gw *w)
{
    pllm_buf img = {0};
    PLLM_ASSERT(pllm_buf_append(&img, "GGUF", 4) == PLLM_OK);
    uint32_t ver = 3;
    uint64_t nt = 0, nkv = w->n_kv;
    PLLM_ASSERT(pllm_buf_append(&img, &ver, 4) == PLLM_OK);
    PLLM_ASSERT(pllm_buf_append(&img, &nt, 8) == PLLM_OK);
    PLLM_ASSERT(pllm_buf_append(&img, &nkv, 8) == PLLM_OK);
    PLLM_ASSERT(pllm_buf_append(&img, w->b.s, w->b.n) == PLLM_OK);
    return img;
}

/* ---- the synthetic vocabulary ---- */

/* GPT-2's bytes_to_unicode, written out as the original algorithm (independent of pllm's
 * closed form): printable bytes keep their code point, the rest get 256, 257, ... in order. */
static uint32_t gpt2_cp(int b)
{
    int n = 0;
    for (int x = 0; x < 256; x++) {
        bool printable =
            (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
        if (x == b) return printable ? (uint32_t)x : 256u + (uint32_t)n;
        if (!printable) n++;
    }
    return 0;
}

static size_t put_cp(char *o, uint32_t cp)
{
    if (cp < 0x80) return o[0] = (char)cp, 1;
    o[0] = (char)(0xC0 | cp >> 6);
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

#define MAXV 400
typedef struct vocab {
    char text[MAXV][32];
    int32_t type[MAXV];
    int n;
    const char *merges[64];
    int n_merges;
} vocab;

static int add_tok(vocab *v, const char *s, int32_t type)
{
    snprintf(v->text[v->n], sizeof v->text[0], "%s", s);
    v->type[v->n] = type;
    return v->n++;
}

/* 256 byte tokens, then merged tokens, then specials. Ids: byte b has id b. */
static void base_vocab(vocab *v)
{
    memset(v, 0, sizeof *v);
    for (int b = 0; b < 256; b++) {
        char s[4] = {0};
        put_cp(s, gpt2_cp(b));
        add_tok(v, s, 1);
    }
    static const char *merged[] = {"he", "ll",   "hell",   "hello", "aa", "aaaa",
                                   "Ġw", "Ġwor", "Ġworld", "or",    "ld"};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(merged); i++) add_tok(v, merged[i], 1);
    static const char *merges[] = {"h e", "l l", "he ll", "hell o", "a a",    "aa aa",
                                   "Ġ w", "o r", "Ġw or", "l d",    "Ġwor ld"};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(merges); i++) v->merges[v->n_merges++] = merges[i];
    add_tok(v, "<|endoftext|>", 3);
    add_tok(v, "<|im_start|>", 3);
    add_tok(v, "<|im_end|>", 3);
    add_tok(v, "<s>", 3);
    add_tok(v, "<s>x", 3);
    add_tok(v, "<tool>", 4);
    add_tok(v, "</s>", 1); /* a normal token: never a stop id */
}

static int find_tok(const vocab *v, const char *s)
{
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->text[i], s) == 0) return i;
    return -1;
}

/* What to break in the metadata. */
typedef struct mods {
    const char *model;   /* NULL: "gpt2"; "" : omit the key */
    const char *pre;     /* NULL: "smollm"; "" : omit */
    int types_len_delta; /* token_type array length change */
    bool omit_types, omit_merges, tokens_as_ints, add_bos, add_eos, omit_bos;
    uint32_t bos;            /* 0: default */
    int32_t bad_type;        /* != 0: token 5 gets this type */
    const char *extra_merge; /* appended to merges */
    bool empty_token, bad_utf8_token;
} mods;

static pllm_status build(pllm_tokenizer **out, const vocab *v, const mods *m, pllm_buf *img)
{
    gw w = {0};
    const char *model = m->model ? m->model : "gpt2";
    if (*model) kv_str(&w, "tokenizer.ggml.model", model);
    const char *pre = m->pre ? m->pre : "smollm";
    if (*pre) kv_str(&w, "tokenizer.ggml.pre", pre);
    const char *texts[MAXV];
    size_t lens[MAXV];
    for (int i = 0; i < v->n; i++) texts[i] = v->text[i], lens[i] = strlen(v->text[i]);
    if (m->empty_token) lens[260] = 0;
    if (m->bad_utf8_token) texts[260] = "\xC3(", lens[260] = 2;
    if (m->tokens_as_ints)
        kv_arr_i32(&w, "tokenizer.ggml.tokens", v->type, (size_t)v->n);
    else
        kv_arr_str(&w, "tokenizer.ggml.tokens", texts, lens, (size_t)v->n);
    int32_t types[MAXV];
    memcpy(types, v->type, sizeof types);
    if (m->bad_type) types[5] = m->bad_type;
    if (!m->omit_types)
        kv_arr_i32(&w, "tokenizer.ggml.token_type", types, (size_t)(v->n + m->types_len_delta));
    const char *merges[70];
    int nm = v->n_merges;
    memcpy(merges, v->merges, (size_t)nm * sizeof *merges);
    if (m->extra_merge) merges[nm++] = m->extra_merge;
    if (!m->omit_merges) kv_arr_str(&w, "tokenizer.ggml.merges", merges, NULL, (size_t)nm);
    if (!m->omit_bos)
        kv_u32(&w, "tokenizer.ggml.bos_token_id",
               m->bos ? m->bos : (uint32_t)find_tok(v, "<|im_start|>"));
    kv_u32(&w, "tokenizer.ggml.eos_token_id", (uint32_t)find_tok(v, "<|im_end|>"));
    kv_u32(&w, "tokenizer.ggml.unknown_token_id", (uint32_t)find_tok(v, "<|endoftext|>"));
    kv_bool(&w, "tokenizer.ggml.add_bos_token", m->add_bos);
    if (m->add_eos) kv_bool(&w, "tokenizer.ggml.add_eos_token", true);
    *img = gw_image(&w);
    pllm_buf_free(&w.b);
    pllm_gguf *g = NULL;
    pllm_status st = pllm_gguf_parse(&g, img->s, img->n, "synthetic.gguf");
    if (st == PLLM_OK) st = pllm_tokenizer_from_gguf(out, g);
    pllm_gguf_close(g);
    return st;
}

static void expect_error(const vocab *v, const mods *m, pllm_status want, const char *msg_part,
                         const char *what)
{
    pllm_tokenizer *t = NULL;
    pllm_buf img = {0};
    pllm_status st = build(&t, v, m, &img);
    bool ok = st == want && strstr(pllm_errmsg(), msg_part) != NULL && t == NULL;
    if (!ok)
        fprintf(stderr, "FAIL %s: got %s \"%s\", want %s containing \"%s\"\n", what,
                pllm_status_str(st), pllm_errmsg(), pllm_status_str(want), msg_part);
    else
        fprintf(stderr, "ok   %s: %s\n", what, pllm_errmsg());
    CHECK(ok);
    pllm_tokenizer_free(t);
    pllm_buf_free(&img);
}

static void test_errors(void)
{
    vocab v;
    base_vocab(&v);
    expect_error(&v, &(mods){.model = ""}, PLLM_ERR_NOT_FOUND, "tokenizer.ggml.model",
                 "missing model");
    expect_error(&v, &(mods){.model = "llama"}, PLLM_ERR_NOT_FOUND, "tokenizer.ggml.scores",
                 "llama model without scores");
    expect_error(&v, &(mods){.model = "bert"}, PLLM_ERR_UNSUPPORTED, "\"bert\"", "unknown model");
    expect_error(&v, &(mods){.pre = "klingon"}, PLLM_ERR_UNSUPPORTED,
                 "tokenizer.ggml.pre = \"klingon\"", "unknown pre");
    expect_error(&v, &(mods){.types_len_delta = -1}, PLLM_ERR_FORMAT, "tokenizer.ggml.token_type",
                 "types too short");
    expect_error(&v, &(mods){.types_len_delta = 1}, PLLM_ERR_FORMAT, "tokenizer.ggml.token_type",
                 "types too long");
    expect_error(&v, &(mods){.bad_type = 9}, PLLM_ERR_FORMAT, "tokenizer.ggml.token_type[5] = 9",
                 "bad type value");
    expect_error(&v, &(mods){.tokens_as_ints = true}, PLLM_ERR_FORMAT, "tokenizer.ggml.tokens",
                 "tokens not strings");
    expect_error(&v, &(mods){.omit_merges = true}, PLLM_ERR_NOT_FOUND, "tokenizer.ggml.merges",
                 "missing merges");
    expect_error(&v, &(mods){.bos = 100000}, PLLM_ERR_FORMAT,
                 "tokenizer.ggml.bos_token_id = 100000", "bos range");
    expect_error(&v, &(mods){.extra_merge = "hel lo"}, PLLM_ERR_FORMAT, "tokenizer.ggml.merges[11]",
                 "merge of unknown");
    expect_error(&v, &(mods){.extra_merge = "hello"}, PLLM_ERR_FORMAT, "is not \"left right\"",
                 "merge without space");
    expect_error(&v, &(mods){.extra_merge = "x y"}, PLLM_ERR_FORMAT, "merged token \"xy\"",
                 "merge result missing");
    expect_error(&v, &(mods){.add_bos = true, .omit_bos = true}, PLLM_ERR_FORMAT, "add_bos_token",
                 "add_bos without bos");
    expect_error(&v, &(mods){.empty_token = true}, PLLM_ERR_FORMAT,
                 "tokenizer.ggml.tokens[260] is an empty", "empty token");
    expect_error(&v, &(mods){.bad_utf8_token = true}, PLLM_ERR_FORMAT,
                 "tokenizer.ggml.tokens[260] is not valid UTF-8", "invalid UTF-8 token");
}

/* ---- behaviour ---- */

static bool ids_eq(const pllm_tokens *got, const int32_t *want, size_t n, const char *what)
{
    bool ok = got->n == n && (n == 0 || memcmp(got->ids, want, n * sizeof *want) == 0);
    if (!ok) {
        fprintf(stderr, "FAIL %s: got [", what);
        for (size_t i = 0; i < got->n; i++) fprintf(stderr, "%s%d", i ? " " : "", got->ids[i]);
        fprintf(stderr, "] want [");
        for (size_t i = 0; i < n; i++) fprintf(stderr, "%s%d", i ? " " : "", want[i]);
        fprintf(stderr, "]\n");
    }
    return ok;
}

static void enc(const pllm_tokenizer *t, const char *s, size_t n, bool add, bool parse,
                pllm_tokens *out)
{
    out->n = 0;
    pllm_encode_opts o = {.add_special = add, .parse_special = parse};
    CHECK_OK(pllm_tokenizer_encode(t, s, n, &o, out));
}

#define ENC_EXPECT(t, text, add, parse, ...)                                                       \
    do {                                                                                           \
        int32_t want_[] = {__VA_ARGS__};                                                           \
        enc(t, text, sizeof(text) - 1, add, parse, &toks);                                         \
        CHECK(ids_eq(&toks, want_, PLLM_ARRAY_LEN(want_), text));                                  \
    } while (0)

static void test_behaviour(void)
{
    vocab v;
    base_vocab(&v);
    pllm_tokenizer *t = NULL;
    pllm_buf img = {0};
    CHECK_OK(build(&t, &v, &(mods){0}, &img));
    if (!t) return;
    pllm_tokens toks = {0};
    int hello = find_tok(&v, "hello"), aa = find_tok(&v, "aa"), aaaa = find_tok(&v, "aaaa");
    int world = find_tok(&v, "Ġworld"), ims = find_tok(&v, "<|im_start|>"),
        ime = find_tok(&v, "<|im_end|>");
    int eot = find_tok(&v, "<|endoftext|>"), s_ = find_tok(&v, "<s>"), sx = find_tok(&v, "<s>x");
    int tool = find_tok(&v, "<tool>");

    CHECK(pllm_tokenizer_n_vocab(t) == v.n);
    CHECK(pllm_tokenizer_bos(t) == ims && pllm_tokenizer_eos(t) == ime);
    CHECK(pllm_tokenizer_find(t, "hello") == hello && pllm_tokenizer_find(t, "Ġworld") == world);
    CHECK(pllm_tokenizer_find(t, "nope") == -1 && pllm_tokenizer_find(t, "") == -1);
    CHECK(pllm_tokenizer_is_special(t, ims) && !pllm_tokenizer_is_special(t, tool) &&
          !pllm_tokenizer_is_special(t, hello) && !pllm_tokenizer_is_special(t, -1));
    size_t bl;
    const char *b = pllm_tokenizer_token_bytes(t, find_tok(&v, "Ġw"), &bl);
    CHECK(b && bl == 2 && memcmp(b, " w", 2) == 0);
    CHECK(pllm_tokenizer_token_bytes(t, v.n, &bl) == NULL);
    b = pllm_tokenizer_token_bytes(t, ims, &bl);
    CHECK(b && bl == 12 && memcmp(b, "<|im_start|>", 12) == 0);

    /* stop ids: EOS, and control end-of-turn tokens; "</s>" is a normal token here */
    int32_t ns = 0;
    const int32_t *stop = pllm_tokenizer_stop_ids(t, &ns);
    bool has_ime = false, has_eot = false, has_s = false;
    for (int32_t i = 0; i < ns; i++) {
        has_ime |= stop[i] == ime;
        has_eot |= stop[i] == eot;
        has_s |= stop[i] == find_tok(&v, "</s>");
    }
    CHECK(ns == 2 && has_ime && has_eot && !has_s);

    /* merges: rank order, leftmost first among equal ranks; digits alone (smollm) */
    ENC_EXPECT(t, "hello world", false, true, hello, world);
    ENC_EXPECT(t, "aaaaaaa", false, true, aaaa, aa, 'a');
    ENC_EXPECT(t, "h3llo", false, true, 'h', '3', find_tok(&v, "ll"), 'o');
    enc(t, "", 0, true, true, &toks);
    CHECK(toks.n == 0);
    /* long pieces take the heap path and must merge the same way */
    {
        char big[2004];
        memset(big, 'a', sizeof big);
        for (size_t n = 2000; n <= 2003; n++) {
            enc(t, big, n, false, true, &toks);
            size_t n4 = n / 4, rest = n % 4;
            bool ok = toks.n == n4 + (rest >= 2) + (rest & 1);
            for (size_t i = 0; ok && i < n4; i++) ok = toks.ids[i] == aaaa;
            if (ok && rest >= 2) ok = toks.ids[n4] == aa;
            if (ok && (rest & 1)) ok = toks.ids[toks.n - 1] == 'a';
            CHECK(ok);
        }
    }

    /* verbatim tokens: longest first, control only with parse_special, user-defined always */
    ENC_EXPECT(t, "x<|im_start|>y", false, true, 'x', ims, 'y');
    ENC_EXPECT(t, "<s>x<s>", false, true, sx, s_);
    ENC_EXPECT(t, "<|im_sta", false, true, '<', '|', 'i', 'm', '_', 's', 't', 'a');
    ENC_EXPECT(t, "a<tool>b", false, false, 'a', tool, 'b');
    ENC_EXPECT(t, "<s>", false, false, '<', 's', '>');
    ENC_EXPECT(t, "hello", true, true, hello); /* add_bos_token is false */

    /* invalid UTF-8 encodes as U+FFFD would */
    {
        pllm_tokens ref = {0}, ref3 = {0};
        /* FF is one U+FFFD; ED A0 80 (a UTF-16 surrogate) is three, as in Python */
        enc(t,
            "a\xFF"
            "b\xED\xA0\x80",
            6, false, true, &toks);
        enc(t,
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD",
            14, false, true, &ref3);
        CHECK(toks.n == ref3.n && memcmp(toks.ids, ref3.ids, toks.n * 4) == 0);
        enc(t, "\xF0\x9F\x98", 3, false, true, &toks); /* truncated: one U+FFFD */
        enc(t, "\xEF\xBF\xBD", 3, false, true, &ref);
        CHECK(toks.n == ref.n && memcmp(toks.ids, ref.ids, toks.n * 4) == 0);
        pllm_tokens_free(&ref);
        pllm_tokens_free(&ref3);
    }

    /* decode and the detokenizer: "é" = C3 A9 split across two byte tokens */
    {
        pllm_buf out = {0};
        int32_t ids[] = {0xC3, 0xA9, ims, 'o', 0xC3, 'a', 0xF0, 0x9F, 0x98, 0x80, 0xE2, 0x82};
        CHECK_OK(pllm_tokenizer_decode(t, ids, PLLM_ARRAY_LEN(ids), false, &out));
        const char *want = "\xC3\xA9<|im_start|>o\xEF\xBF\xBD"
                           "a\xF0\x9F\x98\x80\xEF\xBF\xBD";
        CHECK(out.n == strlen(want) && memcmp(out.s, want, out.n) == 0);
        out.n = 0;
        CHECK_OK(pllm_tokenizer_decode(t, ids, PLLM_ARRAY_LEN(ids), true, &out));
        want = "\xC3\xA9o\xEF\xBF\xBD"
               "a\xF0\x9F\x98\x80\xEF\xBF\xBD";
        CHECK(out.n == strlen(want) && memcmp(out.s, want, out.n) == 0);

        /* one at a time: nothing until a character is complete */
        pllm_detok d;
        pllm_detok_init(&d, t, false);
        out.n = 0;
        CHECK_OK(pllm_detok_push(&d, 0xC3, &out));
        CHECK(out.n == 0 && d.n_pending == 1);
        CHECK_OK(pllm_detok_push(&d, 0xA9, &out));
        CHECK(out.n == 2 && memcmp(out.s, "\xC3\xA9", 2) == 0 && d.n_pending == 0);
        out.n = 0;
        CHECK_OK(pllm_detok_push(&d, 0xF0, &out));
        CHECK_OK(pllm_detok_push(&d, 0x9F, &out));
        CHECK_OK(pllm_detok_push(&d, 0x98, &out));
        CHECK(out.n == 0 && d.n_pending == 3);
        CHECK_OK(pllm_detok_push(&d, 0x80, &out));
        CHECK(out.n == 4 && memcmp(out.s, "\xF0\x9F\x98\x80", 4) == 0);
        /* a broken sequence: the held prefix becomes U+FFFD, the breaking byte stays itself */
        out.n = 0;
        CHECK_OK(pllm_detok_push(&d, 0xE2, &out));
        CHECK_OK(pllm_detok_push(&d, 'h', &out));
        CHECK(out.n == 4 && memcmp(out.s, "\xEF\xBF\xBDh", 4) == 0);
        /* held bytes at the end come out as one U+FFFD */
        out.n = 0;
        CHECK_OK(pllm_detok_push(&d, 0xE2, &out));
        CHECK_OK(pllm_detok_push(&d, 0x82, &out));
        CHECK(out.n == 0);
        CHECK_OK(pllm_detok_finish(&d, &out));
        CHECK(out.n == 3 && memcmp(out.s, "\xEF\xBF\xBD", 3) == 0 && d.n_pending == 0);
        /* out-of-range ids are errors */
        CHECK(pllm_detok_push(&d, v.n, &out) == PLLM_ERR_RANGE);
        CHECK(pllm_detok_push(&d, -1, &out) == PLLM_ERR_RANGE);
        int32_t badids[] = {'a', 100000};
        CHECK(pllm_tokenizer_decode(t, badids, 2, false, &out) == PLLM_ERR_RANGE);
        pllm_buf_free(&out);
    }
    pllm_tokenizer_free(t);
    pllm_buf_free(&img);

    /* add_bos / add_eos from the metadata */
    CHECK_OK(build(&t, &v, &(mods){.add_bos = true, .add_eos = true}, &img));
    if (t) {
        ENC_EXPECT(t, "hello", true, true, ims, hello, ime);
        ENC_EXPECT(t, "hello", false, true, hello);
        ENC_EXPECT(t, "", true, true, ims, ime);
        pllm_tokenizer_free(t);
    }
    pllm_buf_free(&img);

    /* a BOS id of 0xFFFFFFFF means none (llama.cpp's reading of -1 stored as u32) */
    t = NULL;
    CHECK_OK(build(&t, &v, &(mods){.bos = UINT32_MAX}, &img));
    CHECK(t && pllm_tokenizer_bos(t) == -1);
    pllm_tokenizer_free(t);
    pllm_buf_free(&img);

    /* the other pre-tokenizers build, and split as their regexes say */
    const char *pres[] = {"gpt2", "llama-bpe", "llama3", "qwen2", "default"};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(pres); i++) {
        t = NULL;
        CHECK_OK(build(&t, &v, &(mods){.pre = pres[i]}, &img));
        if (t) {
            CHECK(strstr(pllm_tokenizer_describe(t),
                         strcmp(pres[i], "llama-bpe") == 0 ? "llama3" : pres[i]) != NULL);
            enc(t, "hello world", 11, false, true, &toks);
            CHECK(toks.n == 2 && toks.ids[0] == hello && toks.ids[1] == world);
            enc(t, "12345", 5, false, true, &toks);
            CHECK(toks.n == 5); /* no digit merges here: 5 byte tokens whatever the split */
            pllm_tokenizer_free(t);
        }
        pllm_buf_free(&img);
    }
    pllm_tokens_free(&toks);
}

/* ---- the pre-tokenizer on its own ---- */

typedef struct pieces {
    pllm_buf cat;
    size_t n;
    size_t longest;
} pieces;

static pllm_status collect(void *ctx, const char *s, size_t n)
{
    pieces *p = ctx;
    p->n++;
    if (n > p->longest) p->longest = n;
    if (n == 0) return pllm_errorf(PLLM_ERR_INTERNAL, "empty piece");
    return pllm_buf_append(&p->cat, s, n);
}

static void test_pretok(void)
{
    /* every pre-tokenizer's pieces cover the input exactly, in order */
    static const char *names[] = {"smollm", "gpt2", "llama3", "qwen2", "default"};
    static const char *frags[] = {
        "a",  "Z",  "7",      " ",         "  ", "\t", "\n", "\r\n", "'s",       "'LL",
        "中", "😀",  "\u00e9", "e\xCC\x81", "<|", "|>", ".",  "!?",   "\xC2\xA0", "\xE2\x80\xA8",
        "$",  "1,5"};
    uint64_t rng = 7;
    for (size_t k = 0; k < PLLM_ARRAY_LEN(names); k++) {
        tok_pretok p;
        CHECK_OK(tok_pretok_init(&p, names[k], strlen(names[k])));
        tok_ws ws = {0};
        int bad = 0;
        for (int trial = 0; trial < 300; trial++) {
            pllm_buf text = {0};
            int nf = 1 + (int)(pllm_test_rand(&rng) % 40);
            for (int f = 0; f < nf; f++) {
                const char *fr = frags[pllm_test_rand(&rng) % PLLM_ARRAY_LEN(frags)];
                CHECK_OK(pllm_buf_append(&text, fr, strlen(fr)));
            }
            pieces pc = {0};
            CHECK_OK(tok_pretok_split(&p, &ws, text.s, text.n, true, collect, &pc));
            if (pc.cat.n != text.n || memcmp(pc.cat.s, text.s, text.n) != 0) bad++;
            pllm_buf_free(&pc.cat);
            pllm_buf_free(&text);
        }
        fprintf(stderr, "pre-tokenizer %s: %d/300 inputs not covered exactly\n", names[k], bad);
        CHECK(bad == 0);
        tok_ws_free(&ws);
        tok_pretok_free(&p);
    }

    /* a regex whose JIT match needs more than PCRE2's default 32 KiB stack (a group with
     * alternatives, repeated 200k times) must still match: the private-stack retry */
    tok_pretok p = {.name = "deep"};
    CHECK_OK(tok_pretok_add_split(&p, "(a|bc)+", 7, false, TOK_SPLIT_ISOLATED, false, "test"));
    size_t n = 200000;
    char *s = malloc(n);
    memset(s, 'a', n);
    tok_ws ws = {0};
    pieces pc = {0};
    CHECK_OK(tok_pretok_split(&p, &ws, s, n, true, collect, &pc));
    fprintf(stderr, "deep regex on %zu bytes: %zu piece(s), longest %zu, private JIT stack %s\n", n,
            pc.n, pc.longest, ws.jstack ? "used" : "not needed");
    CHECK(pc.n == 1 && pc.longest == n);
    pllm_buf_free(&pc.cat);
    tok_ws_free(&ws);
    tok_pretok_free(&p);
    free(s);
}

int main(void)
{
    test_errors();
    test_behaviour();
    test_pretok();
    return pllm_test_finish("tok_unit");
}

/*
 * tok_pretok.c: named pre-tokenizers as lists of regexes, run through PCRE2 (UTF + UCP,
 * JIT when available).
 *
 * A pre-tokenizer is a list of stages. Stage 0 splits the text into the matches of its regex
 * and the gaps between them (Hugging Face's Split with behavior "Isolated", which is also how
 * the ByteLevel pre-tokenizer's regex and the Digits pre-tokenizer split); every piece is then
 * split again by stage 1, and so on. Each piece is its own subject: lookarounds at a piece's
 * end see the end of the subject, exactly as when Hugging Face runs a pre-tokenizer sequence
 * on the pieces of the one before.
 *
 * The regexes are those of the models' tokenizer.json files (HF `tokenizers` runs them with
 * Oniguruma); llama.cpp's per-name lists (llama-vocab.cpp) map GGUF names to them. PCRE2 with
 * PCRE2_UCP gives \s, \p{L}, \p{N} the same Unicode meaning (Unicode 14 here). Known gap:
 * characters assigned after the PCRE2 build's Unicode version are unclassified here.
 */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* GPT-2's pattern as Hugging Face's ByteLevel pre-tokenizer has it (with the final \s+). */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* Digits(individual_digits=True): every numeric character alone. */
#define RE_DIGIT "\\p{N}"
/* Llama-3 (tiktoken cl100k style): case-insensitive contractions, numbers in runs of 1-3. */
#define RE_LLAMA3                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                     \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"                                                               \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen2: as Llama-3 but every digit alone. */
#define RE_QWEN2                                                                                   \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "                          \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"                                                               \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct pretok_def {
    const char *name;       /* canonical name, reported by describe */
    const char *aliases[4]; /* other tokenizer.ggml.pre spellings */
    const char *re[TOK_PRETOK_MAX];
} pretok_def;

static const pretok_def k_pretoks[] = {
    /* SmolLM / SmolLM2: Sequence[Digits(individual_digits), ByteLevel(use_regex)] */
    {"smollm", {NULL}, {RE_DIGIT, RE_GPT2}},
    {"gpt2", {NULL}, {RE_GPT2}},
    {"llama3", {"llama-bpe", NULL}, {RE_LLAMA3}},
    {"qwen2", {NULL}, {RE_QWEN2}},
    /* llama.cpp's fallback for a BPE vocabulary with no (or "default") pre-tokenizer name */
    {"default",
     {NULL},
     {"[\\p{P}\\$\\+<=>\\^~\\|]+",
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", "\\p{N}+",
      "[0-9][0-9][0-9]"}},
};

static bool name_is(const char *want, const char *s, size_t n)
{
    return strlen(want) == n && memcmp(want, s, n) == 0;
}

void tok_pretok_free(tok_pretok *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_re; i++) pcre2_code_free(p->re[i]);
    p->n_re = 0;
}

pllm_status tok_pretok_init(tok_pretok *p, const char *name, size_t name_len)
{
    memset(p, 0, sizeof *p);
    if (!name) name = "default", name_len = strlen(name);
    const pretok_def *def = NULL;
    for (size_t i = 0; i < PLLM_ARRAY_LEN(k_pretoks) && !def; i++) {
        if (name_is(k_pretoks[i].name, name, name_len)) def = &k_pretoks[i];
        for (int a = 0; a < 4 && k_pretoks[i].aliases[a] && !def; a++)
            if (name_is(k_pretoks[i].aliases[a], name, name_len)) def = &k_pretoks[i];
    }
    if (!def)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "tokenizer.ggml.pre = \"%.*s\" is not a supported pre-tokenizer "
                           "(supported: smollm, gpt2, llama-bpe/llama3, qwen2, default)",
                           (int)PLLM_MIN(name_len, 80), name);
    p->name = def->name;
    for (int i = 0; i < TOK_PRETOK_MAX && def->re[i]; i++) {
        int err;
        PCRE2_SIZE erroff;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)def->re[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP, &err, &erroff, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            tok_pretok_free(p);
            return pllm_errorf(PLLM_ERR_INTERNAL,
                               "pre-tokenizer %s: regex %d does not compile at offset %zu: %s",
                               def->name, i, (size_t)erroff, (const char *)msg);
        }
        p->re[i] = re;
        p->jit[i] = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
        p->n_re = i + 1;
    }
    return PLLM_OK;
}

void tok_ws_free(tok_ws *ws)
{
    if (!ws) return;
    pcre2_match_data_free(ws->md);
    pcre2_match_context_free(ws->mctx);
    pcre2_jit_stack_free(ws->jstack);
    free(ws->sym);
    free(ws->prev);
    free(ws->next);
    free(ws->heap);
    pllm_buf_free(&ws->scratch);
    memset(ws, 0, sizeof *ws);
}

/* One match of stage i at or after start. Returns PCRE2's code (>= 0: a match). */
static int re_match(const tok_pretok *p, int i, tok_ws *ws, const char *s, size_t n, size_t start)
{
    for (;;) {
        int rc;
        if (p->jit[i])
            rc = pcre2_jit_match(p->re[i], (PCRE2_SPTR)s, n, start, 0, ws->md, ws->mctx);
        else
            rc = pcre2_match(p->re[i], (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, ws->md,
                             ws->mctx);
        if ((rc != PCRE2_ERROR_JIT_STACKLIMIT && rc != PCRE2_ERROR_NOMEMORY &&
             rc != PCRE2_ERROR_HEAPLIMIT) ||
            ws->jstack)
            return rc;
        /* the default 32 KiB JIT stack ran out on a pathological piece: retry with a private
         * stack of up to 64 MiB (and an unlimited heap for the interpreter) */
        ws->mctx = pcre2_match_context_create(NULL);
        ws->jstack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
        if (!ws->mctx || !ws->jstack) return PCRE2_ERROR_NOMEMORY;
        pcre2_jit_stack_assign(ws->mctx, NULL, ws->jstack);
        pcre2_set_heap_limit(ws->mctx, UINT32_MAX);
    }
}

static pllm_status split_stage(const tok_pretok *p, tok_ws *ws, int stage, const char *s, size_t n,
                               tok_piece_fn fn, void *ctx)
{
    if (stage == p->n_re) return fn(ctx, s, n);
    size_t start = 0, last = 0;
    while (start < n) {
        int rc = re_match(p, stage, ws, s, n, start);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return pllm_errorf(PLLM_ERR_INTERNAL, "pre-tokenizer %s, regex %d, on %zu bytes: %s",
                               p->name, stage, n, (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(ws->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) {
            /* an empty match isolates nothing: search again one character further */
            uint32_t cp;
            start = ms + (ms < n ? tok_utf8_decode((const uint8_t *)s + ms, &cp) : 1);
            continue;
        }
        if (ms > last) PLLM_TRY(split_stage(p, ws, stage + 1, s + last, ms - last, fn, ctx));
        PLLM_TRY(split_stage(p, ws, stage + 1, s + ms, me - ms, fn, ctx));
        last = start = me;
    }
    if (last < n) PLLM_TRY(split_stage(p, ws, stage + 1, s + last, n - last, fn, ctx));
    return PLLM_OK;
}

pllm_status tok_pretok_split(const tok_pretok *p, tok_ws *ws, const char *s, size_t n,
                             tok_piece_fn fn, void *ctx)
{
    if (!n) return PLLM_OK;
    if (!ws->md) {
        ws->md = pcre2_match_data_create(1, NULL);
        if (!ws->md) return pllm_errorf(PLLM_ERR_NOMEM, "out of memory creating PCRE2 match data");
    }
    return split_stage(p, ws, 0, s, n, fn, ctx);
}

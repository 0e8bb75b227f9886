/*
 * tok_pretok.c: named pre-tokenizers as lists of regexes, run through PCRE2 (UTF + UCP,
 * JIT when available).
 *
 * A pre-tokenizer is a list of stages; every piece of stage i-1 goes through stage i. Each
 * piece is its own subject: lookarounds at a piece's end see the end of the subject, exactly
 * as when Hugging Face runs a pre-tokenizer sequence on the pieces of the one before.
 *   SPLIT: the matches of a regex and the gaps between them, combined as Hugging Face's
 *     SplitDelimiterBehavior says (Removed, Isolated, MergedWithPrevious, MergedWithNext,
 *     Contiguous; invert swaps matches and gaps). Isolated is what the ByteLevel regex and
 *     Digits(individual_digits) do, and runs without buffering.
 *   METASPACE: ' ' becomes the replacement character, which is prepended to a piece that
 *     does not start with it (scheme "always", or "first" for the piece at offset 0 of the
 *     input); with split, the piece is cut before every replacement character.
 *   PREFIX_SPACE: ByteLevel(add_prefix_space): ' ' before a piece that does not start so.
 *
 * The regexes are those of the models' tokenizer.json files (HF `tokenizers` runs them with
 * Oniguruma); llama.cpp's per-name lists (llama-vocab.cpp) map GGUF names to them. PCRE2 with
 * PCRE2_UCP gives \s, \p{L}, \p{N} the same Unicode meaning (Unicode 14 here). Known gap:
 * characters assigned after the PCRE2 build's Unicode version are unclassified here.
 */
#include "tokenizer/tokenizer_internal.h"

#include <stdio.h>
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

const char *tok_pretok_gpt2_regex(void)
{
    return RE_GPT2;
}

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
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->st[i].re);
    p->n = 0;
}

pllm_status tok_pretok_add(tok_pretok *p, const tok_pre_stage *stage, const char *src)
{
    if (p->n == TOK_PRETOK_MAX) {
        pcre2_code_free(stage->re);
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: more than %d pre-tokenizer stages", src,
                           TOK_PRETOK_MAX);
    }
    p->st[p->n++] = *stage;
    return PLLM_OK;
}

pllm_status tok_pretok_add_split(tok_pretok *p, const char *pattern, size_t len, bool literal,
                                 tok_split_behavior behavior, bool invert, const char *src)
{
    int err;
    PCRE2_SIZE erroff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len,
                                   literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP,
                                   &err, &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: pre-tokenizer regex \"%.*s\" does not compile (PCRE2) at offset "
                           "%zu: %s",
                           src, (int)PLLM_MIN(len, 200), pattern, (size_t)erroff,
                           (const char *)msg);
    }
    tok_pre_stage st = {.kind = TOK_PRE_SPLIT, .re = re, .behavior = behavior, .invert = invert};
    st.jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return tok_pretok_add(p, &st, src);
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
    snprintf(p->name, sizeof p->name, "%s", def->name);
    for (int i = 0; i < TOK_PRETOK_MAX && def->re[i]; i++) {
        pllm_status st = tok_pretok_add_split(p, def->re[i], strlen(def->re[i]), false,
                                              TOK_SPLIT_ISOLATED, false, def->name);
        if (st) {
            tok_pretok_free(p);
            return pllm_error_prefix(PLLM_ERR_INTERNAL, "built-in pre-tokenizer: ");
        }
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
    pllm_buf_free(&ws->norm);
    pllm_buf_free(&ws->norm_tmp);
    for (int i = 0; i < TOK_PRETOK_MAX; i++) {
        pllm_buf_free(&ws->stage_buf[i]);
        free(ws->segs[i]);
    }
    memset(ws, 0, sizeof *ws);
}

/* One match of stage i at or after start. Returns PCRE2's code (>= 0: a match). */
static int re_match(const tok_pre_stage *st, tok_ws *ws, const char *s, size_t n, size_t start)
{
    for (;;) {
        int rc;
        if (st->jit)
            rc = pcre2_jit_match(st->re, (PCRE2_SPTR)s, n, start, 0, ws->md, ws->mctx);
        else
            rc = pcre2_match(st->re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, ws->md, ws->mctx);
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

/* The next non-empty match of st in s[0..n) at or after *start: true with [*ms, *me). */
static pllm_status next_match(const tok_pretok *p, const tok_pre_stage *st, tok_ws *ws,
                              const char *s, size_t n, size_t *start, size_t *ms, size_t *me,
                              bool *found)
{
    *found = false;
    while (*start < n) {
        int rc = re_match(st, ws, s, n, *start);
        if (rc == PCRE2_ERROR_NOMATCH) return PLLM_OK;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return pllm_errorf(PLLM_ERR_INTERNAL,
                               "pre-tokenizer %s, regex stage %d, on %zu bytes: %s", p->name,
                               (int)(st - p->st), n, (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(ws->md);
        if (ov[1] <= ov[0]) {
            /* an empty match isolates nothing: search again one character further */
            uint32_t cp;
            *start = ov[0] + (ov[0] < n ? tok_utf8_decode((const uint8_t *)s + ov[0], &cp) : 1);
            continue;
        }
        *ms = ov[0];
        *me = ov[1];
        *start = ov[1];
        *found = true;
        return PLLM_OK;
    }
    return PLLM_OK;
}

static pllm_status split_stage(const tok_pretok *p, tok_ws *ws, int stage, const char *s, size_t n,
                               bool at_start, tok_piece_fn fn, void *ctx);

static pllm_status push_seg(tok_ws *ws, int stage, size_t *nseg, size_t a, size_t b, bool match)
{
    if (*nseg == ws->segs_cap[stage]) {
        size_t cap = ws->segs_cap[stage] ? 2 * ws->segs_cap[stage] : 64;
        tok_seg *g = pllm_realloc(ws->segs[stage], cap * sizeof *g);
        if (!g) return PLLM_ERR_NOMEM;
        ws->segs[stage] = g;
        ws->segs_cap[stage] = cap;
    }
    ws->segs[stage][(*nseg)++] = (tok_seg){a, b, match};
    return PLLM_OK;
}

/* A SPLIT stage with a behavior other than plain Isolated: the segments (gaps and matches,
 * match flags inverted when asked) are collected, combined, then passed on. */
static pllm_status split_general(const tok_pretok *p, tok_ws *ws, int stage, const char *s,
                                 size_t n, bool at_start, tok_piece_fn fn, void *ctx)
{
    const tok_pre_stage *st = &p->st[stage];
    size_t nseg = 0, start = 0, last = 0, ms, me;
    bool found;
    for (;;) {
        PLLM_TRY(next_match(p, st, ws, s, n, &start, &ms, &me, &found));
        if (!found) break;
        if (ms > last) PLLM_TRY(push_seg(ws, stage, &nseg, last, ms, st->invert));
        PLLM_TRY(push_seg(ws, stage, &nseg, ms, me, !st->invert));
        last = me;
    }
    if (last < n) PLLM_TRY(push_seg(ws, stage, &nseg, last, n, st->invert));

    /* combine in place (Hugging Face's NormalizedString::split) */
    tok_seg *g = ws->segs[stage];
    size_t k = 0;
    bool prev_match = false;
    switch (st->behavior) {
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < nseg; i++)
            if (!g[i].match) g[k++] = g[i];
        break;
    case TOK_SPLIT_ISOLATED:
        k = nseg;
        break;
    case TOK_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < nseg; i++) {
            bool m = g[i].match;
            if (m && !prev_match && k > 0)
                g[k - 1].end = g[i].end;
            else
                g[k++] = g[i];
            prev_match = m;
        }
        break;
    case TOK_SPLIT_MERGED_NEXT:
        /* from the right: a delimiter joins the piece after it */
        k = nseg;
        {
            size_t w = nseg;
            for (size_t i = nseg; i-- > 0;) {
                bool m = g[i].match;
                if (m && !prev_match && w < nseg)
                    g[w].start = g[i].start;
                else
                    g[--w] = g[i];
                prev_match = m;
            }
            memmove(g, g + w, (nseg - w) * sizeof *g);
            k = nseg - w;
        }
        break;
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < nseg; i++) {
            bool m = g[i].match;
            if (m == prev_match && k > 0)
                g[k - 1].end = g[i].end;
            else
                g[k++] = g[i];
            prev_match = m;
        }
        break;
    }
    /* recursion reuses segs[stage + 1..], never this level's array */
    for (size_t i = 0; i < k; i++) {
        tok_seg sg = ws->segs[stage][i];
        if (sg.end > sg.start)
            PLLM_TRY(split_stage(p, ws, stage + 1, s + sg.start, sg.end - sg.start,
                                 at_start && sg.start == 0, fn, ctx));
    }
    return PLLM_OK;
}

static pllm_status metaspace_stage(const tok_pretok *p, tok_ws *ws, int stage, const char *s,
                                   size_t n, bool at_start, tok_piece_fn fn, void *ctx)
{
    const tok_pre_stage *st = &p->st[stage];
    pllm_buf *b = &ws->stage_buf[stage];
    b->n = 0;
    bool starts = n >= st->repl_len && memcmp(s, st->repl, st->repl_len) == 0;
    bool has_space = s[0] == ' ';
    if (!starts && !has_space &&
        (st->prepend == TOK_PREPEND_ALWAYS || (st->prepend == TOK_PREPEND_FIRST && at_start)))
        PLLM_TRY(pllm_buf_append(b, st->repl, st->repl_len));
    size_t from = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ') continue;
        if (i > from) PLLM_TRY(pllm_buf_append(b, s + from, i - from));
        PLLM_TRY(pllm_buf_append(b, st->repl, st->repl_len));
        from = i + 1;
    }
    if (n > from) PLLM_TRY(pllm_buf_append(b, s + from, n - from));
    if (!b->n) return PLLM_OK;
    if (!st->split) return split_stage(p, ws, stage + 1, b->s, b->n, at_start, fn, ctx);
    /* cut before every replacement character (MergedWithNext) */
    size_t piece = 0;
    for (size_t i = 1; i + st->repl_len <= b->n;) {
        if (memcmp(b->s + i, st->repl, st->repl_len) == 0) {
            PLLM_TRY(split_stage(p, ws, stage + 1, b->s + piece, i - piece, at_start && piece == 0,
                                 fn, ctx));
            piece = i;
            i += st->repl_len;
        } else {
            i++;
        }
    }
    return split_stage(p, ws, stage + 1, b->s + piece, b->n - piece, at_start && piece == 0, fn,
                       ctx);
}

static pllm_status split_stage(const tok_pretok *p, tok_ws *ws, int stage, const char *s, size_t n,
                               bool at_start, tok_piece_fn fn, void *ctx)
{
    if (!n) return PLLM_OK;
    if (stage == p->n) return fn(ctx, s, n);
    const tok_pre_stage *st = &p->st[stage];
    switch (st->kind) {
    case TOK_PRE_METASPACE:
        return metaspace_stage(p, ws, stage, s, n, at_start, fn, ctx);
    case TOK_PRE_PREFIX_SPACE: {
        if (s[0] == ' ') return split_stage(p, ws, stage + 1, s, n, at_start, fn, ctx);
        pllm_buf *b = &ws->stage_buf[stage];
        b->n = 0;
        PLLM_TRY(pllm_buf_append(b, " ", 1));
        PLLM_TRY(pllm_buf_append(b, s, n));
        return split_stage(p, ws, stage + 1, b->s, b->n, at_start, fn, ctx);
    }
    case TOK_PRE_SPLIT:
        break;
    }
    if (st->behavior != TOK_SPLIT_ISOLATED || st->invert)
        return split_general(p, ws, stage, s, n, at_start, fn, ctx);
    /* Isolated: matches and gaps are all pieces, streamed without buffering */
    size_t start = 0, last = 0, ms, me;
    bool found;
    for (;;) {
        PLLM_TRY(next_match(p, st, ws, s, n, &start, &ms, &me, &found));
        if (!found) break;
        if (ms > last)
            PLLM_TRY(
                split_stage(p, ws, stage + 1, s + last, ms - last, at_start && last == 0, fn, ctx));
        PLLM_TRY(split_stage(p, ws, stage + 1, s + ms, me - ms, at_start && ms == 0, fn, ctx));
        last = me;
    }
    if (last < n)
        PLLM_TRY(split_stage(p, ws, stage + 1, s + last, n - last, at_start && last == 0, fn, ctx));
    return PLLM_OK;
}

pllm_status tok_pretok_split(const tok_pretok *p, tok_ws *ws, const char *s, size_t n,
                             bool at_start, tok_piece_fn fn, void *ctx)
{
    if (!n) return PLLM_OK;
    if (!ws->md) {
        ws->md = pcre2_match_data_create(1, NULL);
        if (!ws->md) return pllm_errorf(PLLM_ERR_NOMEM, "out of memory creating PCRE2 match data");
    }
    return split_stage(p, ws, 0, s, n, at_start, fn, ctx);
}

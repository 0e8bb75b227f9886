/*
 * tok_hf.c: the Hugging Face builders.
 *
 * tokenizer.json (the `tokenizers` serialization) section by section:
 *   model          BPE only: vocab, merges ("a b" strings or ["a", "b"] lists), unk_token,
 *                  byte_fallback, fuse_unk, ignore_merges; dropout must be null/0 and
 *                  continuing_subword_prefix / end_of_word_suffix empty.
 *   added_tokens   id, content, special, lstrip, rstrip, single_word, normalized.
 *   normalizer     Sequence, Prepend, Replace (String or Regex), NFC, NFD, NFKC, NFKD,
 *                  Lowercase, Strip.
 *   pre_tokenizer  Sequence, ByteLevel (add_prefix_space, use_regex; must come last),
 *                  Split (String or Regex pattern, behavior, invert), Digits, Metaspace.
 *   post_processor TemplateProcessing (the "single" template), ByteLevel, RobertaProcessing,
 *                  BertProcessing, Sequence of these: the ids added before/after the text.
 *   decoder        ByteLevel; Metaspace; a Sequence of Replace (String), ByteFallback, Fuse,
 *                  Strip (after Fuse, start only).
 * The family follows from the pre-tokenizer: with ByteLevel the symbols are bytes (byte-level
 * BPE, decoder ByteLevel), without it characters (SentencePiece-style BPE). Anything else is
 * PLLM_ERR_UNSUPPORTED naming the construct and the file.
 *
 * tokenizer_config.json (optional): bos_token, eos_token, pad_token (a string or an
 * AddedToken object with "content") name the special ids; add_bos_token/add_eos_token, when
 * present, replace the post-processor's ids by [bos] before and [eos] after (what
 * transformers' LlamaTokenizerFast.update_post_processor does). Without a config entry, the
 * one token the post-processor puts before (after) the text is the BOS (EOS).
 *
 * vocab.json + merges.txt: GPT-2's files; the tokenizer transformers' GPT2TokenizerFast
 * builds from them (ByteLevel pre-tokenizer and decoder, "<|endoftext|>" special).
 */
#include "tokenizer/tokenizer_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct hf_ctx {
    const char *path;    /* tokenizer.json, for messages */
    tok_strview *tokens; /* [n_vocab] */
    int32_t *types;      /* [n_vocab] */
    uint8_t *in_model;   /* [n_vocab] */
    int32_t n_vocab;
    tok_added_spec *added; /* [n_added] */
    int32_t n_added;
    tok_strview *pairs; /* [2 * n_merges] */
    int32_t n_merges;
    tok_norm norm;
    tok_pretok pre;
    tok_decoder dec;
    bool byte_level;
    int32_t post_pre[TOK_MAX_POST], post_suf[TOK_MAX_POST];
    int n_post_pre, n_post_suf;
} hf_ctx;

static void hf_ctx_free(hf_ctx *c)
{
    free(c->tokens);
    free(c->types);
    free(c->in_model);
    free(c->added);
    free(c->pairs);
    tok_norm_free(&c->norm);
    tok_pretok_free(&c->pre);
}

static pllm_status unsupported(const hf_ctx *c, const char *what, const char *type)
{
    return pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: %s \"%s\" is not supported", c->path, what,
                       type ? type : "(no type)");
}

static const char *type_of(json_t *o)
{
    return json_string_value(json_object_get(o, "type"));
}

static bool get_bool(json_t *o, const char *key, bool dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static pllm_status load_json(const char *path, json_t **out)
{
    json_error_t err;
    *out = json_load_file(path, JSON_ALLOW_NUL, &err);
    if (!*out) {
        struct stat sb;
        if (stat(path, &sb) != 0) return pllm_errorf(PLLM_ERR_IO, "%s: cannot open", path);
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: line %d, column %d: %s", path, err.line,
                           err.column, err.text);
    }
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: not a JSON object", path);
    }
    return PLLM_OK;
}

/* A pattern object {"String": s} or {"Regex": r}. */
static pllm_status get_pattern(const hf_ctx *c, json_t *o, const char *where, const char **s,
                               size_t *n, bool *regex)
{
    json_t *p = json_object_get(o, "pattern");
    json_t *str = json_object_get(p, "String"), *re = json_object_get(p, "Regex");
    if (json_is_string(str)) {
        *s = json_string_value(str), *n = json_string_length(str), *regex = false;
        return PLLM_OK;
    }
    if (json_is_string(re)) {
        *s = json_string_value(re), *n = json_string_length(re), *regex = true;
        return PLLM_OK;
    }
    return pllm_errorf(PLLM_ERR_FORMAT,
                       "%s: %s: \"pattern\" is neither {\"String\": ...} nor "
                       "{\"Regex\": ...}",
                       c->path, where);
}

static char *dup_n(const char *s, size_t n)
{
    char *d = pllm_malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = 0;
    return d;
}

/* ---- normalizer ---- */

static pllm_status add_normalizer(hf_ctx *c, json_t *o)
{
    const char *ty = type_of(o);
    if (!ty) return unsupported(c, "normalizer", NULL);
    if (!strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(o, "normalizers"), *v;
        size_t i;
        if (!json_is_array(arr))
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: normalizer Sequence has no \"normalizers\"",
                               c->path);
        json_array_foreach(arr, i, v) PLLM_TRY(add_normalizer(c, v));
        return PLLM_OK;
    }
    tok_norm_step st = {0};
    if (!strcmp(ty, "Prepend")) {
        json_t *p = json_object_get(o, "prepend");
        if (!json_is_string(p))
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: normalizer Prepend has no \"prepend\"",
                               c->path);
        st.kind = TOK_NORM_PREPEND;
        st.a_len = json_string_length(p);
        if (!(st.a = dup_n(json_string_value(p), st.a_len))) return PLLM_ERR_NOMEM;
    } else if (!strcmp(ty, "Replace")) {
        const char *pat;
        size_t pn;
        bool regex;
        PLLM_TRY(get_pattern(c, o, "normalizer Replace", &pat, &pn, &regex));
        json_t *content = json_object_get(o, "content");
        if (!json_is_string(content))
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: normalizer Replace has no \"content\"",
                               c->path);
        st.b_len = json_string_length(content);
        if (!(st.b = dup_n(json_string_value(content), st.b_len))) return PLLM_ERR_NOMEM;
        if (regex) {
            int err;
            PCRE2_SIZE off;
            st.kind = TOK_NORM_REPLACE_RE;
            st.re = pcre2_compile((PCRE2_SPTR)pat, pn, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
            if (!st.re) {
                free(st.b);
                return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                                   "%s: normalizer Replace regex \"%.*s\" does not compile (PCRE2 "
                                   "error %d at offset %zu)",
                                   c->path, (int)PLLM_MIN(pn, 200), pat, err, (size_t)off);
            }
        } else {
            if (pn == 0) {
                free(st.b);
                return unsupported(c, "normalizer Replace with an empty pattern", "Replace");
            }
            st.kind = TOK_NORM_REPLACE;
            st.a_len = pn;
            if (!(st.a = dup_n(pat, pn))) {
                free(st.b);
                return PLLM_ERR_NOMEM;
            }
        }
    } else if (!strcmp(ty, "NFC")) {
        st.kind = TOK_NORM_NFC;
    } else if (!strcmp(ty, "NFD")) {
        st.kind = TOK_NORM_NFD;
    } else if (!strcmp(ty, "NFKC")) {
        st.kind = TOK_NORM_NFKC;
    } else if (!strcmp(ty, "NFKD")) {
        st.kind = TOK_NORM_NFKD;
    } else if (!strcmp(ty, "Lowercase")) {
        st.kind = TOK_NORM_LOWERCASE;
    } else if (!strcmp(ty, "Strip")) {
        st.kind = TOK_NORM_STRIP;
        st.left = get_bool(o, "strip_left", true);
        st.right = get_bool(o, "strip_right", true);
    } else {
        return unsupported(c, "normalizer", ty);
    }
    return tok_norm_add(&c->norm, &st, c->path);
}

/* ---- pre-tokenizer ---- */

static pllm_status parse_prepend_scheme(const hf_ctx *c, json_t *o, const char *what, int *out)
{
    json_t *ps = json_object_get(o, "prepend_scheme");
    if (json_is_string(ps)) {
        const char *s = json_string_value(ps);
        if (!strcmp(s, "always"))
            *out = TOK_PREPEND_ALWAYS;
        else if (!strcmp(s, "first"))
            *out = TOK_PREPEND_FIRST;
        else if (!strcmp(s, "never"))
            *out = TOK_PREPEND_NEVER;
        else
            return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                               "%s: %s prepend_scheme \"%s\" is not supported", c->path, what, s);
        return PLLM_OK;
    }
    /* older files: add_prefix_space (true = always) */
    *out = get_bool(o, "add_prefix_space", true) ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
    return PLLM_OK;
}

static pllm_status get_replacement(const hf_ctx *c, json_t *o, const char *what, char *dst,
                                   size_t *len)
{
    json_t *r = json_object_get(o, "replacement");
    const char *s = json_is_string(r) ? json_string_value(r) : "\xE2\x96\x81";
    size_t n = json_is_string(r) ? json_string_length(r) : 3;
    uint32_t cp;
    if (n == 0 || n > 4 || tok_utf8_valid_prefix((const uint8_t *)s, n) != n ||
        tok_utf8_decode((const uint8_t *)s, &cp) != n)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: %s replacement must be one character", c->path,
                           what);
    memcpy(dst, s, n);
    *len = n;
    return PLLM_OK;
}

static pllm_status add_pretok(hf_ctx *c, json_t *o)
{
    const char *ty = type_of(o);
    if (!ty) return unsupported(c, "pre_tokenizer", NULL);
    if (c->byte_level)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: pre_tokenizer \"%s\" after ByteLevel is not supported (ByteLevel "
                           "must be the last stage)",
                           c->path, ty);
    if (!strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(o, "pretokenizers"), *v;
        size_t i;
        if (!json_is_array(arr))
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: pre_tokenizer Sequence has no \"pretokenizers\"", c->path);
        json_array_foreach(arr, i, v) PLLM_TRY(add_pretok(c, v));
        return PLLM_OK;
    }
    if (!strcmp(ty, "ByteLevel")) {
        if (get_bool(o, "add_prefix_space", true)) {
            tok_pre_stage st = {.kind = TOK_PRE_PREFIX_SPACE};
            PLLM_TRY(tok_pretok_add(&c->pre, &st, c->path));
        }
        if (get_bool(o, "use_regex", true)) {
            const char *re = tok_pretok_gpt2_regex();
            PLLM_TRY(tok_pretok_add_split(&c->pre, re, strlen(re), false, TOK_SPLIT_ISOLATED, false,
                                          c->path));
        }
        c->byte_level = true;
        return PLLM_OK;
    }
    if (!strcmp(ty, "Split")) {
        const char *pat;
        size_t pn;
        bool regex;
        PLLM_TRY(get_pattern(c, o, "pre_tokenizer Split", &pat, &pn, &regex));
        const char *b = json_string_value(json_object_get(o, "behavior"));
        tok_split_behavior beh;
        if (!b)
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: pre_tokenizer Split has no \"behavior\"",
                               c->path);
        if (!strcmp(b, "Removed"))
            beh = TOK_SPLIT_REMOVED;
        else if (!strcmp(b, "Isolated"))
            beh = TOK_SPLIT_ISOLATED;
        else if (!strcmp(b, "MergedWithPrevious"))
            beh = TOK_SPLIT_MERGED_PREV;
        else if (!strcmp(b, "MergedWithNext"))
            beh = TOK_SPLIT_MERGED_NEXT;
        else if (!strcmp(b, "Contiguous"))
            beh = TOK_SPLIT_CONTIGUOUS;
        else
            return unsupported(c, "pre_tokenizer Split behavior", b);
        return tok_pretok_add_split(&c->pre, pat, pn, !regex, beh, get_bool(o, "invert", false),
                                    c->path);
    }
    if (!strcmp(ty, "Digits")) {
        bool ind = get_bool(o, "individual_digits", false);
        return tok_pretok_add_split(&c->pre, "\\p{N}", 5, false,
                                    ind ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS, false,
                                    c->path);
    }
    if (!strcmp(ty, "Metaspace")) {
        tok_pre_stage st = {.kind = TOK_PRE_METASPACE};
        PLLM_TRY(get_replacement(c, o, "pre_tokenizer Metaspace", st.repl, &st.repl_len));
        PLLM_TRY(parse_prepend_scheme(c, o, "pre_tokenizer Metaspace", &st.prepend));
        st.split = get_bool(o, "split", true);
        return tok_pretok_add(&c->pre, &st, c->path);
    }
    return unsupported(c, "pre_tokenizer", ty);
}

/* ---- decoder ---- */

static pllm_status set_decoder(hf_ctx *c, json_t *o)
{
    tok_decoder *d = &c->dec;
    memset(d, 0, sizeof *d);
    if (!json_is_object(o))
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: no decoder (tokens joined by spaces) is not supported", c->path);
    const char *ty = type_of(o);
    if (ty && !strcmp(ty, "ByteLevel")) {
        d->kind = TOK_DEC_BYTE_LEVEL;
        return PLLM_OK;
    }
    d->kind = TOK_DEC_PIECES;
    if (ty && !strcmp(ty, "Metaspace")) {
        int scheme;
        PLLM_TRY(get_replacement(c, o, "decoder Metaspace", d->meta_repl, &d->meta_repl_len));
        PLLM_TRY(parse_prepend_scheme(c, o, "decoder Metaspace", &scheme));
        if (scheme == TOK_PREPEND_NEVER) { /* every replacement -> ' ', first token included */
            memcpy(d->repl[0].from, d->meta_repl, d->meta_repl_len);
            d->repl[0].from_len = d->meta_repl_len;
            d->repl[0].to[0] = ' ';
            d->repl[0].to_len = 1;
            d->n_repl = 1;
            d->meta_repl_len = 0;
        }
        return PLLM_OK;
    }
    if (!ty || strcmp(ty, "Sequence") != 0) return unsupported(c, "decoder", ty);
    json_t *arr = json_object_get(o, "decoders"), *v;
    size_t i;
    if (!json_is_array(arr))
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: decoder Sequence has no \"decoders\"", c->path);
    if (json_array_size(arr) == 1) return set_decoder(c, json_array_get(arr, 0));
    /* the accepted shape: Replace* ByteFallback? Fuse? Strip? (Strip only after Fuse) */
    int stage = 0; /* 0 replaces, 1 after ByteFallback, 2 after Fuse, 3 after Strip */
    json_array_foreach(arr, i, v)
    {
        const char *dt = type_of(v);
        if (!dt) return unsupported(c, "decoder", NULL);
        if (!strcmp(dt, "Replace") && stage == 0) {
            const char *pat;
            size_t pn;
            bool regex;
            PLLM_TRY(get_pattern(c, v, "decoder Replace", &pat, &pn, &regex));
            json_t *content = json_object_get(v, "content");
            if (regex) return unsupported(c, "decoder Replace with a Regex pattern", "Replace");
            if (!json_is_string(content) || pn == 0 || pn >= sizeof d->repl[0].from ||
                json_string_length(content) >= sizeof d->repl[0].to ||
                d->n_repl == (int)PLLM_ARRAY_LEN(d->repl))
                return unsupported(c, "decoder Replace (pattern/content size or count)", "Replace");
            memcpy(d->repl[d->n_repl].from, pat, pn);
            d->repl[d->n_repl].from_len = pn;
            memcpy(d->repl[d->n_repl].to, json_string_value(content), json_string_length(content));
            d->repl[d->n_repl].to_len = json_string_length(content);
            d->n_repl++;
        } else if (!strcmp(dt, "ByteFallback") && stage == 0) {
            d->byte_fallback = true;
            stage = 1;
        } else if (!strcmp(dt, "Fuse") && stage <= 1) {
            stage = 2;
        } else if (!strcmp(dt, "Strip") && stage == 2) {
            json_t *content = json_object_get(v, "content");
            json_int_t start = json_integer_value(json_object_get(v, "start"));
            json_int_t stop = json_integer_value(json_object_get(v, "stop"));
            size_t cl = json_is_string(content) ? json_string_length(content) : 0;
            if (stop != 0 || start < 0 || start > 1000 || cl == 0 || cl > 4)
                return unsupported(c, "decoder Strip (only start > 0 with stop = 0, after Fuse)",
                                   "Strip");
            d->strip_start = (int)start;
            memcpy(d->strip_char, json_string_value(content), cl);
            d->strip_char_len = cl;
            stage = 3;
        } else {
            return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                               "%s: decoder Sequence with \"%s\" at position %zu is not supported "
                               "(supported: Replace..., ByteFallback, Fuse, Strip in that order)",
                               c->path, dt, i);
        }
    }
    return PLLM_OK;
}

/* ---- post-processor ---- */

static pllm_status special_ids(hf_ctx *c, json_t *specials, const char *name, int32_t *ids, int *n,
                               int cap)
{
    json_t *sp = json_object_get(specials, name), *arr = json_object_get(sp, "ids"), *v;
    size_t i;
    if (!json_is_array(arr))
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: post_processor template names \"%s\", which its special_tokens "
                           "do not define",
                           c->path, name);
    json_array_foreach(arr, i, v)
    {
        if (*n == cap)
            return pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: post_processor adds more than %d tokens",
                               c->path, cap);
        ids[(*n)++] = (int32_t)json_integer_value(v);
    }
    return PLLM_OK;
}

static pllm_status find_token(hf_ctx *c, const char *s, const char *what, int32_t *id);

/* Wrap the current prefix/suffix in processor o (HF's Sequence applies them in order). */
static pllm_status add_post(hf_ctx *c, json_t *o)
{
    const char *ty = type_of(o);
    int32_t pre[TOK_MAX_POST], suf[TOK_MAX_POST];
    int np = 0, ns = 0;
    if (!ty) return unsupported(c, "post_processor", NULL);
    if (!strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(o, "processors"), *v;
        size_t i;
        json_array_foreach(arr, i, v) PLLM_TRY(add_post(c, v));
        return PLLM_OK;
    }
    if (!strcmp(ty, "ByteLevel")) return PLLM_OK;
    if (!strcmp(ty, "TemplateProcessing")) {
        json_t *single = json_object_get(o, "single"),
               *specials = json_object_get(o, "special_tokens"), *v;
        size_t i;
        bool seen = false;
        if (!json_is_array(single))
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: TemplateProcessing has no \"single\"",
                               c->path);
        json_array_foreach(single, i, v)
        {
            json_t *tok = json_object_get(v, "SpecialToken");
            if (json_object_get(v, "Sequence")) {
                if (seen)
                    return unsupported(c, "post_processor template with the sequence twice", ty);
                seen = true;
            } else if (tok) {
                const char *name = json_string_value(json_object_get(tok, "id"));
                if (!name)
                    return pllm_errorf(PLLM_ERR_FORMAT, "%s: TemplateProcessing item %zu has no id",
                                       c->path, i);
                PLLM_TRY(seen ? special_ids(c, specials, name, suf, &ns, TOK_MAX_POST)
                              : special_ids(c, specials, name, pre, &np, TOK_MAX_POST));
            } else {
                return pllm_errorf(PLLM_ERR_FORMAT,
                                   "%s: TemplateProcessing item %zu is neither "
                                   "Sequence nor SpecialToken",
                                   c->path, i);
            }
        }
    } else if (!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing")) {
        json_t *cls = json_object_get(o, "cls"), *sep = json_object_get(o, "sep");
        if (!json_is_array(cls) || !json_is_array(sep))
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: %s needs \"cls\" and \"sep\"", c->path, ty);
        pre[np++] = (int32_t)json_integer_value(json_array_get(cls, 1));
        suf[ns++] = (int32_t)json_integer_value(json_array_get(sep, 1));
    } else {
        return unsupported(c, "post_processor", ty);
    }
    if (np + c->n_post_pre > TOK_MAX_POST || ns + c->n_post_suf > TOK_MAX_POST)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: post_processor adds more than %d tokens",
                           c->path, TOK_MAX_POST);
    memmove(c->post_pre + np, c->post_pre, (size_t)c->n_post_pre * sizeof *pre);
    memcpy(c->post_pre, pre, (size_t)np * sizeof *pre);
    c->n_post_pre += np;
    memcpy(c->post_suf + c->n_post_suf, suf, (size_t)ns * sizeof *suf);
    c->n_post_suf += ns;
    return PLLM_OK;
}

/* ---- vocabulary ---- */

static pllm_status find_token(hf_ctx *c, const char *s, const char *what, int32_t *id)
{
    size_t n = strlen(s);
    for (int32_t i = 0; i < c->n_vocab; i++)
        if (c->tokens[i].len == n && memcmp(c->tokens[i].s, s, n) == 0) {
            *id = i;
            return PLLM_OK;
        }
    return pllm_errorf(PLLM_ERR_FORMAT, "%s: %s \"%.*s\" is not a token", c->path, what,
                       (int)PLLM_MIN(n, 80), s);
}

/* vocab (model) and added tokens -> the id-indexed token table. */
static pllm_status build_vocab(hf_ctx *c, json_t *vocab, json_t *added, bool byte_fallback)
{
    const char *k;
    json_t *v;
    int64_t max_id = -1;
    json_object_foreach(vocab, k, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= INT32_MAX)
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: model.vocab[\"%.80s\"] is not a token id",
                               c->path, k);
        max_id = PLLM_MAX(max_id, (int64_t)json_integer_value(v));
    }
    size_t i;
    json_array_foreach(added, i, v)
    {
        json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= INT32_MAX || !json_is_string(json_object_get(v, "content")))
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: added_tokens[%zu] needs an id and a content",
                               c->path, i);
        max_id = PLLM_MAX(max_id, (int64_t)json_integer_value(id));
    }
    if (max_id < 0) return pllm_errorf(PLLM_ERR_FORMAT, "%s: model.vocab is empty", c->path);
    /* ids must be 0..n-1 without holes (checked below, token by token, with precise messages):
     * an id far past the number of entries breaks that rule for sure and must not size the
     * allocations (an id of 2e9 in a 300-token vocab.json asked for 35 GB) */
    size_t n_entries = json_object_size(vocab) + json_array_size(added);
    if ((uint64_t)max_id >= 4 * (uint64_t)n_entries + 65536)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: token id %lld is past the %zu entries of model.vocab and "
                           "added_tokens (ids must be 0..%zu without holes)",
                           c->path, (long long)max_id, n_entries, n_entries - 1);
    c->n_vocab = (int32_t)(max_id + 1);
    c->tokens = pllm_calloc((size_t)c->n_vocab, sizeof *c->tokens);
    c->types = pllm_calloc((size_t)c->n_vocab, sizeof *c->types);
    c->in_model = pllm_calloc((size_t)c->n_vocab, 1);
    c->added = pllm_calloc(json_array_size(added) + 1, sizeof *c->added);
    if (!c->tokens || !c->types || !c->in_model || !c->added) return PLLM_ERR_NOMEM;
    json_object_foreach(vocab, k, v)
    {
        int32_t id = (int32_t)json_integer_value(v);
        if (c->tokens[id].s)
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: model.vocab gives id %d to both \"%.80s\" and \"%.80s\"",
                               c->path, id, c->tokens[id].s, k);
        /* jansson keys are NUL-terminated; a key with a NUL inside is cut there */
        c->tokens[id] = (tok_strview){k, strlen(k)};
        c->in_model[id] = 1;
        bool byte = byte_fallback && strlen(k) == 6 && memcmp(k, "<0x", 3) == 0 && k[5] == '>';
        c->types[id] = byte ? TOK_TYPE_BYTE : TOK_TYPE_NORMAL;
    }
    json_array_foreach(added, i, v)
    {
        int32_t id = (int32_t)json_integer_value(json_object_get(v, "id"));
        json_t *content = json_object_get(v, "content");
        tok_strview cv = {json_string_value(content), json_string_length(content)};
        if (c->tokens[id].s &&
            (c->tokens[id].len != cv.len || memcmp(c->tokens[id].s, cv.s, cv.len) != 0))
            return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                               "%s: added_tokens[%zu] \"%.80s\" reuses id %d of \"%.80s\"", c->path,
                               i, cv.s, id, c->tokens[id].s);
        for (int32_t o = 0; o < c->n_vocab; o++)
            if (o != id && c->in_model[o] && c->tokens[o].len == cv.len &&
                memcmp(c->tokens[o].s, cv.s, cv.len) == 0)
                return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                                   "%s: added_tokens[%zu] \"%.80s\" has id %d but model.vocab has "
                                   "it as %d",
                                   c->path, i, cv.s, id, o);
        c->tokens[id] = cv;
        bool special = get_bool(v, "special", false);
        uint8_t fl = TOK_ADDED;
        if (special) fl |= TOK_ADDED_SPECIAL;
        if (get_bool(v, "lstrip", false)) fl |= TOK_ADDED_LSTRIP;
        if (get_bool(v, "rstrip", false)) fl |= TOK_ADDED_RSTRIP;
        if (get_bool(v, "single_word", false)) fl |= TOK_ADDED_SINGLE_WORD;
        if (get_bool(v, "normalized", !special)) fl |= TOK_ADDED_NORMALIZED;
        if (!c->in_model[id]) fl |= TOK_ADDED_NOT_MODEL;
        c->types[id] = special ? TOK_TYPE_CONTROL : TOK_TYPE_USER_DEFINED;
        c->added[c->n_added++] = (tok_added_spec){.id = id, .content = cv, .flags = fl};
    }
    for (int32_t id = 0; id < c->n_vocab; id++)
        if (!c->tokens[id].s)
            return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                               "%s: token id %d has no token (ids must be 0..%d without holes)",
                               c->path, id, c->n_vocab - 1);
    return PLLM_OK;
}

static pllm_status build_merges(hf_ctx *c, json_t *merges)
{
    size_t n = json_array_size(merges), i;
    json_t *v;
    if (n > INT32_MAX) return pllm_errorf(PLLM_ERR_FORMAT, "%s: too many merges", c->path);
    c->pairs = pllm_malloc((2 * n + 1) * sizeof *c->pairs);
    if (!c->pairs) return PLLM_ERR_NOMEM;
    json_array_foreach(merges, i, v)
    {
        if (json_is_string(v)) {
            /* "a b": exactly one space (Hugging Face rejects anything else) */
            const char *s = json_string_value(v);
            size_t len = json_string_length(v);
            const char *sp = memchr(s, ' ', len);
            if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp - s) - 1))
                return pllm_errorf(PLLM_ERR_FORMAT,
                                   "%s: model.merges[%zu] = \"%.80s\" is not "
                                   "\"left right\"",
                                   c->path, i, s);
            c->pairs[2 * i] = (tok_strview){s, (size_t)(sp - s)};
            c->pairs[2 * i + 1] = (tok_strview){sp + 1, len - (size_t)(sp - s) - 1};
        } else if (json_is_array(v) && json_array_size(v) == 2 &&
                   json_is_string(json_array_get(v, 0)) && json_is_string(json_array_get(v, 1))) {
            json_t *a = json_array_get(v, 0), *b = json_array_get(v, 1);
            c->pairs[2 * i] = (tok_strview){json_string_value(a), json_string_length(a)};
            c->pairs[2 * i + 1] = (tok_strview){json_string_value(b), json_string_length(b)};
        } else {
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]",
                               c->path, i);
        }
    }
    c->n_merges = (int32_t)n;
    return PLLM_OK;
}

/* A tokenizer_config.json token entry: a string or {"content": ...}; NULL when absent. */
static const char *config_token(json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
    return NULL;
}

static pllm_status config_id(hf_ctx *c, json_t *cfg, const char *cfg_path, const char *key,
                             int64_t *id)
{
    const char *s = config_token(cfg, key);
    if (!s) return PLLM_OK;
    int32_t v = 0;
    if (find_token(c, s, key, &v)) return pllm_error_prefix(PLLM_ERR_FORMAT, "%s: ", cfg_path);
    *id = v;
    return PLLM_OK;
}

pllm_status pllm_tokenizer_from_hf(pllm_tokenizer **out, const char *json_path,
                                   const char *config_path)
{
    *out = NULL;
    json_t *root = NULL, *cfg = NULL;
    hf_ctx c = {.path = json_path};
    pllm_status st = PLLM_OK;
    if ((st = load_json(json_path, &root))) goto done;
    if (config_path && (st = load_json(config_path, &cfg))) goto done;

    json_t *model = json_object_get(root, "model");
    const char *mt = type_of(model);
    if (!json_is_object(model)) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: no \"model\" object", json_path);
        goto done;
    }
    if (!mt || strcmp(mt, "BPE") != 0) {
        st = unsupported(&c, "model type", mt);
        goto done;
    }
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && json_number_value(dropout) != 0.0) {
        st = unsupported(&c, "model.dropout", "non-zero");
        goto done;
    }
    static const char *const k_empty_keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t k = 0; k < 2; k++) {
        json_t *v = json_object_get(model, k_empty_keys[k]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0)) {
            st = pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: model.%s = \"%s\" is not supported",
                             json_path, k_empty_keys[k], json_string_value(v));
            goto done;
        }
    }
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab) || !json_is_array(merges)) {
        st = pllm_errorf(PLLM_ERR_FORMAT,
                         "%s: model needs a \"vocab\" object and a \"merges\" "
                         "array",
                         json_path);
        goto done;
    }
    if (added && !json_is_array(added)) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: \"added_tokens\" is not an array", json_path);
        goto done;
    }
    json_t *empty = json_array();
    bool byte_fallback = get_bool(model, "byte_fallback", false);
    st = build_vocab(&c, vocab, added ? added : empty, byte_fallback);
    json_decref(empty);
    if (st || (st = build_merges(&c, merges))) goto done;

    json_t *norm = json_object_get(root, "normalizer"),
           *pre = json_object_get(root, "pre_tokenizer");
    json_t *post = json_object_get(root, "post_processor"), *dec = json_object_get(root, "decoder");
    snprintf(c.pre.name, sizeof c.pre.name, "tokenizer.json");
    if (json_is_object(norm) && (st = add_normalizer(&c, norm))) goto done;
    if (json_is_object(pre) && (st = add_pretok(&c, pre))) goto done;
    if (json_is_object(post) && (st = add_post(&c, post))) goto done;
    if ((st = set_decoder(&c, dec))) goto done;
    if (c.byte_level != (c.dec.kind == TOK_DEC_BYTE_LEVEL)) {
        st = pllm_errorf(PLLM_ERR_UNSUPPORTED,
                         "%s: a %s pre-tokenizer with a %s decoder is not supported", json_path,
                         c.byte_level ? "ByteLevel" : "non-ByteLevel",
                         c.dec.kind == TOK_DEC_BYTE_LEVEL ? "ByteLevel" : "non-ByteLevel");
        goto done;
    }
    if (c.byte_level && byte_fallback) {
        st = unsupported(&c, "model.byte_fallback with a ByteLevel pre-tokenizer", "BPE");
        goto done;
    }

    tok_spec sp = {
        .source = json_path,
        .model = c.byte_level ? TOK_MODEL_BYTE_BPE : TOK_MODEL_SPM_BPE,
        .pre_built = &c.pre,
        .norm = &c.norm,
        .dec = &c.dec,
        .n_vocab = c.n_vocab,
        .tokens = c.tokens,
        .types = c.types,
        .n_merges = c.n_merges,
        .merge_pairs = c.pairs,
        .merges_last_wins = true,
        .byte_fallback = byte_fallback,
        .fuse_unk = get_bool(model, "fuse_unk", false),
        .ignore_merges = get_bool(model, "ignore_merges", false),
        .n_added = c.n_added,
        .added = c.added,
        .bos = -1,
        .eos = -1,
        .unk = -1,
        .pad = -1,
        .eot = -1,
        .post_given = true,
        .key_tokens = "model.vocab",
        .key_merges = "model.merges",
        .key_bos = "bos_token",
        .key_eos = "eos_token",
        .key_unk = "model.unk_token",
        .key_pad = "pad_token",
    };
    memcpy(sp.post_pre, c.post_pre, sizeof c.post_pre);
    memcpy(sp.post_suf, c.post_suf, sizeof c.post_suf);
    sp.n_post_pre = c.n_post_pre;
    sp.n_post_suf = c.n_post_suf;
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    if (unk) {
        int32_t id = 0;
        if ((st = find_token(&c, unk, "model.unk_token", &id))) goto done;
        if (!c.in_model[id]) {
            st = pllm_errorf(PLLM_ERR_FORMAT, "%s: model.unk_token \"%s\" is not in model.vocab",
                             json_path, unk);
            goto done;
        }
        sp.unk = id;
    }
    if (cfg) {
        if ((st = config_id(&c, cfg, config_path, "bos_token", &sp.bos)) ||
            (st = config_id(&c, cfg, config_path, "eos_token", &sp.eos)) ||
            (st = config_id(&c, cfg, config_path, "pad_token", &sp.pad)))
            goto done;
        json_t *ab = json_object_get(cfg, "add_bos_token"),
               *ae = json_object_get(cfg, "add_eos_token");
        if (json_is_boolean(ab) || json_is_boolean(ae)) {
            /* transformers' update_post_processor: the template becomes [bos] $A [eos] */
            bool add_bos = json_is_boolean(ab) ? json_is_true(ab) : false;
            bool add_eos = json_is_boolean(ae) ? json_is_true(ae) : false;
            if (!json_is_boolean(ab) || !json_is_boolean(ae)) {
                /* only one given: keep the post-processor's side for the other */
                bool tmpl_bos = c.n_post_pre > 0, tmpl_eos = c.n_post_suf > 0;
                if (!json_is_boolean(ab)) add_bos = tmpl_bos;
                if (!json_is_boolean(ae)) add_eos = tmpl_eos;
            }
            if ((add_bos && sp.bos < 0) || (add_eos && sp.eos < 0)) {
                st = pllm_errorf(PLLM_ERR_FORMAT,
                                 "%s: add_%s_token is true but there is no %s_token", config_path,
                                 add_bos && sp.bos < 0 ? "bos" : "eos",
                                 add_bos && sp.bos < 0 ? "bos" : "eos");
                goto done;
            }
            sp.n_post_pre = sp.n_post_suf = 0;
            if (add_bos) sp.post_pre[sp.n_post_pre++] = (int32_t)sp.bos;
            if (add_eos) sp.post_suf[sp.n_post_suf++] = (int32_t)sp.eos;
        }
    }
    /* no tokenizer_config.json entry: the single token the post-processor puts before
     * (after) the text is the BOS (EOS) */
    if (sp.bos < 0 && sp.n_post_pre == 1) sp.bos = sp.post_pre[0];
    if (sp.eos < 0 && sp.n_post_suf == 1) sp.eos = sp.post_suf[0];
    st = tok_build(out, &sp);
done:
    hf_ctx_free(&c);
    json_decref(root);
    json_decref(cfg);
    return st;
}

/* ---- vocab.json + merges.txt ---- */

pllm_status pllm_tokenizer_from_vocab_merges(pllm_tokenizer **out, const char *vocab_path,
                                             const char *merges_path)
{
    *out = NULL;
    json_t *vocab = NULL;
    hf_ctx c = {.path = vocab_path};
    pllm_status st = PLLM_OK;
    char *text = NULL;
    tok_strview *lines = NULL;
    FILE *f = NULL;
    if ((st = load_json(vocab_path, &vocab))) goto done;
    json_t *empty = json_array();
    st = build_vocab(&c, vocab, empty, false);
    json_decref(empty);
    if (st) goto done;

    f = fopen(merges_path, "rb");
    if (!f) {
        st = pllm_errorf(PLLM_ERR_IO, "%s: cannot open", merges_path);
        goto done;
    }
    pllm_buf b = {0};
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        if ((st = pllm_buf_append(&b, chunk, got))) {
            pllm_buf_free(&b);
            goto done;
        }
    text = b.s ? b.s : pllm_strdup("");
    size_t len = b.n, n_lines = 0, cap = 0;
    /* HF's BPE::read_file: a "#version" line is skipped; every other line is "a b" */
    for (size_t i = 0, line_no = 1; i < len; line_no++) {
        char *nl = memchr(text + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - text) : len, ll = e - i;
        if (ll && text[i + ll - 1] == '\r') ll--;
        if (!(ll >= 8 && memcmp(text + i, "#version", 8) == 0)) {
            char *sp = memchr(text + i, ' ', ll);
            if (!sp || memchr(sp + 1, ' ', ll - (size_t)(sp - (text + i)) - 1)) {
                st = pllm_errorf(PLLM_ERR_FORMAT, "%s: line %zu is not \"left right\"", merges_path,
                                 line_no);
                goto done;
            }
            if (n_lines + 2 > cap) {
                cap = cap ? 2 * cap : 1 << 16;
                tok_strview *p = pllm_realloc(lines, cap * sizeof *p);
                if (!p) {
                    st = PLLM_ERR_NOMEM;
                    goto done;
                }
                lines = p;
            }
            lines[n_lines++] = (tok_strview){text + i, (size_t)(sp - (text + i))};
            lines[n_lines++] = (tok_strview){sp + 1, ll - (size_t)(sp - (text + i)) - 1};
        }
        i = e + 1;
    }
    if (n_lines / 2 > INT32_MAX) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: too many merges", merges_path);
        goto done;
    }

    const char *re = tok_pretok_gpt2_regex();
    snprintf(c.pre.name, sizeof c.pre.name, "gpt2");
    if ((st = tok_pretok_add_split(&c.pre, re, strlen(re), false, TOK_SPLIT_ISOLATED, false,
                                   vocab_path)))
        goto done;
    c.dec.kind = TOK_DEC_BYTE_LEVEL;
    tok_added_spec eot = {.flags = TOK_ADDED | TOK_ADDED_SPECIAL | TOK_ADDED_NORMALIZED};
    int64_t eot_id = -1;
    for (int32_t i = 0; i < c.n_vocab; i++)
        if (c.tokens[i].len == 13 && memcmp(c.tokens[i].s, "<|endoftext|>", 13) == 0) {
            eot_id = i;
            eot.id = i;
            eot.content = c.tokens[i];
            c.types[i] = TOK_TYPE_CONTROL;
        }
    tok_spec sp = {
        .source = vocab_path,
        .model = TOK_MODEL_BYTE_BPE,
        .pre_built = &c.pre,
        .dec = &c.dec,
        .n_vocab = c.n_vocab,
        .tokens = c.tokens,
        .types = c.types,
        .n_merges = (int32_t)(n_lines / 2),
        .merge_pairs = lines,
        .merges_last_wins = true,
        .n_added = eot_id >= 0,
        .added = &eot,
        .bos = eot_id,
        .eos = eot_id,
        .unk = -1,
        .pad = -1,
        .eot = -1,
        .post_given = true,
        .key_tokens = vocab_path,
        .key_merges = merges_path,
    };
    st = tok_build(out, &sp);
done:
    if (f) fclose(f);
    free(text);
    free(lines);
    hf_ctx_free(&c);
    json_decref(vocab);
    return st;
}

/* ---- a model directory ---- */

static bool file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

pllm_status pllm_tokenizer_from_dir(pllm_tokenizer **out, const char *dir)
{
    *out = NULL;
    size_t n = strlen(dir) + 32;
    char *a = pllm_malloc(n), *b = pllm_malloc(n);
    pllm_status st;
    if (!a || !b) {
        st = PLLM_ERR_NOMEM;
        goto done;
    }
    snprintf(a, n, "%s/tokenizer.json", dir);
    if (file_exists(a)) {
        snprintf(b, n, "%s/tokenizer_config.json", dir);
        st = pllm_tokenizer_from_hf(out, a, file_exists(b) ? b : NULL);
        goto done;
    }
    snprintf(a, n, "%s/vocab.json", dir);
    snprintf(b, n, "%s/merges.txt", dir);
    if (file_exists(a) && file_exists(b)) {
        st = pllm_tokenizer_from_vocab_merges(out, a, b);
        goto done;
    }
    snprintf(a, n, "%s/tokenizer.model", dir);
    if (file_exists(a)) {
        st = pllm_tokenizer_from_sentencepiece(out, a);
        goto done;
    }
    st = pllm_errorf(PLLM_ERR_NOT_FOUND,
                     "%s: no tokenizer.json, vocab.json + merges.txt, or tokenizer.model", dir);
done:
    free(a);
    free(b);
    return st;
}

/*
 * tok_gguf.c: the GGUF builder. Reads tokenizer.ggml.* into a tok_spec and hands it to
 * tok_build(), which validates and copies it (the tokenizer does not keep the GGUF open).
 *
 * Keys: model (required), pre (default "default"), tokens (required), token_type (optional,
 * all normal when absent; must match tokens in length), merges (required for "gpt2"),
 * scores (required for "llama"), bos/eos/unknown/padding/eot token ids (optional; -1,
 * signed or as 0xFFFFFFFF, means none), add_bos_token / add_eos_token (optional; when
 * absent: BOS for llama3 and "llama", nothing otherwise, as llama.cpp does),
 * add_space_prefix (must be false for byte-level BPE; default true for "llama").
 *
 * Families:
 *   "gpt2": byte-level BPE, merges by rank, pre-tokenizer by name.
 *   "llama": SentencePiece BPE as llama.cpp runs it: spaces become "▁" and, with
 *     add_space_prefix, "▁" starts every fragment of text (the start of the input and after
 *     each control/user-defined token: Hugging Face's legacy Prepend normalizer does the
 *     same); symbols merge by piece score; characters that are no token fall back to their
 *     "<0xHH>" tokens (or unk). Decoding: "▁" -> " ", byte tokens, and with add_space_prefix
 *     the first leading space stripped (the Llama-2 tokenizer.json decoder).
 */
#include "tokenizer/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MODEL        "tokenizer.ggml.model"
#define KEY_PRE          "tokenizer.ggml.pre"
#define KEY_TOKENS       "tokenizer.ggml.tokens"
#define KEY_TYPES        "tokenizer.ggml.token_type"
#define KEY_MERGES       "tokenizer.ggml.merges"
#define KEY_SCORES       "tokenizer.ggml.scores"
#define KEY_BOS          "tokenizer.ggml.bos_token_id"
#define KEY_EOS          "tokenizer.ggml.eos_token_id"
#define KEY_UNK          "tokenizer.ggml.unknown_token_id"
#define KEY_PAD          "tokenizer.ggml.padding_token_id"
#define KEY_EOT          "tokenizer.ggml.eot_token_id"
#define KEY_ADD_BOS      "tokenizer.ggml.add_bos_token"
#define KEY_ADD_EOS      "tokenizer.ggml.add_eos_token"
#define KEY_SPACE_PREFIX "tokenizer.ggml.add_space_prefix"

static bool is_int_type(pllm_gguf_type t)
{
    return t == PLLM_GGUF_U8 || t == PLLM_GGUF_I8 || t == PLLM_GGUF_U16 || t == PLLM_GGUF_I16 ||
           t == PLLM_GGUF_U32 || t == PLLM_GGUF_I32 || t == PLLM_GGUF_U64 || t == PLLM_GGUF_I64;
}

static bool is_signed_type(pllm_gguf_type t)
{
    return t == PLLM_GGUF_I8 || t == PLLM_GGUF_I16 || t == PLLM_GGUF_I32 || t == PLLM_GGUF_I64;
}

/* An optional token id: absent or a signed -1 -> -1; otherwise the value (range-checked
 * against the vocabulary later by tok_build). */
static pllm_status opt_id(const pllm_gguf *g, const char *key, int64_t *out)
{
    *out = -1;
    const pllm_gguf_kv *kv = pllm_gguf_find(g, key);
    if (!kv) return PLLM_OK;
    if (!is_int_type(kv->type))
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: key '%s' at byte offset %zu is %s, expected an integer token id",
                           g->path, key, kv->offset, pllm_gguf_type_name(kv->type));
    /* "none" is -1: a signed -1, or -1 stored unsigned (0xFFFFFFFF, as llama.cpp's int32
     * cast of a u32 reads it) */
    if ((kv->type == PLLM_GGUF_U32 && kv->v.u == UINT32_MAX) ||
        (kv->type == PLLM_GGUF_U64 && kv->v.u == UINT64_MAX))
        return PLLM_OK;
    bool neg = is_signed_type(kv->type) && kv->v.i < 0;
    if (neg ? kv->v.i != -1 : kv->v.u > (uint64_t)INT32_MAX)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: key '%s' at byte offset %zu = %lld is not a token id", g->path, key,
                           kv->offset, neg ? (long long)kv->v.i : (long long)kv->v.u);
    *out = neg ? -1 : (int64_t)kv->v.u;
    return PLLM_OK;
}

static pllm_status opt_flag(const pllm_gguf *g, const char *key, int *out)
{
    *out = -1;
    if (!pllm_gguf_find(g, key)) return PLLM_OK;
    bool b = false;
    PLLM_TRY(pllm_gguf_get_bool(g, key, &b));
    *out = b;
    return PLLM_OK;
}

pllm_status pllm_tokenizer_from_gguf(pllm_tokenizer **out, const pllm_gguf *g)
{
    *out = NULL;
    pllm_gguf_str model;
    PLLM_TRY(pllm_gguf_get_str(g, KEY_MODEL, &model));
    bool spm = model.len == 5 && memcmp(model.s, "llama", 5) == 0;
    if (!spm && !(model.len == 4 && memcmp(model.s, "gpt2", 4) == 0))
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: %s = \"%.*s\" is not a supported tokenizer model (gpt2, llama)",
                           g->path, KEY_MODEL, (int)PLLM_MIN(model.len, 80), model.s);

    tok_spec sp = {
        .source = g->path,
        .model = spm ? TOK_MODEL_SPM_BPE : TOK_MODEL_BYTE_BPE,
        .ignore_merges = -1,
        .key_tokens = KEY_TOKENS,
        .key_types = KEY_TYPES,
        .key_merges = spm ? KEY_SCORES : KEY_MERGES,
        .key_bos = KEY_BOS,
        .key_eos = KEY_EOS,
        .key_unk = KEY_UNK,
        .key_pad = KEY_PAD,
        .key_eot = KEY_EOT,
    };

    const pllm_gguf_kv *pre = pllm_gguf_find(g, KEY_PRE);
    if (pre && !spm) {
        pllm_gguf_str s;
        PLLM_TRY(pllm_gguf_get_str(g, KEY_PRE, &s));
        sp.pre = s.s;
        sp.pre_len = s.len;
    }
    bool space_prefix = spm;
    PLLM_TRY(pllm_gguf_opt_bool(g, KEY_SPACE_PREFIX, &space_prefix));
    if (space_prefix && !spm)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: %s = true is not supported for byte-level BPE", g->path,
                           KEY_SPACE_PREFIX);
    tok_decoder dec;
    memset(&dec, 0, sizeof dec);
    if (spm) {
        dec.kind = TOK_DEC_PIECES;
        dec.byte_fallback = true;
        memcpy(dec.repl[0].from, "\xE2\x96\x81", 3);
        dec.repl[0].from_len = 3;
        dec.repl[0].to[0] = ' ';
        dec.repl[0].to_len = 1;
        dec.n_repl = 1;
        if (space_prefix) {
            dec.strip_start = 1;
            dec.strip_char[0] = ' ';
            dec.strip_char_len = 1;
        }
        sp.dec = &dec;
    }

    const pllm_gguf_kv *toks, *types = NULL, *merges;
    PLLM_TRY(pllm_gguf_get_arr(g, KEY_TOKENS, PLLM_GGUF_STRING, &toks));
    if (toks->arr_n == 0 || toks->arr_n > (uint64_t)INT32_MAX)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s' at byte offset %zu has %llu tokens",
                           g->path, KEY_TOKENS, toks->offset, (unsigned long long)toks->arr_n);
    sp.n_vocab = (int32_t)toks->arr_n;
    if (pllm_gguf_find(g, KEY_TYPES)) {
        PLLM_TRY(pllm_gguf_get_arr(g, KEY_TYPES, PLLM_GGUF_TYPE_COUNT, &types));
        if (!is_int_type(types->arr_type))
            return pllm_errorf(
                PLLM_ERR_FORMAT,
                "%s: key '%s' at byte offset %zu is an array of %s, expected integers", g->path,
                KEY_TYPES, types->offset, pllm_gguf_type_name(types->arr_type));
        if (types->arr_n != toks->arr_n)
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s' has %llu entries but '%s' has %llu",
                               g->path, KEY_TYPES, (unsigned long long)types->arr_n, KEY_TOKENS,
                               (unsigned long long)toks->arr_n);
    }
    const pllm_gguf_kv *scores = NULL;
    if (spm) {
        merges = NULL;
        pllm_status sst = pllm_gguf_get_arr(g, KEY_SCORES, PLLM_GGUF_F32, &scores);
        if (!sst && scores->arr_n != toks->arr_n)
            sst = pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s' has %llu entries but '%s' has %llu",
                              g->path, KEY_SCORES, (unsigned long long)scores->arr_n, KEY_TOKENS,
                              (unsigned long long)toks->arr_n);
        if (sst) return sst;
    } else {
        PLLM_TRY(pllm_gguf_get_arr(g, KEY_MERGES, PLLM_GGUF_STRING, &merges));
        if (merges->arr_n > (uint64_t)INT32_MAX)
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s' has %llu merges", g->path, KEY_MERGES,
                               (unsigned long long)merges->arr_n);
        sp.n_merges = (int32_t)merges->arr_n;
    }

    PLLM_TRY(opt_id(g, KEY_BOS, &sp.bos));
    PLLM_TRY(opt_id(g, KEY_EOS, &sp.eos));
    PLLM_TRY(opt_id(g, KEY_UNK, &sp.unk));
    PLLM_TRY(opt_id(g, KEY_PAD, &sp.pad));
    PLLM_TRY(opt_id(g, KEY_EOT, &sp.eot));
    PLLM_TRY(opt_flag(g, KEY_ADD_BOS, &sp.add_bos));
    PLLM_TRY(opt_flag(g, KEY_ADD_EOS, &sp.add_eos));

    pllm_status st = PLLM_OK;
    tok_norm norm = {0};
    tok_pretok none = {0};
    tok_strview *tv = pllm_malloc((size_t)sp.n_vocab * sizeof *tv);
    tok_strview *mv = pllm_malloc(((size_t)sp.n_merges + 1) * sizeof *mv);
    int32_t *ty = types ? pllm_malloc((size_t)sp.n_vocab * sizeof *ty) : NULL;
    float *sc = scores ? pllm_malloc((size_t)sp.n_vocab * sizeof *sc) : NULL;
    if (!tv || !mv || (types && !ty) || (scores && !sc)) {
        st = PLLM_ERR_NOMEM;
        goto done;
    }
    if (sc)
        for (int32_t i = 0; i < sp.n_vocab; i++)
            sc[i] = (float)pllm_gguf_arr_float(scores, (uint64_t)i);
    sp.scores = sc;
    if (spm) {
        /* llama.cpp: ' ' -> U+2581, and U+2581 before each fragment when add_space_prefix */
        tok_norm_step ns = {.kind = TOK_NORM_PREPEND};
        if (space_prefix) {
            ns.a = pllm_strdup("\xE2\x96\x81");
            ns.a_len = 3;
            if (!ns.a || (st = tok_norm_add(&norm, &ns, g->path))) {
                st = st ? st : PLLM_ERR_NOMEM;
                goto done;
            }
        }
        ns = (tok_norm_step){.kind = TOK_NORM_REPLACE,
                             .a = pllm_strdup(" "),
                             .a_len = 1,
                             .b = pllm_strdup("\xE2\x96\x81"),
                             .b_len = 3};
        if (!ns.a || !ns.b) {
            free(ns.a), free(ns.b);
            st = PLLM_ERR_NOMEM;
            goto done;
        }
        if ((st = tok_norm_add(&norm, &ns, g->path))) goto done;
        snprintf(none.name, sizeof none.name, "none");
        sp.norm = &norm;
        sp.pre_built = &none;
        sp.byte_fallback = true;
        sp.fuse_unk = true;
    }
    for (int32_t i = 0; i < sp.n_vocab; i++) {
        pllm_gguf_str s = pllm_gguf_arr_str(toks, (uint64_t)i);
        tv[i] = (tok_strview){s.s, s.len};
        if (ty) {
            int64_t v = pllm_gguf_arr_int(types, (uint64_t)i);
            ty[i] = v < INT32_MIN || v > INT32_MAX ? INT32_MIN : (int32_t)v;
        }
    }
    for (int32_t i = 0; i < sp.n_merges; i++) {
        pllm_gguf_str s = pllm_gguf_arr_str(merges, (uint64_t)i);
        mv[i] = (tok_strview){s.s, s.len};
    }
    sp.tokens = tv;
    sp.types = ty;
    sp.merges = mv;
    st = tok_build(out, &sp);
done:
    tok_norm_free(&norm);
    free(tv);
    free(mv);
    free(ty);
    free(sc);
    return st;
}

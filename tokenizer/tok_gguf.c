/*
 * tok_gguf.c: the GGUF builder. Reads tokenizer.ggml.* into a tok_spec and hands it to
 * tok_build(), which validates and copies it (the tokenizer does not keep the GGUF open).
 *
 * Keys: model (required), pre (default "default"), tokens (required), token_type (optional,
 * all normal when absent; must match tokens in length), merges (required for "gpt2"),
 * bos/eos/unknown/padding/eot token ids (optional; -1, signed or as 0xFFFFFFFF, means none),
 * add_bos_token / add_eos_token (optional; when absent: BOS for llama3, nothing otherwise,
 * as llama.cpp does), add_space_prefix (must be false for byte-level BPE).
 *
 * Families: "gpt2" (byte-level BPE) is built. "llama" (SentencePiece-style BPE with scores
 * and byte fallback) returns PLLM_ERR_UNSUPPORTED for now: its builder will read
 * tokenizer.ggml.scores and fill the same tok_spec with TOK_MODEL_SPM_BPE.
 */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#define KEY_MODEL        "tokenizer.ggml.model"
#define KEY_PRE          "tokenizer.ggml.pre"
#define KEY_TOKENS       "tokenizer.ggml.tokens"
#define KEY_TYPES        "tokenizer.ggml.token_type"
#define KEY_MERGES       "tokenizer.ggml.merges"
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
    if (model.len == 5 && memcmp(model.s, "llama", 5) == 0)
        return pllm_errorf(
            PLLM_ERR_UNSUPPORTED,
            "%s: %s = \"llama\" (SentencePiece-style BPE, as in Llama-2/TinyLlama/Mistral) is "
            "not supported yet; only \"gpt2\" (byte-level BPE) is",
            g->path, KEY_MODEL);
    if (!(model.len == 4 && memcmp(model.s, "gpt2", 4) == 0))
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: %s = \"%.*s\" is not a supported tokenizer model (gpt2)", g->path,
                           KEY_MODEL, (int)PLLM_MIN(model.len, 80), model.s);

    tok_spec sp = {
        .source = g->path,
        .model = TOK_MODEL_BYTE_BPE,
        .key_tokens = KEY_TOKENS,
        .key_types = KEY_TYPES,
        .key_merges = KEY_MERGES,
        .key_bos = KEY_BOS,
        .key_eos = KEY_EOS,
        .key_unk = KEY_UNK,
        .key_pad = KEY_PAD,
        .key_eot = KEY_EOT,
    };

    const pllm_gguf_kv *pre = pllm_gguf_find(g, KEY_PRE);
    if (pre) {
        pllm_gguf_str s;
        PLLM_TRY(pllm_gguf_get_str(g, KEY_PRE, &s));
        sp.pre = s.s;
        sp.pre_len = s.len;
    }
    bool space_prefix = false;
    PLLM_TRY(pllm_gguf_opt_bool(g, KEY_SPACE_PREFIX, &space_prefix));
    if (space_prefix)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: %s = true is not supported for byte-level BPE", g->path,
                           KEY_SPACE_PREFIX);

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
    PLLM_TRY(pllm_gguf_get_arr(g, KEY_MERGES, PLLM_GGUF_STRING, &merges));
    if (merges->arr_n > (uint64_t)INT32_MAX)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s' has %llu merges", g->path, KEY_MERGES,
                           (unsigned long long)merges->arr_n);
    sp.n_merges = (int32_t)merges->arr_n;

    PLLM_TRY(opt_id(g, KEY_BOS, &sp.bos));
    PLLM_TRY(opt_id(g, KEY_EOS, &sp.eos));
    PLLM_TRY(opt_id(g, KEY_UNK, &sp.unk));
    PLLM_TRY(opt_id(g, KEY_PAD, &sp.pad));
    PLLM_TRY(opt_id(g, KEY_EOT, &sp.eot));
    PLLM_TRY(opt_flag(g, KEY_ADD_BOS, &sp.add_bos));
    PLLM_TRY(opt_flag(g, KEY_ADD_EOS, &sp.add_eos));

    pllm_status st = PLLM_OK;
    tok_strview *tv = pllm_malloc((size_t)sp.n_vocab * sizeof *tv);
    tok_strview *mv = pllm_malloc(((size_t)sp.n_merges + 1) * sizeof *mv);
    int32_t *ty = types ? pllm_malloc((size_t)sp.n_vocab * sizeof *ty) : NULL;
    if (!tv || !mv || (types && !ty)) {
        st = PLLM_ERR_NOMEM;
        goto done;
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
    free(tv);
    free(mv);
    free(ty);
    return st;
}

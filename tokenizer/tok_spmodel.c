/*
 * tok_spmodel.c: the SentencePiece .model builder, with a minimal protobuf reader.
 *
 * A .model file is one ModelProto message (sentencepiece_model.proto). Read here:
 *   1 pieces (repeated SentencePiece: 1 piece string, 2 score float, 3 type enum
 *     NORMAL=1 UNKNOWN=2 CONTROL=3 USER_DEFINED=4 UNUSED=5 BYTE=6)
 *   2 trainer_spec: 3 model_type (must be BPE = 2), 35 byte_fallback, 40 unk_id, 41 bos_id,
 *     42 eos_id, 43 pad_id
 *   3 normalizer_spec: 1 name, 2 precompiled_charsmap, 3 add_dummy_prefix (default true),
 *     4 remove_extra_whitespaces (default true), 5 escape_whitespaces (default true)
 * Every other field is skipped by its wire type. Supported: BPE models whose normalizer is
 * the identity (no character map, no whitespace squeezing) with whitespace escaping, which
 * is what Llama-2 and Mistral ship. The tokenizer is the one GGUF "llama" gives for the
 * same pieces (types and scores carried over as llama.cpp's converter does), with BOS added
 * by default as transformers' LlamaTokenizer does.
 */
#include "tokenizer/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pb {
    const uint8_t *p, *end;
    const char *path;
} pb;

static pllm_status pb_varint(pb *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return pllm_errorf(PLLM_ERR_FORMAT, "%s: truncated varint", r->path);
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return PLLM_OK;
        }
    }
    return pllm_errorf(PLLM_ERR_FORMAT, "%s: varint longer than 10 bytes", r->path);
}

/* Next field: its number, wire type, and (wire type 2) the payload as a sub-reader, (0) the
 * varint, (5) the 32-bit word. */
static pllm_status pb_field(pb *r, uint32_t *field, int *wt, uint64_t *v, pb *sub)
{
    uint64_t key = 0;
    PLLM_TRY(pb_varint(r, &key));
    *field = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    switch (*wt) {
    case 0:
        return pb_varint(r, v);
    case 1:
        if (r->end - r->p < 8) break;
        memcpy(v, r->p, 8);
        r->p += 8;
        return PLLM_OK;
    case 2: {
        uint64_t len = 0;
        PLLM_TRY(pb_varint(r, &len));
        if ((uint64_t)(r->end - r->p) < len) break;
        *sub = (pb){r->p, r->p + len, r->path};
        r->p += len;
        return PLLM_OK;
    }
    case 5: {
        uint32_t w;
        if (r->end - r->p < 4) break;
        memcpy(&w, r->p, 4);
        r->p += 4;
        *v = w;
        return PLLM_OK;
    }
    default:
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: protobuf wire type %d is not supported", r->path,
                           *wt);
    }
    return pllm_errorf(PLLM_ERR_FORMAT, "%s: truncated protobuf field %u", r->path, *field);
}

typedef struct spm_model {
    tok_strview *pieces;
    float *scores;
    int32_t *types;
    int32_t n, cap;
    int64_t model_type, unk_id, bos_id, eos_id, pad_id;
    bool byte_fallback, add_dummy_prefix, remove_extra_ws, escape_ws;
    tok_strview norm_name;
    size_t charsmap_len;
} spm_model;

static pllm_status read_piece(pb *r, spm_model *m)
{
    if (m->n == m->cap) {
        int32_t cap = m->cap ? 2 * m->cap : 1024;
        tok_strview *p = pllm_realloc(m->pieces, (size_t)cap * sizeof *p);
        if (!p) return PLLM_ERR_NOMEM;
        m->pieces = p;
        float *s = pllm_realloc(m->scores, (size_t)cap * sizeof *s);
        if (!s) return PLLM_ERR_NOMEM;
        m->scores = s;
        int32_t *t = pllm_realloc(m->types, (size_t)cap * sizeof *t);
        if (!t) return PLLM_ERR_NOMEM;
        m->types = t;
        m->cap = cap;
    }
    tok_strview piece = {NULL, 0};
    float score = 0;
    int32_t type = 1;
    while (r->p < r->end) {
        uint32_t f;
        int wt;
        uint64_t v = 0;
        pb sub = {0};
        PLLM_TRY(pb_field(r, &f, &wt, &v, &sub));
        if (f == 1 && wt == 2)
            piece = (tok_strview){(const char *)sub.p, (size_t)(sub.end - sub.p)};
        if (f == 2 && wt == 5) {
            uint32_t w = (uint32_t)v;
            memcpy(&score, &w, 4);
        }
        if (f == 3 && wt == 0) type = (int32_t)v;
    }
    if (!piece.s) return pllm_errorf(PLLM_ERR_FORMAT, "%s: piece %d has no text", r->path, m->n);
    m->pieces[m->n] = piece;
    m->scores[m->n] = score;
    m->types[m->n] = type;
    m->n++;
    return PLLM_OK;
}

static int64_t as_int32(uint64_t v)
{
    return (int64_t)(int32_t)(uint32_t)v; /* int32 fields: negatives are 10-byte varints */
}

static pllm_status read_model(pb *r, spm_model *m)
{
    while (r->p < r->end) {
        uint32_t f;
        int wt;
        uint64_t v = 0;
        pb sub = {0};
        PLLM_TRY(pb_field(r, &f, &wt, &v, &sub));
        if (f == 1 && wt == 2) {
            PLLM_TRY(read_piece(&sub, m));
        } else if (f == 2 && wt == 2) { /* trainer_spec */
            while (sub.p < sub.end) {
                uint32_t g;
                int w2;
                uint64_t x = 0;
                pb s2 = {0};
                PLLM_TRY(pb_field(&sub, &g, &w2, &x, &s2));
                if (w2 != 0) continue;
                if (g == 3) m->model_type = (int64_t)x;
                if (g == 35) m->byte_fallback = x != 0;
                if (g == 40) m->unk_id = as_int32(x);
                if (g == 41) m->bos_id = as_int32(x);
                if (g == 42) m->eos_id = as_int32(x);
                if (g == 43) m->pad_id = as_int32(x);
            }
        } else if (f == 3 && wt == 2) { /* normalizer_spec */
            while (sub.p < sub.end) {
                uint32_t g;
                int w2;
                uint64_t x = 0;
                pb s2 = {0};
                PLLM_TRY(pb_field(&sub, &g, &w2, &x, &s2));
                if (g == 1 && w2 == 2)
                    m->norm_name = (tok_strview){(const char *)s2.p, (size_t)(s2.end - s2.p)};
                if (g == 2 && w2 == 2) m->charsmap_len = (size_t)(s2.end - s2.p);
                if (g == 3 && w2 == 0) m->add_dummy_prefix = x != 0;
                if (g == 4 && w2 == 0) m->remove_extra_ws = x != 0;
                if (g == 5 && w2 == 0) m->escape_ws = x != 0;
            }
        }
    }
    return PLLM_OK;
}

pllm_status pllm_tokenizer_from_sentencepiece(pllm_tokenizer **out, const char *path)
{
    *out = NULL;
    pllm_status st = PLLM_OK;
    pllm_buf data = {0};
    spm_model m = {.model_type = 1,
                   .unk_id = 0,
                   .bos_id = 1,
                   .eos_id = 2,
                   .pad_id = -1,
                   .add_dummy_prefix = true,
                   .remove_extra_ws = true,
                   .escape_ws = true};
    tok_norm norm = {0};
    tok_pretok none = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return pllm_errorf(PLLM_ERR_IO, "%s: cannot open", path);
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        if ((st = pllm_buf_append(&data, chunk, got))) goto done;
    if (ferror(f)) {
        st = pllm_errorf(PLLM_ERR_IO, "%s: read error", path);
        goto done;
    }
    if (data.n == 0) { /* data.s is NULL: no pointer arithmetic on it */
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: empty file (not a SentencePiece model)", path);
        goto done;
    }
    pb r = {(const uint8_t *)data.s, (const uint8_t *)data.s + data.n, path};
    if ((st = read_model(&r, &m))) goto done;
    if (m.n == 0) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: no pieces (not a SentencePiece model?)", path);
        goto done;
    }
    if (m.model_type != 2) {
        st = pllm_errorf(PLLM_ERR_UNSUPPORTED,
                         "%s: trainer_spec.model_type = %lld is not supported (only BPE = 2; "
                         "1 is Unigram)",
                         path, (long long)m.model_type);
        goto done;
    }
    bool identity =
        m.norm_name.len == 0 || (m.norm_name.len == 8 && memcmp(m.norm_name.s, "identity", 8) == 0);
    if (!identity || m.charsmap_len || m.remove_extra_ws || !m.escape_ws) {
        st = pllm_errorf(PLLM_ERR_UNSUPPORTED,
                         "%s: normalizer_spec (name \"%.*s\", %zu-byte charsmap, "
                         "remove_extra_whitespaces %d, escape_whitespaces %d) is not supported "
                         "(only the identity with whitespace escaping)",
                         path, (int)PLLM_MIN(m.norm_name.len, 40), m.norm_name.s, m.charsmap_len,
                         m.remove_extra_ws, m.escape_ws);
        goto done;
    }
    for (int32_t i = 0; i < m.n; i++)
        if (m.types[i] < 1 || m.types[i] > 6) {
            st = pllm_errorf(PLLM_ERR_FORMAT, "%s: piece %d has type %d", path, i, m.types[i]);
            goto done;
        }

    tok_norm_step ns = {.kind = TOK_NORM_PREPEND};
    if (m.add_dummy_prefix) {
        ns.a = pllm_strdup("\xE2\x96\x81");
        ns.a_len = 3;
        if (!ns.a) {
            st = PLLM_ERR_NOMEM;
            goto done;
        }
        if ((st = tok_norm_add(&norm, &ns, path))) goto done;
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
    if ((st = tok_norm_add(&norm, &ns, path))) goto done;
    snprintf(none.name, sizeof none.name, "none");

    tok_decoder dec;
    memset(&dec, 0, sizeof dec);
    dec.kind = TOK_DEC_PIECES;
    dec.byte_fallback = true;
    memcpy(dec.repl[0].from, "\xE2\x96\x81", 3);
    dec.repl[0].from_len = 3;
    dec.repl[0].to[0] = ' ';
    dec.repl[0].to_len = 1;
    dec.n_repl = 1;
    if (m.add_dummy_prefix) {
        dec.strip_start = 1;
        dec.strip_char[0] = ' ';
        dec.strip_char_len = 1;
    }
    tok_spec sp = {
        .source = path,
        .model = TOK_MODEL_SPM_BPE,
        .pre_built = &none,
        .norm = &norm,
        .dec = &dec,
        .n_vocab = m.n,
        .tokens = m.pieces,
        .types = m.types,
        .scores = m.scores,
        .byte_fallback = m.byte_fallback,
        .fuse_unk = true,
        .ignore_merges = 0,
        .bos = m.bos_id,
        .eos = m.eos_id,
        .unk = m.unk_id,
        .pad = m.pad_id,
        .eot = -1,
        .add_bos = 1,
        .add_eos = 0,
        .key_tokens = "pieces",
        .key_types = "pieces.type",
        .key_merges = "pieces.score",
        .key_bos = "trainer_spec.bos_id",
        .key_eos = "trainer_spec.eos_id",
        .key_unk = "trainer_spec.unk_id",
        .key_pad = "trainer_spec.pad_id",
    };
    st = tok_build(out, &sp);
done:
    fclose(f);
    tok_norm_free(&norm);
    pllm_buf_free(&data);
    free(m.pieces);
    free(m.scores);
    free(m.types);
    return st;
}

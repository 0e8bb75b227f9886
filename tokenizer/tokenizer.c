/*
 * tokenizer.c: the public tokenizer API (tokenizer.h) over the internal layers.
 *
 * encode(text), Hugging Face's Tokenizer::encode step by step:
 *   1. invalid UTF-8 is replaced by U+FFFD, one per maximal ill-formed subpart (as Python's
 *      bytes.decode('utf-8', errors='replace') does before Hugging Face ever sees the text);
 *   2. the post-processor's prefix ids (BOS) when add_special;
 *   3. added tokens not marked "normalized" are matched in the raw text (AddedVocabulary::
 *      find_matches: leftmost-longest over all of them; a special one is then dropped unless
 *      parse_special, a single_word one unless it stands between non-word characters;
 *      lstrip/rstrip swallow the whitespace beside the match);
 *   4. each fragment between them is normalized, then the "normalized" added tokens are
 *      matched in it the same way;
 *   5. each remaining piece is pre-tokenized and run through the model (BPE);
 *   6. the post-processor's suffix ids (EOS) when add_special.
 *   opts == NULL means {add_special = true, parse_special = true}, Hugging Face's defaults.
 *
 * decode(ids) and the incremental detokenizer share one path, so pushing ids one at a time
 * yields exactly the text of decoding them all at once. Skipped special tokens are removed
 * before the decoder sees the sequence, as in Hugging Face. Two decoders:
 *   ByteLevel: token bytes are concatenated and repaired as one stream (ill-formed subparts
 *     -> U+FFFD, as Rust's from_utf8_lossy in Hugging Face's ByteLevel decoder does);
 *   pieces (SentencePiece family): token strings with the Replace decoders applied; a run of
 *     "<0xHH>" tokens is its bytes when they are valid UTF-8, else one U+FFFD per byte
 *     (ByteFallback); Strip drops leading spaces of the whole text; Metaspace drops the
 *     replacement characters of the first token. The detokenizer holds back the current
 *     run of byte tokens (up to sizeof pllm_detok.pending bytes; a longer run is released
 *     early, its complete characters first, which can differ from decode() only when a
 *     later byte of that same run turns out invalid).
 */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unicode/uchar.h>

static const char k_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* ---- encode ---- */

typedef struct enc_ctx {
    const pllm_tokenizer *t;
    tok_ws *ws;
    pllm_tokens *out;
    bool parse_special;
} enc_ctx;

static pllm_status on_piece(void *c, const char *s, size_t n)
{
    enc_ctx *e = c;
    if (e->t->model == TOK_MODEL_SPM_BPE) return tok_spm_piece(e->t, e->ws, s, n, e->out);
    return tok_bpe_piece(e->t, e->ws, s, n, e->out);
}

/* Pre-tokenize and encode text that holds no added token. */
static pllm_status encode_pieces(enc_ctx *e, const char *s, size_t n, bool at_start)
{
    if (!n) return PLLM_OK;
    if (e->t->pre.n == 0) return on_piece(e, s, n);
    return tok_pretok_split(&e->t->pre, e->ws, s, n, at_start, on_piece, e);
}

/* Regex \w as Rust's regex crate has it: Alphabetic, marks, decimal digits, connector
 * punctuation, Join_Control. */
static bool is_word_char(uint32_t cp)
{
    return u_hasBinaryProperty((UChar32)cp, UCHAR_ALPHABETIC) ||
           (U_GET_GC_MASK((UChar32)cp) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) ||
           u_hasBinaryProperty((UChar32)cp, UCHAR_JOIN_CONTROL);
}

static uint32_t last_char(const char *s, size_t n, size_t *start)
{
    size_t k = n - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    uint32_t cp;
    tok_utf8_decode((const uint8_t *)s + k, &cp);
    if (start) *start = k;
    return cp;
}

/* The longest pattern of tr starting at s[0..n), or -1; *len gets its length. */
static int32_t trie_longest(const tok_trie *tr, const uint8_t *s, size_t n, size_t *len)
{
    int32_t best = -1, node = 0;
    for (size_t k = 0; k < n; k++) {
        int32_t c = tr->nodes[node].child;
        while (c >= 0 && tr->nodes[c].byte != s[k]) c = tr->nodes[c].sibling;
        if (c < 0) break;
        node = c;
        if (tr->nodes[node].id >= 0) {
            best = tr->nodes[node].id;
            *len = k + 1;
        }
    }
    return best;
}

typedef pllm_status (*frag_fn)(enc_ctx *e, const char *s, size_t n, bool at_start);

/* Hugging Face's AddedVocabulary::find_matches over s[0..n): tokens go to the output,
 * the text between them to fn. */
static pllm_status split_added(enc_ctx *e, const tok_trie *tr, const char *text, size_t n,
                               bool at_start, frag_fn fn)
{
    const pllm_tokenizer *t = e->t;
    const uint8_t *s = (const uint8_t *)text;
    size_t pos = 0, start_offset = 0;
    if (tr->n > 1) {
        while (pos < n) {
            if (!tr->first[s[pos]]) {
                pos++;
                continue;
            }
            size_t mlen = 0;
            int32_t id = trie_longest(tr, s + pos, n - pos, &mlen);
            if (id < 0) {
                pos++;
                continue;
            }
            size_t start = pos, stop = pos + mlen;
            pos = stop;
            uint8_t fl = t->added[id];
            if (!e->parse_special && (fl & TOK_ADDED_SPECIAL)) continue;
            if (fl & TOK_ADDED_SINGLE_WORD) {
                uint32_t cp;
                bool ok_left = start == 0 || !is_word_char(last_char(text, start, NULL));
                bool ok_right = stop == n || (tok_utf8_decode(s + stop, &cp), !is_word_char(cp));
                if (!ok_left || !ok_right) continue;
            }
            if (fl & TOK_ADDED_LSTRIP) {
                size_t k = start, ks;
                while (k > 0 && tok_is_space(last_char(text, k, &ks))) k = ks;
                start = PLLM_MAX(k, start_offset);
            }
            if (fl & TOK_ADDED_RSTRIP) {
                uint32_t cp;
                while (stop < n) {
                    size_t l = tok_utf8_decode(s + stop, &cp);
                    if (!tok_is_space(cp)) break;
                    stop += l;
                }
            }
            if (start_offset < start)
                PLLM_TRY(fn(e, text + start_offset, start - start_offset,
                            at_start && start_offset == 0));
            PLLM_TRY(pllm_tokens_push(e->out, id));
            start_offset = stop;
        }
    }
    if (start_offset < n)
        PLLM_TRY(fn(e, text + start_offset, n - start_offset, at_start && start_offset == 0));
    return PLLM_OK;
}

/* A fragment of raw text between added tokens: normalize, then split on normalized ones. */
static pllm_status encode_fragment(enc_ctx *e, const char *s, size_t n, bool at_start)
{
    const pllm_tokenizer *t = e->t;
    if (t->norm.n) {
        PLLM_TRY(tok_norm_apply(&t->norm, s, n, &e->ws->norm, &e->ws->norm_tmp));
        s = e->ws->norm.s;
        n = e->ws->norm.n;
    }
    if (t->trie_norm.n > 1) return split_added(e, &t->trie_norm, s, n, at_start, encode_pieces);
    return encode_pieces(e, s, n, at_start);
}

pllm_status pllm_tokenizer_encode(const pllm_tokenizer *t, const char *text, size_t len,
                                  const pllm_encode_opts *opts, pllm_tokens *out)
{
    pllm_encode_opts o =
        opts ? *opts : (pllm_encode_opts){.add_special = true, .parse_special = true};
    size_t n0 = out->n;
    tok_ws ws = {0};
    pllm_buf fixed = {0};
    enc_ctx e = {.t = t, .ws = &ws, .out = out, .parse_special = o.parse_special};
    pllm_status st = PLLM_OK;

    size_t valid = tok_utf8_valid_prefix((const uint8_t *)text, len);
    if (valid < len) {
        if ((st = tok_utf8_append_lossy(&fixed, (const uint8_t *)text, len))) goto done;
        text = fixed.s;
        len = fixed.n;
    }
    if (o.add_special && (st = pllm_tokens_append(out, t->post_pre, (size_t)t->n_post_pre)))
        goto done;
    if ((st = split_added(&e, &t->trie, text, len, true, encode_fragment))) goto done;
    if (o.add_special && (st = pllm_tokens_append(out, t->post_suf, (size_t)t->n_post_suf)))
        goto done;
done:
    if (st) out->n = n0;
    tok_ws_free(&ws);
    pllm_buf_free(&fixed);
    return st;
}

/* ---- decode and the incremental detokenizer ---- */

static pllm_status check_id(const pllm_tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab)
        return pllm_errorf(PLLM_ERR_RANGE, "token id %d is out of range (vocabulary has %d tokens)",
                           id, t->n_vocab);
    return PLLM_OK;
}

/* Append b[0..n) to the stream: complete characters go to out, a trailing valid prefix waits
 * in d->pending, ill-formed subparts become U+FFFD. Invariant: pending is always a valid but
 * incomplete prefix of a character (at most 3 bytes). */
static pllm_status detok_bytes(pllm_detok *d, const uint8_t *b, size_t n, pllm_buf *out)
{
    size_t i = 0;
    while (d->n_pending && i < n) {
        d->pending[d->n_pending++] = (char)b[i++];
        size_t bad;
        bool trunc;
        size_t clen = tok_utf8_char((const uint8_t *)d->pending, d->n_pending, &bad, &trunc);
        if (clen) {
            PLLM_TRY(pllm_buf_append(out, d->pending, clen));
            d->n_pending = 0;
        } else if (!trunc) {
            /* the new byte broke the sequence: the held prefix is one U+FFFD, and the new
             * byte is looked at again on its own */
            PLLM_TRY(pllm_buf_append(out, k_fffd, sizeof k_fffd));
            d->n_pending = 0;
            i--;
        }
    }
    while (i < n) {
        size_t v = tok_utf8_valid_prefix(b + i, n - i);
        if (v) PLLM_TRY(pllm_buf_append(out, b + i, v));
        i += v;
        if (i >= n) break;
        size_t bad;
        bool trunc;
        (void)tok_utf8_char(b + i, n - i, &bad, &trunc);
        if (trunc) {
            memcpy(d->pending, b + i, n - i);
            d->n_pending = n - i;
            break;
        }
        PLLM_TRY(pllm_buf_append(out, k_fffd, sizeof k_fffd));
        i += bad;
    }
    return PLLM_OK;
}

void pllm_detok_init(pllm_detok *d, const pllm_tokenizer *t, bool skip_special)
{
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->skip_special = skip_special;
    d->strip_left = t->dec.kind == TOK_DEC_PIECES ? t->dec.strip_start : 0;
}

/* Text out of the pieces decoder, through Strip (leading strip_char dropped while
 * strip_left lasts). */
static pllm_status emit_text(pllm_detok *d, const char *s, size_t n, pllm_buf *out)
{
    const tok_decoder *dec = &d->tok->dec;
    while (d->strip_left > 0 && n > 0) {
        if (n >= dec->strip_char_len && memcmp(s, dec->strip_char, dec->strip_char_len) == 0) {
            s += dec->strip_char_len;
            n -= dec->strip_char_len;
            d->strip_left--;
        } else {
            d->strip_left = 0;
        }
    }
    return n ? pllm_buf_append(out, s, n) : PLLM_OK;
}

/* The run of byte tokens held in pending: its text when it is valid UTF-8, else one U+FFFD
 * per byte (Hugging Face's ByteFallback). */
static pllm_status flush_run(pllm_detok *d, pllm_buf *out)
{
    size_t n = d->n_pending;
    if (!n) return PLLM_OK;
    d->n_pending = 0;
    if (tok_utf8_valid_prefix((const uint8_t *)d->pending, n) == n)
        return emit_text(d, d->pending, n, out);
    for (size_t i = 0; i < n; i++) PLLM_TRY(emit_text(d, k_fffd, sizeof k_fffd, out));
    return PLLM_OK;
}

static pllm_status push_piece(pllm_detok *d, int32_t id, pllm_buf *out)
{
    const pllm_tokenizer *t = d->tok;
    bool first = d->n_tokens++ == 0;
    if (t->dec_byte[id] >= 0) {
        if (d->n_pending == sizeof d->pending) {
            /* a run longer than the buffer: release its complete characters now */
            size_t v = tok_utf8_valid_prefix((const uint8_t *)d->pending, d->n_pending);
            size_t bad;
            bool trunc = false;
            if (v < d->n_pending)
                (void)tok_utf8_char((const uint8_t *)d->pending + v, d->n_pending - v, &bad,
                                    &trunc);
            if (v < d->n_pending && !trunc) {
                PLLM_TRY(flush_run(d, out));
            } else {
                PLLM_TRY(emit_text(d, d->pending, v, out));
                memmove(d->pending, d->pending + v, d->n_pending - v);
                d->n_pending -= v;
            }
        }
        d->pending[d->n_pending++] = (char)t->dec_byte[id];
        return PLLM_OK;
    }
    PLLM_TRY(flush_run(d, out));
    size_t n;
    const char *b = pllm_tokenizer_token_bytes(t, id, &n);
    if (first && t->dec.meta_repl_len) {
        /* Metaspace: the first token loses its replacement characters, which became ' ' in
         * the stored bytes: recompute from the token string */
        const char *s = t->str + t->str_off[id];
        size_t sn = t->str_off[id + 1] - t->str_off[id] - 1, from = 0;
        for (size_t i = 0; i + t->dec.meta_repl_len <= sn;) {
            if (memcmp(s + i, t->dec.meta_repl, t->dec.meta_repl_len) == 0) {
                PLLM_TRY(emit_text(d, s + from, i - from, out));
                i += t->dec.meta_repl_len;
                from = i;
            } else {
                i++;
            }
        }
        return emit_text(d, s + from, sn - from, out);
    }
    return emit_text(d, b, n, out);
}

pllm_status pllm_detok_push(pllm_detok *d, int32_t id, pllm_buf *out)
{
    const pllm_tokenizer *t = d->tok;
    PLLM_TRY(check_id(t, id));
    if (d->skip_special && pllm_tokenizer_is_special(t, id)) return PLLM_OK;
    if (t->dec.kind == TOK_DEC_PIECES) {
        PLLM_TRY(push_piece(d, id, out));
    } else {
        size_t n;
        const char *b = pllm_tokenizer_token_bytes(t, id, &n);
        PLLM_TRY(detok_bytes(d, (const uint8_t *)b, n, out));
    }
    /* a buffer that was never appended to is still NUL-terminated for the caller */
    return out->s ? PLLM_OK : pllm_buf_append(out, "", 0);
}

pllm_status pllm_detok_finish(pllm_detok *d, pllm_buf *out)
{
    if (d->tok->dec.kind == TOK_DEC_PIECES) {
        PLLM_TRY(flush_run(d, out));
    } else if (d->n_pending) {
        d->n_pending = 0;
        PLLM_TRY(pllm_buf_append(out, k_fffd, sizeof k_fffd));
    }
    return out->s ? PLLM_OK : pllm_buf_append(out, "", 0);
}

pllm_status pllm_tokenizer_decode(const pllm_tokenizer *t, const int32_t *ids, size_t n,
                                  bool skip_special, pllm_buf *out)
{
    for (size_t i = 0; i < n; i++) PLLM_TRY(check_id(t, ids[i]));
    pllm_detok d;
    pllm_detok_init(&d, t, skip_special);
    for (size_t i = 0; i < n; i++) PLLM_TRY(pllm_detok_push(&d, ids[i], out));
    return pllm_detok_finish(&d, out);
}

/* ---- lookups ---- */

int32_t pllm_tokenizer_n_vocab(const pllm_tokenizer *t)
{
    return t->n_vocab;
}
int32_t pllm_tokenizer_bos(const pllm_tokenizer *t)
{
    return t->bos;
}
int32_t pllm_tokenizer_eos(const pllm_tokenizer *t)
{
    return t->eos;
}

const int32_t *pllm_tokenizer_stop_ids(const pllm_tokenizer *t, int32_t *n)
{
    *n = t->n_stop;
    return t->stop_ids;
}

/* Special = what skip_special drops: special added tokens (GGUF: control tokens) and the
 * GGUF unknown token (Hugging Face conversions mark both special). */
bool pllm_tokenizer_is_special(const pllm_tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab) return false;
    if (t->added[id] & TOK_ADDED_NO_SKIP) return false;
    return (t->added[id] & TOK_ADDED_SPECIAL) || t->type[id] == TOK_TYPE_UNKNOWN;
}

const char *pllm_tokenizer_token_bytes(const pllm_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->bytes_off[id + 1] - t->bytes_off[id] - 1;
    return t->bytes + t->bytes_off[id];
}

int32_t pllm_tokenizer_find(const pllm_tokenizer *t, const char *s)
{
    return s ? tok_vocab_find(t, s, strlen(s)) : -1;
}

const char *pllm_tokenizer_describe(const pllm_tokenizer *t)
{
    return t->describe;
}

/*
 * tokenizer.c: the public tokenizer API (tokenizer.h) over the internal layers.
 *
 * encode(text):
 *   1. invalid UTF-8 is replaced by U+FFFD, one per maximal ill-formed subpart (as Python's
 *      bytes.decode('utf-8', errors='replace') does before Hugging Face ever sees the text);
 *   2. BOS when add_special and the model's metadata asks for it;
 *   3. the text is cut at tokens matched verbatim, leftmost first and longest at a position
 *      (Hugging Face's added-token matching): user-defined tokens always, control tokens
 *      only when parse_special;
 *   4. each fragment between them is pre-tokenized and BPE-merged;
 *   5. EOS when add_special and the metadata asks for it.
 *   opts == NULL means {add_special = true, parse_special = true}, Hugging Face's defaults.
 *
 * decode(ids) and the incremental detokenizer share one path: token bytes are concatenated
 * and repaired as one stream (ill-formed subparts -> U+FFFD, as Rust's from_utf8_lossy in
 * Hugging Face's ByteLevel decoder does), so pushing ids one at a time yields exactly the
 * text of decoding them all at once. Skipped special tokens contribute no bytes.
 */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

static const char k_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* ---- encode ---- */

typedef struct enc_ctx {
    const pllm_tokenizer *t;
    tok_ws *ws;
    pllm_tokens *out;
} enc_ctx;

static pllm_status on_piece(void *c, const char *s, size_t n)
{
    enc_ctx *e = c;
    return tok_bpe_piece(e->t, e->ws, s, n, e->out);
}

/* Encode text that contains no verbatim-matched token. */
static pllm_status encode_fragment(enc_ctx *e, const char *s, size_t n)
{
    switch (e->t->model) {
    case TOK_MODEL_BYTE_BPE:
        return tok_pretok_split(&e->t->pre, e->ws, s, n, on_piece, e);
    case TOK_MODEL_SPM_BPE:
        break;
    }
    return pllm_errorf(PLLM_ERR_INTERNAL, "tokenizer model %d has no encoder", (int)e->t->model);
}

/* The longest allowed verbatim token starting at s[0..n), or -1; *len gets its length. */
static int32_t match_special(const pllm_tokenizer *t, const uint8_t *s, size_t n,
                             bool parse_special, size_t *len)
{
    int32_t best = -1, node = 0;
    for (size_t k = 0; k < n; k++) {
        int32_t c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != s[k]) c = t->trie[c].sibling;
        if (c < 0) break;
        node = c;
        int32_t id = t->trie[node].id;
        if (id >= 0 && (parse_special || t->type[id] != TOK_TYPE_CONTROL)) {
            best = id;
            *len = k + 1;
        }
    }
    return best;
}

static pllm_status encode_text(enc_ctx *e, const char *text, size_t len, bool parse_special)
{
    const pllm_tokenizer *t = e->t;
    const uint8_t *s = (const uint8_t *)text;
    size_t frag = 0, i = 0;
    if (t->n_trie > 1) {
        while (i < len) {
            if (!t->trie_first[s[i]]) {
                i++;
                continue;
            }
            size_t mlen = 0;
            int32_t id = match_special(t, s + i, len - i, parse_special, &mlen);
            if (id < 0) {
                i++;
                continue;
            }
            if (i > frag) PLLM_TRY(encode_fragment(e, text + frag, i - frag));
            PLLM_TRY(pllm_tokens_push(e->out, id));
            i += mlen;
            frag = i;
        }
    }
    if (len > frag) PLLM_TRY(encode_fragment(e, text + frag, len - frag));
    return PLLM_OK;
}

pllm_status pllm_tokenizer_encode(const pllm_tokenizer *t, const char *text, size_t len,
                                  const pllm_encode_opts *opts, pllm_tokens *out)
{
    pllm_encode_opts o =
        opts ? *opts : (pllm_encode_opts){.add_special = true, .parse_special = true};
    size_t n0 = out->n;
    tok_ws ws = {0};
    pllm_buf fixed = {0};
    enc_ctx e = {.t = t, .ws = &ws, .out = out};
    pllm_status st = PLLM_OK;

    size_t valid = tok_utf8_valid_prefix((const uint8_t *)text, len);
    if (valid < len) {
        if ((st = tok_utf8_append_lossy(&fixed, (const uint8_t *)text, len))) goto done;
        text = fixed.s;
        len = fixed.n;
    }
    if (o.add_special && t->add_bos && (st = pllm_tokens_push(out, t->bos))) goto done;
    if ((st = encode_text(&e, text, len, o.parse_special))) goto done;
    if (o.add_special && t->add_eos && (st = pllm_tokens_push(out, t->eos))) goto done;
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
}

pllm_status pllm_detok_push(pllm_detok *d, int32_t id, pllm_buf *out)
{
    const pllm_tokenizer *t = d->tok;
    PLLM_TRY(check_id(t, id));
    if (d->skip_special && pllm_tokenizer_is_special(t, id)) return PLLM_OK;
    size_t n;
    const char *b = pllm_tokenizer_token_bytes(t, id, &n);
    PLLM_TRY(detok_bytes(d, (const uint8_t *)b, n, out));
    /* a buffer that was never appended to is still NUL-terminated for the caller */
    return out->s ? PLLM_OK : pllm_buf_append(out, "", 0);
}

pllm_status pllm_detok_finish(pllm_detok *d, pllm_buf *out)
{
    if (d->n_pending) {
        d->n_pending = 0;
        return pllm_buf_append(out, k_fffd, sizeof k_fffd);
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

/* Special = what skip_special drops: control tokens and the unknown token (Hugging Face
 * marks both special). */
bool pllm_tokenizer_is_special(const pllm_tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab) return false;
    return t->type[id] == TOK_TYPE_CONTROL || t->type[id] == TOK_TYPE_UNKNOWN;
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

/*
 * tok_vocab.c: the vocabulary tables and tok_build(), the validating constructor every
 * builder (GGUF, tokenizer.json, vocab.json + merges.txt, SentencePiece .model) ends with.
 */
#include "tokenizer/tokenizer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- string -> id ---- */

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

static uint64_t str_hash(const char *s, size_t n)
{
    return XXH3_64bits(s, n);
}

static const char *tok_str(const pllm_tokenizer *t, int32_t id, size_t *len)
{
    *len = t->str_off[id + 1] - t->str_off[id] - 1;
    return t->str + t->str_off[id];
}

int32_t tok_strmap_find(const tok_strmap *m, const char *base, const uint32_t *off, const char *s,
                        size_t n)
{
    uint64_t h = str_hash(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = (size_t)h & m->mask;; i = (i + 1) & m->mask) {
        int32_t v = m->slots[i];
        if (!v) return -1;
        if (m->hashes[i] == tag) {
            uint32_t o = off[v - 1];
            if (off[v] - o - 1 == n && memcmp(base + o, s, n) == 0) return v - 1;
        }
    }
}

int32_t tok_vocab_find(const pllm_tokenizer *t, const char *s, size_t n)
{
    return tok_strmap_find(&t->vocab, t->str, t->str_off, s, n);
}

static pllm_status strmap_init(tok_strmap *m, size_t n)
{
    size_t cap = pow2_at_least(n * 2);
    m->slots = pllm_calloc(cap, sizeof *m->slots);
    m->hashes = pllm_calloc(cap, sizeof *m->hashes);
    if (!m->slots || !m->hashes) return PLLM_ERR_NOMEM;
    m->mask = cap - 1;
    return PLLM_OK;
}

/* Insert id under its string base[off[id] .. off[id+1]-1); a later duplicate replaces an
 * earlier one (as a Python dict built from the token list, and llama.cpp, do). */
static void strmap_put(tok_strmap *m, const char *base, const uint32_t *off, int32_t id)
{
    const char *s = base + off[id];
    size_t n = off[id + 1] - off[id] - 1;
    uint64_t h = str_hash(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    size_t i = (size_t)h & m->mask;
    for (;; i = (i + 1) & m->mask) {
        int32_t v = m->slots[i];
        if (!v) break;
        if (m->hashes[i] == tag) {
            uint32_t o = off[v - 1];
            if (off[v] - o - 1 == n && memcmp(base + o, s, n) == 0) break;
        }
    }
    m->slots[i] = id + 1;
    m->hashes[i] = tag;
}

static void strmap_free(tok_strmap *m)
{
    free(m->slots);
    free(m->hashes);
}

/* ---- (left, right) -> merge ---- */

/* Returns false when the pair is already there: its rank is then replaced when replace,
 * else the earlier one is kept. */
static bool pairmap_put(tok_pairmap *m, int32_t left, int32_t right, int32_t rank, bool replace)
{
    const uint64_t key = tok_pair_key(left, right),
                   rank_mask = ((uint64_t)1 << TOK_PAIR_RANK_BITS) - 1;
    for (size_t i = tok_pair_slot(key, m->mask);; i = (i + 1) & m->mask) {
        uint64_t e = m->slots[i];
        if ((e & ~rank_mask) == key) {
            if (replace) m->slots[i] = key | (uint64_t)rank;
            return false;
        }
        if (!e) {
            m->slots[i] = key | (uint64_t)rank;
            return true;
        }
    }
}

/* ---- the added-token tries ---- */

static pllm_status trie_init(tok_trie *tr, size_t nodes)
{
    tr->nodes = pllm_malloc(nodes * sizeof *tr->nodes);
    if (!tr->nodes) return PLLM_ERR_NOMEM;
    tr->nodes[0] = (tok_trie_node){.child = -1, .sibling = -1, .id = -1, .byte = 0};
    tr->n = 1;
    return PLLM_OK;
}

/* Insert pattern s[0..n) (n >= 1) for id; the trie has room for n more nodes. A pattern
 * given twice keeps its first id (Hugging Face's matcher reports the first pattern). */
static void trie_insert(tok_trie *tr, const uint8_t *s, size_t n, int32_t id)
{
    int32_t node = 0;
    for (size_t k = 0; k < n; k++) {
        int32_t c = tr->nodes[node].child;
        while (c >= 0 && tr->nodes[c].byte != s[k]) c = tr->nodes[c].sibling;
        if (c < 0) {
            c = tr->n++;
            tr->nodes[c] = (tok_trie_node){
                .child = -1, .sibling = tr->nodes[node].child, .id = -1, .byte = s[k]};
            tr->nodes[node].child = c;
        }
        node = c;
    }
    if (tr->nodes[node].id < 0) tr->nodes[node].id = id;
    tr->first[s[0]] = true;
}

/* ---- building ---- */

void pllm_tokenizer_free(pllm_tokenizer *t)
{
    if (!t) return;
    free(t->str);
    free(t->str_off);
    free(t->type);
    free(t->added);
    free(t->bytes);
    free(t->bytes_off);
    free(t->dec_byte);
    strmap_free(&t->vocab);
    strmap_free(&t->whole);
    free(t->merges.slots);
    free(t->merge_result);
    free(t->merge_prio);
    free(t->char_id);
    free(t->trie.nodes);
    free(t->trie_norm.nodes);
    free(t->stop_ids);
    tok_norm_free(&t->norm);
    tok_pretok_free(&t->pre);
    free(t);
}

static pllm_status check_id(const tok_spec *sp, const char *key, int64_t v, int32_t *out)
{
    if (v < -1 || v >= sp->n_vocab)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: %s = %lld is out of range (vocabulary has %d tokens)", sp->source,
                           key ? key : "(special id)", (long long)v, sp->n_vocab);
    *out = (int32_t)v;
    return PLLM_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The byte of a "<0xHH>" token as Hugging Face's ByteFallback decoder reads it (six bytes,
 * two hex digits parsed like Rust's u8::from_str_radix, which also takes "+H"), or -1. */
static int byte_token_value(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    if (s[3] == '+') return hexval(s[4]);
    int a = hexval(s[3]), b = hexval(s[4]);
    return a < 0 || b < 0 ? -1 : a * 16 + b;
}

/* The decoded bytes of token id (dst NULL: only the length).
 * ByteLevel: each character back through the GPT-2 alphabet; a token with any character
 * outside it (an added token such as "\n\n" or "<think>") is its own UTF-8 text, as Hugging
 * Face's ByteLevel decoder does. Pieces: "<0xHH>" is that byte (ByteFallback), anything
 * else its string with the Replace decoders (and Metaspace's replacement -> ' ') applied.
 * s[0..n) is the token's string as the decoder sees it: its vocabulary string, except for a
 * "normalized" added token, which Hugging Face decodes from its normalized content. */
static size_t decoded_len(const pllm_tokenizer *t, int32_t id, const char *s, size_t n, char *dst)
{
    if (t->dec.kind == TOK_DEC_BYTE_LEVEL) {
        size_t k = 0, i = 0;
        while (i < n) {
            uint32_t cp;
            i += tok_utf8_decode((const uint8_t *)s + i, &cp);
            int b = tok_cp_to_byte(cp);
            if (b < 0) goto raw;
            if (dst) dst[k] = (char)b;
            k++;
        }
        return k;
    raw:
        if (dst) memcpy(dst, s, n);
        return n;
    }
    if (t->dec_byte[id] >= 0) {
        if (dst) dst[0] = (char)t->dec_byte[id];
        return 1;
    }
    /* Replace steps, in order; at most 16x growth per step is bounded by the caller's
     * two-pass use (length first, then copy with the same procedure) */
    char buf_a[1024], buf_b[1024];
    const char *cur = s;
    size_t cur_n = n;
    char *bufs[2] = {buf_a, buf_b};
    int which = 0;
    for (int r = 0; r <= t->dec.n_repl; r++) {
        const char *from = r < t->dec.n_repl ? t->dec.repl[r].from : t->dec.meta_repl;
        size_t from_len = r < t->dec.n_repl ? t->dec.repl[r].from_len : t->dec.meta_repl_len;
        const char *to = r < t->dec.n_repl ? t->dec.repl[r].to : " ";
        size_t to_len = r < t->dec.n_repl ? t->dec.repl[r].to_len : 1;
        if (!from_len) continue;
        char *o = bufs[which];
        size_t k = 0;
        for (size_t i = 0; i < cur_n;) {
            if (i + from_len <= cur_n && memcmp(cur + i, from, from_len) == 0) {
                if (k + to_len > sizeof buf_a) return (size_t)-1;
                memcpy(o + k, to, to_len);
                k += to_len;
                i += from_len;
            } else {
                if (k + 1 > sizeof buf_a) return (size_t)-1;
                o[k++] = cur[i++];
            }
        }
        cur = o;
        cur_n = k;
        which ^= 1;
    }
    if (dst) memcpy(dst, cur, cur_n);
    return cur_n;
}

/* The whole-piece map: text -> id of every model token whose text, encoded as one piece,
 * gives exactly that token. Found by running the encoder itself on each token, so a hit
 * returns what the merge loop would have. Byte-level keys are decoded bytes (pieces are raw
 * bytes there); SentencePiece-style keys are the token strings. */
static pllm_status build_whole(pllm_tokenizer *t)
{
    tok_ws ws = {0};
    pllm_tokens out = {0};
    pllm_status st = PLLM_OK;
    bool spm = t->model == TOK_MODEL_SPM_BPE;
    const char *base = spm ? t->str : t->bytes;
    const uint32_t *off = spm ? t->str_off : t->bytes_off;
    int32_t *ids = pllm_malloc((size_t)t->n_vocab * sizeof *ids);
    int32_t n = 0;
    if (!ids) return PLLM_ERR_NOMEM;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (t->added[id] & TOK_ADDED_NOT_MODEL) continue;
        out.n = 0;
        size_t len = off[id + 1] - off[id] - 1;
        st = spm ? tok_spm_piece_uncached(t, &ws, base + off[id], len, &out)
                 : tok_bpe_piece_uncached(t, &ws, base + off[id], len, &out);
        if (st) goto done;
        if (out.n == 1 && out.ids[0] == id) ids[n++] = id;
    }
    if ((st = strmap_init(&t->whole, (size_t)n))) goto done;
    for (int32_t i = 0; i < n; i++) strmap_put(&t->whole, base, off, ids[i]);
done:
    free(ids);
    pllm_tokens_free(&out);
    tok_ws_free(&ws);
    return st;
}

static const char *const k_end_of_turn[] = {
    "<|im_end|>", "<|eot_id|>",    "<|end|>",         "<|endoftext|>",
    "</s>",       "<end_of_turn>", "<|end_of_text|>", "<|eom_id|>",
};

static pllm_status add_stop(pllm_tokenizer *t, int32_t id)
{
    if (id < 0) return PLLM_OK;
    for (int32_t i = 0; i < t->n_stop; i++)
        if (t->stop_ids[i] == id) return PLLM_OK;
    int32_t *p = pllm_realloc(t->stop_ids, (size_t)(t->n_stop + 1) * sizeof *p);
    if (!p) return PLLM_ERR_NOMEM;
    t->stop_ids = p;
    t->stop_ids[t->n_stop++] = id;
    return PLLM_OK;
}

static pllm_status alloc_merges(pllm_tokenizer *t, const tok_spec *sp, int64_t n)
{
    if (n > TOK_MAX_MERGES || t->n_vocab > TOK_MAX_PAIR_VOCAB)
        return pllm_errorf(
            PLLM_ERR_UNSUPPORTED, "%s: %lld merges over %d tokens is more than supported (%d, %d)",
            sp->source, (long long)n, t->n_vocab, TOK_MAX_MERGES, TOK_MAX_PAIR_VOCAB);
    size_t cap = pow2_at_least((size_t)n * 2 + 1);
    t->merges.slots = pllm_calloc(cap, sizeof *t->merges.slots);
    t->merge_result = pllm_malloc(((size_t)n + 1) * sizeof *t->merge_result);
    if (!t->merges.slots || !t->merge_result) return PLLM_ERR_NOMEM;
    t->merges.mask = cap - 1;
    return PLLM_OK;
}

/* Merges given as a list ("left right" strings or left/right pairs), ranked by position. */
static pllm_status build_merges(pllm_tokenizer *t, const tok_spec *sp)
{
    const char *key = sp->key_merges ? sp->key_merges : "merges";
    PLLM_TRY(alloc_merges(t, sp, sp->n_merges));
    pllm_buf cat = {0};
    pllm_status st = PLLM_OK;
    for (int32_t r = 0; r < sp->n_merges; r++) {
        const char *m, *rs;
        size_t ln, rn, n;
        if (sp->merge_pairs) {
            m = sp->merge_pairs[2 * r].s, ln = sp->merge_pairs[2 * r].len;
            rs = sp->merge_pairs[2 * r + 1].s, rn = sp->merge_pairs[2 * r + 1].len;
            n = ln;
        } else {
            m = sp->merges[r].s;
            n = sp->merges[r].len;
            /* "left right": the first space after position 0 separates the halves (tokens
             * never contain a raw space; a leading one would belong to the left half) */
            const char *sp_at = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
            if (!sp_at || sp_at == m + n - 1) {
                st = pllm_errorf(PLLM_ERR_FORMAT, "%s: %s[%d] = \"%.*s\" is not \"left right\"",
                                 sp->source, key, r, (int)PLLM_MIN(n, 80), m);
                goto done;
            }
            ln = (size_t)(sp_at - m), rs = sp_at + 1, rn = n - ln - 1;
        }
        int32_t a = tok_vocab_find(t, m, ln), b = tok_vocab_find(t, rs, rn);
        cat.n = 0;
        if ((st = pllm_buf_append(&cat, m, ln)) || (st = pllm_buf_append(&cat, rs, rn))) goto done;
        int32_t c = tok_vocab_find(t, cat.s, cat.n);
        if (a < 0 || b < 0 || c < 0) {
            const char *what = a < 0 ? "left part" : b < 0 ? "right part" : "merged token";
            const char *ws = a < 0 ? m : b < 0 ? rs : cat.s;
            size_t wn = a < 0 ? ln : b < 0 ? rn : cat.n;
            st = pllm_errorf(PLLM_ERR_FORMAT,
                             "%s: %s[%d] (\"%.*s\" + \"%.*s\"): %s \"%.*s\" is "
                             "not in the vocabulary",
                             sp->source, key, r, (int)PLLM_MIN(ln, 80), m, (int)PLLM_MIN(rn, 80),
                             rs, what, (int)PLLM_MIN(wn, 80), ws);
            goto done;
        }
        t->merge_result[r] = c;
        (void)pairmap_put(&t->merges, a, b, r, sp->merges_last_wins);
    }
    t->n_merges = sp->n_merges;
done:
    pllm_buf_free(&cat);
    return st;
}

typedef struct score_pair {
    int32_t left, right, result;
    float score;
} score_pair;

static int cmp_score_pair(const void *x, const void *y)
{
    const score_pair *a = x, *b = y;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return a->result != b->result ? (a->result < b->result ? -1 : 1) : 0;
}

/* Score mode (SentencePiece BPE, llama.cpp's SPM tokenizer): two adjacent symbols merge
 * when their concatenation is a token; the highest-scoring such token merges first. Every
 * split of every token into two tokens is a possible merge; its priority is the rank of the
 * token in (score descending, id ascending) order, leftmost first for the same token. That
 * is the merge order of the tokenizer.json transformers converts from the same pieces
 * (its merges list is sorted stably by score), which Hugging Face then runs. llama.cpp and
 * sentencepiece break exact score ties between different tokens by position instead; the
 * Llama-2/Mistral vocabularies tie only their whitespace pieces ("▁▁", "▁▁▁▁", ... all at
 * -1e9), and there the two orders gave the same ids on every input tried (sentencepiece vs
 * the converted HF tokenizer on 3000 whitespace-heavy random strings and the test corpus). */
static pllm_status build_score_merges(pllm_tokenizer *t, const tok_spec *sp)
{
    pllm_status st = PLLM_OK;
    score_pair *pairs = NULL;
    size_t n = 0, cap = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!isfinite(sp->scores[id])) {
            st =
                pllm_errorf(PLLM_ERR_FORMAT, "%s: score of token %d is not finite", sp->source, id);
            goto done;
        }
        size_t len;
        const char *s = tok_str(t, id, &len);
        if (tok_vocab_find(t, s, len) != id) continue; /* a duplicate string: the map's id wins */
        /* a user-defined piece is an added token, matched whole in the text before the model
         * runs (set_added), never a merge result (Gemma's runs of spaces, "<table>", ...) */
        if (t->type[id] == TOK_TYPE_USER_DEFINED) continue;
        size_t first_len = 0;
        for (size_t k = 0; k < len;) {
            uint32_t cp;
            size_t cl = tok_utf8_decode((const uint8_t *)s + k, &cp);
            if (k == 0) first_len = cl;
            k += cl;
            if (k >= len) break;
            int32_t a = tok_vocab_find(t, s, k), b = tok_vocab_find(t, s + k, len - k);
            /* a character that is no token stays a raw symbol in llama.cpp and could still
             * merge with its neighbour into this token: not expressible with token ids */
            bool a_raw = a < 0 && k == first_len, b_raw = false;
            if (b < 0) {
                uint32_t cp2;
                b_raw = tok_utf8_decode((const uint8_t *)s + k, &cp2) == len - k;
            }
            if ((a_raw && (b >= 0 || b_raw)) || (b_raw && a >= 0)) {
                st = pllm_errorf(PLLM_ERR_UNSUPPORTED,
                                 "%s: token %d \"%.*s\" merges from a character that is not itself "
                                 "a token; not supported",
                                 sp->source, id, (int)PLLM_MIN(len, 80), s);
                goto done;
            }
            if (a < 0 || b < 0) continue;
            if (t->type[a] == TOK_TYPE_BYTE || t->type[b] == TOK_TYPE_BYTE) continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 4096;
                score_pair *p = pllm_realloc(pairs, cap * sizeof *p);
                if (!p) {
                    st = PLLM_ERR_NOMEM;
                    goto done;
                }
                pairs = p;
            }
            pairs[n++] = (score_pair){a, b, id, sp->scores[id]};
        }
    }
    if (n) qsort(pairs, n, sizeof *pairs, cmp_score_pair);
    if ((st = alloc_merges(t, sp, (int64_t)n))) goto done;
    t->merge_prio = pllm_malloc((n + 1) * sizeof *t->merge_prio);
    if (!t->merge_prio) {
        st = PLLM_ERR_NOMEM;
        goto done;
    }
    int32_t prio = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 &&
            (pairs[i].score != pairs[i - 1].score || pairs[i].result != pairs[i - 1].result))
            prio++;
        t->merge_result[i] = pairs[i].result;
        t->merge_prio[i] = prio;
        (void)pairmap_put(&t->merges, pairs[i].left, pairs[i].right, (int32_t)i, false);
    }
    t->n_merges = (int32_t)n;
done:
    free(pairs);
    return st;
}

static void default_decoder(tok_decoder *d, tok_model model)
{
    memset(d, 0, sizeof *d);
    if (model == TOK_MODEL_BYTE_BPE) {
        d->kind = TOK_DEC_BYTE_LEVEL;
        return;
    }
    d->kind = TOK_DEC_PIECES;
    d->byte_fallback = true;
    memcpy(d->repl[0].from, "\xE2\x96\x81", 3);
    d->repl[0].from_len = 3;
    d->repl[0].to[0] = ' ';
    d->repl[0].to_len = 1;
    d->n_repl = 1;
    d->strip_start = 1;
    d->strip_char[0] = ' ';
    d->strip_char_len = 1;
}

static pllm_status build_tries(pllm_tokenizer *t, const tok_spec *sp)
{
    size_t nodes = 1, nodes_norm = 1;
    pllm_buf norm = {0}, tmp = {0};
    pllm_status st = PLLM_OK;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (!(t->added[i] & TOK_ADDED)) continue;
        size_t len = t->str_off[i + 1] - t->str_off[i] - 1;
        if (t->added[i] & TOK_ADDED_NORMALIZED) {
            if ((st = tok_norm_apply(&t->norm, t->str + t->str_off[i], len, &norm, &tmp)))
                goto done;
            nodes_norm += norm.n;
        } else {
            nodes += len;
        }
    }
    if (nodes > INT32_MAX || nodes_norm > INT32_MAX) {
        st = pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: added tokens too long", sp->source);
        goto done;
    }
    if ((st = trie_init(&t->trie, nodes)) || (st = trie_init(&t->trie_norm, nodes_norm))) goto done;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (!(t->added[i] & TOK_ADDED)) continue;
        size_t len = t->str_off[i + 1] - t->str_off[i] - 1;
        if (t->added[i] & TOK_ADDED_NORMALIZED) {
            if ((st = tok_norm_apply(&t->norm, t->str + t->str_off[i], len, &norm, &tmp)))
                goto done;
            if (norm.n) trie_insert(&t->trie_norm, (const uint8_t *)norm.s, norm.n, i);
        } else {
            trie_insert(&t->trie, (const uint8_t *)t->str + t->str_off[i], len, i);
        }
    }
done:
    pllm_buf_free(&norm);
    pllm_buf_free(&tmp);
    return st;
}

/* Added tokens: from the builder's list, or (GGUF, .model) control and unknown tokens special
 * and user-defined ones not (llama.cpp's special-token cache; Hugging Face conversions add
 * <unk> as a special token). */
static pllm_status set_added(pllm_tokenizer *t, const tok_spec *sp)
{
    t->added = pllm_calloc((size_t)t->n_vocab, 1);
    if (!t->added) return PLLM_ERR_NOMEM;
    if (!sp->added) {
        for (int32_t i = 0; i < t->n_vocab; i++) {
            if (t->type[i] == TOK_TYPE_CONTROL || t->type[i] == TOK_TYPE_UNKNOWN)
                t->added[i] = TOK_ADDED | TOK_ADDED_SPECIAL;
            if (t->type[i] == TOK_TYPE_USER_DEFINED) t->added[i] = TOK_ADDED;
        }
        return PLLM_OK;
    }
    for (int32_t k = 0; k < sp->n_added; k++) {
        const tok_added_spec *a = &sp->added[k];
        if (a->id < 0 || a->id >= t->n_vocab)
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: added token %d has id %d, out of range",
                               sp->source, k, a->id);
        size_t len;
        const char *s = tok_str(t, a->id, &len);
        if (a->content.len != len || memcmp(a->content.s, s, len) != 0)
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: added token %d \"%.*s\" has id %d, which is \"%.*s\" in the "
                               "vocabulary",
                               sp->source, k, (int)PLLM_MIN(a->content.len, 80), a->content.s,
                               a->id, (int)PLLM_MIN(len, 80), s);
        t->added[a->id] = (uint8_t)(a->flags | TOK_ADDED);
    }
    return PLLM_OK;
}

pllm_status tok_build(pllm_tokenizer **out, const tok_spec *sp)
{
    *out = NULL;
    pllm_status st = PLLM_OK;
    const char *src = sp->source ? sp->source : "tokenizer";
    const char *key_tokens = sp->key_tokens ? sp->key_tokens : "tokens";
    const char *key_types = sp->key_types ? sp->key_types : "token types";
    pllm_tokenizer *t = pllm_calloc(1, sizeof *t);
    if (!t) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    /* take over the builder's stages first, so that every exit frees them */
    if (sp->norm) {
        t->norm = *sp->norm;
        sp->norm->n = 0;
    }
    if (sp->pre_built) {
        t->pre = *sp->pre_built;
        sp->pre_built->n = 0;
    }
    if (sp->model != TOK_MODEL_BYTE_BPE && sp->model != TOK_MODEL_SPM_BPE) {
        st = pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: tokenizer model %d is not supported", src,
                         (int)sp->model);
        goto fail;
    }
    if (sp->n_vocab <= 0) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: %s is empty", src, key_tokens);
        goto fail;
    }
    if (sp->n_merges < 0) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: negative merge count", src);
        goto fail;
    }
    t->model = sp->model;
    t->n_vocab = sp->n_vocab;
    size_t nv = (size_t)sp->n_vocab;
    if (sp->dec)
        t->dec = *sp->dec;
    else
        default_decoder(&t->dec, sp->model);

    /* strings */
    size_t total = 0;
    for (size_t i = 0; i < nv; i++) total += sp->tokens[i].len + 1;
    if (total > UINT32_MAX) {
        st = pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: %s: %zu bytes of token text is too much", src,
                         key_tokens, total);
        goto fail;
    }
    t->str = pllm_malloc(total);
    t->str_off = pllm_malloc((nv + 1) * sizeof *t->str_off);
    t->type = pllm_malloc(nv);
    t->dec_byte = pllm_malloc(nv * sizeof *t->dec_byte);
    if (!t->str || !t->str_off || !t->type || !t->dec_byte) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    size_t off = 0;
    for (size_t i = 0; i < nv; i++) {
        const tok_strview *v = &sp->tokens[i];
        if (v->len == 0) {
            st = pllm_errorf(PLLM_ERR_FORMAT, "%s: %s[%zu] is an empty string", src, key_tokens, i);
            goto fail;
        }
        if (memchr(v->s, 0, v->len)) {
            st =
                pllm_errorf(PLLM_ERR_FORMAT, "%s: %s[%zu] contains a NUL byte", src, key_tokens, i);
            goto fail;
        }
        if (tok_utf8_valid_prefix((const uint8_t *)v->s, v->len) != v->len) {
            st = pllm_errorf(PLLM_ERR_FORMAT, "%s: %s[%zu] is not valid UTF-8", src, key_tokens, i);
            goto fail;
        }
        t->str_off[i] = (uint32_t)off;
        memcpy(t->str + off, v->s, v->len);
        t->str[off + v->len] = 0;
        off += v->len + 1;
        int32_t ty = sp->types ? sp->types[i] : TOK_TYPE_NORMAL;
        if (ty < TOK_TYPE_UNDEFINED || ty > TOK_TYPE_BYTE) {
            st = pllm_errorf(PLLM_ERR_FORMAT, "%s: %s[%zu] = %d is not a token type (1..6)", src,
                             key_types, i, ty);
            goto fail;
        }
        t->type[i] = (uint8_t)(ty == TOK_TYPE_UNDEFINED ? TOK_TYPE_NORMAL : ty);
        t->dec_byte[i] = (int16_t)(t->dec.kind == TOK_DEC_PIECES && t->dec.byte_fallback
                                       ? byte_token_value(v->s, v->len)
                                       : -1);
    }
    t->str_off[nv] = (uint32_t)off;

    /* string -> id */
    if ((st = strmap_init(&t->vocab, nv))) goto fail;
    for (int32_t i = 0; i < t->n_vocab; i++) strmap_put(&t->vocab, t->str, t->str_off, i);
    if ((st = set_added(t, sp))) goto fail;

    /* special ids */
    if ((st = check_id(sp, sp->key_bos, sp->bos, &t->bos)) ||
        (st = check_id(sp, sp->key_eos, sp->eos, &t->eos)) ||
        (st = check_id(sp, sp->key_unk, sp->unk, &t->unk)) ||
        (st = check_id(sp, sp->key_pad, sp->pad, &t->pad)) ||
        (st = check_id(sp, sp->key_eot, sp->eot, &t->eot)))
        goto fail;

    /* pre-tokenizer (the GGUF byte-level family also takes its defaults from its name) */
    bool llama3 = false;
    if (!sp->pre_built && sp->model == TOK_MODEL_BYTE_BPE) {
        if ((st = tok_pretok_init(&t->pre, sp->pre, sp->pre ? sp->pre_len : 0))) {
            pllm_error_prefix(st, "%s: ", src);
            goto fail;
        }
        llama3 = strcmp(t->pre.name, "llama3") == 0;
    }
    t->ignore_merges = sp->ignore_merges < 0 ? llama3 : sp->ignore_merges != 0;
    if (sp->post_given) {
        if (sp->n_post_pre > TOK_MAX_POST || sp->n_post_suf > TOK_MAX_POST) {
            st = pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: post-processor adds more than %d tokens",
                             src, TOK_MAX_POST);
            goto fail;
        }
        for (int i = 0; i < sp->n_post_pre; i++)
            if ((st = check_id(sp, "post-processor token", sp->post_pre[i], &t->post_pre[i])))
                goto fail;
        for (int i = 0; i < sp->n_post_suf; i++)
            if ((st = check_id(sp, "post-processor token", sp->post_suf[i], &t->post_suf[i])))
                goto fail;
        t->n_post_pre = sp->n_post_pre;
        t->n_post_suf = sp->n_post_suf;
    } else {
        bool bos_default = llama3 || sp->model == TOK_MODEL_SPM_BPE;
        bool add_bos = sp->add_bos < 0 ? bos_default : sp->add_bos != 0;
        bool add_eos = sp->add_eos > 0;
        if (add_bos && t->bos < 0) {
            st = pllm_errorf(PLLM_ERR_FORMAT, "%s: add_bos_token is set but there is no %s", src,
                             sp->key_bos ? sp->key_bos : "BOS id");
            goto fail;
        }
        if (add_eos && t->eos < 0) {
            st = pllm_errorf(PLLM_ERR_FORMAT, "%s: add_eos_token is set but there is no %s", src,
                             sp->key_eos ? sp->key_eos : "EOS id");
            goto fail;
        }
        if (add_bos) t->post_pre[t->n_post_pre++] = t->bos;
        if (add_eos) t->post_suf[t->n_post_suf++] = t->eos;
    }

    /* symbols of single bytes / characters */
    for (int b = 0; b < 256; b++) {
        char u[8];
        size_t ul;
        if (sp->model == TOK_MODEL_BYTE_BPE)
            ul = tok_utf8_encode(tok_byte_to_cp((uint8_t)b), u);
        else
            ul = (size_t)snprintf(u, sizeof u, "<0x%02X>", b);
        t->byte_id[b] = tok_vocab_find(t, u, ul);
        if (t->byte_id[b] >= 0 && (t->added[t->byte_id[b]] & TOK_ADDED_NOT_MODEL))
            t->byte_id[b] = -1;
    }
    if (sp->model == TOK_MODEL_SPM_BPE) {
        t->byte_fallback = sp->byte_fallback;
        t->fuse_unk = sp->fuse_unk;
        t->char_id = pllm_malloc(TOK_CHAR_TABLE * sizeof *t->char_id);
        if (!t->char_id) {
            st = PLLM_ERR_NOMEM;
            goto fail;
        }
        for (uint32_t cp = 0; cp < TOK_CHAR_TABLE; cp++) {
            char u[4];
            int32_t id = -1;
            if (cp < 0xD800 || cp > 0xDFFF) id = tok_vocab_find(t, u, tok_utf8_encode(cp, u));
            if (id >= 0 && (t->added[id] & TOK_ADDED_NOT_MODEL)) id = -1;
            t->char_id[cp] = id;
        }
    }

    /* the SentencePiece cut rule (tok_spm.c): no model token has "▁" after another
     * character, "▁" itself is a token, no character can vanish, and no whole-piece lookup
     * (ignore_merges) */
    if (sp->model == TOK_MODEL_SPM_BPE) {
        bool all_bytes = t->byte_fallback;
        for (int b = 0; b < 256; b++) all_bytes = all_bytes && t->byte_id[b] >= 0;
        /* a character that vanishes (no byte tokens, no unk) would let its neighbours meet */
        t->spm_split = !t->ignore_merges && t->char_id[0x2581] >= 0 && (all_bytes || t->unk >= 0);
        for (int32_t i = 0; i < t->n_vocab && t->spm_split; i++) {
            if (t->added[i] & TOK_ADDED_NOT_MODEL) continue;
            size_t len;
            const char *s = tok_str(t, i, &len);
            for (size_t k = 1; k + 3 <= len && t->spm_split; k++)
                if (memcmp(s + k, "\xE2\x96\x81", 3) == 0 &&
                    !(k >= 3 && memcmp(s + k - 3, "\xE2\x96\x81", 3) == 0))
                    t->spm_split = false;
        }
    }

    /* merges */
    if (sp->scores) {
        if (sp->model != TOK_MODEL_SPM_BPE) {
            st = pllm_errorf(PLLM_ERR_INTERNAL, "%s: scores need the SentencePiece family", src);
            goto fail;
        }
        if ((st = build_score_merges(t, sp))) goto fail;
    } else if ((st = build_merges(t, sp))) {
        goto fail;
    }

    /* decoded bytes */
    size_t dtotal = 0;
    pllm_buf nb = {0}, nt = {0};
    for (int32_t i = 0; i < t->n_vocab; i++) {
        size_t sl;
        const char *ss = tok_str(t, i, &sl);
        if (t->added[i] & TOK_ADDED_NORMALIZED) {
            if ((st = tok_norm_apply(&t->norm, ss, sl, &nb, &nt))) goto fail_dec;
            ss = nb.s, sl = nb.n;
        }
        size_t dl = decoded_len(t, i, ss, sl, NULL);
        if (dl == (size_t)-1) {
            st = pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: token %d is too long to decode", src, i);
            goto fail_dec;
        }
        dtotal += dl + 1;
    }
    if (dtotal > UINT32_MAX) {
        st = pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: decoded vocabulary too large", src);
        goto fail_dec;
    }
    t->bytes = pllm_malloc(dtotal);
    t->bytes_off = pllm_malloc((nv + 1) * sizeof *t->bytes_off);
    if (!t->bytes || !t->bytes_off) {
        st = PLLM_ERR_NOMEM;
        goto fail_dec;
    }
    off = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        size_t sl;
        const char *ss = tok_str(t, i, &sl);
        if (t->added[i] & TOK_ADDED_NORMALIZED) {
            if ((st = tok_norm_apply(&t->norm, ss, sl, &nb, &nt))) goto fail_dec;
            bool changed = nb.n != sl || memcmp(nb.s, ss, sl) != 0;
            if ((t->added[i] & TOK_ADDED_SPECIAL) && changed) t->added[i] |= TOK_ADDED_NO_SKIP;
            if (changed && t->dec.meta_repl_len) {
                /* the detokenizer's first-token rule re-reads vocabulary strings */
                st = pllm_errorf(PLLM_ERR_UNSUPPORTED,
                                 "%s: added token %d \"%.*s\" is normalized to other text, which "
                                 "the Metaspace decoder is not supported with",
                                 src, i, (int)PLLM_MIN(sl, 80), ss);
                goto fail_dec;
            }
            ss = nb.s, sl = nb.n;
        }
        t->bytes_off[i] = (uint32_t)off;
        off += decoded_len(t, i, ss, sl, t->bytes + off);
        t->bytes[off++] = 0;
    }
    t->bytes_off[nv] = (uint32_t)off;
fail_dec:
    pllm_buf_free(&nb);
    pllm_buf_free(&nt);
    if (st) goto fail;

    if ((st = build_whole(t))) goto fail;
    if ((st = build_tries(t, sp))) goto fail;

    /* stop ids: EOS, EOT, and end-of-turn control tokens */
    if ((st = add_stop(t, t->eos)) || (st = add_stop(t, t->eot))) goto fail;
    for (size_t k = 0; k < PLLM_ARRAY_LEN(k_end_of_turn); k++) {
        int32_t id = tok_vocab_find(t, k_end_of_turn[k], strlen(k_end_of_turn[k]));
        if (id >= 0 && t->type[id] == TOK_TYPE_CONTROL && (st = add_stop(t, id))) goto fail;
    }

    if (sp->model == TOK_MODEL_BYTE_BPE && !sp->pre_built)
        snprintf(t->describe, sizeof t->describe,
                 "byte-level BPE (gpt2), pre-tokenizer %s, %d tokens, %d merges", t->pre.name,
                 t->n_vocab, t->n_merges);
    else
        snprintf(t->describe, sizeof t->describe, "%s%s%s, %d tokens, %d merges%s%s%s%s",
                 sp->model == TOK_MODEL_BYTE_BPE ? "byte-level BPE" : "SentencePiece-style BPE",
                 t->pre.n ? ", pre-tokenizer " : "", t->pre.n ? t->pre.name : "", t->n_vocab,
                 t->n_merges, sp->scores ? " (by score)" : "",
                 t->byte_fallback ? ", byte fallback" : "", t->norm.n ? ", normalized" : "",
                 t->spm_split ? ", pieces cut at word starts" : "");
    *out = t;
    return PLLM_OK;
fail:
    if (!t) {
        tok_norm_free(sp->norm);
        tok_pretok_free(sp->pre_built);
    }
    pllm_tokenizer_free(t);
    return st;
}

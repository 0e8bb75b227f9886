/*
 * tok_vocab.c: the vocabulary tables and tok_build(), the validating constructor every
 * builder (GGUF now, tokenizer.json later) ends with.
 */
#include "tokenizer/tokenizer_internal.h"

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

/* Returns false when the pair is already there (the earlier, lower rank is kept). */
static bool pairmap_put(tok_pairmap *m, int32_t left, int32_t right, int32_t rank)
{
    const uint64_t key = tok_pair_key(left, right),
                   rank_mask = ((uint64_t)1 << TOK_PAIR_RANK_BITS) - 1;
    for (size_t i = tok_pair_slot(key, m->mask);; i = (i + 1) & m->mask) {
        uint64_t e = m->slots[i];
        if ((e & ~rank_mask) == key) return false;
        if (!e) {
            m->slots[i] = key | (uint64_t)rank;
            return true;
        }
    }
}

/* ---- the special-token trie ---- */

static void trie_insert(pllm_tokenizer *t, int32_t id)
{
    size_t n;
    const uint8_t *s = (const uint8_t *)tok_str(t, id, &n);
    int32_t node = 0;
    for (size_t k = 0; k < n; k++) {
        int32_t c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != s[k]) c = t->trie[c].sibling;
        if (c < 0) {
            c = t->n_trie++;
            t->trie[c] = (tok_trie_node){
                .child = -1, .sibling = t->trie[node].child, .id = -1, .byte = s[k]};
            t->trie[node].child = c;
        }
        node = c;
    }
    t->trie[node].id = id;
    t->trie_first[s[0]] = true;
}

/* ---- building ---- */

void pllm_tokenizer_free(pllm_tokenizer *t)
{
    if (!t) return;
    free(t->str);
    free(t->str_off);
    free(t->type);
    free(t->bytes);
    free(t->bytes_off);
    strmap_free(&t->vocab);
    strmap_free(&t->whole);
    free(t->merges.slots);
    free(t->merge_result);
    free(t->trie);
    free(t->stop_ids);
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

/* The decoded bytes of token id: byte-level tokens map each character back through the
 * GPT-2 alphabet; a token with any character outside it (an added token such as "\n\n" or
 * "<think>") is its own UTF-8 text. This is what Hugging Face's ByteLevel decoder does. */
static size_t decoded_len(const pllm_tokenizer *t, int32_t id, char *dst)
{
    size_t n;
    const uint8_t *s = (const uint8_t *)tok_str(t, id, &n);
    if (t->model == TOK_MODEL_BYTE_BPE) {
        size_t k = 0, i = 0;
        while (i < n) {
            uint32_t cp;
            i += tok_utf8_decode(s + i, &cp);
            int b = tok_cp_to_byte(cp);
            if (b < 0) goto raw;
            if (dst) dst[k] = (char)b;
            k++;
        }
        return k;
    }
raw:
    if (dst) memcpy(dst, s, n);
    return n;
}

/* The whole-piece map: decoded bytes -> id of every token whose bytes, encoded as one
 * piece, give exactly that token. Found by running the encoder itself on each token, so a
 * hit in tok_bpe_piece returns what the merge loop would have. */
static pllm_status build_whole(pllm_tokenizer *t)
{
    tok_ws ws = {0};
    pllm_tokens out = {0};
    pllm_status st = PLLM_OK;
    int32_t *ids = pllm_malloc((size_t)t->n_vocab * sizeof *ids);
    int32_t n = 0;
    if (!ids) return PLLM_ERR_NOMEM;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        out.n = 0;
        size_t len = t->bytes_off[id + 1] - t->bytes_off[id] - 1;
        if ((st = tok_bpe_piece_uncached(t, &ws, t->bytes + t->bytes_off[id], len, &out)))
            goto done;
        if (out.n == 1 && out.ids[0] == id) ids[n++] = id;
    }
    if ((st = strmap_init(&t->whole, (size_t)n))) goto done;
    for (int32_t i = 0; i < n; i++) strmap_put(&t->whole, t->bytes, t->bytes_off, ids[i]);
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

static pllm_status build_merges(pllm_tokenizer *t, const tok_spec *sp)
{
    const char *key = sp->key_merges ? sp->key_merges : "merges";
    if (sp->n_merges > TOK_MAX_MERGES || t->n_vocab > TOK_MAX_PAIR_VOCAB)
        return pllm_errorf(
            PLLM_ERR_UNSUPPORTED, "%s: %d merges over %d tokens is more than supported (%d, %d)",
            sp->source, sp->n_merges, t->n_vocab, TOK_MAX_MERGES, TOK_MAX_PAIR_VOCAB);
    size_t cap = pow2_at_least((size_t)sp->n_merges * 2 + 1);
    t->merges.slots = pllm_calloc(cap, sizeof *t->merges.slots);
    t->merge_result = pllm_malloc(((size_t)sp->n_merges + 1) * sizeof *t->merge_result);
    if (!t->merges.slots || !t->merge_result) return PLLM_ERR_NOMEM;
    t->merges.mask = cap - 1;

    pllm_buf cat = {0};
    pllm_status st = PLLM_OK;
    for (int32_t r = 0; r < sp->n_merges; r++) {
        const char *m = sp->merges[r].s;
        size_t n = sp->merges[r].len;
        /* "left right": the first space after position 0 separates the halves (byte-level
         * tokens never contain a raw space; a leading one would belong to the left half) */
        const char *sp_at = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
        if (!sp_at || sp_at == m + n - 1) {
            st = pllm_errorf(PLLM_ERR_FORMAT, "%s: %s[%d] = \"%.*s\" is not \"left right\"",
                             sp->source, key, r, (int)PLLM_MIN(n, 80), m);
            goto done;
        }
        size_t ln = (size_t)(sp_at - m), rn = n - ln - 1;
        int32_t a = tok_vocab_find(t, m, ln), b = tok_vocab_find(t, sp_at + 1, rn);
        cat.n = 0;
        if ((st = pllm_buf_append(&cat, m, ln)) || (st = pllm_buf_append(&cat, sp_at + 1, rn)))
            goto done;
        int32_t c = tok_vocab_find(t, cat.s, cat.n);
        if (a < 0 || b < 0 || c < 0) {
            st = pllm_errorf(PLLM_ERR_FORMAT,
                             "%s: %s[%d] = \"%.*s\": %s \"%.*s\" is not in the vocabulary",
                             sp->source, key, r, (int)PLLM_MIN(n, 80), m,
                             a < 0   ? "left part"
                             : b < 0 ? "right part"
                                     : "merged token",
                             (int)PLLM_MIN(a < 0   ? ln
                                           : b < 0 ? rn
                                                   : cat.n,
                                           80),
                             a < 0   ? m
                             : b < 0 ? sp_at + 1
                                     : cat.s);
            goto done;
        }
        /* a repeated pair keeps its first (lowest) rank */
        t->merge_result[r] = c;
        (void)pairmap_put(&t->merges, a, b, r);
    }
    t->n_merges = sp->n_merges;
done:
    pllm_buf_free(&cat);
    return st;
}

pllm_status tok_build(pllm_tokenizer **out, const tok_spec *sp)
{
    *out = NULL;
    const char *src = sp->source ? sp->source : "tokenizer";
    const char *key_tokens = sp->key_tokens ? sp->key_tokens : "tokens";
    const char *key_types = sp->key_types ? sp->key_types : "token types";
    if (sp->model != TOK_MODEL_BYTE_BPE)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: tokenizer model %d is not supported", src,
                           (int)sp->model);
    if (sp->n_vocab <= 0) return pllm_errorf(PLLM_ERR_FORMAT, "%s: %s is empty", src, key_tokens);
    if (sp->n_merges < 0) return pllm_errorf(PLLM_ERR_FORMAT, "%s: negative merge count", src);

    pllm_status st = PLLM_OK;
    pllm_tokenizer *t = pllm_calloc(1, sizeof *t);
    if (!t) return PLLM_ERR_NOMEM;
    t->model = sp->model;
    t->n_vocab = sp->n_vocab;
    size_t nv = (size_t)sp->n_vocab;

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
    if (!t->str || !t->str_off || !t->type) {
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
    }
    t->str_off[nv] = (uint32_t)off;

    /* string -> id */
    if ((st = strmap_init(&t->vocab, nv))) goto fail;
    for (int32_t i = 0; i < t->n_vocab; i++) strmap_put(&t->vocab, t->str, t->str_off, i);

    /* special ids */
    if ((st = check_id(sp, sp->key_bos, sp->bos, &t->bos)) ||
        (st = check_id(sp, sp->key_eos, sp->eos, &t->eos)) ||
        (st = check_id(sp, sp->key_unk, sp->unk, &t->unk)) ||
        (st = check_id(sp, sp->key_pad, sp->pad, &t->pad)) ||
        (st = check_id(sp, sp->key_eot, sp->eot, &t->eot)))
        goto fail;

    /* pre-tokenizer (decides the family defaults below) */
    if ((st = tok_pretok_init(&t->pre, sp->pre, sp->pre ? sp->pre_len : 0))) {
        pllm_error_prefix(st, "%s: ", src);
        goto fail;
    }
    t->ignore_merges = strcmp(t->pre.name, "llama3") == 0;
    bool bos_default = strcmp(t->pre.name, "llama3") == 0;
    t->add_bos = sp->add_bos < 0 ? bos_default : sp->add_bos != 0;
    t->add_eos = sp->add_eos > 0;
    if (t->add_bos && t->bos < 0) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: add_bos_token is set but there is no %s", src,
                         sp->key_bos ? sp->key_bos : "BOS id");
        goto fail;
    }
    if (t->add_eos && t->eos < 0) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: add_eos_token is set but there is no %s", src,
                         sp->key_eos ? sp->key_eos : "EOS id");
        goto fail;
    }

    /* merges and the byte symbols */
    if ((st = build_merges(t, sp))) goto fail;
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t ul = tok_utf8_encode(tok_byte_to_cp((uint8_t)b), u);
        t->byte_id[b] = tok_vocab_find(t, u, ul);
    }

    /* decoded bytes */
    size_t dtotal = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) dtotal += decoded_len(t, i, NULL) + 1;
    t->bytes = pllm_malloc(dtotal);
    t->bytes_off = pllm_malloc((nv + 1) * sizeof *t->bytes_off);
    if (!t->bytes || !t->bytes_off) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    off = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        t->bytes_off[i] = (uint32_t)off;
        off += decoded_len(t, i, t->bytes + off);
        t->bytes[off++] = 0;
    }
    t->bytes_off[nv] = (uint32_t)off;

    if ((st = build_whole(t))) goto fail;

    /* trie of the tokens matched in raw text: control and user-defined */
    size_t nodes = 1;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->type[i] == TOK_TYPE_CONTROL || t->type[i] == TOK_TYPE_USER_DEFINED)
            nodes += t->str_off[i + 1] - t->str_off[i] - 1;
    if (nodes > INT32_MAX) {
        st = pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: special tokens too long", src);
        goto fail;
    }
    t->trie = pllm_malloc(nodes * sizeof *t->trie);
    if (!t->trie) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    t->trie[0] = (tok_trie_node){.child = -1, .sibling = -1, .id = -1, .byte = 0};
    t->n_trie = 1;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->type[i] == TOK_TYPE_CONTROL || t->type[i] == TOK_TYPE_USER_DEFINED)
            trie_insert(t, i);

    /* stop ids: EOS, EOT, and end-of-turn control tokens */
    if ((st = add_stop(t, t->eos)) || (st = add_stop(t, t->eot))) goto fail;
    for (size_t k = 0; k < PLLM_ARRAY_LEN(k_end_of_turn); k++) {
        int32_t id = tok_vocab_find(t, k_end_of_turn[k], strlen(k_end_of_turn[k]));
        if (id >= 0 && t->type[id] == TOK_TYPE_CONTROL && (st = add_stop(t, id))) goto fail;
    }

    snprintf(t->describe, sizeof t->describe,
             "byte-level BPE (gpt2), pre-tokenizer %s, %d tokens, %d merges", t->pre.name,
             t->n_vocab, t->n_merges);
    *out = t;
    return PLLM_OK;
fail:
    pllm_tokenizer_free(t);
    return st;
}

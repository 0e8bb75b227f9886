/*
 * tok_bpe.c: byte-level BPE of one pre-tokenized piece.
 *
 * The piece's bytes become symbols (the token of each byte's GPT-2 alphabet character; a
 * byte whose character is not in the vocabulary is dropped, as Hugging Face's BPE does with
 * no unk token). Then, repeatedly, the adjacent pair with the lowest merge rank is merged,
 * the leftmost one among equal ranks, until no adjacent pair has a merge. This order is
 * Hugging Face's (word.rs: a min-heap on (rank, position)).
 *
 * Fast path: a piece whose bytes are those of a token that this very procedure encodes as
 * itself (checked for every token when the tokenizer is built) is that token.
 *
 * Two implementations of the same order:
 *  - short pieces (the common case): an array of symbols with the rank of each adjacent
 *    pair cached; each merge rescans the ranks (O(m) per merge, no hashing but 2 lookups);
 *  - long pieces: a binary heap of (rank, left position) over a linked list of symbols with
 *    lazy deletion; O(m log m) overall, so thousands of characters without spaces stay fast.
 */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>

#define BPE_SMALL     48
#define BPE_WHOLE_MAX 64 /* longest piece looked up whole (longer ones are rarely one token) */

pllm_status tok_ws_reserve(tok_ws *ws, size_t m)
{
    if (m <= ws->cap) return PLLM_OK;
    size_t cap = ws->cap ? ws->cap : 256;
    while (cap < m) cap *= 2;
    int32_t *a = pllm_realloc(ws->sym, cap * sizeof *a);
    if (!a) return PLLM_ERR_NOMEM;
    ws->sym = a;
    a = pllm_realloc(ws->prev, cap * sizeof *a);
    if (!a) return PLLM_ERR_NOMEM;
    ws->prev = a;
    a = pllm_realloc(ws->next, cap * sizeof *a);
    if (!a) return PLLM_ERR_NOMEM;
    ws->next = a;
    ws->cap = cap;
    return PLLM_OK;
}

static inline int32_t pair_rank(const pllm_tokenizer *t, int32_t a, int32_t b)
{
    return tok_merge_rank(&t->merges, a, b);
}

/* sym[0..m) merged in place; returns the new count. rank[i] caches the pair (i, i+1). */
static size_t bpe_small(const pllm_tokenizer *t, int32_t *sym, size_t m)
{
    int32_t rank[BPE_SMALL];
    for (size_t i = 0; i + 1 < m; i++) rank[i] = pair_rank(t, sym[i], sym[i + 1]);
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        sym[best] = t->merge_result[rank[best]];
        for (size_t i = best + 1; i + 1 < m; i++) sym[i] = sym[i + 1];
        for (size_t i = best + 1; i + 2 < m; i++) rank[i] = rank[i + 1];
        m--;
        if (best > 0) rank[best - 1] = pair_rank(t, sym[best - 1], sym[best]);
        if (best + 1 < m) rank[best] = pair_rank(t, sym[best], sym[best + 1]);
    }
    return m;
}

/* ---- the heap version ---- */

static void push_pair(const pllm_tokenizer *t, tok_ws *ws, size_t *hn, int32_t left)
{
    if (left < 0) return;
    int32_t right = ws->next[left];
    if (right < 0) return;
    int32_t rank = pair_rank(t, ws->sym[left], ws->sym[right]);
    if (rank != INT32_MAX) tok_heap_push(ws->heap, hn, (tok_heap_item){.rank = rank, .pos = left});
}

static pllm_status bpe_large(const pllm_tokenizer *t, tok_ws *ws, size_t m, pllm_tokens *out)
{
    size_t need = 3 * m;
    if (need > ws->heap_cap) {
        tok_heap_item *h = pllm_realloc(ws->heap, need * sizeof *h);
        if (!h) return PLLM_ERR_NOMEM;
        ws->heap = h;
        ws->heap_cap = need;
    }
    int32_t *sym = ws->sym, *prev = ws->prev, *next = ws->next;
    for (size_t i = 0; i < m; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < m; i++) push_pair(t, ws, &hn, (int32_t)i);
    while (hn) {
        tok_heap_item it = tok_heap_pop(ws->heap, &hn);
        int32_t l = it.pos;
        if (sym[l] < 0) continue; /* merged into its left neighbour */
        int32_t r = next[l];
        if (r < 0) continue;
        if (pair_rank(t, sym[l], sym[r]) != it.rank) continue; /* stale: the pair changed since */
        sym[l] = t->merge_result[it.rank];
        sym[r] = -1;
        next[l] = next[r];
        if (next[r] >= 0) prev[next[r]] = l;
        push_pair(t, ws, &hn, prev[l]);
        push_pair(t, ws, &hn, l);
    }
    PLLM_TRY(pllm_tokens_reserve(out, out->n + m));
    for (int32_t i = 0; i >= 0; i = next[i]) out->ids[out->n++] = sym[i];
    return PLLM_OK;
}

pllm_status tok_bpe_piece(const pllm_tokenizer *t, tok_ws *ws, const char *s, size_t n,
                          pllm_tokens *out)
{
    /* most pieces of ordinary text are one token: found without merging */
    if (n <= BPE_WHOLE_MAX && t->whole.slots) {
        int32_t id = tok_strmap_find(&t->whole, t->bytes, t->bytes_off, s, n);
        if (id >= 0) return pllm_tokens_push(out, id);
    }
    return tok_bpe_piece_uncached(t, ws, s, n, out);
}

pllm_status tok_bpe_piece_uncached(const pllm_tokenizer *t, tok_ws *ws, const char *s, size_t n,
                                   pllm_tokens *out)
{
    if (t->ignore_merges) {
        /* a piece that is itself a token is emitted whole (Hugging Face's ignore_merges) */
        ws->scratch.n = 0;
        for (size_t i = 0; i < n; i++) {
            char u[4];
            size_t ul = tok_utf8_encode(tok_byte_to_cp((uint8_t)s[i]), u);
            PLLM_TRY(pllm_buf_append(&ws->scratch, u, ul));
        }
        int32_t id = tok_vocab_find(t, ws->scratch.s, ws->scratch.n);
        if (id >= 0) return pllm_tokens_push(out, id);
    }
    PLLM_TRY(tok_ws_reserve(ws, n));
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[(uint8_t)s[i]];
        if (id >= 0) ws->sym[m++] = id;
    }
    if (m == 0) return PLLM_OK;
    if (m <= BPE_SMALL) {
        m = bpe_small(t, ws->sym, m);
        return pllm_tokens_append(out, ws->sym, m);
    }
    return bpe_large(t, ws, m, out);
}

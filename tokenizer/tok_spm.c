/*
 * tok_spm.c: SentencePiece-style BPE of one piece (Llama-2, TinyLlama, Mistral, Phi-3).
 *
 * Symbols are the piece's characters (the text already carries the "▁" space marker: the
 * normalizer or pre-tokenizer put it there). A character that is not a token becomes, as
 * Hugging Face's BPE::merge_word does:
 *   - with byte_fallback, one "<0xHH>" token per byte, when all of them exist;
 *   - else the unk token (consecutive ones fused into one when fuse_unk; an unk waiting to
 *     be fused is emitted when the next known character arrives, after any byte tokens in
 *     between, exactly as HF orders them);
 *   - else nothing.
 * Then adjacent pairs merge in priority order, leftmost first among equals:
 *   - rank mode (tokenizer.json merges): the merge's index in the list;
 *   - score mode (GGUF "llama", SentencePiece .model): the merged piece's score, higher
 *     first, as llama.cpp and sentencepiece do. tok_build turned the scores into pair
 *     priorities (merge_prio), so both modes run the same loop.
 * Two loops with the same order: a rescanning array for short pieces, a heap over a linked
 * list for long ones (a whole paragraph is one piece when there is no pre-tokenizer).
 *
 * Fast path: when no token of the vocabulary contains "▁" right after another character
 * (checked when the tokenizer is built: true of Llama-2, Mistral and Phi-3), no merge can
 * join the symbols on both sides of such a position, so the piece is cut there and each part
 * (a word with its leading space marker, mostly) is encoded alone: the merges inside a part
 * happen in the same relative order either way. Parts that are whole tokens come from the
 * whole-piece map without merging.
 */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#define SPM_SMALL     32
#define SPM_WHOLE_MAX 48

static inline int32_t pair_prio(const pllm_tokenizer *t, int32_t a, int32_t b, int32_t *idx)
{
    int32_t r = tok_merge_rank(&t->merges, a, b);
    *idx = r;
    if (r == INT32_MAX) return INT32_MAX;
    return t->merge_prio ? t->merge_prio[r] : r;
}

static size_t merge_small(const pllm_tokenizer *t, int32_t *sym, size_t m)
{
    int32_t prio[SPM_SMALL], idx[SPM_SMALL];
    for (size_t i = 0; i + 1 < m; i++) prio[i] = pair_prio(t, sym[i], sym[i + 1], &idx[i]);
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (prio[i] < prio[best]) best = i;
        if (prio[best] == INT32_MAX) break;
        sym[best] = t->merge_result[idx[best]];
        for (size_t i = best + 1; i + 1 < m; i++) sym[i] = sym[i + 1];
        for (size_t i = best + 1; i + 2 < m; i++) prio[i] = prio[i + 1], idx[i] = idx[i + 1];
        m--;
        if (best > 0) prio[best - 1] = pair_prio(t, sym[best - 1], sym[best], &idx[best - 1]);
        if (best + 1 < m) prio[best] = pair_prio(t, sym[best], sym[best + 1], &idx[best]);
    }
    return m;
}

static void push_pair(const pllm_tokenizer *t, tok_ws *ws, size_t *hn, int32_t left)
{
    if (left < 0) return;
    int32_t right = ws->next[left];
    if (right < 0) return;
    int32_t idx, p = pair_prio(t, ws->sym[left], ws->sym[right], &idx);
    if (p != INT32_MAX) tok_heap_push(ws->heap, hn, (tok_heap_item){.rank = p, .pos = left});
}

static pllm_status merge_large(const pllm_tokenizer *t, tok_ws *ws, size_t m, pllm_tokens *out)
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
        int32_t idx;
        if (pair_prio(t, sym[l], sym[r], &idx) != it.rank) continue; /* stale */
        sym[l] = t->merge_result[idx];
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

static pllm_status spm_part(const pllm_tokenizer *t, tok_ws *ws, const char *s, size_t n,
                            pllm_tokens *out)
{
    if (n <= SPM_WHOLE_MAX && t->whole.slots) {
        int32_t id = tok_strmap_find(&t->whole, t->str, t->str_off, s, n);
        if (id >= 0) return pllm_tokens_push(out, id);
    }
    return tok_spm_piece_uncached(t, ws, s, n, out);
}

pllm_status tok_spm_piece(const pllm_tokenizer *t, tok_ws *ws, const char *s, size_t n,
                          pllm_tokens *out)
{
    if (!t->spm_split) return spm_part(t, ws, s, n, out);
    /* cut before each "▁" (E2 96 81) whose previous character is not "▁" */
    size_t start = 0;
    for (size_t i = 1; i + 3 <= n;) {
        const char *hit = memchr(s + i, '\xE2', n - i - 2);
        if (!hit) break;
        i = (size_t)(hit - s);
        if ((unsigned char)s[i + 1] == 0x96 && (unsigned char)s[i + 2] == 0x81) {
            bool after_marker = i >= 3 && (unsigned char)s[i - 3] == 0xE2 &&
                                (unsigned char)s[i - 2] == 0x96 && (unsigned char)s[i - 1] == 0x81;
            if (!after_marker && i > start) {
                PLLM_TRY(spm_part(t, ws, s + start, i - start, out));
                start = i;
            }
            i += 3;
        } else {
            i++;
        }
    }
    return spm_part(t, ws, s + start, n - start, out);
}

pllm_status tok_spm_piece_uncached(const pllm_tokenizer *t, tok_ws *ws, const char *s, size_t n,
                                   pllm_tokens *out)
{
    if (!n) return PLLM_OK;
    if (t->ignore_merges) {
        int32_t id = tok_vocab_find(t, s, n);
        if (id >= 0) return pllm_tokens_push(out, id);
    }
    PLLM_TRY(tok_ws_reserve(ws, n + 1));
    int32_t *sym = ws->sym;
    size_t m = 0;
    bool unk_pending = false;
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = tok_utf8_decode(u + i, &cp);
        int32_t id = cp < TOK_CHAR_TABLE ? t->char_id[cp] : tok_vocab_find(t, s + i, len);
        if (id >= 0) {
            if (unk_pending) sym[m++] = t->unk, unk_pending = false;
            sym[m++] = id;
        } else {
            bool bytes = t->byte_fallback;
            for (size_t k = 0; bytes && k < len; k++) bytes = t->byte_id[u[i + k]] >= 0;
            if (bytes) {
                for (size_t k = 0; k < len; k++) sym[m++] = t->byte_id[u[i + k]];
            } else if (t->unk >= 0) {
                if (unk_pending && !t->fuse_unk) sym[m++] = t->unk;
                unk_pending = true;
            }
        }
        i += len;
    }
    if (unk_pending) sym[m++] = t->unk;
    if (m == 0) return PLLM_OK;
    if (m <= SPM_SMALL) {
        m = merge_small(t, sym, m);
        return pllm_tokens_append(out, sym, m);
    }
    return merge_large(t, ws, m, out);
}

/*
 * tokenizer_internal.h: the inside of pllm_tokenizer, shared by the tokenizer's own files.
 *
 * Layers (one file each):
 *   tok_utf8.c    UTF-8 checking, U+FFFD replacement (Python errors='replace' rules), the
 *                 incremental lossy decoder, and the GPT-2 byte <-> unicode alphabet.
 *   tok_vocab.c   the vocabulary (strings, types, decoded bytes), hash maps (string -> id,
 *                 pair -> merge), the special-token trie, and the common finishing step
 *                 every builder ends with (tok_finish).
 *   tok_pretok.c  named pre-tokenizers: a list of PCRE2 regexes, each splitting every piece
 *                 of the previous stage into matches and the gaps between them.
 *   tok_bpe.c     byte-level BPE: merge by rank with a heap over adjacent pairs.
 *   tok_gguf.c    the GGUF builder (tokenizer.ggml.*).
 *   tokenizer.c   the public API (tokenizer.h): encode, decode, detokenizer, lookups.
 *
 * Builders: a builder (GGUF now; tokenizer.json and SentencePiece later) fills a tok_spec
 * with borrowed views of its source and calls tok_build(), which validates everything,
 * copies what it keeps and returns a finished, immutable tokenizer. A new family adds a
 * tok_model value, its fields in tok_spec/pllm_tokenizer, and its encode path in
 * tokenizer.c's fragment dispatcher; nothing else changes.
 *
 * Invariants after tok_build: every id stored anywhere is in [0, n_vocab); token strings are
 * valid UTF-8 (byte-level family); the tokenizer is never written again, so encode/decode
 * may run concurrently (per-call scratch lives in tok_ws).
 */
#pragma once

#include "tokenizer/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* ---- token types (GGUF tokenizer.ggml.token_type values) ---- */
enum {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

typedef enum tok_model {
    TOK_MODEL_BYTE_BPE = 1, /* GPT-2 style byte-level BPE (GGUF "gpt2") */
    TOK_MODEL_SPM_BPE = 2,  /* SentencePiece-style BPE (GGUF "llama"): not built yet */
} tok_model;

typedef struct tok_strview {
    const char *s;
    size_t len;
} tok_strview;

/* ---- UTF-8 (tok_utf8.c) ---- */

/* Classify the sequence at s[0..n). Returns the length (1..4) of a well-formed character,
 * or 0 when it is not one; then *bad is the length of the maximal ill-formed subpart to
 * replace by one U+FFFD (>= 1), and *truncated says whether those bytes are a valid prefix
 * that only ran out of input (n too short), i.e. more bytes could complete it. */
size_t tok_utf8_char(const uint8_t *s, size_t n, size_t *bad, bool *truncated);
/* Length of the leading valid UTF-8 in s[0..n) (n when all valid). */
size_t tok_utf8_valid_prefix(const uint8_t *s, size_t n);
/* Append s[0..n) to out with every maximal ill-formed subpart replaced by U+FFFD, as
 * Python's bytes.decode('utf-8', errors='replace') and Rust's from_utf8_lossy do. */
pllm_status tok_utf8_append_lossy(pllm_buf *out, const uint8_t *s, size_t n);
/* Decode one code point from valid UTF-8; returns its length. */
size_t tok_utf8_decode(const uint8_t *s, uint32_t *cp);
/* Encode cp into out (>= 4 bytes); returns the length. */
size_t tok_utf8_encode(uint32_t cp, char *out);

/* The GPT-2 byte alphabet: byte b <-> code point (printable bytes map to themselves, the
 * other 68 to U+0100..U+0143 in byte order). */
uint32_t tok_byte_to_cp(uint8_t b);
/* The byte of code point cp, or -1 when cp is not in the alphabet. */
int tok_cp_to_byte(uint32_t cp);

/* ---- hash maps (tok_vocab.c) ---- */

/* Open addressing, power-of-two capacity, ids stored as id+1 (0 = empty). Keys are the
 * vocabulary strings themselves. */
typedef struct tok_strmap {
    int32_t *slots;   /* [mask + 1] */
    uint32_t *hashes; /* [mask + 1] low bits of each slot's hash, to skip most compares */
    size_t mask;
} tok_strmap;

/* (left, right) -> merge rank, in one 8-byte slot so that the table stays small (1 MiB for
 * 50k merges) and a lookup costs one cache line: bits 63..43 left + 1, 42..22 right,
 * 21..0 rank; 0 = empty. Hence the limits on vocabulary and merge counts. The merged token's
 * id is pllm_tokenizer.merge_result[rank]. */
#define TOK_PAIR_ID_BITS   21
#define TOK_PAIR_RANK_BITS 22
#define TOK_MAX_PAIR_VOCAB ((1 << TOK_PAIR_ID_BITS) - 2)
#define TOK_MAX_MERGES     (1 << TOK_PAIR_RANK_BITS)

typedef struct tok_pairmap {
    uint64_t *slots; /* [mask + 1] */
    size_t mask;
} tok_pairmap;

static inline uint64_t tok_pair_key(int32_t left, int32_t right)
{
    return ((uint64_t)(uint32_t)(left + 1) << TOK_PAIR_ID_BITS | (uint32_t)right)
           << TOK_PAIR_RANK_BITS;
}

static inline size_t tok_pair_slot(uint64_t key, size_t mask)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 40) & mask;
}

/* A trie over the byte strings of the tokens matched in raw text (control, user-defined). */
typedef struct tok_trie_node {
    int32_t child;   /* first child node, -1 when none */
    int32_t sibling; /* next sibling node, -1 when none */
    int32_t id;      /* token ending here, -1 when none */
    uint8_t byte;
} tok_trie_node;

/* ---- pre-tokenizer (tok_pretok.c) ---- */

#define TOK_PRETOK_MAX 6

typedef struct tok_pretok {
    const char *name; /* the canonical name (static string) */
    int n_re;
    pcre2_code *re[TOK_PRETOK_MAX]; /* stage i splits every piece of stage i-1 */
    bool jit[TOK_PRETOK_MAX];       /* JIT-compiled (falls back to the interpreter) */
} tok_pretok;

/* Per-call scratch: matching state and BPE buffers. Never shared between threads. */
typedef struct tok_heap_item {
    int32_t rank;
    int32_t pos;
} tok_heap_item;

typedef struct tok_ws {
    pcre2_match_data *md;
    pcre2_match_context *mctx; /* created when a JIT match needs a bigger stack */
    pcre2_jit_stack *jstack;
    int32_t *sym, *prev, *next; /* [cap] BPE symbols of the current piece */
    size_t cap;
    tok_heap_item *heap; /* [heap_cap] */
    size_t heap_cap;
    pllm_buf scratch; /* mapped piece text (ignore_merges lookups) */
} tok_ws;

void tok_ws_free(tok_ws *ws);

typedef pllm_status (*tok_piece_fn)(void *ctx, const char *s, size_t n);

/* Look up a pre-tokenizer by GGUF/llama.cpp name and compile its regexes. Unknown name:
 * PLLM_ERR_UNSUPPORTED naming it. */
pllm_status tok_pretok_init(tok_pretok *p, const char *name, size_t name_len);
void tok_pretok_free(tok_pretok *p);
/* Split valid UTF-8 s[0..n) into pieces, calling fn on each non-empty piece in order. */
pllm_status tok_pretok_split(const tok_pretok *p, tok_ws *ws, const char *s, size_t n,
                             tok_piece_fn fn, void *ctx);

/* ---- the tokenizer ---- */

struct pllm_tokenizer {
    tok_model model;
    int32_t n_vocab;

    /* vocabulary */
    char *str;           /* token strings, each NUL-terminated, concatenated */
    uint32_t *str_off;   /* [n_vocab + 1] token i is str[str_off[i] .. str_off[i+1]-1) */
    uint8_t *type;       /* [n_vocab] TOK_TYPE_* */
    char *bytes;         /* decoded bytes of every token, concatenated (NUL after each) */
    uint32_t *bytes_off; /* [n_vocab + 1] */
    tok_strmap vocab;    /* token string -> id */
    tok_strmap whole;    /* decoded bytes -> id, for pieces that encode to that one token */

    /* byte-level BPE */
    tok_pairmap merges;    /* (left id, right id) -> rank */
    int32_t *merge_result; /* [n_merges] id of the token each merge makes */
    int32_t n_merges;
    int32_t byte_id[256]; /* id of the one-symbol token of each byte, -1 when absent */
    bool ignore_merges;   /* a piece that is a whole token is emitted as is (Llama-3) */

    /* tokens matched in raw text before pre-tokenization */
    tok_trie_node *trie; /* [n_trie] node 0 is the root */
    int32_t n_trie;
    bool trie_first[256]; /* bytes that start some matched token */

    tok_pretok pre;

    int32_t bos, eos, unk, pad, eot; /* -1 when none */
    bool add_bos, add_eos;
    int32_t *stop_ids; /* [n_stop] */
    int32_t n_stop;

    char describe[160];
};

/* What a builder hands to tok_build. Views are borrowed for the duration of the call. */
typedef struct tok_spec {
    const char *source; /* names the origin in messages ("model.gguf") */
    tok_model model;
    const char *pre; /* pre-tokenizer name; NULL = "default" */
    size_t pre_len;
    int32_t n_vocab;
    const tok_strview *tokens; /* [n_vocab] */
    const int32_t *types;      /* [n_vocab] or NULL (all normal) */
    int32_t n_merges;
    const tok_strview *merges;       /* [n_merges] "left right" */
    int64_t bos, eos, unk, pad, eot; /* -1 when none; checked against n_vocab */
    int add_bos, add_eos;            /* -1 = the family's default, else 0/1 */
    /* key names for messages (the builder's own spelling of each field) */
    const char *key_tokens, *key_types, *key_merges;
    const char *key_bos, *key_eos, *key_unk, *key_pad, *key_eot;
} tok_spec;

/* Validate spec and build the tokenizer. Errors name spec->source and the key. */
pllm_status tok_build(pllm_tokenizer **out, const tok_spec *spec);

/* Lookups (tok_vocab.c). tok_strmap_find looks s up among strings stored as in
 * pllm_tokenizer.str/str_off (base + off[id], NUL-terminated). */
int32_t tok_strmap_find(const tok_strmap *m, const char *base, const uint32_t *off, const char *s,
                        size_t n);
int32_t tok_vocab_find(const pllm_tokenizer *t, const char *s, size_t n);
/* The rank of merging (left, right), or INT32_MAX when there is no such merge. */
static inline int32_t tok_merge_rank(const tok_pairmap *m, int32_t left, int32_t right)
{
    const uint64_t key = tok_pair_key(left, right),
                   rank_mask = ((uint64_t)1 << TOK_PAIR_RANK_BITS) - 1;
    for (size_t i = tok_pair_slot(key, m->mask);; i = (i + 1) & m->mask) {
        uint64_t e = m->slots[i];
        if ((e & ~rank_mask) == key) return (int32_t)(e & rank_mask);
        if (!e) return INT32_MAX;
    }
}

/* Byte-level BPE of one pre-tokenized piece (tok_bpe.c): appends ids to out. The uncached
 * version skips the whole-piece map (tok_build uses it to fill that map). */
pllm_status tok_bpe_piece(const pllm_tokenizer *t, tok_ws *ws, const char *s, size_t n,
                          pllm_tokens *out);
pllm_status tok_bpe_piece_uncached(const pllm_tokenizer *t, tok_ws *ws, const char *s, size_t n,
                                   pllm_tokens *out);

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
 *   tok_norm.c    normalizers (Prepend, Replace, NFC/NFD/NFKC/NFKD and Lowercase through ICU,
 *                 Strip), applied in sequence to each fragment between added tokens.
 *   tok_bpe.c     byte-level BPE: merge by rank with a heap over adjacent pairs.
 *   tok_spm.c     SentencePiece-style BPE: characters are the symbols (byte fallback, unk),
 *                 merged by rank (tokenizer.json) or by piece score (GGUF "llama", .model).
 *   tok_gguf.c    the GGUF builder (tokenizer.ggml.*).
 *   tok_hf.c      the Hugging Face builders: tokenizer.json (+ tokenizer_config.json), and
 *                 vocab.json + merges.txt.
 *   tok_spmodel.c the SentencePiece .model builder (a minimal protobuf reader).
 *   tokenizer.c   the public API (tokenizer.h): encode, decode, detokenizer, lookups.
 *
 * Builders fill a tok_spec with borrowed views of their source (and hand over the pipeline
 * stages they built: normalizer, pre-tokenizer) and call tok_build(), which validates
 * everything, copies what it keeps and returns a finished, immutable tokenizer.
 *
 * Encode pipeline (Hugging Face's order): added tokens matched in the raw text (those not
 * "normalized"), each fragment between them normalized, normalized added tokens matched in
 * it, each remaining piece pre-tokenized, each pre-token run through the model; the
 * post-processor's prefix/suffix ids around it all when add_special.
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
    TOK_MODEL_SPM_BPE = 2,  /* SentencePiece-style BPE: characters are the symbols */
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

/* A trie over the byte strings of the added tokens (matched verbatim in text). */
typedef struct tok_trie_node {
    int32_t child;   /* first child node, -1 when none */
    int32_t sibling; /* next sibling node, -1 when none */
    int32_t id;      /* token ending here, -1 when none */
    uint8_t byte;
} tok_trie_node;

typedef struct tok_trie {
    tok_trie_node *nodes; /* [n] node 0 is the root */
    int32_t n;
    bool first[256]; /* bytes that start some pattern */
} tok_trie;

/* Added-token flags (pllm_tokenizer.added[id]; 0 = not an added token). Hugging Face's
 * AddedToken fields; GGUF control tokens are ADDED|SPECIAL, user-defined ones ADDED. */
enum {
    TOK_ADDED = 1,
    TOK_ADDED_SPECIAL = 2, /* skipped by decode(skip_special); not matched unless parse_special */
    TOK_ADDED_LSTRIP = 4,  /* the match swallows the whitespace on its left */
    TOK_ADDED_RSTRIP = 8,  /* ... and on its right */
    TOK_ADDED_SINGLE_WORD = 16, /* matches only between non-word characters */
    TOK_ADDED_NORMALIZED = 32,  /* matched in normalized text, as its normalized content */
    TOK_ADDED_NOT_MODEL = 64,   /* not in the model's own vocabulary (BPE never makes it) */
    TOK_ADDED_NO_SKIP = 128,    /* special, yet kept by skip_special: HF looks the special set up
                                 * by the decoded string, which for a normalized token is its
                                 * normalized content */
};

/* ---- normalizer (tok_norm.c) ---- */

typedef enum tok_norm_kind {
    TOK_NORM_PREPEND,    /* a before a non-empty text */
    TOK_NORM_REPLACE,    /* every occurrence of a by b */
    TOK_NORM_REPLACE_RE, /* every match of re by b */
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE, /* full Unicode lowercase mapping (Rust's str::to_lowercase) */
    TOK_NORM_STRIP,     /* White_Space at the left and/or right end */
} tok_norm_kind;

typedef struct tok_norm_step {
    tok_norm_kind kind;
    char *a, *b; /* owned, NUL-terminated */
    size_t a_len, b_len;
    pcre2_code *re;
    bool left, right;
} tok_norm_step;

#define TOK_NORM_MAX 8

typedef struct tok_norm {
    int n;
    tok_norm_step step[TOK_NORM_MAX];
} tok_norm;

void tok_norm_free(tok_norm *nm);
/* Append step to nm (takes ownership of its strings/regex even on failure). */
pllm_status tok_norm_add(tok_norm *nm, const tok_norm_step *step, const char *src);
/* Normalize s[0..n) (valid UTF-8) into out (replaced, not appended). tmp is scratch. */
pllm_status tok_norm_apply(const tok_norm *nm, const char *s, size_t n, pllm_buf *out,
                           pllm_buf *tmp);

/* ---- pre-tokenizer (tok_pretok.c) ---- */

#define TOK_PRETOK_MAX 8

typedef enum tok_pre_kind {
    TOK_PRE_SPLIT,        /* split by a regex, with a delimiter behavior */
    TOK_PRE_METASPACE,    /* ' ' -> replacement, prefix by scheme, optional split */
    TOK_PRE_PREFIX_SPACE, /* ByteLevel(add_prefix_space): ' ' before a piece lacking one */
} tok_pre_kind;

/* Hugging Face's SplitDelimiterBehavior */
typedef enum tok_split_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;

enum { TOK_PREPEND_NEVER = 0, TOK_PREPEND_FIRST = 1, TOK_PREPEND_ALWAYS = 2 };

typedef struct tok_pre_stage {
    tok_pre_kind kind;
    pcre2_code *re; /* SPLIT */
    bool jit;
    tok_split_behavior behavior;
    bool invert;
    char repl[8]; /* METASPACE: the replacement character's UTF-8 */
    size_t repl_len;
    int prepend; /* METASPACE: TOK_PREPEND_* */
    bool split;  /* METASPACE: split before each replacement character */
} tok_pre_stage;

typedef struct tok_pretok {
    char name[48]; /* for describe */
    int n;
    tok_pre_stage st[TOK_PRETOK_MAX]; /* stage i works on every piece of stage i-1 */
} tok_pretok;

/* Per-call scratch: matching state and BPE buffers. Never shared between threads. */
typedef struct tok_heap_item {
    int32_t rank;
    int32_t pos;
} tok_heap_item;

/* The merge heap of tok_bpe.c and tok_spm.c: a binary min-heap h[*n] on (rank, pos), so the
 * lowest-ranked pair pops first and the leftmost among equals. Callers size h. */
static inline bool tok_heap_less(tok_heap_item a, tok_heap_item b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static inline void tok_heap_push(tok_heap_item *h, size_t *n, tok_heap_item it)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!tok_heap_less(it, h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = it;
}

/* Requires *n > 0. */
static inline tok_heap_item tok_heap_pop(tok_heap_item *h, size_t *n)
{
    tok_heap_item top = h[0], last = h[--*n];
    size_t i = 0, len = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= len) break;
        if (c + 1 < len && tok_heap_less(h[c + 1], h[c])) c++;
        if (!tok_heap_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (len) h[i] = last;
    return top;
}

typedef struct tok_seg {
    size_t start, end;
    bool match;
} tok_seg;

typedef struct tok_ws {
    pcre2_match_data *md;
    pcre2_match_context *mctx; /* created when a JIT match needs a bigger stack */
    pcre2_jit_stack *jstack;
    int32_t *sym, *prev, *next; /* [cap] BPE symbols of the current piece */
    size_t cap;
    tok_heap_item *heap; /* [heap_cap] */
    size_t heap_cap;
    pllm_buf scratch;                   /* mapped piece text (ignore_merges lookups) */
    pllm_buf norm, norm_tmp;            /* a normalized fragment */
    pllm_buf stage_buf[TOK_PRETOK_MAX]; /* pre-tokenizer stages that rewrite text */
    tok_seg *segs[TOK_PRETOK_MAX];      /* [segs_cap] split segments per stage */
    size_t segs_cap[TOK_PRETOK_MAX];
} tok_ws;

void tok_ws_free(tok_ws *ws);

/* fn(ctx, piece, len) is called on every non-empty piece, in order. */
typedef pllm_status (*tok_piece_fn)(void *ctx, const char *s, size_t n);

/* Look up a pre-tokenizer by GGUF/llama.cpp name and compile its regexes. Unknown name:
 * PLLM_ERR_UNSUPPORTED naming it. */
pllm_status tok_pretok_init(tok_pretok *p, const char *name, size_t name_len);
/* Append a stage; SPLIT compiles pattern (a regex, or a literal string when literal). */
pllm_status tok_pretok_add_split(tok_pretok *p, const char *pattern, size_t len, bool literal,
                                 tok_split_behavior behavior, bool invert, const char *src);
pllm_status tok_pretok_add(tok_pretok *p, const tok_pre_stage *stage, const char *src);
void tok_pretok_free(tok_pretok *p);
/* GPT-2's split regex, as Hugging Face's ByteLevel pre-tokenizer has it. */
const char *tok_pretok_gpt2_regex(void);
/* Split valid UTF-8 s[0..n) into pieces. at_start: s begins at offset 0 of the original
 * input (Metaspace's prepend_scheme "first"). */
pllm_status tok_pretok_split(const tok_pretok *p, tok_ws *ws, const char *s, size_t n,
                             bool at_start, tok_piece_fn fn, void *ctx);

/* ---- decoder ---- */

typedef enum tok_dec_kind {
    TOK_DEC_BYTE_LEVEL = 1, /* GPT-2 alphabet -> bytes; the stream repaired as lossy UTF-8 */
    TOK_DEC_PIECES = 2,     /* token strings with Replace applied; ByteFallback runs; Strip */
} tok_dec_kind;

typedef struct tok_decoder {
    tok_dec_kind kind;
    bool byte_fallback; /* "<0xHH>" tokens: a run of them is one UTF-8 string, or one
                         * U+FFFD per byte when the run is not valid UTF-8 */
    int strip_start;    /* Strip after Fuse: drop up to this many leading strip_char */
    char strip_char[4]; /* UTF-8 of the stripped character */
    size_t strip_char_len;
    char meta_repl[8];    /* Metaspace decoder: its replacement character ("" if none): in the */
    size_t meta_repl_len; /* first token every one is dropped, elsewhere it becomes ' ' */
    struct {
        char from[16], to[16];
        size_t from_len, to_len;
    } repl[4]; /* Replace decoders, applied in order to every token string */
    int n_repl;
} tok_decoder;

/* ---- the tokenizer ---- */

#define TOK_MAX_POST 4

struct pllm_tokenizer {
    tok_model model;
    int32_t n_vocab;

    /* vocabulary */
    char *str;           /* token strings, each NUL-terminated, concatenated */
    uint32_t *str_off;   /* [n_vocab + 1] token i is str[str_off[i] .. str_off[i+1]-1) */
    uint8_t *type;       /* [n_vocab] TOK_TYPE_* */
    uint8_t *added;      /* [n_vocab] TOK_ADDED_* flags (0: not an added token) */
    char *bytes;         /* decoded bytes of every token, concatenated (NUL after each) */
    uint32_t *bytes_off; /* [n_vocab + 1] */
    int16_t *dec_byte;   /* [n_vocab] byte of a "<0xHH>" token for the decoder, else -1 */
    tok_strmap vocab;    /* token string -> id */
    tok_strmap whole;    /* decoded bytes -> id, for pieces that encode to that one token */

    /* BPE (both families) */
    tok_pairmap merges;    /* (left id, right id) -> merge index */
    int32_t *merge_result; /* [n_merges] id of the token each merge makes */
    int32_t *merge_prio;   /* [n_merges] SPM score mode: lower merges first (ties: leftmost);
                            * NULL: the merge index is the priority */
    int32_t n_merges;
    int32_t byte_id[256]; /* byte-level: id of each byte's symbol; SPM: of "<0xHH>"; -1 none */
    bool ignore_merges;   /* a piece that is a whole token is emitted as is (Llama-3) */

    /* SentencePiece-style symbols */
    bool byte_fallback; /* an unknown character becomes its "<0xHH>" tokens */
    bool fuse_unk;      /* consecutive unknown characters give one unk */
    bool spm_split;     /* no token holds "▁" after another character: a piece can be cut
                         * before every such "▁" and its parts encoded alone, exactly */
    int32_t *char_id;   /* [TOK_CHAR_TABLE] id of each code point's one-character token */

    /* added tokens, matched in text before pre-tokenization */
    tok_trie trie;      /* patterns matched in raw text */
    tok_trie trie_norm; /* patterns matched in normalized text */

    tok_norm norm;
    tok_pretok pre;
    tok_decoder dec;

    int32_t bos, eos, unk, pad, eot;                        /* -1 when none */
    int32_t post_pre[TOK_MAX_POST], post_suf[TOK_MAX_POST]; /* ids added around the text */
    int n_post_pre, n_post_suf;                             /* when add_special */
    int32_t *stop_ids;                                      /* [n_stop] */
    int32_t n_stop;

    char describe[256];
};

#define TOK_CHAR_TABLE 0x3400 /* code points below this have a direct char_id entry */

/* An added token as a builder describes it. */
typedef struct tok_added_spec {
    int32_t id;
    tok_strview content; /* must equal the token's vocabulary string */
    uint8_t flags;       /* TOK_ADDED_* (TOK_ADDED implied) */
} tok_added_spec;

/* What a builder hands to tok_build. Views are borrowed for the duration of the call; norm
 * and pre_built are taken over (tok_build frees them whatever it returns). */
typedef struct tok_spec {
    const char *source; /* names the origin in messages ("model.gguf") */
    tok_model model;
    const char *pre; /* pre-tokenizer name (when pre_built is NULL); NULL = "default" */
    size_t pre_len;
    tok_pretok *pre_built;  /* a pre-tokenizer built by the builder, or NULL */
    tok_norm *norm;         /* a normalizer built by the builder, or NULL (none) */
    const tok_decoder *dec; /* NULL: the family's default (ByteLevel; SPM: Replace "▁" -> " ",
                             * ByteFallback, Fuse, Strip one leading space) */
    int32_t n_vocab;
    const tok_strview *tokens; /* [n_vocab] */
    const int32_t *types;      /* [n_vocab] or NULL (all normal) */
    int32_t n_merges;
    const tok_strview *merges;      /* [n_merges] "left right", or NULL with merge_pairs */
    const tok_strview *merge_pairs; /* [2 * n_merges] left, right (tokenizer.json lists) */
    bool merges_last_wins;          /* a repeated pair takes its last rank (HF), else first */
    const float *scores;            /* [n_vocab] SPM: merge by piece score (no merges list) */
    bool byte_fallback, fuse_unk;   /* SPM */
    int ignore_merges;              /* -1: from the pre-tokenizer name (llama3), else 0/1 */
    int32_t n_added;
    const tok_added_spec *added;     /* NULL: control tokens special, user-defined not (GGUF) */
    int64_t bos, eos, unk, pad, eot; /* -1 when none; checked against n_vocab */
    int add_bos, add_eos;            /* -1 = the family's default, else 0/1 */
    bool post_given;                 /* post_pre/post_suf below replace add_bos/add_eos */
    int32_t post_pre[TOK_MAX_POST], post_suf[TOK_MAX_POST];
    int n_post_pre, n_post_suf;
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
/* The merge index of (left, right), or INT32_MAX when there is no such merge. */
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

/* Unicode White_Space (Rust's char::is_whitespace, regex \s). */
bool tok_is_space(uint32_t cp);

/* Byte-level BPE of one pre-tokenized piece (tok_bpe.c): appends ids to out. The uncached
 * version skips the whole-piece map (tok_build uses it to fill that map). */
pllm_status tok_bpe_piece(const pllm_tokenizer *t, tok_ws *ws, const char *s, size_t n,
                          pllm_tokens *out);
pllm_status tok_bpe_piece_uncached(const pllm_tokenizer *t, tok_ws *ws, const char *s, size_t n,
                                   pllm_tokens *out);
/* SentencePiece-style BPE of one piece (tok_spm.c). */
pllm_status tok_spm_piece(const pllm_tokenizer *t, tok_ws *ws, const char *s, size_t n,
                          pllm_tokens *out);
pllm_status tok_spm_piece_uncached(const pllm_tokenizer *t, tok_ws *ws, const char *s, size_t n,
                                   pllm_tokens *out);
/* Grow ws->sym/prev/next to at least m entries. */
pllm_status tok_ws_reserve(tok_ws *ws, size_t m);

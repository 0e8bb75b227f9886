/*
 * tokenizer.h: text <-> token ids for the model's own vocabulary.
 *
 * Families: byte-level BPE (GPT-2, Llama-3, Qwen2, SmolLM) and SentencePiece-style BPE
 * (Llama-2, TinyLlama, Mistral). A tokenizer is built from GGUF metadata (tokenizer.ggml.*) or
 * from a Hugging Face tokenizer.json; the pre-tokenizer split (a regex list run through PCRE2)
 * is chosen from the file (tokenizer.ggml.pre, or the pre_tokenizer section).
 *
 * Encoding: special/added tokens are matched in the text first (when parse_special), the
 * pieces between them are pre-split and BPE-merged by merge rank. Decoding maps ids back to
 * bytes; the incremental detokenizer emits only complete UTF-8 (a multi-byte character split
 * across tokens comes out once its last byte arrives; invalid bytes become U+FFFD exactly as
 * Hugging Face's decode does).
 *
 * Thread safety: a built tokenizer is immutable; encode/decode may run concurrently.
 * Ownership: pllm_tokenizer_free() frees what the builder returned; token_bytes() pointers
 * live as long as the tokenizer.
 */
#pragma once

#include "engine/common.h"
#include "engine/gguf.h"

typedef struct pllm_tokenizer pllm_tokenizer;

pllm_status pllm_tokenizer_from_gguf(pllm_tokenizer **out, const pllm_gguf *g);
void pllm_tokenizer_free(pllm_tokenizer *t);

typedef struct pllm_encode_opts {
    bool add_special;    /* add BOS/EOS as the model's metadata says (add_bos_token, ...) */
    bool parse_special;  /* match special tokens spelled in the text (as HF does by default) */
} pllm_encode_opts;

/* Append the ids of text[0..len) to out. Never fails on odd input: invalid UTF-8 sequences
 * are first replaced by U+FFFD, as Python's bytes.decode('utf-8', errors='replace') does (Hugging
 * Face tokenizers only ever see such replaced text). opts NULL: HF defaults (add and parse
 * special tokens). */
pllm_status pllm_tokenizer_encode(const pllm_tokenizer *t, const char *text, size_t len,
                                  const pllm_encode_opts *opts, pllm_tokens *out);
/* Decode ids to text (appended to out). skip_special drops control tokens. */
pllm_status pllm_tokenizer_decode(const pllm_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                                  pllm_buf *out);

int32_t pllm_tokenizer_n_vocab(const pllm_tokenizer *t);
int32_t pllm_tokenizer_bos(const pllm_tokenizer *t); /* -1 when none */
int32_t pllm_tokenizer_eos(const pllm_tokenizer *t); /* -1 when none */
/* Ids that end generation: EOS plus end-of-turn tokens the vocabulary marks (<|im_end|>,
 * <|eot_id|>, <|end|>, ...). */
const int32_t *pllm_tokenizer_stop_ids(const pllm_tokenizer *t, int32_t *n);
bool pllm_tokenizer_is_special(const pllm_tokenizer *t, int32_t id);
/* The decoded bytes of one token (byte-level decoding applied); NULL for an invalid id. */
const char *pllm_tokenizer_token_bytes(const pllm_tokenizer *t, int32_t id, size_t *len);
/* Id of a token whose vocabulary string is exactly s, or -1. */
int32_t pllm_tokenizer_find(const pllm_tokenizer *t, const char *s);
/* The tokenizer's family and pre-tokenizer names, for `pllm info`. */
const char *pllm_tokenizer_describe(const pllm_tokenizer *t);

/* Incremental detokenizer: push ids one at a time, receive text as soon as it is complete.
 * Holds back at most one incomplete UTF-8 sequence. */
typedef struct pllm_detok {
    const pllm_tokenizer *tok;
    bool skip_special;
    char pending[8];
    size_t n_pending;
} pllm_detok;

void pllm_detok_init(pllm_detok *d, const pllm_tokenizer *t, bool skip_special);
/* Append the text that id completes to out. */
pllm_status pllm_detok_push(pllm_detok *d, int32_t id, pllm_buf *out);
/* Flush what is held back (as U+FFFD) at the end of a sequence. */
pllm_status pllm_detok_finish(pllm_detok *d, pllm_buf *out);

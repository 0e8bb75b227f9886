/*
 * tokenizer.h: text <-> token ids for the model's own vocabulary.
 *
 * Families: byte-level BPE (GPT-2, Llama-3, Qwen2, SmolLM) and SentencePiece-style BPE
 * (Llama-2, TinyLlama, Mistral, Phi-3: the "▁" space marker, byte fallback). A tokenizer is
 * built from GGUF metadata (tokenizer.ggml.*), from a Hugging Face tokenizer.json (with its
 * tokenizer_config.json), from GPT-2 style vocab.json + merges.txt, or from a SentencePiece
 * .model file. The result is meant to be byte-identical to Hugging Face `tokenizers` on the
 * same files (GGUF: on the tokenizer.json the GGUF was converted from). A construct that is
 * not supported is an error naming it and the file, never a silently different tokenizer.
 *
 * Encoding: added/special tokens are matched in the text first, the fragments between them
 * normalized, pre-split (regexes run through PCRE2) and BPE-merged (by merge rank, or by
 * piece score for GGUF "llama" and .model files). Decoding maps ids back to text as the
 * tokenizer's decoder says; the incremental detokenizer emits only complete UTF-8 (a
 * character split across tokens comes out once its last byte arrives; invalid bytes become
 * U+FFFD exactly as Hugging Face's decode does).
 *
 * Thread safety: a built tokenizer is immutable; encode/decode may run concurrently.
 * Ownership: pllm_tokenizer_free() frees what the builder returned; token_bytes() pointers
 * live as long as the tokenizer.
 */
#pragma once

#include "model/common.h"
#include "model/gguf.h"

typedef struct pllm_tokenizer pllm_tokenizer;

pllm_status pllm_tokenizer_from_gguf(pllm_tokenizer **out, const pllm_gguf *g);
/* From a Hugging Face tokenizer.json; tokenizer_config_json (NULL: none) supplies the
 * bos/eos/pad tokens (strings or AddedToken objects) and add_bos_token/add_eos_token,
 * which, when present, replace the post-processor's BOS/EOS (as transformers' Llama
 * tokenizers do); without it BOS/EOS are the post-processor's single token before/after the
 * text, if any. (The chat template in tokenizer_config.json is chat_template.h's business.)
 * Supported: model BPE; normalizers Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase,
 * Strip; pre-tokenizers Sequence, ByteLevel, Split, Digits, Metaspace; post-processors
 * TemplateProcessing, ByteLevel, Roberta/Bert, Sequence; decoders ByteLevel, Metaspace, or a
 * Sequence of Replace/ByteFallback/Fuse/Strip. */
pllm_status pllm_tokenizer_from_hf(pllm_tokenizer **out, const char *tokenizer_json_path,
                                   const char *tokenizer_config_json_path);
/* From GPT-2 style vocab.json + merges.txt: byte-level BPE with GPT-2's pre-tokenizer and
 * "<|endoftext|>" (when present) as BOS/EOS/special token, as transformers' GPT2Tokenizer. */
pllm_status pllm_tokenizer_from_vocab_merges(pllm_tokenizer **out, const char *vocab_json_path,
                                             const char *merges_txt_path);
/* From a SentencePiece .model file (BPE models only: Llama-2, Mistral); BOS added by
 * add_special, as transformers' LlamaTokenizer does. */
pllm_status pllm_tokenizer_from_sentencepiece(pllm_tokenizer **out, const char *model_path);
/* From a Hugging Face model directory: tokenizer.json (+ tokenizer_config.json when there),
 * else vocab.json + merges.txt, else tokenizer.model. PLLM_ERR_NOT_FOUND when none is. */
pllm_status pllm_tokenizer_from_dir(pllm_tokenizer **out, const char *dir);
void pllm_tokenizer_free(pllm_tokenizer *t);

typedef struct pllm_encode_opts {
    bool add_special;   /* add BOS/EOS as the model's metadata says (add_bos_token, ...) */
    bool parse_special; /* match special tokens spelled in the text (as HF does by default) */
} pllm_encode_opts;

/* Append the ids of text[0..len) to out. Never fails on odd input: invalid UTF-8 sequences
 * are first replaced by U+FFFD, as Python's bytes.decode('utf-8', errors='replace') does (Hugging
 * Face tokenizers only ever see such replaced text). opts NULL: HF defaults (add and parse
 * special tokens). */
pllm_status pllm_tokenizer_encode(const pllm_tokenizer *t, const char *text, size_t len,
                                  const pllm_encode_opts *opts, pllm_tokens *out);
/* Decode ids to text (appended to out). skip_special drops special tokens (HF's special added
 * tokens; GGUF control and unknown tokens). */
pllm_status pllm_tokenizer_decode(const pllm_tokenizer *t, const int32_t *ids, size_t n,
                                  bool skip_special, pllm_buf *out);

/* Ids are 0..n_vocab-1 (max id + 1 of the tokenizer's files). A model's embedding may have
 * more rows (padding, e.g. Phi-3's 32064 for 32011 tokens): decode refuses those ids with
 * PLLM_ERR_RANGE (Hugging Face silently drops them). */
int32_t pllm_tokenizer_n_vocab(const pllm_tokenizer *t);
int32_t pllm_tokenizer_bos(const pllm_tokenizer *t); /* -1 when none */
int32_t pllm_tokenizer_eos(const pllm_tokenizer *t); /* -1 when none */
/* Ids that end generation: EOS plus end-of-turn tokens the vocabulary marks special
 * (<|im_end|>, <|eot_id|>, <|end|>, ...). A Hugging Face directory's generation_config.json
 * eos_token_id list is not read here. */
const int32_t *pllm_tokenizer_stop_ids(const pllm_tokenizer *t, int32_t *n);
bool pllm_tokenizer_is_special(const pllm_tokenizer *t, int32_t id);
/* The decoded bytes of one token (byte-level decoding applied); NULL for an invalid id. */
const char *pllm_tokenizer_token_bytes(const pllm_tokenizer *t, int32_t id, size_t *len);
/* Id of a token whose vocabulary string is exactly s, or -1. */
int32_t pllm_tokenizer_find(const pllm_tokenizer *t, const char *s);
/* The tokenizer's family and pre-tokenizer names, for `pllm info`. */
const char *pllm_tokenizer_describe(const pllm_tokenizer *t);

/* Incremental detokenizer: push ids one at a time, receive text as soon as it is complete.
 * Holds back at most one incomplete UTF-8 sequence (byte-level family), or the current run
 * of "<0xHH>" byte-fallback tokens up to sizeof pending bytes (SentencePiece family: such a
 * run decodes as a whole). Plain data: needs no freeing. */
typedef struct pllm_detok {
    const pllm_tokenizer *tok;
    bool skip_special;
    char pending[64];
    size_t n_pending;
    uint32_t n_tokens; /* tokens pushed and not skipped */
    int strip_left;    /* leading characters the decoder may still strip */
} pllm_detok;

void pllm_detok_init(pllm_detok *d, const pllm_tokenizer *t, bool skip_special);
/* Append the text that id completes to out. */
pllm_status pllm_detok_push(pllm_detok *d, int32_t id, pllm_buf *out);
/* Flush what is held back (as U+FFFD) at the end of a sequence. */
pllm_status pllm_detok_finish(pllm_detok *d, pllm_buf *out);

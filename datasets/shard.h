/*
 * shard.h: `pllm generate --shard K/N`: which of N shards a prompt record belongs to, and the
 * small sidecar file (OUT.shard.json) that records what a shard run produced, so that
 * `pllm merge` can check that the shards fit together (datasets/merge.h).
 *
 * The partition. Each record gets a prefix key: the hash of the first P tokens of its prompt as
 * the engine sees it (rendered with the chat template and tokenized), P = --shard-key-tokens
 * (default 128, a multiple of the KV block size). A prompt with fewer tokens is keyed by its
 * cacheable part (its full blocks, the last prompt token excluded, as the prefix cache only ever
 * reuses those), or by all of it when that is empty. So records whose prompts share their first
 * P tokens always get the same key and land in the same shard: a shared prefix at least P long
 * is computed once, in one shard, exactly as in a single run. A record that cannot be tokenized
 * (a bad record, an error line) is keyed by its id (pllm_record_key).
 *
 * Two ways to map keys to shards (--shard-balance):
 *   hash     shard = H(key) mod N, one streaming pass. Deterministic and prefix-preserving
 *            always; balanced by prompt tokens in expectation (each key's tokens land on a
 *            uniformly random shard), so the spread is that of a random assignment of the
 *            prefix groups: tight for many small groups, poor when one group holds a large share
 *            of the tokens. Works on stdin.
 *   tokens   (the default for a file) a first streaming pass tokenizes every record and adds
 *            its prompt tokens to its key (a map of distinct keys, 16 bytes each; never the
 *            records' text: `pllm generate` keeps each record's 8-byte key for its main pass); keys
 * are then assigned heaviest first to the least loaded shard (ties: the lower key, the lower
 * shard), which is within one key's weight of a perfect balance. A key heavier than 5/4 of a fair
 * share (total / N) would make its shard the straggler: its records are spread by their own ids
 * instead (that prefix is then computed once per shard, which is small against a group of that
 *            size). Every
 *            shard process computes the same plan from the same input, so they agree without
 *            talking. stdin cannot be read twice: there, hash is used (pllm says so).
 * Both are deterministic in (input, model tokenizer and chat template, P, N), and --limit
 * applies before sharding, so the N shards of a run partition exactly the records a single
 * run would read.
 *
 * Ownership: pllm_shard_plan_create/free; the sidecar struct owns its strings and JSON
 * (pllm_shard_meta_free).
 */
#pragma once

#include "model/common.h"

#include <jansson.h>

#define PLLM_SHARD_KEY_TOKENS      128
#define PLLM_SHARD_SIDECAR_SUFFIX  ".shard.json"
#define PLLM_SHARD_SIDECAR_VERSION 1

typedef enum pllm_shard_balance {
    PLLM_SHARD_BALANCE_HASH = 0,
    PLLM_SHARD_BALANCE_TOKENS
} pllm_shard_balance;

typedef struct pllm_shard_spec {
    int32_t k, n;       /* this shard, 0 <= k < n; n == 0: no sharding */
    int32_t key_tokens; /* P */
    pllm_shard_balance balance;
} pllm_shard_spec;

/* Parse "K/N" (0 <= K < N <= 1000000). PLLM_ERR_INVALID with a message otherwise. */
pllm_status pllm_shard_parse(const char *s, pllm_shard_spec *out);
const char *pllm_shard_balance_name(pllm_shard_balance b); /* "hash", "tokens" */
pllm_status pllm_shard_balance_parse(const char *s, pllm_shard_balance *out);

/* The prefix key of a tokenized prompt ids[0..n) (see above; block_size >= 1). */
uint64_t pllm_shard_prefix_key(const int32_t *ids, size_t n, int32_t key_tokens,
                               int32_t block_size);
/* The key of a record without tokens: its id key text. */
uint64_t pllm_shard_text_key(const char *text);

/* --shard-balance tokens: the plan built from a first pass. */
typedef struct pllm_shard_plan pllm_shard_plan;

pllm_status pllm_shard_plan_create(pllm_shard_plan **out);
void pllm_shard_plan_free(pllm_shard_plan *p);
/* First pass: a record with prefix key `key` and `tokens` prompt tokens. */
pllm_status pllm_shard_plan_add(pllm_shard_plan *p, uint64_t key, int64_t tokens);
/* After the first pass: assign the keys to n shards. */
pllm_status pllm_shard_plan_finish(pllm_shard_plan *p, int32_t n);
/* Planned prompt tokens of shard k (after finish). */
int64_t pllm_shard_plan_tokens(const pllm_shard_plan *p, int32_t k);
int64_t pllm_shard_plan_keys(const pllm_shard_plan *p);

/* The shard of a record: plan NULL: H(prefix_key) mod n; otherwise the planned shard of
 * prefix_key, or H(record_key) mod n for a key the plan spreads or never saw (a record whose
 * tokenization failed in both passes has only its record key, pass it as both). */
int32_t pllm_shard_of(const pllm_shard_plan *plan, uint64_t prefix_key, uint64_t record_key,
                      int32_t n);

/*
 * The sidecar OUT.shard.json, rewritten (atomically: a temporary file renamed) when a shard run
 * starts and when it ends:
 *   {"pllm_shard": 1, "shard": K, "num_shards": N, "key_tokens": P, "balance": "tokens",
 *    "input": "prompts.jsonl", "input_bytes": 123456, "limit": 0, "model": "...",
 *    "records_in_shard": 250 | null, "records_read": 1000 | null, "complete": true,
 *    "attempts": [{"started_at": 1764200000.1, "finished_at": ... | null, "exit": 0 | null,
 *                  "lines_written": 250, "skipped_by_resume": 0, "itl_count": ..,
 *                  "itl_sum_ms": .., "counters": {...the engine's exact counters...}}]}
 * records_in_shard and records_read are known once the input was read to its end. Each run
 * (the first and every --resume) appends one attempt; an attempt with finished_at null was
 * killed (SIGKILL, node failure) before it could write its end.
 */
typedef struct pllm_shard_meta {
    pllm_shard_spec spec;
    json_t *doc; /* the whole sidecar object */
} pllm_shard_meta;

/* The sidecar path of an output path; caller frees. */
char *pllm_shard_sidecar_path(const char *out_path);
/* Load a sidecar; PLLM_ERR_NOT_FOUND when absent, PLLM_ERR_FORMAT (message naming the file
 * and field) when it is not one. */
pllm_status pllm_shard_meta_load(pllm_shard_meta *m, const char *path);
/* Parse a sidecar from JSON text (merge and the fuzz harness). */
pllm_status pllm_shard_meta_parse(pllm_shard_meta *m, const char *text, size_t len,
                                  const char *name);
/* Write m->doc to path atomically (path.tmp, then rename). */
pllm_status pllm_shard_meta_save(const pllm_shard_meta *m, const char *path);
void pllm_shard_meta_free(pllm_shard_meta *m);

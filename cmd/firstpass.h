/*
 * firstpass.h: one streaming pass over a file input before the run, its records tokenized on
 * every core. The --shard plan (cmd/shard.h) and the hybrid KV split (cmd/workload.h) are built
 * from it; when both want it, one pass serves both.
 *
 * Records are read in order on the calling thread, in batches of 1024; a pool of threads
 * renders and tokenizes a batch's prompts (cmd_record_tokens) while the calling thread reads the
 * next one and then joins them; then visit() sees each record of the batch in input order on
 * the calling thread. Two batches are held at a time, never the input. The
 * pass stops at the end of the input, after `limit` records (0: all), or at an input error
 * (cleared: the main pass reports it at the same record).
 *
 * Threads: rt->threads when the CPU backend runs (--threads), else every core this process may
 * use; at most 64. The tokenizer and the chat template are immutable once built, so the workers
 * share them (tokenizer/tokenizer.h, tokenizer/chat_template.h).
 */
#pragma once

#include "cmd/runtime.h"
#include "datasets/records.h"

#include <stdint.h>

typedef struct cmd_pass_item {
    const pllm_record *rec; /* rec->error set for a bad record */
    int64_t index;          /* its position among the input's records, from 0 */
    int64_t tokens;         /* its prompt tokens; -1 when it is bad or does not render/tokenize */
    uint64_t key;           /* key_fn of its tokens when it has them, else 0 */
} cmd_pass_item;

/* Called on the worker threads for each record that tokenized, with key_ctx, which it must
 * only read. */
typedef uint64_t (*cmd_pass_key_fn)(const void *ctx, const int32_t *ids, size_t n);
/* Called in input order on the calling thread; a non-zero result stops the pass with it. */
typedef int (*cmd_pass_visit_fn)(void *ctx, const cmd_pass_item *it);

/* 0; what visit returned; 3 when out of memory (message printed); or -1 when the input does not
 * open (the error is left set for the caller). key_fn may be NULL; visit gets ctx. *n_records
 * (may be NULL): the records visited. */
int cmd_first_pass(const cmd_runtime *rt, const char *input, pllm_format format,
                   pllm_extra_fields extra, const pllm_request_params *defaults, int64_t limit,
                   cmd_pass_key_fn key_fn, const void *key_ctx, cmd_pass_visit_fn visit, void *ctx,
                   int64_t *n_records);

/*
 * workload.h: the sequence lengths of an input, read before the run (a first pass), for the
 * engine's hybrid KV split (engine.h workload_lens; docs/architecture.md "Hybrid KV").
 *
 * Ownership: the caller frees *lens with free().
 */
#pragma once

#include "cmd/shared.h"
#include "datasets/records.h"

#include <stdbool.h>

/* When the model has sliding-window layers and the hybrid layout can apply (no --no-kv-hybrid,
 * no --prefix-cache-dir, a window shorter than the context), read the input once and list
 * prompt + max_tokens of each sequence (n of them for a record with n completions), at most
 * `limit` records (0: all); records that fail to parse or tokenize are left out (the main pass
 * reports them). Records --resume will skip and other shards' records (--shard) are counted
 * too: the split only needs the lengths' mix, which they share. Nothing for stdin ("-": one
 * pass only), or any other model. The pass tokenizes every prompt (chat templates applied),
 * far less work than the run itself. Sets
 * o->ep.workload_lens / n_workload to the list. 0, or 3 when out of memory (message printed). */
int cmd_workload_scan(const cmd_runtime *rt, cmd_engine_opts *o, const char *input,
                      pllm_format format, pllm_extra_fields extra,
                      const pllm_request_params *defaults, int64_t limit, int32_t **lens,
                      bool quiet);

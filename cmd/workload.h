/*
 * workload.h: the sequence lengths of an input, read before the run (a first pass), for the
 * engine's hybrid KV split (engine.h workload_lens; docs/architecture.md "Hybrid KV").
 *
 * Ownership: cmd_workload owns its list (cmd_workload_free).
 */
#pragma once

#include "cmd/shared.h"
#include "datasets/records.h"

#include <stdbool.h>

/* The input's sequence lengths for the hybrid split: prompt + max_tokens of each sequence (n of
 * them for a record with n completions), from a first pass over the input. That pass is
 * cmd_workload_scan's own, or --shard-balance tokens' planning pass, which reads and tokenizes
 * the same records (cmd_shard_prepare fills the list when given it): the input is then read and
 * tokenized once before the run, not twice. */
typedef struct cmd_workload {
    bool want;   /* the hybrid layout can apply to this input: the lengths are gathered */
    bool filled; /* another pass (the shard plan's) gathered them */
    int32_t *lens;
    int64_t n, cap;
} cmd_workload;

/* want: the model has sliding-window layers and the hybrid layout can apply (no
 * --no-kv-hybrid, no --prefix-cache-dir, a window shorter than the context), and the input is a
 * file (stdin, "-", has one pass only). */
void cmd_workload_init(cmd_workload *w, const cmd_runtime *rt, const cmd_engine_opts *o,
                       const char *input);
/* One record of a first pass, prompt_tokens its tokens (< 0: it failed to parse or tokenize; the
 * main pass reports it, the list leaves it out). 0, or 3 when out of memory (message printed). */
int cmd_workload_add(cmd_workload *w, const pllm_record *rec, int64_t prompt_tokens);
/* When w->want: read the input once, unless w->filled, listing at most `limit` records (0: all).
 * Records --resume will skip and other shards' records (--shard) are counted too: the split only
 * needs the lengths' mix, which they share. The pass tokenizes every prompt (chat templates
 * applied), far less work than the run itself. Sets o->ep.workload_lens / n_workload to the list
 * (owned by w: free it with cmd_workload_free once the engine is created). 0, or 3 when out of
 * memory (message printed). */
int cmd_workload_scan(const cmd_runtime *rt, cmd_engine_opts *o, const char *input,
                      pllm_format format, pllm_extra_fields extra,
                      const pllm_request_params *defaults, int64_t limit, cmd_workload *w,
                      bool quiet);
void cmd_workload_free(cmd_workload *w);

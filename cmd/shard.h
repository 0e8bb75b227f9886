/*
 * shard.h: what `pllm generate --shard K/N` adds to a run (the partition itself is
 * datasets/shard.h): the first pass of --shard-balance tokens, the per-record decision, the
 * input position tagged onto each output line, and the sidecar OUT.shard.json with one entry per
 * attempt (the first run and each --resume), which `pllm merge` reads.
 *
 * Output lines of a shard run end with "input_index": the record's 0-based position among all
 * the records of the input (every shard counts the same way), so `pllm merge --order input`
 * restores the single run's order. merge removes the field again.
 */
#pragma once

#include "cmd/runtime.h"
#include "cmd/workload.h"
#include "datasets/records.h"
#include "datasets/shard.h"
#include "engine/report.h"

typedef struct cmd_shard {
    bool on;
    pllm_shard_spec spec;
    int32_t block_size;
    pllm_shard_plan *plan;      /* --shard-balance tokens on a file; else NULL (hash) */
    int64_t n_read, n_in_shard; /* records read (all shards), records of this shard */
    int64_t planned_tokens;     /* prompt tokens planned for this shard (tokens), else -1 */
    char *sidecar;              /* path, NULL when the output is stdout */
    pllm_shard_meta meta;
    json_t *attempt; /* borrowed from meta.doc */
    double started_at;
    pllm_extra_fields extra; /* --extra-fields: the planning pass reads records as the run does */
    uint64_t *keys;          /* the planning pass's prefix key of each record, by input position */
    int64_t n_keys, cap_keys;
} cmd_shard;

/* The options --shard, --shard-key-tokens, --shard-balance (values into the given pointers). */
typedef struct cmd_shard_opts {
    const char *shard, *balance;
    int32_t key_tokens;
} cmd_shard_opts;

/* Validate the options; 0 or 2 (message printed). s->on stays false without --shard. */
int cmd_shard_init(cmd_shard *s, const cmd_shard_opts *o, const char *input, int32_t block_size);
/* Once the model is loaded: the first pass of --shard-balance tokens over the input (a file;
 * stdin falls back to hash, saying so). It keeps each record's prefix key (8 bytes a record),
 * so that the main pass decides without tokenizing every record again, and when w wants the
 * input's sequence lengths (cmd_workload_init) it lists them too and marks w filled. 0 or 3
 * (message printed). */
int cmd_shard_prepare(cmd_shard *s, const cmd_runtime *rt, const char *input, pllm_format format,
                      const pllm_request_params *defaults, int64_t limit, cmd_workload *w,
                      bool quiet);
/* Whether a record read from the input belongs to this shard; sets *index to its position
 * among all records. The key of a record the first pass saw is the one it kept; any other
 * record (hash balance) is tokenized into scratch for its key. */
bool cmd_shard_keep(cmd_shard *s, const cmd_runtime *rt, const char *file, const pllm_record *rec,
                    pllm_tokens *scratch, int64_t *index);
/* line (owned, a JSON object's text) with ,"input_index":index before its closing brace; NULL
 * when out of memory (line freed). */
char *cmd_shard_tag(char *line, int64_t index);
/* The sidecar at the start of a run: a fresh one, or with --resume the existing one (which must
 * be of the same shard, key and balance) with a new attempt. 0, 2 (the output belongs to another
 * shard) or 3 (message printed). */
int cmd_shard_begin(cmd_shard *s, const char *out_path, bool resume, const char *input,
                    const char *model_name, const char *device, int64_t limit, bool quiet);
/* The sidecar at the end: the attempt's outcome and counters; read_all: the input was read to
 * its end (the shard's record count is then known); complete: every record of the shard is in
 * the output. */
void cmd_shard_end(cmd_shard *s, int rc, bool read_all, bool complete, int64_t lines,
                   int64_t skipped, const pllm_engine_stats *es, const pllm_report *rep);
/* The shard's figures in the statistics JSON ("shard": {...}). */
void cmd_shard_json(const cmd_shard *s, json_t *stats);
void cmd_shard_free(cmd_shard *s);
/* Wall-clock Unix time in seconds (sub-second). */
double cmd_wall_time(void);

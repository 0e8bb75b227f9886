/*
 * runrecord.h: the record of which input and which options an output of `pllm generate` was
 * made from, kept beside it as OUT.pllm.json, so that --resume can refuse to continue a run
 * with another input or other options (which would skip requests that never ran with them, or
 * mix two runs' answers in one file).
 *
 *   {"pllm_run": 1, "command": "generate", "output": "out.jsonl",
 *    "input": {"path": "in.jsonl", "size": 1234, "xxh3": "9c2f..."},
 *    "options": {"format": "pllm", "output_format": "pllm", "echo": false, "token_ids": false,
 *                "model": {"name": ..., "identity": ...}, "sampling": {...}, "run_seed": 0}}
 *
 * The input's fingerprint is XXH3-64 of the file's bytes as stored (compressed bytes for a
 * compressed file) and its size: any edit changes it, moving or renaming the file does not.
 * stdin cannot be fingerprinted before it is read, so a run from stdin records no fingerprint
 * and cannot be resumed (save the input to a file). The options are those that change what
 * is written: input and output format, --echo, --token-ids, the model (its identity), the
 * resolved sampling defaults (command line over the model's generation config) and the run
 * seed. The device and the numerics options (--device, --dtype, --kv-cache-dtype, --cpu-math,
 * threads, batch sizes) may change: continuing a run on another machine is allowed. So may the
 * KV cache's size and layout (--kv-cache-mb, --num-blocks, --block-size, --no-kv-hybrid,
 * --no-prefix-cache): they decide only where K/V live and how many sequences run at once, not
 * what a sequence computes. --no-kv-hybrid in particular gives the same tokens and logprobs
 * (tests/engine_hybrid_kv.c: bitwise equal on the CPU; on CUDA tokens equal and logprobs within
 * 1e-4, as any change of batching gives), so a run may be resumed with it added or dropped.
 *
 * The record is written (through a temporary renamed over it) before the first output line,
 * so a run killed at any point leaves one behind.
 */
#pragma once

#include "engine/engine.h"

#include <jansson.h>

/* OUT + ".pllm.json"; caller frees. */
char *cmd_run_record_path(const char *out_path);
/* {"path", "size", "xxh3"} of an input file; {"path": "<stdin>"} for "-". NULL with the
 * message printed when the file cannot be read. */
json_t *cmd_run_record_input(const char *path);
/* The options part: see above. */
json_t *cmd_run_record_options(const char *format, const char *output_format, bool echo,
                               bool token_ids, const char *model_name, uint64_t model_identity,
                               const pllm_request_params *defaults, uint64_t run_seed);
/* Compare the record beside out_path with input and options. 0 when they match; 2 with every
 * difference named on stderr (no record, a record from stdin, another input, other options). */
int cmd_run_record_check(const char *out_path, const json_t *input, const json_t *options);
/* Write the record beside out_path. 0, or 3 with the message printed. */
int cmd_run_record_write(const char *out_path, const json_t *input, const json_t *options);

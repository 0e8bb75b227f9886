/*
 * records.h: prompt records, one per input line, and the output record per request.
 *
 * Input (pllm JSONL), one JSON object per line:
 *     {"id": "q1", "prompt": "The capital of France is"}
 *     {"id": 7, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32}
 *   id: string or integer, optional (the line number is used when absent); exactly one of
 *   prompt (raw text, no chat template) or messages (rendered with the model's chat template);
 *   optional per-record fields override the command line: max_tokens, min_tokens,
 *   temperature, top_p, top_k, min_p, repetition_penalty, presence_penalty,
 *   frequency_penalty, seed, stop (string or list of strings), stop_token_ids, ignore_eos,
 *   n, logprobs. Any other field is an error naming it (a typo must not silently fall back to
 *   a default). Blank lines are skipped.
 *
 * A malformed record is not fatal: parse() returns an error whose message names the line and
 * the field, and the caller writes an error record and goes on.
 *
 * Ownership: a parsed record owns its strings; free with pllm_record_free().
 */
#pragma once

#include "engine/common.h"
#include "engine/engine.h"
#include "tokenizer/chat_template.h"

#include <jansson.h>

typedef struct pllm_record {
    int64_t line;                 /* 1-based input line */
    json_t *id;                   /* the id as given (string or integer), or the line number */
    char *prompt;                 /* raw prompt; NULL when messages are given */
    pllm_chat_msg *messages;      /* [n_messages], strings owned */
    size_t n_messages;
    pllm_request_params params;   /* defaults overridden by the record's fields */
    char *stop_store[PLLM_MAX_STOP]; /* owned copies behind params.stop */
} pllm_record;

/* True when the line is blank (only whitespace): such lines are skipped, not records. */
bool pllm_record_line_is_blank(const char *line, size_t len);

/* Parse one line. On error the message is "line N: ..." naming the field, and rec->id is
 * still set when the line had a readable id (so the error record can carry it). */
pllm_status pllm_record_parse(pllm_record *rec, const char *line, size_t len, int64_t lineno,
                              const pllm_request_params *defaults);
void pllm_record_free(pllm_record *rec);

/* The id rendered as text (strings as is, integers in decimal). Caller frees. */
char *pllm_record_id_text(const json_t *id);

/* Output record fields. */
typedef struct pllm_output_opts {
    bool echo_prompt;     /* include "prompt" */
    bool token_ids;       /* include "token_ids" */
} pllm_output_opts;

/* Serialise a finished request as one JSON line (no newline). prompt may be NULL;
 * n_completions is the request's n ("index" is written when it is > 1). The caller frees *out
 * with free(). */
pllm_status pllm_output_completion(char **out, const json_t *id, const char *prompt, int32_t n_completions,
                                   const pllm_completion *c, const pllm_output_opts *opts);
/* Serialise an error record for a request that never ran. */
pllm_status pllm_output_error(char **out, const json_t *id, int64_t line, const char *message);

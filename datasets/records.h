/*
 * records.h: prompt records in the three input formats, and the output record per request.
 *
 * Input formats (one JSON object per line, or the elements of a top-level JSON list):
 *
 *   pllm      {"id": "q1", "prompt": "The capital of France is"}
 *             {"id": 7, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32}
 *     id: string or integer, optional (the line number, or the element number in a list, is
 *     used when absent); exactly one of prompt (raw text, no chat template) or messages
 *     (rendered with the model's chat template); optional per-record fields override the
 *     command line: max_tokens, min_tokens, temperature, top_p, top_k, min_p,
 *     repetition_penalty, presence_penalty, frequency_penalty, seed, stop (string or list),
 *     stop_token_ids, ignore_eos, n, logprobs, and metadata (any JSON value, echoed verbatim into
 * the output line). Any other field is an error naming it (a typo must not silently fall back to a
 *     default), unless --extra-fields ignore or passthrough says otherwise (pllm_extra_fields).
 *
 *   openai    the OpenAI batch input format, as `vllm run-batch` reads it:
 *             {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
 *              "body": {"model": "m", "messages": [...], "max_tokens": 32}}
 *     url /v1/chat/completions (body.messages; content a string or a list of text parts) or
 *     /v1/completions (body.prompt: a string). body fields: model (kept for the output),
 *     max_tokens / max_completion_tokens, temperature, top_p, n, stop, seed, presence_penalty,
 *     frequency_penalty, logprobs (chat: true/false; completions: the number of top entries),
 *     top_logprobs (chat), user (ignored), stream (false only), and vLLM's extras top_k, min_p,
 *     repetition_penalty, min_tokens, ignore_eos, stop_token_ids. Anything else is an error.
 *
 *   sharegpt  {"id": "x", "conversations": [{"from": "human", "value": "..."},
 *                                            {"from": "gpt", "value": "..."}]}
 *     from: human/user, gpt/assistant (also chatgpt, bard, bing, model), system. The record's
 *     messages are the turns up to the last human turn (rendered with the chat template);
 *     a single human turn is a valid record. `reference` is the reply that follows the first
 *     human turn (benchmarks take output lengths from it). Other keys of the entry and of the
 *     turns are ignored (ShareGPT dumps carry assorted extras).
 *
 * Errors: a malformed record is not fatal. parse() returns an error status, sets rec->error
 * to a message that names the file, the line (and the list element), the field and the value
 * ("data.jsonl:3: field 'temperature': must be a number, got \"hot\""), and keeps rec->id
 * when the record had a readable one, so the caller writes an error record and goes on.
 *
 * Ownership: a parsed record owns everything it points to; free with pllm_record_free().
 */
#pragma once

#include "model/common.h"
#include "engine/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>

typedef enum pllm_format {
    PLLM_FORMAT_AUTO = 0,
    PLLM_FORMAT_PLLM,
    PLLM_FORMAT_OPENAI,
    PLLM_FORMAT_SHAREGPT,
} pllm_format;

const char *pllm_format_name(pllm_format f); /* "auto", "pllm", "openai", "sharegpt" */
/* Parse a --format value; PLLM_ERR_INVALID with the allowed values otherwise. */
pllm_status pllm_format_parse(const char *s, pllm_format *out);

typedef enum pllm_endpoint {
    PLLM_ENDPOINT_NONE = 0,   /* pllm and sharegpt records */
    PLLM_ENDPOINT_CHAT,       /* /v1/chat/completions */
    PLLM_ENDPOINT_COMPLETIONS /* /v1/completions */
} pllm_endpoint;

/* What a field the format does not know does (--extra-fields):
 *   ERROR (the default): the record is an error naming the field (a typo never silently falls
 *     back to a default);
 *   IGNORE: the field is dropped;
 *   PASSTHROUGH: the field is kept and echoed in the output line's "metadata" object, beside
 *     the keys of the record's own "metadata" object (a name in both is an error).
 * Whatever the mode, a record's "metadata" field (pllm: top level; openai: top level of the
 * batch line) is echoed verbatim as the output line's "metadata" (any JSON value). */
typedef enum pllm_extra_fields {
    PLLM_EXTRA_ERROR = 0,
    PLLM_EXTRA_IGNORE,
    PLLM_EXTRA_PASSTHROUGH,
} pllm_extra_fields;

/* Parse an --extra-fields value (error, ignore, passthrough); PLLM_ERR_INVALID otherwise. */
pllm_status pllm_extra_fields_parse(const char *s, pllm_extra_fields *out);

/* Where a record is: file name for messages, 1-based line, 1-based element of a JSON list
 * (0 for JSON lines); and what unknown fields do. */
typedef struct pllm_record_loc {
    const char *file;
    int64_t line;
    int64_t element;
    pllm_extra_fields extra;
} pllm_record_loc;

typedef struct pllm_record {
    pllm_format format;
    int64_t line, element;   /* as in pllm_record_loc */
    json_t *id;              /* pllm/sharegpt: the id, or the line/element number;
                                openai: custom_id (NULL when unreadable) */
    char *prompt;            /* raw prompt; NULL when messages are given */
    pllm_chat_msg *messages; /* [n_messages], strings owned */
    size_t n_messages;
    char *reference;            /* sharegpt: the reply after the first human turn, or NULL */
    pllm_endpoint endpoint;     /* openai */
    char *model;                /* openai: body.model, or NULL */
    bool has_max_tokens;        /* the record set max_tokens itself */
    bool want_logprobs;         /* logprobs of the generated tokens were asked for */
    int32_t top_logprobs;       /* top entries per token to write (<= params.sampling.logprobs) */
    pllm_request_params params; /* the defaults overridden by the record's fields */
    char *stop_store[PLLM_MAX_STOP]; /* owned copies behind params.stop */
    char *error;                     /* the message when the record is bad, else NULL */
    json_t *metadata; /* echoed into the output line as "metadata" (pllm_extra_fields), or NULL */
} pllm_record;

/* True when the line is blank (only whitespace): such lines are skipped, not records. */
bool pllm_record_line_is_blank(const char *line, size_t len);

/* Parse one record (the JSON text of one line or list element) in format fmt (not AUTO). */
pllm_status pllm_record_parse(pllm_record *rec, pllm_format fmt, const char *text, size_t len,
                              const pllm_record_loc *loc, const pllm_request_params *defaults);
/* A bad record whose text could not be read at all (a line over the reader's cap): rec is
 * filled as parse() fills a record that is not JSON (the line/element number as its id, none
 * for openai) with the error "file:line: message". Returns PLLM_ERR_FORMAT (PLLM_ERR_NOMEM
 * when even the message could not be kept: rec->error NULL). */
pllm_status pllm_record_reject(pllm_record *rec, pllm_format fmt, const pllm_record_loc *loc,
                               const pllm_request_params *defaults, const char *message);
void pllm_record_free(pllm_record *rec);

/* The format a parsed JSON object looks like: openai when it has "custom_id", sharegpt when
 * it has "conversations", else pllm. */
pllm_format pllm_format_of_object(const json_t *obj);

/* The id rendered as text (strings as is, integers in decimal). Caller frees. */
char *pllm_record_id_text(const json_t *id);
/* The key --resume matches records and output lines on: the id as text, or, for a record
 * with no readable id (an OpenAI line without custom_id), "\x01" followed by "l<line>" or
 * "e<element>". Caller frees. */
char *pllm_record_key(const pllm_record *rec);
/* The same key from an output line's JSON object (custom_id when the object has one, else
 * id; for an OpenAI error line with a null custom_id, error.line / error.element; for a pllm
 * line with a null id, line / element). NULL when the line names no request. Caller frees. */
char *pllm_output_key(const json_t *out_line);
/* The location key ("\x01" "l<line>" or "e<element>") whatever the record's id: the key of a
 * record whose id repeats an earlier record's (its error line carries a null id). */
char *pllm_record_loc_key(const pllm_record *rec);

/* ---------------------------------------------------------------- output (record_output.c) */

typedef struct pllm_output_opts {
    bool echo_prompt; /* include "prompt" */
    bool token_ids;   /* include "token_ids" */
    const pllm_tokenizer *tok; /* logprobs carry each token's text ("token") beside its id */
} pllm_output_opts;

/* pllm output line for a finished completion (no newline). prompt may be NULL; n_completions
 * is the request's n ("index" is written when it is > 1). top_logprobs: top entries per token
 * to write (-1: all the completion has). Caller frees *out with free(). */
pllm_status pllm_output_completion(char **out, const json_t *id, const char *prompt,
                                   int32_t n_completions, const pllm_completion *c,
                                   int32_t top_logprobs, const pllm_output_opts *opts);
/* pllm error line for a request that never ran (line/element: where it was; element 0 for
 * JSON lines). */
pllm_status pllm_output_error(char **out, const json_t *id, int64_t line, int64_t element,
                              const char *message);

/* OpenAI batch output (`vllm run-batch`'s format):
 *   {"id": "pllm-<hash>", "custom_id": ..., "response": {"status_code": 200, "request_id":
 *    "pllm-batch-<hash>", "body": <chat.completion or text_completion>}, "error": null}
 * The hash is of the custom_id and the line, so a rerun writes the same ids.
 * Build one choice per completion with pllm_openai_choice (during the emit callback: it
 * copies what it needs), then the line with pllm_output_openai once all n are in. */
pllm_status pllm_openai_choice(json_t **out, pllm_endpoint ep, const pllm_completion *c,
                               bool want_logprobs, int32_t top_logprobs, const pllm_tokenizer *tok);

typedef struct pllm_openai_usage {
    int64_t prompt_tokens, completion_tokens, cached_tokens;
} pllm_openai_usage;

/* choices: a JSON list in index order (stolen). created: Unix seconds. */
pllm_status pllm_output_openai(char **out, const json_t *custom_id, int64_t line, pllm_endpoint ep,
                               const char *model, json_t *choices, const pllm_openai_usage *usage,
                               int64_t created);
/* An OpenAI error line: response {status_code, request_id, body: null}, error {"message",
 * "type", "code", "line", "element"?}. status 400 for a bad record, 500 for a failed run. */
pllm_status pllm_output_openai_error(char **out, const json_t *custom_id, int64_t line,
                                     int64_t element, const char *message, int status_code);

/*
 * chat_template.h: renders a model's own Jinja chat template (tokenizer_config.json
 * `chat_template`, GGUF `tokenizer.chat_template`) with a Jinja subset interpreter, byte for
 * byte as Python jinja2 renders it (as transformers' apply_chat_template calls it:
 * trim_blocks and lstrip_blocks on, loopcontrols).
 *
 * Supported: {{ }}, {% %}, {# #}, whitespace control (-), if/elif/else, for (loop.index,
 * loop.index0, loop.first, loop.last, loop.length, else), set (incl. namespace()), macro (simple),
 * string/int/float/bool/none/list/dict literals, + - * / // % ~, comparisons, and/or/not, in,
 * is (defined, none, string, ...), subscripts and slices, attribute access, method calls
 * (strip, lstrip, rstrip, split, startswith, endswith, upper, lower, title, replace, items,
 * keys, values, get), filters (length, trim, upper, lower, capitalize, title, default, join,
 * tojson, string, int, first, last, list, replace, safe, items, selectattr, map), and
 * raise_exception(msg). Anything else is an error naming the construct and its line.
 *
 * Ownership: parse() returns a template freed with pllm_chat_template_free(); render appends
 * to a caller's buffer.
 */
#pragma once

#include "engine/common.h"

typedef struct pllm_chat_template pllm_chat_template;

typedef struct pllm_chat_msg {
    const char *role;
    const char *content;
} pllm_chat_msg;

typedef struct pllm_chat_render_params {
    const pllm_chat_msg *messages;
    size_t n_messages;
    bool add_generation_prompt;
    const char *bos_token;  /* the model's BOS text ("" when none) */
    const char *eos_token;  /* the model's EOS text */
} pllm_chat_render_params;

/* Parse a template. name labels error messages ("tokenizer.chat_template"). */
pllm_status pllm_chat_template_parse(pllm_chat_template **out, const char *src, size_t len, const char *name);
void pllm_chat_template_free(pllm_chat_template *t);
/* Render; a template error (raise_exception, unknown filter, type error) returns
 * PLLM_ERR_INVALID / PLLM_ERR_UNSUPPORTED with the message and template line. */
pllm_status pllm_chat_template_render(const pllm_chat_template *t, const pllm_chat_render_params *p, pllm_buf *out);

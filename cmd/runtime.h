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
    const char *model;    /* NULL: the default model under $PLLM_HOME */
    const char *device;   /* "auto", "cpu", "cuda", "cuda:N" */
    int32_t threads;      /* 0: all cores */
} cmd_runtime_opts;

typedef struct cmd_runtime {
    pllm_model *model;
    pllm_tokenizer *tok;
    pllm_chat_template *chat;   /* NULL when the model has no template */
    char *chat_error;           /* why chat is NULL when the model has one that failed to parse */
    char *bos_text, *eos_text;
    pllm_backend backend;
    const char *device_name;
} cmd_runtime;

/* The default model path ($PLLM_HOME or ~/.cache/pllm, + models/<file>); caller frees. */
char *cmd_default_model_path(void);
/* Load everything; on failure prints the error to stderr and returns the exit code (3). */
int cmd_runtime_open(cmd_runtime *rt, const cmd_runtime_opts *o, bool quiet);
void cmd_runtime_close(cmd_runtime *rt);

/*
 * runtime.h: what every model-running command sets up the same way: where the default model
 * is, loading model + tokenizer + chat template, picking and creating the backend.
 *
 * Devices (--device): "cpu"; "cuda" or "cuda:N" (the CUDA backend on device N, default 0);
 * "auto" (the default): CUDA device 0 when this binary has the CUDA backend and a device
 * answers, else the CPU, saying on stderr which it picked and why. Asking for CUDA where it
 * cannot run (a build without the backend, no driver, no device, N out of range) is a usage
 * error (exit 2) reported before the model is loaded. The binary has the CUDA backend when it
 * is built with PLLM_HAVE_CUDA (pllm: the real library, when nvcc is found; the test-only
 * pllm-emu: the emulated one, cuda/emu/, whose one device is the host).
 */
#pragma once

#include "model/backend.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

#define PLLM_DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"

typedef struct cmd_runtime_opts {
    const char *model;         /* NULL: the default model under $PLLM_HOME */
    const char *device;        /* "auto", "cpu", "cuda", "cuda:N" */
    int32_t threads;           /* 0: all cores */
    bool no_backend;           /* model + tokenizer only (tokenize, info) */
    bool tokenizer_optional;   /* a model whose tokenizer cannot be loaded is not an error (info) */
    float gpu_memory_fraction; /* CUDA: share of the device's memory pllm may use; 0: 0.9 */
    int32_t step_tokens;       /* CUDA: the engine's tokens and sequences per step, so the */
    int32_t step_seqs;         /* workspace is reserved before the KV pool; 0: defaults */
    int32_t weight_dtype;      /* CUDA: weights on the device, PLLM_DTYPE_F16/BF16/F32; -1: auto */
    int32_t kv_dtype;          /* KV cache PLLM_DTYPE_F16/F32; -1: the backend's default */
    int32_t cpu_math;          /* CPU: pllm_cpu_math (0: auto, int8 where the weights are quantized) */
    int32_t attention;         /* CUDA decode attention: 0 auto, 1 own, 2 flashinfer (the order of
                                  pllm_cuda_attention) */
    pllm_chat_thinking
        thinking;              /* --thinking: the chat template's enable_thinking (0: undefined) */
    const char *chat_template; /* --chat-template FILE: overrides the model's template */
    const char *system_prompt; /* --system-prompt: messages without a system turn get it first */
} cmd_runtime_opts;

typedef enum cmd_device_kind { CMD_DEVICE_CPU = 0, CMD_DEVICE_CUDA } cmd_device_kind;

/* The device a --device value resolves to on this machine. */
typedef struct cmd_device {
    cmd_device_kind kind;
    int32_t ordinal; /* CUDA device number */
    bool is_auto;    /* picked by --device auto */
    char why[256];   /* auto: why this device ("1 CUDA device", "no CUDA device (...)") */
} cmd_device;

/* Resolve --device spec (NULL: "auto"): 0, or 2 with the reason printed to stderr. */
int cmd_device_select(cmd_device *out, const char *spec);

typedef struct cmd_runtime {
    pllm_model *model;
    pllm_tokenizer *tok;
    char *tok_error;          /* why tok is NULL (tokenizer_optional) */
    pllm_chat_template *chat; /* NULL when the model has no template */
    char *chat_src;           /* the template's source text, or NULL */
    char *chat_error;         /* why chat is NULL when the model has one that failed to parse */
    char *bos_text, *eos_text;
    pllm_backend backend;
    cmd_device dev;
    char device_name[32]; /* "cpu", "cuda:0" */
    char kernels[288];    /* the CPU's kernel ISA, or the GPU's name and sm_XY */
    int32_t threads;      /* CPU threads (0 on CUDA) */
    pllm_chat_thinking thinking; /* enable_thinking for the chat template (from the options) */
    const char *system_prompt;   /* cmd_runtime_opts.system_prompt */
} cmd_runtime;

/* Parse a --thinking value: auto (the template's default: enable_thinking undefined), on, off.
 * 0, or 2 with the reason printed to stderr. */
int cmd_thinking_parse(const char *s, pllm_chat_thinking *out);

/* The default model path ($PLLM_HOME or ~/.cache/pllm, + models/<file>); caller frees. */
char *cmd_default_model_path(void);
/* Load everything; on failure prints the error to stderr and returns the exit code (3, or 2
 * for a bad --device). The chat template comes from the GGUF metadata
 * (tokenizer.chat_template) or a Hugging Face directory's tokenizer_config.json. */
int cmd_runtime_open(cmd_runtime *rt, const cmd_runtime_opts *o, bool quiet);
void cmd_runtime_close(cmd_runtime *rt);
/* One line naming the device and what it holds, for reports ("cuda:0: NVIDIA H100 80GB HBM3,
 * sm_90 (132 SMs, 79.1 GiB), F16 weights 0.27 GB, F16 KV pool 61.20 GB", "cpu (avx2 kernels,
 * 2 threads)"); the KV pool is there once the engine has sized it. */
void cmd_runtime_describe(const cmd_runtime *rt, char *out, size_t cap);

#include "datasets/records.h"

/* A record's prompt as token ids: the raw prompt encoded with BOS as the model's metadata
 * says, or the messages rendered with the chat template (add_generation_prompt) and encoded
 * without adding BOS (the template writes it, as transformers renders it). rendered (may be
 * NULL) receives the prompt text. Errors are prefixed "file:line: field '...': ". */
pllm_status cmd_record_tokens(const cmd_runtime *rt, const char *file, const pllm_record *rec,
                              pllm_tokens *ids, pllm_buf *rendered);
/* "file:line: " or "file:line: element N: " for messages about a record. */
void cmd_record_where(char *out, size_t cap, const char *file, const pllm_record *rec);

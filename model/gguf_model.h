/*
 * gguf_model.h: the GGUF file loader behind pllm_model_load() (internal to model/; callers use
 * model.h). Its twin for Hugging Face directories is hf_model.h.
 */
#pragma once

#include "model/model.h"

/* Fill m (zeroed by the caller) from the GGUF file at path: m->gguf (owned by m), config,
 * weights, generation defaults, identity, and m->name from general.name when the file has one
 * (else left NULL). On failure m holds what was loaded so far; pllm_model_free() frees it. */
pllm_status pllm_gguf_model_init(pllm_model *m, const char *path);

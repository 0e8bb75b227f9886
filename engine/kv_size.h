/*
 * kv_size.h: how many KV blocks a budget buys. The one sizing rule, used by the engine
 * (pllm_engine_create: the default budget, half the backend's free memory up to a cap) and by
 * `pllm generate` / `pllm bench` on a CUDA device (the budget --gpu-memory-fraction leaves).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* The blocks of block_bytes each (> 0) that budget bytes hold, but no more than max_seqs
 * sequences of max_model_len tokens can use (each rounded up to whole blocks of block_size
 * tokens): memory beyond that would never hold a token. */
size_t pllm_kv_blocks_for_budget(size_t budget, size_t block_bytes, int32_t block_size,
                                 int32_t max_seqs, int32_t max_model_len);

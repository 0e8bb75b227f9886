/* kv_size.c: the KV sizing rule (kv_size.h). */
#include "engine/kv_size.h"

#include "model/common.h"

size_t pllm_kv_blocks_for_budget(size_t budget, size_t block_bytes, int32_t block_size,
                                 int32_t max_seqs, int32_t max_model_len)
{
    size_t full =
        (size_t)max_seqs * (((size_t)max_model_len + (size_t)block_size - 1) / (size_t)block_size);
    return PLLM_MIN(budget / block_bytes, full);
}

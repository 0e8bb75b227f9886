/*
 * synth.h: synthetic benchmark prompts as token ids, deterministic in (seed, prompt index), so
 * a workload never has to be stored and two runs with the same seed are the same workload.
 *
 *   random  input_len ids drawn uniformly from the allowed ids;
 *   prefix  n_prefixes shared prefixes of prefix_len ids; prompt i is prefix (i mod n_prefixes)
 *           followed by input_len ids of its own (the prefixes interleave, so the engine's
 *           prefix grouping has work to do).
 *
 * The allowed ids are the caller's (the vocabulary without special tokens, so that no prompt
 * holds an EOS or a chat marker). Draws: x = SplitMix64 mix of (seed, stream, index, position),
 * id = allowed[(x >> 32) * n_allowed >> 32].
 */
#pragma once

#include "model/common.h"

typedef enum pllm_synth_kind {
    PLLM_SYNTH_RANDOM = 0,
    PLLM_SYNTH_PREFIX,
} pllm_synth_kind;

typedef struct pllm_synth {
    pllm_synth_kind kind;
    const int32_t *allowed; /* [n_allowed], borrowed */
    int32_t n_allowed;
    uint64_t seed;
    int32_t input_len;  /* random: the prompt; prefix: the part after the prefix */
    int32_t prefix_len; /* prefix only */
    int32_t n_prefixes; /* prefix only */
} pllm_synth;

/* Append prompt index's ids to out. */
pllm_status pllm_synth_prompt(const pllm_synth *s, int64_t index, pllm_tokens *out);

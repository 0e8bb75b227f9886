#include "datasets/synth.h"

static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int32_t draw(const pllm_synth *s, uint64_t stream, uint64_t index, uint64_t pos)
{
    uint64_t x = mix(mix(mix(s->seed ^ stream) ^ index) ^ pos);
    return s->allowed[((x >> 32) * (uint64_t)s->n_allowed) >> 32];
}

pllm_status pllm_synth_prompt(const pllm_synth *s, int64_t index, pllm_tokens *out)
{
    if (s->n_allowed < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "synthetic prompts: no token ids to draw from");
    if (s->input_len < 0 ||
        (s->kind == PLLM_SYNTH_PREFIX && (s->prefix_len < 0 || s->n_prefixes < 1)))
        return pllm_errorf(PLLM_ERR_INVALID,
                           "synthetic prompts: bad lengths (input %d, prefix %d x %d)",
                           s->input_len, s->prefix_len, s->n_prefixes);
    if (s->kind == PLLM_SYNTH_PREFIX) {
        uint64_t p = (uint64_t)index % (uint64_t)s->n_prefixes;
        for (int32_t j = 0; j < s->prefix_len; j++)
            PLLM_TRY(pllm_tokens_push(out, draw(s, 0x70726566ull, p, (uint64_t)j)));
    }
    for (int32_t j = 0; j < s->input_len; j++)
        PLLM_TRY(pllm_tokens_push(out, draw(s, 0x73756666ull, (uint64_t)index, (uint64_t)j)));
    return PLLM_OK;
}

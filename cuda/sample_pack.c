/*
 * sample_pack.c: the host half of device sampling: a request's parameters and id lists packed
 * into the record sample.cu reads (see kernels.h).
 */
#include "cuda/kernels.h"

#include <string.h>

/* The penalties sampling.h applies, decided as pllm_sample decides them. */
static void penalties(const pllm_sampling_params *p, const pllm_sample_ctx *ctx, bool *rep,
                      bool *freq)
{
    const int32_t n_prompt = ctx ? ctx->n_prompt : 0, n_output = ctx ? ctx->n_output : 0;
    *rep = p->repetition_penalty != 1.0f && n_prompt + n_output > 0;
    *freq = (p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f) && n_output > 0;
}

int32_t pllm_cuda_sample_n_ids(const pllm_sampling_params *p, const pllm_sample_ctx *ctx)
{
    if (!ctx) return 0;
    bool rep, freq;
    penalties(p, ctx, &rep, &freq);
    return (rep ? ctx->n_prompt : 0) + (rep || freq ? ctx->n_output : 0) + ctx->n_banned;
}

void pllm_cuda_sample_fill(pllm_cuda_sample_params *rec, const pllm_sampling_params *p,
                           const pllm_sample_ctx *ctx, int32_t n_vocab, int32_t *ids,
                           int32_t ids_base)
{
    bool rep, freq;
    penalties(p, ctx, &rep, &freq);
    memset(rec, 0, sizeof *rec);
    rec->temperature = p->temperature;
    rec->top_p = p->top_p;
    rec->min_p = p->min_p;
    rec->repetition_penalty = p->repetition_penalty;
    rec->presence_penalty = p->presence_penalty;
    rec->frequency_penalty = p->frequency_penalty;
    rec->top_k = p->top_k;
    /* sampling.h: a padded vocabulary's row is its first n_valid logits */
    rec->n_valid = ctx && ctx->n_valid > 0 && ctx->n_valid < n_vocab ? ctx->n_valid : n_vocab;
    rec->n_top = PLLM_MIN(PLLM_MIN(p->logprobs, rec->n_valid), PLLM_CUDA_MAX_TOP);
    rec->seed = p->seed;
    rec->step = ctx ? (uint64_t)ctx->n_output : 0;
    rec->flags = (rep ? PLLM_CUDA_SAMPLE_REP : 0) | (freq ? PLLM_CUDA_SAMPLE_FREQ : 0);
    int32_t n = 0;
    if (!ctx) return;
    if (rep) {
        rec->prompt_off = ids_base + n;
        rec->n_prompt = ctx->n_prompt;
        if (ctx->n_prompt) memcpy(ids + n, ctx->prompt, sizeof(int32_t) * (size_t)ctx->n_prompt);
        n += ctx->n_prompt;
    }
    if (rep || freq) {
        rec->output_off = ids_base + n;
        rec->n_output = ctx->n_output;
        if (ctx->n_output) memcpy(ids + n, ctx->output, sizeof(int32_t) * (size_t)ctx->n_output);
        n += ctx->n_output;
    }
    rec->banned_off = ids_base + n;
    rec->n_banned = ctx->n_banned;
    if (ctx->n_banned) memcpy(ids + n, ctx->banned, sizeof(int32_t) * (size_t)ctx->n_banned);
}

/*
 * sampling.h: per-request sampling parameters and the reference sampler.
 *
 * The sampler turns one row of logits into one token. It is the CPU backend's sampler and the
 * reference the CUDA sampler is tested against, so its semantics are stated exactly:
 *
 *   1. banned ids (EOS and stop ids before min_tokens is reached) get -inf.
 *   2. repetition_penalty r != 1 (HF/vLLM): for every distinct id in prompt ∪ output,
 *      logit = logit > 0 ? logit / r : logit * r.
 *   3. frequency/presence penalties (OpenAI/vLLM), over output tokens only:
 *      logit -= frequency_penalty * count(id) + presence_penalty * (count(id) > 0).
 *   4. temperature == 0 (or top_k == 1): greedy, the lowest id among the maximal logits.
 *   5. otherwise logits /= temperature; then top_k (keep the k largest), top_p (keep the
 *      smallest set of largest probabilities whose sum reaches top_p; always at least one),
 *      min_p (drop p < min_p * p_max), all computed on the softmax of the temperature-scaled
 *      logits; renormalise and draw with u = pllm_rng_uniform(seed, step).
 *
 * Randomness is counter-based: the draw for a request's k-th generated token depends only on
 * (seed, k), never on batch composition, thread count or the order requests were admitted.
 * Requests with no seed get one from the engine's run seed and the request's index.
 *
 * Logprobs are those of the model's raw distribution (log_softmax of the unmodified logits),
 * as vLLM reports by default.
 */
#pragma once

#include "engine/common.h"

typedef struct pllm_sampling_params {
    float temperature;        /* 0: greedy. default 1 is set by pllm_sampling_defaults */
    int32_t top_k;            /* <= 0: off */
    float top_p;              /* 1: off; in (0, 1] */
    float min_p;              /* 0: off; in [0, 1] */
    float repetition_penalty; /* 1: off; > 0 */
    float presence_penalty;   /* 0: off; in [-2, 2] */
    float frequency_penalty;  /* 0: off; in [-2, 2] */
    uint64_t seed;
    int32_t logprobs;         /* top-N logprobs to return per generated token; 0: none; <= 20 */
} pllm_sampling_params;

/* Greedy defaults: temperature 0, everything else off. */
void pllm_sampling_defaults(pllm_sampling_params *p);
/* Validate; on error the message names the field ("temperature must be >= 0, got -1"). */
pllm_status pllm_sampling_validate(const pllm_sampling_params *p);

/* What the sampler needs to know about the sequence besides its logits. */
typedef struct pllm_sample_ctx {
    const int32_t *prompt;   /* [n_prompt]: for the repetition penalty */
    int32_t n_prompt;
    const int32_t *output;   /* [n_output]: tokens generated so far */
    int32_t n_output;        /* also the RNG step: the draw uses (seed, n_output) */
    const int32_t *banned;   /* [n_banned] ids that must not be sampled this step */
    int32_t n_banned;
} pllm_sample_ctx;

typedef struct pllm_sample_result {
    int32_t token;
    float logprob;           /* log-prob of token under the raw distribution */
    int32_t n_top;           /* = params->logprobs */
    int32_t *top_ids;        /* [n_top], caller-provided (may be NULL when logprobs == 0) */
    float *top_logprobs;     /* [n_top] */
} pllm_sample_result;

/* Bytes of scratch pllm_sample needs for a vocabulary of n_vocab. */
size_t pllm_sample_scratch_bytes(int32_t n_vocab);
/* Sample from logits [n_vocab] (modified in place). scratch: pllm_sample_scratch_bytes bytes. */
void pllm_sample(pllm_sample_result *res, float *logits, int32_t n_vocab, const pllm_sampling_params *p,
                 const pllm_sample_ctx *ctx, void *scratch);

/* Uniform double in [0, 1) from (seed, step): a counter-based generator (stateless). */
double pllm_rng_uniform(uint64_t seed, uint64_t step);

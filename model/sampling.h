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
 *
 * A padded vocabulary: with ctx->n_valid in (0, n_vocab), the row is taken as its first n_valid
 * logits, everywhere above (logprobs and their normaliser too): ids without a token are never
 * sampled and never listed, as if the model's vocabulary were the tokenizer's (pllm; vLLM cuts
 * the logits to the original vocabulary the same way).
 *
 * Exact rules where the steps above leave a choice (decided as vLLM v1 does, see
 * vllm/v1/sample/sampler.py and ops/topk_topp_sampler.py, unless marked "pllm"):
 *   - Input: a NaN logit is treated as -inf and +inf as FLT_MAX (written back in place) before
 *     anything else, logprobs included (pllm). Ids outside [0, n_vocab) in prompt, output or
 *     banned are ignored.
 *   - Penalty arithmetic is float32: v / r or v * r, then v - (frequency_penalty * (float)count
 *     + presence_penalty); a result above FLT_MAX becomes FLT_MAX (pllm).
 *   - Greedy (step 4) ignores top_p and min_p. If no id has a finite logit after steps 1-3, the
 *     result is the lowest id that is not banned (0 if all are) (pllm).
 *   - Step 5, with lmax the largest processed logit and w(i) = exp((l(i) - lmax) / temperature)
 *     computed in float64 (so p(i) = w(i) / sum w):
 *       a. min_p first, on the full distribution (vLLM applies it as a logits processor before
 *          top-k/top-p): keep w(i) >= min_p, i.e. p >= min_p * p_max. The maximum is always kept.
 *       b. top_k: keep l(i) >= the k-th largest processed logit; ties with it are all kept, so
 *          more than k ids may survive. top_k == 0 and top_k == -1 both mean off.
 *          (a and b are both thresholds, so their order does not matter.)
 *       c. top_p, on the survivors of a and b renormalised: rank them by processed logit
 *          descending, ties by lower id first; keep an id iff the sum of w over the ids ranked
 *          before it is < top_p * (sum of w over the survivors). The first is always kept;
 *          top_p == 1 is off.
 *       d. draw: u = pllm_rng_uniform(seed, n_output); walk the kept ids in ascending id order
 *          accumulating w (float64); the token is the first id whose running sum exceeds
 *          u * (total of w over the kept ids). (If rounding leaves none, the last kept id with
 *          w > 0.)
 *     Sums may be evaluated in any order (blocked, or a parallel scan on a GPU): two correct
 *     implementations agree except when a cumulative sum lands within rounding of its
 *     threshold (u, top_p, min_p), which tests treat as ambiguous.
 *   - pllm_rng_uniform (pllm): with mix(z) = SplitMix64's finaliser
 *          z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9; z = (z ^ z >> 27) * 0x94D049BB133111EB;
 *          z ^ z >> 31   (uint64 arithmetic mod 2^64),
 *       key = mix(seed ^ 0x243F6A8885A308D3), x = mix(key + (step + 1) * 0x9E3779B97F4A7C15),
 *       u = (x >> 11) * 2^-53.
 *   - Logprobs: res->logprob is the sampled token's raw logprob; banned ids keep theirs and may
 *     appear in the top-N list, which is sorted by raw logit descending, ties by lower id, with
 *     n_top = min(params->logprobs, n_vocab).
 *   - pllm_sample expects params that passed pllm_sampling_validate (it asserts the cheap
 *     invariants only).
 */
#pragma once

#include "model/common.h"

typedef struct pllm_sampling_params {
    float temperature;        /* 0: greedy (the pllm_sampling_defaults value); >= 0, finite */
    int32_t top_k;            /* 0 or -1: off; >= -1 */
    float top_p;              /* 1: off; in (0, 1] */
    float min_p;              /* 0: off; in [0, 1] */
    float repetition_penalty; /* 1: off; > 0, finite */
    float presence_penalty;   /* 0: off; in [-2, 2] */
    float frequency_penalty;  /* 0: off; in [-2, 2] */
    uint64_t seed;
    int32_t logprobs;         /* top-N logprobs to return per generated token; 0: none; in [0, 20] */
} pllm_sampling_params;

/* Greedy defaults: temperature 0, everything else off. */
void pllm_sampling_defaults(pllm_sampling_params *p);
/* Validate; on error the message names the field ("temperature must be >= 0, got -1"). */
pllm_status pllm_sampling_validate(const pllm_sampling_params *p);
/* Whether sampling with p reads the token history (a repetition, presence or frequency penalty). */
bool pllm_sampling_reads_history(const pllm_sampling_params *p);

/* What the sampler needs to know about the sequence besides its logits. */
typedef struct pllm_sample_ctx {
    const int32_t *prompt;   /* [n_prompt]: for the repetition penalty */
    int32_t n_prompt;
    const int32_t *output;   /* [n_output]: tokens generated so far */
    int32_t n_output;        /* also the RNG step: the draw uses (seed, n_output) */
    const int32_t *banned;   /* [n_banned] ids that must not be sampled this step */
    int32_t n_banned;
    int32_t n_valid; /* ids >= n_valid have no token (a model vocabulary padded past
                        its tokenizer's: Phi-3 32064 for 32011, Qwen2.5 151936 for
                        151665); 0 or >= n_vocab: every id is valid */
} pllm_sample_ctx;

typedef struct pllm_sample_result {
    int32_t token;
    float logprob;           /* log-prob of token under the raw distribution */
    int32_t n_top;           /* = params->logprobs */
    int32_t *top_ids;        /* [n_top], caller-provided (may be NULL when logprobs == 0) */
    float *top_logprobs;     /* [n_top] */
    bool no_logprob;         /* in: the caller reads neither logprob nor top logprobs (the
                                step returns no logprobs): the log-softmax normaliser, an exp
                                per id, is skipped and logprob is NAN; the token is the same */
} pllm_sample_result;

/* Bytes of scratch pllm_sample needs for a vocabulary of n_vocab. */
size_t pllm_sample_scratch_bytes(int32_t n_vocab);
/* Sample from logits [n_vocab] (modified in place). scratch: pllm_sample_scratch_bytes bytes,
 * any alignment, contents need not be initialised; one scratch per concurrent caller. */
void pllm_sample(pllm_sample_result *res, float *logits, int32_t n_vocab, const pllm_sampling_params *p,
                 const pllm_sample_ctx *ctx, void *scratch);

/* Uniform double in [0, 1) from (seed, step): a counter-based generator (stateless). */
double pllm_rng_uniform(uint64_t seed, uint64_t step);

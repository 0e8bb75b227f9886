/*
 * speculate.h: speculative decoding without a draft model: the proposers (prompt lookup and an
 * n-gram table over the batch's outputs) and the adaptive policy that picks how many drafts
 * each sequence gets in a step.
 *
 * How a step speculates (engine.c does the bookkeeping, backend.h carries it):
 *   - a decoding sequence (all of its tokens but the last computed) with drafts d1..dk runs
 *     k + 1 new tokens this step: its last token, then d1..dk (causal, as any prefill chunk);
 *     the drafts count against the token budget.
 *   - the backend samples k + 1 rows of it: row j (0 .. k) sees the history plus d1..dj, and is
 *     drawn exactly as the ordinary sampler would draw the sequence's next token after that
 *     history: same penalties, same banned ids, and the same counter-based random number
 *     (seed, n_output + j) (model/sampling.h).
 *   - acceptance: token t_j of row j is kept when d1..dj were all kept; dj+1 is kept when
 *     t_j == dj+1. So greedy keeps the longest prefix of drafts the model agrees with, and
 *     appends the model's own token where they first differ (or one more after the last).
 *   - sampling: this is the standard speculative rule for a deterministic draft (the proposal q
 *     is a point mass on d): d is accepted with probability P(t_j == d) = p(d) (p: the processed
 *     distribution, after penalties, temperature, top-k/top-p/min-p), and when rejected the
 *     token is t_j conditioned on t_j != d, i.e. drawn from p with d removed and renormalised.
 *     Because each row uses the random number the non-speculative run would use for that token,
 *     the output is not only equal in distribution: with the same seed it is the same output,
 *     token for token (up to floating-point differences between the backend's one-token and
 *     several-token paths, none on the CPU backend).
 *   - a rejected draft's K/V was written to a slot of the sequence's own block table; the
 *     sequence's n_computed covers only the accepted positions, so that block is neither
 *     published to the prefix cache nor read, and the next step writes the same slots again.
 *
 * Proposers (both deterministic, no model):
 *   - prompt lookup: the longest suffix of the sequence (n tokens, n from n_max down to n_min)
 *     that occurs earlier in its prompt or output (most recent occurrence); the drafts are the
 *     tokens that followed it.
 *   - n-gram table: a hash table over every sequence's generated tokens, (last 3 tokens) ->
 *     next token, then (last 2) -> next; used when prompt lookup finds nothing, and chained
 *     token by token.
 *
 * Policy (PLLM_SPEC_AUTO), per step, from what this run measured:
 *   - the backend's step time as a function of its tokens, t = a + c U + b D (U: the tokens
 *     that are not drafts, i.e. the decoding sequences; D: the drafts), fitted by least
 *     squares with exponential forgetting over the steps of at most fit_max_tokens tokens
 *     that sample every token (decode steps and their drafts: b is what a draft costs). A
 *     sequence costs more than a draft: it brings its own context to attend over (at 16
 *     sequences of ~500 tokens on the CPU, c ~ 7 ms and b ~ 2.4 ms), so the one-variable
 *     fit t = a + b T that this replaces charged drafts the sequences' cost and drafted far
 *     too little. c is fitted while the sequence counts vary, else it is part of a (the
 *     prediction at the current batch size is the same); while the recent steps' draft counts
 *     all were the same (nothing to fit, e.g. the policy stopped speculating), a step
 *     explores with at most 8 drafts as if they were nearly free;
 *   - each sequence's per-draft acceptance rate alpha: its recent history (decayed), with the
 *     rate of its proposal's source (prompt lookup by match length, or the n-gram table) over
 *     the whole run as the prior, so its j-th draft is kept with probability about alpha^j.
 *   Drafts are added one at a time, most likely first, while the expected tokens per second of
 *   the step (from t = a + c U before drafts) grows: adding a draft of gain g to a step of G
 *   expected tokens and time t pays
 *   when (G + g) / (t + 1.25 b) > G / t (a 25% margin on the cost). Small, memory-bound batches (b
 * small next to a) speculate deeply; large compute-bound batches (b T >> a) do not speculate at
 * all. PLLM_SPEC_PROMPT_LOOKUP always drafts up to max_draft tokens from prompt lookup.
 *
 * Ownership: pllm_spec owns its table and statistics; everything else is borrowed per call.
 */
#pragma once

#include "model/common.h"

typedef enum pllm_spec_mode {
    PLLM_SPEC_OFF = 0,       /* a zeroed struct: no speculation */
    PLLM_SPEC_AUTO,          /* both proposers, the adaptive policy */
    PLLM_SPEC_PROMPT_LOOKUP, /* prompt lookup, always max_draft drafts when it finds a match */
} pllm_spec_mode;

const char *pllm_spec_mode_str(pllm_spec_mode m); /* "off", "auto", "prompt-lookup" */
/* Parse "off" / "auto" / "prompt-lookup"; PLLM_ERR_INVALID naming the value otherwise. */
pllm_status pllm_spec_mode_parse(const char *s, pllm_spec_mode *out);

#define PLLM_SPEC_MAX_DRAFT 16

typedef struct pllm_spec_params {
    pllm_spec_mode mode;
    int32_t max_draft;      /* drafts per sequence per step, 1 .. PLLM_SPEC_MAX_DRAFT */
    int32_t ngram_min;      /* prompt lookup's shortest suffix, >= 1 */
    int32_t ngram_max;      /* and longest */
    int32_t fit_max_tokens; /* the cost model fits steps of at most this many tokens (the
                               engine: max_seqs * (1 + max_draft)) */
} pllm_spec_params;

/* Prompt lookup: up to k drafts into draft[] from toks[0 .. n) (above). Returns how many;
 * *match (may be NULL) gets the length of the suffix matched. */
int32_t pllm_spec_prompt_lookup(int32_t *draft, int32_t k, const int32_t *toks, int32_t n,
                                int32_t ngram_min, int32_t ngram_max, int32_t *match);

typedef struct pllm_spec pllm_spec;

pllm_status pllm_spec_init(pllm_spec **out, const pllm_spec_params *p);
void pllm_spec_free(pllm_spec *s);

/* The n-gram table: learn the n-grams ending at toks[from .. n) (from >= 0); propose up to k
 * drafts continuing toks[0 .. n). */
void pllm_spec_ngram_add(pllm_spec *s, const int32_t *toks, int32_t from, int32_t n);
int32_t pllm_spec_ngram_propose(const pllm_spec *s, int32_t *draft, int32_t k, const int32_t *toks,
                                int32_t n);

/* Where a proposal came from: prompt lookup with a suffix match of 1, 2, 3, >= 4 tokens, or
 * the n-gram table. Acceptance is tracked per source. */
#define PLLM_SPEC_N_SOURCES 5

/* Both proposers in the mode's order: up to k drafts; *source (may be NULL) gets the source. */
int32_t pllm_spec_propose(const pllm_spec *s, int32_t *draft, int32_t k, const int32_t *toks,
                          int32_t n, int32_t *source);

/* A step's backend time for its n_tokens tokens, n_samples sampled rows and n_drafts drafts
 * (the cost model's data: only steps whose every token is sampled, decode and drafts, are
 * fitted: a draft costs a token and a row of logits and sampling, which prefill tokens do
 * not). */
void pllm_spec_observe_step(pllm_spec *s, int32_t n_tokens, int32_t n_samples, int32_t n_drafts,
                            double seconds);
/* A sequence's outcome in one step: its proposal's source, drafted, accepted. */
void pllm_spec_observe_seq(pllm_spec *s, int32_t source, int32_t n_drafted, int32_t n_accepted);

/* The engine's per-sequence history: trials (drafts tested: the accepted ones and the first
 * rejected one of each step) and accepted, both decayed by 0.8 per drafting step so that a
 * sequence moving from copying to free text (or back) is followed within a few steps. */
void pllm_spec_seq_update(double *trials, double *accepted, int32_t n_drafted, int32_t n_accepted);

/* One speculating candidate: its proposal (length, source) and its sequence's history. */
typedef struct pllm_spec_cand {
    int32_t n_proposed; /* drafts the proposer found, <= max_draft */
    int32_t source;     /* 0 .. PLLM_SPEC_N_SOURCES - 1 */
    double trials, accepted;
    int32_t k;        /* out: drafts to run, 0 .. n_proposed */
    double alpha;     /* out (auto): the per-draft acceptance rate the policy assumed */
    double next_gain; /* scratch */
} pllm_spec_cand;

/* Choose k for every candidate of a step (above). base_tokens: the step's tokens without
 * drafts; n_decode: the sequences sampled in it (each yields one token without drafts);
 * budget: tokens the drafts may take. PLLM_SPEC_PROMPT_LOOKUP: k = n_proposed within budget. */
void pllm_spec_choose(pllm_spec *s, pllm_spec_cand *c, int32_t n, int32_t base_tokens,
                      int32_t n_decode, int32_t budget);

typedef struct pllm_spec_stats {
    int64_t steps_drafting; /* steps with at least one draft */
    int64_t drafted, accepted;
    double cost_a, cost_c, cost_b; /* the fitted t = a + c U + b D (above), seconds */
} pllm_spec_stats;

void pllm_spec_get_stats(const pllm_spec *s, pllm_spec_stats *out);

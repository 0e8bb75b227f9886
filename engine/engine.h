/*
 * engine.h: the engine loop. Requests go in (token ids + parameters); each step the scheduler
 * picks work under a token budget, the KV manager assigns blocks, the backend runs the batch
 * plan, and finished requests come out through a callback, one at a time, as they finish.
 *
 *     pllm_engine_create(&e, model, &backend, tok, &params);
 *     pllm_engine_add(e, ids, n, &rp, user, &id);  ...    (any time, also between steps)
 *     while (pllm_engine_has_work(e)) pllm_engine_step(e, on_done, arg);
 *     pllm_engine_get_stats(e, &st);
 *     pllm_engine_free(e);
 *
 * Ownership: the engine borrows model, backend and tokenizer (they must outlive it); add()
 * copies the prompt and parameters. The completion handed to the callback, and everything it
 * points to, is valid only during the call.
 *
 * Determinism: greedy output does not depend on batch composition, the token budget, prefix
 * caching or thread count; seeded sampling does not either (see sampling.h).
 */
#pragma once

#include "model/backend.h"
#include "engine/block_pool.h"
#include "engine/prefix_store.h"
#include "engine/speculate.h"
#include "model/common.h"
#include "model/model.h"
#include "model/sampling.h"

typedef struct pllm_tokenizer pllm_tokenizer;

/* Overlap of the host's work with the backend's (docs/cuda.md section 3): the engine keeps one
 * step in flight, planning step N + 1 while N runs and finishing N - 1 (stop checks,
 * detokenization, output) meanwhile. Output is identical either way. */
typedef enum pllm_overlap_mode {
    PLLM_OVERLAP_AUTO = 0, /* on for an asynchronous backend (backend.h: async, e.g. cuda) */
    PLLM_OVERLAP_ON,       /* on whenever the backend has submit / wait */
    PLLM_OVERLAP_OFF,      /* every step synchronous */
} pllm_overlap_mode;

const char *pllm_overlap_mode_str(pllm_overlap_mode m); /* "auto", "on", "off" */
pllm_status pllm_overlap_mode_parse(const char *s, pllm_overlap_mode *out);

typedef struct pllm_engine_params {
    int32_t block_size;         /* tokens per KV block; default 16 (0: default) */
    int32_t n_blocks;           /* KV blocks; 0: from kv_bytes */
    size_t kv_bytes;            /* KV budget; 0: min(half the backend's kv_available, 4 GiB,
                                   max_seqs sequences of max_model_len tokens) */
    int32_t max_batched_tokens; /* token budget per step; default 2048 (0: default) */
    int32_t max_seqs;           /* sequences per step; default 64 (0: default) */
    int32_t max_model_len;      /* longest context; 0: the model's n_ctx_train. The context
                                   limit is min(this, KV capacity in tokens). */
    bool no_prefix_cache;       /* disable block-level prefix reuse */
    /* Models with sliding-window layers (Gemma 3): the hybrid KV layout (docs/architecture.md
     * "Hybrid KV") keeps those layers' K/V in a second pool that holds only each sequence's
     * last window. The budget (n_blocks full blocks, kv_bytes, or the default) is split
     * between the two pools by what the workload's sequences need of each (workload_lens
     * below; without it, sequences of max_model_len tokens); n_blocks_sw > 0 sets the sliding
     * pool's size instead (n_blocks then counts global blocks). no_kv_hybrid keeps every layer's
     * K/V for the whole context (one pool). The hybrid layout is also off, with a note in the
     * stats, under a prefix_cache_dir (its blocks hold every layer) and when the window covers
     * max_model_len. */
    bool no_kv_hybrid;
    int32_t n_blocks_sw;
    /* The workload, when the caller knows it before the run (offline batch): the most tokens
     * each sequence can reach, prompt + max_tokens (an n > 1 request gives n entries; any
     * order; each is capped at max_model_len). Only the hybrid split reads it, in create
     * (borrowed for that call). NULL / 0: unknown, every sequence is taken as max_model_len
     * long. Requests that differ from it still run (the split only changes which pool fills
     * first); see docs/architecture.md "Hybrid KV". */
    const int32_t *workload_lens;
    int64_t n_workload;
    uint64_t seed;              /* run seed: requests without a seed derive theirs from it */
    int32_t max_bypass;         /* fairness bound: a waiting request is overtaken (by prefix
                                   grouping or by admission past it) at most this many times
                                   before nothing may pass it; default 1024, which lets
                                   prefix grouping reorder across ~1000 interleaved requests;
                                   0: strict FCFS (see engine/scheduler.h) */
    pllm_evict_policy eviction; /* which cached block a new allocation evicts:
                                   PLLM_EVICT_FUTURE (the default): the one whose next use
                                   by a queued request is farthest away or never (Belady,
                                   from the queued requests' prompts); ties, and blocks no
                                   queued request needs, least recently used first. With
                                   nothing queued it is LRU. Measured to compute up to 5%
                                   fewer prompt tokens and never to lose hit rate (see
                                   bench/engine_bench.c);
                                   PLLM_EVICT_LRU (0, a zeroed struct): least recently used.
                                   Both evict leaves first. See engine/block_pool.h. */
    /* Persistent prefix cache (engine/prefix_tier.h, prefix_store.h): full prompt blocks are
     * saved to this directory and loaded by later runs instead of computed. NULL: none. Needs
     * prefix caching and a backend with kv_read_block / kv_write_block. */
    const char *prefix_cache_dir;
    size_t prefix_cache_max_bytes;         /* the directory's size cap; 0: 4 GiB */
    const char *prefix_cache_tag;          /* the backend's numerics (kernels, weight math): mixed
                                              into the cache's namespace; may be NULL */
    pllm_prefix_warn_fn prefix_cache_warn; /* corrupt entries, failed saves; NULL: stderr */
    void *prefix_cache_warn_arg;
    pllm_spec_mode speculate;  /* speculative decoding without a draft model
                                  (engine/speculate.h); PLLM_SPEC_OFF (0) by default. Output
                                  is the same with any mode. */
    int32_t spec_max_draft;    /* drafts per sequence per step, at most; 0: 16 under
                                  auto, 10 under prompt-lookup */
    pllm_overlap_mode overlap; /* one step in flight (above); PLLM_OVERLAP_AUTO by default */
} pllm_engine_params;

void pllm_engine_params_defaults(pllm_engine_params *p);

#define PLLM_MAX_STOP 16

typedef struct pllm_request_params {
    pllm_sampling_params sampling;
    int32_t max_tokens; /* default 256 */
    int32_t min_tokens; /* EOS/stop ids are banned until this many are generated */
    bool ignore_eos;
    bool has_seed; /* sampling.seed was given by the user */
    int32_t n_stop_ids;
    int32_t stop_ids[PLLM_MAX_STOP]; /* extra stop token ids (besides the model's EOS ids) */
    int32_t n_stop;
    const char *stop[PLLM_MAX_STOP]; /* stop strings; copied by add() */
    int32_t n;                       /* completions for this prompt; default 1 */
} pllm_request_params;

void pllm_request_params_defaults(pllm_request_params *p);
/* Validate; the message names the field. */
pllm_status pllm_request_params_validate(const pllm_request_params *p);

typedef enum pllm_finish_reason {
    PLLM_FINISH_STOP = 0, /* EOS, a stop id or a stop string */
    PLLM_FINISH_LENGTH,   /* max_tokens or the context limit */
    PLLM_FINISH_ERROR,    /* the request failed: see error */
} pllm_finish_reason;

const char *pllm_finish_reason_str(pllm_finish_reason r); /* "stop", "length", "error" */

typedef struct pllm_completion {
    uint64_t req_id;
    int32_t index; /* 0 .. n-1 for n > 1 */
    void *user;
    pllm_finish_reason finish;
    const char *error; /* message when finish == ERROR */
    const char *text;  /* generated text, stop string excluded */
    size_t text_len;
    const int32_t *token_ids; /* generated ids */
    int32_t n_tokens;
    const float *logprobs; /* [n_tokens] when requested, else NULL */
    int32_t top_n;
    const int32_t *top_ids;    /* [n_tokens][top_n] */
    const float *top_logprobs; /* [n_tokens][top_n] */
    int32_t prompt_tokens;
    int32_t cached_tokens; /* prompt tokens served from the prefix cache at admission
                              (for completions 1..n-1: the full prompt blocks they share
                              with completion 0, with or without the prefix cache) */
    double t_arrival, t_first_token, t_finish; /* pllm_now() seconds */
    const double *token_times; /* [n_tokens] when each generated token was sampled (pllm_now()
                                  seconds; the tokens of one engine step share the time the
                                  step's backend call returned; token_times[0] ==
                                  t_first_token); NULL when n_tokens == 0 */
} pllm_completion;

typedef void (*pllm_engine_emit_fn)(const pllm_completion *c, void *arg);

typedef struct pllm_engine_stats {
    int64_t steps;
    int64_t preemptions;
    int64_t prompt_tokens;          /* over finished requests */
    int64_t prompt_tokens_computed; /* prompt tokens run through the model */
    int64_t prompt_tokens_cached;   /* prompt tokens served from cache */
    int64_t output_tokens;
    int64_t requests_finished;
    int64_t requests_failed;
    int32_t peak_blocks_used;
    int32_t blocks_used; /* KV blocks held by requests now (pllm_engine_get_stats) */
    int32_t n_blocks;
    int32_t block_size;
    /* the hybrid KV layout (n_blocks_sw > 0; else 0): the sliding pool (its layers, window,
     * blocks, peak and current use); n_blocks above counts the global pool then. kv_bytes: the
     * cache's bytes, both pools. kv_hybrid_off: why a model with sliding layers runs without
     * it (NULL: it does not, or has no sliding layers) */
    int32_t n_blocks_sw, n_layer_sw, kv_window, peak_blocks_used_sw, blocks_used_sw;
    size_t kv_bytes;
    const char *kv_hybrid_off;
    /* the hybrid split's basis: the workload's sequences it was sized for (0: none given, sized
     * for max_model_len sequences) and their mean length in tokens (capped at max_model_len) */
    int64_t kv_split_seqs;
    double kv_split_mean_len;
    /* speculation (zero when off) */
    int64_t spec_steps;     /* steps that ran drafts */
    int64_t spec_drafted;   /* draft tokens run */
    int64_t spec_accepted;  /* of them, accepted */
    int64_t decode_samples; /* sequence-steps that sampled (rows of one sequence count once) */
    int64_t decode_tokens;  /* tokens those appended: decode_tokens / decode_samples is the
                               tokens per sequence per step (1 without speculation) */
    double spec_cost_a, spec_cost_c, spec_cost_b; /* the policy's fitted step time (auto), seconds:
                                                      a + c per sequence + b per draft */
    /* overlap (pllm_overlap_mode) */
    bool overlap;                    /* the engine overlaps steps */
    int64_t steps_overlapped;        /* steps queued while the previous one was still running */
    int64_t steps_sync;              /* steps queued with nothing in flight (the first, and ...) */
    int64_t sync_penalties;          /* ... those that waited because a sample's penalties read the
                                        token in flight, on a backend that cannot resolve it */
    int64_t sync_speculation;        /* ... speculative decoding steps (always synchronous) */
    int64_t wasted_slots;            /* sequences computed in a step after they had finished */
    int64_t pending_penalty_samples; /* samples whose penalties read the token in flight, resolved
                                        by the backend (backend.h PLLM_TOKEN_PENDING) */
    double device_seconds;           /* the backend's device time of the steps (CUDA events); < 0:
                                        not measured (a host backend) */
    double step_wall_seconds;        /* from the first submit to the last wait */
} pllm_engine_stats;

/*
 * Prefix plan statistics (pllm_engine_get_plan_stats; engine/prefix_plan.h), for a report
 * before and after a run.
 *
 * best_cached_tokens, the best achievable prefix-cache hit for the input: over the prompts
 * added so far (a request with n completions counts n times), with block_size = bs and B the
 * distinct full blocks of those prompts (a block = its tokens in the context of every token
 * before it),
 *     best = bs * sum over b in B of (|H(b)| - [C(b) == H(b)])
 * where C(b) is the set of prompts holding b and H(b) those that can reuse it from the cache:
 * b is among their first (n_prompt - 1) / bs blocks (the last prompt token is always
 * recomputed). That is: each distinct full block is computed once, by a prompt that cannot
 * reuse it if there is one, and served from the cache to every other prompt that can reuse it.
 * Without prefix caching only completions 1..n-1 reuse completion 0's prompt blocks:
 *     best = bs * sum over completions k >= 1 of (n_prompt - 1) / bs.
 * The KV size does not lower it (so no cap applies): add() refuses a prompt the cache cannot
 * hold alone, and with prefix caching, running the requests one at a time in sorted token
 * order (the trie depth first, a prompt before its extensions) keeps every block each needs
 * cached: a request shares the most with the one just before it, whose blocks it takes from
 * the cache before allocating anything. So it is achievable with any cache that admits the
 * requests; with many sequences running at once it is reached only when the cache also holds
 * the running groups' prefixes (engine_bench measures how close the scheduler gets). Tokens
 * of generated text are not in it (a prompt that repeats another request's output can hit
 * beyond it).
 *
 * hit_rate, the achieved rate: prompt_tokens_cached / prompt_tokens over finished requests
 * (cached at first admission, as pllm_completion.cached_tokens). After a run in which every
 * added request finished, hit_rate <= best_hit_rate.
 *
 * blocks_computed counts the full prompt blocks the model computed (a block counts when its
 * last token is computed; recomputes after preemption count again), blocks_recomputed those
 * of them whose identical block (same tokens, same context) was computed before in this run:
 * with a cache large enough and no preemption it is 0, i.e. every shared prefix block was
 * computed exactly once.
 *
 * Memory: 8 bytes per distinct prompt block (about 0.5 byte per prompt token at bs 16), up to
 * 2^23 distinct blocks; past that, exact is false and the figures are lower bounds.
 */
typedef struct pllm_engine_plan_stats {
    int64_t requests;           /* completions added */
    int64_t prompt_tokens;      /* their prompt tokens */
    int64_t best_cached_tokens; /* the best achievable (above) */
    double best_hit_rate;       /* best_cached_tokens / prompt_tokens (0 when no prompt) */
    int64_t distinct_blocks;    /* distinct full prompt blocks */
    int64_t shared_blocks;      /* of them, in more than one prompt */
    int64_t finished_requests;
    int64_t finished_prompt_tokens;
    int64_t finished_cached_tokens;
    double hit_rate; /* finished_cached_tokens / finished_prompt_tokens */
    int64_t blocks_computed;
    int64_t blocks_recomputed;
    int64_t grouped; /* requests queued behind their prefix group, not at the tail */
    bool exact;
} pllm_engine_plan_stats;

typedef struct pllm_engine pllm_engine;

pllm_status pllm_engine_create(pllm_engine **out, const pllm_model *model, pllm_backend *backend,
                               const pllm_tokenizer *tok, const pllm_engine_params *params);
void pllm_engine_free(pllm_engine *e);

/* For a KV layout with sliding-window layers (L->n_layer_sw > 0, L->window > 0): why the engine
 * runs it in one pool, or NULL where the hybrid layout applies (engine.c choose_pools; callers that
 * prepare a workload for the split ask the same). max_model_len: the resolved context limit. */
const char *pllm_engine_kv_hybrid_off(const pllm_engine_params *p, const pllm_kv_layout *L,
                                      int32_t max_model_len);

/* Queue a request. Invalid parameters or a prompt that cannot fit: returns an error (the
 * message names the field or the limit) and queues nothing. */
pllm_status pllm_engine_add(pllm_engine *e, const int32_t *prompt, int32_t n_prompt,
                            const pllm_request_params *p, void *user, uint64_t *req_id);
bool pllm_engine_has_work(const pllm_engine *e);
/* One scheduling step; emit is called for every request that finishes in it. */
pllm_status pllm_engine_step(pllm_engine *e, pllm_engine_emit_fn emit, void *arg);
void pllm_engine_get_stats(const pllm_engine *e, pllm_engine_stats *out);
/* The persistent prefix cache's counters; false (out zeroed) when the engine has none. */
bool pllm_engine_get_prefix_store_stats(const pllm_engine *e, pllm_prefix_store_stats *out);
/* The prefix plan statistics (above); any time, e.g. after adding the input and before the
 * first step, and after the last. */
void pllm_engine_get_plan_stats(const pllm_engine *e, pllm_engine_plan_stats *out);
/* "lru" / "future" <-> the policy (for option parsing and reports); parse returns
 * PLLM_ERR_INVALID naming the value. */
const char *pllm_evict_policy_str(pllm_evict_policy p);
pllm_status pllm_evict_policy_parse(const char *s, pllm_evict_policy *out);

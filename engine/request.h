/*
 * request.h: the engine's per-completion state (one pllm_req per completion: a request with
 * n > 1 becomes n of them sharing a pllm_req_group), and the pure helpers the engine loop
 * uses on it (stop-string search, banned ids).
 *
 * Token accounting (the one rule the scheduler follows): tokens holds prompt ++ output;
 * n_computed of them have K/V in the cache. Each step a request computes some of the rest;
 * when n_computed reaches tokens.n the step samples one more token. Prefill, chunked prefill,
 * prefix hits, decode and recompute after preemption are all this rule.
 *
 * Ownership: the engine creates and frees requests; the scheduler only links them into its
 * queues. Everything a request points to is owned by it, except the group (shared by the
 * completions of one request; freed by the last one) and tok.
 */
#pragma once

#include "model/common.h"
#include "engine/engine.h"
#include "engine/kv_manager.h"
#include "tokenizer/tokenizer.h"

typedef enum pllm_req_state {
    PLLM_REQ_WAITING = 0,
    PLLM_REQ_RUNNING,
    PLLM_REQ_FINISHED,
} pllm_req_state;

typedef struct pllm_req pllm_req;

/* Queue order: a 128-bit label (block_pool.h), increasing along the waiting queue. The
 * scheduler gives a new request a label after every other one (the tail) or, when it joins its
 * prefix group, one between the group's last waiting request and its successor; labels are
 * respaced (order kept) when a gap runs out. A request keeps its label while it runs, so a
 * preempted request returns to its old place. */
typedef pllm_label pllm_order;

static inline bool pllm_order_lt(pllm_order a, pllm_order b)
{
    return pllm_label_lt(a, b);
}

/* One block of a request's path in the prefix planner's trie (engine/prefix_plan.h). */
typedef struct pllm_plan_use {
    pllm_label order; /* the request's order while it waits (heap key, kept local) */
    pllm_req *req;
    int32_t node;             /* trie node */
    int32_t min_pos, max_pos; /* positions in the node's waiting heaps; -1 when not waiting */
} pllm_plan_use;

/* The n completions of one request. */
typedef struct pllm_req_group {
    pllm_req *leader; /* index 0 while it is alive, else NULL */
    int32_t n_alive;  /* completions not yet freed */
} pllm_req_group;

struct pllm_req {
    uint64_t id;
    int32_t index; /* 0 .. n-1 */
    void *user;
    uint64_t arrival; /* add order (completions of a request in index order) */
    pllm_req_group *group;

    pllm_tokens tokens; /* prompt ++ output */
    int32_t n_prompt;
    int32_t n_computed; /* tokens whose K/V are in the cache */
    pllm_kv_table table;
    pllm_key_chain keys; /* block keys of tokens (prefix cache) */

    /* scheduler */
    pllm_req_state state;
    pllm_order order;          /* queue position (scheduler-owned): the waiting queue and the
                                  running list are sorted by it */
    pllm_req *w_prev, *w_next; /* waiting queue links */
    int32_t n_bypassed;        /* requests queued behind this one admitted before it, in the
                                  current wait (reset on admission) */
    int32_t n_preempted;
    bool admitted_once;
    int32_t cached_tokens; /* prompt tokens found in the cache at first admission */

    /* speculation (engine/speculate.h) */
    int32_t n_draft;    /* drafts proposed for the next step: tokens.ids[tokens.n ..
                           tokens.n + n_draft) (past the end of the known tokens); the
                           scheduler may run fewer (pllm_sched_entry.n_draft) */
    double spec_trials; /* drafts tested (accepted + first rejected per step), decayed
                           (pllm_spec_seq_update) */
    double spec_accepted;
    int32_t spec_source; /* the source of the drafts proposed for this step */

    /* prefix planner (owned by engine/prefix_plan.c) */
    uint64_t *plan_keys; /* [n_plan_keys] planner keys of the full blocks of tokens */
    int32_t n_plan_keys, plan_keys_cap;
    pllm_plan_use *plan_path; /* [n_plan_path]: trie nodes of the reusable blocks */
    int32_t n_plan_path, plan_path_cap;
    bool plan_waiting;   /* the path is in the nodes' waiting heaps */
    bool plan_accounted; /* the prompt is counted in the plan statistics */

    /* parameters */
    pllm_request_params params; /* stop[] point into stop_store */
    char *stop_store[PLLM_MAX_STOP];
    size_t max_stop_len;
    pllm_sampling_params sampling; /* with this completion's seed */
    int32_t *stop_ids;             /* ids that end generation (EOS unless ignore_eos, request
                                      ids); also the ids banned while output < min_tokens */
    int32_t n_stop_ids;

    /* overlap (engine.c): tokens.ids[tokens.n - 1] is a placeholder for the token that the step
     * in flight samples for its row pending_row */
    bool pending;
    int32_t pending_row;

    /* output */
    const pllm_tokenizer *tok; /* NULL: no text, no stop strings */
    pllm_detok detok;
    pllm_buf text;
    float *logprobs;     /* [n_output] when sampling.logprobs > 0 */
    int32_t *top_ids;    /* [n_output][sampling.logprobs] */
    float *top_logprobs; /* [n_output][sampling.logprobs] */
    int32_t out_cap;
    double *token_times; /* [n_output] pllm_now() when each output token was sampled */
    int32_t times_cap;
    pllm_finish_reason finish;
    double t_arrival, t_first_token, t_finish;
};

static inline int32_t pllm_req_n_output(const pllm_req *r)
{
    return (int32_t)r->tokens.n - r->n_prompt;
}

typedef struct pllm_req_init {
    uint64_t id;
    int32_t index;
    void *user;
    uint64_t arrival;
    pllm_req_group *group;
    const int32_t *prompt;
    int32_t n_prompt;
    const pllm_request_params *params; /* validated */
    uint64_t seed;                     /* this completion's seed */
    const pllm_tokenizer *tok;         /* may be NULL */
    const int32_t *eos_ids;            /* the tokenizer's stop ids (EOS, end of turn) */
    int32_t n_eos_ids;
} pllm_req_init;

pllm_status pllm_req_create(pllm_req **out, const pllm_req_init *ini);
/* Frees the request's arrays (its blocks must already be released) and drops its group
 * reference. Accepts NULL. */
void pllm_req_free(pllm_req *r);

/* Record one sampled token with its logprobs (top: [sampling.logprobs] or NULL) and the time
 * it was sampled (pllm_now() seconds). */
pllm_status pllm_req_append(pllm_req *r, int32_t token, float logprob, const int32_t *top_ids,
                            const float *top_logprobs, double t);

bool pllm_req_is_stop_id(const pllm_req *r, int32_t token);

/* Start of the earliest occurrence of any of the stop strings in text[0 .. len) that ends at
 * or after offset `from` (the start of newly appended text), or -1. */
int64_t pllm_stop_find(const char *text, size_t len, size_t from, const char *const *stops,
                       int32_t n_stops);

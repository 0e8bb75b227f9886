/*
 * scheduler.h: continuous batching under a token budget and a sequence cap (vLLM v1 style).
 *
 * One rule, no phases: every request has n_computed catching up to its token count
 * (prompt + output). A step gives each scheduled request n_new tokens to compute; a request
 * whose computation reaches its last known token is sampled. Chunked prefill, prefix hits,
 * decode and recompute after preemption all follow from that rule.
 *
 * A step (pllm_sched_schedule), given budget = max_batched_tokens:
 *   1. Running requests, in queue order: n_new = min(remaining, budget). A request whose
 *      remaining tokens fit also runs up to r->n_draft speculative drafts (speculate.h) within
 *      the budget, only if the pool holds them without preempting anyone. If the KV pool
 *      cannot hold n_computed + n_new tokens, preempt by recompute until it can. Victim: among
 *      the running requests not yet scheduled in this step (the current one and every one that
 *      arrived after it), the one cheapest to rebuild: the fewest computed tokens not covered
 *      by leading blocks that another request also holds (those stay resident and cached; its
 *      private blocks, even indexed ones, are counted as lost since they are the next to be
 *      evicted under this pressure; with a sliding pool a shared prefix counts only as far
 *      as its window's sliding blocks are shared too); ties go to the latest in queue order.
 *      When only the sliding pool is short, requests that would free no sliding block (all
 *      theirs are shared) are passed over unless no other is left. The
 *      victim's blocks are released (indexed ones stay cached), it goes back to the waiting
 *      queue at its old position with n_computed = 0, and it is counted. If the victim is
 *      the current request, it is simply not scheduled.
 *   2. If nothing was preempted: admission. The waiting queue (in queue order: add order,
 *      except for prefix grouping below; a preempted request returns to its old place) is
 *      scanned while
 *      budget and sequence slots remain. A request's cached prefix costs neither blocks nor
 *      budget; it is admitted when blocks for the rest of its first chunk are free. It is
 *      deferred instead (skipped this step) when
 *        - it is a completion i > 0 of an n > 1 request whose completion 0 is still running
 *          its prompt (of at least one full block): once that prefill is done it takes
 *          completion 0's full prompt blocks (shared by reference count, with or without
 *          prefix caching) and computes only the rest;
 *        - prefix caching is on and a running request is computing the next block of its
 *          prompt right now (it waits for the block instead of computing it again);
 *        - its blocks do not fit.
 *
 * Prefix grouping (prefix caching on; engine/prefix_plan.h): the planner keeps a trie of the
 * queued prompts' blocks. A new request finds the deepest trie node it shares with a waiting
 * request and queues right behind the last waiting request holding that node, instead of at
 * the tail, so that the waiting queue follows the trie depth first: a shared prefix is
 * computed once and its group (and each nested subgroup) runs while it is hot. It does so only
 * when it pays: when the work queued behind the group (prompt + max_tokens of each request)
 * exceeds half the KV cache, i.e. when the shared prefix would likely be evicted before the
 * new request ran at the tail; and only over at most 2048 requests, none of which has already
 * been overtaken max_bypass times. Queue positions are 128-bit labels (request.h).
 *
 * Fairness bound: a waiting request is overtaken at most max_bypass times per wait (from
 * entering the queue to admission), where overtaken means a request queued behind it is
 * admitted while it waits, or a later request is queued ahead of it by grouping. A request
 * overtaken max_bypass times is never jumped by grouping again, and when admission skips it
 * (for any of the reasons above) the scan stops there: nothing behind it is admitted until it
 * is. (Its deferrals end by themselves: the requests it waits for are running.) So every request is
 * admitted after at most max_bypass requests that arrived after it. max_bypass = 0 is strict FCFS
 * (no grouping, no skipping). (Running requests are never skipped in favour of waiting ones; every
 * running request gets tokens when the budget reaches it.)
 *
 * Requests that can never run (prompt + 1 > KV capacity or max_model_len) are refused by the
 * engine before they reach the scheduler, so with nothing running the queue's head always
 * fits: every step makes progress.
 *
 * Ownership: the scheduler borrows the KV manager, the planner and the requests (linked into
 * its queues);
 * the engine creates and frees them. The plan in pllm_sched_out is plain data valid until
 * the next schedule call (its req pointers until the request is freed).
 */
#pragma once

#include "model/common.h"
#include "engine/kv_manager.h"
#include "engine/prefix_plan.h"
#include "engine/request.h"

typedef struct pllm_sched_params {
    int32_t max_batched_tokens; /* token budget per step, >= 1 */
    int32_t max_seqs;           /* running requests at most, >= 1 */
    int32_t max_bypass;         /* fairness bound (see above), >= 0 */
    int32_t scan_limit;         /* admission gives up after skipping this many in one step */
    bool no_grouping;           /* queue new requests at the tail (FCFS order; benchmarks) */
    int32_t label_bits;         /* label spacing 2^label_bits (0: 64); tests use small values
                                   to force respacing */
} pllm_sched_params;

typedef struct pllm_sched_entry {
    pllm_req *req;
    uint64_t req_id;
    int32_t index;
    int32_t n_computed; /* before this step */
    int32_t n_new;      /* tokens to compute: positions n_computed .. n_computed + n_new - 1,
                           n_draft of them drafts past the request's known tokens */
    int32_t n_draft;    /* drafts run (speculate.h): the request's last n_draft new tokens */
    bool sample;        /* n_computed + n_new - n_draft reaches the request's token count */
    bool admitted;      /* admitted from the waiting queue in this step */
    int32_t n_hit;      /* admitted: tokens taken from the cache (or shared with completion 0) */
} pllm_sched_entry;

typedef struct pllm_sched_victim {
    uint64_t req_id;
    int32_t index;
} pllm_sched_victim;

typedef struct pllm_sched_out {
    pllm_sched_entry *entries; /* running first (queue order), then admitted */
    int32_t n_entries;
    int32_t n_tokens; /* sum of n_new */
    pllm_sched_victim *preempted;
    int32_t n_preempted;
    int32_t cap_entries, cap_preempted;
} pllm_sched_out;

void pllm_sched_out_free(pllm_sched_out *o);

typedef struct pllm_sched pllm_sched;

/* kv and plan are borrowed (the planner must have been made for the same KV manager). */
pllm_status pllm_sched_init(pllm_sched **out, const pllm_sched_params *p, pllm_kv_manager *kv,
                            pllm_plan *plan);
/* Frees the scheduler only (not the requests it links). */
void pllm_sched_free(pllm_sched *s);

/* Queue a new request (state WAITING): at the tail, or behind its prefix group. On error r is
 * not queued. */
pllm_status pllm_sched_add(pllm_sched *s, pllm_req *r);
/* Plan one step: allocates blocks, may preempt, admits. */
pllm_status pllm_sched_schedule(pllm_sched *s, pllm_sched_out *out);
/* After the backend ran the plan: n_computed += n_new (the engine first lowers an entry's
 * n_new by its rejected drafts), and full computed blocks are indexed. Entries whose req is NULL
 * (finished and freed meanwhile) are skipped. With the engine's overlap the update comes right
 * after the step is queued: a sampled request then carries a placeholder for the token being
 * sampled (tokens.n counts it; it is past n_computed, so no indexed block holds it). */
pllm_status pllm_sched_update(pllm_sched *s, const pllm_sched_out *out);
/* Remove a request (finished or failed) from the scheduler and release its blocks. */
void pllm_sched_remove(pllm_sched *s, pllm_req *r);

int32_t pllm_sched_n_waiting(const pllm_sched *s);
int32_t pllm_sched_n_running(const pllm_sched *s);
int64_t pllm_sched_n_preemptions(const pllm_sched *s);
int64_t pllm_sched_n_grouped(const pllm_sched *s);  /* requests queued next to their group */
int64_t pllm_sched_n_relabels(const pllm_sched *s); /* label respacings */
/* The waiting queue's head (NULL when empty) and the running requests (queue order); for
 * iteration when the engine frees everything. */
pllm_req *pllm_sched_waiting_head(const pllm_sched *s);
pllm_req *const *pllm_sched_running(const pllm_sched *s, int32_t *n);

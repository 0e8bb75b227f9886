/*
 * engine.c: the engine loop: schedule -> batch plan (flat arrays, backend.h) -> backend step
 * -> append tokens, stop checks, detokenize -> emit finished completions -> free their blocks.
 *
 * KV budget (pllm_engine_params): n_blocks when > 0; else kv_bytes / block bytes when
 * kv_bytes > 0; else the smallest of half the backend's kv_available less its step workspace
 * (backend.h workspace_bytes: activations, a MoE model's expert scratch), PLLM_KV_DEFAULT_CAP
 * bytes (4 GiB: a tiny model must not take all the memory) and max_seqs full-length
 * (max_model_len) sequences' worth. The longest context is min(max_model_len, n_blocks *
 * block_size): a request reaching it finishes with "length"; a prompt that cannot leave room
 * for one generated token is refused by add().
 *
 * Stop rules, checked after each sampled token, in this order: a stop id (the tokenizer's EOS
 * and end-of-turn ids and the model's generation-config EOS ids, unless ignore_eos, and the
 * request's stop_ids; their text is not output), a stop string (matched on the detokenized text
 * across token boundaries; the text is cut where the match starts), max_tokens, the context limit.
 * Stop ids and stop strings only count once min_tokens tokens were generated (and stop ids are
 * banned from sampling until then).
 *
 * Speculation (engine/speculate.h): before scheduling, every decoding request may get drafts
 * (tokens.ids past tokens.n); the scheduler runs them within the budget; each sampled entry
 * with k drafts has k + 1 samples, consecutive, back = k .. 0; after the step the accepted
 * tokens go through the stop rules above one at a time, exactly as k + 1 ordinary steps would
 * (a stop, max_tokens or the context limit ends the request at that token and the rest is
 * dropped), and the entry's n_new is lowered by its rejected drafts before pllm_sched_update,
 * so n_computed and the prefix cache only ever cover accepted tokens.
 */
#include "engine/engine.h"

#include "engine/engine_internal.h"
#include "engine/kv_size.h"
#include "engine/prefix_tier.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/speculate.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLLM_KV_DEFAULT_CAP ((size_t)4 << 30)
#define PLLM_MAX_N          1024
#define PLLM_MAX_LOGPROBS   20

/* One step from scheduling to completion: the plan's entries and the backend's results. */
typedef struct eng_step {
    pllm_sched_out o;
    int32_t *entry_sample;   /* [max_seqs]: first sample of each sampled plan entry */
    int32_t *out_tokens;     /* [cap_samples] */
    float *out_logprobs;     /* [cap_samples] */
    int32_t *out_top_ids;    /* [cap_samples][PLLM_MAX_LOGPROBS] */
    float *out_top_logprobs; /* [cap_samples][PLLM_MAX_LOGPROBS] */
    pllm_step_out so;
    int32_t n_tokens, n_samples, n_drafts;
    double t0; /* submitted */
} eng_step;

struct pllm_engine {
    pllm_engine_params p;
    const pllm_model *model;
    pllm_backend *backend;
    const pllm_tokenizer *tok;
    pllm_kv_layout layout;
    int32_t n_vocab;
    int32_t n_valid;   /* ids below it have a token; the samplers never draw the rest (0: all) */
    int32_t ctx_limit; /* min(max_model_len, KV capacity) */
    int32_t *eos_ids;  /* [n_eos_ids] owned: the tokenizer's stop ids, then the model's EOS ids
                          (generation_config.json eos_token_id) not among them */
    int32_t n_eos_ids;
    pllm_kv_manager *kv;
    pllm_prefix_tier *tier; /* the persistent prefix cache; NULL: none */
    pllm_plan *plan;
    pllm_sched *sched;
    uint64_t next_id, next_arrival;
    pllm_status broken; /* a failed backend step leaves the engine unusable */

    /* batch plan buffers */
    int32_t *tokens;     /* [max_batched_tokens] */
    int32_t *positions;  /* [max_batched_tokens] */
    int32_t *slots;      /* [max_batched_tokens] */
    int32_t *sw_slots;   /* [max_batched_tokens] the hybrid KV layout's; else NULL */
    pllm_seq_plan *seqs; /* [max_seqs] */
    int32_t *tables;     /* [tables_cap] */
    int32_t *sw_tables;  /* [tables_cap] the hybrid KV layout's; else NULL */
    int32_t tables_cap;
    int32_t cap_samples;      /* max_seqs + (speculating ? max_batched_tokens : 0) */
    pllm_sample_req *samples; /* [cap_samples] */
    int32_t *sample_entry;    /* [cap_samples]: plan entry of each sample */
    int32_t *token_src;       /* [max_batched_tokens]: backend.h's token_src of the plan */
    eng_step st[2];           /* a step being built and the one in flight (overlap) */
    int32_t cur;              /* st[cur]: the step scheduled last (pllm_engine_last_plan) */
    int32_t fly;              /* st[fly] is in flight (submitted, not yet waited); -1: none */
    bool overlap;             /* params.overlap resolved against the backend */
    double t_first_submit, t_last_wait;
    pllm_req **done; /* [max_seqs]: requests finished in this step, in sample order */
    char **done_why; /* [max_seqs]: done[i]'s own failure (NULL: it finished well) */
    int32_t n_done_why;

    /* speculation (NULL when off) */
    pllm_spec *spec;
    pllm_spec_cand *cands; /* [max_seqs] */
    pllm_req **cand_req;   /* [max_seqs] */
    int32_t (*propose_hook)(void *, uint64_t, int32_t, const int32_t *, int32_t, int32_t *,
                            int32_t);
    void *propose_arg;

    pllm_engine_stats stats;
};

/* ---- parameters ---- */

void pllm_engine_params_defaults(pllm_engine_params *p)
{
    *p = (pllm_engine_params){
        .block_size = 16,
        .max_batched_tokens = 2048,
        .max_seqs = 64,
        .max_bypass = 1024,
        .eviction = PLLM_EVICT_FUTURE,
    };
}

void pllm_request_params_defaults(pllm_request_params *p)
{
    memset(p, 0, sizeof *p);
    pllm_sampling_defaults(&p->sampling);
    p->max_tokens = 256;
    p->n = 1;
}

pllm_status pllm_request_params_validate(const pllm_request_params *p)
{
    PLLM_TRY(pllm_sampling_validate(&p->sampling));
    if (p->sampling.logprobs > PLLM_MAX_LOGPROBS)
        return pllm_errorf(PLLM_ERR_INVALID, "logprobs must be <= %d, got %d", PLLM_MAX_LOGPROBS,
                           p->sampling.logprobs);
    if (p->max_tokens < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "max_tokens must be >= 1, got %d", p->max_tokens);
    if (p->min_tokens < 0)
        return pllm_errorf(PLLM_ERR_INVALID, "min_tokens must be >= 0, got %d", p->min_tokens);
    if (p->min_tokens > p->max_tokens)
        return pllm_errorf(PLLM_ERR_INVALID, "min_tokens (%d) must be <= max_tokens (%d)",
                           p->min_tokens, p->max_tokens);
    if (p->n < 1 || p->n > PLLM_MAX_N)
        return pllm_errorf(PLLM_ERR_INVALID, "n must be in [1, %d], got %d", PLLM_MAX_N, p->n);
    if (p->n_stop_ids < 0 || p->n_stop_ids > PLLM_MAX_STOP)
        return pllm_errorf(PLLM_ERR_INVALID, "stop_token_ids: at most %d allowed, got %d",
                           PLLM_MAX_STOP, p->n_stop_ids);
    for (int32_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] < 0)
            return pllm_errorf(PLLM_ERR_INVALID, "stop_token_ids[%d] must be >= 0, got %d", i,
                               p->stop_ids[i]);
    if (p->n_stop < 0 || p->n_stop > PLLM_MAX_STOP)
        return pllm_errorf(PLLM_ERR_INVALID, "stop: at most %d strings allowed, got %d",
                           PLLM_MAX_STOP, p->n_stop);
    for (int32_t i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return pllm_errorf(PLLM_ERR_INVALID, "stop[%d] must be a non-empty string", i);
    return PLLM_OK;
}

const char *pllm_overlap_mode_str(pllm_overlap_mode m)
{
    switch (m) {
    case PLLM_OVERLAP_AUTO:
        return "auto";
    case PLLM_OVERLAP_ON:
        return "on";
    case PLLM_OVERLAP_OFF:
        return "off";
    }
    return "unknown";
}

pllm_status pllm_overlap_mode_parse(const char *s, pllm_overlap_mode *out)
{
    static const pllm_overlap_mode modes[] = {PLLM_OVERLAP_AUTO, PLLM_OVERLAP_ON, PLLM_OVERLAP_OFF};
    for (size_t i = 0; s && i < PLLM_ARRAY_LEN(modes); i++)
        if (!strcmp(s, pllm_overlap_mode_str(modes[i]))) {
            *out = modes[i];
            return PLLM_OK;
        }
    return pllm_errorf(PLLM_ERR_INVALID, "overlap must be auto, on or off, got '%s'",
                       s ? s : "(null)");
}

const char *pllm_evict_policy_str(pllm_evict_policy p)
{
    switch (p) {
    case PLLM_EVICT_LRU:
        return "lru";
    case PLLM_EVICT_FUTURE:
        return "future";
    }
    return "unknown";
}

pllm_status pllm_evict_policy_parse(const char *s, pllm_evict_policy *out)
{
    if (s && !strcmp(s, "lru")) {
        *out = PLLM_EVICT_LRU;
        return PLLM_OK;
    }
    if (s && !strcmp(s, "future")) {
        *out = PLLM_EVICT_FUTURE;
        return PLLM_OK;
    }
    return pllm_errorf(PLLM_ERR_INVALID, "eviction policy must be lru or future, got '%s'",
                       s ? s : "(null)");
}

const char *pllm_finish_reason_str(pllm_finish_reason r)
{
    switch (r) {
    case PLLM_FINISH_STOP:
        return "stop";
    case PLLM_FINISH_LENGTH:
        return "length";
    case PLLM_FINISH_ERROR:
        return "error";
    }
    return "unknown";
}

/* ---- create / free ---- */

static pllm_status choose_n_blocks(pllm_engine *e, int32_t *n_blocks)
{
    const pllm_engine_params *p = &e->p;
    size_t block_bytes = pllm_kv_block_bytes(&e->layout);
    if (block_bytes == 0)
        return pllm_errorf(PLLM_ERR_INTERNAL, "backend %s: KV block of 0 bytes",
                           e->backend->iface->name);
    size_t n;
    if (p->n_blocks > 0) {
        n = (size_t)p->n_blocks;
    } else if (p->kv_bytes > 0) {
        n = p->kv_bytes / block_bytes;
        if (n == 0)
            return pllm_errorf(PLLM_ERR_NOMEM,
                               "kv_bytes %zu holds no %d-token KV block (%zu bytes)", p->kv_bytes,
                               p->block_size, block_bytes);
    } else {
        size_t avail = 0, ws = 0;
        PLLM_TRY(e->backend->iface->kv_available(e->backend->ctx, &avail));
        /* the step workspace (a MoE model's expert scratch) is allocated at the first step,
         * after this: leave it out */
        if (e->backend->iface->workspace_bytes)
            PLLM_TRY(e->backend->iface->workspace_bytes(
                e->backend->ctx, p->max_batched_tokens,
                p->max_seqs + (p->speculate != PLLM_SPEC_OFF ? p->max_batched_tokens : 0), &ws));
        avail = avail > ws ? avail - ws : 0;
        size_t budget = PLLM_MIN(avail / 2, PLLM_KV_DEFAULT_CAP);
        n = pllm_kv_blocks_for_budget(budget, block_bytes, p->block_size, p->max_seqs,
                                      p->max_model_len);
        if (n == 0)
            return pllm_errorf(
                PLLM_ERR_NOMEM,
                "backend %s: %zu bytes available for the KV cache, a %d-token block needs %zu",
                e->backend->iface->name, avail, p->block_size, block_bytes);
    }
    size_t max_blocks = (size_t)INT32_MAX / (size_t)p->block_size;
    *n_blocks = (int32_t)PLLM_MIN(n, max_blocks);
    return PLLM_OK;
}

/* The hybrid KV layout (engine.h no_kv_hybrid; docs/architecture.md "Hybrid KV"): whether it
 * applies, and the two pools' sizes. The budget B (bytes) is what the one-pool layout would get:
 * n_blocks full blocks, kv_bytes, or the default's blocks. A sequence of L tokens needs
 * ng(L) = ceil(L / bs) global and ns(L) = min(ng(L), ceil(window / bs) + 1) sliding blocks; the
 * pools get B in the proportion the workload needs, summed over its sequences (workload_lens,
 * each L capped at max_model_len; without one, a sequence of max_model_len tokens):
 * n_global : n_sliding = G : S with G = sum ng(L), S = sum ns(L), i.e.
 * n_global = B * G / (G * g + S * s) for global and sliding block bytes g and s. The sliding
 * pool gets at least what one window plus a full step of new tokens needs (a prefill chunk of
 * max_batched_tokens holds all its blocks during its step), or, where that would leave fewer
 * global blocks than one pool has, at least a window and one block (chunks are then shortened to
 * what it takes); never more blocks than the global pool. The hybrid layout is taken only when
 * it gives more global blocks than one pool, so every request one pool could run still fits. */
/* The workload's blocks for the split (choose_pools): ng = sum of ceil(L / bs) global and
 * ns = sum of min(that, ceil(window / bs) + 1) sliding blocks over its sequences' lengths L
 * (capped at max_model_len); one max_model_len sequence without a workload. */
static void workload_blocks(pllm_engine *e, double *ng, double *ns)
{
    const pllm_engine_params *p = &e->p;
    const int64_t bs = p->block_size, wb = ((int64_t)e->layout.window + bs - 1) / bs + 1;
    int64_t sum_g = 0, sum_s = 0, sum_len = 0, n = 0;
    for (int64_t i = 0; p->workload_lens && i < p->n_workload; i++) {
        const int64_t len = PLLM_MIN((int64_t)p->max_model_len, PLLM_MAX(1, p->workload_lens[i]));
        sum_g += (len + bs - 1) / bs;
        sum_s += PLLM_MIN((len + bs - 1) / bs, wb);
        sum_len += len;
        n++;
    }
    e->stats.kv_split_seqs = n;
    if (n == 0) {
        sum_g = ((int64_t)p->max_model_len + bs - 1) / bs;
        sum_s = PLLM_MIN(sum_g, wb);
        sum_len = p->max_model_len;
        n = 1;
    }
    e->stats.kv_split_mean_len = (double)sum_len / (double)n;
    *ng = (double)sum_g;
    *ns = (double)sum_s;
}

const char *pllm_engine_kv_hybrid_off(const pllm_engine_params *p, const pllm_kv_layout *L,
                                      int32_t max_model_len)
{
    if (p->no_kv_hybrid) return "turned off (--no-kv-hybrid)";
    if (p->prefix_cache_dir)
        return "off: the persistent prefix cache stores every layer of a block";
    if (L->window >= max_model_len) return "off: the window covers the whole context";
    if (L->n_layer_sw >= L->n_layer) return "off: every layer is a sliding one";
    return NULL;
}

static pllm_status choose_pools(pllm_engine *e, int32_t *n_blocks, int32_t *n_sw)
{
    const pllm_engine_params *p = &e->p;
    const pllm_kv_layout *L = &e->layout;
    *n_sw = 0;
    e->stats.kv_hybrid_off = NULL;
    if (L->n_layer_sw <= 0 || L->window <= 0) return choose_n_blocks(e, n_blocks);
    e->stats.kv_hybrid_off = pllm_engine_kv_hybrid_off(p, L, p->max_model_len);
    if (e->stats.kv_hybrid_off) return choose_n_blocks(e, n_blocks);

    const int32_t bs = p->block_size;
    const size_t full = pllm_kv_block_bytes(L); /* n_blocks_sw is still 0: every layer */
    pllm_kv_layout split = *L;                  /* the per-pool block bytes */
    split.n_blocks_sw = 1;
    const size_t g = pllm_kv_block_bytes(&split), sb = pllm_kv_sw_block_bytes(&split);
    /* the floors: a window and one block (min_sw: a sequence alone always advances, a chunk the
     * sliding pool cannot take whole being shortened, engine/scheduler.c), and preferably a
     * window and a whole step (pref_sw: a prefill chunk of max_batched_tokens holds all its
     * blocks during its step) */
    const int64_t pref_sw = ((int64_t)L->window + p->max_batched_tokens + bs - 1) / bs + 1;
    const int64_t min_sw = PLLM_MIN(((int64_t)L->window + bs - 1) / bs + 2, pref_sw);
    const size_t max_blocks = (size_t)INT32_MAX / (size_t)bs;
    if (p->n_blocks > 0 && p->n_blocks_sw > 0) {
        *n_blocks = p->n_blocks;
        *n_sw = p->n_blocks_sw;
    } else {
        int32_t n_full = 0;
        PLLM_TRY(choose_n_blocks(e, &n_full));
        const double budget = (double)n_full * (double)full;
        double ng = 0, ns = 0;
        workload_blocks(e, &ng, &ns);
        double dg = 0, dsw = 0;
        for (int pass = 0; pass < 2; pass++) { /* the preferred floor, then the minimum */
            dg = budget * ng / (ng * (double)g + ns * (double)sb);
            dsw = (budget - PLLM_MAX(1.0, (double)(int64_t)dg) * (double)g) / (double)sb;
            const double floor_sw = (double)(pass == 0 ? pref_sw : min_sw);
            if (dsw < floor_sw) {
                dsw = floor_sw;
                dg = (budget - dsw * (double)sb) / (double)g;
            }
            if (dsw > dg) dg = dsw = budget / (double)(g + sb); /* never more than global */
            if (dg > (double)n_full) break;
        }
        if (p->n_blocks_sw <= 0 && dg <= (double)n_full) {
            /* even the minimal sliding pool costs more than it saves: one pool */
            e->stats.kv_hybrid_off = "off: a sliding pool of one window leaves fewer global "
                                     "blocks than one pool";
            *n_blocks = n_full;
            return PLLM_OK;
        }
        if (dg < 1 || dsw < 1)
            return pllm_errorf(PLLM_ERR_NOMEM,
                               "KV budget of %.0f bytes holds no global and sliding %d-token "
                               "blocks (%zu + %zu bytes)",
                               budget, bs, g, sb);
        *n_blocks = (int32_t)PLLM_MIN((size_t)dg, max_blocks);
        *n_sw = (int32_t)PLLM_MIN((size_t)dsw, max_blocks);
        if (p->n_blocks_sw > 0) *n_sw = p->n_blocks_sw;
    }
    if (*n_sw < PLLM_MIN(min_sw, *n_blocks))
        return pllm_errorf(PLLM_ERR_INVALID,
                           "n_blocks_sw %d is below the %lld sliding blocks that a window of %d "
                           "and one more block need",
                           *n_sw, (long long)PLLM_MIN(min_sw, *n_blocks), L->window);
    return PLLM_OK;
}

/* The ids that end generation unless ignore_eos: the tokenizer's EOS and end-of-turn ids and
 * every id of the model's generation defaults (a Hugging Face generation_config.json may list
 * several, e.g. Llama-3's <|end_of_text|>, <|eom_id|>, <|eot_id|>); ids outside the vocabulary
 * are left out (the loader already refuses them). */
static pllm_status collect_eos_ids(pllm_engine *e)
{
    int32_t n_tok = 0;
    const int32_t *tok_ids = e->tok ? pllm_tokenizer_stop_ids(e->tok, &n_tok) : NULL;
    const pllm_generation_defaults *g = &e->model->gen;
    e->eos_ids = pllm_malloc(((size_t)n_tok + (size_t)g->n_eos + 1) * sizeof *e->eos_ids);
    if (!e->eos_ids) return PLLM_ERR_NOMEM;
    for (int32_t i = 0; i < n_tok + g->n_eos; i++) {
        int32_t id = i < n_tok ? tok_ids[i] : g->eos_ids[i - n_tok];
        bool seen = id < 0 || id >= e->n_vocab;
        for (int32_t j = 0; j < e->n_eos_ids && !seen; j++) seen = e->eos_ids[j] == id;
        if (!seen) e->eos_ids[e->n_eos_ids++] = id;
    }
    return PLLM_OK;
}

pllm_status pllm_engine_create(pllm_engine **out, const pllm_model *model, pllm_backend *backend,
                               const pllm_tokenizer *tok, const pllm_engine_params *params)
{
    return pllm_engine_create_hooked(out, model, backend, tok, params, NULL);
}

pllm_status pllm_engine_create_hooked(pllm_engine **out, const pllm_model *model,
                                      pllm_backend *backend, const pllm_tokenizer *tok,
                                      const pllm_engine_params *params,
                                      const pllm_engine_hooks *hooks)
{
    *out = NULL;
    if (!model) return pllm_errorf(PLLM_ERR_INVALID, "engine: no model");
    if (!backend || !backend->iface) return pllm_errorf(PLLM_ERR_INVALID, "engine: no backend");
    pllm_engine_params p = *params;
    /* 0 means the default for these (a zeroed struct works) */
    if (p.block_size == 0) p.block_size = 16;
    if (p.max_batched_tokens == 0) p.max_batched_tokens = 2048;
    if (p.max_seqs == 0) p.max_seqs = 64;
    if (p.max_model_len == 0) p.max_model_len = model->cfg.n_ctx_train;
    if (p.block_size < 1 || p.block_size > 4096)
        return pllm_errorf(PLLM_ERR_INVALID, "block_size must be in [1, 4096], got %d",
                           p.block_size);
    if (p.n_blocks < 0)
        return pllm_errorf(PLLM_ERR_INVALID, "n_blocks must be >= 0, got %d", p.n_blocks);
    if (p.max_batched_tokens < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "max_batched_tokens must be >= 1, got %d",
                           p.max_batched_tokens);
    if (p.max_seqs < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "max_seqs must be >= 1, got %d", p.max_seqs);
    if (p.max_bypass < 0)
        return pllm_errorf(PLLM_ERR_INVALID, "max_bypass must be >= 0, got %d", p.max_bypass);
    if (p.eviction != PLLM_EVICT_LRU && p.eviction != PLLM_EVICT_FUTURE)
        return pllm_errorf(PLLM_ERR_INVALID, "eviction must be PLLM_EVICT_LRU or _FUTURE, got %d",
                           (int)p.eviction);
    /* auto: the policy picks each step's drafts, up to 16 (on the copy benchmark, 16 drafts
     * after an 8-token prompt-lookup match keep 13.3 on average, all 16 in 74% of the steps);
     * prompt-lookup runs every draft it gets, so it is capped lower */
    if (p.spec_max_draft == 0)
        p.spec_max_draft = p.speculate == PLLM_SPEC_AUTO ? PLLM_SPEC_MAX_DRAFT : 10;
    if (p.overlap != PLLM_OVERLAP_AUTO && p.overlap != PLLM_OVERLAP_ON &&
        p.overlap != PLLM_OVERLAP_OFF)
        return pllm_errorf(PLLM_ERR_INVALID, "overlap: unknown mode %d", (int)p.overlap);
    if (p.speculate != PLLM_SPEC_OFF && p.speculate != PLLM_SPEC_AUTO &&
        p.speculate != PLLM_SPEC_PROMPT_LOOKUP)
        return pllm_errorf(PLLM_ERR_INVALID, "speculate: unknown mode %d", (int)p.speculate);
    if (p.spec_max_draft < 1 || p.spec_max_draft > PLLM_SPEC_MAX_DRAFT)
        return pllm_errorf(PLLM_ERR_INVALID, "spec_max_draft must be in [1, %d], got %d",
                           PLLM_SPEC_MAX_DRAFT, p.spec_max_draft);
    if (p.n_workload < 0 || (p.n_workload > 0 && !p.workload_lens))
        return pllm_errorf(PLLM_ERR_INVALID, "n_workload is %lld with %s workload_lens",
                           (long long)p.n_workload, p.workload_lens ? "" : "no");
    if (p.max_model_len < 2)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "max_model_len must be >= 2, got %d (model n_ctx_train %d)",
                           p.max_model_len, model->cfg.n_ctx_train);
    if (model->cfg.n_vocab < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "engine: model has n_vocab %d", model->cfg.n_vocab);

    pllm_engine *e = pllm_calloc(1, sizeof *e);
    if (!e) return PLLM_ERR_NOMEM;
    e->p = p;
    e->fly = -1;
    e->model = model;
    e->backend = backend;
    e->tok = tok;
    e->n_vocab = model->cfg.n_vocab;
    /* a vocabulary padded past the tokenizer's (Phi-3, Qwen2.5): never sample an id that
     * detokenizing would refuse */
    e->n_valid = tok && pllm_tokenizer_n_vocab(tok) < e->n_vocab ? pllm_tokenizer_n_vocab(tok) : 0;
    pllm_status st = backend->iface->kv_layout(backend->ctx, p.block_size, &e->layout);
    if (st != PLLM_OK) goto fail;
    int32_t n_blocks = 0, n_sw = 0;
    st = choose_pools(e, &n_blocks, &n_sw);
    e->p.workload_lens = NULL; /* borrowed for create only */
    e->p.n_workload = 0;
    if (st != PLLM_OK) goto fail;
    e->layout.block_size = p.block_size;
    e->layout.n_blocks = n_blocks;
    e->layout.n_blocks_sw = n_sw;
    if ((st = backend->iface->kv_init(backend->ctx, &e->layout)) != PLLM_OK) goto fail;
    e->ctx_limit = (int32_t)PLLM_MIN((int64_t)p.max_model_len, (int64_t)n_blocks * p.block_size);

    pllm_block_pool_params pp = {
        .n_blocks = n_blocks,
        .block_size = p.block_size,
        .enable_cache = !p.no_prefix_cache,
        .extra = model->identity,
        .hash = hooks ? hooks->block_hash : NULL,
        .hash_arg = hooks ? hooks->block_hash_arg : NULL,
        .policy = p.eviction,
    };
    if ((st = pllm_kv_manager_init(&e->kv, &pp)) != PLLM_OK) goto fail;
    if (n_sw > 0 && (st = pllm_kv_add_sliding(e->kv, n_sw, e->layout.window)) != PLLM_OK) goto fail;
    if (p.prefix_cache_dir) {
        if (p.no_prefix_cache) {
            st = pllm_errorf(PLLM_ERR_INVALID,
                             "a prefix cache directory needs prefix caching (it is turned off)");
            goto fail;
        }
        pllm_prefix_tier_params tp = {
            .dir = p.prefix_cache_dir,
            .max_bytes = p.prefix_cache_max_bytes,
            .model_identity = model->identity,
            .tag = p.prefix_cache_tag,
            .warn = p.prefix_cache_warn,
            .warn_arg = p.prefix_cache_warn_arg,
        };
        if ((st = pllm_prefix_tier_create(&e->tier, backend, &e->layout, &tp)) != PLLM_OK)
            goto fail;
        pllm_kv_set_tier(e->kv, pllm_prefix_tier_iface(e->tier));
    }
    pllm_plan_params plp = {.block_size = p.block_size, .trie = !p.no_prefix_cache, .kv = e->kv};
    if ((st = pllm_plan_init(&e->plan, &plp)) != PLLM_OK) goto fail;
    pllm_sched_params sp = {
        .max_batched_tokens = p.max_batched_tokens,
        .max_seqs = p.max_seqs,
        .max_bypass = p.max_bypass,
        .scan_limit = 64,
        .no_grouping = hooks && hooks->no_grouping,
        .label_bits = hooks ? hooks->label_bits : 0,
    };
    if ((st = pllm_sched_init(&e->sched, &sp, e->kv, e->plan)) != PLLM_OK) goto fail;
    if ((st = collect_eos_ids(e)) != PLLM_OK) goto fail;

    if (p.speculate != PLLM_SPEC_OFF) {
        pllm_spec_params spp = {
            .mode = p.speculate,
            .max_draft = p.spec_max_draft,
            .ngram_min = 1,
            .ngram_max = 8,
            .fit_max_tokens = p.max_seqs * (1 + p.spec_max_draft),
        };
        if ((st = pllm_spec_init(&e->spec, &spp)) != PLLM_OK) goto fail;
        if (hooks) {
            e->propose_hook = hooks->propose;
            e->propose_arg = hooks->propose_arg;
        }
        e->cands = pllm_calloc((size_t)p.max_seqs, sizeof *e->cands);
        e->cand_req = pllm_calloc((size_t)p.max_seqs, sizeof *e->cand_req);
        if (!e->cands || !e->cand_req) {
            st = PLLM_ERR_NOMEM;
            goto fail;
        }
    }

    size_t nt = (size_t)p.max_batched_tokens, ns = (size_t)p.max_seqs;
    size_t nsm = ns + (e->spec ? nt : 0); /* samples: one per sequence, one per draft */
    e->cap_samples = (int32_t)nsm;
    e->tokens = pllm_malloc(nt * sizeof *e->tokens);
    e->positions = pllm_malloc(nt * sizeof *e->positions);
    e->slots = pllm_malloc(nt * sizeof *e->slots);
    if (n_sw > 0 && !(e->sw_slots = pllm_malloc(nt * sizeof *e->sw_slots))) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    e->seqs = pllm_malloc(ns * sizeof *e->seqs);
    e->samples = pllm_malloc(nsm * sizeof *e->samples);
    e->sample_entry = pllm_malloc(nsm * sizeof *e->sample_entry);
    e->token_src = pllm_malloc(nt * sizeof *e->token_src);
    bool steps_ok = true;
    for (int k = 0; k < 2; k++) {
        eng_step *s = &e->st[k];
        s->entry_sample = pllm_malloc(ns * sizeof *s->entry_sample);
        s->out_tokens = pllm_malloc(nsm * sizeof *s->out_tokens);
        s->out_logprobs = pllm_malloc(nsm * sizeof *s->out_logprobs);
        s->out_top_ids = pllm_malloc(nsm * PLLM_MAX_LOGPROBS * sizeof *s->out_top_ids);
        s->out_top_logprobs = pllm_malloc(nsm * PLLM_MAX_LOGPROBS * sizeof *s->out_top_logprobs);
        steps_ok &= s->entry_sample && s->out_tokens && s->out_logprobs && s->out_top_ids &&
                    s->out_top_logprobs;
    }
    e->overlap =
        backend->iface->submit && backend->iface->wait &&
        (p.overlap == PLLM_OVERLAP_ON || (p.overlap == PLLM_OVERLAP_AUTO && backend->iface->async));
    e->stats.overlap = e->overlap;
    e->done = pllm_malloc(ns * sizeof *e->done);
    e->done_why = pllm_calloc(ns, sizeof *e->done_why);
    e->n_done_why = (int32_t)ns;
    if (!e->tokens || !e->positions || !e->slots || !e->seqs || !e->samples || !e->sample_entry ||
        !e->token_src || !steps_ok || !e->done || !e->done_why) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    e->stats.n_blocks = n_blocks;
    e->stats.block_size = p.block_size;
    e->stats.n_blocks_sw = n_sw;
    e->stats.n_layer_sw = n_sw > 0 ? e->layout.n_layer_sw : 0;
    e->stats.kv_window = e->layout.window;
    e->stats.kv_bytes = (size_t)n_blocks * pllm_kv_block_bytes(&e->layout) +
                        (size_t)n_sw * pllm_kv_sw_block_bytes(&e->layout);
    *out = e;
    return PLLM_OK;
fail:
    pllm_engine_free(e);
    return st;
}

void pllm_engine_free(pllm_engine *e)
{
    if (!e) return;
    if (e->fly >= 0 && e->backend->iface->wait(e->backend->ctx) != PLLM_OK)
        pllm_error_clear(); /* its results are dropped with everything else */
    e->fly = -1;
    if (e->sched) {
        pllm_req *r;
        while ((r = pllm_sched_waiting_head(e->sched))) {
            pllm_sched_remove(e->sched, r);
            pllm_req_free(r);
        }
        int32_t n;
        pllm_req *const *run = pllm_sched_running(e->sched, &n);
        while (n > 0) {
            r = run[n - 1];
            pllm_sched_remove(e->sched, r);
            pllm_req_free(r);
            run = pllm_sched_running(e->sched, &n);
        }
    }
    pllm_sched_free(e->sched);
    pllm_plan_free(e->plan);
    pllm_kv_manager_free(e->kv);
    pllm_prefix_tier_free(e->tier);
    for (int k = 0; k < 2; k++) {
        eng_step *s = &e->st[k];
        pllm_sched_out_free(&s->o);
        free(s->entry_sample);
        free(s->out_tokens);
        free(s->out_logprobs);
        free(s->out_top_ids);
        free(s->out_top_logprobs);
    }
    free(e->token_src);
    free(e->tokens);
    free(e->positions);
    free(e->slots);
    free(e->sw_slots);
    free(e->sw_tables);
    free(e->seqs);
    free(e->tables);
    free(e->samples);
    free(e->sample_entry);
    free(e->done);
    for (int32_t i = 0; e->done_why && i < e->n_done_why; i++) free(e->done_why[i]);
    free(e->done_why);
    free(e->cands);
    free(e->cand_req);
    pllm_spec_free(e->spec);
    free(e->eos_ids);
    free(e);
}

/* ---- requests ---- */

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

pllm_status pllm_engine_add(pllm_engine *e, const int32_t *prompt, int32_t n_prompt,
                            const pllm_request_params *p, void *user, uint64_t *req_id)
{
    PLLM_TRY(pllm_request_params_validate(p));
    if (n_prompt < 1) return pllm_errorf(PLLM_ERR_INVALID, "prompt is empty");
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= e->n_vocab)
            return pllm_errorf(PLLM_ERR_RANGE,
                               "prompt token %d is %d, outside the vocabulary [0, %d)", i,
                               prompt[i], e->n_vocab);
    for (int32_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] >= e->n_vocab)
            return pllm_errorf(PLLM_ERR_RANGE,
                               "stop_token_ids[%d] is %d, outside the vocabulary [0, %d)", i,
                               p->stop_ids[i], e->n_vocab);
    if (n_prompt + 1 > e->p.max_model_len)
        return pllm_errorf(PLLM_ERR_RANGE,
                           "prompt of %d tokens leaves no room to generate: max_model_len is %d",
                           n_prompt, e->p.max_model_len);
    if (n_prompt + 1 > e->ctx_limit)
        return pllm_errorf(PLLM_ERR_RANGE,
                           "prompt of %d tokens leaves no room to generate: the KV cache holds %d "
                           "tokens (%d blocks of %d)",
                           n_prompt, e->ctx_limit, e->stats.n_blocks, e->p.block_size);

    uint64_t id = e->next_id;
    uint64_t base = p->has_seed ? p->sampling.seed : splitmix64(e->p.seed ^ splitmix64(id));
    pllm_req_group *g = pllm_calloc(1, sizeof *g);
    if (!g) return PLLM_ERR_NOMEM;
    g->n_alive = 1; /* this function's reference, dropped below */
    pllm_req **reqs = pllm_calloc((size_t)p->n, sizeof *reqs);
    pllm_status st = reqs ? PLLM_OK : PLLM_ERR_NOMEM;
    double now = pllm_now();
    int32_t made = 0, added = 0;
    for (; st == PLLM_OK && made < p->n; made++) {
        pllm_req_init ini = {
            .id = id,
            .index = made,
            .user = user,
            .arrival = e->next_arrival + (uint64_t)made,
            .group = g,
            .prompt = prompt,
            .n_prompt = n_prompt,
            .params = p,
            .seed = base + (uint64_t)made,
            .tok = e->tok,
            .eos_ids = e->eos_ids,
            .n_eos_ids = e->n_eos_ids,
        };
        if ((st = pllm_req_create(&reqs[made], &ini)) != PLLM_OK) break;
        reqs[made]->t_arrival = now;
    }
    while (st == PLLM_OK && added < made)
        if ((st = pllm_sched_add(e->sched, reqs[added])) == PLLM_OK) added++;
    if (st != PLLM_OK && reqs) {
        for (int32_t i = 0; i < made; i++) {
            if (i < added) pllm_sched_remove(e->sched, reqs[i]);
            pllm_req_free(reqs[i]);
        }
    }
    /* accepted: count the prompts in the plan statistics */
    for (int32_t i = 0; st == PLLM_OK && i < made; i++) pllm_plan_account(e->plan, reqs[i]);
    free(reqs);
    if (--g->n_alive == 0) free(g);
    if (st != PLLM_OK) return st;
    e->next_id++;
    e->next_arrival += (uint64_t)p->n;
    if (req_id) *req_id = id;
    return PLLM_OK;
}

bool pllm_engine_has_work(const pllm_engine *e)
{
    return e->fly >= 0 || pllm_sched_n_waiting(e->sched) + pllm_sched_n_running(e->sched) > 0;
}

void pllm_engine_get_stats(const pllm_engine *e, pllm_engine_stats *out)
{
    *out = e->stats;
    out->step_wall_seconds =
        e->t_last_wait > e->t_first_submit ? e->t_last_wait - e->t_first_submit : 0.0;
    out->device_seconds = -1.0;
    const pllm_backend_iface *b = e->backend->iface;
    if (b->device_seconds && !b->device_seconds(e->backend->ctx, &out->device_seconds))
        out->device_seconds = -1.0;
    out->blocks_used = e->stats.n_blocks - pllm_block_pool_n_free(pllm_kv_pool_c(e->kv));
    if (pllm_kv_sw_pool_c(e->kv))
        out->blocks_used_sw =
            e->stats.n_blocks_sw - pllm_block_pool_n_free(pllm_kv_sw_pool_c(e->kv));
    if (e->spec && e->p.speculate == PLLM_SPEC_AUTO) { /* the policy's (timing) figures */
        pllm_spec_stats ss;
        pllm_spec_get_stats(e->spec, &ss);
        out->spec_cost_a = ss.cost_a;
        out->spec_cost_c = ss.cost_c;
        out->spec_cost_b = ss.cost_b;
    }
}

bool pllm_engine_get_prefix_store_stats(const pllm_engine *e, pllm_prefix_store_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!e->tier) return false;
    pllm_prefix_tier_get_stats(e->tier, out);
    return true;
}

/* Save the full prompt blocks the step computed to the persistent prefix cache (those below
 * n_committed: indexed, so their K/V are final). */
static pllm_status save_prefix_blocks(pllm_engine *e, const pllm_sched_out *o)
{
    int32_t bs = e->p.block_size;
    for (int32_t i = 0; i < o->n_entries; i++) {
        const pllm_sched_entry *en = &o->entries[i];
        const pllm_req *r = en->req;
        if (!r || en->n_computed >= r->n_prompt) continue;
        int32_t from = en->n_computed / bs; /* the first block not full before the step */
        int32_t to =
            PLLM_MIN(PLLM_MIN(en->n_computed + en->n_new, r->n_prompt) / bs, r->table.n_committed);
        PLLM_TRY(pllm_prefix_tier_save(e->tier, r->tokens.ids, from, to, r->table.ids));
    }
    return PLLM_OK;
}

void pllm_engine_get_plan_stats(const pllm_engine *e, pllm_engine_plan_stats *out)
{
    pllm_plan_stats ps;
    pllm_plan_get_stats(e->plan, &ps);
    const pllm_engine_stats *st = &e->stats;
    *out = (pllm_engine_plan_stats){
        .requests = ps.requests,
        .prompt_tokens = ps.prompt_tokens,
        .best_cached_tokens = ps.best_cached_tokens,
        .best_hit_rate =
            ps.prompt_tokens ? (double)ps.best_cached_tokens / (double)ps.prompt_tokens : 0.0,
        .distinct_blocks = ps.distinct_blocks,
        .shared_blocks = ps.shared_blocks,
        .finished_requests = st->requests_finished,
        .finished_prompt_tokens = st->prompt_tokens,
        .finished_cached_tokens = st->prompt_tokens_cached,
        .hit_rate =
            st->prompt_tokens ? (double)st->prompt_tokens_cached / (double)st->prompt_tokens : 0.0,
        .blocks_computed = ps.blocks_computed,
        .blocks_recomputed = ps.blocks_recomputed,
        .grouped = ps.grouped,
        .exact = ps.exact,
    };
}

/* ---- one step ---- */

/* The flat plan of step s's entries (entries whose request finished meanwhile are left out). A
 * request's placeholder (r->pending) becomes a token_src naming the in-flight step's row. */
static pllm_status build_plan(pllm_engine *e, eng_step *s, pllm_batch_plan *plan, int32_t *top_n)
{
    const pllm_sched_out *o = &s->o;
    int32_t bs = e->p.block_size, nt = 0, ntab = 0, ns = 0, nq = 0, n_src = 0;
    int32_t need = 0;
    for (int32_t i = 0; i < o->n_entries; i++)
        if (o->entries[i].req) need += o->entries[i].req->table.n;
    if (need > e->tables_cap) {
        int32_t cap = PLLM_MAX(need, 2 * e->tables_cap);
        int32_t *t = pllm_realloc(e->tables, (size_t)cap * sizeof *t);
        if (!t) return PLLM_ERR_NOMEM;
        e->tables = t;
        if (e->sw_slots) {
            t = pllm_realloc(e->sw_tables, (size_t)cap * sizeof *t);
            if (!t) return PLLM_ERR_NOMEM;
            e->sw_tables = t;
        }
        e->tables_cap = cap;
    }
    *top_n = 0;
    for (int32_t i = 0; i < o->n_entries; i++) {
        const pllm_sched_entry *en = &o->entries[i];
        pllm_req *r = en->req;
        if (!r) continue;
        int32_t n_ctx = en->n_computed + en->n_new;
        PLLM_ASSERT(r->table.n * bs >= n_ctx);
        e->seqs[nq] = (pllm_seq_plan){
            .token_start = nt,
            .n_new = en->n_new,
            .n_ctx = n_ctx,
            .block_start = ntab,
            .n_blocks = r->table.n,
        };
        memcpy(e->tables + ntab, r->table.ids, (size_t)r->table.n * sizeof *e->tables);
        if (e->sw_slots)
            memcpy(e->sw_tables + ntab, r->table.sw, (size_t)r->table.n * sizeof *e->sw_tables);
        const int32_t *sw = e->sw_slots ? e->sw_tables + ntab : NULL;
        ntab += r->table.n;
        for (int32_t pos = en->n_computed; pos < n_ctx; pos++, nt++) {
            bool pend = r->pending && pos == (int32_t)r->tokens.n - 1;
            e->tokens[nt] = pend ? 0 : r->tokens.ids[pos];
            e->token_src[nt] = pend ? r->pending_row : -1;
            n_src += pend;
            e->positions[nt] = pos;
            e->slots[nt] = r->table.ids[pos / bs] * bs + pos % bs;
            if (sw) e->sw_slots[nt] = sw[pos / bs] * bs + pos % bs;
        }
        if (en->n_computed < r->n_prompt)
            e->stats.prompt_tokens_computed += PLLM_MIN(n_ctx, r->n_prompt) - en->n_computed;
        if (en->sample) {
            /* row j (0 .. n_draft) samples the token after the history and drafts 1..j */
            s->entry_sample[i] = ns;
            for (int32_t j = 0; j <= en->n_draft; j++) {
                int32_t n_out = pllm_req_n_output(r) + j;
                bool ban = n_out < r->params.min_tokens;
                PLLM_ASSERT(ns < e->cap_samples);
                if (r->pending && pllm_sampling_reads_history(&r->sampling)) {
                    PLLM_ASSERT(!e->backend->iface->no_pending_history);
                    e->stats.pending_penalty_samples++;
                }
                e->samples[ns] = (pllm_sample_req){
                    .seq = nq,
                    .back = en->n_draft - j,
                    .params = &r->sampling,
                    .ctx =
                        {
                            .prompt = r->tokens.ids,
                            .n_prompt = r->n_prompt,
                            .output = r->tokens.ids + r->n_prompt,
                            .n_output = n_out,
                            .banned = ban ? r->stop_ids : NULL,
                            .n_banned = ban ? r->n_stop_ids : 0,
                            .n_valid = e->n_valid,
                        },
                };
                e->sample_entry[ns] = i;
                ns++;
            }
            *top_n = PLLM_MAX(*top_n, r->sampling.logprobs);
        }
        nq++;
    }
    PLLM_ASSERT(nt <= o->n_tokens && nt <= e->p.max_batched_tokens &&
                o->n_entries <= e->p.max_seqs);
    *plan = (pllm_batch_plan){
        .n_tokens = nt,
        .tokens = e->tokens,
        .token_src = n_src > 0 ? e->token_src : NULL,
        .positions = e->positions,
        .slots = e->slots,
        .n_seqs = nq,
        .seqs = e->seqs,
        .block_tables = e->tables,
        .sw_block_tables = e->sw_slots ? e->sw_tables : NULL,
        .sw_slots = e->sw_slots,
        .n_samples = ns,
        .samples = e->samples,
    };
    return PLLM_OK;
}

static void emit_completion(pllm_engine *e, pllm_req *r, const char *error,
                            pllm_engine_emit_fn emit, void *arg)
{
    r->t_finish = pllm_now();
    int32_t n_out = pllm_req_n_output(r);
    bool lp = r->sampling.logprobs > 0 && n_out > 0;
    pllm_completion c = {
        .req_id = r->id,
        .index = r->index,
        .user = r->user,
        .finish = r->finish,
        .error = error,
        .text = r->text.s ? r->text.s : "",
        .text_len = r->text.n,
        .token_ids = r->tokens.ids + r->n_prompt,
        .n_tokens = n_out,
        .logprobs = lp ? r->logprobs : NULL,
        .top_n = lp ? r->sampling.logprobs : 0,
        .top_ids = lp ? r->top_ids : NULL,
        .top_logprobs = lp ? r->top_logprobs : NULL,
        .prompt_tokens = r->n_prompt,
        .cached_tokens = r->cached_tokens,
        .t_arrival = r->t_arrival,
        .t_first_token = r->t_first_token,
        .t_finish = r->t_finish,
        .token_times = n_out > 0 ? r->token_times : NULL,
    };
    e->stats.requests_finished++;
    if (r->finish == PLLM_FINISH_ERROR) e->stats.requests_failed++;
    e->stats.prompt_tokens += r->n_prompt;
    e->stats.prompt_tokens_cached += r->cached_tokens;
    e->stats.output_tokens += n_out;
    if (emit) emit(&c, arg);
}

/* Append a sampled token and decide whether the request is done. */
static pllm_status accept_token(pllm_engine *e, pllm_req *r, int32_t token, float logprob,
                                const int32_t *top_ids, const float *top_lps, double now,
                                bool *done)
{
    *done = false;
    PLLM_TRY(pllm_req_append(r, token, logprob, top_ids, top_lps, now));
    int32_t n_out = pllm_req_n_output(r);
    if (n_out == 1) r->t_first_token = now;
    bool checks = n_out >= r->params.min_tokens;
    if (checks && pllm_req_is_stop_id(r, token)) {
        r->finish = PLLM_FINISH_STOP;
        *done = true;
        if (r->tok) PLLM_TRY(pllm_detok_finish(&r->detok, &r->text));
        return PLLM_OK;
    }
    if (r->tok) {
        size_t from = r->text.n;
        PLLM_TRY(pllm_detok_push(&r->detok, token, &r->text));
        if (checks && r->params.n_stop > 0) {
            int64_t at = pllm_stop_find(r->text.s ? r->text.s : "", r->text.n, from,
                                        (const char *const *)r->params.stop, r->params.n_stop);
            if (at >= 0) {
                r->text.n = (size_t)at;
                if (r->text.s) r->text.s[at] = 0;
                r->finish = PLLM_FINISH_STOP;
                *done = true;
                return PLLM_OK;
            }
        }
    }
    if (n_out >= r->params.max_tokens || (int32_t)r->tokens.n >= e->ctx_limit) {
        r->finish = PLLM_FINISH_LENGTH;
        *done = true;
        if (r->tok) PLLM_TRY(pllm_detok_finish(&r->detok, &r->text));
    }
    return PLLM_OK;
}

/* Drafts for the running requests that are decoding (speculate.h): proposals, then the
 * policy's choice of how many each runs; r->n_draft of every running request is set. */
static pllm_status propose_drafts(pllm_engine *e)
{
    int32_t n_run = 0, n_cand = 0, base = 0, n_decode = 0;
    pllm_req *const *run = pllm_sched_running(e->sched, &n_run);
    for (int32_t i = 0; i < n_run; i++) {
        pllm_req *r = run[i];
        int32_t T = (int32_t)r->tokens.n, rem = T - r->n_computed;
        r->n_draft = 0;
        base += rem;
        if (rem != 1) continue;
        n_decode++;
        /* room: every accepted draft and the token after them within max_tokens and the
         * context limit */
        int32_t k = PLLM_MIN(e->p.spec_max_draft, r->params.max_tokens - pllm_req_n_output(r) - 1);
        k = PLLM_MIN(k, e->ctx_limit - T - 1);
        if (k <= 0) continue;
        PLLM_TRY(pllm_tokens_reserve(&r->tokens, (size_t)T + (size_t)k));
        int32_t got = e->propose_hook ? e->propose_hook(e->propose_arg, r->id, r->index,
                                                        r->tokens.ids, T, r->tokens.ids + T, k)
                                      : pllm_spec_propose(e->spec, r->tokens.ids + T, k,
                                                          r->tokens.ids, T, &r->spec_source);
        PLLM_ASSERT(got >= 0 && got <= k);
        if (got == 0) continue;
        e->cands[n_cand] = (pllm_spec_cand){.n_proposed = got,
                                            .source = r->spec_source,
                                            .trials = r->spec_trials,
                                            .accepted = r->spec_accepted};
        e->cand_req[n_cand++] = r;
    }
    int32_t budget = PLLM_MAX(0, e->p.max_batched_tokens - base);
    pllm_spec_choose(e->spec, e->cands, n_cand, base, n_decode, budget);
    for (int32_t i = 0; i < n_cand; i++) e->cand_req[i]->n_draft = e->cands[i].k;
    return PLLM_OK;
}

/* Step s's results, once the backend filled them: per sampled entry, its rows in order while
 * they reproduce the drafts; a request's placeholder gives way to its token. The requests that
 * finish go to e->done (n_done). */
static pllm_status accept_step(pllm_engine *e, eng_step *s, double now, int32_t *n_done)
{
    pllm_sched_out *o = &s->o;
    const pllm_step_out *so = &s->so;
    const int32_t top_n = so->top_n;
    *n_done = 0;
    for (int32_t i = 0; i < o->n_entries; i++) {
        pllm_sched_entry *en = &o->entries[i];
        pllm_req *r = en->req;
        if (!en->sample) continue;
        if (!r) { /* finished in the step before: its row was computed in vain */
            e->stats.wasted_slots++;
            continue;
        }
        if (r->pending) { /* the placeholder gives way to the token */
            PLLM_ASSERT(r->pending_row == s->entry_sample[i]);
            r->tokens.n--;
            r->pending = false;
        }
        int32_t first = s->entry_sample[i], nd = en->n_draft, T = (int32_t)r->tokens.n;
        int32_t drafts[PLLM_SPEC_MAX_DRAFT];
        PLLM_ASSERT(nd <= PLLM_SPEC_MAX_DRAFT);
        memcpy(drafts, r->tokens.ids + T, (size_t)nd * sizeof *drafts);
        int32_t j = 0;
        bool done = false;
        char *why = NULL;
        for (;;) {
            int32_t k = first + j, tok = so->tokens[k];
            if (tok < 0 || tok >= e->n_vocab) {
                free(why);
                return pllm_errorf(PLLM_ERR_INTERNAL, "backend %s sampled token %d outside [0, %d)",
                                   e->backend->iface->name, tok, e->n_vocab);
            }
            pllm_status st = accept_token(
                e, r, tok, so->logprobs ? so->logprobs[k] : 0.0f,
                so->top_ids ? so->top_ids + (size_t)k * (size_t)top_n : NULL,
                so->top_logprobs ? so->top_logprobs + (size_t)k * (size_t)top_n : NULL, now, &done);
            if (st == PLLM_ERR_NOMEM) {
                free(why);
                return st;
            }
            if (st != PLLM_OK) {
                /* this request's own failure (a sampled id its tokenizer has no token for, a
                 * text its stop strings cannot be matched in): it alone fails, the step goes on */
                free(why);
                why = pllm_strdup(pllm_errmsg());
                r->finish = PLLM_FINISH_ERROR;
                done = true;
            }
            if (done || j == nd || tok != drafts[j]) break;
            j++;
        }
        /* j drafts accepted: their K/V (computed for the same tokens) stays; the rest is
         * rejected and its slots are written again by the next step */
        e->stats.decode_samples++;
        e->stats.decode_tokens += (int32_t)r->tokens.n - T;
        if (nd > 0) {
            e->stats.spec_drafted += nd;
            e->stats.spec_accepted += j;
            pllm_spec_seq_update(&r->spec_trials, &r->spec_accepted, nd, j);
            pllm_spec_observe_seq(e->spec, r->spec_source, nd, j);
        }
        en->n_new -= nd - j;
        o->n_tokens -= nd - j;
        en->n_draft = 0;
        if (e->spec && !done)
            pllm_spec_ngram_add(e->spec, r->tokens.ids, PLLM_MAX(T, r->n_prompt),
                                (int32_t)r->tokens.n);
        if (done) {
            e->done_why[*n_done] = why;
            e->done[(*n_done)++] = r;
        } else {
            free(why);
        }
    }
    return PLLM_OK;
}

/* Emit and free the finished requests; their entries in both steps become NULL (a step in
 * flight computed their row in vain: it is skipped when that step completes). */
static void retire_done(pllm_engine *e, int32_t n_done, pllm_engine_emit_fn emit, void *arg)
{
    for (int32_t d = 0; d < n_done; d++) {
        pllm_req *r = e->done[d];
        for (int k = 0; k < 2; k++) {
            pllm_sched_out *o = &e->st[k].o;
            for (int32_t i = 0; i < o->n_entries; i++)
                if (o->entries[i].req == r) o->entries[i].req = NULL; /* freed below */
        }
        emit_completion(e, r, e->done_why[d], emit, arg);
        free(e->done_why[d]);
        e->done_why[d] = NULL;
        pllm_sched_remove(e->sched, r);
        pllm_req_free(r);
    }
}

/* Queue step s (its plan built from its entries). */
static pllm_status submit_step(pllm_engine *e, eng_step *s)
{
    pllm_batch_plan plan;
    int32_t top_n = 0;
    PLLM_TRY(build_plan(e, s, &plan, &top_n));
    s->so = (pllm_step_out){
        .tokens = s->out_tokens,
        .logprobs = top_n > 0 ? s->out_logprobs : NULL,
        .top_n = top_n,
        .top_ids = top_n > 0 ? s->out_top_ids : NULL,
        .top_logprobs = top_n > 0 ? s->out_top_logprobs : NULL,
    };
    s->n_tokens = plan.n_tokens;
    s->n_samples = plan.n_samples;
    s->n_drafts = 0;
    for (int32_t i = 0; i < s->o.n_entries; i++) s->n_drafts += s->o.entries[i].n_draft;
    s->t0 = pllm_now();
    if (e->stats.steps == 0 && e->fly < 0) e->t_first_submit = s->t0;
    const pllm_backend_iface *b = e->backend->iface;
    pllm_status st = e->overlap ? b->submit(e->backend->ctx, &plan, &s->so)
                                : b->step(e->backend->ctx, &plan, &s->so);
    if (st != PLLM_OK) pllm_error_prefix(st, "backend %s step: ", b->name);
    return st;
}

/* Wait for step s (overlap) and take its results: accept, stop checks, detokenization; then,
 * synchronous, the scheduler's update; the prefix tier's saves; emit and free what finished. */
static pllm_status complete_step(pllm_engine *e, eng_step *s, bool updated,
                                 pllm_engine_emit_fn emit, void *arg)
{
    if (e->overlap) {
        pllm_status st = e->backend->iface->wait(e->backend->ctx);
        if (st != PLLM_OK)
            return pllm_error_prefix(st, "backend %s wait: ", e->backend->iface->name);
    }
    e->stats.steps++;
    double now = pllm_now(); /* the sampled tokens' time (pllm_completion.token_times) */
    e->t_last_wait = now;
    if (e->spec)
        pllm_spec_observe_step(e->spec, s->n_tokens, s->n_samples, s->n_drafts, now - s->t0);
    if (s->n_drafts > 0) e->stats.spec_steps++;
    int32_t n_done = 0;
    PLLM_TRY(accept_step(e, s, now, &n_done));
    if (!updated) PLLM_TRY(pllm_sched_update(e->sched, &s->o));
    if (e->tier) PLLM_TRY(save_prefix_blocks(e, &s->o));
    retire_done(e, n_done, emit, arg);
    return PLLM_OK;
}

/* Complete the step in flight, if any. */
static pllm_status drain(pllm_engine *e, pllm_engine_emit_fn emit, void *arg)
{
    if (e->fly < 0) return PLLM_OK;
    eng_step *s = &e->st[e->fly];
    e->fly = -1;
    return complete_step(e, s, true, emit, arg);
}

/* Whether step s must wait for the step in flight before it is built: a sample whose penalties
 * read the pending token, on a backend that cannot resolve it (backend.h no_pending_history). */
static bool needs_history(const pllm_engine *e, const eng_step *s)
{
    if (e->fly < 0 || !e->backend->iface->no_pending_history) return false;
    for (int32_t i = 0; i < s->o.n_entries; i++) {
        const pllm_sched_entry *en = &s->o.entries[i];
        if (en->sample && en->req && en->req->pending &&
            pllm_sampling_reads_history(&en->req->sampling))
            return true;
    }
    return false;
}

/* Step s is queued and will run on: each sampled request gets a placeholder for its token (the
 * next plan names it by row), and the scheduler counts the step as computed. */
static pllm_status leave_in_flight(pllm_engine *e, eng_step *s)
{
    for (int32_t i = 0; i < s->o.n_entries; i++) {
        const pllm_sched_entry *en = &s->o.entries[i];
        pllm_req *r = en->req;
        if (!r || !en->sample) continue;
        PLLM_ASSERT(!r->pending && en->n_draft == 0);
        PLLM_TRY(pllm_tokens_reserve(&r->tokens, r->tokens.n + 1));
        r->tokens.ids[r->tokens.n++] = PLLM_TOKEN_PENDING;
        r->pending = true;
        r->pending_row = s->entry_sample[i];
    }
    PLLM_TRY(pllm_sched_update(e->sched, &s->o));
    e->fly = (int32_t)(s - e->st);
    return PLLM_OK;
}

/*
 * One step. Synchronous: schedule, build, step, complete. With overlap (one step in flight):
 *   1. schedule step N + 1 as if step N (in flight) produced its tokens (placeholders);
 *   2. build and submit it: a placeholder becomes token_src, resolved by the backend;
 *   3. wait for N and complete it (stop checks, detokenization, output) while N + 1 runs; a
 *      request that finished at N had a row of N + 1 computed in vain (its entry becomes NULL);
 *   4. placeholders for N + 1's samples; the scheduler's update; N + 1 stays in flight.
 * A sample whose penalties read a placeholder gets it resolved by the backend (on a GPU, on the
 * device); a backend that cannot (no_pending_history) makes such a step wait for the one in
 * flight first (counted). Speculative decoding steps are synchronous (counted).
 */
pllm_status pllm_engine_step(pllm_engine *e, pllm_engine_emit_fn emit, void *arg)
{
    if (e->broken != PLLM_OK)
        return pllm_errorf(e->broken, "engine: a previous step failed; the engine cannot continue");
    pllm_status st = PLLM_OK;
    /* speculation proposes from the exact tokens, so it runs synchronously */
    if (e->spec && (st = drain(e, emit, arg)) != PLLM_OK) goto broken;
    if (e->spec && (st = propose_drafts(e)) != PLLM_OK) goto broken;
    const int32_t k = e->fly >= 0 ? 1 - e->fly : e->cur;
    eng_step *s = &e->st[k];
    if ((st = pllm_sched_schedule(e->sched, &s->o)) != PLLM_OK) goto broken;
    e->cur = k;
    e->stats.preemptions += s->o.n_preempted;
    if (s->o.n_entries == 0) {
        if (e->fly >= 0) { /* nothing new to run: finish the step in flight */
            if ((st = drain(e, emit, arg)) != PLLM_OK) goto broken;
            return PLLM_OK;
        }
        if (!pllm_engine_has_work(e)) return PLLM_OK;
        st = pllm_errorf(PLLM_ERR_INTERNAL,
                         "engine: %d waiting, %d running, but nothing could be scheduled",
                         pllm_sched_n_waiting(e->sched), pllm_sched_n_running(e->sched));
        goto broken;
    }
    int32_t used = e->stats.n_blocks - pllm_block_pool_n_free(pllm_kv_pool(e->kv));
    e->stats.peak_blocks_used = PLLM_MAX(e->stats.peak_blocks_used, used);
    if (pllm_kv_sw_pool(e->kv)) {
        used = e->stats.n_blocks_sw - pllm_block_pool_n_free(pllm_kv_sw_pool(e->kv));
        e->stats.peak_blocks_used_sw = PLLM_MAX(e->stats.peak_blocks_used_sw, used);
    }

    if (needs_history(e, s)) {
        e->stats.sync_penalties++;
        if ((st = drain(e, emit, arg)) != PLLM_OK) goto broken;
        bool any = false;
        for (int32_t i = 0; i < s->o.n_entries && !any; i++) any = s->o.entries[i].req != NULL;
        if (!any) { /* everything it planned finished meanwhile: nothing to run */
            s->o.n_entries = 0;
            s->o.n_tokens = 0;
            return PLLM_OK;
        }
    }
    if (e->fly >= 0)
        e->stats.steps_overlapped++;
    else
        e->stats.steps_sync++;
    if (e->spec) e->stats.sync_speculation++;
    if ((st = submit_step(e, s)) != PLLM_OK) goto broken;
    if ((st = drain(e, emit, arg)) != PLLM_OK) goto broken; /* step N, while N + 1 runs */
    if (e->overlap && !e->spec)
        st = leave_in_flight(e, s);
    else
        st = complete_step(e, s, false, emit, arg);
    if (st != PLLM_OK) goto broken;
    return PLLM_OK;
broken:
    e->broken = st;
    return st;
}

/* ---- internal accessors (engine_internal.h) ---- */

const pllm_sched_out *pllm_engine_last_plan(const pllm_engine *e)
{
    return &e->st[e->cur].o;
}
pllm_kv_manager *pllm_engine_kv(pllm_engine *e)
{
    return e->kv;
}
pllm_sched *pllm_engine_sched(pllm_engine *e)
{
    return e->sched;
}
pllm_plan *pllm_engine_plan(pllm_engine *e)
{
    return e->plan;
}
int32_t pllm_engine_ctx_limit(const pllm_engine *e)
{
    return e->ctx_limit;
}

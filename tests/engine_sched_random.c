/*
 * engine_sched_random: thousands of seeded random workloads through the whole engine loop
 * (scheduler, KV manager, block pool, plan building) on the self-checking fake backend.
 *
 * Workloads: random prompt lengths, prompts sharing prefixes (and identical prompts), block
 * sizes 1..16, tiny KV budgets that force preemption (and prompts that can never fit, which
 * add() must refuse), random max_batched_tokens / max_seqs / max_bypass / max_model_len,
 * n > 1, min_tokens, stop ids, logprobs, requests arriving between steps. Each workload runs
 * twice, with prefix caching on and off and different budgets.
 *
 * Every third workload runs with a block hash that collides constantly (one bit of the
 * block's first token), so prefix-cache hits rely on the stored tokens and parent. The
 * eviction policy is LRU or FUTURE (next use from the prefix planner) at random.
 *
 * Checked: every completion finishes exactly once with exactly the tokens, finish reason and
 * logprobs of an independent simulation of the fake model run alone; the fake backend's own
 * per-step checks (KV slots, block tables, budget, sequence cap) pass; the plan never exceeds
 * the token budget or sequence cap; no waiting request is overtaken more than max_bypass
 * times (tracked by the test from the queue order, the adds and the plans, not from the
 * scheduler's counter); preemptions seen in plans equal the stats;
 * the block pool passes its invariant check after every step (including, under FUTURE, that
 * every free parent is evicted after its free children), never drops an orphan nor redirects
 * an eviction, and is whole (every block free) at the end; the prefix planner passes its check
 * after every step (trie, waiting heaps, every linked block's next-use label); the best
 * achievable prompt-cache hit reported before the first step equals an independent count over
 * the prompts. A third run per workload checks that this best is achievable with the smallest
 * cache that admits the requests: one request at a time, added in sorted token order, reaches
 * it (or exceeds it, when a prompt repeats another request's generated text).
 *
 * A fourth run per workload gives the fake model sliding-window layers (windows 1..24) and the
 * engine the hybrid KV layout with a sliding pool barely above its floor (a window and one block,
 * which shortens prefill chunks, or a window plus a step's tokens), so the sliding pool drives
 * preemption; prefix caching, forks, speculation and overlap
 * vary as above. The fake checks every step that each sequence's window is in its sliding table
 * with the right prefix (backend.h, engine_fake_backend.h); the test checks after every step that
 * no running sequence holds a sliding block before its window, and that it holds at most
 * ceil(window / block_size) + 1 of them besides blocks of positions not computed yet.
 */
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "engine/request.h"
#include "tests/engine_fake_backend.h"
#include "tests/testutil.h"

#include <math.h>
#include <string.h>

#define VOCAB      64
#define MAX_REQ    12
#define MAX_N      3
#define MAX_OUT    32
#define MAX_PROMPT 96

typedef struct wreq {
    int32_t prompt[MAX_PROMPT];
    int32_t n_prompt;
    pllm_request_params params;
    int32_t add_at_step;
} wreq;

typedef struct workload {
    int32_t n_req;
    wreq reqs[MAX_REQ];
    int32_t block_size;
    int32_t n_blocks;
    int32_t max_model_len;
} workload;

typedef struct result {
    int32_t n_emitted;
    int32_t tokens[MAX_OUT];
    int32_t n_tokens;
    pllm_finish_reason finish;
    float logprobs[MAX_OUT];
    int32_t top_ids[MAX_OUT * 3];
    float top_lps[MAX_OUT * 3];
    bool have_logprobs;
    int32_t top_n;
    int32_t prompt_tokens, cached_tokens;
    bool times_ok;
} result;

typedef struct run_state {
    const workload *w;
    int32_t req_of_id[MAX_REQ]; /* workload request index by engine req_id */
    result res[MAX_REQ][MAX_N];
    /* independent bypass model */
    bool waiting[MAX_REQ][MAX_N];
    int32_t overtaken[MAX_REQ][MAX_N];
    pllm_order order[MAX_REQ][MAX_N]; /* queue position, read from the waiting queue */
    int64_t sum_prompt, sum_cached;
} run_state;

typedef struct totals {
    int64_t workloads, runs, completions, steps, preemptions, refused, cached_tokens, forks,
        max_overtaken, grouped, best_checked, future_runs, relabels, sorted_runs, sorted_beyond;
    int64_t finish_stop, finish_length;
    int64_t spec_runs, spec_drafted, spec_accepted;
    int64_t overlap_runs, overlapped_steps, wasted_slots, sync_penalties, pending_penalty;
    int64_t sw_runs, sw_checked, sw_preemptions, sw_cached_tokens, sw_max_held, sw_holds;
} totals;

static void on_done(const pllm_completion *c, void *arg)
{
    run_state *rs = arg;
    CHECK(c->req_id < MAX_REQ && c->index >= 0 && c->index < MAX_N);
    if (c->req_id >= MAX_REQ || c->index < 0 || c->index >= MAX_N) return;
    int32_t wi = rs->req_of_id[c->req_id];
    CHECK(c->user == &rs->w->reqs[wi]);
    result *r = &rs->res[wi][c->index];
    r->n_emitted++;
    CHECK(c->n_tokens >= 1 && c->n_tokens <= MAX_OUT);
    r->n_tokens = PLLM_MIN(c->n_tokens, MAX_OUT);
    memcpy(r->tokens, c->token_ids, (size_t)r->n_tokens * sizeof *r->tokens);
    r->finish = c->finish;
    r->have_logprobs = c->logprobs != NULL;
    r->top_n = c->top_n;
    if (c->logprobs) {
        CHECK(c->top_n >= 1 && c->top_n <= 3);
        memcpy(r->logprobs, c->logprobs, (size_t)r->n_tokens * sizeof(float));
        memcpy(r->top_ids, c->top_ids, (size_t)r->n_tokens * (size_t)c->top_n * sizeof(int32_t));
        memcpy(r->top_lps, c->top_logprobs, (size_t)r->n_tokens * (size_t)c->top_n * sizeof(float));
    }
    r->prompt_tokens = c->prompt_tokens;
    r->cached_tokens = c->cached_tokens;
    r->times_ok =
        c->t_arrival > 0 && c->t_arrival <= c->t_first_token && c->t_first_token <= c->t_finish;
    CHECK(c->text != NULL && c->text_len == 0); /* no tokenizer: no text */
    CHECK(c->error == NULL && c->finish != PLLM_FINISH_ERROR);
    rs->sum_prompt += c->prompt_tokens;
    rs->sum_cached += c->cached_tokens;
}

/* The fake model run alone: the reference every completion is compared with. */
static void simulate(const wreq *q, int32_t index, int32_t ctx_limit, result *out)
{
    int32_t ctx[MAX_PROMPT + MAX_OUT];
    memcpy(ctx, q->prompt, (size_t)q->n_prompt * sizeof *ctx);
    int32_t n = q->n_prompt;
    const pllm_request_params *p = &q->params;
    memset(out, 0, sizeof *out);
    out->finish = PLLM_FINISH_LENGTH;
    for (;;) {
        int32_t n_out = n - q->n_prompt;
        bool ban = n_out < p->min_tokens;
        float lp;
        int32_t t = fake_next_token(ctx, n, p->sampling.seed + (uint64_t)index,
                                    ban ? p->stop_ids : NULL, ban ? p->n_stop_ids : 0, VOCAB, &lp);
        ctx[n++] = t;
        out->tokens[n_out] = t;
        out->logprobs[n_out] = lp;
        if (p->sampling.logprobs > 0)
            fake_top(t, lp, p->sampling.logprobs, VOCAB,
                     out->top_ids + n_out * p->sampling.logprobs,
                     out->top_lps + n_out * p->sampling.logprobs);
        out->n_tokens = ++n_out;
        bool stop_id = false;
        for (int32_t i = 0; i < p->n_stop_ids; i++) stop_id |= p->stop_ids[i] == t;
        if (n_out >= p->min_tokens && stop_id) {
            out->finish = PLLM_FINISH_STOP;
            return;
        }
        if (n_out >= p->max_tokens || n >= ctx_limit) return;
    }
}

static uint64_t rnd(uint64_t *s, uint64_t n)
{
    return pllm_test_rand(s) % n;
}

static void make_workload(workload *w, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    memset(w, 0, sizeof *w);
    static const int32_t sizes[] = {1, 2, 3, 4, 8, 16};
    w->block_size = sizes[rnd(&s, 6)];
    w->n_req = 1 + (int32_t)rnd(&s, MAX_REQ);
    int32_t bases[3][48];
    for (int32_t b = 0; b < 3; b++)
        for (int32_t i = 0; i < 48; i++) bases[b][i] = (int32_t)rnd(&s, VOCAB);
    int32_t max_need = 0, max_prompt = 0;
    for (int32_t r = 0; r < w->n_req; r++) {
        wreq *q = &w->reqs[r];
        if (r > 0 && rnd(&s, 6) == 0) {
            *q = w->reqs[rnd(&s, (uint64_t)r)]; /* an identical prompt */
        } else {
            int32_t n = 0;
            if (rnd(&s, 3) != 0) {
                int32_t b = (int32_t)rnd(&s, 3), cut = (int32_t)rnd(&s, 49);
                memcpy(q->prompt, bases[b], (size_t)cut * sizeof(int32_t));
                n = cut;
            }
            int32_t extra = (int32_t)rnd(&s, 17);
            for (int32_t i = 0; i < extra; i++) q->prompt[n++] = (int32_t)rnd(&s, VOCAB);
            if (n == 0) q->prompt[n++] = (int32_t)rnd(&s, VOCAB);
            q->n_prompt = n;
        }
        pllm_request_params *p = &q->params;
        pllm_request_params_defaults(p);
        p->max_tokens = 1 + (int32_t)rnd(&s, 24);
        p->min_tokens = (int32_t)rnd(&s, (uint64_t)PLLM_MIN(4, p->max_tokens + 1));
        p->n_stop_ids = (int32_t)rnd(&s, 3);
        for (int32_t i = 0; i < p->n_stop_ids; i++) p->stop_ids[i] = (int32_t)rnd(&s, VOCAB);
        p->ignore_eos = rnd(&s, 2);
        p->n = rnd(&s, 10) < 7 ? 1 : 2 + (int32_t)rnd(&s, MAX_N - 1);
        p->has_seed = true;
        p->sampling.seed = pllm_test_rand(&s);
        p->sampling.logprobs = rnd(&s, 10) < 7 ? 0 : 1 + (int32_t)rnd(&s, 3);
        /* penalties (the fake ignores their values): overlapped steps sampling such a request
         * wait for its token in flight (the history is on the host) */
        if ((seed + (uint64_t)r) % 4 == 0) p->sampling.presence_penalty = 0.5f;
        q->add_at_step = rnd(&s, 2) ? 0 : (int32_t)rnd(&s, 12);
        max_need = PLLM_MAX(max_need, q->n_prompt + p->max_tokens);
        max_prompt = PLLM_MAX(max_prompt, q->n_prompt);
    }
    /* KV: usually tight (preemption), sometimes too small for the longest prompt (refusal) */
    int32_t bs = w->block_size;
    int32_t lo = (max_prompt + 1 + bs - 1) / bs, hi = (max_need + bs - 1) / bs * 3;
    if (rnd(&s, 10) == 0) lo = PLLM_MAX(1, lo / 2);
    w->n_blocks = lo + (int32_t)rnd(&s, (uint64_t)(hi - lo + 1));
    w->max_model_len = rnd(&s, 4) == 0 ? 8 + (int32_t)rnd(&s, 60) : 0;
}

/* Collides constantly: only the stored tokens and parent tell blocks apart. */
static uint64_t weak_hash(uint64_t parent, const int32_t *t, int32_t n, uint64_t extra, void *arg)
{
    (void)parent, (void)extra, (void)arg;
    return n > 0 ? (uint64_t)(t[0] & 1) : 0;
}

/* Read every waiting request's queue position; check the queue is sorted and holds exactly the
 * requests the model believes are waiting. */
static void snapshot(pllm_engine *e, run_state *rs, const bool *accepted)
{
    bool seen[MAX_REQ][MAX_N] = {{0}};
    const pllm_req *prev = NULL;
    for (const pllm_req *x = pllm_sched_waiting_head(pllm_engine_sched(e)); x; x = x->w_next) {
        int32_t r = rs->req_of_id[x->id];
        CHECK(!prev || pllm_order_lt(prev->order, x->order));
        rs->order[r][x->index] = x->order;
        seen[r][x->index] = true;
        prev = x;
    }
    for (int32_t r = 0; r < rs->w->n_req; r++)
        for (int32_t k = 0; accepted[r] && k < rs->w->reqs[r].params.n; k++)
            if (seen[r][k] != rs->waiting[r][k]) {
                CHECK(seen[r][k] == rs->waiting[r][k]);
                fprintf(stderr, "  request %d.%d: %s the waiting queue, expected %s\n", r, k,
                        seen[r][k] ? "in" : "not in", rs->waiting[r][k] ? "waiting" : "not");
            }
    /* labels are unique among waiting and running requests (a preempted one returns to its own
     * place), and running requests are in label order */
    int32_t n_run;
    pllm_req *const *run = pllm_sched_running(pllm_engine_sched(e), &n_run);
    for (int32_t i = 0; i < n_run; i++) {
        CHECK(i == 0 || pllm_order_lt(run[i - 1]->order, run[i]->order));
        for (const pllm_req *x = pllm_sched_waiting_head(pllm_engine_sched(e)); x; x = x->w_next)
            CHECK(!pllm_label_eq(x->order, run[i]->order));
    }
}

static void overtake(run_state *rs, int32_t r, int32_t k, int32_t by, int32_t max_bypass,
                     totals *tot)
{
    rs->overtaken[r][k] += by;
    CHECK(rs->overtaken[r][k] <= max_bypass);
    tot->max_overtaken = PLLM_MAX(tot->max_overtaken, rs->overtaken[r][k]);
}

typedef struct variant {
    bool prefix_cache;
    bool weak_hash;
    int32_t max_batched_tokens, max_seqs, max_bypass;
    pllm_evict_policy eviction;
    int32_t label_bits;
    pllm_spec_mode speculate;
    bool oracle; /* speculation's proposals from the oracle below */
    int32_t spec_max_draft;
    bool overlap; /* one step in flight (engine.h pllm_overlap_mode), on the fake's submit/wait */
    bool no_pending_history; /* the fake declares it cannot resolve pending penalty histories */
    int32_t window;          /* > 0: sliding-window layers (the hybrid KV layout) */
    int32_t n_blocks_sw;     /* their pool */
} variant;

/* The oracle proposer (speculation): the fake model's true continuation, with each draft
 * replaced by a wrong token with probability 1/4 (wrong_rate), and a random length. */
typedef struct oracle {
    const workload *w;
    const int32_t *req_of_id;
    uint64_t rng;
    int64_t calls;
} oracle;

static int32_t oracle_propose(void *arg, uint64_t req_id, int32_t index, const int32_t *toks,
                              int32_t n, int32_t *draft, int32_t k)
{
    oracle *o = arg;
    o->calls++;
    const wreq *q = &o->w->reqs[o->req_of_id[req_id]];
    int32_t ctx[MAX_PROMPT + MAX_OUT + PLLM_SPEC_MAX_DRAFT];
    if (n > MAX_PROMPT + MAX_OUT) return 0;
    memcpy(ctx, toks, (size_t)n * sizeof *ctx);
    int32_t m = (int32_t)(pllm_test_rand(&o->rng) % (uint64_t)(k + 1));
    for (int32_t j = 0; j < m; j++) {
        float lp;
        int32_t t = fake_next_token(ctx, n + j, q->params.sampling.seed + (uint64_t)index, NULL, 0,
                                    VOCAB, &lp);
        if (pllm_test_rand(&o->rng) % 4 == 0)
            t = (t + 1 + (int32_t)(pllm_test_rand(&o->rng) % 5)) % VOCAB;
        ctx[n + j] = draft[j] = t;
    }
    return m;
}

/* The best achievable cached prompt tokens over the accepted requests (engine.h), by brute
 * force: for each distinct block prefix, the prompts that can reuse it and those that hold it
 * but cannot. */
static int64_t reference_best(const workload *w, const bool *accepted, bool cache)
{
    int32_t bs = w->block_size;
    int64_t best = 0;
    for (int32_t r = 0; r < w->n_req; r++) {
        if (!accepted[r]) continue;
        const wreq *q = &w->reqs[r];
        if (!cache) {
            best += (int64_t)(q->params.n - 1) * ((q->n_prompt - 1) / bs) * bs;
            continue;
        }
        for (int32_t i = 0; i < q->n_prompt / bs; i++) {
            int32_t len = (i + 1) * bs;
            /* count each distinct prefix once: at its first holder */
            bool first = true;
            for (int32_t r2 = 0; r2 < r && first; r2++)
                if (accepted[r2] && w->reqs[r2].n_prompt >= len &&
                    !memcmp(w->reqs[r2].prompt, q->prompt, (size_t)len * sizeof(int32_t)))
                    first = false;
            if (!first) continue;
            int64_t hitters = 0, others = 0;
            for (int32_t r2 = r; r2 < w->n_req; r2++) {
                const wreq *q2 = &w->reqs[r2];
                if (!accepted[r2] || q2->n_prompt < len ||
                    memcmp(q2->prompt, q->prompt, (size_t)len * sizeof(int32_t)))
                    continue;
                if (i < (q2->n_prompt - 1) / bs)
                    hitters += q2->params.n;
                else
                    others += q2->params.n;
            }
            if (hitters > 0) best += (hitters - (others ? 0 : 1)) * bs;
        }
    }
    return best;
}

static void run_variant(const workload *w, const variant *v, uint64_t seed, totals *tot)
{
    pllm_model model = {0};
    model.cfg.n_vocab = VOCAB;
    model.cfg.n_ctx_train = 1000;
    model.identity = 0xabcdef;
    fake_backend_params fp = {.n_vocab = VOCAB,
                              .max_batched_tokens = v->max_batched_tokens,
                              .max_seqs = v->max_seqs,
                              .no_pending_history = v->no_pending_history,
                              .window = v->window,
                              .n_layer = v->window ? 6 : 0,
                              .n_layer_sw = v->window ? 5 : 0};
    pllm_backend be = {0};
    CHECK_OK(fake_backend_create(&be, &fp));
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.block_size = w->block_size;
    ep.n_blocks = w->n_blocks;
    ep.max_batched_tokens = v->max_batched_tokens;
    ep.max_seqs = v->max_seqs;
    ep.max_bypass = v->max_bypass;
    ep.max_model_len = w->max_model_len;
    ep.no_prefix_cache = !v->prefix_cache;
    ep.eviction = v->eviction;
    ep.speculate = v->speculate;
    ep.spec_max_draft = v->spec_max_draft;
    ep.overlap = v->overlap ? PLLM_OVERLAP_ON : PLLM_OVERLAP_OFF;
    ep.n_blocks_sw = v->n_blocks_sw;
    run_state *rs = pllm_calloc(1, sizeof *rs);
    oracle orc = {.w = w, .req_of_id = rs->req_of_id, .rng = seed ^ 0x77};
    pllm_engine *e = NULL;
    pllm_engine_hooks hooks = {.block_hash = v->weak_hash ? weak_hash : NULL,
                               .label_bits = v->label_bits};
    if (v->oracle) {
        hooks.propose = oracle_propose;
        hooks.propose_arg = &orc;
    }
    CHECK_OK(pllm_engine_create_hooked(&e, &model, &be, NULL, &ep, &hooks));
    if (!e) {
        pllm_backend_free(&be);
        free(rs);
        return;
    }
    int32_t ctx_limit = pllm_engine_ctx_limit(e);
    CHECK(ctx_limit ==
          PLLM_MIN(w->max_model_len ? w->max_model_len : 1000, w->n_blocks * w->block_size));
    const pllm_block_pool *pool = pllm_kv_pool(pllm_engine_kv(e));
    const pllm_block_pool *sw_pool = pllm_kv_sw_pool(pllm_engine_kv(e));
    CHECK((sw_pool != NULL) ==
          (v->window > 0 && v->window < (w->max_model_len ? w->max_model_len : 1000)));

    rs->w = w;
    bool added[MAX_REQ] = {0}, accepted[MAX_REQ] = {0};
    int32_t n_added = 0, n_accepted = 0;
    int64_t plan_preemptions = 0;
    for (int32_t step = 0;; step++) {
        /* arrivals before this step (all pending ones when the engine is idle) */
        bool idle = !pllm_engine_has_work(e);
        for (int32_t r = 0; r < w->n_req; r++) {
            const wreq *q = &w->reqs[r];
            if (added[r] || (q->add_at_step > step && !idle)) continue;
            uint64_t id = 0;
            pllm_status st = pllm_engine_add(e, q->prompt, q->n_prompt, &q->params, (void *)q, &id);
            added[r] = true;
            n_added++;
            if (q->n_prompt + 1 > ctx_limit) {
                CHECK(st == PLLM_ERR_RANGE);
                tot->refused++;
                continue;
            }
            CHECK_OK(st);
            if (st != PLLM_OK) continue;
            CHECK(id == (uint64_t)n_accepted);
            rs->req_of_id[id] = r;
            accepted[r] = true;
            n_accepted++;
            /* each new completion overtakes the waiting requests queued behind it (prefix
             * grouping places it before the tail) */
            for (int32_t x = 0; x < q->params.n; x++) rs->waiting[r][x] = true;
            snapshot(e, rs, accepted);
            for (int32_t x = 0; x < q->params.n; x++) {
                for (int32_t r2 = 0; r2 < w->n_req; r2++)
                    for (int32_t k2 = 0; accepted[r2] && k2 < w->reqs[r2].params.n; k2++)
                        if (rs->waiting[r2][k2] && !(r2 == r && k2 >= x) &&
                            pllm_order_lt(rs->order[r][x], rs->order[r2][k2]))
                            overtake(rs, r2, k2, 1, v->max_bypass, tot);
            }
        }
        if (!pllm_engine_has_work(e)) {
            if (n_added == w->n_req) break;
            continue;
        }
        if (step == 0 && n_added == w->n_req) {
            /* everything is known before the first step: the plan's best achievable hit */
            pllm_engine_plan_stats ps;
            pllm_engine_get_plan_stats(e, &ps);
            int64_t want = reference_best(w, accepted, v->prefix_cache);
            CHECK(ps.best_cached_tokens == want && ps.exact);
            if (ps.best_cached_tokens != want)
                fprintf(stderr, "  best achievable %lld, reference %lld\n",
                        (long long)ps.best_cached_tokens, (long long)want);
            tot->best_checked++;
        }
        snapshot(e, rs, accepted);
        pllm_status st = pllm_engine_step(e, on_done, rs);
        CHECK_OK(st);
        if (st != PLLM_OK) break;
        if (step > 100000) {
            CHECK(!"engine does not finish");
            break;
        }
        /* the plan (overlapped: the last call may only have finished the step in flight) */
        const pllm_sched_out *o = pllm_engine_last_plan(e);
        bool ran = !v->overlap || o->n_entries > 0;
        CHECK(!ran || (o->n_entries >= 1 && o->n_entries <= v->max_seqs));
        CHECK(!ran || (o->n_tokens >= 1 && o->n_tokens <= v->max_batched_tokens));
        int32_t sum = 0;
        for (int32_t i = 0; i < o->n_entries; i++) sum += o->entries[i].n_new;
        CHECK(sum == o->n_tokens);
        plan_preemptions += o->n_preempted;
        for (int32_t i = 0; i < o->n_preempted; i++) {
            int32_t r = rs->req_of_id[o->preempted[i].req_id], k = o->preempted[i].index;
            CHECK(!rs->waiting[r][k]);
            /* overlapped: it may have finished in the same call (its step was in flight) */
            rs->waiting[r][k] = rs->res[r][k].n_emitted == 0;
            rs->overtaken[r][k] = 0;
        }
        /* admissions and overtaking (independent of the scheduler's own counter) */
        for (int32_t i = 0; i < o->n_entries; i++) {
            const pllm_sched_entry *en = &o->entries[i];
            int32_t r = rs->req_of_id[en->req_id], k = en->index;
            if (rs->waiting[r][k] != en->admitted) {
                CHECK(rs->waiting[r][k] == en->admitted);
                fprintf(stderr,
                        "  step %d: request %d.%d admitted %d, waiting %d, req %p, emitted %d\n",
                        step, r, k, en->admitted, rs->waiting[r][k], (void *)en->req,
                        rs->res[r][k].n_emitted);
            }
            if (en->admitted && !v->prefix_cache && en->n_hit > 0) tot->forks++;
        }
        /* a request still waiting is overtaken by each admitted one queued behind it */
        for (int32_t r = 0; r < w->n_req; r++) {
            if (!accepted[r]) continue;
            for (int32_t k = 0; k < w->reqs[r].params.n; k++) {
                if (!rs->waiting[r][k] || o->n_preempted > 0) continue;
                bool admitted_now = false;
                int32_t over = 0;
                for (int32_t i = 0; i < o->n_entries; i++) {
                    const pllm_sched_entry *en = &o->entries[i];
                    if (!en->admitted) continue;
                    int32_t r2 = rs->req_of_id[en->req_id], k2 = en->index;
                    if (r2 == r && k2 == k)
                        admitted_now = true;
                    else if (pllm_order_lt(rs->order[r][k], rs->order[r2][k2]))
                        over++;
                }
                if (!admitted_now) overtake(rs, r, k, over, v->max_bypass, tot);
            }
        }
        for (int32_t i = 0; i < o->n_entries; i++) {
            const pllm_sched_entry *en = &o->entries[i];
            rs->waiting[rs->req_of_id[en->req_id]][en->index] = false;
        }
        /* overlapped: a request preempted while its last step was in flight may finish from the
         * waiting queue */
        for (int32_t r = 0; r < w->n_req; r++)
            for (int32_t k = 0; k < MAX_N; k++)
                if (rs->res[r][k].n_emitted > 0) rs->waiting[r][k] = false;
        CHECK_OK(pllm_block_pool_check(pool, true));
        CHECK_OK(pllm_plan_check(pllm_engine_plan(e)));
        if (sw_pool) { /* every running sequence holds no sliding block before its window */
            CHECK_OK(pllm_block_pool_check(sw_pool, true));
            int32_t n_run;
            pllm_req *const *run = pllm_sched_running(pllm_engine_sched(e), &n_run);
            for (int32_t i = 0; i < n_run; i++) {
                const pllm_kv_table *t = &run[i]->table;
                int32_t lo = PLLM_MAX(0, run[i]->n_computed + 1 - v->window) / w->block_size;
                /* a leader of forks keeps their window, at most one block more (kv_manager.h
                 * pllm_kv_hold_sliding) */
                const bool hold = t->sw_hold_on && PLLM_MIN(lo, t->n) - t->sw_hold <= 1;
                if (hold) lo = PLLM_MIN(lo, t->sw_hold);
                if (hold) tot->sw_holds++;
                CHECK(t->sw_lo == PLLM_MIN(lo, t->n));
                for (int32_t b = 0; b < t->n; b++) CHECK((t->sw[b] >= 0) == (b >= t->sw_lo));
                /* ceil(window / bs) + 1, plus the blocks of positions not computed yet */
                int32_t ahead = t->n - (run[i]->n_computed + w->block_size - 1) / w->block_size;
                CHECK(pllm_kv_sw_held(t) <= (v->window + w->block_size - 1) / w->block_size + 1 +
                                                PLLM_MAX(0, ahead) + hold);
                tot->sw_max_held = PLLM_MAX(tot->sw_max_held, pllm_kv_sw_held(t));
            }
        }
        tot->steps++;
        if (pllm_test_failures) break;
    }

    /* results against the reference */
    pllm_engine_stats es;
    pllm_engine_get_stats(e, &es);
    CHECK(es.preemptions == plan_preemptions);
    tot->spec_drafted += es.spec_drafted;
    tot->spec_accepted += es.spec_accepted;
    if (v->speculate == PLLM_SPEC_OFF) CHECK(es.spec_drafted == 0);
    tot->preemptions += es.preemptions;
    tot->grouped += pllm_sched_n_grouped(pllm_engine_sched(e));
    tot->relabels += pllm_sched_n_relabels(pllm_engine_sched(e));
    int64_t n_completions = 0;
    for (int32_t r = 0; r < w->n_req; r++) {
        if (!accepted[r]) continue;
        const wreq *q = &w->reqs[r];
        for (int32_t k = 0; k < q->params.n; k++) {
            result want;
            simulate(q, k, ctx_limit, &want);
            const result *got = &rs->res[r][k];
            n_completions++;
            CHECK(got->n_emitted == 1);
            bool same = got->n_tokens == want.n_tokens && got->finish == want.finish &&
                        !memcmp(got->tokens, want.tokens, (size_t)want.n_tokens * sizeof(int32_t));
            CHECK(same);
            if (!same) {
                fprintf(stderr, "  workload %llu req %d.%d: got %d tokens (%s), want %d (%s)\n",
                        (unsigned long long)seed, r, k, got->n_tokens,
                        pllm_finish_reason_str(got->finish), want.n_tokens,
                        pllm_finish_reason_str(want.finish));
            }
            int32_t lp = q->params.sampling.logprobs;
            CHECK(got->have_logprobs == (lp > 0));
            if (lp > 0 && same) {
                CHECK(got->top_n == lp);
                CHECK(!memcmp(got->logprobs, want.logprobs, (size_t)want.n_tokens * sizeof(float)));
                CHECK(!memcmp(got->top_ids, want.top_ids,
                              (size_t)(want.n_tokens * lp) * sizeof(int32_t)));
                CHECK(!memcmp(got->top_lps, want.top_lps,
                              (size_t)(want.n_tokens * lp) * sizeof(float)));
            }
            CHECK(got->prompt_tokens == q->n_prompt);
            CHECK(got->cached_tokens >= 0 && got->cached_tokens < q->n_prompt);
            CHECK(got->times_ok);
            if (got->finish == PLLM_FINISH_STOP)
                tot->finish_stop++;
            else
                tot->finish_length++;
        }
    }
    tot->completions += n_completions;
    tot->cached_tokens += rs->sum_cached;
    CHECK(es.requests_finished == n_completions && es.requests_failed == 0);
    CHECK(es.prompt_tokens == rs->sum_prompt && es.prompt_tokens_cached == rs->sum_cached);
    /* without preemption every prompt token is either cached at admission or computed once */
    if (es.preemptions == 0)
        CHECK(es.prompt_tokens_computed + es.prompt_tokens_cached == es.prompt_tokens);
    if (!v->prefix_cache) CHECK(rs->sum_cached == 0 || tot->forks > 0);
    CHECK(es.peak_blocks_used <= w->n_blocks && es.n_blocks == w->n_blocks &&
          es.block_size == w->block_size);
    /* the pool is whole */
    CHECK(!pllm_engine_has_work(e));
    CHECK(pllm_block_pool_n_free(pool) == w->n_blocks);
    pllm_block_pool_stats ps;
    pllm_block_pool_get_stats(pool, &ps);
    CHECK(ps.n_orphan_drops == 0 && ps.n_leaf_redirects == 0);
    if (!v->prefix_cache) CHECK(ps.n_indexed == 0);
    /* the plan: every prompt counted, the trie empty again */
    pllm_engine_plan_stats pst;
    pllm_engine_get_plan_stats(e, &pst);
    CHECK(pst.requests == n_completions && pst.prompt_tokens == es.prompt_tokens);
    CHECK(pst.blocks_recomputed <= pst.blocks_computed);
    pllm_plan_stats pls;
    pllm_plan_get_stats(pllm_engine_plan(e), &pls);
    CHECK(pls.live_nodes == 0);
    if (v->eviction == PLLM_EVICT_FUTURE) tot->future_runs++;
    CHECK_OK(pllm_block_pool_check(pool, true));
    fake_backend_stats fs;
    fake_backend_get_stats(&be, &fs);
    if (sw_pool) {
        CHECK(pllm_block_pool_n_free(sw_pool) == v->n_blocks_sw &&
              es.n_blocks_sw == v->n_blocks_sw);
        CHECK(fs.n_blocks_sw == v->n_blocks_sw && es.peak_blocks_used_sw <= v->n_blocks_sw);
        CHECK_OK(pllm_block_pool_check(sw_pool, true));
        tot->sw_runs++;
        tot->sw_checked += fs.sw_checked;
        tot->sw_preemptions += es.preemptions;
        tot->sw_cached_tokens += rs->sum_cached;
    } else {
        CHECK(fs.n_blocks_sw == 0 && es.n_blocks_sw == 0);
    }
    CHECK(fs.max_step_tokens <= v->max_batched_tokens && fs.max_step_seqs <= v->max_seqs);
    CHECK(fs.steps == es.steps);
    CHECK(es.overlap == v->overlap);
    CHECK(es.steps_sync + es.steps_overlapped == es.steps);
    if (!v->overlap || v->speculate != PLLM_SPEC_OFF) CHECK(es.steps_overlapped == 0);
    if (v->overlap && v->speculate == PLLM_SPEC_OFF) {
        tot->overlapped_steps += es.steps_overlapped;
        tot->wasted_slots += es.wasted_slots;
        tot->sync_penalties += es.sync_penalties;
        tot->pending_penalty += es.pending_penalty_samples;
        if (v->no_pending_history) CHECK(es.pending_penalty_samples == 0);
        if (!v->no_pending_history) CHECK(es.sync_penalties == 0);
    }
    if (pllm_test_failures)
        fprintf(stderr,
                "  failing workload: seed %llu (bs %d, %d blocks, budget %d, seqs %d, bypass %d, "
                "cache %d)\n",
                (unsigned long long)seed, w->block_size, w->n_blocks, v->max_batched_tokens,
                v->max_seqs, v->max_bypass, (int)v->prefix_cache);
    free(rs);
    pllm_engine_free(e);
    pllm_backend_free(&be);
    tot->runs++;
}

/* Lexicographic token order, a prompt before its extensions. */
static int cmp_prompts(const wreq *a, const wreq *b)
{
    int32_t n = PLLM_MIN(a->n_prompt, b->n_prompt);
    for (int32_t i = 0; i < n; i++)
        if (a->prompt[i] != b->prompt[i]) return a->prompt[i] < b->prompt[i] ? -1 : 1;
    return a->n_prompt < b->n_prompt ? -1 : a->n_prompt > b->n_prompt;
}

static void run_sorted(const workload *w, pllm_evict_policy eviction, totals *tot)
{
    int32_t order[MAX_REQ], n = 0, bs = w->block_size, need = 1;
    for (int32_t r = 0; r < w->n_req; r++) {
        int32_t j = n++;
        while (j > 0 && cmp_prompts(&w->reqs[r], &w->reqs[order[j - 1]]) < 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = r;
        need = PLLM_MAX(need, (w->reqs[r].n_prompt + 1 + bs - 1) / bs);
    }
    pllm_model model = {0};
    model.cfg.n_vocab = VOCAB;
    model.cfg.n_ctx_train = 1000;
    model.identity = 0xabcdef;
    fake_backend_params fp = {.n_vocab = VOCAB};
    pllm_backend be = {0};
    CHECK_OK(fake_backend_create(&be, &fp));
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.block_size = bs;
    ep.n_blocks = need; /* the smallest cache that admits every request */
    ep.max_seqs = 1;
    ep.max_batched_tokens = 7;
    ep.eviction = eviction;
    pllm_engine_hooks hooks = {.no_grouping = true};
    pllm_engine *e = NULL;
    CHECK_OK(pllm_engine_create_hooked(&e, &model, &be, NULL, &ep, &hooks));
    if (!e) {
        pllm_backend_free(&be);
        return;
    }
    for (int32_t i = 0; i < n; i++) {
        const wreq *q = &w->reqs[order[i]];
        CHECK_OK(pllm_engine_add(e, q->prompt, q->n_prompt, &q->params, NULL, NULL));
    }
    while (pllm_engine_has_work(e)) {
        pllm_status st = pllm_engine_step(e, NULL, NULL);
        CHECK_OK(st);
        if (st != PLLM_OK) break;
    }
    pllm_engine_plan_stats ps;
    pllm_engine_get_plan_stats(e, &ps);
    pllm_engine_stats es;
    pllm_engine_get_stats(e, &es);
    CHECK(es.preemptions == 0 && ps.finished_requests == ps.requests);
    CHECK(ps.finished_cached_tokens >= ps.best_cached_tokens);
    if (ps.finished_cached_tokens < ps.best_cached_tokens)
        fprintf(stderr, "  sorted, one at a time, %d blocks: cached %lld < best %lld\n", need,
                (long long)ps.finished_cached_tokens, (long long)ps.best_cached_tokens);
    tot->sorted_runs++;
    if (ps.finished_cached_tokens > ps.best_cached_tokens) tot->sorted_beyond++;
    pllm_engine_free(e);
    pllm_backend_free(&be);
}

int main(int argc, char **argv)
{
    int32_t n_workloads = argc > 1 ? atoi(argv[1]) : 3000;
    uint64_t first = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    totals tot = {0};
    double t0 = pllm_now();
    static const int32_t bypass[] = {0, 1, 2, 5, 64};
    for (uint64_t seed = first; seed < first + (uint64_t)n_workloads; seed++) {
        workload w;
        make_workload(&w, seed);
        uint64_t s = seed ^ 0x5555;
        for (int32_t pass = 0; pass < 2; pass++) {
            variant v = {
                .prefix_cache = pass == 0,
                .weak_hash = seed % 3 == 0,
                .max_batched_tokens = 1 + (int32_t)rnd(&s, 64),
                .max_seqs = 1 + (int32_t)rnd(&s, 8),
                .max_bypass = bypass[rnd(&s, 5)],
                .eviction = rnd(&s, 2) ? PLLM_EVICT_FUTURE : PLLM_EVICT_LRU,
                .label_bits = rnd(&s, 2) ? 2 : 0, /* 2: respacing all the time */
            };
            /* speculation: off, the oracle's drafts, prompt lookup, auto */
            uint64_t sp = rnd(&s, 8);
            v.speculate = sp < 2   ? PLLM_SPEC_OFF
                          : sp < 6 ? PLLM_SPEC_PROMPT_LOOKUP
                          : sp < 7 ? PLLM_SPEC_PROMPT_LOOKUP
                                   : PLLM_SPEC_AUTO;
            v.oracle = sp >= 2 && sp < 6;
            v.spec_max_draft = 1 + (int32_t)rnd(&s, 6);
            if (v.speculate != PLLM_SPEC_OFF) tot.spec_runs++;
            /* half the runs keep one step in flight (speculating ones fall back to sync) */
            v.overlap = (seed + (uint64_t)pass) % 2 == 1;
            v.no_pending_history = seed % 4 < 2;
            tot.overlap_runs += v.overlap && v.speculate == PLLM_SPEC_OFF;
            run_variant(&w, &v, seed, &tot);
            if (pllm_test_failures) break;
        }
        if (pllm_test_failures) break;
        { /* the hybrid KV layout: sliding-window layers with their own, tight pool */
            uint64_t s2 = seed ^ 0x3c3c;
            static const int32_t windows[] = {1, 2, 3, 5, 8, 13, 24};
            variant v = {
                .prefix_cache = rnd(&s2, 3) != 0,
                .weak_hash = seed % 3 == 0,
                .max_batched_tokens = 1 + (int32_t)rnd(&s2, 64),
                .max_seqs = 1 + (int32_t)rnd(&s2, 8),
                .max_bypass = bypass[rnd(&s2, 5)],
                .eviction = rnd(&s2, 2) ? PLLM_EVICT_FUTURE : PLLM_EVICT_LRU,
                .window = windows[rnd(&s2, 7)],
                .overlap = rnd(&s2, 2),
                .no_pending_history = rnd(&s2, 2),
            };
            uint64_t sp = rnd(&s2, 4);
            v.speculate = sp < 2 ? PLLM_SPEC_OFF : PLLM_SPEC_PROMPT_LOOKUP;
            v.oracle = sp == 2;
            v.spec_max_draft = 1 + (int32_t)rnd(&s2, 6);
            /* the engine's minimum (a window and one block: chunks get shortened to what the
             * pool takes) or its preferred floor (a window and a step's tokens), a few blocks
             * more at most */
            int32_t bs = w.block_size;
            int32_t pref = (v.window + v.max_batched_tokens + bs - 1) / bs + 1;
            int32_t min_sw = PLLM_MIN(
                rnd(&s2, 2) ? PLLM_MIN((v.window + bs - 1) / bs + 2, pref) : pref, w.n_blocks);
            v.n_blocks_sw = min_sw + (int32_t)rnd(&s2, 4);
            run_variant(&w, &v, seed, &tot);
        }
        if (pllm_test_failures) break;
        run_sorted(&w, rnd(&s, 2) ? PLLM_EVICT_FUTURE : PLLM_EVICT_LRU, &tot);
        tot.workloads++;
        if (pllm_test_failures) break;
    }
    fprintf(
        stderr,
        "engine_sched_random: %lld workloads, %lld runs, %lld completions (%lld stop, %lld "
        "length), %lld steps, "
        "%lld preemptions, %lld prompts refused, %lld cached prompt tokens, %lld forks without "
        "the cache, "
        "%lld grouped, max overtaken %lld, %lld best-hit checks, %lld runs with FUTURE eviction, "
        "%lld label respacings, %lld sorted one-at-a-time runs reaching the best hit (%lld beyond "
        "it), %.2f s\n",
        (long long)tot.workloads, (long long)tot.runs, (long long)tot.completions,
        (long long)tot.finish_stop, (long long)tot.finish_length, (long long)tot.steps,
        (long long)tot.preemptions, (long long)tot.refused, (long long)tot.cached_tokens,
        (long long)tot.forks, (long long)tot.grouped, (long long)tot.max_overtaken,
        (long long)tot.best_checked, (long long)tot.future_runs, (long long)tot.relabels,
        (long long)tot.sorted_runs, (long long)tot.sorted_beyond, pllm_now() - t0);
    CHECK(tot.preemptions > 0 && tot.refused > 0 && tot.cached_tokens > 0 && tot.forks > 0 &&
          tot.grouped > 0 && tot.best_checked > 0 && tot.future_runs > 0 && tot.relabels > 0 &&
          tot.sorted_runs == tot.workloads);
    CHECK(tot.finish_stop > 0 && tot.finish_length > 0);
    fprintf(stderr,
            "engine_sched_random: %lld runs overlapped: %lld steps queued while another ran, "
            "%lld rows computed for sequences already finished, %lld penalty samples read a "
            "pending token, %lld steps waited for one (no_pending_history)\n",
            (long long)tot.overlap_runs, (long long)tot.overlapped_steps,
            (long long)tot.wasted_slots, (long long)tot.pending_penalty,
            (long long)tot.sync_penalties);
    CHECK(tot.overlap_runs > 0 && tot.overlapped_steps > 0 && tot.wasted_slots > 0 &&
          tot.sync_penalties > 0 && tot.pending_penalty > 0);
    fprintf(stderr, "engine_sched_random: %lld runs speculating: %lld drafts, %lld accepted\n",
            (long long)tot.spec_runs, (long long)tot.spec_drafted, (long long)tot.spec_accepted);
    CHECK(tot.spec_runs > 0 && tot.spec_accepted > 0 && tot.spec_accepted < tot.spec_drafted);
    fprintf(stderr,
            "engine_sched_random: %lld runs with a sliding pool: %lld window positions checked, "
            "%lld preemptions, %lld cached prompt tokens, at most %lld sliding blocks held by one "
            "sequence, %lld sequence-steps holding a window for forks\n",
            (long long)tot.sw_runs, (long long)tot.sw_checked, (long long)tot.sw_preemptions,
            (long long)tot.sw_cached_tokens, (long long)tot.sw_max_held, (long long)tot.sw_holds);
    CHECK(tot.sw_runs > 0 && tot.sw_checked > 0 && tot.sw_preemptions > 0 &&
          tot.sw_cached_tokens > 0 && tot.sw_holds > 0);
    return pllm_test_finish("engine_sched_random");
}

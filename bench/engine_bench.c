/*
 * engine_bench: the engine's own overhead (scheduler, KV manager, block pool, prefix planner,
 * plan building, stop checks) per step, on a null backend that computes nothing, and the
 * prefix-cache hit rate against the best achievable one on workloads whose shared prefixes
 * arrive interleaved.
 *
 *   build/bench/engine_bench [workload] [n_requests] [n_blocks] [n_groups] [max_bypass] [policy]
 *                            [order] [window]
 *
 * workload:
 *   groups  (default) each prompt starts with one of n_groups 512-token prefixes, then 32..287
 *           own tokens;
 *   nested  a 32-token system prompt shared by all, then one of n_groups 512-token few-shot
 *           blocks, then 32..287 own tokens (what a chat template with a system prompt gives);
 *   deep    a 3-level tree: 256-token root prefix per n_groups/10 families, 256-token
 *           sub-prefix per group, 32..287 own tokens;
 *   unique  no shared prefix at all (100..1100 tokens each).
 * Each request generates 16..143 tokens. Block size 16, max_seqs 256, budget 8192.
 * policy: lru, future or both (default both: the run is repeated with each eviction policy).
 * order: plan (prefix grouping, the default), fcfs (every request at the tail) or both.
 * window: 0 (default) adds every request before the first step; N > 0 keeps at most N
 * requests in the engine, adding more after each step as `pllm generate --window N` does.
 * The best achievable hit rate is computed here independently (a table of every distinct block
 * prefix) and must equal the engine's plan stats.
 */
#include "engine/engine.h"
#include "engine/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define VOCAB 32000
#define BS    16

static pllm_status null_layout(void *c, int32_t bs, pllm_kv_layout *out)
{
    (void)c;
    *out = (pllm_kv_layout){
        .n_layer = 1, .n_head_kv = 1, .head_dim = 1, .block_size = bs, .dtype = PLLM_DTYPE_F32};
    return PLLM_OK;
}
static pllm_status null_avail(void *c, size_t *b)
{
    (void)c;
    *b = (size_t)1 << 30;
    return PLLM_OK;
}
static pllm_status null_init(void *c, const pllm_kv_layout *l)
{
    (void)c, (void)l;
    return PLLM_OK;
}
static pllm_status null_step(void *c, const pllm_batch_plan *pl, pllm_step_out *out)
{
    (void)c;
    for (int32_t k = 0; k < pl->n_samples; k++) {
        const pllm_seq_plan *s = &pl->seqs[pl->samples[k].seq];
        int32_t last = pl->tokens[s->token_start + s->n_new - 1];
        out->tokens[k] =
            (int32_t)(((uint32_t)last * 2654435761u + (uint32_t)s->n_ctx) % (VOCAB - 1)) + 1;
    }
    return PLLM_OK;
}
static void null_destroy(void *c)
{
    (void)c;
}
static const pllm_backend_iface null_iface = {
    .name = "null",
    .kv_layout = null_layout,
    .kv_available = null_avail,
    .kv_init = null_init,
    .step = null_step,
    .destroy = null_destroy,
};

#include <time.h>
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void on_done(const pllm_completion *c, void *arg)
{
    (void)c;
    (*(int64_t *)arg)++;
}

typedef struct workload {
    int32_t n_req;
    int32_t **prompts;
    int32_t *n_prompt;
    int32_t *max_tokens;
} workload;

static void fill(int32_t *t, int32_t n, uint64_t *s)
{
    for (int32_t i = 0; i < n; i++) t[i] = (int32_t)(rng(s) % VOCAB);
}

static int make_workload(workload *w, const char *kind, int32_t n_req, int32_t n_groups)
{
    uint64_t s = 12345;
    int32_t n_fam = n_groups / 10 > 0 ? n_groups / 10 : 1;
    int32_t sys[32], (*fam)[256] = malloc((size_t)n_fam * sizeof *fam);
    int32_t(*grp)[512] = malloc((size_t)n_groups * sizeof *grp);
    int32_t(*fam_of)[1] = malloc((size_t)n_groups * sizeof *fam_of);
    fill(sys, 32, &s);
    for (int32_t f = 0; f < n_fam; f++) fill(fam[f], 256, &s);
    for (int32_t g = 0; g < n_groups; g++) {
        fill(grp[g], 512, &s);
        fam_of[g][0] = g % n_fam;
    }
    w->n_req = n_req;
    w->prompts = calloc((size_t)n_req, sizeof *w->prompts);
    w->n_prompt = calloc((size_t)n_req, sizeof *w->n_prompt);
    w->max_tokens = calloc((size_t)n_req, sizeof *w->max_tokens);
    for (int32_t r = 0; r < n_req; r++) {
        int32_t *p = malloc(2048 * sizeof *p), n = 0;
        int32_t g = (int32_t)(rng(&s) % (uint64_t)n_groups), own = 32 + (int32_t)(rng(&s) % 256);
        if (!strcmp(kind, "groups")) {
            memcpy(p, grp[g], 512 * sizeof *p);
            n = 512;
        } else if (!strcmp(kind, "nested")) {
            memcpy(p, sys, 32 * sizeof *p);
            memcpy(p + 32, grp[g], 512 * sizeof *p);
            n = 544;
        } else if (!strcmp(kind, "deep")) {
            memcpy(p, fam[fam_of[g][0]], 256 * sizeof *p);
            memcpy(p + 256, grp[g], 256 * sizeof *p);
            n = 512;
        } else if (!strcmp(kind, "unique")) {
            own = 100 + (int32_t)(rng(&s) % 1000);
        } else {
            fprintf(stderr, "engine_bench: unknown workload '%s'\n", kind);
            free(p);
            return 1;
        }
        fill(p + n, own, &s);
        w->prompts[r] = p;
        w->n_prompt[r] = n + own;
        w->max_tokens[r] = 16 + (int32_t)(rng(&s) % 128);
    }
    free(fam);
    free(grp);
    free(fam_of);
    return 0;
}

/* The best achievable cached prompt tokens, computed independently of the engine: every
 * distinct full block prefix is computed once; every other prompt whose cacheable blocks
 * ((n - 1) / BS of them) include it is served from cache (one prompt that holds it as its last
 * full block without being able to reuse it computes it, if any). */
typedef struct slot {
    uint64_t key; /* 0: empty */
    int32_t hitters;
    int32_t others;
} slot;

static int64_t best_cached(const workload *w)
{
    size_t cap = 1024;
    int64_t n_ent = 0;
    for (int32_t r = 0; r < w->n_req; r++) n_ent += w->n_prompt[r] / BS;
    while ((int64_t)cap < 2 * n_ent) cap *= 2;
    slot *t = calloc(cap, sizeof *t);
    for (int32_t r = 0; r < w->n_req; r++) {
        int32_t n = w->n_prompt[r], h = (n - 1) / BS;
        for (int32_t i = 0; i < n / BS; i++) {
            /* key of the whole prefix [0, (i + 1) * BS) */
            uint64_t k = XXH3_64bits(w->prompts[r], (size_t)(i + 1) * BS * sizeof(int32_t)) | 1;
            size_t j = k & (cap - 1);
            while (t[j].key && t[j].key != k) j = (j + 1) & (cap - 1);
            t[j].key = k;
            if (i < h)
                t[j].hitters++;
            else
                t[j].others++;
        }
    }
    int64_t best = 0;
    for (size_t j = 0; j < cap; j++)
        if (t[j].key && t[j].hitters > 0) best += (int64_t)(t[j].hitters - (t[j].others ? 0 : 1));
    free(t);
    return best * BS;
}

static int run(const workload *w, int32_t n_blocks, int32_t max_bypass, const char *policy,
               bool fcfs, int32_t window)
{
    pllm_model model = {0};
    model.cfg.n_vocab = VOCAB;
    model.cfg.n_ctx_train = 4096;
    pllm_backend be = {.iface = &null_iface, .ctx = NULL};
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.n_blocks = n_blocks;
    ep.max_seqs = 256;
    ep.max_batched_tokens = 8192;
    if (max_bypass >= 0) ep.max_bypass = max_bypass;
    if (pllm_evict_policy_parse(policy, &ep.eviction) != PLLM_OK) {
        fprintf(stderr, "engine_bench: %s\n", pllm_errmsg());
        return 1;
    }
    pllm_engine_hooks hooks = {.no_grouping = fcfs};
    pllm_engine *e = NULL;
    if (pllm_engine_create_hooked(&e, &model, &be, NULL, &ep, &hooks) != PLLM_OK) {
        fprintf(stderr, "engine_bench: %s\n", pllm_errmsg());
        return 1;
    }
    double t0 = pllm_now(), c0 = cpu_now();
    /* window > 0: at most window requests in the engine, refilled after each step (as pllm
     * generate reads its input); 0: everything added before the first step */
    int32_t next = 0;
    int64_t done = 0;
    double t_add = 0, c_add = 0;
    pllm_engine_plan_stats before = {0};
    for (bool first = true;; first = false) {
        double ta = pllm_now(), ca = cpu_now();
        while (next < w->n_req && (window <= 0 || next - done < window)) {
            pllm_request_params p;
            pllm_request_params_defaults(&p);
            p.max_tokens = w->max_tokens[next];
            p.ignore_eos = true;
            if (pllm_engine_add(e, w->prompts[next], w->n_prompt[next], &p, NULL, NULL) !=
                PLLM_OK) {
                fprintf(stderr, "engine_bench: add: %s\n", pllm_errmsg());
                return 1;
            }
            next++;
        }
        t_add += pllm_now() - ta;
        c_add += cpu_now() - ca;
        if (first) pllm_engine_get_plan_stats(e, &before);
        if (!pllm_engine_has_work(e)) break;
        if (pllm_engine_step(e, on_done, &done) != PLLM_OK) {
            fprintf(stderr, "engine_bench: step: %s\n", pllm_errmsg());
            return 1;
        }
    }
    double t1 = t0 + t_add, c1 = c0 + c_add;
    double t2 = pllm_now() - t_add, c2 = cpu_now() - c_add;
    pllm_engine_stats st;
    pllm_engine_get_stats(e, &st);
    pllm_engine_plan_stats ps;
    pllm_engine_get_plan_stats(e, &ps);
    int64_t best = best_cached(w);
    printf("  %-6s %-4s %6d blocks, bypass %4d: hit %5.1f%% of best %5.1f%% (%lld grouped), "
           "computed %lld (%lld blocks again), preemptions %lld, %lld steps, %.1f us/step, "
           "add %.1f us/req (cpu: %.1f us/step, add %.1f us/req)\n",
           policy, fcfs ? "fcfs" : "plan", st.n_blocks, ep.max_bypass, 100.0 * ps.hit_rate,
           100.0 * ps.best_hit_rate, (long long)ps.grouped, (long long)st.prompt_tokens_computed,
           (long long)ps.blocks_recomputed, (long long)st.preemptions, (long long)st.steps,
           (t2 - t1) * 1e6 / (double)st.steps, (t1 - t0) * 1e6 / w->n_req,
           (c2 - c1) * 1e6 / (double)st.steps, (c1 - c0) * 1e6 / w->n_req);
    if ((window <= 0 && best != before.best_cached_tokens) || best != ps.best_cached_tokens) {
        fprintf(stderr, "engine_bench: the engine's best achievable %lld differs from %lld\n",
                (long long)before.best_cached_tokens, (long long)best);
        return 1;
    }
    if (done != st.requests_finished || ps.hit_rate > ps.best_hit_rate) return 1;
    pllm_engine_free(e);
    return 0;
}

int main(int argc, char **argv)
{
    const char *kind = argc > 1 ? argv[1] : "groups";
    int32_t n_req = argc > 2 ? atoi(argv[2]) : 10000;
    int32_t n_blocks = argc > 3 ? atoi(argv[3]) : 16384;
    int32_t n_groups = argc > 4 ? atoi(argv[4]) : 100;
    int32_t max_bypass = argc > 5 ? atoi(argv[5]) : -1;
    const char *policy = argc > 6 ? argv[6] : "both";
    const char *order = argc > 7 ? argv[7] : "plan";
    int32_t window = argc > 8 ? atoi(argv[8]) : 0;
    if (n_req < 1 || n_blocks < 1 || n_groups < 1) {
        fprintf(stderr, "usage: engine_bench [groups|nested|deep|unique] [n_requests] [n_blocks] "
                        "[n_groups] [max_bypass] [lru|future|both] [plan|fcfs|both] "
                        "[window]\n");
        return 2;
    }
    workload w;
    if (make_workload(&w, kind, n_req, n_groups)) return 2;
    printf("engine_bench: workload %s, %d requests, %d groups, %s\n", kind, n_req, n_groups,
           window > 0 ? "streamed" : "all added before the first step");
    if (window > 0) printf("  window: at most %d requests in the engine\n", window);
    int rc = 0;
    for (int fcfs = 0; fcfs < 2; fcfs++) {
        if (fcfs ? !strcmp(order, "plan") : !strcmp(order, "fcfs")) continue;
        if (strcmp(policy, "future")) rc |= run(&w, n_blocks, max_bypass, "lru", fcfs, window);
        if (strcmp(policy, "lru")) rc |= run(&w, n_blocks, max_bypass, "future", fcfs, window);
    }
    for (int32_t r = 0; r < n_req; r++) free(w.prompts[r]);
    free(w.prompts);
    free(w.n_prompt);
    free(w.max_tokens);
    return rc;
}

/*
 * bench_run.c: one measured (or warmup) run of `pllm bench` on a fresh engine (bench.h).
 */
#include "cmd/bench.h"
#include "cmd/shared.h"

#include <stdio.h>
#include <xxhash.h>

typedef struct bench_run_ctx {
    pllm_report *rep;
    cmd_plot *plot; /* --plot: the first measured run, else NULL */
    cmd_progress *prog;
    cmd_progress_state ps;
    uint64_t digest; /* sum over completions of a hash of (request, index, output ids) */
} bench_run_ctx;

static void on_done(const pllm_completion *c, void *arg)
{
    bench_run_ctx *x = arg;
    pllm_report_add(x->rep, c);
    if (x->plot) cmd_plot_completion(x->plot, c);
    x->ps.done++;
    x->ps.output_tokens += c->n_tokens;
    x->ps.prompt_tokens += c->prompt_tokens;
    x->ps.cached_tokens += c->cached_tokens;
    if (c->finish == PLLM_FINISH_ERROR) x->ps.failed++;
    x->digest += XXH3_64bits_withSeed(c->token_ids, (size_t)c->n_tokens * sizeof *c->token_ids,
                                      c->req_id * 1025 + (uint64_t)c->index);
}

int cmd_bench_run_once(const cmd_runtime *rt, const pllm_engine_params *ep, const bench_workload *w,
                       int64_t n, pllm_report *rep, bool new_run, pllm_engine_stats *es,
                       pllm_engine_plan_stats *plan, volatile sig_atomic_t *interrupted,
                       cmd_progress *prog, cmd_plot *plot, uint64_t *digest)
{
    pllm_engine *eng;
    /* the workload is known: the hybrid KV split is sized for it */
    pllm_engine_params wp = *ep;
    int32_t *lens = n > 0 ? pllm_malloc((size_t)n * sizeof *lens) : NULL;
    for (int64_t i = 0; lens && i < n; i++)
        lens[i] = (int32_t)PLLM_MIN((int64_t)w->v[i].n + w->v[i].max_tokens, INT32_MAX);
    wp.workload_lens = lens;
    wp.n_workload = lens ? n : 0;
    pllm_status est =
        pllm_engine_create(&eng, rt->model, (pllm_backend *)&rt->backend, rt->tok, &wp);
    free(lens);
    if (est != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 3;
    }
    pllm_report scratch;
    pllm_report_init(&scratch, 0);
    bench_run_ctx x = {.rep = rep ? rep : &scratch, .prog = prog, .plot = plot, .ps = {.total = n}};
    pllm_request_params p;
    pllm_request_params_defaults(&p);
    p.ignore_eos = true;
    double t0 = pllm_now();
    if (plot) plot->t0 = t0;
    if (new_run && rep)
        pllm_report_new_run(rep, t0);
    else if (rep)
        rep->t_start = rep->t_end = t0;
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        p.max_tokens = w->v[i].max_tokens;
        if (pllm_engine_add(eng, w->v[i].ids, w->v[i].n, &p, NULL, NULL) != PLLM_OK) {
            cmd_progress_clear(prog);
            fprintf(stderr, "pllm: request %lld: %s\n", (long long)i, pllm_errmsg());
            x.ps.done++;
            x.ps.failed++;
            pllm_report_add_rejected(x.rep);
        }
    }
    while (rc == 0 && pllm_engine_has_work(eng)) {
        if (*interrupted) {
            rc = 130;
            break;
        }
        if (pllm_engine_step(eng, on_done, &x) != PLLM_OK) {
            cmd_progress_clear(prog);
            fprintf(stderr, "pllm: engine step failed: %s\n", pllm_errmsg());
            rc = 3;
            break;
        }
        cmd_progress_update(prog, &x.ps, false);
        if (plot) {
            pllm_engine_stats now;
            pllm_engine_get_stats(eng, &now);
            cmd_plot_step(plot, pllm_now(), &now);
        }
    }
    cmd_progress_finish(prog, &x.ps);
    pllm_engine_get_stats(eng, es);
    pllm_engine_get_plan_stats(eng, plan);
    *digest = x.digest;
    cmd_prefix_cache_report(eng, ep->prefix_cache_dir, NULL, !prog->enabled);
    pllm_engine_free(eng);
    pllm_report_free(&scratch);
    return rc;
}

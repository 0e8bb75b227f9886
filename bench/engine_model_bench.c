/*
 * engine_model_bench: the engine on the real default model and the CPU backend, each benchmark
 * running both of its sides in one invocation and printing the ratio.
 *
 *   build/bench/engine_model_bench [a] [b] [c] [options]        (no letter: all three)
 *
 * (a) ShareGPT: the first human turn of the first --prompts (200) conversations of
 *     $PLLM_SHARED_DATA/sharegpt/ShareGPT_V3_filtered_1000.json, tokenized with the model's
 *     tokenizer, truncated so prompt + output fit the model's context; --max-tokens (128)
 *     output tokens each, ignore_eos, greedy. Output tokens/s with continuous batching (the
 *     engine defaults: max_seqs 64, 2048 tokens a step) against one request at a time
 *     (max_seqs 1); the greedy outputs of both must be identical. Target >= 4x.
 * (b) Shared prefix: --shared (64) requests, each a --prefix (1024)-token shared prefix (real
 *     text: the ShareGPT turns concatenated) and a distinct --suffix (32)-token suffix (the
 *     start of a different conversation each), --shared-out (16) output tokens, ignore_eos:
 *     prefix cache on against off. Target >= 8x. Prints the plan counters: each distinct
 *     full prompt block computed exactly once means blocks computed == distinct blocks and 0
 *     recomputed.
 * (c) The same as (b) with a KV budget too small to hold all requests at once (--small-blocks,
 *     default half of what (b) needs at its peak): it must complete with greedy output
 *     identical to (b) and report its preemptions. Run with each eviction policy.
 *
 * Options: --model PATH (default $PLLM_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf, PLLM_HOME
 * defaulting to ~/.cache/pllm), --data PATH, --threads N (default: all cores), --eviction
 * lru|future|both (default both: (b) and (c) run with each). Reduced sizes for quick checks:
 * e.g. `engine_model_bench a --prompts 16 --max-tokens 16`.
 *
 * The backend runs with pllm generate's defaults: int8 math where the weights are quantized, the KV
 * cache dtype auto (fp16 then).
 *
 * Throughput is wall time (the machine may be shared); the CPU seconds of the process are
 * printed beside it.
 */
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef PLLM_DEFAULT_SHARED_DATA
#define PLLM_DEFAULT_SHARED_DATA "../shared/data"
#endif

typedef struct opts {
    const char *model, *data;
    int threads;
    int32_t n_prompts, max_tokens;
    int32_t n_shared, prefix_len, suffix_len, shared_out, small_blocks;
    bool lru, future;
} opts;

typedef struct prompt_set {
    int32_t n;
    pllm_tokens *p; /* [n] */
    int32_t *max_tokens;
} prompt_set;

/* The completions of one run, by request index. */
typedef struct outputs {
    int32_t n;
    pllm_tokens *tokens; /* [n] */
    int64_t finished, errors;
} outputs;

typedef struct run_result {
    double wall, cpu;
    int64_t output_tokens;
    pllm_engine_stats st;
    pllm_engine_plan_stats plan_before, plan;
} run_result;

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_done(const pllm_completion *c, void *arg)
{
    outputs *o = arg;
    int32_t i = (int32_t)(intptr_t)c->user;
    o->finished++;
    if (c->finish == PLLM_FINISH_ERROR) {
        fprintf(stderr, "engine_model_bench: request %d failed: %s\n", i, c->error);
        o->errors++;
        return;
    }
    if (i < 0 || i >= o->n) return;
    o->tokens[i].n = 0;
    if (pllm_tokens_append(&o->tokens[i], c->token_ids, (size_t)c->n_tokens) != PLLM_OK)
        o->errors++;
}

static void outputs_free(outputs *o)
{
    for (int32_t i = 0; i < o->n; i++) pllm_tokens_free(&o->tokens[i]);
    free(o->tokens);
    memset(o, 0, sizeof *o);
}

/* Run every prompt through a fresh engine. */
static int run(const pllm_model *m, const pllm_tokenizer *tok, const opts *op, const prompt_set *ps,
               const pllm_engine_params *ep, outputs *out, run_result *res)
{
    memset(res, 0, sizeof *res);
    out->n = ps->n;
    out->tokens = pllm_calloc((size_t)ps->n, sizeof *out->tokens);
    out->finished = out->errors = 0;
    pllm_cpu_params cp;
    pllm_cpu_params_defaults(&cp);
    cp.n_threads = op->threads;
    cp.kv_dtype = PLLM_DTYPE_COUNT; /* auto, as `pllm generate` runs (fp16 with int8 math) */
    pllm_backend be = {0};
    pllm_engine *e = NULL;
    if (!out->tokens || pllm_cpu_backend_create(&be, m, &cp) != PLLM_OK ||
        pllm_engine_create(&e, m, &be, tok, ep) != PLLM_OK) {
        fprintf(stderr, "engine_model_bench: %s\n", pllm_errmsg());
        pllm_backend_free(&be);
        return 1;
    }
    double t0 = pllm_now(), c0 = cpu_seconds();
    for (int32_t i = 0; i < ps->n; i++) {
        pllm_request_params p;
        pllm_request_params_defaults(&p);
        p.max_tokens = ps->max_tokens[i];
        p.ignore_eos = true;
        if (pllm_engine_add(e, ps->p[i].ids, (int32_t)ps->p[i].n, &p, (void *)(intptr_t)i, NULL) !=
            PLLM_OK) {
            fprintf(stderr, "engine_model_bench: add %d: %s\n", i, pllm_errmsg());
            pllm_engine_free(e);
            pllm_backend_free(&be);
            return 1;
        }
    }
    pllm_engine_get_plan_stats(e, &res->plan_before);
    while (pllm_engine_has_work(e)) {
        if (pllm_engine_step(e, on_done, out) != PLLM_OK) {
            fprintf(stderr, "engine_model_bench: step: %s\n", pllm_errmsg());
            pllm_engine_free(e);
            pllm_backend_free(&be);
            return 1;
        }
    }
    res->wall = pllm_now() - t0;
    res->cpu = cpu_seconds() - c0;
    pllm_engine_get_stats(e, &res->st);
    pllm_engine_get_plan_stats(e, &res->plan);
    res->output_tokens = res->st.output_tokens;
    pllm_engine_free(e);
    pllm_backend_free(&be);
    if (out->errors || out->finished != ps->n) {
        fprintf(stderr, "engine_model_bench: %lld of %d finished, %lld errors\n",
                (long long)out->finished, ps->n, (long long)out->errors);
        return 1;
    }
    return 0;
}

static void print_run(const char *name, const run_result *r)
{
    printf("  %-34s %7.1f output tok/s  (%6.1f s wall, %6.1f CPU s, %5lld steps, %4lld "
           "preemptions, prompt tokens %lld computed / %lld cached, peak %d of %d blocks)\n",
           name, (double)r->output_tokens / r->wall, r->wall, r->cpu, (long long)r->st.steps,
           (long long)r->st.preemptions, (long long)r->st.prompt_tokens_computed,
           (long long)r->st.prompt_tokens_cached, r->st.peak_blocks_used, r->st.n_blocks);
}

static void print_plan(const run_result *r)
{
    const pllm_engine_plan_stats *b = &r->plan_before, *a = &r->plan;
    printf("    plan: before the run, best achievable hit %.2f%% (%lld of %lld prompt tokens; "
           "%lld distinct full prompt blocks, %lld shared); after it, achieved %.2f%%; blocks "
           "computed %lld, recomputed %lld%s\n",
           100.0 * b->best_hit_rate, (long long)b->best_cached_tokens, (long long)b->prompt_tokens,
           (long long)b->distinct_blocks, (long long)b->shared_blocks, 100.0 * a->hit_rate,
           (long long)a->blocks_computed, (long long)a->blocks_recomputed,
           a->exact ? "" : " (inexact)");
}

static bool same_outputs(const outputs *a, const outputs *b, const char *what)
{
    int32_t diff = 0;
    for (int32_t i = 0; i < a->n && i < b->n; i++)
        if (a->tokens[i].n != b->tokens[i].n ||
            memcmp(a->tokens[i].ids, b->tokens[i].ids, a->tokens[i].n * sizeof(int32_t)))
            diff++;
    if (a->n != b->n) diff++;
    printf("    greedy outputs %s: %s (%d requests differ)\n", what, diff ? "DIFFER" : "identical",
           diff);
    return diff == 0;
}

/* ---- inputs ---- */

static json_t *load_sharegpt(const char *path)
{
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j) {
        fprintf(stderr, "engine_model_bench: %s:%d: %s (set PLLM_SHARED_DATA or --data)\n", path,
                err.line, err.text);
        return NULL;
    }
    if (!json_is_array(j)) {
        fprintf(stderr, "engine_model_bench: %s: not a JSON array\n", path);
        json_decref(j);
        return NULL;
    }
    return j;
}

/* The first human turn of conversation i, or NULL. */
static const char *first_human(json_t *j, size_t i)
{
    json_t *conv = json_object_get(json_array_get(j, i), "conversations");
    json_t *t0 = json_array_get(conv, 0);
    const char *from = json_string_value(json_object_get(t0, "from"));
    const char *text = json_string_value(json_object_get(t0, "value"));
    return from && !strcmp(from, "human") && text && text[0] ? text : NULL;
}

static int encode(const pllm_tokenizer *tok, const char *text, pllm_tokens *out)
{
    pllm_encode_opts eo = {.add_special = true, .parse_special = false};
    out->n = 0;
    if (pllm_tokenizer_encode(tok, text, strlen(text), &eo, out) != PLLM_OK) {
        fprintf(stderr, "engine_model_bench: encode: %s\n", pllm_errmsg());
        return 1;
    }
    return 0;
}

static void prompts_free(prompt_set *ps)
{
    for (int32_t i = 0; i < ps->n; i++) pllm_tokens_free(&ps->p[i]);
    free(ps->p);
    free(ps->max_tokens);
    memset(ps, 0, sizeof *ps);
}

static int make_sharegpt(json_t *j, const pllm_tokenizer *tok, int32_t n_ctx, const opts *op,
                         prompt_set *ps)
{
    ps->p = pllm_calloc((size_t)op->n_prompts, sizeof *ps->p);
    ps->max_tokens = pllm_calloc((size_t)op->n_prompts, sizeof *ps->max_tokens);
    if (!ps->p || !ps->max_tokens) return 1;
    int64_t truncated = 0, total = 0;
    for (size_t i = 0; i < json_array_size(j) && ps->n < op->n_prompts; i++) {
        const char *text = first_human(j, i);
        if (!text) continue;
        pllm_tokens *t = &ps->p[ps->n];
        if (encode(tok, text, t)) return 1;
        if (t->n == 0) continue;
        int32_t room = n_ctx - op->max_tokens;
        if ((int32_t)t->n > room) {
            t->n = (size_t)room;
            truncated++;
        }
        total += (int64_t)t->n;
        ps->max_tokens[ps->n++] = op->max_tokens;
    }
    if (ps->n < op->n_prompts) {
        fprintf(stderr, "engine_model_bench: only %d usable conversations\n", ps->n);
        return 1;
    }
    printf("  %d prompts, %lld prompt tokens (mean %.0f, %lld truncated to fit %d - %d), %d "
           "output tokens each\n",
           ps->n, (long long)total, (double)total / ps->n, (long long)truncated, n_ctx,
           op->max_tokens, op->max_tokens);
    return 0;
}

/* Shared prefix + distinct suffixes, all real text. */
static int make_shared(json_t *j, const pllm_tokenizer *tok, const opts *op, prompt_set *ps)
{
    pllm_tokens all = {0}, t = {0};
    int rc = 1;
    size_t i = 0;
    /* the prefix: conversations concatenated, from the end of the file (the suffixes start at
     * its beginning) */
    for (size_t k = json_array_size(j); k-- > 0 && (int32_t)all.n < op->prefix_len;) {
        const char *text = first_human(j, k);
        if (!text) continue;
        if (encode(tok, text, &t) || pllm_tokens_append(&all, t.ids, t.n) != PLLM_OK) goto out;
    }
    if ((int32_t)all.n < op->prefix_len) {
        fprintf(stderr, "engine_model_bench: not enough text for a %d-token prefix\n",
                op->prefix_len);
        goto out;
    }
    ps->p = pllm_calloc((size_t)op->n_shared, sizeof *ps->p);
    ps->max_tokens = pllm_calloc((size_t)op->n_shared, sizeof *ps->max_tokens);
    if (!ps->p || !ps->max_tokens) goto out;
    for (; ps->n < op->n_shared && i < json_array_size(j); i++) {
        const char *text = first_human(j, i);
        if (!text || encode(tok, text, &t)) continue;
        if ((int32_t)t.n < op->suffix_len) continue;
        bool dup = false; /* distinct suffixes */
        for (int32_t k = 0; k < ps->n && !dup; k++)
            dup = !memcmp(ps->p[k].ids + op->prefix_len, t.ids,
                          (size_t)op->suffix_len * sizeof(int32_t));
        if (dup) continue;
        pllm_tokens *p = &ps->p[ps->n];
        if (pllm_tokens_append(p, all.ids, (size_t)op->prefix_len) != PLLM_OK ||
            pllm_tokens_append(p, t.ids, (size_t)op->suffix_len) != PLLM_OK)
            goto out;
        ps->max_tokens[ps->n++] = op->shared_out;
    }
    if (ps->n < op->n_shared) {
        fprintf(stderr, "engine_model_bench: only %d distinct suffixes\n", ps->n);
        goto out;
    }
    printf("  %d requests: %d-token shared prefix + distinct %d-token suffixes, %d output "
           "tokens each\n",
           ps->n, op->prefix_len, op->suffix_len, op->shared_out);
    rc = 0;
out:
    pllm_tokens_free(&all);
    pllm_tokens_free(&t);
    return rc;
}

/* ---- the benchmarks ---- */

static int bench_a(const pllm_model *m, const pllm_tokenizer *tok, json_t *j, const opts *op)
{
    printf("(a) continuous batching vs one request at a time, ShareGPT\n");
    prompt_set ps = {0};
    if (make_sharegpt(j, tok, m->cfg.n_ctx_train, op, &ps)) return 1;
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    outputs ob = {0}, o1 = {0};
    run_result rb, r1;
    int rc = run(m, tok, op, &ps, &ep, &ob, &rb);
    if (!rc) print_run("batched (max_seqs 64)", &rb);
    ep.max_seqs = 1;
    if (!rc) rc = run(m, tok, op, &ps, &ep, &o1, &r1);
    if (!rc) {
        print_run("one at a time (max_seqs 1)", &r1);
        double ratio = ((double)rb.output_tokens / rb.wall) / ((double)r1.output_tokens / r1.wall);
        printf("  (a) ratio: %.2fx output tokens/s (target >= 4x; by CPU time %.2fx)\n", ratio,
               r1.cpu / rb.cpu);
        if (!same_outputs(&ob, &o1, "batched vs one at a time")) rc = 1;
    }
    outputs_free(&ob);
    outputs_free(&o1);
    prompts_free(&ps);
    return rc;
}

static int bench_bc(const pllm_model *m, const pllm_tokenizer *tok, json_t *j, const opts *op,
                    bool do_b, bool do_c)
{
    prompt_set ps = {0};
    printf("(b/c) shared prefix\n");
    if (make_shared(j, tok, op, &ps)) return 1;
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    outputs on = {0}, off = {0}, small = {0};
    run_result r_on, r_off, r_small;
    int rc = 0;
    pllm_evict_policy pols[2];
    int n_pol = 0;
    if (op->lru) pols[n_pol++] = PLLM_EVICT_LRU;
    if (op->future) pols[n_pol++] = PLLM_EVICT_FUTURE;
    /* the reference run: cache on, enough KV */
    ep.eviction = pols[0];
    rc = run(m, tok, op, &ps, &ep, &on, &r_on);
    if (rc) goto out;
    char name[96];
    snprintf(name, sizeof name, "prefix cache on (%s)", pllm_evict_policy_str(ep.eviction));
    print_run(name, &r_on);
    print_plan(&r_on);
    bool once =
        r_on.plan.blocks_recomputed == 0 && r_on.plan.blocks_computed == r_on.plan.distinct_blocks;
    printf("    shared prefix blocks: %d, each computed exactly once: %s (%lld distinct full "
           "prompt blocks, %lld computed)\n",
           op->prefix_len / r_on.st.block_size, once ? "yes" : "NO",
           (long long)r_on.plan.distinct_blocks, (long long)r_on.plan.blocks_computed);
    if (do_b) {
        ep.no_prefix_cache = true;
        rc = run(m, tok, op, &ps, &ep, &off, &r_off);
        ep.no_prefix_cache = false;
        if (rc) goto out;
        print_run("prefix cache off", &r_off);
        print_plan(&r_off);
        double ratio =
            ((double)r_on.output_tokens / r_on.wall) / ((double)r_off.output_tokens / r_off.wall);
        printf("  (b) ratio: %.2fx output tokens/s, cache on vs off (target >= 8x; by CPU time "
               "%.2fx)\n",
               ratio, r_off.cpu / r_on.cpu);
        if (!same_outputs(&on, &off, "cache on vs off")) rc = 1;
    }
    if (do_c) {
        int32_t per_req =
                    (op->prefix_len + op->suffix_len + op->shared_out + r_on.st.block_size - 1) /
                    r_on.st.block_size,
                shared = op->prefix_len / r_on.st.block_size;
        int32_t all_at_once = shared + op->n_shared * (per_req - shared);
        int32_t nb = op->small_blocks > 0 ? op->small_blocks : shared + (all_at_once - shared) / 2;
        printf("  (c) KV budget %d blocks of %d (all %d requests at once need %d)\n", nb,
               r_on.st.block_size, op->n_shared, all_at_once);
        for (int k = 0; k < n_pol && !rc; k++) {
            ep.n_blocks = nb;
            ep.eviction = pols[k];
            outputs_free(&small);
            rc = run(m, tok, op, &ps, &ep, &small, &r_small);
            if (rc) break;
            snprintf(name, sizeof name, "small KV, cache on (%s)", pllm_evict_policy_str(pols[k]));
            print_run(name, &r_small);
            print_plan(&r_small);
            printf("  (c) %s: completed, %lld preemptions\n", pllm_evict_policy_str(pols[k]),
                   (long long)r_small.st.preemptions);
            if (!same_outputs(&on, &small, "small KV vs (b) cache on")) rc = 1;
            if (r_small.st.preemptions == 0) {
                printf("    (no preemption: the budget is not small enough)\n");
                rc = 1;
            }
        }
    }
out:
    outputs_free(&on);
    outputs_free(&off);
    outputs_free(&small);
    prompts_free(&ps);
    return rc;
}

/* The option's value (-1 when missing: every numeric option must be >= 0 or >= 1). */
static int32_t arg_int(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "engine_model_bench: %s needs a value\n", argv[*i]);
        return -1;
    }
    return (int32_t)atoi(argv[++*i]);
}

int main(int argc, char **argv)
{
    opts op = {.n_prompts = 200,
               .max_tokens = 128,
               .n_shared = 64,
               .prefix_len = 1024,
               .suffix_len = 32,
               .shared_out = 16,
               .lru = true,
               .future = true};
    bool a = false, b = false, c = false;
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress shows line by line even when redirected */
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "a"))
            a = true;
        else if (!strcmp(s, "b"))
            b = true;
        else if (!strcmp(s, "c"))
            c = true;
        else if (!strcmp(s, "--model") && i + 1 < argc)
            op.model = argv[++i];
        else if (!strcmp(s, "--data") && i + 1 < argc)
            op.data = argv[++i];
        else if (!strcmp(s, "--threads"))
            op.threads = arg_int(argc, argv, &i);
        else if (!strcmp(s, "--prompts"))
            op.n_prompts = arg_int(argc, argv, &i);
        else if (!strcmp(s, "--max-tokens"))
            op.max_tokens = arg_int(argc, argv, &i);
        else if (!strcmp(s, "--shared"))
            op.n_shared = arg_int(argc, argv, &i);
        else if (!strcmp(s, "--prefix"))
            op.prefix_len = arg_int(argc, argv, &i);
        else if (!strcmp(s, "--suffix"))
            op.suffix_len = arg_int(argc, argv, &i);
        else if (!strcmp(s, "--shared-out"))
            op.shared_out = arg_int(argc, argv, &i);
        else if (!strcmp(s, "--small-blocks"))
            op.small_blocks = arg_int(argc, argv, &i);
        else if (!strcmp(s, "--eviction") && i + 1 < argc) {
            const char *v = argv[++i];
            op.lru = !strcmp(v, "lru") || !strcmp(v, "both");
            op.future = !strcmp(v, "future") || !strcmp(v, "both");
        } else {
            fprintf(stderr, "usage: engine_model_bench [a] [b] [c] [--model PATH] [--data PATH] "
                            "[--threads N] [--prompts N] [--max-tokens N] [--shared N] [--prefix "
                            "N] [--suffix N] [--shared-out N] [--small-blocks N] [--eviction "
                            "lru|future|both]\n");
            return 2;
        }
    }
    if (!a && !b && !c) a = b = c = true;
    if ((!op.lru && !op.future) || op.n_prompts < 1 || op.threads < 0 || op.small_blocks < 0 ||
        op.max_tokens < 1 || op.n_shared < 1 || op.prefix_len < 1 || op.suffix_len < 1 ||
        op.shared_out < 1) {
        fprintf(stderr, "engine_model_bench: bad option value\n");
        return 2;
    }
    char model_path[4096], data_path[4096];
    if (!op.model) {
        const char *home = getenv("PLLM_HOME");
        if (home && home[0])
            snprintf(model_path, sizeof model_path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                     home);
        else
            snprintf(model_path, sizeof model_path,
                     "%s/.cache/pllm/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                     getenv("HOME") ? getenv("HOME") : ".");
        op.model = model_path;
    }
    if (!op.data) {
        const char *d = getenv("PLLM_SHARED_DATA");
        snprintf(data_path, sizeof data_path, "%s/sharegpt/ShareGPT_V3_filtered_1000.json",
                 d && d[0] ? d : PLLM_DEFAULT_SHARED_DATA);
        op.data = data_path;
    }
    pllm_model *m = NULL;
    if (pllm_model_load(&m, op.model) != PLLM_OK) {
        fprintf(stderr, "engine_model_bench: %s (run scripts/setup.sh or set PLLM_HOME)\n",
                pllm_errmsg());
        return 1;
    }
    pllm_tokenizer *tok = NULL;
    if (pllm_tokenizer_from_gguf(&tok, m->gguf) != PLLM_OK) {
        fprintf(stderr, "engine_model_bench: tokenizer: %s\n", pllm_errmsg());
        pllm_model_free(m);
        return 1;
    }
    json_t *j = load_sharegpt(op.data);
    int rc = j ? 0 : 1;
    if (!rc) {
        pllm_backend probe = {0};
        pllm_cpu_params cp;
        pllm_cpu_params_defaults(&cp);
        cp.n_threads = op.threads;
        cp.kv_dtype = PLLM_DTYPE_COUNT;
        int n_threads = 0;
        if (pllm_cpu_backend_create(&probe, m, &cp) == PLLM_OK) {
            const char *isa = pllm_cpu_backend_describe(&probe, &n_threads);
            printf("engine_model_bench: %s, CPU backend (%s kernels, %s math, %s KV, %d threads)\n", op.model, isa,
                   pllm_cpu_backend_int_math(&probe) ? "int8" : "f32",
                   pllm_cpu_backend_kv_dtype(&probe) == PLLM_DTYPE_F16 ? "fp16" : "fp32", n_threads);
            pllm_backend_free(&probe);
        }
    }
    if (!rc && a) rc |= bench_a(m, tok, j, &op);
    if (!rc && (b || c)) rc |= bench_bc(m, tok, j, &op, b, c);
    json_decref(j);
    pllm_tokenizer_free(tok);
    pllm_model_free(m);
    return rc;
}

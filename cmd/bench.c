/*
 * bench.c: `pllm bench`: throughput and latency of the engine on a workload, with the names
 * vLLM's benchmarks use, and a CI regression gate.
 *
 * Workloads (--dataset):
 *   sharegpt  the first human turn of each ShareGPT conversation, as raw text (no chat
 *             template), as vLLM's benchmarks take it; --dataset-path is required
 *   random    --input-len random token ids per prompt
 *   prefix    --num-prefixes shared prefixes of --prefix-len ids + --input-len ids of its own
 *   FILE      any input `pllm generate` reads (a ShareGPT file is taken as for sharegpt; other
 *             records are rendered as generate renders them)
 * The first --num-prompts usable records are taken in file order. Output lengths: --output-len
 * when given; else the reply that follows the prompt in the data (its token count) or the
 * record's max_tokens; else 128. Every request is greedy with ignore_eos, so it generates
 * exactly its output length (unless it reaches the context limit). --input-len on a dataset
 * makes every prompt exactly that long (longer ones are cut, shorter ones repeated). Records
 * whose prompt + output exceed the context are skipped and counted.
 *
 * Each run (--repeat N) uses a fresh engine on the same loaded model, so the exact counters
 * repeat; the bench checks they do. --warmup W first runs W of the requests on a throwaway
 * engine (weights paged in, threads started) so that it cannot change the counters.
 * All requests are added at once when a run starts (as vLLM's offline benchmark does): TTFT
 * includes the time a request waits in the queue.
 *
 * Gate (--baseline FILE; gate.h): compare with a saved --stats-json. Not comparable (exit 3)
 * when the workload differs (dataset fingerprint, lengths, seed, model, engine parameters); a
 * FAIL (exit 1) when a throughput dropped past --max-regression beyond the measured noise
 * (P(>limit) >= 0.95: Welch's t-test with --repeat on both sides) or any exact counter changed;
 * otherwise PASS (exit 0). --current FILE judges a saved file instead of running.
 */
#include "cmd/commands.h"
#include "cmd/gate.h"
#include "cmd/options.h"
#include "cmd/output.h"
#include "cmd/plot.h"
#include "cmd/progress.h"
#include "cmd/runtime.h"
#include "cmd/shared.h"
#include "cpu/cpu_backend.h"
#include "datasets/source.h"
#include "datasets/synth.h"
#include "engine/engine.h"
#include "engine/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define BENCH_VERSION "0.1.0"

typedef struct bench_req {
    int32_t *ids;
    int32_t n, max_tokens;
} bench_req;

typedef struct bench_workload {
    bench_req *v;
    int64_t n, cap;
    int64_t n_bad, n_too_long, n_empty;
    int64_t prompt_tokens, max_tokens;
    uint64_t fingerprint;
} bench_workload;

typedef struct bench_opts {
    const char *dataset, *dataset_path, *format_s, *extra_s;
    pllm_extra_fields extra;
    int32_t num_prompts, input_len, output_len, prefix_len, num_prefixes, warmup, repeat;
    bool input_len_given, output_len_given;
} bench_opts;

static void workload_free(bench_workload *w)
{
    for (int64_t i = 0; i < w->n; i++) free(w->v[i].ids);
    free(w->v);
    memset(w, 0, sizeof *w);
}

static pllm_status workload_push(bench_workload *w, const pllm_tokens *ids, int32_t max_tokens)
{
    if (w->n == w->cap) {
        int64_t cap = w->cap ? 2 * w->cap : 256;
        bench_req *v = pllm_realloc(w->v, (size_t)cap * sizeof *v);
        if (!v) return PLLM_ERR_NOMEM;
        w->v = v;
        w->cap = cap;
    }
    bench_req *r = &w->v[w->n];
    r->ids = pllm_malloc(ids->n * sizeof *r->ids + 1);
    if (!r->ids) return PLLM_ERR_NOMEM;
    memcpy(r->ids, ids->ids, ids->n * sizeof *r->ids);
    r->n = (int32_t)ids->n;
    r->max_tokens = max_tokens;
    w->n++;
    w->prompt_tokens += r->n;
    w->max_tokens += max_tokens;
    return PLLM_OK;
}

/* Cut or cyclically repeat ids to exactly len tokens. */
static pllm_status fix_length(pllm_tokens *ids, int32_t len)
{
    if (ids->n == 0) return PLLM_OK;
    size_t have = ids->n;
    PLLM_TRY(pllm_tokens_reserve(ids, (size_t)len));
    for (size_t i = have; i < (size_t)len; i++) ids->ids[i] = ids->ids[i % have];
    ids->n = (size_t)len;
    return PLLM_OK;
}

static uint64_t fingerprint(const bench_workload *w)
{
    XXH3_state_t *s = XXH3_createState();
    XXH3_64bits_reset(s);
    for (int64_t i = 0; i < w->n; i++) {
        XXH3_64bits_update(s, &w->v[i].n, sizeof w->v[i].n);
        XXH3_64bits_update(s, &w->v[i].max_tokens, sizeof w->v[i].max_tokens);
        XXH3_64bits_update(s, w->v[i].ids, (size_t)w->v[i].n * sizeof *w->v[i].ids);
    }
    uint64_t h = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return h;
}

/* Synthetic workloads: ids from the vocabulary without special tokens. */
static int build_synthetic(bench_workload *w, const bench_opts *o, const cmd_runtime *rt,
                           uint64_t seed, int32_t max_len)
{
    int32_t nv = pllm_tokenizer_n_vocab(rt->tok);
    int32_t *allowed = pllm_malloc((size_t)nv * sizeof *allowed);
    if (!allowed) return 3;
    int32_t na = 0;
    for (int32_t i = 0; i < nv; i++)
        if (!pllm_tokenizer_is_special(rt->tok, i)) allowed[na++] = i;
    pllm_synth sy = {.kind =
                         strcmp(o->dataset, "prefix") == 0 ? PLLM_SYNTH_PREFIX : PLLM_SYNTH_RANDOM,
                     .allowed = allowed,
                     .n_allowed = na,
                     .seed = seed,
                     .input_len = o->input_len,
                     .prefix_len = o->prefix_len,
                     .n_prefixes = o->num_prefixes};
    int64_t len = (int64_t)o->input_len + (sy.kind == PLLM_SYNTH_PREFIX ? o->prefix_len : 0);
    if (len < 1 || len + o->output_len > max_len) {
        fprintf(stderr,
                "pllm: a prompt of %lld tokens + %d output tokens does not fit the context of %d "
                "tokens\n",
                (long long)len, o->output_len, max_len);
        free(allowed);
        return 2;
    }
    pllm_tokens ids = {0};
    int rc = 0;
    for (int64_t i = 0; i < o->num_prompts && rc == 0; i++) {
        ids.n = 0;
        if (pllm_synth_prompt(&sy, i, &ids) != PLLM_OK ||
            workload_push(w, &ids, o->output_len) != PLLM_OK) {
            fprintf(stderr, "pllm: %s\n", pllm_errmsg());
            rc = 3;
        }
    }
    pllm_tokens_free(&ids);
    free(allowed);
    return rc;
}

/* sharegpt / FILE: records from a file. */
static int build_from_file(bench_workload *w, const bench_opts *o, const cmd_runtime *rt,
                           const char *path, pllm_format format, int32_t max_len, bool quiet)
{
    pllm_source *src;
    if (pllm_source_open(&src, path, format) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 3;
    }
    pllm_source_set_extra_fields(src, o->extra);
    pllm_format f = pllm_source_format(src);
    if (strcmp(o->dataset, "sharegpt") == 0 && f != PLLM_FORMAT_SHAREGPT) {
        fprintf(stderr,
                "pllm: --dataset sharegpt: %s holds %s records, not ShareGPT conversations (use "
                "--dataset %s)\n",
                path, pllm_format_name(f), path);
        pllm_source_close(src);
        return 3;
    }
    pllm_request_params defaults;
    pllm_request_params_defaults(&defaults);
    pllm_tokens ids = {0}, ref = {0};
    int rc = 0;
    int64_t n_logged = 0;
    pllm_encode_opts raw = {.add_special = true, .parse_special = true},
                     plain = {.add_special = false, .parse_special = true};
    while (rc == 0 && w->n < o->num_prompts) {
        pllm_record rec;
        bool eof;
        if (pllm_source_next(src, &defaults, &rec, &eof) != PLLM_OK) {
            fprintf(stderr, "pllm: %s\n", pllm_errmsg());
            rc = 3;
            break;
        }
        if (eof) break;
        ids.n = ref.n = 0;
        pllm_status st = PLLM_OK;
        const char *err = rec.error;
        if (!err) {
            if (f == PLLM_FORMAT_SHAREGPT) { /* the first human turn, raw, as vLLM takes it */
                const char *p = NULL;
                for (size_t i = 0; i < rec.n_messages && !p; i++)
                    if (!strcmp(rec.messages[i].role, "user")) p = rec.messages[i].content;
                st = pllm_tokenizer_encode(rt->tok, p, strlen(p), &raw, &ids);
            } else {
                st = cmd_record_tokens(rt, pllm_source_path(src), &rec, &ids, NULL);
            }
            if (st != PLLM_OK) err = pllm_errmsg();
        }
        int32_t out_len = o->output_len;
        if (!err && !o->output_len_given) {
            if (rec.reference &&
                pllm_tokenizer_encode(rt->tok, rec.reference, strlen(rec.reference), &plain,
                                      &ref) == PLLM_OK &&
                ref.n > 0)
                out_len = (int32_t)ref.n;
            else if (rec.has_max_tokens)
                out_len = rec.params.max_tokens;
        }
        if (err) {
            w->n_bad++;
            if (!quiet && n_logged++ < 5) fprintf(stderr, "pllm: skipping a bad record: %s\n", err);
        } else if (ids.n == 0) {
            w->n_empty++;
        } else {
            if (o->input_len_given) st = fix_length(&ids, o->input_len);
            if (st != PLLM_OK) {
                rc = 3;
            } else if ((int64_t)ids.n + out_len > max_len) {
                w->n_too_long++;
            } else if (workload_push(w, &ids, out_len) != PLLM_OK) {
                fprintf(stderr, "pllm: out of memory\n");
                rc = 3;
            }
        }
        pllm_record_free(&rec);
    }
    pllm_tokens_free(&ids);
    pllm_tokens_free(&ref);
    pllm_source_close(src);
    return rc;
}

/* ---------------------------------------------------------------- runs */

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

/* One run of requests [0, n) on a fresh engine. rep NULL: a warmup (nothing recorded). */
static int run_once(const cmd_runtime *rt, const pllm_engine_params *ep, const bench_workload *w,
                    int64_t n, pllm_report *rep, bool new_run, pllm_engine_stats *es,
                    pllm_engine_plan_stats *plan, volatile sig_atomic_t *interrupted,
                    cmd_progress *prog, cmd_plot *plot, uint64_t *digest)
{
    pllm_engine *eng;
    if (pllm_engine_create(&eng, rt->model, (pllm_backend *)&rt->backend, rt->tok, ep) != PLLM_OK) {
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

/* ---------------------------------------------------------------- stats JSON and the gate */

static json_t *engine_params_json(const pllm_engine_params *ep, const pllm_engine_stats *es,
                                  int32_t max_len)
{
    return json_pack("{s:i, s:i, s:i, s:i, s:i, s:b, s:i, s:s, s:s}", "block_size", es->block_size,
                     "num_blocks", es->n_blocks, "max_batched_tokens", ep->max_batched_tokens,
                     "max_seqs", ep->max_seqs, "max_model_len", max_len, "prefix_cache",
                     !ep->no_prefix_cache, "max_bypass", ep->max_bypass, "eviction",
                     pllm_evict_policy_str(ep->eviction), "speculate",
                     pllm_spec_mode_str(ep->speculate));
}

static bool parse_percent(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s) return false;
    if (*end == '%') end++;
    if (*end || !(v >= 0) || !isfinite(v)) return false;
    *out = v;
    return true;
}

int cmd_bench(int argc, char **argv)
{
    cmd_engine_opts eo;
    cmd_engine_opts_init(&eo);
    bench_opts o = {.dataset = "sharegpt",
                    .format_s = "auto",
                    .extra_s = "error",
                    .num_prompts = 1000,
                    .prefix_len = 256,
                    .num_prefixes = 10,
                    .repeat = 1};
    const char *stats_json = NULL, *baseline = NULL, *max_reg_s = "5%", *current = NULL,
               *plot_path = NULL;
    float log_interval = 10;
    bool quiet = false, overwrite = false;
    cmd_opt opts[CMD_MAX_OPTS];
    size_t n_opts = 0;
    cmd_opt own[] = {
        {"dataset", 0, CMD_OPT_STR, &o.dataset, "NAME|FILE", "sharegpt",
         "sharegpt, random, prefix, or a prompt file", NULL},
        {"dataset-path", 0, CMD_OPT_STR, &o.dataset_path, "FILE", "none (required for sharegpt)",
         "the ShareGPT file (JSON list or JSON lines, .zst ok)", NULL},
        {"format", 0, CMD_OPT_STR, &o.format_s, "FMT", "auto",
         "format of the dataset file: auto, pllm, openai, sharegpt", NULL},
        {"extra-fields", 0, CMD_OPT_STR, &o.extra_s, "MODE", "error",
         "fields a record's format does not know: error (the record is skipped as bad), ignore, "
         "passthrough (as generate; a benchmark writes no output lines, so the same as ignore)",
         NULL},
        {"num-prompts", 'n', CMD_OPT_INT, &o.num_prompts, "N", "1000",
         "requests (the first N usable records of a file)", NULL},
        {"input-len", 0, CMD_OPT_INT, &o.input_len, "N",
         "random: 1024; prefix: 256 after the prefix; files: from the data",
         "prompt tokens (on a file: cut or repeat every prompt to N)", &o.input_len_given},
        {"output-len", 0, CMD_OPT_INT, &o.output_len, "N",
         "from the data (reply or max_tokens), else 128",
         "output tokens per request (greedy, ignore_eos)", &o.output_len_given},
        {"prefix-len", 0, CMD_OPT_INT, &o.prefix_len, "N", "256",
         "prefix: tokens of each shared prefix", NULL},
        {"num-prefixes", 0, CMD_OPT_INT, &o.num_prefixes, "N", "10",
         "prefix: number of distinct shared prefixes", NULL},
        {"warmup", 0, CMD_OPT_INT, &o.warmup, "N", "0",
         "requests run on a throwaway engine before measuring", NULL},
        {"repeat", 0, CMD_OPT_INT, &o.repeat, "N", "1",
         "measured runs (throughput: mean and 95% confidence interval)", NULL},
        {"stats-json", 0, CMD_OPT_STR, &stats_json, "FILE", "none",
         "write the results (and the workload) as JSON (replaces an earlier pllm report; any "
         "other existing file needs --overwrite)",
         NULL},
        {"overwrite", 0, CMD_OPT_FLAG, &overwrite, NULL, "off",
         "let --stats-json replace an existing file that is not a pllm report", NULL},
        {"plot", 0, CMD_OPT_STR, &plot_path, "FILE.svg", "none",
         "draw the (first measured) run as an SVG: throughput and KV use over time, TTFT / TPOT "
         "/ E2E distributions, prefix cache hit rate",
         NULL},
        {"baseline", 0, CMD_OPT_STR, &baseline, "FILE", "none",
         "compare with a saved --stats-json (CI gate)", NULL},
        {"max-regression", 0, CMD_OPT_STR, &max_reg_s, "PCT", "5%",
         "gate: largest allowed throughput drop (a drop past it fails when the measured noise "
         "leaves P(>limit) >= 0.95; see --repeat)",
         NULL},
        {"current", 0, CMD_OPT_STR, &current, "FILE", "none",
         "gate a saved --stats-json against --baseline instead of running (nothing is measured)",
         NULL},
        {"log-interval", 0, CMD_OPT_FLOAT, &log_interval, "S", "10",
         "seconds between progress log lines when stderr is not a terminal", NULL},
        {"quiet", 'q', CMD_OPT_FLAG, &quiet, NULL, "off",
         "no progress or table on stderr (the gate's table still prints)", NULL},
    };
    for (size_t i = 0; i < PLLM_ARRAY_LEN(own); i++) opts[n_opts++] = own[i];
    cmd_engine_opts_table(&eo, opts, &n_opts, CMD_MAX_OPTS);
    const cmd_spec spec = {
        .usage = "pllm bench [OPTIONS]",
        .summary =
            "Measure throughput and latency on a workload and report them with vLLM's names "
            "(req/s, tok/s,\n"
            "TTFT/TPOT/ITL/E2E latency), the prefix cache hit rate and the engine's exact "
            "counters. Requests are\n"
            "greedy with ignore_eos. --baseline turns it into a CI gate (exit 1 on a regression).",
        .opts = opts,
        .n_opts = n_opts,
        .min_pos = 0,
        .max_pos = 0};
    int n_pos;
    int rc = cmd_parse(&spec, argc, argv, NULL, &n_pos);
    if (rc) return rc == 1 ? 0 : 2;
    if ((rc = cmd_engine_opts_finish(&eo)) != 0) return rc;
    if (strchr(eo.rt.device, ',')) {
        fprintf(stderr,
                "pllm: --device %s: bench runs on one device (a list of devices is for "
                "generate)\n",
                eo.rt.device);
        return 2;
    }
    pllm_format format;
    if (pllm_extra_fields_parse(o.extra_s, &o.extra) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 2;
    }
    if (pllm_format_parse(o.format_s, &format) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 2;
    }
    double max_reg;
    if (!parse_percent(max_reg_s, &max_reg)) {
        fprintf(stderr, "pllm: --max-regression '%s' is not a percentage (e.g. 5 or 5%%)\n",
                max_reg_s);
        return 2;
    }
    if (current) {
        if (!baseline) {
            fprintf(stderr, "pllm: --current FILE is judged against --baseline FILE: give both\n");
            return 2;
        }
        json_error_t e1, e2;
        json_t *b = json_load_file(baseline, 0, &e1), *c = json_load_file(current, 0, &e2);
        int g = 3;
        if (!b)
            fprintf(stderr, "pllm: --baseline %s:%d: %s\n", baseline, e1.line, e1.text);
        else if (!c)
            fprintf(stderr, "pllm: --current %s:%d: %s\n", current, e2.line, e2.text);
        else
            g = cmd_gate(b, c, max_reg, baseline);
        json_decref(b);
        json_decref(c);
        return g;
    }
    bool synthetic = !strcmp(o.dataset, "random") || !strcmp(o.dataset, "prefix");
    const char *path = NULL;
    if (!strcmp(o.dataset, "sharegpt")) {
        if (!o.dataset_path) {
            fprintf(
                stderr,
                "pllm: --dataset sharegpt needs --dataset-path FILE: a ShareGPT JSON file such as\n"
                "      ShareGPT_V3_unfiltered_cleaned_split.json (Hugging Face "
                "anon8231489123/ShareGPT_Vicuna_unfiltered)\n");
            return 2;
        }
        path = o.dataset_path;
    } else if (!synthetic) {
        path = o.dataset; /* a file */
        if (o.dataset_path) {
            fprintf(stderr, "pllm: --dataset-path goes with --dataset sharegpt; give a file as "
                            "--dataset FILE alone\n");
            return 2;
        }
    } else if (o.dataset_path) {
        fprintf(stderr, "pllm: --dataset %s is synthetic: --dataset-path does not apply\n",
                o.dataset);
        return 2;
    }
    if (!o.input_len_given) o.input_len = !strcmp(o.dataset, "prefix") ? 256 : 1024;
    if (!o.output_len_given) o.output_len = 128;
    const struct {
        const char *name;
        int32_t v, lo;
    } checks[] = {{"--num-prompts", o.num_prompts, 1},
                  {"--input-len", o.input_len, 1},
                  {"--output-len", o.output_len, 1},
                  {"--prefix-len", o.prefix_len, 0},
                  {"--num-prefixes", o.num_prefixes, 1},
                  {"--warmup", o.warmup, 0},
                  {"--repeat", o.repeat, 1}};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(checks); i++)
        if (checks[i].v < checks[i].lo) {
            fprintf(stderr, "pllm: %s must be >= %d, got %d\n", checks[i].name, checks[i].lo,
                    checks[i].v);
            return 2;
        }
    if (plot_path) {
        cmd_inputs in = {.path = {path, baseline}, .what = {"the dataset", "the baseline"}};
        rc = cmd_output_check(
            plot_path, "--plot", &in,
            overwrite || cmd_plot_is_ours(plot_path) ? CMD_OUT_OVERWRITE : CMD_OUT_NEW, 0);
        if (rc) return rc;
    }
    if (stats_json) {
        cmd_inputs in = {.path = {path, baseline}, .what = {"the dataset", "the baseline"}};
        rc = cmd_output_check(stats_json, "--stats-json", &in,
                              overwrite ? CMD_OUT_OVERWRITE : CMD_OUT_NEW, CMD_OUT_REPORT);
        if (rc) return rc;
    }
    json_t *base = NULL;
    if (baseline) {
        json_error_t jerr;
        base = json_load_file(baseline, 0, &jerr);
        if (!base) {
            fprintf(stderr, "pllm: --baseline %s:%d: %s\n", baseline, jerr.line, jerr.text);
            return 3;
        }
    }

    cmd_runtime rt;
    if ((rc = cmd_runtime_open(&rt, &eo.rt, quiet)) != 0) {
        json_decref(base);
        return rc;
    }
    if ((rc = cmd_check_kv_budget(&rt, &eo)) != 0 || (rc = cmd_size_kv(&rt, &eo)) != 0) {
        cmd_runtime_close(&rt);
        json_decref(base);
        return rc;
    }
    int32_t max_len = eo.ep.max_model_len > 0 ? eo.ep.max_model_len : rt.model->cfg.n_ctx_train;
    bench_workload w;
    memset(&w, 0, sizeof w);
    pllm_report rep;
    pllm_report_init(&rep, 0);
    json_t *out = NULL;
    cmd_plot plot;
    cmd_plot_init(&plot, false, 0);
    volatile sig_atomic_t interrupted = 0;
    double t_build = pllm_now();
    rc = synthetic ? build_synthetic(&w, &o, &rt, (uint64_t)eo.seed, max_len)
                   : build_from_file(&w, &o, &rt, path, format, max_len, quiet);
    if (rc) goto out;
    if (w.n == 0) {
        fprintf(stderr,
                "pllm: the dataset gave no usable prompt (%lld bad records, %lld too long for the "
                "context of %d)\n",
                (long long)w.n_bad, (long long)w.n_too_long, max_len);
        rc = 3;
        goto out;
    }
    w.fingerprint = fingerprint(&w);
    if (!quiet) {
        fprintf(stderr,
                "pllm: workload: %lld requests, %lld prompt tokens, %lld output tokens (built in "
                "%.2f s)",
                (long long)w.n, (long long)w.prompt_tokens, (long long)w.max_tokens,
                pllm_now() - t_build);
        if (w.n_bad || w.n_too_long || w.n_empty)
            fprintf(stderr, "; skipped %lld bad, %lld empty, %lld too long for the context of %d",
                    (long long)w.n_bad, (long long)w.n_empty, (long long)w.n_too_long, max_len);
        fputc('\n', stderr);
        if (w.n < o.num_prompts && !synthetic)
            fprintf(stderr,
                    "pllm: note: the dataset has only %lld usable prompts of the %d asked for\n",
                    (long long)w.n, o.num_prompts);
    }
    cmd_signals_install(&interrupted);
    cmd_plot_init(&plot, plot_path != NULL, pllm_now());
    const char *ds_name = synthetic ? o.dataset : path ? path : o.dataset;
    cmd_progress prog;
    pllm_engine_stats es0, es;
    pllm_engine_plan_stats plan0, plan;
    uint64_t digest = 0;
    memset(&es0, 0, sizeof es0);
    memset(&plan0, 0, sizeof plan0);
    if (o.warmup > 0) {
        cmd_progress_init(&prog, quiet, log_interval, "warmup", pllm_now());
        rc = run_once(&rt, &eo.ep, &w, PLLM_MIN((int64_t)o.warmup, w.n), NULL, false, &es, &plan,
                      &interrupted, &prog, NULL, &digest);
        if (rc) goto interrupted;
    }
    bool deterministic = true;
    uint64_t digest0 = 0;
    for (int i = 0; i < o.repeat; i++) {
        char what[32];
        snprintf(what, sizeof what, o.repeat > 1 ? "run %d/%d" : "bench", i + 1, o.repeat);
        cmd_progress_init(&prog, quiet, log_interval, what, pllm_now());
        rc = run_once(&rt, &eo.ep, &w, w.n, &rep, i > 0, &es, &plan, &interrupted, &prog,
                      i == 0 && plot_path ? &plot : NULL, &digest);
        if (rc) goto interrupted;
        if (i == 0) {
            es0 = es;
            plan0 = plan;
            digest0 = digest;
        } else if (digest != digest0) {
            deterministic = false;
        } else if (eo.ep.prefix_cache_dir) {
            /* later runs load what earlier ones saved: only the outputs must repeat */
        } else if (eo.ep.speculate == PLLM_SPEC_AUTO) {
            /* the policy follows the measured step times: the steps, the drafts and what they
             * change (blocks in use, so preemptions and recomputed prompts) may differ between
             * runs; the work asked for and done may not */
            if (es.output_tokens != es0.output_tokens || es.prompt_tokens != es0.prompt_tokens ||
                es.requests_finished != es0.requests_finished ||
                es.requests_failed != es0.requests_failed || plan.grouped != plan0.grouped)
                deterministic = false;
        } else if (memcmp(&es, &es0, sizeof es) != 0 ||
                   plan.blocks_computed != plan0.blocks_computed ||
                   plan.blocks_recomputed != plan0.blocks_recomputed ||
                   plan.grouped != plan0.grouped) {
            deterministic = false;
        }
    }
    /* the handlers stay until the results are written: a signal from here on only sets the flag,
     * which is no longer read, so finished runs still print and write their results */

    out = pllm_report_json(&rep, &es0);
    cmd_plan_stats_json(out, &plan0);
    char fp[24];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)w.fingerprint);
    char ident[24];
    snprintf(ident, sizeof ident, "%016llx", (unsigned long long)rt.model->identity);
    json_t *wl = json_object();
    json_object_set_new(wl, "dataset",
                        json_string(synthetic                        ? o.dataset
                                    : !strcmp(o.dataset, "sharegpt") ? "sharegpt"
                                                                     : "file"));
    if (path) json_object_set_new(wl, "dataset_path", json_string(path));
    json_object_set_new(wl, "fingerprint", json_string(fp));
    json_object_set_new(wl, "num_prompts", json_integer(o.num_prompts));
    json_object_set_new(wl, "num_requests", json_integer(w.n));
    json_object_set_new(wl, "input_len",
                        synthetic || o.input_len_given ? json_integer(o.input_len)
                                                       : json_string("from data"));
    json_object_set_new(wl, "output_len",
                        synthetic || o.output_len_given ? json_integer(o.output_len)
                                                        : json_string("from data"));
    if (!strcmp(o.dataset, "prefix")) {
        json_object_set_new(wl, "prefix_len", json_integer(o.prefix_len));
        json_object_set_new(wl, "num_prefixes", json_integer(o.num_prefixes));
    }
    json_object_set_new(wl, "seed", json_integer(eo.seed));
    json_object_set_new(wl, "prompt_tokens", json_integer(w.prompt_tokens));
    json_object_set_new(wl, "output_tokens", json_integer(w.max_tokens));
    json_object_set_new(wl, "sampling", json_string("greedy, ignore_eos"));
    json_object_set_new(wl, "model",
                        json_pack("{s:s, s:s}", "name", rt.model->name, "identity", ident));
    json_object_set_new(wl, "engine", engine_params_json(&eo.ep, &es0, max_len));
    json_t *setup =
        json_pack("{s:s, s:s, s:i, s:i, s:i}", "device", rt.device_name, "kernels", rt.kernels,
                  "threads", rt.threads, "warmup", o.warmup, "repeat", o.repeat);
    if (rt.dev.kind == CMD_DEVICE_CUDA)
        json_object_set_new(setup, "gpu_memory_fraction", json_real(eo.rt.gpu_memory_fraction));
    json_t *doc = json_pack("{s:s, s:s, s:o, s:o}", "pllm_version", BENCH_VERSION, "command",
                            "bench", "workload", wl, "setup", setup);
    json_object_update(doc, out);
    json_decref(out);
    out = doc;
    json_object_set_new(out, "counters_repeat", json_boolean(deterministic));
    char dg[24];
    snprintf(dg, sizeof dg, "%016llx", (unsigned long long)digest0);
    json_object_set_new(out, "output_digest", json_string(dg));
    json_object_set_new(out, "peak_rss_mb", json_real(cmd_peak_rss_mb()));

    if (!quiet) {
        char ds[256], rss[32], runs[96], best[96], blocks[96], device[512];
        cmd_runtime_describe(&rt, device, sizeof device);
        snprintf(best, sizeof best, "%.2f%% (%lld of %lld prompt tokens)",
                 100.0 * plan0.best_hit_rate, (long long)plan0.best_cached_tokens,
                 (long long)plan0.prompt_tokens);
        snprintf(blocks, sizeof blocks,
                 "%lld computed, %lld of them recomputed; %lld requests grouped",
                 (long long)plan0.blocks_computed, (long long)plan0.blocks_recomputed,
                 (long long)plan0.grouped);
        if (synthetic && !strcmp(o.dataset, "prefix"))
            snprintf(ds, sizeof ds, "prefix: %d prefixes of %d + %d tokens, %d out", o.num_prefixes,
                     o.prefix_len, o.input_len, o.output_len);
        else if (synthetic)
            snprintf(ds, sizeof ds, "random: %d in, %d out", o.input_len, o.output_len);
        else
            snprintf(ds, sizeof ds, "%s (%s)", path,
                     o.output_len_given ? "fixed output length"
                                        : "output lengths from the data or 128");
        snprintf(rss, sizeof rss, "%.1f", cmd_peak_rss_mb());
        snprintf(runs, sizeof runs, "%d measured, %d warmup requests; counters %s", o.repeat,
                 o.warmup,
                 o.repeat > 1 ? (deterministic ? "identical in every run" : "DIFFER between runs")
                              : "from one run");
        pllm_report_note notes[] = {
            {"Device", device},           {"Best achievable hit rate", best},
            {"Prompt blocks", blocks},    {"Dataset", ds},
            {"Workload fingerprint", fp}, {"Measured", runs},
            {"Output digest", dg},        {"Peak RSS (MiB)", rss}};
        pllm_report_print(&rep, &es0, "pllm bench", notes, (int)PLLM_ARRAY_LEN(notes), stderr);
    }
    if (stats_json &&
        cmd_output_write_json(stats_json, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) {
        rc = 3;
        goto out;
    }
    if (plot_path) {
        char title[400], sub[768], device[512];
        cmd_runtime_describe(&rt, device, sizeof device);
        snprintf(title, sizeof title, "pllm bench: %s", ds_name);
        snprintf(sub, sizeof sub, "%s on %s: %lld requests, %lld steps%s", rt.model->name, device,
                 (long long)w.n, (long long)es0.steps,
                 o.repeat > 1 ? " (the first of the measured runs)" : "");
        plot.best_hit_rate = plan0.best_hit_rate;
        if (cmd_plot_write(&plot, plot_path, title, sub) != 0) {
            rc = 3;
            goto out;
        }
        if (!quiet) fprintf(stderr, "pllm: the run is drawn in %s\n", plot_path);
    }
    if (!deterministic) {
        fprintf(stderr, "pllm: the engine counters differ between runs of the same workload (a "
                        "determinism bug)\n");
        rc = 1;
    }
    if (rep.n_failed > 0 && rc == 0) rc = 1;
    if (base) {
        int g = cmd_gate(base, out, max_reg, baseline);
        if (g) rc = g;
    }
    goto out;
interrupted:
    cmd_signals_restore();
    if (rc == 130) fprintf(stderr, "pllm: interrupted; no results written\n");
out:
    cmd_plot_free(&plot);
    json_decref(out);
    json_decref(base);
    pllm_report_free(&rep);
    workload_free(&w);
    cmd_runtime_close(&rt);
    cmd_signals_restore();
    return rc;
}

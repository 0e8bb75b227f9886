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
 *
 * Files: this one reads the options (bench_parse, bench_check), builds the workload
 * (bench_feed: bench_workload.c), runs it (bench_step: bench_run.c) and reports (bench_doc,
 * bench_print, bench_plot); the gate is gate.c.
 */
#include "cmd/bench.h"
#include "cmd/commands.h"
#include "cmd/gate.h"
#include "cmd/options.h"
#include "cmd/output.h"
#include "cmd/shared.h"

#include <stdio.h>
#include <string.h>

#define BENCH_VERSION "0.1.0"

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

/* The command's options and what the run keeps of them. */
typedef struct bench_cmd {
    cmd_engine_opts eo;
    bench_opts o;
    const char *stats_json, *baseline, *max_reg_s, *current, *plot_path;
    float log_interval;
    bool quiet, overwrite;
    pllm_format format;
    double max_reg;
    bool synthetic;
    const char *path; /* the dataset file, or NULL (synthetic) */
} bench_cmd;

/* What the measured runs gave (the first run's counters; the later ones must repeat them). */
typedef struct bench_result {
    pllm_report rep;
    pllm_engine_stats es0;
    pllm_engine_plan_stats plan0;
    uint64_t digest0;
    bool deterministic;
} bench_result;

/* Read the command line: 0, -1 (--help: exit 0) or 2 (message printed). */
static int bench_parse(bench_cmd *b, int argc, char **argv)
{
    cmd_engine_opts_init(&b->eo);
    b->o = (bench_opts){.dataset = "sharegpt",
                        .format_s = "auto",
                        .extra_s = "error",
                        .num_prompts = 1000,
                        .prefix_len = 256,
                        .num_prefixes = 10,
                        .repeat = 1};
    b->max_reg_s = "5%";
    b->log_interval = 10;
    cmd_engine_opts *eo = &b->eo;
    bench_opts *o = &b->o;
    cmd_opt opts[CMD_MAX_OPTS];
    size_t n_opts = 0;
    cmd_opt own[] = {
        {"dataset", 0, CMD_OPT_STR, &o->dataset, "NAME|FILE", "sharegpt",
         "sharegpt, random, prefix, or a prompt file", NULL},
        {"dataset-path", 0, CMD_OPT_STR, &o->dataset_path, "FILE", "none (required for sharegpt)",
         "the ShareGPT file (JSON list or JSON lines, .zst ok)", NULL},
        {"format", 0, CMD_OPT_STR, &o->format_s, "FMT", "auto",
         "format of the dataset file: auto, pllm, openai, sharegpt", NULL},
        {"extra-fields", 0, CMD_OPT_STR, &o->extra_s, "MODE", "error",
         "fields a record's format does not know: error (the record is skipped as bad), ignore, "
         "passthrough (as generate; a benchmark writes no output lines, so the same as ignore)",
         NULL},
        {"num-prompts", 'n', CMD_OPT_INT, &o->num_prompts, "N", "1000",
         "requests (the first N usable records of a file)", NULL},
        {"input-len", 0, CMD_OPT_INT, &o->input_len, "N",
         "random: 1024; prefix: 256 after the prefix; files: from the data",
         "prompt tokens (on a file: cut or repeat every prompt to N)", &o->input_len_given},
        {"output-len", 0, CMD_OPT_INT, &o->output_len, "N",
         "from the data (reply or max_tokens), else 128",
         "output tokens per request (greedy, ignore_eos)", &o->output_len_given},
        {"prefix-len", 0, CMD_OPT_INT, &o->prefix_len, "N", "256",
         "prefix: tokens of each shared prefix", NULL},
        {"num-prefixes", 0, CMD_OPT_INT, &o->num_prefixes, "N", "10",
         "prefix: number of distinct shared prefixes", NULL},
        {"warmup", 0, CMD_OPT_INT, &o->warmup, "N", "0",
         "requests run on a throwaway engine before measuring", NULL},
        {"repeat", 0, CMD_OPT_INT, &o->repeat, "N", "1",
         "measured runs (throughput: mean and 95% confidence interval)", NULL},
        {"stats-json", 0, CMD_OPT_STR, &b->stats_json, "FILE", "none",
         "write the results (and the workload) as JSON (replaces an earlier pllm report; any "
         "other existing file needs --overwrite)",
         NULL},
        {"overwrite", 0, CMD_OPT_FLAG, &b->overwrite, NULL, "off",
         "let --stats-json replace an existing file that is not a pllm report", NULL},
        {"plot", 0, CMD_OPT_STR, &b->plot_path, "FILE.svg", "none",
         "draw the (first measured) run as an SVG: throughput and KV use over time, TTFT / TPOT "
         "/ E2E distributions, prefix cache hit rate",
         NULL},
        {"baseline", 0, CMD_OPT_STR, &b->baseline, "FILE", "none",
         "compare with a saved --stats-json (CI gate)", NULL},
        {"max-regression", 0, CMD_OPT_STR, &b->max_reg_s, "PCT", "5%",
         "gate: largest allowed throughput drop (a drop past it fails when the measured noise "
         "leaves P(>limit) >= 0.95; see --repeat)",
         NULL},
        {"current", 0, CMD_OPT_STR, &b->current, "FILE", "none",
         "gate a saved --stats-json against --baseline instead of running (nothing is measured)",
         NULL},
        {"log-interval", 0, CMD_OPT_FLOAT, &b->log_interval, "S", "10",
         "seconds between progress log lines when stderr is not a terminal", NULL},
        {"quiet", 'q', CMD_OPT_FLAG, &b->quiet, NULL, "off",
         "no progress or table on stderr (the gate's table still prints)", NULL},
    };
    for (size_t i = 0; i < PLLM_ARRAY_LEN(own); i++) opts[n_opts++] = own[i];
    cmd_engine_opts_table(eo, opts, &n_opts, CMD_MAX_OPTS);
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
    if (rc) return rc == 1 ? -1 : 2;
    if ((rc = cmd_engine_opts_finish(eo)) != 0) return rc;
    if (strchr(eo->rt.device, ',')) {
        fprintf(stderr,
                "pllm: --device %s: bench runs on one device (a list of devices is for "
                "generate)\n",
                eo->rt.device);
        return 2;
    }
    if (pllm_extra_fields_parse(o->extra_s, &o->extra) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 2;
    }
    if (pllm_format_parse(o->format_s, &b->format) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 2;
    }
    if (!cmd_gate_parse_percent(b->max_reg_s, &b->max_reg)) {
        fprintf(stderr, "pllm: --max-regression '%s' is not a percentage (e.g. 5 or 5%%)\n",
                b->max_reg_s);
        return 2;
    }
    return 0;
}

/* The workload's options against each other, and the outputs: 0, 2 or 3 (message printed). */
static int bench_check(bench_cmd *b)
{
    bench_opts *o = &b->o;
    int rc;
    b->synthetic = !strcmp(o->dataset, "random") || !strcmp(o->dataset, "prefix");
    b->path = NULL;
    if (!strcmp(o->dataset, "sharegpt")) {
        if (!o->dataset_path) {
            fprintf(
                stderr,
                "pllm: --dataset sharegpt needs --dataset-path FILE: a ShareGPT JSON file such as\n"
                "      ShareGPT_V3_unfiltered_cleaned_split.json (Hugging Face "
                "anon8231489123/ShareGPT_Vicuna_unfiltered)\n");
            return 2;
        }
        b->path = o->dataset_path;
    } else if (!b->synthetic) {
        b->path = o->dataset; /* a file */
        if (o->dataset_path) {
            fprintf(stderr, "pllm: --dataset-path goes with --dataset sharegpt; give a file as "
                            "--dataset FILE alone\n");
            return 2;
        }
    } else if (o->dataset_path) {
        fprintf(stderr, "pllm: --dataset %s is synthetic: --dataset-path does not apply\n",
                o->dataset);
        return 2;
    }
    if (!o->input_len_given) o->input_len = !strcmp(o->dataset, "prefix") ? 256 : 1024;
    if (!o->output_len_given) o->output_len = 128;
    const struct {
        const char *name;
        int32_t v, lo;
    } checks[] = {{"--num-prompts", o->num_prompts, 1},
                  {"--input-len", o->input_len, 1},
                  {"--output-len", o->output_len, 1},
                  {"--prefix-len", o->prefix_len, 0},
                  {"--num-prefixes", o->num_prefixes, 1},
                  {"--warmup", o->warmup, 0},
                  {"--repeat", o->repeat, 1}};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(checks); i++)
        if (checks[i].v < checks[i].lo) {
            fprintf(stderr, "pllm: %s must be >= %d, got %d\n", checks[i].name, checks[i].lo,
                    checks[i].v);
            return 2;
        }
    if (b->plot_path) {
        cmd_inputs in = {.path = {b->path, b->baseline}, .what = {"the dataset", "the baseline"}};
        rc = cmd_output_check(
            b->plot_path, "--plot", &in,
            b->overwrite || cmd_plot_is_ours(b->plot_path) ? CMD_OUT_OVERWRITE : CMD_OUT_NEW, 0);
        if (rc) return rc;
    }
    if (b->stats_json) {
        cmd_inputs in = {.path = {b->path, b->baseline}, .what = {"the dataset", "the baseline"}};
        rc = cmd_output_check(b->stats_json, "--stats-json", &in,
                              b->overwrite ? CMD_OUT_OVERWRITE : CMD_OUT_NEW, CMD_OUT_REPORT);
        if (rc) return rc;
    }
    return 0;
}

/* The workload: 0, or 2 / 3 (message printed). */
static int bench_feed(const bench_cmd *b, const cmd_runtime *rt, int32_t max_len, bench_workload *w)
{
    const bench_opts *o = &b->o;
    double t_build = pllm_now();
    int rc = b->synthetic
                 ? cmd_bench_workload_synthetic(w, o, rt, (uint64_t)b->eo.seed, max_len)
                 : cmd_bench_workload_from_file(w, o, rt, b->path, b->format, max_len, b->quiet);
    if (rc) return rc;
    if (w->n == 0) {
        fprintf(stderr,
                "pllm: the dataset gave no usable prompt (%lld bad records, %lld too long for the "
                "context of %d)\n",
                (long long)w->n_bad, (long long)w->n_too_long, max_len);
        return 3;
    }
    w->fingerprint = cmd_bench_workload_fingerprint(w);
    if (!b->quiet) {
        fprintf(stderr,
                "pllm: workload: %lld requests, %lld prompt tokens, %lld output tokens (built in "
                "%.2f s)",
                (long long)w->n, (long long)w->prompt_tokens, (long long)w->max_tokens,
                pllm_now() - t_build);
        if (w->n_bad || w->n_too_long || w->n_empty)
            fprintf(stderr, "; skipped %lld bad, %lld empty, %lld too long for the context of %d",
                    (long long)w->n_bad, (long long)w->n_empty, (long long)w->n_too_long, max_len);
        fputc('\n', stderr);
        if (w->n < o->num_prompts && !b->synthetic)
            fprintf(stderr,
                    "pllm: note: the dataset has only %lld usable prompts of the %d asked for\n",
                    (long long)w->n, o->num_prompts);
    }
    return 0;
}

/* The warmup and the measured runs: 0, 3 or 130 (message printed). */
/* Whether two runs' engine counters agree: every count, not the timings (the overlapped step
 * wall and device times, the speculation policy's fitted costs), nor struct padding. A counter
 * added to pllm_engine_stats belongs here. */
static bool same_counters(const pllm_engine_stats *a, const pllm_engine_stats *b)
{
#define SAME(f) (a->f == b->f)
    return SAME(steps) && SAME(preemptions) && SAME(prompt_tokens) &&
           SAME(prompt_tokens_computed) && SAME(prompt_tokens_cached) && SAME(output_tokens) &&
           SAME(requests_finished) && SAME(requests_failed) && SAME(peak_blocks_used) &&
           SAME(blocks_used) && SAME(n_blocks) && SAME(block_size) && SAME(spec_steps) &&
           SAME(spec_drafted) && SAME(spec_accepted) && SAME(decode_samples) &&
           SAME(decode_tokens) && SAME(overlap) && SAME(steps_overlapped) && SAME(steps_sync) &&
           SAME(sync_penalties) && SAME(sync_speculation) && SAME(wasted_slots) &&
           SAME(pending_penalty_samples);
#undef SAME
}

static int bench_step(const bench_cmd *b, const cmd_runtime *rt, const bench_workload *w,
                      volatile sig_atomic_t *interrupted, cmd_plot *plot, bench_result *res)
{
    const bench_opts *o = &b->o;
    const cmd_engine_opts *eo = &b->eo;
    int rc = 0;
    cmd_progress prog;
    pllm_engine_stats es;
    pllm_engine_plan_stats plan;
    uint64_t digest = 0;
    if (o->warmup > 0) {
        cmd_progress_init(&prog, b->quiet, b->log_interval, "warmup", pllm_now());
        rc = cmd_bench_run_once(rt, &eo->ep, w, PLLM_MIN((int64_t)o->warmup, w->n), NULL, false,
                                &es, &plan, interrupted, &prog, NULL, &digest);
        if (rc) return rc;
    }
    res->deterministic = true;
    for (int i = 0; i < o->repeat; i++) {
        char what[32];
        snprintf(what, sizeof what, o->repeat > 1 ? "run %d/%d" : "bench", i + 1, o->repeat);
        cmd_progress_init(&prog, b->quiet, b->log_interval, what, pllm_now());
        rc = cmd_bench_run_once(rt, &eo->ep, w, w->n, &res->rep, i > 0, &es, &plan, interrupted,
                                &prog, i == 0 && b->plot_path ? plot : NULL, &digest);
        if (rc) return rc;
        if (i == 0) {
            res->es0 = es;
            res->plan0 = plan;
            res->digest0 = digest;
        } else if (digest != res->digest0) {
            res->deterministic = false;
        } else if (eo->ep.prefix_cache_dir) {
            /* later runs load what earlier ones saved: only the outputs must repeat */
        } else if (eo->ep.speculate == PLLM_SPEC_AUTO) {
            /* the policy follows the measured step times: the steps, the drafts and what they
             * change (blocks in use, so preemptions and recomputed prompts) may differ between
             * runs; the work asked for and done may not */
            if (es.output_tokens != res->es0.output_tokens ||
                es.prompt_tokens != res->es0.prompt_tokens ||
                es.requests_finished != res->es0.requests_finished ||
                es.requests_failed != res->es0.requests_failed ||
                plan.grouped != res->plan0.grouped)
                res->deterministic = false;
        } else if (!same_counters(&es, &res->es0) ||
                   plan.blocks_computed != res->plan0.blocks_computed ||
                   plan.blocks_recomputed != res->plan0.blocks_recomputed ||
                   plan.grouped != res->plan0.grouped) {
            res->deterministic = false;
        }
    }
    return rc;
}

/* The results as the --stats-json document (the workload, the setup, the report). */
static json_t *bench_doc(const bench_cmd *b, const cmd_runtime *rt, const bench_workload *w,
                         int32_t max_len, const bench_result *res)
{
    const bench_opts *o = &b->o;
    const cmd_engine_opts *eo = &b->eo;
    json_t *out = pllm_report_json(&res->rep, &res->es0);
    cmd_plan_stats_json(out, &res->plan0);
    char fp[24];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)w->fingerprint);
    char ident[24];
    snprintf(ident, sizeof ident, "%016llx", (unsigned long long)rt->model->identity);
    json_t *wl = json_object();
    json_object_set_new(wl, "dataset",
                        json_string(b->synthetic                      ? o->dataset
                                    : !strcmp(o->dataset, "sharegpt") ? "sharegpt"
                                                                      : "file"));
    if (b->path) json_object_set_new(wl, "dataset_path", json_string(b->path));
    json_object_set_new(wl, "fingerprint", json_string(fp));
    json_object_set_new(wl, "num_prompts", json_integer(o->num_prompts));
    json_object_set_new(wl, "num_requests", json_integer(w->n));
    json_object_set_new(wl, "input_len",
                        b->synthetic || o->input_len_given ? json_integer(o->input_len)
                                                           : json_string("from data"));
    json_object_set_new(wl, "output_len",
                        b->synthetic || o->output_len_given ? json_integer(o->output_len)
                                                            : json_string("from data"));
    if (!strcmp(o->dataset, "prefix")) {
        json_object_set_new(wl, "prefix_len", json_integer(o->prefix_len));
        json_object_set_new(wl, "num_prefixes", json_integer(o->num_prefixes));
    }
    json_object_set_new(wl, "seed", json_integer(eo->seed));
    json_object_set_new(wl, "prompt_tokens", json_integer(w->prompt_tokens));
    json_object_set_new(wl, "output_tokens", json_integer(w->max_tokens));
    json_object_set_new(wl, "sampling", json_string("greedy, ignore_eos"));
    json_object_set_new(wl, "model",
                        json_pack("{s:s, s:s}", "name", rt->model->name, "identity", ident));
    json_object_set_new(wl, "engine", engine_params_json(&eo->ep, &res->es0, max_len));
    json_t *setup =
        json_pack("{s:s, s:s, s:i, s:i, s:i}", "device", rt->device_name, "kernels", rt->kernels,
                  "threads", rt->threads, "warmup", o->warmup, "repeat", o->repeat);
    if (rt->dev.kind == CMD_DEVICE_CUDA)
        json_object_set_new(setup, "gpu_memory_fraction", json_real(eo->rt.gpu_memory_fraction));
    json_t *doc = json_pack("{s:s, s:s, s:o, s:o}", "pllm_version", BENCH_VERSION, "command",
                            "bench", "workload", wl, "setup", setup);
    json_object_update(doc, out);
    json_decref(out);
    out = doc;
    json_object_set_new(out, "counters_repeat", json_boolean(res->deterministic));
    char dg[24];
    snprintf(dg, sizeof dg, "%016llx", (unsigned long long)res->digest0);
    json_object_set_new(out, "output_digest", json_string(dg));
    json_object_set_new(out, "peak_rss_mb", json_real(cmd_peak_rss_mb()));
    return out;
}

/* The table on stderr. */
static void bench_print(const bench_cmd *b, const cmd_runtime *rt, const bench_workload *w,
                        const bench_result *res)
{
    const bench_opts *o = &b->o;
    const pllm_engine_plan_stats *pl = &res->plan0;
    char fp[24], dg[24];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)w->fingerprint);
    snprintf(dg, sizeof dg, "%016llx", (unsigned long long)res->digest0);
    char ds[256], rss[32], runs[96], best[96], blocks[96], device[512];
    cmd_runtime_describe(rt, device, sizeof device);
    snprintf(best, sizeof best, "%.2f%% (%lld of %lld prompt tokens)", 100.0 * pl->best_hit_rate,
             (long long)pl->best_cached_tokens, (long long)pl->prompt_tokens);
    snprintf(blocks, sizeof blocks, "%lld computed, %lld of them recomputed; %lld requests grouped",
             (long long)pl->blocks_computed, (long long)pl->blocks_recomputed,
             (long long)pl->grouped);
    if (b->synthetic && !strcmp(o->dataset, "prefix"))
        snprintf(ds, sizeof ds, "prefix: %d prefixes of %d + %d tokens, %d out", o->num_prefixes,
                 o->prefix_len, o->input_len, o->output_len);
    else if (b->synthetic)
        snprintf(ds, sizeof ds, "random: %d in, %d out", o->input_len, o->output_len);
    else
        snprintf(ds, sizeof ds, "%s (%s)", b->path,
                 o->output_len_given ? "fixed output length"
                                     : "output lengths from the data or 128");
    snprintf(rss, sizeof rss, "%.1f", cmd_peak_rss_mb());
    snprintf(runs, sizeof runs, "%d measured, %d warmup requests; counters %s", o->repeat,
             o->warmup,
             o->repeat > 1 ? (res->deterministic ? "identical in every run" : "DIFFER between runs")
                           : "from one run");
    pllm_report_note notes[] = {{"Device", device},           {"Best achievable hit rate", best},
                                {"Prompt blocks", blocks},    {"Dataset", ds},
                                {"Workload fingerprint", fp}, {"Measured", runs},
                                {"Output digest", dg},        {"Peak RSS (MiB)", rss}};
    pllm_report_print(&res->rep, &res->es0, "pllm bench", notes, (int)PLLM_ARRAY_LEN(notes),
                      stderr);
}

/* Draw the first measured run: 0 or 3 (message printed). */
static int bench_plot(const bench_cmd *b, const cmd_runtime *rt, const bench_workload *w,
                      const bench_result *res, const char *ds_name, cmd_plot *plot)
{
    char title[400], sub[768], device[512];
    cmd_runtime_describe(rt, device, sizeof device);
    snprintf(title, sizeof title, "pllm bench: %s", ds_name);
    snprintf(sub, sizeof sub, "%s on %s: %lld requests, %lld steps%s", rt->model->name, device,
             (long long)w->n, (long long)res->es0.steps,
             b->o.repeat > 1 ? " (the first of the measured runs)" : "");
    plot->best_hit_rate = res->plan0.best_hit_rate;
    if (cmd_plot_write(plot, b->plot_path, title, sub) != 0) return 3;
    if (!b->quiet) fprintf(stderr, "pllm: the run is drawn in %s\n", b->plot_path);
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    bench_cmd b;
    memset(&b, 0, sizeof b);
    int rc = bench_parse(&b, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    if (b.current) return cmd_gate_files(b.baseline, b.current, b.max_reg);
    if ((rc = bench_check(&b)) != 0) return rc;
    json_t *base = NULL;
    if (b.baseline) {
        json_error_t jerr;
        base = json_load_file(b.baseline, 0, &jerr);
        if (!base) {
            fprintf(stderr, "pllm: --baseline %s:%d: %s\n", b.baseline, jerr.line, jerr.text);
            return 3;
        }
    }

    cmd_runtime rt;
    if ((rc = cmd_runtime_open(&rt, &b.eo.rt, b.quiet)) != 0) {
        json_decref(base);
        return rc;
    }
    if ((rc = cmd_check_kv_budget(&rt, &b.eo)) != 0 || (rc = cmd_size_kv(&rt, &b.eo)) != 0) {
        cmd_runtime_close(&rt);
        json_decref(base);
        return rc;
    }
    int32_t max_len = b.eo.ep.max_model_len > 0 ? b.eo.ep.max_model_len : rt.model->cfg.n_ctx_train;
    bench_workload w;
    memset(&w, 0, sizeof w);
    bench_result res;
    memset(&res, 0, sizeof res);
    pllm_report_init(&res.rep, 0);
    json_t *out = NULL;
    cmd_plot plot;
    cmd_plot_init(&plot, false, 0);
    volatile sig_atomic_t interrupted = 0;
    if ((rc = bench_feed(&b, &rt, max_len, &w)) != 0) goto out;
    cmd_signals_install(&interrupted);
    cmd_plot_init(&plot, b.plot_path != NULL, pllm_now());
    const char *ds_name = b.synthetic ? b.o.dataset : b.path ? b.path : b.o.dataset;
    if ((rc = bench_step(&b, &rt, &w, &interrupted, &plot, &res)) != 0) goto interrupted;
    /* the handlers stay until the results are written: a signal from here on only sets the flag,
     * which is no longer read, so finished runs still print and write their results */

    out = bench_doc(&b, &rt, &w, max_len, &res);
    if (!b.quiet) bench_print(&b, &rt, &w, &res);
    if (b.stats_json &&
        cmd_output_write_json(b.stats_json, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) {
        rc = 3;
        goto out;
    }
    if (b.plot_path && (rc = bench_plot(&b, &rt, &w, &res, ds_name, &plot)) != 0) goto out;
    if (!res.deterministic) {
        fprintf(stderr, "pllm: the engine counters differ between runs of the same workload (a "
                        "determinism bug)\n");
        rc = 1;
    }
    if (res.rep.n_failed > 0 && rc == 0) rc = 1;
    if (base) {
        int g = cmd_gate(base, out, b.max_reg, b.baseline);
        if (g) rc = g;
    }
    goto out;
interrupted:
    if (rc == 130) fprintf(stderr, "pllm: interrupted; no results written\n");
out:
    cmd_plot_free(&plot);
    json_decref(out);
    json_decref(base);
    pllm_report_free(&res.rep);
    cmd_bench_workload_free(&w);
    cmd_runtime_close(&rt);
    cmd_signals_finish();
    return rc;
}

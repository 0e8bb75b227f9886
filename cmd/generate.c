/*
 * generate.c: `pllm generate INPUT`: read prompt records (pllm JSONL, OpenAI batch, ShareGPT;
 * JSON lines or a JSON list; .zst; '-' for stdin), run them through the engine, write one
 * JSON line per request as each finishes, and a statistics report.
 *
 * Streaming: records are read while the engine runs, with at most --window requests in the
 * engine at once (the engine's prefix grouping sees those), so memory does not grow with the
 * input. --order input writes lines in input order through a reorder buffer of at most
 * --reorder-buffer requests: when it is full (an early request is still running and later
 * ones have finished behind it), reading pauses until the early one finishes; the engine keeps
 * running what it has. Nothing is dropped, and memory stays bounded.
 *
 * A bad record becomes an error line (file, line, field) and the run goes on (--strict stops
 * at the first). SIGINT/SIGTERM stop after the current step: every finished request is
 * written (in input order, finished requests held in the reorder buffer are written even
 * though an earlier one is missing), the statistics so far are printed, and the exit code is
 * 130; --resume continues. A failing engine step or output write ends the run the same way
 * with exit code 3.
 *
 * The output is guarded (output.h): never the input itself, never an existing file unless
 * --overwrite or --resume says so. Beside it, OUT.pllm.json records the input's fingerprint
 * and the options that change results (runrecord.h); --resume refuses another input or other
 * options. Ids must be unique: a record whose id repeats an earlier one's becomes an error line
 * (with a null id, keyed by its line, so --resume tells it from the first). --resume skips a
 * request only when all of its output lines are there (n > 1: every index; a partly written
 * request runs again and only its missing completions are written); --retry-errors first
 * removes the earlier run's error lines so that their requests run again. --strict stops
 * reading at the first bad record but finishes and writes every request read before it.
 */
#include "cmd/commands.h"
#include "cmd/options.h"
#include "cmd/output.h"
#include "cmd/plot.h"
#include "cmd/progress.h"
#include "cmd/runrecord.h"
#include "cmd/runtime.h"
#include "cmd/devices.h"
#include "cmd/shard.h"
#include "cmd/shared.h"
#include "datasets/idset.h"
#include "datasets/io.h"
#include "datasets/ordered_writer.h"
#include "datasets/records.h"
#include "datasets/source.h"
#include "engine/engine.h"
#include "engine/report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEN_MAX_LOGGED_ERRORS 10

/* A request in flight. */
typedef struct gen_req {
    int64_t seq;         /* input order among the records that produce output */
    int64_t input_index; /* --shard: position among all the input's records */
    json_t *id;          /* pllm/sharegpt id; openai custom_id */
    int64_t line;
    pllm_endpoint endpoint;
    char *model;  /* openai: body.model */
    char *prompt; /* --echo: the prompt text */
    int32_t n, remaining;
    bool *written; /* [n] or NULL: --resume found these completions in the output already */
    bool want_logprobs;
    int32_t top_logprobs;
    json_t *choices; /* openai: [n] */
    json_t *metadata; /* the record's metadata, echoed into its output lines, or NULL */
    pllm_openai_usage usage;
    struct gen_req *prev, *next; /* the list of live requests */
} gen_req;

typedef struct gen_ctx {
    pllm_ordered_writer ow; /* the output, in completion or input order */
    bool openai_out;
    pllm_output_opts oo;
    const pllm_tokenizer *tok;
    const char *model_name;
    pllm_output_order order;
    int64_t in_flight;
    gen_req *live; /* requests in the engine (freed at the end if a run stops early) */
    pllm_report rep;
    cmd_plot plot; /* --plot */
    cmd_progress prog;
    cmd_progress_state ps;
    int64_t n_logged;
    bool quiet;
    const cmd_shard *shard; /* --shard: output lines carry input_index */
    int64_t cur_index;      /* --shard: the input_index of the record being read */
} gen_ctx;

static void gen_req_link(gen_ctx *g, gen_req *r)
{
    r->next = g->live;
    if (g->live) g->live->prev = r;
    g->live = r;
}

static void gen_req_unlink(gen_ctx *g, gen_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        g->live = r->next;
    if (r->next) r->next->prev = r->prev;
}

static void gen_req_free(gen_req *r)
{
    if (!r) return;
    json_decref(r->id);
    json_decref(r->choices);
    json_decref(r->metadata);
    free(r->written);
    free(r->model);
    free(r->prompt);
    free(r);
}

/* The fewest significant digits (15..17) that print every real in v back to itself: 0.1
 * is written as 0.1, as the input had it, not 0.10000000000000001. */
static int real_digits(const json_t *v)
{
    int d = 15;
    if (json_is_real(v)) {
        double x = json_real_value(v);
        char buf[40];
        for (; d < 17; d++) {
            snprintf(buf, sizeof buf, "%.*g", d, x);
            if (strtod(buf, NULL) == x) break;
        }
    } else if (json_is_object(v)) {
        const char *k;
        json_t *e;
        json_object_foreach((json_t *)v, k, e) d = PLLM_MAX(d, real_digits(e));
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            d = PLLM_MAX(d, real_digits(json_array_get(v, i)));
    }
    return d;
}

/* Add "metadata": <the record's metadata> to an output line (owned; NULL stays NULL). */
static char *tag_metadata(char *line, const json_t *metadata)
{
    if (!line || !metadata) return line;
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] != '}') n--;
    if (n == 0) return line;
    char *m = json_dumps(metadata, JSON_ENCODE_ANY | JSON_COMPACT |
                                       JSON_REAL_PRECISION(real_digits(metadata)));
    pllm_buf b = {0};
    bool empty = n >= 2 && line[n - 2] == '{';
    if (!m || pllm_buf_append(&b, line, n - 1) != PLLM_OK ||
        pllm_buf_appendf(&b, "%s\"metadata\":%s}", empty ? "" : ",", m) != PLLM_OK) {
        pllm_buf_free(&b);
        free(m);
        free(line);
        return NULL;
    }
    free(m);
    free(line);
    return b.s;
}

static void on_done(const pllm_completion *c, void *arg)
{
    gen_ctx *g = arg;
    gen_req *r = c->user;
    pllm_report_add(&g->rep, c);
    cmd_plot_completion(&g->plot, c);
    char *line = NULL;
    if (g->openai_out) {
        json_t *choice = NULL;
        if (pllm_openai_choice(&choice, r->endpoint, c, r->want_logprobs, r->top_logprobs,
                               g->tok) == PLLM_OK)
            json_array_set_new(r->choices, (size_t)c->index, choice);
        r->usage.prompt_tokens = c->prompt_tokens;
        r->usage.completion_tokens += c->n_tokens;
        if (c->index == 0) r->usage.cached_tokens = c->cached_tokens;
        if (r->remaining == 1) {
            json_t *choices = r->choices;
            r->choices = NULL;
            if (pllm_output_openai(&line, r->id, r->line, r->endpoint,
                                   r->model ? r->model : g->model_name, choices, &r->usage,
                                   cmd_unix_time()) != PLLM_OK)
                line = NULL;
            line = tag_metadata(line, r->metadata);
            if (g->shard->on) line = cmd_shard_tag(line, r->input_index);
            pllm_ordered_writer_hold(&g->ow, r->seq, 0, line);
        }
    } else if (r->written && r->written[c->index]) {
        /* written by the run this one resumes: the slot still expects a line, which is empty */
        if (g->order == PLLM_ORDER_INPUT)
            pllm_ordered_writer_put(&g->ow, r->seq, c->index, pllm_strdup(""));
    } else {
        if (pllm_output_completion(&line, r->id, r->prompt, r->n, c, -1, &g->oo) != PLLM_OK)
            line = NULL;
        line = tag_metadata(line, r->metadata);
        if (g->shard->on) line = cmd_shard_tag(line, r->input_index);
        pllm_ordered_writer_hold(&g->ow, r->seq, c->index, line);
    }
    g->ps.output_tokens += c->n_tokens;
    g->ps.prompt_tokens += c->prompt_tokens;
    g->ps.cached_tokens += c->cached_tokens;
    if (c->finish == PLLM_FINISH_ERROR) g->ps.failed++;
    if (--r->remaining == 0) {
        g->ps.done++;
        gen_req_unlink(g, r);
        gen_req_free(r);
        g->in_flight--;
    }
}

/* The requests in the engine that did not finish (a stopped run): their count, and the first
 * few ids in out ("5 (ids q1, q2, ...)"); ids (may be NULL) gets every id as a JSON list. */
static int64_t unfinished(const gen_ctx *g, char *out, size_t cap, json_t *ids)
{
    int64_t n = 0;
    pllm_buf b = {0};
    const gen_req *last = g->live;
    while (last && last->next) last = last->next;
    for (const gen_req *r = last; r; r = r->prev) { /* oldest first: input order */
        char *t = pllm_record_id_text(r->id);
        if (n < 8) pllm_buf_appendf(&b, "%s%s", n ? ", " : "", t ? t : "?");
        if (ids) json_array_append_new(ids, r->id ? json_deep_copy(r->id) : json_null());
        free(t);
        n++;
    }
    if (n > 8) pllm_buf_appendf(&b, ", ... %lld more", (long long)(n - 8));
    snprintf(out, cap, "%lld%s%s%s", (long long)n, n ? " (ids " : "", n && b.s ? b.s : "",
             n ? ")" : "");
    pllm_buf_free(&b);
    return n;
}

/* A record that never runs: its error line. dup_id: the record's id repeats an earlier one's,
 * so the line carries a null id (its --resume key is its line: pllm_record_loc_key). */
static void reject(gen_ctx *g, int64_t seq, const pllm_record *rec, const char *msg, bool quietly,
                   bool dup_id)
{
    char *line = NULL;
    pllm_report_add_rejected(&g->rep);
    json_t *null_id = json_null();
    const json_t *id = dup_id ? (g->openai_out ? NULL : null_id) : rec->id;
    pllm_status st = g->openai_out
                         ? pllm_output_openai_error(&line, id, rec->line, rec->element, msg, 400)
                         : pllm_output_error(&line, id, rec->line, rec->element, msg);
    json_decref(null_id);
    if (st == PLLM_OK) line = tag_metadata(line, rec->metadata);
    if (st == PLLM_OK && g->shard->on) line = cmd_shard_tag(line, g->cur_index);
    pllm_ordered_writer_put(&g->ow, seq, 0, st == PLLM_OK ? line : NULL);
    g->ps.done++;
    g->ps.failed++;
    if (!g->quiet && !quietly && g->n_logged < GEN_MAX_LOGGED_ERRORS) {
        cmd_progress_clear(&g->prog);
        fprintf(stderr, "pllm: %s\n", msg);
        if (++g->n_logged == GEN_MAX_LOGGED_ERRORS)
            fprintf(stderr, "pllm: (further bad records are reported in the output only)\n");
    }
}

int cmd_generate(int argc, char **argv)
{
    /* Handlers first: a signal while options are read or the model loads must still end in
     * the orderly way (the main loop sees the flag before its first step and exits 130). */
    static volatile sig_atomic_t interrupted; /* static: the handler keeps its address */
    interrupted = 0;
    cmd_signals_install(&interrupted);
    cmd_engine_opts eo;
    cmd_engine_opts_init(&eo);
    cmd_sampling_opts so;
    cmd_sampling_opts_init(&so, 256, "the model's max_new_tokens, else 256");
    const char *out_path = "-", *stats_json = NULL, *format_s = "auto", *out_format_s = "auto",
               *order_s = "completion", *extra_s = "error", *plot = NULL;
    int32_t window = 1024, reorder = 4096;
    int64_t limit = 0;
    float log_interval = 10;
    bool echo = false, token_ids = false, strict = false, quiet = false, resume = false,
         overwrite = false, retry_errors = false;
    cmd_shard_opts sho = {.key_tokens = PLLM_SHARD_KEY_TOKENS};

    cmd_opt opts[CMD_MAX_OPTS];
    size_t n_opts = 0;
    cmd_opt own[] = {
        {"output", 'o', CMD_OPT_STR, &out_path, "FILE", "- (stdout)",
         "output file (.zst compresses)", NULL},
        {"format", 0, CMD_OPT_STR, &format_s, "FMT", "auto",
         "input format: auto, pllm, openai, sharegpt", NULL},
        {"extra-fields", 0, CMD_OPT_STR, &extra_s, "MODE", "error",
         "record fields the format does not know: error (the record fails, naming the field), "
         "ignore, or passthrough (echoed in the output line's \"metadata\"; a record's own "
         "\"metadata\" field is always echoed)",
         NULL},
        {"plot", 0, CMD_OPT_STR, &plot, "FILE.svg", "none",
         "draw the run (throughput, KV use, latency distributions, prefix hits) as an SVG", NULL},
        {"output-format", 0, CMD_OPT_STR, &out_format_s, "FMT",
         "auto (openai for openai input, else pllm)", "output format: auto, pllm, openai", NULL},
        {"order", 0, CMD_OPT_STR, &order_s, "ORDER", "completion",
         "output order: completion (as requests finish) or input (reordered)", NULL},
        {"reorder-buffer", 0, CMD_OPT_INT, &reorder, "N", "4096",
         "--order input: requests held for order at most; when full, reading pauses", NULL},
        {"window", 0, CMD_OPT_INT, &window, "N", "1024",
         "requests in the engine at once; the prefix planner groups shared prefixes among these",
         NULL},
        {"limit", 0, CMD_OPT_INT64, &limit, "N", "0 (all)", "read only the first N records", NULL},
        {"echo", 0, CMD_OPT_FLAG, &echo, NULL, "off",
         "include the prompt (as rendered) in each output record", NULL},
        {"token-ids", 0, CMD_OPT_FLAG, &token_ids, NULL, "off", "include the generated token ids",
         NULL},
        {"strict", 0, CMD_OPT_FLAG, &strict, NULL, "off",
         "stop reading at the first bad record (its error line is written, and every request "
         "read before it finishes), exit 3",
         NULL},
        {"resume", 0, CMD_OPT_FLAG, &resume, NULL, "off",
         "continue the run that wrote -o FILE: skip the requests already in it and append the "
         "rest (refused when the input or the options differ from that run's)",
         NULL},
        {"retry-errors", 0, CMD_OPT_FLAG, &retry_errors, NULL, "off",
         "with --resume: remove the earlier run's error lines from the output and run their "
         "requests again",
         NULL},
        {"overwrite", 0, CMD_OPT_FLAG, &overwrite, NULL, "off",
         "replace an existing output file (without it, an existing non-empty -o FILE is refused)",
         NULL},
        {"stats-json", 0, CMD_OPT_STR, &stats_json, "FILE", "none",
         "also write the statistics as JSON to FILE", NULL},
        {"log-interval", 0, CMD_OPT_FLOAT, &log_interval, "S", "10",
         "seconds between progress log lines when stderr is not a terminal", NULL},
        {"quiet", 'q', CMD_OPT_FLAG, &quiet, NULL, "off",
         "no progress, report or warnings on stderr", NULL},
        {"shard", 0, CMD_OPT_STR, &sho.shard, "K/N", "none",
         "run only shard K of N (0-based) of the input; records sharing a prompt prefix stay in "
         "one shard; join the outputs with pllm merge",
         NULL},
        {"shard-key-tokens", 0, CMD_OPT_INT, &sho.key_tokens, "P", "128",
         "--shard: records whose prompts share their first P tokens land in the same shard", NULL},
        {"shard-balance", 0, CMD_OPT_STR, &sho.balance, "B", "tokens (hash on stdin)",
         "--shard: tokens (a first pass balances prompt tokens) or hash (one pass)", NULL},
    };
    for (size_t i = 0; i < PLLM_ARRAY_LEN(own); i++) opts[n_opts++] = own[i];
    cmd_sampling_opts_table(&so, opts, &n_opts, CMD_MAX_OPTS);
    cmd_engine_opts_table(&eo, opts, &n_opts, CMD_MAX_OPTS);
    const cmd_spec spec = {
        .usage = "pllm generate [OPTIONS] INPUT   (INPUT: a file, .zst, or - for stdin)",
        .summary = "Generate a completion for every prompt record. Input formats (detected from "
                   "the content, or --format):\n"
                   "  pllm      JSON lines {\"id\", \"prompt\"} or {\"id\", \"messages\": "
                   "[{\"role\", \"content\"}]} with optional\n"
                   "            sampling fields that override the options below\n"
                   "  openai    OpenAI batch lines {\"custom_id\", \"method\", \"url\", \"body\"}, "
                   "answered in the OpenAI batch output\n"
                   "            format (as vllm run-batch writes it)\n"
                   "  sharegpt  {\"id\", \"conversations\": [{\"from\", \"value\"}]}, as a JSON "
                   "list or JSON lines\n"
                   "Any format may also be one JSON list of records. One JSON line per request is "
                   "written as it finishes.\n"
                   "Sampling, per field: a record's own field > the option given below > the "
                   "model's generation defaults\n"
                   "(generation_config.json; --generation-config) > the built-in default.",
        .opts = opts,
        .n_opts = n_opts,
        .min_pos = 1,
        .max_pos = 1,
        .missing = "INPUT, the prompt records to run: a file (JSON lines or a JSON list, plain, "
                   ".zst or .gz) or - for stdin, e.g. pllm generate examples/prompts.jsonl"};
    const char *pos[1];
    int n_pos;
    int rc = cmd_parse(&spec, argc, argv, pos, &n_pos);
    if (rc) return rc == 1 ? 0 : 2;
    pllm_format format, out_format = PLLM_FORMAT_AUTO;
    if (pllm_format_parse(format_s, &format) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 2;
    }
    if (strcmp(out_format_s, "auto") && strcmp(out_format_s, "pllm") &&
        strcmp(out_format_s, "openai")) {
        fprintf(stderr, "pllm: --output-format '%s' is not one of auto, pllm, openai\n",
                out_format_s);
        return 2;
    }
    if (strcmp(out_format_s, "auto")) pllm_format_parse(out_format_s, &out_format);
    pllm_extra_fields extra;
    if (pllm_extra_fields_parse(extra_s, &extra) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 2;
    }
    pllm_output_order order;
    if (!strcmp(order_s, "completion"))
        order = PLLM_ORDER_COMPLETION;
    else if (!strcmp(order_s, "input"))
        order = PLLM_ORDER_INPUT;
    else {
        fprintf(stderr, "pllm: --order '%s' is not one of completion, input\n", order_s);
        return 2;
    }
    if (limit < 0) {
        fprintf(stderr, "pllm: --limit must be >= 0, got %lld\n", (long long)limit);
        return 2;
    }
    if (window < 1) {
        fprintf(stderr, "pllm: --window must be >= 1, got %d\n", window);
        return 2;
    }
    if (reorder < window) {
        fprintf(stderr, "pllm: --reorder-buffer (%d) must be >= --window (%d)\n", reorder, window);
        return 2;
    }
    if (retry_errors && !resume) {
        fprintf(stderr, "pllm: --retry-errors continues an earlier run: give --resume with it\n");
        return 2;
    }
    if (resume && strcmp(out_path, "-") == 0) {
        fprintf(stderr, "pllm: --resume needs an output file (-o FILE)\n");
        return 2;
    }
    if (resume && overwrite) {
        fprintf(stderr, "pllm: --resume continues the output file, --overwrite replaces it: give "
                        "one of them\n");
        return 2;
    }
    {
        cmd_inputs in = {.path = {pos[0]}, .what = {"the input"}};
        cmd_out_mode mode = resume ? CMD_OUT_RESUME : overwrite ? CMD_OUT_OVERWRITE : CMD_OUT_NEW;
        if ((rc = cmd_output_check(out_path, "-o", &in, mode, CMD_OUT_RESUMABLE)) != 0) return rc;
        cmd_inputs sin = {.path = {pos[0], strcmp(out_path, "-") ? out_path : NULL},
                          .what = {"the input", "the output (-o)"}};
        if (stats_json && (rc = cmd_output_check(stats_json, "--stats-json", &sin,
                                                 overwrite ? CMD_OUT_OVERWRITE : CMD_OUT_NEW,
                                                 CMD_OUT_REPORT)) != 0)
            return rc;
        if (plot &&
            (rc = cmd_output_check(
                 plot, "--plot", &sin,
                 overwrite || cmd_plot_is_ours(plot) ? CMD_OUT_OVERWRITE : CMD_OUT_NEW, 0)) != 0)
            return rc;
        if (plot && ((strcmp(out_path, "-") && !strcmp(plot, out_path)) ||
                     (stats_json && !strcmp(plot, stats_json)))) {
            fprintf(stderr, "pllm: --plot names the same file as -o or --stats-json: %s\n", plot);
            return 2;
        }
        if (stats_json && strcmp(out_path, "-") && strcmp(stats_json, out_path) == 0) {
            fprintf(stderr, "pllm: --stats-json and -o name the same file %s\n", out_path);
            return 2;
        }
    }
    pllm_request_params defaults;
    if ((rc = cmd_sampling_opts_finish(&so, &defaults)) != 0) return rc;
    if ((rc = cmd_engine_opts_finish(&eo)) != 0) return rc;
    if (cmd_devices_is_list(eo.rt.device)) {
        /* several GPUs: a worker process per device over the same partition, then a merge */
        const cmd_devices_run dr = {.devices = eo.rt.device,
                                    .out_path = out_path,
                                    .stats_json = stats_json,
                                    .plot = plot,
                                    .order_input = order == PLLM_ORDER_INPUT,
                                    .overwrite = overwrite,
                                    .resume = resume,
                                    .quiet = quiet,
                                    .shard_given = sho.shard != NULL};
        return cmd_devices_generate(argc, argv, &dr, &interrupted);
    }
    cmd_shard sh;
    if ((rc = cmd_shard_init(&sh, &sho, pos[0], eo.ep.block_size)) != 0) return rc;

    pllm_idset *done = NULL;
    pllm_hashset *seen = NULL; /* every record's key so far: duplicate ids */
    json_t *rec_input = NULL, *rec_opts = NULL;
    pllm_source *src = NULL;
    pllm_engine *eng = NULL;
    cmd_runtime rt;
    memset(&rt, 0, sizeof rt);
    gen_ctx g = {.oo = {.echo_prompt = echo, .token_ids = token_ids},
                 .quiet = quiet,
                 .order = order,
                 .shard = &sh};
    pllm_report_init(&g.rep, pllm_now());

    if (pllm_source_open(&src, pos[0], format) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        rc = 3;
        goto out;
    }
    pllm_source_set_extra_fields(src, extra);
    if (pllm_source_empty(src)) {
        fprintf(stderr, "pllm: %s holds no records (%s): nothing to generate\n",
                pllm_source_path(src),
                pllm_source_is_list(src) ? "an empty JSON list" : "it is empty or blank");
        rc = 2;
        goto out;
    }
    pllm_format in_format = pllm_source_format(src);
    g.openai_out = out_format == PLLM_FORMAT_OPENAI ||
                   (out_format == PLLM_FORMAT_AUTO && in_format == PLLM_FORMAT_OPENAI);
    if (!quiet)
        fprintf(stderr, "pllm: input %s: %s%s%s\n", pllm_source_path(src),
                pllm_format_name(in_format),
                pllm_source_is_list(src) ? " (a JSON list)" : " (JSON lines)",
                format == PLLM_FORMAT_AUTO ? ", detected" : "");
    if ((rc = cmd_runtime_open(&rt, &eo.rt, quiet)) != 0) goto out;
    if ((rc = cmd_check_kv_budget(&rt, &eo)) != 0) goto out;
    if ((rc = cmd_size_kv(&rt, &eo)) != 0) goto out;
    if ((rc = cmd_sampling_opts_apply_model(&so, rt.model, &defaults, quiet)) != 0) goto out;
    g.tok = rt.tok;
    g.oo.tok = rt.tok;
    g.model_name = rt.model->name;
    if (strcmp(out_path, "-") != 0) {
        /* which input and options the output belongs to: checked by --resume, then recorded */
        bool continuing = resume && cmd_output_exists(out_path);
        rec_input = cmd_run_record_input(pos[0]);
        rec_opts = cmd_run_record_options(
            pllm_format_name(in_format), g.openai_out ? "openai" : "pllm", echo, token_ids,
            rt.model->name, rt.model->identity, &defaults, (uint64_t)eo.seed);
        /* what else changes the output lines: recorded only when given, so that a run that
         * gives none of them still matches a record written before they existed */
        if (rec_opts && eo.rt.system_prompt)
            json_object_set_new(rec_opts, "system_prompt", json_string(eo.rt.system_prompt));
        if (rec_opts && rt.chat_src && eo.rt.chat_template)
            json_object_set_new(rec_opts, "chat_template", json_string(rt.chat_src));
        if (rec_opts && extra != PLLM_EXTRA_ERROR)
            json_object_set_new(rec_opts, "extra_fields", json_string(extra_s));
        if (!rec_input || !rec_opts) {
            rc = 3;
            goto out;
        }
        if (continuing && (rc = cmd_run_record_check(out_path, rec_input, rec_opts)) != 0) goto out;
        if (continuing) {
            pllm_output_scan scan;
            if (pllm_idset_create(&done) != PLLM_OK ||
                pllm_idset_scan_output(done, out_path, retry_errors, &scan) != PLLM_OK) {
                fprintf(stderr, "pllm: --resume: %s\n", pllm_errmsg());
                rc = 3;
                goto out;
            }
            if (!quiet)
                fprintf(stderr, "pllm: resuming: %lld output lines already in %s%s",
                        (long long)scan.n_lines, out_path,
                        scan.torn ? " (a torn last line was cut off)" : "");
            if (!quiet && retry_errors)
                fprintf(stderr, "; %lld error lines removed, their requests run again",
                        (long long)scan.n_dropped);
            if (!quiet) fputc('\n', stderr);
        }
        if ((rc = cmd_run_record_write(out_path, rec_input, rec_opts)) != 0) goto out;
    }
    if (pllm_hashset_create(&seen) != PLLM_OK) {
        fprintf(stderr, "pllm: out of memory\n");
        rc = 3;
        goto out;
    }
    sh.extra = extra;
    if ((rc = cmd_shard_prepare(&sh, &rt, pos[0], format, &defaults, limit, quiet)) != 0) goto out;
    if (pllm_engine_create(&eng, rt.model, &rt.backend, rt.tok, &eo.ep) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        rc = 3;
        goto out;
    }
    if (pllm_ordered_writer_init(&g.ow, NULL, order, reorder) != PLLM_OK) {
        fprintf(stderr, "pllm: out of memory for --reorder-buffer %d\n", reorder);
        rc = 3;
        goto out;
    }
    if (pllm_writer_open(&g.ow.w, out_path, resume) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        rc = 3;
        goto out;
    }
    if ((rc = cmd_shard_begin(&sh, out_path, resume, pos[0], g.model_name, rt.device_name, limit,
                              quiet)) != 0)
        goto out;
    double t0 = pllm_now();
    pllm_report_free(&g.rep);
    pllm_report_init(&g.rep, t0);
    cmd_plot_init(&g.plot, plot != NULL, t0);
    cmd_progress_init(&g.prog, quiet, log_interval, "generate", t0);

    const char *file = pllm_source_path(src);
    bool eof = false, input_error = false, engine_error = false, strict_stop = false;
    int64_t n_skipped = 0, next_seq = 0, n_read = 0;
    pllm_tokens ids = {0};
    pllm_buf rendered = {0};
    while (!interrupted && g.ow.write_st == PLLM_OK && !input_error) {
        /* At most `window` records are read between two engine steps, bad and skipped ones
         * included: in an input that is mostly rejected records, filling the window with valid
         * ones could otherwise read hundreds of thousands of lines before the first step. */
        int32_t n_round = 0;
        while (!eof && g.in_flight < window && n_round < window && g.ow.write_st == PLLM_OK &&
               !interrupted && pllm_ordered_writer_has_room(&g.ow, next_seq)) {
            n_round++;
            pllm_record rec;
            pllm_status st = pllm_source_next(src, &defaults, &rec, &eof);
            if (st != PLLM_OK) {
                if (st != PLLM_ERR_INTERRUPTED) {
                    cmd_progress_clear(&g.prog);
                    fprintf(stderr, "pllm: %s\n", pllm_errmsg());
                    input_error = true;
                }
                break;
            }
            if (eof) break;
            if (limit > 0 && ++n_read > limit) {
                pllm_record_free(&rec);
                eof = true;
                break;
            }
            if (!cmd_shard_keep(&sh, &rt, file, &rec, &ids, &g.cur_index)) {
                pllm_record_free(&rec);
                continue;
            }
            /* the key the output line will carry: the id, or for a repeated id the line */
            char *key = pllm_record_key(&rec);
            bool dup = false, *written = NULL;
            if (key && pllm_hashset_add(seen, key, &dup) == PLLM_OK && dup) {
                free(key);
                key = pllm_record_loc_key(&rec);
            }
            if (!key) {
                pllm_record_free(&rec);
                g.ow.write_st = pllm_errorf(PLLM_ERR_NOMEM, "out of memory");
                break;
            }
            if (done) {
                int32_t n = rec.error || dup || g.openai_out ? 1 : rec.params.n;
                bool skip = pllm_idset_count(done, key) > 0; /* one line: n == 1, or an error */
                if (!skip && n > 1) {
                    written = pllm_calloc((size_t)n, sizeof *written);
                    int32_t have = 0;
                    for (int32_t i = 0; written && i < n; i++) {
                        char *ck = pllm_completion_key(key, i);
                        written[i] = ck && pllm_idset_count(done, ck) > 0;
                        have += written[i];
                        free(ck);
                    }
                    skip = have == n;
                    if (have == 0 || skip) {
                        free(written);
                        written = NULL;
                    }
                }
                if (skip) {
                    free(key);
                    n_skipped++;
                    pllm_record_free(&rec);
                    continue;
                }
            }
            free(key);
            int64_t seq = next_seq++;
            ids.n = 0;
            rendered.n = 0;
            char msg[2048] = "";
            gen_req *r = NULL;
            if (rec.error) {
                snprintf(msg, sizeof msg, "%s", rec.error);
            } else if (dup) {
                char where[512];
                cmd_record_where(where, sizeof where, file, &rec);
                char *idt = pllm_record_id_text(rec.id);
                snprintf(msg, sizeof msg,
                         "%sfield '%s': duplicate id \"%s\" (an earlier record has it; ids must be "
                         "unique: --resume and OpenAI batch results are matched by id)",
                         where, rec.format == PLLM_FORMAT_OPENAI ? "custom_id" : "id",
                         idt ? idt : "?");
                free(idt);
            } else if ((st = cmd_record_tokens(&rt, file, &rec, &ids, echo ? &rendered : NULL)) !=
                       PLLM_OK) {
                snprintf(msg, sizeof msg, "%s", pllm_errmsg());
            } else if (!(r = pllm_calloc(1, sizeof *r))) {
                snprintf(msg, sizeof msg, "out of memory");
            } else {
                r->seq = seq;
                r->input_index = g.cur_index;
                r->id = json_incref(rec.id);
                r->line = rec.line;
                r->endpoint = rec.endpoint;
                r->n = r->remaining = rec.params.n;
                r->written = written;
                written = NULL;
                r->want_logprobs = rec.want_logprobs;
                r->top_logprobs = rec.top_logprobs;
                r->metadata = json_incref(rec.metadata);
                if (rec.model) r->model = pllm_strdup(rec.model);
                if (echo) r->prompt = pllm_strdup(rendered.s ? rendered.s : "");
                if (g.openai_out) {
                    r->choices = json_array();
                    for (int32_t i = 0; i < r->n; i++)
                        json_array_append_new(r->choices, json_null());
                }
                if (pllm_ordered_writer_open(&g.ow, seq, g.openai_out ? 1 : r->n) != PLLM_OK) {
                    snprintf(msg, sizeof msg, "out of memory");
                } else {
                    uint64_t req_id;
                    st = pllm_engine_add(eng, ids.ids, (int32_t)ids.n, &rec.params, r, &req_id);
                    if (st != PLLM_OK) {
                        char where[512];
                        cmd_record_where(where, sizeof where, file, &rec);
                        snprintf(msg, sizeof msg, "%sfield '%s': %s", where,
                                 rec.prompt                           ? "prompt"
                                 : rec.format == PLLM_FORMAT_SHAREGPT ? "conversations"
                                                                      : "messages",
                                 pllm_errmsg());
                        /* reopen the slot for the one error line */
                        pllm_ordered_writer_cancel(&g.ow, seq);
                    }
                }
            }
            free(written);
            if (msg[0]) {
                gen_req_free(r);
                if (pllm_ordered_writer_open(&g.ow, seq, 1) != PLLM_OK)
                    g.ow.write_st = PLLM_ERR_NOMEM;
                else
                    reject(&g, seq, &rec, msg, strict, dup);
                pllm_record_free(&rec);
                if (strict) {
                    /* read no further; the requests read before it still run and are written */
                    cmd_progress_clear(&g.prog);
                    fprintf(stderr,
                            "pllm: --strict: stopping at the first bad record (the requests "
                            "before it finish first): %s\n",
                            msg);
                    strict_stop = true;
                    eof = true;
                    break;
                }
                continue;
            }
            g.in_flight++;
            gen_req_link(&g, r);
            pllm_record_free(&rec);
        }
        g.ps.total = next_seq;
        g.ps.total_estimated = false;
        if (!eof) {
            uint64_t p, size;
            int64_t n_src;
            pllm_source_progress(src, &p, &size, &n_src);
            if (size > 0 && p > 0) {
                g.ps.total = (int64_t)((double)n_src * (double)size / (double)p + 0.5) - n_skipped;
                g.ps.total_estimated = true;
            } else {
                g.ps.total = -1;
            }
            if (limit > 0 && (g.ps.total < 0 || g.ps.total > limit - n_skipped)) {
                g.ps.total = limit - n_skipped;
                g.ps.total_estimated = true;
            }
        }
        cmd_progress_update(&g.prog, &g.ps, false);
        if (!pllm_engine_has_work(eng)) {
            if (eof || input_error) break;
            continue;
        }
        if (interrupted || input_error) break;
        pllm_status sst = pllm_engine_step(eng, on_done, &g);
        if (sst == PLLM_OK && (sst = pllm_model_check_files(rt.model)) != PLLM_OK) {
            /* the weights changed on disk under the run: nothing computed in this step is written
             */
            pllm_ordered_writer_release(&g.ow, false);
            cmd_progress_clear(&g.prog);
            fprintf(
                stderr,
                "pllm: the model's files changed during the run (restore them and resume): %s\n",
                pllm_errmsg());
            engine_error = true;
            break;
        }
        pllm_ordered_writer_release(&g.ow, true);
        if (plot) {
            pllm_engine_stats now;
            pllm_engine_get_stats(eng, &now);
            cmd_plot_step(&g.plot, pllm_now(), &now);
        }
        if (sst != PLLM_OK) {
            cmd_progress_clear(&g.prog);
            fprintf(stderr, "pllm: engine step failed: %s\n", pllm_errmsg());
            engine_error = true;
            break;
        }
    }
    pllm_tokens_free(&ids);
    pllm_buf_free(&rendered);
    /* The run's outcome is decided here. The handlers stay until the output is closed (the end
     * of a .zst frame is still to be written): a signal from now on only sets the flag, which
     * is no longer read, so a finished run still exits 0 with its output whole. */
    const bool stopped = interrupted;
    if (stopped || engine_error || input_error || g.ow.write_st != PLLM_OK)
        pllm_ordered_writer_flush_all(&g.ow);
    cmd_progress_finish(&g.prog, &g.ps);

    pllm_engine_stats es;
    pllm_engine_plan_stats plan;
    pllm_engine_get_stats(eng, &es);
    pllm_engine_get_plan_stats(eng, &plan);
    if (!quiet) {
        if (n_skipped)
            fprintf(stderr, "pllm: skipped %lld records already in the output\n",
                    (long long)n_skipped);
        char rss[32], best[96], blocks[96], device[512], unf[640];
        snprintf(rss, sizeof rss, "%.1f", cmd_peak_rss_mb());
        cmd_runtime_describe(&rt, device, sizeof device);
        snprintf(best, sizeof best, "%.2f%% (%lld of %lld prompt tokens)",
                 100.0 * plan.best_hit_rate, (long long)plan.best_cached_tokens,
                 (long long)plan.prompt_tokens);
        snprintf(blocks, sizeof blocks, "%lld computed, %lld of them recomputed",
                 (long long)plan.blocks_computed, (long long)plan.blocks_recomputed);
        bool cut = stopped || engine_error || input_error || g.ow.write_st != PLLM_OK;
        unfinished(&g, unf, sizeof unf, NULL);
        pllm_report_note notes[] = {{"Unfinished requests", unf},
                                    {"Device", device},
                                    {"Best achievable hit rate", best},
                                    {"Prompt blocks", blocks},
                                    {"Peak RSS (MiB)", rss}};
        pllm_report_print(&g.rep, &es,
                          stopped ? "pllm generate (interrupted)"
                          : cut   ? "pllm generate (stopped)"
                                  : "pllm generate",
                          cut ? notes : notes + 1, (int)PLLM_ARRAY_LEN(notes) - (cut ? 0 : 1),
                          stderr);
    }
    cmd_prefix_cache_report(eng, eo.ep.prefix_cache_dir, NULL, quiet);
    bool stats_failed = false;
    if (stats_json) {
        json_t *j = pllm_report_json(&g.rep, &es);
        cmd_plan_stats_json(j, &plan);
        cmd_prefix_cache_report(eng, eo.ep.prefix_cache_dir, j, true);
        json_object_set_new(j, "command", json_string("generate"));
        json_object_set_new(j, "device", json_string(rt.device_name));
        json_object_set_new(j, "kernels", json_string(rt.kernels));
        json_object_set_new(j, "input", json_string(file));
        json_object_set_new(j, "input_format", json_string(pllm_format_name(in_format)));
        json_object_set_new(j, "skipped_by_resume", json_integer(n_skipped));
        json_object_set_new(j, "interrupted", json_boolean(stopped));
        json_object_set_new(j, "stopped",
                            json_boolean(engine_error || input_error || g.ow.write_st != PLLM_OK));
        json_t *uids = json_array();
        char unf[640];
        int64_t n_unf = unfinished(&g, unf, sizeof unf, uids);
        json_object_set_new(j, "unfinished_requests", json_integer(n_unf));
        json_object_set_new(j, "unfinished_ids", uids);
        json_object_set_new(j, "peak_rss_mb", json_real(cmd_peak_rss_mb()));
        cmd_shard_json(&sh, j);
        stats_failed = cmd_output_write_json(stats_json, j, JSON_INDENT(2)) != 0;
        json_decref(j);
    }
    if (plot) {
        char sub[768], device[512];
        cmd_runtime_describe(&rt, device, sizeof device);
        snprintf(sub, sizeof sub, "%s on %s: %lld requests (%lld failed), %lld steps%s",
                 g.model_name, device, (long long)(g.rep.n_ok + g.rep.n_failed),
                 (long long)g.rep.n_failed, (long long)es.steps, stopped ? ", interrupted" : "");
        char title[600];
        snprintf(title, sizeof title, "pllm generate %s", file);
        g.plot.best_hit_rate = plan.best_hit_rate;
        if (cmd_plot_write(&g.plot, plot, title, sub) != 0)
            stats_failed = true;
        else if (!quiet)
            fprintf(stderr, "pllm: the run is drawn in %s\n", plot);
    }
    const char *where = strcmp(out_path, "-") ? out_path : "the output";
    if (g.ow.write_st != PLLM_OK) {
        fprintf(stderr,
                "pllm: writing the output failed: %s\n       the lines written before it are "
                "intact; rerun with --resume\n",
                pllm_errmsg());
        rc = 3;
    } else if (stopped) {
        char unf[640];
        int64_t n_unf = unfinished(&g, unf, sizeof unf, NULL);
        fprintf(stderr,
                "pllm: interrupted: %lld output lines are in %s; %lld requests in flight did "
                "not finish%s%s; rerun the same command with --resume to continue\n",
                (long long)g.ow.n_lines, where, (long long)n_unf, strchr(unf, '(') ? " " : "",
                strchr(unf, '(') ? strchr(unf, '(') : "");
        rc = 130;
    } else if (engine_error) {
        char unf[640];
        int64_t n_unf = unfinished(&g, unf, sizeof unf, NULL);
        fprintf(stderr,
                "pllm: the run stopped: %lld output lines are in %s; %lld requests in flight did "
                "not finish%s%s; rerun the same command with --resume to continue\n",
                (long long)g.ow.n_lines, where, (long long)n_unf, strchr(unf, '(') ? " " : "",
                strchr(unf, '(') ? strchr(unf, '(') : "");
        rc = 3;
    } else if (input_error) {
        fprintf(stderr, "pllm: the input cannot be read further; %lld output lines are in %s\n",
                (long long)g.ow.n_lines, where);
        rc = 3;
    } else if (strict_stop) {
        fprintf(stderr,
                "pllm: --strict: stopped at a bad record; %lld output lines (every request read "
                "before it, and its error line) are in %s\n",
                (long long)g.ow.n_lines, where);
        rc = 3;
    } else if (g.rep.n_failed > 0) {
        rc = 1;
    }
    if (stats_failed && (rc == 0 || rc == 1)) rc = 3;
    cmd_shard_end(&sh, rc, eof && !input_error,
                  eof && !input_error && !stopped && !engine_error && g.ow.write_st == PLLM_OK,
                  g.ow.n_lines, n_skipped, &es, &g.rep);
out:
    if (g.ow.w) {
        pllm_status cst = pllm_writer_close(g.ow.w);
        if (cst != PLLM_OK && (rc == 0 || rc == 1)) {
            fprintf(stderr, "pllm: %s\n", pllm_errmsg());
            rc = 3;
        }
    }
    pllm_ordered_writer_free(&g.ow);
    pllm_source_close(src);
    pllm_engine_free(eng); /* drops the requests still queued; their gen_req are freed here: */
    while (g.live) {
        gen_req *r = g.live;
        gen_req_unlink(&g, r);
        gen_req_free(r);
    }
    pllm_report_free(&g.rep);
    cmd_plot_free(&g.plot);
    cmd_runtime_close(&rt);
    pllm_idset_free(done);
    pllm_hashset_free(seen);
    json_decref(rec_input);
    json_decref(rec_opts);
    cmd_shard_free(&sh);
    cmd_signals_restore();
    return rc;
}

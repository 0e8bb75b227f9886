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
#include "cmd/workload.h"
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

/* The command: its options and what the run holds across its phases (read the options, open
 * the input, model and output, feed records, step the engine, report). */
typedef struct gen_cmd {
    cmd_engine_opts eo;
    cmd_sampling_opts so;
    const char *out_path, *stats_json, *format_s, *out_format_s, *order_s, *extra_s, *plot;
    int32_t window, reorder;
    int64_t limit;
    float log_interval;
    bool echo, token_ids, strict, quiet, resume, overwrite, retry_errors;
    cmd_shard_opts sho;
    const char *input; /* INPUT */
    pllm_format format, out_format, in_format;
    pllm_extra_fields extra;
    pllm_output_order order;
    pllm_request_params defaults;
    cmd_shard sh;
    pllm_idset *done;
    pllm_hashset *seen; /* every record's key so far: duplicate ids */
    json_t *rec_input, *rec_opts;
    pllm_source *src;
    pllm_engine *eng;
    cmd_runtime rt;
    gen_ctx g;
    const char *file;
    bool eof, input_error, engine_error, strict_stop, stopped;
    int64_t n_skipped, next_seq, n_read;
    pllm_tokens ids;
    pllm_buf rendered;
    volatile sig_atomic_t *interrupted;
} gen_cmd;

/* Read the command line: 0, -1 (--help: exit 0) or 2 (message printed). */
static int gen_parse(gen_cmd *c, int argc, char **argv)
{
    cmd_engine_opts_init(&c->eo);
    cmd_sampling_opts_init(&c->so, 256, "the model's max_new_tokens, else 256");
    c->out_path = "-";
    c->format_s = "auto";
    c->out_format_s = "auto";
    c->order_s = "completion";
    c->extra_s = "error";
    c->window = 1024;
    c->reorder = 4096;
    c->log_interval = 10;
    c->sho = (cmd_shard_opts){.key_tokens = PLLM_SHARD_KEY_TOKENS};

    cmd_opt opts[CMD_MAX_OPTS];
    size_t n_opts = 0;
    cmd_opt own[] = {
        {"output", 'o', CMD_OPT_STR, &c->out_path, "FILE", "- (stdout)",
         "output file (.zst compresses)", NULL},
        {"format", 0, CMD_OPT_STR, &c->format_s, "FMT", "auto",
         "input format: auto, pllm, openai, sharegpt", NULL},
        {"extra-fields", 0, CMD_OPT_STR, &c->extra_s, "MODE", "error",
         "record fields the format does not know: error (the record fails, naming the field), "
         "ignore, or passthrough (echoed in the output line's \"metadata\"; a record's own "
         "\"metadata\" field is always echoed)",
         NULL},
        {"plot", 0, CMD_OPT_STR, &c->plot, "FILE.svg", "none",
         "draw the run (throughput, KV use, latency distributions, prefix hits) as an SVG", NULL},
        {"output-format", 0, CMD_OPT_STR, &c->out_format_s, "FMT",
         "auto (openai for openai input, else pllm)", "output format: auto, pllm, openai", NULL},
        {"order", 0, CMD_OPT_STR, &c->order_s, "ORDER", "completion",
         "output order: completion (as requests finish) or input (reordered)", NULL},
        {"reorder-buffer", 0, CMD_OPT_INT, &c->reorder, "N", "4096",
         "--order input: requests held for order at most; when full, reading pauses", NULL},
        {"window", 0, CMD_OPT_INT, &c->window, "N", "1024",
         "requests in the engine at once; the prefix planner groups shared prefixes among these",
         NULL},
        {"limit", 0, CMD_OPT_INT64, &c->limit, "N", "0 (all)", "read only the first N records",
         NULL},
        {"echo", 0, CMD_OPT_FLAG, &c->echo, NULL, "off",
         "include the prompt (as rendered) in each output record", NULL},
        {"token-ids", 0, CMD_OPT_FLAG, &c->token_ids, NULL, "off",
         "include the generated token ids", NULL},
        {"strict", 0, CMD_OPT_FLAG, &c->strict, NULL, "off",
         "stop reading at the first bad record (its error line is written, and every request "
         "read before it finishes), exit 3",
         NULL},
        {"resume", 0, CMD_OPT_FLAG, &c->resume, NULL, "off",
         "continue the run that wrote -o FILE: skip the requests already in it and append the "
         "rest (refused when the input or the options differ from that run's)",
         NULL},
        {"retry-errors", 0, CMD_OPT_FLAG, &c->retry_errors, NULL, "off",
         "with --resume: remove the earlier run's error lines from the output and run their "
         "requests again",
         NULL},
        {"overwrite", 0, CMD_OPT_FLAG, &c->overwrite, NULL, "off",
         "replace an existing output file (without it, an existing non-empty -o FILE is refused)",
         NULL},
        {"stats-json", 0, CMD_OPT_STR, &c->stats_json, "FILE", "none",
         "also write the statistics as JSON to FILE", NULL},
        {"log-interval", 0, CMD_OPT_FLOAT, &c->log_interval, "S", "10",
         "seconds between progress log lines when stderr is not a terminal", NULL},
        {"quiet", 'q', CMD_OPT_FLAG, &c->quiet, NULL, "off",
         "no progress, report or warnings on stderr", NULL},
        {"shard", 0, CMD_OPT_STR, &c->sho.shard, "K/N", "none",
         "run only shard K of N (0-based) of the input; records sharing a prompt prefix stay in "
         "one shard; join the outputs with pllm merge",
         NULL},
        {"shard-key-tokens", 0, CMD_OPT_INT, &c->sho.key_tokens, "P", "128",
         "--shard: records whose prompts share their first P tokens land in the same shard", NULL},
        {"shard-balance", 0, CMD_OPT_STR, &c->sho.balance, "B", "tokens (hash on stdin)",
         "--shard: tokens (a first pass balances prompt tokens) or hash (one pass)", NULL},
    };
    for (size_t i = 0; i < PLLM_ARRAY_LEN(own); i++) opts[n_opts++] = own[i];
    cmd_sampling_opts_table(&c->so, opts, &n_opts, CMD_MAX_OPTS);
    cmd_engine_opts_table(&c->eo, opts, &n_opts, CMD_MAX_OPTS);
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
    if (rc) return rc == 1 ? -1 : 2;
    c->input = pos[0];
    return 0;
}

/* The options against each other, and the outputs (never the input, never an existing file
 * unless --overwrite or --resume says so): 0, 2 or 3 (message printed). */
static int gen_check(gen_cmd *c)
{
    int rc;
    c->out_format = PLLM_FORMAT_AUTO;
    if (pllm_format_parse(c->format_s, &c->format) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 2;
    }
    if (strcmp(c->out_format_s, "auto") && strcmp(c->out_format_s, "pllm") &&
        strcmp(c->out_format_s, "openai")) {
        fprintf(stderr, "pllm: --output-format '%s' is not one of auto, pllm, openai\n",
                c->out_format_s);
        return 2;
    }
    if (strcmp(c->out_format_s, "auto")) pllm_format_parse(c->out_format_s, &c->out_format);
    if (pllm_extra_fields_parse(c->extra_s, &c->extra) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 2;
    }
    if (!strcmp(c->order_s, "completion"))
        c->order = PLLM_ORDER_COMPLETION;
    else if (!strcmp(c->order_s, "input"))
        c->order = PLLM_ORDER_INPUT;
    else {
        fprintf(stderr, "pllm: --order '%s' is not one of completion, input\n", c->order_s);
        return 2;
    }
    if (c->limit < 0) {
        fprintf(stderr, "pllm: --limit must be >= 0, got %lld\n", (long long)c->limit);
        return 2;
    }
    if (c->window < 1) {
        fprintf(stderr, "pllm: --window must be >= 1, got %d\n", c->window);
        return 2;
    }
    if (c->reorder < c->window) {
        fprintf(stderr, "pllm: --reorder-buffer (%d) must be >= --window (%d)\n", c->reorder,
                c->window);
        return 2;
    }
    if (c->retry_errors && !c->resume) {
        fprintf(stderr, "pllm: --retry-errors continues an earlier run: give --resume with it\n");
        return 2;
    }
    if (c->resume && strcmp(c->out_path, "-") == 0) {
        fprintf(stderr, "pllm: --resume needs an output file (-o FILE)\n");
        return 2;
    }
    if (c->resume && c->overwrite) {
        fprintf(stderr, "pllm: --resume continues the output file, --overwrite replaces it: give "
                        "one of them\n");
        return 2;
    }
    {
        cmd_inputs in = {.path = {c->input}, .what = {"the input"}};
        cmd_out_mode mode = c->resume      ? CMD_OUT_RESUME
                            : c->overwrite ? CMD_OUT_OVERWRITE
                                           : CMD_OUT_NEW;
        if ((rc = cmd_output_check(c->out_path, "-o", &in, mode, CMD_OUT_RESUMABLE)) != 0)
            return rc;
        cmd_inputs sin = {.path = {c->input, strcmp(c->out_path, "-") ? c->out_path : NULL},
                          .what = {"the input", "the output (-o)"}};
        if (c->stats_json && (rc = cmd_output_check(c->stats_json, "--stats-json", &sin,
                                                    c->overwrite ? CMD_OUT_OVERWRITE : CMD_OUT_NEW,
                                                    CMD_OUT_REPORT)) != 0)
            return rc;
        if (c->plot &&
            (rc = cmd_output_check(
                 c->plot, "--plot", &sin,
                 c->overwrite || cmd_plot_is_ours(c->plot) ? CMD_OUT_OVERWRITE : CMD_OUT_NEW, 0)) !=
                0)
            return rc;
        if (c->plot && ((strcmp(c->out_path, "-") && !strcmp(c->plot, c->out_path)) ||
                        (c->stats_json && !strcmp(c->plot, c->stats_json)))) {
            fprintf(stderr, "pllm: --plot names the same file as -o or --stats-json: %s\n",
                    c->plot);
            return 2;
        }
        if (c->stats_json && strcmp(c->out_path, "-") && strcmp(c->stats_json, c->out_path) == 0) {
            fprintf(stderr, "pllm: --stats-json and -o name the same file %s\n", c->out_path);
            return 2;
        }
    }
    if ((rc = cmd_sampling_opts_finish(&c->so, &c->defaults)) != 0) return rc;
    if ((rc = cmd_engine_opts_finish(&c->eo)) != 0) return rc;
    return 0;
}

/* The input, the model and its KV cache: 0, 2 or 3 (message printed). */
static int gen_open_input(gen_cmd *c)
{
    int rc;
    if (pllm_source_open(&c->src, c->input, c->format) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 3;
    }
    pllm_source_set_extra_fields(c->src, c->extra);
    if (pllm_source_empty(c->src)) {
        fprintf(stderr, "pllm: %s holds no records (%s): nothing to generate\n",
                pllm_source_path(c->src),
                pllm_source_is_list(c->src) ? "an empty JSON list" : "it is empty or blank");
        return 2;
    }
    c->in_format = pllm_source_format(c->src);
    c->g.openai_out = c->out_format == PLLM_FORMAT_OPENAI ||
                      (c->out_format == PLLM_FORMAT_AUTO && c->in_format == PLLM_FORMAT_OPENAI);
    if (!c->quiet)
        fprintf(stderr, "pllm: input %s: %s%s%s\n", pllm_source_path(c->src),
                pllm_format_name(c->in_format),
                pllm_source_is_list(c->src) ? " (a JSON list)" : " (JSON lines)",
                c->format == PLLM_FORMAT_AUTO ? ", detected" : "");
    if ((rc = cmd_runtime_open(&c->rt, &c->eo.rt, c->quiet)) != 0) return rc;
    if ((rc = cmd_check_kv_budget(&c->rt, &c->eo)) != 0) return rc;
    if ((rc = cmd_size_kv(&c->rt, &c->eo)) != 0) return rc;
    if ((rc = cmd_sampling_opts_apply_model(&c->so, c->rt.model, &c->defaults, c->quiet)) != 0)
        return rc;
    c->g.tok = c->rt.tok;
    c->g.oo.tok = c->rt.tok;
    c->g.model_name = c->rt.model->name;
    return 0;
}

/* -o FILE: which input and options the output belongs to (checked by --resume, then
 * recorded), and with --resume the requests it already holds. 0 or 3 (message printed). */
static int gen_resume(gen_cmd *c)
{
    int rc;
    if (strcmp(c->out_path, "-") == 0) return 0;
    /* which input and options the output belongs to: checked by --resume, then recorded */
    bool continuing = c->resume && cmd_output_exists(c->out_path);
    c->rec_input = cmd_run_record_input(c->input);
    c->rec_opts = cmd_run_record_options(
        pllm_format_name(c->in_format), c->g.openai_out ? "openai" : "pllm", c->echo, c->token_ids,
        c->rt.model->name, c->rt.model->identity, &c->defaults, (uint64_t)c->eo.seed);
    /* what else changes the output lines: recorded only when given, so that a run that
     * gives none of them still matches a record written before they existed */
    if (c->rec_opts && c->eo.rt.system_prompt)
        json_object_set_new(c->rec_opts, "system_prompt", json_string(c->eo.rt.system_prompt));
    if (c->rec_opts && c->rt.chat_src && c->eo.rt.chat_template)
        json_object_set_new(c->rec_opts, "chat_template", json_string(c->rt.chat_src));
    if (c->rec_opts && c->extra != PLLM_EXTRA_ERROR)
        json_object_set_new(c->rec_opts, "extra_fields", json_string(c->extra_s));
    if (!c->rec_input || !c->rec_opts) return 3;
    if (continuing && (rc = cmd_run_record_check(c->out_path, c->rec_input, c->rec_opts)) != 0)
        return rc;
    if (continuing) {
        pllm_output_scan scan;
        if (pllm_idset_create(&c->done) != PLLM_OK ||
            pllm_idset_scan_output(c->done, c->out_path, c->retry_errors, &scan) != PLLM_OK) {
            fprintf(stderr, "pllm: --resume: %s\n", pllm_errmsg());
            return 3;
        }
        if (!c->quiet)
            fprintf(stderr, "pllm: resuming: %lld output lines already in %s%s",
                    (long long)scan.n_lines, c->out_path,
                    scan.torn ? " (a torn last line was cut off)" : "");
        if (!c->quiet && c->retry_errors)
            fprintf(stderr, "; %lld error lines removed, their requests run again",
                    (long long)scan.n_dropped);
        if (!c->quiet) fputc('\n', stderr);
    }
    if ((rc = cmd_run_record_write(c->out_path, c->rec_input, c->rec_opts)) != 0) return rc;
    return 0;
}

/* The engine, the output and the run's clocks: 0 or 3 (message printed). */
static int gen_start(gen_cmd *c)
{
    int rc;
    if (pllm_hashset_create(&c->seen) != PLLM_OK) {
        fprintf(stderr, "pllm: out of memory\n");
        return 3;
    }
    c->sh.extra = c->extra;
    /* the hybrid KV split is sized for the input's sequences (a first pass over a file: the
     * shard plan's when there is one, else the workload's own) */
    cmd_workload wl;
    cmd_workload_init(&wl, &c->rt, &c->eo, c->input);
    if ((rc = cmd_shard_prepare(&c->sh, &c->rt, c->input, c->format, &c->defaults, c->limit, &wl,
                                c->quiet)) != 0 ||
        (rc = cmd_workload_scan(&c->rt, &c->eo, c->input, c->format, c->extra, &c->defaults,
                                c->limit, &wl, c->quiet)) != 0) {
        cmd_workload_free(&wl);
        return rc;
    }
    pllm_status est =
        pllm_engine_create(&c->eng, c->rt.model, &c->rt.backend, c->rt.tok, &c->eo.ep);
    cmd_workload_free(&wl); /* the engine read it in create */
    c->eo.ep.workload_lens = NULL;
    c->eo.ep.n_workload = 0;
    if (est != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 3;
    }
    if (pllm_ordered_writer_init(&c->g.ow, NULL, c->order, c->reorder) != PLLM_OK) {
        fprintf(stderr, "pllm: out of memory for --reorder-buffer %d\n", c->reorder);
        return 3;
    }
    if (pllm_writer_open(&c->g.ow.w, c->out_path, c->resume) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 3;
    }
    if ((rc = cmd_shard_begin(&c->sh, c->out_path, c->resume, c->input, c->g.model_name,
                              c->rt.device_name, c->limit, c->quiet)) != 0)
        return rc;
    double t0 = pllm_now();
    pllm_report_free(&c->g.rep);
    pllm_report_init(&c->g.rep, t0);
    cmd_plot_init(&c->g.plot, c->plot != NULL, t0);
    cmd_progress_init(&c->g.prog, c->quiet, c->log_interval, "generate", t0);
    c->file = pllm_source_path(c->src);
    return 0;
}

typedef enum gen_read_result {
    GEN_READ_OK,   /* a record to run (or to reject) */
    GEN_READ_SKIP, /* not this shard's, or already in the output (--resume) */
    GEN_READ_STOP, /* end of input, --limit, an input error or out of memory */
} gen_read_result;

/* The next record, with the key of its output line checked: dup when its id repeats an earlier
 * one's; written[n] (owned, or NULL) the completions an earlier run wrote (--resume, n > 1). */
static gen_read_result gen_read(gen_cmd *c, pllm_record *out_rec, bool *out_dup, bool **out_written)
{
    pllm_record rec;
    pllm_status st = pllm_source_next(c->src, &c->defaults, &rec, &c->eof);
    if (st != PLLM_OK) {
        if (st != PLLM_ERR_INTERRUPTED) {
            cmd_progress_clear(&c->g.prog);
            fprintf(stderr, "pllm: %s\n", pllm_errmsg());
            c->input_error = true;
        }
        return GEN_READ_STOP;
    }
    if (c->eof) return GEN_READ_STOP;
    if (c->limit > 0 && ++c->n_read > c->limit) {
        pllm_record_free(&rec);
        c->eof = true;
        return GEN_READ_STOP;
    }
    if (!cmd_shard_keep(&c->sh, &c->rt, c->file, &rec, &c->ids, &c->g.cur_index)) {
        pllm_record_free(&rec);
        return GEN_READ_SKIP;
    }
    /* the key the output line will carry: the id, or for a repeated id the line */
    char *key = pllm_record_key(&rec);
    bool dup = false, *written = NULL;
    if (key && pllm_hashset_add(c->seen, key, &dup) == PLLM_OK && dup) {
        free(key);
        key = pllm_record_loc_key(&rec);
    }
    if (!key) {
        pllm_record_free(&rec);
        c->g.ow.write_st = pllm_errorf(PLLM_ERR_NOMEM, "out of memory");
        return GEN_READ_STOP;
    }
    if (c->done) {
        int32_t n = rec.error || dup || c->g.openai_out ? 1 : rec.params.n;
        bool skip = pllm_idset_count(c->done, key) > 0; /* one line: n == 1, or an error */
        if (!skip && n > 1) {
            written = pllm_calloc((size_t)n, sizeof *written);
            int32_t have = 0;
            for (int32_t i = 0; written && i < n; i++) {
                char *ck = pllm_completion_key(key, i);
                written[i] = ck && pllm_idset_count(c->done, ck) > 0;
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
            c->n_skipped++;
            pllm_record_free(&rec);
            return GEN_READ_SKIP;
        }
    }
    free(key);
    *out_rec = rec;
    *out_dup = dup;
    *out_written = written;
    return GEN_READ_OK;
}

/* Run a record (its request joins the engine) or write its error line. written: as gen_read
 * gave it (taken). false: --strict stops reading here. */
static bool gen_feed(gen_cmd *c, pllm_record *recp, bool dup, bool *written)
{
    pllm_record rec = *recp; /* freed here */
    const char *file = c->file;
    pllm_status st;
    int64_t seq = c->next_seq++;
    c->ids.n = 0;
    c->rendered.n = 0;
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
                 where, rec.format == PLLM_FORMAT_OPENAI ? "custom_id" : "id", idt ? idt : "?");
        free(idt);
    } else if ((st = cmd_record_tokens(&c->rt, file, &rec, &c->ids,
                                       c->echo ? &c->rendered : NULL)) != PLLM_OK) {
        snprintf(msg, sizeof msg, "%s", pllm_errmsg());
    } else if (!(r = pllm_calloc(1, sizeof *r))) {
        snprintf(msg, sizeof msg, "out of memory");
    } else {
        r->seq = seq;
        r->input_index = c->g.cur_index;
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
        if (c->echo) r->prompt = pllm_strdup(c->rendered.s ? c->rendered.s : "");
        if (c->g.openai_out) {
            r->choices = json_array();
            for (int32_t i = 0; i < r->n; i++) json_array_append_new(r->choices, json_null());
        }
        if (pllm_ordered_writer_open(&c->g.ow, seq, c->g.openai_out ? 1 : r->n) != PLLM_OK) {
            snprintf(msg, sizeof msg, "out of memory");
        } else {
            uint64_t req_id;
            st = pllm_engine_add(c->eng, c->ids.ids, (int32_t)c->ids.n, &rec.params, r, &req_id);
            if (st != PLLM_OK) {
                char where[512];
                cmd_record_where(where, sizeof where, file, &rec);
                snprintf(msg, sizeof msg, "%sfield '%s': %s", where,
                         rec.prompt                           ? "prompt"
                         : rec.format == PLLM_FORMAT_SHAREGPT ? "conversations"
                                                              : "messages",
                         pllm_errmsg());
                /* reopen the slot for the one error line */
                pllm_ordered_writer_cancel(&c->g.ow, seq);
            }
        }
    }
    free(written);
    if (msg[0]) {
        gen_req_free(r);
        if (pllm_ordered_writer_open(&c->g.ow, seq, 1) != PLLM_OK)
            c->g.ow.write_st = PLLM_ERR_NOMEM;
        else
            reject(&c->g, seq, &rec, msg, c->strict, dup);
        pllm_record_free(&rec);
        if (c->strict) {
            /* read no further; the requests read before it still run and are written */
            cmd_progress_clear(&c->g.prog);
            fprintf(stderr,
                    "pllm: --strict: stopping at the first bad record (the requests "
                    "before it finish first): %s\n",
                    msg);
            c->strict_stop = true;
            c->eof = true;
            return false;
        }
        return true;
    }
    c->g.in_flight++;
    gen_req_link(&c->g, r);
    pllm_record_free(&rec);
    return true;
}

/* Read records while the window and the reorder buffer have room: at most `window` records
 * between two engine steps, bad and skipped ones included (in an input that is mostly rejected
 * records, filling the window with valid ones could otherwise read hundreds of thousands of
 * lines before the first step). */
static void gen_fill(gen_cmd *c)
{
    int32_t n_round = 0;
    while (!c->eof && c->g.in_flight < c->window && n_round < c->window &&
           c->g.ow.write_st == PLLM_OK && !*c->interrupted &&
           pllm_ordered_writer_has_room(&c->g.ow, c->next_seq)) {
        n_round++;
        pllm_record rec;
        bool dup, *written;
        gen_read_result r = gen_read(c, &rec, &dup, &written);
        if (r == GEN_READ_STOP) break;
        if (r == GEN_READ_SKIP) continue;
        if (!gen_feed(c, &rec, dup, written)) break;
    }
}

/* The progress line's total: exact at the end of the input, else estimated from the bytes
 * read so far (and --limit). */
static void gen_progress(gen_cmd *c)
{
    c->g.ps.total = c->next_seq;
    c->g.ps.total_estimated = false;
    if (!c->eof) {
        uint64_t p, size;
        int64_t n_src;
        pllm_source_progress(c->src, &p, &size, &n_src);
        if (size > 0 && p > 0) {
            c->g.ps.total =
                (int64_t)((double)n_src * (double)size / (double)p + 0.5) - c->n_skipped;
            c->g.ps.total_estimated = true;
        } else {
            c->g.ps.total = -1;
        }
        if (c->limit > 0 && (c->g.ps.total < 0 || c->g.ps.total > c->limit - c->n_skipped)) {
            c->g.ps.total = c->limit - c->n_skipped;
            c->g.ps.total_estimated = true;
        }
    }
    cmd_progress_update(&c->g.prog, &c->g.ps, false);
}

/* One engine step; its lines are written once the model's files are known to be intact.
 * false: the run stops (message printed). */
static bool gen_step(gen_cmd *c)
{
    pllm_status sst = pllm_engine_step(c->eng, on_done, &c->g);
    if (sst == PLLM_OK && (sst = pllm_model_check_files(c->rt.model)) != PLLM_OK) {
        /* the weights changed on disk under the run: nothing computed in this step is written */
        pllm_ordered_writer_release(&c->g.ow, false);
        cmd_progress_clear(&c->g.prog);
        fprintf(stderr,
                "pllm: the model's files changed during the run (restore them and resume): %s\n",
                pllm_errmsg());
        c->engine_error = true;
        return false;
    }
    pllm_ordered_writer_release(&c->g.ow, true);
    if (c->plot) {
        pllm_engine_stats now;
        pllm_engine_get_stats(c->eng, &now);
        cmd_plot_step(&c->g.plot, pllm_now(), &now);
    }
    if (sst != PLLM_OK) {
        cmd_progress_clear(&c->g.prog);
        fprintf(stderr, "pllm: engine step failed: %s\n", pllm_errmsg());
        c->engine_error = true;
        return false;
    }
    return true;
}

/* The statistics on stderr (unless --quiet). */
static void gen_print_report(gen_cmd *c, const pllm_engine_stats *es,
                             const pllm_engine_plan_stats *plan)
{
    if (c->n_skipped)
        fprintf(stderr, "pllm: skipped %lld records already in the output\n",
                (long long)c->n_skipped);
    char rss[32], best[96], blocks[96], device[512], unf[640];
    snprintf(rss, sizeof rss, "%.1f", cmd_peak_rss_mb());
    cmd_runtime_describe(&c->rt, device, sizeof device);
    snprintf(best, sizeof best, "%.2f%% (%lld of %lld prompt tokens)", 100.0 * plan->best_hit_rate,
             (long long)plan->best_cached_tokens, (long long)plan->prompt_tokens);
    snprintf(blocks, sizeof blocks, "%lld computed, %lld of them recomputed",
             (long long)plan->blocks_computed, (long long)plan->blocks_recomputed);
    bool cut = c->stopped || c->engine_error || c->input_error || c->g.ow.write_st != PLLM_OK;
    unfinished(&c->g, unf, sizeof unf, NULL);
    pllm_report_note notes[] = {{"Unfinished requests", unf},
                                {"Device", device},
                                {"Best achievable hit rate", best},
                                {"Prompt blocks", blocks},
                                {"Peak RSS (MiB)", rss}};
    pllm_report_print(&c->g.rep, es,
                      c->stopped ? "pllm generate (interrupted)"
                      : cut      ? "pllm generate (stopped)"
                                 : "pllm generate",
                      cut ? notes : notes + 1, (int)PLLM_ARRAY_LEN(notes) - (cut ? 0 : 1), stderr);
}

/* --stats-json: false when writing it failed (message printed). */
static bool gen_stats_json(gen_cmd *c, const pllm_engine_stats *es,
                           const pllm_engine_plan_stats *plan)
{
    json_t *j = pllm_report_json(&c->g.rep, es);
    cmd_plan_stats_json(j, plan);
    cmd_prefix_cache_report(c->eng, c->eo.ep.prefix_cache_dir, j, true);
    json_object_set_new(j, "command", json_string("generate"));
    json_object_set_new(j, "device", json_string(c->rt.device_name));
    json_object_set_new(j, "kernels", json_string(c->rt.kernels));
    json_object_set_new(j, "input", json_string(c->file));
    json_object_set_new(j, "input_format", json_string(pllm_format_name(c->in_format)));
    json_object_set_new(j, "skipped_by_resume", json_integer(c->n_skipped));
    json_object_set_new(j, "interrupted", json_boolean(c->stopped));
    json_object_set_new(
        j, "stopped",
        json_boolean(c->engine_error || c->input_error || c->g.ow.write_st != PLLM_OK));
    json_t *uids = json_array();
    char unf[640];
    int64_t n_unf = unfinished(&c->g, unf, sizeof unf, uids);
    json_object_set_new(j, "unfinished_requests", json_integer(n_unf));
    json_object_set_new(j, "unfinished_ids", uids);
    json_object_set_new(j, "peak_rss_mb", json_real(cmd_peak_rss_mb()));
    cmd_shard_json(&c->sh, j);
    bool failed = cmd_output_write_json(c->stats_json, j, JSON_INDENT(2)) != 0;
    json_decref(j);
    return !failed;
}

/* --plot: false when drawing it failed (message printed). */
static bool gen_plot(gen_cmd *c, const pllm_engine_stats *es, const pllm_engine_plan_stats *plan)
{
    char sub[768], device[512];
    cmd_runtime_describe(&c->rt, device, sizeof device);
    snprintf(sub, sizeof sub, "%s on %s: %lld requests (%lld failed), %lld steps%s",
             c->g.model_name, device, (long long)(c->g.rep.n_ok + c->g.rep.n_failed),
             (long long)c->g.rep.n_failed, (long long)es->steps, c->stopped ? ", interrupted" : "");
    char title[600];
    snprintf(title, sizeof title, "pllm generate %s", c->file);
    c->g.plot.best_hit_rate = plan->best_hit_rate;
    if (cmd_plot_write(&c->g.plot, c->plot, title, sub) != 0) return false;
    if (!c->quiet) fprintf(stderr, "pllm: the run is drawn in %s\n", c->plot);
    return true;
}

/* How the run ended, on stderr, and its exit code. */
static int gen_outcome(gen_cmd *c)
{
    int rc = 0;
    const char *where = strcmp(c->out_path, "-") ? c->out_path : "the output";
    if (c->g.ow.write_st != PLLM_OK) {
        fprintf(stderr,
                "pllm: writing the output failed: %s\n       the lines written before it are "
                "intact; rerun with --resume\n",
                pllm_errmsg());
        rc = 3;
    } else if (c->stopped) {
        char unf[640];
        int64_t n_unf = unfinished(&c->g, unf, sizeof unf, NULL);
        fprintf(stderr,
                "pllm: interrupted: %lld output lines are in %s; %lld requests in flight did "
                "not finish%s%s; rerun the same command with --resume to continue\n",
                (long long)c->g.ow.n_lines, where, (long long)n_unf, strchr(unf, '(') ? " " : "",
                strchr(unf, '(') ? strchr(unf, '(') : "");
        rc = 130;
    } else if (c->engine_error) {
        char unf[640];
        int64_t n_unf = unfinished(&c->g, unf, sizeof unf, NULL);
        fprintf(stderr,
                "pllm: the run stopped: %lld output lines are in %s; %lld requests in flight did "
                "not finish%s%s; rerun the same command with --resume to continue\n",
                (long long)c->g.ow.n_lines, where, (long long)n_unf, strchr(unf, '(') ? " " : "",
                strchr(unf, '(') ? strchr(unf, '(') : "");
        rc = 3;
    } else if (c->input_error) {
        fprintf(stderr, "pllm: the input cannot be read further; %lld output lines are in %s\n",
                (long long)c->g.ow.n_lines, where);
        rc = 3;
    } else if (c->strict_stop) {
        fprintf(stderr,
                "pllm: --strict: stopped at a bad record; %lld output lines (every request read "
                "before it, and its error line) are in %s\n",
                (long long)c->g.ow.n_lines, where);
        rc = 3;
    } else if (c->g.rep.n_failed > 0) {
        rc = 1;
    }
    return rc;
}

/* Everything the run opened; the output is closed last (a failing close turns 0 or 1 into 3). */
static int gen_close(gen_cmd *c, int rc)
{
    if (c->g.ow.w) {
        pllm_status cst = pllm_writer_close(c->g.ow.w);
        if (cst != PLLM_OK && (rc == 0 || rc == 1)) {
            fprintf(stderr, "pllm: %s\n", pllm_errmsg());
            rc = 3;
        }
    }
    pllm_ordered_writer_free(&c->g.ow);
    pllm_source_close(c->src);
    pllm_engine_free(c->eng); /* drops the requests still queued; their gen_req are freed here: */
    while (c->g.live) {
        gen_req *r = c->g.live;
        gen_req_unlink(&c->g, r);
        gen_req_free(r);
    }
    pllm_report_free(&c->g.rep);
    cmd_plot_free(&c->g.plot);
    cmd_runtime_close(&c->rt);
    pllm_idset_free(c->done);
    pllm_hashset_free(c->seen);
    json_decref(c->rec_input);
    json_decref(c->rec_opts);
    cmd_shard_free(&c->sh);
    cmd_signals_finish();
    return rc;
}

int cmd_generate(int argc, char **argv)
{
    /* Handlers first: a signal while options are read or the model loads must still end in
     * the orderly way (the main loop sees the flag before its first step and exits 130). */
    static volatile sig_atomic_t interrupted; /* static: the handler keeps its address */
    interrupted = 0;
    cmd_signals_install(&interrupted);
    gen_cmd cs;
    gen_cmd *c = &cs;
    memset(c, 0, sizeof *c);
    c->interrupted = &interrupted;
    int rc = gen_parse(c, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    if ((rc = gen_check(c)) != 0) return rc;
    if (cmd_devices_is_list(c->eo.rt.device)) {
        /* several GPUs: a worker process per device over the same partition, then a merge */
        const cmd_devices_run dr = {.devices = c->eo.rt.device,
                                    .out_path = c->out_path,
                                    .stats_json = c->stats_json,
                                    .plot = c->plot,
                                    .order_input = c->order == PLLM_ORDER_INPUT,
                                    .overwrite = c->overwrite,
                                    .resume = c->resume,
                                    .quiet = c->quiet,
                                    .shard_given = c->sho.shard != NULL};
        return cmd_devices_generate(argc, argv, &dr, &interrupted);
    }
    if ((rc = cmd_shard_init(&c->sh, &c->sho, c->input, c->eo.ep.block_size)) != 0) return rc;

    c->g = (gen_ctx){.oo = {.echo_prompt = c->echo, .token_ids = c->token_ids},
                     .quiet = c->quiet,
                     .order = c->order,
                     .shard = &c->sh};
    pllm_report_init(&c->g.rep, pllm_now());
    if ((rc = gen_open_input(c)) != 0 || (rc = gen_resume(c)) != 0 || (rc = gen_start(c)) != 0)
        return gen_close(c, rc);

    while (!interrupted && c->g.ow.write_st == PLLM_OK && !c->input_error) {
        gen_fill(c);
        gen_progress(c);
        if (!pllm_engine_has_work(c->eng)) {
            if (c->eof || c->input_error) break;
            continue;
        }
        if (interrupted || c->input_error) break;
        if (!gen_step(c)) break;
    }
    pllm_tokens_free(&c->ids);
    pllm_buf_free(&c->rendered);
    /* The run's outcome is decided here. The handlers stay until the output is closed (the end
     * of a .zst frame is still to be written): a signal from now on only sets the flag, which
     * is no longer read, so a finished run still exits 0 with its output whole. */
    c->stopped = interrupted;
    if (c->stopped || c->engine_error || c->input_error || c->g.ow.write_st != PLLM_OK)
        pllm_ordered_writer_flush_all(&c->g.ow);
    cmd_progress_finish(&c->g.prog, &c->g.ps);

    pllm_engine_stats es;
    pllm_engine_plan_stats plan;
    pllm_engine_get_stats(c->eng, &es);
    pllm_engine_get_plan_stats(c->eng, &plan);
    if (!c->quiet) gen_print_report(c, &es, &plan);
    cmd_prefix_cache_report(c->eng, c->eo.ep.prefix_cache_dir, NULL, c->quiet);
    bool stats_failed = false;
    if (c->stats_json && !gen_stats_json(c, &es, &plan)) stats_failed = true;
    if (c->plot && !gen_plot(c, &es, &plan)) stats_failed = true;
    rc = gen_outcome(c);
    if (stats_failed && (rc == 0 || rc == 1)) rc = 3;
    cmd_shard_end(&c->sh, rc, c->eof && !c->input_error,
                  c->eof && !c->input_error && !c->stopped && !c->engine_error &&
                      c->g.ow.write_st == PLLM_OK,
                  c->g.ow.n_lines, c->n_skipped, &es, &c->g.rep);
    return gen_close(c, rc);
}

/*
 * tokenize.c: `pllm tokenize [INPUT]`: the token ids of every prompt record, exactly as
 * `pllm generate` would feed them to the model (same formats, same chat template), one line per
 * record {"id", "token_ids", "n_tokens"}; stdout (or -o) carries these records only, so that
 * `jq .token_ids` works on every line. The total users size datasets with,
 * {"total": {"records", "errors", "n_tokens", "min", "max", "mean", "over_context", "n_ctx"}},
 * goes to stderr (a JSON line after the summary) like generate's statistics, or with --total
 * as a closing line of the output. A bad record gives {"id", "line", "error"} and the run goes
 * on.
 *
 * -o FILE is guarded (output.h: never the input, never an existing file without --overwrite)
 * and written through a temporary renamed over it at the end, so an interrupted run leaves an
 * earlier file as it was.
 */
#include "cmd/commands.h"
#include "cmd/options.h"
#include "cmd/output.h"
#include "cmd/runtime.h"
#include "cmd/shared.h"
#include "datasets/io.h"
#include "datasets/source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pllm_status write_json(pllm_writer *w, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!s) return pllm_errorf(PLLM_ERR_NOMEM, "out of memory serialising a line");
    pllm_status st = pllm_writer_line(w, s, strlen(s));
    free(s);
    return st;
}

int cmd_tokenize(int argc, char **argv)
{
    cmd_runtime_opts ro = {.no_backend = true};
    const char *out_path = "-", *format_s = "auto", *thinking = "auto";
    bool counts_only = false, no_total = false, with_total = false, strict = false, quiet = false,
         overwrite = false;
    int64_t limit = 0;
    const cmd_opt opts[] = {
        {"model", 'm', CMD_OPT_STR, &ro.model, "FILE", "$PLLM_HOME/models/" PLLM_DEFAULT_MODEL_FILE,
         "model whose tokenizer to use", NULL},
        {"output", 'o', CMD_OPT_STR, &out_path, "FILE", "- (stdout)",
         "output file (.zst compresses)", NULL},
        {"format", 0, CMD_OPT_STR, &format_s, "FMT", "auto",
         "input format: auto, pllm, openai, sharegpt", NULL},
        {"thinking", 0, CMD_OPT_STR, &thinking, "MODE", "auto (the chat template's default)",
         "the chat template's thinking switch (Qwen3's enable_thinking): on, off, or auto", NULL},
        {"limit", 0, CMD_OPT_INT64, &limit, "N", "0 (all)", "read only the first N records", NULL},
        {"counts-only", 0, CMD_OPT_FLAG, &counts_only, NULL, "off",
         "write n_tokens without the token ids", NULL},
        {"total", 0, CMD_OPT_FLAG, &with_total, NULL, "off (the total goes to stderr)",
         "also write the total as a closing {\"total\": ...} line of the output", NULL},
        {"no-total", 0, CMD_OPT_FLAG, &no_total, NULL, "off", "no total line, not even on stderr",
         NULL},
        {"strict", 0, CMD_OPT_FLAG, &strict, NULL, "off", "stop at the first bad record", NULL},
        {"overwrite", 0, CMD_OPT_FLAG, &overwrite, NULL, "off",
         "replace an existing output file (without it, an existing non-empty -o FILE is refused)",
         NULL},
        {"quiet", 'q', CMD_OPT_FLAG, &quiet, NULL, "off", "no summary on stderr", NULL},
    };
    const cmd_spec spec = {
        .usage =
            "pllm tokenize [OPTIONS] [INPUT]   (INPUT: a file, .zst, or - for stdin; default -)",
        .summary = "Write the token ids of every prompt record as `pllm generate` would run it "
                   "(same formats, the\n"
                   "model's chat template for messages): {\"id\", \"token_ids\", \"n_tokens\"} per "
                   "record; the total\n"
                   "({\"total\": {\"records\", \"n_tokens\", ...}}) goes to stderr, or with "
                   "--total to the output's last line.",
        .opts = opts,
        .n_opts = PLLM_ARRAY_LEN(opts),
        .min_pos = 0,
        .max_pos = 1};
    const char *pos[1] = {"-"};
    int n_pos;
    int rc = cmd_parse(&spec, argc, argv, pos, &n_pos);
    if (rc) return rc == 1 ? 0 : 2;
    if (n_pos == 0) pos[0] = "-";
    if (cmd_thinking_parse(thinking, &ro.thinking)) return 2;
    pllm_format format;
    if (pllm_format_parse(format_s, &format) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 2;
    }
    cmd_inputs in = {.path = {pos[0]}, .what = {"the input"}};
    if ((rc = cmd_output_check(out_path, "-o", &in, overwrite ? CMD_OUT_OVERWRITE : CMD_OUT_NEW,
                               0)) != 0)
        return rc;
    pllm_request_params defaults;
    pllm_request_params_defaults(&defaults);
    pllm_source *src = NULL;
    pllm_writer *w = NULL;
    cmd_output outf = {0};
    cmd_runtime rt;
    memset(&rt, 0, sizeof rt);
    if (pllm_source_open(&src, pos[0], format) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 3;
    }
    if (pllm_source_empty(src)) {
        fprintf(stderr, "pllm: %s holds no records (%s): nothing to tokenize\n",
                pllm_source_path(src),
                pllm_source_is_list(src) ? "an empty JSON list" : "it is empty or blank");
        pllm_source_close(src);
        return 2;
    }
    if ((rc = cmd_runtime_open(&rt, &ro, true)) != 0) goto out;
    if ((rc = cmd_output_open(&outf, out_path, true, false)) != 0) goto out;
    w = outf.w;
    const char *file = pllm_source_path(src);
    int64_t n_rec = 0, n_err = 0, total = 0, mn = INT64_MAX, mx = 0, over = 0;
    int32_t n_ctx = rt.model->cfg.n_ctx_train;
    pllm_tokens ids = {0};
    pllm_status wst = PLLM_OK;
    bool fatal = false;
    for (;;) {
        pllm_record rec;
        bool eof;
        if (pllm_source_next(src, &defaults, &rec, &eof) != PLLM_OK) {
            fprintf(stderr, "pllm: %s\n", pllm_errmsg());
            fatal = true;
            break;
        }
        if (eof) break;
        if (limit > 0 && n_rec + n_err >= limit) {
            pllm_record_free(&rec);
            break;
        }
        ids.n = 0;
        const char *err = rec.error;
        if (!err && cmd_record_tokens(&rt, file, &rec, &ids, NULL) != PLLM_OK) err = pllm_errmsg();
        json_t *id = rec.id ? json_incref(rec.id) : json_null();
        if (err) {
            n_err++;
            if (!quiet && n_err <= 10) fprintf(stderr, "pllm: %s\n", err);
            json_t *o =
                json_pack("{s:o, s:I, s:s}", "id", id, "line", (json_int_t)rec.line, "error", err);
            if (rec.element > 0) json_object_set_new(o, "element", json_integer(rec.element));
            wst = write_json(w, o);
        } else {
            n_rec++;
            int64_t n = (int64_t)ids.n;
            total += n;
            mn = PLLM_MIN(mn, n);
            mx = PLLM_MAX(mx, n);
            over += n >= n_ctx; /* no room left to generate */
            json_t *o = json_object();
            json_object_set_new(o, "id", id);
            if (!counts_only) {
                json_t *arr = json_array();
                for (size_t i = 0; i < ids.n; i++)
                    json_array_append_new(arr, json_integer(ids.ids[i]));
                json_object_set_new(o, "token_ids", arr);
            }
            json_object_set_new(o, "n_tokens", json_integer(n));
            wst = write_json(w, o);
        }
        pllm_record_free(&rec);
        if (wst != PLLM_OK) {
            fprintf(stderr, "pllm: %s\n", pllm_errmsg());
            fatal = true;
            break;
        }
        if (err && strict) {
            fprintf(stderr, "pllm: --strict: stopping at the first bad record\n");
            fatal = true;
            break;
        }
    }
    pllm_tokens_free(&ids);
    json_t *t = NULL;
    if (!fatal && !no_total) {
        t = json_pack("{s:{s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:i}}", "total", "records",
                      (json_int_t)n_rec, "errors", (json_int_t)n_err, "n_tokens", (json_int_t)total,
                      "min", (json_int_t)(n_rec ? mn : 0), "max", (json_int_t)mx, "mean",
                      n_rec ? (double)total / (double)n_rec : 0.0, "over_context", (json_int_t)over,
                      "n_ctx", n_ctx);
        if (t && with_total && write_json(w, json_incref(t)) != PLLM_OK) {
            fprintf(stderr, "pllm: %s\n", pllm_errmsg());
            fatal = true;
        }
    }
    if (!quiet)
        fprintf(stderr,
                "pllm: %lld records, %lld tokens (min %lld, mean %.1f, max %lld), %lld at or over "
                "the context of %d, %lld errors\n",
                (long long)n_rec, (long long)total, (long long)(n_rec ? mn : 0),
                n_rec ? (double)total / (double)n_rec : 0.0, (long long)mx, (long long)over, n_ctx,
                (long long)n_err);
    if (t && !quiet && !with_total) { /* the total as JSON, on its own line of stderr */
        char *ts = json_dumps(t, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (ts) fprintf(stderr, "%s\n", ts);
        free(ts);
    }
    json_decref(t);
    rc = fatal ? 3 : n_err ? 1 : 0;
out:
    /* what was written is kept, even after a fatal error (the lines before it are good) */
    if (outf.w && cmd_output_commit(&outf) != 0) rc = 3;
    cmd_output_close(&outf);
    pllm_source_close(src);
    cmd_runtime_close(&rt);
    return rc;
}

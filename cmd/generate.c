/*
 * generate.c: `pllm generate PROMPTS.jsonl`: read prompt records, run them through the
 * engine, write one JSON line per request as each finishes, and a statistics report.
 *
 * Streaming: records are read while the engine runs, with at most --window requests in the
 * engine at once, so memory does not grow with the input. A bad record becomes an error
 * record (with its line number) and the run goes on (--strict stops at the first). SIGINT
 * and SIGTERM stop after the current step: finished records are all written, the report of
 * what finished is printed, and the exit code is 130; --resume continues such a run.
 */
#include "cmd/commands.h"
#include "cmd/options.h"
#include "cmd/runtime.h"
#include "datasets/idset.h"
#include "datasets/io.h"
#include "datasets/records.h"
#include "engine/engine.h"
#include "engine/report.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t g_interrupted;

static void on_signal(int sig)
{
    (void)sig;
    g_interrupted = 1;
}

typedef struct gen_req {
    json_t *id;
    char *prompt;        /* for --echo */
    int32_t n, remaining;
} gen_req;

typedef struct gen_ctx {
    pllm_writer *w;
    pllm_report rep;
    pllm_output_opts oo;
    pllm_status write_st;
    int64_t in_flight;   /* requests added and not yet finished */
    bool quiet;
} gen_ctx;

static void gen_req_free(gen_req *r)
{
    if (!r) return;
    json_decref(r->id);
    free(r->prompt);
    free(r);
}

static void write_line(gen_ctx *g, char *line)
{
    if (!line) {
        if (g->write_st == PLLM_OK) g->write_st = PLLM_ERR_NOMEM;
        return;
    }
    if (g->write_st == PLLM_OK) g->write_st = pllm_writer_line(g->w, line, strlen(line));
    free(line);
}

static void on_done(const pllm_completion *c, void *arg)
{
    gen_ctx *g = arg;
    gen_req *r = c->user;
    char *line = NULL;
    pllm_report_add(&g->rep, c);
    if (pllm_output_completion(&line, r->id, r->prompt, r->n, c, &g->oo) != PLLM_OK) line = NULL;
    write_line(g, line);
    if (--r->remaining == 0) {
        gen_req_free(r);
        g->in_flight--;
    }
}

static void reject(gen_ctx *g, const json_t *id, int64_t lineno, const char *msg)
{
    char *line = NULL;
    pllm_report_add_rejected(&g->rep);
    if (pllm_output_error(&line, id, lineno, msg) != PLLM_OK) line = NULL;
    write_line(g, line);
    if (!g->quiet) fprintf(stderr, "pllm: %s\n", msg);
}

/* Turn a parsed record into token ids: the raw prompt, or the messages through the chat
 * template. */
static pllm_status record_tokens(const cmd_runtime *rt, const pllm_record *rec, pllm_tokens *ids)
{
    pllm_encode_opts eo = {.add_special = true, .parse_special = true};
    if (rec->prompt) return pllm_tokenizer_encode(rt->tok, rec->prompt, strlen(rec->prompt), &eo, ids);
    if (!rt->chat)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "line %lld: 'messages' needs a chat template, and %s",
                           (long long)rec->line, rt->chat_error ? rt->chat_error : "the model has none");
    pllm_buf text = {0};
    pllm_chat_render_params rp = {.messages = rec->messages, .n_messages = rec->n_messages,
                                  .add_generation_prompt = true, .bos_token = rt->bos_text, .eos_token = rt->eos_text};
    pllm_status st = pllm_chat_template_render(rt->chat, &rp, &text);
    if (st != PLLM_OK) {
        pllm_error_prefix(st, "line %lld: chat template: ", (long long)rec->line);
        pllm_buf_free(&text);
        return st;
    }
    eo.add_special = false; /* the template writes BOS itself, as transformers renders it */
    st = pllm_tokenizer_encode(rt->tok, text.s ? text.s : "", text.n, &eo, ids);
    pllm_buf_free(&text);
    return st;
}

int cmd_generate(int argc, char **argv)
{
    cmd_runtime_opts ro = {.device = "auto"};
    const char *out_path = "-", *stats_json = NULL;
    int32_t max_tokens = 256, min_tokens = 0, top_k = 0, window = 1024;
    float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f, rep_pen = 1.0f, pres_pen = 0.0f, freq_pen = 0.0f;
    int64_t seed = 0;
    bool ignore_eos = false, echo = false, token_ids = false, strict = false, quiet = false, resume = false;
    bool no_prefix_cache = false;
    cmd_strs stop = {0};
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    int32_t kv_mb = 0;
    char defbuf[3][32];
    snprintf(defbuf[0], sizeof defbuf[0], "%d", ep.block_size);
    snprintf(defbuf[1], sizeof defbuf[1], "%d", ep.max_batched_tokens);
    snprintf(defbuf[2], sizeof defbuf[2], "%d", ep.max_seqs);

    const cmd_opt opts[] = {
        {"model", 'm', CMD_OPT_STR, &ro.model, "FILE", "$PLLM_HOME/models/" PLLM_DEFAULT_MODEL_FILE, "model file (GGUF)", NULL},
        {"output", 'o', CMD_OPT_STR, &out_path, "FILE", "- (stdout)", "output JSONL file (.zst compresses)", NULL},
        {"max-tokens", 0, CMD_OPT_INT, &max_tokens, "N", "256", "tokens to generate per request at most", NULL},
        {"min-tokens", 0, CMD_OPT_INT, &min_tokens, "N", "0", "tokens to generate before EOS/stop may end a request", NULL},
        {"temperature", 0, CMD_OPT_FLOAT, &temperature, "T", "0 (greedy)", "sampling temperature", NULL},
        {"top-p", 0, CMD_OPT_FLOAT, &top_p, "P", "1 (off)", "nucleus sampling threshold", NULL},
        {"top-k", 0, CMD_OPT_INT, &top_k, "K", "0 (off)", "keep the K most likely tokens", NULL},
        {"min-p", 0, CMD_OPT_FLOAT, &min_p, "P", "0 (off)", "drop tokens below P times the top probability", NULL},
        {"repetition-penalty", 0, CMD_OPT_FLOAT, &rep_pen, "R", "1 (off)", "penalise tokens of the prompt and output", NULL},
        {"presence-penalty", 0, CMD_OPT_FLOAT, &pres_pen, "X", "0 (off)", "penalise tokens present in the output", NULL},
        {"frequency-penalty", 0, CMD_OPT_FLOAT, &freq_pen, "X", "0 (off)", "penalise tokens by their count in the output", NULL},
        {"seed", 0, CMD_OPT_INT64, &seed, "N", "0", "run seed (requests without a seed derive theirs from it)", NULL},
        {"stop", 0, CMD_OPT_STRS, &stop, "STR", NULL, "stop string (repeatable)", NULL},
        {"ignore-eos", 0, CMD_OPT_FLAG, &ignore_eos, NULL, NULL, "keep generating past EOS", NULL},
        {"echo", 0, CMD_OPT_FLAG, &echo, NULL, NULL, "include the prompt in each output record", NULL},
        {"token-ids", 0, CMD_OPT_FLAG, &token_ids, NULL, NULL, "include the generated token ids", NULL},
        {"strict", 0, CMD_OPT_FLAG, &strict, NULL, NULL, "stop at the first bad record instead of writing an error record", NULL},
        {"resume", 0, CMD_OPT_FLAG, &resume, NULL, NULL, "skip ids already in the output file and append to it", NULL},
        {"threads", 't', CMD_OPT_INT, &ro.threads, "N", "all cores", "CPU threads", NULL},
        {"device", 0, CMD_OPT_STR, &ro.device, "DEV", "auto", "auto, cpu, cuda or cuda:N", NULL},
        {"block-size", 0, CMD_OPT_INT, &ep.block_size, "N", defbuf[0], "tokens per KV cache block", NULL},
        {"num-blocks", 0, CMD_OPT_INT, &ep.n_blocks, "N", "from --kv-cache-mb", "KV cache blocks", NULL},
        {"kv-cache-mb", 0, CMD_OPT_INT, &kv_mb, "MB", "from free memory", "KV cache budget", NULL},
        {"max-batched-tokens", 0, CMD_OPT_INT, &ep.max_batched_tokens, "N", defbuf[1], "token budget per engine step", NULL},
        {"max-seqs", 0, CMD_OPT_INT, &ep.max_seqs, "N", defbuf[2], "sequences per engine step", NULL},
        {"max-model-len", 0, CMD_OPT_INT, &ep.max_model_len, "N", "the model's context length", "longest context (prompt + output)", NULL},
        {"no-prefix-cache", 0, CMD_OPT_FLAG, &no_prefix_cache, NULL, NULL, "disable block-level prefix reuse", NULL},
        {"window", 0, CMD_OPT_INT, &window, "N", "1024", "requests read ahead into the engine at most", NULL},
        {"stats-json", 0, CMD_OPT_STR, &stats_json, "FILE", NULL, "also write the statistics as JSON to FILE", NULL},
        {"quiet", 'q', CMD_OPT_FLAG, &quiet, NULL, NULL, "no progress or report on stderr", NULL},
    };
    const cmd_spec spec = {
        .usage = "pllm generate [OPTIONS] PROMPTS.jsonl|-",
        .summary = "Generate a completion for every prompt record. Records are JSON lines with \"prompt\" (raw text) or\n"
                   "\"messages\" (rendered with the model's chat template), an optional \"id\", and optional sampling\n"
                   "fields that override the options below. One JSON line per request is written as it finishes.",
        .opts = opts, .n_opts = PLLM_ARRAY_LEN(opts), .min_pos = 1, .max_pos = 1};
    const char *pos[1];
    int n_pos;
    int rc = cmd_parse(&spec, argc, argv, pos, &n_pos);
    if (rc) return rc == 1 ? 0 : 2;
    if (window < 1) { fprintf(stderr, "pllm: --window must be >= 1\n"); return 2; }
    if (kv_mb < 0) { fprintf(stderr, "pllm: --kv-cache-mb must be >= 0\n"); return 2; }
    if (resume && strcmp(out_path, "-") == 0) { fprintf(stderr, "pllm: --resume needs an output file (-o FILE)\n"); return 2; }

    pllm_request_params defaults;
    pllm_request_params_defaults(&defaults);
    defaults.max_tokens = max_tokens;
    defaults.min_tokens = min_tokens;
    defaults.ignore_eos = ignore_eos;
    defaults.sampling.temperature = temperature;
    defaults.sampling.top_p = top_p;
    defaults.sampling.top_k = top_k;
    defaults.sampling.min_p = min_p;
    defaults.sampling.repetition_penalty = rep_pen;
    defaults.sampling.presence_penalty = pres_pen;
    defaults.sampling.frequency_penalty = freq_pen;
    for (int i = 0; i < stop.n; i++) defaults.stop[i] = stop.v[i];
    defaults.n_stop = stop.n;
    if (pllm_request_params_validate(&defaults) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 2;
    }
    ep.seed = (uint64_t)seed;
    ep.no_prefix_cache = no_prefix_cache;
    ep.kv_bytes = (size_t)kv_mb << 20;

    pllm_idset *done = NULL;
    if (resume) {
        int64_t n_lines;
        bool torn;
        if (pllm_idset_create(&done) != PLLM_OK || pllm_idset_load_output(done, out_path, &n_lines, &torn) != PLLM_OK) {
            fprintf(stderr, "pllm: --resume: %s\n", pllm_errmsg());
            pllm_idset_free(done);
            return 3;
        }
        if (!quiet)
            fprintf(stderr, "pllm: resuming: %lld records already in %s%s\n", (long long)n_lines, out_path,
                    torn ? " (a torn last line was cut off)" : "");
    }

    cmd_runtime rt;
    if ((rc = cmd_runtime_open(&rt, &ro, quiet)) != 0) {
        pllm_idset_free(done);
        return rc;
    }
    pllm_engine *eng = NULL;
    pllm_reader *in = NULL;
    gen_ctx g = {.oo = {.echo_prompt = echo, .token_ids = token_ids}, .quiet = quiet};
    pllm_report_init(&g.rep, pllm_now());
    if (pllm_engine_create(&eng, rt.model, &rt.backend, rt.tok, &ep) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        rc = 3;
        goto out;
    }
    if (pllm_reader_open(&in, pos[0]) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        rc = 3;
        goto out;
    }
    if (pllm_writer_open(&g.w, out_path, resume) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        rc = 3;
        goto out;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    bool eof = false, input_error = false;
    int64_t n_skipped = 0;
    pllm_tokens ids = {0};
    while (!g_interrupted && g.write_st == PLLM_OK && !input_error) {
        while (!eof && g.in_flight < window && g.write_st == PLLM_OK && !g_interrupted) {
            const char *line;
            size_t len;
            int64_t lineno;
            if (pllm_reader_next(in, &line, &len, &lineno, &eof) != PLLM_OK) {
                fprintf(stderr, "pllm: %s\n", pllm_errmsg());
                input_error = true;
                break;
            }
            if (eof) break;
            if (pllm_record_line_is_blank(line, len)) continue;
            pllm_record rec;
            pllm_status st = pllm_record_parse(&rec, line, len, lineno, &defaults);
            if (st == PLLM_OK && done) {
                char *key = pllm_record_id_text(rec.id);
                bool skip = key && pllm_idset_count(done, key) > 0;
                free(key);
                if (skip) {
                    n_skipped++;
                    pllm_record_free(&rec);
                    continue;
                }
            }
            uint64_t req_id;
            gen_req *r = NULL;
            ids.n = 0;
            if (st == PLLM_OK) st = record_tokens(&rt, &rec, &ids);
            if (st == PLLM_OK) {
                r = pllm_calloc(1, sizeof *r);
                if (!r) st = PLLM_ERR_NOMEM;
            }
            if (st == PLLM_OK) {
                r->id = json_incref(rec.id);
                r->n = r->remaining = rec.params.n;
                if (echo) r->prompt = pllm_strdup(rec.prompt ? rec.prompt : rec.messages[rec.n_messages - 1].content);
                st = pllm_engine_add(eng, ids.ids, (int32_t)ids.n, &rec.params, r, &req_id);
                if (st != PLLM_OK) pllm_error_prefix(st, "line %lld: ", (long long)lineno);
            }
            if (st != PLLM_OK) {
                if (done && rec.id) {
                    char *key = pllm_record_id_text(rec.id);
                    bool skip = key && pllm_idset_count(done, key) > 0;
                    free(key);
                    if (skip) { /* an error record for this id is already in the output */
                        gen_req_free(r);
                        pllm_record_free(&rec);
                        n_skipped++;
                        continue;
                    }
                }
                char msg[2048];
                snprintf(msg, sizeof msg, "%s", pllm_errmsg());
                reject(&g, rec.id, lineno, msg);
                gen_req_free(r);
                pllm_record_free(&rec);
                if (strict) {
                    fprintf(stderr, "pllm: --strict: stopping at the first bad record: %s\n", msg);
                    input_error = true;
                    break;
                }
                continue;
            }
            g.in_flight++;
            pllm_record_free(&rec);
        }
        if (!pllm_engine_has_work(eng)) {
            if (eof || input_error) break;
            continue;
        }
        if (pllm_engine_step(eng, on_done, &g) != PLLM_OK) {
            fprintf(stderr, "pllm: engine step failed: %s\n", pllm_errmsg());
            rc = 3;
            break;
        }
    }
    pllm_tokens_free(&ids);

    pllm_engine_stats es;
    pllm_engine_get_stats(eng, &es);
    if (!quiet) {
        if (n_skipped) fprintf(stderr, "pllm: skipped %lld records already in the output\n", (long long)n_skipped);
        pllm_report_print(&g.rep, &es, stderr);
    }
    if (stats_json) {
        json_t *j = pllm_report_json(&g.rep, &es);
        if (json_dump_file(j, stats_json, JSON_INDENT(2)) != 0) fprintf(stderr, "pllm: cannot write %s\n", stats_json);
        json_decref(j);
    }
    if (g.write_st != PLLM_OK) {
        fprintf(stderr, "pllm: writing output failed: %s\n       the records written before it are intact; rerun with --resume\n",
                pllm_errmsg());
        rc = 3;
    } else if (g_interrupted) {
        fprintf(stderr, "pllm: interrupted: %lld finished records are in %s; rerun the same command with --resume to continue\n",
                (long long)(g.rep.n_ok + g.rep.n_failed), strcmp(out_path, "-") ? out_path : "the output");
        rc = 130;
    } else if (input_error) {
        rc = 3;
    } else if (rc == 0 && g.rep.n_failed > 0) {
        rc = 1;
    }
out:
    if (g.w) {
        pllm_status cst = pllm_writer_close(g.w);
        if (cst != PLLM_OK && rc == 0) {
            fprintf(stderr, "pllm: %s\n", pllm_errmsg());
            rc = 3;
        }
    }
    pllm_reader_close(in);
    pllm_engine_free(eng);
    pllm_report_free(&g.rep);
    cmd_runtime_close(&rt);
    pllm_idset_free(done);
    return rc;
}

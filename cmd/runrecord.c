#include "cmd/runrecord.h"

#include "cmd/output.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

char *cmd_run_record_path(const char *out_path)
{
    pllm_buf b = {0};
    if (pllm_buf_appendf(&b, "%s.pllm.json", out_path) != PLLM_OK) return NULL;
    return b.s;
}

json_t *cmd_run_record_input(const char *path)
{
    if (strcmp(path, "-") == 0) return json_pack("{s:s}", "path", "<stdin>");
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "pllm: %s: cannot open: %s\n", path, strerror(errno));
        return NULL;
    }
    XXH3_state_t *st = XXH3_createState();
    char *buf = pllm_malloc(1 << 20);
    if (!st || !buf) {
        fprintf(stderr, "pllm: out of memory\n");
        XXH3_freeState(st);
        free(buf);
        fclose(f);
        return NULL;
    }
    XXH3_64bits_reset(st);
    uint64_t size = 0;
    size_t n;
    while ((n = fread(buf, 1, 1 << 20, f)) > 0) {
        XXH3_64bits_update(st, buf, n);
        size += n;
    }
    bool bad = ferror(f);
    fclose(f);
    free(buf);
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    if (bad) {
        fprintf(stderr, "pllm: %s: read error while fingerprinting it\n", path);
        return NULL;
    }
    char hex[24];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    return json_pack("{s:s, s:I, s:s}", "path", path, "size", (json_int_t)size, "xxh3", hex);
}

json_t *cmd_run_record_options(const char *format, const char *output_format, bool echo,
                               bool token_ids, const char *model_name, uint64_t model_identity,
                               const pllm_request_params *d, uint64_t run_seed)
{
    char ident[24], seed[24], rseed[24];
    snprintf(ident, sizeof ident, "%016llx", (unsigned long long)model_identity);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)d->sampling.seed);
    snprintf(rseed, sizeof rseed, "%llu", (unsigned long long)run_seed);
    const pllm_sampling_params *s = &d->sampling;
    json_t *stop = json_array();
    for (int32_t i = 0; i < d->n_stop; i++) json_array_append_new(stop, json_string(d->stop[i]));
    json_t *stop_ids = json_array();
    for (int32_t i = 0; i < d->n_stop_ids; i++)
        json_array_append_new(stop_ids, json_integer(d->stop_ids[i]));
    json_t *sampling = json_pack(
        "{s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:s?, s:i, s:i, s:i, s:b, s:o, s:o, s:i}",
        "temperature", (double)s->temperature, "top_p", (double)s->top_p, "top_k", s->top_k,
        "min_p", (double)s->min_p, "repetition_penalty", (double)s->repetition_penalty,
        "presence_penalty", (double)s->presence_penalty, "frequency_penalty",
        (double)s->frequency_penalty, "seed", d->has_seed ? seed : NULL, "logprobs", s->logprobs,
        "max_tokens", d->max_tokens, "min_tokens", d->min_tokens, "ignore_eos", d->ignore_eos,
        "stop", stop, "stop_token_ids", stop_ids, "n", d->n);
    return json_pack("{s:s, s:s, s:b, s:b, s:{s:s, s:s}, s:o, s:s}", "format", format,
                     "output_format", output_format, "echo", echo, "token_ids", token_ids, "model",
                     "name", model_name ? model_name : "", "identity", ident, "sampling", sampling,
                     "run_seed", rseed);
}

/* Append "    KEY: was A, now B" for every key of a or b whose values differ. */
static void diff_objects(pllm_buf *out, const char *prefix, const json_t *was, const json_t *now)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)now, k, v)
    {
        const json_t *w = json_object_get(was, k);
        if (json_equal(w, v)) continue;
        if (json_is_object(w) && json_is_object(v)) {
            char p[256];
            snprintf(p, sizeof p, "%s%s.", prefix, k);
            diff_objects(out, p, w, v);
            continue;
        }
        char *a = w ? json_dumps(w, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        char *b = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        pllm_buf_appendf(out, "\n      %s%s: was %s, now %s", prefix, k, a ? a : "(not recorded)",
                         b ? b : "?");
        free(a);
        free(b);
    }
    json_object_foreach((json_t *)was, k, v)
    {
        if (!json_object_get(now, k))
            pllm_buf_appendf(out, "\n      %s%s: recorded, now absent", prefix, k);
    }
}

int cmd_run_record_check(const char *out_path, const json_t *input, const json_t *options)
{
    char *rp = cmd_run_record_path(out_path);
    if (!rp) return 2;
    json_error_t jerr;
    json_t *rec = json_load_file(rp, 0, &jerr);
    int rc = 0;
    if (!json_is_object(rec) || !json_is_object(json_object_get(rec, "input"))) {
        fprintf(stderr,
                "pllm: --resume: %s has no record of the run that wrote it (%s: %s), so pllm "
                "cannot tell which input and options it belongs to; rerun with --overwrite to "
                "start over, or write to another file\n",
                out_path, rp, rec ? "not a pllm run record" : jerr.text);
        rc = 2;
        goto out;
    }
    const json_t *rin = json_object_get(rec, "input");
    if (!json_object_get(rin, "xxh3")) {
        fprintf(stderr,
                "pllm: --resume: the run that wrote %s read its input from stdin, which cannot be "
                "checked against this one; save the input to a file and start over with "
                "--overwrite\n",
                out_path);
        rc = 2;
        goto out;
    }
    if (!json_object_get(input, "xxh3")) {
        fprintf(stderr,
                "pllm: --resume: the input is stdin, which cannot be checked against the run "
                "that wrote %s (%s); give the input as a file\n",
                out_path, json_string_value(json_object_get(rin, "path")));
        rc = 2;
        goto out;
    }
    pllm_buf diff = {0};
    if (!json_equal(json_object_get(rin, "xxh3"), json_object_get(input, "xxh3")) ||
        !json_equal(json_object_get(rin, "size"), json_object_get(input, "size")))
        pllm_buf_appendf(&diff,
                         "\n      the input: was %s (%lld bytes, xxh3 %s), now %s (%lld bytes, "
                         "xxh3 %s): its content changed",
                         json_string_value(json_object_get(rin, "path")),
                         (long long)json_integer_value(json_object_get(rin, "size")),
                         json_string_value(json_object_get(rin, "xxh3")),
                         json_string_value(json_object_get(input, "path")),
                         (long long)json_integer_value(json_object_get(input, "size")),
                         json_string_value(json_object_get(input, "xxh3")));
    diff_objects(&diff, "", json_object_get(rec, "options"), options);
    if (diff.n) {
        fprintf(stderr,
                "pllm: --resume: %s was written by a run with another input or other options:%s\n"
                "      continuing it would skip or mix requests; rerun with the same input and "
                "options, or start over with --overwrite\n",
                out_path, diff.s);
        rc = 2;
    }
    pllm_buf_free(&diff);
out:
    json_decref(rec);
    free(rp);
    return rc;
}

int cmd_run_record_write(const char *out_path, const json_t *input, const json_t *options)
{
    char *rp = cmd_run_record_path(out_path);
    if (!rp) return 3;
    json_t *rec = json_pack("{s:i, s:s, s:s, s:O, s:O}", "pllm_run", 1, "command", "generate",
                            "output", out_path, "input", input, "options", options);
    int rc = rec ? cmd_output_write_json(rp, rec, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : 3;
    json_decref(rec);
    free(rp);
    return rc;
}

/*
 * bench_workload.c: the workloads of `pllm bench` (bench.h): synthetic prompts (random,
 * prefix) or the records of a file (sharegpt, FILE), cut to the context, and their fingerprint.
 */
#include "cmd/bench.h"
#include "datasets/source.h"
#include "datasets/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

void cmd_bench_workload_free(bench_workload *w)
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

uint64_t cmd_bench_workload_fingerprint(const bench_workload *w)
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

int cmd_bench_workload_synthetic(bench_workload *w, const bench_opts *o, const cmd_runtime *rt,
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

int cmd_bench_workload_from_file(bench_workload *w, const bench_opts *o, const cmd_runtime *rt,
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

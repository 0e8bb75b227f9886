/* shard.c: --shard in `pllm generate` (shard.h). */
#include "cmd/shard.h"

#include "cmd/firstpass.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double cmd_wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cmd_shard_init(cmd_shard *s, const cmd_shard_opts *o, const char *input, int32_t block_size)
{
    memset(s, 0, sizeof *s);
    s->planned_tokens = -1;
    s->block_size = block_size > 0 ? block_size : 16;
    pllm_shard_balance b = strcmp(input, "-") ? PLLM_SHARD_BALANCE_TOKENS : PLLM_SHARD_BALANCE_HASH;
    if (o->balance && pllm_shard_balance_parse(o->balance, &b) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 2;
    }
    if (o->key_tokens < 1) {
        fprintf(stderr, "pllm: --shard-key-tokens must be >= 1, got %d\n", o->key_tokens);
        return 2;
    }
    if (!o->shard) return 0;
    if (pllm_shard_parse(o->shard, &s->spec) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 2;
    }
    s->spec.key_tokens = o->key_tokens;
    s->spec.balance = b;
    s->on = true;
    return 0;
}

/* The id key of a record (pllm_record_key's text hashed). */
static uint64_t id_key(const pllm_record *rec)
{
    char *k = pllm_record_key(rec);
    uint64_t key = pllm_shard_text_key(k ? k : "");
    free(k);
    return key;
}

/* The prefix key of tokenized prompt ids (a cmd_pass_key_fn: ctx is the cmd_shard). */
static uint64_t shard_prefix_key(const void *ctx, const int32_t *ids, size_t n)
{
    const cmd_shard *s = ctx;
    return pllm_shard_prefix_key(ids, n, s->spec.key_tokens, s->block_size);
}

/* The prefix key of a record, tokenized into ids (its id key when it is bad or does not
 * tokenize); *rkey: its id key. */
static uint64_t record_key(const cmd_shard *s, const cmd_runtime *rt, const char *file,
                           const pllm_record *rec, pllm_tokens *ids, uint64_t *rkey)
{
    *rkey = id_key(rec);
    ids->n = 0;
    if (rec->error || cmd_record_tokens(rt, file, rec, ids, NULL) != PLLM_OK) {
        pllm_error_clear(); /* the main pass reports it */
        return *rkey;
    }
    return shard_prefix_key(s, ids->ids, ids->n);
}

/* Remember a record's prefix key for the main pass; false when out of memory. */
static bool push_key(cmd_shard *s, uint64_t key)
{
    if (s->n_keys == s->cap_keys) {
        int64_t c = s->cap_keys ? s->cap_keys * 2 : 1024;
        uint64_t *nk = pllm_realloc(s->keys, (size_t)c * sizeof *nk);
        if (!nk) return false;
        s->keys = nk;
        s->cap_keys = c;
    }
    s->keys[s->n_keys++] = key;
    return true;
}

typedef struct shard_pass {
    cmd_shard *s;
    cmd_workload *w;
    int64_t total; /* prompt tokens */
} shard_pass;

static int shard_visit(void *ctx, const cmd_pass_item *it)
{
    shard_pass *sp = ctx;
    cmd_shard *s = sp->s;
    int rc;
    if (sp->w && (rc = cmd_workload_add(sp->w, it->rec, it->tokens)) != 0) return rc;
    /* a record without tokens is keyed by its id (datasets/shard.h) */
    uint64_t key = it->tokens >= 0 ? it->key : id_key(it->rec);
    int64_t tokens = PLLM_MAX(it->tokens, 0);
    sp->total += tokens;
    if (pllm_shard_plan_add(s->plan, key, tokens) != PLLM_OK || !push_key(s, key)) {
        fprintf(stderr, "pllm: --shard: out of memory planning the shards\n");
        return 3;
    }
    return 0;
}

int cmd_shard_prepare(cmd_shard *s, const cmd_runtime *rt, const char *input, pllm_format format,
                      const pllm_request_params *defaults, int64_t limit, cmd_workload *w,
                      bool quiet)
{
    if (!s->on) return 0;
    if (s->spec.balance == PLLM_SHARD_BALANCE_TOKENS && !strcmp(input, "-")) {
        if (!quiet)
            fprintf(stderr, "pllm: --shard-balance tokens needs two passes over the input and "
                            "stdin has one: using hash\n");
        s->spec.balance = PLLM_SHARD_BALANCE_HASH;
    }
    if (s->spec.balance != PLLM_SHARD_BALANCE_TOKENS) return 0;
    double t0 = pllm_now();
    if (pllm_shard_plan_create(&s->plan) != PLLM_OK) {
        fprintf(stderr, "pllm: --shard: %s\n", pllm_errmsg());
        return 3;
    }
    shard_pass sp = {.s = s, .w = w && w->want ? w : NULL};
    int64_t n = 0;
    int rc = cmd_first_pass(rt, input, format, s->extra, defaults, limit, shard_prefix_key, s,
                            shard_visit, &sp, &n);
    if (rc < 0) {
        fprintf(stderr, "pllm: --shard: %s\n", pllm_errmsg());
        return 3;
    }
    if (rc != 0) return rc;
    if (sp.w) sp.w->filled = true;
    if (pllm_shard_plan_finish(s->plan, s->spec.n) != PLLM_OK) {
        fprintf(stderr, "pllm: --shard: out of memory planning the shards\n");
        return 3;
    }
    s->planned_tokens = pllm_shard_plan_tokens(s->plan, s->spec.k);
    if (!quiet)
        fprintf(stderr,
                "pllm: shard %d/%d: planned %lld of %lld prompt tokens (%lld records, %lld prefix "
                "keys of %d tokens; first pass %.1f s)\n",
                s->spec.k, s->spec.n, (long long)s->planned_tokens, (long long)sp.total,
                (long long)n, (long long)pllm_shard_plan_keys(s->plan), s->spec.key_tokens,
                pllm_now() - t0);
    return 0;
}

bool cmd_shard_keep(cmd_shard *s, const cmd_runtime *rt, const char *file, const pllm_record *rec,
                    pllm_tokens *scratch, int64_t *index)
{
    *index = s->n_read++;
    if (!s->on) return true;
    uint64_t key, rkey;
    if (*index < s->n_keys) { /* the first pass tokenized it: its key, without tokenizing again */
        key = s->keys[*index];
        rkey = id_key(rec);
    } else {
        key = record_key(s, rt, file, rec, scratch, &rkey);
    }
    bool keep = pllm_shard_of(s->plan, key, rkey, s->spec.n) == s->spec.k;
    if (keep) s->n_in_shard++;
    return keep;
}

char *cmd_shard_tag(char *line, int64_t index)
{
    if (!line) return NULL;
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] != '}') n--;
    if (n == 0) return line; /* not an object: leave it */
    pllm_buf b = {0};
    bool empty = n >= 2 && line[n - 2] == '{';
    if (pllm_buf_append(&b, line, n - 1) != PLLM_OK ||
        pllm_buf_appendf(&b, "%s\"input_index\":%lld}", empty ? "" : ",", (long long)index) !=
            PLLM_OK) {
        pllm_buf_free(&b);
        free(line);
        return NULL;
    }
    free(line);
    return b.s;
}

int cmd_shard_begin(cmd_shard *s, const char *out_path, bool resume, const char *input,
                    const char *model_name, const char *device, int64_t limit, bool quiet)
{
    s->started_at = cmd_wall_time();
    if (!s->on) return 0;
    if (!strcmp(out_path, "-")) {
        if (!quiet)
            fprintf(stderr, "pllm: --shard to stdout: no sidecar is written, so pllm merge "
                            "cannot check this shard (use -o FILE)\n");
        return 0;
    }
    s->sidecar = pllm_shard_sidecar_path(out_path);
    if (!s->sidecar) return 3;
    json_t *doc = NULL;
    if (resume) {
        pllm_shard_meta old;
        pllm_status st = pllm_shard_meta_load(&old, s->sidecar);
        if (st == PLLM_OK) {
            const pllm_shard_spec *o = &old.spec;
            if (o->k != s->spec.k || o->n != s->spec.n || o->key_tokens != s->spec.key_tokens ||
                o->balance != s->spec.balance) {
                fprintf(stderr,
                        "pllm: --resume: %s belongs to shard %d/%d (key %d tokens, balance %s), "
                        "not %d/%d (key %d, %s)\n",
                        out_path, o->k, o->n, o->key_tokens, pllm_shard_balance_name(o->balance),
                        s->spec.k, s->spec.n, s->spec.key_tokens,
                        pllm_shard_balance_name(s->spec.balance));
                pllm_shard_meta_free(&old);
                return 2;
            }
            doc = old.doc;
        } else if (st != PLLM_ERR_NOT_FOUND) {
            fprintf(stderr, "pllm: --resume: %s\n", pllm_errmsg());
            return 3;
        }
    }
    if (!doc) {
        doc = json_object();
        json_object_set_new(doc, "pllm_shard", json_integer(PLLM_SHARD_SIDECAR_VERSION));
        json_object_set_new(doc, "shard", json_integer(s->spec.k));
        json_object_set_new(doc, "num_shards", json_integer(s->spec.n));
        json_object_set_new(doc, "key_tokens", json_integer(s->spec.key_tokens));
        json_object_set_new(doc, "block_size", json_integer(s->block_size));
        json_object_set_new(doc, "balance", json_string(pllm_shard_balance_name(s->spec.balance)));
        json_object_set_new(doc, "input", json_string(input));
        json_object_set_new(doc, "limit", json_integer(limit));
        json_object_set_new(doc, "model", json_string(model_name ? model_name : ""));
        json_object_set_new(doc, "records_in_shard", json_null());
        json_object_set_new(doc, "records_read", json_null());
        json_object_set_new(doc, "complete", json_false());
        json_object_set_new(doc, "attempts", json_array());
    }
    s->meta.spec = s->spec;
    s->meta.doc = doc;
    json_object_set_new(doc, "complete", json_false());
    if (s->planned_tokens >= 0)
        json_object_set_new(doc, "planned_prompt_tokens", json_integer(s->planned_tokens));
    json_t *att = json_object();
    json_object_set_new(att, "started_at", json_real(s->started_at));
    json_object_set_new(att, "finished_at", json_null());
    json_object_set_new(att, "exit", json_null());
    json_object_set_new(att, "device", json_string(device ? device : ""));
    json_array_append_new(json_object_get(doc, "attempts"), att);
    s->attempt = att;
    if (pllm_shard_meta_save(&s->meta, s->sidecar) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 3;
    }
    return 0;
}

void cmd_shard_end(cmd_shard *s, int rc, bool read_all, bool complete, int64_t lines,
                   int64_t skipped, const pllm_engine_stats *es, const pllm_report *rep)
{
    if (!s->on || !s->attempt) return;
    json_t *a = s->attempt, *doc = s->meta.doc;
    json_object_set_new(a, "finished_at", json_real(cmd_wall_time()));
    json_object_set_new(a, "exit", json_integer(rc));
    json_object_set_new(a, "lines_written", json_integer(lines));
    json_object_set_new(a, "skipped_by_resume", json_integer(skipped));
    json_object_set_new(a, "itl_count", json_integer((json_int_t)rep->itl.count));
    json_object_set_new(a, "itl_sum_ms", json_real(rep->itl.sum * 1e3));
    json_t *c = json_object();
    json_object_set_new(c, "steps", json_integer(es->steps));
    json_object_set_new(c, "preemptions", json_integer(es->preemptions));
    json_object_set_new(c, "prompt_tokens_computed", json_integer(es->prompt_tokens_computed));
    json_object_set_new(c, "prompt_tokens_cached", json_integer(es->prompt_tokens_cached));
    json_object_set_new(c, "peak_kv_blocks", json_integer(es->peak_blocks_used));
    json_object_set_new(c, "kv_blocks", json_integer(es->n_blocks));
    json_object_set_new(a, "counters", c);
    if (read_all) {
        json_object_set_new(doc, "records_in_shard", json_integer(s->n_in_shard));
        json_object_set_new(doc, "records_read", json_integer(s->n_read));
    }
    json_object_set_new(doc, "complete", json_boolean(complete));
    if (pllm_shard_meta_save(&s->meta, s->sidecar) != PLLM_OK)
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
}

void cmd_shard_json(const cmd_shard *s, json_t *stats)
{
    json_object_set_new(stats, "started_at", json_real(s->started_at));
    json_object_set_new(stats, "finished_at", json_real(cmd_wall_time()));
    if (!s->on) return;
    json_t *o = json_object();
    json_object_set_new(o, "shard", json_integer(s->spec.k));
    json_object_set_new(o, "num_shards", json_integer(s->spec.n));
    json_object_set_new(o, "key_tokens", json_integer(s->spec.key_tokens));
    json_object_set_new(o, "balance", json_string(pllm_shard_balance_name(s->spec.balance)));
    json_object_set_new(o, "records_in_shard", json_integer(s->n_in_shard));
    json_object_set_new(o, "records_read", json_integer(s->n_read));
    if (s->planned_tokens >= 0)
        json_object_set_new(o, "planned_prompt_tokens", json_integer(s->planned_tokens));
    json_object_set_new(stats, "shard", o);
}

void cmd_shard_free(cmd_shard *s)
{
    pllm_shard_plan_free(s->plan);
    free(s->keys);
    pllm_shard_meta_free(&s->meta);
    free(s->sidecar);
    memset(s, 0, sizeof *s);
}

/* merge.c: pllm merge (merge.h). */
#include "datasets/merge.h"

#include "datasets/io.h"
#include "datasets/shard.h"
#include "datasets/source.h"
#include "engine/report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* ---------------------------------------------------------------- key -> chosen line */

typedef struct mentry {
    char *key; /* NULL: empty slot */
    int32_t file;
    int64_t line; /* 1-based line number in that file */
    bool ok;
} mentry;

typedef struct mmap_ {
    mentry *e; /* [cap], a power of two */
    size_t cap, n;
} mmap_;

static mentry *mfind(const mmap_ *m, const char *key)
{
    static mentry none; /* an empty map: never written (writers grow the map first) */
    if (m->cap == 0) {
        memset(&none, 0, sizeof none);
        return &none;
    }
    size_t i = (size_t)XXH3_64bits(key, strlen(key)) & (m->cap - 1);
    while (m->e[i].key && strcmp(m->e[i].key, key)) i = (i + 1) & (m->cap - 1);
    return &m->e[i];
}

static pllm_status mgrow(mmap_ *m)
{
    if (m->cap && (m->n + 1) * 4 <= m->cap * 3) return PLLM_OK;
    mmap_ g = {.cap = m->cap ? 2 * m->cap : 1024, .n = m->n};
    g.e = pllm_calloc(g.cap, sizeof *g.e);
    if (!g.e) return PLLM_ERR_NOMEM;
    for (size_t i = 0; i < m->cap; i++)
        if (m->e[i].key) *mfind(&g, m->e[i].key) = m->e[i];
    free(m->e);
    *m = g;
    return PLLM_OK;
}

static void mfree(mmap_ *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->e[i].key);
    free(m->e);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- one output line */

typedef struct mline {
    json_t *obj;
    char *key;           /* owned */
    bool ok, is_first;   /* a successful line; index absent or 0 (counts as a record) */
    int64_t input_index; /* -1: none */
} mline;

/* Parse an output line; false when it names no request. */
static bool mline_parse(mline *l, const char *text, size_t len)
{
    memset(l, 0, sizeof *l);
    l->input_index = -1;
    l->obj = json_loadb(text, len, 0, NULL);
    if (!json_is_object(l->obj)) goto bad;
    char *k = pllm_output_key(l->obj);
    if (!k) goto bad;
    const json_t *ix = json_object_get(l->obj, "index");
    if (json_is_integer(ix) && !json_object_get(l->obj, "custom_id")) {
        pllm_buf b = {0};
        pllm_buf_appendf(&b, "%s\x1f%lld", k, (long long)json_integer_value(ix));
        free(k);
        k = b.s;
        l->is_first = json_integer_value(ix) == 0;
    } else {
        l->is_first = true;
    }
    if (!k) goto bad;
    l->key = k;
    const json_t *resp = json_object_get(l->obj, "response");
    if (json_is_object(resp)) {
        l->ok = json_integer_value(json_object_get(resp, "status_code")) == 200 &&
                json_is_null(json_object_get(l->obj, "error"));
    } else {
        const char *fr = json_string_value(json_object_get(l->obj, "finish_reason"));
        l->ok = fr && strcmp(fr, "error") != 0;
    }
    const json_t *ii = json_object_get(l->obj, "input_index");
    if (json_is_integer(ii) && json_integer_value(ii) >= 0) l->input_index = json_integer_value(ii);
    return true;
bad:
    json_decref(l->obj);
    l->obj = NULL;
    return false;
}

static void mline_free(mline *l)
{
    json_decref(l->obj);
    free(l->key);
    memset(l, 0, sizeof *l);
}

/* The line without the ,"input_index":N shard runs append before the closing brace (only when
 * it is exactly there; anything else is written as it is). */
static size_t strip_index(const char *s, size_t n, char *tmp, size_t cap, const char **out)
{
    *out = s;
    const char *tag = "\"input_index\":";
    size_t e = n;
    while (e > 0 && (s[e - 1] == '\r' || s[e - 1] == ' ')) e--;
    if (e < 2 || s[e - 1] != '}') return n;
    size_t d = e - 1;
    while (d > 0 && s[d - 1] >= '0' && s[d - 1] <= '9') d--;
    size_t tl = strlen(tag);
    if (d == e - 1 || d < tl + 1 || memcmp(s + d - tl, tag, tl)) return n;
    size_t start = d - tl;
    if (s[start - 1] == ',')
        start--;
    else if (s[start - 1] != '{')
        return n;
    size_t m = start + 1;
    if (m > cap) return n;
    memcpy(tmp, s, start);
    tmp[start] = '}';
    *out = tmp;
    return m;
}

/* ---------------------------------------------------------------- per file */

typedef struct mfile {
    const char *path;
    bool has_meta;
    pllm_shard_meta meta;
    int64_t n_lines, n_records; /* lines read; records (index 0) chosen from it */
} mfile;

typedef struct mctx {
    const pllm_merge_params *p;
    mfile *files;
    mmap_ map;
    int named_bad;
    int max_named;
} mctx;

#define MLOG(c, ...)                                                                               \
    do {                                                                                           \
        if ((c)->p->log) fprintf((c)->p->log, __VA_ARGS__);                                        \
    } while (0)

typedef pllm_status (*line_fn)(mctx *c, int32_t f, int64_t lineno, const char *s, size_t n,
                               mline *l, void *arg);

/* Every line of file f; fn gets the parsed ones (l->obj NULL for a bad one). */
static pllm_status each_line(mctx *c, int32_t f, line_fn fn, void *arg)
{
    pllm_reader *r = NULL;
    PLLM_TRY(pllm_reader_open(&r, c->files[f].path));
    pllm_status st = PLLM_OK;
    for (;;) {
        const char *s;
        size_t n;
        int64_t lineno;
        bool eof = false;
        st = pllm_reader_next(r, &s, &n, &lineno, &eof);
        if (st == PLLM_ERR_RANGE) {
            mline l = {.input_index = -1};
            st = fn(c, f, lineno, NULL, 0, &l, arg);
            if (st != PLLM_OK) break;
            continue;
        }
        if (st != PLLM_OK || eof) break;
        if (pllm_record_line_is_blank(s, n)) continue;
        mline l;
        mline_parse(&l, s, n);
        st = fn(c, f, lineno, s, n, &l, arg);
        mline_free(&l);
        if (st != PLLM_OK) break;
    }
    if (st == PLLM_OK && pllm_reader_truncated(r))
        MLOG(c,
             "pllm merge: %s: the .zst stream is cut short (a killed writer); the lines "
             "before the cut are used\n",
             c->files[f].path);
    pllm_reader_close(r);
    return st;
}

/* Pass A: choose one line per key. */
static pllm_status choose(mctx *c, int32_t f, int64_t lineno, const char *s, size_t n, mline *l,
                          void *arg)
{
    pllm_merge_result *res = arg;
    (void)s;
    (void)n;
    res->n_lines++;
    c->files[f].n_lines++;
    if (!l->obj) {
        res->n_bad++;
        if (c->named_bad++ < c->max_named)
            MLOG(c,
                 "pllm merge: %s:%lld: not an output record (a torn or damaged line); "
                 "skipped\n",
                 c->files[f].path, (long long)lineno);
        return PLLM_OK;
    }
    PLLM_TRY(mgrow(&c->map));
    mentry *e = mfind(&c->map, l->key);
    if (!e->key) {
        e->key = pllm_strdup(l->key);
        if (!e->key) return PLLM_ERR_NOMEM;
        e->file = f;
        e->line = lineno;
        e->ok = l->ok;
        c->map.n++;
        return PLLM_OK;
    }
    res->n_duplicates++;
    if (!e->ok && l->ok) {
        e->file = f;
        e->line = lineno;
        e->ok = true;
    }
    return PLLM_OK;
}

/* ---------------------------------------------------------------- pass B: write */

typedef struct mpos {
    int64_t input_index, seq;
    int64_t off;
} mpos;

typedef struct mwrite {
    pllm_writer *w;
    FILE *tmp; /* --order input */
    mpos *pos;
    size_t n_pos, cap_pos;
    int64_t seq;
    pllm_report rep;
    pllm_merge_result *res;
    char *strip; /* scratch */
    size_t strip_cap;
    int64_t *shard_records; /* [n_shards] records merged per shard */
    int32_t n_shards;
} mwrite;

static double num(const json_t *o, const char *k, bool *have)
{
    const json_t *x = json_object_get(o, k);
    *have = json_is_number(x);
    return *have ? json_number_value(x) : 0;
}

/* A chosen line into the statistics. */
static pllm_status count_line(mwrite *w, const mline *l)
{
    pllm_report *r = &w->rep;
    const json_t *o = l->obj;
    bool h;
    if (!l->ok) {
        r->n_failed++;
        if (json_object_get(o, "line") && !json_object_get(o, "latency_ms")) r->n_rejected++;
        const json_t *err = json_object_get(o, "error");
        if (json_is_object(err) && json_integer_value(json_object_get(err, "code")) == 400)
            r->n_rejected++;
        return PLLM_OK;
    }
    r->n_ok++;
    const json_t *usage =
        json_object_get(json_object_get(json_object_get(o, "response"), "body"), "usage");
    if (json_is_object(usage)) { /* openai */
        r->prompt_tokens += (int64_t)num(usage, "prompt_tokens", &h);
        r->completion_tokens += (int64_t)num(usage, "completion_tokens", &h);
        r->cached_tokens +=
            (int64_t)num(json_object_get(usage, "prompt_tokens_details"), "cached_tokens", &h);
        return PLLM_OK;
    }
    int64_t ct = (int64_t)num(o, "completion_tokens", &h);
    r->prompt_tokens += (int64_t)num(o, "prompt_tokens", &h);
    r->completion_tokens += ct;
    r->cached_tokens += (int64_t)num(o, "cached_tokens", &h);
    bool hl, ht;
    double lat = num(o, "latency_ms", &hl) * 1e-3, ttft = num(o, "ttft_ms", &ht) * 1e-3;
    if (hl && isfinite(lat)) PLLM_TRY(pllm_series_add(&r->latency, lat));
    if (ht && isfinite(ttft) && ct > 0) PLLM_TRY(pllm_series_add(&r->ttft, ttft));
    if (ht && hl && ct > 1 && isfinite(lat - ttft))
        PLLM_TRY(pllm_series_add(&r->tpot, (lat - ttft) / (double)(ct - 1)));
    return PLLM_OK;
}

static pllm_status emit(mctx *c, int32_t f, int64_t lineno, const char *s, size_t n, mline *l,
                        void *arg)
{
    mwrite *w = arg;
    if (!l->obj) return PLLM_OK;
    mentry *e = mfind(&c->map, l->key);
    if (!e->key || e->file != f || e->line != lineno) return PLLM_OK;
    if (l->is_first) {
        c->files[f].n_records++;
        if (c->files[f].has_meta && c->files[f].meta.spec.n == w->n_shards)
            w->shard_records[c->files[f].meta.spec.k]++;
    }
    PLLM_TRY(count_line(w, l));
    if (n + 1 > w->strip_cap) {
        char *t = pllm_realloc(w->strip, n + 1);
        if (!t) return PLLM_ERR_NOMEM;
        w->strip = t;
        w->strip_cap = n + 1;
    }
    const char *out;
    size_t m = strip_index(s, n, w->strip, w->strip_cap, &out);
    w->res->n_written++;
    if (!w->tmp) return pllm_writer_line(w->w, out, m);
    if (w->n_pos == w->cap_pos) {
        size_t cap = w->cap_pos ? 2 * w->cap_pos : 1024;
        mpos *p = pllm_realloc(w->pos, cap * sizeof *p);
        if (!p) return PLLM_ERR_NOMEM;
        w->pos = p;
        w->cap_pos = cap;
    }
    long off = ftell(w->tmp);
    if (off < 0 || fwrite(out, 1, m, w->tmp) != m || fputc('\n', w->tmp) == EOF)
        return pllm_errorf(PLLM_ERR_IO, "merge: writing the temporary file failed: %s",
                           strerror(errno));
    w->pos[w->n_pos++] = (mpos){l->input_index >= 0 ? l->input_index : INT64_MAX, w->seq++, off};
    return PLLM_OK;
}

static int by_input(const void *a, const void *b)
{
    const mpos *x = a, *y = b;
    if (x->input_index != y->input_index) return x->input_index < y->input_index ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static pllm_status write_sorted(mwrite *w)
{
    if (w->n_pos > 1) qsort(w->pos, w->n_pos, sizeof *w->pos, by_input);
    if (fflush(w->tmp) != 0) return pllm_errorf(PLLM_ERR_IO, "merge: temporary file: flush failed");
    pllm_buf line = {0};
    pllm_status st = PLLM_OK;
    for (size_t i = 0; i < w->n_pos && st == PLLM_OK; i++) {
        if (fseek(w->tmp, (long)w->pos[i].off, SEEK_SET) != 0) {
            st = pllm_errorf(PLLM_ERR_IO, "merge: temporary file: seek failed");
            break;
        }
        line.n = 0;
        int ch;
        while ((ch = fgetc(w->tmp)) != EOF && ch != '\n') {
            char cc = (char)ch;
            if ((st = pllm_buf_append(&line, &cc, 1)) != PLLM_OK) break;
        }
        if (st == PLLM_OK) st = pllm_writer_line(w->w, line.s ? line.s : "", line.n);
    }
    pllm_buf_free(&line);
    return st;
}

/* ---------------------------------------------------------------- sidecars */

static pllm_status check_sidecars(mctx *c, pllm_merge_result *res)
{
    const pllm_shard_spec *first = NULL;
    const char *first_path = NULL;
    for (size_t i = 0; i < c->p->n_paths; i++) {
        mfile *f = &c->files[i];
        char *sc = pllm_shard_sidecar_path(f->path);
        if (!sc) return PLLM_ERR_NOMEM;
        pllm_status st = pllm_shard_meta_load(&f->meta, sc);
        free(sc);
        if (st == PLLM_ERR_NOT_FOUND) continue;
        if (st != PLLM_OK) return st;
        f->has_meta = true;
        const pllm_shard_spec *s = &f->meta.spec;
        if (!first) {
            first = s;
            first_path = f->path;
            continue;
        }
        if (s->n != first->n || s->key_tokens != first->key_tokens || s->balance != first->balance)
            return pllm_errorf(PLLM_ERR_INVALID,
                               "%s is shard %d/%d (key %d tokens, balance %s) but %s is of "
                               "another partition: %d/%d (key %d, %s); merge the shards of one "
                               "run",
                               f->path, s->k, s->n, s->key_tokens,
                               pllm_shard_balance_name(s->balance), first_path, first->k, first->n,
                               first->key_tokens, pllm_shard_balance_name(first->balance));
    }
    res->n_shards = first ? first->n : 0;
    return PLLM_OK;
}

/* The engine counters and the wall-clock span over every recorded attempt. */
static void sum_attempts(const mctx *c, pllm_engine_stats *es, double *t0, double *t1,
                         int64_t *itl_n, double *itl_sum_ms, int64_t *n_attempts,
                         int64_t *n_unfinished)
{
    memset(es, 0, sizeof *es);
    *t0 = INFINITY;
    *t1 = -INFINITY;
    *itl_n = 0;
    *itl_sum_ms = 0;
    *n_attempts = *n_unfinished = 0;
    for (size_t i = 0; i < c->p->n_paths; i++) {
        const mfile *f = &c->files[i];
        if (!f->has_meta) continue;
        /* a file given twice counts once */
        bool again = false;
        for (size_t j = 0; j < i; j++)
            if (c->files[j].has_meta && !strcmp(c->files[j].path, f->path)) again = true;
        if (again) continue;
        const json_t *bs = json_object_get(f->meta.doc, "block_size");
        if (json_is_integer(bs)) es->block_size = (int32_t)json_integer_value(bs);
        const json_t *att = json_object_get(f->meta.doc, "attempts");
        for (size_t a = 0; a < json_array_size(att); a++) {
            const json_t *x = json_array_get(att, a);
            (*n_attempts)++;
            const json_t *s = json_object_get(x, "started_at"),
                         *e = json_object_get(x, "finished_at");
            if (json_is_number(s) && json_number_value(s) < *t0) *t0 = json_number_value(s);
            if (json_is_number(e) && json_number_value(e) > *t1) *t1 = json_number_value(e);
            if (!json_is_number(e)) (*n_unfinished)++;
            *itl_n += json_integer_value(json_object_get(x, "itl_count"));
            const json_t *is = json_object_get(x, "itl_sum_ms");
            if (json_is_number(is)) *itl_sum_ms += json_number_value(is);
            const json_t *cn = json_object_get(x, "counters");
            es->steps += json_integer_value(json_object_get(cn, "steps"));
            es->preemptions += json_integer_value(json_object_get(cn, "preemptions"));
            es->prompt_tokens_computed +=
                json_integer_value(json_object_get(cn, "prompt_tokens_computed"));
            es->prompt_tokens_cached +=
                json_integer_value(json_object_get(cn, "prompt_tokens_cached"));
            int64_t pk = json_integer_value(json_object_get(cn, "peak_kv_blocks"));
            int64_t nb = json_integer_value(json_object_get(cn, "kv_blocks"));
            if (pk > es->peak_blocks_used && pk <= INT32_MAX) es->peak_blocks_used = (int32_t)pk;
            if (nb > es->n_blocks && nb <= INT32_MAX) es->n_blocks = (int32_t)nb;
        }
    }
}

/* --input: name the records no shard wrote. */
static pllm_status check_input(mctx *c, pllm_merge_result *res, json_t *named)
{
    pllm_source *src = NULL;
    PLLM_TRY(pllm_source_open(&src, c->p->input_path, c->p->input_format));
    pllm_request_params defaults;
    pllm_request_params_defaults(&defaults);
    pllm_status st = PLLM_OK;
    mmap_ seen = {0}; /* input keys, to find the merged ones the input lacks */
    for (;;) {
        pllm_record rec;
        bool eof = false;
        st = pllm_source_next(src, &defaults, &rec, &eof);
        if (st != PLLM_OK || eof) break;
        char *k = pllm_record_key(&rec);
        if (!k) {
            pllm_record_free(&rec);
            st = PLLM_ERR_NOMEM;
            break;
        }
        pllm_buf k0 = {0};
        pllm_buf_appendf(&k0, "%s\x1f%d", k, 0);
        bool found = mfind(&c->map, k)->key || (k0.s && mfind(&c->map, k0.s)->key);
        if (!found) {
            if (res->n_missing < c->max_named) {
                MLOG(c, "pllm merge: missing: %s:%lld: id %s (no shard output holds it)\n",
                     pllm_source_path(src), (long long)rec.line, k);
                json_array_append_new(named, json_string(k));
            }
            res->n_missing++;
        }
        st = mgrow(&seen);
        if (st == PLLM_OK) {
            mentry *e = mfind(&seen, k);
            if (!e->key) {
                e->key = k;
                k = NULL;
                seen.n++;
            }
        }
        pllm_buf_free(&k0);
        free(k);
        pllm_record_free(&rec);
        if (st != PLLM_OK) break;
    }
    if (st == PLLM_OK)
        for (size_t i = 0; i < c->map.cap; i++) {
            const mentry *e = &c->map.e[i];
            if (!e->key) continue;
            char *base = pllm_strdup(e->key);
            if (!base) break;
            char *us = strchr(base, '\x1f');
            if (us) *us = 0;
            if (!mfind(&seen, base)->key) res->n_unexpected++;
            free(base);
        }
    mfree(&seen);
    pllm_source_close(src);
    return st;
}

pllm_status pllm_merge_run(const pllm_merge_params *p, pllm_merge_result *res)
{
    memset(res, 0, sizeof *res);
    mctx c = {.p = p, .max_named = p->max_named > 0 ? p->max_named : 10};
    mwrite w = {.res = res};
    pllm_report_init(&w.rep, 0);
    pllm_status st = PLLM_OK;
    json_t *shards = NULL, *missing_shards = NULL, *incomplete = NULL, *named = NULL;
    if (p->n_paths == 0) return pllm_errorf(PLLM_ERR_INVALID, "merge: no files to merge");
    c.files = pllm_calloc(p->n_paths, sizeof *c.files);
    if (!c.files) return PLLM_ERR_NOMEM;
    for (size_t i = 0; i < p->n_paths; i++) c.files[i].path = p->paths[i];
    if ((st = check_sidecars(&c, res)) != PLLM_OK) goto fail;
    for (size_t i = 0; i < p->n_paths && st == PLLM_OK; i++)
        st = each_line(&c, (int32_t)i, choose, res);
    if (st != PLLM_OK) goto fail;

    w.n_shards = res->n_shards;
    w.shard_records = pllm_calloc((size_t)(w.n_shards ? w.n_shards : 1), sizeof *w.shard_records);
    if (!w.shard_records) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    if ((st = pllm_writer_open(&w.w, p->out_path, false)) != PLLM_OK) goto fail;
    if (p->order_input && !(w.tmp = tmpfile())) {
        st = pllm_errorf(PLLM_ERR_IO, "merge: cannot create a temporary file: %s", strerror(errno));
        goto fail;
    }
    for (size_t i = 0; i < p->n_paths && st == PLLM_OK; i++)
        st = each_line(&c, (int32_t)i, emit, &w);
    if (st == PLLM_OK && w.tmp) st = write_sorted(&w);
    pllm_status cst = pllm_writer_close(w.w);
    w.w = NULL;
    if (st == PLLM_OK) st = cst;
    if (st != PLLM_OK) goto fail;

    /* shard coverage */
    shards = json_array();
    missing_shards = json_array();
    incomplete = json_array();
    named = json_array();
    for (int32_t k = 0; k < res->n_shards; k++) {
        bool covered = false, complete = false;
        int64_t expect = -1;
        json_t *files = json_array();
        for (size_t i = 0; i < p->n_paths; i++) {
            const mfile *f = &c.files[i];
            if (!f->has_meta || f->meta.spec.k != k) continue;
            covered = true;
            json_array_append_new(files, json_string(f->path));
            if (json_is_true(json_object_get(f->meta.doc, "complete"))) complete = true;
            const json_t *ris = json_object_get(f->meta.doc, "records_in_shard");
            if (json_is_integer(ris) && json_integer_value(ris) > expect)
                expect = json_integer_value(ris);
        }
        json_t *o = json_object();
        json_object_set_new(o, "shard", json_integer(k));
        json_object_set_new(o, "files", files);
        json_object_set_new(o, "records_merged", json_integer(w.shard_records[k]));
        json_object_set_new(o, "records_in_shard",
                            expect >= 0 ? json_integer(expect) : json_null());
        json_object_set_new(o, "complete", json_boolean(complete));
        json_array_append_new(shards, o);
        if (!covered) {
            res->n_missing_shards++;
            json_array_append_new(missing_shards, json_integer(k));
            MLOG(&c, "pllm merge: missing shard %d/%d: no output of it was given\n", k,
                 res->n_shards);
        } else if (!complete || (expect >= 0 && w.shard_records[k] < expect)) {
            res->n_incomplete_shards++;
            json_array_append_new(incomplete, json_integer(k));
            if (expect >= 0 && w.shard_records[k] < expect) {
                if (!p->input_path) res->n_missing += expect - w.shard_records[k];
                MLOG(&c,
                     "pllm merge: shard %d/%d is incomplete: %lld of its %lld records "
                     "merged; rerun it with --resume\n",
                     k, res->n_shards, (long long)w.shard_records[k], (long long)expect);
            } else {
                MLOG(&c,
                     "pllm merge: shard %d/%d did not finish (no attempt completed); rerun "
                     "it with --resume\n",
                     k, res->n_shards);
            }
        }
    }
    if (p->input_path) {
        res->n_missing = 0;
        if ((st = check_input(&c, res, named)) != PLLM_OK) goto fail;
        if (res->n_unexpected)
            MLOG(&c, "pllm merge: %lld merged records are not in %s\n",
                 (long long)res->n_unexpected, p->input_path);
    }

    /* statistics */
    pllm_engine_stats es;
    double t0, t1, itl_sum;
    int64_t itl_n, n_att, n_unf;
    sum_attempts(&c, &es, &t0, &t1, &itl_n, &itl_sum, &n_att, &n_unf);
    es.prompt_tokens = w.rep.prompt_tokens;
    es.output_tokens = w.rep.completion_tokens;
    es.requests_finished = w.rep.n_ok + w.rep.n_failed - w.rep.n_rejected;
    es.requests_failed = w.rep.n_failed - w.rep.n_rejected;
    bool span = isfinite(t0) && isfinite(t1) && t1 > t0;
    w.rep.t_start = span ? t0 : 0;
    w.rep.t_end = span ? t1 : 0;
    w.rep.at_run_start = (pllm_run_totals){0};
    res->stats = pllm_report_json(&w.rep, n_att > 0 ? &es : NULL);
    if (!res->stats) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    if (!span) {
        const char *tp[] = {"duration", "request_throughput", "input_throughput",
                            "output_throughput", "total_token_throughput"};
        for (size_t i = 0; i < sizeof tp / sizeof tp[0]; i++)
            json_object_set_new(res->stats, tp[i], json_null());
    }
    json_object_set_new(res->stats, "mean_itl_ms",
                        itl_n > 0 ? json_real(itl_sum / (double)itl_n) : json_null());
    json_object_set_new(res->stats, "command", json_string("merge"));
    json_t *m = json_object();
    json_object_set_new(m, "files", json_integer((json_int_t)p->n_paths));
    json_object_set_new(m, "lines_read", json_integer(res->n_lines));
    json_object_set_new(m, "lines_written", json_integer(res->n_written));
    json_object_set_new(m, "duplicates_removed", json_integer(res->n_duplicates));
    json_object_set_new(m, "bad_lines", json_integer(res->n_bad));
    json_object_set_new(m, "num_shards", json_integer(res->n_shards));
    json_object_set_new(m, "attempts", json_integer(n_att));
    json_object_set_new(m, "attempts_unfinished", json_integer(n_unf));
    json_object_set_new(m, "missing_records", json_integer(res->n_missing));
    json_object_set_new(m, "missing_ids", named);
    named = NULL;
    json_object_set_new(m, "unexpected_records", json_integer(res->n_unexpected));
    json_object_set_new(m, "missing_shards", missing_shards);
    missing_shards = NULL;
    json_object_set_new(m, "incomplete_shards", incomplete);
    incomplete = NULL;
    json_object_set_new(m, "shards", shards);
    shards = NULL;
    json_object_set_new(m, "wall_clock_start", span ? json_real(t0) : json_null());
    json_object_set_new(m, "wall_clock_end", span ? json_real(t1) : json_null());
    json_object_set_new(m, "itl_percentiles",
                        json_string("not recomputable: outputs carry no per-token times"));
    json_object_set_new(res->stats, "merge", m);

fail:
    json_decref(shards);
    json_decref(missing_shards);
    json_decref(incomplete);
    json_decref(named);
    if (w.w) pllm_writer_close(w.w);
    if (w.tmp) fclose(w.tmp);
    free(w.pos);
    free(w.strip);
    free(w.shard_records);
    pllm_report_free(&w.rep);
    for (size_t i = 0; i < p->n_paths; i++) pllm_shard_meta_free(&c.files[i].meta);
    free(c.files);
    mfree(&c.map);
    if (st != PLLM_OK && res->stats) {
        json_decref(res->stats);
        res->stats = NULL;
    }
    return st;
}

void pllm_merge_result_free(pllm_merge_result *res)
{
    if (!res) return;
    json_decref(res->stats);
    res->stats = NULL;
}

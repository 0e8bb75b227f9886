/* firstpass.c: a file input's records tokenized on every core before the run (firstpass.h). */
#include "cmd/firstpass.h"

#include "cpu/threadpool.h"
#include "datasets/source.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PASS_BATCH       1024 /* records a batch holds (two batches at a time) */
#define PASS_MAX_THREADS 64

/* One batch of records and what the workers found. */
typedef struct pass_batch {
    pllm_record recs[PASS_BATCH];
    int64_t tokens[PASS_BATCH];
    uint64_t keys[PASS_BATCH];
    int n;
    int64_t first; /* the input position of recs[0] */
} pass_batch;

typedef struct pass_state {
    const cmd_runtime *rt;
    const char *file;
    cmd_pass_key_fn key_fn;
    const void *key_ctx;
    pllm_source *src;
    const pllm_request_params *defaults;
    int64_t limit, n_read;
    bool done;         /* end of input, limit, or an input error */
    pass_batch *cur;   /* being tokenized */
    pass_batch *next;  /* being read (by thread 0, meanwhile) */
    atomic_int taken;  /* the next record of cur to take */
    pllm_tokens *bufs; /* one per thread */
} pass_state;

/* Read the next batch (thread 0 only: the source is not shared). */
static void read_batch(pass_state *ps, pass_batch *b)
{
    b->n = 0;
    b->first = ps->n_read;
    while (!ps->done && b->n < PASS_BATCH) {
        bool eof = false;
        if (ps->limit > 0 && ps->n_read >= ps->limit) {
            ps->done = true;
        } else if (pllm_source_next(ps->src, ps->defaults, &b->recs[b->n], &eof) != PLLM_OK) {
            pllm_error_clear(); /* the main pass reports it at the same record */
            ps->done = true;
        } else if (eof) {
            ps->done = true;
        } else {
            b->n++;
            ps->n_read++;
        }
    }
}

static void tokenize_one(const pass_state *ps, pass_batch *b, int i, pllm_tokens *ids)
{
    const pllm_record *rec = &b->recs[i];
    b->tokens[i] = -1;
    b->keys[i] = 0;
    if (rec->error) return;
    ids->n = 0;
    if (cmd_record_tokens(ps->rt, ps->file, rec, ids, NULL) != PLLM_OK) {
        pllm_error_clear(); /* the main pass reports it */
        return;
    }
    b->tokens[i] = (int64_t)ids->n;
    if (ps->key_fn) b->keys[i] = ps->key_fn(ps->key_ctx, ids->ids, ids->n);
}

/* A pool region: thread 0 reads the next batch while the others tokenize the current one, then
 * joins them; records differ in length, so each thread takes the next record left. */
static void pass_worker(void *arg, int ith, int nth)
{
    (void)nth;
    pass_state *ps = arg;
    if (ith == 0) read_batch(ps, ps->next);
    pass_batch *b = ps->cur;
    for (;;) {
        int i = atomic_fetch_add_explicit(&ps->taken, 1, memory_order_relaxed);
        if (i >= b->n) break;
        tokenize_one(ps, b, i, &ps->bufs[ith]);
    }
}

static int pass_threads(const cmd_runtime *rt)
{
    int n = rt->threads > 0 ? rt->threads : pllm_cpu_online_cores();
    return PLLM_MAX(1, PLLM_MIN(n, PASS_MAX_THREADS));
}

int cmd_first_pass(const cmd_runtime *rt, const char *input, pllm_format format,
                   pllm_extra_fields extra, const pllm_request_params *defaults, int64_t limit,
                   cmd_pass_key_fn key_fn, const void *key_ctx, cmd_pass_visit_fn visit, void *ctx,
                   int64_t *n_records)
{
    if (n_records) *n_records = 0;
    pllm_source *src = NULL;
    if (pllm_source_open(&src, input, format) != PLLM_OK) return -1;
    pllm_source_set_extra_fields(src, extra);
    int nth = pass_threads(rt);
    pass_state ps = {.rt = rt,
                     .file = pllm_source_path(src),
                     .key_fn = key_fn,
                     .key_ctx = key_ctx,
                     .src = src,
                     .defaults = defaults,
                     .limit = limit};
    pass_batch *batches = pllm_calloc(2, sizeof *batches);
    ps.bufs = pllm_calloc((size_t)nth, sizeof *ps.bufs);
    pllm_cpu_pool *pool = NULL;
    int rc = 0;
    if (!batches || !ps.bufs || (nth > 1 && pllm_cpu_pool_create(&pool, nth) != PLLM_OK)) {
        pllm_error_clear();
        fprintf(stderr, "pllm: out of memory for the first pass over %s\n", ps.file);
        rc = 3;
    }
    if (rc == 0) {
        ps.cur = &batches[0];
        ps.next = &batches[1];
        read_batch(&ps, ps.cur);
    }
    while (rc == 0 && ps.cur->n > 0) {
        ps.next->n = 0;
        atomic_store_explicit(&ps.taken, 0, memory_order_relaxed);
        if (pool)
            pllm_cpu_pool_run(pool, pass_worker, &ps);
        else
            pass_worker(&ps, 0, 1);
        pass_batch *b = ps.cur;
        for (int i = 0; i < b->n; i++) {
            if (rc == 0) {
                cmd_pass_item it = {.rec = &b->recs[i],
                                    .index = b->first + i,
                                    .tokens = b->tokens[i],
                                    .key = b->keys[i]};
                rc = visit(ctx, &it);
                if (rc == 0 && n_records) *n_records = it.index + 1;
            }
            pllm_record_free(&b->recs[i]);
        }
        b->n = 0;
        ps.cur = ps.next;
        ps.next = b;
    }
    if (ps.cur) /* a visit that stopped the pass leaves the batch read ahead */
        for (int i = 0; i < ps.cur->n; i++) pllm_record_free(&ps.cur->recs[i]);
    pllm_cpu_pool_free(pool);
    if (ps.bufs)
        for (int t = 0; t < nth; t++) pllm_tokens_free(&ps.bufs[t]);
    free(ps.bufs);
    free(batches);
    pllm_source_close(src); /* ps.file points into it */
    return rc;
}

/* workload.c: the input's sequence lengths for the hybrid KV split (workload.h). */
#include "cmd/workload.h"

#include "cmd/firstpass.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether the engine would run the hybrid layout (pllm_engine_kv_hybrid_off). */
static bool hybrid_possible(const cmd_runtime *rt, const cmd_engine_opts *o)
{
    pllm_kv_layout l;
    memset(&l, 0, sizeof l);
    const pllm_backend *b = &rt->backend;
    if (b->iface->kv_layout(b->ctx, o->ep.block_size > 0 ? o->ep.block_size : 16, &l) != PLLM_OK) {
        pllm_error_clear(); /* the engine reports it */
        return false;
    }
    int32_t len = o->ep.max_model_len > 0 ? o->ep.max_model_len : rt->model->cfg.n_ctx_train;
    return l.n_layer_sw > 0 && l.window > 0 && !pllm_engine_kv_hybrid_off(&o->ep, &l, len);
}

void cmd_workload_init(cmd_workload *w, const cmd_runtime *rt, const cmd_engine_opts *o,
                       const char *input)
{
    memset(w, 0, sizeof *w);
    w->want = strcmp(input, "-") != 0 && hybrid_possible(rt, o);
}

int cmd_workload_add(cmd_workload *w, const pllm_record *rec, int64_t prompt_tokens)
{
    if (!w->want || prompt_tokens < 0) return 0;
    int64_t len = prompt_tokens + PLLM_MAX(rec->params.max_tokens, 1);
    int32_t k = PLLM_MAX(rec->params.n, 1);
    if (w->n + k > w->cap) {
        int64_t c = w->cap ? w->cap * 2 : 1024;
        while (c < w->n + k) c *= 2;
        int32_t *nv = pllm_realloc(w->lens, (size_t)c * sizeof *nv);
        if (!nv) {
            fprintf(stderr, "pllm: out of memory listing the input's sequence lengths\n");
            return 3;
        }
        w->lens = nv;
        w->cap = c;
    }
    for (int32_t i = 0; i < k; i++) w->lens[w->n++] = (int32_t)PLLM_MIN(len, INT32_MAX);
    return 0;
}

static int workload_visit(void *ctx, const cmd_pass_item *it)
{
    return cmd_workload_add(ctx, it->rec, it->tokens);
}

int cmd_workload_scan(const cmd_runtime *rt, cmd_engine_opts *o, const char *input,
                      pllm_format format, pllm_extra_fields extra,
                      const pllm_request_params *defaults, int64_t limit, cmd_workload *w,
                      bool quiet)
{
    o->ep.workload_lens = NULL;
    o->ep.n_workload = 0;
    if (!w->want) return 0;
    double t0 = pllm_now();
    int rc = 0;
    if (!w->filled) {
        rc = cmd_first_pass(rt, input, format, extra, defaults, limit, NULL, NULL, workload_visit,
                            w, NULL);
        if (rc < 0) { /* the input does not open: the main pass reports it */
            pllm_error_clear();
            w->want = false;
            return 0;
        }
    }
    if (rc == 0) {
        if (!quiet) {
            fprintf(stderr, "pllm: hybrid KV: the KV pools are split for the %lld sequences of %s ",
                    (long long)w->n, input);
            if (w->filled)
                fprintf(stderr, "(lengths from the shard plan's pass)\n");
            else
                fprintf(stderr, "(first pass %.1f s)\n", pllm_now() - t0);
        }
        o->ep.workload_lens = w->lens;
        o->ep.n_workload = w->n;
    }
    return rc;
}

void cmd_workload_free(cmd_workload *w)
{
    free(w->lens);
    memset(w, 0, sizeof *w);
}

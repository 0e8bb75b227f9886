/* workload.c: the input's sequence lengths for the hybrid KV split (workload.h). */
#include "cmd/workload.h"

#include "datasets/source.h"

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

int cmd_workload_scan(const cmd_runtime *rt, cmd_engine_opts *o, const char *input,
                      pllm_format format, pllm_extra_fields extra,
                      const pllm_request_params *defaults, int64_t limit, int32_t **lens,
                      bool quiet)
{
    *lens = NULL;
    o->ep.workload_lens = NULL;
    o->ep.n_workload = 0;
    if (!strcmp(input, "-") || !hybrid_possible(rt, o)) return 0;
    double t0 = pllm_now();
    pllm_source *src = NULL;
    if (pllm_source_open(&src, input, format) != PLLM_OK) {
        pllm_error_clear(); /* the main pass reports it */
        return 0;
    }
    pllm_source_set_extra_fields(src, extra);
    const char *file = pllm_source_path(src);
    pllm_tokens ids = {0};
    int32_t *v = NULL;
    int64_t n = 0, cap = 0, n_rec = 0;
    int rc = 0;
    for (;;) {
        pllm_record rec;
        bool eof = false;
        if (pllm_source_next(src, defaults, &rec, &eof) != PLLM_OK) {
            pllm_error_clear(); /* the main pass reports it at the same record */
            break;
        }
        if (eof) break;
        if (limit > 0 && n_rec >= limit) {
            pllm_record_free(&rec);
            break;
        }
        n_rec++;
        ids.n = 0;
        if (rec.error || cmd_record_tokens(rt, file, &rec, &ids, NULL) != PLLM_OK) {
            pllm_error_clear();
            pllm_record_free(&rec);
            continue;
        }
        int64_t len = (int64_t)ids.n + PLLM_MAX(rec.params.max_tokens, 1);
        int32_t k = PLLM_MAX(rec.params.n, 1);
        pllm_record_free(&rec);
        if (n + k > cap) {
            int64_t c = cap ? cap * 2 : 1024;
            while (c < n + k) c *= 2;
            int32_t *nv = pllm_realloc(v, (size_t)c * sizeof *nv);
            if (!nv) {
                fprintf(stderr, "pllm: out of memory listing the input's sequence lengths\n");
                rc = 3;
                break;
            }
            v = nv;
            cap = c;
        }
        for (int32_t i = 0; i < k; i++) v[n++] = (int32_t)PLLM_MIN(len, INT32_MAX);
    }
    pllm_tokens_free(&ids);
    if (!quiet && rc == 0)
        fprintf(stderr,
                "pllm: hybrid KV: the KV pools are split for the %lld sequences of %s (first "
                "pass %.1f s)\n",
                (long long)n, file, pllm_now() - t0);
    pllm_source_close(src); /* file points into it */
    if (rc != 0) {
        free(v);
        return rc;
    }
    *lens = v;
    o->ep.workload_lens = v;
    o->ep.n_workload = n;
    return 0;
}

/*
 * cuda_moe.c: a mixture-of-experts layer's MLP on the device (kernels in cuda/moe.cu): the router
 * GEMM (cuBLAS), routing and grouping of the (token, expert) rows by expert, the experts' gate/up
 * and down projections as grouped GEMMs over the grouped rows (each weight tile read once per
 * step per row tile of an expert), SwiGLU, and the weighted sum per token into c->proj. Every
 * launch's shape depends on the token count only, so decode steps stay capturable in graphs.
 */
#include "cuda/cuda_internal.h"

#include <string.h>

void pllm_cuda_moe_free(cuda_ctx *c)
{
    cuda_moe_ws *m = &c->moe;
    void *bufs[] = {m->logits, m->w,       m->xg,       m->gu,  m->h,  m->y,  m->sel,
                    m->row_of, m->row_tok, m->tile_exp, m->off, m->gs, m->hs, m->ys};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(bufs); i++) pllm_cuda_free(c->dev, bufs[i]);
    c->workspace_bytes -= m->bytes;
    memset(m, 0, sizeof *m);
}

static pllm_status alloc(cuda_ctx *c, void **p, size_t bytes, const char *what, int32_t T)
{
    pllm_status st = pllm_cuda_alloc(c->dev, p, bytes ? bytes : 16);
    if (st != PLLM_OK)
        return pllm_error_prefix(st,
                                 "cuda backend: MoE workspace (%s) for %d tokens: %.1f MiB: ", what,
                                 T, (double)bytes / (1 << 20));
    c->moe.bytes += bytes;
    c->workspace_bytes += bytes; /* (pllm_cuda_moe_free takes both back) */
    return PLLM_OK;
}

size_t pllm_cuda_moe_bytes(const cuda_ctx *c, int32_t T)
{
    const pllm_model_config *cfg = &c->model->cfg;
    if (!cfg->n_expert) return 0;
    const size_t NE = (size_t)cfg->n_expert, K = (size_t)cfg->n_expert_used,
                 E = (size_t)cfg->n_embd, F = (size_t)cfg->n_ff_exp,
                 R = (size_t)pllm_cuda_moe_rows(T, (int32_t)K, (int32_t)NE);
    const size_t FS = (size_t)cfg->n_ff_shexp, LD = NE + (FS ? 1 : 0);
    return 4 * ((size_t)T * LD + 3 * (size_t)T * K + R + R / PLLM_CUDA_MOE_TILE + NE + 1 +
                R * (2 * E + 3 * F) + (FS ? (size_t)T * E : 0)) +
           (size_t)T * 3 * FS * c->wsz;
}

pllm_status pllm_cuda_moe_reserve(cuda_ctx *c, int32_t T)
{
    const pllm_model_config *cfg = &c->model->cfg;
    if (!cfg->n_expert || T <= c->moe.cap_tokens) return PLLM_OK;
    pllm_cuda_moe_free(c);
    cuda_moe_ws *m = &c->moe;
    const size_t NE = (size_t)cfg->n_expert, K = (size_t)cfg->n_expert_used,
                 E = (size_t)cfg->n_embd, F = (size_t)cfg->n_ff_exp, TK = (size_t)T * K;
    const int32_t R = pllm_cuda_moe_rows(T, (int32_t)K, (int32_t)NE);
    pllm_status st;
    const size_t FS = (size_t)cfg->n_ff_shexp, LD = NE + (FS ? 1 : 0);
    if ((st = alloc(c, (void **)&m->logits, 4 * (size_t)T * LD, "router logits", T)) ||
        (st = alloc(c, (void **)&m->w, 4 * TK, "weights", T)) ||
        (st = alloc(c, (void **)&m->sel, 4 * TK, "choices", T)) ||
        (st = alloc(c, (void **)&m->row_of, 4 * TK, "rows", T)) ||
        (st = alloc(c, (void **)&m->row_tok, 4 * (size_t)R, "row tokens", T)) ||
        (st = alloc(c, (void **)&m->tile_exp, 4 * (size_t)R / PLLM_CUDA_MOE_TILE, "tiles", T)) ||
        (st = alloc(c, (void **)&m->off, 4 * (NE + 1), "offsets", T)) ||
        (st = alloc(c, (void **)&m->xg, 4 * (size_t)R * E, "grouped inputs", T)) ||
        (st = alloc(c, (void **)&m->gu, 4 * (size_t)R * 2 * F, "gate/up", T)) ||
        (st = alloc(c, (void **)&m->h, 4 * (size_t)R * F, "swiglu", T)) ||
        (st = alloc(c, (void **)&m->y, 4 * (size_t)R * E, "expert outputs", T)) ||
        (FS && ((st = alloc(c, &m->gs, c->wsz * (size_t)T * 2 * FS, "shared gate/up", T)) ||
                (st = alloc(c, &m->hs, c->wsz * (size_t)T * FS, "shared swiglu", T)) ||
                (st = alloc(c, (void **)&m->ys, 4 * (size_t)T * E, "shared output", T))))) {
        pllm_cuda_moe_free(c);
        return st;
    }
    m->cap_tokens = T;
    return PLLM_OK;
}

pllm_status pllm_cuda_moe_forward(cuda_ctx *c, const cuda_layer *w, int32_t T)
{
    const pllm_model_config *cfg = &c->model->cfg;
    cuda_moe_ws *m = &c->moe;
    const int32_t NE = cfg->n_expert, K = cfg->n_expert_used, E = cfg->n_embd, F = cfg->n_ff_exp;
    const int32_t R = pllm_cuda_moe_rows(T, K, NE);
    if (T > m->cap_tokens)
        return pllm_errorf(PLLM_ERR_INTERNAL,
                           "cuda backend: MoE workspace for %d tokens, step has %d", m->cap_tokens,
                           T);
    if (T == 0) return PLLM_OK;
    const int32_t FS = cfg->n_ff_shexp, LD = NE + (FS ? 1 : 0); /* + the shared expert's gate */
    pllm_cuda_gemm_args g = {.m = T,
                             .n = LD,
                             .k = E,
                             .batch = 1,
                             .a = c->xb,
                             .a_dtype = c->wdt,
                             .lda = E,
                             .b = w->w_router,
                             .b_dtype = c->wdt,
                             .ldb = E,
                             .trans_b = true,
                             .c = m->logits,
                             .c_dtype = PLLM_DTYPE_F32,
                             .ldc = LD,
                             .alpha = 1.0f,
                             .beta = 0.0f};
    PLLM_TRY(pllm_cuda_gemm(c->dev, &g));
    const pllm_cuda_moe_args a = {.logits = m->logits,
                                  .logits_ld = LD,
                                  .x = c->xb,
                                  .x_dtype = c->wdt,
                                  .sel = m->sel,
                                  .w = m->w,
                                  .row_of = m->row_of,
                                  .row_tok = m->row_tok,
                                  .tile_exp = m->tile_exp,
                                  .off = m->off,
                                  .xg = m->xg,
                                  .n_tokens = T,
                                  .n_expert = NE,
                                  .k = K,
                                  .dim = E,
                                  .n_rows = R,
                                  .norm = cfg->moe_norm_topk};
    PLLM_TRY(pllm_cuda_moe_route(c->dev, &a));
    PLLM_TRY(
        pllm_cuda_moe_gemm(c->dev, m->gu, m->xg, w->w_gu_exp, c->wdt, m->tile_exp, R, 2 * F, E));
    PLLM_TRY(pllm_cuda_swiglu(c->dev, m->h, m->gu, PLLM_DTYPE_F32, R, F));
    PLLM_TRY(pllm_cuda_moe_gemm(c->dev, m->y, m->h, w->w_down_exp, c->wdt, m->tile_exp, R, E, F));
    if (FS) { /* the shared expert, as the dense MLP over every token */
        pllm_cuda_gemm_args s = g;
        s.n = 2 * FS;
        s.b = w->w_gu_sh;
        s.c = m->gs;
        s.c_dtype = c->wdt;
        s.ldc = 2 * FS;
        PLLM_TRY(pllm_cuda_gemm(c->dev, &s));
        PLLM_TRY(pllm_cuda_swiglu(c->dev, m->hs, m->gs, c->wdt, T, FS));
        s.n = E;
        s.k = FS;
        s.a = m->hs;
        s.lda = FS;
        s.b = w->w_down_sh;
        s.ldb = FS;
        s.c = m->ys;
        s.c_dtype = PLLM_DTYPE_F32;
        s.ldc = E;
        PLLM_TRY(pllm_cuda_gemm(c->dev, &s));
    }
    return pllm_cuda_moe_combine(c->dev, c->proj, m->y, m->row_of, m->w, T, K, E, FS ? m->ys : NULL,
                                 m->logits + NE, LD);
}

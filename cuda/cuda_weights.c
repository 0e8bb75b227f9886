/*
 * cuda_weights.c: the one-time upload of a model's weights to the device.
 *
 * Each matrix is converted row by row on the host into a pinned staging buffer (two buffers,
 * so converting one chunk overlaps the copy of the other) and copied to its place in the
 * device matrix: rows already in the device dtype are copied as they are; any other dtype is
 * expanded with the reference dequantizer (pllm_dequantize_row, exact) and rounded to the
 * device dtype (round to nearest even). Q, K, V are stacked into one matrix and gate over up
 * into another; 1-D vectors (norms, biases) are F32.
 */
#include "cuda/cuda_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

#define STAGE_BYTES ((size_t)8 << 20)

typedef struct stager {
    cuda_ctx *c;
    void *buf[2];
    pllm_cuda_event *ev[2];
    bool used[2];
    int slot;
    float *row; /* [widest row] F32 */
    size_t row_cap;
} stager;

static pllm_status stager_init(stager *s, cuda_ctx *c, int64_t widest)
{
    memset(s, 0, sizeof *s);
    s->c = c;
    for (int i = 0; i < 2; i++) {
        PLLM_TRY(pllm_cuda_host_alloc(c->dev, &s->buf[i], STAGE_BYTES));
        PLLM_TRY(pllm_cuda_event_create(c->dev, &s->ev[i]));
    }
    s->row_cap = (size_t)widest;
    s->row = pllm_malloc(sizeof(float) * s->row_cap);
    return s->row ? PLLM_OK : PLLM_ERR_NOMEM;
}

static void stager_free(stager *s)
{
    for (int i = 0; i < 2; i++) {
        if (s->used[i]) (void)pllm_cuda_event_sync(s->ev[i]);
        pllm_cuda_host_free(s->c->dev, s->buf[i]);
        pllm_cuda_event_free(s->ev[i]);
    }
    free(s->row);
}

/* Convert row src (n elements of dtype t) into dst (n elements of the device dtype). */
static pllm_status convert_row(stager *s, void *dst, const void *src, pllm_dtype t, int64_t n,
                               const pllm_tensor *w, int64_t r)
{
    const cuda_ctx *c = s->c;
    if (t == c->wdt) {
        memcpy(dst, src, (size_t)n * c->wsz);
        return PLLM_OK;
    }
    pllm_dequantize_row(s->row, src, t, n);
    if (c->wdt == PLLM_DTYPE_F32) {
        memcpy(dst, s->row, sizeof(float) * (size_t)n);
    } else if (c->wdt == PLLM_DTYPE_BF16) {
        uint16_t *o = dst;
        for (int64_t i = 0; i < n; i++) o[i] = pllm_fp32_to_bf16(s->row[i]);
    } else {
        uint16_t *o = dst;
        int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
        /* 8 at a time, round to nearest even: the same halves as pllm_fp32_to_fp16 */
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(o + i), _mm256_cvtps_ph(_mm256_loadu_ps(s->row + i),
                                                                 _MM_FROUND_TO_NEAREST_INT));
#endif
        for (; i < n; i++) o[i] = pllm_fp32_to_fp16(s->row[i]);
        for (i = 0; i < n; i++) {
            if ((o[i] & 0x7c00) == 0x7c00 && isfinite(s->row[i]))
                return pllm_errorf(
                    PLLM_ERR_RANGE,
                    "cuda backend: tensor '%s' row %lld column %lld: %g does not fit in F16 "
                    "(use BF16 or F32 weights)",
                    w->name, (long long)r, (long long)i, (double)s->row[i]);
        }
    }
    return PLLM_OK;
}

/* Upload matrix w into rows [row0, row0 + w->n_rows) of the device matrix dst (n_cols wide). */
static pllm_status upload_matrix(stager *s, void *dst, int64_t row0, const pllm_tensor *w,
                                 int64_t n_cols)
{
    cuda_ctx *c = s->c;
    if (w->n_cols != n_cols || !w->data)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "cuda backend: tensor '%s' has %lld columns, the model needs %lld",
                           w->name, (long long)w->n_cols, (long long)n_cols);
    if (!pllm_dtype_supported(w->dtype))
        return pllm_errorf(
            PLLM_ERR_UNSUPPORTED,
            "cuda backend: tensor '%s' has dtype %s, which this build cannot convert", w->name,
            pllm_dtype_name(w->dtype));
    const size_t row_dev = (size_t)n_cols * c->wsz;
    const int64_t per_chunk = PLLM_MAX(1, (int64_t)(STAGE_BYTES / row_dev));
    if ((size_t)n_cols > s->row_cap || row_dev > STAGE_BYTES)
        return pllm_errorf(
            PLLM_ERR_INTERNAL,
            "cuda backend: tensor '%s' rows of %lld columns exceed the staging buffer", w->name,
            (long long)n_cols);
    for (int64_t r0 = 0; r0 < w->n_rows; r0 += per_chunk) {
        const int64_t n = PLLM_MIN(per_chunk, w->n_rows - r0);
        const int b = s->slot;
        if (s->used[b]) PLLM_TRY(pllm_cuda_event_sync(s->ev[b])); /* its previous copy is done */
        for (int64_t r = 0; r < n; r++)
            PLLM_TRY(convert_row(s, (uint8_t *)s->buf[b] + (size_t)r * row_dev,
                                 (const uint8_t *)w->data + (size_t)(r0 + r) * w->row_bytes,
                                 w->dtype, n_cols, w, r0 + r));
        PLLM_TRY(pllm_cuda_upload(c->dev, (uint8_t *)dst + (size_t)(row0 + r0) * row_dev, s->buf[b],
                                  (size_t)n * row_dev));
        PLLM_TRY(pllm_cuda_event_record(c->dev, s->ev[b]));
        s->used[b] = true;
        s->slot ^= 1;
    }
    return PLLM_OK;
}

static pllm_status alloc_track(cuda_ctx *c, void **p, size_t bytes, const char *what)
{
    pllm_status st = pllm_cuda_alloc(c->dev, p, bytes);
    if (st != PLLM_OK)
        return pllm_error_prefix(st, "cuda backend: %s (%.1f MiB of weights placed so far): ", what,
                                 (double)c->weight_bytes / (1 << 20));
    c->weight_bytes += bytes;
    return PLLM_OK;
}

static pllm_status upload_vec(cuda_ctx *c, float **out, const float *v, int64_t n, const char *what)
{
    PLLM_TRY(alloc_track(c, (void **)out, sizeof(float) * (size_t)n, what));
    return pllm_cuda_upload(c->dev, *out, v, sizeof(float) * (size_t)n);
}

/* The dense MLP: gate over up, and down. */
static pllm_status upload_mlp(stager *s, cuda_layer *d, const pllm_layer_weights *w)
{
    cuda_ctx *c = s->c;
    const int64_t E = c->model->cfg.n_embd, F = c->model->cfg.n_ff;
    PLLM_TRY(alloc_track(c, &d->w_gu, (size_t)(2 * F * E) * c->wsz, "w_gate/w_up"));
    PLLM_TRY(upload_matrix(s, d->w_gu, 0, &w->w_gate, E));
    PLLM_TRY(upload_matrix(s, d->w_gu, F, &w->w_up, E));
    PLLM_TRY(alloc_track(c, &d->w_down, (size_t)(E * F) * c->wsz, "w_down"));
    return upload_matrix(s, d->w_down, 0, &w->w_down, F);
}

/* A MoE layer: the router, expert e's gate and up rows at e * 2 n_ff_exp, its down rows at
 * e * n_embd (cuda_internal.h). */
static pllm_status upload_experts(stager *s, cuda_layer *d, const pllm_layer_weights *w)
{
    cuda_ctx *c = s->c;
    const pllm_model_config *cfg = &c->model->cfg;
    const int64_t E = cfg->n_embd, F = cfg->n_ff_exp, NE = cfg->n_expert;
    const int64_t FS = cfg->n_ff_shexp;
    PLLM_TRY(alloc_track(c, &d->w_router, (size_t)((NE + (FS ? 1 : 0)) * E) * c->wsz, "router"));
    PLLM_TRY(upload_matrix(s, d->w_router, 0, &w->router, E));
    if (FS) { /* Qwen2-MoE: the shared expert's gate as the router's last row, and its MLP */
        if (!w->shexp_inp)
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "cuda backend: a MoE layer without its shared expert");
        const pllm_tensor gv = {.data = w->shexp_inp,
                                .dtype = PLLM_DTYPE_F32,
                                .n_rows = 1,
                                .n_cols = E,
                                .row_bytes = sizeof(float) * (size_t)E,
                                .name = "shared expert gate"};
        PLLM_TRY(upload_matrix(s, d->w_router, NE, &gv, E));
        PLLM_TRY(alloc_track(c, &d->w_gu_sh, (size_t)(2 * FS * E) * c->wsz, "shared gate/up"));
        PLLM_TRY(upload_matrix(s, d->w_gu_sh, 0, &w->shexp_gate_w, E));
        PLLM_TRY(upload_matrix(s, d->w_gu_sh, FS, &w->shexp_up, E));
        PLLM_TRY(alloc_track(c, &d->w_down_sh, (size_t)(E * FS) * c->wsz, "shared down"));
        PLLM_TRY(upload_matrix(s, d->w_down_sh, 0, &w->shexp_down, FS));
    }
    PLLM_TRY(alloc_track(c, &d->w_gu_exp, (size_t)(NE * 2 * F * E) * c->wsz, "experts' gate/up"));
    PLLM_TRY(alloc_track(c, &d->w_down_exp, (size_t)(NE * E * F) * c->wsz, "experts' down"));
    for (int64_t e = 0; e < NE; e++) {
        PLLM_TRY(upload_matrix(s, d->w_gu_exp, e * 2 * F, &w->exp_gate[e], E));
        PLLM_TRY(upload_matrix(s, d->w_gu_exp, e * 2 * F + F, &w->exp_up[e], E));
        PLLM_TRY(upload_matrix(s, d->w_down_exp, e * E, &w->exp_down[e], F));
    }
    return PLLM_OK;
}

pllm_status pllm_cuda_weights_upload(cuda_ctx *c)
{
    const pllm_model *m = c->model;
    const pllm_model_config *cfg = &m->cfg;
    const int64_t E = cfg->n_embd, qd = (int64_t)cfg->n_head * cfg->head_dim,
                  kvd = (int64_t)cfg->n_head_kv * cfg->head_dim, F = cfg->n_ff, V = cfg->n_vocab;
    const double t0 = pllm_now();
    /* the whole set must fit: say so before converting anything */
    size_t need = (size_t)(V * E * (m->cfg.tied_embeddings ? 1 : 2)) * c->wsz;
    for (int32_t l = 0; l < cfg->n_layer; l++) /* attention, and the MLP or the experts */
        need += (size_t)((qd + 2 * kvd) * E + E * qd +
                         (pllm_layer_is_moe(&m->layers[l])
                              ? (int64_t)cfg->n_expert * (E + 3 * (int64_t)cfg->n_ff_exp * E) +
                                    (E + 3 * (int64_t)cfg->n_ff_shexp * E)
                              : 3 * F * E)) *
                c->wsz;
    if (need > c->info.free_bytes)
        return pllm_errorf(PLLM_ERR_NOMEM,
                           "cuda backend: the weights need %.2f GiB as %s on the device, which has "
                           "%.2f GiB free of %.2f GiB",
                           (double)need / (1 << 30), pllm_dtype_name(c->wdt),
                           (double)c->info.free_bytes / (1 << 30),
                           (double)c->info.total_bytes / (1 << 30));

    stager s;
    pllm_status st = stager_init(
        &s, c, PLLM_MAX(PLLM_MAX(PLLM_MAX(E, F), qd), PLLM_MAX(cfg->n_ff_exp, cfg->n_ff_shexp)));
    float *bias = NULL;
    const size_t freq_bytes = sizeof(double) * (size_t)PLLM_MAX(cfg->rope_dim / 2, 1);
    double *freq = NULL; /* host copy of inv_freq: the kernel reads the device one */
    if (st != PLLM_OK) goto done;
    c->layers = pllm_calloc((size_t)cfg->n_layer, sizeof *c->layers);
    freq = pllm_calloc(1, freq_bytes);
    bias = cfg->has_qkv_bias ? pllm_malloc(sizeof(float) * (size_t)(qd + 2 * kvd)) : NULL;
    if (!c->layers || !freq || (cfg->has_qkv_bias && !bias)) {
        st = PLLM_ERR_NOMEM;
        goto done;
    }

    if ((st = alloc_track(c, &c->tok_embd, (size_t)(V * E) * c->wsz, "token embeddings")) ||
        (st = upload_matrix(&s, c->tok_embd, 0, &m->tok_embd, E)))
        goto done;
    if (m->cfg.tied_embeddings || m->output.data == m->tok_embd.data) {
        c->output = c->tok_embd;
    } else if ((st = alloc_track(c, &c->output, (size_t)(V * E) * c->wsz, "output projection")) ||
               (st = upload_matrix(&s, c->output, 0, &m->output, E))) {
        goto done;
    }
    if ((st = upload_vec(c, &c->output_norm, m->output_norm, E, "output norm"))) goto done;
    for (int32_t l = 0; l < cfg->n_layer; l++) {
        const pllm_layer_weights *w = &m->layers[l];
        cuda_layer *d = &c->layers[l];
        if ((st = alloc_track(c, &d->w_qkv, (size_t)((qd + 2 * kvd) * E) * c->wsz, "wq/wk/wv")) ||
            (st = upload_matrix(&s, d->w_qkv, 0, &w->wq, E)) ||
            (st = upload_matrix(&s, d->w_qkv, qd, &w->wk, E)) ||
            (st = upload_matrix(&s, d->w_qkv, qd + kvd, &w->wv, E)) ||
            (st = alloc_track(c, &d->w_o, (size_t)(E * qd) * c->wsz, "wo")) ||
            (st = upload_matrix(&s, d->w_o, 0, &w->wo, qd)) ||
            (st = pllm_layer_is_moe(w) ? upload_experts(&s, d, w) : upload_mlp(&s, d, w)) ||
            (st = upload_vec(c, &d->attn_norm, w->attn_norm, E, "attn norm")) ||
            (st = upload_vec(c, &d->ffn_norm, w->ffn_norm, E, "ffn norm")))
            goto done;
        d->window = w->window;
        if (cfg->has_post_norms) {
            if (!w->attn_post_norm || !w->ffn_post_norm) {
                st = pllm_errorf(
                    PLLM_ERR_FORMAT,
                    "cuda backend: layer %d has no post-norms but the model says it has", l);
                goto done;
            }
            if ((st = upload_vec(c, &d->attn_post_norm, w->attn_post_norm, E, "attn post norm")) ||
                (st = upload_vec(c, &d->ffn_post_norm, w->ffn_post_norm, E, "ffn post norm")))
                goto done;
        }
        if (cfg->has_qk_norm) {
            if (!w->q_norm || !w->k_norm) {
                st = pllm_errorf(PLLM_ERR_FORMAT,
                                 "cuda backend: layer %d has no q/k norm but the model says it has",
                                 l);
                goto done;
            }
            if ((st = upload_vec(c, &d->q_norm, w->q_norm, cfg->head_dim, "q norm")) ||
                (st = upload_vec(c, &d->k_norm, w->k_norm, cfg->head_dim, "k norm")))
                goto done;
        }
        if (cfg->has_qkv_bias) {
            if (!w->bq || !w->bk || !w->bv) {
                st = pllm_errorf(
                    PLLM_ERR_FORMAT,
                    "cuda backend: layer %d has no Q/K/V bias but the model says it has", l);
                goto done;
            }
            memcpy(bias, w->bq, sizeof(float) * (size_t)qd);
            memcpy(bias + qd, w->bk, sizeof(float) * (size_t)kvd);
            memcpy(bias + qd + kvd, w->bv, sizeof(float) * (size_t)kvd);
            /* the upload reads bias later: sync before it is rewritten */
            if ((st = upload_vec(c, &d->b_qkv, bias, qd + 2 * kvd, "qkv bias")) ||
                (st = pllm_cuda_sync(c->dev)))
                goto done;
        }
    }
    /* inv_freq lives in device memory: qkv_rope_kernel reads it through its argument struct.
     * (It was a host allocation once: every forward pass on a real GPU faulted.) */
    pllm_backend_rope_freqs(freq, cfg, m->rope_freq_factors);
    if ((st = alloc_track(c, (void **)&c->inv_freq, freq_bytes, "rope frequencies")) ||
        (st = pllm_cuda_upload(c->dev, c->inv_freq, freq, freq_bytes)))
        goto done;
    if (cfg->rope_scaling == PLLM_ROPE_SCALING_LONGROPE) {
        if (!m->rope_freq_factors_long) {
            st = pllm_errorf(PLLM_ERR_FORMAT, "cuda backend: LongRoPE without its long factors");
            goto done;
        }
        /* the upload reads freq later: sync before it is rewritten */
        if ((st = pllm_cuda_sync(c->dev))) goto done;
        pllm_backend_rope_freqs(freq, cfg, m->rope_freq_factors_long);
        if ((st =
                 alloc_track(c, (void **)&c->inv_freq_long, freq_bytes, "rope long frequencies")) ||
            (st = pllm_cuda_upload(c->dev, c->inv_freq_long, freq, freq_bytes)))
            goto done;
    }
    if (cfg->sliding_window > 0) {
        if ((st = pllm_cuda_sync(c->dev))) goto done;
        pllm_backend_rope_freqs_local(freq, cfg);
        if ((st = alloc_track(c, (void **)&c->inv_freq_local, freq_bytes,
                              "rope local frequencies")) ||
            (st = pllm_cuda_upload(c->dev, c->inv_freq_local, freq, freq_bytes)))
            goto done;
    }
    st = pllm_cuda_sync(c->dev);
done:
    stager_free(&s);
    free(bias);
    free(freq);
    c->load_seconds = pllm_now() - t0;
    return st;
}

void pllm_cuda_weights_free(cuda_ctx *c)
{
    if (c->layers) {
        for (int32_t l = 0; l < c->model->cfg.n_layer; l++) {
            cuda_layer *d = &c->layers[l];
            pllm_cuda_free(c->dev, d->w_qkv), pllm_cuda_free(c->dev, d->w_o),
                pllm_cuda_free(c->dev, d->w_gu);
            pllm_cuda_free(c->dev, d->w_down), pllm_cuda_free(c->dev, d->attn_norm);
            pllm_cuda_free(c->dev, d->ffn_norm), pllm_cuda_free(c->dev, d->b_qkv);
            pllm_cuda_free(c->dev, d->q_norm), pllm_cuda_free(c->dev, d->k_norm);
            pllm_cuda_free(c->dev, d->attn_post_norm), pllm_cuda_free(c->dev, d->ffn_post_norm);
            pllm_cuda_free(c->dev, d->w_router), pllm_cuda_free(c->dev, d->w_gu_exp);
            pllm_cuda_free(c->dev, d->w_down_exp), pllm_cuda_free(c->dev, d->w_gu_sh);
            pllm_cuda_free(c->dev, d->w_down_sh);
        }
        free(c->layers);
        c->layers = NULL;
    }
    if (c->output != c->tok_embd) pllm_cuda_free(c->dev, c->output);
    pllm_cuda_free(c->dev, c->tok_embd);
    pllm_cuda_free(c->dev, c->output_norm);
    c->tok_embd = c->output = NULL;
    c->output_norm = NULL;
    pllm_cuda_free(c->dev, c->inv_freq);
    pllm_cuda_free(c->dev, c->inv_freq_long);
    pllm_cuda_free(c->dev, c->inv_freq_local);
    c->inv_freq = c->inv_freq_long = c->inv_freq_local = NULL;
}
